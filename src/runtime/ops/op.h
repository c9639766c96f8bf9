/*
 * op.h - the op interface: what an op tells the layers above about itself.
 * Not API. docs/adding-an-op.md walks through it with RMSNorm.
 *
 * An op (scree__op) is one public function with one args struct. It has one
 * or more implementations (scree__impl): a kernel source with its own
 * config fields, constraints and launch, for a range of architectures. A
 * config (scree__config) names an implementation and gives its fields; a
 * variant (scree__variant) holds the compile-time facts of a call (dtypes,
 * causal flag, head size); a bucket (scree__bucket) is the shape class
 * that shares one tuned config. Problems (scree__problem) are the typed
 * buffers and arguments the tuner, verify, the benchmarks and the demo run
 * an op on.
 */
#ifndef SCREE_OP_H
#define SCREE_OP_H

#include "base/base.h"

#define SCREE__MAX_FIELDS 8
#define SCREE__MAX_VARIANT 8
#define SCREE__MAX_DIMS 8
#define SCREE__MAX_IMPLS 4
#define SCREE__MAX_ENTRIES 4
#define SCREE__MAX_BUFS 12
#define SCREE__ARGS_MAX 512
#define SCREE__MAX_ARGS 48 /* entries of a schema */
#define SCREE__MAX_DEFINES 8 /* an implementation's fixed macros (scree__impl.defines) */

/* One point of an op's config space: the implementation (index into
 * op->impls) and its field values in the implementation's order. */
typedef struct scree__config {
  int impl;
  int v[SCREE__MAX_FIELDS];
} scree__config;

/* The compile-time facts of a call, in the op's variant field order. */
typedef struct scree__variant {
  int v[SCREE__MAX_VARIANT];
} scree__variant;

/* A shape bucket: the op's bucket dimensions, rounded as declared. */
typedef struct scree__bucket {
  int64_t v[SCREE__MAX_DIMS];
} scree__bucket;

/* A tunable field: its name in config strings ("bm"), the macro the kernel
 * reads ("SCREE_BM") and the values of the search space. */
typedef struct scree__field {
  const char *name;
  const char *macro;
  int nvalues;
  int values[16];
} scree__field;

/* A variant field: name, macro, whether the value is a dtype code (printed
 * "fp16") or an integer, an example value that any config of the op can be
 * checked and compiled with (safelist "*" lines, the compile test), and the
 * values the op supports. A field named "causal" is the op's causal flag,
 * which the cache key stores in a column of its own. */
typedef struct scree__vfield {
  const char *name;
  const char *macro;
  int is_dtype;
  int example;
  int nvalues;   /* the supported values (tests compile every variant) */
  int values[8];
  /* Optional: the args field that gives this variant field its value
   * (SCREE__AT), which must then be one of `values` (else
   * SCREE_ERROR_UNSUPPORTED); the generic checks fill the variant from it.
   * A dtype field of the args is always given this way. */
  uint16_t arg;
} scree__vfield;

/* A bucket dimension: exact ("cols=4096") or rounded up to a power of two
 * ("rows<=16384"); arg, a link to the int64 args field it is (SCREE__AT),
 * when the op has no bucket hook. any, nonzero for a dimension that
 * depends on the batch (rows, tokens, sequences, the batch's longest
 * lengths): in batch-invariant mode the bucket holds it as "any"
 * (SCREE__BUCKET_ANY, "rows=any") and the config is tuned on a batch of
 * this size (docs/cache.md#batch-invariant-mode). */
typedef struct scree__bdim {
  const char *name;
  int pow2;
  uint16_t arg;
  int64_t any;
} scree__bdim;

/* The value of a batch dimension in a batch-invariant bucket. */
#define SCREE__BUCKET_ANY ((int64_t)-1)

/* ---- argument schemas ---------------------------------------------------------
 * Each op declares the fields of its args struct once, as a table of
 * scree__arg in the struct's order (in ops/<op>.c). From the table come the
 * argument checks every op shares (ops/args_check.h: NULL, alignment, strides,
 * sizes, byte ranges, overlaps, dtypes, scalar ranges, with messages that
 * name the argument), the shape text (the SCREE__SHAPE fields), the bucket
 * (scree__bdim.arg), the vector width a call allows (scree__vec_log2), a
 * problem's buffer list (scree__problem_bufs), scree_check_args and the
 * Python binding's structs (tools/gen_structs.c). The op's validate hooks
 * keep only its own rules.
 *
 * The op file names its args struct SCREE__ARGS_T, then writes each entry
 * with the macro of its role, the member, and more initializers:
 *
 *   #define SCREE__ARGS_T scree_rmsnorm_args
 *   SCREE__IN(x, .dtype = SCREE__AT(x_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)})
 *
 * SCREE__AT(m) links to member m (its offset plus one, so that 0 means
 * none); the macro records the member's name, offset, size and C type. */
