/* test_misc_backward_ref.c - the CPU references for the backward of softmax
 * (last dimension and ragged), SwiGLU (ops/rowwise_backward_ref.c, and the
 * ops' reference hooks in ops/softmax_backward.c and swiglu_backward.c) and RoPE
 * (the hook of ops/rope_backward.c) against
 *   - central finite differences of the forward references' loss
 *     L = sum(y * dy), on tiny fp32 problems with padded strides;
 *   - themselves: in place against out of place, the fused [rows, 2 cols]
 *     forms against two tensors, large gates finite;
 *   - fp16 and bf16 runs against fp32 runs on the same values (outputs
 *     rounded to nearest). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise_backward_ref.h"
#include "test_util.h"

#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

SCREE__REFERENCE(softmax);
SCREE__REFERENCE(swiglu);
SCREE__REFERENCE(swiglu_backward);
SCREE__REFERENCE(softmax_backward);
SCREE__REFERENCE(rope);
SCREE__REFERENCE(ragged_softmax);
SCREE__REFERENCE(rope_backward);

/* Step of the finite differences, and the grid of the inputs: multiples of
 * 2^-10, so that x +- H and x +- H / 2 are exact in fp32 and the only
 * rounding is the forward's fp32 store of y. */
#define H 0x1p-7
#define GRID 0x1p-10

static float grid_value(double lim) {
  return (float)(GRID * floor(scree_test_uniform(-lim / GRID, lim / GRID)));
}

static float *grid_buf(long n, double lim) {
  float *p = calloc((size_t)n + 1, sizeof(float));
  for (long i = 0; i < n; i++) p[i] = grid_value(lim);
  return p;
}

static float *nan_buf(long n) {
  float *p = calloc((size_t)n + 1, sizeof(float));
  for (long i = 0; i < n + 1; i++) p[i] = NAN;
  return p;
}

/* ---- softmax ---------------------------------------------------------------- */

typedef struct smprob {
  int rows, cols;
  long xs, ys; /* x's stride; dy's and dx's */
  float scale;
  float *x, *dy;
} smprob;

/* The forward reference's y (fp32, packed), then L = sum y * dy; *mag gets
 * sum |terms|. y_out, if given, receives y. */
static double sm_loss(const smprob *p, double *mag, float *y_out) {
  float *y = calloc((size_t)p->rows * p->cols + 1, sizeof(float));
  scree_softmax_args a = {.rows = p->rows, .cols = p->cols, .x_stride = p->xs,
                          .scale = p->scale};
  scree__ref_softmax(&a, (void *const[]){p->x, y});
  double l = 0, m = 0;
  for (int r = 0; r < p->rows; r++)
    for (int c = 0; c < p->cols; c++) {
      const double t = (double)y[r * p->cols + c] * p->dy[r * p->ys + c];
      l += t, m += fabs(t);
    }
  if (y_out) memcpy(y_out, y, (size_t)p->rows * p->cols * sizeof(float));
  free(y);
  *mag = m;
  return l;
}

/* Richardson's extrapolation of central differences with steps H and H / 2
 * of loss(v) against the analytic g. Rounding: each L is off by up to E =
 * 2^-24 sum |terms| (the forward's fp32 store), the extrapolation by up to
 * 3 E / H; truncation O(H^4) on these smooth, moderate functions (|x| <= 2,
 * |scale| <= 1.5; gates within 4, where silu's derivatives are of order
 * 1); 1e-4 (1 + |g|) covers it and the double sums. A dropped term of any
 * gradient is O(0.01) or more on these inputs. */
typedef double (*loss_fn)(const void *p, double *mag);

static double central(const void *p, loss_fn f, float *v, double h, double *mag) {
  const float v0 = *v;
  double m1, m2;
  *v = (float)(v0 + h);
  const double lp = f(p, &m1);
  *v = (float)(v0 - h);
  const double lm = f(p, &m2);
  *v = v0;
  *mag = m1 > m2 ? m1 : m2;
  return (lp - lm) / (2 * h);
}

static void check_fd(const void *p, loss_fn f, float *v, double g, const char *what) {
  double m1, m2;
  const double d1 = central(p, f, v, H, &m1), d2 = central(p, f, v, H / 2, &m2);
  const double fd = (4 * d2 - d1) / 3;
  const double tol = 1e-4 * (1 + fabs(g)) + 3 * 0x1p-24 * (m1 > m2 ? m1 : m2) / H;
  CHECK(fabs(fd - g) <= tol, "%s: reference %.9g, finite difference %.9g (tol %.3g)", what, g,
        fd, tol);
}

