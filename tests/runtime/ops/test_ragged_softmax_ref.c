/* test_ragged_softmax_ref.c - the CPU reference against an obvious
 * baseline: each (sequence, column) softmax written out on its own, column
 * by column, through log-sum-exp in long double; plus the op's host hooks
 * that need no GPU (problems, defaults, pruning, adapt). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"
#include "test_util.h"

SCREE__REFERENCE(ragged_softmax);

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};

/* y[t] = exp(s x[t] - lse) over the n values of one column of one
 * sequence, lse = log(sum exp(s x)) taken about the maximum. */
static void naive_column(const double *x, long n, double s, long double *y) {
  long double m = -INFINITY;
  for (long i = 0; i < n; i++)
    if ((long double)s * x[i] > m) m = (long double)s * x[i];
  long double acc = 0;
  for (long i = 0; i < n; i++) acc += expl((long double)s * x[i] - m);
  const long double lse = m + logl(acc);
  for (long i = 0; i < n; i++) y[i] = expl((long double)s * x[i] - lse);
}

/* Runs the reference on a batch of `lens` and checks every element against
 * the baseline; the padding between rows must keep its bytes. */
static void check_batch(const long *lens, int n, long cols, long xs, long ys, scree_dtype xt,
                        scree_dtype yt, float scale) {
  int32_t *cu = malloc(sizeof *cu * (size_t)(n + 1));
  cu[0] = 0;
  for (int i = 0; i < n; i++) cu[i + 1] = cu[i] + (int32_t)lens[i];
  const long total = cu[n];
  const size_t ex = scree_dtype_size(xt), ey = scree_dtype_size(yt);
  void *x = calloc((size_t)(total * xs + 1), ex);
  void *y = malloc((size_t)(total * ys + 1) * ey);
  memset(y, 0x5a, (size_t)(total * ys + 1) * ey);
  scree_test_fill(x, xt, (size_t)(total * xs), 2.0);
  scree_ragged_softmax_args a = {.batch = n, .total = total, .max_seqlen = 0, .cols = cols,
                                 .x_stride = xs, .y_stride = ys, .x_dtype = xt, .y_dtype = yt,
                                 .scale = scale};
  scree__ref_ragged_softmax(&a, (void *const[]){x, cu, y});
  double rtol, atol;
  scree__tolerance(yt, &rtol, &atol);
  const double s = scale != 0.f ? (double)scale : 1.0;
  double *xc = malloc(sizeof *xc * (size_t)(total + 1));
  long double *yc = malloc(sizeof *yc * (size_t)(total + 1));
  for (int b = 0; b < n; b++) {
    const long len = lens[b];
    for (long c = 0; c < cols; c++) {
      for (long i = 0; i < len; i++)
        xc[i] = scree__load_elem(x, xt, (size_t)((cu[b] + i) * xs + c));
      naive_column(xc, len, s, yc);
      for (long i = 0; i < len; i++) {
        const double got = scree__load_elem(y, yt, (size_t)((cu[b] + i) * ys + c));
        const double want = (double)yc[i];
        ck_assert_msg(fabs(got - want) <= atol + rtol * fabs(want),
                      "sequence %d token %ld col %ld: ref %.9g baseline %.9g (%s -> %s)", b, i,
                      c, got, want, scree_dtype_name(xt), scree_dtype_name(yt));
        if (len == 1) ck_assert_msg(got == 1.0, "a sequence of one token gives %.9g", got);
      }
    }
  }
  /* Padding of each row, and the element past the last row: untouched. */
  for (long t = 0; t < total; t++)
    for (long c = cols; c < ys; c++)
      ck_assert_uint_eq(((unsigned char *)y)[(size_t)(t * ys + c) * ey], 0x5a);
  ck_assert_uint_eq(((unsigned char *)y)[(size_t)(total * ys) * ey], 0x5a);
  free(cu), free(x), free(y), free(xc), free(yc);
}

START_TEST(reference_matches_baseline) {
  static const long lens[] = {5, 0, 1, 37, 2, 130, 0, 17};
  const int n = (int)(sizeof lens / sizeof lens[0]);
  const long cols[] = {1, 3, 8, 33, 130};
  for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
    for (int d = 0; d < 3; d++)
      check_batch(lens, n, cols[i], cols[i], cols[i], dtypes[d], dtypes[d], 0.f);
}
END_TEST

