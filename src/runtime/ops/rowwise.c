/* rowwise.c - the row-wise ops' shared host side (ops/rowwise.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/rowwise.h"

const scree__field scree__rowwise_fields[SCREE__RW_NFIELDS] = {
    {"tpr", "SCREE_TPR", 8, {8, 16, 32, 64, 128, 256, 512, 1024}},
    {"rows", "SCREE_ROWS", 5, {1, 2, 4, 8, 16}},
    {"vec", "SCREE_VEC", 4, {1, 2, 4, 8}},
    {"cache", "SCREE_CACHE", 5, {1, 2, 4, 8, 16}},
};

static int is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

int scree__rowwise_check(const scree__config *c, char *why, size_t n) {
  const int tpr = c->v[SCREE__RW_TPR], rows = c->v[SCREE__RW_ROWS], vec = c->v[SCREE__RW_VEC],
            cache = c->v[SCREE__RW_CACHE];
  if (!is_pow2(tpr) || tpr < 8 || tpr > 1024) {
    snprintf(why, n, "tpr=%d must be a power of two in [8, 1024]", tpr);
    return 0;
  }
  if (!is_pow2(rows) || rows > 16) {
    snprintf(why, n, "rows=%d must be a power of two in [1, 16]", rows);
    return 0;
  }
  if (tpr * rows < 32 || tpr * rows > 1024) {
    snprintf(why, n, "tpr*rows=%d must be in [32, 1024]", tpr * rows);
    return 0;
  }
  if (vec != 1 && vec != 2 && vec != 4 && vec != 8) {
    snprintf(why, n, "vec=%d must be 1, 2, 4 or 8", vec);
    return 0;
  }
  if (cache < 1 || cache > 16) {
    snprintf(why, n, "cache=%d must be in [1, 16]", cache);
    return 0;
  }
  if (vec * cache > 64) {
    snprintf(why, n, "vec*cache=%d exceeds 64 elements of registers per thread", vec * cache);
    return 0;
  }
  return 1;
}

int scree__rowwise_check_dtypes(const scree__variant *var, int n, char *why, size_t size) {
  for (int i = 0; i < n; i++)
    if (var->v[i] < 0 || var->v[i] > 2) {
      snprintf(why, size, "dtype code %d is not fp32, fp16 or bf16", var->v[i]);
      return 0;
    }
  return 1;
}

void scree__rowwise_default(int64_t cols, int esize, scree__config *out) {
  memset(out, 0, sizeof *out);
  const int vec = esize == 4 ? 4 : 8;
  const int64_t nvec = cols / vec > 0 ? cols / vec : 1;
  const int tpr = scree__clampi(scree__pow2_ceil((nvec + 3) / 4), 8, 1024);
  const int cache = scree__clampi(scree__pow2_ceil((nvec + tpr - 1) / tpr), 1, 64 / vec);
  out->v[SCREE__RW_TPR] = tpr;
  out->v[SCREE__RW_ROWS] = scree__clampi(128 / tpr, 1, 16);
  out->v[SCREE__RW_VEC] = vec;
  out->v[SCREE__RW_CACHE] = cache > 16 ? 16 : cache;
}

int scree__rowwise_worth(const scree__config *c, int64_t cols) {
  const int64_t per_access = (int64_t)c->v[SCREE__RW_TPR] * c->v[SCREE__RW_VEC];
  const int64_t cover = per_access * c->v[SCREE__RW_CACHE];
  return per_access <= 2 * (int64_t)scree__pow2_ceil(cols) && 2 * cover >= cols;
}

void scree__rowwise_adapt(scree__config *c, int widest_log2) {
  const int widest = 1 << widest_log2;
  while (c->v[SCREE__RW_VEC] > widest) {
    c->v[SCREE__RW_VEC] /= 2;
    if (c->v[SCREE__RW_CACHE] < 16) c->v[SCREE__RW_CACHE] *= 2;
  }
}

scree_status scree__rowwise_launch(scree_context *ctx, CUfunction fn, const scree__config *c,
                                   int64_t rows, void **params, CUstream stream,
                                   const char *what) {
  const int64_t per_cta = c->v[SCREE__RW_ROWS];
  int64_t grid = (rows + per_cta - 1) / per_cta;
  if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;
  if (grid < 1) grid = 1;
  const CUresult r =
      ctx->cu->LaunchKernel(fn, (unsigned)grid, 1, 1,
                            (unsigned)(c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS]), 1, 1, 0,
                            stream, params, NULL);
  if (r != CUDA_SUCCESS) {
    char w[96];
    snprintf(w, sizeof w, "cuLaunchKernel(%s)", what);
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, w);
  }
  return SCREE_OK;
}

scree_status scree__need_clusters(scree_context *ctx, int cluster, const char *op,
                                  const char *field) {
  if (cluster == 1 || ctx->cu->LaunchKernelEx) return SCREE_OK;
  return scree__fail(ctx, SCREE_ERROR_UNSUPPORTED,
                     "%s %s=%d needs cuLaunchKernelEx (thread block clusters), which this "
                     "driver does not export", op, field, cluster);
}

scree_status scree__launch_grid(scree_context *ctx, CUfunction fn, scree__grid g, CUstream stream,
                                void **params, const char *op, const char *field,
                                const char *what) {
  CUresult r;
  if (g.cluster == 1) {
    r = ctx->cu->LaunchKernel(fn, g.x, g.y, g.z, g.block, 1, 1, g.smem, stream, params, NULL);
  } else {
    scree_status st = scree__need_clusters(ctx, g.cluster, op, field);
    if (st) return st;
    scree__cu_launch_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.cluster_dim.x = (unsigned)g.cluster;
    attr.value.cluster_dim.y = attr.value.cluster_dim.z = 1;
    scree__cu_launch_config lc = {g.x, g.y, g.z, g.block, 1, 1, g.smem, stream, &attr, 1};
    r = ctx->cu->LaunchKernelEx(&lc, fn, params, NULL);
  }
  if (!r) return SCREE_OK;
  char call[96];
  snprintf(call, sizeof call, "%s(%s)", g.cluster == 1 ? "cuLaunchKernel" : "cuLaunchKernelEx",
           what);
  return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, call);
}

int scree__check_cluster(const char *field, int size, const scree__target *t, char *why,
                         size_t n) {
  if (size != 1 && size != 2 && size != 4 && size != 8) {
    scree__set_why(why, n, "%s=%d: must be 1, 2, 4 or 8", field, size);
    return 0;
  }
  if (size > 1 && t->sm < 90) {
    scree__set_why(why, n, "%s=%d: thread block clusters need sm_90, not sm_%d", field, size,
                   t->sm);
    return 0;
  }
  return 1;
}

int scree__rowwise_config_check(const scree__config *c, const scree__variant *var,
                                const scree__target *t, char *why, size_t n) {
  (void)t;
  /* Fields past the op's are 0, fp32's code. */
  return scree__rowwise_check_dtypes(var, SCREE__MAX_VARIANT, why, n) &&
         scree__rowwise_check(c, why, n);
}

