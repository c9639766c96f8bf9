/* test_ragged_softmax_args.c - bad arguments get the right status and a
 * message naming the argument, and nothing is launched (the context here
 * has no device: a call that passed every check would report
 * SCREE_ERROR_NO_DEVICE instead). The device-side cu_seqlens checks
 * (validation on) need a GPU: test_ragged_softmax_gpu. */
#include <string.h>

#include "test_util.h"

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

/* 3 sequences, 300 tokens of 64 columns, fp16; buffers 256 MiB apart. */
static scree_ragged_softmax_args good(void) {
  scree_ragged_softmax_args a = {.x = 0x10000000, .y = 0x20000000, .cu_seqlens = 0x30000000,
                                 .batch = 3, .total = 300, .max_seqlen = 200, .cols = 64,
                                 .x_dtype = SCREE_DTYPE_FP16, .y_dtype = SCREE_DTYPE_FP16};
  return a;
}

#define EXPECT(args_expr, status, needle)                                                  \
  do {                                                                                     \
    scree_ragged_softmax_args a_ = good();                                                 \
    args_expr;                                                                             \
    scree_status st_ = scree_ragged_softmax(ctx, &a_, NULL);                               \
    ck_assert_msg(st_ == (status), "line %d: got %s, want %s (%s)", __LINE__,              \
                  scree_status_name(st_), scree_status_name(status), scree_last_error(ctx)); \
    ck_assert_msg(strstr(scree_last_error(ctx), needle), "line %d: message \"%s\" lacks \"%s\"", \
                  __LINE__, scree_last_error(ctx), needle);                                \
  } while (0)

/* Passes every check: the offline context then refuses to launch. */
#define PASSES(args_expr) EXPECT(args_expr, SCREE_ERROR_NO_DEVICE, "no device")

