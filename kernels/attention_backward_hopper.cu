/*
 * attention_backward_hopper.cu - varlen attention backward for Hopper
 * (sm_90a): the operation, masks, outputs and work order of
 * attention_backward.cu (its header states them), with the products on
 * warpgroup MMAs (wgmma). scree_attention_backward's implementation
 * "hopper" (src/runtime/ops/attention_backward.c), and with SCREE_WS=1
 * its warp-specialized version "hopper_ws" (below).
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
 * SCREE_WS = 1: the warp-specialized kernel scree_attention_bwd_hopper_ws
 * (implementation "hopper_ws", the same file with SCREE_WS=1; the kernel
 * above is compiled out, and without SCREE_WS its code is unchanged).
 * Run on an H200 (docs/kernels/attention-backward.md): sm_90's default at
 * head_dim 64 and 128. Same products, masks, dQ adds and deterministic
 * protocol as above; what changes:
 *   Work order: outside deterministic mode the ticket's key tile is the
 *   fastest index (then kv head, then sequence), so that resident CTAs
 *   share their Q, dO and dQ rows in L2; deterministic mode keeps v1's.
 *   dQ (SCREE_DQB 1, outside deterministic mode): staged in fp32 rows of
 *   shared memory and added by bulk reductions (cp.reduce.async.bulk), one
 *   row per thread of the first consumer warpgroup.
 *   CTA = 1 producer warpgroup + NWG = BN / 64 consumer warpgroups. With
 *   NWG = 2 the producer's warpgroup lowers its registers to 24
 *   (setmaxnreg) and the consumers raise theirs to 240; with NWG = 1 (256
 *   threads) everyone has 255 and no setmaxnreg is issued.
 *   Producer (warp 0; warps 1-3 exit): K and V of the tile once by tensor
 *   maps (3-d: head_dim, heads, tokens; boxes of 64 columns x BN rows,
 *   128-byte swizzle: v1's layout), then per item Q and dO (boxes of 64
 *   rows) into a ring of STAGES stages, with lse2 and D of the item's rows
 *   by plain loads (lse2 = +inf, D = 0 past the sequence's end). Stage s is
 *   full when qfull[s] has 32 arrivals (the lanes, after their stores) and
 *   its copies' bytes; the consumers release it on qempty[s] (every
 *   consumer thread). Tiles running past the end of the keys or of the
 *   queries land on a barrier of their own (kvraw, qraw), their rows past
 *   the end (the next sequence's tokens) are zeroed and fenced, then the
 *   real barrier is arrived: the same zeros as v1's copies.
 *   Consumers, per item: S^T and dP^T (at head_dim 128 in two halves of 32
 *   query columns, m64n32k16, so that their accumulators fit beside dK and
 *   dV at 240 registers), P^T and dS^T, dS^T to one of two buffers (by item
 *   parity), dV and dK issued, one named barrier between the consumer
 *   warpgroups (bar.sync 1), dQ. SCREE_OVL 1 issues dQ's first pass right
 *   behind dV and dK and waits once for all (the stage is released after
 *   that wait); SCREE_OVL 0 waits for dV and dK first (v1's order, the
 *   stage released before dQ). The deterministic wait has no trap after
 *   2^31 spins (a trap keeps ptxas at the launch's 168 registers in the
 *   consumers): it leaves the wait, and the adds, atomic, stay correct.
 *   Shared memory: v1's, dS^T twice, the mbarriers kvfull, kvraw, qraw,
 *   qfull[STAGES], qempty[STAGES]:
 *     bytes = 2 * HEAD_DIM * (2 * BN + 2 * STAGES * 64) + 256 * BN
 *             + 528 * STAGES + 24 + 16 + 1024
 *   With SCREE_DQB 1, 64 staging rows of 4 * HEAD_DIM + 16 bytes more.
 *   Macros: as above, SCREE_STAGES 2 or 3 (the ring), SCREE_OVL and
 *   SCREE_DQB (0, 1).
 *   Kernel parameters: the tensor maps of q, k, v and dout (boxes of 64,
 *   BN, BN and 64 rows), then params. Launch: blockDim = 128 (NWG + 1).
 *   Registers (ptxas, CUDA 13.0, all 128 variant x config pairs; the
 *   table is in docs/kernels/attention-backward.md): no spills and no
 *   C75xx wgmma serialisation note in any. BN 128: the launch's 168 a
 *   thread, the consumers using up to 192 (head_dim 64) and 235 (128) of
 *   their 240, the producer 24; BN 64: 210-232 (64), 250-255 (128).
 *
 * Test: ctest -R attention_backward (CPU: arguments, compile of every
 * hopper and hopper_ws config at sm_90a; GPU: test_attention_backward_gpu
 * case hopper runs both implementations over its batches on sm_90).
 */
