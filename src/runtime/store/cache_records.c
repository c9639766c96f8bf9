/* cache_records.c - the rows: winners (keep the faster), bad configs,
 * misses. docs/cache.md describes
 * the file format. */
#include "store/cache_internal.h"

/* ------------------------------------------------------------------------ */
/* Winners                                                                   */
/* ------------------------------------------------------------------------ */

void scree__centry_free(scree__centry *e) {
  if (!e) return;
  free(e->cubin);
  e->cubin = NULL;
  e->cubin_size = 0;
}

/* ?1..?5: the key without its src_hash (a miss's key). */
static void bind_miss_key(sqlite3_stmt *s, const scree__ckey *k) {
  bind_field(s, 1, k->op, sizeof k->op);
  bind_field(s, 2, k->bucket, sizeof k->bucket);
  bind_field(s, 3, k->dtype, sizeof k->dtype);
  sqlite3_bind_int(s, 4, k->causal);
  bind_field(s, 5, k->arch, sizeof k->arch);
}

/* ?1..?6: a winner's key. */
static void bind_key(sqlite3_stmt *s, const scree__ckey *k) {
  bind_miss_key(s, k);
  bind_field(s, 6, k->src_hash, sizeof k->src_hash);
}

/* Steps a lookup: SQLITE_ROW, SQLITE_DONE (no row), or the error, said
 * in c's message. */
