/* test_ragged_softmax_backward_ref.c - the ragged softmax backward's host
 * side without a GPU: the op's reference in its problems' buffer order
 * against the formula summed element by element (the arithmetic itself,
 * scree__ragged_softmax_backward_ref, is checked against finite differences
 * in test_misc_backward_ref), the inputs its problems shape (y a softmax
 * over each sequence, per column), its problems, defaults, check and
 * pruning. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"
#include "test_util.h"

SCREE__REFERENCE(ragged_softmax_backward);

static const scree__op *op(void) { return scree__op_find("ragged_softmax_backward"); }

static scree__variant var2(scree_dtype y, scree_dtype dy) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = y;
  v.v[1] = dy;
  return v;
}

/* The problem's buffer called name. */
static scree__buf *buf(scree__problem *p, const char *name) {
  for (int b = 0; b < p->nbufs; b++)
    if (!strcmp(p->bufs[b].name, name)) return &p->bufs[b];
  ck_abort_msg("no buffer %s", name);
  return NULL;
}

/* The op's reference (buffers y, dy, cu_seqlens, dx) on a strided fp32
 * batch with lengths 0, 1, 2 and 5 and a scale, against
 * dx = s y (dy - sum over the sequence of y dy), each sum taken afresh;
 * the padding between dx's rows is left alone. */
START_TEST(op_reference_matches_formula) {
  enum { C = 3, YS = 4, GS = 5, XS = 6, T = 8 };
  const int32_t cu[] = {0, 0, 1, 3, 8};
  float y[T * YS], g[T * GS], x[T * XS];
  for (int i = 0; i < T * YS; i++) y[i] = (float)(scree_test_rand() % 1000) / 1000.f;
  for (int i = 0; i < T * GS; i++) g[i] = (float)(scree_test_rand() % 2001) / 1000.f - 1.f;
  for (int i = 0; i < T * XS; i++) x[i] = 1234.f;
  const scree_ragged_softmax_backward_args a = {
      .batch = 4, .total = T, .max_seqlen = 5, .cols = C, .y_stride = YS, .dy_stride = GS,
      .dx_stride = XS, .y_dtype = SCREE_DTYPE_FP32, .dy_dtype = SCREE_DTYPE_FP32, .scale = -1.5f};
  scree__ref_ragged_softmax_backward(&a, (void *const[]){y, g, (void *)cu, x});
  for (int b = 0; b < 4; b++)
    for (int t = cu[b]; t < cu[b + 1]; t++)
      for (int c = 0; c < XS; c++) {
        if (c >= C) {
          ck_assert_float_eq(x[t * XS + c], 1234.f);
          continue;
        }
        double d = 0;
        for (int u = cu[b]; u < cu[b + 1]; u++) d += (double)y[u * YS + c] * g[u * GS + c];
        const double want = -1.5 * y[t * YS + c] * (g[t * GS + c] - d);
        ck_assert_msg(fabs(x[t * XS + c] - want) <= 1e-6 * (1 + fabs(want)),
                      "token %d col %d: %g, want %g", t, c, (double)x[t * XS + c], want);
      }
}
END_TEST

/* Check problems: the edge lengths, packed rows, a scale other than 1;
 * the shaped y is a softmax over each sequence (positive, each column of
 * each sequence summing to 1); fp32 dx's atol is the softmax backward's. */
START_TEST(check_problem_and_shaped_inputs) {
  static const scree_dtype dts[][2] = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16},
                                       {SCREE_DTYPE_FP32, SCREE_DTYPE_FP32},
                                       {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32}};
  for (size_t i = 0; i < 3; i++) {
    const scree__variant var = var2(dts[i][0], dts[i][1]);
    scree_ragged_softmax_backward_args in = {.cols = 37, .max_seqlen = 300};
    scree__problem p;
    memset(&p, 0, sizeof p);
    char why[256];
    ck_assert_msg(!op()->problem(&in, &var, 1, 1, NULL, &p, why, sizeof why), "%s", why);
    const scree_ragged_softmax_backward_args *a = (const void *)p.args;
    ck_assert_int_eq(p.nbufs, 4);
    ck_assert_str_eq(p.bufs[0].name, "y");
    ck_assert_str_eq(p.bufs[1].name, "dy");
    ck_assert_str_eq(p.bufs[2].name, "cu_seqlens");
    ck_assert_str_eq(p.bufs[3].name, "dx");
    ck_assert_int_eq(p.bufs[3].dtype, dts[i][1]);
    ck_assert(a->scale == 0.75f);
    ck_assert_int_eq(a->y_stride, 0);
    ck_assert(buf(&p, "dx")->atol == scree__softmax_bwd_atol(0.75f));
    const int32_t *cu = buf(&p, "cu_seqlens")->host;
    int has0 = 0, has1 = 0, longest = 0;
    for (int64_t b = 0; b < a->batch; b++) {
      const int len = cu[b + 1] - cu[b];
      has0 |= len == 0, has1 |= len == 1;
      if (len > longest) longest = len;
    }
    ck_assert(has0 && has1);
    ck_assert_int_eq(longest, 300);
    ck_assert_int_eq(cu[a->batch], a->total);
    const size_t n = (size_t)(a->total * a->cols);
    void *hy = malloc(n * 4), *hg = malloc(n * 4);
    scree_test_fill(hy, a->y_dtype, n, 1.0);
    scree_test_fill(hg, a->dy_dtype, n, 1.0);
    op()->shape_inputs(a, (void *const[]){hy, hg, (void *)cu, NULL});
    const double tol = a->y_dtype == SCREE_DTYPE_FP32 ? 1e-5 : 2e-2;
    for (int64_t b = 0; b < a->batch; b++)
      for (int64_t c = 0; c < a->cols && cu[b + 1] > cu[b]; c++) {
        double sum = 0;
        for (int64_t t = cu[b]; t < cu[b + 1]; t++) {
          const double v = scree__load_elem(hy, a->y_dtype, (size_t)(t * a->cols + c));
          ck_assert_msg(v >= 0 && v <= 1, "y[%lld, %lld] = %g", (long long)t, (long long)c, v);
          sum += v;
        }
        ck_assert_msg(fabs(sum - 1) <= tol, "sequence %lld column %lld sums to %g",
                      (long long)b, (long long)c, sum);
      }
    free(hy), free(hg);
    scree__problem_free(&p);
  }
}
END_TEST