/* ---- shapes and problems of an op whose problem is its rows ---------------- */

static int64_t get_i64(const void *args, unsigned link) {
  int64_t v;
  memcpy(&v, (const char *)args + link - 1, sizeof v);
  return v;
}

static void put_i64(void *args, unsigned link, int64_t v) {
  memcpy((char *)args + link - 1, &v, sizeof v);
}

/* Bytes of the inputs read per row: the IN tensors with a dtype whose
 * outer extent is the rows field. */
static int64_t row_bytes(const scree__op *op, const void *args) {
  int64_t bytes = 0;
  for (int i = 0; i < op->nargs; i++) {
    const scree__arg *t = &op->args[i];
    if (t->role != SCREE__ROLE_IN || !t->dtype || t->dims[0] != op->dims[0].arg) continue;
    int64_t n = (int64_t)scree__elem_size(scree__tensor_elem(args, t));
    for (int d = 1; d < 3 && t->dims[d]; d++) n *= get_i64(args, t->dims[d]);
    bytes += n;
  }
  return bytes > 0 ? bytes : 1;
}

/* At most 97 rows to check, and elems elements when given. */
static int64_t check_rows(int64_t rows, int64_t cols, int64_t elems) {
  if (rows > 97) rows = 97;
  if (elems) {
    const int64_t cap = elems / (cols > 0 ? cols : 1);
    if (rows > cap) rows = cap > 0 ? cap : 1;
  }
  return rows;
}

