/*
 * attention.cu - varlen attention forward, FlashAttention-2 style (exact).
 *
 * For each sequence b, query head h and query row i of b:
 *
 *   out[i, h, :] = sum_j softmax_j(s(q[i, h, :] . k[j, h / group, :])) v[j, h / group, :]
 *   lse[h, i]    = log(sum_j exp(s(q[i, h, :] . k[j, h / group, :])))     (natural log)
 *   s(x)         = scale * x, or with softcap c > 0: c * tanh(scale * x / c) (Gemma 2)
 *
 * over the keys j of sequence b visible to i (include/scree.h,
 * scree_attention_args): bottom-right aligned, query i sits at key position
 * i + Lk - Lq; causal keeps j <= i + Lk - Lq; the window keeps
 * j in [i + Lk - Lq - left, i + Lk - Lq + right] (negative: unbounded side;
 * with causal the right bound is 0). A row with no visible key gets out = 0
 * and lse = -inf. fp16 or bf16 in and out, fp32 accumulation.
 *
 * Work item = (sequence, q-tile of BM rows, query head); one CTA of WARPS
 * warps handles one item at a time. Warp w owns query rows
 * [w * RPW, (w + 1) * RPW) of the tile, RPW = BM / WARPS = 16 or 32 (one or
 * two m16 MMA row tiles, MT). The CTA walks the key tiles of BN keys from
 * the last visible one down to the first (so the masked diagonal tile comes
 * first); tiles above the causal diagonal or wholly outside the window are
 * never visited, and only tiles cut by the diagonal, a window edge or the
 * end of the keys apply a mask (a CTA-uniform branch per tile). Per tile:
 *   S = Q K^T     mma.sync m16n8k16, A = Q (ldmatrix, or registers if QREG),
 *                 B = K (ldmatrix, not transposed); fp32 S in registers.
 *   softcap       with cap_in != 0: s = cap_out tanh(cap_in s) (cap_in =
 *                 scale / softcap, cap_out = softcap / scale, so that scale
 *                 s becomes softcap tanh(scale s / softcap)); a uniform
 *                 branch per tile, before the mask (a run-time value, not a
 *                 variant: no config or compile depends on it).
 *   softmax       online, in registers, base 2 with the scale folded in
 *                 (p = 2^(s * scale_log2 - m * scale_log2), one FFMA + EX2);
 *                 row max reduced over the 4 lanes of a quad by shuffles;
 *                 O and the row sum are rescaled by alpha = 2^(m_old - m_new).
 *   O += P V      P packed from the S accumulators straight into A fragments
 *                 (no shared-memory round trip); B = V by ldmatrix.trans.
 *   row sum l     on the tensor core: l += P * ones (one extra m16n8k16 per
 *                 m16 row tile and 16 keys; every column of the result is
 *                 the full row sum, so no quad reduction). P enters this
 *                 MMA as fp16 also for bf16 inputs (a second packing):
 *                 bf16's 8-bit mantissa put lse off by up to 1.9e-3.
 * Epilogue: O / l converted to 16 bits, staged through the warp's own rows
 * of the Q tile in shared memory, stored with 16-byte coalesced stores; lse
 * written by one lane per row when lse != NULL. Rows past the sequence end
 * are computed on zero-filled Q but never stored.
 *
 * Pipeline (cp.async, 16-byte copies, zero-filled past the end of a
 * sequence: src-size 0, so P V never sees garbage and nothing past a
 * buffer is read):
 *   STAGES = 1: one K and one V buffer, FlashAttention-2's order: wait K_j,
 *     issue V_j, S = Q K_j^T, barrier, issue K_{j+1}, softmax, wait V_j,
 *     P V_j. Three barriers per tile.
 *   STAGES = 2, 3: rings of K and V buffers; tile j+STAGES-1 is issued
 *     right after the barrier that opens tile j (its buffer was last read in
 *     tile j-1), so loads run STAGES-1 tiles ahead. One barrier per tile.
 *   Q shares the first group with K_0 (and V_0). Rows past a sequence's
 *   end are copied with src-size 0 from their (unread) address.
 *
 * Shared memory (dynamic only; the host sets the > 48 KiB attribute):
 *   bytes = 2 * SCREE_HEAD_DIM * (SCREE_BM + 2 * SCREE_STAGES * SCREE_BN)
 *   layout: Q [BM rows], K stage 0..STAGES-1 [BN rows each], V stage
 *   0..STAGES-1 [BN rows each]; a row is HEAD_DIM 16-bit elements, split
 *   into CPR = HEAD_DIM / 8 chunks of 16 bytes.
 * Swizzle (all tiles, and the output staging): logical chunk c of row r
 *   lives at chunk c ^ f(r) of the same row, with
 *     f(r) = r & 7          when CPR is a multiple of 8 (d = 64, 128, 256)
 *     f(r) = (r >> 1) & 3   when CPR is 4 or 12 (d = 32, 96: rows of 64 or
 *                           192 bytes, so row parity already picks the
 *                           half of the 128-byte bank line)
 *   Both keep a chunk inside its row (the XOR touches only the low 3, resp.
 *   2, bits, and CPR is a multiple of 8, resp. 4), and make the 8 rows of
 *   any 8-row-aligned ldmatrix phase, and any 8 consecutive 16-byte cp.async
 *   writes of the row-major copy order, hit 8 distinct 16-byte bank groups.
 *
 * Macros (all required; set by the host):
 *   variant
 *   SCREE_DTYPE      1 = fp16, 2 = bf16 (q, k, v, out)
 *   SCREE_HEAD_DIM   32, 64, 96, 128, 256
 *   SCREE_CAUSAL     0, 1
 *   SCREE_WINDOW     0, 1: window_left / window_right applied (negative =
 *                    unbounded on that side); 0 ignores both
 *   config
 *   SCREE_BM         64, 128 (query rows per CTA)
 *   SCREE_BN         32, 64, 128 (keys per tile)
 *   SCREE_WARPS      4, 8; BM / WARPS must be 16 or 32 (so BM=64 needs 4)
 *   SCREE_STAGES     1, 2, 3 (K/V buffers each)
 *   SCREE_QREG       1: Q fragments kept in registers across the key loop;
 *                    0: re-read from shared memory (ldmatrix) every tile
 *   SCREE_SCHED      0: grid (max_qtiles, heads_q, batch), q-tile =
 *                       blockIdx.x (reversed when causal, heavy tiles
 *                       first); tiles past a sequence's end exit; sched
 *                       unused (may be NULL). batch <= 65535.
 *                    1: sched from scree_attention_schedule, sorted by work
 *                       (longest first); grid (cap * heads_q); CTA w runs
 *                       work index w (decode_work below: ranks in chunks,
 *                       heads inside a chunk); w >= ntiles * heads_q exits.
 *                    2: as 1, persistent: any grid (host: min(cap *
 *                       heads_q, SMs * CTAs per SM)); each CTA takes
 *                       w = atomicAdd(&sched[0], 1) until w >= ntiles *
 *                       heads_q.
 * Constraints (static_assert below; the host mirrors them):
 *   BM / WARPS in {16, 32}: (BM, WARPS) in {(64, 4), (128, 4), (128, 8)}.
 *   Register budget (fp32 accumulators and fragments per thread):
 *     MT * (HEAD_DIM / 2 + BN / 2) + QREG * MT * HEAD_DIM / 4 <= 192,
 *     MT = BM / WARPS / 16. Beyond it ptxas spills heavily (sm_90). Inside
 *     it a few configs still spill a little and are slow (not for a
 *     safelist): d = 256 m64n128w4 (56-100 bytes), d = 96 m64n128w4,
 *     m128n32w4 q1, m128n32w8s1 (4-36 bytes).
 *   __launch_bounds__(THREADS, MINB), MINB = 65536 / (THREADS * (REG_EST +
 *     56, or + 64 for bf16)) clamped to [1, 4] (e.g. 2 for BM=128 / 4 warps,
 *     3 for d = 32 fp16).
 *   Shared memory bytes (formula above) <= the arch's per-block opt-in
 *     limit: 232448 (sm_90, sm_100), 166912 (sm_80, sm_87), 101376 (others).
 *
 * Host guarantees: q, k, v, out 16-byte aligned; every token and head stride
 * a multiple of 8 elements; out disjoint from q, k, v; cu_q / cu_k
 * non-decreasing from 0 (batch + 1 entries); scale > 0 (scale_log2 = scale *
 * log2(e)); cap_in = scale / softcap and cap_out = softcap / scale for a
 * softcap > 0, both 0 for none; group = heads_q / heads_kv >= 1; sequence
 * lengths < 2^30.
 * Launch: blockDim = WARPS * 32, dynamic smem as above. For SCHED 1 and 2,
 * scree_attention_schedule (same module, so the same BM / BN / CAUSAL /
 * WINDOW) runs first on the same stream with 1 CTA of 1024 threads and the
 * same window values; sched holds 2 + 2 * cap ints,
 * cap = min(batch * ceil(max_q / BM), ceil(total_q / BM) + batch).
 *
 * Optional development macros (never set by the host): SCREE_MINB (CTAs per
 * SM for __launch_bounds__), SCREE_ATTN_RANK_CHUNK (fixed SCHED 1/2 rank
 * chunk), SCREE_ATTN_MMA_ROWSUM (0 = fp32 adds; default 1).
 *
 * Measured (H100, bench/results/attention-dev-notes.md): BM=128 / 4 warps
 * (two m16 row tiles per warp) wins at every head_dim but 256; d <= 96:
 * m128n64w4s2 (QREG 1 for d <= 64), d = 128: m128n64w4s2q0, d = 256:
 * m128n64w8s2q0. 1.1-1.75x FlashAttention-2 on the six benchmark configs.
 *
 * Develop and test on a GPU: python3 bench/attention_dev.py --check
 *   (correctness matrix against a float64 reference), --bench (against
 *   FlashAttention-2), --sanitize (for compute-sanitizer); here, without a
 *   GPU: --local (NVRTC compile time, ptxas registers and spills, SASS
 *   instruction counts).
 */
