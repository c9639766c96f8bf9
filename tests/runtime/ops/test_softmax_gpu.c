/* test_softmax_gpu.c - softmax on the GPU against the CPU reference.
 * Label gpu: skipped (exit 77) with a one-line reason where there is none.
 *
 * Random inputs, fresh each run (the seed is printed), reshaped by the op's
 * shape_inputs (rows of different spread, large tails); y poisoned with NaN
 * before each launch so an unwritten element fails, the padding between
 * rows and a guard region after the last row checked untouched. Tolerance:
 * one rounding to y's dtype (scree__tolerance: fp32 1e-6 + 1e-5 |ref|, fp16
 * 1e-5 + 2e-3 |ref|, bf16 1e-5 + 1.6e-2 |ref|).
 *
 * Shapes: cols 1, odd, around the register cache, past it (the streaming
 * entry), the largest (262144); rows 1 to 300000; padded and odd strides;
 * starts misaligned for 16-byte vectors (the call narrows its vectors); in
 * place; scales 0 (1), fractional, negative. Configs: the default through
 * the public entry, every config the device's safelist allows, and a fixed
 * spread of the space through scree__run_exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/rowwise.h"

SCREE__REFERENCE(softmax);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

typedef struct dt2 {
  scree_dtype x, y;
} dt2;

static const dt2 dtype_sets[] = {
    {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}, {SCREE_DTYPE_BF16, SCREE_DTYPE_BF16},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP32}, {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16},
};
#define NSETS (sizeof dtype_sets / sizeof dtype_sets[0])

/* One call (with an explicit config if cfg != NULL) checked element by
 * element; the padding between rows and a guard after the last row must
 * stay untouched. off shifts x and y by that many elements from an aligned
 * start (narrower vectors; only for the public path, which adapts). */
static void run_case(int64_t rows, int64_t cols, int64_t xs, int64_t ys, dt2 d, float scale,
                     int in_place, int off, const scree__config *cfg) {
  const size_t ex = scree_dtype_size(d.x), ey = scree_dtype_size(d.y);
  const size_t nx = (size_t)(rows * xs), ny = (size_t)(rows * ys);
  void *hx = malloc(nx * ex + 16), *hy = malloc(ny * ey + 16), *href = malloc(ny * ey + 16);
  scree_test_fill(hx, d.x, nx, 1.0);
  scree_softmax_args shape = {.rows = rows, .cols = cols, .x_stride = xs, .x_dtype = d.x};
  void *hbufs[2] = {hx, NULL};
  op->shape_inputs(&shape, hbufs);
  const size_t guard = 256;
  scree_devptr bx = scree_test_dalloc(ctx, (nx + (size_t)off) * ex + guard);
  scree_devptr by = in_place ? 0 : scree_test_dalloc(ctx, (ny + (size_t)off) * ey + guard);
  const scree_devptr dx = bx + (size_t)off * ex;
  const scree_devptr dy = in_place ? dx : by + (size_t)off * ey;
  scree_test_dpoison(ctx, dy + ny * ey, guard);
  scree_test_h2d(ctx, dx, hx, nx * ex);
  /* The expected bytes: the reference in the rows; in the padding, NaN
   * (poison), or x's own values in place. */
  if (in_place)
    memcpy(href, hx, ny * ey);
  else
    memset(href, 0xff, ny * ey);
  scree_softmax_args a = {.x = dx, .y = dy, .rows = rows, .cols = cols, .x_stride = xs,
                          .y_stride = ys, .x_dtype = d.x, .y_dtype = d.y, .scale = scale};
  scree__ref_softmax(&a, (void *const[]){hx, href});
  if (!in_place) scree_test_dpoison(ctx, dy, ny * ey);
  scree_status st;
  if (cfg) {
    const scree__variant var = {{d.x, d.y}};
    st = scree__run_exact(ctx, op, cfg, &var, &a, NULL);
  } else {
    st = scree_softmax(ctx, &a, NULL);
  }
  char cs[128] = "default";
  if (cfg) scree__config_str(op, cfg, cs, sizeof cs);
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, hy, dy, ny * ey);
  scree_test_check_guard(ctx, dy + ny * ey, guard, "y");
  double rtol, atol;
  scree__tolerance(d.y, &rtol, &atol);
  scree_test_compare_rows(
      hy, href, d.y, rows, cols, ys, rtol, atol, "y",
      "rows=%lld cols=%lld xs=%lld ys=%lld x=%s y=%s scale=%g inplace=%d off=%d config %s",
      (long long)rows, (long long)cols, (long long)xs, (long long)ys, scree_dtype_name(d.x),
      scree_dtype_name(d.y), (double)scale, in_place, off, cs);
  scree_test_dfree(ctx, bx);
  if (!in_place) scree_test_dfree(ctx, by);
  free(hx), free(hy), free(href);
}

