/* swiglu_backward.c - SwiGLU backward's host side: its arguments, config
 * space (the row-wise launch shape), the launch, buckets, problems, the CPU
 * reference and the benchmark entries. The kernel is
 * kernels/swiglu_backward.cu; the reference's arithmetic is
 * scree__swiglu_backward_ref (ops/rowwise_backward_ref.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/rowwise.h"
#include "ops/rowwise_backward_ref.h"

#define SCREE__ARGS_T scree_swiglu_backward_args

/* The arguments (include/scree.h), field by field. gate and up are [rows,
 * cols] each, or one [rows, 2 * cols] tensor when up is 0; so are dgate and
 * dup when dup is 0. The op checks their strides, extents and overlaps
 * itself (validate, validate_buffers); dy's are the schema's. */
static const scree__arg schema[] = {
    SCREE__IN(gate, .dtype = SCREE__AT(dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(gate_stride)}, .flags = SCREE__OWN_RANGE),
    SCREE__IN(up, .dtype = SCREE__AT(dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(up_stride)}, .flags = SCREE__OPTIONAL | SCREE__OWN_RANGE),
    SCREE__IN(dy, .dtype = SCREE__AT(dy_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(dy_stride)}),
    SCREE__OUT(dgate, .dtype = SCREE__AT(dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
               .strides = {SCREE__AT(dgate_stride)}, .flags = SCREE__OWN_RANGE),
    SCREE__OUT(dup, .dtype = SCREE__AT(dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
               .strides = {SCREE__AT(dup_stride)}, .flags = SCREE__OPTIONAL | SCREE__OWN_RANGE),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(cols, SCREE__RANGE(1, (int64_t)1 << 30), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(gate_stride, .flags = SCREE__SHAPE),
    SCREE__STRIDE(up_stride, .flags = SCREE__SHAPE),
    SCREE__STRIDE(dy_stride),
    SCREE__STRIDE(dgate_stride),
    SCREE__STRIDE(dup_stride),
    SCREE__DTYPE(dtype), SCREE__DTYPE(dy_dtype),
};

enum { V_DTYPE, V_DY };

static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dtype)},
    {"dy", "SCREE_DY_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dy_dtype)},
};

/* Bucket: rows rounded up to a power of two, cols exact; the layouts are
 * not part of it (the same config serves every form). */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 0},
                                   {"cols", 0, SCREE__AT(cols), 0}};

/* Registers per thread, estimated as SCREE_EST_REGS of
 * kernels/swiglu_backward.cu: about 48 for addresses, indices and the math,
 * plus the CACHE vectors of gate, up and dy in flight. */
static int est_regs(const scree__config *c, int dtype, int dy) {
  const int n = c->v[SCREE__RW_CACHE] * c->v[SCREE__RW_VEC];
  return 48 + n * (dtype == SCREE_DTYPE_FP32 ? 2 : 1) + (n * (dy == SCREE_DTYPE_FP32 ? 2 : 1) + 1) / 2;
}

/* The row-wise launch shape's constraints, and a CTA that fits the 64K
 * register file at the estimated registers per thread. */
static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  (void)t; /* no shared memory */
  if (!scree__rowwise_check_dtypes(var, 2, why, n) || !scree__rowwise_check(c, why, n)) return 0;
  const int threads = c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS];
  const int regs = est_regs(c, var->v[V_DTYPE], var->v[V_DY]);
  if (threads * regs > 65536) {
    scree__set_why(why, n, "tpr*rows=%d threads of about %d registers exceed the 64K register file",
                   threads, regs);
    return 0;
  }
  return 1;
}

/* The call's layout with every "0 means" resolved: up = gate + cols with
 * gate's stride when the call gives no up, dup = dgate + cols with dgate's
 * stride when it gives no dup. */
typedef struct layout {
  uint64_t up, dup;
  int64_t gs, us, ys, dgs, dus;
} layout;

static layout layout_of(const scree_swiglu_backward_args *a) {
  layout l;
  const int two = a->up != 0, dtwo = a->dup != 0;
  const uint64_t half = (uint64_t)a->cols * scree_dtype_size(a->dtype);
  l.gs = a->gate_stride ? a->gate_stride : (two ? a->cols : 2 * a->cols);
  l.us = two ? (a->up_stride ? a->up_stride : a->cols) : l.gs;
  l.ys = a->dy_stride ? a->dy_stride : a->cols;
  l.dgs = a->dgate_stride ? a->dgate_stride : (dtwo ? a->cols : 2 * a->cols);
  l.dus = dtwo ? (a->dup_stride ? a->dup_stride : a->cols) : l.dgs;
  l.up = two ? a->up : a->gate ? a->gate + half : 0;
  l.dup = dtwo ? a->dup : a->dgate ? a->dgate + half : 0;
  return l;
}

