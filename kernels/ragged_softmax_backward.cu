/*
 * ragged_softmax_backward.cu - the backward of the ragged softmax (softmax
 * along the tokens of each sequence of a packed batch, per column;
 * ragged_softmax.cu):
 *
 *   dx[t, c] = s * y[t, c] * (dy[t, c] - d[c]),  d[c] = sum_{u in seq(t)} y[u, c] dy[u, c]
 *
 * y is the forward's output, dy the gradient of y, s the forward's scale.
 * fp32 math; d is summed per thread in token order, then across the CTA's
 * token groups in a fixed order (shuffles, then the warps in order through
 * shared memory): deterministic.
 *
 * Thread mapping (as ragged_softmax_smem.cu): one CTA per (block j of
 * SPAN = TPR * VEC columns, sequence b), or SPLIT CTAs of a thread block
 * cluster, j = blockIdx.x / SPLIT and b = blockIdx.y + gridDim.y *
 * blockIdx.z (column blocks fastest: the CTAs launched together read whole
 * token rows). Lane l = threadIdx.x % TPR owns the VEC contiguous columns
 * j * SPAN + l * VEC + [0, VEC); group g = threadIdx.x / TPR of the
 * cluster's CTA r = blockIdx.x % SPLIT owns the tokens
 * start + r * ROWS + g + SPLIT * ROWS * k, k = 0, 1, ...
 *
 * Passes. (1) Each thread issues the async copies (cp.async, zero-filled
 * past the row's end) of its first `stage / ROWS` tokens of y and of dy into
 * shared memory, all before any is waited for: the CTA's whole strip of
 * the sequence is in flight at once and no registers are held for it.
 * (2) While they land, tokens past the stage (a sequence longer than the
 * call's max_seqlen rounded, or than STOK) are streamed into the thread's
 * dot product, CHUNK tokens of each at a time. (3) After its own copies
 * complete (each thread reads back only what it copied: no barrier), the
 * staged tokens' y * dy added. (4) The sum across the token groups and,
 * with SPLIT > 1, across the cluster's CTAs (each reads every CTA's
 * partial sums through distributed shared memory, in rank order: the same
 * d in each). (5) dx: staged tokens from shared memory, streamed ones read
 * again (last first, the likeliest still in L2).
 *
 * Traffic: a sequence of up to `stage` tokens reads y and dy once and
 * writes dx once; only tokens past the stage are read twice.
 *
 * Macros (the host sets them from the config and the call):
 *   SCREE_TPR    lanes across the columns: 2, 4 or 8
 *   SCREE_ROWS   token groups: 16 ... 512 (TPR * ROWS threads, 32..1024)
 *   SCREE_VEC    columns per lane, one access: 1, 2, 4 or 8
 *   SCREE_STOK   most tokens staged per CTA (the dynamic shared memory is
 *                sized by the launch: `stage` tokens, at most STOK, of
 *                SPAN elements of y and SPAN of dy each)
 *   SCREE_SPLIT  CTAs per sequence and strip: 1, or a thread block cluster
 *                of 2, 4 or 8 (sm_90), each staging its share of the tokens
 *   SCREE_Y_DTYPE, SCREE_DY_DTYPE   dtype codes of y and of dy and dx
 *     (common.cuh)
 *
 * The host guarantees: y, dy, dx aligned to VEC elements of their dtype;
 * row strides multiples of VEC; 1 <= cols <= 65536; stage a multiple of
 * ROWS, at most STOK; dx either equal to dy (same stride: every element is
 * read and then written by the same thread, so no barrier is needed) or
 * disjoint from y and dy; s finite; gridDim.x = column blocks * SPLIT, in
 * clusters of SPLIT along x; gridDim.y * gridDim.z >= batch (CTAs past it
 * return); 64-bit token offsets.
 *
 * Test alone: ctest -R ragged_softmax_backward
 * Bench: build/bench/bench_ops --op ragged_softmax_backward
 */

#include "ptx.cuh"
#include "cluster_ptx.cuh"

