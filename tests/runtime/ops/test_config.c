/* test_config.c - the generic text forms of ops/config.c (configs, variants,
 * buckets, shapes), RMSNorm's bucket and alignment hooks, cache keys, and
 * paged attention's choice of implementation (no GPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const scree__op *op;
static void setup(void) { op = scree__op_find("rmsnorm"); }

static scree__bucket key_of(long rows, long cols) {
  scree_rmsnorm_args a = {.rows = rows, .cols = cols};
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  scree__bucket b;
  scree__bucket_of(op, &var, &a, &b);
  return b;
}

static void bstr(scree__bucket b, char *s, size_t n) { scree__bucket_str(op, &b, s, n); }
static int beq(scree__bucket a, scree__bucket b) { return !memcmp(&a, &b, sizeof a); }

START_TEST(rows_round_up_to_powers_of_two_cols_exact) {
  char s[96];
  bstr(key_of(1, 4096), s, sizeof s);
  ck_assert_str_eq(s, "rows<=1,cols=4096");
  bstr(key_of(3000, 4096), s, sizeof s);
  ck_assert_str_eq(s, "rows<=4096,cols=4096");
  bstr(key_of(4096, 4096), s, sizeof s);
  ck_assert_str_eq(s, "rows<=4096,cols=4096");
  bstr(key_of(4097, 4095), s, sizeof s);
  ck_assert_str_eq(s, "rows<=8192,cols=4095");
  ck_assert(beq(key_of(2049, 4096), key_of(4096, 4096)));
  ck_assert(!beq(key_of(2048, 4096), key_of(2049, 4096)));
  ck_assert(!beq(key_of(100, 4096), key_of(100, 4097)));
  bstr(key_of((int64_t)1 << 40, 65536), s, sizeof s);
  ck_assert_str_eq(s, "rows<=1099511627776,cols=65536");
}
END_TEST

START_TEST(bucket_strings_roundtrip) {
  const long shapes[][2] = {{1, 1}, {7, 100}, {16384, 4096}, {1L << 30, 65536}};
  char why[256];
  for (size_t i = 0; i < 4; i++) {
    char s[96];
    scree__bucket k = key_of(shapes[i][0], shapes[i][1]), back;
    bstr(k, s, sizeof s);
    ck_assert_int_eq(scree__bucket_parse(op, s, &back, why, sizeof why), 0);
    ck_assert(beq(back, k));
  }
  scree__bucket k;
  ck_assert_int_eq(scree__bucket_parse(op, "rows<=100,cols=4096", &k, why, sizeof why), -1);
  ck_assert(strstr(why, "power of two"));
  ck_assert_int_eq(scree__bucket_parse(op, "rows<=128,cols=64x", &k, why, sizeof why), -1);
  ck_assert_int_eq(scree__bucket_parse(op, "cols=64", &k, why, sizeof why), -1);
  ck_assert_int_eq(scree__bucket_parse(op, "rows=128,cols=64", &k, why, sizeof why), -1);
  ck_assert_int_eq(scree__bucket_parse(op, "rows<=128,cols=64,", &k, why, sizeof why), -1);
  /* Attention: exact and power-of-two dimensions mixed. */
  const scree__op *at = scree__op_find("attention");
  ck_assert_int_eq(scree__bucket_parse(at, "group=4,heads_kv=8,max_q<=2048,max_k<=2048,"
                                           "total_q<=65536", &k, why, sizeof why), 0);
  ck_assert_int_eq(k.v[0], 4);
  ck_assert_int_eq(k.v[4], 65536);
}
END_TEST