/* log2 of the widest vector (in elements, at most 8) that every pointer and
 * row stride of the call allows. */
static int vec_log2(const scree__variant *var, const scree_swiglu_backward_args *a) {
  const layout l = layout_of(a);
  const size_t ex = scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  int v = 3;
  v = scree__vlog2_ptr(v, a->gate, ex);
  v = scree__vlog2_ptr(v, l.up, ex);
  v = scree__vlog2_ptr(v, a->dy, scree_dtype_size((scree_dtype)var->v[V_DY]));
  v = scree__vlog2_ptr(v, a->dgate, ex);
  v = scree__vlog2_ptr(v, l.dup, ex);
  if (!a->up || !a->dup) v = scree__vlog2_stride(v, a->cols); /* the second half */
  v = scree__vlog2_stride(v, l.gs);
  v = scree__vlog2_stride(v, l.us);
  v = scree__vlog2_stride(v, l.ys);
  v = scree__vlog2_stride(v, l.dgs);
  return scree__vlog2_stride(v, l.dus);
}

/* Hand-picked default: the row-wise rule (16-byte accesses, about four
 * vectors of each input in flight per thread, at least 128 threads per
 * CTA), with CACHE halved until the CTA fits the register file. */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  const scree_swiglu_backward_args *a = args;
  scree__rowwise_default(a ? a->cols : 4096,
                         (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]), out);
  while (out->v[SCREE__RW_CACHE] > 1 && !check(out, var, t, NULL, 0)) out->v[SCREE__RW_CACHE] /= 2;
}

static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, vec_log2(var, args));
}

static int adapt_class(const scree__variant *var, const void *args) {
  return vec_log2(var, args);
}

/* Worth timing, as the forward's: the widest vector the call allows, lanes
 * and CACHE slots that mostly have a vector to move. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  const scree_swiglu_backward_args *a = args;
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
  const scree_swiglu_backward_args *a = args;
  const layout l = layout_of(a);
  uint64_t gate = a->gate, up = l.up, dy = a->dy, dgate = a->dgate, dup = l.dup;
  long long rows = a->rows, gs = l.gs, us = l.us, ys = l.ys, dgs = l.dgs, dus = l.dus;
  int cols = (int)a->cols;
  void *params[] = {&gate, &up, &dy, &dgate, &dup, &rows, &cols, &gs, &us, &ys, &dgs, &dus};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "swiglu_backward");
}

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count in the fused forms, capped at
 * 1 GiB of the inputs read per row. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_swiglu_backward, b, var, check, 0, args);
}

/* Marks a pointer field whose buffer the problem has (run_bind replaces it
 * with the device pointer); the reference reads the forms from the args as
 * the public entry does. */
#define PRESENT ((scree_devptr)0x1000)

