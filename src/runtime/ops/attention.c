/* attention.c - varlen attention forward, the host side: its arguments,
 * config space and constraints, the launch (tile schedule and main kernel),
 * buckets, the problems it is tuned and checked on, the CPU reference and
 * the benchmark entries. The kernels are kernels/attention.cu and
 * kernels/attention_hopper.cu; docs/kernels/attention.md describes the
 * algorithm and the choices. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_hopper.h"
#include "ops/attention_ref.h"
#include "ops/op.h"

#define SCREE__ARGS_T scree_attention_args
/* A [tokens, heads, head_dim] tensor t of the dtype, with its two strides. */
#define TENSOR(t, tokens, heads)                                                           \
  .dtype = SCREE__AT(dtype), .align = 16,                                                  \
  .dims = {SCREE__AT(tokens), SCREE__AT(heads), SCREE__AT(head_dim)},                      \
  .strides = {SCREE__AT(t##_token_stride), SCREE__AT(t##_head_stride)},                    \
  .flags = SCREE__ANY_ORDER, .stride_multiple = 8

/* The arguments (include/scree.h), field by field. q, k, v and out are
 * [tokens, heads, head_dim] with token and head strides in either order,
 * positive multiples of 8 elements, on 16-byte boundaries (the kernels copy
 * 16 bytes at a time); out and lse have their own memory. The counts bound
 * int32 cu_seqlens. */
static const scree__arg schema[] = {
    SCREE__IN(q, TENSOR(q, total_q, heads_q)),
    SCREE__IN(k, TENSOR(k, total_k, heads_kv)),
    SCREE__IN(v, TENSOR(v, total_k, heads_kv)),
    SCREE__OUT(out, TENSOR(out, total_q, heads_q)),
    SCREE__OUT(lse, .elem = SCREE__E_F32, .dims = {SCREE__AT(heads_q), SCREE__AT(total_q)},
               .flags = SCREE__OPTIONAL),
    SCREE__IN(cu_seqlens_q, .elem = SCREE__E_I32, .dims = {SCREE__AT(batch)},
              .flags = SCREE__PLUS_ONE),
    SCREE__IN(cu_seqlens_k, .elem = SCREE__E_I32, .dims = {SCREE__AT(batch)},
              .flags = SCREE__PLUS_ONE),
    SCREE__DIM(batch, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(total_q, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(total_k, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE),
    SCREE__DIM(max_seqlen_q, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE),
    SCREE__DIM(max_seqlen_k, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE),
    SCREE__DIM(heads_q, SCREE__RANGE(1, 65535), .flags = SCREE__SHAPE),
    SCREE__DIM(heads_kv, SCREE__MIN(1), .flags = SCREE__SHAPE),
    SCREE__DIM(head_dim, .flags = SCREE__SHAPE), /* one of a variant field's values */
    SCREE__STRIDE(q_token_stride), SCREE__STRIDE(k_token_stride),
    SCREE__STRIDE(v_token_stride), SCREE__STRIDE(out_token_stride),
    SCREE__STRIDE(q_head_stride), SCREE__STRIDE(k_head_stride),
    SCREE__STRIDE(v_head_stride), SCREE__STRIDE(out_head_stride),
    SCREE__DTYPE(dtype),
    SCREE__INT(causal),
    SCREE__FLOAT(scale, .flags = SCREE__FINITE), /* 0 means 1 / sqrt(head_dim) */
    SCREE__INT(window_left, SCREE__MIN(-1), .flags = SCREE__SHAPE, .hint = "(-1: unbounded)"),
    SCREE__INT(window_right, SCREE__MIN(-1), .flags = SCREE__SHAPE, .hint = "(-1: unbounded)"),
    SCREE__FLOAT(softcap, .flags = SCREE__FINITE | SCREE__NONNEG, .hint = "(0: none)"),
};

enum { F_BM, F_BN, F_WARPS, F_STAGES, F_QREG, F_SCHED };
enum { V_DTYPE, V_D, V_CAUSAL, V_WINDOW };

static const scree__field fields[] = {
    {"bm", "SCREE_BM", 2, {64, 128}},
    {"bn", "SCREE_BN", 3, {32, 64, 128}},
    {"warps", "SCREE_WARPS", 2, {4, 8}},
    {"stages", "SCREE_STAGES", 3, {1, 2, 3}},
    {"qreg", "SCREE_QREG", 2, {0, 1}},
    {"sched", "SCREE_SCHED", 3, {0, 1, 2}},
};
static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 2, {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16},
     SCREE__AT(dtype)},
    {"head_dim", "SCREE_HEAD_DIM", 0, 128, 5, {32, 64, 96, 128, 256}, SCREE__AT(head_dim)},
    {"causal", "SCREE_CAUSAL", 0, 0, 2, {0, 1}, 0}, /* validate_buffers fills these */
    {"window", "SCREE_WINDOW", 0, 0, 2, {0, 1}, 0},
};

/* Schedules (docs/kernels/attention.md): 0 one CTA per (q-tile, head,
 * sequence) in grid order; 1 a tile list sorted longest first by a prep
 * kernel, one CTA per (tile, head); 2 the same list on a persistent grid
 * taking work from a counter. */
enum { SCHED_GRID = 0, SCHED_LPT = 1, SCHED_PERSISTENT = 2 };


static size_t smem(const scree__config *c, const scree__variant *var) {
  /* Q tile + STAGES K tiles + STAGES V tiles of 16-bit elements. */
  return (size_t)2 * (size_t)var->v[V_D] *
         (size_t)(c->v[F_BM] + 2 * c->v[F_STAGES] * c->v[F_BN]);
}

static int threads(const scree__config *c) { return 32 * c->v[F_WARPS]; }

/* Mirrors the static_asserts of kernels/attention.cu. */
static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  const int bm = c->v[F_BM], bn = c->v[F_BN], warps = c->v[F_WARPS], stages = c->v[F_STAGES];
  const int d = var->v[V_D];
  if (!scree__attention_variant_ok(var->v[V_DTYPE], d, var->v[V_CAUSAL], var->v[V_WINDOW], why, n))
    return 0;
  if (bm != 64 && bm != 128) {
    scree__set_why(why, n, "bm=%d must be 64 or 128", bm);
    return 0;
  }
  if (bn != 32 && bn != 64 && bn != 128) {
    scree__set_why(why, n, "bn=%d must be 32, 64 or 128", bn);
    return 0;
  }
  if (warps != 4 && warps != 8) {
    scree__set_why(why, n, "warps=%d must be 4 or 8", warps);
    return 0;
  }
  const int rows = bm / warps; /* query rows per warp */
  if (rows != 16 && rows != 32) {
    scree__set_why(why, n, "bm/warps=%d query rows per warp must be 16 or 32", rows);
    return 0;
  }
  if (stages < 1 || stages > 3) {
    scree__set_why(why, n, "stages=%d must be 1, 2 or 3", stages);
    return 0;
  }
  if ((c->v[F_QREG] & ~1) || c->v[F_SCHED] < 0 || c->v[F_SCHED] > 2) {
    scree__set_why(why, n, "qreg is 0 or 1, sched 0, 1 or 2");
    return 0;
  }
  /* Registers per thread for the fp32 S tile and O accumulator (and Q's
   * fragments with qreg), MT = rows / 16 row tiles; past 192 ptxas spills
   * (measured on sm_90). The kernel's static_assert says the same. */
  const int mt = rows / 16;
  const int regs = mt * (d / 2 + bn / 2) + (c->v[F_QREG] ? mt * d / 4 : 0);
  if (regs > 192) {
    scree__set_why(why, n,
                   "%d rows x (bn=%d + head_dim=%d) per warp needs about %d accumulator "
                   "registers per thread (at most 192)",
                   rows, bn, d, regs);
    return 0;
  }
  return scree__check_smem(smem(c, var), t, why, n);
}

/* Defaults measured on an H100 (docs/kernels/attention.md): on sm_90 with
 * tensor maps, head_dim 64 and 128 take the hopper implementation. Else
 * the generic kernel: 128 query rows
 * per CTA in two m16 tiles per warp (each K/V fragment feeds twice the
 * MMAs), 64-key tiles, two stages, Q in registers up to head_dim 64;
 * 64-row tiles where sequences are short (more CTAs) or the head is small
 * and causal, and at head_dim 256 (one m16 tile per warp, one stage:
 * registers and shared memory). Causal batches take the longest-first tile
 * list, non-causal ones the plain grid (fewer heads' K/V in L2 at once).
 * With less shared memory (sm_80: 163 KiB), head_dim 128 takes 32-key
 * tiles so that two CTAs fit an SM. */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  const scree_attention_args *a = args;
  memset(out, 0, sizeof *out);
  const int d = var->v[V_D], causal = var->v[V_CAUSAL];
  if (t->sm == 90 && t->tensor_maps && (d == 64 || d == 128)) {
    /* The hopper implementation (below), 1.1-1.6x faster than the generic
     * one on the benchmark cases. On an H100 sweep this config was within
     * 2% of the best hopper config at head_dim 64, where the overlap of
     * softmax and P V cost 8-12%; at 128 the overlap (ovl) was within 5%
     * of the best and without it up to 6% slower (ops/attention_hopper.c). */
    out->impl = 1;
    scree__hopper_default(d, out);
    return;
  }
  const int small_smem = t->smem_optin < 200 * 1024;
  const int short_seqs = a && a->max_seqlen_q > 0 && a->max_seqlen_q <= 256;
  out->v[F_BM] = d == 256 || short_seqs || (d == 32 && causal) ? 64 : 128;
  out->v[F_BN] = small_smem && d == 128 ? 32 : 64;
  out->v[F_WARPS] = 4;
  out->v[F_STAGES] = d == 256 ? 1 : 2;
  out->v[F_QREG] = d <= 64;
  out->v[F_SCHED] = causal || d == 96 || d == 256 ? SCHED_LPT : SCHED_GRID;
  if (!check(out, var, t, NULL, 0)) { /* a small tile fits everywhere */
    out->v[F_BM] = 64;
    out->v[F_BN] = 32;
    out->v[F_STAGES] = 1;
    out->v[F_QREG] = 0;
  }
}

