/* test_ragged_softmax_backward_gpu.c - the ragged softmax backward on the
 * GPU against the CPU reference (label gpu; skipped with a reason where
 * there is no GPU).
 *
 * Random inputs, fresh each run (the seed is printed), reshaped by the op's
 * shape_inputs (y a ragged softmax output per sequence and column, its
 * sequences of different spread, the tokens a dropped term would change
 * weighing more in y and dy); dx poisoned (NaN) before every launch, so an
 * unwritten element fails, and a guard region after dx (and the padding
 * between rows) must keep its bytes; y must not change. Tolerance
 * (ops/ragged_softmax_backward.c): 2e-5 max(1, |scale|) absolute in every
 * dtype (scree__softmax_bwd_atol: the fp32 sum over the sequence errs by a
 * few 1e-7 of its largest terms, which dy - d keeps) plus one rounding of
 * dx's dtype relative (scree__tolerance).
 *
 * Batches mix the lengths 0, 1 and just off the token groups (up to 257),
 * with a long one streamed past the stage; columns 1, odd, exact, past one
 * column block and up to 65536; strides with padding; starts misaligned so
 * that the vector width narrows; in place over dy; scales 0, negative,
 * small and large; row offsets past 2^31 elements; the validation of
 * device-side cu_seqlens; the op's own check problems through the public
 * entry; and (slow) a fixed spread of the space, every config of the space
 * at two variants and every config the device's safelist allows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/rowwise.h"

SCREE__REFERENCE(ragged_softmax_backward);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream; /* the harness's checked runs */

typedef struct dt2 {
  scree_dtype y, dy;
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
  v.v[0] = d.y;
  v.v[1] = d.dy;
  return v;
}

static void tolerance(scree_dtype dy, float scale, double *rtol, double *atol) {
  scree__tolerance(dy, rtol, atol);
  *atol = scree__softmax_bwd_atol(scale);
}

/* One call on a batch of `lens`: through the public entry (cfg NULL), or
 * with an explicit config adapted to the call (cfg; returns 0 without
 * running if the adapted config fails the check). y and dy have row stride
 * is, dx xs (in place: dx is dy, xs = is); every pointer starts off
 * elements past an aligned allocation. Every element of every row is
 * compared with the reference; the padding between rows and a guard region
 * past the last row must keep their bytes; y must keep its bytes. */
