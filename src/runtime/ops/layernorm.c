/* layernorm.c - LayerNorm's host side: config space, constraints, defaults,
 * argument checks, the launch, buckets and problems. The kernel is
 * kernels/layernorm.cu; the CPU reference ops/layernorm_ref.c.
 *
 * The variant is the three dtypes (27 variants). The bias and the mean /
 * rstd outputs are run-time options (null pointers), not variant fields:
 * the kernel's branches on them are uniform, and ptxas (sm_90) shows no
 * case for compiling them in. With the run-time checks, fp16
 * tpr=128,rows=1,vec=8,cache=4 takes 48 registers; with bias and
 * statistics fixed on at compile time 55, fixed off 48. fp32
 * tpr=256,rows=1,vec=4,cache=4: 52, 54 and 48; fp16 at tpr=1024, cache=8:
 * 64 in all three; no spills in any. 0 to 8 registers saved in a variant
 * without bias or statistics, for 4 times the variants to compile, tune
 * and cache: not worth it on a memory-bound kernel. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

enum { V_X, V_W, V_Y };

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}},
    {"w", "SCREE_W_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}},
};

static int check(const scree__config *c, const scree__variant *var,
                 const scree__target *t, char *why, size_t n) {
  (void)t; /* static shared memory only, well under every arch's limit */
  return scree__rowwise_check_dtypes(var, 3, why, n) && scree__rowwise_check(c, why, n);
}

/* Hand-picked default, the same on sm_80 and sm_90 until measurements say
 * otherwise: RMSNorm's (about four vectors in flight per thread, the whole
 * row in registers when it fits, at least 128 threads per CTA) with two
 * changes that keep ptxas from spilling. Vectors are 16 bytes of the
 * widest dtype, not of x (a 4-byte w or y doubles the registers of each
 * vector of the output pass). At 1024 threads a CTA (64 registers a
 * thread) a thread keeps at most 128 bytes of x in registers, 64 with a
 * 4-byte w or y: past that ptxas spills (fp32 at vec=4, cache=16 about
 * 500 bytes). The rest of such a row is streamed, read again from L2. */
static void default_config(const scree__target *t, const scree__variant *var,
                           const void *args, scree__config *out) {
  (void)t;
  const scree_layernorm_args *a = args;
  const int ex = (int)scree_dtype_size((scree_dtype)var->v[V_X]);
  const int ew = (int)scree_dtype_size((scree_dtype)var->v[V_W]);
  const int ey = (int)scree_dtype_size((scree_dtype)var->v[V_Y]);
  scree__rowwise_default(a ? a->cols : 4096, ex, out);
  if (ew == 4 || ey == 4) scree__rowwise_adapt(out, 2);
  const int budget = ew == 4 || ey == 4 ? 64 : 128;
  if (out->v[SCREE__RW_TPR] * out->v[SCREE__RW_ROWS] >= 1024)
    while (out->v[SCREE__RW_CACHE] > 1 &&
           out->v[SCREE__RW_VEC] * out->v[SCREE__RW_CACHE] * ex > budget)
      out->v[SCREE__RW_CACHE] /= 2;
}

/* log2 of the widest vector (in elements, at most 8) that every pointer
 * (b only when given) and row stride of the call allows. */
static int vec_log2(const scree__variant *var, const scree_layernorm_args *a) {
  const size_t sw = scree_dtype_size((scree_dtype)var->v[V_W]);
  int l = 3;
  l = scree__vlog2_ptr(l, a->x, scree_dtype_size((scree_dtype)var->v[V_X]));
  l = scree__vlog2_ptr(l, a->w, sw);
  l = scree__vlog2_ptr(l, a->b, sw);
  l = scree__vlog2_ptr(l, a->y, scree_dtype_size((scree_dtype)var->v[V_Y]));
  l = scree__vlog2_stride(l, a->x_stride ? a->x_stride : a->cols);
  return scree__vlog2_stride(l, a->y_stride ? a->y_stride : a->cols);
}

/* Narrow VEC (keeping the elements per thread) until the call allows it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, vec_log2(var, args));
}

static scree_status launch(scree_context *ctx, const scree__kernel *k,
                           const scree__config *c, const scree__variant *var,
                           const void *args, CUstream stream) {
  (void)var;
  const scree_layernorm_args *a = args;
  long long rows = a->rows;
  int cols = (int)a->cols;
  long long xs = a->x_stride ? a->x_stride : a->cols;
  long long ys = a->y_stride ? a->y_stride : a->cols;
  float eps = a->eps;
  uint64_t x = a->x, w = a->w, b = a->b, y = a->y, mean = a->mean, rstd = a->rstd;
  void *params[] = {&x, &w, &b, &y, &mean, &rstd, &rows, &cols, &xs, &ys, &eps};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "layernorm");
}

/* ---- tuning hooks ------------------------------------------------------ */

