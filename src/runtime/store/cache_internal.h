/* cache_internal.h - what the cache's files share: the schema, the
 * prepared statements, the handle and the helpers. Not API; include only
 * from src/runtime/store/cache_*.c. */
#ifndef SCREE_CACHE_INTERNAL_H
#define SCREE_CACHE_INTERNAL_H

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

#include "base/base.h"
#include "base/sha256.h"
#include "store/cache.h"

/* Winner columns 0..15; column 16 is the cubin (or its length). */
#define WCOLS                                                              \
  "op, bucket, dtype, causal, arch, src_hash, config, median_us,"          \
  " spread_us, device_name, sm_count, driver_version, nvrtc_version,"      \
  " scree_version, created, cubin_hash"
#define WKEY                                                               \
  "op = ?1 AND bucket = ?2 AND dtype = ?3 AND causal = ?4 AND arch = ?5"   \
  " AND src_hash = ?6"
/* Winner columns 0..15, then 16 length(cubin), 17 typeof(cubin), 18 rowid:
 * what an iteration reads without loading cubins. */
#define WMETA WCOLS ", length(cubin), typeof(cubin), rowid"
#define WORDER " ORDER BY op, arch, bucket, dtype, causal, src_hash"
#define FILTER " WHERE (?1 IS NULL OR arch = ?1) AND (?2 IS NULL OR op = ?2)"
#define BCOLS                                                              \
  "op, dtype, causal, arch, src_hash, config, nvrtc_version, bucket,"      \
  " reason, created"
#define MCOLS                                                              \
  "op, bucket, dtype, causal, arch, example, count, first_seen, last_seen"

enum {
  ST_GET_META,
  ST_GET_ROWID,
  ST_DEL_ROWID,
  ST_PUT,
  ST_BAD_PUT,
  ST_BAD_MERGE,
  ST_BAD_GET,
  ST_MISS_PUT,
  ST_MISS_DEL,
  ST_LIST_WINNERS,
  ST_LIST_BAD,
  ST_LIST_MISS,
  ST_GET_CUBIN,
  ST_COUNT
};


extern const char SCREE__CACHE_SCHEMA_SQL[];
extern const char *const SCREE__CACHE_STMT_SQL[ST_COUNT];
extern const char SCREE__CACHE_VALIDATE_SQL[];
#define SCHEMA_SQL SCREE__CACHE_SCHEMA_SQL
#define STMT_SQL SCREE__CACHE_STMT_SQL
#define VALIDATE_SQL SCREE__CACHE_VALIDATE_SQL

struct scree__cache {
  sqlite3 *db;
  int readonly;
  char *path;
  pthread_mutex_t lock; /* recursive: guards db, st[] and err */
  sqlite3_stmt *st[ST_COUNT];
  char err[512];
  int refused;              /* rows that failed their checks (cache_check.c) */
  char refused_first[384];  /* the first one: "<table> row <rowid>: <why>" */
};

/* What a text field may hold (cache_check.c). */
typedef enum {
  TXT_KEY,  /* a key part or a config: 1..cap-1 bytes of printable ASCII, no blank */
  TXT_FREE, /* free text (device name, reason): 0..cap-1 bytes, no NUL */
  TXT_HEX64 /* a SHA-256: 64 lowercase hex digits */
} cache_text;


#define put_why scree__set_why
typedef enum { OPEN_OK, OPEN_CORRUPT, OPEN_FAIL } open_result;

