/*
 * internal.h - what the runtime's files share. Not API.
 *
 * Layers, from the call down (docs/architecture.md):
 *   api (scree_rmsnorm in ops/rmsnorm.c)  validate args, pick the variant
 *   dispatch (dispatch.c)                 variant + bucket -> config -> kernel
 *   kernels (kernels.c)                   config -> cubin (NVRTC) -> CUfunction
 *   cuda_api.c                            dlopen'd driver and NVRTC tables
 */
#ifndef SCREE_INTERNAL_H
#define SCREE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>

#include "cuda_api.h"
#include "scree.h"

#define SCREE__MAX_FIELDS 8
#define SCREE__MAX_VARIANT 8

/* One point of an op's config space: values in the op's field order. */
typedef struct scree__config {
  int v[SCREE__MAX_FIELDS];
} scree__config;

/* The compile-time facts of a call other than the config: dtypes, causal
 * flag, head size... in the op's variant field order. */
typedef struct scree__variant {
  int v[SCREE__MAX_VARIANT];
} scree__variant;

/* One tunable field of an op: its name in config strings ("tpr"), the macro
 * the kernel reads ("SCREE_TPR") and the values the search space holds. */
typedef struct scree__field {
  const char *name;
  const char *macro;
  int nvalues;
  int values[16];
} scree__field;

/* A variant field: its name, the macro, and whether its value is a dtype
 * code (printed as "fp16") or a plain integer. */
typedef struct scree__vfield {
  const char *name;
  const char *macro;
  int is_dtype;
} scree__vfield;

typedef struct scree__op scree__op;
struct scree__kernel;

/* One device buffer of a call, as the tuner allocates it. */
#define SCREE__MAX_BUFS 8
typedef struct scree__buf {
  size_t count;
  scree_dtype dtype;
  int is_output;
} scree__buf;

/* Host-side descriptor of an op. One per op file, listed in registry.c. */
struct scree__op {
  const char *name;        /* "rmsnorm" */
  const char *source;      /* kernel file under kernels/, "rmsnorm.cu" */
  const char *entry;       /* extern "C" kernel name */
  /* 1 if the kernel uses instructions of an arch-specific target (wgmma,
   * setmaxnreg): on sm_90 it is then compiled for sm_90a. */
  int arch_specific;
  int nfields;
  const scree__field *fields;
  int nvfields;
  const scree__vfield *vfields;
  /* Rejects an impossible config before any compile is spent: returns 1 if
   * `cfg` may compile and run for `var`, else 0 with the reason in `why`.
   * Mirrors the kernel's static_asserts. */
  int (*check)(const scree__config *cfg, const scree__variant *var, char *why,
               size_t why_size);
  /* The default config for an architecture (sm as 80, 90...) and a call
   * (`args` is the op's args struct; NULL asks for a shape-free default). */
  void (*default_config)(int sm, const scree__variant *var, const void *args,
                         scree__config *out);
  /* Adjusts a config to what this particular call allows (e.g. a narrower
   * vector width for a misaligned row stride). May leave it unchanged. */
  void (*adapt)(scree__config *cfg, const scree__variant *var,
                const void *args);
  /* Grid, block, shared memory and kernel parameters; launches. */
  scree_status (*launch)(scree_context *ctx, const struct scree__kernel *k,
                         const scree__config *cfg, const void *args,
                         CUstream stream);

  /* ---- tuning (docs/adding-an-op.md) ---- */
  size_t args_size; /* sizeof the op's public args struct */
  /* The shape bucket of a call as an integer (the hot path's key); 0 is
   * never returned. Calls in one bucket share one tuned config. */
  uint64_t (*bucket_key)(const void *args);
  /* The bucket's stable text form, used as the cache key
   * ("rows<=16384,cols=4096"), and its parser (0 on success). */
  void (*bucket_str)(uint64_t key, char *buf, size_t size);
  int (*bucket_parse)(const char *s, uint64_t *key);
  /* A small integer naming what `adapt` will change for this call (e.g.
   * the widest aligned vector); part of the in-memory plan key. */
  int (*adapt_class)(const scree__variant *var, const void *args);
  /* Fills the shape fields of `args` (pointers zero) with the shape a
   * bucket is tuned on. `check` != 0 asks for a smaller shape of the same
   * bucket whose CPU reference is quick, for correctness checks. */
  void (*representative)(uint64_t key, const scree__variant *var, int check,
                         void *args);
  /* 1 if `cfg` is worth timing for this bucket (cheap pruning of configs
   * that cannot win, e.g. threads that would have nothing to do). */
  int (*worth_timing)(const scree__config *cfg, const scree__variant *var,
                      const void *args);
  /* Device buffers of a call: counts (elements), dtypes and which are
   * written; returns how many (at most SCREE__MAX_BUFS). */
  int (*buffers)(const scree__variant *var, const void *args,
                 scree__buf *out);
  /* Points the args at buffers given in `buffers` order. */
  void (*bind)(void *args, const scree_devptr *ptrs);
  /* Optional (may be NULL): reshapes random check inputs so that likely
   * kernel mistakes show beyond the tolerance (rows of very different
   * scale, large values in tails); host copies in `buffers` order. */
  void (*shape_inputs)(const void *args, void *const *host);
  /* The CPU reference, on host copies of the buffers in `buffers` order;
   * writes the output buffers. */
  void (*reference)(const void *args, void *const *host);
  /* The causal flag of a call, for the cache key (0 for most ops). */
  int (*causal)(const scree__variant *var);
  /* The call's shape as text ("rows=16000,cols=4096"), recorded with a
   * miss so the offline tuner sees real shapes. */
  void (*shape_str)(const void *args, char *buf, size_t size);
};


