/* ragged_softmax_backward.c - the ragged softmax's backward, the host side:
 * its arguments (cu_seqlens read on the host only with validation on, as
 * the forward's), config space and check, default, launch, buckets,
 * problems, CPU reference and benchmark entries. The kernel is
 * kernels/ragged_softmax_backward.cu (its header describes the thread
 * mapping and the passes); the reference's arithmetic is
 * scree__ragged_softmax_backward_ref (ops/rowwise_backward_ref.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"
#include "ops/rowwise_backward_ref.h"

#define SCREE__ARGS_T scree_ragged_softmax_backward_args

/* The arguments (include/scree.h), field by field. dx may be dy exactly (in
 * place); it is of dy's dtype. The counts bound int32 cu_seqlens. */
static const scree__arg schema[] = {
    SCREE__IN(y, .dtype = SCREE__AT(y_dtype), .dims = {SCREE__AT(total), SCREE__AT(cols)},
              .strides = {SCREE__AT(y_stride)}, .flags = SCREE__VECTOR),
    SCREE__IN(dy, .dtype = SCREE__AT(dy_dtype), .dims = {SCREE__AT(total), SCREE__AT(cols)},
              .strides = {SCREE__AT(dy_stride)}, .flags = SCREE__VECTOR),
    SCREE__OUT(dx, .dtype = SCREE__AT(dy_dtype), .dims = {SCREE__AT(total), SCREE__AT(cols)},
               .strides = {SCREE__AT(dx_stride)}, .alias = {SCREE__AT(dy)},
               .flags = SCREE__VECTOR),
    SCREE__IN(cu_seqlens, .elem = SCREE__E_I32, .dims = {SCREE__AT(batch)},
              .flags = SCREE__PLUS_ONE),
    SCREE__DIM(batch, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(total, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(max_seqlen, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE),
    SCREE__DIM(cols, SCREE__RANGE(1, 65536), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(y_stride), SCREE__STRIDE(dy_stride), SCREE__STRIDE(dx_stride),
    SCREE__DTYPE(y_dtype), SCREE__DTYPE(dy_dtype),
    SCREE__FLOAT(scale, .flags = SCREE__FINITE), /* 0 means 1 */
};

enum { V_Y, V_DY };

static const scree__vfield vfields[] = {
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(y_dtype)},
    {"dy", "SCREE_DY_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(dy_dtype)},
};

/* ---- the config space (kernels/ragged_softmax_backward.cu) --------------- */

enum { S_TPR, S_ROWS, S_VEC, S_STOK, S_SPLIT, S_NFIELDS };

static const scree__field fields[S_NFIELDS] = {
    {"tpr", "SCREE_TPR", 3, {2, 4, 8}},
    {"rows", "SCREE_ROWS", 6, {16, 32, 64, 128, 256, 512}},
    {"vec", "SCREE_VEC", 4, {1, 2, 4, 8}},
    {"stok", "SCREE_STOK", 6, {256, 512, 1024, 2048, 4096, 8192}},
    {"split", "SCREE_SPLIT", 4, {1, 2, 4, 8}},
};

/* Bytes of one staged token: a CTA's column strip of y and of dy. */
static size_t token_bytes(const scree__config *c, const scree__variant *var) {
  return (size_t)c->v[S_TPR] * (size_t)c->v[S_VEC] *
         (scree_dtype_size((scree_dtype)var->v[V_Y]) + scree_dtype_size((scree_dtype)var->v[V_DY]));
}

/* The largest stage: STOK tokens (the loader opts in to it; a launch takes
 * what the call's longest sequence needs). */
static size_t smem_bytes(const scree__config *c, const scree__variant *var) {
  return (size_t)c->v[S_STOK] * token_bytes(c, var);
}

/* The kernel's static reduction buffers: one float per warp, lane and
 * column, when there are several warps; one per lane and column for the
 * cluster's exchange. */
static size_t red_bytes(const scree__config *c) {
  const int warps = c->v[S_TPR] * c->v[S_ROWS] / 32;
  const size_t lanes = (size_t)c->v[S_TPR] * (size_t)c->v[S_VEC] * 4;
  return (warps > 1 ? (size_t)warps * lanes : 0) + (c->v[S_SPLIT] > 1 ? lanes : 0);
}

static int threads(const scree__config *c) { return c->v[S_TPR] * c->v[S_ROWS]; }

/* Mirrors the kernel's static_asserts, and the stage and the reduction
 * buffer within what a CTA may opt in to on the target. */
static int check(const scree__config *c, const scree__variant *var, const scree__target *t,
                 char *why, size_t n) {
  if (!scree__rowwise_check_dtypes(var, 2, why, n)) return 0;
  const int tpr = c->v[S_TPR], rows = c->v[S_ROWS], vec = c->v[S_VEC], stok = c->v[S_STOK];
  if (tpr != 2 && tpr != 4 && tpr != 8) {
    scree__set_why(why, n, "tpr=%d: must be 2, 4 or 8", tpr);
    return 0;
  }
  if (rows < 16 || rows > 512 || (rows & (rows - 1))) {
    scree__set_why(why, n, "rows=%d: must be a power of two in [16, 512]", rows);
    return 0;
  }
  if (tpr * rows < 32 || tpr * rows > 1024) {
    scree__set_why(why, n, "tpr*rows=%d: must be in [32, 1024]", tpr * rows);
    return 0;
  }
  if (vec != 1 && vec != 2 && vec != 4 && vec != 8) {
    scree__set_why(why, n, "vec=%d: must be 1, 2, 4 or 8", vec);
    return 0;
  }
  if (stok < rows || stok > 8192 || (stok & (stok - 1))) {
    scree__set_why(why, n, "stok=%d: must be a power of two in [rows=%d, 8192]", stok, rows);
    return 0;
  }
  if (!scree__check_cluster("split", c->v[S_SPLIT], t, why, n)) return 0;
  const size_t need = smem_bytes(c, var) + red_bytes(c);
  if (need > (size_t)t->smem_optin) {
    scree__set_why(why, n, "stok=%d tokens of %zu bytes: %zu bytes of shared memory, past the "
                   "%d a CTA may use on sm_%d", stok, token_bytes(c, var), need,
                   t->smem_optin, t->sm);
    return 0;
  }
  return 1;
}

/* CTAs below which the default narrows its strip: about two per SM of a
 * large GPU. */
#define ENOUGH_CTAS 256

/* Hand-picked default (unmeasured), after the forward's shared-memory
 * implementation's H100 sweep (tpr=2, rows=64, 16-byte accesses best on
 * 16 x 337..1821 x 4096; safe_configs/sm_90.txt): 16-byte accesses of the
 * wider of y and dy, two lanes (a 32-byte strip), 64 token groups (128
 * threads); fewer groups and more lanes for sequences shorter than 64
 * tokens (keeping 128 threads); then, while the grid (batch x column
 * blocks) has fewer than ENOUGH_CTAS CTAs, narrower vectors down to 8
 * bytes; the stage as long as the longest sequence (at least 256 tokens),
 * halved until it fits the target's shared memory (fp16: 64 bytes a token,
 * 2048 tokens in 128 KiB; a longer sequence streams its rest twice). On
 * sm_90, where the stage of the whole sequence would leave room for one
 * CTA per SM (more than a third of the shared memory), the sequence is
 * split over a cluster of 2 (4 past two thirds): each CTA stages its share,
 * at most a third, as the forward's stage of x alone is on these batches,
 * and still reads every token once. */
static void default_config(const scree__target *t, const scree__variant *var, const void *args,
                           scree__config *out) {
  const scree_ragged_softmax_backward_args *a = args;
  const int ey = (int)scree_dtype_size((scree_dtype)var->v[V_Y]);
  const int eg = (int)scree_dtype_size((scree_dtype)var->v[V_DY]);
  const int es = ey > eg ? ey : eg;
  const int64_t cols = a && a->cols > 0 ? a->cols : 4096;
  const int64_t maxlen = a && a->max_seqlen > 0 ? a->max_seqlen : 1024;
  const int64_t batch = a && a->batch > 0 ? a->batch : 16;
  memset(out, 0, sizeof *out);
  const int rows = scree__clampi(scree__pow2_ceil(maxlen), 16, 64);
  const int tpr = scree__clampi(128 / rows, 2, 8);
  int vec = 16 / es;
  while (vec > 1 && vec / 2 * es >= 8 && batch * scree__cdiv(cols, (int64_t)tpr * vec) < ENOUGH_CTAS)
    vec /= 2;
  out->v[S_TPR] = tpr;
  out->v[S_ROWS] = rows;
  out->v[S_VEC] = vec;
  out->v[S_SPLIT] = 1;
  const size_t third = t ? (size_t)t->smem_optin / 3 : 0;
  if (t && t->sm >= 90) {
    /* The stage a launch would take for the longest sequence. */
    const size_t per_token = (size_t)tpr * (size_t)vec * (size_t)(ey + eg);
    const size_t whole = (size_t)(scree__cdiv(maxlen, rows) * rows) * per_token;
    while (out->v[S_SPLIT] < 4 && whole / (size_t)out->v[S_SPLIT] > third)
      out->v[S_SPLIT] *= 2;
  }
  out->v[S_STOK] = scree__clampi(
      scree__pow2_ceil(scree__cdiv(maxlen, out->v[S_SPLIT])), rows > 256 ? rows : 256, 8192);
  while (out->v[S_STOK] > 256 && out->v[S_STOK] > rows && t &&
         smem_bytes(out, var) + red_bytes(out) > (size_t)t->smem_optin)
    out->v[S_STOK] /= 2;
}

/* Narrows VEC to what the call's alignment allows (a narrower strip, the
 * same tokens: the CTA's column block narrows, more CTAs). */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  const int widest = 1 << scree__vec_log2(&scree__op_ragged_softmax_backward, var, args);
  while (c->v[S_VEC] > widest) c->v[S_VEC] /= 2;
}

/* Skips configs that would mostly idle on this shape: a strip over twice
 * the (pow2) row, token groups (or a cluster's CTAs) past the longest
 * sequence, or a stage of which half would hold a CTA's part of the
 * longest sequence (a launch sizes the stage to the call, so such a config
 * runs as the one with half the stok). */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const scree_ragged_softmax_backward_args *a = args;
  const int rows = c->v[S_ROWS], stok = c->v[S_STOK], split = c->v[S_SPLIT];
  const int64_t longest = scree__pow2_ceil(a->max_seqlen > 0 ? a->max_seqlen : 1);
  const int64_t per_cta = scree__pow2_ceil(scree__cdiv(longest, split));
  if ((int64_t)c->v[S_TPR] * c->v[S_VEC] > 2 * (int64_t)scree__pow2_ceil(a->cols)) return 0;
  if ((int64_t)rows * split > longest) return 0;
  if (stok / 2 >= per_cta && stok / 2 >= rows) return 0;
  return 1;
}

/* Grid (column blocks of tpr * vec, times split; the batch over y and z),
 * block tpr * rows, clusters of split CTAs along x (cuLaunchKernelEx) when
 * split > 1, a stage of a CTA's part of the longest sequence rounded up to
 * the groups, at most stok. */
static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  const scree_ragged_softmax_backward_args *a = args;
  if (a->batch == 0 || a->total == 0) return SCREE_OK; /* no token: nothing to write */
  const int tpr = c->v[S_TPR], rows = c->v[S_ROWS], stok = c->v[S_STOK], split = c->v[S_SPLIT];
  const int span = tpr * c->v[S_VEC];
  const int64_t want =
      a->max_seqlen > 0 ? scree__cdiv(scree__cdiv(a->max_seqlen, split), rows) * rows : stok;
  int stage = want < stok ? (int)want : stok;
  const unsigned smem = (unsigned)((size_t)stage * token_bytes(c, var));
  uint64_t y = a->y, dy = a->dy, dx = a->dx, cu = a->cu_seqlens;
  int cols = (int)a->cols, batch = (int)a->batch;
  long long ys = a->y_stride ? a->y_stride : a->cols;
  long long gs = a->dy_stride ? a->dy_stride : a->cols;
  long long xs = a->dx_stride ? a->dx_stride : a->cols;
  float s = a->scale != 0.f ? a->scale : 1.f;
  void *params[] = {&y, &dy, &dx, &cu, &cols, &ys, &gs, &xs, &s, &stage, &batch};
  /* Column blocks fastest: the CTAs that run together read whole rows. */
  const unsigned gx = (unsigned)(scree__cdiv(a->cols, span) * split);
  const unsigned gy = (unsigned)(a->batch < 65535 ? a->batch : 65535);
  const unsigned gz = (unsigned)scree__cdiv(a->batch, gy);
  const scree__grid g = {gx, gy, gz, (unsigned)(tpr * rows), smem, split};
  return scree__launch_grid(ctx, k->fn[0], g, stream, params, "ragged_softmax_backward", "split",
                            "ragged_softmax_backward");
}

