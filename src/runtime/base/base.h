/*
 * base.h - the bottom layer: what every other layer uses. Not API.
 *
 * Layers, lowest first (docs/architecture.md). A file includes headers of
 * its own layer and of the layers below it, never above; a CPU test
 * (tests/test_layers.cmake) checks every #include.
 *
 *   base     util, dtype, status, sha256, the dlopen'd driver and NVRTC,
 *            diagnostics (fail/log, context enter and leave), hash table,
 *            per-stream workspace                              src/runtime/base/
 *   ops      op descriptors, references, registry, config /
 *            variant / bucket / shape strings                   src/runtime/ops/
 *   kernels  sources, NVRTC compile, module load, module table  src/runtime/jit/
 *   store    SQLite cache, safelists, cache keys                src/runtime/store/
 *   tuner    problem harness (check, time), tuning, verify       src/tuner/
 *   api      context, dispatch, public op entries, admin.h      src/runtime/api/
 *   cli      scree-tune: scree.h and api/admin.h only           src/cli/
 *
 * The context struct lives here because every layer reports failures
 * through it; the state each higher layer keeps in a context is an opaque
 * pointer here, created and freed by that layer.
 */
#ifndef SCREE_BASE_H
#define SCREE_BASE_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "base/cuda_api.h"
#include "scree.h"

struct scree__ltab;        /* base/: a table threads share (htab.c) */
struct scree__cache_stack; /* store/: user and shipped caches */
struct scree__safelist;    /* store/: this arch's safelist */
struct scree__tuner;       /* tuner/: its lock and worker */
struct scree__workspaces;  /* base/: per-stream device scratch */

struct scree_context {
  const scree__cu_api *cu;       /* NULL for an offline context */
  const scree__nvrtc_api *nvrtc; /* NULL if NVRTC is unavailable */
  CUdevice dev;
  CUcontext pctx;                /* the device's primary context */
  scree_device_info info;
  int sm;                        /* 80, 90 ... */
  char arch[16];                 /* "sm_90" */
  int driver_version;
  int nvrtc_major, nvrtc_minor;

  scree_log_level log_level;
  scree_log_fn log_fn;
  void *log_user;
  scree_miss_policy miss_policy;
  int validate;                  /* check device-side arguments on the host */
  int batch_invariant;           /* configs per sequence, not per batch (docs/cache.md) */

  scree_counters counters;       /* updated with relaxed atomics */

  pthread_mutex_t err_lock;      /* guards err */
  int has_err;                   /* err is not empty (atomic) */
  char err[4096];

  struct scree__ltab *modules;       /* jit/module.c: loaded modules */
  struct scree__cache_stack *caches; /* NULL when disabled */
  struct scree__safelist *safelist;  /* NULL when none applies */
  struct scree__tuner *tuner;
  struct scree__ltab *plans;         /* api/dispatch.c: the per-call plan table */
  struct scree__workspaces *ws;
};

/* ---- util.c ------------------------------------------------------------ */

