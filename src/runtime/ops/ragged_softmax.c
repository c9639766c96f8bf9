/* ragged_softmax.c - softmax along the tokens of each sequence of a packed
 * batch (per column), the host side: its arguments (cu_seqlens read on the
 * host only with validation on), config space and constraints, defaults,
 * the launch, buckets, problems, the CPU reference and the benchmark
 * entries. The kernel is kernels/ragged_softmax.cu (its header describes
 * the thread mapping and the passes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"

#define SCREE__ARGS_T scree_ragged_softmax_args

/* The arguments (include/scree.h), field by field. y may be x exactly (in
 * place); cu_seqlens is read while y is written. The counts bound int32
 * cu_seqlens. */
static const scree__arg schema[] = {
    SCREE__IN(x, .dtype = SCREE__AT(x_dtype), .dims = {SCREE__AT(total), SCREE__AT(cols)},
              .strides = {SCREE__AT(x_stride)}, .flags = SCREE__VECTOR),
    SCREE__OUT(y, .dtype = SCREE__AT(y_dtype), .dims = {SCREE__AT(total), SCREE__AT(cols)},
               .strides = {SCREE__AT(y_stride)}, .alias = {SCREE__AT(x)}, .flags = SCREE__VECTOR),
    SCREE__IN(cu_seqlens, .elem = SCREE__E_I32, .dims = {SCREE__AT(batch)},
              .flags = SCREE__PLUS_ONE),
    SCREE__DIM(batch, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(total, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE | SCREE__EMPTY),
    SCREE__DIM(max_seqlen, SCREE__RANGE(0, 0x7fffffff), .flags = SCREE__SHAPE),
    SCREE__DIM(cols, SCREE__RANGE(1, 65536), .flags = SCREE__SHAPE | SCREE__LIMIT),
    SCREE__STRIDE(x_stride), SCREE__STRIDE(y_stride),
    SCREE__DTYPE(x_dtype), SCREE__DTYPE(y_dtype),
    SCREE__FLOAT(scale, .flags = SCREE__FINITE), /* 0 means 1 */
};

enum { V_X, V_Y };

static const scree__vfield vfields[] = {
    {"x", "SCREE_X_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(x_dtype)},
    {"y", "SCREE_Y_DTYPE", 1, SCREE_DTYPE_FP16, 3, {0, 1, 2}, SCREE__AT(y_dtype)},
};

/* The launch shape is rowwise.h's four fields, read along the other axis
 * (kernels/ragged_softmax.cu): tpr lanes across the columns, each vec
 * contiguous columns; rows token groups; cache token-vectors per thread
 * kept in registers (so a CTA reads sequences of up to rows * cache tokens
 * once). The same constraints hold, and rowwise.cuh asserts them. */
static int check(const scree__config *c, const scree__variant *var,
                 const scree__target *t, char *why, size_t n) {
  /* static shared memory only (at most 32 KiB), under every arch's limit */
  if (!scree__rowwise_config_check(c, var, t, why, n)) return 0;
  /* 1024 threads leave 64 registers per thread; past 16 cached elements
   * ptxas spills (sm_90, fp16 and fp32). */
  if (c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS] == 1024 &&
      c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE] > 16) {
    scree__set_why(why, n, "tpr*rows=1024 needs vec*cache <= 16 (64 registers per thread)");
    return 0;
  }
  return 1;
}

/* CTAs below which the default narrows its column block: about two per SM
 * of a large GPU. */
#define ENOUGH_CTAS 256

/* Hand-picked default (unmeasured), the same on sm_80 and sm_90:
 * 16-byte accesses; token groups up to the longest sequence (at most 16);
 * lanes to cover the row, at most 16 unless the CTA would have fewer than
 * 128 threads; then, while the grid (batch x column blocks) has fewer than
 * ENOUGH_CTAS CTAs, fewer lanes (down to 8, keeping 32 threads) and then
 * narrower vectors (keeping 32 bytes of each token row per CTA); the cache
 * as deep as the longest sequence needs, within 64 elements per thread. */
static void generic_default(const scree__variant *var, const scree_ragged_softmax_args *a,
                            scree__config *out) {
  const int64_t cols = a && a->cols > 0 ? a->cols : 4096;
  const int64_t maxlen = a && a->max_seqlen > 0 ? a->max_seqlen : 1024;
  const int64_t batch = a && a->batch > 0 ? a->batch : 16;
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_X]);
  memset(out, 0, sizeof *out);
  int vec = es == 4 ? 4 : 8;
  const int rows = scree__clampi(scree__pow2_ceil(maxlen), 1, 16);
  const int lanes = scree__pow2_ceil(scree__cdiv(cols, vec));
  int tpr = scree__clampi(lanes, 8, 16);
  while (tpr * rows < 128 && tpr < lanes) tpr *= 2;
  if (tpr * rows < 32) tpr = 32 / rows;
  while (batch * scree__cdiv(cols, (int64_t)tpr * vec) < ENOUGH_CTAS) {
    if (tpr > 8 && tpr / 2 * rows >= 32)
      tpr /= 2;
    else if (vec > 1 && vec / 2 * es * tpr >= 32)
      vec /= 2;
    else
      break;
  }
  out->v[SCREE__RW_TPR] = tpr;
  out->v[SCREE__RW_ROWS] = rows;
  out->v[SCREE__RW_VEC] = vec;
  out->v[SCREE__RW_CACHE] = scree__clampi(scree__pow2_ceil(scree__cdiv(maxlen, rows)), 1, scree__clampi(64 / vec, 1, 16));
}