/* Grid order keeps the sequence index in gridDim.z (at most 65535): a
 * larger batch takes the tile list. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const scree_attention_args *a = args;
  if (c->v[F_SCHED] == SCHED_GRID && a->batch > 65535) c->v[F_SCHED] = SCHED_LPT;
}

static int adapt_class(const scree__variant *var, const void *args) {
  (void)var;
  return ((const scree_attention_args *)args)->batch > 65535;
}

/* ---- the launch ------------------------------------------------------------ */

typedef struct strides {
  int64_t qt, qh, kt, kh, vt, vh, ot, oh;
} strides;

static strides strides_of(const scree_attention_args *a) {
  const int64_t d = a->head_dim;
  strides s;
  s.qt = a->q_token_stride ? a->q_token_stride : a->heads_q * d;
  s.kt = a->k_token_stride ? a->k_token_stride : a->heads_kv * d;
  s.vt = a->v_token_stride ? a->v_token_stride : a->heads_kv * d;
  s.ot = a->out_token_stride ? a->out_token_stride : a->heads_q * d;
  s.qh = a->q_head_stride ? a->q_head_stride : d;
  s.kh = a->k_head_stride ? a->k_head_stride : d;
  s.vh = a->v_head_stride ? a->v_head_stride : d;
  s.oh = a->out_head_stride ? a->out_head_stride : d;
  return s;
}

/* Upper bound of the (sequence, q-tile) pairs: what the schedule list and
 * the grid are sized for. */
static int64_t tile_cap(const scree_attention_args *a, int bm) {
  const int64_t by_len = a->batch * scree__cdiv(a->max_seqlen_q, bm);
  const int64_t by_tokens = scree__cdiv(a->total_q, bm) + a->batch;
  return by_len < by_tokens ? by_len : by_tokens;
}

/* The kernels' scalars: the softmax scale in the log2 domain (0 means
 * 1 / sqrt(head_dim)), the window's sides as int, -1 unbounded (or
 * compiled out), and the softcap factors on the raw scores s = q.k,
 * s -> cap_out tanh(cap_in s) with cap_in = scale / softcap and cap_out =
 * softcap / scale (both 0: no softcap), so that scale s becomes softcap
 * tanh(scale s / softcap). */
