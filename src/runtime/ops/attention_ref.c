/* attention_ref.c - the CPU reference for varlen attention forward (double
 * accumulation): the truth the GPU kernel is tested against.
 *
 * q, k, v, out: host copies laid out as the device buffers (the args' strides
 * apply, 0 meaning the packed default); cu_q, cu_k: host copies of the
 * cu_seqlens (batch + 1 entries). Writes every token row of out (all heads) and,
 * if lse is not NULL, lse[h * total_q + t] (natural log; -inf for a row with no key).
 * The pointer fields of `a` are ignored.
 *
 * The hook (op.h's SCREE__REFERENCE) takes the problem's buffers in the
 * order of ops/attention.c: q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse.
 *
 * Semantics (scree.h): per sequence b with Lq queries and Lk keys, query row
 * i sits at key position p = i + Lk - Lq (bottom-right alignment) and sees
 * the keys j in [p - window_left, p + min(window_right, 0 if causal)] of
 * [0, Lk) (a negative window side is unbounded); query head h reads kv head
 * h / (heads_q / heads_kv). A row with no visible key gets zeros and -inf.
 *
 * How: the work is split into items of (sequence, kv head, block of up to
 * REF_ROWS query rows). An item converts the keys its rows can see (the
 * union of the rows' intervals, which only move right as i grows) to double
 * once, K in panels of KB keys, then for each query head of the group and
 * each row computes scores only for the panels that hold the row's visible
 * interval, and the softmax and P.V over that interval alone. Each score is
 * q[c] * k[c] summed in order c = 0, 1, ... and each output element
 * p_j * v[j][c] summed in order j, as plain loops would; explicit two-wide
 * vectors compute several of them side by side. Items run on
 * scree__parallel_for when the batch is big enough to pay for threads
 * (about 20 GFLOP/s on two cores). If scratch memory cannot be allocated,
 * the rows are written as NaN so that any comparison fails loudly.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

/* Query rows per work item: enough that converting the item's keys is a
 * small part of its cost, few enough that a long sequence splits over the
 * threads. */
#define REF_ROWS 128
/* Below this many multiply-adds the batch runs on the calling thread. */
#define REF_SERIAL_WORK (1 << 22)

typedef struct ref_item {
  int64_t b, g;      /* sequence, kv head */
  int64_t r0, r1;    /* query rows [r0, r1) of the sequence */
  int64_t klo, khi;  /* keys any of these rows can see (klo > khi: none) */
  double cost;
} ref_item;

typedef struct ref_job {
  const scree_attention_args *a;
  const void *q, *k, *v;
  const int32_t *cu_q, *cu_k;
  void *out;
  float *lse;
  int64_t qts, qhs, kts, khs, vts, vhs, ots, ohs;
  int64_t d, group;
  double scale;
  ref_item *items;
} ref_job;

/* The visible keys of query row i, unclamped: [*lo, *hi]; lo may be below 0
 * and hi past lk - 1 (INT64 bounds for unbounded sides). */
