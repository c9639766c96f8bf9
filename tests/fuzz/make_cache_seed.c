/* make_cache_seed.c - writes the seed of the cache harness: a small valid
 * cache (cache_rows.h's fuzz_theirs winners, one more whose cubin fails its
 * hash check, two bad configs, a miss) in rollback-journal mode with
 * 512-byte pages, so that the whole file is a few KiB for libFuzzer to
 * mutate. Regenerate the committed seed with
 *   build/tests/make_cache_seed tests/fuzz/corpus/cache/seed.db
 * (the path must not exist). */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cache_rows.h"

/* Runs SQL on the file, outside the cache layer; exits on failure. */
static void exec_sql(const char *path, const char *sql) {
  sqlite3 *db;
  if (sqlite3_open(path, &db) != SQLITE_OK ||
      sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    fprintf(stderr, "make_cache_seed: %s: %s\n", path, sqlite3_errmsg(db));
    exit(1);
  }
  sqlite3_close(db);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_cache_seed OUT.db\n");
    return 2;
  }
  const char *path = argv[1];
  if (access(path, F_OK) == 0) {
    fprintf(stderr, "make_cache_seed: %s exists\n", path);
    return 1;
  }
  scree__cache *c;
  char why[1024];
  if (scree__cache_open(path, 0, &c, NULL, why, sizeof why) != SCREE_OK) {
    fprintf(stderr, "make_cache_seed: %s\n", why);
    return 1;
  }
  const size_t n = sizeof fuzz_theirs / sizeof fuzz_theirs[0];
  scree__centry e;
  for (size_t i = 0; i < n; i++) {
    fuzz_row_entry(&fuzz_theirs[i], &e);
    if (scree__cache_put(c, &e, NULL) != SCREE_OK) return 1;
  }
  fuzz_row entry = fuzz_theirs[n - 1];
  entry.bucket = "rows<=2048,cols=32000"; /* its cubin_hash is broken below */
  fuzz_row_entry(&entry, &e);
  if (scree__cache_put(c, &e, NULL) != SCREE_OK) return 1;
  fuzz_row_entry(&fuzz_theirs[0], &e);
  if (scree__cache_record_bad(c, &e.key, "tpr=1024,rows=1,vec=8,cache=16", 13000,
                              "compile: too many registers") != SCREE_OK ||
      scree__cache_record_miss(c, &e.key, "rows=16000,cols=4096") != SCREE_OK)
    return 1;
  snprintf(e.key.bucket, sizeof e.key.bucket, "*");
  if (scree__cache_record_bad(c, &e.key, "tpr=8,rows=1,vec=1,cache=1", 13000,
                              "wrong answer: off by one") != SCREE_OK)
    return 1;
  scree__cache_close(c);
  exec_sql(path,
           "UPDATE winners SET cubin_hash = replace(cubin_hash, substr(cubin_hash, 1, 1), 'x')"
           " WHERE bucket = 'rows<=2048,cols=32000';"
           "PRAGMA journal_mode = DELETE; PRAGMA page_size = 512; VACUUM;");
  return 0;
}
