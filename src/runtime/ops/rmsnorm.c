/* rmsnorm.c - RMSNorm's host side: config space, constraints, defaults,
 * argument checks, the launch, buckets and problems. The kernel is
 * kernels/rmsnorm.cu; the CPU reference ops/rmsnorm_ref.c. */
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
 * otherwise: 16-byte accesses, about four vectors in flight per thread, the
 * whole row in registers when it fits, and at least 128 threads per CTA. */
static void default_config(const scree__target *t, const scree__variant *var,
                           const void *args, scree__config *out) {
  (void)t;
  const scree_rmsnorm_args *a = args;
  scree__rowwise_default(a ? a->cols : 4096, (int)scree_dtype_size((scree_dtype)var->v[V_X]),
                         out);
}

/* log2 of the widest vector (in elements, at most 8) that every pointer
 * and row stride of the call allows. All sizes are powers of two, so this
 * is a matter of trailing zero bits: no division on the hot path. */
static int vec_log2(const scree__variant *var, const scree_rmsnorm_args *a) {
  int l = 3;
  l = scree__vlog2_ptr(l, a->x, scree_dtype_size((scree_dtype)var->v[V_X]));
  l = scree__vlog2_ptr(l, a->w, scree_dtype_size((scree_dtype)var->v[V_W]));
  l = scree__vlog2_ptr(l, a->y, scree_dtype_size((scree_dtype)var->v[V_Y]));
  l = scree__vlog2_stride(l, a->x_stride ? a->x_stride : a->cols);
  return scree__vlog2_stride(l, a->y_stride ? a->y_stride : a->cols);
}

/* A vector access of VEC elements needs every row start aligned to it:
 * narrow VEC (keeping the elements per thread) until the call allows it. */
static void adapt(scree__config *c, const scree__variant *var,
                  const void *args) {
  scree__rowwise_adapt(c, vec_log2(var, args));
}

static scree_status launch(scree_context *ctx, const scree__kernel *k,
                           const scree__config *c, const scree__variant *var,
                           const void *args, CUstream stream) {
  (void)var;
  const scree_rmsnorm_args *a = args;
  long long rows = a->rows;
  int cols = (int)a->cols;
  long long xs = a->x_stride ? a->x_stride : a->cols;
  long long ys = a->y_stride ? a->y_stride : a->cols;
  float eps = a->eps;
  uint64_t x = a->x, w = a->w, y = a->y;
  void *params[] = {&x, &w, &y, &rows, &cols, &xs, &ys, &eps};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "rmsnorm");
}

/* ---- tuning hooks ------------------------------------------------------ */

/* Bucket: rows rounded up to a power of two, cols exact. */
static const scree__bdim dims[] = {{"rows", 1}, {"cols", 0}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_rmsnorm_args *a = args;
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
  scree_rmsnorm_args *a = args;
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
  a->eps = 1e-6f;
}

/* Skips configs whose threads would mostly idle on this row length, or
 * that would re-read most of the row from memory in a second pass. */
static int worth_timing(const scree__config *c, const scree__variant *var,
                        const void *args) {
  (void)var;
  return scree__rowwise_worth(c, ((const scree_rmsnorm_args *)args)->cols);
}

static int problem(const void *args, const scree__variant *var, int check,
                   uint64_t seed, const scree__lens *lens, scree__problem *p,
                   char *why, size_t why_size) {
  (void)seed, (void)lens;
  scree_rmsnorm_args *a = (scree_rmsnorm_args *)p->args;
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
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  scree__problem_buf(p, "x", SCREE__BUF_IN, a->x_dtype, (size_t)(a->rows * xs),
                     offsetof(scree_rmsnorm_args, x));
  scree__problem_buf(p, "w", SCREE__BUF_IN, a->w_dtype, (size_t)a->cols,
                     offsetof(scree_rmsnorm_args, w));
  scree__problem_buf(p, "y", SCREE__BUF_OUT, a->y_dtype, (size_t)(a->rows * ys),
                     offsetof(scree_rmsnorm_args, y));
  /* Each input read once, the output written once. */
  p->bytes = (double)a->rows * (double)a->cols *
                 (double)(scree_dtype_size(a->x_dtype) + scree_dtype_size(a->y_dtype)) +
             (double)a->cols * (double)scree_dtype_size(a->w_dtype);
  snprintf(p->desc, sizeof p->desc, "%lld rows of %lld", (long long)a->rows, (long long)a->cols);
  return 0;
}

