/* rowwise_emu.h - kernels/rowwise.cuh for emu.h (the CPU): the same
 * functions, with ex2 from libm instead of ex2.approx, the group sums of
 * common.cuh by emulated shuffles, and the evict-first vector accesses as
 * plain ones. Included after emu.h and the kernel's -D options; defines
 * rowwise.cuh's include guard, so that the kernel's own #include of it
 * adds nothing. Keep in step with rowwise.cuh. */
#ifndef SCREE_ROWWISE_EMU_H
#define SCREE_ROWWISE_EMU_H

#include <math.h>

#include <cmath>

#define SCREE_ROWWISE_CUH
#define SCREE_THREADS (SCREE_TPR * SCREE_ROWS)
#define SCREE_ROW_WARPS (SCREE_TPR > 32 ? SCREE_TPR / 32 : 1)

static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = old + v;
  return old;
}

struct int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
template <typename T> static inline T __ldcs(const T *p) { return *p; }
template <typename T> static inline void __stcs(T *p, T v) { *p = v; }

static inline int scree_row_lane() { return (int)(threadIdx.x % SCREE_TPR); }
static inline int scree_row_group() { return (int)(threadIdx.x / SCREE_TPR); }

template <int WIDTH> static inline float scree_group_sum(float v) {
  for (int o = WIDTH / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, WIDTH);
  return v;
}
template <int WIDTH> static inline float scree_group_max(float v) {
  for (int o = WIDTH / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, WIDTH));
  return v;
}

struct scree_row_scratch {
  float v[SCREE_ROWS][SCREE_ROW_WARPS];
};

template <bool IS_MAX> static inline float scree_row_reduce(float v, scree_row_scratch &s) {
  constexpr int W = SCREE_TPR < 32 ? SCREE_TPR : 32;
  v = IS_MAX ? scree_group_max<W>(v) : scree_group_sum<W>(v);
#if SCREE_TPR > 32
  const int lane = scree_row_lane(), group = scree_row_group();
  if (threadIdx.x % 32 == 0) s.v[group][lane / 32] = v;
  __syncthreads();
  v = s.v[group][0];
  for (int i = 1; i < SCREE_ROW_WARPS; i++) v = IS_MAX ? fmaxf(v, s.v[group][i]) : v + s.v[group][i];
  __syncthreads();
#else
  (void)s;
#endif
  return v;
}
static inline float scree_row_sum(float v, scree_row_scratch &s) {
  return scree_row_reduce<false>(v, s);
}
static inline float scree_row_max(float v, scree_row_scratch &s) {
  return scree_row_reduce<true>(v, s);
}

#define SCREE_LOG2E 1.4426950408889634f
#define SCREE_LN2 0.6931471805599453f
static inline float scree_exp2(float x) { return std::exp2(x); }

struct scree_online {
  float m, s;
};
static inline scree_online scree_online_empty() { return {-__int_as_float(0x7f800000), 0.f}; }
static inline scree_online scree_row_online(scree_online a, scree_row_scratch &s) {
  const float m = scree_row_max(a.m, s);
  const float part = a.m == m ? a.s : a.s * scree_exp2(a.m - m);
  return {m, scree_row_sum(part, s)};
}

template <typename T>
static inline scree_vec<T, SCREE_VEC> scree_vec_from_float(const float (&f)[SCREE_VEC]) {
  scree_vec<T, SCREE_VEC> v;
  for (int e = 0; e < SCREE_VEC; e++) v.v[e] = scree_from_float<T>(f[e]);
  return v;
}

#endif
