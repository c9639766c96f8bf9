/* attention.c - varlen attention forward, the host side: config space and
 * constraints, argument checks, the launch (tile schedule and main kernel),
 * buckets, and the problems it is tuned and checked on. The kernel is
 * kernels/attention.cu; the CPU reference ops/attention_ref.c;
 * docs/kernels/attention.md describes the algorithm and the choices. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

enum { F_BM, F_BN, F_WARPS, F_STAGES, F_QREG, F_SCHED };
enum { V_DTYPE, V_D, V_CAUSAL, V_WINDOW };
enum { H_BN, H_CWG, H_STAGES, H_SCHED, H_OVL, H_NFIELDS }; /* impl=hopper */

static const scree__field fields[] = {
    {"bm", "SCREE_BM", 2, {64, 128}},
    {"bn", "SCREE_BN", 3, {32, 64, 128}},
    {"warps", "SCREE_WARPS", 2, {4, 8}},
    {"stages", "SCREE_STAGES", 3, {1, 2, 3}},
    {"qreg", "SCREE_QREG", 2, {0, 1}},
    {"sched", "SCREE_SCHED", 3, {0, 1, 2}},
};
static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 2, {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16}},
    {"head_dim", "SCREE_HEAD_DIM", 0, 128, 5, {32, 64, 96, 128, 256}},
    {"causal", "SCREE_CAUSAL", 0, 0, 2, {0, 1}},
    {"window", "SCREE_WINDOW", 0, 0, 2, {0, 1}},
};

/* Schedules (docs/kernels/attention.md): 0 one CTA per (q-tile, head,
 * sequence) in grid order; 1 a tile list sorted longest first by a prep
 * kernel, one CTA per (tile, head); 2 the same list on a persistent grid
 * taking work from a counter. */
enum { SCHED_GRID = 0, SCHED_LPT = 1, SCHED_PERSISTENT = 2 };

static int is_head_dim(int d) { return d == 32 || d == 64 || d == 96 || d == 128 || d == 256; }

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
  if (var->v[V_DTYPE] != SCREE_DTYPE_FP16 && var->v[V_DTYPE] != SCREE_DTYPE_BF16) {
    scree__set_why(why, n, "dtype code %d is not fp16 or bf16", var->v[V_DTYPE]);
    return 0;
  }
  if (!is_head_dim(d)) {
    scree__set_why(why, n, "head_dim=%d is not 32, 64, 96, 128 or 256", d);
    return 0;
  }
  if ((var->v[V_CAUSAL] | var->v[V_WINDOW]) & ~1) {
    scree__set_why(why, n, "causal and window are 0 or 1");
    return 0;
  }
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
  const size_t bytes = smem(c, var);
  if (bytes > (size_t)t->smem_optin) {
    scree__set_why(why, n, "needs %zu bytes of shared memory; sm_%d allows %d", bytes, t->sm,
                   t->smem_optin);
    return 0;
  }
  return 1;
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
     * of the best and without it up to 6% slower. */
    out->impl = 1;
    out->v[H_BN] = 128;
    out->v[H_CWG] = 2;
    out->v[H_STAGES] = 2;
    out->v[H_SCHED] = 2;
    out->v[H_OVL] = d == 128;
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

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Upper bound of the (sequence, q-tile) pairs: what the schedule list and
 * the grid are sized for. */
static int64_t tile_cap(const scree_attention_args *a, int bm) {
  const int64_t by_len = a->batch * cdiv(a->max_seqlen_q, bm);
  const int64_t by_tokens = cdiv(a->total_q, bm) + a->batch;
  return by_len < by_tokens ? by_len : by_tokens;
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
  const float scale = a->scale != 0.f ? a->scale : (float)(1.0 / sqrt((double)a->head_dim));
  float scale_log2 = (float)((double)scale * 1.4426950408889634);
  int wl = a->window_left < 0 || a->window_left > 0x7fffffff ? -1 : (int)a->window_left;
  int wr = a->window_right < 0 || a->window_right > 0x7fffffff ? -1 : (int)a->window_right;
  if (!var->v[V_WINDOW]) wl = wr = -1;
  const int64_t cap = tile_cap(a, bm);
  if (sched != SCHED_GRID && cap * heads_q > 0x7fffffff)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "%lld query tiles x %d heads exceed a grid of 2^31 CTAs",
                       (long long)cap, heads_q);
  int max_qtiles = (int)(sched == SCHED_GRID ? cdiv(a->max_seqlen_q, bm) : cap);
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
                    &batch, &heads_q, &group, &scale_log2, &wl, &wr, &sched_ptr, &max_qtiles};
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

