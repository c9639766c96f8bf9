/* ragged_softmax_ref.c - the CPU reference for the ragged softmax (double
 * accumulation).
 *
 * host: x, cu_seqlens, y in the problem's buffer order (ops/ragged_softmax.c);
 * x and y laid out with the args' strides (0 meaning cols), cu_seqlens
 * batch + 1 int32 entries. For each sequence and column: m = max of s * x
 * over the sequence's tokens, then y = exp(s * x - m) / sum exp(s * x - m),
 * with s the scale (0 means 1). Walks each sequence row by row (three
 * passes) with per-column maxima and sums, so memory is read in order. If
 * scratch memory cannot be had, y is written as NaN so that any comparison
 * fails loudly. */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h"

SCREE__REFERENCE(ragged_softmax) {
  const scree_ragged_softmax_args *a = args;
  const void *x = host[0];
  const int32_t *cu = host[1];
  void *y = host[2];
  const int64_t cols = a->cols;
  const int64_t xs = a->x_stride ? a->x_stride : cols;
  const int64_t ys = a->y_stride ? a->y_stride : cols;
  const double s = a->scale != 0.f ? (double)a->scale : 1.0;
  double *m = malloc(2 * (size_t)cols * sizeof *m);
  double *sum = m ? m + cols : NULL;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t t0 = cu[b], t1 = cu[b + 1];
    if (!m) {
      for (int64_t t = t0; t < t1; t++)
        for (int64_t c = 0; c < cols; c++)
          scree__store_elem(y, a->y_dtype, (size_t)(t * ys + c), NAN);
      continue;
    }
    for (int64_t c = 0; c < cols; c++) m[c] = -INFINITY, sum[c] = 0;
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < cols; c++) {
        const double v = s * scree__load_elem(x, a->x_dtype, (size_t)(t * xs + c));
        if (v > m[c]) m[c] = v;
      }
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < cols; c++)
        sum[c] += exp(s * scree__load_elem(x, a->x_dtype, (size_t)(t * xs + c)) - m[c]);
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < cols; c++)
        scree__store_elem(y, a->y_dtype, (size_t)(t * ys + c),
                          exp(s * scree__load_elem(x, a->x_dtype, (size_t)(t * xs + c)) - m[c]) /
                              sum[c]);
  }
  free(m);
}