START_TEST(attention_buckets) {
  const scree__op *at = scree__op_find("attention");
  scree_attention_args a = {.batch = 64, .total_q = 65857, .total_k = 65857,
                            .max_seqlen_q = 4096, .max_seqlen_k = 3000, .heads_q = 32,
                            .heads_kv = 8, .head_dim = 128};
  const scree__variant var = {{SCREE_DTYPE_BF16, 128, 1, 0}};
  scree__bucket b;
  scree__bucket_of(at, &var, &a, &b);
  char s[512];
  scree__bucket_str(at, &b, s, sizeof s);
  ck_assert_str_eq(s, "group=4,heads_kv=8,max_q<=4096,max_k<=4096,total_q<=131072");
  scree__variant_str(at, &var, s, sizeof s);
  ck_assert_str_eq(s, "dtype=bf16,head_dim=128,causal=1,window=0");
  ck_assert_int_eq(scree__variant_causal(at, &var), 1);
  /* The shape text round-trips through the op's own fields. */
  scree__shape_str(at, &a, s, sizeof s);
  scree_attention_args back;
  memset(&back, 0, sizeof back);
  char why[256];
  ck_assert_int_eq(scree__shape_parse(at, s, &back, why, sizeof why), 0);
  ck_assert_int_eq(back.total_q, 65857);
  ck_assert_int_eq(back.heads_kv, 8);
  ck_assert_int_eq(scree__shape_parse(at, "batch=2,heads=3", &back, why, sizeof why), -1);
  ck_assert(strstr(why, "heads_q"));
  /* Values past 2^40 either way are refused, naming the field and the value
   * as written: heads_q=2^62 overflowed the problem hook's heads_q *
   * head_dim (UBSan, through prewarm --shape). */
  ck_assert_int_eq(scree__shape_parse(at, "heads_q=4611686018427387904", &back, why, sizeof why),
                   -1);
  ck_assert_str_eq(why, "attention shape \"heads_q=4611686018427387904\": "
                        "heads_q=4611686018427387904 is out of range (-2^40 to 2^40)");
  ck_assert_int_eq(scree__shape_parse(at, "batch=1,total_q=99999999999999999999", &back, why,
                                      sizeof why),
                   -1);
  ck_assert(strstr(why, ": total_q=99999999999999999999 is out of range"));
  ck_assert_int_eq(scree__shape_parse(at, "window_left=-1099511627777", &back, why, sizeof why),
                   -1);
  memset(&back, 0, sizeof back);
  ck_assert_int_eq(scree__shape_parse(at, "total_q=1099511627776,window_left=-1099511627776",
                                      &back, why, sizeof why),
                   0);
  ck_assert_int_eq(back.total_q, 1099511627776LL);
  ck_assert_int_eq(back.window_left, -1099511627776LL);
}
END_TEST

START_TEST(configs_roundtrip_and_check) {
  const scree__op *at = scree__op_find("attention");
  scree__config all[4096];
  const int n = scree__config_space(at, all, 4096);
  ck_assert_int_gt(n, 100);
  scree__target t;
  ck_assert_int_eq(scree__target_for_arch("sm_90", &t), 0);
  ck_assert_int_eq(t.sm, 90);
  scree__variant var;
  scree__variant_example(at, &var);
  int valid = 0;
  char why[256];
  for (int i = 0; i < n && i < 4096; i++) {
    char s[128];
    scree__config back;
    scree__config_str(at, &all[i], s, sizeof s);
    ck_assert_int_eq(scree__config_parse(at, s, &back, why, sizeof why), 0);
    ck_assert_int_eq(memcmp(&back, &all[i], sizeof back), 0);
    valid += scree__config_check(at, &all[i], &var, &t, why, sizeof why);
  }
  ck_assert_int_gt(valid, 10);
  ck_assert_int_lt(valid, n);
  scree__config c;
  ck_assert_int_eq(scree__config_parse(op, "tpr=128,rows=1,vec=8", &c, why, sizeof why), -1);
  ck_assert(strstr(why, "cache missing"));
  ck_assert_int_eq(scree__config_parse(op, "tpr=128,rows=1,vec=8,cache=4,x=1", &c, why, sizeof why), -1);
  ck_assert_int_eq(scree__config_parse(op, "impl=generic,tpr=128,rows=1,vec=8,cache=4", &c, why,
                                       sizeof why), 0);
  ck_assert_int_eq(scree__config_parse(op, "impl=hopper,tpr=128,rows=1,vec=8,cache=4", &c, why,
                                       sizeof why), -1);
  /* An architecture outside the implementation's range fails the check. */
  scree__target old = {75, 64 * 1024, 1};
  ck_assert_int_eq(scree__config_parse(op, "tpr=128,rows=1,vec=8,cache=4", &c, why, sizeof why), 0);
  scree__variant rv;
  scree__variant_example(op, &rv);
  ck_assert_int_eq(scree__config_check(op, &c, &rv, &old, why, sizeof why), 0);
  ck_assert(strstr(why, "sm_80"));
}
END_TEST