#include "ptx.cuh"

#if !defined(SCREE_DTYPE) || !defined(SCREE_HEAD_DIM) || !defined(SCREE_CAUSAL) || \
    !defined(SCREE_WINDOW) || !defined(SCREE_BM) || !defined(SCREE_BN) ||          \
    !defined(SCREE_WARPS) || !defined(SCREE_STAGES) || !defined(SCREE_QREG) ||     \
    !defined(SCREE_SCHED)
#error "attention.cu: every SCREE_* macro listed in the header must be defined"
#endif

/* Row sums of P (development switch; 1 is the default):
 *   0  fp32 adds per lane, quad-reduced at the end (FlashAttention-2's way);
 *   1  on the tensor core: P times a ones B fragment, accumulated in fp32;
 *      P enters as fp16 (for bf16 a second, fp16 packing of P: bf16's 8-bit
 *      mantissa put lse off by up to 1.9e-3);
 * 1 measured 3-6% faster than 0 at d = 128 (64 fewer FADDs per lane and
 * tile for 8 more MMAs per warp and tile; no spills) and neutral at d = 64;
 * tf32 m16n8k8 straight from the S registers measured 3-10% slower than 1. */
#ifndef SCREE_ATTN_MMA_ROWSUM
#define SCREE_ATTN_MMA_ROWSUM 1
#endif

