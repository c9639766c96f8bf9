/*
 * attention_backward.cu - varlen attention backward, FlashAttention-2 style,
 * for mma.sync (sm_80 and newer).
 *
 * Given the forward's q, k, v, out and lse (natural log, [heads_q,
 * total_q]) and dout = dL/dout, for each sequence b, query head h (kv head
 * g = h / group), row i and visible key j (the forward's masks,
 * kernels/attention.cu):
 *
 *   x_ij  = q_i . k_j;  s_ij = x_ij, or with a softcap cap_out tanh(cap_in x_ij)
 *   P_ij  = 2^(s_ij scale_log2 - lse_i log2 e)         (the forward's lse)
 *   D_i   = dout_i . out_i                             (preprocess)
 *   dS_ij = P_ij (dout_i . v_j - D_i) (1 - tanh^2)     (1 without a softcap)
 *   dq_i  = scale sum_j dS_ij k_j
 *   dk_j  = scale sum_{h in group, i} dS_ij q_i;  dv_j = sum_{h in group, i} P_ij dout_i
 *
 * A row whose lse is -inf adds nothing and gets dq = 0; a key no row sees
 * gets dk = dv = 0. fp16 or bf16 in and out, fp32 accumulation; P and dS
 * are rounded to the input dtype before their products (as FlashAttention-2).
 *
 * Three kernels, launched in this order on one stream (one module):
 *   scree_attention_bwd_prep  D_i (fp32), lse_i in the log2 domain (+inf for
 *     a row without keys, so that every P of that row is 0), the fp32 dQ
 *     accumulator zeroed, the work-ticket and order counters zeroed.
 *   scree_attention_bwd       one CTA per (KV tile of BN keys, sequence, kv
 *     head); tickets (below) give the order. K and V of the tile stay in
 *     shared memory; the CTA walks the group's query heads in order and,
 *     for each, the Q tiles of BM rows that see the tile (ascending), and per
 *     Q tile:
 *       S^T  = K Q^T           [BN x BM]  A = K (ldmatrix), B = Q (ldmatrix)
 *       dP^T = V dO^T          [BN x BM]  A = V, B = dO
 *       P^T, dS^T from S^T, dP^T, lse and D; masked on the tiles a mask cuts;
 *       stored to shared memory as 16-bit values
 *       dV  += P^T dO          [BN x D]   A = P^T, B = dO (ldmatrix.trans)
 *       dK  += dS^T Q          [BN x D]   A = dS^T, B = Q (ldmatrix.trans)
 *       dQ  += dS K            [BM x D]   A = dS (ldmatrix.trans of dS^T),
 *                                         B = K (ldmatrix.trans); fp32
 *                                         red.global.add into the accumulator
 *                                         (.v2 on sm_90)
 *     dK and dV stay in registers over the whole group (GQA summed in a fixed
 *     order: head, then Q tile, then the MMA's own order) and are written
 *     once, dK times scale.
 *   scree_attention_bwd_dq    dq = scale * accumulator, to dq's dtype and
 *     strides.
 * The first and last, with the params struct, live in
 * attention_backward_common.cuh, shared with the Hopper implementation
 * (attention_backward_hopper.cu).
 *
 * Warp tiling: every product's R x C output tile is split over the WARPS
 * warps as a grid of WM x WN warps; each warp owns R / WM rows (m16 tiles)
 * and C / WN columns (n8 blocks in pairs), and per k step reads its R / WM
 * rows of A and C / WN columns of B by ldmatrix. The grid taken is the one
 * that reads least, R / WM + C / WN (warp_rows; the most row warps on a
 * tie): shared-memory bandwidth, not the tensor cores, bounds this kernel
 * (per Q tile of BM = 64 against BN = 128 keys at head_dim 128, 8 warps,
 * the chosen grids read 576 KB for 10.5 MFLOP where 8 x 1 grids read 768 KB).
 * Operands always come from shared memory, so the three tilings (S/dP
 * over BN x BM, dK/dV over BN x D, dQ over BM x D) are independent.
 *
 * Work order and determinism. Each CTA takes a ticket w = atomicAdd(
 * &counters[0], 1) and decodes it as w = (n * batch + b) * heads_kv + g:
 * KV tile n outermost (for causal masks the low tiles see the most rows:
 * longest first), and within one (b, g) the tiles in ascending n. With
 * det != 0 the dQ contributions to Q tile m of head h are added in
 * ascending n: counters[1 + h * ctiles + cbase_b + m] counts the KV tiles
 * that have added theirs; the CTA of tile n waits until it equals n - n_lo
 * (n_lo the first KV tile that sees the Q tile: tile_range, shared with the
 * forward), adds, and bumps it once the adds are fenced: at its next
 * item's dQ step (bumping before it waits there) or after its last item,
 * so the fence finds the adds done. A CTA only waits on tiles with lower
 * tickets, which have started (tickets are taken in start order) and bump
 * without waiting on higher ones, so this cannot deadlock; a wait past
 * ~2^31 polls traps rather than hangs. Every
 * dQ element then receives one add per KV tile in a fixed order that
 * depends only on its own sequence: bitwise reproducible and independent
 * of the rest of the batch. dK and dV are deterministic in both modes.
 * cbase_b = cu_q[b] / BM + b, so ctiles = ceil(total_q / BM) + batch.
 *
 * Shared memory (dynamic):
 *   K [BN rows], V [BN rows], Q [STAGES][BM rows], dO [STAGES][BM rows]
 *   (rows of HEAD_DIM 16-bit elements), P^T, dS^T [BN rows of BM 16-bit
 *   elements], lse and D [STAGES][BM] floats, the CTA's ticket (16 bytes):
 *   bytes = 2 * HEAD_DIM * (2 * BN + 2 * STAGES * BM) + 4 * BN * BM + 8 * STAGES * BM + 16
 *   Every 16-bit tile is swizzled as the forward's: chunk c of row r at
 *   c ^ swz(r), swz(r) = r & 7 for rows of a multiple of 8 chunks, else
 *   (r >> 1) & 3 (rows of 4 or 12 chunks).
 *
 * Macros (all required; set by the host):
 *   variant
 *   SCREE_DTYPE      1 = fp16, 2 = bf16
 *   SCREE_HEAD_DIM   32, 64, 96, 128, 256
 *   SCREE_CAUSAL     0, 1
 *   SCREE_WINDOW     0, 1 (window_left / window_right applied)
 *   config
 *   SCREE_BM         32, 64, 128 (query rows per Q tile)
 *   SCREE_BN         32, 64, 128 (keys per CTA)
 *   SCREE_WARPS      4, 8
 *   SCREE_STAGES     1, 2 (Q / dO / lse / D buffers: 2 loads the next Q
 *                    tile while this one is computed)
 * Constraints (static_assert below; the host check mirrors them):
 *   each product tile (BN x BM, BN x HEAD_DIM, BM x HEAD_DIM) splits over
 *     the warps as some WM x WN grid (WM a power of two) with both
 *     R / WM and C / WN multiples of 16;
 *   registers: (BN * HEAD_DIM + BN * BM) / (16 * WARPS) <= 192, 160 at
 *     HEAD_DIM 256 (dK, dV, S and dP accumulators per thread);
 *   shared memory (formula above) <= the arch's per-block opt-in limit.
 *
 * Host guarantees: q, k, v, out, dout, dq, dk, dv 16-byte aligned, token and
 * head strides multiples of 8 elements; dq, dk, dv disjoint from the inputs
 * and from each other (they may interleave); cu_q / cu_k non-decreasing from
 * 0; workspace as ops/attention_backward.c sizes it; scale > 0; cap_in /
 * cap_out as the forward's (both 0: no softcap); sequence lengths < 2^30.
 *
 * Test: ctest -R attention_backward (CPU: arguments, compile; GPU:
 * test_attention_backward_gpu). Registers and spills:
 * build/bench/kernel_report attention_backward <variant> <config> --arch sm_90.
 */
