/* cross_entropy.c - cross-entropy forward's host side: config space,
 * constraints, defaults, argument checks (targets read on the host when
 * validation is on), the launch, buckets and problems. The kernel is
 * kernels/cross_entropy.cu; the CPU reference ops/cross_entropy_ref.c. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

enum { V_DTYPE };

#define MAX_VOCAB ((int64_t)1 << 24)
/* ignore_index of generated problems when the shape leaves it 0. */
#define PROBLEM_IGNORE (-100)

static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}},
};

static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  (void)t; /* static shared memory only, well under every arch's limit */
  return scree__rowwise_check_dtypes(var, 1, why, n) && scree__rowwise_check(c, why, n);
}

static int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p <<= 1;
  return p;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Hand-picked default, the same on sm_80 and sm_90 until measurements say
 * otherwise: 16-byte accesses, batches of up to four vectors per thread (64
 * bytes in flight each), up to 256 threads per row (a 128k-vocab row then
 * takes 16 batches, enough to hide the merge at its end), at least 128
 * threads per CTA. */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  (void)t;
  const scree_cross_entropy_args *a = args;
  memset(out, 0, sizeof *out);
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  const int vec = es == 4 ? 4 : 8;
  const int64_t vocab = a ? a->vocab : 32000;
  const int64_t nvec = vocab / vec > 0 ? vocab / vec : 1;
  const int tpr = clampi(pow2_ceil((nvec + 3) / 4), 8, 256);
  out->v[SCREE__RW_TPR] = tpr;
  out->v[SCREE__RW_ROWS] = clampi(128 / tpr, 1, 16);
  out->v[SCREE__RW_VEC] = vec;
  out->v[SCREE__RW_CACHE] = clampi(pow2_ceil((nvec + tpr - 1) / tpr), 1, 4);
}

/* log2 of the widest vector (in elements, at most 8) that the logits'
 * pointer and row stride allow (targets, loss and lse are read and written
 * one element at a time). */
static int vec_log2(const scree__variant *var, const scree_cross_entropy_args *a) {
  const int l = scree__vlog2_ptr(3, a->logits, scree_dtype_size((scree_dtype)var->v[V_DTYPE]));
  return scree__vlog2_stride(l, a->logits_stride ? a->logits_stride : a->vocab);
}

/* A vector access of VEC elements needs every row start aligned to it:
 * narrow VEC (keeping the elements per thread) until the call allows it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, vec_log2(var, args));
}

static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  (void)var;
  const scree_cross_entropy_args *a = args;
  uint64_t logits = a->logits, targets = a->targets, loss = a->loss, lse = a->lse;
  long long rows = a->rows;
  int vocab = (int)a->vocab;
  long long stride = a->logits_stride ? a->logits_stride : a->vocab;
  long long ignore = a->ignore_index;
  void *params[] = {&logits, &targets, &loss, &lse, &rows, &vocab, &stride, &ignore};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "cross_entropy");
}

/* ---- tuning hooks ------------------------------------------------------ */

/* Bucket: rows rounded up to a power of two, vocab exact (the row length
 * decides the launch shape and the number of batches per row). */
static const scree__bdim dims[] = {{"rows", 1}, {"vocab", 0}};

static void bucket(const scree__variant *var, const void *args, int64_t *d) {
  (void)var;
  const scree_cross_entropy_args *a = args;
  d[0] = a->rows;
  d[1] = a->vocab;
}

/* The widest vector the logits' pointer and stride allow, as log2. */
static int adapt_class(const scree__variant *var, const void *args) {
  return vec_log2(var, args);
}

