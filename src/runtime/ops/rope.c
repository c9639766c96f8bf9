/* rope.c - rotary position embedding, the host side: its arguments
 * (strided and packed q/k, positions, cu_seqlens, cos/sin table), config
 * space and constraints, the launch, buckets, problems, the CPU reference
 * and the benchmark entries. The kernel is kernels/rope.cu. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

#define MAX_HEAD_DIM 1024
#define MAX_HEADS 65535
#define DEFAULT_THETA 10000.0f

/* This file is RoPE's host side, and, compiled again by rope_backward.c
 * with SCREE__ROPE_OP rope_backward and SCREE__ROPE_INVERSE 1, that of
 * its backward: the same arguments (scree_rope_backward_args has
 * scree_rope_args' members, in order), checks, config space, problems and
 * kernel, with the inverse rotation (the kernel's SCREE_INVERSE, the
 * reference's negated sine). */
#ifndef SCREE__ROPE_OP
#define SCREE__ROPE_OP rope
#define SCREE__ROPE_INVERSE 0
#endif
/* Expands the op name before the macros paste it. */
#define SCREE__ROPE_DEFINE(op, ...) SCREE__DEFINE_OP(op, __VA_ARGS__)
#define SCREE__ROPE_REFERENCE(op) SCREE__REFERENCE(op)

#define SCREE__ARGS_T scree_rope_args

/* The arguments (include/scree.h), field by field. q and k are rotated in
 * place and may share a buffer as disjoint ranges or interleaved (packed
 * qkv); the op checks their strides, the parts of them that are touched
 * (the first rotary_dim of each head) and what the kernel reads beside
 * them itself (validate_buffers), as it checks cu_seqlens, which is needed
 * only without positions. Out of place, q_out and k_out take the rotated
 * whole head rows, and the op checks them too (how they may meet q, k and
 * each other). */
static const scree__arg schema[] = {
    SCREE__INOUT(q, .dtype = SCREE__AT(dtype),
                 .dims = {SCREE__AT(total), SCREE__AT(heads_q), SCREE__AT(head_dim)},
                 .strides = {SCREE__AT(q_token_stride), SCREE__AT(q_head_stride)},
                 .flags = SCREE__ANY_ORDER | SCREE__OWN_RANGE),
    SCREE__INOUT(k, .dtype = SCREE__AT(dtype),
                 .dims = {SCREE__AT(total), SCREE__AT(heads_kv), SCREE__AT(head_dim)},
                 .strides = {SCREE__AT(k_token_stride), SCREE__AT(k_head_stride)},
                 .flags = SCREE__OPTIONAL | SCREE__ANY_ORDER | SCREE__OWN_RANGE),
    SCREE__IN(positions, .elem = SCREE__E_I32, .wide = SCREE__AT(positions_int64),
              .dims = {SCREE__AT(total)}, .flags = SCREE__OPTIONAL | SCREE__OWN_RANGE),
    SCREE__IN(cu_seqlens, .elem = SCREE__E_I32, .dims = {SCREE__AT(batch)},
              .flags = SCREE__PLUS_ONE | SCREE__OWN_POINTER),
    SCREE__IN(cos_sin, .elem = SCREE__E_F32,
              .dims = {SCREE__AT(max_position), SCREE__AT(rotary_dim)},
              .flags = SCREE__OPTIONAL | SCREE__OWN_RANGE),
    SCREE__DIM(total, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(batch, .flags = SCREE__SHAPE),
    SCREE__DIM(max_position, .flags = SCREE__SHAPE),
    SCREE__DIM(heads_q, SCREE__RANGE(1, MAX_HEADS), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__DIM(heads_kv, .flags = SCREE__SHAPE),
    SCREE__DIM(head_dim, SCREE__RANGE(2, MAX_HEAD_DIM), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__DIM(rotary_dim, .flags = SCREE__SHAPE),
    SCREE__STRIDE(q_token_stride, SCREE__MIN(0)), SCREE__STRIDE(q_head_stride, SCREE__MIN(0)),
    SCREE__STRIDE(k_token_stride, SCREE__MIN(0)), SCREE__STRIDE(k_head_stride, SCREE__MIN(0)),
    SCREE__DTYPE(dtype),
    SCREE__INT(layout, SCREE__RANGE(0, 1), .hint = "(SCREE_ROPE_NEOX or SCREE_ROPE_GPTJ)"),
    SCREE__INT(positions_int64, SCREE__RANGE(0, 1)),
    SCREE__FLOAT(theta, .flags = SCREE__FINITE | SCREE__NONNEG, .hint = "(0 means 10000)"),
    SCREE__OUT(q_out, .dtype = SCREE__AT(dtype),
               .dims = {SCREE__AT(total), SCREE__AT(heads_q), SCREE__AT(head_dim)},
               .strides = {SCREE__AT(q_out_token_stride), SCREE__AT(q_out_head_stride)},
               .flags = SCREE__OPTIONAL | SCREE__ANY_ORDER | SCREE__OWN_RANGE),
    SCREE__OUT(k_out, .dtype = SCREE__AT(dtype),
               .dims = {SCREE__AT(total), SCREE__AT(heads_kv), SCREE__AT(head_dim)},
               .strides = {SCREE__AT(k_out_token_stride), SCREE__AT(k_out_head_stride)},
               .flags = SCREE__OPTIONAL | SCREE__ANY_ORDER | SCREE__OWN_RANGE),
    SCREE__STRIDE(q_out_token_stride, SCREE__MIN(0)),
    SCREE__STRIDE(q_out_head_stride, SCREE__MIN(0)),
    SCREE__STRIDE(k_out_token_stride, SCREE__MIN(0)),
    SCREE__STRIDE(k_out_head_stride, SCREE__MIN(0)),
};

enum { F_LANES, F_GROUPS, F_VEC, F_CACHE, F_SPLIT, F_N };
enum { V_DTYPE, V_LAYOUT, V_TABLE, V_POS };
enum { POS_CU = 0, POS_I32 = 1, POS_I64 = 2 };

static const scree__field fields[F_N] = {
    {"lanes", "SCREE_LANES", 5, {4, 8, 16, 32, 64}},
    {"groups", "SCREE_GROUPS", 6, {1, 2, 4, 8, 16, 32}},
    {"vec", "SCREE_VEC", 4, {1, 2, 4, 8}},
    {"cache", "SCREE_CACHE", 5, {1, 2, 4, 8, 16}},
    {"split", "SCREE_SPLIT", 4, {1, 2, 4, 8}},
};
static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dtype)},
    /* validate_buffers fills these */
    {"layout", "SCREE_LAYOUT", 0, SCREE_ROPE_NEOX, 2, {SCREE_ROPE_NEOX, SCREE_ROPE_GPTJ}, 0},
    {"table", "SCREE_TABLE", 0, 0, 2, {0, 1}, 0},
    {"pos", "SCREE_POS", 0, POS_CU, 3, {POS_CU, POS_I32, POS_I64}, 0},
};