#include "ptx.cuh"

#if !defined(SCREE_DTYPE) || !defined(SCREE_HEAD_DIM) || !defined(SCREE_CAUSAL) || \
    !defined(SCREE_WINDOW) || !defined(SCREE_BM) || !defined(SCREE_BN) ||          \
    !defined(SCREE_WARPS) || !defined(SCREE_STAGES)
#error "attention_backward.cu: every SCREE_* macro listed in the header must be defined"
#endif
/* attention_sched.cuh reads it (decode_work, unused here). */
#define SCREE_SCHED 1

namespace scree_attn {

typedef scree_dtype_of<SCREE_DTYPE>::type elem;

constexpr int D = SCREE_HEAD_DIM;
constexpr int BM = SCREE_BM;
constexpr int BN = SCREE_BN;
constexpr int WARPS = SCREE_WARPS;
constexpr int STAGES = SCREE_STAGES;
constexpr bool CAUSAL = SCREE_CAUSAL != 0;
constexpr bool WINDOW = SCREE_WINDOW != 0;
constexpr int THREADS = WARPS * 32;
constexpr int CPR = D / 8;   /* 16-byte chunks per row of a [.., D] tile */
constexpr int ROWB = D * 2;  /* bytes per row of a [.., D] tile */
constexpr int CPRM = BM / 8; /* chunks per row of P^T, dS^T */
constexpr int ROWBM = BM * 2;

/* Warp grids: an R x C product tile over WARPS warps as wm x (WARPS / wm),
 * each warp's rows and columns multiples of 16. Every warp reads its R / wm
 * rows of A and C / wn columns of B from shared memory per k step, so the
 * grid taken is the one with the least R / wm + C / wn (shared-memory
 * traffic), the most row warps on a tie; 0 when no grid fits. */
__host__ __device__ constexpr int imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int warp_rows(int r, int c, int w) {
  int best = 0, cost = 1 << 30;
  for (int wm = w; wm >= 1; wm /= 2) {
    const int wn = w / wm;
    if (r % (16 * wm) == 0 && c % (16 * wn) == 0 && r / wm + c / wn < cost) {
      best = wm;
      cost = r / wm + c / wn;
    }
  }
  return best;
}
constexpr int WM_S = warp_rows(BN, BM, WARPS); /* S, dP: BN x BM */
constexpr int WM_K = warp_rows(BN, D, WARPS);  /* dK, dV: BN x D */
constexpr int WM_Q = warp_rows(BM, D, WARPS);  /* dQ: BM x D */
static_assert(WM_S > 0 && WM_K > 0 && WM_Q > 0,
              "warp tiling: every product tile (BN x BM, BN x HEAD_DIM, BM x HEAD_DIM) must "
              "split over the warps into whole 16 x 16 blocks");
constexpr int WN_S = WARPS / WM_S, WN_K = WARPS / WM_K, WN_Q = WARPS / WM_Q;
constexpr int MS = BN / WM_S / 16, NS = BM / WN_S / 8;  /* m16 tiles, n8 blocks per warp */
constexpr int MK = BN / WM_K / 16, NK = D / WN_K / 8;
constexpr int MQ = BM / WM_Q / 16, NQ = D / WN_Q / 8;
/* dQ columns per pass, in n8 blocks: at most 8, dividing NQ (even). */
constexpr int NQC = NQ <= 8 ? NQ : NQ % 8 == 0 ? 8 : NQ % 6 == 0 ? 6 : 4;
static_assert(NQ % NQC == 0 && NQC % 2 == 0, "dQ passes");

constexpr int K_OFF = 0;
constexpr int V_OFF = BN * ROWB;
constexpr int Q_OFF = 2 * BN * ROWB;
constexpr int DO_OFF = Q_OFF + STAGES * BM * ROWB;
constexpr int P_OFF = DO_OFF + STAGES * BM * ROWB;
constexpr int DS_OFF = P_OFF + BN * ROWBM;
constexpr int LSE_OFF = DS_OFF + BN * ROWBM;
constexpr int DD_OFF = LSE_OFF + STAGES * BM * 4;
constexpr int TICKET_OFF = DD_OFF + STAGES * BM * 4; /* the CTA's ticket, 16 bytes */
constexpr int SMEM_BYTES = TICKET_OFF + 16;
static_assert(SMEM_BYTES ==
                  2 * D * (2 * BN + 2 * STAGES * BM) + 4 * BN * BM + 8 * STAGES * BM + 16,
              "shared memory layout");
constexpr int REG_EST = (BN * D + BN * BM) / (16 * WARPS);
#ifdef SCREE_MINB
constexpr int MINB = SCREE_MINB;
#else
constexpr int MINB = 1;
#endif

constexpr int SMEM_LIMIT = SCREE_SMEM_OPTIN; /* ptx.cuh */

static_assert(SCREE_DTYPE == 1 || SCREE_DTYPE == 2, "SCREE_DTYPE must be 1 (fp16) or 2 (bf16)");
static_assert(D == 32 || D == 64 || D == 96 || D == 128 || D == 256,
              "SCREE_HEAD_DIM must be 32, 64, 96, 128 or 256");
static_assert(SCREE_CAUSAL == 0 || SCREE_CAUSAL == 1, "SCREE_CAUSAL must be 0 or 1");
static_assert(SCREE_WINDOW == 0 || SCREE_WINDOW == 1, "SCREE_WINDOW must be 0 or 1");
static_assert(BM == 32 || BM == 64 || BM == 128, "SCREE_BM must be 32, 64 or 128");
static_assert(BN == 32 || BN == 64 || BN == 128, "SCREE_BN must be 32, 64 or 128");
static_assert(WARPS == 4 || WARPS == 8, "SCREE_WARPS must be 4 or 8");
static_assert(STAGES == 1 || STAGES == 2, "SCREE_STAGES must be 1 or 2");
static_assert(REG_EST <= (D <= 128 ? 192 : 160),
              "register budget: (BN * HEAD_DIM + BN * BM) / (16 * WARPS) must be <= 192 "
              "(160 at HEAD_DIM 256)");
static_assert(SMEM_BYTES <= SMEM_LIMIT,
              "shared memory 2*HEAD_DIM*(2*BN + 2*STAGES*BM) + 4*BN*BM + 8*STAGES*BM + 16 "
              "exceeds this architecture's limit");
static_assert(THREADS >= BM, "one thread per Q row loads lse and D");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

#include "attention_sched.cuh"

/* Swizzle of a tile whose rows hold C chunks of 16 bytes. */
template <int C> __device__ __forceinline__ int swz(int r) {
  if constexpr (C % 8 == 0)
    return r & 7;
  else
    return (r >> 1) & 3;
}
/* Shared address of chunk c of row r of a tile at base with C chunks a row. */
template <int C> __device__ __forceinline__ unsigned tile_addr(unsigned base, int r, int c) {
  return base + (unsigned)(r * C * 16) + (unsigned)((c ^ swz<C>(r)) << 4);
}

/* cp.async ROWS rows of D elements (row r from g + r * ts) into a swizzled
 * tile; rows >= valid are zero-filled (src-size 0: not read). */
constexpr int CPRP = CPR <= 4 ? 4 : CPR <= 8 ? 8 : CPR <= 16 ? 16 : 32;
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned sdst, const elem *g, long long ts, int valid) {
  constexpr int RS = THREADS / CPRP;
  constexpr int IT = (ROWS + RS - 1) / RS;
  const int r0 = (int)threadIdx.x / CPRP, c0 = (int)threadIdx.x % CPRP;
  if (CPRP == CPR || c0 < CPR) {
#pragma unroll
    for (int i = 0; i < IT; i++) {
      const int r = r0 + i * RS;
      if (ROWS % RS == 0 || r < ROWS) {
        const bool ok = r < valid;
        scree_cp_async16(tile_addr<CPR>(sdst, r, c0), ok ? g + (long long)r * ts + c0 * 8 : g,
                         ok ? 16 : 0);
      }
    }
  }
}

