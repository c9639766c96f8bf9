/*
 * ragged_softmax_cluster.cu - softmax along the tokens of each sequence of
 * a packed batch, per column (the function of ragged_softmax.cu), for
 * sm_90: wide column strips whose tokens a thread block cluster shares,
 * and a persistent grid whose CTAs load the next items while they reduce
 * and write the current one.
 *
 * Why (docs/kernels/rowwise.md, "The ragged softmax"). The shared-memory
 * kernel (ragged_softmax_smem.cu) gives a CTA a whole sequence's strip, so
 * that it reads x once: on an H100 its fastest strips were 32 bytes wide
 * (wider ones did not fit a long sequence), which costs an L2 request per
 * 32-byte sector, and each CTA loads, then reduces, then writes, with the
 * CTAs that start together staying in step, so that the exponentials do
 * not overlap the memory traffic. Here:
 *
 *   - An item is one sequence's strip of SPAN = TPR * VEC columns (128
 *     bytes for TPR = 8 and 16-byte accesses), split over `split` CTAs of
 *     a cluster of CSIZE, each staging at most STOK of its tokens: split is
 *     the smallest power of two with split * STOK >= the sequence's length
 *     (at most CSIZE), so a short sequence keeps its strip in one CTA and
 *     the cluster's CSIZE / split groups of CTAs take as many strips. The
 *     CTAs of a strip merge their per-column max and sum through
 *     distributed shared memory. All CTAs of a cluster work on the same
 *     item (its `split` is the cluster's), so they take the same barriers.
 *   - The grid is persistent (about the CTAs the GPU holds at once) and
 *     takes items from a counter, so that no CTA idles while another has
 *     several items left. Each CTA has STAGES
 *     stage buffers: while it reduces and writes item j, the copies of
 *     items j + 1 .. j + STAGES - 1 are in flight. A thread copies and
 *     later reads only its own slots of a stage, so the ring needs no
 *     barrier of its own. With one stage (STAGES = 1), a thread issues
 *     the next item's copies into its slots as it writes their outputs,
 *     four tokens at a time: they load while the CTA finishes the item
 *     and while the other CTAs of the SM (which the smaller stage lets in)
 *     compute.
 *   - SCREE_E1 = 1 takes one exponential per element instead of two: the
 *     sum pass writes e = 2^(z - max) back over x in the stage (in x's
 *     dtype), and the outputs are e / sum. The extra rounding of e keeps
 *     the error within one unit in the last place of y (against half of
 *     one with E1 = 0); the host allows it only where x's dtype is at least
 *     as precise as y's.
 *
 * Items. The plan counts each sequence's items, ceil(strips / (CSIZE /
 * split)), and takes their exclusive prefix sums: prefix[s] the items
 * before sequence s, prefix[batch] all items. Item i belongs to the
 * sequence s with prefix[s] <= i < prefix[s + 1] (a binary search); within
 * it, group g = i - prefix[s] covers strips g * (CSIZE / split) + rank /
 * split, CTA rank taking part rank % split of the strip's tokens: tokens
 * [part * tp, part * tp + tp) of the sequence, tp = ceil(length / split).
 * For a batch of fewer than SCREE_PLAN sequences every CTA computes the
 * plan into its shared memory as it starts, with a copy of cu_seqlens
 * (the searches then stay on chip, and no launch precedes this one); for
 * larger ones the plan kernel (second entry) writes it to global memory
 * first, and the host passes it as `plan`.
 *
 * The counter. counters[0] numbers the items as clusters take them,
 * counters[1] the CTAs that have finished; both are zero when the launch
 * starts (the host's per-stream counters, scree__stream_counters), and the
 * last CTA to finish sets them back to zero.
 *
 * The item ring. Thread 0 of the cluster's first CTA (the fetcher) takes
 * item numbers from counters[0] (atomicAdd) and stores them into every
 * CTA's ring of STAGES + 1 slots: slot p % (STAGES + 1) holds the number
 * of the cluster's p-th item (past the last, a number >= the item count),
 * and each slot has an mbarrier whose phases count its writes, so that a
 * reader of position p waits for phase p / (STAGES + 1) of it (st.async
 * with a relaxed remote arrival: no fence). The fetcher writes position
 * j + STAGES during iteration j, with a number it took late in iteration
 * j - 1 (after the sum's exchange: the atomic's round trip hidden by the
 * outputs and the next max pass); without clusters, with one it took at
 * the start of iteration j (hidden by the max and sum passes). Taken as
 * late as that, the items in flight at once lie close together in the
 * batch, which measured faster than taking them earlier. Numbers grow
 * with the position, so once one is past the end every later one is too:
 * the cluster's CTAs leave the loop together, at the same j.
 *
 * Per item (iteration j, stage j % STAGES):
 *   (1) issue the copies of position j + STAGES - 1 into its stage, then
 *       wait for this thread's copies of position j (cp.async groups: one
 *       per position, empty past the end);
 *   (2) the max of the staged tokens per column (two 16-bit elements a
 *       step), with the tokens past the stage streamed into an online
 *       (max, sum) state (only where a CTA's part exceeds STOK: a call's
 *       sequences longer than CSIZE * STOK);
 *   (3) across the token groups (shuffles), the warps (red, S1) and, for
 *       split > 1, the strip's CTAs: each sends its lanes' values to every
 *       CTA of the strip (st.async into xbuf) and waits for all of them on
 *       its own mbarrier;
 *   (4) each thread's sum of 2^(z - max) (E1: e written back), across the
 *       groups, warps (S2) and CTAs, the same way;
 *   (5) the outputs, from the stage and the streamed tokens (with one
 *       stage, position j + 1's copies issued in between, step (1)'s).
 * The cluster barrier, split in two, keeps the CTAs within one item of
 * each other: each arrives (relaxed) once it has read item j's exchanged
 * values and waits for the others before it writes into another CTA for
 * item j + 1, so that a buffer or ring slot is written again only after
 * every reader is done with it, while the barrier's latency overlaps
 * step (5). red has a buffer for the max and one for the sum: each is
 * written again only after a barrier (S2, S1 of the next item) that every
 * reader of its last values arrived at after reading them. Every st.async
 * into a CTA is waited for by it before it leaves; a CTA's last wait on
 * the cluster barrier keeps the others from leaving while it may still
 * send to them.
 *
 * Thread mapping, as ragged_softmax_smem.cu: lane l = threadIdx.x % TPR owns
 * columns strip * SPAN + l * VEC + [0, VEC); group g = threadIdx.x / TPR
 * owns the part's tokens g + GROUPS * k; its k-th staged token is slot
 * (g + GROUPS * k) * TPR + l of the stage (a warp's accesses cover
 * consecutive tokens' strips, contiguous in shared memory).
 *
 * Dynamic shared memory (the host's cluster_smem mirrors it), 16-byte
 * aligned: the stages (STAGES * STOK * TPR slots of VBYTES), red (2 x
 * WARPS x TPR x VEC floats), xbuf (2 x CSIZE x TPR x VEC floats: per kind,
 * a slot per part of the strip), the mbarriers (STAGES + 1 for the ring,
 * 2 for the exchanges; 8 bytes each), the ring (STAGES + 1 ints), each
 * stage's item (STAGES scree_rsc_item: 6 ints), and the plan and the copy
 * of cu_seqlens (SCREE_PLAN + 1 ints each).
 * With CSIZE = 1 the ring is plain shared memory published by S1, and
 * neither xbuf nor the mbarriers are used.
 *
 * Macros: SCREE_TPR (4, 8), SCREE_VEC (1, 2, 4, 8), SCREE_WARPS (4, 8, 16),
 * SCREE_STOK (64 .. 2048, a power of two, at least the token groups),
 * SCREE_STAGES (1 .. 4), SCREE_CSIZE (1, 2, 4, 8: 1 launches no cluster),
 * SCREE_E1 (0, 1), SCREE_X_DTYPE, SCREE_Y_DTYPE.
 *
 * Special values, in-place use (y == x: every element is read, into the
 * stage or a register, before the thread that read it writes it, and
 * items cover disjoint elements) and 64-bit offsets are as in
 * ragged_softmax.cu. The host guarantees gridDim.x a multiple of CSIZE,
 * clusters of CSIZE along x, counters zero, and for batch >= SCREE_PLAN the
 * plan written by the plan kernel earlier on the stream (else plan NULL).
 *
 * tests/emu compiles this file as C++ on the CPU, against its own
 * common.cuh, ptx.cuh and cluster_ptx.cuh and with SCREE_SMEM_BASE defined:
 * the kernel takes every instruction beyond plain C++ from those headers.
 *
 * Test alone: ctest -R ragged_softmax    Bench: build/bench/bench_ops --op ragged_softmax
 */

