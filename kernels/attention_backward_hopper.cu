/*
 * attention_backward_hopper.cu - varlen attention backward for Hopper
 * (sm_90a): the operation, masks, outputs and work order of
 * attention_backward.cu (its header states them), with the products on
 * warpgroup MMAs (wgmma). scree_attention_backward's implementation
 * "hopper" (src/runtime/ops/attention_backward.c). First correct version:
 * unmeasured on a GPU until docs/kernels/attention-backward.md says so.
 *
 * Three kernels, as the generic implementation's: the preprocess and dq
 * conversion kernels are the generic ones (attention_backward_common.cuh);
 * the main kernel scree_attention_bwd_hopper replaces scree_attention_bwd
 * with the same tickets, the same fp32 dQ accumulator and the same
 * deterministic ordering (counters and all).
 *
 * CTA = NWG = BN / 64 warpgroups (128 threads each), one CTA per (KV tile
 * of BN keys, sequence, kv head). Warpgroup w owns keys 64 w .. 64 w + 63
 * of the tile. All threads copy tiles with cp.async into the layout the
 * copy engine writes with the 128-byte swizzle (hopper.cuh): a [rows x
 * HEAD_DIM] tile is HEAD_DIM / 64 panels of rows x 128 bytes, chunk c of
 * row r at chunk c ^ (r % 8), panels 1024-byte aligned; rows past the
 * sequence's end are zero-filled (never another sequence's tokens). K and
 * V of the tile once; Q, dO (BM = 64 rows), lse2 and D per item into
 * STAGES buffers (2: the next item's load overlaps this one's products).
 * (No producer warpgroup, tensor maps, mbarrier ring or setmaxnreg yet:
 * with every thread a consumer, each has 65536 / (128 NWG) registers.)
 *
 * Per item (query head h of the group, Q tile m), per warpgroup, with
 * a = the accumulator layout of m64nN (hopper.cuh: row = 16 warp + g
 * (+8), column 8 i + 2 t (+1)):
 *   S^T  = K Q^T    [64 keys x 64 q]  A = K rows (shared, K-major over
 *                   head_dim), B = Q rows (shared, K-major): the forward's
 *                   S = Q K^T with the roles swapped; HEAD_DIM / 16 steps.
 *   dP^T = V dO^T   [64 keys x 64 q]  A = V, B = dO, the same way.
 *   P^T, dS^T       in registers: lse2 and D of the query columns from
 *                   shared memory, the generic kernel's masks (causal,
 *                   window, keys >= the sequence's key count) on the tiles
 *                   a mask cuts, query columns past the sequence's end have
 *                   lse2 = +inf (P = 0) and D = 0. Rounded to the dtype and
 *                   packed as m64k16 A fragments (the forward's P).
 *   dS^T to shared  [BN keys x 64 q], 16-bit, one 128-byte swizzled panel
 *                   (row = key); fence.proxy.async, then a CTA barrier.
 *   dV  += P^T dO   [64 keys x D]     A = P^T (registers), B = dO (shared,
 *                   N-major: imm-trans-b, as V in the forward's P V);
 *                   BM / 16 steps.
 *   dK  += dS^T Q   [64 keys x D]     A = dS^T (registers), B = Q N-major.
 *   dQ   = dS K     [64 q x QN]       warpgroups w < QWG, columns w QN ..
 *                   + QN - 1 (QN = max(64, HEAD_DIM / NWG); N-major B must
 *                   cover whole 64-column panels): A = dS, the dS^T panel
 *                   read M-major (imm-trans-a), B = K N-major; BN / 16
 *                   steps; added to the fp32 accumulator with
 *                   red.global.add.v2.f32 (one add per element per CTA,
 *                   rows past the sequence skipped), ordered as the
 *                   generic kernel's in deterministic mode.
 * dK (times scale) and dV stay in registers over the whole group and are
 * written once.
 *
 * Shared memory (dynamic, base rounded up to 1024 bytes, so 1024 more are
 * asked): K, V [KP panels][BN rows][128 B]; Q, dO [STAGES][KP][64][128 B];
 * dS^T [BN][128 B]; lse2, D [STAGES][64] floats; the ticket (16 bytes):
 *   bytes = 2 * HEAD_DIM * (2 * BN + 2 * STAGES * 64) + 128 * BN
 *           + 512 * STAGES + 16 + 1024
 *
 * Macros (all required; set by the host):
 *   variant: SCREE_DTYPE (1 fp16, 2 bf16), SCREE_HEAD_DIM (64, 128),
 *            SCREE_CAUSAL, SCREE_WINDOW (0, 1)
 *   config:  SCREE_BN (64, 128 keys per CTA: 1 or 2 warpgroups),
 *            SCREE_STAGES (1, 2)
 * Constraints (static_assert; the host check mirrors them): the values
 * above; shared memory within 232448 bytes (every config fits).
 *
 * Registers and spills of the main kernel (ptxas, sm_90a, CUDA 13.0; no
 * C75xx wgmma serialisation note in any variant read): head_dim 64, every
 * variant and config: 210-228 registers, no spills; head_dim 128: 255,
 * no spills without a window (0-12 bytes causal at stages 2), 20-32 bytes
 * with a window, inside the item loop (the producer / setmaxnreg split of
 * the issue's design is what would free registers here).
 * docs/kernels/attention-backward.md ("The Hopper implementation").
 *
 * Host guarantees: as attention_backward.cu's (16-byte aligned tensors,
 * strides multiples of 8 elements, the workspace of ops/
 * attention_backward.c sized for BM = 64). Launch: grid = tiles x batch x
 * heads_kv, blockDim = 128 * NWG, dynamic shared memory SMEM_BYTES.
 *
 * Test: ctest -R attention_backward (CPU: arguments, compile of every
 * hopper config at sm_90a; GPU: test_attention_backward_gpu runs the
 * hopper implementation over its batches on sm_90).
 */