/* Fragment loads (ptx.cuh's layouts; lane l):
 *   A from a [m][k] tile (not transposed): row m0 + (l & 15), chunk k0/8 + (l >> 4);
 *   A from a [k][m] tile (transposed): row k0 + 8 (l >> 4) + (l & 7),
 *     chunk m0/8 + ((l >> 3) & 1);
 *   B (two n8 blocks n0, n0 + 8) from a [n][k] tile: row n0 + 8 (l >> 4) + (l & 7),
 *     chunk k0/8 + ((l >> 3) & 1); r0, r1 = b0, b1 of block n0; r2, r3 of n0 + 8;
 *   B from a [k][n] tile (transposed): row k0 + 8 ((l >> 3) & 1) + (l & 7),
 *     chunk n0/8 + (l >> 4); same register order. */
/* Shared address of chunk ci + cl of row ri + rl of a tile at base (C
 * chunks a row), where ri and ci are compile-time once the loops are
 * unrolled (ri a multiple of 8, ci even) and rl, cl the lane's own (cl 0 or
 * 1). Then swz(ri + rl) = swz(rl) and chunk (ci + cl) ^ swz = ci ^ (cl ^
 * swz), so with C a power of two the lane's offset within the tile is one
 * register and every (ri, ci) an immediate add and XOR, instead of a
 * register per distinct swizzled chunk the compiler would otherwise keep
 * live over the whole loop. */
