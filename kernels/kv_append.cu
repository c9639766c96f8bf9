/*
 * kv_append.cu - new tokens' K and V written into their paged KV-cache slots
 * (vLLM's reshape_and_cache).
 *
 *   for t with s = slot_mapping[t] >= 0, every head h:
 *     k_cache[s >> page_shift][s & (page_size - 1)][h][:] = k[t][h][:]
 *     v_cache[...same slot...][h][:]                     = v[t][h][:]
 *
 * A bitwise copy: elements move as vectors of SCREE_VEC elements of the
 * dtype, never converted. Slots below 0 (the -1 of padding tokens) are
 * skipped.
 *
 * Thread mapping: a row is one (token, head) pair, row r = t * heads + h,
 * and holds head_dim / VEC vectors of k and as many of v. A group of
 * SCREE_LANES consecutive threads takes a row; lane l moves vectors l,
 * l + LANES, ... of it. A CTA of SCREE_THREADS threads holds THREADS / LANES
 * groups and takes SCREE_UNROLL rows per group at a time (rows base + g,
 * base + g + GROUPS, ...): it loads the k and v vectors of all UNROLL rows
 * before storing any, so 2 * UNROLL 16-byte loads are in flight per
 * thread. The grid strides over the rows. Each element of k and v is read
 * once, each written element of a cache written once; the slot of a token
 * is read by every thread of its rows' groups (one broadcast load each).
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_LANES    threads per row: 1, 2, 4, 8, 16 or 32
 *   SCREE_THREADS  threads per CTA: 32, 64, 128, 256, 512 or 1024, at least
 *                  LANES
 *   SCREE_VEC      elements per access: 1, 2, 4 or 8, at most 16 bytes
 *   SCREE_UNROLL   rows per group loaded before any store: 1, 2, 4 or 8,
 *                  with the CTA's estimated registers (SCREE_EST_REGS)
 *                  within 64K
 *   SCREE_DTYPE    dtype code of k, v and the caches (common.cuh)
 *
 * The host guarantees: every pointer aligned to VEC elements; every stride
 * and head_dim multiples of VEC; rows = total_new * heads_kv < 2^31; page
 * size a power of two (1 to 256); the caches apart from k, v and
 * slot_mapping and from each other (or interleaved page by page), and no
 * two elements of a cache at one address; slots -1 or in [0, num_pages *
 * page_size), none twice (checked on the host only with validation on).
 *
 * Test alone: ctest -R kv_append    Bench: build/bench/bench_ops --op kv_append
 */

static_assert(SCREE_LANES == 1 || SCREE_LANES == 2 || SCREE_LANES == 4 || SCREE_LANES == 8 ||
                  SCREE_LANES == 16 || SCREE_LANES == 32,
              "LANES must be 1, 2, 4, 8, 16 or 32");
static_assert((SCREE_THREADS & (SCREE_THREADS - 1)) == 0 && SCREE_THREADS >= 32 &&
                  SCREE_THREADS <= 1024,
              "THREADS must be a power of two in [32, 1024]");
static_assert(SCREE_VEC == 1 || SCREE_VEC == 2 || SCREE_VEC == 4 || SCREE_VEC == 8,
              "VEC must be 1, 2, 4 or 8");
static_assert(SCREE_UNROLL == 1 || SCREE_UNROLL == 2 || SCREE_UNROLL == 4 || SCREE_UNROLL == 8,
              "UNROLL must be 1, 2, 4 or 8");
static_assert(SCREE_DTYPE >= 0 && SCREE_DTYPE <= 2, "DTYPE must be 0 (fp32), 1 (fp16), 2 (bf16)");

typedef scree_dtype_of<SCREE_DTYPE>::type et;
typedef scree_vec<et, SCREE_VEC> ev;
static_assert(sizeof(ev) <= 16, "VEC elements must be at most 16 bytes");

#define SCREE_GROUPS (SCREE_THREADS / SCREE_LANES)

/* Registers per thread, estimated: about 28 for indices and the loop, and
 * per unrolled row its three offsets, four head-row addresses and two
 * vectors in flight, about 20 (ptxas on sm_90: 36, 66, 102 and 168 at
 * UNROLL 1, 2, 4 and 8). The CTA must fit the 64K-register file with it,
 * or ptxas spills to meet __launch_bounds__ (THREADS 1024 at UNROLL 2
 * does). */
#define SCREE_EST_REGS (28 + 20 * SCREE_UNROLL)
static_assert(SCREE_THREADS * SCREE_EST_REGS <= 65536,
              "THREADS threads of the estimated registers exceed 64K");

extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_kv_append(const et *__restrict__ k, const et *__restrict__ v, et *__restrict__ k_cache,
                et *__restrict__ v_cache, const long long *__restrict__ slot_mapping, int rows,
                int heads, int head_dim, int page_shift, long long k_token_stride,
                long long k_head_stride, long long v_token_stride, long long v_head_stride,
                long long cache_page_stride, long long cache_token_stride,
                long long cache_head_stride) {
  const int lane = threadIdx.x % SCREE_LANES;
  const int group = threadIdx.x / SCREE_LANES;
  const int nvec = head_dim / SCREE_VEC;
  const long long page_mask = (1ll << page_shift) - 1;
  const long long step = (long long)gridDim.x * (SCREE_GROUPS * SCREE_UNROLL);

  for (long long base = (long long)blockIdx.x * (SCREE_GROUPS * SCREE_UNROLL); base < rows;
       base += step) {
    /* Element offsets of the rows' k, v and cache head rows; dst < 0: the
     * row is past the end or its token is padding. */
    long long ko[SCREE_UNROLL], vo[SCREE_UNROLL], dst[SCREE_UNROLL];
#pragma unroll
    for (int u = 0; u < SCREE_UNROLL; u++) {
      const long long r = base + group + u * SCREE_GROUPS;
      ko[u] = vo[u] = 0;
      dst[u] = -1;
      if (r < rows) {
        const int t = (int)r / heads, h = (int)r - t * heads;
        const long long s = slot_mapping[t];
        ko[u] = t * k_token_stride + h * k_head_stride;
        vo[u] = t * v_token_stride + h * v_head_stride;
        if (s >= 0)
          dst[u] = (s >> page_shift) * cache_page_stride + (s & page_mask) * cache_token_stride +
                   h * cache_head_stride;
      }
    }
    for (int c = lane; c < nvec; c += SCREE_LANES) {
      ev a[SCREE_UNROLL], b[SCREE_UNROLL];
#pragma unroll
      for (int u = 0; u < SCREE_UNROLL; u++)
        if (dst[u] >= 0) {
          a[u] = reinterpret_cast<const ev *>(k + ko[u])[c];
          b[u] = reinterpret_cast<const ev *>(v + vo[u])[c];
        }
#pragma unroll
      for (int u = 0; u < SCREE_UNROLL; u++)
        if (dst[u] >= 0) {
          reinterpret_cast<ev *>(k_cache + dst[u])[c] = a[u];
          reinterpret_cast<ev *>(v_cache + dst[u])[c] = b[u];
        }
    }
  }
}
