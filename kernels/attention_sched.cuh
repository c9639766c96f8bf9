/*
 * attention_sched.cuh - what the attention implementations share about their
 * work: the key-tile range of a query tile (masking included), the
 * longest-first schedule kernel (scree_attention_schedule) and the decoding
 * of a schedule's work index into (tile, head).
 *
 * Include it inside namespace scree_attn, after these are defined there:
 *   BM, BN        query rows per work item, keys per tile (int constants)
 *   CAUSAL, WINDOW  bool constants (the variant)
 * and with SCREE_SCHED defined (2: the persistent grid, gridDim.x CTAs in
 * flight). It closes the namespace to define the schedule kernel and
 * reopens it at the end. Reads no other macro but SCREE_PAGED (1: the
 * schedule's second argument is seqlens_k, the key count of each sequence,
 * instead of cu_seqlens_k; kernels/attention_hopper.cu) and
 * SCREE_ATTN_RANK_CHUNK (a development switch that fixes the rank chunk).
 */
#ifndef SCREE_ATTENTION_SCHED_CUH
#define SCREE_ATTENTION_SCHED_CUH

/* Keys of sequence b: from cu_seqlens_k (k[b + 1] - k[b]), or, paged, from
 * seqlens_k (k[b]). */
__device__ __forceinline__ int keys_of(const int *k, int b) {
#if defined(SCREE_PAGED) && SCREE_PAGED
  return k[b];
#else
  return k[b + 1] - k[b];
#endif
}

/* Key-tile range of q-tile m: visit tiles [lo, hi); tiles in
 * [full_lo, full_hi) need no mask. */
struct kv_range {
  int lo, hi, full_lo, full_hi;
};

__device__ __forceinline__ kv_range tile_range(int Lq, int Lk, int m, int wl, int wr) {
  const bool rb = CAUSAL || (WINDOW && wr >= 0);
  const bool lb = WINDOW && wl >= 0;
  const long long right = CAUSAL ? 0 : (long long)wr;
  const long long off = (long long)Lk - Lq;
  const long long r0 = (long long)m * BM;
  const long long r1 = (long long)min(m * BM + BM, Lq) - 1;
  long long kend = Lk, kbeg = 0;
  if (rb) kend = min(kend, r1 + off + right + 1);
  if (lb) kbeg = max(0ll, r0 + off - wl);
  kv_range r;
  if (kend <= kbeg) {
    r.lo = r.hi = r.full_lo = r.full_hi = 0;
    return r;
  }
  r.lo = (int)(kbeg / BN);
  r.hi = (int)((kend + BN - 1) / BN);
  long long fh = Lk / BN;
  if (rb) {
    const long long x = r0 + off + right + 1; /* keys < x are visible to row r0 */
    fh = min(fh, x > 0 ? x / BN : 0ll);
  }
  long long fl = 0;
  if (lb) {
    const long long y = r1 + off - wl; /* keys >= y are visible to row r1 */
    fl = y > 0 ? (y + BN - 1) / BN : 0;
  }
  r.full_lo = (int)fl;
  r.full_hi = (int)fh;
  return r;
}

/* SCHED 1 and 2: work index w -> (rank r, head h). Ranks are sorted by
 * work, longest first; they are taken in chunks of RC ranks, and inside a
 * chunk head by head (heads of one kv head adjacent):
 *   w = (chunk * heads_q + h) * size + (r - chunk * RC),  size = the chunk's
 *   number of ranks (RC, or less for the last chunk).
 * Small RC is strict LPT (every head's longest tiles in the first wave);
 * large RC keeps few heads, hence little K/V, in flight (L2). Measured on
 * H100: heads innermost thrashed L2 on 8k-token MHA (6% slower), while on a
 * 6-wave batch with one 2048-token sequence RC = 16 beat 64 by 3-4% (the
 * longest tile is ~half the run). So RC = 2 * waves, clamped to [16, 128],
 * waves = ntiles * heads_q / (CTAs in flight); in flight = gridDim.x for the
 * persistent grid, else 2 per SM (%nsmid). Returns false past the end. */
__device__ __forceinline__ bool decode_work(int w, int ntiles, int heads_q, int &r, int &h) {
  const long long total = (long long)ntiles * heads_q;
  if ((long long)w >= total) return false;
#ifdef SCREE_ATTN_RANK_CHUNK
  const int RC = SCREE_ATTN_RANK_CHUNK;
#else
  int inflight;
  if (SCREE_SCHED == 2) {
    inflight = (int)gridDim.x;
  } else {
    unsigned nsm;
    asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
    inflight = 2 * (int)nsm;
  }
  const int RC = (int)max(16ll, min(128ll, 2 * total / max(inflight, 1)));
#endif
  const long long per_chunk = (long long)RC * heads_q;
  const int c = (int)(w / per_chunk);
  const int rem = (int)(w - c * per_chunk);
  const int size = min(RC, ntiles - c * RC); /* the last chunk may be short */
  h = rem / size;
  r = c * RC + (rem - h * size);
  return true;
}

} /* namespace scree_attn */

