/* test_batch_invariance_gpu.c - batch-invariant mode on the GPU
 * (docs/cache.md#batch-invariant-mode): for every forward op, one sequence
 * (one row, for the row-wise ops) run alone, then inside batches of 2, 64
 * and 256 random others at a random position (a different one each time),
 * must give bitwise the same output. Label gpu: skipped (exit 77) with a
 * one-line reason where there is none.
 *
 * The contexts have no cache and the miss policy of $SCREE_MISS_POLICY
 * (default: the default config; SCREE_MISS_POLICY=tune tunes the "any"
 * buckets, slower). The same cases run once more on a context without the
 * mode, which prints whether the sequence's output changed there (a note,
 * not a failure: paged decode's splits are the usual difference).
 *
 *   cd build && ctest -R test_batch_invariance_gpu --output-on-failure
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_test.h"
#include "ops/attention_hopper.h"

static scree_context *inv_ctx, *plain_ctx;

static void init(void) {
  scree_context *probe = scree_test_gpu_context(); /* exits 77 without a GPU */
  (void)probe;
  char why[1024];
  scree_options o;
  scree_options_init(&o);
  o.disable_cache = 1;
  o.batch_invariant = 1;
  scree_status st = scree_create(&o, &inv_ctx, why, sizeof why);
  if (st != SCREE_OK) {
    fprintf(stderr, "scree_create (batch-invariant): %s: %s\n", scree_status_name(st), why);
    exit(1);
  }
  o.batch_invariant = -1;
  st = scree_create(&o, &plain_ctx, why, sizeof why);
  if (st != SCREE_OK) {
    fprintf(stderr, "scree_create: %s: %s\n", scree_status_name(st), why);
    exit(1);
  }
}

/* ---- random data -------------------------------------------------------- */

static uint64_t next(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 11;
}
static float unif(uint64_t *s, float lo, float hi) {
  return lo + (hi - lo) * (float)((double)next(s) / (double)(1ULL << 53));
}
static uint16_t bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static void fill(uint16_t *p, size_t n, uint64_t *s, float scale) {
  for (size_t i = 0; i < n; i++) p[i] = bf16(unif(s, -scale, scale));
}
static int64_t irand(uint64_t *s, int64_t lo, int64_t hi) {
  return lo + (int64_t)(next(s) % (uint64_t)(hi - lo + 1));
}

/* A device copy of n bytes of host memory. */
static scree_devptr up(scree_context *ctx, const void *h, size_t n) {
  scree_devptr d = scree_test_dalloc(ctx, n + 256);
  scree_test_dpoison(ctx, d, n + 256);
  if (h && n) scree_test_h2d(ctx, d, h, n);
  return d;
}

#define TARGET_SEED 0x5eedULL
#define BF 2 /* bytes of a bf16 */

/* A batch: n sequences, the target at pos, each of len[i] units (rows or
 * tokens) starting at off[i]. The target's length is tlen; the others'
 * are drawn from [lo, hi]. */
typedef struct batch {
  int n, pos;
  int64_t len[257], off[258], total, maxlen;
} batch;

static void make_batch(batch *b, int n, int pos, int64_t tlen, int64_t lo, int64_t hi,
                       uint64_t *s) {
  b->n = n;
  b->pos = pos;
  b->off[0] = 0;
  b->maxlen = 0;
  for (int i = 0; i < n; i++) {
    b->len[i] = i == pos ? tlen : irand(s, lo, hi);
    b->off[i + 1] = b->off[i] + b->len[i];
    if (b->len[i] > b->maxlen) b->maxlen = b->len[i];
  }
  b->total = b->off[n];
}

/* Fills rows [off, off + len) of a [total, width] bf16 tensor: the
 * target's from its own seed stream (the same whatever the batch), the
 * others' from s. */
static void fill_rows(uint16_t *h, const batch *b, int64_t width, uint64_t *s, float scale,
                      uint64_t salt) {
  for (int i = 0; i < b->n; i++) {
    uint64_t ts = TARGET_SEED ^ salt;
    fill(h + b->off[i] * width, (size_t)(b->len[i] * width), i == b->pos ? &ts : s, scale);
  }
}

