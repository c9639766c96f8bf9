/* test_rmsnorm_ref.c - the CPU reference against an obvious baseline:
 * the formula written out per row, and per sequence of a packed batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

SCREE__REFERENCE(rmsnorm);

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16,
                                      SCREE_DTYPE_BF16};

/* y = x * w / sqrt(sum(x^2)/n + eps), in long double, one row at a time. */
static void naive_row(const double *x, const double *w, long n, double eps,
                      long double *y) {
  long double s = 0;
  for (long i = 0; i < n; i++) s += (long double)x[i] * x[i];
  long double rms = sqrtl(s / n + eps);
  for (long i = 0; i < n; i++) y[i] = (long double)x[i] / rms * w[i];
}

static void check_shape(long rows, long cols, long xs, long ys, scree_dtype dt,
                        scree_dtype wt, scree_dtype yt) {
  const size_t ex = scree_dtype_size(dt), ew = scree_dtype_size(wt),
               ey = scree_dtype_size(yt);
  void *x = calloc((size_t)(rows * xs + 1), ex);
  void *w = calloc((size_t)cols, ew);
  void *y = calloc((size_t)(rows * ys + 1), ey);
  scree_test_fill(x, dt, (size_t)(rows * xs), 2.0);
  scree_test_fill(w, wt, (size_t)cols, 1.0);
  scree_rmsnorm_args a = {.rows = rows, .cols = cols, .x_stride = xs,
                          .y_stride = ys, .x_dtype = dt, .w_dtype = wt,
                          .y_dtype = yt, .eps = 1e-6f};
  scree__ref_rmsnorm(&a, (void *const[]){(void *)(x), (void *)(w), y});
  double *xr = malloc(sizeof(double) * (size_t)cols);
  double *wr = malloc(sizeof(double) * (size_t)cols);
  long double *yr = malloc(sizeof(long double) * (size_t)cols);
  for (long c = 0; c < cols; c++) wr[c] = scree__load_elem(w, wt, (size_t)c);
  /* The reference rounds once from double; the baseline from long double.
   * They may land one output ulp apart, never more. */
  double rtol, atol;
  scree__tolerance(yt, &rtol, &atol);
  for (long r = 0; r < rows; r++) {
    for (long c = 0; c < cols; c++) xr[c] = scree__load_elem(x, dt, (size_t)(r * xs + c));
    naive_row(xr, wr, cols, 1e-6, yr);
    for (long c = 0; c < cols; c++) {
      double got = scree__load_elem(y, yt, (size_t)(r * ys + c));
      double want = (double)yr[c];
      ck_assert_msg(fabs(got - want) <= atol + rtol * fabs(want),
                    "row %ld col %ld: ref %.9g baseline %.9g (%s)", r, c, got,
                    want, scree_dtype_name(yt));
    }
  }
  free(x), free(w), free(y), free(xr), free(wr), free(yr);
}

START_TEST(reference_matches_formula) {
  const long shapes[][2] = {{1, 1}, {3, 1}, {5, 7}, {4, 4095}, {2, 4096},
                            {1, 65536}, {17, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int d = 0; d < 3; d++)
      check_shape(shapes[i][0], shapes[i][1], shapes[i][1], shapes[i][1],
                  dtypes[d], dtypes[d], dtypes[d]);
}
END_TEST

START_TEST(reference_strides_and_mixed_dtypes) {
  check_shape(9, 100, 131, 100, SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16);
  check_shape(6, 33, 33, 40, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32);
  check_shape(3, 64, 64, 64, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16, SCREE_DTYPE_FP16);
}
END_TEST

/* A packed varlen batch (with an empty sequence and a length-1 one) gives
 * the same rows as normalizing each sequence on its own. */
START_TEST(packed_equals_per_sequence) {
  const long lens[] = {5, 0, 1, 37, 12};
  const int nseq = 5;
  long cu[6] = {0};
  for (int i = 0; i < nseq; i++) cu[i + 1] = cu[i] + lens[i];
  const long T = cu[nseq], D = 96;
  float *x = malloc(sizeof(float) * (size_t)(T * D)), *w = malloc(sizeof(float) * D);
  float *yp = malloc(sizeof(float) * (size_t)(T * D)), *ys = malloc(sizeof(float) * (size_t)(T * D));
  scree_test_fill(x, SCREE_DTYPE_FP32, (size_t)(T * D), 1.0);
  scree_test_fill(w, SCREE_DTYPE_FP32, (size_t)D, 1.0);
  scree_rmsnorm_args a = {.rows = T, .cols = D, .eps = 1e-5f};
  scree__ref_rmsnorm(&a, (void *const[]){(void *)(x), (void *)(w), yp});
  for (int i = 0; i < nseq; i++) {
    scree_rmsnorm_args s = a;
    s.rows = lens[i];
    scree__ref_rmsnorm(&s, (void *const[]){(void *)(x + cu[i] * D), (void *)(w), ys + cu[i] * D});
  }
  ck_assert_int_eq(memcmp(yp, ys, sizeof(float) * (size_t)(T * D)), 0);
  free(x), free(w), free(yp), free(ys);
}
END_TEST

START_TEST(reference_zero_rows_writes_nothing) {
  float y = 42;
  scree_rmsnorm_args a = {.rows = 0, .cols = 8, .eps = 1e-5f};
  scree__ref_rmsnorm(&a, (void *const[]){(void *)(NULL), (void *)(NULL), &y});
  ck_assert_float_eq(y, 42);
}
END_TEST

SCREE_TEST_MAIN(.name = "rmsnorm_ref", .timeout = 120,
                .tests = SCREE_TESTS(reference_matches_formula, reference_strides_and_mixed_dtypes,
                                     packed_equals_per_sequence,
                                     reference_zero_rows_writes_nothing))
