/* test_attention_gpu.c - varlen attention on the GPU against the CPU
 * reference (label gpu; skipped with a reason where there is no GPU).
 *
 * Random inputs, fresh each run (the seed is printed); out and lse are
 * poisoned (NaN) before every launch, so an unwritten element fails, and
 * NaN never passes. Tolerances (ops/attention.c, stated per output): out
 * |got - ref| <= 4e-3 + 4e-3 |ref| in fp16, 2e-2 + 2e-2 |ref| in bf16 (two
 * roundings of the dtype: P before P.V, and the output); lse 2e-3 + 1e-4
 * |ref|, and -inf (a row with no key) exactly.
 *
 * Batches mix the lengths {0, 1, 7, 63, 64, 65, 127, 128, 129, 1000, 2048,
 * 4097}, with key lengths different from query lengths; every head_dim, both
 * dtypes, causal and not, MHA, GQA 32:8, MQA 8:1, sliding windows, softcap
 * (both implementations), strided packed qkv, every schedule, every
 * safelisted config, a 128k-token sequence, and SCREE_VALIDATE's checks of
 * device-side cu_seqlens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"

SCREE__REFERENCE(attention);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

static const int64_t LQ[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 1000, 2048, 4097};
static const int64_t LK[] = {5, 0, 9, 63, 100, 64, 128, 127, 300, 1000, 2100, 4097};
#define NL ((int)(sizeof LQ / sizeof LQ[0]))

typedef struct acase {
  scree_dtype dtype;
  int d, causal, hq, hkv;
  int64_t wl, wr; /* -1: unbounded */
  const int64_t *lq, *lk;
  int n;
} acase;

static scree__variant variant_of(const acase *c) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = c->dtype;
  v.v[1] = c->d;
  v.v[2] = c->causal;
  v.v[3] = c->wl >= 0 || (c->wr >= 0 && !c->causal);
  return v;
}

static void describe(const acase *c, char *buf, size_t n) {
  snprintf(buf, n, "%s d=%d %s %d:%d window(%lld,%lld), %d sequences",
           scree_dtype_name(c->dtype), c->d, c->causal ? "causal" : "noncausal", c->hq, c->hkv,
           (long long)c->wl, (long long)c->wr, c->n);
}

/* The case's shape fields (its lengths go in lens_of). */
static scree_attention_args shape_of(const acase *c) {
  scree_attention_args a;
  memset(&a, 0, sizeof a);
  a.heads_q = c->hq;
  a.heads_kv = c->hkv;
  a.head_dim = c->d;
  a.window_left = c->wl;
  a.window_right = c->wr;
  return a;
}

static scree__lens lens_of(const acase *c) { return (scree__lens){c->n, c->lq, c->lk}; }

/* Through the public entry (the default config, adapted to the call). */
static void check_public(const acase *c) {
  const scree_attention_args a = shape_of(c);
  const scree__variant var = variant_of(c);
  const scree__lens lens = lens_of(c);
  char what[160];
  describe(c, what, sizeof what);
  scree_test_check_public(ctx, op, &var, &a, &lens, stream, "%s", what);
}

/* One problem, several explicit configs. */
static int check_configs(const acase *c, const scree__config *cfgs, int n) {
  const scree_attention_args a = shape_of(c);
  const scree__variant var = variant_of(c);
  const scree__lens lens = lens_of(c);
  scree__run r;
  scree_test_make(ctx, op, &var, &a, &lens, &r);
  scree__target t;
  scree__target_of(ctx, &t);
  char what[160];
  describe(c, what, sizeof what);
  int ran = 0;
  for (int i = 0; i < n; i++) {
    if (!scree__config_check(op, &cfgs[i], &var, &t, NULL, 0)) continue;
    scree_test_check_config(ctx, &r, op, &cfgs[i], &var, stream, "%s", what);
    ran++;
  }
  scree__run_free(ctx, &r);
  return ran;
}

/* Every head_dim x dtype x causal, MHA, through the public entry. */
START_TEST(head_dims_dtypes_causal) {
  static const int dims[] = {32, 64, 96, 128, 256};
  const int d = dims[_i / 4];
  const acase c = {_i % 2 ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP16, d, (_i / 2) % 2, 4, 4,
                   -1, -1, LQ, LK, NL};
  check_public(&c);
}
END_TEST