/* ---- tuning hooks ------------------------------------------------------ */

/* Bucket: cols exact; the total tokens and the longest sequence rounded up
 * to powers of two (as the forward's). */
static const scree__bdim dims[] = {{"cols", 0, SCREE__AT(cols), 0},
                                   {"total", 1, SCREE__AT(total), 0},
                                   {"max_seqlen", 1, SCREE__AT(max_seqlen), 0}};

/* Tuned on the bucket's largest token count and longest sequence, capped
 * at 256 MiB of y and dy. The batch is generated by the problem hook from
 * the seed. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  (void)check; /* the problem hook sizes check problems itself */
  scree_ragged_softmax_backward_args *a = args;
  memset(a, 0, sizeof *a);
  a->cols = b->v[0];
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  const int64_t es =
      (int64_t)(scree_dtype_size(a->y_dtype) + scree_dtype_size(a->dy_dtype));
  const int64_t cap = ((int64_t)256 << 20) / (a->cols > 0 ? a->cols * es : 1);
  a->total = b->v[1] < cap ? b->v[1] : cap > 0 ? cap : 1;
  a->max_seqlen = b->v[2] < a->total ? b->v[2] : a->total;
}

/* ---- problems ------------------------------------------------------------ */

/* Generated batches: scree__check_lens to check, scree__tune_lens to time
 * (base/base.h), of at most MAX_SEQS sequences. */
