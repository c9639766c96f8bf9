/* test_add_rmsnorm_gpu.c - the residual add fused with RMSNorm on the GPU
 * against the CPU reference. Label gpu: skipped (exit 77) with a one-line
 * reason where there is none.
 *
 * Random inputs, fresh each run (the seed is printed), shaped by the op's
 * shape_inputs (rows of different scale in x and in the residual, large
 * tails); h (out of place) and y poisoned with NaN before each launch so an
 * unwritten element fails, and a guard region after each written buffer
 * checked untouched. Tolerances (ops/add_rmsnorm.c): h one rounding of x's
 * dtype, y one rounding of y's dtype (scree__tolerance).
 *
 * Covered: edge shapes (cols 1, odd, 65535, 65536, one row, many rows,
 * strides past cols, each buffer its own stride), starts misaligned by 1
 * or 2 elements (the call falls back to narrower vectors), both in-place
 * forms (h on x, h on residual), every variant through the harness' check
 * problem, every config of the space on three variants, a fixed list of
 * configs on mixed variants, and every config the device's safelist
 * allows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"

SCREE__REFERENCE(add_rmsnorm);

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

enum { OUT_OF_PLACE, H_ON_X, H_ON_RESIDUAL };

typedef struct acase {
  int64_t rows, cols, xs, rs, hs, ys; /* in place: hs must equal xs (rs) */
  int off;                            /* every pointer this many elements past an aligned start */
  int place;                          /* OUT_OF_PLACE, H_ON_X, H_ON_RESIDUAL */
} acase;

#define GUARD 256

/* Rows of `got` against `want` within one rounding of the dtype. */
static void compare_rows(const void *got, const void *want, scree_dtype d, int64_t rows,
                         int64_t cols, int64_t s, const char *name, const char *what) {
  double rtol, atol;
  scree__tolerance(d, &rtol, &atol);
  scree_test_compare_rows(got, want, d, rows, cols, s, rtol, atol, name, "%s", what);
}

/* Runs one call (the public entry, or an explicit config through
 * scree__run_exact) and checks every element of h and y, and the guards. */