/* ---- the shared-memory implementation (kernels/ragged_softmax_smem.cu) --- */

enum { S_TPR, S_ROWS, S_VEC, S_STOK, S_SPLIT, S_NFIELDS };

static const scree__field smem_fields[S_NFIELDS] = {
    {"tpr", "SCREE_TPR", 3, {2, 4, 8}},
    {"rows", "SCREE_ROWS", 6, {16, 32, 64, 128, 256, 512}},
    {"vec", "SCREE_VEC", 4, {1, 2, 4, 8}},
    {"stok", "SCREE_STOK", 6, {256, 512, 1024, 2048, 4096, 8192}},
    {"split", "SCREE_SPLIT", 4, {1, 2, 4, 8}},
};

/* Bytes of one staged token (a CTA's column strip of x). */
static size_t smem_token_bytes(const scree__config *c, const scree__variant *var) {
  return (size_t)c->v[S_TPR] * (size_t)c->v[S_VEC] *
         scree_dtype_size((scree_dtype)var->v[V_X]);
}

/* The largest stage: STOK tokens (the loader opts in to it; a launch
 * takes what the call's longest sequence needs). */
static size_t smem_bytes(const scree__config *c, const scree__variant *var) {
  return (size_t)c->v[S_STOK] * smem_token_bytes(c, var);
}

/* The kernel's static reduction buffers: one float per warp, lane and
 * column, when there are several warps; one per lane and column for the
 * cluster's exchange. */
static size_t smem_red_bytes(const scree__config *c) {
  const int warps = c->v[S_TPR] * c->v[S_ROWS] / 32;
  const size_t lanes = (size_t)c->v[S_TPR] * (size_t)c->v[S_VEC] * 4;
  return (warps > 1 ? (size_t)warps * lanes : 0) + (c->v[S_SPLIT] > 1 ? lanes : 0);
}

static int smem_threads(const scree__config *c) { return c->v[S_TPR] * c->v[S_ROWS]; }

/* Mirrors the kernel's static_asserts, and the stage and the reduction
 * buffer within what a CTA may opt in to on the target. */
static int smem_check(const scree__config *c, const scree__variant *var,
                      const scree__target *t, char *why, size_t n) {
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
  const size_t need = smem_bytes(c, var) + smem_red_bytes(c);
  if (need > (size_t)t->smem_optin) {
    scree__set_why(why, n, "stok=%d tokens of %zu bytes: %zu bytes of shared memory, past the "
                   "%d a CTA may use on sm_%d", stok, smem_token_bytes(c, var), need,
                   t->smem_optin, t->sm);
    return 0;
  }
  return 1;
}

/* The fastest of the H100 sweep on the long-sequence cases (bench/results/
 * h100-rowwise-sweep-ragged_softmax.csv): 16-byte accesses, a strip of 32
 * bytes (two lanes), 128 threads; the stage as long as the longest
 * sequence (256 to 4096 tokens: 128 KiB at most, within sm_80's limit). */
static void smem_default(const scree__variant *var, const scree_ragged_softmax_args *a,
                         scree__config *out) {
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_X]);
  const int64_t maxlen = a && a->max_seqlen > 0 ? a->max_seqlen : 1024;
  memset(out, 0, sizeof *out);
  out->impl = 1;
  out->v[S_TPR] = 2;
  out->v[S_ROWS] = 64;
  out->v[S_VEC] = 16 / es;
  out->v[S_STOK] = scree__clampi(scree__pow2_ceil(maxlen), 256, 4096);
  out->v[S_SPLIT] = 1;
}

/* Sequences the register kernel holds whole (16 groups x 16 tokens) take
 * it; longer ones the shared-memory stage. */
#define GENERIC_MAX_TOKENS 256

/* The cluster implementation's fields (cluster_fields below). */
enum { C_TPR, C_VEC, C_WARPS, C_STOK, C_STAGES, C_CSIZE, C_E1, C_NFIELDS };

/* Whether clusters of csize CTAs of stok tokens stage a sequence of len
 * tokens, or leave each CTA at most an eighth of a stage to stream (read
 * twice): as far as the smaller cluster stayed worth it on an H100, 4 x
 * 512 against 8 x 512 taking 110 against 133 us with a longest sequence
 * of 2064 tokens, 117 against 119 us with 2200, 108 against 107 with
 * 2300, and 8 ahead by 6-33% from 2600 tokens
 * (bench/results/h100-ragged-cluster-limits.txt, part 13). */
