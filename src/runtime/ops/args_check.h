/*
 * args_check.h - the per-call argument checks, derived from an op's schema
 * (ops/op.h) and compiled once per op: SCREE__DEFINE_OP instantiates
 * scree__args_check_in with the op file's own tables, whose loops the
 * compiler unrolls and whose entries it folds, so that every call runs
 * straight-line code for its op's fields, as a hand-written check would,
 * from the one table. The messages of failed checks are made out of line
 * (ops/args.c). Not API; included by ops/op.h.
 */
#ifndef SCREE_OPS_ARGS_CHECK_H
#define SCREE_OPS_ARGS_CHECK_H

#include <math.h>
#include <string.h>

/* Loops over an op's tables are unrolled whole (the tables are constants
 * of the op file), so that each entry's role, flags and links fold. */
#define SCREE__UNROLL _Pragma("GCC unroll 64")
#define SCREE__INLINE static inline __attribute__((always_inline))

/* A tensor of the call, as the pointer, range and overlap checks need it. */
typedef struct scree__tview {
  const scree__arg *t;
  uint64_t p, lo, hi;
  size_t esize;
  scree__geom g;
} scree__tview;

/* The failures (ops/args.c): each formats its message and returns the
 * status. */
scree_status scree__fail_variant(scree_context *ctx, const scree__vfield *vf,
                                 const scree__arg *f, int64_t v);
scree_status scree__fail_range(scree_context *ctx, const scree__arg *f, int64_t v);
scree_status scree__fail_float(scree_context *ctx, const scree__arg *f, float v);
scree_status scree__fail_row_stride(scree_context *ctx, const scree__op *op, const scree__arg *t,
                                    const void *args, const scree__geom *g, int k);
scree_status scree__fail_pointer(scree_context *ctx, const scree__arg *t, uint64_t p,
                                 size_t align, int elem);
/* A tensor's bytes from pointer p pass the end of the address space; name
 * is the argument's (shared with the ops' own range checks). */
scree_status scree__fail_wrap(scree_context *ctx, const char *name, uint64_t p);
/* The checks that loop over the call's tensors at run time (ops/args.c):
 * an ANY_ORDER tensor's strides, and the overlaps of the tensors present. */
scree_status scree__check_any_order(scree_context *ctx, const scree__op *op, const scree__arg *t,
                                    const scree__geom *g);
/* Two tensors whose bytes meet, one of them written: SCREE_OK if they are
 * exactly one tensor in place that the schema lets alias, else the
 * failure. */
scree_status scree__check_pair(scree_context *ctx, const scree__tview *a, const scree__tview *b);

SCREE__INLINE int scree__is_tensor(const scree__arg *f) {
  return f->role == SCREE__ROLE_IN || f->role == SCREE__ROLE_OUT || f->role == SCREE__ROLE_INOUT;
}

/* The int64 field a link names. */
SCREE__INLINE int64_t scree__at_i64(const void *args, unsigned link) {
  int64_t v;
  memcpy(&v, (const char *)args + link - 1, sizeof v);
  return v;
}

