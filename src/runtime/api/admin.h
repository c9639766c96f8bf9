/*
 * admin.h - the administration interface: what scree-tune does, as verbs
 * over the internal layers (cache rows listed, exported, merged, cleared
 * and verified; one prewarm task tuned; the safelist learned; the shipped
 * tuned configs checked and compiled; the demo; what doctor reports).
 * The CLI includes only scree.h and this header (tests/test_layers.cmake
 * holds it to that), so it depends on one narrow interface and on no
 * layer's structs: rows, tasks and results are plain records of text and
 * numbers defined here. Explicitly internal: not installed, no stability
 * promise. docs/cli.md describes the commands built on it.
 *
 * Conventions: nothing here prints or exits. Functions return a
 * scree_status (or an int as stated) and put a one-line reason in `why`
 * (always NUL-terminated when why_size > 0). Filters with NULL fields
 * match everything. Callbacks returning nonzero stop an iteration, which
 * then still returns SCREE_OK. Not thread-safe unless stated; a cache
 * handle may be used from several threads (store/cache.h).
 */
#ifndef SCREE_ADMIN_H
#define SCREE_ADMIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "scree.h"

/* ---- text -------------------------------------------------------------------- */

/* s made safe for a terminal: controls, Unicode line separators and
 * bidirectional controls, and bytes that are not UTF-8 as \xNN (text from
 * a cache file, docs/cli.md "Text from a cache"). Returns buf. */
const char *scree__admin_escape(char *buf, size_t size, const char *s);
/* Writes s as a JSON string literal: quotes, backslashes and the
 * characters scree__admin_escape escapes as \uXXXX, bytes that are not
 * UTF-8 as \ufffd. */
void scree__admin_json_string(FILE *f, const char *s);

/* ---- ops --------------------------------------------------------------------- */

/* The name of registered op i (0, 1, ...), NULL past the last. */
const char *scree__admin_op_name(int i);
/* The SHA-256 (hex) of every kernel source of op as this build compiles
 * it, the hash cache rows are keyed by; NULL for an unknown op. */
const char *scree__admin_source_hash(const char *op);
/* 0 when this build's kernel sources can all be read, else -1 with the
 * first that cannot and why ("SCREE_KERNEL_DIR: /x/rmsnorm.cu: No such
 * file or directory"): without them every row looks stale. */
int scree__admin_kernel_sources(char *why, size_t why_size);

/* ---- cache files ------------------------------------------------------------- */

/* A cache file, opaque. */
typedef struct scree__cache scree__admin_cache;

/* The default user cache path ($SCREE_CACHE_DIR/tune.db, ...).
 * SCREE_ERROR_NOT_FOUND when there is no home directory either. */
scree_status scree__admin_default_path(char *buf, size_t size);
/* Opens a cache file. readonly = 1 never creates, converts or moves it: a
 * missing or empty file is SCREE_ERROR_NOT_FOUND (nothing cached yet); a
 * path that cannot be reached is SCREE_ERROR_CACHE; a path too long for
 * the system SCREE_ERROR_INVALID_ARGUMENT. readonly = 0 creates it and
 * moves a corrupt file aside, saying so in why with *recovered = 1; it
 * first passes the trust check (scree__cache_open_trusted, unless
 * SCREE_CACHE_STRICT_MODES=0): SCREE_ERROR_CACHE with the reason if not. */
scree_status scree__admin_open(const char *path, int readonly, scree__admin_cache **out,
                               int *recovered, char *why, size_t why_size);
/* NULL-safe. */
void scree__admin_close(scree__admin_cache *c);
const char *scree__admin_path(const scree__admin_cache *c);
/* The reason of the handle's last failure. */
void scree__admin_cache_error(scree__admin_cache *c, char *why, size_t why_size);
/* How many rows the handle skipped because they failed their checks
 * (docs/cache.md), the first one's reason in why. */
int scree__admin_refused(scree__admin_cache *c, char *why, size_t why_size);
/* The read-write user cache of a context, or NULL (caching off, or the
 * file could not be opened). Owned by the context. */
