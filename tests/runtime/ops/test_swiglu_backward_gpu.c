/* test_swiglu_backward_gpu.c - the SwiGLU backward on the GPU against the
 * CPU reference. Label gpu: skipped (exit 77) with a one-line reason where
 * there is none.
 *
 * Random inputs, fresh each run (the seed is printed), reshaped as the op's
 * problems are (large gates: |g| up to a few hundred); the outputs poisoned
 * with NaN before each launch so an unwritten element fails, a guard region
 * after each output buffer, padding between rows checked untouched (the
 * poison, or in place the inputs' own values). Tolerance: one rounding of
 * the outputs' dtype (scree__tolerance: fp32 1e-6 + 1e-5 |ref|, fp16 1e-5
 * + 2e-3 |ref|, bf16 1e-5 + 1.6e-2 |ref|): the kernel's fp32 math (expf,
 * one division) errs by a few fp32 ulps of its terms, 1 + g (1 - s)
 * included where it cancels (g near -1.28), which stays below atol.
 *
 * Forms: gate and up in two tensors or one fused [rows, 2 cols]; dgate and
 * dup likewise, in every combination; in place (dgate = gate, dup = up).
 * Shapes: cols 1, odd, large; rows 0 (nothing launched), 1 and up to
 * 300000; padded strides; starts misaligned for 16-byte vectors. Configs:
 * the default through the public entry, every config the device's safelist
 * allows, and a fixed spread of the space through scree__run_exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/rowwise_backward_ref.h"

SCREE__REFERENCE(swiglu_backward);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

typedef struct dt2 {
  scree_dtype x, dy;
} dt2;

static const dt2 dtype_sets[] = {
    {SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}, {SCREE_DTYPE_BF16, SCREE_DTYPE_BF16},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP32}, {SCREE_DTYPE_BF16, SCREE_DTYPE_FP32},
    {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16},
};
#define NSETS (sizeof dtype_sets / sizeof dtype_sets[0])

typedef struct scase {
  int64_t rows, cols;
  int two_in, two_out; /* separate tensors, else one fused [rows, 2 cols] */
  int64_t gs, us;      /* input strides (0: the defaults) */
  int64_t os;          /* output strides, dgate's and dup's alike (0: the defaults) */
  int64_t shift;       /* elements every pointer is moved past an aligned start */
  int in_place;        /* dgate = gate, dup = up (the forms and strides of the inputs) */
} scase;

/* A host mirror of one device buffer, and its device copy. */
typedef struct buf {
  void *h;
  scree_devptr d, base;
  size_t n, esize;
} buf;

static buf make_buf(size_t n, size_t esize, size_t sh, size_t guard) {
  buf b = {.n = n, .esize = esize};
  b.h = malloc(n * esize + 16);
  b.base = scree_test_dalloc(ctx, (n + sh) * esize + guard);
  scree_test_dpoison(ctx, b.base, (n + sh) * esize + guard);
  b.d = b.base + sh * esize;
  return b;
}

/* Runs one call (with an explicit config if cfg != NULL, adapted to the
 * call as a plan would be) and checks every output element and what must
 * be left alone. */
