/*
 * cross_entropy_keep.cu - cross-entropy with its gradient (the extended
 * forward of cross_entropy.cu, SCREE_CE_GRAD=1), reading each row of logits
 * from memory once: the row stays in registers between the statistics and
 * the writing of dlogits.
 *
 *   loss = (1 - eps)(lse - x_t) + eps (lse - sum_v x_v / V) + z lse^2
 *   dlogits_v = (p_v (1 + 2 z lse) - (1 - eps)[v == t] - eps / V) * scale
 *
 * A row is held by SCREE_CSIZE CTAs (a thread block cluster along x when
 * CSIZE > 1, sm_90), by a group of SCREE_TPR threads in each; a CTA holds
 * SCREE_ROWS such groups, each its part of a different row. CTA rank k of
 * the cluster holds vectors [k P, (k + 1) P) of its rows (P = TPR x CACHE
 * vectors of SCREE_VEC elements): thread `lane` of a group the vectors
 * k P + c TPR + lane, c < CACHE, all loaded (evict first) before any is
 * used, so that CACHE x 16 bytes per thread are in flight. The vocab % VEC
 * tail elements are taken one per lane by rank 0. The host launches this
 * kernel only where the row fits: vocab / VEC <= CSIZE x P.
 *
 * Per thread: the maximum of its values (log2 domain), the sum of 2^(x s -
 * max) over them, and their plain sum (the logit sum of label smoothing).
 * Merged over the group (scree_row_online, scree_row_sum), then, with
 * clusters, across the cluster: each CTA's lane 0 of a group stores its
 * group's (max, sum, logit sum) into every CTA of the cluster (st.async,
 * completing bytes at that CTA's mbarrier), and every thread waits for its
 * CTA's mbarrier, then merges the CSIZE states in rank order: every CTA
 * gets the same bits, whatever the timing. No fence and no cluster barrier
 * per row (a release at cluster scope would wait for the previous row's
 * dlogits stores to reach L2): the slots and mbarriers alternate with the
 * iteration's parity, and a CTA sends row i + 2's states only after every
 * CTA has sent row i + 1's, which each does after reading row i's. One
 * cluster barrier at the start (mbarriers set, every CTA running); a CTA
 * leaves only after every store into it has landed (its last wait).
 *
 * Then dlogits from the registers: 2^(x s - m) again (one more ex2 per
 * element), times c1, plus c0, minus ct at the target, stored evict first.
 * The thread that holds the target's element (the tail lane, or the
 * vector's) reads the target's logit (one scalar load, before anything of
 * the row is written) and writes loss and lse; for an ignored or invalid
 * target, rank 0's lane 0. In place (dlogits == logits, the same stride)
 * each element is read, then written, by the one thread that holds it.
 *
 * Semantics as cross_entropy.cu's gradient variant: scale = grad_scale
 * (host: 0 means 1) over *count when count is not 0 (the mean; 0 when every
 * row is ignored); an ignored row has loss 0 and a zero gradient row; a
 * target outside [0, vocab) a NaN loss and a NaN gradient row; -inf logits
 * give probability 0 (a row of -inf only: lse -inf). Sums differ in order
 * from cross_entropy.cu's (fp32, a few ulp), deterministic.
 *
 * Macros (the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   rowwise.cuh's launch
 *     shape; CACHE is the vectors each thread keeps, VEC x CACHE x the
 *     element size at most 64 bytes (16 registers)
 *   SCREE_CSIZE   CTAs a row spans: 1, 2, 4 or 8 (more than 1: sm_90)
 *   SCREE_DTYPE   the logits' dtype code: 0 fp32, 1 fp16, 2 bf16
 *
 * scree_ce_count: cross_entropy.cu's, from ce_count.cuh (the rows not
 * ignored, for the mean; one CTA of 256 threads).
 *
 * Test alone: ctest -R cross_entropy (on a GPU), ctest -R ce_keep_emu (on the CPU)
 */

#include "rowwise.cuh"

#ifndef SCREE_CSIZE
#define SCREE_CSIZE 1
#endif
#if SCREE_CSIZE > 1
#include "ptx.cuh"
#include "cluster_ptx.cuh"
#endif

static_assert(SCREE_DTYPE >= 0 && SCREE_DTYPE <= 2, "dtype must be fp32, fp16 or bf16");
static_assert(SCREE_CSIZE == 1 || SCREE_CSIZE == 2 || SCREE_CSIZE == 4 || SCREE_CSIZE == 8,
              "CSIZE must be 1, 2, 4 or 8");

typedef scree_dtype_of<SCREE_DTYPE>::type lt;
typedef scree_vec<lt, SCREE_VEC> lv;

static_assert(SCREE_VEC * SCREE_CACHE * sizeof(lt) <= 64,
              "a thread keeps at most 64 bytes of its row (VEC x CACHE x element size)");

/* Vectors of a row one CTA holds. */
#define SCREE_PART (SCREE_TPR * SCREE_CACHE)
#define SCREE_NEG_INF (-__int_as_float(0x7f800000))
/* At most 64 registers a thread: every CTA size then fills 1024 threads of
 * an SM (two CTAs of 512: one's loads run while the other writes). */
