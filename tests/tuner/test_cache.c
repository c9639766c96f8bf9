/* test_cache.c - SHA-256 and the SQLite tuning cache (src/tuner/cache.c). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "sha256.h"
#include "test_util.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* One base directory per test case, made in the parent (unchecked fixture)
 * and removed there after all tests ran, pass or fail. Each test makes its
 * own subdirectory with tdir(). */
static char g_base[64];
static char g_src[65]; /* sha256 of a pretend kernel source */

static void base_setup(void) {
  const char *src = "__global__ void rmsnorm() {}";
  scree__sha256_hex(src, strlen(src), g_src);
  snprintf(g_base, sizeof g_base, "/tmp/scree-test-cache-XXXXXX");
  if (!mkdtemp(g_base)) {
    perror("mkdtemp");
    abort();
  }
}

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *f) {
  remove(p);
  return 0;
}

static void base_teardown(void) {
  nftw(g_base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Paths live in a static pool (a test needs a few dozen): nothing to free,
 * nothing for LeakSanitizer to report. */
static char g_paths[64][512];
static int g_npaths;

static char *new_path(void) {
  ck_assert_int_lt(g_npaths, 64);
  return g_paths[g_npaths++];
}

static char *tdir(void) {
  char *b = new_path();
  snprintf(b, sizeof g_paths[0], "%s/t-XXXXXX", g_base);
  ck_assert_ptr_nonnull(mkdtemp(b));
  return b;
}

static char *pjoin(const char *dir, const char *name) {
  char *p = new_path();
  ck_assert_uint_lt(strlen(dir) + strlen(name) + 2, sizeof g_paths[0]);
  snprintf(p, sizeof g_paths[0], "%s/%s", dir, name);
  return p;
}

static int exists(const char *p) {
  struct stat sb;
  return lstat(p, &sb) == 0;
}

static scree__ckey key(const char *op, const char *bucket, const char *dtype,
                       int causal, const char *arch) {
  scree__ckey k;
  memset(&k, 0, sizeof k);
  snprintf(k.op, sizeof k.op, "%s", op);
  snprintf(k.bucket, sizeof k.bucket, "%s", bucket);
  snprintf(k.dtype, sizeof k.dtype, "%s", dtype);
  k.causal = causal;
  snprintf(k.arch, sizeof k.arch, "%s", arch);
  memcpy(k.src_hash, g_src, sizeof g_src);
  return k;
}

static scree__ckey keyi(int i) {
  char b[64];
  snprintf(b, sizeof b, "rows=%d,cols=4096", 1024 * (i + 1));
  return key("rmsnorm", b, "x=fp16,w=fp16,y=fp16", 0, "sm_90");
}

static void fill_bytes(uint8_t *p, size_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = (uint8_t)(s >> 24);
  }
  if (n > 3) p[3] = 0; /* a NUL inside: blobs are not strings */
}

/* An entry with a malloc'd cubin of n bytes derived from seed. */
static scree__centry entry(const scree__ckey *k, const char *config,
                           double median, uint32_t seed, size_t n) {
  scree__centry e;
  memset(&e, 0, sizeof e);
  e.key = *k;
  snprintf(e.config, sizeof e.config, "%s", config);
  e.median_us = median;
  e.spread_us = median / 100;
  snprintf(e.device_name, sizeof e.device_name, "NVIDIA H100 80GB HBM3");
  e.sm_count = 132;
  e.driver_version = 13000;
  e.nvrtc_version = 12080;
  snprintf(e.scree_version, sizeof e.scree_version, "9.9.9");
  e.created = 1700000000;
  e.cubin = malloc(n);
  ck_assert_ptr_nonnull(e.cubin);
  fill_bytes(e.cubin, n, seed);
  e.cubin_size = n;
  snprintf(e.cubin_hash, sizeof e.cubin_hash, "not the hash");
  return e;
}

static scree__cache *open_rw(const char *path) {
  scree__cache *c = NULL;
  char why[1024] = "x";
  int rec = -1;
  scree_status st = scree__cache_open(path, 0, &c, &rec, why, sizeof why);
  ck_assert_msg(st == SCREE_OK, "open %s: %s: %s", path,
                scree_status_name(st), why);
  ck_assert_int_eq(rec, 0);
  ck_assert_str_eq(why, "");
  ck_assert_ptr_nonnull(c);
  return c;
}

static scree__cache *open_ro(const char *path) {
  scree__cache *c = NULL;
  char why[1024] = "";
  scree_status st = scree__cache_open(path, 1, &c, NULL, why, sizeof why);
  ck_assert_msg(st == SCREE_OK, "open ro %s: %s: %s", path,
                scree_status_name(st), why);
  return c;
}

static void put_ok(scree__cache *c, const scree__ckey *k, const char *config,
                   double median, uint32_t seed, int want_replaced) {
  scree__centry e = entry(k, config, median, seed, 512 + seed % 700);
  int rep = -1;
  scree_status st = scree__cache_put(c, &e, &rep);
  char err[512];
  scree__cache_last_error(c, err, sizeof err);
  ck_assert_msg(st == SCREE_OK, "put: %s: %s", scree_status_name(st), err);
  if (want_replaced >= 0) ck_assert_int_eq(rep, want_replaced);
  scree__centry_free(&e);
}

/* Direct SQLite access, as a user with the sqlite3 shell would. */
static void db_exec(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, err ? err : "?");
  sqlite3_free(err);
  sqlite3_close(db);
}