static void launch_scalars(const scree_attention_args *a, const scree__variant *var,
                           float *scale_log2, int *wl, int *wr, float *cap_in, float *cap_out) {
  const float scale = a->scale != 0.f ? a->scale : (float)(1.0 / sqrt((double)a->head_dim));
  *scale_log2 = (float)((double)scale * 1.4426950408889634);
  /* A subnormal softcap would make cap_in inf, and 0 * inf a NaN score:
   * FLT_MAX saturates tanh just as well. */
  const double cin = a->softcap > 0.f ? (double)scale / a->softcap : 0.0;
  *cap_in = fabs(cin) < FLT_MAX ? (float)cin : (float)copysign(FLT_MAX, cin);
  *cap_out = a->softcap > 0.f ? (float)((double)a->softcap / scale) : 0.f;
  *wl = a->window_left < 0 || a->window_left > 0x7fffffff ? -1 : (int)a->window_left;
  *wr = a->window_right < 0 || a->window_right > 0x7fffffff ? -1 : (int)a->window_right;
  if (!var->v[V_WINDOW]) *wl = *wr = -1;
}

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  const scree_attention_args *a = args;
  const strides s = strides_of(a);
  const int bm = c->v[F_BM], sched = c->v[F_SCHED];
  uint64_t q = a->q, kp = a->k, v = a->v, o = a->out, lse = a->lse;
  uint64_t cu_q = a->cu_seqlens_q, cu_k = a->cu_seqlens_k;
  long long qt = s.qt, qh = s.qh, kt = s.kt, kh = s.kh, vt = s.vt, vh = s.vh, ot = s.ot,
            oh = s.oh, total_q = a->total_q;
  int batch = (int)a->batch, heads_q = (int)a->heads_q, group = (int)(a->heads_q / a->heads_kv);
  float scale_log2, cap_in, cap_out;
  int wl, wr;
  launch_scalars(a, var, &scale_log2, &wl, &wr, &cap_in, &cap_out);
  const int64_t cap = tile_cap(a, bm);
  if (sched != SCHED_GRID && cap * heads_q > 0x7fffffff)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "%lld query tiles x %d heads exceed a grid of 2^31 CTAs",
                       (long long)cap, heads_q);
  int max_qtiles = (int)(sched == SCHED_GRID ? scree__cdiv(a->max_seqlen_q, bm) : cap);
  uint64_t sched_ptr = 0;
  const unsigned block = (unsigned)(32 * c->v[F_WARPS]);
  const unsigned bytes = (unsigned)smem(c, var);
  CUresult r;
  if (sched != SCHED_GRID) {
    CUdeviceptr ws;
    scree_status st = scree__workspace(ctx, stream, (size_t)(2 + 2 * cap) * sizeof(int), &ws);
    if (st) return st;
    sched_ptr = ws;
    int capi = (int)cap;
    void *pp[] = {&cu_q, &cu_k, &batch, &sched_ptr, &capi, &wl, &wr};
    r = ctx->cu->LaunchKernel(k->fn[1], 1, 1, 1, 1024, 1, 1, 0, stream, pp, NULL);
    if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(attention schedule)");
  }
  void *params[] = {&q,  &kp, &v,  &o,  &lse,     &cu_q,  &cu_k,    &qt,
                    &qh, &kt, &kh, &vt, &vh,      &ot,    &oh,      &total_q,
                    &batch, &heads_q, &group, &scale_log2, &wl, &wr, &cap_in, &cap_out,
                    &sched_ptr, &max_qtiles};
  unsigned gx, gy = 1, gz = 1;
  if (sched == SCHED_GRID) {
    gx = (unsigned)max_qtiles;
    gy = (unsigned)heads_q;
    gz = (unsigned)batch;
  } else {
    int64_t work = cap * heads_q;
    if (sched == SCHED_PERSISTENT) {
      const int64_t slots = (int64_t)ctx->info.sm_count * (k->occupancy > 0 ? k->occupancy : 1);
      if (work > slots) work = slots;
    }
    gx = (unsigned)work;
  }
  r = ctx->cu->LaunchKernel(k->fn[0], gx, gy, gz, block, 1, 1, bytes, stream, params, NULL);
  if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(attention)");
  return SCREE_OK;
}

/* ---- the Hopper implementation (kernels/attention_hopper.cu) --------------
 * Fields, check, shared memory and tensor maps shared with paged attention's
 * (ops/attention_hopper.c). */

static size_t hsmem(const scree__config *c, const scree__variant *var) {
  return scree__hopper_smem(c, var->v[V_D]);
}

static int hcheck(const scree__config *c, const scree__variant *var, const scree__target *t,
                  char *why, size_t n) {
  if (!scree__hopper_check(c, var->v[V_DTYPE], var->v[V_D], 0, t, why, n)) return 0;
  if ((var->v[V_CAUSAL] | var->v[V_WINDOW]) & ~1) {
    scree__set_why(why, n, "causal and window are 0 or 1");
    return 0;
  }
  return 1;
}

/* A (head_dim, heads, tokens) map over one packed tensor, boxes of 64
 * columns x 1 head x rows tokens. */
static scree_status tmap(scree_context *ctx, void *map, const char *name, scree_devptr p,
                         scree_dtype dt, int64_t d, int64_t heads, int64_t tokens, int64_t ts,
                         int64_t hs, unsigned rows) {
  const uint64_t dims[3] = {(uint64_t)d, (uint64_t)heads, (uint64_t)(tokens > 0 ? tokens : 1)};
  const uint64_t st[2] = {(uint64_t)hs * 2, (uint64_t)ts * 2};
  const unsigned box[3] = {64, 1, rows};
  return scree__hopper_tmap(ctx, map, name, p, dt, 3, dims, st, box);
}

