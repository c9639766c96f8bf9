/* test_cross_entropy_gpu.c - cross-entropy on the GPU against the CPU
 * reference. Label gpu: skipped (exit 77) with a one-line reason where
 * there is none.
 *
 * Random logits, fresh each run (the seed is printed), reshaped by the op's
 * shape_inputs (rows of different spread, large tails, the target made the
 * row maximum in every third row). Targets: ignore_index, the first and the
 * last class, the first element of the scalar tail, the last element of the
 * last whole vector, outside [0, vocab) on both sides (NaN loss), random.
 * loss and lse poisoned (NaN) before each launch with a guard after each;
 * lse = 0 must leave its buffer untouched. Tolerance (ops/cross_entropy.c):
 * |got - ref| <= 5e-5 + 1e-5 |ref| for loss and lse; NaN exactly where the
 * reference has NaN.
 *
 * Shapes: vocab 1, 7, 8, 9, 4095, 32000, 128256, 262144, 1000003 and 2^24;
 * padded and odd strides; starts misaligned for 16-byte vectors;
 * ignore_index -100, 0 (the zeroed struct), inside the vocabulary, -1.
 * Configs: the default through the public entry, every config the device's
 * safelist allows, a fixed spread of the space through scree__run_exact.
 * Validation on: an out-of-range target is refused by name, nothing
 * written.
 *
 * The gradient (grad=1) runs impl=generic by default; impl=keep
 * (kernels/cross_entropy_keep.cu: the row held on chip, clusters of up to
 * 8 CTAs on sm_90) is a tuning candidate: keep_configs_exact runs a spread of keep configs
 * on rows that fill them, in place and not, masked, all rows ignored;
 * keep_every_config (slow) every keep config the host check passes on this
 * GPU; keep_refuses_long_rows a row too long for the config. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/rowwise.h"
#include "ops/rowwise_backward_ref.h"

SCREE__REFERENCE(cross_entropy);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

static const scree_dtype dtypes[] = {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16, SCREE_DTYPE_FP32};
#define NDT 3
#define RTOL 1e-5
#define ATOL 5e-5

static void fill_targets(int64_t *t, int64_t rows, int64_t vocab, int64_t ignore, int oob) {
  const int64_t whole = vocab / 8 * 8;
  for (int64_t r = 0; r < rows; r++) {
    switch (r % 9) {
      case 0: t[r] = ignore; break;
      case 1: t[r] = vocab - 1; break;
      case 2: t[r] = 0; break;
      case 3: t[r] = whole < vocab ? whole : vocab / 2; break;
      case 4: t[r] = oob ? vocab : vocab / 3; break;
      case 5: t[r] = oob ? (ignore == -1 ? -2 : -1) : vocab / 5; break;
      case 6: t[r] = whole > 0 ? whole - 1 : 0; break;
      default: t[r] = (int64_t)(scree_test_rand() % (uint64_t)vocab); break;
    }
  }
}

/* |got - want| within the tolerance, or both NaN. */
static int close_or_nan(float got, float want) {
  if (isnan(want)) return isnan(got);
  return fabs((double)got - (double)want) <= ATOL + RTOL * fabs((double)want);
}

/* One call (with an explicit config if cfg != NULL), every row checked.
 * off shifts the logits by that many elements from an aligned start
 * (narrower vectors; only for the public path, which adapts). */
/* count (when asked for: `given`) holds the rows whose target is not
 * ignore, else its poison; nothing written after it. */
static void check_count(scree_devptr dcount, int given, const int64_t *ht, int64_t rows,
                        int64_t ignore, size_t guard) {
  uint64_t kept = 0, got = 0;
  for (int64_t r = 0; r < rows; r++) kept += ht[r] != ignore;
  scree_test_d2h(ctx, &got, dcount, 8);
  if (given)
    ck_assert_msg(got == kept, "count %llu, want %llu (rows=%lld ignore=%lld)",
                  (unsigned long long)got, (unsigned long long)kept, (long long)rows,
                  (long long)ignore);
  else
    ck_assert_msg(got == ~0ull, "count not asked for but written: %llu", (unsigned long long)got);
  scree_test_check_guard(ctx, dcount + 8, guard, "count");
}

