/* test_paged_attention_gpu.c - attention over a paged KV cache on the GPU
 * against the CPU reference (label gpu; skipped with a reason where there is
 * no GPU).
 *
 * Random inputs, fresh each run (the seed is printed); out and lse are
 * poisoned (NaN) before every launch. The problems are the op's check
 * problems (ops/paged_attention.c): pages shuffled through a pool with
 * spare pages, a prefix shared by two sequences, the last page partly
 * filled, padding between heads, tokens and pages of the cache, and key
 * lengths 0, 1, P - 1, P, P + 1 and longer, query lengths 1, 2, 7 and 64
 * (rows with no key where queries outnumber keys under causal masking); or
 * batches given here (query lengths 1, 2, 7, 64 and 1000 in one batch, a
 * 100k-key sequence). Tolerances as scree_attention's (ops/paged_attention.c
 * states them per output): out 4e-3 + 4e-3 |ref| in fp16, 2e-2 + 2e-2 |ref|
 * in bf16; lse 2e-3 + 1e-4 |ref|, -inf exactly.
 *
 * Covered: every page size, every head_dim, both dtypes, GQA groups 1 to 16
 * and MQA, causal and not, windows, softcap, LSE, split counts forced from
 * one chunk per sequence to the most the plan makes, a spread of tile
 * shapes (every config of the space in the slow set), every safelisted
 * config, SCREE_VALIDATE's checks of device-side lengths and block tables,
 * and an empty call that launches nothing. On sm_90, the hopper
 * implementation (kernels/attention_hopper.cu, SCREE_PAGED) on prefill
 * batches: query lengths 1 to 1000 mixed against prefixes of 0 to 3000
 * keys, pages of 8, 16, 64 and 256 tokens (chunks of a key tile smaller,
 * equal and larger than a page), shuffled and shared pages, last pages
 * partly filled, GQA, causal and not, windows, softcap, LSE; a few configs
 * in the quick set, every valid hopper config in the slow set; and a call
 * with pages of 1 token that the hopper config it is given turns into the
 * split implementation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

enum { F_BM, F_BN, F_WARPS, F_STAGES, F_SPLIT }; /* ops/paged_attention.c */

typedef struct pcase {
  scree_dtype dtype;
  int d, page, hq, hkv, causal;
  int64_t wl, wr;
  float softcap;
  int64_t max_q, max_k;
  const int64_t *lq, *lk; /* NULL: the op's check lengths */
  int n;
} pcase;

static scree__variant variant_of(const pcase *c) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = c->dtype;
  v.v[1] = c->d;
  return v;
}

static scree_paged_attention_args shape_of(const pcase *c) {
  scree_paged_attention_args a;
  memset(&a, 0, sizeof a);
  a.batch = c->n ? c->n : 12;
  a.max_seqlen_q = c->max_q ? c->max_q : 64;
  a.max_seqlen_k = c->max_k ? c->max_k : 1000;
  a.page_size = c->page;
  a.heads_q = c->hq;
  a.heads_kv = c->hkv;
  a.head_dim = c->d;
  a.causal = c->causal;
  a.window_left = c->wl;
  a.window_right = c->wr;
  a.softcap = c->softcap;
  return a;
}

static void describe(const pcase *c, char *buf, size_t n) {
  snprintf(buf, n, "%s d=%d page %d %d:%d %s window(%lld,%lld) softcap %g",
           scree_dtype_name(c->dtype), c->d, c->page, c->hq, c->hkv,
           c->causal ? "causal" : "noncausal", (long long)c->wl, (long long)c->wr,
           (double)c->softcap);
}

static void check_public(const pcase *c) {
  const scree_paged_attention_args a = shape_of(c);
  const scree__variant var = variant_of(c);
  const scree__lens lens = {c->n, c->lq, c->lk};
  char what[200];
  describe(c, what, sizeof what);
  scree_test_check_public(ctx, op, &var, &a, c->lq ? &lens : NULL, stream, "%s", what);
}

