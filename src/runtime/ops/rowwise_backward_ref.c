/* rowwise_backward_ref.c - CPU references for the backward of RMSNorm, the
 * fused residual add + RMSNorm, LayerNorm, softmax, the ragged softmax and
 * SwiGLU, in double
 * accumulation (ops/rowwise_backward_ref.h says what they compute). Each
 * row's sums run
 * c = 0, 1, ... in order; dw and db are summed in double over rows, in
 * order, and stored once at the end. */
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "ops/rowwise_backward_ref.h"

#define LD(p, dt, i) scree__load_elem((p), (int)(dt), (size_t)(i))
#define ST(p, dt, i, v) scree__store_elem((p), (int)(dt), (size_t)(i), (v))

/* Stores the column sums (or NaN where they could not be kept). */
static void store_sums(void *out, scree_dtype dt, const double *sum, int64_t cols) {
  if (!out) return;
  for (int64_t c = 0; c < cols; c++) ST(out, dt, c, sum ? sum[c] : NAN);
}

/* x as the RMSNorm input: h = x + residual rounded to dt when residual is
 * given (the forward's store and load), else x. */
static double norm_input(const void *x, int64_t xi, const void *res, int64_t ri,
                         scree_dtype dt) {
  if (!res) return LD(x, dt, xi);
  uint64_t tmp = 0; /* room for one element of any dtype */
  ST(&tmp, dt, 0, LD(x, dt, xi) + LD(res, dt, ri));
  return LD(&tmp, dt, 0);
}

/* The RMSNorm backward of x (+ residual), plus dh_next when given. */
static void rms_backward(const void *x, int64_t xs, const void *res, int64_t rs,
                         const void *w, const void *dy, int64_t dys, const void *dn,
                         int64_t dns, void *dx, int64_t dxs, void *dw, int64_t rows,
                         int64_t cols, scree_dtype xt, scree_dtype wt, scree_dtype yt,
                         float eps) {
  double *sw = dw ? calloc((size_t)cols, sizeof *sw) : NULL;
  double *hrow = malloc((size_t)cols * sizeof *hrow); /* NULL: recomputed */
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0, s = 0;
    for (int64_t c = 0; c < cols; c++) {
      const double v = norm_input(x, r * xs + c, res, r * rs + c, xt);
      if (hrow) hrow[c] = v;
      ss += v * v;
      s += LD(dy, yt, r * dys + c) * LD(w, wt, c) * v;
    }
    const double inv = 1.0 / sqrt(ss / (double)cols + (double)eps);
    const double k = inv * inv * inv * s / (double)cols;
    for (int64_t c = 0; c < cols; c++) {
      const double v = hrow ? hrow[c] : norm_input(x, r * xs + c, res, r * rs + c, xt);
      const double d = LD(dy, yt, r * dys + c);
      double g = inv * d * LD(w, wt, c) - k * v;
      if (dn) g += LD(dn, xt, r * dns + c);
      ST(dx, xt, r * dxs + c, g);
      if (sw) sw[c] += d * v * inv;
    }
  }
  store_sums(dw, wt, sw, cols);
  free(hrow);
  free(sw);
}

void scree__rmsnorm_backward_ref(const void *x, int64_t x_stride, const void *w,
                                 const void *dy, int64_t dy_stride, void *dx,
                                 int64_t dx_stride, void *dw, int64_t rows, int64_t cols,
                                 scree_dtype x_dtype, scree_dtype w_dtype,
                                 scree_dtype y_dtype, float eps) {
  rms_backward(x, x_stride ? x_stride : cols, NULL, 0, w, dy, dy_stride ? dy_stride : cols,
               NULL, 0, dx, dx_stride ? dx_stride : cols, dw, rows, cols, x_dtype, w_dtype,
               y_dtype, eps);
}

void scree__add_rmsnorm_backward_ref(const void *x, int64_t x_stride, const void *residual,
                                     int64_t residual_stride, const void *w, const void *dy,
                                     int64_t dy_stride, const void *dh_next,
                                     int64_t dh_next_stride, void *dh, int64_t dh_stride,
                                     void *dw, int64_t rows, int64_t cols,
                                     scree_dtype x_dtype, scree_dtype w_dtype,
                                     scree_dtype y_dtype, float eps) {
  rms_backward(x, x_stride ? x_stride : cols, residual,
               residual_stride ? residual_stride : cols, w, dy, dy_stride ? dy_stride : cols,
               dh_next, dh_next_stride ? dh_next_stride : cols, dh,
               dh_stride ? dh_stride : cols, dw, rows, cols, x_dtype, w_dtype, y_dtype, eps);
}

