/*
 * attention_backward_common.cuh - what the two attention backward kernels
 * (kernels/attention_backward.cu, the generic one, and
 * kernels/attention_backward_hopper.cu) share: the params struct the host
 * fills (ops/attention_backward.c's kparams), the fp32 vector reduction,
 * the preprocess kernel (D, lse in the log2 domain, the zeroed dQ
 * accumulator and counters) and the dq conversion kernel.
 *
 * Include it after namespace scree_attn has defined elem, D, CPR, CPRP,
 * neg_inf() and pos_inf(), outside the namespace with `using namespace
 * scree_attn;` in effect. Reads no macro but SCREE_DTYPE (through elem).
 */
#ifndef SCREE_ATTENTION_BACKWARD_COMMON_CUH
#define SCREE_ATTENTION_BACKWARD_COMMON_CUH

namespace scree_attn {

/* p[0] += a, p[1] += b in global memory, result unused (8-byte aligned p):
 * one vector reduction on sm_90 and newer (red.global.add.v2.f32, PTX 8.1),
 * else two (atomicAdd without its result compiles to a reduction). */
__device__ __forceinline__ void red_add2(float *p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

/* The sizes and scalars of a call (one struct parameter). */
struct params {
  const elem *q, *k, *v, *out, *dout;
  const float *lse;
  const int *cu_q, *cu_k;
  elem *dq, *dk, *dv;
  float *dlse2;   /* workspace: D [heads_q][total_q], then lse2 [heads_q][total_q] */
  float *dqacc;   /* workspace: [heads_q][total_q][D] fp32 */
  int *counters;  /* workspace: [0] tickets, then [heads_q][ctiles] order counters */
  long long q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs, do_ts, do_hs;
  long long dq_ts, dq_hs, dk_ts, dk_hs, dv_ts, dv_hs;
  long long total_q;
  int batch, heads_q, heads_kv, group, max_ktiles, ctiles, det;
  float scale, scale_log2, cap_in, cap_out;
  int wl, wr;
};

} /* namespace scree_attn */


/* D, lse2, the accumulator and the counters. Row r = t * heads_q + h per
 * group of GW lanes (CPR chunks of 8 elements used); grid-stride. */
constexpr int GW = CPRP;
extern "C" __global__ void __launch_bounds__(256)
scree_attention_bwd_prep(const params p, long long rows, long long ncounters) {
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long nthr = (long long)gridDim.x * blockDim.x;
  for (long long i = tid; i < ncounters; i += nthr) p.counters[i] = 0;
  const int c = (int)(threadIdx.x % GW);
  typedef scree_vec<elem, 8> v8;
  typedef scree_vec<float, 4> f4;
  /* Every lane of a group reaches the shuffles (rows are uniform per group,
   * and a whole warp's groups share the loop trip count). */
  const long long gpb = blockDim.x / GW;
  for (long long base = (long long)blockIdx.x * gpb; base < rows; base += (long long)gridDim.x * gpb) {
    const long long r = base + threadIdx.x / GW;
    const bool ok = r < rows;
    float s = 0.f;
    long long t = 0;
    int h = 0;
    if (ok) {
      t = r / p.heads_q;
      h = (int)(r - t * p.heads_q);
      if (c < CPR) {
        const v8 o = *reinterpret_cast<const v8 *>(p.out + t * p.o_ts + h * p.o_hs + c * 8);
        const v8 g = *reinterpret_cast<const v8 *>(p.dout + t * p.do_ts + h * p.do_hs + c * 8);
#pragma unroll
        for (int e = 0; e < 8; e++) s += scree_to_float(o.v[e]) * scree_to_float(g.v[e]);
        float *acc = p.dqacc + ((long long)h * p.total_q + t) * D + c * 8;
        const f4 z = {{0.f, 0.f, 0.f, 0.f}};
        reinterpret_cast<f4 *>(acc)[0] = z;
        reinterpret_cast<f4 *>(acc)[1] = z;
      }
    }
    s = scree_group_sum<GW>(s);
    if (ok && c == 0) {
      const long long o = (long long)h * p.total_q + t;
      p.dlse2[o] = s;
      const float l = p.lse[o];
      p.dlse2[(long long)p.heads_q * p.total_q + o] =
          l == neg_inf() ? pos_inf() : l * 1.4426950408889634f;
    }
  }
}

/* dq = scale * accumulator, rows as the prep kernel's. */
extern "C" __global__ void __launch_bounds__(256)
scree_attention_bwd_dq(const params p, long long rows) {
  typedef scree_vec<elem, 8> v8;
  typedef scree_vec<float, 4> f4;
  const int c = (int)(threadIdx.x % GW);
  if (c >= CPR) return;
  const long long gpb = blockDim.x / GW;
  for (long long r = (long long)blockIdx.x * gpb + threadIdx.x / GW; r < rows;
       r += (long long)gridDim.x * gpb) {
    const long long t = r / p.heads_q;
    const int h = (int)(r - t * p.heads_q);
    const float *acc = p.dqacc + ((long long)h * p.total_q + t) * D + c * 8;
    const f4 a0 = reinterpret_cast<const f4 *>(acc)[0], a1 = reinterpret_cast<const f4 *>(acc)[1];
    v8 o;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      o.v[e] = scree_from_float<elem>(a0.v[e] * p.scale);
      o.v[e + 4] = scree_from_float<elem>(a1.v[e] * p.scale);
    }
    *reinterpret_cast<v8 *>(p.dq + t * p.dq_ts + h * p.dq_hs + c * 8) = o;
  }
}

#endif