static int is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

/* Pairs a thread rotates per block: a NeoX block is one vector of each
 * half, a GPT-J block one vector of interleaved pairs (two scalars at
 * vec=1). */
static int pairs_per_block(int vec, int layout) {
  return layout == SCREE_ROPE_NEOX ? vec : vec > 1 ? vec / 2 : 1;
}

/* Registers per thread, estimated as SCREE_EST_REGS of kernels/rope.cu
 * (ptxas on sm_90 stays within it). */
static int est_regs(int cache, int pb, int dtype) {
  return 32 + cache * 2 * pb * (dtype == SCREE_DTYPE_FP32 ? 2 : 1) / 2 + 2 * pb + 2 * cache;
}

/* Mirrors the static_asserts of kernels/rope.cu. */
static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  (void)t; /* 2 KiB of static shared memory at most */
  const int lanes = c->v[F_LANES], groups = c->v[F_GROUPS], vec = c->v[F_VEC],
            cache = c->v[F_CACHE], split = c->v[F_SPLIT];
  if (var->v[V_DTYPE] < 0 || var->v[V_DTYPE] > 2 || (var->v[V_LAYOUT] & ~1) ||
      (var->v[V_TABLE] & ~1) || var->v[V_POS] < 0 || var->v[V_POS] > 2) {
    scree__set_why(why, n, "variant codes: dtype 0..2, layout 0..1, table 0..1, pos 0..2");
    return 0;
  }
  if (!is_pow2(lanes) || lanes < 4 || lanes > 64) {
    scree__set_why(why, n, "lanes=%d must be a power of two in [4, 64]", lanes);
    return 0;
  }
  if (!is_pow2(groups) || groups > 32) {
    scree__set_why(why, n, "groups=%d must be a power of two in [1, 32]", groups);
    return 0;
  }
  /* At 1024 threads ptxas gives sincosf's argument reduction 32 registers
   * and spills (sm_90); 512 are enough for a memory-bound kernel. */
  if (lanes * groups < 32 || lanes * groups > 512) {
    scree__set_why(why, n, "lanes*groups=%d must be in [32, 512]", lanes * groups);
    return 0;
  }
  if (vec != 1 && vec != 2 && vec != 4 && vec != 8) {
    scree__set_why(why, n, "vec=%d must be 1, 2, 4 or 8", vec);
    return 0;
  }
  if (cache < 1 || cache > 16) {
    scree__set_why(why, n, "cache=%d must be in [1, 16]", cache);
    return 0;
  }
  if (split != 1 && split != 2 && split != 4 && split != 8) {
    scree__set_why(why, n, "split=%d must be 1, 2, 4 or 8", split);
    return 0;
  }
  const int pb = pairs_per_block(vec, var->v[V_LAYOUT]), epb = 2 * pb;
  if (cache * epb > 64) {
    scree__set_why(why, n, "cache=%d head rows of %d elements exceed 64 elements of registers",
                   cache, epb);
    return 0;
  }
  const int regs = est_regs(cache, pb, var->v[V_DTYPE]);
  if (lanes * groups * regs > 65536) {
    scree__set_why(why, n,
                   "lanes*groups=%d threads of about %d registers exceed the 64K register file",
                   lanes * groups, regs);
    return 0;
  }
  return 1;
}

/* The call's strides with every "0 means" resolved: q's, k's, q_out's
 * and k_out's. */
typedef struct strides {
  int64_t qt, qh, kt, kh, oqt, oqh, okt, okh;
} strides;

static strides strides_of(const scree_rope_args *a) {
  strides s;
  s.qh = a->q_head_stride ? a->q_head_stride : a->head_dim;
  s.qt = a->q_token_stride ? a->q_token_stride : a->heads_q * a->head_dim;
  s.kh = a->k_head_stride ? a->k_head_stride : a->head_dim;
  s.kt = a->k_token_stride ? a->k_token_stride : a->heads_kv * a->head_dim;
  s.oqh = a->q_out_head_stride ? a->q_out_head_stride : a->head_dim;
  s.oqt = a->q_out_token_stride ? a->q_out_token_stride : a->heads_q * a->head_dim;
  s.okh = a->k_out_head_stride ? a->k_out_head_stride : a->head_dim;
  s.okt = a->k_out_token_stride ? a->k_out_token_stride : a->heads_kv * a->head_dim;
  return s;
}

static int64_t rotary_of(const scree_rope_args *a) {
  return a->rotary_dim ? a->rotary_dim : a->head_dim;
}

/* log2 of the widest vector (elements, at most 8) the call allows: q and k
 * and every stride aligned to it, and a pair block dividing the rotary
 * half (NeoX: the second half's vectors start at R = rotary_dim / 2;
 * GPT-J: a block of vec / 2 pairs). Trailing zero bits, no division. */
static int vec_log2(const scree__variant *var, const scree_rope_args *a) {
  const size_t es = scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  const strides s = strides_of(a);
  const int64_t rd = rotary_of(a);
  int l = 3;
  l = scree__vlog2_ptr(l, a->q, es);
  l = scree__vlog2_ptr(l, a->k, es);
  l = scree__vlog2_stride(l, s.qt);
  l = scree__vlog2_stride(l, s.qh);
  if (a->k) {
    l = scree__vlog2_stride(l, s.kt);
    l = scree__vlog2_stride(l, s.kh);
  }
  if (a->q_out) { /* out of place: the outputs too (0 pointers align to all) */
    l = scree__vlog2_ptr(l, a->q_out, es);
    l = scree__vlog2_ptr(l, a->k_out, es);
    l = scree__vlog2_stride(l, s.oqt);
    l = scree__vlog2_stride(l, s.oqh);
    if (a->k_out) {
      l = scree__vlog2_stride(l, s.okt);
      l = scree__vlog2_stride(l, s.okh);
    }
  }
  return scree__vlog2_stride(l, var->v[V_LAYOUT] == SCREE_ROPE_NEOX ? rd / 2 : rd);
}

/* Narrows vec to what the call allows; cache doubles with it while the
 * registers allow, so as many bytes stay in flight. */
static void narrow(scree__config *c, const scree__variant *var, int widest_log2) {
  while (c->v[F_VEC] > (1 << widest_log2)) {
    c->v[F_VEC] /= 2;
    const int epb = 2 * pairs_per_block(c->v[F_VEC], var->v[V_LAYOUT]);
    if (c->v[F_CACHE] < 16 && 2 * c->v[F_CACHE] * epb <= 64) c->v[F_CACHE] *= 2;
  }
}

