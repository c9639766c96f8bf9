/* cache.c - the SQLite tuning cache: winners, bad configs, misses, the
 * user/shipped stack. docs/cache.md describes the file format. */
#include "cache.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <pwd.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sha256.h"

/* ------------------------------------------------------------------------ */
/* Schema and statements                                                     */
/* ------------------------------------------------------------------------ */

static const char SCHEMA_SQL[] =
    "CREATE TABLE meta("
    " key TEXT PRIMARY KEY NOT NULL,"
    " value TEXT NOT NULL);"
    "CREATE TABLE winners("
    " op TEXT NOT NULL, bucket TEXT NOT NULL, dtype TEXT NOT NULL,"
    " causal INTEGER NOT NULL, arch TEXT NOT NULL, src_hash TEXT NOT NULL,"
    " config TEXT NOT NULL, median_us REAL NOT NULL, spread_us REAL NOT NULL,"
    " device_name TEXT NOT NULL, sm_count INTEGER NOT NULL,"
    " driver_version INTEGER NOT NULL, nvrtc_version INTEGER NOT NULL,"
    " scree_version TEXT NOT NULL, created INTEGER NOT NULL,"
    " cubin_hash TEXT NOT NULL, cubin BLOB NOT NULL,"
    " PRIMARY KEY(op, bucket, dtype, causal, arch, src_hash));"
    "CREATE TABLE bad_configs("
    " op TEXT NOT NULL, dtype TEXT NOT NULL, causal INTEGER NOT NULL,"
    " arch TEXT NOT NULL, src_hash TEXT NOT NULL, config TEXT NOT NULL,"
    " nvrtc_version INTEGER NOT NULL, bucket TEXT NOT NULL,"
    " reason TEXT NOT NULL, created INTEGER NOT NULL,"
    " PRIMARY KEY(op, dtype, causal, arch, src_hash, config, nvrtc_version,"
    " bucket));"
    "CREATE TABLE misses("
    " op TEXT NOT NULL, bucket TEXT NOT NULL, dtype TEXT NOT NULL,"
    " causal INTEGER NOT NULL, arch TEXT NOT NULL, example TEXT NOT NULL,"
    " count INTEGER NOT NULL, first_seen INTEGER NOT NULL,"
    " last_seen INTEGER NOT NULL,"
    " PRIMARY KEY(op, bucket, dtype, causal, arch));";

/* Winner columns 0..15; column 16 is the cubin (or its length). */
#define WCOLS                                                              \
  "op, bucket, dtype, causal, arch, src_hash, config, median_us,"          \
  " spread_us, device_name, sm_count, driver_version, nvrtc_version,"      \
  " scree_version, created, cubin_hash"
#define WKEY                                                               \
  "op = ?1 AND bucket = ?2 AND dtype = ?3 AND causal = ?4 AND arch = ?5"   \
  " AND src_hash = ?6"
#define WORDER " ORDER BY op, arch, bucket, dtype, causal, src_hash"
#define FILTER " WHERE (?1 IS NULL OR arch = ?1) AND (?2 IS NULL OR op = ?2)"
#define BCOLS                                                              \
  "op, dtype, causal, arch, src_hash, config, nvrtc_version, bucket,"      \
  " reason, created"
#define MCOLS                                                              \
  "op, bucket, dtype, causal, arch, example, count, first_seen, last_seen"

enum {
  ST_GET,
  ST_GET_META,
  ST_PUT,
  ST_BAD_PUT,
  ST_BAD_MERGE,
  ST_BAD_GET,
  ST_MISS_PUT,
  ST_MISS_DEL,
  ST_COUNT
};