static void run_case(int64_t rows, int64_t vocab, int64_t ls, scree_dtype dt, int64_t ignore,
                     int with_lse, int off, const scree__config *cfg) {
  const size_t e = scree_dtype_size(dt), n = (size_t)(rows * ls);
  void *hl = malloc(n * e + 16);
  int64_t *ht = malloc((size_t)rows * sizeof *ht);
  float *loss = malloc((size_t)rows * 4), *lse = malloc((size_t)rows * 4);
  float *want_loss = malloc((size_t)rows * 4), *want_lse = malloc((size_t)rows * 4);
  scree_test_fill(hl, dt, n, 1.0);
  /* Out-of-range targets only where the call does not validate them. */
  fill_targets(ht, rows, vocab, ignore, !ctx->validate);
  scree_cross_entropy_args a = {.rows = rows, .vocab = vocab, .logits_stride = ls,
                                .ignore_index = ignore, .dtype = dt};
  op->shape_inputs(&a, (void *const[]){hl, ht, NULL, NULL});
  scree__ref_cross_entropy(&a, (void *const[]){hl, ht, want_loss, want_lse});
  const size_t guard = 256;
  scree_devptr bl = scree_test_dalloc(ctx, (n + (size_t)off) * e);
  scree_devptr dt_ = scree_test_dalloc(ctx, (size_t)rows * 8);
  scree_devptr dloss = scree_test_dalloc(ctx, (size_t)rows * 4 + guard);
  scree_devptr dlse = scree_test_dalloc(ctx, (size_t)rows * 4 + guard);
  scree_test_h2d(ctx, bl + (size_t)off * e, hl, n * e);
  scree_test_h2d(ctx, dt_, ht, (size_t)rows * 8);
  scree_test_dpoison(ctx, dloss, (size_t)rows * 4 + guard);
  scree_test_dpoison(ctx, dlse, (size_t)rows * 4 + guard);
  a.logits = bl + (size_t)off * e;
  a.targets = dt_;
  a.loss = dloss;
  a.lse = with_lse ? dlse : 0;
  /* With lse, the count of the rows not ignored too (scree_ce_count before
   * the plain forward). */
  scree_devptr dcount = scree_test_dalloc(ctx, 8 + guard);
  scree_test_dpoison(ctx, dcount, 8 + guard);
  a.count = with_lse ? dcount : 0;
  scree_status st;
  if (cfg) {
    const scree__variant var = {{dt}};
    st = scree__run_exact(ctx, op, cfg, &var, &a, NULL);
  } else {
    st = scree_cross_entropy(ctx, &a, NULL);
  }
  char cs[128] = "default";
  if (cfg) scree__config_str(op, cfg, cs, sizeof cs);
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, loss, dloss, (size_t)rows * 4);
  scree_test_d2h(ctx, lse, dlse, (size_t)rows * 4);
  scree_test_check_guard(ctx, dloss + (size_t)rows * 4, guard, "loss");
  scree_test_check_guard(ctx, dlse + (size_t)rows * 4, guard, "lse");
  check_count(dcount, with_lse, ht, rows, ignore, guard);
  scree_test_dfree(ctx, dcount);
  for (int64_t r = 0; r < rows; r++) {
    if (!close_or_nan(loss[r], want_loss[r]))
      ck_abort_msg("rows=%lld vocab=%lld ls=%lld %s ignore=%lld lse=%d off=%d config %s: row %lld "
                   "target %lld: loss %.8g, want %.8g",
                   (long long)rows, (long long)vocab, (long long)ls, scree_dtype_name(dt),
                   (long long)ignore, with_lse, off, cs, (long long)r, (long long)ht[r],
                   (double)loss[r], (double)want_loss[r]);
    if (with_lse ? !close_or_nan(lse[r], want_lse[r]) : !isnan(lse[r]))
      ck_abort_msg("rows=%lld vocab=%lld %s lse=%d config %s: row %lld: lse %.8g, want %.8g",
                   (long long)rows, (long long)vocab, scree_dtype_name(dt), with_lse, cs,
                   (long long)r, (double)lse[r], with_lse ? (double)want_lse[r] : NAN);
  }
  scree_test_dfree(ctx, bl), scree_test_dfree(ctx, dt_);
  scree_test_dfree(ctx, dloss), scree_test_dfree(ctx, dlse);
  free(hl), free(ht), free(loss), free(lse), free(want_loss), free(want_lse);
}

/* The public path (default config, adapted to the call) over edge shapes. */
static const int64_t shapes[][3] = {
    /* rows, vocab, logits_stride */
    {9, 1, 1},           {18, 7, 7},            {18, 8, 8},
    {18, 9, 16},         {100, 4095, 4095},     {64, 32000, 32000},
    {37, 32001, 32008},  {16, 128256, 128256},  {5, 262144, 262144},
    {3, 1000003, 1000003}, {2, 1 << 24, 1 << 24}, {20000, 100, 100}, /* many rows */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])
static const int64_t ignores[] = {-100, 0, 5, -1};

START_TEST(default_path_shapes) {
  const int64_t *s = shapes[_i / NDT];
  run_case(s[0], s[1], s[2], dtypes[_i % NDT], ignores[_i % 4], _i % 2, 0, NULL);
}
END_TEST

/* Starts 1, 2 and 3 elements past a 16-byte boundary: the call narrows its
 * vectors and must still be right. */
START_TEST(misaligned_starts) {
  for (int off = 1; off <= 3; off++) {
    run_case(19, 32000, 32000, dtypes[_i], -100, 1, off, NULL);
    run_case(4, 100003, 100003, dtypes[_i], -100, 0, off, NULL);
  }
}
END_TEST

