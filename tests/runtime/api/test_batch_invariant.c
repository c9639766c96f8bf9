/* test_batch_invariant.c - batch-invariant mode without a GPU
 * (docs/cache.md#batch-invariant-mode): the option and $SCREE_BATCH_INVARIANT,
 * the "any" buckets every forward op's calls get whatever their batch, their
 * text form, cache keys that never meet a normal-mode winner, default
 * configs chosen without the call's batch, and paged attention's split
 * count from a sequence's own keys. The bitwise outputs are
 * test_batch_invariance_gpu's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

/* The ops the mode covers: every forward op. */
static const char *const forward_ops[] = {
    "rmsnorm", "add_rmsnorm", "layernorm", "softmax",  "ragged_softmax",  "swiglu",
    "rope",    "cross_entropy", "kv_append", "attention", "paged_attention",
};

START_TEST(option_field_env_and_precedence) {
  scree_options o;
  scree_options_init(&o);
  ck_assert_int_eq(o.batch_invariant, 0);
  unsetenv("SCREE_BATCH_INVARIANT");
  ck_assert_int_eq(scree__options_batch_invariant(&o), 0);
  ck_assert_int_eq(scree__options_batch_invariant(NULL), 0);
  setenv("SCREE_BATCH_INVARIANT", "1", 1);
  ck_assert_int_eq(scree__options_batch_invariant(&o), 1);
  ck_assert_int_eq(scree__options_batch_invariant(NULL), 1);
  setenv("SCREE_BATCH_INVARIANT", "0", 1);
  ck_assert_int_eq(scree__options_batch_invariant(&o), 0);
  setenv("SCREE_BATCH_INVARIANT", "", 1);
  ck_assert_int_eq(scree__options_batch_invariant(&o), 0);
  o.batch_invariant = 1; /* the field on, whatever the environment */
  ck_assert_int_eq(scree__options_batch_invariant(&o), 1);
  setenv("SCREE_BATCH_INVARIANT", "1", 1);
  o.batch_invariant = -1; /* the field off, whatever the environment */
  ck_assert_int_eq(scree__options_batch_invariant(&o), 0);
  unsetenv("SCREE_BATCH_INVARIANT");
}
END_TEST

/* Two calls of op that differ only in their batch (its bench entry's
 * shape as its bucket's representative, and that bucket with every batch
 * dimension moved). */
static void two_batches(const scree__op *op, scree__variant *var, void *a1, void *a2) {
  char text[512], why[256];
  snprintf(text, sizeof text, "%s", op->bench[0]);
  char *sp = strchr(text, ' ');
  ck_assert_ptr_nonnull(sp);
  *sp = 0;
  char *lens = strchr(sp + 1, ' '); /* a varlen entry's " lens=..." */
  if (lens) *lens = 0;
  memset(var, 0, sizeof *var);
  ck_assert_msg(!scree__variant_parse(op, text, var, why, sizeof why), "%s: %s", op->name, why);
  _Alignas(16) unsigned char shape[SCREE__ARGS_MAX];
  memset(shape, 0, sizeof shape);
  ck_assert_msg(!scree__shape_parse(op, sp + 1, shape, why, sizeof why), "%s: %s", op->name, why);
  scree__variant_dtypes(op->vfields, op->nvfields, var, shape);
  scree__bucket b, b2;
  scree__bucket_of(op, var, shape, &b);
  b2 = b;
  for (int i = 0; i < op->ndims; i++)
    if (op->dims[i].any) b2.v[i] = b.v[i] == 1 ? 64 : 1;
  memset(a1, 0, SCREE__ARGS_MAX);
  memset(a2, 0, SCREE__ARGS_MAX);
  op->representative(&b, var, 0, a1);
  op->representative(&b2, var, 0, a2);
}

/* Every forward op has batch dimensions, and in batch-invariant mode two
 * calls that differ only in the batch share one bucket, with "any" in its
 * text; without the mode they do not (the test can fail). Backward ops
 * are not covered: their buckets keep their sizes. */
