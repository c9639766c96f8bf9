/*
 * rope.cu - rotary position embedding on q and k in one launch, in place or
 * out of place into q_out and k_out.
 *
 * For token t at position p, every head row x of q and k (heads_q + heads_kv
 * rows of head_dim elements) and pair i < R = rotary_dim / 2:
 *   (x1, x2) -> (x1 cos a - x2 sin a, x2 cos a + x1 sin a),  a = p * inv_freq[i]
 * with (x1, x2) = (x[i], x[i + R]) in the NeoX layout (rotate-half) and
 * (x[2i], x[2i + 1]) in the GPT-J layout (interleaved). Elements past
 * rotary_dim are neither read nor written. fp32 math, one rounding on store.
 *
 * cos and sin: from the caller's fp32 table (row p: R cos then R sin), or
 * on the fly as HuggingFace computes them in fp32: inv_freq[i] =
 * 1 / theta^(2i / rotary_dim) rounded to fp32 (the exponent an fp32
 * division, the power correctly rounded: evaluated in double, rounded
 * once), the angle the fp32 product float(p) * inv_freq[i], then accurate
 * sincosf (not the fast intrinsics). inv_freq is computed once per CTA into
 * shared memory.
 *
 * Thread mapping: one work item is a token and a share of its heads (one
 * of SCREE_SPLIT). A group of SCREE_LANES threads takes an item; a CTA
 * holds SCREE_GROUPS groups and strides over the items (total * SPLIT).
 * Lane l of a group owns the pair blocks starting at (l + n * LANES) * PB
 * (PB pairs: VEC in the NeoX layout, whose pair block is one vector of the
 * first half and one of the second; VEC / 2 in the GPT-J layout, one vector
 * of consecutive pairs, or one pair in two scalar accesses at VEC = 1). For
 * each block it computes cos and sin once for the token, then rotates that
 * block in the heads h = s, s + SPLIT, ... of the item, loading SCREE_CACHE
 * heads before storing any (memory-level parallelism): q heads first, then
 * k heads, all of one token sharing its cos and sin.
 *
 * Out of place (qo, ko not q, k): the same mapping reads q and k and writes
 * the rotated blocks to qo and ko; after its blocks, the item's lanes copy
 * the elements past rotary_dim of its heads (VEC at a time, the last
 * (head_dim - rotary_dim) % VEC one at a time), except where an output is
 * its input (that tensor in place). Two entries of one module: scree_rope
 * (in place) and scree_rope_out, each an instantiation of
 * scree_rope_items, so the in-place kernel is the code it always was, with
 * its registers (one kernel branching between the two took 91 -> 106
 * registers on sm_90 for bf16 lanes=8,groups=16,vec=8,cache=4,split=8,
 * fewer CTAs per SM), and a call picks its entry on the host. Not a config
 * or variant field: a new variant field would invalidate every tuned and
 * shipped RoPE line, and both paths want the same configs.
 *
 * Positions: positions[t] (int32 or int64), or t - cu_seqlens[b] for the
 * sequence b holding t, found by binary search (the largest b with
 * cu_seqlens[b] <= t, so empty sequences are skipped).
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_LANES   threads per work item: 4, 8, 16, 32 or 64
 *   SCREE_GROUPS  work items per CTA at a time: 1, 2, 4, 8, 16 or 32
 *                 (LANES * GROUPS threads, 32..512: at 1024, ptxas trims
 *                 sincosf's registers to 32 and spills)
 *   SCREE_VEC     elements per access: 1, 2, 4 or 8
 *   SCREE_CACHE   head rows loaded before use: 1..16, with CACHE * 2 * PB
 *                 <= 64 elements of registers, and the CTA's estimated
 *                 registers (SCREE_EST_REGS) within 64K
 *   SCREE_SPLIT   work items per token (its heads dealt out): 1, 2, 4 or 8
 *   SCREE_DTYPE   dtype code of q and k (common.cuh)
 *   SCREE_LAYOUT  0 NeoX, 1 GPT-J
 *   SCREE_TABLE   0 cos and sin on the fly from theta, 1 from cos_sin
 *   SCREE_POS     0 positions from cu_seqlens, 1 int32 positions, 2 int64
 *   SCREE_INVERSE 1: the inverse rotation (angle -a: sin negated), the
 *                 backward of RoPE on dq and dk (scree_rope_backward, whose
 *                 implementation passes it); 0 or unset: the forward
 *
 * The host guarantees: 2 <= rotary_dim <= head_dim <= 1024, both even;
 * q and k (and qo, ko) aligned to VEC elements, every stride a multiple of
 * VEC, R a
 * multiple of PB (so both halves' vectors are aligned in the NeoX layout);
 * no element of q or k's rotary parts reached twice (q and k may be the q
 * and k slices of one packed qkv buffer); positions, cu_seqlens and cos_sin
 * disjoint from what is written; out of place, qo and ko each exactly q
 * and k or apart from both, and no element of qo and ko written twice;
 * with a table, 0 <= p < max_position; cu_seqlens
 * from 0, non-decreasing, ending at total (checked on the host only with
 * validation on).
 *
 * Test alone: ctest -R rope    Bench: build/bench/bench_ops --op rope
 */