static double sm_loss_fn(const void *p, double *mag) { return sm_loss(p, mag, NULL); }

START_TEST(softmax_finite_differences) {
  static const int rows_list[] = {1, 2, 3}, cols_list[] = {1, 2, 7, 33};
  static const float scales[] = {0.f, 0.75f, -1.5f};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < 4; j++)
      for (size_t k = 0; k < 3; k++) {
        smprob p = {.rows = rows_list[i], .cols = cols_list[j], .scale = scales[k]};
        p.xs = p.cols + 3, p.ys = p.cols + 1;
        p.x = grid_buf((long)p.rows * p.xs, 2);
        p.dy = grid_buf((long)p.rows * p.ys, 2);
        float *y = calloc((size_t)p.rows * p.cols + 1, sizeof(float));
        double mag;
        sm_loss(&p, &mag, y);
        /* The gaps between strided rows must not be written. */
        float *dx = nan_buf((long)p.rows * p.ys);
        scree__softmax_backward_ref(y, 0, p.dy, p.ys, dx, p.ys, p.rows, p.cols,
                                    SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, p.scale);
        for (int r = 0; r < p.rows; r++) {
          for (int c = 0; c < p.cols; c++) {
            char what[128];
            snprintf(what, sizeof what, "softmax rows=%d cols=%d scale=%g: dx[%d, %d]", p.rows,
                     p.cols, (double)p.scale, r, c);
            check_fd(&p, sm_loss_fn, &p.x[r * p.xs + c], dx[r * p.ys + c], what);
          }
          for (long c = p.cols; c < p.ys; c++) CHECK(isnan(dx[r * p.ys + c]), "gap written");
        }
        free(p.x), free(p.dy), free(y), free(dx);
      }
}
END_TEST

/* dx over dy (in place) gives the same bits as a separate dx; the op's
 * reference hook is the same arithmetic. */
START_TEST(softmax_in_place_and_hook) {
  const int rows = 4, cols = 37;
  float *y = grid_buf(rows * cols, 1), *dy = grid_buf(rows * cols, 2);
  float *dx = nan_buf(rows * cols), *dx2 = nan_buf(rows * cols);
  float *io = calloc(rows * cols + 1, sizeof(float));
  memcpy(io, dy, rows * cols * sizeof(float));
  scree__softmax_backward_ref(y, 0, dy, 0, dx, 0, rows, cols, SCREE_DTYPE_FP32,
                              SCREE_DTYPE_FP32, 0.5f);
  scree__softmax_backward_ref(y, 0, io, 0, io, 0, rows, cols, SCREE_DTYPE_FP32,
                              SCREE_DTYPE_FP32, 0.5f);
  scree_softmax_backward_args a = {.rows = rows, .cols = cols, .scale = 0.5f};
  scree__ref_softmax_backward(&a, (void *const[]){y, dy, dx2});
  CHECK(!memcmp(dx, io, rows * cols * sizeof(float)), "in place differs");
  CHECK(!memcmp(dx, dx2, rows * cols * sizeof(float)), "the hook differs");
  free(y), free(dy), free(dx), free(dx2), free(io);
}
END_TEST

/* ---- ragged softmax --------------------------------------------------------- */

typedef struct rsprob {
  int total, cols, batch;
  long xs, ys;
  float scale;
  const int32_t *cu;
  float *x, *dy;
} rsprob;

static double rs_loss(const void *pv, double *mag) {
  const rsprob *p = pv;
  float *y = calloc((size_t)p->total * p->cols + 1, sizeof(float));
  scree_ragged_softmax_args a = {.batch = p->batch, .total = p->total, .cols = p->cols,
                                 .x_stride = p->xs, .scale = p->scale};
  scree__ref_ragged_softmax(&a, (void *const[]){p->x, (void *)p->cu, y});
  double l = 0, m = 0;
  for (int t = 0; t < p->total; t++)
    for (int c = 0; c < p->cols; c++) {
      const double v = (double)y[t * p->cols + c] * p->dy[t * p->ys + c];
      l += v, m += fabs(v);
    }
  free(y);
  *mag = m;
  return l;
}

/* Sequences of 0, 1, 3 and 2 tokens (an empty one, one of length 1 whose
 * gradient is 0), 1, 2 and 7 columns, three scales: the sums run over one
 * sequence's tokens per column, never across sequences or columns. */
