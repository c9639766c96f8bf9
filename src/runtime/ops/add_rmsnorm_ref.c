/* add_rmsnorm_ref.c - the CPU reference for the residual add fused with
 * RMSNorm (double accumulation). */
#include <math.h>

#include "ops/op.h"

/* host: x, residual, w, h, y in the problem's buffer order
 * (ops/add_rmsnorm.c). h is written first, rounded to x's dtype, and the
 * norm is taken of it as written. h may be x or residual (same stride):
 * each element is read before it is written. */
SCREE__REFERENCE(add_rmsnorm) {
  const scree_add_rmsnorm_args *a = args;
  const void *x = host[0], *res = host[1], *w = host[2];
  void *h = host[3], *y = host[4];
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t rs = a->residual_stride ? a->residual_stride : a->cols;
  const int64_t hs = a->h_stride ? a->h_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    double ss = 0;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c)) +
                       scree__load_elem(res, a->x_dtype, (size_t)(r * rs + c));
      scree__store_elem(h, a->x_dtype, (size_t)(r * hs + c), v);
      const double hv = scree__load_elem(h, a->x_dtype, (size_t)(r * hs + c));
      ss += hv * hv;
    }
    const double inv = 1.0 / sqrt(ss / (double)a->cols + (double)a->eps);
    for (int64_t c = 0; c < a->cols; c++) {
      const double hv = scree__load_elem(h, a->x_dtype, (size_t)(r * hs + c));
      const double g = scree__load_elem(w, a->w_dtype, (size_t)c);
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), hv * inv * g);
    }
  }
}
