/* test_cache_admin.c - clear, merge and export (src/runtime/store/cache_admin.c). */
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
  const char *F16 = "x=fp16,w=fp16,y=fp16";
  const char *T1024 = "tpr=1024,rows=1,vec=8,cache=8", *T512 = "tpr=512,rows=1,vec=8,cache=2";
  scree__ckey bad = key("rmsnorm", "*", F16, 0, "sm_90");
  scree__ckey bad2 = key("rmsnorm", "rows<=16,cols=4096", F16, 0, "sm_90");

  scree__cache *t = open_rw(tp);
  put_ok(t, &A, CFG[1], 5, 21, 1);  /* faster, other config: replaced+conflict */
  put_ok(t, &B, CFG[2], 20, 22, 1); /* slower, other config: conflict */
  put_ok(t, &C, CFG[0], 5, 23, 1);  /* faster, same config: replaced */
  put_ok(t, &D, CFG[3], 7, 24, 1);  /* new: added */
  put_ok(t, &E, CFG[3], 9, 25, 1);  /* new: added */
  put_ok(t, &F, CFG[4], 1, 26, 1);  /* new but its cubin is damaged: skipped */
  ck_assert_int_eq(scree__cache_record_bad(t, &bad, T1024, 12080,
                                           "compile: theirs"),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_record_bad(t, &bad2, T512, 12080,
                                           "wrong answer: theirs"),
                   SCREE_OK);
  scree__cache_close(t);
  flip_cubin_byte(tp, &F, 7);

  scree__cache *c = open_rw(mp);
  put_ok(c, &A, CFG[0], 10, 1, 1);
  put_ok(c, &B, CFG[0], 10, 2, 1);
  put_ok(c, &C, CFG[0], 10, 3, 1);
  ck_assert_int_eq(scree__cache_record_bad(c, &bad, T1024, 12080,
                                           "compile: mine"),
                   SCREE_OK);

  conflict_log log;
  memset(&log, 0, sizeof log);
  scree__merge_counts n;
  char why[512];
  ck_assert_int_eq(scree__cache_merge(c, tp, 1, &n, on_conflict, &log, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(n.added, 2);
  ck_assert_int_eq(n.replaced, 2);
  ck_assert_int_eq(n.conflicts, 2);
  ck_assert_int_eq(n.skipped_hash, 1);
  ck_assert_int_eq(n.skipped_invalid, 0);
  ck_assert_msg(strstr(why, "skipped 1 row(s)") && strstr(why, "hash check"), "why: %s", why);
  ck_assert_int_eq(log.n, 2);
  for (int i = 0; i < 2; i++) {
    if (!strcmp(log.bucket[i], A.bucket)) {
      ck_assert_str_eq(log.mine[i], CFG[0]);
      ck_assert_str_eq(log.theirs[i], CFG[1]);
      ck_assert_double_eq(log.mine_us[i], 10);
      ck_assert_double_eq(log.theirs_us[i], 5);
    } else {
      ck_assert_str_eq(log.bucket[i], B.bucket);
      ck_assert_str_eq(log.mine[i], CFG[0]);
      ck_assert_str_eq(log.theirs[i], CFG[2]);
      ck_assert_double_eq(log.theirs_us[i], 20);
    }
  }

  scree__centry g, want = entry(&A, "", 0, 21, 512 + 21 % 700);
  ck_assert_int_eq(scree__cache_get(c, &A, &g), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[1]);
  ck_assert_double_eq(g.median_us, 5);
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_uint_eq(g.cubin_size, want.cubin_size);
  ck_assert_int_eq(memcmp(g.cubin, want.cubin, want.cubin_size), 0);
  ck_assert_str_eq(g.scree_version, "9.9.9"); /* their metadata came along */
  scree__centry_free(&g);
  scree__centry_free(&want);
  ck_assert_int_eq(scree__cache_get(c, &B, &g), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[0]);
  ck_assert_double_eq(g.median_us, 10);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &C, &g), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[0]);
  ck_assert_double_eq(g.median_us, 5);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &D, &g), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[3]);
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &E, &g), SCREE_OK);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &F, &g), SCREE_ERROR_NOT_FOUND);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 5);

  /* Bad rows: union, mine kept where both had one. */
  char reason[128];
  ck_assert_int_eq(scree__cache_is_bad(c, &bad2, T512, 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "wrong answer: theirs");
  scree__ckey any = key("rmsnorm", "rows<=8,cols=4096", F16, 0, "sm_90");
  ck_assert_int_eq(scree__cache_is_bad(c, &any, T1024, 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "compile: mine");
  int nb = 0;
  scree__cache_foreach_bad(c, NULL, NULL, count_bad_cb, &nb);
  ck_assert_int_eq(nb, 2);

  /* Merging again: only B still conflicts; nothing new, nothing faster. */
  memset(&log, 0, sizeof log);
  ck_assert_int_eq(scree__cache_merge(c, tp, 1, &n, on_conflict, &log, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(n.added, 0);
  ck_assert_int_eq(n.replaced, 0);
  ck_assert_int_eq(n.conflicts, 1);
  ck_assert_int_eq(log.n, 1);
  ck_assert_str_eq(log.bucket[0], B.bucket);
  /* NULL counters and callback are fine. */
  ck_assert_int_eq(
      scree__cache_merge(c, tp, 1, NULL, NULL, NULL, NULL, 0),
      SCREE_OK);

  /* Sources that cannot be merged. */
  char *missing = pjoin(dir, "missing.db");
  ck_assert_int_eq(scree__cache_merge(c, missing, 1, &n, NULL, NULL, why, sizeof why),
                   SCREE_ERROR_NOT_FOUND);
  ck_assert_msg(strstr(why, missing), "why: %s", why);
  ck_assert(!exists(missing));
  char *v2 = pjoin(dir, "v2.db");
  scree__cache *x = open_rw(v2);
  put_ok(x, &D, CFG[5], 0.1, 5, 1);
  scree__cache_close(x);
  db_exec(v2, "PRAGMA user_version = 2");
  ck_assert_int_eq(scree__cache_merge(c, v2, 1, &n, NULL, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "version 2"), "why: %s", why);
  ck_assert_int_eq(n.added + n.replaced + n.conflicts, 0);

  /* A damaged file (a cell pointer past its page, as in the fuzz
   * regression) is refused whole, every time, and nothing is merged. */
  char *dmg = pjoin(dir, "damaged.db");
  x = open_rw(dmg);
  put_ok(x, &D, CFG[5], 0.1, 5, 1);
  scree__cache_close(x);
  db_exec(dmg, "PRAGMA journal_mode = DELETE");
  const long long psz = db_int(dmg, "PRAGMA page_size");
  const long long root = db_int(dmg, "SELECT rootpage FROM sqlite_master WHERE name = 'winners'");
  FILE *f = fopen(dmg, "r+b");
  ck_assert_ptr_nonnull(f);
  const unsigned char ptr[2] = {0xff, 0xff}; /* the first cell pointer of a leaf */
  ck_assert_int_eq(fseek(f, (long)((root - 1) * psz + (root == 1 ? 100 : 0) + 8), SEEK_SET), 0);
  ck_assert_int_eq(fwrite(ptr, 1, 2, f), 2);
  ck_assert_int_eq(fclose(f), 0);
  for (int twice = 0; twice < 2; twice++) {
    memset(&n, 0, sizeof n);
    ck_assert_int_eq(scree__cache_merge(c, dmg, 1, &n, NULL, NULL, why, sizeof why),
                     SCREE_ERROR_CACHE);
    ck_assert_msg(strstr(why, "is damaged") && strstr(why, dmg), "why: %s", why);
    ck_assert_int_eq(n.added + n.replaced + n.conflicts, 0);
  }
  ck_assert_int_eq(scree__cache_get(c, &D, &g), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[3]);
  scree__centry_free(&g);
  scree__cache_close(c);
}
END_TEST

/* Every source row must be one this build would write: nothing is cut to
 * fit a field (two long keys never collapse into one), read as 0 or taken
 * on trust; what is left out is counted and the first reason given. */
START_TEST(merge_refuses_what_it_cannot_check) {
  char *dir = tdir();
  char *sp = pjoin(dir, "theirs.db"), *mp = pjoin(dir, "mine.db");
  loose_cache(sp);
  char longa[256], longb[256], longop[128], longcfg[256], longdev[300];
  snprintf(longa, sizeof longa, "'rows<=1024,cols=4096' || '%0100d'", 1);
  snprintf(longb, sizeof longb, "'rows<=1024,cols=4096' || '%0100d'", 2);
  snprintf(longop, sizeof longop, "'rmsnorm%040d'", 0);
  snprintf(longcfg, sizeof longcfg, "'tpr=128,rows=1,vec=8,cache=4%0120d'", 0);
  snprintf(longdev, sizeof longdev, "'%0200d'", 0);
  const char *b2 = "'rows<=2048,cols=4096'";
  loose_winner(sp, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL); /* the good one */
  loose_winner(sp, NULL, longa, NULL, NULL, NULL, NULL, NULL, NULL);
  loose_winner(sp, NULL, longb, NULL, NULL, NULL, NULL, NULL, NULL);
  loose_winner(sp, longop, b2, NULL, NULL, NULL, NULL, NULL, NULL);
  loose_winner(sp, NULL, b2, "CAST(X'783d667031362c773d667031362c793d66703136007a' AS TEXT)",
               NULL, NULL, NULL, NULL, NULL);
  loose_winner(sp, NULL, b2, NULL, NULL, longcfg, NULL, NULL, NULL);
  loose_winner(sp, NULL, b2, NULL, NULL, NULL, NULL, longdev, NULL);
  loose_winner(sp, NULL, b2, NULL, NULL, NULL, "'abc'", NULL, NULL);
  loose_winner(sp, NULL, b2, NULL, NULL, NULL, "NULL", NULL, NULL);
  loose_winner(sp, NULL, b2, NULL, NULL, NULL, "'NaN'", NULL, NULL);
  loose_winner(sp, NULL, b2, NULL, NULL, NULL, "9e999", NULL, NULL);
  loose_winner(sp, NULL, b2, NULL, NULL, "NULL", NULL, NULL, NULL);
  loose_winner(sp, "'frobnicate'", b2, NULL, NULL, NULL, NULL, NULL, NULL);
  loose_winner(sp, NULL, b2, NULL, NULL, "'tpr=16,rows=1,vec=8,cache=4'", NULL, NULL, NULL);
  loose_winner(sp, NULL, b2, "'w=fp16,x=fp16,y=fp16'", NULL, NULL, NULL, NULL, NULL);
  loose_winner(sp, NULL, b2, NULL, "1", NULL, NULL, NULL, NULL);
  loose_winner(sp, NULL, "'rows<=2000,cols=4096'", NULL, NULL, NULL, NULL, NULL, NULL);
  loose_winner(sp, NULL, "'rows=2048,cols=4096'", NULL, NULL, NULL, NULL, NULL, NULL);
  const int nbad = 17;
  char sql[1024];
  snprintf(sql, sizeof sql,
           "INSERT INTO bad_configs VALUES('rmsnorm', 'x=fp16,w=fp16,y=fp16', 0, 'sm_90', '%s',"
           " 'tpr=1024,rows=1,vec=8,cache=8', 13000, '*', 'compile: too big', 5);"
           "INSERT INTO bad_configs VALUES('rmsnorm', 'x=fp16,w=fp16,y=fp16', 0, 'sm_90', '%s',"
           " 'tpr=1024,rows=1,vec=8,cache=2', 13000, 'rows=5', 'compile: too big', 5);"
           "INSERT INTO bad_configs VALUES('rmsnorm', 'x=fp16,w=fp16,y=fp16', 0, 'sm_90', '%s',"
           " 'tpr=512,rows=1,vec=8,cache=2', 13000, '*', zeroblob(1000), 5);",
           g_src, g_src, g_src);
  db_exec(sp, sql);

  scree__cache *c = open_rw(mp);
  scree__ckey k2 = key("rmsnorm", "rows<=2048,cols=4096", "x=fp16,w=fp16,y=fp16", 0, "sm_90");
  put_ok(c, &k2, CFG[1], 10, 1, 1);
  scree__merge_counts n;
  char why[1024];
  ck_assert_int_eq(scree__cache_merge(c, sp, 1, &n, NULL, NULL, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(n.added, 1);
  ck_assert_int_eq(n.replaced, 0);
  ck_assert_int_eq(n.conflicts, 0);
  ck_assert_int_eq(n.skipped_hash, 0);
  ck_assert_int_eq(n.skipped_invalid, nbad + 2);
  ck_assert_msg(strstr(why, "19 row(s) that failed their checks (first: winners row "), "why: %s",
                why);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 2);
  /* The good entry of mine stands: no median was read as 0. */
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k2, &g), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[1]);
  ck_assert_double_eq(g.median_us, 10);
  scree__centry_free(&g);
  int nb = 0;
  scree__cache_foreach_bad(c, NULL, NULL, count_bad_cb, &nb);
  ck_assert_int_eq(nb, 1);
  scree__cache_close(c);
  ck_assert_int_eq(db_int(mp, "SELECT count(*) FROM winners WHERE length(bucket) > 95"), 0);

  /* The reasons, one row at a time. */
  static const struct {
    int row;
    const char *want;
  } reasons[] = {
      {4, "op is 47 bytes, longer than 31"},
      {5, "dtype holds a NUL byte"},
      {6, "config is 148 bytes, longer than 127"},
      {7, "device_name is 200 bytes, longer than 127"},
      {8, "median_us is text, not a number"},
      {9, "median_us is NULL, not a number"},
      {10, "median_us is text, not a number"},
      {11, "median_us is inf"},
      {12, "config is NULL, not text"},
      {13, "op frobnicate is not in this build"},
      {14, "fails rmsnorm's check for x=fp16,w=fp16,y=fp16 on sm_90"},
      {15, "dtype"},
      {16, "causal is 1 but the variant says 0"},
      {17, "bucket"},
      {18, "bucket"},
  };
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "one-%zu.db", i);
    char *one = pjoin(dir, name);
    snprintf(name, sizeof name, "dst-%zu.db", i);
    char *dst = pjoin(dir, name);
    loose_cache(one);
    snprintf(sql, sizeof sql,
             "ATTACH '%s' AS src; INSERT INTO winners SELECT * FROM src.winners WHERE rowid = %d",
             sp, reasons[i].row);
    db_exec(one, sql);
    c = open_rw(dst);
    ck_assert_int_eq(scree__cache_merge(c, one, 1, &n, NULL, NULL, why, sizeof why), SCREE_OK);
    ck_assert_int_eq(n.skipped_invalid, 1);
    ck_assert_msg(strstr(why, reasons[i].want), "row %d: why: %s", reasons[i].row, why);
    ck_assert_int_eq(count_entries(c, NULL, NULL), 0);
    scree__cache_close(c);
  }
}
END_TEST