START_TEST(zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_cross_entropy_args a = {.rows = 0, .vocab = 128};
  ck_assert_int_eq(scree_cross_entropy(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* Validation on: targets are read on the host; one outside [0, vocab) that
 * is not ignore_index is refused, naming it, and nothing is written. */
START_TEST(validate_targets) {
  scree_context *vctx = scree_test_validating_context();
  const int64_t rows = 6, vocab = 1000;
  scree_devptr logits = scree_test_dalloc(ctx, (size_t)(rows * vocab) * 2);
  scree_devptr targets = scree_test_dalloc(ctx, (size_t)rows * 8);
  scree_devptr loss = scree_test_dalloc(ctx, (size_t)rows * 4);
  scree_test_dpoison(ctx, logits, (size_t)(rows * vocab) * 2);
  scree_cross_entropy_args a = {.logits = logits, .targets = targets, .loss = loss,
                                .rows = rows, .vocab = vocab, .ignore_index = -100,
                                .dtype = SCREE_DTYPE_BF16};
  const int64_t bad[][6] = {{0, 1, 2, 1000, 4, 5}, {0, -1, 2, 3, 4, 5}, {-99, 1, 2, 3, 4, 5}};
  const char *needle[] = {"targets[3]=1000", "targets[1]=-1", "targets[0]=-99"};
  float probe[6];
  for (int i = 0; i < 3; i++) {
    scree_test_h2d(ctx, targets, bad[i], sizeof bad[i]);
    scree_test_dpoison(ctx, loss, (size_t)rows * 4);
    const scree_status st = scree_cross_entropy(vctx, &a, NULL);
    ck_assert_msg(st == SCREE_ERROR_INVALID_ARGUMENT && strstr(scree_last_error(vctx), needle[i]),
                  "case %d: %s: %s", i, scree_status_name(st), scree_last_error(vctx));
    scree_test_sync(ctx);
    scree_test_d2h(ctx, probe, loss, sizeof probe);
    for (int k = 0; k < 6; k++) ck_assert(isnan(probe[k]));
  }
  /* ignore_index anywhere, and classes 0 and vocab - 1: accepted. */
  const int64_t good[6] = {-100, 0, 999, -100, 500, 1};
  scree_test_h2d(ctx, targets, good, sizeof good);
  ck_assert_msg(scree_cross_entropy(vctx, &a, NULL) == SCREE_OK, "%s", scree_last_error(vctx));
  a.ignore_index = 1000; /* an ignore value outside the vocabulary is still ignored */
  const int64_t good2[6] = {1000, 0, 999, 1000, 500, 1};
  scree_test_h2d(ctx, targets, good2, sizeof good2);
  ck_assert_msg(scree_cross_entropy(vctx, &a, NULL) == SCREE_OK, "%s", scree_last_error(vctx));
  scree_test_sync(ctx);
  scree_destroy(vctx);
  scree_test_dfree(ctx, logits), scree_test_dfree(ctx, targets), scree_test_dfree(ctx, loss);
}
END_TEST

/* Configs run exactly as given: strides multiples of 8 (every vector
 * width); one partial batch with a tail, several batches with a partial
 * last one and a tail, a vocabulary of one, one shorter than a vector. */
static void run_config_shapes(const scree__config *c, scree_dtype dt) {
  const int64_t span = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE];
  const int64_t rows = c->v[SCREE__RW_ROWS] * 3 + 1;
  run_case(rows, span - 1, span, dt, -100, 1, 0, c);
  run_case(5, 3 * span + 5, 3 * span + 8, dt, 0, 1, 0, c);
  run_case(rows, 1, 8, dt, -100, 0, 0, c);
  run_case(rows, 5, 8, dt, 2, 1, 0, c);
}

/* A spread of the launch-shape space (every value of every field), run
 * whatever the safelist says. */
static const char *const fixed_configs[] = {
    "impl=generic,tpr=8,rows=16,vec=8,cache=2",  "impl=generic,tpr=8,rows=4,vec=1,cache=1",
    "impl=generic,tpr=16,rows=4,vec=4,cache=4",  "impl=generic,tpr=32,rows=1,vec=8,cache=8",
    "impl=generic,tpr=64,rows=2,vec=2,cache=16", "impl=generic,tpr=128,rows=1,vec=8,cache=4",
    "impl=generic,tpr=256,rows=2,vec=4,cache=1", "impl=generic,tpr=256,rows=1,vec=8,cache=4",
    "impl=generic,tpr=512,rows=1,vec=8,cache=8", "impl=generic,tpr=1024,rows=1,vec=4,cache=4",
    "impl=generic,tpr=128,rows=8,vec=4,cache=2",
};
#define NFIXED (sizeof fixed_configs / sizeof fixed_configs[0])

START_TEST(fixed_configs_exact) {
  const scree_dtype dt = dtypes[_i];
  const scree__variant var = {{dt}};
  for (size_t i = 0; i < NFIXED; i++) {
    const scree__config c = scree_test_config(ctx, op, fixed_configs[i], &var);
    /* A config the tuner would time: on a vocabulary of three batches. */
    const scree_cross_entropy_args v3 = {
        .vocab = 3 * (int64_t)c.v[SCREE__RW_TPR] * c.v[SCREE__RW_VEC] * c.v[SCREE__RW_CACHE]};
    ck_assert_msg(op->impls[0].worth_timing(&c, &var, &v3), "%s", fixed_configs[i]);
    run_config_shapes(&c, dt);
  }
  printf("fixed_configs_exact %s: %zu configs\n", scree_dtype_name(dt), NFIXED);
}
END_TEST

/* Every config the device's safelist allows: on the generated check
 * problem of two vocabularies of its variant (or of each dtype for "*"
 * lines), through the harness (poison, run, compare), and on the edge
 * shapes above. */
START_TEST(every_safelisted_config) {
  int ran = 0, e = -1;
  scree__variant line_var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &line_var));) {
    if (en->cfg.impl != 0) continue; /* impl=keep: grad=1 only, keep_every_config */
    for (int k = 0; k < NDT; k++) {
      scree__variant var = {{dtypes[k]}};
      if (strcmp(en->dtype, "*")) {
        if (k) break;
        var = line_var;
      }
      static const int64_t vocabs[] = {32000, 128256};
      for (int s = 0; s < 2; s++) {
        scree_cross_entropy_args a = {.rows = 40, .vocab = vocabs[s]};
        scree__run r;
        scree_test_make(ctx, op, &var, &a, NULL, &r);
        scree_test_check_config(ctx, &r, op, &en->cfg, &var, stream,
                                "safelist line %d, vocab %lld", en->line, (long long)vocabs[s]);
        scree__run_free(ctx, &r);
      }
      run_config_shapes(&en->cfg, (scree_dtype)var.v[0]);
      ran++;
    }
  }
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

