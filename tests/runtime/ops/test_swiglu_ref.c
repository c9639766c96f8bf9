/* test_swiglu_ref.c - the CPU reference against an obvious baseline: the
 * formula written out per row, in long double, on gate and up given as two
 * tensors or as the halves of one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

SCREE__REFERENCE(swiglu);

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};

/* silu(g) * u = g * u / (1 + e^-g), long double. */
static long double naive(long double g, long double u) { return g * u / (1 + expl(-g)); }

/* One call of the reference against the baseline. two: gate and up in two
 * tensors (strides gs, us), else one [rows, 2 * cols] tensor of stride gs. */
static void check_shape(long rows, long cols, int two, long gs, long us, long ys, scree_dtype dt,
                        scree_dtype yt, double gscale) {
  const size_t ex = scree_dtype_size(dt), ey = scree_dtype_size(yt);
  const long egs = gs ? gs : (two ? cols : 2 * cols), eus = two ? (us ? us : cols) : egs;
  const long eys = ys ? ys : cols;
  void *g = calloc((size_t)(rows * egs + 1), ex), *u = calloc((size_t)(rows * eus + 1), ex);
  void *y = malloc((size_t)(rows * eys + 1) * ey);
  memset(y, 0x5a, (size_t)(rows * eys + 1) * ey);
  scree_test_fill(g, dt, (size_t)(rows * egs), gscale);
  scree_test_fill(u, dt, (size_t)(rows * eus), 1.0);
  scree_swiglu_args a = {.gate = 1, .up = two ? 1 : 0, .y = 1, .rows = rows, .cols = cols,
                         .gate_stride = gs, .up_stride = two ? us : 0, .y_stride = ys,
                         .dtype = dt, .y_dtype = yt};
  scree__ref_swiglu(&a, two ? (void *const[]){g, u, y} : (void *const[]){g, y});
  double rtol, atol;
  scree__tolerance(yt, &rtol, &atol);
  for (long r = 0; r < rows; r++)
    for (long c = 0; c < eys; c++) {
      const size_t iy = (size_t)(r * eys + c);
      if (c >= cols) { /* padding between rows is left alone */
        ck_assert_msg(!memcmp((char *)y + iy * ey, (char *)y + (size_t)(rows * eys) * ey, ey),
                      "row %ld col %ld: padding written", r, c);
        continue;
      }
      const long double gv = scree__load_elem(g, dt, (size_t)(r * egs + c));
      const long double uv =
          two ? scree__load_elem(u, dt, (size_t)(r * eus + c))
              : scree__load_elem(g, dt, (size_t)(r * egs + cols + c));
      const double want = (double)naive(gv, uv), got = scree__load_elem(y, yt, iy);
      ck_assert_msg(fabs(got - want) <= atol + rtol * fabs(want),
                    "rows=%ld cols=%ld two=%d row %ld col %ld: ref %.9g baseline %.9g (%s)", rows,
                    cols, two, r, c, got, want, scree_dtype_name(yt));
    }
  free(g), free(u), free(y);
}

START_TEST(reference_matches_formula) {
  const long shapes[][2] = {{1, 1}, {3, 1}, {5, 7}, {4, 4095}, {2, 4096}, {1, 14336}, {17, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int d = 0; d < 3; d++)
      for (int two = 0; two < 2; two++)
        check_shape(shapes[i][0], shapes[i][1], two, 0, 0, 0, dtypes[d], dtypes[d], 1.0);
}
END_TEST

START_TEST(reference_strides_and_mixed_dtypes) {
  check_shape(9, 100, 1, 131, 100, 0, SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, 1.0);
  check_shape(6, 33, 0, 80, 0, 40, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32, 1.0);
  check_shape(3, 64, 1, 64, 72, 70, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16, 1.0);
  check_shape(4, 5, 0, 0, 0, 9, SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, 1.0);
}
END_TEST

/* Gates of a few hundred: exp(-g) overflows float; the reference still
 * gives the limits (g for large g, -0 for very negative g), never NaN. */
START_TEST(reference_large_gates) {
  check_shape(4, 257, 0, 0, 0, 0, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, 300.0);
  check_shape(4, 257, 1, 0, 0, 0, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, 300.0);
  float g[4] = {-1000.f, -100.f, 100.f, 1000.f}, u[4] = {1, 1, 1, 1}, y[4];
  scree_swiglu_args a = {.gate = 1, .up = 1, .y = 1, .rows = 1, .cols = 4,
                         .dtype = SCREE_DTYPE_FP32, .y_dtype = SCREE_DTYPE_FP32};
  scree__ref_swiglu(&a, (void *const[]){g, u, y});
  ck_assert(y[0] == 0.f && !isnan(y[0]));
  ck_assert(fabsf(y[1]) < 1e-40f);
  ck_assert_float_eq(y[2], 100.f);
  ck_assert_float_eq(y[3], 1000.f);
}
END_TEST

START_TEST(reference_zero_rows_writes_nothing) {
  float y = 42;
  scree_swiglu_args a = {.up = 1, .rows = 0, .cols = 8};
  scree__ref_swiglu(&a, (void *const[]){NULL, NULL, &y});
  ck_assert_float_eq(y, 42);
}
END_TEST

SCREE_TEST_MAIN(.name = "swiglu_ref", .timeout = 120,
                .tests = SCREE_TESTS(reference_matches_formula, reference_strides_and_mixed_dtypes,
                                     reference_large_gates, reference_zero_rows_writes_nothing))