/* Bucket: rows rounded up to a power of two, cols exact. Bias and
 * statistics share the bucket's config (a few bytes per row more or less
 * moved; the tuned problem has a bias and no statistics). */
static const scree__bdim dims[] = {{"rows", 1}, {"cols", 0}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_layernorm_args *a = args;
  d[0] = a->rows;
  d[1] = a->cols;
}

/* The widest vector every pointer and stride of the call allows, as log2. */
static int adapt_class(const scree__variant *var, const void *args) {
  return vec_log2(var, args);
}

/* Tuned on the bucket's largest row count, capped at 256 MiB of x (past
 * that the kernel is long enough that time per byte no longer changes). */
static void representative(const scree__bucket *b, const scree__variant *var,
                           int check, void *args) {
  scree_layernorm_args *a = args;
  memset(a, 0, sizeof *a);
  a->cols = b->v[1];
  const int64_t es = (int64_t)scree_dtype_size((scree_dtype)var->v[V_X]);
  int64_t rows = b->v[0];
  const int64_t cap = ((int64_t)256 << 20) / (a->cols > 0 ? a->cols * es : 1);
  if (rows > cap) rows = cap > 0 ? cap : 1;
  if (check && rows > 97) rows = 97;
  a->rows = rows;
  a->x_dtype = (scree_dtype)var->v[V_X];
  a->w_dtype = (scree_dtype)var->v[V_W];
  a->y_dtype = (scree_dtype)var->v[V_Y];
  a->eps = 1e-5f;
}

/* Skips configs whose threads would mostly idle on this row length, or
 * that would re-read most of the row from memory in later passes. */
static int worth_timing(const scree__config *c, const scree__variant *var,
                        const void *args) {
  (void)var;
  return scree__rowwise_worth(c, ((const scree_layernorm_args *)args)->cols);
}

/* Buffers: x, w, b, y, then mean and rstd in check problems only (a timed
 * problem is the inference form: a bias, no statistics). The problem's
 * args mark the optional buffers it holds with a nonzero b / mean / rstd
 * (every run binds them to device pointers), which is how the reference
 * knows which host copies it is given.
 *
 * Tolerances: y, one rounding of y's dtype (scree__tolerance): the kernel's
 * statistics keep an fp32 error relative to the row's spread, not to its
 * mean (kernels/layernorm.cu), so nothing of the offset remains. rstd:
 * fp32's (rtol 1e-5, atol 1e-6). mean: rtol 1e-5 and an atol of
 * SCREE__LAYERNORM_MEAN_ATOL (ops/rowwise.h),
 * for the same reason: its fp32 sums err relative to the row's spread, and
 * a row of zero mean has no digits of its own to be relative to. The check
 * rows (shape_inputs) have spreads up to 8 with a last quarter of 32; a
 * thread summing 1024 of them in sequence (tpr=8 on cols=8192) was seen off
 * by 2.4e-6 on the H100, 3e-7 of the spread. The atol is 1e-6 of the
 * largest values, 8x that. The offsets still expose dropped or mixed
 * elements: one element of a row offset by top spreads (shape_inputs) moves
 * that row's mean by offset / cols, 1e-3 for bf16 rows of 8192. */
