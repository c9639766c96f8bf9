/* paged_attention.c - attention over a paged KV cache, the host side: its
 * arguments, config space and constraints, the launch (plan kernel and
 * main kernel), buckets, the problems it is tuned and checked on, the CPU
 * reference and the benchmark entries. The kernels are
 * kernels/paged_attention.cu (impl "split") and kernels/attention_hopper.cu
 * compiled with SCREE_PAGED=1 (impl "hopper", sm_90a, for prefill);
 * docs/kernels/paged-attention.md describes the algorithms and the choices. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_hopper.h"
#include "ops/op.h"

#define SCREE__ARGS_T scree_paged_attention_args
/* A [tokens, heads, head_dim] tensor t of the dtype, with its two strides. */
#define TENSOR(t, tokens, heads)                                                           \
  .dtype = SCREE__AT(dtype), .align = 16,                                                  \
  .dims = {SCREE__AT(tokens), SCREE__AT(heads), SCREE__AT(head_dim)},                      \
  .strides = {SCREE__AT(t##_token_stride), SCREE__AT(t##_head_stride)},                    \
  .flags = SCREE__ANY_ORDER, .stride_multiple = 8
/* A cache: [num_pages, page_size, heads_kv, head_dim], four dimensions, one
 * more than the schema's tensors have: the schema names the outer three and
 * checks the pointer; check_cache (below) checks the strides, the extent and
 * the overlaps. */
#define CACHE                                                                              \
  .dtype = SCREE__AT(dtype), .align = 16,                                                  \
  .dims = {SCREE__AT(num_pages), SCREE__AT(page_size), SCREE__AT(heads_kv)},               \
  .flags = SCREE__OWN_RANGE

#define MAX_PAGE 256

static const scree__arg schema[] = {
    SCREE__IN(q, TENSOR(q, total_q, heads_q)),
    SCREE__OUT(out, TENSOR(out, total_q, heads_q)),
    SCREE__OUT(lse, .elem = SCREE__E_F32, .dims = {SCREE__AT(heads_q), SCREE__AT(total_q)},
               .flags = SCREE__OPTIONAL),
    SCREE__IN(k_cache, CACHE),
    SCREE__IN(v_cache, CACHE),
    SCREE__IN(block_table, .elem = SCREE__E_I32,
              .dims = {SCREE__AT(batch), SCREE__AT(block_table_stride)}),
    SCREE__IN(seqlens_k, .elem = SCREE__E_I32, .dims = {SCREE__AT(batch)}),
    SCREE__IN(cu_seqlens_q, .elem = SCREE__E_I32, .dims = {SCREE__AT(batch)},
              .flags = SCREE__PLUS_ONE),
    SCREE__DIM(batch, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(total_q, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__EMPTY),
    SCREE__DIM(max_seqlen_q, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE),
    SCREE__DIM(max_seqlen_k, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE),
    SCREE__DIM(num_pages, SCREE__RANGE(1, 0x7fffffff)),
    SCREE__DIM(page_size, SCREE__RANGE(1, MAX_PAGE), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__DIM(block_table_stride, SCREE__RANGE(1, 0x7fffffff)),
    SCREE__DIM(heads_q, SCREE__RANGE(1, 65535), .flags = SCREE__SHAPE),
    SCREE__DIM(heads_kv, SCREE__MIN(1), .flags = SCREE__SHAPE),
    SCREE__DIM(head_dim, .flags = SCREE__SHAPE), /* one of a variant field's values */
    SCREE__STRIDE(q_token_stride), SCREE__STRIDE(q_head_stride),
    SCREE__STRIDE(out_token_stride), SCREE__STRIDE(out_head_stride),
    SCREE__STRIDE(cache_page_stride, SCREE__MIN(0)), SCREE__STRIDE(cache_token_stride, SCREE__MIN(0)),
    SCREE__STRIDE(cache_head_stride, SCREE__MIN(0)),
    SCREE__DTYPE(dtype),
    SCREE__INT(causal),
    SCREE__FLOAT(scale, .flags = SCREE__FINITE), /* 0 means 1 / sqrt(head_dim) */
    /* Shape fields: a window changes the work of a call (window 0 is one
     * key a query), so a shape (a recorded miss, prewarm --shape, a bench
     * entry) carries it; -1 unbounded. */
    SCREE__INT(window_left, SCREE__MIN(-1), .flags = SCREE__SHAPE, .hint = "(-1: unbounded)"),
    SCREE__INT(window_right, SCREE__MIN(-1), .flags = SCREE__SHAPE, .hint = "(-1: unbounded)"),
    SCREE__FLOAT(softcap, .flags = SCREE__FINITE | SCREE__NONNEG, .hint = "(0: none)"),
};

enum { F_BM, F_BN, F_WARPS, F_STAGES, F_SPLIT, F_N };
enum { V_DTYPE, V_D };
enum { IMPL_SPLIT, IMPL_HOPPER }; /* impls[], below */

static const scree__field fields[F_N] = {
    {"bm", "SCREE_BM", 4, {16, 32, 64, 128}},
    {"bn", "SCREE_BN", 3, {32, 64, 128}},
    {"warps", "SCREE_WARPS", 2, {4, 8}},
    {"stages", "SCREE_STAGES", 3, {2, 3, 4}},
    {"split", "SCREE_SPLIT", 5, {0, 1, 2, 4, 8}},
};
static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_BF16, 2, {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16},
     SCREE__AT(dtype)},
    {"head_dim", "SCREE_HEAD_DIM", 0, 128, 5, {32, 64, 96, 128, 256}, SCREE__AT(head_dim)},
};

/* The warp layout of a config (kernels/paged_attention.cu): row warps,
 * m16 tiles per row warp, key warps, keys per warp and tile. */
typedef struct layout {
  int rw, mt, kw, kn;
} layout;

static layout layout_of(const scree__config *c) {
  layout l;
  const int bm = c->v[F_BM], warps = c->v[F_WARPS];
  l.rw = bm / 16 < warps ? bm / 16 : warps;
  if (l.rw < 1) l.rw = 1;
  l.mt = bm / 16 / l.rw;
  l.kw = warps / l.rw;
  l.kn = l.kw ? c->v[F_BN] / l.kw : 0;
  return l;
}

static size_t smem(const scree__config *c, const scree__variant *var) {
  const size_t d = (size_t)var->v[V_D], bm = (size_t)c->v[F_BM];
  const layout l = layout_of(c);
  const size_t q = bm * d * 2;
  const size_t kv = 2 * (size_t)c->v[F_STAGES] * (size_t)c->v[F_BN] * d * 2;
  const size_t scratch = (size_t)c->v[F_WARPS] * 16 * (size_t)l.mt * (d + 2) * 4;
  const size_t plan = (6 + 4 * 32 * (size_t)c->v[F_WARPS]) * 4; /* a self-made plan */
  return q + (kv > scratch ? kv : scratch) + plan;
}

static int threads(const scree__config *c) { return 32 * c->v[F_WARPS]; }

/* Mirrors the static_asserts of kernels/paged_attention.cu. */
static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  const int bm = c->v[F_BM], bn = c->v[F_BN], warps = c->v[F_WARPS], stages = c->v[F_STAGES],
            split = c->v[F_SPLIT], d = var->v[V_D];
  if (var->v[V_DTYPE] != SCREE_DTYPE_FP16 && var->v[V_DTYPE] != SCREE_DTYPE_BF16) {
    scree__set_why(why, n, "dtype code %d is not fp16 or bf16", var->v[V_DTYPE]);
    return 0;
  }
  if (d != 32 && d != 64 && d != 96 && d != 128 && d != 256) {
    scree__set_why(why, n, "head_dim=%d is not 32, 64, 96, 128 or 256", d);
    return 0;
  }
  if ((bm != 16 && bm != 32 && bm != 64 && bm != 128) || (bn != 32 && bn != 64 && bn != 128) ||
      (warps != 4 && warps != 8) || stages < 2 || stages > 4 ||
      (split != 0 && split != 1 && split != 2 && split != 4 && split != 8)) {
    scree__set_why(why, n, "bm=%d, bn=%d, warps=%d, stages=%d, split=%d: bm is 16, 32, 64 or "
                   "128, bn 32, 64 or 128, warps 4 or 8, stages 2..4, split 0, 1, 2, 4 or 8",
                   bm, bn, warps, stages, split);
    return 0;
  }
  const layout l = layout_of(c);
  if (l.mt != 1 && l.mt != 2) {
    scree__set_why(why, n, "bm=%d on %d warps gives %d m16 row tiles a warp (1 or 2)", bm, warps,
                   l.mt);
    return 0;
  }
  if (l.kn % 16) {
    scree__set_why(why, n, "bn=%d over %d key warps gives %d keys a warp, not a multiple of 16",
                   bn, l.kw, l.kn);
    return 0;
  }
  const int regs = l.mt * (d / 2 + l.kn / 2);
  if (regs > 160) {
    scree__set_why(why, n, "%d row tiles x (head_dim=%d + %d keys) a warp need about %d "
                   "accumulator registers a thread (at most 160)", l.mt, d, l.kn, regs);
    return 0;
  }
  return scree__check_smem(smem(c, var), t, why, n);
}

/* Rows of one sequence and KV head: query tokens x the GQA group. */
static int64_t seq_rows(const scree_paged_attention_args *a) {
  const int64_t group = a->heads_kv ? a->heads_q / a->heads_kv : 1;
  return (a->max_seqlen_q > 0 ? a->max_seqlen_q : 1) * (group > 0 ? group : 1);
}

typedef struct strides {
  int64_t qt, qh, ot, oh, cp, ct, ch;
} strides;

static strides strides_of(const scree_paged_attention_args *a) {
  const int64_t d = a->head_dim;
  strides s;
  s.qt = a->q_token_stride ? a->q_token_stride : a->heads_q * d;
  s.qh = a->q_head_stride ? a->q_head_stride : d;
  s.ot = a->out_token_stride ? a->out_token_stride : a->heads_q * d;
  s.oh = a->out_head_stride ? a->out_head_stride : d;
  s.ch = a->cache_head_stride ? a->cache_head_stride : d;
  s.ct = a->cache_token_stride ? a->cache_token_stride : a->heads_kv * d;
  s.cp = a->cache_page_stride ? a->cache_page_stride : a->page_size * s.ct;
  return s;
}

/* The split implementation's default (docs/kernels/paged-attention.md):
 * the smallest row tile that holds a sequence's rows (16 for a decode step
 * of up to 16 query heads a KV head), 4 warps (with 16 rows, 4 key warps of
 * 16 keys a tile), 64-key tiles, three stages (two at head_dim 256: shared
 * memory), and splits aimed at one item per SM slot (measured on an H200,
 * the split values with the rest as here on nine decode buckets: split=1
 * the fastest on four and within 7% of the fastest on the others, split=2
 * up to 1.7x slower on one or a few sequences: b1-k32k-q4 104 us against
 * 62). */
static void split_default(const scree__variant *var, const void *args, scree__config *out) {
  memset(out, 0, sizeof *out);
  const int64_t rows = args ? seq_rows(args) : 16;
  out->v[F_BM] = rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
  out->v[F_BN] = 64;
  out->v[F_WARPS] = 4;
  out->v[F_STAGES] = var->v[V_D] == 256 ? 2 : 3;
  out->v[F_SPLIT] = 1;
  /* One sequence: 128-key tiles in two stages (the same shared memory).
   * Measured on an H200 (sweeps of the split space, bf16, d=128, GQA 32:8,
   * pages of 16): within 1.5% of the best config on all eight one-sequence
   * buckets of 1k-128k keys and 1 or 4 queries, where 64-key tiles in three
   * stages were 1-31% slower; with 8 or more sequences the 64-key tiles
   * win (128-key ones 5-26% slower). */
  if (args && ((const scree_paged_attention_args *)args)->batch == 1 && var->v[V_D] <= 128) {
    out->v[F_BN] = 128;
    out->v[F_STAGES] = 2;
  }
}

/* Whether the hopper implementation can run a call: pages of 8 tokens or
 * more (a chunk of a key tile is a page, or BN keys of one, and must be a
 * multiple of 8 rows: the copy engine's 128-byte swizzle repeats every
 * 1024 bytes), and cache strides the copy engine's tensor maps take (below
 * 2^40 bytes; the schema's 8-element multiples and 16-byte aligned
 * pointers give the rest of what TMA needs). */
static int64_t mul_sat(int64_t x, int64_t y) {
  int64_t r;
  return __builtin_mul_overflow(x, y, &r) ? INT64_MAX : r;
}
static int hopper_serves(const scree_paged_attention_args *a) {
  if (a->page_size < 8) return 0;
  /* strides_of's, saturating: extreme shapes (a bucket's representative)
   * must not overflow, and this runs on every call (adapt_class). */
  const int64_t lim = (int64_t)1 << 39, d = a->head_dim; /* elements of 2 bytes */
  const int64_t ct = a->cache_token_stride ? a->cache_token_stride : mul_sat(a->heads_kv, d);
  const int64_t cp = a->cache_page_stride ? a->cache_page_stride : mul_sat(a->page_size, ct);
  const int64_t ch = a->cache_head_stride ? a->cache_head_stride : d;
  const int64_t qt = a->q_token_stride ? a->q_token_stride : mul_sat(a->heads_q, d);
  const int64_t qh = a->q_head_stride ? a->q_head_stride : d;
  return cp < lim && ct < lim && ch < lim && qt < lim && qh < lim;
}

/* Prefill-like calls on sm_90 take the hopper implementation: head_dim 64
 * or 128, pages of 8 or more, and a longest query sequence of more than 64
 * tokens (its bucket, the power of two above, 128 or more: one q tile of
 * the hopper default's 128 rows, which hold one query head's tokens; the
 * split kernel packs the GQA group into its rows instead, so short query
 * sequences, decode above all, stay with it). With attention.c's hopper
 * default for the head_dim. Else the split default. */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  const scree_paged_attention_args *a = args;
  const int d = var->v[V_D];
  if (a && t->sm == 90 && t->tensor_maps && (d == 64 || d == 128) && hopper_serves(a) &&
      scree__pow2_ceil(a->max_seqlen_q) >= 128) {
    memset(out, 0, sizeof *out);
    out->impl = IMPL_HOPPER;
    scree__hopper_default(d, out);
    if (scree__hopper_check(out, var->v[V_DTYPE], d, 1, t, NULL, 0)) return;
  }
  split_default(var, args, out);
  if (!check(out, var, t, NULL, 0)) out->v[F_STAGES] = 2;
}