#include "ptx.cuh"
#include "hopper.cuh"

#if !defined(SCREE_DTYPE) || !defined(SCREE_HEAD_DIM) || !defined(SCREE_CAUSAL) || \
    !defined(SCREE_WINDOW) || !defined(SCREE_BN) || !defined(SCREE_STAGES)
#error "attention_backward_hopper.cu: every SCREE_* macro listed in the header must be defined"
#endif
/* 1: the warp-specialized kernel (implementation "hopper_ws"), which
 * reads SCREE_OVL too; 0 (absent): the first version. */
#ifndef SCREE_WS
#define SCREE_WS 0
#endif
#if SCREE_WS && (!defined(SCREE_OVL) || !defined(SCREE_DQB))
#error "attention_backward_hopper.cu: SCREE_WS 1 needs SCREE_OVL and SCREE_DQB"
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
#if !SCREE_WS
constexpr int THREADS = 128 * NWG;
#else
constexpr int CTHREADS = 128 * NWG;    /* the consumer warpgroups */
constexpr int THREADS = CTHREADS + 128; /* and the producer's */
constexpr bool OVL = SCREE_OVL != 0;
constexpr bool DQB = SCREE_DQB != 0;
#endif
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
#if !SCREE_WS
constexpr int LSE_OFF = DS_OFF + K_PANEL;
constexpr int DD_OFF = LSE_OFF + STAGES * BM * 4;
constexpr int TICKET_OFF = DD_OFF + STAGES * BM * 4;
constexpr int SMEM_BYTES = TICKET_OFF + 16 + 1024;
static_assert(SMEM_BYTES == 2 * D * (2 * BN + 2 * STAGES * 64) + 128 * BN + 512 * STAGES + 16 +
                                1024,
              "shared memory layout");
#else
/* dS^T twice (by item parity: one named barrier per item), then the
 * mbarriers kvfull, kvraw, qraw, qfull[STAGES], qempty[STAGES]. */
constexpr int LSE_OFF = DS_OFF + 2 * K_PANEL;
constexpr int DD_OFF = LSE_OFF + STAGES * BM * 4;
/* With DQB, dQ's staging rows (fp32, D + 4 floats apart: the 16 bytes of
 * padding put the 8 rows of an accumulator store in different banks). */
constexpr int DQ_OFF = DD_OFF + STAGES * BM * 4;
constexpr int DQ_ROW = 4 * D + 16;
constexpr int BAR_OFF = DQ_OFF + (DQB ? BM * DQ_ROW : 0);
constexpr int NBAR = 3 + 2 * STAGES;
constexpr int TICKET_OFF = BAR_OFF + 8 * NBAR;
constexpr int SMEM_BYTES = TICKET_OFF + 16 + 1024;
static_assert(SMEM_BYTES == 2 * D * (2 * BN + 2 * STAGES * 64) + 256 * BN + 528 * STAGES +
                                (DQB ? 64 * (4 * D + 16) : 0) + 24 + 16 + 1024,
              "shared memory layout");
static_assert(DQ_OFF % 16 == 0 && DQ_ROW % 16 == 0, "bulk copies need 16-byte alignment");
/* Registers: with two consumer warpgroups the CTA (384 threads) gets 168 a
 * thread at launch; the producer's warpgroup gives up all but 24 and the
 * consumers take 240 (24 + 2 x 240 = 3 x 168: the forward's split). With
 * one consumer warpgroup (256 threads) every thread has 255 already and
 * no setmaxnreg is issued. */