/* GQA 32:8 and MQA 8:1 (K and V read in place), causal and not. */
START_TEST(gqa_mqa) {
  const acase cases[] = {
      {SCREE_DTYPE_BF16, 128, 1, 32, 8, -1, -1, LQ, LK, NL},
      {SCREE_DTYPE_FP16, 128, 0, 32, 8, -1, -1, LQ, LQ, NL},
      {SCREE_DTYPE_FP16, 64, 1, 8, 1, -1, -1, LQ, LK, NL},
      {SCREE_DTYPE_BF16, 64, 0, 8, 1, -1, -1, LQ, LK, NL},
  };
  check_public(&cases[_i]);
}
END_TEST

/* Sliding windows, left and right, with and without causal. */
START_TEST(windows) {
  const acase cases[] = {
      {SCREE_DTYPE_FP16, 64, 1, 4, 2, 100, -1, LQ, LK, NL},
      {SCREE_DTYPE_BF16, 128, 0, 4, 4, 64, 33, LQ, LK, NL},
      {SCREE_DTYPE_FP16, 128, 0, 4, 4, -1, 0, LQ, LK, NL},
      {SCREE_DTYPE_FP16, 32, 0, 2, 2, 0, 0, LQ, LQ, NL},
      {SCREE_DTYPE_BF16, 256, 1, 2, 1, 1000, 5, LQ, LK, NL},
  };
  check_public(&cases[_i]);
}
END_TEST

/* Every schedule and a spread of tile shapes, on two head sizes. */
START_TEST(schedules_and_tiles) {
  scree__config all[512];
  const int n = scree__config_space(op, all, 512);
  const acase cases[] = {
      {SCREE_DTYPE_FP16, 64, 1, 4, 2, -1, -1, LQ, LK, NL},
      {SCREE_DTYPE_BF16, 128, 0, 4, 4, -1, -1, LQ, LK, NL},
  };
  /* Every config of the space would take minutes: every fifth (the space
   * is ordered so that this still covers each value of each field). */
  scree__config pick[128];
  int m = 0;
  for (int i = _i; i < n && m < 128; i += 5) pick[m++] = all[i];
  const int ran = check_configs(&cases[_i], pick, m);
  printf("schedules_and_tiles case %d: %d configs ran\n", _i, ran);
  ck_assert_int_gt(ran, 5);
}
END_TEST

/* Softcap (Gemma 2) on the generic implementation (its default config under
 * every schedule), the hopper one (its default config and one without the
 * softmax / P V overlap; sm_90 with tensor maps only) and the public entry.
 * The explicit scales make scale * q.k of normal(0, 1) inputs about 4 to 11
 * in standard deviation, so tanh saturates: before the kernels run, the case
 * checks that the reference without softcap is outside the tolerance on a
 * good share of out, so a kernel that ignores softcap fails it. */