/* The shape may name the form: up_stride (or an up pointer) means two input
 * tensors and two output tensors, else the fused [rows, 2 * cols] ones.
 * Strides of gate and up are honoured; dy and the outputs are contiguous. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  scree_swiglu_backward_args *a = (scree_swiglu_backward_args *)p->args;
  memcpy(a, args, sizeof *a);
  const int two = a->up != 0 || a->up_stride != 0;
  if (scree__problem_shape(a, schema, SCREE__COUNT(schema), why, why_size)) return -1;
  if (check && a->rows > 97) a->rows = 97;
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  a->gate = PRESENT;
  a->up = two ? PRESENT : 0;
  a->dy = PRESENT;
  a->dgate = PRESENT;
  a->dup = two ? PRESENT : 0;
  a->dy_stride = a->dgate_stride = a->dup_stride = 0;
  const layout l = layout_of(a);
  const int64_t need = two ? a->cols : 2 * a->cols;
  if (l.gs < need || l.us < a->cols) {
    scree__set_why(why, why_size,
                   "gate_stride=%lld, up_stride=%lld: need gate_stride 0 or >= %lld%s",
                   (long long)a->gate_stride, (long long)a->up_stride, (long long)need,
                   two ? ", up_stride 0 or >= cols" : "");
    return -1;
  }
  const size_t n = (size_t)(a->rows * a->cols);
  if (two) {
    scree__problem_buf(p, "gate", SCREE__BUF_IN, a->dtype, (size_t)(a->rows * l.gs),
                       offsetof(scree_swiglu_backward_args, gate));
    scree__problem_buf(p, "up", SCREE__BUF_IN, a->dtype, (size_t)(a->rows * l.us),
                       offsetof(scree_swiglu_backward_args, up));
  } else {
    scree__problem_buf(p, "gate_up", SCREE__BUF_IN, a->dtype, (size_t)(a->rows * l.gs),
                       offsetof(scree_swiglu_backward_args, gate));
  }
  scree__problem_buf(p, "dy", SCREE__BUF_IN, a->dy_dtype, n,
                     offsetof(scree_swiglu_backward_args, dy));
  /* fp32 math (accurate expf, one division) against the double reference:
   * one rounding of each output apart. */
  if (two) {
    scree__problem_buf(p, "dgate", SCREE__BUF_OUT, a->dtype, n,
                       offsetof(scree_swiglu_backward_args, dgate));
    scree__problem_buf(p, "dup", SCREE__BUF_OUT, a->dtype, n,
                       offsetof(scree_swiglu_backward_args, dup));
  } else {
    scree__problem_buf(p, "dgate_up", SCREE__BUF_OUT, a->dtype, 2 * n,
                       offsetof(scree_swiglu_backward_args, dgate));
  }
  /* gate, up and dy read once, dgate and dup written once. */
  p->bytes = (double)a->rows * (double)a->cols *
             (double)(4 * scree_dtype_size(a->dtype) + scree_dtype_size(a->dy_dtype));
  snprintf(p->desc, sizeof p->desc, "%lld rows of %lld, gate and up in %s", (long long)a->rows,
           (long long)a->cols, two ? "two tensors" : "one tensor");
  return 0;
}

/* As the forward's: every 16th gate large (|g| up to a few hundred, where
 * exp(-g) would overflow fp32) and rows scaled differently (1/8 ... 8). */
static void shape_inputs(const void *args, void *const *h) {
  const scree_swiglu_backward_args *a = args;
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

/* host: gate (or gate_up), up (two tensors only), dy, then dgate and dup
 * (or dgate_up): the problem's buffer order. The public call's forms are
 * resolved to a pointer and stride per tensor. */
SCREE__REFERENCE(swiglu_backward) {
  const scree_swiglu_backward_args *a = args;
  const int two = a->up != 0, dtwo = a->dup != 0;
  const layout l = layout_of(a);
  const size_t half = (size_t)a->cols * scree_dtype_size(a->dtype);
  int i = 0;
  const char *gate = host[i++];
  const char *up = two ? host[i++] : gate + half;
  const void *dy = host[i++];
  char *dgate = host[i++];
  char *dup = dtwo ? host[i++] : dgate + half;
  scree__swiglu_backward_ref(gate, l.gs, up, l.us, dy, l.ys, dgate, l.dgs, dup, l.dus, a->rows,
                             a->cols, a->dtype, a->dy_dtype);
}

/* The benchmark entries: the forward's shapes (cols = the FFN width F), the
 * fused forms; and the two-tensor forms for 16384x4096. */
static const char *const bench[] = {
    "dtype=fp16,dy=fp16 rows=16384,cols=4096", "dtype=bf16,dy=bf16 rows=16384,cols=4096",
    "dtype=fp16,dy=fp16 rows=4096,cols=8192",  "dtype=fp16,dy=fp16 rows=65536,cols=1024",
    "dtype=fp16,dy=fp16 rows=8,cols=4096",     "dtype=fp16,dy=fp16 rows=16384,cols=128",
    "dtype=fp16,dy=fp16 rows=16384,cols=4096,up_stride=4096", NULL,
};

/* ---- the op's own argument rules ----------------------------------------- */

/* The strides, with the fused forms': the fused tensor's covers both halves,
 * and the second half's is the first's. */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_swiglu_backward_args *a = args;
  const layout l = layout_of(a);
  static const char *const fused[2] = {"up is 0: gate and up in one tensor",
                                       "dup is 0: dgate and dup in one tensor"};
  const char *first[2] = {"gate", "dgate"}, *second[2] = {"up", "dup"};
  const int twos[2] = {a->up != 0, a->dup != 0};
  const int64_t fs[2] = {l.gs, l.dgs}, ss[2] = {l.us, l.dus};
  const int64_t gs[2] = {a->up_stride, a->dup_stride};
  for (int k = 0; k < 2; k++) {
    if (twos[k] && fs[k] < a->cols)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s_stride=%lld is less than cols=%lld",
                         first[k], (long long)fs[k], (long long)a->cols);
    if (!twos[k] && fs[k] < 2 * a->cols)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "%s_stride=%lld is less than 2 * cols=%lld (%s)", first[k],
                         (long long)fs[k], (long long)(2 * a->cols), fused[k]);
    if (twos[k] && ss[k] < a->cols)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s_stride=%lld is less than cols=%lld",
                         second[k], (long long)ss[k], (long long)a->cols);
    if (!twos[k] && gs[k] && gs[k] != fs[k])
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "%s_stride=%lld differs from %s's stride %lld (%s, %s_stride 0 or equal)",
                         second[k], (long long)gs[k], first[k], (long long)fs[k], fused[k],
                         second[k]);
  }
  return SCREE_OK;
}