template <int C>
__device__ __forceinline__ unsigned frag_addr(unsigned base, int ri, int rl, int ci, int cl) {
  if constexpr ((C & (C - 1)) == 0) {
    const unsigned lane = (unsigned)(rl * C * 16) + (unsigned)((cl ^ swz<C>(rl)) << 4);
    return base + (unsigned)(ri * C * 16) + (lane ^ (unsigned)(ci << 4));
  } else {
    return tile_addr<C>(base, ri + rl, ci + cl);
  }
}
template <int C>
__device__ __forceinline__ void lda(unsigned base, int m0, int k0, unsigned (&a)[4]) {
  const int l = threadIdx.x & 31;
  scree_ldsm_x4(frag_addr<C>(base, m0, l & 15, k0 >> 3, l >> 4), a[0], a[1], a[2], a[3]);
}
template <int C>
__device__ __forceinline__ void lda_t(unsigned base, int m0, int k0, unsigned (&a)[4]) {
  const int l = threadIdx.x & 31;
  scree_ldsm_x4_trans(frag_addr<C>(base, k0, ((l >> 4) << 3) + (l & 7), m0 >> 3, (l >> 3) & 1),
                      a[0], a[1], a[2], a[3]);
}
template <int C>
__device__ __forceinline__ void ldb(unsigned base, int n0, int k0, unsigned (&b)[4]) {
  const int l = threadIdx.x & 31;
  scree_ldsm_x4(frag_addr<C>(base, n0, ((l >> 4) << 3) + (l & 7), k0 >> 3, (l >> 3) & 1),
                b[0], b[1], b[2], b[3]);
}
template <int C>
__device__ __forceinline__ void ldb_t(unsigned base, int n0, int k0, unsigned (&b)[4]) {
  const int l = threadIdx.x & 31;
  scree_ldsm_x4_trans(frag_addr<C>(base, k0, (((l >> 3) & 1) << 3) + (l & 7), n0 >> 3, l >> 4),
                      b[0], b[1], b[2], b[3]);
}