typedef enum scree__role {
  SCREE__ROLE_IN = 1, /* a device buffer the kernel reads */
  SCREE__ROLE_OUT,    /* ... writes */
  SCREE__ROLE_INOUT,  /* ... reads and writes in place */
  SCREE__ROLE_DIM,    /* an int64 size */
  SCREE__ROLE_STRIDE, /* an int64 stride of a tensor's dimension, in elements (0: dense) */
  SCREE__ROLE_DTYPE,  /* a scree_dtype; a variant field's value (scree__vfield.arg) */
  SCREE__ROLE_INT,    /* another integer scalar */
  SCREE__ROLE_FLOAT,  /* a float scalar */
} scree__role;

/* C types of fields, from the member's declared type. */
enum { SCREE__C_PTR = 1, SCREE__C_I64, SCREE__C_I32, SCREE__C_F32 };

/* Element types of tensors without a dtype field. */
enum { SCREE__E_F32 = 1, SCREE__E_I32, SCREE__E_I64 };

/* Flags of an entry.
 * - SCREE__SHAPE (DIM, STRIDE, INT, int64 only): part of the call's shape
 *   text ("rows=16000,cols=4096"), in the table's order.
 * - SCREE__EMPTY (DIM): a call where this is 0 has nothing to do; it
 *   returns SCREE_OK before any pointer is looked at (an empty call may
 *   pass NULLs).
 * - SCREE__LIMIT (DIM, INT): above max is a limit of what scree serves
 *   (SCREE_ERROR_UNSUPPORTED), not an invalid value.
 * - SCREE__FINITE, SCREE__NONNEG (FLOAT): must be finite; must be >= 0.
 * - SCREE__OPTIONAL (tensor): may be NULL (absent).
 * - SCREE__PLUS_ONE (tensor): its outermost extent is its dim plus one
 *   (offsets: cu_seqlens[batch + 1]).
 * - SCREE__ANY_ORDER (tensor of rank 2 or 3): its strides may come in any
 *   order (a head-major [T, H, D] tensor), checked when it is present, so
 *   that no two of its elements share an address (dimensions of extent 1
 *   do not count). Without it, each stride must cover the dimensions inside
 *   it, checked with the sizes, whatever the extents.
 * - SCREE__OWN_RANGE (tensor): the op's validate_buffers checks its strides,
 *   extent and overlaps; the generic checks, its pointer only.
 * - SCREE__OWN_POINTER (tensor): the op checks its pointer too (whether it
 *   is needed, its alignment). Implies SCREE__OWN_RANGE.
 * - SCREE__VECTOR (tensor): the kernel reads or writes it in vectors, so
 *   its pointer and strides bound the vector width a call allows
 *   (scree__vec_log2).
 * - SCREE__CHECK_ONLY (optional tensor): held by check problems only (a
 *   timed problem is the common form of the call: LayerNorm's without
 *   statistics); other optional tensors are held by every problem
 *   (scree__rowwise_problem). */
enum {
  SCREE__SHAPE = 1 << 0,      SCREE__EMPTY = 1 << 1,      SCREE__LIMIT = 1 << 2,
  SCREE__FINITE = 1 << 3,     SCREE__NONNEG = 1 << 4,     SCREE__OPTIONAL = 1 << 5,
  SCREE__PLUS_ONE = 1 << 6,   SCREE__ANY_ORDER = 1 << 7,  SCREE__OWN_RANGE = 1 << 8,
  SCREE__OWN_POINTER = 1 << 9, SCREE__VECTOR = 1 << 10,   SCREE__CHECK_ONLY = 1 << 11,
};

