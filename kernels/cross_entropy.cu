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