START_TEST(representative_shapes) {
  const scree__variant var = {{SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16}};
  scree_rmsnorm_args a;
  scree__bucket bk = key_of(3000, 4096);
  op->representative(&bk, &var, 0, &a);
  ck_assert_int_eq(a.rows, 4096);
  ck_assert_int_eq(a.cols, 4096);
  ck_assert_int_eq(a.x_dtype, SCREE_DTYPE_BF16);
  ck_assert(a.x == 0 && a.y == 0 && a.w == 0);
  /* Capped at 1 GiB of x. */
  bk = key_of(1L << 24, 65536);
  op->representative(&bk, &var, 0, &a);
  ck_assert_int_eq(a.rows * a.cols * 2, 1L << 30);
  /* The check shape is small but keeps the row length. */
  bk = key_of(1L << 20, 8192);
  op->representative(&bk, &var, 1, &a);
  ck_assert_int_le(a.rows, 97);
  ck_assert_int_eq(a.cols, 8192);
  scree__problem p;
  memset(&p, 0, sizeof p);
  char why[128];
  ck_assert_int_eq(op->problem(&a, &var, 1, 1, NULL, &p, why, sizeof why), 0);
  /* x, w, y and, in a check problem, rstd. */
  ck_assert_int_eq(p.nbufs, 4);
  ck_assert_uint_eq(p.bufs[0].count, (size_t)(a.rows * 8192));
  ck_assert(p.bufs[0].kind == SCREE__BUF_IN && p.bufs[1].kind == SCREE__BUF_IN &&
            p.bufs[2].kind == SCREE__BUF_OUT && p.bufs[3].kind == SCREE__BUF_OUT);
  ck_assert_uint_eq(p.bufs[3].count, (size_t)a.rows);
  ck_assert(p.bytes > 0);
  scree__problem_free(&p);
}
END_TEST

START_TEST(alignment_classes) {
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  scree_rmsnorm_args a = {.x = 0x1000, .w = 0x2000, .y = 0x3000, .rows = 4, .cols = 4096};
  ck_assert_int_eq(scree__adapt_class(op, &var, &a), 3); /* 16-byte vectors */
  a.cols = 4095;                                  /* odd stride */
  ck_assert_int_eq(scree__adapt_class(op, &var, &a), 0);
  a.cols = 4096;
  a.x = 0x1004; /* 4-byte aligned: vectors of 2 halves */
  ck_assert_int_eq(scree__adapt_class(op, &var, &a), 1);
  scree__config c = {0, {128, 1, 8, 4}};
  op->impls[0].adapt(&c, &var, &a);
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
    ck_assert_int_eq(scree__adapt_class(op, &var, &a), want);
    scree__config c = {0, {128, 1, 8, 2}};
    op->impls[0].adapt(&c, &var, &a);
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
  char why[256];
  ck_assert_int_eq(scree__variant_parse(op, s, &back, why, sizeof why), 0);
  ck_assert_int_eq(memcmp(&back, &var, sizeof var), 0);
  ck_assert_int_eq(scree__variant_parse(op, "x=bf16,w=fp32", &back, why, sizeof why), -1);
  ck_assert_int_eq(scree__variant_parse(op, "x=bf16,w=fp64,y=fp16", &back, why, sizeof why), -1);
  ck_assert_int_eq(scree__variant_parse(op, "x=bf16,w=fp32,y=fp16,z=1", &back, why, sizeof why),
                   -1);
  ck_assert_int_eq(scree__variant_parse(op, "w=fp32,x=bf16,y=fp16", &back, why, sizeof why), -1);
  ck_assert(strstr(why, "canonical"));
}
END_TEST