START_TEST(ragged_softmax_finite_differences) {
  static const int32_t cu[] = {0, 0, 1, 4, 6};
  static const int cols_list[] = {1, 2, 7};
  static const float scales[] = {0.f, 0.75f, -1.5f};
  for (size_t j = 0; j < 3; j++)
    for (size_t k = 0; k < 3; k++) {
      rsprob p = {.total = 6, .cols = cols_list[j], .batch = 4, .scale = scales[k], .cu = cu};
      p.xs = p.cols + 3, p.ys = p.cols + 1;
      p.x = grid_buf((long)p.total * p.xs, 2), p.dy = grid_buf((long)p.total * p.ys, 2);
      float *y = calloc((size_t)p.total * p.cols + 1, sizeof(float));
      scree_ragged_softmax_args a = {.batch = p.batch, .total = p.total, .cols = p.cols,
                                     .x_stride = p.xs, .scale = p.scale};
      scree__ref_ragged_softmax(&a, (void *const[]){p.x, (void *)cu, y});
      float *dx = nan_buf((long)p.total * p.ys), *io = calloc((size_t)p.total * p.ys + 1, 4);
      scree__ragged_softmax_backward_ref(y, 0, p.dy, p.ys, dx, p.ys, cu, p.batch, p.cols,
                                         SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, p.scale);
      for (int t = 0; t < p.total; t++) {
        for (int c = 0; c < p.cols; c++) {
          char what[128];
          snprintf(what, sizeof what, "ragged softmax cols=%d scale=%g: dx[%d, %d]", p.cols,
                   (double)p.scale, t, c);
          check_fd(&p, rs_loss, &p.x[t * p.xs + c], dx[t * p.ys + c], what);
        }
        for (long c = p.cols; c < p.ys; c++) CHECK(isnan(dx[t * p.ys + c]), "gap written");
      }
      /* In place over dy: the same bits. */
      memcpy(io, p.dy, (size_t)p.total * p.ys * sizeof(float));
      scree__ragged_softmax_backward_ref(y, 0, io, p.ys, io, p.ys, cu, p.batch, p.cols,
                                         SCREE_DTYPE_FP32, SCREE_DTYPE_FP32, p.scale);
      for (int t = 0; t < p.total; t++)
        for (int c = 0; c < p.cols; c++)
          CHECK(io[t * p.ys + c] == dx[t * p.ys + c], "in place differs at [%d, %d]", t, c);
      free(p.x), free(p.dy), free(y), free(dx), free(io);
    }
}
END_TEST

/* ---- SwiGLU ----------------------------------------------------------------- */

typedef struct swprob {
  int rows, cols;
  long gs, us, ys; /* gate's, up's, dy's strides */
  float *g, *u, *dy;
} swprob;

static double sw_loss(const void *pv, double *mag) {
  const swprob *p = pv;
  float *y = calloc((size_t)p->rows * p->cols + 1, sizeof(float));
  scree_swiglu_args a = {.up = 1, .rows = p->rows, .cols = p->cols, .gate_stride = p->gs,
                         .up_stride = p->us};
  scree__ref_swiglu(&a, (void *const[]){p->g, p->u, y});
  double l = 0, m = 0;
  for (int r = 0; r < p->rows; r++)
    for (int c = 0; c < p->cols; c++) {
      const double t = (double)y[r * p->cols + c] * p->dy[r * p->ys + c];
      l += t, m += fabs(t);
    }
  free(y);
  *mag = m;
  return l;
}

START_TEST(swiglu_finite_differences) {
  static const int rows_list[] = {1, 3}, cols_list[] = {1, 2, 7, 33};
  for (size_t i = 0; i < 2; i++)
    for (size_t j = 0; j < 4; j++) {
      swprob p = {.rows = rows_list[i], .cols = cols_list[j]};
      p.gs = p.cols + 3, p.us = p.cols + 5, p.ys = p.cols + 1;
      p.g = grid_buf((long)p.rows * p.gs, 4);
      p.u = grid_buf((long)p.rows * p.us, 2);
      p.dy = grid_buf((long)p.rows * p.ys, 2);
      float *dg = nan_buf((long)p.rows * p.ys), *du = nan_buf((long)p.rows * p.ys);
      scree__swiglu_backward_ref(p.g, p.gs, p.u, p.us, p.dy, p.ys, dg, p.ys, du, p.ys, p.rows,
                                 p.cols, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32);
      for (int r = 0; r < p.rows; r++) {
        for (int c = 0; c < p.cols; c++) {
          char what[128];
          snprintf(what, sizeof what, "swiglu rows=%d cols=%d: dgate[%d, %d] (gate %g)", p.rows,
                   p.cols, r, c, (double)p.g[r * p.gs + c]);
          check_fd(&p, sw_loss, &p.g[r * p.gs + c], dg[r * p.ys + c], what);
          snprintf(what, sizeof what, "swiglu rows=%d cols=%d: dup[%d, %d]", p.rows, p.cols, r,
                   c);
          check_fd(&p, sw_loss, &p.u[r * p.us + c], du[r * p.ys + c], what);
        }
        for (long c = p.cols; c < p.ys; c++)
          CHECK(isnan(dg[r * p.ys + c]) && isnan(du[r * p.ys + c]), "gap written");
      }
      free(p.g), free(p.u), free(p.dy), free(dg), free(du);
    }
}
END_TEST