/* A row tile far larger than a sequence's rows only adds empty MMA rows. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const int64_t rows = seq_rows(args);
  return c->v[F_BM] <= 16 || c->v[F_BM] <= 2 * scree__pow2_ceil(rows);
}

/* ---- the launch ------------------------------------------------------------ */

/* The kernels' softcap factors: s -> cap_out tanh(cap_in s), cap_in =
 * scale / softcap (0: none), cap_out = softcap / scale. A subnormal softcap
 * would make cap_in inf (and a score of 0 a NaN): clamped to FLT_MAX. */
static void cap_factors(const scree_paged_attention_args *a, double scale, float *cap_in,
                        float *cap_out) {
  const double cin = a->softcap > 0.f ? scale / (double)a->softcap : 0.0;
  *cap_in = fabs(cin) < FLT_MAX ? (float)cin : (float)copysign(FLT_MAX, cin);
  *cap_out = a->softcap > 0.f ? (float)((double)a->softcap / scale) : 0.f;
}

static int log2i(int64_t v) {
  int l = 0;
  while (((int64_t)1 << l) < v) l++;
  return l;
}

/* Upper bound of the row tiles of the batch (sequence, BM rows). */
static int64_t tile_cap(const scree_paged_attention_args *a, int bm) {
  const int64_t group = a->heads_q / a->heads_kv;
  const int64_t by_len = a->batch * scree__cdiv(a->max_seqlen_q * group, bm);
  const int64_t by_rows = scree__cdiv(a->total_q * group, bm) + a->batch;
  return by_len < by_rows ? by_len : by_rows;
}