/* A tensor of the call as the overlap rules see it: its first element,
 * pitch and byte range. */
typedef struct view {
  const char *name;
  uint64_t p, lo, hi;
  int64_t stride;
  size_t esize;
} view;

/* Output o against tensor x: exactly x when may_alias (in place: same
 * address and stride, the element sizes are the same dtype's), else no
 * element in common (interleaved rows of one pitch may share the range). */
static scree_status check_pair(scree_context *ctx, const scree_swiglu_backward_args *a,
                               const view *o, const view *x, int may_alias) {
  if (may_alias && o->p == x->p) {
    if (o->stride != x->stride)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "%s == %s (in place) needs equal strides (%s stride %lld, %s stride %lld)",
                         o->name, x->name, o->name, (long long)o->stride, x->name,
                         (long long)x->stride);
    return SCREE_OK;
  }
  if (!scree__overlaps(o->lo, o->hi, x->lo, x->hi)) return SCREE_OK;
  const uint64_t p = (uint64_t)o->stride * o->esize;
  if (p == (uint64_t)x->stride * x->esize &&
      !scree__rows_meet(o->p, (uint64_t)a->cols * o->esize, x->p, (uint64_t)a->cols * x->esize,
                        p, a->rows))
    return SCREE_OK;
  return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=0x%llx overlaps %s=0x%llx%s", o->name,
                     (unsigned long long)o->p, x->name, (unsigned long long)x->p,
                     may_alias ? " (only exactly, in place)" : "");
}

/* The byte ranges, and the outputs against every other tensor. */
static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  (void)stream, (void)var;
  const scree_swiglu_backward_args *a = args;
  const layout l = layout_of(a);
  const size_t ex = scree_dtype_size(a->dtype), ey = scree_dtype_size(a->dy_dtype);
  view v[5] = {{"gate", a->gate, 0, 0, l.gs, ex},    {"up", l.up, 0, 0, l.us, ex},
               {"dy", a->dy, 0, 0, l.ys, ey},        {"dgate", a->dgate, 0, 0, l.dgs, ex},
               {"dup", l.dup, 0, 0, l.dus, ex}};
  /* The fused tensors are checked whole: their first half's range reaches
   * cols elements further. */
  const int64_t width[5] = {a->up ? a->cols : 2 * a->cols, a->cols, a->cols,
                            a->dup ? a->cols : 2 * a->cols, a->cols};
  const uint64_t given[5] = {a->gate, a->up ? a->up : a->gate, a->dy, a->dgate,
                             a->dup ? a->dup : a->dgate};
  for (int i = 0; i < 5; i++) {
    if (!scree__byte_range(v[i].p, a->rows, width[i], v[i].stride, v[i].esize, &v[i].lo,
                           &v[i].hi))
      return scree__fail_wrap(ctx, v[i].name, given[i]);
    /* The tensor's own elements end where its cols do. */
    v[i].hi -= (uint64_t)(width[i] - a->cols) * v[i].esize;
  }
  scree_status st;
  for (int o = 3; o < 5; o++)
    for (int x = 0; x < 5; x++) {
      if (x == o || (o == 4 && x == 3)) continue; /* dgate against dup once */
      if ((st = check_pair(ctx, a, &v[o], &v[x], x == o - 3))) return st;
    }
  return SCREE_OK;
}

static const scree__impl impls[] = {
    {SCREE__ROWWISE_IMPL(check, "swiglu_backward.cu", "scree_swiglu_backward")}};

SCREE__DEFINE_OP(swiglu_backward, .validate = validate, .validate_buffers = validate_buffers,
                 .adapt_class = adapt_class, .shape_inputs = shape_inputs);
