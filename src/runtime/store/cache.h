/*
 * cache.h - the SQLite tuning cache. Not API. docs/cache.md describes the
 * file format (schema, key, version policy), the layering of a user cache
 * over shipped ones, the default paths and corruption recovery.
 *
 * A cache maps (op, shape bucket, dtype variant, causal flag, arch, kernel
 * source hash) to the fastest config found for it and that config's compiled
 * cubin, so later processes neither tune nor compile. It also remembers
 * configs known to be bad and calls that found no tuned entry (misses).
 *
 * Conventions: every function returns a scree_status (is_bad returns an
 * int); none prints or exits. Functions with a `why` buffer put a one-line
 * reason there (always NUL-terminated when why_size > 0); the others leave
 * theirs for scree__cache_last_error. NULL or "" filter arguments (arch, op)
 * match everything.
 *
 * Thread safety: one scree__cache may be used from several threads at once
 * (each call holds the handle's mutex; SQLite is opened FULLMUTEX). Several
 * processes may use one cache file at once: writes are transactions
 * (BEGIN IMMEDIATE, retried on SQLITE_BUSY for up to SCREE__CACHE_BUSY_MS).
 * A handle must not be used across fork(): open a new one in the child.
 * Callbacks (foreach_*) run without the handle's lock held and may call back
 * into the same cache; merge's conflict_fn runs inside merge's write
 * transaction and must not write to the cache it was given.
 *
 * Bounds: a cache file is untrusted input (docs/security.md). No value over
 * SCREE__CACHE_MAX_VALUE bytes is ever read, no cubin over
 * SCREE__CACHE_MAX_CUBIN is loaded (its size is read first), and a foreach
 * holds at most SCREE__CACHE_MAX_ROWS rows.
 */
#ifndef SCREE_CACHE_H
#define SCREE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "scree.h"

/* PRAGMA user_version of the files this build reads and writes. */
#define SCREE__CACHE_SCHEMA 1
/* Busy timeout and write-retry budget, milliseconds. */
#define SCREE__CACHE_BUSY_MS 10000
/* The smallest median a cache row or a shipped tuned config may hold,
 * microseconds: no kernel launch takes less (a launch alone costs
 * microseconds), so a smaller one is damage or a forgery that would win
 * every keep-the-faster comparison. Reads, writes and the text configs
 * refuse it alike (docs/cache.md). */
#define SCREE__CACHE_MIN_MEDIAN_US 0.01
/* 1 if the median v (a finite number) is below SCREE__CACHE_MIN_MEDIAN_US,
 * with "<name> is ..." in why; else 0. */
int scree__median_below_floor(double v, const char *name, char *why, size_t why_size);
/* The largest cubin a cache may hold, bytes: put refuses bigger ones and a
 * read refuses the row (real cubins are tens to hundreds of KiB). */
#define SCREE__CACHE_MAX_CUBIN (64 << 20)
/* The longest value (text or blob) SQLite may hand out of a cache file,
 * bytes (SQLITE_LIMIT_LENGTH on every handle): reading a longer one fails
 * with "string or blob too big" instead of allocating it. */
#define SCREE__CACHE_MAX_VALUE (SCREE__CACHE_MAX_CUBIN + 65536)
/* The most rows one foreach call collects (they are held in memory so that
 * callbacks run without the lock); more fail with SCREE_ERROR_CACHE. */
#define SCREE__CACHE_MAX_ROWS 100000

typedef struct scree__cache scree__cache;

typedef struct scree__ckey {
  char op[32];       /* "rmsnorm" */
  char bucket[96];   /* op-defined shape bucket, e.g. "rows<=16384,cols=4096" */
  char dtype[64];    /* variant string, e.g. "x=fp16,w=fp16,y=fp16" */
  int causal;        /* 0 or 1 */
  char arch[16];     /* "sm_90" */
  char src_hash[65]; /* sha256 hex of every implementation's kernel source */
} scree__ckey;

/* 1 if a and b are the same key, field by field; else 0. */
int scree__ckey_same(const scree__ckey *a, const scree__ckey *b);

