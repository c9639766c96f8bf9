/* test_attention_backward_gpu.c - the varlen attention backward on the GPU
 * against the CPU reference (label gpu; skipped with a reason where there
 * is no GPU).
 *
 * Two ways in. Through the op's problems (scree_test_check_public and
 * scree_test_check_config): q, k, v, dout random (normal(0, 1), a fresh
 * seed each run, printed), out and lse the forward reference's for them
 * (the op's shape_inputs), dq, dk and dv poisoned (NaN) before every
 * launch and compared element by element with the reference, so an
 * unwritten row, a row that must be zero (a query row without keys, a key
 * no row sees) or a NaN fails. And with buffers of its own, where out and
 * lse come from scree_attention on the GPU: strided gradients in a fused
 * [T, 3, H, d] buffer (the padding must stay as it was), deterministic mode
 * (two runs bitwise equal; two packings of the same sequences bitwise equal
 * per sequence).
 *
 * Tolerance (ops/attention_backward.c): |got - ref| <= 2.5e-3 + 2e-3 |ref|
 * in fp16, 2e-2 + 1.6e-2 |ref| in bf16 (with a softcap 1e-2 and 4e-2
 * absolute), for dq, dk and dv: the reference rounds P and dS to the dtype
 * as the kernel does (as FlashAttention-2) before their products, so what
 * remains is the kernel's fp32 arithmetic and the gradients' final
 * rounding; derived there, and held on an H200 (the quick set).
 *
 * Lengths: the mix {0, 1, 7, 63, 64, 65, 127, 128, 129, 1000,
 * 2048} for queries, keys differing from queries (a sequence with no key,
 * one with no query); every head_dim, both dtypes, causal and not, MHA, GQA
 * 32:8, MQA 8:1, windows, softcap, chunked-prefill shapes (few queries
 * against many keys), and every config of the space that passes the host
 * check on a small batch (slow set).
 *
 * The hopper implementations (sm_90a; not the default: hopper and the
 * warp-specialized hopper_ws) run the quick set's batches at head_dim 64
 * and 128 with each of their configs (case "hopper": CK_RUN_CASE=hopper
 * runs it alone; SCREE_TEST_IMPL=hopper_ws keeps one implementation's
 * configs, SCREE_TEST_MATCH=dqb=1 those whose string contains it), the fused and deterministic checks included, and a small batch
 * for compute-sanitizer (case hopper_race); on other GPUs they print why
 * nothing ran. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "op_test.h"
#include "ops/attention_ref.h"

SCREE__REFERENCE(attention_backward);

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

static const int64_t LQ[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 1000, 2048};
static const int64_t LK[] = {5, 0, 9, 63, 100, 64, 128, 127, 300, 1000, 2048};
#define NL ((int)(sizeof LQ / sizeof LQ[0]))

typedef struct bcase {
  scree_dtype dtype;
  int d, causal, hq, hkv;
  int64_t wl, wr; /* -1: unbounded */
  const int64_t *lq, *lk;
  int n;
  int det;
} bcase;

static scree__variant variant_of(const bcase *c) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = c->dtype;
  v.v[1] = c->d;
  v.v[2] = c->causal;
  v.v[3] = c->wl >= 0 || (c->wr >= 0 && !c->causal);
  return v;
}

static void describe(const bcase *c, char *buf, size_t n) {
  snprintf(buf, n, "%s d=%d %s %d:%d window(%lld,%lld), %d sequences%s",
           scree_dtype_name(c->dtype), c->d, c->causal ? "causal" : "noncausal", c->hq, c->hkv,
           (long long)c->wl, (long long)c->wr, c->n, c->det ? ", deterministic" : "");
}

static scree_attention_backward_args shape_of(const bcase *c) {
  scree_attention_backward_args a;
  memset(&a, 0, sizeof a);
  a.fwd.heads_q = c->hq;
  a.fwd.heads_kv = c->hkv;
  a.fwd.head_dim = c->d;
  a.fwd.window_left = c->wl;
  a.fwd.window_right = c->wr;
  a.deterministic = c->det;
  return a;
}