/* Hand-picked default, the same on sm_80 and sm_90 until measurements say
 * otherwise: 16-byte accesses; enough lanes that one pass covers the
 * rotary half; 128 threads per CTA; about 128 bytes of head rows in flight
 * per thread; a token's heads shared by several groups when there are few
 * tokens (by the bucket's power of two, so one plan fits the bucket). */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  (void)t;
  const scree_rope_args *a = args;
  memset(out, 0, sizeof *out);
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  const int vec = 16 / es;
  const int pb = pairs_per_block(vec, var->v[V_LAYOUT]);
  const int64_t half = a ? rotary_of(a) / 2 : 64;
  const int lanes = scree__clampi((int)scree__pow2_ceil((half + pb - 1) / pb), 4, 64);
  int cache = 128 / (2 * pb * es);
  cache = scree__clampi(cache, 1, 64 / (2 * pb));
  int split = 1;
  if (a) {
    const int64_t tokens = scree__pow2_ceil(a->total);
    split = tokens >= 4096 ? 1 : tokens >= 1024 ? 2 : tokens >= 256 ? 4 : 8;
    const int64_t heads = a->heads_q + (a->heads_kv > 0 ? a->heads_kv : 0);
    while (split > 1 && split > heads) split /= 2;
  }
  out->v[F_LANES] = lanes;
  out->v[F_GROUPS] = scree__clampi(128 / lanes, 1, 32);
  out->v[F_VEC] = vec;
  out->v[F_CACHE] = cache;
  out->v[F_SPLIT] = split;
}

static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  narrow(c, var, vec_log2(var, args));
}

static int adapt_class(const scree__variant *var, const void *args) {
  return vec_log2(var, args);
}

/* Worth timing: the widest vector the call allows (16 bytes at most; a
 * narrower one only adds instructions), unless the call is small (at most
 * SMALL_HEAD_ROWS head rows: there more threads on fewer bytes each win,
 * measured with bench_ops --regret on an H200: 512 tokens of 32+8 heads
 * of 128, 6.3 us at 2-element vectors against 7.3 at the widest); lanes
 * that have pairs to rotate
 * (lanes * pairs per block at most the rotary half rounded up, or the
 * fewest lanes); no more splits than heads; cache slots that mostly have a
 * head row to hold. */
#define SMALL_HEAD_ROWS ((int64_t)1 << 16)
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  const scree_rope_args *a = args;
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  int widest = 16 / es;
  const int allowed = 1 << vec_log2(var, a);
  if (allowed < widest) widest = allowed;
  const int pb = pairs_per_block(c->v[F_VEC], var->v[V_LAYOUT]);
  const int64_t half = rotary_of(a) / 2;
  const int64_t heads = a->heads_q + (a->heads_kv > 0 ? a->heads_kv : 0);
  const int64_t per_item = (heads + c->v[F_SPLIT] - 1) / c->v[F_SPLIT];
  const int small = a->total * heads <= SMALL_HEAD_ROWS;
  return (c->v[F_VEC] == widest || (small && c->v[F_VEC] < widest)) &&
         (c->v[F_LANES] == 4 || (int64_t)c->v[F_LANES] * pb <= scree__pow2_ceil(half)) &&
         (c->v[F_SPLIT] == 1 || c->v[F_SPLIT] <= heads) &&
         c->v[F_CACHE] <= scree__pow2_ceil(per_item);
}

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  (void)var;
  const scree_rope_args *a = args;
  const strides s = strides_of(a);
  uint64_t q = a->q, kp = a->k, pos = a->positions, cu = a->positions ? 0 : a->cu_seqlens,
           tab = a->cos_sin;
  long long total = a->total, qt = s.qt, qh = s.qh, kt = a->k ? s.kt : 0, kh = a->k ? s.kh : 0;
  int batch = a->positions ? 0 : (int)a->batch, heads_q = (int)a->heads_q;
  int heads = (int)(a->heads_q + (a->k ? a->heads_kv : 0)), rd = (int)rotary_of(a);
  float theta = a->theta != 0.f ? a->theta : DEFAULT_THETA;
  /* In place, the outputs are the inputs (the first entry, scree_rope). */
  uint64_t qo = a->q_out ? a->q_out : a->q, ko = a->q_out ? a->k_out : a->k;
  long long oqt = a->q_out ? s.oqt : qt, oqh = a->q_out ? s.oqh : qh;
  long long okt = a->k_out ? s.okt : kt, okh = a->k_out ? s.okh : kh;
  int head_dim = (int)a->head_dim;
  const int64_t per_cta = c->v[F_GROUPS];
  int64_t grid = (total * c->v[F_SPLIT] + per_cta - 1) / per_cta;
  if (grid > 0x7fffffffLL) grid = 0x7fffffffLL; /* the kernel strides */
  if (grid < 1) grid = 1;
  void *params[] = {&q,  &kp, &pos, &cu, &tab, &total, &batch, &heads_q, &heads, &rd,
                    &qt, &qh, &kt, &kh, &theta, &qo, &ko, &oqt, &oqh, &okt, &okh, &head_dim};
  /* In place (both outputs their inputs, or none given): the first entry,
   * which takes the parameters before qo; else the second. */
  const int out = qo != q || ko != kp;
  const CUresult r = ctx->cu->LaunchKernel(k->fn[out], (unsigned)grid, 1, 1,
                                           (unsigned)(c->v[F_LANES] * c->v[F_GROUPS]), 1, 1, 0,
                                           stream, params, NULL);
  if (r != CUDA_SUCCESS) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(rope)");
  return SCREE_OK;
}

/* ---- the op's own argument rules ---------------------------------------- */

/* floor(x / p) and ceil(x / p) for p > 0. */
static int64_t floor_div(int64_t x, int64_t p) {
  int64_t q = x / p;
  if (x % p && x < 0) q--;
  return q;
}
static int64_t ceil_div(int64_t x, int64_t p) { return -floor_div(-x, p); }

/* Checks one [tokens, heads, head_dim] tensor's strides (positive; no two
 * head rows share an element, in either order of the dimensions) and
 * fills the byte range of its rotary parts. */