/* registry.c */
extern const scree__op *const scree__ops[];
const scree__op *scree__op_find(const char *name);

/* A loaded kernel: the module and its entry point. */
typedef struct scree__kernel {
  CUmodule module;
  CUfunction fn;
} scree__kernel;

/* One in-memory kernel table entry, keyed by op, config, variant, arch. */
typedef struct scree__kentry {
  const scree__op *op;
  scree__config cfg;
  scree__variant var;
  scree__kernel k;
  uint64_t hash;
  int used;
} scree__kentry;

/* An in-memory plan: what a (op, variant, bucket, adapt class) runs. */
typedef struct scree__plan {
  const scree__op *op;
  scree__variant var;
  uint64_t bucket;
  int aclass;
  scree__config cfg; /* adapted */
  scree__kernel k;
  uint64_t hash;
  int used;
} scree__plan;

struct scree__cache_stack;
struct scree__safelist;

struct scree_context {
  const scree__cu_api *cu;
  const scree__nvrtc_api *nvrtc; /* NULL if NVRTC is unavailable */
  CUdevice dev;
  CUcontext pctx;                /* the device's primary context */
  scree_device_info info;
  int sm;                        /* 80, 90 ... */
  char arch[16];                 /* "sm_90" (see scree__target_arch) */
  int driver_version;
  int nvrtc_major, nvrtc_minor;

  scree_log_level log_level;
  scree_log_fn log_fn;
  void *log_user;
  scree_miss_policy miss_policy;

  pthread_mutex_t lock;          /* guards the kernel and plan tables */
  scree__kentry *ktab;           /* open addressing, power-of-two size */
  size_t ktab_cap, ktab_len;
  scree_counters counters;       /* updated with relaxed atomics */

  scree__plan *plans;            /* open addressing, guarded by lock */
  size_t plan_cap, plan_len;

  struct scree__cache_stack *caches; /* NULL when disabled */
  struct scree__safelist *safelist;  /* NULL when none applies */
  pthread_mutex_t tune_lock;     /* one tuning run at a time */
  struct scree__cubin_memo *cubin_memo; /* tuner.c: compiled candidates */

  pthread_mutex_t err_lock;     /* guards err */
  int has_err;                  /* err is not empty (atomic) */
  char err[4096];
};

