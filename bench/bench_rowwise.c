/*
 * bench_rowwise.c - times RMSNorm through scree on the shapes of
 * bench/rowwise_shapes.json (fp16 and bf16) and prints GB/s beside the
 * device-to-device copy bandwidth measured in the same run.
 *
 * Bytes counted: x read once, w read once, y written once.
 * %samecopy is the time of a device-to-device copy of x into y (the same
 * bytes, with the same launch and ramp costs) over the kernel's time.
 * Method: every result is checked against the CPU reference first; then
 * CUDA events around each launch, 10 warm-up launches, the median of 100,
 * inputs rotated over enough buffer sets to exceed 3x the L2 cache.
 *
 *   bench_rowwise [--shapes FILE] [--reps N] [--sweep] [--csv FILE]
 *
 * --sweep also times every config of RMSNorm's space that passes the
 * constraint check (the raw data behind safe_configs/) and prints the best
 * five per shape; --csv writes every timing as CSV.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "ops/registry.h"
#include "store/cache.h"
#include "store/keys.h"
#include "store/safelist.h"
#include "tuner/harness.h"
#include "tuner/tuner.h"

SCREE__REFERENCE(rmsnorm);

#define MAX_SHAPES 64

static int g_reps = 100;
static FILE *g_csv;

static void die(const char *what, scree_status st, scree_context *ctx) {
  fprintf(stderr, "bench_rowwise: %s: %s: %s\n", what, scree_status_name(st),
          ctx ? scree_last_error(ctx) : "");
  exit(1);
}

#define CU(call)                                                              \
  do {                                                                        \
    CUresult r_ = (call);                                                     \
    if (r_ != CUDA_SUCCESS) {                                                 \
      fprintf(stderr, "bench_rowwise: %s: %s\n", #call,                       \
              scree__cu_error_name(ctx->cu, r_));                             \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

/* Reads the shapes of a bench/rowwise_shapes.json-style file. */
static int read_shapes(const char *path, long shapes[][2]) {
  char why[1024];
  char *text = scree__read_text(path, why, sizeof why);
  if (!text) {
    fprintf(stderr, "bench_rowwise: cannot read %s\n", why);
    exit(1);
  }
  scree_dtype dts[3];
  int ndt;
  int n = scree__parse_shapes(text, shapes, MAX_SHAPES, dts, 3, &ndt, why, sizeof why);
  free(text);
  if (n < 0) {
    fprintf(stderr, "bench_rowwise: %s: %s\n", path, why);
    exit(1);
  }
  return n < MAX_SHAPES ? n : MAX_SHAPES;
}

#define median scree__median

/* A device-to-device copy of `bytes` from x to y of the rotated sets: the
 * same bytes the kernel reads and writes, so the same fixed costs. */
static double copy_same(scree_context *ctx, const CUdeviceptr *src, const CUdeviceptr *dst,
                        int nsets, size_t bytes) {
  CUevent e0, e1;
  CU(ctx->cu->EventCreate(&e0, CU_EVENT_DEFAULT));
  CU(ctx->cu->EventCreate(&e1, CU_EVENT_DEFAULT));
  float t[50];
  for (int i = 0; i < 55; i++) {
    CU(ctx->cu->EventRecord(e0, NULL));
    CU(ctx->cu->MemcpyDtoDAsync(dst[i % nsets], src[i % nsets], bytes, NULL));
    CU(ctx->cu->EventRecord(e1, NULL));
    CU(ctx->cu->EventSynchronize(e1));
    if (i >= 5) CU(ctx->cu->EventElapsedTime(&t[i - 5], e0, e1));
  }
  ctx->cu->EventDestroy(e0);
  ctx->cu->EventDestroy(e1);
  return median(t, 50) * 1e3;
}

/* Device-to-device copy of a 1 GiB buffer: bytes read + written per second. */
static double copy_bandwidth(scree_context *ctx) {
  const size_t bytes = (size_t)1 << 30;
  CUdeviceptr a, b;
  CU(ctx->cu->MemAlloc(&a, bytes));
  CU(ctx->cu->MemAlloc(&b, bytes));
  CU(ctx->cu->MemsetD8(a, 1, bytes));
  const double us = copy_same(ctx, &a, &b, 1, bytes);
  ctx->cu->MemFree(a);
  ctx->cu->MemFree(b);
  return 2.0 * (double)bytes / (us * 1e-6) / 1e9;
}