scree__admin_cache *scree__admin_context_cache(scree_context *ctx);

typedef enum scree__admin_table {
  SCREE__ADMIN_WINNERS = 0,
  SCREE__ADMIN_MISSES = 1,
  SCREE__ADMIN_BAD = 2
} scree__admin_table;

/* Which rows: arch and op for every table, bucket and dtype (exact stored
 * text) for winners. */
typedef struct scree__admin_filter {
  const char *arch, *op, *bucket, *dtype;
} scree__admin_filter;

typedef struct scree__admin_key {
  char op[32];
  char bucket[96]; /* "rows<=16384,cols=4096"; "*" for a bad config of every bucket */
  char dtype[64];  /* the variant: "x=bf16,w=bf16,y=bf16" */
  int causal;
  char arch[16];
  char src_hash[65]; /* "" for a miss */
} scree__admin_key;

/* One row of a table; the fields of other tables are zero. */
typedef struct scree__admin_row {
  scree__admin_key key;
  int stale;         /* winners, bad: tuned for another kernel source (or an unknown op) */
  char config[128];  /* winners, bad */
  /* winners */
  double median_us, spread_us;
  char device[128];
  int device_known;  /* 0: a row compiled from a shipped tuned config (prewarm
                        --from-shipped): SM count and driver not recorded, and
                        `created` is when it was compiled, not tuned */
  int sm_count, driver_version;
  int nvrtc_version; /* winners: the compiler of the cubin; bad: of the failure */
  char scree_version[16];
  int64_t created;
  size_t cubin_size;
  char cubin_hash[65];
  int cubin_ok;      /* 1 the cubin matches its hash, 0 it does not, -1 not read */
  /* misses */
  char example[128];
  int64_t count, first_seen, last_seen;
  /* bad */
  char reason[256];
  int64_t when;
} scree__admin_row;

/* Calls fn for each row of a table that matches f, in the table's order
 * (winners by key, misses most frequent first). check_cubins = 1 reads
 * each winner's cubin and checks its hash (cubin_ok). Rows that fail
 * their checks are skipped and counted (scree__admin_refused). A failure
 * of the file is SCREE_ERROR_CACHE with the reason in
 * scree__admin_cache_error. */
scree_status scree__admin_rows(scree__admin_cache *c, scree__admin_table t,
                               const scree__admin_filter *f, int check_cubins,
                               int (*fn)(void *user, const scree__admin_row *r), void *user);

/* Writes the matching winners, cubins included, into the NEW file dst
 * (SCREE_ERROR_IO if it exists). Rows left out (a cubin that fails its
 * hash, a row this build would not write) are counted in *skipped, the
 * first named in why. */
scree_status scree__admin_export(scree__admin_cache *c, const char *dst,
                                 const scree__admin_filter *f, int *exported, int *skipped,
                                 char *why, size_t why_size);
/* The matching winners as the shipped tuned configs' text (a malloc'd
 * *text of *len bytes, under a comment naming the filter), parsed back
 * before it is returned. Winners that fail the checks of a row leaving its
 * file are left out: *skipped, the first in why. SCREE_ERROR_PARSE if the
 * text would not load. */
scree_status scree__admin_export_text(scree__admin_cache *c, const scree__admin_filter *f,
                                      char **text, size_t *len, int *exported, int *skipped,
                                      char *why, size_t why_size);

typedef struct scree__admin_merge_counts {
  int added, replaced, conflicts, skipped_hash, skipped_invalid;
} scree__admin_merge_counts;
/* Merges the cache file src into c (keep the faster entry per key; bad
 * configs as a union). strict = 1 refuses a file others could change
 * (docs/security.md): SCREE_ERROR_CACHE, why starting "refusing ".
 * conflict (may be NULL) sees each key both have with other configs. */
