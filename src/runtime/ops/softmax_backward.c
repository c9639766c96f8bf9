/* softmax_backward.c - the last-dimension softmax backward's host side: its
 * arguments, config space (the row-wise launch shape), default, launch,
 * problems, CPU reference and benchmark entries. The kernel is
 * kernels/softmax_backward.cu; the reference's arithmetic is
 * scree__softmax_backward_ref (ops/rowwise_backward_ref.c). */
#include <math.h>

#include "ops/rowwise.h"
#include "ops/rowwise_backward_ref.h"

#define SCREE__ARGS_T scree_softmax_backward_args

/* The arguments (include/scree.h), field by field. dx may be dy exactly (in
 * place); it is of dy's dtype. */
static const scree__arg schema[] = {
    SCREE__IN(y, .dtype = SCREE__AT(y_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(y_stride)}, .flags = SCREE__VECTOR),
    SCREE__IN(dy, .dtype = SCREE__AT(dy_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(dy_stride)}, .flags = SCREE__VECTOR),
    SCREE__OUT(dx, .dtype = SCREE__AT(dy_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
               .strides = {SCREE__AT(dx_stride)}, .alias = {SCREE__AT(dy)},
               .flags = SCREE__VECTOR),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(cols, SCREE__RANGE(1, 262144), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(y_stride), SCREE__STRIDE(dy_stride), SCREE__STRIDE(dx_stride),
    SCREE__DTYPE(y_dtype), SCREE__DTYPE(dy_dtype),
    SCREE__FLOAT(scale, .flags = SCREE__FINITE), /* 0 means 1 */
};

enum { V_Y, V_DY };

static const scree__vfield vfields[] = {
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(y_dtype)},
    {"dy", "SCREE_DY_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dy_dtype)},
};

/* Bucket: rows rounded up to a power of two, cols exact (the row length
 * decides the launch shape and how much of the row stays in registers). */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 0},
                                   {"cols", 0, SCREE__AT(cols), 0}};

/* The kernel multiplies by scale in fp32: scale is finite (schema). */

/* The row-wise default (16-byte accesses, about four vectors in flight per
 * thread, the whole row in registers when it fits, at least 128 threads per
 * CTA), with the register cache of y and of dy together held to the
 * forward's 128 bytes a thread (64 each: whole fp16 rows of 32768 in a
 * 1024-thread group). A longer row takes the streaming entry, which holds a
 * batch of each beside the cache: there the group is 512 threads with 64
 * bytes of each cached, and the rest of the row is read twice. */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  (void)t;
  const scree_softmax_backward_args *a = args;
  const int ey = (int)scree_dtype_size((scree_dtype)var->v[V_Y]);
  const int eg = (int)scree_dtype_size((scree_dtype)var->v[V_DY]);
  const int es = ey > eg ? ey : eg;
  const int64_t cols = a ? a->cols : 4096;
  scree__rowwise_default(cols, es, out);
  int *tpr = &out->v[SCREE__RW_TPR], *cache = &out->v[SCREE__RW_CACHE];
  const int vec = out->v[SCREE__RW_VEC];
  while (*cache > 1 && vec * *cache * es > 64) *cache /= 2;
  if (cols / vec > (int64_t)*tpr * *cache && *tpr * out->v[SCREE__RW_ROWS] == 1024) {
    *tpr = 512;
    *cache = 64 / (vec * es);
    if (*cache < 1) *cache = 1;
  }
}

