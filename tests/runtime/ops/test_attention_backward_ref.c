/* test_attention_backward_ref.c - the CPU reference for the backward of
 * varlen attention (ops/attention_backward_ref.c) against
 *   - central finite differences of the forward reference's loss
 *     L = sum(out * G), G random (G is dout), on tiny fp32 problems;
 *   - a dense computation written here from the definition: per sequence
 *     and head the [Lq, Lk] scores, masked with a predicate from scree.h's
 *     words, softmax in double, and the gradients as matrix products;
 *   - its own contract for rows that see no key;
 *   - MHA on K and V repeated per group (the GQA sums).
 * Gradients are poisoned with NaN before each run; every row must be
 * written and the gaps between strided rows must not be. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_ref.h"
#include "test_util.h"

/* ck_assert_msg records a mark point on every pass: too slow for many
 * element checks. CHECK costs nothing unless it fails. */
#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* The forward reference's hook: q, k, v, cu_seqlens_q, cu_seqlens_k, out,
 * lse (ops/attention.c). */
SCREE__REFERENCE(attention);

typedef struct bcase {
  const char *name;
  int nseq;
  const int *lq, *lk; /* lk NULL: the same as lq */
  int hq, hkv, d;
  scree_dtype dt;
  int causal;
  int64_t wl, wr; /* -1: unbounded */
  float scale;    /* 0: the default */
  float softcap;  /* 0: none */
  double in_std;  /* std of q and k (0: 1) */
  int padded;     /* every tensor with padded token and head strides */
} bcase;

/* One problem: its buffers (each with one slack element past the last
 * row), strides in elements, and the arguments. */
typedef struct prob {
  const bcase *c;
  scree_attention_args a;
  scree__attention_grad_strides gs;
  int32_t *cu_q, *cu_k;
  long tq, tk;
  long qt, qh, kt, kh, vt, vh, ot, oh, dot, doh, dqt, dqh, dkt, dkh, dvt, dvh;
  size_t nq, nk, nv, no, ndo, ndq, ndk, ndv;
  void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
  float *lse;
} prob;

static void describe(const bcase *c, char *buf, size_t n) {
  snprintf(buf, n, "%s: nseq=%d hq=%d hkv=%d d=%d %s causal=%d window=(%lld,%lld) "
           "scale=%g softcap=%g in_std=%g padded=%d", c->name, c->nseq, c->hq, c->hkv, c->d,
           scree_dtype_name(c->dt), c->causal, (long long)c->wl, (long long)c->wr,
           (double)c->scale, (double)c->softcap, c->in_std, c->padded);
}

static void fwd(prob *p, const void *q, const void *k, const void *v, void *out, float *lse) {
  scree__ref_attention(&p->a, (void *const[]){(void *)q, (void *)k, (void *)v, p->cu_q,
                                              p->cu_k, out, lse});
}

static void bwd(prob *p) {
  const size_t es = scree_dtype_size(p->c->dt);
  memset(p->dq, 0xff, p->ndq * es); /* NaN in fp32, fp16 and bf16 */
  memset(p->dk, 0xff, p->ndk * es);
  memset(p->dv, 0xff, p->ndv * es);
  scree__attention_grads_ref(&p->a, &p->gs, p->q, p->k, p->v, p->out, p->lse, p->dout,
                                p->cu_q, p->cu_k, p->dq, p->dk, p->dv);
}

static void *filled(scree_dtype dt, size_t n, double std) {
  void *x = malloc(n * scree_dtype_size(dt));
  scree_test_fill(x, dt, n, std);
  return x;
}

/* Builds case c with random q, k, v, dout, runs the forward reference for
 * out and lse, and allocates dq, dk, dv. */
