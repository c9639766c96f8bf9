/* softmax_ref.c - the CPU reference for last-dimension softmax (double
 * accumulation). */
#include <math.h>

#include "ops/op.h"

/* host: x, y in the problem's buffer order (ops/softmax.c). Each element
 * of x is read for the last time just before its own y is written, so y
 * may be x (in place). */
SCREE__REFERENCE(softmax) {
  const scree_softmax_args *a = args;
  const void *x = host[0];
  void *y = host[1];
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  const double s = a->scale != 0.f ? (double)a->scale : 1.0;
  for (int64_t r = 0; r < a->rows; r++) {
    double m = -INFINITY;
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = s * scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      if (v > m) m = v;
    }
    double sum = 0;
    for (int64_t c = 0; c < a->cols; c++)
      sum += exp(s * scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c)) - m);
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = s * scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), exp(v - m) / sum);
    }
  }
}
