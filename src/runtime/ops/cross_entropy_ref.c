/* cross_entropy_ref.c - the CPU reference for cross-entropy forward (double
 * accumulation). */
#include <math.h>

#include "ops/op.h"

/* host: logits, targets (int64), loss, lse in the problem's buffer order
 * (ops/cross_entropy.c); lse may be NULL (not written). */
SCREE__REFERENCE(cross_entropy) {
  const scree_cross_entropy_args *a = args;
  const void *logits = host[0];
  const int64_t *targets = host[1];
  float *loss = host[2], *lse = host[3];
  const int64_t ls = a->logits_stride ? a->logits_stride : a->vocab;
  for (int64_t r = 0; r < a->rows; r++) {
    double m = -INFINITY;
    for (int64_t c = 0; c < a->vocab; c++) {
      const double v = scree__load_elem(logits, a->dtype, (size_t)(r * ls + c));
      if (v > m) m = v;
    }
    double sum = 0;
    for (int64_t c = 0; c < a->vocab; c++)
      sum += exp(scree__load_elem(logits, a->dtype, (size_t)(r * ls + c)) - m);
    const double l = m + log(sum);
    const int64_t t = targets[r];
    if (t == a->ignore_index)
      loss[r] = 0.f;
    else if (t >= 0 && t < a->vocab)
      loss[r] = (float)(l - scree__load_elem(logits, a->dtype, (size_t)(r * ls + t)));
    else
      loss[r] = NAN;
    if (lse) lse[r] = (float)l;
  }
}