static void setup(prob *p, const bcase *c) {
  memset(p, 0, sizeof *p);
  p->c = c;
  const int *lkv = c->lk ? c->lk : c->lq;
  const long d = c->d, hq = c->hq, hkv = c->hkv;
  p->cu_q = malloc(sizeof(int32_t) * (size_t)(c->nseq + 1));
  p->cu_k = malloc(sizeof(int32_t) * (size_t)(c->nseq + 1));
  p->cu_q[0] = p->cu_k[0] = 0;
  long mq = 0, mk = 0;
  for (int b = 0; b < c->nseq; b++) {
    p->cu_q[b + 1] = p->cu_q[b] + c->lq[b];
    p->cu_k[b + 1] = p->cu_k[b] + lkv[b];
    mq = c->lq[b] > mq ? c->lq[b] : mq;
    mk = lkv[b] > mk ? lkv[b] : mk;
  }
  p->tq = p->cu_q[c->nseq], p->tk = p->cu_k[c->nseq];
  /* Padded: each tensor its own head and token padding. */
  const int pad = c->padded;
  p->qh = d + 8 * pad, p->qt = hq * p->qh + 8 * pad;
  p->kh = d + 16 * pad, p->kt = hkv * p->kh + 16 * pad;
  p->vh = d + 24 * pad, p->vt = hkv * p->vh + 40 * pad;
  p->oh = d + 8 * pad, p->ot = hq * p->oh + 16 * pad;
  p->doh = d + 16 * pad, p->dot = hq * p->doh + 8 * pad;
  p->dqh = d + 8 * pad, p->dqt = hq * p->dqh + 24 * pad;
  p->dkh = d + 24 * pad, p->dkt = hkv * p->dkh + 8 * pad;
  p->dvh = d + 8 * pad, p->dvt = hkv * p->dvh + 16 * pad;
  p->nq = (size_t)(p->tq * p->qt) + 1, p->no = (size_t)(p->tq * p->ot) + 1;
  p->ndo = (size_t)(p->tq * p->dot) + 1, p->ndq = (size_t)(p->tq * p->dqt) + 1;
  p->nk = (size_t)(p->tk * p->kt) + 1, p->nv = (size_t)(p->tk * p->vt) + 1;
  p->ndk = (size_t)(p->tk * p->dkt) + 1, p->ndv = (size_t)(p->tk * p->dvt) + 1;
  const double std = c->in_std > 0 ? c->in_std : 1.0;
  const size_t es = scree_dtype_size(c->dt);
  p->q = filled(c->dt, p->nq, std);
  p->k = filled(c->dt, p->nk, std);
  p->v = filled(c->dt, p->nv, 1.0);
  p->dout = filled(c->dt, p->ndo, 1.0);
  p->out = malloc(p->no * es);
  p->dq = malloc(p->ndq * es);
  p->dk = malloc(p->ndk * es);
  p->dv = malloc(p->ndv * es);
  p->lse = malloc(sizeof(float) * (size_t)(hq * p->tq + 1));
  p->a = (scree_attention_args){
      .batch = c->nseq, .total_q = p->tq, .total_k = p->tk, .max_seqlen_q = mq,
      .max_seqlen_k = mk, .heads_q = hq, .heads_kv = hkv, .head_dim = d, .dtype = c->dt,
      .causal = c->causal, .scale = c->scale, .window_left = c->wl, .window_right = c->wr,
      .softcap = c->softcap};
  /* Pointer fields are ignored by the references: garbage. */
  p->a.q = p->a.k = p->a.v = p->a.out = p->a.lse = 0xdeadbeefull;
  p->a.cu_seqlens_q = p->a.cu_seqlens_k = 0xdeadbeefull;
  if (pad) {
    p->a.q_token_stride = p->qt, p->a.q_head_stride = p->qh;
    p->a.k_token_stride = p->kt, p->a.k_head_stride = p->kh;
    p->a.v_token_stride = p->vt, p->a.v_head_stride = p->vh;
    p->a.out_token_stride = p->ot, p->a.out_head_stride = p->oh;
    p->gs = (scree__attention_grad_strides){p->dot, p->doh, p->dqt, p->dqh,
                                            p->dkt, p->dkh, p->dvt, p->dvh};
  }
  fwd(p, p->q, p->k, p->v, p->out, p->lse);
}

static void teardown(prob *p) {
  free(p->cu_q), free(p->cu_k), free(p->q), free(p->k), free(p->v), free(p->out);
  free(p->dout), free(p->dq), free(p->dk), free(p->dv), free(p->lse);
}

static double ld(const void *x, scree_dtype dt, long i) {
  return scree__load_elem(x, dt, (size_t)i);
}

/* Every element of a [tokens, heads, d] tensor x that no row owns is still
 * NaN (the gaps and the slack element). */
static void check_gaps(const void *x, scree_dtype dt, size_t n, long tokens, long heads,
                       long d, long ts, long hs, const char *name, const char *what) {
  unsigned char *owned = calloc(n, 1);
  for (long t = 0; t < tokens; t++)
    for (long h = 0; h < heads; h++)
      for (long e = 0; e < d; e++) owned[t * ts + h * hs + e] = 1;
  for (size_t i = 0; i < n; i++)
    CHECK(owned[i] || isnan(ld(x, dt, (long)i)), "%s: %s[%zu] is outside every row but was "
          "written", what, name, i);
  free(owned);
}

/* ---- finite differences ------------------------------------------------- */

/* L = sum(out * G) of the forward reference on (q, k, v), G = dout. */
static double loss(prob *p, const void *q, const void *k, const void *v, void *out) {
  fwd(p, q, k, v, out, NULL);
  double l = 0;
  for (long t = 0; t < p->tq; t++)
    for (long h = 0; h < p->c->hq; h++)
      for (long e = 0; e < p->c->d; e++)
        l += ld(out, p->c->dt, t * p->ot + h * p->oh + e) *
             ld(p->dout, p->c->dt, t * p->dot + h * p->doh + e);
  return l;
}

/* Step and tolerance of the finite differences. Inputs are fp32 (std 1,
 * or c->in_std) and so is out: each out element the perturbation moves
 * carries a rounding error of up to 2^-24 relative, so L+ - L- is off by
 * about 6e-8 sqrt(n) |out G| for the n elements moved (up to 9 rows x 2
 * heads x 64 here: a few 1e-6), which the division by twice the step
 * (2e-2) makes ~1e-4. That term dominates: with a step of 3e-3 the worst
 * error grows about 2.5x, with 3e-2 it does not shrink (the truncation
 * error, h^2 f''' / 6, takes over). Measured over 20 seeds, the worst
 * |fd - grad| / (1 + |grad|) of a run was 6e-5 to 1.4e-4; the bound, 5e-4
 * + 2e-3 |grad|, is at least 3.5x that, and a gradient with a term dropped
 * (the deliberate breaks, e.g. without D) is off by 1e-2 or more. */