static_assert(SCREE_Y_DTYPE >= 0 && SCREE_Y_DTYPE <= 2, "y dtype must be fp32, fp16 or bf16");
static_assert(SCREE_DY_DTYPE >= 0 && SCREE_DY_DTYPE <= 2, "dy dtype must be fp32, fp16 or bf16");

#define SCREE_THREADS (SCREE_TPR * SCREE_ROWS)
#define SCREE_WARPS (SCREE_THREADS / 32)
static_assert(SCREE_TPR == 2 || SCREE_TPR == 4 || SCREE_TPR == 8, "TPR must be 2, 4 or 8");
static_assert((SCREE_ROWS & (SCREE_ROWS - 1)) == 0 && SCREE_ROWS >= 16 && SCREE_ROWS <= 512,
              "ROWS must be a power of two in [16, 512]");
static_assert(SCREE_THREADS >= 32 && SCREE_THREADS <= 1024, "TPR * ROWS must be in [32, 1024]");
static_assert(SCREE_VEC == 1 || SCREE_VEC == 2 || SCREE_VEC == 4 || SCREE_VEC == 8,
              "VEC must be 1, 2, 4 or 8");
static_assert((SCREE_STOK & (SCREE_STOK - 1)) == 0 && SCREE_STOK >= SCREE_ROWS &&
                  SCREE_STOK <= 8192,
              "STOK must be a power of two in [ROWS, 8192]");
static_assert(SCREE_SPLIT == 1 || SCREE_SPLIT == 2 || SCREE_SPLIT == 4 || SCREE_SPLIT == 8,
              "SPLIT must be 1, 2, 4 or 8");
#if SCREE_SPLIT > 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "SPLIT > 1 needs thread block clusters (sm_90)"
#endif

typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_dtype_of<SCREE_DY_DTYPE>::type gt;
typedef scree_vec<yt, SCREE_VEC> yv;
typedef scree_vec<gt, SCREE_VEC> gv;

/* Columns of one CTA; slots between a thread's consecutive staged tokens. */
#define SCREE_SPAN (SCREE_TPR * SCREE_VEC)
#define SCREE_KSTRIDE (SCREE_ROWS * SCREE_TPR)
/* Bytes of one token's access of y and of dy together. */
#define SCREE_TBYTES (SCREE_VEC * (int)(sizeof(yt) + sizeof(gt)))
/* Streamed tokens loaded before any is used: 32 bytes of y and dy in
 * flight per thread (at least one token), so that the streamed passes need
 * few registers. */
#define SCREE_CHUNK (SCREE_TBYTES >= 32 ? 1 : SCREE_TBYTES >= 16 ? 2 : 4)

/* One token's VEC columns: a vector access when all nc are inside the row,
 * else element by element (the rest zero). nc >= 1. */
template <typename T>
__device__ __forceinline__ scree_vec<T, SCREE_VEC> scree_rsb_load(const T *p, int nc) {
  if (nc >= SCREE_VEC) return *reinterpret_cast<const scree_vec<T, SCREE_VEC> *>(p);
  scree_vec<T, SCREE_VEC> r;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) r.v[e] = e < nc ? p[e] : scree_from_float<T>(0.f);
  return r;
}

__device__ __forceinline__ void scree_rsb_store(gt *p, const gv &v, int nc) {
  if (nc >= SCREE_VEC) {
    *reinterpret_cast<gv *>(p) = v;
    return;
  }
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    if (e < nc) p[e] = v.v[e];
}

/* One token's VEC columns of src into the shared-memory slot d: an async
 * copy of 4, 8 or 16 bytes (32: two of 16), zero-filled past nc columns;
 * a 2-byte slot (one 16-bit column) by a plain load and store. */