static int cluster_stages_nearly(int64_t len, int64_t csize, int64_t stok) {
  return len <= csize * stok + csize * stok / 8;
}

/* Whether a config's strips are narrower than a 128-byte line: the kernel
 * then has the L2 fetch whole lines (SCREE_RS_LINE), and the neighbouring
 * strip, taken by the cluster's other CTAs or the next item, finds its half
 * there. */
static int cluster_narrow(const scree__config *c, const scree__variant *var) {
  return (int64_t)c->v[C_TPR] * c->v[C_VEC] * (int64_t)scree_dtype_size((scree_dtype)var->v[V_X]) <
         128;
}

/* The cluster implementation's default, sm_90, rows of 2 KiB and more:
 * the fastest of its H100 sweep (bench/results/h100-rowwise-sweep-
 * ragged_softmax-cluster-line.csv; 4 warps, one stage) by the longest
 * sequence:
 *   - up to 512 tokens: 128-byte strips of 512 tokens, no
 *     cluster (101.7 us on 32 x 512 x 4096; 64-byte strips 103.5);
 *   - up to 1024: 64-byte strips of 1024 tokens, no cluster (57.8 us on 8
 *     x 149..891 x 8192, against 59.9 for 128-byte strips in clusters of 2);
 *   - up to 4 x 512 and an eighth (2304 tokens, cluster_stages_nearly):
 *     64-byte strips of 512 tokens in clusters of 8, two strips (one line)
 *     an item (107.5 us on 16 x 337..1821 x 4096, 106.4 on 64 x
 *     292..2064 x 1024, against 110.5 and 109.9 for 128-byte strips in
 *     clusters of 4; 64-byte strips in clusters of 4 took 119.8 and
 *     110.9);
 *   - longer: 128-byte strips of 512 tokens in clusters of 8 (a sequence
 *     past 8 x 512 tokens is streamed twice). */
static void cluster_default(const scree__variant *var, const scree_ragged_softmax_args *a,
                            scree__config *out) {
  const int es = (int)scree_dtype_size((scree_dtype)var->v[V_X]);
  memset(out, 0, sizeof *out);
  out->impl = 2;
  out->v[C_TPR] = 8;
  out->v[C_VEC] = 16 / es;
  out->v[C_WARPS] = 4;
  out->v[C_STOK] = 512;
  out->v[C_STAGES] = 1;
  out->v[C_CSIZE] = 8;
  out->v[C_E1] = 0;
  if (a->max_seqlen <= 512) {
    out->v[C_CSIZE] = 1;
  } else if (a->max_seqlen <= 1024) {
    out->v[C_TPR] = 4;
    out->v[C_STOK] = 1024;
    out->v[C_CSIZE] = 1;
  } else if (cluster_stages_nearly(a->max_seqlen, 4, 512)) {
    out->v[C_TPR] = 4;
  }
}

static void default_config(const scree__target *t, const scree__variant *var,
                           const void *args, scree__config *out) {
  const scree_ragged_softmax_args *a = args;
  if (a && a->max_seqlen > GENERIC_MAX_TOKENS && t->sm == 90 &&
      a->cols * (int64_t)scree_dtype_size((scree_dtype)var->v[V_X]) >= 2048)
    cluster_default(var, a, out);
  else if (a && a->max_seqlen > GENERIC_MAX_TOKENS)
    smem_default(var, a, out);
  else
    generic_default(var, a, out);
}

/* Narrows VEC to what the call's alignment allows. Here VEC is the width
 * of a lane's column strip and CACHE counts tokens, so the other fields
 * stay: the CTA's column block narrows (more CTAs) and each thread keeps
 * the same tokens in fewer registers. */
static void adapt(scree__config *c, const scree__variant *var, const void *args) {
  const int widest = 1 << scree__vec_log2(&scree__op_ragged_softmax, var, args);
  while (c->v[SCREE__RW_VEC] > widest) c->v[SCREE__RW_VEC] /= 2;
}
/* The same for the shared-memory implementation (a narrower strip, the
 * same tokens). */
static void smem_adapt(scree__config *c, const scree__variant *var, const void *args) {
  const int widest = 1 << scree__vec_log2(&scree__op_ragged_softmax, var, args);
  while (c->v[S_VEC] > widest) c->v[S_VEC] /= 2;
}

/* What every implementation's kernel takes after x, y and cu_seqlens: the
 * columns, the row strides (0 meaning cols) and the scale in the log2
 * domain. */
typedef struct call_params {
  int cols;
  long long xs, ys;
  float scale_log2;
} call_params;

static call_params params_of(const scree_ragged_softmax_args *a) {
  const double s = a->scale != 0.f ? (double)a->scale : 1.0;
  return (call_params){(int)a->cols, a->x_stride ? a->x_stride : a->cols,
                       a->y_stride ? a->y_stride : a->cols, (float)(s * 1.4426950408889634)};
}