/* The public path (default config, adapted to the call) over edge shapes. */
static const int64_t shapes[][4] = {
    /* rows, cols, x_stride, y_stride */
    {1, 1, 1, 1},           {7, 1, 1, 1},           {1, 4095, 4095, 4095},
    {33, 4095, 4095, 4095}, {5, 4097, 4104, 4100},  {1000, 129, 129, 129},
    {257, 4096, 4096, 4096}, {64, 8192, 8192, 8192}, {9, 100, 120, 104},
    {3, 32000, 32000, 32000}, {2, 32768, 32768, 32768}, {3, 65536, 65536, 65536},
    {2, 65537, 65544, 65544}, {2, 131072, 131072, 131072}, {3, 262144, 262144, 262144},
    {2, 262143, 262143, 262143}, {300000, 128, 128, 128}, /* a large T */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])
static const float scales[] = {0.f, 0.5f, -1.25f, 3.f};

START_TEST(default_path_shapes) {
  const int64_t *s = shapes[_i / NSETS];
  run_case(s[0], s[1], s[2], s[3], dtype_sets[_i % NSETS], scales[_i % 4], 0, 0, NULL);
}
END_TEST

/* Starts 1, 2 and 3 elements past a 16-byte boundary: the call narrows its
 * vectors (to 1, 2 or 1 element) and must still be right; a row that fits
 * the register cache and one that streams. */
START_TEST(misaligned_starts) {
  const dt2 d = dtype_sets[_i];
  for (int off = 1; off <= 3; off++) {
    run_case(17, 4096, 4096, 4096, d, 0.f, 0, off, NULL);
    run_case(3, 100003, 100003, 100003, d, 0.75f, 0, off, NULL);
  }
}
END_TEST

START_TEST(in_place) {
  /* In place needs x and y of one element size (the API refuses others). */
  const dt2 d = dtype_sets[_i];
  if (scree_dtype_size(d.x) != scree_dtype_size(d.y)) return;
  run_case(37, 4096, 4096, 4096, d, 0.f, 1, 0, NULL);
  run_case(11, 1001, 1003, 1003, d, -2.f, 1, 0, NULL);
  run_case(3, 200000, 200000, 200000, d, 1.f, 1, 0, NULL); /* streams */
  run_case(5, 777, 777, 777, d, 0.5f, 1, 1, NULL);        /* misaligned */
}
END_TEST