START_TEST(forward_buckets_ignore_the_batch) {
  scree_context *inv = scree__context_offline(), *plain = scree__context_offline();
  inv->batch_invariant = 1;
  for (size_t i = 0; i < sizeof forward_ops / sizeof forward_ops[0]; i++) {
    const scree__op *op = scree__op_find(forward_ops[i]);
    ck_assert_ptr_nonnull(op);
    int nany = 0;
    for (int d = 0; d < op->ndims; d++) nany += op->dims[d].any > 0;
    ck_assert_msg(nany > 0, "%s has no batch dimension", op->name);
    scree__variant var;
    _Alignas(16) unsigned char a1[SCREE__ARGS_MAX], a2[SCREE__ARGS_MAX];
    two_batches(op, &var, a1, a2);
    scree__bucket p1, p2, i1, i2;
    scree__call_bucket(plain, op, &var, a1, &p1);
    scree__call_bucket(plain, op, &var, a2, &p2);
    scree__call_bucket(inv, op, &var, a1, &i1);
    scree__call_bucket(inv, op, &var, a2, &i2);
    char s1[256], s2[256];
    scree__bucket_str(op, &p1, s1, sizeof s1);
    scree__bucket_str(op, &p2, s2, sizeof s2);
    ck_assert_msg(strcmp(s1, s2), "%s: normal buckets %s and %s should differ", op->name, s1, s2);
    ck_assert_msg(!scree__bucket_is_invariant(op, &p1), "%s: %s", op->name, s1);
    scree__bucket_str(op, &i1, s1, sizeof s1);
    scree__bucket_str(op, &i2, s2, sizeof s2);
    ck_assert_msg(!memcmp(&i1, &i2, sizeof i1), "%s: invariant buckets %s and %s differ",
                  op->name, s1, s2);
    ck_assert_msg(strstr(s1, "=any"), "%s: %s", op->name, s1);
    ck_assert(scree__bucket_is_invariant(op, &i1));
    /* the text parses back, and its concrete form is the representative batch */
    scree__bucket back, conc;
    char why[256];
    ck_assert_msg(!scree__bucket_parse(op, s1, &back, why, sizeof why), "%s: %s", s1, why);
    ck_assert(!memcmp(&back, &i1, sizeof back));
    scree__bucket_concrete(op, &i1, &conc);
    for (int d = 0; d < op->ndims; d++)
      ck_assert_int_eq(conc.v[d], op->dims[d].any ? op->dims[d].any : i1.v[d]);
  }
  for (int i = 0; scree__ops[i]; i++)
    if (strstr(scree__ops[i]->name, "_backward"))
      for (int d = 0; d < scree__ops[i]->ndims; d++)
        ck_assert_msg(!scree__ops[i]->dims[d].any, "%s", scree__ops[i]->name);
  scree_destroy(inv);
  scree_destroy(plain);
}
END_TEST

START_TEST(any_bucket_text) {
  const scree__op *op = scree__op_find("rmsnorm");
  scree__bucket b;
  char why[256], s[96];
  ck_assert_int_eq(scree__bucket_parse(op, "rows=any,cols=4096", &b, why, sizeof why), 0);
  ck_assert_int_eq(b.v[0], SCREE__BUCKET_ANY);
  ck_assert_int_eq(b.v[1], 4096);
  scree__bucket_str(op, &b, s, sizeof s);
  ck_assert_str_eq(s, "rows=any,cols=4096");
  ck_assert_int_eq(scree__bucket_parse(op, "rows<=64,cols=any", &b, why, sizeof why), -1);
  ck_assert_msg(strstr(why, "cols=any: cols is not a batch dimension"), "%s", why);
  ck_assert_int_eq(scree__bucket_parse(op, "rows=any", &b, why, sizeof why), -1);
  ck_assert_msg(strstr(why, "expected ','"), "%s", why);
  ck_assert_int_eq(scree__bucket_parse(op, "rows=anyx,cols=1", &b, why, sizeof why), -1);
  const scree__op *pa = scree__op_find("paged_attention");
  ck_assert_int_eq(scree__bucket_parse(pa, "batch=any,group=4,heads_kv=8,page=16,max_q=any,"
                                       "max_k=any", &b, why, sizeof why),
                   0);
  scree__bucket_concrete(pa, &b, &b);
  scree__bucket_str(pa, &b, s, sizeof s);
  ck_assert_str_eq(s, "batch<=64,group=4,heads_kv=8,page=16,max_q<=1,max_k<=4096");
}
END_TEST

