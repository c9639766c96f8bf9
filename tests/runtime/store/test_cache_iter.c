/* test_cache_iter.c - iteration over winners: order, filters, stopping, cubins (src/runtime/store/cache_iter.c). */
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

static int collect_bucket_cb(void *user, const scree__centry *e) {
  char(*buckets)[96] = user;
  for (int i = 0; i < 8; i++)
    if (!buckets[i][0]) {
      snprintf(buckets[i], 96, "%s", e->key.bucket);
      break;
    }
  return 0;
}

/* Every row read from a file is checked; one that fails is skipped by an
 * iteration, refused by get, and counted, never truncated into another
 * key or read as 0. */
START_TEST(rows_that_fail_their_checks) {
  char *path = pjoin(tdir(), "loose.db");
  loose_cache(path);
  char long_bucket[160];
  snprintf(long_bucket, sizeof long_bucket, "'rows<=1024,cols=4096%0120d'", 0);
  /* The one good row, then one bad thing each. */
  loose_winner(path, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
  loose_winner(path, NULL, long_bucket, NULL, NULL, NULL, NULL, NULL, NULL);
  loose_winner(path, "NULL", "'b1'", NULL, NULL, NULL, NULL, NULL, NULL);
  loose_winner(path, NULL, "'b2'", NULL, "'1'", NULL, NULL, NULL, NULL);
  loose_winner(path, NULL, "'b3'", NULL, "2", NULL, NULL, NULL, NULL);
  loose_winner(path, NULL, "'b4'", NULL, NULL, NULL, "'fast'", NULL, NULL);
  loose_winner(path, NULL, "'b5'", NULL, NULL, NULL, "NULL", NULL, NULL);
  loose_winner(path, NULL, "'b6'", NULL, NULL, NULL, "0", NULL, NULL);
  loose_winner(path, NULL, "'b7'", NULL, NULL, NULL, "-1.5", NULL, NULL);
  loose_winner(path, NULL, "'b8'", NULL, NULL, NULL, "9e999", NULL, NULL);
  loose_winner(path, NULL, "'b9'", NULL, NULL, "NULL", NULL, NULL, NULL);
  loose_winner(path, NULL, "'b10'", "CAST(X'783d66703136007a' AS TEXT)", NULL, NULL, NULL,
               NULL, NULL);
  loose_winner(path, NULL, "'b11'", NULL, NULL, "'tpr=128 rows=1'", NULL, NULL, NULL);
  loose_winner(path, NULL, "'b12'", NULL, NULL, NULL, NULL, "CAST(X'41004200' AS TEXT)", NULL);
  loose_winner(path, NULL, "'b13'", NULL, NULL, NULL, NULL, NULL, "NULL");
  loose_winner(path, NULL, "'b14'", NULL, NULL, NULL, NULL, NULL, "'text'");
  loose_winner(path, NULL, "'b\x1b[31m'", NULL, NULL, NULL, NULL, NULL, NULL);
  const int nbad = 16;

  for (int with_cubin = 0; with_cubin < 2; with_cubin++) {
    scree__cache *c = open_ro(path);
    char buckets[8][96];
    memset(buckets, 0, sizeof buckets);
    ck_assert_int_eq(scree__cache_foreach_entry(c, NULL, NULL, with_cubin, collect_bucket_cb,
                                                buckets),
                     SCREE_OK);
    ck_assert_str_eq(buckets[0], "rows<=1024,cols=4096");
    ck_assert_str_eq(buckets[1], "");
    char why[512];
    ck_assert_int_eq(scree__cache_refused(c, why, sizeof why), nbad);
    ck_assert_msg(strstr(why, "winners row "), "why: %s", why);
    scree__cache_close(c);
  }

  /* The reasons name the column and the problem. */
  static const struct {
    const char *bucket, *want;
  } reasons[] = {
      {"b1", "op is NULL, not text"},
      {"b2", "causal is text, not an integer"},
      {"b3", "causal is 2, outside [0, 1]"},
      {"b4", "median_us is text, not a number"},
      {"b5", "median_us is NULL"},
      {"b6", "median_us is 0, not a finite positive number"},
      {"b7", "median_us is -1.5"},
      {"b8", "median_us is inf"},
      {"b9", "config is NULL"},
      {"b10", "dtype holds a NUL byte"},
      {"b11", "config holds byte 0x20"},
      {"b12", "device_name holds a NUL byte"},
      {"b13", "cubin is NULL"},
      {"b14", "cubin is text"},
  };
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
    char one[256], sql[512], why[512];
    snprintf(one, sizeof one, "%s.%zu", path, i);
    loose_cache(one);
    snprintf(sql, sizeof sql, "ATTACH '%s' AS src; INSERT INTO winners SELECT * FROM"
                              " src.winners WHERE bucket = '%s'", path, reasons[i].bucket);
    db_exec(one, sql);
    scree__cache *c = open_ro(one);
    ck_assert_int_eq(count_entries(c, NULL, NULL), 0);
    ck_assert_int_eq(scree__cache_refused(c, why, sizeof why), 1);
    ck_assert_msg(strstr(why, reasons[i].want), "%s: why: %s", reasons[i].bucket, why);
    scree__cache_close(c);
  }

  /* get refuses a bad row of the key it asked for. */
  scree__cache *c = open_ro(path);
  scree__ckey k = key("rmsnorm", "b6", "x=fp16,w=fp16,y=fp16", 0, "sm_90");
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_CACHE);
  ck_assert_ptr_null(g.cubin);
  char err[512];
  scree__cache_last_error(c, err, sizeof err);
  ck_assert_msg(strstr(err, "median_us is 0"), "err: %s", err);
  ck_assert_int_eq(scree__cache_refused(c, NULL, 0), 1);
  k = key("rmsnorm", "rows<=1024,cols=4096", "x=fp16,w=fp16,y=fp16", 0, "sm_90");
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  scree__cache_close(c);
}
END_TEST