/* One problem, several explicit configs; returns how many ran. */
static int check_configs(const pcase *c, const scree__config *cfgs, int n) {
  const scree_paged_attention_args a = shape_of(c);
  const scree__variant var = variant_of(c);
  const scree__lens lens = {c->n, c->lq, c->lk};
  scree__run r;
  scree_test_make(ctx, op, &var, &a, c->lq ? &lens : NULL, &r);
  scree__target t;
  scree__target_of(ctx, &t);
  char what[200];
  describe(c, what, sizeof what);
  int ran = 0;
  for (int i = 0; i < n; i++) {
    if (!scree__config_check(op, &cfgs[i], &var, &t, NULL, 0)) continue;
    scree_test_check_config(ctx, &r, op, &cfgs[i], &var, stream, "%s", what);
    ran++;
  }
  scree__run_free(ctx, &r);
  return ran;
}

/* The index of the implementation called name. */
static int impl_index(const char *name) {
  for (int i = 0; i < op->nimpls; i++)
    if (!strcmp(op->impls[i].name, name)) return i;
  ck_abort_msg("no implementation %s", name);
  return -1;
}

/* 1 if this device runs the hopper implementation (sm_90, tensor maps). */
static int have_hopper(void) {
  scree__target t;
  scree__target_of(ctx, &t);
  if (t.sm == 90 && t.tensor_maps) return 1;
  printf("SKIP: the hopper implementation needs sm_90 and tensor maps (sm_%d)\n", t.sm);
  return 0;
}

/* Prefill batches: chunked prefill against cached prefixes (query lengths
 * 1 to 1000 against 0 to 3000 keys, queries past the keys with none, a
 * prefix shared by sequences 5 and 6 (the check problem shares their first
 * pages), the last pages partly filled, 200 query tokens against 0 keys),
 * for a page size. */
static const int64_t prefill_lq[] = {1000, 130, 1, 64, 257, 700, 700, 9, 200, 513};
static const int64_t prefill_lk[] = {1000, 2900, 3000, 64, 1, 1900, 2100, 9, 0, 3000};
static pcase prefill_case(scree_dtype dt, int d, int page, int hq, int hkv, int causal,
                          int64_t wl, int64_t wr, float softcap) {
  const pcase c = {dt, d, page, hq, hkv, causal, wl, wr, softcap, 1000, 3000,
                   prefill_lq, prefill_lk, (int)(sizeof prefill_lq / sizeof prefill_lq[0])};
  return c;
}

/* The hopper configs of the checked space (each compiled), in *n. */
static scree__config *hopper_space(const scree__variant *var, size_t *n) {
  const int h = impl_index("hopper");
  size_t all = 0, m = 0;
  scree__config *cfgs = scree_test_checked_space(ctx, op, var, &all);
  for (size_t i = 0; i < all; i++)
    if (cfgs[i].impl == h) cfgs[m++] = cfgs[i];
  *n = m;
  return cfgs;
}

/* Quick: the hopper default and two more shapes (cwg 1 and 3, bn 64,
 * sched 1) on prefill batches: page sizes 8, 16, 64, 256; GQA 32:8 causal,
 * 8:2 non-causal with a window on both sides, 16:4 causal with a left
 * window and softcap; bf16 d=128 and fp16 d=64. */