namespace scree_attn {

typedef scree_dtype_of<SCREE_DTYPE>::type elem;

constexpr int D = SCREE_HEAD_DIM;
constexpr int BM = SCREE_BM;
constexpr int BN = SCREE_BN;
constexpr int WARPS = SCREE_WARPS;
constexpr int STAGES = SCREE_STAGES;
constexpr bool QREG = SCREE_QREG != 0;
constexpr bool CAUSAL = SCREE_CAUSAL != 0;
constexpr bool WINDOW = SCREE_WINDOW != 0;
constexpr int THREADS = WARPS * 32;
constexpr int RPW = BM / WARPS;   /* query rows per warp */
constexpr int MT = RPW / 16;      /* m16 row tiles per warp */
constexpr int CPR = D / 8;        /* 16-byte chunks per row */
constexpr int ROWB = D * 2;       /* bytes per row */
constexpr int KS = D / 16;        /* k-steps of Q K^T */
constexpr int DN = D / 8;         /* n8 blocks of O */
constexpr int NB = BN / 8;        /* n8 blocks of S */
constexpr int PK = BN / 16;       /* k-steps of P V */
constexpr int Q_BYTES = BM * ROWB;
constexpr int KV_BYTES = BN * ROWB;
constexpr int K_OFF = Q_BYTES;
constexpr int V_OFF = Q_BYTES + STAGES * KV_BYTES;
constexpr int SMEM_BYTES = 2 * D * (BM + 2 * STAGES * BN);
constexpr int REG_EST = MT * (D / 2 + BN / 2) + (QREG ? MT * D / 4 : 0);
/* CTAs per SM asked of ptxas (__launch_bounds__), which caps registers at
 * 65536 / (THREADS * MINB). SCREE_MINB (optional, development only)
 * overrides the derived value. */
#ifdef SCREE_MINB
constexpr int MINB = SCREE_MINB;
#else
/* addresses, loop state, fragments in flight; bf16 also packs P to fp16
 * for the row-sum MMA */
constexpr int REG_OVERHEAD = SCREE_DTYPE == 2 ? 64 : 56;
constexpr int MINB_RAW = 65536 / (THREADS * (((REG_EST + REG_OVERHEAD) + 7) / 8 * 8));
constexpr int MINB = MINB_RAW < 1 ? 1 : (MINB_RAW > 4 ? 4 : MINB_RAW);
#endif

constexpr int SMEM_LIMIT = SCREE_SMEM_OPTIN; /* ptx.cuh */

static_assert(SCREE_DTYPE == 1 || SCREE_DTYPE == 2, "SCREE_DTYPE must be 1 (fp16) or 2 (bf16)");
static_assert(D == 32 || D == 64 || D == 96 || D == 128 || D == 256,
              "SCREE_HEAD_DIM must be 32, 64, 96, 128 or 256");
static_assert(SCREE_CAUSAL == 0 || SCREE_CAUSAL == 1, "SCREE_CAUSAL must be 0 or 1");
static_assert(SCREE_WINDOW == 0 || SCREE_WINDOW == 1, "SCREE_WINDOW must be 0 or 1");
static_assert(BM == 64 || BM == 128, "SCREE_BM must be 64 or 128");
static_assert(BN == 32 || BN == 64 || BN == 128, "SCREE_BN must be 32, 64 or 128");
static_assert(WARPS == 4 || WARPS == 8, "SCREE_WARPS must be 4 or 8");
static_assert(STAGES >= 1 && STAGES <= 3, "SCREE_STAGES must be 1, 2 or 3");
static_assert(SCREE_QREG == 0 || SCREE_QREG == 1, "SCREE_QREG must be 0 or 1");
static_assert(SCREE_SCHED >= 0 && SCREE_SCHED <= 2, "SCREE_SCHED must be 0, 1 or 2");
static_assert(RPW == 16 || RPW == 32,
              "SCREE_BM / SCREE_WARPS must be 16 or 32 rows per warp (BM=64 needs WARPS=4)");
static_assert(REG_EST <= 192,
              "register budget: MT*(HEAD_DIM/2 + BN/2) + QREG*MT*HEAD_DIM/4 must be <= 192 "
              "(MT = BM/WARPS/16); larger configs spill");
static_assert(SMEM_BYTES <= SMEM_LIMIT,
              "shared memory 2*HEAD_DIM*(BM + 2*STAGES*BN) exceeds this architecture's limit");

/* Physical chunk of logical chunk c in row r (see the header): c ^ swz(r).
 * SWM = the chunk bits the swizzle touches. */
constexpr int SWM = (CPR % 8 == 0) ? 7 : 3;
__device__ __forceinline__ int swz(int r) {
  if constexpr (CPR % 8 == 0)
    return r & 7;
  else
    return (r >> 1) & 3;
}
/* Byte offset, within a row, of chunk C + (lane's chunk bit), where C is a
 * compile-time even chunk and lc = lane's chunk bit ^ swz(lane's row) (< SWM
 * + 1): the XOR touches only C & SWM, so a lane needs at most 4 distinct
 * registers over all C and the rest is an immediate (C is a constant once
 * the loops are unrolled). */
__device__ __forceinline__ unsigned chunk_off(int c, int lc) {
  return (unsigned)(((c & ~SWM) << 4) + (((c & SWM) ^ lc) << 4));
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

#include "attention_sched.cuh"

/* cp.async a tile of ROWS rows (row r from g + r * ts) into swizzled shared
 * memory at sdst; rows >= valid are zero-filled: src-size 0, so nothing is
 * read there (the address, at most ROWS rows past the sequence, is not
 * dereferenced; the same zero-fill pattern as CUTLASS's cp_async_zfill and
 * Triton's masked pipelined loads). Thread tid copies chunk column
 * c0 = tid % CPRP of rows r0 = tid / CPRP, r0 + RS, ... (CPRP = CPR rounded
 * up to a power of two; for d = 96 a quarter of the threads idle): one
 * per-thread pointer per tile, and the per-copy steps i * RS * ts are
 * warp-uniform, so no per-copy 64-bit offset is kept in registers. */
constexpr int CPRP = CPR <= 4 ? 4 : CPR <= 8 ? 8 : CPR <= 16 ? 16 : 32;
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned sdst, const elem *g, long long ts,
                                          int valid) {
  constexpr int RS = THREADS / CPRP;
  constexpr int IT = (ROWS + RS - 1) / RS;
  const int r0 = (int)threadIdx.x / CPRP, c0 = (int)threadIdx.x % CPRP;
  if (CPRP == CPR || c0 < CPR) {
    const unsigned d0 = sdst + r0 * ROWB;
    const elem *p = g + (long long)r0 * ts + c0 * 8;
#pragma unroll
    for (int i = 0; i < IT; i++) {
      const int r = r0 + i * RS;
      if (ROWS % RS == 0 || r < ROWS)
        scree_cp_async16(d0 + i * RS * ROWB + ((c0 ^ swz(r)) << 4),
                         p + (long long)(i * RS) * ts, r < valid ? 16 : 0);
    }
  }
}

/* One work item: sequence b, q-tile m, query head h. */
__device__ __forceinline__ void run_item(
    unsigned char *smem, unsigned sbase, int b, int m, int h, const elem *q, const elem *k,
    const elem *v, elem *out, float *lse, const int *cu_q, const int *cu_k, long long q_ts,
    long long q_hs, long long k_ts, long long k_hs, long long v_ts, long long v_hs,
    long long o_ts, long long o_hs, long long total_q, int group, float sl2, int wl,
    int wr, float cap_in, float cap_out) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;