#define FD_STEP 1e-2
#define FD_ATOL 5e-4
#define FD_RTOL 2e-3

static double worst_fd; /* the worst |fd - grad| / (1 + |grad|) of the run */

/* Checks gradient `grad` of tensor x ([tokens, heads, d], strides ts, hs)
 * at `cols` random columns of every row. which: 0 q, 1 k, 2 v. */
static void fd_tensor(prob *p, int which, const void *grad, long gts, long ghs, int cols,
                      const char *what) {
  static const char *const names[] = {"q", "k", "v"};
  const bcase *c = p->c;
  void *x = which == 0 ? p->q : which == 1 ? p->k : p->v;
  const long tokens = which == 0 ? p->tq : p->tk, heads = which == 0 ? c->hq : c->hkv;
  const long ts = which == 0 ? p->qt : which == 1 ? p->kt : p->vt;
  const long hs = which == 0 ? p->qh : which == 1 ? p->kh : p->vh;
  void *scratch = malloc(p->no * scree_dtype_size(c->dt));
  for (long t = 0; t < tokens; t++)
    for (long h = 0; h < heads; h++)
      for (int n = 0; n < cols; n++) {
        const long e = (long)(scree_test_rand() % (uint64_t)c->d);
        const long i = t * ts + h * hs + e;
        const double x0 = ld(x, c->dt, i);
        scree__store_elem(x, c->dt, (size_t)i, x0 + FD_STEP);
        const double xp = ld(x, c->dt, i); /* the step as stored */
        const double lp = loss(p, p->q, p->k, p->v, scratch);
        scree__store_elem(x, c->dt, (size_t)i, x0 - FD_STEP);
        const double xm = ld(x, c->dt, i);
        const double lm = loss(p, p->q, p->k, p->v, scratch);
        scree__store_elem(x, c->dt, (size_t)i, x0);
        const double fd = (lp - lm) / (xp - xm);
        const double g = ld(grad, c->dt, t * gts + h * ghs + e);
        const double err = fabs(fd - g);
        if (err / (1 + fabs(g)) > worst_fd) worst_fd = err / (1 + fabs(g));
        CHECK(err <= FD_ATOL + FD_RTOL * fabs(g),
              "%s: d%s[t=%ld, h=%ld, %ld] = %.9g, finite differences %.9g", what, names[which],
              t, h, e, g, fd);
      }
  free(scratch);
}

static void fd_case(const bcase *c, int cols) {
  char what[512];
  describe(c, what, sizeof what);
  prob p;
  setup(&p, c);
  bwd(&p);
  fd_tensor(&p, 0, p.dq, p.dqt, p.dqh, cols, what);
  fd_tensor(&p, 1, p.dk, p.dkt, p.dkh, cols, what);
  fd_tensor(&p, 2, p.dv, p.dvt, p.dvh, cols, what);
  teardown(&p);
}

/* Tiny fp32 problems: for every mask, GQA 4:2 at head_dim 32 and MQA 2:1 at
 * 64, self-attention lengths (0, 1, 5, 9) and lengths that differ (Lq > Lk,
 * Lq < Lk, Lq = 0 < Lk, Lk = 0 < Lq), softcap 0 and 3 (on inputs of std
 * 1.5, where tanh bends the scores). Four random columns of every row. */
START_TEST(finite_differences) {
  static const int self[] = {5, 0, 1, 9};
  static const int lq[] = {9, 0, 2, 4};
  static const int lk[] = {5, 3, 6, 0};
  static const struct { int causal; int64_t wl, wr; } m[] = {
      {0, -1, -1}, {1, -1, -1}, {0, 2, -1}, {0, -1, 1}, {1, 1, -1}, {0, 0, 0}, {0, 3, 2}};
  for (size_t mi = 0; mi < sizeof m / sizeof m[0]; mi++)
    for (int shape = 0; shape < 2; shape++)
      for (int capped = 0; capped < 2; capped++) {
        const int mqa = (int)(mi + shape) % 2;
        const bcase c = {.name = "finite_differences", .nseq = 4, .lq = shape ? lq : self,
                         .lk = shape ? lk : NULL, .hq = mqa ? 2 : 4, .hkv = mqa ? 1 : 2,
                         .d = mqa ? 64 : 32, .dt = SCREE_DTYPE_FP32, .causal = m[mi].causal,
                         .wl = m[mi].wl, .wr = m[mi].wr, .softcap = capped ? 3.0f : 0.0f,
                         .in_std = capped ? 1.5 : 1.0, .scale = mi == 3 ? 0.3f : 0.0f};
        fd_case(&c, 4);
      }
  printf("finite_differences: worst |fd - grad| / (1 + |grad|) %.3g\n", worst_fd);
}
END_TEST

/* ---- the dense baseline ------------------------------------------------- */

/* Query row i of a sequence with lq queries and lk keys sees key j: the
 * definition in scree.h, word for word. */
static int visible(const bcase *c, long i, long j, long lq, long lk) {
  const long p = i + lk - lq; /* query i sits at key position p */
  if (c->causal && j > p) return 0;
  if (c->wl >= 0 && j < p - c->wl) return 0;
  if (c->wr >= 0 && j > p + c->wr) return 0;
  return 1;
}