START_TEST(reference_scales_strides_mixed_dtypes) {
  static const long lens[] = {3, 64, 1, 0, 9};
  check_batch(lens, 5, 20, 24, 21, SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, 0.37f);
  check_batch(lens, 5, 7, 7, 16, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16, -2.5f);
  check_batch(lens, 5, 16, 40, 16, SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, 8.f);
  static const long one[] = {1000};
  check_batch(one, 1, 5, 5, 5, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, 1.f);
}
END_TEST

/* A packed batch gives the bytes of each sequence computed on its own, and
 * scale 0 is scale 1. */
START_TEST(packed_equals_per_sequence) {
  static const long lens[] = {5, 0, 1, 37, 12};
  const int n = 5;
  int32_t cu[6] = {0};
  for (int i = 0; i < n; i++) cu[i + 1] = cu[i] + (int32_t)lens[i];
  const long T = cu[n], D = 24;
  float *x = malloc(sizeof(float) * (size_t)(T * D));
  const size_t bytes = sizeof(float) * (size_t)(T * D);
  float *yp = malloc(bytes), *ys = malloc(bytes), *y1 = malloc(bytes);
  scree_test_fill(x, SCREE_DTYPE_FP32, (size_t)(T * D), 1.0);
  scree_ragged_softmax_args a = {.batch = n, .total = T, .cols = D, .x_dtype = SCREE_DTYPE_FP32,
                                 .y_dtype = SCREE_DTYPE_FP32};
  scree__ref_ragged_softmax(&a, (void *const[]){x, cu, yp});
  for (int i = 0; i < n; i++) {
    int32_t one[2] = {0, (int32_t)lens[i]};
    scree_ragged_softmax_args s = a;
    s.batch = 1;
    s.total = lens[i];
    scree__ref_ragged_softmax(&s, (void *const[]){x + cu[i] * D, one, ys + cu[i] * D});
  }
  ck_assert_int_eq(memcmp(yp, ys, sizeof(float) * (size_t)(T * D)), 0);
  a.scale = 1.f;
  scree__ref_ragged_softmax(&a, (void *const[]){x, cu, y1});
  ck_assert_int_eq(memcmp(yp, y1, sizeof(float) * (size_t)(T * D)), 0);
  free(x), free(yp), free(ys), free(y1);
}
END_TEST

START_TEST(reference_empty_batch_writes_nothing) {
  float y = 42;
  int32_t cu[3] = {0, 0, 0};
  scree_ragged_softmax_args a = {.batch = 2, .total = 0, .cols = 8};
  scree__ref_ragged_softmax(&a, (void *const[]){NULL, cu, &y});
  a.batch = 0;
  scree__ref_ragged_softmax(&a, (void *const[]){NULL, cu, &y});
  ck_assert_float_eq(y, 42);
}
END_TEST

/* ---- host hooks ----------------------------------------------------------- */

static const scree__op *op(void) { return scree__op_find("ragged_softmax"); }

static scree__variant var16(void) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = v.v[1] = SCREE_DTYPE_FP16;
  return v;
}

/* The lengths a problem's cu_seqlens hold. */
static const int32_t *problem_cu(const scree__problem *p) {
  for (int b = 0; b < p->nbufs; b++)
    if (!strcmp(p->bufs[b].name, "cu_seqlens")) return p->bufs[b].host;
  return NULL;
}

/* The check batch: lengths 0, 1, just off the token tiles, one long
 * sequence; all within max_seqlen; a few thousand tokens at most. */
START_TEST(check_problem_has_edge_lengths) {
  const scree__variant var = var16();
  const long cols[] = {1, 4096, 65536};
  for (size_t i = 0; i < 3; i++) {
    scree_ragged_softmax_args a = {.cols = cols[i], .max_seqlen = 2048};
    scree__problem p;
    memset(&p, 0, sizeof p);
    char why[256];
    ck_assert_msg(!op()->problem(&a, &var, 1, 1, NULL, &p, why, sizeof why), "%s", why);
    const scree_ragged_softmax_args *pa = (const void *)p.args;
    const int32_t *cu = problem_cu(&p);
    ck_assert_ptr_nonnull(cu);
    int has0 = 0, has1 = 0, has17 = 0, has65 = 0, longest = 0;
    for (int64_t b = 0; b < pa->batch; b++) {
      const int len = cu[b + 1] - cu[b];
      ck_assert_int_ge(len, 0);
      has0 |= len == 0, has1 |= len == 1, has17 |= len == 17, has65 |= len == 65;
      if (len > longest) longest = len;
    }
    ck_assert(has0 && has1 && has17 && has65);
    ck_assert_int_eq(cu[0], 0);
    ck_assert_int_eq(cu[pa->batch], pa->total);
    ck_assert_int_eq(longest, pa->max_seqlen);
    ck_assert_int_ge(longest, 128);
    ck_assert_int_le(pa->total * pa->cols, (int64_t)1 << 25);
    ck_assert_int_eq(pa->x_stride, 0);
    ck_assert_int_eq(pa->y_stride, 0);
    scree__problem_free(&p);
  }
}
END_TEST

