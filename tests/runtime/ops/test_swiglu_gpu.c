/* test_swiglu_gpu.c - SwiGLU on the GPU against the CPU reference.
 * Label gpu: skipped (exit 77) with a one-line reason where there is none.
 * Random inputs, fresh each run (the seed is printed), reshaped as the op's
 * problems are (large gates); y poisoned with NaN before each launch so an
 * unwritten element fails, a guard region after it, padding between rows
 * checked untouched. Tolerance: one rounding of y (scree__tolerance). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"

SCREE__REFERENCE(swiglu);

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

enum { Y_OWN = 0, Y_OVER_GATE = 1, Y_OVER_UP = 2 };

typedef struct scase {
  int64_t rows, cols;
  int two;         /* gate and up in two tensors, else one [rows, 2 cols] */
  int64_t gs, us, ys; /* 0: the defaults */
  int64_t shift;   /* elements every pointer is moved past an aligned start */
  int where;       /* Y_OWN or in place over gate / up */
} scase;

/* Runs one call (with an explicit config if cfg != NULL, adapted to the
 * call as a plan would be) and checks every element of y and what must be
 * left alone. */
static void run_case(const scase *s, dt2 d, const scree__config *cfg) {
  const size_t ex = scree_dtype_size(d.x), ey = scree_dtype_size(d.y);
  const int64_t rows = s->rows, cols = s->cols;
  const int64_t gs = s->gs ? s->gs : (s->two ? cols : 2 * cols);
  const int64_t us = s->two ? (s->us ? s->us : cols) : gs;
  int64_t ys = s->ys ? s->ys : cols;
  if (s->where == Y_OVER_GATE) ys = gs;
  if (s->where == Y_OVER_UP) ys = us;
  const size_t guard = 256, sh = (size_t)s->shift;
  const size_t ng = (size_t)(rows * gs), nu = s->two ? (size_t)(rows * us) : 0;
  const size_t ny = (size_t)(rows * ys);
  void *hg = malloc((ng + sh) * ex + 16), *hu = malloc((nu + sh) * ex + 16);
  scree_test_fill(hg, d.x, ng, 1.0);
  scree_test_fill(hu, d.x, nu, 1.0);
  scree_swiglu_args shape = {.gate = 1, .up = s->two ? 1 : 0, .y = 1, .rows = rows, .cols = cols,
                             .gate_stride = gs, .up_stride = s->two ? us : 0, .dtype = d.x,
                             .y_dtype = d.y};
  op->shape_inputs(&shape, (void *const[]){hg});
  scree_devptr dg = scree_test_dalloc(ctx, (ng + sh) * ex + guard);
  scree_devptr du = s->two ? scree_test_dalloc(ctx, (nu + sh) * ex + guard) : 0;
  scree_devptr dy = s->where == Y_OWN ? scree_test_dalloc(ctx, (ny + sh) * ey + guard) : 0;
  scree_test_dpoison(ctx, dg, (ng + sh) * ex + guard);
  if (du) scree_test_dpoison(ctx, du, (nu + sh) * ex + guard);
  if (dy) scree_test_dpoison(ctx, dy, (ny + sh) * ey + guard);
  const scree_devptr g = dg + sh * ex, u = s->two ? du + sh * ex : g + (uint64_t)cols * ex;
  scree_test_h2d(ctx, g, hg, ng * ex);
  if (s->two) scree_test_h2d(ctx, u, hu, nu * ex);
  /* The expected contents of the buffer y lands in: in place, the input
   * with y's elements replaced; else NaN (the poison) with y's elements. */
  void *want;
  size_t nwant;
  scree_devptr dwant;
  if (s->where == Y_OWN) {
    nwant = ny, dwant = dy + sh * ey;
    want = malloc(nwant * ey + 16);
    memset(want, 0xff, nwant * ey);
  } else {
    const int over_gate_buf = s->where == Y_OVER_GATE || !s->two;
    nwant = over_gate_buf ? ng : nu, dwant = over_gate_buf ? g : u;
    want = malloc(nwant * ex + 16);
    memcpy(want, over_gate_buf ? hg : hu, nwant * ex);
  }
  scree_swiglu_args ra = shape;
  ra.y_stride = ys;
  char *ybase = want;
  if (s->where == Y_OVER_UP && !s->two) ybase += (size_t)cols * ex; /* up's half */
  void *ycopy_g = malloc(ng * ex + 16), *ycopy_u = malloc(nu * ex + 16);
  memcpy(ycopy_g, hg, ng * ex);
  memcpy(ycopy_u, hu, nu * ex);
  scree__ref_swiglu(&ra, s->two ? (void *const[]){ycopy_g, ycopy_u, ybase}
                                : (void *const[]){ycopy_g, ybase});
  scree_swiglu_args a = {.gate = g, .up = s->two ? u : 0, .rows = rows, .cols = cols,
                         .gate_stride = s->gs, .up_stride = s->two ? s->us : 0, .y_stride = ys,
                         .dtype = d.x, .y_dtype = d.y};
  a.y = s->where == Y_OWN ? dy + sh * ey : s->where == Y_OVER_GATE ? g : u;
  scree_status st;
  char cs[128] = "default";
  if (cfg) {
    scree__config c = *cfg;
    const scree__variant var = {{d.x, d.y}};
    op->impls[0].adapt(&c, &var, &a);
    scree__config_str(op, &c, cs, sizeof cs);
    st = scree__run_exact(ctx, op, &c, &var, &a, NULL);
  } else {
    st = scree_swiglu(ctx, &a, NULL);
  }
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  const size_t ew = s->where == Y_OWN ? ey : ex;
  void *got = malloc(nwant * ew + guard);
  scree_test_d2h(ctx, got, dwant, nwant * ew + guard);
  char what[256];
  snprintf(what, sizeof what,
           "rows=%lld cols=%lld two=%d gs=%lld us=%lld ys=%lld shift=%lld where=%d %s->%s "
           "config %s",
           (long long)rows, (long long)cols, s->two, (long long)gs, (long long)us, (long long)ys,
           (long long)s->shift, s->where, scree_dtype_name(d.x), scree_dtype_name(d.y), cs);
  double rtol, atol;
  scree__tolerance(d.y, &rtol, &atol);
  /* Row by row: y's elements within tolerance, everything else bytewise
   * (the poison or the inputs); then the guard past the buffer. */
  const int64_t pitch = s->where == Y_OWN ? ys : s->where == Y_OVER_GATE || !s->two ? gs : us;
  const int64_t off = s->where == Y_OVER_UP && !s->two ? cols : 0;
  for (int64_t r = 0; r < rows; r++) {
    const size_t row = (size_t)(r * pitch);
    size_t worst = 0;
    const size_t bad = scree__compare((char *)got + (row + (size_t)off) * ew,
                                      (char *)want + (row + (size_t)off) * ew, d.y, (size_t)cols,
                                      rtol, atol, &worst);
    ck_assert_msg(bad == 0, "%s: row %lld: %zu bad, e.g. col %zu got %.8g want %.8g", what,
                  (long long)r, bad, worst,
                  scree__load_elem((char *)got + (row + (size_t)off) * ew, d.y, worst),
                  scree__load_elem((char *)want + (row + (size_t)off) * ew, d.y, worst));
    ck_assert_msg(!memcmp((char *)got + row * ew, (char *)want + row * ew, (size_t)off * ew) &&
                      !memcmp((char *)got + (row + (size_t)(off + cols)) * ew,
                              (char *)want + (row + (size_t)(off + cols)) * ew,
                              (size_t)(pitch - off - cols) * ew),
                  "%s: row %lld: elements beside y written", what, (long long)r);
  }
  for (size_t i = 0; i < guard; i++)
    ck_assert_msg(((unsigned char *)got)[nwant * ew + i] == 0xff,
                  "%s: byte %zu past the buffer written", what, i);
  /* The inputs y does not alias are left as they were. */
  if (s->where != Y_OVER_GATE && (s->two || s->where == Y_OWN)) {
    void *back = malloc(ng * ex + 16);
    scree_test_d2h(ctx, back, g, ng * ex);
    ck_assert_msg(!memcmp(back, hg, ng * ex), "%s: gate written", what);
    free(back);
  }
  scree_test_dfree(ctx, dg);
  if (du) scree_test_dfree(ctx, du);
  if (dy) scree_test_dfree(ctx, dy);
  free(hg), free(hu), free(want), free(got), free(ycopy_g), free(ycopy_u);
}

