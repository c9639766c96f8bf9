/* add_rmsnorm_backward.c - the backward of the residual add fused with
 * RMSNorm, host side: its arguments, config
 * space (the row-wise launch shape), default, launch (kernel and ordered
 * dw sum, ops/rowwise.c), problems, CPU reference hook and benchmark
 * entries. The kernel is kernels/norm_backward.cu with SCREE_NB_KIND=1;
 * the reference is ops/rowwise_backward_ref.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/rowwise.h"
#include "ops/rowwise_backward_ref.h"

#define SCREE__ARGS_T scree_add_rmsnorm_backward_args
#define ROWS_COLS .dims = {SCREE__AT(rows), SCREE__AT(cols)}

/* The arguments (include/scree.h), field by field. dh may be dy or
 * dh_next exactly (in place); dh_next and rstd are optional. rows is not
 * an empty-call size: rows 0 still writes dw (zeros). */
static const scree__arg schema[] = {
    SCREE__IN(h, .dtype = SCREE__AT(x_dtype), ROWS_COLS, .strides = {SCREE__AT(h_stride)},
              .flags = SCREE__VECTOR),
    SCREE__IN(w, .dtype = SCREE__AT(w_dtype), .dims = {SCREE__AT(cols)}, .flags = SCREE__VECTOR),
    SCREE__IN(dy, .dtype = SCREE__AT(y_dtype), ROWS_COLS, .strides = {SCREE__AT(dy_stride)},
              .flags = SCREE__VECTOR),
    SCREE__IN(dh_next, .dtype = SCREE__AT(x_dtype), ROWS_COLS,
              .strides = {SCREE__AT(dh_next_stride)}, .flags = SCREE__VECTOR | SCREE__OPTIONAL),
    SCREE__IN(rstd, .elem = SCREE__E_F32, .dims = {SCREE__AT(rows)}, .flags = SCREE__OPTIONAL),
    SCREE__OUT(dh, .dtype = SCREE__AT(x_dtype), ROWS_COLS, .strides = {SCREE__AT(dh_stride)},
               .alias = {SCREE__AT(dy), SCREE__AT(dh_next)}, .flags = SCREE__VECTOR),
    SCREE__OUT(dw, .dtype = SCREE__AT(w_dtype), .dims = {SCREE__AT(cols)}),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE),
    SCREE__DIM(cols, SCREE__RANGE(1, 65536), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(h_stride), SCREE__STRIDE(dy_stride), SCREE__STRIDE(dh_next_stride),
    SCREE__STRIDE(dh_stride),
    SCREE__DTYPE(x_dtype), SCREE__DTYPE(w_dtype), SCREE__DTYPE(y_dtype),
    SCREE__FLOAT(eps, .flags = SCREE__FINITE | SCREE__NONNEG, .example = 1e-6),
};

enum { V_X, V_W, V_Y };

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(x_dtype)},
    {"w", "SCREE_W_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(w_dtype)},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(y_dtype)},
};

/* Bucket: rows rounded up to a power of two, cols exact (the forward's). */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 0},
                                   {"cols", 0, SCREE__AT(cols), 0}};

/* Hand-picked default, the same on sm_80 and sm_90 until a sweep says
 * otherwise: scree__nb_default (ops/rowwise.c). */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  (void)t;
  const scree_add_rmsnorm_backward_args *a = args;
  scree__nb_default(a ? a->cols : 4096, (int)scree_dtype_size((scree_dtype)var->v[V_X]),
                    (int)scree_dtype_size((scree_dtype)var->v[V_Y]), 1, 0, out);
}

static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, scree__vec_log2(&scree__op_add_rmsnorm_backward, var, args));
}

static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  return scree__rowwise_worth(c, ((const scree_add_rmsnorm_backward_args *)args)->cols);
}

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  (void)var;
  const scree_add_rmsnorm_backward_args *a = args;
  const scree__nb_call n = {
      .x = a->h, .w = a->w, .dy = a->dy, .dres = a->dh_next, .rstd = a->rstd, .dx = a->dh,
      .dw = a->dw, .rows = a->rows, .cols = a->cols,
      .xs = a->h_stride ? a->h_stride : a->cols, .dys = a->dy_stride ? a->dy_stride : a->cols,
      .dress = a->dh_next_stride ? a->dh_next_stride : a->cols,
      .dxs = a->dh_stride ? a->dh_stride : a->cols, .eps = a->eps, .nacc = 1,
      .smem = c->impl == 1};
  return scree__nb_launch(ctx, k, c, &n, stream, "add_rmsnorm_backward");
}

/* ---- problems ------------------------------------------------------------ */

static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_add_rmsnorm_backward, b, var, check, 0, args);
}

/* The shape's rows: h, w, dy, dh_next in, dh and dw out; without rstd (random
 * values would not be the forward's: the kernel recomputes it, and the
 * GPU test runs the saved-rstd path with its own buffers).
 *
 * Tolerances: dh, one rounding of x's dtype plus an atol of 1e-4 for the
 * fp32 cancellation of its two terms (each up to about 8 here: rows are
 * scaled by 1/8 ... 8, rstd by the inverse); dw, one rounding of w's dtype
 * plus an atol of 1e-3 for its fp32 sum over up to 97 rows (terms up to
 * about 16 in the large tails; sums up to about 100). */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  if (scree__rowwise_problem_omit(&scree__op_add_rmsnorm_backward, args, var, check, 0, "rstd", p,
                                  why, why_size))
    return -1;
  scree__problem_find(p, "dh")->atol += 1e-4;
  scree__problem_find(p, "dw")->atol += 1e-3;
  return 0;
}

/* Rows of different scale and large tails, as the forward's. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_add_rmsnorm_backward_args *a = args;
  scree__rowwise_shape_rows(h[0], a->x_dtype, a->rows, a->cols,
                            a->h_stride ? a->h_stride : a->cols, 4);
}

static const char *const bench[] = {
    "x=fp16,w=fp16,y=fp16 rows=16384,cols=4096", "x=bf16,w=bf16,y=bf16 rows=16384,cols=4096",
    "x=bf16,w=bf16,y=bf16 rows=4096,cols=8192",  "x=bf16,w=bf16,y=bf16 rows=65536,cols=1024",
    NULL,
};

/* host: h, w, dy, dh_next, dh, dw (the problem's buffers: dh_next is
 * held, rstd never). h is the sum the forward wrote: the reference's x,
 * with no residual. */
SCREE__REFERENCE(add_rmsnorm_backward) {
  const scree_add_rmsnorm_backward_args *a = args;
  scree__add_rmsnorm_backward_ref(host[0], a->h_stride, NULL, 0, host[1], host[2], a->dy_stride,
                                  host[3], a->dh_next_stride, host[4], a->dh_stride, host[5],
                                  a->rows, a->cols, a->x_dtype, a->w_dtype, a->y_dtype, a->eps);
}

/* generic: the column sums of the cached part in registers; smem: in
 * shared memory (fewer registers, more CTAs an SM; docs/kernels/rowwise.md). */
static const scree__impl impls[] = {
    {SCREE__ROWWISE_IMPL(scree__rowwise_config_check, "norm_backward.cu", "scree_norm_backward",
                         "scree_norm_backward_dw"),
     .defines = "SCREE_NB_KIND=1", .threads = scree__nb_threads},
    {SCREE__NB_SMEM_IMPL(1, 1)}};

SCREE__DEFINE_OP(add_rmsnorm_backward, .shape_inputs = shape_inputs);
