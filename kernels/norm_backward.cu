/*
 * norm_backward.cu - the backward of RMSNorm, of the residual add fused
 * with RMSNorm, and of LayerNorm, over packed rows (one source, three ops:
 * SCREE_NB_KIND picks the formula).
 *
 * Per row, with g = dy * w (fp32), n = cols:
 *   RMSNorm (KIND 0):   dx = r * g - x * (r^3 * sum(g * x) / n)
 *                       dw += dy * x * r
 *   add+RMSNorm (1):    dh = the same at x = h, plus dh_next (if given)
 *   LayerNorm (2):      xhat = (x - mu) * r
 *                       dx = r * (g - sum(g) / n - xhat * sum(g * xhat) / n)
 *                       dw += dy * xhat;  db += dy
 * r (and mu) come from the forward's saved fp32 statistics when given, or
 * are recomputed from x as the forward does (LayerNorm: two passes).
 *
 * Launch shape (rowwise.cuh): a group of TPR threads a row, ROWS groups a
 * CTA, VEC elements an access, CACHE vectors of x and of dy a thread kept
 * in registers, so a row of up to TPR * VEC * CACHE elements is read once;
 * the rest of a longer row is streamed and read twice. The grid is
 * persistent (the host sizes it): the CTAs stride over the rows.
 *
 * dw (and db): each (CTA, row group) pair is a "slot" that sums the terms
 * of its rows, column by column, in a fixed order: the columns a thread
 * owns in the cached part in registers, the streamed columns in the slot's
 * own row of the fp32 workspace (read-modify-write by the one thread that
 * owns the column: no atomics). At the end each slot writes its sums to
 * part[slot][k][cols] (k: dw, then db), zeros for a slot that got no row;
 * a CTA of several groups adds its groups' slots, in group order, into its
 * first; scree_norm_backward_dw then sums the CTAs' slots of each column
 * in a fixed order. The result is bitwise the same run to run for a
 * config and grid. Each group asks the L2 for its next row (x and dy) as
 * it starts a row.
 *
 * Implementation "smem" (SCREE_NB_SMEM=1): the cached columns' sums live
 * in dynamic shared memory instead of registers, one fp32 per cached
 * element and accumulator, laid out as the slot's workspace row
 * (sacc[group][k][v * VEC + e]); each element is read and written only by
 * the thread that owns it, in the same order as in registers, so no
 * barrier and no atomics, and the sums are the registers' bit for bit.
 * It frees VEC * CACHE * NACC registers a thread (more CTAs an SM, more
 * loads in flight) for ROWS * NACC * TPR * VEC * CACHE * 4 bytes of
 * shared memory a CTA (the host checks it against the target's limit).
 *
 * Macros: SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE (the launch shape);
 * SCREE_X_DTYPE (x / h, dx / dh, dh_next), SCREE_W_DTYPE (w, dw, db),
 * SCREE_Y_DTYPE (dy); SCREE_NB_KIND and SCREE_NB_SMEM (the
 * implementation's defines; SCREE_NB_SMEM 0 when absent).
 *
 * The host guarantees: every vector-accessed pointer aligned to VEC
 * elements, row strides multiples of VEC; dx either equal to dy (same
 * stride and element size) or disjoint from it, and the same for dh_next;
 * part holds gridDim.x * ROWS * NACC * cols floats.
 *
 * Test alone: ctest -R norm_backward    Bench: bench/compare_torch.py --op norm-backward
 */

#include "rowwise.cuh"

#ifndef SCREE_NB_KIND
#error "SCREE_NB_KIND must be 0 (rmsnorm), 1 (add_rmsnorm) or 2 (layernorm)"
#endif
#define NB_ADD (SCREE_NB_KIND == 1)
#define NB_LN (SCREE_NB_KIND == 2)
#define NACC (NB_LN ? 2 : 1)
#ifndef SCREE_NB_SMEM
#define SCREE_NB_SMEM 0
#endif
#if SCREE_NB_SMEM
/* Elements of a row a thread group caches: a slot's shared sums per
 * accumulator. */
#define NB_COVER (SCREE_TPR * SCREE_VEC * SCREE_CACHE)
#endif

