/* softmax.c - last-dimension softmax's host side: config space, constraints,
 * defaults, argument checks, the launch, buckets and problems. The kernel is
 * kernels/softmax.cu; the CPU reference ops/softmax_ref.c. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

enum { V_X, V_Y };

#define MAX_COLS 262144
#define LOG2E 1.4426950408889634

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}},
};

static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  (void)t; /* static shared memory only, well under every arch's limit */
  return scree__rowwise_check_dtypes(var, 2, why, n) && scree__rowwise_check(c, why, n);
}

/* The row-wise default (16-byte accesses, about four vectors in flight per
 * thread, the whole row in registers when it fits, at least 128 threads per
 * CTA), held to what compiles without spills on sm_90 (ptxas): at most 128
 * bytes of register cache per thread (whole fp16 rows of 65536, fp32 rows
 * of 32768 in a 1024-thread group). A longer row takes the streaming entry,
 * which holds a batch beside the cache: there a 1024-thread group (64
 * registers a thread) would spill, so the group is 512 threads with 128
 * bytes of cache each, and the rest of the row is read twice. The same on
 * sm_80 and sm_90 until measurements say otherwise. */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  (void)t;
  const scree_softmax_args *a = args;
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_X]);
  const int64_t cols = a ? a->cols : 4096;
  scree__rowwise_default(cols, es, out);
  int *tpr = &out->v[SCREE__RW_TPR], *cache = &out->v[SCREE__RW_CACHE];
  const int vec = out->v[SCREE__RW_VEC];
  while (*cache > 1 && vec * *cache * es > 128) *cache /= 2;
  if (cols / vec > (int64_t)*tpr * *cache && *tpr * out->v[SCREE__RW_ROWS] == 1024) {
    *tpr = 512;
    *cache = 128 / (vec * es);
    if (*cache * vec > 64) *cache = 64 / vec;
    if (*cache > 16) *cache = 16;
  }
}

/* log2 of the widest vector (in elements, at most 8) that every pointer
 * and row stride of the call allows. */
static int vec_log2(const scree__variant *var, const scree_softmax_args *a) {
  int l = 3;
  l = scree__vlog2_ptr(l, a->x, scree_dtype_size((scree_dtype)var->v[V_X]));
  l = scree__vlog2_ptr(l, a->y, scree_dtype_size((scree_dtype)var->v[V_Y]));
  l = scree__vlog2_stride(l, a->x_stride ? a->x_stride : a->cols);
  return scree__vlog2_stride(l, a->y_stride ? a->y_stride : a->cols);
}

/* A vector access of VEC elements needs every row start aligned to it:
 * narrow VEC (keeping the elements per thread) until the call allows it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, vec_log2(var, args));
}

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  (void)var;
  const scree_softmax_args *a = args;
  uint64_t x = a->x, y = a->y;
  long long rows = a->rows;
  int cols = (int)a->cols;
  long long xs = a->x_stride ? a->x_stride : a->cols;
  long long ys = a->y_stride ? a->y_stride : a->cols;
  /* The kernel works in the log2 domain: one multiplier, scale * log2(e). */
  float s = (float)((a->scale != 0.f ? (double)a->scale : 1.0) * LOG2E);
  void *params[] = {&x, &y, &rows, &cols, &xs, &ys, &s};
  /* Rows past the register cache take the streaming entry. */
  const int streams = a->cols / c->v[SCREE__RW_VEC] >
                      (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_CACHE];
  return scree__rowwise_launch(ctx, k->fn[streams], c, rows, params, stream,
                               streams ? "softmax_stream" : "softmax");
}

/* ---- tuning hooks ------------------------------------------------------ */

/* Bucket: rows rounded up to a power of two, cols exact (the row length
 * decides the launch shape and how much of the row stays in registers). */
static const scree__bdim dims[] = {{"rows", 1}, {"cols", 0}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_softmax_args *a = args;
  d[0] = a->rows;
  d[1] = a->cols;
}

