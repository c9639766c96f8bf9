/* test_rowwise_backward_ref.c - the CPU references for the backward of
 * RMSNorm, residual add + RMSNorm and LayerNorm, and of cross-entropy with
 * label smoothing and z-loss (ops/rowwise_backward_ref.c) against
 *   - central finite differences of the forward references' loss
 *     L = sum(y * dy) (+ sum(h * dh_next) for the fused add), on tiny fp32
 *     problems with padded strides;
 *   - dw and db of many rows against the sums of one-row calls;
 *   - fp16 and bf16 runs against fp32 runs on the same values: outputs
 *     rounded to nearest, and h rounded as the forward rounds it;
 *   - cross-entropy: dlogits against central finite differences of its
 *     loss summed with the reduction's weights; the loss with smoothing and
 *     z-loss against its definition through the plain forward reference
 *     (ops/cross_entropy.c: one call per class as the target); in place
 *     against a separate buffer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise_backward_ref.h"
#include "test_util.h"

/* ck_assert_msg records a mark point on every pass: too slow for many
 * element checks. CHECK costs nothing unless it fails. */
#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* The forward references' hooks (ops/rmsnorm.c, add_rmsnorm.c,
 * layernorm.c). */
SCREE__REFERENCE(rmsnorm);
SCREE__REFERENCE(add_rmsnorm);
SCREE__REFERENCE(layernorm);
SCREE__REFERENCE(cross_entropy);

enum { RMS, ADD, LN };
static const char *const op_names[] = {"rmsnorm", "add_rmsnorm", "layernorm"};

static const int rows_list[] = {1, 2, 3, 5};
static const int cols_list[] = {1, 2, 7, 64};
static const float eps_list[] = {1e-6f, 0.25f};

/* Step of the finite differences, and the grid of the inputs: multiples of
 * 2^-10, so that x +- H, x +- H / 2 and x + residual are exact in fp32 and
 * the only rounding is the forward's fp32 store of y. */
#define H 0x1p-7
#define GRID 0x1p-10

/* A grid value in [-2, 2] with |v| >= 0.25: RMSNorm of one column is
 * sign(x) w away from 0, and steep near it. */
static float grid_value(void) {
  const double m = 0.25 + GRID * floor(scree_test_uniform(0, 1.75 / GRID));
  return (float)(scree_test_rand() & 1 ? m : -m);
}

/* One fp32 problem: [rows, cols] buffers with strides xs (x, residual) and
 * ys (dy, dh_next, dx), so that padding is exercised; w, b of cols. */
typedef struct prob {
  int op, rows, cols, bias, next;
  float eps;
  long xs, ys;
  float *x, *res, *w, *b, *dy, *dn;
} prob;

static void fill(float *p, long n) {
  for (long i = 0; i < n; i++) p[i] = grid_value();
}

static prob make(int op, int rows, int cols, float eps, int bias, int next) {
  prob p = {.op = op, .rows = rows, .cols = cols, .bias = bias, .next = next, .eps = eps,
            .xs = cols + 3, .ys = cols + 1};
  const long nx = (long)rows * p.xs, ny = (long)rows * p.ys;
  p.x = calloc((size_t)nx + 1, sizeof(float));
  p.res = calloc((size_t)nx + 1, sizeof(float));
  p.dy = calloc((size_t)ny + 1, sizeof(float));
  p.dn = calloc((size_t)ny + 1, sizeof(float));
  p.w = calloc((size_t)cols, sizeof(float));
  p.b = calloc((size_t)cols, sizeof(float));
  fill(p.x, nx), fill(p.res, nx), fill(p.dy, ny), fill(p.dn, ny), fill(p.w, cols);
  fill(p.b, cols);
  /* residual of x's sign: |h| >= 0.5, away from RMSNorm's steep 0. */
  for (long i = 0; i < nx; i++) p.res[i] = copysignf(p.res[i], p.x[i]);
  /* LayerNorm: rows of std >= 0.25 (two close columns make xhat a steep
   * function of x). */
  for (int r = 0; op == LN && cols > 1 && r < rows; r++)
    for (;;) {
      double s = 0, q = 0;
      for (int c = 0; c < cols; c++) s += p.x[r * p.xs + c];
      for (int c = 0; c < cols; c++) {
        const double d = p.x[r * p.xs + c] - s / cols;
        q += d * d;
      }
      if (q / cols >= 0.0625) break;
      fill(p.x + r * p.xs, cols);
    }
  return p;
}