/* The scalars a shape leaves 0 at their examples (RMSNorm's eps). */
static void examples(const scree__op *op, void *args) {
  for (int i = 0; i < op->nargs; i++) {
    const scree__arg *f = &op->args[i];
    if (f->example == 0) continue;
    char *p = (char *)args + f->offset;
    if (f->ctype == SCREE__C_F32) {
      float v;
      memcpy(&v, p, sizeof v);
      if (v == 0.f) v = (float)f->example;
      memcpy(p, &v, sizeof v);
    } else if (f->ctype == SCREE__C_I64) {
      int64_t v;
      memcpy(&v, p, sizeof v);
      if (v == 0) v = (int64_t)f->example;
      memcpy(p, &v, sizeof v);
    }
  }
}

void scree__rowwise_representative(const scree__op *op, const scree__bucket *b,
                                   const scree__variant *var, int check, int64_t elems,
                                   void *args) {
  memset(args, 0, op->args_size);
  for (int d = 0; d < op->ndims; d++) put_i64(args, op->dims[d].arg, b->v[d]);
  scree__variant_dtypes(op->vfields, op->nvfields, var, args);
  int64_t rows = b->v[0];
  const int64_t cap = SCREE__ROWWISE_TUNE_BYTES / row_bytes(op, args);
  if (rows > cap) rows = cap > 0 ? cap : 1;
  if (check) rows = check_rows(rows, b->v[1], elems);
  put_i64(args, op->dims[0].arg, rows);
  examples(op, args);
}

/* 1 if name is an item of the comma-separated list (NULL: none). */
static int listed(const char *list, const char *name) {
  const size_t n = strlen(name);
  for (const char *s = list; s && *s;) {
    const char *e = strchr(s, ',');
    const size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == n && !strncmp(s, name, n)) return 1;
    s = e ? e + 1 : NULL;
  }
  return 0;
}

int scree__rowwise_problem(const scree__op *op, const void *shape, const scree__variant *var,
                           int check, int64_t elems, scree__problem *p, char *why,
                           size_t why_size) {
  return scree__rowwise_problem_omit(op, shape, var, check, elems, NULL, p, why, why_size);
}

int scree__rowwise_problem_omit(const scree__op *op, const void *shape, const scree__variant *var,
                                int check, int64_t elems, const char *omit, scree__problem *p,
                                char *why, size_t why_size) {
  void *a = p->args;
  memcpy(a, shape, op->args_size);
  if (scree__problem_shape(a, op->args, op->nargs, why, why_size)) return -1;
  const int64_t cols = get_i64(a, op->dims[1].arg);
  /* The check problem keeps the row length; a few rows show every mistake
   * that many would, and keep the CPU reference quick. */
  if (check) put_i64(a, op->dims[0].arg, check_rows(get_i64(a, op->dims[0].arg), cols, elems));
  scree__variant_dtypes(op->vfields, op->nvfields, var, a);
  examples(op, a);
  /* Optional buffers are marked present: a run binds them. */
  for (int i = 0; i < op->nargs; i++) {
    const scree__arg *t = &op->args[i];
    const scree_devptr mark = (!(t->flags & SCREE__CHECK_ONLY) || check) && !listed(omit, t->name);
    if (t->flags & SCREE__OPTIONAL)
      memcpy((char *)a + t->offset, &mark, sizeof mark);
  }
  if (scree__problem_bufs(p, op->args, op->nargs, why, why_size)) return -1;
  snprintf(p->desc, sizeof p->desc, "%lld rows of %lld",
           (long long)get_i64(a, op->dims[0].arg), (long long)cols);
  return 0;
}