  const int q0 = cu_q[b], Lq = cu_q[b + 1] - q0;
  const int k0 = cu_k[b], Lk = cu_k[b + 1] - k0;
  const int kvh = h / group;
  const kv_range rg = tile_range(Lq, Lk, m, wl, wr);
  const int ntl = rg.hi - rg.lo;

  const elem *qb = q + (long long)q0 * q_ts + (long long)h * q_hs;
  const elem *kb = k + (long long)k0 * k_ts + (long long)kvh * k_hs;
  const elem *vb = v + (long long)k0 * v_ts + (long long)kvh * v_hs;
  const int row0 = m * BM; /* first query row of the tile, within the sequence */

  float o[MT][DN][4];
  float mx[MT][2], ls[MT][2];
#if SCREE_ATTN_MMA_ROWSUM
  /* Row sums from the tensor core: P times a ones B fragment; every column
   * of the 16x8 result holds the full row sum (the MMA reduces over the
   * quad), so lacc[a][0] = row g, lacc[a][2] = row g+8. */
  float lacc[MT][4];
#pragma unroll
  for (int a = 0; a < MT; a++) lacc[a][0] = lacc[a][1] = lacc[a][2] = lacc[a][3] = 0.f;
#endif
#pragma unroll
  for (int a = 0; a < MT; a++) {
#pragma unroll
    for (int d = 0; d < DN; d++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[a][d][e] = 0.f;
    mx[a][0] = mx[a][1] = neg_inf();
    ls[a][0] = ls[a][1] = 0.f;
  }

  if (ntl > 0) {
    /* Per-lane ldmatrix offsets (see the header's swizzle). Q and V: lane
     * gives row lane & 15, chunk bit lane >> 4; K: row (lane & 7) + 8 *
     * (lane >> 4), chunk bit (lane >> 3) & 1. */
    const int sw = swz(lane & 7);
    const unsigned qv_row = (unsigned)((lane & 15) * ROWB);
    const int qv_c = (lane >> 4) ^ sw;
    const unsigned k_row = (unsigned)(((lane & 7) + ((lane >> 4) << 3)) * ROWB);
    const int k_c = ((lane >> 3) & 1) ^ sw;
    const unsigned q_base = sbase + (unsigned)(warp * RPW * ROWB) + qv_row;

    const int nhi = rg.hi;
    auto load_k = [&](int n, int buf) {
      load_tile<BN>(sbase + K_OFF + buf * KV_BYTES, kb + (long long)n * BN * k_ts, k_ts,
                    Lk - n * BN);
    };
    auto load_v = [&](int n, int buf) {
      load_tile<BN>(sbase + V_OFF + buf * KV_BYTES, vb + (long long)n * BN * v_ts, v_ts,
                    Lk - n * BN);
    };

    /* Prologue: group 0 = Q + tile 0 (K only when STAGES == 1). */
    load_tile<BM>(sbase, qb + (long long)row0 * q_ts, q_ts, Lq - row0);
    load_k(nhi - 1, 0);
    if constexpr (STAGES >= 2) {
      load_v(nhi - 1, 0);
      scree_cp_async_commit();
#pragma unroll
      for (int s = 1; s < STAGES - 1; s++) {
        if (s < ntl) {
          load_k(nhi - 1 - s, s);
          load_v(nhi - 1 - s, s);
        }
        scree_cp_async_commit();
      }
    } else {
      scree_cp_async_commit();
    }

    unsigned qf[QREG ? MT : 1][QREG ? KS : 1][4];
    if constexpr (QREG) {
      scree_cp_async_wait<(STAGES >= 2 ? STAGES - 2 : 0)>();
      __syncthreads();
#pragma unroll
      for (int a = 0; a < MT; a++)
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
          scree_ldsm_x4(q_base + a * 16 * ROWB + chunk_off(2 * ks, qv_c), qf[a][ks][0],
                        qf[a][ks][1], qf[a][ks][2], qf[a][ks][3]);
    }

    int buf = 0;
    for (int it = 0; it < ntl; it++) {
      const int n = nhi - 1 - it;
      if constexpr (STAGES == 1) {
        scree_cp_async_wait<0>(); /* K_n (and V_{n+1}) landed */
        __syncthreads();          /* visible to all; every warp done with V_{n+1} */
        load_v(n, 0);
        scree_cp_async_commit();
      } else {
        scree_cp_async_wait<STAGES - 2>(); /* tile n landed */
        __syncthreads();                   /* visible; every warp done with tile n+1 */
        /* tile it+STAGES-1 goes to the stage tile it-1 used */
        const int nt = it + STAGES - 1;
        int nbuf = buf + STAGES - 1;
        if (nbuf >= STAGES) nbuf -= STAGES;
        if (nt < ntl) {
          load_k(nhi - 1 - nt, nbuf);
          load_v(nhi - 1 - nt, nbuf);
        }
        scree_cp_async_commit();
      }

      /* S = Q K^T */
      const unsigned kbuf = sbase + K_OFF + buf * KV_BYTES + k_row;
      float s[MT][NB][4];
#pragma unroll
      for (int a = 0; a < MT; a++)
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) s[a][j][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < KS; ks++) {
        unsigned qa[MT][4];
#pragma unroll
        for (int a = 0; a < MT; a++) {
          if constexpr (QREG) {
#pragma unroll
            for (int e = 0; e < 4; e++) qa[a][e] = qf[a][ks][e];
          } else {
            scree_ldsm_x4(q_base + a * 16 * ROWB + chunk_off(2 * ks, qv_c), qa[a][0],
                          qa[a][1], qa[a][2], qa[a][3]);
          }
        }
#pragma unroll
        for (int np = 0; np < NB / 2; np++) {
          unsigned b0, b1, b2, b3;
          scree_ldsm_x4(kbuf + np * 16 * ROWB + chunk_off(2 * ks, k_c), b0, b1, b2, b3);
#pragma unroll
          for (int a = 0; a < MT; a++) {
            scree_mma_16816<SCREE_DTYPE>(s[a][2 * np], qa[a], b0, b1);
            scree_mma_16816<SCREE_DTYPE>(s[a][2 * np + 1], qa[a], b2, b3);
          }
        }
      }

      if constexpr (STAGES == 1) {
        __syncthreads(); /* every warp done reading K */
        if (it + 1 < ntl) load_k(n - 1, 0);
        scree_cp_async_commit();
      }

      /* Softcap (Gemma 2): s -> (c / scale) tanh(scale s / c), raw units;
       * before the mask, which leaves masked scores at -inf. */
      if (cap_in != 0.f) {
#pragma unroll
        for (int a = 0; a < MT; a++)
#pragma unroll
          for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[a][j][e] = cap_out * scree_tanh(s[a][j][e] * cap_in);
      }

      /* Mask the boundary tiles only. Bounds relative to this lane's first
       * key (2t) and row: CTA-uniform parts in 64 bits once per tile,
       * clamped to +-2^20 (beyond any row or key offset inside a tile) so the
       * per-element compares are 32-bit. */
      if (n < rg.full_lo || n >= rg.full_hi) {
        constexpr long long BIG = 1 << 20;
        const long long kd = (long long)(row0 + Lk - Lq) - (long long)n * BN;
        const int kend = (int)min(BIG, (long long)Lk - 1 - (long long)n * BN);
        int hb = (int)BIG, lb = -(int)BIG;
        if (CAUSAL) hb = (int)max(-BIG, min(BIG, kd));
        else if (WINDOW && wr >= 0) hb = (int)max(-BIG, min(BIG, kd + wr));
        if (WINDOW && wl >= 0) lb = (int)max(-BIG, min(BIG, kd - wl));
        const int lrow = warp * RPW + g - 2 * t;
#pragma unroll
        for (int a = 0; a < MT; a++) {
#pragma unroll
          for (int hh = 0; hh < 2; hh++) {
            const int rr = lrow + a * 16 + hh * 8;
            const int hr = min(hb + rr, kend - 2 * t); /* last visible j*8+e */
            const int lr = lb + rr;                    /* first visible j*8+e */
#pragma unroll
            for (int j = 0; j < NB; j++)
#pragma unroll
              for (int e = 0; e < 2; e++) {
                const int jj = j * 8 + e;
                if (jj > hr || jj < lr) s[a][j][2 * hh + e] = neg_inf();
              }
          }
        }
      }

      /* Online softmax (base 2, scale folded in); P stays in the S registers
       * (fp32) and is packed into A fragments inside the P V loop. */
#pragma unroll
      for (int a = 0; a < MT; a++) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          float mnew = mx[a][hh];
#pragma unroll
          for (int j = 0; j < NB; j++)
            mnew = fmaxf(mnew, fmaxf(s[a][j][2 * hh], s[a][j][2 * hh + 1]));
          mnew = fmaxf(mnew, __shfl_xor_sync(0xffffffffu, mnew, 1));
          mnew = fmaxf(mnew, __shfl_xor_sync(0xffffffffu, mnew, 2));
          /* A row with nothing visible yet keeps m = -inf; use 0 as the base
           * so exp2 gives 0, not NaN. */
          const float ms = (mnew == neg_inf()) ? 0.f : mnew * sl2;
          const float alpha = scree_ex2(mx[a][hh] * sl2 - ms);
          mx[a][hh] = mnew;
          float sum = 0.f;
#pragma unroll
          for (int j = 0; j < NB; j++) {
            const float p0 = scree_ex2(fmaf(s[a][j][2 * hh], sl2, -ms));
            const float p1 = scree_ex2(fmaf(s[a][j][2 * hh + 1], sl2, -ms));
#if !SCREE_ATTN_MMA_ROWSUM
            sum += p0 + p1;
#endif
            s[a][j][2 * hh] = p0;
            s[a][j][2 * hh + 1] = p1;
          }
#if SCREE_ATTN_MMA_ROWSUM
          (void)sum;
          lacc[a][2 * hh] *= alpha;
          lacc[a][2 * hh + 1] *= alpha;
#else
          ls[a][hh] = ls[a][hh] * alpha + sum;
#endif
#pragma unroll
          for (int d = 0; d < DN; d++) {
            o[a][d][2 * hh] *= alpha;
            o[a][d][2 * hh + 1] *= alpha;
          }
        }
      }