static int step_lookup(scree__cache *c, sqlite3_stmt *s) {
  const int rc = sqlite3_step(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    set_err(c, "%s: lookup failed: %s", c->path, sqlite3_errmsg(c->db));
  return rc;
}

/* A call refused before it touched the file: what, and why, in c's
 * message. */
static scree_status refuse(scree__cache *c, const char *what, const char *why) {
  hold(c);
  set_err(c, "%s: %s", what, why);
  release(c);
  return SCREE_ERROR_INVALID_ARGUMENT;
}

scree_status load_cubin(sqlite3_stmt *s, int col, scree__centry *e, char *why,
                        size_t why_size) {
  e->cubin = NULL;
  e->cubin_size = 0;
  e->cubin_ok = 0;
  const int t = sqlite3_column_type(s, col);
  const int n = t == SQLITE_BLOB ? sqlite3_column_bytes(s, col) : 0;
  if (t != SQLITE_BLOB || n <= 0 || n > SCREE__CACHE_MAX_CUBIN) {
    if (t != SQLITE_BLOB)
      put_why(why, why_size, "cubin is %s, not a blob",
              t == SQLITE_NULL ? "NULL" : t == SQLITE_TEXT ? "text" : "a number");
    else
      put_why(why, why_size, "cubin is %d bytes, outside [1, %d]", n, SCREE__CACHE_MAX_CUBIN);
    return SCREE_ERROR_PARSE;
  }
  const void *b = sqlite3_column_blob(s, col);
  if (!b) return SCREE_ERROR_OUT_OF_MEMORY;
  char h[65];
  scree__sha256_hex(b, (size_t)n, h);
  e->cubin_size = (size_t)n;
  if (strcmp(h, e->cubin_hash) != 0) return SCREE_OK;
  e->cubin = malloc((size_t)n);
  if (!e->cubin) return SCREE_ERROR_OUT_OF_MEMORY;
  memcpy(e->cubin, b, (size_t)n);
  e->cubin_ok = 1;
  return SCREE_OK;
}

/* Checks a winner row that a statement stands on: its columns 0..15, then
 * the cubin at col 16 (with_cubin) or its length and type at 16 and 17.
 * SCREE_ERROR_PARSE (with the reason in why) if it fails. */
static scree_status read_winner(sqlite3_stmt *s, int with_cubin, scree__centry *out,
                                char *why, size_t why_size) {
  if (row_to_entry(s, out, why, why_size)) return SCREE_ERROR_PARSE;
  if (with_cubin) return load_cubin(s, 16, out, why, why_size);
  return row_cubin_size(s, 16, &out->cubin_size, why, why_size) ? SCREE_ERROR_PARSE : SCREE_OK;
}

int scree__ckey_same(const scree__ckey *a, const scree__ckey *b) {
  return !strcmp(a->op, b->op) && !strcmp(a->bucket, b->bucket) && !strcmp(a->dtype, b->dtype) &&
         a->causal == b->causal && !strcmp(a->arch, b->arch) && !strcmp(a->src_hash, b->src_hash);
}

/* Lookup with the lock held. with_cubin = 0 leaves cubin NULL and puts the
 * stored size into cubin_size. */

scree_status get_locked(scree__cache *c, const scree__ckey *k,
                               scree__centry *out, int with_cubin) {
  int rc;
  sqlite3_stmt *s = stmt(c, ST_GET_META, &rc);
  if (!s) return status_of(rc);
  /* The row and its cubin are two reads: one read transaction (one
   * snapshot) holds them together, so that a writer that deletes this key
   * and inserts another under the same rowid meanwhile is not seen. */
  const int own_txn = with_cubin && sqlite3_get_autocommit(c->db);
  if (own_txn && (rc = sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL)) != SQLITE_OK) {
    set_err(c, "%s: lookup failed: %s", c->path, sqlite3_errmsg(c->db));
    return status_of(rc);
  }
  bind_key(s, k);
  scree_status st;
  int64_t rowid = -1;
  char why[256];
  rc = step_lookup(c, s);
  if (rc == SQLITE_ROW) {
    rowid = sqlite3_column_int64(s, 18);
    st = read_winner(s, 0, out, why, sizeof why);
    if (st == SCREE_ERROR_PARSE) note_refused(c, "winners", rowid, why);
  } else {
    st = rc == SQLITE_DONE ? SCREE_ERROR_NOT_FOUND : status_of(rc);
  }
  done(s);
  /* The cubin only once the row passed and its size is known to be
   * bounded; the row is read again by its rowid, and is used only if it
   * still holds the key asked for. */
  if (st == SCREE_OK && with_cubin) {
    st = get_rowid_locked(c, rowid, out, why, sizeof why);
    if (st == SCREE_OK && !scree__ckey_same(&out->key, k)) {
      scree__centry_free(out);
      st = SCREE_ERROR_NOT_FOUND;
    }
  }
  if (own_txn && sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
  if (st == SCREE_ERROR_PARSE) {
    set_err(c, "%s: the row of %s %s was refused: %s", c->path, k->op, k->bucket, why);
    st = SCREE_ERROR_CACHE;
  }
  if (st != SCREE_OK) memset(out, 0, sizeof *out);
  return st;
}

scree_status get_rowid_locked(scree__cache *c, int64_t rowid, scree__centry *out, char *why,
                              size_t why_size) {
  memset(out, 0, sizeof *out);
  int rc;
  sqlite3_stmt *s = stmt(c, ST_GET_ROWID, &rc);
  if (!s) return status_of(rc);
  sqlite3_bind_int64(s, 1, rowid);
  scree_status st;
  rc = step_lookup(c, s);
  if (rc == SQLITE_ROW) {
    st = read_winner(s, 1, out, why, why_size);
    if (st == SCREE_ERROR_PARSE) {
      note_refused(c, "winners", rowid, why);
      scree__centry_free(out);
    }
  } else {
    st = rc == SQLITE_DONE ? SCREE_ERROR_NOT_FOUND : status_of(rc);
  }
  done(s);
  return st;
}

scree_status scree__cache_get(scree__cache *c, const scree__ckey *k,
                              scree__centry *out) {
  if (!c || !k || !out) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  hold(c);
  scree_status st = get_locked(c, k, out, 1);
  release(c);
  if (st != SCREE_OK) memset(out, 0, sizeof *out);
  return st;
}

/* Keep-the-faster write inside a transaction the caller holds. hash is the
 * cubin's sha256 hex. *changed = 1 if the row was inserted or replaced. */
int write_winner(scree__cache *c, const scree__centry *e,
                        const char *hash, int *changed) {
  int rc;
  sqlite3_stmt *s = stmt(c, ST_PUT, &rc);
  if (!s) return rc;
  bind_key(s, &e->key);
  bind_field(s, 7, e->config, sizeof e->config);
  sqlite3_bind_double(s, 8, e->median_us);
  sqlite3_bind_double(s, 9, e->spread_us);
  bind_field(s, 10, e->device_name, sizeof e->device_name);
  sqlite3_bind_int(s, 11, e->sm_count);
  sqlite3_bind_int(s, 12, e->driver_version);
  sqlite3_bind_int(s, 13, e->nvrtc_version);
  if (e->scree_version[0])
    bind_field(s, 14, e->scree_version, sizeof e->scree_version);
  else
    sqlite3_bind_text(s, 14, SCREE_VERSION_STRING, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 15, e->created ? e->created : now_s());
  sqlite3_bind_text(s, 16, hash, -1, SQLITE_TRANSIENT);
  /* Not copied: the bytes outlive the statement's step (done() unbinds). */
  sqlite3_bind_blob64(s, 17, e->cubin, (sqlite3_uint64)e->cubin_size, SQLITE_STATIC);
  rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    rc = SQLITE_OK;
    if (changed) *changed = sqlite3_changes(c->db) > 0;
  } else {
    set_err(c, "%s: writing a winner: %s", c->path, sqlite3_errmsg(c->db));
  }
  done(s);
  return rc;
}

