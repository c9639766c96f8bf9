/* cache_open.c - opening a cache file: validation, schema creation, recovery
 * of corrupt files (moved aside), closing, integrity checks. docs/cache.md describes
 * the file format. */
#include "store/cache_internal.h"

#include <limits.h>

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */


/* mkdir -p of the directory part of path, new directories mode 0700. */
static int make_parents(const char *path, char *why, size_t why_size) {
  char *p = strdup(path);
  if (!p) {
    put_why(why, why_size, "out of memory");
    return -1;
  }
  char *slash = strrchr(p, '/');
  int rc = 0;
  if (slash && slash != p) {
    *slash = 0;
    for (char *s = p + 1;; s++) {
      if (*s != '/' && *s) continue;
      char keep = *s;
      *s = 0;
      if (mkdir(p, 0700) != 0 && errno != EEXIST) {
        put_why(why, why_size, "cannot create directory %s: %s", p,
                strerror(errno));
        rc = -1;
        break;
      }
      *s = keep;
      if (!keep) break;
    }
    struct stat sb;
    if (!rc && (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
      put_why(why, why_size, "%s is not a directory", p);
      rc = -1;
    }
  }
  free(p);
  return rc;
}

/* Runs a one-value query (a PRAGMA or a count) and returns its integer. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      *out = sqlite3_column_int64(s, 0);
      rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
      *out = 0;
      rc = SQLITE_OK;
    }
  }
  if (rc != SQLITE_OK) rc = sqlite3_errcode(db) ? sqlite3_errcode(db) : rc;
  sqlite3_finalize(s);
  return rc;
}

static int exec_retry(sqlite3 *db, const char *sql) {
  int64_t deadline = now_ms() + SCREE__CACHE_BUSY_MS;
  int nap = 1;
  for (;;) {
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK || !is_busy(rc) || now_ms() >= deadline) return rc;
    nap_ms(nap);
    if (nap < 64) nap *= 2;
  }
}

/* Creates the schema in a fresh file; *created = 1 if this call created it.
 * Another process may be doing the same right now: the check is repeated
 * under the write lock, and where the file is no longer empty it is left as
 * it is (*created = 0). */
static int init_schema(sqlite3 *db, int *created, char *why, size_t why_size) {
  *created = 0;
  int rc = exec_retry(db, "BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) goto fail;
  int64_t uv = 0, ntab = 0;
  if ((rc = query_int(db, "PRAGMA user_version", &uv)) != SQLITE_OK ||
      (rc = query_int(db, "SELECT count(*) FROM sqlite_master", &ntab)) !=
          SQLITE_OK)
    goto fail;
  const int fresh = uv == 0 && ntab == 0;
  if (fresh) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT INTO meta(key, value) VALUES('created_by', '%s'),"
             " ('created_at', '%lld'); PRAGMA user_version = %d;",
             SCREE_VERSION_STRING, (long long)now_s(), SCREE__CACHE_SCHEMA);
    if ((rc = sqlite3_exec(db, SCHEMA_SQL, NULL, NULL, NULL)) != SQLITE_OK ||
        (rc = sqlite3_exec(db, sql, NULL, NULL, NULL)) != SQLITE_OK)
      goto fail;
  }
  int64_t deadline = now_ms() + SCREE__CACHE_BUSY_MS;
  while ((rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK &&
         is_busy(rc) && now_ms() < deadline)
    nap_ms(5);
  if (rc != SQLITE_OK) goto fail;
  *created = fresh;
  return SQLITE_OK;
fail:
  put_why(why, why_size, "cannot create the schema: %s", sqlite3_errmsg(db));
  if (!sqlite3_get_autocommit(db))
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  return rc ? rc : SQLITE_ERROR;
}

/* sqlite3_open_v2 of path with scree's settings: read-only or read-write
 * (creating), and with immutable = 1 as an immutable file (a URI, so the
 * path is percent-encoded where a URI needs it). SQLite as Debian builds it
 * reads any name that starts with "file:" as a URI, whatever the flags: such
 * a relative name is given as "./file:...", so that the file opened is the
 * one named, never one that a URI's path or parameters pick. An SQLite code;
 * *db may be set even on failure. */
static int open_handle(const char *path, int readonly, int immutable, sqlite3 **db) {
  *db = NULL;
  const int flags = SQLITE_OPEN_FULLMUTEX |
                    (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const size_t n = strlen(path);
  const char *dot = strncmp(path, "file:", 5) ? "" : "./";
  char *name = malloc(3 * n + 32);
  if (!name) return SQLITE_NOMEM;
  int rc;
  if (!immutable) {
    sprintf(name, "%s%s", dot, path);
    rc = sqlite3_open_v2(name, db, flags, NULL);
  } else {
    char *o = name + sprintf(name, "file:%s", dot);
    for (size_t i = 0; i < n; i++) {
      const unsigned char ch = (unsigned char)path[i];
      if (ch == '%' || ch == '?' || ch == '#' || ch < 0x20 || ch >= 0x7f)
        o += sprintf(o, "%%%02X", ch);
      else
        *o++ = (char)ch;
    }
    strcpy(o, "?immutable=1");
    rc = sqlite3_open_v2(name, db, flags | SQLITE_OPEN_URI, NULL);
  }
  free(name);
  if (rc != SQLITE_OK) return rc;
  sqlite3_extended_result_codes(*db, 1);
  sqlite3_busy_timeout(*db, SCREE__CACHE_BUSY_MS);
  /* No value longer than this is ever materialised from the file. */
  sqlite3_limit(*db, SQLITE_LIMIT_LENGTH, SCREE__CACHE_MAX_VALUE);
  /* The file's schema is not trusted either: functions with side effects
   * do not run from its views, triggers or defaults, and the schema cannot
   * be written around SQLite's own checks (docs/security.md). */
  sqlite3_db_config(*db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);
  sqlite3_db_config(*db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
  return SQLITE_OK;
}

/* 1 if path's -wal file is absent or empty, 0 if it holds something, -1 if
 * that cannot be told. */
static int wal_is_empty(const char *path) {
  const size_t n = strlen(path) + 5;
  char *wal = malloc(n);
  if (!wal) return -1;
  snprintf(wal, n, "%s-wal", path);
  struct stat sb;
  const int r = stat(wal, &sb) == 0 ? sb.st_size == 0 : errno == ENOENT ? 1 : -1;
  free(wal);
  return r;
}

/* Checks that db holds the four tables, with every column and a rowid
 * (VALIDATE_SQL): 0, or -1 with the reason and *res set. */
static int check_tables(sqlite3 *db, const char *path, open_result *res, char *why,
                        size_t why_size) {
  int64_t ntables = 0;
  const int rc = query_int(db, VALIDATE_SQL, &ntables);
  if (rc == SQLITE_OK && ntables == 4) return 0;
  put_why(why, why_size, "%s is not a valid scree cache: %s", path,
          rc != SQLITE_OK ? sqlite3_errmsg(db) : "winners, bad_configs, misses and meta must"
                                                 " be tables");
  *res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
  return -1;
}

/* Opens and validates path. OPEN_CORRUPT means the file is not a readable
 * SQLite database; OPEN_FAIL any other failure (a directory in its place
 * included), with *st set. */
open_result open_db(const char *path, int readonly, int wal,
                           sqlite3 **out, scree_status *st, char *why,
                           size_t why_size) {
  *out = NULL;
  *st = SCREE_ERROR_CACHE;
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (S_ISDIR(sb.st_mode)) {
      put_why(why, why_size, "%s is a directory, not a cache file", path);
      return OPEN_FAIL;
    }
    if (!S_ISREG(sb.st_mode)) {
      put_why(why, why_size, "%s is not a regular file", path);
      return OPEN_FAIL;
    }
  } else if (readonly && errno == ENOENT) {
    put_why(why, why_size, "no cache at %s", path);
    *st = SCREE_ERROR_NOT_FOUND;
    return OPEN_FAIL;
  } else if (errno != ENOENT) {
    /* Unreachable (a directory that cannot be searched, a symlink loop, a
     * path through a file) is not the same as absent. */
    put_why(why, why_size, "cannot open %s: %s", path, strerror(errno));
    return OPEN_FAIL;
  }

  sqlite3 *db = NULL;
  open_result res = OPEN_FAIL;
  int rc = SQLITE_OK;
  int64_t uv = 0, ntab = 0;
  for (int immutable = 0;; immutable = 1) {
    rc = open_handle(path, readonly, immutable, &db);
    if (rc != SQLITE_OK) {
      put_why(why, why_size, "cannot open %s: %s", path,
              db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
      if (prim(rc) == SQLITE_NOMEM) *st = SCREE_ERROR_OUT_OF_MEMORY;
      res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
      goto fail;
    }
    if (!readonly && sqlite3_db_readonly(db, "main") == 1) {
      put_why(why, why_size, "%s is not writable", path);
      goto fail;
    }

    /* The first read, of the header only: a file that is not SQLite fails
     * here with SQLITE_NOTADB, one shorter than its header says with
     * SQLITE_CORRUPT. The version is checked before the schema is parsed,
     * so that a newer scree's file is refused, never taken for corrupt.
     * Both reads share one read transaction: another process may be
     * creating the schema right now, and both must come from the same
     * snapshot. */
    if ((rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL)) == SQLITE_OK &&
        (rc = query_int(db, "PRAGMA user_version", &uv)) == SQLITE_OK)
      break;
    /* A WAL-mode file in a directory this process cannot write: SQLite
     * cannot create its -shm. With no -wal (or an empty one) the file
     * holds every committed change, and nobody can write it without
     * creating those files here, so it is read as immutable. */
    if (readonly && !immutable && (prim(rc) == SQLITE_READONLY || prim(rc) == SQLITE_CANTOPEN)) {
      const int wal_state = wal_is_empty(path);
      if (wal_state == 1) {
        sqlite3_close_v2(db);
        db = NULL;
        continue;
      }
      if (wal_state == 0) {
        put_why(why, why_size,
                "cannot read %s: it is in WAL mode, its directory is not writable, and its"
                " -wal file holds changes not yet in it (open it once where it is writable,"
                " or read an exported copy)", path);
        goto fail;
      }
    }
    put_why(why, why_size, "cannot read %s: %s", path, sqlite3_errmsg(db));
    res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
    goto fail;
  }
  if (uv != 0 && uv != SCREE__CACHE_SCHEMA) {
    put_why(why, why_size,
            "%s has cache schema version %lld but this scree (%s) reads "
            "version %d%s",
            path, (long long)uv, SCREE_VERSION_STRING, SCREE__CACHE_SCHEMA,
            uv > SCREE__CACHE_SCHEMA ? "; it was written by a newer scree"
            : uv < 0 ? "; no scree writes a negative version: it is not a scree cache, or a"
                       " damaged one"
                     : "; it was written by an older scree");
    goto fail;
  }
  if ((rc = query_int(db, "SELECT count(*) FROM sqlite_master", &ntab)) != SQLITE_OK) {
    put_why(why, why_size, "cannot read %s: %s", path, sqlite3_errmsg(db));
    res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
    goto fail;
  }
  /* A file of this version: its tables are checked in the same read
   * transaction (the same snapshot). */
  if (uv == SCREE__CACHE_SCHEMA && check_tables(db, path, &res, why, why_size) != 0) goto fail;
  if ((rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
    put_why(why, why_size, "cannot read %s: %s", path, sqlite3_errmsg(db));
    res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
    goto fail;
  }

  if (uv == 0 && ntab == 0) {
    if (readonly) {
      /* Nothing is cached in it (yet: another process may be creating it
       * right now). */
      put_why(why, why_size, "%s is empty: nothing is cached in it yet", path);
      *st = SCREE_ERROR_NOT_FOUND;
      goto fail;
    }
    char w2[256] = "";
    int created = 0;
    if ((rc = init_schema(db, &created, w2, sizeof w2)) != SQLITE_OK) {
      put_why(why, why_size, "%s: %s", path, w2);
      res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
      goto fail;
    }
    /* Another process created it first: checked as any other file. A schema
     * this call created is what SCHEMA_SQL says. */
    if (!created) {
      if ((rc = query_int(db, "PRAGMA user_version", &uv)) != SQLITE_OK) {
        put_why(why, why_size, "cannot read %s: %s", path, sqlite3_errmsg(db));
        goto fail;
      }
      if (uv != SCREE__CACHE_SCHEMA) {
        put_why(why, why_size, "%s: schema version %lld after creating it", path,
                (long long)uv);
        goto fail;
      }
      if (check_tables(db, path, &res, why, why_size) != 0) goto fail;
    }
  } else if (uv == 0) {
    put_why(why, why_size,
            "%s is an SQLite database but not a scree cache (user_version 0,"
            " %lld schema objects); refusing to use it",
            path, (long long)ntab);
    goto fail;
  }
  /* Only now that the file is known to be a scree cache is it changed. */
  if (readonly) {
    sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
  } else if (wal) {
    if ((rc = exec_retry(db, "PRAGMA journal_mode = WAL")) != SQLITE_OK ||
        (rc = sqlite3_exec(db, "PRAGMA synchronous = NORMAL", NULL, NULL,
                           NULL)) != SQLITE_OK) {
      put_why(why, why_size, "cannot set WAL mode on %s: %s", path,
              sqlite3_errmsg(db));
      res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
      goto fail;
    }
  }
  *out = db;
  *st = SCREE_OK;
  return OPEN_OK;
fail:
  sqlite3_close_v2(db);
  return res;
}

/* Renames a damaged cache to <path>.corrupt-<time>. Its -wal and -journal
 * go first (to <aside>-wal, <aside>-journal) and its -shm is removed, so
 * that nothing of the old file is replayed into the fresh one; the main file
 * goes last, so that no journal of a fresh cache that another process
 * creates meanwhile is touched. */
static int move_aside(const char *path, char *aside, size_t aside_size) {
  long long t = (long long)now_s();
  struct stat sb;
  snprintf(aside, aside_size, "%s.corrupt-%lld", path, t);
  for (int n = 2; lstat(aside, &sb) == 0 && n < 1000; n++)
    snprintf(aside, aside_size, "%s.corrupt-%lld-%d", path, t, n);
  static const char *const sfx[] = {"-wal", "-journal"};
  size_t pl = strlen(path) + 16, al = strlen(aside) + 16;
  char *from = malloc(pl), *to = malloc(al);
  if (from && to) {
    for (int i = 0; i < 2; i++) {
      snprintf(from, pl, "%s%s", path, sfx[i]);
      snprintf(to, al, "%s%s", aside, sfx[i]);
      if (rename(from, to) != 0 && errno != ENOENT) unlink(from);
    }
    snprintf(from, pl, "%s-shm", path);
    unlink(from);
  }
  free(from);
  free(to);
  return rename(path, aside);
}

/* 1 if the file at path begins as a scree cache does: an SQLite header
 * whose user_version (big-endian, at offset 60) is this scree's schema
 * version. Only such a file, damaged past that header, is moved aside: a
 * file of anything else is not scree's to move. */
static int has_scree_header(const char *path) {
  unsigned char h[100];
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, h, sizeof h);
  close(fd);
  if (n != (ssize_t)sizeof h || memcmp(h, "SQLite format 3", 16)) return 0;
  const uint32_t uv = (uint32_t)h[60] << 24 | (uint32_t)h[61] << 16 | (uint32_t)h[62] << 8 | h[63];
  return uv == SCREE__CACHE_SCHEMA;
}

/* Serialises recoveries of one cache between processes: an exclusive flock
 * on the directory that holds it. Best effort: -1 if it cannot be had. */
static int lock_dir(const char *path) {
  char *p = strdup(path);
  if (!p) return -1;
  char *slash = strrchr(p, '/');
  const char *dir = ".";
  if (slash == p) dir = "/";
  else if (slash) {
    *slash = 0;
    dir = p;
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(p);
  if (fd < 0) return -1;
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

static void unlock_dir(int fd) {
  if (fd < 0) return;
  flock(fd, LOCK_UN);
  close(fd);
}

scree_status wrap(sqlite3 *db, const char *path, int readonly,
                         scree__cache **out) {
  scree__cache *c = calloc(1, sizeof *c);
  char *p = strdup(path);
  if (!c || !p) {
    free(c);
    free(p);
    sqlite3_close_v2(db);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&c->lock, &a);
  pthread_mutexattr_destroy(&a);
  c->db = db;
  c->readonly = readonly;
  c->path = p;
  *out = c;
  return SCREE_OK;
}

scree_status scree__cache_open(const char *path, int readonly,
                               scree__cache **out, int *recovered, char *why,
                               size_t why_size) {
  if (recovered) *recovered = 0;
  put_why(why, why_size, "%s", "");
  if (out) *out = NULL;
  if (!path || !*path || !out) {
    put_why(why, why_size, "no cache path or output handle");
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  if (strlen(path) >= PATH_MAX) {
    put_why(why, why_size, "the cache path is %zu bytes, longer than the %d a path may have",
            strlen(path), PATH_MAX - 1);
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  if (!readonly && make_parents(path, why, why_size) != 0)
    return SCREE_ERROR_CACHE;

  sqlite3 *db = NULL;
  scree_status st;
  char reason[1024] = "";
  open_result r = open_db(path, readonly, 1, &db, &st, reason, sizeof reason);
  if (r != OPEN_OK && st != SCREE_ERROR_NOT_FOUND) {
    /* Another process may be recovering this cache right now: its renames
     * and unlinks fail a read that overlaps them (an I/O error on the -shm
     * or -wal it is moving). Recoveries hold the directory lock, so the open
     * is tried once more while holding it; someone may also have recovered
     * the cache while we waited. */
    int dfd = lock_dir(path);
    r = open_db(path, readonly, 1, &db, &st, reason, sizeof reason);
    if (r == OPEN_CORRUPT && !readonly && !has_scree_header(path)) {
      put_why(why, why_size,
              "%s; it is not a damaged scree cache (no scree cache header), so it is left as it"
              " is: move it away or give another path", reason);
      unlock_dir(dfd);
      return SCREE_ERROR_CACHE;
    }
    if (r == OPEN_CORRUPT && !readonly) {
      char aside[4200];
      if (move_aside(path, aside, sizeof aside) != 0) {
        put_why(why, why_size,
                "%s; cannot move it aside to %s: %s", reason, aside,
                strerror(errno));
        unlock_dir(dfd);
        return SCREE_ERROR_CACHE;
      }
      char r2[1024] = "";
      r = open_db(path, 0, 1, &db, &st, r2, sizeof r2);
      if (r == OPEN_OK) {
        if (recovered) *recovered = 1;
        put_why(why, why_size,
                "cache unreadable (%s); moved it aside to %s and started a "
                "fresh cache",
                reason, aside);
      } else {
        put_why(why, why_size,
                "cache unreadable (%s); moved it aside to %s, but a fresh "
                "cache could not be created: %s",
                reason, aside, r2);
        unlock_dir(dfd);
        return st;
      }
    } else if (r != OPEN_OK) {
      put_why(why, why_size, "%s", reason);
    }
    unlock_dir(dfd);
    if (r != OPEN_OK) return st;
  } else if (r != OPEN_OK) {
    put_why(why, why_size, "%s", reason);
    return st;
  }
  return wrap(db, path, readonly, out);
}

scree_status scree__cache_open_trusted(const char *path, int readonly, int strict,
                                       scree__cache **out, int *recovered, char *why,
                                       size_t why_size) {
  if (!strict || !path || !*path || !out || strlen(path) >= PATH_MAX)
    return scree__cache_open(path, readonly, out, recovered, why, why_size);
  if (recovered) *recovered = 0;
  *out = NULL;
  if (!readonly && make_parents(path, why, why_size) != 0) return SCREE_ERROR_CACHE;
  char real[PATH_MAX];
  scree_status st = scree__cache_trust_resolve(path, real, sizeof real, why, why_size);
  if (st == SCREE_OK) st = scree__cache_open(real, readonly, out, recovered, why, why_size);
  if (st != SCREE_OK) return st;
  char *p = strdup(path);
  if (!p) {
    scree__cache_close(*out);
    *out = NULL;
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  free((*out)->path);
  (*out)->path = p;
  return SCREE_OK;
}

void scree__cache_close(scree__cache *c) {
  if (!c) return;
  for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(c->st[i]);
  sqlite3_close_v2(c->db);
  pthread_mutex_destroy(&c->lock);
  free(c->path);
  free(c);
}

const char *scree__cache_path(const scree__cache *c) {
  return c ? c->path : NULL;
}

int scree__cache_readonly(const scree__cache *c) {
  return c ? c->readonly : 0;
}

void scree__cache_last_error(scree__cache *c, char *buf, size_t size) {
  if (!buf || !size) return;
  if (!c) {
    buf[0] = 0;
    return;
  }
  hold(c);
  copy_str(buf, size, c->err);
  release(c);
}

scree_status scree__cache_check(scree__cache *c, int full, char *why,
                                size_t why_size) {
  put_why(why, why_size, "%s", "");
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  hold(c);
  sqlite3_stmt *s = NULL;
  scree_status st = SCREE_OK;
  int rc = sqlite3_prepare_v2(
      c->db, full ? "PRAGMA integrity_check" : "PRAGMA quick_check", -1, &s,
      NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(s, 0);
    if (!t || strcmp(t, "ok")) {
      put_why(why, why_size, "%s: %s", c->path, t ? t : "(no result)");
      st = SCREE_ERROR_CACHE;
    }
  } else {
    put_why(why, why_size, "%s: %s", c->path, sqlite3_errmsg(c->db));
    st = status_of(rc);
  }
  sqlite3_finalize(s);
  release(c);
  return st;
}

