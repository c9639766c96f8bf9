/* test_rope_gpu.c - RoPE on the GPU against the CPU reference (label gpu;
 * skipped with a reason where there is no GPU).
 *
 * q and k are rotated in place: the op's problems restore them before each
 * checked run (SCREE__BUF_INOUT); the direct calls below compare the whole
 * buffer: rotary parts within the stated tolerance (one rounding of the
 * dtype; fp32 atol 4e-6: cos and sin of the same fp32 angle within 2 ulp),
 * everything else (parts past rotary_dim, v of a packed qkv buffer,
 * padding, a guard region after the buffer) bitwise untouched.
 *
 * Covered: every variant (dtype x layout x table x positions source) once,
 * each on one of GQA, MQA, q-only, partial rotary, head_dim 2 to 1024
 * (every head shape sees every dtype, both layouts, both table modes and
 * every positions source); packed qkv buffers [T, Hq + 2 Hkv, d],
 * [T, 3, H, d], [T, H, 3, d] and head-major tensors rotated where they lie
 * (every packing with every positions source and every dtype); starts that
 * allow only narrower vectors; positions up to 2^40 on the fly; a large
 * batch; validation of device-side cu_seqlens and positions; a spread
 * of configs over the space (every value of every field); and out of
 * place (q_out, k_out) bitwise equal to in place, with the inputs
 * untouched, on strided, packed and partial-rotary outputs.
 *
 * Kept quick (well under a minute on an H100): every distinct (config,
 * variant) costs an NVRTC compile of about 0.3 s, so each variant, packing
 * and narrowed vector width is compiled a few times at most rather than
 * over a full product; the large batch keeps its tokens but not 16 heads of
 * 128; and buffers are compared in plain loops with one assertion at the
 * end (a passing Check assertion still writes a message to Check's log
 * file and flushes it: about a microsecond each, and the large batch once
 * made hundreds of millions of them). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"

/* test_rope_backward_gpu.c compiles this file again with
 * SCREE_TEST_ROPE_BACKWARD: every test then runs scree_rope_backward (the
 * inverse rotation, same arguments) against its reference. */
#ifndef SCREE_TEST_ROPE_BACKWARD
#define ROPE_OP "rope"
#define ROPE_SUITE "rope_gpu"
SCREE__REFERENCE(rope);
#define rope_ref scree__ref_rope
#define rope_call scree_rope
#else
#define ROPE_OP "rope_backward"
#define ROPE_SUITE "rope_backward_gpu"
SCREE__REFERENCE(rope_backward);
#define rope_ref scree__ref_rope_backward
/* The arguments are one layout (scree.h). */
static scree_status rope_call(scree_context *cx, const scree_rope_args *a, void *s) {
  scree_rope_backward_args b;
  memcpy(&b, a, sizeof b);
  return scree_rope_backward(cx, &b, s);
}
#endif

static scree_context *ctx;
static const scree__op *op;
static CUstream stream;

static scree__variant variant(scree_dtype dt, int layout, int table, int pos) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = dt, v.v[1] = layout, v.v[2] = table, v.v[3] = pos;
  return v;
}

/* Progress: one line per test iteration, with its time. */
static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}

/* ---- the op's problems through the harness ------------------------------- */

/* heads_q, heads_kv, head_dim, rotary_dim. */
static const int64_t hshapes[][4] = {{32, 8, 128, 128}, {4, 0, 64, 32},  {3, 1, 6, 6},
                                     {2, 2, 256, 64},   {1, 1, 2, 2},    {5, 3, 80, 40},
                                     {2, 1, 1024, 1024}, {8, 1, 64, 64}};
#define NHS ((int)(sizeof hshapes / sizeof hshapes[0]))

/* Every variant once, through the public entry (the default config,
 * adapted to the call: one compile per variant), on head shape _i % 8: with
 * _i = dtype + 3 layout + 6 table + 12 pos, every head shape meets every
 * dtype, both layouts, both table modes and every positions source. */
START_TEST(every_variant_harness) {
  const double t0 = scree__now();
  const scree__variant var = variant((scree_dtype)(_i % 3), (_i / 3) % 2, (_i / 6) % 2, _i / 12);
  char vs[128];
  scree__variant_str(op, &var, vs, sizeof vs);
  const int s = _i % NHS;
  scree_rope_args a = {.total = 1000, .heads_q = hshapes[s][0], .heads_kv = hshapes[s][1],
                       .head_dim = hshapes[s][2], .rotary_dim = hshapes[s][3]};
  scree__run r;
  scree_test_make(ctx, op, &var, &a, NULL, &r);
  /* Twice: the second run must start from the restored inputs too. */
  for (int rep = 0; rep < 2; rep++)
    scree_test_check_run(ctx, &r, scree__run_config_api, (void *)op, stream, "%s", vs);
  progress("every_variant_harness %s: %s (%.2f s)\n", vs, r.p.desc, scree__now() - t0);
  scree__run_free(ctx, &r);
}
END_TEST