static scree__lens lens_of(const bcase *c) { return (scree__lens){c->n, c->lq, c->lk}; }

static void check_public(const bcase *c) {
  const scree_attention_backward_args a = shape_of(c);
  const scree__variant var = variant_of(c);
  const scree__lens lens = lens_of(c);
  char what[192];
  describe(c, what, sizeof what);
  scree_test_check_public(ctx, op, &var, &a, &lens, stream, "%s", what);
}

/* Every head_dim x dtype x causal, MHA 4:4, through the public entry. */
START_TEST(head_dims_dtypes_causal) {
  static const int dims[] = {32, 64, 96, 128, 256};
  const bcase c = {_i % 2 ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP16, dims[_i / 4], (_i / 2) % 2, 4, 4,
                   -1, -1, LQ, LK, NL, 0};
  check_public(&c);
}
END_TEST

/* GQA 32:8 and MQA 8:1: dk and dv summed over the group in the kernel. */
START_TEST(gqa_mqa) {
  const bcase cases[] = {
      {SCREE_DTYPE_BF16, 128, 1, 32, 8, -1, -1, LQ, LK, NL, 0},
      {SCREE_DTYPE_FP16, 128, 0, 32, 8, -1, -1, LQ, LQ, NL, 0},
      {SCREE_DTYPE_FP16, 64, 1, 8, 1, -1, -1, LQ, LK, NL, 0},
      {SCREE_DTYPE_BF16, 64, 0, 8, 1, -1, -1, LQ, LK, NL, 1},
  };
  check_public(&cases[_i]);
}
END_TEST

/* Sliding windows, left and right, with and without causal; chunked
 * prefill (a few new queries against a long cache, causal). */
START_TEST(windows_chunked) {
  static const int64_t cq[] = {16, 1, 64, 0, 100}, ck[] = {2048, 700, 1000, 30, 164};
  const bcase cases[] = {
      {SCREE_DTYPE_FP16, 64, 1, 4, 2, 100, -1, LQ, LK, NL, 0},
      {SCREE_DTYPE_BF16, 128, 0, 4, 4, 64, 33, LQ, LK, NL, 0},
      {SCREE_DTYPE_FP16, 128, 0, 4, 4, -1, 0, LQ, LK, NL, 0},
      {SCREE_DTYPE_FP16, 32, 0, 2, 2, 0, 0, LQ, LQ, NL, 1},
      {SCREE_DTYPE_BF16, 256, 1, 2, 1, 1000, 5, LQ, LK, NL, 0},
      {SCREE_DTYPE_BF16, 128, 1, 8, 2, -1, -1, cq, ck, 5, 0},
      {SCREE_DTYPE_FP16, 96, 1, 4, 4, 256, -1, cq, ck, 5, 1},
  };
  check_public(&cases[_i]);
}
END_TEST

/* Softcap: the scales make scale * q.k of normal(0, 1) inputs large, so
 * tanh saturates and 1 - tanh^2 matters. */
START_TEST(softcap) {
  static const struct {
    bcase c;
    float scale, softcap;
  } cases[] = {
      {{SCREE_DTYPE_FP16, 64, 1, 4, 2, -1, -1, LQ, LK, NL, 0}, 0.5f, 5.0f},
      {{SCREE_DTYPE_BF16, 128, 0, 4, 4, 64, 33, LQ, LK, NL, 0}, 1.0f, 20.0f},
      {{SCREE_DTYPE_FP16, 256, 1, 2, 1, -1, -1, LQ, LK, NL, 0}, 0.5f, 30.0f},
      {{SCREE_DTYPE_BF16, 96, 1, 4, 2, 200, -1, LQ, LK, NL, 1}, 1.0f, 5.0f},
  };
  const bcase *c = &cases[_i].c;
  scree_attention_backward_args a = shape_of(c);
  a.fwd.scale = cases[_i].scale;
  a.fwd.softcap = cases[_i].softcap;
  const scree__variant var = variant_of(c);
  const scree__lens lens = lens_of(c);
  char what[256], shape[192];
  describe(c, shape, sizeof shape);
  snprintf(what, sizeof what, "%s, scale %g, softcap %g", shape, (double)a.fwd.scale,
           (double)a.fwd.softcap);
  scree_test_check_public(ctx, op, &var, &a, &lens, stream, "%s", what);
}
END_TEST

