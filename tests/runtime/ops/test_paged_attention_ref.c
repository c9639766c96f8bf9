/* test_paged_attention_ref.c - the CPU reference for paged attention against
 * two baselines:
 *   - scree_attention's reference on the same keys gathered out of their
 *     pages into contiguous K and V (cu_seqlens_k from seqlens_k): every
 *     page size, shuffled and shared pages, padded cache strides, GQA groups
 *     1 to 16 and MQA, causal and not, sliding windows, softcap, query
 *     lengths from 1 to 64 against 0 to 1000 keys;
 *   - for softcap also a dense [Lq, Lk] score matrix per sequence and head
 *     written from the definition in scree.h (softcap * tanh(scale * q.k /
 *     softcap), masked, softmax in double).
 * The problems are the op's own check problems (ops/paged_attention.c's
 * problem hook), with normal(0, 1) inputs. Both sides compute in double from
 * the same rounded inputs: outputs within 1 ulp of the dtype (or 1e-12),
 * lse within 1 fp32 ulp; rows with no key exact zeros and -inf. out and lse
 * are poisoned with NaN first, so every row must be written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

SCREE__REFERENCE(paged_attention);
SCREE__REFERENCE(attention);

typedef struct pcase {
  int page, hq, hkv, d, causal;
  int64_t wl, wr;
  float softcap;
  scree_dtype dt;
} pcase;

/* The op's check problem for the case, its inputs filled, out and lse
 * poisoned: host buffers in the problem's order. */
typedef struct built {
  scree__problem p;
  void *host[SCREE__MAX_BUFS];
} built;

static void build(const pcase *c, uint64_t seed, built *bt) {
  const scree__op *op = scree__op_find("paged_attention");
  ck_assert_ptr_nonnull(op);
  scree_paged_attention_args a;
  memset(&a, 0, sizeof a);
  a.batch = 12;
  a.max_seqlen_q = 64;
  a.max_seqlen_k = 1000;
  a.page_size = c->page;
  a.heads_q = c->hq;
  a.heads_kv = c->hkv;
  a.head_dim = c->d;
  a.dtype = c->dt;
  a.causal = c->causal;
  a.window_left = c->wl;
  a.window_right = c->wr;
  a.softcap = c->softcap;
  scree__variant var = {{c->dt, c->d}};
  char why[256];
  memset(&bt->p, 0, sizeof bt->p);
  ck_assert_msg(op->problem(&a, &var, 1, seed, NULL, &bt->p, why, sizeof why) == 0, "%s", why);
  for (int i = 0; i < bt->p.nbufs; i++) {
    scree__buf *b = &bt->p.bufs[i];
    const size_t bytes = b->count * scree__elem_size(b->dtype);
    bt->host[i] = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(bt->host[i]);
    if (b->kind == SCREE__BUF_HOST_IN)
      memcpy(bt->host[i], b->host, bytes);
    else if (b->kind == SCREE__BUF_IN)
      scree_test_fill(bt->host[i], (scree_dtype)b->dtype, b->count, 1.0);
    else
      memset(bt->host[i], 0xff, bytes); /* NaN in every dtype */
  }
}

static void unbuild(built *bt) {
  for (int i = 0; i < bt->p.nbufs; i++) free(bt->host[i]);
  scree__problem_free(&bt->p);
}

static void *buf(built *bt, const char *name) {
  for (int i = 0; i < bt->p.nbufs; i++)
    if (!strcmp(bt->p.bufs[i].name, name)) return bt->host[i];
  ck_abort_msg("no buffer %s", name);
  return NULL;
}

/* 1 if got and want agree: both -inf, both 0 (rows with no key), or within
 * 1 ulp of the dtype or 1e-12. */
static int close_to(double got, double want, scree_dtype dt) {
  if (isinf(want) || isinf(got)) return got == want;
  if (isnan(got) || isnan(want)) return 0;
  const double ulp = dt == SCREE_DTYPE_BF16 ? 1.0 / 128 : dt == SCREE_DTYPE_FP16 ? 1.0 / 1024
                                                                                 : 1.2e-7;
  return fabs(got - want) <= ulp * fabs(want) + 1e-12;
}

/* Compares paged out/lse (q-major [total_q, heads_q, d]) with a dense
 * [total_q, heads_q, d] and lse [heads_q, total_q]. */
static void compare(const pcase *c, const scree_paged_attention_args *a, const void *out,
                    const float *lse, const void *want, const float *wlse, const char *what) {
  const int64_t n = a->total_q * a->heads_q * a->head_dim;
  for (int64_t i = 0; i < n; i++) {
    const double g = scree__load_elem(out, a->dtype, (size_t)i);
    const double w = scree__load_elem(want, a->dtype, (size_t)i);
    CHECK(close_to(g, w, a->dtype), "%s page %d %d:%d d=%d: out[%lld] = %.9g, want %.9g", what,
          c->page, c->hq, c->hkv, c->d, (long long)i, g, w);
  }
  for (int64_t i = 0; i < a->total_q * a->heads_q; i++)
    CHECK(close_to(lse[i], wlse[i], SCREE_DTYPE_FP32), "%s: lse[%lld] = %.9g, want %.9g", what,
          (long long)i, (double)lse[i], (double)wlse[i]);
}

