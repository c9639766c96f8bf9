/* test_rmsnorm_gpu.c - RMSNorm on the GPU against the CPU reference.
 * Label gpu: skipped (exit 77) with a one-line reason where there is none.
 * Random inputs, fresh each run (the seed is printed); outputs poisoned with
 * NaN before each launch so an unwritten element fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "op_test.h"

SCREE__REFERENCE(rmsnorm);

static scree_context *ctx;
static const scree__op *op;

typedef struct dt3 {
  scree_dtype x, w, y;
} dt3;

static const dt3 dtype_sets[] = {
    {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16},
    {SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32},
    {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16},
    {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32},
};
#define NSETS (sizeof dtype_sets / sizeof dtype_sets[0])

/* Runs one call (with an explicit config if cfg != NULL) and checks every
 * element, padding between rows included (it must stay untouched). */
static void run_case(int64_t rows, int64_t cols, int64_t xs, int64_t ys, dt3 d,
                     int in_place, const scree__config *cfg) {
  const size_t ex = scree_dtype_size(d.x), ew = scree_dtype_size(d.w),
               ey = scree_dtype_size(d.y);
  const size_t nx = (size_t)(rows * xs), ny = (size_t)(rows * ys);
  void *hx = malloc(nx * ex + 16), *hw = malloc((size_t)cols * ew + 16);
  void *hy = malloc(ny * ey + 16), *href = malloc(ny * ey + 16);
  /* rstd, the optional fp32 output for the backward: written on every
   * other call (rows odd), poisoned before. */
  const int want_rstd = (int)(rows & 1);
  float *hrs = malloc((size_t)rows * 4 + 16), *hrs_ref = malloc((size_t)rows * 4 + 16);
  scree_devptr drs = scree_test_dalloc(ctx, (size_t)rows * 4 + 16);
  scree_test_dpoison(ctx, drs, (size_t)rows * 4 + 16);
  scree_test_fill(hx, d.x, nx, 1.5);
  scree_test_fill(hw, d.w, (size_t)cols, 1.0);
  /* Rows of different scale, large tails: mistakes show (rmsnorm.c). */
  scree_rmsnorm_args shape = {.rows = rows, .cols = cols, .x_stride = xs, .x_dtype = d.x};
  void *hbufs[1] = {hx};
  op->shape_inputs(&shape, hbufs);
  /* A guard region after y (and x, in place): a write past the last row
   * would change it. */
  const size_t guard = 256;
  scree_devptr dx = scree_test_dalloc(ctx, nx * ex + (in_place ? guard : 0));
  scree_devptr dw = scree_test_dalloc(ctx, (size_t)cols * ew);
  scree_devptr dy = in_place ? dx : scree_test_dalloc(ctx, ny * ey + guard);
  scree_test_dpoison(ctx, dy + ny * ey, guard);
  scree_test_h2d(ctx, dx, hx, nx * ex);
  scree_test_h2d(ctx, dw, hw, (size_t)cols * ew);
  /* Reference output: the poison (NaN) in the padding, the reference in
   * the rows. In place, the padding keeps x's values. */
  if (in_place)
    memcpy(href, hx, ny * ey);
  else
    memset(href, 0xff, ny * ey);
  scree_rmsnorm_args a = {.x = dx, .w = dw, .y = dy, .rows = rows, .cols = cols,
                          .x_stride = xs, .y_stride = ys, .x_dtype = d.x,
                          .w_dtype = d.w, .y_dtype = d.y, .eps = 1e-6f,
                          .rstd = want_rstd ? drs : 0};
  scree__ref_rmsnorm(&a, (void *const[]){(void *)(hx), (void *)(hw), href, hrs_ref});
  if (!in_place) scree_test_dpoison(ctx, dy, ny * ey);
  scree_status st;
  if (cfg) {
    const scree__variant var = {{d.x, d.w, d.y}};
    st = scree__run_exact(ctx, op, cfg, &var, &a, NULL);
  } else {
    st = scree_rmsnorm(ctx, &a, NULL);
  }
  char cs[128] = "default";
  if (cfg) scree__config_str(op, cfg, cs, sizeof cs);
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, hy, dy, ny * ey);
  scree_test_check_guard(ctx, dy + ny * ey, guard, "y");
  if (want_rstd) {
    /* fp32's tolerance (rtol 1e-5, atol 1e-6): one fp32 sum of squares. */
    scree_test_d2h(ctx, hrs, drs, (size_t)rows * 4);
    scree_test_compare_rows(hrs, hrs_ref, SCREE_DTYPE_FP32, 1, rows, rows, 1e-5, 1e-6, "rstd",
                            "rows=%lld cols=%lld", (long long)rows, (long long)cols);
  }
  scree_test_check_guard(ctx, drs + (size_t)rows * 4, 16, "rstd");
  double rtol, atol;
  scree__tolerance(d.y, &rtol, &atol);
  scree_test_compare_rows(hy, href, d.y, rows, cols, ys, rtol, atol, "y",
                          "rows=%lld cols=%lld xs=%lld ys=%lld x=%s w=%s y=%s inplace=%d config %s",
                          (long long)rows, (long long)cols, (long long)xs, (long long)ys,
                          scree_dtype_name(d.x), scree_dtype_name(d.w), scree_dtype_name(d.y),
                          in_place, cs);
  scree_test_dfree(ctx, dx);
  scree_test_dfree(ctx, dw);
  if (!in_place) scree_test_dfree(ctx, dy);
  scree_test_dfree(ctx, drs);
  free(hx), free(hw), free(hy), free(href), free(hrs), free(hrs_ref);
}

