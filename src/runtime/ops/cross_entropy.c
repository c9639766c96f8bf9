/* cross_entropy.c - cross-entropy forward's host side: its arguments (the
 * targets read on the host when validation is on), config space,
 * constraints, defaults, the launch, buckets, problems, the CPU reference
 * and the benchmark entries. The kernel is kernels/cross_entropy.cu. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

/* ignore_index of generated problems when the shape leaves it 0. */
#define PROBLEM_IGNORE (-100)

#define ARG(m) SCREE__ARG(scree_cross_entropy_args, m)
#define AT(m) SCREE__AT(scree_cross_entropy_args, m)

/* The arguments (include/scree.h), field by field. The outputs have their
 * own memory; lse is optional. */
static const scree__arg schema[] = {
    {ARG(logits), .role = SCREE__IN, .dtype = AT(dtype), .dims = {AT(rows), AT(vocab)},
     .strides = {AT(logits_stride)}},
    {ARG(targets), .role = SCREE__IN, .elem = SCREE__E_I64, .dims = {AT(rows)}},
    {ARG(loss), .role = SCREE__OUT, .elem = SCREE__E_F32, .dims = {AT(rows)}},
    {ARG(lse), .role = SCREE__OUT, .elem = SCREE__E_F32, .dims = {AT(rows)},
     .flags = SCREE__OPTIONAL},
    {ARG(rows), .role = SCREE__DIM, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY},
    {ARG(vocab), .role = SCREE__DIM, SCREE__RANGE(1, (int64_t)1 << 24),
     .flags = SCREE__SHAPE | SCREE__LIMIT},
    {ARG(logits_stride), .role = SCREE__STRIDE},
    {ARG(ignore_index), .role = SCREE__INT},
    {ARG(dtype), .role = SCREE__DTYPE},
};

enum { V_DTYPE };

static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, AT(dtype)},
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
static const scree__bdim dims[] = {{"rows", 1, AT(rows)}, {"vocab", 0, AT(vocab)}};

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
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
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
  if (scree__problem_shape(a, schema, SCREE__COUNT(schema), why, why_size)) return -1;
  /* The check problem keeps the row length; a few rows show every mistake
   * that many would, and keep the CPU reference quick. */
  if (check) {
    const int64_t ecap = ((int64_t)1 << 22) / a->vocab;
    if (a->rows > 97) a->rows = 97;
    if (a->rows > ecap) a->rows = ecap > 0 ? ecap : 1;
  }
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  /* A shape from text leaves ignore_index 0 (which would ignore class 0):
   * generated problems ignore PyTorch's -100 then. */
  if (a->ignore_index == 0) a->ignore_index = PROBLEM_IGNORE;
  int64_t *t = malloc((size_t)a->rows * sizeof *t);
  if (!t) {
    scree__set_why(why, why_size, "out of memory (%lld targets)", (long long)a->rows);
    return -1;
  }
  gen_targets(t, a->rows, a->vocab, a->ignore_index, seed);
  /* From the schema: logits, targets (int64, written here), loss and lse,
   * each read or written once. */
  a->lse = 1; /* present */
  if (scree__problem_bufs(p, schema, SCREE__COUNT(schema), why, why_size)) {
    free(t);
    return -1;
  }
  scree__problem_find(p, "targets")->host = t;
  /* loss and lse are fp32 results of an fp32 computation, not one rounding
   * of exact values: the row sum's fp32 accumulation (relative ~1e-6 over
   * 2^18 terms), ex2.approx, and max * ln2 + log(sum) rounded near the
   * row maximum (a few 1e-6 absolute for logits of 50). loss = lse -
   * logit[target] keeps lse's absolute error and can be near 0. */
  for (int i = 0; i < 2; i++) {
    scree__buf *b = scree__problem_find(p, i ? "lse" : "loss");
    b->rtol = 1e-5;
    b->atol = 5e-5;
  }
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

/* ---- the CPU reference (double accumulation) ---------------------------- */

/* host: logits, targets (int64), loss, lse in the problem's buffer order
 * (the schema's); lse may be NULL (not written). */
SCREE__REFERENCE(cross_entropy) {
  const scree_cross_entropy_args *a = args;
  const void *logits = host[0];
  const int64_t *targets = host[1];
  float *loss = host[2], *lse = host[3];
  const int64_t ls = a->logits_stride ? a->logits_stride : a->vocab;
  for (int64_t r = 0; r < a->rows; r++) {
    double m = -INFINITY;
    for (int64_t c = 0; c < a->vocab; c++) {
      const double v = scree__load_elem(logits, a->dtype, (size_t)(r * ls + c));
      if (v > m) m = v;
    }
    double sum = 0;
    for (int64_t c = 0; c < a->vocab; c++)
      sum += exp(scree__load_elem(logits, a->dtype, (size_t)(r * ls + c)) - m);
    const double l = m + log(sum);
    const int64_t t = targets[r];
    if (t == a->ignore_index)
      loss[r] = 0.f;
    else if (t >= 0 && t < a->vocab)
      loss[r] = (float)(l - scree__load_elem(logits, a->dtype, (size_t)(r * ls + t)));
    else
      loss[r] = NAN;
    if (lse) lse[r] = (float)l;
  }
}

/* ---- benchmark entries: LLaMA-3's 128k vocabulary over 4096 tokens, and a
 * 32k vocabulary over 16384 tokens ------------------------------------------ */

static const char *const bench[] = {
    "dtype=bf16 rows=4096,vocab=128256",
    "dtype=fp16 rows=4096,vocab=128256",
    "dtype=fp16 rows=16384,vocab=32000",
    NULL,
};

/* ---- the op's own argument rules ---------------------------------------- */

/* Validation on: the targets, copied to the host, each ignore_index or in
 * [0, vocab). */
static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  (void)var;
  const scree_cross_entropy_args *a = args;
  if (!ctx->validate || !ctx->cu) return SCREE_OK;
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

static const scree__impl impls[] = {{SCREE__ROWWISE_IMPL("cross_entropy.cu", "scree_cross_entropy")}};

const scree__op scree__op_cross_entropy = {
    SCREE__OP_DESCRIPTOR(cross_entropy),
    .causal_vfield = -1,
    .validate_buffers = validate_buffers,
    .adapt_class = adapt_class,
    .shape_inputs = shape_inputs,
};
