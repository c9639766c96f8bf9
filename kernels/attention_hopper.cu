/*
 * attention_hopper.cu - varlen attention forward for Hopper (sm_90a): the
 * same operation, masks and outputs as attention.cu (its header states
 * them), computed with warpgroup MMAs on tiles the copy engine brings in.
 *
 * CTA = 1 producer warpgroup + CWG consumer warpgroups (128 threads each).
 * Work item = (sequence, q-tile of BM = 64 * CWG rows, query head), from the
 * longest-first tile list of scree_attention_schedule (attention_sched.cuh):
 * SCHED 1 one item per CTA (blockIdx.x), SCHED 2 a persistent grid taking
 * items from a counter.
 *
 * Producer (warp 0 of warpgroup 0; its other warps exit; registers lowered
 * with setmaxnreg when CWG >= 2): per item, takes the work index and hands
 * it to the consumers through a two-slot ring, loads the Q tile (one box
 * per 64 columns of the head), then the item's key tiles from the last
 * visible one down to the first into a ring of STAGES K and V buffers:
 * K and V of a stage complete on their own mbarriers (kfull, vfull) and are
 * released by the consumers on two others (kempty, vempty), so the next K
 * can land while the current V is still read. The copy engine reads Q, K
 * and V through one 3-d tensor map each over the packed buffer
 * (head_dim, heads, tokens): boxes past the buffer's end read zeros; rows
 * past a sequence's end but inside the buffer read the next sequence's
 * tokens, which the consumers mask (scores) or which the producer zeroes
 * (V rows of a key tile that runs past the sequence: copied on a barrier
 * of their own, zeroed, fenced for the async proxy, then vfull arrived),
 * so P V never multiplies a probability 0 by a stray Inf or NaN.
 *
 * Consumers (warpgroup c = 1..CWG owns query rows 64 (c - 1) .. + 63 of the
 * tile; registers raised with setmaxnreg when CWG >= 2), per key tile:
 *   S = Q K^T     wgmma m64nBNk16, Q and K from shared memory (K-major),
 *                 HEAD_DIM / 16 steps; K released (kempty) once it is done.
 *   softcap       with cap_in != 0: s = cap_out tanh(cap_in s) (cap_in =
 *                 scale / softcap, cap_out = softcap / scale; a uniform
 *                 branch per tile).
 *   mask          only on tiles cut by the diagonal, a window edge or the
 *                 end of the keys (the same bounds as attention.cu).
 *   softmax       online, base 2 with the scale folded in; the row max over
 *                 the 4 lanes of a quad by shuffles; fp32 row sums.
 *   O += P V      O rescaled in registers, then wgmma m64nHEAD_DIMk16 with P
 *                 packed from the S registers as the A operand and V from
 *                 shared memory (N-major: imm-trans-b), BN / 16 steps; V
 *                 released (vempty).
 * Then O / l is stored from registers (4 bytes a lane, rows past the
 * sequence's end skipped), lse by one lane per row; Q is released (qempty)
 * after the item's last S.
 *
 * Shared memory (dynamic, base rounded up to 1024 bytes, so 1024 more are
 * asked): Q [KP panels][BM rows][128 B], then per stage K [KP][BN][128 B]
 * and V [KP][BN][128 B], KP = HEAD_DIM / 64; then the mbarriers and the
 * work slots. Every panel is 1024-byte aligned (BM and BN are multiples of
 * 8), as the 128-byte swizzle of the copy engine and wgmma's descriptors
 * assume.
 *
 * Paged (SCREE_PAGED 1: scree_paged_attention's implementation "hopper",
 * src/runtime/ops/paged_attention.c): the entry is
 * scree_paged_attention_hopper, K and V come from a paged cache through
 * 4-d tensor maps (head_dim, heads_kv, tokens of a page, pages) with boxes
 * of (64, 1, R, 1), R = min(page size, BN) keys: key tile j is BN / R
 * chunks, chunk c from page block_table[b][(j BN + c R) >> logp] at token
 * (j BN + c R) & (page size - 1), each landing at row c R of the tile's
 * panels (R a multiple of 8 keeps every chunk 1024-byte aligned). Lane c of
 * the producer warp reads chunk c's page, one tile ahead, and issues its
 * copies; chunks past the sequence's last page read the last page again
 * (never a block-table entry past the sequence's pages), their rows masked
 * (K) and zeroed (V) as any rows past the end. Key counts come from
 * seqlens_k; causal masking is the window's right side (the host passes
 * 0), so the paged module is compiled with SCREE_CAUSAL 0, SCREE_WINDOW 1.
 *
 * Macros (all required but SCREE_PAGED; set by the host):
 *   variant: SCREE_DTYPE (1 fp16, 2 bf16), SCREE_HEAD_DIM (64, 128),
 *            SCREE_CAUSAL, SCREE_WINDOW (0, 1)
 *   config:  SCREE_BN (64, 128 keys per tile), SCREE_CWG (1, 2, 3 consumer
 *            warpgroups), SCREE_STAGES (2, 3, 4), SCREE_SCHED (1, 2)
 *   impl:    SCREE_PAGED (0 default, 1 paged)
 * Constraints (static_assert; the host mirrors them): shared memory within
 * 232448 bytes; the consumers' accumulators (BN / 2 + HEAD_DIM / 2 + BN / 4
 * registers a thread) within their register budget (below).
 *
 * Host guarantees: the tensor maps (kernel parameters 1-3) describe q, k, v
 * as (head_dim, heads, tokens) with the 128-byte swizzle and boxes of
 * (64, 1, BM) for q and (64, 1, BN) for k and v (paged: k and v as above,
 * page size a power of two from 8 to 256, logp its log2, block_table rows
 * bt_stride ints apart with valid pages for each sequence's keys,
 * seqlens_k[b] its keys); out 4-byte aligned, its strides even; cu_q /
 * cu_k as for attention.cu; sched from
 * scree_attention_schedule (this module, same BM / BN / CAUSAL / WINDOW)
 * on the same stream, 2 + 2 * cap ints. Launch: blockDim = 128 * (CWG + 1),
 * dynamic shared memory SMEM_BYTES (below); SCHED 1: grid cap * heads_q;
 * SCHED 2: any grid (the host: min(cap * heads_q, SMs)).
 */
