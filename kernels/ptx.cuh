/*
 * ptx.cuh - small inline-PTX wrappers shared by the attention kernels (and
 * the ragged softmax's staged copies and exp2).
 *
 * scree compiles with NVRTC and includes no CUDA header (see common.cuh), so
 * the few tensor-core, shared-memory and async-copy instructions the
 * attention kernels need are written here as inline PTX. Every wrapper is
 * one instruction (or two for the shared-address conversion); none reads a
 * macro. A kernel source pulls this file in with `#include "ptx.cuh"`, which
 * the runtime replaces by the file's text (one level, kernels/ only).
 *
 * Requires sm_80 or newer (ldmatrix, mma.sync m16n8k16 with bf16, cp.async).
 *
 * Fragment layouts (lane = threadIdx.x % 32, g = lane / 4, t = lane % 4):
 *   mma m16n8k16 A (16x16, row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..),
 *     a2 = (g, 8+2t..), a3 = (g+8, 8+2t..); two 16-bit values per register,
 *     the lower column in the low half.
 *   B (16x8, k x n, "col"): b0 = (k 2t..2t+1, n g), b1 = (k 8+2t.., n g).
 *   C/D (16x8 fp32): c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1).
 *   ldmatrix x4: lanes 8i..8i+7 give the row addresses (16 bytes each) of
 *     matrix i; register i receives (row g, columns 2t, 2t+1) of matrix i,
 *     or with .trans (row 2t and 2t+1, column g).
 *
 * Ordering: ldmatrix and cp.async are `asm volatile` so the compiler keeps
 * them in program order with __syncthreads(); cp.async.wait_group carries a
 * memory clobber. mma, ex2 and the packs are pure and may be scheduled freely.
 */
#ifndef SCREE_PTX_CUH
#define SCREE_PTX_CUH

/* Shared memory a CTA may opt in to on the architecture being compiled
 * (cudaDevAttrMaxSharedMemoryPerBlockOptin), for the kernels' static_asserts
 * that mirror the host's check: 227 KiB on sm_90 and sm_100, 163 KiB on
 * sm_80 and sm_87, 99 KiB elsewhere (sm_86, sm_89, and when no arch is
 * defined). */
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1030)
constexpr int SCREE_SMEM_OPTIN = 232448;
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870)
constexpr int SCREE_SMEM_OPTIN = 166912;
#else
constexpr int SCREE_SMEM_OPTIN = 101376;
#endif

/* Generic pointer to a 32-bit shared-window address (what ldmatrix and
 * cp.async take). */
__device__ __forceinline__ unsigned scree_smem_u32(const void *p) {
  unsigned a;
  asm("{\n\t.reg .u64 t;\n\tcvta.to.shared.u64 t, %1;\n\tcvt.u32.u64 %0, t;\n\t}"
      : "=r"(a)
      : "l"(p));
  return a;
}

/* ldmatrix: four (or two) 8x8 matrices of 16-bit elements. */
__device__ __forceinline__ void scree_ldsm_x4(unsigned addr, unsigned &r0, unsigned &r1,
                                              unsigned &r2, unsigned &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void scree_ldsm_x4_trans(unsigned addr, unsigned &r0,
                                                    unsigned &r1, unsigned &r2,
                                                    unsigned &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void scree_ldsm_x2(unsigned addr, unsigned &r0, unsigned &r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}
__device__ __forceinline__ void scree_ldsm_x2_trans(unsigned addr, unsigned &r0,
                                                    unsigned &r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}

/* D += A * B, m16n8k16, fp32 accumulate. DT: 1 = fp16, 2 = bf16 operands. */
template <int DT>
__device__ __forceinline__ void scree_mma_16816(float (&d)[4], const unsigned (&a)[4],
                                                unsigned b0, unsigned b1) {
  if constexpr (DT == 1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/* 16-byte global -> shared copy, bypassing L1. src_bytes < 16 copies that
 * many bytes and zero-fills the rest; src_bytes 0 reads nothing and only
 * zero-fills (the source address is not dereferenced). */
__device__ __forceinline__ void scree_cp_async16(unsigned saddr, const void *gptr,
                                                 int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(saddr), "l"(gptr),
               "r"(src_bytes));
}
/* BYTES (4, 8 or 16) global -> shared, with the same zero-fill: 16 bytes
 * bypass L1 (.cg); 4 and 8 can only go through it (.ca). */
template <int BYTES>
__device__ __forceinline__ void scree_cp_async(unsigned saddr, const void *gptr, int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (BYTES == 16)
    scree_cp_async16(saddr, gptr, src_bytes);
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(saddr), "l"(gptr),
                 "n"(BYTES), "r"(src_bytes));
}
__device__ __forceinline__ void scree_cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Wait until at most N of this thread's committed groups are pending. */
template <int N> __device__ __forceinline__ void scree_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* 2^x, approximate, subnormals flushed; ex2(-inf) = +0. */
__device__ __forceinline__ float scree_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/* tanh(x) from ex2, accurate to a few ulp of fp32 (tanh.approx.f32 is not):
 * the attention kernels' softcap, s -> c tanh(s / c). */
__device__ __forceinline__ float scree_tanh(float x) {
  const float ax = fabsf(x);
  const float e = scree_ex2(-2.8853900817779268f * ax); /* exp(-2|x|) */
  const float t = (1.f - e) / (1.f + e);
  return copysignf(t, x);
}
/* log2(x), approximate; lg2(0) = -inf. */
__device__ __forceinline__ float scree_lg2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* Two floats to one register of two 16-bit values, round to nearest:
 * lo in bits 0..15, hi in bits 16..31. DT: 1 = fp16, 2 = bf16. */
template <int DT> __device__ __forceinline__ unsigned scree_pack2(float lo, float hi) {
  unsigned r;
  if constexpr (DT == 1)
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

#endif