START_TEST(softcap) {
  static const struct {
    acase c;
    float scale, softcap;
  } cases[] = {
      {{SCREE_DTYPE_FP16, 64, 1, 4, 2, -1, -1, LQ, LK, NL}, 0.5f, 5.0f},
      {{SCREE_DTYPE_BF16, 128, 0, 4, 4, 64, 33, LQ, LK, NL}, 1.0f, 20.0f},
      {{SCREE_DTYPE_FP16, 128, 1, 4, 1, 100, -1, LQ, LK, NL}, 0.5f, 5.0f},
      {{SCREE_DTYPE_BF16, 64, 0, 8, 2, -1, -1, LQ, LQ, NL}, 1.0f, 20.0f},
      {{SCREE_DTYPE_FP16, 256, 1, 2, 1, -1, -1, LQ, LK, NL}, 0.5f, 30.0f},
      {{SCREE_DTYPE_BF16, 96, 1, 4, 2, 200, -1, LQ, LK, NL}, 1.0f, 5.0f},
  };
  const acase *c = &cases[_i].c;
  scree_attention_args a = shape_of(c);
  a.scale = cases[_i].scale;
  a.softcap = cases[_i].softcap;
  const scree__variant var = variant_of(c);
  const scree__lens lens = lens_of(c);
  char what[256], shape[160];
  describe(c, shape, sizeof shape);
  snprintf(what, sizeof what, "%s, scale %g, softcap %g", shape, (double)a.scale,
           (double)a.softcap);

  /* Not vacuous: out without softcap (buffers in the problem's order q, k,
   * v, cu_seqlens_q, cu_seqlens_k, out, lse) against the reference. */
  scree__run r;
  scree_test_make(ctx, op, &var, &a, &lens, &r);
  const scree_attention_args *pa = (const scree_attention_args *)r.p.args;
  scree_attention_args plain = *pa;
  plain.softcap = 0;
  const size_t nout = r.p.bufs[5].count, nlse = r.p.bufs[6].count;
  void *out = malloc(nout * 2);
  float *lse = malloc(nlse * sizeof *lse);
  ck_assert(out && lse);
  void *const host[] = {r.host[0], r.host[1], r.host[2], r.host[3], r.host[4], out, lse};
  scree__ref_attention(&plain, host);
  size_t worst = 0;
  const size_t off = scree__compare(out, r.host[5], c->dtype, nout, r.p.bufs[5].rtol,
                                    r.p.bufs[5].atol, &worst);
  printf("softcap case %d (%s): without softcap %zu of %zu out elements outside the tolerance "
         "(worst: %g for %g)\n", _i, what, off, nout, scree__load_elem(out, c->dtype, worst),
         scree__load_elem(r.host[5], c->dtype, worst));
  ck_assert_msg(off > nout / 20, "%s: softcap moves only %zu of %zu out elements", what, off,
                nout);
  free(out), free(lse);

  scree__target t;
  scree__target_of(ctx, &t);
  scree__config cfgs[5];
  scree__target gt = t;
  gt.tensor_maps = 0; /* the generic implementation's defaults */
  for (int s = 0; s < 3; s++) {
    op->default_config(&gt, &var, pa, &cfgs[s]);
    cfgs[s].v[5] = s; /* sched */
  }
  int n = 3;
  if (t.sm == 90 && t.tensor_maps && (c->d == 64 || c->d == 128)) {
    op->default_config(&t, &var, pa, &cfgs[n]);
    ck_assert_str_eq(op->impls[cfgs[n].impl].name, "hopper");
    cfgs[n + 1] = cfgs[n];
    cfgs[n + 1].v[4] = !cfgs[n].v[4]; /* ovl */
    n += 2;
  }
  int ran = 0;
  for (int i = 0; i < n; i++) {
    if (!scree__config_check(op, &cfgs[i], &var, &t, NULL, 0)) continue;
    scree_test_check_config(ctx, &r, op, &cfgs[i], &var, stream, "%s", what);
    ran++;
  }
  scree__run_free(ctx, &r);
  printf("softcap case %d: %d of %d configs ran\n", _i, ran, n);
  ck_assert_int_eq(ran, n);
  scree_test_check_public(ctx, op, &var, &a, &lens, stream, "%s", what);
}
END_TEST

/* Every config the device's safelist allows runs at least once: on its own
 * variant for dtype-specific lines, else at the example variant's head_dim
 * causal and not. */
START_TEST(every_safelisted_config) {
  int ran = 0, e = -1;
  scree__variant var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &var));) {
    for (int causal = 0; causal < 2; causal++) {
      acase c = {(scree_dtype)var.v[0], var.v[1], strcmp(en->dtype, "*") ? var.v[2] : causal,
                 4, 2, var.v[3] ? 128 : -1, -1, LQ, LK, NL};
      ran += check_configs(&c, &en->cfg, 1);
      if (strcmp(en->dtype, "*")) break;
    }
  }
  printf("every_safelisted_config: %d runs\n", ran);
}
END_TEST

/* Long sequences: one of 128k tokens under a window (its reference stays
 * cheap), one of 32k causal, and a short one beside them. */
START_TEST(long_sequences) {
  static const int64_t l1[] = {131072, 17}, l2[] = {32768, 1};
  const acase c1 = {SCREE_DTYPE_BF16, 64, 1, 2, 1, 256, -1, l1, l1, 2};
  const acase c2 = {SCREE_DTYPE_FP16, 128, 1, 1, 1, -1, -1, l2, l2, 2};
  check_public(&c1);
  check_public(&c2);
}
END_TEST

/* Packed qkv: one [T, 3, H, d] buffer and one [T, H, 3, d] buffer, read in
 * place through strides; out strided too. */