/* Relative size of one ulp of the dtype (the spacing just above 1). */
static double ulp(scree_dtype dt) {
  return dt == SCREE_DTYPE_FP32 ? 0x1p-23 : dt == SCREE_DTYPE_FP16 ? 0x1p-10 : 0x1p-7;
}

/* How a dense computation treats P and dS (the kernel's dS, P (dP - D) f,
 * without the scale) in fp16 and bf16: as the kernel and the reference do
 * (rounded to the dtype, dS before the scale), unrounded, or with the
 * scale applied before dS is rounded (a plausible mistake). fp32 never
 * rounds them. */
enum { ROUND_KERNEL, ROUND_NONE, ROUND_SCALED_DS };

/* Dense gradients in double, [tokens, heads, d], and per element the sum
 * of its terms' magnitudes (for the margin of compare). */
typedef struct dense {
  double *dq, *dk, *dv, *aq, *ak, *av;
} dense;

static void dense_free(dense *g) {
  free(g->dq), free(g->dk), free(g->dv), free(g->aq), free(g->ak), free(g->av);
}

/* got (the reference, rounded to the dtype) is want rounded to the dtype,
 * unless want lies within 1e-12 of its terms' magnitudes of a rounding
 * boundary, where either side is right: both sums are double over the same
 * P and dS (computed the same way; up to 800 terms here, each adding up to
 * 2^-53 of the magnitudes), in orders that may differ. Returns the number
 * of elements that are not; fail: abort at the first. */
static long compare(const void *got, scree_dtype dt, const double *want, const double *mag,
                    long tokens, long heads, long d, long ts, long hs, int fail,
                    const char *name, const char *what) {
  long bad = 0;
  for (long t = 0; t < tokens; t++)
    for (long h = 0; h < heads; h++)
      for (long e = 0; e < d; e++) {
        const long o = (t * heads + h) * d + e;
        const double w = want[o], m = 1e-12 * mag[o], g = ld(got, dt, t * ts + h * hs + e);
        CHECK(!isnan(g), "%s: %s[t=%ld, h=%ld, %ld] not written", what, name, t, h, e);
        const double r = scree__round_elem(dt, w);
        if (g == r || scree__round_elem(dt, w - m) != scree__round_elem(dt, w + m)) continue;
        bad++;
        CHECK(!fail, "%s: %s[t=%ld, h=%ld, %ld] = %.9g, dense %.17g rounds to %.9g", what,
              name, t, h, e, g, w, r);
      }
  return bad;
}

/* The gradients from dense matrices, per sequence and query head: S, its
 * own softmax (checked against P = exp(S - lse) with the forward's lse,
 * which is then used: the kernel's and the reference's convention, and
 * the dtype rounding of P needs the same P), dP = dO V^T, D = rowsum(dO *
 * O) from the stored out (the reference's convention), dS = P (dP - D) f,
 * dQ = scale dS K, dK += scale dS^T Q and dV += P^T dO over the group,
 * with P and dS treated as `mode` says. */
