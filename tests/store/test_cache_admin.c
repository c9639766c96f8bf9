/* test_cache_admin.c - clear, merge and export (src/store/cache_admin.c). */
#include "cache_fixtures.h"

/* ------------------------------------------------------------------------ */
/* Clear, merge, export                                                      */
/* ------------------------------------------------------------------------ */

START_TEST(clear_with_filters) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  populate12(c);
  int del = -1, nm = 0, nb = 0;
  ck_assert_int_eq(scree__cache_clear(c, "sm_80", NULL, &del), SCREE_OK);
  ck_assert_int_eq(del, 6);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 6);
  ck_assert_int_eq(count_entries(c, "sm_90", NULL), 6);
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, count_miss_cb, &nm),
                   SCREE_OK);
  ck_assert_int_eq(nm, 2);
  ck_assert_int_eq(scree__cache_foreach_bad(c, NULL, NULL, count_bad_cb, &nb),
                   SCREE_OK);
  ck_assert_int_eq(nb, 2);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM misses WHERE "
                                "arch = 'sm_80'"),
                   0);

  ck_assert_int_eq(scree__cache_clear(c, NULL, "softmax", &del), SCREE_OK);
  ck_assert_int_eq(del, 3);
  ck_assert_int_eq(count_entries(c, NULL, "rmsnorm"), 3);
  ck_assert_int_eq(scree__cache_clear(c, "sm_90", "nothing", &del), SCREE_OK);
  ck_assert_int_eq(del, 0);
  ck_assert_int_eq(scree__cache_clear(c, "", "", &del), SCREE_OK);
  ck_assert_int_eq(del, 3);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 0);
  nm = nb = 0;
  scree__cache_foreach_miss(c, NULL, NULL, count_miss_cb, &nm);
  scree__cache_foreach_bad(c, NULL, NULL, count_bad_cb, &nb);
  ck_assert_int_eq(nm + nb, 0);
  ck_assert_int_eq(scree__cache_clear(c, NULL, NULL, NULL), SCREE_OK);
  scree__cache_close(c);
}
END_TEST

typedef struct conflict_log {
  int n;
  char mine[4][128], theirs[4][128];
  double mine_us[4], theirs_us[4];
  char bucket[4][96];
} conflict_log;

static void on_conflict(void *user, const scree__centry *mine,
                        const scree__centry *theirs) {
  conflict_log *l = user;
  ck_assert_int_lt(l->n, 4);
  ck_assert_str_eq(mine->key.bucket, theirs->key.bucket);
  snprintf(l->mine[l->n], 128, "%s", mine->config);
  snprintf(l->theirs[l->n], 128, "%s", theirs->config);
  snprintf(l->bucket[l->n], 96, "%s", mine->key.bucket);
  l->mine_us[l->n] = mine->median_us;
  l->theirs_us[l->n] = theirs->median_us;
  l->n++;
}