/* Given lengths are kept; bytes count y and dy read and dx written once,
 * and cu_seqlens; bad lengths and columns are refused. */
START_TEST(problem_lengths_and_bytes) {
  const scree__variant var = var2(SCREE_DTYPE_BF16, SCREE_DTYPE_FP32);
  char why[256];
  static const int64_t lens[] = {3, 5, 0, 9};
  const scree__lens l = {4, lens, lens};
  scree_ragged_softmax_backward_args in = {.cols = 100};
  scree__problem p;
  memset(&p, 0, sizeof p);
  ck_assert_msg(!op()->problem(&in, &var, 0, 7, &l, &p, why, sizeof why), "%s", why);
  const scree_ragged_softmax_backward_args *a = (const void *)p.args;
  ck_assert_int_eq(a->batch, 4);
  ck_assert_int_eq(a->total, 17);
  ck_assert_int_eq(a->max_seqlen, 9);
  ck_assert(a->scale == 0.f); /* a timed problem keeps the call's scale */
  ck_assert(p.bytes == 17.0 * 100 * (2 + 4 + 4) + 5 * 4);
  scree__problem_free(&p);
  static const int64_t neg[] = {3, -1};
  const scree__lens bad = {2, neg, neg};
  memset(&p, 0, sizeof p);
  ck_assert_int_ne(op()->problem(&in, &var, 0, 1, &bad, &p, why, sizeof why), 0);
  scree__problem_free(&p);
  scree_ragged_softmax_backward_args wide = {.cols = 65537};
  memset(&p, 0, sizeof p);
  ck_assert_int_ne(op()->problem(&wide, &var, 1, 1, NULL, &p, why, sizeof why), 0);
  scree__problem_free(&p);
}
END_TEST

/* The default passes the check on sm_80 and sm_90 for every dtype pair and
 * shapes of every kind, and stays valid once adapted to a misaligned call;
 * clusters only on sm_90; on the long benchmark batch sm_90 splits in two
 * and stages the whole of each half. */
START_TEST(default_configs_are_valid) {
  static const char *const archs[] = {"sm_80", "sm_90"};
  static const int64_t shapes[][3] = {/* cols, max_seqlen, batch */
                                      {4096, 1821, 16}, {1024, 2064, 64}, {128, 1821, 16},
                                      {1, 1, 1},        {7, 5000, 3},     {65536, 40, 5},
                                      {8192, 891, 8},   {64, 100000, 2},  {4096, 5, 3001}};
  for (int ai = 0; ai < 2; ai++) {
    scree__target t;
    ck_assert_int_eq(scree__target_for_arch(archs[ai], &t), 0);
    for (int yd = 0; yd < 3; yd++)
      for (int gd = 0; gd < 3; gd++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
          const scree__variant var = var2((scree_dtype)yd, (scree_dtype)gd);
          scree_ragged_softmax_backward_args a = {
              .cols = shapes[i][0], .max_seqlen = shapes[i][1], .batch = shapes[i][2],
              .total = shapes[i][1], .y_dtype = (scree_dtype)yd, .dy_dtype = (scree_dtype)gd};
          scree__config c;
          op()->default_config(&t, &var, &a, &c);
          char why[256] = "", cs[128];
          scree__config_str(op(), &c, cs, sizeof cs);
          ck_assert_msg(scree__config_check(op(), &c, &var, &t, why, sizeof why),
                        "%s %d/%d shape %zu: %s: %s", archs[ai], yd, gd, i, cs, why);
          ck_assert(t.sm >= 90 || c.v[4] == 1);
          a.y = 0x10002; /* misaligned: adapt narrows vec, still valid */
          op()->impls[c.impl].adapt(&c, &var, &a);
          ck_assert_msg(scree__config_check(op(), &c, &var, &t, why, sizeof why), "%s", why);
        }
  }
  scree__target t;
  scree__target_for_arch("sm_90", &t);
  const scree__variant var = var2(SCREE_DTYPE_FP16, SCREE_DTYPE_FP16);
  scree_ragged_softmax_backward_args a = {.cols = 4096, .max_seqlen = 1821, .batch = 16,
                                          .total = 16384};
  scree__config c;
  op()->default_config(&t, &var, &a, &c);
  ck_assert_int_eq(c.v[4], 2);
  ck_assert_int_ge(c.v[3], 911);
  ck_assert(op()->impls[0].worth_timing(&c, &var, &a));
}
END_TEST