static long long db_int(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                   SQLITE_OK);
  ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK,
                "%s: %s", sql, sqlite3_errmsg(db));
  ck_assert_int_eq(sqlite3_step(s), SQLITE_ROW);
  long long v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

static void db_text(const char *path, const char *sql, char *buf,
                    size_t size) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                   SQLITE_OK);
  ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK,
                "%s: %s", sql, sqlite3_errmsg(db));
  ck_assert_int_eq(sqlite3_step(s), SQLITE_ROW);
  const char *t = (const char *)sqlite3_column_text(s, 0);
  snprintf(buf, size, "%s", t ? t : "");
  sqlite3_finalize(s);
  sqlite3_close(db);
}

/* Flips byte `at` of the first winner's cubin in place (same length). */
static void flip_cubin_byte(const char *path, const scree__ckey *k, int at) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
  ck_assert_int_eq(
      sqlite3_prepare_v2(db,
                         "SELECT rowid FROM winners WHERE op = ?1 AND "
                         "bucket = ?2 AND arch = ?3",
                         -1, &s, NULL),
      SQLITE_OK);
  sqlite3_bind_text(s, 1, k->op, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, k->bucket, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, k->arch, -1, SQLITE_TRANSIENT);
  ck_assert_int_eq(sqlite3_step(s), SQLITE_ROW);
  sqlite3_int64 rowid = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_blob *b = NULL;
  ck_assert_int_eq(
      sqlite3_blob_open(db, "main", "winners", "cubin", rowid, 1, &b),
      SQLITE_OK);
  uint8_t v;
  ck_assert_int_eq(sqlite3_blob_read(b, &v, 1, at), SQLITE_OK);
  v ^= 0x5a;
  ck_assert_int_eq(sqlite3_blob_write(b, &v, 1, at), SQLITE_OK);
  sqlite3_blob_close(b);
  sqlite3_close(db);
}

static void *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = malloc((size_t)len + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static void write_all(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(p, 1, n, f), n);
  fclose(f);
}

/* The paths matching <path>.corrupt-*; returns how many. */
static int asides(const char *path, char *first, size_t first_size) {
  char pat[1024];
  snprintf(pat, sizeof pat, "%s.corrupt-*", path);
  glob_t g;
  int n = 0;
  if (glob(pat, 0, NULL, &g) == 0) {
    n = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
      const char *p = g.gl_pathv[i];
      size_t l = strlen(p);
      if ((l > 4 && (!strcmp(p + l - 4, "-wal") ||
                     !strcmp(p + l - 4, "-shm"))) ||
          (l > 8 && !strcmp(p + l - 8, "-journal")))
        continue;
      if (!n && first) snprintf(first, first_size, "%s", p);
      n++;
    }
    globfree(&g);
  }
  return n;
}

static int count_entries_cb(void *user, const scree__centry *e) {
  (*(int *)user)++;
  return 0;
}

static int count_entries(scree__cache *c, const char *arch, const char *op) {
  int n = 0;
  ck_assert_int_eq(scree__cache_foreach_entry(c, arch, op, 0,
                                              count_entries_cb, &n),
                   SCREE_OK);
  return n;
}

static int count_miss_cb(void *user, const scree__cmiss *m) {
  (*(int *)user)++;
  return 0;
}

static int count_bad_cb(void *user, const scree__cbad *b) {
  (*(int *)user)++;
  return 0;
}

static const char *const OPS[] = {"rmsnorm", "softmax"};
static const char *const ARCHS[] = {"sm_80", "sm_90"};

/* 2 ops x 2 archs x 3 buckets, plus a miss and a bad config per op/arch. */
static void populate12(scree__cache *c) {
  int seed = 1;
  for (int o = 0; o < 2; o++)
    for (int a = 0; a < 2; a++) {
      for (int b = 0; b < 3; b++) {
        char bucket[32];
        snprintf(bucket, sizeof bucket, "rows=%d", 1 << (10 + b));
        scree__ckey k = key(OPS[o], bucket, "x=fp16", 0, ARCHS[a]);
        put_ok(c, &k, "tpr=128", 10 + seed, (uint32_t)seed, 1);
        seed++;
      }
      scree__ckey k = key(OPS[o], "rows=77", "x=fp16", 0, ARCHS[a]);
      ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=77"), SCREE_OK);
      ck_assert_int_eq(scree__cache_record_bad(c, &k, "tpr=1024", 12080,
                                               "compile: too big"),
                       SCREE_OK);
    }
}

/* ------------------------------------------------------------------------ */
/* SHA-256                                                                   */
/* ------------------------------------------------------------------------ */

static void check_sha(const void *p, size_t n, const char *want) {
  char hex[66];
  memset(hex, 'Z', sizeof hex);
  scree__sha256_hex(p, n, hex);
  ck_assert_int_eq(hex[64], 0);
  ck_assert_str_eq(hex, want);
  uint8_t d[32];
  scree__sha256(p, n, d);
  char again[65];
  for (int i = 0; i < 32; i++) snprintf(again + 2 * i, 3, "%02x", d[i]);
  ck_assert_str_eq(again, want);
}