/* ---- the extended forward: smoothing, z-loss, dlogits -------------------- */

/* dlogits' tolerance for dtype (ops/rowwise.h). */
static double grad_rtol(scree_dtype dt) {
  return dt == SCREE_DTYPE_BF16   ? SCREE__CE_GRAD_RTOL_BF16
         : dt == SCREE_DTYPE_FP16 ? SCREE__CE_GRAD_RTOL_FP16
                                  : SCREE__CE_GRAD_RTOL_FP32;
}

typedef struct gcase {
  int64_t rows, vocab, ls, ds; /* ds < 0: in place over the logits (ds = ls) */
  int64_t ignore;
  float eps, z;
  int reduction;
  float grad_scale;
  int with_dlogits, with_lse;
  int all_ignored; /* every target ignore_index */
  int masked;      /* every 5th logit of a row but the target's -inf */
} gcase;

/* One call of the extended kernel (cfg NULL: the public entry), loss, lse
 * and dlogits checked on every row. Outputs poisoned (0xff: NaN) before the
 * launch with a guard after each; dlogits' row padding must stay poisoned.
 * In place: the logits' buffer is dlogits, its padding untouched. Loss:
 * |got - want| <= 1e-4 + 1e-5 |want| (smoothing adds the row's fp32 logit
 * sum); dlogits: SCREE__CE_GRAD_*. */