/* A field's value as int64 (pointers as their bits, floats not at all). */
SCREE__INLINE int64_t scree__value_of(const void *args, const scree__arg *f) {
  const char *p = (const char *)args + f->offset;
  if (f->ctype == SCREE__C_I32) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  int64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Saturating product, for the dense strides of absurd extents (which the
 * byte-range check then refuses). */
SCREE__INLINE int64_t scree__mul_sat(int64_t a, int64_t b) {
  int64_t p;
  if (!__builtin_mul_overflow(a, b, &p)) return p;
  return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
}

/* A tensor's rank: its extents, outermost first, 1 to 3 (the registry
 * check). A constant where t is. */
SCREE__INLINE int scree__rank_of(const scree__arg *t) {
  return t->dims[2] ? 3 : t->dims[1] ? 2 : 1;
}

SCREE__INLINE int scree__geom_of(const void *args, const scree__arg *t, scree__geom *g) {
  int rank = 0;
  int64_t ext[3] = {0, 0, 0}, stride[3] = {1, 1, 1};
  SCREE__UNROLL
  for (int k = 0; k < 3; k++)
    if (t->dims[k] && rank == k) ext[rank++] = scree__at_i64(args, t->dims[k]);
  if (t->flags & SCREE__PLUS_ONE) ext[0] += ext[0] < INT64_MAX;
  int empty = ext[rank - 1] <= 0; /* rank >= 1: the registry check */
  int64_t dense = 1;
  SCREE__UNROLL
  for (int k = 1; k >= 0; k--) {
    if (k > rank - 2) continue;
    dense = scree__mul_sat(dense, ext[k + 1]);
    const int64_t given = t->strides[k] ? scree__at_i64(args, t->strides[k]) : 0;
    stride[k] = given ? given : dense;
    empty |= ext[k] <= 0;
  }
  g->rank = rank;
  memcpy(g->ext, ext, sizeof ext);
  memcpy(g->stride, stride, sizeof stride);
  return !empty;
}

/* A tensor's element type: a scree_dtype, SCREE__DTYPE_I32 or _I64. */
SCREE__INLINE int scree__elem_of(const void *args, const scree__arg *t) {
  if (t->dtype) {
    int32_t d;
    memcpy(&d, (const char *)args + t->dtype - 1, sizeof d);
    return d;
  }
  if (t->elem == SCREE__E_I32 && t->wide) {
    int32_t wide;
    memcpy(&wide, (const char *)args + t->wide - 1, sizeof wide);
    return wide ? SCREE__DTYPE_I64 : SCREE__DTYPE_I32;
  }
  return t->elem == SCREE__E_F32   ? SCREE_DTYPE_FP32
         : t->elem == SCREE__E_I32 ? SCREE__DTYPE_I32
                                   : SCREE__DTYPE_I64;
}

SCREE__INLINE size_t scree__elem_bytes(int elem) {
  switch (elem) {
    case SCREE_DTYPE_FP32: return 4;
    case SCREE_DTYPE_FP16: return 2;
    case SCREE_DTYPE_BF16: return 2;
    case SCREE__DTYPE_I32: return 4;
    case SCREE__DTYPE_I64: return 8;
  }
  return 0;
}

/* The tensors whose pointers the generic checks look at (a slot each in
 * the checks' arrays): all but SCREE__OWN_POINTER ones. */
SCREE__INLINE int scree__generic(const scree__arg *t) {
  return scree__is_tensor(t) && !(t->flags & SCREE__OWN_POINTER);
}

SCREE__INLINE int scree__writes(const scree__arg *t) {
  return t->role == SCREE__ROLE_OUT || t->role == SCREE__ROLE_INOUT;
}

/* Whether a tensor's strides are checked with the sizes (each covering the
 * dimensions inside it); ANY_ORDER tensors' are checked with the pointers,
 * OWN_RANGE ones' by the op. */
SCREE__INLINE int scree__row_checked(const scree__arg *t) {
  return t->strides[0] &&
         !(t->flags & (SCREE__ANY_ORDER | SCREE__OWN_RANGE | SCREE__OWN_POINTER));
}

/* An ANY_ORDER tensor's strides: positive (multiples of stride_multiple, a
 * power of two), and no two elements at one address: taken from the
 * smallest, each dimension must clear the reach of those inside it.
 * scree__check_any_order says which fails. */
SCREE__INLINE int scree__any_order_ok(const scree__arg *t, const scree__geom *g) {
  const int outer = scree__rank_of(t) - 1;
  const int64_t mask = t->stride_multiple ? t->stride_multiple - 1 : 0;
  SCREE__UNROLL
  for (int k = 0; k < 2; k++)
    if (k < outer && (g->stride[k] <= 0 || (g->stride[k] & mask))) return 0;
  int order[2] = {0, 1};
  if (outer == 2 && g->stride[1] > g->stride[0]) order[0] = 1, order[1] = 0;
  __int128 reach = g->ext[outer];
  SCREE__UNROLL
  for (int i = 1; i >= 0; i--) {
    if (i >= outer) continue;
    const int k = order[i];
    if (g->ext[k] <= 1) continue;
    if (g->stride[k] < reach) return 0;
    reach += (__int128)g->stride[k] * (g->ext[k] - 1);
  }
  return 1;
}

/* Every check of a public call before its plan lookup (scree__args_check
 * in ops/op.h says which, in order), for the op whose tables these are. */
SCREE__INLINE scree_status scree__args_check_in(scree_context *ctx, const scree__op *op,
                                                const scree__arg *schema, int nargs,
                                                const scree__vfield *vfields, int nvfields,
                                                const void *args, CUstream stream,
                                                scree__variant *var, int *skip) {
  scree_status st;
  /* Variant fields given by an args field: one of their values. */
  SCREE__UNROLL
  for (int i = 0; i < nvfields; i++) {
    const scree__vfield *vf = &vfields[i];
    if (!vf->arg) continue;
    const scree__arg *f = NULL;
    SCREE__UNROLL
    for (int j = 0; j < nargs; j++)
      if (schema[j].offset + 1u == vf->arg) f = &schema[j];
    const int64_t v = scree__value_of(args, f);
    int ok = 0;
    SCREE__UNROLL
    for (int k = 0; k < 8; k++) ok |= k < vf->nvalues && vf->values[k] == v;
    if (__builtin_expect(!ok, 0)) return scree__fail_variant(ctx, vf, f, v);
    var->v[i] = (int)v;
  }
  /* Sizes and scalars against their ranges. */
  SCREE__UNROLL
  for (int i = 0; i < nargs; i++) {
    const scree__arg *f = &schema[i];
    if (f->role == SCREE__ROLE_FLOAT) {
      if (!(f->flags & (SCREE__FINITE | SCREE__NONNEG))) continue;
      float v;
      memcpy(&v, (const char *)args + f->offset, sizeof v);
      if (__builtin_expect(((f->flags & SCREE__FINITE) && !isfinite(v)) ||
                               ((f->flags & SCREE__NONNEG) && !(v >= 0.f)),
                           0))
        return scree__fail_float(ctx, f, v);
    } else if ((f->min || f->max) && !scree__is_tensor(f)) {
      const int64_t v = scree__value_of(args, f);
      if (__builtin_expect(v < f->min || v > f->max, 0)) return scree__fail_range(ctx, f, v);
    }
  }
  /* Each tensor's extents and strides, and the strides the sizes bound. */
  scree__tview v[SCREE__MAX_BUFS];
  int has[SCREE__MAX_BUFS];
  int nt = 0;
  SCREE__UNROLL
  for (int i = 0; i < nargs; i++) {
    const scree__arg *t = &schema[i];
    if (!scree__generic(t)) continue;
    scree__tview *w = &v[nt];
    w->t = t;
    has[nt] = scree__geom_of(args, t, &w->g);
    nt++;
    if (!scree__row_checked(t)) continue;
    SCREE__UNROLL
    for (int k = 1; k >= 0; k--) {
      if (k > scree__rank_of(t) - 2) continue;
      if (__builtin_expect(w->g.stride[k] < scree__mul_sat(w->g.ext[k + 1], w->g.stride[k + 1]),
                           0))
        return scree__fail_row_stride(ctx, op, t, args, &w->g, k);
    }
  }
  if (op->validate && (st = op->validate(ctx, args))) return st;
  SCREE__UNROLL
  for (int i = 0; i < nargs; i++)
    if ((schema[i].flags & SCREE__EMPTY) && scree__value_of(args, &schema[i]) == 0) {
      *skip = 1; /* nothing to do, nothing launched */
      return SCREE_OK;
    }
  /* Each tensor with elements and a pointer, in turn: the pointer (NULL
   * unless optional, aligned), the strides of an ANY_ORDER tensor, and the
   * last byte. Every stride is positive by then (checked against the
   * extents inside it, or as ANY_ORDER), so a wrap of the unsigned sums is
   * a range past the end of the address space. Present tensors are then
   * checked for overlaps. */
  int present[SCREE__MAX_BUFS];
  nt = 0;
  SCREE__UNROLL
  for (int i = 0; i < nargs; i++) {
    const scree__arg *t = &schema[i];
    if (!scree__generic(t)) continue;
    const int s = nt++;
    scree__tview *w = &v[s];
    present[s] = 0;
    /* No elements: not read or written. (The extents of a tensor whose
     * layout the op checks may not say: its pointer counts whenever given.) */
    if (!has[s] && !(t->flags & SCREE__OWN_RANGE)) continue;
    memcpy(&w->p, (const char *)args + t->offset, sizeof w->p);
    if (!w->p && (t->flags & SCREE__OPTIONAL)) continue;
    const int elem = scree__elem_of(args, t);
    w->esize = scree__elem_bytes(elem);
    /* Powers of two (element sizes; the registry check for align). */
    const size_t align = t->align ? t->align : w->esize;
    if (__builtin_expect(!w->p || (w->p & (align - 1)), 0))
      return scree__fail_pointer(ctx, t, w->p, align, elem);
    if (t->flags & SCREE__OWN_RANGE) continue;
    if ((t->flags & SCREE__ANY_ORDER) && __builtin_expect(!scree__any_order_ok(t, &w->g), 0))
      return scree__check_any_order(ctx, op, t, &w->g);
    const int r = scree__rank_of(t);
    uint64_t last = (uint64_t)w->g.ext[r - 1], term;
    int wraps = 0;
    SCREE__UNROLL
    for (int k = 1; k >= 0; k--) {
      if (k + 1 >= r) continue;
      wraps |= __builtin_mul_overflow((uint64_t)(w->g.ext[k] - 1), (uint64_t)w->g.stride[k],
                                      &term);
      wraps |= __builtin_add_overflow(last, term, &last);
    }
    wraps |= __builtin_mul_overflow(last, (uint64_t)w->esize, &last);
    wraps |= __builtin_add_overflow(w->p, last, &w->hi);
    if (__builtin_expect(wraps, 0)) return scree__fail_wrap(ctx, t->name, w->p);
    w->lo = w->p;
    present[s] = 1;
  }
  /* Overlaps: each written tensor apart from every other present one, or
   * exactly one it may alias; the pairs in the schema's order. */
  int si = 0;
  SCREE__UNROLL
  for (int i = 0; i < nargs; i++) {
    const scree__arg *a = &schema[i];
    if (!scree__generic(a)) continue;
    const int ia = si++;
    int sj = 0;
    SCREE__UNROLL
    for (int j = 0; j < nargs; j++) {
      if (j >= i) break;
      const scree__arg *b = &schema[j];
      if (!scree__generic(b)) continue;
      const int ib = sj++;
      if (!scree__writes(a) && !scree__writes(b)) continue;
      if (present[ia] && present[ib] && v[ia].lo < v[ib].hi && v[ib].lo < v[ia].hi &&
          (st = scree__check_pair(ctx, &v[ia], &v[ib])))
        return st;
    }
  }
  return op->validate_buffers ? op->validate_buffers(ctx, args, stream, var) : SCREE_OK;
}

/* The widest vector access, as log2 of elements (at most 3), that the
 * pointers and strides of the call's SCREE__VECTOR tensors allow, each
 * element the size of the variant's dtype for it. */
SCREE__INLINE int scree__vec_log2_in(const scree__arg *schema, int nargs,
                                     const scree__vfield *vfields, int nvfields,
                                     const scree__variant *var, const void *args) {
  int l = 3;
  SCREE__UNROLL
  for (int i = 0; i < nargs; i++) {
    const scree__arg *t = &schema[i];
    if (!(t->flags & SCREE__VECTOR)) continue;
    int vf = 0; /* the registry check: a VECTOR tensor's dtype is a variant field's */
    SCREE__UNROLL
    for (int k = 0; k < nvfields; k++)
      if (vfields[k].arg == t->dtype) vf = k;
    scree_devptr p;
    memcpy(&p, (const char *)args + t->offset, sizeof p);
    l = scree__vlog2_ptr(l, p, scree__elem_bytes(var->v[vf]));
    /* Each outer dimension's stride: given, or dense (the product of the
     * extents inside it; its low bits, all that matter here, survive a
     * wrapping product). */
    uint64_t dense = 1;
    SCREE__UNROLL
    for (int d = 1; d >= 0; d--) {
      if (!t->dims[d + 1]) continue;
      dense *= (uint64_t)scree__at_i64(args, t->dims[d + 1]);
      const int64_t given = t->strides[d] ? scree__at_i64(args, t->strides[d]) : 0;
      l = scree__vlog2_stride(l, given ? given : (int64_t)dense);
    }
  }
  return l;
}

#endif