static int run_case(const int64_t *lens, int n, int64_t cols, int64_t is, int64_t xs, dt2 d,
                    int in_place, float scale, int off, const scree__config *cfg) {
  int64_t maxlen;
  int32_t *cu = scree_test_cu_seqlens(lens, n, &maxlen);
  const int64_t total = cu[n];
  if (in_place) xs = is;
  const size_t ey = scree_dtype_size(d.y), eg = scree_dtype_size(d.dy);
  const size_t ni = (size_t)(total * is), nx = (size_t)(total * xs), guard = 256;
  const size_t sh = (size_t)off;
  void *hy = malloc(ni * ey + 16), *hg = malloc(ni * eg + 16);
  void *hx = malloc(nx * eg + 16), *href = malloc(nx * eg + 16);
  scree_test_fill(hy, d.y, ni, 1.0);
  scree_test_fill(hg, d.dy, ni, 1.0);
  scree_ragged_softmax_backward_args a = {
      .batch = n, .total = total, .max_seqlen = maxlen, .cols = cols, .y_stride = is,
      .dy_stride = is, .dx_stride = xs, .y_dtype = d.y, .dy_dtype = d.dy, .scale = scale};
  op->shape_inputs(&a, (void *const[]){hy, hg, cu, NULL});
  scree_devptr by = scree_test_dalloc(ctx, (ni + sh) * ey + guard);
  scree_devptr bg = scree_test_dalloc(ctx, (ni + sh) * eg + guard);
  scree_devptr bx = in_place ? 0 : scree_test_dalloc(ctx, (nx + sh) * eg + guard);
  scree_devptr dcu = scree_test_dalloc(ctx, sizeof *cu * (size_t)(n + 1));
  const scree_devptr y = by + sh * ey, dy = bg + sh * eg;
  const scree_devptr dx = in_place ? dy : bx + sh * eg;
  scree_test_dpoison(ctx, bg, (ni + sh) * eg + guard);
  if (!in_place) scree_test_dpoison(ctx, bx, (nx + sh) * eg + guard);
  scree_test_h2d(ctx, y, hy, ni * ey);
  scree_test_h2d(ctx, dy, hg, ni * eg);
  scree_test_h2d(ctx, dcu, cu, sizeof *cu * (size_t)(n + 1));
  /* The expected bytes: the reference in the rows; in the padding, the
   * poison (NaN bytes), or dy's own values in place. */
  if (in_place)
    memcpy(href, hg, nx * eg);
  else
    memset(href, 0xff, nx * eg);
  scree__ref_ragged_softmax_backward(&a, (void *const[]){hy, hg, cu, href});
  a.y = y, a.dy = dy, a.dx = dx, a.cu_seqlens = dcu;
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
    st = scree_ragged_softmax_backward(ctx, &a, NULL);
  }
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  if (ran) {
    scree_test_d2h(ctx, hx, dx, nx * eg);
    double rtol, atol;
    tolerance(d.dy, scale, &rtol, &atol);
    char what[160];
    snprintf(what, sizeof what, "dx (config %s)", cs);
    scree_test_check_guard(ctx, dx + nx * eg, guard, what);
    /* A row a token: element [i] of a message is token i / xs's column i % xs. */
    scree_test_compare_rows(
        hx, href, d.dy, total, cols, xs, rtol, atol, "dx",
        "cols=%lld is=%lld xs=%lld y=%s dy=%s inplace=%d scale=%g off=%d config %s",
        (long long)cols, (long long)is, (long long)xs, scree_dtype_name(d.y),
        scree_dtype_name(d.dy), in_place, (double)scale, off, cs);
    void *back = malloc(ni * ey + 16);
    scree_test_d2h(ctx, back, y, ni * ey);
    ck_assert_msg(!memcmp(back, hy, ni * ey), "y written (config %s)", cs);
    free(back);
  }
  scree_test_dfree(ctx, by);
  scree_test_dfree(ctx, bg);
  if (!in_place) scree_test_dfree(ctx, bx);
  scree_test_dfree(ctx, dcu);
  free(cu), free(hy), free(hg), free(hx), free(href);
  return ran;
}

/* The public path (default config, adapted to the call) over edge shapes:
 * lengths, cols, y and dy stride, dx stride. */
typedef struct shape {
  const int64_t *lens;
  int n;
  int64_t cols, is, xs;
} shape;
static const shape shapes[] = {
    {SCREE_TEST_EDGE, 1, 1, 1},              {SCREE_TEST_EDGE, 7, 7, 7},
    {SCREE_TEST_EDGE, 64, 64, 64},           {SCREE_TEST_EDGE, 129, 136, 130},
    {SCREE_TEST_EDGE, 4096, 4096, 4096},     {SCREE_TEST_EDGE, 4097, 4104, 4100},
    {SCREE_TEST_SMALL, 65536, 65536, 65536}, {SCREE_TEST_SMALL, 65535, 65535, 65536},
    {SCREE_TEST_LONG, 200, 200, 200},        {SCREE_TEST_LONG, 33, 40, 33},
    {SCREE_TEST_ONE, 1000, 1000, 1000},      {SCREE_TEST_ONE, 1, 1, 1},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])
static const float scales[] = {0.f, 0.5f, -1.25f, 3.f};

START_TEST(default_path_shapes) {
  const shape *s = &shapes[_i / NSETS];
  run_case(s->lens, s->n, s->cols, s->is, s->xs, dtype_sets[_i % NSETS], 0, scales[_i % 4], 0,
           NULL);
}
END_TEST

/* Many tiny sequences: one CTA per sequence and strip, most of them empty
 * or short (the default's narrow groups). */
START_TEST(many_short_sequences) {
  enum { NS = 3001 };
  int64_t *l = scree_test_short_lens(NS);
  run_case(l, NS, 24, 24, 24, dtype_sets[_i], 0, 0.f, 0, NULL);
  run_case(l, NS, 4100, 4100, 4104, dtype_sets[_i], 0, -1.f, 0, NULL);
  free(l);
}
END_TEST