/* Misses and bad configs are checked too. */
START_TEST(miss_and_bad_rows_are_checked) {
  char *path = pjoin(tdir(), "loose.db");
  loose_cache(path);
  char sql[1024];
  snprintf(sql, sizeof sql,
           "INSERT INTO misses VALUES('rmsnorm', 'rows<=8,cols=512', 'x=fp16', 0, 'sm_90',"
           " 'rows=5,cols=512', 3, 1, 2);"
           "INSERT INTO misses VALUES('rmsnorm', 'rows<=16,cols=512', 'x=fp16', 0, 'sm_90',"
           " 'rows=5', 'many', 1, 2);"
           "INSERT INTO misses VALUES('rmsnorm', NULL, 'x=fp16', 0, 'sm_90', '', 1, 1, 2);"
           "INSERT INTO bad_configs VALUES('rmsnorm', 'x=fp16', 0, 'sm_90', '%s', 'tpr=1024',"
           " 13000, '*', 'compile: too big', 5);"
           "INSERT INTO bad_configs VALUES('rmsnorm', 'x=fp16', 0, 'sm_90', 'nothex', 'tpr=1',"
           " 13000, '*', 'compile', 5);"
           "INSERT INTO bad_configs VALUES('rmsnorm', 'x=fp16', 0, 'sm_90', '%s', 'tpr=2',"
           " 13000, '*', zeroblob(300), 5);",
           g_src, g_src);
  db_exec(path, sql);
  scree__cache *c = open_ro(path);
  int nm = 0, nb = 0;
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, count_miss_cb, &nm), SCREE_OK);
  ck_assert_int_eq(scree__cache_foreach_bad(c, NULL, NULL, count_bad_cb, &nb), SCREE_OK);
  ck_assert_int_eq(nm, 1);
  ck_assert_int_eq(nb, 1);
  char why[512];
  ck_assert_int_eq(scree__cache_refused(c, why, sizeof why), 4);
  ck_assert_msg(strstr(why, "misses row 2: count is text"), "why: %s", why);
  scree__cache_close(c);
}
END_TEST

SCREE_TEST_MAIN(.name = "cache_iter", .setup_once = base_setup, .teardown_once = base_teardown,
                .tests = SCREE_TESTS(foreach_entry_order_filter_stop, rows_that_fail_their_checks,
                                     miss_and_bad_rows_are_checked))