typedef scree_dtype_of<SCREE_X_DTYPE>::type xt;
typedef scree_dtype_of<SCREE_W_DTYPE>::type wt;
typedef scree_dtype_of<SCREE_Y_DTYPE>::type yt;
typedef scree_vec<xt, SCREE_VEC> xv;
typedef scree_vec<wt, SCREE_VEC> wv;
typedef scree_vec<yt, SCREE_VEC> yv;

/* The row's scalars once reduced: r, mu (LayerNorm) and the two
 * coefficients of dx = a * g - b * x + c (c folds the mean terms). */
struct nb_coef {
  float r, mu, a, b, c;
};

/* Adds one element's terms to the row sums: s1 = sum(g * x) (RMSNorm) or
 * sum(g * (x - mu)) (LayerNorm); s0 = sum(g) (LayerNorm). */
__device__ __forceinline__ void nb_sums(float x, float dy, float w, float mu, float &s0,
                                        float &s1) {
  const float g = dy * w;
  if (NB_LN) {
    s0 += g;
    s1 = fmaf(g, x - mu, s1);
  } else {
    s1 = fmaf(g, x, s1);
  }
}

/* dx of one element, and its dw (and db) terms added to acc. */
__device__ __forceinline__ float nb_dx(float x, float dy, float w, const nb_coef &k,
                                       float &acc0, float &acc1) {
  if (NB_LN) {
    const float xh = (x - k.mu) * k.r;
    acc0 = fmaf(dy, xh, acc0);
    acc1 += dy;
    return fmaf(k.a, dy * w, fmaf(-k.b, xh, k.c));
  } else {
    acc0 = fmaf(dy, x * k.r, acc0);
    return fmaf(k.a, dy * w, -k.b * x);
  }
}

/* Asks the L2 for the 128-byte line holding p (prefetch.global.L2: no
 * register waits on it). */
__device__ __forceinline__ void nb_prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Asks the L2 for a row's cached part of x and dy: a lane takes every
 * 128-byte line its vectors begin. The row's loads then wait on the L2,
 * not on memory, while nothing waits on the prefetch itself. */
__device__ __forceinline__ void nb_prefetch_row(const xt *xrow, const yt *dyrow, int lane,
                                                int nvec) {
#pragma unroll
  for (int c = 0; c < SCREE_CACHE; c++) {
    const int v = c * SCREE_TPR + lane;
    if (v < nvec) {
      if ((v * (int)sizeof(xv)) % 128 < (int)sizeof(xv))
        nb_prefetch_l2(reinterpret_cast<const xv *>(xrow) + v);
      if ((v * (int)sizeof(yv)) % 128 < (int)sizeof(yv))
        nb_prefetch_l2(reinterpret_cast<const yv *>(dyrow) + v);
    }
  }
}

/* x, dy, dres (dh_next) and dx carry no __restrict__: dx may be dy or dres
 * (in place); each element is read by the thread that writes it, first. */
extern "C" __global__ void __launch_bounds__(SCREE_THREADS)
scree_norm_backward(const xt *x, const wt *__restrict__ w, const yt *dy, const xt *dres,
                    const float *__restrict__ mean_in, const float *__restrict__ rstd_in,
                    xt *dx, float *__restrict__ part, long long rows, int cols,
                    long long x_stride, long long dy_stride, long long dres_stride,
                    long long dx_stride, float eps) {
  __shared__ scree_row_scratch scratch;
  const int lane = scree_row_lane();
  const int group = scree_row_group();
  const int nvec = cols / SCREE_VEC;
  const float inv_cols = 1.0f / (float)cols;
  const wv *wr = reinterpret_cast<const wv *>(w);
  const int ti = nvec * SCREE_VEC + lane; /* the lane's tail element, if any */
  const bool has_tail = ti < cols;
  const long long slot = (long long)blockIdx.x * SCREE_ROWS + group;
  float *sp = part + slot * NACC * (long long)cols; /* the slot's sums */
  const bool have_stats = rstd_in != nullptr && (!NB_LN || mean_in != nullptr);

#if SCREE_NB_SMEM
  /* The group's sums of its cached columns: [k][v * VEC + e]; each thread
   * zeroes, updates and reads back only its own elements. */
  extern __shared__ __align__(32) float nb_sacc[];
  float *sa = nb_sacc + group * NACC * NB_COVER;
  typedef scree_vec<float, SCREE_VEC> fv;
#pragma unroll
  for (int c = 0; c < SCREE_CACHE; c++) {
    const int v = c * SCREE_TPR + lane;
    fv z;
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) z.v[e] = 0.f;
    reinterpret_cast<fv *>(sa)[v] = z;
    if (NB_LN) reinterpret_cast<fv *>(sa + NB_COVER)[v] = z;
  }