typedef struct scree__arg {
  const char *name;   /* the member's name */
  uint16_t offset;    /* offsetof */
  uint8_t size;       /* sizeof */
  uint8_t ctype;      /* SCREE__C_*: from the member's type */
  uint8_t role;       /* scree__role */
  uint16_t flags;
  /* DIM, STRIDE, INT: the valid range, checked with the sizes (both 0: not
   * checked). Below min is SCREE_ERROR_INVALID_ARGUMENT; above max too,
   * unless SCREE__LIMIT. See SCREE__MIN and SCREE__RANGE. */
  int64_t min, max;
  /* Appended to the range's message: "(0 means 10000)". */
  const char *hint;
  /* INT, FLOAT: the value a problem gives the field when its shape leaves
   * it 0 (RMSNorm's eps: 1e-6). */
  double example;
  /* Tensors. The element type: the link to its DTYPE field, or elem; with
   * elem SCREE__E_I32 and a link to an INT field in wide, int64 when that
   * field is nonzero (RoPE's positions_int64). */
  uint16_t dtype;
  uint8_t elem;
  uint16_t wide;
  /* The pointer's alignment in bytes (0: the element size). */
  uint8_t align;
  /* Links to its extents, outermost first (1 to 3 of them), and to the
   * strides of all but the innermost (0: dense; the innermost is
   * contiguous). */
  uint16_t dims[3];
  uint16_t strides[2];
  /* Tensors it may be exactly (in place: the same pointer, element size
   * and strides); any other overlap of a written tensor is refused. */
  uint16_t alias[2];
  /* ANY_ORDER tensors: strides must be positive multiples of this many
   * elements (SCREE_ERROR_MISALIGNED). */
  uint8_t stride_multiple;
} scree__arg;

#define SCREE__CTYPE_(T, m)                                                              \
  _Generic(((T *)0)->m, uint64_t: SCREE__C_PTR, int64_t: SCREE__C_I64, float: SCREE__C_F32, \
           default: SCREE__C_I32)
/* An entry of member m of SCREE__ARGS_T with a role and more initializers
 * (ints and enums are I32; the registry check refuses a size that does not
 * match). */
#define SCREE__ENTRY_(m, r, ...)                                                         \
  {.name = #m, .offset = offsetof(SCREE__ARGS_T, m), .size = sizeof(((SCREE__ARGS_T *)0)->m), \
   .ctype = SCREE__CTYPE_(SCREE__ARGS_T, m), .role = r, __VA_ARGS__}
#define SCREE__IN(m, ...) SCREE__ENTRY_(m, SCREE__ROLE_IN, __VA_ARGS__)
#define SCREE__OUT(m, ...) SCREE__ENTRY_(m, SCREE__ROLE_OUT, __VA_ARGS__)
#define SCREE__INOUT(m, ...) SCREE__ENTRY_(m, SCREE__ROLE_INOUT, __VA_ARGS__)
#define SCREE__DIM(m, ...) SCREE__ENTRY_(m, SCREE__ROLE_DIM, __VA_ARGS__)
#define SCREE__STRIDE(m, ...) SCREE__ENTRY_(m, SCREE__ROLE_STRIDE, __VA_ARGS__)
#define SCREE__DTYPE(m, ...) SCREE__ENTRY_(m, SCREE__ROLE_DTYPE, __VA_ARGS__)
#define SCREE__INT(m, ...) SCREE__ENTRY_(m, SCREE__ROLE_INT, __VA_ARGS__)
#define SCREE__FLOAT(m, ...) SCREE__ENTRY_(m, SCREE__ROLE_FLOAT, __VA_ARGS__)
/* A link to member m of SCREE__ARGS_T. */
#define SCREE__AT(m) ((uint16_t)(offsetof(SCREE__ARGS_T, m) + 1))
/* Ranges: at least lo; from lo to hi. */
#define SCREE__MIN(lo) .min = (lo), .max = INT64_MAX
#define SCREE__RANGE(lo, hi) .min = (lo), .max = (hi)

/* What a config is checked against: the architecture and its limits. */
typedef struct scree__target {
  int sm;          /* 80, 90 ... */
  int smem_optin;  /* bytes of shared memory a CTA may opt in to */
  int tensor_maps; /* the driver builds tensor maps (cuTensorMapEncodeTiled) */
} scree__target;

/* A loaded kernel module: the implementation's entry points, in its
 * `entries` order. */
typedef struct scree__kernel {
  CUmodule module;
  CUfunction fn[SCREE__MAX_ENTRIES];
  int occupancy; /* CTAs of entries[0] per SM (0 if the impl gives no threads hook) */
} scree__kernel;