constexpr int PROD_REGS = 24;
constexpr int CONS_REGS = 240;
#endif
/* dQ passes of 64 columns (one panel of K) per warpgroup: KP passes over
 * NWG warpgroups. */
constexpr int QPASSES = (KP + NWG - 1) / NWG;

static_assert(SCREE_DTYPE == 1 || SCREE_DTYPE == 2, "SCREE_DTYPE must be 1 (fp16) or 2 (bf16)");
static_assert(D == 64 || D == 128, "SCREE_HEAD_DIM must be 64 or 128");
static_assert(SCREE_CAUSAL == 0 || SCREE_CAUSAL == 1, "SCREE_CAUSAL must be 0 or 1");
static_assert(SCREE_WINDOW == 0 || SCREE_WINDOW == 1, "SCREE_WINDOW must be 0 or 1");
static_assert(BN == 64 || BN == 128, "SCREE_BN must be 64 or 128");
#if !SCREE_WS
static_assert(STAGES == 1 || STAGES == 2, "SCREE_STAGES must be 1 or 2");
#else
static_assert(STAGES == 2 || STAGES == 3, "SCREE_STAGES must be 2 or 3 (hopper_ws)");
static_assert(SCREE_OVL == 0 || SCREE_OVL == 1, "SCREE_OVL must be 0 or 1");
static_assert(SCREE_DQB == 0 || SCREE_DQB == 1, "SCREE_DQB must be 0 or 1");
#endif
static_assert(SMEM_BYTES <= 232448, "shared memory past the 232448 bytes of sm_90");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

#include "attention_sched.cuh"

#if !SCREE_WS
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

#endif

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
 * tile, c2 = 2 tq; slse and sdd the item's lse2 and D. NK and CB: the
 * accumulators cover NK * 16 query columns from column CB (hopper_ws
 * computes S^T and dP^T in two halves of 32 at head_dim 128). */
template <bool CAP, bool MASK, int NK = BM / 16, int CB = 0>
__device__ __forceinline__ void probs(const float (&s)[NK * 8], const float (&dp)[NK * 8],
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
  for (int k = 0; k < NK; k++) {
    float pv[8], dv8[8];
#pragma unroll
    for (int x = 0; x < 8; x++) {
      const int i = 2 * k + (x >> 2), e = x & 3;
      const int qc = CB + 8 * i + 2 * tq + (e & 1); /* query row in the tile */
      float y = s[4 * i + e];
      float f = 1.f;
      if constexpr (CAP) {
        const float th = scree_tanh(p.cap_in * y);
        y = p.cap_out * th;
        f = 1.f - th * th;
      }
      float pe = scree_ex2(y * p.scale_log2 - slse[qc]);
      if constexpr (MASK) {
        const int hh = e >> 1, c = CB + 8 * i + (e & 1); /* c = qc - 2 tq */
        pe = kin[hh] && c >= qlo[hh] && c <= qhi[hh] ? pe : 0.f;
      }
      pv[x] = pe;
      dv8[x] = pe * (dp[4 * i + e] - sdd[qc]) * f;
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
      pf[CB / 16 + k][r] = scree_pack2<SCREE_DTYPE>(pv[2 * r], pv[2 * r + 1]);
      df[CB / 16 + k][r] = scree_pack2<SCREE_DTYPE>(dv8[2 * r], dv8[2 * r + 1]);
    }
  }
}

#if !SCREE_WS
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
#endif /* !SCREE_WS */

#if SCREE_WS
/* ---- the warp-specialized kernel (implementation "hopper_ws") ---------- */

/* S^T and dP^T in two halves of 32 query columns at head_dim 128: their
 * accumulators then take 32 registers instead of 64 beside dK and dV's
 * 128, which two consumer warpgroups at 240 registers need. */
constexpr bool SPLIT = D == 128;

/* S^T-shaped products over N query columns: m64nNk16, both operands
 * K-major in shared memory. */
