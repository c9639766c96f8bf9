/* swiglu_ref.c - the CPU reference for SwiGLU (double arithmetic). */
#include <math.h>

#include "ops/op.h"

/* host: gate (or gate_up, one [rows, 2 * cols] tensor, when args->up is 0),
 * up (two tensors only), y: the problem's buffer order (ops/swiglu.c). */
SCREE__REFERENCE(swiglu) {
  const scree_swiglu_args *a = args;
  const int two = a->up != 0;
  const void *gate = host[0], *up = two ? host[1] : host[0];
  void *y = host[two ? 2 : 1];
  const int64_t gs = a->gate_stride ? a->gate_stride : (two ? a->cols : 2 * a->cols);
  const int64_t us = two ? (a->up_stride ? a->up_stride : a->cols) : gs;
  const int64_t uoff = two ? 0 : a->cols; /* up = gate + cols in one tensor */
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++)
    for (int64_t c = 0; c < a->cols; c++) {
      const double g = scree__load_elem(gate, a->dtype, (size_t)(r * gs + c));
      const double u = scree__load_elem(up, a->dtype, (size_t)(r * us + uoff + c));
      /* exp(-g) overflows to inf only for g < -709, where g / inf = -0 is
       * the right limit. */
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), g / (1.0 + exp(-g)) * u);
    }
}