/* The op's reference hook in every form (fused input and/or fused output,
 * in place) against the two-tensor reference; gates of +-300 (exp(-g)
 * overflows fp32 there) give the finite limits. */
START_TEST(swiglu_forms_and_large_gates) {
  const int rows = 3, cols = 19;
  const long n = (long)rows * cols;
  float *gu = grid_buf(2 * n, 4), *dy = grid_buf(n, 2);
  gu[0] = 300.f, gu[1] = -300.f, gu[2] = 88.f, gu[3] = -88.f;
  float *g = calloc(n + 1, 4), *u = calloc(n + 1, 4);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      g[r * cols + c] = gu[r * 2 * cols + c];
      u[r * cols + c] = gu[r * 2 * cols + cols + c];
    }
  float *dg = nan_buf(n), *du = nan_buf(n);
  scree__swiglu_backward_ref(g, 0, u, 0, dy, 0, dg, 0, du, 0, rows, cols, SCREE_DTYPE_FP32,
                             SCREE_DTYPE_FP32);
  for (long i = 0; i < n; i++) CHECK(isfinite(dg[i]) && isfinite(du[i]), "not finite at %ld", i);
  CHECK(dg[0] == (float)((double)dy[0] * u[0]) && du[0] == (float)((double)dy[0] * 300.0),
        "g = 300: dgate %g dup %g", (double)dg[0], (double)du[0]);
  CHECK(fabsf(dg[1]) < 1e-30f && fabsf(du[1]) < 1e-30f, "g = -300: dgate %g dup %g",
        (double)dg[1], (double)du[1]);
  for (int form = 0; form < 4; form++) {
    const int two_in = form & 1, two_out = form & 2;
    float *og = nan_buf(2 * n), *ou = nan_buf(n);
    scree_swiglu_backward_args a = {.gate = 1, .up = two_in ? 1 : 0, .dy = 1, .dgate = 1,
                                    .dup = two_out ? 1 : 0, .rows = rows, .cols = cols};
    void *host[5];
    int k = 0;
    host[k++] = two_in ? (void *)g : (void *)gu;
    if (two_in) host[k++] = u;
    host[k++] = dy;
    host[k++] = og;
    if (two_out) host[k++] = ou;
    scree__ref_swiglu_backward(&a, host);
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) {
        const float wg = dg[r * cols + c], wu = du[r * cols + c];
        const float gg = two_out ? og[r * cols + c] : og[r * 2 * cols + c];
        const float gu2 = two_out ? ou[r * cols + c] : og[r * 2 * cols + cols + c];
        CHECK(gg == wg && gu2 == wu, "form in=%s out=%s: [%d, %d] differs",
              two_in ? "two" : "fused", two_out ? "two" : "fused", r, c);
      }
    free(og), free(ou);
  }
  /* In place over the fused input. */
  float *io = calloc(2 * n + 1, 4);
  memcpy(io, gu, 2 * n * sizeof(float));
  scree__swiglu_backward_ref(io, 2 * cols, io + cols, 2 * cols, dy, 0, io, 2 * cols, io + cols,
                             2 * cols, rows, cols, SCREE_DTYPE_FP32, SCREE_DTYPE_FP32);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      CHECK(io[r * 2 * cols + c] == dg[r * cols + c] &&
                io[r * 2 * cols + cols + c] == du[r * cols + c],
            "in place: [%d, %d] differs", r, c);
  free(gu), free(dy), free(g), free(u), free(dg), free(du), free(io);
}
END_TEST