/* acc[M][N] (m16 x n8 blocks of a warp tile at rows r0, cols c0) += A B over
 * K elements: A from tile a (CA chunks a row; transposed if AT), B from tile
 * b (CB chunks a row; transposed if BT). */
template <int M, int N, int K, int CA, bool AT, int CB, bool BT>
__device__ __forceinline__ void warp_mma(float (&acc)[M][N][4], unsigned a, unsigned b, int r0,
                                         int c0) {
  static_assert(N % 2 == 0, "n8 blocks in pairs");
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    unsigned af[M][4];
#pragma unroll
    for (int i = 0; i < M; i++) {
      if constexpr (AT)
        lda_t<CA>(a, r0 + 16 * i, k, af[i]);
      else
        lda<CA>(a, r0 + 16 * i, k, af[i]);
    }
#pragma unroll
    for (int j = 0; j < N; j += 2) {
      unsigned bf[4];
      if constexpr (BT)
        ldb_t<CB>(b, c0 + 8 * j, k, bf);
      else
        ldb<CB>(b, c0 + 8 * j, k, bf);
#pragma unroll
      for (int i = 0; i < M; i++) {
        scree_mma_16816<SCREE_DTYPE>(acc[i][j], af[i], bf[0], bf[1]);
        scree_mma_16816<SCREE_DTYPE>(acc[i][j + 1], af[i], bf[2], bf[3]);
      }
    }
  }
}