typedef struct scree__centry {
  scree__ckey key;
  char config[128]; /* "tpr=128,rows=1,vec=8,cache=4" */
  double median_us, spread_us;
  char device_name[128];
  int sm_count;
  int driver_version;     /* e.g. 13000 */
  int nvrtc_version;      /* major*1000 + minor*10, e.g. 13000 */
  char scree_version[16]; /* put: "" means this build's SCREE_VERSION_STRING */
  int64_t created;        /* unix seconds; put: 0 means now */
  void *cubin;            /* malloc'd by get; freed by scree__centry_free */
  size_t cubin_size;
  char cubin_hash[65]; /* sha256 hex of the cubin; put computes it */
  int cubin_ok; /* set by get: 1 if the stored cubin's sha256 matches
                   cubin_hash; if 0, cubin is NULL and must not be used */
} scree__centry;

/* Frees e->cubin and sets it to NULL (cubin_size 0). NULL-safe. */
void scree__centry_free(scree__centry *e);

/* Opens (creating the file and, for read-write, its missing parent
 * directories with mode 0700) a cache. readonly = 1 opens it
 * SQLITE_OPEN_READONLY and never writes, creates or migrates anything.
 * Read-write opens use WAL journal mode; both use a busy timeout of
 * SCREE__CACHE_BUSY_MS.
 *
 * A fresh (absent or empty) file gets the schema and user_version
 * SCREE__CACHE_SCHEMA on a read-write open; a read-only open of one
 * returns SCREE_ERROR_NOT_FOUND ("no cache at", "is empty": nothing is
 * cached yet, or another process is creating it right now). A file with
 * another user_version is refused with SCREE_ERROR_CACHE (why names both
 * versions), as is a valid SQLite file that is not a scree cache
 * (user_version 0 with tables of its own, a missing column, a view or a
 * table without rowids in place of one of its tables).
 *
 * A path that cannot be reached (a directory on the way that cannot be
 * searched, a symlink loop, a path through a regular file) is
 * SCREE_ERROR_CACHE with the system's reason, never NOT_FOUND; a path of
 * PATH_MAX bytes or more is SCREE_ERROR_INVALID_ARGUMENT, never cut. A
 * read-only open of a WAL-mode file in a directory it cannot write (where
 * SQLite cannot create the -shm) reads it as immutable when no -wal file
 * with changes is beside it, and fails with a reason when one is.
 *
 * A damaged scree cache (a file that begins with the SQLite header of a
 * scree cache, this schema version, but is corrupt or truncated past it): a
 * read-write open renames it aside to
 * "<path>.corrupt-<unix time>" (its -wal/-journal files with it), creates a
 * fresh cache in its place, sets *recovered = 1 (if recovered is not NULL),
 * says so in why and returns SCREE_OK. A read-only open returns
 * SCREE_ERROR_CACHE. Anything else that is not a cache (a file that is not
 * SQLite, another program's database, a directory) is SCREE_ERROR_CACHE and
 * left as it is. Other failures (permissions, an unwritable file on a
 * read-write open) return SCREE_ERROR_CACHE; SCREE_ERROR_INVALID_ARGUMENT
 * and SCREE_ERROR_OUT_OF_MEMORY as usual. Every handle bounds the values
 * it reads (SCREE__CACHE_MAX_VALUE) and does not trust the file's schema
 * (no trusted_schema, defensive mode). On success why is "" unless it
 * reports a recovery. */
scree_status scree__cache_open(const char *path, int readonly,
                               scree__cache **out, int *recovered, char *why,
                               size_t why_size);
/* Closes the handle (a read-write close checkpoints the WAL). NULL-safe. */
void scree__cache_close(scree__cache *c);
/* The path it was opened with. Owned by the handle. */
const char *scree__cache_path(const scree__cache *c);
/* One tune per bucket across the processes of a node: a lock on the
 * bucket's key in `<cache path>.tune-lock` (an open-file-description
 * byte-range lock, released when the holder closes it or dies). wait = 0
 * tries once; wait = 1 waits up to timeout_s. Returns 1 with *fd to pass
 * to scree__cache_tune_unlock, 0 if another holder kept it, -1 if no lock
 * can be had here (a read-only cache, a lock file that cannot be opened:
 * then tune without one). */
int scree__cache_tune_lock(const scree__cache *c, const scree__ckey *key, int wait,
                           double timeout_s, int *fd);