START_TEST(hopper_prefill) {
  if (!have_hopper()) return;
  static const int pages[] = {8, 16, 64, 256};
  const int page = pages[_i % 4];
  const pcase cases[] = {
      prefill_case(SCREE_DTYPE_BF16, 128, page, 32, 8, 1, -1, -1, 0),
      prefill_case(SCREE_DTYPE_FP16, 64, page, 8, 2, 0, 300, 40, 0),
      prefill_case(SCREE_DTYPE_BF16, 128, page, 16, 4, 1, 500, -1, 30.0f),
  };
  const pcase *c = &cases[_i / 4];
  const scree__variant var = variant_of(c);
  const int h = impl_index("hopper");
  scree__config cfgs[3];
  memset(cfgs, 0, sizeof cfgs);
  scree__target t;
  scree__target_of(ctx, &t);
  const scree_paged_attention_args a = shape_of(c);
  op->default_config(&t, &var, &a, &cfgs[0]);
  ck_assert_int_eq(cfgs[0].impl, h); /* a prefill batch takes the hopper default */
  cfgs[1] = scree_test_config(ctx, op, "impl=hopper,bn=64,cwg=1,stages=4,sched=1,ovl=0", &var);
  cfgs[2] = scree_test_config(ctx, op, "impl=hopper,bn=64,cwg=3,stages=3,sched=2,ovl=1", &var);
  ck_assert_int_eq(check_configs(c, cfgs, 3), 3);
  if (_i < 4) check_public(c); /* through dispatch: the default for the call */
}
END_TEST

/* Slow: every hopper config that passes the check, per page size (8, 16,
 * 64, 256) on a causal GQA 32:8 bf16 d=128 batch, and per page size with
 * fp16 d=64, a two-sided window and softcap. */
START_TEST(hopper_every_config) {
  if (!have_hopper()) return;
  static const int pages[] = {8, 16, 64, 256};
  const int page = pages[_i % 4];
  const pcase c = _i < 4 ? prefill_case(SCREE_DTYPE_BF16, 128, page, 32, 8, 1, -1, -1, 0)
                         : prefill_case(SCREE_DTYPE_FP16, 64, page, 8, 2, 0, 300, 40, 20.0f);
  const scree__variant var = variant_of(&c);
  size_t n = 0;
  scree__config *cfgs = hopper_space(&var, &n);
  const int ran = check_configs(&c, cfgs, (int)n);
  free(cfgs);
  printf("hopper_every_config page %d d=%d: %d configs ran\n", page, c.d, ran);
  ck_assert_int_gt(ran, 20);
}
END_TEST

/* Pages of 1 token: a hopper config (as a cache or a tuner might give)
 * turns into the split implementation's default for the call (the adapt
 * that dispatch applies), which runs correctly; the hopper launch itself
 * refuses the call. */
