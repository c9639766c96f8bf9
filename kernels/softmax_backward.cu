/*
 * softmax_backward.cu - the backward of softmax along the last dimension.
 *
 *   dx[r, :] = s * y[r, :] * (dy[r, :] - d),  d = sum_c y[r, c] dy[r, c]
 *
 * y is the forward's output, dy the gradient of y, s the forward's scale.
 * fp32 math; d is summed per thread in a fixed order, then over the row's
 * group (scree_row_sum): deterministic.
 *
 * Each row is handled by a group of SCREE_TPR threads; a CTA holds
 * SCREE_ROWS such groups (rowwise.cuh). A thread keeps its first
 * SCREE_CACHE vectors of y and of dy in registers (the tail, cols % VEC
 * elements, one per lane 0..tail-1, too).
 *   - Rows of at most TPR * VEC * CACHE elements (plus the tail) are read
 *     once: the dot product from the registers, then dx from them.
 *   - Longer rows take the streaming entry: the part past the register
 *     cache is loaded CACHE vectors of each per thread at a time (all
 *     issued before any is used) and folded into the dot product; after the
 *     row sum it is read a second time to write dx (from L2 where the
 *     row's rest fits there).
 * Two entries, as the forward: scree_softmax_backward (rows in registers)
 * and scree_softmax_backward_stream; the host picks by cols / VEC <= TPR *
 * CACHE.
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   the launch shape
 *     (rowwise.cuh)
 *   SCREE_Y_DTYPE, SCREE_DY_DTYPE   dtype codes of y and of dy and dx
 *     (common.cuh)
 *
 * The host guarantees: y, dy, dx aligned to VEC elements of their dtype;
 * row strides multiples of VEC; 1 <= cols <= 262144; dx either equal to dy
 * (same stride: every element is read and then written by the same thread)
 * or disjoint from y and dy; s finite.
 *
 * Test alone: ctest -R softmax_backward    Bench: build/bench/bench_ops --op softmax_backward
 */

#include "rowwise.cuh"

static_assert(SCREE_Y_DTYPE >= 0 && SCREE_Y_DTYPE <= 2, "y dtype must be fp32, fp16 or bf16");
static_assert(SCREE_DY_DTYPE >= 0 && SCREE_DY_DTYPE <= 2, "dy dtype must be fp32, fp16 or bf16");

typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_dtype_of<SCREE_DY_DTYPE>::type gt;
typedef scree_vec<yt, SCREE_VEC> yv;
typedef scree_vec<gt, SCREE_VEC> gv;

/* Vectors of a row one pass of the group covers. */
#define SCREE_SPAN (SCREE_TPR * SCREE_CACHE)

/* sum of y * dy over a vector, added to acc. */
__device__ __forceinline__ float scree_smb_dot(const yv &a, const gv &b, float acc) {
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) acc = fmaf(scree_to_float(a.v[e]), scree_to_float(b.v[e]), acc);
  return acc;
}

/* s * y * (dy - d) over a vector. */
__device__ __forceinline__ gv scree_smb_out(const yv &a, const gv &b, float s, float d) {
  gv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    o.v[e] = scree_from_float<gt>(s * scree_to_float(a.v[e]) * (scree_to_float(b.v[e]) - d));
  return o;
}