/* Tuned on the bucket's largest row count, capped at 256 MiB of logits
 * (past that the time per byte no longer changes); checked on at most 97
 * rows and 4M logits, so the reference is quick. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree_cross_entropy_args *a = args;
  memset(a, 0, sizeof *a);
  a->vocab = b->v[1];
  const int64_t es = (int64_t)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  int64_t rows = b->v[0];
  const int64_t cap = ((int64_t)256 << 20) / (a->vocab > 0 ? a->vocab * es : 1);
  if (rows > cap) rows = cap > 0 ? cap : 1;
  if (check) {
    const int64_t ecap = ((int64_t)1 << 22) / (a->vocab > 0 ? a->vocab : 1);
    if (rows > 97) rows = 97;
    if (rows > ecap) rows = ecap > 0 ? ecap : 1;
  }
  a->rows = rows;
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  a->ignore_index = PROBLEM_IGNORE;
}

/* Skips configs whose batch (TPR x VEC x CACHE elements of a row) would be
 * mostly empty on this vocabulary: their threads would idle. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const int64_t vocab = ((const scree_cross_entropy_args *)args)->vocab;
  const int64_t batch =
      (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE];
  return batch <= 2 * (int64_t)pow2_ceil(vocab);
}

/* Targets of a generated problem, row r: every 8th row ignored; rows
 * taking the first and last class and the first element past the last
 * whole 8-vector (the scalar tail) and the last element of the last whole
 * vector; the rest uniform, deterministic per seed. shape_inputs makes
 * some of them the row maximum. */
static void gen_targets(int64_t *t, int64_t rows, int64_t vocab, int64_t ignore, uint64_t seed) {
  uint64_t s = seed | 1;
  const int64_t whole = vocab / 8 * 8;
  for (int64_t r = 0; r < rows; r++) {
    const uint64_t u = scree__rand(&s);
    switch (r % 8) {
      case 0: t[r] = ignore; break;
      case 1: t[r] = vocab - 1; break;
      case 2: t[r] = 0; break;
      case 3: t[r] = whole < vocab ? whole : vocab / 2; break;
      case 5: t[r] = whole > 0 ? whole - 1 : 0; break;
      default: t[r] = (int64_t)(u % (uint64_t)vocab); break;
    }
  }
}

static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)lens;
  scree_cross_entropy_args *a = (scree_cross_entropy_args *)p->args;
  memcpy(a, args, sizeof *a);
  if (a->rows < 1 || a->vocab < 1 || a->vocab > MAX_VOCAB) {
    scree__set_why(why, why_size, "rows=%lld, vocab=%lld: need rows >= 1, 1 <= vocab <= 2^24",
                   (long long)a->rows, (long long)a->vocab);
    return -1;
  }
  /* The check problem keeps the row length; a few rows show every mistake
   * that many would, and keep the CPU reference quick. */
  if (check) {
    const int64_t ecap = ((int64_t)1 << 22) / a->vocab;
    if (a->rows > 97) a->rows = 97;
    if (a->rows > ecap) a->rows = ecap > 0 ? ecap : 1;
  }
  a->dtype = (scree_dtype)var->v[V_DTYPE];
  /* A shape from text leaves ignore_index 0 (which would ignore class 0):
   * generated problems ignore PyTorch's -100 then. */
  if (a->ignore_index == 0) a->ignore_index = PROBLEM_IGNORE;
  const int64_t ls = a->logits_stride ? a->logits_stride : a->vocab;
  int64_t *t = malloc((size_t)a->rows * sizeof *t);
  if (!t) {
    scree__set_why(why, why_size, "out of memory (%lld targets)", (long long)a->rows);
    return -1;
  }
  gen_targets(t, a->rows, a->vocab, a->ignore_index, seed);
  scree__buf *b;
  scree__problem_buf(p, "logits", SCREE__BUF_IN, a->dtype, (size_t)(a->rows * ls),
                     offsetof(scree_cross_entropy_args, logits));
  /* int64 targets, carried as pairs of int32 (only their bytes matter). */
  b = scree__problem_buf(p, "targets", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32, (size_t)a->rows * 2,
                         offsetof(scree_cross_entropy_args, targets));
  b->host = t;
  /* loss and lse are fp32 results of an fp32 computation, not one rounding
   * of exact values: the row sum's fp32 accumulation (relative ~1e-6 over
   * 2^18 terms), ex2.approx, and max * ln2 + log(sum) rounded near the
   * row maximum (a few 1e-6 absolute for logits of 50). loss = lse -
   * logit[target] keeps lse's absolute error and can be near 0. */
  b = scree__problem_buf(p, "loss", SCREE__BUF_OUT, SCREE_DTYPE_FP32, (size_t)a->rows,
                         offsetof(scree_cross_entropy_args, loss));
  b->rtol = 1e-5;
  b->atol = 5e-5;
  b = scree__problem_buf(p, "lse", SCREE__BUF_OUT, SCREE_DTYPE_FP32, (size_t)a->rows,
                         offsetof(scree_cross_entropy_args, lse));
  b->rtol = 1e-5;
  b->atol = 5e-5;
  /* logits read once, targets read once, loss and lse written once. */
  p->bytes = (double)a->rows * ((double)a->vocab * (double)scree_dtype_size(a->dtype) + 8 + 4 + 4);
  snprintf(p->desc, sizeof p->desc, "%lld rows of %lld logits, ignore_index %lld",
           (long long)a->rows, (long long)a->vocab, (long long)a->ignore_index);
  return 0;
}