static scree_status check_tensor(scree_context *ctx, const char *name, uint64_t p, int64_t tokens,
                                 int64_t heads, int64_t d, int64_t rd, int64_t ts, int64_t hs,
                                 size_t es, uint64_t *lo, uint64_t *hi) {
  /* Dimensions sorted by stride: each must clear the reach of those below
   * it (a dimension of extent 1 has no stride to speak of). */
  int64_t st[2] = {hs, ts}, ex[2] = {heads, tokens};
  if (st[0] > st[1]) {
    int64_t t = st[0];
    st[0] = st[1], st[1] = t;
    t = ex[0], ex[0] = ex[1], ex[1] = t;
  }
  __int128 reach = d;
  for (int i = 0; i < 2; i++) {
    if (ex[i] <= 1) continue;
    if (st[i] < reach)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "%s strides (token %lld, head %lld) overlap: two head rows of %s share "
                         "an element",
                         name, (long long)ts, (long long)hs, name);
    reach += (__int128)st[i] * (ex[i] - 1);
  }
  const __int128 last =
      ((__int128)(tokens - 1) * ts + (__int128)(heads - 1) * hs + rd) * (__int128)es;
  if (last > (__int128)(UINT64_MAX - p)) return scree__fail_wrap(ctx, name, p);
  *lo = p;
  *hi = p + (uint64_t)last;
  return SCREE_OK;
}

/* Whether token shifts m in [-(T - 1), T - 1] and heads h < hq, h' < hk
 * satisfy m P = x0 + h' - h: slot t P + h of q is then slot x0 + t' P + h'
 * of k. */
static int slots_meet(int64_t x0, int64_t hq, int64_t hk, int64_t P, int64_t T) {
  int64_t kmin = ceil_div(x0 - (hq - 1), P), kmax = floor_div(x0 + (hk - 1), P);
  if (kmin < -(T - 1)) kmin = -(T - 1);
  if (kmax > T - 1) kmax = T - 1;
  return kmin <= kmax;
}

/* One [total, heads, head_dim] tensor of the call: its pointer, resolved
 * token and head strides, and the byte range of the parts written or read
 * (check_tensor). */
typedef struct tens {
  uint64_t p;
  int64_t ts, hs;
  uint64_t lo, hi;
} tens;

/* 1 if an element of k's first rd of each head row may also be one of
 * q's (it would be rotated twice, or written twice out of place). Exact
 * where q and k interleave as in a packed qkv buffer ([T, Hq + 2 Hkv, d],
 * [T, 3, H, d], [T, H, 3, d], ...): one token stride S and one head stride
 * hs dividing it, so that head rows sit in slots of hs elements, P = S /
 * hs per token. q's parts cover [0, rd) of its slots; k, at D = D' hs +
 * delta elements from q, covers [delta, delta + rd) of its slots, spilling
 * into the next slot when delta + rd > hs. Other layouts whose byte ranges
 * overlap are refused. q and k are the inputs (rd the rotary parts) or
 * the outputs out of place (rd head_dim: whole rows). */
static int qk_meet(const scree_rope_args *a, const tens *q, const tens *k, int64_t rd) {
  if (!scree__overlaps(q->lo, q->hi, k->lo, k->hi)) return 0;
  const int64_t T = a->total, hq = a->heads_q, hk = a->heads_kv;
  const int64_t es = (int64_t)scree_dtype_size(a->dtype);
  int64_t hs;
  if (hq > 1 && hk > 1) {
    if (q->hs != k->hs) return 1;
    hs = q->hs;
  } else if (hq > 1) {
    hs = q->hs;
  } else if (hk > 1) {
    hs = k->hs;
  } else {
    if (T == 1) return 1; /* one row each, and their ranges overlap */
    hs = q->ts;           /* a slot per token */
  }
  int64_t P = 1;
  if (T > 1) {
    if (q->ts != k->ts || q->ts % hs) return 1;
    P = q->ts / hs;
  }
  if (hs < rd) return 1;
  const int64_t diff = (int64_t)(k->p - q->p);
  if (diff % es) return 1;
  const int64_t D = diff / es, Dp = floor_div(D, hs), delta = D - Dp * hs;
  return (delta < rd && slots_meet(Dp, hq, hk, P, T)) ||
         (delta + rd > hs && slots_meet(Dp + 1, hq, hk, P, T));
}

/* With validation on: cu_seqlens or positions copied to the host and
 * checked (a sequence's positions, or each position, below max_position
 * when a table is read). */
static scree_status check_device_args(scree_context *ctx, const scree_rope_args *a,
                                      CUstream stream) {
  const int64_t n = a->positions ? a->total : a->batch + 1;
  const size_t esz = a->positions && a->positions_int64 ? 8 : 4;
  void *h = malloc((size_t)n * esz);
  if (!h)
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "validate: %s copy",
                       a->positions ? "positions" : "cu_seqlens");
  scree_status st =
      scree__read_device(ctx, stream, h, a->positions ? a->positions : a->cu_seqlens,
                         (size_t)n * esz, a->positions ? "positions" : "cu_seqlens");
  if (!st && a->positions) {
    for (int64_t t = 0; t < n && a->cos_sin && !st; t++) {
      const int64_t p = esz == 8 ? ((const int64_t *)h)[t] : ((const int32_t *)h)[t];
      if (p < 0 || p >= a->max_position)
        st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "positions[%lld]=%lld is outside [0, max_position=%lld) of cos_sin",
                         (long long)t, (long long)p, (long long)a->max_position);
    }
  } else if (!st) {
    const int32_t *c = h;
    if (c[0] != 0)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens[0]=%d must be 0", c[0]);
    for (int64_t b = 0; b + 1 < n && !st; b++) {
      const int64_t len = (int64_t)c[b + 1] - c[b];
      if (len < 0)
        st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "cu_seqlens decreases at %lld (%d then %d)", (long long)b, c[b], c[b + 1]);
      else if (a->cos_sin && len > a->max_position)
        st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "sequence %lld has %lld tokens: positions reach %lld, past "
                         "max_position=%lld of cos_sin",
                         (long long)b, (long long)len, (long long)(len - 1),
                         (long long)a->max_position);
    }
    if (!st && c[n - 1] != a->total)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "cu_seqlens[batch]=%d differs from total=%lld", c[n - 1],
                       (long long)a->total);
  }
  free(h);
  return st;
}