static void drop(prob *p) {
  free(p->x), free(p->res), free(p->w), free(p->b), free(p->dy), free(p->dn);
}

/* The forward reference's y (and h), then L; *mag gets sum |terms|. */
static double loss(const prob *p, double *mag) {
  const long n = (long)p->rows * p->cols;
  float *y = calloc((size_t)n + 1, sizeof(float)), *h = calloc((size_t)n + 1, sizeof(float));
  if (p->op == RMS) {
    scree_rmsnorm_args a = {.rows = p->rows, .cols = p->cols, .x_stride = p->xs,
                            .eps = p->eps};
    void *host[] = {p->x, p->w, y};
    scree__ref_rmsnorm(&a, host);
  } else if (p->op == ADD) {
    scree_add_rmsnorm_args a = {.rows = p->rows, .cols = p->cols, .x_stride = p->xs,
                                .residual_stride = p->xs, .eps = p->eps};
    void *host[] = {p->x, p->res, p->w, h, y};
    scree__ref_add_rmsnorm(&a, host);
  } else {
    scree_layernorm_args a = {.b = p->bias, .rows = p->rows, .cols = p->cols,
                              .x_stride = p->xs, .eps = p->eps};
    void *host[] = {p->x, p->w, p->b, y};
    void *host_nb[] = {p->x, p->w, y};
    scree__ref_layernorm(&a, p->bias ? host : host_nb);
  }
  double l = 0, m = 0;
  for (int r = 0; r < p->rows; r++)
    for (int c = 0; c < p->cols; c++) {
      const double t = (double)y[r * p->cols + c] * p->dy[r * p->ys + c];
      l += t, m += fabs(t);
      if (p->op == ADD && p->next) {
        const double u = (double)h[r * p->cols + c] * p->dn[r * p->ys + c];
        l += u, m += fabs(u);
      }
    }
  free(y), free(h);
  *mag = m;
  return l;
}

/* The reference's gradients of p in fp32: dx [rows, ys], dw, db. */
static void grads(const prob *p, float *dx, float *dw, float *db) {
  const scree_dtype f = SCREE_DTYPE_FP32;
  if (p->op == RMS)
    scree__rmsnorm_backward_ref(p->x, p->xs, p->w, p->dy, p->ys, dx, p->ys, dw, p->rows,
                                p->cols, f, f, f, p->eps);
  else if (p->op == ADD)
    scree__add_rmsnorm_backward_ref(p->x, p->xs, p->res, p->xs, p->w, p->dy, p->ys,
                                    p->next ? p->dn : NULL, p->ys, dx, p->ys, dw, p->rows,
                                    p->cols, f, f, f, p->eps);
  else
    scree__layernorm_backward_ref(p->x, p->xs, p->w, p->dy, p->ys, dx, p->ys, dw, db,
                                  p->rows, p->cols, f, f, f, p->eps);
}

/* The central difference of L in *v with step h; *mag gets the largest
 * sum |terms| of the two losses. */
static double central(prob *p, float *v, double h, double *mag) {
  const float v0 = *v;
  double m1, m2;
  *v = (float)(v0 + h);
  const double lp = loss(p, &m1);
  *v = (float)(v0 - h);
  const double lm = loss(p, &m2);
  *v = v0;
  *mag = m1 > m2 ? m1 : m2;
  return (lp - lm) / (2 * h);
}

/* Richardson's extrapolation of central differences with steps H and H / 2
 * against the analytic g. Truncation: O(H^4 L^(5)), below 1e-6 on this
 * grid (|x|, |h| >= 0.25, LayerNorm row spreads >= 0.25 keep the
 * derivatives of L moderate; plain central differences at H were off by up
 * to 1% for two columns near 0.25). Rounding: the forward stores y (and h)
 * in fp32, so each L is off by up to E = 2^-24 sum |terms|; the
 * extrapolation (4 D(H/2) - D(H)) / 3 by up to 3 E / H. The tolerance is
 * that bound plus 1e-4 (1 + |g|) for the truncation and the double sums;
 * a dropped term of any gradient is O(0.01) or more on these inputs. */
