/* test_attention_ref.c - the CPU reference for varlen attention against an
 * obviously correct baseline: per sequence and head, the dense [Lq, Lk]
 * score matrix (scale * q.k, or softcap * tanh(scale * q.k / softcap) with a
 * softcap), masked with a predicate written from the definition in scree.h,
 * softmax in double, times V.
 *
 * Both compute in double from the same rounded inputs; outputs are compared
 * after both are rounded to the output dtype (at most 1 ulp apart, or 1e-12
 * apart: an output that cancels to nearly 0 can have a double rounding error
 * above one fp32 ulp of its tiny value), lse
 * after both are rounded to fp32 (at most 1 fp32 ulp, about 6e-8 relative:
 * the reference stores lse as fp32, so 1e-9 relative cannot be asked of the
 * stored value). Rows with no visible key must be exact zeros and -inf.
 * Every case poisons out and lse with NaN first and checks that every row
 * of every head was written and that the gaps between strided rows were not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ck_assert_msg records a mark point (a write to Check's log) on every
 * pass: far too slow for millions of element checks. CHECK costs nothing
 * unless it fails. */
#define CHECK(cond, ...)                     \
  do {                                       \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);  \
  } while (0)

/* The reference hook: args and the buffers in the problem's order (q, k, v,
 * cu_seqlens_q, cu_seqlens_k, out, lse), ops/attention.c. */
SCREE__REFERENCE(attention);
static void ref(const scree_attention_args *a, const void *q, const void *k, const void *v,
                const int32_t *cu_q, const int32_t *cu_k, void *out, float *lse) {
  scree__ref_attention(a, (void *const[]){(void *)q, (void *)k, (void *)v, (void *)cu_q,
                                          (void *)cu_k, out, lse});
}

enum {
  LAYOUT_SEPARATE = 0, /* q, k, v separate, packed (strides passed as 0) */
  LAYOUT_PADDED,       /* q, k, v separate, explicit padded strides */
  LAYOUT_T3HD,         /* one [T, 3, H, d] buffer */
  LAYOUT_TH3D,         /* one [T, H, 3, d] buffer */
  LAYOUT_THD_GQA,      /* one [T, hq + 2 hkv, d] buffer (packed GQA) */
};

typedef struct acase {
  const char *name;
  int nseq;
  const int *lq, *lk; /* lk NULL: the same as lq */
  int hq, hkv, d;
  scree_dtype dt;
  int causal;
  int window;         /* 0: window_left = window_right = -1 */
  int64_t wl, wr;
  float scale;        /* 0: the default */
  float softcap;      /* 0: none */
  int layout;
  int out_pad;        /* out with padded token and head strides */
  double in_scale;    /* std of q and k (0: 1) */
  int lse;
} acase;

/* Query row i of a sequence with lq queries and lk keys sees key j: the
 * definition in scree.h, word for word. */
static int visible(const acase *c, long i, long j, long lq, long lk) {
  const long p = i + lk - lq; /* query i sits at key position p */
  const long wl = c->window ? c->wl : -1, wr = c->window ? c->wr : -1;
  if (c->causal && j > p) return 0;
  if (wl >= 0 && j < p - wl) return 0;
  if (wr >= 0 && j > p + wr) return 0;
  return 1;
}

/* Position on a line of all values of the dtype, in ulps: adjacent values
 * differ by 1, +0 and -0 are both 0. */
static int64_t ordered(const void *p, scree_dtype dt, size_t i) {
  if (dt == SCREE_DTYPE_FP32) {
    uint32_t u;
    memcpy(&u, (const char *)p + 4 * i, 4);
    const int64_t m = u & 0x7fffffffu;
    return (u >> 31) ? -m : m;
  }
  uint16_t u;
  memcpy(&u, (const char *)p + 2 * i, 2);
  const int64_t m = u & 0x7fffu;
  return (u >> 15) ? -m : m;
}

static int64_t ordered_f32(float f) {
  return ordered(&f, SCREE_DTYPE_FP32, 0);
}

static int64_t iabs64(int64_t x) { return x < 0 ? -x : x; }

