/* cache_probe.c - a fresh process for the tuning tests: opens a context on
 * the given cache, runs RMSNorm once on rows x cols (checked against the
 * CPU reference), and prints its counters and the time to the first
 * result. Exit 0 if the answer is right. Not a test by itself. NVRTC is
 * optional here: run with SCREE_NVRTC_LIBRARY=/nonexistent to show that a
 * machine without it runs cached kernels.
 *
 *   cache_probe CACHE.db ROWS COLS DTYPE(fp16|bf16|fp32) [tune]
 * With "tune": the miss policy tunes (NVRTC needed), as eight ranks that
 * start together would; the line's tunes= says whether this one did. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "ops/registry.h"
#include "store/cache.h"
#include "store/keys.h"
#include "store/safelist.h"
#include "tuner/harness.h"
#include "tuner/tuner.h"

SCREE__REFERENCE(rmsnorm);
#include <time.h>


static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc != 5 && !(argc == 6 && !strcmp(argv[5], "tune"))) return 2;
  const int tune = argc == 6;
  const double t0 = now_ms();
  const long rows = atol(argv[2]), cols = atol(argv[3]);
  scree_dtype dt = !strcmp(argv[4], "fp32") ? SCREE_DTYPE_FP32
                   : !strcmp(argv[4], "bf16") ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP16;
  scree_options o;
  scree_options_init(&o);
  o.cache_path = argv[1];
  o.cache_search_path = "";
  o.miss_policy = tune ? SCREE_MISS_TUNE : SCREE_MISS_ERROR; /* a miss is not papered over */
  o.nvrtc_optional = !tune; /* a machine without NVRTC still runs cached kernels */
  scree_context *ctx;
  char why[512];
  scree_status st = scree_create(&o, &ctx, why, sizeof why);
  const double t_created = now_ms();
  if (st) {
    printf("create: %s: %s\n", scree_status_name(st), why);
    return 1;
  }
  const size_t es = scree_dtype_size(dt), n = (size_t)rows * (size_t)cols;
  void *hx = malloc(n * es), *hw = malloc((size_t)cols * es), *hy = malloc(n * es),
       *ref = malloc(n * es);
  for (size_t i = 0; i < n; i++) scree__store_elem(hx, dt, i, (double)((i * 7919) % 2003) / 1000.0 - 1.0);
  for (long i = 0; i < cols; i++) scree__store_elem(hw, dt, (size_t)i, 0.5 + (double)(i % 5) / 10.0);
  int pushed = scree__ctx_enter(ctx);
  CUdeviceptr x, w, y;
  if (ctx->cu->MemAlloc(&x, n * es) || ctx->cu->MemAlloc(&w, (size_t)cols * es) ||
      ctx->cu->MemAlloc(&y, n * es))
    return 1;
  ctx->cu->MemcpyHtoD(x, hx, n * es);
  ctx->cu->MemcpyHtoD(w, hw, (size_t)cols * es);
  ctx->cu->MemsetD8(y, 0xff, n * es);
  scree_rmsnorm_args a = {.x = x, .w = w, .y = y, .rows = rows, .cols = cols, .x_dtype = dt,
                          .w_dtype = dt, .y_dtype = dt, .eps = 1e-6f};
  const double t1 = now_ms();
  st = scree_rmsnorm(ctx, &a, NULL);
  ctx->cu->CtxSynchronize();
  const double t2 = now_ms();
  if (st) {
    printf("rmsnorm: %s: %s\n", scree_status_name(st), scree_last_error(ctx));
    return 1;
  }
  ctx->cu->MemcpyDtoH(hy, y, n * es);
  scree__ref_rmsnorm(&a, (void *const[]){(void *)(hx), (void *)(hw), ref});
  double rtol, atol;
  scree__tolerance(dt, &rtol, &atol);
  const size_t bad = scree__compare(hy, ref, dt, n, rtol, atol, NULL);
  scree_counters c;
  scree_get_counters(ctx, &c);
  printf("compiles=%llu module_loads=%llu user_cache_hits=%llu shipped_cache_hits=%llu "
         "safelist_defaults=%llu calls=%llu tunes=%llu bad=%zu create_ms=%.2f "
         "first_call_ms=%.2f\n",
         (unsigned long long)c.compiles, (unsigned long long)c.module_loads,
         (unsigned long long)c.user_cache_hits, (unsigned long long)c.shipped_cache_hits,
         (unsigned long long)c.safelist_defaults, (unsigned long long)c.calls,
         (unsigned long long)c.tunes, bad, t_created - t0,
         t2 - t1);
  scree__ctx_leave(ctx, pushed);
  scree_destroy(ctx);
  return bad ? 1 : 0;
}
