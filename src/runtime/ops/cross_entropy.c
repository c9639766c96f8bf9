/* cross_entropy.c - cross-entropy forward's host side: its arguments (the
 * targets read on the host when validation is on), config space, default,
 * launch, problems, CPU reference and benchmark entries. The kernel is
 * kernels/cross_entropy.cu: the plain forward (variant grad=0), or the
 * extended one with label smoothing, z-loss and the gradient (grad=1),
 * after a count of the rows not ignored for the gradient's mean. Two
 * implementations: "generic" (kernels/cross_entropy.cu, both variants; with
 * the gradient it reads each row twice) and "keep" (kernels/
 * cross_entropy_keep.cu, grad=1 only: the row held in registers, across a
 * thread block cluster on sm_90, so the logits are read once), which the
 * tuner times beside generic (on an H200 its defaults ran at 40-58% of a
 * copy where generic's two reads ran at 54-71%: generic is the default). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"
#include "ops/rowwise_backward_ref.h"

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
    SCREE__OUT(dlogits, .dtype = SCREE__AT(dtype), .dims = {SCREE__AT(rows), SCREE__AT(vocab)},
               .strides = {SCREE__AT(dlogits_stride)}, .alias = {SCREE__AT(logits)},
               .flags = SCREE__OPTIONAL | SCREE__VECTOR),
    SCREE__STRIDE(dlogits_stride),
    SCREE__FLOAT(label_smoothing, .flags = SCREE__FINITE | SCREE__NONNEG, .hint = "(in [0, 1])"),
    SCREE__FLOAT(z_loss, .flags = SCREE__FINITE | SCREE__NONNEG),
    SCREE__INT(reduction, SCREE__RANGE(0, 2), .hint = "(0 none, 1 sum, 2 mean)"),
    SCREE__FLOAT(grad_scale, .flags = SCREE__FINITE, .hint = "(0 means 1)"),
    SCREE__OUT(count, .elem = SCREE__E_I64, .dims = {SCREE__AT(rows)},
               .flags = SCREE__OPTIONAL | SCREE__OWN_POINTER),
};

enum { V_DTYPE, V_GRAD };

/* grad: 0 the plain forward, 1 the extended kernel (label smoothing or
 * z-loss or dlogits asked for); set by validate_buffers. */
static const scree__vfield vfields[] = {
    {"dtype", "SCREE_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dtype)},
    {"grad", "SCREE_CE_GRAD", 0, 0, 2, {0, 1}, 0},
};

/* Whether a call needs the extended kernel. */
static int wants_grad(const scree_cross_entropy_args *a) {
  return a->dlogits || a->label_smoothing != 0.f || a->z_loss != 0.f;
}

/* label_smoothing at most 1 (the schema checks it is finite and >= 0). */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_cross_entropy_args *a = args;
  if (!(a->label_smoothing <= 1.f))
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "label_smoothing=%g is outside [0, 1]", (double)a->label_smoothing);
  return SCREE_OK;
}

/* Bucket: rows rounded up to a power of two, vocab exact (the row length
 * decides the launch shape and the number of batches per row). rows is a
 * batch dimension: batch-invariant mode tunes on 1024 rows. */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 1024},
                                   {"vocab", 0, SCREE__AT(vocab), 0}};

/* count (one int64; its extent is not a size of the call, so the op
 * checks it): 8-byte aligned, its 8 bytes inside the address space and
 * apart from every other buffer of the call. */
static scree_status check_count(scree_context *ctx, const scree_cross_entropy_args *a) {
  const uint64_t p = a->count;
  if (!p) return SCREE_OK;
  if (p & 7)
    return scree__fail(ctx, SCREE_ERROR_MISALIGNED, "count=0x%llx is not aligned to 8 bytes",
                       (unsigned long long)p);
  if (p > UINT64_MAX - 8) return scree__fail_wrap(ctx, "count", p);
  const size_t es = scree_dtype_size(a->dtype);
  const __int128 rows = a->rows;
  const struct {
    const char *name;
    uint64_t p;
    __int128 bytes;
  } bufs[] = {
      {"logits", a->logits,
       ((rows - 1) * (a->logits_stride ? a->logits_stride : a->vocab) + a->vocab) * es},
      {"targets", a->targets, rows * 8},
      {"loss", a->loss, rows * 4},
      {"lse", a->lse, rows * 4},
      {"dlogits", a->dlogits,
       ((rows - 1) * (a->dlogits_stride ? a->dlogits_stride : a->vocab) + a->vocab) * es},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i].p && (__int128)p < (__int128)bufs[i].p + bufs[i].bytes && bufs[i].p < p + 8)
      return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "count=0x%llx overlaps %s=0x%llx",
                         (unsigned long long)p, bufs[i].name, (unsigned long long)bufs[i].p);
  return SCREE_OK;
}