/* The plan's ints (kernel: p_count), and where the partials start. */
static int64_t plan_ints(const scree_paged_attention_args *a, int64_t groups) {
  return 6 + 4 * a->batch + groups;
}

/* Batch-invariant mode (docs/cache.md#batch-invariant-mode): the split
 * field names a fixed chunk of keys instead of items per SM slot, so that
 * a sequence's split count, and so the order of its merge, comes from its
 * own key count alone. 0: no chunk (one item per sequence). */
int64_t scree__paged_invariant_chunk(int split) { return split > 0 ? 4096 / split : 0; }

/* The items a batch-invariant launch needs at most: each group's keys
 * (at most max_seqlen_k, which bounds every seqlens_k) in chunks, at
 * least one item a group. INT64_MAX past 2^62. */
int64_t scree__paged_invariant_items(int64_t groups, int64_t max_seqlen_k, int64_t chunk) {
  const int64_t per = chunk > 0 && max_seqlen_k > chunk ? scree__cdiv(max_seqlen_k, chunk) : 1;
  int64_t r;
  return __builtin_mul_overflow(groups, per, &r) ? INT64_MAX : r;
}

/* The split count of a sequence of span keys (from its first key tile to
 * its last visible key) in batch-invariant mode, as the plan kernel
 * (make_plan, kernels/paged_attention.cu) takes it: ceil(span / chunk), at
 * most 256, the chunks then evened out to a multiple of the key tile bn. */
int64_t scree__paged_invariant_splits(int64_t span, int64_t chunk, int bn) {
  if (span <= 0 || chunk <= 0) return 1;
  int64_t ns = scree__cdiv(span, chunk);
  if (ns > 256) ns = 256;
  const int64_t ch = scree__cdiv(scree__cdiv(span, ns), bn) * bn;
  return scree__cdiv(span, ch);
}

/* Merge counters of a self-planned launch at most (a 256 KiB zeroed
 * buffer a stream); more groups take the plan kernel. */
#define SELF_PLAN_GROUPS ((int64_t)1 << 16)

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  const scree_paged_attention_args *a = args;
  const strides s = strides_of(a);
  const int bm = c->v[F_BM], d = var->v[V_D];
  const int64_t groups = tile_cap(a, bm) * a->heads_kv;
  const int64_t slots = (int64_t)ctx->info.sm_count * (k->occupancy > 0 ? k->occupancy : 1);
  long long target = c->v[F_SPLIT] ? (long long)c->v[F_SPLIT] * slots : 0;
  int64_t bound = groups + target;
  if (ctx->batch_invariant && c->v[F_SPLIT]) {
    /* a fixed chunk (the kernel reads target = -chunk), not the SM count */
    const int64_t chunk = scree__paged_invariant_chunk(c->v[F_SPLIT]);
    target = -(long long)chunk;
    bound = scree__paged_invariant_items(groups, a->max_seqlen_k, chunk);
  }
  if (bound > 0x7fffffff)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "%lld work items exceed a grid of 2^31 CTAs", (long long)bound);
  const size_t pbytes = ((size_t)plan_ints(a, groups) * 4 + 255) & ~(size_t)255;
  const size_t part = c->v[F_SPLIT] ? (size_t)bound * (size_t)bm * (size_t)(d + 1) * 4 : 0;
  CUdeviceptr ws;
  scree_status st = scree__workspace(ctx, stream, pbytes + part, &ws);
  if (st) return st;
  uint64_t plan = ws, partp = ws + pbytes,
           plsep = partp + (uint64_t)bound * (uint64_t)bm * (uint64_t)d * 4;
  uint64_t q = a->q, kc = a->k_cache, vc = a->v_cache, o = a->out, lse = a->lse,
           bt = a->block_table, sk = a->seqlens_k, cu_q = a->cu_seqlens_q;
  long long qt = s.qt, qh = s.qh, ot = s.ot, oh = s.oh, cp = s.cp, ct = s.ct, ch = s.ch,
            bts = a->block_table_stride, total_q = a->total_q;
  int batch = (int)a->batch, heads_kv = (int)a->heads_kv, group = (int)(a->heads_q / a->heads_kv);
  int logp = log2i(a->page_size), causal = a->causal != 0;
  int wl = a->window_left < 0 || a->window_left > 0x7fffffff ? -1 : (int)a->window_left;
  int wr = a->window_right < 0 || a->window_right > 0x7fffffff ? -1 : (int)a->window_right;
  const double scale = a->scale != 0.f ? a->scale : 1.0 / sqrt((double)a->head_dim);
  float sl2 = (float)(scale * 1.4426950408889634);
  float cap_in, cap_out;
  cap_factors(a, scale, &cap_in, &cap_out);
  /* A batch the CTA's threads cover plans in the kernel (no second
   * launch); its merge counters then come from the stream's zeroed buffer. */
  int self_plan = batch <= threads(c) && groups <= SELF_PLAN_GROUPS;
  CUdeviceptr zeroed = 0;
  CUresult r;
  if (self_plan) {
    if ((st = scree__stream_zeroed(ctx, stream, (size_t)groups * 4, &zeroed))) return st;
  } else {
    void *pp[] = {&cu_q, &sk, &batch, &group, &heads_kv, &target, &causal, &wl, &wr, &plan};
    r = ctx->cu->LaunchKernel(k->fn[1], 1, 1, 1, 1024, 1, 1, 0, stream, pp, NULL);
    if (r)
      return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(paged attention plan)");
  }
  uint64_t zp = zeroed;
  void *params[] = {&q,   &kc,       &vc,     &o,       &lse,  &bt,     &sk,     &cu_q,
                    &qt,  &qh,       &ot,     &oh,      &cp,   &ct,     &ch,     &bts,
                    &total_q, &batch, &heads_kv, &group, &logp, &sl2, &cap_in, &cap_out,
                    &causal, &wl, &wr, &plan, &partp, &plsep, &target, &self_plan, &zp};
  r = ctx->cu->LaunchKernel(k->fn[0], (unsigned)(bound > 0 ? bound : 1), 1, 1,
                            (unsigned)threads(c), 1, 1, (unsigned)smem(c, var), stream, params,
                            NULL);
  if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(paged attention)");
  return SCREE_OK;
}

