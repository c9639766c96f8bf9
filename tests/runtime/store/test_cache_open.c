/* test_cache_open.c - opening a cache file: schema, versions, arguments, read-only handles, recovery of corrupt files (src/runtime/store/cache_open.c, cache_db.c). */
#include "cache_fixtures.h"

#define NCHILD 6 /* processes racing to recover one file */

/* ------------------------------------------------------------------------ */
/* Opening, schema, versions                                                 */
/* ------------------------------------------------------------------------ */

START_TEST(fresh_file_gets_schema) {
  char *dir = tdir();
  char *path = pjoin(dir, "a/b/tune.db");
  scree__cache *c = open_rw(path);
  ck_assert_str_eq(scree__cache_path(c), path);
  ck_assert_int_eq(scree__cache_readonly(c), 0);
  char why[256];
  ck_assert_int_eq(scree__cache_check(c, 1, why, sizeof why), SCREE_OK);
  scree__cache_close(c);

  char buf[256];
  ck_assert_int_eq(db_int(path, "PRAGMA user_version"), SCREE__CACHE_SCHEMA);
  ck_assert_int_eq(SCREE__CACHE_SCHEMA, 1);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM sqlite_master WHERE "
                                "type = 'table' AND name IN ('winners', "
                                "'bad_configs', 'misses', 'meta')"),
                   4);
  db_text(path, "SELECT value FROM meta WHERE key = 'created_by'", buf,
          sizeof buf);
  ck_assert_str_eq(buf, SCREE_VERSION_STRING);
  db_text(path, "PRAGMA journal_mode", buf, sizeof buf);
  ck_assert_str_eq(buf, "wal");
  db_text(path,
          "SELECT group_concat(name) FROM (SELECT name FROM "
          "pragma_table_info('winners') WHERE pk > 0 ORDER BY pk)",
          buf, sizeof buf);
  ck_assert_str_eq(buf, "op,bucket,dtype,causal,arch,src_hash");
  db_text(path,
          "SELECT group_concat(name) FROM (SELECT name FROM "
          "pragma_table_info('bad_configs') WHERE pk > 0 ORDER BY pk)",
          buf, sizeof buf);
  ck_assert_str_eq(buf,
                   "op,dtype,causal,arch,src_hash,config,nvrtc_version,bucket");
  db_text(path,
          "SELECT group_concat(name) FROM (SELECT name FROM "
          "pragma_table_info('misses') WHERE pk > 0 ORDER BY pk)",
          buf, sizeof buf);
  ck_assert_str_eq(buf, "op,bucket,dtype,causal,arch");
  db_text(path,
          "SELECT type FROM pragma_table_info('winners') WHERE name = 'cubin'",
          buf, sizeof buf);
  ck_assert_str_eq(buf, "BLOB");

  /* Reopening an existing cache neither fails nor rewrites its schema. */
  c = open_rw(path);
  scree__cache_close(c);
  ck_assert_int_eq(db_int(path, "PRAGMA user_version"), 1);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM meta"), 2);

  /* An empty (0-byte) file is a fresh cache too. */
  char *empty = pjoin(dir, "empty.db");
  write_all(empty, "", 0);
  c = open_rw(empty);
  scree__cache_close(c);
  ck_assert_int_eq(db_int(empty, "PRAGMA user_version"), 1);
}
END_TEST

