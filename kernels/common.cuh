/*
 * common.cuh - definitions shared by every scree kernel.
 *
 * scree compiles kernels with NVRTC at run time and includes no system or
 * CUDA header, so a machine needs only the driver and NVRTC (not a toolkit).
 * This file is prepended to each kernel source before compiling. It reads
 * no macros itself.
 *
 * dtype codes (match scree_dtype in scree.h): 0 = fp32, 1 = fp16, 2 = bf16.
 */
#ifndef SCREE_COMMON_CUH
#define SCREE_COMMON_CUH

struct scree_half { unsigned short bits; };
struct scree_bf16 { unsigned short bits; };

template <int CODE> struct scree_dtype_of;
template <> struct scree_dtype_of<0> { typedef float type; };
template <> struct scree_dtype_of<1> { typedef scree_half type; };
template <> struct scree_dtype_of<2> { typedef scree_bf16 type; };

__device__ __forceinline__ float scree_to_float(float v) { return v; }
__device__ __forceinline__ float scree_to_float(scree_half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
__device__ __forceinline__ float scree_to_float(scree_bf16 v) {
  return __uint_as_float(((unsigned)v.bits) << 16);
}

template <typename T> __device__ __forceinline__ T scree_from_float(float f);
template <> __device__ __forceinline__ float scree_from_float<float>(float f) {
  return f;
}
template <>
__device__ __forceinline__ scree_half scree_from_float<scree_half>(float f) {
  scree_half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
template <>
__device__ __forceinline__ scree_bf16 scree_from_float<scree_bf16>(float f) {
  scree_bf16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

/* N consecutive elements moved as one aligned access (16 bytes or less
 * become a single vector load or store; 32 bytes become two). */
template <typename T, int N> struct __align__(sizeof(T) * N) scree_vec {
  T v[N];
};

/* Sum over the `WIDTH` consecutive lanes of a warp (WIDTH a power of two,
 * at most 32); every lane of the group gets the total. */
template <int WIDTH>
__device__ __forceinline__ float scree_group_sum(float v) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o, WIDTH);
  return v;
}

#endif
