/* layernorm_ref.c - the CPU reference for LayerNorm (double accumulation,
 * two passes: the mean, then the mean squared deviation from it). */
#include <math.h>

#include "ops/op.h"

/* host: x, w, [b], y, [mean], [rstd] in the problem's buffer order
 * (ops/layernorm.c): an optional buffer is there when its pointer in args
 * is nonzero. */
SCREE__REFERENCE(layernorm) {
  const scree_layernorm_args *a = args;
  int k = 0;
  const void *x = host[k++], *w = host[k++];
  const void *b = a->b ? host[k++] : NULL;
  void *y = host[k++];
  float *mean = a->mean ? host[k++] : NULL;
  float *rstd = a->rstd ? host[k++] : NULL;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    double s = 0;
    for (int64_t c = 0; c < a->cols; c++)
      s += scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
    const double mu = s / (double)a->cols;
    double sq = 0;
    for (int64_t c = 0; c < a->cols; c++) {
      const double d = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c)) - mu;
      sq += d * d;
    }
    const double inv = 1.0 / sqrt(sq / (double)a->cols + (double)a->eps);
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      const double g = scree__load_elem(w, a->w_dtype, (size_t)c);
      const double bb = b ? scree__load_elem(b, a->w_dtype, (size_t)c) : 0;
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), (v - mu) * inv * g + bb);
    }
    if (mean) mean[r] = (float)mu;
    if (rstd) rstd[r] = (float)inv;
  }
}