/* Validation on: the targets, copied to the host, each ignore_index or in
 * [0, vocab). */
static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  const scree_cross_entropy_args *a = args;
  var->v[V_GRAD] = wants_grad(a);
  scree_status st0 = check_count(ctx, a);
  if (st0) return st0;
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

/* The launch shape's check (rowwise.cuh) and the dtype; grad 0 or 1. */
static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  (void)t;
  if (!scree__rowwise_check(c, why, n) || !scree__rowwise_check_dtypes(var, 1, why, n)) return 0;
  if (var->v[V_GRAD] != 0 && var->v[V_GRAD] != 1) {
    snprintf(why, n, "grad=%d is not 0 or 1", var->v[V_GRAD]);
    return 0;
  }
  return 1;
}

/* Hand-picked default, the same on sm_80 and sm_90 until measurements say
 * otherwise: 16-byte accesses, batches of up to four vectors per thread (64
 * bytes in flight each), up to 256 threads per row (a 128k-vocab row then
 * takes 16 batches, enough to hide the merge at its end), at least 128
 * threads per CTA. */
/* With the gradient (grad=1): up to 1024 threads a row (one row per CTA
 * and, at the kernel's registers, one CTA per SM on a large vocabulary),
 * so that the rows between their two reads fit in L2 (docs/kernels/
 * rowwise.md). */
static void generic_default(const scree__variant *var, const scree_cross_entropy_args *a,
                            scree__config *out);
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  (void)t;
  generic_default(var, args, out);
}

/* impl=generic's default (above). */
static void generic_default(const scree__variant *var, const scree_cross_entropy_args *a,
                            scree__config *out) {
  memset(out, 0, sizeof *out);
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  const int vec = es == 4 ? 4 : 8;
  const int64_t vocab = a ? a->vocab : 32000;
  const int64_t nvec = vocab / vec > 0 ? vocab / vec : 1;
  const int tpr =
      scree__clampi(scree__pow2_ceil((nvec + 3) / 4), 8, var->v[V_GRAD] ? 1024 : 256);
  out->v[SCREE__RW_TPR] = tpr;
  out->v[SCREE__RW_ROWS] = scree__clampi(128 / tpr, 1, 16);
  out->v[SCREE__RW_VEC] = vec;
  out->v[SCREE__RW_CACHE] =
      scree__clampi(scree__pow2_ceil((nvec + tpr - 1) / tpr), 1, var->v[V_GRAD] ? 2 : 4);
}

/* Narrow VEC (keeping the elements per thread) until the logits' pointer
 * and row stride allow it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, scree__vec_log2(&scree__op_cross_entropy, var, args));
}

/* Skips configs whose batch (TPR x VEC x CACHE elements of a row) would be
 * mostly empty on this vocabulary: their threads would idle. With the
 * gradient (grad=1), also those that hold more than 32 bytes of a batch
 * per thread in CTAs of 512 threads or more, or more than 64 bytes in any:
 * ptxas (CUDA 13.0, sm_80 and sm_90) spilled every grad=1 config of the
 * safelists that did so (64 registers at 512 and 1024 threads), and no
 * config within these bounds (docs/kernels/rowwise.md). */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  const int64_t vocab = ((const scree_cross_entropy_args *)args)->vocab;
  const int64_t batch =
      (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE];
  if (var->v[V_GRAD]) {
    const int64_t bytes = (int64_t)c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE] *
                          (int64_t)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
    const int64_t threads = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS];
    if (bytes > 64 || (bytes > 32 && threads >= 512)) return 0;
  }
  return batch <= 2 * (int64_t)scree__pow2_ceil(vocab);
}

/* scree_ce_count (the kernel's second entry) when the call asks for the
 * count or the gradient's mean needs it: into count, else into 8 bytes of
 * the stream's workspace. *mean: what the row kernel divides the
 * gradient by (0: no mean). */