void scree__layernorm_backward_ref(const void *x, int64_t x_stride, const void *w,
                                   const void *dy, int64_t dy_stride, void *dx,
                                   int64_t dx_stride, void *dw, void *db, int64_t rows,
                                   int64_t cols, scree_dtype x_dtype, scree_dtype w_dtype,
                                   scree_dtype y_dtype, float eps) {
  const int64_t xs = x_stride ? x_stride : cols, ys = dy_stride ? dy_stride : cols;
  const int64_t dxs = dx_stride ? dx_stride : cols;
  double *sw = dw ? calloc((size_t)cols, sizeof *sw) : NULL;
  double *sb = db ? calloc((size_t)cols, sizeof *sb) : NULL;
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int64_t c = 0; c < cols; c++) s += LD(x, x_dtype, r * xs + c);
    const double mu = s / (double)cols;
    double sq = 0;
    for (int64_t c = 0; c < cols; c++) {
      const double d = LD(x, x_dtype, r * xs + c) - mu;
      sq += d * d;
    }
    const double inv = 1.0 / sqrt(sq / (double)cols + (double)eps);
    double sg = 0, sgx = 0;
    for (int64_t c = 0; c < cols; c++) {
      const double xh = (LD(x, x_dtype, r * xs + c) - mu) * inv;
      const double g = LD(dy, y_dtype, r * ys + c) * LD(w, w_dtype, c);
      sg += g;
      sgx += g * xh;
    }
    const double mg = sg / (double)cols, mgx = sgx / (double)cols;
    for (int64_t c = 0; c < cols; c++) {
      const double xh = (LD(x, x_dtype, r * xs + c) - mu) * inv;
      const double d = LD(dy, y_dtype, r * ys + c);
      ST(dx, x_dtype, r * dxs + c, inv * (d * LD(w, w_dtype, c) - mg - xh * mgx));
      if (sw) sw[c] += d * xh;
      if (sb) sb[c] += d;
    }
  }
  store_sums(dw, w_dtype, sw, cols);
  store_sums(db, w_dtype, sb, cols);
  free(sw);
  free(sb);
}

void scree__cross_entropy_ref(const void *logits, int64_t ls, const int64_t *targets,
                              float *loss, float *lse, void *dlogits, int64_t ds, int64_t rows,
                              int64_t vocab, scree_dtype dtype, int64_t ignore_index,
                              float eps, float z, int reduction, float grad_scale) {
  if (!ls) ls = vocab;
  if (!ds) ds = vocab;
  double scale = grad_scale != 0.f ? (double)grad_scale : 1.0;
  if (reduction == SCREE_REDUCTION_MEAN) {
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++) n += targets[r] != ignore_index;
    scale = n ? scale / (double)n : 0.0;
  }
  const double e = eps, zl = z;
  double *x = malloc((size_t)(vocab > 0 ? vocab : 1) * sizeof *x);
  if (!x) {
    for (int64_t r = 0; r < rows; r++) loss[r] = NAN;
    return;
  }
  for (int64_t r = 0; r < rows; r++) {
    double m = -INFINITY, xs = 0;
    for (int64_t c = 0; c < vocab; c++) {
      x[c] = LD(logits, dtype, r * ls + c);
      if (x[c] > m) m = x[c];
      xs += x[c];
    }
    double sum = 0;
    for (int64_t c = 0; c < vocab; c++) sum += exp(x[c] - m);
    const double l = m + log(sum);
    const int64_t t = targets[r];
    const int valid = t >= 0 && t < vocab;
    if (t == ignore_index)
      loss[r] = 0.f;
    else if (valid)
      /* eps = 0 leaves out the logit sum (-inf with masked logits) */
      loss[r] = (float)((1 - e) * (l - x[t]) + (e != 0 ? e * (l - xs / (double)vocab) : 0) +
                        zl * l * l);
    else
      loss[r] = NAN;
    if (lse) lse[r] = (float)l;
    if (!dlogits) continue;
    for (int64_t c = 0; c < vocab; c++) {
      double g;
      if (t == ignore_index)
        g = 0;
      else if (!valid)
        g = NAN;
      else
        g = (exp(x[c] - l) * (1 + 2 * zl * l) - (c == t ? 1 - e : 0) - e / (double)vocab) *
            scale;
      ST(dlogits, dtype, r * ds + c, g);
    }
  }
  free(x);
}