/* Strips narrower than a 128-byte line have the L2 fetch whole lines: the
 * neighbouring strip of the same tokens (the cluster's other CTAs, or an
 * item a few numbers away, in flight at about the same time) then finds
 * its half of each line in L2. On an H100 that made 64-byte strips 3-5%
 * faster and 32-byte strips 8-9%, and 64-byte strips the fastest there
 * are; 128-byte strips, with no line to share, were unchanged or up to 1%
 * slower with the hint, and go without it
 * (bench/results/h100-ragged-cluster-limits.txt, part 16). */
#define SCREE_RS_LINE (SCREE_TPR * SCREE_VBYTES < 128)
#include "ptx.cuh"
#include "cluster_ptx.cuh"
#include "ragged_softmax.cuh"

#define SCREE_THREADS (32 * SCREE_WARPS)
#define SCREE_GROUPS (SCREE_THREADS / SCREE_TPR)
#define SCREE_SLOTS (SCREE_STAGES + 1)
/* Staged tokens of one thread, at most; slots between its consecutive ones. */
#define SCREE_KS (SCREE_STOK / SCREE_GROUPS)
#define SCREE_KSTRIDE SCREE_THREADS
#define SCREE_STAGE_SLOTS (SCREE_STOK * SCREE_TPR)
#define SCREE_STAGE_BYTES (SCREE_STAGES * SCREE_STAGE_SLOTS * SCREE_VBYTES)
#define SCREE_RED_FLOATS (SCREE_WARPS * SCREE_TPR * SCREE_VEC)
#define SCREE_PART_FLOATS (SCREE_TPR * SCREE_VEC)
#define SCREE_XBUF_FLOATS (SCREE_CSIZE * SCREE_PART_FLOATS)
/* Batches of fewer sequences have their plan in shared memory (the host's
 * RSC_PLAN). */