START_TEST(null_args) {
  ck_assert_int_eq(scree_ragged_softmax(NULL, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_ragged_softmax(ctx, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(scree_last_error(ctx), "args"));
}
END_TEST

START_TEST(pointers) {
  EXPECT(a_.x = 0, SCREE_ERROR_INVALID_ARGUMENT, "x is NULL");
  EXPECT(a_.y = 0, SCREE_ERROR_INVALID_ARGUMENT, "y is NULL");
  EXPECT(a_.cu_seqlens = 0, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens is NULL");
  EXPECT(a_.x = 0x10000001, SCREE_ERROR_MISALIGNED, "x=0x10000001");
  EXPECT(a_.y = 0x20000003, SCREE_ERROR_MISALIGNED, "y=0x20000003");
  EXPECT(a_.y_dtype = SCREE_DTYPE_FP32; a_.y = 0x20000002, SCREE_ERROR_MISALIGNED, "y=0x20000002");
  EXPECT(a_.cu_seqlens = 0x30000002, SCREE_ERROR_MISALIGNED, "cu_seqlens=0x30000002");
}
END_TEST

START_TEST(dtypes_and_sizes) {
  EXPECT(a_.x_dtype = (scree_dtype)7, SCREE_ERROR_UNSUPPORTED, "x_dtype=7");
  EXPECT(a_.y_dtype = (scree_dtype)-1, SCREE_ERROR_UNSUPPORTED, "y_dtype=-1");
  EXPECT(a_.cols = 0, SCREE_ERROR_INVALID_ARGUMENT, "cols=0");
  EXPECT(a_.cols = -5, SCREE_ERROR_INVALID_ARGUMENT, "cols=-5");
  EXPECT(a_.cols = 65537, SCREE_ERROR_UNSUPPORTED, "cols=65537");
  EXPECT(a_.batch = -1, SCREE_ERROR_INVALID_ARGUMENT, "batch=-1");
  EXPECT(a_.total = -1, SCREE_ERROR_INVALID_ARGUMENT, "total=-1");
  EXPECT(a_.max_seqlen = -1, SCREE_ERROR_INVALID_ARGUMENT, "max_seqlen=-1");
  EXPECT(a_.total = (int64_t)1 << 31, SCREE_ERROR_INVALID_ARGUMENT, "total=2147483648");
  EXPECT(a_.batch = (int64_t)1 << 31, SCREE_ERROR_INVALID_ARGUMENT, "batch=2147483648");
  EXPECT(a_.max_seqlen = (int64_t)1 << 40, SCREE_ERROR_INVALID_ARGUMENT, "max_seqlen=");
  EXPECT(a_.max_seqlen = 0, SCREE_ERROR_INVALID_ARGUMENT, "max_seqlen is 0");
  EXPECT(a_.batch = 0, SCREE_ERROR_INVALID_ARGUMENT, "batch is 0");
  EXPECT(a_.x_stride = 63, SCREE_ERROR_INVALID_ARGUMENT, "x_stride=63");
  EXPECT(a_.y_stride = 10, SCREE_ERROR_INVALID_ARGUMENT, "y_stride=10");
  EXPECT(a_.x_stride = -64, SCREE_ERROR_INVALID_ARGUMENT, "x_stride=-64");
  EXPECT(a_.scale = __builtin_inff(), SCREE_ERROR_INVALID_ARGUMENT, "scale=");
  EXPECT(a_.scale = -__builtin_inff(), SCREE_ERROR_INVALID_ARGUMENT, "scale=");
  EXPECT(a_.scale = __builtin_nanf(""), SCREE_ERROR_INVALID_ARGUMENT, "scale=");
  EXPECT(a_.total = 0x7fffffff; a_.x_stride = (int64_t)1 << 40, SCREE_ERROR_INVALID_ARGUMENT,
         "overflows");
  EXPECT(a_.x = 0xfffffffffffff000ull, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
  EXPECT(a_.cu_seqlens = 0xfffffffffffffff0ull; a_.batch = 100, SCREE_ERROR_INVALID_ARGUMENT,
         "cu_seqlens");
}
END_TEST

START_TEST(overlaps) {
  /* y starts inside x: partial overlap. */
  EXPECT(a_.y = a_.x + 64, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps x");
  EXPECT(a_.x = a_.y + 2, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps x");
  /* In place with a different element size, or a different stride. */
  EXPECT(a_.y = a_.x; a_.y_dtype = SCREE_DTYPE_FP32, SCREE_ERROR_INVALID_ARGUMENT, "in place");
  EXPECT(a_.y = a_.x; a_.y_stride = 128, SCREE_ERROR_INVALID_ARGUMENT, "in place");
  /* y over cu_seqlens (the kernel reads it while y is written). */
  EXPECT(a_.cu_seqlens = a_.y + 1024, SCREE_ERROR_INVALID_ARGUMENT, "overlaps cu_seqlens");
  EXPECT(a_.cu_seqlens = a_.y - 8, SCREE_ERROR_INVALID_ARGUMENT, "overlaps cu_seqlens");
}
END_TEST

START_TEST(valid_args_reach_the_launch) {
  PASSES((void)0);
  /* In place, also between 16-bit dtypes of one size. */
  PASSES(a_.y = a_.x);
  PASSES(a_.y = a_.x; a_.y_dtype = SCREE_DTYPE_BF16);
  PASSES(a_.y = a_.x; a_.x_stride = a_.y_stride = 72);
  /* Mixed dtypes, strides, scales; cu_seqlens beside y (not over it). */
  PASSES(a_.x_dtype = SCREE_DTYPE_FP32; a_.y_dtype = SCREE_DTYPE_BF16);
  PASSES(a_.x_stride = 65; a_.y_stride = 64);
  PASSES(a_.scale = -0.5f);
  PASSES(a_.cu_seqlens = a_.y + 300 * 64 * 2);
  PASSES(a_.cu_seqlens = a_.y - 16);
  /* cu_seqlens may share x's memory: both are only read. */
  PASSES(a_.cu_seqlens = a_.x);
  /* Limits. */
  PASSES(a_.cols = 65536);
  PASSES(a_.cols = 1);
  PASSES(a_.total = 0x7fffffff; a_.max_seqlen = 0x7fffffff; a_.batch = 0x7fffffff;
         a_.cols = 1; a_.y = 0x10000000000ull);
  /* max_seqlen is not checked against total or batch without validation. */
  PASSES(a_.max_seqlen = 1);
}
END_TEST

START_TEST(empty_batches_are_noops) {
  /* No token: nothing to do, so no buffer is needed. */
  scree_ragged_softmax_args a = good();
  a.total = 0;
  a.x = a.y = a.cu_seqlens = 0;
  ck_assert_int_eq(scree_ragged_softmax(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
  a.batch = 0;
  a.max_seqlen = 0;
  ck_assert_int_eq(scree_ragged_softmax(ctx, &a, NULL), SCREE_OK);
  /* The scalar arguments are still checked. */
  a.cols = 0;
  ck_assert_int_eq(scree_ragged_softmax(ctx, &a, NULL), SCREE_ERROR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(error_clears_on_success) {
  scree_ragged_softmax_args a = good();
  a.cols = 0;
  ck_assert_int_ne(scree_ragged_softmax(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_ne(scree_last_error(ctx), "");
  a.cols = 8;
  a.total = 0;
  ck_assert_int_eq(scree_ragged_softmax(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

int main(void) {
  Suite *s = suite_create("ragged_softmax_args");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, null_args);
  tcase_add_test(tc, pointers);
  tcase_add_test(tc, dtypes_and_sizes);
  tcase_add_test(tc, overlaps);
  tcase_add_test(tc, valid_args_reach_the_launch);
  tcase_add_test(tc, empty_batches_are_noops);
  tcase_add_test(tc, error_clears_on_success);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