START_TEST(cache_key_names_everything) {
  scree_context *ctx = scree__context_offline();
  snprintf(ctx->arch, sizeof ctx->arch, "sm_90");
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  scree__ckey k;
  const scree__bucket bk = key_of(5000, 4096);
  scree__make_key(ctx, op, &var, &bk, &k);
  ck_assert_str_eq(k.op, "rmsnorm");
  ck_assert_str_eq(k.bucket, "rows<=8192,cols=4096");
  ck_assert_str_eq(k.dtype, "x=fp16,w=fp16,y=fp16");
  ck_assert_str_eq(k.arch, "sm_90");
  ck_assert_int_eq(k.causal, 0);
  ck_assert_int_eq((int)strlen(k.src_hash), 64);
  /* The source hash is the sha256 of what NVRTC compiles for each
   * implementation and the shared options. */
  char hex[65], *all;
  const char *src = scree__kernel_source("rmsnorm.cu");
  ck_assert_int_gt(asprintf(&all, "//impl generic scree_rmsnorm\n%s\n//nvrtc -std=c++17", src), 0);
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
  /* Values past 2^40 (as prewarm's --rows-max), and past a long, are
   * refused, naming the value as written; they were accepted, the latter
   * as LONG_MAX. 2^40 itself is accepted. */
  static const struct {
    const char *json, *why;
  } big[] = {
      {"{\"shapes\": [[99999999999999999999999, 4096]]}",
       "shape 1: rows 99999999999999999999999 is out of range (1 to 2^40 = 1099511627776)"},
      {"{\"shapes\": [[1, 2], [8, 1099511627777]]}",
       "shape 2: cols 1099511627777 is out of range (1 to 2^40 = 1099511627776)"},
      {"{\"shapes\": [[ -99999999999999999999999, 1]]}",
       "shape 1: rows -99999999999999999999999 is out of range (1 to 2^40 = 1099511627776)"},
  };
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    ck_assert_int_eq(scree__parse_shapes(big[i].json, shapes, 8, dts, 3, &ndt, why, sizeof why),
                     -1);
    ck_assert_str_eq(why, big[i].why);
  }
  ck_assert_int_eq(scree__parse_shapes("{\"shapes\": [[1099511627776, 1099511627776]]}", shapes,
                                       8, dts, 3, &ndt, why, sizeof why),
                   1);
  ck_assert_int_eq(shapes[0][0], 1099511627776L);
}
END_TEST

/* Paged attention's hopper implementation: the default takes it for
 * prefill-like calls on sm_90 with tensor maps (head_dim 64 or 128, pages of
 * 8 tokens or more, a longest query sequence above 64), with scree_attention's
 * hopper default, and the split implementation otherwise. A call with pages
 * of 1 token never runs it: its adapt turns any hopper config (cached,
 * shipped, asked for) into the split default for the call, which dispatch,
 * the tuner and verify apply to every config, and the plan key's class
 * keeps such calls apart. */