int drop_if_refused(scree__cache *c, const scree__ckey *k) {
  int rc;
  sqlite3_stmt *s = stmt(c, ST_GET_META, &rc);
  if (!s) return rc;
  bind_key(s, k);
  rc = step_lookup(c, s);
  int64_t rowid = -1, intact = -1;
  char why[256];
  if (rc == SQLITE_ROW) {
    scree__centry e;
    if (read_winner(s, 0, &e, why, sizeof why) != SCREE_OK)
      rowid = sqlite3_column_int64(s, 18);
    else
      intact = sqlite3_column_int64(s, 18);
  }
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  done(s);
  if (rc != SQLITE_OK) return rc;
  /* A row whose cubin fails its hash check is damaged too: whatever its
   * median says, it would otherwise keep out every good row. */
  if (intact >= 0) {
    scree__centry e;
    const scree_status st = get_rowid_locked(c, intact, &e, why, sizeof why);
    if (st == SCREE_ERROR_PARSE || (st == SCREE_OK && !e.cubin_ok)) rowid = intact;
    if (st == SCREE_OK) scree__centry_free(&e);
  }
  if (rowid < 0) return rc;
  if (!(s = stmt(c, ST_DEL_ROWID, &rc))) return rc;
  sqlite3_bind_int64(s, 1, rowid);
  rc = sqlite3_step(s);
  if (rc == SQLITE_DONE)
    rc = SQLITE_OK;
  else
    set_err(c, "%s: replacing a refused row: %s", c->path, sqlite3_errmsg(c->db));
  done(s);
  return rc;
}

/* Runs body inside a write transaction (lock held, the cache writable):
 * commits when body returns SQLITE_OK, else rolls back. */
static scree_status write_txn(scree__cache *c, int (*body)(scree__cache *c, void *user),
                              void *user) {
  int rc = txn_begin(c);
  if (rc != SQLITE_OK) return status_of(rc);
  if ((rc = body(c, user)) != SQLITE_OK) {
    txn_rollback(c);
    return status_of(rc);
  }
  rc = txn_commit(c);
  return rc == SQLITE_OK ? SCREE_OK : status_of(rc);
}

/* A put's transaction: a refused row of the key is dropped, then the
 * keep-the-faster write. */
typedef struct put_txn {
  const scree__centry *e;
  char hash[65]; /* the cubin's sha256 hex */
  int changed;
} put_txn;

static int put_body(scree__cache *c, void *user) {
  put_txn *p = user;
  int rc = drop_if_refused(c, &p->e->key);
  if (rc == SQLITE_OK) rc = write_winner(c, p->e, p->hash, &p->changed);
  return rc == SQLITE_OK && p->changed ? over_limit(c, "winners") : rc;
}