/* Starts and strides that allow only narrower vectors (adapt), scales. */
START_TEST(misaligned_and_scaled) {
  const dt2 d = dtype_sets[_i];
  for (int off = 1; off <= 3; off++) {
    run_case(SCREE_TEST_EDGE, 64, 64, 64, d, 0, 0.f, off, NULL);
    run_case(SCREE_TEST_LONG, 100, 100, 100, d, 0, 0.75f, off, NULL);
  }
  run_case(SCREE_TEST_EDGE, 64, 65, 64, d, 0, 0.f, 0, NULL);
  run_case(SCREE_TEST_EDGE, 96, 100, 98, d, 0, 0.f, 0, NULL);
  run_case(SCREE_TEST_SMALL, 333, 333, 333, d, 0, -1.5f, 1, NULL);
  run_case(SCREE_TEST_EDGE, 40, 40, 40, d, 0, 0.1f, 0, NULL);
  run_case(SCREE_TEST_EDGE, 40, 48, 40, d, 0, 3.f, 0, NULL);
}
END_TEST

START_TEST(in_place) {
  const dt2 d = dtype_sets[_i];
  run_case(SCREE_TEST_EDGE, 4096, 4096, 4096, d, 1, 0.f, 0, NULL);
  run_case(SCREE_TEST_EDGE, 1001, 1003, 1003, d, 1, 0.5f, 1, NULL);
  run_case(SCREE_TEST_LONG, 64, 64, 64, d, 1, -2.f, 0, NULL); /* streamed part */
}
END_TEST

/* Row offsets past 2^31 elements: y and dy (dx in place over it) with rows
 * of 8 columns 2^20 elements apart (two 4.4 GB buffers), copied row by
 * row. */
START_TEST(offsets_past_2g_elements) {
  const int64_t cols = 8, stride = (int64_t)1 << 20, total = 2100;
  const dt2 d = {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16};
  int32_t cu[4] = {0, 1000, 2099, 2100}; /* lengths 1000, 1099, 1 */
  const size_t bytes = (size_t)(total * stride) * 2, packed = (size_t)(total * cols) * 2;
  scree_devptr y = scree_test_dalloc(ctx, bytes), g = scree_test_dalloc(ctx, bytes);
  scree_devptr dcu = scree_test_dalloc(ctx, sizeof cu);
  uint16_t *hy = malloc(packed), *hg = malloc(packed), *want = malloc(packed),
           *got = malloc(packed);
  scree_test_fill(hy, d.y, (size_t)(total * cols), 1.0);
  scree_test_fill(hg, d.dy, (size_t)(total * cols), 1.0);
  scree_ragged_softmax_backward_args a = {.batch = 3, .total = total, .max_seqlen = 1099,
                                          .cols = cols, .y_dtype = d.y, .dy_dtype = d.dy};
  op->shape_inputs(&a, (void *const[]){hy, hg, cu, NULL});
  scree__ref_ragged_softmax_backward(&a, (void *const[]){hy, hg, cu, want});
  for (int64_t t = 0; t < total; t++) {
    scree_test_h2d(ctx, y + (size_t)(t * stride) * 2, hy + t * cols, (size_t)cols * 2);
    scree_test_h2d(ctx, g + (size_t)(t * stride) * 2, hg + t * cols, (size_t)cols * 2);
  }
  scree_test_h2d(ctx, dcu, cu, sizeof cu);
  a.y = y, a.dy = a.dx = g, a.cu_seqlens = dcu;
  a.y_stride = a.dy_stride = a.dx_stride = stride;
  ck_assert_msg(scree_ragged_softmax_backward(ctx, &a, NULL) == SCREE_OK, "%s",
                scree_last_error(ctx));
  scree_test_sync(ctx);
  for (int64_t t = 0; t < total; t++)
    scree_test_d2h(ctx, got + t * cols, g + (size_t)(t * stride) * 2, (size_t)cols * 2);
  double rtol, atol;
  tolerance(d.dy, 0.f, &rtol, &atol);
  size_t worst = 0;
  const size_t bad = scree__compare(got, want, d.dy, (size_t)(total * cols), rtol, atol, &worst);
  ck_assert_msg(bad == 0, "%zu bad, e.g. [%zu] got %g want %g", bad, worst,
                scree__load_elem(got, d.dy, worst), scree__load_elem(want, d.dy, worst));
  scree_test_dfree(ctx, y), scree_test_dfree(ctx, g), scree_test_dfree(ctx, dcu);
  free(hy), free(hg), free(want), free(got);
}
END_TEST

