/* swiglu.c - SwiGLU's host side: its arguments, config space (the row-wise
 * launch shape), the launch, buckets, problems, the CPU reference and the
 * benchmark entries. The kernel is kernels/swiglu.cu. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/rowwise.h"

#define SCREE__ARGS_T scree_swiglu_args

/* The arguments (include/scree.h), field by field. gate and up are [rows,
 * cols] each, or, when up is NULL, gate holds both side by side in [rows,
 * 2 * cols]: the op checks their strides, extents and how y may share
 * their memory itself (validate, validate_buffers). The kernel indexes a
 * row with int. */
static const scree__arg schema[] = {
    SCREE__IN(gate, .dtype = SCREE__AT(dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(gate_stride)}, .flags = SCREE__OWN_RANGE),
    SCREE__IN(up, .dtype = SCREE__AT(dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(up_stride)}, .flags = SCREE__OPTIONAL | SCREE__OWN_RANGE),
    SCREE__OUT(y, .dtype = SCREE__AT(y_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
               .strides = {SCREE__AT(y_stride)}, .flags = SCREE__OWN_RANGE),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(cols, SCREE__RANGE(1, (int64_t)1 << 30), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(gate_stride, .flags = SCREE__SHAPE),
    SCREE__STRIDE(up_stride, .flags = SCREE__SHAPE),
    SCREE__STRIDE(y_stride),
    SCREE__DTYPE(dtype), SCREE__DTYPE(y_dtype),
};

enum { V_DTYPE, V_Y };

static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dtype)},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(y_dtype)},
};

/* Bucket: rows rounded up to a power of two, cols exact. The layout (one
 * tensor or two, strides) is not part of it: the same config serves both.
 * rows is a batch dimension: batch-invariant mode tunes on 1024 rows. */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 1024},
                                   {"cols", 0, SCREE__AT(cols), 0}};

/* Registers per thread, estimated as SCREE_EST_REGS of kernels/swiglu.cu:
 * about 40 for addresses, indices and silu, plus the CACHE vectors of gate
 * and of up in flight (two 16-bit elements per register). */
static int est_regs(const scree__config *c, int dtype) {
  return 40 + c->v[SCREE__RW_CACHE] * c->v[SCREE__RW_VEC] * (dtype == SCREE_DTYPE_FP32 ? 2 : 1);
}

/* The row-wise launch shape's constraints, and a CTA that fits the 64K
 * register file at the estimated registers per thread (past it ptxas
 * spills to meet __launch_bounds__: measured on sm_90). */
static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  (void)t; /* no shared memory */
  if (!scree__rowwise_check_dtypes(var, 2, why, n) || !scree__rowwise_check(c, why, n)) return 0;
  const int threads = c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS];
  const int regs = est_regs(c, var->v[V_DTYPE]);
  if (threads * regs > 65536) {
    scree__set_why(why, n, "tpr*rows=%d threads of about %d registers exceed the 64K register file",
                   threads, regs);
    return 0;
  }
  return 1;
}

/* The call's layout with every "0 means" resolved: up = gate + cols with
 * gate's stride when the call gives no up (one [rows, 2 * cols] tensor). */
typedef struct layout {
  uint64_t up;
  int64_t gs, us, ys;
} layout;

static layout layout_of(const scree_swiglu_args *a) {
  layout l;
  const int two = a->up != 0;
  l.gs = a->gate_stride ? a->gate_stride : (two ? a->cols : 2 * a->cols);
  l.us = two ? (a->up_stride ? a->up_stride : a->cols) : l.gs;
  l.ys = a->y_stride ? a->y_stride : a->cols;
  l.up = two ? a->up
             : a->gate ? a->gate + (uint64_t)a->cols * scree_dtype_size(a->dtype) : 0;
  return l;
}

/* log2 of the widest vector (in elements, at most 8) that every pointer and
 * row stride of the call allows: trailing zero bits, no division. */