void scree__rowwise_shape_rows(void *x, int dtype, int64_t rows, int64_t cols, int64_t xs,
                               double tail) {
  for (int64_t r = 0; r < rows; r++) {
    const double row_scale = ldexp(1.0, (int)(r % 7) - 3);
    for (int64_t c = 0; c < cols; c++) {
      double f = row_scale;
      if (c >= cols - cols / 4) f *= tail;
      if (c >= cols - 8) f *= tail;
      const size_t i = (size_t)(r * xs + c);
      scree__store_elem(x, dtype, i, f * scree__load_elem(x, dtype, i));
    }
  }
}

/* ---- the norm backward ops --------------------------------------------------- */

int scree__nb_threads(const scree__config *c) {
  return c->v[SCREE__RW_TPR] * c->v[SCREE__RW_ROWS];
}

size_t scree__nb_smem_bytes(const scree__config *c, int nacc) {
  return (size_t)c->v[SCREE__RW_ROWS] * (size_t)nacc * (size_t)c->v[SCREE__RW_TPR] *
         (size_t)c->v[SCREE__RW_VEC] * (size_t)c->v[SCREE__RW_CACHE] * 4;
}

size_t scree__nb_smem1(const scree__config *c, const scree__variant *var) {
  (void)var;
  return scree__nb_smem_bytes(c, 1);
}

size_t scree__nb_smem2(const scree__config *c, const scree__variant *var) {
  (void)var;
  return scree__nb_smem_bytes(c, 2);
}

/* The kernel's static shared memory: scree_row_scratch, ROWS * (TPR / 32)
 * floats when a row spans warps. */
static size_t nb_static_smem(const scree__config *c) {
  const int tpr = c->v[SCREE__RW_TPR];
  return (size_t)c->v[SCREE__RW_ROWS] * (size_t)(tpr > 32 ? tpr / 32 : 1) * 4;
}

static int nb_smem_check(const scree__config *c, const scree__variant *var,
                         const scree__target *t, int nacc, char *why, size_t n) {
  if (!scree__rowwise_config_check(c, var, t, why, n)) return 0;
  const size_t need = scree__nb_smem_bytes(c, nacc) + nb_static_smem(c);
  if (need > (size_t)t->smem_optin) {
    scree__set_why(why, n,
                   "tpr=%d,rows=%d,vec=%d,cache=%d: %zu bytes of shared memory for the column "
                   "sums, past the %d a CTA may use on sm_%d",
                   c->v[SCREE__RW_TPR], c->v[SCREE__RW_ROWS], c->v[SCREE__RW_VEC],
                   c->v[SCREE__RW_CACHE], need, t->smem_optin, t->sm);
    return 0;
  }
  return 1;
}

int scree__nb_smem_check1(const scree__config *c, const scree__variant *var,
                          const scree__target *t, char *why, size_t n) {
  return nb_smem_check(c, var, t, 1, why, n);
}

int scree__nb_smem_check2(const scree__config *c, const scree__variant *var,
                          const scree__target *t, char *why, size_t n) {
  return nb_smem_check(c, var, t, 2, why, n);
}

void scree__nb_default(int64_t cols, int ex, int ey, int nacc, int narrow,
                       scree__config *out) {
  const int wide = ex > ey ? ex : ey;
  scree__rowwise_default(cols, wide, out);
  /* LayerNorm's kernel (two column sums, the mean) spills at 1024 threads
   * (ptxas' 64 registers): take 512, caching less of the row. */
  if (nacc > 1 && scree__nb_threads(out) > 512) {
    out->v[SCREE__RW_TPR] = 512;
    out->v[SCREE__RW_ROWS] = 1;
  }
  /* 8-byte accesses, twice the cache: the same elements a thread, measured
   * 0-27% faster than 16-byte ones for RMSNorm's and LayerNorm's backwards
   * on the shapes of the H200 sweep (bench/results/h200-rowwise-sweep-
   * *_backward.csv); add+RMSNorm's took 15-20% longer so (bench/results/
   * h200-norm-backward.txt), and keeps 16-byte ones (narrow 0). */
  if (narrow && out->v[SCREE__RW_VEC] == 8 && out->v[SCREE__RW_CACHE] < 16) {
    out->v[SCREE__RW_VEC] = 4;
    out->v[SCREE__RW_CACHE] *= 2;
  }
  /* Registers a cached element costs: x and dy, and the fp32 sums. */
  const int per_elem4 = ex + ey + 4 * nacc; /* in bytes; /4 registers */
  const int threads = scree__nb_threads(out);
  int budget = 65536 / threads;
  if (budget > 255) budget = 255;
  budget -= 48; /* addresses, row sums, loop state */
  while (out->v[SCREE__RW_CACHE] > 1 &&
         out->v[SCREE__RW_VEC] * out->v[SCREE__RW_CACHE] * per_elem4 > 4 * budget)
    out->v[SCREE__RW_CACHE] /= 2;
}

