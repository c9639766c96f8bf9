/* test_cross_entropy_args.c - bad cross-entropy arguments get the right
 * status and a message naming the argument, and nothing is launched (the
 * context here has no device: reaching a launch would report
 * SCREE_ERROR_NO_DEVICE instead). The targets' values are checked on the
 * device path only (test_cross_entropy_gpu.c). */
#include <string.h>

#include "test_util.h"

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

/* 4 rows of 1000 bf16 logits. */
static scree_cross_entropy_args good(void) {
  scree_cross_entropy_args a = {.logits = 0x100000, .targets = 0x200000, .loss = 0x300000,
                                .lse = 0x400000, .rows = 4, .vocab = 1000,
                                .ignore_index = -100, .dtype = SCREE_DTYPE_BF16};
  return a;
}

#define EXPECT(args_expr, status, needle)                                                   \
  do {                                                                                      \
    scree_cross_entropy_args a_ = good();                                                   \
    args_expr;                                                                              \
    scree_status st_ = scree_cross_entropy(ctx, &a_, NULL);                                 \
    ck_assert_msg(st_ == (status), "line %d: got %s, want %s (%s)", __LINE__,               \
                  scree_status_name(st_), scree_status_name(status), scree_last_error(ctx)); \
    ck_assert_msg(strstr(scree_last_error(ctx), needle),                                    \
                  "line %d: message \"%s\" lacks \"%s\"", __LINE__, scree_last_error(ctx),  \
                  needle);                                                                  \
  } while (0)

/* Passes every check: the offline context then refuses to launch. */
#define PASSES(args_expr) EXPECT(args_expr, SCREE_ERROR_NO_DEVICE, "no device")

START_TEST(null_args) {
  ck_assert_int_eq(scree_cross_entropy(NULL, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_cross_entropy(ctx, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(scree_last_error(ctx), "args"));
}
END_TEST

START_TEST(bad_values) {
  EXPECT(a_.dtype = (scree_dtype)5, SCREE_ERROR_UNSUPPORTED, "dtype=5");
  EXPECT(a_.dtype = (scree_dtype)-1, SCREE_ERROR_UNSUPPORTED, "dtype=-1");
  EXPECT(a_.vocab = 0, SCREE_ERROR_INVALID_ARGUMENT, "vocab=0");
  EXPECT(a_.vocab = -3, SCREE_ERROR_INVALID_ARGUMENT, "vocab=-3");
  EXPECT(a_.vocab = ((int64_t)1 << 24) + 1, SCREE_ERROR_UNSUPPORTED, "vocab=16777217");
  EXPECT(a_.rows = -1, SCREE_ERROR_INVALID_ARGUMENT, "rows=-1");
  EXPECT(a_.logits_stride = 999, SCREE_ERROR_INVALID_ARGUMENT, "logits_stride=999");
  EXPECT(a_.logits_stride = -1000, SCREE_ERROR_INVALID_ARGUMENT, "logits_stride=-1000");
  EXPECT(a_.rows = (int64_t)1 << 62, SCREE_ERROR_INVALID_ARGUMENT, "overflows");
}
END_TEST

START_TEST(bad_buffers) {
  EXPECT(a_.logits = 0, SCREE_ERROR_INVALID_ARGUMENT, "logits is NULL");
  EXPECT(a_.targets = 0, SCREE_ERROR_INVALID_ARGUMENT, "targets is NULL");
  EXPECT(a_.loss = 0, SCREE_ERROR_INVALID_ARGUMENT, "loss is NULL");
  EXPECT(a_.logits = 0x100001, SCREE_ERROR_MISALIGNED, "logits=0x100001");
  EXPECT(a_.dtype = SCREE_DTYPE_FP32; a_.logits = 0x100002, SCREE_ERROR_MISALIGNED,
         "logits=0x100002");
  EXPECT(a_.targets = 0x200004, SCREE_ERROR_MISALIGNED, "targets=0x200004");
  EXPECT(a_.loss = 0x300002, SCREE_ERROR_MISALIGNED, "loss=0x300002");
  EXPECT(a_.lse = 0x400001, SCREE_ERROR_MISALIGNED, "lse=0x400001");
}
END_TEST

START_TEST(overlaps) {
  /* The outputs have their own memory. */
  EXPECT(a_.loss = a_.logits + 100, SCREE_ERROR_INVALID_ARGUMENT, "loss=");
  EXPECT(a_.loss = a_.targets + 8, SCREE_ERROR_INVALID_ARGUMENT, "overlaps logits or targets");
  EXPECT(a_.loss = a_.targets, SCREE_ERROR_INVALID_ARGUMENT, "overlaps logits or targets");
  EXPECT(a_.lse = a_.logits + 7996, SCREE_ERROR_INVALID_ARGUMENT, "lse=");
  EXPECT(a_.lse = a_.targets + 24, SCREE_ERROR_INVALID_ARGUMENT, "overlaps");
  EXPECT(a_.lse = a_.loss + 12, SCREE_ERROR_INVALID_ARGUMENT, "overlaps");
  EXPECT(a_.lse = a_.loss, SCREE_ERROR_INVALID_ARGUMENT, "overlaps");
}
END_TEST

START_TEST(valid_args_reach_the_launch) {
  PASSES((void)0);
  PASSES(a_.lse = 0);                      /* lse is optional */
  PASSES(a_.ignore_index = 0);             /* the zeroed struct's value */
  PASSES(a_.ignore_index = INT64_MIN);
  PASSES(a_.vocab = (int64_t)1 << 24; a_.targets = 0x20000000; a_.loss = 0x30000000;
         a_.lse = 0x40000000); /* the largest vocabulary */
  PASSES(a_.vocab = 1);
  PASSES(a_.logits_stride = 1003);         /* odd stride: narrower vectors */
  PASSES(a_.logits = 0x100002);            /* aligned to the element only */
  PASSES(a_.dtype = SCREE_DTYPE_FP32);
  PASSES(a_.dtype = SCREE_DTYPE_FP16);
  /* Outputs right next to the inputs and to each other. */
  PASSES(a_.loss = a_.targets + 32; a_.lse = a_.loss + 16);
  PASSES(a_.loss = a_.logits + 8000);
}
END_TEST

START_TEST(zero_rows_is_a_noop) {
  scree_cross_entropy_args a = good();
  a.rows = 0;
  a.logits = a.targets = a.loss = a.lse = 0; /* an empty batch may come with no buffers */
  ck_assert_int_eq(scree_cross_entropy(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

START_TEST(error_clears_on_success) {
  scree_cross_entropy_args a = good();
  a.vocab = 0;
  ck_assert_int_ne(scree_cross_entropy(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_ne(scree_last_error(ctx), "");
  a.vocab = 8;
  a.rows = 0;
  ck_assert_int_eq(scree_cross_entropy(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

int main(void) {
  Suite *s = suite_create("cross_entropy_args");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, null_args);
  tcase_add_test(tc, bad_values);
  tcase_add_test(tc, bad_buffers);
  tcase_add_test(tc, overlaps);
  tcase_add_test(tc, valid_args_reach_the_launch);
  tcase_add_test(tc, zero_rows_is_a_noop);
  tcase_add_test(tc, error_clears_on_success);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