static void run_grad_case(const gcase *g, scree_dtype dt, const scree__config *cfg) {
  const int inplace = g->ds < 0;
  const int64_t rows = g->rows, vocab = g->vocab, ls = g->ls, ds = inplace ? g->ls : g->ds;
  const size_t e = scree_dtype_size(dt), n = (size_t)(rows * ls), nd = (size_t)(rows * ds);
  void *hl = malloc(n * e + 16), *hd = malloc(nd * e + 16), *want_d = malloc(nd * e + 16);
  int64_t *ht = malloc((size_t)rows * sizeof *ht + 8);
  float *loss = malloc((size_t)rows * 4 + 4), *lse = malloc((size_t)rows * 4 + 4);
  float *want_loss = malloc((size_t)rows * 4 + 4), *want_lse = malloc((size_t)rows * 4 + 4);
  scree_test_fill(hl, dt, n, 1.0);
  fill_targets(ht, rows, vocab, g->ignore, !ctx->validate);
  if (g->all_ignored)
    for (int64_t r = 0; r < rows; r++) ht[r] = g->ignore;
  else if (rows == 1)
    ht[0] = vocab - 1; /* fill_targets ignores row 0 */
  scree_cross_entropy_args a = {.rows = rows, .vocab = vocab, .logits_stride = ls,
                                .ignore_index = g->ignore, .dtype = dt, .dlogits_stride = ds,
                                .label_smoothing = g->eps, .z_loss = g->z,
                                .reduction = g->reduction, .grad_scale = g->grad_scale};
  op->shape_inputs(&a, (void *const[]){hl, ht, NULL, NULL});
  if (g->masked)
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 1; c < vocab; c += 5)
        if (c != ht[r]) scree__store_elem(hl, dt, (size_t)(r * ls + c), -INFINITY);
  /* The reference's dlogits: the padding as the call must leave it (the
   * poison, or in place the logits). */
  if (inplace)
    memcpy(want_d, hl, n * e);
  else
    memset(want_d, 0xff, nd * e);
  scree__cross_entropy_ref(hl, ls, ht, want_loss, want_lse, g->with_dlogits ? want_d : NULL, ds,
                           rows, vocab, dt, g->ignore, g->eps, g->z, g->reduction,
                           g->grad_scale);
  int64_t kept = 0;
  for (int64_t r = 0; r < rows; r++) kept += ht[r] != g->ignore;
  double scale = g->grad_scale != 0.f ? fabs((double)g->grad_scale) : 1.0;
  if (g->reduction == SCREE_REDUCTION_MEAN) scale /= (double)(kept ? kept : 1);

  const size_t guard = 256;
  scree_devptr bl = scree_test_dalloc(ctx, n * e + guard);
  scree_devptr bd = inplace ? bl : scree_test_dalloc(ctx, nd * e + guard);
  scree_devptr dt_ = scree_test_dalloc(ctx, (size_t)rows * 8 + 8);
  scree_devptr dloss = scree_test_dalloc(ctx, (size_t)rows * 4 + guard);
  scree_devptr dlse = scree_test_dalloc(ctx, (size_t)rows * 4 + guard);
  scree_test_dpoison(ctx, bl, n * e + guard);
  if (!inplace) scree_test_dpoison(ctx, bd, nd * e + guard);
  scree_test_h2d(ctx, bl, hl, n * e);
  scree_test_h2d(ctx, dt_, ht, (size_t)rows * 8);
  scree_test_dpoison(ctx, dloss, (size_t)rows * 4 + guard);
  scree_test_dpoison(ctx, dlse, (size_t)rows * 4 + guard);
  a.logits = bl;
  a.targets = dt_;
  a.loss = dloss;
  a.lse = g->with_lse ? dlse : 0;
  a.dlogits = g->with_dlogits ? bd : 0;
  /* With lse, the count too: the gradient's mean then divides by the
   * caller's count rather than the workspace's. */
  scree_devptr dcount = scree_test_dalloc(ctx, 8 + guard);
  scree_test_dpoison(ctx, dcount, 8 + guard);
  a.count = g->with_lse ? dcount : 0;
  scree_status st;
  if (cfg) {
    const scree__variant var = {{dt, 1}};
    st = scree__run_exact(ctx, op, cfg, &var, &a, NULL);
  } else {
    st = scree_cross_entropy(ctx, &a, NULL);
  }
  char cs[128] = "default";
  if (cfg) scree__config_str(op, cfg, cs, sizeof cs);
  char what[384];
  snprintf(what, sizeof what,
           "rows=%lld vocab=%lld ls=%lld ds=%lld%s %s ignore=%lld eps=%g z=%g red=%d gs=%g "
           "dlogits=%d lse=%d all_ignored=%d config %s",
           (long long)rows, (long long)vocab, (long long)ls, (long long)ds,
           inplace ? " (in place)" : "", scree_dtype_name(dt), (long long)g->ignore,
           (double)g->eps, (double)g->z, g->reduction, (double)g->grad_scale, g->with_dlogits,
           g->with_lse, g->all_ignored, cs);
  ck_assert_msg(st == SCREE_OK, "%s: %s: %s", what, scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, loss, dloss, (size_t)rows * 4);
  scree_test_d2h(ctx, lse, dlse, (size_t)rows * 4);
  scree_test_check_guard(ctx, dloss + (size_t)rows * 4, guard, "loss");
  scree_test_check_guard(ctx, dlse + (size_t)rows * 4, guard, "lse");
  scree_test_check_guard(ctx, bl + n * e, guard, "logits");
  check_count(dcount, g->with_lse, ht, rows, g->ignore, guard);
  scree_test_dfree(ctx, dcount);
  for (int64_t r = 0; r < rows; r++) {
    const double wl = want_loss[r];
    const int ok = isnan(wl) ? isnan(loss[r]) : fabs((double)loss[r] - wl) <= 1e-4 + 1e-5 * fabs(wl);
    if (!ok)
      ck_abort_msg("%s: row %lld target %lld: loss %.8g, want %.8g", what, (long long)r,
                   (long long)ht[r], (double)loss[r], wl);
    if (g->with_lse ? !close_or_nan(lse[r], want_lse[r]) : !isnan(lse[r]))
      ck_abort_msg("%s: row %lld: lse %.8g, want %.8g", what, (long long)r, (double)lse[r],
                   g->with_lse ? (double)want_lse[r] : NAN);
  }
  if (g->with_dlogits) {
    scree_test_d2h(ctx, hd, bd, nd * e);
    if (!inplace) scree_test_check_guard(ctx, bd + nd * e, guard, "dlogits");
    /* A row whose reference is NaN (a target outside [0, vocab)) must be
     * NaN throughout; it is then zeroed in both, so the comparison below
     * (which fails on any NaN) checks the other rows and the padding. */
    for (int64_t r = 0; r < rows; r++) {
      if (!isnan(scree__load_elem(want_d, dt, (size_t)(r * ds)))) continue;
      for (int64_t c = 0; c < vocab; c++) {
        const size_t i = (size_t)(r * ds + c);
        if (!isnan(scree__load_elem(hd, dt, i)))
          ck_abort_msg("%s: row %lld target %lld: dlogits[%lld] %.8g, want NaN", what,
                       (long long)r, (long long)ht[r], (long long)c,
                       scree__load_elem(hd, dt, i));
        scree__store_elem(hd, dt, i, 0.0);
        scree__store_elem(want_d, dt, i, 0.0);
      }
    }
    scree_test_compare_rows(hd, want_d, dt, rows, vocab, ds, grad_rtol(dt),
                            SCREE__CE_GRAD_ATOL * scale +
                                (dt == SCREE_DTYPE_FP16 ? SCREE__CE_GRAD_ATOL_FP16_FLOOR : 0),
                            "dlogits", "%s", what);
  } else if (!inplace) {
    /* Not asked for: its buffer untouched. */
    scree_test_check_guard(ctx, bd, nd * e + guard, "dlogits (not given)");
  }
  if (!inplace) scree_test_dfree(ctx, bd);
  scree_test_dfree(ctx, bl), scree_test_dfree(ctx, dt_);
  scree_test_dfree(ctx, dloss), scree_test_dfree(ctx, dlse);
  free(hl), free(hd), free(want_d), free(ht), free(loss), free(lse), free(want_loss),
      free(want_lse);
}