      if constexpr (STAGES == 1) {
        scree_cp_async_wait<1>(); /* V_n landed (K_{n-1} may be pending) */
        __syncthreads();
      }

      /* O += P V */
      const unsigned vbuf = sbase + V_OFF + buf * KV_BYTES + qv_row;
#pragma unroll
      for (int pk = 0; pk < PK; pk++) {
        unsigned pf[MT][PK][4];
#pragma unroll
        for (int a = 0; a < MT; a++) {
          pf[a][pk][0] = scree_pack2<SCREE_DTYPE>(s[a][2 * pk][0], s[a][2 * pk][1]);
          pf[a][pk][1] = scree_pack2<SCREE_DTYPE>(s[a][2 * pk][2], s[a][2 * pk][3]);
          pf[a][pk][2] = scree_pack2<SCREE_DTYPE>(s[a][2 * pk + 1][0], s[a][2 * pk + 1][1]);
          pf[a][pk][3] = scree_pack2<SCREE_DTYPE>(s[a][2 * pk + 1][2], s[a][2 * pk + 1][3]);
#if SCREE_ATTN_MMA_ROWSUM == 1
          if constexpr (SCREE_DTYPE == 1) {
            scree_mma_16816<1>(lacc[a], pf[a][pk], 0x3C003C00u, 0x3C003C00u);
          } else {
            unsigned ph[4];
            ph[0] = scree_pack2<1>(s[a][2 * pk][0], s[a][2 * pk][1]);
            ph[1] = scree_pack2<1>(s[a][2 * pk][2], s[a][2 * pk][3]);
            ph[2] = scree_pack2<1>(s[a][2 * pk + 1][0], s[a][2 * pk + 1][1]);
            ph[3] = scree_pack2<1>(s[a][2 * pk + 1][2], s[a][2 * pk + 1][3]);
            scree_mma_16816<1>(lacc[a], ph, 0x3C003C00u, 0x3C003C00u);
          }
#endif
        }
#pragma unroll
        for (int dp = 0; dp < DN / 2; dp++) {
          unsigned b0, b1, b2, b3;
          scree_ldsm_x4_trans(vbuf + pk * 16 * ROWB + chunk_off(2 * dp, qv_c), b0, b1, b2,
                              b3);
#pragma unroll
          for (int a = 0; a < MT; a++) {
            scree_mma_16816<SCREE_DTYPE>(o[a][2 * dp], pf[a][pk], b0, b1);
            scree_mma_16816<SCREE_DTYPE>(o[a][2 * dp + 1], pf[a][pk], b2, b3);
          }
        }
      }
      buf = (buf + 1 == STAGES) ? 0 : buf + 1;
    }
    scree_cp_async_wait<0>();
  }

  /* Epilogue: finish the row sums, normalise, stage through this warp's own
   * rows of the Q tile (only this warp ever read them), store 16 bytes a
   * lane. */
  float inv[MT][2];