static void dense_grads(const prob *p, int mode, const char *what, dense *o) {
  const bcase *c = p->c;
  const long d = c->d, hq = c->hq, hkv = c->hkv, group = hq / hkv;
  const scree_dtype dt = c->dt;
  const int round = dt != SCREE_DTYPE_FP32 && mode != ROUND_NONE;
  const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)d);
  o->dq = calloc((size_t)(p->tq * hq * d), sizeof(double));
  o->aq = calloc((size_t)(p->tq * hq * d), sizeof(double));
  o->dk = calloc((size_t)(p->tk * hkv * d), sizeof(double));
  o->ak = calloc((size_t)(p->tk * hkv * d), sizeof(double));
  o->dv = calloc((size_t)(p->tk * hkv * d), sizeof(double));
  o->av = calloc((size_t)(p->tk * hkv * d), sizeof(double));
  long mq = 1, mk = 1;
  for (int b = 0; b < c->nseq; b++) {
    mq = p->cu_q[b + 1] - p->cu_q[b] > mq ? p->cu_q[b + 1] - p->cu_q[b] : mq;
    mk = p->cu_k[b + 1] - p->cu_k[b] > mk ? p->cu_k[b + 1] - p->cu_k[b] : mk;
  }
  double *S = malloc(sizeof(double) * (size_t)(mq * mk));  /* S, then P */
  double *F = malloc(sizeof(double) * (size_t)(mq * mk));  /* f */
  double *X = malloc(sizeof(double) * (size_t)(mq * mk));  /* scale dS */
  double *PR = malloc(sizeof(double) * (size_t)(mq * mk)); /* P as dV uses it */
  for (int b = 0; b < c->nseq; b++) {
    const long q0 = p->cu_q[b], k0 = p->cu_k[b];
    const long lq = p->cu_q[b + 1] - q0, lk = p->cu_k[b + 1] - k0;
    for (long h = 0; h < hq; h++) {
      const long g = h / group;
      for (long i = 0; i < lq; i++) {
        double m = -INFINITY;
        for (long j = 0; j < lk; j++) {
          double x = 0;
          for (long e = 0; e < d; e++)
            x += ld(p->q, dt, (q0 + i) * p->qt + h * p->qh + e) *
                 ld(p->k, dt, (k0 + j) * p->kt + g * p->kh + e);
          double s = scale * x, f = 1;
          if (c->softcap > 0) {
            const double th = tanh(s / c->softcap);
            s = c->softcap * th, f = 1 - th * th;
          }
          S[i * lk + j] = visible(c, i, j, lq, lk) ? s : -INFINITY;
          F[i * lk + j] = f;
          m = S[i * lk + j] > m ? S[i * lk + j] : m;
        }
        if (m == -INFINITY) { /* no key: P = 0 */
          for (long j = 0; j < lk; j++) S[i * lk + j] = 0;
          continue;
        }
        /* The softmax, and P from the forward's fp32 lse: they agree to
         * lse's rounding (2^-24 |lse| relative). */
        const double lse = p->lse[h * p->tq + q0 + i];
        double sum = 0;
        for (long j = 0; j < lk; j++) sum += exp(S[i * lk + j] - m);
        for (long j = 0; j < lk; j++) {
          const double soft = exp(S[i * lk + j] - m) / sum, pl = exp(S[i * lk + j] - lse);
          CHECK(fabs(pl - soft) <= 1e-7 * (1 + fabs(lse)) * soft,
                "%s: seq %d h %ld row %ld key %ld: softmax %.17g, exp(s - lse) %.17g", what, b,
                h, i, j, soft, pl);
          S[i * lk + j] = pl;
        }
      }
      for (long i = 0; i < lq; i++) {
        const long t = q0 + i;
        double D = 0;
        for (long e = 0; e < d; e++)
          D += ld(p->dout, dt, t * p->dot + h * p->doh + e) *
               ld(p->out, dt, t * p->ot + h * p->oh + e);
        for (long j = 0; j < lk; j++) {
          double dp = 0;
          for (long e = 0; e < d; e++)
            dp += ld(p->dout, dt, t * p->dot + h * p->doh + e) *
                  ld(p->v, dt, (k0 + j) * p->vt + g * p->vh + e);
          const double P = S[i * lk + j], ds = P * (dp - D) * F[i * lk + j];
          PR[i * lk + j] = round ? scree__round_elem(dt, P) : P;
          X[i * lk + j] = !round                   ? ds * scale
                          : mode == ROUND_KERNEL ? scree__round_elem(dt, ds) * scale
                                                 : scree__round_elem(dt, ds * scale);
        }
      }
      for (long i = 0; i < lq; i++)
        for (long j = 0; j < lk; j++)
          for (long e = 0; e < d; e++) {
            const long t = q0 + i, tk = k0 + j;
            const long oq = (t * hq + h) * d + e, ok = (tk * hkv + g) * d + e;
            const double xq = X[i * lk + j] * ld(p->k, dt, tk * p->kt + g * p->kh + e);
            const double xk = X[i * lk + j] * ld(p->q, dt, t * p->qt + h * p->qh + e);
            const double xv = PR[i * lk + j] * ld(p->dout, dt, t * p->dot + h * p->doh + e);
            o->dq[oq] += xq, o->aq[oq] += fabs(xq);
            o->dk[ok] += xk, o->ak[ok] += fabs(xk);
            o->dv[ok] += xv, o->av[ok] += fabs(xv);
          }
    }
  }
  free(S), free(F), free(X), free(PR);
}

/* The reference against the dense gradients computed as the kernel does
 * (P and dS rounded in fp16 and bf16): every element exactly rounded. */
static void dense_case(const bcase *c) {
  char what[512];
  describe(c, what, sizeof what);
  prob p;
  setup(&p, c);
  bwd(&p);
  const long d = c->d, hq = c->hq, hkv = c->hkv;
  dense g;
  dense_grads(&p, ROUND_KERNEL, what, &g);
  compare(p.dq, c->dt, g.dq, g.aq, p.tq, hq, d, p.dqt, p.dqh, 1, "dq", what);
  compare(p.dk, c->dt, g.dk, g.ak, p.tk, hkv, d, p.dkt, p.dkh, 1, "dk", what);
  compare(p.dv, c->dt, g.dv, g.av, p.tk, hkv, d, p.dvt, p.dvh, 1, "dv", what);
  check_gaps(p.dq, c->dt, p.ndq, p.tq, hq, d, p.dqt, p.dqh, "dq", what);
  check_gaps(p.dk, c->dt, p.ndk, p.tk, hkv, d, p.dkt, p.dkh, "dk", what);
  check_gaps(p.dv, c->dt, p.ndv, p.tk, hkv, d, p.dvt, p.dvh, "dv", what);
  dense_free(&g);
  teardown(&p);
}

/* Sequences longer than the reference's 64-row blocks (and enough work for
 * its threads), every dtype, padded strides on every tensor, masks,
 * softcap, GQA 4:2 and 6:3, MQA 4:1, lengths that differ both ways. */