scree_status scree__admin_merge(scree__admin_cache *c, const char *src, int strict,
                                scree__admin_merge_counts *counts,
                                void (*conflict)(void *user, const scree__admin_row *mine,
                                                 const scree__admin_row *theirs),
                                void *user, char *why, size_t why_size);
/* 0 if SCREE_CACHE_STRICT_MODES=0 turned the trust check off, else 1. */
int scree__admin_strict_modes(void);
/* Deletes the winners, bad configs and misses matching f's arch and op;
 * *deleted counts the winners. */
scree_status scree__admin_clear(scree__admin_cache *c, const scree__admin_filter *f,
                                int *deleted);

/* ---- safelist export ------------------------------------------------------- */

typedef struct scree__admin_learned {
  int denied, allowed;          /* lines added */
  int stale, one_bucket;        /* bad records left out: another source, one bucket only */
  int failed_check;             /* lines left out: their config fails the op's check */
} scree__admin_learned;
/* The safelist of arch (its current list, embedded or $SCREE_SAFELIST_DIR,
 * or an empty one) with what cache c (may be NULL) learned for this
 * build's kernels, for op (NULL: every op): a malloc'd *text that parses.
 * SCREE_ERROR_INVALID_ARGUMENT for a bad arch name, SCREE_ERROR_PARSE when
 * the current list (or the result) does not load, SCREE_ERROR_CACHE when
 * the cache cannot be read. */
scree_status scree__admin_safelist_export(scree__admin_cache *c, const char *arch,
                                          const char *op, char **text, size_t *len,
                                          scree__admin_learned *learned, char *why,
                                          size_t why_size);

/* ---- verify ------------------------------------------------------------------ */

typedef struct scree__admin_verdict {
  const char *verdict; /* "ok", "slower", "stale", "WRONG", "unreadable", "cubin hash
                          mismatch", "unknown op" or a status name */
  int failed;          /* counts as a failure (exit code 1) */
  double now_us;       /* with retime */
  char detail[512];    /* WRONG: the worst element */
  /* The row was compiled by another NVRTC, or tuned under another driver,
   * than this machine has: not a failure (the cubin is what is checked),
   * but a retune may pick another config (docs/cache.md). */
  int other_nvrtc, other_driver;
} scree__admin_verdict;

typedef struct scree__admin_verify_counts {
  char arch[16];
  int checked, wrong, slower, stale, other_arch, other_compiler;
} scree__admin_verify_counts;
/* Checks every matching winner of c for the context's architecture
 * against the CPU reference (its cubin, hash-checked, in a module of its
 * own), and with retime times it; fn sees each row and its verdict. Rows
 * of other archs are counted, not run. */
scree_status scree__admin_verify(scree_context *ctx, scree__admin_cache *c,
                                 const scree__admin_filter *f, int retime,
                                 int (*fn)(void *user, const scree__admin_row *r,
                                           const scree__admin_verdict *v),
                                 void *user, scree__admin_verify_counts *counts);

/* ---- shipped tuned configs (caches/, text) ------------------------------------ */

typedef struct scree__admin_shipped_row {
  scree__admin_key key;
  char device[128]; /* as written: blanks as '_' */
  char config[128];
  double median_us;
  int stale;        /* tuned for another kernel source: ignored at run time */
  char file[256];
  int line;
} scree__admin_shipped_row;

typedef struct scree__admin_shipped_summary {
  int files, entries; /* loaded */
  int matched, stale; /* of those matching the filter */
  char names[1024];   /* the files, comma-separated */
  char warn[4096];    /* files that did not load, one line each; "" if none */
} scree__admin_shipped_summary;
/* The shipped tuned configs (the embedded caches/ files, or
 * $SCREE_TUNED_CONFIGS), fn called for each that matches f's arch and op. */
scree_status scree__admin_shipped(const scree__admin_filter *f,
                                  int (*fn)(void *user, const scree__admin_shipped_row *r),
                                  void *user, scree__admin_shipped_summary *s);

