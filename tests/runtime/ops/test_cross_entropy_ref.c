/* test_cross_entropy_ref.c - the CPU reference for cross-entropy against an
 * obvious baseline written differently: per row, in long double, without
 * the maximum subtracted, lse = log(sum(exp(x))), loss = lse - x[target];
 * 0 for ignore_index, NaN for a target outside [0, vocab). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

SCREE__REFERENCE(cross_entropy);

/* ck_assert_msg records a mark point on every pass: too slow for a check
 * per element. CHECK costs nothing unless it fails. */
#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};

/* Both are rounded to fp32 once, from double and from long double: at most
 * one fp32 ulp apart, plus 1e-12 absolute for a loss that cancels to ~0
 * (lse - x[target] carries double's error of lse, ~1e-15 here). */
static int close_f32(double got, long double want) {
  return fabsl((long double)got - want) <= 1.2e-7L * fabsl(want) + 1e-12L;
}

/* Logits normal(0, 3); targets: ignored, first and last class, out of range
 * (both sides), random. */
static void check_shape(long rows, long vocab, long ls, scree_dtype dt, int64_t ignore,
                        int with_lse) {
  const size_t e = scree_dtype_size(dt);
  void *x = calloc((size_t)(rows * ls + 1), e);
  int64_t *t = malloc(sizeof *t * (size_t)rows);
  float *loss = malloc(sizeof(float) * (size_t)rows), *lse = malloc(sizeof(float) * (size_t)rows);
  scree_test_fill(x, dt, (size_t)(rows * ls), 3.0);
  for (long r = 0; r < rows; r++) {
    switch (r % 7) {
      case 0: t[r] = ignore; break;
      case 1: t[r] = vocab - 1; break;
      case 2: t[r] = 0; break;
      case 3: t[r] = vocab; break;
      case 4: t[r] = -1 == ignore ? -7 : -1; break;
      default: t[r] = (int64_t)(scree_test_rand() % (uint64_t)vocab); break;
    }
  }
  memset(lse, 0xff, sizeof(float) * (size_t)rows);
  scree_cross_entropy_args a = {.rows = rows, .vocab = vocab, .logits_stride = ls,
                                .ignore_index = ignore, .dtype = dt};
  scree__ref_cross_entropy(&a, (void *const[]){x, t, loss, with_lse ? lse : NULL});
  for (long r = 0; r < rows; r++) {
    long double sum = 0;
    for (long c = 0; c < vocab; c++) sum += expl(scree__load_elem(x, dt, (size_t)(r * ls + c)));
    const long double l = logl(sum);
    if (with_lse)
      CHECK(close_f32(lse[r], l), "vocab=%ld %s row %ld: lse %.9g, baseline %.12Lg", vocab,
            scree_dtype_name(dt), r, (double)lse[r], l);
    else
      CHECK(isnan(lse[r]), "row %ld: lse written though NULL", r);
    if (t[r] == ignore)
      CHECK(loss[r] == 0.f, "row %ld: ignored target, loss %g", r, (double)loss[r]);
    else if (t[r] < 0 || t[r] >= vocab)
      CHECK(isnan(loss[r]), "row %ld: target %lld out of range, loss %g", r, (long long)t[r],
            (double)loss[r]);
    else {
      const long double want = l - scree__load_elem(x, dt, (size_t)(r * ls + t[r]));
      CHECK(close_f32(loss[r], want),
            "vocab=%ld %s row %ld target %lld: loss %.9g, baseline %.12Lg", vocab,
            scree_dtype_name(dt), r, (long long)t[r], (double)loss[r], want);
    }
  }
  free(x), free(t), free(loss), free(lse);
}

START_TEST(reference_matches_formula) {
  const long shapes[][3] = {{7, 1, 1},      {9, 7, 7},   {14, 8, 8},         {10, 9, 16},
                            {7, 4095, 4095}, {8, 32000, 32005}, {3, 128256, 128256}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int d = 0; d < 3; d++)
      check_shape(shapes[i][0], shapes[i][1], shapes[i][2], dtypes[d], -100, (int)(i % 2));
}
END_TEST

/* The zeroed struct ignores class 0; any int64 may be the ignore value. */
START_TEST(reference_ignore_values) {
  check_shape(21, 50, 50, SCREE_DTYPE_FP32, 0, 1);
  check_shape(21, 50, 50, SCREE_DTYPE_BF16, 49, 1);
  check_shape(21, 50, 50, SCREE_DTYPE_FP16, -1, 0);
  check_shape(21, 50, 50, SCREE_DTYPE_FP32, INT64_MIN, 1);
}
END_TEST

/* A row whose target holds nearly all the mass: loss ~ 0, not negative
 * beyond rounding; a vocabulary of one: lse = x, loss = 0. */
START_TEST(reference_degenerate_rows) {
  float x[4] = {0.f, 40.f, -10.f, 1.f};
  int64_t t[1] = {1};
  float loss, lse;
  scree_cross_entropy_args a = {.rows = 1, .vocab = 4, .ignore_index = -100,
                                .dtype = SCREE_DTYPE_FP32};
  scree__ref_cross_entropy(&a, (void *const[]){x, t, &loss, &lse});
  ck_assert(loss >= 0.f && loss < 1e-16f);
  ck_assert_float_eq_tol(lse, 40.f, 1e-5f);
  float one[3] = {2.5f, -7.f, 0.f}, l3[3], e3[3];
  int64_t t3[3] = {0, 0, 0};
  scree_cross_entropy_args b = {.rows = 3, .vocab = 1, .ignore_index = -100,
                                .dtype = SCREE_DTYPE_FP32};
  scree__ref_cross_entropy(&b, (void *const[]){one, t3, l3, e3});
  for (int i = 0; i < 3; i++) {
    ck_assert_float_eq(l3[i], 0.f);
    ck_assert_float_eq(e3[i], one[i]);
  }
}
END_TEST

START_TEST(reference_zero_rows_writes_nothing) {
  float loss = 42, lse = 43;
  scree_cross_entropy_args a = {.rows = 0, .vocab = 8};
  scree__ref_cross_entropy(&a, (void *const[]){NULL, NULL, &loss, &lse});
  ck_assert_float_eq(loss, 42);
  ck_assert_float_eq(lse, 43);
}
END_TEST

SCREE_TEST_MAIN(.name = "cross_entropy_ref", .timeout = 120,
                .tests = SCREE_TESTS(reference_matches_formula, reference_ignore_values,
                                     reference_degenerate_rows, reference_zero_rows_writes_nothing))