static void describe(const acase *c, char *buf, size_t n) {
  snprintf(buf, n, "%s: nseq=%d hq=%d hkv=%d d=%d %s causal=%d window=(%lld,%lld) "
           "scale=%g softcap=%g layout=%d out_pad=%d lse=%d", c->name ? c->name : "case",
           c->nseq, c->hq, c->hkv, c->d, scree_dtype_name(c->dt), c->causal,
           (long long)(c->window ? c->wl : -1), (long long)(c->window ? c->wr : -1),
           (double)c->scale, (double)c->softcap, c->layout, c->out_pad, c->lse);
}

/* Runs the reference on case c and checks it; returns the number of
 * (row, head) pairs that see no key. */
static long run_case(const acase *c) {
  char what[512];
  describe(c, what, sizeof what);
  const int *lkv = c->lk ? c->lk : c->lq;
  const int hq = c->hq, hkv = c->hkv, d = c->d, group = hq / hkv;
  CHECK(hq % hkv == 0, "%s: bad heads", what);
  const size_t es = scree_dtype_size(c->dt);
  int32_t *cu_q = malloc(sizeof(int32_t) * (size_t)(c->nseq + 1));
  int32_t *cu_k = malloc(sizeof(int32_t) * (size_t)(c->nseq + 1));
  cu_q[0] = cu_k[0] = 0;
  for (int b = 0; b < c->nseq; b++) {
    cu_q[b + 1] = cu_q[b] + c->lq[b];
    cu_k[b + 1] = cu_k[b] + lkv[b];
  }
  const long tq = cu_q[c->nseq], tk = cu_k[c->nseq];

  /* Element strides and offsets (from the buffer's start) of q, k, v. */
  long qts, kts, vts, qhs, khs, vhs, qoff = 0, koff = 0, voff = 0;
  void *qb, *kb, *vb, *base = NULL;
  int pass_strides = 1;
  switch (c->layout) {
    case LAYOUT_SEPARATE:
      qhs = khs = vhs = d;
      qts = (long)hq * d, kts = vts = (long)hkv * d;
      pass_strides = 0;
      break;
    case LAYOUT_PADDED:
      qhs = d + 8, khs = d + 16, vhs = d + 24;
      qts = hq * qhs + 8, kts = hkv * khs + 16, vts = hkv * vhs + 40;
      break;
    case LAYOUT_T3HD:
      CHECK(hq == hkv, "%s: [T,3,H,d] needs hq == hkv", what);
      qhs = khs = vhs = d;
      qts = kts = vts = 3L * hq * d;
      koff = (long)hq * d, voff = 2L * hq * d;
      break;
    case LAYOUT_TH3D:
      CHECK(hq == hkv, "%s: [T,H,3,d] needs hq == hkv", what);
      qhs = khs = vhs = 3L * d;
      qts = kts = vts = 3L * hq * d;
      koff = d, voff = 2L * d;
      break;
    case LAYOUT_THD_GQA:
      qhs = khs = vhs = d;
      qts = kts = vts = (long)(hq + 2 * hkv) * d;
      koff = (long)hq * d, voff = (long)(hq + hkv) * d;
      break;
    default:
      ck_abort_msg("bad layout");
      return 0;
  }
  if (c->layout >= LAYOUT_T3HD) {
    for (int b = 0; b < c->nseq; b++)
      CHECK(c->lq[b] == lkv[b], "%s: packed qkv needs lq == lk", what);
    const size_t n = (size_t)(tq * qts) + 1;
    base = malloc(n * es);
    scree_test_fill(base, c->dt, n, 1.0);
    qb = (char *)base + (size_t)qoff * es;
    kb = (char *)base + (size_t)koff * es;
    vb = (char *)base + (size_t)voff * es;
  } else {
    qb = malloc(((size_t)(tq * qts) + 1) * es);
    kb = malloc(((size_t)(tk * kts) + 1) * es);
    vb = malloc(((size_t)(tk * vts) + 1) * es);
    scree_test_fill(qb, c->dt, (size_t)(tq * qts) + 1, 1.0);
    scree_test_fill(kb, c->dt, (size_t)(tk * kts) + 1, 1.0);
    scree_test_fill(vb, c->dt, (size_t)(tk * vts) + 1, 1.0);
  }
  /* Sharper or flatter softmaxes: rescale q and k where they are read. */
  const double in_scale = c->in_scale > 0 ? c->in_scale : 1.0;
  if (in_scale != 1.0) {
    for (long t = 0; t < tq; t++)
      for (int h = 0; h < hq; h++)
        for (int e = 0; e < d; e++) {
          const size_t i = (size_t)(t * qts + h * qhs + e);
          scree__store_elem(qb, c->dt, i, in_scale * scree__load_elem(qb, c->dt, i));
        }
    for (long t = 0; t < tk; t++)
      for (int h = 0; h < hkv; h++)
        for (int e = 0; e < d; e++) {
          const size_t i = (size_t)(t * kts + h * khs + e);
          scree__store_elem(kb, c->dt, i, in_scale * scree__load_elem(kb, c->dt, i));
        }
  }

  const long ohs = c->out_pad ? d + 8 : d;
  const long ots = c->out_pad ? hq * ohs + 16 : (long)hq * d;
  const size_t nout = (size_t)(tq * ots) + 1;
  void *out = malloc(nout * es);
  memset(out, 0xff, nout * es); /* NaN in fp32, fp16 and bf16 */
  float *lse = NULL;
  if (c->lse) {
    lse = malloc(sizeof(float) * ((size_t)(hq * tq) + 1));
    memset(lse, 0xff, sizeof(float) * ((size_t)(hq * tq) + 1));
  }

  scree_attention_args a = {
      .batch = c->nseq, .total_q = tq, .total_k = tk, .heads_q = hq,
      .heads_kv = hkv, .head_dim = d, .dtype = c->dt, .causal = c->causal,
      .scale = c->scale, .window_left = c->window ? c->wl : -1,
      .window_right = c->window ? c->wr : -1, .softcap = c->softcap,
      .out_token_stride = c->out_pad ? ots : 0, .out_head_stride = c->out_pad ? ohs : 0};
  /* Pointer fields are ignored by the reference: set them to garbage. */
  a.q = a.k = a.v = a.out = a.lse = a.cu_seqlens_q = a.cu_seqlens_k = 0xdeadbeefull;
  for (int b = 0; b < c->nseq; b++) {
    if (c->lq[b] > a.max_seqlen_q) a.max_seqlen_q = c->lq[b];
    if (lkv[b] > a.max_seqlen_k) a.max_seqlen_k = lkv[b];
  }
  if (pass_strides) {
    a.q_token_stride = qts, a.k_token_stride = kts, a.v_token_stride = vts;
    a.q_head_stride = qhs, a.k_head_stride = khs, a.v_head_stride = vhs;
  }
  ref(&a, qb, kb, vb, cu_q, cu_k, out, lse);

  /* Every out element the rows own, to check the gaps afterwards. */
  unsigned char *owned = calloc(nout, 1);
  const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)d);
  long maxq = 1, maxk = 1;
  for (int b = 0; b < c->nseq; b++) {
    if (c->lq[b] > maxq) maxq = c->lq[b];
    if (lkv[b] > maxk) maxk = lkv[b];
  }
  double *K = malloc(sizeof(double) * (size_t)(maxk * d));
  double *V = malloc(sizeof(double) * (size_t)(maxk * d));
  double *S = malloc(sizeof(double) * (size_t)(maxq * maxk));
  double *Q = malloc(sizeof(double) * (size_t)d);
  double *O = malloc(sizeof(double) * (size_t)d);
  long checked = 0, empty_rows = 0;
  for (int b = 0; b < c->nseq; b++) {
    const long lq = c->lq[b], lk = lkv[b];
    for (int h = 0; h < hq; h++) {
      const int g = h / group;
      for (long j = 0; j < lk; j++)
        for (int e = 0; e < d; e++) {
          K[j * d + e] = scree__load_elem(kb, c->dt, (size_t)((cu_k[b] + j) * kts + g * khs + e));
          V[j * d + e] = scree__load_elem(vb, c->dt, (size_t)((cu_k[b] + j) * vts + g * vhs + e));
        }
      /* Dense scores, -inf where masked. */
      for (long i = 0; i < lq; i++) {
        for (int e = 0; e < d; e++)
          Q[e] = scree__load_elem(qb, c->dt, (size_t)((cu_q[b] + i) * qts + h * qhs + e));
        for (long j = 0; j < lk; j++) {
          double s = 0;
          for (int e = 0; e < d; e++) s += Q[e] * K[j * d + e];
          s *= scale;
          if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
          S[i * lk + j] = visible(c, i, j, lq, lk) ? s : -INFINITY;
        }
      }
      for (long i = 0; i < lq; i++) {
        const long t = cu_q[b] + i;
        double *row = S + i * lk;
        double m = -INFINITY;
        for (long j = 0; j < lk; j++) m = row[j] > m ? row[j] : m;
        double l = -INFINITY;
        for (int e = 0; e < d; e++) O[e] = 0;
        if (m != -INFINITY) {
          double sum = 0;
          for (long j = 0; j < lk; j++) sum += row[j] = exp(row[j] - m);
          for (long j = 0; j < lk; j++) row[j] /= sum; /* softmax */
          for (int e = 0; e < d; e++) {
            double o = 0;
            for (long j = 0; j < lk; j++) o += row[j] * V[j * d + e];
            O[e] = o;
          }
          l = m + log(sum);
        } else {
          empty_rows++;
        }
        for (int e = 0; e < d; e++) {
          const size_t oi = (size_t)(t * ots + h * ohs + e);
          owned[oi] = 1;
          const double got = scree__load_elem(out, c->dt, oi);
          CHECK(!isnan(got), "%s: out[t=%ld, h=%d, %d] not written (seq %d row %ld)",
                        what, t, h, e, b, i);
          uint32_t want[1];
          scree__store_elem(want, c->dt, 0, O[e]);
          const int64_t du = iabs64(ordered(out, c->dt, oi) - ordered(want, c->dt, 0));
          const double wantv = scree__load_elem(want, c->dt, 0);
          if (l == -INFINITY)
            CHECK(du == 0 && got == 0, "%s: seq %d row %ld h %d sees no key: out %g, not 0",
                          what, b, i, h, got);
          else
            CHECK(du <= 1 || fabs(got - wantv) <= 1e-12,
                          "%s: seq %d (lq %ld lk %ld) row %ld h %d e %d: ref %.9g baseline %.9g "
                          "(%lld ulps)", what, b, lq, lk, i, h, e, got, O[e], (long long)du);
        }
        if (lse) {
          const float gl = lse[(size_t)(h * tq + t)];
          CHECK(!isnan(gl), "%s: lse[h=%d, t=%ld] not written", what, h, t);
          if (l == -INFINITY)
            CHECK(gl == -INFINITY, "%s: seq %d row %ld h %d sees no key: lse %g, not -inf",
                          what, b, i, h, (double)gl);
          else
            CHECK(iabs64(ordered_f32(gl) - ordered_f32((float)l)) <= 1,
                          "%s: seq %d row %ld h %d: lse ref %.9g baseline %.12g", what, b, i,
                          h, (double)gl, l);
        }
        checked++;
      }
    }
  }
  /* The gaps between strided out rows (and the slack element) stay NaN. */
  for (size_t i = 0; i < nout; i++)
    if (!owned[i])
      CHECK(isnan(scree__load_elem(out, c->dt, i)),
                    "%s: out[%zu] is outside every row but was written", what, i);
  if (lse)
    CHECK(isnan(lse[hq * tq]), "%s: lse written past [heads_q, total_q]", what);
  CHECK(checked == (long)hq * tq, "%s: %ld rows checked", what, checked);

  free(K), free(V), free(S), free(Q), free(O), free(owned), free(out), free(lse);
  free(cu_q), free(cu_k);
  if (base)
    free(base);
  else
    free(qb), free(kb), free(vb);
  return empty_rows;
}