static void run_case(const acase *k, dt3 d, const scree__config *cfg) {
  const size_t ex = scree_dtype_size(d.x), ew = scree_dtype_size(d.w),
               ey = scree_dtype_size(d.y), off = (size_t)k->off, n = (size_t)k->cols;
  const size_t nx = (size_t)(k->rows * k->xs), nr = (size_t)(k->rows * k->rs),
               nh = (size_t)(k->rows * k->hs), ny = (size_t)(k->rows * k->ys);
  void *hx = malloc(nx * ex + 16), *hres = malloc(nr * ex + 16), *hw = malloc(n * ew + 16);
  void *hh = malloc(nh * ex + 16), *hy = malloc(ny * ey + 16);
  void *rh = malloc(nh * ex + 16), *ry = malloc(ny * ey + 16);
  /* rstd, the optional fp32 output for the backward: written when rows is
   * odd, poisoned before. */
  const int want_rstd = (int)(k->rows & 1);
  const size_t nrs = (size_t)k->rows * 4;
  float *hrs = malloc(nrs + 16), *rrs = malloc(nrs + 16);
  const scree_devptr drs = scree_test_dalloc(ctx, nrs + GUARD);
  scree_test_dpoison(ctx, drs, nrs + GUARD);
  scree_test_fill(hx, d.x, nx, 1.0);
  scree_test_fill(hres, d.x, nr, 1.0);
  scree_test_fill(hw, d.w, n, 1.0);
  scree_add_rmsnorm_args shape = {.rows = k->rows, .cols = k->cols, .x_stride = k->xs,
                                  .residual_stride = k->rs, .x_dtype = d.x};
  op->shape_inputs(&shape, (void *const[]){hx, hres});

  const scree_devptr xa = scree_test_dalloc(ctx, nx * ex + off * ex + GUARD);
  const scree_devptr ra = scree_test_dalloc(ctx, nr * ex + off * ex + GUARD);
  const scree_devptr wa = scree_test_dalloc(ctx, n * ew + off * ew);
  const scree_devptr ha =
      k->place == OUT_OF_PLACE ? scree_test_dalloc(ctx, nh * ex + off * ex + GUARD) : 0;
  const scree_devptr ya = scree_test_dalloc(ctx, ny * ey + off * ey + GUARD);
  const scree_devptr dx = xa + off * ex, dr = ra + off * ex, dw = wa + off * ew;
  const scree_devptr dh = k->place == H_ON_X ? dx : k->place == H_ON_RESIDUAL ? dr : ha + off * ex;
  const scree_devptr dy = ya + off * ey;
  scree_test_dpoison(ctx, dx + nx * ex, GUARD);
  scree_test_dpoison(ctx, dr + nr * ex, GUARD);
  scree_test_h2d(ctx, dx, hx, nx * ex);
  scree_test_h2d(ctx, dr, hres, nr * ex);
  scree_test_h2d(ctx, dw, hw, n * ew);
  if (k->place == OUT_OF_PLACE) scree_test_dpoison(ctx, dh, nh * ex + GUARD);
  scree_test_dpoison(ctx, dy, ny * ey + GUARD);

  scree_add_rmsnorm_args a = {.x = dx, .residual = dr, .w = dw, .h = dh, .y = dy,
                              .rows = k->rows, .cols = k->cols, .x_stride = k->xs,
                              .residual_stride = k->rs, .h_stride = k->hs, .y_stride = k->ys,
                              .x_dtype = d.x, .w_dtype = d.w, .y_dtype = d.y, .eps = 1e-6f,
                              .rstd = want_rstd ? drs : 0};
  /* The reference's h starts as what the device's holds before the call:
   * poison out of place, x's or residual's values in place (the padding
   * keeps them). */
  if (k->place == H_ON_X)
    memcpy(rh, hx, nh * ex);
  else if (k->place == H_ON_RESIDUAL)
    memcpy(rh, hres, nh * ex);
  else
    memset(rh, 0xff, nh * ex);
  memset(ry, 0xff, ny * ey);
  scree__ref_add_rmsnorm(&a, (void *const[]){hx, hres, hw, rh, ry, rrs});

  char cs[128] = "default";
  scree_status st;
  if (cfg) {
    const scree__variant var = {{d.x, d.w, d.y}};
    scree__config_str(op, cfg, cs, sizeof cs);
    st = scree__run_exact(ctx, op, cfg, &var, &a, NULL);
  } else {
    st = scree_add_rmsnorm(ctx, &a, NULL);
  }
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  static const char *const places[3] = {"out of place", "h on x", "h on residual"};
  char what[320];
  snprintf(what, sizeof what,
           "rows=%lld cols=%lld xs=%lld rs=%lld hs=%lld ys=%lld off=%d %s x=%s w=%s y=%s "
           "config %s",
           (long long)k->rows, (long long)k->cols, (long long)k->xs, (long long)k->rs,
           (long long)k->hs, (long long)k->ys, k->off, places[k->place], scree_dtype_name(d.x),
           scree_dtype_name(d.w), scree_dtype_name(d.y), cs);

  scree_test_d2h(ctx, hh, dh, nh * ex);
  scree_test_d2h(ctx, hy, dy, ny * ey);
  scree_test_check_guard(ctx, dh + nh * ex, GUARD, "h");
  scree_test_check_guard(ctx, dy + ny * ey, GUARD, "y");
  /* The inputs h does not replace stay as they were. */
  if (k->place != H_ON_X) {
    void *back = malloc(nx * ex + 16);
    scree_test_d2h(ctx, back, dx, nx * ex);
    ck_assert_msg(!memcmp(back, hx, nx * ex), "%s: x was written", what);
    scree_test_check_guard(ctx, dx + nx * ex, GUARD, "x");
    free(back);
  }
  if (k->place != H_ON_RESIDUAL) {
    void *back = malloc(nr * ex + 16);
    scree_test_d2h(ctx, back, dr, nr * ex);
    ck_assert_msg(!memcmp(back, hres, nr * ex), "%s: residual was written", what);
    scree_test_check_guard(ctx, dr + nr * ex, GUARD, "residual");
    free(back);
  }
  compare_rows(hh, rh, d.x, k->rows, k->cols, k->hs, "h", what);
  compare_rows(hy, ry, d.y, k->rows, k->cols, k->ys, "y", what);
  if (want_rstd) {
    /* fp32's tolerance (rtol 1e-5, atol 1e-6): one fp32 sum of squares. */
    scree_test_d2h(ctx, hrs, drs, nrs);
    scree_test_compare_rows(hrs, rrs, SCREE_DTYPE_FP32, 1, k->rows, k->rows, 1e-5, 1e-6, "rstd",
                            "%s", what);
  }
  scree_test_check_guard(ctx, drs + nrs, GUARD, "rstd");
  scree_test_dfree(ctx, drs);
  free(hrs), free(rrs);

  scree_test_dfree(ctx, xa);
  scree_test_dfree(ctx, ra);
  scree_test_dfree(ctx, wa);
  if (ha) scree_test_dfree(ctx, ha);
  scree_test_dfree(ctx, ya);
  free(hx), free(hres), free(hw), free(hh), free(hy), free(rh), free(ry);
}