/* ---- the hopper implementation ---------------------------------------------
 * kernels/attention_hopper.cu with SCREE_PAGED=1: scree_attention's hopper
 * kernel (warpgroup MMAs, a producer warpgroup's copy engine loads, the
 * longest-first schedule of work items (sequence, q tile, query head)) with
 * K and V copied page by page through 4-d tensor maps. Its fields, check,
 * shared memory and default are scree_attention's (ops/attention_hopper.c).
 * Causal and the window are run-time: SCREE_CAUSAL=0 SCREE_WINDOW=1, the
 * causal flag passed as the window's right side 0 (the reference's
 * min(window_right, 0) with -1 unbounded, which is 0). */

static size_t hsmem(const scree__config *c, const scree__variant *var) {
  return scree__hopper_smem(c, var->v[V_D]);
}

static int hcheck(const scree__config *c, const scree__variant *var, const scree__target *t,
                  char *why, size_t n) {
  return scree__hopper_check(c, var->v[V_DTYPE], var->v[V_D], 1, t, why, n);
}

/* A call the hopper kernel cannot run (hopper_serves: pages of fewer than
 * 8 tokens) takes the split implementation's default instead, whatever
 * config it came with (cached, shipped, tuned, asked for). */
static void hadapt(scree__config *c, const scree__variant *var, const void *args) {
  if (!hopper_serves(args)) split_default(var, args, c);
}

/* The plan key's class: whether hadapt turns hopper configs into split. */
static int adapt_class(const scree__variant *var, const void *args) {
  (void)var;
  return !hopper_serves(args);
}

/* A q tile (one query head's 64 * cwg tokens) far larger than the longest
 * query sequence only adds empty rows. */
static int hworth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const scree_paged_attention_args *a = args;
  return 64 * c->v[SCREE__H_CWG] <= 2 * scree__pow2_ceil(a->max_seqlen_q);
}

/* Upper bound of the (sequence, q tile) pairs, as attention.c's. */
static int64_t htile_cap(const scree_paged_attention_args *a, int bm) {
  const int64_t by_len = a->batch * scree__cdiv(a->max_seqlen_q, bm);
  const int64_t by_tokens = scree__cdiv(a->total_q, bm) + a->batch;
  return by_len < by_tokens ? by_len : by_tokens;
}

static scree_status hlaunch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                            const scree__variant *var, const void *args, CUstream stream) {
  const scree_paged_attention_args *a = args;
  if (!ctx->cu->TensorMapEncodeTiled)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "paged_attention impl=hopper needs cuTensorMapEncodeTiled, which this "
                       "driver does not export");
  if (!hopper_serves(a))
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "paged_attention impl=hopper needs page_size >= 8 and cache strides "
                       "below 2^40 bytes (page_size=%lld)", (long long)a->page_size);
  const strides s = strides_of(a);
  const int bm = 64 * c->v[SCREE__H_CWG], bn = c->v[SCREE__H_BN];
  const int64_t cap = htile_cap(a, bm);
  if (cap * a->heads_q > 0x7fffffff)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "%lld query tiles x %lld heads exceed a grid of 2^31 CTAs",
                       (long long)cap, (long long)a->heads_q);
  struct {
    _Alignas(64) unsigned char b[128];
  } mq, mk, mv;
  const uint64_t d = (uint64_t)a->head_dim;
  const uint64_t qdims[3] = {d, (uint64_t)a->heads_q, (uint64_t)a->total_q};
  const uint64_t qst[2] = {(uint64_t)s.qh * 2, (uint64_t)s.qt * 2};
  const unsigned qbox[3] = {64, 1, (unsigned)bm};
  /* The caches: (head_dim, heads_kv, tokens of a page, pages); a box is a
   * chunk of R = min(page_size, BN) keys of one page. */
  const uint64_t cdims[4] = {d, (uint64_t)a->heads_kv, (uint64_t)a->page_size,
                             (uint64_t)a->num_pages};
  const uint64_t cst[3] = {(uint64_t)s.ch * 2, (uint64_t)s.ct * 2, (uint64_t)s.cp * 2};
  const unsigned rows = (unsigned)(a->page_size < bn ? a->page_size : bn);
  const unsigned cbox[4] = {64, 1, rows, 1};
  scree_status st;
  if ((st = scree__hopper_tmap(ctx, mq.b, "q", a->q, a->dtype, 3, qdims, qst, qbox)) ||
      (st = scree__hopper_tmap(ctx, mk.b, "k_cache", a->k_cache, a->dtype, 4, cdims, cst, cbox)) ||
      (st = scree__hopper_tmap(ctx, mv.b, "v_cache", a->v_cache, a->dtype, 4, cdims, cst, cbox)))
    return st;
  uint64_t o = a->out, lse = a->lse, cu_q = a->cu_seqlens_q, sk = a->seqlens_k,
           bt = a->block_table;
  long long ot = s.ot, oh = s.oh, total_q = a->total_q, bts = a->block_table_stride;
  int batch = (int)a->batch, heads_q = (int)a->heads_q, group = (int)(a->heads_q / a->heads_kv);
  int logp = log2i(a->page_size);
  int wl = a->window_left < 0 || a->window_left > 0x7fffffff ? -1 : (int)a->window_left;
  int wr = a->window_right < 0 || a->window_right > 0x7fffffff ? -1 : (int)a->window_right;
  if (a->causal) wr = 0; /* min(window_right, 0), -1 being unbounded */
  const double scale = a->scale != 0.f ? a->scale : 1.0 / sqrt((double)a->head_dim);
  float sl2 = (float)(scale * 1.4426950408889634);
  float cap_in, cap_out;
  cap_factors(a, scale, &cap_in, &cap_out);
  CUdeviceptr ws;
  st = scree__workspace(ctx, stream, (size_t)(2 + 2 * cap) * sizeof(int), &ws);
  if (st) return st;
  uint64_t sched_ptr = ws;
  int capi = (int)cap;
  void *pp[] = {&cu_q, &sk, &batch, &sched_ptr, &capi, &wl, &wr};
  CUresult r = ctx->cu->LaunchKernel(k->fn[1], 1, 1, 1, 1024, 1, 1, 0, stream, pp, NULL);
  if (r)
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(paged attention schedule)");
  void *params[] = {mq.b,  mk.b,     mv.b,    &o,     &lse,       &cu_q, &sk,     &bt,
                    &bts,  &logp,    &ot,     &oh,    &total_q,   &heads_q, &group, &sl2,
                    &wl,   &wr,      &cap_in, &cap_out, &sched_ptr};
  const int64_t work = scree__hopper_grid(ctx, k, c, cap * heads_q);
  r = ctx->cu->LaunchKernel(k->fn[0], (unsigned)work, 1, 1, (unsigned)scree__hopper_threads(c),
                            1, 1, (unsigned)hsmem(c, var), stream, params, NULL);
  if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(paged attention hopper)");
  return SCREE_OK;
}