START_TEST(paged_hopper_choice) {
  const scree__op *pa = scree__op_find("paged_attention"), *at = scree__op_find("attention");
  int split = -1, hopper = -1;
  for (int i = 0; i < pa->nimpls; i++) {
    if (!strcmp(pa->impls[i].name, "split")) split = i;
    if (!strcmp(pa->impls[i].name, "hopper")) hopper = i;
  }
  ck_assert_int_ge(split, 0);
  ck_assert_int_ge(hopper, 0);
  ck_assert_ptr_nonnull(pa->impls[hopper].adapt);
  scree__target h100 = {90, 227 * 1024, 1};
  const scree__target a100 = {80, 163 * 1024, 1};
  scree__variant var = {{SCREE_DTYPE_BF16, 128}};
  scree_paged_attention_args a = {
      .batch = 4, .total_q = 4 * 4096, .max_seqlen_q = 4096, .max_seqlen_k = 4096,
      .num_pages = 1024, .page_size = 16, .block_table_stride = 256, .heads_q = 32,
      .heads_kv = 8, .head_dim = 128, .dtype = SCREE_DTYPE_BF16, .causal = 1,
      .window_left = -1, .window_right = -1};
  scree__config c, want;
  char why[256] = "";
  pa->default_config(&h100, &var, &a, &c);
  ck_assert_int_eq(c.impl, hopper);
  ck_assert_msg(scree__config_check(pa, &c, &var, &h100, why, sizeof why), "%s", why);
  /* scree_attention's hopper default for the same head_dim */
  const scree__variant avar = {{SCREE_DTYPE_BF16, 128, 1, 0}};
  at->default_config(&h100, &avar, NULL, &want);
  ck_assert_str_eq(at->impls[want.impl].name, "hopper");
  ck_assert_int_eq(memcmp(c.v, want.v, sizeof c.v), 0);
  scree__config hc = c;
  /* not prefill-like, or not on sm_90: split */
  pa->default_config(&a100, &var, &a, &c);
  ck_assert_int_eq(c.impl, split);
  h100.tensor_maps = 0;
  pa->default_config(&h100, &var, &a, &c);
  ck_assert_int_eq(c.impl, split);
  h100.tensor_maps = 1;
  a.max_seqlen_q = 64;
  pa->default_config(&h100, &var, &a, &c);
  ck_assert_int_eq(c.impl, split);
  a.max_seqlen_q = 65;
  pa->default_config(&h100, &var, &a, &c);
  ck_assert_int_eq(c.impl, hopper);
  var.v[1] = 256;
  pa->default_config(&h100, &var, &a, &c);
  ck_assert_int_eq(c.impl, split);
  var.v[1] = 64;
  pa->default_config(&h100, &var, &a, &c);
  ck_assert_int_eq(c.impl, hopper);
  var.v[1] = 128;
  ck_assert(scree__config_check(pa, &hc, &var, &h100, NULL, 0));
  /* page size 8: the hopper config stays; page size 1: the split default */
  a.page_size = 8;
  const int cls8 = scree__adapt_class(pa, &var, &a);
  c = hc;
  pa->impls[hopper].adapt(&c, &var, &a);
  ck_assert_int_eq(memcmp(&c, &hc, sizeof c), 0);
  a.page_size = 1;
  ck_assert_int_ne(scree__adapt_class(pa, &var, &a), cls8);
  pa->default_config(&h100, &var, &a, &c);
  ck_assert_int_eq(c.impl, split);
  want = c;
  c = hc;
  pa->impls[hopper].adapt(&c, &var, &a);
  ck_assert_int_eq(c.impl, split);
  ck_assert_int_eq(memcmp(&c, &want, sizeof c), 0);
  ck_assert_msg(scree__config_check(pa, &c, &var, &h100, why, sizeof why), "%s", why);
  /* a call's representative (the tuner's, verify's) adapts alike */
  scree__bucket b;
  scree__bucket_of(pa, &var, &a, &b);
  _Alignas(16) unsigned char rep[SCREE__ARGS_MAX];
  pa->representative(&b, &var, 0, rep);
  c = hc;
  pa->impls[hopper].adapt(&c, &var, rep);
  ck_assert_int_eq(c.impl, split);
}
END_TEST

/* Cross-entropy defaults to impl=generic (impl=keep, measured slower
 * untuned, is a tuning candidate); every default passes the check. keep's
 * shapes pass it; its adapt narrows vectors keeping the row held (more
 * threads), and gives a call whose row no longer fits impl=generic's
 * default. */
/* The attention backward's hopper_ws implementation: sm_90 only, refused
 * with a reason where the driver builds no tensor maps, a producer
 * warpgroup beside bn / 64 consumers, and the shared memory of the
 * kernel's layout (its static_assert states the same formula): the
 * largest config, head_dim 128 with 128 keys and 3 stages, fits sm_90. */
