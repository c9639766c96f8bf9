/*
 * softmax.cu - softmax along the last dimension of packed rows.
 *
 *   y[r, :] = exp(s x[r, :] - m) / sum(exp(s x[r, :] - m)),  m = max(s x[r, :])
 *
 * fp32 math in the log2 domain: the host passes s * log2(e), each element
 * becomes 2^(x * s log2(e) - M) with one FMA and one ex2, where M is the
 * row's maximum of the rounded products (a shift common to the whole row,
 * so its rounding cancels in the quotient).
 *
 * Each row is handled by a group of SCREE_TPR threads; a CTA holds
 * SCREE_ROWS such groups (rowwise.cuh). A thread loads SCREE_VEC consecutive
 * elements per access and keeps its first SCREE_CACHE vectors of the row in
 * registers (the tail, cols % VEC elements, one per lane 0..tail-1, too).
 *   - Rows of at most TPR * VEC * CACHE elements (plus the tail) are read
 *     once: the row maximum over the registers, then the sum of the
 *     exponentials, then the write, all from registers.
 *   - Longer rows take one streamed online pass: the cached prefix gives
 *     each thread's (max, sum), the rest of the row is loaded CACHE vectors
 *     per thread at a time (all issued before any is used) and folded in
 *     (the batch maximum first, the running sum rescaled once when it
 *     rises, then one ex2 per element); the threads' states are merged
 *     (scree_row_online). The cached prefix is then written from registers
 *     and the rest of the row read a second time, in batches, to write it:
 *     rows past the register cache cost a second read of that part.
 * Two entries, so that the streamed batch's registers do not weigh on the
 * common case: scree_softmax (rows in registers) and scree_softmax_stream
 * (longer rows); the host picks by cols / VEC <= TPR * CACHE. ex2 is
 * evaluated twice per element (sum, write) rather than keeping fp32
 * exponentials, so the register cost stays that of the raw cache.
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   the launch shape
 *     (rowwise.cuh: TPR 8..1024 power of two, ROWS 1..16 power of two,
 *     TPR * ROWS in [32, 1024], VEC 1/2/4/8, CACHE 1..16, VEC * CACHE <= 64)
 *   SCREE_X_DTYPE, SCREE_Y_DTYPE   dtype codes 0 fp32, 1 fp16, 2 bf16
 *
 * The host guarantees: x, y aligned to VEC elements of their dtype; row
 * strides multiples of VEC; 1 <= cols <= 262144; y either equal to x (same
 * stride and element size: every element is read and then written by the
 * same thread) or disjoint from it; s finite.
 *
 * Test alone: ctest -R softmax    Bench: build/bench/bench_ops --op softmax
 */

#include "rowwise.cuh"

static_assert(SCREE_X_DTYPE >= 0 && SCREE_X_DTYPE <= 2, "x dtype must be fp32, fp16 or bf16");
static_assert(SCREE_Y_DTYPE >= 0 && SCREE_Y_DTYPE <= 2, "y dtype must be fp32, fp16 or bf16");

typedef scree_dtype_of<SCREE_X_DTYPE>::type xt;
typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_vec<xt, SCREE_VEC> xv;
typedef scree_vec<yt, SCREE_VEC> yv;

/* Vectors of a row one pass of the group covers: the register cache, and
 * one streamed batch. */
#define SCREE_SPAN (SCREE_TPR * SCREE_CACHE)
#define SCREE_NEG_INF (-__int_as_float(0x7f800000))

/* The maximum of the scaled elements of a vector, folded into m. */
__device__ __forceinline__ float scree_sm_vmax(const xv &a, float s, float m) {
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) m = fmaxf(m, scree_to_float(a.v[e]) * s);
  return m;
}

/* The sum of 2^(x s - ref) over a vector. */
__device__ __forceinline__ float scree_sm_vsum(const xv &a, float s, float ref) {
  float acc = 0.f;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) acc += scree_exp2(fmaf(scree_to_float(a.v[e]), s, -ref));
  return acc;
}

__device__ __forceinline__ yv scree_sm_vout(const xv &a, float s, float m, float inv) {
  yv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    o.v[e] = scree_from_float<yt>(scree_exp2(fmaf(scree_to_float(a.v[e]), s, -m)) * inv);
  return o;
}

/* Folds a batch of vectors (b[c] present where c TPR < rem, the vectors
 * left in the row from the batch's first) into a thread's online state: the
 * batch maximum first, the running sum rescaled once if the maximum rises,
 * then one ex2 per element. A state whose maximum is still -inf sums
 * 2^-inf = 0 for its -inf elements (the reference 0 avoids -inf - -inf).
 * Row-wise ops that stream an online softmax state could share it. */
__device__ __forceinline__ void scree_sm_fold(scree_online &st, const xv (&b)[SCREE_CACHE], int rem,
                                              float s) {
  float bm = SCREE_NEG_INF;
#pragma unroll
  for (int c = 0; c < SCREE_CACHE; c++)
    if (c * SCREE_TPR < rem) bm = scree_sm_vmax(b[c], s, bm);
  if (bm > st.m) {
    st.s *= scree_exp2(st.m - bm);
    st.m = bm;
  }
  const float ref = st.m == SCREE_NEG_INF ? 0.f : st.m;
#pragma unroll
  for (int c = 0; c < SCREE_CACHE; c++)
    if (c * SCREE_TPR < rem) st.s += scree_sm_vsum(b[c], s, ref);
}

