/*
 * attention_ref.h - what varlen attention's forward and backward share:
 * their CPU references (the forward's in ops/attention.c, the op's
 * SCREE__REFERENCE hook, the backward's in ops/attention_backward_ref.c):
 * the rule that says which keys a query row sees, and the backward
 * reference's entry; and their ops' variant rule (dtype, head_dim, causal,
 * window). Not API.
 */
#ifndef SCREE_OPS_ATTENTION_REF_H
#define SCREE_OPS_ATTENTION_REF_H

#include <stdint.h>

#include "ops/op.h"

/* The variant fields both attention ops' config checks start with: fp16
 * or bf16, head_dim 32, 64, 96, 128 or 256, causal and window 0 or 1.
 * 1 if they hold, else 0 with the reason in why. */
static inline int scree__attention_variant_ok(int dtype, int head_dim, int causal, int window,
                                              char *why, size_t n) {
  if (dtype != SCREE_DTYPE_FP16 && dtype != SCREE_DTYPE_BF16) {
    scree__set_why(why, n, "dtype code %d is not fp16 or bf16", dtype);
    return 0;
  }
  if (head_dim != 32 && head_dim != 64 && head_dim != 96 && head_dim != 128 && head_dim != 256) {
    scree__set_why(why, n, "head_dim=%d is not 32, 64, 96, 128 or 256", head_dim);
    return 0;
  }
  if ((causal | window) & ~1) {
    scree__set_why(why, n, "causal and window are 0 or 1");
    return 0;
  }
  return 1;
}

/* The visible keys of query row i of a sequence with lq queries and lk keys,
 * unclamped: [*lo, *hi]; lo may be below 0 and hi past lk - 1 (INT64
 * bounds for unbounded sides). Query row i sits at key position
 * p = i + lk - lq (bottom-right alignment) and sees [p - window_left,
 * p + min(window_right, 0 if causal)], a negative side being unbounded. */
static inline void scree__attention_row_bounds(const scree_attention_args *a, int64_t i,
                                               int64_t lq, int64_t lk, int64_t *lo,
                                               int64_t *hi) {
  /* Lengths are int32, so windows past 2^40 are as good as unbounded and
   * clamping them keeps p -/+ window from overflowing. */
  const int64_t big = (int64_t)1 << 40;
  const int64_t p = i + lk - lq;
  int64_t left = a->window_left, right = a->window_right;
  if (a->causal) right = 0; /* min(right, 0), with -1 (unbounded) as +inf */
  if (left > big) left = big;
  if (right > big) right = big;
  *lo = left >= 0 ? p - left : INT64_MIN;
  *hi = right >= 0 ? p + right : INT64_MAX;
}

/* [lo, hi] clamped to the keys [0, lk) (lo > hi: none). */
static inline void scree__attention_clamp_bounds(int64_t lk, int64_t *lo, int64_t *hi) {
  if (*lo < 0) *lo = 0;
  if (*hi > lk - 1) *hi = lk - 1;
}

/* The gradients' strides in elements (0 = dense: heads * head_dim and
 * head_dim), named as the fields the backward's arguments will have. dq is
 * [total_q, heads_q, head_dim] like q; dk and dv [total_k, heads_kv,
 * head_dim] like k and v. */
typedef struct scree__attention_grad_strides {
  int64_t dout_token_stride, dout_head_stride, dq_token_stride, dq_head_stride;
  int64_t dk_token_stride, dk_head_stride, dv_token_stride, dv_head_stride;
} scree__attention_grad_strides;

/* The backward of scree_attention in double accumulation: dq, dk and dv of
 * a loss given dout = dL/dout, the truth the backward kernel is tested
 * against (docs/kernels/attention-backward.md).
 *
 * a: the forward's arguments (sizes, strides, masks, scale, softcap, dtype;
 * the pointer fields are ignored). q, k, v, out: host copies laid out as
 * the device buffers (a's strides); out is the forward's output as stored.
 * lse: the forward's fp32 [heads_q, total_q] (natural log), required (NULL
 * writes every row as NaN). dout: like out, through gs's dout strides.
 * cu_q, cu_k: the cu_seqlens (batch + 1 entries). Writes every row of dq
 * (every head of every query token of the batch) and of dk and dv (every
 * kv head of every key token), in the dtype of a; the gaps between strided
 * rows are not touched. Thread-safe; the results do not depend on the
 * threads it uses, nor on the other sequences of the batch.
 *
 * Per sequence, query head h and visible key j of row i, with x = q_i . k_j
 * and s = scale x, or softcap tanh(scale x / softcap):
 *   P_ij = exp(s_ij - lse_i)          the forward's lse, as the kernel uses it
 *   D_i  = sum_c dout_ic out_ic       the stored out, as the kernel's preprocess
 *   dP_ij = dout_i . v_j
 *   dS_ij = P_ij (dP_ij - D_i) f_ij   dL/ds f, f = 1, or 1 - tanh^2(scale x / softcap)
 *   dq_i = scale sum_j dS_ij k_j;  dk_j = scale sum_{h in group, i} dS_ij q_i;
 *   dv_j = sum_{h in group, i} P_ij dout_i
 * (dL/dx = scale dS, the kernel's dS). In fp16 and bf16, P and dS are
 * rounded to the dtype (from float, to nearest even: scree__round_elem)
 * before they enter the sums, as the kernel rounds them for its tensor-core
 * products; in fp32 they are not. The sums are double, and each gradient
 * element is rounded to the dtype once.
 * A row that sees no key, or whose lse is -inf, adds nothing and gets a dq
 * of zeros; a key no row sees gets dk and dv of zeros. If scratch memory
 * cannot be allocated, the affected rows are written as NaN. */
void scree__attention_grads_ref(const scree_attention_args *a,
                                   const scree__attention_grad_strides *gs, const void *q,
                                   const void *k, const void *v, const void *out,
                                   const float *lse, const void *dout, const int32_t *cu_q,
                                   const int32_t *cu_k, void *dq, void *dk, void *dv);

#endif
