/*
 * emu.h - enough of CUDA to run a scree kernel on the CPU, for tests of a
 * kernel's logic (index arithmetic, which thread reads what, barrier and
 * exchange protocols) where there is no GPU.
 *
 * A kernel source is compiled as C++ after this file: every thread of a
 * CTA is a fiber (ucontext) of one host thread, switched at every point
 * where CUDA threads would wait for each other (__syncthreads, a warp
 * shuffle, the cluster barrier, an mbarrier wait) and nowhere else, so the
 * run is deterministic for a given seed. What this file provides:
 *
 *   - the CUDA dialect a scree kernel uses: __global__, __device__,
 *     threadIdx and friends, shuffles, atomicAdd, __syncthreads;
 *   - common.cuh, ptx.cuh (the subset the ragged softmax uses) and
 *     cluster_ptx.cuh, defined here with their include guards, so that the
 *     kernel's own #include of them adds nothing: 16-bit conversions in
 *     software, exp2 and log2 from libm;
 *   - shared memory: a buffer per CTA (SCREE_SMEM_BASE; static __shared__
 *     variables become static, so only one-CTA kernels may use them);
 *     32-bit shared-window addresses carry the CTA's cluster rank;
 *   - cp.async as copies queued per thread and made (reading global memory
 *     then) only when a wait_group lets them complete, so that a read
 *     before the wait sees stale data;
 *   - thread block clusters (rank, mapa, ld/st.shared::cluster, the
 *     barrier with relaxed or release arrival), mbarriers with
 *     transaction counts, and st.async and remote arrivals, delivered in a
 *     random order at random later switches;
 *   - a launch (emu::launch) that keeps at most `resident` clusters alive
 *     at once, starting the next as one finishes, and reports a deadlock
 *     (every live thread waiting, nothing left to deliver), a barrier used
 *     wrongly, an mbarrier completing with more bytes than it expected, or
 *     an async store into a CTA that has exited.
 *
 * Not modelled: timing, memory-model reorderings of plain loads and stores,
 * warp divergence (all 32 lanes of a warp must reach a shuffle together).
 */
#ifndef SCREE_EMU_H
#define SCREE_EMU_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

struct emu_dim3 {
  unsigned x, y, z;
};

namespace emu {

struct Cta;

/* What a CUDA thread sees of itself. */
struct ThreadView {
  emu_dim3 tid, bid, bdim, gdim;
};

ThreadView *view();
unsigned char *smem(); /* this CTA's dynamic shared memory */

/* ---- waits -------------------------------------------------------------- */
void syncthreads();
uint64_t warp_exchange(uint64_t mine, int src_lane); /* all 32 lanes, together */

/* ---- shared-window addresses -------------------------------------------- */
unsigned smem_addr(const void *p);             /* this CTA's, with its rank */
unsigned map_rank(unsigned addr, unsigned rank); /* the same offset in another CTA */
void *resolve(unsigned addr);                  /* in the CTA the address names */

/* ---- clusters ----------------------------------------------------------- */
unsigned cluster_rank();
void cluster_arrive(bool release);
void cluster_wait();

/* ---- mbarriers and asynchronous stores ---------------------------------- */
void mbar_init(unsigned bar, unsigned count);
void mbar_arrive_expect(unsigned bar, unsigned bytes);
void mbar_arrive_expect_remote(unsigned bar, unsigned bytes);
void mbar_wait(unsigned bar, unsigned parity);
void st_async_u32(unsigned addr, unsigned v, unsigned bar);

/* ---- cp.async ----------------------------------------------------------- */
void cp_async(unsigned dst, const void *src, int bytes, int src_bytes);
void cp_commit();
void cp_wait(int pending);

/* ---- launches ----------------------------------------------------------- */
struct Launch {
  emu_dim3 grid, block;
  unsigned cluster;   /* CTAs per cluster, along x (1: none) */
  size_t smem;        /* dynamic shared memory per CTA */
  int resident;       /* clusters alive at once */
  uint64_t seed;      /* of the delivery order of asynchronous operations */
  std::function<void()> body;
};
/* Runs every CTA of the grid; "" on success, else what went wrong. */
const char *launch(const Launch &l);

/* Raised by a kernel thread for a misuse; ends the launch with it. */
[[noreturn]] void fail(const char *what);

} // namespace emu

/* ---- the CUDA dialect --------------------------------------------------- */
#define __global__
#define __device__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)
#define threadIdx (emu::view()->tid)
#define blockIdx (emu::view()->bid)
#define blockDim (emu::view()->bdim)
#define gridDim (emu::view()->gdim)
#define __syncthreads() emu::syncthreads()
#define SCREE_SMEM_BASE (emu::smem())