/* One implementation of an op. */
typedef struct scree__impl {
  const char *name;     /* the config's impl= value: "generic" */
  const char *source;   /* kernel file under kernels/ */
  const char *entries[SCREE__MAX_ENTRIES]; /* extern "C" kernels; [0] the main one */
  int min_sm, max_sm;   /* architectures it runs on (max_sm 0: no bound) */
  int arch_specific;    /* compiled for the "a" target (sm_90a): wgmma, setmaxnreg */
  /* Optional: fixed macros of this implementation, "NAME=VALUE" pairs
   * separated by spaces (at most SCREE__MAX_DEFINES), passed as -DNAME=VALUE
   * after the config's and variant's; part of the source hash. Lets two
   * implementations share one kernel file (paged attention's "hopper":
   * attention_hopper.cu with SCREE_PAGED=1). NULL: none. */
  const char *defines;
  int nfields;
  const scree__field *fields;
  /* 1 if cfg may compile and run for var on target, else 0 with the reason.
   * Mirrors the kernel's static_asserts (and the target's limits). */
  int (*check)(const scree__config *cfg, const scree__variant *var,
               const scree__target *target, char *why, size_t why_size);
  /* Dynamic shared memory of entries[0], bytes (NULL: none). The module
   * loader raises the function's limit when it exceeds 48 KiB. */
  size_t (*smem)(const scree__config *cfg, const scree__variant *var);
  /* Optional: threads per CTA of entries[0]; the loader then computes the
   * kernel's occupancy (CTAs per SM), for persistent grids. */
  int (*threads)(const scree__config *cfg);
  /* Optional: narrows cfg to what this call allows (alignment). */
  void (*adapt)(scree__config *cfg, const scree__variant *var, const void *args);
  /* Optional: 0 if cfg cannot win on this shape (pruned before timing). */
  int (*worth_timing)(const scree__config *cfg, const scree__variant *var,
                      const void *args);
  /* Grid, block, parameters; launches on stream (primary context current).
   * Records a message with scree__fail on failure. */
  scree_status (*launch)(scree_context *ctx, const scree__kernel *k,
                         const scree__config *cfg, const scree__variant *var,
                         const void *args, CUstream stream);
} scree__impl;

/* Buffers of a problem. IN buffers get random values (normal(0, 1)) from
 * the harness; HOST_IN buffers carry bytes the op wrote (cu_seqlens,
 * positions); OUT buffers are poisoned before a run and compared with the
 * reference; WORK buffers are only allocated. INOUT buffers are read and
 * written in place (RoPE's q and k): random values as IN, restored to them
 * before each checked run instead of poisoned, and compared as OUT (the
 * reference transforms its host copy in place). */
typedef enum scree__buf_kind {
  SCREE__BUF_IN = 0,
  SCREE__BUF_HOST_IN = 1,
  SCREE__BUF_OUT = 2,
  SCREE__BUF_WORK = 3,
  SCREE__BUF_INOUT = 4
} scree__buf_kind;

typedef struct scree__buf {
  const char *name;     /* "x", "cu_seqlens_q" */
  scree__buf_kind kind;
  int dtype;            /* a scree_dtype or SCREE__DTYPE_I32 */
  size_t count;         /* elements */
  size_t arg_offset;    /* offsetof the scree_devptr field in the args struct */
  double rtol, atol;    /* OUT, INOUT: the stated tolerance of this output */
  void *host;           /* HOST_IN: the bytes (malloc'd, owned by the problem) */
} scree__buf;

/* Explicit sequence lengths for a problem (benchmarks); NULL lets the op
 * generate them. */
typedef struct scree__lens {
  int n;
  const int64_t *q, *k; /* k may equal q */
} scree__lens;

typedef struct scree__problem {
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX]; /* pointer fields bound per run */
  scree__variant var;
  int nbufs;
  scree__buf bufs[SCREE__MAX_BUFS];
  double flops, bytes; /* the work of one call: TFLOP/s or GB/s */
  char desc[256];      /* what was generated, for logs ("16 sequences, ...") */
} scree__problem;

typedef struct scree__op scree__op;
struct scree__op {
  const char *name;       /* "rmsnorm": the public function is scree_<name> */
  size_t args_size;       /* sizeof its args struct */
  int nimpls;
  const scree__impl *impls;
  int nvfields;
  const scree__vfield *vfields;
  int ndims;
  const scree__bdim *dims;
  int nargs;
  const scree__arg *args; /* the schema: every field of the args struct, in order */
  /* The checks of a call (scree__args_check) and its vector width
   * (scree__vec_log2), compiled from the schema for this op by
   * SCREE__DEFINE_OP (ops/args_check.h). */
  scree_status (*check_args)(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip);
  int (*vec_log2)(const scree__variant *var, const void *args);