/* Each slot sums at least this many rows while the grid has more than one
 * CTA an SM: the column sums cost 8 bytes a column a slot (written once,
 * read once), against 2 to 4 elements a column a row of x, dy and dx. */
#define NB_ROWS_PER_SLOT 32

scree_status scree__nb_launch(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                              const scree__nb_call *a, CUstream stream, const char *what) {
  const int64_t per_cta = c->v[SCREE__RW_ROWS];
  const int threads = scree__nb_threads(c);
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  const int64_t occ = k->occupancy > 0 ? k->occupancy : 1;
  /* Enough CTAs for 1024 threads an SM where the occupancy allows, more
   * while each slot keeps NB_ROWS_PER_SLOT rows, never more than fit. */
  int64_t want = sms * scree__clampi(scree__cdiv(1024, threads), 1, (int)occ);
  const int64_t by_rows = scree__cdiv(a->rows, per_cta * NB_ROWS_PER_SLOT);
  if (by_rows > want) want = by_rows;
  if (want > sms * occ) want = sms * occ;
  int64_t grid = scree__cdiv(a->rows, per_cta);
  if (grid > want) grid = want;
  if (grid < 1) grid = 1;
  const int64_t nslots = grid * per_cta;
  const size_t bytes = (size_t)nslots * (size_t)a->nacc * (size_t)a->cols * 4;
  CUdeviceptr ws;
  scree_status st = scree__workspace(ctx, stream, bytes, &ws);
  if (st) return st;
  uint64_t x = a->x, w = a->w, dy = a->dy, dres = a->dres, mean = a->mean, rstd = a->rstd;
  uint64_t dx = a->dx, part = ws, dw = a->dw, db = a->db;
  long long rows = a->rows, xs = a->xs, dys = a->dys, dress = a->dress, dxs = a->dxs;
  int cols = (int)a->cols, ns = (int)grid; /* one slot a CTA (its groups summed) */
  float eps = a->eps;
  void *p0[] = {&x, &w, &dy, &dres, &mean, &rstd, &dx, &part, &rows, &cols,
                &xs, &dys, &dress, &dxs, &eps};
  char wbuf[96];
  /* The loader opted the "smem" kernel in to these bytes (its smem hook). */
  const unsigned smem = a->smem ? (unsigned)scree__nb_smem_bytes(c, a->nacc) : 0;
  CUresult r = ctx->cu->LaunchKernel(k->fn[0], (unsigned)grid, 1, 1, (unsigned)threads, 1, 1,
                                     smem, stream, p0, NULL);
  if (r != CUDA_SUCCESS) {
    snprintf(wbuf, sizeof wbuf, "cuLaunchKernel(%s)", what);
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, wbuf);
  }
  void *p1[] = {&part, &dw, &db, &ns, &cols};
  r = ctx->cu->LaunchKernel(k->fn[1], (unsigned)scree__cdiv(a->cols, 32), 1, 1, 32, 32, 1, 0,
                            stream, p1, NULL);
  if (r != CUDA_SUCCESS) {
    snprintf(wbuf, sizeof wbuf, "cuLaunchKernel(%s dw)", what);
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, wbuf);
  }
  return SCREE_OK;
}
