/*
 * paged_attention.cu - attention over a paged KV cache (decode, speculative
 * decoding and chunked prefill), split-KV with GQA folded into the rows.
 *
 * For each sequence b, query head h and query token i of b, with Lq queries
 * and Lk = seqlens_k[b] keys:
 *
 *   out[i, h, :] = sum_j softmax_j(s(q[i, h, :] . K[j, h / group, :])) V[j, h / group, :]
 *   lse[h, i]    = log(sum_j exp(s(...)))                          (natural log)
 *   s(x) = scale * x, or with softcap c > 0: c * tanh(scale * x / c)
 *
 * over the visible keys j (bottom-right aligned, as scree_attention: query i
 * sits at key position p = i + Lk - Lq; causal keeps j <= p; the window keeps
 * j in [p - left, p + right]). Key j of sequence b lives in page
 * block_table[b * bt_stride + j / P], slot j % P (P = 2^logp tokens a page):
 *   K[j, g, :] = k_cache + page * page_stride + (j % P) * token_stride + g * head_stride
 * (V the same with v_cache). A row with no visible key gets zeros and -inf.
 *
 * Rows. The queries of one sequence and one KV head form Lq * group rows,
 * row f = i * group + (h % group) (token-major: a token's heads are adjacent
 * in memory). A work item is BM consecutive rows of that list (any mix of
 * tokens and heads: a decode step with group 8 and 2 queries is 16 rows), so
 * K and V are read once per KV head, not once per query head, and no row of
 * a tile is empty unless the sequence has fewer rows.
 *
 * Splits. The keys an item's sequence can see (the union of its rows'
 * ranges, tiles aligned to BN) are cut into nsplit[b] chunks of chunk[b]
 * keys, one item each. A plan kernel (scree_paged_plan, one CTA, same
 * module) picks them from the device-side lengths: with SPLIT = 0 one chunk
 * per sequence; else chunk = max(BN, W / (target - G)) rounded up to BN,
 * where W is the whole batch's work (sum of rows tiles x keys x KV heads), G
 * its groups (row tiles x KV heads: what rounding each sequence's chunks up
 * can add) and target = SPLIT x SMs x CTAs per SM (the host passes it), so
 * the grid fills every SM in whole waves whatever the batch, and long
 * sequences get more chunks than short ones (target in place of target -
 * G when the groups pass a quarter of it). In batch-invariant mode the host
 * passes target = -chunk instead: chunks of a fixed size, so that a
 * sequence's splits do not depend on the rest of the batch.
 * Items of one (sequence, row tile, KV head) are consecutive; each writes
 * its normalised partial output and LSE (fp32) to the workspace, and the
 * last of them to finish (a counter per group, atomics, fences) merges all
 * the partials, T threads a (row, 8 columns) pair, each over every T-th
 * split with an online maximum, then a fixed butterfly: the result does
 * not depend on which CTA finishes last. With one chunk the item writes
 * out and lse directly.
 *
 * A CTA of WARPS warps runs one item: RW = min(WARPS, BM / 16) row warps,
 * each with MT = BM / 16 / RW m16 row tiles, times KW = WARPS / RW key
 * warps, each taking KN = BN / KW keys of every tile (decode's 16 rows on 4
 * warps: 4 key warps of 16 keys each). Per tile and warp:
 *   S = Q K^T     mma.sync m16n8k16 (Q and K by ldmatrix from shared memory)
 *   softcap       s = (c / scale) tanh(scale s / c), tanh from ex2
 *   mask          only in tiles cut by a row's range or the chunk's end
 *   softmax       online, base 2, scale folded in (FlashAttention-2)
 *   O += P V      P from the S registers, V by ldmatrix.trans
 * At the end each warp puts its m, l and O (fp32) in shared memory (over the
 * K/V stages) and the CTA merges its KW key warps row by row.
 *
 * Pipeline: cp.async (16 bytes, zero-fill past the chunk's end), STAGES
 * rings of K and V tiles, one barrier per tile; a tile's page ids are read
 * from the block table one tile ahead of its copies, so no copy waits for
 * a block-table load.
 *
 * Shared memory (dynamic): max(Q + K/V stages, Q + merge scratch) with
 *   Q = BM * D * 2, K/V = 2 * STAGES * BN * D * 2, scratch = WARPS * 16 * MT
 *   * (D + 2) * 4 bytes, then (6 + 4 * WARPS * 32) * 4 bytes for a plan
 *   made in the CTA. Rows are swizzled as in attention.cu.
 *
 * Self-planned launches: with self_plan (the host sets it when batch <=
 * the CTA's threads and the groups fit its zeroed buffer) there is no plan
 * kernel: every CTA makes the same plan in shared memory (one pass over
 * the lengths, make_plan), so a small decode step is one launch, and the
 * merge counters live in zeroed, a per-stream buffer every launch leaves
 * zero (the merging CTA resets its group's counter).
 *
 * Macros (all required; set by the host):
 *   variant
 *   SCREE_DTYPE      1 = fp16, 2 = bf16 (q, caches, out)
 *   SCREE_HEAD_DIM   32, 64, 96, 128, 256
 *   config
 *   SCREE_BM         16, 32, 64, 128: rows per item
 *   SCREE_BN         32, 64, 128: keys per tile
 *   SCREE_WARPS      4, 8
 *   SCREE_STAGES     2, 3, 4
 *   SCREE_SPLIT      0 (one chunk per sequence), 1, 2, 4, 8 (items per SM slot;
 *                    in batch-invariant mode chunks of 4096 / SCREE_SPLIT keys)
 * Constraints (static_assert below; the host's check mirrors them):
 *   KN = BN / KW a multiple of 16; MT * (D / 2 + KN / 2) <= 160 registers
 *   of accumulators; shared memory within the architecture's opt-in limit.
 *
 * Run-time values (not macros: a branch per item or per tile, not per
 * element): logp (page size 1 to 256), causal (0, 1), wl and wr (window
 * sides, -1 unbounded), cap_in = scale / softcap and cap_out = softcap /
 * scale (cap_in 0: no softcap), sl2 = scale * log2(e).
 *
 * Host guarantees: pointers 16-byte aligned, every stride a multiple of 8
 * elements; out disjoint from everything else; cu_q non-decreasing from 0;
 * seqlens_k[b] in [0, bt_stride * P]; block-table entries of the pages a
 * sequence uses in [0, num_pages); group >= 1. The plan buffer holds
 * 6 + 4 * batch + groups ints; part holds bound * BM * D floats and plse
 * bound * BM, bound = the grid (paged_attention.c says how it is sized).
 *
 * Test alone: ctest -R paged_attention    Bench: bench/compare_torch.py --paged
 */
