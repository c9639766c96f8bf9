/*
 * ragged_softmax_smem.cu - softmax along the tokens of each sequence of a
 * packed batch, per column (the function of ragged_softmax.cu), with the
 * sequence's column strip staged in shared memory, so that sequences of up
 * to `stage` tokens are read once from device memory and written once.
 *
 * The register-only kernel (ragged_softmax.cu) holds at most 16 token
 * groups x 16 tokens of a strip in registers; a sequence of 1000 tokens
 * there reads most of its tokens twice. Here a strip of SPAN = TPR * VEC
 * columns (32 to 128 bytes wide) and up to STOK tokens goes to shared
 * memory (STOK * SPAN elements of x: 64 KiB for 2048 tokens of 32 bytes),
 * with every copy of the CTA in flight at once (cp.async, no registers
 * held), and the softmax is computed from there.
 *
 * Thread mapping: one CTA per (block j of SPAN columns, sequence b), with
 * j = blockIdx.x / SPLIT and b = blockIdx.y + gridDim.y * blockIdx.z: the
 * CTAs launched together cover whole token rows of one or two sequences,
 * so the DRAM pages of a row are read while they are open (sequence-major
 * order left each row's strips to CTAs launched far apart). Lane
 * l = threadIdx.x % TPR owns the VEC contiguous columns
 * j * SPAN + l * VEC + [0, VEC); group
 * g = threadIdx.x / TPR owns tokens start + g + ROWS * k, k = 0, 1, ...
 * (a warp reads 32 / TPR consecutive tokens' strips, contiguous in shared
 * memory). Macros (the host sets them from the config):
 *   SCREE_TPR    lanes across the columns: 2, 4 or 8
 *   SCREE_ROWS   token groups: 16 ... 512 (TPR * ROWS threads, 32..1024)
 *   SCREE_VEC    columns per lane, one access: 1, 2, 4 or 8
 *   SCREE_STOK   most tokens staged per CTA (the dynamic shared memory is
 *                sized by the launch: `stage` tokens, at most STOK)
 *   SCREE_SPLIT  CTAs per sequence and strip: 1, or a thread block cluster
 *                of 2, 4 or 8 (sm_90) whose CTA r takes token groups r,
 *                r + SPLIT, ... and whose states merge through distributed
 *                shared memory
 *   SCREE_X_DTYPE, SCREE_Y_DTYPE   dtype codes (common.cuh)
 *
 * Passes. (1) Each thread issues the async copies of its staged tokens
 * (k < stage / ROWS) into shared memory, slot (g + ROWS * k) * TPR + l.
 * (2) While they land, tokens past the stage (a sequence longer than
 * `stage`: the caller's max_seqlen said less, or the config's STOK is
 * smaller) are streamed into an online (max, sum) state as in
 * ragged_softmax.cu. (3) After its own copies complete (each thread reads
 * back only what it copied: no barrier), the staged tokens' max (16-bit x:
 * two elements per max.f16x2 / max.bf16x2, one conversion per column).
 * (4) That max across the warp's groups (shuffles), the warps (shared
 * memory, one barrier) and, with SPLIT > 1, the cluster's CTAs (two
 * cluster barriers); then each thread's sum of 2^(z - max) over its staged
 * tokens plus its streamed sum taken to that max (one exponential per
 * column), summed the same way. Merging (max, sum) pairs instead costs two
 * exponentials per column at every step: a fifth of the kernel's
 * exponentials on long sequences. (5) Outputs 2^(z - (max + log2 sum)):
 * staged tokens from shared memory, streamed ones read again (last first).
 *
 * Why SPLIT: a CTA reads one strip of every token row it holds, one L2 line
 * (or a 32-byte sector of one) per token. Strips of 32 bytes keep the whole
 * sequence in one CTA but make four L2 requests per line: on the H100
 * (ncu) the L2 ran at 81% of its peak with DRAM at 51%. A cluster holds a
 * 128-byte strip of the same sequence in the same shared memory per CTA.
 *
 * Traffic: a sequence of up to `stage` tokens reads x once and writes y
 * once; only the tokens past it are read twice.
 *
 * Columns, special values, in-place use, 64-bit offsets and what the host
 * guarantees are as in ragged_softmax.cu; in addition the dynamic shared
 * memory is stage * SPAN elements of x, stage a multiple of ROWS and at
 * most STOK; gridDim.x = column blocks * SPLIT, in clusters of SPLIT along
 * x; gridDim.y * gridDim.z >= batch (CTAs past it return).
 * In place is safe without a barrier: every element is read
 * and written by one thread, which reads it before writing it.
 *
 * Test alone: ctest -R ragged_softmax    Bench: build/bench/bench_ops --op ragged_softmax
 */

#include "ptx.cuh"
#include "cluster_ptx.cuh"
#include "ragged_softmax.cuh"

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

/* Slots between a thread's consecutive staged tokens. */
#define SCREE_KSTRIDE (SCREE_ROWS * SCREE_TPR)

#if SCREE_SPLIT > 1
/* Then across the CTAs of the cluster: each leaves its lanes' values (the
 * first group's threads), and every thread combines those of its lane from
 * every CTA's shared memory. The barrier after the reads keeps each CTA's
 * buffer alive (and unchanged) until every CTA has read it. */