#else
  float acc0[SCREE_CACHE][SCREE_VEC], acc1[SCREE_CACHE][SCREE_VEC];
#pragma unroll
  for (int c = 0; c < SCREE_CACHE; c++)
#pragma unroll
    for (int e = 0; e < SCREE_VEC; e++) acc0[c][e] = acc1[c][e] = 0.f;
#endif
  float tacc0 = 0.f, tacc1 = 0.f;

  for (long long base = (long long)blockIdx.x * SCREE_ROWS; base < rows;
       base += (long long)gridDim.x * SCREE_ROWS) {
    const bool first = base == (long long)blockIdx.x * SCREE_ROWS;
    const long long row = base + group;
    const bool active = row < rows;
    const long long rr = active ? row : 0;
    const xt *xrow = x + rr * x_stride;
    const yt *dyrow = dy + rr * dy_stride;
    const xv *xr = reinterpret_cast<const xv *>(xrow);
    const yv *dyr = reinterpret_cast<const yv *>(dyrow);

    xv xc[SCREE_CACHE];
    yv dc[SCREE_CACHE];
    /* The group's next row, asked of the L2 before this row's loads. */
    {
      const long long nrow = row + (long long)gridDim.x * SCREE_ROWS;
      if (nrow < rows) nb_prefetch_row(x + nrow * x_stride, dy + nrow * dy_stride, lane, nvec);
    }
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) {
        xc[c] = xr[v];
        dc[c] = dyr[v];
      }
    }
    float xtl = 0.f, dtl = 0.f, wtl = 0.f;
    if (active && has_tail) {
      xtl = scree_to_float(xrow[ti]);
      dtl = scree_to_float(dyrow[ti]);
      wtl = scree_to_float(w[ti]);
    }

    /* The statistics: saved, or recomputed as the forward does. */
    float r, mu = 0.f;
    if (have_stats) {
      r = active ? rstd_in[rr] : 0.f;
      if (NB_LN) mu = active ? mean_in[rr] : 0.f;
    } else {
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = c * SCREE_TPR + lane;
        if (active && v < nvec)
#pragma unroll
          for (int e = 0; e < SCREE_VEC; e++) {
            const float f = scree_to_float(xc[c].v[e]);
            s = NB_LN ? s + f : fmaf(f, f, s);
          }
      }
      if (active) {
#pragma unroll 1
        for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
          const xv a = xr[v];
#pragma unroll
          for (int e = 0; e < SCREE_VEC; e++) {
            const float f = scree_to_float(a.v[e]);
            s = NB_LN ? s + f : fmaf(f, f, s);
          }
        }
        if (has_tail) s = NB_LN ? s + xtl : fmaf(xtl, xtl, s);
      }
      s = scree_row_sum(s, scratch);
      if (NB_LN) {
        mu = s * inv_cols;
        float q = 0.f;
#pragma unroll
        for (int c = 0; c < SCREE_CACHE; c++) {
          const int v = c * SCREE_TPR + lane;
          if (active && v < nvec)
#pragma unroll
            for (int e = 0; e < SCREE_VEC; e++) {
              const float d = scree_to_float(xc[c].v[e]) - mu;
              q = fmaf(d, d, q);
            }
        }
        if (active) {
#pragma unroll 1
          for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
            const xv a = xr[v];
#pragma unroll
            for (int e = 0; e < SCREE_VEC; e++) {
              const float d = scree_to_float(a.v[e]) - mu;
              q = fmaf(d, d, q);
            }
          }
          if (has_tail) q = fmaf(xtl - mu, xtl - mu, q);
        }
        q = scree_row_sum(q, scratch);
        r = 1.0f / sqrtf(q * inv_cols + eps);
      } else {
        r = 1.0f / sqrtf(s * inv_cols + eps);
      }
    }

    /* The sums over the row of g * x (g * (x - mu)) and of g. */
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int c = 0; c < SCREE_CACHE; c++) {
      const int v = c * SCREE_TPR + lane;
      if (active && v < nvec) {
        const wv g = wr[v];
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++)
          nb_sums(scree_to_float(xc[c].v[e]), scree_to_float(dc[c].v[e]),
                  scree_to_float(g.v[e]), mu, s0, s1);
      }
    }
    if (active) {
#pragma unroll 1
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
        const xv a = xr[v];
        const yv d = dyr[v];
        const wv g = wr[v];
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++)
          nb_sums(scree_to_float(a.v[e]), scree_to_float(d.v[e]), scree_to_float(g.v[e]), mu,
                  s0, s1);
      }
      if (has_tail) nb_sums(xtl, dtl, wtl, mu, s0, s1);
    }
    s1 = scree_row_sum(s1, scratch);
    if (NB_LN) s0 = scree_row_sum(s0, scratch);

    nb_coef k;
    k.r = r;
    k.mu = mu;
    if (NB_LN) {
      /* dx = r * g - r * mean(g) - xhat * (r * mean(g * xhat)),
       * mean(g * xhat) = r * s1 / n. */
      k.a = r;
      k.b = r * r * s1 * inv_cols;
      k.c = -r * s0 * inv_cols;
    } else {
      k.a = r;
      k.b = r * r * r * s1 * inv_cols;
      k.c = 0.f;
    }

    if (active) {
      xt *dxrow = dx + rr * dx_stride;
      xv *dxr = reinterpret_cast<xv *>(dxrow);
      const xt *drow = NB_ADD && dres ? dres + rr * dres_stride : nullptr;
      const xv *drr = reinterpret_cast<const xv *>(drow);
#pragma unroll
      for (int c = 0; c < SCREE_CACHE; c++) {
        const int v = c * SCREE_TPR + lane;
        if (v < nvec) {
          const wv g = wr[v];
          float o[SCREE_VEC];
#if SCREE_NB_SMEM
          fv a0 = reinterpret_cast<const fv *>(sa)[v], a1 = a0;
          if (NB_LN) a1 = reinterpret_cast<const fv *>(sa + NB_COVER)[v];
#pragma unroll
          for (int e = 0; e < SCREE_VEC; e++)
            o[e] = nb_dx(scree_to_float(xc[c].v[e]), scree_to_float(dc[c].v[e]),
                         scree_to_float(g.v[e]), k, a0.v[e], a1.v[e]);
          reinterpret_cast<fv *>(sa)[v] = a0;
          if (NB_LN) reinterpret_cast<fv *>(sa + NB_COVER)[v] = a1;
#else
#pragma unroll
          for (int e = 0; e < SCREE_VEC; e++)
            o[e] = nb_dx(scree_to_float(xc[c].v[e]), scree_to_float(dc[c].v[e]),
                         scree_to_float(g.v[e]), k, acc0[c][e], acc1[c][e]);
#endif
          if (NB_ADD && drow) {
            const xv q = drr[v];
#pragma unroll
            for (int e = 0; e < SCREE_VEC; e++) o[e] += scree_to_float(q.v[e]);
          }
          dxr[v] = scree_vec_from_float<xt>(o);
        }
      }
#pragma unroll 1
      for (int v = SCREE_CACHE * SCREE_TPR + lane; v < nvec; v += SCREE_TPR) {
        const xv a = xr[v];
        const yv d = dyr[v];
        const wv g = wr[v];
        float o[SCREE_VEC], p0[SCREE_VEC], p1[SCREE_VEC];
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) {
          p0[e] = p1[e] = 0.f;
          o[e] = nb_dx(scree_to_float(a.v[e]), scree_to_float(d.v[e]), scree_to_float(g.v[e]),
                       k, p0[e], p1[e]);
        }
        if (NB_ADD && drow) {
          const xv q = drr[v];
#pragma unroll
          for (int e = 0; e < SCREE_VEC; e++) o[e] += scree_to_float(q.v[e]);
        }
        dxr[v] = scree_vec_from_float<xt>(o);
        /* The streamed columns' sums live in the slot's workspace row. */
#pragma unroll
        for (int e = 0; e < SCREE_VEC; e++) {
          const int col = v * SCREE_VEC + e;
          sp[col] = first ? p0[e] : sp[col] + p0[e];
          if (NB_LN) sp[cols + col] = first ? p1[e] : sp[cols + col] + p1[e];
        }
      }
      if (has_tail) {
        float o = nb_dx(xtl, dtl, wtl, k, tacc0, tacc1);
        if (NB_ADD && drow) o += scree_to_float(drow[ti]);
        dxrow[ti] = scree_from_float<xt>(o);
      }
    }
  }

  /* The slot's sums: registers for the cached part and the tail; a slot
   * that got no row also zeroes its streamed part. */