void scree__cache_tune_unlock(int fd);
/* 1 if opened read-only. */
int scree__cache_readonly(const scree__cache *c);
/* Copies the reason of the handle's last failed call into buf ("" if
 * none). With several threads failing at once it holds one of them. */
void scree__cache_last_error(scree__cache *c, char *buf, size_t size);
/* Every row read from the file is checked before it is used (docs/cache.md,
 * "Rows read from a file"): text fields fit their fixed fields with no NUL
 * (key parts and configs: printable ASCII without blanks), numbers have
 * their column's type and range, medians are finite and at least
 * SCREE__CACHE_MIN_MEDIAN_US, causal is
 * 0 or 1, a cubin is a blob of 1..SCREE__CACHE_MAX_CUBIN bytes. Iterations
 * skip a row that fails, get returns SCREE_ERROR_CACHE for it; both count
 * it here. Returns how many rows this handle refused since it was opened,
 * with the first one's table, rowid and reason in why (may be NULL). */
int scree__cache_refused(scree__cache *c, char *why, size_t why_size);
/* Runs PRAGMA quick_check (full = 0) or integrity_check (full = 1): SCREE_OK
 * if the file is sound, else SCREE_ERROR_CACHE with the first problem in
 * why. Reads the whole file; meant for the CLI, not for every open. */
scree_status scree__cache_check(scree__cache *c, int full, char *why,
                                size_t why_size);

/* Winner lookup by full key. SCREE_ERROR_NOT_FOUND if absent,
 * SCREE_ERROR_CACHE if the row fails its checks (scree__cache_refused).
 * Verifies the cubin's sha256 against the stored cubin_hash and sets
 * out->cubin_ok; a mismatch still returns SCREE_OK, with cubin NULL and
 * cubin_ok 0. On SCREE_OK the caller frees with scree__centry_free. */
scree_status scree__cache_get(scree__cache *c, const scree__ckey *k,
                              scree__centry *out);
/* Upsert that keeps the faster entry: if a row with the same key exists and
 * its median_us is <= e->median_us, the existing row stays (*replaced = 0);
 * otherwise e is written (*replaced = 1); an existing row that fails the
 * read checks, or whose cubin fails its hash check, is always replaced.
 * replaced may be NULL. cubin_hash is
 * computed from the cubin bytes (the caller's is ignored). e must pass the
 * checks a read applies (a non-empty cubin of at most
 * SCREE__CACHE_MAX_CUBIN bytes, median_us finite and at least
 * SCREE__CACHE_MIN_MEDIAN_US, key and config
 * printable ASCII that fits), else SCREE_ERROR_INVALID_ARGUMENT with the
 * reason in scree__cache_last_error. Atomic under concurrent writers from
 * several processes and threads. SCREE_ERROR_CACHE on a read-only cache. */
scree_status scree__cache_put(scree__cache *c, const scree__centry *e,
                              int *replaced);
/* Deletes winners, bad configs and misses matching the filter. *deleted
 * (may be NULL) gets the number of winner rows deleted. */
scree_status scree__cache_clear(scree__cache *c, const char *arch,
                                const char *op, int *deleted);

/* Known-bad configs: a candidate that failed to compile, load, launch, gave
 * a wrong answer or timed out, for a kernel identity (op, dtype, causal,
 * arch, src_hash), a config and a compiler (nvrtc_version). The row also
 * holds the bucket it failed for, k->bucket, or "*" when it is bad for every
 * bucket (a compile failure); is_bad asks with a bucket and matches rows
 * whose bucket is equal or "*". Recording the same (identity, config,
 * compiler, bucket) again updates the reason and time. reason is free text:
 * "compile: ...", "wrong answer: ...", "timeout: ...", cut to 255 bytes.
 * The key and config must pass the read checks (k->bucket may be "" for
 * "*"), else SCREE_ERROR_INVALID_ARGUMENT. */
scree_status scree__cache_record_bad(scree__cache *c, const scree__ckey *k,
                                     const char *config, int nvrtc_version,
                                     const char *reason);
/* 1 if bad (its reason copied to reason_out if not NULL; a row for the exact
 * bucket is preferred over a "*" row), 0 if not, -1 on error. */
int scree__cache_is_bad(scree__cache *c, const scree__ckey *k,
                        const char *config, int nvrtc_version,
                        char *reason_out, size_t reason_size);

