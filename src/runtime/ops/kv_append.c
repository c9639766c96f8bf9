/* kv_append.c - new tokens' K and V written into a paged KV cache (vLLM's
 * reshape_and_cache), the host side: its arguments (strided k and v, the
 * caches' four-dimensional layout, the int64 slot mapping), config space
 * and constraints, the launch, buckets, problems, the CPU reference and the
 * benchmark entries. The kernel is kernels/kv_append.cu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

#define MAX_HEAD_DIM 1024
#define MAX_HEADS 65535
#define MAX_PAGES ((int64_t)1 << 40)
#define DEFAULT_PAGE_SIZE 16

#define SCREE__ARGS_T scree_kv_append_args

/* The arguments (include/scree.h), field by field. k and v are read where
 * they lie (any order of their strides: views of a fused qkv buffer) and
 * may share memory. A cache has four dimensions, one more than a schema
 * tensor: the table describes one page of it ([page_size, heads_kv,
 * head_dim]), and the op checks the caches' strides, extents and overlaps
 * itself (validate, validate_buffers), as it checks the slots' values with
 * validation on. */
static const scree__arg schema[] = {
    SCREE__IN(k, .dtype = SCREE__AT(dtype),
              .dims = {SCREE__AT(total_new), SCREE__AT(heads_kv), SCREE__AT(head_dim)},
              .strides = {SCREE__AT(k_token_stride), SCREE__AT(k_head_stride)},
              .flags = SCREE__ANY_ORDER),
    SCREE__IN(v, .dtype = SCREE__AT(dtype),
              .dims = {SCREE__AT(total_new), SCREE__AT(heads_kv), SCREE__AT(head_dim)},
              .strides = {SCREE__AT(v_token_stride), SCREE__AT(v_head_stride)},
              .flags = SCREE__ANY_ORDER),
    SCREE__INOUT(k_cache, .dtype = SCREE__AT(dtype),
                 .dims = {SCREE__AT(page_size), SCREE__AT(heads_kv), SCREE__AT(head_dim)},
                 .strides = {SCREE__AT(cache_token_stride), SCREE__AT(cache_head_stride)},
                 .flags = SCREE__OWN_RANGE),
    SCREE__INOUT(v_cache, .dtype = SCREE__AT(dtype),
                 .dims = {SCREE__AT(page_size), SCREE__AT(heads_kv), SCREE__AT(head_dim)},
                 .strides = {SCREE__AT(cache_token_stride), SCREE__AT(cache_head_stride)},
                 .flags = SCREE__OWN_RANGE),
    SCREE__IN(slot_mapping, .elem = SCREE__E_I64, .dims = {SCREE__AT(total_new)}),
    SCREE__DIM(total_new, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(num_pages, SCREE__RANGE(1, MAX_PAGES), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__DIM(page_size, SCREE__RANGE(1, 256), .flags = SCREE__SHAPE | SCREE__LIMIT,
               .hint = "(1, 8, 16, 32, 64, 128 or 256)"),
    SCREE__DIM(heads_kv, SCREE__RANGE(1, MAX_HEADS), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__DIM(head_dim, SCREE__RANGE(1, MAX_HEAD_DIM), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(k_token_stride, .flags = SCREE__SHAPE),
    SCREE__STRIDE(k_head_stride),
    SCREE__STRIDE(v_token_stride, .flags = SCREE__SHAPE),
    SCREE__STRIDE(v_head_stride),
    SCREE__STRIDE(cache_page_stride, SCREE__MIN(0)),
    SCREE__STRIDE(cache_token_stride, SCREE__MIN(0)),
    SCREE__STRIDE(cache_head_stride, SCREE__MIN(0)),
    SCREE__DTYPE(dtype),
};

enum { F_LANES, F_THREADS, F_VEC, F_UNROLL, F_N };
enum { V_DTYPE };

static const scree__field fields[F_N] = {
    {"lanes", "SCREE_LANES", 6, {1, 2, 4, 8, 16, 32}},
    {"threads", "SCREE_THREADS", 6, {32, 64, 128, 256, 512, 1024}},
    {"vec", "SCREE_VEC", 4, {1, 2, 4, 8}},
    {"unroll", "SCREE_UNROLL", 4, {1, 2, 4, 8}},
};
static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dtype)},
};

/* Bucket: tokens and kv heads rounded up to powers of two (their product
 * is the number of rows), head_dim exact (the vectors of a row). The page
 * size and the layouts are not part of it: they move the same bytes.
 * total_new depends on the batch: batch-invariant mode tunes on 4096. */
static const scree__bdim dims[] = {{"total_new", 1, SCREE__AT(total_new), 4096},
                                   {"heads_kv", 1, SCREE__AT(heads_kv), 0},
                                   {"head_dim", 0, SCREE__AT(head_dim), 0}};

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* Registers per thread, estimated as SCREE_EST_REGS of kernels/kv_append.cu
 * (ptxas on sm_90 stays within it). */
static int est_regs(int unroll) { return 28 + 20 * unroll; }

/* Mirrors the static_asserts of kernels/kv_append.cu. */
static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  (void)t; /* no shared memory; a few registers per vector in flight */
  const int lanes = c->v[F_LANES], threads = c->v[F_THREADS], vec = c->v[F_VEC],
            unroll = c->v[F_UNROLL];
  if (var->v[V_DTYPE] < 0 || var->v[V_DTYPE] > 2) {
    scree__set_why(why, n, "dtype=%d must be 0 (fp32), 1 (fp16) or 2 (bf16)", var->v[V_DTYPE]);
    return 0;
  }
  if (!is_pow2(lanes) || lanes > 32) {
    scree__set_why(why, n, "lanes=%d must be 1, 2, 4, 8, 16 or 32", lanes);
    return 0;
  }
  if (!is_pow2(threads) || threads < 32 || threads > 1024) {
    scree__set_why(why, n, "threads=%d must be a power of two in [32, 1024]", threads);
    return 0;
  }
  if (vec != 1 && vec != 2 && vec != 4 && vec != 8) {
    scree__set_why(why, n, "vec=%d must be 1, 2, 4 or 8", vec);
    return 0;
  }
  if (unroll != 1 && unroll != 2 && unroll != 4 && unroll != 8) {
    scree__set_why(why, n, "unroll=%d must be 1, 2, 4 or 8", unroll);
    return 0;
  }
  const int regs = est_regs(unroll);
  if (threads * regs > 65536) {
    scree__set_why(why, n, "threads=%d of about %d registers (unroll=%d) exceed the 64K register "
                   "file", threads, regs, unroll);
    return 0;
  }
  const int bytes = vec * (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  if (bytes > 16) {
    scree__set_why(why, n, "vec=%d elements of %s are %d bytes, more than a 16-byte access", vec,
                   scree_dtype_name((scree_dtype)var->v[V_DTYPE]), bytes);
    return 0;
  }
  return 1;
}

/* The call's strides with every "0 means" resolved, in elements. */
typedef struct strides {
  int64_t kt, kh, vt, vh, cp, ct, ch;
} strides;

static strides strides_of(const scree_kv_append_args *a) {
  strides s;
  const int64_t row = a->heads_kv * a->head_dim;
  s.kt = a->k_token_stride ? a->k_token_stride : row;
  s.kh = a->k_head_stride ? a->k_head_stride : a->head_dim;
  s.vt = a->v_token_stride ? a->v_token_stride : row;
  s.vh = a->v_head_stride ? a->v_head_stride : a->head_dim;
  s.ct = a->cache_token_stride ? a->cache_token_stride : row;
  s.ch = a->cache_head_stride ? a->cache_head_stride : a->head_dim;
  s.cp = a->cache_page_stride ? a->cache_page_stride : scree__mul_sat(a->page_size, s.ct);
  return s;
}

/* log2 of the widest vector (elements, at most 8) the call allows: every
 * pointer and stride aligned to it, and head_dim a multiple of it (a row is
 * whole vectors). Trailing zero bits, no division. */
static int vec_log2(const scree__variant *var, const scree_kv_append_args *a) {
  const size_t es = scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  const strides s = strides_of(a);
  int l = 3;
  l = scree__vlog2_ptr(l, a->k, es);
  l = scree__vlog2_ptr(l, a->v, es);
  l = scree__vlog2_ptr(l, a->k_cache, es);
  l = scree__vlog2_ptr(l, a->v_cache, es);
  l = scree__vlog2_stride(l, s.kt);
  l = scree__vlog2_stride(l, s.kh);
  l = scree__vlog2_stride(l, s.vt);
  l = scree__vlog2_stride(l, s.vh);
  l = scree__vlog2_stride(l, s.cp);
  l = scree__vlog2_stride(l, s.ct);
  l = scree__vlog2_stride(l, s.ch);
  return scree__vlog2_stride(l, a->head_dim);
}

/* The widest vector of at most 16 bytes that the call allows. */
static int widest_vec(const scree__variant *var, const scree_kv_append_args *a) {
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  int w = 16 / es;
  if (a) {
    const int allowed = 1 << vec_log2(var, a);
    if (allowed < w) w = allowed;
  }
  return w;
}

/* Hand-picked default, the same on sm_80 and sm_90 until measurements say
 * otherwise: 16-byte accesses; as many lanes per row as divide its vectors
 * (up to a warp), so no lane idles on a pass over the row; 256 threads and
 * two rows per group (four 16-byte loads in flight per thread); fewer rows
 * per CTA when the bucket has few rows, so that several hundred CTAs still
 * spread over the SMs. Reads the shape only through the bucket (tokens and
 * heads rounded up, head_dim). */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  (void)t;
  const scree_kv_append_args *a = args;
  memset(out, 0, sizeof *out);
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  const int64_t d = a ? a->head_dim : 128;
  int vec = 16 / es;
  while (vec > 1 && d % vec) vec /= 2; /* a row is whole vectors */
  const int64_t nvec = d / vec;
  int lanes = 1;
  while (lanes < 32 && nvec % (2 * lanes) == 0) lanes *= 2;
  int threads = 256, unroll = 2;
  if (a) {
    const int64_t rows = scree__pow2_ceil(a->total_new) * scree__pow2_ceil(a->heads_kv);
    /* rows per CTA at a time: threads / lanes * unroll */
    while (unroll > 1 && rows * lanes / ((int64_t)threads * unroll) < 512) unroll /= 2;
    while (threads > 64 && threads > lanes && rows * lanes / ((int64_t)threads * unroll) < 512)
      threads /= 2;
  }
  out->v[F_LANES] = lanes;
  out->v[F_THREADS] = threads;
  out->v[F_VEC] = vec;
  out->v[F_UNROLL] = unroll;
}

