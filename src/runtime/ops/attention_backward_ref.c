/* attention_backward_ref.c - the CPU reference for the backward of varlen
 * attention: dq, dk and dv in double accumulation (ops/attention_ref.h says
 * what it computes, docs/kernels/attention-backward.md how the kernel will).
 *
 * How: first D_i = dout_i . out_i for every (query head, token), as the
 * kernel's preprocess will. Then two kinds of work item, each the only
 * writer of its rows so that they run on threads without locks and every
 * sum has one fixed order whatever the threads do:
 *   - dK/dV items: (sequence, kv head, block of up to BWD_ROWS keys). For
 *     each query head of the group, in order, and each query row, in
 *     order, that sees a key of the block, they recompute P and dS for the
 *     visible keys of the block and add P dout and scale dS q to the keys'
 *     rows.
 *   - dQ items: (sequence, kv head, block of up to BWD_ROWS query rows).
 *     For each head of the group and row, they recompute P and dS over the
 *     row's visible keys and sum scale dS k in key order.
 * Scores are recomputed by both (twice the score work of one pass, which
 * a CPU reference can afford for the freedom of splitting either way).
 * Scores and dot products sum c = 0, 1, ... in order, as plain loops, and
 * the score follows the forward reference's formula step by step (scale,
 * then softcap tanh(x / softcap)) so that P agrees with the forward's lse
 * to rounding. Items run on scree__parallel_for, longest first, when the
 * batch is big enough to pay for threads.
 *
 * P and dS as the kernel multiplies them: dS is the kernel's, P (dP - D) f
 * with f = 1, or 1 - tanh^2 with a softcap, without the scale. In fp16 and
 * bf16 the kernel rounds P and dS to the dtype (from fp32, to nearest
 * even) for its tensor-core products, so the reference rounds them the
 * same way (scree__round_elem) before they enter its double sums, and
 * multiplies the rounded dS by the scale (the kernel scales its fp32 sums
 * of dk and dq; in double the two orders agree to rounding). fp32 keeps P
 * and dS as computed. Unrounded, they were up to half a unit in the last
 * place (2^-9 to 2^-8 relative in bf16) from the kernel's per term, errors
 * that grow as the square root of a sum's terms (8192 in a dk of a GQA
 * 32:8 sequence of 2048 queries) and that the GPU tests' tolerances had to
 * absorb. */
#include <math.h>
#include <stdlib.h>

#include "ops/attention_ref.h"
#include "ops/op.h"

/* Keys per dK/dV item and query rows per dQ item. */
#define BWD_ROWS 64
/* Below this many multiply-adds the batch runs on the calling thread. */
#define BWD_SERIAL_WORK (1 << 22)

typedef struct bwd_item {
  int64_t b, g;   /* sequence, kv head */
  int64_t r0, r1; /* keys (kv = 1) or query rows (kv = 0) [r0, r1) of the sequence */
  int kv;
  double cost;
} bwd_item;

typedef struct bwd_job {
  const scree_attention_args *a;
  const void *q, *k, *v, *out, *dout;
  const float *lse;
  const int32_t *cu_q, *cu_k;
  void *dq, *dk, *dv;
  /* Strides in elements, the dense defaults filled in. */
  int64_t qt, qh, kt, kh, vt, vh, ot, oh, dot, doh, dqt, dqh, dkt, dkh, dvt, dvh;
  int64_t d, group;
  double scale, cap; /* cap: the softcap, 0 for none */
  int round;         /* P and dS rounded to the dtype (fp16, bf16) */
  double *D;         /* [heads_q, total_q] */
  bwd_item *items;
} bwd_job;

static int64_t or_dense(int64_t s, int64_t dense) { return s ? s : dense; }

/* out[r] = x . rows[r] and out2[r] = x2 . rows2[r] for the n rows of d
 * doubles, each summed c = 0, 1, ... in order; four rows at a time so
 * that eight sums run side by side (one alone waits on each add). */