static int32_t *cu_of(const batch *b) {
  int32_t *cu = malloc(sizeof(int32_t) * (size_t)(b->n + 1));
  for (int i = 0; i <= b->n; i++) cu[i] = (int32_t)b->off[i];
  return cu;
}

/* Appends n bytes of device memory at d to out (the target's output). */
static void grab(scree_context *ctx, unsigned char *out, size_t *at, scree_devptr d, size_t n) {
  scree_test_sync(ctx);
  scree_test_d2h(ctx, out + *at, d, n);
  *at += n;
}

#define CALL(ctx, op, a)                                                                   \
  do {                                                                                     \
    const scree_status st_ = scree_##op(ctx, &(a), NULL);                                  \
    ck_assert_msg(st_ == SCREE_OK, #op ": %s: %s", scree_status_name(st_),                 \
                  scree_last_error(ctx));                                                  \
  } while (0)

/* Each case runs its op on a batch and returns the target's output bytes
 * (out, *n). */
typedef void (*case_fn)(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                        size_t *n);

#define COLS 4096

/* ---- the row-wise ops: a sequence is a row ------------------------------- */

static void c_rmsnorm(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                      size_t *n) {
  const int64_t rows = b->total;
  uint16_t *hx = malloc((size_t)(rows * COLS) * BF), hw[COLS];
  fill_rows(hx, b, COLS, s, 2.f, 1);
  uint64_t ws = 7;
  fill(hw, COLS, &ws, 1.f);
  scree_devptr x = up(ctx, hx, (size_t)(rows * COLS) * BF), w = up(ctx, hw, sizeof hw),
               y = up(ctx, NULL, (size_t)(rows * COLS) * BF), r = up(ctx, NULL, (size_t)rows * 4);
  scree_rmsnorm_args a = {.x = x, .w = w, .y = y, .rows = rows, .cols = COLS,
                          .x_dtype = SCREE_DTYPE_BF16, .w_dtype = SCREE_DTYPE_BF16,
                          .y_dtype = SCREE_DTYPE_BF16, .eps = 1e-6f, .rstd = r};
  CALL(ctx, rmsnorm, a);
  grab(ctx, out, n, y + (size_t)(b->off[b->pos] * COLS) * BF, COLS * BF);
  grab(ctx, out, n, r + (size_t)b->off[b->pos] * 4, 4);
  scree_test_dfree(ctx, x), scree_test_dfree(ctx, w), scree_test_dfree(ctx, y),
      scree_test_dfree(ctx, r);
  free(hx);
}

static void c_add_rmsnorm(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                          size_t *n) {
  const int64_t rows = b->total;
  const size_t bytes = (size_t)(rows * COLS) * BF;
  uint16_t *hx = malloc(bytes), *hr = malloc(bytes), hw[COLS];
  fill_rows(hx, b, COLS, s, 2.f, 1);
  fill_rows(hr, b, COLS, s, 2.f, 2);
  uint64_t ws = 7;
  fill(hw, COLS, &ws, 1.f);
  scree_devptr x = up(ctx, hx, bytes), res = up(ctx, hr, bytes), w = up(ctx, hw, sizeof hw),
               h = up(ctx, NULL, bytes), y = up(ctx, NULL, bytes);
  scree_add_rmsnorm_args a = {.x = x, .residual = res, .w = w, .h = h, .y = y, .rows = rows,
                              .cols = COLS, .x_dtype = SCREE_DTYPE_BF16,
                              .w_dtype = SCREE_DTYPE_BF16, .y_dtype = SCREE_DTYPE_BF16,
                              .eps = 1e-6f};
  CALL(ctx, add_rmsnorm, a);
  grab(ctx, out, n, h + (size_t)(b->off[b->pos] * COLS) * BF, COLS * BF);
  grab(ctx, out, n, y + (size_t)(b->off[b->pos] * COLS) * BF, COLS * BF);
  scree_test_dfree(ctx, x), scree_test_dfree(ctx, res), scree_test_dfree(ctx, w),
      scree_test_dfree(ctx, h), scree_test_dfree(ctx, y);
  free(hx), free(hr);
}

