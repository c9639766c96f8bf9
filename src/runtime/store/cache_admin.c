/* cache_admin.c - merge and export, for scree-tune. docs/cache.md describes
 * the file format. */
#include "store/cache_internal.h"

/* ------------------------------------------------------------------------ */
/* Reading rows that leave their file                                        */
/* ------------------------------------------------------------------------ */

/* Source rows left out, and the first one's reason. */
typedef struct skips {
  int hash, invalid;
  char first[384];
} skips;

/* Counts a row left out (hash = 1: its cubin failed its hash check) and
 * keeps the first one's reason. */
static void skip(skips *k, int hash, const char *table, int64_t rowid, const char *why) {
  if (!k->hash && !k->invalid)
    snprintf(k->first, sizeof k->first, "%s row %lld: %s", table, (long long)rowid, why);
  if (hash)
    k->hash++;
  else
    k->invalid++;
}

/* Reads the winner a WMETA statement stands on, checked as a row that
 * leaves its file must be, and its cubin through cs (SELECT cubin ... WHERE
 * rowid = ?1 on the same database), only once the row has passed and the
 * cubin's size is known to be bounded. On SCREE_OK, e->cubin points into
 * cs's row (valid until cs is reset: not to be freed) and *ok says whether
 * the row passed (else it is counted in k). */
static scree_status read_leaving(sqlite3_stmt *s, sqlite3_stmt *cs, scree__centry *e,
                                 skips *k, int *ok) {
  char why[256];
  const int64_t rowid = sqlite3_column_int64(s, 18);
  *ok = 0;
  if (row_to_entry(s, e, why, sizeof why) ||
      row_cubin_size(s, 16, &e->cubin_size, why, sizeof why) ||
      !scree__centry_check(e, why, sizeof why)) {
    skip(k, 0, "winners", rowid, why);
    return SCREE_OK;
  }
  sqlite3_reset(cs);
  sqlite3_bind_int64(cs, 1, rowid);
  const int rc = sqlite3_step(cs);
  if (rc == SQLITE_DONE) return SCREE_OK; /* gone meanwhile (a writable source) */
  if (rc != SQLITE_ROW) return status_of(rc);
  const void *b = sqlite3_column_blob(cs, 0);
  const int n = sqlite3_column_bytes(cs, 0);
  if (sqlite3_column_type(cs, 0) != SQLITE_BLOB || !b || (size_t)n != e->cubin_size) {
    if (sqlite3_errcode(sqlite3_db_handle(cs)) == SQLITE_NOMEM) return SCREE_ERROR_OUT_OF_MEMORY;
    skip(k, 0, "winners", rowid, "the cubin changed while it was read");
    return SCREE_OK;
  }
  char h[65];
  scree__sha256_hex(b, (size_t)n, h);
  if (strcmp(h, e->cubin_hash)) {
    skip(k, 1, "winners", rowid, "the cubin fails its hash check");
    return SCREE_OK;
  }
  e->cubin = (void *)b;
  e->cubin_ok = 1;
  *ok = 1;
  return SCREE_OK;
}

/* 0 if SQLite finds src's file intact (PRAGMA quick_check: every b-tree
 * page, cell and freelist entry in range, no page used twice), else -1 with
 * the first fault in why. A damaged b-tree is not read row by row: a cell
 * that runs past its page is read from whatever the page buffer held
 * before, so the same file could yield different rows in two merges
 * (tests/fuzz/regressions/cache/). quick_check reads every page once. */
