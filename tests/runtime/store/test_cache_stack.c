/* test_cache_stack.c - the default path and the stack of user, shipped and
 * shipped tuned configs (src/runtime/store/cache_stack.c). */
#include "cache_fixtures.h"

/* ------------------------------------------------------------------------ */
/* Layering                                                                  */
/* ------------------------------------------------------------------------ */

START_TEST(stack_layering_order) {
  char *dir = tdir();
  char *up = pjoin(dir, "user/tune.db"), *s1 = pjoin(dir, "s1.db"),
       *s2 = pjoin(dir, "s2.db"), *missing = pjoin(dir, "missing.db");
  scree__ckey k1 = keyi(1), k2 = keyi(2), k3 = keyi(3), k4 = keyi(4);
  scree__cache *c = open_rw(up);
  put_ok(c, &k1, "u1", 9, 1, 1);
  scree__cache_close(c);
  c = open_rw(s1);
  put_ok(c, &k1, "s1-1", 1, 2, 1); /* faster, but the user's level wins */
  put_ok(c, &k2, "s1-2", 9, 3, 1);
  scree__cache_close(c);
  c = open_rw(s2);
  put_ok(c, &k2, "s2-2", 1, 4, 1);
  put_ok(c, &k3, "s2-3", 9, 5, 1);
  scree__cache_close(c);

  char search[2048];
  snprintf(search, sizeof search, "%s:%s::%s:", s1, missing, s2);
  scree__cache_stack s;
  char warn[2048];
  ck_assert_int_eq(scree__cache_stack_open(&s, up, search, warn, sizeof warn),
                   SCREE_OK);
  ck_assert_ptr_nonnull(s.user);
  ck_assert_int_eq(s.nshipped, 2);
  ck_assert_str_eq(scree__cache_path(s.shipped[0]), s1);
  ck_assert_str_eq(scree__cache_path(s.shipped[1]), s2);
  ck_assert_int_eq(scree__cache_readonly(s.shipped[0]), 1);
  ck_assert_msg(strstr(warn, missing) && strstr(warn, "skipped"), "warn: %s",
                warn);
  int lines = 0;
  for (const char *q = warn; *q; q++) lines += *q == '\n';
  ck_assert_int_eq(lines, 0); /* one line, no trailing newline */
  ck_assert_int_eq(access(missing, F_OK), -1); /* read-only: not created */

  scree__centry g;
  scree__cache_level lv;
  ck_assert_int_eq(scree__cache_stack_get(&s, &k1, &g, &lv), SCREE_OK);
  ck_assert_int_eq(lv, SCREE__LEVEL_USER);
  ck_assert_str_eq(g.config, "u1");
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k2, &g, &lv), SCREE_OK);
  ck_assert_int_eq(lv, SCREE__LEVEL_SHIPPED);
  ck_assert_str_eq(g.config, "s1-2");
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k3, &g, &lv), SCREE_OK);
  ck_assert_int_eq(lv, SCREE__LEVEL_SHIPPED);
  ck_assert_str_eq(g.config, "s2-3");
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  lv = SCREE__LEVEL_USER;
  ck_assert_int_eq(scree__cache_stack_get(&s, &k4, &g, &lv),
                   SCREE_ERROR_NOT_FOUND);
  ck_assert_int_eq(lv, SCREE__LEVEL_NONE);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k4, &g, NULL),
                   SCREE_ERROR_NOT_FOUND);

  /* Writing to the user level makes it answer first. */
  put_ok(s.user, &k3, "u3", 50, 6, 1);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k3, &g, &lv), SCREE_OK);
  ck_assert_int_eq(lv, SCREE__LEVEL_USER);
  ck_assert_str_eq(g.config, "u3");
  scree__centry_free(&g);
  /* Shipped levels refuse writes. */
  scree__centry e = entry(&k4, "x", 1, 1, 64);
  ck_assert_int_eq(scree__cache_put(s.shipped[0], &e, NULL),
                   SCREE_ERROR_CACHE);
  scree__centry_free(&e);
  scree__cache_stack_close(&s);
  ck_assert_ptr_null(s.user);
  ck_assert_ptr_null(s.shipped);
  ck_assert_int_eq(s.nshipped, 0);
}
END_TEST

/* The shipped tuned configs (text) are the stack's lowest level: they
 * answer after every SQLite level, with a config and a time and no cubin,
 * the entry of the stack's GPU model first; next() goes on below a level
 * whose entry the caller could not use. */