template <int N>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], unsigned long long da,
                                       unsigned long long db, int scale_d) {
  if constexpr (N == 64) {
    scree_wgmma_ss_n64<SCREE_DTYPE>(d, da, db, scale_d);
  } else {
    static_assert(N == 32, "m64n32 or m64n64");
    if constexpr (SCREE_DTYPE == 1)
      asm volatile(
          "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %18, 0;\n\t"
          "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, "
          "1, 1, 0, 0;\n\t}"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
            "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
            "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "l"(da), "l"(db), "r"(scale_d));
    else
      asm volatile(
          "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %18, 0;\n\t"
          "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, "
          "1, 1, 0, 0;\n\t}"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
            "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
            "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "l"(da), "l"(db), "r"(scale_d));
  }
}

/* S^T = K Q^T and dP^T = V dO^T over query columns CB .. CB + 16 NK - 1
 * (B = those rows of Q and dO), then their P^T and dS^T fragments (probs;
 * cap and masked branch once around the tile). */
template <int NK, int CB>
__device__ __forceinline__ void st_dpt(unsigned (&pf)[BM / 16][4], unsigned (&df)[BM / 16][4],
                                       unsigned long long dka, unsigned long long dva,
                                       unsigned long long dqk, unsigned long long ddok,
                                       const float *slse, const float *sdd, const params &p,
                                       bool cap, bool masked, int kr0, int tq, int kend,
                                       int dbase, int righti, bool rb, bool lb) {
  /* Opaque per call: otherwise the steps' descriptors of the first half
   * are kept for the second (spilled at head_dim 128). */
  asm volatile("" : "+l"(dka), "+l"(dva), "+l"(dqk), "+l"(ddok));
  float sc[NK * 8], dp[NK * 8];
  scree_reg_fence(sc);
  scree_reg_fence(dp);
  scree_wgmma_fence();
#pragma unroll
  for (int k = 0; k < D / 16; k++) {
    const unsigned o = (k & 3) * 32;
    mma_ss<NK * 16>(sc, desc_at(dka, (k >> 2) * K_PANEL + o),
                    desc_at(dqk, (k >> 2) * Q_PANEL + CB * 128 + o), k > 0);
  }
#pragma unroll
  for (int k = 0; k < D / 16; k++) {
    const unsigned o = (k & 3) * 32;
    mma_ss<NK * 16>(dp, desc_at(dva, (k >> 2) * K_PANEL + o),
                    desc_at(ddok, (k >> 2) * Q_PANEL + CB * 128 + o), k > 0);
  }
  scree_wgmma_commit();
  scree_wgmma_wait<0>();
  scree_reg_fence(sc);
  scree_reg_fence(dp);
  if (cap) {
    if (masked)
      probs<true, true, NK, CB>(sc, dp, pf, df, slse, sdd, p, kr0, tq, kend, dbase, righti, rb,
                                lb);
    else
      probs<true, false, NK, CB>(sc, dp, pf, df, slse, sdd, p, kr0, tq, kend, dbase, righti, rb,
                                 lb);
  } else {
    if (masked)
      probs<false, true, NK, CB>(sc, dp, pf, df, slse, sdd, p, kr0, tq, kend, dbase, righti, rb,
                                 lb);
    else
      probs<false, false, NK, CB>(sc, dp, pf, df, slse, sdd, p, kr0, tq, kend, dbase, righti, rb,
                                  lb);
  }
}

/* The consumer warpgroups' barrier (the producer never takes part). */
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(CTHREADS) : "memory");
}
/* Adds `bytes` to the transaction count of bar's current phase without
 * arriving (the producer's lanes arrive after their plain stores). */
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

/* dst[0 .. bytes/4) += src[0 .. bytes/4) in fp32 by the copy engine (one
 * bulk reduction, this thread's bulk group); 16-byte aligned, bytes a
 * multiple of 16. */