/* Every config that passes the host check on this GPU, on a small batch
 * of edge lengths (compiled first on threads), causal GQA and windowed
 * MHA, two head sizes each. */
START_TEST(every_config) {
  static const int64_t lq[] = {1, 63, 65, 129, 300, 0, 64}, lk[] = {5, 63, 64, 200, 300, 7, 0};
  static const int dims[] = {64, 128, 32, 256, 96};
  const bcase c = {_i % 2 ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP16, dims[_i % 5], _i % 2 == 0, 4,
                   _i % 2 == 0 ? 2 : 4, _i % 2 ? 40 : -1, _i % 2 ? 7 : -1, lq, lk, 7, _i % 3 == 0};
  const scree_attention_backward_args a = shape_of(&c);
  const scree__variant var = variant_of(&c);
  const scree__lens lens = lens_of(&c);
  size_t n;
  scree__config *cfgs = scree_test_checked_space(ctx, op, &var, &n);
  scree__run r;
  scree_test_make(ctx, op, &var, &a, &lens, &r);
  char what[192];
  describe(&c, what, sizeof what);
  for (size_t i = 0; i < n; i++) {
    char cs[128];
    scree__config_str(op, &cfgs[i], cs, sizeof cs);
    scree_test_check_config(ctx, &r, op, &cfgs[i], &var, stream, "%s, %s", what, cs);
  }
  printf("every_config %d (%s): %zu configs\n", _i, what, n);
  ck_assert_int_gt((int)n, 4);
  scree__run_free(ctx, &r);
  free(cfgs);
}
END_TEST

/* ---- with buffers of its own: out and lse from scree_attention ----------- */

typedef struct fixture {
  scree_attention_backward_args a; /* pointers set */
  int64_t T;                       /* tokens (queries = keys) */
  size_t nqkv, nout;               /* elements */
  void *h_qkv, *h_out, *h_dout;    /* host copies of the inputs */
  float *h_lse;
  int32_t *cu;
  scree_devptr qkv, out, lse, dout, grad, dcu;
} fixture;

/* Self-attention over lengths lens (queries = keys), H heads of d, q, k, v
 * in one [T, 3, H, d] buffer; the forward run on the GPU for out and lse;
 * dout random; the gradients' buffer [T, 3, H, d] plus a guard, poisoned.
 * qkv_host, if not NULL, gives q, k, v instead of random values. */