template <bool STREAMS>
__device__ __forceinline__ void scree_softmax_backward_rows(const yt *y, const gt *dy, gt *dx,
                                                            long long rows, int cols,
                                                            long long y_stride,
                                                            long long dy_stride,
                                                            long long dx_stride, float s) {
  __shared__ scree_row_scratch scratch;
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = cols / SCREE_VEC;
  const int tail = nvec * SCREE_VEC + lane; /* this lane's tail element, if below cols */

  for (long long base = (long long)blockIdx.x * SCREE_ROWS; base < rows;
       base += (long long)gridDim.x * SCREE_ROWS) {
    const long long row = base + group;
    const bool active = row < rows;
    const yt *yrow = y + (active ? row : 0) * y_stride;
    const gt *grow = dy + (active ? row : 0) * dy_stride;
    gt *xrow = dx + (active ? row : 0) * dx_stride;
    const yv *yr = reinterpret_cast<const yv *>(yrow);
    const gv *gr = reinterpret_cast<const gv *>(grow);
    gv *xr = reinterpret_cast<gv *>(xrow);
    const bool has_tail = active && tail < cols;

    yv cy[SCREE_CACHE];
    gv cg[SCREE_CACHE];
    float ty = 0.f, tg = 0.f;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) {
        cy[c] = yr[v];
        cg[c] = gr[v];
      }
    }
    if (has_tail) {
      ty = scree_to_float(yrow[tail]);
      tg = scree_to_float(grow[tail]);
    }
    float acc = ty * tg;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++)
      if (active && c * SCREE_TPR + lane < nvec) acc = scree_smb_dot(cy[c], cg[c], acc);
    if (STREAMS && active) {
      /* Batches of CACHE vectors of each per thread: rem is the vectors
       * left in the row from the batch's first. */
      const yv *p = yr + SCREE_SPAN + lane;
      const gv *q = gr + SCREE_SPAN + lane;
#pragma unroll 1
      for (int rem = nvec - SCREE_SPAN - lane; rem > 0;
           rem -= SCREE_SPAN, p += SCREE_SPAN, q += SCREE_SPAN) {
        yv by[SCREE_CACHE];
        gv bg[SCREE_CACHE];
#pragma unroll
        for (int c = 0; c < SCREE_CACHE; c++)
          if (c * SCREE_TPR < rem) {
            by[c] = p[c * SCREE_TPR];
            bg[c] = q[c * SCREE_TPR];
          }
#pragma unroll
        for (int c = 0; c < SCREE_CACHE; c++)
          if (c * SCREE_TPR < rem) acc = scree_smb_dot(by[c], bg[c], acc);
      }
    }
    const float d = scree_row_sum(acc, scratch);

    if (active) {
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = c * SCREE_TPR + lane;
        if (v < nvec) xr[v] = scree_smb_out(cy[c], cg[c], s, d);
      }
      if (has_tail) xrow[tail] = scree_from_float<gt>(s * ty * (tg - d));
      if (STREAMS) {
        /* The second read: a batch of loads, then its stores (in place over
         * dy, the loads of a batch precede every store to it). */
        const yv *p = yr + SCREE_SPAN + lane;
        const gv *q = gr + SCREE_SPAN + lane;
        gv *o = xr + SCREE_SPAN + lane;
#pragma unroll 1
        for (int rem = nvec - SCREE_SPAN - lane; rem > 0;
             rem -= SCREE_SPAN, p += SCREE_SPAN, q += SCREE_SPAN, o += SCREE_SPAN) {
          yv by[SCREE_CACHE];
          gv bg[SCREE_CACHE];
#pragma unroll
          for (int c = 0; c < SCREE_CACHE; c++)
            if (c * SCREE_TPR < rem) {
              by[c] = p[c * SCREE_TPR];
              bg[c] = q[c * SCREE_TPR];
            }
#pragma unroll
          for (int c = 0; c < SCREE_CACHE; c++)
            if (c * SCREE_TPR < rem) o[c * SCREE_TPR] = scree_smb_out(by[c], bg[c], s, d);
        }
      }
    }
  }
}

/* dy and dx carry no __restrict__: they may be the same buffer (in place).
 * s is the forward's scale (1 when the call gives 0). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_softmax_backward(const yt *y, const gt *dy, gt *dx, long long rows, int cols,
                       long long y_stride, long long dy_stride, long long dx_stride, float s) {
  scree_softmax_backward_rows<false>(y, dy, dx, rows, cols, y_stride, dy_stride, dx_stride, s);
}

extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_softmax_backward_stream(const yt *y, const gt *dy, gt *dx, long long rows, int cols,
                              long long y_stride, long long dy_stride, long long dx_stride,
                              float s) {
  scree_softmax_backward_rows<true>(y, dy, dx, rows, cols, y_stride, dy_stride, dx_stride, s);
}