static int check_intact(scree__cache *src, const char *path, char *why, size_t why_size) {
  sqlite3_stmt *q = NULL;
  int rc = sqlite3_prepare_v2(src->db, "PRAGMA quick_check(1)", -1, &q, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  const char *r = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : NULL;
  const int ok = r && !strcmp(r, "ok");
  if (!ok)
    put_why(why, why_size, "cannot merge: %s is damaged (SQLite's quick_check: %s)", path,
            r ? r : sqlite3_errmsg(src->db));
  sqlite3_finalize(q);
  return ok ? 0 : -1;
}

/* "skipped 3 row(s) of SRC: 1 winner(s) whose cubin failed its hash check,
 * 2 that failed their checks (first: ...)". */
static void describe_skips(const skips *k, const char *src, char *why, size_t why_size) {
  if (!k->hash && !k->invalid) return;
  put_why(why, why_size,
          "skipped %d row(s) of %s: %d winner(s) whose cubin failed its hash check, %d"
          " row(s) that failed their checks (first: %s)",
          k->hash + k->invalid, src, k->hash, k->invalid, k->first);
}

/* ------------------------------------------------------------------------ */
/* Merge and export                                                          */
/* ------------------------------------------------------------------------ */

scree_status scree__cache_merge(
    scree__cache *c, const char *src_path, int strict, scree__merge_counts *counts,
    void (*conflict_fn)(void *user, const scree__centry *mine,
                        const scree__centry *theirs),
    void *user, char *why, size_t why_size) {
  scree__merge_counts n = {0};
  skips k = {0};
  if (counts) *counts = n;
  put_why(why, why_size, "%s", "");
  if (!c || !src_path || !*src_path) {
    put_why(why, why_size, "merge: %s", !c ? "no destination cache" : "no source path given");
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  hold(c);
  if (!check_writable(c, "merge")) {
    put_why(why, why_size, "%s", c->err);
    release(c);
    return SCREE_ERROR_CACHE;
  }
  release(c);

  char w2[1024] = "";
  scree__cache *src = NULL;
  scree_status st;
  st = scree__cache_open_trusted(src_path, 1, strict, &src, NULL, w2, sizeof w2);
  if (st != SCREE_OK) {
    put_why(why, why_size, "cannot merge: %s", w2);
    return st;
  }
  if (check_intact(src, src_path, why, why_size)) {
    scree__cache_close(src);
    return SCREE_ERROR_CACHE;
  }

  hold(c);
  sqlite3_stmt *s = NULL, *cs = NULL, *bs = NULL;
  int rc = txn_begin(c);
  if (rc != SQLITE_OK) {
    st = status_of(rc);
    put_why(why, why_size, "%s", c->err);
    goto out;
  }
  /* The source's listing statements, unfiltered (src is closed below,
   * which finalizes them). */
  if ((cs = stmt(src, ST_GET_CUBIN, &rc))) s = stmt(src, ST_LIST_WINNERS, &rc);
  while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    scree__centry theirs, mine;
    int ok;
    rc = SQLITE_OK;
    if ((st = read_leaving(s, cs, &theirs, &k, &ok)) != SCREE_OK) {
      set_err(c, "reading %s: %s", src_path, sqlite3_errmsg(src->db));
      goto fail;
    }
    if (!ok) continue;
    if ((rc = drop_if_refused(c, &theirs.key)) != SQLITE_OK) {
      st = status_of(rc);
      goto fail;
    }
    st = get_locked(c, &theirs.key, &mine, 0);
    if (st == SCREE_ERROR_NOT_FOUND) {
      rc = write_winner(c, &theirs, theirs.cubin_hash, NULL);
      n.added++;
    } else if (st == SCREE_OK) {
      int changed = 0;
      if (theirs.median_us < mine.median_us) {
        rc = write_winner(c, &theirs, theirs.cubin_hash, &changed);
        n.replaced += changed;
      }
      if (strcmp(mine.config, theirs.config) != 0) {
        n.conflicts++;
        if (conflict_fn) {
          scree__centry t = theirs;
          t.cubin = NULL;
          conflict_fn(user, &mine, &t);
        }
      }
    }
    if (st != SCREE_OK && st != SCREE_ERROR_NOT_FOUND) goto fail;
    st = SCREE_OK;
    if (rc != SQLITE_OK) {
      st = status_of(rc);
      goto fail;
    }
  }
  if (rc != SQLITE_DONE) {
    set_err(c, "reading %s: %s", src_path, sqlite3_errmsg(src->db));
    st = status_of(rc);
    goto fail;
  }

  /* Bad configs: union, keeping c's row where both have one. */
  done(s);
  if (!(bs = stmt(c, ST_BAD_MERGE, &rc))) {
    st = status_of(rc);
    goto fail;
  }
  s = stmt(src, ST_LIST_BAD, &rc);
  while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    scree__cbad b;
    char bwhy[256];
    rc = SQLITE_OK;
    if (row_to_bad(s, &b, bwhy, sizeof bwhy) || !scree__cbad_check(&b, bwhy, sizeof bwhy)) {
      skip(&k, 0, "bad_configs", sqlite3_column_int64(s, 10), bwhy);
      continue;
    }
    bind_field(bs, 1, b.key.op, sizeof b.key.op);
    bind_field(bs, 2, b.key.dtype, sizeof b.key.dtype);
    sqlite3_bind_int(bs, 3, b.key.causal);
    bind_field(bs, 4, b.key.arch, sizeof b.key.arch);
    bind_field(bs, 5, b.key.src_hash, sizeof b.key.src_hash);
    bind_field(bs, 6, b.config, sizeof b.config);
    sqlite3_bind_int(bs, 7, b.nvrtc_version);
    bind_field(bs, 8, b.key.bucket, sizeof b.key.bucket);
    bind_field(bs, 9, b.reason, sizeof b.reason);
    sqlite3_bind_int64(bs, 10, b.when);
    rc = sqlite3_step(bs);
    done(bs);
    if (rc != SQLITE_DONE) {
      set_err(c, "%s: merging bad configs: %s", c->path,
              sqlite3_errmsg(c->db));
      st = status_of(rc);
      goto fail;
    }
    rc = SQLITE_OK;
  }
  if (rc != SQLITE_DONE) {
    set_err(c, "reading %s: %s", src_path, sqlite3_errmsg(src->db));
    st = status_of(rc);
    goto fail;
  }
  /* The limit every reading command holds to: a merge never builds a
   * cache that they refuse. */
  if ((rc = over_limit(c, "winners")) != SQLITE_OK ||
      (rc = over_limit(c, "bad_configs")) != SQLITE_OK) {
    st = SCREE_ERROR_CACHE;
    goto fail;
  }
  if ((rc = txn_commit(c)) != SQLITE_OK) {
    st = status_of(rc);
    put_why(why, why_size, "%s", c->err);
    goto out;
  }
  n.skipped_hash = k.hash;
  n.skipped_invalid = k.invalid;
  if (counts) *counts = n;
  describe_skips(&k, src_path, why, why_size);
  st = SCREE_OK;
  goto out;
fail:
  txn_rollback(c);
  put_why(why, why_size, "merge failed, nothing merged: %s", c->err);
  if (st == SCREE_OK) st = SCREE_ERROR_CACHE;
out:
  release(c);
  scree__cache_close(src);
  return st;
}

