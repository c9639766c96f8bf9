/* test_rope_args.c - bad arguments get the right status and a message
 * naming the argument, and nothing is launched (the context here has no
 * device: reaching a launch would report SCREE_ERROR_NO_DEVICE instead). */
#include <string.h>

#include "test_util.h"

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

/* 8 tokens in 2 sequences, 4 q heads and 2 k heads of 64, fp16, separate
 * buffers. */
static scree_rope_args good(void) {
  scree_rope_args a = {.q = 0x100000, .k = 0x200000, .cu_seqlens = 0x300000, .total = 8,
                       .batch = 2, .heads_q = 4, .heads_kv = 2, .head_dim = 64,
                       .dtype = SCREE_DTYPE_FP16, .layout = SCREE_ROPE_NEOX};
  return a;
}

#define EXPECT(args_expr, status, needle)                                              \
  do {                                                                                 \
    scree_rope_args a_ = good();                                                       \
    args_expr;                                                                         \
    scree_status st_ = scree_rope(ctx, &a_, NULL);                                     \
    ck_assert_msg(st_ == (status), "got %s, want %s (%s)", scree_status_name(st_),     \
                  scree_status_name(status), scree_last_error(ctx));                   \
    ck_assert_msg(strstr(scree_last_error(ctx), needle), "message \"%s\" lacks \"%s\"", \
                  scree_last_error(ctx), needle);                                      \
  } while (0)
#define OK(args_expr) EXPECT(args_expr, SCREE_ERROR_NO_DEVICE, "no device")

