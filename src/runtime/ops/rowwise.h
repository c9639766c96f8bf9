/*
 * rowwise.h - what the row-wise ops' host sides share (ops/rowwise.c): the
 * launch-shape config fields of kernels/rowwise.cuh, their check, default
 * and pruning, the narrowing to the vector width a call allows, the launch
 * of a grid over rows, and the shapes and problems of an op whose problem
 * is its rows. Not API.
 */
#ifndef SCREE_OPS_ROWWISE_H
#define SCREE_OPS_ROWWISE_H

#include "ops/registry.h"

/* LayerNorm's tolerance on its fp32 mean output (ops/layernorm.c says
 * why: fp32 sums err relative to the row's spread, not its mean); the
 * check problem and the GPU tests use it alike. */
#define SCREE__LAYERNORM_MEAN_ATOL 2e-5

/* The softmax backward's absolute tolerance on dx, in every dtype
 * (ops/softmax_backward.c says why): 2e-5 times max(1, |scale|); the check
 * problem and the GPU tests use it alike. */
static inline double scree__softmax_bwd_atol(float scale) {
  const double s = scale < 0 ? -(double)scale : (double)scale;
  return 2e-5 * (s > 1 ? s : 1);
}

/* Cross-entropy's dlogits tolerance (ops/cross_entropy.c says why):
 * |got - want| <= ATOL |scale| + RTOL_<dtype> |want|, scale the gradient's
 * (grad_scale over the count for the mean); the check problem and the GPU
 * tests use it alike. */
#define SCREE__CE_GRAD_ATOL 1e-4
#define SCREE__CE_GRAD_RTOL_FP32 5e-5
#define SCREE__CE_GRAD_RTOL_FP16 (1.0 / 1024)
#define SCREE__CE_GRAD_RTOL_BF16 (1.0 / 128)
/* Plus, in fp16, the smallest subnormal (2^-24): mean gradients over many
 * rows and a large vocabulary (0.1 / 32000 / 16384 with smoothing) sit
 * below it, where one rounding of the fp32 value and of the double
 * reference can differ by a whole step. */
#define SCREE__CE_GRAD_ATOL_FP16_FLOOR (1.0 / 16777216)

/* Field indices of scree__rowwise_fields (an op may append its own). */
enum { SCREE__RW_TPR, SCREE__RW_ROWS, SCREE__RW_VEC, SCREE__RW_CACHE, SCREE__RW_NFIELDS };
extern const scree__field scree__rowwise_fields[SCREE__RW_NFIELDS];

/* The implementation of a row-wise op: the launch shape's fields, the
 * config check `check`, and the hooks the op file names adapt,
 * worth_timing and launch; its kernel source and entries. */
#define SCREE__ROWWISE_IMPL(check_fn, src, ...)                                          \
  .name = "generic", .source = src, .entries = {__VA_ARGS__}, .min_sm = 80,             \
  .nfields = SCREE__RW_NFIELDS, .fields = scree__rowwise_fields, .check = check_fn,      \
  .adapt = adapt, .worth_timing = worth_timing, .launch = launch

/* 1 if the four launch-shape fields satisfy rowwise.cuh's static_asserts,
 * else 0 with the reason. */
int scree__rowwise_check(const scree__config *c, char *why, size_t n);
/* 1 if every dtype code in var->v[0..n) is fp32, fp16 or bf16, else 0
 * with the reason. */
int scree__rowwise_check_dtypes(const scree__variant *var, int n, char *why, size_t size);
/* The check of an op whose variant is dtypes only and whose kernel needs
 * nothing beyond the launch shape: both of the above (static shared
 * memory only, well under every arch's limit). */
int scree__rowwise_config_check(const scree__config *c, const scree__variant *var,
                                const scree__target *t, char *why, size_t n);
/* The hand-picked default for rows of `cols` elements of esize bytes:
 * 16-byte accesses, about four vectors in flight per thread, the whole
 * row in registers when it fits, at least 128 threads per CTA. */
void scree__rowwise_default(int64_t cols, int esize, scree__config *out);
/* 0 if the config's threads would mostly idle on rows of `cols`, or it
 * would stream more than half the row from memory a second time. */
