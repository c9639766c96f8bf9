/* test_bucket.c - shape buckets, representative shapes, variant strings and
 * cache keys (no GPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "sha256.h"
#include "test_util.h"
#include "tuner.h"

static const scree__op *op;
static void setup(void) { op = scree__op_find("rmsnorm"); }

static uint64_t key_of(long rows, long cols) {
  scree_rmsnorm_args a = {.rows = rows, .cols = cols};
  return op->bucket_key(&a);
}

START_TEST(rows_round_up_to_powers_of_two_cols_exact) {
  char s[96];
  op->bucket_str(key_of(1, 4096), s, sizeof s);
  ck_assert_str_eq(s, "rows<=1,cols=4096");
  op->bucket_str(key_of(3000, 4096), s, sizeof s);
  ck_assert_str_eq(s, "rows<=4096,cols=4096");
  op->bucket_str(key_of(4096, 4096), s, sizeof s);
  ck_assert_str_eq(s, "rows<=4096,cols=4096");
  op->bucket_str(key_of(4097, 4095), s, sizeof s);
  ck_assert_str_eq(s, "rows<=8192,cols=4095");
  ck_assert(key_of(2049, 4096) == key_of(4096, 4096));
  ck_assert(key_of(2048, 4096) != key_of(2049, 4096));
  ck_assert(key_of(100, 4096) != key_of(100, 4097));
  ck_assert(key_of(1, 1) != 0);
  op->bucket_str(key_of((int64_t)1 << 40, 65536), s, sizeof s);
  ck_assert_str_eq(s, "rows<=1099511627776,cols=65536");
}
END_TEST

START_TEST(bucket_strings_roundtrip) {
  const long shapes[][2] = {{1, 1}, {7, 100}, {16384, 4096}, {1L << 30, 65536}};
  for (size_t i = 0; i < 4; i++) {
    char s[96];
    uint64_t k = key_of(shapes[i][0], shapes[i][1]), back = 0;
    op->bucket_str(k, s, sizeof s);
    ck_assert_int_eq(op->bucket_parse(s, &back), 0);
    ck_assert(back == k);
  }
  uint64_t k;
  ck_assert_int_eq(op->bucket_parse("rows<=100,cols=4096", &k), -1); /* not a power of two */
  ck_assert_int_eq(op->bucket_parse("rows<=128,cols=0", &k), -1);
  ck_assert_int_eq(op->bucket_parse("rows<=128,cols=70000", &k), -1);
  ck_assert_int_eq(op->bucket_parse("rows<=128,cols=64x", &k), -1);
  ck_assert_int_eq(op->bucket_parse("cols=64", &k), -1);
}
END_TEST

START_TEST(representative_shapes) {
  const scree__variant var = {{SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16}};
  scree_rmsnorm_args a;
  op->representative(key_of(3000, 4096), &var, 0, &a);
  ck_assert_int_eq(a.rows, 4096);
  ck_assert_int_eq(a.cols, 4096);
  ck_assert_int_eq(a.x_dtype, SCREE_DTYPE_BF16);
  ck_assert(a.x == 0 && a.y == 0 && a.w == 0);
  /* Capped at 256 MiB of x. */
  op->representative(key_of(1L << 24, 65536), &var, 0, &a);
  ck_assert_int_eq(a.rows * a.cols * 2, 256L << 20);
  /* The check shape is small but keeps the row length. */
  op->representative(key_of(1L << 20, 8192), &var, 1, &a);
  ck_assert_int_le(a.rows, 97);
  ck_assert_int_eq(a.cols, 8192);
  scree__buf b[SCREE__MAX_BUFS];
  ck_assert_int_eq(op->buffers(&var, &a, b), 3);
  ck_assert_uint_eq(b[0].count, (size_t)(a.rows * 8192));
  ck_assert(!b[0].is_output && !b[1].is_output && b[2].is_output);
}
END_TEST

START_TEST(alignment_classes) {
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  scree_rmsnorm_args a = {.x = 0x1000, .w = 0x2000, .y = 0x3000, .rows = 4, .cols = 4096};
  ck_assert_int_eq(op->adapt_class(&var, &a), 3); /* 16-byte vectors */
  a.cols = 4095;                                  /* odd stride */
  ck_assert_int_eq(op->adapt_class(&var, &a), 0);
  a.cols = 4096;
  a.x = 0x1004; /* 4-byte aligned: vectors of 2 halves */
  ck_assert_int_eq(op->adapt_class(&var, &a), 1);
  scree__config c = {{128, 1, 8, 4}};
  op->adapt(&c, &var, &a);
  ck_assert_int_eq(c.v[2], 2);
  ck_assert_int_eq(c.v[3], 16); /* the same elements per thread */
}
END_TEST

/* The alignment class (trailing-zero arithmetic) against the obvious
 * definition: the widest vector dividing every pointer and stride. */