#define SCREE_PLAN 512

static_assert(SCREE_TPR == 4 || SCREE_TPR == 8, "TPR must be 4 or 8");
static_assert(SCREE_VEC == 1 || SCREE_VEC == 2 || SCREE_VEC == 4 || SCREE_VEC == 8,
              "VEC must be 1, 2, 4 or 8");
static_assert(SCREE_WARPS == 4 || SCREE_WARPS == 8 || SCREE_WARPS == 16,
              "WARPS must be 4, 8 or 16");
static_assert((SCREE_STOK & (SCREE_STOK - 1)) == 0 && SCREE_STOK >= 64 && SCREE_STOK <= 2048 &&
                  SCREE_STOK >= SCREE_GROUPS,
              "STOK must be a power of two in [64, 2048], at least the token groups");
static_assert(SCREE_STAGES >= 1 && SCREE_STAGES <= 4, "STAGES must be 1, 2, 3 or 4");
static_assert(SCREE_CSIZE == 1 || SCREE_CSIZE == 2 || SCREE_CSIZE == 4 || SCREE_CSIZE == 8,
              "CSIZE must be 1, 2, 4 or 8");
static_assert(SCREE_E1 == 0 || SCREE_E1 == 1, "E1 must be 0 or 1");
/* Significand bits of a dtype code: E1 rounds e to x's dtype before y's. */
#define SCREE_SIGNIFICAND(code) ((code) == 0 ? 24 : (code) == 1 ? 11 : 8)
static_assert(!SCREE_E1 || SCREE_SIGNIFICAND(SCREE_X_DTYPE) >= SCREE_SIGNIFICAND(SCREE_Y_DTYPE),
              "E1 keeps the exponentials in x's dtype, which must be as precise as y's");
#if SCREE_CSIZE > 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "CSIZE > 1 needs thread block clusters (sm_90)"
#endif

#ifndef SCREE_SMEM_BASE
extern __shared__ __align__(16) unsigned char scree_rsc_smem[];
#define SCREE_SMEM_BASE scree_rsc_smem
#endif

/* CTAs of the cluster a sequence of len tokens is split over: the fewest
 * (a power of two, at most CSIZE) that stage it whole. */
__device__ __forceinline__ int scree_rsc_split(int len) {
  int s = 1;
  while (s < SCREE_CSIZE && s * SCREE_STOK < len) s <<= 1;
  return s;
}