#define SCREE_MIN_CTAS (1024 / SCREE_THREADS)

/* A vector's load and store, evict first (ld.global.cs, st.global.cs): the
 * logits are not read again, dlogits not read here. */
template <typename V>
__device__ __forceinline__ V scree_ce_ldcs(const V *p) {
  V v;
  if constexpr (sizeof(V) == 16)
    *reinterpret_cast<int4 *>(&v) = __ldcs(reinterpret_cast<const int4 *>(p));
  else if constexpr (sizeof(V) == 8)
    *reinterpret_cast<int2 *>(&v) = __ldcs(reinterpret_cast<const int2 *>(p));
  else if constexpr (sizeof(V) == 4)
    *reinterpret_cast<int *>(&v) = __ldcs(reinterpret_cast<const int *>(p));
  else
    v = *p;
  return v;
}
template <typename V>
__device__ __forceinline__ void scree_ce_stcs(V *p, const V &v) {
  if constexpr (sizeof(V) == 16)
    __stcs(reinterpret_cast<int4 *>(p), *reinterpret_cast<const int4 *>(&v));
  else if constexpr (sizeof(V) == 8)
    __stcs(reinterpret_cast<int2 *>(p), *reinterpret_cast<const int2 *>(&v));
  else if constexpr (sizeof(V) == 4)
    __stcs(reinterpret_cast<int *>(p), *reinterpret_cast<const int *>(&v));
  else
    *p = v;
}

#include "ce_count.cuh"

/* The kernel's shared memory (static; dynamic under tests/emu, which
 * defines SCREE_SMEM_BASE): the group reductions' scratch and, with
 * clusters, each group's (max, sum, logit sum) from each CTA of the
 * cluster by iteration parity, and an mbarrier per parity counting their
 * bytes. */
struct scree_ce_smem {
#if SCREE_CSIZE > 1
  unsigned long long bars[2];
  float xch[2][SCREE_CSIZE][SCREE_ROWS][3];
#endif
  scree_row_scratch scratch;
};

extern "C" __global__ void __launch_bounds__(SCREE_THREADS, SCREE_MIN_CTAS)
scree_ce_keep(const lt *logits, const long long *__restrict__ targets, float *__restrict__ loss,
              float *__restrict__ lse, long long rows, int vocab, long long stride,
              long long ignore_index, lt *dlogits, long long dstride, float eps, float z,
              float grad_scale, const unsigned long long *__restrict__ count) {
#ifdef SCREE_SMEM_BASE /* tests/emu: the CTA's own memory */
  scree_ce_smem &sm = *reinterpret_cast<scree_ce_smem *>(SCREE_SMEM_BASE);
#else
  __shared__ scree_ce_smem sm;
#endif
  scree_row_scratch &scratch = sm.scratch;
#if SCREE_CSIZE > 1
  float(&xch)[2][SCREE_CSIZE][SCREE_ROWS][3] = sm.xch;
  unsigned long long(&bars)[2] = sm.bars;
  const int rank = (int)scree_cluster_rank();
  if (threadIdx.x == 0) {
    scree_mbar_init(scree_smem_u32(&bars[0]), 1);
    scree_mbar_init(scree_smem_u32(&bars[1]), 1);
    scree_mbar_init_fence();
  }
  scree_cluster_sync(); /* the mbarriers set, every CTA running */
  unsigned it = 0;      /* the iteration: its parity picks xch and bars */
#else
  const int rank = 0;
#endif
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = vocab / SCREE_VEC;
  const int first = rank * SCREE_PART + lane; /* the thread's first vector */
  const int tail = nvec * SCREE_VEC + lane;   /* its tail element, if rank 0 and below vocab */
  const bool has_tail = rank == 0 && tail < vocab;
  const float s = SCREE_LOG2E;
  float scale = grad_scale;
  if (count) {
    const unsigned long long n = *count;
    scale = n ? grad_scale / (float)n : 0.f;
  }

  for (long long base = (long long)(blockIdx.x / SCREE_CSIZE) * SCREE_ROWS; base < rows;
       base += (long long)(gridDim.x / SCREE_CSIZE) * SCREE_ROWS) {
    const long long row = base + group;
    const bool active = row < rows;
    const lt *lrow = logits + (active ? row : 0) * stride;
    const lv *lr = reinterpret_cast<const lv *>(lrow);

    /* The thread's part of the row, all loads issued first. */
    lv b[SCREE_CACHE];
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++)
      if (active && first + c * SCREE_TPR < nvec) b[c] = scree_ce_ldcs(lr + first + c * SCREE_TPR);
    const float tx = active && has_tail ? scree_to_float(lrow[tail]) : 0.f;
    const long long target = active ? targets[row] : 0;

    /* Who holds the target's element, and its logit (read before any of
     * the row is written). */
    const bool ignored = target == ignore_index;
    const bool valid = target >= 0 && target < vocab;
    int orank = 0, olane = 0;
    if (valid) {
      if (target < (long long)nvec * SCREE_VEC) {
        const int j = (int)(target / SCREE_VEC);
        orank = j / SCREE_PART;
        olane = j % SCREE_TPR;
      } else {
        olane = (int)(target - (long long)nvec * SCREE_VEC);
      }
    }
    const bool owner = active && rank == orank && lane == olane;
    const float tlogit = owner && valid ? scree_to_float(lrow[target]) : 0.f;

    /* The thread's (max, sum) and logit sum. */
    float m = SCREE_NEG_INF;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++)
      if (active && first + c * SCREE_TPR < nvec) {
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) m = fmaxf(m, scree_to_float(b[c].v[e]) * s);
      }
    if (active && has_tail) m = fmaxf(m, tx * s);
    const float ref = m == SCREE_NEG_INF ? 0.f : m; /* no -inf - -inf */
    float sum = 0.f, xsum = 0.f;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++)
      if (active && first + c * SCREE_TPR < nvec) {
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) {
          const float x = scree_to_float(b[c].v[e]);
          sum += scree_exp2(fmaf(x, s, -ref));
          xsum += x;
        }
      }
    if (active && has_tail) {
      sum += scree_exp2(fmaf(tx, s, -ref));
      xsum += tx;
    }
    scree_online st = scree_row_online({m, sum}, scratch);
    if (eps != 0.f) xsum = scree_row_sum(xsum, scratch); /* eps is the same in every thread */