static const char *const STMT_SQL[ST_COUNT] = {
    [ST_GET] = "SELECT " WCOLS ", cubin FROM winners WHERE " WKEY,
    [ST_GET_META] = "SELECT " WCOLS ", length(cubin) FROM winners WHERE " WKEY,
    /* Keep-the-faster upsert: an existing row is overwritten only by a
     * strictly faster one; sqlite3_changes() says whether it was. */
    [ST_PUT] = "INSERT INTO winners(" WCOLS ", cubin) VALUES(?1, ?2, ?3, ?4,"
               " ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
               " ON CONFLICT(op, bucket, dtype, causal, arch, src_hash)"
               " DO UPDATE SET config = excluded.config,"
               " median_us = excluded.median_us,"
               " spread_us = excluded.spread_us,"
               " device_name = excluded.device_name,"
               " sm_count = excluded.sm_count,"
               " driver_version = excluded.driver_version,"
               " nvrtc_version = excluded.nvrtc_version,"
               " scree_version = excluded.scree_version,"
               " created = excluded.created,"
               " cubin_hash = excluded.cubin_hash, cubin = excluded.cubin"
               " WHERE excluded.median_us < winners.median_us",
    [ST_BAD_PUT] = "INSERT INTO bad_configs(" BCOLS ") VALUES(?1, ?2, ?3,"
                   " ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
                   " ON CONFLICT(op, dtype, causal, arch, src_hash, config,"
                   " nvrtc_version, bucket) DO UPDATE SET"
                   " reason = excluded.reason, created = excluded.created",
    [ST_BAD_MERGE] = "INSERT OR IGNORE INTO bad_configs(" BCOLS ")"
                     " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [ST_BAD_GET] = "SELECT reason FROM bad_configs WHERE op = ?1 AND"
                   " dtype = ?2 AND causal = ?3 AND arch = ?4 AND"
                   " src_hash = ?5 AND config = ?6 AND nvrtc_version = ?7"
                   " AND (bucket = ?8 OR bucket = '*')"
                   " ORDER BY bucket = '*' LIMIT 1",
    [ST_MISS_PUT] = "INSERT INTO misses(" MCOLS ") VALUES(?1, ?2, ?3, ?4,"
                    " ?5, ?6, 1, ?7, ?7)"
                    " ON CONFLICT(op, bucket, dtype, causal, arch) DO UPDATE"
                    " SET count = count + 1,"
                    " last_seen = max(last_seen, excluded.last_seen)",
    [ST_MISS_DEL] = ("DELETE FROM misses WHERE op = ?1 AND bucket = ?2 AND"
                     " dtype = ?3 AND causal = ?4 AND arch = ?5"),
};

/* Statements that must prepare on a valid version-1 file: they name every
 * column, so a file missing one is refused at open. */
static const char *const PROBE_SQL[] = {
    "SELECT " WCOLS ", cubin FROM winners LIMIT 0",
    "SELECT " BCOLS " FROM bad_configs LIMIT 0",
    "SELECT " MCOLS " FROM misses LIMIT 0",
    "SELECT key, value FROM meta LIMIT 0",
};