  /* The public entry's checks (scree__args_check) are the schema's, and
   * these two optional hooks for the op's own rules. Each returns the
   * status with a message naming the argument (scree__fail).
   * validate: rules on sizes and scalars (GQA divisibility, rotary_dim),
   * after the schema's checks of sizes, scalars, dtypes and row strides and
   * before the empty-call test: it must not look at pointers, which an
   * empty call may leave NULL. */
  scree_status (*validate)(scree_context *ctx, const void *args);
  /* validate_buffers: rules on buffers (those the schema marks
   * SCREE__OWN_RANGE or SCREE__OWN_POINTER, aliasing the schema cannot
   * express), after the schema's pointer, range and overlap checks, on a
   * call with work to do. May read device memory when ctx->validate is
   * set. Fills the variant fields that no vfield's arg fills. */
  scree_status (*validate_buffers)(scree_context *ctx, const void *args, CUstream stream,
                                   scree__variant *var);
  /* Optional: the raw bucket dimensions of a call, in `dims` order (the
   * generic code rounds them). On the hot path: no division, no loop over
   * the batch. Without it, each dimension is the args field its arg names. */
  void (*bucket)(const scree__variant *var, const void *args, int64_t *dims);
  /* Optional: a small integer naming what impl->adapt changes for this
   * call; part of the in-memory plan key. */
  int (*adapt_class)(const scree__variant *var, const void *args);
  /* The default config for a target and a call (args NULL: shape-free). */
  void (*default_config)(const scree__target *t, const scree__variant *var,
                         const void *args, scree__config *out);
  /* The shape fields of args (pointers zero) that a bucket is tuned on;
   * check != 0: a smaller shape of the same bucket whose CPU reference is
   * quick. */
  void (*representative)(const scree__bucket *b, const scree__variant *var,
                         int check, void *args);
  /* Builds a problem for the shape in args: buffers, host-initialised data
   * (generated deterministically from seed, or from lens), work. check != 0
   * asks for the edge cases (lengths 0, 1, just off tile boundaries).
   * 0 on success, else -1 with the reason. */
  int (*problem)(const void *args, const scree__variant *var, int check,
                 uint64_t seed, const scree__lens *lens, scree__problem *out,
                 char *why, size_t why_size);
  /* Optional: reshapes random inputs (host copies in buffer order) so
   * likely kernel mistakes show beyond the tolerance. */
  void (*shape_inputs)(const void *args, void *const *host);
  /* The CPU reference on host copies in buffer order; writes the OUT
   * buffers. */
  void (*reference)(const void *args, void *const *host);
  /* The benchmark entries (bench/bench_ops.c), NULL-terminated:
   * "<variant> <shape> [lens=L,L,...]", in the op's variant and shape
   * fields; lens fixes a varlen op's sequence lengths. */
  const char *const *bench;
};

/* The start of an implementation's initializer: its name, kernel source,
 * architectures (0: no upper bound) and entries. */
#define SCREE__IMPL(nm, src, lo, hi, ...) \
  .name = nm, .source = src, .min_sm = lo, .max_sm = hi, .entries = {__VA_ARGS__}
/* Small integer steps of the ops' hooks and the bucket: the smallest power
 * of two >= v (at most 2^62; no loop, the bucket rounds on every call), v
 * clamped to [lo, hi], and a / b rounded up (b > 0). */
static inline int64_t scree__pow2_ceil(int64_t v) {
  if (v <= 1) return 1;
  const int l = 64 - __builtin_clzll((uint64_t)(v - 1));
  return l > 62 ? (int64_t)1 << 62 : (int64_t)1 << l;
}
static inline int scree__clampi(int64_t v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : (int)v;
}
static inline int64_t scree__cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
/* The number of entries of a static table. */
#define SCREE__COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* Defines the descriptor scree__op_<op> from the tables and required hooks
 * the op file names schema, vfields, dims, impls and bench; default_config,
 * representative, problem, and the reference scree__ref_<op>. The optional
 * hooks follow, each as ".hook = name". It also compiles the op's argument
 * checks and vector width from its tables (ops/args_check.h). */