/* A batch-invariant key is never a normal-mode key: a cache holding the
 * normal winner of the representative batch's bucket answers nothing for
 * it, and each key finds its own winner. */
START_TEST(invariant_keys_never_meet_normal_winners) {
  const scree__op *op = scree__op_find("rmsnorm");
  scree_context *ctx = scree__context_offline();
  snprintf(ctx->arch, sizeof ctx->arch, "sm_90");
  ctx->batch_invariant = 1;
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  scree_rmsnorm_args a = {.rows = 1024, .cols = 4096};
  scree__bucket bi, bn;
  scree__call_bucket(ctx, op, &var, &a, &bi);
  scree__bucket_of(op, &var, &a, &bn); /* rows<=1024: the representative batch's */
  scree__ckey ki, kn;
  scree__make_key(ctx, op, &var, &bi, &ki);
  scree__make_key(ctx, op, &var, &bn, &kn);
  ck_assert_str_eq(ki.bucket, "rows=any,cols=4096");
  ck_assert_str_eq(kn.bucket, "rows<=1024,cols=4096");

  char dir[] = "/tmp/scree-binv-XXXXXX", path[64], why[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tune.db", dir);
  scree__cache *c = NULL;
  ck_assert_int_eq(scree__cache_open(path, 0, &c, NULL, why, sizeof why), SCREE_OK);
  scree__centry e;
  memset(&e, 0, sizeof e);
  e.key = kn;
  snprintf(e.config, sizeof e.config, "tpr=128,rows=1,vec=8,cache=4");
  e.median_us = e.spread_us = 10;
  snprintf(e.device_name, sizeof e.device_name, "test");
  unsigned char cubin[64] = {1, 2, 3};
  e.cubin = cubin;
  e.cubin_size = sizeof cubin;
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_OK);
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &ki, &g), SCREE_ERROR_NOT_FOUND);
  e.key = ki;
  snprintf(e.config, sizeof e.config, "tpr=256,rows=1,vec=8,cache=2");
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_OK);
  ck_assert_int_eq(scree__cache_get(c, &ki, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "tpr=256,rows=1,vec=8,cache=2");
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &kn, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "tpr=128,rows=1,vec=8,cache=4");
  scree__centry_free(&g);
  scree__cache_close(c);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
  scree_destroy(ctx);
}
END_TEST

/* The default config of a batch-invariant bucket comes from its
 * representative batch, not the call's: paged attention's default for one
 * sequence (128-key tiles) differs from that for 64 without the mode, and
 * is the same for both with it. */
START_TEST(default_config_ignores_the_batch) {
  const scree__op *op = scree__op_find("paged_attention");
  scree__target t;
  ck_assert_int_eq(scree__target_for_arch("sm_90", &t), 0);
  scree_context *ctx = scree__context_offline();
  ctx->batch_invariant = 1;
  const scree__variant var = {{SCREE_DTYPE_BF16, 128}};
  scree_paged_attention_args one = {.batch = 1, .total_q = 1, .max_seqlen_q = 1,
                                    .max_seqlen_k = 32768, .num_pages = 4096, .page_size = 16,
                                    .block_table_stride = 2048, .heads_q = 32, .heads_kv = 8,
                                    .head_dim = 128, .dtype = SCREE_DTYPE_BF16, .causal = 1,
                                    .window_left = -1, .window_right = -1};
  scree_paged_attention_args many = one;
  many.batch = 64;
  many.total_q = 64;
  many.max_seqlen_k = 1000;
  scree__config c1, c2;
  op->default_config(&t, &var, &one, &c1);
  op->default_config(&t, &var, &many, &c2);
  ck_assert_msg(memcmp(&c1, &c2, sizeof c1), "the normal defaults should differ");
  _Alignas(16) unsigned char r1[SCREE__ARGS_MAX], r2[SCREE__ARGS_MAX];
  scree__bucket b1, b2;
  scree__call_bucket(ctx, op, &var, &one, &b1);
  scree__call_bucket(ctx, op, &var, &many, &b2);
  const void *d1 = scree__default_args(op, &var, &b1, &one, r1);
  const void *d2 = scree__default_args(op, &var, &b2, &many, r2);
  ck_assert_ptr_eq(d1, r1);
  op->default_config(&t, &var, d1, &c1);
  op->default_config(&t, &var, d2, &c2);
  ck_assert(!memcmp(&c1, &c2, sizeof c1));
  /* a normal bucket's default is the call's own */
  scree__bucket_of(op, &var, &one, &b1);
  ck_assert_ptr_eq(scree__default_args(op, &var, &b1, &one, r1), (const void *)&one);
  scree_destroy(ctx);
}
END_TEST