scree_status scree__cache_export(scree__cache *c, const char *dst_path,
                                 const char *arch, const char *op,
                                 int *exported, int *skipped, char *why,
                                 size_t why_size) {
  if (exported) *exported = 0;
  if (skipped) *skipped = 0;
  put_why(why, why_size, "%s", "");
  if (!c || !dst_path || !*dst_path) {
    put_why(why, why_size, "export: %s", !c ? "no source cache" : "no output path given");
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  /* Claim the name atomically: O_EXCL fails if anything is there. */
  int fd = open(dst_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    put_why(why, why_size, "cannot create %s: %s", dst_path,
            errno == EEXIST ? "it already exists" : strerror(errno));
    return SCREE_ERROR_IO;
  }
  close(fd);

  sqlite3 *db = NULL;
  scree_status st;
  char w2[1024] = "";
  scree__cache *dst = NULL;
  if (open_db(dst_path, 0, 0, &db, &st, w2, sizeof w2) != OPEN_OK) {
    put_why(why, why_size, "%s", w2);
    unlink(dst_path);
    return st;
  }
  if ((st = wrap(db, dst_path, 0, &dst)) != SCREE_OK) {
    unlink(dst_path);
    return st;
  }

  int n = 0;
  skips k = {0};
  hold(c);
  sqlite3_stmt *s = NULL, *cs = NULL;
  int rc = txn_begin(dst);
  if (rc != SQLITE_OK) {
    put_why(why, why_size, "export: %s", dst->err);
    st = status_of(rc);
  } else if (!(cs = stmt(c, ST_GET_CUBIN, &rc)) || !(s = stmt(c, ST_LIST_WINNERS, &rc))) {
    put_why(why, why_size, "export: reading %s: %s", c->path,
            sqlite3_errmsg(c->db));
    st = status_of(rc);
  } else {
    bind_filter(s, 1, arch);
    bind_filter(s, 2, op);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      scree__centry e;
      int ok;
      if ((st = read_leaving(s, cs, &e, &k, &ok)) != SCREE_OK) {
        put_why(why, why_size, "export: reading %s: %s", c->path, sqlite3_errmsg(c->db));
        break;
      }
      if (!ok) continue;
      int w = write_winner(dst, &e, e.cubin_hash, NULL);
      if (w != SQLITE_OK) {
        rc = w;
        put_why(why, why_size, "export: %s", dst->err);
        st = status_of(w);
        break;
      }
      n++;
    }
    if (st == SCREE_OK && rc != SQLITE_DONE) {
      put_why(why, why_size, "export: reading %s: %s", c->path,
              sqlite3_errmsg(c->db));
      st = status_of(rc);
    }
    if (st == SCREE_OK && (rc = txn_commit(dst)) != SQLITE_OK) {
      put_why(why, why_size, "export: %s", dst->err);
      st = status_of(rc);
    }
  }
  if (s) done(s);
  if (cs) done(cs);
  release(c);
  txn_rollback(dst);
  scree__cache_close(dst);
  if (st != SCREE_OK) {
    unlink(dst_path);
    return st;
  }
  if (exported) *exported = n;
  if (skipped) *skipped = k.hash + k.invalid;
  describe_skips(&k, c->path, why, why_size);
  return SCREE_OK;
}