/* Export leaves out what merge would refuse, and says so. */
START_TEST(export_refuses_what_it_cannot_check) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db"), *out = pjoin(dir, "out.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = keyi(0), odd = key("frobnicate", "n=1", "t=1", 0, "sm_90");
  put_ok(c, &k, CFG[0], 10, 1, 1);
  put_ok(c, &odd, "x=1", 10, 2, 1); /* a row of an op this build does not know */
  int n = -1, skipped = -1;
  char why[1024];
  ck_assert_int_eq(scree__cache_export(c, out, NULL, NULL, &n, &skipped, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(skipped, 1);
  ck_assert_msg(strstr(why, "op frobnicate is not in this build"), "why: %s", why);
  scree__cache_close(c);
  ck_assert_int_eq(db_int(out, "SELECT count(*) FROM winners"), 1);
}
END_TEST

/* Runs SQL on path in a child process, so that what SQLite allocates for
 * it does not count in this process's peak memory. */
static void db_exec_apart(const char *path, const char *sql) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (!pid) {
    sqlite3 *db = NULL;
    int ok = sqlite3_open(path, &db) == SQLITE_OK &&
             sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK;
    sqlite3_close(db);
    _exit(ok ? 0 : 1);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static long peak_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* Sizes read from a file are bounded before anything is allocated: an
 * oversized cubin is refused on its length alone, a value past
 * SCREE__CACHE_MAX_VALUE is never materialised, and a foreach holds at
 * most SCREE__CACHE_MAX_ROWS rows. */
START_TEST(sizes_from_a_file_are_bounded) {
  char *dir = tdir();
  char *sp = pjoin(dir, "big.db"), *mp = pjoin(dir, "mine.db"), *tp = pjoin(dir, "text.db");
  loose_cache(sp);
  char sql[512];
  snprintf(sql, sizeof sql, "INSERT INTO winners SELECT * FROM (SELECT 'rmsnorm',"
           " 'rows<=1024,cols=4096', 'x=fp16,w=fp16,y=fp16', 0, 'sm_90', '%s',"
           " 'tpr=128,rows=1,vec=8,cache=4', 10.0, 0.5, 'gpu', 132, 13000, 13000, '0.1.0', 1,"
           " 'ab', zeroblob(%d))", g_src, 80 << 20);
  db_exec_apart(sp, sql);
  const long before = peak_kib();
  scree__cache *c = open_rw(mp);
  scree__merge_counts n;
  char why[1024];
  ck_assert_int_eq(scree__cache_merge(c, sp, 1, &n, NULL, NULL, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(n.skipped_invalid, 1);
  ck_assert_msg(strstr(why, "cubin is 83886080 bytes, outside [1, 67108864]"), "why: %s", why);
  scree__cache_close(c);
  c = open_ro(sp);
  scree__ckey k = key("rmsnorm", "rows<=1024,cols=4096", "x=fp16,w=fp16,y=fp16", 0, "sm_90");
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_CACHE);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 0);
  int nshow = 0;
  ck_assert_int_eq(scree__cache_foreach_entry(c, NULL, NULL, 1, count_entries_cb, &nshow),
                   SCREE_OK);
  ck_assert_int_eq(nshow, 0);
  ck_assert_int_eq(scree__cache_refused(c, NULL, 0), 3);
  scree__cache_close(c);
  ck_assert_msg(peak_kib() - before < 32 * 1024, "peak grew by %ld KiB", peak_kib() - before);

  /* A key string past the value bound fails the merge; nothing is merged. */
  loose_cache(tp);
  snprintf(sql, sizeof sql, "INSERT INTO winners SELECT 'rmsnorm', 'b' || zeroblob(%d),"
           " 'x=fp16,w=fp16,y=fp16', 0, 'sm_90', '%s', 'tpr=128,rows=1,vec=8,cache=4', 10.0,"
           " 0.5, 'gpu', 132, 13000, 13000, '0.1.0', 1, 'ab', X'01'", 70 << 20, g_src);
  db_exec_apart(tp, sql);
  db_exec_apart(tp, "UPDATE winners SET bucket = CAST(bucket AS TEXT)");
  c = open_rw(mp);
  ck_assert_int_eq(scree__cache_merge(c, tp, 1, &n, NULL, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "too big"), "why: %s", why);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 0);
  ck_assert_msg(peak_kib() - before < 32 * 1024, "peak grew by %ld KiB", peak_kib() - before);

  /* A foreach holds at most SCREE__CACHE_MAX_ROWS rows. */
  snprintf(sql, sizeof sql,
           "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i <= %d)"
           " INSERT INTO misses SELECT 'rmsnorm', 'rows<=' || i, 'x=fp16', 0, 'sm_90', '', 1,"
           " 1, 1 FROM n", SCREE__CACHE_MAX_ROWS);
  db_exec(mp, sql);
  int nm = 0;
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, count_miss_cb, &nm),
                   SCREE_ERROR_CACHE);
  ck_assert_int_eq(nm, 0);
  char err[512];
  scree__cache_last_error(c, err, sizeof err);
  ck_assert_msg(strstr(err, "more than 100000 rows in misses"), "err: %s", err);
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
  ck_assert_str_eq(e->config, CFG[0]);
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
      scree__cache_export(c, d1, "sm_90", "rmsnorm", &n, NULL, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(n, 3);
  ck_assert_str_eq(why, "");
  /* The destination must be new. */
  ck_assert_int_eq(
      scree__cache_export(c, d1, NULL, NULL, &n, NULL, why, sizeof why),
      SCREE_ERROR_IO);
  ck_assert_int_eq(n, 0);
  ck_assert_msg(strstr(why, "exists"), "why: %s", why);
  char *junk = pjoin(dir, "junk");
  write_all(junk, "keep me", 7);
  ck_assert_int_eq(
      scree__cache_export(c, junk, NULL, NULL, &n, NULL, why, sizeof why),
      SCREE_ERROR_IO);
  size_t jn;
  char *jb = read_all(junk, &jn);
  ck_assert_uint_eq(jn, 7);
  ck_assert_int_eq(memcmp(jb, "keep me", 7), 0);
  free(jb);
  ck_assert_int_eq(scree__cache_export(c, pjoin(dir, "no/such/dir.db"), NULL,
                                       NULL, &n, NULL, why, sizeof why),
                   SCREE_ERROR_IO);
  /* An empty output path says so. */
  ck_assert_int_eq(scree__cache_export(c, "", NULL, NULL, &n, NULL, why, sizeof why),
                   SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(why, "no output path"), "why: %s", why);

  char *d2 = pjoin(dir, "d2.db"), *d3 = pjoin(dir, "d3.db"),
       *d4 = pjoin(dir, "d4.db");
  ck_assert_int_eq(scree__cache_export(c, d2, NULL, NULL, &n, NULL, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(n, 12);
  ck_assert_int_eq(
      scree__cache_export(c, d3, "", "softmax", &n, NULL, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(n, 6);
  ck_assert_int_eq(
      scree__cache_export(c, d4, "sm_70", NULL, &n, NULL, why, sizeof why),
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
  scree__ckey k = key("rmsnorm", "rows<=1024,cols=4096", OP_DTYPES[0], 0, "sm_90");
  flip_cubin_byte(path, &k, 0);
  c = open_rw(path);
  char *d5 = pjoin(dir, "d5.db");
  ck_assert_int_eq(
      scree__cache_export(c, d5, "sm_90", "rmsnorm", &n, NULL, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_msg(strstr(why, "skipped 1 row(s)") && strstr(why, "hash check"), "why: %s", why);
  scree__cache_close(c);

  /* So is a row whose cubin is fine but whose key is not (causal=2, written
   * with the sqlite3 shell): its cubin, read before the row was judged, is
   * freed (LeakSanitizer found it leaked). */
  db_exec(path, "UPDATE winners SET causal = 2 WHERE op = 'rmsnorm' AND arch = 'sm_90' "
                "AND bucket = 'rows<=2048,cols=4096'");
  c = open_rw(path);
  char *d6 = pjoin(dir, "d6.db");
  ck_assert_int_eq(
      scree__cache_export(c, d6, "sm_90", "rmsnorm", &n, NULL, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(n, 1);
  ck_assert_msg(strstr(why, "skipped 2 row(s)") &&
                    strstr(why, "1 winner(s) whose cubin failed its hash check, 1 row(s) that "
                                "failed their checks"),
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
      scree__cache_export(c, exp, "sm_90", NULL, &n, NULL, why, sizeof why),
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

/* One limit: no write makes a cache of more winners than a listing reads. */
START_TEST(row_limit_held_where_rows_are_written) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db"), *src = pjoin(dir, "src.db");
  scree__cache *c = open_rw(path);
  scree__cache_close(c);
  char sql[512];
  snprintf(sql, sizeof sql,
           "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)"
           " INSERT INTO winners SELECT 'rmsnorm', 'b' || i, 'x', 0, 'sm_90', '%s', 'c', 1, 0,"
           " 'd', 0, 0, 0, 'v', 0, 'h', x'00' FROM n",
           SCREE__CACHE_MAX_ROWS, g_src);
  db_exec(path, sql);
  c = open_rw(src);
  scree__ckey k = keyi(0);
  put_ok(c, &k, CFG[0], 10, 1, 1);
  scree__cache_close(c);
  c = open_rw(path);
  scree__merge_counts n;
  char why[1024];
  ck_assert_int_eq(scree__cache_merge(c, src, 0, &n, NULL, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "more than 100000 rows") && strstr(why, "nothing merged"), "%s", why);
  scree__centry e = entry(&k, CFG[0], 10, 1, 600);
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_ERROR_CACHE);
  scree__centry_free(&e);
  scree__cache_close(c);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), SCREE__CACHE_MAX_ROWS);
  /* One row fewer: there is room for exactly one more. */
  db_exec(path, "DELETE FROM winners WHERE bucket = 'b1'");
  c = open_rw(path);
  ck_assert_int_eq(scree__cache_merge(c, src, 0, &n, NULL, NULL, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(n.added, 1);
  scree__cache_close(c);
}
END_TEST

/* The misses and bad configs that the runtime records hold to the same
 * limit: a record that would add a row past it is refused and writes
 * nothing; one that updates a row already there is taken. */
START_TEST(row_limit_held_for_misses_and_bad_configs) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  scree__cache *c = open_rw(path);
  scree__cache_close(c);
  char sql[512];
  snprintf(sql, sizeof sql,
           "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)"
           " INSERT INTO misses(op, bucket, dtype, causal, arch, example, count, first_seen,"
           " last_seen) SELECT 'rmsnorm', 'b' || i, 'x', 0, 'sm_90', '',"
           " 1, 0, 0 FROM n",
           SCREE__CACHE_MAX_ROWS);
  db_exec(path, sql);
  snprintf(sql, sizeof sql,
           "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)"
           " INSERT INTO bad_configs(op, dtype, causal, arch, src_hash, config, nvrtc_version,"
           " bucket, reason, created) SELECT 'rmsnorm', 'x', 0, 'sm_90', '%s',"
           " 'c' || i, 1, '*', 'r', 0 FROM n",
           SCREE__CACHE_MAX_ROWS, g_src);
  db_exec(path, sql);
  c = open_rw(path);
  scree__ckey k = keyi(0);
  char why[512];
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "e"), SCREE_ERROR_CACHE);
  scree__cache_last_error(c, why, sizeof why);
  ck_assert_msg(strstr(why, "misses would hold more than 100000 rows"), "%s", why);
  ck_assert_int_eq(scree__cache_record_bad(c, &k, CFG[0], 1, "r"), SCREE_ERROR_CACHE);
  scree__ckey old = key("rmsnorm", "*", "x", 0, "sm_90");
  ck_assert_int_eq(scree__cache_record_bad(c, &old, "c7", 1, "again"), SCREE_OK);
  snprintf(old.bucket, sizeof old.bucket, "b7");
  ck_assert_int_eq(scree__cache_record_miss(c, &old, "again"), SCREE_OK);
  scree__cache_close(c);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM misses"), SCREE__CACHE_MAX_ROWS);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM bad_configs"), SCREE__CACHE_MAX_ROWS);
  ck_assert_int_eq(db_int(path, "SELECT count FROM misses WHERE bucket = 'b7'"), 2);
}
END_TEST

SCREE_TEST_MAIN(.name = "cache_admin", .setup_once = base_setup, .teardown_once = base_teardown,
                .tests = SCREE_TESTS(clear_with_filters, merge_semantics,
                                     merge_refuses_what_it_cannot_check,
                                     export_refuses_what_it_cannot_check,
                                     sizes_from_a_file_are_bounded, export_with_filters,
                                     exported_cache_opens_readonly_anywhere,
                                     row_limit_held_where_rows_are_written,
                                     row_limit_held_for_misses_and_bad_configs))
