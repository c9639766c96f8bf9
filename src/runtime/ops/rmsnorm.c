/* rmsnorm.c - RMSNorm's host side: its arguments, config space,
 * constraints, defaults, the launch, buckets, problems, the CPU reference
 * and the benchmark entries. The kernel is kernels/rmsnorm.cu. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

#define ARG(m) SCREE__ARG(scree_rmsnorm_args, m)
#define AT(m) SCREE__AT(scree_rmsnorm_args, m)

/* The arguments (include/scree.h), field by field: the checks every call
 * gets, the shape text, the problem's buffers and the Python binding come
 * from this table. y may be x exactly (in place); w is one row. */
static const scree__arg schema[] = {
    {ARG(x), .role = SCREE__IN, .dtype = AT(x_dtype), .dims = {AT(rows), AT(cols)},
     .strides = {AT(x_stride)}},
    {ARG(w), .role = SCREE__IN, .dtype = AT(w_dtype), .dims = {AT(cols)}},
    {ARG(y), .role = SCREE__OUT, .dtype = AT(y_dtype), .dims = {AT(rows), AT(cols)},
     .strides = {AT(y_stride)}, .alias = {AT(x)}},
    {ARG(rows), .role = SCREE__DIM, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY},
    {ARG(cols), .role = SCREE__DIM, SCREE__RANGE(1, 65536), .flags = SCREE__SHAPE | SCREE__LIMIT},
    {ARG(x_stride), .role = SCREE__STRIDE},
    {ARG(y_stride), .role = SCREE__STRIDE},
    {ARG(x_dtype), .role = SCREE__DTYPE},
    {ARG(w_dtype), .role = SCREE__DTYPE},
    {ARG(y_dtype), .role = SCREE__DTYPE},
    {ARG(eps), .role = SCREE__FLOAT, .flags = SCREE__FINITE | SCREE__NONNEG},
};

enum { V_X, V_W, V_Y };

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, AT(x_dtype)},
    {"w", "SCREE_W_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, AT(w_dtype)},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, AT(y_dtype)},
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
static const scree__bdim dims[] = {{"rows", 1, AT(rows)}, {"cols", 0, AT(cols)}};

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
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
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
  if (scree__problem_shape(a, schema, SCREE__COUNT(schema), why, why_size)) return -1;
  /* The check problem keeps the row length; a few rows show every mistake
   * that many would, and keep the CPU reference quick. */
  if (check && a->rows > 97) a->rows = 97;
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  if (a->eps == 0) a->eps = 1e-6f;
  /* x, w, y from the schema, each read or written once. */
  if (scree__problem_bufs(p, schema, SCREE__COUNT(schema), why, why_size)) return -1;
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

/* ---- the CPU reference (double accumulation) ---------------------------- */

/* host: x, w, y in the problem's buffer order (the schema's). */
SCREE__REFERENCE(rmsnorm) {
  const scree_rmsnorm_args *a = args;
  const void *x = host[0], *w = host[1];
  void *y = host[2];
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    double ss = 0;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      ss += v * v;
    }
    const double inv = 1.0 / sqrt(ss / (double)a->cols + (double)a->eps);
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      const double g = scree__load_elem(w, a->w_dtype, (size_t)c);
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), v * inv * g);
    }
  }
}

/* ---- benchmark entries: the shapes of bench/rowwise_shapes.json --------- */

static const char *const bench[] = {
    "x=fp16,w=fp16,y=fp16 rows=16384,cols=4096",
    "x=bf16,w=bf16,y=bf16 rows=16384,cols=4096",
    "x=fp16,w=fp16,y=fp16 rows=4096,cols=8192",
    "x=fp16,w=fp16,y=fp16 rows=65536,cols=1024",
    "x=fp16,w=fp16,y=fp16 rows=16384,cols=128",
    NULL,
};

static const scree__impl impls[] = {{SCREE__ROWWISE_IMPL("rmsnorm.cu", "scree_rmsnorm")}};

const scree__op scree__op_rmsnorm = {
    SCREE__OP_DESCRIPTOR(rmsnorm),
    .causal_vfield = -1,
    .adapt_class = adapt_class,
    .shape_inputs = shape_inputs,
};
