/*
 * scree.h - the public C API of scree, an autotuning GPU kernel runtime for
 * packed, variable-length transformer batches.
 *
 * This header is the whole API: what is not declared here is not API.
 * It needs no CUDA header. Device pointers are passed as integers
 * (scree_devptr) and streams as `void *` (a CUstream or cudaStream_t, NULL
 * for the legacy default stream), so any language with a C FFI can bind it.
 *
 * Ownership: every handle scree creates is destroyed by its matching
 * destroy function; strings returned by scree are owned by scree: static
 * ones live forever, and scree_last_error's copy belongs to the calling
 * thread until that thread calls scree_last_error again.
 * Callers own every buffer they pass in; scree never frees them.
 *
 * Thread safety: unless a declaration says otherwise, functions are safe to
 * call concurrently on *different* contexts. Functions marked "thread-safe"
 * may also be called concurrently on the *same* context. scree never calls
 * exit(), prints only through its log (warnings go to stderr by default:
 * set log_level to SCREE_LOG_OFF or give a log_fn), and never changes the
 * CUDA context that is current on the calling thread (it pushes and pops the
 * device's primary context around its own work when needed).
 *
 * Environment: SCREE_MISS_POLICY and SCREE_LOG_LEVEL, when set, take
 * precedence over the matching options, and SCREE_NO_CACHE=1,
 * SCREE_NVRTC_OPTIONAL=1 and SCREE_VALIDATE=1 turn those options on, so that an operator can
 * change a deployed program's behaviour without rebuilding it; SCREE_CACHE_DIR and SCREE_CACHE_PATH
 * apply where the cache options are NULL, and SCREE_CACHE_STRICT_MODES=0
 * accepts shipped caches that other users could change (docs/security.md;
 * docs/architecture.md lists every variable).
 */
#ifndef SCREE_H
#define SCREE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  if defined(SCREE_BUILDING_SHARED)
#    define SCREE_EXTERN __declspec(dllexport)
#  elif defined(SCREE_USING_SHARED)
#    define SCREE_EXTERN __declspec(dllimport)
#  else
#    define SCREE_EXTERN
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define SCREE_EXTERN __attribute__((visibility("default")))
#else
#  define SCREE_EXTERN
#endif

#define SCREE_VERSION_MAJOR 0
#define SCREE_VERSION_MINOR 1
#define SCREE_VERSION_PATCH 0
#define SCREE_VERSION_STRING "0.1.0"
/* Encoded as major * 10000 + minor * 100 + patch. */
#define SCREE_VERSION_NUMBER \
  (SCREE_VERSION_MAJOR * 10000 + SCREE_VERSION_MINOR * 100 + SCREE_VERSION_PATCH)

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/* X(name, value, description). One list generates the enum and the strings,
 * so they cannot drift apart. Values are stable across releases. */
#define SCREE_STATUS_MAP(X)                                                    \
  X(OK, 0, "success")                                                          \
  X(ERROR_INVALID_ARGUMENT, 1, "invalid argument")                             \
  X(ERROR_UNSUPPORTED, 2, "unsupported dtype, size or feature")                \
  X(ERROR_MISALIGNED, 3, "pointer or stride not aligned for its dtype")        \
  X(ERROR_NO_DRIVER, 4, "CUDA driver unusable (too old, or failed to initialize)") \
  X(ERROR_NO_DEVICE, 5, "no usable CUDA device")                               \
  X(ERROR_NO_NVRTC, 6, "NVRTC library (libnvrtc.so) not available")           \
  X(ERROR_COMPILE, 7, "kernel failed to compile")                              \
  X(ERROR_LOAD, 8, "compiled kernel failed to load on the device")             \
  X(ERROR_LAUNCH, 9, "kernel launch failed")                                   \
  X(ERROR_CUDA, 10, "CUDA driver call failed")                                 \
  X(ERROR_OUT_OF_MEMORY, 11, "out of memory")                                  \
  X(ERROR_INVALID_CONFIG, 12, "kernel config violates the op's constraints")   \
  X(ERROR_CACHE, 13, "tuning cache error")                                     \
  X(ERROR_NOT_FOUND, 14, "not found")                                          \
  X(ERROR_CACHE_MISS, 15, "no tuned config cached (miss policy error, or a pinned cache)") \
  X(ERROR_WRONG_ANSWER, 16, "kernel output disagrees with the CPU reference")  \
  X(ERROR_TIMEOUT, 17, "kernel ran past its time limit")                       \
  X(ERROR_IO, 18, "file input/output error")                                   \
  X(ERROR_PARSE, 19, "parse error")                                            \
  X(ERROR_INTERNAL, 20, "internal error")

typedef enum scree_status {
#define SCREE_STATUS_ENUM_(name, value, text) SCREE_##name = value,
  SCREE_STATUS_MAP(SCREE_STATUS_ENUM_)
#undef SCREE_STATUS_ENUM_
} scree_status;

/* A static, never-NULL description of `status`. Unknown codes map to
 * "unknown scree status". Thread-safe. */
SCREE_EXTERN const char *scree_status_str(scree_status status);

/* The enum's name without the prefix ("ERROR_NO_DEVICE"), static, never
 * NULL ("UNKNOWN" for unknown codes). Thread-safe. */
SCREE_EXTERN const char *scree_status_name(scree_status status);

/* The library's version string ("0.1.0") and number. Thread-safe. */
SCREE_EXTERN const char *scree_version(void);
SCREE_EXTERN int scree_version_number(void);

/* ------------------------------------------------------------------------ */
/* Types shared by the ops                                                   */
/* ------------------------------------------------------------------------ */

/* A device address (a CUdeviceptr), as an integer. */
typedef uint64_t scree_devptr;

typedef enum scree_dtype {
  SCREE_DTYPE_FP32 = 0,
  SCREE_DTYPE_FP16 = 1,
  SCREE_DTYPE_BF16 = 2
} scree_dtype;