/* Items of a sequence: its strips, CSIZE / split to an item. */
__device__ __forceinline__ int scree_rsc_items(int len, int nstrips) {
  if (len <= 0) return 0;
  const int per = SCREE_CSIZE / scree_rsc_split(len);
  return (nstrips + per - 1) / per;
}

/* The plan into prefix[0 .. batch] (exclusive prefix sums of the items of
 * each sequence), by the NT threads of a CTA: NT sequences at a time, a
 * scan within each warp, then of the warps' totals (in scratch, NT / 32 + 1
 * ints of shared memory). Ends with a barrier: prefix is complete. */
template <int NT>
__device__ __forceinline__ void scree_rsc_scan(const int *cu_seqlens, int batch, int nstrips,
                                               int *prefix, int *scratch) {
  const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
  int *const wsum = scratch, *const carry = scratch + NT / 32;
  if (threadIdx.x == 0) {
    prefix[0] = 0;
    *carry = 0;
  }
  __syncthreads();
  for (int base = 0; base < batch; base += NT) {
    const int s = base + (int)threadIdx.x;
    int v = s < batch ? scree_rsc_items(cu_seqlens[s + 1] - cu_seqlens[s], nstrips) : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int t = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += t;
    }
    if (lane == 31) wsum[warp] = v;
    __syncthreads();
    if (warp == 0) {
      int t = lane < NT / 32 ? wsum[lane] : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, t, o);
        if (lane >= o) t += u;
      }
      if (lane < NT / 32) wsum[lane] = t;
    }
    __syncthreads();
    const int incl = *carry + v + (warp > 0 ? wsum[warp - 1] : 0);
    if (s < batch) prefix[s + 1] = incl;
    __syncthreads(); /* every thread has read carry and wsum */
    if ((int)threadIdx.x == NT - 1) *carry = incl;
    __syncthreads();
  }
}

/* The plan of a large batch into global memory: one CTA of 1024 threads. */
extern "C" __global__ void __launch_bounds__(1024)
scree_ragged_softmax_cluster_plan(const int *__restrict__ cu_seqlens, int batch, int nstrips,
                                  int *plan) {
  __shared__ int scratch[1024 / 32 + 1];
  scree_rsc_scan<1024>(cu_seqlens, batch, nstrips, plan, scratch);
}

/* Where item i of the plan lies, for this CTA. */
struct scree_rsc_item {
  int start; /* the sequence's first token */
  int split; /* CTAs of the strip */
  int part;  /* this CTA's part of the strip's tokens */
  int strip; /* the column strip */
  int t0, n; /* the part: tokens [t0, t0 + n) of the sequence (n 0: idle) */
};

__device__ __forceinline__ scree_rsc_item scree_rsc_find(int i, const int *prefix,
                                                         const int *cu_seqlens, int batch,
                                                         int nstrips, int rank) {
  /* The last sequence whose first item is at or before i (empty sequences
   * share their successor's prefix and are passed over). */
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (prefix[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  scree_rsc_item it;
  it.start = cu_seqlens[lo];
  const int len = cu_seqlens[lo + 1] - it.start;
  it.split = scree_rsc_split(len);
  it.part = rank % it.split;
  it.strip = (i - prefix[lo]) * (SCREE_CSIZE / it.split) + rank / it.split;
  const int tp = (len + it.split - 1) / it.split;
  it.t0 = it.part * tp;
  const int left = len - it.t0;
  it.n = it.strip < nstrips ? (left < 0 ? 0 : left < tp ? left : tp) : 0;
  return it;
}

#if SCREE_CSIZE > 1
/* Across the split CTAs of a strip (ranks first .. first + split - 1),
 * after the CTA's own reduction: the first TPR threads send their lanes'
 * values, as slot `part` of xbuf, to every CTA of the strip (itself
 * included), each store completing 4 bytes at that CTA's mbarrier bar;
 * thread 0 arms this CTA's bar for the split slots; every thread waits for
 * the phase and combines its lane's values of every slot. */
template <bool MAX>
__device__ __forceinline__ void scree_rsc_exchange(float (&v)[SCREE_VEC], float *xbuf,
                                                   unsigned long long *bar, unsigned phase,
                                                   int first, int part, int split) {
  const int tid = (int)threadIdx.x, lane = tid % SCREE_TPR;
  const unsigned b = scree_smem_u32(bar);
  if (tid == 0) scree_mbar_arrive_expect(b, (unsigned)(split * SCREE_PART_FLOATS * 4));
  if (tid < SCREE_TPR) {
    const unsigned slot = scree_smem_u32(xbuf + (part * SCREE_TPR + lane) * SCREE_VEC);
    for (int q = 0; q < split; q++) {
      const unsigned r = (unsigned)(first + q), to = scree_cluster_map(slot, r),
                     rb = scree_cluster_map(b, r);
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++)
        scree_st_async_u32(to + 4u * (unsigned)e, __float_as_uint(v[e]), rb);
    }
  }
  scree_mbar_wait(b, phase);
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) v[e] = MAX ? SCREE_NEG_INF : 0.f;
  for (int q = 0; q < split; q++)
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) {
      const float o = xbuf[(q * SCREE_TPR + lane) * SCREE_VEC + e];
      v[e] = MAX ? fmaxf(v[e], o) : v[e] + o;
    }
}
#endif