/* Given lengths are kept exactly; generated ones sum to the total with the
 * first at the longest length; bytes count x and y once and cu_seqlens. */
START_TEST(problem_lengths_and_bytes) {
  const scree__variant var = var16();
  char why[256];
  static const int64_t lens[] = {3, 5, 0, 9};
  const scree__lens l = {4, lens, lens};
  scree_ragged_softmax_args a = {.cols = 100};
  scree__problem p;
  memset(&p, 0, sizeof p);
  ck_assert_msg(!op()->problem(&a, &var, 0, 7, &l, &p, why, sizeof why), "%s", why);
  const scree_ragged_softmax_args *pa = (const void *)p.args;
  ck_assert_int_eq(pa->batch, 4);
  ck_assert_int_eq(pa->total, 17);
  ck_assert_int_eq(pa->max_seqlen, 9);
  ck_assert_int_eq(problem_cu(&p)[3], 8);
  ck_assert(p.bytes == 17.0 * 100 * 4 + 5 * 4);
  scree__problem_free(&p);

  scree_ragged_softmax_args t = {.cols = 64, .total = 100000, .max_seqlen = 4096};
  memset(&p, 0, sizeof p);
  ck_assert_msg(!op()->problem(&t, &var, 0, 99, NULL, &p, why, sizeof why), "%s", why);
  pa = (const void *)p.args;
  ck_assert_int_eq(pa->total, 100000);
  ck_assert_int_eq(pa->max_seqlen, 4096);
  const int32_t *cu = problem_cu(&p);
  ck_assert_int_eq(cu[1], 4096);
  ck_assert_int_eq(cu[pa->batch], 100000);
  scree__problem_free(&p);

  static const int64_t neg[] = {3, -1};
  const scree__lens bad = {2, neg, neg};
  memset(&p, 0, sizeof p);
  ck_assert_int_ne(op()->problem(&a, &var, 0, 1, &bad, &p, why, sizeof why), 0);
  scree__problem_free(&p);
  scree_ragged_softmax_args wide = {.cols = 65537};
  memset(&p, 0, sizeof p);
  ck_assert_int_ne(op()->problem(&wide, &var, 1, 1, NULL, &p, why, sizeof why), 0);
  scree__problem_free(&p);
}
END_TEST

/* The index of an implementation's field, by its name in config strings. */
static int field(const scree__impl *im, const char *name) {
  for (int i = 0; i < im->nfields; i++)
    if (!strcmp(im->fields[i].name, name)) return i;
  ck_abort_msg("%s has no field %s", im->name, name);
  return -1;
}

/* The default passes the check on every arch and dtype, for shapes of every
 * kind, and adapt keeps it valid; on the bench shapes it is worth timing. */