/* One row per group, every row of the grid-stride loop. STREAMS false: the
 * whole row is in registers (nvec <= TPR * CACHE); true: the row is longer
 * and the part past the register cache streams twice. */
template <bool STREAMS>
__device__ __forceinline__ void scree_softmax_rows(const xt *x, yt *y, long long rows, int cols,
                                                   long long x_stride, long long y_stride,
                                                   float s) {
  __shared__ scree_row_scratch scratch;
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = cols / SCREE_VEC;
  const int tail = nvec * SCREE_VEC + lane; /* this lane's tail element, if below cols */

  for (long long base = (long long)blockIdx.x * SCREE_ROWS; base < rows;
       base += (long long)gridDim.x * SCREE_ROWS) {
    const long long row = base + group;
    const bool active = row < rows;
    const xt *xrow = x + (active ? row : 0) * x_stride;
    yt *yrow = y + (active ? row : 0) * y_stride;
    const xv *xr = reinterpret_cast<const xv *>(xrow);
    yv *yr = reinterpret_cast<yv *>(yrow);
    const bool has_tail = active && tail < cols;

    xv cache[SCREE_CACHE];
    float ft = 0.f;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) cache[c] = xr[v];
    }
    if (has_tail) ft = scree_to_float(xrow[tail]);

    float m = has_tail ? ft * s : SCREE_NEG_INF;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++)
      if (active && c * SCREE_TPR + lane < nvec) m = scree_sm_vmax(cache[c], s, m);

    float rmax, rsum;
    if (!STREAMS) {
      /* The whole row is in registers: exact maximum, then the sum. */
      rmax = scree_row_max(m, scratch);
      float sum = has_tail ? scree_exp2(fmaf(ft, s, -rmax)) : 0.f;
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++)
        if (active && c * SCREE_TPR + lane < nvec) sum += scree_sm_vsum(cache[c], s, rmax);
      rsum = scree_row_sum(sum, scratch);
    } else {
      /* The cached prefix starts the thread's state; the rest streams. */
      scree_online st = {m, 0.f};
      const float ref = m == SCREE_NEG_INF ? 0.f : m;
      if (has_tail) st.s = scree_exp2(fmaf(ft, s, -ref));
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++)
        if (active && c * SCREE_TPR + lane < nvec) st.s += scree_sm_vsum(cache[c], s, ref);
      if (active) {
        /* Batches of CACHE vectors per thread: p is the batch's first, rem
         * the vectors left in the row from it. */
        const xv *p = xr + SCREE_SPAN + lane;
#pragma unroll 1
        for (int rem = nvec - SCREE_SPAN - lane; rem > 0; rem -= SCREE_SPAN, p += SCREE_SPAN) {
          xv b[SCREE_CACHE];
#pragma unroll
          for (int c = 0; c < SCREE_CACHE; c++)
            if (c * SCREE_TPR < rem) b[c] = p[c * SCREE_TPR];
          scree_sm_fold(st, b, rem, s);
        }
      }
      st = scree_row_online(st, scratch);
      rmax = st.m;
      rsum = st.s;
    }

    if (active) {
      const float inv = 1.0f / rsum;
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = c * SCREE_TPR + lane;
        if (v < nvec) yr[v] = scree_sm_vout(cache[c], s, rmax, inv);
      }
      if (has_tail) yrow[tail] = scree_from_float<yt>(scree_exp2(fmaf(ft, s, -rmax)) * inv);
      if (STREAMS) {
        /* The second read: a batch of loads, then its stores (in place, the
         * loads of a batch precede every store to it). */
        const xv *p = xr + SCREE_SPAN + lane;
        yv *q = yr + SCREE_SPAN + lane;
#pragma unroll 1
        for (int rem = nvec - SCREE_SPAN - lane; rem > 0;
             rem -= SCREE_SPAN, p += SCREE_SPAN, q += SCREE_SPAN) {
          xv b[SCREE_CACHE];
#pragma unroll
          for (int c = 0; c < SCREE_CACHE; c++)
            if (c * SCREE_TPR < rem) b[c] = p[c * SCREE_TPR];
#pragma unroll
          for (int c = 0; c < SCREE_CACHE; c++)
            if (c * SCREE_TPR < rem) q[c * SCREE_TPR] = scree_sm_vout(b[c], s, rmax, inv);
        }
      }
    }
  }
}

/* x and y carry no __restrict__: they may be the same buffer (in place).
 * s is the caller's scale times log2(e). The host launches scree_softmax
 * when cols / VEC <= TPR * CACHE, else scree_softmax_stream. */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_softmax(const xt *x, yt *y, long long rows, int cols, long long x_stride,
              long long y_stride, float s) {
  scree_softmax_rows<false>(x, y, rows, cols, x_stride, y_stride, s);
}

extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_softmax_stream(const xt *x, yt *y, long long rows, int cols, long long x_stride,
                     long long y_stride, float s) {
  scree_softmax_rows<true>(x, y, rows, cols, x_stride, y_stride, s);
}