static void check_fd(prob *p, float *v, double g, const char *what, int r, int c) {
  double m1, m2;
  const double d1 = central(p, v, H, &m1), d2 = central(p, v, H / 2, &m2);
  const double fd = (4 * d2 - d1) / 3;
  const double tol = 1e-4 * (1 + fabs(g)) + 3 * 0x1p-24 * (m1 > m2 ? m1 : m2) / H;
  CHECK(fabs(fd - g) <= tol,
        "%s rows=%d cols=%d eps=%g bias=%d next=%d: d%s[%d, %d] reference %.9g, finite "
        "difference %.9g (tol %.3g)",
        op_names[p->op], p->rows, p->cols, p->eps, p->bias, p->next, what, r, c, g, fd, tol);
}

static void fd_case(int op, int rows, int cols, float eps, int bias, int next) {
  prob p = make(op, rows, cols, eps, bias, next);
  float *dx = calloc((size_t)rows * p.ys + 1, sizeof(float));
  float *dw = calloc((size_t)cols, sizeof(float)), *db = calloc((size_t)cols, sizeof(float));
  /* The gaps between strided rows must not be written. */
  for (long i = 0; i < (long)rows * p.ys + 1; i++) dx[i] = NAN;
  grads(&p, dx, dw, db);
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      check_fd(&p, &p.x[r * p.xs + c], dx[r * p.ys + c], "x", r, c);
      if (op == ADD) check_fd(&p, &p.res[r * p.xs + c], dx[r * p.ys + c], "residual", r, c);
    }
    for (int c = cols; c < p.ys; c++) CHECK(isnan(dx[r * p.ys + c]), "gap written");
  }
  for (int c = 0; c < cols; c++) {
    check_fd(&p, &p.w[c], dw[c], "w", 0, c);
    if (op == LN && bias) check_fd(&p, &p.b[c], db[c], "b", 0, c);
  }
  free(dx), free(dw), free(db);
  drop(&p);
}

static void fd_op(int op) {
  for (size_t i = 0; i < sizeof rows_list / sizeof *rows_list; i++)
    for (size_t j = 0; j < sizeof cols_list / sizeof *cols_list; j++)
      for (size_t e = 0; e < sizeof eps_list / sizeof *eps_list; e++)
        for (int opt = 0; opt < 2; opt++)
          fd_case(op, rows_list[i], cols_list[j], eps_list[e], op == LN && opt,
                  op == ADD && opt);
}

START_TEST(rmsnorm_finite_differences) { fd_op(RMS); }
END_TEST

START_TEST(add_rmsnorm_finite_differences) { fd_op(ADD); }
END_TEST

START_TEST(layernorm_finite_differences) { fd_op(LN); }
END_TEST

/* dw and db of all rows against the fp32 sums of one-row calls (each
 * rounded once to fp32: the two agree to 2^-24 per term). */