START_TEST(alignment_class_matches_definition) {
  for (int t = 0; t < 20000; t++) {
    const scree__variant var = {{(int)(scree_test_rand() % 3), (int)(scree_test_rand() % 3),
                                 (int)(scree_test_rand() % 3)}};
    const size_t sx = scree_dtype_size((scree_dtype)var.v[0]),
                 sw = scree_dtype_size((scree_dtype)var.v[1]),
                 sy = scree_dtype_size((scree_dtype)var.v[2]);
    scree_rmsnorm_args a = {.rows = 3, .cols = 1 + (int64_t)(scree_test_rand() % 300)};
    a.x = 0x100000 + sx * (scree_test_rand() % 40);
    a.w = 0x200000 + sw * (scree_test_rand() % 40);
    a.y = 0x300000 + sy * (scree_test_rand() % 40);
    a.x_stride = scree_test_rand() % 2 ? 0 : a.cols + (int64_t)(scree_test_rand() % 9);
    a.y_stride = scree_test_rand() % 2 ? 0 : a.cols + (int64_t)(scree_test_rand() % 9);
    const uint64_t xs = (uint64_t)(a.x_stride ? a.x_stride : a.cols);
    const uint64_t ys = (uint64_t)(a.y_stride ? a.y_stride : a.cols);
    int want = 3;
    while (want > 0) {
      const uint64_t v = 1u << want;
      if (a.x % (v * sx) == 0 && a.w % (v * sw) == 0 && a.y % (v * sy) == 0 && xs % v == 0 &&
          ys % v == 0)
        break;
      want--;
    }
    ck_assert_int_eq(op->adapt_class(&var, &a), want);
    scree__config c = {{128, 1, 8, 2}};
    op->adapt(&c, &var, &a);
    ck_assert_int_eq(c.v[2], 1 << want);
    ck_assert_int_eq(c.v[2] * c.v[3], 16); /* the same elements per thread */
  }
}
END_TEST

START_TEST(variant_strings_roundtrip) {
  const scree__variant var = {{SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, SCREE_DTYPE_FP16}};
  char s[64];
  scree__variant_str(op, &var, s, sizeof s);
  ck_assert_str_eq(s, "x=bf16,w=fp32,y=fp16");
  scree__variant back;
  ck_assert_int_eq(scree__variant_parse(op, s, &back), 0);
  ck_assert_int_eq(memcmp(&back, &var, sizeof var), 0);
  ck_assert_int_eq(scree__variant_parse(op, "x=bf16,w=fp32", &back), -1);
  ck_assert_int_eq(scree__variant_parse(op, "x=bf16,w=fp64,y=fp16", &back), -1);
  ck_assert_int_eq(scree__variant_parse(op, "x=bf16,w=fp32,y=fp16,z=1", &back), -1);
}
END_TEST

START_TEST(cache_key_names_everything) {
  scree_context *ctx = scree__context_offline();
  snprintf(ctx->arch, sizeof ctx->arch, "sm_90");
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  scree__ckey k;
  scree__make_key(ctx, op, &var, key_of(5000, 4096), &k);
  ck_assert_str_eq(k.op, "rmsnorm");
  ck_assert_str_eq(k.bucket, "rows<=8192,cols=4096");
  ck_assert_str_eq(k.dtype, "x=fp16,w=fp16,y=fp16");
  ck_assert_str_eq(k.arch, "sm_90");
  ck_assert_int_eq(k.causal, 0);
  ck_assert_int_eq((int)strlen(k.src_hash), 64);
  /* The source hash is the sha256 of what NVRTC compiles: the source and
   * the shared options. */
  char hex[65], *all;
  const char *src = scree__kernel_source("rmsnorm.cu");
  ck_assert_int_gt(asprintf(&all, "%s\n//nvrtc -std=c++17", src), 0);
  scree__sha256_hex(all, strlen(all), hex);
  free(all);
  ck_assert_str_eq(k.src_hash, hex);
  scree_destroy(ctx);
}
END_TEST

START_TEST(shapes_files) {
  long shapes[8][2];
  scree_dtype dts[3];
  int ndt;
  char why[128];
  ck_assert_int_eq(scree__parse_shapes("{\"shapes\": [[16384, 4096], [8,\n 128]], "
                                       "\"dtypes\": [\"fp16\", \"bf16\"]}",
                                       shapes, 8, dts, 3, &ndt, why, sizeof why), 2);
  ck_assert_int_eq(shapes[0][0], 16384);
  ck_assert_int_eq(shapes[1][1], 128);
  ck_assert_int_eq(ndt, 2);
  ck_assert_int_eq(dts[1], SCREE_DTYPE_BF16);
  ck_assert_int_eq(scree__parse_shapes("{\"shapes\": [[1, 2]]}", shapes, 8, dts, 3, &ndt, why,
                                       sizeof why), 1);
  ck_assert_int_eq(ndt, 0);
  ck_assert_int_eq(scree__parse_shapes("{\"shapes\": [[1, 2, 3]]}", shapes, 8, dts, 3, &ndt,
                                       why, sizeof why), -1);
  ck_assert(strstr(why, "shape 1"));
  ck_assert_int_eq(scree__parse_shapes("{\"shapes\": [[0, 2]]}", shapes, 8, dts, 3, &ndt, why,
                                       sizeof why), -1);
  ck_assert_int_eq(scree__parse_shapes("{\"dtypes\": [\"fp64\"], \"shapes\": []}", shapes, 8,
                                       dts, 3, &ndt, why, sizeof why), -1);
  ck_assert(strstr(why, "fp64"));
  ck_assert_int_eq(scree__parse_shapes("{}", shapes, 8, dts, 3, &ndt, why, sizeof why), -1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("bucket");
  TCase *tc = tcase_create("core");
  tcase_add_unchecked_fixture(tc, setup, NULL);
  tcase_add_test(tc, rows_round_up_to_powers_of_two_cols_exact);
  tcase_add_test(tc, bucket_strings_roundtrip);
  tcase_add_test(tc, representative_shapes);
  tcase_add_test(tc, alignment_classes);
  tcase_add_test(tc, alignment_class_matches_definition);
  tcase_add_test(tc, variant_strings_roundtrip);
  tcase_add_test(tc, cache_key_names_everything);
  tcase_add_test(tc, shapes_files);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
