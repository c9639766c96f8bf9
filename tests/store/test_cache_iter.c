/* test_cache_iter.c - iteration over winners: order, filters, stopping, cubins (src/store/cache_iter.c). */
#include "cache_fixtures.h"

static int check_cubin_cb(void *user, const scree__centry *e) {
  int *n = user;
  ck_assert_int_eq(e->cubin_ok, 1);
  ck_assert_ptr_nonnull(e->cubin);
  char h[65];
  scree__sha256_hex(e->cubin, e->cubin_size, h);
  ck_assert_str_eq(h, e->cubin_hash);
  (*n)++;
  return 0;
}

typedef struct order_state {
  char last[256];
  int n, stop_at;
  scree__cache *c;
} order_state;

static int order_cb(void *user, const scree__centry *e) {
  order_state *o = user;
  char cur[256];
  snprintf(cur, sizeof cur, "%s|%s|%s|%s", e->key.op, e->key.arch,
           e->key.bucket, e->key.dtype);
  ck_assert_msg(strcmp(o->last, cur) < 0, "order: %s then %s", o->last, cur);
  snprintf(o->last, sizeof o->last, "%s", cur);
  ck_assert_ptr_null(e->cubin);
  ck_assert_uint_gt(e->cubin_size, 0);
  ck_assert_int_eq(e->cubin_ok, 0);
  if (o->c) { /* calling back into the cache from a callback works */
    scree__centry g;
    ck_assert_int_eq(scree__cache_get(o->c, &e->key, &g), SCREE_OK);
    ck_assert_uint_eq(g.cubin_size, e->cubin_size);
    scree__centry_free(&g);
  }
  return ++o->n == o->stop_at;
}

START_TEST(foreach_entry_order_filter_stop) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  populate12(c);
  order_state o;
  memset(&o, 0, sizeof o);
  o.c = c;
  ck_assert_int_eq(scree__cache_foreach_entry(c, NULL, NULL, 0, order_cb, &o),
                   SCREE_OK);
  ck_assert_int_eq(o.n, 12);
  memset(&o, 0, sizeof o);
  o.stop_at = 5;
  ck_assert_int_eq(scree__cache_foreach_entry(c, "", "", 0, order_cb, &o),
                   SCREE_OK);
  ck_assert_int_eq(o.n, 5);
  int n = 0;
  ck_assert_int_eq(
      scree__cache_foreach_entry(c, "sm_80", NULL, 1, check_cubin_cb, &n),
      SCREE_OK);
  ck_assert_int_eq(n, 6);
  ck_assert_int_eq(count_entries(c, NULL, "softmax"), 6);
  ck_assert_int_eq(count_entries(c, "sm_90", "softmax"), 3);
  ck_assert_int_eq(count_entries(c, "sm_70", NULL), 0);
  scree__cache_close(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cache_iter");
  TCase *tc = tcase_create("core");
  tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
  tcase_add_test(tc, foreach_entry_order_filter_stop);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