#include "ptx.cuh"
#include "hopper.cuh"

#if !defined(SCREE_DTYPE) || !defined(SCREE_HEAD_DIM) || !defined(SCREE_CAUSAL) || \
    !defined(SCREE_WINDOW) || !defined(SCREE_BN) || !defined(SCREE_STAGES)
#error "attention_backward_hopper.cu: every SCREE_* macro listed in the header must be defined"
#endif
/* attention_sched.cuh reads it (decode_work, unused here). */
#define SCREE_SCHED 1

namespace scree_attn {

typedef scree_dtype_of<SCREE_DTYPE>::type elem;

constexpr int D = SCREE_HEAD_DIM;
constexpr int BM = 64;
constexpr int BN = SCREE_BN;
constexpr int STAGES = SCREE_STAGES;
constexpr bool CAUSAL = SCREE_CAUSAL != 0;
constexpr bool WINDOW = SCREE_WINDOW != 0;
constexpr int NWG = BN / 64;
constexpr int THREADS = 128 * NWG;
constexpr int CPR = D / 8; /* 16-byte chunks per row of a [.., D] tile */
constexpr int CPRP = CPR <= 4 ? 4 : CPR <= 8 ? 8 : CPR <= 16 ? 16 : 32; /* the prep's groups */
constexpr int KP = D / 64;          /* 128-byte panels per row */
constexpr int K_PANEL = BN * 128;   /* one panel of K, V or dS^T */
constexpr int Q_PANEL = BM * 128;   /* one panel of Q or dO */
constexpr int KV_BYTES = KP * K_PANEL;
constexpr int QT_BYTES = KP * Q_PANEL;
constexpr int K_OFF = 0;
constexpr int V_OFF = KV_BYTES;
constexpr int Q_OFF = 2 * KV_BYTES;
constexpr int DO_OFF = Q_OFF + STAGES * QT_BYTES;
constexpr int DS_OFF = DO_OFF + STAGES * QT_BYTES;
constexpr int LSE_OFF = DS_OFF + K_PANEL;
constexpr int DD_OFF = LSE_OFF + STAGES * BM * 4;
constexpr int TICKET_OFF = DD_OFF + STAGES * BM * 4;
constexpr int SMEM_BYTES = TICKET_OFF + 16 + 1024;
static_assert(SMEM_BYTES == 2 * D * (2 * BN + 2 * STAGES * 64) + 128 * BN + 512 * STAGES + 16 +
                                1024,
              "shared memory layout");
/* dQ passes of 64 columns (one panel of K) per warpgroup: KP passes over
 * NWG warpgroups. */
constexpr int QPASSES = (KP + NWG - 1) / NWG;

static_assert(SCREE_DTYPE == 1 || SCREE_DTYPE == 2, "SCREE_DTYPE must be 1 (fp16) or 2 (bf16)");
static_assert(D == 64 || D == 128, "SCREE_HEAD_DIM must be 64 or 128");
static_assert(SCREE_CAUSAL == 0 || SCREE_CAUSAL == 1, "SCREE_CAUSAL must be 0 or 1");
static_assert(SCREE_WINDOW == 0 || SCREE_WINDOW == 1, "SCREE_WINDOW must be 0 or 1");
static_assert(BN == 64 || BN == 128, "SCREE_BN must be 64 or 128");
static_assert(STAGES == 1 || STAGES == 2, "SCREE_STAGES must be 1 or 2");
static_assert(SMEM_BYTES <= 232448, "shared memory past the 232448 bytes of sm_90");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

#include "attention_sched.cuh"

/* cp.async ROWS rows of D elements (row r from g + r * ts) into panels of
 * ROWS x 128 bytes with the 128-byte swizzle; rows >= valid zero-filled. */
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned sdst, const elem *g, long long ts, int valid) {
  constexpr int CHUNKS = ROWS * CPR;
  static_assert(CHUNKS % THREADS == 0, "whole chunks per thread");
  /* The thread index through an empty asm: the addresses are recomputed
   * per call instead of being kept live (registers) across the item loop. */
  int tid = (int)threadIdx.x;
  asm volatile("" : "+r"(tid));
#pragma unroll
  for (int i = 0; i < CHUNKS / THREADS; i++) {
    const int idx = tid + i * THREADS;
    const int r = idx / CPR, c = idx % CPR;
    const unsigned dst =
        sdst + (unsigned)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
    const bool ok = r < valid;
    scree_cp_async16(dst, ok ? g + (long long)r * ts + c * 8 : g, ok ? 16 : 0);
  }
}