/* A spread over the config space (every value of every field), each
 * config on one of four variants (config i on variant i % 4: 11 compiles,
 * not 44), and every config the device's safelist allows for the op on the
 * variants it names (one given for every dtype on one variant, in turn):
 * each adapted to the problem's alignment as a plan would be, on two
 * shapes. */
static const scree__config spread[] = {
    {0, {4, 8, 8, 4, 1}},  {0, {8, 16, 8, 4, 1}}, {0, {8, 4, 8, 2, 2}},   {0, {16, 2, 4, 8, 4}},
    {0, {32, 1, 2, 16, 8}}, {0, {64, 1, 1, 16, 1}}, {0, {4, 32, 8, 1, 2}}, {0, {16, 32, 2, 4, 1}},
    {0, {32, 8, 4, 2, 8}},  {0, {8, 8, 1, 8, 4}},  {0, {64, 8, 1, 1, 2}},
};
#define NSPREAD ((int)(sizeof spread / sizeof spread[0]))

START_TEST(config_spread) {
  const double t0 = scree__now();
  static const int vars[][4] = {{1, 0, 0, 0}, {2, 1, 1, 2}, {0, 0, 1, 1}, {1, 1, 0, 2}};
  const scree__variant var =
      variant((scree_dtype)vars[_i][0], vars[_i][1], vars[_i][2], vars[_i][3]);
  scree__config cfgs[256];
  int n = 0, star = 0;
  for (int i = _i; i < NSPREAD; i += 4) cfgs[n++] = spread[i];
  const int nown = n;
  char vs[128];
  scree__variant_str(op, &var, vs, sizeof vs);
  if (ctx->safelist)
    for (int e = 0; e < ctx->safelist->n && n < 256; e++) {
      const scree__sl_entry *en = &ctx->safelist->entries[e];
      if (en->op != op || en->verb == SCREE__SL_DENY) continue;
      if (!strcmp(en->dtype, vs) || (!strcmp(en->dtype, "*") && star++ % 4 == _i))
        cfgs[n++] = en->cfg;
    }
  scree__target t;
  scree__target_of(ctx, &t);
  int ran = 0;
  for (int s = 0; s < 2; s++) {
    scree_rope_args a = {.total = 1000, .heads_q = s ? 5 : 32, .heads_kv = s ? 3 : 8,
                         .head_dim = s ? 64 : 128, .rotary_dim = s ? 32 : 128};
    scree__run r;
    scree_test_make(ctx, op, &var, &a, NULL, &r);
    _Alignas(16) unsigned char bound[SCREE__ARGS_MAX];
    scree__run_bind(&r, 0, bound);
    for (int i = 0; i < n; i++) {
      scree__config c = cfgs[i];
      op->impls[0].adapt(&c, &var, bound);
      char cs[128], why[1024];
      scree__config_str(op, &c, cs, sizeof cs);
      if (!scree__config_check(op, &c, &var, &t, why, sizeof why)) {
        ck_assert_msg(i < nown ? 0 : 1, "%s: %s", cs, why);
        continue;
      }
      scree_test_check_config(ctx, &r, op, &c, &var, stream, "%s", vs);
      ran++;
    }
    scree__run_free(ctx, &r);
  }
  progress("config_spread %s: %d configs, %d runs (%.2f s)\n", vs, n, ran, scree__now() - t0);
}
END_TEST

/* ---- direct calls on buffers laid out by hand ----------------------------- */

enum { SEPARATE, PACKED, T3HD, TH3D, HEAD_MAJOR };
static const char *const packing_name[] = {"separate", "packed", "[T,3,H,d]", "[T,H,3,d]",
                                           "head-major"};

typedef struct rcase {
  scree_dtype dt;
  scree_rope_layout layout;
  int pos, table;
  int packing;
  int64_t hq, hk, d, rd;
  int64_t shift; /* elements q and k start past an aligned address */
  const int64_t *lens;
  int nseq;
} rcase;

/* The call's layout: strides and element offsets of q and k in one buffer
 * of n elements, and which elements are rotary (mask). */
typedef struct lay {
  int64_t qt, qh, kt, kh, qoff, koff, n;
} lay;

