/* cache_iter.c - iteration over winners, bad configs and misses: rows are
 * collected under the lock, callbacks run without it. docs/cache.md describes
 * the file format. */
#include "store/cache_internal.h"

/* ------------------------------------------------------------------------ */
/* Iteration: rows are collected under the lock, callbacks run without it.   */
/* ------------------------------------------------------------------------ */

typedef void (*row_fn)(sqlite3_stmt *s, void *dst);

/* Runs a filtered SELECT and collects every row through fn into a malloc'd
 * array of elem-sized records. */
static scree_status collect(scree__cache *c, const char *sql,
                            const char *arch, const char *op, size_t elem,
                            row_fn fn, void **rows, size_t *nrows) {
  *rows = NULL;
  *nrows = 0;
  size_t cap = 0;
  scree_status st = SCREE_OK;
  hold(c);
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(c->db, sql, -1, &s, NULL);
  if (rc == SQLITE_OK) {
    bind_filter(s, 1, arch);
    bind_filter(s, 2, op);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      if (grow(rows, &cap, *nrows, elem) != 0) {
        st = SCREE_ERROR_OUT_OF_MEMORY;
        break;
      }
      fn(s, (char *)*rows + *nrows * elem);
      (*nrows)++;
    }
  }
  if (st == SCREE_OK && rc != SQLITE_DONE) {
    set_err(c, "%s: %s", c->path, sqlite3_errmsg(c->db));
    st = status_of(rc);
  }
  sqlite3_finalize(s);
  release(c);
  if (st != SCREE_OK) {
    free(*rows);
    *rows = NULL;
    *nrows = 0;
  }
  return st;
}

static void miss_row(sqlite3_stmt *s, void *dst) {
  scree__cmiss *m = dst;
  memset(m, 0, sizeof *m);
  copy_col(m->key.op, sizeof m->key.op, s, 0);
  copy_col(m->key.bucket, sizeof m->key.bucket, s, 1);
  copy_col(m->key.dtype, sizeof m->key.dtype, s, 2);
  m->key.causal = sqlite3_column_int(s, 3);
  copy_col(m->key.arch, sizeof m->key.arch, s, 4);
  copy_col(m->example, sizeof m->example, s, 5);
  m->count = sqlite3_column_int64(s, 6);
  m->first_seen = sqlite3_column_int64(s, 7);
  m->last_seen = sqlite3_column_int64(s, 8);
}

static void bad_row(sqlite3_stmt *s, void *dst) {
  scree__cbad *b = dst;
  memset(b, 0, sizeof *b);
  copy_col(b->key.op, sizeof b->key.op, s, 0);
  copy_col(b->key.dtype, sizeof b->key.dtype, s, 1);
  b->key.causal = sqlite3_column_int(s, 2);
  copy_col(b->key.arch, sizeof b->key.arch, s, 3);
  copy_col(b->key.src_hash, sizeof b->key.src_hash, s, 4);
  copy_col(b->config, sizeof b->config, s, 5);
  b->nvrtc_version = sqlite3_column_int(s, 6);
  copy_col(b->key.bucket, sizeof b->key.bucket, s, 7);
  copy_col(b->reason, sizeof b->reason, s, 8);
  b->when = sqlite3_column_int64(s, 9);
}

static void entry_meta_row(sqlite3_stmt *s, void *dst) {
  scree__centry *e = dst;
  row_to_entry(s, e);
  e->cubin_size = (size_t)sqlite3_column_int64(s, 16);
}

scree_status scree__cache_foreach_miss(scree__cache *c, const char *arch,
                                       const char *op,
                                       int (*fn)(void *user,
                                                 const scree__cmiss *m),
                                       void *user) {
  if (!c || !fn) return SCREE_ERROR_INVALID_ARGUMENT;
  void *rows;
  size_t n;
  scree_status st = collect(c,
                            "SELECT " MCOLS " FROM misses" FILTER
                            " ORDER BY count DESC, op, arch, bucket, dtype,"
                            " causal",
                            arch, op, sizeof(scree__cmiss), miss_row, &rows,
                            &n);
  for (size_t i = 0; st == SCREE_OK && i < n; i++)
    if (fn(user, (scree__cmiss *)rows + i)) break;
  free(rows);
  return st;
}

scree_status scree__cache_foreach_bad(scree__cache *c, const char *arch,
                                      const char *op,
                                      int (*fn)(void *user,
                                                const scree__cbad *b),
                                      void *user) {
  if (!c || !fn) return SCREE_ERROR_INVALID_ARGUMENT;
  void *rows;
  size_t n;
  scree_status st = collect(c,
                            "SELECT " BCOLS " FROM bad_configs" FILTER
                            " ORDER BY op, arch, dtype, causal, config,"
                            " bucket, src_hash, nvrtc_version",
                            arch, op, sizeof(scree__cbad), bad_row, &rows, &n);
  for (size_t i = 0; st == SCREE_OK && i < n; i++)
    if (fn(user, (scree__cbad *)rows + i)) break;
  free(rows);
  return st;
}

scree_status scree__cache_foreach_entry(scree__cache *c, const char *arch,
                                        const char *op, int with_cubin,
                                        int (*fn)(void *user,
                                                  const scree__centry *e),
                                        void *user) {
  if (!c || !fn) return SCREE_ERROR_INVALID_ARGUMENT;
  void *rows;
  size_t n;
  scree_status st = collect(c,
                            "SELECT " WCOLS ", length(cubin) FROM winners"
                            FILTER WORDER,
                            arch, op, sizeof(scree__centry), entry_meta_row,
                            &rows, &n);
  for (size_t i = 0; st == SCREE_OK && i < n; i++) {
    scree__centry *e = (scree__centry *)rows + i;
    if (!with_cubin) {
      if (fn(user, e)) break;
      continue;
    }
    /* The row may have changed or gone since it was listed. */
    scree__centry full;
    hold(c);
    scree_status g = get_locked(c, &e->key, &full, 1);
    release(c);
    if (g == SCREE_ERROR_NOT_FOUND) continue;
    if (g != SCREE_OK) {
      st = g;
      break;
    }
    int stop = fn(user, &full);
    scree__centry_free(&full);
    if (stop) break;
  }
  free(rows);
  return st;
}