/* A descriptor moved `bytes` (a multiple of 16) further into shared memory. */
__device__ __forceinline__ unsigned long long desc_at(unsigned long long d, unsigned bytes) {
  return d + (unsigned long long)(bytes >> 4);
}

/* S^T-shaped products: D (64 x 64) (+)= A (64 x 16, K-major) B^T. */
__device__ __forceinline__ void mma_ss64(float (&d)[32], unsigned long long da,
                                         unsigned long long db, int scale_d) {
  scree_wgmma_ss_n64<SCREE_DTYPE>(d, da, db, scale_d);
}
/* dK, dV: D (64 x HEAD_DIM) += A (registers) B (N-major). */
template <int N>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const unsigned (&a)[4],
                                       unsigned long long db) {
  if constexpr (N == 64)
    scree_wgmma_rs_n64<SCREE_DTYPE>(d, a, db, 1);
  else
    scree_wgmma_rs_n128<SCREE_DTYPE>(d, a, db, 1);
}
/* dQ: D (64 x 64) (+)= A (M-major) B (N-major). */
__device__ __forceinline__ void mma_tt64(float (&d)[32], unsigned long long da,
                                         unsigned long long db, int scale_d) {
  scree_wgmma_tt_n64<SCREE_DTYPE>(d, da, db, scale_d);
}

} /* namespace scree_attn */

using namespace scree_attn;

#include "attention_backward_common.cuh"

/* P^T and dS^T of one item from the S^T and dP^T accumulators, 16 query
 * columns at a time (accumulator blocks 2 k and 2 k + 1), packed at once as
 * the A fragments of step k (the forward's P), so that S and dP die as P
 * and dS are made. CAP (softcap) and MASK are uniform per item: the caller
 * branches once around the whole tile (a branch per element cost registers
 * and spills at head_dim 128). kr0 = the thread's first key row in the
 * tile, c2 = 2 tq; slse and sdd the item's lse2 and D. */