START_TEST(attention_backward_hopper_ws_host) {
  const scree__op *ab = scree__op_find("attention_backward");
  int ws = -1;
  for (int i = 0; i < ab->nimpls; i++)
    if (!strcmp(ab->impls[i].name, "hopper_ws")) ws = i;
  ck_assert_int_ge(ws, 0);
  ck_assert_str_eq(ab->impls[ws].source, "attention_backward_hopper.cu");
  ck_assert_str_eq(ab->impls[ws].defines, "SCREE_WS=1");
  const scree__target h100 = {90, 227 * 1024, 1}, nomaps = {90, 227 * 1024, 0},
                      a100 = {80, 163 * 1024, 1};
  char why[256] = "";
  scree__variant var;
  ck_assert_int_eq(
      scree__variant_parse(ab, "dtype=bf16,head_dim=128,causal=1,window=0", &var, why, sizeof why),
      0);
  scree__config c;
  ck_assert_int_eq(
      scree__config_parse(ab, "impl=hopper_ws,bn=128,stages=3,ovl=1,dqb=0", &c, why, sizeof why), 0);
  ck_assert_msg(scree__config_check(ab, &c, &var, &h100, why, sizeof why), "%s", why);
  ck_assert_int_eq(ab->impls[ws].threads(&c), 384);
  /* 2 x 128 x (256 + 384) + 256 x 128 + 528 x 3 + 24 + 16 + 1024 */
  ck_assert_uint_eq(ab->impls[ws].smem(&c, &var), 199256);
  /* dqb=1 adds dQ's staging rows, 64 x (4 x 128 + 16) bytes: past sm_90's
   * 232448 at stages 3, within it at 2. */
  ck_assert_int_eq(
      scree__config_parse(ab, "impl=hopper_ws,bn=128,stages=3,ovl=1,dqb=1", &c, why, sizeof why), 0);
  ck_assert_uint_eq(ab->impls[ws].smem(&c, &var), 199256 + 33792);
  ck_assert(!scree__config_check(ab, &c, &var, &h100, why, sizeof why));
  ck_assert_msg(strstr(why, "shared memory") != NULL, "%s", why);
  ck_assert_int_eq(
      scree__config_parse(ab, "impl=hopper_ws,bn=128,stages=2,ovl=1,dqb=1", &c, why, sizeof why), 0);
  ck_assert_msg(scree__config_check(ab, &c, &var, &h100, why, sizeof why), "%s", why);
  ck_assert_int_eq(
      scree__config_parse(ab, "impl=hopper_ws,bn=128,stages=3,ovl=1,dqb=0", &c, why, sizeof why), 0);
  why[0] = 0;
  ck_assert(!scree__config_check(ab, &c, &var, &nomaps, why, sizeof why));
  ck_assert_msg(strstr(why, "tensor maps") != NULL, "%s", why);
  ck_assert(!scree__config_check(ab, &c, &var, &a100, why, sizeof why));
  ck_assert_int_eq(
      scree__config_parse(ab, "impl=hopper_ws,bn=64,stages=2,ovl=0,dqb=0", &c, why, sizeof why), 0);
  ck_assert_int_eq(ab->impls[ws].threads(&c), 256);
  ck_assert_int_eq(
      scree__variant_parse(ab, "dtype=fp16,head_dim=64,causal=0,window=1", &var, why, sizeof why),
      0);
  /* 2 x 64 x (128 + 256) + 256 x 64 + 528 x 2 + 24 + 16 + 1024 */
  ck_assert_uint_eq(ab->impls[ws].smem(&c, &var), 67656);
  ck_assert_msg(scree__config_check(ab, &c, &var, &h100, why, sizeof why), "%s", why);
}
END_TEST

