/* pa.h - what the emulated paged attention kernels (one translation unit
 * per config, pa_config.cc) and their test share: a config, a call, and the
 * registry each unit adds its runner to. */
#ifndef SCREE_EMU_PA_H
#define SCREE_EMU_PA_H

#include <cstddef>
#include <cstdint>
#include <vector>

struct pa_cfg {
  int dtype, d;                         /* the variant: 1 fp16, 2 bf16; head_dim */
  int bm, bn, warps, stages, split;     /* the config's fields */
  size_t smem;                          /* the kernel's layout, bytes */
  int threads;
};

/* The main kernel's arguments (ops/paged_attention.c's launch), and how to
 * run it. */
struct pa_call {
  const void *q, *k_cache, *v_cache;
  void *out;
  float *lse;
  const int *block_table, *seqlens_k, *cu_q;
  long long q_ts, q_hs, o_ts, o_hs, c_ps, c_ts, c_hs, bt_stride, total_q;
  int batch, heads_kv, group, logp;
  float sl2, cap_in, cap_out;
  int causal, wl, wr;
  int *plan;
  float *part, *plse;
  long long target;
  int self_plan;
  int *zeroed;
  unsigned grid;   /* CTAs of the main kernel */
  int resident;    /* CTAs alive at once */
  uint64_t seed;
};

/* Runs the plan kernel (unless self_plan), then the main kernel; "" or
 * what went wrong. */
typedef const char *(*pa_run)(const pa_call &);

struct pa_entry {
  int unit; /* the config's place in tests/CMakeLists.txt's list, from 0 */
  pa_cfg cfg;
  pa_run run;
};
std::vector<pa_entry> &pa_registry();

struct pa_registrar {
  pa_registrar(int unit, const pa_cfg &c, pa_run r) {
    pa_registry().push_back(pa_entry{unit, c, r});
  }
};

/* tests/emu/paged_shim.c: the op's own host code. */
extern "C" {
size_t emu_pa_smem(int dtype, int d, const int *fields);
int emu_pa_check(int dtype, int d, const int *fields, char *why, size_t n);
void emu_pa_reference(const void *args, void *const *host);
}

#endif