START_TEST(null_args) {
  ck_assert_int_eq(scree_rope(NULL, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_rope(ctx, NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(scree_last_error(ctx), "args"));
}
END_TEST

START_TEST(bad_values) {
  EXPECT(a_.q = 0, SCREE_ERROR_INVALID_ARGUMENT, "q is NULL");
  EXPECT(a_.q = 0x100001, SCREE_ERROR_MISALIGNED, "q=0x100001");
  EXPECT(a_.k = 0x200003, SCREE_ERROR_MISALIGNED, "k=0x200003");
  EXPECT(a_.dtype = (scree_dtype)7, SCREE_ERROR_UNSUPPORTED, "dtype=7");
  EXPECT(a_.layout = (scree_rope_layout)2, SCREE_ERROR_INVALID_ARGUMENT, "layout=2");
  EXPECT(a_.positions_int64 = 2, SCREE_ERROR_INVALID_ARGUMENT, "positions_int64=2");
  EXPECT(a_.head_dim = 0, SCREE_ERROR_INVALID_ARGUMENT, "head_dim=0");
  EXPECT(a_.head_dim = 63, SCREE_ERROR_INVALID_ARGUMENT, "head_dim=63");
  EXPECT(a_.head_dim = 2048, SCREE_ERROR_UNSUPPORTED, "head_dim=2048");
  EXPECT(a_.rotary_dim = 3, SCREE_ERROR_INVALID_ARGUMENT, "rotary_dim=3");
  EXPECT(a_.rotary_dim = 66, SCREE_ERROR_INVALID_ARGUMENT, "rotary_dim=66");
  EXPECT(a_.rotary_dim = -2, SCREE_ERROR_INVALID_ARGUMENT, "rotary_dim=-2");
  EXPECT(a_.heads_q = 0, SCREE_ERROR_INVALID_ARGUMENT, "heads_q=0");
  EXPECT(a_.heads_kv = 0, SCREE_ERROR_INVALID_ARGUMENT, "heads_kv=0");
  EXPECT(a_.heads_q = 70000, SCREE_ERROR_UNSUPPORTED, "heads_q=70000");
  EXPECT(a_.total = -1, SCREE_ERROR_INVALID_ARGUMENT, "total=-1");
  EXPECT(a_.total = (int64_t)1 << 31, SCREE_ERROR_INVALID_ARGUMENT, "total=2147483648");
  EXPECT(a_.batch = -1, SCREE_ERROR_INVALID_ARGUMENT, "batch=-1");
  EXPECT(a_.batch = 0, SCREE_ERROR_INVALID_ARGUMENT, "batch is 0");
  EXPECT(a_.theta = -1.f, SCREE_ERROR_INVALID_ARGUMENT, "theta=");
  EXPECT(a_.theta = __builtin_inff(), SCREE_ERROR_INVALID_ARGUMENT, "theta=");
  EXPECT(a_.theta = __builtin_nanf(""), SCREE_ERROR_INVALID_ARGUMENT, "theta=");
  EXPECT(a_.cos_sin = 0x500000, SCREE_ERROR_INVALID_ARGUMENT, "max_position=0");
  EXPECT(a_.q_token_stride = -1, SCREE_ERROR_INVALID_ARGUMENT, "q_token_stride=-1");
  EXPECT(a_.q_head_stride = -64, SCREE_ERROR_INVALID_ARGUMENT, "q_head_stride=-64");
  EXPECT(a_.k_token_stride = -8, SCREE_ERROR_INVALID_ARGUMENT, "k_token_stride=-8");
  EXPECT(a_.k_head_stride = -2, SCREE_ERROR_INVALID_ARGUMENT, "k_head_stride=-2");
}
END_TEST

START_TEST(positions_and_tables) {
  EXPECT(a_.cu_seqlens = 0, SCREE_ERROR_INVALID_ARGUMENT, "both NULL");
  EXPECT(a_.cu_seqlens = 0x300002, SCREE_ERROR_MISALIGNED, "cu_seqlens=0x300002");
  EXPECT(a_.positions = 0x400004; a_.positions_int64 = 1, SCREE_ERROR_MISALIGNED,
         "positions=0x400004");
  EXPECT(a_.positions = 0x400002, SCREE_ERROR_MISALIGNED, "positions=0x400002");
  EXPECT(a_.cos_sin = 0x500002; a_.max_position = 10, SCREE_ERROR_MISALIGNED, "cos_sin=0x500002");
  EXPECT(a_.cos_sin = 0x500000; a_.max_position = (int64_t)1 << 50, SCREE_ERROR_INVALID_ARGUMENT,
         "max_position=");
  /* Read while q and k are written: they must not overlap them. */
  EXPECT(a_.positions = a_.q + 16, SCREE_ERROR_INVALID_ARGUMENT, "positions=0x100010 overlaps");
  EXPECT(a_.cu_seqlens = a_.k + 512, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens=0x200200 overlaps");
  EXPECT(a_.cos_sin = a_.k - 64; a_.max_position = 4, SCREE_ERROR_INVALID_ARGUMENT,
         "cos_sin=0x1fffc0 overlaps");
  /* With positions given, cu_seqlens and batch are not used. */
  OK(a_.positions = 0x400000; a_.cu_seqlens = 0; a_.batch = -5);
  OK(a_.positions = 0x400000; a_.positions_int64 = 1);
  OK(a_.cos_sin = 0x500000; a_.max_position = 8192);
}
END_TEST

START_TEST(strides_and_overlaps) {
  /* Within one tensor: head rows sharing elements. */
  EXPECT(a_.q_head_stride = 32, SCREE_ERROR_INVALID_ARGUMENT, "q strides");
  EXPECT(a_.q_token_stride = 128, SCREE_ERROR_INVALID_ARGUMENT, "q strides");
  EXPECT(a_.k_head_stride = 64; a_.k_token_stride = 64, SCREE_ERROR_INVALID_ARGUMENT, "k strides");
  EXPECT(a_.q_token_stride = ((int64_t)1 << 62), SCREE_ERROR_INVALID_ARGUMENT,
         "past the address space");
  /* k inside q's first head. */
  EXPECT(a_.k = a_.q + 64, SCREE_ERROR_INVALID_ARGUMENT, "overlap");
  /* Packed [T, 4 + 2 + 2, 64] with k one half-head too early: its first
   * head's rotary half meets q's last head. */
  EXPECT(a_.q_token_stride = a_.k_token_stride = 512; a_.k = a_.q + (4 * 64 - 32) * 2,
         SCREE_ERROR_INVALID_ARGUMENT, "overlap");
  /* Interleaved with different head strides: not proven disjoint. */
  EXPECT(a_.heads_kv = 4; a_.q_token_stride = a_.k_token_stride = 1024; a_.k_head_stride = 128;
         a_.q_head_stride = 256; a_.k = a_.q + 128, SCREE_ERROR_INVALID_ARGUMENT, "overlap");
}
END_TEST

START_TEST(packed_layouts_reach_the_launch) {
  OK((void)0);
  /* [T, Hq + 2 Hkv, d]: q, then k, then v. */
  OK(a_.q_token_stride = a_.k_token_stride = 512; a_.k = a_.q + 4 * 64 * 2);
  /* [T, 3, H, d] and [T, H, 3, d] with H = 4. */
  OK(a_.heads_kv = 4; a_.q_token_stride = a_.k_token_stride = 768; a_.k = a_.q + 4 * 64 * 2);
  OK(a_.heads_kv = 4; a_.q_token_stride = a_.k_token_stride = 768;
     a_.q_head_stride = a_.k_head_stride = 192; a_.k = a_.q + 64 * 2);
  /* k before q in the buffer. */
  OK(a_.q_token_stride = a_.k_token_stride = 512; a_.q = a_.k + 2 * 64 * 2);
  /* Partial rotary: k's rotary half in q's untouched half of each head. */
  OK(a_.rotary_dim = 32; a_.heads_kv = 4; a_.q_token_stride = a_.k_token_stride = 256;
     a_.k = a_.q + 32 * 2);
  /* Head-major [H, T, d] tensors. */
  OK(a_.q_token_stride = a_.k_token_stride = 64; a_.q_head_stride = a_.k_head_stride = 8 * 64);
  /* q only: k and heads_kv are not used. */
  OK(a_.k = 0; a_.heads_kv = 0);
  OK(a_.k = 0; a_.heads_kv = -3; a_.k_token_stride = 1);
  /* One token, one head each, adjacent. */
  OK(a_.total = 1; a_.batch = 1; a_.heads_q = a_.heads_kv = 1; a_.k = a_.q + 128);
}
END_TEST

START_TEST(zero_tokens_is_a_noop) {
  scree_rope_args a = good();
  a.total = 0;
  a.batch = 0;
  a.q = a.k = a.cu_seqlens = 0; /* an empty batch may come with no buffers */
  ck_assert_int_eq(scree_rope(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

START_TEST(error_clears_on_success) {
  scree_rope_args a = good();
  a.head_dim = 3;
  ck_assert_int_ne(scree_rope(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_ne(scree_last_error(ctx), "");
  a.head_dim = 64;
  a.total = 0;
  ck_assert_int_eq(scree_rope(ctx, &a, NULL), SCREE_OK);
  ck_assert_str_eq(scree_last_error(ctx), "");
}
END_TEST

int main(void) {
  Suite *s = suite_create("rope_args");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, null_args);
  tcase_add_test(tc, bad_values);
  tcase_add_test(tc, positions_and_tables);
  tcase_add_test(tc, strides_and_overlaps);
  tcase_add_test(tc, packed_layouts_reach_the_launch);
  tcase_add_test(tc, zero_tokens_is_a_noop);
  tcase_add_test(tc, error_clears_on_success);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
