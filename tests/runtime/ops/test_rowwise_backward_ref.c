/* test_rowwise_backward_ref.c - the CPU references for the backward of
 * RMSNorm, residual add + RMSNorm and LayerNorm (ops/rowwise_backward_ref.c)
 * against
 *   - central finite differences of the forward references' loss
 *     L = sum(y * dy) (+ sum(h * dh_next) for the fused add), on tiny fp32
 *     problems with padded strides;
 *   - dw and db of many rows against the sums of one-row calls;
 *   - fp16 and bf16 runs against fp32 runs on the same values: outputs
 *     rounded to nearest, and h rounded as the forward rounds it. */
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

SCREE_TEST_MAIN(.name = "rowwise_backward_ref",
                .tests = SCREE_TESTS(rmsnorm_finite_differences, add_rmsnorm_finite_differences,
                                     layernorm_finite_differences, weight_grads_sum_over_rows,
                                     half_dtypes_round_as_the_forward))
