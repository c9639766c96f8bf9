/* test_softmax_ref.c - the CPU reference for softmax against an obvious
 * baseline written differently: per row, in long double, without the
 * maximum subtracted, y = exp(s x - log(sum(exp(s x)))). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

SCREE__REFERENCE(softmax);

/* ck_assert_msg records a mark point on every pass: too slow for a check
 * per element. CHECK costs nothing unless it fails. */
#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};

static void naive_row(const double *x, long n, double s, long double *y) {
  long double sum = 0;
  for (long i = 0; i < n; i++) sum += expl((long double)s * x[i]);
  const long double lse = logl(sum);
  for (long i = 0; i < n; i++) y[i] = expl((long double)s * x[i] - lse);
}

/* x normal(0, 2): s x stays far inside long double's exponent range. */
static void check_shape(long rows, long cols, long xs, long ys, scree_dtype xt, scree_dtype yt,
                        float scale) {
  const size_t ex = scree_dtype_size(xt), ey = scree_dtype_size(yt);
  void *x = calloc((size_t)(rows * xs + 1), ex);
  void *y = malloc((size_t)(rows * ys + 1) * ey);
  memset(y, 0xff, (size_t)(rows * ys + 1) * ey);
  scree_test_fill(x, xt, (size_t)(rows * xs), 2.0);
  scree_softmax_args a = {.rows = rows, .cols = cols, .x_stride = xs, .y_stride = ys,
                          .x_dtype = xt, .y_dtype = yt, .scale = scale};
  scree__ref_softmax(&a, (void *const[]){x, y});
  double *xr = malloc(sizeof(double) * (size_t)cols);
  long double *yr = malloc(sizeof(long double) * (size_t)cols);
  /* The reference rounds once from double, the baseline from long double:
   * at most one output rounding apart. */
  double rtol, atol;
  scree__tolerance(yt, &rtol, &atol);
  const double s = scale != 0.f ? (double)scale : 1.0;
  for (long r = 0; r < rows; r++) {
    for (long c = 0; c < cols; c++) xr[c] = scree__load_elem(x, xt, (size_t)(r * xs + c));
    naive_row(xr, cols, s, yr);
    for (long c = 0; c < cols; c++) {
      const double got = scree__load_elem(y, yt, (size_t)(r * ys + c));
      const double want = (double)yr[c];
      CHECK(fabs(got - want) <= atol + rtol * fabs(want),
            "rows=%ld cols=%ld row %ld col %ld: ref %.9g baseline %.9g (%s -> %s, scale %g)",
            rows, cols, r, c, got, want, scree_dtype_name(xt), scree_dtype_name(yt),
            (double)scale);
    }
    /* The padding between rows stays as it was. */
    for (long c = cols; c < ys; c++)
      CHECK(isnan(scree__load_elem(y, yt, (size_t)(r * ys + c))),
            "row %ld: padding col %ld written", r, c);
  }
  free(x), free(y), free(xr), free(yr);
}

START_TEST(reference_matches_formula) {
  const long shapes[][2] = {{1, 1}, {3, 1}, {5, 7}, {4, 4095}, {2, 4096}, {1, 65536},
                            {17, 128}, {1, 262144}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int d = 0; d < 3; d++)
      check_shape(shapes[i][0], shapes[i][1], shapes[i][1], shapes[i][1], dtypes[d], dtypes[d],
                  0.f);
}
END_TEST

START_TEST(reference_scale_strides_and_mixed_dtypes) {
  check_shape(9, 100, 131, 100, SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, 0.125f);
  check_shape(6, 33, 33, 40, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32, -1.5f);
  check_shape(3, 64, 64, 64, SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, 3.f);
  check_shape(4, 1000, 1000, 1003, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16, 1.f);
}
END_TEST

/* A row of one element is 1 whatever its value; a constant row is 1/cols. */
START_TEST(reference_degenerate_rows) {
  float x[4] = {-3e4f, 0.f, 7.f, 1e-20f}, y[4];
  scree_softmax_args a = {.rows = 4, .cols = 1, .x_dtype = SCREE_DTYPE_FP32,
                          .y_dtype = SCREE_DTYPE_FP32};
  scree__ref_softmax(&a, (void *const[]){x, y});
  for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], 1.f);
  float c[5] = {2.5f, 2.5f, 2.5f, 2.5f, 2.5f}, yc[5];
  scree_softmax_args b = {.rows = 1, .cols = 5, .x_dtype = SCREE_DTYPE_FP32,
                          .y_dtype = SCREE_DTYPE_FP32, .scale = 40.f};
  scree__ref_softmax(&b, (void *const[]){c, yc});
  for (int i = 0; i < 5; i++) ck_assert_float_eq_tol(yc[i], 0.2f, 1e-7f);
}
END_TEST

/* In place (y == x) gives what a separate y gets. */
START_TEST(reference_in_place) {
  const long rows = 7, cols = 301;
  for (int d = 0; d < 3; d++) {
    const size_t n = (size_t)(rows * cols), e = scree_dtype_size(dtypes[d]);
    void *x = malloc(n * e), *y = malloc(n * e), *z = malloc(n * e);
    scree_test_fill(x, dtypes[d], n, 3.0);
    memcpy(z, x, n * e);
    scree_softmax_args a = {.rows = rows, .cols = cols, .x_dtype = dtypes[d],
                            .y_dtype = dtypes[d], .scale = 0.7f};
    scree__ref_softmax(&a, (void *const[]){x, y});
    scree__ref_softmax(&a, (void *const[]){z, z});
    ck_assert_int_eq(memcmp(y, z, n * e), 0);
    free(x), free(y), free(z);
  }
}
END_TEST

START_TEST(reference_zero_rows_writes_nothing) {
  float y = 42;
  scree_softmax_args a = {.rows = 0, .cols = 8};
  scree__ref_softmax(&a, (void *const[]){NULL, &y});
  ck_assert_float_eq(y, 42);
}
END_TEST

SCREE_TEST_MAIN(.name = "softmax_ref", .timeout = 120,
                .tests = SCREE_TESTS(reference_matches_formula,
                                     reference_scale_strides_and_mixed_dtypes,
                                     reference_degenerate_rows, reference_in_place,
                                     reference_zero_rows_writes_nothing))