#pragma unroll
  for (int a = 0; a < MT; a++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
#if SCREE_ATTN_MMA_ROWSUM
      const float l = lacc[a][2 * hh];
#else
      float l = ls[a][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
#endif
      ls[a][hh] = l;
      inv[a][hh] = l > 0.f ? 1.f / l : 0.f;
    }
  __syncwarp();
#pragma unroll
  for (int a = 0; a < MT; a++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int r = warp * RPW + a * 16 + g + 8 * hh;
      unsigned char *rowp = smem + r * ROWB + 4 * t;
      const int sr = swz(r);
#pragma unroll
      for (int d = 0; d < DN; d++)
        *reinterpret_cast<unsigned *>(rowp + ((d ^ sr) << 4)) = scree_pack2<SCREE_DTYPE>(
            o[a][d][2 * hh] * inv[a][hh], o[a][d][2 * hh + 1] * inv[a][hh]);
    }
  __syncwarp();
  {
    typedef scree_vec<unsigned, 4> u4;
    elem *ob = out + (long long)q0 * o_ts + (long long)h * o_hs;
    constexpr int WCH = RPW * CPR;
#pragma unroll
    for (int i = 0; i < (WCH + 31) / 32; i++) {
      const int idx = lane + i * 32;
      if (WCH % 32 == 0 || idx < WCH) {
        const int rr = idx / CPR, c = idx % CPR;
        const int r = warp * RPW + rr;
        if (row0 + r < Lq) {
          const u4 val = *reinterpret_cast<const u4 *>(smem + r * ROWB + ((c ^ swz(r)) << 4));
          *reinterpret_cast<u4 *>(ob + (long long)(row0 + r) * o_ts + c * 8) = val;
        }
      }
    }
  }
  if (lse != nullptr && t == 0) {
#pragma unroll
    for (int a = 0; a < MT; a++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int r = row0 + warp * RPW + a * 16 + g + 8 * hh;
        if (r < Lq) {
          const float l = ls[a][hh];
          lse[(long long)h * total_q + q0 + r] =
              l > 0.f ? (mx[a][hh] * sl2 + scree_lg2(l)) * 0.69314718055994531f : neg_inf();
        }
      }
  }
}

} /* namespace scree_attn */