START_TEST(new_directories_are_0700) {
  char *dir = tdir();
  char *path = pjoin(dir, "x/y/tune.db");
  mode_t old = umask(0); /* the mode must come from scree, not the umask */
  scree__cache *c = open_rw(path);
  umask(old);
  scree__cache_close(c);
  struct stat sb;
  char *x = pjoin(dir, "x"), *xy = pjoin(dir, "x/y");
  ck_assert_int_eq(stat(x, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 07777, 0700);
  ck_assert_int_eq(stat(xy, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 07777, 0700);
  /* An existing directory's mode is left alone. */
  ck_assert_int_eq(chmod(dir, 0755), 0);
  char *p2 = pjoin(dir, "tune2.db");
  c = open_rw(p2);
  scree__cache_close(c);
  ck_assert_int_eq(stat(dir, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 07777, 0755);
}
END_TEST

START_TEST(other_schema_version_refused) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = keyi(0);
  put_ok(c, &k, "tpr=128", 5, 1, 1);
  scree__cache_close(c);
  db_exec(path, "PRAGMA user_version = 2");

  char why[1024] = "";
  int rec = -1;
  c = (scree__cache *)1;
  ck_assert_int_eq(scree__cache_open(path, 0, &c, &rec, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(rec, 0);
  ck_assert_msg(strstr(why, "version 2") && strstr(why, "version 1"),
                "why: %s", why);
  ck_assert_msg(strstr(why, "newer"), "why: %s", why);
  ck_assert_int_eq(scree__cache_open(path, 1, &c, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "version 2") && strstr(why, "version 1"),
                "why: %s", why);
  /* Refused, not recovered: the file stays where it is, untouched. */
  ck_assert_int_eq(asides(path, NULL, 0), 0);
  ck_assert_int_eq(db_int(path, "PRAGMA user_version"), 2);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), 1);

  db_exec(path, "PRAGMA user_version = 7");
  ck_assert_int_eq(scree__cache_open(path, 0, &c, &rec, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "version 7"), "why: %s", why);
  /* A negative version is nobody's: never "an older scree". */
  db_exec(path, "PRAGMA user_version = -1");
  ck_assert_int_eq(scree__cache_open(path, 1, &c, NULL, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "version -1") && strstr(why, "not a scree cache") &&
                    !strstr(why, "older"),
                "why: %s", why);
  ck_assert_int_eq(db_int(path, "PRAGMA user_version"), -1);

  /* Somebody else's SQLite database is not ours to move or fill. */
  char *foreign = pjoin(dir, "foreign.db");
  db_exec(foreign, "CREATE TABLE t(x); INSERT INTO t VALUES(42);");
  ck_assert_int_eq(scree__cache_open(foreign, 0, &c, &rec, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "not a scree cache"), "why: %s", why);
  ck_assert_int_eq(rec, 0);
  ck_assert_int_eq(db_int(foreign, "SELECT x FROM t"), 42);
  ck_assert_int_eq(db_int(foreign, "SELECT count(*) FROM sqlite_master"), 1);
  char jm[32];
  db_text(foreign, "PRAGMA journal_mode", jm, sizeof jm);
  ck_assert_str_eq(jm, "delete"); /* not even switched to WAL */
  ck_assert_int_eq(asides(foreign, NULL, 0), 0);

  /* user_version 1 but a table lacks a column: refused. */
  char *odd = pjoin(dir, "odd.db");
  c = open_rw(odd);
  scree__cache_close(c);
  db_exec(odd, "DROP TABLE misses; CREATE TABLE misses(op TEXT);");
  ck_assert_int_eq(scree__cache_open(odd, 0, &c, &rec, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "not a valid scree cache"), "why: %s", why);
}
END_TEST

START_TEST(invalid_arguments) {
  scree__cache *c = NULL;
  char why[128];
  ck_assert_int_eq(scree__cache_open(NULL, 0, &c, NULL, why, sizeof why),
                   SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree__cache_open("", 0, &c, NULL, why, sizeof why),
                   SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree__cache_open("/tmp/x.db", 0, NULL, NULL, NULL, 0),
                   SCREE_ERROR_INVALID_ARGUMENT);
  scree__cache_close(NULL);
  scree__centry_free(NULL);
  scree__cache_stack_close(NULL);
  ck_assert_ptr_null(scree__cache_path(NULL));
  scree__ckey k = keyi(0);
  scree__centry e;
  ck_assert_int_eq(scree__cache_get(NULL, &k, &e),
                   SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree__cache_put(NULL, &e, NULL),
                   SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree__cache_is_bad(NULL, &k, "a", 1, NULL, 0), -1);
  ck_assert_int_eq(scree__cache_stack_open(NULL, NULL, NULL, NULL, 0),
                   SCREE_ERROR_INVALID_ARGUMENT);

  char *path = pjoin(tdir(), "tune.db");
  c = open_rw(path);
  scree__centry good = entry(&k, "tpr=1", 1.0, 1, 64);
  scree__centry bad = good;
  bad.cubin_size = 0;
  ck_assert_int_eq(scree__cache_put(c, &bad, NULL),
                   SCREE_ERROR_INVALID_ARGUMENT);
  bad = good;
  bad.cubin = NULL;
  ck_assert_int_eq(scree__cache_put(c, &bad, NULL),
                   SCREE_ERROR_INVALID_ARGUMENT);
  bad = good;
  bad.median_us = NAN;
  ck_assert_int_eq(scree__cache_put(c, &bad, NULL),
                   SCREE_ERROR_INVALID_ARGUMENT);
  bad = good;
  bad.median_us = -1;
  ck_assert_int_eq(scree__cache_put(c, &bad, NULL),
                   SCREE_ERROR_INVALID_ARGUMENT);
  bad = good;
  bad.key.op[0] = 0;
  ck_assert_int_eq(scree__cache_put(c, &bad, NULL),
                   SCREE_ERROR_INVALID_ARGUMENT);
  bad = good;
  bad.key.causal = 2;
  ck_assert_int_eq(scree__cache_put(c, &bad, NULL),
                   SCREE_ERROR_INVALID_ARGUMENT);
  char err[256];
  scree__cache_last_error(c, err, sizeof err);
  ck_assert_msg(strstr(err, "invalid entry"), "err: %s", err);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), 0);
  ck_assert_int_eq(scree__cache_put(c, &good, NULL), SCREE_OK);
  scree__centry_free(&good);
  scree__cache_close(c);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Read-only caches                                                          */
/* ------------------------------------------------------------------------ */

START_TEST(readonly_is_never_written) {
  char *dir = tdir();
  char *path = pjoin(dir, "shipped.db");
  scree__cache *c = open_rw(path);
  populate12(c);
  scree__cache_close(c);
  /* Backdate it: any write would move the mtime to now. */
  struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
  ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
  struct stat before, after;
  ck_assert_int_eq(stat(path, &before), 0);
  size_t n0, n1;
  void *bytes0 = read_all(path, &n0);

  c = open_ro(path);
  ck_assert_int_eq(scree__cache_readonly(c), 1);
  scree__ckey k = key("rmsnorm", "rows<=1024,cols=4096", OP_DTYPES[0], 0, "sm_90");
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  scree__centry e = entry(&k, "faster", 0.5, 99, 128);
  int rep = -1;
  ck_assert_int_eq(scree__cache_put(c, &e, &rep), SCREE_ERROR_CACHE);
  ck_assert_int_eq(rep, 0);
  char err[512];
  scree__cache_last_error(c, err, sizeof err);
  ck_assert_msg(strstr(err, "read-only"), "err: %s", err);
  scree__ckey mk = key("rmsnorm", "rows<=128,cols=4096", OP_DTYPES[0], 0, "sm_90");
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "x"), SCREE_ERROR_CACHE);
  ck_assert_int_eq(scree__cache_delete_miss(c, &mk), SCREE_ERROR_CACHE);
  ck_assert_int_eq(scree__cache_record_bad(c, &k, "cfg", 1, "r"),
                   SCREE_ERROR_CACHE);
  int del = -1;
  ck_assert_int_eq(scree__cache_clear(c, NULL, NULL, &del), SCREE_ERROR_CACHE);
  ck_assert_int_eq(del, 0);
  char why[512];
  ck_assert_int_eq(scree__cache_merge(c, path, 1, NULL, NULL, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  /* Reading still works. */
  ck_assert_int_eq(scree__cache_is_bad(c, &mk, "tpr=1024,rows=1,vec=8,cache=8", 12080, NULL, 0),
                   1);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 12);
  int nm = 0;
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, count_miss_cb, &nm),
                   SCREE_OK);
  ck_assert_int_eq(nm, 4);
  char *exp = pjoin(dir, "exported.db");
  int nexp = 0;
  ck_assert_int_eq(
      scree__cache_export(c, exp, NULL, NULL, &nexp, NULL, why, sizeof why),
      SCREE_OK);
  ck_assert_int_eq(nexp, 12);
  ck_assert_int_eq(scree__cache_check(c, 0, why, sizeof why), SCREE_OK);
  scree__cache_close(c);
  scree__centry_free(&e);

  ck_assert_int_eq(stat(path, &after), 0);
  ck_assert_int_eq(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  ck_assert_int_eq(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  ck_assert_int_eq(after.st_size, before.st_size);
  void *bytes1 = read_all(path, &n1);
  ck_assert_uint_eq(n0, n1);
  ck_assert_int_eq(memcmp(bytes0, bytes1, n0), 0);
  free(bytes0);
  free(bytes1);

  /* A read-only open of a missing file says there is nothing (NOT_FOUND)
   * and creates nothing, not even its directory. */
  char *none = pjoin(dir, "nodir/none.db");
  ck_assert_int_eq(scree__cache_open(none, 1, &c, NULL, why, sizeof why),
                   SCREE_ERROR_NOT_FOUND);
  ck_assert_msg(strstr(why, "no cache at "), "why: %s", why);
  ck_assert(!exists(none));
  ck_assert(!exists(pjoin(dir, "nodir")));
  /* Nor an empty file, which may be a cache another process is creating
   * right now: nothing is cached in it yet. */
  char *empty = pjoin(dir, "empty.db");
  write_all(empty, "", 0);
  ck_assert_int_eq(scree__cache_open(empty, 1, &c, NULL, why, sizeof why),
                   SCREE_ERROR_NOT_FOUND);
  ck_assert_msg(strstr(why, "is empty: nothing is cached in it yet"), "why: %s", why);
  struct stat es;
  ck_assert_int_eq(stat(empty, &es), 0);
  ck_assert_int_eq(es.st_size, 0);
}
END_TEST

/* Unreachable is not missing: a path through a regular file, a symlink
 * loop; and a path longer than a path may be is refused, never cut. */
START_TEST(unreachable_paths) {
  char *dir = tdir();
  char *file = pjoin(dir, "file"), *loop = pjoin(dir, "loop.db");
  write_all(file, "x", 1);
  ck_assert_int_eq(symlink(loop, loop), 0);
  scree__cache *c = NULL;
  char why[1024];
  for (int ro = 0; ro < 2; ro++) {
    ck_assert_int_eq(scree__cache_open(pjoin(file, "x.db"), ro, &c, NULL, why, sizeof why),
                     SCREE_ERROR_CACHE);
    ck_assert_msg(strstr(why, "ot a directory"), "why: %s", why);
    ck_assert_int_eq(scree__cache_open(loop, ro, &c, NULL, why, sizeof why), SCREE_ERROR_CACHE);
    ck_assert_msg(strstr(why, "Too many levels of symbolic links"), "why: %s", why);
  }
  static char longp[4200];
  memset(longp, 'a', sizeof longp - 1);
  longp[0] = '/';
  ck_assert_int_eq(scree__cache_open(longp, 0, &c, NULL, why, sizeof why),
                   SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(why, "4199 bytes, longer than the 4095"), "why: %s", why);
  ck_assert_ptr_null(c);
}
END_TEST

/* A reader racing a cache's creation by another process finds nothing
 * (NOT_FOUND, as for a missing or empty file) or a whole cache, never an
 * error such as "is empty, not a scree cache". */
START_TEST(reader_racing_creation) {
  char *dir = tdir();
  int opened = 0, absent = 0;
  for (int round = 0; round < 30; round++) {
    char name[32];
    snprintf(name, sizeof name, "race-%d.db", round);
    char *p = pjoin(dir, name);
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (!pid) {
      scree__cache *w = NULL;
      if (scree__cache_open(p, 0, &w, NULL, NULL, 0) != SCREE_OK) _exit(1);
      scree__ckey k = keyi(round);
      scree__centry e = entry(&k, CFG[0], 3, 1, 64);
      const int ok = scree__cache_put(w, &e, NULL) == SCREE_OK;
      scree__cache_close(w);
      _exit(ok ? 0 : 1);
    }
    for (;;) {
      const int done = waitpid(pid, NULL, WNOHANG) == pid;
      scree__cache *c = NULL;
      char why[1024];
      const scree_status st = scree__cache_open(p, 1, &c, NULL, why, sizeof why);
      ck_assert_msg(st == SCREE_OK || st == SCREE_ERROR_NOT_FOUND, "round %d: %s: %s", round,
                    scree_status_name(st), why);
      if (c) {
        opened++;
        scree__cache_close(c);
      } else {
        absent++;
      }
      if (done) break;
    }
    scree__cache *c = open_ro(p);
    ck_assert_int_eq(count_entries(c, NULL, NULL), 1);
    scree__cache_close(c);
  }
  ck_assert_int_gt(opened + absent, 30);
}
END_TEST

/* A file whose winners are a view, or a table without rowids, is not a
 * scree cache: rows are read again by rowid, and a view could compute
 * anything. */
START_TEST(views_and_without_rowid_refused) {
  char *dir = tdir();
  char *v = pjoin(dir, "view.db"), *w = pjoin(dir, "norowid.db");
  loose_cache(v);
  db_exec(v, "DROP TABLE winners; CREATE TABLE t(x); CREATE VIEW winners AS SELECT"
             " x AS op, x AS bucket, x AS dtype, x AS causal, x AS arch, x AS src_hash,"
             " x AS config, x AS median_us, x AS spread_us, x AS device_name, x AS sm_count,"
             " x AS driver_version, x AS nvrtc_version, x AS scree_version, x AS created,"
             " x AS cubin_hash, x AS cubin FROM t");
  loose_cache(w);
  db_exec(w, "DROP TABLE winners; CREATE TABLE winners(op, bucket, dtype, causal, arch,"
             " src_hash, config, median_us, spread_us, device_name, sm_count, driver_version,"
             " nvrtc_version, scree_version, created, cubin_hash, cubin,"
             " PRIMARY KEY(op, bucket, dtype, causal, arch, src_hash)) WITHOUT ROWID");
  const char *paths[] = {v, w};
  for (int i = 0; i < 2; i++) {
    scree__cache *c = NULL;
    char why[1024];
    ck_assert_int_eq(scree__cache_open(paths[i], 1, &c, NULL, why, sizeof why),
                     SCREE_ERROR_CACHE);
    ck_assert_msg(strstr(why, "is not a valid scree cache"), "why: %s", why);
    ck_assert_ptr_null(c);
  }
}
END_TEST

/* Opens path read-only in a child process without privileges (uid 65534
 * when this one is root, which would bypass permissions); returns the
 * child's exit code: 0 opened with n winners (n written to *nw), 1 not. */
static int open_ro_unprivileged(const char *path, char *why, size_t why_size, int *nw) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  const pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (!pid) {
    close(fds[0]);
    if (geteuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) _exit(126);
    scree__cache *c = NULL;
    char w[1024] = "";
    const scree_status st = scree__cache_open(path, 1, &c, NULL, w, sizeof w);
    int n = -1;
    if (st == SCREE_OK) {
      n = 0;
      scree__cache_foreach_entry(c, NULL, NULL, 0, count_entries_cb, &n);
      snprintf(w, sizeof w, "%d", n);
    }
    if (write(fds[1], w, strlen(w)) < 0) _exit(125);
    scree__cache_close(c);
    _exit(st == SCREE_OK ? 0 : 1);
  }
  close(fds[1]);
  ssize_t r = read(fds[0], why, why_size - 1);
  why[r > 0 ? r : 0] = 0;
  close(fds[0]);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  if (nw) *nw = atoi(why);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* A WAL-mode cache in a directory its reader cannot write: SQLite cannot
 * create the -shm there. With no -wal left the file is complete and is
 * read (as immutable); with a -wal that holds changes it is refused with a
 * reason, never read without them. */
START_TEST(wal_cache_in_a_read_only_directory) {
  char *dir = tdir(), *sub = pjoin(dir, "ro");
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  char *path = pjoin(sub, "tune.db");
  scree__cache *c = open_rw(path);
  populate12(c);
  scree__cache_close(c);
  size_t hn;
  unsigned char *hdr = read_all(path, &hn);
  ck_assert_int_eq(hdr[18], 2); /* WAL mode, in the header */
  free(hdr);
  ck_assert(!exists(pjoin(sub, "tune.db-wal")));
  ck_assert_int_eq(chmod(g_base, 0755), 0);
  ck_assert_int_eq(chmod(dir, 0755), 0);
  ck_assert_int_eq(chmod(sub, 0555), 0);
  char why[1024];
  int n = -1;
  ck_assert_msg(open_ro_unprivileged(path, why, sizeof why, &n) == 0, "why: %s", why);
  ck_assert_int_eq(n, 12);
  ck_assert(!exists(pjoin(sub, "tune.db-shm")));

  /* A writer that died with changes in its -wal, the -shm gone. */
  ck_assert_int_eq(chmod(sub, 0755), 0);
  const pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (!pid) {
    scree__cache *w = NULL;
    if (scree__cache_open(path, 0, &w, NULL, NULL, 0) != SCREE_OK) _exit(1);
    scree__ckey k = keyi(40);
    scree__centry e = entry(&k, CFG[0], 3, 1, 64);
    _exit(scree__cache_put(w, &e, NULL) == SCREE_OK ? 0 : 1); /* no close: -wal stays */
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  struct stat sb;
  ck_assert_int_eq(stat(pjoin(sub, "tune.db-wal"), &sb), 0);
  ck_assert_int_gt(sb.st_size, 0);
  unlink(pjoin(sub, "tune.db-shm"));
  ck_assert_int_eq(chmod(sub, 0555), 0);
  ck_assert_int_eq(open_ro_unprivileged(path, why, sizeof why, NULL), 1);
  ck_assert_msg(strstr(why, "its -wal file holds changes not yet in it"), "why: %s", why);
  ck_assert_int_eq(chmod(sub, 0755), 0);
  ck_assert_int_eq(chmod(g_base, 0700), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Corruption recovery                                                       */
/* ------------------------------------------------------------------------ */

static void check_fresh_cache_works(scree__cache *c, const char *path) {
  scree__ckey k = keyi(7);
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_NOT_FOUND);
  put_ok(c, &k, "fresh", 1, 3, 1);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "fresh");
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  char why[256];
  ck_assert_int_eq(scree__cache_check(c, 1, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(db_int(path, "PRAGMA user_version"), 1);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 1);
}

/* n bytes (n >= 100) of a damaged scree cache: a scree cache's SQLite
 * header (its first 100 bytes), then garbage. */
static void damaged_cache(uint8_t *buf, size_t n, uint32_t seed) {
  char *tmp = pjoin(tdir(), "header.db");
  scree__cache_close(open_rw(tmp));
  size_t hn;
  void *h = read_all(tmp, &hn);
  ck_assert_uint_ge(hn, 100);
  fill_bytes(buf, n, seed);
  memcpy(buf, h, 100);
  free(h);
}

/* Only a damaged scree cache is moved aside: a file of anything else, or a
 * directory, is refused and left exactly as it is. */
START_TEST(foreign_files_never_moved) {
  char *dir = tdir();
  char *path = pjoin(dir, "notes.txt");
  const char text[] = "my notes: not a cache\n";
  write_all(path, text, sizeof text - 1);
  scree__cache *c = NULL;
  char why[2048] = "";
  int rec = -1;
  ck_assert_int_eq(scree__cache_open(path, 0, &c, &rec, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(rec, 0);
  ck_assert_msg(strstr(why, path) && strstr(why, "not a damaged scree cache"), "why: %s", why);
  ck_assert_int_eq(asides(path, NULL, 0), 0);
  size_t n;
  void *b = read_all(path, &n);
  ck_assert_uint_eq(n, sizeof text - 1);
  ck_assert_int_eq(memcmp(b, text, n), 0);
  free(b);
  /* Random bytes, and another program's SQLite file damaged the same way. */
  uint8_t garbage[8192];
  fill_bytes(garbage, sizeof garbage, 99);
  char *g = pjoin(dir, "garbage.db");
  write_all(g, garbage, sizeof garbage);
  ck_assert_int_eq(scree__cache_open(g, 0, &c, &rec, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_int_eq(asides(g, NULL, 0), 0);
  damaged_cache(garbage, sizeof garbage, 99);
  garbage[63] ^= 0x40; /* user_version: not scree's */
  write_all(g, garbage, sizeof garbage);
  ck_assert_int_eq(scree__cache_open(g, 0, &c, &rec, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_int_eq(asides(g, NULL, 0), 0);
  /* A directory in the file's place. */
  char *d = pjoin(dir, "tune.db");
  ck_assert_int_eq(mkdir(d, 0755), 0);
  ck_assert_int_eq(scree__cache_open(d, 1, &c, &rec, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_int_eq(scree__cache_open(d, 0, &c, &rec, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "is a directory"), "why: %s", why);
  ck_assert_int_eq(asides(d, NULL, 0), 0);
  struct stat sb;
  ck_assert_int_eq(stat(d, &sb), 0);
  ck_assert(S_ISDIR(sb.st_mode));
}
END_TEST

START_TEST(recover_garbage_file) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  uint8_t garbage[8192];
  damaged_cache(garbage, sizeof garbage, 1234);
  write_all(path, garbage, sizeof garbage);

  /* Read-only: refused, file untouched. */
  scree__cache *c = NULL;
  char why[2048] = "";
  int rec = -1;
  ck_assert_int_eq(scree__cache_open(path, 1, &c, &rec, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(rec, 0);
  ck_assert_str_ne(why, "");
  ck_assert_int_eq(asides(path, NULL, 0), 0);

  /* Read-write: moved aside, fresh cache in its place. */
  int64_t t0 = (int64_t)time(NULL);
  ck_assert_int_eq(scree__cache_open(path, 0, &c, &rec, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(rec, 1);
  ck_assert_msg(strstr(why, "moved it aside") && strstr(why, ".corrupt-"),
                "why: %s", why);
  char aside[1024];
  ck_assert_int_eq(asides(path, aside, sizeof aside), 1);
  ck_assert_msg(strstr(why, aside), "why %s lacks %s", why, aside);
  long long stamp = atoll(aside + strlen(path) + strlen(".corrupt-"));
  ck_assert_int_ge(stamp, t0);
  ck_assert_int_le(stamp, (long long)time(NULL));
  size_t n;
  void *moved = read_all(aside, &n);
  ck_assert_uint_eq(n, sizeof garbage);
  ck_assert_int_eq(memcmp(moved, garbage, n), 0);
  free(moved);
  check_fresh_cache_works(c, path);
  scree__cache_close(c);

  /* Again, with recovered NULL: a second aside with a distinct name. */
  write_all(path, garbage, 100); /* a scree cache's header and nothing more */
  ck_assert_int_eq(scree__cache_open(path, 0, &c, NULL, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(asides(path, NULL, 0), 2);
  check_fresh_cache_works(c, path);
  scree__cache_close(c);
}
END_TEST

START_TEST(recover_truncated_cache) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  scree__cache *c = open_rw(path);
  for (int i = 0; i < 60; i++) {
    scree__ckey k = keyi(i);
    scree__centry e = entry(&k, "tpr=128", 10 + i, (uint32_t)i, 4096);
    ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_OK);
    scree__centry_free(&e);
  }
  ck_assert_int_eq(scree__cache_record_miss(c, &(scree__ckey){0}, "x"),
                   SCREE_ERROR_INVALID_ARGUMENT);
  scree__cache_close(c);
  ck_assert(!exists(pjoin(dir, "tune.db-wal"))); /* checkpointed on close */
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_gt(sb.st_size, 60 * 4096);
  off_t half = sb.st_size / 2;
  ck_assert_int_eq(truncate(path, half), 0);

  char why[2048] = "";
  int rec = -1;
  ck_assert_int_eq(scree__cache_open(path, 1, &c, &rec, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_int_eq(scree__cache_open(path, 0, &c, &rec, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(rec, 1);
  ck_assert_msg(strstr(why, "moved it aside"), "why: %s", why);
  char aside[1024];
  ck_assert_int_eq(asides(path, aside, sizeof aside), 1);
  ck_assert_int_eq(stat(aside, &sb), 0);
  ck_assert_int_eq(sb.st_size, half);
  check_fresh_cache_works(c, path);
  scree__ckey k0 = keyi(0);
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k0, &g), SCREE_ERROR_NOT_FOUND);
  scree__cache_close(c);
}
END_TEST

/* A stale -wal beside a damaged file must not be replayed into the fresh
 * cache: it is moved aside with it (or already discarded by SQLite). */
START_TEST(recover_moves_journals_aside) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db"), *wal = pjoin(dir, "tune.db-wal");
  uint8_t garbage[4096];
  damaged_cache(garbage, sizeof garbage, 77);
  write_all(path, garbage, sizeof garbage);
  write_all(wal, garbage, 1000);
  scree__cache *c = NULL;
  char why[2048];
  int rec = 0;
  ck_assert_int_eq(scree__cache_open(path, 0, &c, &rec, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(rec, 1);
  char aside[1024];
  ck_assert_int_eq(asides(path, aside, sizeof aside), 1);
  if (exists(wal)) { /* only the fresh cache's own WAL may be there */
    size_t n;
    void *b = read_all(wal, &n);
    ck_assert(n != 1000 || memcmp(b, garbage, n) != 0);
    free(b);
  }
  check_fresh_cache_works(c, path);
  scree__cache_close(c);
  ck_assert(!exists(wal)); /* checkpointed and removed on close */
}
END_TEST

/* Several processes find the same damaged cache at once: exactly one moves
 * it aside, all end up in the same fresh cache. */
static int recover_child(const char *path, int child) {
  scree__cache *c = NULL;
  char why[2048];
  int rec = 0;
  if (scree__cache_open(path, 0, &c, &rec, why, sizeof why) != SCREE_OK) {
    fprintf(stderr, "child %d: open: %s\n", child, why);
    return 2;
  }
  scree__ckey k = keyi(child);
  scree__centry e;
  memset(&e, 0, sizeof e);
  e.key = k;
  snprintf(e.config, sizeof e.config, "child=%d", child);
  e.median_us = 1;
  uint8_t cubin[100];
  fill_bytes(cubin, sizeof cubin, (uint32_t)child);
  e.cubin = cubin;
  e.cubin_size = sizeof cubin;
  if (scree__cache_put(c, &e, NULL) != SCREE_OK) return 3;
  scree__cache_close(c);
  return rec ? 10 : 0;
}

START_TEST(concurrent_recovery) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  uint8_t garbage[8192];
  damaged_cache(garbage, sizeof garbage, 4321);
  write_all(path, garbage, sizeof garbage);
  pid_t pids[NCHILD];
  for (int ch = 0; ch < NCHILD; ch++) {
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) _exit(recover_child(path, ch));
    pids[ch] = p;
  }
  int nrec = 0;
  for (int ch = 0; ch < NCHILD; ch++) {
    int status = 0;
    ck_assert_int_eq(waitpid(pids[ch], &status, 0), pids[ch]);
    ck_assert_msg(WIFEXITED(status) && (WEXITSTATUS(status) == 0 ||
                                        WEXITSTATUS(status) == 10),
                  "child %d failed: status %d", ch, status);
    nrec += WEXITSTATUS(status) == 10;
  }
  ck_assert_int_eq(nrec, 1);
  ck_assert_int_eq(asides(path, NULL, 0), 1);
  scree__cache *c = open_rw(path);
  ck_assert_int_eq(count_entries(c, NULL, NULL), NCHILD);
  scree__cache_close(c);
  char buf[64];
  db_text(path, "PRAGMA integrity_check", buf, sizeof buf);
  ck_assert_str_eq(buf, "ok");
}
END_TEST

/* The bucket tuning lock: one holder per key across open descriptions
 * (threads, processes), other keys free, a wait that gives up at its limit,
 * released by close or by the holder's death, none on a read-only cache. */
START_TEST(tune_lock_one_holder_per_bucket) {
  char *dir = tdir();
  char *path = pjoin(dir, "lock.db");
  scree__cache *c = open_rw(path);
  const scree__ckey k1 = keyi(1), k2 = keyi(2);
  int fa = -1, fb = -1, fc = -1;
  ck_assert_int_eq(scree__cache_tune_lock(c, &k1, 0, 0, &fa), 1);
  ck_assert_int_ge(fa, 0);
  ck_assert_int_eq(scree__cache_tune_lock(c, &k1, 0, 0, &fb), 0);
  ck_assert_int_eq(fb, -1);
  ck_assert_int_eq(scree__cache_tune_lock(c, &k2, 0, 0, &fc), 1);
  const double t0 = scree__now();
  ck_assert_int_eq(scree__cache_tune_lock(c, &k1, 1, 0.2, &fb), 0);
  ck_assert(scree__now() - t0 >= 0.2);
  scree__cache_tune_unlock(fa);
  ck_assert_int_eq(scree__cache_tune_lock(c, &k1, 0, 0, &fa), 1);
  scree__cache_tune_unlock(fa);
  /* A holder that dies leaves no lock behind; a waiter gets it. */
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    int f;
    char r = scree__cache_tune_lock(c, &k1, 0, 0, &f) == 1 ? 'y' : 'n';
    if (write(p[1], &r, 1) != 1) _exit(2);
    usleep(300000);
    _exit(0); /* without unlocking */
  }
  char r = 0;
  ck_assert_int_eq(read(p[0], &r, 1), 1);
  ck_assert_int_eq(r, 'y');
  ck_assert_int_eq(scree__cache_tune_lock(c, &k1, 0, 0, &fa), 0);
  ck_assert_int_eq(scree__cache_tune_lock(c, &k1, 1, 10, &fa), 1);
  int status;
  waitpid(pid, &status, 0);
  scree__cache_tune_unlock(fa);
  scree__cache_tune_unlock(fc);
  close(p[0]), close(p[1]);
  scree__cache_close(c);
  scree__cache *ro = open_ro(path);
  ck_assert_int_eq(scree__cache_tune_lock(ro, &k1, 0, 0, &fa), -1);
  scree__cache_close(ro);
}
END_TEST

/* A name that starts with "file:" names a file, never a URI: the file
 * opened is the one named, with the name as it is. */
START_TEST(file_colon_names_are_files) {
  char *dir = tdir();
  char cwd[1024];
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  ck_assert_int_eq(chdir(dir), 0);
  scree__cache *c = open_rw("x.db");
  scree__ckey k = keyi(0);
  put_ok(c, &k, CFG[0], 10, 1, 1);
  scree__cache_close(c);
  /* Read-only: "file:x.db" is no cache, x.db is not read in its place. */
  scree__cache *r = NULL;
  char why[1024];
  ck_assert_int_eq(scree__cache_open("file:x.db", 1, &r, NULL, why, sizeof why),
                   SCREE_ERROR_NOT_FOUND);
  ck_assert_ptr_null(r);
  /* Read-write: a new file of that very name, x.db untouched. */
  c = open_rw("file:x.db");
  ck_assert_int_eq(count_entries(c, NULL, NULL), 0);
  put_ok(c, &k, CFG[1], 5, 2, 1);
  scree__cache_close(c);
  ck_assert(exists("file:x.db"));
  c = open_rw("file:y.db?mode=memory");
  put_ok(c, &k, CFG[1], 5, 2, 1);
  scree__cache_close(c);
  ck_assert(exists("file:y.db?mode=memory"));
  c = open_ro("x.db");
  ck_assert_int_eq(count_entries(c, NULL, NULL), 1);
  scree__cache_close(c);
  ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

SCREE_TEST_MAIN(.name = "cache_open", .setup_once = base_setup, .teardown_once = base_teardown,
                .tests = SCREE_TESTS(fresh_file_gets_schema, new_directories_are_0700,
                                     other_schema_version_refused, invalid_arguments,
                                     readonly_is_never_written, unreachable_paths,
                                     views_and_without_rowid_refused, reader_racing_creation,
                                     wal_cache_in_a_read_only_directory, recover_garbage_file,
                                     recover_truncated_cache, foreign_files_never_moved,
                                     recover_moves_journals_aside, concurrent_recovery,
                                     tune_lock_one_holder_per_bucket, file_colon_names_are_files))
