/* cross_entropy.c - cross-entropy forward's host side: its arguments (the
 * targets read on the host when validation is on), config space, default,
 * launch, problems, CPU reference and benchmark entries. The kernel is
 * kernels/cross_entropy.cu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

#define SCREE__ARGS_T scree_cross_entropy_args

/* The arguments (include/scree.h), field by field. The outputs have their
 * own memory; lse is optional. Only the logits are read in vectors. A
 * generated problem ignores PyTorch's -100 (0, a shape's, would ignore
 * class 0). */
static const scree__arg schema[] = {
    SCREE__IN(logits, .dtype = SCREE__AT(dtype), .dims = {SCREE__AT(rows), SCREE__AT(vocab)},
              .strides = {SCREE__AT(logits_stride)}, .flags = SCREE__VECTOR),
    SCREE__IN(targets, .elem = SCREE__E_I64, .dims = {SCREE__AT(rows)}),
    SCREE__OUT(loss, .elem = SCREE__E_F32, .dims = {SCREE__AT(rows)}),
    SCREE__OUT(lse, .elem = SCREE__E_F32, .dims = {SCREE__AT(rows)}, .flags = SCREE__OPTIONAL),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(vocab, SCREE__RANGE(1, (int64_t)1 << 24), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(logits_stride),
    SCREE__INT(ignore_index, .example = -100),
    SCREE__DTYPE(dtype),
};

enum { V_DTYPE };

static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dtype)},
};

/* Bucket: rows rounded up to a power of two, vocab exact (the row length
 * decides the launch shape and the number of batches per row). */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows)}, {"vocab", 0, SCREE__AT(vocab)}};

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
  scree_status st = scree__read_device(ctx, stream, h, a->targets, n * sizeof *h, "targets");
  for (size_t i = 0; i < n && !st; i++)
    if (h[i] != a->ignore_index && (h[i] < 0 || h[i] >= a->vocab))
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "targets[%zu]=%lld is outside [0, vocab=%lld) and is not "
                       "ignore_index=%lld",
                       i, (long long)h[i], (long long)a->vocab, (long long)a->ignore_index);
  free(h);
  return st;
}

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
  const int tpr = scree__clampi(scree__pow2_ceil((nvec + 3) / 4), 8, 256);
  out->v[SCREE__RW_TPR] = tpr;
  out->v[SCREE__RW_ROWS] = scree__clampi(128 / tpr, 1, 16);
  out->v[SCREE__RW_VEC] = vec;
  out->v[SCREE__RW_CACHE] = scree__clampi(scree__pow2_ceil((nvec + tpr - 1) / tpr), 1, 4);
}

/* Narrow VEC (keeping the elements per thread) until the logits' pointer
 * and row stride allow it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, scree__vec_log2(&scree__op_cross_entropy, var, args));
}

/* Skips configs whose batch (TPR x VEC x CACHE elements of a row) would be
 * mostly empty on this vocabulary: their threads would idle. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const int64_t vocab = ((const scree_cross_entropy_args *)args)->vocab;
  const int64_t batch =
      (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE];
  return batch <= 2 * (int64_t)scree__pow2_ceil(vocab);
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

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count, capped at 256 MiB of logits;
 * checked on at most 97 rows and 4M logits, so the reference is quick. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_cross_entropy, b, var, check, (int64_t)1 << 22, args);
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

/* The shape's rows: logits and the targets (int64, generated here) in,
 * loss and lse out. loss and lse are fp32 results of an fp32 computation,
 * not one rounding of exact values: the row sum's fp32 accumulation
 * (relative ~1e-6 over 2^18 terms), ex2.approx, and max * ln2 + log(sum)
 * rounded near the row maximum (a few 1e-6 absolute for logits of 50).
 * loss = lse - logit[target] keeps lse's absolute error and can be near 0. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)lens;
  if (scree__rowwise_problem(&scree__op_cross_entropy, args, var, check, (int64_t)1 << 22, p,
                             why, why_size))
    return -1;
  const scree_cross_entropy_args *a = (const scree_cross_entropy_args *)p->args;
  int64_t *t = malloc((size_t)a->rows * sizeof *t);
  if (!t) {
    scree__set_why(why, why_size, "out of memory (%lld targets)", (long long)a->rows);
    return -1;
  }
  gen_targets(t, a->rows, a->vocab, a->ignore_index, seed);
  scree__problem_find(p, "targets")->host = t;
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
  scree__rowwise_shape_rows(h[0], a->dtype, a->rows, a->vocab, ls, 2);
  for (int64_t r = 1; r < a->rows; r += 3) {
    if (t[r] == a->ignore_index || t[r] < 0 || t[r] >= a->vocab) continue;
    double mx = -INFINITY;
    for (int64_t c = 0; c < a->vocab; c++) {
      const double v = scree__load_elem(h[0], a->dtype, (size_t)(r * ls + c));
      if (v > mx) mx = v;
    }
    scree__store_elem(h[0], a->dtype, (size_t)(r * ls + t[r]), mx + 1);
  }
}

/* The benchmark entries: LLaMA-3's 128k vocabulary over 4096 tokens, and a
 * 32k vocabulary over 16384 tokens. */
static const char *const bench[] = {
    "dtype=bf16 rows=4096,vocab=128256",
    "dtype=fp16 rows=4096,vocab=128256",
    "dtype=fp16 rows=16384,vocab=32000",
    NULL,
};

/* ---- the CPU reference (double accumulation) ----------------------------- */

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

static const scree__impl impls[] = {{SCREE__ROWWISE_IMPL(
    scree__rowwise_config_check, "cross_entropy.cu", "scree_cross_entropy")}};

SCREE__DEFINE_OP(cross_entropy, .validate_buffers = validate_buffers,
                 .shape_inputs = shape_inputs);