int scree__rowwise_worth(const scree__config *c, int64_t cols);
/* Narrows VEC (keeping the elements per thread) to 2^widest_log2. */
void scree__rowwise_adapt(scree__config *c, int widest_log2);
/* 1 if `field`=size, the CTAs of a thread block cluster (1: none), is 1,
 * 2, 4 or 8, and 1 or the target sm_90 or later (clusters need sm_90);
 * else 0 with the reason ("split=3: must be 1, 2, 4 or 8", "csize=2:
 * thread block clusters need sm_90, not sm_80"). */
int scree__check_cluster(const char *field, int size, const scree__target *t, char *why,
                         size_t n);

/* Grid ceil(rows / ROWS) (capped at 2^31 - 1; the kernels stride), block
 * TPR * ROWS, on stream. `what` names the kernel in an error. */
scree_status scree__rowwise_launch(scree_context *ctx, CUfunction fn, const scree__config *c,
                                   int64_t rows, void **params, CUstream stream,
                                   const char *what);

/* A launch's grid: x by y by z CTAs of `block` threads with smem bytes of
 * dynamic shared memory, in thread block clusters of `cluster` CTAs along x
 * (1: no clusters; x a multiple of it). */
typedef struct scree__grid {
  unsigned x, y, z, block, smem;
  int cluster;
} scree__grid;
/* SCREE_OK if clusters of `cluster` CTAs can be launched: cluster is 1, or
 * the driver exports cuLaunchKernelEx (optional in the driver table); else
 * SCREE_ERROR_UNSUPPORTED, "<op> <field>=<cluster> needs cuLaunchKernelEx
 * ...", `field` the config field that asked for the clusters. */
scree_status scree__need_clusters(scree_context *ctx, int cluster, const char *op,
                                  const char *field);
/* fn on grid g, on stream: cuLaunchKernel, or with clusters (g.cluster > 1)
 * cuLaunchKernelEx with the cluster dimension attribute, after
 * scree__need_clusters(ctx, g.cluster, op, field) (field may be NULL when
 * g.cluster is 1). A launch error names the call and `what`, the kernel:
 * "cuLaunchKernelEx(<what>): ...". */
scree_status scree__launch_grid(scree_context *ctx, CUfunction fn, scree__grid g, CUstream stream,
                                void **params, const char *op, const char *field,
                                const char *what);

/* Reshapes the random rows of a problem's input x (host, rows of cols
 * elements of dtype, row stride xs) so that likely kernel mistakes show
 * past the tolerance: row r scaled by 2^(r % 7 - 3), 1/8 ... 8, so rows
 * mixed up differ; the last quarter of each row (past a register cache)
 * and its last 8 elements (the scalar tail) by tail more each. */
void scree__rowwise_shape_rows(void *x, int dtype, int64_t rows, int64_t cols, int64_t xs,
                               double tail);

/* Shapes and problems of an op whose problem is its rows as a shape gives
 * them: the op's bucket is [rows, cols] (dims[0], rounded up to a power of
 * two, and dims[1], each linked to its args field).
 *
 * The representative of a bucket: its cols, and its rows capped so that
 * the inputs read per row (the IN tensors with a dtype whose outer extent
 * is rows) take at most SCREE__ROWWISE_TUNE_BYTES (1 GiB). Time per byte
 * stops changing well below that, but the grid's shape does not: with a
 * 256 MiB cap, cross-entropy over 128256 columns was tuned on 1046 rows
 * for its rows <= 4096 bucket and picked 4 rows a CTA, 4.3% slower than
 * the best at 4096 rows and 15% at 2650 (bench/regret.py). To check, at most 97 rows and, when elems is not 0, elems
 * elements (a quick CPU reference). The dtypes from var, the scalars at
 * their examples. */
#define SCREE__ROWWISE_TUNE_BYTES ((int64_t)1 << 30)
void scree__rowwise_representative(const scree__op *op, const scree__bucket *b,
                                   const scree__variant *var, int check, int64_t elems,
                                   void *args);