/* "fp32", "fp16", "bf16", or "unknown". Static. Thread-safe. */
SCREE_EXTERN const char *scree_dtype_name(scree_dtype dtype);
/* Size in bytes of one element, 0 for an unknown dtype. Thread-safe. */
SCREE_EXTERN size_t scree_dtype_size(scree_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Runtime information (no context needed)                                   */
/* ------------------------------------------------------------------------ */

typedef struct scree_device_info {
  int ordinal;
  char name[256];
  int cc_major, cc_minor; /* compute capability, e.g. 9.0 */
  char arch[16];          /* "sm_90" */
  int sm_count;
  size_t total_memory;   /* bytes */
  int l2_bytes;
  int max_smem_per_block_optin; /* bytes */
} scree_device_info;

typedef struct scree_runtime_info {
  int driver_loaded;     /* libcuda.so.1 could be opened */
  int driver_version;    /* e.g. 13000, 0 when not loaded */
  int nvrtc_loaded;
  int nvrtc_major, nvrtc_minor;
  int device_count;      /* 0 when there is no driver or no device */
  char driver_error[256]; /* why the driver or devices are unavailable, or "" */
  char nvrtc_error[256];  /* why NVRTC is unavailable, or "" */
  char nvrtc_path[256];   /* the NVRTC file that was opened (an absolute path), or "" */
} scree_runtime_info;

/* Fills `info` with what this process can see: whether the driver and NVRTC
 * load, their versions and the number of devices. Never fails on a machine
 * without a GPU; it reports it. Returns SCREE_ERROR_INVALID_ARGUMENT if
 * `info` is NULL, else SCREE_OK. Thread-safe. */
SCREE_EXTERN scree_status scree_get_runtime_info(scree_runtime_info *info);

/* Describes device `ordinal`. Returns SCREE_ERROR_NO_DEVICE (no driver
 * library, no GPU, or the ordinal out of range), SCREE_ERROR_NO_DRIVER (a
 * driver too old or failing to initialize) or SCREE_OK. Thread-safe. */
SCREE_EXTERN scree_status scree_get_device_info(int ordinal,
                                                scree_device_info *info);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct scree_context scree_context;

typedef enum scree_log_level {
  SCREE_LOG_OFF = 0,
  SCREE_LOG_ERROR = 1,
  SCREE_LOG_WARN = 2,
  SCREE_LOG_INFO = 3,
  SCREE_LOG_DEBUG = 4
} scree_log_level;

/* A log sink. `message` is one line without a trailing newline, valid only
 * during the call. May be called from any thread that uses the context and,
 * at debug level, from scree's own compile threads: it must be thread-safe. */
typedef void (*scree_log_fn)(void *user, scree_log_level level,
                             const char *message);

/* What to do when a call finds no tuned config for its shape. */
typedef enum scree_miss_policy {
  SCREE_MISS_DEFAULT = 0, /* run the architecture's default config, record the miss */
  SCREE_MISS_TUNE = 1,    /* tune now (blocking), store the winner, run it */
  SCREE_MISS_ERROR = 2    /* return SCREE_ERROR_CACHE_MISS, launch nothing */
} scree_miss_policy;

typedef struct scree_options {
  int device;                /* CUDA device ordinal; default 0 */
  /* Path of the user's read-write tuning cache; NULL selects the default
   * ($SCREE_CACHE_DIR/tune.db, else $XDG_CACHE_HOME/scree/tune.db, else
   * ~/.cache/scree/tune.db). The string is copied. */
  const char *cache_path;
  /* Read-only caches consulted after the user's, colon separated; NULL
   * selects $SCREE_CACHE_PATH ("" means none). The string is copied. */
  const char *cache_search_path;
  int disable_cache;         /* 1: no SQLite cache at all (in-memory only) */
  scree_miss_policy miss_policy; /* default SCREE_MISS_DEFAULT, or $SCREE_MISS_POLICY */
  scree_log_level log_level; /* default SCREE_LOG_WARN, or $SCREE_LOG_LEVEL */
  scree_log_fn log_fn;       /* NULL: log lines go to stderr */
  void *log_user;            /* passed to log_fn */
  /* 0 (default): scree_create fails with SCREE_ERROR_NO_NVRTC when NVRTC
   * cannot be loaded. 1 (or $SCREE_NVRTC_OPTIONAL=1): the context is created
   * anyway and serves only kernels whose cubins come from a cache; a call
   * that would need a compile returns SCREE_ERROR_NO_NVRTC. For production
   * machines that run shipped caches. */
  int nvrtc_optional;
  /* 1 (or $SCREE_VALIDATE=1): ops copy their device-side arguments (the
   * cu_seqlens of varlen ops) to the host and check them before launching,
   * at the cost of a synchronisation per call. 0 (default): they are not
   * read on the host. */
  int validate;
  /* A pinned cache (docs/cache.md#a-pinned-cache): the path of a cache file
   * that is then the only source of tuned configs, in place of the user
   * cache, the shipped caches and the shipped tuned configs. It is opened
   * read-only and never written; nothing is tuned and no miss recorded: a
   * call whose bucket it lacks fails with SCREE_ERROR_CACHE_MISS, naming
   * the op, the bucket and the file. NULL selects $SCREE_PIN (unset or ""
   * means no pin); "" means no pin, whatever $SCREE_PIN says. A pin
   * applies even when the cache is disabled (disable_cache,
   * $SCREE_NO_CACHE). A file that is missing, empty or not
   * a scree cache makes scree_create fail (SCREE_ERROR_NOT_FOUND or
   * SCREE_ERROR_CACHE) with its name in `why`. The string is copied. */
  const char *pin_path;
  /* Batch-invariant mode (docs/cache.md#batch-invariant-mode): 1 (or
   * $SCREE_BATCH_INVARIANT=1) makes every forward op give each sequence
   * (each row, for the row-wise ops) bitwise the same output whatever else
   * is in the batch and in whatever order: a call's config is chosen from
   * what is fixed for a sequence (dtypes, head sizes, columns, page size),
   * never from the batch's sizes, and paged attention splits a sequence's
   * keys into chunks of a fixed size. Costs speed where the tuned config of
   * a batch size would have been faster. 0 (default) reads
   * $SCREE_BATCH_INVARIANT (unset, "" or "0": off); -1 is off whatever
   * $SCREE_BATCH_INVARIANT says. Backward ops are not covered. */
  int batch_invariant;
} scree_options;

/* Fills `opts` with defaults (reading no environment; that happens in
 * scree_create). Thread-safe. */
SCREE_EXTERN void scree_options_init(scree_options *opts);

/* Creates a context on device `opts->device` (opts may be NULL for the
 * defaults). Loads the CUDA driver and NVRTC with dlopen, retains the
 * device's primary context, and opens the tuning cache. On failure *out is
 * NULL and the status says which layer failed: SCREE_ERROR_NO_DRIVER,
 * SCREE_ERROR_NO_DEVICE, SCREE_ERROR_NO_NVRTC (unless opts->nvrtc_optional),
 * SCREE_ERROR_OUT_OF_MEMORY. If `why` is not NULL, up to `why_size` bytes of
 * an explanation are written there (always NUL-terminated).
 * Thread-safe. */
SCREE_EXTERN scree_status scree_create(const scree_options *opts,
                                       scree_context **out, char *why,
                                       size_t why_size);

/* Destroys the context: unloads its modules and releases the primary
 * context. NULL is a harmless no-op. The caller must make sure no other
 * thread is using the context and that kernels it launched have finished
 * with any buffer the caller is about to free. */
SCREE_EXTERN void scree_destroy(scree_context *ctx);

/* A description of the last failure on this context: the NVRTC log, the
 * driver's error name, or the bad argument and its value. "" when the last
 * call succeeded. The string is a copy owned by the calling thread, valid
 * until that thread calls scree_last_error again. With several threads
 * using the context, it describes the latest call that finished on any of
 * them. Thread-safe. */
SCREE_EXTERN const char *scree_last_error(const scree_context *ctx);

/* The device this context runs on. Returns SCREE_ERROR_INVALID_ARGUMENT if
 * ctx or info is NULL, else SCREE_OK. Thread-safe. */
SCREE_EXTERN scree_status scree_context_device(const scree_context *ctx,
                                               scree_device_info *info);

/* Counters since the context was created. Thread-safe. */
typedef struct scree_counters {
  uint64_t calls;            /* op calls that launched a kernel */
  uint64_t compiles;         /* NVRTC compilations run */
  uint64_t module_loads;     /* cubins loaded onto the device */
  uint64_t memory_hits;      /* config found in the in-process table */
  uint64_t user_cache_hits;  /* config found in the user's SQLite cache */
  uint64_t shipped_cache_hits; /* config found in a read-only cache or a shipped tuned config */
  uint64_t safelist_defaults;  /* fell back to the architecture's default */
  uint64_t misses_recorded;  /* misses written to the cache */
  uint64_t tunes;            /* tuning runs started */
} scree_counters;

/* Copies the counters. Returns SCREE_ERROR_INVALID_ARGUMENT if ctx or out
 * is NULL, else SCREE_OK. Thread-safe. */
SCREE_EXTERN scree_status scree_get_counters(const scree_context *ctx,
                                             scree_counters *out);

/* ------------------------------------------------------------------------ */
/* Ops                                                                       */
/* ------------------------------------------------------------------------ */

/* Every op has one form: an args struct scree_<op>_args and the entry
 *   scree_status scree_<op>(scree_context *ctx, const scree_<op>_args *args,
 *                           void *stream);
 * The build reads the list of ops from these declarations, in this order
 * (a new op goes last; docs/adding-an-op.md). */

/* RMSNorm over packed rows: y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w
 * for t in [0, rows). Accumulates in fp32. Rows are independent, so a
 * packed varlen batch needs no cu_seqlens: pass the total token count.
 *
 *   x: [rows, cols] with row stride x_stride elements (0 means cols)
 *   w: [cols], contiguous
 *   y: [rows, cols] with row stride y_stride elements (0 means cols); y may
 *      alias x exactly (in place) but must not partially overlap it.
 *   rstd: optional fp32 [rows] (0 = not written), each row's
 *      1 / sqrt(mean(x^2) + eps), for scree_rmsnorm_backward.
 *
 * cols in [1, 65536]; rows >= 0 (0 is a no-op that launches nothing).
 * Pointers must be non-NULL and aligned to their element size; strides
 * must be >= cols. Each dtype is independently fp32, fp16 or bf16.
 * Returns SCREE_OK, or an error naming the argument (see scree_last_error);
 * on error nothing is launched and nothing is written.
 * Asynchronous with respect to the host: the kernel is queued on `stream`.
 * Thread-safe. */
typedef struct scree_rmsnorm_args {
  scree_devptr x, w, y;
  int64_t rows, cols;
  int64_t x_stride, y_stride;
  scree_dtype x_dtype, w_dtype, y_dtype;
  float eps;
  scree_devptr rstd; /* optional fp32 [rows]: 1 / sqrt(mean(x^2) + eps), for the backward */
} scree_rmsnorm_args;

SCREE_EXTERN scree_status scree_rmsnorm(scree_context *ctx,
                                        const scree_rmsnorm_args *args,
                                        void *stream);

/* The row-wise family below shares RMSNorm's conventions: rows >= 0 (0
 * launches nothing), strides in elements with 0 meaning contiguous, every
 * pointer non-NULL (unless marked optional) and aligned to its element
 * size, fp32 accumulation, and on error a status naming the argument with
 * nothing launched and nothing written. Kernels use the widest vector
 * access (up to 16 bytes) that every pointer and stride of the call
 * allows. All are asynchronous with respect to the host, and thread-safe. */

/* LayerNorm over packed rows:
 *
 *   mu = mean(x[t, :]), rstd = 1 / sqrt(mean((x[t, :] - mu)^2) + eps)
 *   y[t, :] = (x[t, :] - mu) * rstd * w + b
 *
 *   x, y: [rows, cols] with strides x_stride, y_stride (0 means cols); y may
 *     alias x exactly (in place) but must not partially overlap it.
 *   w: [cols]; b: [cols] or 0 (no bias); both of w_dtype, contiguous.
 *   mean, rstd: optional fp32 [rows] (0 = not written), each row's mean and
 *     1 / sqrt(var + eps), for a backward pass.
 *
 * cols in [1, 65536]; each dtype fp32, fp16 or bf16. */
typedef struct scree_layernorm_args {
  scree_devptr x, w, b, y;
  scree_devptr mean, rstd; /* optional */
  int64_t rows, cols;
  int64_t x_stride, y_stride;
  scree_dtype x_dtype, w_dtype, y_dtype;
  float eps;
} scree_layernorm_args;

SCREE_EXTERN scree_status scree_layernorm(scree_context *ctx,
                                          const scree_layernorm_args *args,
                                          void *stream);

/* Residual add fused with RMSNorm, one pass over memory (the step between
 * the sublayers of a LLaMA-style block):
 *
 *   h[t, :] = x[t, :] + residual[t, :]          rounded to x_dtype, written
 *   y[t, :] = h[t, :] / sqrt(mean(h[t, :]^2) + eps) * w
 *
 * The norm is taken of h as written (rounded), so the result equals
 * `h = x + residual; y = rms_norm(h)` run unfused.
 *
 *   x, residual, h: [rows, cols] of x_dtype, strides x_stride,
 *     residual_stride, h_stride (0 means cols). h may alias residual or x
 *     exactly (in place, with the same stride) but no other buffer.
 *   w: [cols] of w_dtype; y: [rows, cols] of y_dtype, stride y_stride; y
 *     must not overlap any other buffer.
 *   rstd: optional fp32 [rows] (0 = not written), each row's
 *     1 / sqrt(mean(h^2) + eps), for scree_add_rmsnorm_backward.
 *
 * cols in [1, 65536]; each dtype fp32, fp16 or bf16. */
typedef struct scree_add_rmsnorm_args {
  scree_devptr x, residual, w, h, y;
  int64_t rows, cols;
  int64_t x_stride, residual_stride, h_stride, y_stride;
  scree_dtype x_dtype, w_dtype, y_dtype;
  float eps;
  scree_devptr rstd; /* optional fp32 [rows]: 1 / sqrt(mean(h^2) + eps), for the backward */
} scree_add_rmsnorm_args;

SCREE_EXTERN scree_status scree_add_rmsnorm(scree_context *ctx,
                                            const scree_add_rmsnorm_args *args,
                                            void *stream);

/* Softmax along the last dimension: y[t, :] = softmax(scale * x[t, :]),
 * as for MoE routing or logits.
 *
 *   x, y: [rows, cols] with strides x_stride, y_stride (0 means cols); y may
 *     alias x exactly (in place) but must not partially overlap it.
 *   scale: a finite multiplier of x; 0 means 1.
 *
 * cols in [1, 262144]; x_dtype and y_dtype each fp32, fp16 or bf16. */
typedef struct scree_softmax_args {
  scree_devptr x, y;
  int64_t rows, cols;
  int64_t x_stride, y_stride;
  scree_dtype x_dtype, y_dtype;
  float scale;
} scree_softmax_args;

SCREE_EXTERN scree_status scree_softmax(scree_context *ctx,
                                        const scree_softmax_args *args,
                                        void *stream);

/* The backward of scree_softmax: given its output y and the gradient dy of
 * y, the gradient of x,
 *
 *   dx[t, :] = scale * y[t, :] * (dy[t, :] - sum_c y[t, c] * dy[t, c])
 *
 * with the sum accumulated in fp32 (deterministic: a fixed order per row).
 *
 *   y, dy, dx: [rows, cols] with strides y_stride, dy_stride, dx_stride (0
 *     means cols). dx is of dy_dtype; it may alias dy exactly (in place) but
 *     must not otherwise overlap y or dy.
 *   scale: the forward's scale, finite; 0 means 1.
 *
 * cols in [1, 262144]; y_dtype and dy_dtype each fp32, fp16 or bf16. */
typedef struct scree_softmax_backward_args {
  scree_devptr y, dy, dx;
  int64_t rows, cols;
  int64_t y_stride, dy_stride, dx_stride;
  scree_dtype y_dtype, dy_dtype;
  float scale;
} scree_softmax_backward_args;

SCREE_EXTERN scree_status scree_softmax_backward(scree_context *ctx,
                                                 const scree_softmax_backward_args *args,
                                                 void *stream);

/* Softmax along the ragged (token) dimension of a packed batch, per
 * sequence and per column, never mixing sequences:
 *
 *   y[t, c] = exp(s x[t, c] - m) / sum_{u in seq(t)} exp(s x[u, c] - m)
 *
 * where seq(t) is the sequence holding token t (tokens [cu_seqlens[b],
 * cu_seqlens[b + 1])), m its column maximum and s the scale (0 means 1).
 * Sequences of length 0 and 1 are allowed (length 1 gives 1.0).
 *
 *   x, y: [total, cols] with strides x_stride, y_stride (0 means cols); y
 *     may alias x exactly but must not partially overlap it.
 *   cu_seqlens: int32 on the device, batch + 1 entries from 0,
 *     non-decreasing, ending at total; max_seqlen bounds the lengths. Read
 *     on the host only when validation is on (scree_options.validate).
 *
 * cols in [1, 65536]; x_dtype and y_dtype each fp32, fp16 or bf16. */
typedef struct scree_ragged_softmax_args {
  scree_devptr x, y, cu_seqlens;
  int64_t batch, total, max_seqlen, cols;
  int64_t x_stride, y_stride;
  scree_dtype x_dtype, y_dtype;
  float scale;
} scree_ragged_softmax_args;

SCREE_EXTERN scree_status scree_ragged_softmax(scree_context *ctx,
                                               const scree_ragged_softmax_args *args,
                                               void *stream);

/* Backward of scree_ragged_softmax: given its output y and dy, the
 * gradient of y, the gradient of x, per sequence and per column:
 *
 *   dx[t, c] = s * y[t, c] * (dy[t, c] - sum_{u in seq(t)} y[u, c] * dy[u, c])
 *
 * where seq(t) is the sequence holding token t (tokens [cu_seqlens[b],
 * cu_seqlens[b + 1])) and s the forward's scale (0 means 1). The sum is
 * accumulated in fp32 in a fixed order (deterministic). Sequences of length
 * 0 and 1 are allowed.
 *
 *   y, dy, dx: [total, cols] with strides y_stride, dy_stride, dx_stride (0
 *     means cols). dx is of dy_dtype; it may alias dy exactly (in place) but
 *     must not otherwise overlap y or dy.
 *   cu_seqlens: int32 on the device, batch + 1 entries from 0,
 *     non-decreasing, ending at total; max_seqlen bounds the lengths. Read
 *     on the host only when validation is on (scree_options.validate).
 *   scale: the forward's scale, finite; 0 means 1.
 *
 * cols in [1, 65536]; y_dtype and dy_dtype each fp32, fp16 or bf16. */
typedef struct scree_ragged_softmax_backward_args {
  scree_devptr y, dy, dx, cu_seqlens;
  int64_t batch, total, max_seqlen, cols;
  int64_t y_stride, dy_stride, dx_stride;
  scree_dtype y_dtype, dy_dtype;
  float scale;
} scree_ragged_softmax_backward_args;

SCREE_EXTERN scree_status scree_ragged_softmax_backward(
    scree_context *ctx, const scree_ragged_softmax_backward_args *args, void *stream);

/* Rotary position embedding on q and k in one launch, in place or into
 * q_out and k_out.
 *
 * For a token at position p and pair i < rotary_dim / 2 of a head, with
 * angle a = p * theta^(-2i / rotary_dim):
 *   (x1, x2) -> (x1 cos a - x2 sin a, x2 cos a + x1 sin a)
 * where the pair is (x[i], x[i + rotary_dim / 2]) in the NeoX layout
 * (rotate-half, HuggingFace LLaMA) and (x[2i], x[2i + 1]) in the GPT-J
 * layout (interleaved). Elements past rotary_dim are left as they are
 * (partial rotary).
 *
 * Positions: from `positions` (int32, or int64 with positions_int64 = 1,
 * [total] on the device) when it is given, else restarting at 0 for each
 * sequence of `cu_seqlens` (int32, batch + 1 entries, as for attention).
 * cos and sin are computed on the fly in fp32 from theta, or read from
 * cos_sin: fp32 [max_position, rotary_dim] on the device, row p holding
 * cos of the rotary_dim / 2 angles then their sin (vLLM's cos_sin_cache);
 * positions must then be below max_position.
 *
 *   q: [total, heads_q, head_dim]; k: [total, heads_kv, head_dim] or 0 (q
 *     only); strides in elements (token stride 0 means heads * head_dim,
 *     head stride 0 means head_dim; the last dimension contiguous), so the q
 *     and k of a packed qkv buffer are rotated where they lie.
 *
 * head_dim even, at most 1024; rotary_dim even, in [2, head_dim] (0 means
 * head_dim); dtype fp32, fp16 or bf16; theta > 0 (0 means 10000).
 *
 * Out of place (optional): with q_out given, q and k are only read and the
 * rotated tensors are written to q_out and k_out ([total, heads, head_dim]
 * of dtype, strides as q's and k's: token stride 0 means heads * head_dim,
 * head stride 0 means head_dim), whole head rows: the elements past
 * rotary_dim are copied. q_out and k_out both 0 is in place (the fields
 * left 0). k_out is given exactly when k and q_out are. An output may be
 * its input exactly (same pointer and strides: that tensor in place);
 * otherwise it must not overlap q, k or what the kernel reads beside them;
 * q_out and k_out may interleave as q and k may (a packed output). */
typedef enum scree_rope_layout {
  SCREE_ROPE_NEOX = 0, /* rotate-half: pairs (i, i + rotary_dim / 2) */
  SCREE_ROPE_GPTJ = 1  /* interleaved: pairs (2i, 2i + 1) */
} scree_rope_layout;

typedef struct scree_rope_args {
  scree_devptr q, k;
  scree_devptr positions;  /* optional: int32 / int64 [total] */
  scree_devptr cu_seqlens; /* used when positions is 0 */
  scree_devptr cos_sin;    /* optional: fp32 [max_position, rotary_dim] */
  int64_t total, batch, max_position;
  int64_t heads_q, heads_kv, head_dim, rotary_dim;
  int64_t q_token_stride, q_head_stride, k_token_stride, k_head_stride;
  scree_dtype dtype;
  scree_rope_layout layout;
  int positions_int64;
  float theta;
  scree_devptr q_out, k_out; /* optional: out of place (0: in place) */
  int64_t q_out_token_stride, q_out_head_stride, k_out_token_stride, k_out_head_stride;
} scree_rope_args;

SCREE_EXTERN scree_status scree_rope(scree_context *ctx, const scree_rope_args *args,
                                     void *stream);

/* The backward of scree_rope: the inverse rotation (angle -a), in place on
 * the gradients dq and dk, which is the transpose of the forward's: with
 * the forward's pairs and angles,
 *   (g1, g2) -> (g1 cos a + g2 sin a, g2 cos a - g1 sin a)
 * Every field as scree_rope_args' (same layouts, positions, cu_seqlens,
 * cos_sin table, partial rotary, strides and limits), with q and k holding
 * dq and dk: the same call with the gradients' pointers (and strides)
 * computes the backward. Elements past rotary_dim are left as they are
 * (their gradient passes through), or copied to q_out and k_out out of
 * place (the forward's rules). */
typedef struct scree_rope_backward_args {
  scree_devptr q, k;
  scree_devptr positions;
  scree_devptr cu_seqlens;
  scree_devptr cos_sin;
  int64_t total, batch, max_position;
  int64_t heads_q, heads_kv, head_dim, rotary_dim;
  int64_t q_token_stride, q_head_stride, k_token_stride, k_head_stride;
  scree_dtype dtype;
  scree_rope_layout layout;
  int positions_int64;
  float theta;
  scree_devptr q_out, k_out; /* optional: dq and dk out of place (0: in place) */
  int64_t q_out_token_stride, q_out_head_stride, k_out_token_stride, k_out_head_stride;
} scree_rope_backward_args;

SCREE_EXTERN scree_status scree_rope_backward(scree_context *ctx,
                                              const scree_rope_backward_args *args,
                                              void *stream);

/* SwiGLU: y[t, :] = silu(gate[t, :]) * up[t, :], silu(g) = g / (1 + e^-g),
 * in fp32.
 *
 *   gate, up: [rows, cols] with strides gate_stride, up_stride. up = 0
 *     reads both from one [rows, 2 * cols] tensor, gate first: up is then
 *     gate + cols with gate's stride (0 means 2 * cols).
 *   y: [rows, cols] of y_dtype, stride y_stride (0 means cols); it may alias
 *     gate or up exactly but must not partially overlap either.
 *
 * cols >= 1; dtype and y_dtype each fp32, fp16 or bf16. */
typedef struct scree_swiglu_args {
  scree_devptr gate, up, y;
  int64_t rows, cols;
  int64_t gate_stride, up_stride, y_stride;
  scree_dtype dtype, y_dtype;
} scree_swiglu_args;

SCREE_EXTERN scree_status scree_swiglu(scree_context *ctx, const scree_swiglu_args *args,
                                       void *stream);

/* The backward of scree_swiglu: with s = sigmoid(gate) and dy the gradient
 * of y, in fp32,
 *
 *   dup   = dy * gate * s                       (dy * silu(gate))
 *   dgate = dy * up * s * (1 + gate * (1 - s))
 *
 *   gate, up: [rows, cols] of dtype with strides gate_stride, up_stride, or
 *     with up = 0 one [rows, 2 * cols] tensor, gate first (up = gate + cols
 *     with gate's stride, 0 meaning 2 * cols), as the forward reads them.
 *   dy: [rows, cols] of dy_dtype, stride dy_stride (0 means cols).
 *   dgate, dup: [rows, cols] of dtype with strides dgate_stride, dup_stride,
 *     or with dup = 0 one [rows, 2 * cols] tensor, dgate first (dup = dgate +
 *     cols with dgate's stride, 0 meaning 2 * cols): the fused gradient of a
 *     fused input. Either form of output goes with either form of input.
 *     dgate may be gate exactly and dup may be up exactly (in place: the same
 *     address, stride and element size; each element is read before the
 *     same thread writes it); any other overlap between the outputs, or of
 *     an output with gate, up or dy, is refused.
 *
 * cols in [1, 2^30]; dtype and dy_dtype each fp32, fp16 or bf16. */
typedef struct scree_swiglu_backward_args {
  scree_devptr gate, up, dy, dgate, dup;
  int64_t rows, cols;
  int64_t gate_stride, up_stride, dy_stride, dgate_stride, dup_stride;
  scree_dtype dtype, dy_dtype;
} scree_swiglu_backward_args;

SCREE_EXTERN scree_status scree_swiglu_backward(scree_context *ctx,
                                                const scree_swiglu_backward_args *args,
                                                void *stream);

/* Cross-entropy forward, one pass over the logits (online max and sum),
 * optionally writing the gradient of the loss over the logits in the same
 * call (fused training losses):
 *
 *   lse[t]  = log(sum_v exp(logits[t, v]))
 *   loss[t] = (1 - eps) (lse[t] - logits[t, targets[t]])
 *             + eps / vocab * sum_v (lse[t] - logits[t, v])      (PyTorch's)
 *             + z_loss * lse[t]^2                                (PaLM's)
 *             or 0 where targets[t] == ignore_index
 *   dlogits[t, v] = (softmax[t, v] (1 + 2 z_loss lse[t])
 *                    - (1 - eps) [v == targets[t]] - eps / vocab) * scale
 *             or 0 on the whole row where targets[t] == ignore_index
 *
 * with eps = label_smoothing, scale = grad_scale (0 means 1), divided by the
 * number of rows whose target is not ignore_index when reduction is
 * SCREE_REDUCTION_MEAN (counted on the device; when every row is ignored,
 * every gradient row is 0).
 *
 *   logits: [rows, vocab] of dtype with stride logits_stride (0 means vocab).
 *   targets: int64 [rows] on the device. A target outside [0, vocab) that is
 *     not ignore_index gives a NaN loss and a NaN gradient row (checked on
 *     the host only with validation on).
 *   loss: fp32 [rows]; lse: fp32 [rows] or 0 (not written). loss is per row
 *     whatever the reduction: the mean over the rows not ignored is left to
 *     the caller (one reduction of `loss`).
 *   ignore_index: as PyTorch's (-100 there); the zeroed struct ignores 0.
 *   dlogits: [rows, vocab] of dtype with stride dlogits_stride (0 means
 *     vocab), or 0 (not written). It may be exactly logits (the same
 *     pointer and stride: written in place over the logits); any other
 *     overlap with an input or output is refused.
 *   label_smoothing: in [0, 1]. z_loss: finite, >= 0.
 *   reduction: SCREE_REDUCTION_NONE or _SUM (the gradient of the loss
 *     summed over the rows, times grad_scale; NONE takes grad_scale as every
 *     row's upstream gradient) or _MEAN (of the mean over the rows not
 *     ignored). Only the gradient reads it.
 *   grad_scale: the upstream gradient of the reduced loss (0 means 1);
 *     finite. Only the gradient reads it.
 *   count: optional, int64 [1] on the device (8-byte aligned, apart from
 *     every other buffer): the number of rows whose target is not
 *     ignore_index is written there (scree_ce_count, a small kernel before
 *     the row kernel, whatever the reduction); the gradient's mean then
 *     divides by it. The mean loss is then sum(loss) / *count (0 / 0 = NaN
 *     when every row is ignored, as PyTorch's) with no count of its own.
 *
 * vocab in [1, 2^24]; dtype fp32, fp16 or bf16. The zeroed new fields give
 * the plain forward (no smoothing, no z-loss, no gradient), the kernel of
 * earlier versions. Returns SCREE_OK, or an error naming the argument; on
 * error nothing is launched and nothing is written. Asynchronous with
 * respect to the host. Thread-safe. */
typedef enum scree_reduction {
  SCREE_REDUCTION_NONE = 0,
  SCREE_REDUCTION_SUM = 1,
  SCREE_REDUCTION_MEAN = 2,
} scree_reduction;

typedef struct scree_cross_entropy_args {
  scree_devptr logits, targets, loss, lse;
  int64_t rows, vocab, logits_stride;
  int64_t ignore_index;
  scree_dtype dtype;
  scree_devptr dlogits;   /* 0 = no gradient; may be exactly logits */
  int64_t dlogits_stride; /* 0 = vocab */
  float label_smoothing;  /* in [0, 1] */
  float z_loss;           /* >= 0 */
  int reduction;          /* scree_reduction, for dlogits */
  float grad_scale;       /* 0 = 1 */
  scree_devptr count;     /* optional: int64 [1], the rows not ignored */
} scree_cross_entropy_args;

SCREE_EXTERN scree_status scree_cross_entropy(scree_context *ctx,
                                              const scree_cross_entropy_args *args,
                                              void *stream);

/* Varlen attention forward (FlashAttention-style, exact): for each sequence
 * b and query head h,
 *
 *   out[i, h, :] = softmax_j(s(q[i, h, :] . k[j, h / group, :])) v[j, h / group, :]
 *   s(x) = scale * x, or with softcap c > 0: c * tanh(scale * x / c) (Gemma 2)
 *
 * over the keys j of the same sequence only (group = heads_q / heads_kv;
 * GQA and MQA read K and V in place, never expanded). Sequence b's queries
 * are tokens [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q and out, its keys
 * tokens [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v.
 *
 * Masks are aligned to the bottom right, as FlashAttention-2's: with Lq
 * queries and Lk keys, query i sits at key position i + Lk - Lq. causal
 * keeps keys j <= i + Lk - Lq; a sliding window keeps keys in
 * [i + Lk - Lq - window_left, i + Lk - Lq + window_right] (-1: unbounded on
 * that side; causal is window_right = 0). A query row with no key left
 * writes zeros to out and -inf to lse. Sequences of length 0 are allowed.
 *
 *   q, out: [total_q, heads_q, head_dim]; k, v: [total_k, heads_kv, head_dim]
 *     with the strides below (elements; the last dimension is contiguous), so
 *     packed qkv buffers ([T, 3, H, d] or [T, H, 3, d]) need no copy. Every
 *     token and head stride must be a multiple of 8 elements and every
 *     pointer 16-byte aligned; out must not overlap q, k or v.
 *   lse: optional fp32 [heads_q, total_q], natural-log log-sum-exp of the
 *     scores s(x) of each query row, softcapped if softcap is set (0 = not
 *     written).
 *   cu_seqlens_q, cu_seqlens_k: int32 on the device, batch + 1 entries from
 *     0, non-decreasing, ending at total_q and total_k; max_seqlen_q and
 *     max_seqlen_k bound the lengths. They are not read on the host unless
 *     validation is on (SCREE_VALIDATE=1 or scree_options.validate).
 *
 * dtype fp16 or bf16 (fp32 accumulation); head_dim 32, 64, 96, 128 or 256;
 * heads_q a multiple of heads_kv. Returns SCREE_OK, or an error naming the
 * argument; on error nothing is launched and nothing is written.
 * Asynchronous with respect to the host. Thread-safe. */
typedef struct scree_attention_args {
  scree_devptr q, k, v, out;
  scree_devptr lse;
  scree_devptr cu_seqlens_q, cu_seqlens_k;
  int64_t batch, total_q, total_k, max_seqlen_q, max_seqlen_k;
  int64_t heads_q, heads_kv, head_dim;
  int64_t q_token_stride, k_token_stride, v_token_stride, out_token_stride; /* 0 = heads * head_dim */
  int64_t q_head_stride, k_head_stride, v_head_stride, out_head_stride;     /* 0 = head_dim */
  scree_dtype dtype;
  int causal;
  float scale;                       /* 0 = 1 / sqrt(head_dim) */
  int64_t window_left, window_right; /* -1 = unbounded */
  float softcap;                     /* 0 = none; finite and >= 0 */
} scree_attention_args;

SCREE_EXTERN scree_status scree_attention(scree_context *ctx,
                                          const scree_attention_args *args,
                                          void *stream);

/* Attention over a paged KV cache (serving: decode, speculative decoding,
 * chunked prefill against a cached prefix). For each sequence b, query head
 * h and query token i of b,
 *
 *   out[i, h, :] = softmax_j(s(q[i, h, :] . K_b[j, h / group, :])) V_b[j, h / group, :]
 *   s(x) = scale * x, or with softcap c > 0: c * tanh(scale * x / c) (Gemma 2)
 *
 * over the keys j in [0, seqlens_k[b]) of sequence b (its new tokens
 * included), masked as scree_attention's (bottom-right aligned: query i of
 * Lq sits at key position i + Lk - Lq; causal keeps j <= i + Lk - Lq; the
 * window keeps [i + Lk - Lq - window_left, i + Lk - Lq + window_right], -1
 * unbounded). A query row with no key writes zeros and lse -inf.
 *
 * Key j of sequence b is slot j % page_size of page
 * block_table[b * block_table_stride + j / page_size]:
 *   K_b[j, g, :] = k_cache + page * cache_page_stride + (j % page_size) *
 *                  cache_token_stride + g * cache_head_stride
 * and V likewise in v_cache (the same strides). The caches are
 * [num_pages, page_size, heads_kv, head_dim] (NHD; 0 strides: dense); pages
 * of a sequence may lie anywhere in the pool, in any order, and be shared
 * between sequences; k_cache and v_cache may be one buffer (interleaved
 * pages). Only the pages a sequence's keys use are read.
 *
 *   q, out: [total_q, heads_q, head_dim], packed by cu_seqlens_q (int32,
 *     batch + 1 entries from 0, non-decreasing, ending at total_q); strides
 *     in elements, 0 = dense.
 *   lse: optional fp32 [heads_q, total_q] (natural log; 0 = none).
 *   block_table: int32 [batch, block_table_stride]; block_table_stride must
 *     hold the pages of max_seqlen_k keys.
 *   seqlens_k: int32 [batch], each in [0, max_seqlen_k].
 *   page_size 1, 8, 16, 32, 64, 128 or 256; head_dim 32, 64, 96, 128 or 256;
 *   dtype fp16 or bf16 (fp32 accumulation); heads_q a multiple of heads_kv.
 *   Every pointer 16-byte aligned and every stride a multiple of 8
 *   elements; out must not overlap q, the caches or the other buffers.
 *
 * Device-side lengths, block tables and cu_seqlens are not read on the host
 * unless validation is on (SCREE_VALIDATE=1 or scree_options.validate),
 * which checks them first. Long key ranges are split across CTAs and merged
 * through the per-stream workspace (deterministic: the merge order is
 * fixed). Returns SCREE_OK, or an error naming the argument; on error
 * nothing is launched and nothing is written. Asynchronous with respect to
 * the host. Thread-safe. */
typedef struct scree_paged_attention_args {
  scree_devptr q, out;           /* [total_q, heads_q, head_dim], packed by cu_seqlens_q */
  scree_devptr lse;              /* optional fp32 [heads_q, total_q]; 0 = none */
  scree_devptr k_cache, v_cache; /* [num_pages, page_size, heads_kv, head_dim] (NHD), strides below */
  scree_devptr block_table;      /* int32 [batch, block_table_stride]: page ids of each sequence, in order */
  scree_devptr seqlens_k;        /* int32 [batch]: keys of each sequence, the new tokens included */
  scree_devptr cu_seqlens_q;     /* int32 [batch + 1] */
  int64_t batch, total_q, max_seqlen_q, max_seqlen_k, num_pages, page_size, block_table_stride;
  int64_t heads_q, heads_kv, head_dim;
  int64_t q_token_stride, q_head_stride, out_token_stride, out_head_stride;
  int64_t cache_page_stride, cache_token_stride, cache_head_stride; /* elements; 0 = dense NHD */
  scree_dtype dtype;
  int causal;                        /* bottom-right aligned */
  float scale;                       /* 0 = 1 / sqrt(head_dim) */
  int64_t window_left, window_right; /* -1 = unbounded */
  float softcap;                     /* 0 = none */
} scree_paged_attention_args;

SCREE_EXTERN scree_status scree_paged_attention(scree_context *ctx,
                                                const scree_paged_attention_args *args,
                                                void *stream);

/* Appends new tokens' K and V to a paged KV cache (vLLM's
 * reshape_and_cache): for each new token t whose slot s = slot_mapping[t]
 * is not -1, and every kv head h,
 *
 *   k_cache[s / page_size][s % page_size][h][:] = k[t][h][:]
 *   v_cache[s / page_size][s % page_size][h][:] = v[t][h][:]
 *
 * A bitwise copy (no conversion). Slots of -1 (padding tokens) are
 * skipped; every other cache element keeps its value.
 *
 *   k, v: [total_new, heads_kv, head_dim] with token and head strides in
 *     elements (0 means heads_kv * head_dim and head_dim; the last
 *     dimension is contiguous), in any order, so the k and v of a fused qkv
 *     projection ([T, 3, H, d] or [T, H, 3, d]) are read where they lie.
 *     k and v may share memory.
 *   k_cache, v_cache: [num_pages, page_size, heads_kv, head_dim] (NHD), one
 *     set of strides for both, in elements: cache_page_stride (0 means
 *     page_size * token stride), cache_token_stride (0 means heads_kv *
 *     head_dim), cache_head_stride (0 means head_dim); the last dimension
 *     contiguous. No two elements of a cache may share an address. Neither
 *     cache may overlap k, v or slot_mapping, nor the other, except
 *     interleaved page by page (one [num_pages, 2, page_size, heads_kv,
 *     head_dim] buffer: equal strides, the page stride the largest, and
 *     each page of v_cache in the gap between two pages of k_cache).
 *   slot_mapping: int64 [total_new] on the device, each entry -1 or in
 *     [0, num_pages * page_size), no slot twice (two writers of one slot
 *     would race). Read on the host only when validation is on
 *     (SCREE_VALIDATE=1 or scree_options.validate); otherwise an entry out
 *     of range writes outside the cache.
 *
 * page_size 1, 8, 16, 32, 64, 128 or 256 (those of the paged attention
 * kernels); head_dim in [1, 1024]; heads_kv in [1, 65535], with
 * total_new * heads_kv below 2^31; dtype fp32, fp16 or bf16. Alignment:
 * pointers aligned to an element; the kernel moves 16 bytes per access
 * where every pointer, stride and head_dim allow it, and narrower vectors
 * elsewhere. total_new = 0 does nothing (pointers may then be NULL).
 * Returns SCREE_OK, or an error naming the argument; on error nothing is
 * launched and nothing is written. Asynchronous with respect to the host:
 * the kernel is queued on `stream`. Thread-safe. */
typedef struct scree_kv_append_args {
  scree_devptr k, v;             /* [total_new, heads_kv, head_dim], strided */
  scree_devptr k_cache, v_cache; /* [num_pages, page_size, heads_kv, head_dim] */
  scree_devptr slot_mapping;     /* int64 [total_new]: page * page_size + offset; -1 = skip */
  int64_t total_new, num_pages, page_size, heads_kv, head_dim;
  int64_t k_token_stride, k_head_stride, v_token_stride, v_head_stride;
  int64_t cache_page_stride, cache_token_stride, cache_head_stride; /* 0 = dense NHD */
  scree_dtype dtype;
} scree_kv_append_args;

SCREE_EXTERN scree_status scree_kv_append(scree_context *ctx,
                                          const scree_kv_append_args *args,
                                          void *stream);

/* The backward of scree_attention: given dout = dL/dout, writes dq, dk and
 * dv. For each sequence, query head h (kv head g = h / (heads_q /
 * heads_kv)), query row i and key j that the forward's masks let i see:
 *
 *   P[i, j]  = exp(s(q[i, h, :] . k[j, g, :]) - lse[h, i])    the forward's lse
 *   dS[i, j] = P[i, j] (dout[i, h, :] . v[j, g, :] - dout[i, h, :] . out[i, h, :])
 *   dq[i, h, :] = sum_j dS[i, j] s'(q . k) k[j, g, :]
 *   dk[j, g, :] = sum_{h in group g, i} dS[i, j] s'(q . k) q[i, h, :]
 *   dv[j, g, :] = sum_{h in group g, i} P[i, j] dout[i, h, :]
 *
 * with s(x) = scale x, or softcap tanh(scale x / softcap), and s' its
 * derivative. fwd holds the forward call's arguments as they were (q, k,
 * v, out, cu_seqlens, sizes, strides, dtype, masks, scale, softcap); lse is
 * required: the forward's [heads_q, total_q] fp32 natural-log values. A row
 * whose lse is -inf (no visible key) gets dq = 0 and adds nothing; a key no
 * row sees gets dk = dv = 0. fp32 accumulation; P and dS are rounded to the
 * dtype before their products, as in FlashAttention-2.
 *
 * dout is [total_q, heads_q, head_dim] like out; dq like q; dk and dv like
 * k and v ([total_k, heads_kv, head_dim]: the group's query heads summed,
 * no expanded copy). Each has a token and a head stride in elements, in
 * either order, positive multiples of 8 (0 means dense: heads * head_dim
 * and head_dim); pointers 16-byte aligned. dq, dk and dv must not overlap
 * the inputs; they may share one buffer interleaved with equal token and
 * head strides (a fused [T, 3, H, head_dim] gradient), and no element may
 * be written twice. Same limits as scree_attention.
 *
 * Scratch from the per-stream workspace, at most
 *   4 heads_q total_q (head_dim + 2) + 4 heads_q (total_q / 32 + batch + 1)
 *   + 1 KiB bytes (docs/kernels/attention-backward.md).
 * deterministic = 1: dq, dk and dv are bitwise identical from run to run,
 * and a sequence's gradients do not depend on the other sequences of the
 * batch or their order (dq is accumulated in a fixed order); 0: dq is
 * accumulated by fp32 atomics in any order (dk and dv are deterministic in
 * both modes).
 *
 * Returns SCREE_OK, or an argument status naming the argument (nothing is
 * launched then). Asynchronous with respect to the host: the kernels are
 * queued on `stream`. Thread-safe. */
typedef struct scree_attention_backward_args {
  scree_attention_args fwd;          /* the forward call's arguments: q, k, v, out, lse (required), cu_seqlens, sizes, strides, masks, scale */
  scree_devptr dout;                 /* [total_q, heads_q, head_dim] */
  scree_devptr dq, dk, dv;           /* dq like q; dk, dv like k and v ([total_k, heads_kv, head_dim]: GQA groups summed) */
  int64_t dout_token_stride, dout_head_stride, dq_token_stride, dq_head_stride;
  int64_t dk_token_stride, dk_head_stride, dv_token_stride, dv_head_stride;   /* 0 = dense */
  int deterministic;                 /* 1: bitwise identical results run to run */
} scree_attention_backward_args;

SCREE_EXTERN scree_status scree_attention_backward(scree_context *ctx,
                                                   const scree_attention_backward_args *args,
                                                   void *stream);

/* The backward of RMSNorm (scree_rmsnorm), per row t with g = dy[t, :] * w:
 *
 *   dx[t, :] = rstd * g - x[t, :] * (rstd^3 * sum(g * x[t, :]) / cols)
 *   dw = sum over rows of dy[t, :] * x[t, :] * rstd
 *
 *   x, dy, dx: [rows, cols] with strides x_stride, dy_stride, dx_stride (0
 *     means cols); x of x_dtype, dy of y_dtype (the forward's y), dx of
 *     x_dtype; dx may alias dy exactly (in place, same element size).
 *   w: [cols] of w_dtype; dw: [cols] of w_dtype, the sum over rows taken in
 *     fp32 in a fixed order (bitwise the same run to run for a config),
 *     rounded once. rows 0 writes dw as zeros.
 *   rstd: optional fp32 [rows], the forward's 1 / sqrt(mean(x^2) + eps);
 *     0 recomputes it from x with eps.
 *
 * cols in [1, 65536]. Uses scratch from the stream's workspace (4 bytes a
 * column per CTA row group). Conventions as the row-wise family above. */
typedef struct scree_rmsnorm_backward_args {
  scree_devptr x, w, dy, rstd, dx, dw;
  int64_t rows, cols;
  int64_t x_stride, dy_stride, dx_stride;
  scree_dtype x_dtype, w_dtype, y_dtype;
  float eps;
} scree_rmsnorm_backward_args;

SCREE_EXTERN scree_status scree_rmsnorm_backward(scree_context *ctx,
                                                 const scree_rmsnorm_backward_args *args,
                                                 void *stream);

/* The backward of the residual add fused with RMSNorm (scree_add_rmsnorm),
 * from h, the sum the forward wrote:
 *
 *   dh[t, :] = rmsnorm_backward(dy)[t, :] at h (as scree_rmsnorm_backward's
 *     dx) + dh_next[t, :]; dh is the gradient of both x and residual
 *   dw = sum over rows of dy[t, :] * h[t, :] * rstd
 *
 *   h, dh_next, dh: [rows, cols] of x_dtype, strides h_stride,
 *     dh_next_stride, dh_stride (0 means cols); dy: of y_dtype, dy_stride.
 *     dh_next, the gradient flowing into the residual stream past this
 *     layer, is optional (0: none). dh may alias dy (same element size) or
 *     dh_next exactly (in place).
 *   w, dw, rstd: as scree_rmsnorm_backward's.
 *
 * cols in [1, 65536]. Conventions as the row-wise family above. */
typedef struct scree_add_rmsnorm_backward_args {
  scree_devptr h, w, dy, dh_next, rstd, dh, dw;
  int64_t rows, cols;
  int64_t h_stride, dy_stride, dh_next_stride, dh_stride;
  scree_dtype x_dtype, w_dtype, y_dtype;
  float eps;
} scree_add_rmsnorm_backward_args;

SCREE_EXTERN scree_status scree_add_rmsnorm_backward(
    scree_context *ctx, const scree_add_rmsnorm_backward_args *args, void *stream);

/* The backward of LayerNorm (scree_layernorm), per row t with xhat = (x[t,
 * :] - mean) * rstd and g = dy[t, :] * w:
 *
 *   dx[t, :] = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   dw = sum over rows of dy[t, :] * xhat;  db = sum over rows of dy[t, :]
 *
 *   x, dy, dx: as scree_rmsnorm_backward's (dx may alias dy exactly).
 *   w: [cols] of w_dtype; dw, db: [cols] of w_dtype, fp32 sums in a fixed
 *     order rounded once; db optional (0: not computed). rows 0 writes
 *     zeros.
 *   mean, rstd: optional fp32 [rows], the statistics scree_layernorm
 *     writes; give both or neither (0: recomputed from x with eps, two
 *     passes as the forward).
 *
 * cols in [1, 65536]. Conventions as the row-wise family above. */
typedef struct scree_layernorm_backward_args {
  scree_devptr x, w, dy, mean, rstd, dx, dw, db;
  int64_t rows, cols;
  int64_t x_stride, dy_stride, dx_stride;
  scree_dtype x_dtype, w_dtype, y_dtype;
  float eps;
} scree_layernorm_backward_args;

SCREE_EXTERN scree_status scree_layernorm_backward(scree_context *ctx,
                                                   const scree_layernorm_backward_args *args,
                                                   void *stream);

/* ------------------------------------------------------------------------ */
/* Checking a call without a device                                          */
/* ------------------------------------------------------------------------ */

/* Checks args as the op entry scree_<op> would (op: "rmsnorm",
 * "attention", ...: the name after "scree_"), without a context, a device
 * or device memory: sizes, strides, dtypes, scalars and the op's own rules.
 * Buffer pointers are only tested against NULL: each distinct nonzero
 * value stands for a buffer of its own, aligned and apart from the others
 * (one value given twice is one buffer), so the alignment and overlaps of
 * real pointers are not checked, nor anything on the device. For
 * frameworks that trace a call before its buffers exist (torch.compile's
 * fake tensors). Returns what the call would return before its launch:
 * SCREE_OK (an empty call too) or the argument status, with the call's
 * message in why (cut to why_size bytes and terminated; "" on SCREE_OK; why
 * may be NULL); SCREE_ERROR_INVALID_ARGUMENT for an unknown op or NULL
 * args; SCREE_ERROR_OUT_OF_MEMORY. Thread-safe. */
SCREE_EXTERN scree_status scree_check_args(const char *op, const void *args, char *why,
                                           size_t why_size);

#ifdef __cplusplus
}
#endif
#endif /* SCREE_H */