START_TEST(empty_batches_launch_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_ragged_softmax_backward_args a = {.batch = 5, .total = 0, .cols = 128,
                                          .y_dtype = SCREE_DTYPE_FP16,
                                          .dy_dtype = SCREE_DTYPE_FP16};
  ck_assert_int_eq(scree_ragged_softmax_backward(ctx, &a, NULL), SCREE_OK);
  a.batch = 0;
  ck_assert_int_eq(scree_ragged_softmax_backward(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* Validation on: device-side cu_seqlens are copied and checked; a bad one
 * is refused by name and nothing is written. */
START_TEST(validate_cu_seqlens) {
  scree_context *vctx = scree_test_validating_context();
  const int T = 300, C = 64;
  scree_devptr y = scree_test_dalloc(ctx, (size_t)T * C * 2),
               g = scree_test_dalloc(ctx, (size_t)T * C * 2),
               x = scree_test_dalloc(ctx, (size_t)T * C * 2), cu = scree_test_dalloc(ctx, 16);
  scree_test_dpoison(ctx, y, (size_t)T * C * 2);
  scree_test_dpoison(ctx, g, (size_t)T * C * 2);
  const int32_t good[4] = {0, 100, 100, 300};
  const int32_t bad[][4] = {{1, 100, 100, 300}, {0, 100, 50, 300}, {0, 100, 100, 299},
                            {0, 250, 260, 300}};
  const char *needle[] = {"cu_seqlens[0]=1", "decreases", "differs from total",
                          "more than max_seqlen"};
  scree_ragged_softmax_backward_args a = {.y = y, .dy = g, .dx = x, .cu_seqlens = cu,
                                          .batch = 3, .total = T, .max_seqlen = 200,
                                          .cols = C, .y_dtype = SCREE_DTYPE_FP16,
                                          .dy_dtype = SCREE_DTYPE_FP16};
  uint16_t probe[64];
  for (int i = 0; i < 4; i++) {
    scree_test_h2d(ctx, cu, bad[i], sizeof bad[i]);
    scree_test_dpoison(ctx, x, (size_t)T * C * 2);
    const scree_status st = scree_ragged_softmax_backward(vctx, &a, NULL);
    ck_assert_msg(st == SCREE_ERROR_INVALID_ARGUMENT && strstr(scree_last_error(vctx), needle[i]),
                  "case %d: %s: %s", i, scree_status_name(st), scree_last_error(vctx));
    scree_test_sync(ctx);
    scree_test_d2h(ctx, probe, x, sizeof probe);
    for (int k = 0; k < 64; k++) ck_assert_uint_eq(probe[k], 0xffff);
  }
  scree_test_h2d(ctx, cu, good, sizeof good);
  /* The poison (NaN) flows into dx; the call itself must be accepted. */
  ck_assert_msg(scree_ragged_softmax_backward(vctx, &a, NULL) == SCREE_OK, "%s",
                scree_last_error(vctx));
  scree_test_sync(ctx);
  scree_destroy(vctx);
  scree_test_dfree(ctx, y), scree_test_dfree(ctx, g), scree_test_dfree(ctx, x);
  scree_test_dfree(ctx, cu);
}
END_TEST

/* The op's own check problems (what the tuner checks) through the public
 * entry: the harness's check batch at several widths and longest lengths. */
START_TEST(harness_problems) {
  static const int64_t cm[][2] = {{4096, 1000}, {1, 1000}, {333, 3000}, {128, 2100}};
  for (size_t i = 0; i < sizeof cm / sizeof cm[0]; i++) {
    const scree__variant var = variant_of(dtype_sets[_i]);
    scree_ragged_softmax_backward_args a = {.cols = cm[i][0], .max_seqlen = cm[i][1]};
    scree_test_check_public(ctx, op, &var, &a, NULL, stream, "%s/%s cols=%lld",
                            scree_dtype_name(dtype_sets[_i].y),
                            scree_dtype_name(dtype_sets[_i].dy), (long long)cm[i][0]);
  }
}
END_TEST

/* The harness's check batch for `cols`, run with cfg if it passes the
 * check on this device; returns the runs. */
static int check_config(dt2 d, int64_t cols, const scree__config *cfg) {
  const scree__variant var = variant_of(d);
  scree__target t;
  scree__target_of(ctx, &t);
  if (!scree__config_check(op, cfg, &var, &t, NULL, 0)) return 0;
  scree_ragged_softmax_backward_args sh = {.cols = cols, .max_seqlen = 1000};
  scree__run r;
  scree_test_make(ctx, op, &var, &sh, NULL, &r);
  char cs[128];
  scree__config_str(op, cfg, cs, sizeof cs);
  scree__config_runner u = {op, cfg, &var, NULL};
  scree_test_check_run(ctx, &r, scree_test_run_adapted, &u, stream, "%s %s/%s cols=%lld", cs,
                       scree_dtype_name(d.y), scree_dtype_name(d.dy), (long long)cols);
  scree__run_free(ctx, &r);
  return 1;
}

/* One config on batches around its stage (stok tokens a CTA, split CTAs a
 * sequence) and groups: lengths 0, 1, tile - 1, tile, tile + 1 (one token
 * streamed), three tiles and more (most of it streamed), 2; a tail column
 * (cols % vec != 0) and several column blocks; padded strides; in place. */
static int run_config_shapes(const scree__config *c, dt2 d) {
  const int64_t span = (int64_t)c->v[0] * c->v[2], rows = c->v[1];
  const int64_t tile = (int64_t)c->v[3] * c->v[4];
  const int64_t cols = 2 * span + 3, is = (cols + 7) / 8 * 8;
  const int64_t lens[] = {0, 1, tile - 1, tile, tile + 1, 3 * tile + 2 * rows * c->v[4] + 1, 2};
  int ran = run_case(lens, 7, cols, is, is + 8, d, 0, 0.f, 0, c);
  ran += run_case(lens, 7, cols, is, is, d, 1, 0.7f, 0, c);
  return ran;
}

/* A fixed spread of the space (every value of every field; 32 to 1024
 * threads; 2-byte accesses without async copies; 32-byte accesses as two
 * copies; clusters of 2, 4 and 8 where the device has them), run whatever
 * the safelist says. Fields: tpr, rows, vec, stok, split. Those past the
 * device's shared memory for a variant are skipped (and said). */
static const char *const fixed[] = {
    "tpr=2,rows=16,vec=8,stok=256,split=1",   "tpr=2,rows=64,vec=8,stok=2048,split=1",
    "tpr=4,rows=64,vec=4,stok=512,split=1",   "tpr=8,rows=128,vec=1,stok=256,split=1",
    "tpr=2,rows=512,vec=2,stok=1024,split=1", "tpr=4,rows=32,vec=4,stok=2048,split=1",
    "tpr=2,rows=16,vec=1,stok=8192,split=1",  "tpr=8,rows=64,vec=8,stok=512,split=1",
    "tpr=8,rows=32,vec=4,stok=256,split=1",   "tpr=4,rows=128,vec=8,stok=1024,split=1",
    "tpr=2,rows=256,vec=2,stok=256,split=1",  "tpr=8,rows=16,vec=2,stok=4096,split=1",
    "tpr=4,rows=256,vec=1,stok=512,split=1",  "tpr=2,rows=128,vec=4,stok=4096,split=1",
    "tpr=2,rows=64,vec=8,stok=1024,split=2",  "tpr=4,rows=32,vec=4,stok=256,split=4",
    "tpr=8,rows=16,vec=8,stok=512,split=8",   "tpr=2,rows=128,vec=2,stok=2048,split=2",
    "tpr=2,rows=16,vec=1,stok=256,split=8",
};
#define NFIXED (sizeof fixed / sizeof fixed[0])

START_TEST(fixed_configs) {
  const dt2 d = dtype_sets[_i];
  const scree__variant var = variant_of(d);
  scree__target t;
  scree__target_of(ctx, &t);
  int ran = 0, configs = 0, wanted = 0;
  for (size_t i = 0; i < NFIXED; i++) {
    scree__config c;
    char why[256] = "";
    ck_assert_msg(scree__config_parse(op, fixed[i], &c, why, sizeof why) == 0, "%s: %s",
                  fixed[i], why);
    if (c.v[4] > 1 && t.sm < 90) continue; /* no clusters before sm_90 */
    wanted++;
    if (!scree__config_check(op, &c, &var, &t, why, sizeof why)) {
      printf("fixed %s %s/%s: %s\n", fixed[i], scree_dtype_name(d.y), scree_dtype_name(d.dy),
             why);
      continue;
    }
    configs++;
    ran += run_config_shapes(&c, d);
    ran += check_config(d, 2 * (int64_t)c.v[0] * c.v[2], &c);
  }
  printf("fixed_configs %s/%s: %d configs, %d runs\n", scree_dtype_name(d.y),
         scree_dtype_name(d.dy), configs, ran);
  ck_assert_int_ge(configs, wanted / 2); /* fp32 y and dy: 6 past the shared memory */
  ck_assert_int_ge(ran, configs);
}
END_TEST

/* Every config of the space that passes the check, at two variants (16-bit
 * y and dy; bf16 y with fp32 dy), on a short batch around the groups and a
 * cluster's stages (lengths 0, 1, rows + 1, stok * split + 1), a tail
 * column and in place. */
static const dt2 space_sets[] = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16},
                                 {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32}};

START_TEST(whole_space) {
  const dt2 d = space_sets[_i];
  const scree__variant var = variant_of(d);
  size_t n = 0;
  scree__config *cfgs = scree_test_checked_space(ctx, op, &var, &n);
  int ran = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t span = (int64_t)cfgs[i].v[0] * cfgs[i].v[2], rows = cfgs[i].v[1];
    const int64_t tile = (int64_t)cfgs[i].v[3] * cfgs[i].v[4];
    const int64_t cols = span + 3, is = (cols + 7) / 8 * 8;
    const int64_t lens[] = {0, 1, rows + 1, tile + 1, 3};
    ran += run_case(lens, 5, cols, is, is, d, (int)(i & 1), i & 2 ? -0.5f : 0.f, 0, &cfgs[i]);
  }
  free(cfgs);
  printf("whole_space %s/%s: %zu configs, %d runs\n", scree_dtype_name(d.y),
         scree_dtype_name(d.dy), n, ran);
  ck_assert_int_gt((int)n, 100);
  ck_assert_int_eq(ran, (int)n);
}
END_TEST