__device__ __forceinline__ void bulk_red_add(float *dst, unsigned src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   dst),
               "r"(src), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/* This thread's bulk reductions have read their shared memory. */
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
/* This thread's bulk reductions are complete. */
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
scree_attention_bwd_hopper_ws(const __grid_constant__ scree_tmap tq,
                              const __grid_constant__ scree_tmap tk,
                              const __grid_constant__ scree_tmap tv,
                              const __grid_constant__ scree_tmap tdo, const params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned raw = scree_smem_u32(smem_raw);
  const unsigned sb = (raw + 1023u) & ~1023u;
  unsigned char *smem = smem_raw + (sb - raw);
  const unsigned bar = sb + BAR_OFF;
  const unsigned kvfull = bar, kvraw = bar + 8, qraw = bar + 16;
  auto qfull = [&](int s) { return bar + 24 + 8 * s; };
  auto qempty = [&](int s) { return bar + 24 + 8 * (STAGES + s); };
  int *ticket = reinterpret_cast<int *>(smem + TICKET_OFF);
  if (threadIdx.x == 0) {
    *ticket = atomicAdd(&p.counters[0], 1);
    scree_mbar_init(kvfull, 1);
    scree_mbar_init(kvraw, 1);
    scree_mbar_init(qraw, 1);
    for (int s = 0; s < STAGES; s++) {
      scree_mbar_init(qfull(s), 32); /* the producer warp's lanes */
      scree_mbar_init(qempty(s), CTHREADS);
    }
    scree_mbar_init_fence();
  }
  __syncthreads();
  const long long w = *ticket;
  int g, b, n;
  if (p.det) {
    /* v1's order (key tile slowest): a CTA seldom waits for the one
     * before it in a dQ tile's order. */
    g = (int)(w % p.heads_kv);
    const long long bw = w / p.heads_kv;
    b = (int)(bw % p.batch);
    n = (int)(bw / p.batch);
  } else {
    /* Key tile fastest: the CTAs running at once share a few (sequence,
     * kv head) pairs, so that their Q, dO and dQ rows stay in L2 (with the
     * key tile slowest every resident CTA had its own, and the dQ adds and
     * Q / dO reads of a long batch went to DRAM). */
    n = (int)(w % p.max_ktiles);
    const long long gb = w / p.max_ktiles;
    g = (int)(gb % p.heads_kv);
    b = (int)(gb / p.heads_kv);
  }
  const int q0 = p.cu_q[b], Lq = p.cu_q[b + 1] - q0;
  const int k0 = p.cu_k[b], Lk = p.cu_k[b + 1] - k0;
  if (n * BN >= Lk) return;

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

  if (threadIdx.x < 128) {
    /* ---- producer: warp 0 (the others exit) ---- */
    if constexpr (NWG == 2) scree_setmaxnreg_dec<PROD_REGS>();
    if (threadIdx.x >= 32) return;
    if (items == 0) return; /* the consumers only store zeros */
    const int lane = threadIdx.x;
    const int krow = k0 + n * BN, valid = Lk - n * BN;
    if (lane == 0) {
      scree_tma_prefetch_desc(&tq);
      scree_tma_prefetch_desc(&tk);
      scree_tma_prefetch_desc(&tv);
      scree_tma_prefetch_desc(&tdo);
    }
    /* K and V of the tile, once. A tile running past the sequence lands on
     * kvraw; its rows past the end (the next sequence's keys, which may
     * hold anything) are zeroed and fenced for the async proxy before
     * kvfull: P = 0 there by the mask, and zeros keep 0 x Inf out of dP^T
     * and dQ. */
    const unsigned kb = valid >= BN ? kvfull : kvraw;
    if (lane == 0) {
      scree_mbar_expect(kb, 2 * KV_BYTES);
#pragma unroll
      for (int c = 0; c < KP; c++) {
        scree_tma_load_3d(sb + K_OFF + c * K_PANEL, &tk, kb, 64 * c, g, krow);
        scree_tma_load_3d(sb + V_OFF + c * K_PANEL, &tv, kb, 64 * c, g, krow);
      }
    }
    if (valid < BN) {
      scree_mbar_wait(kvraw, 0);
      const scree_vec<unsigned, 4> zero = {{0u, 0u, 0u, 0u}};
      for (int i = valid * 8 + lane; i < BN * 8; i += 32) {
        const int r = i >> 3, c = i & 7;
#pragma unroll
        for (int pn = 0; pn < KP; pn++) {
          const int o = pn * K_PANEL + r * 128 + c * 16;
          *reinterpret_cast<scree_vec<unsigned, 4> *>(smem + K_OFF + o) = zero;
          *reinterpret_cast<scree_vec<unsigned, 4> *>(smem + V_OFF + o) = zero;
        }
      }
      scree_fence_proxy_async();
      __syncwarp();
      if (lane == 0) scree_mbar_arrive(kvfull);
    }
    /* Per item: Q and dO by the copy engine, lse2 and D by the lanes'
     * plain loads; the stage is full when the 32 lanes have arrived (each
     * after its stores) and the copies' bytes have landed. A Q tile
     * running past the sequence lands on qraw instead and its rows past
     * the end (the next sequence's tokens) are zeroed, as v1's zero-filled
     * copies: their columns also get P = 0 and dS = 0 (lse2 = +inf, D = 0),
     * and zeros keep a stray Inf or NaN there out of dV and dK (0 x Inf). */
    unsigned qraw_n = 0; /* qraw phases used */
    for (int it = 0; it < items; it++) {
      const int s = it % STAGES;
      const unsigned ph = (unsigned)(it / STAGES) & 1u;
      const int h = h0 + it / nm, r0 = (mlo + it % nm) * BM;
      const int qvalid = Lq - r0;
      const unsigned qb = qvalid >= BM ? qfull(s) : qraw;
      scree_mbar_wait(qempty(s), ph ^ 1u);
      if (lane == 0) {
        if (qvalid >= BM)
          mbar_expect_tx(qb, 2 * QT_BYTES);
        else
          scree_mbar_expect(qb, 2 * QT_BYTES);
#pragma unroll
        for (int c = 0; c < KP; c++) {
          scree_tma_load_3d(sb + Q_OFF + s * QT_BYTES + c * Q_PANEL, &tq, qb, 64 * c, h, q0 + r0);
          scree_tma_load_3d(sb + DO_OFF + s * QT_BYTES + c * Q_PANEL, &tdo, qb, 64 * c, h,
                            q0 + r0);
        }
      }
      if (qvalid < BM) {
        scree_mbar_wait(qraw, qraw_n & 1u);
        qraw_n++;
        const scree_vec<unsigned, 4> zero = {{0u, 0u, 0u, 0u}};
        for (int i = max(qvalid, 0) * 8 + lane; i < BM * 8; i += 32) {
          const int r = i >> 3, c = i & 7;
#pragma unroll
          for (int pn = 0; pn < KP; pn++) {
            const int o = s * QT_BYTES + pn * Q_PANEL + r * 128 + c * 16;
            *reinterpret_cast<scree_vec<unsigned, 4> *>(smem + Q_OFF + o) = zero;
            *reinterpret_cast<scree_vec<unsigned, 4> *>(smem + DO_OFF + o) = zero;
          }
        }
        scree_fence_proxy_async();
      }
      float *sl = reinterpret_cast<float *>(smem + LSE_OFF) + s * BM;
      float *sd = reinterpret_cast<float *>(smem + DD_OFF) + s * BM;
#pragma unroll
      for (int j = 0; j < BM / 32; j++) {
        const int r = lane + 32 * j;
        float l2 = pos_inf(), dd = 0.f;
        if (r0 + r < Lq) {
          const long long o = (long long)h * p.total_q + q0 + r0 + r;
          l2 = p.dlse2[(long long)p.heads_q * p.total_q + o];
          dd = p.dlse2[o];
        }
        sl[r] = l2;
        sd[r] = dd;
      }
      scree_mbar_arrive(qfull(s));
    }
    return;
  }

  /* ---- consumers: warpgroup wg owns keys 64 wg .. 64 wg + 63 ---- */
  if constexpr (NWG == 2) scree_setmaxnreg_inc<CONS_REGS>();
  const int wg = (threadIdx.x >> 7) - 1;
  const int ct = threadIdx.x & 127;
  const int warp = ct >> 5, lane = ct & 31;
  const int gr = lane >> 2, tq4 = lane & 3;
  const bool lead = threadIdx.x == 128; /* the deterministic handshake's thread */
  /* DQB outside deterministic mode: dQ goes through shared memory, and
   * thread ct < BM of warpgroup 0 adds row ct by one bulk reduction. */
  const bool bulk = DQB && !p.det;
  const bool issuer = bulk && wg == 0 && ct < BM;
  const int cbase = q0 / BM + b;

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.f;

  int pend = -1;
  if (items > 0) scree_mbar_wait(kvfull, 0);
  for (int it = 0; it < items; it++) {
    const int s = it % STAGES;
    const unsigned ph = (unsigned)(it / STAGES) & 1u;
    const int h = h0 + it / nm, m = mlo + it % nm;
    scree_mbar_wait(qfull(s), ph);
    /* The descriptors rebuilt per item from an opaque base (v1's reason). */
    unsigned sbi = sb;
    asm volatile("" : "+r"(sbi));
    const unsigned sq = sbi + Q_OFF + s * QT_BYTES, sdo = sbi + DO_OFF + s * QT_BYTES;
    const unsigned sds = sbi + DS_OFF + (it & 1) * K_PANEL;
    const unsigned long long dka = scree_wg_desc(sbi + K_OFF + wg * 64 * 128, 16, 1024);
    const unsigned long long dva = scree_wg_desc(sbi + V_OFF + wg * 64 * 128, 16, 1024);
    const unsigned long long dqk = scree_wg_desc(sq, 16, 1024), ddok = scree_wg_desc(sdo, 16, 1024);
    const float *slse = reinterpret_cast<const float *>(smem + LSE_OFF) + s * BM;
    const float *sdd = reinterpret_cast<const float *>(smem + DD_OFF) + s * BM;

    unsigned pf[BM / 16][4], df[BM / 16][4]; /* P^T, dS^T as A fragments */
    {
      const kv_range rg = tile_range(Lq, Lk, m, p.wl, p.wr);
      const bool masked = !(n >= rg.full_lo && n < rg.full_hi);
      const int dbase = n * BN - m * BM - (Lk - Lq), kend = Lk - n * BN;
      const int righti = CAUSAL ? 0 : p.wr;
      const bool cap = p.cap_in != 0.f;
      const int kr0 = 64 * wg + 16 * warp + gr;
      if constexpr (SPLIT) {
        st_dpt<2, 0>(pf, df, dka, dva, dqk, ddok, slse, sdd, p, cap, masked, kr0, tq4, kend,
                     dbase, righti, rb, lb);
        st_dpt<2, 32>(pf, df, dka, dva, dqk, ddok, slse, sdd, p, cap, masked, kr0, tq4, kend,
                      dbase, righti, rb, lb);
      } else {
        st_dpt<4, 0>(pf, df, dka, dva, dqk, ddok, slse, sdd, p, cap, masked, kr0, tq4, kend,
                     dbase, righti, rb, lb);
      }
    }
    /* dS^T to this item's buffer (v1's layout). The buffer was last read by
     * item it - 2's dQ, which both warpgroups waited for before the named
     * barrier of item it - 1, which this thread has passed. */
#pragma unroll
    for (int i = 0; i < BM / 8; i++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int kr = 64 * wg + 16 * warp + gr + 8 * hh;
        const unsigned o = (unsigned)(kr * 128 + ((i ^ (kr & 7)) << 4) + 4 * tq4);
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(sds + o), "r"(df[i >> 1][2 * (i & 1) + hh])
                     : "memory");
      }
    scree_fence_proxy_async();

    /* dV += P^T dO, dK += dS^T Q (v1's products), issued. */
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
    if constexpr (!OVL) {
      /* v1's order: dV and dK complete (P^T, dS^T die) before dQ. */
      scree_wgmma_wait<0>();
      scree_reg_fence(dv);
      scree_reg_fence(dk);
      scree_mbar_arrive(qempty(s)); /* Q, dO, lse2, D of the stage read */
    }
    /* The dQ staging rows are free again once their issuers have seen the
     * previous item's bulk reductions read them (before this barrier). */
    if (issuer) bulk_wait_read();
    consumers_sync(); /* dS^T of every warpgroup written and fenced */

    /* dQ = dS K in passes of 64 columns, as v1; with OVL the first pass is
     * issued behind dV and dK, and one wait covers both. */
    const int cidx = 1 + h * p.ctiles + cbase + m;
    if (p.det && pend >= 0) __threadfence();
#pragma unroll
    for (int pi = 0; pi < QPASSES; pi++) {
      const int c = wg + pi * NWG;
      const bool mine = c < KP;
      float qa[32];
      if (mine) {
        const unsigned long long dds = scree_wg_desc(sds, K_PANEL, 1024);
        const unsigned long long dkn = scree_wg_desc(sbi + K_OFF + c * K_PANEL, K_PANEL, 1024);
        scree_reg_fence(qa);
        scree_wgmma_fence();
#pragma unroll
        for (int k = 0; k < BN / 16; k++)
          mma_tt64(qa, desc_at(dds, k * 16 * 128), desc_at(dkn, k * 16 * 128), k > 0);
        scree_wgmma_commit();
      }
      scree_wgmma_wait<0>();
      if (mine) scree_reg_fence(qa);
      if (OVL && pi == 0) {
        scree_reg_fence(dv);
        scree_reg_fence(dk);
        scree_mbar_arrive(qempty(s));
      }
      if (p.det && pi == 0) {
        consumers_sync(); /* every consumer has fenced the previous item's adds */
        if (lead) {
          if (pend >= 0) atomicAdd(p.counters + pend, 1);
          const int target = n - tile_range(Lq, Lk, m, p.wl, p.wr).lo;
          /* v1's wait, but without its trap after 2^31 spins: a trap
           * anywhere in the consumers' code keeps them at the launch's 168
           * registers despite setmaxnreg (ptxas, CUDA 13.0: 392 bytes of
           * spills at head_dim 64). Leaving the wait instead still gives
           * correct sums (the adds are atomic), only unordered. */
          unsigned spins = 0;
          while (atomicAdd(p.counters + cidx, 0) != target && ++spins != 0x80000000u)
            __nanosleep(64);
          __threadfence();
        }
        consumers_sync();
      }
      if (mine && bulk) {
        /* Staged: every row, the bulk reductions skip those past the end. */
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int r = 16 * warp + gr + 8 * hh;
          const unsigned o = sbi + DQ_OFF + r * DQ_ROW + 4 * (64 * c + 2 * tq4);
#pragma unroll
          for (int j = 0; j < 8; j++)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(o + 32 * j),
                         "f"(qa[4 * j + 2 * hh]), "f"(qa[4 * j + 2 * hh + 1])
                         : "memory");
        }
      } else if (mine) {
        float *accb = p.dqacc + ((long long)h * p.total_q + q0 + (long long)m * BM) * D + 64 * c;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int r = 16 * warp + gr + 8 * hh;
          if (m * BM + r < Lq) {
#pragma unroll
            for (int j = 0; j < 8; j++)
              red_add2(accb + (long long)r * D + 8 * j + 2 * tq4, qa[4 * j + 2 * hh],
                       qa[4 * j + 2 * hh + 1]);
          }
        }
      }
    }
    if (bulk) {
      scree_fence_proxy_async(); /* the staged rows, for the copy engine */
      consumers_sync();
      if (issuer && m * BM + ct < Lq)
        bulk_red_add(p.dqacc + ((long long)h * p.total_q + q0 + (long long)m * BM + ct) * D,
                     sbi + DQ_OFF + ct * DQ_ROW, 4 * D);
    }
    pend = cidx;
  }
  if (issuer) bulk_wait(); /* before the CTA's shared memory goes */
  if (p.det && pend >= 0) {
    __threadfence();
    consumers_sync();
    if (lead) atomicAdd(p.counters + pend, 1);
  }

  /* dK (times scale) and dV of the warpgroup's keys, written once (rows
   * past the sequence's end never). */
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
        const int col = 8 * j + 2 * tq4;
        *reinterpret_cast<unsigned *>(dkr + col) =
            scree_pack2<SCREE_DTYPE>(dk[4 * j + 2 * hh] * sc, dk[4 * j + 2 * hh + 1] * sc);
        *reinterpret_cast<unsigned *>(dvr + col) =
            scree_pack2<SCREE_DTYPE>(dv[4 * j + 2 * hh], dv[4 * j + 2 * hh + 1]);
      }
    }
  }
}
#endif /* SCREE_WS */