/* Paged attention in batch-invariant mode: the split field is a fixed
 * chunk of keys, a sequence's split count comes from its own span, and a
 * launch's item bound covers any batch within max_seqlen_k. */
START_TEST(paged_splits_from_the_sequence) {
  ck_assert_int_eq(scree__paged_invariant_chunk(0), 0);
  ck_assert_int_eq(scree__paged_invariant_chunk(1), 4096);
  ck_assert_int_eq(scree__paged_invariant_chunk(2), 2048);
  ck_assert_int_eq(scree__paged_invariant_chunk(4), 1024);
  ck_assert_int_eq(scree__paged_invariant_chunk(8), 512);
  for (int s = 1; s <= 8; s *= 2) /* a multiple of every key tile (32, 64, 128) */
    ck_assert_int_eq(scree__paged_invariant_chunk(s) % 128, 0);
  ck_assert_int_eq(scree__paged_invariant_splits(0, 512, 64), 1);
  ck_assert_int_eq(scree__paged_invariant_splits(1, 512, 64), 1);
  ck_assert_int_eq(scree__paged_invariant_splits(512, 512, 64), 1);
  ck_assert_int_eq(scree__paged_invariant_splits(513, 512, 64), 2);
  ck_assert_int_eq(scree__paged_invariant_splits(32768, 512, 64), 64);
  ck_assert_int_eq(scree__paged_invariant_splits(32768, 0, 64), 1);
  /* past 256 chunks the chunks grow: 200k keys in 256 (evened) */
  ck_assert_int_le(scree__paged_invariant_splits(200000, 512, 128), 256);
  ck_assert_int_eq(scree__paged_invariant_items(10, 5000, 512), 100);
  ck_assert_int_eq(scree__paged_invariant_items(10, 100, 512), 10);
  ck_assert_int_eq(scree__paged_invariant_items(10, 5000, 0), 10);
  ck_assert_int_eq(scree__paged_invariant_items((int64_t)1 << 40, (int64_t)1 << 40, 512),
                   INT64_MAX);
  /* random batches: the launch's bound covers the batch's items, and a
   * sequence's count depends on its own span alone: the same in every
   * batch it is put in */
  uint64_t s = 12345;
  const int64_t target_span = 40000;
  for (int trial = 0; trial < 200; trial++) {
    const int64_t chunk = scree__paged_invariant_chunk(1 << (trial % 4));
    const int bn = 32 << (trial % 3);
    const int n = 1 + trial % 37;
    int64_t maxk = target_span, sum = scree__paged_invariant_splits(target_span, chunk, bn);
    for (int i = 1; i < n; i++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      const int64_t span = (int64_t)(s >> 33) % 70000;
      if (span > maxk) maxk = span;
      sum += scree__paged_invariant_splits(span, chunk, bn);
    }
    ck_assert_int_le(sum, scree__paged_invariant_items(n, maxk, chunk));
  }
  for (int k = 0; k < 4; k++)
    for (int bn = 32; bn <= 128; bn *= 2) {
      const int64_t chunk = scree__paged_invariant_chunk(1 << k);
      ck_assert_int_eq(scree__paged_invariant_splits(target_span, chunk, bn),
                       scree__cdiv(target_span, chunk));
    }
}
END_TEST

SCREE_TEST_MAIN(.name = "batch_invariant",
                .tests = SCREE_TESTS(option_field_env_and_precedence,
                                     forward_buckets_ignore_the_batch, any_bucket_text,
                                     invariant_keys_never_meet_normal_winners,
                                     default_config_ignores_the_batch,
                                     paged_splits_from_the_sequence))