START_TEST(cross_entropy_keep_choice) {
  const scree__op *ce = scree__op_find("cross_entropy");
  int generic = -1, keep = -1;
  for (int i = 0; i < ce->nimpls; i++) {
    if (!strcmp(ce->impls[i].name, "generic")) generic = i;
    if (!strcmp(ce->impls[i].name, "keep")) keep = i;
  }
  ck_assert_int_ge(generic, 0);
  ck_assert_int_ge(keep, 0);
  const scree__target h100 = {90, 227 * 1024, 1}, a100 = {80, 163 * 1024, 1};
  /* generic is every call's default (keep measured slower untuned). */
  static const struct {
    int sm, dtype, grad;
    int64_t vocab;
  } want[] = {
      {90, SCREE_DTYPE_BF16, 1, 32000},  {90, SCREE_DTYPE_BF16, 1, 128256},
      {90, SCREE_DTYPE_FP32, 1, 262144}, {90, SCREE_DTYPE_BF16, 0, 32000},
      {80, SCREE_DTYPE_BF16, 1, 32000},  {90, SCREE_DTYPE_FP16, 1, 1},
  };
  char why[256] = "";
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const scree__target *t = want[i].sm == 90 ? &h100 : &a100;
    scree__variant var = {{want[i].dtype, want[i].grad}};
    scree_cross_entropy_args a = {.rows = 8192, .vocab = want[i].vocab, .dtype = want[i].dtype,
                                  .logits = 1 << 20, .dlogits = want[i].grad ? 1 << 24 : 0};
    scree__config c;
    ce->default_config(t, &var, &a, &c);
    ck_assert_msg(c.impl == generic, "case %zu: impl %d", i, c.impl);
    ck_assert_msg(scree__config_check(ce, &c, &var, t, why, sizeof why), "case %zu: %s", i, why);
  }
  /* keep's shapes: aligned, adapt keeps them, and they are worth timing. */
  static const char *const shapes[] = {"impl=keep,tpr=512,rows=1,vec=8,cache=4,csize=2",
                                        "impl=keep,tpr=512,rows=1,vec=8,cache=4,csize=8"};
  static const int64_t vocabs[] = {32000, 128256};
  for (int i = 0; i < 2; i++) {
    scree__variant var = {{SCREE_DTYPE_BF16, 1}};
    scree_cross_entropy_args a = {.rows = 8192, .vocab = vocabs[i], .dtype = SCREE_DTYPE_BF16,
                                  .logits = 1 << 20, .dlogits = 1 << 24};
    scree__config c;
    ck_assert_int_eq(scree__config_parse(ce, shapes[i], &c, why, sizeof why), 0);
    ck_assert_msg(scree__config_check(ce, &c, &var, &h100, why, sizeof why), "%s", why);
    ck_assert(ce->impls[keep].worth_timing(&c, &var, &a));
    scree__config d = c;
    ce->impls[keep].adapt(&d, &var, &a);
    ck_assert_int_eq(memcmp(&d, &c, sizeof d), 0);
  }
  /* Rows starting 2 bytes off: 128256 bf16 stays keep (scalar, 1024
   * threads); 262144 bf16 no longer fits and becomes generic. */
  scree__variant var = {{SCREE_DTYPE_BF16, 1}};
  scree_cross_entropy_args a = {.rows = 64, .vocab = 128256, .dtype = SCREE_DTYPE_BF16,
                                .logits = (1 << 20) + 2, .dlogits = 1 << 24};
  scree__config c;
  ck_assert_int_eq(scree__config_parse(ce, "impl=keep,tpr=512,rows=1,vec=8,cache=4,csize=8", &c,
                                       why, sizeof why),
                   0);
  ce->impls[keep].adapt(&c, &var, &a);
  ck_assert_int_eq(c.impl, keep);
  ck_assert_int_eq(c.v[2], 1);
  ck_assert(ce->impls[keep].worth_timing(&c, &var, &a));
  ck_assert_msg(scree__config_check(ce, &c, &var, &h100, why, sizeof why), "%s", why);
  a.vocab = 262144;
  ck_assert_int_eq(scree__config_parse(ce, "impl=keep,tpr=1024,rows=1,vec=8,cache=4,csize=8", &c,
                                       why, sizeof why),
                   0);
  ce->impls[keep].adapt(&c, &var, &a);
  ck_assert_int_eq(c.impl, generic);
  ck_assert_int_eq(c.v[2], 1);
  ck_assert_msg(scree__config_check(ce, &c, &var, &h100, why, sizeof why), "%s", why);
  /* keep refuses grad=0, and clusters on sm_80 */
  scree__variant fwd = {{SCREE_DTYPE_BF16, 0}};
  ck_assert_int_eq(scree__config_parse(ce, "impl=keep,tpr=512,rows=1,vec=8,cache=4,csize=1", &c,
                                       why, sizeof why),
                   0);
  ck_assert(!scree__config_check(ce, &c, &fwd, &h100, why, sizeof why));
  ck_assert_int_eq(scree__config_parse(ce, "impl=keep,tpr=512,rows=1,vec=8,cache=4,csize=2", &c,
                                       why, sizeof why),
                   0);
  ck_assert(scree__config_check(ce, &c, &var, &h100, why, sizeof why));
  ck_assert(!scree__config_check(ce, &c, &var, &a100, why, sizeof why));
  ck_assert_msg(strstr(why, "csize=2"), "%s", why);
}
END_TEST

SCREE_TEST_MAIN(.name = "config", .setup_once = setup,
                .tests = SCREE_TESTS(rows_round_up_to_powers_of_two_cols_exact,
                                     bucket_strings_roundtrip, attention_buckets,
                                     configs_roundtrip_and_check, representative_shapes,
                                     alignment_classes, alignment_class_matches_definition,
                                     variant_strings_roundtrip, cache_key_names_everything,
                                     shapes_files, paged_hopper_choice,
                                     cross_entropy_keep_choice,
                                     attention_backward_hopper_ws_host))