#include "ptx.cuh"
#include "hopper.cuh"

#ifndef SCREE_PAGED
#define SCREE_PAGED 0
#endif

#if !defined(SCREE_DTYPE) || !defined(SCREE_HEAD_DIM) || !defined(SCREE_CAUSAL) || \
    !defined(SCREE_WINDOW) || !defined(SCREE_BN) || !defined(SCREE_CWG) ||          \
    !defined(SCREE_STAGES) || !defined(SCREE_SCHED) || !defined(SCREE_OVL)
#error "attention_hopper.cu: every SCREE_* macro listed in the header must be defined"
#endif

namespace scree_attn {

typedef scree_dtype_of<SCREE_DTYPE>::type elem;

constexpr int D = SCREE_HEAD_DIM;
constexpr int BN = SCREE_BN;
constexpr int CWG = SCREE_CWG;
constexpr int BM = 64 * CWG;
constexpr int STAGES = SCREE_STAGES;
constexpr bool CAUSAL = SCREE_CAUSAL != 0;
constexpr bool WINDOW = SCREE_WINDOW != 0;
constexpr bool OVL = SCREE_OVL != 0;
constexpr bool PAGED = SCREE_PAGED != 0;
constexpr int THREADS = 128 * (CWG + 1);
constexpr int KP = D / 64;            /* 128-byte panels per row */
constexpr int Q_PANEL = BM * 128;     /* bytes of one Q panel */
constexpr int KV_PANEL = BN * 128;    /* bytes of one K or V panel */
constexpr int LOG_BN = BN == 64 ? 6 : 7;
constexpr int KV_BYTES = KP * KV_PANEL;
constexpr int K_OFF = KP * Q_PANEL;
constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;
constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES;
/* mbarriers: qfull, qempty, vraw, wfull[2], wempty[2], then kfull, vfull,
 * kempty, vempty [STAGES] each; then two work slots. */
constexpr int NBAR = 7 + 4 * STAGES;
constexpr int SLOT_OFF = BAR_OFF + 8 * NBAR;
constexpr int SMEM_BYTES = SLOT_OFF + 16 + 1024;
/* Registers: the producer's warpgroup gives up all but 24 a thread; the
 * consumers share the rest (multiples of 8, at most 240). setmaxnreg moves
 * registers within what the CTA got at launch (65536 / THREADS a thread,
 * rounded down to 8: 168 x 384 for CWG = 2), and an increase the pool
 * cannot cover waits forever: 24 / 240 uses exactly 168 x 384 (32 / 240,
 * measured, hangs). The producer then spills 8 bytes in the windowed
 * non-causal variants, outside the consumers' loop; with the softcap
 * branch, BN = 128 spills 8 bytes too: one value stored at entry and
 * reloaded once per item, outside the key-tile loop (SASS).
 * Paged, the producer holds the block-table walk too: 32 registers (24
 * spilled 36 to 68 bytes, partly inside the key-tile loop), the consumers
 * what is left of the CTA's pool (232 for CWG = 2, 160 for CWG = 3); the
 * producer then spills 16 bytes (24 with CWG = 3 at head_dim 128), stored
 * at entry and reloaded per item, outside the key-tile loop (SASS). */
#if SCREE_PAGED
constexpr int PROD_REGS = 32;
constexpr int CONS_REGS_RAW =
    ((65536 / THREADS) / 8 * 8 * THREADS - 128 * PROD_REGS) / (128 * CWG) / 8 * 8;
#else
constexpr int PROD_REGS = 24;
constexpr int CONS_REGS_RAW = (65536 / 128 - PROD_REGS) / CWG / 8 * 8;
#endif
constexpr int CONS_REGS = CONS_REGS_RAW > 240 ? 240 : CONS_REGS_RAW;
constexpr int ACC_REGS = BN / 2 + D / 2 + BN / 4;
constexpr int NB = BN / 8; /* 8-column blocks of S */
constexpr int DN = D / 8;  /* 8-column blocks of O */

static_assert(SCREE_DTYPE == 1 || SCREE_DTYPE == 2, "SCREE_DTYPE must be 1 (fp16) or 2 (bf16)");
static_assert(D == 64 || D == 128, "SCREE_HEAD_DIM must be 64 or 128");
static_assert(BN == 64 || BN == 128, "SCREE_BN must be 64 or 128");
static_assert(CWG >= 1 && CWG <= 3, "SCREE_CWG must be 1, 2 or 3");
static_assert(STAGES >= 2 && STAGES <= 4, "SCREE_STAGES must be 2, 3 or 4");
static_assert(SCREE_SCHED == 1 || SCREE_SCHED == 2, "SCREE_SCHED must be 1 or 2");
static_assert(SCREE_OVL == 0 || SCREE_OVL == 1, "SCREE_OVL must be 0 or 1");
static_assert(SCREE_PAGED == 0 || SCREE_PAGED == 1, "SCREE_PAGED must be 0 or 1");
static_assert(!PAGED || (!CAUSAL && WINDOW),
              "SCREE_PAGED takes causal masking as the window's right side: CAUSAL 0, WINDOW 1");
static_assert(SMEM_BYTES <= 232448, "shared memory past the 232448 bytes of sm_90");
static_assert(ACC_REGS + 48 <= CONS_REGS,
              "the consumers' accumulators do not fit their register budget");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

#include "attention_sched.cuh"

template <int N>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], unsigned long long da,
                                       unsigned long long db, int scale_d) {
  if constexpr (N == 64)
    scree_wgmma_ss_n64<SCREE_DTYPE>(d, da, db, scale_d);
  else
    scree_wgmma_ss_n128<SCREE_DTYPE>(d, da, db, scale_d);
}
template <int N>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const unsigned (&a)[4],
                                       unsigned long long db, int scale_d) {
  if constexpr (N == 64)
    scree_wgmma_rs_n64<SCREE_DTYPE>(d, a, db, scale_d);
  else
    scree_wgmma_rs_n128<SCREE_DTYPE>(d, a, db, scale_d);
}

