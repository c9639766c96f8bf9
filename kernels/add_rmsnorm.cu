/*
 * add_rmsnorm.cu - residual add fused with RMSNorm over packed rows.
 *
 *   h[r, :] = x[r, :] + residual[r, :]                rounded to x's dtype
 *   y[r, :] = h[r, :] / sqrt(mean(h[r, :]^2) + eps) * w      fp32 accumulation
 *
 * The norm is taken of h as rounded and written, so the result equals the
 * unfused add then RMSNorm. Each row is handled by a group of SCREE_TPR
 * threads; a CTA holds SCREE_ROWS such groups (rowwise.cuh). A thread loads
 * SCREE_VEC consecutive elements of x and of residual per access, forms h,
 * writes it at once and keeps up to SCREE_CACHE vectors of h in registers,
 * so rows of up to TPR * VEC * CACHE elements move x, residual, h and y
 * through memory exactly once. Longer rows read the streamed part of h back
 * for the output. Columns past the last whole vector (cols % VEC < VEC <=
 * TPR of them) are taken one per lane, their h kept in a register.
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   the launch shape
 *     (rowwise.cuh)
 *   SCREE_X_DTYPE (x, residual, h), SCREE_W_DTYPE, SCREE_Y_DTYPE   dtype
 *     codes (common.cuh)
 *
 * rstd (may be null): each row's r = 1 / sqrt(mean(h^2) + eps), written by
 * lane 0 of the row's group, for the backward (kernels/norm_backward.cu).
 *
 * The host guarantees: every pointer aligned to VEC elements of its dtype;
 * row strides multiples of VEC; h either equal to x (same stride) or
 * disjoint from it, and the same for residual; h disjoint from w; y
 * disjoint from every other buffer.
 *
 * Test alone: ctest -R add_rmsnorm    Bench: build/bench/bench_ops --op add_rmsnorm
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

/* h = x + residual, rounded to x's dtype; adds its squares (as rounded)
 * to ss. */
__device__ __forceinline__ xv scree_add_vec(const xv a, const xv b, float &ss) {
  xv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) {
    o.v[e] = scree_from_float<xt>(scree_to_float(a.v[e]) + scree_to_float(b.v[e]));
    const float f = scree_to_float(o.v[e]);
    ss = fmaf(f, f, ss);
  }
  return o;
}

__device__ __forceinline__ yv scree_norm_vec(const xv a, const wv g, float r) {
  yv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    o.v[e] = scree_from_float<yt>(scree_to_float(a.v[e]) * r * scree_to_float(g.v[e]));
  return o;
}

/* x, residual and h carry no __restrict__: h may be x or residual (in
 * place). Every element of h is read and written by one thread, which
 * loads x and residual before it stores h. */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_add_rmsnorm(const xt *x, const xt *residual, xt *h, const wt *__restrict__ w,
                  yt *__restrict__ y, long long rows, int cols, long long x_stride,
                  long long r_stride, long long h_stride, long long y_stride, float eps,
                  float *__restrict__ rstd) {
  __shared__ scree_row_scratch scratch;
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = cols / SCREE_VEC;
  const float inv_cols = 1.0f / (float)cols;
  const wv *wr = reinterpret_cast<const wv *>(w);
  /* The lane's element past the last whole vector, if it has one. */
  const int ti = nvec * SCREE_VEC + lane;
  const bool has_tail = ti < cols;

  for (long long base = (long long)blockIdx.x * SCREE_ROWS; base < rows;
       base += (long long)gridDim.x * SCREE_ROWS) {
    const long long row = base + group;
    const bool active = row < rows;
    const long long rr = active ? row : 0;
    const xt *xrow = x + rr * x_stride;
    const xt *rrow = residual + rr * r_stride;
    xt *hrow = h + rr * h_stride;
    const xv *xr = reinterpret_cast<const xv *>(xrow);
    const xv *rsr = reinterpret_cast<const xv *>(rrow);
    xv *hr = reinterpret_cast<xv *>(hrow);

    /* h of the cached part, kept in registers; every load of it comes
     * before any store of h (the stores may alias the loads, so the
     * compiler could not move a load above one). */
    xv cache[SCREE_CACHE];
    float htail = 0.f, ss = 0.f;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) {
        const xv a = xr[v], b = rsr[v];
        cache[c] = scree_add_vec(a, b, ss);
      }
    }
    if (active && has_tail) {
      const xt t = scree_from_float<xt>(scree_to_float(xrow[ti]) + scree_to_float(rrow[ti]));
      htail = scree_to_float(t);
      ss = fmaf(htail, htail, ss);
      hrow[ti] = t;
    }
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) hr[v] = cache[c];
    }
    /* The streamed part (rows longer than the cache). Not unrolled: the
     * cached h stays live across it, and unrolled copies made ptxas spill
     * at 1024 threads. */
    if (active) {
#pragma unroll 1
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
        const xv a = xr[v], b = rsr[v]; /* vector loads, not VEC scalar ones */
        hr[v] = scree_add_vec(a, b, ss);
      }
    }

    ss = scree_row_sum(ss, scratch);
    const float r = 1.0f / sqrtf(ss * inv_cols + eps);
    if (rstd && active && lane == 0) rstd[row] = r;

    if (active) {
      yt *yrow = y + rr * y_stride;
      yv *yr = reinterpret_cast<yv *>(yrow);
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = c * SCREE_TPR + lane;
        if (v < nvec) yr[v] = scree_norm_vec(cache[c], wr[v], r);
      }
      /* This thread's own stores of h, read back. */
#pragma unroll 1
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
        const xv t = hr[v];
        yr[v] = scree_norm_vec(t, wr[v], r);
      }
      if (has_tail) yrow[ti] = scree_from_float<yt>(htail * r * scree_to_float(w[ti]));
    }
  }
}
