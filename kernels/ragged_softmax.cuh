/*
 * ragged_softmax.cuh - what the two ragged-softmax kernels share
 * (ragged_softmax.cu, registers only; ragged_softmax_smem.cu, a shared-
 * memory stage): element access to a lane's VEC columns of one token, the
 * output of one token, and the streamed passes over tokens that neither
 * holds on chip.
 *
 * Reads SCREE_X_DTYPE, SCREE_Y_DTYPE, SCREE_VEC (1, 2, 4 or 8 columns per
 * lane, one access) and SCREE_TPR (lanes across the columns). Uses
 * scree_ex2 from ptx.cuh: a kernel includes ptx.cuh first.
 *
 * Softmax is taken in the log2 domain: z = x * sl with sl = scale * log2(e),
 * y = 2^(z - M) / sum 2^(z - M) per column. A (max m, sum s) pair per
 * column is the online state of a set of tokens; an empty set is {-inf, 0}.
 */
#ifndef SCREE_RAGGED_SOFTMAX_CUH
#define SCREE_RAGGED_SOFTMAX_CUH

typedef scree_dtype_of<SCREE_X_DTYPE>::type xt;
typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_vec<yt, SCREE_VEC> yv;
typedef scree_vec<float, SCREE_VEC> fv;

/* Columns of one CTA. */
#define SCREE_SPAN (SCREE_TPR * SCREE_VEC)
/* Bytes of one lane's access. */
#define SCREE_VBYTES (SCREE_VEC * (int)sizeof(xt))
/* Streamed token-vectors loaded before any is used: 32 bytes in flight
 * per thread (16 for 2-byte vectors), so that the streamed passes need
 * few registers. */
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
    o.v[e] = scree_from_float<yt>(scree_ex2(scree_rs_elem(a, e) * sl - m[e]) * inv[e]);
  return o;
}

/* The maximum safe to subtract: -inf (nothing finite seen) becomes 0, so
 * that -inf - max is -inf (a term 0) rather than NaN. */
__device__ __forceinline__ float scree_rs_safe(float m) { return m == SCREE_NEG_INF ? 0.f : m; }

/* Tokens k in [k0, ntok) of the thread (at xg + k * step), CHUNK at a time,
 * into the state (m, s): per column, the chunk's max, one rescale of the
 * running sum (2^0 = 1 where the max stays), then the chunk's terms. */
__device__ __forceinline__ void scree_rs_stream(const xt *xg, long long step, int k0, int ntok,
                                                int nc, float sl, float (&m)[SCREE_VEC],
                                                float (&s)[SCREE_VEC]) {
#pragma unroll 1
  for (; k0 < ntok; k0 += SCREE_CHUNK) {
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
      float t = s[e] * scree_ex2(m[e] - ms);
#pragma unroll
      for (int j = 0; j < SCREE_CHUNK; j++)
        if (k0 + j < ntok) t += scree_ex2(scree_rs_elem(buf[j], e) * sl - ms);
      s[e] = t;
      m[e] = cm;
    }
  }
}

/* The outputs of tokens k in [k0, ntok) read again, last first (those read
 * last by scree_rs_stream, the likeliest still in L2, come first). m is
 * already made safe. */
__device__ __forceinline__ void scree_rs_stream_out(const xt *xg, yt *yg, long long step,
                                                    long long ystep, int k0, int ntok, int nc,
                                                    float sl, const float (&m)[SCREE_VEC],
                                                    const float (&inv)[SCREE_VEC]) {
#pragma unroll 1
  for (int k1 = ntok; k1 > k0; k1 -= SCREE_CHUNK) {
    rv buf[SCREE_CHUNK];
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k1 - 1 - j >= k0) buf[j] = scree_rs_load(xg + (k1 - 1 - j) * step, nc);
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k1 - 1 - j >= k0)
        scree_rs_store(yg + (k1 - 1 - j) * ystep, scree_rs_out(buf[j], sl, m, inv), nc);
  }
}

#endif
