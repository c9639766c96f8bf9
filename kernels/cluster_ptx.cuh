/*
 * cluster_ptx.cuh - the inline PTX the ragged softmax kernels use beyond
 * ptx.cuh: thread block clusters and mbarriers (sm_90), and the max / min
 * of two packed 16-bit pairs (sm_80).
 *
 * Also an async copy whose L2 fetches the whole line.
 *
 * Clusters: a CTA's rank in its cluster; the address of a shared variable
 * in another CTA of the cluster (mapa); 32-bit loads from there
 * (distributed shared memory); the cluster barrier, whole or as its two
 * halves; mbarriers, and asynchronous stores into another CTA (st.async)
 * that complete a transaction at an mbarrier there.
 *
 * The barrier: a thread alternates arrive and wait, and every non-exited
 * thread of the cluster takes part (.aligned: a warp's threads execute it
 * together). arrive.release orders every memory access of the thread
 * before the arrival, at cluster scope, which ptxas implements as a fence
 * at GPU scope (MEMBAR.ALL.GPU: the thread's stores must reach L2 first);
 * wait.acquire makes what the others released visible after it. A loop
 * that exchanges data every iteration therefore sends it by st.async,
 * waits for it on an mbarrier (no fence), and arrives relaxed. Another
 * CTA's shared memory may be accessed only while that CTA runs.
 *
 * Kept apart from ptx.cuh, which every attention kernel includes (its text
 * is part of their source hash). tests/emu compiles the ragged softmax's
 * cluster kernel on the CPU against its own version of this file: every
 * function here must stay one that file provides.
 */
#ifndef SCREE_CLUSTER_PTX_CUH
#define SCREE_CLUSTER_PTX_CUH

/* scree_cp_async (ptx.cuh: BYTES 4, 8 or 16 global -> shared, zero-filled
 * past src_bytes) with the L2 fetching the whole 128-byte line from memory
 * (.L2::128B): for accesses narrower than a line whose other bytes other
 * CTAs read soon after. */
template <int BYTES>
__device__ __forceinline__ void scree_cp_async_line(unsigned saddr, const void *gptr,
                                                    int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(saddr),
                 "l"(gptr), "r"(src_bytes));
  else
    asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], %2, %3;" ::"r"(saddr),
                 "l"(gptr), "n"(BYTES), "r"(src_bytes));
}

__device__ __forceinline__ unsigned scree_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
/* The address in CTA `rank`'s shared memory of the variable at saddr in
 * this CTA's (both 32-bit shared-window addresses). */
__device__ __forceinline__ unsigned scree_cluster_map(unsigned saddr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(saddr), "r"(rank));
  return r;
}
__device__ __forceinline__ float scree_cluster_ld_f32(unsigned addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void scree_cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void scree_cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void scree_cluster_sync() {
  scree_cluster_arrive();
  scree_cluster_wait();
}

/* The cluster barrier's arrival without ordering: for a CTA's progress
 * alone, where the data that crosses CTAs goes by st.async and mbarriers. */
__device__ __forceinline__ void scree_cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

/* mbarriers in shared memory (8-byte aligned, 32-bit shared-window
 * addresses). init: `count` arrivals complete a phase (with a transaction
 * count of zero); the fence makes the initialisation visible to the
 * cluster's other CTAs, before a cluster barrier. */
__device__ __forceinline__ void scree_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void scree_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* One arrival at this CTA's mbarrier, expecting `bytes` of transactions
 * (st.async) in the current phase; they may land before or after it. */
__device__ __forceinline__ void scree_mbar_arrive_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
/* The same at another CTA's mbarrier (a shared::cluster address from
 * scree_cluster_map), without ordering: the transactions carry the data. */
__device__ __forceinline__ void scree_mbar_arrive_expect_remote(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%0], %1;" ::"r"(
                   bar),
               "r"(bytes)
               : "memory");
}
/* Waits until the phase of this CTA's mbarrier with the given parity has
 * completed; the st.async data of that phase is visible after it. */
__device__ __forceinline__ void scree_mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "scree_mbar_wait_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra scree_mbar_wait_%=;\n\t}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
/* A 32-bit store into another CTA's shared memory that completes 4 bytes
 * of a transaction at that CTA's mbarrier (both shared::cluster addresses). */
__device__ __forceinline__ void scree_st_async_u32(unsigned addr, unsigned v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%0], %1, [%2];" ::"r"(
                   addr),
               "r"(v), "r"(bar)
               : "memory");
}

/* Per 16-bit half of a and b, the larger (the smaller) value: fp16 pairs
 * (DT 1) or bf16 pairs (DT 2). A NaN half yields the other operand's half. */
template <int DT> __device__ __forceinline__ unsigned scree_pk16_max(unsigned a, unsigned b) {
  unsigned d;
  if constexpr (DT == 2)
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  else
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
template <int DT> __device__ __forceinline__ unsigned scree_pk16_min(unsigned a, unsigned b) {
  unsigned d;
  if constexpr (DT == 2)
    asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  else
    asm("min.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

#endif