/* This thread's staged and streamed tokens of an item, and where they are. */
struct scree_rsc_work {
  int nk, ks;         /* tokens of this thread; of them staged (k < ks) */
  int nc;             /* this lane's columns inside the row (<= 0: none) */
  const xt *xg;       /* token k of x at xg + k * step */
  yt *yg;             /* and of y at yg + k * ystep */
};

__device__ __forceinline__ scree_rsc_work scree_rsc_work_of(const scree_rsc_item &it,
                                                            const xt *x, yt *y, int cols,
                                                            long long x_stride,
                                                            long long y_stride) {
  const int lane = (int)threadIdx.x % SCREE_TPR, group = (int)threadIdx.x / SCREE_TPR;
  const int c0 = it.strip * SCREE_SPAN + lane * SCREE_VEC;
  scree_rsc_work w;
  w.nc = cols - c0;
  const bool active = w.nc > 0 && it.n > group;
  w.nk = active ? (it.n - group - 1) / SCREE_GROUPS + 1 : 0;
  w.ks = w.nk < SCREE_KS ? w.nk : SCREE_KS;
  const long long row = (long long)it.start + it.t0 + group;
  w.xg = x + (active ? row * x_stride + c0 : 0);
  w.yg = y + (active ? row * y_stride + c0 : 0);
  return w;
}

/* The ring: position p's item number into every CTA's slot (the fetcher;
 * with clusters, st.async and a relaxed arrival at the slot's mbarrier),
 * and a read of it (waiting for the slot's phase of that position). */
__device__ __forceinline__ void scree_rsc_put(int *ring, unsigned long long *bars, int p, int v) {
  const int k = p % SCREE_SLOTS;
#if SCREE_CSIZE > 1
  const unsigned slot = scree_smem_u32(ring + k), b = scree_smem_u32(bars + k);
  for (int r = 0; r < SCREE_CSIZE; r++) {
    const unsigned rb = scree_cluster_map(b, (unsigned)r);
    scree_st_async_u32(scree_cluster_map(slot, (unsigned)r), (unsigned)v, rb);
    scree_mbar_arrive_expect_remote(rb, 4);
  }
#else
  (void)bars;
  ring[k] = v;
#endif
}
__device__ __forceinline__ int scree_rsc_get(const int *ring, unsigned long long *bars, int p) {
  const int k = p % SCREE_SLOTS;
#if SCREE_CSIZE > 1
  scree_mbar_wait(scree_smem_u32(bars + k), (unsigned)(p / SCREE_SLOTS) & 1u);
#else
  (void)bars;
#endif
  return ring[k];
}

extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_ragged_softmax_cluster(const xt *x, yt *y, const int *__restrict__ cu_seqlens, int cols,
                             long long x_stride, long long y_stride, float scale_log2,
                             int batch, int *counters, const int *__restrict__ plan) {
  unsigned char *const smem = SCREE_SMEM_BASE;
  rv *const stages = reinterpret_cast<rv *>(smem);
  typedef float red_t[SCREE_TPR][SCREE_VEC]; /* a warp's row of red */
  red_t *const red = reinterpret_cast<red_t *>(smem + SCREE_STAGE_BYTES); /* 2 x WARPS rows */
  float *const xbuf = &red[2 * SCREE_WARPS][0][0];                        /* [2][XBUF_FLOATS] */
  unsigned long long *const bars =
      reinterpret_cast<unsigned long long *>(xbuf + 2 * SCREE_XBUF_FLOATS); /* ring, then 2 */
  int *const ring = reinterpret_cast<int *>(bars + SCREE_SLOTS + 2);
  scree_rsc_item *const recs = reinterpret_cast<scree_rsc_item *>(ring + SCREE_SLOTS);
  int *const splan = reinterpret_cast<int *>(recs + SCREE_STAGES); /* [2][SCREE_PLAN + 1] */
  const int tid = (int)threadIdx.x, lane = tid % SCREE_TPR;
#if SCREE_CSIZE > 1
  const int rank = (int)scree_cluster_rank();
#else
  const int rank = 0;
#endif
  const int nstrips = (cols + SCREE_SPAN - 1) / SCREE_SPAN;
  /* The plan, and where the sequences start: in shared memory for a small
   * batch (red as the scan's scratch, free until the first item). */
  const int *prefix = plan, *starts = cu_seqlens;
  if (!plan) {
    int *const sp = splan, *const ss = splan + SCREE_PLAN + 1;
    for (int k = tid; k <= batch; k += SCREE_THREADS) ss[k] = cu_seqlens[k];
    scree_rsc_scan<SCREE_THREADS>(cu_seqlens, batch, nstrips, sp, reinterpret_cast<int *>(red));
    prefix = sp;
    starts = ss;
  }
  const int nitems = prefix[batch];
  const long long step = (long long)SCREE_GROUPS * x_stride,
                  ystep = (long long)SCREE_GROUPS * y_stride;
  const float sl = scale_log2;
  /* This thread's slot of stage 0; of stage q at mine + q * STAGE_SLOTS. */
  rv *const mine = stages + (tid / SCREE_TPR) * SCREE_TPR + lane;
  const bool fetcher = rank == 0 && tid == 0;

  /* The ring's first STAGES positions, in every CTA; the next number kept.
   * With clusters, the mbarriers are set up and every CTA runs before any
   * writes into another (a full cluster barrier, once). */
#if SCREE_CSIZE > 1
  if (tid == 0) {
    for (int k = 0; k < SCREE_SLOTS + 2; k++) scree_mbar_init(scree_smem_u32(bars + k), 1);
    scree_mbar_init_fence();
  }
  scree_cluster_sync();
#endif
  int next = 0; /* with clusters, position STAGES's number, taken here */
  if (fetcher) {
    const int base = atomicAdd(counters, SCREE_STAGES + (SCREE_CSIZE > 1));
    for (int p = 0; p < SCREE_STAGES; p++) scree_rsc_put(ring, bars, p, base + p);
    if (SCREE_CSIZE > 1) next = base + SCREE_STAGES;
  }
#if SCREE_CSIZE == 1
  __syncthreads();
#endif

  /* Position p's item (n 0 past the end): its place, found once (with
   * STAGES > 1 thread 0 keeps it in recs for the iteration that computes
   * it; with one stage every thread keeps it in registers). */
  auto find = [&](int p) {
    const int i = scree_rsc_get(ring, bars, p);
    scree_rsc_item it = {0, 1, 0, 0, 0, 0};
    if (i < nitems) it = scree_rsc_find(i, prefix, starts, batch, nstrips, rank);
    if (SCREE_STAGES > 1 && tid == 0) recs[p % SCREE_STAGES] = it;
    return it;
  };
  /* Position p's copies into its stage (one cp.async group, empty past
   * the end). */
  auto issue = [&](int p) {
    const scree_rsc_item it = find(p);
    const scree_rsc_work w = scree_rsc_work_of(it, x, y, cols, x_stride, y_stride);
    scree_rs_stage<SCREE_KSTRIDE>(mine + (p % SCREE_STAGES) * SCREE_STAGE_SLOTS, w.xg, step,
                                  w.ks, w.nc);
    scree_cp_async_commit();
    return it;
  };
#if SCREE_STAGES == 1
  scree_rsc_item cur = issue(0);
#else
#pragma unroll 1
  for (int p = 0; p < SCREE_STAGES - 1; p++) issue(p);
  __syncthreads(); /* their recs */
#endif

#if SCREE_CSIZE > 1
  unsigned phase = 0; /* of the two exchange mbarriers: each is used once per split item */
#endif
  int j = 0;
#pragma unroll 1
  for (;; j++) {
    /* (1) The copies of position j + STAGES - 1 (its stage held position
     * j - 1, done), then this thread's copies of position j. With one
     * stage, position j's copies were issued during item j - 1's outputs. */
#if SCREE_STAGES == 1
    scree_cp_async_wait<0>();
    if (scree_rsc_get(ring, bars, j) >= nitems) break; /* the whole cluster, at the same j */
    const scree_rsc_item it = cur;
#else
    issue(j + SCREE_STAGES - 1);
    scree_cp_async_wait<SCREE_STAGES - 1>();
    if (scree_rsc_get(ring, bars, j) >= nitems) break; /* the whole cluster, at the same j */
    /* Written when position j was issued, before an S1 since; rewritten
     * when position j + STAGES is, after this item's S1 and S2. */
    const scree_rsc_item it = recs[j % SCREE_STAGES];
#endif
    const scree_rsc_work w = scree_rsc_work_of(it, x, y, cols, x_stride, y_stride);
    rv *const st = mine + (j % SCREE_STAGES) * SCREE_STAGE_SLOTS;

#if SCREE_CSIZE == 1
    /* Position j + STAGES's number, taken now: its round trip overlaps the
     * max and sum passes, and the CTAs take items close to when they load
     * them, so that those in flight at once lie close together in the
     * batch (on 32 sequences of 512 tokens x 4096 on an H100, 101.5 us
     * against 107.0 with the number taken an item earlier; with clusters
     * the wait it would add to a strip's CTAs cost more: 114 against 110
     * us). */
    if (fetcher) next = atomicAdd(counters, 1);
#endif
    /* (2) The staged tokens' max, and the streamed tokens' state. */
    float m[SCREE_VEC], s[SCREE_VEC], mx[SCREE_VEC];
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) m[e] = SCREE_NEG_INF, s[e] = 0.f;
    scree_rs_stream(w.xg, step, w.ks, w.nk, w.nc, sl, m, s);
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) mx[e] = m[e];
    scree_rs_staged_max<SCREE_KSTRIDE>(st, w.ks, sl, mx);

    /* Every CTA is done with item j - 1's exchanges and ring slot before
     * this one writes into another for item j. */
