/* test_softmax_args.c - bad softmax arguments get the right status and a
 * message naming the argument, and nothing is launched (the context here
 * has no device: reaching a launch would report SCREE_ERROR_NO_DEVICE
 * instead). */
#include <string.h>

#include "test_util.h"

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

static scree_softmax_args good(void) {
  scree_softmax_args a = {.x = 0x100000, .y = 0x300000, .rows = 4, .cols = 64,
                          .x_dtype = SCREE_DTYPE_FP16, .y_dtype = SCREE_DTYPE_FP16};
  return a;
}

#define EXPECT(args_expr, status, needle)                                                   \
  do {                                                                                      \
    scree_softmax_args a_ = good();                                                         \
    args_expr;                                                                              \
    scree_status st_ = scree_softmax(ctx, &a_, NULL);                                       \
    ck_assert_msg(st_ == (status), "line %d: got %s, want %s (%s)", __LINE__,               \
                  scree_status_name(st_), scree_status_name(status), scree_last_error(ctx)); \
    ck_assert_msg(strstr(scree_last_error(ctx), needle),                                    \
                  "line %d: message \"%s\" lacks \"%s\"", __LINE__, scree_last_error(ctx),  \
                  needle);                                                                  \
  } while (0)

/* Passes every check: the offline context then refuses to launch. */
#define PASSES(args_expr) EXPECT(args_expr, SCREE_ERROR_NO_DEVICE, "no device")

START_TEST(null_args) {
  ck_assert_int_eq(scree_softmax(NULL, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_softmax(ctx, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(scree_last_error(ctx), "args"));
}
END_TEST

START_TEST(bad_values) {
  EXPECT(a_.x = 0, SCREE_ERROR_INVALID_ARGUMENT, "x is NULL");
  EXPECT(a_.y = 0, SCREE_ERROR_INVALID_ARGUMENT, "y is NULL");
  EXPECT(a_.x = 0x100001, SCREE_ERROR_MISALIGNED, "x=0x100001");
  EXPECT(a_.y_dtype = SCREE_DTYPE_FP32; a_.y = 0x300002, SCREE_ERROR_MISALIGNED, "y=0x300002");
  EXPECT(a_.x_dtype = (scree_dtype)7, SCREE_ERROR_UNSUPPORTED, "x_dtype=7");
  EXPECT(a_.y_dtype = (scree_dtype)-1, SCREE_ERROR_UNSUPPORTED, "y_dtype=-1");
  EXPECT(a_.cols = 0, SCREE_ERROR_INVALID_ARGUMENT, "cols=0");
  EXPECT(a_.cols = -5, SCREE_ERROR_INVALID_ARGUMENT, "cols=-5");
  EXPECT(a_.cols = 262145, SCREE_ERROR_UNSUPPORTED, "cols=262145");
  EXPECT(a_.rows = -1, SCREE_ERROR_INVALID_ARGUMENT, "rows=-1");
  EXPECT(a_.x_stride = 10, SCREE_ERROR_INVALID_ARGUMENT, "x_stride=10");
  EXPECT(a_.y_stride = 63, SCREE_ERROR_INVALID_ARGUMENT, "y_stride=63");
  EXPECT(a_.x_stride = -64, SCREE_ERROR_INVALID_ARGUMENT, "x_stride=-64");
  EXPECT(a_.scale = __builtin_inff(), SCREE_ERROR_INVALID_ARGUMENT, "scale=");
  EXPECT(a_.scale = -__builtin_inff(), SCREE_ERROR_INVALID_ARGUMENT, "scale=");
  EXPECT(a_.scale = __builtin_nanf(""), SCREE_ERROR_INVALID_ARGUMENT, "scale=");
  EXPECT(a_.scale = 3e38f, SCREE_ERROR_INVALID_ARGUMENT, "scale=");
  EXPECT(a_.rows = (int64_t)1 << 62, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
  EXPECT(a_.x_stride = (int64_t)1 << 62, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
}
END_TEST

START_TEST(overlaps) {
  /* y starts inside x, or x inside y: partial overlap. */
  EXPECT(a_.y = a_.x + 64, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps x");
  EXPECT(a_.y = a_.x - 2, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps x");
  /* In place with a different element size, or a different stride. */
  EXPECT(a_.y = a_.x; a_.y_dtype = SCREE_DTYPE_FP32, SCREE_ERROR_INVALID_ARGUMENT, "in place");
  EXPECT(a_.y = a_.x; a_.y_stride = 128, SCREE_ERROR_INVALID_ARGUMENT, "in place");
}
END_TEST

START_TEST(valid_args_reach_the_launch) {
  PASSES((void)0);
  /* Exactly in place, also across dtypes of one size. */
  PASSES(a_.y = a_.x);
  PASSES(a_.y = a_.x; a_.y_dtype = SCREE_DTYPE_BF16);
  PASSES(a_.y = a_.x; a_.x_stride = a_.y_stride = 100);
  /* y right after x's last row. */
  PASSES(a_.y = a_.x + 4 * 64 * 2);
  PASSES(a_.cols = 262144);
  PASSES(a_.cols = 1);
  PASSES(a_.scale = -0.5f);
  PASSES(a_.x_dtype = SCREE_DTYPE_FP32; a_.y_dtype = SCREE_DTYPE_BF16);
  /* Misaligned for vectors, aligned to the element: allowed (narrower
   * vectors). */
  PASSES(a_.x = 0x100002; a_.x_stride = 67);
}
END_TEST

START_TEST(zero_rows_is_a_noop) {
  scree_softmax_args a = good();
  a.rows = 0;
  a.x = a.y = 0; /* an empty batch may come with no buffers */
  ck_assert_int_eq(scree_softmax(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

START_TEST(error_clears_on_success) {
  scree_softmax_args a = good();
  a.cols = 0;
  ck_assert_int_ne(scree_softmax(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_ne(scree_last_error(ctx), "");
  a.cols = 8;
  a.rows = 0;
  ck_assert_int_eq(scree_softmax(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

int main(void) {
  Suite *s = suite_create("softmax_args");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, null_args);
  tcase_add_test(tc, bad_values);
  tcase_add_test(tc, overlaps);
  tcase_add_test(tc, valid_args_reach_the_launch);
  tcase_add_test(tc, zero_rows_is_a_noop);
  tcase_add_test(tc, error_clears_on_success);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
