/* add_rmsnorm.c - the residual add fused with RMSNorm, host side: config
 * space, constraints, defaults, argument checks, the launch, buckets and
 * problems. The kernel is kernels/add_rmsnorm.cu; the CPU reference
 * ops/add_rmsnorm_ref.c. The variant is the three dtypes (x's covers
 * residual and h). */
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
 * vector of the output pass). From 512 threads a CTA (ptxas then aims at
 * 64 registers a thread, and must at 1024) a thread keeps at most 64 bytes
 * of h in registers, and 16 elements of a 16-bit h with a 4-byte w or y:
 * x and residual are both in flight while h is formed, and past that
 * ptxas spills (fp16 at tpr=1024, vec=8, cache=8 about 500 bytes). The
 * rest of such a row is streamed: its h is read back, from L2, for the
 * output. */
static void default_config(const scree__target *t, const scree__variant *var,
                           const void *args, scree__config *out) {
  (void)t;
  const scree_add_rmsnorm_args *a = args;
  const int ex = (int)scree_dtype_size((scree_dtype)var->v[V_X]);
  const int wide = scree_dtype_size((scree_dtype)var->v[V_W]) == 4 ||
                   scree_dtype_size((scree_dtype)var->v[V_Y]) == 4;
  scree__rowwise_default(a ? a->cols : 4096, ex, out);
  if (wide) scree__rowwise_adapt(out, 2);
  const int most = wide && ex == 2 ? 16 : 64 / ex; /* elements of h per thread */
  if (out->v[SCREE__RW_TPR] * out->v[SCREE__RW_ROWS] >= 512)
    while (out->v[SCREE__RW_CACHE] > 1 && out->v[SCREE__RW_VEC] * out->v[SCREE__RW_CACHE] > most)
      out->v[SCREE__RW_CACHE] /= 2;
}

/* log2 of the widest vector (in elements, at most 8) that every pointer
 * and row stride of the call allows. */
static int vec_log2(const scree__variant *var, const scree_add_rmsnorm_args *a) {
  const size_t sx = scree_dtype_size((scree_dtype)var->v[V_X]);
  int l = 3;
  l = scree__vlog2_ptr(l, a->x, sx);
  l = scree__vlog2_ptr(l, a->residual, sx);
  l = scree__vlog2_ptr(l, a->h, sx);
  l = scree__vlog2_ptr(l, a->w, scree_dtype_size((scree_dtype)var->v[V_W]));
  l = scree__vlog2_ptr(l, a->y, scree_dtype_size((scree_dtype)var->v[V_Y]));
  l = scree__vlog2_stride(l, a->x_stride ? a->x_stride : a->cols);
  l = scree__vlog2_stride(l, a->residual_stride ? a->residual_stride : a->cols);
  l = scree__vlog2_stride(l, a->h_stride ? a->h_stride : a->cols);
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
  const scree_add_rmsnorm_args *a = args;
  long long rows = a->rows;
  int cols = (int)a->cols;
  long long xs = a->x_stride ? a->x_stride : a->cols;
  long long rs = a->residual_stride ? a->residual_stride : a->cols;
  long long hs = a->h_stride ? a->h_stride : a->cols;
  long long ys = a->y_stride ? a->y_stride : a->cols;
  float eps = a->eps;
  uint64_t x = a->x, res = a->residual, h = a->h, w = a->w, y = a->y;
  void *params[] = {&x, &res, &h, &w, &y, &rows, &cols, &xs, &rs, &hs, &ys, &eps};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "add_rmsnorm");
}

/* ---- tuning hooks ------------------------------------------------------ */

/* Bucket: rows rounded up to a power of two, cols exact. In place and out
 * of place share the bucket's config (the same bytes move). */
static const scree__bdim dims[] = {{"rows", 1}, {"cols", 0}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_add_rmsnorm_args *a = args;
  d[0] = a->rows;
  d[1] = a->cols;
}

/* The widest vector every pointer and stride of the call allows, as log2. */
static int adapt_class(const scree__variant *var, const void *args) {
  return vec_log2(var, args);
}

/* Tuned on the bucket's largest row count, capped at 256 MiB of x and
 * residual together (past that the kernel is long enough that time per
 * byte no longer changes). */
static void representative(const scree__bucket *b, const scree__variant *var,
                           int check, void *args) {
  scree_add_rmsnorm_args *a = args;
  memset(a, 0, sizeof *a);
  a->cols = b->v[1];
  const int64_t es = (int64_t)scree_dtype_size((scree_dtype)var->v[V_X]);
  int64_t rows = b->v[0];
  const int64_t cap = ((int64_t)256 << 20) / (a->cols > 0 ? 2 * a->cols * es : 1);
  if (rows > cap) rows = cap > 0 ? cap : 1;
  if (check && rows > 97) rows = 97;
  a->rows = rows;
  a->x_dtype = (scree_dtype)var->v[V_X];
  a->w_dtype = (scree_dtype)var->v[V_W];
  a->y_dtype = (scree_dtype)var->v[V_Y];
  a->eps = 1e-6f;
}

