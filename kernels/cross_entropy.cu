/*
 * cross_entropy.cu - cross-entropy forward over rows of logits, one pass.
 *
 *   lse[r]  = log(sum_v exp(logits[r, v]))
 *   loss[r] = lse[r] - logits[r, targets[r]]; 0 where targets[r] ==
 *             ignore_index; NaN where the target is outside [0, vocab)
 *
 * fp32 math in the log2 domain (each logit times log2(e), one FMA and one
 * ex2 per element against the running maximum), lse = M ln2 + log(S).
 *
 * Each row is handled by a group of SCREE_TPR threads; a CTA holds
 * SCREE_ROWS such groups (rowwise.cuh). The logits are read exactly once
 * and never kept: a thread loads SCREE_CACHE vectors of SCREE_VEC elements
 * (vectors v0, v0 + TPR, ... of the row) into registers, all issued before
 * any is used so that CACHE x 16 bytes per thread are in flight, and folds
 * the batch into its online (max, sum) state: the batch maximum, one
 * rescale of the running sum if it rises, one ex2 per element. The
 * cols % VEC tail elements are taken one per lane. The group's states are
 * merged with scree_row_online; lane 0 writes loss and lse. Lane 0 also
 * reads the row's target and its logit (one scalar load) before the
 * stream, so that latency hides behind it.
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   the launch shape
 *     (rowwise.cuh: TPR 8..1024 power of two, ROWS 1..16 power of two,
 *     TPR * ROWS in [32, 1024], VEC 1/2/4/8, CACHE 1..16, VEC * CACHE <= 64;
 *     here CACHE is the streamed batch, nothing stays cached)
 *   SCREE_DTYPE   the logits' dtype code: 0 fp32, 1 fp16, 2 bf16
 *   SCREE_CE_GRAD 0: the plain forward above (scree_cross_entropy, as in
 *     earlier versions); 1: the extended forward (label smoothing, z-loss)
 *     that may also write dlogits, described at its kernel below
 *
 * scree_ce_count (either variant; ce_count.cuh, shared with
 * cross_entropy_keep.cu): the number of rows whose target is not
 * ignore_index, for the gradient's mean; one CTA of 256 threads.
 *
 * The host guarantees: logits aligned to VEC elements and its row stride a
 * multiple of VEC; 1 <= vocab <= 2^24; targets int64, 8-byte aligned; loss
 * (and lse when not 0) fp32, 4-byte aligned, disjoint from every other
 * buffer.
 *
 * Test alone: ctest -R cross_entropy    Bench: build/bench/bench_ops --op cross_entropy
 */

#include "rowwise.cuh"

static_assert(SCREE_DTYPE >= 0 && SCREE_DTYPE <= 2, "dtype must be fp32, fp16 or bf16");

typedef scree_dtype_of<SCREE_DTYPE>::type lt;
typedef scree_vec<lt, SCREE_VEC> lv;

/* Vectors of a row one streamed batch of the group covers. */
#define SCREE_SPAN (SCREE_TPR * SCREE_CACHE)
#define SCREE_NEG_INF (-__int_as_float(0x7f800000))

/* Folds a batch of vectors (b[c] present where c TPR < rem, the vectors
 * left in the row from the batch's first) into a thread's online state,
 * values in the log2 domain (times s): the batch maximum first, the
 * running sum rescaled once if the maximum rises, then one ex2 per element.
 * A state whose maximum is still -inf sums 2^-inf = 0 for its -inf
 * elements (the reference 0 avoids -inf - -inf). Row-wise ops that stream
 * an online softmax state could share it.
 *
 * The batch's terms are summed apart, then added to the running sum with
 * compensation (Kahan; comp holds what the running sum lost, scaled with
 * it). A thread may fold 2^15 terms: once the row's maximum is in its sum
 * (about 1), every term below half an ulp of it (2^-25) would otherwise
 * round away, a loss that grows with the count, not its square root (the
 * GPU test saw 5.7e-5 on a 128256-token vocabulary at 8 threads a row). */
