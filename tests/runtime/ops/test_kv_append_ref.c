/* test_kv_append_ref.c - the CPU reference against an obvious baseline:
 * after the reference has run, gathering each live token's head rows back
 * from the cache through its slot gives k and v bit for bit, and every
 * cache element no slot names (other slots, padding between tokens and
 * pages, the other half of an interleaved buffer) keeps its old bytes.
 * Over every page size, dtype and layout of k, v and the caches. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

SCREE__REFERENCE(kv_append);

enum { KV_DENSE, KV_FUSED, KV_HEADMAJOR };
enum { C_DENSE, C_PADDED, C_HND, C_SHARED };

typedef struct rcase {
  int64_t T, H, d, S, pages;
  int kv, cache;
  int pad_every; /* tokens pad_every - 1, 2 pad_every - 1, ... are padding (-1); 0: none */
} rcase;

static void check_case(const rcase *c, scree_dtype dt) {
  const size_t es = scree_dtype_size(dt);
  const int64_t T = c->T, H = c->H, d = c->d, S = c->S, P = c->pages, cap = P * S;
  /* k and v: their strides, and their storage (one fused buffer or two). */
  int64_t kt = H * d, kh = d, vt = H * d, vh = d, koff = 0, voff = 0, nkv = T * H * d;
  if (c->kv == KV_FUSED) kt = vt = 3 * H * d, koff = H * d, voff = 2 * H * d, nkv = 3 * T * H * d;
  if (c->kv == KV_HEADMAJOR) kt = vt = d, kh = vh = T * d;
  /* The caches: strides as passed (0 = dense) and as meant. */
  int64_t pct = 0, pch = 0, pcp = 0, ct = H * d, ch = d, cp = S * H * d, vco = 0;
  if (c->cache == C_PADDED) pct = ct = H * d + 8, pcp = cp = S * ct + 16;
  if (c->cache == C_HND) pct = ct = d, pch = ch = S * d, pcp = cp = H * S * d;
  if (c->cache == C_SHARED) pcp = cp = 2 * S * H * d, vco = S * H * d;
  const int64_t ncache = P * cp; /* a cache's elements (both, when shared) */
  char *kv = malloc((size_t)(2 * nkv + 1) * es), *kc = malloc((size_t)(2 * ncache + 1) * es);
  char *old = malloc((size_t)(2 * ncache + 1) * es);
  int64_t *slots = malloc((size_t)(T + 1) * sizeof *slots), *perm = malloc((size_t)cap * 8);
  ck_assert(kv && kc && old && slots && perm);
  scree_test_fill(kv, dt, (size_t)(2 * nkv), 1.0);
  scree_test_fill(kc, dt, (size_t)(2 * ncache), 1.0);
  memcpy(old, kc, (size_t)(2 * ncache) * es);
  for (int64_t i = 0; i < cap; i++) perm[i] = i;
  for (int64_t i = cap - 1; i > 0; i--) {
    const int64_t j = (int64_t)(scree_test_rand() % (uint64_t)(i + 1)), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  for (int64_t t = 0; t < T; t++)
    slots[t] = c->pad_every && t % c->pad_every == c->pad_every - 1 ? -1 : perm[t];
  /* k and v: in one fused buffer, or the first and second half of kv. */
  char *k = kv + (size_t)koff * es;
  char *v = c->kv == KV_FUSED ? kv + (size_t)voff * es : kv + (size_t)nkv * es;
  /* The caches: one interleaved buffer, or the halves of kc. */
  char *kcache = kc;
  char *vcache = c->cache == C_SHARED ? kc + (size_t)vco * es : kc + (size_t)ncache * es;
  scree_kv_append_args a = {.k = 1, .v = 1, .k_cache = 1, .v_cache = 1, .slot_mapping = 1,
                            .total_new = T, .num_pages = P, .page_size = S, .heads_kv = H,
                            .head_dim = d, .k_token_stride = kt, .k_head_stride = kh,
                            .v_token_stride = vt, .v_head_stride = vh, .cache_page_stride = pcp,
                            .cache_token_stride = pct, .cache_head_stride = pch, .dtype = dt};
  if (c->kv == KV_DENSE) a.k_token_stride = a.k_head_stride = a.v_token_stride = a.v_head_stride = 0;
  scree__ref_kv_append(&a, (void *const[]){k, v, kcache, vcache, slots});
  /* The baseline: gather back, marking what was gathered. */
  const int64_t nall = c->cache == C_SHARED ? ncache : 2 * ncache;
  unsigned char *mark = calloc((size_t)nall, 1);
  ck_assert(mark);
  for (int64_t t = 0; t < T; t++) {
    if (slots[t] < 0) continue;
    const int64_t page = slots[t] / S, off = slots[t] % S;
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < d; i++) {
        const int64_t at = page * cp + off * ct + h * ch + i;
        ck_assert_msg(!memcmp(kcache + at * es, k + (t * kt + h * kh + i) * es, es) &&
                          !memcmp(vcache + at * es, v + (t * vt + h * vh + i) * es, es),
                      "T=%lld H=%lld d=%lld S=%lld kv=%d cache=%d %s: token %lld head %lld "
                      "elem %lld not in slot %lld",
                      (long long)T, (long long)H, (long long)d, (long long)S, c->kv, c->cache,
                      scree_dtype_name(dt), (long long)t, (long long)h, (long long)i,
                      (long long)slots[t]);
        mark[(kcache - kc) / (int64_t)es + at] = 1;
        mark[(vcache - kc) / (int64_t)es + at] = 1;
      }
  }
  for (int64_t e = 0; e < nall; e++)
    if (!mark[e])
      ck_assert_msg(!memcmp(kc + e * es, old + e * es, es),
                    "T=%lld S=%lld kv=%d cache=%d %s: cache element %lld written, no slot "
                    "names it",
                    (long long)T, (long long)S, c->kv, c->cache, scree_dtype_name(dt),
                    (long long)e);
  free(kv), free(kc), free(old), free(slots), free(perm), free(mark);
}