START_TEST(packed_qkv) {
  const int H = 4, d = 64;
  int64_t T = 0;
  for (int i = 0; i < NL; i++) T += LQ[i];
  int32_t cu[NL + 1];
  cu[0] = 0;
  for (int i = 0; i < NL; i++) cu[i + 1] = cu[i] + (int32_t)LQ[i];
  const size_t nqkv = (size_t)T * 3 * H * d, nout = (size_t)T * 2 * H * d;
  uint16_t *h = malloc(nqkv * 2), *got = malloc(nout * 2), *want = malloc(nout * 2);
  float *lse = malloc((size_t)T * H * 4), *lse_want = malloc((size_t)T * H * 4);
  scree_test_fill(h, SCREE_DTYPE_BF16, nqkv, 1.0);
  scree_devptr dqkv = scree_test_dalloc(ctx, nqkv * 2), dout = scree_test_dalloc(ctx, nout * 2),
               dl = scree_test_dalloc(ctx, (size_t)T * H * 4), dcu = scree_test_dalloc(ctx, sizeof cu);
  scree_test_h2d(ctx, dqkv, h, nqkv * 2);
  scree_test_h2d(ctx, dcu, cu, sizeof cu);
  for (int layout = 0; layout < 2; layout++) {
    scree_attention_args a = {.batch = NL, .total_q = T, .total_k = T, .max_seqlen_q = 4097,
                              .max_seqlen_k = 4097, .heads_q = H, .heads_kv = H, .head_dim = d,
                              .dtype = SCREE_DTYPE_BF16, .causal = 1, .window_left = -1,
                              .window_right = -1};
    a.q_token_stride = a.k_token_stride = a.v_token_stride = 3 * H * d;
    a.out_token_stride = 2 * H * d; /* every other row of out is padding */
    const int64_t part = layout == 0 ? (int64_t)H * d : d; /* q->k offset, elements */
    if (layout == 1) a.q_head_stride = a.k_head_stride = a.v_head_stride = 3 * d;
    memset(want, 0xff, nout * 2);
    scree__ref_attention(&a, (void *const[]){h, h + part, h + 2 * part, cu, cu, want, lse_want});
    a.q = dqkv, a.k = dqkv + (uint64_t)part * 2, a.v = dqkv + (uint64_t)part * 4;
    a.out = dout, a.lse = dl, a.cu_seqlens_q = a.cu_seqlens_k = dcu;
    scree_test_dpoison(ctx, dout, nout * 2);
    scree_test_dpoison(ctx, dl, (size_t)T * H * 4);
    ck_assert_int_eq(scree_attention(ctx, &a, NULL), SCREE_OK);
    scree_test_sync(ctx);
    scree_test_d2h(ctx, got, dout, nout * 2);
    scree_test_d2h(ctx, lse, dl, (size_t)T * H * 4);
    for (int64_t t = 0; t < T; t++) {
      size_t worst;
      const uint16_t *g = got + t * 2 * H * d, *w = want + t * 2 * H * d;
      ck_assert_msg(!scree__compare(g, w, SCREE_DTYPE_BF16, (size_t)H * d, 2e-2, 2e-2, &worst),
                    "layout %d token %lld: [%zu] got %g want %g", layout, (long long)t, worst,
                    scree__load_elem(g, SCREE_DTYPE_BF16, worst),
                    scree__load_elem(w, SCREE_DTYPE_BF16, worst));
      ck_assert_msg(!memcmp(g + H * d, w + H * d, (size_t)H * d * 2),
                    "layout %d token %lld: the padding row was written", layout, (long long)t);
    }
    size_t worst;
    ck_assert_msg(!scree__compare(lse, lse_want, SCREE_DTYPE_FP32, (size_t)T * H, 1e-4, 2e-3, &worst),
                  "layout %d lse[%zu] got %g want %g", layout, worst, lse[worst], lse_want[worst]);
  }
  scree_test_dfree(ctx, dqkv), scree_test_dfree(ctx, dout), scree_test_dfree(ctx, dl);
  scree_test_dfree(ctx, dcu);
  free(h), free(got), free(want), free(lse), free(lse_want);
}
END_TEST

/* SCREE_VALIDATE: device-side cu_seqlens are copied and checked; a bad one
 * is refused by name and nothing is written. */
