/* rowwise.c - the row-wise ops' shared host side (ops/rowwise.h). */
#include <stdio.h>
#include <string.h>

#include "ops/rowwise.h"

const scree__field scree__rowwise_fields[SCREE__RW_NFIELDS] = {
    {"tpr", "SCREE_TPR", 8, {8, 16, 32, 64, 128, 256, 512, 1024}},
    {"rows", "SCREE_ROWS", 5, {1, 2, 4, 8, 16}},
    {"vec", "SCREE_VEC", 4, {1, 2, 4, 8}},
    {"cache", "SCREE_CACHE", 5, {1, 2, 4, 8, 16}},
};

static int is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

int scree__rowwise_check(const scree__config *c, char *why, size_t n) {
  const int tpr = c->v[SCREE__RW_TPR], rows = c->v[SCREE__RW_ROWS], vec = c->v[SCREE__RW_VEC],
            cache = c->v[SCREE__RW_CACHE];
  if (!is_pow2(tpr) || tpr < 8 || tpr > 1024) {
    snprintf(why, n, "tpr=%d must be a power of two in [8, 1024]", tpr);
    return 0;
  }
  if (!is_pow2(rows) || rows > 16) {
    snprintf(why, n, "rows=%d must be a power of two in [1, 16]", rows);
    return 0;
  }
  if (tpr * rows < 32 || tpr * rows > 1024) {
    snprintf(why, n, "tpr*rows=%d must be in [32, 1024]", tpr * rows);
    return 0;
  }
  if (vec != 1 && vec != 2 && vec != 4 && vec != 8) {
    snprintf(why, n, "vec=%d must be 1, 2, 4 or 8", vec);
    return 0;
  }
  if (cache < 1 || cache > 16) {
    snprintf(why, n, "cache=%d must be in [1, 16]", cache);
    return 0;
  }
  if (vec * cache > 64) {
    snprintf(why, n, "vec*cache=%d exceeds 64 elements of registers per thread", vec * cache);
    return 0;
  }
  return 1;
}

int scree__rowwise_check_dtypes(const scree__variant *var, int n, char *why, size_t size) {
  for (int i = 0; i < n; i++)
    if (var->v[i] < 0 || var->v[i] > 2) {
      snprintf(why, size, "dtype code %d is not fp32, fp16 or bf16", var->v[i]);
      return 0;
    }
  return 1;
}

static int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p <<= 1;
  return p;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

void scree__rowwise_default(int64_t cols, int esize, scree__config *out) {
  memset(out, 0, sizeof *out);
  const int vec = esize == 4 ? 4 : 8;
  const int64_t nvec = cols / vec > 0 ? cols / vec : 1;
  const int tpr = clampi(pow2_ceil((nvec + 3) / 4), 8, 1024);
  const int cache = clampi(pow2_ceil((nvec + tpr - 1) / tpr), 1, 64 / vec);
  out->v[SCREE__RW_TPR] = tpr;
  out->v[SCREE__RW_ROWS] = clampi(128 / tpr, 1, 16);
  out->v[SCREE__RW_VEC] = vec;
  out->v[SCREE__RW_CACHE] = cache > 16 ? 16 : cache;
}

int scree__rowwise_worth(const scree__config *c, int64_t cols) {
  const int64_t per_access = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC];
  const int64_t cover = per_access * c->v[SCREE__RW_CACHE];
  return per_access <= 2 * (int64_t)pow2_ceil(cols) && 2 * cover >= cols;
}

void scree__rowwise_adapt(scree__config *c, int widest_log2) {
  const int widest = 1 << widest_log2;
  while (c->v[SCREE__RW_VEC] > widest) {
    c->v[SCREE__RW_VEC] /= 2;
    if (c->v[SCREE__RW_CACHE] < 16) c->v[SCREE__RW_CACHE] *= 2;
  }
}

scree_status scree__rowwise_launch(scree_context *ctx, CUfunction fn, const scree__config *c,
                                   int64_t rows, void **params, CUstream stream,
                                   const char *what) {
  const int64_t per_cta = c->v[SCREE__RW_ROWS];
  int64_t grid = (rows + per_cta - 1) / per_cta;
  if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;
  if (grid < 1) grid = 1;
  const CUresult r =
      ctx->cu->LaunchKernel(fn, (unsigned)grid, 1, 1,
                            (unsigned)(c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS]), 1, 1, 0,
                            stream, params, NULL);
  if (r != CUDA_SUCCESS) {
    char w[96];
    snprintf(w, sizeof w, "cuLaunchKernel(%s)", what);
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, w);
  }
  return SCREE_OK;
}