static void row_bounds(const scree_attention_args *a, int64_t i, int64_t lq,
                       int64_t lk, int64_t *lo, int64_t *hi) {
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

static void clamp_bounds(int64_t lk, int64_t *lo, int64_t *hi) {
  if (*lo < 0) *lo = 0;
  if (*hi > lk - 1) *hi = lk - 1;
}

/* Writes rows [r0, r1) of the item's sequence, query head h, with `val`
 * and their lse with `lse_val` (zeros and -inf for rows that see no key,
 * NaN on failure). */
static void fill_rows(const ref_job *j, const ref_item *it, int64_t r0,
                      int64_t r1, int64_t h, double val, float lse_val) {
  const scree_attention_args *a = j->a;
  const int64_t q0 = j->cu_q[it->b];
  for (int64_t i = r0; i < r1; i++) {
    const int64_t t = q0 + i;
    for (int64_t c = 0; c < j->d; c++)
      scree__store_elem(j->out, a->dtype, (size_t)(t * j->ots + h * j->ohs + c), val);
    if (j->lse) j->lse[h * a->total_q + t] = lse_val;
  }
}

/* Two doubles: GCC and Clang vector extensions, SSE2 or NEON registers
 * (or pairs of scalars elsewhere). Every score and output element still
 * sums its terms one by one in the order of the plain loops: the vectors
 * only compute several of them side by side. */
typedef double v2d __attribute__((vector_size(16)));
static inline v2d ld2(const double *p) {
  v2d v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void st2(double *p, v2d v) { memcpy(p, &v, sizeof v); }

/* Keys per panel of the packed K: kp[(blk * d + c) * KB + lane] holds
 * element c of key blk * KB + lane, so the score loop reads KB keys'
 * element c from one contiguous run. */
#define KB 16

/* s[0 .. KB * (b1 - b0)) = q . key for the keys of panels [b0, b1). */
static void scores(const double *kp, const double *q, int64_t d, int64_t b0,
                   int64_t b1, double *s) {
  for (int64_t blk = b0; blk < b1; blk++) {
    v2d a0 = {0, 0}, a1 = {0, 0}, a2 = {0, 0}, a3 = {0, 0};
    v2d a4 = {0, 0}, a5 = {0, 0}, a6 = {0, 0}, a7 = {0, 0};
    const double *p = kp + blk * d * KB;
    for (int64_t c = 0; c < d; c++, p += KB) {
      const v2d qc = {q[c], q[c]};
      a0 += qc * ld2(p);
      a1 += qc * ld2(p + 2);
      a2 += qc * ld2(p + 4);
      a3 += qc * ld2(p + 6);
      a4 += qc * ld2(p + 8);
      a5 += qc * ld2(p + 10);
      a6 += qc * ld2(p + 12);
      a7 += qc * ld2(p + 14);
    }
    double *o = s + (blk - b0) * KB;
    st2(o, a0), st2(o + 2, a1), st2(o + 4, a2), st2(o + 6, a3);
    st2(o + 8, a4), st2(o + 10, a5), st2(o + 12, a6), st2(o + 14, a7);
  }
}

/* acc[0 .. d) += e[jj] * vr[jj][0 .. d) for jj = 0, 1, ... n - 1, in order. */
static void weighted_sum(const double *e, const double *vr, int64_t n, int64_t d,
                         double *acc) {
  int64_t jj = 0;
  for (; jj + 4 <= n; jj += 4) {
    const double *v0 = vr + jj * d, *v1 = v0 + d, *v2 = v1 + d, *v3 = v2 + d;
    const v2d e0 = {e[jj], e[jj]}, e1 = {e[jj + 1], e[jj + 1]},
              e2 = {e[jj + 2], e[jj + 2]}, e3 = {e[jj + 3], e[jj + 3]};
    int64_t c = 0;
    for (; c + 2 <= d; c += 2) {
      v2d x = ld2(acc + c);
      x += e0 * ld2(v0 + c);
      x += e1 * ld2(v1 + c);
      x += e2 * ld2(v2 + c);
      x += e3 * ld2(v3 + c);
      st2(acc + c, x);
    }
    for (; c < d; c++) {
      double x = acc[c];
      x += e[jj] * v0[c];
      x += e[jj + 1] * v1[c];
      x += e[jj + 2] * v2[c];
      x += e[jj + 3] * v3[c];
      acc[c] = x;
    }
  }
  for (; jj < n; jj++)
    for (int64_t c = 0; c < d; c++) acc[c] += e[jj] * vr[jj * d + c];
}

static void run_item(void *user, int idx) {
  const ref_job *j = user;
  const scree_attention_args *a = j->a;
  const ref_item *it = &j->items[idx];
  const int64_t d = j->d;
  const int64_t q0 = j->cu_q[it->b], k0 = j->cu_k[it->b];
  const int64_t lq = j->cu_q[it->b + 1] - q0, lk = j->cu_k[it->b + 1] - k0;
  const int64_t h0 = it->g * j->group, h1 = h0 + j->group;

  if (it->klo > it->khi) { /* no row of this item sees a key */
    for (int64_t h = h0; h < h1; h++) fill_rows(j, it, it->r0, it->r1, h, 0.0, -INFINITY);
    return;
  }
  /* The item's keys [klo, khi], as double: K in panels (zero past the
   * last key), V as rows. */
  const int64_t nk = it->khi - it->klo + 1, nblk = (nk + KB - 1) / KB;
  double *kp = calloc((size_t)(nblk * KB * d), sizeof(double));
  double *vv = malloc(sizeof(double) * (size_t)(nk * d));
  double *s = malloc(sizeof(double) * (size_t)(nblk * KB));
  double *acc = malloc(sizeof(double) * (size_t)d);
  double *qr = malloc(sizeof(double) * (size_t)d);
  if (!kp || !vv || !s || !acc || !qr) {
    for (int64_t h = h0; h < h1; h++) fill_rows(j, it, it->r0, it->r1, h, NAN, NAN);
    goto done;
  }
  for (int64_t jj = 0; jj < nk; jj++) {
    const int64_t tk = k0 + it->klo + jj;
    double *kd = kp + (jj / KB) * d * KB + jj % KB;
    for (int64_t c = 0; c < d; c++) {
      kd[c * KB] = scree__load_elem(j->k, a->dtype, (size_t)(tk * j->kts + it->g * j->khs + c));
      vv[jj * d + c] = scree__load_elem(j->v, a->dtype, (size_t)(tk * j->vts + it->g * j->vhs + c));
    }
  }
  for (int64_t h = h0; h < h1; h++) {
    for (int64_t i = it->r0; i < it->r1; i++) {
      const int64_t t = q0 + i;
      int64_t lo, hi;
      row_bounds(a, i, lq, lk, &lo, &hi);
      clamp_bounds(lk, &lo, &hi);
      if (lo > hi) {
        fill_rows(j, it, i, i + 1, h, 0.0, -INFINITY);
        continue;
      }
      /* Keys [off, off + n) of the item; scores for their whole panels. */
      const int64_t n = hi - lo + 1, off = lo - it->klo;
      for (int64_t c = 0; c < d; c++)
        qr[c] = scree__load_elem(j->q, a->dtype, (size_t)(t * j->qts + h * j->qhs + c));
      scores(kp, qr, d, off / KB, (off + n - 1) / KB + 1, s);
      double *sr = s + off % KB;
      double m = -INFINITY;
      for (int64_t jj = 0; jj < n; jj++) {
        sr[jj] *= j->scale;
        if (sr[jj] > m) m = sr[jj];
      }
      double sum = 0;
      for (int64_t jj = 0; jj < n; jj++) sum += sr[jj] = exp(sr[jj] - m);
      for (int64_t c = 0; c < d; c++) acc[c] = 0;
      weighted_sum(sr, vv + off * d, n, d, acc);
      for (int64_t c = 0; c < d; c++)
        scree__store_elem(j->out, a->dtype, (size_t)(t * j->ots + h * j->ohs + c), acc[c] / sum);
      if (j->lse) j->lse[h * a->total_q + t] = (float)(m + log(sum));
    }
  }
done:
  free(kp), free(vv), free(s), free(acc), free(qr);
}

static int cmp_cost(const void *x, const void *y) {
  const double a = ((const ref_item *)x)->cost, b = ((const ref_item *)y)->cost;
  return a > b ? -1 : a < b;
}

static void ref_attention(const scree_attention_args *a, const void *q,
                          const void *k, const void *v, const int32_t *cu_q,
                          const int32_t *cu_k, void *out, float *lse) {
  if (a->batch <= 0 || a->heads_q <= 0 || a->heads_kv <= 0 || a->head_dim <= 0) return;
  ref_job j = {.a = a, .q = q, .k = k, .v = v, .cu_q = cu_q, .cu_k = cu_k,
               .out = out, .lse = lse, .d = a->head_dim,
               .group = a->heads_q / a->heads_kv};
  if (j.group < 1) j.group = 1;
  const int64_t d = a->head_dim;
  j.qts = a->q_token_stride ? a->q_token_stride : a->heads_q * d;
  j.kts = a->k_token_stride ? a->k_token_stride : a->heads_kv * d;
  j.vts = a->v_token_stride ? a->v_token_stride : a->heads_kv * d;
  j.ots = a->out_token_stride ? a->out_token_stride : a->heads_q * d;
  j.qhs = a->q_head_stride ? a->q_head_stride : d;
  j.khs = a->k_head_stride ? a->k_head_stride : d;
  j.vhs = a->v_head_stride ? a->v_head_stride : d;
  j.ohs = a->out_head_stride ? a->out_head_stride : d;
  j.scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)d);

  /* Count, then build the work items. */
  int64_t n = 0;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t lq = (int64_t)cu_q[b + 1] - cu_q[b];
    if (lq > 0) n += (lq + REF_ROWS - 1) / REF_ROWS;
  }
  n *= a->heads_kv;
  if (n == 0) return;
  /* More items than an int (2^31 blocks of rows) is far beyond what a CPU
   * reference can compute; like a failed allocation it writes NaN. */
  j.items = n <= INT32_MAX ? malloc(sizeof(ref_item) * (size_t)n) : NULL;
  if (!j.items) {
    /* NaN rows everywhere so that any comparison against this reference
     * fails. */
    for (int64_t t = 0; t < a->total_q; t++)
      for (int64_t h = 0; h < a->heads_q; h++) {
        for (int64_t c = 0; c < d; c++)
          scree__store_elem(out, a->dtype, (size_t)(t * j.ots + h * j.ohs + c), NAN);
        if (lse) lse[h * a->total_q + t] = NAN;
      }
    return;
  }
  int64_t m = 0;
  double work = 0;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t lq = (int64_t)cu_q[b + 1] - cu_q[b];
    const int64_t lk = (int64_t)cu_k[b + 1] - cu_k[b];
    for (int64_t r0 = 0; r0 < lq; r0 += REF_ROWS) {
      const int64_t r1 = r0 + REF_ROWS < lq ? r0 + REF_ROWS : lq;
      int64_t klo, khi, lo1, hi1;
      row_bounds(a, r0, lq, lk, &klo, &hi1);
      row_bounds(a, r1 - 1, lq, lk, &lo1, &khi);
      clamp_bounds(lk, &klo, &khi);
      const double cost = (double)(r1 - r0) * (double)(khi >= klo ? khi - klo + 1 : 1) *
                          (double)j.group * (double)d;
      for (int64_t g = 0; g < a->heads_kv; g++)
        j.items[m++] = (ref_item){.b = b, .g = g, .r0 = r0, .r1 = r1,
                                  .klo = klo, .khi = khi, .cost = cost};
      work += cost * (double)a->heads_kv;
    }
  }
  if (work < REF_SERIAL_WORK) {
    for (int64_t i = 0; i < m; i++) run_item(&j, (int)i);
  } else {
    qsort(j.items, (size_t)m, sizeof(ref_item), cmp_cost); /* longest first */
    scree__parallel_for((int)m, 0, run_item, &j);
  }
  free(j.items);
}

SCREE__REFERENCE(attention) {
  ref_attention(args, host[0], host[1], host[2], host[3], host[4], host[5], host[6]);
}