START_TEST(default_configs_are_valid) {
  const scree__op *o = op();
  const char *archs[] = {"sm_80", "sm_90"};
  const int64_t shapes[][3] = {/* batch, max_seqlen, cols */
                               {16, 1821, 4096}, {2, 5, 4096},  {64, 2064, 1024},
                               {8, 891, 8192},   {16, 1821, 128}, {100000, 1, 1},
                               {1, 1, 65536},    {3, 100000, 7},  {1, 2, 33}};
  for (int ar = 0; ar < 2; ar++)
    for (int d = 0; d < 3; d++)
      for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        scree__target t;
        ck_assert_int_eq(scree__target_for_arch(archs[ar], &t), 0);
        scree__variant var;
        memset(&var, 0, sizeof var);
        var.v[0] = var.v[1] = dtypes[d];
        scree_ragged_softmax_args a = {.batch = shapes[i][0], .max_seqlen = shapes[i][1],
                                       .total = shapes[i][0] * shapes[i][1],
                                       .cols = shapes[i][2], .x_dtype = dtypes[d],
                                       .y_dtype = dtypes[d]};
        scree__config c;
        char why[256] = "";
        o->default_config(&t, &var, &a, &c);
        ck_assert_msg(scree__config_check(o, &c, &var, &t, why, sizeof why), "shape %zu: %s", i,
                      why);
        /* Sequences past the register kernel's 256 tokens take the stage:
         * on sm_90 with rows of 2 KiB and more, the cluster implementation. */
        const int wide = shapes[i][2] * (int64_t)scree_dtype_size(dtypes[d]) >= 2048;
        ck_assert_int_eq(c.impl, shapes[i][1] > 256 ? (ar == 1 && wide ? 2 : 1) : 0);
        if (i < 5) /* the bench shapes (the tuner times the default anyway) */
          ck_assert_msg(o->impls[c.impl].worth_timing(&c, &var, &a), "shape %zu: default pruned",
                        i);
        a.x = 0x10002; /* 2-byte aligned: vec 1 for 16-bit, none for fp32 */
        o->impls[c.impl].adapt(&c, &var, &a);
        ck_assert(scree__config_check(o, &c, &var, &t, why, sizeof why));
        if (d) ck_assert_int_eq(c.v[field(&o->impls[c.impl], "vec")], 1);
        o->default_config(&t, &var, NULL, &c); /* shape-free */
        ck_assert(scree__config_check(o, &c, &var, &t, why, sizeof why));
      }
}
END_TEST

/* The cluster default by the longest sequence: 128-byte strips of 512
 * tokens without a cluster up to 512 tokens; 64-byte strips of 1024
 * tokens without one up to 1024; 64-byte strips of 512 in clusters of 8
 * (two strips an item) up to 2304 (4 x 512 and an eighth); 128-byte strips
 * in clusters of 8 past that. The default is worth timing; so is a
 * cluster of 4 up to 2304 tokens, not past it. A cluster twice as large as
 * the longest sequence needs is worth timing only for strips narrower than
 * a line, and four times as large never. */
START_TEST(cluster_default_by_length) {
  const scree__op *o = op();
  scree__target t;
  ck_assert_int_eq(scree__target_for_arch("sm_90", &t), 0);
  scree__variant var;
  memset(&var, 0, sizeof var);
  var.v[0] = var.v[1] = SCREE_DTYPE_FP16;
  const scree__impl *im = &o->impls[2];
  const int cs = field(im, "csize"), tp = field(im, "tpr"), sk = field(im, "stok");
  /* max_seqlen, tpr, stok, csize */
  const int64_t want[][4] = {{257, 8, 512, 1},  {512, 8, 512, 1},    {513, 4, 1024, 1},
                             {1024, 4, 1024, 1}, {1025, 4, 512, 8},  {2048, 4, 512, 8},
                             {2064, 4, 512, 8},  {2304, 4, 512, 8},  {2305, 8, 512, 8},
                             {100000, 8, 512, 8}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const int64_t len = want[i][0];
    scree_ragged_softmax_args a = {.batch = 4, .max_seqlen = len, .total = 4 * len, .cols = 4096,
                                   .x_dtype = SCREE_DTYPE_FP16, .y_dtype = SCREE_DTYPE_FP16};
    scree__config c;
    o->default_config(&t, &var, &a, &c);
    ck_assert_int_eq(c.impl, 2);
    ck_assert_msg(c.v[tp] == want[i][1] && c.v[sk] == want[i][2] && c.v[cs] == want[i][3],
                  "max_seqlen %lld: tpr %d, stok %d, csize %d, expected %lld, %lld, %lld",
                  (long long)len, c.v[tp], c.v[sk], c.v[cs], (long long)want[i][1],
                  (long long)want[i][2], (long long)want[i][3]);
    if (len <= 8 * 512) /* past that it streams: pruned, timed as the default */
      ck_assert(im->worth_timing(&c, &var, &a));
    if (len >= 2048) { /* 4 x 512 stays worth timing while it streams an eighth */
      c.v[cs] = 4;
      ck_assert_int_eq(im->worth_timing(&c, &var, &a), len <= 2304);
    }
  }
  /* 1000 tokens: two CTAs of 512 stage it; clusters of 4 are twice that. */
  scree_ragged_softmax_args a = {.batch = 4, .max_seqlen = 1000, .total = 4000, .cols = 4096,
                                 .x_dtype = SCREE_DTYPE_FP16, .y_dtype = SCREE_DTYPE_FP16};
  scree__config c;
  o->default_config(&t, &var, &a, &c);
  c.v[sk] = 512;
  const int64_t prune[][3] = {/* tpr, csize, worth */ {4, 2, 1}, {4, 4, 1}, {4, 8, 0},
                              {8, 2, 1}, {8, 4, 0}, {8, 8, 0}};
  for (size_t i = 0; i < sizeof prune / sizeof prune[0]; i++) {
    c.v[tp] = (int)prune[i][0];
    c.v[cs] = (int)prune[i][1];
    ck_assert_msg(im->worth_timing(&c, &var, &a) == prune[i][2], "tpr %d, csize %d: worth %d",
                  c.v[tp], c.v[cs], (int)!prune[i][2]);
  }
}
END_TEST