START_TEST(stack_tuned_configs_are_the_lowest_level) {
  char *dir = tdir();
  char *up = pjoin(dir, "user/tune.db"), *sp = pjoin(dir, "shipped.db"),
       *txt = pjoin(dir, "tuned.txt");
  const scree__ckey k1 = keyi(1), k2 = keyi(2), k3 = keyi(3);
  FILE *f = fopen(txt, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "%s %s %s 0 sm_90 NVIDIA_H100_80GB_HBM3 %s 5.5 %s\n", k1.op, k1.bucket, k1.dtype,
          CFG[0], g_src);
  fprintf(f, "%s %s %s 0 sm_90 NVIDIA_H100_80GB_HBM3 %s 6.5 %s\n", k2.op, k2.bucket, k2.dtype,
          CFG[1], g_src);
  fprintf(f, "%s %s %s 0 sm_90 NVIDIA_H200 %s 7.5 %s\n", k2.op, k2.bucket, k2.dtype, CFG[2],
          g_src);
  fclose(f);
  const char *const dbs[] = {up, sp}, *const configs[] = {"u1", "s1"};
  for (int i = 0; i < 2; i++) {
    scree__cache *c = open_rw(dbs[i]);
    put_ok(c, &k1, configs[i], 9, (uint32_t)i + 1, 1);
    scree__cache_close(c);
  }
  setenv("SCREE_TUNED_CONFIGS", txt, 1);
  scree__cache_stack s;
  char warn[2048];
  ck_assert_int_eq(scree__cache_stack_open(&s, up, sp, warn, sizeof warn), SCREE_OK);
  ck_assert_msg(!warn[0], "%s", warn);
  ck_assert_str_eq(s.device, "");

  /* k1 on every level, walked in order. */
  scree__centry g;
  scree__cache_level lv;
  static const struct {
    scree__cache_level level;
    const char *config;
  } walk[] = {{SCREE__LEVEL_USER, "u1"}, {SCREE__LEVEL_SHIPPED, "s1"}, {SCREE__LEVEL_TUNED, NULL}};
  int pos = 0;
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(scree__cache_stack_next(&s, &k1, &pos, &g, &lv), SCREE_OK);
    ck_assert_int_eq(lv, walk[i].level);
    ck_assert_str_eq(g.config, walk[i].config ? walk[i].config : CFG[0]);
    scree__centry_free(&g);
  }
  ck_assert_int_eq(scree__cache_stack_next(&s, &k1, &pos, &g, &lv), SCREE_ERROR_NOT_FOUND);
  ck_assert_int_eq(lv, SCREE__LEVEL_NONE);

  /* k2 only in the text: no cubin, the time and model as written. */
  ck_assert_int_eq(scree__cache_stack_get(&s, &k2, &g, &lv), SCREE_OK);
  ck_assert_int_eq(lv, SCREE__LEVEL_TUNED);
  ck_assert_str_eq(g.config, CFG[1]);
  ck_assert_ptr_null(g.cubin);
  ck_assert_int_eq(g.cubin_ok, 0);
  ck_assert(g.median_us == 6.5);
  ck_assert_str_eq(g.device_name, "NVIDIA_H100_80GB_HBM3");
  ck_assert_int_eq(memcmp(&g.key, &k2, sizeof k2), 0);
  scree__centry_free(&g);
  /* This GPU's model first (blanks and '_' alike), else the first. */
  snprintf(s.device, sizeof s.device, "NVIDIA H200");
  ck_assert_int_eq(scree__cache_stack_get(&s, &k2, &g, &lv), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[2]);
  scree__centry_free(&g);
  snprintf(s.device, sizeof s.device, "NVIDIA A100-SXM4-80GB");
  ck_assert_int_eq(scree__cache_stack_get(&s, &k2, &g, &lv), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[1]);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k3, &g, &lv), SCREE_ERROR_NOT_FOUND);
  scree__cache_stack_close(&s);

  /* SCREE_TUNED_CONFIGS=none: no such level. */
  setenv("SCREE_TUNED_CONFIGS", "none", 1);
  ck_assert_int_eq(scree__cache_stack_open(&s, up, sp, warn, sizeof warn), SCREE_OK);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k2, &g, &lv), SCREE_ERROR_NOT_FOUND);
  ck_assert_int_eq(lv, SCREE__LEVEL_NONE);
  scree__cache_stack_close(&s);
}
END_TEST