#define MAX_SEQS (1 << 20)

/* Buffers y, dy, cu_seqlens, dx (the reference's order); packed rows. dx's
 * relative tolerance is one rounding to its dtype (scree__tolerance), its
 * absolute one scree__softmax_bwd_atol(scale) in every dtype, as the
 * last-dimension backward's (ops/softmax_backward.c): y
 * is a softmax output per column (shape_inputs), so |d| <= max |dy|, and d,
 * an fp32 sum over the sequence in the kernel's order, errs by a few 1e-7
 * of its largest terms, which dy - d keeps. A check problem takes a scale
 * other than 1, so a kernel that ignored it fails. */
static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  scree_ragged_softmax_backward_args *a = (scree_ragged_softmax_backward_args *)p->args;
  memcpy(a, args, sizeof *a);
  if (a->cols < 1 || a->cols > 65536) {
    scree__set_why(why, why_size, "cols=%lld: need 1 <= cols <= 65536", (long long)a->cols);
    return -1;
  }
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  a->y_stride = a->dy_stride = a->dx_stride = 0;
  if (check && a->scale == 0) a->scale = 0.75f;
  int64_t *l = malloc(MAX_SEQS * sizeof *l);
  if (!l) {
    scree__set_why(why, why_size, "out of memory");
    return -1;
  }
  int n;
  if (lens) {
    n = lens->n < MAX_SEQS ? lens->n : MAX_SEQS;
    for (int i = 0; i < n; i++) l[i] = lens->q[i];
  } else if (check) {
    n = scree__check_lens(a->cols, a->max_seqlen, l);
  } else {
    n = scree__tune_lens(a->total, a->max_seqlen, seed, l, MAX_SEQS);
  }
  int32_t *cu = malloc((size_t)(n + 1) * sizeof *cu);
  if (!cu) {
    free(l);
    scree__set_why(why, why_size, "out of memory");
    return -1;
  }
  int64_t sum = 0, mx = 0, mn = INT64_MAX;
  cu[0] = 0;
  for (int i = 0; i < n; i++) {
    if (l[i] < 0 || sum + l[i] > 0x7fffffff) {
      scree__set_why(why, why_size, "length %lld of sequence %d: lengths must be >= 0 and sum "
                     "below 2^31", (long long)l[i], i);
      free(l), free(cu);
      return -1;
    }
    sum += l[i];
    cu[i + 1] = (int32_t)sum;
    if (l[i] > mx) mx = l[i];
    if (l[i] < mn) mn = l[i];
  }
  free(l);
  a->batch = n;
  a->total = sum;
  a->max_seqlen = mx;
  const size_t elems = (size_t)a->total * (size_t)a->cols;
  scree__buf *b;
  scree__problem_buf(p, "y", SCREE__BUF_IN, a->y_dtype, elems,
                     offsetof(scree_ragged_softmax_backward_args, y));
  scree__problem_buf(p, "dy", SCREE__BUF_IN, a->dy_dtype, elems,
                     offsetof(scree_ragged_softmax_backward_args, dy));
  b = scree__problem_buf(p, "cu_seqlens", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32, (size_t)n + 1,
                         offsetof(scree_ragged_softmax_backward_args, cu_seqlens));
  b->host = cu;
  b = scree__problem_buf(p, "dx", SCREE__BUF_OUT, a->dy_dtype, elems,
                         offsetof(scree_ragged_softmax_backward_args, dx));
  b->atol = scree__softmax_bwd_atol(a->scale);
  /* y and dy read once, dx written once, cu_seqlens read. */
  p->bytes = (double)elems * (double)(scree_dtype_size(a->y_dtype) +
                                      2 * scree_dtype_size(a->dy_dtype)) +
             (double)(n + 1) * 4;
  snprintf(p->desc, sizeof p->desc, "%d sequences, %lld tokens, lengths %lld..%lld, cols %lld",
           n, (long long)a->total, (long long)(n ? mn : 0), (long long)mx, (long long)a->cols);
  return 0;
}

