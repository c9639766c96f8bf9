/* softmax.c - last-dimension softmax's host side: its arguments, config
 * space, default, launch, problems, CPU reference and benchmark entries.
 * The kernel is kernels/softmax.cu. */
#include <math.h>

#include "ops/rowwise.h"

#define LOG2E 1.4426950408889634

#define SCREE__ARGS_T scree_softmax_args

/* The arguments (include/scree.h), field by field. y may be x exactly (in
 * place, also across dtypes of one size). */
static const scree__arg schema[] = {
    SCREE__IN(x, .dtype = SCREE__AT(x_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(x_stride)}, .flags = SCREE__VECTOR),
    SCREE__OUT(y, .dtype = SCREE__AT(y_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
               .strides = {SCREE__AT(y_stride)}, .alias = {SCREE__AT(x)}, .flags = SCREE__VECTOR),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(cols, SCREE__RANGE(1, 262144), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(x_stride), SCREE__STRIDE(y_stride),
    SCREE__DTYPE(x_dtype), SCREE__DTYPE(y_dtype),
    SCREE__FLOAT(scale, .flags = SCREE__FINITE), /* 0 means 1 */
};

enum { V_X, V_Y };

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(x_dtype)},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(y_dtype)},
};

/* Bucket: rows rounded up to a power of two, cols exact (the row length
 * decides the launch shape and how much of the row stays in registers).
 * rows is a batch dimension: batch-invariant mode tunes on 1024 rows. */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 1024},
                                   {"cols", 0, SCREE__AT(cols), 0}};

/* The kernel multiplies by scale * log2(e) in fp32: that must be finite
 * too (the schema has checked that scale is). */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_softmax_args *a = args;
  if (!isfinite((float)((double)a->scale * LOG2E)))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "scale=%g: scale * log2(e) is not finite in fp32", (double)a->scale);
  return SCREE_OK;
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

/* A vector access of VEC elements needs every row start aligned to it:
 * narrow VEC (keeping the elements per thread) until the call allows it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, scree__vec_log2(&scree__op_softmax, var, args));
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

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count, capped at 1 GiB of x; checked
 * on at most 97 rows and 4M elements, so the reference is quick. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_softmax, b, var, check, (int64_t)1 << 22, args);
}

/* The shape's rows: x in, y out. y's tolerance is one rounding to its dtype
 * (scree__tolerance): the kernel's fp32 error (ex2.approx, the exponent's
 * FMA, the row sum) stays below 1e-5 relative on the values above atol. A
 * check problem takes a scale other than 1, so a kernel that ignored it
 * fails. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  if (scree__rowwise_problem(&scree__op_softmax, args, var, check, (int64_t)1 << 22, p, why,
                             why_size))
    return -1;
  scree_softmax_args *a = (scree_softmax_args *)p->args;
  if (check && a->scale == 0) a->scale = 0.75f;
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
  scree__rowwise_shape_rows(h[0], a->x_dtype, a->rows, a->cols,
                            a->x_stride ? a->x_stride : a->cols, 2);
}

/* The benchmark entries: the shapes of bench/rowwise_shapes.json. */
static const char *const bench[] = {
    "x=fp16,y=fp16 rows=16384,cols=4096", "x=bf16,y=bf16 rows=16384,cols=4096",
    "x=fp16,y=fp16 rows=4096,cols=8192",  "x=fp16,y=fp16 rows=65536,cols=1024",
    "x=fp16,y=fp16 rows=8,cols=4096",     "x=fp16,y=fp16 rows=16384,cols=128",
    NULL,
};

/* ---- the CPU reference (double accumulation) ----------------------------- */

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

static const scree__impl impls[] = {{SCREE__ROWWISE_IMPL(
    scree__rowwise_config_check, "softmax.cu", "scree_softmax", "scree_softmax_stream")}};

SCREE__DEFINE_OP(softmax, .validate = validate, .shape_inputs = shape_inputs);