START_TEST(validate_cu_seqlens) {
  scree_context *vctx = scree_test_validating_context();
  const int H = 2, d = 64, T = 300;
  scree_devptr q = scree_test_dalloc(ctx, (size_t)T * H * d * 2),
               out = scree_test_dalloc(ctx, (size_t)T * H * d * 2),
               cu = scree_test_dalloc(ctx, 16);
  scree_test_dpoison(ctx, q, (size_t)T * H * d * 2);
  const int32_t good[4] = {0, 100, 100, 300};
  const int32_t bad[][4] = {{1, 100, 100, 300}, {0, 100, 50, 300}, {0, 100, 100, 299},
                            {0, 250, 260, 300}};
  const char *needle[] = {"cu_seqlens_q[0]=1", "decreases", "differs from total_q",
                          "more than max_seqlen_q"};
  scree_attention_args a = {.q = q, .k = q, .v = q, .out = out, .cu_seqlens_q = cu,
                            .cu_seqlens_k = cu, .batch = 3, .total_q = T, .total_k = T,
                            .max_seqlen_q = 200, .max_seqlen_k = 250, .heads_q = H,
                            .heads_kv = H, .head_dim = d, .dtype = SCREE_DTYPE_FP16,
                            .window_left = -1, .window_right = -1};
  uint16_t probe[64];
  for (int i = 0; i < 4; i++) {
    scree_test_h2d(ctx, cu, bad[i], sizeof bad[i]);
    scree_test_dpoison(ctx, out, (size_t)T * H * d * 2);
    const scree_status st = scree_attention(vctx, &a, NULL);
    ck_assert_msg(st == SCREE_ERROR_INVALID_ARGUMENT && strstr(scree_last_error(vctx), needle[i]),
                  "case %d: %s: %s", i, scree_status_name(st), scree_last_error(vctx));
    scree_test_sync(ctx);
    scree_test_d2h(ctx, probe, out, sizeof probe);
    for (int k = 0; k < 64; k++) ck_assert_uint_eq(probe[k], 0xffff);
  }
  scree_test_h2d(ctx, cu, good, sizeof good);
  /* q's poison (NaN) flows into out; the call itself must be accepted. */
  ck_assert_msg(scree_attention(vctx, &a, NULL) == SCREE_OK, "%s", scree_last_error(vctx));
  scree_test_sync(ctx);
  scree_destroy(vctx);
  scree_test_dfree(ctx, q), scree_test_dfree(ctx, out), scree_test_dfree(ctx, cu);
}
END_TEST

/* A small batch through every schedule and masking path: what racecheck
 * runs (CK_RUN_CASE=race), where the big batches would take too long. */
START_TEST(small_all_schedules) {
  static const int64_t lq[] = {1, 63, 65, 129, 300, 0}, lk[] = {5, 63, 64, 200, 300, 7};
  const acase cases[] = {
      {SCREE_DTYPE_FP16, 64, 1, 2, 1, 40, -1, lq, lk, 6},
      {SCREE_DTYPE_BF16, 128, 0, 2, 2, -1, -1, lq, lk, 6},
  };
  const acase *c = &cases[_i];
  scree__config cfgs[3];
  const scree__variant var = variant_of(c);
  scree__target t;
  scree__target_of(ctx, &t);
  t.tensor_maps = 0; /* the generic implementation's defaults */
  for (int s = 0; s < 3; s++) {
    op->default_config(&t, &var, NULL, &cfgs[s]);
    cfgs[s].v[5] = s; /* sched */
  }
  ck_assert_int_eq(check_configs(c, cfgs, 3), 3);
}
END_TEST

/* The configs of the hopper implementation (sm_90a: wgmma, tensor maps). */
static int hopper_configs(scree__config *out, int cap) {
  scree__config all[512];
  const int n = scree__config_space(op, all, 512);
  int m = 0;
  for (int i = 0; i < n && m < cap; i++)
    if (!strcmp(op->impls[all[i].impl].name, "hopper")) out[m++] = all[i];
  return m;
}

/* Every config of the hopper implementation on batches that cross every
 * tile edge, both head sizes it covers, both dtypes, causal, windows, GQA
 * and MQA. Elsewhere than sm_90 (or without tensor maps) nothing passes the
 * config check and the test says so. */