/* Misses: a call found no tuned entry. One row per (op, bucket, dtype,
 * causal, arch) (k->src_hash is ignored) with a count, incremented on every
 * record, first/last seen unix times and the first example shape string
 * recorded (e.g. "rows=16000,cols=4096"; example may be NULL). */
scree_status scree__cache_record_miss(scree__cache *c, const scree__ckey *k,
                                      const char *example);
typedef struct scree__cmiss {
  scree__ckey key; /* src_hash is "" */
  char example[128];
  int64_t count, first_seen, last_seen;
} scree__cmiss;
/* Calls fn for each miss matching the filter, by count descending (then by
 * key). fn returning nonzero stops the iteration (still SCREE_OK). Here and
 * in the other foreach functions, rows that fail their checks are skipped
 * and counted (scree__cache_refused). */
scree_status scree__cache_foreach_miss(scree__cache *c, const char *arch,
                                       const char *op,
                                       int (*fn)(void *user,
                                                 const scree__cmiss *m),
                                       void *user);
/* Calls fn for each winner matching the filter, ordered by op, arch,
 * bucket, dtype (then causal, src_hash). with_cubin = 1 loads and verifies
 * each cubin (cubin_ok as in get); with_cubin = 0 loads none: cubin is
 * NULL, cubin_size the stored size and cubin_ok 0 (not checked). The entry
 * and its cubin are valid only during the call. fn returning nonzero stops
 * the iteration. */
scree_status scree__cache_foreach_entry(scree__cache *c, const char *arch,
                                        const char *op, int with_cubin,
                                        int (*fn)(void *user,
                                                  const scree__centry *e),
                                        void *user);
/* Deletes a miss row (after prewarm tuned it); k->src_hash is ignored.
 * SCREE_ERROR_NOT_FOUND if there was none. */
scree_status scree__cache_delete_miss(scree__cache *c, const scree__ckey *k);

/* Bad rows, for "safelist export". */
typedef struct scree__cbad {
  scree__ckey key; /* bucket is the bucket it failed for, or "*" */
  char config[128];
  int nvrtc_version;
  char reason[256];
  int64_t when; /* unix seconds of the last record */
} scree__cbad;
/* Calls fn for each bad row matching the filter, ordered by op, arch,
 * dtype, causal, config, bucket. fn returning nonzero stops. */
scree_status scree__cache_foreach_bad(scree__cache *c, const char *arch,
                                      const char *op,
                                      int (*fn)(void *user,
                                                const scree__cbad *b),
                                      void *user);

/* Trust (docs/security.md): a cache holds cubins that scree loads and
 * runs, so a file that a user other than this one (the effective uid) and
 * root could change is refused, as ssh refuses loose key permissions.
 * SCREE_OK if the file is owned by this user or root and writable by
 * neither its group nor others, and so is every directory that leads to it:
 * those of the path as given and those on the way through every symbolic
 * link, each hop of each link resolved by hand, a directory with the sticky
 * bit set being fine even when others may write it. The -wal, -shm and
 * -journal beside the file, where present, pass the file's rules too and
 * may not be links. Else SCREE_ERROR_CACHE with the reason and the way out
 * in why. A path that does not lead to a regular file is SCREE_OK (once
 * the directories on the way passed): the open that follows says what is
 * wrong with it. Permission bits and owners are read, not tried, so the
 * answer is the same for root. */
scree_status scree__cache_trust_check(const char *path, char *why, size_t why_size);
/* The same, and on SCREE_OK the path resolved in real (real_size at least
 * PATH_MAX): absolute, without links, on directories only this user and
 * root can change; the file to open, so that what is opened is what was
 * checked. real is "" on failure. */
scree_status scree__cache_trust_resolve(const char *path, char *real, size_t real_size,
                                       char *why, size_t why_size);
/* scree__cache_open of the path that scree__cache_trust_resolve gives for
 * path (its parent directories created first on a read-write open) when
 * strict is 1, the handle still named path; a plain scree__cache_open when
 * strict is 0. A refusal is SCREE_ERROR_CACHE with the reason in why. */
scree_status scree__cache_open_trusted(const char *path, int readonly, int strict,
                                       scree__cache **out, int *recovered, char *why,
                                       size_t why_size);