/* Every config the device's safelist allows: on its own variant for
 * dtype-specific lines, else at a tested dtype pair in turn; the check
 * batch with aligned columns and with odd ones, and the shapes around its
 * stage. */
START_TEST(every_safelisted_config) {
  int ran = 0, e = -1;
  scree__variant var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &var));) {
    if (!strcmp(en->dtype, "*")) var = variant_of(dtype_sets[(size_t)ran % NSETS]);
    const dt2 d = {(scree_dtype)var.v[0], (scree_dtype)var.v[1]};
    ran += check_config(d, 4096, &en->cfg);
    ran += check_config(d, 333, &en->cfg);
    ran += run_config_shapes(&en->cfg, d);
  }
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

static void setup(void) {
  op = scree_test_op_setup("ragged_softmax_backward", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "ragged_softmax_backward_gpu", .init = setup, .timeout = 1800,
                .nofork = 1,
                .tests = SCREE_TESTS(offsets_past_2g_elements, empty_batches_launch_nothing,
                                     validate_cu_seqlens),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NSETS},
                                     {many_short_sequences, NSETS},
                                     {misaligned_and_scaled, NSETS}, {in_place, NSETS},
                                     {harness_problems, NSETS}),
                .slow_tests = SCREE_TESTS(every_safelisted_config),
                .slow_loops = SCREE_LOOPS({fixed_configs, NSETS}, {whole_space, 2}))