static scree_status launch_count(scree_context *ctx, const scree__kernel *k,
                                 const scree_cross_entropy_args *a, CUstream stream,
                                 uint64_t *mean) {
  const int need_mean = a->dlogits && a->reduction == SCREE_REDUCTION_MEAN;
  *mean = 0;
  if (!a->count && !need_mean) return SCREE_OK;
  uint64_t targets = a->targets, count = a->count;
  long long rows = a->rows, ignore = a->ignore_index;
  if (!count) {
    CUdeviceptr ws;
    scree_status st = scree__workspace(ctx, stream, 256, &ws);
    if (st) return st;
    count = ws;
  }
  void *cp[] = {&targets, &rows, &ignore, &count};
  CUresult r = ctx->cu->LaunchKernel(k->fn[1], 1, 1, 1, 256, 1, 1, 0, stream, cp, NULL);
  if (r) return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "cuLaunchKernel(cross_entropy count)");
  if (need_mean) *mean = count;
  return SCREE_OK;
}

/* scree_ce_count first when the call asks for the count or grad=1 with
 * dlogits and the mean needs it, then the row kernel on the same stream. */
static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  const scree_cross_entropy_args *a = args;
  uint64_t logits = a->logits, targets = a->targets, loss = a->loss, lse = a->lse;
  long long rows = a->rows;
  int vocab = (int)a->vocab;
  long long stride = a->logits_stride ? a->logits_stride : a->vocab;
  long long ignore = a->ignore_index;
  uint64_t dlogits = a->dlogits, count = 0;
  scree_status st = launch_count(ctx, k, a, stream, &count);
  if (st) return st;
  if (!var->v[V_GRAD]) {
    void *params[] = {&logits, &targets, &loss, &lse, &rows, &vocab, &stride, &ignore};
    return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "cross_entropy");
  }
  long long dstride = a->dlogits_stride ? a->dlogits_stride : a->vocab;
  float eps = a->label_smoothing, z = a->z_loss;
  float gs = a->grad_scale != 0.f ? a->grad_scale : 1.f;
  void *params[] = {&logits, &targets, &loss, &lse, &rows, &vocab, &stride, &ignore,
                    &dlogits, &dstride, &eps, &z, &gs, &count};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "cross_entropy");
}

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count, capped at 1 GiB of logits;
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
  /* count is the caller's (tests/runtime/ops/test_cross_entropy_gpu.c
   * calls with it); problems leave it out, as most calls do. */
  if (scree__rowwise_problem_omit(&scree__op_cross_entropy, args, var, check, (int64_t)1 << 22,
                                  "count", p, why, why_size))
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
  /* dlogits is the schema's last tensor, so its buffer the last one. */
  scree_cross_entropy_args *w = (scree_cross_entropy_args *)p->args;
  scree__buf *d = &p->bufs[p->nbufs - 1];
  if (!var->v[V_GRAD]) {
    /* The plain forward: no gradient, no smoothing, no z-loss. */
    p->bytes -= (double)d->count * scree_dtype_size(a->dtype);
    p->nbufs--;
    w->dlogits = 0;
    w->label_smoothing = w->z_loss = 0.f;
  } else {
    /* A training step's call: the mean, smoothing 0.1, PaLM's z-loss
     * 1e-4. dlogits' tolerance (ops/rowwise.h): one unit in the last place
     * of the dtype (the kernel rounds an fp32 value, the reference the
     * exact one), and the fp32 error of a probability near 1 (lse's, up
     * to 5e-5), both relative to the gradient's scale. */
    int64_t kept = 0;
    for (int64_t r = 0; r < a->rows; r++) kept += t[r] != a->ignore_index;
    w->reduction = SCREE_REDUCTION_MEAN;
    w->label_smoothing = 0.1f;
    w->z_loss = 1e-4f;
    w->grad_scale = 1.f;
    d->rtol = a->dtype == SCREE_DTYPE_BF16   ? SCREE__CE_GRAD_RTOL_BF16
              : a->dtype == SCREE_DTYPE_FP16 ? SCREE__CE_GRAD_RTOL_FP16
                                             : SCREE__CE_GRAD_RTOL_FP32;
    d->atol = SCREE__CE_GRAD_ATOL / (double)(kept ? kept : 1) +
              (a->dtype == SCREE_DTYPE_FP16 ? SCREE__CE_GRAD_ATOL_FP16_FLOOR : 0);
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
    "dtype=bf16,grad=0 rows=4096,vocab=128256",
    "dtype=bf16,grad=1 rows=8192,vocab=128256",
    "dtype=bf16,grad=1 rows=16384,vocab=32000",
    "dtype=fp16,grad=0 rows=4096,vocab=128256",
    "dtype=fp16,grad=0 rows=16384,vocab=32000",
    NULL,
};