#include "ptx.cuh"

#if !defined(SCREE_DTYPE) || !defined(SCREE_HEAD_DIM) || !defined(SCREE_BM) ||               \
    !defined(SCREE_BN) || !defined(SCREE_WARPS) || !defined(SCREE_STAGES) || !defined(SCREE_SPLIT)
#error "paged_attention.cu: every SCREE_* macro listed in the header must be defined"
#endif

namespace scree_paged {

typedef scree_dtype_of<SCREE_DTYPE>::type elem;

constexpr int D = SCREE_HEAD_DIM;
constexpr int BM = SCREE_BM;
constexpr int BN = SCREE_BN;
constexpr int WARPS = SCREE_WARPS;
constexpr int STAGES = SCREE_STAGES;
constexpr int THREADS = WARPS * 32;
constexpr int RW = (BM / 16 < WARPS) ? BM / 16 : WARPS; /* row warps */
constexpr int MT = BM / 16 / RW;                        /* m16 tiles per row warp */
constexpr int KW = WARPS / RW;                          /* key warps */
constexpr int KN = BN / KW;                             /* keys per warp and tile */
constexpr int CPR = D / 8;                              /* 16-byte chunks per row */
constexpr int ROWB = D * 2;
constexpr int KS = D / 16;
constexpr int DN = D / 8;
constexpr int NB = KN / 8;
constexpr int PK = KN / 16;
constexpr int Q_BYTES = BM * ROWB;
constexpr int KV_BYTES = BN * ROWB;
constexpr int K_OFF = Q_BYTES;
constexpr int V_OFF = Q_BYTES + STAGES * KV_BYTES;
constexpr int WROWS = 16 * MT;                          /* rows of one warp */
constexpr int SCRATCH = WARPS * WROWS * (D + 2) * 4;
constexpr int MAIN_BYTES = Q_BYTES + 2 * STAGES * KV_BYTES;
constexpr int WORK_BYTES = MAIN_BYTES > Q_BYTES + SCRATCH ? MAIN_BYTES : Q_BYTES + SCRATCH;
/* A self-planned launch keeps its plan after the rest (batch <= THREADS). */
constexpr int PLAN_OFF = WORK_BYTES;
constexpr int SMEM_BYTES = PLAN_OFF + (6 + 4 * THREADS) * 4;
constexpr int REG_EST = MT * (D / 2 + KN / 2);
constexpr int MAXSPLIT = 256; /* chunks of one sequence at most */

constexpr int SMEM_LIMIT = SCREE_SMEM_OPTIN; /* ptx.cuh */

static_assert(SCREE_DTYPE == 1 || SCREE_DTYPE == 2, "SCREE_DTYPE must be 1 (fp16) or 2 (bf16)");
static_assert(D == 32 || D == 64 || D == 96 || D == 128 || D == 256,
              "SCREE_HEAD_DIM must be 32, 64, 96, 128 or 256");
static_assert(BM == 16 || BM == 32 || BM == 64 || BM == 128, "SCREE_BM must be 16, 32, 64 or 128");
static_assert(BN == 32 || BN == 64 || BN == 128, "SCREE_BN must be 32, 64 or 128");
static_assert(WARPS == 4 || WARPS == 8, "SCREE_WARPS must be 4 or 8");
static_assert(STAGES >= 2 && STAGES <= 4, "SCREE_STAGES must be 2, 3 or 4");
static_assert(SCREE_SPLIT == 0 || SCREE_SPLIT == 1 || SCREE_SPLIT == 2 || SCREE_SPLIT == 4 ||
                  SCREE_SPLIT == 8,
              "SCREE_SPLIT must be 0, 1, 2, 4 or 8");
static_assert(MT == 1 || MT == 2, "BM / 16 / row warps must be 1 or 2");
static_assert(KN % 16 == 0, "BN / key warps (WARPS / min(WARPS, BM / 16)) must be a multiple of 16");
static_assert(REG_EST <= 160,
              "register budget: MT * (HEAD_DIM / 2 + keys per warp / 2) must be <= 160");
static_assert(SMEM_BYTES <= SMEM_LIMIT, "shared memory exceeds this architecture's limit");

/* The plan buffer (ints): [0] items, [1] chunk-less groups; then
 * item_start[batch + 1], nsplit[batch], chunk[batch], group_start[batch + 1],
 * then a counter per group. */
__device__ __forceinline__ int *p_start(int *plan) { return plan + 4; }
__device__ __forceinline__ int *p_nsplit(int *plan, int batch) { return plan + 5 + batch; }
__device__ __forceinline__ int *p_chunk(int *plan, int batch) { return plan + 5 + 2 * batch; }
__device__ __forceinline__ int *p_gstart(int *plan, int batch) { return plan + 5 + 3 * batch; }
__device__ __forceinline__ int *p_count(int *plan, int batch) { return plan + 6 + 4 * batch; }

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

/* Rows of sequence b as tiles of BM (Lq * group rows). */
__device__ __forceinline__ int row_tiles(int Lq, int group) {
  return (int)(((long long)Lq * group + BM - 1) / BM);
}

/* The visible keys of query token i: [lo, hi] within [0, Lk) (lo > hi: none). */
struct krange {
  int lo, hi;
};
__device__ __forceinline__ krange row_range(int i, int Lq, int Lk, int causal, int wl, int wr) {
  const long long p = (long long)i + Lk - Lq;
  long long lo = 0, hi = (long long)Lk - 1;
  if (causal) hi = min(hi, p);
  else if (wr >= 0) hi = min(hi, p + wr);
  if (wl >= 0) lo = max(lo, p - wl);
  krange r;
  r.lo = (int)min(lo, (long long)Lk);
  r.hi = (int)max(-1ll, hi);
  if (r.hi < r.lo) r.lo = 0, r.hi = -1;
  return r;
}

/* The keys any query of the sequence sees, from a multiple of BN: [k0, k1)
 * (empty: k0 == k1). Both ends of a token's range move right with i, and
 * p = i + Lk - Lq <= Lk - 1 keeps every lo inside the keys, so the tokens
 * that see a key are a suffix [first, Lq): the union is [lo(first),
 * hi(Lq - 1)]. */
__device__ __forceinline__ void seq_span(int Lq, int Lk, int causal, int wl, int wr, int &k0,
                                         int &k1) {
  k0 = k1 = 0;
  if (Lq <= 0 || Lk <= 0) return;
  int first = 0;
  if (causal || wr >= 0) {
    /* hi(i) = i + Lk - Lq + right >= 0  <=>  i >= Lq - Lk - right */
    const long long f = (long long)Lq - Lk - (causal ? 0 : wr);
    first = (int)max(0ll, f);
  }
  if (first >= Lq) return;
  const krange a = row_range(first, Lq, Lk, causal, wl, wr),
               z = row_range(Lq - 1, Lq, Lk, causal, wl, wr);
  if (z.hi < a.lo) return;
  k0 = a.lo / BN * BN;
  k1 = z.hi + 1;
}

/* ceil(a / b) for b > 0. */
__device__ __forceinline__ long long cdivll(long long a, long long b) { return (a + b - 1) / b; }

/* Physical chunk of logical chunk c in row r: c ^ swz(r) (attention.cu). */
constexpr int SWM = (CPR % 8 == 0) ? 7 : 3;
__device__ __forceinline__ int swz(int r) {
  if constexpr (CPR % 8 == 0)
    return r & 7;
  else
    return (r >> 1) & 3;
}
__device__ __forceinline__ unsigned chunk_off(int c, int lc) {
  return (unsigned)(((c & ~SWM) << 4) + (((c & SWM) ^ lc) << 4));
}

/* The copy shape of a tile: thread tid copies chunk column c0 = tid % CPRP
 * of rows r0 = tid / CPRP, r0 + RS, ... (for d = 96 a quarter idles). */
constexpr int CPRP = CPR <= 4 ? 4 : CPR <= 8 ? 8 : CPR <= 16 ? 16 : 32;
constexpr int RS = THREADS / CPRP;
constexpr int KIT = (BN + RS - 1) / RS; /* K/V rows per thread and tile */
constexpr int QIT = (BM + RS - 1) / RS; /* Q rows per thread */

/* The plan, computed by NT threads of one CTA (all of them call it):
 * plan[0] items, plan[1] groups, then the per-sequence arrays (p_start ..
 * p_gstart); counters (0: none) gets ng zeros. target = items wanted in
 * all (0: one chunk per sequence). The plan kernel runs it with 1024
 * threads; a main kernel with self_plan (batch <= its threads) runs it
 * itself into shared memory, so no launch waits for another. */
template <int NT>
__device__ __forceinline__ void make_plan(const int *cu_q, const int *seqlens_k, int batch,
                                          int group, int heads_kv, long long target, int causal,
                                          int wl, int wr, int *plan, int *counters) {
  constexpr int NWP = NT / 32;
  __shared__ long long red[NWP], gsum[NWP], wi[NWP], wg[NWP];
  __shared__ long long carry[2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  /* 1. The batch's work W = sum of row tiles x span keys, and its groups
   * G (row tiles; both per KV head). Sequence tid's lengths stay in
   * registers for step 2 (a self-planned launch has no other: one round of
   * loads). */
  long long w = 0, gr = 0;
  int lq0 = 0, lk0 = 0;
  for (int b = tid; b < batch; b += NT) {
    const int Lq = cu_q[b + 1] - cu_q[b], Lk = seqlens_k[b];
    if (b == tid) lq0 = Lq, lk0 = Lk;
    int k0, k1;
    seq_span(Lq, Lk, causal, wl, wr, k0, k1);
    const long long rt = row_tiles(Lq, group);
    w += rt * (k1 - k0);
    gr += rt;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    w += __shfl_xor_sync(0xffffffffu, w, o);
    gr += __shfl_xor_sync(0xffffffffu, gr, o);
  }
  if (lane == 0) red[warp] = w, gsum[warp] = gr;
  if (tid == 0) carry[0] = carry[1] = 0;
  __syncthreads();
  long long W = 0, G = 0;
#pragma unroll
  for (int i = 0; i < NWP; i++) W += red[i], G += gsum[i];
  W *= heads_kv;
  G *= heads_kv;
  /* Chunks: a sequence of span keys gets ceil(span / chunk) of them, at
   * most W / chunk + G items in all; chunk = W / (target - G) keeps that
   * within the target (a grid of whole waves: 8 sequences of 32k keys and
   * 8 KV heads on 264 slots take 256 items, not the 320 of W / target;
   * measured on an H200, 313 -> 258 us). Where the groups are more than a
   * quarter of the target, W / target: a skewed batch's long sequence then
   * keeps its many chunks (64 sequences around 1k keys and one of 32k:
   * 129 us, 189 with W / (target / 4)). */
  long long chunk = 0x7fffffff;
  /* Batch-invariant mode (the host passes target = -chunk): a fixed chunk
   * of keys, a multiple of BN, so that a sequence's split count and so its
   * merge order come from its own keys alone, whatever the batch. */
  if (SCREE_SPLIT && target < 0) {
    chunk = -target;
  } else if (SCREE_SPLIT && target > 0) {
    const long long aim = 4 * G <= target ? target - G : target;
    chunk = cdivll(cdivll(W, aim), BN) * BN;
    if (chunk < BN) chunk = BN;
  }
  /* span, chunk and the chunk counts fit 32 bits (spans are key counts):
   * unsigned divisions, not 64-bit ones. */
  const unsigned uchunk = (unsigned)min(chunk, 0x7fffffffll);
  int *start = p_start(plan), *nsplit = p_nsplit(plan, batch), *chk = p_chunk(plan, batch),
      *gstart = p_gstart(plan, batch);
  /* 2. Per sequence: chunks, then exclusive scans of items and groups, NT
   * sequences at a time. */
  for (int base = 0; base < batch; base += NT) {
    const int b = base + tid;
    long long items = 0, groups = 0;
    if (b < batch) {
      const int Lq = base == 0 ? lq0 : cu_q[b + 1] - cu_q[b];
      const int Lk = base == 0 ? lk0 : seqlens_k[b];
      int k0, k1;
      seq_span(Lq, Lk, causal, wl, wr, k0, k1);
      const unsigned span = (unsigned)(k1 - k0);
      unsigned ns = span > 0 ? (span + uchunk - 1) / uchunk : 1;
      if (ns > MAXSPLIT) ns = MAXSPLIT;
      const unsigned ch = span > 0 ? ((span + ns - 1) / ns + BN - 1) / BN * BN : BN;
      ns = span > 0 ? (span + ch - 1) / ch : 1;
      const long long rt = row_tiles(Lq, group);
      groups = rt * heads_kv;
      items = groups * ns;
      nsplit[b] = (int)ns;
      chk[b] = (int)ch;
    }
    /* inclusive scans of items and groups over the NT threads */
    long long si = items, sg = groups;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const long long ti = __shfl_up_sync(0xffffffffu, si, o);
      const long long tg = __shfl_up_sync(0xffffffffu, sg, o);
      if (lane >= o) si += ti, sg += tg;
    }
    if (lane == 31) wi[warp] = si, wg[warp] = sg;
    __syncthreads();
    long long pi = carry[0], pg = carry[1], ti = 0, tg = 0;
#pragma unroll
    for (int i = 0; i < NWP; i++) {
      if (i < warp) pi += wi[i], pg += wg[i];
      ti += wi[i], tg += wg[i];
    }
    pi += si - items;
    pg += sg - groups;
    if (b < batch) {
      start[b] = (int)min(pi, 0x7fffffffll);
      gstart[b] = (int)min(pg, 0x7fffffffll);
    }
    if (base + NT >= batch) {
      /* the last block: the totals are carry + this block's sums, which
       * every thread has; no further round of the shared arrays */
      if (tid == 0) {
        const long long ni = carry[0] + ti, ng = carry[1] + tg;
        start[batch] = (int)min(ni, 0x7fffffffll);
        gstart[batch] = (int)min(ng, 0x7fffffffll);
        plan[0] = start[batch];
        plan[1] = gstart[batch];
      }
      break;
    }
    __syncthreads(); /* every thread has read wi, wg and carry */
    if (tid == 0) carry[0] += ti, carry[1] += tg;
    __syncthreads();
  }
  if (batch <= 0 && tid == 0) {
    start[0] = gstart[0] = 0;
    plan[0] = plan[1] = 0;
  }
  __syncthreads();
  /* 3. The merge counters, zeroed. */
  if (counters) {
    const int ng = gstart[batch];
    for (int i = tid; i < ng; i += NT) counters[i] = 0;
  }
}

} /* namespace scree_paged */

