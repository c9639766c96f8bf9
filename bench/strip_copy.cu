/*
 * strip_copy.cu - how fast the access patterns of the ragged softmax can
 * move bytes on a GPU, with no softmax at all: a baseline for its kernels
 * (docs/kernels/rowwise.md, "What limits it now"). A standalone CUDA
 * program, not part of the build (the library compiles its kernels with
 * NVRTC at run time; this needs nvcc):
 *
 *   nvcc -O3 -arch=sm_90 -o strip_copy bench/strip_copy.cu
 *   ./strip_copy            the patterns below on three shapes
 *   ./strip_copy 128 256    cudaMemcpyAsync alone, on 128 and 256 MiB
 *
 * For each shape (16384 x 8 KiB, 4096 x 16 KiB and 65536 x 2 KiB rows: the
 * benchmark's fp16 shapes), against cudaMemcpyAsync of the same bytes on the
 * same buffers (events around one call, median of 30):
 *
 *   strip  x copied to y in strips: a CTA of 256 threads per strip of W
 *          bytes (16 bytes a thread) and R consecutive rows, each thread
 *          loading 8 rows of its column before storing them; CTAs ordered
 *          strips first, so the CTAs that run together cover whole rows.
 *          The order in which the ragged softmax reads and writes.
 *   twopass  units of (about 1024 rows, a W-byte column block): pass 1
 *          reads a chunk of R rows of a unit (and reduces it), pass 2 waits
 *          until every chunk of its unit has been read, then reads the
 *          chunk again (from L2, if it is still there) and writes it; items
 *          from a counter on a persistent grid, pass 2 of unit u interleaved
 *          with pass 1 of unit u + lag; hint 1 marks pass 1's loads
 *          evict_last and pass 2's accesses evict_first. What a two-pass
 *          softmax over whole rows would move.
 *
 * Every result is checked (y == x) before the next.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                   \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

/* 16-byte load and store; H 1: load marked evict_last in L2, H 2: access
 * marked evict_first. */