/* The public path (default config, adapted to the call) over edge shapes:
 * one column, odd and prime widths, the largest rows, strides, starts
 * that allow only narrower vectors, in place over gate and over up. */
static const scase shapes[] = {
    {1, 1, 0, 0, 0, 0, 0, Y_OWN},         {7, 1, 1, 0, 0, 0, 0, Y_OWN},
    {1, 4095, 0, 0, 0, 0, 0, Y_OWN},      {33, 4095, 1, 0, 0, 0, 0, Y_OWN},
    {5, 4097, 1, 4104, 4100, 4098, 0, Y_OWN}, {3, 14336, 0, 0, 0, 0, 0, Y_OWN},
    {2, 65537, 1, 0, 0, 0, 0, Y_OWN},     {64, 8192, 0, 0, 0, 0, 0, Y_OWN},
    {9, 100, 0, 208, 0, 104, 0, Y_OWN},   {1000, 129, 1, 0, 0, 0, 0, Y_OWN},
    {300000, 256, 0, 0, 0, 0, 0, Y_OWN},  {4096, 4096, 1, 0, 0, 0, 0, Y_OWN},
    {17, 1000, 0, 0, 0, 0, 1, Y_OWN},     {17, 1000, 1, 0, 0, 0, 2, Y_OWN},
    {11, 1001, 0, 0, 0, 0, 0, Y_OVER_GATE}, {11, 1001, 0, 0, 0, 0, 0, Y_OVER_UP},
    {37, 4096, 1, 0, 0, 0, 0, Y_OVER_GATE}, {37, 4096, 1, 4104, 4096, 0, 0, Y_OVER_UP},
    {3, 33, 0, 80, 0, 0, 3, Y_OVER_UP},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(default_path_shapes) {
  const scase *s = &shapes[_i / NSETS];
  const dt2 d = dtype_sets[_i % NSETS];
  /* In place needs y of the inputs' element size (the API refuses others). */
  if (s->where != Y_OWN && scree_dtype_size(d.x) != scree_dtype_size(d.y)) return;
  run_case(s, d, NULL);
}
END_TEST

START_TEST(zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_swiglu_args a = {.rows = 0, .cols = 128};
  ck_assert_int_eq(scree_swiglu(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
}
END_TEST

/* The op's own problems through the harness (what the tuner checks), both
 * forms, through the public entry. */
START_TEST(harness_problems) {
  static const int64_t rc[][3] = {{97, 4096, 0}, {97, 4096, 1}, {5, 1, 0}, {13, 14336, 1},
                                  {97, 129, 0}};
  for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++)
    for (size_t k = 0; k < NSETS; k++) {
      const scree__variant var = {{dtype_sets[k].x, dtype_sets[k].y}};
      scree_swiglu_args a = {.rows = rc[i][0], .cols = rc[i][1],
                             .up_stride = rc[i][2] ? rc[i][1] : 0};
      scree_test_check_public(ctx, op, &var, &a, NULL, stream, "%s->%s",
                              scree_dtype_name(dtype_sets[k].x), scree_dtype_name(dtype_sets[k].y));
    }
}
END_TEST

/* Configs beyond the default: every config the device's safelist allows
 * for the op, and a fixed spread over the space (every value of every
 * field), each on shapes with a scalar tail and several chunks per lane. */
static const scree__config spread[] = {
    {0, {8, 4, 8, 1}},   {0, {16, 16, 4, 2}}, {0, {32, 1, 2, 16}}, {0, {64, 8, 8, 4}},
    {0, {128, 1, 8, 4}}, {0, {256, 2, 1, 8}}, {0, {512, 1, 4, 2}}, {0, {1024, 1, 8, 1}},
    {0, {8, 16, 1, 16}}, {0, {32, 4, 8, 8}},  {0, {128, 8, 2, 1}},
};

static int configs_for(const scree__variant *var, scree__config *out, int cap) {
  int n = 0;
  if (ctx->safelist)
    for (int e = 0; e < ctx->safelist->n && n < cap; e++) {
      const scree__sl_entry *en = &ctx->safelist->entries[e];
      if (en->op != op || en->verb == SCREE__SL_DENY) continue;
      char vs[128];
      scree__variant_str(op, var, vs, sizeof vs);
      if (strcmp(en->dtype, "*") && strcmp(en->dtype, vs)) continue;
      out[n++] = en->cfg;
    }
  for (size_t i = 0; i < sizeof spread / sizeof spread[0] && n < cap; i++) out[n++] = spread[i];
  return n;
}

START_TEST(every_listed_config) {
  const dt2 d = dtype_sets[_i];
  const scree__variant var = {{d.x, d.y}};
  scree__config cfgs[256];
  const int n = configs_for(&var, cfgs, 256);
  const int listed = n - (int)(sizeof spread / sizeof spread[0]); /* safelist lines first */
  scree__target t;
  scree__target_of(ctx, &t);
  int ran = 0, skipped = 0;
  for (int i = 0; i < n; i++) {
    char why[256];
    /* A "*" line need not fit every variant (the register estimate doubles
     * for fp32): the tuner skips it there, and so does this test. The
     * spread must fit. */
    if (i < listed && !scree__config_check(op, &cfgs[i], &var, &t, NULL, 0)) {
      skipped++;
      continue;
    }
    ck_assert_msg(scree__config_check(op, &cfgs[i], &var, &t, why, sizeof why), "%s", why);
    const scree__config *c = &cfgs[i];
    const int64_t cover = (int64_t)c->v[0] * c->v[2] * c->v[3];
    const scase cases[] = {
        {c->v[1] * 3 + 1, cover - 1, 0, 0, 0, 0, 0, Y_OWN},
        {5, 3 * cover + 3, 1, 3 * cover + 8, 3 * cover + 16, 0, 0, Y_OWN},
        {2, 1, 1, 8, 8, 8, 0, Y_OWN},
        {c->v[1] + 2, 2 * cover, 0, 0, 0, 0, 0, scree_dtype_size(d.x) == scree_dtype_size(d.y)
                                                     ? Y_OVER_UP : Y_OWN},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k], d, c);
    ran++;
  }
  printf("every_listed_config %s->%s: %d configs x 4 shapes passed, %d listed skipped (check)\n",
         scree_dtype_name(d.x), scree_dtype_name(d.y), ran, skipped);
}
END_TEST

static void setup(void) {
  op = scree_test_op_setup("swiglu", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "swiglu_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_rows_launches_nothing, harness_problems),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NSETS}),
                .slow_loops = SCREE_LOOPS({every_listed_config, NSETS}))
