/* rope_ref.c - the CPU reference for RoPE (double arithmetic on the fp32
 * angle). */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h"

/* host: q, k (when args->k is set), positions (when args->positions is
 * set) or cu_seqlens, cos_sin (when args->cos_sin is set): the problem's
 * buffer order (ops/rope.c); q and k are rotated in place. Only which
 * pointers are nonzero is read from args, as the public entry reads them.
 *
 * The angle is modelled as the kernel and HuggingFace compute it in fp32:
 * inv_freq = 1 / theta^(2i / rotary_dim) rounded to float, then the float
 * product float(p) * inv_freq; its cos and sin are taken in double. */
SCREE__REFERENCE(rope) {
  const scree_rope_args *a = args;
  int n = 0;
  void *q = host[n++];
  void *k = a->k ? host[n++] : NULL;
  const void *positions = a->positions ? host[n++] : NULL;
  const int32_t *cu = a->positions ? NULL : host[n++];
  const float *cos_sin = a->cos_sin ? host[n++] : NULL;
  const int64_t d = a->head_dim, rd = a->rotary_dim ? a->rotary_dim : d, half = rd / 2;
  const float theta = a->theta != 0.f ? a->theta : 10000.0f;
  const int64_t qh = a->q_head_stride ? a->q_head_stride : d;
  const int64_t qt = a->q_token_stride ? a->q_token_stride : a->heads_q * d;
  const int64_t kh = a->k_head_stride ? a->k_head_stride : d;
  const int64_t kt = a->k_token_stride ? a->k_token_stride : a->heads_kv * d;
  float *inv = malloc((size_t)(half > 0 ? half : 1) * sizeof *inv);
  if (!inv) return;
  for (int64_t i = 0; i < half; i++) {
    const float e = (float)(2 * i) / (float)rd;
    inv[i] = 1.0f / (float)pow((double)theta, (double)e);
  }
  int64_t seq = 0;
  for (int64_t t = 0; t < a->total; t++) {
    int64_t p;
    if (positions) {
      p = a->positions_int64 ? ((const int64_t *)positions)[t] : ((const int32_t *)positions)[t];
    } else {
      while (seq < a->batch && cu[seq + 1] <= t) seq++; /* past empty sequences too */
      p = t - cu[seq];
    }
    for (int64_t i = 0; i < half; i++) {
      double c, s;
      if (cos_sin) {
        c = cos_sin[p * rd + i];
        s = cos_sin[p * rd + half + i];
      } else {
        const float ang = (float)p * inv[i];
        c = cos((double)ang);
        s = sin((double)ang);
      }
      const int64_t i1 = a->layout == SCREE_ROPE_NEOX ? i : 2 * i;
      const int64_t i2 = a->layout == SCREE_ROPE_NEOX ? i + half : 2 * i + 1;
      for (int64_t h = 0; h < a->heads_q + (k ? a->heads_kv : 0); h++) {
        void *x = h < a->heads_q ? q : k;
        const int64_t row = h < a->heads_q ? t * qt + h * qh : t * kt + (h - a->heads_q) * kh;
        const double x1 = scree__load_elem(x, a->dtype, (size_t)(row + i1));
        const double x2 = scree__load_elem(x, a->dtype, (size_t)(row + i2));
        scree__store_elem(x, a->dtype, (size_t)(row + i1), x1 * c - x2 * s);
        scree__store_elem(x, a->dtype, (size_t)(row + i2), x2 * c + x1 * s);
      }
    }
  }
  free(inv);
}