START_TEST(hopper_refuses_page_one) {
  if (!have_hopper()) return;
  static const int64_t lq[] = {300, 5};
  static const int64_t lk[] = {600, 40};
  const pcase c = {SCREE_DTYPE_BF16, 128, 1, 8, 2, 1, -1, -1, 0, 300, 600, lq, lk, 2};
  const scree__variant var = variant_of(&c);
  const scree_paged_attention_args a = shape_of(&c);
  const int h = impl_index("hopper");
  scree__config cfg = scree_test_config(ctx, op, "impl=hopper,bn=128,cwg=2,stages=2,sched=2,ovl=1",
                                        &var);
  const scree__config asked = cfg;
  op->impls[h].adapt(&cfg, &var, &a);
  ck_assert_int_eq(cfg.impl, impl_index("split"));
  ck_assert_int_eq(check_configs(&c, &cfg, 1), 1);
  scree__run r;
  scree_test_make(ctx, op, &var, &a, &(scree__lens){c.n, c.lq, c.lk}, &r);
  scree__kernel k;
  ck_assert_int_eq(scree__kernel_get(ctx, op, &asked, &var, &k), SCREE_OK);
  const scree_status st = op->impls[h].launch(ctx, &k, &asked, &var, r.p.args, stream);
  ck_assert_msg(st == SCREE_ERROR_UNSUPPORTED && strstr(scree_last_error(ctx), "page_size"),
                "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree__run_free(ctx, &r);
  check_public(&c);
}
END_TEST

/* A small prefill batch on the hopper implementation with pages of 8 and
 * 64 (what the sanitizers run: CK_RUN_CASE=hopper_race). */
START_TEST(hopper_small) {
  if (!have_hopper()) return;
  static const int64_t lq[] = {150, 1, 70};
  static const int64_t lk[] = {300, 20, 70};
  for (int i = 0; i < 2; i++) {
    const pcase c = {SCREE_DTYPE_BF16, 64, i ? 64 : 8, 4, 2, i, -1, -1, 0, 150, 300, lq, lk, 3};
    const scree__variant var = variant_of(&c);
    const scree__config cfg =
        scree_test_config(ctx, op, "impl=hopper,bn=64,cwg=2,stages=2,sched=2,ovl=1", &var);
    ck_assert_int_eq(check_configs(&c, &cfg, 1), 1);
  }
}
END_TEST

/* Every page size, decode-heavy GQA 8:2, causal (bf16) and not (fp16). */
START_TEST(page_sizes) {
  static const int pages[] = {1, 8, 16, 32, 64, 128, 256};
  const pcase c = {_i % 2 ? SCREE_DTYPE_FP16 : SCREE_DTYPE_BF16, 128, pages[_i / 2], 8, 2,
                   !(_i % 2), -1, -1, 0, 0, 0, NULL, NULL, 0};
  check_public(&c);
}
END_TEST

/* Every head_dim and dtype, GQA 4:1, page 16. */
START_TEST(head_dims_dtypes) {
  static const int dims[] = {32, 64, 96, 128, 256};
  const pcase c = {_i % 2 ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP16, dims[_i / 2], 16, 4, 1, 1,
                   -1, -1, 0, 0, 0, NULL, NULL, 0};
  check_public(&c);
}
END_TEST

/* GQA groups 1 to 16 and MQA (32 query heads on one KV head). */
START_TEST(groups) {
  static const int g[][2] = {{2, 2}, {4, 2}, {6, 2}, {16, 4}, {24, 2}, {32, 2}, {32, 1}, {5, 1}};
  const pcase c = {SCREE_DTYPE_BF16, 128, 16, g[_i][0], g[_i][1], 1, -1, -1, 0, 0, 0, NULL,
                   NULL, 0};
  check_public(&c);
}
END_TEST

/* Windows, left and right, with and without causal; softcap. */
START_TEST(windows_softcap) {
  const pcase cases[] = {
      {SCREE_DTYPE_FP16, 128, 16, 8, 2, 1, 100, -1, 0, 0, 0, NULL, NULL, 0},
      {SCREE_DTYPE_BF16, 64, 8, 4, 4, 0, 64, 33, 0, 0, 0, NULL, NULL, 0},
      {SCREE_DTYPE_FP16, 64, 32, 4, 2, 0, -1, 0, 0, 0, 0, NULL, NULL, 0},
      {SCREE_DTYPE_BF16, 256, 16, 8, 4, 1, 300, -1, 50.0f, 0, 0, NULL, NULL, 0},
      {SCREE_DTYPE_BF16, 128, 64, 16, 8, 0, -1, -1, 30.0f, 0, 0, NULL, NULL, 0},
  };
  check_public(&cases[_i]);
}
END_TEST

/* Query lengths 1, 2, 7, 64 and 1000 in one batch, against keys from 0 to
 * 5000 (chunked prefill beside decode). */
START_TEST(mixed_query_lengths) {
  static const int64_t lq[] = {1, 2, 7, 64, 1000, 1, 3};
  static const int64_t lk[] = {4000, 2, 17, 64, 5000, 0, 1};
  const pcase c = {SCREE_DTYPE_BF16, 128, 16, 8, 2, 1, -1, -1, 0, 1000, 5000, lq, lk, 7};
  check_public(&c);
}
END_TEST

/* Split counts: SPLIT 0 (one chunk a sequence) to 8 items a SM slot, on a
 * batch with one long and several short sequences, and tile shapes. */
START_TEST(splits_and_tiles) {
  static const int64_t lq[] = {1, 4, 1, 2, 1};
  static const int64_t lk[] = {20000, 300, 17, 4096, 1};
  const pcase c = {_i ? SCREE_DTYPE_FP16 : SCREE_DTYPE_BF16, _i ? 64 : 128, 16, 8, 2, 1, -1, -1,
                   0, 4, 20000, lq, lk, 5};
  static const int tiles[][4] = {{16, 64, 4, 3}, {32, 64, 4, 2}, {64, 64, 4, 3},
                                 {16, 128, 8, 4}, {128, 32, 4, 2}, {32, 128, 8, 3}};
  scree__config cfgs[6 * 5];
  int n = 0;
  for (int t = 0; t < 6; t++)
    for (int s = 0; s < 5; s++) {
      scree__config *k = &cfgs[n++];
      memset(k, 0, sizeof *k);
      k->v[F_BM] = tiles[t][0];
      k->v[F_BN] = tiles[t][1];
      k->v[F_WARPS] = tiles[t][2];
      k->v[F_STAGES] = tiles[t][3];
      k->v[F_SPLIT] = s ? 1 << (s - 1) : 0;
    }
  const int ran = check_configs(&c, cfgs, n);
  printf("splits_and_tiles case %d: %d configs ran\n", _i, ran);
  ck_assert_int_ge(ran, 20);
}
END_TEST

/* Both plan paths: 100 sequences (the CTA's threads cover the batch: each
 * CTA plans, merge counters in the stream's zeroed buffer) and 300 (more
 * than 256 threads: the plan kernel), with splits on 4 and 8 warps; every
 * config runs twice, so a merge counter left nonzero by the first launch
 * fails the second. */
START_TEST(plan_paths) {
  enum { MAXN = 300 };
  static int64_t lq[MAXN], lk[MAXN];
  const int n = _i ? 300 : 100;
  for (int i = 0; i < n; i++) {
    lq[i] = 1 + i % 3;
    lk[i] = i == 7 ? 3000 : (int64_t)((i * 7919) % 600);
  }
  const pcase c = {SCREE_DTYPE_BF16, 128, 16, 8, 2, 1, -1, -1, 0, 3, 3000, lq, lk, n};
  static const int tiles[][4] = {{16, 64, 4, 3}, {16, 128, 8, 3}};
  scree__config cfgs[2 * 3];
  int m = 0;
  for (int t = 0; t < 2; t++)
    for (int s = 1; s <= 4; s *= 2) {
      scree__config *k = &cfgs[m++];
      memset(k, 0, sizeof *k);
      k->v[F_BM] = tiles[t][0];
      k->v[F_BN] = tiles[t][1];
      k->v[F_WARPS] = tiles[t][2];
      k->v[F_STAGES] = tiles[t][3];
      k->v[F_SPLIT] = s;
    }
  for (int rep = 0; rep < 2; rep++) ck_assert_int_eq(check_configs(&c, cfgs, m), m);
}
END_TEST

/* A sequence of 100k keys decoded, beside short ones. */
START_TEST(long_keys) {
  static const int64_t lq[] = {1, 4, 1};
  static const int64_t lk[] = {100000, 7, 16};
  const pcase c = {SCREE_DTYPE_BF16, 128, 64, 8, 1, 1, -1, -1, 0, 4, 100000, lq, lk, 3};
  check_public(&c);
}
END_TEST

/* Every config of the space that passes the check, for one variant. */
START_TEST(every_config) {
  const pcase c = {SCREE_DTYPE_BF16, 128, 16, 8, 2, 1, -1, -1, 0, 16, 1000, NULL, NULL, 0};
  const scree__variant var = variant_of(&c);
  size_t n = 0;
  scree__config *cfgs = scree_test_checked_space(ctx, op, &var, &n);
  const int ran = check_configs(&c, cfgs, (int)n);
  free(cfgs);
  printf("every_config: %d configs ran\n", ran);
  ck_assert_int_gt(ran, 100);
}
END_TEST

/* Every config the device's safelist allows. */
START_TEST(every_safelisted_config) {
  int ran = 0, e = -1;
  scree__variant var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &var));) {
    const pcase c = {(scree_dtype)var.v[0], var.v[1], 16, 8, 2, 1, -1, -1, 0, 0, 0, NULL, NULL,
                     0};
    ran += check_configs(&c, &en->cfg, 1);
  }
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