/* prewarm --from-shipped: what one compile gave. */
typedef struct scree__admin_compiled {
  scree__admin_shipped_row row;
  char target[16];    /* "sm_90a" */
  size_t cubin_size;
  scree_status st;    /* SCREE_OK: stored */
  char why[512];      /* the NVRTC log's start, or the cache's error */
} scree__admin_compiled;

typedef struct scree__admin_compile_counts {
  char arch[16];      /* "" when every arch was compiled */
  int nvrtc_version;
  int total;          /* entries to compile */
  /* stored: rows written; cached: keys the cache held a good row of, not
   * compiled, or compiled but kept (a good row at least as fast stayed). */
  int stored, compiles, cached, stale, failed;
  int other_arch, other_op; /* entries --arch or --op left out */
  double seconds;
} scree__admin_compile_counts;
typedef struct scree__admin_compile_opts {
  const char *arch; /* NULL: this machine's GPU's, else every arch listed */
  const char *op;   /* NULL: every op */
  int force;        /* compile keys the cache holds with a good cubin too */
  /* Called as compiles finish (done of total), from the compile threads,
   * one call at a time; may be NULL. */
  void (*progress)(void *user, int done, int total, const char *stage);
  void *progress_user;
} scree__admin_compile_opts;
/* Compiles the shipped tuned configs that match o with NVRTC, on
 * scree__jobs() threads, each (op, config, variant, target) once, and
 * stores each with the shipped time and device name in c (read-write). fn
 * (may be NULL) sees each entry compiled, in file order, once all are.
 * SCREE_ERROR_NO_NVRTC when NVRTC does not load (why says why);
 * SCREE_ERROR_CACHE when a row cannot be stored (the others still are).
 * On success why holds a warning about files that did not load, or "". */
scree_status scree__admin_compile_shipped(scree__admin_cache *c,
                                          const scree__admin_compile_opts *o,
                                          int (*fn)(void *user, const scree__admin_compiled *r),
                                          void *user, scree__admin_compile_counts *counts,
                                          char *why, size_t why_size);

/* ---- prewarm tasks ----------------------------------------------------------- */

/* One bucket to tune: its op, bucket and variant in canonical text (two
 * tasks are the same bucket when the three are equal). */
typedef struct scree__admin_task {
  char op[32];
  char bucket[96];
  char variant[64];
  char shape[256];       /* the first call shape given for it ("" for a miss without one) */
  int from_miss;
  scree__admin_key miss; /* the miss row to delete once the bucket is tuned */
} scree__admin_task;

/* The most buckets one prewarm takes (docs/cli.md): past it a task list
 * refuses more. */
#define SCREE__ADMIN_MAX_TASKS 100000

/* The buckets of a prewarm, each once, in the order first given: a hash
 * set on (op, bucket, variant) finds the one there. Zero it to start. */
typedef struct scree__admin_tasks {
  scree__admin_task *t;
  int n, cap;
  int failed;       /* why the last add failed: 0, 1 out of memory, 2 past the cap */
  void *index;      /* the hash set (NULL until the first add, or after a keep) */
} scree__admin_tasks;
/* Adds t (user: a scree__admin_tasks) unless its bucket is there already:
 * then a miss marks the one there, and the first shape given stays. 0,
 * or 1 with ts->failed set (out of memory, or SCREE__ADMIN_MAX_TASKS
 * reached). The callback the task sources below take. */
int scree__admin_tasks_add(void *ts, const scree__admin_task *t);
/* Keeps the tasks whose keep[i] is set, in their order. */
void scree__admin_tasks_keep(scree__admin_tasks *ts, const unsigned char *keep);
void scree__admin_tasks_free(scree__admin_tasks *ts);

/* The task of one call shape of op, in its shape fields
 * ("rows=16000,cols=4096"), tuned as variant (the op's canonical text) or,
 * when variant is NULL, with every dtype field at dtype and the others
 * from the shape field of the same name or the op's example. Checked
 * before anything runs, without a GPU: every shape field is given, the
 * op's problem builder takes the shape, and the op's own argument checks
 * pass for a call of that shape and variant (head_dim=48 is refused as
 * scree_attention would refuse it). 0, or -1 with the reason in why. */