/* Helpers shared by the cache's files (cache_db.c unless noted). */
#define append_line scree__cache_append_line
void append_line(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define bind_field scree__cache_bind_field
int bind_field(sqlite3_stmt *s, int i, const char *str, size_t cap);
#define bind_filter scree__cache_bind_filter
int bind_filter(sqlite3_stmt *s, int i, const char *v);
#define check_writable scree__cache_check_writable
int check_writable(scree__cache *c, const char *what);
#define copy_col scree__cache_copy_col
void copy_col(char *dst, size_t size, sqlite3_stmt *s, int col);
#define copy_str scree__cache_copy_str
void copy_str(char *dst, size_t size, const char *src);
#define done scree__cache_done
void done(sqlite3_stmt *s);
#define text_ok scree__cache_text_ok
/* 0 if the n bytes at p are fine for kind in a field of cap bytes; else -1
 * with "<name> ..." in why. */
int text_ok(const char *p, size_t n, size_t cap, cache_text kind, const char *name, char *why,
            size_t why_size);
#define key_ok scree__cache_key_ok
/* 1 if k passes the read checks (bucket and src_hash only when asked), else
 * 0 with the reason. */
int key_ok(const scree__ckey *k, int with_bucket, int with_hash, char *why, size_t why_size);
#define entry_ok scree__cache_entry_ok
/* 1 if e may be written: everything a read checks, cubin size included. */
int entry_ok(const scree__centry *e, char *why, size_t why_size);
#define note_refused scree__cache_note_refused
/* Counts a refused row (lock held). */
void note_refused(scree__cache *c, const char *table, int64_t rowid, const char *why);
#define row_cubin_size scree__cache_row_cubin_size
/* Columns col (length(cubin)) and col + 1 (typeof(cubin)): 0 and the size
 * if they describe a blob of 1..SCREE__CACHE_MAX_CUBIN bytes, else -1. */
int row_cubin_size(sqlite3_stmt *s, int col, size_t *size, char *why, size_t why_size);
#define row_to_miss scree__cache_row_to_miss
/* MCOLS into m, checked: 0, or -1 with the reason. */
int row_to_miss(sqlite3_stmt *s, scree__cmiss *m, char *why, size_t why_size);
#define row_to_bad scree__cache_row_to_bad
/* BCOLS into b, checked: 0, or -1 with the reason. */
int row_to_bad(sqlite3_stmt *s, scree__cbad *b, char *why, size_t why_size);
#define get_locked scree__cache_get_locked
scree_status get_locked(scree__cache *c, const scree__ckey *k, scree__centry *out, int with_cubin);
#define get_rowid_locked scree__cache_get_rowid_locked
/* The winner with this rowid, cubin included, with the lock held:
 * SCREE_ERROR_NOT_FOUND if gone, SCREE_ERROR_PARSE if refused (counted,
 * the reason in why). */
scree_status get_rowid_locked(scree__cache *c, int64_t rowid, scree__centry *out, char *why,
                              size_t why_size);
#define drop_if_refused scree__cache_drop_if_refused
/* Inside a write transaction: deletes k's winner row if it fails the read
 * checks or its cubin fails its hash check, so that a valid entry takes its
 * place whatever the damaged row's median. An SQLite code. */
int drop_if_refused(scree__cache *c, const scree__ckey *k);
#define grow scree__cache_grow
int grow(void **p, size_t *cap, size_t n, size_t elem);
#define is_busy scree__cache_is_busy
int is_busy(int rc);
#define is_corrupt scree__cache_is_corrupt
int is_corrupt(int rc);
#define key_valid scree__cache_key_valid
int key_valid(const scree__ckey *k);
#define load_cubin scree__cache_load_cubin
/* Column col, the cubin: copied into e if its sha256 matches e->cubin_hash
 * (cubin_ok 1), else left out (cubin_ok 0). SCREE_ERROR_PARSE with the
 * reason if it is not a blob of 1..SCREE__CACHE_MAX_CUBIN bytes. */
scree_status load_cubin(sqlite3_stmt *s, int col, scree__centry *e, char *why,
                        size_t why_size);
#define hold scree__cache_hold
void hold(scree__cache *c);
#define nap_ms scree__cache_nap_ms
void nap_ms(int ms);
#define now_ms scree__cache_now_ms
int64_t now_ms(void);
#define now_s scree__cache_now_s
int64_t now_s(void);
#define open_db scree__cache_open_db
open_result open_db(const char *path, int readonly, int wal, sqlite3 **out, scree_status *st, char *why, size_t why_size);
#define prim scree__cache_prim
int prim(int rc);
#define row_to_entry scree__cache_row_to_entry
/* Columns 0..15 of WCOLS into e (no cubin), checked: 0, or -1 with the
 * reason (cache_check.c). */
int row_to_entry(sqlite3_stmt *s, scree__centry *e, char *why, size_t why_size);
#define set_err scree__cache_set_err
void set_err(scree__cache *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define status_of scree__cache_status_of
scree_status status_of(int rc);
#define stmt scree__cache_stmt
sqlite3_stmt *stmt(scree__cache *c, int id, int *rc_out);
#define txn_begin scree__cache_txn_begin
int txn_begin(scree__cache *c);
#define txn_commit scree__cache_txn_commit
int txn_commit(scree__cache *c);
#define txn_rollback scree__cache_txn_rollback
void txn_rollback(scree__cache *c);
#define release scree__cache_release
void release(scree__cache *c);
#define wrap scree__cache_wrap
scree_status wrap(sqlite3 *db, const char *path, int readonly, scree__cache **out);
#define over_limit scree__cache_over_limit
/* Inside a write transaction: SQLITE_FULL, with the reason in c's message,
 * if table holds more than SCREE__CACHE_MAX_ROWS rows; else an SQLite
 * code (SQLITE_OK). */
int over_limit(scree__cache *c, const char *table);
#define write_winner scree__cache_write_winner
int write_winner(scree__cache *c, const scree__centry *e, const char *hash, int *changed);

#endif