/* ---- the CPU reference (double accumulation) ----------------------------- */

/* host: logits, targets (int64), loss, lse, and dlogits when args has it,
 * in the problem's buffer order (the schema's); lse may be NULL (not
 * written). Smoothing, z-loss or dlogits: scree__cross_entropy_ref
 * (ops/rowwise_backward_ref.c), else the plain forward's below. */
SCREE__REFERENCE(cross_entropy) {
  const scree_cross_entropy_args *a = args;
  const void *logits = host[0];
  const int64_t *targets = host[1];
  float *loss = host[2], *lse = host[3];
  const int64_t ls = a->logits_stride ? a->logits_stride : a->vocab;
  if (wants_grad(a)) {
    scree__cross_entropy_ref(logits, ls, targets, loss, lse, a->dlogits ? host[4] : NULL,
                             a->dlogits_stride, a->rows, a->vocab, a->dtype, a->ignore_index,
                             a->label_smoothing, a->z_loss, a->reduction, a->grad_scale);
    return;
  }
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

/* ---- impl=keep (kernels/cross_entropy_keep.cu) ------------------------------
 * The gradient variant (grad=1) with each row held on chip between its
 * statistics and dlogits, so that the logits are read once: the row-wise
 * launch shape (cache: the vectors each thread keeps, at most 64 bytes of
 * them) and csize, the CTAs of a thread block cluster that share a row
 * (sm_90; 1 on sm_80). It runs where the row fits: vocab / vec <= csize x
 * tpr x cache vectors. */

enum { K_CSIZE = SCREE__RW_NFIELDS, K_NFIELDS };

static const scree__field keep_fields[K_NFIELDS] = {
    {"tpr", "SCREE_TPR", 8, {8, 16, 32, 64, 128, 256, 512, 1024}},
    {"rows", "SCREE_ROWS", 5, {1, 2, 4, 8, 16}},
    {"vec", "SCREE_VEC", 4, {1, 2, 4, 8}},
    {"cache", "SCREE_CACHE", 5, {1, 2, 4, 8, 16}},
    {"csize", "SCREE_CSIZE", 4, {1, 2, 4, 8}},
};

/* Vectors of a row the config holds. */
static int64_t keep_capacity(const scree__config *c) {
  return (int64_t)c->v[K_CSIZE] * c->v[SCREE__RW_TPR] * c->v[SCREE__RW_CACHE];
}

/* Mirrors the kernel's static_asserts: the launch shape's, at most 64
 * bytes kept per thread, csize 1, 2, 4 or 8 and clusters only on sm_90;
 * grad=1 only (the plain forward reads its row once already). */
static int keep_check(const scree__config *c, const scree__variant *var, const scree__target *t,
                      char *why, size_t n) {
  if (!scree__rowwise_check(c, why, n) || !scree__rowwise_check_dtypes(var, 1, why, n)) return 0;
  if (var->v[V_GRAD] != 1) {
    snprintf(why, n, "impl=keep is the gradient variant's (grad=1), not grad=%d", var->v[V_GRAD]);
    return 0;
  }
  const int bytes = c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE] *
                    (int)scree_dtype_size((scree_dtype)var->v[V_DTYPE]);
  if (bytes > 64) {
    snprintf(why, n, "vec=%d x cache=%d keeps %d bytes a thread, past 64", c->v[SCREE__RW_VEC],
             c->v[SCREE__RW_CACHE], bytes);
    return 0;
  }
  return scree__check_cluster("csize", c->v[K_CSIZE], t, why, n);
}

/* Narrows VEC to what the call allows, keeping the bytes a thread holds
 * (cache doubles, up to 16), then the vectors of the row held (tpr
 * doubles, rows halving when the CTA would pass 1024 threads). A row that
 * still does not fit (a config tuned on aligned rows, called on rows that
 * allow narrower vectors only) gets impl=generic's default for the call,
 * adapted: a result rather than a refusal. */
