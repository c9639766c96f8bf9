/* cek.h - what the emulated cross-entropy keep kernels (one translation
 * unit per config, cek_config.cc) and their test share: a config, a call,
 * and the registry each unit adds its runner to. */
#ifndef SCREE_EMU_CEK_H
#define SCREE_EMU_CEK_H

#include <cstddef>
#include <cstdint>
#include <vector>

struct cek_cfg {
  int dtype;                            /* the logits' dtype code */
  int tpr, rows, vec, cache, csize;     /* the config's fields */
};

struct cek_call {
  const void *logits;
  const long long *targets;
  float *loss, *lse;
  long long rows;
  int vocab;
  long long stride, ignore_index;
  void *dlogits;
  long long dstride;
  float eps, z, grad_scale;             /* grad_scale as the host passes it (0 made 1) */
  int mean;                             /* count the rows kept first (scree_ce_count) */
  unsigned long long *count;            /* 8 bytes for it */
  int clusters;                         /* the grid, in clusters */
  int resident;                         /* clusters alive at once */
  uint64_t seed;
};

typedef const char *(*cek_run)(const cek_call &);

struct cek_entry {
  int unit;
  cek_cfg cfg;
  cek_run run;
};
std::vector<cek_entry> &cek_registry();

struct cek_registrar {
  cek_registrar(int unit, const cek_cfg &c, cek_run r) {
    cek_registry().push_back(cek_entry{unit, c, r});
  }
};

#endif