/* Narrows vec to what the call allows; unroll doubles with it while the
 * registers allow (up to 8), so as many bytes stay in flight per thread. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  const int widest = 1 << vec_log2(var, args);
  while (c->v[F_VEC] > widest) {
    c->v[F_VEC] /= 2;
    const int u = 2 * c->v[F_UNROLL];
    if (u <= 8 && c->v[F_THREADS] * est_regs(u) <= 65536) c->v[F_UNROLL] = u;
  }
}

static int adapt_class(const scree__variant *var, const void *args) {
  return vec_log2(var, args);
}

/* Worth timing: the widest vector the call allows (a narrower one only adds
 * accesses), no more lanes than a row has vectors (rounded up to a power of
 * two), and no more rows per CTA at a time than the shape has. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  const scree_kv_append_args *a = args;
  const int vec = c->v[F_VEC];
  const int64_t nvec = scree__pow2_ceil(a->head_dim / vec);
  const int64_t rows = scree__pow2_ceil(a->total_new * a->heads_kv);
  const int64_t per_cta = (int64_t)(c->v[F_THREADS] / c->v[F_LANES]) * c->v[F_UNROLL];
  return vec == widest_vec(var, a) && c->v[F_LANES] <= nvec && per_cta <= rows;
}

static int page_shift(int64_t page_size) {
  int s = 0;
  while (((int64_t)1 << s) < page_size) s++;
  return s;
}

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  (void)var;
  const scree_kv_append_args *a = args;
  const strides s = strides_of(a);
  uint64_t kp = a->k, vp = a->v, kc = a->k_cache, vc = a->v_cache, slots = a->slot_mapping;
  int rows = (int)(a->total_new * a->heads_kv), heads = (int)a->heads_kv,
      head_dim = (int)a->head_dim, shift = page_shift(a->page_size);
  long long kt = s.kt, kh = s.kh, vt = s.vt, vh = s.vh, cp = s.cp, ct = s.ct, ch = s.ch;
  const int64_t per_cta = (int64_t)(c->v[F_THREADS] / c->v[F_LANES]) * c->v[F_UNROLL];
  int64_t grid = scree__cdiv(rows, per_cta);
  if (grid > 0x7fffffffLL) grid = 0x7fffffffLL; /* the kernel strides */
  void *params[] = {&kp, &vp, &kc, &vc, &slots, &rows, &heads, &head_dim, &shift,
                    &kt, &kh, &vt, &vh, &cp, &ct, &ch};
  const CUresult r = ctx->cu->LaunchKernel(k->fn[0], (unsigned)grid, 1, 1,
                                           (unsigned)c->v[F_THREADS], 1, 1, 0, stream, params,
                                           NULL);
  if (r != CUDA_SUCCESS)
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(kv_append)");
  return SCREE_OK;
}