static void c_layernorm(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                        size_t *n) {
  const int64_t rows = b->total;
  const size_t bytes = (size_t)(rows * COLS) * BF;
  uint16_t *hx = malloc(bytes), hw[COLS], hb[COLS];
  fill_rows(hx, b, COLS, s, 2.f, 1);
  uint64_t ws = 7;
  fill(hw, COLS, &ws, 1.f);
  fill(hb, COLS, &ws, 1.f);
  scree_devptr x = up(ctx, hx, bytes), w = up(ctx, hw, sizeof hw), bb = up(ctx, hb, sizeof hb),
               y = up(ctx, NULL, bytes), mean = up(ctx, NULL, (size_t)rows * 4),
               rstd = up(ctx, NULL, (size_t)rows * 4);
  scree_layernorm_args a = {.x = x, .w = w, .b = bb, .y = y, .mean = mean, .rstd = rstd,
                            .rows = rows, .cols = COLS, .x_dtype = SCREE_DTYPE_BF16,
                            .w_dtype = SCREE_DTYPE_BF16, .y_dtype = SCREE_DTYPE_BF16,
                            .eps = 1e-5f};
  CALL(ctx, layernorm, a);
  const int64_t r0 = b->off[b->pos];
  grab(ctx, out, n, y + (size_t)(r0 * COLS) * BF, COLS * BF);
  grab(ctx, out, n, mean + (size_t)r0 * 4, 4);
  grab(ctx, out, n, rstd + (size_t)r0 * 4, 4);
  scree_test_dfree(ctx, x), scree_test_dfree(ctx, w), scree_test_dfree(ctx, bb),
      scree_test_dfree(ctx, y), scree_test_dfree(ctx, mean), scree_test_dfree(ctx, rstd);
  free(hx);
}

static void c_softmax(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                      size_t *n) {
  const int64_t rows = b->total;
  const size_t bytes = (size_t)(rows * COLS) * BF;
  uint16_t *hx = malloc(bytes);
  fill_rows(hx, b, COLS, s, 4.f, 1);
  scree_devptr x = up(ctx, hx, bytes), y = up(ctx, NULL, bytes);
  scree_softmax_args a = {.x = x, .y = y, .rows = rows, .cols = COLS,
                          .x_dtype = SCREE_DTYPE_BF16, .y_dtype = SCREE_DTYPE_BF16};
  CALL(ctx, softmax, a);
  grab(ctx, out, n, y + (size_t)(b->off[b->pos] * COLS) * BF, COLS * BF);
  scree_test_dfree(ctx, x), scree_test_dfree(ctx, y);
  free(hx);
}

static void c_swiglu(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                     size_t *n) {
  const int64_t rows = b->total;
  const size_t bytes = (size_t)(rows * COLS) * BF;
  uint16_t *hg = malloc(bytes), *hu = malloc(bytes);
  fill_rows(hg, b, COLS, s, 3.f, 1);
  fill_rows(hu, b, COLS, s, 3.f, 2);
  scree_devptr g = up(ctx, hg, bytes), u = up(ctx, hu, bytes), y = up(ctx, NULL, bytes);
  scree_swiglu_args a = {.gate = g, .up = u, .y = y, .rows = rows, .cols = COLS,
                         .dtype = SCREE_DTYPE_BF16, .y_dtype = SCREE_DTYPE_BF16};
  CALL(ctx, swiglu, a);
  grab(ctx, out, n, y + (size_t)(b->off[b->pos] * COLS) * BF, COLS * BF);
  scree_test_dfree(ctx, g), scree_test_dfree(ctx, u), scree_test_dfree(ctx, y);
  free(hg), free(hu);
}

