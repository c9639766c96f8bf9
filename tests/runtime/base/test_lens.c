/* test_lens.c - the generated batches of the packed-sequence ops
 * (scree__tune_lens and scree__check_lens in src/runtime/base/util.c): the
 * tuning batch's sum, first length, range and determinism, and the check
 * batch's lengths, caps and budget. */
#include <string.h>

#include "test_util.h"

/* The tuning batch sums to the total, starts at the longest length, and
 * keeps every other length but the trimmed last in [longest / 8, longest];
 * the same seed gives the same batch, another seed another (the state is
 * seed | 1, so 42 and 43 are one seed). */
START_TEST(tune_lens_shape) {
  enum { CAP = 4096 };
  static int64_t a[CAP], b[CAP];
  const int64_t total = 65536, longest = 2048;
  const int n = scree__tune_lens(total, longest, 42, a, CAP);
  ck_assert_int_gt(n, 32);
  ck_assert_int_eq(a[0], longest);
  int64_t sum = 0;
  for (int i = 0; i < n; i++) {
    sum += a[i];
    ck_assert_int_le(a[i], longest);
    ck_assert_int_ge(a[i], i + 1 < n ? longest / 8 : 1);
  }
  ck_assert_int_eq(sum, total);
  ck_assert_int_eq(scree__tune_lens(total, longest, 42, b, CAP), n);
  ck_assert_int_eq(memcmp(a, b, (size_t)n * sizeof *a), 0);
  const int m = scree__tune_lens(total, longest, 44, b, CAP);
  ck_assert(m != n || memcmp(a, b, (size_t)n * sizeof *a) != 0);
}
END_TEST

/* Out-of-range counts: a longest below 1 counts as 1, a total below the
 * longest as the longest; cap bounds the count. */
START_TEST(tune_lens_edges) {
  int64_t l[8];
  ck_assert_int_eq(scree__tune_lens(3, 0, 1, l, 8), 3);
  ck_assert(l[0] == 1 && l[1] == 1 && l[2] == 1);
  ck_assert_int_eq(scree__tune_lens(10, 100, 1, l, 8), 1);
  ck_assert_int_eq(l[0], 100);
  ck_assert_int_eq(scree__tune_lens(1 << 20, 64, 1, l, 8), 8);
  ck_assert_int_eq(l[0], 64);
}
END_TEST

static void expect_lens(int64_t cols, int64_t longest, const int64_t *want, int n) {
  int64_t l[SCREE__CHECK_LENS_MAX];
  ck_assert_int_eq(scree__check_lens(cols, longest, l), n);
  for (int i = 0; i < n; i++)
    ck_assert_msg(l[i] == want[i], "cols=%lld longest=%lld: length %d is %lld, want %lld",
                  (long long)cols, (long long)longest, i, (long long)l[i], (long long)want[i]);
}

/* The check batch: all lengths within 2^24 / 4096 = 4096 tokens, the long
 * one at 1000 when the longest is not given; each capped at a given
 * longest; at 65536 columns, the 256-token budget keeps only what fits,
 * the long sequence at half of it. */
START_TEST(check_lens) {
  static const int64_t all[] = {0,  1,  1000, 17, 2,   65,  129, 257, 0,   3,   16,
                                15, 33, 64,   63, 128, 127, 31,  32,  255, 256, 7};
  expect_lens(4096, 0, all, 22);
  expect_lens(1, 5000, all, 22);
  static const int64_t capped[] = {0,  1,  100, 17, 2,   65,  100, 100, 0,   3,   16,
                                   15, 33, 64,  63, 100, 100, 31,  32,  100, 100, 7};
  expect_lens(4096, 100, capped, 22);
  static const int64_t wide[] = {0, 1, 128, 17, 2, 65, 0, 3, 16, 15, 7};
  expect_lens(65536, 0, wide, 11);
}
END_TEST

SCREE_TEST_MAIN(.name = "lens", .tests = SCREE_TESTS(tune_lens_shape, tune_lens_edges,
                                                     check_lens))
