/* rsc.h - what the emulated ragged softmax cluster kernels (one translation
 * unit per config, rsc_config.cc) and their test share: a config, a call,
 * and the registry each unit adds its runner to. */
#ifndef SCREE_EMU_RSC_H
#define SCREE_EMU_RSC_H

#include <cstddef>
#include <cstdint>
#include <vector>

struct rsc_cfg {
  int x, y;                                          /* dtype codes */
  int tpr, vec, warps, stok, stages, csize, e1;      /* the config's fields */
  size_t smem;                                       /* the kernel's layout, bytes */
};

struct rsc_call {
  const void *x;
  void *y;
  const int *cu_seqlens;
  int cols, batch, nstrips;
  long long x_stride, y_stride;
  float scale_log2;
  int *counters;        /* 2 ints, zero; the kernel leaves them zero */
  int *plan;            /* batch + 1 ints, for the plan kernel (large batches) */
  int clusters;         /* the grid, in clusters */
  int resident;         /* clusters alive at once */
  uint64_t seed;
};

/* Runs the plan kernel, then the main kernel; "" or what went wrong. */
typedef const char *(*rsc_run)(const rsc_call &);

struct rsc_entry {
  int unit; /* the config's place in tests/CMakeLists.txt's list, from 0 */
  rsc_cfg cfg;
  rsc_run run;
};
std::vector<rsc_entry> &rsc_registry();

struct rsc_registrar {
  rsc_registrar(int unit, const rsc_cfg &c, rsc_run r) {
    rsc_registry().push_back(rsc_entry{unit, c, r});
  }
};

/* tests/emu/host_shim.c: the op's own host code. */
extern "C" {
size_t emu_host_cluster_smem(int x, int y, const int *fields);
int emu_host_cluster_check(int x, int y, const int *fields, char *why, size_t n);
void emu_shape_inputs(const void *args, void *x, const int *cu_seqlens);
void emu_reference(const void *args, const void *x, const int *cu_seqlens, void *y);
}

#endif