/* y becomes a ragged softmax output of the random values, shaped as the
 * forward's inputs are (each sequence its own spread, 1/2 .. 2; the first
 * of every 16 tokens, the last quarter and the last token weigh more), so
 * every column of every sequence is positive and sums to 1 and the tokens
 * a mistake most likely drops (tile edges, the streamed part, the last)
 * carry much of d; dy gets the same bumps, so such a term moves d. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_ragged_softmax_backward_args *a = args;
  const int32_t *cu = h[2];
  const int64_t ys = a->y_stride ? a->y_stride : a->cols;
  const int64_t gs = a->dy_stride ? a->dy_stride : a->cols;
  double *m = malloc(2 * (size_t)a->cols * sizeof *m);
  if (!m) return;
  double *sum = m + a->cols;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t t0 = cu[b], len = (int64_t)cu[b + 1] - cu[b];
    const double f = 0.5 * (double)(1 + b % 4);
    for (int64_t c = 0; c < a->cols; c++) m[c] = -INFINITY, sum[c] = 0;
    for (int64_t p = 0; p < len; p++) {
      double bump = 0;
      if (p % 16 == 0) bump += 1;
      if (p >= len - len / 4) bump += 1;
      if (p == len - 1) bump += 2;
      for (int64_t c = 0; c < a->cols; c++) {
        const size_t i = (size_t)((t0 + p) * ys + c), j = (size_t)((t0 + p) * gs + c);
        const double v = f * scree__load_elem(h[0], a->y_dtype, i) + bump;
        scree__store_elem(h[0], a->y_dtype, i, v);
        scree__store_elem(h[1], a->dy_dtype, j, scree__load_elem(h[1], a->dy_dtype, j) + bump);
        if (v > m[c]) m[c] = v;
      }
    }
    for (int64_t p = 0; p < len; p++)
      for (int64_t c = 0; c < a->cols; c++)
        sum[c] += exp(scree__load_elem(h[0], a->y_dtype, (size_t)((t0 + p) * ys + c)) - m[c]);
    for (int64_t p = 0; p < len; p++)
      for (int64_t c = 0; c < a->cols; c++) {
        const size_t i = (size_t)((t0 + p) * ys + c);
        scree__store_elem(h[0], a->y_dtype, i,
                          exp(scree__load_elem(h[0], a->y_dtype, i) - m[c]) / sum[c]);
      }
  }
  free(m);
}

/* ---- the CPU reference (double accumulation) ----------------------------- */