/* ---- the op's own argument rules ---------------------------------------- */

/* The page sizes of the paged attention kernels. */
static int page_size_ok(int64_t p) { return is_pow2(p) && (p == 1 || (p >= 8 && p <= 256)); }

/* 1 if no two elements of a cache share an address: taken from the
 * smallest stride, each dimension (pages, tokens of a page, heads) must
 * clear the reach of those inside it (one of extent 1 has no stride to
 * speak of). Every stride positive. */
static int cache_strides_ok(const scree_kv_append_args *a, const strides *s) {
  int64_t st[3] = {s->ch, s->ct, s->cp}, ex[3] = {a->heads_kv, a->page_size, a->num_pages};
  for (int i = 0; i < 3; i++)
    if (st[i] <= 0) return 0;
  for (int i = 1; i < 3; i++) /* sort by stride (three entries) */
    for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
      int64_t x = st[j];
      st[j] = st[j - 1], st[j - 1] = x;
      x = ex[j], ex[j] = ex[j - 1], ex[j - 1] = x;
    }
  __int128 reach = a->head_dim;
  for (int i = 0; i < 3; i++) {
    if (ex[i] <= 1) continue;
    if (st[i] < reach) return 0;
    reach += (__int128)st[i] * (ex[i] - 1);
  }
  return 1;
}