#define SCREE__DEFINE_OP(op, ...)                                                         \
  extern const scree__op scree__op_##op;                                                  \
  static scree_status scree__check_##op(scree_context *ctx, const void *args,             \
                                        CUstream stream, scree__variant *var, int *skip) { \
    return scree__args_check_in(ctx, &scree__op_##op, schema, SCREE__COUNT(schema),       \
                                vfields, SCREE__COUNT(vfields), args, stream, var, skip); \
  }                                                                                       \
  static int scree__vec_##op(const scree__variant *var, const void *args) {              \
    return scree__vec_log2_in(schema, SCREE__COUNT(schema), vfields, SCREE__COUNT(vfields), \
                              var, args);                                                 \
  }                                                                                       \
  const scree__op scree__op_##op = {                                                      \
      .name = #op, .args_size = sizeof(scree_##op##_args), .nargs = SCREE__COUNT(schema),  \
      .args = schema, .check_args = scree__check_##op, .vec_log2 = scree__vec_##op,        \
      .nimpls = SCREE__COUNT(impls), .impls = impls, .nvfields = SCREE__COUNT(vfields),    \
      .vfields = vfields, .ndims = SCREE__COUNT(dims), .dims = dims,                      \
      .default_config = default_config, .representative = representative,                \
      .problem = problem, .reference = scree__ref_##op, .bench = bench, __VA_ARGS__}

/* ---- registry.c ------------------------------------------------------------ */
extern const scree__op *const scree__ops[]; /* NULL-terminated */
const scree__op *scree__op_find(const char *name);
/* "" if every required hook and table of op is there, else what is
 * missing (the registry test). */
const char *scree__op_missing(const scree__op *op);

/* ---- config.c: configs, variants, buckets, shapes as text ------------------ */
/* "impl=generic,bm=128,..." (impl= only when the op has several). */
void scree__config_str(const scree__op *op, const scree__config *cfg,
                       char *buf, size_t size);
/* Parses that form: every field of the implementation once. 0 on success,
 * else -1 with the reason. */
int scree__config_parse(const scree__op *op, const char *s, scree__config *cfg,
                        char *why, size_t why_size);
/* Every point of every implementation's space (unchecked), in a fixed
 * order; writes up to cap, returns the count. */
int scree__config_space(const scree__op *op, scree__config *out, int cap);
/* The implementation's range and check against a target. */
int scree__config_check(const scree__op *op, const scree__config *cfg,
                        const scree__variant *var, const scree__target *t,
                        char *why, size_t why_size);
/* "x=fp16,w=fp16,y=fp16" and its strict parser (canonical form only). */
void scree__variant_str(const scree__op *op, const scree__variant *var,
                        char *buf, size_t size);
int scree__variant_parse(const scree__op *op, const char *s,
                         scree__variant *var, char *why, size_t why_size);
/* Every variant field at its example value. */
void scree__variant_example(const scree__op *op, scree__variant *var);
/* The causal flag of a variant: its field named "causal" (0 for ops without
 * one). */
int scree__variant_causal(const scree__op *op, const scree__variant *var);
/* The call's bucket (the hot path: one hook call and a rounding loop). */
void scree__bucket_of(const scree__op *op, const scree__variant *var,
                      const void *args, scree__bucket *b);
/* Batch-invariant mode: every batch dimension (scree__bdim.any) of b set
 * to SCREE__BUCKET_ANY. */
void scree__bucket_invariant(const scree__op *op, scree__bucket *b);
/* 1 if b holds a batch dimension as SCREE__BUCKET_ANY. */
int scree__bucket_is_invariant(const scree__op *op, const scree__bucket *b);
/* b with each SCREE__BUCKET_ANY replaced by its dimension's any value: the
 * bucket a batch-invariant config is tuned and checked on (out may be b). */
void scree__bucket_concrete(const scree__op *op, const scree__bucket *b, scree__bucket *out);
/* "rows<=16384,cols=4096" ("rows=any,cols=4096" in batch-invariant mode)
 * and its parser (values must be as rounded). */
void scree__bucket_str(const scree__op *op, const scree__bucket *b, char *buf,
                       size_t size);
int scree__bucket_parse(const scree__op *op, const char *s, scree__bucket *b,
                        char *why, size_t why_size);
/* "rows=16000,cols=4096": the shape fields of args (the schema's
 * SCREE__SHAPE fields, in its order); and the parser, which fills them into
 * a zeroed args struct (fields not given stay 0) and refuses values past
 * 2^40 either way. */
void scree__shape_str(const scree__op *op, const void *args, char *buf,
                      size_t size);
