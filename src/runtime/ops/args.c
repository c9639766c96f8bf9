/* args.c - what the argument checks derived from an op's schema (the
 * scree__arg table of ops/<op>.c; ops/op.h describes it) do out of line:
 * the messages of failed checks, the checks that loop over a call's
 * tensors, the schema's consistency check, and the small checks that the
 * ops' own rules use. The checks themselves are compiled for each op from
 * its tables (ops/args_check.h, SCREE__DEFINE_OP): they run on every
 * public call, with no allocation and no formatting unless one fails. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/op.h"

scree_status scree__arg_ptr(scree_context *ctx, const char *name, scree_devptr p, size_t align) {
  if (!p) return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
  if (align > 1 && p % align)
    return scree__fail(ctx, SCREE_ERROR_MISALIGNED, "%s=0x%llx is not aligned to %zu bytes", name,
                       (unsigned long long)p, align);
  return SCREE_OK;
}

int scree__byte_range(uint64_t base, int64_t rows, int64_t cols, int64_t stride, size_t esize,
                      uint64_t *lo, uint64_t *hi) {
  const __int128 last = ((__int128)(rows > 0 ? rows - 1 : 0) * stride + cols) * (__int128)esize;
  if (last > (__int128)UINT64_MAX - base) return 0;
  *lo = base;
  *hi = base + (uint64_t)last;
  return 1;
}

int scree__overlaps(uint64_t alo, uint64_t ahi, uint64_t blo, uint64_t bhi) {
  return alo < bhi && blo < ahi;
}

/* ---- reading fields ------------------------------------------------------------ */

const scree__arg *scree__arg_at(const scree__op *op, unsigned link) {
  for (int i = 0; link && i < op->nargs; i++)
    if (op->args[i].offset + 1u == link) return &op->args[i];
  return NULL;
}

const scree__arg *scree__shape_field(const scree__op *op, const char *name) {
  for (int i = 0; i < op->nargs; i++)
    if ((op->args[i].flags & SCREE__SHAPE) && !strcmp(op->args[i].name, name))
      return &op->args[i];
  return NULL;
}

int scree__tensor_elem(const void *args, const scree__arg *t) { return scree__elem_of(args, t); }

int scree__tensor_geom(const void *args, const scree__arg *t, scree__geom *g) {
  return scree__geom_of(args, t, g);
}

/* ---- messages (only when a check fails) ----------------------------------------- */

/* "2^31" for powers of two from 2^20 (the limits that are powers of two
 * read better so), else the number. */
static void number_text(char *buf, size_t n, int64_t v, int pow2_only) {
  if (v >= ((int64_t)1 << 20) && v < INT64_MAX && !(v & (v - 1))) {
    const int k = __builtin_ctzll((uint64_t)v);
    if (pow2_only)
      snprintf(buf, n, "2^%d", k);
    else
      snprintf(buf, n, "2^%d (%lld)", k, (long long)v);
  } else {
    snprintf(buf, n, "%lld", (long long)v);
  }
}

static const char *hint_of(const scree__arg *f, const char **sep) {
  *sep = f->hint ? " " : "";
  return f->hint ? f->hint : "";
}