/* Sizes the schema cannot state: the page sizes served, rows that the
 * kernel counts in int, and the caches' strides. */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_kv_append_args *a = args;
  if (!page_size_ok(a->page_size))
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "page_size=%lld is not supported (1, 8, 16, 32, 64, 128 or 256)",
                       (long long)a->page_size);
  if (a->total_new * a->heads_kv > 0x7fffffffLL)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "total_new=%lld times heads_kv=%lld exceeds the supported maximum 2^31 - 1 "
                       "rows",
                       (long long)a->total_new, (long long)a->heads_kv);
  const strides s = strides_of(a);
  if (!cache_strides_ok(a, &s))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "cache strides (page %lld, token %lld, head %lld) overlap: two elements of "
                       "a cache of %lld pages of %lld tokens of %lld heads of %lld share an "
                       "address",
                       (long long)s.cp, (long long)s.ct, (long long)s.ch,
                       (long long)a->num_pages, (long long)a->page_size, (long long)a->heads_kv,
                       (long long)a->head_dim);
  return SCREE_OK;
}

/* The bytes [lo, hi) of a [n0, n1, n2, head_dim] tensor from p with
 * positive strides s0, s1, s2; 0 if they pass the end of the address
 * space. */
static int span4(uint64_t p, int64_t n0, int64_t s0, int64_t n1, int64_t s1, int64_t n2,
                 int64_t s2, int64_t d, size_t es, uint64_t *lo, uint64_t *hi) {
  const __int128 last =
      ((__int128)(n0 - 1) * s0 + (__int128)(n1 - 1) * s1 + (__int128)(n2 - 1) * s2 + d) *
      (__int128)es;
  if (last > (__int128)(UINT64_MAX - p)) return 0;
  *lo = p;
  *hi = p + (uint64_t)last;
  return 1;
}

/* floor(x / m) for m > 0. */
static __int128 floor_div(__int128 x, __int128 m) {
  __int128 q = x / m;
  if (x % m && x < 0) q--;
  return q;
}

