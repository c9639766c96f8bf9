/*
 * ragged_softmax.cuh - what the ragged-softmax kernels share
 * (ragged_softmax.cu, registers only; ragged_softmax_smem.cu, a shared-
 * memory stage; ragged_softmax_cluster.cu, stages shared by a cluster):
 * element access to a lane's VEC columns of one token, the staged copies
 * and max, the output of one token, and the streamed passes over tokens
 * that none holds on chip.
 *
 * Reads SCREE_X_DTYPE, SCREE_Y_DTYPE, SCREE_VEC (1, 2, 4 or 8 columns per
 * lane, one access) and SCREE_TPR (lanes across the columns). Uses
 * ptx.cuh (exp2, async copies) and cluster_ptx.cuh (packed max): a kernel
 * includes both first.
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

/* Whether the staged copies have the L2 fetch whole 128-byte lines (a
 * kernel defines it before including this file; else 0). */
#ifndef SCREE_RS_LINE
#define SCREE_RS_LINE 0
#endif

/* One async copy of BYTES (4, 8 or 16) into shared memory, zero-filled
 * past n bytes: with SCREE_RS_LINE, the L2 fetches the whole line. */
template <int BYTES>
__device__ __forceinline__ void scree_rs_copy(unsigned d, const void *src, int n) {
  if constexpr (SCREE_RS_LINE)
    scree_cp_async_line<BYTES>(d, src, n);
  else
    scree_cp_async<BYTES>(d, src, n);
}

/* One token's VEC columns of x (at src) into the shared-memory slot p:
 * an async copy (cp.async; past the row's nc columns zero-filled) for
 * accesses of 4 bytes or more, which the caller commits and waits for; a
 * 2-byte access (one 16-bit column per lane) has no async copy: loaded and
 * stored here. */
__device__ __forceinline__ void scree_rs_stage1(rv *p, const xt *src, int nc) {
  if constexpr (SCREE_VBYTES >= 4) {
    const unsigned d = scree_smem_u32(p);
    const int bytes = (nc < SCREE_VEC ? nc : SCREE_VEC) * (int)sizeof(xt);
    if constexpr (SCREE_VBYTES == 32) { /* 8 fp32 columns: two 16-byte copies */
      scree_rs_copy<16>(d, src, bytes < 16 ? bytes : 16);
      scree_rs_copy<16>(d + 16, src + 4, bytes > 16 ? bytes - 16 : 0);
    } else {
      scree_rs_copy<SCREE_VBYTES>(d, src, bytes);
    }
  } else {
    *p = scree_rs_load(src, nc);
  }
}

/* A thread's tokens k < ks of x (at xg + k * step) into shared memory at
 * p[k * STRIDE] (scree_rs_stage1), all issued before any is waited for. */
template <int STRIDE>
__device__ __forceinline__ void scree_rs_stage(rv *p, const xt *xg, long long step, int ks,
                                               int nc) {
#pragma unroll 4
  for (int k = 0; k < ks; k++) scree_rs_stage1(p + k * STRIDE, xg + k * step, nc);
}

/* The largest z = x * sl, per column, of a thread's staged tokens k < ks
 * (at p[k * STRIDE] in shared memory), into mx (-inf, or the max of the
 * tokens streamed). 16-bit x: two elements a step as loaded (max.f16x2 /
 * max.bf16x2, or the min for sl < 0), converted once per column rather
 * than once per element. A NaN is passed over here; the sum, which takes
 * every element, carries it. Uses cluster_ptx.cuh. */
#if SCREE_X_DTYPE != 0 && SCREE_VEC >= 2
#define SCREE_PACKED 1
#if SCREE_X_DTYPE == 2
#define SCREE_PK_INF 0x7f807f80u
#else
#define SCREE_PK_INF 0x7c007c00u
#endif
#else
#define SCREE_PACKED 0
#endif
template <int STRIDE>
__device__ __forceinline__ void scree_rs_staged_max(const rv *p, int ks, float sl,
                                                    float (&mx)[SCREE_VEC]) {
#if SCREE_PACKED
  if (ks <= 0) return;
  /* The largest z is sl times the largest x, or the smallest for sl < 0;
   * from -inf (or +inf). */
  const bool neg = sl < 0.f;
  rv acc;
#pragma unroll
  for (int w = 0; w < SCREE_WORDS; w++) acc.v[w] = neg ? SCREE_PK_INF : SCREE_PK_INF | 0x80008000u;
  if (!neg) {
#pragma unroll 4
    for (int k = 0; k < ks; k++) {
      const rv r = p[k * STRIDE];
#pragma unroll
      for (int w = 0; w < SCREE_WORDS; w++)
        acc.v[w] = scree_pk16_max<SCREE_X_DTYPE>(acc.v[w], r.v[w]);
    }
  } else {
#pragma unroll 4
    for (int k = 0; k < ks; k++) {
      const rv r = p[k * STRIDE];
#pragma unroll
      for (int w = 0; w < SCREE_WORDS; w++)
        acc.v[w] = scree_pk16_min<SCREE_X_DTYPE>(acc.v[w], r.v[w]);
    }
  }
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) mx[e] = fmaxf(mx[e], scree_rs_elem(acc, e) * sl);
#else
#pragma unroll 4
  for (int k = 0; k < ks; k++) {
    const rv r = p[k * STRIDE];
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) mx[e] = fmaxf(mx[e], scree_rs_elem(r, e) * sl);
  }