/* The widest vector every pointer and stride of the call allows, as log2. */
static int adapt_class(const scree__variant *var, const void *args) {
  return vec_log2(var, args);
}

/* Tuned on the bucket's largest row count, capped at 256 MiB of x (past
 * that the kernel is long enough that time per byte no longer changes);
 * checked on at most 97 rows and 4M elements, so the reference is quick. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree_softmax_args *a = args;
  memset(a, 0, sizeof *a);
  a->cols = b->v[1];
  const int64_t es = (int64_t)scree_dtype_size((scree_dtype)var->v[V_X]);
  int64_t rows = b->v[0];
  const int64_t cap = ((int64_t)256 << 20) / (a->cols > 0 ? a->cols * es : 1);
  if (rows > cap) rows = cap > 0 ? cap : 1;
  if (check) {
    const int64_t ecap = ((int64_t)1 << 22) / (a->cols > 0 ? a->cols : 1);
    if (rows > 97) rows = 97;
    if (rows > ecap) rows = ecap > 0 ? ecap : 1;
  }
  a->rows = rows;
  a->x_dtype = (scree_dtype)var->v[V_X];
  a->y_dtype = (scree_dtype)var->v[V_Y];
}

/* Skips configs whose threads would mostly idle on this row length, or
 * that would re-read most of the row in the second pass. Rows longer than
 * twice the largest register cache of the space (65536 elements) stream
 * whatever the config: there, configs of 256 threads per row or more are
 * timed (one row's stream is what one group has in flight). */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const int64_t cols = ((const scree_softmax_args *)args)->cols;
  if (scree__rowwise_worth(c, cols)) return 1;
  return cols > 2 * 65536 && c->v[SCREE__RW_TPR] >= 256;
}

static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  scree_softmax_args *a = (scree_softmax_args *)p->args;
  memcpy(a, args, sizeof *a);
  if (a->rows < 1 || a->cols < 1 || a->cols > MAX_COLS) {
    scree__set_why(why, why_size, "rows=%lld, cols=%lld: need rows >= 1, 1 <= cols <= %d",
                   (long long)a->rows, (long long)a->cols, MAX_COLS);
    return -1;
  }
  /* The check problem keeps the row length; a few rows show every mistake
   * that many would, and keep the CPU reference quick. It also takes a
   * scale other than 1, so a kernel that ignored it fails. */
  if (check) {
    const int64_t ecap = ((int64_t)1 << 22) / a->cols;
    if (a->rows > 97) a->rows = 97;
    if (a->rows > ecap) a->rows = ecap > 0 ? ecap : 1;
    if (a->scale == 0) a->scale = 0.75f;
  }
  a->x_dtype = (scree_dtype)var->v[V_X];
  a->y_dtype = (scree_dtype)var->v[V_Y];
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  scree__problem_buf(p, "x", SCREE__BUF_IN, a->x_dtype, (size_t)(a->rows * xs),
                     offsetof(scree_softmax_args, x));
  /* One rounding to y's dtype (scree__tolerance): the kernel's fp32 error
   * (ex2.approx, the exponent's FMA, the row sum) stays below 1e-5 relative
   * on the values above atol. */
  scree__problem_buf(p, "y", SCREE__BUF_OUT, a->y_dtype, (size_t)(a->rows * ys),
                     offsetof(scree_softmax_args, y));
  /* x read once, y written once. */
  p->bytes = (double)a->rows * (double)a->cols *
             (double)(scree_dtype_size(a->x_dtype) + scree_dtype_size(a->y_dtype));
  snprintf(p->desc, sizeof p->desc, "%lld rows of %lld", (long long)a->rows, (long long)a->cols);
  return 0;
}