scree_status scree__range_text(const scree__arg *f, int64_t v, char *buf, size_t n) {
  const char *sep, *hint = hint_of(f, &sep);
  const int open = f->max == INT64_MAX, limit = (f->flags & SCREE__LIMIT) != 0;
  char m[48];
  if (v > f->max && limit) {
    number_text(m, sizeof m, f->max, 0);
    snprintf(buf, n, "%s=%lld exceeds the supported maximum %s%s%s", f->name, (long long)v, m,
             sep, hint);
    return SCREE_ERROR_UNSUPPORTED;
  }
  if (v < f->min && (open || limit)) {
    if (f->min == 0)
      snprintf(buf, n, "%s=%lld is negative%s%s", f->name, (long long)v, sep, hint);
    else
      snprintf(buf, n, "%s=%lld must be at least %lld%s%s", f->name, (long long)v,
               (long long)f->min, sep, hint);
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  /* [min, max], or [min, 2^k) when max is one less than a large power of two. */
  const int half_open = !open && f->max + 1 >= ((int64_t)1 << 20) && !((f->max + 1) & f->max);
  number_text(m, sizeof m, half_open ? f->max + 1 : f->max, 1);
  snprintf(buf, n, "%s=%lld must be in [%lld, %s%c%s%s", f->name, (long long)v,
           (long long)f->min, m, half_open ? ')' : ']', sep, hint);
  return SCREE_ERROR_INVALID_ARGUMENT;
}

scree_status scree__fail_range(scree_context *ctx, const scree__arg *f, int64_t v) {
  char msg[256];
  const scree_status st = scree__range_text(f, v, msg, sizeof msg);
  return scree__fail(ctx, st, "%s", msg);
}

scree_status scree__fail_float(scree_context *ctx, const scree__arg *f, float v) {
  const char *sep, *hint = hint_of(f, &sep);
  const int fin = (f->flags & SCREE__FINITE) != 0, nonneg = (f->flags & SCREE__NONNEG) != 0;
  return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=%g %s%s%s", f->name, (double)v,
                     fin && nonneg ? "must be finite and >= 0"
                     : fin         ? "is not finite"
                                   : "must be >= 0",
                     sep, hint);
}

/* "fp32, fp16 or bf16" / "32, 64, 96, 128 or 256": a variant field's values. */
static void values_text(const scree__vfield *vf, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < vf->nvalues && k < n; i++) {
    const char *sep = i == 0 ? "" : i == vf->nvalues - 1 ? " or " : ", ";
    if (vf->is_dtype)
      k += (size_t)snprintf(buf + k, n - k, "%s%s", sep,
                            scree_dtype_name((scree_dtype)vf->values[i]));
    else
      k += (size_t)snprintf(buf + k, n - k, "%s%d", sep, vf->values[i]);
  }
}

scree_status scree__fail_variant(scree_context *ctx, const scree__vfield *vf,
                                 const scree__arg *f, int64_t v) {
  char vals[160];
  values_text(vf, vals, sizeof vals);
  if (!vf->is_dtype)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED, "%s=%lld is not supported (%s)", f->name,
                       (long long)v, vals);
  /* Name a dtype that scree knows but this op does not take. */
  if (v >= 0 && v <= 2)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED, "%s=%d (%s) is not %s", f->name, (int)v,
                       scree_dtype_name((scree_dtype)v), vals);
  return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED, "%s=%d is not %s", f->name, (int)v, vals);
}

/* "token 1024, head 64": a tensor's strides, each named by its field less
 * the tensor's name and "_stride" (q_token_stride: token). */
static void strides_text(const scree__op *op, const scree__arg *t, const scree__geom *g,
                         char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int d = 0; d + 1 < g->rank && k < n; d++) {
    const scree__arg *s = scree__arg_at(op, t->strides[d]);
    const char *name = s ? s->name : "dense";
    size_t len = strlen(name), tl = strlen(t->name);
    if (len > tl + 8 && !strncmp(name, t->name, tl) && name[tl] == '_' &&
        !strcmp(name + len - 7, "_stride"))
      name += tl + 1, len -= tl + 8;
    else if (len > 7 && !strcmp(name + len - 7, "_stride"))
      len -= 7;
    k += (size_t)snprintf(buf + k, n - k, "%s%.*s %lld", d ? ", " : "", (int)len, name,
                          (long long)g->stride[d]);
  }
}

/* ---- the checks ---------------------------------------------------------------- */

/* Stride k of a tensor without SCREE__ANY_ORDER does not cover the
 * dimensions inside it. */
scree_status scree__fail_row_stride(scree_context *ctx, const scree__op *op, const scree__arg *t,
                                    const void *args, const scree__geom *g, int k) {
  const scree__arg *s = scree__arg_at(op, t->strides[k]), *d = scree__arg_at(op, t->dims[k + 1]);
  if (k + 2 == g->rank)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=%lld is less than %s=%lld",
                       s->name, (long long)scree__at_i64(args, t->strides[k]), d->name,
                       (long long)g->ext[k + 1]);
  return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                     "%s=%lld is less than %s=%lld rows of %lld elements", s->name,
                     (long long)scree__at_i64(args, t->strides[k]), d->name,
                     (long long)g->ext[k + 1], (long long)g->stride[k + 1]);
}