using namespace scree_paged;

/* The plan kernel: one CTA of 1024 threads. */
extern "C" __global__ void __launch_bounds__(1024)
scree_paged_plan(const int *cu_q, const int *seqlens_k, int batch, int group, int heads_kv,
                 long long target, int causal, int wl, int wr, int *plan) {
  make_plan<1024>(cu_q, seqlens_k, batch, group, heads_kv, target, causal, wl, wr, plan,
                  p_count(plan, batch));
}

/* This thread's rows of a K or V tile: KIT consecutive rows from RB (its
 * column chunk c0 of each), so with pages of at least KIT keys they lie in
 * one page: one page id a tile, one 64-bit address and a row stride. */
__device__ __forceinline__ int tile_rb() { return (int)threadIdx.x / CPRP * KIT; }

/* The page of this thread's first row of tile kt (0 past kend): what
 * load_kv needs with pages of KIT keys or more, read a tile ahead. */
__device__ __forceinline__ int load_page(const int *bt, int kt, int kend, int logp) {
  const int key = kt + tile_rb();
  return key < kend ? __ldg(bt + (key >> logp)) : 0;
}

/* Copies this thread's rows of the K and V tiles at key kt, zero-filled at
 * and past kend. Pages of KIT keys or more: all in page pg (load_page);
 * smaller pages: each row's page read here. */