static scree_status hlaunch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                            const scree__variant *var, const void *args, CUstream stream) {
  const scree_attention_args *a = args;
  if (!ctx->cu->TensorMapEncodeTiled)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "attention impl=hopper needs cuTensorMapEncodeTiled, which this driver "
                       "does not export");
  const strides s = strides_of(a);
  const int bm = 64 * c->v[SCREE__H_CWG], bn = c->v[SCREE__H_BN];
  const int64_t cap = tile_cap(a, bm);
  if (cap * a->heads_q > 0x7fffffff)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "%lld query tiles x %lld heads exceed a grid of 2^31 CTAs",
                       (long long)cap, (long long)a->heads_q);
  struct {
    _Alignas(64) unsigned char b[128];
  } mq, mk, mv;
  /* With no key token k and v may be NULL: their maps then point at q
   * (never read: no key tile is visited). */
  const int nokeys = a->total_k == 0;
  scree_status st;
  if ((st = tmap(ctx, mq.b, "q", a->q, a->dtype, a->head_dim, a->heads_q, a->total_q, s.qt,
                 s.qh, (unsigned)bm)) ||
      (st = tmap(ctx, mk.b, "k", nokeys ? a->q : a->k, a->dtype, a->head_dim,
                 nokeys ? a->heads_q : a->heads_kv, nokeys ? a->total_q : a->total_k,
                 nokeys ? s.qt : s.kt, nokeys ? s.qh : s.kh, (unsigned)bn)) ||
      (st = tmap(ctx, mv.b, "v", nokeys ? a->q : a->v, a->dtype, a->head_dim,
                 nokeys ? a->heads_q : a->heads_kv, nokeys ? a->total_q : a->total_k,
                 nokeys ? s.qt : s.vt, nokeys ? s.qh : s.vh, (unsigned)bn)))
    return st;
  uint64_t o = a->out, lse = a->lse, cu_q = a->cu_seqlens_q, cu_k = a->cu_seqlens_k;
  long long ot = s.ot, oh = s.oh, total_q = a->total_q;
  int batch = (int)a->batch, heads_q = (int)a->heads_q, group = (int)(a->heads_q / a->heads_kv);
  float scale_log2, cap_in, cap_out;
  int wl, wr;
  launch_scalars(a, var, &scale_log2, &wl, &wr, &cap_in, &cap_out);
  CUdeviceptr ws;
  st = scree__workspace(ctx, stream, (size_t)(2 + 2 * cap) * sizeof(int), &ws);
  if (st) return st;
  uint64_t sched_ptr = ws;
  int capi = (int)cap;
  void *pp[] = {&cu_q, &cu_k, &batch, &sched_ptr, &capi, &wl, &wr};
  CUresult r = ctx->cu->LaunchKernel(k->fn[1], 1, 1, 1, 1024, 1, 1, 0, stream, pp, NULL);
  if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(attention schedule)");
  void *params[] = {mq.b,     mk.b,     mv.b,   &o,          &lse, &cu_q, &cu_k,   &ot,
                    &oh,      &total_q, &heads_q, &group,    &scale_log2, &wl, &wr, &cap_in,
                    &cap_out, &sched_ptr};
  const int64_t work = scree__hopper_grid(ctx, k, c, cap * heads_q);
  r = ctx->cu->LaunchKernel(k->fn[0], (unsigned)work, 1, 1, (unsigned)scree__hopper_threads(c),
                            1, 1, (unsigned)hsmem(c, var), stream, params, NULL);
  if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(attention hopper)");
  return SCREE_OK;
}

/* ---- the op's own argument rules ---------------------------------------- */

/* GQA, and counts that agree: tokens need a sequence and a length. */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_attention_args *a = args;
  if (a->heads_q % a->heads_kv)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "heads_q=%lld is not a multiple of heads_kv=%lld", (long long)a->heads_q,
                       (long long)a->heads_kv);
  if (a->total_q > 0 && a->max_seqlen_q == 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "max_seqlen_q is 0 but total_q=%lld tokens are present",
                       (long long)a->total_q);
  if (a->total_k > 0 && a->max_seqlen_k == 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "max_seqlen_k is 0 but total_k=%lld tokens are present",
                       (long long)a->total_k);
  if (a->batch == 0 && (a->total_q || a->total_k))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "batch is 0 but total_q=%lld, total_k=%lld", (long long)a->total_q,
                       (long long)a->total_k);
  return SCREE_OK;
}

/* Validation on: the cu_seqlens, copied to the host and checked. */
static scree_status check_seqlens(scree_context *ctx, const scree_attention_args *a,
                                  CUstream stream) {
  const size_t n = (size_t)a->batch + 1;
  int32_t *h = malloc(2 * n * sizeof *h);
  if (!h) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "validate: cu_seqlens copy");
  const size_t bytes = n * sizeof *h;
  scree_status st = scree__read_device(ctx, stream, h, a->cu_seqlens_q, bytes, "cu_seqlens_q");
  if (!st) st = scree__read_device(ctx, stream, h + n, a->cu_seqlens_k, bytes, "cu_seqlens_k");
  const char *names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
  const int64_t totals[2] = {a->total_q, a->total_k}, maxes[2] = {a->max_seqlen_q, a->max_seqlen_k};
  for (int t = 0; t < 2 && !st; t++) {
    const int32_t *c = h + t * n;
    if (c[0] != 0)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s[0]=%d must be 0", names[t], c[0]);
    for (size_t b = 0; b + 1 < n && !st; b++) {
      const int64_t len = (int64_t)c[b + 1] - c[b];
      if (len < 0)
        st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s decreases at %zu (%d then %d)",
                         names[t], b, c[b], c[b + 1]);
      else if (len > maxes[t])
        st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "sequence %zu has %lld %s tokens, more than max_seqlen_%s=%lld", b,
                         (long long)len, t ? "key" : "query", t ? "k" : "q", (long long)maxes[t]);
    }
    if (!st && c[n - 1] != totals[t])
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s[batch]=%d differs from total_%s=%lld",
                       names[t], c[n - 1], t ? "k" : "q", (long long)totals[t]);
  }
  free(h);
  return st;
}

/* The device-side cu_seqlens with validation on; the variant's flags. */
static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  const scree_attention_args *a = args;
  scree_status st;
  if (ctx->validate && ctx->cu && (st = check_seqlens(ctx, a, stream))) return st;
  var->v[V_CAUSAL] = a->causal != 0;
  /* The window is compiled in only when it bounds something that causal
   * masking does not already (with causal, the right bound is 0 anyway). */
  var->v[V_WINDOW] = a->window_left >= 0 || (a->window_right >= 0 && !a->causal);
  return SCREE_OK;
}

/* ---- buckets and problems --------------------------------------------------- */

/* Bucket: the GQA group and the number of KV heads exact; the longest query
 * and key sequences and the query tokens rounded up to powers of two (the
 * grid grows with heads and tokens). head_dim, dtype, causal and window are
 * the variant. The three rounded ones depend on the batch: batch-invariant
 * mode tunes on max_q 1024, max_k 1024, total_q 16384 (prefill). */
static const scree__bdim dims[] = {
    {"group", 0, 0, 0},    {"heads_kv", 0, 0, 0},     {"max_q", 1, 0, 1024},
    {"max_k", 1, 0, 1024}, {"total_q", 1, 0, 16384}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_attention_args *a = args;
  d[0] = a->heads_kv ? a->heads_q / a->heads_kv : 0;
  d[1] = a->heads_kv;
  d[2] = a->max_seqlen_q;
  d[3] = a->max_seqlen_k;
  d[4] = a->total_q;
}

/* Caps on the problems the tuner builds (docs/kernels/attention.md): a
 * tuning run of about 2 TFLOP at most (a few ms), sequences of at most 16k
 * (longer ones run the same tiles in steady state). */
#define TUNE_MAX_LEN 16384
#define TUNE_MAX_FLOPS 2e12

