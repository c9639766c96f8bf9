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

static void bind_key(sqlite3_stmt *s, const scree__ckey *k) {
  bind_field(s, 1, k->op, sizeof k->op);
  bind_field(s, 2, k->bucket, sizeof k->bucket);
  bind_field(s, 3, k->dtype, sizeof k->dtype);
  sqlite3_bind_int(s, 4, k->causal);
  bind_field(s, 5, k->arch, sizeof k->arch);
  bind_field(s, 6, k->src_hash, sizeof k->src_hash);
}

/* Columns 0..15 of WCOLS into e (no cubin). */
void row_to_entry(sqlite3_stmt *s, scree__centry *e) {
  memset(e, 0, sizeof *e);
  copy_col(e->key.op, sizeof e->key.op, s, 0);
  copy_col(e->key.bucket, sizeof e->key.bucket, s, 1);
  copy_col(e->key.dtype, sizeof e->key.dtype, s, 2);
  e->key.causal = sqlite3_column_int(s, 3);
  copy_col(e->key.arch, sizeof e->key.arch, s, 4);
  copy_col(e->key.src_hash, sizeof e->key.src_hash, s, 5);
  copy_col(e->config, sizeof e->config, s, 6);
  e->median_us = sqlite3_column_double(s, 7);
  e->spread_us = sqlite3_column_double(s, 8);
  copy_col(e->device_name, sizeof e->device_name, s, 9);
  e->sm_count = sqlite3_column_int(s, 10);
  e->driver_version = sqlite3_column_int(s, 11);
  e->nvrtc_version = sqlite3_column_int(s, 12);
  copy_col(e->scree_version, sizeof e->scree_version, s, 13);
  e->created = sqlite3_column_int64(s, 14);
  copy_col(e->cubin_hash, sizeof e->cubin_hash, s, 15);
}

/* Copies the cubin of column col if its sha256 matches e->cubin_hash. */
scree_status load_cubin(sqlite3_stmt *s, int col, scree__centry *e) {
  const void *b = sqlite3_column_blob(s, col);
  int n = sqlite3_column_bytes(s, col);
  e->cubin = NULL;
  e->cubin_size = 0;
  e->cubin_ok = 0;
  if (!b || n <= 0) return SCREE_OK;
  char h[65];
  scree__sha256_hex(b, (size_t)n, h);
  if (strcmp(h, e->cubin_hash) != 0) return SCREE_OK;
  e->cubin = malloc((size_t)n);
  if (!e->cubin) return SCREE_ERROR_OUT_OF_MEMORY;
  memcpy(e->cubin, b, (size_t)n);
  e->cubin_size = (size_t)n;
  e->cubin_ok = 1;
  return SCREE_OK;
}

/* Lookup with the lock held. with_cubin = 0 leaves cubin NULL and puts the
 * stored size into cubin_size. */
