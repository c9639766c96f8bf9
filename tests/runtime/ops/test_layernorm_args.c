/* test_layernorm_args.c - bad arguments get the right status and a message
 * naming the argument, and nothing is launched (the context here has no
 * device: reaching a launch would report SCREE_ERROR_NO_DEVICE instead). */
#include <string.h>

#include "test_util.h"

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

/* 4 rows of 64 fp16: x and y span 512 bytes, w and b 128. */
static scree_layernorm_args good(void) {
  scree_layernorm_args a = {.x = 0x10000, .w = 0x20000, .b = 0x28000, .y = 0x30000,
                            .mean = 0x40000, .rstd = 0x50000, .rows = 4, .cols = 64,
                            .x_dtype = SCREE_DTYPE_FP16, .w_dtype = SCREE_DTYPE_FP16,
                            .y_dtype = SCREE_DTYPE_FP16, .eps = 1e-5f};
  return a;
}

#define EXPECT(args_expr, status, needle)                                                    \
  do {                                                                                       \
    scree_layernorm_args a_ = good();                                                        \
    args_expr;                                                                               \
    scree_status st_ = scree_layernorm(ctx, &a_, NULL);                                      \
    ck_assert_msg(st_ == (status), "got %s, want %s (%s)", scree_status_name(st_),           \
                  scree_status_name(status), scree_last_error(ctx));                         \
    ck_assert_msg(strstr(scree_last_error(ctx), needle), "message \"%s\" lacks \"%s\"",      \
                  scree_last_error(ctx), needle);                                            \
  } while (0)