static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree_attention_args *a = args;
  memset(a, 0, sizeof *a);
  a->heads_kv = b->v[1];
  a->heads_q = b->v[0] * b->v[1];
  a->head_dim = var->v[V_D];
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  a->causal = var->v[V_CAUSAL];
  a->max_seqlen_q = b->v[2];
  a->max_seqlen_k = b->v[3];
  a->total_q = b->v[4];
  a->window_left = var->v[V_WINDOW] ? 256 : -1;
  a->window_right = var->v[V_WINDOW] && !a->causal ? 64 : -1;
  (void)check; /* the problem hook sizes check problems itself */
}

/* Lengths of the tuning batch: the first at the bucket's longest, the rest
 * log-uniform in [longest / 8, longest], until 3/4 of the bucket's tokens;
 * key lengths scaled by max_k / max_q. Deterministic per seed. */
static int gen_tune_lens(const scree_attention_args *a, uint64_t seed, int64_t *lq, int64_t *lk,
                         int cap) {
  int64_t mq = a->max_seqlen_q < TUNE_MAX_LEN ? a->max_seqlen_q : TUNE_MAX_LEN;
  const double kr = (double)a->max_seqlen_k / (double)(a->max_seqlen_q ? a->max_seqlen_q : 1);
  if (mq < 1) mq = 1;
  const int64_t target = a->total_q * 3 / 4 > mq ? a->total_q * 3 / 4 : mq;
  const double per_pair = 4.0 * (double)a->heads_q * (double)a->head_dim * (a->causal ? 0.5 : 1);
  double flops = 0;
  int64_t total = 0;
  int n = 0;
  uint64_t s = seed | 1;
  while (n < cap && total < target) {
    int64_t l = n > 0 ? scree__rand_len(&s, mq) : mq;
    if (total + l > target && n > 0) l = target - total;
    int64_t k = (int64_t)((double)l * kr + 0.5);
    if (k > a->max_seqlen_k) k = a->max_seqlen_k;
    if (k < 0) k = 0;
    const double f = per_pair * (double)l * (double)k;
    if (n > 0 && flops + f > TUNE_MAX_FLOPS) break;
    lq[n] = l;
    lk[n] = k;
    flops += f;
    total += l;
    n++;
  }
  return n;
}

/* The check batch: lengths 0, 1 and just off tile boundaries (63..65,
 * 127..129), q lengths different from k lengths both ways (rows with no
 * key under causal masking), one long sequence, all within the bucket's
 * longest; fewer and shorter when heads x head_dim is large, so the CPU
 * reference stays around a second. */
static int gen_check_lens(const scree_attention_args *a, int64_t *lq, int64_t *lk) {
  static const int64_t q[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 37, 200, 300, 0, 5, 513};
  static const int64_t k[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 80, 150, 300, 9, 0, 513};
  const int big = a->heads_q * a->head_dim > 2048;
  const int n = big ? 12 : 15;
  for (int i = 0; i < n; i++) {
    lq[i] = q[i] < a->max_seqlen_q ? q[i] : a->max_seqlen_q;
    lk[i] = k[i] < a->max_seqlen_k ? k[i] : a->max_seqlen_k;
  }
  return n;
}

#define MAX_SEQS 65536

/* Query-key pairs a window (and causal masking) keeps in one sequence. */
static double window_pairs(const scree_attention_args *a, int64_t lq, int64_t lk) {
  double n = 0;
  for (int64_t i = 0; i < lq; i++) {
    const int64_t p = i + lk - lq;
    int64_t lo = a->window_left >= 0 ? p - a->window_left : 0;
    int64_t hi = a->causal ? p : a->window_right >= 0 ? p + a->window_right : lk - 1;
    if (a->causal && a->window_right >= 0 && p + a->window_right < hi) hi = p + a->window_right;
    if (lo < 0) lo = 0;
    if (hi > lk - 1) hi = lk - 1;
    if (hi >= lo) n += (double)(hi - lo + 1);
  }
  return n;
}