static void fixture_make(fixture *f, scree_dtype dt, int H, int d, int causal, const int64_t *lens,
                         int n, const void *qkv_host, const void *dout_host) {
  memset(f, 0, sizeof *f);
  int64_t T = 0, mx = 0;
  for (int i = 0; i < n; i++) T += lens[i], mx = lens[i] > mx ? lens[i] : mx;
  f->T = T;
  f->cu = malloc((size_t)(n + 1) * sizeof *f->cu);
  ck_assert(f->cu);
  f->cu[0] = 0;
  for (int i = 0; i < n; i++) f->cu[i + 1] = f->cu[i] + (int32_t)lens[i];
  f->nqkv = (size_t)T * 3 * H * d;
  f->nout = (size_t)T * H * d;
  f->h_qkv = malloc(f->nqkv * 2 + 2);
  f->h_out = malloc(f->nout * 2 + 2);
  f->h_dout = malloc(f->nout * 2 + 2);
  f->h_lse = malloc((size_t)T * H * 4 + 4);
  ck_assert(f->h_qkv && f->h_out && f->h_dout && f->h_lse);
  if (qkv_host)
    memcpy(f->h_qkv, qkv_host, f->nqkv * 2);
  else
    scree_test_fill(f->h_qkv, dt, f->nqkv, 1.0);
  if (dout_host)
    memcpy(f->h_dout, dout_host, f->nout * 2);
  else
    scree_test_fill(f->h_dout, dt, f->nout, 1.0);
  f->qkv = scree_test_dalloc(ctx, f->nqkv * 2 + 16);
  f->out = scree_test_dalloc(ctx, f->nout * 2 + 16);
  f->dout = scree_test_dalloc(ctx, f->nout * 2 + 16);
  f->lse = scree_test_dalloc(ctx, (size_t)T * H * 4 + 16);
  f->grad = scree_test_dalloc(ctx, f->nqkv * 2 + 256);
  f->dcu = scree_test_dalloc(ctx, (size_t)(n + 1) * 4);
  scree_test_h2d(ctx, f->qkv, f->h_qkv, f->nqkv * 2);
  scree_test_h2d(ctx, f->dout, f->h_dout, f->nout * 2);
  scree_test_h2d(ctx, f->dcu, f->cu, (size_t)(n + 1) * 4);
  scree_attention_args *fa = &f->a.fwd;
  fa->batch = n, fa->total_q = fa->total_k = T, fa->max_seqlen_q = fa->max_seqlen_k = mx;
  fa->heads_q = fa->heads_kv = H, fa->head_dim = d, fa->dtype = dt, fa->causal = causal;
  fa->window_left = fa->window_right = -1;
  fa->q_token_stride = fa->k_token_stride = fa->v_token_stride = 3 * H * d;
  const uint64_t part = (uint64_t)H * d * 2; /* bytes from q to k in a token's row */
  fa->q = f->qkv, fa->k = f->qkv + part, fa->v = f->qkv + 2 * part;
  fa->out = f->out, fa->lse = f->lse, fa->cu_seqlens_q = fa->cu_seqlens_k = f->dcu;
  ck_assert_msg(scree_attention(ctx, fa, NULL) == SCREE_OK, "%s", scree_last_error(ctx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, f->h_out, f->out, f->nout * 2);
  scree_test_d2h(ctx, f->h_lse, f->lse, (size_t)T * H * 4);
  f->a.dout = f->dout;
  f->a.dq = f->grad, f->a.dk = f->grad + part, f->a.dv = f->grad + 2 * part;
  f->a.dq_token_stride = f->a.dk_token_stride = f->a.dv_token_stride = 3 * H * d;
}

static void fixture_free(fixture *f) {
  scree_test_dfree(ctx, f->qkv), scree_test_dfree(ctx, f->out), scree_test_dfree(ctx, f->dout);
  scree_test_dfree(ctx, f->lse), scree_test_dfree(ctx, f->grad), scree_test_dfree(ctx, f->dcu);
  free(f->h_qkv), free(f->h_out), free(f->h_dout), free(f->h_lse), free(f->cu);
}

/* The backward into the poisoned fused buffer; its bytes (and the guard
 * after it, checked) in got. */
static const scree__config *run_cfg; /* NULL: the public entry; else exactly this config */

static void fixture_run(fixture *f, void *got) {
  scree_test_dpoison(ctx, f->grad, f->nqkv * 2 + 256);
  if (run_cfg) {
    const scree_attention_args *fa = &f->a.fwd;
    const scree__variant var = {{fa->dtype, (int)fa->head_dim, fa->causal != 0, 0}};
    ck_assert_msg(scree__run_exact(ctx, op, run_cfg, &var, &f->a, NULL) == SCREE_OK, "%s",
                  scree_last_error(ctx));
  } else {
    ck_assert_msg(scree_attention_backward(ctx, &f->a, NULL) == SCREE_OK, "%s",
                  scree_last_error(ctx));
  }
  scree_test_sync(ctx);
  scree_test_d2h(ctx, got, f->grad, f->nqkv * 2);
  scree_test_check_guard(ctx, f->grad + f->nqkv * 2, 256, "the fused gradient buffer");
}

/* Strided gradients: dq, dk and dv interleaved in one [T, 3, H, d] buffer
 * (q, k and v read the same way), fp16 and bf16, causal and not, against
 * the reference on the forward's out and lse from the GPU. */
static void fused_case(int _i) {
  static const int64_t lens[] = {1, 63, 64, 65, 0, 300, 129};
  const scree_dtype dt = _i % 2 ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP16;
  const int H = 4, d = _i < 2 ? 64 : 128;
  fixture f;
  fixture_make(&f, dt, H, d, _i % 2, lens, 7, NULL, NULL);
  uint16_t *got = malloc(f.nqkv * 2), *want = malloc(f.nqkv * 2);
  ck_assert(got && want);
  memset(want, 0xff, f.nqkv * 2); /* the reference writes the rows only */
  const size_t part = (size_t)H * d;
  const scree__attention_grad_strides gs = {0, 0, 3 * H * d, 0, 3 * H * d, 0, 3 * H * d, 0};
  uint16_t *hq = f.h_qkv;
  scree__attention_grads_ref(&f.a.fwd, &gs, hq, hq + part, hq + 2 * part, f.h_out, f.h_lse,
                             f.h_dout, f.cu, f.cu, want, want + part, want + 2 * part);
  fixture_run(&f, got);
  /* the op's tolerances (ops/attention_backward.c) */
  const double rtol = dt == SCREE_DTYPE_BF16 ? 1.6e-2 : 2e-3;
  const double atol = dt == SCREE_DTYPE_BF16 ? 2e-2 : 2.5e-3;
  /* Rows of 3 H d: dq, dk and dv side by side, no padding; compared as one
   * row per token. */
  scree_test_compare_rows(got, want, dt, f.T, 3 * H * d, 3 * H * d, rtol, atol, "dq|dk|dv",
                          "fused case %d", _i);
  free(got), free(want);
  fixture_free(&f);
}

START_TEST(fused_gradients) { fused_case(_i); }
END_TEST

/* Deterministic mode: two runs give the same bytes; and a sequence's
 * gradients are the same bytes when the batch is packed differently
 * (other sequences around it, another order). */
static void deterministic_case(int _i) {
  static const int64_t la[] = {300, 65, 1000, 1, 129}, lb[] = {129, 1000, 77, 300, 65, 1};
  /* la's sequence i is lb's sequence map[i]. */
  static const int map[] = {3, 4, 1, 5, 0};
  const scree_dtype dt = _i % 2 ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP16;
  const int H = 2, d = _i < 2 ? 64 : 128, causal = _i % 2 == 0;
  fixture fa, fb;
  fixture_make(&fa, dt, H, d, causal, la, 5, NULL, NULL);
  fa.a.deterministic = 1;
  uint16_t *g1 = malloc(fa.nqkv * 2), *g2 = malloc(fa.nqkv * 2);
  ck_assert(g1 && g2);
  fixture_run(&fa, g1);
  fixture_run(&fa, g2);
  ck_assert_msg(!memcmp(g1, g2, fa.nqkv * 2), "case %d: two deterministic runs differ", _i);
  /* The second packing: la's rows moved to their places in lb, a new
   * sequence of 77 tokens filled at random. */
  const size_t row = (size_t)3 * H * d, orow = (size_t)H * d;
  int64_t Tb = 0;
  for (int i = 0; i < 6; i++) Tb += lb[i];
  uint16_t *qb = malloc((size_t)Tb * row * 2), *ob = malloc((size_t)Tb * orow * 2);
  ck_assert(qb && ob);
  scree_test_fill(qb, dt, (size_t)Tb * row, 1.0);
  scree_test_fill(ob, dt, (size_t)Tb * orow, 1.0);
  int64_t cb[7];
  cb[0] = 0;
  for (int i = 0; i < 6; i++) cb[i + 1] = cb[i] + lb[i];
  for (int i = 0; i < 5; i++) {
    memcpy(qb + cb[map[i]] * row, (uint16_t *)fa.h_qkv + fa.cu[i] * row, (size_t)la[i] * row * 2);
    memcpy(ob + cb[map[i]] * orow, (uint16_t *)fa.h_dout + fa.cu[i] * orow,
           (size_t)la[i] * orow * 2);
  }
  fixture_make(&fb, dt, H, d, causal, lb, 6, qb, ob);
  /* out and lse of la's sequences copied too (not recomputed), so that the
   * backward's inputs are the same bytes whatever the forward does. */
  for (int i = 0; i < 5; i++) {
    memcpy((uint16_t *)fb.h_out + cb[map[i]] * orow, (uint16_t *)fa.h_out + fa.cu[i] * orow,
           (size_t)la[i] * orow * 2);
    for (int h = 0; h < H; h++)
      memcpy(fb.h_lse + h * fb.T + cb[map[i]], fa.h_lse + h * fa.T + fa.cu[i], (size_t)la[i] * 4);
  }
  scree_test_h2d(ctx, fb.out, fb.h_out, fb.nout * 2);
  scree_test_h2d(ctx, fb.lse, fb.h_lse, (size_t)fb.T * H * 4);
  fb.a.deterministic = 1;
  uint16_t *g3 = malloc(fb.nqkv * 2);
  ck_assert(g3);
  fixture_run(&fb, g3);
  for (int i = 0; i < 5; i++)
    ck_assert_msg(!memcmp(g1 + fa.cu[i] * row, g3 + cb[map[i]] * row, (size_t)la[i] * row * 2),
                  "case %d: sequence %d (%lld tokens): gradients differ between packings", _i, i,
                  (long long)la[i]);
  free(g1), free(g2), free(g3), free(qb), free(ob);
  fixture_free(&fa);
  fixture_free(&fb);
}

START_TEST(deterministic) { deterministic_case(_i); }
END_TEST

/* No query token (dk and dv written as zeros) and no key token (dq
 * zeros), through the public entry. */
START_TEST(empty_sides) {
  static const int64_t z[] = {0, 0}, l[] = {65, 3};
  const bcase cases[] = {
      {SCREE_DTYPE_FP16, 64, 1, 2, 1, -1, -1, z, l, 2, 0},
      {SCREE_DTYPE_BF16, 128, 0, 2, 2, -1, -1, l, z, 2, 1},
  };
  check_public(&cases[_i]);
}
END_TEST

/* ---- the hopper implementations (sm_90a) ----------------------------------
 * The batches above through every config of impl=hopper and impl=hopper_ws
 * (the warp-specialized kernel) that passes the host check on this GPU
 * (the same problems, references and tolerances), and the fused and
 * deterministic checks with each. Elsewhere than sm_90 no config passes
 * and the tests say so. */

/* The hopper and hopper_ws configs that pass the host check for var here:
 * their count. */
static int hopper_configs(const scree__variant *var, scree__config *out, int cap) {
  scree__config all[64];
  const int n = scree__config_space(op, all, 64);
  scree__target t;
  scree__target_of(ctx, &t);
  int m = 0;
  char why[256] = "";
  const char *only = getenv("SCREE_TEST_IMPL"), *match = getenv("SCREE_TEST_MATCH");
  for (int i = 0; i < n && m < cap; i++) {
    const char *name = op->impls[all[i].impl].name;
    if (only && *only && strcmp(name, only)) continue;
    char cs[128];
    scree__config_str(op, &all[i], cs, sizeof cs);
    if (match && *match && !strstr(cs, match)) continue;
    if (!strcmp(name, "hopper") || !strcmp(name, "hopper_ws")) {
      if (scree__config_check(op, &all[i], var, &t, why, sizeof why))
        out[m++] = all[i];
    }
  }
  if (m == 0) printf("hopper: no config runs here (sm_%d): %s\n", t.sm, why);
  return m;
}

/* One batch (scale and softcap 0: the defaults) through every hopper
 * config; the number of configs run. */
static int check_hopper(const bcase *c, float scale, float cap) {
  scree_attention_backward_args a = shape_of(c);
  a.fwd.scale = scale;
  a.fwd.softcap = cap;
  const scree__variant var = variant_of(c);
  scree__config cfgs[32];
  const int n = hopper_configs(&var, cfgs, 32);
  if (n == 0) return 0;
  const scree__lens lens = lens_of(c);
  scree__run r;
  scree_test_make(ctx, op, &var, &a, &lens, &r);
  char what[192];
  describe(c, what, sizeof what);
  for (int i = 0; i < n; i++) {
    char cs[128];
    scree__config_str(op, &cfgs[i], cs, sizeof cs);
    scree_test_check_config(ctx, &r, op, &cfgs[i], &var, stream, "%s, scale %g, softcap %g, %s",
                            what, (double)scale, (double)cap, cs);
  }
  scree__run_free(ctx, &r);
  return n;
}

/* The quick set's batches at head_dim 64 and 128 (what hopper covers),
 * and every dtype x causal at both through the op's problems. */
START_TEST(hopper_batches) {
  static const int64_t cq[] = {16, 1, 64, 0, 100}, ck[] = {2048, 700, 1000, 30, 164};
  static const int64_t z[] = {0, 0}, l[] = {65, 3};
  static const struct {
    bcase c;
    float scale, softcap;
  } cases[] = {
      /* gqa_mqa */
      {{SCREE_DTYPE_BF16, 128, 1, 32, 8, -1, -1, LQ, LK, NL, 0}, 0, 0},
      {{SCREE_DTYPE_FP16, 128, 0, 32, 8, -1, -1, LQ, LQ, NL, 0}, 0, 0},
      {{SCREE_DTYPE_FP16, 64, 1, 8, 1, -1, -1, LQ, LK, NL, 0}, 0, 0},
      {{SCREE_DTYPE_BF16, 64, 0, 8, 1, -1, -1, LQ, LK, NL, 1}, 0, 0},
      /* windows_chunked */
      {{SCREE_DTYPE_FP16, 64, 1, 4, 2, 100, -1, LQ, LK, NL, 0}, 0, 0},
      {{SCREE_DTYPE_BF16, 128, 0, 4, 4, 64, 33, LQ, LK, NL, 0}, 0, 0},
      {{SCREE_DTYPE_FP16, 128, 0, 4, 4, -1, 0, LQ, LK, NL, 0}, 0, 0},
      {{SCREE_DTYPE_FP16, 64, 0, 2, 2, 0, 0, LQ, LQ, NL, 1}, 0, 0},
      {{SCREE_DTYPE_BF16, 128, 1, 8, 2, -1, -1, cq, ck, 5, 0}, 0, 0},
      {{SCREE_DTYPE_FP16, 64, 1, 4, 4, 256, -1, cq, ck, 5, 1}, 0, 0},
      /* softcap */
      {{SCREE_DTYPE_FP16, 64, 1, 4, 2, -1, -1, LQ, LK, NL, 0}, 0.5f, 5.0f},
      {{SCREE_DTYPE_BF16, 128, 0, 4, 4, 64, 33, LQ, LK, NL, 0}, 1.0f, 20.0f},
      {{SCREE_DTYPE_BF16, 64, 1, 4, 2, 200, -1, LQ, LK, NL, 1}, 1.0f, 5.0f},
      /* head_dims_dtypes_causal at 64 and 128, MHA 4:4 */
      {{SCREE_DTYPE_FP16, 64, 0, 4, 4, -1, -1, LQ, LK, NL, 0}, 0, 0},
      {{SCREE_DTYPE_BF16, 64, 1, 4, 4, -1, -1, LQ, LK, NL, 0}, 0, 0},
      {{SCREE_DTYPE_FP16, 128, 1, 4, 4, -1, -1, LQ, LK, NL, 0}, 0, 0},
      {{SCREE_DTYPE_BF16, 128, 0, 4, 4, -1, -1, LQ, LK, NL, 0}, 0, 0},
      /* empty_sides */
      {{SCREE_DTYPE_FP16, 64, 1, 2, 1, -1, -1, z, l, 2, 0}, 0, 0},
      {{SCREE_DTYPE_BF16, 128, 0, 2, 2, -1, -1, l, z, 2, 1}, 0, 0},
  };
  const int n = check_hopper(&cases[_i].c, cases[_i].scale, cases[_i].softcap);
  printf("hopper_batches %d: %d configs\n", _i, n);
}
END_TEST
#define HOPPER_BATCHES 19

/* A small batch through every hopper config, both head sizes, masks and
 * deterministic mode: what compute-sanitizer runs (CK_RUN_CASE=hopper_race). */
START_TEST(hopper_small) {
  static const int64_t lq[] = {1, 63, 65, 129, 300, 0}, lk[] = {5, 63, 64, 200, 300, 7};
  const bcase cases[] = {
      {SCREE_DTYPE_FP16, 64, 1, 2, 1, 40, -1, lq, lk, 6, 0},
      {SCREE_DTYPE_BF16, 128, 0, 2, 2, -1, -1, lq, lk, 6, 1},
  };
  printf("hopper_small %d: %d configs\n", _i, check_hopper(&cases[_i], 0, 0));
}
END_TEST

/* fused_gradients and deterministic through each hopper config. */
static void hopper_fixture(void (*body)(int), int i, int d) {
  const scree__variant var = {{i % 2 ? SCREE_DTYPE_BF16 : SCREE_DTYPE_FP16, d, 0, 0}};
  scree__config cfgs[32];
  const int n = hopper_configs(&var, cfgs, 32);
  for (int c = 0; c < n; c++) {
    char cs[128];
    scree__config_str(op, &cfgs[c], cs, sizeof cs);
    printf("hopper fixture %d: %s\n", i, cs); /* names the config of a failure below */
    fflush(stdout);
    run_cfg = &cfgs[c];
    body(i);
  }
  run_cfg = NULL;
  printf("hopper fixture %d: %d configs\n", i, n);
}
START_TEST(hopper_fused) { hopper_fixture(fused_case, _i, _i < 2 ? 64 : 128); }
END_TEST
START_TEST(hopper_deterministic) { hopper_fixture(deterministic_case, _i, _i < 2 ? 64 : 128); }
END_TEST

int main(void) {
  op = scree_test_op_setup("attention_backward", &ctx, &stream); /* exits 77 without a GPU */
  Suite *s = suite_create("attention_backward_gpu");
  TCase *quick = tcase_create("quick"), *pub = tcase_create("public"),
        *full = tcase_create("full");
  tcase_set_timeout(quick, 1800);
  tcase_set_timeout(pub, 1800);
  tcase_set_timeout(full, 1800);
  tcase_set_tags(full, "slow");
  tcase_add_loop_test(quick, gqa_mqa, 0, 4);
  tcase_add_loop_test(quick, windows_chunked, 0, 7);
  tcase_add_loop_test(quick, softcap, 0, 4);
  tcase_add_loop_test(quick, fused_gradients, 0, 4);
  tcase_add_loop_test(quick, deterministic, 0, 4);
  tcase_add_loop_test(quick, empty_sides, 0, 2);
  tcase_add_loop_test(pub, head_dims_dtypes_causal, 0, 20);
  TCase *hopper = tcase_create("hopper");
  tcase_set_timeout(hopper, 1800);
  tcase_add_loop_test(hopper, hopper_batches, 0, HOPPER_BATCHES);
  tcase_add_loop_test(hopper, hopper_fused, 0, 4);
  tcase_add_loop_test(hopper, hopper_deterministic, 0, 4);
  TCase *hrace = tcase_create("hopper_race");
  tcase_set_timeout(hrace, 1800);
  tcase_add_loop_test(hrace, hopper_small, 0, 2);
  tcase_add_loop_test(full, every_config, 0, 10);
  suite_add_tcase(s, quick);
  suite_add_tcase(s, pub);
  suite_add_tcase(s, full);
  suite_add_tcase(s, hopper);
  suite_add_tcase(s, hrace);
  return scree_test_run(s, 1);
}