/* ---- the op's own argument rules ---------------------------------------- */

static int is_page_size(int64_t p) {
  return p == 1 || p == 8 || p == 16 || p == 32 || p == 64 || p == 128 || p == 256;
}

static scree_status validate(scree_context *ctx, const void *args) {
  const scree_paged_attention_args *a = args;
  if (a->heads_q % a->heads_kv)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "heads_q=%lld is not a multiple of heads_kv=%lld", (long long)a->heads_q,
                       (long long)a->heads_kv);
  if (!is_page_size(a->page_size))
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "page_size=%lld is not supported (1, 8, 16, 32, 64, 128 or 256)",
                       (long long)a->page_size);
  if (a->total_q > 0 && a->max_seqlen_q == 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "max_seqlen_q is 0 but total_q=%lld tokens are present",
                       (long long)a->total_q);
  if (a->batch == 0 && a->total_q)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "batch is 0 but total_q=%lld",
                       (long long)a->total_q);
  /* The kernel numbers a sequence's rows (query tokens x the GQA group) in
   * 32 bits. */
  if (a->total_q * (a->heads_q / a->heads_kv) > 0x7fffffff)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "total_q=%lld x %lld query heads a KV head is 2^31 rows or more",
                       (long long)a->total_q, (long long)(a->heads_q / a->heads_kv));
  const int64_t need = scree__cdiv(a->max_seqlen_k, a->page_size);
  if (a->block_table_stride < need)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "block_table_stride=%lld holds fewer pages than max_seqlen_k=%lld keys "
                       "need at page_size=%lld (%lld)",
                       (long long)a->block_table_stride, (long long)a->max_seqlen_k,
                       (long long)a->page_size, (long long)need);
  return SCREE_OK;
}

/* A cache's strides (positive multiples of 8 elements; no two elements of
 * one address), its bytes [lo, hi), and out kept apart from it. */
static scree_status check_cache(scree_context *ctx, const scree_paged_attention_args *a,
                                const char *name, scree_devptr p, uint64_t out_lo,
                                uint64_t out_hi, uint64_t *lo, uint64_t *hi) {
  const strides s = strides_of(a);
  const int64_t st[3] = {s.cp, s.ct, s.ch}, ext[3] = {a->num_pages, a->page_size, a->heads_kv};
  for (int i = 0; i < 3; i++)
    if (st[i] <= 0 || st[i] % 8)
      return scree__fail(ctx, st[i] <= 0 ? SCREE_ERROR_INVALID_ARGUMENT : SCREE_ERROR_MISALIGNED,
                         "%s strides (page %lld, token %lld, head %lld) must be positive "
                         "multiples of 8 elements",
                         name, (long long)s.cp, (long long)s.ct, (long long)s.ch);
  /* Smallest stride first, each must clear the reach of those before it. */
  int ord[3] = {0, 1, 2};
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (st[ord[j]] < st[ord[i]]) {
        const int x = ord[i];
        ord[i] = ord[j];
        ord[j] = x;
      }
  __int128 reach = a->head_dim;
  for (int i = 0; i < 3; i++) {
    const int k = ord[i];
    if (ext[k] <= 1) continue;
    if (st[k] < reach)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "%s strides (page %lld, token %lld, head %lld) overlap for "
                         "num_pages=%lld, page_size=%lld, heads_kv=%lld, head_dim=%lld",
                         name, (long long)s.cp, (long long)s.ct, (long long)s.ch,
                         (long long)a->num_pages, (long long)a->page_size,
                         (long long)a->heads_kv, (long long)a->head_dim);
    reach += (__int128)st[k] * (ext[k] - 1);
  }
  const __int128 end = (__int128)p + reach * 2;
  if (end > (__int128)UINT64_MAX)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "%s=0x%llx extends past the address space", name,
                       (unsigned long long)p);
  *lo = p;
  *hi = (uint64_t)end;
  if (scree__overlaps(out_lo, out_hi, *lo, *hi))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "out overlaps %s", name);
  return SCREE_OK;
}

/* Validation on: cu_seqlens_q, seqlens_k and the block table's entries of
 * the pages each sequence uses, copied to the host and checked. */
static scree_status check_device(scree_context *ctx, const scree_paged_attention_args *a,
                                 CUstream stream) {
  const size_t n = (size_t)a->batch;
  const size_t tn = n * (size_t)a->block_table_stride;
  int32_t *cq = malloc((n + 1) * sizeof *cq), *sk = malloc((n ? n : 1) * sizeof *sk);
  int32_t *bt = malloc((tn ? tn : 1) * sizeof *bt);
  scree_status st = SCREE_OK;
  if (!cq || !sk || !bt) st = scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "validate: copies");
  if (!st) st = scree__read_device(ctx, stream, cq, a->cu_seqlens_q, (n + 1) * 4, "cu_seqlens_q");
  if (!st) st = scree__read_device(ctx, stream, sk, a->seqlens_k, n * 4, "seqlens_k");
  if (!st) st = scree__read_device(ctx, stream, bt, a->block_table, tn * 4, "block_table");
  if (!st && cq[0] != 0)
    st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens_q[0]=%d must be 0", cq[0]);
  for (size_t b = 0; b < n && !st; b++) {
    const int64_t lq = (int64_t)cq[b + 1] - cq[b];
    if (lq < 0)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "cu_seqlens_q decreases at %zu (%d then %d)", b, cq[b], cq[b + 1]);
    else if (lq > a->max_seqlen_q)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "sequence %zu has %lld query tokens, more than max_seqlen_q=%lld", b,
                       (long long)lq, (long long)a->max_seqlen_q);
    else if (sk[b] < 0 || sk[b] > a->max_seqlen_k)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "seqlens_k[%zu]=%d is not in [0, max_seqlen_k=%lld]", b, sk[b],
                       (long long)a->max_seqlen_k);
    const int64_t pages = st ? 0 : scree__cdiv(sk[b], a->page_size);
    for (int64_t j = 0; j < pages && !st; j++) {
      const int32_t id = bt[b * (size_t)a->block_table_stride + (size_t)j];
      if (id < 0 || id >= a->num_pages)
        st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "block_table[%zu][%lld]=%d is not a page id in [0, num_pages=%lld) "
                         "(sequence %zu has %d keys)",
                         b, (long long)j, id, (long long)a->num_pages, b, sk[b]);
    }
  }
  if (!st && cq[n] != a->total_q)
    st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens_q[batch]=%d differs from "
                     "total_q=%lld", cq[n], (long long)a->total_q);
  free(cq), free(sk), free(bt);
  return st;
}