int scree__shape_parse(const scree__op *op, const char *s, void *args,
                       char *why, size_t why_size);
/* The names of the shape fields, "rows, cols" (for messages). */
void scree__shape_names(const scree__op *op, char *buf, size_t size);
/* 1 if a kernel's dynamic shared memory fits the target, else 0 with
 * "needs <bytes> bytes of shared memory; sm_XX allows <limit>". */
int scree__check_smem(size_t bytes, const scree__target *t, char *why, size_t why_size);
/* The target of this context's device, or of an arch name ("sm_90":
 * the arch's shared-memory opt-in limit from a table). */
void scree__target_of(const scree_context *ctx, scree__target *t);
int scree__target_for_arch(const char *arch, scree__target *t);
/* Frees the problem's host bytes. */
void scree__problem_free(scree__problem *p);
/* Appends a buffer to a problem; returns it. */
scree__buf *scree__problem_buf(scree__problem *p, const char *name,
                               scree__buf_kind kind, int dtype, size_t count,
                               size_t arg_offset);
/* Appends a buffer for every tensor of an op's schema that the problem's
 * args hold (a required one always; an optional one when the problem has
 * set its pointer field nonzero), in the schema's order: sized by its
 * extents and strides in p->args, IN, OUT or INOUT as its role, except
 * integer tensors, which are HOST_IN (the problem hook then writes their
 * bytes, b->host). Sets p->bytes to every tensor read or written once. 0,
 * or -1 with the reason when they do not fit. */
int scree__problem_bufs(scree__problem *p, const scree__arg *schema, int nargs, char *why,
                        size_t why_size);
/* The problem's buffer called name, or NULL. */
scree__buf *scree__problem_find(scree__problem *p, const char *name);
/* Vets a shape for a problem that is the shape as given: every SCREE__SHAPE
 * size in its range, and at least 1 where it is SCREE__EMPTY. 0, or -1 with
 * the reason. */
int scree__problem_shape(const void *args, const scree__arg *schema, int nargs, char *why,
                         size_t why_size);
/* Writes each dtype variant field into the args field it comes from (its
 * arg): the dtypes a representative or a problem takes from the variant. */
void scree__variant_dtypes(const scree__vfield *vfields, int nvfields, const scree__variant *var,
                           void *args);

/* ---- the checks derived from the schema (args_check.h, args.c) --------------- */
/* Every check of a public call before its plan lookup (op->check_args,
 * compiled for the op from its tables by SCREE__DEFINE_OP), in this order: the
 * variant fields given by args fields (one of their values), then sizes and
 * scalars against their ranges, the strides of tensors without
 * SCREE__ANY_ORDER, op->validate; then the empty-call test (*skip = 1 and
 * SCREE_OK when a SCREE__EMPTY size is 0); then each tensor in turn: its
 * pointer (NULL unless optional, alignment), its strides if
 * SCREE__ANY_ORDER, its byte range (past the end of the address space);
 * then overlaps (a written tensor apart from every other one, or exactly
 * one it may alias), and
 * op->validate_buffers. Fills the variant (zeroed by the caller). A tensor
 * with no elements is not looked at. The hot path: no allocation, no
 * formatting unless a check fails. */
scree_status scree__args_check(scree_context *ctx, const scree__op *op, const void *args,
                               CUstream stream, scree__variant *var, int *skip);
/* "" if op's schema describes its args struct consistently, else what is
 * wrong (scree__op_missing reports it). */
const char *scree__schema_missing(const scree__op *op);
/* The widest vector access, as log2 of elements (at most 3, 8 elements),
 * that the pointers and strides of the call's SCREE__VECTOR tensors allow,
 * each element the size of the variant's dtype for it. Trailing zero bits
 * only: no division on the hot path. */
int scree__vec_log2(const scree__op *op, const scree__variant *var, const void *args);
/* The plan-key class of what adapt does to a call: op->adapt_class, else
 * scree__vec_log2. */
int scree__adapt_class(const scree__op *op, const scree__variant *var, const void *args);
/* The steps of those: start with l = 3 and fold in each pointer (with its
 * element size) and each stride (in elements). A zero pointer or stride
 * allows all. */
static inline int scree__vlog2_ptr(int l, uint64_t p, size_t esize) {
  if (!p) return l;
  const int t = __builtin_ctzll(p) - (esize == 4 ? 2 : esize == 2 ? 1 : 0);
  return t < l ? (t < 0 ? 0 : t) : l;
}
static inline int scree__vlog2_stride(int l, int64_t s) {
  if (!s) return l;
  const int t = __builtin_ctzll((uint64_t)s);
  return t < l ? t : l;
}
/* The message of a value outside an entry's range ("cols=0 must be at least
 * 1") in buf, and its status. */