static int vec_log2(const scree__variant *var, const scree_swiglu_args *a) {
  const layout l = layout_of(a);
  const size_t ex = scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  int v = 3;
  v = scree__vlog2_ptr(v, a->gate, ex);
  v = scree__vlog2_ptr(v, l.up, ex);
  v = scree__vlog2_ptr(v, a->y, scree_dtype_size((scree_dtype)var->v[V_Y]));
  if (!a->up) v = scree__vlog2_stride(v, a->cols); /* up = gate + cols */
  v = scree__vlog2_stride(v, l.gs);
  v = scree__vlog2_stride(v, l.us);
  return scree__vlog2_stride(v, l.ys);
}

/* Hand-picked default: the row-wise rule (16-byte accesses, about four
 * vectors of each input in flight per thread, at least 128 threads per
 * CTA), with CACHE halved until the CTA fits the register file. */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  const scree_swiglu_args *a = args;
  scree__rowwise_default(a ? a->cols : 4096,
                         (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]), out);
  /* Two inputs in flight: fewer vectors each where a wide CTA would not
   * fit the register file. */
  while (out->v[SCREE__RW_CACHE] > 1 && !check(out, var, t, NULL, 0)) out->v[SCREE__RW_CACHE] /= 2;
}

/* Narrow VEC (doubling CACHE, so as many bytes stay in flight) until every
 * pointer and stride of the call allows the vector access. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, vec_log2(var, args));
}

static int adapt_class(const scree__variant *var, const void *args) {
  return vec_log2(var, args);
}

/* Worth timing: the widest vector the call allows (16 bytes of the input
 * dtype at most; a narrower one only adds instructions to a stream), lanes
 * that mostly have a vector to move (TPR * VEC at most twice the row), and
 * CACHE slots that mostly have one to hold (TPR * VEC * CACHE likewise). */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  const scree_swiglu_args *a = args;
  const int ex = (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  int widest = 16 / ex;
  const int allowed = 1 << vec_log2(var, a);
  if (allowed < widest) widest = allowed;
  const int64_t per_access = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC];
  const int64_t span = 2 * scree__pow2_ceil(a->cols);
  return c->v[SCREE__RW_VEC] == widest && per_access <= span &&
         per_access * c->v[SCREE__RW_CACHE] <= span;
}

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  (void)var;
  const scree_swiglu_args *a = args;
  const layout l = layout_of(a);
  uint64_t gate = a->gate, up = l.up, y = a->y;
  long long rows = a->rows, gs = l.gs, us = l.us, ys = l.ys;
  int cols = (int)a->cols;
  void *params[] = {&gate, &up, &y, &rows, &cols, &gs, &us, &ys};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "swiglu");
}

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count in the one-tensor form, capped at
 * 1 GiB of gate and up together. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_swiglu, b, var, check, 0, args);
}

/* Marks a pointer field whose buffer the problem has: run_bind replaces it
 * with the device pointer, and the reference reads the layout from the
 * args as the public entry does (up == 0: one tensor). */
#define PRESENT ((scree_devptr)0x1000)

/* The shape may name the form: up_stride (or an up pointer, as in a bound
 * call) means two tensors, else one [rows, 2 * cols] tensor. Strides of
 * gate and up are honoured; y is contiguous (its padding could not be
 * compared). */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  scree_swiglu_args *a = (scree_swiglu_args *)p->args;
  memcpy(a, args, sizeof *a);
  const int two = a->up != 0 || a->up_stride != 0;
  if (scree__problem_shape(a, schema, SCREE__COUNT(schema), why, why_size)) return -1;
  if (check && a->rows > 97) a->rows = 97;
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  a->gate = PRESENT;
  a->up = two ? PRESENT : 0;
  a->y = PRESENT;
  a->y_stride = 0;
  const layout l = layout_of(a);
  const int64_t need = two ? a->cols : 2 * a->cols;
  if (l.gs < need || l.us < a->cols) {
    scree__set_why(why, why_size,
                   "gate_stride=%lld, up_stride=%lld: need gate_stride 0 or >= %lld%s",
                   (long long)a->gate_stride, (long long)a->up_stride, (long long)need,
                   two ? ", up_stride 0 or >= cols" : "");
    return -1;
  }
  if (two) {
    scree__problem_buf(p, "gate", SCREE__BUF_IN, a->dtype, (size_t)(a->rows * l.gs),
                       offsetof(scree_swiglu_args, gate));
    scree__problem_buf(p, "up", SCREE__BUF_IN, a->dtype, (size_t)(a->rows * l.us),
                       offsetof(scree_swiglu_args, up));
  } else {
    scree__problem_buf(p, "gate_up", SCREE__BUF_IN, a->dtype, (size_t)(a->rows * l.gs),
                       offsetof(scree_swiglu_args, gate));
  }
  /* fp32 math (accurate expf, one division) against the double reference:
   * one rounding of y apart, as for the other row-wise ops. */
  scree__problem_buf(p, "y", SCREE__BUF_OUT, a->y_dtype, (size_t)(a->rows * a->cols),
                     offsetof(scree_swiglu_args, y));
  /* gate and up read once, y written once. */
  p->bytes = (double)a->rows * (double)a->cols *
             (double)(2 * scree_dtype_size(a->dtype) + scree_dtype_size(a->y_dtype));
  snprintf(p->desc, sizeof p->desc, "%lld rows of %lld, gate and up in %s", (long long)a->rows,
           (long long)a->cols, two ? "two tensors" : "one tensor");
  return 0;
}

