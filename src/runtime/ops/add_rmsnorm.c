/* add_rmsnorm.c - the residual add fused with RMSNorm, host side: its
 * arguments, config space, default, launch, problems, CPU reference and
 * benchmark entries. The kernel is kernels/add_rmsnorm.cu. The variant is
 * the three dtypes (x's covers residual and h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/rowwise.h"

#define SCREE__ARGS_T scree_add_rmsnorm_args
#define ROWS_COLS .dims = {SCREE__AT(rows), SCREE__AT(cols)}

/* The arguments (include/scree.h), field by field. h may be x or residual
 * exactly (in place); y has its own memory; x and residual are only read,
 * so they may overlap, even be one buffer. rstd (optional, check problems
 * only) is each row's fp32 1 / rms of h, for the backward. */
static const scree__arg schema[] = {
    SCREE__IN(x, .dtype = SCREE__AT(x_dtype), ROWS_COLS, .strides = {SCREE__AT(x_stride)},
              .flags = SCREE__VECTOR),
    SCREE__IN(residual, .dtype = SCREE__AT(x_dtype), ROWS_COLS,
              .strides = {SCREE__AT(residual_stride)}, .flags = SCREE__VECTOR),
    SCREE__IN(w, .dtype = SCREE__AT(w_dtype), .dims = {SCREE__AT(cols)}, .flags = SCREE__VECTOR),
    SCREE__OUT(h, .dtype = SCREE__AT(x_dtype), ROWS_COLS, .strides = {SCREE__AT(h_stride)},
               .alias = {SCREE__AT(x), SCREE__AT(residual)}, .flags = SCREE__VECTOR),
    SCREE__OUT(y, .dtype = SCREE__AT(y_dtype), ROWS_COLS, .strides = {SCREE__AT(y_stride)},
               .flags = SCREE__VECTOR),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(cols, SCREE__RANGE(1, 65536), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(x_stride), SCREE__STRIDE(residual_stride), SCREE__STRIDE(h_stride),
    SCREE__STRIDE(y_stride),
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

/* Bucket: rows rounded up to a power of two, cols exact. In place and out
 * of place share the bucket's config (the same bytes move). rows is a batch
 * dimension: batch-invariant mode tunes on 1024 rows. */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 1024},
                                   {"cols", 0, SCREE__AT(cols), 0}};

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

/* Narrow VEC (keeping the elements per thread) until every pointer and row
 * stride of the call allows it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, scree__vec_log2(&scree__op_add_rmsnorm, var, args));
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
  uint64_t x = a->x, res = a->residual, h = a->h, w = a->w, y = a->y, rstd = a->rstd;
  void *params[] = {&x, &res, &h, &w, &y, &rows, &cols, &xs, &rs, &hs, &ys, &eps, &rstd};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "add_rmsnorm");
}

/* Skips configs whose threads would mostly idle on this row length, or
 * that would read most of h back from memory in a second pass. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  return scree__rowwise_worth(c, ((const scree_add_rmsnorm_args *)args)->cols);
}

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count, capped at 1 GiB of x and
 * residual together. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_add_rmsnorm, b, var, check, 0, args);
}

/* The shape's rows: x, residual, w in, then h and y out (h out of place;
 * the GPU test runs both in-place forms through the public entry).
 *
 * Tolerances: h, one rounding of x's dtype (the fp32 sum of two values of
 * x's dtype rounds to the same value as the exact sum, so h is in fact
 * exact); y, one rounding of y's dtype (scree__tolerance), as RMSNorm's:
 * the norm is taken of the same rounded h on both sides. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  if (scree__rowwise_problem(&scree__op_add_rmsnorm, args, var, check, 0, p, why, why_size))
    return -1;
  strncat(p->desc, ", h out of place", sizeof p->desc - strlen(p->desc) - 1);
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

/* The benchmark entries: the shapes of bench/rowwise_shapes.json, h out of
 * place. */
static const char *const bench[] = {
    "x=fp16,w=fp16,y=fp16 rows=16384,cols=4096", "x=bf16,w=bf16,y=bf16 rows=16384,cols=4096",
    "x=fp16,w=fp16,y=fp16 rows=4096,cols=8192",  "x=fp16,w=fp16,y=fp16 rows=65536,cols=1024",
    "x=fp16,w=fp16,y=fp16 rows=8,cols=4096",     "x=fp16,w=fp16,y=fp16 rows=16384,cols=128",
    NULL,
};

/* ---- the CPU reference (double accumulation) ----------------------------- */

/* host: x, residual, w, h, y, [rstd] in the problem's buffer order (the
 * schema's). h is written first, rounded to x's dtype, and the
 * norm is taken of it as written. h may be x or residual (same stride):
 * each element is read before it is written. */
SCREE__REFERENCE(add_rmsnorm) {
  const scree_add_rmsnorm_args *a = args;
  const void *x = host[0], *res = host[1], *w = host[2];
  void *h = host[3], *y = host[4];
  float *rstd = a->rstd ? host[5] : NULL;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t rs = a->residual_stride ? a->residual_stride : a->cols;
  const int64_t hs = a->h_stride ? a->h_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    double ss = 0;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c)) +
                       scree__load_elem(res, a->x_dtype, (size_t)(r * rs + c));
      scree__store_elem(h, a->x_dtype, (size_t)(r * hs + c), v);
      const double hv = scree__load_elem(h, a->x_dtype, (size_t)(r * hs + c));
      ss += hv * hv;
    }
    const double inv = 1.0 / sqrt(ss / (double)a->cols + (double)a->eps);
    if (rstd) rstd[r] = (float)inv;
    for (int64_t c = 0; c < a->cols; c++) {
      const double hv = scree__load_elem(h, a->x_dtype, (size_t)(r * hs + c));
      const double g = scree__load_elem(w, a->w_dtype, (size_t)c);
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), hv * inv * g);
    }
  }
}

static const scree__impl impls[] = {
    {SCREE__ROWWISE_IMPL(scree__rowwise_config_check, "add_rmsnorm.cu", "scree_add_rmsnorm")}};

SCREE__DEFINE_OP(add_rmsnorm, .shape_inputs = shape_inputs);