static lay layout_of(const rcase *c, int64_t T) {
  lay l;
  memset(&l, 0, sizeof l);
  const int64_t d = c->d, hq = c->hq, hk = c->hk;
  switch (c->packing) {
    case PACKED:
      l.qt = l.kt = (hq + 2 * hk) * d, l.qh = l.kh = d, l.koff = hq * d, l.n = T * l.qt;
      break;
    case T3HD:
      l.qt = l.kt = 3 * hq * d, l.qh = l.kh = d, l.koff = hq * d, l.n = T * l.qt;
      break;
    case TH3D:
      l.qt = l.kt = 3 * hq * d, l.qh = l.kh = 3 * d, l.koff = d, l.n = T * l.qt;
      break;
    case HEAD_MAJOR:
      l.qt = l.kt = d, l.qh = l.kh = T * d, l.koff = hq * T * d, l.n = (hq + hk) * T * d;
      break;
    default: /* separate, padded rows */
      l.qh = l.kh = d + 8, l.qt = hq * (d + 8) + 16, l.kt = hk * (d + 8) + 16;
      l.koff = T * l.qt + 24, l.n = l.koff + T * l.kt;
  }
  return l;
}

/* Fills n elements with values uniform in [-2, 2) from a generator seeded
 * by the test's: a few ns an element (scree_test_fill's normals cost tens,
 * seconds on the large batch). */
static void fill_quick(void *p, scree_dtype dt, size_t n) {
  uint64_t r = scree_test_rand() | 1;
  for (size_t i = 0; i < n; i++) {
    r ^= r >> 12, r ^= r << 25, r ^= r >> 27;
    const double u = (double)((r * 2685821657736338717ull) >> 11) / 9007199254740992.0;
    scree__store_elem(p, dt, i, 4.0 * u - 2.0);
  }
}

/* Runs the case through scree_rope() and checks the whole buffer; returns
 * its element count. */