START_TEST(dense_baseline) {
  static const int lq[] = {130, 0, 200, 65, 1, 40};
  static const int lk[] = {130, 7, 90, 150, 70, 0};
  static const struct {
    int causal;
    int64_t wl, wr;
    float softcap;
    int hq, hkv, d, same;
  } w[] = {
      {1, -1, -1, 0.0f, 4, 2, 64, 0}, {0, -1, -1, 0.0f, 6, 3, 32, 1},
      {0, 20, 5, 3.0f, 4, 1, 64, 0},  {1, 50, -1, 5.0f, 4, 2, 96, 1},
      {0, -1, 0, 0.0f, 2, 2, 128, 0}, {1, -1, -1, 2.0f, 4, 1, 32, 0},
  };
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
    const bcase c = {.name = "dense_baseline", .nseq = 6, .lq = lq, .lk = w[i].same ? NULL : lk,
                     .hq = w[i].hq, .hkv = w[i].hkv, .d = w[i].d,
                     .dt = (scree_dtype)(i % 3), .causal = w[i].causal, .wl = w[i].wl,
                     .wr = w[i].wr, .softcap = w[i].softcap, .in_std = w[i].softcap ? 1.5 : 1,
                     .padded = (int)((i + 1) % 2 || i == 4)};
    dense_case(&c);
  }
}
END_TEST

/* The reference rounds P and dS as the kernel does. On 16-bit problems at
 * head_dim 32 (scale 2^-2.5, not a power of two, so rounding dS before or
 * after the scale differs), with and without a softcap, it matches the
 * dense gradients with the kernel's rounding exactly (compare), while in
 * at least 20% of the elements of each gradient the rounding changes the
 * result: the unrounded gradients (dq, dk, dv) and those with dS rounded
 * after the scale (dq, dk; dv has no dS) are not what the reference gives.
 * A reference that stopped rounding, or rounded scale dS, fails here. */
START_TEST(rounds_p_and_ds_as_the_kernel) {
  static const int lq[] = {150, 3, 64};
  static const int lk[] = {150, 40, 100};
  for (int dt = SCREE_DTYPE_FP16; dt <= SCREE_DTYPE_BF16; dt++)
    for (int capped = 0; capped < 2; capped++) {
      const bcase c = {.name = "rounds_p_and_ds_as_the_kernel", .nseq = 3, .lq = lq, .lk = lk,
                       .hq = 4, .hkv = 2, .d = 32, .dt = (scree_dtype)dt, .causal = 1,
                       .wl = -1, .wr = -1, .softcap = capped ? 3.0f : 0.0f,
                       .in_std = capped ? 1.5 : 1};
      char what[512];
      describe(&c, what, sizeof what);
      prob p;
      setup(&p, &c);
      bwd(&p);
      const long d = c.d, nq = p.tq * c.hq * d, nk = p.tk * c.hkv * d;
      for (int mode = ROUND_KERNEL; mode <= ROUND_SCALED_DS; mode++) {
        dense g;
        dense_grads(&p, mode, what, &g);
        const int fail = mode == ROUND_KERNEL;
        const long bq = compare(p.dq, c.dt, g.dq, g.aq, p.tq, c.hq, d, p.dqt, p.dqh, fail,
                                "dq", what);
        const long bk = compare(p.dk, c.dt, g.dk, g.ak, p.tk, c.hkv, d, p.dkt, p.dkh, fail,
                                "dk", what);
        const long bv = compare(p.dv, c.dt, g.dv, g.av, p.tk, c.hkv, d, p.dvt, p.dvh, fail,
                                "dv", what);
        if (mode != ROUND_KERNEL) {
          printf("%s, %s: differs in dq %ld/%ld, dk %ld/%ld, dv %ld/%ld\n", what,
                 mode == ROUND_NONE ? "unrounded" : "dS rounded after the scale", bq, nq, bk,
                 nk, bv, nk);
          CHECK(bq >= nq / 5 && bk >= nk / 5, "%s: the rounding mode %d moves too few dq "
                "(%ld of %ld) or dk (%ld of %ld) elements to tell it apart", what, mode, bq,
                nq, bk, nk);
          CHECK(mode == ROUND_SCALED_DS ? bv == 0 : bv >= nk / 5,
                "%s: rounding mode %d: %ld of %ld dv elements differ", what, mode, bv, nk);
        }
        dense_free(&g);
      }
      teardown(&p);
    }
}
END_TEST

/* ---- rows that see no key ---------------------------------------------- */

static int same_bits(const void *x, const void *y, size_t n, scree_dtype dt) {
  return memcmp(x, y, n * scree_dtype_size(dt)) == 0;
}

/* A row that sees no key gets a dq of exact zeros and adds nothing to dk
 * and dv: its dout (and its q) can be anything without changing a bit of
 * the other gradients. A key no row sees gets dk and dv of zeros. A row
 * whose lse is -inf is treated as one without keys (the contract). */
