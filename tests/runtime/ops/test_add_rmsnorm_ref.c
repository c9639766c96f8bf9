/* test_add_rmsnorm_ref.c - the CPU reference against an obvious baseline:
 * h as x + residual rounded through the storage format, then RMSNorm of h
 * in long double, one row at a time; and the in-place forms (h on x, h on
 * residual) against the out-of-place one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

SCREE__REFERENCE(add_rmsnorm);

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};

/* a + b as stored in dtype (one rounding of the exact sum). */
static double round_sum(double a, double b, scree_dtype d) {
  const float s = (float)(a + b);
  switch (d) {
    case SCREE_DTYPE_FP16: return scree__half_to_float(scree__float_to_half(s));
    case SCREE_DTYPE_BF16: return scree__bf16_to_float(scree__float_to_bf16(s));
    default: return s;
  }
}

typedef struct acase {
  long rows, cols, xs, rs, hs, ys;
  scree_dtype x, w, y;
} acase;

static void check_case(const acase *k) {
  const size_t ex = scree_dtype_size(k->x), ew = scree_dtype_size(k->w),
               ey = scree_dtype_size(k->y);
  void *x = calloc((size_t)(k->rows * k->xs + 1), ex);
  void *res = calloc((size_t)(k->rows * k->rs + 1), ex);
  void *w = calloc((size_t)k->cols, ew);
  void *h = calloc((size_t)(k->rows * k->hs + 1), ex);
  void *y = calloc((size_t)(k->rows * k->ys + 1), ey);
  scree_test_fill(x, k->x, (size_t)(k->rows * k->xs), 2.0);
  scree_test_fill(res, k->x, (size_t)(k->rows * k->rs), 0.5);
  scree_test_fill(w, k->w, (size_t)k->cols, 1.0);
  scree_add_rmsnorm_args a = {.rows = k->rows, .cols = k->cols, .x_stride = k->xs,
                              .residual_stride = k->rs, .h_stride = k->hs, .y_stride = k->ys,
                              .x_dtype = k->x, .w_dtype = k->w, .y_dtype = k->y, .eps = 1e-6f};
  scree__ref_add_rmsnorm(&a, (void *const[]){x, res, w, h, y});
  long double *hr = malloc(sizeof(long double) * (size_t)k->cols);
  double rtol, atol;
  scree__tolerance(k->y, &rtol, &atol);
  for (long r = 0; r < k->rows; r++) {
    long double ss = 0;
    for (long c = 0; c < k->cols; c++) {
      hr[c] = round_sum(scree__load_elem(x, k->x, (size_t)(r * k->xs + c)),
                        scree__load_elem(res, k->x, (size_t)(r * k->rs + c)), k->x);
      ck_assert_msg(scree__load_elem(h, k->x, (size_t)(r * k->hs + c)) == (double)hr[c],
                    "row %ld col %ld: h %.9g want %.9Lg", r, c,
                    scree__load_elem(h, k->x, (size_t)(r * k->hs + c)), hr[c]);
      ss += hr[c] * hr[c];
    }
    const long double rms = sqrtl(ss / k->cols + 1e-6L);
    for (long c = 0; c < k->cols; c++) {
      const double want = (double)(hr[c] / rms * scree__load_elem(w, k->w, (size_t)c));
      const double got = scree__load_elem(y, k->y, (size_t)(r * k->ys + c));
      ck_assert_msg(fabs(got - want) <= atol + rtol * fabs(want),
                    "row %ld col %ld: ref %.9g baseline %.9g (%s)", r, c, got, want,
                    scree_dtype_name(k->y));
    }
  }
  free(x), free(res), free(w), free(h), free(y), free(hr);
}

START_TEST(reference_matches_formula) {
  const long shapes[][2] = {{1, 1}, {3, 1}, {5, 7}, {4, 4095}, {2, 4096}, {1, 65536}, {17, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int d = 0; d < 3; d++) {
      const long c = shapes[i][1];
      const acase k = {shapes[i][0], c, c, c, c, c, dtypes[d], dtypes[d], dtypes[d]};
      check_case(&k);
    }
}
END_TEST

START_TEST(reference_strides_and_mixed_dtypes) {
  const acase ks[] = {
      {9, 100, 131, 100, 104, 120, SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16},
      {6, 33, 33, 40, 35, 33, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32},
      {3, 64, 64, 64, 64, 70, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16, SCREE_DTYPE_FP16},
  };
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_case(&ks[i]);
}
END_TEST

/* h written over x, or over residual (same stride), gives the h and y of
 * the out-of-place call. */
START_TEST(in_place_equals_out_of_place) {
  const long R = 7, C = 300, S = 304;
  for (int d = 0; d < 3; d++) {
    const scree_dtype dt = dtypes[d];
    const size_t e = scree_dtype_size(dt), n = (size_t)(R * S);
    void *x = malloc(n * e), *res = malloc(n * e), *w = malloc((size_t)C * e);
    void *h = malloc(n * e), *y = calloc(n, 4), *y2 = calloc(n, 4), *io = malloc(n * e);
    scree_test_fill(x, dt, n, 1.0);
    scree_test_fill(res, dt, n, 1.0);
    scree_test_fill(w, dt, (size_t)C, 1.0);
    memcpy(h, x, n * e); /* the padding between rows, as in place keeps it */
    scree_add_rmsnorm_args a = {.rows = R, .cols = C, .x_stride = S, .residual_stride = S,
                                .h_stride = S, .y_stride = S, .x_dtype = dt, .w_dtype = dt,
                                .y_dtype = SCREE_DTYPE_FP32, .eps = 1e-6f};
    scree__ref_add_rmsnorm(&a, (void *const[]){x, res, w, h, y});
    /* h on x */
    memcpy(io, x, n * e);
    scree__ref_add_rmsnorm(&a, (void *const[]){io, res, w, io, y2});
    ck_assert_int_eq(memcmp(io, h, n * e), 0);
    ck_assert_int_eq(memcmp(y, y2, n * 4), 0);
    /* h on residual: the padding is residual's there */
    memcpy(io, res, n * e);
    scree__ref_add_rmsnorm(&a, (void *const[]){x, io, w, io, y2});
    for (long r = 0; r < R; r++)
      ck_assert_int_eq(memcmp((char *)io + (size_t)(r * S) * e, (char *)h + (size_t)(r * S) * e,
                              (size_t)C * e),
                       0);
    ck_assert_int_eq(memcmp(y, y2, n * 4), 0);
    free(x), free(res), free(w), free(h), free(y), free(y2), free(io);
  }
}
END_TEST

START_TEST(reference_zero_rows_writes_nothing) {
  float h = 41, y = 42;
  scree_add_rmsnorm_args a = {.rows = 0, .cols = 8, .eps = 1e-6f};
  scree__ref_add_rmsnorm(&a, (void *const[]){NULL, NULL, NULL, &h, &y});
  ck_assert_float_eq(h, 41);
  ck_assert_float_eq(y, 42);
}
END_TEST

SCREE_TEST_MAIN(.name = "add_rmsnorm_ref", .timeout = 120,
                .tests = (const TTest *[]){
                    reference_matches_formula, reference_strides_and_mixed_dtypes,
                    in_place_equals_out_of_place, reference_zero_rows_writes_nothing, NULL})