START_TEST(weight_grads_sum_over_rows) {
  for (int op = RMS; op <= LN; op++)
    for (size_t j = 0; j < sizeof cols_list / sizeof *cols_list; j++) {
      const int rows = 5, cols = cols_list[j];
      prob p = make(op, rows, cols, 1e-6f, 1, 1);
      float *dx = calloc((size_t)rows * p.ys + 1, sizeof(float));
      float *dw = calloc((size_t)cols, sizeof(float)), *db = calloc((size_t)cols, sizeof(float));
      float *w1 = calloc((size_t)cols, sizeof(float)), *b1 = calloc((size_t)cols, sizeof(float));
      double *sw = calloc((size_t)cols, sizeof(double)), *sb = calloc((size_t)cols, sizeof(double));
      double *aw = calloc((size_t)cols, sizeof(double)), *ab = calloc((size_t)cols, sizeof(double));
      grads(&p, dx, dw, db);
      for (int r = 0; r < rows; r++) {
        prob q = p;
        q.rows = 1;
        q.x += r * p.xs, q.res += r * p.xs, q.dy += r * p.ys, q.dn += r * p.ys;
        float *dx1 = calloc((size_t)p.ys + 1, sizeof(float));
        grads(&q, dx1, w1, b1);
        for (int c = 0; c < cols; c++) {
          sw[c] += w1[c], aw[c] += fabs(w1[c]);
          sb[c] += b1[c], ab[c] += fabs(b1[c]);
          CHECK(dx1[c] == dx[r * p.ys + c], "%s: dx of row %d alone differs", op_names[op], r);
        }
        free(dx1);
      }
      for (int c = 0; c < cols; c++) {
        CHECK(fabs(dw[c] - sw[c]) <= 0x1p-22 * aw[c], "%s cols=%d: dw[%d] %.9g, rows' sum %.9g",
              op_names[op], cols, c, dw[c], sw[c]);
        if (op == LN)
          CHECK(fabs(db[c] - sb[c]) <= 0x1p-22 * ab[c],
                "%s cols=%d: db[%d] %.9g, rows' sum %.9g", op_names[op], cols, c, db[c], sb[c]);
      }
      free(dx), free(dw), free(db), free(w1), free(b1), free(sw), free(sb), free(aw), free(ab);
      drop(&p);
    }
}
END_TEST

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
 * fp32's rounding of want: round to nearest (truncation would be off by up
 * to a whole unit on about half the elements). */
static void check_rounded(double got, double want, scree_dtype dt, const char *what, int i) {
  const int mant = dt == SCREE_DTYPE_FP16 ? 10 : 7;
  int e;
  frexp(want, &e);
  if (dt == SCREE_DTYPE_FP16 && e < -13) e = -13; /* subnormal spacing */
  const double half_ulp = ldexp(1.0, e - 1 - mant - 1);
  CHECK(fabs(got - want) <= half_ulp * (1 + 0x1p-20) + 0x1p-24 * fabs(want),
        "%s %s[%d]: %.9g, fp32 run %.9g rounds to it only with more than half a unit",
        scree__elem_name(dt), what, i, got, want);
}

START_TEST(half_dtypes_round_as_the_forward) {
  const scree_dtype dts[] = {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};
  for (int k = 0; k < 2; k++)
    for (int op = RMS; op <= LN; op++) {
      const scree_dtype dt = dts[k];
      const int rows = 3, cols = 64;
      prob p = make(op, rows, cols, 1e-6f, 1, 1);
      const long nx = (long)rows * p.xs, ny = (long)rows * p.ys;
      /* Random full-precision values, so that h = x + residual rounds. */
      for (long i = 0; i < nx; i++) p.x[i] = (float)scree_test_uniform(-2, 2);
      for (long i = 0; i < nx; i++) p.res[i] = (float)scree_test_uniform(-2, 2);
      void *x = as_dtype(p.x, nx, dt), *res = as_dtype(p.res, nx, dt);
      void *w = as_dtype(p.w, cols, dt), *dy = as_dtype(p.dy, ny, dt);
      void *dn = as_dtype(p.dn, ny, dt);
      void *dx = calloc((size_t)ny + 1, 4), *dw = calloc((size_t)cols, 4);
      void *db = calloc((size_t)cols, 4);
      float *dx32 = calloc((size_t)ny + 1, 4), *dw32 = calloc((size_t)cols, 4);
      float *db32 = calloc((size_t)cols, 4);
      if (op == RMS) {
        scree__rmsnorm_backward_ref(x, p.xs, w, dy, p.ys, dx, p.ys, dw, rows, cols, dt, dt, dt,
                                    p.eps);
      } else if (op == ADD) {
        scree__add_rmsnorm_backward_ref(x, p.xs, res, p.xs, w, dy, p.ys, dn, p.ys, dx, p.ys, dw,
                                        rows, cols, dt, dt, dt, p.eps);
        /* The fp32 run gets h as the forward writes it, in dt. */
        for (int r = 0; r < rows; r++)
          for (int c = 0; c < cols; c++) {
            const long i = r * p.xs + c;
            uint32_t t = 0;
            scree__store_elem(&t, dt, 0, (double)p.x[i] + p.res[i]);
            p.x[i] = (float)scree__load_elem(&t, dt, 0), p.res[i] = 0;
          }
      } else {
        scree__layernorm_backward_ref(x, p.xs, w, dy, p.ys, dx, p.ys, dw, db, rows, cols, dt,
                                      dt, dt, p.eps);
      }
      prob q = p;
      q.next = 1;
      grads(&q, dx32, dw32, db32);
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
          check_rounded(scree__load_elem(dx, dt, (size_t)(r * p.ys + c)), dx32[r * p.ys + c], dt,
                        op == ADD ? "dh" : "dx", r * p.ys + c);
      for (int c = 0; c < cols; c++) {
        check_rounded(scree__load_elem(dw, dt, (size_t)c), dw32[c], dt, "dw", c);
        if (op == LN) check_rounded(scree__load_elem(db, dt, (size_t)c), db32[c], dt, "db", c);
      }
      free(x), free(res), free(w), free(dy), free(dn), free(dx), free(dw), free(db);
      free(dx32), free(dw32), free(db32);
      drop(&p);
    }
}
END_TEST

