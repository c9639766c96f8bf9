/* test_add_rmsnorm_args.c - bad arguments get the right status and a
 * message naming the argument, and nothing is launched (the context here
 * has no device: reaching a launch would report SCREE_ERROR_NO_DEVICE
 * instead). */
#include <string.h>

#include "test_util.h"

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

/* 4 rows of 64 fp16: x, residual, h and y span 512 bytes, w 128. */
static scree_add_rmsnorm_args good(void) {
  scree_add_rmsnorm_args a = {.x = 0x10000, .residual = 0x20000, .w = 0x30000, .h = 0x40000,
                              .y = 0x50000, .rows = 4, .cols = 64,
                              .x_dtype = SCREE_DTYPE_FP16, .w_dtype = SCREE_DTYPE_FP16,
                              .y_dtype = SCREE_DTYPE_FP16, .eps = 1e-6f};
  return a;
}

#define EXPECT(args_expr, status, needle)                                                    \
  do {                                                                                       \
    scree_add_rmsnorm_args a_ = good();                                                      \
    args_expr;                                                                               \
    scree_status st_ = scree_add_rmsnorm(ctx, &a_, NULL);                                    \
    ck_assert_msg(st_ == (status), "got %s, want %s (%s)", scree_status_name(st_),           \
                  scree_status_name(status), scree_last_error(ctx));                         \
    ck_assert_msg(strstr(scree_last_error(ctx), needle), "message \"%s\" lacks \"%s\"",      \
                  scree_last_error(ctx), needle);                                            \
  } while (0)