/* The public path (default config, adapted to the call) over edge shapes,
 * h out of place. */
static const int64_t shapes[][7] = {
    /* rows, cols, x_stride, residual_stride, h_stride, y_stride, misaligned by */
    {1, 1, 1, 1, 1, 1, 0},
    {7, 1, 1, 1, 1, 1, 0},
    {1, 4095, 4095, 4095, 4095, 4095, 0},
    {33, 4095, 4095, 4095, 4095, 4095, 0},
    {5, 4097, 4104, 4112, 4100, 4098, 0},
    {3, 65536, 65536, 65536, 65536, 65536, 0},
    {1, 65536, 65536, 65536, 65536, 65536, 0},
    {2, 65535, 65535, 65535, 65535, 65535, 0},
    {1000, 129, 129, 129, 129, 129, 0},
    {257, 4096, 4096, 4096, 4096, 4096, 0},
    {64, 8192, 8192, 8192, 8192, 8192, 0},
    {9, 100, 120, 104, 112, 128, 0},
    {17, 4096, 4096, 4096, 4096, 4096, 1},
    {17, 4096, 4096, 4096, 4096, 4096, 2},
    {6, 1000, 1003, 1001, 1000, 1005, 1},
    {300000, 256, 256, 256, 256, 256, 0}, /* a large T */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(default_path_shapes) {
  const int64_t *s = shapes[_i / NSETS];
  const acase k = {s[0], s[1], s[2], s[3], s[4], s[5], (int)s[6], OUT_OF_PLACE};
  run_case(&k, dtype_sets[_i % NSETS], NULL);
}
END_TEST

/* Both in-place forms: h on x, h on residual (same stride), on a cached
 * row, one past the default's cache, odd strides and a misaligned start. */
START_TEST(in_place) {
  const dt3 d = dtype_sets[_i % NSETS];
  const int place = _i / NSETS ? H_ON_RESIDUAL : H_ON_X;
  const int64_t rows[] = {37, 3, 11, 17}, cols[] = {4096, 65536, 1001, 4096},
                st[] = {4096, 65536, 1003, 4104}, offs[] = {0, 0, 0, 1};
  for (int i = 0; i < 4; i++) {
    /* The buffer h replaces has h's stride; the other its own. */
    const int64_t other = st[i] + 8;
    const acase k = {rows[i], cols[i], place == H_ON_X ? st[i] : other,
                     place == H_ON_RESIDUAL ? st[i] : other, st[i], cols[i], (int)offs[i],
                     place};
    run_case(&k, d, NULL);
  }
}
END_TEST

START_TEST(zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_add_rmsnorm_args a = {.rows = 0, .cols = 128, .eps = 1e-6f};
  ck_assert_int_eq(scree_add_rmsnorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* Every variant, through the harness: the op's check problem (shape_inputs'
 * rows, the stated tolerances) and the public entry, on three row lengths. */
START_TEST(every_variant_check_problem) {
  const scree__variant var = {{_i / 9, (_i / 3) % 3, _i % 3}};
  static const int64_t cols[] = {4096, 1000, 7};
  for (size_t i = 0; i < 3; i++) {
    scree_add_rmsnorm_args a = {.rows = 97, .cols = cols[i]};
    scree_test_check_public(ctx, op, &var, &a, NULL, stream, "cols=%lld", (long long)cols[i]);
  }
}
END_TEST

/* Every config of the space, not only the default: a row just short of the
 * register cache (a scalar tail), one past it (the streamed part, read
 * back from h), a tiny row; out of place and h on x. Compiles run on
 * threads first. */
START_TEST(every_config) {
  const dt3 d = dtype_sets[_i];
  const scree__variant var = {{d.x, d.w, d.y}};
  size_t n;
  scree__config *cfgs = scree_test_checked_space(ctx, op, &var, &n);
  for (size_t i = 0; i < n; i++) {
    const scree__config *c = &cfgs[i];
    const int64_t cv = (int64_t)c->v[0] * c->v[2] * c->v[3], s2 = 2 * cv + 8;
    const acase ks[] = {{c->v[1] * 3 + 1, cv - 1, cv, cv, cv, cv, 0, OUT_OF_PLACE},
                        {5, 2 * cv + 3, s2, s2 + 8, s2, s2 + 16, 0, H_ON_X},
                        {2, 1, 8, 8, 8, 8, 0, OUT_OF_PLACE}};
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
 * part of it streamed, with h on residual. */
static const char *const fixed[] = {
    "tpr=8,rows=16,vec=8,cache=1",   "tpr=16,rows=2,vec=8,cache=8",
    "tpr=32,rows=4,vec=4,cache=4",   "tpr=64,rows=1,vec=4,cache=4",
    "tpr=128,rows=1,vec=8,cache=4",  "tpr=128,rows=8,vec=2,cache=16",
    "tpr=256,rows=1,vec=1,cache=16", "tpr=512,rows=2,vec=8,cache=2",
    "tpr=1024,rows=1,vec=8,cache=4", "tpr=1024,rows=1,vec=4,cache=4",
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
      const int64_t st = (cols[s] + 7) / 8 * 8;
      scree_add_rmsnorm_args a = {.rows = c.v[1] * 3 + 1, .cols = cols[s]};
      ck_assert_msg(op->impls[0].worth_timing(&c, &var, &a), "%s cols=%lld: not worth timing",
                    fixed[i], (long long)cols[s]);
      const acase k = {c.v[1] * 3 + 1, cols[s], st + 8, st, st, st + 16, 0,
                       s ? H_ON_RESIDUAL : OUT_OF_PLACE};
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
  *(scree_add_rmsnorm_args *)args = (scree_add_rmsnorm_args){.rows = 97, .cols = cols > 0 ? cols : 1};
  return i < 2;
}

START_TEST(every_safelisted_config) {
  const int ran = scree_test_check_safelisted(ctx, op, stream, safelisted_shape);
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

static void setup(void) {
  op = scree_test_op_setup("add_rmsnorm", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "add_rmsnorm_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_rows_launches_nothing),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NSETS}, {in_place, 2 * NSETS},
                                     {every_variant_check_problem, 27}),
                .slow_tests = SCREE_TESTS(every_safelisted_config),
                .slow_loops = SCREE_LOOPS({every_config, 3}, {fixed_configs, NSETS}))