/* The shared-memory implementation: its stage and reduction buffer must fit
 * what a CTA may opt in to, and its fields mirror the kernel's asserts. */
START_TEST(smem_check_limits) {
  const scree__op *o = op();
  const scree__variant var = var16();
  char why[256];
  for (int ar = 0; ar < 2; ar++) {
    scree__target t;
    ck_assert_int_eq(scree__target_for_arch(ar ? "sm_90" : "sm_80", &t), 0);
    /* 2048 tokens of 64 bytes: 128 KiB, fits both; of 128 bytes, neither. */
    const scree__config fits = {1, {4, 64, 8, 2048, 1}}, big = {1, {8, 64, 8, 2048, 1}};
    ck_assert_msg(scree__config_check(o, &fits, &var, &t, why, sizeof why), "%s", why);
    ck_assert(!scree__config_check(o, &big, &var, &t, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "shared memory"));
    /* Clusters (split > 1) only on sm_90. */
    const scree__config cl = {1, {8, 64, 8, 512, 4}};
    ck_assert_int_eq(scree__config_check(o, &cl, &var, &t, why, sizeof why), ar ? 1 : 0);
    if (!ar) ck_assert_ptr_nonnull(strstr(why, "clusters"));
    const scree__config bad[] = {{1, {16, 64, 8, 1024, 1}}, {1, {2, 8, 8, 1024, 1}},
                                 {1, {8, 256, 8, 256, 1}},  {1, {2, 64, 8, 32, 1}},
                                 {1, {2, 64, 8, 1024, 3}},  {1, {2, 64, 8, 1024, 16}}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
      ck_assert_msg(!scree__config_check(o, &bad[i], &var, &t, why, sizeof why), "bad[%zu]", i);
  }
  /* A stage twice the longest sequence is pruned (it would launch as the
   * half one). */
  scree_ragged_softmax_args a = {.batch = 4, .total = 4000, .max_seqlen = 1000, .cols = 4096};
  const scree__config s1k = {1, {2, 128, 8, 1024, 1}}, s2k = {1, {2, 128, 8, 2048, 1}};
  ck_assert(o->impls[1].worth_timing(&s1k, &var, &a));
  ck_assert(!o->impls[1].worth_timing(&s2k, &var, &a));
  /* A cluster of 4 holds about 250 tokens per CTA: a stage of 256 is
   * enough, 512 is pruned; 8 CTAs of 128 groups leave CTAs idle. */
  const scree__config c256 = {1, {8, 64, 8, 256, 4}}, c512 = {1, {8, 64, 8, 512, 4}};
  const scree__config wide = {1, {2, 128, 8, 256, 8}};
  ck_assert(o->impls[1].worth_timing(&c256, &var, &a));
  ck_assert(!o->impls[1].worth_timing(&c512, &var, &a));
  ck_assert(!o->impls[1].worth_timing(&wide, &var, &a));
}
END_TEST

/* adapt narrows only vec, to the widest the pointers and strides allow. */
START_TEST(adapt_narrows_vec_only) {
  const scree__op *o = op();
  const scree__variant var = var16();
  const scree__config c0 = {0, {16, 16, 8, 8}};
  struct {
    uint64_t x, y;
    int64_t cols, xs, ys;
    int vec;
  } cases[] = {{0x1000, 0x2000, 4096, 0, 0, 8}, {0x1008, 0x2000, 4096, 0, 0, 4},
               {0x1000, 0x2000, 4095, 0, 0, 1}, {0x1000, 0x2000, 4096, 4098, 0, 2},
               {0x1000, 0x2002, 64, 0, 0, 1},   {0x1000, 0x2000, 12, 0, 0, 4}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    scree_ragged_softmax_args a = {.x = cases[i].x, .y = cases[i].y, .cols = cases[i].cols,
                                   .x_stride = cases[i].xs, .y_stride = cases[i].ys};
    scree__config c = c0;
    o->impls[0].adapt(&c, &var, &a);
    ck_assert_int_eq(c.v[SCREE__RW_VEC], cases[i].vec);
    ck_assert_int_eq(c.v[SCREE__RW_TPR], 16);
    ck_assert_int_eq(c.v[SCREE__RW_ROWS], 16);
    ck_assert_int_eq(c.v[SCREE__RW_CACHE], 8);
  }
}
END_TEST

/* The bucket rounds total and max_seqlen up to powers of two and keeps
 * cols; the representative stays in its bucket and under 256 MiB of x. */
START_TEST(buckets_and_representatives) {
  const scree__op *o = op();
  const scree__variant var = var16();
  scree_ragged_softmax_args a = {.batch = 16, .total = 16000, .max_seqlen = 1800, .cols = 4095};
  scree__bucket b;
  scree__bucket_of(o, &var, &a, &b);
  char s[128];
  scree__bucket_str(o, &b, s, sizeof s);
  ck_assert_str_eq(s, "cols=4095,total<=16384,max_seqlen<=2048");
  scree_ragged_softmax_args r;
  o->representative(&b, &var, 0, &r);
  ck_assert_int_eq(r.cols, 4095);
  ck_assert_int_eq(r.total, 16384);
  ck_assert_int_eq(r.max_seqlen, 2048);
  scree_ragged_softmax_args big = {.batch = 1, .total = 1 << 30, .max_seqlen = 1 << 30,
                                   .cols = 65536};
  scree__bucket_of(o, &var, &big, &b);
  o->representative(&b, &var, 0, &r);
  ck_assert_int_le(r.total * r.cols * 2, (int64_t)256 << 20);
  ck_assert_int_le(r.max_seqlen, r.total);
}
END_TEST

/* worth_timing drops configs that would mostly idle on the shape. */
START_TEST(worth_timing_prunes_idle_configs) {
  const scree__op *o = op();
  const scree__variant var = var16();
  scree_ragged_softmax_args a = {.batch = 16, .total = 16384, .max_seqlen = 1821, .cols = 128};
  const scree__config wide = {0, {64, 4, 8, 1}};   /* 512 columns for 128 */
  const scree__config fine = {0, {16, 16, 8, 8}};
  ck_assert(!o->impls[0].worth_timing(&wide, &var, &a));
  ck_assert(o->impls[0].worth_timing(&fine, &var, &a));
  a.max_seqlen = 5;
  const scree__config deep = {0, {8, 8, 8, 4}}; /* 32 cached tokens for 5 */
  const scree__config groups = {0, {8, 16, 8, 1}};
  const scree__config fits = {0, {8, 8, 8, 1}};
  ck_assert(!o->impls[0].worth_timing(&deep, &var, &a));
  ck_assert(!o->impls[0].worth_timing(&groups, &var, &a));
  ck_assert(o->impls[0].worth_timing(&fits, &var, &a));
}
END_TEST

/* The op's own check: 1024 threads keep at most 16 cached elements. */
START_TEST(check_limits_1024_threads) {
  const scree__op *o = op();
  const scree__variant var = var16();
  scree__target t;
  scree__target_for_arch("sm_90", &t);
  char why[256] = "";
  const scree__config ok = {0, {64, 16, 4, 4}}, bad = {0, {64, 16, 8, 4}};
  ck_assert(scree__config_check(o, &ok, &var, &t, why, sizeof why));
  ck_assert(!scree__config_check(o, &bad, &var, &t, why, sizeof why));
  ck_assert_msg(strstr(why, "vec*cache"), "%s", why);
}
END_TEST

SCREE_TEST_MAIN(.name = "ragged_softmax_ref", .timeout = 120,
                .tests = SCREE_TESTS(
                    reference_matches_baseline, reference_scales_strides_mixed_dtypes,
                    packed_equals_per_sequence, reference_empty_batch_writes_nothing,
                    check_problem_has_edge_lengths, problem_lengths_and_bytes,
                    default_configs_are_valid, cluster_default_by_length, adapt_narrows_vec_only,
                    smem_check_limits, buckets_and_representatives,
                    worth_timing_prunes_idle_configs, check_limits_1024_threads))