#if SCREE_CSIZE > 1
    if (j > 0) scree_cluster_wait();
#endif
    /* With clusters, the ring's position j + STAGES, with the number
     * taken last time (the next one is taken after the sum's exchange). */
#if SCREE_CSIZE > 1
    if (fetcher) scree_rsc_put(ring, bars, j + SCREE_STAGES, next);
#endif

    /* (3) The max across the groups, the warps (S1) and the strip's CTAs. */
    scree_rs_reduce<true, false, SCREE_WARPS>(mx, red); /* S1 */
#if SCREE_CSIZE > 1
    if (it.split > 1)
      scree_rsc_exchange<true>(mx, xbuf, bars + SCREE_SLOTS, phase, rank - it.part, it.part,
                               it.split);
#endif

    /* (4) Every thread's sum taken to the max (the streamed state once,
     * each staged element once), summed the same way. */
    float ms[SCREE_VEC];
    scree_rs_staged_sum<SCREE_KSTRIDE, SCREE_E1 != 0>(st, w.ks, sl, mx, m, s, ms);
#if SCREE_CSIZE == 1
    /* Without clusters, the ring's position j + STAGES (S2 publishes it;
     * its slot's last readers, of position j - 1, are past S1). */
    if (fetcher) scree_rsc_put(ring, bars, j + SCREE_STAGES, next);
#endif
    scree_rs_reduce<false, false, SCREE_WARPS>(s, red + SCREE_WARPS); /* S2 */
#if SCREE_CSIZE > 1
    if (it.split > 1) {
      scree_rsc_exchange<false>(s, xbuf + SCREE_XBUF_FLOATS, bars + SCREE_SLOTS + 1, phase,
                                rank - it.part, it.part, it.split);
      phase ^= 1u;
    }
    scree_cluster_arrive_relaxed(); /* item j's exchanges and ring slot are read */
    /* The number for position j + STAGES + 1, as late as its round trip
     * stays hidden (it is put after the next item's max pass): items in
     * flight at once lie closer together in the batch (on an H100, 59.8
     * against 60.6 us on 8 sequences of 149..891 tokens x 8192, 110.0
     * against 110.7 us on 16 of 337..1821 x 4096). */
    if (fetcher) next = atomicAdd(counters, 1);
