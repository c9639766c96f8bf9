/* cache_admin.c - merge and export, for scree-tune. docs/cache.md describes
 * the file format. */
#include "store/cache_internal.h"

/* ------------------------------------------------------------------------ */
/* Merge and export                                                          */
/* ------------------------------------------------------------------------ */

scree_status scree__cache_merge(
    scree__cache *c, const char *src_path, int *added, int *replaced,
    int *conflicts,
    void (*conflict_fn)(void *user, const scree__centry *mine,
                        const scree__centry *theirs),
    void *user, char *why, size_t why_size) {
  int n_add = 0, n_rep = 0, n_conf = 0, n_skip = 0;
  if (added) *added = 0;
  if (replaced) *replaced = 0;
  if (conflicts) *conflicts = 0;
  put_why(why, why_size, "%s", "");
  if (!c || !src_path) return SCREE_ERROR_INVALID_ARGUMENT;
  hold(c);
  if (!check_writable(c, "merge")) {
    put_why(why, why_size, "%s", c->err);
    release(c);
    return SCREE_ERROR_CACHE;
  }
  release(c);

  char w2[1024] = "";
  scree__cache *src = NULL;
  scree_status st = scree__cache_open(src_path, 1, &src, NULL, w2, sizeof w2);
  if (st != SCREE_OK) {
    put_why(why, why_size, "cannot merge: %s", w2);
    return st;
  }

  hold(c);
  sqlite3_stmt *s = NULL, *bs = NULL;
  int rc = txn_begin(c);
  if (rc != SQLITE_OK) {
    st = status_of(rc);
    put_why(why, why_size, "%s", c->err);
    goto out;
  }
  rc = sqlite3_prepare_v2(src->db,
                          "SELECT " WCOLS ", cubin FROM winners" WORDER, -1,
                          &s, NULL);
  while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    scree__centry theirs, mine;
    row_to_entry(s, &theirs);
    if ((st = load_cubin(s, 16, &theirs)) != SCREE_OK) goto fail;
    rc = SQLITE_OK;
    if (!theirs.cubin_ok || !entry_valid(&theirs)) {
      n_skip++;
      scree__centry_free(&theirs);
      continue;
    }
    st = get_locked(c, &theirs.key, &mine, 0);
    if (st == SCREE_ERROR_NOT_FOUND) {
      rc = write_winner(c, &theirs, theirs.cubin_hash, NULL);
      n_add++;
    } else if (st == SCREE_OK) {
      int changed = 0;
      if (theirs.median_us < mine.median_us) {
        rc = write_winner(c, &theirs, theirs.cubin_hash, &changed);
        n_rep += changed;
      }
      if (strcmp(mine.config, theirs.config) != 0) {
        n_conf++;
        if (conflict_fn) {
          scree__centry t = theirs;
          t.cubin = NULL;
          t.cubin_size = theirs.cubin_size;
          conflict_fn(user, &mine, &t);
        }
      }
    }
    scree__centry_free(&theirs);
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
  sqlite3_finalize(s);
  s = NULL;
  if (!(bs = stmt(c, ST_BAD_MERGE, &rc))) {
    st = status_of(rc);
    goto fail;
  }
  rc = sqlite3_prepare_v2(src->db, "SELECT " BCOLS " FROM bad_configs", -1,
                          &s, NULL);
  while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    for (int i = 0; i < 10; i++) sqlite3_bind_value(bs, i + 1,
                                                    sqlite3_column_value(s, i));
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
  if ((rc = txn_commit(c)) != SQLITE_OK) {
    st = status_of(rc);
    put_why(why, why_size, "%s", c->err);
    goto out;
  }
  if (added) *added = n_add;
  if (replaced) *replaced = n_rep;
  if (conflicts) *conflicts = n_conf;
  if (n_skip)
    put_why(why, why_size,
            "skipped %d winner(s) of %s whose cubin failed its hash check",
            n_skip, src_path);
  st = SCREE_OK;
  goto out;
fail:
  txn_rollback(c);
  put_why(why, why_size, "merge failed, nothing merged: %s", c->err);
  if (st == SCREE_OK) st = SCREE_ERROR_CACHE;
out:
  sqlite3_finalize(s);
  release(c);
  scree__cache_close(src);
  return st;
}

scree_status scree__cache_export(scree__cache *c, const char *dst_path,
                                 const char *arch, const char *op,
                                 int *exported, char *why, size_t why_size) {
  if (exported) *exported = 0;
  put_why(why, why_size, "%s", "");
  if (!c || !dst_path || !*dst_path) return SCREE_ERROR_INVALID_ARGUMENT;
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

  int n = 0, n_skip = 0;
  hold(c);
  sqlite3_stmt *s = NULL;
  int rc = txn_begin(dst);
  if (rc != SQLITE_OK) {
    put_why(why, why_size, "export: %s", dst->err);
    st = status_of(rc);
  } else if ((rc = sqlite3_prepare_v2(c->db,
                                      "SELECT " WCOLS ", cubin FROM winners"
                                      FILTER WORDER,
                                      -1, &s, NULL)) != SQLITE_OK) {
    put_why(why, why_size, "export: reading %s: %s", c->path,
            sqlite3_errmsg(c->db));
    st = status_of(rc);
  } else {
    bind_filter(s, 1, arch);
    bind_filter(s, 2, op);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      scree__centry e;
      row_to_entry(s, &e);
      if ((st = load_cubin(s, 16, &e)) != SCREE_OK) break;
      if (!e.cubin_ok || !entry_valid(&e)) {
        n_skip++;
        scree__centry_free(&e);
        continue;
      }
      int w = write_winner(dst, &e, e.cubin_hash, NULL);
      scree__centry_free(&e);
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
  sqlite3_finalize(s);
  release(c);
  txn_rollback(dst);
  scree__cache_close(dst);
  if (st != SCREE_OK) {
    unlink(dst_path);
    return st;
  }
  if (exported) *exported = n;
  if (n_skip)
    put_why(why, why_size,
            "left out %d winner(s) whose cubin failed its hash check",
            n_skip);
  return SCREE_OK;
}