static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  scree_attention_args *a = (scree_attention_args *)p->args;
  memcpy(a, args, sizeof *a);
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  a->head_dim = var->v[V_D];
  a->causal = var->v[V_CAUSAL];
  if (!var->v[V_WINDOW]) a->window_left = a->window_right = -1;
  if (a->heads_kv < 1 || a->heads_q < 1 || a->heads_q % a->heads_kv) {
    scree__set_why(why, why_size, "heads_q=%lld, heads_kv=%lld", (long long)a->heads_q,
                   (long long)a->heads_kv);
    return -1;
  }
  int64_t *lq = malloc(MAX_SEQS * sizeof *lq), *lk = malloc(MAX_SEQS * sizeof *lk);
  if (!lq || !lk) {
    free(lq), free(lk);
    scree__set_why(why, why_size, "out of memory");
    return -1;
  }
  int n;
  if (lens) {
    n = lens->n < MAX_SEQS ? lens->n : MAX_SEQS;
    for (int i = 0; i < n; i++) lq[i] = lens->q[i], lk[i] = lens->k ? lens->k[i] : lens->q[i];
  } else if (check) {
    if (a->max_seqlen_q < 1) a->max_seqlen_q = 1;
    if (a->max_seqlen_k < 1) a->max_seqlen_k = 1;
    n = gen_check_lens(a, lq, lk);
  } else {
    if (a->max_seqlen_q < 1) a->max_seqlen_q = 1;
    if (a->max_seqlen_k < 1) a->max_seqlen_k = a->max_seqlen_q;
    if (a->total_q < a->max_seqlen_q) a->total_q = a->max_seqlen_q;
    n = gen_tune_lens(a, seed, lq, lk, MAX_SEQS);
  }
  int32_t *cq = malloc((size_t)(n + 1) * sizeof *cq), *ck = malloc((size_t)(n + 1) * sizeof *ck);
  if (!cq || !ck) {
    free(lq), free(lk), free(cq), free(ck);
    scree__set_why(why, why_size, "out of memory");
    return -1;
  }
  cq[0] = ck[0] = 0;
  int64_t mq = 0, mk = 0, minq = INT64_MAX;
  double pairs = 0;
  for (int i = 0; i < n; i++) {
    cq[i + 1] = cq[i] + (int32_t)lq[i];
    ck[i + 1] = ck[i] + (int32_t)lk[i];
    if (lq[i] > mq) mq = lq[i];
    if (lk[i] > mk) mk = lk[i];
    if (lq[i] < minq) minq = lq[i];
    pairs += var->v[V_WINDOW] ? window_pairs(a, lq[i], lk[i]) : (double)lq[i] * (double)lk[i];
  }
  a->batch = n;
  a->total_q = cq[n];
  a->total_k = ck[n];
  a->max_seqlen_q = mq;
  a->max_seqlen_k = mk;
  const size_t hd = (size_t)a->head_dim;
  scree__buf *b;
  scree__problem_buf(p, "q", SCREE__BUF_IN, a->dtype, (size_t)a->total_q * (size_t)a->heads_q * hd,
                     offsetof(scree_attention_args, q));
  scree__problem_buf(p, "k", SCREE__BUF_IN, a->dtype, (size_t)a->total_k * (size_t)a->heads_kv * hd,
                     offsetof(scree_attention_args, k));
  scree__problem_buf(p, "v", SCREE__BUF_IN, a->dtype, (size_t)a->total_k * (size_t)a->heads_kv * hd,
                     offsetof(scree_attention_args, v));
  b = scree__problem_buf(p, "cu_seqlens_q", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32, (size_t)n + 1,
                         offsetof(scree_attention_args, cu_seqlens_q));
  b->host = cq;
  b = scree__problem_buf(p, "cu_seqlens_k", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32, (size_t)n + 1,
                         offsetof(scree_attention_args, cu_seqlens_k));
  b->host = ck;
  /* fp32 accumulation, P rounded to the input dtype before P.V, the output
   * rounded once: about two roundings of the dtype on values of order 1. */
  b = scree__problem_buf(p, "out", SCREE__BUF_OUT, a->dtype,
                         (size_t)a->total_q * (size_t)a->heads_q * hd,
                         offsetof(scree_attention_args, out));
  b->rtol = a->dtype == SCREE_DTYPE_BF16 ? 2e-2 : 4e-3;
  b->atol = a->dtype == SCREE_DTYPE_BF16 ? 2e-2 : 4e-3;
  /* The LSE is computed from fp32 scores: only the exp2/log2 and fp32
   * summation errors remain. */
  b = scree__problem_buf(p, "lse", SCREE__BUF_OUT, SCREE_DTYPE_FP32,
                         (size_t)a->total_q * (size_t)a->heads_q,
                         offsetof(scree_attention_args, lse));
  b->rtol = 1e-4;
  b->atol = 2e-3;
  /* The usual count, 4 * heads * head_dim * sum(Lq * Lk), halved when
   * causal (FlashAttention's convention); under a window, the pairs the
   * window keeps. */
  p->flops = 4.0 * (double)a->heads_q * (double)hd * pairs *
             (a->causal && !var->v[V_WINDOW] ? 0.5 : 1);
  p->bytes = (double)(2 * a->total_q * a->heads_q + 2 * a->total_k * a->heads_kv) * (double)hd * 2;
  snprintf(p->desc, sizeof p->desc,
           "%d sequences, %lld query and %lld key tokens, lengths %lld..%lld, %lldx%lld heads of %lld",
           n, (long long)a->total_q, (long long)a->total_k, (long long)(n ? minq : 0),
           (long long)mq, (long long)a->heads_q, (long long)a->heads_kv, (long long)a->head_dim);
  free(lq);
  free(lk);
  return 0;
}

/* ---- the CPU reference ----------------------------------------------------
 * Varlen attention forward in double accumulation: the truth the kernels
 * are tested against.
 *
 * q, k, v, out: host copies laid out as the device buffers (the args' strides
 * apply, 0 meaning the packed default); cu_q, cu_k: host copies of the
 * cu_seqlens (batch + 1 entries). Writes every token row of out (all heads) and,
 * if lse is not NULL, lse[h * total_q + t] (natural log; -inf for a row with no key).
 * The pointer fields of `a` are ignored.
 *
 * The hook (op.h's SCREE__REFERENCE) takes the problem's buffers in the
 * order of problem (above): q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse.
 *
 * The backward's reference (ops/attention_backward_ref.c) shares the row
 * rule, scree__attention_row_bounds (ops/attention_ref.h).
 *
 * Semantics (scree.h): per sequence b with Lq queries and Lk keys, query row
 * i sits at key position p = i + Lk - Lq (bottom-right alignment) and sees
 * the keys j in [p - window_left, p + min(window_right, 0 if causal)] of
 * [0, Lk) (a negative window side is unbounded); query head h reads kv head
 * h / (heads_q / heads_kv). The score of key j is x = scale * q . k_j, or
 * softcap * tanh(x / softcap) with a softcap > 0. A row with no visible key
 * gets zeros and -inf.
 *
 * How: the work is split into items of (sequence, kv head, block of up to
 * REF_ROWS query rows). An item converts the keys its rows can see (the
 * union of the rows' intervals, which only move right as i grows) to double
 * once, K in panels of KB keys, then for each query head of the group and
 * each row computes scores only for the panels that hold the row's visible
 * interval, and the softmax and P.V over that interval alone. Each score is
 * q[c] * k[c] summed in order c = 0, 1, ... and each output element
 * p_j * v[j][c] summed in order j, as plain loops would; explicit two-wide
 * vectors compute several of them side by side. Items run on
 * scree__parallel_for when the batch is big enough to pay for threads
 * (about 20 GFLOP/s on two cores). If scratch memory cannot be allocated,
 * the rows are written as NaN so that any comparison fails loudly.
 */
/* Query rows per work item: enough that converting the item's keys is a
 * small part of its cost, few enough that a long sequence splits over the
 * threads. */
#define REF_ROWS 128
/* Below this many multiply-adds the batch runs on the calling thread. */
#define REF_SERIAL_WORK (1 << 22)

typedef struct ref_item {
  int64_t b, g;      /* sequence, kv head */
  int64_t r0, r1;    /* query rows [r0, r1) of the sequence */
  int64_t klo, khi;  /* keys any of these rows can see (klo > khi: none) */
  double cost;
} ref_item;

typedef struct ref_job {
  const scree_attention_args *a;
  const void *q, *k, *v;
  const int32_t *cu_q, *cu_k;
  void *out;
  float *lse;
  strides s;
  int64_t d, group;
  double scale, cap; /* cap: the softcap, 0 for none */
  ref_item *items;
} ref_job;

/* Writes rows [r0, r1) of the item's sequence, query head h, with `val`
 * and their lse with `lse_val` (zeros and -inf for rows that see no key,
 * NaN on failure). */