START_TEST(rows_without_keys) {
  /* Causal, Lq > Lk: rows 0..6 of sequence 0 see no key, nor any row of
   * sequence 1 (no keys); sequence 2 has keys and no queries. Window (0, 0)
   * without causal: the same rows see nothing, and every other row sees
   * exactly one key. */
  static const int lq[] = {9, 3, 0, 12};
  static const int lk[] = {2, 0, 4, 12};
  for (int win = 0; win < 2; win++) {
    const bcase c = {.name = "rows_without_keys", .nseq = 4, .lq = lq, .lk = lk, .hq = 4,
                     .hkv = 2, .d = 32, .dt = win ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP32,
                     .causal = !win, .wl = win ? 0 : -1, .wr = win ? 0 : -1, .padded = win};
    char what[512];
    describe(&c, what, sizeof what);
    prob p;
    setup(&p, &c);
    bwd(&p);
    const size_t es = scree_dtype_size(c.dt);
    void *dq0 = malloc(p.ndq * es), *dk0 = malloc(p.ndk * es), *dv0 = malloc(p.ndv * es);
    memcpy(dq0, p.dq, p.ndq * es), memcpy(dk0, p.dk, p.ndk * es), memcpy(dv0, p.dv, p.ndv * es);
    long empty = 0;
    for (int b = 0; b < c.nseq; b++)
      for (long i = 0; i < lq[b]; i++) {
        const long t = p.cu_q[b] + i;
        int64_t lo, hi;
        scree__attention_row_bounds(&p.a, i, lq[b], lk[b], &lo, &hi);
        scree__attention_clamp_bounds(lk[b], &lo, &hi);
        int saw = 0;
        for (long j = 0; j < lk[b]; j++) saw |= visible(&c, i, j, lq[b], lk[b]);
        CHECK(saw == (lo <= hi), "%s: seq %d row %ld: bounds disagree with the definition",
              what, b, i);
        if (saw) continue;
        for (long h = 0; h < c.hq; h++) {
          empty++;
          CHECK(p.lse[h * p.tq + t] == -INFINITY, "%s: lse of seq %d row %ld not -inf", what,
                b, i);
          for (long e = 0; e < c.d; e++) {
            CHECK(ld(p.dq, c.dt, t * p.dqt + h * p.dqh + e) == 0,
                  "%s: seq %d row %ld h %ld sees no key: dq %g", what, b, i, h,
                  ld(p.dq, c.dt, t * p.dqt + h * p.dqh + e));
            /* Large values in the row's dout and q: nothing may change. */
            scree__store_elem(p.dout, c.dt, (size_t)(t * p.dot + h * p.doh + e),
                              1000.0 * (double)(e + 1));
            scree__store_elem(p.q, c.dt, (size_t)(t * p.qt + h * p.qh + e), -500.0);
          }
        }
      }
    ck_assert_int_eq(empty, 4L * (7 + 3));
    /* Keys of sequence 2 (no queries) get zeros. */
    for (long t = p.cu_k[2]; t < p.cu_k[3]; t++)
      for (long g = 0; g < c.hkv; g++)
        for (long e = 0; e < c.d; e++) {
          const double x = ld(p.dk, c.dt, t * p.dkt + g * p.dkh + e);
          const double y = ld(p.dv, c.dt, t * p.dvt + g * p.dvh + e);
          CHECK(x == 0 && y == 0, "%s: key %ld of a sequence without queries: dk %g dv %g",
                what, t, x, y);
        }
    bwd(&p);
    CHECK(same_bits(dq0, p.dq, p.ndq, c.dt), "%s: dq moved with the dout of rows without keys",
          what);
    CHECK(same_bits(dk0, p.dk, p.ndk, c.dt), "%s: dk moved with rows without keys", what);
    CHECK(same_bits(dv0, p.dv, p.ndv, c.dt), "%s: dv moved with rows without keys", what);
    check_gaps(p.dq, c.dt, p.ndq, p.tq, c.hq, c.d, p.dqt, p.dqh, "dq", what);
    check_gaps(p.dk, c.dt, p.ndk, p.tk, c.hkv, c.d, p.dkt, p.dkh, "dk", what);

    /* lse -inf on a row that has keys: zeros for it, nothing from it. Row
     * 11 of sequence 3, head 1, with its dout set large: dk and dv must be
     * what they are with that row's dout zero. */
    const long t = p.cu_q[3] + 11, h = 1;
    for (long e = 0; e < c.d; e++)
      scree__store_elem(p.dout, c.dt, (size_t)(t * p.dot + h * p.doh + e), 0.0);
    bwd(&p);
    memcpy(dk0, p.dk, p.ndk * es), memcpy(dv0, p.dv, p.ndv * es);
    for (long e = 0; e < c.d; e++)
      scree__store_elem(p.dout, c.dt, (size_t)(t * p.dot + h * p.doh + e), 100.0);
    p.lse[h * p.tq + t] = -INFINITY;
    bwd(&p);
    for (long e = 0; e < c.d; e++)
      CHECK(ld(p.dq, c.dt, t * p.dqt + h * p.dqh + e) == 0, "%s: lse -inf row: dq %g", what,
            ld(p.dq, c.dt, t * p.dqt + h * p.dqh + e));
    CHECK(same_bits(dk0, p.dk, p.ndk, c.dt), "%s: dk moved with a row of lse -inf", what);
    CHECK(same_bits(dv0, p.dv, p.ndv, c.dt), "%s: dv moved with a row of lse -inf", what);
    free(dq0), free(dk0), free(dv0);
    teardown(&p);
  }

  /* No sequence, or only empty ones: nothing is written. */
  static const int zeros[] = {0, 0};
  const bcase z = {.name = "empty", .nseq = 2, .lq = zeros, .hq = 2, .hkv = 1, .d = 32,
                   .dt = SCREE_DTYPE_FP16, .wl = -1, .wr = -1};
  prob p;
  setup(&p, &z);
  bwd(&p);
  ck_assert(isnan(ld(p.dq, z.dt, 0)) && isnan(ld(p.dk, z.dt, 0)) && isnan(ld(p.dv, z.dt, 0)));
  p.a.batch = 0;
  bwd(&p);
  ck_assert(isnan(ld(p.dq, z.dt, 0)) && isnan(ld(p.dk, z.dt, 0)) && isnan(ld(p.dv, z.dt, 0)));
  teardown(&p);
}
END_TEST