static void dots(const double *x, const double *rows, const double *x2, const double *rows2,
                 int64_t n, int64_t d, double *out, double *out2) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) {
    const double *a0 = rows + r * d, *a1 = a0 + d, *a2 = a1 + d, *a3 = a2 + d;
    const double *b0 = rows2 + r * d, *b1 = b0 + d, *b2 = b1 + d, *b3 = b2 + d;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0;
    for (int64_t c = 0; c < d; c++) {
      s0 += x[c] * a0[c], s1 += x[c] * a1[c], s2 += x[c] * a2[c], s3 += x[c] * a3[c];
      t0 += x2[c] * b0[c], t1 += x2[c] * b1[c], t2 += x2[c] * b2[c], t3 += x2[c] * b3[c];
    }
    out[r] = s0, out[r + 1] = s1, out[r + 2] = s2, out[r + 3] = s3;
    out2[r] = t0, out2[r + 1] = t1, out2[r + 2] = t2, out2[r + 3] = t3;
  }
  for (; r < n; r++) {
    double s0 = 0, t0 = 0;
    for (int64_t c = 0; c < d; c++) s0 += x[c] * rows[r * d + c], t0 += x2[c] * rows2[r * d + c];
    out[r] = s0, out2[r] = t0;
  }
}

/* The score of raw x = q . k, as the forward reference computes it, and
 * f = (ds/dx) / scale: 1, or 1 - tanh^2 with a softcap. */
static double score(const bwd_job *j, double x, double *f) {
  const double s = x * j->scale;
  if (j->cap > 0) {
    const double t = tanh(s / j->cap);
    *f = 1 - t * t;
    return j->cap * t;
  }
  *f = 1;
  return s;
}

/* P and dS of raw score x, dP = dp, row D and lse as the kernel multiplies
 * them: dS = P (dP - D) f, both rounded to the dtype in fp16 and bf16 (dS
 * before the scale). */
static void p_ds(const bwd_job *j, double x, double dp, double Di, double lse, double *p,
                 double *ds) {
  double f;
  const double pe = exp(score(j, x, &f) - lse);
  const double d = pe * (dp - Di) * f;
  if (j->round) {
    *p = scree__round_elem(j->a->dtype, pe);
    *ds = scree__round_elem(j->a->dtype, d);
  } else {
    *p = pe, *ds = d;
  }
}

/* Loads n elements of row `off` of p into x, as double. */
static void load_row(const void *p, int dtype, int64_t off, int64_t n, double *x) {
  for (int64_t c = 0; c < n; c++) x[c] = scree__load_elem(p, dtype, (size_t)(off + c));
}

static void store_row(void *p, int dtype, int64_t off, int64_t n, const double *x,
                      double val) {
  for (int64_t c = 0; c < n; c++)
    scree__store_elem(p, dtype, (size_t)(off + c), x ? x[c] : val);
}

/* The visible keys [lo, hi] of query row i, clamped to the sequence. */
static void bounds(const bwd_job *j, int64_t i, int64_t lq, int64_t lk, int64_t *lo,
                   int64_t *hi) {
  scree__attention_row_bounds(j->a, i, lq, lk, lo, hi);
  scree__attention_clamp_bounds(lk, lo, hi);
}

