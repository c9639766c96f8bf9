/*
 * ragged_softmax.cu - softmax along the tokens of each sequence of a packed
 * batch, independently for every column, never mixing sequences:
 *
 *   y[t, c] = 2^(z[t, c] - M[c]) / sum_{u in seq(t)} 2^(z[u, c] - M[c])
 *   z = x * scale * log2(e)  (fp32),  M[c] = max_{u in seq(t)} z[u, c]
 *
 * with seq(t) the tokens [cu_seqlens[b], cu_seqlens[b + 1]) holding t.
 *
 * Thread mapping: one CTA per (sequence b = blockIdx.x, block of SPAN =
 * TPR * VEC columns = blockIdx.y). In the CTA, lane l = threadIdx.x % TPR
 * owns the VEC contiguous columns blockIdx.y * SPAN + l * VEC + [0, VEC)
 * (one vector access per token: the TPR lanes of a group read one
 * contiguous stretch of a token row), and group g = threadIdx.x / TPR owns
 * the tokens start + g + ROWS * k, k = 0, 1, ... of the sequence. The
 * launch-shape fields keep rowwise.cuh's names with these meanings:
 *   SCREE_TPR    lanes across the columns: 8, 16, ..., 1024
 *   SCREE_ROWS   token groups: 1, 2, 4, 8, 16 (TPR * ROWS threads, 32..1024)
 *   SCREE_VEC    columns per lane, one access: 1, 2, 4 or 8
 *   SCREE_CACHE  token-vectors per thread kept in registers: 1..16
 *   SCREE_X_DTYPE, SCREE_Y_DTYPE   dtype codes (common.cuh)
 * (rowwise.cuh's static_asserts check the launch shape, mirroring the
 * host's scree__rowwise_check; VEC * CACHE <= 64 bounds the registers, and
 * at 1024 threads VEC * CACHE <= 16, as the host's check says.)
 *
 * Passes. (1) Each thread loads its first CACHE tokens (k < CACHE) into
 * registers (as raw 32-bit words: two 16-bit elements per register), takes
 * their per-column max, then their sum of 2^(z - max); tokens past them
 * (sequences longer than ROWS * CACHE) are streamed CHUNK token-vectors at
 * a time (32 bytes per thread in flight) with an online update per column:
 * the chunk's max, one rescale of the running sum, then the chunk's terms.
 * (2) The groups' (max, sum) of each column are combined through shared
 * memory (ROWS * SPAN floats, at most 32 KiB): the max first, then the sums
 * rescaled to it (3 CTA barriers; none when ROWS is 1). (3) Outputs: the
 * cached tokens from registers; the streamed ones are read again, in
 * reverse order so that those read last in (1), the likeliest still in L2,
 * come first. A sequence of up to ROWS * CACHE tokens is thus read once and
 * written once; a longer one reads its streamed part twice: up to 1.5x the
 * ideal traffic for equal x and y dtypes (less where L2 still holds it).
 *
 * Columns: a lane whose VEC columns run past cols (cols % VEC != 0) moves
 * the ones inside element by element; lanes past cols idle (they still
 * take part in the barriers). Every column is reduced on its own, so the
 * elements of a partial vector past cols never mix with valid ones.
 *
 * Special values: x = -inf gives 0 wherever its column has a finite value
 * in the sequence; a column that is -inf for the whole sequence gives NaN
 * (as 0/0); a NaN in x makes its column NaN for the whole sequence.
 *
 * The host guarantees: x and y aligned to VEC elements of their dtype, row
 * strides multiples of VEC; y either equal to x (same stride and element
 * size) or disjoint from it; gridDim.x = batch, gridDim.y = ceil(cols /
 * SPAN); cu_seqlens as documented in scree.h (it is not checked here: a
 * negative length writes nothing, a sequence past the buffers is the
 * caller's error). Offsets are 64-bit (token * stride may pass 2^31).
 *
 * In place (y == x): every element is read and written by one thread only;
 * the cached tokens are written after the barriers, so after every read of
 * the CTA, and each streamed token is read before it is written.
 *
 * The shared-memory implementation (ragged_softmax_smem.cu) reads longer
 * sequences once; the helpers both use are in ragged_softmax.cuh.
 *
 * Test alone: ctest -R ragged_softmax    Bench: build/bench/bench_ops --op ragged_softmax
 */

#include "rowwise.cuh"
#include "ptx.cuh"
#include "cluster_ptx.cuh"
#include "ragged_softmax.cuh"