scree_status scree__cache_put(scree__cache *c, const scree__centry *e,
                              int *replaced) {
  if (replaced) *replaced = 0;
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  char why[256];
  if (!entry_ok(e, why, sizeof why)) return refuse(c, "put: invalid entry", why);
  put_txn p = {e, {0}, 0};
  scree__sha256_hex(e->cubin, e->cubin_size, p.hash);
  hold(c);
  const scree_status st =
      check_writable(c, "put") ? write_txn(c, put_body, &p) : SCREE_ERROR_CACHE;
  release(c);
  if (replaced) *replaced = st == SCREE_OK ? p.changed : 0;
  return st;
}

/* Runs one filtered statement (?1 arch, ?2 op) to completion. */
static int exec_filtered(scree__cache *c, const char *sql, const char *arch,
                         const char *op, int *changes) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(c->db, sql, -1, &s, NULL);
  if (rc == SQLITE_OK) {
    bind_filter(s, 1, arch);
    bind_filter(s, 2, op);
    rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
      rc = SQLITE_OK;
      if (changes) *changes = sqlite3_changes(c->db);
    }
  }
  if (rc != SQLITE_OK)
    set_err(c, "%s: %s", c->path, sqlite3_errmsg(c->db));
  sqlite3_finalize(s);
  return rc;
}

/* A clear's transaction: the filtered rows of every table; n, the winners
 * deleted. */
typedef struct clear_txn {
  const char *arch, *op;
  int n;
} clear_txn;

static int clear_body(scree__cache *c, void *user) {
  clear_txn *x = user;
  int rc = exec_filtered(c, "DELETE FROM winners" FILTER, x->arch, x->op, &x->n);
  if (rc == SQLITE_OK)
    rc = exec_filtered(c, "DELETE FROM bad_configs" FILTER, x->arch, x->op, NULL);
  if (rc == SQLITE_OK) rc = exec_filtered(c, "DELETE FROM misses" FILTER, x->arch, x->op, NULL);
  return rc;
}

scree_status scree__cache_clear(scree__cache *c, const char *arch,
                                const char *op, int *deleted) {
  if (deleted) *deleted = 0;
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  clear_txn x = {arch, op, 0};
  hold(c);
  const scree_status st =
      check_writable(c, "clear") ? write_txn(c, clear_body, &x) : SCREE_ERROR_CACHE;
  release(c);
  if (deleted && st == SCREE_OK) *deleted = x.n;
  return st;
}

/* ------------------------------------------------------------------------ */
/* Bad configs and misses                                                    */
/* ------------------------------------------------------------------------ */

/* The prepared statement id of a write by `what` (lock held), or NULL with
 * *st set: SCREE_ERROR_CACHE when the cache is read-only. */
static sqlite3_stmt *write_stmt(scree__cache *c, const char *what, int id, scree_status *st) {
  int rc;
  sqlite3_stmt *s = NULL;
  if (!check_writable(c, what))
    *st = SCREE_ERROR_CACHE;
  else if (!(s = stmt(c, id, &rc)))
    *st = status_of(rc);
  return s;
}

/* One bound statement (and the rows it changed); a write that adds rows
 * to `table` is rolled back when the table then holds more rows than a
 * cache holds (over_limit). */
typedef struct one_txn {
  sqlite3_stmt *s;
  int *changes;
  const char *table;
} one_txn;

static int one_body(scree__cache *c, void *user) {
  one_txn *w = user;
  const int rc = sqlite3_step(w->s);
  if (rc != SQLITE_DONE) {
    set_err(c, "%s: %s", c->path, sqlite3_errmsg(c->db));
    return rc;
  }
  const int n = sqlite3_changes(c->db);
  if (w->changes) *w->changes = n;
  return w->table && n ? over_limit(c, w->table) : SQLITE_OK;
}

/* Runs write_stmt's statement, bound, as its own write transaction, and
 * resets it. table: the table it adds rows to, or NULL for a delete. */
static scree_status write_one(scree__cache *c, sqlite3_stmt *s, const char *table,
                              int *changes) {
  one_txn w = {s, changes, table};
  const scree_status st = write_txn(c, one_body, &w);
  done(s);
  return st;
}