/* ---- cross-entropy ---------------------------------------------------------- */

/* rows of fp32 logits (stride ls) in [-2, 2], and targets: ignore_index in
 * row 1, class 0 in row 0, vocab - 1 in row 2, then random. */
static void ce_inputs(float *x, int64_t *t, int rows, int vocab, int ls, int64_t ignore) {
  for (int i = 0; i < rows * ls; i++) x[i] = (float)(4.0 * (scree_test_rand() % 10000) / 1e4 - 2);
  for (int r = 0; r < rows; r++)
    t[r] = r == 0 ? 0 : r == 1 ? ignore : r == 2 ? vocab - 1 : (int64_t)(scree_test_rand() % (uint64_t)vocab);
}

typedef struct ce_prob {
  float *x;
  int64_t *t;
  int rows, vocab, ls;
  float eps, z, gs;
  int red;
  double w; /* each row's weight in L: grad_scale, over the count for the mean */
} ce_prob;

/* L = w sum_r loss_r (ignored rows are 0); *mag: w sum |loss_r|. */
static double ce_loss(const ce_prob *p, double *mag) {
  float *loss = malloc((size_t)p->rows * sizeof *loss);
  scree__cross_entropy_ref(p->x, p->ls, p->t, loss, NULL, NULL, 0, p->rows, p->vocab,
                           SCREE_DTYPE_FP32, -100, p->eps, p->z, p->red, p->gs);
  double l = 0, m = 0;
  for (int r = 0; r < p->rows; r++) l += p->w * loss[r], m += fabs(p->w * loss[r]);
  free(loss);
  *mag = m;
  return l;
}

static double ce_central(ce_prob *p, float *v, double h, double *mag) {
  const float v0 = *v;
  double m1, m2;
  *v = (float)(v0 + h);
  const double lp = ce_loss(p, &m1);
  *v = (float)(v0 - h);
  const double lm = ce_loss(p, &m2);
  *v = v0;
  *mag = m1 > m2 ? m1 : m2;
  return (lp - lm) / (2 * h);
}

/* dlogits of every element against Richardson's extrapolation of central
 * differences (steps H, H / 2; the tolerance as check_fd's: the fp32
 * loss's rounding 3 E / H plus 1e-4 (1 + |g|); a dropped term, eps / V or
 * 2 z lse p, is 0.01 or more here). The gaps between strided rows stay
 * NaN. */
