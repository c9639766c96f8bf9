/* rmsnorm.c - RMSNorm's host side: its arguments, config space, default,
 * launch, problems, CPU reference and benchmark entries. The kernel is
 * kernels/rmsnorm.cu. */
#include <math.h>

#include "ops/rowwise.h"

#define SCREE__ARGS_T scree_rmsnorm_args

/* The arguments (include/scree.h), field by field: the checks every call
 * gets, the shape text, the bucket, the vector width, the problem's
 * buffers and the Python binding come from this table. y may be x exactly
 * (in place); w is one row; rstd (optional, check problems only, as
 * LayerNorm's statistics) is each row's fp32 1 / rms, for the backward. */
static const scree__arg schema[] = {
    SCREE__IN(x, .dtype = SCREE__AT(x_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(x_stride)}, .flags = SCREE__VECTOR),
    SCREE__IN(w, .dtype = SCREE__AT(w_dtype), .dims = {SCREE__AT(cols)}, .flags = SCREE__VECTOR),
    SCREE__OUT(y, .dtype = SCREE__AT(y_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
               .strides = {SCREE__AT(y_stride)}, .alias = {SCREE__AT(x)}, .flags = SCREE__VECTOR),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(cols, SCREE__RANGE(1, 65536), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(x_stride), SCREE__STRIDE(y_stride),
    SCREE__DTYPE(x_dtype), SCREE__DTYPE(w_dtype), SCREE__DTYPE(y_dtype),
    SCREE__FLOAT(eps, .flags = SCREE__FINITE | SCREE__NONNEG, .example = 1e-6),
    SCREE__OUT(rstd, .elem = SCREE__E_F32, .dims = {SCREE__AT(rows)},
               .flags = SCREE__OPTIONAL | SCREE__CHECK_ONLY),
};

enum { V_X, V_W, V_Y };

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(x_dtype)},
    {"w", "SCREE_W_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(w_dtype)},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(y_dtype)},
};

/* Bucket: rows rounded up to a power of two, cols exact. rows is a batch
 * dimension: batch-invariant mode tunes on 1024 rows. */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 1024},
                                   {"cols", 0, SCREE__AT(cols), 0}};

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

/* A vector access of VEC elements needs every row start aligned to it:
 * narrow VEC (keeping the elements per thread) until the call allows it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, scree__vec_log2(&scree__op_rmsnorm, var, args));
}

/* Skips configs whose threads would mostly idle on this row length, or
 * that would re-read most of the row from memory in a second pass. */
static int worth_timing(const scree__config *c, const scree__variant *var,
                        const void *args) {
  (void)var;
  return scree__rowwise_worth(c, ((const scree_rmsnorm_args *)args)->cols);
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
  uint64_t x = a->x, w = a->w, y = a->y, rstd = a->rstd;
  void *params[] = {&x, &w, &y, &rows, &cols, &xs, &ys, &eps, &rstd};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "rmsnorm");
}

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count, capped at 1 GiB of x. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_rmsnorm, b, var, check, 0, args);
}

/* Random rows have nearly equal RMS, so a kernel that mixed rows up, or
 * dropped the scalar tail or the part of a row past the register cache,
 * could stay inside the tolerance. Scale each row differently (by 1/8 ...
 * 8) and make the tail and the last quarter of each row large. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_rmsnorm_args *a = args;
  scree__rowwise_shape_rows(h[0], a->x_dtype, a->rows, a->cols,
                            a->x_stride ? a->x_stride : a->cols, 4);
}

/* The shape's rows: x, w in, y out. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  return scree__rowwise_problem(&scree__op_rmsnorm, args, var, check, 0, p, why, why_size);
}

/* The benchmark entries: the shapes of bench/rowwise_shapes.json. */
static const char *const bench[] = {
    "x=fp16,w=fp16,y=fp16 rows=16384,cols=4096", "x=bf16,w=bf16,y=bf16 rows=16384,cols=4096",
    "x=fp16,w=fp16,y=fp16 rows=4096,cols=8192",  "x=fp16,w=fp16,y=fp16 rows=65536,cols=1024",
    "x=fp16,w=fp16,y=fp16 rows=16384,cols=128",  NULL,
};

/* ---- the CPU reference (double accumulation) ----------------------------- */

/* host: x, w, y, [rstd] in the problem's buffer order (the schema's). */
SCREE__REFERENCE(rmsnorm) {
  const scree_rmsnorm_args *a = args;
  const void *x = host[0], *w = host[1];
  void *y = host[2];
  float *rstd = a->rstd ? host[3] : NULL;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    double ss = 0;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      ss += v * v;
    }
    const double inv = 1.0 / sqrt(ss / (double)a->cols + (double)a->eps);
    if (rstd) rstd[r] = (float)inv;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      const double g = scree__load_elem(w, a->w_dtype, (size_t)c);
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), v * inv * g);
    }
  }
}

static const scree__impl impls[] = {
    {SCREE__ROWWISE_IMPL(scree__rowwise_config_check, "rmsnorm.cu", "scree_rmsnorm")}};

SCREE__DEFINE_OP(rmsnorm, .shape_inputs = shape_inputs);