static int problem(const void *args, const scree__variant *var, int check,
                   uint64_t seed, const scree__lens *lens, scree__problem *p,
                   char *why, size_t why_size) {
  (void)seed, (void)lens;
  scree_layernorm_args *a = (scree_layernorm_args *)p->args;
  memcpy(a, args, sizeof *a);
  if (a->rows < 1 || a->cols < 1 || a->cols > 65536) {
    scree__set_why(why, why_size, "rows=%lld, cols=%lld: need rows >= 1, 1 <= cols <= 65536",
                   (long long)a->rows, (long long)a->cols);
    return -1;
  }
  /* The check problem keeps the row length; a few rows show every mistake
   * that many would, and keep the CPU reference quick. */
  if (check && a->rows > 97) a->rows = 97;
  a->x_dtype = (scree_dtype)var->v[V_X];
  a->w_dtype = (scree_dtype)var->v[V_W];
  a->y_dtype = (scree_dtype)var->v[V_Y];
  if (a->eps == 0) a->eps = 1e-5f;
  a->b = 1;
  a->mean = a->rstd = check ? 1 : 0;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  scree__problem_buf(p, "x", SCREE__BUF_IN, a->x_dtype, (size_t)(a->rows * xs),
                     offsetof(scree_layernorm_args, x));
  scree__problem_buf(p, "w", SCREE__BUF_IN, a->w_dtype, (size_t)a->cols,
                     offsetof(scree_layernorm_args, w));
  scree__problem_buf(p, "b", SCREE__BUF_IN, a->w_dtype, (size_t)a->cols,
                     offsetof(scree_layernorm_args, b));
  scree__problem_buf(p, "y", SCREE__BUF_OUT, a->y_dtype, (size_t)(a->rows * ys),
                     offsetof(scree_layernorm_args, y));
  if (check) {
    scree__buf *mb = scree__problem_buf(p, "mean", SCREE__BUF_OUT, SCREE_DTYPE_FP32,
                                        (size_t)a->rows, offsetof(scree_layernorm_args, mean));
    mb->atol = SCREE__LAYERNORM_MEAN_ATOL;
    scree__problem_buf(p, "rstd", SCREE__BUF_OUT, SCREE_DTYPE_FP32, (size_t)a->rows,
                       offsetof(scree_layernorm_args, rstd));
  }
  /* x read once, y written once, w and b read once, the statistics
   * written once where there are any. */
  p->bytes = (double)a->rows * (double)a->cols *
                 (double)(scree_dtype_size(a->x_dtype) + scree_dtype_size(a->y_dtype)) +
             2.0 * (double)a->cols * (double)scree_dtype_size(a->w_dtype) +
             (check ? 8.0 * (double)a->rows : 0.0);
  snprintf(p->desc, sizeof p->desc, "%lld rows of %lld, with bias%s", (long long)a->rows,
           (long long)a->cols, check ? ", mean and rstd" : "");
  return 0;
}

/* Random rows all have mean ~0 and spread ~1, so a kernel that mixed rows
 * up, dropped the scalar tail or the part of a row past the register cache,
 * or took the variance as mean(x^2) - mu^2 could stay inside the
 * tolerance. Give each row its own spread (1/8 ... 8) and offset (0, or up
 * to 64 / 512 / 4096 spreads for bf16 / fp16 / fp32 x, which keeps the
 * offset rows' noise resolved at about half a spread or finer), and make
 * the noise of the tail and the last quarter of each row larger. On the
 * offset rows sum(x^2) / n - mu^2 in fp32 loses the variance's leading
 * digits. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_layernorm_args *a = args;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const double top = a->x_dtype == SCREE_DTYPE_BF16   ? 64
                     : a->x_dtype == SCREE_DTYPE_FP16 ? 512
                                                      : 4096;
  /* Offsets in spreads, cycling with the row (coprime with the 7 scales). */
  const double offsets[4] = {0, top, -top / 4, top / 16};
  for (int64_t r = 0; r < a->rows; r++) {
    const double spread = ldexp(1.0, (int)(r % 7) - 3);
    const double offset = offsets[r % 4] * spread;
    for (int64_t c = 0; c < a->cols; c++) {
      double f = spread;
      if (c >= a->cols - a->cols / 4) f *= 4;
      if (c >= a->cols - 8) f *= 4;
      const size_t i = (size_t)(r * xs + c);
      scree__store_elem(h[0], a->x_dtype, i, offset + f * scree__load_elem(h[0], a->x_dtype, i));
    }
  }
}

SCREE__REFERENCE(layernorm); /* ops/layernorm_ref.c */

static const scree__impl impls[] = {{
    .name = "generic",
    .source = "layernorm.cu",
    .entries = {"scree_layernorm"},
    .min_sm = 80,
    .nfields = SCREE__RW_NFIELDS,
    .fields = scree__rowwise_fields,
    .check = check,
    .adapt = adapt,
    .worth_timing = worth_timing,
    .launch = launch,
}};

static const scree__sfield shape[] = {
    {"rows", offsetof(scree_layernorm_args, rows)},
    {"cols", offsetof(scree_layernorm_args, cols)},
};

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip);

const scree__op scree__op_layernorm = {
    .name = "layernorm",
    .args_size = sizeof(scree_layernorm_args),
    .nimpls = 1,
    .impls = impls,
    .nvfields = 3,
    .vfields = vfields,
    .causal_vfield = -1,
    .ndims = 2,
    .dims = dims,
    .nshape = 2,
    .shape = shape,
    .validate = validate,
    .bucket = bucket,
    .adapt_class = adapt_class,
    .default_config = default_config,
    .representative = representative,
    .problem = problem,
    .shape_inputs = shape_inputs,
    .reference = scree__ref_layernorm,
};

/* ---- the public entry point -------------------------------------------- */

/* A buffer's name, pointer and byte range, for the overlap checks. */
typedef struct range {
  const char *name;
  uint64_t p, lo, hi;
} range;