START_TEST(null_args) {
  ck_assert_int_eq(scree_add_rmsnorm(NULL, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_add_rmsnorm(ctx, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(scree_last_error(ctx), "args"));
}
END_TEST

START_TEST(bad_values) {
  EXPECT(a_.x = 0, SCREE_ERROR_INVALID_ARGUMENT, "x is NULL");
  EXPECT(a_.residual = 0, SCREE_ERROR_INVALID_ARGUMENT, "residual is NULL");
  EXPECT(a_.w = 0, SCREE_ERROR_INVALID_ARGUMENT, "w is NULL");
  EXPECT(a_.h = 0, SCREE_ERROR_INVALID_ARGUMENT, "h is NULL");
  EXPECT(a_.y = 0, SCREE_ERROR_INVALID_ARGUMENT, "y is NULL");
  EXPECT(a_.x = 0x10001, SCREE_ERROR_MISALIGNED, "x=0x10001");
  EXPECT(a_.residual = 0x20003, SCREE_ERROR_MISALIGNED, "residual=0x20003");
  EXPECT(a_.w_dtype = SCREE_DTYPE_FP32; a_.w = 0x30002, SCREE_ERROR_MISALIGNED, "w=0x30002");
  EXPECT(a_.h = 0x40001, SCREE_ERROR_MISALIGNED, "h=0x40001");
  EXPECT(a_.y_dtype = SCREE_DTYPE_FP32; a_.y = 0x50006, SCREE_ERROR_MISALIGNED, "y=0x50006");
  EXPECT(a_.x_dtype = (scree_dtype)7, SCREE_ERROR_UNSUPPORTED, "x_dtype=7");
  EXPECT(a_.w_dtype = (scree_dtype)3, SCREE_ERROR_UNSUPPORTED, "w_dtype=3");
  EXPECT(a_.y_dtype = (scree_dtype)-1, SCREE_ERROR_UNSUPPORTED, "y_dtype=-1");
  EXPECT(a_.cols = 0, SCREE_ERROR_INVALID_ARGUMENT, "cols=0");
  EXPECT(a_.cols = 65537, SCREE_ERROR_UNSUPPORTED, "cols=65537");
  EXPECT(a_.rows = -1, SCREE_ERROR_INVALID_ARGUMENT, "rows=-1");
  EXPECT(a_.x_stride = 10, SCREE_ERROR_INVALID_ARGUMENT, "x_stride=10");
  EXPECT(a_.residual_stride = 63, SCREE_ERROR_INVALID_ARGUMENT, "residual_stride=63");
  EXPECT(a_.h_stride = -2, SCREE_ERROR_INVALID_ARGUMENT, "h_stride=-2");
  EXPECT(a_.y_stride = 1, SCREE_ERROR_INVALID_ARGUMENT, "y_stride=1");
  EXPECT(a_.eps = -1.f, SCREE_ERROR_INVALID_ARGUMENT, "eps=");
  EXPECT(a_.eps = __builtin_inff(), SCREE_ERROR_INVALID_ARGUMENT, "eps=");
  EXPECT(a_.eps = __builtin_nanf(""), SCREE_ERROR_INVALID_ARGUMENT, "eps=");
  EXPECT(a_.rows = (int64_t)1 << 62, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
  EXPECT(a_.residual_stride = (int64_t)1 << 62, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
}
END_TEST

START_TEST(overlaps) {
  /* h on x or residual only exactly, with the same stride. */
  EXPECT(a_.h = a_.x + 64, SCREE_ERROR_INVALID_ARGUMENT, "h=0x10040 partially overlaps x");
  EXPECT(a_.h = a_.residual + 2, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps residual");
  EXPECT(a_.h = a_.x; a_.h_stride = 72, SCREE_ERROR_INVALID_ARGUMENT, "h == x (in place)");
  EXPECT(a_.h = a_.residual; a_.residual_stride = 72, SCREE_ERROR_INVALID_ARGUMENT,
         "h == residual (in place)");
  /* h on x while residual overlaps x: h would overwrite residual. */
  EXPECT(a_.h = a_.x; a_.residual = a_.x + 128, SCREE_ERROR_INVALID_ARGUMENT,
         "partially overlaps residual");
  EXPECT(a_.h = a_.w - 256, SCREE_ERROR_INVALID_ARGUMENT, "h=0x2ff00 overlaps w=0x30000");
  /* y apart from everything. */
  EXPECT(a_.y = a_.x, SCREE_ERROR_INVALID_ARGUMENT, "y=0x10000 overlaps x");
  EXPECT(a_.y = a_.residual + 510, SCREE_ERROR_INVALID_ARGUMENT, "overlaps residual");
  EXPECT(a_.y = a_.w + 64, SCREE_ERROR_INVALID_ARGUMENT, "overlaps w");
  EXPECT(a_.y = a_.h, SCREE_ERROR_INVALID_ARGUMENT, "y=0x40000 overlaps h");
  EXPECT(a_.y_dtype = SCREE_DTYPE_FP32; a_.y = a_.h - 1020, SCREE_ERROR_INVALID_ARGUMENT,
         "overlaps h");
}
END_TEST

START_TEST(valid_args_reach_the_launch) {
  EXPECT((void)0, SCREE_ERROR_NO_DEVICE, "no device");
  /* In place on x or on residual, same stride. */
  EXPECT(a_.h = a_.x, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT(a_.h = a_.residual, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT(a_.x_stride = a_.h_stride = 80; a_.h = a_.x, SCREE_ERROR_NO_DEVICE, "no device");
  /* x and residual are only read: they may overlap, even be one buffer. */
  EXPECT(a_.residual = a_.x + 64, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT(a_.residual = a_.x; a_.h = a_.x, SCREE_ERROR_NO_DEVICE, "no device");
  /* y right after h. */
  EXPECT(a_.y = a_.h + 512, SCREE_ERROR_NO_DEVICE, "no device");
}
END_TEST

START_TEST(zero_rows_is_a_noop) {
  scree_add_rmsnorm_args a = good();
  a.rows = 0;
  a.x = a.residual = a.w = a.h = a.y = 0; /* an empty batch may come with no buffers */
  ck_assert_int_eq(scree_add_rmsnorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

START_TEST(error_clears_on_success) {
  scree_add_rmsnorm_args a = good();
  a.cols = 0;
  ck_assert_int_ne(scree_add_rmsnorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_ne(scree_last_error(ctx), "");
  a.cols = 8;
  a.rows = 0;
  ck_assert_int_eq(scree_add_rmsnorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

int main(void) {
  Suite *s = suite_create("add_rmsnorm_args");
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