#if SCREE_CSIZE > 1
    /* Across the cluster: lane 0 of each group sends its state to every CTA
     * (st.async, completing bytes at that CTA's mbarrier of this parity);
     * every thread waits for its CTA's, then merges them in rank order. */
    {
      const unsigned buf = it & 1u, b = scree_smem_u32(&bars[buf]);
      if (threadIdx.x == 0) scree_mbar_arrive_expect(b, SCREE_CSIZE * SCREE_ROWS * 3 * 4);
      if (lane == 0) {
        const unsigned slot = scree_smem_u32(&xch[buf][rank][group][0]);
#pragma unroll
        for (int k = 0; k < SCREE_CSIZE; k++) {
          const unsigned to = scree_cluster_map(slot, (unsigned)k),
                         rb = scree_cluster_map(b, (unsigned)k);
          scree_st_async_u32(to, __float_as_uint(st.m), rb);
          scree_st_async_u32(to + 4u, __float_as_uint(st.s), rb);
          scree_st_async_u32(to + 8u, __float_as_uint(xsum), rb);
        }
      }
      scree_mbar_wait(b, (it >> 1) & 1u);
      float mm = xch[buf][0][group][0];
#pragma unroll
      for (int k = 1; k < SCREE_CSIZE; k++) mm = fmaxf(mm, xch[buf][k][group][0]);
      float ss = 0.f, xx = 0.f;
#pragma unroll
      for (int k = 0; k < SCREE_CSIZE; k++) {
        const float rm = xch[buf][k][group][0], rs = xch[buf][k][group][1];
        ss += rm == mm ? rs : rs * scree_exp2(rm - mm);
        xx += xch[buf][k][group][2];
      }
      st = {mm, ss};
      xsum = xx;
      it++;
    }
#endif

    const float l = fmaf(st.m, SCREE_LN2, logf(st.s));
    if (owner) {
      if (lse) lse[row] = l;
      float out;
      if (ignored)
        out = 0.f;
      else if (!valid)
        out = __int_as_float(0x7fc00000);
      else
        out = fmaf(-(1.f - eps), tlogit,
                   /* eps = 0 leaves out the logit sum (-inf with masked logits) */
                   l - (eps != 0.f ? eps * (xsum / (float)vocab) : 0.f) + z * l * l);
      loss[row] = out;
    }
    if (!dlogits || !active) continue;

    lt *drow = dlogits + row * dstride;
    lv *dr = reinterpret_cast<lv *>(drow);
    /* dlogits_v = fma(2^(x s - m), c1, c0), minus ct at the target; an
     * ignored row all 0 (c1 = c0 = 0, no target). */
    const float c1 = ignored ? 0.f
                     : valid ? scale * fmaf(2.f * z, l, 1.f) / st.s
                             : __int_as_float(0x7fc00000);
    const float c0 = ignored ? 0.f : -scale * eps / (float)vocab;
    const float ct = scale * (1.f - eps);
    const int t = valid && !ignored ? (int)target : -1;
    const float mx = st.m;
    if (has_tail) {
      float g = ignored ? 0.f : fmaf(scree_exp2(fmaf(tx, s, -mx)), c1, c0);
      if (tail == t) g -= ct;
      drow[tail] = scree_from_float<lt>(g);
    }
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int j = first + c * SCREE_TPR;
      if (j < nvec) {
        const int d = t - j * SCREE_VEC; /* the target's place in the vector */
        float g[SCREE_VEC];
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++)
          g[e] = ignored ? 0.f
                         : fmaf(scree_exp2(fmaf(scree_to_float(b[c].v[e]), s, -mx)), c1,
                                e == d ? c0 - ct : c0);
        scree_ce_stcs(dr + j, scree_vec_from_float<lt>(g));
      }
    }
  }
}
