/*
 * rowwise.cuh - what the row-wise kernels share: one row per group of TPR
 * threads, ROWS groups per CTA, VEC elements per access, CACHE vectors per
 * thread kept in registers, and the reductions over a row.
 *
 * A kernel source pulls this in with `#include "rowwise.cuh"` and defines
 * the launch-shape macros first (the host sets them from the config):
 *   SCREE_TPR    threads per row: 8, 16, ..., 1024 (power of two)
 *   SCREE_ROWS   row groups per CTA: TPR * ROWS threads, 32..1024
 *   SCREE_VEC    elements per access: 1, 2, 4 or 8
 *   SCREE_CACHE  vectors per thread kept in registers: 1..16
 * (static_asserts below check them, mirroring src/ops/rowwise.c).
 *
 * Layout of a row of n elements seen by lane l of its group: vectors
 * l, l + TPR, l + 2 TPR, ... of the row's nvec = n / VEC whole vectors; the
 * first CACHE of them are "cached" (loaded once into registers), the rest
 * are streamed; the n % VEC elements past the last whole vector (the tail)
 * are taken one at a time by lanes 0..(n % VEC) - 1. The host narrows VEC
 * until every pointer and row stride allows the vector access.
 */
#ifndef SCREE_ROWWISE_CUH
#define SCREE_ROWWISE_CUH

#define SCREE_THREADS (SCREE_TPR * SCREE_ROWS)
static_assert((SCREE_TPR & (SCREE_TPR - 1)) == 0 && SCREE_TPR >= 8 && SCREE_TPR <= 1024,
              "TPR must be a power of two in [8, 1024]");
static_assert((SCREE_ROWS & (SCREE_ROWS - 1)) == 0 && SCREE_ROWS >= 1 && SCREE_ROWS <= 16,
              "ROWS must be a power of two in [1, 16]");
static_assert(SCREE_THREADS >= 32 && SCREE_THREADS <= 1024,
              "TPR * ROWS must be in [32, 1024]");
static_assert(SCREE_VEC == 1 || SCREE_VEC == 2 || SCREE_VEC == 4 || SCREE_VEC == 8,
              "VEC must be 1, 2, 4 or 8");
static_assert(SCREE_CACHE >= 1 && SCREE_CACHE <= 16, "CACHE must be in [1, 16]");
static_assert(SCREE_VEC * SCREE_CACHE <= 64, "VEC * CACHE must be at most 64");

/* Warps of one row's group (1 when the group is a part of a warp). */
#define SCREE_ROW_WARPS (SCREE_TPR > 32 ? SCREE_TPR / 32 : 1)

/* The thread's place: its lane in the row's group and the group in the CTA. */
__device__ __forceinline__ int scree_row_lane() { return threadIdx.x % SCREE_TPR; }
__device__ __forceinline__ int scree_row_group() { return threadIdx.x / SCREE_TPR; }

/* Max over `WIDTH` consecutive lanes of a warp (see scree_group_sum). */
template <int WIDTH>
__device__ __forceinline__ float scree_group_max(float v) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, WIDTH));
  return v;
}

/* Scratch for the cross-warp step of a row reduction: declare one per
 * kernel as `__shared__ scree_row_scratch scratch;`. */
struct scree_row_scratch {
  float v[SCREE_ROWS][SCREE_ROW_WARPS];
};

/* The sum (IS_MAX false) or max (true) of v over the row's TPR threads;
 * every thread of the group gets it. Every thread of the CTA must call it
 * (it synchronises the CTA when a row spans several warps); the scratch is
 * free again when it returns. */
template <bool IS_MAX>
__device__ __forceinline__ float scree_row_reduce(float v, scree_row_scratch &s) {
  constexpr int W = SCREE_TPR < 32 ? SCREE_TPR : 32;
  v = IS_MAX ? scree_group_max<W>(v) : scree_group_sum<W>(v);
#if SCREE_TPR > 32
  const int lane = scree_row_lane(), group = scree_row_group();
  if (threadIdx.x % 32 == 0) s.v[group][lane / 32] = v;
  __syncthreads();
  v = s.v[group][0];
#pragma unroll
  for (int i = 1; i < SCREE_ROW_WARPS; i++)
    v = IS_MAX ? fmaxf(v, s.v[group][i]) : v + s.v[group][i];
  __syncthreads();
#else
  (void)s;
#endif
  return v;
}
__device__ __forceinline__ float scree_row_sum(float v, scree_row_scratch &s) {
  return scree_row_reduce<false>(v, s);
}
__device__ __forceinline__ float scree_row_max(float v, scree_row_scratch &s) {
  return scree_row_reduce<true>(v, s);
}

/* 2^x (ex2.approx: 2 ulp, -inf gives 0); exp(x) = scree_exp2(x * log2(e)). */
#define SCREE_LOG2E 1.4426950408889634f
#define SCREE_LN2 0.6931471805599453f
__device__ __forceinline__ float scree_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* Online softmax state of a set of values (in the log2 domain: values
 * already multiplied by scale * log2(e)): running max m and sum of
 * 2^(x - m). An empty set is {-inf, 0}. */
struct scree_online {
  float m, s;
};
__device__ __forceinline__ scree_online scree_online_empty() {
  return {-__int_as_float(0x7f800000), 0.f};
}
__device__ __forceinline__ void scree_online_add(scree_online &a, float x) {
  if (x > a.m) {
    a.s = a.s * scree_exp2(a.m - x) + 1.f;
    a.m = x;
  } else {
    a.s += scree_exp2(x - a.m);
  }
}
/* The state of a row from each thread's: max over the row, then the sum of
 * each thread's sum rescaled to it. */
__device__ __forceinline__ scree_online scree_row_online(scree_online a, scree_row_scratch &s) {
  const float m = scree_row_max(a.m, s);
  const float part = a.m == m ? a.s : a.s * scree_exp2(a.m - m); /* -inf - -inf avoided */
  return {m, scree_row_sum(part, s)};
}

/* Loads a vector and converts it to fp32. */
template <typename T>
__device__ __forceinline__ void scree_vec_to_float(const scree_vec<T, SCREE_VEC> &v,
                                                   float (&f)[SCREE_VEC]) {
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) f[e] = scree_to_float(v.v[e]);
}
template <typename T>
__device__ __forceinline__ scree_vec<T, SCREE_VEC> scree_vec_from_float(
    const float (&f)[SCREE_VEC]) {
  scree_vec<T, SCREE_VEC> v;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++) v.v[e] = scree_from_float<T>(f[e]);
  return v;
}

#endif
