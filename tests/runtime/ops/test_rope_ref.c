/* test_rope_ref.c - the CPU reference against an obvious baseline: each
 * pair as a complex number multiplied by e^(i angle) in long double,
 * sequence by sequence, with the layouts' pairs gathered explicitly; and
 * every element outside the rotary parts left as it was. */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

SCREE__REFERENCE(rope);

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};

/* The fp32 angle both the kernel and HuggingFace use (the definition). */
static float angle(int64_t p, int64_t i, int64_t rd, float theta) {
  const float e = (float)(2 * i) / (float)rd;
  return (float)p * (1.0f / (float)pow((double)theta, (double)e));
}

typedef struct rcase {
  scree_dtype dt;
  scree_rope_layout layout;
  int64_t hq, hk, d, rd; /* hk 0: q only */
  int pos;               /* 0 cu_seqlens, 1 int32, 2 int64 */
  int table;
  int64_t pad;           /* extra elements after each head row and token */
} rcase;

/* Pair i of a head row: the two element indices. */
static void pair_of(scree_rope_layout l, int64_t i, int64_t half, int64_t *i1, int64_t *i2) {
  *i1 = l == SCREE_ROPE_NEOX ? i : 2 * i;
  *i2 = l == SCREE_ROPE_NEOX ? i + half : 2 * i + 1;
}

static void run(const rcase *c) {
  static const int64_t lens[] = {0, 1, 5, 0, 17, 2};
  const int nseq = 6;
  int32_t cu[7] = {0};
  for (int b = 0; b < nseq; b++) cu[b + 1] = cu[b] + (int32_t)lens[b];
  const int64_t T = cu[nseq], half = c->rd / 2;
  const int64_t qh = c->d + c->pad, qt = c->hq * qh + c->pad;
  const int64_t kh = c->d + c->pad, kt = c->hk * kh + c->pad;
  const size_t es = scree_dtype_size(c->dt), nq = (size_t)(T * qt), nk = (size_t)(T * kt);
  void *q = malloc(nq * es), *k = malloc((nk ? nk : 1) * es);
  void *q0 = malloc(nq * es), *k0 = malloc((nk ? nk : 1) * es);
  scree_test_fill(q, c->dt, nq, 1.0);
  scree_test_fill(k, c->dt, nk, 1.0);
  memcpy(q0, q, nq * es);
  memcpy(k0, k, nk * es);
  int32_t *p32 = malloc((size_t)T * 4);
  int64_t *p64 = malloc((size_t)T * 8);
  const int64_t maxp = 5000;
  for (int64_t t = 0; t < T; t++)
    p64[t] = p32[t] = (int32_t)(c->table ? (t * 997) % maxp : t * 104729 + (t % 3 ? 0 : 1 << 20));
  float *tab = NULL;
  if (c->table) {
    tab = malloc((size_t)(maxp * c->rd) * sizeof *tab);
    for (int64_t p = 0; p < maxp; p++)
      for (int64_t i = 0; i < half; i++) {
        tab[p * c->rd + i] = (float)scree_test_normal(); /* any numbers: read, not derived */
        tab[p * c->rd + half + i] = (float)scree_test_normal();
      }
  }
  scree_rope_args a = {.q = 1, .k = c->hk ? 1 : 0, .total = T, .batch = nseq,
                       .heads_q = c->hq, .heads_kv = c->hk, .head_dim = c->d,
                       .rotary_dim = c->rd == c->d ? 0 : c->rd, .q_token_stride = qt,
                       .q_head_stride = qh, .k_token_stride = kt, .k_head_stride = kh,
                       .dtype = c->dt, .layout = c->layout, .positions_int64 = c->pos == 2,
                       .theta = 10000.f};
  void *host[5];
  int n = 0;
  host[n++] = q;
  if (c->hk) host[n++] = k;
  if (c->pos) {
    a.positions = 1;
    host[n++] = c->pos == 2 ? (void *)p64 : (void *)p32;
  } else {
    a.cu_seqlens = 1;
    host[n++] = cu;
  }
  if (c->table) {
    a.cos_sin = 1;
    a.max_position = maxp;
    host[n++] = tab;
  }
  scree__ref_rope(&a, host);

  double rtol, atol;
  scree__tolerance(c->dt, &rtol, &atol);
  if (c->table) atol *= 16; /* products with random table entries */
  for (int b = 0; b < nseq; b++)
    for (int64_t j = 0; j < lens[b]; j++) {
      const int64_t t = cu[b] + j, p = c->pos == 0 ? j : c->pos == 1 ? p32[t] : p64[t];
      for (int which = 0; which < 2; which++) {
        const int64_t heads = which ? c->hk : c->hq, hs = which ? kh : qh, ts = which ? kt : qt;
        void *got = which ? k : q, *orig = which ? k0 : q0;
        for (int64_t h = 0; h < heads; h++) {
          const int64_t row = t * ts + h * hs;
          for (int64_t i = 0; i < half; i++) {
            int64_t i1, i2;
            pair_of(c->layout, i, half, &i1, &i2);
            const long double x1 = scree__load_elem(orig, c->dt, (size_t)(row + i1));
            const long double x2 = scree__load_elem(orig, c->dt, (size_t)(row + i2));
            long double complex z = x1 + I * x2;
            long double complex r;
            if (c->table)
              r = tab[p * c->rd + i] + I * (long double)tab[p * c->rd + half + i];
            else
              r = cexpl(I * (long double)angle(p, i, c->rd, 10000.f));
            z *= r;
            const double w1 = (double)creall(z), w2 = (double)cimagl(z);
            const double g1 = scree__load_elem(got, c->dt, (size_t)(row + i1));
            const double g2 = scree__load_elem(got, c->dt, (size_t)(row + i2));
            ck_assert_msg(fabs(g1 - w1) <= atol + rtol * fabs(w1) &&
                              fabs(g2 - w2) <= atol + rtol * fabs(w2),
                          "%s layout %d pos %d table %d: token %lld head %lld pair %lld: ref "
                          "(%.9g, %.9g) baseline (%.9g, %.9g)",
                          scree_dtype_name(c->dt), c->layout, c->pos, c->table, (long long)t,
                          (long long)h, (long long)i, g1, g2, w1, w2);
          }
          /* Past the rotary part, and the padding after the row: untouched. */
          ck_assert_msg(!memcmp((char *)got + (size_t)(row + c->rd) * es,
                                (char *)orig + (size_t)(row + c->rd) * es,
                                (size_t)(hs - c->rd) * es),
                        "token %lld head %lld: elements past rotary_dim written", (long long)t,
                        (long long)h);
        }
        if (heads)
          ck_assert_msg(!memcmp((char *)got + (size_t)(t * ts + heads * hs) * es,
                                (char *)orig + (size_t)(t * ts + heads * hs) * es,
                                (size_t)(ts - heads * hs) * es),
                        "token %lld: padding written", (long long)t);
      }
    }
  free(q), free(k), free(q0), free(k0), free(p32), free(p64), free(tab);
}