/* Sizes the schema cannot state: head_dim even, rotary_dim (0 means
 * head_dim), heads_kv when k is given, batch when positions come from
 * cu_seqlens, max_position with a table. */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_rope_args *a = args;
  if (a->head_dim % 2)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "head_dim=%lld must be even and >= 2",
                       (long long)a->head_dim);
  const int64_t rd = rotary_of(a);
  if (rd < 2 || rd % 2 || rd > a->head_dim)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "rotary_dim=%lld must be even and in [2, head_dim=%lld] (0 means head_dim)",
                       (long long)a->rotary_dim, (long long)a->head_dim);
  if (a->k && a->heads_kv < 1)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "heads_kv=%lld must be at least 1 (k is given)", (long long)a->heads_kv);
  if (a->k && a->heads_kv > MAX_HEADS)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "heads_kv=%lld exceeds the supported maximum %d", (long long)a->heads_kv,
                       MAX_HEADS);
  if (!a->positions) {
    if (a->batch < 0 || a->batch > 0x7ffffffe)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "batch=%lld must be in [0, 2^31 - 1) (cu_seqlens are int32)",
                         (long long)a->batch);
    if (a->batch == 0 && a->total > 0)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "batch is 0 but total=%lld tokens are present (positions is NULL, so "
                         "positions come from cu_seqlens)",
                         (long long)a->total);
  }
  if (a->cos_sin && (a->max_position < 1 || a->max_position > ((int64_t)1 << 40)))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "max_position=%lld must be in [1, 2^40] with cos_sin",
                       (long long)a->max_position);
  return SCREE_OK;
}

/* The positions' source, q and k (strides, the parts of them rotated, and
 * how they may share memory), what the kernel reads beside them, and the
 * device-side arguments with validation on; the variant. */
static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  const scree_rope_args *a = args;
  scree_status st;
  if (!a->positions) {
    if (!a->cu_seqlens)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "positions and cu_seqlens are both NULL: one gives the positions");
    if ((st = scree__arg_ptr(ctx, "cu_seqlens", a->cu_seqlens, 4))) return st;
  }
  const strides s = strides_of(a);
  const int64_t rd = rotary_of(a), d = a->head_dim;
  const size_t es = scree_dtype_size(a->dtype);
  /* Out of place: q_out, with k_out exactly when there is a k; an output
   * that is its input (same address and strides) keeps that one in place. */
  if (a->k_out && !a->k)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "k_out=0x%llx is given but k is NULL: there is no k to rotate",
                       (unsigned long long)a->k_out);
  if (a->k_out && !a->q_out)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "k_out=0x%llx is given without q_out: out of place needs both (q_out = q "
                       "with q's strides keeps q in place)",
                       (unsigned long long)a->k_out);
  if (a->q_out && a->k && !a->k_out)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "k_out is missing (0) while q_out and k are given: out of place writes "
                       "both (k_out = k with k's strides keeps k in place)");
  tens q = {a->q, s.qt, s.qh, 0, 0}, k = {a->k, s.kt, s.kh, 0, 0};
  tens qo = {a->q_out, s.oqt, s.oqh, 0, 0}, ko = {a->k_out, s.okt, s.okh, 0, 0};
  const struct {
    const char *name, *in;
    const tens *o, *i;
  } outs[2] = {{"q_out", "q", &qo, &q}, {"k_out", "k", &ko, &k}};
  int in_place[2] = {1, 1};
  for (int j = 0; j < 2; j++) {
    const tens *o = outs[j].o, *i = outs[j].i;
    if (!o->p) continue;
    in_place[j] = o->p == i->p && o->ts == i->ts && o->hs == i->hs;
    if (o->p == i->p && !in_place[j])
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "%s=0x%llx is %s's address with other strides (token %lld, head %lld; "
                         "%s's %lld, %lld): an output is its input exactly (in place) or apart "
                         "from it",
                         outs[j].name, (unsigned long long)o->p, outs[j].in, (long long)o->ts,
                         (long long)o->hs, outs[j].in, (long long)i->ts, (long long)i->hs);
  }
  /* In place, the rotary parts are read and written; out of place (either
   * output not its input), q and k are read whole, an output written whole. */
  const int oop = !in_place[0] || !in_place[1];
  const int64_t span = oop ? d : rd;
  if ((st = check_tensor(ctx, "q", a->q, a->total, a->heads_q, d, span, s.qt, s.qh, es, &q.lo,
                         &q.hi)))
    return st;
  if (a->k && (st = check_tensor(ctx, "k", a->k, a->total, a->heads_kv, d, span, s.kt, s.kh, es,
                                 &k.lo, &k.hi)))
    return st;
  if (!in_place[0] && (st = check_tensor(ctx, "q_out", a->q_out, a->total, a->heads_q, d, d,
                                         s.oqt, s.oqh, es, &qo.lo, &qo.hi)))
    return st;
  if (!in_place[1] && (st = check_tensor(ctx, "k_out", a->k_out, a->total, a->heads_kv, d, d,
                                         s.okt, s.okh, es, &ko.lo, &ko.hi)))
    return st;
  if (!oop) {
    if (a->k && qk_meet(a, &q, &k, rd))
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "q=0x%llx and k=0x%llx overlap: an element would be rotated twice (q "
                         "and k may share a buffer only as disjoint ranges or interleaved with "
                         "equal token and head strides, as in a packed qkv buffer)",
                         (unsigned long long)a->q, (unsigned long long)a->k);
  } else {
    /* q and k are only read unless one of them stays in place. */
    if (a->k && in_place[0] != in_place[1] && scree__overlaps(q.lo, q.hi, k.lo, k.hi))
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "q=0x%llx and k=0x%llx overlap while %s is rotated in place and %s out "
                         "of place: one would be written where the other is read",
                         (unsigned long long)a->q, (unsigned long long)a->k,
                         in_place[0] ? "q" : "k", in_place[0] ? "k" : "q");
    if (a->k && !in_place[0] && !in_place[1] && qk_meet(a, &qo, &ko, d))
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "q_out=0x%llx and k_out=0x%llx overlap: an element would be written "
                         "twice (they may share a buffer only as disjoint ranges or interleaved "
                         "with equal token and head strides, as in a packed qkv buffer)",
                         (unsigned long long)a->q_out, (unsigned long long)a->k_out);
    for (int j = 0; j < 2; j++) {
      if (in_place[j]) continue;
      const tens *o = outs[j].o;
      for (int i = 0; i < 2; i++) {
        if (!outs[i].i->p) continue;
        if (scree__overlaps(o->lo, o->hi, outs[i].i->lo, outs[i].i->hi))
          return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                             "%s=0x%llx overlaps %s=0x%llx: an output must be its input exactly "
                             "(in place) or apart from q and k",
                             outs[j].name, (unsigned long long)o->p, outs[i].in,
                             (unsigned long long)outs[i].i->p);
      }
    }
  }
  /* What the kernel reads besides q and k must not be written by it. */
  const struct {
    const char *name;
    uint64_t p;
    __int128 bytes;
  } reads[] = {
      {"positions", a->positions, (__int128)a->total * (a->positions_int64 ? 8 : 4)},
      {"cu_seqlens", a->positions ? 0 : a->cu_seqlens, (__int128)(a->batch + 1) * 4},
      {"cos_sin", a->cos_sin, (__int128)a->max_position * rd * 4},
  };
  /* The tensors written: q and k in place, the outputs out of place. */
  const tens *written[2] = {in_place[0] ? &q : &qo, in_place[1] ? &k : &ko};
  for (int i = 0; i < 3; i++) {
    if (!reads[i].p) continue;
    if (reads[i].bytes > (__int128)(UINT64_MAX - reads[i].p))
      return scree__fail_wrap(ctx, reads[i].name, reads[i].p);
    const uint64_t lo = reads[i].p, hi = reads[i].p + (uint64_t)reads[i].bytes;
    for (int j = 0; j < 2; j++) {
      const tens *w = written[j];
      if (w->p && scree__overlaps(lo, hi, w->lo, w->hi))
        return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=0x%llx overlaps %s",
                           reads[i].name, (unsigned long long)reads[i].p,
                           in_place[j] ? outs[j].in : outs[j].name);
    }
  }
  if (ctx->validate && ctx->cu && (st = check_device_args(ctx, a, stream))) return st;
  var->v[V_LAYOUT] = a->layout;
  var->v[V_TABLE] = a->cos_sin != 0;
  var->v[V_POS] = !a->positions ? POS_CU : a->positions_int64 ? POS_I64 : POS_I32;
  return SCREE_OK;
}

