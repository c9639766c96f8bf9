/* test_layernorm_gpu.c - LayerNorm on the GPU against the CPU reference.
 * Label gpu: skipped (exit 77) with a one-line reason where there is none.
 *
 * Random inputs, fresh each run (the seed is printed), shaped by the op's
 * shape_inputs (rows of different spread and of large mean, large tails);
 * y, mean and rstd poisoned with NaN before each launch so an unwritten
 * element fails, and a guard region after each output checked untouched.
 * Tolerances (ops/layernorm.c): y one rounding of y's dtype
 * (scree__tolerance), rstd fp32's (rtol 1e-5, atol 1e-6), mean rtol 1e-5
 * and atol SCREE__LAYERNORM_MEAN_ATOL (2e-5, relative to the rows' spread).
 *
 * Covered: edge shapes (cols 1, odd, 65535, 65536, one row, many rows,
 * strides past cols), starts misaligned by 1 or 2 elements (the call falls
 * back to narrower vectors), in place, bias and statistics each on and
 * off, every variant through the harness' check problem, every config of
 * the space on three variants, a fixed list of configs on mixed variants,
 * and every config the device's safelist allows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/rowwise.h"

SCREE__REFERENCE(layernorm);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

typedef struct dt3 {
  scree_dtype x, w, y;
} dt3;

static const dt3 dtype_sets[] = {
    {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16},
    {SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32},
    {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16},
    {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_BF16, SCREE_DTYPE_FP16},
};
#define NSETS (sizeof dtype_sets / sizeof dtype_sets[0])

typedef struct lcase {
  int64_t rows, cols, xs, ys;
  int off;      /* every pointer this many elements past an aligned start */
  int bias;     /* b given */
  int stats;    /* mean and rstd given */
  int in_place; /* y = x */
} lcase;

#define GUARD 256

/* Runs one call (the public entry, or an explicit config through
 * scree__run_exact) and checks every element of y (its padding between
 * rows too: untouched), mean and rstd, and the guards. */