/* 0 if the operator turned the trust check off (SCREE_CACHE_STRICT_MODES=0
 * in the environment), else 1. */
int scree__cache_strict_modes(void);

/* 1 if e is what this build would write for its op: the op is registered,
 * dtype is its canonical variant text and causal that variant's flag, the
 * bucket and config are in the op's canonical form, the arch is
 * sm_<number>[letter] and the config passes the op's check for the variant
 * on that arch. Else 0 with the reason. Merge and export require it of
 * every row, on top of the read checks. */
int scree__centry_check(const scree__centry *e, char *why, size_t why_size);
/* The same for a bad-config record: op, variant, causal, arch, a bucket in
 * canonical form or "*", a config in canonical form (not checked against
 * the op's constraints: it is a config that failed). */
int scree__cbad_check(const scree__cbad *b, char *why, size_t why_size);

/* What a merge did: winners added, replaced (the source was faster) and in
 * conflict (present in both with different configs, whichever won); source
 * rows left out: winners whose cubin failed its hash check, winners and
 * bad-config records that failed their checks. */
typedef struct scree__merge_counts {
  int added, replaced, conflicts;
  int skipped_hash, skipped_invalid;
} scree__merge_counts;

/* Merges every winner of the cache file at src_path (opened read-only)
 * into c with the keep-the-faster rule, in one transaction. With strict =
 * 1 the source must first pass scree__cache_trust_check (SCREE_ERROR_CACHE
 * and nothing merged if it does not). Each source
 * row must pass the read checks and scree__centry_check (bad configs:
 * scree__cbad_check) and its cubin its hash check; the others are left out
 * and counted, and why then names how many and the first one's reason
 * (the merge still succeeds). A cubin is read only after its row passed
 * and its size is known to be at most SCREE__CACHE_MAX_CUBIN, and is
 * written without further copies. counts (may be NULL) says what happened.
 * conflict_fn (may be NULL) is called for each conflict with both entries
 * (metadata only: their cubins are not loaded). Bad rows are merged too
 * (union; c's row wins where both have one). */
scree_status scree__cache_merge(
    scree__cache *c, const char *src_path, int strict, scree__merge_counts *counts,
    void (*conflict_fn)(void *user, const scree__centry *mine,
                        const scree__centry *theirs),
    void *user, char *why, size_t why_size);
/* Writes the winners matching the filter (cubins included) into a NEW
 * standalone cache file dst_path, in rollback-journal mode so that it can be
 * shipped and opened read-only from a read-only directory. dst_path must not
 * exist (SCREE_ERROR_IO otherwise) and its directory must. *exported (may be
 * NULL) = rows written. Rows that fail the read checks or
 * scree__centry_check, or whose cubin fails its hash check, are left out:
 * *skipped (may be NULL) counts them and why names the first. On failure
 * dst_path is removed. */
scree_status scree__cache_export(scree__cache *c, const char *dst_path,
                                 const char *arch, const char *op,
                                 int *exported, int *skipped, char *why,
                                 size_t why_size);

/* ------------------------------------------------------------------------ */
/* Layering: one read-write user cache over read-only shipped caches, over  */
/* the shipped tuned configs (text).                                        */
/* ------------------------------------------------------------------------ */

typedef enum {
  SCREE__LEVEL_NONE = 0,
  SCREE__LEVEL_USER = 1,
  SCREE__LEVEL_SHIPPED = 2,
  SCREE__LEVEL_TUNED = 3 /* a shipped tuned config: a config and a time, no cubin */
} scree__cache_level;

struct scree__tuned; /* store/tuned.h */
typedef struct scree__cache_stack {
  scree__cache *user;     /* NULL when the user cache could not be opened */
  scree__cache **shipped; /* in search-path order */
  int nshipped;
  struct scree__tuned *tuned; /* shipped tuned configs (text), the lowest level; may be NULL */
  /* The GPU's name: the shipped tuned configs of its model answer before
   * those of another model of the arch. "" (as opened): any model. */
  char device[128];
  /* 1: a pinned stack (scree__cache_stack_open_pinned): shipped[0] is the
   * pinned file, the only level; a miss is an error, nothing is tuned. */
  int pinned;
} scree__cache_stack;