/* Grid (batch, column blocks of tpr * vec), block tpr * rows. */
static scree_status launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           const scree__variant *var, const void *args, CUstream stream) {
  (void)var;
  const scree_ragged_softmax_args *a = args;
  if (a->batch == 0 || a->total == 0) return SCREE_OK; /* no token: nothing to write */
  const int span = c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC];
  uint64_t x = a->x, y = a->y, cu = a->cu_seqlens;
  call_params p = params_of(a);
  void *params[] = {&x, &y, &cu, &p.cols, &p.xs, &p.ys, &p.scale_log2};
  const scree__grid g = {(unsigned)a->batch, (unsigned)scree__cdiv(a->cols, span), 1,
                         (unsigned)(c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS]), 0, 1};
  return scree__launch_grid(ctx, k->fn[0], g, stream, params, "ragged_softmax", NULL,
                            "ragged_softmax");
}

/* Grid (column blocks of tpr * vec, times split; the batch over y and z),
 * block tpr * rows, clusters of split CTAs along x (cuLaunchKernelEx) when
 * split > 1, and a
 * stage of a CTA's part of the longest sequence (rounded up to the
 * groups), at most stok. */
static scree_status smem_launch(scree_context *ctx, const scree__kernel *k,
                                const scree__config *c, const scree__variant *var,
                                const void *args, CUstream stream) {
  const scree_ragged_softmax_args *a = args;
  if (a->batch == 0 || a->total == 0) return SCREE_OK; /* no token: nothing to write */
  const int tpr = c->v[S_TPR], rows = c->v[S_ROWS], stok = c->v[S_STOK], split = c->v[S_SPLIT];
  const int span = tpr * c->v[S_VEC];
  /* Each CTA of a sequence's SPLIT takes about 1 / SPLIT of its tokens.
   * In batch-invariant mode the whole STOK: a sequence's tokens past the
   * stage are reduced in another order (streamed), so the stage must not
   * follow the batch's longest sequence. */
  const int64_t want = ctx->batch_invariant ? stok
                       : a->max_seqlen > 0
                           ? scree__cdiv(scree__cdiv(a->max_seqlen, split), rows) * rows
                           : stok;
  int stage = want < stok ? (int)want : stok;
  const unsigned smem = (unsigned)((size_t)stage * smem_token_bytes(c, var));
  uint64_t x = a->x, y = a->y, cu = a->cu_seqlens;
  call_params p = params_of(a);
  int batch = (int)a->batch;
  void *params[] = {&x, &y, &cu, &p.cols, &p.xs, &p.ys, &p.scale_log2, &stage, &batch};
  /* Column blocks fastest: the CTAs that run together read whole rows. */
  const unsigned gx = (unsigned)(scree__cdiv(a->cols, span) * split);
  const unsigned gy = (unsigned)(a->batch < 65535 ? a->batch : 65535);
  const unsigned gz = (unsigned)scree__cdiv(a->batch, gy);
  const scree__grid g = {gx, gy, gz, (unsigned)(tpr * rows), smem, split};
  return scree__launch_grid(ctx, k->fn[0], g, stream, params, "ragged_softmax", "split",
                            "ragged_softmax_smem");
}

/* ---- the cluster implementation (kernels/ragged_softmax_cluster.cu) ----- */

static const scree__field cluster_fields[C_NFIELDS] = {
    {"tpr", "SCREE_TPR", 2, {4, 8}},
    {"vec", "SCREE_VEC", 4, {1, 2, 4, 8}},
    {"warps", "SCREE_WARPS", 3, {4, 8, 16}},
    {"stok", "SCREE_STOK", 6, {64, 128, 256, 512, 1024, 2048}},
    {"stages", "SCREE_STAGES", 4, {1, 2, 3, 4}},
    {"csize", "SCREE_CSIZE", 4, {1, 2, 4, 8}},
    {"e1", "SCREE_E1", 2, {0, 1}},
};

/* Batches of fewer sequences have their plan computed in each CTA's shared
 * memory (the kernel's SCREE_PLAN); larger ones by the plan kernel. */
#define RSC_PLAN 512

/* Mirrors the kernel's layout: the stages, the max and sum buffers across
 * warps (red) and across the cluster (xbuf), the ring's and the exchanges'
 * mbarriers, the ring of item numbers, each stage's item (6 ints), the
 * plan and a copy of cu_seqlens. */
static size_t cluster_smem(const scree__config *c, const scree__variant *var) {
  const size_t lanes = (size_t)c->v[C_TPR] * (size_t)c->v[C_VEC];
  const size_t stage = (size_t)c->v[C_STOK] * lanes * scree_dtype_size((scree_dtype)var->v[V_X]);
  const size_t slots = (size_t)c->v[C_STAGES] + 1;
  return (size_t)c->v[C_STAGES] * stage + 2 * (size_t)c->v[C_WARPS] * lanes * 4 +
         2 * (size_t)c->v[C_CSIZE] * lanes * 4 + (slots + 2) * 8 + slots * 4 +
         (size_t)c->v[C_STAGES] * 6 * 4 + 2 * (RSC_PLAN + 1) * 4;
}