static void run_case(const lcase *k, dt3 d, const scree__config *cfg) {
  const size_t ex = scree_dtype_size(d.x), ew = scree_dtype_size(d.w),
               ey = scree_dtype_size(d.y);
  const size_t nx = (size_t)(k->rows * k->xs), ny = (size_t)(k->rows * k->ys);
  const size_t n = (size_t)k->cols, rows = (size_t)k->rows, off = (size_t)k->off;
  void *hx = malloc(nx * ex + 16), *hw = malloc(n * ew + 16), *hb = malloc(n * ew + 16);
  void *hy = malloc(ny * ey + 16), *href = malloc(ny * ey + 16);
  float *hm = malloc(rows * 4 + 16), *hr = malloc(rows * 4 + 16);
  float *rm = malloc(rows * 4 + 16), *rr = malloc(rows * 4 + 16);
  scree_test_fill(hx, d.x, nx, 1.0);
  scree_test_fill(hw, d.w, n, 1.0);
  scree_test_fill(hb, d.w, n, 1.0);
  scree_layernorm_args shape = {.rows = k->rows, .cols = k->cols, .x_stride = k->xs,
                                .x_dtype = d.x};
  op->shape_inputs(&shape, (void *const[]){hx});

  const scree_devptr xa = scree_test_dalloc(ctx, nx * ex + off * ex + GUARD);
  const scree_devptr dx = xa + off * ex;
  const scree_devptr wa = scree_test_dalloc(ctx, n * ew + off * ew);
  const scree_devptr ba = scree_test_dalloc(ctx, n * ew + off * ew);
  const scree_devptr ya = k->in_place ? 0 : scree_test_dalloc(ctx, ny * ey + off * ey + GUARD);
  const scree_devptr dy = k->in_place ? dx : ya + off * ey;
  const scree_devptr ma = scree_test_dalloc(ctx, rows * 4 + GUARD);
  const scree_devptr ra = scree_test_dalloc(ctx, rows * 4 + GUARD);
  scree_test_dpoison(ctx, dx + nx * ex, GUARD);
  scree_test_h2d(ctx, dx, hx, nx * ex);
  scree_test_h2d(ctx, wa + off * ew, hw, n * ew);
  scree_test_h2d(ctx, ba + off * ew, hb, n * ew);
  if (!k->in_place) scree_test_dpoison(ctx, dy, ny * ey + GUARD);
  scree_test_dpoison(ctx, ma, rows * 4 + GUARD);
  scree_test_dpoison(ctx, ra, rows * 4 + GUARD);

  scree_layernorm_args a = {.x = dx, .w = wa + off * ew, .b = k->bias ? ba + off * ew : 0,
                            .y = dy, .mean = k->stats ? ma : 0, .rstd = k->stats ? ra : 0,
                            .rows = k->rows, .cols = k->cols, .x_stride = k->xs,
                            .y_stride = k->ys, .x_dtype = d.x, .w_dtype = d.w,
                            .y_dtype = d.y, .eps = 1e-5f};
  /* The reference: the poison (NaN) in the padding, or in place x's. */
  if (k->in_place)
    memcpy(href, hx, ny * ey);
  else
    memset(href, 0xff, ny * ey);
  void *host[6];
  int nh = 0;
  host[nh++] = hx;
  host[nh++] = hw;
  if (k->bias) host[nh++] = hb;
  host[nh++] = href;
  if (k->stats) host[nh++] = rm, host[nh++] = rr;
  scree__ref_layernorm(&a, host);

  char cs[128] = "default";
  scree_status st;
  if (cfg) {
    const scree__variant var = {{d.x, d.w, d.y}};
    scree__config_str(op, cfg, cs, sizeof cs);
    st = scree__run_exact(ctx, op, cfg, &var, &a, NULL);
  } else {
    st = scree_layernorm(ctx, &a, NULL);
  }
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  char what[320];
  snprintf(what, sizeof what,
           "rows=%lld cols=%lld xs=%lld ys=%lld off=%d bias=%d stats=%d inplace=%d x=%s w=%s "
           "y=%s config %s",
           (long long)k->rows, (long long)k->cols, (long long)k->xs, (long long)k->ys, k->off,
           k->bias, k->stats, k->in_place, scree_dtype_name(d.x), scree_dtype_name(d.w),
           scree_dtype_name(d.y), cs);

  scree_test_d2h(ctx, hy, dy, ny * ey);
  scree_test_check_guard(ctx, dy + ny * ey, GUARD, "y");
  double rtol, atol;
  scree__tolerance(d.y, &rtol, &atol);
  scree_test_compare_rows(hy, href, d.y, k->rows, k->cols, k->ys, rtol, atol, "y", "%s", what);

  /* mean and rstd: fp32's tolerance where asked for (mean's atol relative
   * to the rows' spread, as the check problem's), untouched where not. */
  scree__tolerance(SCREE_DTYPE_FP32, &rtol, &atol);
  const scree_devptr sp[2] = {ma, ra};
  float *got[2] = {hm, hr}, *want[2] = {rm, rr};
  static const char *const names[2] = {"mean", "rstd"};
  for (int s = 0; s < 2; s++) {
    scree_test_check_guard(ctx, sp[s] + rows * 4, GUARD, names[s]);
    scree_test_d2h(ctx, got[s], sp[s], rows * 4);
    if (k->stats) {
      size_t worst = 0;
      const size_t bad = scree__compare(got[s], want[s], SCREE_DTYPE_FP32, rows, rtol,
                                        s == 0 ? SCREE__LAYERNORM_MEAN_ATOL : atol, &worst);
      ck_assert_msg(bad == 0, "%s: %s: %zu bad, e.g. [%zu] got %.8g want %.8g", what, names[s],
                    bad, worst, (double)got[s][worst], (double)want[s][worst]);
    } else {
      for (size_t i = 0; i < rows * 4; i++)
        ck_assert_msg(((unsigned char *)got[s])[i] == 0xff, "%s: %s written though not given",
                      what, names[s]);
    }
  }
  scree_test_dfree(ctx, xa);
  scree_test_dfree(ctx, wa);
  scree_test_dfree(ctx, ba);
  if (ya) scree_test_dfree(ctx, ya);
  scree_test_dfree(ctx, ma);
  scree_test_dfree(ctx, ra);
  free(hx), free(hw), free(hb), free(hy), free(href), free(hm), free(hr), free(rm), free(rr);
}

