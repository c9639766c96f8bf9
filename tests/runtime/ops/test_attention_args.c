/* test_attention_args.c - bad attention arguments get the right status and a
 * message naming the argument, and nothing is launched (the context has no
 * device: a call that passed every check would report
 * SCREE_ERROR_NO_DEVICE). Also: the layouts that must pass (packed qkv,
 * GQA, MQA, empty batches). */
#include <string.h>

#include "test_util.h"

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

/* 3 sequences, 300 tokens, 8 query heads over 2 KV heads of 128. */
static scree_attention_args good(void) {
  scree_attention_args a = {
      .q = 0x1000000, .k = 0x2000000, .v = 0x3000000, .out = 0x4000000, .lse = 0x5000000,
      .cu_seqlens_q = 0x6000000, .cu_seqlens_k = 0x6001000,
      .batch = 3, .total_q = 300, .total_k = 300, .max_seqlen_q = 200, .max_seqlen_k = 200,
      .heads_q = 8, .heads_kv = 2, .head_dim = 128, .dtype = SCREE_DTYPE_BF16, .causal = 1,
      .window_left = -1, .window_right = -1};
  return a;
}

#define EXPECT(args_expr, status, needle)                                         \
  do {                                                                            \
    scree_attention_args a_ = good();                                             \
    args_expr;                                                                    \
    scree_status st_ = scree_attention(ctx, &a_, NULL);                           \
    ck_assert_msg(st_ == (status), "line %d: got %s, want %s (%s)", __LINE__,     \
                  scree_status_name(st_), scree_status_name(status),              \
                  scree_last_error(ctx));                                         \
    ck_assert_msg(strstr(scree_last_error(ctx), needle),                          \
                  "line %d: message \"%s\" lacks \"%s\"", __LINE__,               \
                  scree_last_error(ctx), needle);                                 \
  } while (0)

/* Passes every check: the offline context then refuses to launch. */
#define PASSES(args_expr) EXPECT(args_expr, SCREE_ERROR_NO_DEVICE, "no device")