template <typename T>
__device__ __forceinline__ void scree_rsb_stage1(scree_vec<T, SCREE_VEC> *d, const T *src,
                                                 int nc) {
  constexpr int B = SCREE_VEC * (int)sizeof(T);
  if constexpr (B >= 4) {
    const unsigned a = scree_smem_u32(d);
    const int bytes = (nc < SCREE_VEC ? nc : SCREE_VEC) * (int)sizeof(T);
    if constexpr (B == 32) {
      scree_cp_async16(a, src, bytes < 16 ? bytes : 16);
      scree_cp_async16(a + 16, reinterpret_cast<const char *>(src) + 16,
                       bytes > 16 ? bytes - 16 : 0);
    } else {
      scree_cp_async<B>(a, src, bytes);
    }
  } else {
    *d = scree_rsb_load(src, nc);
  }
}

/* acc += y * dy per column. */
__device__ __forceinline__ void scree_rsb_dot(const yv &a, const gv &b, float (&acc)[SCREE_VEC]) {
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    acc[e] = fmaf(scree_to_float(a.v[e]), scree_to_float(b.v[e]), acc[e]);
}

/* s * y * (dy - d) per column. */
__device__ __forceinline__ gv scree_rsb_out(const yv &a, const gv &b, float s,
                                            const float (&d)[SCREE_VEC]) {
  gv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    o.v[e] = scree_from_float<gt>(s * scree_to_float(a.v[e]) * (scree_to_float(b.v[e]) - d[e]));
  return o;
}

/* dy and dx carry no __restrict__: they may be the same buffer (in place).
 * s is the forward's scale (1 when the call gives 0). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_ragged_softmax_backward(const yt *y, const gt *dy, gt *dx,
                              const int *__restrict__ cu_seqlens, int cols, long long y_stride,
                              long long dy_stride, long long dx_stride, float s, int stage,
                              int batch) {
  extern __shared__ __align__(16) unsigned char scree_stage_raw[];
  const int seq = (int)(blockIdx.y + gridDim.y * blockIdx.z);
  if (seq >= batch) return; /* the whole cluster (same y and z) */
  const int start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - start;
  if (len <= 0) return; /* the whole cluster: no barrier is reached */

  /* With SPLIT > 1, CTA r of the cluster takes token groups r, r + SPLIT,
   * ... (ROWS tokens each). */
  const int part = (int)blockIdx.x % SCREE_SPLIT, strip = (int)blockIdx.x / SCREE_SPLIT;
  const int lane = threadIdx.x % SCREE_TPR, group = threadIdx.x / SCREE_TPR;
  const int c0 = strip * SCREE_SPAN + lane * SCREE_VEC;
  const int nc = cols - c0; /* columns of this lane inside the row (<= 0: idle) */
  const bool active = nc > 0;
  const int first = part * SCREE_ROWS + group; /* this thread's first token */
  const int ntok =
      active && first < len ? (len - first - 1) / (SCREE_SPLIT * SCREE_ROWS) + 1 : 0;
  const int ks = min(ntok, stage / SCREE_ROWS); /* staged tokens of this thread */
  const long long tok = (long long)start + first;
  const yt *yg = y + tok * y_stride + (active ? c0 : 0);
  const gt *gg = dy + tok * dy_stride + (active ? c0 : 0);
  gt *xg = dx + tok * dx_stride + (active ? c0 : 0);
  const long long ystep = (long long)SCREE_SPLIT * SCREE_ROWS * y_stride,
                  gstep = (long long)SCREE_SPLIT * SCREE_ROWS * dy_stride,
                  xstep = (long long)SCREE_SPLIT * SCREE_ROWS * dx_stride;
  /* The stage: stage * SPAN elements of y, then as many of dy. This
   * thread's staged token k is my[k * KSTRIDE] and mg[k * KSTRIDE]. */
  yv *my = reinterpret_cast<yv *>(scree_stage_raw) + group * SCREE_TPR + lane;
  gv *mg = reinterpret_cast<gv *>(scree_stage_raw + (size_t)stage * SCREE_SPAN * sizeof(yt)) +
           group * SCREE_TPR + lane;

  /* (1) The staged tokens' copies, all issued before any is waited for. */