/* ---- the Hopper implementation (kernels/attention_hopper.cu) -------------- */


static const scree__field hfields[H_NFIELDS] = {
    {"bn", "SCREE_BN", 2, {64, 128}},
    {"cwg", "SCREE_CWG", 3, {1, 2, 3}},
    {"stages", "SCREE_STAGES", 3, {2, 3, 4}},
    {"sched", "SCREE_SCHED", 2, {1, 2}},
    {"ovl", "SCREE_OVL", 2, {0, 1}},
};

/* Mirrors the kernel's layout: Q (64 * cwg rows), STAGES K and V tiles,
 * 1024 bytes of alignment slack, the mbarriers and two work slots. */
static size_t hsmem(const scree__config *c, const scree__variant *var) {
  const size_t row = (size_t)var->v[V_D] * 2;
  return row * (size_t)(64 * c->v[H_CWG] + 2 * c->v[H_STAGES] * c->v[H_BN]) +
         (size_t)8 * (size_t)(7 + 4 * c->v[H_STAGES]) + 16 + 1024;
}

static int hthreads(const scree__config *c) { return 128 * (c->v[H_CWG] + 1); }

/* Mirrors the static_asserts of kernels/attention_hopper.cu. */
static int hcheck(const scree__config *c, const scree__variant *var, const scree__target *t,
                  char *why, size_t n) {
  const int bn = c->v[H_BN], cwg = c->v[H_CWG], stages = c->v[H_STAGES], d = var->v[V_D];
  if (var->v[V_DTYPE] != SCREE_DTYPE_FP16 && var->v[V_DTYPE] != SCREE_DTYPE_BF16) {
    scree__set_why(why, n, "dtype code %d is not fp16 or bf16", var->v[V_DTYPE]);
    return 0;
  }
  if (d != 64 && d != 128) {
    scree__set_why(why, n, "head_dim=%d: the hopper implementation covers 64 and 128 (the "
                   "generic one serves the others)", d);
    return 0;
  }
  if ((var->v[V_CAUSAL] | var->v[V_WINDOW]) & ~1) {
    scree__set_why(why, n, "causal and window are 0 or 1");
    return 0;
  }
  if ((bn != 64 && bn != 128) || cwg < 1 || cwg > 3 || stages < 2 || stages > 4 ||
      (c->v[H_SCHED] != 1 && c->v[H_SCHED] != 2) || (c->v[H_OVL] & ~1)) {
    scree__set_why(why, n, "bn=%d, cwg=%d, stages=%d, sched=%d, ovl=%d: bn is 64 or 128, cwg "
                   "1..3, stages 2..4, sched 1 or 2, ovl 0 or 1", bn, cwg, stages,
                   c->v[H_SCHED], c->v[H_OVL]);
    return 0;
  }
  /* The consumers' registers: 65536 less the producer's 24 a thread, shared
   * by cwg warpgroups (at most 240 a thread); the accumulators of S, O and
   * P plus about 48 of addresses and softmax state must fit. */
  int regs = (65536 / 128 - 24) / cwg / 8 * 8;
  if (regs > 240) regs = 240;
  const int acc = bn / 2 + d / 2 + bn / 4;
  if (acc + 48 > regs) {
    scree__set_why(why, n, "bn=%d, head_dim=%d: %d accumulator registers a thread, past the "
                   "%d a consumer of %d warpgroups has", bn, d, acc, regs - 48, cwg);
    return 0;
  }
  const size_t bytes = hsmem(c, var);
  if (bytes > (size_t)t->smem_optin) {
    scree__set_why(why, n, "needs %zu bytes of shared memory; sm_%d allows %d", bytes, t->sm,
                   t->smem_optin);
    return 0;
  }
  if (!t->tensor_maps) {
    scree__set_why(why, n, "the driver has no cuTensorMapEncodeTiled (tensor maps)");
    return 0;
  }
  return 1;
}

/* cuTensorMapEncodeTiled's enums (cuda.h). */
#define TMAP_FP16 6
#define TMAP_BF16 9
#define TMAP_SWIZZLE_128B 3
#define TMAP_L2_256B 3

/* A (head_dim, heads, tokens) map over one packed tensor, boxes of 64
 * columns x 1 head x rows tokens, 128-byte swizzle, zeros past the end. */