__device__ __forceinline__ void load_kv(unsigned kdst, unsigned vdst, const elem *kc,
                                        const elem *vc, int pg, const int *bt, int kt, int kend,
                                        int logp, long long ps, long long ts) {
  const int c0 = (int)threadIdx.x % CPRP, rb = tile_rb();
  if (CPRP != CPR && c0 >= CPR) return;
  const int pmask = (1 << logp) - 1;
  if ((1 << logp) >= KIT) {
    const long long off = (long long)pg * ps + (long long)((kt + rb) & pmask) * ts + c0 * 8;
    const elem *ks = kc + off, *vs = vc + off;
#pragma unroll
    for (int i = 0; i < KIT; i++) {
      const int r = rb + i;
      if (BN % RS == 0 || r < BN) {
        const int n = kt + r < kend ? 16 : 0;
        const unsigned so = r * ROWB + ((c0 ^ swz(r)) << 4);
        scree_cp_async16(kdst + so, ks + i * ts, n);
        scree_cp_async16(vdst + so, vs + i * ts, n);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < KIT; i++) {
      const int r = rb + i, key = kt + r;
      if (BN % RS == 0 || r < BN) {
        const int p = key < kend ? __ldg(bt + (key >> logp)) : 0;
        const long long off = (long long)p * ps + (long long)(key & pmask) * ts + c0 * 8;
        const int n = key < kend ? 16 : 0;
        const unsigned so = r * ROWB + ((c0 ^ swz(r)) << 4);
        scree_cp_async16(kdst + so, kc + off, n);
        scree_cp_async16(vdst + so, vc + off, n);
      }
    }
  }
}

/* 8 outputs acc * inv, rounded to the dtype, as one 16-byte store. */
__device__ __forceinline__ void store8(elem *dst, const float (&acc)[8], float inv) {
  typedef scree_vec<unsigned, 4> u4;
  u4 v;
#pragma unroll
  for (int e = 0; e < 4; e++) v.v[e] = scree_pack2<SCREE_DTYPE>(acc[2 * e] * inv, acc[2 * e + 1] * inv);
  *reinterpret_cast<u4 *>(dst) = v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
scree_paged_attention(const elem *q, const elem *k_cache, const elem *v_cache, elem *out,
                      float *lse, const int *block_table, const int *seqlens_k, const int *cu_q,
                      long long q_ts, long long q_hs, long long o_ts, long long o_hs,
                      long long c_ps, long long c_ts, long long c_hs, long long bt_stride,
                      long long total_q, int batch, int heads_kv, int group, int logp,
                      float sl2, float cap_in, float cap_out, int causal, int wl, int wr,
                      int *plan, float *part, float *plse, long long target, int self_plan,
                      int *zeroed) {
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned sbase = scree_smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int w = blockIdx.x;
  /* The plan: from the plan kernel, or (self_plan: batch <= THREADS) made
   * here by every CTA alike, its merge counters then in zeroed, which every
   * launch leaves zero (the merging CTA resets its group's). */
  int *counters;
  if (self_plan) {
    plan = reinterpret_cast<int *>(smem + PLAN_OFF);
    make_plan<THREADS>(cu_q, seqlens_k, batch, group, heads_kv, target, causal, wl, wr, plan,
                       nullptr);
    counters = zeroed;
  } else {
    counters = p_count(plan, batch);
  }
  if (w >= plan[0]) return;
  const int *start = p_start(plan);
  /* The item's sequence: the last b with start[b] <= w. */
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (start[mid] <= w) lo = mid;
    else hi = mid - 1;
  }
  const int b = lo;
  const int nsplit = p_nsplit(plan, batch)[b], chunk = p_chunk(plan, batch)[b];
  const int local = w - start[b];
  const int split = local % nsplit, rest = local / nsplit;
  const int kvh = rest % heads_kv, m = rest / heads_kv;
  const int q0 = cu_q[b], Lq = cu_q[b + 1] - q0, Lk = seqlens_k[b];
  const int f0 = m * BM;
  const int nrows = (int)min((long long)BM, (long long)Lq * group - f0);
  int s0, s1;
  seq_span(Lq, Lk, causal, wl, wr, s0, s1);
  const int kbeg = s0 + split * chunk;
  const int kend = min(s1, kbeg + chunk);
  const int ntl = kend > kbeg ? (kend - kbeg + BN - 1) / BN : 0;

  const int rwarp = warp % RW, kwarp = warp / RW;
  /* This lane's rows: rwarp * WROWS + a * 16 + g + 8 * hh; their visible
   * keys, and the item's tightest bounds (CTA-uniform) for the mask test. */
  int rlo[MT][2], rhi[MT][2];
#pragma unroll
  for (int a = 0; a < MT; a++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int r = rwarp * WROWS + a * 16 + g + 8 * hh;
      if (r < nrows) {
        const krange kr = row_range((f0 + r) / group, Lq, Lk, causal, wl, wr);
        rlo[a][hh] = kr.lo;
        rhi[a][hh] = kr.hi;
      } else {
        rlo[a][hh] = 0;
        rhi[a][hh] = -1;
      }
    }
  const krange first = row_range(f0 / group, Lq, Lk, causal, wl, wr);
  const krange last = row_range((f0 + nrows - 1) / group, Lq, Lk, causal, wl, wr);
  /* Keys every row sees: [lo_all, hi_all]. */
  const int lo_all = last.lo, hi_all = min(first.hi, kend - 1);

  /* Q rows into shared memory: row r is token (f0 + r) / group, head
   * kvh * group + (f0 + r) % group. */
  {
    const int r0 = tid / CPRP, c0 = tid % CPRP;
    if (CPRP == CPR || c0 < CPR) {
#pragma unroll
      for (int i = 0; i < QIT; i++) {
        const int r = r0 + i * RS;
        if (BM % RS == 0 || r < BM) {
          const int f = f0 + (r < nrows ? r : 0);
          const int tq = f / group, hq = kvh * group + f % group;
          const elem *src = q + (long long)(q0 + tq) * q_ts + (long long)hq * q_hs + c0 * 8;
          scree_cp_async16(sbase + r * ROWB + ((c0 ^ swz(r)) << 4), src, r < nrows ? 16 : 0);
        }
      }
    }
  }
  const int *bt = block_table + (long long)b * bt_stride;
  const elem *kc = k_cache + (long long)kvh * c_hs;
  const elem *vc = v_cache + (long long)kvh * c_hs;
  /* The page ids of the first STAGES tiles, all read before any copy is
   * issued (a copy's commit orders memory: one after another they were a
   * block-table round trip each before the first tile's data). */
  int pg0[STAGES];
#pragma unroll
  for (int s = 0; s < STAGES; s++) pg0[s] = s < ntl ? load_page(bt, kbeg + s * BN, kend, logp) : 0;
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < ntl) {
      const int kt = kbeg + s * BN;
      load_kv(sbase + K_OFF + s * KV_BYTES, sbase + V_OFF + s * KV_BYTES, kc, vc, pg0[s], bt,
              kt, kend, logp, c_ps, c_ts);
    }
    scree_cp_async_commit();
  }
  int pnext = pg0[STAGES - 1];

  float o[MT][DN][4];
  float mx[MT][2], ls[MT][2];