START_TEST(zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_softmax_args a = {.rows = 0, .cols = 128};
  ck_assert_int_eq(scree_softmax(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* Configs run exactly as given: shapes whose strides are multiples of 8
 * (every vector width), a row with a tail that fits the register cache,
 * one that streams past it (a partial last batch and a tail), a row of one
 * element, and a row shorter than one access of the group. */
static void run_config_shapes(const scree__config *c, dt2 d) {
  const int64_t cover = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE];
  const int64_t long_cols = 2 * cover + 3 < 262144 ? 2 * cover + 3 : 262144;
  run_case(c->v[SCREE__RW_ROWS] * 3 + 1, cover - 1, cover, cover, d, 0.75f, 0, 0, c);
  run_case(5, long_cols, (long_cols + 7) / 8 * 8, (long_cols + 7) / 8 * 8, d, -1.f, 0, 0, c);
  run_case(2, 1, 8, 8, d, 0.f, 0, 0, c);
  run_case(3, 5, 8, 8, d, 2.f, 0, 0, c);
  if (scree_dtype_size(d.x) == scree_dtype_size(d.y))
    run_case(4, long_cols, (long_cols + 7) / 8 * 8, (long_cols + 7) / 8 * 8, d, 0.f, 1, 0, c);
}

/* A spread of the launch-shape space (every value of every field), run
 * whatever the safelist says. */
static const char *const fixed_configs[] = {
    "tpr=8,rows=16,vec=8,cache=2",  "tpr=8,rows=4,vec=1,cache=1",
    "tpr=16,rows=4,vec=4,cache=4",  "tpr=32,rows=1,vec=8,cache=8",
    "tpr=64,rows=2,vec=2,cache=16", "tpr=128,rows=1,vec=8,cache=4",
    "tpr=256,rows=2,vec=4,cache=1", "tpr=512,rows=1,vec=8,cache=8",
    "tpr=1024,rows=1,vec=8,cache=2", "tpr=1024,rows=1,vec=1,cache=16",
    "tpr=128,rows=8,vec=4,cache=2",
};
#define NFIXED (sizeof fixed_configs / sizeof fixed_configs[0])

START_TEST(fixed_configs_exact) {
  const dt2 d = dtype_sets[_i];
  const scree__variant var = {{d.x, d.y}};
  for (size_t i = 0; i < NFIXED; i++) {
    const scree__config c = scree_test_config(ctx, op, fixed_configs[i], &var);
    /* A config the tuner would time: on rows just inside its cache. */
    const scree_softmax_args fit = {
        .cols = (int64_t)c.v[SCREE__RW_TPR] * c.v[SCREE__RW_VEC] * c.v[SCREE__RW_CACHE] - 1};
    ck_assert_msg(op->impls[0].worth_timing(&c, &var, &fit), "%s", fixed_configs[i]);
    run_config_shapes(&c, d);
  }
  printf("fixed_configs_exact %s/%s: %zu configs\n", scree_dtype_name(d.x), scree_dtype_name(d.y),
         NFIXED);
}
END_TEST

/* Every config the device's safelist allows: on the generated check
 * problem of two shapes of its variant (or of one tested dtype pair for a
 * "*" line), through the harness (poison, run, compare), and on the edge
 * shapes above. */
START_TEST(every_safelisted_config) {
  int ran = 0, e = -1;
  scree__variant var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &var));) {
    /* A "*" line runs on one dtype pair, taken in turn line by line, so
     * every pair meets many configs (fixed_configs_exact runs every pair on
     * a spread of configs) without compiling each line five times. */
    if (!strcmp(en->dtype, "*")) {
      const size_t k = (size_t)ran % NSETS;
      var = (scree__variant){{dtype_sets[k].x, dtype_sets[k].y}};
    }
    static const int64_t cols[] = {4096, 100003};
    for (int s = 0; s < 2; s++) {
      /* Packed rows (the harness compares every element of y, so no
       * padding between rows), the config adapted to their alignment as
       * the tuner adapts a candidate: 100003 allows scalar accesses only.
       * Strided rows with aligned starts are run_config_shapes' part. */
      scree_softmax_args a = {.rows = 64, .cols = cols[s]};
      scree__config c = en->cfg;
      if (op->impls[c.impl].adapt) op->impls[c.impl].adapt(&c, &var, &a);
      scree__run r;
      scree_test_make(ctx, op, &var, &a, NULL, &r);
      scree_test_check_config(ctx, &r, op, &c, &var, stream, "safelist line %d, cols %lld",
                              en->line, (long long)cols[s]);
      scree__run_free(ctx, &r);
    }
    run_config_shapes(&en->cfg, (dt2){(scree_dtype)var.v[0], (scree_dtype)var.v[1]});
    ran++;
  }
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

static void setup(void) {
  op = scree_test_op_setup("softmax", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "softmax_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_rows_launches_nothing),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NSETS},
                                     {misaligned_starts, NSETS}, {in_place, NSETS}),
                .slow_tests = SCREE_TESTS(every_safelisted_config),
                .slow_loops = SCREE_LOOPS({fixed_configs_exact, NSETS}))
