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

#include "ops/rowwise.h"
#include "test_util.h"

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

static void check_guard(scree_devptr p, const char *what) {
  unsigned char g[GUARD];
  scree_test_d2h(ctx, g, p, GUARD);
  for (size_t i = 0; i < GUARD; i++)
    ck_assert_msg(g[i] == 0xff, "byte %zu past the end of %s was written", i, what);
}

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
  check_guard(dy + ny * ey, "y");
  double rtol, atol;
  scree__tolerance(d.y, &rtol, &atol);
  size_t bad = 0, worst = 0;
  for (int64_t r = 0; r < k->rows && !bad; r++) {
    bad = scree__compare((char *)hy + (size_t)(r * k->ys) * ey,
                         (char *)href + (size_t)(r * k->ys) * ey, d.y, n, rtol, atol, &worst);
    if (bad) worst += (size_t)(r * k->ys);
    /* NaN == NaN for the untouched padding: compare bytes there. */
    if (k->ys > k->cols)
      ck_assert_msg(!memcmp((char *)hy + (size_t)(r * k->ys + k->cols) * ey,
                            (char *)href + (size_t)(r * k->ys + k->cols) * ey,
                            (size_t)(k->ys - k->cols) * ey),
                    "%s: row %lld: padding written", what, (long long)r);
  }
  ck_assert_msg(bad == 0, "%s: y: %zu bad in a row, e.g. [%zu] got %.8g want %.8g", what, bad,
                worst, scree__load_elem(hy, d.y, worst), scree__load_elem(href, d.y, worst));

  /* mean and rstd: fp32's tolerance where asked for (mean's atol relative
   * to the rows' spread, as the check problem's), untouched where not. */
  scree__tolerance(SCREE_DTYPE_FP32, &rtol, &atol);
  const scree_devptr sp[2] = {ma, ra};
  float *got[2] = {hm, hr}, *want[2] = {rm, rr};
  static const char *const names[2] = {"mean", "rstd"};
  for (int s = 0; s < 2; s++) {
    check_guard(sp[s] + rows * 4, names[s]);
    scree_test_d2h(ctx, got[s], sp[s], rows * 4);
    if (k->stats) {
      bad = scree__compare(got[s], want[s], SCREE_DTYPE_FP32, rows, rtol,
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

static void setup(void) {
  ctx = scree_test_gpu_context(); /* exits 77 with a reason where there is no GPU */
  op = scree__op_find("layernorm");
  scree__ctx_enter(ctx);
  if (ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
    fprintf(stderr, "cuStreamCreate failed\n");
    exit(1);
  }
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
  scree_counters before, after;
  scree_get_counters(ctx, &before);
  scree_layernorm_args a = {.rows = 0, .cols = 128, .eps = 1e-5f};
  ck_assert_int_eq(scree_layernorm(ctx, &a, NULL), SCREE_OK);
  scree_get_counters(ctx, &after);
  ck_assert_uint_eq(after.calls, before.calls);
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
    scree__run r;
    scree_status st = scree__run_make(ctx, op, &var, &a, 1, scree_test_rand(), NULL, &r);
    ck_assert_msg(st == SCREE_OK, "%s", scree_last_error(ctx));
    char why[1024], vs[64];
    scree__variant_str(op, &var, vs, sizeof vs);
    st = scree__run_check(ctx, &r, scree__run_config_api, (void *)op, stream, 60000, why,
                          sizeof why);
    ck_assert_msg(st == SCREE_OK, "%s cols=%lld: %s", vs, (long long)cols[i], why);
    scree__run_free(ctx, &r);
  }
}
END_TEST

/* Every config of the space, not only the default: a row just short of the
 * register cache (a scalar tail), one past it (the streamed part), and a
 * tiny row. Compiles run on threads first. */
typedef struct cjob {
  scree__config *cfgs;
  scree__variant var;
  scree_status worst;
} cjob;

static void compile_one(void *p, int i) {
  cjob *j = p;
  scree__kernel k;
  scree_status st = scree__kernel_get(ctx, op, &j->cfgs[i], &j->var, &k);
  if (st != SCREE_OK) j->worst = st;
}

START_TEST(every_config) {
  const dt3 d = dtype_sets[_i];
  const scree__variant var = {{d.x, d.w, d.y}};
  const int total = scree__config_space(op, NULL, 0);
  scree__config *cfgs = calloc((size_t)total, sizeof *cfgs);
  scree__config_space(op, cfgs, total);
  size_t n = 0;
  scree__target t;
  scree__target_of(ctx, &t);
  for (int i = 0; i < total; i++)
    if (scree__config_check(op, &cfgs[i], &var, &t, NULL, 0)) cfgs[n++] = cfgs[i];
  cjob j = {.cfgs = cfgs, .var = var, .worst = SCREE_OK};
  scree__parallel_for((int)n, 16, compile_one, &j);
  ck_assert_msg(j.worst == SCREE_OK, "compile/load: %s: %s", scree_status_name(j.worst),
                scree_last_error(ctx));
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
  scree__target t;
  scree__target_of(ctx, &t);
  int ran = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    scree__config c;
    char why[256];
    ck_assert_msg(scree__config_parse(op, fixed[i], &c, why, sizeof why) == 0, "%s", why);
    ck_assert_msg(scree__config_check(op, &c, &var, &t, why, sizeof why), "%s: %s", fixed[i], why);
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
 * problem, adapted to its alignment. */
START_TEST(every_safelisted_config) {
  if (!ctx->safelist) {
    printf("no safelist for %s\n", ctx->arch);
    return;
  }
  const scree__safelist *sl = ctx->safelist;
  int ran = 0;
  for (int e = 0; e < sl->n; e++) {
    const scree__sl_entry *en = &sl->entries[e];
    if (en->op != op || en->verb == SCREE__SL_DENY) continue;
    scree__variant var;
    if (strcmp(en->dtype, "*"))
      ck_assert_int_eq(scree__variant_parse(op, en->dtype, &var, NULL, 0), 0);
    else
      scree__variant_example(op, &var);
    const int64_t cover = (int64_t)en->cfg.v[0] * en->cfg.v[2] * en->cfg.v[3];
    const int64_t cols[2] = {cover - 1 < 65536 ? cover - 1 : 65536, 1000};
    for (int s = 0; s < 2; s++) {
      scree_layernorm_args a = {.rows = 97, .cols = cols[s] > 0 ? cols[s] : 1};
      scree__run r;
      scree_status st = scree__run_make(ctx, op, &var, &a, 1, scree_test_rand(), NULL, &r);
      ck_assert_msg(st == SCREE_OK, "%s", scree_last_error(ctx));
      /* Adapted to the shape's alignment, as the tuner adapts a candidate
       * (an odd row length allows only scalar accesses). */
      scree__config c = en->cfg;
      if (op->impls[c.impl].adapt) op->impls[c.impl].adapt(&c, &var, &a);
      char cs[128], why[1024];
      scree__config_str(op, &c, cs, sizeof cs);
      scree__kernel k;
      st = scree__kernel_get(ctx, op, &c, &var, &k);
      ck_assert_msg(st == SCREE_OK, "%s: %s", cs, scree_last_error(ctx));
      scree__config_runner cr = {op, &c, &var, &k};
      st = scree__run_check(ctx, &r, scree__run_config, &cr, stream, 60000, why, sizeof why);
      ck_assert_msg(st == SCREE_OK, "%s (line %d) cols=%lld: %s", cs, en->line,
                    (long long)a.cols, why);
      scree__run_free(ctx, &r);
      ran++;
    }
  }
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

int main(void) {
  setup();
  Suite *s = suite_create("layernorm_gpu");
  TCase *tc = tcase_create("gpu");
  tcase_set_timeout(tc, 1800);
  tcase_add_loop_test(tc, default_path_shapes, 0, (int)(NSHAPES * NSETS));
  tcase_add_loop_test(tc, bias_and_stats_optional, 0, (int)(4 * NSETS));
  tcase_add_loop_test(tc, in_place, 0, (int)NSETS);
  tcase_add_test(tc, zero_rows_launches_nothing);
  tcase_add_loop_test(tc, every_variant_check_problem, 0, 27);
  tcase_add_loop_test(tc, every_config, 0, 3);
  tcase_add_loop_test(tc, fixed_configs, 0, (int)NSETS);
  tcase_add_test(tc, every_safelisted_config);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 1);
}
