/* test_norm_backward_gpu.c - the backward of RMSNorm, of add+RMSNorm and
 * of LayerNorm (kernels/norm_backward.cu) on the GPU against the CPU
 * references (ops/rowwise_backward_ref.c). Label gpu: skipped (exit 77)
 * with a one-line reason where there is none. Random inputs, fresh each
 * run (the seed is printed); dx, dw and db poisoned with NaN before each
 * launch so an unwritten element fails.
 *
 * Tolerances: dx (dh), one rounding of x's dtype (scree__tolerance) plus
 * an atol of 1e-5 of the largest |dx| of the case and 2^-20 of the largest
 * term rstd |w dy| (the fp32 cancellation of dx's terms: with one column a
 * LayerNorm row has no variance, rstd is 1 / sqrt(eps) and the terms, some
 * 300 times |w dy|, cancel to an exact 0 that fp32 misses by up to 1.5e-5
 * on an H200); dw and db, one rounding of w's dtype plus an atol of
 * 1e-5 of the largest sum over rows of the terms' magnitudes (the fp32
 * sums over the rows). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/rowwise.h"
#include "ops/rowwise_backward_ref.h"

static scree_context *ctx;
static CUstream stream;
static const scree__op *ops[3];
static const scree__op *safelisted_op; /* every_safelisted_config's shape hook */
enum { RMS, ADD, LN };
static const char *const names[3] = {"rmsnorm_backward", "add_rmsnorm_backward",
                                     "layernorm_backward"};

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

static double ld(const void *p, scree_dtype d, size_t i) { return scree__load_elem(p, d, i); }

/* One call of op `kind`: rows of cols, x / dy / dres row stride s, dx row
 * stride ds (in place: ds == s and dx is dy's buffer), stats: the saved
 * statistics given; dres: add's dh_next given. cfg NULL: the public entry. */