/* The public path (default config, adapted to the call) over edge shapes,
 * with bias and statistics. */
static const int64_t shapes[][5] = {
    /* rows, cols, x_stride, y_stride, misaligned by */
    {1, 1, 1, 1, 0},           {7, 1, 1, 1, 0},           {1, 4095, 4095, 4095, 0},
    {33, 4095, 4095, 4095, 0}, {5, 4097, 4104, 4100, 0},  {3, 65536, 65536, 65536, 0},
    {1, 65536, 65536, 65536, 0}, {2, 65535, 65535, 65535, 0}, {1000, 129, 129, 129, 0},
    {257, 4096, 4096, 4096, 0}, {64, 8192, 8192, 8192, 0}, {9, 100, 120, 104, 0},
    {17, 4096, 4096, 4096, 1}, {17, 4096, 4096, 4096, 2}, {6, 1000, 1003, 1001, 1},
    {300000, 256, 256, 256, 0}, /* a large T */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(default_path_shapes) {
  const int64_t *s = shapes[_i / NSETS];
  const lcase k = {s[0], s[1], s[2], s[3], (int)s[4], 1, 1, 0};
  run_case(&k, dtype_sets[_i % NSETS], NULL);
}
END_TEST

/* Bias and statistics each on and off, on a cached row and on one past
 * the default's cache (65536 fp32: part of it streamed). */
START_TEST(bias_and_stats_optional) {
  const dt3 d = dtype_sets[_i % NSETS];
  const int bias = (_i / NSETS) % 2, stats = (_i / NSETS) / 2;
  const lcase ks[] = {{37, 4096, 4096, 4096, 0, bias, stats, 0},
                      {3, 65536, 65536, 65536, 0, bias, stats, 0},
                      {11, 77, 77, 77, 1, bias, stats, 0}};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) run_case(&ks[i], d, NULL);
}
END_TEST

START_TEST(in_place) {
  /* In place needs x and y of one element size (the API refuses others). */
  const dt3 d = dtype_sets[_i];
  if (scree_dtype_size(d.x) != scree_dtype_size(d.y)) return;
  const lcase ks[] = {{37, 4096, 4096, 4096, 0, 1, 1, 1},
                      {11, 1001, 1003, 1003, 0, 0, 1, 1},
                      {5, 65536, 65536, 65536, 1, 1, 0, 1}};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) run_case(&ks[i], d, NULL);
}
END_TEST