/* ---- buckets and problems --------------------------------------------------- */

/* Bucket: tokens rounded up to a power of two; the head counts and sizes
 * exact. heads_kv is taken as given (a shape has no pointers to tell a
 * q-only call by), negative as 0: a q-only call that passes heads_kv 0
 * gets the q-only bucket. dtype, layout, table and the positions' source
 * are the variant. total depends on the batch: batch-invariant mode tunes
 * RoPE (not its backward, which the mode does not cover) on 4096 tokens. */
static const scree__bdim dims[] = {{"total", 1, 0, SCREE__ROPE_INVERSE ? 0 : 4096},
                                   {"heads_q", 0, 0, 0}, {"heads_kv", 0, 0, 0},
                                   {"head_dim", 0, 0, 0}, {"rotary_dim", 0, 0, 0}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_rope_args *a = args;
  d[0] = a->total;
  d[1] = a->heads_q;
  d[2] = a->heads_kv > 0 ? a->heads_kv : 0;
  d[3] = a->head_dim;
  d[4] = rotary_of(a);
}

/* Tuned on the bucket's largest token count, capped at 256 MiB of q and k. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree_rope_args *a = args;
  memset(a, 0, sizeof *a);
  a->heads_q = b->v[1];
  a->heads_kv = b->v[2];
  a->head_dim = b->v[3];
  a->rotary_dim = b->v[4];
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  a->layout = (scree_rope_layout)var->v[V_LAYOUT];
  a->positions_int64 = var->v[V_POS] == POS_I64;
  const int64_t row = (a->heads_q + a->heads_kv) * a->head_dim *
                      (int64_t)scree_dtype_size(a->dtype);
  int64_t total = b->v[0];
  const int64_t cap = ((int64_t)256 << 20) / (row > 0 ? row : 1);
  if (total > cap) total = cap > 0 ? cap : 1;
  a->total = total;
  (void)check; /* the problem hook sizes check problems itself */
}

/* Marks a pointer field whose buffer the problem has: run_bind replaces it
 * with the device pointer, and the reference reads which buffers there are
 * from the args as the public entry does. */
#define PRESENT ((scree_devptr)0x1000)
#define MAX_SEQS 65536
#define DEFAULT_MAX_POSITION 8192

/* The check batch: lengths 0 and 1, empty sequences between others, one
 * just off every vector multiple; fewer when a token is large, so the CPU
 * reference stays quick. */
static const int64_t check_lens[] = {0, 1, 7, 2, 63, 64, 65, 0, 33, 129, 5, 200};

/* Positions the check problem starts with: on the fly, angles past the
 * fast range of sincosf's argument reduction and up to where float(p)
 * rounds; with a table, its first and last rows. */
static const int64_t check_positions[] = {0,      1,       2,       4095,     8191,
                                          65535,  105614,  105616,  131071,   1 << 20,
                                          16777215, 16777217, 2147483647};

/* fp32 angle of pair i at position p, as the kernel computes it. */
static float angle_f32(int64_t p, int64_t i, int64_t rd, float theta) {
  const float e = (float)(2 * i) / (float)rd;
  const float inv = 1.0f / (float)pow((double)theta, (double)e);
  return (float)p * inv;
}

