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
 * Test alone: ctest -R ragged_softmax    Bench: build/bench/bench_ops --op ragged_softmax
 */

#include "rowwise.cuh"

typedef scree_dtype_of<SCREE_X_DTYPE>::type xt;
typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_vec<yt, SCREE_VEC> yv;
typedef scree_vec<float, SCREE_VEC> fv;

/* 1024 threads leave 64 registers each: room for 16 cached elements. */
static_assert(SCREE_THREADS < 1024 || SCREE_VEC * SCREE_CACHE <= 16,
              "1024 threads need VEC * CACHE <= 16 (64 registers per thread)");

/* Columns of one CTA. */
#define SCREE_SPAN (SCREE_TPR * SCREE_VEC)
/* Bytes of one lane's access. */
#define SCREE_VBYTES (SCREE_VEC * (int)sizeof(xt))
/* Streamed token-vectors loaded before any is used: 32 bytes in flight
 * per thread (16 for 2-byte vectors), so that the streamed passes need
 * few registers beyond the cache. */
#define SCREE_CHUNK (SCREE_VBYTES >= 32 ? 1 : SCREE_VBYTES >= 16 ? 2 : SCREE_VBYTES >= 8 ? 4 : 8)

#define SCREE_NEG_INF (-__int_as_float(0x7f800000))

/* A token's VEC elements of x as loaded: raw 32-bit words (two 16-bit
 * elements each), or one 16-bit word for a single 16-bit element. Kept so,
 * 16-bit elements take half a register each; each use converts them (a
 * shift or one cvt), where a vector of scree_half would give every element
 * a register of its own. */
template <int BYTES> struct scree_rs_word { typedef unsigned type; };
template <> struct scree_rs_word<2> { typedef unsigned short type; };
typedef scree_rs_word<SCREE_VBYTES>::type wt;
#define SCREE_WORDS (SCREE_VBYTES / (int)sizeof(wt))
typedef scree_vec<wt, SCREE_WORDS> rv;
/* x's elements as raw bits, for the element-wise path. */
typedef scree_rs_word<(int)sizeof(xt)>::type xbits;

/* Element e (a constant after unrolling) of a raw vector, as fp32. */
__device__ __forceinline__ float scree_rs_elem(const rv &r, int e) {
#if SCREE_X_DTYPE == 0
  return __uint_as_float(r.v[e]);
#else
  unsigned w;
  if constexpr (SCREE_WORDS * sizeof(wt) == 2)
    w = r.v[0];
  else
    w = e & 1 ? r.v[e >> 1] >> 16 : r.v[e >> 1] & 0xffffu;
#if SCREE_X_DTYPE == 2
  return __uint_as_float(w << 16);
#else
  scree_half h;
  h.bits = (unsigned short)w;
  return scree_to_float(h);
#endif
#endif
}

/* One token's VEC columns: a vector access when all nc are inside the row,
 * else element by element (the rest zero). nc >= 1. */
__device__ __forceinline__ rv scree_rs_load(const xt *p, int nc) {
  if (nc >= SCREE_VEC) return *reinterpret_cast<const rv *>(p);
  const xbits *q = reinterpret_cast<const xbits *>(p);
  rv r;
#pragma unroll
  for (int i = 0; i < SCREE_WORDS; i++) r.v[i] = 0;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    if (e < nc) {
      if constexpr (sizeof(xbits) == sizeof(wt))
        r.v[e] = q[e];
      else
        r.v[e >> 1] |= (unsigned)q[e] << (16 * (e & 1));
    }
  return r;
}
__device__ __forceinline__ void scree_rs_store(yt *p, const yv &v, int nc) {
  if (nc >= SCREE_VEC) {
    *reinterpret_cast<yv *>(p) = v;
    return;
  }
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    if (e < nc) p[e] = v.v[e];
}

/* y = 2^(z - m) * inv per column, z = x * sl. */
__device__ __forceinline__ yv scree_rs_out(const rv &a, float sl, const float (&m)[SCREE_VEC],
                                           const float (&inv)[SCREE_VEC]) {
  yv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    o.v[e] = scree_from_float<yt>(scree_exp2(scree_rs_elem(a, e) * sl - m[e]) * inv[e]);
  return o;
}

/* The maximum safe to subtract: -inf (nothing finite seen) becomes 0, so
 * that -inf - max is -inf (a term 0) rather than NaN. */
__device__ __forceinline__ float scree_rs_safe(float m) { return m == SCREE_NEG_INF ? 0.f : m; }

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
          s[e] += scree_exp2(scree_rs_elem(cache[k], e) * sl - ms[e]);
      }
  }

  /* The streamed tokens, CHUNK at a time: per column, the chunk's max, one
   * rescale of the running sum (2^0 = 1 where the max stays), then the
   * chunk's terms. */
#pragma unroll 1
  for (int k0 = SCREE_CACHE; k0 < ntok; k0 += SCREE_CHUNK) {
    rv buf[SCREE_CHUNK];
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k0 + j < ntok) buf[j] = scree_rs_load(xg + (k0 + j) * step, nc);
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) {
      float cm = m[e];
#pragma unroll
      for (int j = 0; j < SCREE_CHUNK; j++)
        if (k0 + j < ntok) cm = fmaxf(cm, scree_rs_elem(buf[j], e) * sl);
      const float ms = scree_rs_safe(cm);
      float t = s[e] * scree_exp2(m[e] - ms);
#pragma unroll
      for (int j = 0; j < SCREE_CHUNK; j++)
        if (k0 + j < ntok) t += scree_exp2(scree_rs_elem(buf[j], e) * sl - ms);
      s[e] = t;
      m[e] = cm;
    }
  }

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
      mine.v[e] = m[e] == gm[e] ? s[e] : s[e] * scree_exp2(m[e] - scree_rs_safe(gm[e]));
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
#pragma unroll 1
  for (int k1 = ntok; k1 > SCREE_CACHE; k1 -= SCREE_CHUNK) {
    rv buf[SCREE_CHUNK];
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k1 - 1 - j >= SCREE_CACHE)
        buf[j] = scree_rs_load(xg + (k1 - 1 - j) * step, nc);
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k1 - 1 - j >= SCREE_CACHE)
        scree_rs_store(yg + (k1 - 1 - j) * ystep, scree_rs_out(buf[j], sl, m, inv), nc);
  }
}