static void keep_adapt(scree__config *c, const scree__variant *var, const void *args) {
  const int wl = scree__vec_log2(&scree__op_cross_entropy, var, args), widest = 1 << wl;
  const int64_t want = keep_capacity(c) * c->v[SCREE__RW_VEC];
  while (c->v[SCREE__RW_VEC] > widest) {
    c->v[SCREE__RW_VEC] /= 2;
    if (c->v[SCREE__RW_CACHE] < 16) c->v[SCREE__RW_CACHE] *= 2;
  }
  while (keep_capacity(c) * c->v[SCREE__RW_VEC] < want && c->v[SCREE__RW_TPR] < 1024) {
    if (c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS] >= 1024) c->v[SCREE__RW_ROWS] /= 2;
    c->v[SCREE__RW_TPR] *= 2;
  }
  const scree_cross_entropy_args *a = args;
  if (a && a->vocab / c->v[SCREE__RW_VEC] > keep_capacity(c)) {
    generic_default(var, a, c);
    scree__rowwise_adapt(c, wl);
  }
}

/* Configs that hold the row (else the launch refuses them), without the
 * row in half of them (threads idle; a smaller cluster or CTA holds it),
 * the smallest shape (tpr 8, cache 1, csize 1) always. */
static int keep_worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const int64_t vocab = ((const scree_cross_entropy_args *)args)->vocab;
  const int64_t nvec = vocab / c->v[SCREE__RW_VEC], cap = keep_capacity(c);
  if (nvec > cap) return 0;
  return cap == 8 || nvec * 2 > cap;
}

/* The row must fit (else SCREE_ERROR_UNSUPPORTED, nothing launched);
 * scree_ce_count first for the mean, as the generic launch; then one
 * cluster per ROWS rows (at most 2^31 - 1 CTAs; the kernel strides). */
static scree_status keep_launch(scree_context *ctx, const scree__kernel *k,
                                const scree__config *c, const scree__variant *var,
                                const void *args, CUstream stream) {
  (void)var;
  const scree_cross_entropy_args *a = args;
  const int cs = c->v[K_CSIZE];
  if (a->vocab / c->v[SCREE__RW_VEC] > keep_capacity(c))
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "cross_entropy impl=keep: vocab=%lld is %lld vectors of %d, past the "
                       "%lld that csize=%d x tpr=%d x cache=%d hold",
                       (long long)a->vocab, (long long)(a->vocab / c->v[SCREE__RW_VEC]),
                       c->v[SCREE__RW_VEC], (long long)keep_capacity(c), cs,
                       c->v[SCREE__RW_TPR], c->v[SCREE__RW_CACHE]);
  uint64_t logits = a->logits, targets = a->targets, loss = a->loss, lse = a->lse;
  long long rows = a->rows;
  int vocab = (int)a->vocab;
  long long stride = a->logits_stride ? a->logits_stride : a->vocab;
  long long ignore = a->ignore_index;
  uint64_t dlogits = a->dlogits, count = 0;
  long long dstride = a->dlogits_stride ? a->dlogits_stride : a->vocab;
  float eps = a->label_smoothing, z = a->z_loss;
  float gs = a->grad_scale != 0.f ? a->grad_scale : 1.f;
  scree_status st = launch_count(ctx, k, a, stream, &count);
  if (st) return st;
  int64_t clusters = scree__cdiv(rows, c->v[SCREE__RW_ROWS]);
  if (clusters > 0x7fffffffLL / cs) clusters = 0x7fffffffLL / cs;
  if (clusters < 1) clusters = 1;
  void *params[] = {&logits, &targets, &loss, &lse, &rows, &vocab, &stride, &ignore,
                    &dlogits, &dstride, &eps, &z, &gs, &count};
  const scree__grid g = {(unsigned)(clusters * cs), 1, 1,
                         (unsigned)(c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS]), 0, cs};
  return scree__launch_grid(ctx, k->fn[0], g, stream, params, "cross_entropy", "csize",
                            "cross_entropy keep");
}

static const scree__impl impls[] = {
    {SCREE__ROWWISE_IMPL(check, "cross_entropy.cu", "scree_cross_entropy", "scree_ce_count")},
    {SCREE__IMPL("keep", "cross_entropy_keep.cu", 80, 0, "scree_ce_keep", "scree_ce_count"),
     .nfields = K_NFIELDS, .fields = keep_fields, .check = keep_check, .adapt = keep_adapt,
     .worth_timing = keep_worth_timing, .launch = keep_launch},
};

SCREE__DEFINE_OP(cross_entropy, .validate = validate, .validate_buffers = validate_buffers,
                 .shape_inputs = shape_inputs);