struct scree__cache {
  sqlite3 *db;
  int readonly;
  char *path;
  pthread_mutex_t lock; /* recursive: guards db, st[] and err */
  sqlite3_stmt *st[ST_COUNT];
  char err[512];
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

#define put_why scree__set_why

static void set_err(scree__cache *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_err(scree__cache *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
}

/* Appends one line to a warning buffer: lines are separated by '\n', with
 * no newline after the last, so the whole buffer can go to a log sink. */
static void append_line(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append_line(char *buf, size_t size, const char *fmt, ...) {
  if (!buf || !size) return;
  size_t n = strnlen(buf, size);
  if (n >= size) n = size - 1; /* not terminated: start over at the end */
  buf[n] = 0;
  if (n) {
    if (n + 1 >= size) return;
    buf[n++] = '\n';
    buf[n] = 0;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, size - n, fmt, ap);
  va_end(ap);
}

static void copy_str(char *dst, size_t size, const char *src) {
  if (!size) return;
  size_t n = src ? strlen(src) : 0;
  if (n >= size) n = size - 1;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

static void copy_col(char *dst, size_t size, sqlite3_stmt *s, int col) {
  copy_str(dst, size, (const char *)sqlite3_column_text(s, col));
}

/* Binds a fixed-size char field (maybe not NUL-terminated) as text. */
static int bind_field(sqlite3_stmt *s, int i, const char *str, size_t cap) {
  if (!str) return sqlite3_bind_text(s, i, "", 0, SQLITE_TRANSIENT);
  return sqlite3_bind_text(s, i, str, (int)strnlen(str, cap),
                           SQLITE_TRANSIENT);
}

/* NULL for "match everything". */
static int bind_filter(sqlite3_stmt *s, int i, const char *v) {
  if (!v || !*v) return sqlite3_bind_null(s, i);
  return sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
}

static int64_t now_s(void) { return (int64_t)time(NULL); }

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

static int prim(int rc) { return rc & 0xff; }
static int is_busy(int rc) {
  return prim(rc) == SQLITE_BUSY || prim(rc) == SQLITE_LOCKED;
}
static int is_corrupt(int rc) {
  return prim(rc) == SQLITE_NOTADB || prim(rc) == SQLITE_CORRUPT;
}
static scree_status status_of(int rc) {
  return prim(rc) == SQLITE_NOMEM ? SCREE_ERROR_OUT_OF_MEMORY
                                  : SCREE_ERROR_CACHE;
}

static void lock(scree__cache *c) { pthread_mutex_lock(&c->lock); }
static void unlock(scree__cache *c) { pthread_mutex_unlock(&c->lock); }

static int key_valid(const scree__ckey *k) {
  return k && k->op[0] && k->arch[0] && (k->causal == 0 || k->causal == 1);
}

/* Grows a malloc'd array to hold at least n + 1 elements. */
static int grow(void **p, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 64;
  void *q = realloc(*p, nc * elem);
  if (!q) return -1;
  *p = q;
  *cap = nc;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Statements and transactions                                               */
/* ------------------------------------------------------------------------ */

static sqlite3_stmt *stmt(scree__cache *c, int id, int *rc_out) {
  int rc = SQLITE_OK;
  if (!c->st[id]) {
    rc = sqlite3_prepare_v3(c->db, STMT_SQL[id], -1, SQLITE_PREPARE_PERSISTENT,
                            &c->st[id], NULL);
    if (rc != SQLITE_OK) {
      set_err(c, "%s: preparing a statement: %s", c->path,
              sqlite3_errmsg(c->db));
      sqlite3_finalize(c->st[id]);
      c->st[id] = NULL;
    }
  }
  if (rc_out) *rc_out = rc;
  return c->st[id];
}

static void done(sqlite3_stmt *s) {
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
}

/* BEGIN IMMEDIATE takes the write lock up front, so a transaction never has
 * to upgrade a read snapshot (which fails without waiting). SQLite's busy
 * handler waits up to the timeout; SQLITE_BUSY it returns without waiting
 * (e.g. during WAL recovery by another process) is retried here. */
static int txn_begin(scree__cache *c) {
  int64_t deadline = now_ms() + SCREE__CACHE_BUSY_MS;
  int nap = 1;
  for (;;) {
    int rc = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) return rc;
    if (!is_busy(rc) || now_ms() >= deadline) {
      set_err(c, "%s: cannot start a write transaction: %s", c->path,
              sqlite3_errmsg(c->db));
      return rc;
    }
    nap_ms(nap);
    if (nap < 64) nap *= 2;
  }
}

static void txn_rollback(scree__cache *c) {
  if (!sqlite3_get_autocommit(c->db))
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

static int txn_commit(scree__cache *c) {
  int64_t deadline = now_ms() + SCREE__CACHE_BUSY_MS;
  int nap = 1;
  for (;;) {
    int rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_OK) return rc;
    if (!is_busy(rc) || now_ms() >= deadline) {
      set_err(c, "%s: commit failed: %s", c->path, sqlite3_errmsg(c->db));
      txn_rollback(c);
      return rc;
    }
    nap_ms(nap);
    if (nap < 64) nap *= 2;
  }
}

static int check_writable(scree__cache *c, const char *what) {
  if (!c->readonly) return 1;
  set_err(c, "%s: %s: the cache is open read-only", c->path, what);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum { OPEN_OK, OPEN_CORRUPT, OPEN_FAIL } open_result;

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

/* Creates the schema in a fresh file. Another process may be doing the same
 * right now: the check is repeated under the write lock. */
static int init_schema(sqlite3 *db, char *why, size_t why_size) {
  int rc = exec_retry(db, "BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) goto fail;
  int64_t uv = 0, ntab = 0;
  if ((rc = query_int(db, "PRAGMA user_version", &uv)) != SQLITE_OK ||
      (rc = query_int(db, "SELECT count(*) FROM sqlite_master", &ntab)) !=
          SQLITE_OK)
    goto fail;
  if (uv == 0 && ntab == 0) {
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
  return SQLITE_OK;
fail:
  put_why(why, why_size, "cannot create the schema: %s", sqlite3_errmsg(db));
  if (!sqlite3_get_autocommit(db))
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  return rc ? rc : SQLITE_ERROR;
}

/* Opens and validates path. OPEN_CORRUPT means the file (or a directory in
 * its place) is not a readable SQLite database; OPEN_FAIL any other failure,
 * with *st set. */
static open_result open_db(const char *path, int readonly, int wal,
                           sqlite3 **out, scree_status *st, char *why,
                           size_t why_size) {
  *out = NULL;
  *st = SCREE_ERROR_CACHE;
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (S_ISDIR(sb.st_mode)) {
      put_why(why, why_size, "%s is a directory", path);
      return OPEN_CORRUPT;
    }
    if (!S_ISREG(sb.st_mode)) {
      put_why(why, why_size, "%s is not a regular file", path);
      return OPEN_FAIL;
    }
  } else if (readonly || errno != ENOENT) {
    put_why(why, why_size, "cannot open %s: %s", path, strerror(errno));
    return OPEN_FAIL;
  }

  sqlite3 *db = NULL;
  int flags = SQLITE_OPEN_FULLMUTEX |
              (readonly ? SQLITE_OPEN_READONLY
                        : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  int rc = sqlite3_open_v2(path, &db, flags, NULL);
  open_result res = OPEN_FAIL;
  if (rc != SQLITE_OK) {
    put_why(why, why_size, "cannot open %s: %s", path,
            db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    if (prim(rc) == SQLITE_NOMEM) *st = SCREE_ERROR_OUT_OF_MEMORY;
    res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
    goto fail;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, SCREE__CACHE_BUSY_MS);
  if (!readonly && sqlite3_db_readonly(db, "main") == 1) {
    put_why(why, why_size, "%s is not writable", path);
    goto fail;
  }

  /* The first read, of the header only: a file that is not SQLite fails
   * here with SQLITE_NOTADB, one shorter than its header says with
   * SQLITE_CORRUPT. The version is checked before the schema is parsed, so
   * that a newer scree's file is refused, never taken for corrupt. Both
   * reads share one read transaction: another process may be creating the
   * schema right now, and both must come from the same snapshot. */
  int64_t uv = 0, ntab = 0;
  if ((rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL)) != SQLITE_OK ||
      (rc = query_int(db, "PRAGMA user_version", &uv)) != SQLITE_OK) {
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
                                     : "; it was written by an older scree");
    goto fail;
  }
  if ((rc = query_int(db, "SELECT count(*) FROM sqlite_master", &ntab)) !=
          SQLITE_OK ||
      (rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
    put_why(why, why_size, "cannot read %s: %s", path, sqlite3_errmsg(db));
    res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
    goto fail;
  }

  if (uv == 0 && ntab == 0) {
    if (readonly) {
      put_why(why, why_size, "%s is empty, not a scree cache", path);
      goto fail;
    }
    char w2[256] = "";
    if ((rc = init_schema(db, w2, sizeof w2)) != SQLITE_OK) {
      put_why(why, why_size, "%s: %s", path, w2);
      res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
      goto fail;
    }
    if ((rc = query_int(db, "PRAGMA user_version", &uv)) != SQLITE_OK) {
      put_why(why, why_size, "cannot read %s: %s", path, sqlite3_errmsg(db));
      goto fail;
    }
  } else if (uv == 0) {
    put_why(why, why_size,
            "%s is an SQLite database but not a scree cache (user_version 0,"
            " %lld schema objects); refusing to use it",
            path, (long long)ntab);
    goto fail;
  }
  if (uv != SCREE__CACHE_SCHEMA) {
    put_why(why, why_size, "%s: schema version %lld after creating it", path,
            (long long)uv);
    goto fail;
  }
  for (size_t i = 0; i < sizeof PROBE_SQL / sizeof PROBE_SQL[0]; i++) {
    sqlite3_stmt *s = NULL;
    rc = sqlite3_prepare_v2(db, PROBE_SQL[i], -1, &s, NULL);
    sqlite3_finalize(s);
    if (rc != SQLITE_OK) {
      put_why(why, why_size, "%s is not a valid scree cache: %s", path,
              sqlite3_errmsg(db));
      res = is_corrupt(rc) ? OPEN_CORRUPT : OPEN_FAIL;
      goto fail;
    }
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

static scree_status wrap(sqlite3 *db, const char *path, int readonly,
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
  if (!readonly && make_parents(path, why, why_size) != 0)
    return SCREE_ERROR_CACHE;

  sqlite3 *db = NULL;
  scree_status st;
  char reason[1024] = "";
  open_result r = open_db(path, readonly, 1, &db, &st, reason, sizeof reason);
  if (r == OPEN_CORRUPT && !readonly) {
    int dfd = lock_dir(path);
    /* Someone may have recovered it while we waited for the lock. */
    r = open_db(path, 0, 1, &db, &st, reason, sizeof reason);
    if (r == OPEN_CORRUPT) {
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
  lock(c);
  copy_str(buf, size, c->err);
  unlock(c);
}

scree_status scree__cache_check(scree__cache *c, int full, char *why,
                                size_t why_size) {
  put_why(why, why_size, "%s", "");
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  lock(c);
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
  unlock(c);
  return st;
}

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
static void row_to_entry(sqlite3_stmt *s, scree__centry *e) {
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
static scree_status load_cubin(sqlite3_stmt *s, int col, scree__centry *e) {
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
static scree_status get_locked(scree__cache *c, const scree__ckey *k,
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
  lock(c);
  scree_status st = get_locked(c, k, out, 1);
  unlock(c);
  if (st != SCREE_OK) memset(out, 0, sizeof *out);
  return st;
}

/* Keep-the-faster write inside a transaction the caller holds. hash is the
 * cubin's sha256 hex. *changed = 1 if the row was inserted or replaced. */
static int write_winner(scree__cache *c, const scree__centry *e,
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

static int entry_valid(const scree__centry *e) {
  return e && key_valid(&e->key) && e->cubin && e->cubin_size > 0 &&
         e->cubin_size <= 0x7fffffff && isfinite(e->median_us) &&
         e->median_us >= 0;
}

scree_status scree__cache_put(scree__cache *c, const scree__centry *e,
                              int *replaced) {
  if (replaced) *replaced = 0;
  if (!c) return SCREE_ERROR_INVALID_ARGUMENT;
  if (!entry_valid(e)) {
    lock(c);
    set_err(c, "put: invalid entry (empty op/arch, causal not 0/1, no cubin"
               " or a median that is negative or not finite)");
    unlock(c);
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  char hash[65];
  scree__sha256_hex(e->cubin, e->cubin_size, hash);
  lock(c);
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
  unlock(c);
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
  lock(c);
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
  unlock(c);
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
  lock(c);
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
  unlock(c);
  return st;
}

int scree__cache_is_bad(scree__cache *c, const scree__ckey *k,
                        const char *config, int nvrtc_version,
                        char *reason_out, size_t reason_size) {
  if (reason_out && reason_size) reason_out[0] = 0;
  if (!c || !key_valid(k) || !config) return -1;
  lock(c);
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
  unlock(c);
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
  lock(c);
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
  unlock(c);
  return st;
}

scree_status scree__cache_delete_miss(scree__cache *c, const scree__ckey *k) {
  if (!c || !key_valid(k)) return SCREE_ERROR_INVALID_ARGUMENT;
  lock(c);
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
  unlock(c);
  return st;
}

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
  lock(c);
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
  unlock(c);
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
    lock(c);
    scree_status g = get_locked(c, &e->key, &full, 1);
    unlock(c);
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
  lock(c);
  if (!check_writable(c, "merge")) {
    put_why(why, why_size, "%s", c->err);
    unlock(c);
    return SCREE_ERROR_CACHE;
  }
  unlock(c);

  char w2[1024] = "";
  scree__cache *src = NULL;
  scree_status st = scree__cache_open(src_path, 1, &src, NULL, w2, sizeof w2);
  if (st != SCREE_OK) {
    put_why(why, why_size, "cannot merge: %s", w2);
    return st;
  }

  lock(c);
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
  unlock(c);
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
  lock(c);
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
  unlock(c);
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

/* ------------------------------------------------------------------------ */
/* Layering                                                                  */
/* ------------------------------------------------------------------------ */

scree_status scree__cache_default_path(char *buf, size_t size) {
  if (!buf || !size) return SCREE_ERROR_INVALID_ARGUMENT;
  buf[0] = 0;
  const char *base, *tail;
  const char *d = getenv("SCREE_CACHE_DIR");
  const char *x = getenv("XDG_CACHE_HOME");
  const char *h = getenv("HOME");
  char pwbuf[4096];
  if (d && *d) {
    base = d;
    tail = "/tune.db";
  } else if (x && x[0] == '/') {
    base = x;
    tail = "/scree/tune.db";
  } else {
    if (!h || !*h) {
      struct passwd pw, *res = NULL;
      if (getpwuid_r(getuid(), &pw, pwbuf, sizeof pwbuf, &res) == 0 && res &&
          res->pw_dir && res->pw_dir[0])
        h = res->pw_dir;
      else
        return SCREE_ERROR_NOT_FOUND;
    }
    base = h;
    tail = "/.cache/scree/tune.db";
  }
  size_t bl = strlen(base);
  while (bl > 1 && base[bl - 1] == '/') bl--;
  if (bl == 1 && base[0] == '/') bl = 0;
  int n = snprintf(buf, size, "%.*s%s", (int)bl, base, tail);
  if (n < 0 || (size_t)n >= size) {
    buf[0] = 0;
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  return SCREE_OK;
}

scree_status scree__cache_stack_open(scree__cache_stack *s,
                                     const char *user_path,
                                     const char *search_path, char *warn,
                                     size_t warn_size) {
  if (warn && warn_size) warn[0] = 0;
  if (!s) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(s, 0, sizeof *s);
  char dflt[4096], why[2048];
  const char *up = user_path;
  if (!up) {
    scree_status d = scree__cache_default_path(dflt, sizeof dflt);
    if (d == SCREE_OK) {
      up = dflt;
    } else {
      append_line(warn, warn_size,
                  "no user cache: cannot find a default path (%s: set "
                  "SCREE_CACHE_DIR or HOME); running without one",
                  scree_status_name(d));
    }
  }
  if (up) {
    int rec = 0;
    why[0] = 0;
    scree_status st = scree__cache_open(up, 0, &s->user, &rec, why,
                                        sizeof why);
    if (st == SCREE_ERROR_OUT_OF_MEMORY) return st;
    if (st != SCREE_OK)
      append_line(warn, warn_size,
                  "user cache %s unusable (%s); running without a user cache",
                  up, why);
    else if (rec)
      append_line(warn, warn_size, "user cache %s: %s", up, why);
  }

  const char *sp = search_path ? search_path : getenv("SCREE_CACHE_PATH");
  if (!sp) return SCREE_OK;
  char *list = strdup(sp);
  if (!list) {
    scree__cache_stack_close(s);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  int cap = 0;
  char *save = NULL;
  for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
    scree__cache *c = NULL;
    why[0] = 0;
    scree_status st = scree__cache_open(p, 1, &c, NULL, why, sizeof why);
    if (st != SCREE_OK) {
      append_line(warn, warn_size, "shipped cache %s skipped: %s", p, why);
      continue;
    }
    if (s->nshipped == cap) {
      int nc = cap ? cap * 2 : 4;
      scree__cache **q = realloc(s->shipped, (size_t)nc * sizeof *q);
      if (!q) {
        scree__cache_close(c);
        free(list);
        scree__cache_stack_close(s);
        return SCREE_ERROR_OUT_OF_MEMORY;
      }
      s->shipped = q;
      cap = nc;
    }
    s->shipped[s->nshipped++] = c;
  }
  free(list);
  return SCREE_OK;
}

void scree__cache_stack_close(scree__cache_stack *s) {
  if (!s) return;
  scree__cache_close(s->user);
  for (int i = 0; i < s->nshipped; i++) scree__cache_close(s->shipped[i]);
  free(s->shipped);
  memset(s, 0, sizeof *s);
}

/* 1 if c answered with a usable entry (left in out). */
static int level_get(scree__cache *c, const scree__ckey *k,
                     scree__centry *out) {
  if (!c) return 0;
  if (scree__cache_get(c, k, out) != SCREE_OK) return 0;
  if (out->cubin_ok) return 1;
  scree__centry_free(out);
  return 0;
}

scree_status scree__cache_stack_get(scree__cache_stack *s,
                                    const scree__ckey *k, scree__centry *out,
                                    scree__cache_level *level) {
  if (level) *level = SCREE__LEVEL_NONE;
  if (!s || !k || !out) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (level_get(s->user, k, out)) {
    if (level) *level = SCREE__LEVEL_USER;
    return SCREE_OK;
  }
  for (int i = 0; i < s->nshipped; i++) {
    if (level_get(s->shipped[i], k, out)) {
      if (level) *level = SCREE__LEVEL_SHIPPED;
      return SCREE_OK;
    }
  }
  memset(out, 0, sizeof *out);
  return SCREE_ERROR_NOT_FOUND;
}