static const scree_dtype half_dtypes[2] = {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};
static const scree_dtype all_dtypes[3] = {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16,
                                          SCREE_DTYPE_FP32};

/* Every boundary length around the 64- and 128-row tiles, an empty sequence
 * and a long one, in one batch. */
START_TEST(mixed_lengths) {
  static const int lens[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 1000};
  for (int di = 0; di < 3; di++)
    for (int causal = 0; causal < 2; causal++) {
      acase c = {.name = "mixed_lengths", .nseq = 10, .lq = lens, .hq = 2, .hkv = 1,
                 .d = di == 2 ? 32 : 64, .dt = all_dtypes[di], .causal = causal,
                 .lse = 1};
      run_case(&c);
    }
}
END_TEST

/* Chunked prefill and decode: Lq != Lk, including Lq > Lk, where causal
 * rows i < Lq - Lk see no key. */
START_TEST(q_and_k_lengths_differ) {
  static const int lq[] = {1, 7, 64, 65, 0, 5, 128, 200, 33, 1, 100, 3};
  static const int lk[] = {100, 64, 7, 129, 5, 0, 1000, 100, 33, 1, 1, 300};
  for (int di = 0; di < 2; di++)
    for (int causal = 0; causal < 2; causal++) {
      acase c = {.name = "q_and_k_lengths_differ", .nseq = 12, .lq = lq, .lk = lk,
                 .hq = 4, .hkv = 2, .d = 64, .dt = half_dtypes[di], .causal = causal,
                 .lse = 1};
      const long empty = run_case(&c);
      /* Causal: rows i < Lq - Lk of (64, 7), (200, 100), (100, 1) and all
       * of (5, 0) see no key; otherwise only (5, 0). */
      ck_assert_int_eq(empty, 4L * (causal ? 57 + 100 + 99 + 5 : 5));
    }
}
END_TEST