/* Random rows have nearly the same spread, so a kernel that mixed rows up,
 * or dropped the scalar tail or the part of a row past the register cache,
 * could stay inside the tolerance. Scale each row differently (by 1/8 ...
 * 8: flat rows, where every element weighs in the sum, and peaked ones),
 * and make the last quarter and the last 8 elements of each row larger:
 * the largest outputs, and most of a peaked row's sum, then come from the
 * streamed part and the tail, which a faulty kernel is likeliest to drop. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_softmax_args *a = args;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    const double row_scale = ldexp(1.0, (int)(r % 7) - 3);
    for (int64_t c = 0; c < a->cols; c++) {
      double f = row_scale;
      if (c >= a->cols - a->cols / 4) f *= 2;
      if (c >= a->cols - 8) f *= 2;
      const size_t i = (size_t)(r * xs + c);
      scree__store_elem(h[0], a->x_dtype, i, f * scree__load_elem(h[0], a->x_dtype, i));
    }
  }
}

SCREE__REFERENCE(softmax); /* ops/softmax_ref.c */

static const scree__impl impls[] = {{
    .name = "generic",
    .source = "softmax.cu",
    .entries = {"scree_softmax", "scree_softmax_stream"},
    .min_sm = 80,
    .nfields = SCREE__RW_NFIELDS,
    .fields = scree__rowwise_fields,
    .check = check,
    .adapt = adapt,
    .worth_timing = worth_timing,
    .launch = launch,
}};

static const scree__sfield shape[] = {
    {"rows", offsetof(scree_softmax_args, rows)},
    {"cols", offsetof(scree_softmax_args, cols)},
};

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip);

const scree__op scree__op_softmax = {
    .name = "softmax",
    .args_size = sizeof(scree_softmax_args),
    .nimpls = 1,
    .impls = impls,
    .nvfields = 2,
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
    .reference = scree__ref_softmax,
};

/* ---- the public entry point -------------------------------------------- */

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip) {
  (void)stream;
  const scree_softmax_args *a = args;
  if (scree__arg_float_dtype(ctx, "x_dtype", a->x_dtype) ||
      scree__arg_float_dtype(ctx, "y_dtype", a->y_dtype))
    return SCREE_ERROR_UNSUPPORTED;
  if (a->cols < 1)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "cols=%lld must be at least 1",
                       (long long)a->cols);
  if (a->cols > MAX_COLS)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED, "cols=%lld exceeds the supported maximum %d",
                       (long long)a->cols, MAX_COLS);
  if (a->rows < 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "rows=%lld is negative",
                       (long long)a->rows);
  /* The kernel multiplies by scale * log2(e) in fp32: that must be finite. */
  if (!isfinite(a->scale) || !isfinite((float)((double)a->scale * LOG2E)))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "scale=%g must be finite (and scale * log2(e) finite in fp32)",
                       (double)a->scale);
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
      (st = scree__arg_elem_ptr(ctx, "y", a->y, a->y_dtype)))
    return st;
  uint64_t xlo, xhi, ylo, yhi;
  if (!scree__byte_range(a->x, a->rows, a->cols, xs, scree_dtype_size(a->x_dtype), &xlo, &xhi) ||
      !scree__byte_range(a->y, a->rows, a->cols, ys, scree_dtype_size(a->y_dtype), &ylo, &yhi))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "rows=%lld x stride overflows the address space", (long long)a->rows);
  if (a->y == a->x) {
    if (scree_dtype_size(a->x_dtype) != scree_dtype_size(a->y_dtype) || xs != ys)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "y == x (in place) needs equal element sizes and strides");
  } else if (scree__overlaps(ylo, yhi, xlo, xhi)) {
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "y=0x%llx partially overlaps x=0x%llx",
                       (unsigned long long)a->y, (unsigned long long)a->x);
  }
  memset(var, 0, sizeof *var);
  var->v[V_X] = a->x_dtype;
  var->v[V_Y] = a->y_dtype;
  return SCREE_OK;
}