/* The problem of a shape (scree__problem_shape vets it), capped to check
 * as the representative, with the dtypes from var, the scalars left 0 at
 * their examples, every optional tensor (SCREE__CHECK_ONLY ones to check
 * only) and the schema's buffers (scree__problem_bufs). desc: "<rows> rows
 * of <cols>". 0, or -1 with the reason. */
int scree__rowwise_problem(const scree__op *op, const void *shape, const scree__variant *var,
                           int check, int64_t elems, scree__problem *p, char *why,
                           size_t why_size);

/* scree__rowwise_problem, except that the optional tensors named in omit
 * (a list such as "mean,rstd") stay absent: the backward ops' saved
 * statistics, which random values would not match. */
int scree__rowwise_problem_omit(const scree__op *op, const void *shape, const scree__variant *var,
                                int check, int64_t elems, const char *omit, scree__problem *p,
                                char *why, size_t why_size);

/* ---- the norm backward ops (kernels/norm_backward.cu) ---------------------- */

/* One call of kernels/norm_backward.cu: the pointers (0: absent), strides
 * (in elements, dense applied) and sizes; nacc 1 (dw) or 2 (dw and db). */
typedef struct scree__nb_call {
  uint64_t x, w, dy, dres, mean, rstd, dx, dw, db;
  int64_t rows, cols, xs, dys, dress, dxs;
  float eps;
  int nacc;
  int smem; /* 1: implementation "smem" (the cached columns' sums in shared memory) */
} scree__nb_call;

/* The default launch shape of the backward kernels: the forward's
 * (scree__rowwise_default on the widest of x's and dy's element sizes),
 * 16-bit rows narrowed to 8-byte accesses with twice the cache when
 * narrow is set, then the register cache shrunk until x, dy and the fp32
 * column sums it keeps (nacc of them per element) fit the registers ptxas
 * may use at that many threads a CTA. */
void scree__nb_default(int64_t cols, int ex, int ey, int nacc, int narrow, scree__config *out);
/* Threads a CTA (the loader's occupancy, for the persistent grid). */
int scree__nb_threads(const scree__config *c);
/* Implementation "smem": the dynamic shared memory of the main kernel,
 * ROWS * nacc * TPR * VEC * CACHE fp32 sums (the cached columns of each
 * row group); the hooks for nacc 1 (RMSNorm, add+RMSNorm) and 2
 * (LayerNorm); and the checks: the launch shape's, then those bytes plus
 * the kernel's static scratch against the target's opt-in limit ("...:
 * 294912 bytes of shared memory for the column sums, past the 232448 a
 * CTA may use on sm_90"). */
size_t scree__nb_smem_bytes(const scree__config *c, int nacc);
size_t scree__nb_smem1(const scree__config *c, const scree__variant *var);
size_t scree__nb_smem2(const scree__config *c, const scree__variant *var);
int scree__nb_smem_check1(const scree__config *c, const scree__variant *var,
                          const scree__target *t, char *why, size_t n);
int scree__nb_smem_check2(const scree__config *c, const scree__variant *var,
                          const scree__target *t, char *why, size_t n);
/* The "smem" implementation of a norm backward op (after a generic one
 * from SCREE__ROWWISE_IMPL): the same fields, kernel and hooks. */
#define SCREE__NB_SMEM_IMPL(nacc_, kind)                                                  \
  .name = "smem", .source = "norm_backward.cu",                                         \
  .entries = {"scree_norm_backward", "scree_norm_backward_dw"}, .min_sm = 80,            \
  .nfields = SCREE__RW_NFIELDS, .fields = scree__rowwise_fields,                         \
  .check = scree__nb_smem_check##nacc_, .smem = scree__nb_smem##nacc_, .adapt = adapt,   \
  .worth_timing = worth_timing, .launch = launch, .threads = scree__nb_threads,          \
  .defines = "SCREE_NB_KIND=" #kind " SCREE_NB_SMEM=1"
/* The persistent grid, the workspace for the column sums, and the two
 * launches (main kernel, then the ordered sum over slots). */
scree_status scree__nb_launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                              const scree__nb_call *a, CUstream stream, const char *what);

#endif