/* Random gates are of order 1, where exp cannot overflow. Make every
 * 16th gate large (x 64, so |g| reaches a few hundred: exp(-g) would
 * overflow fp32 there) and scale rows differently (1/8 ... 8), so an
 * unsafe silu or rows mixed up show. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_swiglu_args *a = args;
  const layout l = layout_of(a);
  for (int64_t r = 0; r < a->rows; r++) {
    const double row_scale = ldexp(1.0, (int)(r % 7) - 3);
    for (int64_t c = 0; c < a->cols; c++) {
      const double f = c % 16 == 5 ? 64 : row_scale;
      const size_t i = (size_t)(r * l.gs + c);
      scree__store_elem(h[0], a->dtype, i, f * scree__load_elem(h[0], a->dtype, i));
    }
  }
}

/* ---- the CPU reference (double arithmetic) ------------------------------- */

/* host: gate (or gate_up, one [rows, 2 * cols] tensor, when args->up is 0),
 * up (two tensors only), y: the problem's buffer order (problem, above). */
SCREE__REFERENCE(swiglu) {
  const scree_swiglu_args *a = args;
  const int two = a->up != 0;
  const void *gate = host[0], *up = two ? host[1] : host[0];
  void *y = host[two ? 2 : 1];
  const int64_t gs = a->gate_stride ? a->gate_stride : (two ? a->cols : 2 * a->cols);
  const int64_t us = two ? (a->up_stride ? a->up_stride : a->cols) : gs;
  const int64_t uoff = two ? 0 : a->cols; /* up = gate + cols in one tensor */
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++)
    for (int64_t c = 0; c < a->cols; c++) {
      const double g = scree__load_elem(gate, a->dtype, (size_t)(r * gs + c));
      const double u = scree__load_elem(up, a->dtype, (size_t)(r * us + uoff + c));
      /* exp(-g) overflows to inf only for g < -709, where g / inf = -0 is
       * the right limit. */
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), g / (1.0 + exp(-g)) * u);
    }
}

/* The benchmark entries: the shapes of bench/rowwise_shapes.json (cols =
 * the FFN width F), gate and up in one [rows, 2F] tensor; and in two
 * tensors (up_stride given) for 16384x4096. */
static const char *const bench[] = {
    "dtype=fp16,y=fp16 rows=16384,cols=4096", "dtype=bf16,y=bf16 rows=16384,cols=4096",
    "dtype=fp16,y=fp16 rows=4096,cols=8192",  "dtype=fp16,y=fp16 rows=65536,cols=1024",
    "dtype=fp16,y=fp16 rows=8,cols=4096",     "dtype=fp16,y=fp16 rows=16384,cols=128",
    "dtype=fp16,y=fp16 rows=16384,cols=4096,up_stride=4096", NULL,
};

/* ---- the op's own argument rules: the layout of gate and up, and how y may
 * share their memory ------------------------------------------------------ */

