/* test_layernorm_ref.c - the CPU reference against an obvious baseline:
 * the formula written out per row in long double, with the statistics
 * taken by Welford's update rather than two passes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

SCREE__REFERENCE(layernorm);

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};

/* Mean and 1 / sqrt(var + eps) of n values, by Welford's update. */
static void naive_stats(const double *x, long n, double eps, long double *mean,
                        long double *rstd) {
  long double m = 0, m2 = 0;
  for (long i = 0; i < n; i++) {
    const long double d = x[i] - m;
    m += d / (i + 1);
    m2 += d * (x[i] - m);
  }
  *mean = m;
  *rstd = 1 / sqrtl(m2 / n + eps);
}

typedef struct lcase {
  long rows, cols, xs, ys;
  scree_dtype x, w, y;
  int bias, stats;
  double offset; /* added to every x: rows far from zero mean */
} lcase;

static void check_case(const lcase *k) {
  const size_t ex = scree_dtype_size(k->x), ew = scree_dtype_size(k->w),
               ey = scree_dtype_size(k->y);
  void *x = calloc((size_t)(k->rows * k->xs + 1), ex);
  void *w = calloc((size_t)k->cols, ew), *b = calloc((size_t)k->cols, ew);
  void *y = calloc((size_t)(k->rows * k->ys + 1), ey);
  float *mean = calloc((size_t)k->rows + 1, 4), *rstd = calloc((size_t)k->rows + 1, 4);
  for (long i = 0; i < k->rows * k->xs; i++)
    scree__store_elem(x, k->x, (size_t)i, k->offset + 2.0 * scree_test_normal());
  scree_test_fill(w, k->w, (size_t)k->cols, 1.0);
  scree_test_fill(b, k->w, (size_t)k->cols, 1.0);
  /* Nonzero marks an optional buffer as given; its host copy follows. */
  scree_layernorm_args a = {.b = k->bias, .mean = k->stats, .rstd = k->stats,
                            .rows = k->rows, .cols = k->cols, .x_stride = k->xs,
                            .y_stride = k->ys, .x_dtype = k->x, .w_dtype = k->w,
                            .y_dtype = k->y, .eps = 1e-5f};
  void *host[6];
  int n = 0;
  host[n++] = x;
  host[n++] = w;
  if (k->bias) host[n++] = b;
  host[n++] = y;
  if (k->stats) host[n++] = mean, host[n++] = rstd;
  scree__ref_layernorm(&a, host);
  double *xr = malloc(sizeof(double) * (size_t)k->cols);
  double rtol, atol;
  scree__tolerance(k->y, &rtol, &atol);
  for (long r = 0; r < k->rows; r++) {
    for (long c = 0; c < k->cols; c++) xr[c] = scree__load_elem(x, k->x, (size_t)(r * k->xs + c));
    long double mu, rs;
    naive_stats(xr, k->cols, 1e-5, &mu, &rs);
    if (k->stats) {
      /* Both round once to fp32 from far more precise values. */
      ck_assert_msg(fabsl(mean[r] - mu) <= 1e-6 + 1e-6 * fabsl(mu), "row %ld: mean %.9g want %.9Lg",
                    r, mean[r], mu);
      ck_assert_msg(fabsl(rstd[r] - rs) <= 1e-6 * rs, "row %ld: rstd %.9g want %.9Lg", r, rstd[r],
                    rs);
    }
    for (long c = 0; c < k->cols; c++) {
      const long double g = scree__load_elem(w, k->w, (size_t)c);
      const long double bb = k->bias ? scree__load_elem(b, k->w, (size_t)c) : 0;
      const double want = (double)((xr[c] - mu) * rs * g + bb);
      const double got = scree__load_elem(y, k->y, (size_t)(r * k->ys + c));
      /* The reference rounds once from double, the baseline from long
       * double: one output ulp apart at most. */
      ck_assert_msg(fabs(got - want) <= atol + rtol * fabs(want),
                    "row %ld col %ld: ref %.9g baseline %.9g (%s, offset %g)", r, c, got, want,
                    scree_dtype_name(k->y), k->offset);
    }
  }
  free(x), free(w), free(b), free(y), free(mean), free(rstd), free(xr);
}

START_TEST(reference_matches_formula) {
  const long shapes[][2] = {{1, 1}, {3, 1}, {5, 7}, {4, 4095}, {2, 4096}, {1, 65536}, {17, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int d = 0; d < 3; d++) {
      const lcase k = {shapes[i][0], shapes[i][1], shapes[i][1], shapes[i][1], dtypes[d],
                       dtypes[d], dtypes[d], 1, 1, 0};
      check_case(&k);
    }
}
END_TEST

START_TEST(reference_bias_and_stats_optional) {
  for (int bias = 0; bias < 2; bias++)
    for (int stats = 0; stats < 2; stats++) {
      const lcase k = {6, 33, 33, 33, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32,
                       bias, stats, 0};
      check_case(&k);
    }
}
END_TEST

START_TEST(reference_strides_and_mixed_dtypes) {
  const lcase ks[] = {
      {9, 100, 131, 100, SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16, 1, 1, 0},
      {6, 33, 33, 40, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32, 0, 1, 0},
      {3, 64, 64, 64, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16, SCREE_DTYPE_FP16, 1, 0, 0},
  };
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_case(&ks[i]);
}
END_TEST

/* Rows of large mean and small spread: the reference's two passes keep
 * the variance. */
START_TEST(reference_large_mean) {
  const lcase ks[] = {
      {4, 4096, 4096, 4096, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, 1, 1, 1e4},
      {4, 1000, 1000, 1000, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32, 1, 1, 100},
      {4, 999, 999, 999, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, 0, 1, 64},
  };
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_case(&ks[i]);
}
END_TEST

/* A constant row has variance 0: y = b, rstd = 1 / sqrt(eps). */
START_TEST(reference_constant_row) {
  float x[5] = {3, 3, 3, 3, 3}, w[5] = {1, 2, 3, 4, 5}, b[5] = {-1, 0, 1, 2, 3}, y[5];
  float mean, rstd;
  scree_layernorm_args a = {.b = 1, .mean = 1, .rstd = 1, .rows = 1, .cols = 5, .eps = 1e-5f};
  scree__ref_layernorm(&a, (void *const[]){x, w, b, y, &mean, &rstd});
  for (int c = 0; c < 5; c++) ck_assert_float_eq(y[c], b[c]);
  ck_assert_float_eq(mean, 3);
  ck_assert_float_eq_tol(rstd, 1 / sqrt(1e-5f), 1e-3);
}
END_TEST

START_TEST(reference_zero_rows_writes_nothing) {
  float y = 42;
  scree_layernorm_args a = {.rows = 0, .cols = 8, .eps = 1e-5f};
  scree__ref_layernorm(&a, (void *const[]){NULL, NULL, &y});
  ck_assert_float_eq(y, 42);
}
END_TEST

SCREE_TEST_MAIN(.name = "layernorm_ref", .timeout = 120,
                .tests = SCREE_TESTS(reference_matches_formula, reference_bias_and_stats_optional,
                                     reference_strides_and_mixed_dtypes, reference_large_mean,
                                     reference_constant_row, reference_zero_rows_writes_nothing))