/* 1 if the caches share no element although their byte ranges overlap:
 * interleaved page by page (one [pages, 2, page_size, heads, head_dim]
 * buffer): the page stride the largest, v_cache's pages at an offset from
 * k_cache's that leaves each of them in the gap after a page of k_cache. */
static int pages_interleave(const scree_kv_append_args *a, const strides *s) {
  const int64_t es = (int64_t)scree_dtype_size(a->dtype);
  const __int128 diff = (__int128)a->v_cache - (__int128)a->k_cache;
  if (diff % es || a->num_pages < 2) return 0;
  /* A page's reach inside it: its last element plus one. */
  const __int128 F = (__int128)(a->page_size - 1) * s->ct + (__int128)(a->heads_kv - 1) * s->ch +
                     a->head_dim;
  if (s->cp < F) return 0;
  const __int128 D = diff / es, r = D - floor_div(D, s->cp) * s->cp; /* in [0, cp) */
  return r >= F && r + F <= s->cp;
}

/* With validation on: slot_mapping copied to the host, every entry -1 or a
 * slot of the cache, and no slot twice. */
static int by_slot(const void *x, const void *y) {
  const int64_t *p = x, *q = y;
  return p[0] != q[0] ? (p[0] < q[0] ? -1 : 1) : (p[1] < q[1] ? -1 : p[1] > q[1]);
}

static scree_status check_slots(scree_context *ctx, const scree_kv_append_args *a,
                                CUstream stream) {
  const int64_t n = a->total_new, cap = a->num_pages * a->page_size;
  int64_t *h = malloc((size_t)n * sizeof *h);
  int64_t *pairs = malloc((size_t)n * 2 * sizeof *pairs); /* (slot, token) */
  if (!h || !pairs) {
    free(h), free(pairs);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "validate: slot_mapping copy");
  }
  scree_status st = scree__read_device(ctx, stream, h, a->slot_mapping, (size_t)n * sizeof *h,
                                       "slot_mapping");
  int64_t m = 0;
  for (int64_t t = 0; t < n && !st; t++) {
    if (h[t] == -1) continue;
    if (h[t] < 0 || h[t] >= cap) {
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "slot_mapping[%lld]=%lld is neither -1 nor in [0, num_pages * page_size = "
                       "%lld)",
                       (long long)t, (long long)h[t], (long long)cap);
      break;
    }
    pairs[2 * m] = h[t], pairs[2 * m + 1] = t, m++;
  }
  if (!st && m > 1) {
    qsort(pairs, (size_t)m, 2 * sizeof *pairs, by_slot);
    /* The repeat found first in token order: the smallest second writer. */
    int64_t worst = -1;
    for (int64_t i = 1; i < m; i++)
      if (pairs[2 * i] == pairs[2 * i - 2] && (i < 2 || pairs[2 * i - 4] != pairs[2 * i]) &&
          (worst < 0 || pairs[2 * i + 1] < pairs[2 * worst + 1]))
        worst = i;
    if (worst >= 0)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "slot_mapping[%lld]=%lld repeats slot_mapping[%lld]: two tokens would "
                       "write one slot",
                       (long long)pairs[2 * worst + 1], (long long)pairs[2 * worst],
                       (long long)pairs[2 * worst - 1]);
  }
  free(h), free(pairs);
  return st;
}

/* The caches: their byte ranges, apart from what the kernel reads and from
 * each other (or interleaved page by page); the slots with validation on. */