/* The default user cache path: $SCREE_CACHE_DIR/tune.db, else
 * $XDG_CACHE_HOME/scree/tune.db (only if absolute, as the XDG spec says),
 * else $HOME/.cache/scree/tune.db (HOME unset or not absolute: the passwd
 * entry's home, if absolute). Empty variables count as unset.
 * SCREE_ERROR_NOT_FOUND if there is no home directory either,
 * SCREE_ERROR_INVALID_ARGUMENT if SCREE_CACHE_DIR is set but not absolute
 * (it would follow the working directory) or buf is too small. */
scree_status scree__cache_default_path(char *buf, size_t size);
/* Opens the stack: user_path (NULL = the default path) read-write, and each
 * path of the colon-separated search_path (NULL = $SCREE_CACHE_PATH; empty
 * components are ignored) read-only. Each is opened with
 * scree__cache_open_trusted (strict unless SCREE_CACHE_STRICT_MODES=0): a
 * user cache that fails the check is not used. A shipped cache that fails
 * scree__cache_trust_check (unless SCREE_CACHE_STRICT_MODES=0) or fails to
 * open is skipped and described in warn (appended, one line each, separated by
 * '\n' with none after the last; "" if all went well). If the user
 * cache cannot be opened at all the stack opens without it (user == NULL)
 * and warn says so; a recovered (corrupt, moved aside) user cache is
 * reported there too. The shipped tuned configs (text) are loaded too; a
 * file of them that does not parse is skipped and described in warn.
 * Returns SCREE_OK unless s is NULL
 * (SCREE_ERROR_INVALID_ARGUMENT) or memory runs out. */
scree_status scree__cache_stack_open(scree__cache_stack *s,
                                     const char *user_path,
                                     const char *search_path, char *warn,
                                     size_t warn_size);
/* Opens a pinned stack (docs/cache.md#a-pinned-cache): the cache file at
 * path, read-only (scree__cache_open_trusted, strict unless
 * SCREE_CACHE_STRICT_MODES=0), as its only level: no user cache, no
 * shipped caches, no shipped tuned configs; s->pinned = 1. The file is
 * never written or created. A missing or empty file is
 * SCREE_ERROR_NOT_FOUND, one that cannot be opened as a scree cache (or is
 * refused by the trust check) SCREE_ERROR_CACHE, both with why naming the
 * file; s is then zeroed. */
scree_status scree__cache_stack_open_pinned(scree__cache_stack *s, const char *path, char *why,
                                            size_t why_size);
/* After a lookup found nothing usable for k: 1 if that is an error because
 * the stack is pinned, with the message (the op, bucket, variant, causal
 * flag and arch of k, and the pinned file) in why; 0 if not pinned (the
 * miss policy applies). */
int scree__cache_stack_pinned_miss(const scree__cache_stack *s, const scree__ckey *k, char *why,
                                   size_t why_size);
/* Closes every cache of the stack and zeroes it. NULL-safe. */
void scree__cache_stack_close(scree__cache_stack *s);
/* Lookup in the stack's one order: the user cache, each shipped cache in
 * list order, then the shipped tuned configs (store/tuned.h: the entry of
 * s->device's model first). The first level holding the key answers; an
 * SQLite entry whose cubin_ok is 0, or a level that fails with an error,
 * is skipped (the next level is asked). A shipped tuned config answers
 * with its key, config, median_us and device_name (as written, blanks as
 * '_'), and no cubin (cubin NULL, cubin_ok 0): the caller compiles it.
 * Returns SCREE_OK and the level that answered (free out with
 * scree__centry_free), or SCREE_ERROR_NOT_FOUND and SCREE__LEVEL_NONE.
 * level may be NULL. */
scree_status scree__cache_stack_get(scree__cache_stack *s,
                                    const scree__ckey *k, scree__centry *out,
                                    scree__cache_level *level);
/* The same from the stack's level *pos on (0: the top), and on SCREE_OK
 * *pos moves past the level that answered: a caller that cannot use an
 * entry (its config does not pass the device's check, its cubin does not
 * load) asks again for the next level's. */
scree_status scree__cache_stack_next(scree__cache_stack *s, const scree__ckey *k, int *pos,
                                     scree__centry *out, scree__cache_level *level);

#endif