#define VOCAB 32000

static void c_cross_entropy(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                            size_t *n) {
  const int64_t rows = b->total;
  const size_t bytes = (size_t)(rows * VOCAB) * BF;
  uint16_t *hl = malloc(bytes);
  fill_rows(hl, b, VOCAB, s, 8.f, 1);
  int64_t *ht = malloc(sizeof(int64_t) * (size_t)rows);
  for (int64_t r = 0; r < rows; r++)
    ht[r] = r == b->off[b->pos] ? 1234 : irand(s, 0, VOCAB - 1);
  scree_devptr l = up(ctx, hl, bytes), t = up(ctx, ht, sizeof(int64_t) * (size_t)rows),
               loss = up(ctx, NULL, (size_t)rows * 4), lse = up(ctx, NULL, (size_t)rows * 4);
  scree_cross_entropy_args a = {.logits = l, .targets = t, .loss = loss, .lse = lse,
                                .rows = rows, .vocab = VOCAB, .ignore_index = -100,
                                .dtype = SCREE_DTYPE_BF16, .label_smoothing = 0.1f,
                                .z_loss = 1e-4f};
  CALL(ctx, cross_entropy, a);
  grab(ctx, out, n, loss + (size_t)b->off[b->pos] * 4, 4);
  grab(ctx, out, n, lse + (size_t)b->off[b->pos] * 4, 4);
  scree_test_dfree(ctx, l), scree_test_dfree(ctx, t), scree_test_dfree(ctx, loss),
      scree_test_dfree(ctx, lse);
  free(hl), free(ht);
}

/* ---- varlen ops: a sequence is a range of tokens ------------------------- */

#define RS_COLS 64

static void c_ragged_softmax(scree_context *ctx, const batch *b, uint64_t *s,
                             unsigned char *out, size_t *n) {
  const size_t bytes = (size_t)(b->total * RS_COLS) * BF;
  uint16_t *hx = malloc(bytes);
  fill_rows(hx, b, RS_COLS, s, 4.f, 1);
  int32_t *cu = cu_of(b);
  scree_devptr x = up(ctx, hx, bytes), y = up(ctx, NULL, bytes),
               dcu = up(ctx, cu, sizeof(int32_t) * (size_t)(b->n + 1));
  scree_ragged_softmax_args a = {.x = x, .y = y, .cu_seqlens = dcu, .batch = b->n,
                                 .total = b->total, .max_seqlen = b->maxlen, .cols = RS_COLS,
                                 .x_dtype = SCREE_DTYPE_BF16, .y_dtype = SCREE_DTYPE_BF16};
  CALL(ctx, ragged_softmax, a);
  grab(ctx, out, n, y + (size_t)(b->off[b->pos] * RS_COLS) * BF,
       (size_t)(b->len[b->pos] * RS_COLS) * BF);
  scree_test_dfree(ctx, x), scree_test_dfree(ctx, y), scree_test_dfree(ctx, dcu);
  free(hx), free(cu);
}

#define HQ 8
#define HKV 2
#define HD 128

static void c_rope(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                   size_t *n) {
  const size_t qb = (size_t)(b->total * HQ * HD) * BF, kb = (size_t)(b->total * HKV * HD) * BF;
  uint16_t *hq = malloc(qb), *hk = malloc(kb);
  fill_rows(hq, b, HQ * HD, s, 2.f, 1);
  fill_rows(hk, b, HKV * HD, s, 2.f, 2);
  int32_t *cu = cu_of(b);
  scree_devptr q = up(ctx, hq, qb), k = up(ctx, hk, kb),
               dcu = up(ctx, cu, sizeof(int32_t) * (size_t)(b->n + 1));
  scree_rope_args a = {.q = q, .k = k, .cu_seqlens = dcu, .total = b->total, .batch = b->n,
                       .max_position = 8192, .heads_q = HQ, .heads_kv = HKV, .head_dim = HD,
                       .rotary_dim = HD, .dtype = SCREE_DTYPE_BF16, .theta = 10000.f};
  CALL(ctx, rope, a);
  const int64_t t0 = b->off[b->pos], L = b->len[b->pos];
  grab(ctx, out, n, q + (size_t)(t0 * HQ * HD) * BF, (size_t)(L * HQ * HD) * BF);
  grab(ctx, out, n, k + (size_t)(t0 * HKV * HD) * BF, (size_t)(L * HKV * HD) * BF);
  scree_test_dfree(ctx, q), scree_test_dfree(ctx, k), scree_test_dfree(ctx, dcu);
  free(hq), free(hk), free(cu);
}