/* The public path over edge shapes: vocab 1, odd, the largest, rows 0 and
 * 1 (0: nothing launched), padded strides, in place, every reduction, all
 * rows ignored, smoothing and z-loss alone and together, without dlogits
 * (the extended loss only), grad_scale negative, logits masked to -inf. Targets at 0 and vocab - 1
 * in every case of 3 rows or more (fill_targets). */
static const gcase gcases[] = {
    /* rows, vocab, ls, ds, ignore, eps, z, red, gs, dlogits, lse, all_ignored */
    {9, 1, 1, 1, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {1, 7, 7, 7, -100, 0, 0, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {18, 7, 8, 16, -100, 0.2f, 0, SCREE_REDUCTION_SUM, 2.f, 1, 0, 0, 0},
    {18, 9, 16, -1, 0, 0, 1e-3f, SCREE_REDUCTION_NONE, 0, 1, 1, 0, 0},
    {100, 4095, 4095, 4096, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {64, 32000, 32000, 32000, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 1.f, 1, 1, 0, 0},
    {37, 32001, 32008, -1, -100, 0.05f, 0, SCREE_REDUCTION_MEAN, -0.5f, 1, 1, 0, 0},
    {16, 128256, 128256, -1, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {16, 128256, 128256, 128264, -100, 0, 0, SCREE_REDUCTION_SUM, 0, 1, 0, 0, 0},
    {5, 262144, 262144, 262144, 5, 1.f, 0, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {3, 1000003, 1000003, 1000008, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {2, 1 << 24, 1 << 24, -1, -100, 0.1f, 1e-4f, SCREE_REDUCTION_SUM, 0, 1, 1, 0, 0},
    {20000, 100, 100, 104, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {12, 5000, 5000, 5000, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 1, 0},
    {12, 5000, 5000, -1, -1, 0, 0, SCREE_REDUCTION_MEAN, 0, 1, 1, 1, 0},
    {30, 32000, 32000, 32000, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 0, 1, 0, 0},
    {30, 32000, 32000, 32000, -100, 0, 1e-4f, SCREE_REDUCTION_MEAN, 0, 0, 0, 0, 0},
    /* Masked logits (-inf): a finite loss without smoothing, zero gradients there. */
    {40, 32000, 32000, 32000, -100, 0, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 1},
    {40, 4099, 4099, -1, -100, 0, 0, SCREE_REDUCTION_SUM, 0, 1, 1, 0, 1},
    /* Many rows, one row, a large odd vocabulary in place (scalar
     * accesses), a power-of-two vocabulary. */
    {300, 32000, 32000, 32000, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {1, 128256, 128256, 128256, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {3, 128257, 128257, -1, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
    {33, 131072, 131072, 131080, -100, 0, 0, SCREE_REDUCTION_SUM, 0, 1, 1, 0, 1},
};
#define NGCASES (sizeof gcases / sizeof gcases[0])

START_TEST(grad_default_path) { run_grad_case(&gcases[_i / NDT], dtypes[_i % NDT], NULL); }
END_TEST

START_TEST(grad_zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_cross_entropy_args a = {.rows = 0, .vocab = 128, .reduction = SCREE_REDUCTION_MEAN,
                                .label_smoothing = 0.1f, .dlogits = 0x1000};
  ck_assert_int_eq(scree_cross_entropy(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* Configs run exactly as given with the gradient: the shapes of
 * run_config_shapes, in place and not, every reduction. */
static void run_grad_config_shapes(const scree__config *c, scree_dtype dt) {
  const int64_t span = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE];
  const int64_t rows = c->v[SCREE__RW_ROWS] * 3 + 1;
  const gcase gs[] = {
      {rows, span - 1, span, span, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
      {5, 3 * span + 5, 3 * span + 8, -1, 0, 0.1f, 0, SCREE_REDUCTION_SUM, 0, 1, 1, 0, 0},
      {rows, 1, 8, 8, -100, 0, 1e-3f, SCREE_REDUCTION_MEAN, 0, 1, 0, 0, 0},
      {rows, 5, 8, -1, 2, 0.3f, 1e-4f, SCREE_REDUCTION_NONE, 3.f, 1, 1, 0, 0},
  };
  for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) run_grad_case(&gs[i], dt, c);
}

START_TEST(grad_fixed_configs_exact) {
  const scree_dtype dt = dtypes[_i];
  const scree__variant var = {{dt, 1}};
  for (size_t i = 0; i < NFIXED; i++) {
    const scree__config c = scree_test_config(ctx, op, fixed_configs[i], &var);
    run_grad_config_shapes(&c, dt);
  }
  printf("grad_fixed_configs_exact %s: %zu configs\n", scree_dtype_name(dt), NFIXED);
}
END_TEST

/* ---- impl=keep: the row held on chip (kernels/cross_entropy_keep.cu) ---- */

/* Shapes for a keep config run exactly: rows that fill what it holds
 * (csize x tpr x cache vectors) but for one element, all of it plus a tail
 * of vec - 1, a row of one element, one shorter than a vector, about half
 * of it masked to -inf, every row ignored under the mean; in place and
 * not, every reduction, rows not a multiple of the CTA's. */
static void run_keep_config_shapes(const scree__config *c, scree_dtype dt, int ncases) {
  const int64_t v = c->v[SCREE__RW_VEC];
  const int64_t full = (int64_t)c->v[4] * c->v[SCREE__RW_TPR] * c->v[SCREE__RW_CACHE] * v;
  const int64_t rows = c->v[SCREE__RW_ROWS] * 3 + 1;
  const int64_t a = full > 1 ? full - 1 : 1, b = full + v - 1, h = full / 2 + 3;
  const int64_t la = (a + 7) / 8 * 8, lb = (b + 7) / 8 * 8, lh = (h + 7) / 8 * 8;
  const gcase gs[] = {
      {rows, a, la, la + 8, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 0},
      {5, b, lb, -1, 0, 0.1f, 0, SCREE_REDUCTION_SUM, 0, 1, 1, 0, 0},
      {rows, 1, 8, 8, -100, 0, 1e-3f, SCREE_REDUCTION_MEAN, 0, 1, 0, 0, 0},
      {rows, 5, 8, -1, 2, 0.3f, 1e-4f, SCREE_REDUCTION_NONE, 3.f, 1, 1, 0, 0},
      {rows, h, lh, lh, -100, 0, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 0, 1},
      {rows, b, lb, lb, -1, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 1, 1, 0},
  };
  const size_t n = ncases < (int)(sizeof gs / sizeof gs[0]) ? (size_t)ncases : sizeof gs / sizeof gs[0];
  for (size_t i = 0; i < n; i++) run_grad_case(&gs[i], dt, c);
}

/* A spread of impl=keep's space run whatever the safelist says: each
 * cluster size, the default shapes of 32000, 128256 and 262144, short
 * rows several to a CTA, narrow vectors. fp32 halves vec (64 bytes a
 * thread at most). */
static const char *const keep_configs[] = {
    "impl=keep,tpr=8,rows=16,vec=8,cache=1,csize=1",
    "impl=keep,tpr=32,rows=4,vec=2,cache=8,csize=1",
    "impl=keep,tpr=128,rows=1,vec=8,cache=4,csize=1",
    "impl=keep,tpr=1024,rows=1,vec=8,cache=4,csize=1",
    "impl=keep,tpr=64,rows=2,vec=4,cache=2,csize=2",
    "impl=keep,tpr=512,rows=1,vec=8,cache=4,csize=2",
    "impl=keep,tpr=256,rows=4,vec=1,cache=16,csize=4",
    "impl=keep,tpr=512,rows=1,vec=8,cache=4,csize=8",
    "impl=keep,tpr=1024,rows=1,vec=8,cache=4,csize=8",
    "impl=keep,tpr=16,rows=8,vec=8,cache=2,csize=8",
};
#define NKEEP (sizeof keep_configs / sizeof keep_configs[0])

START_TEST(keep_configs_exact) {
  const scree_dtype dt = dtypes[_i];
  const scree__variant var = {{dt, 1}};
  scree__target t;
  scree__target_of(ctx, &t);
  for (size_t i = 0; i < NKEEP; i++) {
    char text[96];
    snprintf(text, sizeof text, "%s", keep_configs[i]);
    if (dt == SCREE_DTYPE_FP32) { /* vec=8 -> vec=4 */
      char *p = strstr(text, "vec=8");
      if (p) p[4] = '4';
    }
    if (!strstr(text, "csize=1") && t.sm < 90) continue; /* clusters: sm_90 */
    const scree__config c = scree_test_config(ctx, op, text, &var);
    ck_assert_int_eq(c.impl, 1);
    run_keep_config_shapes(&c, dt, 6);
  }
  printf("keep_configs_exact %s: %zu configs\n", scree_dtype_name(dt), NKEEP);
}
END_TEST

/* Every impl=keep config that passes the host check on this GPU, for each
 * dtype: the generated check problem (mean, smoothing 0.1, z-loss 1e-4) on
 * the largest vocabulary it holds, through the harness, and the first two
 * shapes above (the row filled but for one element, not in place; filled
 * with a tail, in place). */
START_TEST(keep_every_config) {
  const scree__variant var = {{dtypes[_i], 1}};
  size_t n = 0, ran = 0;
  scree__config *cfgs = scree_test_checked_space(ctx, op, &var, &n);
  for (size_t i = 0; i < n; i++) {
    if (cfgs[i].impl != 1) continue;
    const scree__config *c = &cfgs[i];
    const int64_t full =
        (int64_t)c->v[4] * c->v[SCREE__RW_TPR] * c->v[SCREE__RW_CACHE] * c->v[SCREE__RW_VEC];
    scree_cross_entropy_args a = {.rows = 3 * c->v[SCREE__RW_ROWS] + 2, .vocab = full};
    scree__run r;
    scree_test_make(ctx, op, &var, &a, NULL, &r);
    char cs[160];
    scree__config_str(op, c, cs, sizeof cs);
    scree_test_check_config(ctx, &r, op, c, &var, stream, "keep %s vocab %lld", cs,
                            (long long)full);
    scree__run_free(ctx, &r);
    run_keep_config_shapes(c, dtypes[_i], 2); /* the space is large: the two full-row cases */
    ran++;
  }
  free(cfgs);
  printf("keep_every_config %s: %zu configs\n", scree_dtype_name(dtypes[_i]), ran);
}
END_TEST

/* A keep config whose row does not fit is refused by name, nothing
 * launched or written (SCREE_ERROR_UNSUPPORTED), and the tuner would not
 * time it. */
START_TEST(keep_refuses_long_rows) {
  const scree__variant var = {{SCREE_DTYPE_BF16, 1}};
  const scree__config c =
      scree_test_config(ctx, op, "impl=keep,tpr=128,rows=1,vec=8,cache=4,csize=1", &var);
  const int64_t rows = 4, vocab = 128 * 4 * 8 + 8;
  const size_t bytes = (size_t)(rows * vocab) * 2;
  scree_devptr bl = scree_test_dalloc(ctx, bytes), bd = scree_test_dalloc(ctx, bytes);
  scree_devptr bt = scree_test_dalloc(ctx, (size_t)rows * 8), bo = scree_test_dalloc(ctx, 64);
  scree_test_dpoison(ctx, bd, bytes);
  scree_test_dpoison(ctx, bo, 64);
  const int64_t zeros[4] = {0, 0, 0, 0};
  scree_test_h2d(ctx, bt, zeros, sizeof zeros);
  scree_cross_entropy_args a = {.logits = bl, .targets = bt, .loss = bo, .rows = rows,
                                .vocab = vocab, .ignore_index = -100, .dtype = SCREE_DTYPE_BF16,
                                .dlogits = bd, .reduction = SCREE_REDUCTION_SUM};
  ck_assert_int_eq(op->impls[1].worth_timing(&c, &var, &a), 0);
  const uint64_t calls = scree_test_calls(ctx);
  ck_assert_int_eq(scree__run_exact(ctx, op, &c, &var, &a, NULL), SCREE_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(scree_last_error(ctx), "vocab=4104"), "%s", scree_last_error(ctx));
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
  scree_test_sync(ctx);
  scree_test_check_guard(ctx, bd, bytes, "dlogits (refused)");
  scree_test_check_guard(ctx, bo, 64, "loss (refused)");
  scree_test_dfree(ctx, bl), scree_test_dfree(ctx, bd), scree_test_dfree(ctx, bt),
      scree_test_dfree(ctx, bo);
}
END_TEST

/* Every safelisted config with the gradient: the generated check problem
 * (mean, smoothing 0.1, z-loss 1e-4) through the harness, and the edge
 * shapes above. */
START_TEST(grad_every_safelisted_config) {
  int ran = 0, e = -1;
  scree__variant line_var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &line_var));) {
    for (int k = 0; k < NDT; k++) {
      scree__variant var = {{dtypes[k], 1}};
      if (strcmp(en->dtype, "*")) {
        if (k) break;
        var = line_var;
        if (!var.v[1]) continue;
      }
      /* impl=keep: the vocabularies it holds (else the largest it holds). */
      const int keep = en->cfg.impl == 1;
      const int64_t full = keep ? (int64_t)en->cfg.v[4] * en->cfg.v[SCREE__RW_TPR] *
                                      en->cfg.v[SCREE__RW_CACHE] * en->cfg.v[SCREE__RW_VEC]
                                : 0;
      const int64_t vocabs[] = {keep && full < 32000 ? full : 32000,
                                keep && full < 128256 ? full : 128256};
      for (int s = 0; s < 2; s++) {
        if (s && vocabs[1] == vocabs[0]) break;
        scree_cross_entropy_args a = {.rows = 40, .vocab = vocabs[s]};
        scree__run r;
        scree_test_make(ctx, op, &var, &a, NULL, &r);
        scree_test_check_config(ctx, &r, op, &en->cfg, &var, stream,
                                "grad: safelist line %d, vocab %lld", en->line,
                                (long long)vocabs[s]);
        scree__run_free(ctx, &r);
      }
      if (keep)
        run_keep_config_shapes(&en->cfg, (scree_dtype)var.v[0], 6);
      else
        run_grad_config_shapes(&en->cfg, (scree_dtype)var.v[0]);
      ran++;
    }
  }
  printf("grad_every_safelisted_config: %d runs\n", ran);
}
END_TEST

/* The check problem of the grad variant through the public entry (its
 * default config) and the harness's poison and compare. */
START_TEST(grad_check_problem_public) {
  const scree__variant var = {{dtypes[_i], 1}};
  static const int64_t vocabs[] = {1, 9, 32000, 128256};
  for (int s = 0; s < 4; s++) {
    scree_cross_entropy_args a = {.rows = 40, .vocab = vocabs[s]};
    scree_test_check_public(ctx, op, &var, &a, NULL, stream, "grad check problem vocab %lld",
                            (long long)vocabs[s]);
  }
}
END_TEST

static void setup(void) {
  op = scree_test_op_setup("cross_entropy", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "cross_entropy_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_rows_launches_nothing, validate_targets,
                                     grad_zero_rows_launches_nothing, keep_refuses_long_rows),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NDT}, {misaligned_starts, NDT},
                                     {grad_default_path, NGCASES * NDT},
                                     {grad_check_problem_public, NDT}, {keep_configs_exact, NDT}),
                .slow_tests = SCREE_TESTS(every_safelisted_config, grad_every_safelisted_config),
                .slow_loops = SCREE_LOOPS({fixed_configs_exact, NDT},
                                          {grad_fixed_configs_exact, NDT},
                                          {keep_every_config, NDT}))
