/* test_ragged_softmax_gpu.c - the ragged softmax on the GPU against the CPU
 * reference (label gpu; skipped with a reason where there is no GPU).
 *
 * Random inputs, fresh each run (the seed is printed), shaped as the op's
 * problems shape them (tokens a dropped term would change weigh more); y
 * poisoned (NaN) before every launch, so an unwritten element fails, and a
 * guard region after y (and the padding between rows) must keep its bytes.
 * Tolerance (ops/ragged_softmax.c): one rounding of the output dtype for
 * fp16 and bf16 (scree__tolerance), 1e-4 relative + 1e-6 for fp32.
 *
 * Batches mix the lengths 0, 1 and just off the token tiles rows * cache
 * (up to 257), with a long one streamed past every register cache; columns
 * 1, odd, exact, past one column block and up to 65536; strides with
 * padding; starts misaligned so that the vector width narrows; in place;
 * scales 0, negative, small and large; row offsets past 2^31 elements; the
 * validation of device-side cu_seqlens; a fixed list of configs of the
 * space and every config the device's safelist allows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/rowwise.h"

SCREE__REFERENCE(ragged_softmax);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream; /* the harness's checked runs (check_configs) */

typedef struct dt2 {
  scree_dtype x, y;
} dt2;

static const dt2 dtype_sets[] = {
    {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}, {SCREE_DTYPE_BF16, SCREE_DTYPE_BF16},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP32}, {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16},
};
#define NSETS (sizeof dtype_sets / sizeof dtype_sets[0])

/* Batches: SCREE_TEST_EDGE, _SMALL, _LONG and _ONE (op_test.h). */

static scree__variant variant_of(dt2 d) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = d.x;
  v.v[1] = d.y;
  return v;
}

static void tolerance(scree_dtype y, double *rtol, double *atol) {
  scree__tolerance(y, rtol, atol);
  if (y == SCREE_DTYPE_FP32) *rtol = 1e-4, *atol = 1e-6;
}

/* One call on a batch of `lens`: through the public entry (cfg NULL), or
 * with an explicit config adapted to the call (cfg; returns 0 without
 * running if the adapted config fails the check). x and y start xoff and
 * yoff elements past an aligned allocation; in place, y is x. Every
 * element of every row is compared with the reference, the padding between
 * rows and a guard region past the last row must keep their bytes. */
static int run_case(const int64_t *lens, int n, int64_t cols, int64_t xs, int64_t ys, dt2 d,
                    int in_place, float scale, int xoff, int yoff, const scree__config *cfg) {
  int64_t maxlen;
  int32_t *cu = scree_test_cu_seqlens(lens, n, &maxlen);
  const int64_t total = cu[n];
  if (in_place) ys = xs, yoff = xoff;
  const size_t ex = scree_dtype_size(d.x), ey = scree_dtype_size(d.y);
  const size_t nx = (size_t)(total * xs), ny = (size_t)(total * ys), guard = 256;
  void *hx = malloc(nx * ex + 16), *hy = malloc(ny * ey + 16), *href = malloc(ny * ey + 16);
  scree_test_fill(hx, d.x, nx, 1.0);
  scree_ragged_softmax_args a = {.batch = n, .total = total, .max_seqlen = maxlen, .cols = cols,
                                 .x_stride = xs, .y_stride = ys, .x_dtype = d.x,
                                 .y_dtype = d.y, .scale = scale};
  op->shape_inputs(&a, (void *const[]){hx, cu});
  scree_devptr bx = scree_test_dalloc(ctx, (nx + (size_t)xoff) * ex + guard);
  scree_devptr by = in_place ? bx : scree_test_dalloc(ctx, (ny + (size_t)yoff) * ey + guard);
  scree_devptr dcu = scree_test_dalloc(ctx, sizeof *cu * (size_t)(n + 1));
  const scree_devptr dx = bx + (size_t)xoff * ex, dy = by + (size_t)yoff * ey;
  scree_test_dpoison(ctx, bx, (nx + (size_t)xoff) * ex + guard);
  if (!in_place) scree_test_dpoison(ctx, by, (ny + (size_t)yoff) * ey + guard);
  scree_test_h2d(ctx, dx, hx, nx * ex);
  scree_test_h2d(ctx, dcu, cu, sizeof *cu * (size_t)(n + 1));
  /* Reference output: the reference in the rows; in the padding the poison
   * (NaN bytes), or x's values in place. */
  if (in_place)
    memcpy(href, hx, ny * ey);
  else
    memset(href, 0xff, ny * ey);
  scree__ref_ragged_softmax(&a, (void *const[]){hx, cu, href});
  a.x = dx, a.y = dy, a.cu_seqlens = dcu;
  scree_status st;
  char cs[128] = "default";
  const scree__variant var = variant_of(d);
  int ran = 1;
  if (cfg) {
    scree__config c = *cfg;
    op->impls[c.impl].adapt(&c, &var, &a);
    scree__config_str(op, &c, cs, sizeof cs);
    scree__target t;
    scree__target_of(ctx, &t);
    ran = scree__config_check(op, &c, &var, &t, NULL, 0);
    st = ran ? scree__run_exact(ctx, op, &c, &var, &a, NULL) : SCREE_OK;
  } else {
    st = scree_ragged_softmax(ctx, &a, NULL);
  }
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  if (ran) {
    scree_test_d2h(ctx, hy, dy, ny * ey);
    double rtol, atol;
    tolerance(d.y, &rtol, &atol);
    char y[160];
    snprintf(y, sizeof y, "y (config %s)", cs);
    scree_test_check_guard(ctx, dy + ny * ey, guard, y);
    /* A row a token: element [i] of a message is token i / ys's column i % ys. */
    scree_test_compare_rows(
        hy, href, d.y, total, cols, ys, rtol, atol, "y",
        "cols=%lld xs=%lld ys=%lld %s->%s inplace=%d scale=%g off=%d/%d config %s",
        (long long)cols, (long long)xs, (long long)ys, scree_dtype_name(d.x),
        scree_dtype_name(d.y), in_place, (double)scale, xoff, yoff, cs);
  }
  scree_test_dfree(ctx, bx);
  if (!in_place) scree_test_dfree(ctx, by);
  scree_test_dfree(ctx, dcu);
  free(cu), free(hx), free(hy), free(href);
  return ran;
}