static scree_status tmap(scree_context *ctx, void *map, const char *name, scree_devptr p,
                         scree_dtype dt, int64_t d, int64_t heads, int64_t tokens, int64_t ts,
                         int64_t hs, unsigned rows) {
  const uint64_t dims[3] = {(uint64_t)d, (uint64_t)heads, (uint64_t)(tokens > 0 ? tokens : 1)};
  const uint64_t st[2] = {(uint64_t)hs * 2, (uint64_t)ts * 2};
  const unsigned box[3] = {64, 1, rows}, es[3] = {1, 1, 1};
  CUresult r = ctx->cu->TensorMapEncodeTiled(map, dt == SCREE_DTYPE_BF16 ? TMAP_BF16 : TMAP_FP16,
                                             3, (void *)(uintptr_t)p, dims, st, box, es, 0,
                                             TMAP_SWIZZLE_128B, TMAP_L2_256B, 0);
  if (r) {
    char what[64];
    snprintf(what, sizeof what, "cuTensorMapEncodeTiled(%s)", name);
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, what);
  }
  return SCREE_OK;
}

static scree_status hlaunch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                            const scree__variant *var, const void *args, CUstream stream) {
  const scree_attention_args *a = args;
  if (!ctx->cu->TensorMapEncodeTiled)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "attention impl=hopper needs cuTensorMapEncodeTiled, which this driver "
                       "does not export");
  const strides s = strides_of(a);
  const int bm = 64 * c->v[H_CWG], bn = c->v[H_BN], sched = c->v[H_SCHED];
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
  const float scale = a->scale != 0.f ? a->scale : (float)(1.0 / sqrt((double)a->head_dim));
  float scale_log2 = (float)((double)scale * 1.4426950408889634);
  int wl = a->window_left < 0 || a->window_left > 0x7fffffff ? -1 : (int)a->window_left;
  int wr = a->window_right < 0 || a->window_right > 0x7fffffff ? -1 : (int)a->window_right;
  if (!var->v[V_WINDOW]) wl = wr = -1;
  CUdeviceptr ws;
  st = scree__workspace(ctx, stream, (size_t)(2 + 2 * cap) * sizeof(int), &ws);
  if (st) return st;
  uint64_t sched_ptr = ws;
  int capi = (int)cap;
  void *pp[] = {&cu_q, &cu_k, &batch, &sched_ptr, &capi, &wl, &wr};
  CUresult r = ctx->cu->LaunchKernel(k->fn[1], 1, 1, 1, 1024, 1, 1, 0, stream, pp, NULL);
  if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(attention schedule)");
  void *params[] = {mq.b, mk.b, mv.b, &o,  &lse,        &cu_q, &cu_k, &ot,
                    &oh,  &total_q, &heads_q, &group, &scale_log2, &wl, &wr, &sched_ptr};
  int64_t work = cap * heads_q;
  if (sched == 2) {
    const int64_t slots = (int64_t)ctx->info.sm_count * (k->occupancy > 0 ? k->occupancy : 1);
    if (work > slots) work = slots;
  }
  r = ctx->cu->LaunchKernel(k->fn[0], (unsigned)work, 1, 1, (unsigned)hthreads(c), 1, 1,
                            (unsigned)hsmem(c, var), stream, params, NULL);
  if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(attention hopper)");
  return SCREE_OK;
}

/* ---- argument checks ------------------------------------------------------- */

/* Checks one [tokens, heads, head_dim] tensor's strides: positive multiples
 * of 8 elements, and no two elements at one address. Fills its byte range. */
static scree_status check_tensor(scree_context *ctx, const char *name, scree_devptr p,
                                 int64_t tokens, int64_t heads, int64_t d, int64_t ts,
                                 int64_t hs, uint64_t *lo, uint64_t *hi) {
  const scree_status pst = scree__arg_ptr(ctx, name, p, 16); /* 16-byte copies */
  if (pst) return pst;
  if (ts <= 0 || hs <= 0 || ts % 8 || hs % 8)
    return scree__fail(ctx, SCREE_ERROR_MISALIGNED,
                       "%s strides (token %lld, head %lld elements) must be positive multiples "
                       "of 8",
                       name, (long long)ts, (long long)hs);
  /* Dimensions sorted by stride: each stride must clear the extent of the
   * one below it (extents of 1 do not count). */
  int64_t st[3] = {1, hs, ts}, ex[3] = {d, heads, tokens};
  if (st[1] > st[2]) {
    int64_t t = st[1];
    st[1] = st[2], st[2] = t;
    t = ex[1], ex[1] = ex[2], ex[2] = t;
  }
  int64_t reach = d; /* elements covered by the dimensions so far */
  for (int i = 1; i < 3; i++) {
    if (ex[i] <= 1) continue;
    if (st[i] < reach)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                         "%s strides (token %lld, head %lld) overlap: two elements of %s share "
                         "an address",
                         name, (long long)ts, (long long)hs, name);
    reach = st[i] * (ex[i] - 1) + reach;
  }
  const __int128 last = ((__int128)(tokens > 0 ? tokens - 1 : 0) * ts +
                         (__int128)(heads - 1) * hs + d) * 2;
  if (last > (__int128)(UINT64_MAX - p))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s extends past the address space",
                       name);
  *lo = p;
  *hi = p + (uint64_t)last;
  return SCREE_OK;
}