/* Skips configs whose threads would mostly idle on this row length, or
 * that would read most of h back from memory in a second pass. */
static int worth_timing(const scree__config *c, const scree__variant *var,
                        const void *args) {
  (void)var;
  return scree__rowwise_worth(c, ((const scree_add_rmsnorm_args *)args)->cols);
}

/* Buffers: x, residual, w, then h and y (h out of place; the GPU test runs
 * both in-place forms through the public entry).
 *
 * Tolerances: h, one rounding of x's dtype (the fp32 sum of two values of
 * x's dtype rounds to the same value as the exact sum, so h is in fact
 * exact); y, one rounding of y's dtype (scree__tolerance), as RMSNorm's:
 * the norm is taken of the same rounded h on both sides. */
static int problem(const void *args, const scree__variant *var, int check,
                   uint64_t seed, const scree__lens *lens, scree__problem *p,
                   char *why, size_t why_size) {
  (void)seed, (void)lens;
  scree_add_rmsnorm_args *a = (scree_add_rmsnorm_args *)p->args;
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
  if (a->eps == 0) a->eps = 1e-6f;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t rs = a->residual_stride ? a->residual_stride : a->cols;
  const int64_t hs = a->h_stride ? a->h_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  scree__problem_buf(p, "x", SCREE__BUF_IN, a->x_dtype, (size_t)(a->rows * xs),
                     offsetof(scree_add_rmsnorm_args, x));
  scree__problem_buf(p, "residual", SCREE__BUF_IN, a->x_dtype, (size_t)(a->rows * rs),
                     offsetof(scree_add_rmsnorm_args, residual));
  scree__problem_buf(p, "w", SCREE__BUF_IN, a->w_dtype, (size_t)a->cols,
                     offsetof(scree_add_rmsnorm_args, w));
  scree__problem_buf(p, "h", SCREE__BUF_OUT, a->x_dtype, (size_t)(a->rows * hs),
                     offsetof(scree_add_rmsnorm_args, h));
  scree__problem_buf(p, "y", SCREE__BUF_OUT, a->y_dtype, (size_t)(a->rows * ys),
                     offsetof(scree_add_rmsnorm_args, y));
  /* x and residual read once, h and y written once, w read once. */
  p->bytes = (double)a->rows * (double)a->cols *
                 (double)(3 * scree_dtype_size(a->x_dtype) + scree_dtype_size(a->y_dtype)) +
             (double)a->cols * (double)scree_dtype_size(a->w_dtype);
  snprintf(p->desc, sizeof p->desc, "%lld rows of %lld, h out of place", (long long)a->rows,
           (long long)a->cols);
  return 0;
}

/* Random rows have nearly equal RMS, so a kernel that mixed rows up,
 * dropped the scalar tail or the part of a row past the register cache, or
 * read the residual of another row could stay inside the tolerance. Scale
 * each row of x (by 1/8 ... 8) and of the residual (by 8 ... 1/8, on a
 * different cycle) differently and make the tail and the last quarter of
 * each row large. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_add_rmsnorm_args *a = args;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t rs = a->residual_stride ? a->residual_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    const double xscale = ldexp(1.0, (int)(r % 7) - 3);
    const double rscale = ldexp(1.0, 3 - (int)(r % 5));
    for (int64_t c = 0; c < a->cols; c++) {
      double f = 1;
      if (c >= a->cols - a->cols / 4) f *= 4;
      if (c >= a->cols - 8) f *= 4;
      const size_t i = (size_t)(r * xs + c), j = (size_t)(r * rs + c);
      scree__store_elem(h[0], a->x_dtype, i, f * xscale * scree__load_elem(h[0], a->x_dtype, i));
      scree__store_elem(h[1], a->x_dtype, j, f * rscale * scree__load_elem(h[1], a->x_dtype, j));
    }
  }
}

SCREE__REFERENCE(add_rmsnorm); /* ops/add_rmsnorm_ref.c */

static const scree__impl impls[] = {{
    .name = "generic",
    .source = "add_rmsnorm.cu",
    .entries = {"scree_add_rmsnorm"},
    .min_sm = 80,
    .nfields = SCREE__RW_NFIELDS,
    .fields = scree__rowwise_fields,
    .check = check,
    .adapt = adapt,
    .worth_timing = worth_timing,
    .launch = launch,
}};