START_TEST(null_args) {
  ck_assert_int_eq(scree_layernorm(NULL, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_layernorm(ctx, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(scree_last_error(ctx), "args"));
}
END_TEST

START_TEST(bad_values) {
  EXPECT(a_.x = 0, SCREE_ERROR_INVALID_ARGUMENT, "x is NULL");
  EXPECT(a_.w = 0, SCREE_ERROR_INVALID_ARGUMENT, "w is NULL");
  EXPECT(a_.y = 0, SCREE_ERROR_INVALID_ARGUMENT, "y is NULL");
  EXPECT(a_.x = 0x10001, SCREE_ERROR_MISALIGNED, "x=0x10001");
  EXPECT(a_.w_dtype = SCREE_DTYPE_FP32; a_.w = 0x20002, SCREE_ERROR_MISALIGNED, "w=0x20002");
  EXPECT(a_.w_dtype = SCREE_DTYPE_FP32; a_.b = 0x28002, SCREE_ERROR_MISALIGNED, "b=0x28002");
  EXPECT(a_.b = 0x28001, SCREE_ERROR_MISALIGNED, "b=0x28001");
  EXPECT(a_.y = 0x30003, SCREE_ERROR_MISALIGNED, "y=0x30003");
  EXPECT(a_.mean = 0x40002, SCREE_ERROR_MISALIGNED, "mean=0x40002");
  EXPECT(a_.rstd = 0x50001, SCREE_ERROR_MISALIGNED, "rstd=0x50001");
  EXPECT(a_.x_dtype = (scree_dtype)7, SCREE_ERROR_UNSUPPORTED, "x_dtype=7");
  EXPECT(a_.w_dtype = (scree_dtype)3, SCREE_ERROR_UNSUPPORTED, "w_dtype=3");
  EXPECT(a_.y_dtype = (scree_dtype)-1, SCREE_ERROR_UNSUPPORTED, "y_dtype=-1");
  EXPECT(a_.cols = 0, SCREE_ERROR_INVALID_ARGUMENT, "cols=0");
  EXPECT(a_.cols = -5, SCREE_ERROR_INVALID_ARGUMENT, "cols=-5");
  EXPECT(a_.cols = 65537, SCREE_ERROR_UNSUPPORTED, "cols=65537");
  EXPECT(a_.rows = -1, SCREE_ERROR_INVALID_ARGUMENT, "rows=-1");
  EXPECT(a_.x_stride = 10, SCREE_ERROR_INVALID_ARGUMENT, "x_stride=10");
  EXPECT(a_.y_stride = 63, SCREE_ERROR_INVALID_ARGUMENT, "y_stride=63");
  EXPECT(a_.y_stride = -64, SCREE_ERROR_INVALID_ARGUMENT, "y_stride=-64");
  EXPECT(a_.eps = -1.f, SCREE_ERROR_INVALID_ARGUMENT, "eps=");
  EXPECT(a_.eps = __builtin_inff(), SCREE_ERROR_INVALID_ARGUMENT, "eps=");
  EXPECT(a_.eps = __builtin_nanf(""), SCREE_ERROR_INVALID_ARGUMENT, "eps=");
  EXPECT(a_.rows = (int64_t)1 << 62, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
  EXPECT(a_.x_stride = (int64_t)1 << 62, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
}
END_TEST

START_TEST(overlaps) {
  /* y starts inside x: partial overlap. */
  EXPECT(a_.y = a_.x + 64, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps x");
  /* In place with a different element size, or a different stride. */
  EXPECT(a_.y = a_.x; a_.y_dtype = SCREE_DTYPE_FP32, SCREE_ERROR_INVALID_ARGUMENT, "in place");
  EXPECT(a_.y = a_.x; a_.y_stride = 72, SCREE_ERROR_INVALID_ARGUMENT, "in place");
  EXPECT(a_.y = a_.w, SCREE_ERROR_INVALID_ARGUMENT, "y=0x20000 overlaps w");
  EXPECT(a_.b = a_.y + 256, SCREE_ERROR_INVALID_ARGUMENT, "y=0x30000 overlaps b=0x30100");
  /* The statistics are written: apart from every other buffer. */
  EXPECT(a_.mean = a_.x + 64, SCREE_ERROR_INVALID_ARGUMENT, "mean=0x10040 overlaps x");
  EXPECT(a_.mean = a_.w, SCREE_ERROR_INVALID_ARGUMENT, "mean=0x20000 overlaps w");
  EXPECT(a_.mean = a_.b + 4, SCREE_ERROR_INVALID_ARGUMENT, "mean=0x28004 overlaps b");
  EXPECT(a_.rstd = a_.y + 508, SCREE_ERROR_INVALID_ARGUMENT, "rstd=0x301fc overlaps y");
  EXPECT(a_.rstd = a_.mean + 12, SCREE_ERROR_INVALID_ARGUMENT, "rstd=0x4000c overlaps mean");
  EXPECT(a_.rstd = a_.mean, SCREE_ERROR_INVALID_ARGUMENT, "overlaps mean");
  /* Absent statistics or bias overlap nothing (their pointers are 0). */
  EXPECT(a_.mean = 0; a_.b = 0; a_.rstd = a_.mean + 12, SCREE_ERROR_NO_DEVICE, "no device");
}
END_TEST

START_TEST(valid_args_reach_the_launch) {
  /* Exactly in place is allowed; with no device the call stops at launch. */
  EXPECT(a_.y = a_.x, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT((void)0, SCREE_ERROR_NO_DEVICE, "no device");
  /* Bias and statistics are optional. */
  EXPECT(a_.b = 0, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT(a_.mean = 0, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT(a_.b = a_.mean = a_.rstd = 0, SCREE_ERROR_NO_DEVICE, "no device");
  /* Inputs may share memory: only reads. */
  EXPECT(a_.b = a_.w, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT(a_.w = a_.x + 2, SCREE_ERROR_NO_DEVICE, "no device");
  /* Strides past cols, fp32 statistics right after y. */
  EXPECT(a_.x_stride = 80; a_.y_stride = 72; a_.mean = a_.y + 4 * 72 * 2, SCREE_ERROR_NO_DEVICE,
         "no device");
}
END_TEST

START_TEST(zero_rows_is_a_noop) {
  scree_layernorm_args a = good();
  a.rows = 0;
  a.x = a.y = a.w = a.b = a.mean = a.rstd = 0; /* an empty batch may come with no buffers */
  ck_assert_int_eq(scree_layernorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

START_TEST(error_clears_on_success) {
  scree_layernorm_args a = good();
  a.cols = 0;
  ck_assert_int_ne(scree_layernorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_ne(scree_last_error(ctx), "");
  a.cols = 8;
  a.rows = 0;
  ck_assert_int_eq(scree_layernorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

int main(void) {
  Suite *s = suite_create("layernorm_args");
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