START_TEST(sha256_vectors) {
  check_sha("", 0,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha(NULL, 0,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha("abc", 3,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_sha(m448, strlen(m448),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *m896 =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmno"
      "pjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  check_sha(m896, strlen(m896),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  char *million = malloc(1000000);
  ck_assert_ptr_nonnull(million);
  memset(million, 'a', 1000000);
  check_sha(million, 1000000,
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* Padding edges: the length field fits, just fits, or spills. */
  static const struct {
    size_t n;
    const char *hex;
  } edges[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
    check_sha(million, edges[i].n, edges[i].hex);
  /* All byte values (high bits set). */
  uint8_t all[768];
  for (int i = 0; i < 768; i++) all[i] = (uint8_t)i;
  check_sha(all, sizeof all,
            "f3a25aa93aa2fbba28d79260535bbd6a5eb0fc1c24a8b0f04e12b484c1dfe363");
  free(million);
}
END_TEST

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
/* Winners                                                                   */
/* ------------------------------------------------------------------------ */

START_TEST(put_get_roundtrip) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = key("rmsnorm", "rows=16384,cols=4096",
                      "x=fp16,w=fp16,y=fp16", 0, "sm_90");
  scree__centry e = entry(&k, "tpr=128,rows=1,vec=8,cache=4", 12.5, 7, 10000);
  e.spread_us = 0.25;
  int rep = -1;
  ck_assert_int_eq(scree__cache_put(c, &e, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 1);

  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.key.op, "rmsnorm");
  ck_assert_str_eq(g.key.bucket, "rows=16384,cols=4096");
  ck_assert_str_eq(g.key.dtype, "x=fp16,w=fp16,y=fp16");
  ck_assert_int_eq(g.key.causal, 0);
  ck_assert_str_eq(g.key.arch, "sm_90");
  ck_assert_str_eq(g.key.src_hash, k.src_hash);
  ck_assert_str_eq(g.config, "tpr=128,rows=1,vec=8,cache=4");
  ck_assert_double_eq(g.median_us, 12.5);
  ck_assert_double_eq(g.spread_us, 0.25);
  ck_assert_str_eq(g.device_name, "NVIDIA H100 80GB HBM3");
  ck_assert_int_eq(g.sm_count, 132);
  ck_assert_int_eq(g.driver_version, 13000);
  ck_assert_int_eq(g.nvrtc_version, 12080);
  ck_assert_str_eq(g.scree_version, "9.9.9");
  ck_assert_int_eq(g.created, 1700000000);
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_uint_eq(g.cubin_size, 10000);
  ck_assert_ptr_nonnull(g.cubin);
  ck_assert_int_eq(memcmp(g.cubin, e.cubin, 10000), 0);
  char h[65];
  scree__sha256_hex(e.cubin, 10000, h);
  ck_assert_str_eq(g.cubin_hash, h); /* computed by put, not the caller's */
  scree__centry_free(&g);
  ck_assert_ptr_null(g.cubin);
  ck_assert_uint_eq(g.cubin_size, 0);
  scree__centry_free(&g); /* twice is harmless */

  /* Every key field matters. */
  scree__ckey m = k;
  m.causal = 1;
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  ck_assert_ptr_null(g.cubin);
  m = k;
  m.src_hash[0] = m.src_hash[0] == 'a' ? 'b' : 'a';
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  m = k;
  snprintf(m.arch, sizeof m.arch, "sm_80");
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  m = k;
  snprintf(m.bucket, sizeof m.bucket, "rows=16384,cols=4095");
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  m = k;
  snprintf(m.dtype, sizeof m.dtype, "x=bf16,w=fp16,y=fp16");
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  m = k;
  snprintf(m.op, sizeof m.op, "softmax");
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);

  /* Defaults: "" scree_version and created 0. */
  scree__ckey k2 = keyi(3);
  scree__centry e2 = entry(&k2, "tpr=64", 3, 9, 100);
  e2.scree_version[0] = 0;
  e2.created = 0;
  int64_t t0 = (int64_t)time(NULL);
  ck_assert_int_eq(scree__cache_put(c, &e2, NULL), SCREE_OK);
  scree__cache_close(c);

  /* Persisted across handles. */
  c = open_rw(path);
  ck_assert_int_eq(scree__cache_get(c, &k2, &g), SCREE_OK);
  ck_assert_str_eq(g.scree_version, SCREE_VERSION_STRING);
  ck_assert_int_ge(g.created, t0);
  ck_assert_int_le(g.created, (int64_t)time(NULL));
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_int_eq(memcmp(g.cubin, e2.cubin, 100), 0);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(memcmp(g.cubin, e.cubin, 10000), 0);
  scree__centry_free(&g);
  scree__cache_close(c);
  scree__centry_free(&e);
  scree__centry_free(&e2);
}
END_TEST

START_TEST(put_keeps_the_faster) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = keyi(0);
  scree__centry a = entry(&k, "cfg=A", 10.0, 1, 300);
  scree__centry b = entry(&k, "cfg=B", 12.0, 2, 400);
  scree__centry cc = entry(&k, "cfg=C", 10.0, 3, 500);
  scree__centry d = entry(&k, "cfg=D", 8.0, 4, 600);
  int rep = -1;
  scree__centry g;

  ck_assert_int_eq(scree__cache_put(c, &a, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 1);
  /* Slower: the existing row stays. */
  ck_assert_int_eq(scree__cache_put(c, &b, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 0);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "cfg=A");
  ck_assert_double_eq(g.median_us, 10.0);
  ck_assert_uint_eq(g.cubin_size, 300);
  ck_assert_int_eq(memcmp(g.cubin, a.cubin, 300), 0);
  scree__centry_free(&g);
  /* Equal: the existing row stays. */
  ck_assert_int_eq(scree__cache_put(c, &cc, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 0);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "cfg=A");
  scree__centry_free(&g);
  /* Faster: replaced, cubin and all. */
  ck_assert_int_eq(scree__cache_put(c, &d, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 1);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "cfg=D");
  ck_assert_double_eq(g.median_us, 8.0);
  ck_assert_uint_eq(g.cubin_size, 600);
  ck_assert_int_eq(memcmp(g.cubin, d.cubin, 600), 0);
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  /* The slower one again, from the other direction. */
  ck_assert_int_eq(scree__cache_put(c, &a, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 0);
  ck_assert_int_eq(scree__cache_put(c, &b, NULL), SCREE_OK);
  scree__cache_close(c);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), 1);
  ck_assert_int_eq(db_int(path, "SELECT median_us FROM winners"), 8);
  scree__centry_free(&a);
  scree__centry_free(&b);
  scree__centry_free(&cc);
  scree__centry_free(&d);
}
END_TEST

START_TEST(cubin_hash_mismatch_detected) {
  char *dir = tdir();
  char *up = pjoin(dir, "user.db"), *sp = pjoin(dir, "shipped.db");
  scree__ckey k = keyi(1);
  scree__cache *c = open_rw(up);
  put_ok(c, &k, "from=user", 5, 11, 1);
  scree__cache_close(c);
  c = open_rw(sp);
  put_ok(c, &k, "from=shipped", 6, 12, 1);
  scree__cache_close(c);

  flip_cubin_byte(up, &k, 100);

  c = open_rw(up);
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 0);
  ck_assert_ptr_null(g.cubin);
  ck_assert_str_eq(g.config, "from=user");
  scree__centry_free(&g);
  /* foreach with cubins reports it the same way. */
  scree__cache_close(c);

  scree__cache_stack s;
  char warn[1024];
  ck_assert_int_eq(scree__cache_stack_open(&s, up, sp, warn, sizeof warn),
                   SCREE_OK);
  ck_assert_str_eq(warn, "");
  scree__cache_level lv = SCREE__LEVEL_NONE;
  ck_assert_int_eq(scree__cache_stack_get(&s, &k, &g, &lv), SCREE_OK);
  ck_assert_int_eq(lv, SCREE__LEVEL_SHIPPED);
  ck_assert_str_eq(g.config, "from=shipped");
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_ptr_nonnull(g.cubin);
  scree__centry_free(&g);
  scree__cache_stack_close(&s);

  /* With no other level the lookup misses rather than hand out bad bytes. */
  ck_assert_int_eq(scree__cache_stack_open(&s, up, "", warn, sizeof warn),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k, &g, &lv),
                   SCREE_ERROR_NOT_FOUND);
  ck_assert_int_eq(lv, SCREE__LEVEL_NONE);
  ck_assert_ptr_null(g.cubin);
  scree__cache_stack_close(&s);

  /* A good put of the same key replaces the damaged row when faster. */
  c = open_rw(up);
  put_ok(c, &k, "from=user2", 4, 13, 1);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  scree__cache_close(c);
}
END_TEST

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
  unsetenv("HOME"); /* the passwd entry's home, or NOT_FOUND */
  scree_status st = scree__cache_default_path(buf, sizeof buf);
  if (st == SCREE_OK) {
    size_t n = strlen(buf), t = strlen("/.cache/scree/tune.db");
    ck_assert_uint_gt(n, t);
    ck_assert_str_eq(buf + n - t, "/.cache/scree/tune.db");
  } else {
    ck_assert_int_eq(st, SCREE_ERROR_NOT_FOUND);
  }

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
  scree__ckey k = key("rmsnorm", "rows=1024", "x=fp16", 0, "sm_90");
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
  scree__ckey mk = key("rmsnorm", "rows=77", "x=fp16", 0, "sm_90");
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "x"), SCREE_ERROR_CACHE);
  ck_assert_int_eq(scree__cache_delete_miss(c, &mk), SCREE_ERROR_CACHE);
  ck_assert_int_eq(scree__cache_record_bad(c, &k, "cfg", 1, "r"),
                   SCREE_ERROR_CACHE);
  int del = -1;
  ck_assert_int_eq(scree__cache_clear(c, NULL, NULL, &del), SCREE_ERROR_CACHE);
  ck_assert_int_eq(del, 0);
  char why[512];
  ck_assert_int_eq(scree__cache_merge(c, path, NULL, NULL, NULL, NULL, NULL,
                                      why, sizeof why),
                   SCREE_ERROR_CACHE);
  /* Reading still works. */
  ck_assert_int_eq(scree__cache_is_bad(c, &mk, "tpr=1024", 12080, NULL, 0), 1);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 12);
  int nm = 0;
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, count_miss_cb, &nm),
                   SCREE_OK);
  ck_assert_int_eq(nm, 4);
  char *exp = pjoin(dir, "exported.db");
  int nexp = 0;
  ck_assert_int_eq(
      scree__cache_export(c, exp, NULL, NULL, &nexp, why, sizeof why),
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

  /* A read-only open of a missing file fails and creates nothing, not even
   * its directory. */
  char *none = pjoin(dir, "nodir/none.db");
  ck_assert_int_eq(scree__cache_open(none, 1, &c, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert(!exists(none));
  ck_assert(!exists(pjoin(dir, "nodir")));
  /* Nor an empty file. */
  char *empty = pjoin(dir, "empty.db");
  write_all(empty, "", 0);
  ck_assert_int_eq(scree__cache_open(empty, 1, &c, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  struct stat es;
  ck_assert_int_eq(stat(empty, &es), 0);
  ck_assert_int_eq(es.st_size, 0);
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

/* ------------------------------------------------------------------------ */
/* Bad configs and misses                                                    */
/* ------------------------------------------------------------------------ */

typedef struct bad_list {
  scree__cbad b[8];
  int n;
} bad_list;

static int bad_collect(void *user, const scree__cbad *b) {
  bad_list *l = user;
  ck_assert_int_lt(l->n, 8);
  l->b[l->n++] = *b;
  return 0;
}

START_TEST(bad_configs) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k16 = key("rmsnorm", "rows=16", "x=fp16", 0, "sm_90");
  scree__ckey k32 = key("rmsnorm", "rows=32", "x=fp16", 0, "sm_90");
  scree__ckey star = key("rmsnorm", "*", "x=fp16", 0, "sm_90");
  char reason[256];

  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 12080, reason,
                                       sizeof reason),
                   0);
  ck_assert_int_eq(scree__cache_record_bad(c, &k16, "cfgX", 12080,
                                           "wrong answer: max err 3.2"),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "wrong answer: max err 3.2");
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 12080, NULL, 0), 1);
  /* Bad for one bucket only. */
  ck_assert_int_eq(scree__cache_is_bad(c, &k32, "cfgX", 12080, reason,
                                       sizeof reason),
                   0);
  ck_assert_str_eq(reason, "");
  /* "*" means every bucket. */
  ck_assert_int_eq(scree__cache_record_bad(c, &star, "cfgY", 12080,
                                           "compile: too many registers"),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgY", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "compile: too many registers");
  ck_assert_int_eq(scree__cache_is_bad(c, &k32, "cfgY", 12080, NULL, 0), 1);
  ck_assert_int_eq(scree__cache_is_bad(c, &star, "cfgY", 12080, NULL, 0), 1);
  /* Another compiler, kernel source, dtype, causal flag or arch: not bad. */
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgY", 13000, NULL, 0), 0);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 13000, NULL, 0), 0);
  scree__ckey m = k16;
  m.src_hash[0] = m.src_hash[0] == 'a' ? 'b' : 'a';
  ck_assert_int_eq(scree__cache_is_bad(c, &m, "cfgY", 12080, NULL, 0), 0);
  m = k16;
  snprintf(m.dtype, sizeof m.dtype, "x=bf16");
  ck_assert_int_eq(scree__cache_is_bad(c, &m, "cfgY", 12080, NULL, 0), 0);
  m = k16;
  m.causal = 1;
  ck_assert_int_eq(scree__cache_is_bad(c, &m, "cfgY", 12080, NULL, 0), 0);
  m = k16;
  snprintf(m.arch, sizeof m.arch, "sm_80");
  ck_assert_int_eq(scree__cache_is_bad(c, &m, "cfgY", 12080, NULL, 0), 0);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgZ", 12080, NULL, 0), 0);

  /* A bucket's own row is preferred over the "*" row. */
  ck_assert_int_eq(
      scree__cache_record_bad(c, &k16, "cfgY", 12080, "timeout: 5 s"),
      SCREE_OK);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgY", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "timeout: 5 s");
  ck_assert_int_eq(scree__cache_is_bad(c, &k32, "cfgY", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "compile: too many registers");
  /* Recording again updates, it does not duplicate. */
  ck_assert_int_eq(scree__cache_record_bad(c, &k16, "cfgX", 12080,
                                           "wrong answer: max err 4.0"),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "wrong answer: max err 4.0");
  /* Reason truncated safely. */
  char small[8];
  ck_assert_int_eq(
      scree__cache_is_bad(c, &k16, "cfgX", 12080, small, sizeof small), 1);
  ck_assert_str_eq(small, "wrong a");

  bad_list l;
  memset(&l, 0, sizeof l);
  int64_t now = (int64_t)time(NULL);
  ck_assert_int_eq(scree__cache_foreach_bad(c, NULL, NULL, bad_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 3);
  /* ordered by op, arch, dtype, causal, config, bucket */
  ck_assert_str_eq(l.b[0].config, "cfgX");
  ck_assert_str_eq(l.b[0].key.bucket, "rows=16");
  ck_assert_str_eq(l.b[0].reason, "wrong answer: max err 4.0");
  ck_assert_str_eq(l.b[1].config, "cfgY");
  ck_assert_str_eq(l.b[1].key.bucket, "*");
  ck_assert_str_eq(l.b[2].config, "cfgY");
  ck_assert_str_eq(l.b[2].key.bucket, "rows=16");
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(l.b[i].nvrtc_version, 12080);
    ck_assert_str_eq(l.b[i].key.op, "rmsnorm");
    ck_assert_str_eq(l.b[i].key.arch, "sm_90");
    ck_assert_str_eq(l.b[i].key.dtype, "x=fp16");
    ck_assert_str_eq(l.b[i].key.src_hash, k16.src_hash);
    ck_assert_int_ge(l.b[i].when, now - 5);
    ck_assert_int_le(l.b[i].when, now + 5);
  }
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(scree__cache_foreach_bad(c, "sm_80", NULL, bad_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 0);
  scree__cache_close(c);
}
END_TEST

typedef struct miss_list {
  scree__cmiss m[8];
  int n, stop_at;
} miss_list;

static int miss_collect(void *user, const scree__cmiss *m) {
  miss_list *l = user;
  ck_assert_int_lt(l->n, 8);
  l->m[l->n++] = *m;
  return l->n == l->stop_at;
}

START_TEST(misses) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = key("rmsnorm", "rows=16384", "x=fp16", 0, "sm_90");
  scree__ckey k_other_src = k;
  snprintf(k_other_src.src_hash, sizeof k_other_src.src_hash, "ffff");
  scree__ckey k2 = key("rmsnorm", "rows=8192", "x=fp16", 0, "sm_90");
  scree__ckey k3 = key("rmsnorm", "rows=4096", "x=fp16", 1, "sm_90");
  int64_t t0 = (int64_t)time(NULL);
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=16000,cols=4096"),
                   SCREE_OK);
  ck_assert_int_eq(
      scree__cache_record_miss(c, &k_other_src, "rows=16001,cols=4096"),
      SCREE_OK); /* src_hash is ignored: same row */
  ck_assert_int_eq(scree__cache_record_miss(c, &k2, "rows=8000,cols=4096"),
                   SCREE_OK);
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(scree__cache_record_miss(c, &k3, NULL), SCREE_OK);

  miss_list l;
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, miss_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 3);
  ck_assert_str_eq(l.m[0].key.bucket, "rows=4096");
  ck_assert_int_eq(l.m[0].count, 3);
  ck_assert_int_eq(l.m[0].key.causal, 1);
  ck_assert_str_eq(l.m[0].example, "");
  /* count 2 before count 1 */
  ck_assert_str_eq(l.m[1].key.bucket, "rows=16384");
  ck_assert_int_eq(l.m[1].count, 2);
  ck_assert_str_eq(l.m[1].example, "rows=16000,cols=4096"); /* first kept */
  ck_assert_str_eq(l.m[1].key.src_hash, "");
  ck_assert_str_eq(l.m[1].key.op, "rmsnorm");
  ck_assert_str_eq(l.m[1].key.dtype, "x=fp16");
  ck_assert_str_eq(l.m[1].key.arch, "sm_90");
  ck_assert_int_ge(l.m[1].first_seen, t0);
  ck_assert_int_ge(l.m[1].last_seen, l.m[1].first_seen);
  ck_assert_int_le(l.m[1].last_seen, (int64_t)time(NULL));
  ck_assert_str_eq(l.m[2].key.bucket, "rows=8192");
  ck_assert_int_eq(l.m[2].count, 1);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM misses"), 3);

  memset(&l, 0, sizeof l);
  l.stop_at = 1;
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, miss_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 1);
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(
      scree__cache_foreach_miss(c, NULL, "softmax", miss_collect, &l),
      SCREE_OK);
  ck_assert_int_eq(l.n, 0);
  ck_assert_int_eq(
      scree__cache_foreach_miss(c, "sm_80", "rmsnorm", miss_collect, &l),
      SCREE_OK);
  ck_assert_int_eq(l.n, 0);
  ck_assert_int_eq(
      scree__cache_foreach_miss(c, "sm_90", "rmsnorm", miss_collect, &l),
      SCREE_OK);
  ck_assert_int_eq(l.n, 3);

  ck_assert_int_eq(scree__cache_delete_miss(c, &k_other_src), SCREE_OK);
  ck_assert_int_eq(scree__cache_delete_miss(c, &k), SCREE_ERROR_NOT_FOUND);
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, miss_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 2);
  /* A miss recorded again after deletion starts over. Equal counts come
   * in key order: "rows=16384" < "rows=8192". */
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=1"), SCREE_OK);
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, miss_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 3);
  ck_assert_str_eq(l.m[1].key.bucket, "rows=16384");
  ck_assert_int_eq(l.m[1].count, 1);
  ck_assert_str_eq(l.m[1].example, "rows=1");
  ck_assert_str_eq(l.m[2].key.bucket, "rows=8192");
  scree__cache_close(c);
}
END_TEST

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