/* dK and dV of keys [r0, r1) of the item's sequence and kv head. */
static void run_kv(const bwd_job *j, const bwd_item *it) {
  const scree_attention_args *a = j->a;
  const int64_t d = j->d, nk = it->r1 - it->r0;
  const int64_t q0 = j->cu_q[it->b], k0 = j->cu_k[it->b];
  const int64_t lq = j->cu_q[it->b + 1] - q0, lk = j->cu_k[it->b + 1] - k0;
  double *kk = malloc(sizeof(double) * (size_t)(nk * d));
  double *vv = malloc(sizeof(double) * (size_t)(nk * d));
  double *dk = calloc((size_t)(nk * d), sizeof(double));
  double *dv = calloc((size_t)(nk * d), sizeof(double));
  double *qr = malloc(sizeof(double) * (size_t)d);
  double *dor = malloc(sizeof(double) * (size_t)d);
  double *xs = malloc(sizeof(double) * (size_t)nk), *dps = malloc(sizeof(double) * (size_t)nk);
  const int ok = kk && vv && dk && dv && qr && dor && xs && dps;
  if (ok) {
    for (int64_t jj = 0; jj < nk; jj++) {
      const int64_t tk = k0 + it->r0 + jj;
      load_row(j->k, a->dtype, tk * j->kt + it->g * j->kh, d, kk + jj * d);
      load_row(j->v, a->dtype, tk * j->vt + it->g * j->vh, d, vv + jj * d);
    }
    for (int64_t h = it->g * j->group; h < (it->g + 1) * j->group; h++)
      for (int64_t i = 0; i < lq; i++) {
        const int64_t t = q0 + i;
        int64_t lo, hi;
        bounds(j, i, lq, lk, &lo, &hi);
        if (lo < it->r0) lo = it->r0;
        if (hi > it->r1 - 1) hi = it->r1 - 1;
        const double lse = j->lse[h * a->total_q + t];
        if (lo > hi || lse == -INFINITY) continue; /* adds nothing */
        load_row(j->q, a->dtype, t * j->qt + h * j->qh, d, qr);
        load_row(j->dout, a->dtype, t * j->dot + h * j->doh, d, dor);
        const double Di = j->D[h * a->total_q + t];
        const int64_t off = lo - it->r0;
        dots(qr, kk + off * d, dor, vv + off * d, hi - lo + 1, d, xs, dps);
        for (int64_t jj = off; jj <= hi - it->r0; jj++) {
          double p, ds;
          p_ds(j, xs[jj - off], dps[jj - off], Di, lse, &p, &ds);
          const double dx = ds * j->scale;
          for (int64_t c = 0; c < d; c++) {
            dv[jj * d + c] += p * dor[c];
            dk[jj * d + c] += dx * qr[c];
          }
        }
      }
  }
  for (int64_t jj = 0; jj < nk; jj++) {
    const int64_t tk = k0 + it->r0 + jj;
    store_row(j->dk, a->dtype, tk * j->dkt + it->g * j->dkh, d, ok ? dk + jj * d : NULL, NAN);
    store_row(j->dv, a->dtype, tk * j->dvt + it->g * j->dvh, d, ok ? dv + jj * d : NULL, NAN);
  }
  free(kk), free(vv), free(dk), free(dv), free(qr), free(dor), free(xs), free(dps);
}

/* dQ of query rows [r0, r1) of the item's sequence, for the query heads of
 * its kv head. */