__device__ __forceinline__ void scree_ce_fold(scree_online &st, float &comp,
                                              const lv (&b)[SCREE_CACHE], int rem, float s) {
  float bm = SCREE_NEG_INF;
#pragma unroll
  for (int c = 0; c < SCREE_CACHE; c++)
    if (c * SCREE_TPR < rem) {
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) bm = fmaxf(bm, scree_to_float(b[c].v[e]) * s);
    }
  if (bm > st.m) {
    const float f = scree_exp2(st.m - bm);
    st.s *= f;
    comp *= f;
    st.m = bm;
  }
  const float ref = st.m == SCREE_NEG_INF ? 0.f : st.m;
  float bs = 0.f;
#pragma unroll
  for (int c = 0; c < SCREE_CACHE; c++)
    if (c * SCREE_TPR < rem) {
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++)
        bs += scree_exp2(fmaf(scree_to_float(b[c].v[e]), s, -ref));
    }
  const float y = bs - comp, t = st.s + y;
  comp = (t - st.s) - y;
  st.s = t;
}

#ifndef SCREE_CE_GRAD
#define SCREE_CE_GRAD 0
#endif

#include "ce_count.cuh"

#if !SCREE_CE_GRAD
/* loss and lse never alias the logits (the host checks it). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_cross_entropy(const lt *__restrict__ logits, const long long *__restrict__ targets,
                    float *__restrict__ loss, float *__restrict__ lse, long long rows, int vocab,
                    long long stride, long long ignore_index) {
  __shared__ scree_row_scratch scratch;
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = vocab / SCREE_VEC;
  const int tail = nvec * SCREE_VEC + lane; /* this lane's tail element, if below vocab */
  const float s = SCREE_LOG2E;

  for (long long base = (long long)blockIdx.x * SCREE_ROWS; base < rows;
       base += (long long)gridDim.x * SCREE_ROWS) {
    const long long row = base + group;
    const bool active = row < rows;
    const lt *lrow = logits + (active ? row : 0) * stride;
    const lv *lr = reinterpret_cast<const lv *>(lrow);

    /* The target and its logit, early: lane 0 only. */
    long long target = 0;
    float tlogit = 0.f;
    if (active && lane == 0) {
      target = targets[row];
      if (target >= 0 && target < vocab) tlogit = scree_to_float(lrow[target]);
    }

    scree_online st = scree_online_empty();
    float comp = 0.f; /* scree_ce_fold's compensation */
    if (active) {
      if (tail < vocab) {
        const float t = scree_to_float(lrow[tail]) * s;
        st = {t, t == SCREE_NEG_INF ? 0.f : 1.f};
      }
      /* Batches of CACHE vectors per thread: p is the batch's first, rem
       * the vectors left in the row from it. */
      const lv *p = lr + lane;
#pragma unroll 1
      for (int rem = nvec - lane; rem > 0; rem -= SCREE_SPAN, p += SCREE_SPAN) {
        lv b[SCREE_CACHE];
#pragma unroll
        for (int c = 0; c < SCREE_CACHE; c++)
          if (c * SCREE_TPR < rem) b[c] = p[c * SCREE_TPR];
        scree_ce_fold(st, comp, b, rem, s);
      }
      st.s -= comp;
    }
    st = scree_row_online(st, scratch);

    if (active && lane == 0) {
      const float l = fmaf(st.m, SCREE_LN2, logf(st.s));
      float out;
      if (target == ignore_index)
        out = 0.f;
      else if (target >= 0 && target < vocab)
        out = l - tlogit;
      else
        out = __int_as_float(0x7fc00000); /* NaN: a target outside [0, vocab) */
      loss[row] = out;
      if (lse) lse[row] = l;
    }
  }
}
#else /* SCREE_CE_GRAD */

/* Streaming accesses of a vector for the second pass (ld.global.cs /
 * st.global.cs: evict first). The second pass is the last use of the
 * logits and dlogits is not read again, so neither should push out of L2
 * the rows whose first pass is still running. */