static void ce_fd_case(int vocab, float eps, float z, int red, float gs) {
  const int rows = 4, ls = vocab + 3, ds = vocab + 1;
  ce_prob p = {malloc(sizeof(float) * (size_t)(rows * ls)), malloc(sizeof(int64_t) * rows), rows,
               vocab, ls, eps, z, gs, red, 0};
  ce_inputs(p.x, p.t, rows, vocab, ls, -100);
  int kept = 0;
  for (int r = 0; r < rows; r++) kept += p.t[r] != -100;
  p.w = gs != 0.f ? gs : 1.0;
  if (red == SCREE_REDUCTION_MEAN) p.w /= kept;
  float *dx = malloc(sizeof(float) * (size_t)(rows * ds));
  float *loss = malloc(sizeof(float) * rows);
  for (int i = 0; i < rows * ds; i++) dx[i] = NAN;
  scree__cross_entropy_ref(p.x, ls, p.t, loss, NULL, dx, ds, rows, vocab, SCREE_DTYPE_FP32, -100,
                           eps, z, red, gs);
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < vocab; c++) {
      const double g = dx[r * ds + c];
      double m1, m2;
      const double d1 = ce_central(&p, &p.x[r * ls + c], H, &m1);
      const double d2 = ce_central(&p, &p.x[r * ls + c], H / 2, &m2);
      const double fd = (4 * d2 - d1) / 3;
      const double tol = 1e-4 * (1 + fabs(g)) + 3 * 0x1p-24 * (m1 > m2 ? m1 : m2) / H;
      CHECK(fabs(fd - g) <= tol,
            "cross_entropy vocab=%d eps=%g z=%g reduction=%d grad_scale=%g: dlogits[%d, %d] "
            "(target %lld) reference %.9g, finite difference %.9g (tol %.3g)",
            vocab, (double)eps, (double)z, red, (double)gs, r, c, (long long)p.t[r], g, fd, tol);
      if (p.t[r] == -100) CHECK(g == 0, "ignored row %d: dlogits %g", r, g);
    }
    for (int c = vocab; c < ds; c++) CHECK(isnan(dx[r * ds + c]), "gap written");
  }
  free(p.x), free(p.t), free(dx), free(loss);
}

START_TEST(cross_entropy_finite_differences) {
  static const int vocabs[] = {1, 2, 7, 33};
  static const float epss[] = {0, 0.1f, 1};
  static const float zs[] = {0, 0.05f};
  for (size_t v = 0; v < 4; v++)
    for (size_t e = 0; e < 3; e++)
      for (size_t k = 0; k < 2; k++)
        for (int red = 0; red <= 2; red++)
          ce_fd_case(vocabs[v], epss[e], zs[k], red, red == 1 ? -1.5f : 0.f);
}
END_TEST

/* The loss with smoothing and z-loss is (1 - eps) CE(t) + eps / V
 * sum_v CE(v) + z lse^2, CE(v) and lse from the plain forward's reference
 * (ops/cross_entropy.c, its own loop) with v as every row's target; with
 * eps = z = 0 the two references agree exactly on loss and lse. An
 * ignored row is 0 either way; a target outside [0, vocab) is NaN. */
START_TEST(cross_entropy_loss_by_definition) {
  static const int vocabs[] = {1, 5, 64, 1000};
  for (size_t vi = 0; vi < 4; vi++) {
    const int rows = 6, vocab = vocabs[vi], ls = vocab + 2;
    float *x = malloc(sizeof(float) * (size_t)(rows * ls));
    int64_t t[6], tv[6];
    ce_inputs(x, t, rows, vocab, ls, -7);
    t[3] = vocab; /* outside: NaN */
    float loss[6], lse[6], base[6], blse[6], sum_ce[6] = {0}, ce_t[6];
    double acc[6] = {0};
    scree_cross_entropy_args a = {.rows = rows, .vocab = vocab, .logits_stride = ls,
                                  .ignore_index = -7, .dtype = SCREE_DTYPE_FP32};
    scree__ref_cross_entropy(&a, (void *const[]){x, t, ce_t, blse});
    for (int v = 0; v < vocab; v++) {
      for (int r = 0; r < rows; r++) tv[r] = v;
      scree__ref_cross_entropy(&a, (void *const[]){x, tv, base, NULL});
      for (int r = 0; r < rows; r++) acc[r] += base[r];
    }
    for (int r = 0; r < rows; r++) sum_ce[r] = (float)acc[r];
    static const float epss[] = {0, 0.1f, 0.5f, 1}, zs[] = {0, 1e-4f, 0.3f};
    for (int e = 0; e < 4; e++)
      for (int k = 0; k < 3; k++) {
        const float eps = epss[e], z = zs[k];
        scree__cross_entropy_ref(x, ls, t, loss, lse, NULL, 0, rows, vocab, SCREE_DTYPE_FP32, -7,
                                 eps, z, 0, 0);
        for (int r = 0; r < rows; r++) {
          CHECK(lse[r] == blse[r], "lse row %d: %.9g vs %.9g", r, lse[r], blse[r]);
          if (t[r] == -7) {
            CHECK(loss[r] == 0, "ignored row %d: loss %g", r, loss[r]);
            continue;
          }
          if (t[r] < 0 || t[r] >= vocab) {
            CHECK(isnan(loss[r]), "row %d target %lld: loss %g, want NaN", r, (long long)t[r], loss[r]);
            continue;
          }
          const double want = (1 - (double)eps) * ce_t[r] + (double)eps / vocab * sum_ce[r] +
                              (double)z * blse[r] * blse[r];
          const double tol = eps == 0 && z == 0 ? 0 : 1e-5 * (1 + fabs(want));
          CHECK(fabs(loss[r] - want) <= tol,
                "vocab=%d eps=%g z=%g row %d: loss %.9g, by definition %.9g", vocab, (double)eps,
                (double)z, r, loss[r], want);
        }
      }
    free(x);
  }
}
END_TEST