static void fill_rows(const ref_job *j, const ref_item *it, int64_t r0,
                      int64_t r1, int64_t h, double val, float lse_val) {
  const scree_attention_args *a = j->a;
  const int64_t q0 = j->cu_q[it->b];
  for (int64_t i = r0; i < r1; i++) {
    const int64_t t = q0 + i;
    for (int64_t c = 0; c < j->d; c++)
      scree__store_elem(j->out, a->dtype, (size_t)(t * j->s.ot + h * j->s.oh + c), val);
    if (j->lse) j->lse[h * a->total_q + t] = lse_val;
  }
}

/* Two doubles: GCC and Clang vector extensions, SSE2 or NEON registers
 * (or pairs of scalars elsewhere). Every score and output element still
 * sums its terms one by one in the order of the plain loops: the vectors
 * only compute several of them side by side. */
typedef double v2d __attribute__((vector_size(16)));
static inline v2d ld2(const double *p) {
  v2d v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void st2(double *p, v2d v) { memcpy(p, &v, sizeof v); }

/* Keys per panel of the packed K: kp[(blk * d + c) * KB + lane] holds
 * element c of key blk * KB + lane, so the score loop reads KB keys'
 * element c from one contiguous run. */
#define KB 16

/* s[0 .. KB * (b1 - b0)) = q . key for the keys of panels [b0, b1). */
static void scores(const double *kp, const double *q, int64_t d, int64_t b0,
                   int64_t b1, double *s) {
  for (int64_t blk = b0; blk < b1; blk++) {
    v2d a0 = {0, 0}, a1 = {0, 0}, a2 = {0, 0}, a3 = {0, 0};
    v2d a4 = {0, 0}, a5 = {0, 0}, a6 = {0, 0}, a7 = {0, 0};
    const double *p = kp + blk * d * KB;
    for (int64_t c = 0; c < d; c++, p += KB) {
      const v2d qc = {q[c], q[c]};
      a0 += qc * ld2(p);
      a1 += qc * ld2(p + 2);
      a2 += qc * ld2(p + 4);
      a3 += qc * ld2(p + 6);
      a4 += qc * ld2(p + 8);
      a5 += qc * ld2(p + 10);
      a6 += qc * ld2(p + 12);
      a7 += qc * ld2(p + 14);
    }
    double *o = s + (blk - b0) * KB;
    st2(o, a0), st2(o + 2, a1), st2(o + 4, a2), st2(o + 6, a3);
    st2(o + 8, a4), st2(o + 10, a5), st2(o + 12, a6), st2(o + 14, a7);
  }
}

/* acc[0 .. d) += e[jj] * vr[jj][0 .. d) for jj = 0, 1, ... n - 1, in order. */
static void weighted_sum(const double *e, const double *vr, int64_t n, int64_t d,
                         double *acc) {
  int64_t jj = 0;
  for (; jj + 4 <= n; jj += 4) {
    const double *v0 = vr + jj * d, *v1 = v0 + d, *v2 = v1 + d, *v3 = v2 + d;
    const v2d e0 = {e[jj], e[jj]}, e1 = {e[jj + 1], e[jj + 1]},
              e2 = {e[jj + 2], e[jj + 2]}, e3 = {e[jj + 3], e[jj + 3]};
    int64_t c = 0;
    for (; c + 2 <= d; c += 2) {
      v2d x = ld2(acc + c);
      x += e0 * ld2(v0 + c);
      x += e1 * ld2(v1 + c);
      x += e2 * ld2(v2 + c);
      x += e3 * ld2(v3 + c);
      st2(acc + c, x);
    }
    for (; c < d; c++) {
      double x = acc[c];
      x += e[jj] * v0[c];
      x += e[jj + 1] * v1[c];
      x += e[jj + 2] * v2[c];
      x += e[jj + 3] * v3[c];
      acc[c] = x;
    }
  }
  for (; jj < n; jj++)
    for (int64_t c = 0; c < d; c++) acc[c] += e[jj] * vr[jj * d + c];
}

static void run_item(void *user, int idx) {
  const ref_job *j = user;
  const scree_attention_args *a = j->a;
  const ref_item *it = &j->items[idx];
  const int64_t d = j->d;
  const int64_t q0 = j->cu_q[it->b], k0 = j->cu_k[it->b];
  const int64_t lq = j->cu_q[it->b + 1] - q0, lk = j->cu_k[it->b + 1] - k0;
  const int64_t h0 = it->g * j->group, h1 = h0 + j->group;

  if (it->klo > it->khi) { /* no row of this item sees a key */
    for (int64_t h = h0; h < h1; h++) fill_rows(j, it, it->r0, it->r1, h, 0.0, -INFINITY);
    return;
  }
  /* The item's keys [klo, khi], as double: K in panels (zero past the
   * last key), V as rows. */
  const int64_t nk = it->khi - it->klo + 1, nblk = (nk + KB - 1) / KB;
  double *kp = calloc((size_t)(nblk * KB * d), sizeof(double));
  double *vv = malloc(sizeof(double) * (size_t)(nk * d));
  double *s = malloc(sizeof(double) * (size_t)(nblk * KB));
  double *acc = malloc(sizeof(double) * (size_t)d);
  double *qr = malloc(sizeof(double) * (size_t)d);
  if (!kp || !vv || !s || !acc || !qr) {
    for (int64_t h = h0; h < h1; h++) fill_rows(j, it, it->r0, it->r1, h, NAN, NAN);
    goto done;
  }
  for (int64_t jj = 0; jj < nk; jj++) {
    const int64_t tk = k0 + it->klo + jj;
    double *kd = kp + (jj / KB) * d * KB + jj % KB;
    for (int64_t c = 0; c < d; c++) {
      kd[c * KB] = scree__load_elem(j->k, a->dtype, (size_t)(tk * j->s.kt + it->g * j->s.kh + c));
      vv[jj * d + c] =
          scree__load_elem(j->v, a->dtype, (size_t)(tk * j->s.vt + it->g * j->s.vh + c));
    }
  }
  for (int64_t h = h0; h < h1; h++) {
    for (int64_t i = it->r0; i < it->r1; i++) {
      const int64_t t = q0 + i;
      int64_t lo, hi;
      scree__attention_row_bounds(a, i, lq, lk, &lo, &hi);
      scree__attention_clamp_bounds(lk, &lo, &hi);
      if (lo > hi) {
        fill_rows(j, it, i, i + 1, h, 0.0, -INFINITY);
        continue;
      }
      /* Keys [off, off + n) of the item; scores for their whole panels. */
      const int64_t n = hi - lo + 1, off = lo - it->klo;
      for (int64_t c = 0; c < d; c++)
        qr[c] = scree__load_elem(j->q, a->dtype, (size_t)(t * j->s.qt + h * j->s.qh + c));
      scores(kp, qr, d, off / KB, (off + n - 1) / KB + 1, s);
      double *sr = s + off % KB;
      double m = -INFINITY;
      for (int64_t jj = 0; jj < n; jj++) {
        sr[jj] *= j->scale;
        if (j->cap > 0) sr[jj] = j->cap * tanh(sr[jj] / j->cap);
        if (sr[jj] > m) m = sr[jj];
      }
      double sum = 0;
      for (int64_t jj = 0; jj < n; jj++) sum += sr[jj] = exp(sr[jj] - m);
      for (int64_t c = 0; c < d; c++) acc[c] = 0;
      weighted_sum(sr, vv + off * d, n, d, acc);
      for (int64_t c = 0; c < d; c++)
        scree__store_elem(j->out, a->dtype, (size_t)(t * j->s.ot + h * j->s.oh + c), acc[c] / sum);
      if (j->lse) j->lse[h * a->total_q + t] = (float)(m + log(sum));
    }
  }
done:
  free(kp), free(vv), free(s), free(acc), free(qr);
}

static int cmp_cost(const void *x, const void *y) {
  const double a = ((const ref_item *)x)->cost, b = ((const ref_item *)y)->cost;
  return a > b ? -1 : a < b;
}

static void ref_attention(const scree_attention_args *a, const void *q,
                          const void *k, const void *v, const int32_t *cu_q,
                          const int32_t *cu_k, void *out, float *lse) {
  if (a->batch <= 0 || a->heads_q <= 0 || a->heads_kv <= 0 || a->head_dim <= 0) return;
  ref_job j = {.a = a, .q = q, .k = k, .v = v, .cu_q = cu_q, .cu_k = cu_k,
               .out = out, .lse = lse, .d = a->head_dim,
               .group = a->heads_q / a->heads_kv};
  if (j.group < 1) j.group = 1;
  const int64_t d = a->head_dim;
  j.s = strides_of(a);
  j.scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)d);
  j.cap = a->softcap > 0.f ? (double)a->softcap : 0.0;

  /* Count, then build the work items. */
  int64_t n = 0;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t lq = (int64_t)cu_q[b + 1] - cu_q[b];
    if (lq > 0) n += (lq + REF_ROWS - 1) / REF_ROWS;
  }
  n *= a->heads_kv;
  if (n == 0) return;
  /* More items than an int (2^31 blocks of rows) is far beyond what a CPU
   * reference can compute; like a failed allocation it writes NaN. */
  j.items = n <= INT32_MAX ? malloc(sizeof(ref_item) * (size_t)n) : NULL;
  if (!j.items) {
    /* NaN rows everywhere so that any comparison against this reference
     * fails. */
    for (int64_t t = 0; t < a->total_q; t++)
      for (int64_t h = 0; h < a->heads_q; h++) {
        for (int64_t c = 0; c < d; c++)
          scree__store_elem(out, a->dtype, (size_t)(t * j.s.ot + h * j.s.oh + c), NAN);
        if (lse) lse[h * a->total_q + t] = NAN;
      }
    return;
  }
  int64_t m = 0;
  double work = 0;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t lq = (int64_t)cu_q[b + 1] - cu_q[b];
    const int64_t lk = (int64_t)cu_k[b + 1] - cu_k[b];
    for (int64_t r0 = 0; r0 < lq; r0 += REF_ROWS) {
      const int64_t r1 = r0 + REF_ROWS < lq ? r0 + REF_ROWS : lq;
      int64_t klo, khi, lo1, hi1;
      scree__attention_row_bounds(a, r0, lq, lk, &klo, &hi1);
      scree__attention_row_bounds(a, r1 - 1, lq, lk, &lo1, &khi);
      scree__attention_clamp_bounds(lk, &klo, &khi);
      const double cost = (double)(r1 - r0) * (double)(khi >= klo ? khi - klo + 1 : 1) *
                          (double)j.group * (double)d;
      for (int64_t g = 0; g < a->heads_kv; g++)
        j.items[m++] = (ref_item){.b = b, .g = g, .r0 = r0, .r1 = r1,
                                  .klo = klo, .khi = khi, .cost = cost};
      work += cost * (double)a->heads_kv;
    }
  }
  if (work < REF_SERIAL_WORK) {
    for (int64_t i = 0; i < m; i++) run_item(&j, (int)i);
  } else {
    qsort(j.items, (size_t)m, sizeof(ref_item), cmp_cost); /* longest first */
    scree__parallel_for((int)m, 0, run_item, &j);
  }
  free(j.items);
}