/* A NULL (not optional) or misaligned pointer. */
scree_status scree__fail_pointer(scree_context *ctx, const scree__arg *t, uint64_t p,
                                 size_t align, int elem) {
  if (!p) return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s is NULL", t->name);
  if (align == scree__elem_bytes(elem))
    return scree__fail(ctx, SCREE_ERROR_MISALIGNED, "%s=0x%llx is not aligned to %zu bytes (%s)",
                       t->name, (unsigned long long)p, align, scree__elem_name(elem));
  return scree__fail(ctx, SCREE_ERROR_MISALIGNED, "%s=0x%llx is not aligned to %zu bytes",
                     t->name, (unsigned long long)p, align);
}

scree_status scree__fail_wrap(scree_context *ctx, const char *name, uint64_t p) {
  return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=0x%llx extends past the address space",
                     name, (unsigned long long)p);
}

/* A tensor whose strides may come in any order: positive (multiples of
 * stride_multiple), and no two elements at one address: sorted by stride,
 * each dimension must clear the reach of those inside it. */
scree_status scree__check_any_order(scree_context *ctx, const scree__op *op, const scree__arg *t,
                                    const scree__geom *g) {
  const int outer = g->rank - 1;
  for (int k = 0; k < outer; k++) {
    const int64_t s = g->stride[k];
    /* stride_multiple is a power of two (the registry check). */
    if (s > 0 && !(s & (t->stride_multiple ? t->stride_multiple - 1 : 0))) continue;
    char st[96];
    strides_text(op, t, g, st, sizeof st);
    if (t->stride_multiple)
      return scree__fail(ctx, SCREE_ERROR_MISALIGNED,
                         "%s strides (%s) must be positive multiples of %d elements", t->name, st,
                         t->stride_multiple);
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s strides (%s) must be positive",
                       t->name, st);
  }
  int order[2] = {0, 1};
  if (outer == 2 && g->stride[1] > g->stride[0]) order[0] = 1, order[1] = 0;
  __int128 reach = g->ext[outer];
  for (int i = outer - 1; i >= 0; i--) {
    const int k = order[i];
    if (g->ext[k] <= 1) continue;
    if (g->stride[k] < reach) {
      char st[96];
      strides_text(op, t, g, st, sizeof st);
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "%s strides (%s) overlap: two elements of %s share an address", t->name,
                         st, t->name);
    }
    reach += (__int128)g->stride[k] * (g->ext[k] - 1);
  }
  return SCREE_OK;
}

static int may_alias(const scree__arg *a, const scree__arg *b) {
  for (int i = 0; i < 2; i++)
    if (a->alias[i] == b->offset + 1u || b->alias[i] == a->offset + 1u) return 1;
  return 0;
}

/* Written tensors have their own memory: apart from every other tensor, or
 * exactly one they may alias (in place, with equal element sizes and
 * strides). The written one is named first; of two written ones, the later
 * (a). */
scree_status scree__check_pair(scree_context *ctx, const scree__tview *a, const scree__tview *b) {
  if (!scree__writes(a->t)) {
    const scree__tview *w = a;
    a = b, b = w;
  }
  if (!may_alias(a->t, b->t))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=0x%llx overlaps %s=0x%llx",
                       a->t->name, (unsigned long long)a->p, b->t->name, (unsigned long long)b->p);
  if (a->p != b->p)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=0x%llx partially overlaps %s=0x%llx",
                       a->t->name, (unsigned long long)a->p, b->t->name, (unsigned long long)b->p);
  int same = a->esize == b->esize && a->g.rank == b->g.rank;
  for (int k = 0; same && k + 1 < a->g.rank; k++) same = a->g.stride[k] == b->g.stride[k];
  if (same) return SCREE_OK;
  if (a->g.rank < 2)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "%s == %s (in place) needs equal element sizes", a->t->name, b->t->name);
  return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                     "%s == %s (in place) needs equal element sizes and strides (%s: %zu "
                     "bytes, stride %lld; %s: %zu bytes, stride %lld)",
                     a->t->name, b->t->name, a->t->name, a->esize, (long long)a->g.stride[0],
                     b->t->name, b->esize, (long long)b->g.stride[0]);
}