/* Random logits give every row about the same lse, and dropping one class
 * of 128k changes it by less than the tolerance. Scale each row differently
 * (by 1/8 ... 8), make the last quarter and the last 8 logits of each row
 * larger (the part a faulty stream or tail would drop then carries most of
 * a peaked row's sum), and make the target the row's maximum (by 1) in
 * every third row: a target logit read one element off is then far from
 * the right one. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_cross_entropy_args *a = args;
  const int64_t ls = a->logits_stride ? a->logits_stride : a->vocab;
  const int64_t *t = h[1];
  for (int64_t r = 0; r < a->rows; r++) {
    const double row_scale = ldexp(1.0, (int)(r % 7) - 3);
    double mx = -INFINITY;
    for (int64_t c = 0; c < a->vocab; c++) {
      double f = row_scale;
      if (c >= a->vocab - a->vocab / 4) f *= 2;
      if (c >= a->vocab - 8) f *= 2;
      const size_t i = (size_t)(r * ls + c);
      scree__store_elem(h[0], a->dtype, i, f * scree__load_elem(h[0], a->dtype, i));
      const double v = scree__load_elem(h[0], a->dtype, i);
      if (v > mx) mx = v;
    }
    if (r % 3 == 1 && t[r] != a->ignore_index && t[r] >= 0 && t[r] < a->vocab)
      scree__store_elem(h[0], a->dtype, (size_t)(r * ls + t[r]), mx + 1);
  }
}

SCREE__REFERENCE(cross_entropy); /* ops/cross_entropy_ref.c */

static const scree__impl impls[] = {{
    .name = "generic",
    .source = "cross_entropy.cu",
    .entries = {"scree_cross_entropy"},
    .min_sm = 80,
    .nfields = SCREE__RW_NFIELDS,
    .fields = scree__rowwise_fields,
    .check = check,
    .adapt = adapt,
    .worth_timing = worth_timing,
    .launch = launch,
}};

static const scree__sfield shape[] = {
    {"rows", offsetof(scree_cross_entropy_args, rows)},
    {"vocab", offsetof(scree_cross_entropy_args, vocab)},
};

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip);

const scree__op scree__op_cross_entropy = {
    .name = "cross_entropy",
    .args_size = sizeof(scree_cross_entropy_args),
    .nimpls = 1,
    .impls = impls,
    .nvfields = 1,
    .vfields = vfields,
    .causal_vfield = -1,
    .ndims = 2,
    .dims = dims,
    .nshape = 2,
    .shape = shape,
    .validate = validate,
    .bucket = bucket,
    .adapt_class = adapt_class,
    .default_config = default_config,
    .representative = representative,
    .problem = problem,
    .shape_inputs = shape_inputs,
    .reference = scree__ref_cross_entropy,
};

/* ---- the public entry point -------------------------------------------- */