/* Logits masked to -inf: without smoothing the loss is finite (the logit
 * sum, -inf, is left out) and their gradients are 0. */
START_TEST(cross_entropy_masked_logits) {
  float x[2 * 6] = {1, -INFINITY, 2, 0.5f, -INFINITY, 0, -INFINITY, 3, 1, 1, 1, -INFINITY};
  const int64_t t[2] = {2, 1};
  float loss[2], g[12];
  scree__cross_entropy_ref(x, 6, t, loss, NULL, g, 6, 2, 6, SCREE_DTYPE_FP32, -100, 0, 1e-4f,
                           SCREE_REDUCTION_SUM, 0);
  for (int r = 0; r < 2; r++) {
    CHECK(isfinite(loss[r]), "row %d: loss %g", r, loss[r]);
    for (int c = 0; c < 6; c++)
      if (isinf(x[r * 6 + c])) CHECK(g[r * 6 + c] == 0, "row %d col %d: %g", r, c, g[r * 6 + c]);
  }
}
END_TEST

/* dlogits written over the logits (the same stride) equals dlogits into a
 * buffer of its own, for each dtype; loss too. */
START_TEST(cross_entropy_in_place) {
  static const scree_dtype dts[] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};
  for (int d = 0; d < 3; d++) {
    const int rows = 5, vocab = 77, ls = 80;
    const size_t es = scree_dtype_size(dts[d]), n = (size_t)(rows * ls);
    void *x = malloc(n * es), *y = malloc(n * es), *g = malloc(n * es);
    int64_t t[5];
    float *xf = malloc(n * sizeof(float));
    ce_inputs(xf, t, rows, vocab, ls, -100);
    for (size_t i = 0; i < n; i++) scree__store_elem(x, dts[d], i, xf[i]);
    memcpy(y, x, n * es);
    memcpy(g, x, n * es);
    float l1[5], l2[5];
    scree__cross_entropy_ref(x, ls, t, l1, NULL, g, ls, rows, vocab, dts[d], -100, 0.1f, 1e-3f,
                             SCREE_REDUCTION_MEAN, 2.f);
    scree__cross_entropy_ref(y, ls, t, l2, NULL, y, ls, rows, vocab, dts[d], -100, 0.1f, 1e-3f,
                             SCREE_REDUCTION_MEAN, 2.f);
    CHECK(!memcmp(g, y, n * es), "%s: in place differs", scree_dtype_name(dts[d]));
    CHECK(!memcmp(l1, l2, sizeof l1), "%s: loss in place differs", scree_dtype_name(dts[d]));
    free(x), free(y), free(g), free(xf);
  }
}
END_TEST

SCREE_TEST_MAIN(.name = "rowwise_backward_ref",
                .tests = SCREE_TESTS(rmsnorm_finite_differences, add_rmsnorm_finite_differences,
                                     layernorm_finite_differences, weight_grads_sum_over_rows,
                                     half_dtypes_round_as_the_forward,
                                     cross_entropy_finite_differences,
                                     cross_entropy_loss_by_definition, cross_entropy_in_place,
                                     cross_entropy_masked_logits))
