/* test_softmax_backward_gpu.c - the softmax backward on the GPU against the
 * CPU reference. Label gpu: skipped (exit 77) with a one-line reason where
 * there is none.
 *
 * Random inputs, fresh each run (the seed is printed), reshaped by the op's
 * shape_inputs (y a softmax output of rows of different spread, dy with
 * large tails); dx poisoned with NaN before each launch so an unwritten
 * element fails, the padding between rows and a guard region after the
 * last row checked untouched. Tolerance: 2e-5 max(1, |scale|) absolute
 * in every dtype (scree__softmax_bwd_atol: the row's fp32 dot product errs
 * by a few 1e-7 of its largest terms, which dy - d keeps;
 * ops/softmax_backward.c) plus one rounding to dx's dtype relative
 * (scree__tolerance: fp16 2e-3 |ref|, bf16 1.6e-2 |ref|, fp32 1e-5 |ref|).
 *
 * Shapes: cols 1, odd, around the register cache, past it (the streaming
 * entry), the largest (262144); rows 1 to 300000; padded and odd strides;
 * starts misaligned for 16-byte vectors; in place over dy; scales 0 (1),
 * fractional, negative. Configs: the default through the public entry,
 * every config the device's safelist allows, and a fixed spread of the
 * space through scree__run_exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/rowwise.h"

SCREE__REFERENCE(softmax_backward);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

typedef struct dt2 {
  scree_dtype y, dy;
} dt2;

static const dt2 dtype_sets[] = {
    {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}, {SCREE_DTYPE_BF16, SCREE_DTYPE_BF16},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP32}, {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16},
};
#define NSETS (sizeof dtype_sets / sizeof dtype_sets[0])

/* One call (with an explicit config if cfg != NULL) checked element by
 * element. y and dy have row stride is, dx xs (in place: dx is dy, xs =
 * is). off shifts every pointer by that many elements from an aligned start
 * (narrower vectors; only for the public path, which adapts). */
static void run_case(int64_t rows, int64_t cols, int64_t is, int64_t xs, dt2 d, float scale,
                     int in_place, int off, const scree__config *cfg) {
  if (in_place) xs = is;
  const size_t ey = scree_dtype_size(d.y), eg = scree_dtype_size(d.dy);
  const size_t ni = (size_t)(rows * is), nx = (size_t)(rows * xs);
  void *hy = malloc(ni * ey + 16), *hg = malloc(ni * eg + 16);
  void *hx = malloc(nx * eg + 16), *href = malloc(nx * eg + 16);
  scree_test_fill(hy, d.y, ni, 1.0);
  scree_test_fill(hg, d.dy, ni, 1.0);
  scree_softmax_backward_args shape = {.rows = rows, .cols = cols, .y_stride = is,
                                       .dy_stride = is, .y_dtype = d.y, .dy_dtype = d.dy};
  op->shape_inputs(&shape, (void *const[]){hy, hg, NULL});
  const size_t guard = 256, sh = (size_t)off;
  scree_devptr by = scree_test_dalloc(ctx, (ni + sh) * ey + guard);
  scree_devptr bg = scree_test_dalloc(ctx, (ni + sh) * eg + guard);
  scree_devptr bx = in_place ? 0 : scree_test_dalloc(ctx, (nx + sh) * eg + guard);
  const scree_devptr y = by + sh * ey, dy = bg + sh * eg;
  const scree_devptr dx = in_place ? dy : bx + sh * eg;
  scree_test_dpoison(ctx, dx + nx * eg, guard);
  scree_test_h2d(ctx, y, hy, ni * ey);
  scree_test_h2d(ctx, dy, hg, ni * eg);
  /* The expected bytes: the reference in the rows; in the padding, NaN
   * (poison), or dy's own values in place. */
  if (in_place)
    memcpy(href, hg, nx * eg);
  else
    memset(href, 0xff, nx * eg);
  scree_softmax_backward_args a = {.y = y, .dy = dy, .dx = dx, .rows = rows, .cols = cols,
                                   .y_stride = is, .dy_stride = is, .dx_stride = xs,
                                   .y_dtype = d.y, .dy_dtype = d.dy, .scale = scale};
  scree__ref_softmax_backward(&a, (void *const[]){hy, in_place ? href : hg, href});
  if (!in_place) scree_test_dpoison(ctx, dx, nx * eg);
  scree_status st;
  if (cfg) {
    const scree__variant var = {{d.y, d.dy}};
    st = scree__run_exact(ctx, op, cfg, &var, &a, NULL);
  } else {
    st = scree_softmax_backward(ctx, &a, NULL);
  }
  char cs[128] = "default";
  if (cfg) scree__config_str(op, cfg, cs, sizeof cs);
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, hx, dx, nx * eg);
  scree_test_check_guard(ctx, dx + nx * eg, guard, "dx");
  double rtol, atol;
  scree__tolerance(d.dy, &rtol, &atol);
  atol = scree__softmax_bwd_atol(scale);
  scree_test_compare_rows(
      hx, href, d.dy, rows, cols, xs, rtol, atol, "dx",
      "rows=%lld cols=%lld is=%lld xs=%lld y=%s dy=%s scale=%g inplace=%d off=%d config %s",
      (long long)rows, (long long)cols, (long long)is, (long long)xs, scree_dtype_name(d.y),
      scree_dtype_name(d.dy), (double)scale, in_place, off, cs);
  /* y is only read. */
  if (in_place || cfg == NULL) {
    void *back = malloc(ni * ey + 16);
    scree_test_d2h(ctx, back, y, ni * ey);
    ck_assert_msg(!memcmp(back, hy, ni * ey), "y written");
    free(back);
  }
  scree_test_dfree(ctx, by);
  scree_test_dfree(ctx, bg);
  if (!in_place) scree_test_dfree(ctx, bx);
  free(hy), free(hg), free(hx), free(href);
}