static int cluster_threads(const scree__config *c) { return 32 * c->v[C_WARPS]; }

/* Significand bits of a dtype: what e1 compares. */
static int significand_bits(int dtype) {
  return dtype == SCREE_DTYPE_FP32 ? 24 : dtype == SCREE_DTYPE_FP16 ? 11 : 8;
}

/* Mirrors the kernel's static_asserts; e1 only where x holds y's precision;
 * the shared memory within what a CTA may opt in to. */
static int cluster_check(const scree__config *c, const scree__variant *var,
                         const scree__target *t, char *why, size_t n) {
  if (!scree__rowwise_check_dtypes(var, 2, why, n)) return 0;
  const int tpr = c->v[C_TPR], vec = c->v[C_VEC], warps = c->v[C_WARPS], stok = c->v[C_STOK],
            stages = c->v[C_STAGES], csize = c->v[C_CSIZE], e1 = c->v[C_E1];
  if ((tpr != 4 && tpr != 8) || (vec != 1 && vec != 2 && vec != 4 && vec != 8) ||
      (warps != 4 && warps != 8 && warps != 16) || stages < 1 || stages > 4 ||
      (csize != 1 && csize != 2 && csize != 4 && csize != 8) || (e1 & ~1)) {
    scree__set_why(why, n, "tpr=%d, vec=%d, warps=%d, stages=%d, csize=%d, e1=%d: tpr is 4 or 8, "
                   "vec 1, 2, 4 or 8, warps 4, 8 or 16, stages 1..4, csize 1, 2, 4 or 8, e1 0 or 1",
                   tpr, vec, warps, stages, csize, e1);
    return 0;
  }
  const int groups = 32 * warps / tpr;
  if (stok < 64 || stok > 2048 || (stok & (stok - 1)) || stok < groups) {
    scree__set_why(why, n, "stok=%d: must be a power of two in [64, 2048], at least the %d token "
                   "groups", stok, groups);
    return 0;
  }
  if (e1 && significand_bits(var->v[V_X]) < significand_bits(var->v[V_Y])) {
    scree__set_why(why, n, "e1=1 keeps the exponentials in x's dtype (%s), less precise than "
                   "y's (%s)", scree_dtype_name((scree_dtype)var->v[V_X]),
                   scree_dtype_name((scree_dtype)var->v[V_Y]));
    return 0;
  }
  const size_t need = cluster_smem(c, var);
  if (need > (size_t)t->smem_optin) {
    scree__set_why(why, n, "stages=%d x stok=%d tokens of %d columns: %zu bytes of shared memory, "
                   "past the %d a CTA may use on sm_%d", stages, stok, tpr * vec, need,
                   t->smem_optin, t->sm);
    return 0;
  }
  return 1;
}

static void cluster_adapt(scree__config *c, const scree__variant *var, const void *args) {
  const int widest = 1 << scree__vec_log2(&scree__op_ragged_softmax, var, args);
  while (c->v[C_VEC] > widest) c->v[C_VEC] /= 2;
}

/* A strip over twice the (pow2) row; a longest sequence that the cluster
 * does not nearly stage (cluster_stages_nearly); a cluster twice as large
 * as the longest sequence needs (its CTAs take two strips an item), four
 * times as large for strips narrower than a line (two strips of one line an
 * item were the fastest: cluster_default); a stage of which half would
 * hold the longest sequence (the smallest stok kept). */
static int cluster_worth_timing(const scree__config *c, const scree__variant *var,
                                const void *args) {
  const scree_ragged_softmax_args *a = args;
  const int64_t longest = scree__pow2_ceil(a->max_seqlen > 0 ? a->max_seqlen : 1);
  const int64_t stok = c->v[C_STOK], csize = c->v[C_CSIZE];
  if ((int64_t)c->v[C_TPR] * c->v[C_VEC] > 2 * (int64_t)scree__pow2_ceil(a->cols)) return 0;
  if (!cluster_stages_nearly(a->max_seqlen, csize, stok)) return 0;
  if (csize > 1 && csize / (cluster_narrow(c, var) ? 4 : 2) * stok >= longest) return 0;
  if (csize == 1 && stok > 64 && stok / 2 >= longest) return 0;
  return 1;
}

/* For a batch of RSC_PLAN sequences or more, the plan kernel first (one
 * CTA: each sequence's items and their prefix sums, into the workspace);
 * smaller batches are planned inside each CTA. Then a persistent grid of
 * clusters of csize CTAs: about as many as the GPU holds at once, at most
 * one per item (a bound from the lengths: a sequence of len tokens has at
 * most strips * split / csize + 1 items, split < 2 * len / stok + 1),
 * taking items from the stream's counters, which the kernel leaves zero. */