START_TEST(recover_garbage_file) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  uint8_t garbage[8192];
  fill_bytes(garbage, sizeof garbage, 1234);
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
  write_all(path, garbage, 100); /* shorter than one SQLite header */
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

START_TEST(recover_directory_in_place) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  ck_assert_int_eq(mkdir(path, 0755), 0);
  scree__cache *c = NULL;
  char why[2048] = "";
  int rec = -1;
  ck_assert_int_eq(scree__cache_open(path, 1, &c, &rec, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_int_eq(scree__cache_open(path, 0, &c, &rec, why, sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(rec, 1);
  ck_assert_msg(strstr(why, "is a directory"), "why: %s", why);
  char aside[1024];
  ck_assert_int_eq(asides(path, aside, sizeof aside), 1);
  struct stat sb;
  ck_assert_int_eq(stat(aside, &sb), 0);
  ck_assert(S_ISDIR(sb.st_mode));
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert(S_ISREG(sb.st_mode));
  check_fresh_cache_works(c, path);
  scree__cache_close(c);
}
END_TEST

/* A stale -wal beside a damaged file must not be replayed into the fresh
 * cache: it is moved aside with it (or already discarded by SQLite). */
START_TEST(recover_moves_journals_aside) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db"), *wal = pjoin(dir, "tune.db-wal");
  uint8_t garbage[4096];
  fill_bytes(garbage, sizeof garbage, 77);
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

/* ------------------------------------------------------------------------ */
/* Concurrency                                                               */
/* ------------------------------------------------------------------------ */

#define NCHILD 6
#define NPUT 200
#define NKEY 40

typedef struct write_rec {
  int child, i, key;
  double median;
} write_rec;

static uint64_t xs(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Runs in a forked grandchild: no Check macros here, only exit codes. */
static int child_main(const char *path, int child, uint64_t seed, int wfd) {
  scree__cache *c = NULL;
  char why[1024];
  if (scree__cache_open(path, 0, &c, NULL, why, sizeof why) != SCREE_OK) {
    fprintf(stderr, "child %d: open: %s\n", child, why);
    return 2;
  }
  for (int i = 0; i < NPUT; i++) {
    write_rec r = {child, i, (int)(xs(&seed) % NKEY),
                   1.0 + (double)(xs(&seed) % 1000000) / 1000.0 +
                       child * 1e-9};
    scree__ckey k = keyi(r.key);
    scree__centry e;
    memset(&e, 0, sizeof e);
    e.key = k;
    snprintf(e.config, sizeof e.config, "child=%d,i=%d", child, i);
    e.median_us = r.median;
    snprintf(e.device_name, sizeof e.device_name, "dev");
    uint8_t cubin[300];
    fill_bytes(cubin, sizeof cubin, (uint32_t)(child * 1000 + i));
    e.cubin = cubin;
    e.cubin_size = sizeof cubin;
    int rep;
    scree_status st = scree__cache_put(c, &e, &rep);
    if (st != SCREE_OK) {
      scree__cache_last_error(c, why, sizeof why);
      fprintf(stderr, "child %d: put %d: %s: %s\n", child, i,
              scree_status_name(st), why);
      return 3;
    }
    if (write(wfd, &r, sizeof r) != (ssize_t)sizeof r) return 4;
    if (scree__cache_record_miss(c, &k, "rows=1") != SCREE_OK) {
      scree__cache_last_error(c, why, sizeof why);
      fprintf(stderr, "child %d: miss %d: %s\n", child, i, why);
      return 5;
    }
  }
  scree__cache_close(c);
  return 0;
}

static int sum_miss_cb(void *user, const scree__cmiss *m) {
  *(int64_t *)user += m->count;
  return 0;
}

START_TEST(concurrent_processes) {
  char *dir = tdir();
  /* Nobody has created it yet: the children also race on creation. */
  char *path = pjoin(dir, "shared/tune.db");
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pids[NCHILD];
  for (int ch = 0; ch < NCHILD; ch++) {
    uint64_t seed = scree_test_rand() | 1;
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
      close(fds[0]);
      _exit(child_main(path, ch, seed, fds[1]));
    }
    pids[ch] = p;
  }
  close(fds[1]);

  static write_rec recs[NCHILD * NPUT];
  size_t nrec = 0;
  for (;;) {
    ssize_t r = read(fds[0], (char *)recs + nrec * sizeof(write_rec),
                     sizeof recs - nrec * sizeof(write_rec));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ck_assert_int_eq(r % (ssize_t)sizeof(write_rec), 0);
    nrec += (size_t)r / sizeof(write_rec);
  }
  close(fds[0]);
  for (int ch = 0; ch < NCHILD; ch++) {
    int status = 0;
    ck_assert_int_eq(waitpid(pids[ch], &status, 0), pids[ch]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child %d failed: status %d", ch, status);
  }
  ck_assert_uint_eq(nrec, NCHILD * NPUT);

  double best[NKEY];
  int seen[NKEY] = {0}, nkeys = 0;
  for (int i = 0; i < NKEY; i++) best[i] = INFINITY;
  for (size_t i = 0; i < nrec; i++) {
    write_rec *r = &recs[i];
    if (!seen[r->key]) nkeys++;
    seen[r->key] = 1;
    if (r->median < best[r->key]) best[r->key] = r->median;
  }

  char buf[256];
  db_text(path, "PRAGMA integrity_check", buf, sizeof buf);
  ck_assert_str_eq(buf, "ok");
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), nkeys);

  scree__cache *c = open_rw(path);
  for (int key_i = 0; key_i < NKEY; key_i++) {
    scree__ckey k = keyi(key_i);
    scree__centry g;
    if (!seen[key_i]) {
      ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_NOT_FOUND);
      continue;
    }
    ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
    ck_assert_int_eq(g.cubin_ok, 1);
    ck_assert_msg(g.median_us == best[key_i],
                  "key %d holds %.9f, the fastest written was %.9f", key_i,
                  g.median_us, best[key_i]);
    /* The config and cubin are the ones written with that median. */
    int ch = -1, it = -1;
    ck_assert_int_eq(sscanf(g.config, "child=%d,i=%d", &ch, &it), 2);
    int found = 0;
    for (size_t i = 0; i < nrec; i++)
      if (recs[i].child == ch && recs[i].i == it) {
        ck_assert_int_eq(recs[i].key, key_i);
        ck_assert(recs[i].median == g.median_us);
        found = 1;
      }
    ck_assert(found);
    uint8_t want[300];
    fill_bytes(want, sizeof want, (uint32_t)(ch * 1000 + it));
    ck_assert_uint_eq(g.cubin_size, sizeof want);
    ck_assert_int_eq(memcmp(g.cubin, want, sizeof want), 0);
    scree__centry_free(&g);
  }
  int64_t total = 0;
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, sum_miss_cb,
                                             &total),
                   SCREE_OK);
  ck_assert_int_eq(total, NCHILD * NPUT);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM misses"), nkeys);
  char why[256];
  ck_assert_int_eq(scree__cache_check(c, 1, why, sizeof why), SCREE_OK);
  scree__cache_close(c);
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
  fill_bytes(garbage, sizeof garbage, 4321);
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