/* host: y, dy, cu_seqlens, dx in the problem's buffer order. */
SCREE__REFERENCE(ragged_softmax_backward) {
  const scree_ragged_softmax_backward_args *a = args;
  scree__ragged_softmax_backward_ref(host[0], a->y_stride, host[1], a->dy_stride, host[3],
                                     a->dx_stride, host[2], a->batch, a->cols, a->y_dtype,
                                     a->dy_dtype, a->scale);
}

/* ---- benchmark entries: the forward's shapes (ops/ragged_softmax.c) ----- */

#define LENS_16384 "lens=440,1821,1541,560,903,824,1233,1620,406,356,1778,796,1536,337,817,1416"
static const char *const bench[] = {
    "y=fp16,dy=fp16 total=16384,cols=4096 " LENS_16384,
    "y=bf16,dy=bf16 total=16384,cols=4096 " LENS_16384,
    "y=fp16,dy=fp16 total=4096,cols=8192 lens=891,877,149,158,700,574,503,244",
    "y=fp16,dy=fp16 total=65536,cols=1024 "
    "lens=457,840,594,946,988,324,292,1506,476,453,2064,725,1503,734,1015,384,1006,1601,805,"
    "1243,1082,323,1286,922,518,302,1593,728,1189,1635,1178,1778,623,1399,688,1830,1635,344,"
    "372,437,1943,676,989,517,779,612,571,910,909,1719,1104,1806,1563,2044,1081,392,1576,"
    "1939,1721,882,1176,432,1488,889",
    "y=fp16,dy=fp16 total=8,cols=4096 lens=3,5",
    "y=fp16,dy=fp16 total=16384,cols=128 " LENS_16384,
    NULL,
};