/* Whether y may be written with tensor x (gate or up) as given: exactly
 * the same elements (in place), or none in common. */
static scree_status check_alias(scree_context *ctx, const scree_swiglu_args *a, const char *name,
                                uint64_t x, int64_t xs, uint64_t ylo, uint64_t yhi, uint64_t xlo,
                                uint64_t xhi) {
  const size_t ex = scree_dtype_size(a->dtype), ey = scree_dtype_size(a->y_dtype);
  const layout l = layout_of(a);
  if (a->y == x) {
    if (ex != ey || xs != l.ys)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "y == %s (in place) needs equal element sizes and strides (%s stride "
                         "%lld, y_stride %lld)",
                         name, name, (long long)xs, (long long)l.ys);
    return SCREE_OK;
  }
  if (!scree__overlaps(ylo, yhi, xlo, xhi)) return SCREE_OK;
  const uint64_t p = (uint64_t)xs * ex;
  if (p == (uint64_t)l.ys * ey &&
      !scree__rows_meet(a->y, (uint64_t)a->cols * ey, x, (uint64_t)a->cols * ex, p, a->rows))
    return SCREE_OK; /* interleaved rows, no element in common */
  return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "y=0x%llx partially overlaps %s=0x%llx",
                     (unsigned long long)a->y, name, (unsigned long long)x);
}

/* The strides, with the one-tensor form's: gate's covers both halves, and
 * up's is gate's. */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_swiglu_args *a = args;
  const int two = a->up != 0;
  const layout l = layout_of(a);
  if (two && l.gs < a->cols)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "gate_stride=%lld is less than cols=%lld",
                       (long long)a->gate_stride, (long long)a->cols);
  if (!two && l.gs < 2 * a->cols)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "gate_stride=%lld is less than 2 * cols=%lld (up is 0: gate and up in "
                       "one tensor)",
                       (long long)a->gate_stride, (long long)(2 * a->cols));
  if (two && l.us < a->cols)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "up_stride=%lld is less than cols=%lld",
                       (long long)a->up_stride, (long long)a->cols);
  if (!two && a->up_stride && a->up_stride != l.gs)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "up_stride=%lld differs from gate's stride %lld (up is 0: gate and up in "
                       "one tensor, up_stride 0 or equal)",
                       (long long)a->up_stride, (long long)l.gs);
  if (l.ys < a->cols)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "y_stride=%lld is less than cols=%lld",
                       (long long)a->y_stride, (long long)a->cols);
  return SCREE_OK;
}

/* The byte ranges, and y against gate and up. */
static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  (void)stream, (void)var;
  const scree_swiglu_args *a = args;
  const int two = a->up != 0;
  const layout l = layout_of(a);
  const size_t ex = scree_dtype_size(a->dtype), ey = scree_dtype_size(a->y_dtype);
  uint64_t glo, ghi, ulo, uhi, ylo, yhi;
  if (!scree__byte_range(a->gate, a->rows, two ? a->cols : 2 * a->cols, l.gs, ex, &glo, &ghi))
    return scree__fail_wrap(ctx, "gate", a->gate);
  if (!scree__byte_range(l.up, a->rows, a->cols, l.us, ex, &ulo, &uhi))
    return scree__fail_wrap(ctx, "up", a->up);
  if (!scree__byte_range(a->y, a->rows, a->cols, l.ys, ey, &ylo, &yhi))
    return scree__fail_wrap(ctx, "y", a->y);
  if (!two) ghi -= (uint64_t)a->cols * ex; /* gate's own columns end cols before */
  scree_status st;
  if ((st = check_alias(ctx, a, "gate", a->gate, l.gs, ylo, yhi, glo, ghi)) ||
      (st = check_alias(ctx, a, "up", l.up, l.us, ylo, yhi, ulo, uhi)))
    return st;
  return SCREE_OK;
}

static const scree__impl impls[] = {
    {SCREE__ROWWISE_IMPL(check, "swiglu.cu", "scree_swiglu")}};

SCREE__DEFINE_OP(swiglu, .validate = validate, .validate_buffers = validate_buffers,
                 .adapt_class = adapt_class, .shape_inputs = shape_inputs);