/* ---- GQA sums ---------------------------------------------------------- */

/* GQA and MQA against MHA on K and V repeated per group, with the same q,
 * dout, out and lse: dq equal bit for bit (the same row computed the same
 * way), dk and dv of kv head g the sum of the MHA gradients of the group's
 * heads (the reference sums in double and rounds once, the MHA one rounds
 * each head: 2 fp32 ulps of the sum's largest term, plus 1e-6 of the
 * largest value for cancellation). */
START_TEST(gqa_sums_the_group) {
  static const int lq[] = {40, 0, 70, 5};
  static const int lk[] = {33, 9, 70, 80};
  static const int heads[][2] = {{4, 2}, {8, 1}, {6, 3}};
  for (int hi = 0; hi < 3; hi++)
    for (int causal = 0; causal < 2; causal++) {
      const bcase c = {.name = "gqa_sums_the_group", .nseq = 4, .lq = lq, .lk = lk,
                       .hq = heads[hi][0], .hkv = heads[hi][1], .d = 32,
                       .dt = SCREE_DTYPE_FP32, .causal = causal, .wl = causal ? 30 : -1,
                       .wr = -1, .softcap = hi == 2 ? 4.0f : 0.0f, .padded = hi == 1};
      char what[512];
      describe(&c, what, sizeof what);
      prob g;
      setup(&g, &c);
      bwd(&g);
      /* The MHA problem: K and V of head h are the GQA ones of h / group. */
      bcase cm = c;
      cm.hkv = c.hq, cm.padded = 0;
      prob m;
      setup(&m, &cm);
      const long d = c.d, group = c.hq / c.hkv;
      for (long t = 0; t < g.tk; t++)
        for (long h = 0; h < c.hq; h++)
          for (long e = 0; e < d; e++) {
            const long src = t * g.kt + (h / group) * g.kh + e, dst = t * m.kt + h * m.kh + e;
            scree__store_elem(m.k, c.dt, (size_t)dst, ld(g.k, c.dt, src));
            scree__store_elem(m.v, c.dt, (size_t)(t * m.vt + h * m.vh + e),
                              ld(g.v, c.dt, t * g.vt + (h / group) * g.vh + e));
          }
      for (long t = 0; t < g.tq; t++)
        for (long h = 0; h < c.hq; h++) {
          for (long e = 0; e < d; e++) {
            scree__store_elem(m.q, c.dt, (size_t)(t * m.qt + h * m.qh + e),
                              ld(g.q, c.dt, t * g.qt + h * g.qh + e));
            scree__store_elem(m.dout, c.dt, (size_t)(t * m.dot + h * m.doh + e),
                              ld(g.dout, c.dt, t * g.dot + h * g.doh + e));
          }
        }
      fwd(&m, m.q, m.k, m.v, m.out, m.lse);
      bwd(&m);
      for (long t = 0; t < g.tq; t++)
        for (long h = 0; h < c.hq; h++)
          for (long e = 0; e < d; e++) {
            const double x = ld(g.dq, c.dt, t * g.dqt + h * g.dqh + e);
            const double y = ld(m.dq, c.dt, t * m.dqt + h * m.dqh + e);
            CHECK(x == y, "%s: dq[t=%ld, h=%ld, %ld] GQA %.9g MHA %.9g", what, t, h, e, x, y);
          }
      for (int which = 0; which < 2; which++) {
        const void *gg = which ? g.dv : g.dk, *mm = which ? m.dv : m.dk;
        const long gts = which ? g.dvt : g.dkt, ghs = which ? g.dvh : g.dkh;
        const long mts = which ? m.dvt : m.dkt, mhs = which ? m.dvh : m.dkh;
        double big = 0; /* the MHA gradients are dense */
        for (long i = 0; i < g.tk * c.hq * d; i++)
          big = fabs(ld(mm, c.dt, i)) > big ? fabs(ld(mm, c.dt, i)) : big;
        for (long t = 0; t < g.tk; t++)
          for (long kh = 0; kh < c.hkv; kh++)
            for (long e = 0; e < d; e++) {
              double sum = 0, top = 0;
              for (long h = kh * group; h < (kh + 1) * group; h++) {
                const double x = ld(mm, c.dt, t * mts + h * mhs + e);
                sum += x, top = fabs(x) > top ? fabs(x) : top;
              }
              const double x = ld(gg, c.dt, t * gts + kh * ghs + e);
              CHECK(fabs(x - sum) <= 2 * ulp(c.dt) * (top + fabs(sum)) + 1e-6 * big,
                    "%s: d%c[t=%ld, g=%ld, %ld] GQA %.9g, sum of the group's MHA %.9g", what,
                    which ? 'v' : 'k', t, kh, e, x, sum);
            }
      }
      teardown(&g);
      teardown(&m);
    }
}
END_TEST

SCREE_TEST_MAIN(.name = "attention_backward_ref", .timeout = 120,
                .tests = SCREE_TESTS(finite_differences, dense_baseline,
                                     rounds_p_and_ds_as_the_kernel, rows_without_keys,
                                     gqa_sums_the_group))