/* The public path (default config, adapted to the call) over edge shapes. */
typedef struct shape {
  const int64_t *lens;
  int n;
  int64_t cols, xs, ys;
} shape;
static const shape shapes[] = {
    {SCREE_TEST_EDGE, 1, 1, 1},              {SCREE_TEST_EDGE, 7, 7, 7},
    {SCREE_TEST_EDGE, 64, 64, 64},           {SCREE_TEST_EDGE, 129, 136, 130},
    {SCREE_TEST_EDGE, 4096, 4096, 4096},     {SCREE_TEST_EDGE, 4097, 4104, 4100},
    {SCREE_TEST_SMALL, 65536, 65536, 65536}, {SCREE_TEST_SMALL, 65535, 65535, 65536},
    {SCREE_TEST_LONG, 200, 200, 200},        {SCREE_TEST_ONE, 1000, 1000, 1000},
    {SCREE_TEST_ONE, 1, 1, 1},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(default_path_shapes) {
  const shape *s = &shapes[_i / NSETS];
  run_case(s->lens, s->n, s->cols, s->xs, s->ys, dtype_sets[_i % NSETS], 0, 0.f, 0, 0, NULL);
}
END_TEST

/* Many tiny sequences: one CTA per sequence, most of them empty or short. */
START_TEST(many_short_sequences) {
  enum { NS = 3001 };
  int64_t *l = scree_test_short_lens(NS);
  run_case(l, NS, 24, 24, 24, dtype_sets[_i], 0, 0.f, 0, 0, NULL);
  free(l);
}
END_TEST

/* Starts and strides that allow only narrower vectors (adapt), scales. */
START_TEST(misaligned_and_scaled) {
  const dt2 d = dtype_sets[_i];
  run_case(SCREE_TEST_EDGE, 64, 65, 64, d, 0, 0.f, 1, 3, NULL);
  run_case(SCREE_TEST_EDGE, 100, 100, 100, d, 0, 0.f, 2, 0, NULL);
  run_case(SCREE_TEST_EDGE, 96, 100, 98, d, 0, 0.f, 4, 6, NULL);
  run_case(SCREE_TEST_SMALL, 333, 333, 333, d, 0, -1.5f, 1, 1, NULL);
  run_case(SCREE_TEST_EDGE, 40, 40, 40, d, 0, 0.1f, 0, 0, NULL);
  run_case(SCREE_TEST_EDGE, 40, 48, 40, d, 0, 3.f, 0, 0, NULL);
}
END_TEST

START_TEST(in_place) {
  /* In place needs x and y of one element size (the API refuses others). */
  const dt2 d = dtype_sets[_i];
  if (scree_dtype_size(d.x) != scree_dtype_size(d.y)) return;
  run_case(SCREE_TEST_EDGE, 4096, 4096, 4096, d, 1, 0.f, 0, 0, NULL);
  run_case(SCREE_TEST_EDGE, 1001, 1003, 1003, d, 1, 0.5f, 1, 1, NULL);
  run_case(SCREE_TEST_LONG, 64, 64, 64, d, 1, 0.f, 0, 0, NULL);
  if (d.x == SCREE_DTYPE_FP16) /* fp16 in, bf16 out over it */
    run_case(SCREE_TEST_EDGE, 64, 64, 64, (dt2){SCREE_DTYPE_FP16, SCREE_DTYPE_BF16}, 1, 0.f,
             0, 0, NULL);
}
END_TEST

/* Row offsets past 2^31 elements: in place (one 4.4 GB buffer), rows of 8
 * columns 2^20 elements apart, copied row by row. */
START_TEST(offsets_past_2g_elements) {
  const int64_t cols = 8, stride = (int64_t)1 << 20, total = 2100;
  const dt2 d = {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16};
  int32_t cu[4] = {0, 1000, 2099, 2100}; /* lengths 1000, 1099, 1 */
  size_t bytes = (size_t)(total * stride) * 2;
  scree_devptr dx = scree_test_dalloc(ctx, bytes), dcu = scree_test_dalloc(ctx, sizeof cu);
  uint16_t *hx = malloc((size_t)(total * cols) * 2), *want = malloc((size_t)(total * cols) * 2);
  uint16_t *got = malloc((size_t)(total * cols) * 2);
  scree_test_fill(hx, d.x, (size_t)(total * cols), 1.0);
  for (int64_t t = 0; t < total; t++)
    scree_test_h2d(ctx, dx + (size_t)(t * stride) * 2, hx + t * cols, (size_t)cols * 2);
  scree_test_h2d(ctx, dcu, cu, sizeof cu);
  scree_ragged_softmax_args a = {.batch = 3, .total = total, .max_seqlen = 1099, .cols = cols,
                                 .x_dtype = d.x, .y_dtype = d.y};
  scree__ref_ragged_softmax(&a, (void *const[]){hx, cu, want});
  a.x = a.y = dx, a.cu_seqlens = dcu;
  a.x_stride = a.y_stride = stride;
  ck_assert_msg(scree_ragged_softmax(ctx, &a, NULL) == SCREE_OK, "%s", scree_last_error(ctx));
  scree_test_sync(ctx);
  for (int64_t t = 0; t < total; t++)
    scree_test_d2h(ctx, got + t * cols, dx + (size_t)(t * stride) * 2, (size_t)cols * 2);
  double rtol, atol;
  tolerance(d.y, &rtol, &atol);
  size_t worst = 0;
  const size_t bad = scree__compare(got, want, d.y, (size_t)(total * cols), rtol, atol, &worst);
  ck_assert_msg(bad == 0, "%zu bad, e.g. [%zu] got %g want %g", bad, worst,
                scree__load_elem(got, d.y, worst), scree__load_elem(want, d.y, worst));
  scree_test_dfree(ctx, dx), scree_test_dfree(ctx, dcu);
  free(hx), free(want), free(got);
}
END_TEST

START_TEST(empty_batches_launch_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_ragged_softmax_args a = {.batch = 5, .total = 0, .cols = 128,
                                 .x_dtype = SCREE_DTYPE_FP16, .y_dtype = SCREE_DTYPE_FP16};
  ck_assert_int_eq(scree_ragged_softmax(ctx, &a, NULL), SCREE_OK);
  a.batch = 0;
  ck_assert_int_eq(scree_ragged_softmax(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* Validation on: device-side cu_seqlens are copied and checked; a bad one
 * is refused by name and nothing is written. */
START_TEST(validate_cu_seqlens) {
  scree_context *vctx = scree_test_validating_context();
  const int T = 300, C = 64;
  scree_devptr x = scree_test_dalloc(ctx, (size_t)T * C * 2),
               y = scree_test_dalloc(ctx, (size_t)T * C * 2), cu = scree_test_dalloc(ctx, 16);
  scree_test_dpoison(ctx, x, (size_t)T * C * 2);
  const int32_t good[4] = {0, 100, 100, 300};
  const int32_t bad[][4] = {{1, 100, 100, 300}, {0, 100, 50, 300}, {0, 100, 100, 299},
                            {0, 250, 260, 300}};
  const char *needle[] = {"cu_seqlens[0]=1", "decreases", "differs from total",
                          "more than max_seqlen"};
  scree_ragged_softmax_args a = {.x = x, .y = y, .cu_seqlens = cu, .batch = 3, .total = T,
                                 .max_seqlen = 200, .cols = C, .x_dtype = SCREE_DTYPE_FP16,
                                 .y_dtype = SCREE_DTYPE_FP16};
  uint16_t probe[64];
  for (int i = 0; i < 4; i++) {
    scree_test_h2d(ctx, cu, bad[i], sizeof bad[i]);
    scree_test_dpoison(ctx, y, (size_t)T * C * 2);
    const scree_status st = scree_ragged_softmax(vctx, &a, NULL);
    ck_assert_msg(st == SCREE_ERROR_INVALID_ARGUMENT && strstr(scree_last_error(vctx), needle[i]),
                  "case %d: %s: %s", i, scree_status_name(st), scree_last_error(vctx));
    scree_test_sync(ctx);
    scree_test_d2h(ctx, probe, y, sizeof probe);
    for (int k = 0; k < 64; k++) ck_assert_uint_eq(probe[k], 0xffff);
  }
  scree_test_h2d(ctx, cu, good, sizeof good);
  /* x's poison (NaN) flows into y; the call itself must be accepted. */
  ck_assert_msg(scree_ragged_softmax(vctx, &a, NULL) == SCREE_OK, "%s", scree_last_error(vctx));
  scree_test_sync(ctx);
  scree_destroy(vctx);
  scree_test_dfree(ctx, x), scree_test_dfree(ctx, y), scree_test_dfree(ctx, cu);
}
END_TEST

/* A fixed, diverse list of configs of the space: of the register kernel
 * (impl 0: every field value, both register paths, 1024 threads) and of the
 * shared-memory one (impl 1: every tpr, vec, stok and split, 32 to 1024
 * threads, 2-byte accesses without async copies, each fitting fp32 x;
 * clusters, split > 1, where the device has them): each
 * on a batch with a tail column (cols % vec != 0, strides aligned), several
 * column blocks and sequences just off and past its register cache or
 * stage (the rest streamed); and on the harness's check batch. */
static const scree__config fixed[] = {
    {0, {8, 4, 4, 2}},      {0, {8, 16, 8, 8}},    {0, {16, 16, 8, 4}},   {0, {32, 1, 8, 2}},
    {0, {32, 16, 8, 1}},    {0, {8, 8, 2, 16}},    {0, {64, 8, 1, 16}},   {0, {128, 2, 4, 4}},
    {0, {8, 4, 1, 1}},      {0, {16, 2, 4, 16}},   {0, {256, 4, 4, 4}},   {0, {1024, 1, 2, 8}},
    {1, {2, 16, 8, 256, 1}},   {1, {2, 128, 8, 1024, 1}}, {1, {4, 64, 4, 512, 1}},
    {1, {8, 128, 1, 256, 1}},  {1, {2, 512, 2, 1024, 1}}, {1, {4, 32, 4, 2048, 1}},
    {1, {2, 16, 1, 8192, 1}},  {1, {8, 64, 8, 512, 4}},   {1, {8, 32, 4, 256, 8}},
    {1, {4, 128, 8, 1024, 2}}, {1, {2, 256, 2, 256, 4}},
};

/* The harness's check batch (ops/ragged_softmax.c) for `cols`, one run per
 * config that passes the check on this device; returns the runs. */
static int check_configs(dt2 d, int64_t cols, const scree__config *cfgs, int n) {
  const scree__variant var = variant_of(d);
  scree_ragged_softmax_args sh = {.cols = cols, .max_seqlen = 1000};
  scree__run r;
  scree_test_make(ctx, op, &var, &sh, NULL, &r);
  scree__target t;
  scree__target_of(ctx, &t);
  int ran = 0;
  for (int i = 0; i < n; i++) {
    char cs[128];
    scree__config_str(op, &cfgs[i], cs, sizeof cs);
    if (!scree__config_check(op, &cfgs[i], &var, &t, NULL, 0)) continue;
    scree__config_runner u = {op, &cfgs[i], &var, NULL};
    scree_test_check_run(ctx, &r, scree_test_run_adapted, &u, stream, "%s %s->%s cols=%lld", cs,
                         scree_dtype_name(d.x), scree_dtype_name(d.y), (long long)cols);
    ran++;
  }
  scree__run_free(ctx, &r);
  return ran;
}

START_TEST(fixed_configs) {
  const dt2 d = dtype_sets[_i];
  const scree__variant var = variant_of(d);
  scree__target t;
  scree__target_of(ctx, &t);
  int ran = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    const scree__config *c = &fixed[i];
    if (c->impl == 1 && c->v[4] > 1 && t.sm < 90) continue; /* no clusters before sm_90 */
    char why[256] = "";
    ck_assert_msg(scree__config_check(op, c, &var, &t, why, sizeof why), "fixed[%zu]: %s", i,
                  why);
    const int64_t span = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC];
    /* Tokens held on chip: rows x cache registers, or the stage (stok). */
    const int64_t tile = c->impl ? (int64_t)c->v[3] * c->v[4] /* stok x split */
                                 : (int64_t)c->v[SCREE__RW_ROWS] * c->v[SCREE__RW_CACHE];
    const int64_t cols = 2 * span + 3, xs = (cols + 7) / 8 * 8;
    const int64_t lens[] = {0, 1, tile - 1 > 0 ? tile - 1 : 2, tile, tile + 1,
                            3 * tile + 2 * c->v[SCREE__RW_ROWS] + 1, 2};
    scree_ragged_softmax_args sh = {.cols = cols, .max_seqlen = lens[5]};
    ck_assert_msg(op->impls[c->impl].worth_timing(c, &var, &sh), "fixed[%zu] not worth timing",
                  i);
    ran += run_case(lens, 7, cols, xs, xs + 8, d, 0, 0.f, 0, 0, c);
    if (scree_dtype_size(d.x) == scree_dtype_size(d.y)) /* in place where allowed */
      ran += run_case(lens, 7, cols, xs, xs, d, 1, 0.7f, 0, 0, c);
    ran += check_configs(d, 2 * span, c, 1);
  }
  printf("fixed_configs %s->%s: %d runs\n", scree_dtype_name(d.x), scree_dtype_name(d.y), ran);
  ck_assert_int_ge(ran, (int)(sizeof fixed / sizeof fixed[0]));
}
END_TEST

/* The cluster implementation (impl 2, sm_90 only; not in the safelist
 * until measured): a spread of its space (every value of every field, the
 * 128-byte strips it is for), each on a batch around its stage and its
 * cluster (lengths 0, 1, stok - 1, stok, stok + 1, csize * stok, and one
 * whose parts pass the stage: streamed), with a tail column, in place, and
 * on the harness's check batch; the first on 700 short sequences too (the
 * plan kernel's path). Fields: tpr, vec, warps, stok, stages,
 * csize, e1. */
static const scree__config cluster_fixed[] = {
    {2, {8, 8, 8, 256, 2, 8, 1}}, {2, {8, 8, 8, 256, 3, 8, 0}}, {2, {8, 8, 4, 128, 4, 4, 1}},
    {2, {4, 8, 8, 512, 2, 2, 0}}, {2, {8, 4, 8, 64, 3, 1, 1}},  {2, {4, 2, 4, 64, 2, 8, 1}},
    {2, {4, 1, 4, 128, 2, 2, 0}}, {2, {8, 8, 8, 512, 2, 1, 1}}, {2, {8, 8, 4, 64, 4, 8, 0}},
    {2, {4, 8, 16, 1024, 2, 2, 1}}, {2, {4, 4, 16, 2048, 2, 1, 0}}, {2, {8, 4, 16, 1024, 2, 1, 0}},
    {2, {8, 8, 8, 512, 1, 4, 0}},   {2, {4, 8, 4, 512, 1, 8, 1}},   {2, {8, 8, 8, 256, 1, 1, 1}},
};

START_TEST(cluster_configs) {
  const dt2 d = dtype_sets[_i];
  const scree__variant var = variant_of(d);
  scree__target t;
  scree__target_of(ctx, &t);
  if (t.sm != 90) {
    printf("cluster_configs: sm_%d, the cluster implementation is sm_90's\n", t.sm);
    return;
  }
  int ran = 0, configs = 0;
  for (size_t i = 0; i < sizeof cluster_fixed / sizeof cluster_fixed[0]; i++) {
    const scree__config *c = &cluster_fixed[i];
    char why[256] = "";
    if (!scree__config_check(op, c, &var, &t, why, sizeof why)) {
      printf("cluster_fixed[%zu] %s->%s: %s\n", i, scree_dtype_name(d.x), scree_dtype_name(d.y),
             why);
      continue;
    }
    configs++;
    const int64_t span = (int64_t)c->v[0] * c->v[1], stok = c->v[3], csize = c->v[5];
    const int64_t cols = 2 * span + 3, xs = (cols + 7) / 8 * 8;
    const int64_t lens[] = {0, 1, stok - 1, stok, stok + 1, csize * stok, 2,
                            csize * stok + stok / 2 + 3};
    ran += run_case(lens, 8, cols, xs, xs + 8, d, 0, 0.f, 0, 0, c);
    if (scree_dtype_size(d.x) == scree_dtype_size(d.y))
      ran += run_case(lens, 7, cols, xs, xs, d, 1, -0.7f, 0, 0, c);
    ran += check_configs(d, 2 * span, c, 1);
    if (configs == 1) { /* past the shared-memory plan (512 sequences): the plan kernel's */
      enum { NS = 700 };
      int64_t *many = scree_test_short_lens(NS);
      many[NS / 2] = csize * stok;
      ran += run_case(many, NS, cols, xs, xs, d, 0, 0.f, 0, 0, c);
      free(many);
    }
  }
  printf("cluster_configs %s->%s: %d configs, %d runs\n", scree_dtype_name(d.x),
         scree_dtype_name(d.y), configs, ran);
  ck_assert_int_ge(ran, configs);
}
END_TEST

/* Every config the device's safelist allows runs at least once: on its own
 * variant for dtype-specific lines, else at the example variant; on the
 * check batch with aligned columns and with odd ones. */
START_TEST(every_safelisted_config) {
  int ran = 0, e = -1;
  scree__variant var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &var));) {
    const dt2 d = {(scree_dtype)var.v[0], (scree_dtype)var.v[1]};
    ran += check_configs(d, 4096, &en->cfg, 1);
    ran += check_configs(d, 333, &en->cfg, 1);
  }
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