template <bool MAX> __device__ __forceinline__ void scree_rsm_cluster(float (&v)[SCREE_VEC]) {
  __shared__ float part[SCREE_TPR][SCREE_VEC];
  const int lane = threadIdx.x % SCREE_TPR;
  if (threadIdx.x < SCREE_TPR)
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) part[lane][e] = v[e];
  scree_cluster_sync();
  const unsigned local = scree_smem_u32(&part[lane][0]);
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) v[e] = MAX ? SCREE_NEG_INF : 0.f;
#pragma unroll
  for (int q = 0; q < SCREE_SPLIT; q++) {
    const unsigned remote = scree_cluster_map(local, (unsigned)q);
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) {
      const float o = scree_cluster_ld_f32(remote + 4u * (unsigned)e);
      v[e] = MAX ? fmaxf(v[e], o) : v[e] + o;
    }
  }
  scree_cluster_sync();
}
#endif

extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_ragged_softmax_smem(const xt *x, yt *y, const int *__restrict__ cu_seqlens, int cols,
                          long long x_stride, long long y_stride, float scale_log2, int stage,
                          int batch) {
  extern __shared__ __align__(16) unsigned char scree_stage_raw[];
  /* The sequence, and this CTA's part of it: with SPLIT > 1, CTA r of the
   * cluster takes token groups r, r + SPLIT, ... (ROWS tokens each). */
  const int seq = (int)(blockIdx.y + gridDim.y * blockIdx.z);
  if (seq >= batch) return; /* the whole cluster (same y and z) */
  const int part = (int)blockIdx.x % SCREE_SPLIT, strip = (int)blockIdx.x / SCREE_SPLIT;
  const int start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - start;
  if (len <= 0) return; /* the whole cluster: no barrier is reached */

  const int lane = threadIdx.x % SCREE_TPR, group = threadIdx.x / SCREE_TPR;
  const int c0 = strip * SCREE_SPAN + lane * SCREE_VEC;
  const int nc = cols - c0; /* columns of this lane inside the row (<= 0: idle) */
  const bool active = nc > 0;
  const int first = part * SCREE_ROWS + group; /* this thread's first token */
  const int ntok = active && first < len ? (len - first - 1) / (SCREE_SPLIT * SCREE_ROWS) + 1 : 0;
  const int ks = min(ntok, stage / SCREE_ROWS); /* staged tokens of this thread */
  const xt *xg = x + ((long long)start + first) * x_stride + (active ? c0 : 0);
  yt *yg = y + ((long long)start + first) * y_stride + (active ? c0 : 0);
  const long long step = (long long)SCREE_SPLIT * SCREE_ROWS * x_stride,
                  ystep = (long long)SCREE_SPLIT * SCREE_ROWS * y_stride;
  const float sl = scale_log2;
  /* This thread's staged token k is mine[k * KSTRIDE]. */
  rv *mine = reinterpret_cast<rv *>(scree_stage_raw) + group * SCREE_TPR + lane;

  /* (1) The staged tokens' copies, all issued before any is waited for. */
  scree_rs_stage<SCREE_KSTRIDE>(mine, xg, step, ks, nc);
  if constexpr (SCREE_VBYTES >= 4) scree_cp_async_commit();

  /* (2) Tokens past the stage, streamed while the copies land. */
  float m[SCREE_VEC], s[SCREE_VEC];
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) m[e] = SCREE_NEG_INF, s[e] = 0.f;
  scree_rs_stream(xg, step, ks, ntok, nc, sl, m, s);

  /* (3) The staged tokens' max, with the streamed tokens' one. */
  if constexpr (SCREE_VBYTES >= 4) scree_cp_async_wait<0>();
  float mx[SCREE_VEC];
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) mx[e] = m[e];
  scree_rs_staged_max<SCREE_KSTRIDE>(mine, ks, sl, mx);

  /* (4) The max across the token groups (and the cluster's CTAs), then
   * every thread's sum taken to it, and those summed the same way: no
   * rescaling merge, one exponential per column for the streamed part.
   * Idle threads hold -inf and 0, which change neither. */
  __shared__ float red[SCREE_WARPS][SCREE_TPR][SCREE_VEC];
  scree_rs_reduce<true, false, SCREE_WARPS>(mx, red);
#if SCREE_SPLIT > 1
  scree_rsm_cluster<true>(mx);
#endif
  float ms[SCREE_VEC];
  scree_rs_staged_sum<SCREE_KSTRIDE, false>(mine, ks, sl, mx, m, s, ms);
  scree_rs_reduce<false, true, SCREE_WARPS>(s, red);
#if SCREE_SPLIT > 1
  scree_rsm_cluster<false>(s);
#endif
  if (!active) return; /* no barrier follows */

  /* (5) The outputs: 2^(z - max) / sum = 2^(z - (max + log2(sum))), one
   * exponential and no multiply per element. (A column that is -inf
   * throughout: sum 0, log2 -inf, z - -inf NaN, as 0 / 0 would give.) */
  float mo[SCREE_VEC], one[SCREE_VEC];
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) mo[e] = ms[e] + scree_lg2(s[e]), one[e] = 1.f;
#pragma unroll 4
  for (int k = 0; k < ks; k++)
    scree_rs_store(yg + k * ystep, scree_rs_out(mine[k * SCREE_KSTRIDE], sl, mo, one), nc);
  scree_rs_stream_out(xg, yg, step, ystep, ks, ntok, nc, sl, mo, one);
}