/* A vector access of VEC elements needs every row start aligned to it:
 * narrow VEC (keeping the elements per thread) until the call allows it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, scree__vec_log2(&scree__op_softmax_backward, var, args));
}

/* As the forward's: skips configs whose threads would mostly idle on this
 * row length or that would re-read most of the row; rows past every
 * register cache of the space stream whatever the config. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const int64_t cols = ((const scree_softmax_backward_args *)args)->cols;
  if (scree__rowwise_worth(c, cols)) return 1;
  return cols > 2 * 65536 && c->v[SCREE__RW_TPR] >= 256;
}

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  (void)var;
  const scree_softmax_backward_args *a = args;
  uint64_t y = a->y, dy = a->dy, dx = a->dx;
  long long rows = a->rows;
  int cols = (int)a->cols;
  long long ys = a->y_stride ? a->y_stride : a->cols;
  long long gs = a->dy_stride ? a->dy_stride : a->cols;
  long long xs = a->dx_stride ? a->dx_stride : a->cols;
  float s = a->scale != 0.f ? a->scale : 1.f;
  void *params[] = {&y, &dy, &dx, &rows, &cols, &ys, &gs, &xs, &s};
  const int streams = a->cols / c->v[SCREE__RW_VEC] >
                      (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_CACHE];
  return scree__rowwise_launch(ctx, k->fn[streams], c, rows, params, stream,
                               streams ? "softmax_backward_stream" : "softmax_backward");
}

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count, capped at 1 GiB of y and dy;
 * checked on at most 97 rows and 4M elements, so the reference is quick. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_softmax_backward, b, var, check, (int64_t)1 << 22,
                                args);
}

/* The shape's rows: y and dy in, dx out. dx's relative tolerance is one
 * rounding to its dtype (scree__tolerance); its absolute one is
 * scree__softmax_bwd_atol(scale) (2e-5 max(1, |scale|)) in every dtype: y
 * is made a softmax output (shape_inputs), so |d| <= max |dy|, and d, an
 * fp32 sum over the row in the kernel's order, errs by a few 1e-7 of the
 * largest |y dy| terms, which dy - d keeps while cancelling the rest,
 * whatever dx's dtype. On an H200 fp32 elements came up to 3.5e-6 off
 * (scale -1.25), past fp32's 1e-6 + 1e-5 |ref|, and an fp16 one (300000 x
 * 128 rows) 1.13e-5 off, past fp16's 1e-5 + 2e-3 |ref|. A check problem
 * takes a scale other than 1, so a kernel that ignored it fails. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  if (scree__rowwise_problem(&scree__op_softmax_backward, args, var, check, (int64_t)1 << 22, p,
                             why, why_size))
    return -1;
  scree_softmax_backward_args *a = (scree_softmax_backward_args *)p->args;
  if (check && a->scale == 0) a->scale = 0.75f;
  for (int i = 0; i < p->nbufs; i++)
    if (p->bufs[i].kind == SCREE__BUF_OUT)
      p->bufs[i].atol = scree__softmax_bwd_atol(a->scale);
  return 0;
}

/* y becomes a softmax output of the random values (positive rows summing to
 * 1, peaked differently per row: the values are scaled by 2^(r % 7 - 3) as
 * the forward's inputs are), so the dot product is a weighted mean of dy as
 * in training; dy's last quarter and last 8 elements of each row are made
 * larger, so a kernel that dropped the streamed part or the scalar tail
 * fails. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_softmax_backward_args *a = args;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  const int64_t gs = a->dy_stride ? a->dy_stride : a->cols;
  scree__rowwise_shape_rows(h[0], a->y_dtype, a->rows, a->cols, ys, 2);
  for (int64_t r = 0; r < a->rows; r++) {
    double m = -INFINITY, sum = 0;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(h[0], a->y_dtype, (size_t)(r * ys + c));
      if (v > m) m = v;
    }
    for (int64_t c = 0; c < a->cols; c++)
      sum += exp(scree__load_elem(h[0], a->y_dtype, (size_t)(r * ys + c)) - m);
    for (int64_t c = 0; c < a->cols; c++) {
      const size_t i = (size_t)(r * ys + c);
      scree__store_elem(h[0], a->y_dtype, i, exp(scree__load_elem(h[0], a->y_dtype, i) - m) / sum);
    }
  }
  scree__rowwise_shape_rows(h[1], a->dy_dtype, a->rows, a->cols, gs, 2);
}

/* The benchmark entries: the forward's shapes. */
static const char *const bench[] = {
    "y=fp16,dy=fp16 rows=16384,cols=4096", "y=bf16,dy=bf16 rows=16384,cols=4096",
    "y=fp16,dy=fp16 rows=4096,cols=8192",  "y=fp16,dy=fp16 rows=65536,cols=1024",
    "y=fp16,dy=fp16 rows=8,cols=4096",     "y=fp16,dy=fp16 rows=16384,cols=128",
    "y=fp32,dy=fp32 rows=64,cols=131072",  NULL,
};

/* ---- the CPU reference (double accumulation) ----------------------------- */

/* host: y, dy, dx in the problem's buffer order (the schema's). */
SCREE__REFERENCE(softmax_backward) {
  const scree_softmax_backward_args *a = args;
  scree__softmax_backward_ref(host[0], a->y_stride, host[1], a->dy_stride, host[2],
                              a->dx_stride, a->rows, a->cols, a->y_dtype, a->dy_dtype,
                              a->scale);
}

static const scree__impl impls[] = {
    {SCREE__ROWWISE_IMPL(scree__rowwise_config_check, "softmax_backward.cu",
                         "scree_softmax_backward", "scree_softmax_backward_stream")}};

SCREE__DEFINE_OP(softmax_backward, .shape_inputs = shape_inputs);