/* 1024 threads leave 64 registers each: room for 16 cached elements. */
static_assert(SCREE_THREADS < 1024 || SCREE_VEC * SCREE_CACHE <= 16,
              "1024 threads need VEC * CACHE <= 16 (64 registers per thread)");

/* x and y carry no __restrict__: they may be the same buffer (in place). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_ragged_softmax(const xt *x, yt *y, const int *__restrict__ cu_seqlens, int cols,
                     long long x_stride, long long y_stride, float scale_log2) {
  const int start = cu_seqlens[blockIdx.x];
  const int len = cu_seqlens[blockIdx.x + 1] - start;
  if (len <= 0) return; /* the whole CTA: no barrier is reached */

  const int lane = scree_row_lane(), group = scree_row_group();
  const int c0 = (int)blockIdx.y * SCREE_SPAN + lane * SCREE_VEC;
  const int nc = cols - c0; /* columns of this lane inside the row (<= 0: idle) */
  const bool active = nc > 0;
  /* Tokens of this thread: start + group + ROWS * k for k < ntok. */
  const int ntok = active && group < len ? (len - group - 1) / SCREE_ROWS + 1 : 0;
  /* This thread's first token, and the step to its next one (64-bit). */
  const xt *xg = x + ((long long)start + group) * x_stride + (active ? c0 : 0);
  yt *yg = y + ((long long)start + group) * y_stride + (active ? c0 : 0);
  const long long step = SCREE_ROWS * x_stride, ystep = SCREE_ROWS * y_stride;
  const float sl = scale_log2;

  /* (1) The cached tokens: loads first, then the max, then the sum. */
  rv cache[SCREE_CACHE];
#pragma unroll
  for (int k = 0; k < SCREE_CACHE; k++)
    if (k < ntok) cache[k] = scree_rs_load(xg + k * step, nc);
  float m[SCREE_VEC], s[SCREE_VEC];
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) m[e] = SCREE_NEG_INF, s[e] = 0.f;
#pragma unroll
  for (int k = 0; k < SCREE_CACHE; k++)
    if (k < ntok) {
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++)
        m[e] = fmaxf(m[e], scree_rs_elem(cache[k], e) * sl);
    }
  {
    float ms[SCREE_VEC];
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) ms[e] = scree_rs_safe(m[e]);
#pragma unroll
    for (int k = 0; k < SCREE_CACHE; k++)
      if (k < ntok) {
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++)
          s[e] += scree_ex2(scree_rs_elem(cache[k], e) * sl - ms[e]);
      }
  }

  /* The streamed tokens. */
  scree_rs_stream(xg, step, SCREE_CACHE, ntok, nc, sl, m, s);

  /* (2) Across the token groups, per column: the max, then the sums
   * rescaled to it. Idle threads hold {-inf, 0}, which changes neither. */
#if SCREE_ROWS > 1
  {
    __shared__ fv red[SCREE_ROWS][SCREE_TPR];
    fv mine;
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) mine.v[e] = m[e];
    red[group][lane] = mine;
    __syncthreads();
    float gm[SCREE_VEC];
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) gm[e] = SCREE_NEG_INF;
#pragma unroll 2 /* fully unrolled, every group's loads would be live at once */
    for (int g = 0; g < SCREE_ROWS; g++) {
      const fv o = red[g][lane];
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) gm[e] = fmaxf(gm[e], o.v[e]);
    }
    __syncthreads(); /* every read of the maxima done before the sums overwrite them */
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++)
      mine.v[e] = m[e] == gm[e] ? s[e] : s[e] * scree_ex2(m[e] - scree_rs_safe(gm[e]));
    red[group][lane] = mine;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) s[e] = 0.f, m[e] = gm[e];
#pragma unroll 2 /* fully unrolled, every group's loads would be live at once */
    for (int g = 0; g < SCREE_ROWS; g++) {
      const fv o = red[g][lane];
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) s[e] += o.v[e];
    }
  }
#endif
  if (!active) return; /* no barrier follows */

  /* (3) The outputs: 2^(z - max) / sum. */
  float inv[SCREE_VEC];
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) {
    inv[e] = 1.f / s[e];
    m[e] = scree_rs_safe(m[e]);
  }
#pragma unroll
  for (int k = 0; k < SCREE_CACHE; k++)
    if (k < ntok) {
      scree_rs_store(yg + k * ystep, scree_rs_out(cache[k], sl, m, inv), nc);
    }
  /* The streamed tokens again, last first. */
  scree_rs_stream_out(xg, yg, step, ystep, SCREE_CACHE, ntok, nc, sl, m, inv);
}