void scree__softmax_backward_ref(const void *y, int64_t y_stride, const void *dy,
                                 int64_t dy_stride, void *dx, int64_t dx_stride, int64_t rows,
                                 int64_t cols, scree_dtype y_dtype, scree_dtype dy_dtype,
                                 float scale) {
  const int64_t ys = y_stride ? y_stride : cols, gs = dy_stride ? dy_stride : cols;
  const int64_t xs = dx_stride ? dx_stride : cols;
  const double s = scale != 0.f ? (double)scale : 1.0;
  for (int64_t r = 0; r < rows; r++) {
    double d = 0;
    for (int64_t c = 0; c < cols; c++)
      d += LD(y, y_dtype, r * ys + c) * LD(dy, dy_dtype, r * gs + c);
    for (int64_t c = 0; c < cols; c++) {
      const double v = LD(y, y_dtype, r * ys + c), g = LD(dy, dy_dtype, r * gs + c);
      ST(dx, dy_dtype, r * xs + c, s * v * (g - d));
    }
  }
}

void scree__ragged_softmax_backward_ref(const void *y, int64_t y_stride, const void *dy,
                                        int64_t dy_stride, void *dx, int64_t dx_stride,
                                        const int32_t *cu_seqlens, int64_t batch, int64_t cols,
                                        scree_dtype y_dtype, scree_dtype dy_dtype, float scale) {
  const int64_t ys = y_stride ? y_stride : cols, gs = dy_stride ? dy_stride : cols;
  const int64_t xs = dx_stride ? dx_stride : cols;
  const double s = scale != 0.f ? (double)scale : 1.0;
  double *d = malloc((size_t)(cols > 0 ? cols : 1) * sizeof *d);
  for (int64_t b = 0; b < batch; b++) {
    const int64_t t0 = cu_seqlens[b], t1 = cu_seqlens[b + 1];
    if (d) {
      /* Token by token, so memory is read in order. */
      for (int64_t c = 0; c < cols; c++) d[c] = 0;
      for (int64_t t = t0; t < t1; t++)
        for (int64_t c = 0; c < cols; c++)
          d[c] += LD(y, y_dtype, t * ys + c) * LD(dy, dy_dtype, t * gs + c);
    }
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < cols; c++) {
        const double v = LD(y, y_dtype, t * ys + c), g = LD(dy, dy_dtype, t * gs + c);
        ST(dx, dy_dtype, t * xs + c, d ? s * v * (g - d[c]) : NAN);
      }
  }
  free(d);
}

void scree__swiglu_backward_ref(const void *gate, int64_t gate_stride, const void *up,
                                int64_t up_stride, const void *dy, int64_t dy_stride,
                                void *dgate, int64_t dgate_stride, void *dup,
                                int64_t dup_stride, int64_t rows, int64_t cols,
                                scree_dtype dtype, scree_dtype dy_dtype) {
  const int64_t gs = gate_stride ? gate_stride : cols, us = up_stride ? up_stride : cols;
  const int64_t ys = dy_stride ? dy_stride : cols;
  const int64_t dgs = dgate_stride ? dgate_stride : cols, dus = dup_stride ? dup_stride : cols;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      const double g = LD(gate, dtype, r * gs + c), u = LD(up, dtype, r * us + c);
      const double d = LD(dy, dy_dtype, r * ys + c);
      /* sigmoid and 1 - sigmoid from e = exp(-|g|) <= 1: no overflow. */
      const double e = exp(-fabs(g));
      const double s = (g >= 0 ? 1.0 : e) / (1.0 + e), t = (g >= 0 ? e : 1.0) / (1.0 + e);
      ST(dgate, dtype, r * dgs + c, d * u * s * (1.0 + g * t));
      ST(dup, dtype, r * dus + c, d * g * s);
    }
}