START_TEST(sliding_windows) {
  static const int lq[] = {65, 1, 130, 40, 200, 0, 17};
  static const int lk[] = {65, 90, 130, 100, 50, 9, 17};
  static const struct { int64_t wl, wr; int causal; } w[] = {
      {16, -1, 0}, {-1, 16, 0}, {8, 4, 0},  {0, 0, 0},    {0, -1, 0},  {-1, 0, 0},
      {3, 7, 1},   {16, -1, 1}, {0, 0, 1},  {-1, 5, 1},   {500, 500, 0}, {60, 30, 0},
      {2000, -1, 1}, {1, 1, 0}};
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
    acase c = {.name = "sliding_windows", .nseq = 7, .lq = lq, .lk = lk, .hq = 4,
               .hkv = 2, .d = 32, .dt = half_dtypes[i % 2], .causal = w[i].causal,
               .window = 1, .wl = w[i].wl, .wr = w[i].wr, .lse = 1};
    run_case(&c);
    /* The same windows with Lq == Lk (self-attention). */
    c.lk = NULL;
    c.dt = all_dtypes[i % 3];
    run_case(&c);
  }
}
END_TEST

START_TEST(gqa_mqa_mha) {
  static const int lens[] = {100, 1, 64, 257, 0, 30};
  static const int heads[][2] = {{4, 2}, {8, 1}, {2, 2}, {6, 3}, {6, 1}};
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
    for (int causal = 0; causal < 2; causal++) {
      acase c = {.name = "gqa_mqa_mha", .nseq = 6, .lq = lens, .hq = heads[i][0],
                 .hkv = heads[i][1], .d = 32, .dt = all_dtypes[(i + causal) % 3],
                 .causal = causal, .lse = (int)(i % 2)};
      run_case(&c);
    }
}
END_TEST