START_TEST(null_args) {
  ck_assert_int_eq(scree_attention(NULL, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_attention(ctx, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(scree_last_error(ctx), "args"));
}
END_TEST

START_TEST(unsupported) {
  EXPECT(a_.dtype = SCREE_DTYPE_FP32, SCREE_ERROR_UNSUPPORTED, "dtype=0 (fp32)");
  EXPECT(a_.dtype = (scree_dtype)9, SCREE_ERROR_UNSUPPORTED, "dtype=9");
  EXPECT(a_.head_dim = 80, SCREE_ERROR_UNSUPPORTED, "head_dim=80");
  EXPECT(a_.head_dim = 512, SCREE_ERROR_UNSUPPORTED, "head_dim=512");
  EXPECT(a_.head_dim = 0, SCREE_ERROR_UNSUPPORTED, "head_dim=0");
}
END_TEST

START_TEST(bad_values) {
  EXPECT(a_.heads_q = 7, SCREE_ERROR_INVALID_ARGUMENT, "heads_q=7 is not a multiple of heads_kv=2");
  EXPECT(a_.heads_kv = 0, SCREE_ERROR_INVALID_ARGUMENT, "heads_kv=0");
  EXPECT(a_.heads_q = 0, SCREE_ERROR_INVALID_ARGUMENT, "heads_q=0");
  EXPECT(a_.max_seqlen_q = 0, SCREE_ERROR_INVALID_ARGUMENT, "max_seqlen_q is 0");
  EXPECT(a_.max_seqlen_k = 0, SCREE_ERROR_INVALID_ARGUMENT, "max_seqlen_k is 0");
  EXPECT(a_.total_q = -1, SCREE_ERROR_INVALID_ARGUMENT, "total_q=-1");
  EXPECT(a_.batch = -2, SCREE_ERROR_INVALID_ARGUMENT, "batch=-2");
  EXPECT(a_.total_k = (int64_t)1 << 31, SCREE_ERROR_INVALID_ARGUMENT, "total_k=");
  EXPECT(a_.batch = 0, SCREE_ERROR_INVALID_ARGUMENT, "batch is 0");
  EXPECT(a_.window_left = -2, SCREE_ERROR_INVALID_ARGUMENT, "window_left=-2");
  EXPECT(a_.window_right = -5, SCREE_ERROR_INVALID_ARGUMENT, "window_right=-5");
  EXPECT(a_.scale = __builtin_nanf(""), SCREE_ERROR_INVALID_ARGUMENT, "scale=");
  EXPECT(a_.scale = __builtin_inff(), SCREE_ERROR_INVALID_ARGUMENT, "scale=");
}
END_TEST

START_TEST(bad_buffers) {
  EXPECT(a_.q = 0, SCREE_ERROR_INVALID_ARGUMENT, "q is NULL");
  EXPECT(a_.k = 0, SCREE_ERROR_INVALID_ARGUMENT, "k is NULL");
  EXPECT(a_.v = 0, SCREE_ERROR_INVALID_ARGUMENT, "v is NULL");
  EXPECT(a_.out = 0, SCREE_ERROR_INVALID_ARGUMENT, "out is NULL");
  EXPECT(a_.cu_seqlens_q = 0, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens_q is NULL");
  EXPECT(a_.cu_seqlens_k = 0, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens_k is NULL");
  EXPECT(a_.cu_seqlens_k = 0x6001002, SCREE_ERROR_MISALIGNED, "cu_seqlens");
  EXPECT(a_.q = 0x1000008, SCREE_ERROR_MISALIGNED, "q=0x1000008");
  EXPECT(a_.out = 0x4000002, SCREE_ERROR_MISALIGNED, "out=0x4000002");
  EXPECT(a_.lse = 0x5000002, SCREE_ERROR_MISALIGNED, "lse=0x5000002");
  /* Strides: multiples of 8 elements (16 bytes), positive, not overlapping. */
  EXPECT(a_.q_token_stride = 1028, SCREE_ERROR_MISALIGNED, "q strides (token 1028");
  EXPECT(a_.k_head_stride = 132, SCREE_ERROR_MISALIGNED, "k strides");
  EXPECT(a_.v_token_stride = -256, SCREE_ERROR_MISALIGNED, "v strides");
  EXPECT(a_.q_head_stride = 64, SCREE_ERROR_INVALID_ARGUMENT, "q strides (token 1024, head 64) overlap");
  EXPECT(a_.out_token_stride = 512, SCREE_ERROR_INVALID_ARGUMENT, "out strides (token 512, head 128) overlap");
  EXPECT(a_.k_token_stride = 128; a_.k_head_stride = 128, SCREE_ERROR_INVALID_ARGUMENT, "k strides");
  /* out must have its own memory; lse too. */
  EXPECT(a_.out = a_.q + 1024, SCREE_ERROR_INVALID_ARGUMENT, "overlaps q, k or v");
  EXPECT(a_.out = a_.v, SCREE_ERROR_INVALID_ARGUMENT, "overlaps q, k or v");
  EXPECT(a_.lse = a_.out + 256, SCREE_ERROR_INVALID_ARGUMENT, "lse=");
}
END_TEST

START_TEST(good_layouts_pass) {
  PASSES((void)0);
  PASSES(a_.lse = 0);
  PASSES(a_.causal = 0);
  PASSES(a_.window_left = 128; a_.window_right = 0);
  PASSES(a_.heads_kv = 1);                   /* MQA */
  PASSES(a_.heads_kv = 8);                   /* MHA */
  PASSES(a_.dtype = SCREE_DTYPE_FP16; a_.head_dim = 32);
  PASSES(a_.head_dim = 256);
  PASSES(a_.head_dim = 96);
  PASSES(a_.total_k = 0; a_.k = 0; a_.v = 0); /* no keys: zeros out, -inf lse */
  /* One [T, 3, H, d] buffer (MHA): q, k, v interleaved by token. */
  PASSES(a_.heads_kv = 8; a_.q = 0x10000000; a_.k = a_.q + 8 * 128 * 2; a_.v = a_.k + 8 * 128 * 2;
         a_.q_token_stride = a_.k_token_stride = a_.v_token_stride = 3 * 8 * 128);
  /* One [T, H, 3, d] buffer: q, k, v interleaved by head. */
  PASSES(a_.heads_kv = 8; a_.q = 0x10000000; a_.k = a_.q + 128 * 2; a_.v = a_.k + 128 * 2;
         a_.q_token_stride = a_.k_token_stride = a_.v_token_stride = 3 * 8 * 128;
         a_.q_head_stride = a_.k_head_stride = a_.v_head_stride = 3 * 128);
  /* A strided output (every other token row). */
  PASSES(a_.out_token_stride = 2 * 8 * 128);
}
END_TEST

/* Nothing to write: no launch, SCREE_OK even without a device, and no
 * pointer is looked at. */
START_TEST(empty_batches) {
  scree_attention_args a = good();
  a.batch = 0, a.total_q = 0, a.total_k = 0, a.max_seqlen_q = 0, a.max_seqlen_k = 0;
  a.q = a.k = a.v = a.out = a.cu_seqlens_q = a.cu_seqlens_k = 0;
  ck_assert_int_eq(scree_attention(ctx, &a, NULL), SCREE_OK);
  a = good();
  a.total_q = 0, a.max_seqlen_q = 0, a.q = a.out = 0;
  ck_assert_int_eq(scree_attention(ctx, &a, NULL), SCREE_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("attention_args");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, null_args);
  tcase_add_test(tc, unsupported);
  tcase_add_test(tc, bad_values);
  tcase_add_test(tc, bad_buffers);
  tcase_add_test(tc, good_layouts_pass);
  tcase_add_test(tc, empty_batches);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