/* Validation on: the targets, copied to the host, each ignore_index or in
 * [0, vocab). */
static scree_status check_targets(scree_context *ctx, const scree_cross_entropy_args *a,
                                  CUstream stream) {
  const size_t n = (size_t)a->rows;
  int64_t *h = malloc(n * sizeof *h);
  if (!h) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "validate: targets copy");
  const int pushed = scree__ctx_enter(ctx);
  CUresult r = ctx->cu->StreamSynchronize(stream);
  if (!r) r = ctx->cu->MemcpyDtoH(h, a->targets, n * sizeof *h);
  scree__ctx_leave(ctx, pushed);
  scree_status st = SCREE_OK;
  if (r) st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "validate: reading targets");
  for (size_t i = 0; i < n && !st; i++)
    if (h[i] != a->ignore_index && (h[i] < 0 || h[i] >= a->vocab))
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "targets[%zu]=%lld is outside [0, vocab=%lld) and is not "
                       "ignore_index=%lld",
                       i, (long long)h[i], (long long)a->vocab, (long long)a->ignore_index);
  free(h);
  return st;
}

static scree_status validate(scree_context *ctx, const void *args, CUstream stream,
                             scree__variant *var, int *skip) {
  const scree_cross_entropy_args *a = args;
  if (scree__arg_float_dtype(ctx, "dtype", a->dtype)) return SCREE_ERROR_UNSUPPORTED;
  if (a->vocab < 1)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "vocab=%lld must be at least 1",
                       (long long)a->vocab);
  if (a->vocab > MAX_VOCAB)
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "vocab=%lld exceeds the supported maximum 2^24 (16777216)",
                       (long long)a->vocab);
  if (a->rows < 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "rows=%lld is negative",
                       (long long)a->rows);
  const int64_t ls = scree__arg_stride(ctx, "logits_stride", a->logits_stride, a->vocab);
  if (ls < 0) return SCREE_ERROR_INVALID_ARGUMENT;
  if (a->rows == 0) { /* nothing to do, nothing launched */
    *skip = 1;
    return SCREE_OK;
  }
  scree_status st;
  if ((st = scree__arg_elem_ptr(ctx, "logits", a->logits, a->dtype)) ||
      (st = scree__arg_ptr(ctx, "targets", a->targets, 8)) ||
      (st = scree__arg_ptr(ctx, "loss", a->loss, 4)) ||
      (a->lse && (st = scree__arg_ptr(ctx, "lse", a->lse, 4))))
    return st;
  uint64_t glo, ghi, tlo, thi, llo, lhi, elo = 0, ehi = 0;
  if (!scree__byte_range(a->logits, a->rows, a->vocab, ls, scree_dtype_size(a->dtype), &glo,
                         &ghi) ||
      !scree__byte_range(a->targets, 1, a->rows, a->rows, 8, &tlo, &thi) ||
      !scree__byte_range(a->loss, 1, a->rows, a->rows, 4, &llo, &lhi) ||
      (a->lse && !scree__byte_range(a->lse, 1, a->rows, a->rows, 4, &elo, &ehi)))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "rows=%lld x logits_stride overflows the address space",
                       (long long)a->rows);
  /* The outputs have their own memory: no overlap with an input or each
   * other. */
  if (scree__overlaps(llo, lhi, glo, ghi) || scree__overlaps(llo, lhi, tlo, thi))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "loss=0x%llx overlaps logits or targets", (unsigned long long)a->loss);
  if (a->lse && (scree__overlaps(elo, ehi, glo, ghi) || scree__overlaps(elo, ehi, tlo, thi) ||
                 scree__overlaps(elo, ehi, llo, lhi)))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "lse=0x%llx overlaps logits, targets or loss", (unsigned long long)a->lse);
  if (ctx->validate && ctx->cu && (st = check_targets(ctx, a, stream))) return st;
  memset(var, 0, sizeof *var);
  var->v[V_DTYPE] = a->dtype;
  return SCREE_OK;
}