static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  (void)var;
  const scree_paged_attention_args *a = args;
  const strides s = strides_of(a);
  /* out's bytes (its strides are positive: the generic ANY_ORDER check). */
  const uint64_t olo = a->out;
  const uint64_t ohi = a->out + (uint64_t)(((a->total_q - 1) * s.ot + (a->heads_q - 1) * s.oh +
                                            a->head_dim) * 2);
  uint64_t klo, khi, vlo, vhi;
  scree_status st;
  if ((st = check_cache(ctx, a, "k_cache", a->k_cache, olo, ohi, &klo, &khi)) ||
      (st = check_cache(ctx, a, "v_cache", a->v_cache, olo, ohi, &vlo, &vhi)))
    return st;
  if (ctx->validate && ctx->cu && (st = check_device(ctx, a, stream))) return st;
  return SCREE_OK;
}

/* ---- buckets and problems --------------------------------------------------- */

/* Bucket: the batch, the longest query and key sequences rounded up to
 * powers of two; the GQA group, the KV heads and the page size exact.
 * dtype and head_dim are the variant. The batch and the longest lengths
 * depend on the batch: batch-invariant mode tunes on a decode step of 64
 * sequences of up to 4096 keys. */
static const scree__bdim dims[] = {{"batch", 1, 0, 64}, {"group", 0, 0, 0}, {"heads_kv", 0, 0, 0},
                                   {"page", 0, 0, 0},   {"max_q", 1, 0, 1}, {"max_k", 1, 0, 4096}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_paged_attention_args *a = args;
  d[0] = a->batch;
  d[1] = a->heads_kv ? a->heads_q / a->heads_kv : 0;
  d[2] = a->heads_kv;
  d[3] = a->page_size;
  d[4] = a->max_seqlen_q;
  d[5] = a->max_seqlen_k;
}

/* A tuning problem's K and V at most this many bytes (a few ms of reads):
 * larger buckets are tuned on fewer sequences of the same lengths. */
#define TUNE_MAX_KV_BYTES ((int64_t)1 << 30)
#define MAX_SEQS 65536

static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree_paged_attention_args *a = args;
  memset(a, 0, sizeof *a);
  a->batch = b->v[0];
  a->heads_kv = b->v[2];
  a->heads_q = b->v[1] * b->v[2];
  a->page_size = b->v[3];
  a->max_seqlen_q = b->v[4];
  a->max_seqlen_k = b->v[5];
  a->head_dim = var->v[V_D];
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  a->causal = 1;
  a->window_left = a->window_right = -1;
  (void)check; /* the problem hook sizes check problems itself */
}

/* The check batch: key lengths 0, 1, around a page (P - 1, P, P + 1), a few
 * pages, and long ones; query lengths 1 (decode), 2, 7 and more (chunked
 * prefill), also longer than the keys (rows with no key under causal
 * masking); all within the bucket's longest. */
static int gen_check_lens(const scree_paged_attention_args *a, int64_t *lq, int64_t *lk) {
  const int64_t p = a->page_size;
  const int64_t q[] = {1, 1, 2, 7, 1, 4, 1, 3, 64, 1, 9, 0};
  const int64_t k[] = {0, 1, p - 1, p, p + 1, 300, 1000, 2, 700, 4 * p + 3, 5, 17};
  const int n = (int)(sizeof q / sizeof q[0]);
  for (int i = 0; i < n; i++) {
    lq[i] = q[i] < a->max_seqlen_q ? q[i] : a->max_seqlen_q;
    lk[i] = k[i] < a->max_seqlen_k ? k[i] : a->max_seqlen_k;
    if (lk[i] < 0) lk[i] = 0;
  }
  return n;
}

/* The tuning batch: every sequence at the bucket's query length, key
 * lengths log-uniform in [max_k / 8, max_k] with the first at max_k; fewer
 * sequences where K and V would pass TUNE_MAX_KV_BYTES. */
static int gen_tune_lens(const scree_paged_attention_args *a, uint64_t seed, int64_t *lq,
                         int64_t *lk) {
  int64_t n = a->batch < 1 ? 1 : a->batch > MAX_SEQS ? MAX_SEQS : a->batch;
  const int64_t per_key = a->heads_kv * a->head_dim * 4;
  uint64_t s = seed | 1;
  int64_t bytes = 0;
  int i = 0;
  for (; i < n; i++) {
    lk[i] = i ? scree__rand_len(&s, a->max_seqlen_k) : a->max_seqlen_k;
    lq[i] = a->max_seqlen_q;
    bytes += lk[i] * per_key;
    if (i && bytes > TUNE_MAX_KV_BYTES) break;
  }
  return i;
}