#pragma unroll
  for (int c = 0; c < SCREE_CACHE; c++) {
    const int v = c * SCREE_TPR + lane;
    if (v < nvec)
#pragma unroll
      for (int e = 0; e < SCREE_VEC; e++) {
#if SCREE_NB_SMEM
        sp[v * SCREE_VEC + e] = sa[v * SCREE_VEC + e];
        if (NB_LN) sp[cols + v * SCREE_VEC + e] = sa[NB_COVER + v * SCREE_VEC + e];
#else
        sp[v * SCREE_VEC + e] = acc0[c][e];
        if (NB_LN) sp[cols + v * SCREE_VEC + e] = acc1[c][e];
#endif
      }
  }
  if (has_tail) {
    sp[ti] = tacc0;
    if (NB_LN) sp[cols + ti] = tacc1;
  }
  if (slot >= rows) {
    for (int i = SCREE_CACHE * SCREE_TPR * SCREE_VEC + lane; i < nvec * SCREE_VEC;
         i += SCREE_TPR) {
      sp[i] = 0.f;
      if (NB_LN) sp[cols + i] = 0.f;
    }
  }
#if SCREE_ROWS > 1
  /* The CTA's row groups summed in group order into its first slot, so
   * that scree_norm_backward_dw sums one slot a CTA. The CTA's threads
   * read back what its groups wrote (visible after the barrier). */
  __syncthreads();
  {
    float *cp = part + (long long)blockIdx.x * SCREE_ROWS * NACC * (long long)cols;
    const long long len = (long long)NACC * cols;
    for (long long i = threadIdx.x; i < len; i += SCREE_THREADS) {
      float a = cp[i];
#pragma unroll
      for (int g = 1; g < SCREE_ROWS; g++) a += cp[(long long)g * len + i];
      cp[i] = a;
    }
  }