/* The public path (default config, adapted to the call) over edge shapes. */
static const int64_t shapes[][4] = {
    /* rows, cols, x_stride, y_stride */
    {1, 1, 1, 1},         {7, 1, 1, 1},        {1, 4095, 4095, 4095},
    {33, 4095, 4095, 4095}, {5, 4097, 4104, 4100}, {3, 65536, 65536, 65536},
    {1, 65536, 65536, 65536}, {2, 65535, 65535, 65535}, {1000, 129, 129, 129},
    {257, 4096, 4096, 4096}, {64, 8192, 8192, 8192}, {9, 100, 120, 104},
    {300000, 256, 256, 256}, /* a large T */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(default_path_shapes) {
  const int64_t *s = shapes[_i / NSETS];
  run_case(s[0], s[1], s[2], s[3], dtype_sets[_i % NSETS], 0, NULL);
}
END_TEST

START_TEST(in_place) {
  /* In place needs x and y of one element size (the API refuses others). */
  const dt3 d = dtype_sets[_i];
  if (scree_dtype_size(d.x) != scree_dtype_size(d.y)) return;
  run_case(37, 4096, 4096, 4096, d, 1, NULL);
  run_case(11, 1001, 1003, 1003, d, 1, NULL);
}
END_TEST

START_TEST(zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_rmsnorm_args a = {.rows = 0, .cols = 128, .eps = 1e-6f};
  ck_assert_int_eq(scree_rmsnorm(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* Every config of the space, not only the default: shapes with a remainder
 * beyond the register cache and a scalar tail (cols % vec != 0, strides
 * kept aligned), plus a tiny row. Compiles run on threads first. */
START_TEST(every_config) {
  const dt3 d = dtype_sets[_i];
  const scree__variant var = {{d.x, d.w, d.y}};
  size_t n;
  scree__config *cfgs = scree_test_checked_space(ctx, op, &var, &n);
  for (size_t i = 0; i < n; i++) {
    const scree__config *c = &cfgs[i];
    const int64_t cover = (int64_t)c->v[0] * c->v[2] * c->v[3];
    /* Whole row cached, with a tail; and twice the cache (second pass). */
    run_case(c->v[1] * 3 + 1, cover - 1, cover, cover, d, 0, c);
    run_case(5, 2 * cover + 3, 2 * cover + 8, 2 * cover + 8, d, 0, c);
    run_case(2, 1, 8, 8, d, 0, c);
  }
  printf("every_config %s/%s/%s: %zu configs x 3 shapes passed\n",
         scree_dtype_name(d.x), scree_dtype_name(d.w), scree_dtype_name(d.y), n);
  free(cfgs);
}
END_TEST

static void setup(void) {
  ctx = scree_test_gpu_context(); /* exits 77 with a reason where there is no GPU */
  op = scree__op_find("rmsnorm");
}

SCREE_TEST_MAIN(.name = "rmsnorm_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_rows_launches_nothing),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NSETS}, {in_place, NSETS}),
                .slow_loops = SCREE_LOOPS({every_config, 3}))
