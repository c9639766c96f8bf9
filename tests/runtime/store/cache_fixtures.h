/* cache_fixtures.h - what the cache tests share: a scratch directory per
 * run, keys and entries, raw SQLite access to the files. Included by the
 * tests/runtime/store/test_cache_*.c files only. */
#ifndef SCREE_CACHE_FIXTURES_H
#define SCREE_CACHE_FIXTURES_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#include "test_util.h"

#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
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

/* Key i (any i >= 0, each different): RMSNorm's bucket of 2^(10 + i % 16)
 * rows of 4096 + i / 16 columns on sm_90, a key this build writes, so
 * merge and export take it. */
static scree__ckey keyi(int i) {
  char b[64];
  snprintf(b, sizeof b, "rows<=%ld,cols=%d", 1024L << (i % 16), 4096 + i / 16);
  return key("rmsnorm", b, "x=fp16,w=fp16,y=fp16", 0, "sm_90");
}

/* Configs of RMSNorm (and softmax) that pass its check for fp16 on sm_80
 * and sm_90, for tests that merge or export. */
static const char *const CFG[] = {"tpr=128,rows=1,vec=8,cache=4", "tpr=256,rows=1,vec=8,cache=2",
                                  "tpr=64,rows=2,vec=8,cache=8", "tpr=512,rows=1,vec=8,cache=1",
                                  "tpr=32,rows=8,vec=2,cache=2", "tpr=16,rows=8,vec=8,cache=1"};

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

/* A scree cache whose tables have the right columns but no types and no
 * constraints, as anyone can write one: every row read from it must be
 * checked. Holds no rows. */
static void loose_cache(const char *path) {
  scree__cache *c = open_rw(path);
  scree__cache_close(c);
  db_exec(path,
          "DROP TABLE winners; DROP TABLE bad_configs; DROP TABLE misses;"
          "CREATE TABLE winners(op, bucket, dtype, causal, arch, src_hash, config,"
          " median_us, spread_us, device_name, sm_count, driver_version, nvrtc_version,"
          " scree_version, created, cubin_hash, cubin);"
          "CREATE TABLE bad_configs(op, dtype, causal, arch, src_hash, config,"
          " nvrtc_version, bucket, reason, created);"
          "CREATE TABLE misses(op, bucket, dtype, causal, arch, example, count,"
          " first_seen, last_seen);");
}

/* Inserts a winner row into a loose cache: each argument is an SQL
 * expression, NULL for the value a good row has (cubin X'01' with its
 * hash). */
static void loose_winner(const char *path, const char *op, const char *bucket,
                         const char *dtype, const char *causal,
                         const char *config, const char *median,
                         const char *device, const char *cubin) {
  char sql[4096];
  snprintf(sql, sizeof sql,
           "INSERT INTO winners VALUES(%s, %s, %s, %s, 'sm_90', '%s', %s, %s,"
           " 0.5, %s, 132, 13000, 13000, '0.1.0', 1700000000,"
           " '4bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c385a5d7cce23c7785459a', %s)",
           op ? op : "'rmsnorm'", bucket ? bucket : "'rows<=1024,cols=4096'",
           dtype ? dtype : "'x=fp16,w=fp16,y=fp16'", causal ? causal : "0", g_src,
           config ? config : "'tpr=128,rows=1,vec=8,cache=4'",
           median ? median : "10.0", device ? device : "'NVIDIA H100'",
           cubin ? cubin : "X'01'");
  db_exec(path, sql);
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
static const char *const OP_DTYPES[] = {"x=fp16,w=fp16,y=fp16", "x=fp16,y=fp16"};
static const char *const ARCHS[] = {"sm_80", "sm_90"};

/* 2 ops x 2 archs x 3 buckets (rows<=1024, 2048, 4096 of 4096 columns,
 * config CFG[0]), plus a miss and a bad config per op/arch. */
static void populate12(scree__cache *c) {
  int seed = 1;
  for (int o = 0; o < 2; o++)
    for (int a = 0; a < 2; a++) {
      for (int b = 0; b < 3; b++) {
        char bucket[32];
        snprintf(bucket, sizeof bucket, "rows<=%d,cols=4096", 1 << (10 + b));
        scree__ckey k = key(OPS[o], bucket, OP_DTYPES[o], 0, ARCHS[a]);
        put_ok(c, &k, CFG[0], 10 + seed, (uint32_t)seed, 1);
        seed++;
      }
      scree__ckey k = key(OPS[o], "rows<=128,cols=4096", OP_DTYPES[o], 0, ARCHS[a]);
      ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=77,cols=4096"), SCREE_OK);
      ck_assert_int_eq(scree__cache_record_bad(c, &k, "tpr=1024,rows=1,vec=8,cache=8", 12080,
                                               "compile: too big"),
                       SCREE_OK);
    }
}


#endif