#pragma unroll 4
  for (int k = 0; k < ks; k++) {
    scree_rsb_stage1<yt>(my + k * SCREE_KSTRIDE, yg + k * ystep, nc);
    scree_rsb_stage1<gt>(mg + k * SCREE_KSTRIDE, gg + k * gstep, nc);
  }
  scree_cp_async_commit();

  /* (2) Tokens past the stage, streamed while the copies land. */
  float acc[SCREE_VEC];
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) acc[e] = 0.f;
#pragma unroll 1
  for (int k0 = ks; k0 < ntok; k0 += SCREE_CHUNK) {
    yv by[SCREE_CHUNK];
    gv bg[SCREE_CHUNK];
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k0 + j < ntok) {
        by[j] = scree_rsb_load(yg + (k0 + j) * ystep, nc);
        bg[j] = scree_rsb_load(gg + (k0 + j) * gstep, nc);
      }
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k0 + j < ntok) scree_rsb_dot(by[j], bg[j], acc);
  }

  /* (3) The staged tokens, once this thread's own copies have landed. */
  scree_cp_async_wait<0>();
#pragma unroll 4
  for (int k = 0; k < ks; k++) scree_rsb_dot(my[k * SCREE_KSTRIDE], mg[k * SCREE_KSTRIDE], acc);

  /* (4) Across the token groups: the groups of a warp (lanes TPR apart),
   * then the warps in order through shared memory. Idle threads hold 0. */
#pragma unroll
  for (int o = SCREE_TPR; o < 32; o <<= 1)
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
#if SCREE_WARPS > 1
  {
    __shared__ float red[SCREE_WARPS][SCREE_TPR][SCREE_VEC];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 < SCREE_TPR)
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) red[warp][lane][e] = acc[e];
    __syncthreads();
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) acc[e] = 0.f;
#pragma unroll 4
    for (int w = 0; w < SCREE_WARPS; w++)
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) acc[e] += red[w][lane][e];
  }
#endif
#if SCREE_SPLIT > 1
  {
    /* Across the cluster's CTAs: each leaves its lanes' sums (the first
     * group's threads), and every thread adds those of its lane from every
     * CTA's shared memory, in rank order. The barrier after the reads keeps
     * each CTA's buffer alive until every CTA has read it. */
    __shared__ float xpart[SCREE_TPR][SCREE_VEC];
    if (threadIdx.x < SCREE_TPR)
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) xpart[lane][e] = acc[e];
    scree_cluster_sync();
    const unsigned local = scree_smem_u32(&xpart[lane][0]);
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) acc[e] = 0.f;
#pragma unroll
    for (int q = 0; q < SCREE_SPLIT; q++) {
      const unsigned remote = scree_cluster_map(local, (unsigned)q);
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) acc[e] += scree_cluster_ld_f32(remote + 4u * (unsigned)e);
    }
    scree_cluster_sync();
  }
#endif
  if (!active) return; /* no barrier follows */

  /* (5) dx: the staged tokens from shared memory, then the streamed ones
   * read again, last first (batches of loads before their stores: in place
   * over dy, each element is read before it is written). */
#pragma unroll 4
  for (int k = 0; k < ks; k++)
    scree_rsb_store(xg + k * xstep, scree_rsb_out(my[k * SCREE_KSTRIDE], mg[k * SCREE_KSTRIDE], s, acc),
                    nc);
#pragma unroll 1
  for (int k1 = ntok; k1 > ks; k1 -= SCREE_CHUNK) {
    yv by[SCREE_CHUNK];
    gv bg[SCREE_CHUNK];
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k1 - 1 - j >= ks) {
        by[j] = scree_rsb_load(yg + (k1 - 1 - j) * ystep, nc);
        bg[j] = scree_rsb_load(gg + (k1 - 1 - j) * gstep, nc);
      }
#pragma unroll
    for (int j = 0; j < SCREE_CHUNK; j++)
      if (k1 - 1 - j >= ks)
        scree_rsb_store(xg + (k1 - 1 - j) * xstep, scree_rsb_out(by[j], bg[j], s, acc), nc);
  }
}
