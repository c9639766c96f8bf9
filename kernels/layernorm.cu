/*
 * layernorm.cu - LayerNorm over packed rows.
 *
 *   mu = mean(x[r, :]), rstd = 1 / sqrt(mean((x[r, :] - mu)^2) + eps)
 *   y[r, :] = (x[r, :] - mu) * rstd * w + b                 fp32 statistics
 *   mean[r] = mu, rstd[r] = rstd                            when asked for
 *
 * Each row is handled by a group of SCREE_TPR threads; a CTA holds
 * SCREE_ROWS such groups (rowwise.cuh). A thread loads SCREE_VEC
 * consecutive elements per access and keeps up to SCREE_CACHE of those
 * vectors in registers, so rows of up to TPR * VEC * CACHE elements are
 * read from memory exactly once. The statistics take two reductions over
 * the row, both on the registers:
 *   1. s = sum(x), mu0 = s / cols (rounded to fp32);
 *   2. with d = x - mu0: sd = sum(d) and sq = sum(d^2), reduced together;
 *      then corr = sd / cols, mu = mu0 + corr, var = sq / cols - corr^2.
 * This is the corrected two-pass algorithm: corr takes out the rounding error
 * of mu0 (about 2^-24 |mu0|), and the output uses (d - corr), never x - mu, so
 * a row of large mean and small spread (100 + N(0, 1)) loses nothing to the
 * offset; sum(x^2) - n mu^2 is never formed. Rows longer than the cache
 * read the streamed part again for step 2 and for the output. Columns past
 * the last whole vector (cols % VEC < VEC <= TPR of them) are taken one per
 * lane and kept in a register.
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   the launch shape
 *     (rowwise.cuh)
 *   SCREE_X_DTYPE, SCREE_W_DTYPE, SCREE_Y_DTYPE   dtype codes (common.cuh);
 *     b has w's dtype
 * The bias and the mean / rstd outputs are optional at run time (null
 * pointers): the branches on them are uniform, and compile-time flags
 * would save few registers (src/ops/layernorm.c says what ptxas showed).
 *
 * The host guarantees: x, w, b (if any), y aligned to VEC elements of their
 * dtype; row strides multiples of VEC; y either equal to x (same stride and
 * element size) or disjoint from it; y disjoint from w and b; mean and rstd
 * disjoint from every other buffer.
 *
 * Test alone: ctest -R layernorm    Bench: build/bench/bench_ops --op layernorm
 */

#include "rowwise.cuh"

static_assert(SCREE_X_DTYPE >= 0 && SCREE_X_DTYPE <= 2 && SCREE_W_DTYPE >= 0 &&
                  SCREE_W_DTYPE <= 2 && SCREE_Y_DTYPE >= 0 && SCREE_Y_DTYPE <= 2,
              "dtype codes must be 0 (fp32), 1 (fp16) or 2 (bf16)");

typedef scree_dtype_of<SCREE_X_DTYPE>::type xt;
typedef scree_dtype_of<SCREE_W_DTYPE>::type wt;
typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_vec<xt, SCREE_VEC> xv;
typedef scree_vec<wt, SCREE_VEC> wv;
typedef scree_vec<yt, SCREE_VEC> yv;

/* Two sums over the row's TPR threads in one exchange (the same CTA-wide
 * contract as scree_row_sum: every thread calls it, the scratch is free
 * again when it returns). Not specific to LayerNorm: any row-wise op that
 * reduces two values at once can use it. */
struct scree_row_scratch2 {
  float v[SCREE_ROWS][SCREE_ROW_WARPS][2];
};
__device__ __forceinline__ void scree_row_sum2(float &a, float &b, scree_row_scratch2 &s) {
  constexpr int W = SCREE_TPR < 32 ? SCREE_TPR : 32;
  a = scree_group_sum<W>(a);
  b = scree_group_sum<W>(b);
#if SCREE_TPR > 32
  const int lane = scree_row_lane(), group = scree_row_group();
  if (threadIdx.x % 32 == 0) {
    s.v[group][lane / 32][0] = a;
    s.v[group][lane / 32][1] = b;
  }
  __syncthreads();
  a = s.v[group][0][0];
  b = s.v[group][0][1];
#pragma unroll
  for (int i = 1; i < SCREE_ROW_WARPS; i++) {
    a += s.v[group][i][0];
    b += s.v[group][i][1];
  }
  __syncthreads();
#else
  (void)s;
#endif
}

/* Output vector v of a row: ((x - mu0) - corr) * r * w + b, w and b (if
 * any: br non-null) read here. */