/* util.c: small shared helpers. */
/* snprintf into an optional reason buffer (why may be NULL). */
void scree__set_why(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A file embedded at build time (cmake/embed_kernels.cmake). */
typedef struct scree__embedded {
  const char *name;
  const unsigned char *data;
  size_t size;
} scree__embedded;
/* A malloc'd, NUL-terminated copy of the embedded file `name`, or NULL. */
char *scree__embedded_text(const scree__embedded *table, size_t count,
                           const char *name);
/* Runs fn(user, i) for every i in [0, n) on up to `threads` threads (0:
 * the online CPUs, at most 32; the caller's thread works too) and returns
 * when all are done. fn must be thread-safe. */
void scree__parallel_for(int n, int threads, void (*fn)(void *user, int i),
                         void *user);

/* A whole file as a malloc'd NUL-terminated string, or NULL (errno set). */
char *scree__read_text(const char *path);
/* Sorts v and returns its median. */
double scree__median(float *v, int n);
/* Reads {"shapes": [[rows, cols], ...], "dtypes": ["fp16", ...]} (the
 * dtypes list is optional). Returns the number of shapes (those past cap are
 * counted, not stored) or -1 with the reason in why. */
int scree__parse_shapes(const char *json, long (*shapes)[2], int cap,
                        scree_dtype *dtypes, int dcap, int *ndtypes, char *why,
                        size_t why_size);

/* context.c: messages, logging, CUDA context scope. */
/* A context with no device, for argument checks and compile-only work
 * (tests, the CLI on a machine without a GPU). Calls that would launch
 * return SCREE_ERROR_NO_DEVICE. Free with scree_destroy. */
scree_context *scree__context_offline(void);
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
/* Maps a driver error to a status and records "what: CUDA_ERROR_X (text)". */
scree_status scree__cu_fail(scree_context *ctx, CUresult r, scree_status st,
                            const char *what);

/* kernels.c: kernel sources, compiling, the in-memory kernel table. */
/* The embedded (or on-disk, see SCREE_KERNEL_DIR) source of a kernel file,
 * with common.cuh prepended. NULL if unknown. Owned by scree. */
const char *scree__kernel_source(const char *file);
/* Renders "tpr=128,rows=2,vec=8,cache=4". */
void scree__config_str(const scree__op *op, const scree__config *cfg,
                       char *buf, size_t size);
/* Parses the form above; every field must appear once. 0 on success, else
 * -1 with the reason in `why`. */
int scree__config_parse(const scree__op *op, const char *s,
                        scree__config *cfg, char *why, size_t why_size);
/* Every point of op's config space (the product of the field values, not
 * yet checked), in a fixed order; writes up to cap and returns the count. */
int scree__config_space(const scree__op *op, scree__config *out, int cap);
/* Renders the variant: "x=fp16,w=fp16,y=fp16". */
void scree__variant_str(const scree__op *op, const scree__variant *var,
                        char *buf, size_t size);
/* Compiles op/config/variant for `arch` ("sm_90") with NVRTC into a freshly
 * malloc'd cubin. On failure returns SCREE_ERROR_COMPILE (or NO_NVRTC) and
 * puts the NVRTC log into `log` (malloc'd, may be NULL). Needs no GPU.
 * Thread-safe. */
scree_status scree__compile(const scree__nvrtc_api *nvrtc, const scree__op *op,
                            const scree__config *cfg,
                            const scree__variant *var, const char *arch,
                            void **cubin, size_t *cubin_size, char **log);
/* The NVRTC target for op on this context: ctx->arch, or "sm_90a" for an
 * arch-specific op on sm_90. Writes into buf (16 bytes) and returns it. */
const char *scree__target_arch(const scree_context *ctx, const scree__op *op,
                               char *buf);
/* Finds or builds (compile + load) the kernel. Thread-safe. */
scree_status scree__kernel_get(scree_context *ctx, const scree__op *op,
                               const scree__config *cfg,
                               const scree__variant *var, scree__kernel *out);
void scree__kernel_table_free(scree_context *ctx);
/* Loads a cubin (from a cache or the tuner) as op/config/variant and puts
 * it in the table; an existing entry wins. Thread-safe. */
scree_status scree__kernel_from_cubin(scree_context *ctx, const scree__op *op,
                                      const scree__config *cfg,
                                      const scree__variant *var,
                                      const void *cubin, scree__kernel *out);
/* Loads a cubin into a module of the caller's own, outside the table (the
 * caller unloads k->module). */
scree_status scree__module_load(scree_context *ctx, const scree__op *op,
                                const void *cubin, scree__kernel *k);
/* sha256 hex of an op's kernel source as compiled (common.cuh + file),
 * computed once per process. "" if the source is missing. */
const char *scree__source_hash(const scree__op *op);

/* tuner.c: frees what tuning kept for later tunes. */
void scree__tuner_free(scree_context *ctx);

/* dispatch.c: which config a call runs, then the launch. */
void scree__plan_table_free(scree_context *ctx);
scree_status scree__dispatch(scree_context *ctx, const scree__op *op,
                             const scree__variant *var, const void *args,
                             void *stream);
/* Runs exactly `cfg` (no adapt, no lookup): the tuner's and tests' path.
 * The caller has validated `args` and made sure `cfg` suits them. */
scree_status scree__run_config(scree_context *ctx, const scree__op *op,
                               const scree__config *cfg,
                               const scree__variant *var, const void *args,
                               void *stream);

/* dtype.c: host-side conversions (round to nearest even). */
float scree__half_to_float(uint16_t h);
uint16_t scree__float_to_half(float f);
float scree__bf16_to_float(uint16_t h);
uint16_t scree__float_to_bf16(float f);
/* Element i of a buffer of `dtype`, as double; and the store back. */
double scree__load_elem(const void *p, scree_dtype dtype, size_t i);
void scree__store_elem(void *p, scree_dtype dtype, size_t i, double v);

/* ref/: CPU references, double accumulation. */
void scree__ref_rmsnorm(const scree_rmsnorm_args *a, const void *x,
                        const void *w, void *y);

/* Generic tolerance check used by tests and the tuner: |got - ref| <=
 * atol + rtol * |ref| for all n elements of `dtype`; NaN never passes.
 * Returns the number of elements that fail; the worst index goes to
 * *worst (if not NULL). */
size_t scree__compare(const void *got, const void *ref, scree_dtype dtype,
                      size_t n, double rtol, double atol, size_t *worst);
/* The stated tolerance of an output dtype for the row-wise ops. */
void scree__tolerance(scree_dtype dtype, double *rtol, double *atol);

#endif