static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  (void)var;
  const scree_kv_append_args *a = args;
  const strides s = strides_of(a);
  const size_t es = scree_dtype_size(a->dtype);
  const int64_t T = a->total_new, H = a->heads_kv, d = a->head_dim;
  uint64_t cl[2], ch[2], rl[3], rh[3];
  const char *cname[2] = {"k_cache", "v_cache"}, *rname[3] = {"k", "v", "slot_mapping"};
  const uint64_t cp[2] = {a->k_cache, a->v_cache}, rp[3] = {a->k, a->v, a->slot_mapping};
  for (int i = 0; i < 2; i++)
    if (!span4(cp[i], a->num_pages, s.cp, a->page_size, s.ct, H, s.ch, d, es, &cl[i], &ch[i]))
      return scree__fail_wrap(ctx, cname[i], cp[i]);
  /* k, v and slot_mapping passed the generic checks: their ranges fit. */
  span4(a->k, 1, 0, T, s.kt, H, s.kh, d, es, &rl[0], &rh[0]);
  span4(a->v, 1, 0, T, s.vt, H, s.vh, d, es, &rl[1], &rh[1]);
  rl[2] = a->slot_mapping, rh[2] = a->slot_mapping + (uint64_t)T * 8;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      if (scree__overlaps(cl[i], ch[i], rl[j], rh[j]))
        return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                           "%s=0x%llx overlaps %s=0x%llx: the cache written must be apart from "
                           "what is read",
                           cname[i], (unsigned long long)cp[i], rname[j],
                           (unsigned long long)rp[j]);
  if (scree__overlaps(cl[0], ch[0], cl[1], ch[1]) && !pages_interleave(a, &s))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "k_cache=0x%llx and v_cache=0x%llx overlap (they may share a buffer only "
                       "interleaved page by page, with the page stride %lld the largest)",
                       (unsigned long long)a->k_cache, (unsigned long long)a->v_cache,
                       (long long)s.cp);
  scree_status st;
  if (ctx->validate && ctx->cu && (st = check_slots(ctx, a, stream))) return st;
  return SCREE_OK;
}

/* ---- buckets and problems --------------------------------------------------- */

/* Tuned on the bucket's largest token count, capped at 256 MiB of k and v
 * together, in pages of 16. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree_kv_append_args *a = args;
  memset(a, 0, sizeof *a);
  a->heads_kv = b->v[1];
  a->head_dim = b->v[2];
  a->page_size = DEFAULT_PAGE_SIZE;
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  /* Saturating: a bucket may name any size up to 2^40 (the cap below then
   * holds the problem to one token). */
  const int64_t row = scree__mul_sat(scree__mul_sat(2 * a->heads_kv, a->head_dim),
                                     (int64_t)scree_dtype_size(a->dtype));
  int64_t total = b->v[0];
  const int64_t cap = ((int64_t)256 << 20) / (row > 0 ? row : 1);
  if (total > cap) total = cap > 0 ? cap : 1;
  a->total_new = total;
  (void)check; /* the problem hook sizes check problems itself */
}

/* Marks a pointer field whose buffer the problem has (run_bind replaces
 * it with the device pointer). */
#define PRESENT ((scree_devptr)0x1000)
#define CHECK_TOKENS 77