START_TEST(stack_without_user_cache) {
  char *dir = tdir();
  char *blocker = pjoin(dir, "blocker");
  write_all(blocker, "x", 1);
  char *up = pjoin(dir, "blocker/sub/tune.db"); /* parent is a file */
  char *sp = pjoin(dir, "shipped.db");
  scree__ckey k = keyi(0);
  scree__cache *c = open_rw(sp);
  put_ok(c, &k, "s", 3, 1, 1);
  scree__cache_close(c);

  char why[1024];
  ck_assert_int_eq(scree__cache_open(up, 0, &c, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_ptr_null(c);
  ck_assert_str_ne(why, "");

  scree__cache_stack s;
  char warn[2048];
  ck_assert_int_eq(scree__cache_stack_open(&s, up, sp, warn, sizeof warn),
                   SCREE_OK);
  ck_assert_ptr_null(s.user);
  ck_assert_int_eq(s.nshipped, 1);
  ck_assert_msg(strstr(warn, "running without a user cache") &&
                    strstr(warn, up),
                "warn: %s", warn);
  scree__centry g;
  scree__cache_level lv;
  ck_assert_int_eq(scree__cache_stack_get(&s, &k, &g, &lv), SCREE_OK);
  ck_assert_int_eq(lv, SCREE__LEVEL_SHIPPED);
  scree__centry_free(&g);
  scree__ckey k2 = keyi(2);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k2, &g, &lv),
                   SCREE_ERROR_NOT_FOUND);
  scree__cache_stack_close(&s);

  /* One line per problem, separated by newlines. */
  char search2[1024];
  snprintf(search2, sizeof search2, "%s:/nonexistent/a.db:/nonexistent/b.db",
           sp);
  ck_assert_int_eq(
      scree__cache_stack_open(&s, up, search2, warn, sizeof warn), SCREE_OK);
  ck_assert_int_eq(s.nshipped, 1);
  int lines = 0;
  for (const char *q = warn; *q; q++) lines += *q == '\n';
  ck_assert_int_eq(lines, 2);
  ck_assert(warn[strlen(warn) - 1] != '\n');
  ck_assert_msg(strstr(warn, "/nonexistent/a.db") &&
                    strstr(warn, "/nonexistent/b.db"),
                "warn: %s", warn);
  scree__cache_stack_close(&s);

  /* A tiny warn buffer is never overrun and stays terminated. */
  char tiny[8];
  memset(tiny, 'q', sizeof tiny);
  ck_assert_int_eq(scree__cache_stack_open(&s, up, "/nonexistent/a.db", tiny,
                                           sizeof tiny),
                   SCREE_OK);
  ck_assert_ptr_nonnull(memchr(tiny, 0, sizeof tiny));
  scree__cache_stack_close(&s);
}
END_TEST

/* A pinned stack (docs/cache.md#a-pinned-cache): one read-only file, the
 * only level (no user cache, shipped caches or shipped tuned configs),
 * never written; a miss is an error that names the bucket and the file. */