/* SCREE_VALIDATE: the cu_seqlens, copied to the host and checked. */
static scree_status check_seqlens(scree_context *ctx, const scree_attention_args *a,
                                  CUstream stream) {
  const size_t n = (size_t)a->batch + 1;
  int32_t *h = malloc(2 * n * sizeof *h);
  if (!h) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "validate: cu_seqlens copy");
  const int pushed = scree__ctx_enter(ctx);
  CUresult r = ctx->cu->StreamSynchronize(stream);
  if (!r) r = ctx->cu->MemcpyDtoH(h, a->cu_seqlens_q, n * sizeof *h);
  if (!r) r = ctx->cu->MemcpyDtoH(h + n, a->cu_seqlens_k, n * sizeof *h);
  scree__ctx_leave(ctx, pushed);
  scree_status st = SCREE_OK;
  if (r) st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "validate: reading cu_seqlens");
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

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip) {
  const scree_attention_args *a = args;
  if (a->dtype != SCREE_DTYPE_FP16 && a->dtype != SCREE_DTYPE_BF16)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED, "dtype=%d (%s) is not fp16 or bf16",
                       (int)a->dtype, scree_dtype_name(a->dtype));
  if (a->head_dim > 0x7fffffff || !is_head_dim((int)a->head_dim))
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "head_dim=%lld is not supported (32, 64, 96, 128 or 256)",
                       (long long)a->head_dim);
  if (a->heads_q < 1 || a->heads_kv < 1 || a->heads_q > 65535)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "heads_q=%lld and heads_kv=%lld must be in [1, 65535]",
                       (long long)a->heads_q, (long long)a->heads_kv);
  if (a->heads_q % a->heads_kv)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "heads_q=%lld is not a multiple of heads_kv=%lld", (long long)a->heads_q,
                       (long long)a->heads_kv);
  const int64_t lim = 0x7fffffff; /* cu_seqlens are int32 */
  const struct {
    const char *name;
    int64_t v;
  } counts[] = {{"batch", a->batch},           {"total_q", a->total_q},
                {"total_k", a->total_k},       {"max_seqlen_q", a->max_seqlen_q},
                {"max_seqlen_k", a->max_seqlen_k}};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
    if (counts[i].v < 0 || counts[i].v > lim)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s=%lld must be in [0, 2^31)",
                         counts[i].name, (long long)counts[i].v);
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
  if (a->window_left < -1 || a->window_right < -1)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "window_left=%lld, window_right=%lld: -1 (unbounded) or >= 0",
                       (long long)a->window_left, (long long)a->window_right);
  if (!isfinite(a->scale))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "scale=%g is not finite",
                       (double)a->scale);
  if (a->batch == 0 || a->total_q == 0) { /* no query rows: nothing to write */
    *skip = 1;
    return SCREE_OK;
  }
  if (!a->cu_seqlens_q || !a->cu_seqlens_k)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens_%s is NULL",
                       a->cu_seqlens_q ? "k" : "q");
  if (a->cu_seqlens_q % 4 || a->cu_seqlens_k % 4)
    return scree__fail(ctx, SCREE_ERROR_MISALIGNED, "cu_seqlens must be 4-byte aligned (int32)");
  const strides s = strides_of(a);
  uint64_t ql, qhh, kl, khh, vl, vhh, ol, ohh;
  scree_status st;
  if ((st = check_tensor(ctx, "q", a->q, a->total_q, a->heads_q, a->head_dim, s.qt, s.qh, &ql, &qhh)) ||
      (st = check_tensor(ctx, "out", a->out, a->total_q, a->heads_q, a->head_dim, s.ot, s.oh, &ol,
                         &ohh)))
    return st;
  if (a->total_k > 0 &&
      ((st = check_tensor(ctx, "k", a->k, a->total_k, a->heads_kv, a->head_dim, s.kt, s.kh, &kl,
                          &khh)) ||
       (st = check_tensor(ctx, "v", a->v, a->total_k, a->heads_kv, a->head_dim, s.vt, s.vh, &vl,
                          &vhh))))
    return st;
  if (a->total_k == 0) kl = khh = vl = vhh = 0;
  if (scree__overlaps(ol, ohh, ql, qhh) || scree__overlaps(ol, ohh, kl, khh) || scree__overlaps(ol, ohh, vl, vhh))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "out=0x%llx overlaps q, k or v: the output must have its own memory",
                       (unsigned long long)a->out);
  if (a->lse) {
    if (a->lse % 4)
      return scree__fail(ctx, SCREE_ERROR_MISALIGNED, "lse=0x%llx is not 4-byte aligned",
                         (unsigned long long)a->lse);
    const uint64_t ll = a->lse, lh = a->lse + (uint64_t)(a->heads_q * a->total_q) * 4;
    if (scree__overlaps(ll, lh, ol, ohh) || scree__overlaps(ll, lh, ql, qhh) || scree__overlaps(ll, lh, kl, khh) ||
        scree__overlaps(ll, lh, vl, vhh))
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "lse=0x%llx overlaps q, k, v or out",
                         (unsigned long long)a->lse);
  }
  if (ctx->validate && ctx->cu && (st = check_seqlens(ctx, a, stream))) return st;
  memset(var, 0, sizeof *var);
  var->v[V_DTYPE] = a->dtype;
  var->v[V_D] = (int)a->head_dim;
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
 * the variant. */