#define PAGE 16

/* Each sequence's pages: a shuffled set, so that the target's pages
 * differ from batch to batch. */
static int32_t *shuffled_pages(int64_t npages, uint64_t *s) {
  int32_t *p = malloc(sizeof(int32_t) * (size_t)npages);
  for (int64_t i = 0; i < npages; i++) p[i] = (int32_t)i;
  for (int64_t i = npages - 1; i > 0; i--) {
    const int64_t j = irand(s, 0, i);
    const int32_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  return p;
}

static void c_kv_append(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                        size_t *n) {
  const int64_t row = HKV * HD;
  const size_t nb = (size_t)(b->total * row) * BF;
  uint16_t *hk = malloc(nb), *hv = malloc(nb);
  fill_rows(hk, b, row, s, 2.f, 1);
  fill_rows(hv, b, row, s, 2.f, 2);
  int64_t npages = 0;
  for (int i = 0; i < b->n; i++) npages += (b->len[i] + PAGE - 1) / PAGE;
  int32_t *pages = shuffled_pages(npages, s);
  int64_t *slots = malloc(sizeof(int64_t) * (size_t)b->total), pg = 0;
  for (int i = 0; i < b->n; i++) {
    for (int64_t t = 0; t < b->len[i]; t++)
      slots[b->off[i] + t] = (int64_t)pages[pg + t / PAGE] * PAGE + t % PAGE;
    pg += (b->len[i] + PAGE - 1) / PAGE;
  }
  const size_t cb = (size_t)(npages * PAGE * row) * BF;
  scree_devptr k = up(ctx, hk, nb), v = up(ctx, hv, nb), kc = up(ctx, NULL, cb),
               vc = up(ctx, NULL, cb), sm = up(ctx, slots, sizeof(int64_t) * (size_t)b->total);
  scree_kv_append_args a = {.k = k, .v = v, .k_cache = kc, .v_cache = vc, .slot_mapping = sm,
                            .total_new = b->total, .num_pages = npages, .page_size = PAGE,
                            .heads_kv = HKV, .head_dim = HD, .dtype = SCREE_DTYPE_BF16};
  CALL(ctx, kv_append, a);
  for (int64_t t = 0; t < b->len[b->pos]; t++) {
    const int64_t slot = slots[b->off[b->pos] + t];
    grab(ctx, out, n, kc + (size_t)(slot * row) * BF, (size_t)row * BF);
    grab(ctx, out, n, vc + (size_t)(slot * row) * BF, (size_t)row * BF);
  }
  scree_test_dfree(ctx, k), scree_test_dfree(ctx, v), scree_test_dfree(ctx, kc),
      scree_test_dfree(ctx, vc), scree_test_dfree(ctx, sm);
  free(hk), free(hv), free(pages), free(slots);
}

/* Attention through the public entry (the "any" bucket's config), or with
 * one implementation's config fixed (scree__run_exact): the generic
 * kernel's default, or on sm_90 the hopper kernel's, so that both kernels
 * are shown to give a sequence the same bits at any position in any
 * batch whichever one the bucket picks. */
enum { ATTN_PUBLIC, ATTN_GENERIC, ATTN_HOPPER };
static int attn_mode = ATTN_PUBLIC;

static void run_attention(scree_context *ctx, const scree_attention_args *a) {
  if (attn_mode == ATTN_PUBLIC) {
    CALL(ctx, attention, *a);
    return;
  }
  const scree__op *op = scree__op_find("attention");
  scree__variant var;
  memset(&var, 0, sizeof var);
  int skip = 0;
  scree_status st = scree__args_check(ctx, op, a, NULL, &var, &skip);
  ck_assert_msg(st == SCREE_OK, "%s", scree_last_error(ctx));
  scree__config cfg;
  memset(&cfg, 0, sizeof cfg);
  if (attn_mode == ATTN_GENERIC) {
    scree__target t80;
    ck_assert_int_eq(scree__target_for_arch("sm_80", &t80), 0);
    op->default_config(&t80, &var, a, &cfg); /* sm_80: the generic kernel's */
    ck_assert_str_eq(op->impls[cfg.impl].name, "generic");
  } else {
    for (cfg.impl = 0; strcmp(op->impls[cfg.impl].name, "hopper"); cfg.impl++) {
    }
    scree__hopper_default(HD, &cfg);
  }
  st = scree__run_exact(ctx, op, &cfg, &var, a, NULL);
  ck_assert_msg(st == SCREE_OK, "attention: %s: %s", scree_status_name(st),
                scree_last_error(ctx));
}

static void c_attention(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                        size_t *n) {
  const size_t qb = (size_t)(b->total * HQ * HD) * BF, kb = (size_t)(b->total * HKV * HD) * BF;
  uint16_t *hq = malloc(qb), *hk = malloc(kb), *hv = malloc(kb);
  fill_rows(hq, b, HQ * HD, s, 1.f, 1);
  fill_rows(hk, b, HKV * HD, s, 1.f, 2);
  fill_rows(hv, b, HKV * HD, s, 1.f, 3);
  int32_t *cu = cu_of(b);
  const size_t cub = sizeof(int32_t) * (size_t)(b->n + 1);
  scree_devptr q = up(ctx, hq, qb), k = up(ctx, hk, kb), v = up(ctx, hv, kb),
               o = up(ctx, NULL, qb), lse = up(ctx, NULL, (size_t)(HQ * b->total) * 4),
               cq = up(ctx, cu, cub), ck = up(ctx, cu, cub);
  scree_attention_args a = {.q = q, .k = k, .v = v, .out = o, .lse = lse, .cu_seqlens_q = cq,
                            .cu_seqlens_k = ck, .batch = b->n, .total_q = b->total,
                            .total_k = b->total, .max_seqlen_q = b->maxlen,
                            .max_seqlen_k = b->maxlen, .heads_q = HQ, .heads_kv = HKV,
                            .head_dim = HD, .dtype = SCREE_DTYPE_BF16, .causal = 1,
                            .window_left = -1, .window_right = -1};
  run_attention(ctx, &a);
  const int64_t t0 = b->off[b->pos], L = b->len[b->pos];
  grab(ctx, out, n, o + (size_t)(t0 * HQ * HD) * BF, (size_t)(L * HQ * HD) * BF);
  for (int h = 0; h < HQ; h++)
    grab(ctx, out, n, lse + (size_t)(h * b->total + t0) * 4, (size_t)L * 4);
  scree_test_dfree(ctx, q), scree_test_dfree(ctx, k), scree_test_dfree(ctx, v),
      scree_test_dfree(ctx, o), scree_test_dfree(ctx, lse), scree_test_dfree(ctx, cq),
      scree_test_dfree(ctx, ck);
  free(hq), free(hk), free(hv), free(cu);
}

/* Paged attention: each sequence has qlen query tokens (the batch's len)
 * and keys of its own length (the target's TARGET_KEYS, the others'
 * random), in shuffled pages. */
#define TARGET_KEYS 5000

static void c_paged(scree_context *ctx, const batch *b, uint64_t *s, unsigned char *out,
                    size_t *n) {
  const int64_t row = HKV * HD;
  int64_t keys[257], maxk = 0, npages = 0, maxpages = 0;
  for (int i = 0; i < b->n; i++) {
    keys[i] = i == b->pos ? TARGET_KEYS : irand(s, 1, 9000);
    if (keys[i] > maxk) maxk = keys[i];
    const int64_t p = (keys[i] + PAGE - 1) / PAGE;
    npages += p;
    if (p > maxpages) maxpages = p;
  }
  int32_t *pages = shuffled_pages(npages, s);
  int32_t *bt = calloc((size_t)(b->n * maxpages), sizeof(int32_t));
  int32_t *sk = malloc(sizeof(int32_t) * (size_t)b->n);
  const size_t cb = (size_t)(npages * PAGE * row) * BF;
  uint16_t *hkc = malloc(cb), *hvc = malloc(cb);
  int64_t pg = 0;
  for (int i = 0; i < b->n; i++) {
    sk[i] = (int32_t)keys[i];
    const int64_t p = (keys[i] + PAGE - 1) / PAGE;
    uint64_t ts = TARGET_SEED ^ 11;
    for (int64_t j = 0; j < p; j++) {
      bt[i * maxpages + j] = pages[pg + j];
      uint64_t *src = i == b->pos ? &ts : s;
      fill(hkc + (size_t)pages[pg + j] * PAGE * row, (size_t)(PAGE * row), src, 1.f);
      fill(hvc + (size_t)pages[pg + j] * PAGE * row, (size_t)(PAGE * row), src, 1.f);
    }
    pg += p;
  }
  const size_t qb = (size_t)(b->total * HQ * HD) * BF;
  uint16_t *hq = malloc(qb);
  fill_rows(hq, b, HQ * HD, s, 1.f, 1);
  int32_t *cu = cu_of(b);
  scree_devptr q = up(ctx, hq, qb), o = up(ctx, NULL, qb),
               lse = up(ctx, NULL, (size_t)(HQ * b->total) * 4), kc = up(ctx, hkc, cb),
               vc = up(ctx, hvc, cb),
               dbt = up(ctx, bt, sizeof(int32_t) * (size_t)(b->n * maxpages)),
               dsk = up(ctx, sk, sizeof(int32_t) * (size_t)b->n),
               dcu = up(ctx, cu, sizeof(int32_t) * (size_t)(b->n + 1));
  scree_paged_attention_args a = {
      .q = q, .out = o, .lse = lse, .k_cache = kc, .v_cache = vc, .block_table = dbt,
      .seqlens_k = dsk, .cu_seqlens_q = dcu, .batch = b->n, .total_q = b->total,
      .max_seqlen_q = b->maxlen, .max_seqlen_k = maxk, .num_pages = npages, .page_size = PAGE,
      .block_table_stride = maxpages, .heads_q = HQ, .heads_kv = HKV, .head_dim = HD,
      .dtype = SCREE_DTYPE_BF16, .causal = 1, .window_left = -1, .window_right = -1};
  CALL(ctx, paged_attention, a);
  const int64_t t0 = b->off[b->pos], L = b->len[b->pos];
  grab(ctx, out, n, o + (size_t)(t0 * HQ * HD) * BF, (size_t)(L * HQ * HD) * BF);
  for (int h = 0; h < HQ; h++)
    grab(ctx, out, n, lse + (size_t)(h * b->total + t0) * 4, (size_t)L * 4);
  scree_test_dfree(ctx, q), scree_test_dfree(ctx, o), scree_test_dfree(ctx, lse),
      scree_test_dfree(ctx, kc), scree_test_dfree(ctx, vc), scree_test_dfree(ctx, dbt),
      scree_test_dfree(ctx, dsk), scree_test_dfree(ctx, dcu);
  free(pages), free(bt), free(sk), free(hkc), free(hvc), free(hq), free(cu);
}

/* ---- the cases ------------------------------------------------------------ */

typedef struct tcase {
  const char *name;
  case_fn fn;
  int64_t tlen, lo, hi; /* the target's units (rows, tokens, query tokens), the others' */
  int attn;             /* attention: ATTN_* */
  int plain;            /* also run without the mode, as a note (compiles more: a few) */
} tcase;

static const tcase cases[] = {
    {"rmsnorm", c_rmsnorm, 1, 1, 1, ATTN_PUBLIC, 0},
    {"add_rmsnorm", c_add_rmsnorm, 1, 1, 1, ATTN_PUBLIC, 0},
    {"layernorm", c_layernorm, 1, 1, 1, ATTN_PUBLIC, 0},
    {"softmax", c_softmax, 1, 1, 1, ATTN_PUBLIC, 0},
    {"swiglu", c_swiglu, 1, 1, 1, ATTN_PUBLIC, 0},
    {"cross_entropy", c_cross_entropy, 1, 1, 1, ATTN_PUBLIC, 0},
    {"ragged_softmax", c_ragged_softmax, 300, 1, 700, ATTN_PUBLIC, 0},
    {"rope", c_rope, 77, 1, 300, ATTN_PUBLIC, 0},
    {"kv_append", c_kv_append, 77, 1, 300, ATTN_PUBLIC, 0},
    {"attention", c_attention, 200, 1, 400, ATTN_PUBLIC, 0},
    {"attention generic", c_attention, 200, 1, 400, ATTN_GENERIC, 0},
    {"attention hopper", c_attention, 200, 1, 400, ATTN_HOPPER, 0},
    {"paged_attention decode", c_paged, 1, 1, 1, ATTN_PUBLIC, 1},
    {"paged_attention multi-query", c_paged, 4, 1, 8, ATTN_PUBLIC, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))
#define MAX_OUT ((size_t)64 << 20)

static const int sizes[] = {2, 64, 256};

/* The target alone, then inside each batch size at a random position;
 * 1 if every output equals the alone one bitwise. */
static int run_case(scree_context *ctx, const tcase *c, uint64_t seed, int must_match) {
  unsigned char *alone = malloc(MAX_OUT), *got = malloc(MAX_OUT);
  size_t na = 0, ng;
  uint64_t s = seed;
  batch *b = malloc(sizeof *b);
  make_batch(b, 1, 0, c->tlen, c->lo, c->hi, &s);
  c->fn(ctx, b, &s, alone, &na);
  int same = 1;
  for (int k = 0; k < 3; k++) {
    const int nseq = sizes[k] + 1; /* the target and sizes[k] others */
    const int pos = (int)irand(&s, 0, nseq - 1);
    make_batch(b, nseq, pos, c->tlen, c->lo, c->hi, &s);
    ng = 0;
    c->fn(ctx, b, &s, got, &ng);
    ck_assert_uint_eq(ng, na);
    const int eq = !memcmp(alone, got, na);
    if (must_match)
      ck_assert_msg(eq, "%s: the sequence's output differs inside a batch of %d others "
                        "(position %d of %d)", c->name, sizes[k], pos, nseq);
    same &= eq;
  }
  free(b), free(alone), free(got);
  return same;
}

START_TEST(bitwise_invariant) {
  const tcase *c = &cases[_i];
  const uint64_t seed = scree_test_seed() + (uint64_t)_i;
  attn_mode = c->attn;
  if (c->attn == ATTN_HOPPER && inv_ctx->sm != 90) {
    printf("%s: skipped: the hopper kernel needs sm_90 (this is %s)\n", c->name, inv_ctx->arch);
    return;
  }
  run_case(inv_ctx, c, seed, 1);
  printf("%s: bitwise the same alone and in batches of 2, 64 and 256 others\n", c->name);
  if (!c->plain) return;
  /* without the mode: a note, not a failure */
  const int same = run_case(plain_ctx, c, seed, 0);
  printf("%s: without the mode the output %s\n", c->name,
         same ? "was the same too" : "DIFFERS with the batch");
  fflush(stdout);
}
END_TEST

SCREE_TEST_MAIN(.name = "batch_invariance", .init = init, .nofork = 1,
                .loops = SCREE_LOOPS({bitwise_invariant, NCASES}))