#pragma unroll
  for (int a = 0; a < MT; a++) {
#pragma unroll
    for (int d = 0; d < DN; d++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[a][d][e] = 0.f;
    mx[a][0] = mx[a][1] = neg_inf();
    ls[a][0] = ls[a][1] = 0.f;
  }

  const int sw = swz(lane & 7);
  const unsigned qv_row = (unsigned)((lane & 15) * ROWB);
  const int qv_c = (lane >> 4) ^ sw;
  const unsigned k_row = (unsigned)(((lane & 7) + ((lane >> 4) << 3)) * ROWB);
  const int k_c = ((lane >> 3) & 1) ^ sw;
  const unsigned q_base = sbase + (unsigned)(rwarp * WROWS * ROWB) + qv_row;
  const unsigned kw_off = (unsigned)(kwarp * KN * ROWB);

  int buf = 0;
  for (int it = 0; it < ntl; it++) {
    const int kt = kbeg + it * BN;
    scree_cp_async_wait<STAGES - 2>(); /* tile it landed */
    __syncthreads();                   /* visible; every warp done with tile it - 1 */
    {
      const int nt = it + STAGES - 1;
      int nbuf = buf + STAGES - 1;
      if (nbuf >= STAGES) nbuf -= STAGES;
      if (nt < ntl) {
        const int ktn = kbeg + nt * BN;
        load_kv(sbase + K_OFF + nbuf * KV_BYTES, sbase + V_OFF + nbuf * KV_BYTES, kc, vc, pnext,
                bt, ktn, kend, logp, c_ps, c_ts);
        if (nt + 1 < ntl) pnext = load_page(bt, ktn + BN, kend, logp);
      }
      scree_cp_async_commit();
    }

    /* S = Q K^T over this warp's KN keys of the tile */
    const unsigned kbuf = sbase + K_OFF + buf * KV_BYTES + kw_off + k_row;
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
      for (int a = 0; a < MT; a++)
        scree_ldsm_x4(q_base + a * 16 * ROWB + chunk_off(2 * ks, qv_c), qa[a][0], qa[a][1],
                      qa[a][2], qa[a][3]);
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
    if (cap_in != 0.f) {
#pragma unroll
      for (int a = 0; a < MT; a++)
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) s[a][j][e] = cap_out * scree_tanh(s[a][j][e] * cap_in);
    }
    /* Mask tiles that some row's range or the chunk's end cuts. */
    if (kt < lo_all || kt + BN - 1 > hi_all) {
      const int kl = kt + kwarp * KN + 2 * t; /* this lane's first key */
#pragma unroll
      for (int a = 0; a < MT; a++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int l = rlo[a][hh], h = min(rhi[a][hh], kend - 1);
#pragma unroll
          for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int key = kl + j * 8 + e;
              if (key < l || key > h) s[a][j][2 * hh + e] = neg_inf();
            }
        }
    }
    /* online softmax, base 2 */