static void run_case(const scase *s, dt2 d, const scree__config *cfg) {
  const size_t ex = scree_dtype_size(d.x), eg = scree_dtype_size(d.dy);
  const int64_t rows = s->rows, cols = s->cols;
  const int two_out = s->in_place ? s->two_in : s->two_out;
  const int64_t gs = s->gs ? s->gs : (s->two_in ? cols : 2 * cols);
  const int64_t us = s->two_in ? (s->us ? s->us : cols) : gs;
  const int64_t dgs = s->in_place ? gs : s->os ? s->os : (two_out ? cols : 2 * cols);
  const int64_t dus = s->in_place ? us : two_out ? (s->os ? s->os : cols) : dgs;
  const size_t guard = 256, sh = (size_t)s->shift;
  /* Buffers: 0 gate (or gate_up), 1 up, 2 dy, 3 dgate (or dgate_up), 4 dup. */
  buf b[5] = {{0}};
  b[0] = make_buf((size_t)(rows * gs), ex, sh, guard);
  if (s->two_in) b[1] = make_buf((size_t)(rows * us), ex, sh, guard);
  b[2] = make_buf((size_t)(rows * cols), eg, sh, guard);
  if (!s->in_place) {
    b[3] = make_buf((size_t)(rows * dgs), ex, sh, guard);
    if (two_out) b[4] = make_buf((size_t)(rows * dus), ex, sh, guard);
  }
  scree_test_fill(b[0].h, d.x, b[0].n, 1.0);
  if (s->two_in) scree_test_fill(b[1].h, d.x, b[1].n, 1.0);
  scree_test_fill(b[2].h, d.dy, b[2].n, 1.0);
  scree_swiglu_backward_args shape = {.rows = rows, .cols = cols, .gate_stride = gs,
                                      .up = s->two_in, .up_stride = s->two_in ? us : 0,
                                      .dtype = d.x, .dy_dtype = d.dy};
  op->shape_inputs(&shape, (void *const[]){b[0].h});
  for (int i = 0; i < 3; i++)
    if (b[i].h) scree_test_h2d(ctx, b[i].d, b[i].h, b[i].n * b[i].esize);
  /* Expected contents of the output buffers: in place the inputs with the
   * gradients written over them; else the poison with the gradients. */
  void *want[5] = {0};
  for (int i = 0; i < 5; i++) {
    if (!b[i].h) continue;
    want[i] = malloc(b[i].n * b[i].esize + 16);
    if (s->in_place)
      memcpy(want[i], b[i].h, b[i].n * b[i].esize);
    else
      memset(want[i], 0xff, b[i].n * b[i].esize);
  }
  const size_t half = (size_t)cols * ex;
  const int og = s->in_place ? 0 : 3, ou = s->in_place ? 1 : 4;
  const int two_o = s->in_place ? s->two_in : two_out;
  char *wdg = want[og], *wdu = two_o ? want[ou] : wdg + half;
  const char *hgate = b[0].h, *hup = s->two_in ? b[1].h : hgate + half;
  if (s->in_place) hgate = wdg, hup = wdu;
  scree__swiglu_backward_ref(hgate, gs, hup, us, b[2].h, cols, wdg, dgs, wdu, dus, rows, cols,
                             d.x, d.dy);
  scree_swiglu_backward_args a = {.gate = b[0].d, .up = s->two_in ? b[1].d : 0, .dy = b[2].d,
                                  .rows = rows, .cols = cols, .gate_stride = s->gs,
                                  .up_stride = s->two_in ? s->us : 0, .dtype = d.x,
                                  .dy_dtype = d.dy};
  if (s->in_place) {
    a.dgate = a.gate, a.dup = a.up, a.dgate_stride = gs, a.dup_stride = s->two_in ? us : 0;
  } else {
    a.dgate = b[3].d, a.dup = two_out ? b[4].d : 0;
    a.dgate_stride = s->os, a.dup_stride = two_out ? s->os : 0;
  }
  scree_status st;
  char cs[128] = "default";
  if (cfg) {
    scree__config c = *cfg;
    const scree__variant var = {{d.x, d.dy}};
    op->impls[0].adapt(&c, &var, &a);
    scree__config_str(op, &c, cs, sizeof cs);
    st = scree__run_exact(ctx, op, &c, &var, &a, NULL);
  } else {
    st = scree_swiglu_backward(ctx, &a, NULL);
  }
  char what[256];
  snprintf(what, sizeof what,
           "rows=%lld cols=%lld in=%s out=%s gs=%lld us=%lld os=%lld shift=%lld in_place=%d "
           "%s/%s config %s",
           (long long)rows, (long long)cols, s->two_in ? "two" : "fused",
           two_o ? "two" : "fused", (long long)gs, (long long)us, (long long)s->os,
           (long long)s->shift, s->in_place, scree_dtype_name(d.x), scree_dtype_name(d.dy), cs);
  ck_assert_msg(st == SCREE_OK, "%s: %s: %s", what, scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  double rtol, atol;
  scree__tolerance(d.x, &rtol, &atol);
  /* Each output buffer: the gradient elements within tolerance, the rest
   * bytewise, the guard after it untouched; dy (and the inputs not written)
   * as they were. */
  const int outs[2] = {og, ou};
  for (int k = 0; k < (two_o ? 2 : 1); k++) {
    const buf *o = &b[outs[k]];
    void *got = malloc(o->n * o->esize + 16);
    scree_test_d2h(ctx, got, o->d, o->n * o->esize);
    scree_test_check_guard(ctx, o->d + o->n * o->esize, guard, k ? "dup" : "dgate");
    const int64_t pitch = k ? dus : dgs;
    scree_test_compare_rows(got, want[outs[k]], d.x, rows, two_o ? cols : 2 * cols, pitch, rtol,
                            atol, two_o ? (k ? "dup" : "dgate") : "dgate_up", "%s", what);
    free(got);
  }
  for (int i = 0; i < 3; i++) {
    if (!b[i].h || (s->in_place && i < 2)) continue;
    void *back = malloc(b[i].n * b[i].esize + 16);
    scree_test_d2h(ctx, back, b[i].d, b[i].n * b[i].esize);
    ck_assert_msg(!memcmp(back, b[i].h, b[i].n * b[i].esize), "%s: input %d written", what, i);
    free(back);
  }
  for (int i = 0; i < 5; i++) {
    if (b[i].h) scree_test_dfree(ctx, b[i].base);
    free(b[i].h), free(want[i]);
  }
}

/* The public path (default config, adapted to the call) over edge shapes:
 * one column, odd and prime widths, large rows, strides, starts that allow
 * only narrower vectors, every form, in place. */
static const scase shapes[] = {
    /* rows, cols, two_in, two_out, gs, us, os, shift, in_place */
    {1, 1, 0, 0, 0, 0, 0, 0, 0},          {7, 1, 1, 1, 0, 0, 0, 0, 0},
    {1, 4095, 0, 1, 0, 0, 0, 0, 0},       {33, 4095, 1, 0, 0, 0, 0, 0, 0},
    {5, 4097, 1, 1, 4104, 4100, 4098, 0, 0}, {3, 14336, 0, 0, 0, 0, 0, 0, 0},
    {2, 65537, 1, 1, 0, 0, 0, 0, 0},      {64, 8192, 0, 0, 0, 0, 0, 0, 0},
    {9, 100, 0, 0, 208, 0, 216, 0, 0},    {1000, 129, 1, 0, 0, 0, 0, 0, 0},
    {300000, 256, 0, 0, 0, 0, 0, 0, 0},   {4096, 4096, 1, 1, 0, 0, 0, 0, 0},
    {17, 1000, 0, 0, 0, 0, 0, 1, 0},      {17, 1000, 1, 1, 0, 0, 0, 2, 0},
    {17, 1001, 0, 1, 0, 0, 0, 3, 0},      {11, 1001, 0, 0, 0, 0, 0, 0, 1},
    {37, 4096, 1, 1, 0, 0, 0, 0, 1},      {37, 4096, 1, 1, 4104, 4096, 0, 0, 1},
    {3, 33, 0, 0, 80, 0, 0, 3, 1},        {5, 3, 0, 0, 0, 0, 0, 1, 1},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(default_path_shapes) {
  run_case(&shapes[_i / NSETS], dtype_sets[_i % NSETS], NULL);
}
END_TEST

START_TEST(zero_rows_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_swiglu_backward_args a = {.rows = 0, .cols = 128};
  ck_assert_int_eq(scree_swiglu_backward(ctx, &a, NULL), SCREE_OK);
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
      const scree__variant var = {{dtype_sets[k].x, dtype_sets[k].dy}};
      scree_swiglu_backward_args a = {.rows = rc[i][0], .cols = rc[i][1],
                                      .up_stride = rc[i][2] ? rc[i][1] : 0};
      scree_test_check_public(ctx, op, &var, &a, NULL, stream, "%s/%s",
                              scree_dtype_name(dtype_sets[k].x),
                              scree_dtype_name(dtype_sets[k].dy));
    }
}
END_TEST

/* Configs beyond the default: every config the device's safelist allows
 * for the op, and a fixed spread over the space (every value of every
 * field; each fits the register estimate of the fp32 variant too), each
 * on shapes with a scalar tail and several chunks per lane. */
static const scree__config spread[] = {
    {0, {8, 4, 8, 1}},   {0, {16, 16, 4, 2}}, {0, {32, 1, 2, 16}}, {0, {64, 8, 8, 2}},
    {0, {128, 1, 8, 4}}, {0, {256, 2, 1, 8}}, {0, {512, 1, 4, 2}}, {0, {1024, 1, 4, 1}},
    {0, {8, 16, 1, 16}}, {0, {32, 4, 8, 4}},  {0, {128, 8, 2, 1}},
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
  const scree__variant var = {{d.x, d.dy}};
  scree__config cfgs[256];
  const int n = configs_for(&var, cfgs, 256);
  const int listed = n - (int)(sizeof spread / sizeof spread[0]); /* safelist lines first */
  scree__target t;
  scree__target_of(ctx, &t);
  int ran = 0, skipped = 0;
  for (int i = 0; i < n; i++) {
    char why[256];
    /* A "*" line need not fit every variant (the register estimate grows
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
        {c->v[1] * 3 + 1, cover - 1, 0, 0, 0, 0, 0, 0, 0},
        {5, 3 * cover + 3, 1, 1, 3 * cover + 8, 3 * cover + 16, 3 * cover + 8, 0, 0},
        {2, 1, 1, 0, 8, 8, 8, 0, 0},
        {c->v[1] + 2, 2 * cover, 0, 0, 0, 0, 0, 0, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k], d, c);
    ran++;
  }
  printf("every_listed_config %s/%s: %d configs x 4 shapes passed, %d listed skipped (check)\n",
         scree_dtype_name(d.x), scree_dtype_name(d.dy), ran, skipped);
}
END_TEST

static void setup(void) {
  op = scree_test_op_setup("swiglu_backward", &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = "swiglu_backward_gpu", .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(zero_rows_launches_nothing, harness_problems),
                .loops = SCREE_LOOPS({default_path_shapes, NSHAPES * NSETS}),
                .slow_loops = SCREE_LOOPS({every_listed_config, NSETS}))