static const scree__bdim dims[] = {
    {"group", 0}, {"heads_kv", 0}, {"max_q", 1}, {"max_k", 1}, {"total_q", 1}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_attention_args *a = args;
  d[0] = a->heads_kv ? a->heads_q / a->heads_kv : 0;
  d[1] = a->heads_kv;
  d[2] = a->max_seqlen_q;
  d[3] = a->max_seqlen_k;
  d[4] = a->total_q;
}

static const scree__sfield shape[] = {
    {"batch", offsetof(scree_attention_args, batch)},
    {"total_q", offsetof(scree_attention_args, total_q)},
    {"total_k", offsetof(scree_attention_args, total_k)},
    {"max_seqlen_q", offsetof(scree_attention_args, max_seqlen_q)},
    {"max_seqlen_k", offsetof(scree_attention_args, max_seqlen_k)},
    {"heads_q", offsetof(scree_attention_args, heads_q)},
    {"heads_kv", offsetof(scree_attention_args, heads_kv)},
    {"head_dim", offsetof(scree_attention_args, head_dim)},
    {"window_left", offsetof(scree_attention_args, window_left)},
    {"window_right", offsetof(scree_attention_args, window_right)},
};

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
    int64_t l = mq;
    if (n > 0) {
      const double u = (double)(scree__rand(&s) >> 11) / 9007199254740992.0;
      l = (int64_t)(exp(log((double)mq / 8) + u * log(8.0)) + 0.5);
      if (l < 1) l = 1;
      if (l > mq) l = mq;
    }
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

SCREE__REFERENCE(attention); /* ops/attention_ref.c */

static const scree__impl impls[] = {{
    .name = "generic",
    .source = "attention.cu",
    .entries = {"scree_attention_fwd", "scree_attention_schedule"},
    .min_sm = 80,
    .nfields = 6,
    .fields = fields,
    .check = check,
    .smem = smem,
    .threads = threads,
    .adapt = adapt,
    .launch = launch,
}, {
    .name = "hopper",
    .source = "attention_hopper.cu",
    .entries = {"scree_attention_hopper", "scree_attention_schedule"},
    .min_sm = 90,
    .max_sm = 90,
    .arch_specific = 1,
    .nfields = H_NFIELDS,
    .fields = hfields,
    .check = hcheck,
    .smem = hsmem,
    .threads = hthreads,
    .launch = hlaunch,
}};

const scree__op scree__op_attention = {
    .name = "attention",
    .args_size = sizeof(scree_attention_args),
    .nimpls = 2,
    .impls = impls,
    .nvfields = 4,
    .vfields = vfields,
    .causal_vfield = V_CAUSAL,
    .ndims = 5,
    .dims = dims,
    .nshape = 10,
    .shape = shape,
    .validate = validate,
    .bucket = bucket,
    .adapt_class = adapt_class,
    .default_config = default_config,
    .representative = representative,
    .problem = problem,
    .reference = scree__ref_attention,
};
