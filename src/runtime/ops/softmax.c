/* softmax.c - last-dimension softmax's host side: its arguments, config
 * space, constraints, defaults, the launch, buckets, problems, the CPU
 * reference and the benchmark entries. The kernel is kernels/softmax.cu. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

#define LOG2E 1.4426950408889634

#define ARG(m) SCREE__ARG(scree_softmax_args, m)
#define AT(m) SCREE__AT(scree_softmax_args, m)

/* The arguments (include/scree.h), field by field. y may be x exactly (in
 * place, also across dtypes of one size). */
static const scree__arg schema[] = {
    {ARG(x), .role = SCREE__IN, .dtype = AT(x_dtype), .dims = {AT(rows), AT(cols)},
     .strides = {AT(x_stride)}},
    {ARG(y), .role = SCREE__OUT, .dtype = AT(y_dtype), .dims = {AT(rows), AT(cols)},
     .strides = {AT(y_stride)}, .alias = {AT(x)}},
    {ARG(rows), .role = SCREE__DIM, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY},
    {ARG(cols), .role = SCREE__DIM, SCREE__RANGE(1, 262144), .flags = SCREE__SHAPE | SCREE__LIMIT},
    {ARG(x_stride), .role = SCREE__STRIDE},
    {ARG(y_stride), .role = SCREE__STRIDE},
    {ARG(x_dtype), .role = SCREE__DTYPE},
    {ARG(y_dtype), .role = SCREE__DTYPE},
    {ARG(scale), .role = SCREE__FLOAT, .flags = SCREE__FINITE},
};

enum { V_X, V_Y };

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, AT(x_dtype)},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, AT(y_dtype)},
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
static const scree__bdim dims[] = {{"rows", 1, AT(rows)}, {"cols", 0, AT(cols)}};

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
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
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
  if (scree__problem_shape(a, schema, SCREE__COUNT(schema), why, why_size)) return -1;
  /* The check problem keeps the row length; a few rows show every mistake
   * that many would, and keep the CPU reference quick. It also takes a
   * scale other than 1, so a kernel that ignored it fails. */
  if (check) {
    const int64_t ecap = ((int64_t)1 << 22) / a->cols;
    if (a->rows > 97) a->rows = 97;
    if (a->rows > ecap) a->rows = ecap > 0 ? ecap : 1;
    if (a->scale == 0) a->scale = 0.75f;
  }
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  /* x and y from the schema, each read or written once. y's tolerance is
   * one rounding to its dtype (scree__tolerance): the kernel's fp32 error
   * (ex2.approx, the exponent's FMA, the row sum) stays below 1e-5
   * relative on the values above atol. */
  if (scree__problem_bufs(p, schema, SCREE__COUNT(schema), why, why_size)) return -1;
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

/* ---- the CPU reference (double accumulation) ---------------------------- */

/* host: x, y in the problem's buffer order (the schema's). Each element
 * of x is read for the last time just before its own y is written, so y
 * may be x (in place). */
SCREE__REFERENCE(softmax) {
  const scree_softmax_args *a = args;
  const void *x = host[0];
  void *y = host[1];
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  const double s = a->scale != 0.f ? (double)a->scale : 1.0;
  for (int64_t r = 0; r < a->rows; r++) {
    double m = -INFINITY;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = s * scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      if (v > m) m = v;
    }
    double sum = 0;
    for (int64_t c = 0; c < a->cols; c++)
      sum += exp(s * scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c)) - m);
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = s * scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), exp(v - m) / sum);
    }
  }
}

/* ---- benchmark entries: the shapes of bench/rowwise_shapes.json --------- */

static const char *const bench[] = {
    "x=fp16,y=fp16 rows=16384,cols=4096",
    "x=bf16,y=bf16 rows=16384,cols=4096",
    "x=fp16,y=fp16 rows=4096,cols=8192",
    "x=fp16,y=fp16 rows=65536,cols=1024",
    "x=fp16,y=fp16 rows=8,cols=4096",
    "x=fp16,y=fp16 rows=16384,cols=128",
    NULL,
};

/* ---- the op's own argument rule ----------------------------------------- */

/* The kernel multiplies by scale * log2(e) in fp32: that must be finite
 * too (the schema has checked that scale is). */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_softmax_args *a = args;
  if (!isfinite((float)((double)a->scale * LOG2E)))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "scale=%g: scale * log2(e) is not finite in fp32", (double)a->scale);
  return SCREE_OK;
}

static const scree__impl impls[] = {{SCREE__ROWWISE_IMPL("softmax.cu", "scree_softmax", "scree_softmax_stream")}};

const scree__op scree__op_softmax = {
    SCREE__OP_DESCRIPTOR(softmax),
    .causal_vfield = -1,
    .validate = validate,
    .adapt_class = adapt_class,
    .shape_inputs = shape_inputs,
};
