/*
 * hot_path.c - host time per call of a cache-hit op call, public API only,
 * so that one source builds against any scree version and two versions can
 * be compared on one machine. The buffers come from the driver directly
 * (dlopen'd libcuda), the calls are queued on the legacy stream; each round
 * times a batch of calls on the host and then waits for the GPU.
 *
 *   hot_path [rounds]     prints the median host ns per call of
 *                         scree_rmsnorm (1 x 256, fp16) and, where the
 *                         library has it, scree_attention (1 x 64 tokens)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scree.h"

typedef int (*cu_fn)();

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef scree_status (*call_fn)(scree_context *, const void *, void *);

static double median_ns(scree_context *ctx, call_fn fn, const void *args, cu_fn sync, int rounds) {
  enum { BATCH = 200 };
  double *s = malloc(sizeof(double) * (size_t)rounds);
  for (int i = 0; i < 20; i++) fn(ctx, args, NULL); /* warm: the plan exists */
  sync();
  for (int r = 0; r < rounds; r++) {
    const double t0 = now_ns();
    for (int i = 0; i < BATCH; i++)
      if (fn(ctx, args, NULL)) {
        fprintf(stderr, "call failed: %s\n", scree_last_error(ctx));
        exit(1);
      }
    s[r] = (now_ns() - t0) / BATCH;
    sync();
  }
  qsort(s, (size_t)rounds, sizeof *s, cmp_d);
  const double m = s[rounds / 2];
  free(s);
  return m;
}

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 31;
  scree_context *ctx;
  char why[512];
  scree_options o;
  scree_options_init(&o);
  o.disable_cache = 1;
  if (scree_create(&o, &ctx, why, sizeof why)) {
    printf("no GPU: %s\n", why);
    return 0;
  }
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  cu_fn retain = (cu_fn)dlsym(cu, "cuDevicePrimaryCtxRetain"),
        setcur = (cu_fn)dlsym(cu, "cuCtxSetCurrent"), alloc = (cu_fn)dlsym(cu, "cuMemAlloc_v2"),
        memset8 = (cu_fn)dlsym(cu, "cuMemsetD8_v2"), sync = (cu_fn)dlsym(cu, "cuCtxSynchronize");
  void *pctx;
  retain(&pctx, 0);
  setcur(pctx);
  unsigned long long buf;
  alloc(&buf, (size_t)1 << 20);
  memset8(buf, 0, (size_t)1 << 20);
  scree_rmsnorm_args r = {.x = buf, .w = buf + 4096, .y = buf + 8192, .rows = 1, .cols = 256,
                          .x_dtype = SCREE_DTYPE_FP16, .w_dtype = SCREE_DTYPE_FP16,
                          .y_dtype = SCREE_DTYPE_FP16, .eps = 1e-6f};
  printf("scree %s: scree_rmsnorm %.0f ns per call", scree_version(),
         median_ns(ctx, (call_fn)scree_rmsnorm, &r, sync, rounds));
  call_fn attn = (call_fn)dlsym(RTLD_DEFAULT, "scree_attention");
#ifdef SCREE_HOT_PATH_ATTENTION
  attn = (call_fn)scree_attention;
  int32_t cu_host[2] = {0, 64};
  unsigned long long cub = buf + 65536;
  cu_fn htod = (cu_fn)dlsym(cu, "cuMemcpyHtoD_v2");
  htod(cub, cu_host, sizeof cu_host);
  scree_attention_args a = {.q = buf + 131072, .k = buf + 262144, .v = buf + 393216,
                            .out = buf + 524288, .cu_seqlens_q = cub, .cu_seqlens_k = cub,
                            .batch = 1, .total_q = 64, .total_k = 64, .max_seqlen_q = 64,
                            .max_seqlen_k = 64, .heads_q = 1, .heads_kv = 1, .head_dim = 64,
                            .dtype = SCREE_DTYPE_FP16, .causal = 1, .window_left = -1,
                            .window_right = -1};
  printf(", scree_attention %.0f ns per call", median_ns(ctx, attn, &a, sync, rounds));
#endif
  (void)attn;
  printf("\n");
  scree_destroy(ctx);
  return 0;
}