START_TEST(head_dims) {
  static const int lens[] = {17, 64, 130, 1};
  static const int dims[] = {32, 64, 96, 128, 256};
  for (size_t i = 0; i < 5; i++)
    for (int di = 0; di < 3; di++) {
      acase c = {.name = "head_dims", .nseq = dims[i] >= 128 ? 3 : 4, .lq = lens,
                 .hq = 2, .hkv = 1, .d = dims[i], .dt = all_dtypes[di],
                 .causal = (int)((i + di) % 2), .lse = 1};
      run_case(&c);
    }
}
END_TEST

/* Packed qkv buffers read through strides, out written through strides,
 * an explicit scale (also a sharp softmax), and lse. */
START_TEST(packed_qkv_and_strided_out) {
  static const int lens[] = {70, 0, 129, 5, 64};
  static const int layouts[] = {LAYOUT_T3HD, LAYOUT_TH3D, LAYOUT_THD_GQA, LAYOUT_PADDED,
                                LAYOUT_SEPARATE};
  for (size_t li = 0; li < 5; li++)
    for (int di = 0; di < 3; di++) {
      const int gqa = layouts[li] == LAYOUT_THD_GQA || layouts[li] == LAYOUT_PADDED;
      acase c = {.name = "packed_qkv_and_strided_out", .nseq = 5, .lq = lens,
                 .hq = 4, .hkv = gqa ? 2 : 4, .d = di == 1 ? 96 : 64,
                 .dt = all_dtypes[di], .causal = di != 1, .scale = 0.3f,
                 .layout = layouts[li], .out_pad = 1, .lse = 1};
      run_case(&c);
      c.scale = 2.0f; /* nearly one-hot rows */
      c.in_scale = 2.0;
      c.out_pad = 0;
      c.window = 1, c.wl = 20, c.wr = -1;
      run_case(&c);
    }
}
END_TEST