/* A shape (from a representative, a benchmark entry or text) as a problem:
 * the page size (0: 16) and page count (0: a quarter more slots than
 * tokens) given or chosen; k and v dense unless the shape gives their
 * token strides (a fused qkv buffer). The slots are a random permutation
 * of the cache's, with one token in 64 padding (-1).
 *
 * The check problem (check != 0) keeps at most 77 tokens and adds the
 * edges: k a view of a fused [T, 3, H, d] buffer, v head-major ([H, T, d]),
 * pages padded by 8 elements, the first and the last slot of the cache
 * written, two pages more than the tokens need (so pages are partly
 * filled), and one token in 7 padding. The caches are in place (INOUT):
 * random before the run, compared whole after it, so a slot written that
 * should not be, or padding touched, shows. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)lens;
  scree_kv_append_args *a = (scree_kv_append_args *)p->args;
  memcpy(a, args, sizeof *a);
  if (!a->page_size) a->page_size = DEFAULT_PAGE_SIZE;
  if (!a->num_pages) a->num_pages = 1; /* chosen below */
  if (scree__problem_shape(a, schema, SCREE__COUNT(schema), why, why_size)) return -1;
  if (!page_size_ok(a->page_size)) {
    scree__set_why(why, why_size, "page_size=%lld is not 1, 8, 16, 32, 64, 128 or 256",
                   (long long)a->page_size);
    return -1;
  }
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  const int64_t H = a->heads_kv, d = a->head_dim, S = a->page_size;
  if (check && a->total_new > CHECK_TOKENS) a->total_new = CHECK_TOKENS;
  const int64_t T = a->total_new;
  if (check) {
    a->k_token_stride = 3 * H * d, a->k_head_stride = 0;
    a->v_token_stride = d, a->v_head_stride = T * d;
    a->cache_token_stride = a->cache_head_stride = 0;
    a->cache_page_stride = S * H * d + 8;
    a->num_pages = scree__cdiv(T, S) + 2;
  } else {
    a->k_head_stride = a->v_head_stride = 0;
    a->cache_page_stride = a->cache_token_stride = a->cache_head_stride = 0;
    if (!((const scree_kv_append_args *)args)->num_pages)
      a->num_pages = scree__cdiv(T + T / 4 + 1, S);
    if ((a->k_token_stride && a->k_token_stride < H * d) ||
        (a->v_token_stride && a->v_token_stride < H * d)) {
      scree__set_why(why, why_size,
                     "k_token_stride=%lld, v_token_stride=%lld: each 0 or at least heads_kv * "
                     "head_dim = %lld",
                     (long long)a->k_token_stride, (long long)a->v_token_stride,
                     (long long)(H * d));
      return -1;
    }
  }
  const int64_t cap = a->num_pages * S;
  if (cap < T) {
    scree__set_why(why, why_size, "num_pages=%lld of %lld slots hold fewer than total_new=%lld",
                   (long long)a->num_pages, (long long)S, (long long)T);
    return -1;
  }
  if (T * H > 0x7fffffffLL || cap > ((int64_t)1 << 31)) {
    scree__set_why(why, why_size, "%lld tokens of %lld heads, %lld slots: too large a problem",
                   (long long)T, (long long)H, (long long)cap);
    return -1;
  }
  const strides s = strides_of(a);
  /* The slots: a seeded shuffle of the cache's, the first T taken. */
  int64_t *perm = malloc((size_t)cap * sizeof *perm);
  int64_t *slots = malloc((size_t)(T > 0 ? T : 1) * sizeof *slots);
  if (!perm || !slots) {
    free(perm), free(slots);
    scree__set_why(why, why_size, "out of memory");
    return -1;
  }
  uint64_t r = seed ^ 0x2545f4914f6cdd1dull;
  if (!r) r = 1;
  for (int64_t i = 0; i < cap; i++) perm[i] = i;
  for (int64_t i = cap - 1; i > 0; i--) {
    const int64_t j = (int64_t)(scree__rand(&r) % (uint64_t)(i + 1));
    const int64_t x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  if (check && T >= 3) /* the first and the last slot written, by tokens 0 and 1 */
    for (int at = 0; at < 2; at++)
      for (int64_t i = at; i < cap; i++)
        if (perm[i] == (at ? cap - 1 : 0)) {
          const int64_t x = perm[at];
          perm[at] = perm[i], perm[i] = x;
          break;
        }
  int64_t skipped = 0;
  for (int64_t t = 0; t < T; t++) {
    const int pad = check ? t % 7 == 4 : t % 64 == 63;
    slots[t] = pad ? -1 : perm[t];
    skipped += pad;
  }
  free(perm);
  a->k = a->v = a->k_cache = a->v_cache = a->slot_mapping = PRESENT;
  const size_t k_count = (size_t)((T - 1) * s.kt + (H - 1) * s.kh + d);
  const size_t v_count = (size_t)((T - 1) * s.vt + (H - 1) * s.vh + d);
  const size_t c_count = (size_t)((a->num_pages - 1) * s.cp + (S - 1) * s.ct + (H - 1) * s.ch + d);
  scree__buf *b;
  scree__problem_buf(p, "k", SCREE__BUF_IN, a->dtype, k_count, offsetof(scree_kv_append_args, k));
  scree__problem_buf(p, "v", SCREE__BUF_IN, a->dtype, v_count, offsetof(scree_kv_append_args, v));
  /* A copy: the caches must match bit for bit. */
  b = scree__problem_buf(p, "k_cache", SCREE__BUF_INOUT, a->dtype, c_count,
                         offsetof(scree_kv_append_args, k_cache));
  b->rtol = b->atol = 0;
  b = scree__problem_buf(p, "v_cache", SCREE__BUF_INOUT, a->dtype, c_count,
                         offsetof(scree_kv_append_args, v_cache));
  b->rtol = b->atol = 0;
  b = scree__problem_buf(p, "slot_mapping", SCREE__BUF_HOST_IN, SCREE__DTYPE_I64, (size_t)T,
                         offsetof(scree_kv_append_args, slot_mapping));
  b->host = slots;
  /* k and v read once, the live tokens' rows written once, the slots read. */
  const double row = (double)H * (double)d * (double)scree_dtype_size(a->dtype);
  p->bytes = 2.0 * row * (double)T + 2.0 * row * (double)(T - skipped) + 8.0 * (double)T;
  snprintf(p->desc, sizeof p->desc,
           "%lld tokens (%lld padding), %lld kv heads of %lld, %lld pages of %lld, k strides "
           "(%lld, %lld), v strides (%lld, %lld), page stride %lld",
           (long long)T, (long long)skipped, (long long)H, (long long)d, (long long)a->num_pages,
           (long long)S, (long long)s.kt, (long long)s.kh, (long long)s.vt, (long long)s.vh,
           (long long)s.cp);
  return 0;
}