/* Item w of the schedule: sequence b, q-tile m, head h; false past the end. */
__device__ __forceinline__ bool item_of(int w, const int *sched, int heads_q, int &b, int &m,
                                        int &h) {
  if (w < 0) return false;
  int r;
  if (!decode_work(w, sched[1], heads_q, r, h)) return false;
  b = sched[2 + 2 * r];
  m = sched[3 + 2 * r];
  return true;
}

} /* namespace scree_attn */

#if SCREE_PAGED
extern "C" __global__ void __launch_bounds__(scree_attn::THREADS, 1)
scree_paged_attention_hopper(const __grid_constant__ scree_tmap tq,
                             const __grid_constant__ scree_tmap tk,
                             const __grid_constant__ scree_tmap tv, scree_attn::elem *out,
                             float *lse, const int *cu_q, const int *seqlens_k,
                             const int *block_table, long long bt_stride, int logp,
                             long long o_ts, long long o_hs, long long total_q, int heads_q,
                             int group, float scale_log2, int window_left, int window_right,
                             float cap_in, float cap_out, int *sched) {
  const int *cu_k = seqlens_k; /* keys_of reads it as seqlens_k */
#else
extern "C" __global__ void __launch_bounds__(scree_attn::THREADS, 1)
scree_attention_hopper(const __grid_constant__ scree_tmap tq, const __grid_constant__ scree_tmap tk,
                       const __grid_constant__ scree_tmap tv, scree_attn::elem *out, float *lse,
                       const int *cu_q, const int *cu_k, long long o_ts, long long o_hs,
                       long long total_q, int heads_q, int group, float scale_log2,
                       int window_left, int window_right, float cap_in, float cap_out,
                       int *sched) {
#endif
  using namespace scree_attn;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned raw = scree_smem_u32(smem_raw);
  const unsigned sbase = (raw + 1023u) & ~1023u;
  unsigned char *smem = smem_raw + (sbase - raw);
  const unsigned bar = sbase + BAR_OFF;
  const unsigned qfull = bar, qempty = bar + 8, vraw = bar + 16;
  auto wfull = [&](int i) { return bar + 24 + 8 * i; };
  auto wempty = [&](int i) { return bar + 40 + 8 * i; };
  auto kfull = [&](int s) { return bar + 56 + 8 * s; };
  auto vfull = [&](int s) { return bar + 56 + 8 * (STAGES + s); };
  auto kempty = [&](int s) { return bar + 56 + 8 * (2 * STAGES + s); };
  auto vempty = [&](int s) { return bar + 56 + 8 * (3 * STAGES + s); };
  volatile int *slot = reinterpret_cast<volatile int *>(smem + SLOT_OFF);
  constexpr unsigned CONSUMERS = 128 * CWG;

  const int tid = threadIdx.x;
  if (tid == 0) {
    scree_mbar_init(qfull, 1);
    scree_mbar_init(qempty, CONSUMERS);
    scree_mbar_init(vraw, 1);
    for (int i = 0; i < 2; i++) {
      scree_mbar_init(wfull(i), 1);
      scree_mbar_init(wempty(i), CONSUMERS);
    }
    for (int s = 0; s < STAGES; s++) {
      scree_mbar_init(kfull(s), 1);
      scree_mbar_init(vfull(s), 1);
      scree_mbar_init(kempty(s), CONSUMERS);
      scree_mbar_init(vempty(s), CONSUMERS);
    }
    scree_mbar_init_fence();
  }
  __syncthreads();

  const int wg = tid / 128;
  if (wg == 0) {
    /* ---- producer ---- */
    if constexpr (CWG >= 2) scree_setmaxnreg_dec<PROD_REGS>();
    if (tid >= 32) return;
    const int lane = tid;
    if (lane == 0) {
      scree_tma_prefetch_desc(&tq);
      scree_tma_prefetch_desc(&tk);
      scree_tma_prefetch_desc(&tv);
    }
    int it = 0;          /* key tiles issued, all items */
    unsigned vraw_n = 0; /* vraw phases used */
    for (int n = 0;; n++) {
      const int ws = n & 1;
      int w = 0;
      if (lane == 0) {
        scree_mbar_wait(wempty(ws), ((n >> 1) & 1) ^ 1);
        if (SCREE_SCHED == 2)
          w = atomicAdd(&sched[0], 1);
        else
          w = n == 0 ? (int)blockIdx.x : -1;
        slot[ws] = w;
        scree_mbar_arrive(wfull(ws));
      }
      w = __shfl_sync(0xffffffffu, w, 0);
      int b, m, h;
      if (!item_of(w, sched, heads_q, b, m, h)) break;
      const int q0 = cu_q[b], Lq = cu_q[b + 1] - q0;
#if SCREE_PAGED
      const int Lk = keys_of(cu_k, b);
#else
      const int k0 = cu_k[b], Lk = cu_k[b + 1] - k0;
#endif
      const int kvh = h / group;
      const kv_range rg = tile_range(Lq, Lk, m, window_left, window_right);
      if (lane == 0) {
        if (n > 0) scree_mbar_wait(qempty, (n - 1) & 1);
        scree_mbar_expect(qfull, KP * Q_PANEL);
#pragma unroll
        for (int p = 0; p < KP; p++)
          scree_tma_load_3d(sbase + p * Q_PANEL, &tq, qfull, 64 * p, h, q0 + m * BM);
      }
#if SCREE_PAGED
      /* Chunks of R keys (a page, or a tile of a larger page): lane c < nch
       * copies chunk c of each tile, from page pg (of this tile) and reads
       * pg_next (the next tile's) while this tile's copies wait. */
      const int lr = logp < LOG_BN ? logp : LOG_BN, nch = BN >> lr;
      const int *bt = block_table + (long long)b * bt_stride;
      const unsigned lastp = (unsigned)(Lk - 1) >> logp, pmask = (1u << logp) - 1u;
      auto page_of = [&](int j) {
        const unsigned key = (unsigned)(j * BN) + ((unsigned)lane << lr);
        return lane < nch ? bt[min(key >> logp, lastp)] : 0;
      };
      int pg = rg.hi > rg.lo ? page_of(rg.hi - 1) : 0;
      for (int j = rg.hi - 1; j >= rg.lo; j--, it++) {
        const int s = it % STAGES;
        const unsigned ph = (unsigned)(it / STAGES) & 1u;
        const unsigned kdst = sbase + K_OFF + s * KV_BYTES + lane * (128u << lr),
                       vdst = sbase + V_OFF + s * KV_BYTES + lane * (128u << lr);
        const int valid = Lk - j * BN;
        const int tok = (int)(((unsigned)(j * BN) + ((unsigned)lane << lr)) & pmask);
        const int pg_next = j > rg.lo ? page_of(j - 1) : 0;
        if (lane == 0) {
          scree_mbar_wait(kempty(s), ph ^ 1);
          scree_mbar_expect(kfull(s), KV_BYTES);
        }
        __syncwarp();
        if (lane < nch) {
#pragma unroll
          for (int p = 0; p < KP; p++)
            scree_tma_load_4d(kdst + p * KV_PANEL, &tk, kfull(s), 64 * p, kvh, tok, pg);
        }
        if (lane == 0) scree_mbar_wait(vempty(s), ph ^ 1);
        if (valid >= BN) {
          if (lane == 0) scree_mbar_expect(vfull(s), KV_BYTES);
          __syncwarp();
          if (lane < nch) {
#pragma unroll
            for (int p = 0; p < KP; p++)
              scree_tma_load_4d(vdst + p * KV_PANEL, &tv, vfull(s), 64 * p, kvh, tok, pg);
          }
        } else {
          /* As unpaged: land on vraw, zero the rows past the end, publish. */
          if (lane == 0) scree_mbar_expect(vraw, KV_BYTES);
          __syncwarp();
          if (lane < nch) {
#pragma unroll
            for (int p = 0; p < KP; p++)
              scree_tma_load_4d(vdst + p * KV_PANEL, &tv, vraw, 64 * p, kvh, tok, pg);
          }
          if (lane == 0) scree_mbar_wait(vraw, vraw_n & 1u);
          vraw_n++;
          __syncwarp();
          const int from = valid > 0 ? valid : 0;
          const scree_vec<unsigned, 4> zero = {{0u, 0u, 0u, 0u}};
          for (int i = from * 8 + lane; i < BN * 8; i += 32) {
            const int r = i >> 3, c = i & 7;
#pragma unroll
            for (int p = 0; p < KP; p++)
              *reinterpret_cast<scree_vec<unsigned, 4> *>(smem + V_OFF + s * KV_BYTES +
                                                          p * KV_PANEL + r * 128 + c * 16) = zero;
          }
          scree_fence_proxy_async();
          __syncwarp();
          if (lane == 0) scree_mbar_arrive(vfull(s));
        }
        pg = pg_next;
      }
    }
#else
      for (int j = rg.hi - 1; j >= rg.lo; j--, it++) {
        const int s = it % STAGES;
        const unsigned ph = (unsigned)(it / STAGES) & 1u;
        const unsigned kdst = sbase + K_OFF + s * KV_BYTES, vdst = sbase + V_OFF + s * KV_BYTES;
        const int row = k0 + j * BN, valid = Lk - j * BN;
        if (lane == 0) {
          scree_mbar_wait(kempty(s), ph ^ 1);
          scree_mbar_expect(kfull(s), KV_BYTES);
#pragma unroll
          for (int p = 0; p < KP; p++)
            scree_tma_load_3d(kdst + p * KV_PANEL, &tk, kfull(s), 64 * p, kvh, row);
          scree_mbar_wait(vempty(s), ph ^ 1);
        }
        if (valid >= BN) {
          if (lane == 0) {
            scree_mbar_expect(vfull(s), KV_BYTES);
#pragma unroll
            for (int p = 0; p < KP; p++)
              scree_tma_load_3d(vdst + p * KV_PANEL, &tv, vfull(s), 64 * p, kvh, row);
          }
        } else {
          /* The tile runs past the sequence: land it on vraw, zero the rows
           * past the end, then publish it on vfull. */
          if (lane == 0) {
            scree_mbar_expect(vraw, KV_BYTES);
#pragma unroll
            for (int p = 0; p < KP; p++)
              scree_tma_load_3d(vdst + p * KV_PANEL, &tv, vraw, 64 * p, kvh, row);
            scree_mbar_wait(vraw, vraw_n & 1u);
          }
          vraw_n++;
          __syncwarp();
          const int from = valid > 0 ? valid : 0;
          const scree_vec<unsigned, 4> zero = {{0u, 0u, 0u, 0u}};
          for (int i = from * 8 + lane; i < BN * 8; i += 32) {
            const int r = i >> 3, c = i & 7;
#pragma unroll
            for (int p = 0; p < KP; p++)
              *reinterpret_cast<scree_vec<unsigned, 4> *>(smem + V_OFF + s * KV_BYTES +
                                                          p * KV_PANEL + r * 128 + c * 16) = zero;
          }
          scree_fence_proxy_async();
          __syncwarp();
          if (lane == 0) scree_mbar_arrive(vfull(s));
        }
      }
    }
#endif
    return;
  }

  /* ---- consumers ---- */
  if constexpr (CWG >= 2) scree_setmaxnreg_inc<CONS_REGS>();
  const int c = wg - 1;              /* this warpgroup's 64 rows of the tile */
  const int ct = tid - 128 * wg;     /* thread within the warpgroup */
  const int warp = ct >> 5, lane = ct & 31;
  const int g = lane >> 2, t = lane & 3;
  const float sl2 = scale_log2;
  int it = 0;
  for (int n = 0;; n++) {
    const int ws = n & 1;
    scree_mbar_wait(wfull(ws), (n >> 1) & 1);
    const int w = slot[ws];
    scree_mbar_arrive(wempty(ws));
    int b, m, h;
    if (!item_of(w, sched, heads_q, b, m, h)) break;
    const int q0 = cu_q[b], Lq = cu_q[b + 1] - q0;
#if SCREE_PAGED
    const int Lk = keys_of(cu_k, b);
#else
    const int Lk = cu_k[b + 1] - cu_k[b];
#endif
    const kv_range rg = tile_range(Lq, Lk, m, window_left, window_right);
    const int row0 = m * BM + 64 * c; /* first row of this warpgroup, in the sequence */

    float o[D / 2];
    float mx[2], ls[2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.f;
    mx[0] = mx[1] = neg_inf();
    ls[0] = ls[1] = 0.f;

    scree_mbar_wait(qfull, n & 1);
    const unsigned qa = sbase + c * 64 * 128;
    unsigned pf[BN / 16][4]; /* P of the tile whose P V is next */
    /* S = Q K^T for the tile in stage ks, issued (the caller commits). */
    auto issue_s = [&](float (&sc)[BN / 2], int ks) {
      const unsigned kb = sbase + K_OFF + ks * KV_BYTES;
#pragma unroll
      for (int k = 0; k < D / 16; k++) {
        const unsigned off = (k & 3) * 32; /* 16 columns = 32 bytes */
        mma_ss<BN>(sc, scree_wg_desc(qa + (k >> 2) * Q_PANEL + off, 16, 1024),
                   scree_wg_desc(kb + (k >> 2) * KV_PANEL + off, 16, 1024), k > 0);
      }
    };
    /* O += P V for the tile in stage vs (P in pf), issued. */
    auto issue_pv = [&](int vs) {
      const unsigned vb = sbase + V_OFF + vs * KV_BYTES;
#pragma unroll
      for (int k = 0; k < BN / 16; k++)
        mma_rs<D>(o, pf[k], scree_wg_desc(vb + k * 16 * 128, KV_PANEL, 1024), 1);
    };
    /* Key tile j's scores: masked, turned into probabilities (online
     * softmax, in place), alpha the rescale of the rows' earlier sums. */
    auto softmax = [&](float (&sc)[BN / 2], int j, float (&alpha)[2]) {
      /* Softcap (Gemma 2): s -> (c / scale) tanh(scale s / c), raw units. */
      if (cap_in != 0.f) {
#pragma unroll
        for (int i = 0; i < BN / 2; i++) sc[i] = cap_out * scree_tanh(sc[i] * cap_in);
      }
      /* Mask the boundary tiles only (attention.cu's bounds). */
      if (j < rg.full_lo || j >= rg.full_hi) {
        constexpr long long BIG = 1 << 20;
        const long long kd = (long long)(m * BM + Lk - Lq) - (long long)j * BN;
        const int kend = (int)min(BIG, (long long)Lk - 1 - (long long)j * BN);
        int hb = (int)BIG, lb = -(int)BIG;
        if (CAUSAL) hb = (int)max(-BIG, min(BIG, kd));
        else if (WINDOW && window_right >= 0) hb = (int)max(-BIG, min(BIG, kd + window_right));
        if (WINDOW && window_left >= 0) lb = (int)max(-BIG, min(BIG, kd - window_left));
        const int lrow = 64 * c + 16 * warp + g - 2 * t;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int rr = lrow + hh * 8;
          const int hr = min(hb + rr, kend - 2 * t); /* last visible i*8+e */
          const int lr = lb + rr;                    /* first visible i*8+e */
#pragma unroll
          for (int i = 0; i < NB; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int jj = i * 8 + e;
              if (jj > hr || jj < lr) sc[4 * i + 2 * hh + e] = neg_inf();
            }
        }
      }

      /* Online softmax. */
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        float mnew = mx[hh];
#pragma unroll
        for (int i = 0; i < NB; i++)
          mnew = fmaxf(mnew, fmaxf(sc[4 * i + 2 * hh], sc[4 * i + 2 * hh + 1]));
        mnew = fmaxf(mnew, __shfl_xor_sync(0xffffffffu, mnew, 1));
        mnew = fmaxf(mnew, __shfl_xor_sync(0xffffffffu, mnew, 2));
        const float ms = (mnew == neg_inf()) ? 0.f : mnew * sl2;
        alpha[hh] = scree_ex2(mx[hh] * sl2 - ms);
        mx[hh] = mnew;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < NB; i++) {
          const float p0 = scree_ex2(fmaf(sc[4 * i + 2 * hh], sl2, -ms));
          const float p1 = scree_ex2(fmaf(sc[4 * i + 2 * hh + 1], sl2, -ms));
          sum += p0 + p1;
          sc[4 * i + 2 * hh] = p0;
          sc[4 * i + 2 * hh + 1] = p1;
        }
        ls[hh] = ls[hh] * alpha[hh] + sum;
      }
    };
    auto rescale_pack = [&](const float (&sc)[BN / 2], const float (&alpha)[2]) {
#pragma unroll
      for (int i = 0; i < DN; i++) {
        o[4 * i + 0] *= alpha[0];
        o[4 * i + 1] *= alpha[0];
        o[4 * i + 2] *= alpha[1];
        o[4 * i + 3] *= alpha[1];
      }
#pragma unroll
      for (int k = 0; k < BN / 16; k++) {
        pf[k][0] = scree_pack2<SCREE_DTYPE>(sc[8 * k + 0], sc[8 * k + 1]);
        pf[k][1] = scree_pack2<SCREE_DTYPE>(sc[8 * k + 2], sc[8 * k + 3]);
        pf[k][2] = scree_pack2<SCREE_DTYPE>(sc[8 * k + 4], sc[8 * k + 5]);
        pf[k][3] = scree_pack2<SCREE_DTYPE>(sc[8 * k + 6], sc[8 * k + 7]);
      }
    };

    if constexpr (!OVL) {
      for (int j = rg.hi - 1; j >= rg.lo; j--, it++) {
        const int s = it % STAGES;
        const unsigned ph = (unsigned)(it / STAGES) & 1u;
        float sc[BN / 2], alpha[2];
        scree_mbar_wait(kfull(s), ph);
        scree_reg_fence(sc);
        scree_wgmma_fence();
        issue_s(sc, s);
        scree_wgmma_commit();
        scree_wgmma_wait<0>();
        scree_reg_fence(sc);
        scree_mbar_arrive(kempty(s));
        softmax(sc, j, alpha);
        rescale_pack(sc, alpha);
        scree_mbar_wait(vfull(s), ph);
        scree_reg_fence(o);
        scree_wgmma_fence();
        issue_pv(s);
        scree_wgmma_commit();
        scree_wgmma_wait<0>();
        scree_reg_fence(o);
        scree_mbar_arrive(vempty(s));
      }
    } else if (rg.hi > rg.lo) {
      /* The first tile alone; then each tile's S is issued with the previous
       * tile's P V behind it, and its softmax runs while P V does. */
      int j = rg.hi - 1;
      int ps = it % STAGES;
      unsigned pph = (unsigned)(it / STAGES) & 1u;
      {
        float sc[BN / 2], alpha[2];
        scree_mbar_wait(kfull(ps), pph);
        scree_reg_fence(sc);
        scree_wgmma_fence();
        issue_s(sc, ps);
        scree_wgmma_commit();
        scree_wgmma_wait<0>();
        scree_reg_fence(sc);
        scree_mbar_arrive(kempty(ps));
        softmax(sc, j, alpha);
        rescale_pack(sc, alpha);
      }
      for (j--, it++; j >= rg.lo; j--, it++) {
        const int s = it % STAGES;
        const unsigned ph = (unsigned)(it / STAGES) & 1u;
        float sc[BN / 2], alpha[2];
        scree_mbar_wait(kfull(s), ph);
        scree_mbar_wait(vfull(ps), pph);
        scree_reg_fence(sc);
        scree_reg_fence(o);
        scree_wgmma_fence();
        issue_s(sc, s);
        scree_wgmma_commit();
        issue_pv(ps);
        scree_wgmma_commit();
        scree_wgmma_wait<1>(); /* S done; P V may still run */
        scree_reg_fence(sc);
        scree_mbar_arrive(kempty(s));
        softmax(sc, j, alpha);
        scree_wgmma_wait<0>();
        scree_reg_fence(o);
        scree_mbar_arrive(vempty(ps));
        rescale_pack(sc, alpha);
        ps = s;
        pph = ph;
      }
      scree_mbar_wait(vfull(ps), pph);
      scree_reg_fence(o);
      scree_wgmma_fence();
      issue_pv(ps);
      scree_wgmma_commit();
      scree_wgmma_wait<0>();
      scree_reg_fence(o);
      scree_mbar_arrive(vempty(ps));
    }
    scree_mbar_arrive(qempty);

    /* Epilogue: row sums over the quad, O / l stored from registers. */
    float inv[2];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      float l = ls[hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      ls[hh] = l;
      inv[hh] = l > 0.f ? 1.f / l : 0.f;
    }
    elem *ob = out + (long long)q0 * o_ts + (long long)h * o_hs;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int r = row0 + 16 * warp + g + 8 * hh;
      if (r < Lq) {
        elem *orow = ob + (long long)r * o_ts + 2 * t;
#pragma unroll
        for (int i = 0; i < DN; i++)
          *reinterpret_cast<unsigned *>(orow + 8 * i) = scree_pack2<SCREE_DTYPE>(
              o[4 * i + 2 * hh] * inv[hh], o[4 * i + 2 * hh + 1] * inv[hh]);
        if (lse != nullptr && t == 0)
          lse[(long long)h * total_q + q0 + r] =
              ls[hh] > 0.f ? (mx[hh] * sl2 + scree_lg2(ls[hh])) * 0.69314718055994531f
                           : neg_inf();
      }
    }
  }
}
