/*
 * rowwise_backward_ref.h - CPU references for the backward of RMSNorm, the
 * fused residual add + RMSNorm, LayerNorm, softmax (last dimension), the
 * ragged softmax and SwiGLU (ops/rowwise_backward_ref.c): the gradients
 * their backward kernels are tested against; and the cross-entropy forward
 * with label smoothing, z-loss and its gradient (scree_cross_entropy's
 * reference). Not API.
 *
 * Conventions are the forward references' (ops/rmsnorm.c, add_rmsnorm.c,
 * layernorm.c): double accumulation, elements read and written through
 * scree__load_elem / scree__store_elem (stores round to nearest even),
 * strides in elements with 0 meaning cols, rstd = 1 / sqrt(mean + eps) with
 * eps taken as the float the forward gets. x, residual, dx, dh, dh_next are
 * of x_dtype; w, dw, db of w_dtype; dy of y_dtype (the forward's y). dw
 * and db are sums over all rows. A NULL dw or db is not computed. Outputs
 * must not overlap the inputs. If scratch memory cannot be allocated, dw
 * and db are written as NaN. rows may be 0 (dw and db become zeros).
 * Thread-safe: they keep no state and write only their outputs.
 */
#ifndef SCREE_OPS_ROWWISE_BACKWARD_REF_H
#define SCREE_OPS_ROWWISE_BACKWARD_REF_H

#include <stdint.h>

#include "scree.h"

/* y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps). Per row, with
 * g = dy * w and s = sum_c g_c x_c:
 *   dx = rstd * g - rstd^3 * s / cols * x
 *   dw = sum over rows of dy * x * rstd */
void scree__rmsnorm_backward_ref(const void *x, int64_t x_stride, const void *w,
                                 const void *dy, int64_t dy_stride, void *dx,
                                 int64_t dx_stride, void *dw, int64_t rows, int64_t cols,
                                 scree_dtype x_dtype, scree_dtype w_dtype,
                                 scree_dtype y_dtype, float eps);

/* h = x + residual rounded to x_dtype (as the forward writes it), y =
 * rmsnorm(h) * w. dh_next is the gradient flowing into h from the rest of
 * the residual stream (NULL: zeros). dh = dL/dh = the RMSNorm backward of
 * dy at h, plus dh_next; it is the gradient of both x and residual (the
 * rounding of h is taken as the identity). dw as RMSNorm's, of h. */
void scree__add_rmsnorm_backward_ref(const void *x, int64_t x_stride, const void *residual,
                                     int64_t residual_stride, const void *w, const void *dy,
                                     int64_t dy_stride, const void *dh_next,
                                     int64_t dh_next_stride, void *dh, int64_t dh_stride,
                                     void *dw, int64_t rows, int64_t cols,
                                     scree_dtype x_dtype, scree_dtype w_dtype,
                                     scree_dtype y_dtype, float eps);

/* y = (x - mu) * rstd * w + b, mu = mean(x), rstd = 1 / sqrt(mean((x -
 * mu)^2) + eps) (two passes, as the forward). Per row, with xhat = (x - mu)
 * * rstd and g = dy * w:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   dw = sum over rows of dy * xhat;  db = sum over rows of dy
 * The bias does not enter dx or dw: db may be asked for (or not) whether
 * the forward had a bias or not. */
void scree__layernorm_backward_ref(const void *x, int64_t x_stride, const void *w,
                                   const void *dy, int64_t dy_stride, void *dx,
                                   int64_t dx_stride, void *dw, void *db, int64_t rows,
                                   int64_t cols, scree_dtype x_dtype, scree_dtype w_dtype,
                                   scree_dtype y_dtype, float eps);

/* Cross-entropy over rows of vocab logits of dtype (include/scree.h,
 * scree_cross_entropy): per row, in double, lse = m + log(sum exp(x - m)),
 *   loss = (1 - eps)(lse - x_t) + eps (lse - sum_v x_v / vocab) + z lse^2
 * (0 where t == ignore_index, NaN where t is outside [0, vocab)); lse when
 * not NULL; dlogits (of dtype, stride ds; NULL: not written) =
 *   (softmax (1 + 2 z lse) - (1 - eps) onehot - eps / vocab) * scale,
 * zeros on ignored rows, NaN on rows with a target outside [0, vocab);
 * scale = grad_scale (0 means 1), divided by the number of rows not
 * ignored when reduction is SCREE_REDUCTION_MEAN. Strides 0 mean vocab.
 * dlogits may be exactly logits (same stride): each row is read whole
 * before it is written. If scratch memory cannot be allocated, loss is
 * written as NaN. */
void scree__cross_entropy_ref(const void *logits, int64_t ls, const int64_t *targets,
                              float *loss, float *lse, void *dlogits, int64_t ds, int64_t rows,
                              int64_t vocab, scree_dtype dtype, int64_t ignore_index,
                              float eps, float z, int reduction, float grad_scale);

/* Softmax (last dimension) backward: y = softmax(scale * x) per row (the
 * forward's output), dy its gradient. Per row, with d = sum_c y_c dy_c:
 *   dx = scale * y * (dy - d)      (scale 0 means 1)
 * y of y_dtype; dy and dx of dy_dtype. dx may be dy exactly (in place):
 * each row's dot product is taken before any of its dx is written. */
void scree__softmax_backward_ref(const void *y, int64_t y_stride, const void *dy,
                                 int64_t dy_stride, void *dx, int64_t dx_stride, int64_t rows,
                                 int64_t cols, scree_dtype y_dtype, scree_dtype dy_dtype,
                                 float scale);

/* Ragged softmax backward: y = the softmax over the tokens of each sequence
 * (tokens [cu_seqlens[b], cu_seqlens[b + 1])), per column, dy its
 * gradient. Per sequence and column, with d = sum_t y[t, c] dy[t, c] over
 * the sequence's tokens:
 *   dx[t, c] = scale * y[t, c] * (dy[t, c] - d)      (scale 0 means 1)
 * y of y_dtype; dy and dx of dy_dtype, [total, cols] with strides (0 means
 * cols); cu_seqlens as the forward's (batch + 1 entries from 0,
 * non-decreasing, ending at the total). dx may be dy exactly. If scratch
 * memory cannot be had, dx is written as NaN. */
void scree__ragged_softmax_backward_ref(const void *y, int64_t y_stride, const void *dy,
                                        int64_t dy_stride, void *dx, int64_t dx_stride,
                                        const int32_t *cu_seqlens, int64_t batch, int64_t cols,
                                        scree_dtype y_dtype, scree_dtype dy_dtype, float scale);

/* SwiGLU backward: y = silu(g) * u, s = sigmoid(g). Elementwise:
 *   du = dy * g * s;   dg = dy * u * s * (1 + g (1 - s))
 * gate, up, dgate, dup of dtype, dy of dy_dtype; strides in elements (0
 * means cols for gate, up, dy, dgate, dup alike: the callers resolve the
 * fused forms to a pointer and stride per tensor). dgate may be gate and
 * dup may be up exactly (each element read before it is written). */
void scree__swiglu_backward_ref(const void *gate, int64_t gate_stride, const void *up,
                                int64_t up_stride, const void *dy, int64_t dy_stride,
                                void *dgate, int64_t dgate_stride, void *dup,
                                int64_t dup_stride, int64_t rows, int64_t cols,
                                scree_dtype dtype, scree_dtype dy_dtype);

#endif