/* out poisoned with NaN: every row of every head is written, rows that see
 * no key get exact zeros and -inf (checked in run_case), and a batch of
 * only empty sequences, or no sequence at all, writes nothing. */
START_TEST(writes_every_row_and_nothing_else) {
  static const int lq[] = {9, 3, 0, 12};
  static const int lk[] = {2, 0, 4, 12};
  acase c = {.name = "no_key_rows", .nseq = 4, .lq = lq, .lk = lk, .hq = 3, .hkv = 1,
             .d = 32, .dt = SCREE_DTYPE_BF16, .causal = 1, .out_pad = 1, .lse = 1};
  /* Rows 0..6 of sequence 0 and all of sequence 1 see no key. */
  ck_assert_int_eq(run_case(&c), 3 * (7 + 3));
  /* Window (0, 0): row i sees only key i + Lk - Lq. */
  c.causal = 0, c.window = 1, c.wl = 0, c.wr = 0, c.dt = SCREE_DTYPE_FP16;
  ck_assert_int_eq(run_case(&c), 3 * (7 + 3));
  /* Window (1, 2) without causal: rows 0..4 of sequence 0 see nothing. */
  c.wl = 1, c.wr = 2;
  ck_assert_int_eq(run_case(&c), 3 * (5 + 3));

  static const int zeros[] = {0, 0, 0};
  acase z = {.name = "empty_sequences", .nseq = 3, .lq = zeros, .hq = 2, .hkv = 2, .d = 64,
             .dt = SCREE_DTYPE_FP16, .lse = 1};
  run_case(&z);

  uint16_t sentinel = 0x1234;
  float lsent = 7;
  int32_t cu0[1] = {0};
  scree_attention_args a = {.batch = 0, .heads_q = 2, .heads_kv = 2, .head_dim = 64,
                            .dtype = SCREE_DTYPE_FP16, .window_left = -1,
                            .window_right = -1};
  ref(&a, NULL, NULL, NULL, cu0, cu0, &sentinel, &lsent);
  ck_assert_uint_eq(sentinel, 0x1234);
  ck_assert(lsent == 7);
}
END_TEST

/* Softcap (Gemma 2): scores large enough that tanh saturates (scale 1 on
 * inputs of std 1 and 2: |scale q.k| up to about 10 sqrt(head_dim), capped
 * at 5, 20 or 50), causal and not, windows, GQA, strided layouts, every
 * dtype. The softcapped reference must also differ from the plain one (the
 * cases are not vacuous). */
START_TEST(softcap) {
  static const int lq[] = {65, 1, 130, 0, 200, 17};
  static const int lk[] = {65, 90, 130, 9, 50, 17};
  static const struct {
    float softcap, scale;
    int causal, window;
    int64_t wl, wr;
    int hq, hkv, d, layout;
  } w[] = {
      {5.0f, 1.0f, 1, 0, -1, -1, 4, 2, 64, LAYOUT_SEPARATE},
      {20.0f, 1.0f, 0, 0, -1, -1, 2, 2, 128, LAYOUT_T3HD},
      {5.0f, 0.5f, 0, 1, 16, 8, 4, 1, 32, LAYOUT_PADDED},
      {50.0f, 0.0f, 1, 1, 40, -1, 6, 3, 96, LAYOUT_THD_GQA},
      {0.5f, 0.3f, 0, 1, -1, 0, 2, 1, 64, LAYOUT_SEPARATE},
      {30.0f, 2.0f, 1, 1, 2000, -1, 2, 2, 32, LAYOUT_TH3D},
  };
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
    const int same = w[i].layout >= LAYOUT_T3HD;
    acase c = {.name = "softcap", .nseq = 6, .lq = lq, .lk = same ? NULL : lk, .hq = w[i].hq,
               .hkv = w[i].hkv, .d = w[i].d, .dt = all_dtypes[i % 3], .causal = w[i].causal,
               .window = w[i].window, .wl = w[i].wl, .wr = w[i].wr, .scale = w[i].scale,
               .softcap = w[i].softcap, .layout = w[i].layout, .out_pad = (int)(i % 2),
               .in_scale = i % 2 ? 2.0 : 1.0, .lse = 1};
    run_case(&c);
  }
  /* One problem with and without softcap: the outputs differ. */
  static const int n1[] = {100};
  const int d = 64;
  void *q = malloc(100 * 2 * d), *k = malloc(100 * 2 * d), *v = malloc(100 * 2 * d);
  void *o1 = malloc(100 * 2 * d), *o2 = malloc(100 * 2 * d);
  float l1[100], l2[100];
  int32_t cu[2] = {0, n1[0]};
  scree_test_fill(q, SCREE_DTYPE_FP16, 100 * d, 1.0);
  scree_test_fill(k, SCREE_DTYPE_FP16, 100 * d, 1.0);
  scree_test_fill(v, SCREE_DTYPE_FP16, 100 * d, 1.0);
  scree_attention_args a = {.batch = 1, .total_q = 100, .total_k = 100, .max_seqlen_q = 100,
                            .max_seqlen_k = 100, .heads_q = 1, .heads_kv = 1, .head_dim = d,
                            .dtype = SCREE_DTYPE_FP16, .causal = 1, .scale = 1.0f,
                            .window_left = -1, .window_right = -1};
  ref(&a, q, k, v, cu, cu, o1, l1);
  a.softcap = 5.0f;
  ref(&a, q, k, v, cu, cu, o2, l2);
  double worst = 0;
  for (int i = 0; i < 100 * d; i++) {
    const double x = fabs(scree__load_elem(o1, SCREE_DTYPE_FP16, (size_t)i) -
                          scree__load_elem(o2, SCREE_DTYPE_FP16, (size_t)i));
    worst = x > worst ? x : worst;
  }
  ck_assert_msg(worst > 0.5, "softcap 5 moved out by only %g", worst);
  ck_assert(l2[99] < l1[99]); /* tanh shrinks the largest scores */
  free(q), free(k), free(v), free(o1), free(o2);
}
END_TEST