template <int M, int N> __device__ __forceinline__ void zero(float (&acc)[M][N][4]) {
#pragma unroll
  for (int i = 0; i < M; i++)
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
}


} /* namespace scree_attn */

using namespace scree_attn;

#include "attention_backward_common.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, MINB) scree_attention_bwd(const params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned sb = scree_smem_u32(smem);
  /* The ticket goes through dynamic shared memory (no static shared
   * memory: the host's size is the whole of it). */
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

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, tq = lane & 3;
  const int sr0 = warp / WN_S * (BN / WM_S), sc0 = warp % WN_S * (BM / WN_S); /* S, dP */
  const int kr0 = warp / WN_K * (BN / WM_K), kc0 = warp % WN_K * (D / WN_K);   /* dK, dV */
  const int wq_m = warp / WN_Q, wq_n = warp % WN_Q; /* dQ */
  const int qr0 = wq_m * (BM / WM_Q), qc0 = wq_n * (D / WN_Q);

  /* Q rows that see this tile: the forward's row rule inverted. */
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

  /* K and V of the tile. */
  load_tile<BN>(sb + K_OFF, p.k + (long long)(k0 + n * BN) * p.k_ts + (long long)g * p.k_hs, p.k_ts,
                Lk - n * BN);
  load_tile<BN>(sb + V_OFF, p.v + (long long)(k0 + n * BN) * p.v_ts + (long long)g * p.v_hs, p.v_ts,
                Lk - n * BN);

  /* Q, dO, lse2 and D of item it (head h0 + it / nm, Q tile mlo + it % nm)
   * into stage st. */
  auto load_item = [&](int it, int st) {
    const int h = h0 + it / nm, m = mlo + it % nm;
    const int r0 = m * BM;
    load_tile<BM>(sb + Q_OFF + st * BM * ROWB,
                  p.q + (long long)(q0 + r0) * p.q_ts + (long long)h * p.q_hs, p.q_ts, Lq - r0);
    load_tile<BM>(sb + DO_OFF + st * BM * ROWB,
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
        /* rows past the end: P = 0, D = 0 */
        reinterpret_cast<float *>(smem + LSE_OFF)[st * BM + r] = pos_inf();
        reinterpret_cast<float *>(smem + DD_OFF)[st * BM + r] = 0.f;
      }
    }
  };

  float dk[MK][NK][4], dv[MK][NK][4];
  zero(dk);
  zero(dv);

  int pend = -1; /* deterministic mode: the order counter still to bump */
  if (items > 0) load_item(0, 0);
  scree_cp_async_commit();

  for (int it = 0; it < items; it++) {
    const int st = STAGES == 2 ? (it & 1) : 0;
    const int h = h0 + it / nm, m = mlo + it % nm;
    if constexpr (STAGES == 1) {
      if (it > 0) {
        __syncthreads(); /* every warp is done with the previous item's Q and dO */
        load_item(it, 0);
        scree_cp_async_commit();
      }
    }
    scree_cp_async_wait<0>();
    __syncthreads(); /* this item's tiles are visible; the previous item is done */
    if constexpr (STAGES == 2) {
      if (it + 1 < items) load_item(it + 1, st ^ 1);
      scree_cp_async_commit();
    }
    const unsigned sq = sb + Q_OFF + st * BM * ROWB, sdo = sb + DO_OFF + st * BM * ROWB;
    const float *slse = reinterpret_cast<const float *>(smem + LSE_OFF) + st * BM;
    const float *sdd = reinterpret_cast<const float *>(smem + DD_OFF) + st * BM;

    /* S^T = K Q^T and dP^T = V dO^T, this warp's [BN / WM_S x BM / WN_S]. */
    {
      float s[MS][NS][4], dp[MS][NS][4];
      zero(s);
      zero(dp);
      warp_mma<MS, NS, D, CPR, false, CPR, false>(s, sb + K_OFF, sq, sr0, sc0);
      warp_mma<MS, NS, D, CPR, false, CPR, false>(dp, sb + V_OFF, sdo, sr0, sc0);
      const kv_range rg = tile_range(Lq, Lk, m, p.wl, p.wr);
      const bool masked = !(n >= rg.full_lo && n < rg.full_hi);
      const int dbase = n * BN - m * BM - (Lk - Lq), kend = Lk - n * BN;
      const int righti = CAUSAL ? 0 : p.wr;
      const bool cap = p.cap_in != 0.f;
#pragma unroll
      for (int i = 0; i < MS; i++)
#pragma unroll
        for (int j = 0; j < NS; j++) {
          unsigned pp[2], dd[2];
#pragma unroll
          for (int hh = 0; hh < 2; hh++) {
            const int kr = sr0 + 16 * i + gr + 8 * hh; /* key row in the tile */
            float pv[2], dsv[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int qc = sc0 + 8 * j + 2 * tq + e; /* Q row in the tile */
              float x = s[i][j][2 * hh + e];
              float f = 1.f;
              if (cap) {
                const float th = scree_tanh(p.cap_in * x);
                x = p.cap_out * th;
                f = 1.f - th * th;
              }
              float pe = scree_ex2(x * p.scale_log2 - slse[qc]);
              if (masked) {
                /* key j2 = n BN + kr against query i2 = m BM + qc, in 32 bits:
                 * dj = j2 - (i2 + off), |dj| < 2^31 as lengths are < 2^30. */
                const int dj = dbase + kr - qc;
                bool vis = kr < kend;
                if (rb) vis = vis && dj <= righti;
                if (lb) vis = vis && dj >= -p.wl;
                if (!vis) pe = 0.f;
              }
              pv[e] = pe;
              dsv[e] = pe * (dp[i][j][2 * hh + e] - sdd[qc]) * f;
            }
            pp[hh] = scree_pack2<SCREE_DTYPE>(pv[0], pv[1]);
            dd[hh] = scree_pack2<SCREE_DTYPE>(dsv[0], dsv[1]);
          }
          /* 4 bytes at (key row, Q columns qc, qc + 1) of P^T and dS^T. */
#pragma unroll
          for (int hh = 0; hh < 2; hh++) {
            const int kr = sr0 + 16 * i + gr + 8 * hh;
            const int col = sc0 + 8 * j + 2 * tq;
            const unsigned o = (unsigned)(kr * ROWBM) +
                               (unsigned)((((col >> 3) ^ swz<CPRM>(kr)) << 4) + (col & 7) * 2);
            *reinterpret_cast<unsigned *>(smem + P_OFF + o) = pp[hh];
            *reinterpret_cast<unsigned *>(smem + DS_OFF + o) = dd[hh];
          }
        }
    }
    __syncthreads(); /* P^T and dS^T complete */

    /* dV += P^T dO, dK += dS^T Q: this warp's [BN / WM_K x D / WN_K]. */
    warp_mma<MK, NK, BM, CPRM, false, CPR, true>(dv, sb + P_OFF, sdo, kr0, kc0);
    warp_mma<MK, NK, BM, CPRM, false, CPR, true>(dk, sb + DS_OFF, sq, kr0, kc0);

    /* dQ += dS K: this warp's [BM / WM_Q x D / WN_Q], NQC n8 blocks at a
     * time, into the accumulator (rows of this sequence only). */
    {
      const int cidx = 1 + h * p.ctiles + cbase + m;
      /* Deterministic mode: the previous item's adds are released here, one
       * item of work after they were issued (each thread's fence then finds
       * them done instead of waiting on them), and this item's counter is
       * polled after the first pass's MMAs, just before its first add. */
      if (p.det && pend >= 0) __threadfence();
      float *accb = p.dqacc + ((long long)h * p.total_q + q0 + (long long)m * BM) * D;
#pragma unroll
      for (int c = 0; c < NQ; c += NQC) {
        float a[MQ][NQC][4];
        zero(a);
        warp_mma<MQ, NQC, BN, CPRM, true, CPR, true>(a, sb + DS_OFF, sb + K_OFF, qr0, qc0 + 8 * c);
        if (p.det && c == 0) {
          __syncthreads(); /* every thread has fenced the previous item's adds */
          if (threadIdx.x == 0) {
            if (pend >= 0) atomicAdd(p.counters + pend, 1);
            const int target = n - tile_range(Lq, Lk, m, p.wl, p.wr).lo;
            /* An atomic read (at L2, coherent); the fence orders the
             * accumulator's reads and adds after it. */
            unsigned spins = 0;
            while (atomicAdd(p.counters + cidx, 0) != target) {
              if (++spins == 0x80000000u) __trap();
              __nanosleep(64); /* fewer polls of a contended line */
            }
            __threadfence();
          }
          __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < MQ; i++)
#pragma unroll
          for (int hh = 0; hh < 2; hh++) {
            const int r = qr0 + 16 * i + gr + 8 * hh;
            if (m * BM + r < Lq) {
#pragma unroll
              for (int j = 0; j < NQC; j++) {
                red_add2(accb + (long long)r * D + qc0 + 8 * (c + j) + 2 * tq, a[i][j][2 * hh],
                         a[i][j][2 * hh + 1]);
              }
            }
          }
      }
      pend = cidx;
    }
  }
  if (p.det && pend >= 0) { /* release the last item's adds */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(p.counters + pend, 1);
  }

  /* dK (times scale) and dV of the tile's keys, written once. */
  const float sc = p.scale;
#pragma unroll
  for (int i = 0; i < MK; i++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int kr = kr0 + 16 * i + gr + 8 * hh;
      if (n * BN + kr < Lk) {
        const long long tok = (long long)k0 + n * BN + kr;
        elem *dkr = p.dk + tok * p.dk_ts + (long long)g * p.dk_hs;
        elem *dvr = p.dv + tok * p.dv_ts + (long long)g * p.dv_hs;
#pragma unroll
        for (int j = 0; j < NK; j++) {
          const int col = kc0 + 8 * j + 2 * tq;
          *reinterpret_cast<unsigned *>(dkr + col) =
              scree_pack2<SCREE_DTYPE>(dk[i][j][2 * hh] * sc, dk[i][j][2 * hh + 1] * sc);
          *reinterpret_cast<unsigned *>(dvr + col) =
              scree_pack2<SCREE_DTYPE>(dv[i][j][2 * hh], dv[i][j][2 * hh + 1]);
        }
      }
    }
}