static const scree__sfield shape[] = {
    {"rows", offsetof(scree_add_rmsnorm_args, rows)},
    {"cols", offsetof(scree_add_rmsnorm_args, cols)},
};

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip);

const scree__op scree__op_add_rmsnorm = {
    .name = "add_rmsnorm",
    .args_size = sizeof(scree_add_rmsnorm_args),
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
    .reference = scree__ref_add_rmsnorm,
};

/* ---- the public entry point -------------------------------------------- */

/* A buffer's name, pointer, effective stride and byte range. */
typedef struct range {
  const char *name;
  uint64_t p;
  int64_t stride;
  uint64_t lo, hi;
} range;

static scree_status overlap_fail(scree_context *ctx, const range *a, const range *b) {
  return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=0x%llx overlaps %s=0x%llx",
                     a->name, (unsigned long long)a->p, b->name, (unsigned long long)b->p);
}

/* h against an input it may replace: the same pointer and stride, or apart. */
static scree_status in_place_or_apart(scree_context *ctx, const range *h, const range *in) {
  if (h->p == in->p) {
    if (h->stride != in->stride)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "h == %s (in place) needs h_stride=%lld equal to %s_stride=%lld",
                         in->name, (long long)h->stride, in->name, (long long)in->stride);
    return SCREE_OK;
  }
  if (scree__overlaps(h->lo, h->hi, in->lo, in->hi))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "h=0x%llx partially overlaps %s=0x%llx",
                       (unsigned long long)h->p, in->name, (unsigned long long)in->p);
  return SCREE_OK;
}

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip) {
  (void)stream;
  const scree_add_rmsnorm_args *a = args;
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
  const int64_t rs = scree__arg_stride(ctx, "residual_stride", a->residual_stride, a->cols);
  if (rs < 0) return SCREE_ERROR_INVALID_ARGUMENT;
  const int64_t hs = scree__arg_stride(ctx, "h_stride", a->h_stride, a->cols);
  if (hs < 0) return SCREE_ERROR_INVALID_ARGUMENT;
  const int64_t ys = scree__arg_stride(ctx, "y_stride", a->y_stride, a->cols);
  if (ys < 0) return SCREE_ERROR_INVALID_ARGUMENT;
  if (a->rows == 0) { /* nothing to do, nothing launched */
    *skip = 1;
    return SCREE_OK;
  }
  scree_status st;
  if ((st = scree__arg_elem_ptr(ctx, "x", a->x, a->x_dtype)) ||
      (st = scree__arg_elem_ptr(ctx, "residual", a->residual, a->x_dtype)) ||
      (st = scree__arg_elem_ptr(ctx, "w", a->w, a->w_dtype)) ||
      (st = scree__arg_elem_ptr(ctx, "h", a->h, a->x_dtype)) ||
      (st = scree__arg_elem_ptr(ctx, "y", a->y, a->y_dtype)))
    return st;
  range x = {"x", a->x, xs, 0, 0}, res = {"residual", a->residual, rs, 0, 0},
        w = {"w", a->w, a->cols, 0, 0}, h = {"h", a->h, hs, 0, 0}, y = {"y", a->y, ys, 0, 0};
  const size_t sx = scree_dtype_size(a->x_dtype);
  if (!scree__byte_range(a->x, a->rows, a->cols, xs, sx, &x.lo, &x.hi) ||
      !scree__byte_range(a->residual, a->rows, a->cols, rs, sx, &res.lo, &res.hi) ||
      !scree__byte_range(a->w, 1, a->cols, a->cols, scree_dtype_size(a->w_dtype), &w.lo, &w.hi) ||
      !scree__byte_range(a->h, a->rows, a->cols, hs, sx, &h.lo, &h.hi) ||
      !scree__byte_range(a->y, a->rows, a->cols, ys, scree_dtype_size(a->y_dtype), &y.lo, &y.hi))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "rows=%lld x stride overflows the address space", (long long)a->rows);
  /* h: x or residual exactly, or apart from each; apart from w. x and
   * residual are only read, so they may overlap each other. */
  if ((st = in_place_or_apart(ctx, &h, &x)) || (st = in_place_or_apart(ctx, &h, &res))) return st;
  if (scree__overlaps(h.lo, h.hi, w.lo, w.hi)) return overlap_fail(ctx, &h, &w);
  /* y: apart from everything. */
  const range *others[4] = {&x, &res, &w, &h};
  for (int i = 0; i < 4; i++)
    if (scree__overlaps(y.lo, y.hi, others[i]->lo, others[i]->hi))
      return overlap_fail(ctx, &y, others[i]);
  memset(var, 0, sizeof *var);
  var->v[V_X] = a->x_dtype;
  var->v[V_W] = a->w_dtype;
  var->v[V_Y] = a->y_dtype;
  return SCREE_OK;
}