static void bind_bad(sqlite3_stmt *s, const scree__ckey *k,
                     const char *config, int nvrtc_version) {
  bind_field(s, 1, k->op, sizeof k->op);
  bind_field(s, 2, k->dtype, sizeof k->dtype);
  sqlite3_bind_int(s, 3, k->causal);
  bind_field(s, 4, k->arch, sizeof k->arch);
  bind_field(s, 5, k->src_hash, sizeof k->src_hash);
  sqlite3_bind_text(s, 6, config, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 7, nvrtc_version);
  bind_field(s, 8, k->bucket[0] ? k->bucket : "*", sizeof k->bucket);
}

/* The first bytes of reason that fit a reason field (255), cut before a
 * UTF-8 continuation byte rather than inside a character. */
static int reason_len(const char *reason) {
  size_t n = strnlen(reason, 256);
  if (n > 255) {
    n = 255;
    while (n && ((unsigned char)reason[n] & 0xc0) == 0x80) n--;
  }
  return (int)n;
}

scree_status scree__cache_record_bad(scree__cache *c, const scree__ckey *k,
                                     const char *config, int nvrtc_version,
                                     const char *reason) {
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  char why[256] = "no key or no config";
  scree__ckey kk;
  int ok = k && config;
  if (ok) {
    kk = *k; /* "" is the "*" bucket */
    if (!kk.bucket[0]) snprintf(kk.bucket, sizeof kk.bucket, "*");
    ok = key_ok(&kk, 1, 1, why, sizeof why) &&
         !text_ok(config, strlen(config), 128, TXT_KEY, "config", why, sizeof why);
  }
  if (!ok) return refuse(c, "record_bad", why);
  hold(c);
  scree_status st;
  sqlite3_stmt *s = write_stmt(c, "record_bad", ST_BAD_PUT, &st);
  if (s) {
    bind_bad(s, k, config, nvrtc_version);
    sqlite3_bind_text(s, 9, reason ? reason : "", reason ? reason_len(reason) : 0,
                      SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 10, now_s());
    st = write_one(c, s, "bad_configs", NULL);
  }
  release(c);
  return st;
}

int scree__cache_is_bad(scree__cache *c, const scree__ckey *k,
                        const char *config, int nvrtc_version,
                        char *reason_out, size_t reason_size) {
  if (reason_out && reason_size) reason_out[0] = 0;
  if (!c || !key_valid(k) || !config) return -1;
  hold(c);
  int rc, result = -1;
  sqlite3_stmt *s = stmt(c, ST_BAD_GET, &rc);
  if (s) {
    bind_bad(s, k, config, nvrtc_version);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      result = 1;
      if (reason_out) copy_col(reason_out, reason_size, s, 0);
    } else if (rc == SQLITE_DONE) {
      result = 0;
    } else {
      set_err(c, "%s: is_bad: %s", c->path, sqlite3_errmsg(c->db));
    }
    done(s);
  }
  release(c);
  return result;
}

scree_status scree__cache_record_miss(scree__cache *c, const scree__ckey *k,
                                      const char *example) {
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  char why[256];
  if (!key_ok(k, 1, 0, why, sizeof why)) return refuse(c, "record_miss", why);
  hold(c);
  scree_status st;
  sqlite3_stmt *s = write_stmt(c, "record_miss", ST_MISS_PUT, &st);
  if (s) {
    bind_miss_key(s, k);
    bind_field(s, 6, example ? example : "", 127);
    sqlite3_bind_int64(s, 7, now_s());
    st = write_one(c, s, "misses", NULL);
  }
  release(c);
  return st;
}

scree_status scree__cache_delete_miss(scree__cache *c, const scree__ckey *k) {
  if (!c || !key_valid(k)) return SCREE_ERROR_INVALID_ARGUMENT;
  hold(c);
  scree_status st;
  int n = 0;
  sqlite3_stmt *s = write_stmt(c, "delete_miss", ST_MISS_DEL, &st);
  if (s) {
    bind_miss_key(s, k);
    st = write_one(c, s, NULL, &n);
    if (st == SCREE_OK && n == 0) st = SCREE_ERROR_NOT_FOUND;
  }
  release(c);
  return st;
}