static void run_q(const bwd_job *j, const bwd_item *it) {
  const scree_attention_args *a = j->a;
  const int64_t d = j->d;
  const int64_t q0 = j->cu_q[it->b], k0 = j->cu_k[it->b];
  const int64_t lq = j->cu_q[it->b + 1] - q0, lk = j->cu_k[it->b + 1] - k0;
  const int64_t h0 = it->g * j->group, h1 = h0 + j->group;
  /* The keys any row of the item sees (the intervals only move right). */
  int64_t klo, khi, lo1, hi1;
  bounds(j, it->r0, lq, lk, &klo, &hi1);
  bounds(j, it->r1 - 1, lq, lk, &lo1, &khi);
  const int64_t nk = khi >= klo ? khi - klo + 1 : 0;
  double *kk = malloc(sizeof(double) * (size_t)(nk * d + 1));
  double *vv = malloc(sizeof(double) * (size_t)(nk * d + 1));
  double *acc = malloc(sizeof(double) * (size_t)d);
  double *qr = malloc(sizeof(double) * (size_t)d);
  double *dor = malloc(sizeof(double) * (size_t)d);
  double *xs = malloc(sizeof(double) * (size_t)(nk + 1));
  double *dps = malloc(sizeof(double) * (size_t)(nk + 1));
  if (!kk || !vv || !acc || !qr || !dor || !xs || !dps) {
    for (int64_t h = h0; h < h1; h++)
      for (int64_t t = q0 + it->r0; t < q0 + it->r1; t++)
        store_row(j->dq, a->dtype, t * j->dqt + h * j->dqh, d, NULL, NAN);
    goto done;
  }
  for (int64_t jj = 0; jj < nk; jj++) {
    const int64_t tk = k0 + klo + jj;
    load_row(j->k, a->dtype, tk * j->kt + it->g * j->kh, d, kk + jj * d);
    load_row(j->v, a->dtype, tk * j->vt + it->g * j->vh, d, vv + jj * d);
  }
  for (int64_t h = h0; h < h1; h++)
    for (int64_t i = it->r0; i < it->r1; i++) {
      const int64_t t = q0 + i;
      int64_t lo, hi;
      bounds(j, i, lq, lk, &lo, &hi);
      const double lse = j->lse[h * a->total_q + t];
      if (lo > hi || lse == -INFINITY) {
        store_row(j->dq, a->dtype, t * j->dqt + h * j->dqh, d, NULL, 0.0);
        continue;
      }
      load_row(j->q, a->dtype, t * j->qt + h * j->qh, d, qr);
      load_row(j->dout, a->dtype, t * j->dot + h * j->doh, d, dor);
      const double Di = j->D[h * a->total_q + t];
      for (int64_t c = 0; c < d; c++) acc[c] = 0;
      const int64_t off = lo - klo;
      dots(qr, kk + off * d, dor, vv + off * d, hi - lo + 1, d, xs, dps);
      for (int64_t jj = off; jj <= hi - klo; jj++) {
        double p, ds;
        p_ds(j, xs[jj - off], dps[jj - off], Di, lse, &p, &ds);
        const double dx = ds * j->scale;
        for (int64_t c = 0; c < d; c++) acc[c] += dx * kk[jj * d + c];
      }
      store_row(j->dq, a->dtype, t * j->dqt + h * j->dqh, d, acc, 0.0);
    }
done:
  free(kk), free(vv), free(acc), free(qr), free(dor), free(xs), free(dps);
}

static void run_item(void *user, int idx) {
  const bwd_job *j = user;
  const bwd_item *it = &j->items[idx];
  if (it->kv)
    run_kv(j, it);
  else
    run_q(j, it);
}

static int cmp_cost(const void *x, const void *y) {
  const double a = ((const bwd_item *)x)->cost, b = ((const bwd_item *)y)->cost;
  return a > b ? -1 : a < b;
}

/* Every row of dq, dk and dv as NaN, so that any comparison fails. */
static void fill_nan(const bwd_job *j) {
  const scree_attention_args *a = j->a;
  for (int64_t t = 0; t < a->total_q; t++)
    for (int64_t h = 0; h < a->heads_q; h++)
      store_row(j->dq, a->dtype, t * j->dqt + h * j->dqh, j->d, NULL, NAN);
  for (int64_t t = 0; t < a->total_k; t++)
    for (int64_t g = 0; g < a->heads_kv; g++) {
      store_row(j->dk, a->dtype, t * j->dkt + g * j->dkh, j->d, NULL, NAN);
      store_row(j->dv, a->dtype, t * j->dvt + g * j->dvh, j->d, NULL, NAN);
    }
}