static scree_status cluster_launch(scree_context *ctx, const scree__kernel *k,
                                   const scree__config *c, const scree__variant *var,
                                   const void *args, CUstream stream) {
  const scree_ragged_softmax_args *a = args;
  if (a->batch == 0 || a->total == 0) return SCREE_OK; /* no token: nothing to write */
  const int csize = c->v[C_CSIZE], stok = c->v[C_STOK];
  int nstrips = (int)scree__cdiv(a->cols, (int64_t)c->v[C_TPR] * c->v[C_VEC]);
  int batch = (int)a->batch;
  const int64_t items = (int64_t)nstrips * (a->batch + 2 * a->total / stok) / csize + a->batch;
  if (items > 0x7fffffff) /* the plan counts items in int */
    return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                       "ragged_softmax impl=cluster: up to %lld items (%d strips, batch %lld) "
                       "exceed 2^31", (long long)items, nstrips, (long long)a->batch);
  /* Refused before the plan kernel runs. */
  scree_status st = scree__need_clusters(ctx, csize, "ragged_softmax", "csize");
  if (st) return st;
  CUdeviceptr counters;
  if ((st = scree__stream_counters(ctx, stream, &counters))) return st;
  uint64_t x = a->x, y = a->y, cu = a->cu_seqlens, ctr = counters, plan = 0;
  if (a->batch >= RSC_PLAN) {
    CUdeviceptr ws;
    st = scree__workspace(ctx, stream, ((size_t)a->batch + 1) * sizeof(int), &ws);
    if (st) return st;
    plan = ws;
    void *pp[] = {&cu, &batch, &nstrips, &plan};
    st = scree__launch_grid(ctx, k->fn[1], (scree__grid){1, 1, 1, 1024, 0, 1}, stream, pp,
                            "ragged_softmax", NULL, "ragged_softmax plan");
    if (st) return st;
  }
  int64_t clusters = (int64_t)ctx->info.sm_count * (k->occupancy > 0 ? k->occupancy : 1) / csize;
  if (clusters > items) clusters = items;
  if (clusters < 1) clusters = 1;
  call_params p = params_of(a);
  void *params[] = {&x, &y, &cu, &p.cols, &p.xs, &p.ys, &p.scale_log2, &batch, &ctr, &plan};
  const scree__grid g = {(unsigned)(clusters * csize), 1, 1, (unsigned)cluster_threads(c),
                         (unsigned)cluster_smem(c, var), csize};
  return scree__launch_grid(ctx, k->fn[0], g, stream, params, "ragged_softmax", "csize",
                            "ragged_softmax_cluster");
}

/* ---- tuning hooks ------------------------------------------------------ */

/* Bucket: cols exact; the total tokens and the longest sequence rounded up
 * to powers of two (the grid grows with the batch and the columns, the
 * passes a CTA makes with its sequence's length). Both rounded ones depend
 * on the batch: batch-invariant mode tunes on 16384 tokens, sequences of up
 * to 1024. */
static const scree__bdim dims[] = {{"cols", 0, SCREE__AT(cols), 0},
                                   {"total", 1, SCREE__AT(total), 16384},
                                   {"max_seqlen", 1, SCREE__AT(max_seqlen), 1024}};

/* Tuned on the bucket's largest token count and longest sequence, capped
 * at 256 MiB of x (past that time per byte no longer changes). The batch
 * is generated by the problem hook from the seed. */
static void representative(const scree__bucket *b, const scree__variant *var, int check,
                           void *args) {
  (void)check; /* the problem hook sizes check problems itself */
  scree_ragged_softmax_args *a = args;
  memset(a, 0, sizeof *a);
  a->cols = b->v[0];
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  const int64_t es = (int64_t)scree_dtype_size(a->x_dtype);
  const int64_t cap = ((int64_t)256 << 20) / (a->cols > 0 ? a->cols * es : 1);
  a->total = b->v[1] < cap ? b->v[1] : cap > 0 ? cap : 1;
  a->max_seqlen = b->v[2] < a->total ? b->v[2] : a->total;
}

/* Skips configs that would mostly idle on this shape: a column block over
 * twice the (pow2) row, token groups past the longest sequence, or a
 * register cache of which half would cover the longest sequence. */
static int worth_timing(const scree__config *c, const scree__variant *var, const void *args) {
  (void)var;
  const scree_ragged_softmax_args *a = args;
  const int64_t longest = scree__pow2_ceil(a->max_seqlen > 0 ? a->max_seqlen : 1);
  const int rows = c->v[SCREE__RW_ROWS], cache = c->v[SCREE__RW_CACHE];
  if ((int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC] > 2 * (int64_t)scree__pow2_ceil(a->cols))
    return 0;
  if (rows > longest) return 0;
  if (cache > 1 && (int64_t)rows * (cache / 2) >= longest) return 0;
  return 1;
}

/* The same for the shared-memory implementation: a strip over twice the
 * (pow2) row, token groups (or a cluster's CTAs) past the longest sequence,
 * or a stage of which half would hold a CTA's part of the longest sequence
 * (a launch sizes the stage to the call, so such a config runs as the one
 * with half the stok). */