/* Random rows have nearly equal RMS, so a kernel that mixed rows up, or
 * dropped the scalar tail or the part of a row past the register cache,
 * could stay inside the tolerance. Scale each row differently (by 1/8 ...
 * 8) and make the tail and the last quarter of each row large. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_rmsnorm_args *a = args;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    const double row_scale = ldexp(1.0, (int)(r % 7) - 3);
    for (int64_t c = 0; c < a->cols; c++) {
      double f = row_scale;
      if (c >= a->cols - a->cols / 4) f *= 4;
      if (c >= a->cols - 8) f *= 4;
      const size_t i = (size_t)(r * xs + c);
      scree__store_elem(h[0], a->x_dtype, i, f * scree__load_elem(h[0], a->x_dtype, i));
    }
  }
}

SCREE__REFERENCE(rmsnorm); /* ops/rmsnorm_ref.c */

static const scree__impl impls[] = {{
    .name = "generic",
    .source = "rmsnorm.cu",
    .entries = {"scree_rmsnorm"},
    .min_sm = 80,
    .nfields = SCREE__RW_NFIELDS,
    .fields = scree__rowwise_fields,
    .check = check,
    .adapt = adapt,
    .worth_timing = worth_timing,
    .launch = launch,
}};

static const scree__sfield shape[] = {
    {"rows", offsetof(scree_rmsnorm_args, rows)},
    {"cols", offsetof(scree_rmsnorm_args, cols)},
};

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip);

const scree__op scree__op_rmsnorm = {
    .name = "rmsnorm",
    .args_size = sizeof(scree_rmsnorm_args),
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
    .reference = scree__ref_rmsnorm,
};

/* ---- the public entry point -------------------------------------------- */

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip) {
  (void)stream;
  const scree_rmsnorm_args *a = args;
  const scree_dtype dts[3] = {a->x_dtype, a->w_dtype, a->y_dtype};
  static const char *const dnames[3] = {"x_dtype", "w_dtype", "y_dtype"};
  for (int i = 0; i < 3; i++)
    if (scree__arg_float_dtype(ctx, dnames[i], dts[i])) return SCREE_ERROR_UNSUPPORTED;
  if (a->cols < 1)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "cols=%lld must be at least 1", (long long)a->cols);
  if (a->cols > 65536)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "cols=%lld exceeds the supported maximum 65536",
                       (long long)a->cols);
  if (a->rows < 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "rows=%lld is negative", (long long)a->rows);
  if (!(a->eps >= 0.f) || isinf(a->eps))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "eps=%g must be finite and >= 0", (double)a->eps);
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  if (xs < a->cols)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "x_stride=%lld is less than cols=%lld",
                       (long long)a->x_stride, (long long)a->cols);
  if (ys < a->cols)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "y_stride=%lld is less than cols=%lld",
                       (long long)a->y_stride, (long long)a->cols);
  if (a->rows == 0) { /* nothing to do, nothing launched */
    *skip = 1;
    return SCREE_OK;
  }
  scree_status st;
  if ((st = scree__arg_elem_ptr(ctx, "x", a->x, a->x_dtype)) ||
      (st = scree__arg_elem_ptr(ctx, "w", a->w, a->w_dtype)) ||
      (st = scree__arg_elem_ptr(ctx, "y", a->y, a->y_dtype)))
    return st;
  uint64_t xlo, xhi, ylo, yhi, wlo, whi;
  if (!scree__byte_range(a->x, a->rows, a->cols, xs, scree_dtype_size(a->x_dtype), &xlo, &xhi) ||
      !scree__byte_range(a->y, a->rows, a->cols, ys, scree_dtype_size(a->y_dtype), &ylo, &yhi) ||
      !scree__byte_range(a->w, 1, a->cols, a->cols, scree_dtype_size(a->w_dtype), &wlo, &whi))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "rows=%lld x stride overflows the address space",
                       (long long)a->rows);
  if (a->y == a->x) {
    if (scree_dtype_size(a->x_dtype) != scree_dtype_size(a->y_dtype) || xs != ys)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "y == x (in place) needs equal element sizes and strides");
  } else if (scree__overlaps(ylo, yhi, xlo, xhi)) {
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "y=0x%llx partially overlaps x=0x%llx",
                       (unsigned long long)a->y, (unsigned long long)a->x);
  }
  if (scree__overlaps(ylo, yhi, wlo, whi))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "y=0x%llx overlaps w=0x%llx", (unsigned long long)a->y,
                       (unsigned long long)a->w);
  memset(var, 0, sizeof *var);
  var->v[V_X] = a->x_dtype;
  var->v[V_W] = a->w_dtype;
  var->v[V_Y] = a->y_dtype;
  return SCREE_OK;
}