typedef struct bufset {
  int n;
  CUdeviceptr x[64], y[64], w;
} bufset;

/* Times `reps` launches of args (rotating buffer sets) with cfg (NULL: the
 * public API's choice). Returns the median in microseconds. */
static double time_rmsnorm(scree_context *ctx, scree_rmsnorm_args *a,
                           const bufset *b, const scree__config *cfg) {
  const scree__op *op = scree__op_find("rmsnorm");
  const scree__variant var = {{a->x_dtype, a->w_dtype, a->y_dtype}};
  CUevent e0, e1;
  CU(ctx->cu->EventCreate(&e0, CU_EVENT_DEFAULT));
  CU(ctx->cu->EventCreate(&e1, CU_EVENT_DEFAULT));
  float *t = malloc(sizeof(float) * (size_t)g_reps);
  for (int i = 0; i < g_reps + 10; i++) {
    a->x = b->x[i % b->n];
    a->y = b->y[i % b->n];
    CU(ctx->cu->EventRecord(e0, NULL));
    scree_status st = cfg ? scree__run_exact(ctx, op, cfg, &var, a, NULL)
                          : scree_rmsnorm(ctx, a, NULL);
    if (st) die("rmsnorm", st, ctx);
    CU(ctx->cu->EventRecord(e1, NULL));
    CU(ctx->cu->EventSynchronize(e1));
    if (i >= 10) CU(ctx->cu->EventElapsedTime(&t[i - 10], e0, e1));
  }
  double m = median(t, g_reps) * 1e3;
  free(t);
  ctx->cu->EventDestroy(e0);
  ctx->cu->EventDestroy(e1);
  return m;
}

/* Runs once on set 0 and compares with the CPU reference. */
static int validate(scree_context *ctx, scree_rmsnorm_args *a, const bufset *b,
                    const scree__config *cfg, const void *hx, const void *hw,
                    const void *ref, void *hy) {
  const scree__op *op = scree__op_find("rmsnorm");
  const scree__variant var = {{a->x_dtype, a->w_dtype, a->y_dtype}};
  const size_t ny = (size_t)(a->rows * a->cols);
  a->x = b->x[0];
  a->y = b->y[0];
  CU(ctx->cu->MemsetD8(a->y, 0xff, ny * scree_dtype_size(a->y_dtype)));
  scree_status st = cfg ? scree__run_exact(ctx, op, cfg, &var, a, NULL)
                        : scree_rmsnorm(ctx, a, NULL);
  if (st) die("rmsnorm", st, ctx);
  CU(ctx->cu->CtxSynchronize());
  CU(ctx->cu->MemcpyDtoH(hy, a->y, ny * scree_dtype_size(a->y_dtype)));
  double rtol, atol;
  scree__tolerance(a->y_dtype, &rtol, &atol);
  (void)hx, (void)hw;
  return scree__compare(hy, ref, a->y_dtype, ny, rtol, atol, NULL) == 0;
}

typedef struct ranked {
  scree__config cfg;
  double us;
} ranked;

typedef struct pjob {
  scree_context *ctx;
  const scree__op *op;
  const scree__variant *var;
  ranked *r;
} pjob;

static void compile_one(void *p, int i) {
  pjob *j = p;
  scree__kernel k;
  scree_status st = scree__kernel_get(j->ctx, j->op, &j->r[i].cfg, j->var, &k);
  if (st) die("compile", st, j->ctx);
}

/* Compiles and loads every config on a thread pool (NVRTC is thread-safe). */
static void precompile(scree_context *ctx, const scree__op *op,
                       const scree__variant *var, ranked *r, int n) {
  pjob j = {.ctx = ctx, .op = op, .var = var, .r = r};
  scree__parallel_for(n, 0, compile_one, &j);
}

static int by_time(const void *p, const void *q) {
  const ranked *a = p, *b = q;
  return a->us < b->us ? -1 : a->us > b->us;
}