/* The paged reference against scree_attention's on gathered keys. */
static void against_gathered(const pcase *c, uint64_t seed) {
  built bt;
  build(c, seed, &bt);
  const scree_paged_attention_args *a = (const scree_paged_attention_args *)bt.p.args;
  void *q = buf(&bt, "q"), *kc = buf(&bt, "k_cache"), *vc = buf(&bt, "v_cache");
  const int32_t *tab = buf(&bt, "block_table"), *sk = buf(&bt, "seqlens_k"),
                *cq = buf(&bt, "cu_seqlens_q");
  void *out = buf(&bt, "out");
  float *lse = buf(&bt, "lse");
  void *hosts[SCREE__MAX_BUFS];
  for (int i = 0; i < bt.p.nbufs; i++) hosts[i] = bt.host[i];
  scree__ref_paged_attention(a, hosts);

  /* Gather: contiguous [total_k, heads_kv, d]. */
  const int64_t n = a->batch, d = a->head_dim, hkv = a->heads_kv;
  int32_t *ck = malloc((size_t)(n + 1) * sizeof *ck);
  ck_assert_ptr_nonnull(ck);
  ck[0] = 0;
  for (int64_t b = 0; b < n; b++) ck[b + 1] = ck[b] + sk[b];
  const int64_t tk = ck[n];
  const size_t es = scree__elem_size(a->dtype);
  void *k = malloc((size_t)(tk * hkv * d + 1) * es), *v = malloc((size_t)(tk * hkv * d + 1) * es);
  ck_assert(k && v);
  const int64_t ht = a->cache_head_stride, tt = a->cache_token_stride, pt = a->cache_page_stride;
  ck_assert(ht && tt && pt); /* check problems pad every stride */
  for (int64_t b = 0; b < n; b++)
    for (int64_t j = 0; j < sk[b]; j++) {
      const int64_t page = tab[b * a->block_table_stride + j / a->page_size];
      ck_assert(page >= 0 && page < a->num_pages);
      for (int64_t g = 0; g < hkv; g++) {
        const size_t src = (size_t)(page * pt + (j % a->page_size) * tt + g * ht) * es;
        const size_t dst = (size_t)(((ck[b] + j) * hkv + g) * d) * es;
        memcpy((char *)k + dst, (const char *)kc + src, (size_t)d * es);
        memcpy((char *)v + dst, (const char *)vc + src, (size_t)d * es);
      }
    }
  scree_attention_args at;
  memset(&at, 0, sizeof at);
  at.batch = n;
  at.total_q = a->total_q;
  at.total_k = tk;
  at.max_seqlen_q = a->max_seqlen_q;
  at.max_seqlen_k = a->max_seqlen_k;
  at.heads_q = a->heads_q;
  at.heads_kv = hkv;
  at.head_dim = d;
  at.dtype = a->dtype;
  at.causal = a->causal;
  at.scale = a->scale;
  at.window_left = a->window_left;
  at.window_right = a->window_right;
  at.softcap = a->softcap;
  const size_t on = (size_t)(a->total_q * a->heads_q * d);
  void *want = malloc(on * es + 1);
  float *wlse = malloc((size_t)(a->total_q * a->heads_q + 1) * sizeof *wlse);
  ck_assert(want && wlse);
  scree__ref_attention(&at, (void *const[]){q, k, v, (void *)cq, ck, want, wlse});
  compare(c, a, out, lse, want, wlse, "against scree_attention's reference");
  free(ck), free(k), free(v), free(want), free(wlse);
  unbuild(&bt);
}

/* The paged reference with softcap against a dense computation from the
 * definition. */