__device__ __forceinline__ yv scree_ln_vec(const xv &a, const wv *wr, const wv *br, int v,
                                           float mu0, float corr, float r) {
  const wv g = wr[v];
  float bb[SCREE_VEC];
  if (br) {
    const wv t = br[v];
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) bb[e] = scree_to_float(t.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) bb[e] = 0.f;
  }
  yv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) {
    const float z = ((scree_to_float(a.v[e]) - mu0) - corr) * r;
    o.v[e] = scree_from_float<yt>(fmaf(z, scree_to_float(g.v[e]), bb[e]));
  }
  return o;
}

/* x and y carry no __restrict__: they may be the same buffer (in place). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_layernorm(const xt *x, const wt *__restrict__ w, const wt *__restrict__ b, yt *y,
                float *__restrict__ mean, float *__restrict__ rstd, long long rows, int cols,
                long long x_stride, long long y_stride, float eps) {
  __shared__ scree_row_scratch scratch;
  __shared__ scree_row_scratch2 scratch2;
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = cols / SCREE_VEC;
  const float inv_cols = 1.0f / (float)cols;
  const wv *wr = reinterpret_cast<const wv *>(w);
  const wv *br = reinterpret_cast<const wv *>(b);
  /* The lane's element past the last whole vector, if it has one. */
  const int ti = nvec * SCREE_VEC + lane;
  const bool has_tail = ti < cols;

  for (long long base = (long long)blockIdx.x * SCREE_ROWS; base < rows;
       base += (long long)gridDim.x * SCREE_ROWS) {
    const long long row = base + group;
    const bool active = row < rows;
    const long long rr = active ? row : 0;
    const xt *xrow = x + rr * x_stride;
    const xv *xr = reinterpret_cast<const xv *>(xrow);

    /* Step 1: load the row (cached part, tail), sum it. */
    xv cache[SCREE_CACHE];
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) cache[c] = xr[v];
    }
    const float xtail = active && has_tail ? scree_to_float(xrow[ti]) : 0.f;
    float s = xtail;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) {
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) s += scree_to_float(cache[c].v[e]);
      }
    }
    /* The streamed part (rows longer than the cache). Not unrolled: the
     * cached row stays live across these loops, and unrolled copies of
     * them made ptxas spill at 1024 threads. */
    if (active) {
#pragma unroll 1
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
        const xv a = xr[v];
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) s += scree_to_float(a.v[e]);
      }
    }
    /* mu0 and corr are rounded explicitly (__fmul_rn: mul.rn, which ptxas
     * never fuses). A plain product may be fused into a later x - mu0 as
     * fma(-sum, inv_cols, x), i.e. with mu0 unrounded, in some code paths
     * and not others (seen: the tail's, where NVVM recomputes the product
     * next to the subtraction). Step 2's sum of d must see the same mu0 as
     * step 3's output, or the half ulp of mu0 the correction was to take
     * out (6e-5 on an fp32 row of mean 1024) reaches y. */
    const float mu0 = __fmul_rn(scree_row_sum(s, scratch), inv_cols);

    /* Step 2: deviations from mu0, their sum and sum of squares. */
    float sd = 0.f, sq = 0.f;
    if (active && has_tail) {
      const float d = xtail - mu0;
      sd = d;
      sq = d * d;
    }
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) {
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) {
          const float d = scree_to_float(cache[c].v[e]) - mu0;
          sd += d;
          sq = fmaf(d, d, sq);
        }
      }
    }
    if (active) {
#pragma unroll 1
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
        const xv a = xr[v];
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) {
          const float d = scree_to_float(a.v[e]) - mu0;
          sd += d;
          sq = fmaf(d, d, sq);
        }
      }
    }
    scree_row_sum2(sd, sq, scratch2);
    const float corr = __fmul_rn(sd, inv_cols);
    const float var = fmaxf(fmaf(sq, inv_cols, -corr * corr), 0.f);
    const float r = 1.0f / sqrtf(var + eps);

    if (active) {
      if (lane == 0) {
        if (mean) mean[row] = mu0 + corr;
        if (rstd) rstd[row] = r;
      }
      /* Step 3: the output. */
      yt *yrow = y + rr * y_stride;
      yv *yr = reinterpret_cast<yv *>(yrow);
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = c * SCREE_TPR + lane;
        if (v < nvec) yr[v] = scree_ln_vec(cache[c], wr, br, v, mu0, corr, r);
      }
#pragma unroll 1
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
        const xv a = xr[v]; /* one vector load, not VEC scalar ones */
        yr[v] = scree_ln_vec(a, wr, br, v, mu0, corr, r);
      }
      if (has_tail) {
        const float z = ((xtail - mu0) - corr) * r;
        const float bb = b ? scree_to_float(b[ti]) : 0.f;
        yrow[ti] = scree_from_float<yt>(fmaf(z, scree_to_float(w[ti]), bb));
      }
    }
  }
}