static int smem_worth_timing(const scree__config *c, const scree__variant *var,
                             const void *args) {
  (void)var;
  const scree_ragged_softmax_args *a = args;
  const int rows = c->v[S_ROWS], stok = c->v[S_STOK], split = c->v[S_SPLIT];
  const int64_t longest = scree__pow2_ceil(a->max_seqlen > 0 ? a->max_seqlen : 1);
  const int64_t per_cta = scree__pow2_ceil(scree__cdiv(longest, split)); /* tokens of one CTA */
  if ((int64_t)c->v[S_TPR] * c->v[S_VEC] > 2 * (int64_t)scree__pow2_ceil(a->cols)) return 0;
  if ((int64_t)rows * split > longest) return 0; /* CTAs or groups with nothing to do */
  if (stok / 2 >= per_cta && stok / 2 >= rows) return 0;
  return 1;
}

/* ---- problems ------------------------------------------------------------ */

/* Generated batches: scree__check_lens to check, scree__tune_lens to time
 * (base/base.h), of at most MAX_SEQS sequences. */
#define MAX_SEQS (1 << 20)

static int problem(const void *args, const scree__variant *var, int check, uint64_t seed,
                   const scree__lens *lens, scree__problem *p, char *why, size_t why_size) {
  scree_ragged_softmax_args *a = (scree_ragged_softmax_args *)p->args;
  memcpy(a, args, sizeof *a);
  if (a->cols < 1 || a->cols > 65536) {
    scree__set_why(why, why_size, "cols=%lld: need 1 <= cols <= 65536", (long long)a->cols);
    return -1;
  }
  scree__variant_dtypes(vfields, SCREE__COUNT(vfields), var, a);
  /* Packed rows: every element of y is an output the reference writes. */
  a->x_stride = a->y_stride = 0;
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
  scree__problem_buf(p, "x", SCREE__BUF_IN, a->x_dtype, elems,
                     offsetof(scree_ragged_softmax_args, x));
  b = scree__problem_buf(p, "cu_seqlens", SCREE__BUF_HOST_IN, SCREE__DTYPE_I32, (size_t)n + 1,
                         offsetof(scree_ragged_softmax_args, cu_seqlens));
  b->host = cu;
  /* 16-bit outputs: one rounding of the dtype (scree__tolerance). fp32
   * outputs: the fp32 exponent z = x * scale * log2(e) carries a relative
   * error of a few 2^-24, an absolute one of |z| times that (|z| reaches a
   * few tens on the shaped inputs), ex2.approx adds 2 ulp and the fp32 sums
   * over up to thousands of terms their rounding: 1e-4 relative. */
  b = scree__problem_buf(p, "y", SCREE__BUF_OUT, a->y_dtype, elems,
                         offsetof(scree_ragged_softmax_args, y));
  if (a->y_dtype == SCREE_DTYPE_FP32) b->rtol = 1e-4, b->atol = 1e-6;
  /* x read once, y written once, cu_seqlens read. */
  p->bytes = (double)elems * (double)(scree_dtype_size(a->x_dtype) +
                                      scree_dtype_size(a->y_dtype)) +
             (double)(n + 1) * 4;
  snprintf(p->desc, sizeof p->desc, "%d sequences, %lld tokens, lengths %lld..%lld, cols %lld",
           n, (long long)a->total, (long long)(n ? mn : 0), (long long)mx, (long long)a->cols);
  return 0;
}

/* Random tokens look alike, so a kernel that dropped a token from a sum
 * (an off-by-one at a tile edge, the streamed part, the last token) would
 * change the results by only about 1/length. Make the tokens a mistake
 * most likely drops weigh more: the first of every 16 (tile edges), the
 * last quarter of each sequence (streamed past the cache) and the last
 * token; and give each sequence its own spread (x scaled by 1/2 .. 2), so
 * tokens taken from the wrong sequence show too. */
static void shape_inputs(const void *args, void *const *h) {
  const scree_ragged_softmax_args *a = args;
  const int32_t *cu = h[1];
  const int64_t xs = a->x_stride ? a->x_stride : a->cols;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t len = (int64_t)cu[b + 1] - cu[b];
    const double f = 0.5 * (double)(1 + b % 4);
    for (int64_t p = 0; p < len; p++) {
      double bump = 0;
      if (p % 16 == 0) bump += 1;
      if (p >= len - len / 4) bump += 1;
      if (p == len - 1) bump += 2;
      for (int64_t c = 0; c < a->cols; c++) {
        const size_t i = (size_t)((cu[b] + p) * xs + c);
        scree__store_elem(h[0], a->x_dtype, i, f * scree__load_elem(h[0], a->x_dtype, i) + bump);
      }
    }
  }
}

/* ---- the CPU reference (double accumulation) ---------------------------- */