/* The public path (default config, adapted to the call) over edge shapes. */
static const int64_t shapes[][4] = {
    /* rows, cols, y and dy stride, dx stride */
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
 * vectors and must still be right; a row that fits the register cache and
 * one that streams. */
START_TEST(misaligned_starts) {
  const dt2 d = dtype_sets[_i];
  for (int off = 1; off <= 3; off++) {
    run_case(17, 4096, 4096, 4096, d, 0.f, 0, off, NULL);
    run_case(3, 100003, 100003, 100003, d, 0.75f, 0, off, NULL);
  }
}
END_TEST

START_TEST(in_place) {
  const dt2 d = dtype_sets[_i];
  run_case(37, 4096, 4096, 4096, d, 0.f, 1, 0, NULL);
  run_case(11, 1001, 1003, 1003, d, -2.f, 1, 0, NULL);
  run_case(3, 200000, 200000, 200000, d, 1.f, 1, 0, NULL); /* streams */
  run_case(5, 777, 777, 777, d, 0.5f, 1, 1, NULL);        /* misaligned */
}
END_TEST

START_TEST(zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_softmax_backward_args a = {.rows = 0, .cols = 128};
  ck_assert_int_eq(scree_softmax_backward(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* The op's own problems through the harness (what the tuner checks),
 * through the public entry. */
START_TEST(harness_problems) {
  static const int64_t rc[][2] = {{97, 4096}, {5, 1}, {13, 100003}, {97, 129}};
  for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++)
    for (size_t k = 0; k < NSETS; k++) {
      const scree__variant var = {{dtype_sets[k].y, dtype_sets[k].dy}};
      scree_softmax_backward_args a = {.rows = rc[i][0], .cols = rc[i][1]};
      scree_test_check_public(ctx, op, &var, &a, NULL, stream, "%s/%s",
                              scree_dtype_name(dtype_sets[k].y), scree_dtype_name(dtype_sets[k].dy));
    }
}
END_TEST

/* Configs run exactly as given: a row with a tail that fits the register
 * cache, one that streams past it (a partial last batch and a tail), a row
 * of one element, a row shorter than one access of the group, in place. */
static void run_config_shapes(const scree__config *c, dt2 d) {
  const int64_t cover = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC] * c->v[SCREE__RW_CACHE];
  const int64_t long_cols = 2 * cover + 3 < 262144 ? 2 * cover + 3 : 262144;
  const int64_t ls = (long_cols + 7) / 8 * 8;
  run_case(c->v[SCREE__RW_ROWS] * 3 + 1, cover - 1, cover, cover, d, 0.75f, 0, 0, c);
  run_case(5, long_cols, ls, ls, d, -1.f, 0, 0, c);
  run_case(2, 1, 8, 8, d, 0.f, 0, 0, c);
  run_case(3, 5, 8, 8, d, 2.f, 0, 0, c);
  run_case(4, long_cols, ls, ls, d, 0.f, 1, 0, c);
}

/* A spread of the launch-shape space (every value of every field), run
 * whatever the safelist says. */
static const char *const fixed_configs[] = {
    "tpr=8,rows=16,vec=8,cache=2",  "tpr=8,rows=4,vec=1,cache=1",
    "tpr=16,rows=4,vec=4,cache=4",  "tpr=32,rows=1,vec=8,cache=8",
    "tpr=64,rows=2,vec=2,cache=16", "tpr=128,rows=1,vec=8,cache=4",
    "tpr=256,rows=2,vec=4,cache=1", "tpr=512,rows=1,vec=8,cache=4",
    "tpr=1024,rows=1,vec=8,cache=2", "tpr=1024,rows=1,vec=1,cache=16",
    "tpr=128,rows=8,vec=4,cache=2",
};
#define NFIXED (sizeof fixed_configs / sizeof fixed_configs[0])

START_TEST(fixed_configs_exact) {
  const dt2 d = dtype_sets[_i];
  const scree__variant var = {{d.y, d.dy}};
  for (size_t i = 0; i < NFIXED; i++) {
    const scree__config c = scree_test_config(ctx, op, fixed_configs[i], &var);
    run_config_shapes(&c, d);
  }
  printf("fixed_configs_exact %s/%s: %zu configs\n", scree_dtype_name(d.y),
         scree_dtype_name(d.dy), NFIXED);
}
END_TEST

/* Every config the device's safelist allows: the generated check problem
 * of two shapes of its variant (or of one tested dtype pair, in turn, for a
 * "*" line) through the harness, and the edge shapes above. */
START_TEST(every_safelisted_config) {
  int ran = 0, e = -1;
  scree__variant var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &var));) {
    if (!strcmp(en->dtype, "*")) {
      const size_t k = (size_t)ran % NSETS;
      var = (scree__variant){{dtype_sets[k].y, dtype_sets[k].dy}};
    }
    static const int64_t cols[] = {4096, 100003};
    for (int s = 0; s < 2; s++) {
      scree_softmax_backward_args a = {.rows = 64, .cols = cols[s]};
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
  op = scree_test_op_setup("softmax_backward", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "softmax_backward_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_rows_launches_nothing, harness_problems),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NSETS},
                                     {misaligned_starts, NSETS}, {in_place, NSETS}),
                .slow_tests = SCREE_TESTS(every_safelisted_config),
                .slow_loops = SCREE_LOOPS({fixed_configs_exact, NSETS}))