template <typename V>
__device__ __forceinline__ V scree_ce_ldcs(const V *p) {
  V v;
  if (sizeof(V) == 16) *reinterpret_cast<int4 *>(&v) = __ldcs(reinterpret_cast<const int4 *>(p));
  else if (sizeof(V) == 8) *reinterpret_cast<int2 *>(&v) = __ldcs(reinterpret_cast<const int2 *>(p));
  else if (sizeof(V) == 4) *reinterpret_cast<int *>(&v) = __ldcs(reinterpret_cast<const int *>(p));
  else v = *p;
  return v;
}
template <typename V>
__device__ __forceinline__ void scree_ce_stcs(V *p, const V &v) {
  if (sizeof(V) == 16) __stcs(reinterpret_cast<int4 *>(p), *reinterpret_cast<const int4 *>(&v));
  else if (sizeof(V) == 8) __stcs(reinterpret_cast<int2 *>(p), *reinterpret_cast<const int2 *>(&v));
  else if (sizeof(V) == 4) __stcs(reinterpret_cast<int *>(p), *reinterpret_cast<const int *>(&v));
  else *p = v;
}

/* The extended forward, optionally with the gradient (include/scree.h):
 *
 *   loss = (1 - eps)(lse - x_t) + eps (lse - sum_v x_v / V) + z lse^2
 *   dlogits_v = (p_v (1 + 2 z lse) - (1 - eps)[v == t] - eps / V) * scale
 *
 * Pass 1 is the plain forward's stream (scree_ce_fold), with the sum of the
 * row's logits beside it when eps != 0. The group's (max, sum) and the
 * logit sum are merged; every lane then has lse. Pass 2 (dlogits != 0)
 * reads the row again and writes dlogits: each lane walks its own vectors
 * in the reverse order of pass 1, so that what it read last, the most
 * likely to be still in L2, comes first; a row's two reads are one row's
 * time apart (a 128k-vocabulary bf16 row is 256 KB: with one row per SM,
 * about 34 MB of an H100's or H200's 50 MB L2 is in use between them).
 * After the merge, the lane that owns the target's element (its vector's
 * lane, or the tail's) reads the target's logit and writes loss (and
 * lse); then pass 2. Nothing is read after another lane may have written
 * it: in place (dlogits == logits, the same stride) each element is read,
 * then written, by the one thread that owns it.
 *
 * scale: grad_scale (host: 0 means 1), divided by *count when count is not
 * 0 (the mean; count from scree_ce_count; every row ignored when it is 0).
 * An ignored row: loss 0, a zero gradient row (its logits still give lse).
 * A target outside [0, vocab): NaN loss and a NaN gradient row. */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_cross_entropy(const lt *logits, const long long *__restrict__ targets,
                    float *__restrict__ loss, float *__restrict__ lse, long long rows, int vocab,
                    long long stride, long long ignore_index, lt *dlogits, long long dstride,
                    float eps, float z, float grad_scale,
                    const unsigned long long *__restrict__ count) {
  __shared__ scree_row_scratch scratch;
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = vocab / SCREE_VEC;
  const int tail = nvec * SCREE_VEC + lane; /* this lane's tail element, if below vocab */
  const float s = SCREE_LOG2E;
  float scale = grad_scale;
  if (count) {
    const unsigned long long n = *count;
    scale = n ? grad_scale / (float)n : 0.f;
  }
  /* Vectors of the row this lane owns: lane, lane + TPR, ... */
  const int mine = nvec > lane ? (nvec - lane + SCREE_TPR - 1) / SCREE_TPR : 0;

  for (long long base = (long long)blockIdx.x * SCREE_ROWS; base < rows;
       base += (long long)gridDim.x * SCREE_ROWS) {
    const long long row = base + group;
    const bool active = row < rows;
    const lt *lrow = logits + (active ? row : 0) * stride;
    const lv *lr = reinterpret_cast<const lv *>(lrow);
    const long long target = active ? targets[row] : 0;

    scree_online st = scree_online_empty();
    float comp = 0.f; /* scree_ce_fold's compensation */
    float xsum = 0.f; /* the lane's sum of logits (eps != 0) */
    float tx = 0.f;   /* the lane's tail element */
    if (active) {
      if (tail < vocab) {
        tx = scree_to_float(lrow[tail]);
        const float t = tx * s;
        st = {t, t == SCREE_NEG_INF ? 0.f : 1.f};
        xsum = tx;
      }
      const lv *p = lr + lane;
#pragma unroll 1
      for (int rem = nvec - lane; rem > 0; rem -= SCREE_SPAN, p += SCREE_SPAN) {
        lv b[SCREE_CACHE];
#pragma unroll
        for (int c = 0; c < SCREE_CACHE; c++)
          if (c * SCREE_TPR < rem) b[c] = p[c * SCREE_TPR];
        scree_ce_fold(st, comp, b, rem, s);
#pragma unroll
        for (int c = 0; c < SCREE_CACHE; c++)
          if (c * SCREE_TPR < rem) {
#pragma unroll
            for (int e = 0; e < SCREE_VEC; e++) xsum += scree_to_float(b[c].v[e]);
          }
      }
      st.s -= comp;
    }
    st = scree_row_online(st, scratch);
    if (eps != 0.f) xsum = scree_row_sum(xsum, scratch); /* eps is the same in every thread */

    const float l = fmaf(st.m, SCREE_LN2, logf(st.s));
    const bool ignored = target == ignore_index;
    const bool valid = target >= 0 && target < vocab;
    /* The lane that will write the target's gradient (its vector's, or the
     * tail's) reads the target's logit before it writes anything. */
    const int owner = !valid ? 0 : target < nvec * SCREE_VEC ? (int)(target / SCREE_VEC) % SCREE_TPR
                                                             : (int)(target - nvec * SCREE_VEC);
    if (active && lane == owner) {
      if (lse) lse[row] = l;
      float out;
      if (ignored)
        out = 0.f;
      else if (!valid)
        out = __int_as_float(0x7fc00000);
      else
        out = fmaf(-(1.f - eps), scree_to_float(lrow[target]),
                   /* eps = 0 leaves out the logit sum (-inf with masked logits) */
                   l - (eps != 0.f ? eps * (xsum / (float)vocab) : 0.f) + z * l * l);
      loss[row] = out;
    }
    if (!dlogits || !active) continue;

    lt *drow = dlogits + row * dstride;
    lv *dr = reinterpret_cast<lv *>(drow);
    if (ignored) {
      lv zv;
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) zv.v[e] = scree_from_float<lt>(0.f);
      for (int k = 0; k < mine; k++) scree_ce_stcs(dr + lane + k * SCREE_TPR, zv);
      if (tail < vocab) drow[tail] = scree_from_float<lt>(0.f);
      continue;
    }
    /* dlogits_v = fma(2^(x s - m), c1, c0), minus ct at the target. */
    const float c1 = valid ? scale * fmaf(2.f * z, l, 1.f) / st.s : __int_as_float(0x7fc00000);
    const float c0 = -scale * eps / (float)vocab;
    const float ct = scale * (1.f - eps);
    const float m = st.m;
    const int t = valid ? (int)target : -1;
    if (tail < vocab) {
      float g = fmaf(scree_exp2(fmaf(tx, s, -m)), c1, c0);
      if (tail == t) g -= ct;
      drow[tail] = scree_from_float<lt>(g);
    }
    /* Batches of CACHE of the lane's vectors, last first. */
#pragma unroll 1
    for (int k0 = mine - 1; k0 >= 0; k0 -= SCREE_CACHE) {
      lv b[SCREE_CACHE];
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++)
        if (k0 - c >= 0) b[c] = scree_ce_ldcs(lr + lane + (k0 - c) * SCREE_TPR);
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++)
        if (k0 - c >= 0) {
          const int j = lane + (k0 - c) * SCREE_TPR;
          const int d = t - j * SCREE_VEC; /* the target's place in the vector */
          float g[SCREE_VEC];
#pragma unroll
          for (int e = 0; e < SCREE_VEC; e++)
            g[e] = fmaf(scree_exp2(fmaf(scree_to_float(b[c].v[e]), s, -m)), c1,
                        e == d ? c0 - ct : c0);
          scree_ce_stcs(dr + j, scree_vec_from_float<lt>(g));
        }
    }
  }
}
#endif /* SCREE_CE_GRAD */
