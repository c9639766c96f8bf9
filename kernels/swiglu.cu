/*
 * swiglu.cu - SwiGLU over packed rows.
 *
 *   y[r, c] = silu(gate[r, c]) * up[r, c],  silu(g) = g / (1 + e^-g)     fp32 math
 *
 * Elementwise, so a row needs no reduction; the row-wise launch shape of
 * rowwise.cuh gives the memory-level parallelism: each row is handled by a
 * group of SCREE_TPR threads, SCREE_ROWS groups per CTA (grid-stride over
 * rows). Lane l of a group takes the row's whole vectors l, l + TPR, ... in
 * chunks of SCREE_CACHE: it loads CACHE vectors of gate and CACHE of up
 * before computing and storing any of them, so 2 * CACHE loads are in
 * flight per thread. Each input element is read once and each output
 * element written once. The cols % VEC elements past the last whole vector
 * are taken one at a time by lanes 0..(cols % VEC) - 1.
 *
 * silu is evaluated as g * sigmoid(g) with e = exp(-|g|) <= 1 (accurate
 * expf, IEEE division): sigmoid(g) = 1 / (1 + e) for g >= 0 and e / (1 + e)
 * for g < 0, so no intermediate overflows for any finite g.
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   the launch shape
 *     (rowwise.cuh; CACHE here is the number of vectors per input loaded
 *     before use), with the CTA's estimated registers (SCREE_EST_REGS)
 *     within 64K
 *   SCREE_DTYPE     dtype code of gate and up (common.cuh)
 *   SCREE_Y_DTYPE   dtype code of y
 *
 * The host guarantees: gate, up, y aligned to VEC elements of their dtype;
 * row strides multiples of VEC; 1 <= cols <= 2^30; y equal to gate or to up
 * (same stride and element size), or sharing no element with either. With
 * gate and up in one [rows, 2 * cols] tensor, the host passes up = gate +
 * cols and gate's stride.
 *
 * Test alone: ctest -R swiglu    Bench: build/bench/bench_ops --op swiglu
 */

#include "rowwise.cuh"

static_assert(SCREE_DTYPE >= 0 && SCREE_DTYPE <= 2, "DTYPE must be 0 (fp32), 1 (fp16), 2 (bf16)");
static_assert(SCREE_Y_DTYPE >= 0 && SCREE_Y_DTYPE <= 2,
              "Y_DTYPE must be 0 (fp32), 1 (fp16), 2 (bf16)");

/* Registers per thread, estimated: about 40 for addresses, indices and
 * silu, plus the CACHE vectors of gate and of up in flight (two 16-bit
 * elements per register). The CTA must fit the 64K-register file with it,
 * or ptxas spills to meet __launch_bounds__. */
#define SCREE_EST_REGS (40 + SCREE_CACHE * SCREE_VEC * (SCREE_DTYPE == 0 ? 2 : 1))
static_assert(SCREE_THREADS * SCREE_EST_REGS <= 65536,
              "TPR * ROWS threads of the estimated registers exceed 64K");

typedef scree_dtype_of<SCREE_DTYPE>::type xt;
typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_vec<xt, SCREE_VEC> xv;
typedef scree_vec<yt, SCREE_VEC> yv;

/* silu(g) * u in fp32, with no overflow for large |g|. */
__device__ __forceinline__ float scree_swiglu1(float g, float u) {
  const float e = expf(-fabsf(g));
  const float s = (g >= 0.f ? 1.f : e) / (1.f + e);
  return g * s * u;
}

__device__ __forceinline__ yv scree_swiglu_vec(const xv &g, const xv &u) {
  yv o;
#pragma unroll
  for (int e = 0; e < SCREE_VEC; e++)
    o.v[e] = scree_from_float<yt>(scree_swiglu1(scree_to_float(g.v[e]), scree_to_float(u.v[e])));
  return o;
}

/* No __restrict__: y may be gate or up (in place). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_swiglu(const xt *gate, const xt *up, yt *y, long long rows, int cols,
             long long gate_stride, long long up_stride, long long y_stride) {
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = cols / SCREE_VEC;

  for (long long row = (long long)blockIdx.x * SCREE_ROWS + group; row < rows;
       row += (long long)gridDim.x * SCREE_ROWS) {
    const xt *grow = gate + row * gate_stride;
    const xt *urow = up + row * up_stride;
    yt *yrow = y + row * y_stride;
    const xv *gv = reinterpret_cast<const xv *>(grow);
    const xv *uv = reinterpret_cast<const xv *>(urow);
    yv *ov = reinterpret_cast<yv *>(yrow);

    for (int base = lane; base < nvec; base += SCREE_CACHE * SCREE_TPR) {
      xv a[SCREE_CACHE], b[SCREE_CACHE];
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = base + c * SCREE_TPR;
        if (v < nvec) {
          a[c] = gv[v];
          b[c] = uv[v];
        }
      }
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = base + c * SCREE_TPR;
        if (v < nvec) ov[v] = scree_swiglu_vec(a[c], b[c]);
      }
    }
    for (int i = nvec * SCREE_VEC + lane; i < cols; i += SCREE_TPR)
      yrow[i] =
          scree_from_float<yt>(scree_swiglu1(scree_to_float(grow[i]), scree_to_float(urow[i])));
  }
}