static void run_case(int kind, int64_t rows, int64_t cols, int64_t s, int64_t ds, dt3 d,
                     int stats, int in_place, int dres, const scree__config *cfg) {
  const scree__op *op = ops[kind];
  const size_t ex = scree_dtype_size(d.x), ew = scree_dtype_size(d.w),
               ey = scree_dtype_size(d.y);
  const size_t n = (size_t)(rows * s), nd = (size_t)(rows * ds), nc = (size_t)cols;
  void *hx = malloc(n * ex + 16), *hdy = malloc(n * ey + 16), *hr = malloc(n * ex + 16);
  void *hw = malloc(nc * ew + 16), *hdx = malloc(nd * ex + 16), *ref = malloc(nd * ex + 16);
  void *hdw = malloc(nc * ew), *rdw = malloc(nc * ew), *hdb = malloc(nc * ew),
       *rdb = malloc(nc * ew);
  float *mean = malloc((size_t)(rows + 1) * 4), *rstd = malloc((size_t)(rows + 1) * 4);
  double *absw = calloc(nc, sizeof(double)), *absb = calloc(nc, sizeof(double));
  scree_test_fill(hx, d.x, n, 1.5);
  scree_test_fill(hdy, d.y, n, 1.0);
  scree_test_fill(hr, d.x, n, 1.0);
  scree_test_fill(hw, d.w, nc, 1.0);
  scree__rowwise_shape_rows(hx, d.x, rows, cols, s, 4);
  const float eps = kind == LN ? 1e-5f : 1e-6f;
  /* The statistics as the forward saves them (and the terms' magnitudes). */
  double bigterm = 0; /* the largest rstd |w dy|, a term of dx */
  for (int64_t r = 0; r < rows; r++) {
    double m = 0, q = 0;
    for (int64_t c = 0; c < cols; c++) m += ld(hx, d.x, (size_t)(r * s + c));
    m /= (double)cols;
    for (int64_t c = 0; c < cols; c++) {
      const double v = ld(hx, d.x, (size_t)(r * s + c)) - (kind == LN ? m : 0);
      q += v * v;
    }
    const double rs = 1.0 / sqrt(q / (double)cols + (double)eps);
    mean[r] = (float)m, rstd[r] = (float)rs;
    for (int64_t c = 0; c < cols; c++) {
      const double v = ld(hx, d.x, (size_t)(r * s + c)) - (kind == LN ? m : 0);
      const double g = ld(hdy, d.y, (size_t)(r * s + c));
      absw[c] += fabs(g * v * rs), absb[c] += fabs(g);
      bigterm = fmax(bigterm, rs * fabs(g * ld(hw, d.w, (size_t)c)));
    }
  }
  /* Reference: NaN in dx's padding, dy's values there in place. */
  if (in_place)
    memcpy(ref, hdy, nd * ex);
  else
    memset(ref, 0xff, nd * ex);
  if (kind == RMS)
    scree__rmsnorm_backward_ref(hx, s, hw, hdy, s, ref, ds, rdw, rows, cols, d.x, d.w, d.y, eps);
  else if (kind == ADD)
    scree__add_rmsnorm_backward_ref(hx, s, NULL, 0, hw, hdy, s, dres ? hr : NULL, s, ref, ds,
                                    rdw, rows, cols, d.x, d.w, d.y, eps);
  else
    scree__layernorm_backward_ref(hx, s, hw, hdy, s, ref, ds, rdw, rdb, rows, cols, d.x, d.w,
                                  d.y, eps);
  const size_t guard = 256;
  scree_devptr gx = scree_test_dalloc(ctx, n * ex + 16), gw = scree_test_dalloc(ctx, nc * ew);
  scree_devptr gdy = scree_test_dalloc(ctx, n * ey + guard);
  scree_devptr gr = scree_test_dalloc(ctx, n * ex + 16);
  scree_devptr gm = scree_test_dalloc(ctx, (size_t)(rows + 1) * 4);
  scree_devptr gs = scree_test_dalloc(ctx, (size_t)(rows + 1) * 4);
  scree_devptr gdx = in_place ? gdy : scree_test_dalloc(ctx, nd * ex + guard);
  scree_devptr gdw = scree_test_dalloc(ctx, nc * ew), gdb = scree_test_dalloc(ctx, nc * ew);
  scree_test_dpoison(ctx, gdy, n * ey + guard);
  if (!in_place) scree_test_dpoison(ctx, gdx, nd * ex + guard);
  if (n) {
    scree_test_h2d(ctx, gx, hx, n * ex);
    scree_test_h2d(ctx, gdy, hdy, n * ey);
    scree_test_h2d(ctx, gr, hr, n * ex);
  }
  scree_test_h2d(ctx, gw, hw, nc * ew);
  scree_test_h2d(ctx, gm, mean, (size_t)(rows + 1) * 4);
  scree_test_h2d(ctx, gs, rstd, (size_t)(rows + 1) * 4);
  scree_test_dpoison(ctx, gdw, nc * ew);
  scree_test_dpoison(ctx, gdb, nc * ew);
  scree_rmsnorm_backward_args ra = {.x = gx, .w = gw, .dy = gdy, .rstd = stats ? gs : 0,
                                    .dx = gdx, .dw = gdw, .rows = rows, .cols = cols,
                                    .x_stride = s, .dy_stride = s, .dx_stride = ds,
                                    .x_dtype = d.x, .w_dtype = d.w, .y_dtype = d.y, .eps = eps};
  scree_add_rmsnorm_backward_args aa = {
      .h = gx, .w = gw, .dy = gdy, .dh_next = dres ? gr : 0, .rstd = stats ? gs : 0,
      .dh = gdx, .dw = gdw, .rows = rows, .cols = cols, .h_stride = s, .dy_stride = s,
      .dh_next_stride = s, .dh_stride = ds, .x_dtype = d.x, .w_dtype = d.w, .y_dtype = d.y,
      .eps = eps};
  scree_layernorm_backward_args la = {
      .x = gx, .w = gw, .dy = gdy, .mean = stats ? gm : 0, .rstd = stats ? gs : 0, .dx = gdx,
      .dw = gdw, .db = gdb, .rows = rows, .cols = cols, .x_stride = s, .dy_stride = s,
      .dx_stride = ds, .x_dtype = d.x, .w_dtype = d.w, .y_dtype = d.y, .eps = eps};
  const void *args = kind == RMS ? (const void *)&ra : kind == ADD ? (const void *)&aa : &la;
  scree_status st;
  scree__config ac; /* cfg narrowed to what the call's alignment allows */
  if (cfg) {
    const scree__variant var = {{d.x, d.w, d.y}};
    ac = *cfg;
    if (op->impls[ac.impl].adapt) op->impls[ac.impl].adapt(&ac, &var, args);
    cfg = &ac;
    st = scree__run_exact(ctx, op, cfg, &var, args, NULL);
  } else {
    st = kind == RMS ? scree_rmsnorm_backward(ctx, &ra, NULL)
         : kind == ADD ? scree_add_rmsnorm_backward(ctx, &aa, NULL)
                       : scree_layernorm_backward(ctx, &la, NULL);
  }
  char cs[128] = "default";
  if (cfg) scree__config_str(op, cfg, cs, sizeof cs);
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  if (nd) scree_test_d2h(ctx, hdx, gdx, nd * ex);
  scree_test_d2h(ctx, hdw, gdw, nc * ew);
  scree_test_d2h(ctx, hdb, gdb, nc * ew);
  if (!in_place) scree_test_check_guard(ctx, gdx + nd * ex, guard, "dx");
  double rtol, atol, wrtol, watol, big = 0, bigw = 0, bigb = 0;
  scree__tolerance(d.x, &rtol, &atol);
  scree__tolerance(d.w, &wrtol, &watol);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) big = fmax(big, fabs(ld(ref, d.x, (size_t)(r * ds + c))));
  for (size_t c = 0; c < nc; c++) bigw = fmax(bigw, absw[c]), bigb = fmax(bigb, absb[c]);