static const scree_dtype dtypes[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};

START_TEST(every_page_size_and_dtype) {
  static const int64_t sizes[] = {1, 8, 16, 32, 64, 128, 256};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (int k = 0; k < 3; k++) {
      /* Two pages more than the tokens need: some pages partly filled,
       * some empty. */
      const rcase c = {37, 2, 64, sizes[i], (37 + sizes[i] - 1) / sizes[i] + 2, KV_DENSE,
                       C_DENSE, 5};
      check_case(&c, dtypes[k]);
    }
}
END_TEST

START_TEST(layouts) {
  static const rcase cases[] = {
      {29, 4, 128, 16, 4, KV_FUSED, C_DENSE, 7},  {29, 4, 128, 16, 4, KV_HEADMAJOR, C_PADDED, 3},
      {29, 4, 96, 8, 6, KV_DENSE, C_HND, 4},      {29, 4, 96, 8, 6, KV_FUSED, C_SHARED, 0},
      {1, 1, 1, 1, 1, KV_DENSE, C_DENSE, 0},      {64, 1, 256, 64, 1, KV_FUSED, C_PADDED, 0},
      {5, 3, 100, 1, 9, KV_HEADMAJOR, C_SHARED, 2}, {40, 8, 32, 256, 1, KV_DENSE, C_HND, 9},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int k = 0; k < 3; k++) check_case(&cases[i], dtypes[k]);
}
END_TEST

/* Every token padding, and no tokens: nothing written. */
START_TEST(nothing_to_write) {
  int64_t slots[4] = {-1, -1, -1, -1};
  uint16_t k[4 * 8], cache[2 * 16 * 8], before[2 * 16 * 8];
  for (int i = 0; i < 32; i++) k[i] = (uint16_t)(i + 1);
  for (int i = 0; i < 256; i++) cache[i] = before[i] = 0x7e00;
  scree_kv_append_args a = {.total_new = 4, .num_pages = 2, .page_size = 16, .heads_kv = 1,
                            .head_dim = 8, .dtype = SCREE_DTYPE_FP16};
  scree__ref_kv_append(&a, (void *const[]){k, k, cache, cache + 128, slots});
  ck_assert(!memcmp(cache, before, sizeof cache));
  a.total_new = 0;
  scree__ref_kv_append(&a, (void *const[]){NULL, NULL, cache, cache + 128, NULL});
  ck_assert(!memcmp(cache, before, sizeof cache));
}
END_TEST

/* A copy keeps every bit pattern: NaN payloads, -0, subnormals. */
START_TEST(bits_kept) {
  uint16_t k[8] = {0x7e01, 0xfc00, 0x8000, 0x0001, 0x7bff, 0xffff, 0x3c00, 0x0000};
  uint16_t v[8] = {0x7fc1, 0xff81, 0x8000, 0x0001, 0x7f7f, 0xffff, 0x3f80, 0x0000};
  uint16_t kc[2 * 8], vc[2 * 8];
  memset(kc, 0, sizeof kc), memset(vc, 0, sizeof vc);
  int64_t slot = 1;
  scree_kv_append_args a = {.total_new = 1, .num_pages = 2, .page_size = 1, .heads_kv = 1,
                            .head_dim = 8, .dtype = SCREE_DTYPE_BF16};
  scree__ref_kv_append(&a, (void *const[]){k, v, kc, vc, &slot});
  ck_assert(!memcmp(kc + 8, k, sizeof k) && !memcmp(vc + 8, v, sizeof v));
}
END_TEST

SCREE_TEST_MAIN(.name = "kv_append_ref", .timeout = 120,
                .tests = SCREE_TESTS(every_page_size_and_dtype, layouts, nothing_to_write,
                                     bits_kept))