int main(int argc, char **argv) {
  const char *shapes_path = SCREE_BENCH_SHAPES;
  int sweep = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--shapes") && i + 1 < argc)
      shapes_path = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      g_reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sweep"))
      sweep = 1;
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
      if (!(g_csv = fopen(argv[++i], "w"))) {
        perror(argv[i]);
        return 1;
      }
      fprintf(g_csv, "rows,cols,dtype,config,us,gbps\n");
    } else {
      fprintf(stderr, "usage: bench_rowwise [--shapes FILE] [--reps N] [--sweep] [--csv FILE]\n");
      return 2;
    }
  }
  if (g_reps < 5) g_reps = 5;
  long shapes[MAX_SHAPES][2];
  int nshapes = read_shapes(shapes_path, shapes);

  scree_context *ctx = NULL;
  char why[1024];
  /* A private cache and the tune-on-miss policy: the first call of each
   * shape tunes it, as a deployment with SCREE_MISS_POLICY=tune would. */
  char cache_dir[] = "/tmp/scree-bench-XXXXXX", cache_path[64];
  if (!mkdtemp(cache_dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(cache_path, sizeof cache_path, "%s/tune.db", cache_dir);
  scree_options opts;
  scree_options_init(&opts);
  opts.cache_path = cache_path;
  opts.cache_search_path = "";
  opts.miss_policy = SCREE_MISS_TUNE;
  scree_status st = scree_create(&opts, &ctx, why, sizeof why);
  if (st != SCREE_OK) {
    printf("no GPU: %s: %s\n", scree_status_name(st), why);
    return st == SCREE_ERROR_NO_DEVICE ? 0 : 1;
  }
  int pushed = scree__ctx_enter(ctx);
  (void)pushed;
  const double copy_gbps = copy_bandwidth(ctx);
  printf("device: %s (%s, %d SMs, L2 %d MiB), scree %s\n", ctx->info.name,
         ctx->arch, ctx->info.sm_count, ctx->info.l2_bytes >> 20, scree_version());
  printf("copy bandwidth (device-to-device, read + write): %.0f GB/s\n\n", copy_gbps);
  printf("%-14s %-5s %10s %9s %8s %9s  %s\n", "shape", "dtype", "time(us)", "GB/s",
         "%copy", "%samecopy", "config");

  const scree__op *op = scree__op_find("rmsnorm");
  const scree_dtype dts[2] = {SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};
  for (int s = 0; s < nshapes; s++) {
    for (int d = 0; d < 2; d++) {
      const long rows = shapes[s][0], cols = shapes[s][1];
      const scree_dtype dt = dts[d];
      const size_t es = scree_dtype_size(dt);
      const size_t bytes_xy = (size_t)rows * (size_t)cols * es;
      bufset b = {0};
      const size_t l2 = (size_t)(ctx->info.l2_bytes > 0 ? ctx->info.l2_bytes : 50 << 20);
      b.n = (int)((3 * l2) / (2 * bytes_xy) + 1);
      if (b.n > 64) b.n = 64;
      void *hx = malloc(bytes_xy), *hw = malloc((size_t)cols * es);
      void *hy = malloc(bytes_xy), *ref = malloc(bytes_xy);
      for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++)
        scree__store_elem(hx, dt, i, sin((double)i * 0.37) * 2.0 + 0.1 * (double)(i % 7));
      for (long i = 0; i < cols; i++) scree__store_elem(hw, dt, (size_t)i, 0.5 + 0.001 * (double)i);
      CU(ctx->cu->MemAlloc(&b.w, (size_t)cols * es));
      CU(ctx->cu->MemcpyHtoD(b.w, hw, (size_t)cols * es));
      for (int i = 0; i < b.n; i++) {
        CU(ctx->cu->MemAlloc(&b.x[i], bytes_xy));
        CU(ctx->cu->MemAlloc(&b.y[i], bytes_xy));
        CU(ctx->cu->MemcpyHtoD(b.x[i], hx, bytes_xy));
      }
      scree_rmsnorm_args a = {.w = b.w, .rows = rows, .cols = cols,
                              .x_dtype = dt, .w_dtype = dt, .y_dtype = dt,
                              .eps = 1e-6f};
      scree__ref_rmsnorm(&a, (void *const[]){(void *)(hx), (void *)(hw), ref});
      const double bytes = 2.0 * (double)bytes_xy + (double)cols * (double)es;
      char shape[32], cs[128];
      snprintf(shape, sizeof shape, "%ldx%ld", rows, cols);

      scree__config dflt;
      const scree__variant var = {{dt, dt, dt}};
      scree__default_config(ctx, op, &var, &a, &dflt);
      /* The copy moves x's bytes once each way: 2 * bytes_xy, as the kernel
       * does (w aside). */
      const double same_us = copy_same(ctx, b.x, b.y, b.n, bytes_xy);
      for (int tuned = 0; tuned < 2; tuned++) {
        /* tuned = 1: scree_rmsnorm (the first call tunes the bucket). */
        const scree__config *cfg = tuned ? NULL : &dflt;
        if (!validate(ctx, &a, &b, cfg, hx, hw, ref, hy)) {
          printf("%-14s %-5s  WRONG ANSWER from the %s config\n", shape,
                 scree_dtype_name(dt), tuned ? "tuned" : "default");
          return 1;
        }
        const double us = time_rmsnorm(ctx, &a, &b, cfg);
        const double gbps = bytes / (us * 1e-6) / 1e9;
        if (tuned) {
          scree__ckey key;
          scree__centry e;
          scree__bucket bk;
          scree__bucket_of(op, &var, &a, &bk);
          scree__make_key(ctx, op, &var, &bk, &key);
          snprintf(cs, sizeof cs, "tuned ?");
          if (scree__cache_get(scree__user_cache(ctx), &key, &e) == SCREE_OK) {
            snprintf(cs, sizeof cs, "tuned %.100s", e.config);
            scree__centry_free(&e);
          }
        } else {
          char dc[100];
          scree__config_str(op, &dflt, dc, sizeof dc);
          snprintf(cs, sizeof cs, "default %s", dc);
        }
        printf("%-14s %-5s %10.2f %9.0f %7.1f%% %8.1f%%  %s\n", tuned ? "" : shape,
               tuned ? "" : scree_dtype_name(dt), us, gbps, 100 * gbps / copy_gbps,
               100 * same_us / us, cs);
        if (g_csv) fprintf(g_csv, "%ld,%ld,%s,\"%s\",%.3f,%.1f\n", rows, cols,
                           scree_dtype_name(dt), cs, us, gbps);
      }

      if (sweep) {
        const int total = scree__config_space(op, NULL, 0);
        scree__config *all = calloc((size_t)total, sizeof *all);
        ranked *r = calloc((size_t)total, sizeof *r);
        scree__config_space(op, all, total);
        int nr = 0, nbad = 0;
        scree__target tg;
        scree__target_of(ctx, &tg);
        for (int i = 0; i < total; i++)
          if (scree__config_check(op, &all[i], &var, &tg, NULL, 0)) r[nr++].cfg = all[i];
        free(all);
        precompile(ctx, op, &var, r, nr);
        const int full = g_reps;
        g_reps = 30;
        for (int i = 0; i < nr; i++) {
          r[i].us = time_rmsnorm(ctx, &a, &b, &r[i].cfg);
          if (g_csv) {
            scree__config_str(op, &r[i].cfg, cs, sizeof cs);
            fprintf(g_csv, "%ld,%ld,%s,\"%s\",%.3f,%.1f\n", rows, cols,
                    scree_dtype_name(dt), cs, r[i].us, bytes / (r[i].us * 1e-6) / 1e9);
          }
        }
        g_reps = full;
        qsort(r, (size_t)nr, sizeof *r, by_time);
        /* The fastest are validated (every config is in the gpu tests). */
        for (int i = 0; i < 5 && i < nr; i++) {
          const int ok = validate(ctx, &a, &b, &r[i].cfg, hx, hw, ref, hy);
          nbad += !ok;
          scree__config_str(op, &r[i].cfg, cs, sizeof cs);
          printf("%-14s %-5s %10.2f %9.0f %7.1f%%  sweep #%d %s%s\n", "", "",
                 r[i].us, bytes / (r[i].us * 1e-6) / 1e9,
                 100 * bytes / (r[i].us * 1e-6) / 1e9 / copy_gbps, i + 1, cs,
                 ok ? "" : "  WRONG ANSWER");
        }
        printf("%-14s %-5s %d configs timed (30 reps each)\n", "", "", nr);
        if (nbad) return 1;
        free(r);
      }
      for (int i = 0; i < b.n; i++) {
        ctx->cu->MemFree(b.x[i]);
        ctx->cu->MemFree(b.y[i]);
      }
      ctx->cu->MemFree(b.w);
      free(hx), free(hw), free(hy), free(ref);
    }
  }
  if (g_csv) fclose(g_csv);
  scree_destroy(ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
  if (system(cmd)) {
  }
  return 0;
}