#define CASE_FMT "%s rows=%lld cols=%lld s=%lld ds=%lld x=%s w=%s y=%s stats=%d inplace=%d dres=%d config %s"
#define CASE_ARGS names[kind], (long long)rows, (long long)cols, (long long)s, (long long)ds, \
    scree_dtype_name(d.x), scree_dtype_name(d.w), scree_dtype_name(d.y), stats, in_place, dres, cs
  scree_test_compare_rows(hdx, ref, d.x, rows, cols, ds, rtol,
                          atol + 1e-5 * big + 0x1p-20 * bigterm, "dx", CASE_FMT, CASE_ARGS);
  scree_test_compare_rows(hdw, rdw, d.w, 1, cols, cols, wrtol, watol + 1e-5 * bigw, "dw",
                          CASE_FMT, CASE_ARGS);
  if (kind == LN)
    scree_test_compare_rows(hdb, rdb, d.w, 1, cols, cols, wrtol, watol + 1e-5 * bigb, "db",
                            CASE_FMT, CASE_ARGS);
  scree_test_dfree(ctx, gx), scree_test_dfree(ctx, gw), scree_test_dfree(ctx, gdy);
  scree_test_dfree(ctx, gr), scree_test_dfree(ctx, gm), scree_test_dfree(ctx, gs);
  if (!in_place) scree_test_dfree(ctx, gdx);
  scree_test_dfree(ctx, gdw), scree_test_dfree(ctx, gdb);
  free(hx), free(hdy), free(hr), free(hw), free(hdx), free(ref), free(hdw), free(rdw);
  free(hdb), free(rdb), free(mean), free(rstd), free(absw), free(absb);
}

