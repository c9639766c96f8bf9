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
 * values the op supports. */
typedef struct scree__vfield {
  const char *name;
  const char *macro;
  int is_dtype;
  int example;
  int nvalues;   /* the supported values (tests compile every variant) */
  int values[8];
} scree__vfield;

/* A bucket dimension: exact ("cols=4096") or rounded up to a power of two
 * ("rows<=16384"). */
typedef struct scree__bdim {
  const char *name;
  int pow2;
} scree__bdim;

/* An int64 field of the op's args struct that is part of a call's shape
 * (printed and parsed as "name=value"). */
typedef struct scree__sfield {
  const char *name;
  size_t offset;
} scree__sfield;

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
  int causal_vfield;      /* index of the causal flag in vfields, or -1 */
  int ndims;
  const scree__bdim *dims;
  int nshape;
  const scree__sfield *shape;

  /* The public entry's checks: on bad input returns the status with a
   * message naming the argument (scree__fail) and launches nothing. Fills
   * the call's variant; *skip = 1 for a valid call with nothing to do. May
   * read device memory when ctx->validate is set. */
  scree_status (*validate)(scree_context *ctx, const void *args, CUstream stream,
                           scree__variant *var, int *skip);
  /* The raw bucket dimensions of a call, in `dims` order (the generic code
   * rounds them). On the hot path: no division, no loop over the batch. */
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
};

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
/* The causal flag of a variant (0 for ops without one). */
int scree__variant_causal(const scree__op *op, const scree__variant *var);
/* The call's bucket (the hot path: one hook call and a rounding loop). */
void scree__bucket_of(const scree__op *op, const scree__variant *var,
                      const void *args, scree__bucket *b);
/* "rows<=16384,cols=4096" and its parser (values must be as rounded). */
void scree__bucket_str(const scree__op *op, const scree__bucket *b, char *buf,
                       size_t size);
int scree__bucket_parse(const scree__op *op, const char *s, scree__bucket *b,
                        char *why, size_t why_size);
/* "rows=16000,cols=4096": the shape fields of args; and the parser, which
 * fills them into a zeroed args struct (fields not given stay 0) and
 * refuses values past 2^40 either way. */
void scree__shape_str(const scree__op *op, const void *args, char *buf,
                      size_t size);
int scree__shape_parse(const scree__op *op, const char *s, void *args,
                       char *why, size_t why_size);
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

/* ---- args.c: argument checks every op's validate shares --------------------- */
/* NULL and alignment: SCREE_ERROR_INVALID_ARGUMENT "<name> is NULL", or
 * SCREE_ERROR_MISALIGNED "<name>=0x.. is not aligned to <align> bytes". */
scree_status scree__arg_ptr(scree_context *ctx, const char *name, scree_devptr p, size_t align);
/* The [lo, hi) bytes a strided [rows, cols] tensor of esize-byte elements
 * touches; 0 if that passes the end of the address space. */
int scree__byte_range(uint64_t base, int64_t rows, int64_t cols, int64_t stride, size_t esize,
                      uint64_t *lo, uint64_t *hi);
/* 1 if [alo, ahi) and [blo, bhi) share a byte. */
int scree__overlaps(uint64_t alo, uint64_t ahi, uint64_t blo, uint64_t bhi);

/* ---- shapes.c ----------------------------------------------------------------
 * Reads {"shapes": [[rows, cols], ...], "dtypes": ["fp16", ...]} (the
 * dtypes list is optional; rows and cols 1 to 2^40; other keys, and keys
 * inside them, are ignored) with SQLite's JSON parser. Returns the number of
 * shapes (those past cap are counted, not stored) or -1 with the reason in
 * why: "line L, column C: ..." for text that is not JSON. */
int scree__parse_shapes(const char *json, long (*shapes)[2], int cap, scree_dtype *dtypes,
                        int dcap, int *ndtypes, char *why, size_t why_size);

/* ---- references -------------------------------------------------------------
 * An op's CPU reference (double accumulation) is its `reference` hook, in
 * ops/<op>_ref.c: args and host copies of the buffers in the problem's
 * order. The op file and the tests declare it with this macro. */
#define SCREE__REFERENCE(name) void scree__ref_##name(const void *args, void *const *host)

#endif