scree_status get_locked(scree__cache *c, const scree__ckey *k,
                               scree__centry *out, int with_cubin) {
  int rc;
  sqlite3_stmt *s = stmt(c, with_cubin ? ST_GET : ST_GET_META, &rc);
  if (!s) return status_of(rc);
  bind_key(s, k);
  scree_status st;
  rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    row_to_entry(s, out);
    if (with_cubin) {
      st = load_cubin(s, 16, out);
    } else {
      out->cubin_size = (size_t)sqlite3_column_int64(s, 16);
      st = SCREE_OK;
    }
  } else if (rc == SQLITE_DONE) {
    st = SCREE_ERROR_NOT_FOUND;
  } else {
    set_err(c, "%s: lookup failed: %s", c->path, sqlite3_errmsg(c->db));
    st = status_of(rc);
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
  sqlite3_bind_blob64(s, 17, e->cubin, (sqlite3_uint64)e->cubin_size,
                      SQLITE_TRANSIENT);
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

int entry_valid(const scree__centry *e) {
  return e && key_valid(&e->key) && e->cubin && e->cubin_size > 0 &&
         e->cubin_size <= 0x7fffffff && isfinite(e->median_us) &&
         e->median_us >= 0;
}

scree_status scree__cache_put(scree__cache *c, const scree__centry *e,
                              int *replaced) {
  if (replaced) *replaced = 0;
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  if (!entry_valid(e)) {
    hold(c);
    set_err(c, "put: invalid entry (empty op/arch, causal not 0/1, no cubin"
               " or a median that is negative or not finite)");
    release(c);
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  char hash[65];
  scree__sha256_hex(e->cubin, e->cubin_size, hash);
  hold(c);
  scree_status st = SCREE_OK;
  int changed = 0, rc;
  if (!check_writable(c, "put")) {
    st = SCREE_ERROR_CACHE;
  } else if ((rc = txn_begin(c)) != SQLITE_OK) {
    st = status_of(rc);
  } else if ((rc = write_winner(c, e, hash, &changed)) != SQLITE_OK) {
    txn_rollback(c);
    st = status_of(rc);
  } else if ((rc = txn_commit(c)) != SQLITE_OK) {
    st = status_of(rc);
    changed = 0;
  }
  release(c);
  if (replaced) *replaced = changed;
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

scree_status scree__cache_clear(scree__cache *c, const char *arch,
                                const char *op, int *deleted) {
  if (deleted) *deleted = 0;
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  hold(c);
  scree_status st = SCREE_OK;
  int n = 0, rc;
  if (!check_writable(c, "clear")) {
    st = SCREE_ERROR_CACHE;
  } else if ((rc = txn_begin(c)) != SQLITE_OK) {
    st = status_of(rc);
  } else if ((rc = exec_filtered(c, "DELETE FROM winners" FILTER, arch, op,
                                 &n)) != SQLITE_OK ||
             (rc = exec_filtered(c, "DELETE FROM bad_configs" FILTER, arch,
                                 op, NULL)) != SQLITE_OK ||
             (rc = exec_filtered(c, "DELETE FROM misses" FILTER, arch, op,
                                 NULL)) != SQLITE_OK) {
    txn_rollback(c);
    st = status_of(rc);
  } else if ((rc = txn_commit(c)) != SQLITE_OK) {
    st = status_of(rc);
  }
  release(c);
  if (deleted && st == SCREE_OK) *deleted = n;
  return st;
}

/* ------------------------------------------------------------------------ */
/* Bad configs and misses                                                    */
/* ------------------------------------------------------------------------ */

/* One bound statement as its own write transaction. */
static scree_status write_one(scree__cache *c, sqlite3_stmt *s, int *changes) {
  int rc = txn_begin(c);
  if (rc != SQLITE_OK) return status_of(rc);
  rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) {
    set_err(c, "%s: %s", c->path, sqlite3_errmsg(c->db));
    txn_rollback(c);
    return status_of(rc);
  }
  if (changes) *changes = sqlite3_changes(c->db);
  rc = txn_commit(c);
  return rc == SQLITE_OK ? SCREE_OK : status_of(rc);
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

scree_status scree__cache_record_bad(scree__cache *c, const scree__ckey *k,
                                     const char *config, int nvrtc_version,
                                     const char *reason) {
  if (!c || !key_valid(k) || !config || !*config)
    return SCREE_ERROR_INVALID_ARGUMENT;
  hold(c);
  scree_status st;
  int rc;
  sqlite3_stmt *s;
  if (!check_writable(c, "record_bad")) {
    st = SCREE_ERROR_CACHE;
  } else if (!(s = stmt(c, ST_BAD_PUT, &rc))) {
    st = status_of(rc);
  } else {
    bind_bad(s, k, config, nvrtc_version);
    sqlite3_bind_text(s, 9, reason ? reason : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 10, now_s());
    st = write_one(c, s, NULL);
    done(s);
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

static void bind_miss_key(sqlite3_stmt *s, const scree__ckey *k) {
  bind_field(s, 1, k->op, sizeof k->op);
  bind_field(s, 2, k->bucket, sizeof k->bucket);
  bind_field(s, 3, k->dtype, sizeof k->dtype);
  sqlite3_bind_int(s, 4, k->causal);
  bind_field(s, 5, k->arch, sizeof k->arch);
}

scree_status scree__cache_record_miss(scree__cache *c, const scree__ckey *k,
                                      const char *example) {
  if (!c || !key_valid(k)) return SCREE_ERROR_INVALID_ARGUMENT;
  hold(c);
  scree_status st;
  int rc;
  sqlite3_stmt *s;
  if (!check_writable(c, "record_miss")) {
    st = SCREE_ERROR_CACHE;
  } else if (!(s = stmt(c, ST_MISS_PUT, &rc))) {
    st = status_of(rc);
  } else {
    bind_miss_key(s, k);
    bind_field(s, 6, example ? example : "", 127);
    sqlite3_bind_int64(s, 7, now_s());
    st = write_one(c, s, NULL);
    done(s);
  }
  release(c);
  return st;
}

scree_status scree__cache_delete_miss(scree__cache *c, const scree__ckey *k) {
  if (!c || !key_valid(k)) return SCREE_ERROR_INVALID_ARGUMENT;
  hold(c);
  scree_status st;
  int rc, n = 0;
  sqlite3_stmt *s;
  if (!check_writable(c, "delete_miss")) {
    st = SCREE_ERROR_CACHE;
  } else if (!(s = stmt(c, ST_MISS_DEL, &rc))) {
    st = status_of(rc);
  } else {
    bind_miss_key(s, k);
    st = write_one(c, s, &n);
    done(s);
    if (st == SCREE_OK && n == 0) st = SCREE_ERROR_NOT_FOUND;
  }
  release(c);
  return st;
}