static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  scree_rope_args *a = (scree_rope_args *)p->args;
  memcpy(a, args, sizeof *a);
  /* Problems rotate in place (the out-of-place path's tests are direct
   * calls: tests/runtime/ops/test_rope_gpu.c). */
  a->q_out = a->k_out = 0;
  a->q_out_token_stride = a->q_out_head_stride = a->k_out_token_stride = a->k_out_head_stride = 0;
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  a->layout = (scree_rope_layout)var->v[V_LAYOUT];
  const int table = var->v[V_TABLE], pos = var->v[V_POS];
  a->positions_int64 = pos == POS_I64;
  if (!a->rotary_dim) a->rotary_dim = a->head_dim;
  if (a->theta == 0.f) a->theta = DEFAULT_THETA;
  const int64_t d = a->head_dim, rd = a->rotary_dim, hq = a->heads_q, hk = a->heads_kv;
  if (hq < 1 || hq > MAX_HEADS || hk < 0 || hk > MAX_HEADS || d < 2 || d % 2 ||
      d > MAX_HEAD_DIM || rd < 2 || rd % 2 || rd > d) {
    scree__set_why(why, why_size,
                   "heads_q=%lld, heads_kv=%lld, head_dim=%lld, rotary_dim=%lld: need heads_q in "
                   "[1, 65535], heads_kv in [0, 65535], head_dim even in [2, 1024], rotary_dim "
                   "even in [2, head_dim]",
                   (long long)hq, (long long)hk, (long long)d, (long long)rd);
    return -1;
  }
  if (!isfinite(a->theta) || a->theta < 0) {
    scree__set_why(why, why_size, "theta=%g", (double)a->theta);
    return -1;
  }
  int64_t maxp = a->max_position > 0 ? a->max_position : DEFAULT_MAX_POSITION;
  /* A check problem keeps the CPU reference around a second at most. */
  const int64_t per_token = (hq + hk) * rd;
  const int64_t check_tokens = per_token > 16384 ? 64 : 301;
  int64_t *len = NULL;
  int n = 0;
  if (pos == POS_CU || lens) {
    len = malloc(MAX_SEQS * sizeof *len);
    if (!len) {
      scree__set_why(why, why_size, "out of memory");
      return -1;
    }
    if (lens) {
      n = lens->n < MAX_SEQS ? lens->n : MAX_SEQS;
      for (int i = 0; i < n; i++) len[i] = lens->q[i] > 0 ? lens->q[i] : 0;
    } else if (check) {
      n = per_token > 16384 ? 7 : (int)(sizeof check_lens / sizeof check_lens[0]);
      for (int i = 0; i < n; i++) len[i] = check_lens[i];
    } else {
      /* Lengths log-uniform in [L / 8, L], L = min(total, 4096), until the
       * shape's tokens: a realistic prefill batch. Deterministic per seed. */
      const int64_t target = a->total > 0 ? a->total : 1;
      const int64_t L = target < 4096 ? target : 4096;
      uint64_t r = seed | 1;
      int64_t sum = 0;
      while (sum < target && n < MAX_SEQS) {
        int64_t l = scree__rand_len(&r, L);
        if (l > target - sum) l = target - sum;
        len[n++] = l;
        sum += l;
      }
    }
  }
  int64_t total = 0, longest = 0;
  for (int i = 0; i < n; i++) {
    total += len[i];
    if (len[i] > longest) longest = len[i];
  }
  if (!len) total = check ? check_tokens : a->total;
  if (total < 1 || total > 0x7fffffff) {
    free(len);
    scree__set_why(why, why_size, "total=%lld tokens: need 1 .. 2^31 - 1", (long long)total);
    return -1;
  }
  if (table && longest > maxp) maxp = longest;
  a->total = total;
  a->batch = pos == POS_CU ? n : 0;
  a->max_position = table ? maxp : 0;
  /* Check problems pad every head row and token (by multiples of 8
   * elements, keeping the call's alignment class), so strides are used as
   * given and the padding is seen untouched. */
  if (check && !a->q_token_stride && !a->q_head_stride && !a->k_token_stride &&
      !a->k_head_stride) {
    a->q_head_stride = a->k_head_stride = d + 8;
    a->q_token_stride = hq * (d + 8) + 64;
    a->k_token_stride = hk * (d + 8) + 64;
  }
  const strides s = strides_of(a);
  if (s.qt < 1 || s.qh < 1 || (hk && (s.kt < 1 || s.kh < 1))) {
    free(len);
    scree__set_why(why, why_size, "strides must be positive");
    return -1;
  }
  a->q = PRESENT;
  a->k = hk ? PRESENT : 0;
  a->positions = pos != POS_CU ? PRESENT : 0;
  a->cu_seqlens = pos == POS_CU ? PRESENT : 0;
  a->cos_sin = table ? PRESENT : 0;
  /* q and k rotate in place: one rounding of the dtype apart from the
   * double reference, plus fp32 arithmetic on inputs of order 1 and cos
   * and sin within 2 ulp (sincosf of the same fp32 angle), which fp32
   * outputs see: atol 4e-6 there. */
  scree__buf *b = scree__problem_buf(p, "q", SCREE__BUF_INOUT, a->dtype,
                                     (size_t)((total - 1) * s.qt + (hq - 1) * s.qh + d),
                                     offsetof(scree_rope_args, q));
  if (a->dtype == SCREE_DTYPE_FP32) b->atol = 4e-6;
  if (hk) {
    b = scree__problem_buf(p, "k", SCREE__BUF_INOUT, a->dtype,
                           (size_t)((total - 1) * s.kt + (hk - 1) * s.kh + d),
                           offsetof(scree_rope_args, k));
    if (a->dtype == SCREE_DTYPE_FP32) b->atol = 4e-6;
  }
  double aux_bytes;
  if (pos == POS_CU) {
    int32_t *cu = malloc((size_t)(n + 1) * sizeof *cu);
    if (!cu) {
      free(len);
      scree__set_why(why, why_size, "out of memory");
      return -1;
    }
    cu[0] = 0;
    for (int i = 0; i < n; i++) cu[i + 1] = cu[i] + (int32_t)len[i];
    b = scree__problem_buf(p, "cu_seqlens", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32, (size_t)n + 1,
                           offsetof(scree_rope_args, cu_seqlens));
    b->host = cu;
    aux_bytes = 4.0 * (n + 1);
  } else {
    /* int64 positions travel as pairs of int32 elements: the same bytes. */
    const int words = pos == POS_I64 ? 2 : 1;
    void *h = malloc((size_t)total * (size_t)words * 4);
    if (!h) {
      free(len);
      scree__set_why(why, why_size, "out of memory");
      return -1;
    }
    uint64_t r = seed ^ 0x9e3779b97f4a7c15ull;
    int64_t t = 0;
    if (len) { /* lengths given: positions restart at 0 per sequence */
      for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < len[i]; j++, t++) {
          if (words == 2) ((int64_t *)h)[t] = j;
          else ((int32_t *)h)[t] = (int32_t)j;
        }
    } else {
      const int nedge = (int)(sizeof check_positions / sizeof check_positions[0]);
      for (; t < total; t++) {
        int64_t v;
        if (check && !table && t < nedge)
          v = check_positions[t];
        else if (check && table && t < 2)
          v = t == 0 ? 0 : maxp - 1;
        else if (check)
          v = (int64_t)(scree__rand(&r) % (uint64_t)maxp);
        else
          v = t % (maxp < 4096 ? maxp : 4096); /* sequences of 4096 back to back */
        if (words == 2) ((int64_t *)h)[t] = v;
        else ((int32_t *)h)[t] = (int32_t)v;
      }
      if (check && !table && words == 2 && total > nedge)
        ((int64_t *)h)[nedge] = (int64_t)1 << 40;
    }
    b = scree__problem_buf(p, "positions", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32,
                           (size_t)total * (size_t)words, offsetof(scree_rope_args, positions));
    b->host = h;
    aux_bytes = (double)total * 4.0 * words;
  }
  if (table) {
    float *cs = malloc((size_t)(maxp * rd) * sizeof *cs);
    if (!cs) {
      free(len);
      scree__set_why(why, why_size, "out of memory");
      return -1;
    }
    const int64_t half = rd / 2;
    for (int64_t q = 0; q < maxp; q++)
      for (int64_t i = 0; i < half; i++) {
        const double ang = angle_f32(q, i, rd, a->theta);
        cs[q * rd + i] = (float)cos(ang);
        cs[q * rd + half + i] = (float)sin(ang);
      }
    b = scree__problem_buf(p, "cos_sin", SCREE__BUF_HOST_IN, SCREE_DTYPE_FP32,
                           (size_t)(maxp * rd), offsetof(scree_rope_args, cos_sin));
    b->host = cs;
    aux_bytes += (double)total * (double)rd * 4; /* a row per token */
  }
  /* The rotary parts of q and k read and written once, what gives the
   * positions, and the table rows. */
  p->bytes = 2.0 * (double)total * (double)(hq + hk) * (double)rd *
                 (double)scree_dtype_size(a->dtype) +
             aux_bytes;
  snprintf(p->desc, sizeof p->desc,
           "%lld tokens (%s), %lld+%lld heads of %lld, rotary %lld, %s, %s",
           (long long)total,
           pos == POS_CU ? "positions from cu_seqlens" : pos == POS_I32 ? "int32 positions"
                                                                       : "int64 positions",
           (long long)hq, (long long)hk, (long long)d, (long long)rd,
           a->layout == SCREE_ROPE_NEOX ? "NeoX" : "GPT-J",
           table ? "cos/sin table" : "cos/sin on the fly");
  if (pos == POS_CU) {
    char *e = p->desc + strlen(p->desc);
    snprintf(e, sizeof p->desc - (size_t)(e - p->desc), ", %d sequences up to %lld", n,
             (long long)longest);
  }
  free(len);
  return 0;
}

