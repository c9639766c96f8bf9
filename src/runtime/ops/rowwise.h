/*
 * rowwise.h - what the row-wise ops' host sides share (ops/rowwise.c): the
 * launch-shape config fields of kernels/rowwise.cuh, their check, default
 * and pruning, the widest vector a call allows, and the launch of a grid
 * over rows. Not API.
 */
#ifndef SCREE_OPS_ROWWISE_H
#define SCREE_OPS_ROWWISE_H

#include "ops/op.h"

/* LayerNorm's tolerance on its fp32 mean output (ops/layernorm.c says
 * why: fp32 sums err relative to the row's spread, not its mean); the
 * check problem and the GPU tests use it alike. */
#define SCREE__LAYERNORM_MEAN_ATOL 2e-5

/* The implementation of a row-wise op with this kernel source and entries:
 * the launch shape's fields, and the hooks the op file names check, adapt,
 * worth_timing and launch. */
#define SCREE__ROWWISE_IMPL(src, ...)                                                    \
  .name = "generic", .source = src, .entries = {__VA_ARGS__}, .min_sm = 80,             \
  .nfields = SCREE__RW_NFIELDS, .fields = scree__rowwise_fields, .check = check,         \
  .adapt = adapt, .worth_timing = worth_timing, .launch = launch

/* Field indices of scree__rowwise_fields (an op may append its own). */
enum { SCREE__RW_TPR, SCREE__RW_ROWS, SCREE__RW_VEC, SCREE__RW_CACHE, SCREE__RW_NFIELDS };
extern const scree__field scree__rowwise_fields[SCREE__RW_NFIELDS];

/* 1 if the four launch-shape fields satisfy rowwise.cuh's static_asserts,
 * else 0 with the reason. */
int scree__rowwise_check(const scree__config *c, char *why, size_t n);
/* 1 if every dtype code in var->v[0..n) is fp32, fp16 or bf16, else 0
 * with the reason. */
int scree__rowwise_check_dtypes(const scree__variant *var, int n, char *why, size_t size);
/* The hand-picked default for rows of `cols` elements of esize bytes:
 * 16-byte accesses, about four vectors in flight per thread, the whole
 * row in registers when it fits, at least 128 threads per CTA. */
void scree__rowwise_default(int64_t cols, int esize, scree__config *out);
/* 0 if the config's threads would mostly idle on rows of `cols`, or it
 * would stream more than half the row from memory a second time. */
int scree__rowwise_worth(const scree__config *c, int64_t cols);
/* Narrows VEC (keeping the elements per thread) to 2^widest_log2. */
void scree__rowwise_adapt(scree__config *c, int widest_log2);

/* The widest vector access, as log2 of elements (at most 3), that every
 * pointer and stride (in elements) allows: start with l = 3 and fold in
 * each pointer (with its element size) and stride. Trailing zero bits
 * only: no division on the hot path. A zero pointer or stride allows all. */
static inline int scree__vlog2_ptr(int l, uint64_t p, size_t esize) {
  if (!p) return l;
  const int t = __builtin_ctzll(p) - (esize == 4 ? 2 : esize == 2 ? 1 : 0);
  return t < l ? (t < 0 ? 0 : t) : l;
}
static inline int scree__vlog2_stride(int l, int64_t s) {
  if (!s) return l;
  const int t = __builtin_ctzll((uint64_t)s);
  return t < l ? t : l;
}

/* Grid ceil(rows / ROWS) (capped at 2^31 - 1; the kernels stride), block
 * TPR * ROWS, on stream. `what` names the kernel in an error. */
scree_status scree__rowwise_launch(scree_context *ctx, CUfunction fn, const scree__config *c,
                                   int64_t rows, void **params, CUstream stream,
                                   const char *what);

#endif