template <typename T> static inline uint64_t emu_bits(T v) {
  static_assert(sizeof(T) <= 8, "shuffled values are at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <typename T> static inline T emu_from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int o, int width = 32) {
  const int lane = (int)(threadIdx.x % 32);
  const int src = (lane & ~(width - 1)) | ((lane ^ o) & (width - 1));
  return emu_from_bits<T>(emu::warp_exchange(emu_bits(v), src));
}
template <typename T> static inline T __shfl_up_sync(unsigned, T v, unsigned o, int width = 32) {
  const int lane = (int)(threadIdx.x % 32), base = lane & ~(width - 1);
  const int src = lane - (int)o < base ? lane : lane - (int)o;
  return emu_from_bits<T>(emu::warp_exchange(emu_bits(v), src));
}
static inline float __uint_as_float(unsigned u) { return emu_from_bits<float>(u); }
static inline float __int_as_float(int i) { return emu_from_bits<float>((unsigned)i); }
static inline unsigned __float_as_uint(float f) { return (unsigned)emu_bits(f); }
static inline void __threadfence() {}
static inline int atomicAdd(int *p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
using std::fmaxf;

/* ---- common.cuh --------------------------------------------------------- */
#define SCREE_COMMON_CUH
struct scree_half { unsigned short bits; };
struct scree_bf16 { unsigned short bits; };
template <int CODE> struct scree_dtype_of;
template <> struct scree_dtype_of<0> { typedef float type; };
template <> struct scree_dtype_of<1> { typedef scree_half type; };
template <> struct scree_dtype_of<2> { typedef scree_bf16 type; };

float emu_half_to_float(unsigned short h);
unsigned short emu_float_to_half(float f);  /* round to nearest even */
unsigned short emu_float_to_bf16(float f);  /* round to nearest even */

static inline float scree_to_float(float v) { return v; }
static inline float scree_to_float(scree_half v) { return emu_half_to_float(v.bits); }
static inline float scree_to_float(scree_bf16 v) { return __uint_as_float((unsigned)v.bits << 16); }
template <typename T> static inline T scree_from_float(float f);
template <> inline float scree_from_float<float>(float f) { return f; }
template <> inline scree_half scree_from_float<scree_half>(float f) {
  return scree_half{emu_float_to_half(f)};
}
template <> inline scree_bf16 scree_from_float<scree_bf16>(float f) {
  return scree_bf16{emu_float_to_bf16(f)};
}
template <typename T, int N> struct alignas(sizeof(T) * N) scree_vec {
  T v[N];
};

/* ---- ptx.cuh (what the ragged softmax kernels use) ------------------------ */
#define SCREE_PTX_CUH
static inline unsigned scree_smem_u32(const void *p) { return emu::smem_addr(p); }
static inline void scree_cp_async16(unsigned saddr, const void *gptr, int src_bytes) {
  emu::cp_async(saddr, gptr, 16, src_bytes);
}
template <int BYTES> static inline void scree_cp_async(unsigned saddr, const void *gptr, int n) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  emu::cp_async(saddr, gptr, BYTES, n);
}
static inline void scree_cp_async_commit() { emu::cp_commit(); }
template <int N> static inline void scree_cp_async_wait() { emu::cp_wait(N); }
static inline float scree_ex2(float x) { return std::exp2(x); }
static inline float scree_lg2(float x) { return std::log2(x); }
template <int DT> static inline unsigned scree_pack2(float lo, float hi) {
  const unsigned short a = DT == 1 ? emu_float_to_half(lo) : emu_float_to_bf16(lo);
  const unsigned short b = DT == 1 ? emu_float_to_half(hi) : emu_float_to_bf16(hi);
  return (unsigned)a | (unsigned)b << 16;
}

/* ---- cluster_ptx.cuh ---------------------------------------------------- */
#define SCREE_CLUSTER_PTX_CUH
static inline unsigned scree_cluster_rank() { return emu::cluster_rank(); }
static inline unsigned scree_cluster_map(unsigned saddr, unsigned rank) {
  return emu::map_rank(saddr, rank);
}
static inline float scree_cluster_ld_f32(unsigned addr) {
  float v;
  std::memcpy(&v, emu::resolve(addr), 4);
  return v;
}
static inline void scree_cluster_arrive() { emu::cluster_arrive(true); }
static inline void scree_cluster_arrive_relaxed() { emu::cluster_arrive(false); }
static inline void scree_cluster_wait() { emu::cluster_wait(); }
/* The L2 prefetch size changes nothing here: scree_cp_async. */
template <int BYTES> static inline void scree_cp_async_line(unsigned saddr, const void *gptr, int n) {
  scree_cp_async<BYTES>(saddr, gptr, n);
}
static inline void scree_cluster_sync() {
  emu::cluster_arrive(true);
  emu::cluster_wait();
}
static inline void scree_mbar_init(unsigned bar, unsigned count) { emu::mbar_init(bar, count); }
static inline void scree_mbar_init_fence() {}
static inline void scree_mbar_arrive_expect(unsigned bar, unsigned bytes) {
  emu::mbar_arrive_expect(bar, bytes);
}
static inline void scree_mbar_arrive_expect_remote(unsigned bar, unsigned bytes) {
  emu::mbar_arrive_expect_remote(bar, bytes);
}
static inline void scree_mbar_wait(unsigned bar, unsigned parity) { emu::mbar_wait(bar, parity); }
static inline void scree_st_async_u32(unsigned addr, unsigned v, unsigned bar) {
  emu::st_async_u32(addr, v, bar);
}
/* Per 16-bit half: the larger (smaller) value; a NaN half yields the other. */
float emu_pk16_elem(int dt, unsigned short h);
template <int DT> static inline unsigned emu_pk16(unsigned a, unsigned b, bool mx) {
  unsigned r = 0;
  for (int k = 0; k < 2; k++) {
    const unsigned short ha = (unsigned short)(a >> (16 * k)), hb = (unsigned short)(b >> (16 * k));
    const float fa = emu_pk16_elem(DT, ha), fb = emu_pk16_elem(DT, hb);
    unsigned short pick;
    if (std::isnan(fa))
      pick = hb;
    else if (std::isnan(fb))
      pick = ha;
    else
      pick = (mx ? fa >= fb : fa <= fb) ? ha : hb;
    r |= (unsigned)pick << (16 * k);
  }
  return r;
}
template <int DT> static inline unsigned scree_pk16_max(unsigned a, unsigned b) {
  return emu_pk16<DT>(a, b, true);
}
template <int DT> static inline unsigned scree_pk16_min(unsigned a, unsigned b) {
  return emu_pk16<DT>(a, b, false);
}

#endif