/* The check mirrors the kernel's static_asserts, refuses clusters before
 * sm_90 and stages past the shared memory, naming the field. */
START_TEST(check_limits) {
  const scree__variant var = var2(SCREE_DTYPE_FP32, SCREE_DTYPE_FP32);
  scree__target t80, t90;
  scree__target_for_arch("sm_80", &t80);
  scree__target_for_arch("sm_90", &t90);
  static const struct {
    const char *cfg, *needle;
    int sm80, sm90;
  } cases[] = {
      {"tpr=2,rows=64,vec=4,stok=2048,split=1", NULL, 1, 1},
      {"tpr=2,rows=64,vec=4,stok=1024,split=2", "split=2", 0, 1},
      {"tpr=2,rows=64,vec=8,stok=2048,split=1", "shared memory", 0, 0},
      {"tpr=2,rows=512,vec=4,stok=256,split=1", "stok=256", 0, 0},
      {"tpr=8,rows=16,vec=4,stok=8192,split=1", "shared memory", 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    scree__config c;
    char why[256] = "";
    ck_assert_msg(!scree__config_parse(op(), cases[i].cfg, &c, why, sizeof why), "%s", why);
    why[0] = 0;
    ck_assert_int_eq(scree__config_check(op(), &c, &var, &t80, why, sizeof why), cases[i].sm80);
    if (!cases[i].sm80) ck_assert_msg(strstr(why, cases[i].needle), "%s: %s", cases[i].cfg, why);
    why[0] = 0;
    ck_assert_int_eq(scree__config_check(op(), &c, &var, &t90, why, sizeof why), cases[i].sm90);
    if (!cases[i].sm90) ck_assert_msg(strstr(why, cases[i].needle), "%s: %s", cases[i].cfg, why);
  }
}
END_TEST

/* Pruning: strips twice the row, groups or a cluster past the longest
 * sequence, a stage of which half would hold a CTA's part. */
START_TEST(worth_timing_prunes_idle_configs) {
  const scree__variant var = var2(SCREE_DTYPE_FP16, SCREE_DTYPE_FP16);
  const scree_ragged_softmax_backward_args a = {.cols = 4096, .max_seqlen = 1000, .batch = 8,
                                                .total = 8000};
  static const struct {
    const char *cfg;
    int worth;
  } cases[] = {
      {"tpr=2,rows=64,vec=8,stok=1024,split=1", 1}, {"tpr=2,rows=64,vec=8,stok=2048,split=1", 0},
      {"tpr=2,rows=64,vec=8,stok=512,split=2", 1},  {"tpr=2,rows=64,vec=8,stok=1024,split=2", 0},
      {"tpr=2,rows=512,vec=8,stok=512,split=4", 0}, {"tpr=2,rows=64,vec=8,stok=256,split=4", 1},
      {"tpr=2,rows=64,vec=8,stok=256,split=8", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    scree__config c;
    char why[256];
    ck_assert(!scree__config_parse(op(), cases[i].cfg, &c, why, sizeof why));
    ck_assert_msg(op()->impls[0].worth_timing(&c, &var, &a) == cases[i].worth, "%s",
                  cases[i].cfg);
  }
  const scree_ragged_softmax_backward_args narrow = {.cols = 7, .max_seqlen = 1000};
  scree__config c;
  char why[256];
  ck_assert(!scree__config_parse(op(), "tpr=8,rows=64,vec=8,stok=1024,split=1", &c, why,
                                 sizeof why));
  ck_assert(!op()->impls[0].worth_timing(&c, &var, &narrow));
}
END_TEST

SCREE_TEST_MAIN(.name = "ragged_softmax_backward_ref", .timeout = 120,
                .tests = SCREE_TESTS(op_reference_matches_formula,
                                     check_problem_and_shaped_inputs, problem_lengths_and_bytes,
                                     default_configs_are_valid, check_limits,
                                     worth_timing_prunes_idle_configs))