static void against_dense_softcap(const pcase *c, uint64_t seed) {
  built bt;
  build(c, seed, &bt);
  const scree_paged_attention_args *a = (const scree_paged_attention_args *)bt.p.args;
  void *q = buf(&bt, "q"), *kc = buf(&bt, "k_cache"), *vc = buf(&bt, "v_cache");
  const int32_t *tab = buf(&bt, "block_table"), *sk = buf(&bt, "seqlens_k"),
                *cq = buf(&bt, "cu_seqlens_q");
  void *out = buf(&bt, "out");
  float *lse = buf(&bt, "lse");
  void *hosts[SCREE__MAX_BUFS];
  for (int i = 0; i < bt.p.nbufs; i++) hosts[i] = bt.host[i];
  scree__ref_paged_attention(a, hosts);
  const int64_t d = a->head_dim, group = a->heads_q / a->heads_kv;
  const double scale = a->scale != 0.f ? a->scale : 1.0 / sqrt((double)d);
  const size_t on = (size_t)(a->total_q * a->heads_q * d);
  void *want = malloc(on * scree__elem_size(a->dtype) + 1);
  float *wlse = malloc((size_t)(a->total_q * a->heads_q + 1) * sizeof *wlse);
  double *p = malloc(sizeof(double) * (size_t)(a->max_seqlen_k + 1));
  ck_assert(want && wlse && p);
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t lq = cq[b + 1] - cq[b], lk = sk[b];
    for (int64_t h = 0; h < a->heads_q; h++)
      for (int64_t i = 0; i < lq; i++) {
        const int64_t t = cq[b] + i, pos = i + lk - lq;
        double m = -INFINITY;
        for (int64_t j = 0; j < lk; j++) {
          int vis = 1;
          if (a->causal && j > pos) vis = 0;
          if (!a->causal && a->window_right >= 0 && j > pos + a->window_right) vis = 0;
          if (a->window_left >= 0 && j < pos - a->window_left) vis = 0;
          p[j] = -INFINITY;
          if (!vis) continue;
          const int64_t page = tab[b * a->block_table_stride + j / a->page_size];
          const size_t kb = (size_t)(page * a->cache_page_stride +
                                     (j % a->page_size) * a->cache_token_stride +
                                     (h / group) * a->cache_head_stride);
          double x = 0;
          for (int64_t e = 0; e < d; e++)
            x += scree__load_elem(q, a->dtype, (size_t)((t * a->heads_q + h) * d + e)) *
                 scree__load_elem(kc, a->dtype, kb + (size_t)e);
          p[j] = a->softcap * tanh(scale * x / a->softcap);
          if (p[j] > m) m = p[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < lk; j++) sum += p[j] = isinf(p[j]) ? 0 : exp(p[j] - m);
        for (int64_t e = 0; e < d; e++) {
          double acc = 0;
          for (int64_t j = 0; j < lk; j++) {
            if (p[j] == 0) continue;
            const int64_t page = tab[b * a->block_table_stride + j / a->page_size];
            const size_t vb = (size_t)(page * a->cache_page_stride +
                                       (j % a->page_size) * a->cache_token_stride +
                                       (h / group) * a->cache_head_stride);
            acc += p[j] * scree__load_elem(vc, a->dtype, vb + (size_t)e);
          }
          scree__store_elem(want, a->dtype, (size_t)((t * a->heads_q + h) * d + e),
                            sum > 0 ? acc / sum : 0.0);
        }
        wlse[h * a->total_q + t] = sum > 0 ? (float)(m + log(sum)) : -INFINITY;
      }
  }
  compare(c, a, out, lse, want, wlse, "against the dense softcap baseline");
  free(want), free(wlse), free(p);
  unbuild(&bt);
}

START_TEST(every_page_size) {
  static const int pages[] = {1, 8, 16, 32, 64, 128, 256};
  for (int i = 0; i < 7; i++) {
    const pcase c = {pages[i], 8, 2, 64, 1, -1, -1, 0, SCREE_DTYPE_BF16};
    against_gathered(&c, 100 + (uint64_t)i);
  }
}
END_TEST

START_TEST(groups_and_mqa) {
  static const int g[][2] = {{4, 4}, {6, 2}, {16, 1}, {32, 2}, {12, 4}};
  for (int i = 0; i < 5; i++) {
    const pcase c = {16, g[i][0], g[i][1], 128, i & 1, -1, -1, 0, SCREE_DTYPE_FP16};
    against_gathered(&c, 200 + (uint64_t)i);
  }
}
END_TEST

START_TEST(windows_and_noncausal) {
  const pcase cs[] = {
      {16, 4, 2, 64, 1, 100, -1, 0, SCREE_DTYPE_BF16},
      {8, 4, 2, 64, 0, 50, 20, 0, SCREE_DTYPE_FP16},
      {32, 4, 4, 32, 0, -1, 0, 0, SCREE_DTYPE_BF16},
      {64, 2, 1, 96, 0, -1, -1, 0, SCREE_DTYPE_BF16},
      {1, 2, 1, 256, 1, 7, -1, 0, SCREE_DTYPE_FP16},
  };
  for (int i = 0; i < 5; i++) against_gathered(&cs[i], 300 + (uint64_t)i);
}
END_TEST

START_TEST(softcap) {
  const pcase cs[] = {
      {16, 4, 2, 64, 1, -1, -1, 2.0f, SCREE_DTYPE_BF16},
      {8, 2, 1, 32, 0, 30, -1, 50.0f, SCREE_DTYPE_FP16},
  };
  for (int i = 0; i < 2; i++) against_dense_softcap(&cs[i], 400 + (uint64_t)i);
  /* scree_attention's reference applies the same softcap. */
  const pcase gs[] = {
      {16, 4, 2, 64, 1, -1, -1, 2.0f, SCREE_DTYPE_BF16},
      {8, 2, 1, 32, 0, 30, -1, 50.0f, SCREE_DTYPE_FP16},
      {32, 8, 2, 128, 1, 100, -1, 0.5f, SCREE_DTYPE_FP16},
      {1, 4, 4, 96, 0, 20, 10, 5.0f, SCREE_DTYPE_BF16},
  };
  for (int i = 0; i < 4; i++) against_gathered(&gs[i], 500 + (uint64_t)i);
}
END_TEST

SCREE_TEST_MAIN(.name = "paged_attention_ref", .timeout = 300,
                .tests = SCREE_TESTS(every_page_size, groups_and_mqa, windows_and_noncausal,
                                     softcap));
