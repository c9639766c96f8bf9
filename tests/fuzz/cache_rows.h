/* cache_rows.h - the winners and bad configs that the cache harness's fresh
 * user cache starts with (fuzz_cache.c) and that the seed cache shares keys
 * with (make_cache_seed.c), so that merging the seed adds, replaces and
 * conflicts. */
#ifndef SCREE_FUZZ_CACHE_ROWS_H
#define SCREE_FUZZ_CACHE_ROWS_H

#include <stdio.h>
#include <string.h>

#include "base/sha256.h"
#include "store/cache.h"

/* One winner: its key, config and median. */
typedef struct fuzz_row {
  const char *op, *bucket, *dtype;
  int causal;
  const char *config;
  double median_us;
} fuzz_row;

/* The user cache's own rows (arch sm_90). */
static const fuzz_row fuzz_mine[] = {
    {"rmsnorm", "rows<=16384,cols=4096", "x=fp16,w=fp16,y=fp16", 0,
     "tpr=256,rows=1,vec=4,cache=8", 80.0},
    {"attention", "group=4,heads_kv=8,max_q<=4096,max_k<=4096,total_q<=65536",
     "dtype=bf16,head_dim=128,causal=1,window=0", 1, "bm=128,bn=64,warps=4,stages=2,qreg=0,sched=1",
     400.0},
};

/* The seed's rows: the first is faster than the user cache's (replaced, a
 * conflict), the second slower (a conflict, kept), the third new (added). */
static const fuzz_row fuzz_theirs[] = {
    {"rmsnorm", "rows<=16384,cols=4096", "x=fp16,w=fp16,y=fp16", 0,
     "tpr=128,rows=1,vec=8,cache=4", 70.0},
    {"attention", "group=4,heads_kv=8,max_q<=4096,max_k<=4096,total_q<=65536",
     "dtype=bf16,head_dim=128,causal=1,window=0", 1, "bm=64,bn=64,warps=4,stages=2,qreg=1,sched=1",
     500.0},
    {"softmax", "rows<=1024,cols=32000", "x=bf16,y=bf16", 0, "tpr=512,rows=1,vec=8,cache=8",
     12.5},
};

/* Fills e (key on sm_90, the source hash of "fuzz", a small cubin that names
 * the row) from r; the cubin is a static buffer, valid until the next call. */
static inline void fuzz_row_entry(const fuzz_row *r, scree__centry *e) {
  static char cubin[256];
  memset(e, 0, sizeof *e);
  snprintf(e->key.op, sizeof e->key.op, "%s", r->op);
  snprintf(e->key.bucket, sizeof e->key.bucket, "%s", r->bucket);
  snprintf(e->key.dtype, sizeof e->key.dtype, "%s", r->dtype);
  e->key.causal = r->causal;
  snprintf(e->key.arch, sizeof e->key.arch, "sm_90");
  scree__sha256_hex("fuzz", 4, e->key.src_hash);
  snprintf(e->config, sizeof e->config, "%s", r->config);
  e->median_us = r->median_us;
  e->spread_us = r->median_us / 100;
  snprintf(e->device_name, sizeof e->device_name, "NVIDIA H100 80GB HBM3");
  e->sm_count = 132;
  e->driver_version = 13000;
  e->nvrtc_version = 13000;
  e->created = 1700000000;
  snprintf(cubin, sizeof cubin, "cubin of %s %s", r->op, r->config);
  e->cubin = cubin;
  e->cubin_size = strlen(cubin);
}

#endif