/* ---- the op's own argument rules (the forward's) ------------------------ */

/* The counts agree: tokens need a sequence and a length. */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_ragged_softmax_backward_args *a = args;
  if (a->total > 0 && a->max_seqlen == 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "max_seqlen is 0 but total=%lld tokens are present", (long long)a->total);
  if (a->batch == 0 && a->total > 0)
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "batch is 0 but total=%lld",
                       (long long)a->total);
  return SCREE_OK;
}

/* Validation on: cu_seqlens copied to the host and checked. */
static scree_status validate_buffers(scree_context *ctx, const void *args, CUstream stream,
                                     scree__variant *var) {
  (void)var;
  const scree_ragged_softmax_backward_args *a = args;
  if (!ctx->validate || !ctx->cu) return SCREE_OK;
  const size_t n = (size_t)a->batch + 1;
  int32_t *h = malloc(n * sizeof *h);
  if (!h) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "validate: cu_seqlens copy");
  scree_status st = scree__read_device(ctx, stream, h, a->cu_seqlens, n * sizeof *h, "cu_seqlens");
  if (!st && h[0] != 0)
    st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "cu_seqlens[0]=%d must be 0", h[0]);
  for (size_t b = 0; b + 1 < n && !st; b++) {
    const int64_t len = (int64_t)h[b + 1] - h[b];
    if (len < 0)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "cu_seqlens decreases at %zu (%d then %d)", b, h[b], h[b + 1]);
    else if (len > a->max_seqlen)
      st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                       "sequence %zu has %lld tokens, more than max_seqlen=%lld", b,
                       (long long)len, (long long)a->max_seqlen);
  }
  if (!st && h[n - 1] != a->total)
    st = scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT,
                     "cu_seqlens[batch]=%d differs from total=%lld", h[n - 1],
                     (long long)a->total);
  free(h);
  return st;
}

static const scree__impl impls[] = {
    {SCREE__IMPL("smem", "ragged_softmax_backward.cu", 80, 0, "scree_ragged_softmax_backward"),
     .nfields = S_NFIELDS, .fields = fields, .check = check, .smem = smem_bytes,
     .threads = threads, .adapt = adapt, .worth_timing = worth_timing, .launch = launch},
};

SCREE__DEFINE_OP(ragged_softmax_backward, .validate = validate,
                 .validate_buffers = validate_buffers, .shape_inputs = shape_inputs);