static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  scree_paged_attention_args *a = (scree_paged_attention_args *)p->args;
  memcpy(a, args, sizeof *a);
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  a->head_dim = var->v[V_D];
  if (a->heads_kv < 1 || a->heads_q < 1 || a->heads_q % a->heads_kv) {
    scree__set_why(why, why_size, "heads_q=%lld, heads_kv=%lld", (long long)a->heads_q,
                   (long long)a->heads_kv);
    return -1;
  }
  if (!is_page_size(a->page_size)) {
    scree__set_why(why, why_size, "page_size=%lld", (long long)a->page_size);
    return -1;
  }
  if (a->max_seqlen_q < 1) a->max_seqlen_q = 1;
  if (a->max_seqlen_k < 1) a->max_seqlen_k = 1;
  int64_t *lq = malloc(MAX_SEQS * sizeof *lq), *lk = malloc(MAX_SEQS * sizeof *lk);
  int32_t *cq = NULL, *sk = NULL, *bt = NULL, *perm = NULL;
  if (!lq || !lk) goto oom;
  int n;
  if (lens) {
    n = lens->n < MAX_SEQS ? lens->n : MAX_SEQS;
    for (int i = 0; i < n; i++) lq[i] = lens->q[i], lk[i] = lens->k ? lens->k[i] : lens->q[i];
  } else if (check) {
    n = gen_check_lens(a, lq, lk);
  } else {
    n = gen_tune_lens(a, seed, lq, lk);
  }
  const int64_t ps = a->page_size;
  int64_t pages = 0, mq = 0, mk = 0, maxpages = 1;
  double pairs = 0, keys = 0;
  for (int i = 0; i < n; i++) {
    const int64_t np = scree__cdiv(lk[i], ps);
    pages += np;
    if (np > maxpages) maxpages = np;
    if (lq[i] > mq) mq = lq[i];
    if (lk[i] > mk) mk = lk[i];
    keys += (double)lk[i];
    for (int64_t t = 0; t < lq[i]; t++) { /* causal pairs */
      const int64_t v = t + lk[i] - lq[i] + 1;
      pairs += (double)(a->causal ? (v < 0 ? 0 : v > lk[i] ? lk[i] : v) : lk[i]);
    }
  }
  /* A pool with spare pages, in shuffled order; check problems share a
   * prefix (the first pages of sequence 6 are those of sequence 5) and
   * leave padding between heads, tokens and pages. */
  const int64_t npool = pages + pages / 8 + 1;
  if (npool > 0x7fffffff) {
    scree__set_why(why, why_size, "%lld pages", (long long)npool);
    goto fail;
  }
  cq = malloc((size_t)(n + 1) * sizeof *cq);
  sk = malloc((size_t)(n ? n : 1) * sizeof *sk);
  bt = malloc((size_t)(n ? n : 1) * (size_t)maxpages * sizeof *bt);
  perm = malloc((size_t)npool * sizeof *perm);
  if (!cq || !sk || !bt || !perm) goto oom;
  uint64_t s = seed * 0x9E3779B97F4A7C15ull | 1;
  for (int64_t i = 0; i < npool; i++) perm[i] = (int32_t)i;
  for (int64_t i = npool - 1; i > 0; i--) {
    const int64_t j = (int64_t)(scree__rand(&s) % (uint64_t)(i + 1));
    const int32_t x = perm[i];
    perm[i] = perm[j];
    perm[j] = x;
  }
  int64_t used = 0;
  cq[0] = 0;
  for (int i = 0; i < n; i++) {
    cq[i + 1] = cq[i] + (int32_t)lq[i];
    sk[i] = (int32_t)lk[i];
    const int64_t np = scree__cdiv(lk[i], ps);
    for (int64_t j = 0; j < maxpages; j++)
      bt[(size_t)i * (size_t)maxpages + (size_t)j] = j < np ? perm[used + j] : -1;
    used += np;
  }
  if (check && n > 6) {
    const int64_t shared = scree__cdiv(lk[5], ps) < scree__cdiv(lk[6], ps)
                               ? scree__cdiv(lk[5], ps) - 1 : scree__cdiv(lk[6], ps) - 1;
    for (int64_t j = 0; j < shared; j++)
      bt[(size_t)6 * (size_t)maxpages + (size_t)j] = bt[(size_t)5 * (size_t)maxpages + (size_t)j];
  }
  a->batch = n;
  a->total_q = cq[n];
  a->max_seqlen_q = mq > 0 ? mq : 1;
  a->max_seqlen_k = mk;
  a->num_pages = npool;
  a->block_table_stride = maxpages;
  const int64_t d = a->head_dim;
  if (check) {
    a->cache_head_stride = d + 8;
    a->cache_token_stride = a->heads_kv * (d + 8);
    a->cache_page_stride = ps * a->cache_token_stride + 64;
  } else {
    a->cache_head_stride = a->cache_token_stride = a->cache_page_stride = 0;
  }
  const strides st = strides_of(a);
  const size_t cache = (size_t)npool * (size_t)st.cp;
  const size_t qn = (size_t)a->total_q * (size_t)a->heads_q * (size_t)d;
  scree__buf *b;
  scree__problem_buf(p, "q", SCREE__BUF_IN, a->dtype, qn, offsetof(scree_paged_attention_args, q));
  b = scree__problem_buf(p, "out", SCREE__BUF_OUT, a->dtype, qn,
                         offsetof(scree_paged_attention_args, out));
  b->rtol = a->dtype == SCREE_DTYPE_BF16 ? 2e-2 : 4e-3;
  b->atol = a->dtype == SCREE_DTYPE_BF16 ? 2e-2 : 4e-3;
  b = scree__problem_buf(p, "lse", SCREE__BUF_OUT, SCREE_DTYPE_FP32,
                         (size_t)a->total_q * (size_t)a->heads_q,
                         offsetof(scree_paged_attention_args, lse));
  b->rtol = 1e-4;
  b->atol = 2e-3;
  scree__problem_buf(p, "k_cache", SCREE__BUF_IN, a->dtype, cache,
                     offsetof(scree_paged_attention_args, k_cache));
  scree__problem_buf(p, "v_cache", SCREE__BUF_IN, a->dtype, cache,
                     offsetof(scree_paged_attention_args, v_cache));
  b = scree__problem_buf(p, "block_table", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32,
                         (size_t)(n ? n : 1) * (size_t)maxpages,
                         offsetof(scree_paged_attention_args, block_table));
  b->host = bt;
  b = scree__problem_buf(p, "seqlens_k", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32,
                         (size_t)(n ? n : 1), offsetof(scree_paged_attention_args, seqlens_k));
  b->host = sk;
  b = scree__problem_buf(p, "cu_seqlens_q", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32, (size_t)n + 1,
                         offsetof(scree_paged_attention_args, cu_seqlens_q));
  b->host = cq;
  free(perm);
  free(lq), free(lk);
  p->flops = 4.0 * (double)a->heads_q * (double)d * pairs;
  /* K and V read once (the keys of each sequence), q read, out written. */
  p->bytes = (2.0 * keys * (double)a->heads_kv + 2.0 * (double)a->total_q * (double)a->heads_q) *
             (double)d * 2;
  snprintf(p->desc, sizeof p->desc,
           "%d sequences, %lld query tokens, keys up to %lld in pages of %lld, %lldx%lld heads "
           "of %lld",
           n, (long long)a->total_q, (long long)mk, (long long)ps, (long long)a->heads_q,
           (long long)a->heads_kv, (long long)d);
  return 0;
oom:
  scree__set_why(why, why_size, "out of memory");
fail:
  free(lq), free(lk), free(cq), free(sk), free(bt), free(perm);
  return -1;
}

/* ---- the CPU reference ----------------------------------------------------
 * Attention over the paged layout in double accumulation: the truth the
 * kernel is tested against, itself tested against scree_attention's
 * reference on the same keys gathered into contiguous buffers
 * (tests/runtime/ops/test_paged_attention_ref.c).
 *
 * Host copies in the problem's buffer order: q, out, lse, k_cache, v_cache,
 * block_table, seqlens_k, cu_seqlens_q; the args' strides apply (0: dense).
 * Writes every row of out and, if lse is not NULL, lse[h * total_q + t]
 * (natural log; -inf for a row with no key). Work items are (sequence, KV
 * head), each converting its keys to double once, on scree__parallel_for.
 * Each score is q[c] * k[c] summed in order c = 0, 1, ...; each output
 * element p_j * v[j][c] summed in order j. If scratch memory cannot be
 * allocated, the item's rows are written as NaN so that any comparison
 * fails. */

typedef struct ref_job {
  const scree_paged_attention_args *a;
  const void *q, *kc, *vc;
  const int32_t *bt, *sk, *cq;
  void *out;
  float *lse;
  strides s;
  double scale;
} ref_job;

static void ref_rows(const ref_job *j, int64_t b, int64_t g, double val, float lval) {
  const scree_paged_attention_args *a = j->a;
  const int64_t group = a->heads_q / a->heads_kv;
  for (int64_t t = j->cq[b]; t < j->cq[b + 1]; t++)
    for (int64_t h = g * group; h < (g + 1) * group; h++) {
      for (int64_t c = 0; c < a->head_dim; c++)
        scree__store_elem(j->out, a->dtype, (size_t)(t * j->s.ot + h * j->s.oh + c), val);
      if (j->lse) j->lse[h * a->total_q + t] = lval;
    }
}