template <bool CAP, bool MASK>
__device__ __forceinline__ void probs(const float (&s)[32], const float (&dp)[32],
                                      unsigned (&pf)[BM / 16][4], unsigned (&df)[BM / 16][4],
                                      const float *slse, const float *sdd, const params &p,
                                      int kr0, int tq, int kend, int dbase, int righti, bool rb,
                                      bool lb) {
  /* The mask per row half hh (key kr = kr0 + 8 hh): query column qc
   * is visible iff the key exists and qlo <= qc - 2 tq <= qhi, where
   * dj = dbase + kr - qc must lie in [-wl, righti] (bounds clamped to
   * +-2^20: qc < 64). */
  int qlo[2] = {0, 0}, qhi[2] = {0, 0};
  bool kin[2] = {false, false};
  if constexpr (MASK) {
    constexpr long long BIG = 1 << 20;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int kr = kr0 + 8 * hh;
      kin[hh] = kr < kend;
      const long long base = (long long)dbase + kr - 2 * tq;
      const long long lo = rb ? base - righti : -BIG, hi = lb ? base + p.wl : BIG;
      qlo[hh] = (int)max(-BIG, min(BIG, lo));
      qhi[hh] = (int)max(-BIG, min(BIG, hi));
    }
  }
#pragma unroll
  for (int k = 0; k < BM / 16; k++) {
    float pv[8], dv8[8];
#pragma unroll
    for (int x = 0; x < 8; x++) {
      const int i = 2 * k + (x >> 2), e = x & 3;
      const int qc = 8 * i + 2 * tq + (e & 1); /* query row in the tile */
      float y = s[4 * i + e];
      float f = 1.f;
      if constexpr (CAP) {
        const float th = scree_tanh(p.cap_in * y);
        y = p.cap_out * th;
        f = 1.f - th * th;
      }
      float pe = scree_ex2(y * p.scale_log2 - slse[qc]);
      if constexpr (MASK) {
        const int hh = e >> 1, c = 8 * i + (e & 1); /* c = qc - 2 tq */
        pe = kin[hh] && c >= qlo[hh] && c <= qhi[hh] ? pe : 0.f;
      }
      pv[x] = pe;
      dv8[x] = pe * (dp[4 * i + e] - sdd[qc]) * f;
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
      pf[k][r] = scree_pack2<SCREE_DTYPE>(pv[2 * r], pv[2 * r + 1]);
      df[k][r] = scree_pack2<SCREE_DTYPE>(dv8[2 * r], dv8[2 * r + 1]);
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
scree_attention_bwd_hopper(const params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned raw = scree_smem_u32(smem_raw);
  const unsigned sb = (raw + 1023u) & ~1023u;
  unsigned char *smem = smem_raw + (sb - raw);
  int *ticket = reinterpret_cast<int *>(smem + TICKET_OFF);
  if (threadIdx.x == 0) *ticket = atomicAdd(&p.counters[0], 1);
  __syncthreads();
  const long long w = *ticket;
  const int g = (int)(w % p.heads_kv);
  const long long bw = w / p.heads_kv;
  const int b = (int)(bw % p.batch);
  const int n = (int)(bw / p.batch);
  const int q0 = p.cu_q[b], Lq = p.cu_q[b + 1] - q0;
  const int k0 = p.cu_k[b], Lk = p.cu_k[b + 1] - k0;
  if (n * BN >= Lk) return;

  const int wg = threadIdx.x >> 7;
  const int ct = threadIdx.x & 127;
  const int warp = ct >> 5, lane = ct & 31;
  const int gr = lane >> 2, tq = lane & 3;

  /* Q rows that see this tile: the generic kernel's rule. */
  const bool rb = CAUSAL || (WINDOW && p.wr >= 0);
  const bool lb = WINDOW && p.wl >= 0;
  const long long right = CAUSAL ? 0 : (long long)p.wr;
  const long long off = (long long)Lk - Lq;
  const long long kfirst = (long long)n * BN, klast = (long long)min(n * BN + BN, Lk) - 1;
  long long ilo = rb ? kfirst - off - right : 0, ihi = lb ? klast - off + p.wl : (long long)Lq - 1;
  if (ilo < 0) ilo = 0;
  if (ihi > Lq - 1) ihi = Lq - 1;
  const int mlo = ilo <= ihi ? (int)(ilo / BM) : 0;
  const int nm = ilo <= ihi ? (int)(ihi / BM) - mlo + 1 : 0;
  const int h0 = g * p.group;
  const int items = nm * p.group;
  const int cbase = q0 / BM + b;

  load_tile<BN>(sb + K_OFF, p.k + (long long)(k0 + n * BN) * p.k_ts + (long long)g * p.k_hs, p.k_ts,
                Lk - n * BN);
  load_tile<BN>(sb + V_OFF, p.v + (long long)(k0 + n * BN) * p.v_ts + (long long)g * p.v_hs, p.v_ts,
                Lk - n * BN);

  auto load_item = [&](int it, int st) {
    const int h = h0 + it / nm, m = mlo + it % nm;
    const int r0 = m * BM;
    load_tile<BM>(sb + Q_OFF + st * QT_BYTES,
                  p.q + (long long)(q0 + r0) * p.q_ts + (long long)h * p.q_hs, p.q_ts, Lq - r0);
    load_tile<BM>(sb + DO_OFF + st * QT_BYTES,
                  p.dout + (long long)(q0 + r0) * p.do_ts + (long long)h * p.do_hs, p.do_ts,
                  Lq - r0);
    const int r = threadIdx.x;
    if (r < BM) {
      const unsigned sl = sb + LSE_OFF + (st * BM + r) * 4, sd = sb + DD_OFF + (st * BM + r) * 4;
      if (r0 + r < Lq) {
        const long long o = (long long)h * p.total_q + q0 + r0 + r;
        scree_cp_async<4>(sl, p.dlse2 + (long long)p.heads_q * p.total_q + o, 4);
        scree_cp_async<4>(sd, p.dlse2 + o, 4);
      } else {
        reinterpret_cast<float *>(smem + LSE_OFF)[st * BM + r] = pos_inf();
        reinterpret_cast<float *>(smem + DD_OFF)[st * BM + r] = 0.f;
      }
    }
  };

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.f;

  int pend = -1;
  if (items > 0) load_item(0, 0);
  scree_cp_async_commit();

  for (int it = 0; it < items; it++) {
    const int st = STAGES == 2 ? (it & 1) : 0;
    const int h = h0 + it / nm, m = mlo + it % nm;
    if constexpr (STAGES == 1) {
      if (it > 0) {
        __syncthreads(); /* every warpgroup is done with the previous item */
        load_item(it, 0);
        scree_cp_async_commit();
      }
    }
    scree_cp_async_wait<0>();
    /* This thread's copies (and plain stores) become visible to wgmma (the
     * async proxy), then the CTA barrier makes everyone's visible; it also
     * ends the previous item (its products and dS^T reads are complete). */
    scree_fence_proxy_async();
    __syncthreads();
    if constexpr (STAGES == 2) {
      if (it + 1 < items) load_item(it + 1, st ^ 1);
      scree_cp_async_commit();
    }
    /* One descriptor per operand, the steps' as immediate adds to it (the
     * start address is bits 0-13, in 16-byte units; every address here is
     * below 2^18, so the adds never carry out). The base passes through an
     * empty asm so that the compiler rebuilds the descriptors per item
     * instead of keeping one per step live over the loop (which cost about
     * 60 registers and spills). */
    unsigned sbi = sb;
    asm volatile("" : "+r"(sbi));
    const unsigned sq = sbi + Q_OFF + st * QT_BYTES, sdo = sbi + DO_OFF + st * QT_BYTES;
    const unsigned long long dka = scree_wg_desc(sbi + K_OFF + wg * 64 * 128, 16, 1024);
    const unsigned long long dva = scree_wg_desc(sbi + V_OFF + wg * 64 * 128, 16, 1024);
    const unsigned long long dqk = scree_wg_desc(sq, 16, 1024), ddok = scree_wg_desc(sdo, 16, 1024);
    const float *slse = reinterpret_cast<const float *>(smem + LSE_OFF) + st * BM;
    const float *sdd = reinterpret_cast<const float *>(smem + DD_OFF) + st * BM;

    unsigned pf[BM / 16][4], df[BM / 16][4]; /* P^T, dS^T as A fragments */
    {
      /* S^T = K Q^T, dP^T = V dO^T: A the warpgroup's 64 key rows, B the 64
       * query rows, both K-major; step k reads 16 columns (32 bytes) of
       * panel k / 4. */
      float s[32], dp[32];
      scree_reg_fence(s);
      scree_reg_fence(dp);
      scree_wgmma_fence();
#pragma unroll
      for (int k = 0; k < D / 16; k++) {
        const unsigned o = (k & 3) * 32;
        mma_ss64(s, desc_at(dka, (k >> 2) * K_PANEL + o), desc_at(dqk, (k >> 2) * Q_PANEL + o),
                 k > 0);
      }
#pragma unroll
      for (int k = 0; k < D / 16; k++) {
        const unsigned o = (k & 3) * 32;
        mma_ss64(dp, desc_at(dva, (k >> 2) * K_PANEL + o), desc_at(ddok, (k >> 2) * Q_PANEL + o),
                 k > 0);
      }
      scree_wgmma_commit();
      scree_wgmma_wait<0>();
      scree_reg_fence(s);
      scree_reg_fence(dp);

      const kv_range rg = tile_range(Lq, Lk, m, p.wl, p.wr);
      const bool masked = !(n >= rg.full_lo && n < rg.full_hi);
      const int dbase = n * BN - m * BM - (Lk - Lq), kend = Lk - n * BN;
      const int righti = CAUSAL ? 0 : p.wr;
      const bool cap = p.cap_in != 0.f;
      const int kr0 = 64 * wg + 16 * warp + gr;
      if (cap) {
        if (masked)
          probs<true, true>(s, dp, pf, df, slse, sdd, p, kr0, tq, kend, dbase, righti, rb, lb);
        else
          probs<true, false>(s, dp, pf, df, slse, sdd, p, kr0, tq, kend, dbase, righti, rb, lb);
      } else {
        if (masked)
          probs<false, true>(s, dp, pf, df, slse, sdd, p, kr0, tq, kend, dbase, righti, rb, lb);
        else
          probs<false, false>(s, dp, pf, df, slse, sdd, p, kr0, tq, kend, dbase, righti, rb, lb);
      }
    }
    /* dS^T to shared memory for dQ: row kr (key), columns 8 i + 2 tq, +1
     * (4 bytes) in chunk i ^ (kr % 8) of the 128-byte row. */
#pragma unroll
    for (int i = 0; i < BM / 8; i++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int kr = 64 * wg + 16 * warp + gr + 8 * hh;
        const unsigned o = (unsigned)(kr * 128 + ((i ^ (kr & 7)) << 4) + 4 * tq);
        *reinterpret_cast<unsigned *>(smem + DS_OFF + o) = df[i >> 1][2 * (i & 1) + hh];
      }
    scree_fence_proxy_async();

    /* dV += P^T dO, dK += dS^T Q: B = dO / Q rows of the item, N-major:
     * step k starts 16 rows (query rows) in, LBO = one 64-column panel. */
    const unsigned long long ddon = scree_wg_desc(sdo, Q_PANEL, 1024);
    const unsigned long long dqn = scree_wg_desc(sq, Q_PANEL, 1024);
    scree_reg_fence(dv);
    scree_reg_fence(dk);
    scree_wgmma_fence();
#pragma unroll
    for (int k = 0; k < BM / 16; k++) mma_rs<D>(dv, pf[k], desc_at(ddon, k * 16 * 128));
#pragma unroll
    for (int k = 0; k < BM / 16; k++) mma_rs<D>(dk, df[k], desc_at(dqn, k * 16 * 128));
    scree_wgmma_commit();
    /* Waited for here rather than behind dQ: the P^T and dS^T fragments
     * then die before dQ's accumulator is live (no spills at 128 x 128). */
    scree_wgmma_wait<0>();
    scree_reg_fence(dv);
    scree_reg_fence(dk);
    __syncthreads(); /* dS^T of every warpgroup written and fenced */

    /* dQ = dS K in passes of 64 columns, pass c by warpgroup c % NWG:
     * A = dS, the dS^T panel read M-major (step k 16 key rows in), B = K
     * rows N-major from panel c (step k 16 keys in). */
    const int cidx = 1 + h * p.ctiles + cbase + m;
    if (p.det && pend >= 0) __threadfence();
#pragma unroll
    for (int pi = 0; pi < QPASSES; pi++) {
      const int c = wg + pi * NWG;
      const bool mine = c < KP;
      float qa[32];
      if (mine) {
        const unsigned long long dds = scree_wg_desc(sbi + DS_OFF, K_PANEL, 1024);
        const unsigned long long dkn = scree_wg_desc(sbi + K_OFF + c * K_PANEL, K_PANEL, 1024);
        scree_reg_fence(qa);
        scree_wgmma_fence();
#pragma unroll
        for (int k = 0; k < BN / 16; k++)
          mma_tt64(qa, desc_at(dds, k * 16 * 128), desc_at(dkn, k * 16 * 128), k > 0);
        scree_wgmma_commit();
        scree_wgmma_wait<0>();
        scree_reg_fence(qa);
      }
      if (p.det && pi == 0) {
        __syncthreads(); /* every thread has fenced the previous item's adds */
        if (threadIdx.x == 0) {
          if (pend >= 0) atomicAdd(p.counters + pend, 1);
          const int target = n - tile_range(Lq, Lk, m, p.wl, p.wr).lo;
          /* An atomic read (at L2, coherent); the fence orders the
           * accumulator's reads and adds after it. */
          unsigned spins = 0;
          while (atomicAdd(p.counters + cidx, 0) != target) {
            if (++spins == 0x80000000u) __trap();
            __nanosleep(64);
          }
          __threadfence();
        }
        __syncthreads();
      }
      if (mine) {
        float *accb = p.dqacc + ((long long)h * p.total_q + q0 + (long long)m * BM) * D + 64 * c;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int r = 16 * warp + gr + 8 * hh;
          if (m * BM + r < Lq) {
#pragma unroll
            for (int j = 0; j < 8; j++)
              red_add2(accb + (long long)r * D + 8 * j + 2 * tq, qa[4 * j + 2 * hh],
                       qa[4 * j + 2 * hh + 1]);
          }
        }
      }
    }
    pend = cidx;
  }
  if (p.det && pend >= 0) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(p.counters + pend, 1);
  }

  /* dK (times scale) and dV of the warpgroup's keys, written once. */
  const float sc = p.scale;
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int kr = 64 * wg + 16 * warp + gr + 8 * hh;
    if (n * BN + kr < Lk) {
      const long long tok = (long long)k0 + n * BN + kr;
      elem *dkr = p.dk + tok * p.dk_ts + (long long)g * p.dk_hs;
      elem *dvr = p.dv + tok * p.dv_ts + (long long)g * p.dv_hs;
#pragma unroll
      for (int j = 0; j < D / 8; j++) {
        const int col = 8 * j + 2 * tq;
        *reinterpret_cast<unsigned *>(dkr + col) =
            scree_pack2<SCREE_DTYPE>(dk[4 * j + 2 * hh] * sc, dk[4 * j + 2 * hh + 1] * sc);
        *reinterpret_cast<unsigned *>(dvr + col) =
            scree_pack2<SCREE_DTYPE>(dv[4 * j + 2 * hh], dv[4 * j + 2 * hh + 1]);
      }
    }
  }
}