#define NTHREAD 4
#define TPUT 100

typedef struct thread_arg {
  scree__cache *c;
  int id;
  uint64_t seed;
  double best[NKEY];
  int fails;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  for (int i = 0; i < NKEY; i++) a->best[i] = INFINITY;
  for (int i = 0; i < TPUT; i++) {
    int ki = (int)(xs(&a->seed) % NKEY);
    double med = 1.0 + (double)(xs(&a->seed) % 100000) / 100.0 + a->id * 1e-9;
    scree__ckey k = keyi(ki);
    scree__centry e;
    memset(&e, 0, sizeof e);
    e.key = k;
    snprintf(e.config, sizeof e.config, "thread=%d,i=%d", a->id, i);
    e.median_us = med;
    uint8_t cubin[64];
    fill_bytes(cubin, sizeof cubin, (uint32_t)(a->id * 1000 + i));
    e.cubin = cubin;
    e.cubin_size = sizeof cubin;
    if (scree__cache_put(a->c, &e, NULL) != SCREE_OK) a->fails++;
    if (med < a->best[ki]) a->best[ki] = med;
    scree__centry g;
    if (scree__cache_get(a->c, &k, &g) != SCREE_OK || !g.cubin_ok ||
        g.median_us > med)
      a->fails++;
    scree__centry_free(&g);
    if (scree__cache_record_miss(a->c, &k, NULL) != SCREE_OK) a->fails++;
    if (scree__cache_is_bad(a->c, &k, "x", 1, NULL, 0) != 0) a->fails++;
  }
  return NULL;
}