/* snprintf into an optional reason buffer (why may be NULL). */
void scree__set_why(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The code point of the well-formed UTF-8 character at p (at most n
 * bytes) in *cp and its length in bytes, or 0 if the bytes at p are not
 * one (a stray or truncated byte, an overlong form, a surrogate). */
int scree__utf8_char(const char *p, size_t n, unsigned *cp);
/* 1 if code point cp must not reach a terminal or a line-based file as it
 * is: C0 and C1 controls, DEL, the line and paragraph separators and the
 * bidirectional formatting controls. */
int scree__unsafe_char(unsigned cp);
/* Copies text that came from a file (a cache, a safelist) into dst (size
 * bytes, terminated when size > 0) with every unsafe character (above) and
 * every byte that is not well-formed UTF-8 written as \xNN, one per byte;
 * the rest passes. The copy is cut, if it must be, between whole
 * characters and escapes. Returns dst. */
char *scree__escape_text(char *dst, size_t size, const char *src);
/* A file embedded at build time (cmake/embed_kernels.cmake). */
typedef struct scree__embedded {
  const char *name;
  const unsigned char *data;
  size_t size;
} scree__embedded;
/* A malloc'd, NUL-terminated copy of the embedded file `name`, or NULL. */
char *scree__embedded_text(const scree__embedded *table, size_t count,
                           const char *name);
/* Calls fn(user, "embedded:<name>", text) with a NUL-terminated copy of
 * each file of the table (fn may change it; it is freed after), in order,
 * while fn returns SCREE_OK; returns
 * what fn last returned, or SCREE_ERROR_OUT_OF_MEMORY when a copy cannot
 * be made. */
scree_status scree__embedded_each(const scree__embedded *table, size_t count,
                                  scree_status (*fn)(void *user, const char *name, char *text),
                                  void *user);
/* Calls fn(user, path) for each non-empty element of a ':'-separated list
 * (an environment variable's), in order, while fn returns SCREE_OK;
 * returns what fn last returned, or SCREE_ERROR_OUT_OF_MEMORY. */
scree_status scree__path_list_each(const char *list,
                                   scree_status (*fn)(void *user, const char *path),
                                   void *user);
/* Runs fn(user, i) for every i in [0, n) on up to `threads` threads (0:
 * scree__jobs(); the caller's thread works too) and returns when all are
 * done. fn must be thread-safe. */
void scree__parallel_for(int n, int threads, void (*fn)(void *user, int i),
                         void *user);

/* ---- jobs.c: how many threads compile ---------------------------------------
 * $SCREE_JOBS when it is a number from 1 to SCREE__MAX_JOBS; else the CPUs
 * this process may run on (its affinity mask, lowered to a cgroup CPU
 * quota rounded up), at most SCREE__DEFAULT_JOBS_MAX. how (may be NULL)
 * says where the number came from, and that an invalid SCREE_JOBS was
 * ignored. Read on every call. */
#define SCREE__MAX_JOBS 1024
#define SCREE__DEFAULT_JOBS_MAX 32
int scree__jobs(char *how, size_t how_size);
/* The CPU quota of the process's cgroup in CPUs (cgroup v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us; the smallest from its cgroup up
 * to the top of the hierarchy), or 0 when none is set. Paths are read
 * under root ("" or NULL: the real /proc and /sys; tests pass a tree). */
double scree__cgroup_cpus(const char *root);
/* A whole regular file as a malloc'd NUL-terminated string, or NULL with
 * errno set and the reason, naming the path, in why ("<path>: a directory,
 * not a regular file"; why may be NULL). Directories, devices, FIFOs and
 * sockets are refused without being read; a file holding a NUL byte is
 * refused with EINVAL ("<path>:<line>: a NUL byte ..."). */
char *scree__read_text(const char *path, char *why, size_t why_size);
/* Sorts v and returns its median (0 when n is 0). */
double scree__median(float *v, int n);
/* Seconds on the monotonic clock. */
double scree__now(void);
/* A 64-bit seed from the clock, the pid and a process-wide counter: each
 * call differs. */
uint64_t scree__fresh_seed(void);
/* xorshift64: the next value of *s (never 0 for a nonzero state). */
uint64_t scree__rand(uint64_t *s);
/* Normal(0, 1) from *s. */
double scree__rand_normal(uint64_t *s);
/* A length log-uniform in [hi / 8, hi], rounded, in [1, hi]: the sequence
 * lengths of a realistic generated batch (one draw from *s). */
int64_t scree__rand_len(uint64_t *s, int64_t hi);
/* The tuning batch of a packed-sequence op (the ragged softmax and its
 * backward): the first sequence at the longest length, the rest
 * scree__rand_len(longest), until their sum is total (the last one
 * trimmed), at most cap sequences; longest below 1 counts as 1, a total
 * below longest as longest. Deterministic per seed. Writes the lengths to
 * l[0..cap) and returns their count. */
int scree__tune_lens(int64_t total, int64_t longest, uint64_t seed, int64_t *l, int cap);
/* The most lengths scree__check_lens writes. */
#define SCREE__CHECK_LENS_MAX 22
/* The check batch of a packed-sequence op with rows of cols elements:
 * lengths 0 and 1, one long sequence (past a small stage: streamed), and
 * lengths just off the token tiles and groups (powers of two up to 256),
 * each capped at longest (1000 when longest is below 1, not given), the
 * long one at 1000 too; taken in this order while they fit a budget of
 * about 2^24 elements (at least 256 tokens), so a CPU reference stays well
 * under a second. Writes at most SCREE__CHECK_LENS_MAX lengths to l and
 * returns their count. */
int scree__check_lens(int64_t cols, int64_t longest, int64_t *l);

/* ---- dtype.c ------------------------------------------------------------- */

/* Element types of internal buffers: the public dtypes plus int32 (the
 * cu_seqlens of varlen ops) and int64 (cross-entropy's targets). */
#define SCREE__DTYPE_I32 16
#define SCREE__DTYPE_I64 17
size_t scree__elem_size(int dtype);
/* "fp16", ..., "int32", "int64"; "unknown" for another code. */
const char *scree__elem_name(int dtype);
float scree__half_to_float(uint16_t h);
uint16_t scree__float_to_half(float f);
float scree__bf16_to_float(uint16_t h);
uint16_t scree__float_to_bf16(float f);
/* Element i of a buffer of `dtype` (a public dtype, SCREE__DTYPE_I32 or _I64), as
 * double; and the store back (rounding to nearest even). */
double scree__load_elem(const void *p, int dtype, size_t i);
void scree__store_elem(void *p, int dtype, size_t i, double v);
/* v as scree__store_elem would store it in `dtype` (a public dtype),
 * loaded back: to float, then for fp16 and bf16 to nearest even (what the
 * kernels' cvt.rn conversions of a float do). NaN for another dtype. */
double scree__round_elem(int dtype, double v);
/* |got - ref| <= atol + rtol * |ref| for all n elements of `dtype`, where
 * ref = -inf/+inf must be matched exactly; NaN never passes. Returns the
 * number of elements that fail; the worst index goes to *worst (if not
 * NULL). */
size_t scree__compare(const void *got, const void *ref, int dtype, size_t n,
                      double rtol, double atol, size_t *worst);
/* The stated tolerance of one rounding to an output dtype (the row-wise
 * ops' bound: the kernel and the double reference each round once). */
void scree__tolerance(scree_dtype dtype, double *rtol, double *atol);

/* ---- htab.c: one open-addressing hash table for fixed-size keys ----------
 * Keys are compared bytewise: zero them (padding too) before filling.
 * Not thread-safe: callers hold their own lock. Values move when the table
 * grows: copy them out before unlocking. */
typedef struct scree__htab {
  unsigned char *slots;
  size_t cap, len, key_size, val_size, slot_size;
} scree__htab;
void scree__htab_init(scree__htab *t, size_t key_size, size_t val_size);
/* The value stored under key, or NULL. */
void *scree__htab_find(const scree__htab *t, const void *key);
/* Stores a copy of val under key unless the key is present; returns the
 * stored value (the existing one if present), or NULL when out of memory. */
void *scree__htab_insert(scree__htab *t, const void *key, const void *val);
/* Iterates: start with *pos = 0; returns 0 at the end. */
int scree__htab_next(const scree__htab *t, size_t *pos, const void **key,
                     void **val);
void scree__htab_free(scree__htab *t);
/* A table that threads share (the module table, the plan table): a table
 * behind its own mutex. Each call holds the lock, and values are copied in
 * and out under it. */
typedef struct scree__ltab {
  pthread_mutex_t lock;
  scree__htab t; /* under lock */
} scree__ltab;
/* An empty table; NULL when out of memory. */
scree__ltab *scree__ltab_new(size_t key_size, size_t val_size);
/* Frees the table (NULL: nothing to do). What its values hold is the
 * owner's to release first (scree__htab_next on t). */
void scree__ltab_free(scree__ltab *lt);
/* 1 with the value under key copied into val, or 0 when there is none. */
int scree__ltab_get(scree__ltab *lt, const void *key, void *val);
/* Stores a copy of val under key: 1. 0 when the key is there already
 * (another thread stored it first), its value copied into have unless have
 * is NULL; -1 when out of memory. */
int scree__ltab_put(scree__ltab *lt, const void *key, const void *val, void *have);
uint64_t scree__hash_bytes(const void *p, size_t n);

/* ---- diag.c: messages, logging, the CUDA context scope --------------------- */

/* A context with no device, for argument checks and compile-only work
 * (tests, the CLI on a machine without a GPU). Calls that would launch
 * return SCREE_ERROR_NO_DEVICE. Free with scree_destroy. */
scree_context *scree__context_offline(void);
/* Records a failure message on the context and returns st. */
scree_status scree__fail(scree_context *ctx, scree_status st, const char *fmt,
                         ...) __attribute__((format(printf, 3, 4)));
void scree__clear_error(scree_context *ctx);
/* The context's last failure message, copied under its lock. */
void scree__error_copy(scree_context *ctx, char *buf, size_t size);
void scree__log(scree_context *ctx, scree_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Makes the primary context current; returns 1 if it pushed one. */
int scree__ctx_enter(scree_context *ctx);
void scree__ctx_leave(scree_context *ctx, int pushed);
/* Copies bytes of device memory at src to the host once the work queued on
 * stream is done (making the primary context current): the device-side
 * arguments an op checks when the context validates them. SCREE_OK, or
 * the driver's error recorded as "validate: reading <what>: ...". */
scree_status scree__read_device(scree_context *ctx, CUstream stream, void *dst, CUdeviceptr src,
                                size_t bytes, const char *what);
/* Maps a driver error to a status and records "what: CUDA_ERROR_X (text)". */
scree_status scree__cu_fail(scree_context *ctx, CUresult r, scree_status st,
                            const char *what);
static inline void scree__count(uint64_t *counter) {
  __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

/* ---- workspace.c: device scratch for kernels that need it -----------------
 * One buffer per stream, grown on demand and kept until the context is
 * destroyed; work queued on one stream runs in order, so a buffer is never
 * used by two launches at once. Needs the primary context current.
 * Thread-safe. */
scree_status scree__workspace(scree_context *ctx, CUstream stream,
                              size_t bytes, CUdeviceptr *out);
/* SCREE__COUNTERS ints per stream, apart from the scratch (which the next
 * op's launch overwrites), that are zero whenever a launch on the stream
 * starts: zeroed on the stream when first handed out, and a kernel that
 * uses them must leave them zero when it ends (the last of its CTAs to
 * finish resets what they counted). For a persistent grid's work counter
 * without a launch to clear it. */
#define SCREE__COUNTERS 4
scree_status scree__stream_counters(scree_context *ctx, CUstream stream, CUdeviceptr *out);
/* bytes (at least) of per-stream device memory that is zero whenever a
 * launch on the stream starts, under the same rule as the counters (a
 * kernel leaves what it used zero): per-group merge counters of a kernel
 * with no launch before it to clear them. Grows on demand (waiting for
 * the stream's queued work, then zeroed on the stream). */
scree_status scree__stream_zeroed(scree_context *ctx, CUstream stream, size_t bytes,
                                  CUdeviceptr *out);
void scree__workspace_free(scree_context *ctx);

#endif
