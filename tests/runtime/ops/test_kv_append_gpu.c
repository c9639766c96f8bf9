/* test_kv_append_gpu.c - kv_append on the GPU against the CPU reference.
 * Label gpu: skipped (exit 77) with a one-line reason where there is none.
 * Random k, v and old cache contents, fresh each run (the seed is
 * printed); slots a random permutation of the cache's with padding tokens
 * (-1). The caches and a guard region after them are compared byte for
 * byte after the launch: the live tokens' slots must hold k and v, and
 * every other byte (other slots, padding between tokens and pages, the
 * other half of an interleaved buffer, the guard) its old contents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"

SCREE__REFERENCE(kv_append);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

enum { KV_DENSE, KV_FUSED, KV_HEADMAJOR };
enum { C_DENSE, C_PADDED, C_HND, C_SHARED };

typedef struct kcase {
  int64_t T, H, d, S, pages;
  int kv, cache;
  int pad_every; /* tokens pad_every - 1, 2 pad_every - 1, ... are padding (-1); 0: none */
  int64_t shift; /* elements k, v and the caches are moved past an aligned start */
} kcase;

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16, SCREE_DTYPE_FP32};

/* One call (with exactly cfg, adapted to the call as a plan would be, or
 * through the public entry when cfg is NULL), checked. */