START_TEST(threads_share_one_handle) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  pthread_t th[NTHREAD];
  static thread_arg args[NTHREAD];
  for (int i = 0; i < NTHREAD; i++) {
    args[i].c = c;
    args[i].id = i;
    args[i].seed = scree_test_rand() | 1;
    args[i].fails = 0;
    ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
  }
  for (int i = 0; i < NTHREAD; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NTHREAD; i++) ck_assert_int_eq(args[i].fails, 0);
  for (int ki = 0; ki < NKEY; ki++) {
    double best = INFINITY;
    for (int i = 0; i < NTHREAD; i++)
      if (args[i].best[ki] < best) best = args[i].best[ki];
    scree__ckey k = keyi(ki);
    scree__centry g;
    if (isinf(best)) {
      ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_NOT_FOUND);
      continue;
    }
    ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
    ck_assert(g.median_us == best);
    scree__centry_free(&g);
  }
  int64_t total = 0;
  scree__cache_foreach_miss(c, NULL, NULL, sum_miss_cb, &total);
  ck_assert_int_eq(total, NTHREAD * TPUT);
  scree__cache_close(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cache");
  TCase *tc = tcase_create("core");
  tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
  tcase_add_test(tc, sha256_vectors);
  tcase_add_test(tc, fresh_file_gets_schema);
  tcase_add_test(tc, new_directories_are_0700);
  tcase_add_test(tc, other_schema_version_refused);
  tcase_add_test(tc, invalid_arguments);
  tcase_add_test(tc, put_get_roundtrip);
  tcase_add_test(tc, put_keeps_the_faster);
  tcase_add_test(tc, cubin_hash_mismatch_detected);
  tcase_add_test(tc, foreach_entry_order_filter_stop);
  tcase_add_test(tc, stack_layering_order);
  tcase_add_test(tc, stack_without_user_cache);
  tcase_add_test(tc, default_path_resolution);
  tcase_add_test(tc, readonly_is_never_written);
  tcase_add_test(tc, exported_cache_opens_readonly_anywhere);
  tcase_add_test(tc, bad_configs);
  tcase_add_test(tc, misses);
  tcase_add_test(tc, clear_with_filters);
  tcase_add_test(tc, merge_semantics);
  tcase_add_test(tc, export_with_filters);
  tcase_add_test(tc, recover_garbage_file);
  tcase_add_test(tc, recover_truncated_cache);
  tcase_add_test(tc, recover_directory_in_place);
  tcase_add_test(tc, recover_moves_journals_aside);
  tcase_add_test(tc, concurrent_processes);
  tcase_add_test(tc, concurrent_recovery);
  tcase_add_test(tc, threads_share_one_handle);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