/* The public path over edge shapes: rows, cols, x / dy stride, dx stride. */
static const int64_t shapes[][4] = {
    {1, 1, 1, 1},           {7, 1, 1, 1},           {1, 4095, 4095, 4095},
    {33, 4095, 4095, 4095}, {5, 4097, 4104, 4100},  {3, 65536, 65536, 65536},
    {2, 65535, 65535, 65535}, {1000, 129, 129, 129}, {257, 4096, 4096, 4096},
    {64, 8192, 8192, 8192}, {9, 100, 120, 104},     {0, 4096, 4096, 4096},
    {20000, 256, 256, 256}, /* many rows a slot */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(default_path_shapes) {
  const int64_t *s = shapes[(_i / NSETS) % NSHAPES];
  const int kind = (int)(_i / (NSETS * NSHAPES));
  const dt3 d = dtype_sets[_i % NSETS];
  run_case(kind, s[0], s[1], s[2], s[3], d, 0, 0, 1, NULL);
  run_case(kind, s[0], s[1], s[2], s[3], d, 1, 0, 0, NULL);
}
END_TEST

/* Misaligned rows (an odd stride: scalar accesses) and in place. */
START_TEST(misaligned_and_in_place) {
  const int kind = (int)(_i / NSETS);
  const dt3 d = dtype_sets[_i % NSETS];
  run_case(kind, 13, 777, 779, 781, d, 1, 0, 1, NULL);
  if (scree_dtype_size(d.x) == scree_dtype_size(d.y)) {
    run_case(kind, 37, 4096, 4096, 4096, d, 1, 1, 1, NULL);
    run_case(kind, 11, 1001, 1003, 1003, d, 0, 1, 0, NULL);
  }
}
END_TEST

/* Bitwise the same dw twice over (the ordered sums). */
START_TEST(deterministic) {
  const int kind = _i;
  const dt3 d = {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16};
  const int64_t rows = 50000, cols = 1024;
  const size_t n = (size_t)(rows * cols);
  void *h = malloc(n * 2);
  scree_test_fill(h, d.x, n, 1.0);
  scree_devptr gx = scree_test_dalloc(ctx, n * 2), gw = scree_test_dalloc(ctx, cols * 4);
  scree_devptr gdx = scree_test_dalloc(ctx, n * 2), gdw = scree_test_dalloc(ctx, cols * 4);
  scree_devptr gdb = scree_test_dalloc(ctx, cols * 4);
  scree_test_h2d(ctx, gx, h, n * 2);
  float *a = malloc(cols * 8), *b = malloc(cols * 8);
  scree_test_fill(a, d.w, cols, 1.0);
  scree_test_h2d(ctx, gw, a, cols * 4);
  for (int t = 0; t < 2; t++) {
    scree_test_dpoison(ctx, gdw, cols * 4);
    scree_test_dpoison(ctx, gdb, cols * 4);
    scree_status st =
        kind == RMS ? scree_rmsnorm_backward(ctx, &(scree_rmsnorm_backward_args){
            .x = gx, .w = gw, .dy = gx, .dx = gdx, .dw = gdw, .rows = rows, .cols = cols,
            .x_dtype = d.x, .w_dtype = d.w, .y_dtype = d.y, .eps = 1e-6f}, NULL)
        : kind == ADD ? scree_add_rmsnorm_backward(ctx, &(scree_add_rmsnorm_backward_args){
            .h = gx, .w = gw, .dy = gx, .dh = gdx, .dw = gdw, .rows = rows, .cols = cols,
            .x_dtype = d.x, .w_dtype = d.w, .y_dtype = d.y, .eps = 1e-6f}, NULL)
        : scree_layernorm_backward(ctx, &(scree_layernorm_backward_args){
            .x = gx, .w = gw, .dy = gx, .dx = gdx, .dw = gdw, .db = gdb, .rows = rows,
            .cols = cols, .x_dtype = d.x, .w_dtype = d.w, .y_dtype = d.y, .eps = 1e-5f}, NULL);
    ck_assert_msg(st == SCREE_OK, "%s", scree_last_error(ctx));
    scree_test_sync(ctx);
    scree_test_d2h(ctx, t ? b : a, gdw, cols * 4);
    scree_test_d2h(ctx, (t ? b : a) + cols, gdb, cols * 4);
  }
  ck_assert_msg(!memcmp(a, b, kind == LN ? cols * 8 : cols * 4), "%s: dw differs between runs",
                names[kind]);
  scree_test_dfree(ctx, gx), scree_test_dfree(ctx, gw), scree_test_dfree(ctx, gdx);
  scree_test_dfree(ctx, gdw), scree_test_dfree(ctx, gdb);
  free(h), free(a), free(b);
}
END_TEST

/* Implementation "smem" (the cached columns' sums in shared memory) over
 * the public path's edge shapes, misaligned and in place, with and without
 * the saved statistics and dh_next: a row of 4096 cached by 128 threads,
 * rows of 1024 by 4 groups of 32, and rows of 16 by 16 groups of 8. */
static const scree__config smem_cfgs[] = {
    {1, {128, 1, 4, 8}}, {1, {32, 4, 8, 4}}, {1, {8, 16, 2, 1}}};
#define NSMEM (sizeof smem_cfgs / sizeof smem_cfgs[0])

START_TEST(smem_impl_shapes) {
  const int kind = (int)(_i / NSMEM);
  const scree__config *c = &smem_cfgs[_i % NSMEM];
  ck_assert_str_eq(ops[kind]->impls[c->impl].name, "smem");
  for (size_t i = 0; i < NSHAPES; i++) {
    const int64_t *s = shapes[i];
    const dt3 d = dtype_sets[i % NSETS];
    run_case(kind, s[0], s[1], s[2], s[3], d, 0, 0, 1, c);
    run_case(kind, s[0], s[1], s[2], s[3], d, 1, 0, 0, c);
  }
  const dt3 h = dtype_sets[0];
  run_case(kind, 13, 777, 779, 781, h, 1, 0, 1, c);
  run_case(kind, 37, 4096, 4096, 4096, h, 1, 1, 1, c);
  run_case(kind, 11, 1001, 1003, 1003, h, 0, 1, 0, c);
}
END_TEST

/* Implementation "smem": bitwise the same dw (and db) twice over. */
START_TEST(smem_impl_deterministic) {
  const int kind = _i;
  const scree__config *c = &smem_cfgs[0];
  const scree__variant var = {{SCREE_DTYPE_BF16, SCREE_DTYPE_FP32, SCREE_DTYPE_BF16}};
  const int64_t rows = 6000, cols = 4100; /* cached columns, streamed ones, a tail */
  const size_t n = (size_t)(rows * cols);
  void *h = malloc(n * 2);
  scree_test_fill(h, SCREE_DTYPE_BF16, n, 1.0);
  scree_devptr gx = scree_test_dalloc(ctx, n * 2), gw = scree_test_dalloc(ctx, cols * 4);
  scree_devptr gdx = scree_test_dalloc(ctx, n * 2), gdw = scree_test_dalloc(ctx, cols * 4);
  scree_devptr gdb = scree_test_dalloc(ctx, cols * 4);
  scree_test_h2d(ctx, gx, h, n * 2);
  float *a = malloc(cols * 8), *b = malloc(cols * 8);
  scree_test_fill(a, SCREE_DTYPE_FP32, cols, 1.0);
  scree_test_h2d(ctx, gw, a, cols * 4);
  scree_rmsnorm_backward_args ra = {.x = gx, .w = gw, .dy = gx, .dx = gdx, .dw = gdw,
                                    .rows = rows, .cols = cols, .x_dtype = SCREE_DTYPE_BF16,
                                    .w_dtype = SCREE_DTYPE_FP32, .y_dtype = SCREE_DTYPE_BF16,
                                    .eps = 1e-6f};
  scree_add_rmsnorm_backward_args aa = {.h = gx, .w = gw, .dy = gx, .dh = gdx, .dw = gdw,
                                        .rows = rows, .cols = cols,
                                        .x_dtype = SCREE_DTYPE_BF16,
                                        .w_dtype = SCREE_DTYPE_FP32,
                                        .y_dtype = SCREE_DTYPE_BF16, .eps = 1e-6f};
  scree_layernorm_backward_args la = {.x = gx, .w = gw, .dy = gx, .dx = gdx, .dw = gdw,
                                      .db = gdb, .rows = rows, .cols = cols,
                                      .x_dtype = SCREE_DTYPE_BF16, .w_dtype = SCREE_DTYPE_FP32,
                                      .y_dtype = SCREE_DTYPE_BF16, .eps = 1e-5f};
  const void *args = kind == RMS ? (const void *)&ra : kind == ADD ? (const void *)&aa : &la;
  for (int t = 0; t < 2; t++) {
    scree_test_dpoison(ctx, gdw, cols * 4);
    scree_test_dpoison(ctx, gdb, cols * 4);
    scree_status st = scree__run_exact(ctx, ops[kind], c, &var, args, NULL);
    ck_assert_msg(st == SCREE_OK, "%s", scree_last_error(ctx));
    scree_test_sync(ctx);
    scree_test_d2h(ctx, t ? b : a, gdw, cols * 4);
    scree_test_d2h(ctx, (t ? b : a) + cols, gdb, cols * 4);
  }
  ck_assert_msg(!memcmp(a, b, kind == LN ? cols * 8 : cols * 4),
                "%s impl=smem: dw differs between runs", names[kind]);
  scree_test_dfree(ctx, gx), scree_test_dfree(ctx, gw), scree_test_dfree(ctx, gdx);
  scree_test_dfree(ctx, gdw), scree_test_dfree(ctx, gdb);
  free(h), free(a), free(b);
}
END_TEST

/* Every config of the space: a row wholly cached with a tail, one twice
 * the cache (streamed columns), a tiny row. */
START_TEST(every_config) {
  const int kind = (int)(_i / NSETS);
  const dt3 d = dtype_sets[_i % NSETS];
  const scree__variant var = {{d.x, d.w, d.y}};
  size_t n;
  scree__config *cfgs = scree_test_checked_space(ctx, ops[kind], &var, &n);
  for (size_t i = 0; i < n; i++) {
    const scree__config *c = &cfgs[i];
    const int64_t cover = (int64_t)c->v[0] * c->v[2] * c->v[3];
    run_case(kind, c->v[1] * 3 + 1, cover - 1, cover, cover, d, i & 1, 0, 1, c);
    run_case(kind, 5, 2 * cover + 3, 2 * cover + 8, 2 * cover + 8, d, 0, 0, 1, c);
    run_case(kind, 2, 1, 8, 8, d, 1, 0, 0, c);
  }
  printf("every_config %s %s/%s/%s: %zu configs x 3 shapes passed\n", names[kind],
         scree_dtype_name(d.x), scree_dtype_name(d.w), scree_dtype_name(d.y), n);
  free(cfgs);
}
END_TEST

/* Every variant (27 dtype triples) on each op's check problem through the
 * public entry: the problem, reference hook and tolerances the tuner and
 * verify use (statistics recomputed; dh_next and db held). */
START_TEST(every_variant_check_problem) {
  const int kind = _i / 27;
  const scree__variant var = {{_i % 3, (_i / 3) % 3, (_i / 9) % 3}};
  static const int64_t rc[][2] = {{97, 4096}, {33, 4095}, {3, 65536}, {5, 1}};
  for (int s = 0; s < 4; s++) {
    unsigned char args[SCREE__ARGS_MAX] = {0};
    char shape[64];
    snprintf(shape, sizeof shape, "rows=%lld,cols=%lld", (long long)rc[s][0],
             (long long)rc[s][1]);
    char why[256];
    ck_assert_msg(!scree__shape_parse(ops[kind], shape, args, why, sizeof why), "%s", why);
    scree_test_check_public(ctx, ops[kind], &var, args, NULL, stream, "%s %s", names[kind],
                            shape);
  }
}
END_TEST

/* Every config the device's safelist allows (none until a sweep writes
 * lines), on the op's check problem adapted to its alignment: rows just
 * inside the config's register cache, twice past it, and rows of 1000. */
static int safelisted_shape(const scree__config *c, int i, void *args) {
  const int64_t cover = (int64_t)c->v[0] * c->v[2] * c->v[3];
  int64_t cols = i == 0 ? cover - 1 : i == 1 ? 2 * cover + 3 : 1000;
  if (cols > 65536) cols = 65536;
  char shape[64], why[128];
  snprintf(shape, sizeof shape, "rows=97,cols=%lld", (long long)(cols > 0 ? cols : 1));
  /* args is the op's zeroed struct: its shape fields by name. */
  return scree__shape_parse(safelisted_op, shape, args, why, sizeof why) == 0 && i < 3;
}

START_TEST(every_safelisted_config) {
  safelisted_op = ops[_i];
  const int ran = scree_test_check_safelisted(ctx, ops[_i], stream, safelisted_shape);
  printf("every_safelisted_config %s: %d runs\n", names[_i], ran);
}
END_TEST

static void setup(void) {
  /* exits 77 with a reason where there is no GPU */
  ops[0] = scree_test_op_setup(names[0], &ctx, &stream);
  for (int k = 1; k < 3; k++) ops[k] = scree__op_find(names[k]);
}

SCREE_TEST_MAIN(.name = "norm_backward_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .loops = SCREE_LOOPS({default_path_shapes, 3 * NSHAPES * NSETS},
                                     {misaligned_and_in_place, 3 * NSETS}, {deterministic, 3},
                                     {smem_impl_shapes, 3 * NSMEM},
                                     {smem_impl_deterministic, 3},
                                     {every_variant_check_problem, 3 * 27},
                                     {every_safelisted_config, 3}),
                .slow_loops = SCREE_LOOPS({every_config, 3 * NSETS}))