/* SCREE_VALIDATE: device-side lengths and block tables are checked; a bad
 * one is refused by name and nothing is written. An empty call launches
 * nothing. */
START_TEST(validate_device_args) {
  scree_context *vctx = scree_test_validating_context();
  const int H = 4, KV = 2, d = 64, P = 16, NP = 8, T = 3;
  const size_t qb = (size_t)T * H * d * 2, cb = (size_t)NP * P * KV * d * 2;
  scree_devptr q = scree_test_dalloc(ctx, qb), out = scree_test_dalloc(ctx, qb),
               kc = scree_test_dalloc(ctx, cb), vc = scree_test_dalloc(ctx, cb),
               bt = scree_test_dalloc(ctx, 2 * 4 * 4), sk = scree_test_dalloc(ctx, 8),
               cu = scree_test_dalloc(ctx, 12);
  scree_test_dpoison(ctx, q, qb);
  scree_test_dpoison(ctx, kc, cb);
  scree_test_dpoison(ctx, vc, cb);
  const int32_t good_cu[3] = {0, 1, 3}, good_sk[2] = {40, 64};
  const int32_t good_bt[8] = {3, 1, 7, -1, 0, 2, 4, 5};
  scree_paged_attention_args a = {.q = q, .out = out, .k_cache = kc, .v_cache = vc,
                                  .block_table = bt, .seqlens_k = sk, .cu_seqlens_q = cu,
                                  .batch = 2, .total_q = T, .max_seqlen_q = 2,
                                  .max_seqlen_k = 64, .num_pages = NP, .page_size = P,
                                  .block_table_stride = 4, .heads_q = H, .heads_kv = KV,
                                  .head_dim = d, .dtype = SCREE_DTYPE_FP16, .causal = 1,
                                  .window_left = -1, .window_right = -1};
  struct {
    int32_t cu[3], sk[2], bt[8];
    const char *needle;
  } bad[] = {
      {{1, 1, 3}, {40, 64}, {3, 1, 7, -1, 0, 2, 4, 5}, "cu_seqlens_q[0]=1"},
      {{0, 2, 1}, {40, 64}, {3, 1, 7, -1, 0, 2, 4, 5}, "decreases"},
      {{0, 1, 2}, {40, 64}, {3, 1, 7, -1, 0, 2, 4, 5}, "differs from total_q"},
      {{0, 1, 3}, {40, 65}, {3, 1, 7, -1, 0, 2, 4, 5}, "seqlens_k[1]=65"},
      {{0, 1, 3}, {40, 64}, {3, 1, 8, -1, 0, 2, 4, 5}, "block_table[0][2]=8"},
      {{0, 1, 3}, {40, 64}, {3, 1, 7, -1, 0, -1, 4, 5}, "block_table[1][1]=-1"},
  };
  uint16_t probe[64];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    scree_test_h2d(ctx, cu, bad[i].cu, sizeof bad[i].cu);
    scree_test_h2d(ctx, sk, bad[i].sk, sizeof bad[i].sk);
    scree_test_h2d(ctx, bt, bad[i].bt, sizeof bad[i].bt);
    scree_test_dpoison(ctx, out, qb);
    const scree_status st = scree_paged_attention(vctx, &a, NULL);
    ck_assert_msg(st == SCREE_ERROR_INVALID_ARGUMENT &&
                      strstr(scree_last_error(vctx), bad[i].needle),
                  "case %zu: %s: %s", i, scree_status_name(st), scree_last_error(vctx));
    scree_test_sync(ctx);
    scree_test_d2h(ctx, probe, out, sizeof probe);
    for (int k = 0; k < 64; k++) ck_assert_uint_eq(probe[k], 0xffff);
  }
  scree_test_h2d(ctx, cu, good_cu, sizeof good_cu);
  scree_test_h2d(ctx, sk, good_sk, sizeof good_sk);
  scree_test_h2d(ctx, bt, good_bt, sizeof good_bt);
  ck_assert_msg(scree_paged_attention(vctx, &a, NULL) == SCREE_OK, "%s", scree_last_error(vctx));
  scree_test_sync(ctx);
  /* Nothing to do: nothing launched. */
  const uint64_t calls = scree_test_calls(ctx);
  scree_paged_attention_args e = a;
  e.total_q = 0;
  ck_assert_int_eq(scree_paged_attention(ctx, &e, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
  scree_destroy(vctx);
  scree_test_dfree(ctx, q), scree_test_dfree(ctx, out), scree_test_dfree(ctx, kc);
  scree_test_dfree(ctx, vc), scree_test_dfree(ctx, bt), scree_test_dfree(ctx, sk);
  scree_test_dfree(ctx, cu);
}
END_TEST

/* A small batch through split and unsplit paths: what racecheck runs
 * (CK_RUN_CASE=race). */
START_TEST(small_race) {
  static const int64_t lq[] = {1, 2, 1, 5};
  static const int64_t lk[] = {700, 33, 0, 129};
  const pcase c = {SCREE_DTYPE_BF16, 64, 16, 4, 2, 1, -1, -1, 0, 5, 700, lq, lk, 4};
  scree__config cfgs[3];
  for (int s = 0; s < 3; s++) {
    memset(&cfgs[s], 0, sizeof cfgs[s]);
    cfgs[s].v[F_BM] = 16;
    cfgs[s].v[F_BN] = 64;
    cfgs[s].v[F_WARPS] = 4;
    cfgs[s].v[F_STAGES] = 2;
    cfgs[s].v[F_SPLIT] = s == 0 ? 0 : s == 1 ? 2 : 8;
  }
  cfgs[1].v[F_WARPS] = 8, cfgs[1].v[F_BN] = 128; /* 8 key warps of 16 keys */
  ck_assert_int_eq(check_configs(&c, cfgs, 3), 3);
}
END_TEST

int main(void) {
  op = scree_test_op_setup("paged_attention", &ctx, &stream); /* exits 77 without a GPU */
  Suite *s = suite_create("paged_attention_gpu");
  /* "quick" runs under compute-sanitizer (CK_RUN_CASE=quick); "full" is the
   * slow set (test_paged_attention_gpu_slow). */
  TCase *quick = tcase_create("quick"), *full = tcase_create("full"),
        *race = tcase_create("race"), *hopper = tcase_create("hopper_race");
  tcase_set_timeout(quick, 1800);
  tcase_set_timeout(full, 1800);
  tcase_set_timeout(race, 1800);
  tcase_set_timeout(hopper, 1800);
  tcase_set_tags(full, "slow");
  tcase_add_loop_test(quick, page_sizes, 0, 14);
  tcase_add_loop_test(quick, head_dims_dtypes, 0, 10);
  tcase_add_loop_test(quick, groups, 0, 8);
  tcase_add_loop_test(quick, windows_softcap, 0, 5);
  tcase_add_test(quick, mixed_query_lengths);
  tcase_add_loop_test(quick, splits_and_tiles, 0, 2);
  tcase_add_test(quick, validate_device_args);
  tcase_add_loop_test(quick, plan_paths, 0, 2);
  tcase_add_loop_test(quick, hopper_prefill, 0, 12);
  tcase_add_test(quick, hopper_refuses_page_one);
  tcase_add_test(full, long_keys);
  tcase_add_test(full, every_config);
  tcase_add_test(full, every_safelisted_config);
  tcase_add_loop_test(full, hopper_every_config, 0, 8);
  tcase_add_test(race, small_race);
  tcase_add_test(hopper, hopper_small);
  suite_add_tcase(s, quick);
  suite_add_tcase(s, full);
  suite_add_tcase(s, race);
  suite_add_tcase(s, hopper);
  return scree_test_run(s, 1);
}