int main(void) {
  op = scree_test_op_setup("ragged_softmax", &ctx, &stream); /* exits 77 without a GPU */
  Suite *s = suite_create("ragged_softmax_gpu");
  TCase *tc = tcase_create("gpu");
  tcase_set_timeout(tc, 1800);
  tcase_add_loop_test(tc, default_path_shapes, 0, (int)(NSHAPES * NSETS));
  tcase_add_loop_test(tc, many_short_sequences, 0, (int)NSETS);
  tcase_add_loop_test(tc, misaligned_and_scaled, 0, (int)NSETS);
  tcase_add_loop_test(tc, in_place, 0, (int)NSETS);
  tcase_add_test(tc, offsets_past_2g_elements);
  tcase_add_test(tc, empty_batches_launch_nothing);
  tcase_add_test(tc, validate_cu_seqlens);
  /* The config sweeps are the slow set (test_ragged_softmax_gpu_slow). */
  TCase *sl = tcase_create("safelist");
  tcase_set_tags(sl, "slow");
  tcase_set_timeout(sl, 1800);
  tcase_add_test(sl, every_safelisted_config);
  /* A spread of both implementations' spaces around their on-chip limits:
   * what compute-sanitizer runs (CK_RUN_CASE=fixed). */
  TCase *fx = tcase_create("fixed");
  tcase_set_tags(fx, "slow");
  tcase_set_timeout(fx, 1800);
  tcase_add_loop_test(fx, fixed_configs, 0, (int)NSETS);
  /* The cluster implementation (CK_RUN_CASE=cluster). */
  TCase *cl = tcase_create("cluster");
  tcase_set_tags(cl, "slow");
  tcase_set_timeout(cl, 1800);
  tcase_add_loop_test(cl, cluster_configs, 0, (int)NSETS);
  suite_add_tcase(s, tc);
  suite_add_tcase(s, sl);
  suite_add_tcase(s, fx);
  suite_add_tcase(s, cl);
  return scree_test_run(s, 1);
}