START_TEST(hopper_every_config) {
  const acase cases[] = {
      {SCREE_DTYPE_FP16, 64, 1, 8, 2, -1, -1, LQ, LK, NL},
      {SCREE_DTYPE_BF16, 128, 0, 4, 4, -1, -1, LQ, LK, NL},
      {SCREE_DTYPE_FP16, 128, 1, 4, 1, 100, -1, LQ, LK, NL},
      {SCREE_DTYPE_BF16, 64, 0, 4, 2, 64, 33, LQ, LQ, NL},
  };
  scree__config cfgs[128];
  const int n = hopper_configs(cfgs, 128);
  ck_assert_int_gt(n, 0);
  scree__target t;
  scree__target_of(ctx, &t);
  const int ran = check_configs(&cases[_i], cfgs, n);
  printf("hopper_every_config case %d: %d of %d configs ran\n", _i, ran, n);
  if (t.sm == 90 && t.tensor_maps)
    ck_assert_int_gt(ran, 0);
  else
    ck_assert_int_eq(ran, 0);
}
END_TEST

/* A small batch through the hopper implementation's two schedules and
 * its masking paths: what compute-sanitizer runs (CK_RUN_CASE=hopper_race). */
START_TEST(hopper_small) {
  static const int64_t lq[] = {1, 63, 65, 129, 300, 0}, lk[] = {5, 63, 64, 200, 300, 7};
  const acase cases[] = {
      {SCREE_DTYPE_FP16, 64, 1, 2, 1, 40, -1, lq, lk, 6},
      {SCREE_DTYPE_BF16, 128, 0, 2, 2, -1, -1, lq, lk, 6},
  };
  scree__config cfgs[128], pick[6];
  const int n = hopper_configs(cfgs, 128);
  int m = 0;
  for (int i = 0; i < n && m < 4; i++) /* bn=128, cwg=2, stages=2: both schedules, ovl */
    if (cfgs[i].v[0] == 128 && cfgs[i].v[1] == 2 && cfgs[i].v[2] == 2) pick[m++] = cfgs[i];
  for (int i = 0; i < n && m < 6; i++) /* and one consumer, 4 stages, ovl 0 and 1 */
    if (cfgs[i].v[0] == 64 && cfgs[i].v[1] == 1 && cfgs[i].v[2] == 4 && cfgs[i].v[3] == 2)
      pick[m++] = cfgs[i];
  ck_assert_int_eq(m, 6);
  const int ran = check_configs(&cases[_i], pick, m);
  printf("hopper_small case %d: %d configs ran\n", _i, ran);
}
END_TEST

int main(void) {
  op = scree_test_op_setup("attention", &ctx, &stream); /* exits 77 without a GPU */
  Suite *s = suite_create("attention_gpu");
  /* "quick" is what runs under compute-sanitizer (CK_RUN_CASE=quick): every
   * masking path, GQA and MQA, packed strides, validation. */
  TCase *quick = tcase_create("quick"), *full = tcase_create("full");
  tcase_set_timeout(quick, 1800);
  tcase_set_timeout(full, 1800);
  /* full and hopper (the config sweeps and the long sequences) are the
   * slow set, test_attention_gpu_slow; every head size through the public
   * entry ("public") and the small batches of race and hopper_race are
   * quick. */
  tcase_set_tags(full, "slow");
  TCase *pub = tcase_create("public");
  tcase_set_timeout(pub, 1800);
  tcase_add_loop_test(quick, gqa_mqa, 0, 4);
  tcase_add_loop_test(quick, windows, 0, 5);
  tcase_add_loop_test(quick, softcap, 0, 6);
  tcase_add_test(quick, packed_qkv);
  tcase_add_test(quick, validate_cu_seqlens);
  tcase_add_loop_test(pub, head_dims_dtypes_causal, 0, 20);
  tcase_add_loop_test(full, schedules_and_tiles, 0, 2);
  tcase_add_test(full, every_safelisted_config);
  tcase_add_test(full, long_sequences);
  TCase *race = tcase_create("race");
  tcase_set_timeout(race, 1800);
  tcase_add_loop_test(race, small_all_schedules, 0, 2);
  TCase *hopper = tcase_create("hopper"), *hrace = tcase_create("hopper_race");
  tcase_set_timeout(hopper, 1800);
  tcase_set_timeout(hrace, 1800);
  tcase_set_tags(hopper, "slow");
  tcase_add_loop_test(hopper, hopper_every_config, 0, 4);
  tcase_add_loop_test(hrace, hopper_small, 0, 2);
  suite_add_tcase(s, hopper);
  suite_add_tcase(s, hrace);
  suite_add_tcase(s, race);
  suite_add_tcase(s, quick);
  suite_add_tcase(s, pub);
  suite_add_tcase(s, full);
  return scree_test_run(s, 1);
}