#endif

    /* (5) The outputs: 2^(z - (max + log2 sum)), or with E1 e / sum for
     * the staged tokens. (A column that is -inf throughout: sum 0, NaN,
     * as 0 / 0 would give.) */
    float mo[SCREE_VEC], one[SCREE_VEC];
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) mo[e] = ms[e] + scree_lg2(s[e]), one[e] = 1.f;
#if SCREE_E1
    float inv[SCREE_VEC];
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) inv[e] = 1.f / s[e];
#define SCREE_RSC_VAL(k) scree_rs_scale(st[(k) * SCREE_KSTRIDE], inv)
#else
#define SCREE_RSC_VAL(k) scree_rs_out(st[(k) * SCREE_KSTRIDE], sl, mo, one)
#endif
/* A token's output (the row's last columns element by element); four
 * tokens' of a lane whose columns are all inside the row: the four slots
 * read before any output is stored (so that their reads and exponentials
 * overlap; compiled token by token, each waits for its slot's read). */
#define SCREE_RSC_OUT(k) scree_rs_store(w.yg + (k) * ystep, SCREE_RSC_VAL(k), w.nc)
#define SCREE_RSC_OUT4(k0)                                                            \
  do {                                                                                \
    yv o_[4];                                                                         \
    _Pragma("unroll") for (int u_ = 0; u_ < 4; u_++) o_[u_] = SCREE_RSC_VAL((k0) + u_); \
    asm volatile("" ::: "memory");                                                    \
    _Pragma("unroll") for (int u_ = 0; u_ < 4; u_++)                                  \
        *reinterpret_cast<yv *>(w.yg + ((k0) + u_) * ystep) = o_[u_];                \
  } while (0)
#if SCREE_STAGES == 1
    /* Position j + 1's item, and its copies, each issued into a slot of
     * this thread's once the slot's output is written (the store, which
     * needs the slot's value, comes first in program order; the compiler
     * keeps the copy after it), so that they load while the CTA writes
     * this item and while other CTAs work. */
    cur = find(j + 1);
    {
      const scree_rsc_work w1 = scree_rsc_work_of(cur, x, y, cols, x_stride, y_stride);
      const int kn = w.ks > w1.ks ? w.ks : w1.ks;
#pragma unroll 1
      for (int k0 = 0; k0 < kn; k0 += 4) { /* four tokens' outputs, then their slots' copies */
        if (k0 + 4 <= w.ks && w.nc >= SCREE_VEC) {
          SCREE_RSC_OUT4(k0);
        } else {
#pragma unroll
          for (int u = 0; u < 4; u++)
            if (k0 + u < w.ks) SCREE_RSC_OUT(k0 + u);
        }
        asm volatile("" ::: "memory");
#pragma unroll
        for (int u = 0; u < 4; u++)
          if (k0 + u < w1.ks)
            scree_rs_stage1(st + (k0 + u) * SCREE_KSTRIDE, w1.xg + (k0 + u) * step, w1.nc);
      }
      scree_cp_async_commit();
    }
#else
    int k = 0;
    if (w.nc >= SCREE_VEC)
#pragma unroll 1
      for (; k + 4 <= w.ks; k += 4) SCREE_RSC_OUT4(k);
#pragma unroll 1
    for (; k < w.ks; k++) SCREE_RSC_OUT(k);
#endif
#undef SCREE_RSC_OUT4
#undef SCREE_RSC_OUT
#undef SCREE_RSC_VAL
    scree_rs_stream_out(w.xg, w.yg, step, ystep, w.ks, w.nk, w.nc, sl, mo, one);
  }
#if SCREE_CSIZE > 1
  /* Every CTA has read what the last item sent it (and waited for every
   * ring position written to it) before any leaves. */
  if (j > 0) scree_cluster_wait();
#endif
  /* The last CTA out leaves the counters zero for the next launch: every
   * other CTA counted itself after its cluster's last item number was
   * taken. */
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(counters + 1, 1) == (int)gridDim.x - 1) {
      counters[0] = 0;
      counters[1] = 0;
    }
  }
}