#define SCREE_THREADS (SCREE_LANES * SCREE_GROUPS)
static_assert((SCREE_LANES & (SCREE_LANES - 1)) == 0 && SCREE_LANES >= 4 && SCREE_LANES <= 64,
              "LANES must be a power of two in [4, 64]");
static_assert((SCREE_GROUPS & (SCREE_GROUPS - 1)) == 0 && SCREE_GROUPS >= 1 && SCREE_GROUPS <= 32,
              "GROUPS must be a power of two in [1, 32]");
static_assert(SCREE_THREADS >= 32 && SCREE_THREADS <= 512, "LANES * GROUPS must be in [32, 512]");
static_assert(SCREE_VEC == 1 || SCREE_VEC == 2 || SCREE_VEC == 4 || SCREE_VEC == 8,
              "VEC must be 1, 2, 4 or 8");
static_assert(SCREE_CACHE >= 1 && SCREE_CACHE <= 16, "CACHE must be in [1, 16]");
static_assert(SCREE_SPLIT == 1 || SCREE_SPLIT == 2 || SCREE_SPLIT == 4 || SCREE_SPLIT == 8,
              "SPLIT must be 1, 2, 4 or 8");
static_assert(SCREE_DTYPE >= 0 && SCREE_DTYPE <= 2, "DTYPE must be 0 (fp32), 1 (fp16), 2 (bf16)");
static_assert(SCREE_LAYOUT == 0 || SCREE_LAYOUT == 1, "LAYOUT must be 0 (NeoX) or 1 (GPT-J)");
static_assert(SCREE_TABLE == 0 || SCREE_TABLE == 1, "TABLE must be 0 or 1");
static_assert(SCREE_POS >= 0 && SCREE_POS <= 2, "POS must be 0 (cu_seqlens), 1 (int32), 2 (int64)");
#ifndef SCREE_INVERSE
#define SCREE_INVERSE 0
#endif
static_assert(SCREE_INVERSE == 0 || SCREE_INVERSE == 1, "INVERSE must be 0 or 1");

/* Pairs per block, vectors per head row and block, elements per block. */
#if SCREE_LAYOUT == 0
#define SCREE_PB SCREE_VEC
#else
#define SCREE_PB (SCREE_VEC > 1 ? SCREE_VEC / 2 : 1)
#endif
#define SCREE_NV (2 * SCREE_PB / SCREE_VEC)
#define SCREE_EPB (2 * SCREE_PB)
static_assert(SCREE_CACHE * SCREE_EPB <= 64, "CACHE * 2 * PB must be at most 64 elements");

/* Registers per thread, estimated: 32 for addresses, indices and cos/sin
 * evaluation, the head rows in flight (CACHE * 2 * PB elements, two per
 * register below fp32), cos and sin (2 * PB) and the row addresses
 * (2 * CACHE). The CTA must fit the 64K-register file with it, or ptxas
 * spills to meet __launch_bounds__. */
#define SCREE_EST_REGS                                                         \
  (32 + SCREE_CACHE * SCREE_EPB * (SCREE_DTYPE == 0 ? 2 : 1) / 2 + 2 * SCREE_PB + \
   2 * SCREE_CACHE)
static_assert(SCREE_THREADS * SCREE_EST_REGS <= 65536,
              "LANES * GROUPS threads of the estimated registers exceed 64K");

#define SCREE_MAX_HALF 512 /* rotary_dim / 2 for head_dim 1024 */

typedef scree_dtype_of<SCREE_DTYPE>::type et;
typedef scree_vec<et, SCREE_VEC> ev;

