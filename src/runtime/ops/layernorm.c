/* layernorm.c - LayerNorm's host side: its arguments, config space,
 * default, launch, problems, CPU reference and benchmark entries. The
 * kernel is kernels/layernorm.cu.
 *
 * The variant is the three dtypes (27 variants). The bias and the mean /
 * rstd outputs are run-time options (null pointers), not variant fields:
 * the kernel's branches on them are uniform, and ptxas (sm_90) shows no
 * case for compiling them in. With the run-time checks, fp16
 * tpr=128,rows=1,vec=8,cache=4 takes 48 registers; with bias and
 * statistics fixed on at compile time 55, fixed off 48. fp32
 * tpr=256,rows=1,vec=4,cache=4: 52, 54 and 48; fp16 at tpr=1024, cache=8:
 * 64 in all three; no spills in any. 0 to 8 registers saved in a variant
 * without bias or statistics, for 4 times the variants to compile, tune
 * and cache: not worth it on a memory-bound kernel. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/rowwise.h"

#define SCREE__ARGS_T scree_layernorm_args

/* The arguments (include/scree.h), field by field. y may be x exactly (in
 * place); the bias and the fp32 statistics are optional. */
static const scree__arg schema[] = {
    SCREE__IN(x, .dtype = SCREE__AT(x_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
              .strides = {SCREE__AT(x_stride)}, .flags = SCREE__VECTOR),
    SCREE__IN(w, .dtype = SCREE__AT(w_dtype), .dims = {SCREE__AT(cols)}, .flags = SCREE__VECTOR),
    SCREE__IN(b, .dtype = SCREE__AT(w_dtype), .dims = {SCREE__AT(cols)},
              .flags = SCREE__OPTIONAL | SCREE__VECTOR),
    SCREE__OUT(y, .dtype = SCREE__AT(y_dtype), .dims = {SCREE__AT(rows), SCREE__AT(cols)},
               .strides = {SCREE__AT(y_stride)}, .alias = {SCREE__AT(x)}, .flags = SCREE__VECTOR),
    SCREE__OUT(mean, .elem = SCREE__E_F32, .dims = {SCREE__AT(rows)},
               .flags = SCREE__OPTIONAL | SCREE__CHECK_ONLY),
    SCREE__OUT(rstd, .elem = SCREE__E_F32, .dims = {SCREE__AT(rows)},
               .flags = SCREE__OPTIONAL | SCREE__CHECK_ONLY),
    SCREE__DIM(rows, SCREE__MIN(0), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(cols, SCREE__RANGE(1, 65536), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(x_stride), SCREE__STRIDE(y_stride),
    SCREE__DTYPE(x_dtype), SCREE__DTYPE(w_dtype), SCREE__DTYPE(y_dtype),
    SCREE__FLOAT(eps, .flags = SCREE__FINITE | SCREE__NONNEG, .example = 1e-5),
};

enum { V_X, V_W, V_Y };

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(x_dtype)},
    {"w", "SCREE_W_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(w_dtype)},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(y_dtype)},
};

/* Bucket: rows rounded up to a power of two, cols exact. Bias and
 * statistics share the bucket's config (a few bytes per row more or less
 * moved; the tuned problem has a bias and no statistics). rows is a batch
 * dimension: batch-invariant mode tunes on 1024 rows. */
static const scree__bdim dims[] = {{"rows", 1, SCREE__AT(rows), 1024},
                                   {"cols", 0, SCREE__AT(cols), 0}};

/* Hand-picked default, the same on sm_80 and sm_90 until measurements say
 * otherwise: RMSNorm's (about four vectors in flight per thread, the whole
 * row in registers when it fits, at least 128 threads per CTA) with two
 * changes that keep ptxas from spilling. Vectors are 16 bytes of the
 * widest dtype, not of x (a 4-byte w or y doubles the registers of each
 * vector of the output pass). At 1024 threads a CTA (64 registers a
 * thread) a thread keeps at most 128 bytes of x in registers, 64 with a
 * 4-byte w or y: past that ptxas spills (fp32 at vec=4, cache=16 about
 * 500 bytes). The rest of such a row is streamed, read again from L2. */
static void default_config(const scree__target *t, const scree__variant *var,
                           const void *args, scree__config *out) {
  (void)t;
  const scree_layernorm_args *a = args;
  const int ex = (int)scree_dtype_size((scree_dtype)var->v[V_X]);
  const int ew = (int)scree_dtype_size((scree_dtype)var->v[V_W]);
  const int ey = (int)scree_dtype_size((scree_dtype)var->v[V_Y]);
  scree__rowwise_default(a ? a->cols : 4096, ex, out);
  if (ew == 4 || ey == 4) scree__rowwise_adapt(out, 2);
  const int budget = ew == 4 || ey == 4 ? 64 : 128;
  if (out->v[SCREE__RW_TPR] * out->v[SCREE__RW_ROWS] >= 1024)
    while (out->v[SCREE__RW_CACHE] > 1 &&
           out->v[SCREE__RW_VEC] * out->v[SCREE__RW_CACHE] * ex > budget)
      out->v[SCREE__RW_CACHE] /= 2;
}

/* Narrow VEC (keeping the elements per thread) until every pointer (b only
 * when given) and row stride of the call allows it. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  scree__rowwise_adapt(c, scree__vec_log2(&scree__op_layernorm, var, args));
}

static scree_status launch(scree_context *ctx, const scree__kernel *k,
                           const scree__config *c, const scree__variant *var,
                           const void *args, CUstream stream) {
  (void)var;
  const scree_layernorm_args *a = args;
  long long rows = a->rows;
  int cols = (int)a->cols;
  long long xs = a->x_stride ? a->x_stride : a->cols;
  long long ys = a->y_stride ? a->y_stride : a->cols;
  float eps = a->eps;
  uint64_t x = a->x, w = a->w, b = a->b, y = a->y, mean = a->mean, rstd = a->rstd;
  void *params[] = {&x, &w, &b, &y, &mean, &rstd, &rows, &cols, &xs, &ys, &eps};
  return scree__rowwise_launch(ctx, k->fn[0], c, rows, params, stream, "layernorm");
}

/* Skips configs whose threads would mostly idle on this row length, or
 * that would re-read most of the row from memory in later passes. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  return scree__rowwise_worth(c, ((const scree_layernorm_args *)args)->cols);
}

/* ---- problems ------------------------------------------------------------ */

/* Tuned on the bucket's largest row count, capped at 1 GiB of x. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  scree__rowwise_representative(&scree__op_layernorm, b, var, check, 0, args);
}

/* The shape's rows: x, w, b, y, then mean and rstd in check problems only
 * (a timed problem is the inference form: a bias, no statistics). The
 * problem's args mark the optional buffers it holds with a nonzero b /
 * mean / rstd (every run binds them to device pointers), which is how the
 * reference knows which host copies it is given.
 *
 * Tolerances: y, one rounding of y's dtype (scree__tolerance): the kernel's
 * statistics keep an fp32 error relative to the row's spread, not to its
 * mean (kernels/layernorm.cu), so nothing of the offset remains. rstd:
 * fp32's (rtol 1e-5, atol 1e-6). mean: rtol 1e-5 and an atol of
 * SCREE__LAYERNORM_MEAN_ATOL (ops/rowwise.h),
 * for the same reason: its fp32 sums err relative to the row's spread, and
 * a row of zero mean has no digits of its own to be relative to. The check
 * rows (shape_inputs) have spreads up to 8 with a last quarter of 32; a
 * thread summing 1024 of them in sequence (tpr=8 on cols=8192) was seen off
 * by 2.4e-6 on the H100, 3e-7 of the spread. The atol is 1e-6 of the
 * largest values, 8x that. The offsets still expose dropped or mixed
 * elements: one element of a row offset by top spreads (shape_inputs) moves
 * that row's mean by offset / cols, 1e-3 for bf16 rows of 8192. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  (void)seed, (void)lens;
  if (scree__rowwise_problem(&scree__op_layernorm, args, var, check, 0, p, why, why_size))
    return -1;
  if (check) scree__problem_find(p, "mean")->atol = SCREE__LAYERNORM_MEAN_ATOL;
  const size_t n = strlen(p->desc);
  snprintf(p->desc + n, sizeof p->desc - n, ", with bias%s", check ? ", mean and rstd" : "");
  return 0;
}

/* Random rows all have mean ~0 and spread ~1, so a kernel that mixed rows
 * up, dropped the scalar tail or the part of a row past the register cache,
 * or took the variance as mean(x^2) - mu^2 could stay inside the
 * tolerance. Give each row its own spread (1/8 ... 8) and offset (0, or up
 * to 64 / 512 / 4096 spreads for bf16 / fp16 / fp32 x, which keeps the
 * offset rows' noise resolved at about half a spread or finer), and make
 * the noise of the tail and the last quarter of each row larger. On the
 * offset rows sum(x^2) / n - mu^2 in fp32 loses the variance's leading
 * digits. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_layernorm_args *a = args;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const double top = a->x_dtype == SCREE_DTYPE_BF16   ? 64
                     : a->x_dtype == SCREE_DTYPE_FP16 ? 512
                                                      : 4096;
  /* Offsets in spreads, cycling with the row (coprime with the 7 scales). */
  const double offsets[4] = {0, top, -top / 4, top / 16};
  for (int64_t r = 0; r < a->rows; r++) {
    const double spread = ldexp(1.0, (int)(r % 7) - 3);
    const double offset = offsets[r % 4] * spread;
    for (int64_t c = 0; c < a->cols; c++) {
      double f = spread;
      if (c >= a->cols - a->cols / 4) f *= 4;
      if (c >= a->cols - 8) f *= 4;
      const size_t i = (size_t)(r * xs + c);
      scree__store_elem(h[0], a->x_dtype, i, offset + f * scree__load_elem(h[0], a->x_dtype, i));
    }
  }
}

/* The benchmark entries: the shapes of bench/rowwise_shapes.json, with a
 * bias, no mean or rstd written. */
static const char *const bench[] = {
    "x=fp16,w=fp16,y=fp16 rows=16384,cols=4096", "x=bf16,w=bf16,y=bf16 rows=16384,cols=4096",
    "x=fp16,w=fp16,y=fp16 rows=4096,cols=8192",  "x=fp16,w=fp16,y=fp16 rows=65536,cols=1024",
    "x=fp16,w=fp16,y=fp16 rows=8,cols=4096",     "x=fp16,w=fp16,y=fp16 rows=16384,cols=128",
    NULL,
};

/* ---- the CPU reference (double accumulation, two passes: the mean, then
 * the mean squared deviation from it) ------------------------------------- */

/* host: x, w, [b], y, [mean], [rstd] in the problem's buffer order
 * (the schema's): an optional buffer is there when its pointer in args is
 * nonzero. */
SCREE__REFERENCE(layernorm) {
  const scree_layernorm_args *a = args;
  int k = 0;
  const void *x = host[k++], *w = host[k++];
  const void *b = a->b ? host[k++] : NULL;
  void *y = host[k++];
  float *mean = a->mean ? host[k++] : NULL;
  float *rstd = a->rstd ? host[k++] : NULL;
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  for (int64_t r = 0; r < a->rows; r++) {
    double s = 0;
    for (int64_t c = 0; c < a->cols; c++)
      s += scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
    const double mu = s / (double)a->cols;
    double sq = 0;
    for (int64_t c = 0; c < a->cols; c++) {
      const double d = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c)) - mu;
      sq += d * d;
    }
    const double inv = 1.0 / sqrt(sq / (double)a->cols + (double)a->eps);
    for (int64_t c = 0; c < a->cols; c++) {
      const double v = scree__load_elem(x, a->x_dtype, (size_t)(r * xs + c));
      const double g = scree__load_elem(w, a->w_dtype, (size_t)c);
      const double bb = b ? scree__load_elem(b, a->w_dtype, (size_t)c) : 0;
      scree__store_elem(y, a->y_dtype, (size_t)(r * ys + c), (v - mu) * inv * g + bb);
    }
    if (mean) mean[r] = (float)mu;
    if (rstd) rstd[r] = (float)inv;
  }
}

static const scree__impl impls[] = {
    {SCREE__ROWWISE_IMPL(scree__rowwise_config_check, "layernorm.cu", "scree_layernorm")}};

SCREE__DEFINE_OP(layernorm, .shape_inputs = shape_inputs);