START_TEST(zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_layernorm_args a = {.rows = 0, .cols = 128, .eps = 1e-5f};
  ck_assert_int_eq(scree_layernorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* Every variant, through the harness: the op's check problem (bias, mean
 * and rstd, shape_inputs' rows, the stated tolerances) and the public
 * entry, on three row lengths. */
START_TEST(every_variant_check_problem) {
  const scree__variant var = {{_i / 9, (_i / 3) % 3, _i % 3}};
  static const int64_t cols[] = {4096, 1000, 7};
  for (size_t i = 0; i < 3; i++) {
    scree_layernorm_args a = {.rows = 97, .cols = cols[i]};
    scree_test_check_public(ctx, op, &var, &a, NULL, stream, "cols=%lld", (long long)cols[i]);
  }
}
END_TEST

/* Every config of the space, not only the default: a row just short of the
 * register cache (a scalar tail), one past it (the streamed part), and a
 * tiny row. Compiles run on threads first. */
START_TEST(every_config) {
  const dt3 d = dtype_sets[_i];
  const scree__variant var = {{d.x, d.w, d.y}};
  size_t n;
  scree__config *cfgs = scree_test_checked_space(ctx, op, &var, &n);
  for (size_t i = 0; i < n; i++) {
    const scree__config *c = &cfgs[i];
    const int64_t cover = (int64_t)c->v[0] * c->v[2] * c->v[3];
    const lcase ks[] = {{c->v[1] * 3 + 1, cover - 1, cover, cover, 0, 1, 1, 0},
                        {5, 2 * cover + 3, 2 * cover + 8, 2 * cover + 8, 0, 0, 1, 0},
                        {2, 1, 8, 8, 0, 1, 0, 0}};
    for (size_t s = 0; s < 3; s++) run_case(&ks[s], d, c);
  }
  printf("every_config %s/%s/%s: %zu configs x 3 shapes passed\n", scree_dtype_name(d.x),
         scree_dtype_name(d.w), scree_dtype_name(d.y), n);
  free(cfgs);
}
END_TEST

/* A fixed list of configs across the space (every TPR, ROWS, VEC and
 * CACHE value) on every dtype set, mixed ones included, on shapes that
 * pass the tuner's worth_timing: the whole row cached with a tail, and
 * part of it streamed. */
static const char *const fixed[] = {
    "tpr=8,rows=16,vec=8,cache=1",   "tpr=16,rows=2,vec=8,cache=8",
    "tpr=32,rows=4,vec=4,cache=4",   "tpr=64,rows=1,vec=4,cache=4",
    "tpr=128,rows=1,vec=8,cache=4",  "tpr=128,rows=8,vec=2,cache=16",
    "tpr=256,rows=1,vec=1,cache=16", "tpr=512,rows=2,vec=8,cache=2",
    "tpr=1024,rows=1,vec=8,cache=8", "tpr=1024,rows=1,vec=4,cache=4",
};

START_TEST(fixed_configs) {
  const dt3 d = dtype_sets[_i];
  const scree__variant var = {{d.x, d.w, d.y}};
  int ran = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    const scree__config c = scree_test_config(ctx, op, fixed[i], &var);
    const int64_t cover = (int64_t)c.v[0] * c.v[2] * c.v[3];
    const int64_t cols[2] = {cover - 1, cover + cover / 2 + c.v[2]};
    for (int s = 0; s < 2; s++) {
      const int64_t stride = (cols[s] + 7) / 8 * 8;
      scree_layernorm_args a = {.rows = c.v[1] * 3 + 1, .cols = cols[s]};
      ck_assert_msg(op->impls[0].worth_timing(&c, &var, &a), "%s cols=%lld: not worth timing",
                    fixed[i], (long long)cols[s]);
      const lcase k = {c.v[1] * 3 + 1, cols[s], stride, stride, 0, s == 0, 1, 0};
      run_case(&k, d, &c);
      ran++;
    }
  }
  printf("fixed_configs %s/%s/%s: %d runs\n", scree_dtype_name(d.x), scree_dtype_name(d.w),
         scree_dtype_name(d.y), ran);
}
END_TEST

/* Every config the device's safelist allows runs on its own variant for
 * dtype-specific lines, else on the example variant, on the op's check
 * problem, adapted to its alignment: rows just inside the config's
 * register cache (at most 65536), and rows of 1000. */
static int safelisted_shape(const scree__config *c, int i, void *args) {
  const int64_t cover = (int64_t)c->v[0] * c->v[2] * c->v[3];
  const int64_t cols = i ? 1000 : cover - 1 < 65536 ? cover - 1 : 65536;
  *(scree_layernorm_args *)args = (scree_layernorm_args){.rows = 97, .cols = cols > 0 ? cols : 1};
  return i < 2;
}

START_TEST(every_safelisted_config) {
  const int ran = scree_test_check_safelisted(ctx, op, stream, safelisted_shape);
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

static void setup(void) {
  op = scree_test_op_setup("layernorm", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "layernorm_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_rows_launches_nothing),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NSETS},
                                     {bias_and_stats_optional, 4 * NSETS}, {in_place, NSETS},
                                     {every_variant_check_problem, 27}),
                .slow_tests = SCREE_TESTS(every_safelisted_config),
                .slow_loops = SCREE_LOOPS({every_config, 3}, {fixed_configs, NSETS}))