static scree_status overlap_fail(scree_context *ctx, const range *a, const range *b) {
  return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=0x%llx overlaps %s=0x%llx",
                     a->name, (unsigned long long)a->p, b->name, (unsigned long long)b->p);
}

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip) {
  (void)stream;
  const scree_layernorm_args *a = args;
  const scree_dtype dts[3] = {a->x_dtype, a->w_dtype, a->y_dtype};
  static const char *const dnames[3] = {"x_dtype", "w_dtype", "y_dtype"};
  for (int i = 0; i < 3; i++)
    if (scree__arg_float_dtype(ctx, dnames[i], dts[i])) return SCREE_ERROR_UNSUPPORTED;
  if (a->cols < 1)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "cols=%lld must be at least 1",
                       (long long)a->cols);
  if (a->cols > 65536)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "cols=%lld exceeds the supported maximum 65536", (long long)a->cols);
  if (a->rows < 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "rows=%lld is negative",
                       (long long)a->rows);
  if (!(a->eps >= 0.f) || isinf(a->eps))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "eps=%g must be finite and >= 0",
                       (double)a->eps);
  const int64_t xs = scree__arg_stride(ctx, "x_stride", a->x_stride, a->cols);
  if (xs < 0) return SCREE_ERROR_INVALID_ARGUMENT;
  const int64_t ys = scree__arg_stride(ctx, "y_stride", a->y_stride, a->cols);
  if (ys < 0) return SCREE_ERROR_INVALID_ARGUMENT;
  if (a->rows == 0) { /* nothing to do, nothing launched */
    *skip = 1;
    return SCREE_OK;
  }
  scree_status st;
  if ((st = scree__arg_elem_ptr(ctx, "x", a->x, a->x_dtype)) ||
      (st = scree__arg_elem_ptr(ctx, "w", a->w, a->w_dtype)) ||
      (a->b && (st = scree__arg_elem_ptr(ctx, "b", a->b, a->w_dtype))) ||
      (st = scree__arg_elem_ptr(ctx, "y", a->y, a->y_dtype)) ||
      (a->mean && (st = scree__arg_elem_ptr(ctx, "mean", a->mean, SCREE_DTYPE_FP32))) ||
      (a->rstd && (st = scree__arg_elem_ptr(ctx, "rstd", a->rstd, SCREE_DTYPE_FP32))))
    return st;
  /* x, w, b, y, mean, rstd; an absent optional buffer has an empty range. */
  range r[6] = {{"x", a->x, 0, 0},       {"w", a->w, 0, 0},       {"b", a->b, 0, 0},
                {"y", a->y, 0, 0},       {"mean", a->mean, 0, 0}, {"rstd", a->rstd, 0, 0}};
  const size_t sx = scree_dtype_size(a->x_dtype), sw = scree_dtype_size(a->w_dtype),
               sy = scree_dtype_size(a->y_dtype);
  if (!scree__byte_range(a->x, a->rows, a->cols, xs, sx, &r[0].lo, &r[0].hi) ||
      !scree__byte_range(a->w, 1, a->cols, a->cols, sw, &r[1].lo, &r[1].hi) ||
      (a->b && !scree__byte_range(a->b, 1, a->cols, a->cols, sw, &r[2].lo, &r[2].hi)) ||
      !scree__byte_range(a->y, a->rows, a->cols, ys, sy, &r[3].lo, &r[3].hi) ||
      (a->mean && !scree__byte_range(a->mean, 1, a->rows, a->rows, 4, &r[4].lo, &r[4].hi)) ||
      (a->rstd && !scree__byte_range(a->rstd, 1, a->rows, a->rows, 4, &r[5].lo, &r[5].hi)))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "rows=%lld x stride overflows the address space", (long long)a->rows);
  /* y: x exactly (in place) or apart from it, and apart from w and b. */
  if (a->y == a->x) {
    if (sx != sy || xs != ys)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "y == x (in place) needs equal element sizes and strides");
  } else if (scree__overlaps(r[3].lo, r[3].hi, r[0].lo, r[0].hi)) {
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "y=0x%llx partially overlaps x=0x%llx",
                       (unsigned long long)a->y, (unsigned long long)a->x);
  }
  for (int j = 1; j <= 2; j++)
    if (scree__overlaps(r[3].lo, r[3].hi, r[j].lo, r[j].hi)) return overlap_fail(ctx, &r[3], &r[j]);
  /* mean and rstd: apart from every other buffer. */
  for (int i = 4; i < 6; i++)
    for (int j = 0; j < i; j++)
      if (scree__overlaps(r[i].lo, r[i].hi, r[j].lo, r[j].hi))
        return overlap_fail(ctx, &r[i], &r[j]);
  memset(var, 0, sizeof *var);
  var->v[V_X] = a->x_dtype;
  var->v[V_W] = a->w_dtype;
  var->v[V_Y] = a->y_dtype;
  return SCREE_OK;
}