/* ---- the CPU reference (a plain copy) -------------------------------------- */

/* host: k, v, k_cache, v_cache, slot_mapping: the problem's buffer order
 * (the schema's); the caches are written in place. Element by element,
 * token by token, with the slot split by division. */
SCREE__REFERENCE(kv_append) {
  const scree_kv_append_args *a = args;
  const char *k = host[0], *v = host[1];
  char *kc = host[2], *vc = host[3];
  const int64_t *slots = host[4];
  const int64_t H = a->heads_kv, d = a->head_dim, S = a->page_size;
  const size_t es = scree_dtype_size(a->dtype);
  const int64_t kt = a->k_token_stride ? a->k_token_stride : H * d;
  const int64_t kh = a->k_head_stride ? a->k_head_stride : d;
  const int64_t vt = a->v_token_stride ? a->v_token_stride : H * d;
  const int64_t vh = a->v_head_stride ? a->v_head_stride : d;
  const int64_t ct = a->cache_token_stride ? a->cache_token_stride : H * d;
  const int64_t ch = a->cache_head_stride ? a->cache_head_stride : d;
  const int64_t cp = a->cache_page_stride ? a->cache_page_stride : S * ct;
  for (int64_t t = 0; t < a->total_new; t++) {
    const int64_t slot = slots[t];
    if (slot < 0) continue; /* -1: padding */
    const int64_t page = slot / S, off = slot % S;
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < d; i++) {
        const int64_t at = page * cp + off * ct + h * ch + i;
        memcpy(kc + (size_t)at * es, k + (size_t)(t * kt + h * kh + i) * es, es);
        memcpy(vc + (size_t)at * es, v + (size_t)(t * vt + h * vh + i) * es, es);
      }
  }
}

/* ---- benchmark entries ------------------------------------------------------
 * LLaMA-3-8B (8 kv heads of 128): a prefill of 16384 tokens in pages of 16,
 * dense and as views of the fused qkv projection (token stride 6144 = 32 +
 * 8 + 8 heads of 128); a decode step of 256 sequences; pages of 1 (no
 * paging). A model of 4 kv heads of 256 in pages of 64. */
static const char *const bench[] = {
    "dtype=bf16 total_new=16384,page_size=16,heads_kv=8,head_dim=128",
    "dtype=fp16 total_new=16384,page_size=16,heads_kv=8,head_dim=128,k_token_stride=6144,"
    "v_token_stride=6144",
    "dtype=bf16 total_new=256,num_pages=16384,page_size=16,heads_kv=8,head_dim=128",
    "dtype=fp16 total_new=16384,page_size=1,heads_kv=8,head_dim=128",
    "dtype=bf16 total_new=16384,page_size=64,heads_kv=4,head_dim=256",
    NULL,
};

static const scree__impl impls[] = {
    {SCREE__IMPL("generic", "kv_append.cu", 80, 0, "scree_kv_append"), .nfields = F_N,
     .fields = fields, .check = check, .adapt = adapt, .worth_timing = worth_timing,
     .launch = launch},
};

SCREE__DEFINE_OP(kv_append, .validate = validate, .validate_buffers = validate_buffers,
                 .adapt_class = adapt_class);