void scree__attention_grads_ref(const scree_attention_args *a,
                                   const scree__attention_grad_strides *gs, const void *q,
                                   const void *k, const void *v, const void *out,
                                   const float *lse, const void *dout, const int32_t *cu_q,
                                   const int32_t *cu_k, void *dq, void *dk, void *dv) {
  if (a->batch <= 0 || a->heads_q <= 0 || a->heads_kv <= 0 || a->head_dim <= 0) return;
  const int64_t d = a->head_dim, hq = a->heads_q, hkv = a->heads_kv;
  bwd_job j = {.a = a, .q = q, .k = k, .v = v, .out = out, .dout = dout, .lse = lse,
               .cu_q = cu_q, .cu_k = cu_k, .dq = dq, .dk = dk, .dv = dv, .d = d,
               .group = hq / hkv};
  if (j.group < 1) j.group = 1;
  j.qt = or_dense(a->q_token_stride, hq * d), j.qh = or_dense(a->q_head_stride, d);
  j.kt = or_dense(a->k_token_stride, hkv * d), j.kh = or_dense(a->k_head_stride, d);
  j.vt = or_dense(a->v_token_stride, hkv * d), j.vh = or_dense(a->v_head_stride, d);
  j.ot = or_dense(a->out_token_stride, hq * d), j.oh = or_dense(a->out_head_stride, d);
  j.dot = or_dense(gs->dout_token_stride, hq * d), j.doh = or_dense(gs->dout_head_stride, d);
  j.dqt = or_dense(gs->dq_token_stride, hq * d), j.dqh = or_dense(gs->dq_head_stride, d);
  j.dkt = or_dense(gs->dk_token_stride, hkv * d), j.dkh = or_dense(gs->dk_head_stride, d);
  j.dvt = or_dense(gs->dv_token_stride, hkv * d), j.dvh = or_dense(gs->dv_head_stride, d);
  j.scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)d);
  j.cap = a->softcap > 0.f ? (double)a->softcap : 0.0;
  j.round = a->dtype == SCREE_DTYPE_FP16 || a->dtype == SCREE_DTYPE_BF16;

  int64_t n = 0;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t lq = (int64_t)cu_q[b + 1] - cu_q[b], lk = (int64_t)cu_k[b + 1] - cu_k[b];
    n += (lq + BWD_ROWS - 1) / BWD_ROWS + (lk + BWD_ROWS - 1) / BWD_ROWS;
  }
  n *= hkv;
  if (n == 0) return;
  /* More items than an int is far beyond what a CPU reference can
   * compute; like a failed allocation, or a missing lse, it writes NaN. */
  j.items = n <= INT32_MAX ? malloc(sizeof(bwd_item) * (size_t)n) : NULL;
  j.D = malloc(sizeof(double) * (size_t)(hq * a->total_q + 1));
  if (!j.items || !j.D || !lse) {
    fill_nan(&j);
    free(j.items), free(j.D);
    return;
  }
  /* D = rowsum(dout * out), the stored out as the kernel reads it. */
  for (int64_t h = 0; h < hq; h++)
    for (int64_t t = 0; t < a->total_q; t++) {
      double s = 0;
      for (int64_t c = 0; c < d; c++)
        s += scree__load_elem(dout, a->dtype, (size_t)(t * j.dot + h * j.doh + c)) *
             scree__load_elem(out, a->dtype, (size_t)(t * j.ot + h * j.oh + c));
      j.D[h * a->total_q + t] = s;
    }

  /* The items, with their visible (row, key) pairs as cost. */
  int64_t m = 0;
  double work = 0;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t lq = (int64_t)cu_q[b + 1] - cu_q[b], lk = (int64_t)cu_k[b + 1] - cu_k[b];
    for (int kv = 0; kv < 2; kv++) {
      const int64_t len = kv ? lk : lq;
      for (int64_t r0 = 0; r0 < len; r0 += BWD_ROWS) {
        const int64_t r1 = r0 + BWD_ROWS < len ? r0 + BWD_ROWS : len;
        double pairs = 0;
        for (int64_t i = kv ? 0 : r0; i < (kv ? lq : r1); i++) {
          int64_t lo, hi;
          bounds(&j, i, lq, lk, &lo, &hi);
          if (kv && lo < r0) lo = r0;
          if (kv && hi > r1 - 1) hi = r1 - 1;
          if (hi >= lo) pairs += (double)(hi - lo + 1);
        }
        /* Three dot products of d per pair, and a d-long row update or two. */
        const double cost = (pairs + (double)(r1 - r0)) * (double)j.group * (double)d * 4;
        for (int64_t g = 0; g < hkv; g++)
          j.items[m++] = (bwd_item){.b = b, .g = g, .r0 = r0, .r1 = r1, .kv = kv,
                                    .cost = cost};
        work += cost * (double)hkv;
      }
    }
  }
  if (work < BWD_SERIAL_WORK) {
    for (int64_t i = 0; i < m; i++) run_item(&j, (int)i);
  } else {
    qsort(j.items, (size_t)m, sizeof(bwd_item), cmp_cost); /* longest first */
    scree__parallel_for((int)m, 0, run_item, &j);
  }
  free(j.items), free(j.D);
}