/* ---- the CPU reference (double arithmetic on the fp32 angle) ------------ */

/* host: q, k (when args->k is set), positions (when args->positions is
 * set) or cu_seqlens, cos_sin (when args->cos_sin is set): the problem's
 * buffer order (problem, above); q and k are rotated in place. Only which
 * pointers are nonzero is read from args, as the public entry reads them.
 *
 * The angle is modelled as the kernel and HuggingFace compute it in fp32:
 * inv_freq = 1 / theta^(2i / rotary_dim) rounded to float, then the float
 * product float(p) * inv_freq; its cos and sin are taken in double. */
SCREE__ROPE_REFERENCE(SCREE__ROPE_OP) {
  const scree_rope_args *a = args;
  int n = 0;
  void *q = host[n++];
  void *k = a->k ? host[n++] : NULL;
  const void *positions = a->positions ? host[n++] : NULL;
  const int32_t *cu = a->positions ? NULL : host[n++];
  const float *cos_sin = a->cos_sin ? host[n++] : NULL;
  const int64_t d = a->head_dim, rd = a->rotary_dim ? a->rotary_dim : d, half = rd / 2;
  const float theta = a->theta != 0.f ? a->theta : 10000.0f;
  const int64_t qh = a->q_head_stride ? a->q_head_stride : d;
  const int64_t qt = a->q_token_stride ? a->q_token_stride : a->heads_q * d;
  const int64_t kh = a->k_head_stride ? a->k_head_stride : d;
  const int64_t kt = a->k_token_stride ? a->k_token_stride : a->heads_kv * d;
  float *inv = malloc((size_t)(half > 0 ? half : 1) * sizeof *inv);
  if (!inv) return;
  for (int64_t i = 0; i < half; i++) {
    const float e = (float)(2 * i) / (float)rd;
    inv[i] = 1.0f / (float)pow((double)theta, (double)e);
  }
  int64_t seq = 0;
  for (int64_t t = 0; t < a->total; t++) {
    int64_t p;
    if (positions) {
      p = a->positions_int64 ? ((const int64_t *)positions)[t] : ((const int32_t *)positions)[t];
    } else {
      while (seq < a->batch && cu[seq + 1] <= t) seq++; /* past empty sequences too */
      p = t - cu[seq];
    }
    for (int64_t i = 0; i < half; i++) {
      double c, s;
      if (cos_sin) {
        c = cos_sin[p * rd + i];
        s = cos_sin[p * rd + half + i];
      } else {
        const float ang = (float)p * inv[i];
        c = cos((double)ang);
        s = sin((double)ang);
      }
      if (SCREE__ROPE_INVERSE) s = -s; /* the transpose: dx = R(-a) dy */
      const int64_t i1 = a->layout == SCREE_ROPE_NEOX ? i : 2 * i;
      const int64_t i2 = a->layout == SCREE_ROPE_NEOX ? i + half : 2 * i + 1;
      for (int64_t h = 0; h < a->heads_q + (k ? a->heads_kv : 0); h++) {
        void *x = h < a->heads_q ? q : k;
        const int64_t row = h < a->heads_q ? t * qt + h * qh : t * kt + (h - a->heads_q) * kh;
        const double x1 = scree__load_elem(x, a->dtype, (size_t)(row + i1));
        const double x2 = scree__load_elem(x, a->dtype, (size_t)(row + i2));
        scree__store_elem(x, a->dtype, (size_t)(row + i1), x1 * c - x2 * s);
        scree__store_elem(x, a->dtype, (size_t)(row + i2), x2 * c + x1 * s);
      }
    }
  }
  free(inv);
}

/* ---- benchmark entries ----------------------------------------------------
 * LLaMA-3-8B prefill (32 q and 8 kv heads of 128, NeoX, positions from
 * cu_seqlens) on a batch of 20 sequences, 16384 tokens; GPT-J-6B (16 heads
 * of 256, rotary 64, interleaved) with a cos/sin table and int64
 * positions, sequences of 2048; and LLaMA-3-8B on 65536 tokens (lengths
 * 512..4096). */

#define LENS_20 \
  "lens=2048,1536,1200,1024,980,900,886,840,771,700,618,550,501,468,402,389,340,319,1136,776"
static const char *const bench[] = {
    "dtype=fp16,layout=0,table=0,pos=0 total=16384,heads_q=32,heads_kv=8,head_dim=128 " LENS_20,
    "dtype=bf16,layout=0,table=0,pos=0 total=16384,heads_q=32,heads_kv=8,head_dim=128 " LENS_20,
    "dtype=fp16,layout=1,table=1,pos=2 total=16384,max_position=2048,heads_q=16,heads_kv=16,"
    "head_dim=256,rotary_dim=64",
    "dtype=fp16,layout=0,table=0,pos=0 total=65536,heads_q=32,heads_kv=8,head_dim=128",
    NULL,
};

static const scree__impl impls[] = {
    {SCREE__IMPL("generic", "rope.cu", 80, 0, "scree_rope", "scree_rope_out"), .nfields = F_N, .fields = fields,
     .check = check, .adapt = adapt, .worth_timing = worth_timing, .launch = launch,
     .defines = SCREE__ROPE_INVERSE ? "SCREE_INVERSE=1" : NULL},
};

SCREE__ROPE_DEFINE(SCREE__ROPE_OP, .validate = validate, .validate_buffers = validate_buffers,
                   .bucket = bucket, .adapt_class = adapt_class);