#pragma unroll
    for (int a = 0; a < MT; a++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        float mnew = mx[a][hh];
#pragma unroll
        for (int j = 0; j < NB; j++) mnew = fmaxf(mnew, fmaxf(s[a][j][2 * hh], s[a][j][2 * hh + 1]));
        mnew = fmaxf(mnew, __shfl_xor_sync(0xffffffffu, mnew, 1));
        mnew = fmaxf(mnew, __shfl_xor_sync(0xffffffffu, mnew, 2));
        const float ms = (mnew == neg_inf()) ? 0.f : mnew * sl2;
        const float alpha = scree_ex2(mx[a][hh] * sl2 - ms);
        mx[a][hh] = mnew;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < NB; j++) {
          const float p0 = scree_ex2(fmaf(s[a][j][2 * hh], sl2, -ms));
          const float p1 = scree_ex2(fmaf(s[a][j][2 * hh + 1], sl2, -ms));
          sum += p0 + p1;
          s[a][j][2 * hh] = p0;
          s[a][j][2 * hh + 1] = p1;
        }
        ls[a][hh] = ls[a][hh] * alpha + sum;
#pragma unroll
        for (int d = 0; d < DN; d++) {
          o[a][d][2 * hh] *= alpha;
          o[a][d][2 * hh + 1] *= alpha;
        }
      }
    /* O += P V */
    const unsigned vbuf = sbase + V_OFF + buf * KV_BYTES + kw_off + qv_row;