SCREE__REFERENCE(attention) {
  ref_attention(args, host[0], host[1], host[2], host[3], host[4], host[5], host[6]);
}

/* ---- benchmark entries ----------------------------------------------------
 * The headline batch (bench/attention_configs.json has all six
 * configurations; build/bench/bench_attention runs them), and a sliding
 * window. */

#define HEADLINE_LENS \
  "lens=340,618,900,886,1136,501,2048,840,550,319,389,402,1025,771,468,888"
static const char *const bench[] = {
    "dtype=fp16,head_dim=64,causal=1,window=0 "
    "heads_q=16,heads_kv=16,head_dim=64,window_left=-1,window_right=-1 " HEADLINE_LENS,
    "dtype=fp16,head_dim=64,causal=0,window=0 "
    "heads_q=16,heads_kv=16,head_dim=64,window_left=-1,window_right=-1 " HEADLINE_LENS,
    "dtype=bf16,head_dim=128,causal=1,window=1 "
    "heads_q=32,heads_kv=8,head_dim=128,window_left=1024,window_right=-1 "
    "lens=4096,4096,2048,1024,1000,500",
    NULL,
};

static const scree__impl impls[] = {
    {SCREE__IMPL("generic", "attention.cu", 80, 0, "scree_attention_fwd",
                 "scree_attention_schedule"),
     .nfields = 6, .fields = fields, .check = check, .smem = smem, .threads = threads,
     .adapt = adapt, .launch = launch},
    {SCREE__IMPL("hopper", "attention_hopper.cu", 90, 90, "scree_attention_hopper",
                 "scree_attention_schedule"),
     .arch_specific = 1, .nfields = SCREE__H_NFIELDS, .fields = scree__hopper_fields,
     .check = hcheck, .smem = hsmem, .threads = scree__hopper_threads, .launch = hlaunch},
};

SCREE__DEFINE_OP(attention, .validate = validate, .validate_buffers = validate_buffers,
                 .bucket = bucket, .adapt_class = adapt_class);
