/* test_swiglu_args.c - bad arguments get the right status and a message
 * naming the argument, and nothing is launched (the context here has no
 * device: reaching a launch would report SCREE_ERROR_NO_DEVICE instead). */
#include <string.h>

#include "test_util.h"

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

/* Two tensors: gate, up, y of 4 x 64 fp16. */
static scree_swiglu_args good(void) {
  scree_swiglu_args a = {.gate = 0x10000, .up = 0x20000, .y = 0x30000, .rows = 4, .cols = 64,
                         .dtype = SCREE_DTYPE_FP16, .y_dtype = SCREE_DTYPE_FP16};
  return a;
}

/* One [4, 128] tensor holding gate then up (up = 0). */
static scree_swiglu_args good_one(void) {
  scree_swiglu_args a = good();
  a.up = 0;
  return a;
}

#define EXPECT_FROM(base, args_expr, status, needle)                                  \
  do {                                                                                \
    scree_swiglu_args a_ = base();                                                    \
    args_expr;                                                                        \
    scree_status st_ = scree_swiglu(ctx, &a_, NULL);                                  \
    ck_assert_msg(st_ == (status), "got %s, want %s (%s)", scree_status_name(st_),    \
                  scree_status_name(status), scree_last_error(ctx));                  \
    ck_assert_msg(strstr(scree_last_error(ctx), needle), "message \"%s\" lacks \"%s\"", \
                  scree_last_error(ctx), needle);                                     \
  } while (0)
#define EXPECT(args_expr, status, needle) EXPECT_FROM(good, args_expr, status, needle)
#define EXPECT_ONE(args_expr, status, needle) EXPECT_FROM(good_one, args_expr, status, needle)

START_TEST(null_args) {
  ck_assert_int_eq(scree_swiglu(NULL, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_swiglu(ctx, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(scree_last_error(ctx), "args"));
}
END_TEST

START_TEST(bad_values) {
  EXPECT(a_.gate = 0, SCREE_ERROR_INVALID_ARGUMENT, "gate is NULL");
  EXPECT(a_.y = 0, SCREE_ERROR_INVALID_ARGUMENT, "y is NULL");
  EXPECT(a_.gate = 0x10001, SCREE_ERROR_MISALIGNED, "gate=0x10001");
  EXPECT(a_.up = 0x20002; a_.dtype = SCREE_DTYPE_FP32, SCREE_ERROR_MISALIGNED, "up=0x20002");
  EXPECT(a_.y = 0x30003, SCREE_ERROR_MISALIGNED, "y=0x30003");
  EXPECT(a_.dtype = (scree_dtype)7, SCREE_ERROR_UNSUPPORTED, "dtype=7");
  EXPECT(a_.y_dtype = (scree_dtype)-1, SCREE_ERROR_UNSUPPORTED, "y_dtype=-1");
  EXPECT(a_.cols = 0, SCREE_ERROR_INVALID_ARGUMENT, "cols=0");
  EXPECT(a_.cols = -3, SCREE_ERROR_INVALID_ARGUMENT, "cols=-3");
  EXPECT(a_.cols = ((int64_t)1 << 30) + 1, SCREE_ERROR_UNSUPPORTED, "cols=1073741825");
  EXPECT(a_.rows = -1, SCREE_ERROR_INVALID_ARGUMENT, "rows=-1");
  EXPECT(a_.gate_stride = 10, SCREE_ERROR_INVALID_ARGUMENT, "gate_stride=10");
  EXPECT(a_.gate_stride = -64, SCREE_ERROR_INVALID_ARGUMENT, "gate_stride=-64");
  EXPECT(a_.up_stride = 63, SCREE_ERROR_INVALID_ARGUMENT, "up_stride=63");
  EXPECT(a_.y_stride = 63, SCREE_ERROR_INVALID_ARGUMENT, "y_stride=63");
  EXPECT(a_.rows = (int64_t)1 << 62, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
  /* One tensor: its stride covers both halves; up's stride is gate's. */
  EXPECT_ONE(a_.gate_stride = 100, SCREE_ERROR_INVALID_ARGUMENT, "gate_stride=100");
  EXPECT_ONE(a_.up_stride = 64, SCREE_ERROR_INVALID_ARGUMENT, "up_stride=64");
  EXPECT_ONE(a_.gate = 0x10001, SCREE_ERROR_MISALIGNED, "gate=0x10001");
}
END_TEST

START_TEST(overlaps) {
  /* y starts inside gate or up: partial overlap. */
  EXPECT(a_.y = a_.gate + 64, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps gate");
  EXPECT(a_.y = a_.up + 2, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps up");
  /* In place with a different element size or stride. */
  EXPECT(a_.y = a_.gate; a_.y_dtype = SCREE_DTYPE_FP32, SCREE_ERROR_INVALID_ARGUMENT, "in place");
  EXPECT(a_.y = a_.up; a_.y_stride = 72, SCREE_ERROR_INVALID_ARGUMENT, "in place");
  /* One tensor: y over up's half but with its own stride overlaps gate's
   * rows; y shifted by one element overlaps both halves. */
  EXPECT_ONE(a_.y = a_.gate + 128, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps");
  EXPECT_ONE(a_.y = a_.gate + 2; a_.y_stride = 128, SCREE_ERROR_INVALID_ARGUMENT,
             "partially overlaps gate");
  /* Same pitch, shifted: covers the end of gate's half and the start of
   * up's; one row shifted past gate's half overlaps up only. */
  EXPECT_ONE(a_.y = a_.gate + 64; a_.y_stride = 128, SCREE_ERROR_INVALID_ARGUMENT,
             "partially overlaps gate");
  EXPECT_ONE(a_.rows = 1; a_.y = a_.gate + 130; a_.y_stride = 128, SCREE_ERROR_INVALID_ARGUMENT,
             "partially overlaps up");
}
END_TEST

START_TEST(valid_args_reach_the_launch) {
  /* Exactly in place over gate or up, in both forms; y in the other half
   * of a wider one-tensor row; with no device the call stops at launch. */
  EXPECT((void)0, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT(a_.y = a_.gate, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT(a_.y = a_.up, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT_ONE((void)0, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT_ONE(a_.y = a_.gate; a_.y_stride = 128, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT_ONE(a_.y = a_.gate + 128; a_.y_stride = 128, SCREE_ERROR_NO_DEVICE, "no device");
  EXPECT_ONE(a_.up_stride = 128, SCREE_ERROR_NO_DEVICE, "no device");
  /* [rows, 3 * cols]: gate, up, then y's own third. */
  EXPECT_ONE(a_.gate_stride = 192; a_.y = a_.gate + 256; a_.y_stride = 192,
             SCREE_ERROR_NO_DEVICE, "no device");
  /* Gate and up may overlap each other: both are only read. */
  EXPECT(a_.up = a_.gate, SCREE_ERROR_NO_DEVICE, "no device");
}
END_TEST

START_TEST(zero_rows_is_a_noop) {
  scree_swiglu_args a = good();
  a.rows = 0;
  a.gate = a.up = a.y = 0; /* an empty batch may come with no buffers */
  ck_assert_int_eq(scree_swiglu(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

START_TEST(error_clears_on_success) {
  scree_swiglu_args a = good();
  a.cols = 0;
  ck_assert_int_ne(scree_swiglu(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_ne(scree_last_error(ctx), "");
  a.cols = 8;
  a.rows = 0;
  ck_assert_int_eq(scree_swiglu(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

int main(void) {
  Suite *s = suite_create("swiglu_args");
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