int scree__admin_task_of_shape(const char *op, const char *shape, const char *variant,
                               scree_dtype dtype, scree__admin_task *t, char *why,
                               size_t why_size);
/* The tasks of model preset `model` in each dtype (presets: the embedded
 * presets/ files, $SCREE_PRESETS, then presets_file): fn for each call
 * shape, in file order. SCREE_ERROR_NOT_FOUND for an unknown model;
 * SCREE_ERROR_PARSE (or IO) for presets that do not load or a line whose
 * shape is refused ("file:line: ..." in why). */
scree_status scree__admin_model_tasks(const char *model, const char *presets_file,
                                      const scree_dtype *dtypes, int ndtypes,
                                      int (*fn)(void *user, const scree__admin_task *t),
                                      void *user, char *why, size_t why_size);
/* The tasks of the HuggingFace config.json at path (the preset of
 * scree__hf_config_preset) in each dtype, as scree__admin_model_tasks;
 * about (may be NULL) gets what was read, in words. SCREE_ERROR_IO when
 * the file cannot be read, SCREE_ERROR_PARSE when it is refused or a call
 * shape is ("PATH: ..." in why). */
scree_status scree__admin_hf_config_tasks(const char *path, const scree_dtype *dtypes,
                                          int ndtypes,
                                          int (*fn)(void *user, const scree__admin_task *t),
                                          void *user, char *about, size_t about_size, char *why,
                                          size_t why_size);
/* Each preset's name and description (for an unknown --model). */
scree_status scree__admin_presets(const char *presets_file,
                                  void (*fn)(void *user, const char *name, const char *about),
                                  void *user, char *why, size_t why_size);
/* The RMSNorm tasks of a shapes file ({"shapes": [[rows, cols], ...],
 * "dtypes": [...]}, docs/cli.md): every shape in every dtype of the file
 * (bf16 if it names none). Returns the number of shapes, or -1 with the
 * reason ("PATH: line 3, column 8: ...") in why. */
int scree__admin_shapes_file_tasks(const char *path,
                                   int (*fn)(void *user, const scree__admin_task *t),
                                   void *user, char *why, size_t why_size);
/* The misses of c for arch and op (NULL: all), most frequent first, as
 * tasks; misses this build cannot read (an unknown op, a bucket or
 * variant that does not parse) are counted in *unreadable, the first
 * named in why. */
scree_status scree__admin_miss_tasks(scree__admin_cache *c, const char *arch, const char *op,
                                     int (*fn)(void *user, const scree__admin_task *t),
                                     void *user, int *unreadable, char *why, size_t why_size);
/* "op bucket variant": how a dry run names a task, and what shards rank. */
void scree__admin_task_id(const scree__admin_task *t, char *buf, size_t size);

typedef struct scree__admin_tune_opts {
  int explore; /* the whole config space, not only the safelist's */
  int force;   /* retune what the user cache holds */
  int reps;    /* timed runs per candidate (0: the tuner's default) */
  void (*progress)(void *user, int done, int total, const char *stage);
  void *user;
} scree__admin_tune_opts;

typedef struct scree__admin_tuned {
  scree__admin_key key;
  int cached;          /* the user cache held it (or another process tuned it meanwhile) */
  char config[128];    /* the winner, or the cached config */
  scree_status st;
  char why[512];       /* st != SCREE_OK: the tuner's reason */
  double median_us, spread_us, default_us, flops, bytes, seconds;
  int candidates, timed, failed, known_bad;
  char problem[256];   /* what the candidates were timed on */
  int compiled, reused; /* candidates compiled by this tune, and taken from the process's
                           compiled candidates (scree__tune_result) */
} scree__admin_tuned;
/* Tunes task t on ctx's GPU and stores the winner in its user cache, or
 * finds it there (unless force); a task from a miss deletes the miss
 * either way. Thread-safe across contexts: prewarm --devices runs one per
 * GPU. */