#pragma unroll
    for (int pk = 0; pk < PK; pk++) {
      unsigned pf[MT][4];
#pragma unroll
      for (int a = 0; a < MT; a++) {
        pf[a][0] = scree_pack2<SCREE_DTYPE>(s[a][2 * pk][0], s[a][2 * pk][1]);
        pf[a][1] = scree_pack2<SCREE_DTYPE>(s[a][2 * pk][2], s[a][2 * pk][3]);
        pf[a][2] = scree_pack2<SCREE_DTYPE>(s[a][2 * pk + 1][0], s[a][2 * pk + 1][1]);
        pf[a][3] = scree_pack2<SCREE_DTYPE>(s[a][2 * pk + 1][2], s[a][2 * pk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < DN / 2; dp++) {
        unsigned b0, b1, b2, b3;
        scree_ldsm_x4_trans(vbuf + pk * 16 * ROWB + chunk_off(2 * dp, qv_c), b0, b1, b2, b3);
#pragma unroll
        for (int a = 0; a < MT; a++) {
          scree_mma_16816<SCREE_DTYPE>(o[a][2 * dp], pf[a], b0, b1);
          scree_mma_16816<SCREE_DTYPE>(o[a][2 * dp + 1], pf[a], b2, b3);
        }
      }
    }
    buf = (buf + 1 == STAGES) ? 0 : buf + 1;
  }
  scree_cp_async_wait<0>();
  __syncthreads(); /* every warp done with the stages: the scratch goes over them */

  /* Each warp's m (scaled to base 2), l and O into the scratch: warp w's
   * rows at w * WROWS; entry [row][0] = m, [1] = l, [2 ..] = O. */
  float *scr = reinterpret_cast<float *>(smem + Q_BYTES);
#pragma unroll
  for (int a = 0; a < MT; a++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      float l = ls[a][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int r = warp * WROWS + a * 16 + g + 8 * hh;
      float *row = scr + r * (D + 2);
      if (t == 0) {
        row[0] = mx[a][hh] == neg_inf() ? neg_inf() : mx[a][hh] * sl2;
        row[1] = l;
      }
#pragma unroll
      for (int d = 0; d < DN; d++) {
        row[2 + d * 8 + 2 * t] = o[a][d][2 * hh];
        row[2 + d * 8 + 2 * t + 1] = o[a][d][2 * hh + 1];
      }
    }
  __syncthreads();

  /* Merge the KW key warps of each row: the row of the item r is held by
   * warps rwarp(r) + RW * kw. Threads take (row, 8 columns) pairs. */
  const bool direct = nsplit == 1;
  for (int idx = tid; idx < BM * CPR; idx += THREADS) {
    const int r = idx / CPR, c = idx % CPR;
    if (r >= nrows) continue;
    const int rw = r / WROWS, rr = r % WROWS;
    float mm = neg_inf();
#pragma unroll
    for (int kw = 0; kw < KW; kw++) mm = fmaxf(mm, scr[((rw + RW * kw) * WROWS + rr) * (D + 2)]);
    float l = 0.f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.f;
#pragma unroll
    for (int kw = 0; kw < KW; kw++) {
      const float *row = scr + ((rw + RW * kw) * WROWS + rr) * (D + 2);
      const float sc = mm == neg_inf() ? 0.f : scree_ex2(row[0] - mm);
      l += row[1] * sc;
#pragma unroll
      for (int e = 0; e < 8; e++) acc[e] += row[2 + c * 8 + e] * sc;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const float lrow = l > 0.f ? (mm + scree_lg2(l)) * 0.69314718055994531f : neg_inf();
    if (direct) {
      const int f = f0 + r, tq = f / group, hq = kvh * group + f % group;
      store8(out + (long long)(q0 + tq) * o_ts + (long long)hq * o_hs + c * 8, acc, inv);
      if (lse != nullptr && c == 0) lse[(long long)hq * total_q + q0 + tq] = lrow;
    } else {
      /* The split's partial: O normalised by its own l, fp32, and its lse. */
      float4 *po = reinterpret_cast<float4 *>(part + ((long long)w * BM + r) * D + c * 8);
      __stcg(po, make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv));
      __stcg(po + 1, make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv));
      if (c == 0) plse[(long long)w * BM + r] = lrow;
    }
  }
  if (direct) return;

  /* Split: the last item of the group to finish merges every split's
   * partial in split order (deterministic whichever finishes last). */
  __shared__ int is_last;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    int *count = counters + p_gstart(plan, batch)[b] + rest;
    is_last = atomicAdd(count, 1) == nsplit - 1;
    if (is_last) *count = 0; /* every split has counted: zero for the next launch */
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const long long g0 = (long long)(w - split) * BM; /* the group's first partial row */
  /* The merge: pairs (row, 8 columns), T threads a pair (T adjacent lanes,
   * the most that fit the CTA), thread j of a pair taking splits j, j + T,
   * ...: each reads its splits' lse and partials MU at a time, all loads
   * first, and keeps a running maximum (online, as the kernel's softmax);
   * then the pair's T threads combine in a fixed butterfly. Every split is
   * read once, MU x T of them in flight a pair, and the order of every sum
   * is fixed by nsplit, nrows and the config: the same result whichever CTA
   * merges. (Reading a split's lse first and its partial after, a split at
   * a time, cost b1-k4k-q1 about 9 us of a 21 us call on an H200.) */
  constexpr int MU = 8;
  const int pairs = nrows * CPR;
  int T = 1;
  while (T < 32 && pairs * T * 2 <= THREADS) T <<= 1;
  for (int base = 0; base < pairs * T; base += THREADS) {
    const int idx = base + tid, pr = idx / T, j = idx % T;
    const bool act = pr < pairs;
    const int r = act ? pr / CPR : 0, c = act ? pr % CPR : 0;
    float m = neg_inf(), l = 0.f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.f;
#pragma unroll 1
    for (int sp0 = act ? j : nsplit; sp0 < nsplit; sp0 += MU * T) {
      float x[MU];
      float4 a0[MU], a1[MU];
#pragma unroll
      for (int u = 0; u < MU; u++) {
        const int sp = sp0 + u * T;
        if (sp < nsplit) {
          const long long row = g0 + (long long)sp * BM + r;
          x[u] = __ldcg(plse + row);
          const float4 *pp = reinterpret_cast<const float4 *>(part + row * D + c * 8);
          a0[u] = __ldcg(pp);
          a1[u] = __ldcg(pp + 1);
        } else {
          x[u] = neg_inf();
          a0[u] = a1[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
      float mn = m;
#pragma unroll
      for (int u = 0; u < MU; u++) mn = fmaxf(mn, x[u]);
      if (mn == neg_inf()) continue; /* nothing seen yet: keep zeros */
      const float sc = scree_ex2((m - mn) * 1.4426950408889634f);
      l *= sc;
#pragma unroll
      for (int e = 0; e < 8; e++) acc[e] *= sc;
#pragma unroll
      for (int u = 0; u < MU; u++) {
        const float ew = scree_ex2((x[u] - mn) * 1.4426950408889634f);
        l += ew;
        acc[0] += ew * a0[u].x, acc[1] += ew * a0[u].y, acc[2] += ew * a0[u].z, acc[3] += ew * a0[u].w;
        acc[4] += ew * a1[u].x, acc[5] += ew * a1[u].y, acc[6] += ew * a1[u].z, acc[7] += ew * a1[u].w;
      }
      m = mn;
    }
    /* The pair's T threads, combined (every lane of the warp takes part). */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      if (o >= T) break;
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
      const float mm = fmaxf(m, m2);
      const float sa = m == neg_inf() ? 0.f : scree_ex2((m - mm) * 1.4426950408889634f);
      const float sb = m2 == neg_inf() ? 0.f : scree_ex2((m2 - mm) * 1.4426950408889634f);
      l = l * sa + l2 * sb;
#pragma unroll
      for (int e = 0; e < 8; e++) acc[e] = acc[e] * sa + __shfl_xor_sync(0xffffffffu, acc[e], o) * sb;
      m = mm;
    }
    if (act && j == 0) {
      const int f = f0 + r, tq = f / group, hq = kvh * group + f % group;
      store8(out + (long long)(q0 + tq) * o_ts + (long long)hq * o_hs + c * 8, acc,
             l > 0.f ? 1.f / l : 0.f);
      if (lse != nullptr && c == 0)
        lse[(long long)hq * total_q + q0 + tq] =
            l > 0.f ? m + scree_lg2(l) * 0.69314718055994531f : neg_inf();
    }
  }
}
