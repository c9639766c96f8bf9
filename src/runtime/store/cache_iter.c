/* cache_iter.c - iteration over winners, bad configs and misses: rows are
 * collected under the lock, callbacks run without it. docs/cache.md describes
 * the file format. */
#include "store/cache_internal.h"

/* ------------------------------------------------------------------------ */
/* Iteration: rows are collected under the lock, callbacks run without it.   */
/* ------------------------------------------------------------------------ */

/* Reads one row into dst: 0, or -1 with the reason the row is refused. */
typedef int (*row_fn)(sqlite3_stmt *s, void *dst, char *why, size_t why_size);

/* Runs the filtered SELECT of statement id (kept prepared on the handle:
 * the listings run again and again on one), whose column rowid_col is the
 * rowid, and collects every row that fn accepts into a malloc'd array of
 * elem-sized records; the others are counted as refused. */
static scree_status collect(scree__cache *c, int id, const char *table, int rowid_col,
                            const char *arch, const char *op, size_t elem, row_fn fn,
                            void **rows, size_t *nrows) {
  *rows = NULL;
  *nrows = 0;
  size_t cap = 0;
  scree_status st = SCREE_OK;
  hold(c);
  int rc;
  sqlite3_stmt *s = stmt(c, id, &rc);
  if (s) {
    bind_filter(s, 1, arch);
    bind_filter(s, 2, op);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      if (*nrows == SCREE__CACHE_MAX_ROWS) {
        set_err(c, "%s: more than %d rows in %s; not reading them all", c->path,
                SCREE__CACHE_MAX_ROWS, table);
        st = SCREE_ERROR_CACHE;
        break;
      }
      if (grow(rows, &cap, *nrows, elem) != 0) {
        st = SCREE_ERROR_OUT_OF_MEMORY;
        break;
      }
      char why[256];
      if (fn(s, (char *)*rows + *nrows * elem, why, sizeof why)) {
        note_refused(c, table, sqlite3_column_int64(s, rowid_col), why);
        continue;
      }
      (*nrows)++;
    }
  }
  if (st == SCREE_OK && rc != SQLITE_DONE) {
    set_err(c, "%s: %s", c->path, sqlite3_errmsg(c->db));
    st = status_of(rc);
  }
  if (s) done(s);
  release(c);
  if (st != SCREE_OK) {
    free(*rows);
    *rows = NULL;
    *nrows = 0;
  }
  return st;
}

/* row_fn of misses and bad configs: the checked readers of cache_check.c. */
static int miss_row(sqlite3_stmt *s, void *dst, char *why, size_t why_size) {
  return row_to_miss(s, dst, why, why_size);
}

static int bad_row(sqlite3_stmt *s, void *dst, char *why, size_t why_size) {
  return row_to_bad(s, dst, why, why_size);
}

/* A winner without its cubin, and its rowid (with_cubin reads the row
 * again by it). */
typedef struct meta_row {
  scree__centry e;
  int64_t rowid;
} meta_row;

/* row_fn of winners (a WMETA statement): the checked row and its rowid. */
static int entry_meta_row(sqlite3_stmt *s, void *dst, char *why, size_t why_size) {
  meta_row *m = dst;
  if (row_to_entry(s, &m->e, why, why_size) ||
      row_cubin_size(s, 16, &m->e.cubin_size, why, why_size))
    return -1;
  m->rowid = sqlite3_column_int64(s, 18);
  return 0;
}

scree_status scree__cache_foreach_miss(scree__cache *c, const char *arch,
                                       const char *op,
                                       int (*fn)(void *user,
                                                 const scree__cmiss *m),
                                       void *user) {
  if (!c || !fn) return SCREE_ERROR_INVALID_ARGUMENT;
  void *rows;
  size_t n;
  scree_status st = collect(c, ST_LIST_MISS, "misses", 9, arch, op, sizeof(scree__cmiss),
                            miss_row, &rows, &n);
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
  scree_status st = collect(c, ST_LIST_BAD, "bad_configs", 10, arch, op,
                            sizeof(scree__cbad), bad_row, &rows, &n);
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
  scree_status st = collect(c, ST_LIST_WINNERS, "winners", 18, arch, op, sizeof(meta_row),
                            entry_meta_row, &rows, &n);
  for (size_t i = 0; st == SCREE_OK && i < n; i++) {
    meta_row *m = (meta_row *)rows + i;
    if (!with_cubin) {
      if (fn(user, &m->e)) break;
      continue;
    }
    /* The row may have changed or gone since it was listed: read it again
     * by its rowid (an upsert keeps it), checked as before. */
    scree__centry full;
    char why[256];
    hold(c);
    scree_status g = get_rowid_locked(c, m->rowid, &full, why, sizeof why);
    release(c);
    if (g == SCREE_ERROR_NOT_FOUND || g == SCREE_ERROR_PARSE) continue;
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