#endif
}

/* dw[c] (and db[c]) = the sum over the CTAs' slots s = 0, 1, ... of
 * part[s * SCREE_ROWS][k][c] (each the sum of its CTA's row groups), in a
 * fixed order: a block of 32 columns x 32 slot lanes; lane j sums slots
 * j, j + 32, ... in turn, then lane 0 adds the 32 lane sums in order.
 * Block (32, 32), grid ceil(cols / 32). */
extern "C" __global__ void __launch_bounds__(1024)
scree_norm_backward_dw(const float *__restrict__ part, wt *__restrict__ dw,
                       wt *__restrict__ db, int nslots, int cols) {
  __shared__ float s[NACC][32][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
#pragma unroll
  for (int k = 0; k < NACC; k++) {
    float a = 0.f;
    if (col < cols) {
#pragma unroll 4
      for (int i = threadIdx.y; i < nslots; i += 32)
        a += part[((long long)i * SCREE_ROWS * NACC + k) * cols + col];
    }
    s[k][threadIdx.y][threadIdx.x] = a;
  }
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
#pragma unroll
    for (int k = 0; k < NACC; k++) {
      float a = s[k][0][threadIdx.x];
#pragma unroll
      for (int j = 1; j < 32; j++) a += s[k][j][threadIdx.x];
      if (k == 0)
        dw[col] = scree_from_float<wt>(a);
      else if (db)
        db[col] = scree_from_float<wt>(a);
    }
  }
}