#endif
}

/* VEC floats as x's elements, rounded to nearest: a stage slot's value. */
__device__ __forceinline__ rv scree_rs_pack(const float (&f)[SCREE_VEC]) {
  rv r;
#if SCREE_X_DTYPE == 0
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) r.v[e] = __float_as_uint(f[e]);
#else
  if constexpr (SCREE_WORDS * sizeof(wt) == 2) {
    r.v[0] = scree_from_float<xt>(f[0]).bits;
  } else {
#pragma unroll
    for (int w = 0; w < SCREE_WORDS; w++)
      r.v[w] = scree_pack2<SCREE_X_DTYPE>(f[2 * w], f[2 * w + 1]);
  }
#endif
  return r;
}

/* y = a * inv per column (a an exponential as staged, in x's dtype). */
__device__ __forceinline__ yv scree_rs_scale(const rv &a, const float (&inv)[SCREE_VEC]) {
  yv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) o.v[e] = scree_from_float<yt>(scree_rs_elem(a, e) * inv[e]);
  return o;
}

/* Across the token groups of a CTA, per column: the max (MAX) or the sum
 * of v; every thread gets its lane's result. First the groups of a warp
 * (lanes TPR apart), then the WARPS warps through red (WARPS rows of TPR
 * x VEC floats of shared memory): each warp's first group leaves its values,
 * a barrier, and every thread reads those of its lane (reads the groups of
 * a warp share, one wavefront each). SYNC_FIRST: a barrier before the
 * writes too, where red may still be read from the last reduction. */
template <bool MAX, bool SYNC_FIRST, int WARPS>
__device__ __forceinline__ void scree_rs_reduce(float (&v)[SCREE_VEC],
                                                float (*red)[SCREE_TPR][SCREE_VEC]) {
#pragma unroll
  for (int o = SCREE_TPR; o < 32; o <<= 1)
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) {
      const float w = __shfl_xor_sync(0xffffffffu, v[e], o);
      v[e] = MAX ? fmaxf(v[e], w) : v[e] + w;
    }
  if constexpr (WARPS > 1) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % SCREE_TPR;
    if (SYNC_FIRST) __syncthreads();
    if (threadIdx.x % 32 < SCREE_TPR)
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) red[warp][lane][e] = v[e];
    __syncthreads();
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) v[e] = MAX ? SCREE_NEG_INF : 0.f;
#pragma unroll 4
    for (int w = 0; w < WARPS; w++)
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++)
        v[e] = MAX ? fmaxf(v[e], red[w][lane][e]) : v[e] + red[w][lane][e];
  }
}

/* The maximum safe to subtract: -inf (nothing finite seen) becomes 0, so
 * that -inf - max is -inf (a term 0) rather than NaN. */
__device__ __forceinline__ float scree_rs_safe(float m) { return m == SCREE_NEG_INF ? 0.f : m; }

/* A thread's sum of 2^(z - max) per column, with mx the sequence's max:
 * ms = mx made safe; the streamed state's sum s taken from its own max m
 * to ms (nothing streamed: m is -inf and s 0, left so), then the terms of
 * the staged tokens k < ks (at p[k * STRIDE]) added. WRITE_E: each staged
 * slot is left holding its terms, in x's dtype (e1). */
template <int STRIDE, bool WRITE_E>
__device__ __forceinline__ void scree_rs_staged_sum(rv *p, int ks, float sl,
                                                    const float (&mx)[SCREE_VEC],
                                                    const float (&m)[SCREE_VEC],
                                                    float (&s)[SCREE_VEC],
                                                    float (&ms)[SCREE_VEC]) {
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) {
    ms[e] = scree_rs_safe(mx[e]);
    if (m[e] != SCREE_NEG_INF) s[e] *= scree_ex2(m[e] - ms[e]);
  }
#pragma unroll 4
  for (int k = 0; k < ks; k++) {
    const rv r = p[k * STRIDE];
    float ev[SCREE_VEC];
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) {
      ev[e] = scree_ex2(scree_rs_elem(r, e) * sl - ms[e]);
      s[e] += ev[e];
    }
    if constexpr (WRITE_E) p[k * STRIDE] = scree_rs_pack(ev);
  }
}

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