/* host: x, cu_seqlens, y in the problem's buffer order (problem, above);
 * x and y laid out with the args' strides (0 meaning cols), cu_seqlens
 * batch + 1 int32 entries. For each sequence and column: m = max of s * x
 * over the sequence's tokens, then y = exp(s * x - m) / sum exp(s * x - m),
 * with s the scale (0 means 1). Walks each sequence row by row (three
 * passes) with per-column maxima and sums, so memory is read in order. If
 * scratch memory cannot be had, y is written as NaN so that any comparison
 * fails loudly. */
SCREE__REFERENCE(ragged_softmax) {
  const scree_ragged_softmax_args *a = args;
  const void *x = host[0];
  const int32_t *cu = host[1];
  void *y = host[2];
  const int64_t cols = a->cols;
  const int64_t xs = a->x_stride ? a->x_stride : cols;
  const int64_t ys = a->y_stride ? a->y_stride : cols;
  const double s = a->scale != 0.f ? (double)a->scale : 1.0;
  double *m = malloc(2 * (size_t)cols * sizeof *m);
  double *sum = m ? m + cols : NULL;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t t0 = cu[b], t1 = cu[b + 1];
    if (!m) {
      for (int64_t t = t0; t < t1; t++)
        for (int64_t c = 0; c < cols; c++)
          scree__store_elem(y, a->y_dtype, (size_t)(t * ys + c), NAN);
      continue;
    }
    for (int64_t c = 0; c < cols; c++) m[c] = -INFINITY, sum[c] = 0;
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < cols; c++) {
        const double v = s * scree__load_elem(x, a->x_dtype, (size_t)(t * xs + c));
        if (v > m[c]) m[c] = v;
      }
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < cols; c++)
        sum[c] += exp(s * scree__load_elem(x, a->x_dtype, (size_t)(t * xs + c)) - m[c]);
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < cols; c++)
        scree__store_elem(y, a->y_dtype, (size_t)(t * ys + c),
                          exp(s * scree__load_elem(x, a->x_dtype, (size_t)(t * xs + c)) - m[c]) /
                              sum[c]);
  }
  free(m);
}

/* ---- benchmark entries: the shapes of bench/rowwise_shapes.json as total
 * x cols, each a packed batch of uneven sequences summing exactly to the
 * total (16384 tokens as 16 sequences of 337..1821, 4096 as 8, 65536 as
 * 64, 8 as 3 + 5) ------------------------------------------------------------ */

#define LENS_16384 "lens=440,1821,1541,560,903,824,1233,1620,406,356,1778,796,1536,337,817,1416"
static const char *const bench[] = {
    "x=fp16,y=fp16 total=16384,cols=4096 " LENS_16384,
    "x=bf16,y=bf16 total=16384,cols=4096 " LENS_16384,
    "x=fp16,y=fp16 total=4096,cols=8192 lens=891,877,149,158,700,574,503,244",
    "x=fp16,y=fp16 total=65536,cols=1024 "
    "lens=457,840,594,946,988,324,292,1506,476,453,2064,725,1503,734,1015,384,1006,1601,805,"
    "1243,1082,323,1286,922,518,302,1593,728,1189,1635,1178,1778,623,1399,688,1830,1635,344,"
    "372,437,1943,676,989,517,779,612,571,910,909,1719,1104,1806,1563,2044,1081,392,1576,"
    "1939,1721,882,1176,432,1488,889",
    "x=fp16,y=fp16 total=8,cols=4096 lens=3,5",
    "x=fp16,y=fp16 total=16384,cols=128 " LENS_16384,
    NULL,
};

/* ---- the op's own argument rules ---------------------------------------- */

/* The counts agree: tokens need a sequence and a length. */
static scree_status validate(scree_context *ctx, const void *args) {
  const scree_ragged_softmax_args *a = args;
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
  const scree_ragged_softmax_args *a = args;
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
    {SCREE__ROWWISE_IMPL(check, "ragged_softmax.cu", "scree_ragged_softmax")},
    {SCREE__IMPL("smem", "ragged_softmax_smem.cu", 80, 0, "scree_ragged_softmax_smem"),
     .nfields = S_NFIELDS, .fields = smem_fields, .check = smem_check, .smem = smem_bytes,
     .threads = smem_threads, .adapt = smem_adapt, .worth_timing = smem_worth_timing,
     .launch = smem_launch},
    /* sm_90 only; measured on the H100 (docs/kernels/rowwise.md). */
    {SCREE__IMPL("cluster", "ragged_softmax_cluster.cu", 90, 90, "scree_ragged_softmax_cluster",
                 "scree_ragged_softmax_cluster_plan"),
     .nfields = C_NFIELDS, .fields = cluster_fields, .check = cluster_check,
     .smem = cluster_smem, .threads = cluster_threads, .adapt = cluster_adapt,
     .worth_timing = cluster_worth_timing, .launch = cluster_launch},
};

SCREE__DEFINE_OP(ragged_softmax, .validate = validate, .validate_buffers = validate_buffers,
                 .shape_inputs = shape_inputs);