void scree__admin_tune(scree_context *ctx, const scree__admin_task *t,
                       const scree__admin_tune_opts *o, scree__admin_tuned *out);

/* ---- the demo ---------------------------------------------------------------- */

/* An op, a shape in its own fields, a variant, and for varlen ops the
 * sequence lengths (NULL: the op generates a batch for the shape). */
typedef struct scree__admin_demo_case {
  const char *op, *shape, *variant;
  const int64_t *lens;
  int nlens;
} scree__admin_demo_case;

/* 0 if the case's op, shape and variant parse, else -1 with why. */
int scree__admin_demo_check(const scree__admin_demo_case *dc, char *why, size_t why_size);

typedef struct scree__admin_demo_result {
  int stage;            /* how far it got: 1 first call, 2 checked, 3 timed */
  char desc[256];       /* the problem */
  double first_ms;      /* the first call: tune or compile, load, run */
  char config[128];     /* the config the timed calls run */
  char check_desc[256]; /* the problem it was checked on */
  size_t check_elems;   /* output elements within tolerance */
  double us;            /* median of 100 calls through the public entry */
  double flops, bytes;  /* of one call */
  char why[1024];       /* why it stopped where it did */
} scree__admin_demo_result;
/* Runs a case through the op's public entry on ctx (GPU): the first call,
 * a check of the config its plan runs against the CPU reference on the
 * op's edge-case batch, then the median of 100 calls. SCREE_OK when all
 * three passed; SCREE_ERROR_WRONG_ANSWER when the check failed. */
scree_status scree__admin_demo(scree_context *ctx, const scree__admin_demo_case *dc,
                               scree__admin_demo_result *r);
/* The device-to-device copy bandwidth (GB/s) on ctx's GPU, 0 if unknown. */
double scree__admin_copy_gbps(scree_context *ctx);

typedef struct scree__admin_offline_compile {
  char config[128];  /* the op's default config for the case's shape on the arch */
  char target[16];   /* "sm_90a" */
  size_t cubin_size;
  double ms;
} scree__admin_offline_compile;
/* Without a GPU: compiles the case's default config for arch with NVRTC.
 * SCREE_ERROR_NO_NVRTC, SCREE_ERROR_COMPILE (the log in why). */
scree_status scree__admin_compile_default(const scree__admin_demo_case *dc, const char *arch,
                                          scree__admin_offline_compile *r, char *why,
                                          size_t why_size);

/* ---- facts for doctor -------------------------------------------------------- */

typedef struct scree__admin_nvrtc {
  int loaded;
  int major, minor;
  char name[256];    /* the library name that loaded ("libnvrtc.so.13") */
  char file[1024];   /* the file it was loaded from, "" if unknown */
  char why[512];     /* !loaded: every name tried and why each failed */
} scree__admin_nvrtc;
void scree__admin_nvrtc_info(scree__admin_nvrtc *n);

typedef struct scree__admin_cache_facts {
  int opened;            /* 0: why says why (a missing file is "no cache at ...") */
  int winners, stale, misses, bad, refused;
  int trusted;           /* would pass the check of shipped caches (docs/security.md) */
  char trust_why[1024];  /* !trusted: why not */
  char why[1024];
} scree__admin_cache_facts;
/* Opens path read-only and counts its rows, and runs the trust check. */
void scree__admin_cache_facts_of(const char *path, scree__admin_cache_facts *f);

/* The compile threads (SCREE_JOBS, else the usable CPUs), and where that
 * number came from in how. */
int scree__admin_jobs(char *how, size_t how_size);

/* ---- the tuning worker --------------------------------------------------------- */

/* Serves the tuner's requests on fds in and out with ctx's device
 * (scree-tune worker); returns the process's exit status (3: the CUDA
 * context broke; the caller should _exit). */
int scree__admin_worker(scree_context *ctx, int in, int out);

#endif