/* Random batches, masks, heads, layouts and dtypes (the seed is printed). */
START_TEST(random_configs) {
  static const int heads[][2] = {{1, 1}, {2, 1}, {4, 2}, {4, 4}, {8, 1}, {3, 3}};
  static const int dims[] = {32, 64, 96, 128};
  for (int it = 0; it < 40; it++) {
    int lq[8], lk[8];
    const int nseq = 1 + (int)(scree_test_rand() % 8);
    const int same = scree_test_rand() % 2;
    for (int b = 0; b < nseq; b++) {
      lq[b] = scree_test_rand() % 8 == 0 ? 0 : (int)(scree_test_rand() % 160);
      lk[b] = same ? lq[b] : (int)(scree_test_rand() % 160);
    }
    const int hi = (int)(scree_test_rand() % 6);
    acase c = {.name = "random_configs", .nseq = nseq, .lq = lq, .lk = lk,
               .hq = heads[hi][0], .hkv = heads[hi][1],
               .d = dims[scree_test_rand() % 4], .dt = all_dtypes[scree_test_rand() % 3],
               .causal = (int)(scree_test_rand() % 2), .window = (int)(scree_test_rand() % 2),
               .lse = (int)(scree_test_rand() % 2), .out_pad = (int)(scree_test_rand() % 2)};
    if (c.window) {
      c.wl = scree_test_rand() % 3 == 0 ? -1 : (int64_t)(scree_test_rand() % 100);
      c.wr = scree_test_rand() % 3 == 0 ? -1 : (int64_t)(scree_test_rand() % 100);
    }
    if (scree_test_rand() % 2) c.scale = (float)scree_test_uniform(0.05, 1.0);
    if (scree_test_rand() % 3 == 0) c.softcap = (float)scree_test_uniform(0.5, 30.0);
    if (scree_test_rand() % 4 == 0) c.in_scale = 3.0;
    c.layout = same ? (int)(scree_test_rand() % 5) : (int)(scree_test_rand() % 2);
    if ((c.layout == LAYOUT_T3HD || c.layout == LAYOUT_TH3D) && c.hq != c.hkv)
      c.layout = LAYOUT_THD_GQA;
    run_case(&c);
  }
}
END_TEST

SCREE_TEST_MAIN(.name = "attention_ref", .timeout = 300,
                .tests = SCREE_TESTS(mixed_lengths, q_and_k_lengths_differ, sliding_windows,
                                     gqa_mqa_mha, head_dims, packed_qkv_and_strided_out,
                                     writes_every_row_and_nothing_else, softcap,
                                     random_configs))