static void ref_item(void *user, int idx) {
  const ref_job *j = user;
  const scree_paged_attention_args *a = j->a;
  const int64_t b = idx / a->heads_kv, g = idx % a->heads_kv, d = a->head_dim;
  const int64_t group = a->heads_q / a->heads_kv;
  const int64_t q0 = j->cq[b], lq = j->cq[b + 1] - q0, lk = j->sk[b];
  double *kk = malloc(sizeof(double) * (size_t)(lk * d + 1));
  double *vv = malloc(sizeof(double) * (size_t)(lk * d + 1));
  double *sc = malloc(sizeof(double) * (size_t)(lk + 1));
  double *acc = malloc(sizeof(double) * (size_t)d);
  double *qr = malloc(sizeof(double) * (size_t)d);
  if (!kk || !vv || !sc || !acc || !qr) {
    ref_rows(j, b, g, NAN, NAN);
    goto done;
  }
  for (int64_t key = 0; key < lk; key++) {
    const int64_t page = j->bt[b * a->block_table_stride + key / a->page_size];
    const size_t base = (size_t)(page * j->s.cp + (key % a->page_size) * j->s.ct + g * j->s.ch);
    for (int64_t c = 0; c < d; c++) {
      kk[key * d + c] = scree__load_elem(j->kc, a->dtype, base + (size_t)c);
      vv[key * d + c] = scree__load_elem(j->vc, a->dtype, base + (size_t)c);
    }
  }
  const int64_t big = (int64_t)1 << 40;
  for (int64_t i = 0; i < lq; i++) {
    const int64_t t = q0 + i, p = i + lk - lq;
    int64_t left = a->window_left, right = a->causal ? 0 : a->window_right;
    if (left > big) left = big;
    if (right > big) right = big;
    int64_t lo = left >= 0 ? p - left : 0, hi = right >= 0 ? p + right : lk - 1;
    if (lo < 0) lo = 0;
    if (hi > lk - 1) hi = lk - 1;
    for (int64_t h = g * group; h < (g + 1) * group; h++) {
      if (lo > hi) {
        for (int64_t c = 0; c < d; c++)
          scree__store_elem(j->out, a->dtype, (size_t)(t * j->s.ot + h * j->s.oh + c), 0.0);
        if (j->lse) j->lse[h * a->total_q + t] = -INFINITY;
        continue;
      }
      for (int64_t c = 0; c < d; c++)
        qr[c] = scree__load_elem(j->q, a->dtype, (size_t)(t * j->s.qt + h * j->s.qh + c));
      double m = -INFINITY;
      for (int64_t key = lo; key <= hi; key++) {
        double x = 0;
        for (int64_t c = 0; c < d; c++) x += qr[c] * kk[key * d + c];
        x *= j->scale;
        if (a->softcap > 0.f) x = (double)a->softcap * tanh(x / (double)a->softcap);
        sc[key] = x;
        if (x > m) m = x;
      }
      double sum = 0;
      for (int64_t key = lo; key <= hi; key++) sum += sc[key] = exp(sc[key] - m);
      for (int64_t c = 0; c < d; c++) acc[c] = 0;
      for (int64_t key = lo; key <= hi; key++)
        for (int64_t c = 0; c < d; c++) acc[c] += sc[key] * vv[key * d + c];
      for (int64_t c = 0; c < d; c++)
        scree__store_elem(j->out, a->dtype, (size_t)(t * j->s.ot + h * j->s.oh + c), acc[c] / sum);
      if (j->lse) j->lse[h * a->total_q + t] = (float)(m + log(sum));
    }
  }
done:
  free(kk), free(vv), free(sc), free(acc), free(qr);
}

SCREE__REFERENCE(paged_attention) {
  const scree_paged_attention_args *a = args;
  if (a->batch <= 0 || a->heads_kv <= 0 || a->heads_q % a->heads_kv) return;
  ref_job j = {.a = a, .q = host[0], .out = host[1], .lse = host[2], .kc = host[3],
               .vc = host[4], .bt = host[5], .sk = host[6], .cq = host[7]};
  j.s = strides_of(a);
  j.scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)a->head_dim);
  const int64_t items = a->batch * a->heads_kv;
  if (items > 0x7fffffff) {
    for (int64_t i = 0; i < items; i++) ref_rows(&j, i / a->heads_kv, i % a->heads_kv, NAN, NAN);
    return;
  }
  scree__parallel_for((int)items, 0, ref_item, &j);
}

/* ---- benchmark entries ----------------------------------------------------
 * Decode steps (bench/compare_torch.py --op paged has the whole table, with
 * FlashAttention-2 and a copy side by side), and a chunked prefill (the
 * hopper implementation on sm_90; --paged-set prefill compares it with
 * scree_attention on the same data). */
static const char *const bench[] = {
    "dtype=bf16,head_dim=128 batch=64,max_seqlen_q=1,max_seqlen_k=4096,page_size=16,"
    "heads_q=32,heads_kv=8,head_dim=128,window_left=-1,window_right=-1",
    "dtype=bf16,head_dim=128 batch=64,max_seqlen_q=4,max_seqlen_k=4096,page_size=16,"
    "heads_q=32,heads_kv=8,head_dim=128,window_left=-1,window_right=-1",
    "dtype=bf16,head_dim=128 batch=8,max_seqlen_q=1,max_seqlen_k=32768,page_size=64,"
    "heads_q=64,heads_kv=8,head_dim=128,window_left=-1,window_right=-1",
    "dtype=bf16,head_dim=128 batch=2,max_seqlen_q=2048,max_seqlen_k=16384,page_size=16,"
    "heads_q=32,heads_kv=8,head_dim=128,window_left=-1,window_right=-1",
    NULL,
};

static const scree__impl impls[] = {
    [IMPL_SPLIT] = {SCREE__IMPL("split", "paged_attention.cu", 80, 0, "scree_paged_attention",
                                "scree_paged_plan"),
                    .nfields = F_N, .fields = fields, .check = check, .smem = smem,
                    .threads = threads, .worth_timing = worth_timing, .launch = launch},
    [IMPL_HOPPER] = {SCREE__IMPL("hopper", "attention_hopper.cu", 90, 90,
                                 "scree_paged_attention_hopper", "scree_attention_schedule"),
                     .arch_specific = 1, .defines = "SCREE_PAGED=1 SCREE_CAUSAL=0 SCREE_WINDOW=1",
                     .nfields = SCREE__H_NFIELDS, .fields = scree__hopper_fields, .check = hcheck,
                     .smem = hsmem, .threads = scree__hopper_threads, .adapt = hadapt,
                     .worth_timing = hworth_timing, .launch = hlaunch},
};

SCREE__DEFINE_OP(paged_attention, .validate = validate, .validate_buffers = validate_buffers,
                 .bucket = bucket, .adapt_class = adapt_class);