/* ---- the checks of a call ---------------------------------------------------------- */

scree_status scree__args_check(scree_context *ctx, const scree__op *op, const void *args,
                               CUstream stream, scree__variant *var, int *skip) {
  return op->check_args(ctx, args, stream, var, skip);
}

int scree__vec_log2(const scree__op *op, const scree__variant *var, const void *args) {
  return op->vec_log2(var, args);
}

int scree__adapt_class(const scree__op *op, const scree__variant *var, const void *args) {
  return op->adapt_class ? op->adapt_class(var, args) : op->vec_log2(var, args);
}

/* ---- the schema's consistency (the registry check) ------------------------------- */

static int role_of(const scree__op *op, unsigned link, int role) {
  const scree__arg *f = scree__arg_at(op, link);
  return f && (role ? f->role == role : scree__is_tensor(f));
}

const char *scree__schema_missing(const scree__op *op) {
#define NEED(cond, what) \
  if (!(cond)) return what
  NEED(op->nargs >= 1 && op->nargs <= SCREE__MAX_ARGS && op->args,
       "args (the schema, at most SCREE__MAX_ARGS entries)");
  NEED(op->check_args && op->vec_log2, "check_args, vec_log2 (SCREE__DEFINE_OP gives them)");
  int ntensors = 0, nshape = 0;
  size_t end = 0;
  for (int i = 0; i < op->nargs; i++) {
    const scree__arg *f = &op->args[i];
    NEED(f->name && *f->name, "args[].name");
    NEED(f->role >= SCREE__ROLE_IN && f->role <= SCREE__ROLE_FLOAT, "args[].role");
    /* Every member, in order: at most padding between two, and after the
     * last (the struct's alignment, 8 at most). */
    NEED(f->offset >= end && f->offset - end < 8, "args[] (every field, in the struct's order)");
    end = (size_t)f->offset + f->size;
    const int size_ok = f->ctype == SCREE__C_I32 || f->ctype == SCREE__C_F32 ? f->size == 4
                                                                              : f->size == 8;
    NEED(size_ok, "args[].size (int64_t, uint64_t, float, int or enum fields)");
    if (scree__is_tensor(f)) {
      ntensors++;
      NEED(f->ctype == SCREE__C_PTR, "args[] (a tensor is a scree_devptr)");
      NEED(!f->dtype != !f->elem, "args[].dtype or .elem (one of them)");
      NEED(!f->dtype || role_of(op, f->dtype, SCREE__ROLE_DTYPE), "args[].dtype (a DTYPE field)");
      NEED(f->elem <= SCREE__E_I64, "args[].elem");
      NEED(!f->wide || (f->elem == SCREE__E_I32 && role_of(op, f->wide, SCREE__ROLE_INT) &&
                        scree__arg_at(op, f->wide)->ctype == SCREE__C_I32),
           "args[].wide (an int field, with elem SCREE__E_I32)");
      NEED(f->dims[0], "args[].dims");
      int rank = 0;
      while (rank < 3 && f->dims[rank]) {
        NEED(role_of(op, f->dims[rank], SCREE__ROLE_DIM), "args[].dims (DIM fields)");
        rank++;
      }
      for (int k = rank; k < 3; k++) NEED(!f->dims[k], "args[].dims (outermost first)");
      for (int k = 0; k < 2; k++)
        NEED(!f->strides[k] || (k < rank - 1 && role_of(op, f->strides[k], SCREE__ROLE_STRIDE)),
             "args[].strides (STRIDE fields of its outer dims)");
      for (int k = 0; k < 2; k++)
        NEED(!f->alias[k] || role_of(op, f->alias[k], 0), "args[].alias (tensors)");
      NEED(!f->align || !(f->align & (f->align - 1)), "args[].align (a power of two)");
      NEED(!(f->stride_multiple & (f->stride_multiple - 1)),
           "args[].stride_multiple (a power of two)");
      NEED(!(f->flags & SCREE__ANY_ORDER) || rank >= 2, "args[] (ANY_ORDER needs rank 2 or 3)");
      int vslot = 0;
      for (int k = 0; k < op->nvfields; k++) vslot |= f->dtype && op->vfields[k].arg == f->dtype;
      NEED(!(f->flags & SCREE__VECTOR) || vslot,
           "args[] (a VECTOR tensor's dtype is a variant field's)");
      NEED(!(f->flags & SCREE__CHECK_ONLY) || (f->flags & SCREE__OPTIONAL),
           "args[] (CHECK_ONLY is for optional tensors)");
    } else {
      NEED(f->ctype != SCREE__C_PTR, "args[] (a scree_devptr is a tensor)");
      NEED(!f->dtype && !f->elem && !f->wide && !f->dims[0] && !f->strides[0] && !f->alias[0],
           "args[] (links on a field that is not a tensor)");
      NEED(f->role != SCREE__ROLE_DIM && f->role != SCREE__ROLE_STRIDE ? 1 : f->ctype == SCREE__C_I64,
           "args[] (DIM and STRIDE fields are int64_t)");
      NEED(f->role != SCREE__ROLE_FLOAT || f->ctype == SCREE__C_F32, "args[] (FLOAT is a float)");
      NEED(f->role != SCREE__ROLE_DTYPE || f->ctype == SCREE__C_I32, "args[] (DTYPE is a scree_dtype)");
      NEED(f->min <= f->max, "args[].min/max");
    }
    if (f->flags & SCREE__SHAPE) {
      nshape++;
      NEED(f->ctype == SCREE__C_I64, "args[] (a SHAPE field is int64_t)");
    }
    NEED(!(f->flags & SCREE__EMPTY) || f->role == SCREE__ROLE_DIM, "args[] (EMPTY is for DIM fields)");
    if (f->role == SCREE__ROLE_DTYPE) {
      int given = 0;
      for (int k = 0; k < op->nvfields; k++)
        given |= op->vfields[k].arg == f->offset + 1u && op->vfields[k].is_dtype;
      NEED(given, "vfields[].arg (every DTYPE field gives a dtype variant field)");
    }
  }
  NEED(end <= op->args_size && op->args_size - end < 8, "args[] (every field, in the struct's order)");
  NEED(ntensors <= SCREE__MAX_BUFS, "args[] (at most SCREE__MAX_BUFS tensors)");
  NEED(nshape >= 1, "args[] (SHAPE fields)");
  for (int k = 0; k < op->nvfields; k++) {
    const scree__arg *f = scree__arg_at(op, op->vfields[k].arg);
    NEED(!op->vfields[k].arg || (f && !scree__is_tensor(f) && f->role != SCREE__ROLE_FLOAT),
         "vfields[].arg (an integer field of the args)");
  }
#undef NEED
  return "";
}

/* floor(x / p) and ceil(x / p) for p > 0. */
static __int128 floor_div(__int128 x, __int128 p) {
  __int128 q = x / p;
  if (x % p && x < 0) q--;
  return q;
}
static __int128 ceil_div(__int128 x, __int128 p) { return -floor_div(-x, p); }

/* Row i of A meets row j of B exactly when k = i - j satisfies b - a - wa
 * < k p < b - a + wb, an interval holding at most two k; so interleaved
 * layouts are told apart in O(1). */
int scree__rows_meet(uint64_t a, uint64_t wa, uint64_t b, uint64_t wb, uint64_t p, int64_t n) {
  const __int128 d = (__int128)b - (__int128)a;
  __int128 kmin = floor_div(d - (__int128)wa, p) + 1;
  __int128 kmax = ceil_div(d + (__int128)wb, p) - 1;
  if (kmin < -(__int128)(n - 1)) kmin = -(__int128)(n - 1);
  if (kmax > (__int128)(n - 1)) kmax = n - 1;
  return kmin <= kmax;
}