/* ---- RoPE ------------------------------------------------------------------- */

/* Tiny q and k (3 tokens in 2 sequences, 2 q heads and 1 k head of 8, k
 * stored after q's rows with a padded token stride), positions from
 * cu_seqlens, int32 positions (large ones, where the angle is far from 0),
 * or a cos/sin table. */
typedef struct rprob {
  scree_rope_args a;
  float *q, *k, *dq, *dk;
  int32_t cu[3], pos[3];
  float *table;
} rprob;

#define RT 3
#define RHQ 2
#define RHK 1
#define RD 8
#define RKS 12 /* k's token stride: 8 elements of padding-free head plus 4 */

static void *const *rope_host(const rprob *p, float *q, float *k, void **h) {
  int n = 0;
  h[n++] = q;
  h[n++] = k;
  h[n++] = p->a.positions ? (void *)p->pos : (void *)p->cu;
  if (p->a.cos_sin) h[n++] = p->table;
  return h;
}

static double rope_loss(const void *pv, double *mag) {
  const rprob *p = pv;
  float q[RT * RHQ * RD], k[RT * RKS];
  memcpy(q, p->q, sizeof q), memcpy(k, p->k, sizeof k);
  void *h[4];
  scree__ref_rope(&p->a, rope_host(p, q, k, h));
  double l = 0, m = 0;
  for (int i = 0; i < RT * RHQ * RD; i++) l += (double)q[i] * p->dq[i], m += fabs(q[i] * p->dq[i]);
  for (int t = 0; t < RT; t++)
    for (int i = 0; i < RD; i++) {
      const double v = (double)k[t * RKS + i] * p->dk[t * RKS + i];
      l += v, m += fabs(v);
    }
  *mag = m;
  return l;
}

START_TEST(rope_finite_differences) {
  for (int layout = 0; layout < 2; layout++)
    for (int rd = 2; rd <= RD; rd += 6) /* partial (2 of 8) and full rotary */
      for (int mode = 0; mode < 3; mode++) {
        rprob p = {.cu = {0, 1, 3}, .pos = {5, 1000, 123457}};
        p.a = (scree_rope_args){.q = 1, .k = 1, .total = RT, .batch = 2, .heads_q = RHQ,
                                .heads_kv = RHK, .head_dim = RD, .rotary_dim = rd,
                                .k_token_stride = RKS, .layout = (scree_rope_layout)layout,
                                .theta = mode == 1 ? 500000.f : 0.f};
        if (mode >= 1) p.a.positions = 1;
        float tab[6 * RD];
        if (mode == 2) {
          /* A table of 6 positions with any cos and sin values: the
           * backward must use the table's, whatever they are. */
          p.pos[0] = 0, p.pos[1] = 5, p.pos[2] = 3;
          for (int i = 0; i < 6 * rd; i++) tab[i] = grid_value(1);
          p.a.cos_sin = 1, p.a.max_position = 6, p.table = tab;
        }
        p.q = grid_buf(RT * RHQ * RD, 2), p.k = grid_buf(RT * RKS, 2);
        p.dq = grid_buf(RT * RHQ * RD, 2), p.dk = grid_buf(RT * RKS, 2);
        float gq[RT * RHQ * RD], gk[RT * RKS];
        memcpy(gq, p.dq, sizeof gq), memcpy(gk, p.dk, sizeof gk);
        scree_rope_backward_args b;
        memcpy(&b, &p.a, sizeof b);
        void *h[4];
        scree__ref_rope_backward(&b, rope_host(&p, gq, gk, h));
        for (int i = 0; i < RT * RHQ * RD; i++) {
          char what[128];
          snprintf(what, sizeof what, "rope layout=%d rd=%d mode=%d: dq[%d]", layout, rd, mode, i);
          check_fd(&p, rope_loss, &p.q[i], gq[i], what);
        }
        for (int t = 0; t < RT; t++) {
          for (int i = 0; i < RD; i++) {
            char what[128];
            snprintf(what, sizeof what, "rope layout=%d rd=%d mode=%d: dk[%d, %d]", layout, rd,
                     mode, t, i);
            check_fd(&p, rope_loss, &p.k[t * RKS + i], gk[t * RKS + i], what);
          }
          for (int i = RD; i < RKS && t < RT - 1; i++)
            CHECK(gk[t * RKS + i] == p.dk[t * RKS + i], "k padding written");
        }
        /* The backward undoes the forward (on the fly: a rotation). */
        if (mode < 2) {
          memcpy(gq, p.q, sizeof gq), memcpy(gk, p.k, sizeof gk);
          scree__ref_rope(&p.a, rope_host(&p, gq, gk, h));
          scree__ref_rope_backward(&b, rope_host(&p, gq, gk, h));
          for (int i = 0; i < RT * RHQ * RD; i++)
            CHECK(fabsf(gq[i] - p.q[i]) <= 1e-6f, "round trip q[%d]: %g, was %g", i,
                  (double)gq[i], (double)p.q[i]);
        }
        free(p.q), free(p.k), free(p.dq), free(p.dk);
      }
}
END_TEST