/* Schedule for SCREE_SCHED 1 and 2: every (sequence, q-tile) pair, sorted by
 * the number of key tiles it visits (descending; counting sort over
 * NBUCKET buckets: exact below 2048 tiles, 32 tiles wide above). One CTA of
 * 1024 threads; static shared memory only (16.1 KiB). Writes sched[0] = 0
 * (the persistent grid's counter), sched[1] = ntiles (at most cap), and
 * (sequence, q-tile) at sched[2 + 2r], sched[3 + 2r] for rank r < ntiles.
 * cu_k: cu_seqlens_k, or with SCREE_PAGED seqlens_k (keys_of). */
namespace scree_attn {
constexpr int NBUCKET = 4096;
__device__ __forceinline__ int work_bucket(int w) {
  return w < 2048 ? w : min(2048 + ((w - 2048) >> 5), NBUCKET - 1);
}
} /* namespace scree_attn */

extern "C" __global__ void __launch_bounds__(1024)
scree_attention_schedule(const int *cu_q, const int *cu_k, int batch, int *sched, int cap,
                         int window_left, int window_right) {
  using namespace scree_attn;
  __shared__ int cnt[NBUCKET];
  __shared__ int wsum[32];
  const int tid = threadIdx.x, nthr = blockDim.x;
  const int lane = tid & 31, warp = tid >> 5, nw = nthr >> 5;
  for (int i = tid; i < NBUCKET; i += nthr) cnt[i] = 0;
  __syncthreads();
  /* One warp per sequence, lanes over its q-tiles: balances a few
   * 128k-token sequences as well as thousands of short ones. Atomics are
   * aggregated per bucket over the warp (__match_any_sync), which also keeps
   * a warp's consecutive q-tiles in order inside a bucket. */
  for (int b = warp; b < batch; b += nw) {
    const int q0 = cu_q[b], Lq = cu_q[b + 1] - q0, Lk = keys_of(cu_k, b);
    const int nt = (Lq + BM - 1) / BM;
    for (int m0 = 0; m0 < nt; m0 += 32) {
      const int m = m0 + lane;
      int bk = -1;
      if (m < nt) {
        const kv_range r = tile_range(Lq, Lk, m, window_left, window_right);
        bk = work_bucket(r.hi - r.lo);
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bk);
      if (bk >= 0 && lane == __ffs(peers) - 1) atomicAdd(&cnt[bk], __popc(peers));
    }
  }
  __syncthreads();
  /* Exclusive offsets in descending-work order: thread tid owns positions
   * [tid * per, (tid + 1) * per) of the bucket list read from the top. */
  const int per = (NBUCKET + nthr - 1) / nthr;
  int loc = 0;
  for (int j = 0; j < per; j++) {
    const int i = tid * per + j;
    if (i < NBUCKET) loc += cnt[NBUCKET - 1 - i];
  }
  int incl = loc;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) wsum[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int x = lane < nw ? wsum[lane] : 0;
    int xi = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, xi, o);
      if (lane >= o) xi += y;
    }
    wsum[lane] = xi - x;
  }
  __syncthreads();
  int base = wsum[warp] + incl - loc;
  for (int j = 0; j < per; j++) {
    const int i = tid * per + j;
    if (i < NBUCKET) {
      const int c = cnt[NBUCKET - 1 - i];
      cnt[NBUCKET - 1 - i] = base;
      base += c;
    }
  }
  if (tid == nthr - 1) {
    sched[0] = 0;
    sched[1] = min(base, cap);
  }
  __syncthreads();
  for (int b = warp; b < batch; b += nw) {
    const int q0 = cu_q[b], Lq = cu_q[b + 1] - q0, Lk = keys_of(cu_k, b);
    const int nt = (Lq + BM - 1) / BM;
    for (int m0 = 0; m0 < nt; m0 += 32) {
      const int m = m0 + lane;
      int bk = -1;
      if (m < nt) {
        const kv_range r = tile_range(Lq, Lk, m, window_left, window_right);
        bk = work_bucket(r.hi - r.lo);
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bk);
      const int leader = __ffs(peers) - 1;
      int base = 0;
      if (bk >= 0 && lane == leader) base = atomicAdd(&cnt[bk], __popc(peers));
      base = __shfl_sync(0xffffffffu, base, leader);
      const int pos = base + __popc(peers & ((1u << lane) - 1u));
      if (bk >= 0 && pos < cap) {
        sched[2 + 2 * pos] = b;
        sched[3 + 2 * pos] = m;
      }
    }
  }
}

namespace scree_attn {

#endif