START_TEST(reference_matches_baseline) {
  /* Every dtype x layout x positions source x table, on GQA heads with a
   * partial rotary part and padded strides, and on a full one. */
  for (int d = 0; d < 3; d++)
    for (int l = 0; l < 2; l++)
      for (int pos = 0; pos < 3; pos++)
        for (int table = 0; table < 2; table++) {
          const rcase c1 = {dtypes[d], (scree_rope_layout)l, 4, 2, 64, 32, pos, table, 8};
          const rcase c2 = {dtypes[d], (scree_rope_layout)l, 2, 1, 128, 128, pos, table, 0};
          run(&c1);
          run(&c2);
        }
}
END_TEST

START_TEST(reference_edge_shapes) {
  const rcase cases[] = {
      {SCREE_DTYPE_FP32, SCREE_ROPE_NEOX, 1, 0, 2, 2, 0, 0, 0},     /* one pair, q only */
      {SCREE_DTYPE_FP16, SCREE_ROPE_GPTJ, 3, 0, 6, 4, 1, 0, 3},     /* odd pads */
      {SCREE_DTYPE_BF16, SCREE_ROPE_NEOX, 1, 1, 1024, 1024, 2, 0, 0},
      {SCREE_DTYPE_FP32, SCREE_ROPE_GPTJ, 5, 5, 80, 40, 0, 1, 0},   /* Phi-style partial */
      {SCREE_DTYPE_FP16, SCREE_ROPE_NEOX, 2, 2, 96, 6, 2, 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run(&cases[i]);
}
END_TEST

/* q and k as slices of one packed [T, Hq + 2 Hkv, d] buffer (v after k):
 * rotating them where they lie equals rotating separate copies, and v is
 * left alone. */
START_TEST(reference_packed_qkv) {
  const int64_t T = 11, hq = 4, hk = 2, d = 32, per = (hq + 2 * hk) * d;
  float *qkv = malloc(sizeof(float) * (size_t)(T * per));
  float *v0 = malloc(sizeof(float) * (size_t)(T * per));
  float *q = malloc(sizeof(float) * (size_t)(T * hq * d));
  float *k = malloc(sizeof(float) * (size_t)(T * hk * d));
  scree_test_fill(qkv, SCREE_DTYPE_FP32, (size_t)(T * per), 1.0);
  memcpy(v0, qkv, sizeof(float) * (size_t)(T * per));
  for (int64_t t = 0; t < T; t++) {
    memcpy(q + t * hq * d, qkv + t * per, sizeof(float) * (size_t)(hq * d));
    memcpy(k + t * hk * d, qkv + t * per + hq * d, sizeof(float) * (size_t)(hk * d));
  }
  int32_t cu[3] = {0, 4, (int32_t)T};
  scree_rope_args a = {.q = 1, .k = 1, .cu_seqlens = 1, .total = T, .batch = 2, .heads_q = hq,
                       .heads_kv = hk, .head_dim = d, .q_token_stride = per, .k_token_stride = per,
                       .dtype = SCREE_DTYPE_FP32, .layout = SCREE_ROPE_NEOX};
  scree__ref_rope(&a, (void *const[]){qkv, qkv + hq * d, cu});
  scree_rope_args s = a;
  s.q_token_stride = s.k_token_stride = 0;
  scree__ref_rope(&s, (void *const[]){q, k, cu});
  for (int64_t t = 0; t < T; t++) {
    ck_assert(!memcmp(qkv + t * per, q + t * hq * d, sizeof(float) * (size_t)(hq * d)));
    ck_assert(!memcmp(qkv + t * per + hq * d, k + t * hk * d, sizeof(float) * (size_t)(hk * d)));
    ck_assert(!memcmp(qkv + t * per + (hq + hk) * d, v0 + t * per + (hq + hk) * d,
                      sizeof(float) * (size_t)(hk * d)));
  }
  free(qkv), free(v0), free(q), free(k);
}
END_TEST

/* Position 0 is the identity; theta 0 means 10000. */
START_TEST(reference_identity_and_default_theta) {
  float x[8], y[8], z[8];
  scree_test_fill(x, SCREE_DTYPE_FP32, 8, 1.0);
  memcpy(y, x, sizeof x);
  memcpy(z, x, sizeof x);
  int32_t cu[2] = {0, 1}, p7 = 7;
  scree_rope_args a = {.q = 1, .cu_seqlens = 1, .total = 1, .batch = 1, .heads_q = 1,
                       .head_dim = 8, .dtype = SCREE_DTYPE_FP32};
  scree__ref_rope(&a, (void *const[]){y, cu});
  ck_assert(!memcmp(x, y, sizeof x));
  scree_rope_args b = {.q = 1, .positions = 1, .total = 1, .heads_q = 1, .head_dim = 8,
                       .dtype = SCREE_DTYPE_FP32};
  scree__ref_rope(&b, (void *const[]){y, &p7});
  b.theta = 10000.f;
  scree__ref_rope(&b, (void *const[]){z, &p7});
  ck_assert(!memcmp(y, z, sizeof y));
  ck_assert(memcmp(x, y, sizeof x));
}
END_TEST

START_TEST(reference_zero_tokens_writes_nothing) {
  float q = 42;
  int32_t cu[1] = {0};
  scree_rope_args a = {.q = 1, .cu_seqlens = 1, .total = 0, .batch = 0, .heads_q = 1,
                       .head_dim = 2, .dtype = SCREE_DTYPE_FP32};
  scree__ref_rope(&a, (void *const[]){&q, cu});
  ck_assert_float_eq(q, 42);
}
END_TEST

SCREE_TEST_MAIN(.name = "rope_ref", .timeout = 120,
                .tests = SCREE_TESTS(reference_matches_baseline, reference_edge_shapes,
                                     reference_packed_qkv, reference_identity_and_default_theta,
                                     reference_zero_tokens_writes_nothing))