template <int H> __device__ __forceinline__ uint4 ldv(const void *p) {
  uint4 v;
  if (H == 1)
    asm volatile("{.reg .b64 pol; createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n"
                 "ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;}"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  else if (H == 2)
    asm volatile("{.reg .b64 pol; createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
                 "ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;}"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  else
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  return v;
}
template <int H> __device__ __forceinline__ void stv(void *p, uint4 v) {
  if (H == 2)
    asm volatile("{.reg .b64 pol; createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
                 "st.global.L1::no_allocate.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, pol;}"
                 :
                 : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}

/* Rows [t0, t0 + n) of one W-byte column block at off, 8 rows a thread in
 * flight: copied to y (COPY), or read and folded into acc. */
template <bool COPY, int HL, int HS>
__device__ __forceinline__ void rows(const char *x, char *y, long off, int rowb, int n, int tpr,
                                     unsigned &acc) {
  const int groups = blockDim.x / tpr, g = threadIdx.x / tpr;
  for (int k = g; k < n; k += groups * 8) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; u++)
      if (k + u * groups < n) v[u] = ldv<HL>(x + off + (long)(k + u * groups) * rowb);
#pragma unroll
    for (int u = 0; u < 8; u++)
      if (k + u * groups < n) {
        if (COPY)
          stv<HS>(y + off + (long)(k + u * groups) * rowb, v[u]);
        else
          acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
      }
  }
}

/* CTA b: strip b % nstrips of rows [R * (b / nstrips), + R). */
__global__ void strip_copy(const char *x, char *y, int T, int rowb, int W, int R, int nstrips) {
  const int strip = blockIdx.x % nstrips, chunk = blockIdx.x / nstrips, tpr = W / 16;
  const long t0 = (long)chunk * R;
  const int n = (int)min((long)R, T - t0);
  unsigned acc = 0;
  rows<true, 0, 0>(x, y, t0 * rowb + (long)strip * W + threadIdx.x % tpr * 16, rowb, n, tpr, acc);
}

/* items[i]: x = pass (0, 1) | column block << 1, y = unit, z = first row,
 * w = rows. done[u] counts unit u's pass-1 chunks over all launches (rep
 * launches before this one); each launch takes nitems + gridDim.x numbers
 * from ctr. */
template <int H>
__global__ void twopass(const char *x, char *y, int rowb, int W, const int4 *items, int nitems,
                        int *ctr, int *done, const int *nch, unsigned *sink, int rep) {
  __shared__ int sh;
  const int tpr = W / 16;
  unsigned acc = 0;
  const int base = rep * (nitems + (int)gridDim.x);
  for (;;) {
    if (threadIdx.x == 0) sh = atomicAdd(ctr, 1) - base;
    __syncthreads();
    const int i = sh;
    __syncthreads();
    if (i >= nitems) break;
    const int4 it = items[i];
    const long off = (long)it.z * rowb + (long)(it.x >> 1) * W + threadIdx.x % tpr * 16;
    if ((it.x & 1) == 0) {
      rows<false, H ? 1 : 0, 0>(x, y, off, rowb, it.w, tpr, acc);
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(done + it.y, 1);
      }
    } else {
      if (threadIdx.x == 0) {
        const int want = nch[it.y] * (rep + 1);
        for (;;) {
          int v;
          asm volatile("ld.acquire.gpu.global.b32 %0, [%1];"
                       : "=r"(v)
                       : "l"(done + it.y)
                       : "memory");
          if (v >= want) break;
          __nanosleep(64);
        }
      }
      __syncthreads();
      rows<true, H ? 2 : 0, H ? 2 : 0>(x, y, off, rowb, it.w, tpr, acc);
    }
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

/* About 1024 rows a sequence, lengths uniform in [0.25, 1.75] x the mean. */
static std::vector<int> seq_lens(int total, unsigned seed) {
  const int n = std::max(2, total / 1024);
  std::vector<double> w(n);
  double sw = 0;
  for (int i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    w[i] = 0.25 + 1.5 * ((seed >> 8) & 0xffff) / 65536.0;
    sw += w[i];
  }
  std::vector<int> l(n);
  int s = 0;
  for (int i = 0; i < n; i++) l[i] = std::max(1, (int)(total * w[i] / sw)), s += l[i];
  l[n - 1] += total - s;
  return l;
}

/* Median of reps single calls (f(call index), after 3 warm-up calls), us. */
template <class F> static float timeit(F f, int reps = 30) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; i++) f(i);
  std::vector<float> ts;
  for (int r = 0; r < reps; r++) {
    CK(cudaEventRecord(a));
    f(r + 3);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms * 1000);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

int main(int argc, char **argv) {
  if (argc > 1) { /* cudaMemcpyAsync alone, per size in MiB */
    for (int a = 1; a < argc; a++) {
      const long nb = atol(argv[a]) << 20;
      char *x, *y;
      CK(cudaMalloc(&x, nb));
      CK(cudaMalloc(&y, nb));
      const float t = timeit([&](int) { cudaMemcpyAsync(y, x, nb, cudaMemcpyDeviceToDevice); }, 50);
      std::printf("memcpy %ld MiB: %.1f us (%.0f GB/s)\n", nb >> 20, t, 2.0 * nb / t / 1e3);
      CK(cudaFree(x));
      CK(cudaFree(y));
    }
    return 0;
  }
  int nsm;
  CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, nsm);
  const int shapes[3][2] = {{16384, 8192}, {4096, 16384}, {65536, 2048}};
  const long maxb = 16384L * 8192;
  char *x, *y;
  unsigned *sink;
  int *ctr, *done;
  CK(cudaMalloc(&x, maxb));
  CK(cudaMalloc(&y, maxb));
  CK(cudaMalloc(&sink, 1 << 24));
  CK(cudaMalloc(&ctr, 4));
  CK(cudaMalloc(&done, 1 << 20));
  std::vector<unsigned> hx(maxb / 4), hy(maxb / 4);
  for (size_t i = 0; i < hx.size(); i++) hx[i] = (unsigned)(i * 2654435761u);
  CK(cudaMemcpy(x, hx.data(), maxb, cudaMemcpyHostToDevice));
  auto check = [&](long nb) {
    CK(cudaMemcpy(hy.data(), y, nb, cudaMemcpyDeviceToHost));
    const bool ok = std::memcmp(hx.data(), hy.data(), nb) == 0;
    CK(cudaMemset(y, 0, nb));
    return ok ? "ok" : "WRONG";
  };
  for (const auto &sh : shapes) {
    const int T = sh[0], rowb = sh[1];
    const long nb = (long)T * rowb;
    const float tm = timeit([&](int) { cudaMemcpyAsync(y, x, nb, cudaMemcpyDeviceToDevice); });
    std::printf("%d rows of %d bytes (%.0f MB moved): memcpy %.1f us (%.0f GB/s) %s\n", T, rowb,
                2.0 * nb / 1e6, tm, 2.0 * nb / tm / 1e3, check(nb));
    for (int W : {128, 256, 512, 1024, 2048, 4096}) {
      if (W > rowb) continue;
      for (int R : {256, 512, 1024}) {
        const int nstrips = rowb / W, nchunks = (T + R - 1) / R;
        const float t = timeit(
            [&](int) { strip_copy<<<nstrips * nchunks, 256>>>(x, y, T, rowb, W, R, nstrips); });
        std::printf("  strip W=%5d R=%4d: %7.1f us %5.1f%% of memcpy %s\n", W, R, t, 100 * tm / t,
                    check(nb));
      }
    }
    const std::vector<int> lens = seq_lens(T, T * 31 + rowb / 2);
    for (int W : {1024, 2048, 4096}) {
      if (W > rowb) continue;
      for (int R : {64, 128, 256}) {
        for (int lag : {1, 2}) {
          for (int hint : {0, 1}) {
            /* Units in order (sequence, column block); items: pass 1 of
             * unit u interleaved with pass 2 of unit u - lag. */
            std::vector<std::vector<int4>> p1, p2;
            std::vector<int> nch;
            int t0 = 0;
            for (int L : lens) {
              for (int cb = 0; cb < rowb / W; cb++) {
                const int u = (int)nch.size();
                std::vector<int4> a, b;
                for (int k = 0; k < L; k += R) {
                  a.push_back(make_int4(cb << 1, u, t0 + k, std::min(R, L - k)));
                  b.push_back(make_int4(1 | cb << 1, u, t0 + k, std::min(R, L - k)));
                }
                nch.push_back((int)a.size());
                p1.push_back(a);
                p2.push_back(b);
              }
              t0 += L;
            }
            const int U = (int)nch.size();
            std::vector<int4> items;
            for (int u = 0; u < U + lag; u++) {
              const std::vector<int4> none;
              const std::vector<int4> &a = u < U ? p1[u] : none, &b = u >= lag ? p2[u - lag] : none;
              for (size_t ia = 0, ib = 0; ia < a.size() || ib < b.size();) {
                if (ia < a.size()) items.push_back(a[ia++]);
                if (ib < b.size()) items.push_back(b[ib++]);
              }
            }
            int4 *ditems;
            int *dnch;
            CK(cudaMalloc(&ditems, items.size() * sizeof(int4)));
            CK(cudaMalloc(&dnch, U * 4));
            CK(cudaMemcpy(ditems, items.data(), items.size() * sizeof(int4),
                          cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dnch, nch.data(), U * 4, cudaMemcpyHostToDevice));
            for (int per : {4, 8}) {
              CK(cudaMemset(ctr, 0, 4));
              CK(cudaMemset(done, 0, U * 4));
              const int grid = nsm * per, n = (int)items.size();
              const float t = timeit([&](int rep) {
                if (hint)
                  twopass<1><<<grid, 256>>>(x, y, rowb, W, ditems, n, ctr, done, dnch, sink, rep);
                else
                  twopass<0><<<grid, 256>>>(x, y, rowb, W, ditems, n, ctr, done, dnch, sink, rep);
              });
              std::printf("  twopass W=%5d R=%3d lag=%d hint=%d ctas=%d/SM units=%d: "
                          "%7.1f us %5.1f%% of memcpy %s\n",
                          W, R, lag, hint, per, U, t, 100 * tm / t, check(nb));
            }
            CK(cudaFree(ditems));
            CK(cudaFree(dnch));
          }
        }
      }
    }
    std::fflush(stdout);
  }
  return 0;
}