START_TEST(pinned_stack_is_the_only_level_and_read_only) {
  char *dir = tdir();
  char *pin = pjoin(dir, "pinned.db"), *sp = pjoin(dir, "shipped.db"),
       *txt = pjoin(dir, "tuned.txt"), *cdir = pjoin(dir, "user");
  const scree__ckey k1 = keyi(1), k2 = keyi(2);
  scree__cache *c = open_rw(pin);
  put_ok(c, &k1, CFG[0], 9, 1, 1);
  scree__cache_close(c);
  db_exec(pin, "PRAGMA journal_mode=DELETE"); /* as export writes it */
  c = open_rw(sp);
  put_ok(c, &k2, CFG[1], 9, 2, 1);
  scree__cache_close(c);
  FILE *f = fopen(txt, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "%s %s %s 0 sm_90 NVIDIA_H100_80GB_HBM3 %s 6.5 %s\n", k2.op, k2.bucket, k2.dtype,
          CFG[2], g_src);
  fclose(f);
  /* k2 is in every other level a stack would have. */
  setenv("SCREE_TUNED_CONFIGS", txt, 1);
  setenv("SCREE_CACHE_PATH", sp, 1);
  setenv("SCREE_CACHE_DIR", cdir, 1);
  size_t n0 = 0, n1 = 0;
  void *before = read_all(pin, &n0);
  struct stat sb0, sb1;
  ck_assert_int_eq(stat(pin, &sb0), 0);

  scree__cache_stack s;
  char why[2048];
  ck_assert_int_eq(scree__cache_stack_open_pinned(&s, pin, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(s.pinned, 1);
  ck_assert_ptr_null(s.user);
  ck_assert_ptr_null(s.tuned);
  ck_assert_int_eq(s.nshipped, 1);
  ck_assert_int_eq(scree__cache_readonly(s.shipped[0]), 1);
  scree__centry g;
  scree__cache_level lv;
  ck_assert_int_eq(scree__cache_stack_get(&s, &k1, &g, &lv), SCREE_OK);
  ck_assert_str_eq(g.config, CFG[0]);
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  /* The other levels are not asked: a miss, and an error because pinned. */
  ck_assert_int_eq(scree__cache_stack_get(&s, &k2, &g, &lv), SCREE_ERROR_NOT_FOUND);
  ck_assert_int_eq(lv, SCREE__LEVEL_NONE);
  ck_assert_int_eq(scree__cache_stack_pinned_miss(&s, &k2, why, sizeof why), 1);
  ck_assert_msg(strstr(why, "rmsnorm") && strstr(why, k2.bucket) && strstr(why, k2.dtype) &&
                    strstr(why, "sm_90") && strstr(why, pin) && strstr(why, "pinned"),
                "%s", why);
  /* Writes through the handle fail: it is read-only. */
  scree__centry e = entry(&k2, CFG[1], 5, 3, 600);
  ck_assert_int_ne(scree__cache_put(s.shipped[0], &e, NULL), SCREE_OK);
  scree__centry_free(&e);
  ck_assert_int_ne(scree__cache_record_miss(s.shipped[0], &k2, "rows=5,cols=4096"), SCREE_OK);
  scree__cache_stack_close(&s);
  /* Nothing written: the same bytes, the same mtime, no journal, no user
   * cache created. */
  void *after = read_all(pin, &n1);
  ck_assert_uint_eq(n0, n1);
  ck_assert_int_eq(memcmp(before, after, n0), 0);
  free(before);
  free(after);
  ck_assert_int_eq(stat(pin, &sb1), 0);
  ck_assert(sb0.st_mtim.tv_sec == sb1.st_mtim.tv_sec &&
            sb0.st_mtim.tv_nsec == sb1.st_mtim.tv_nsec);
  char side[600];
  snprintf(side, sizeof side, "%s-journal", pin);
  ck_assert(!exists(side));
  snprintf(side, sizeof side, "%s-wal", pin);
  ck_assert(!exists(side));
  ck_assert(!exists(cdir));

  /* An unpinned stack: a miss is the miss policy's, not an error here. */
  ck_assert_int_eq(scree__cache_stack_open(&s, NULL, NULL, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(s.pinned, 0);
  ck_assert_int_eq(scree__cache_stack_pinned_miss(&s, &k2, why, sizeof why), 0);
  ck_assert_int_eq(scree__cache_stack_pinned_miss(NULL, &k2, why, sizeof why), 0);
  scree__cache_stack_close(&s);
  unsetenv("SCREE_TUNED_CONFIGS");
  unsetenv("SCREE_CACHE_PATH");
  unsetenv("SCREE_CACHE_DIR");

  /* Bad pins fail, naming the file, and create nothing. */
  char *none = pjoin(dir, "none.db");
  ck_assert_int_eq(scree__cache_stack_open_pinned(&s, none, why, sizeof why),
                   SCREE_ERROR_NOT_FOUND);
  ck_assert_msg(strstr(why, none) && strstr(why, "missing or empty"), "%s", why);
  ck_assert_int_eq(s.pinned, 0);
  ck_assert_int_eq(s.nshipped, 0);
  ck_assert(!exists(none));
  char *text = pjoin(dir, "text.db");
  write_all(text, "not a cache at all", 18);
  ck_assert_int_eq(scree__cache_stack_open_pinned(&s, text, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, text), "%s", why);
  char *newer = pjoin(dir, "newer.db");
  c = open_rw(newer);
  put_ok(c, &k1, CFG[0], 9, 1, 1);
  scree__cache_close(c);
  db_exec(newer, "PRAGMA user_version = 99");
  ck_assert_int_eq(scree__cache_stack_open_pinned(&s, newer, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, newer) && strstr(why, "99"), "%s", why);
  ck_assert_int_eq(scree__cache_stack_open_pinned(&s, "", why, sizeof why),
                   SCREE_ERROR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(default_path_resolution) {
  char buf[1024];
  unsetenv("SCREE_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/someone", 1);
  ck_assert_int_eq(scree__cache_default_path(buf, sizeof buf), SCREE_OK);
  ck_assert_str_eq(buf, "/home/someone/.cache/scree/tune.db");
  setenv("XDG_CACHE_HOME", "relative/cache", 1); /* not absolute: ignored */
  ck_assert_int_eq(scree__cache_default_path(buf, sizeof buf), SCREE_OK);
  ck_assert_str_eq(buf, "/home/someone/.cache/scree/tune.db");
  setenv("XDG_CACHE_HOME", "/xdg/cache/", 1);
  ck_assert_int_eq(scree__cache_default_path(buf, sizeof buf), SCREE_OK);
  ck_assert_str_eq(buf, "/xdg/cache/scree/tune.db");
  setenv("SCREE_CACHE_DIR", "", 1); /* empty counts as unset */
  ck_assert_int_eq(scree__cache_default_path(buf, sizeof buf), SCREE_OK);
  ck_assert_str_eq(buf, "/xdg/cache/scree/tune.db");
  setenv("SCREE_CACHE_DIR", "/opt/scree-cache", 1);
  ck_assert_int_eq(scree__cache_default_path(buf, sizeof buf), SCREE_OK);
  ck_assert_str_eq(buf, "/opt/scree-cache/tune.db");
  ck_assert_int_eq(scree__cache_default_path(buf, 10),
                   SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(buf, "");
  ck_assert_int_eq(scree__cache_default_path(NULL, 10),
                   SCREE_ERROR_INVALID_ARGUMENT);
  unsetenv("SCREE_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  /* Unset, empty or relative: the passwd entry's home, or NOT_FOUND; a
   * relative HOME never puts the cache under the working directory. */
  static const char *const homes[] = {NULL, "", "relative/home", "."};
  for (size_t i = 0; i < sizeof homes / sizeof homes[0]; i++) {
    if (homes[i])
      setenv("HOME", homes[i], 1);
    else
      unsetenv("HOME");
    scree_status st = scree__cache_default_path(buf, sizeof buf);
    if (st == SCREE_OK) {
      size_t n = strlen(buf), t = strlen("/.cache/scree/tune.db");
      ck_assert_uint_gt(n, t);
      ck_assert_str_eq(buf + n - t, "/.cache/scree/tune.db");
      ck_assert_msg(buf[0] == '/', "HOME=%s: %s", homes[i] ? homes[i] : "(unset)", buf);
    } else {
      ck_assert_int_eq(st, SCREE_ERROR_NOT_FOUND);
    }
  }
  unsetenv("HOME");

  /* The stack uses them: user_path NULL and search_path NULL. */
  char *dir = tdir();
  char *cdir = pjoin(dir, "cachedir/scree");
  char *sp = pjoin(dir, "shipped.db");
  scree__cache *c = open_rw(sp);
  scree__ckey k = keyi(0);
  put_ok(c, &k, "s", 3, 1, 1);
  scree__cache_close(c);
  setenv("SCREE_CACHE_DIR", cdir, 1);
  setenv("SCREE_CACHE_PATH", sp, 1);
  scree__cache_stack s;
  char warn[1024];
  ck_assert_int_eq(scree__cache_stack_open(&s, NULL, NULL, warn, sizeof warn),
                   SCREE_OK);
  ck_assert_str_eq(warn, "");
  ck_assert_ptr_nonnull(s.user);
  char *want = pjoin(cdir, "tune.db");
  ck_assert_str_eq(scree__cache_path(s.user), want);
  ck_assert_int_eq(s.nshipped, 1);
  scree__cache_stack_close(&s);
  ck_assert(exists(want));
  struct stat sb;
  ck_assert_int_eq(stat(cdir, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 0777, 0700);

  /* XDG_CACHE_HOME is used when SCREE_CACHE_DIR is unset. */
  unsetenv("SCREE_CACHE_DIR");
  char *xdg = pjoin(dir, "xdg");
  setenv("XDG_CACHE_HOME", xdg, 1);
  ck_assert_int_eq(scree__cache_stack_open(&s, NULL, "", warn, sizeof warn),
                   SCREE_OK);
  ck_assert_int_eq(s.nshipped, 0);
  char *want2 = pjoin(xdg, "scree/tune.db");
  ck_assert_str_eq(scree__cache_path(s.user), want2);
  scree__cache_stack_close(&s);
  ck_assert(exists(want2));
}
END_TEST

SCREE_TEST_MAIN(.name = "cache_stack", .setup_once = base_setup, .teardown_once = base_teardown,
                .tests = SCREE_TESTS(stack_layering_order, stack_tuned_configs_are_the_lowest_level,
                                     stack_without_user_cache,
                                     pinned_stack_is_the_only_level_and_read_only,
                                     default_path_resolution))