static size_t run_direct(scree_context *cx, const rcase *c) {
  int32_t cu[64];
  int64_t T = 0;
  cu[0] = 0;
  for (int i = 0; i < c->nseq; i++) cu[i + 1] = cu[i] + (int32_t)c->lens[i], T += c->lens[i];
  const lay l = layout_of(c, T);
  const size_t es = scree_dtype_size(c->dt), n = (size_t)l.n, guard = 256;
  const size_t sh = (size_t)c->shift;
  void *h = malloc(n * es), *want = malloc(n * es), *got = malloc(n * es + guard);
  char *rot = calloc(n, 1);
  ck_assert_msg(h && want && got && rot, "out of host memory (%zu elements)", n);
  fill_quick(h, c->dt, n);
  memcpy(want, h, n * es);
  for (int64_t t = 0; t < T; t++)
    for (int which = 0; which < 2; which++) {
      const int64_t heads = which ? c->hk : c->hq;
      for (int64_t hh = 0; hh < heads; hh++)
        memset(rot + (which ? l.koff + t * l.kt + hh * l.kh : l.qoff + t * l.qt + hh * l.qh), 1,
               (size_t)c->rd);
    }
  /* Positions: within-sequence offsets for cu_seqlens; otherwise a mix of
   * small, large and (on the fly) huge ones. */
  const int64_t maxp = 4096;
  int64_t *p64 = malloc((size_t)(T ? T : 1) * 8);
  int32_t *p32 = malloc((size_t)(T ? T : 1) * 4);
  for (int64_t t = 0; t < T; t++) {
    int64_t p = (t * 7919) % maxp;
    if (!c->table && t % 5 == 1) p = c->pos == 2 ? ((int64_t)1 << 40) + t : 100000000 + t;
    p64[t] = p, p32[t] = (int32_t)p;
  }
  float *tab = NULL;
  const int64_t half = c->rd / 2;
  if (c->table) {
    tab = malloc((size_t)(maxp * c->rd) * 4);
    for (int64_t i = 0; i < half; i++) {
      const float e = (float)(2 * i) / (float)c->rd;
      const float inv = 1.0f / (float)pow(500000.0, (double)e);
      for (int64_t p = 0; p < maxp; p++) {
        const double ang = (float)p * inv;
        tab[p * c->rd + i] = (float)cos(ang), tab[p * c->rd + half + i] = (float)sin(ang);
      }
    }
  }
  scree_rope_args a = {.total = T, .batch = c->nseq, .heads_q = c->hq, .heads_kv = c->hk,
                       .head_dim = c->d, .rotary_dim = c->rd, .q_token_stride = l.qt,
                       .q_head_stride = l.qh, .k_token_stride = l.kt, .k_head_stride = l.kh,
                       .dtype = c->dt, .layout = c->layout, .positions_int64 = c->pos == 2,
                       .theta = 500000.f, .max_position = c->table ? maxp : 0};
  scree_rope_args ra = a;
  ra.q = 1, ra.k = c->hk ? 1 : 0;
  void *hp[5];
  int nh = 0;
  hp[nh++] = (char *)want + (size_t)l.qoff * es;
  if (c->hk) hp[nh++] = (char *)want + (size_t)l.koff * es;
  if (c->pos) ra.positions = 1, hp[nh++] = c->pos == 2 ? (void *)p64 : (void *)p32;
  else ra.cu_seqlens = 1, hp[nh++] = cu;
  if (c->table) ra.cos_sin = 1, hp[nh++] = tab;
  rope_ref(&ra, hp);

  scree_devptr buf = scree_test_dalloc(ctx, (n + sh) * es + guard);
  scree_devptr dpos = scree_test_dalloc(ctx, (size_t)(T ? T : 1) * 8);
  scree_devptr dcu = scree_test_dalloc(ctx, sizeof cu);
  scree_devptr dtab = c->table ? scree_test_dalloc(ctx, (size_t)(maxp * c->rd) * 4) : 0;
  scree_test_dpoison(ctx, buf, (n + sh) * es + guard);
  const scree_devptr base = buf + sh * es;
  scree_test_h2d(ctx, base, h, n * es);
  scree_test_h2d(ctx, dcu, cu, sizeof cu);
  if (T)
    scree_test_h2d(ctx, dpos, c->pos == 2 ? (void *)p64 : (void *)p32,
                   (size_t)T * (c->pos == 2 ? 8 : 4));
  if (dtab) scree_test_h2d(ctx, dtab, tab, (size_t)(maxp * c->rd) * 4);
  a.q = base + (uint64_t)l.qoff * es;
  a.k = c->hk ? base + (uint64_t)l.koff * es : 0;
  if (c->pos) a.positions = dpos;
  else a.cu_seqlens = dcu;
  if (c->table) a.cos_sin = dtab;
  const scree_status st = rope_call(cx, &a, NULL);
  char what[256];
  snprintf(what, sizeof what,
           "%s layout %d pos %d table %d %s T=%lld %lld/%lld d=%lld rd=%lld shift %lld",
           scree_dtype_name(c->dt), c->layout, c->pos, c->table, packing_name[c->packing],
           (long long)T, (long long)c->hq, (long long)c->hk, (long long)c->d, (long long)c->rd,
           (long long)c->shift);
  ck_assert_msg(st == SCREE_OK, "%s: %s: %s", what, scree_status_name(st), scree_last_error(cx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, got, base, n * es + guard);
  double rtol, atol;
  scree__tolerance(c->dt, &rtol, &atol);
  if (c->dt == SCREE_DTYPE_FP32) atol = 4e-6;
  /* Plain loops, one assertion each at the end (see the top). */
  size_t bad_rot = 0, bad_other = 0, first_rot = 0, first_other = 0, bad_guard = 0;
  for (size_t i = 0; i < n; i++) {
    if (rot[i]) {
      const double g = scree__load_elem(got, c->dt, i), w = scree__load_elem(want, c->dt, i);
      if (!(fabs(g - w) <= atol + rtol * fabs(w)) && !bad_rot++) first_rot = i;
    } else if (memcmp((char *)got + i * es, (char *)h + i * es, es) && !bad_other++) {
      first_other = i;
    }
  }
  for (size_t i = 0; i < guard; i++) bad_guard += ((unsigned char *)got)[n * es + i] != 0xff;
  ck_assert_msg(!bad_rot, "%s: %zu rotary elements wrong, first %zu got %.8g want %.8g", what,
                bad_rot, first_rot, scree__load_elem(got, c->dt, first_rot),
                scree__load_elem(want, c->dt, first_rot));
  ck_assert_msg(!bad_other, "%s: %zu elements that are not rotary written, first %zu", what,
                bad_other, first_other);
  ck_assert_msg(!bad_guard, "%s: %zu bytes past the buffer written", what, bad_guard);
  scree_test_dfree(ctx, buf), scree_test_dfree(ctx, dpos), scree_test_dfree(ctx, dcu);
  if (dtab) scree_test_dfree(ctx, dtab);
  free(h), free(want), free(got), free(rot), free(p64), free(p32), free(tab);
  return n;
}

static const int64_t LENS[] = {0, 1, 7, 63, 64, 65, 0, 129, 33, 300};
#define NLENS ((int)(sizeof LENS / sizeof LENS[0]))

/* Packed qkv buffers and head-major tensors: every packing with every
 * positions source (_i = packing + 5 pos), the dtype (with its head shape:
 * bf16 GQA 8/2 of 128, fp16 4/4 of 64 rotating 32, fp32 3/3 of 96), the
 * layout and the table dealt out so that every packing meets every dtype,
 * both layouts and both table modes, and every positions source both
 * layouts with and without a table. One compile per case. */
START_TEST(packed_and_strided) {
  /* dtype index, layout, table for packing _i % 5 and positions _i / 5. */
  static const int deal[15][3] = {{0, 0, 0}, {1, 1, 0}, {2, 0, 1}, {0, 1, 1}, {1, 0, 0},
                                  {1, 1, 1}, {2, 0, 0}, {0, 1, 0}, {1, 0, 1}, {2, 1, 1},
                                  {2, 0, 1}, {0, 1, 1}, {1, 0, 0}, {2, 1, 0}, {0, 0, 1}};
  static const scree_dtype dts[3] = {SCREE_DTYPE_BF16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP32};
  static const int64_t shp[3][4] = {{8, 2, 128, 128}, {4, 4, 64, 32}, {3, 3, 96, 96}};
  const double t0 = scree__now();
  const int packing = _i % 5, pos = _i / 5, di = deal[_i][0];
  const rcase c = {dts[di], (scree_rope_layout)deal[_i][1], pos, deal[_i][2], packing,
                   shp[di][0], shp[di][1], shp[di][2], shp[di][3], 0, LENS, NLENS};
  const size_t n = run_direct(ctx, &c);
  progress("packed_and_strided %s, %s, layout %d, table %d, pos %d: %zu elements (%.2f s)\n",
           packing_name[packing], scree_dtype_name(c.dt), c.layout, c.table, pos, n,
           scree__now() - t0);
}
END_TEST

/* Starts 1, 2 and 4 elements past alignment (vec narrowed to 1, 2 and 4;
 * GPT-J at vec 1 rotates a pair in two scalar accesses), and head sizes
 * whose halves allow only narrow vectors (bf16 head_dim 12: NeoX half 6,
 * vec 2; fp32 rotary 6 of 34 in [T, H, 3, d]: NeoX half 3, vec 1; GPT-J
 * vec 2): the plan narrows vec. */
START_TEST(narrow_vectors) {
  const double t0 = scree__now();
  const rcase cs[] = {
      {SCREE_DTYPE_FP16, SCREE_ROPE_GPTJ, 0, 0, PACKED, 4, 2, 128, 128, 1, LENS, NLENS},
      {SCREE_DTYPE_FP16, SCREE_ROPE_NEOX, 0, 0, PACKED, 4, 2, 128, 128, 2, LENS, NLENS},
      {SCREE_DTYPE_FP16, SCREE_ROPE_GPTJ, 0, 0, PACKED, 4, 2, 128, 128, 4, LENS, NLENS},
      {SCREE_DTYPE_BF16, SCREE_ROPE_NEOX, 1, 1, SEPARATE, 2, 1, 12, 12, 4, LENS, NLENS},
      {SCREE_DTYPE_BF16, SCREE_ROPE_GPTJ, 1, 1, SEPARATE, 2, 1, 12, 12, 1, LENS, NLENS},
      {SCREE_DTYPE_FP32, SCREE_ROPE_NEOX, 2, 0, TH3D, 2, 2, 34, 6, 4, LENS, NLENS},
      {SCREE_DTYPE_FP32, SCREE_ROPE_GPTJ, 2, 0, TH3D, 2, 2, 34, 6, 2, LENS, NLENS},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_direct(ctx, &cs[i]);
  progress("narrow_vectors: %zu cases (%.2f s)\n", sizeof cs / sizeof cs[0], scree__now() - t0);
}
END_TEST

/* A large batch: 70k tokens, one sequence of 32k among them (positions
 * from cu_seqlens up to 32767), GQA 4/1 heads of 64 in a packed buffer;
 * and q only with int64 positions up to 2^40 on the fly. The token count
 * is what is large: more heads or wider ones add host work, not coverage. */
START_TEST(large_batch) {
  const double t0 = scree__now();
  static const int64_t lens[] = {32768, 1, 4096, 17, 20000, 13118};
  const rcase c1 = {SCREE_DTYPE_BF16, SCREE_ROPE_NEOX, 0, 0, PACKED, 4, 1, 64, 64, 0, lens, 6};
  const rcase c2 = {SCREE_DTYPE_FP16, SCREE_ROPE_GPTJ, 2, 0, SEPARATE, 2, 0, 64, 64, 0, lens, 6};
  const size_t n = run_direct(ctx, &c1) + run_direct(ctx, &c2);
  progress("large_batch: %zu elements (%.2f s)\n", n, scree__now() - t0);
}
END_TEST

/* ---- out of place (q_out, k_out) ------------------------------------------ */

enum { OUT_BOTH, OUT_Q_IN_PLACE, OUT_PACKED };
static const char *const out_name[] = {"both out", "q in place, k out", "packed output"};

/* The case out of place against the same call in place, both on the GPU:
 * the outputs bitwise equal to what the in-place call leaves (rotary parts
 * rotated, the rest of each head row copied), q and k untouched (unless
 * one stays in place), the outputs' padding and a guard after them
 * untouched. Outputs: padded rows (head stride d + 8, token stride
 * heads (d + 8) + 16) at `shift` elements past alignment, or one packed
 * [T, Hq + Hkv, d] buffer. */
static void run_out_of_place(const rcase *c, int mode) {
  int32_t cu[64];
  int64_t T = 0;
  cu[0] = 0;
  for (int i = 0; i < c->nseq; i++) cu[i + 1] = cu[i] + (int32_t)c->lens[i], T += c->lens[i];
  const lay l = layout_of(c, T);
  const int64_t d = c->d, hq = c->hq, hk = c->hk;
  lay o; /* the outputs' layout, in their own buffer */
  memset(&o, 0, sizeof o);
  if (mode == OUT_PACKED)
    o.qt = o.kt = (hq + hk) * d, o.qh = o.kh = d, o.koff = hq * d, o.n = T * o.qt;
  else
    o.qh = o.kh = d + 8, o.qt = hq * (d + 8) + 16, o.kt = hk * (d + 8) + 16,
    o.koff = T * o.qt + 24, o.n = o.koff + T * o.kt;
  const size_t es = scree_dtype_size(c->dt), n = (size_t)l.n, no = (size_t)o.n, guard = 256;
  const size_t sh = (size_t)c->shift;
  void *h = malloc(n * es), *inplace = malloc(n * es), *in_after = malloc(n * es);
  void *got = malloc((no + sh) * es + guard);
  ck_assert_msg(h && inplace && in_after && got, "out of host memory");
  fill_quick(h, c->dt, n);
  int64_t *p64 = malloc((size_t)(T ? T : 1) * 8);
  for (int64_t t = 0; t < T; t++) p64[t] = (t * 7919) % 4096;
  scree_devptr a_buf = scree_test_dalloc(ctx, n * es), b_buf = scree_test_dalloc(ctx, n * es);
  scree_devptr out = scree_test_dalloc(ctx, (no + sh) * es + guard);
  scree_devptr dcu = scree_test_dalloc(ctx, sizeof cu), dpos = scree_test_dalloc(ctx, (size_t)T * 8);
  scree_test_h2d(ctx, a_buf, h, n * es), scree_test_h2d(ctx, b_buf, h, n * es);
  scree_test_h2d(ctx, dcu, cu, sizeof cu), scree_test_h2d(ctx, dpos, p64, (size_t)T * 8);
  scree_test_dpoison(ctx, out, (no + sh) * es + guard);
  scree_rope_args a = {.total = T, .batch = c->nseq, .heads_q = hq, .heads_kv = hk,
                       .head_dim = d, .rotary_dim = c->rd, .q_token_stride = l.qt,
                       .q_head_stride = l.qh, .k_token_stride = l.kt, .k_head_stride = l.kh,
                       .dtype = c->dt, .layout = c->layout, .positions_int64 = 1,
                       .theta = 500000.f};
  if (c->pos) a.positions = dpos;
  else a.cu_seqlens = dcu;
  /* In place on a copy. */
  scree_rope_args ip = a;
  ip.q = a_buf + (uint64_t)l.qoff * es, ip.k = hk ? a_buf + (uint64_t)l.koff * es : 0;
  ck_assert_msg(rope_call(ctx, &ip, NULL) == SCREE_OK, "%s", scree_last_error(ctx));
  /* Out of place from the other. */
  const scree_devptr ob = out + sh * es;
  a.q = b_buf + (uint64_t)l.qoff * es, a.k = hk ? b_buf + (uint64_t)l.koff * es : 0;
  a.q_out = ob, a.q_out_token_stride = o.qt, a.q_out_head_stride = o.qh;
  if (hk) a.k_out = ob + (uint64_t)o.koff * es, a.k_out_token_stride = o.kt,
          a.k_out_head_stride = o.kh;
  if (mode == OUT_Q_IN_PLACE)
    a.q_out = a.q, a.q_out_token_stride = l.qt, a.q_out_head_stride = l.qh;
  char what[256];
  snprintf(what, sizeof what, "%s: %s layout %d pos %d %s T=%lld %lld/%lld d=%lld rd=%lld "
           "shift %lld", out_name[mode], scree_dtype_name(c->dt), c->layout, c->pos,
           packing_name[c->packing], (long long)T, (long long)hq, (long long)hk, (long long)d,
           (long long)c->rd, (long long)c->shift);
  const scree_status st = rope_call(ctx, &a, NULL);
  ck_assert_msg(st == SCREE_OK, "%s: %s: %s", what, scree_status_name(st), scree_last_error(ctx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, inplace, a_buf, n * es);
  scree_test_d2h(ctx, in_after, b_buf, n * es);
  scree_test_d2h(ctx, got, out, (no + sh) * es + guard);
  /* Each output element: the in-place result's, bitwise; the inputs as
   * they were, except q's rotary parts when q stays in place. */
  char *written = calloc(no + sh, 1), *q_rot = calloc(n, 1);
  size_t bad_out = 0, first_out = 0, bad_in = 0, first_in = 0, bad_pad = 0, bad_guard = 0;
  for (int64_t t = 0; t < T; t++)
    for (int which = 0; which < 2; which++)
      for (int64_t hh = 0; hh < (which ? hk : hq); hh++) {
        const int64_t src = which ? l.koff + t * l.kt + hh * l.kh : l.qoff + t * l.qt + hh * l.qh;
        if (!which && mode == OUT_Q_IN_PLACE) {
          memset(q_rot + src, 1, (size_t)d);
          continue;
        }
        const int64_t dst = which ? o.koff + t * o.kt + hh * o.kh : t * o.qt + hh * o.qh;
        for (int64_t e = 0; e < d; e++) {
          written[sh + (size_t)(dst + e)] = 1;
          if (memcmp((char *)got + (sh + (size_t)(dst + e)) * es,
                     (char *)inplace + (size_t)(src + e) * es, es) && !bad_out++)
            first_out = (size_t)(dst + e);
        }
      }
  for (size_t i = 0; i < n; i++) {
    const void *want = q_rot[i] ? (char *)inplace + i * es : (char *)h + i * es;
    if (memcmp((char *)in_after + i * es, want, es) && !bad_in++) first_in = i;
  }
  for (size_t i = 0; i < no + sh; i++)
    if (!written[i])
      for (size_t b = 0; b < es; b++) bad_pad += ((unsigned char *)got)[i * es + b] != 0xff;
  for (size_t i = 0; i < guard; i++)
    bad_guard += ((unsigned char *)got)[(no + sh) * es + i] != 0xff;
  ck_assert_msg(!bad_out, "%s: %zu output elements differ from in place, first %zu", what,
                bad_out, first_out);
  ck_assert_msg(!bad_in, "%s: %zu input elements changed, first %zu", what, bad_in, first_in);
  ck_assert_msg(!bad_pad, "%s: %zu bytes of the outputs' padding written", what, bad_pad);
  ck_assert_msg(!bad_guard, "%s: %zu bytes past the outputs written", what, bad_guard);
  scree_test_dfree(ctx, a_buf), scree_test_dfree(ctx, b_buf), scree_test_dfree(ctx, out);
  scree_test_dfree(ctx, dcu), scree_test_dfree(ctx, dpos);
  free(h), free(inplace), free(in_after), free(got), free(written), free(q_rot), free(p64);
}

/* Out of place on every dtype and both layouts, partial rotary (a tail
 * copied: head_dim 80 with rotary 40, 34 with rotary 6 at vec 1), strided,
 * packed and head-major inputs, misaligned starts, q-only, the packed
 * output, and q kept in place (q_out = q) with k out of place (_i: the
 * case). One compile per case (two entries). */
START_TEST(out_of_place) {
  const double t0 = scree__now();
  static const rcase cs[] = {
      {SCREE_DTYPE_BF16, SCREE_ROPE_NEOX, 0, 0, SEPARATE, 8, 2, 128, 128, 0, LENS, NLENS},
      {SCREE_DTYPE_FP16, SCREE_ROPE_GPTJ, 1, 0, PACKED, 4, 4, 80, 40, 0, LENS, NLENS},
      {SCREE_DTYPE_FP32, SCREE_ROPE_NEOX, 1, 0, TH3D, 2, 2, 34, 6, 2, LENS, NLENS},
      {SCREE_DTYPE_FP16, SCREE_ROPE_NEOX, 0, 0, SEPARATE, 3, 0, 64, 32, 1, LENS, NLENS},
      {SCREE_DTYPE_BF16, SCREE_ROPE_GPTJ, 0, 0, HEAD_MAJOR, 4, 2, 64, 64, 0, LENS, NLENS},
      {SCREE_DTYPE_FP16, SCREE_ROPE_GPTJ, 1, 0, SEPARATE, 4, 4, 80, 40, 0, LENS, NLENS},
  };
  static const int modes[] = {OUT_BOTH, OUT_BOTH, OUT_BOTH, OUT_BOTH, OUT_PACKED, OUT_Q_IN_PLACE};
  run_out_of_place(&cs[_i], modes[_i]);
  progress("out_of_place %d (%s): ok (%.2f s)\n", _i, out_name[modes[_i]], scree__now() - t0);
}
END_TEST

START_TEST(zero_tokens_launches_nothing) {
  const uint64_t calls = scree_test_calls(ctx);
  scree_rope_args a = {.total = 0, .heads_q = 4, .head_dim = 64, .dtype = SCREE_DTYPE_FP16};
  ck_assert_int_eq(rope_call(ctx, &a, NULL), SCREE_OK);
  ck_assert_uint_eq(scree_test_calls(ctx), calls);
  progress("zero_tokens_launches_nothing: ok\n");
}
END_TEST

/* SCREE_VALIDATE: device-side cu_seqlens and positions are copied and
 * checked; a bad one is refused by name and q is left as it was; a good
 * call passes. */
START_TEST(validate_device_args) {
  const double t0 = scree__now();
  scree_context *vctx = scree_test_validating_context();
  const int64_t T = 300, H = 2, d = 64;
  const size_t nq = (size_t)(T * H * d);
  uint16_t *h = malloc(nq * 2), *back = malloc(nq * 2);
  scree_test_fill(h, SCREE_DTYPE_FP16, nq, 1.0);
  scree_devptr q = scree_test_dalloc(ctx, nq * 2), cu = scree_test_dalloc(ctx, 16),
               pos = scree_test_dalloc(ctx, (size_t)T * 8),
               tab = scree_test_dalloc(ctx, 256 * d * 4);
  scree_test_dpoison(ctx, tab, 256 * d * 4);
  const int32_t bad_cu[][4] = {{1, 100, 100, 300}, {0, 100, 50, 300}, {0, 100, 100, 299},
                               {0, 10, 10, 300}};
  const char *needle[] = {"cu_seqlens[0]=1", "decreases", "differs from total",
                          "past max_position"};
  scree_rope_args a = {.q = q, .cu_seqlens = cu, .total = T, .batch = 3, .heads_q = H,
                       .head_dim = d, .dtype = SCREE_DTYPE_FP16, .cos_sin = tab,
                       .max_position = 256};
  scree_test_h2d(ctx, q, h, nq * 2);
  for (int i = 0; i < 4; i++) {
    scree_test_h2d(ctx, cu, bad_cu[i], sizeof bad_cu[i]);
    const scree_status st = rope_call(vctx, &a, NULL);
    ck_assert_msg(st == SCREE_ERROR_INVALID_ARGUMENT && strstr(scree_last_error(vctx), needle[i]),
                  "case %d: %s: %s", i, scree_status_name(st), scree_last_error(vctx));
  }
  /* int64 positions, one past the table. */
  int64_t *p = malloc((size_t)T * 8);
  for (int64_t t = 0; t < T; t++) p[t] = t % 256;
  p[123] = 256;
  scree_test_h2d(ctx, pos, p, (size_t)T * 8);
  scree_rope_args b = a;
  b.positions = pos, b.positions_int64 = 1, b.cu_seqlens = 0;
  scree_status st = rope_call(vctx, &b, NULL);
  ck_assert_msg(st == SCREE_ERROR_INVALID_ARGUMENT &&
                    strstr(scree_last_error(vctx), "positions[123]=256"),
                "%s: %s", scree_status_name(st), scree_last_error(vctx));
  scree_test_sync(ctx);
  scree_test_d2h(ctx, back, q, nq * 2);
  ck_assert_msg(!memcmp(back, h, nq * 2), "a refused call wrote q");
  /* Good ones: within the table (its NaN entries then flow into q, which
   * is fine here), and on the fly with no table. */
  p[123] = 255;
  scree_test_h2d(ctx, pos, p, (size_t)T * 8);
  ck_assert_msg(rope_call(vctx, &b, NULL) == SCREE_OK, "%s", scree_last_error(vctx));
  const int32_t good_cu[4] = {0, 100, 100, 300};
  scree_test_h2d(ctx, cu, good_cu, sizeof good_cu);
  a.cos_sin = 0, a.max_position = 0;
  ck_assert_msg(rope_call(vctx, &a, NULL) == SCREE_OK, "%s", scree_last_error(vctx));
  scree_test_sync(ctx);
  scree_destroy(vctx);
  scree_test_dfree(ctx, q), scree_test_dfree(ctx, cu), scree_test_dfree(ctx, pos);
  scree_test_dfree(ctx, tab);
  free(h), free(back), free(p);
  progress("validate_device_args: ok (%.2f s)\n", scree__now() - t0);
}
END_TEST

/* All quick: see the top. */
static void setup(void) {
  op = scree_test_op_setup(ROPE_OP, &ctx, &stream); /* exits 77 without a GPU */
}

SCREE_TEST_MAIN(.name = ROPE_SUITE, .init = setup, .timeout = 1800, .nofork = 1,
                .tests = SCREE_TESTS(narrow_vectors, large_batch, zero_tokens_launches_nothing,
                                     validate_device_args),
                .loops = SCREE_LOOPS({every_variant_harness, 36}, {config_spread, 4},
                                     {packed_and_strided, 15}, {out_of_place, 6}))