/* The position of token t. */
__device__ __forceinline__ long long scree_rope_position(long long t, const void *positions,
                                                         const int *cu_seqlens, int batch) {
#if SCREE_POS == 1
  return reinterpret_cast<const int *>(positions)[t];
#elif SCREE_POS == 2
  return reinterpret_cast<const long long *>(positions)[t];
#else
  (void)positions;
  int lo = 0, hi = batch; /* the largest b in [0, batch] with cu_seqlens[b] <= t */
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cu_seqlens[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return t - cu_seqlens[lo];
#endif
}

/* Element offset of vector j of the pair block at pair pb in a head row. */
__device__ __forceinline__ int scree_rope_offset(int pb, int j, int half) {
#if SCREE_LAYOUT == 0
  return j == 0 ? pb : half + pb;
#else
  (void)half;
  return 2 * pb + j * SCREE_VEC;
#endif
}

/* Rotates the block's elements (f: its vectors' elements in order) by the
 * angle, or by its negative with SCREE_INVERSE (the transpose: the
 * gradient of the rotation). */
__device__ __forceinline__ void scree_rope_rotate(float (&f)[SCREE_EPB],
                                                  const float (&c)[SCREE_PB],
                                                  const float (&s)[SCREE_PB]) {
#pragma unroll
  for (int m = 0; m < SCREE_PB; m++) {
#if SCREE_LAYOUT == 0
    const int i1 = m, i2 = SCREE_PB + m;
#else
    const int i1 = 2 * m, i2 = 2 * m + 1;
#endif
    const float x1 = f[i1], x2 = f[i2];
    const float sn = SCREE_INVERSE ? -s[m] : s[m];
    f[i1] = x1 * c[m] - x2 * sn;
    f[i2] = x2 * c[m] + x1 * sn;
  }
}

/* The work items of the CTA: in place (OUT false: rows written where they
 * were read) or out of place (OUT: into qo and ko, then the parts past
 * rotary_dim copied). q and k carry no __restrict__: they may be slices of
 * one buffer, as may qo and ko. */
template <bool OUT>
__device__ __forceinline__ void scree_rope_items(
    et *q, et *k, const void *__restrict__ positions, const int *__restrict__ cu_seqlens,
    const float *__restrict__ cos_sin, long long total, int batch, int heads_q, int heads,
    int rotary_dim, long long q_token_stride, long long q_head_stride, long long k_token_stride,
    long long k_head_stride, const float *inv_freq, et *qo, et *ko, long long qo_token_stride,
    long long qo_head_stride, long long ko_token_stride, long long ko_head_stride, int head_dim) {
  const int lane = threadIdx.x % SCREE_LANES;
  const int group = threadIdx.x / SCREE_LANES;
  const int half = rotary_dim >> 1;
  const long long items = total * SCREE_SPLIT;
  for (long long w = (long long)blockIdx.x * SCREE_GROUPS + group; w < items;
       w += (long long)gridDim.x * SCREE_GROUPS) {
    const long long t = w / SCREE_SPLIT;
    const int split = (int)(w % SCREE_SPLIT);
    const long long p = scree_rope_position(t, positions, cu_seqlens, batch);
    et *const qt = q + t * q_token_stride;
    et *const kt = k + t * k_token_stride;
    et *const qot = OUT ? qo + t * qo_token_stride : qt;
    et *const kot = OUT ? ko + t * ko_token_stride : kt;
    for (int pb = lane * SCREE_PB; pb < half; pb += SCREE_LANES * SCREE_PB) {
      float c[SCREE_PB], s[SCREE_PB];
#if SCREE_TABLE
      (void)inv_freq;
      const float *row = cos_sin + p * rotary_dim;
#pragma unroll
      for (int m = 0; m < SCREE_PB; m++) {
        c[m] = row[pb + m];
        s[m] = row[half + pb + m];
      }
#else
      (void)cos_sin;
      const float pf = (float)p;
#pragma unroll
      for (int m = 0; m < SCREE_PB; m++) {
        const float a = pf * inv_freq[pb + m];
        sincosf(a, &s[m], &c[m]);
      }
#endif
      for (int h0 = split; h0 < heads; h0 += SCREE_SPLIT * SCREE_CACHE) {
        ev buf[SCREE_CACHE][SCREE_NV];
        et *rows[SCREE_CACHE];
#pragma unroll
        for (int cc = 0; cc < SCREE_CACHE; cc++) {
          const int h = h0 + cc * SCREE_SPLIT;
          rows[cc] = h < heads_q ? qt + (long long)h * q_head_stride
                                 : kt + (long long)(h - heads_q) * k_head_stride;
          if (h < heads) {
#pragma unroll
            for (int j = 0; j < SCREE_NV; j++)
              buf[cc][j] = *reinterpret_cast<const ev *>(rows[cc] + scree_rope_offset(pb, j, half));
          }
        }
#pragma unroll
        for (int cc = 0; cc < SCREE_CACHE; cc++) {
          const int h = h0 + cc * SCREE_SPLIT;
          if (h < heads) {
            float f[SCREE_EPB];
#pragma unroll
            for (int e = 0; e < SCREE_EPB; e++)
              f[e] = scree_to_float(buf[cc][e / SCREE_VEC].v[e % SCREE_VEC]);
            scree_rope_rotate(f, c, s);
            /* Out of place, the row's address is formed here rather than
             * held beside rows[] (registers). */
            et *const out = !OUT ? rows[cc]
                            : h < heads_q ? qot + (long long)h * qo_head_stride
                                          : kot + (long long)(h - heads_q) * ko_head_stride;
#pragma unroll
            for (int j = 0; j < SCREE_NV; j++) {
              ev o;
#pragma unroll
              for (int e = 0; e < SCREE_VEC; e++)
                o.v[e] = scree_from_float<et>(f[j * SCREE_VEC + e]);
              *reinterpret_cast<ev *>(out + scree_rope_offset(pb, j, half)) = o;
            }
          }
        }
      }
    }
    if (OUT) {
      /* The parts past rotary_dim, as they are: rotary_dim is a multiple of
       * VEC (the host's guarantee above), so the vectors stay aligned. */
      const int vend = rotary_dim + (head_dim - rotary_dim) / SCREE_VEC * SCREE_VEC;
      for (int h = split; h < heads; h += SCREE_SPLIT) {
        const et *src = h < heads_q ? qt + (long long)h * q_head_stride
                                    : kt + (long long)(h - heads_q) * k_head_stride;
        et *dst = h < heads_q ? qot + (long long)h * qo_head_stride
                              : kot + (long long)(h - heads_q) * ko_head_stride;
        if (dst == src) continue; /* that tensor in place */
        for (int e = rotary_dim + lane * SCREE_VEC; e < vend; e += SCREE_LANES * SCREE_VEC)
          *reinterpret_cast<ev *>(dst + e) = *reinterpret_cast<const ev *>(src + e);
        for (int e = vend + lane; e < head_dim; e += SCREE_LANES) dst[e] = src[e];
      }
    }
  }
}

/* inv_freq into shared memory (on the fly), once per CTA. */
#if SCREE_TABLE == 0
#define SCREE_ROPE_INV_FREQ                                              \
  __shared__ float inv_freq[SCREE_MAX_HALF];                             \
  for (int i = threadIdx.x; i < (rotary_dim >> 1); i += SCREE_THREADS) { \
    const float e = (float)(2 * i) / (float)rotary_dim;                  \
    const float pw = (float)pow((double)theta, (double)e);               \
    inv_freq[i] = 1.0f / pw;                                             \
  }                                                                      \
  __syncthreads();
#else
#define SCREE_ROPE_INV_FREQ \
  (void)theta;              \
  const float *inv_freq = nullptr;
#endif

/* In place: the rotary parts of q and k rewritten where they lie. */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_rope(et *q, et *k, const void *__restrict__ positions, const int *__restrict__ cu_seqlens,
           const float *__restrict__ cos_sin, long long total, int batch, int heads_q, int heads,
           int rotary_dim, long long q_token_stride, long long q_head_stride,
           long long k_token_stride, long long k_head_stride, float theta) {
  SCREE_ROPE_INV_FREQ
  scree_rope_items<false>(q, k, positions, cu_seqlens, cos_sin, total, batch, heads_q, heads,
                          rotary_dim, q_token_stride, q_head_stride, k_token_stride,
                          k_head_stride, inv_freq, q, k, q_token_stride, q_head_stride,
                          k_token_stride, k_head_stride, 0);
}

/* Out of place: q and k read, the rotated head rows written whole to qo
 * and ko (one of them may be its input: that tensor in place). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_rope_out(et *q, et *k, const void *__restrict__ positions,
               const int *__restrict__ cu_seqlens, const float *__restrict__ cos_sin,
               long long total, int batch, int heads_q, int heads, int rotary_dim,
               long long q_token_stride, long long q_head_stride, long long k_token_stride,
               long long k_head_stride, float theta, et *qo, et *ko, long long qo_token_stride,
               long long qo_head_stride, long long ko_token_stride, long long ko_head_stride,
               int head_dim) {
  SCREE_ROPE_INV_FREQ
  scree_rope_items<true>(q, k, positions, cu_seqlens, cos_sin, total, batch, heads_q, heads,
                         rotary_dim, q_token_stride, q_head_stride, k_token_stride, k_head_stride,
                         inv_freq, qo, ko, qo_token_stride, qo_head_stride, ko_token_stride,
                         ko_head_stride, head_dim);
}