START_TEST(merge_semantics) {
  char *dir = tdir();
  char *mp = pjoin(dir, "mine.db"), *tp = pjoin(dir, "theirs.db");
  scree__ckey A = keyi(0), B = keyi(1), C = keyi(2), D = keyi(3), E = keyi(4),
              F = keyi(5);
  scree__ckey bad = key("rmsnorm", "*", "x=fp16", 0, "sm_90");
  scree__ckey bad2 = key("rmsnorm", "rows=9", "x=fp16", 0, "sm_90");

  scree__cache *t = open_rw(tp);
  put_ok(t, &A, "Y", 5, 21, 1);  /* faster, other config: replaced+conflict */
  put_ok(t, &B, "Z", 20, 22, 1); /* slower, other config: conflict */
  put_ok(t, &C, "X", 5, 23, 1);  /* faster, same config: replaced */
  put_ok(t, &D, "W", 7, 24, 1);  /* new: added */
  put_ok(t, &E, "W", 9, 25, 1);  /* new: added */
  put_ok(t, &F, "V", 1, 26, 1);  /* new but its cubin is damaged: skipped */
  ck_assert_int_eq(scree__cache_record_bad(t, &bad, "tpr=1024", 12080,
                                           "compile: theirs"),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_record_bad(t, &bad2, "tpr=512", 12080,
                                           "wrong answer: theirs"),
                   SCREE_OK);
  scree__cache_close(t);
  flip_cubin_byte(tp, &F, 7);

  scree__cache *c = open_rw(mp);
  put_ok(c, &A, "X", 10, 1, 1);
  put_ok(c, &B, "X", 10, 2, 1);
  put_ok(c, &C, "X", 10, 3, 1);
  ck_assert_int_eq(scree__cache_record_bad(c, &bad, "tpr=1024", 12080,
                                           "compile: mine"),
                   SCREE_OK);

  conflict_log log;
  memset(&log, 0, sizeof log);
  int added = -1, replaced = -1, conflicts = -1;
  char why[512];
  ck_assert_int_eq(scree__cache_merge(c, tp, &added, &replaced, &conflicts,
                                      on_conflict, &log, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(added, 2);
  ck_assert_int_eq(replaced, 2);
  ck_assert_int_eq(conflicts, 2);
  ck_assert_msg(strstr(why, "skipped 1"), "why: %s", why);
  ck_assert_int_eq(log.n, 2);
  for (int i = 0; i < 2; i++) {
    if (!strcmp(log.bucket[i], A.bucket)) {
      ck_assert_str_eq(log.mine[i], "X");
      ck_assert_str_eq(log.theirs[i], "Y");
      ck_assert_double_eq(log.mine_us[i], 10);
      ck_assert_double_eq(log.theirs_us[i], 5);
    } else {
      ck_assert_str_eq(log.bucket[i], B.bucket);
      ck_assert_str_eq(log.mine[i], "X");
      ck_assert_str_eq(log.theirs[i], "Z");
      ck_assert_double_eq(log.theirs_us[i], 20);
    }
  }

  scree__centry g, want = entry(&A, "", 0, 21, 512 + 21 % 700);
  ck_assert_int_eq(scree__cache_get(c, &A, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "Y");
  ck_assert_double_eq(g.median_us, 5);
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_uint_eq(g.cubin_size, want.cubin_size);
  ck_assert_int_eq(memcmp(g.cubin, want.cubin, want.cubin_size), 0);
  ck_assert_str_eq(g.scree_version, "9.9.9"); /* their metadata came along */
  scree__centry_free(&g);
  scree__centry_free(&want);
  ck_assert_int_eq(scree__cache_get(c, &B, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "X");
  ck_assert_double_eq(g.median_us, 10);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &C, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "X");
  ck_assert_double_eq(g.median_us, 5);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &D, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "W");
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &E, &g), SCREE_OK);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &F, &g), SCREE_ERROR_NOT_FOUND);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 5);

  /* Bad rows: union, mine kept where both had one. */
  char reason[128];
  ck_assert_int_eq(scree__cache_is_bad(c, &bad2, "tpr=512", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "wrong answer: theirs");
  scree__ckey any = key("rmsnorm", "rows=5", "x=fp16", 0, "sm_90");
  ck_assert_int_eq(scree__cache_is_bad(c, &any, "tpr=1024", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "compile: mine");
  int nb = 0;
  scree__cache_foreach_bad(c, NULL, NULL, count_bad_cb, &nb);
  ck_assert_int_eq(nb, 2);

  /* Merging again: only B still conflicts; nothing new, nothing faster. */
  memset(&log, 0, sizeof log);
  ck_assert_int_eq(scree__cache_merge(c, tp, &added, &replaced, &conflicts,
                                      on_conflict, &log, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(added, 0);
  ck_assert_int_eq(replaced, 0);
  ck_assert_int_eq(conflicts, 1);
  ck_assert_int_eq(log.n, 1);
  ck_assert_str_eq(log.bucket[0], B.bucket);
  /* NULL counters and callback are fine. */
  ck_assert_int_eq(
      scree__cache_merge(c, tp, NULL, NULL, NULL, NULL, NULL, NULL, 0),
      SCREE_OK);

  /* Sources that cannot be merged. */
  char *missing = pjoin(dir, "missing.db");
  ck_assert_int_eq(scree__cache_merge(c, missing, &added, &replaced,
                                      &conflicts, NULL, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, missing), "why: %s", why);
  ck_assert(!exists(missing));
  char *v2 = pjoin(dir, "v2.db");
  scree__cache *x = open_rw(v2);
  put_ok(x, &D, "Q", 0.1, 5, 1);
  scree__cache_close(x);
  db_exec(v2, "PRAGMA user_version = 2");
  ck_assert_int_eq(scree__cache_merge(c, v2, &added, &replaced, &conflicts,
                                      NULL, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "version 2"), "why: %s", why);
  ck_assert_int_eq(added + replaced + conflicts, 0);
  ck_assert_int_eq(scree__cache_get(c, &D, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "W");
  scree__centry_free(&g);
  scree__cache_close(c);
}
END_TEST

typedef struct export_check {
  int n;
  const char *arch, *op;
} export_check;

static int export_cb(void *user, const scree__centry *e) {
  export_check *x = user;
  if (x->arch) ck_assert_str_eq(e->key.arch, x->arch);
  if (x->op) ck_assert_str_eq(e->key.op, x->op);
  ck_assert_int_eq(e->cubin_ok, 1);
  /* populate12 made the cubin from seed = median - 10. */
  scree__centry want = entry(&e->key, "", 0, (uint32_t)(e->median_us - 10),
                             512 + (uint32_t)(e->median_us - 10) % 700);
  ck_assert_uint_eq(e->cubin_size, want.cubin_size);
  ck_assert_int_eq(memcmp(e->cubin, want.cubin, want.cubin_size), 0);
  scree__centry_free(&want);
  ck_assert_str_eq(e->config, "tpr=128");
  ck_assert_str_eq(e->device_name, "NVIDIA H100 80GB HBM3");
  ck_assert_int_eq(e->created, 1700000000);
  x->n++;
  return 0;
}

START_TEST(export_with_filters) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  scree__cache *c = open_rw(path);
  populate12(c);
  char why[512];
  int n = -1;
  char *d1 = pjoin(dir, "d1.db");
  ck_assert_int_eq(
      scree__cache_export(c, d1, "sm_90", "rmsnorm", &n, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(n, 3);
  ck_assert_str_eq(why, "");
  /* The destination must be new. */
  ck_assert_int_eq(
      scree__cache_export(c, d1, NULL, NULL, &n, why, sizeof why),
      SCREE_ERROR_IO);
  ck_assert_int_eq(n, 0);
  ck_assert_msg(strstr(why, "exists"), "why: %s", why);
  char *junk = pjoin(dir, "junk");
  write_all(junk, "keep me", 7);
  ck_assert_int_eq(
      scree__cache_export(c, junk, NULL, NULL, &n, why, sizeof why),
      SCREE_ERROR_IO);
  size_t jn;
  char *jb = read_all(junk, &jn);
  ck_assert_uint_eq(jn, 7);
  ck_assert_int_eq(memcmp(jb, "keep me", 7), 0);
  free(jb);
  ck_assert_int_eq(scree__cache_export(c, pjoin(dir, "no/such/dir.db"), NULL,
                                       NULL, &n, why, sizeof why),
                   SCREE_ERROR_IO);

  char *d2 = pjoin(dir, "d2.db"), *d3 = pjoin(dir, "d3.db"),
       *d4 = pjoin(dir, "d4.db");
  ck_assert_int_eq(scree__cache_export(c, d2, NULL, NULL, &n, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(n, 12);
  ck_assert_int_eq(
      scree__cache_export(c, d3, "", "softmax", &n, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(n, 6);
  ck_assert_int_eq(
      scree__cache_export(c, d4, "sm_70", NULL, &n, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(n, 0);
  scree__cache_close(c);

  export_check x = {0, "sm_90", "rmsnorm"};
  scree__cache *e = open_ro(d1);
  ck_assert_int_eq(scree__cache_foreach_entry(e, NULL, NULL, 1, export_cb, &x),
                   SCREE_OK);
  ck_assert_int_eq(x.n, 3);
  /* Only winners travel: no misses, no bad configs. */
  int nm = 0, nb = 0;
  scree__cache_foreach_miss(e, NULL, NULL, count_miss_cb, &nm);
  scree__cache_foreach_bad(e, NULL, NULL, count_bad_cb, &nb);
  ck_assert_int_eq(nm + nb, 0);
  scree__cache_close(e);
  ck_assert_int_eq(db_int(d1, "PRAGMA user_version"), 1);

  export_check all = {0, NULL, NULL};
  e = open_ro(d2);
  ck_assert_int_eq(
      scree__cache_foreach_entry(e, NULL, NULL, 1, export_cb, &all), SCREE_OK);
  ck_assert_int_eq(all.n, 12);
  scree__cache_close(e);
  export_check sm = {0, NULL, "softmax"};
  e = open_ro(d3);
  ck_assert_int_eq(scree__cache_foreach_entry(e, NULL, NULL, 1, export_cb, &sm),
                   SCREE_OK);
  ck_assert_int_eq(sm.n, 6);
  scree__cache_close(e);
  e = open_ro(d4);
  ck_assert_int_eq(count_entries(e, NULL, NULL), 0);
  scree__cache_close(e);

  /* A winner with a damaged cubin is left out of an export. */
  scree__ckey k = key("rmsnorm", "rows=1024", "x=fp16", 0, "sm_90");
  flip_cubin_byte(path, &k, 0);
  c = open_rw(path);
  char *d5 = pjoin(dir, "d5.db");
  ck_assert_int_eq(
      scree__cache_export(c, d5, "sm_90", "rmsnorm", &n, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_msg(strstr(why, "left out 1"), "why: %s", why);
  scree__cache_close(c);

  /* So is a row whose cubin is fine but whose key is not (causal=2, written
   * with the sqlite3 shell): its cubin, read before the row was judged, is
   * freed (LeakSanitizer found it leaked). */
  db_exec(path, "UPDATE winners SET causal = 2 WHERE op = 'rmsnorm' AND arch = 'sm_90' "
                "AND bucket = 'rows=2048'");
  c = open_rw(path);
  char *d6 = pjoin(dir, "d6.db");
  ck_assert_int_eq(
      scree__cache_export(c, d6, "sm_90", "rmsnorm", &n, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(n, 1);
  ck_assert_msg(strstr(why, "left out 2 winner(s) whose cubin failed its hash check or whose "
                            "row is invalid"),
                "why: %s", why);
  scree__cache_close(c);
}
END_TEST

/* An exported file lives in rollback mode: readable from a read-only
 * directory with no -wal/-shm beside it. */
START_TEST(exported_cache_opens_readonly_anywhere) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  scree__cache *c = open_rw(path);
  populate12(c);
  char *sub = pjoin(dir, "ship");
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  char *exp = pjoin(sub, "sm_90.db");
  char why[512];
  int n = 0;
  ck_assert_int_eq(
      scree__cache_export(c, exp, "sm_90", NULL, &n, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(n, 6);
  scree__cache_close(c);
  char buf[64];
  db_text(exp, "PRAGMA journal_mode", buf, sizeof buf);
  ck_assert_str_eq(buf, "delete");
  ck_assert(!exists(pjoin(sub, "sm_90.db-wal")));
  c = open_ro(exp);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 6);
  scree__cache_close(c);
  ck_assert(!exists(pjoin(sub, "sm_90.db-wal")));
  ck_assert(!exists(pjoin(sub, "sm_90.db-shm")));
}
END_TEST

int main(void) {
  Suite *s = suite_create("cache_admin");
  TCase *tc = tcase_create("core");
  tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
  tcase_add_test(tc, clear_with_filters);
  tcase_add_test(tc, merge_semantics);
  tcase_add_test(tc, export_with_filters);
  tcase_add_test(tc, exported_cache_opens_readonly_anywhere);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