/* ---- half dtypes -------------------------------------------------------------- */

/* Rounds an fp32 buffer through dt in place (so both runs see the same
 * values) and copies it out as dt. */
static void *as_dtype(float *p, long n, scree_dtype dt) {
  void *q = calloc((size_t)n + 1, 4);
  for (long i = 0; i < n; i++) {
    scree__store_elem(q, dt, (size_t)i, p[i]);
    p[i] = (float)scree__load_elem(q, dt, (size_t)i);
  }
  return q;
}

/* |got - want| within half a unit in the last place of dt at want, plus
 * fp32's rounding of want. */
static void check_rounded(double got, double want, scree_dtype dt, const char *what, long i) {
  const int mant = dt == SCREE_DTYPE_FP16 ? 10 : 7;
  int e;
  frexp(want, &e);
  if (dt == SCREE_DTYPE_FP16 && e < -13) e = -13; /* subnormal spacing */
  const double half_ulp = ldexp(1.0, e - 1 - mant - 1);
  CHECK(fabs(got - want) <= half_ulp * (1 + 0x1p-20) + 0x1p-24 * fabs(want),
        "%s %s[%ld]: %.9g, fp32 run %.9g rounds to it only with more than half a unit",
        scree__elem_name(dt), what, i, got, want);
}

START_TEST(half_dtypes_round) {
  const scree_dtype dts[] = {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};
  const scree_dtype f = SCREE_DTYPE_FP32;
  for (int k = 0; k < 2; k++) {
    const scree_dtype dt = dts[k];
    const int rows = 3, cols = 64;
    const long n = (long)rows * cols;
    float *a = calloc(n + 1, 4), *b = calloc(n + 1, 4), *c = calloc(n + 1, 4);
    for (long i = 0; i < n; i++) {
      a[i] = (float)scree_test_uniform(0, 0.05);
      b[i] = (float)scree_test_uniform(-4, 4);
      c[i] = (float)scree_test_uniform(-2, 2);
    }
    void *ha = as_dtype(a, n, dt), *hb = as_dtype(b, n, dt), *hc = as_dtype(c, n, dt);
    void *o1 = calloc(n + 1, 4), *o2 = calloc(n + 1, 4);
    float *f1 = calloc(n + 1, 4), *f2 = calloc(n + 1, 4);
    /* softmax: y = a, dy = b (dx in dy's dtype). */
    scree__softmax_backward_ref(ha, 0, hb, 0, o1, 0, rows, cols, dt, dt, 1.5f);
    scree__softmax_backward_ref(a, 0, b, 0, f1, 0, rows, cols, f, f, 1.5f);
    for (long i = 0; i < n; i++) check_rounded(scree__load_elem(o1, dt, i), f1[i], dt, "dx", i);
    /* SwiGLU: gate = b, up = c, dy = c. */
    scree__swiglu_backward_ref(hb, 0, hc, 0, hc, 0, o1, 0, o2, 0, rows, cols, dt, dt);
    scree__swiglu_backward_ref(b, 0, c, 0, c, 0, f1, 0, f2, 0, rows, cols, f, f);
    for (long i = 0; i < n; i++) {
      check_rounded(scree__load_elem(o1, dt, i), f1[i], dt, "dgate", i);
      check_rounded(scree__load_elem(o2, dt, i), f2[i], dt, "dup", i);
    }
    free(a), free(b), free(c), free(ha), free(hb), free(hc), free(o1), free(o2), free(f1),
        free(f2);
  }
}
END_TEST

SCREE_TEST_MAIN(.name = "misc_backward_ref",
                .tests = SCREE_TESTS(softmax_finite_differences, softmax_in_place_and_hook,
                                     ragged_softmax_finite_differences,
                                     swiglu_finite_differences, swiglu_forms_and_large_gates,
                                     rope_finite_differences, half_dtypes_round))
