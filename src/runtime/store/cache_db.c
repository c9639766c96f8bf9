/* cache_db.c - the cache handle's schema, statements, transactions and small
 * helpers. docs/cache.md describes
 * the file format. */
#include "store/cache_internal.h"

const char SCHEMA_SQL[] =
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

const char *const STMT_SQL[ST_COUNT] = {
    [ST_GET_META] = "SELECT " WMETA " FROM winners WHERE " WKEY,
    [ST_GET_ROWID] = "SELECT " WCOLS ", cubin, rowid FROM winners WHERE rowid = ?1",
    [ST_DEL_ROWID] = "DELETE FROM winners WHERE rowid = ?1",
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
    /* The listings (cache_iter.c): filtered by arch (?1) and op (?2), NULL
     * for all; the last column is the rowid. */
    [ST_LIST_WINNERS] = "SELECT " WMETA " FROM winners" FILTER WORDER,
    [ST_LIST_BAD] = "SELECT " BCOLS ", rowid FROM bad_configs" FILTER
                    " ORDER BY op, arch, dtype, causal, config, bucket, src_hash,"
                    " nvrtc_version",
    [ST_LIST_MISS] = "SELECT " MCOLS ", rowid FROM misses" FILTER
                     " ORDER BY count DESC, op, arch, bucket, dtype, causal",
    /* A winner's cubin, once its row has passed (cache_admin.c). */
    [ST_GET_CUBIN] = "SELECT cubin FROM winners WHERE rowid = ?1",
};

/* Run on a version-1 file at open: it prepares only if every table has
 * every column and a rowid (the NOT EXISTS subqueries name them all and are
 * always true: LIMIT 0; the outer SELECT has no FROM, so that no name in
 * them can resolve to another table's column), and it counts which of the
 * four are tables, not views that could compute their rows. One statement
 * with one result column, not one probe per table: each statement prepared
 * costs a parse, and SQLite copies the names of its result columns. */
const char VALIDATE_SQL[] =
    "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN"
    " ('winners', 'bad_configs', 'misses', 'meta'))"
    " WHERE NOT EXISTS (SELECT " WCOLS ", cubin, rowid FROM winners LIMIT 0)"
    " AND NOT EXISTS (SELECT " BCOLS ", rowid FROM bad_configs LIMIT 0)"
    " AND NOT EXISTS (SELECT " MCOLS ", rowid FROM misses LIMIT 0)"
    " AND NOT EXISTS (SELECT key, value FROM meta LIMIT 0)";

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

#define put_why scree__set_why

void set_err(scree__cache *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void set_err(scree__cache *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
}

/* Appends one line to a warning buffer: lines are separated by '\n', with
 * no newline after the last, so the whole buffer can go to a log sink. */
void append_line(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void append_line(char *buf, size_t size, const char *fmt, ...) {
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

void copy_str(char *dst, size_t size, const char *src) {
  if (!size) return;
  size_t n = src ? strlen(src) : 0;
  if (n >= size) n = size - 1;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

void copy_col(char *dst, size_t size, sqlite3_stmt *s, int col) {
  copy_str(dst, size, (const char *)sqlite3_column_text(s, col));
}

/* Binds a fixed-size char field (maybe not NUL-terminated) as text. */
int bind_field(sqlite3_stmt *s, int i, const char *str, size_t cap) {
  if (!str) return sqlite3_bind_text(s, i, "", 0, SQLITE_TRANSIENT);
  return sqlite3_bind_text(s, i, str, (int)strnlen(str, cap),
                           SQLITE_TRANSIENT);
}

/* NULL for "match everything". */
int bind_filter(sqlite3_stmt *s, int i, const char *v) {
  if (!v || !*v) return sqlite3_bind_null(s, i);
  return sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
}

int64_t now_s(void) { return (int64_t)time(NULL); }

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

int prim(int rc) { return rc & 0xff; }
int is_busy(int rc) {
  return prim(rc) == SQLITE_BUSY || prim(rc) == SQLITE_LOCKED;
}
int is_corrupt(int rc) {
  return prim(rc) == SQLITE_NOTADB || prim(rc) == SQLITE_CORRUPT;
}
scree_status status_of(int rc) {
  return prim(rc) == SQLITE_NOMEM ? SCREE_ERROR_OUT_OF_MEMORY
                                  : SCREE_ERROR_CACHE;
}

void hold(scree__cache *c) { pthread_mutex_lock(&c->lock); }
void release(scree__cache *c) { pthread_mutex_unlock(&c->lock); }

int key_valid(const scree__ckey *k) {
  return k && k->op[0] && k->arch[0] && (k->causal == 0 || k->causal == 1);
}

/* Grows a malloc'd array to hold at least n + 1 elements. */
int grow(void **p, size_t *cap, size_t n, size_t elem) {
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

sqlite3_stmt *stmt(scree__cache *c, int id, int *rc_out) {
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

void done(sqlite3_stmt *s) {
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
}

/* Runs sql (BEGIN IMMEDIATE or COMMIT), retrying SQLITE_BUSY with growing
 * naps until SCREE__CACHE_BUSY_MS have passed; on failure says what failed
 * ("cannot start a write transaction") with SQLite's message. */
static int exec_retrying(scree__cache *c, const char *sql, const char *failed) {
  int64_t deadline = now_ms() + SCREE__CACHE_BUSY_MS;
  int nap = 1;
  for (;;) {
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK) return rc;
    if (!is_busy(rc) || now_ms() >= deadline) {
      set_err(c, "%s: %s: %s", c->path, failed, sqlite3_errmsg(c->db));
      return rc;
    }
    nap_ms(nap);
    if (nap < 64) nap *= 2;
  }
}

/* BEGIN IMMEDIATE takes the write lock up front, so a transaction never has
 * to upgrade a read snapshot (which fails without waiting). SQLite's busy
 * handler waits up to the timeout; SQLITE_BUSY it returns without waiting
 * (e.g. during WAL recovery by another process) is retried here. */
int txn_begin(scree__cache *c) {
  return exec_retrying(c, "BEGIN IMMEDIATE", "cannot start a write transaction");
}

void txn_rollback(scree__cache *c) {
  if (!sqlite3_get_autocommit(c->db))
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

int txn_commit(scree__cache *c) {
  const int rc = exec_retrying(c, "COMMIT", "commit failed");
  if (rc != SQLITE_OK) txn_rollback(c);
  return rc;
}

int check_writable(scree__cache *c, const char *what) {
  if (!c->readonly) return 1;
  set_err(c, "%s: %s: the cache is open read-only", c->path, what);
  return 0;
}

int over_limit(scree__cache *c, const char *table) {
  char sql[96];
  snprintf(sql, sizeof sql, "SELECT count(*) > %d FROM %s", SCREE__CACHE_MAX_ROWS, table);
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(c->db, sql, -1, &s, NULL);
  int over = 0;
  if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    over = sqlite3_column_int(s, 0);
    rc = SQLITE_OK;
  }
  if (rc != SQLITE_OK) set_err(c, "%s: counting %s: %s", c->path, table, sqlite3_errmsg(c->db));
  sqlite3_finalize(s);
  if (rc == SQLITE_OK && over) {
    set_err(c, "%s: %s would hold more than %d rows, the most a cache holds (every command"
               " that reads it reads at most that many); nothing written", c->path, table,
            SCREE__CACHE_MAX_ROWS);
    rc = SQLITE_FULL;
  }
  return rc;
}
