/* rmsnorm_ref.c - the CPU reference for RMSNorm (double accumulation). */
#include <math.h>

#include "ops/op.h"

/* host: x, w, y in the problem's buffer order (ops/rmsnorm.c). */
SCREE__REFERENCE(rmsnorm) {
  const scree_rmsnorm_args *a = args;
  const void *x = host[0], *w = host[1];
  void *y = host[2];
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    double ss = 0;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      ss += v * v;
    }
    const double inv = 1.0 / sqrt(ss / (double)a->cols + (double)a->eps);
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      const double g = scree__load_elem(w, a->w_dtype, (size_t)c);
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), v * inv * g);
    }
  }
}