static void run_case(const kcase *c, scree_dtype dt, const scree__config *cfg) {
  const size_t es = scree_dtype_size(dt), guard = 256, sh = (size_t)c->shift;
  const int64_t T = c->T, H = c->H, d = c->d, S = c->S, P = c->pages, cap = P * S;
  int64_t kt = H * d, kh = d, vt = H * d, vh = d, koff = 0, voff = T * H * d, nkv = 2 * T * H * d;
  if (c->kv == KV_FUSED) kt = vt = 3 * H * d, koff = H * d, voff = 2 * H * d, nkv = 3 * T * H * d;
  if (c->kv == KV_HEADMAJOR) kt = vt = d, kh = vh = T * d, voff = H * T * d;
  int64_t pct = 0, pch = 0, pcp = 0, ct = H * d, ch = d, cp = S * H * d, vco;
  if (c->cache == C_PADDED) pct = ct = H * d + 8, pcp = cp = S * ct + 16;
  if (c->cache == C_HND) pct = ct = d, pch = ch = S * d, pcp = cp = H * S * d;
  if (c->cache == C_SHARED) pcp = cp = 2 * S * H * d;
  const int64_t ncache = c->cache == C_SHARED ? P * cp : 2 * P * cp;
  vco = c->cache == C_SHARED ? S * H * d : P * cp;
  const size_t kv_bytes = (size_t)nkv * es, c_bytes = (size_t)ncache * es;
  char *hkv = malloc(kv_bytes + 16), *hc = malloc(c_bytes + 16), *want = malloc(c_bytes + guard);
  int64_t *slots = malloc((size_t)T * 8 + 8), *perm = malloc((size_t)cap * 8);
  ck_assert(hkv && hc && want && slots && perm);
  scree_test_fill(hkv, dt, (size_t)nkv, 1.0);
  scree_test_fill(hc, dt, (size_t)ncache, 1.0);
  for (int64_t i = 0; i < cap; i++) perm[i] = i;
  for (int64_t i = cap - 1; i > 0; i--) {
    const int64_t j = (int64_t)(scree_test_rand() % (uint64_t)(i + 1)), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  for (int64_t t = 0; t < T; t++)
    slots[t] = c->pad_every && t % c->pad_every == c->pad_every - 1 ? -1 : perm[t];
  /* The cache's last slot written by token 0 (unless it is padding). */
  for (int64_t t = 1; t < T && slots[0] >= 0; t++)
    if (slots[t] == cap - 1) slots[t] = slots[0];
  if (T > 0 && slots[0] >= 0) slots[0] = cap - 1;
  /* The expected caches: the old contents with the slots written. */
  memcpy(want, hc, c_bytes);
  memset(want + c_bytes, 0xff, guard);
  scree_kv_append_args a = {.total_new = T, .num_pages = P, .page_size = S, .heads_kv = H,
                            .head_dim = d, .k_token_stride = kt, .k_head_stride = kh,
                            .v_token_stride = vt, .v_head_stride = vh, .cache_page_stride = pcp,
                            .cache_token_stride = pct, .cache_head_stride = pch, .dtype = dt};
  if (c->kv == KV_DENSE) a.k_token_stride = a.k_head_stride = a.v_token_stride = a.v_head_stride = 0;
  scree__ref_kv_append(&a, (void *const[]){hkv + koff * es, hkv + voff * es, want,
                                           want + vco * es, slots});
  /* The device: k and v in one buffer, the caches in one, slots. */
  const scree_devptr dkv = scree_test_dalloc(ctx, kv_bytes + sh * es + guard);
  const scree_devptr dc = scree_test_dalloc(ctx, c_bytes + sh * es + guard);
  const scree_devptr ds = scree_test_dalloc(ctx, (size_t)T * 8 + 8);
  scree_test_dpoison(ctx, dc, c_bytes + sh * es + guard);
  scree_test_h2d(ctx, dkv + sh * es, hkv, kv_bytes);
  scree_test_h2d(ctx, dc + sh * es, hc, c_bytes);
  scree_test_h2d(ctx, ds, slots, (size_t)T * 8);
  a.k = dkv + (sh + (size_t)koff) * es;
  a.v = dkv + (sh + (size_t)voff) * es;
  a.k_cache = dc + sh * es;
  a.v_cache = dc + (sh + (size_t)vco) * es;
  a.slot_mapping = ds;
  char cs[128] = "default";
  scree_status st;
  if (cfg) {
    scree__config cc = *cfg;
    const scree__variant var = {{dt}};
    op->impls[0].adapt(&cc, &var, &a);
    scree__config_str(op, &cc, cs, sizeof cs);
    st = scree__run_exact(ctx, op, &cc, &var, &a, NULL);
  } else {
    st = scree_kv_append(ctx, &a, NULL);
  }
  char what[256];
  snprintf(what, sizeof what,
           "T=%lld H=%lld d=%lld S=%lld pages=%lld kv=%d cache=%d pad=%d shift=%lld %s config %s",
           (long long)T, (long long)H, (long long)d, (long long)S, (long long)P, c->kv, c->cache,
           c->pad_every, (long long)c->shift, scree_dtype_name(dt), cs);
  ck_assert_msg(st == SCREE_OK, "%s: %s: %s", what, scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  char *got = malloc(c_bytes + guard);
  scree_test_d2h(ctx, got, dc + sh * es, c_bytes + guard);
  for (size_t b = 0; b < c_bytes + guard; b++)
    if (got[b] != want[b])
      ck_abort_msg("%s: cache byte %zu (element %zu%s) is 0x%02x, want 0x%02x", what, b, b / es,
                   b >= c_bytes ? ", in the guard" : "", (unsigned char)got[b],
                   (unsigned char)want[b]);
  scree_test_dfree(ctx, dkv), scree_test_dfree(ctx, dc), scree_test_dfree(ctx, ds);
  free(hkv), free(hc), free(want), free(slots), free(perm), free(got);
}

/* The public path over every page size, layouts of k, v and the caches,
 * head sizes that allow 16-byte vectors and those that do not, and starts
 * moved off 16 bytes (narrower vectors). */
static const kcase shapes[] = {
    {100, 8, 128, 1, 120, KV_DENSE, C_DENSE, 5, 0},
    {100, 8, 128, 8, 16, KV_FUSED, C_DENSE, 5, 0},
    {100, 8, 128, 16, 9, KV_FUSED, C_PADDED, 7, 0},
    {100, 8, 128, 32, 5, KV_HEADMAJOR, C_HND, 3, 0},
    {100, 8, 128, 64, 3, KV_DENSE, C_SHARED, 4, 0},
    {100, 4, 256, 128, 2, KV_FUSED, C_SHARED, 6, 0},
    {300, 2, 64, 256, 3, KV_DENSE, C_DENSE, 9, 0},
    {33, 4, 96, 16, 5, KV_FUSED, C_DENSE, 2, 0},
    {33, 4, 32, 16, 5, KV_DENSE, C_HND, 0, 0},
    {17, 3, 100, 16, 3, KV_DENSE, C_DENSE, 3, 0}, /* 4-element rows: narrower vectors */
    {17, 3, 1, 8, 4, KV_HEADMAJOR, C_PADDED, 3, 0},
    {50, 8, 128, 16, 5, KV_DENSE, C_DENSE, 4, 1}, /* 2 bytes off: scalar accesses */
    {50, 8, 128, 16, 5, KV_FUSED, C_SHARED, 4, 4},
    {1, 1, 128, 16, 1, KV_DENSE, C_DENSE, 0, 0},
    {8, 8, 128, 16, 1, KV_DENSE, C_DENSE, 2, 0}, /* every other token padding */
    {8, 8, 128, 16, 1, KV_DENSE, C_DENSE, 1, 0}, /* every token padding: nothing written */
    {4096, 8, 128, 16, 300, KV_FUSED, C_DENSE, 64, 0},
    {20000, 1, 64, 1, 20000, KV_DENSE, C_DENSE, 0, 0}, /* every slot written */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(default_path_shapes) { run_case(&shapes[_i / 3], dtypes[_i % 3], NULL); }
END_TEST

START_TEST(zero_tokens_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_kv_append_args a = {.total_new = 0, .num_pages = 4, .page_size = 16, .heads_kv = 8,
                            .head_dim = 128, .dtype = SCREE_DTYPE_FP16};
  ck_assert_int_eq(scree_kv_append(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* The op's check problem (fused k, head-major v, padded pages, the first
 * and last slot, padding tokens) through the harness and the public entry,
 * for page sizes 1, 16 and 256, every dtype. */
START_TEST(harness_problems) {
  static const int64_t shp[][4] = {{77, 8, 128, 1}, {77, 8, 128, 16}, {77, 2, 64, 256},
                                   {40, 4, 96, 16}, {20, 2, 256, 8},  {77, 1, 8, 32}};
  for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++)
    for (int k = 0; k < 3; k++) {
      const scree__variant var = {{dtypes[k]}};
      scree_kv_append_args a = {.total_new = shp[i][0], .heads_kv = shp[i][1],
                                .head_dim = shp[i][2], .page_size = shp[i][3]};
      scree_test_check_public(ctx, op, &var, &a, NULL, stream, "%s page_size=%lld",
                              scree_dtype_name(dtypes[k]), (long long)shp[i][3]);
    }
}
END_TEST

/* With validation on, the slots are read back: one out of range, one below
 * -1, and one slot given twice are refused naming the entry; -1 passes. */
START_TEST(validation_reads_slots) {
  scree_context *v = scree_test_validating_context();
  const int64_t T = 6, H = 2, d = 64, S = 16, P = 2;
  const size_t es = 2;
  const scree_devptr dk = scree_test_dalloc(ctx, (size_t)(T * H * d) * es);
  const scree_devptr dc = scree_test_dalloc(ctx, (size_t)(2 * P * S * H * d) * es);
  const scree_devptr ds = scree_test_dalloc(ctx, (size_t)T * 8);
  scree_kv_append_args a = {.k = dk, .v = dk, .k_cache = dc,
                            .v_cache = dc + (size_t)(P * S * H * d) * es, .slot_mapping = ds,
                            .total_new = T, .num_pages = P, .page_size = S, .heads_kv = H,
                            .head_dim = d, .dtype = SCREE_DTYPE_FP16};
  static const struct {
    int64_t slots[6];
    scree_status st;
    const char *needle;
  } cases[] = {
      {{0, 1, 2, -1, 31, 5}, SCREE_OK, ""},
      {{0, 1, 2, 32, 4, 5}, SCREE_ERROR_INVALID_ARGUMENT, "slot_mapping[3]=32 is neither -1"},
      {{0, -2, 2, 3, 4, 5}, SCREE_ERROR_INVALID_ARGUMENT, "slot_mapping[1]=-2 is neither -1"},
      {{7, 1, 2, 3, 7, 1}, SCREE_ERROR_INVALID_ARGUMENT,
       "slot_mapping[4]=7 repeats slot_mapping[0]"},
      {{-1, -1, 9, -1, 9, -1}, SCREE_ERROR_INVALID_ARGUMENT,
       "slot_mapping[4]=9 repeats slot_mapping[2]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    scree_test_h2d(ctx, ds, cases[i].slots, sizeof cases[i].slots);
    const scree_status st = scree_kv_append(v, &a, NULL);
    ck_assert_msg(st == cases[i].st && strstr(scree_last_error(v), cases[i].needle),
                  "case %zu: %s: %s", i, scree_status_name(st), scree_last_error(v));
  }
  scree_test_sync(v);
  scree_destroy(v);
  scree_test_dfree(ctx, dk), scree_test_dfree(ctx, dc), scree_test_dfree(ctx, ds);
}
END_TEST

/* Every config that passes the host check for fp16 (compiled first on
 * threads), on the check problem in pages of 16 and of 1, and on a call
 * of its own whose rows leave lanes and groups partly idle. */
START_TEST(every_config) {
  const scree__variant var = {{SCREE_DTYPE_FP16}};
  size_t n = 0;
  scree__config *cfgs = scree_test_checked_space(ctx, op, &var, &n);
  static const int64_t shp[][4] = {{77, 8, 128, 16}, {77, 3, 64, 1}};
  for (size_t s = 0; s < 2; s++) {
    scree_kv_append_args a = {.total_new = shp[s][0], .heads_kv = shp[s][1],
                              .head_dim = shp[s][2], .page_size = shp[s][3]};
    scree__run r;
    scree_test_make(ctx, op, &var, &a, NULL, &r);
    for (size_t i = 0; i < n; i++)
      scree_test_check_config(ctx, &r, op, &cfgs[i], &var, stream, "page_size=%lld",
                              (long long)shp[s][3]);
    scree__run_free(ctx, &r);
  }
  const kcase odd = {13, 3, 40, 8, 3, KV_FUSED, C_PADDED, 4, 0};
  for (size_t i = 0; i < n; i++) run_case(&odd, SCREE_DTYPE_FP16, &cfgs[i]);
  printf("every_config fp16: %zu configs x 3 shapes passed\n", n);
  free(cfgs);
}
END_TEST

static void setup(void) {
  op = scree_test_op_setup("kv_append", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "kv_append_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_tokens_launches_nothing, harness_problems,
                                     validation_reads_slots),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * 3}),
                .slow_tests = SCREE_TESTS(every_config))
