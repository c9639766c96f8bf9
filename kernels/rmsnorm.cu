/*
 * rmsnorm.cu - RMSNorm over packed rows.
 *
 *   y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w      fp32 accumulation
 *
 * Each row is handled by a group of SCREE_TPR threads; a CTA holds
 * SCREE_ROWS such groups. A thread loads SCREE_VEC consecutive elements per
 * access and keeps up to SCREE_CACHE of those vectors in registers, so rows
 * of up to TPR * VEC * CACHE elements are read from memory exactly once;
 * longer rows re-read the rest in the second pass. Columns past the last
 * full vector (cols % VEC) are handled one element at a time.
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   the launch shape
 *     (rowwise.cuh)
 *   SCREE_X_DTYPE, SCREE_W_DTYPE, SCREE_Y_DTYPE   dtype codes (common.cuh)
 *
 * The host guarantees: x, w, y aligned to VEC elements of their dtype; row
 * strides multiples of VEC; y either equal to x (same stride and element
 * size) or disjoint from it.
 *
 * rstd (may be null): each row's r = 1 / sqrt(mean(x^2) + eps), written by
 * lane 0 of the row's group, for the backward (kernels/norm_backward.cu).
 *
 * Test alone: ctest -R rmsnorm    Bench: build/bench/bench_rowwise
 */

#include "rowwise.cuh"

typedef scree_dtype_of<SCREE_X_DTYPE>::type xt;
typedef scree_dtype_of<SCREE_W_DTYPE>::type wt;
typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_vec<xt, SCREE_VEC> xv;
typedef scree_vec<wt, SCREE_VEC> wv;
typedef scree_vec<yt, SCREE_VEC> yv;

__device__ __forceinline__ yv scree_norm_vec(const xv &a, const wv &b, float r) {
  yv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    o.v[e] = scree_from_float<yt>(scree_to_float(a.v[e]) * r *
                                  scree_to_float(b.v[e]));
  return o;
}

/* x and y carry no __restrict__: they may be the same buffer (in place). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_rmsnorm(const xt *x, const wt *__restrict__ w, yt *y, long long rows,
              int cols, long long x_stride, long long y_stride, float eps,
              float *__restrict__ rstd) {
  __shared__ scree_row_scratch scratch;
  const int lane = threadIdx.x % SCREE_TPR;
  const int group = threadIdx.x / SCREE_TPR;
  const int nvec = cols / SCREE_VEC;
  const float inv_cols = 1.0f / (float)cols;
  const wv *wr = reinterpret_cast<const wv *>(w);

  for (long long base = (long long)blockIdx.x * SCREE_ROWS; base < rows;
       base += (long long)gridDim.x * SCREE_ROWS) {
    const long long row = base + group;
    const bool active = row < rows;
    const xt *xrow = x + (active ? row : 0) * x_stride;
    yt *yrow = y + (active ? row : 0) * y_stride;
    const xv *xr = reinterpret_cast<const xv *>(xrow);
    yv *yr = reinterpret_cast<yv *>(yrow);

    xv cache[SCREE_CACHE];
    float ss = 0.f;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) cache[c] = xr[v];
    }
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) {
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) {
          const float f = scree_to_float(cache[c].v[e]);
          ss += f * f;
        }
      }
    }
    if (active) {
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
        const xv a = xr[v];
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) {
          const float f = scree_to_float(a.v[e]);
          ss += f * f;
        }
      }
      for (int i = nvec * SCREE_VEC + lane; i < cols; i += SCREE_TPR) {
        const float f = scree_to_float(xrow[i]);
        ss += f * f;
      }
    }

    ss = scree_row_sum(ss, scratch);
    const float r = 1.0f / sqrtf(ss * inv_cols + eps);
    if (rstd && active && lane == 0) rstd[row] = r;

    if (active) {
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = c * SCREE_TPR + lane;
        if (v < nvec) yr[v] = scree_norm_vec(cache[c], wr[v], r);
      }
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR)
        yr[v] = scree_norm_vec(xr[v], wr[v], r);
      for (int i = nvec * SCREE_VEC + lane; i < cols; i += SCREE_TPR)
        yrow[i] = scree_from_float<yt>(scree_to_float(xrow[i]) * r *
                                       scree_to_float(w[i]));
    }
  }
}