scree_status scree__range_text(const scree__arg *f, int64_t v, char *buf, size_t n);
/* The entry a link names, or NULL. */
const scree__arg *scree__arg_at(const scree__op *op, unsigned link);
/* The SCREE__SHAPE entry called name, or NULL. */
const scree__arg *scree__shape_field(const scree__op *op, const char *name);
/* A tensor's element type in args: a scree_dtype, SCREE__DTYPE_I32 or _I64. */
int scree__tensor_elem(const void *args, const scree__arg *t);
/* A tensor's extents in args (SCREE__PLUS_ONE applied) and effective
 * strides in elements (0 given: dense), outermost first; 0 if it has no
 * elements. */
typedef struct scree__geom {
  int rank;
  int64_t ext[3], stride[3];
} scree__geom;
int scree__tensor_geom(const void *args, const scree__arg *t, scree__geom *g);

/* The small checks the ops' own rules use.
 * NULL and alignment: SCREE_ERROR_INVALID_ARGUMENT "<name> is NULL", or
 * SCREE_ERROR_MISALIGNED "<name>=0x.. is not aligned to <align> bytes". */
scree_status scree__arg_ptr(scree_context *ctx, const char *name, scree_devptr p, size_t align);
/* The [lo, hi) bytes a strided [rows, cols] tensor of esize-byte elements
 * touches; 0 if that passes the end of the address space. */
int scree__byte_range(uint64_t base, int64_t rows, int64_t cols, int64_t stride, size_t esize,
                      uint64_t *lo, uint64_t *hi);
/* 1 if [alo, ahi) and [blo, bhi) share a byte. */
int scree__overlaps(uint64_t alo, uint64_t ahi, uint64_t blo, uint64_t bhi);
/* 1 if two sets of n rows with the same pitch p (bytes) share a byte: rows
 * of A are [a + i p, a + i p + wa), rows of B [b + j p, b + j p + wb), for
 * i, j in [0, n), with wa, wb <= p (interleaved layouts: gate and up of one
 * [rows, 2 cols] tensor, and a tensor written over either). */
int scree__rows_meet(uint64_t a, uint64_t wa, uint64_t b, uint64_t wb, uint64_t p, int64_t n);

/* ---- shapes.c ----------------------------------------------------------------
 * Reads {"shapes": [[rows, cols], ...], "dtypes": ["fp16", ...]} (the
 * dtypes list is optional; rows and cols 1 to 2^40; other keys, and keys
 * inside them, are ignored) with SQLite's JSON parser. Returns the number of
 * shapes (those past cap are counted, not stored) or -1 with the reason in
 * why: "line L, column C: ..." for text that is not JSON. */
int scree__parse_shapes(const char *json, long (*shapes)[2], int cap, scree_dtype *dtypes,
                        int dcap, int *ndtypes, char *why, size_t why_size);
/* "line L, column C: reason" for a text that SQLite's json_valid refused
 * (the HuggingFace configs of hf_config.c share it). */
void scree__json_syntax_error(const char *text, char *why, size_t why_size);

/* ---- references -------------------------------------------------------------
 * An op's CPU reference (double accumulation) is its `reference` hook, in
 * its op file (ops/<op>.c): args and host copies of the buffers in the
 * problem's order. The op file and the tests declare it with this macro. */
#define SCREE__REFERENCE(name) void scree__ref_##name(const void *args, void *const *host)

/* ---- paged_attention.c: batch-invariant splits ----------------------------------
 * In batch-invariant mode paged attention's split field names a fixed chunk
 * of keys (4096 / split; 0 for split 0: one item a sequence). The items a
 * launch needs at most (groups of (sequence, row tile, KV head), each
 * max_seqlen_k keys at most, in chunks), and a sequence's split count from
 * its span of keys and the key tile bn alone (the plan kernel's rule). */
int64_t scree__paged_invariant_chunk(int split);
int64_t scree__paged_invariant_items(int64_t groups, int64_t max_seqlen_k, int64_t chunk);
int64_t scree__paged_invariant_splits(int64_t span, int64_t chunk, int bn);

/* The checks compiled for each op (SCREE__DEFINE_OP). */
#include "ops/args_check.h"

#endif
