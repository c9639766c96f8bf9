/*
 * swiglu_backward.cu - the backward of SwiGLU over packed rows.
 *
 *   s = sigmoid(g)
 *   dup[r, c]   = dy[r, c] * g * s                        (dy * silu(g))
 *   dgate[r, c] = dy[r, c] * u * s * (1 + g * (1 - s))     fp32 math
 *
 * with g = gate[r, c], u = up[r, c]. Elementwise, launched as the forward
 * (swiglu.cu): a group of SCREE_TPR threads per row, SCREE_ROWS groups per
 * CTA (grid-stride over rows); lane l takes the row's whole vectors l, l +
 * TPR, ... in chunks of SCREE_CACHE, loading CACHE vectors of gate, of up
 * and of dy before computing and storing any of them. Each input element is
 * read once and each output element written once. The cols % VEC elements
 * past the last whole vector are taken one at a time by lanes
 * 0..(cols % VEC) - 1.
 *
 * s and 1 - s come from e = exp(-|g|) <= 1 (accurate expf, one IEEE
 * division): s = 1 / (1 + e), 1 - s = e / (1 + e) for g >= 0, the other way
 * round for g < 0, so nothing overflows and 1 - s keeps its precision.
 *
 * Macros (all required; the host sets them from the config and the call):
 *   SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE   the launch shape
 *     (rowwise.cuh), with the CTA's estimated registers (SCREE_EST_REGS)
 *     within 64K
 *   SCREE_DTYPE     dtype code of gate, up, dgate and dup (common.cuh)
 *   SCREE_DY_DTYPE  dtype code of dy
 *
 * The host guarantees: every pointer aligned to VEC elements of its dtype;
 * row strides multiples of VEC; 1 <= cols <= 2^30; dgate equal to gate and
 * dup equal to up (same stride), or sharing no element with any other
 * tensor. The fused forms ([rows, 2 cols]) arrive as up = gate + cols and
 * dup = dgate + cols with the fused tensor's stride.
 *
 * Test alone: ctest -R swiglu_backward    Bench: build/bench/bench_ops --op swiglu_backward
 */

#include "rowwise.cuh"

static_assert(SCREE_DTYPE >= 0 && SCREE_DTYPE <= 2, "DTYPE must be 0 (fp32), 1 (fp16), 2 (bf16)");
static_assert(SCREE_DY_DTYPE >= 0 && SCREE_DY_DTYPE <= 2,
              "DY_DTYPE must be 0 (fp32), 1 (fp16), 2 (bf16)");

/* Registers per thread, estimated: about 48 for addresses, indices and the
 * math, plus the CACHE vectors of gate, up and dy in flight (two 16-bit
 * elements per register). The CTA must fit the 64K-register file with it. */
#define SCREE_EST_REGS                                                        \
  (48 + SCREE_CACHE * SCREE_VEC * (SCREE_DTYPE == 0 ? 2 : 1) +                \
   (SCREE_CACHE * SCREE_VEC * (SCREE_DY_DTYPE == 0 ? 2 : 1) + 1) / 2)
static_assert(SCREE_THREADS * SCREE_EST_REGS <= 65536,
              "TPR * ROWS threads of the estimated registers exceed 64K");

typedef scree_dtype_of<SCREE_DTYPE>::type xt;
typedef scree_dtype_of<SCREE_DY_DTYPE>::type gt;
typedef scree_vec<xt, SCREE_VEC> xv;
typedef scree_vec<gt, SCREE_VEC> gv;

/* The two gradients of one element, in fp32. */
__device__ __forceinline__ void scree_swiglu_bwd1(float g, float u, float d, float &dg,
                                                  float &du) {
  const float e = expf(-fabsf(g));
  const float r = 1.f / (1.f + e);
  const float s = g >= 0.f ? r : e * r;     /* sigmoid(g) */
  const float t = g >= 0.f ? e * r : r;     /* 1 - sigmoid(g) */
  du = d * g * s;
  dg = d * u * s * fmaf(g, t, 1.f);
}

/* No __restrict__: dgate may be gate and dup may be up (in place). */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_swiglu_backward(const xt *gate, const xt *up, const gt *dy, xt *dgate, xt *dup,
                      long long rows, int cols, long long gate_stride, long long up_stride,
                      long long dy_stride, long long dgate_stride, long long dup_stride) {
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = cols / SCREE_VEC;

  for (long long row = (long long)blockIdx.x * SCREE_ROWS + group; row < rows;
       row += (long long)gridDim.x * SCREE_ROWS) {
    const xt *grow = gate + row * gate_stride;
    const xt *urow = up + row * up_stride;
    const gt *drow = dy + row * dy_stride;
    xt *dgrow = dgate + row * dgate_stride;
    xt *durow = dup + row * dup_stride;
    const xv *gvp = reinterpret_cast<const xv *>(grow);
    const xv *uvp = reinterpret_cast<const xv *>(urow);
    const gv *dvp = reinterpret_cast<const gv *>(drow);
    xv *dgv = reinterpret_cast<xv *>(dgrow);
    xv *duv = reinterpret_cast<xv *>(durow);

    for (int base = lane; base < nvec; base += SCREE_CACHE * SCREE_TPR) {
      xv a[SCREE_CACHE], b[SCREE_CACHE];
      gv d[SCREE_CACHE];
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = base + c * SCREE_TPR;
        if (v < nvec) {
          a[c] = gvp[v];
          b[c] = uvp[v];
          d[c] = dvp[v];
        }
      }
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = base + c * SCREE_TPR;
        if (v < nvec) {
          xv og, ou;
#pragma unroll
          for (int e = 0; e < SCREE_VEC; e++) {
            float fg, fu;
            scree_swiglu_bwd1(scree_to_float(a[c].v[e]), scree_to_float(b[c].v[e]),
                              scree_to_float(d[c].v[e]), fg, fu);
            og.v[e] = scree_from_float<xt>(fg);
            ou.v[e] = scree_from_float<xt>(fu);
          }
          dgv[v] = og;
          duv[v] = ou;
        }
      }
    }
    for (int i = nvec * SCREE_VEC + lane; i < cols; i += SCREE_TPR) {
      float fg, fu;
      scree_swiglu_bwd1(scree_to_float(grow[i]), scree_to_float(urow[i]),
                        scree_to_float(drow[i]), fg, fu);
      dgrow[i] = scree_from_float<xt>(fg);
      durow[i] = scree_from_float<xt>(fu);
    }
  }
}