extern "C" __global__ void __launch_bounds__(scree_attn::THREADS, scree_attn::MINB)
scree_attention_fwd(const scree_attn::elem *q, const scree_attn::elem *k,
                    const scree_attn::elem *v, scree_attn::elem *out, float *lse,
                    const int *cu_q, const int *cu_k, long long q_ts, long long q_hs,
                    long long k_ts, long long k_hs, long long v_ts, long long v_hs,
                    long long o_ts, long long o_hs, long long total_q, int batch,
                    int heads_q, int group, float scale_log2, int window_left,
                    int window_right, float cap_in, float cap_out, int *sched,
                    int max_qtiles) {
  using namespace scree_attn;
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned sbase = scree_smem_u32(smem);
  (void)batch;
  (void)max_qtiles;
#if SCREE_SCHED == 0
  (void)sched;
  const int b = blockIdx.z, h = blockIdx.y;
  const int m = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  if (m * BM >= cu_q[b + 1] - cu_q[b]) return;
  run_item(smem, sbase, b, m, h, q, k, v, out, lse, cu_q, cu_k, q_ts, q_hs, k_ts, k_hs, v_ts,
           v_hs, o_ts, o_hs, total_q, group, scale_log2, window_left, window_right, cap_in,
           cap_out);
#elif SCREE_SCHED == 1
  const int ntiles = sched[1];
  int r, h;
  if (!decode_work((int)blockIdx.x, ntiles, heads_q, r, h)) return;
  const int b = sched[2 + 2 * r], m = sched[3 + 2 * r];
  run_item(smem, sbase, b, m, h, q, k, v, out, lse, cu_q, cu_k, q_ts, q_hs, k_ts, k_hs, v_ts,
           v_hs, o_ts, o_hs, total_q, group, scale_log2, window_left, window_right, cap_in,
           cap_out);
#else
  const int ntiles = sched[1];
  /* The work index is broadcast through the last 16 bytes of the last V
   * stage: nothing writes them before the first barrier inside run_item's
   * key loop (the prologue fills stages 0..STAGES-2 only, and with STAGES=1
   * V is first issued after that barrier). */
  volatile int *slot = reinterpret_cast<volatile int *>(smem + SMEM_BYTES - 16);
  for (;;) {
    __syncthreads(); /* the previous item is done with shared memory */
    if (threadIdx.x == 0) *slot = atomicAdd(&sched[0], 1);
    __syncthreads();
    int r, h;
    if (!decode_work(*slot, ntiles, heads_q, r, h)) break;
    const int b = sched[2 + 2 * r], m = sched[3 + 2 * r];
    run_item(smem, sbase, b, m, h, q, k, v, out, lse, cu_q, cu_k, q_ts, q_hs, k_ts, k_hs,
             v_ts, v_hs, o_ts, o_hs, total_q, group, scale_log2, window_left, window_right,
             cap_in, cap_out);
  }
#endif
}
