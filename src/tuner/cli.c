/* cli.c - the scree-tune command line tool: main, shared helpers, info and
 * demo. The tuning and cache commands are in cli_tune.c and cli_cache.c.
 * See docs/cli.md. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_OK_ CLI_OK
#define EXIT_FAIL CLI_FAIL
#define EXIT_USAGE CLI_USAGE
#define EXIT_NO_GPU CLI_NO_GPU

static int cmd_info(int argc, char **argv);
static int cmd_demo(int argc, char **argv);

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
  const char *usage;
} command;

static const command commands[] = {
    {"info", cmd_info, "show scree, driver, NVRTC and GPU versions",
     "usage: scree-tune info [--help]\n\n"
     "Prints scree's version, the CUDA driver and NVRTC versions, and each\n"
     "GPU's name, architecture, SM count and memory. On a machine without a\n"
     "GPU it says so and why; the exit code is then 3.\n"},
    {"demo", cmd_demo, "run RMSNorm through the runtime and report time and bandwidth",
     "usage: scree-tune demo [--rows N] [--cols N] [--dtype fp16|bf16|fp32]\n\n"
     "Runs RMSNorm (default 16384 x 4096 fp16) through scree_rmsnorm on GPU 0,\n"
     "checks it against the CPU reference, and prints the median time of 100\n"
     "calls, the bandwidth, and the device-to-device copy bandwidth beside it.\n"
     "Without a GPU it says so and compiles RMSNorm's kernels for sm_80 and\n"
     "sm_90 with NVRTC instead, which needs no GPU.\n"},
    {"prewarm", cmd_prewarm, "tune shapes ahead of time into the user cache", NULL},
    {"list", cmd_list, "list cached winners (or misses, or bad configs)", NULL},
    {"show", cmd_show, "show cached entries in full", NULL},
    {"export", cmd_export, "write cached winners (with cubins) to a standalone cache", NULL},
    {"import", cmd_merge, "merge another cache into the user cache (same as merge)", NULL},
    {"merge", cmd_merge, "merge caches, keeping the faster entry per key", NULL},
    {"verify", cmd_verify, "re-check cached winners on this GPU (and --retime)", NULL},
    {"clear", cmd_clear, "delete cached entries", NULL},
    {"safelist", cmd_safelist, "safelist export: write the learned safelist", NULL},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f,
          "usage: scree-tune <command> [options]\n\n"
          "scree %s: autotuning GPU kernel runtime for packed varlen batches.\n\n"
          "commands:\n",
          scree_version());
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f,
          "\n`scree-tune <command> --help` describes a command.\n"
          "exit codes: 0 success, 1 failure, 2 usage error, 3 no GPU or NVRTC,\n"
          "4 cache file error\n");
}

static int wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  return 0;
}

static int cmd_info(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    fprintf(stderr, "scree-tune info: unknown option %s\n", argv[i]);
    return EXIT_USAGE;
  }
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  printf("scree %s\n", scree_version());
  if (ri.driver_version)
    printf("CUDA driver: %d.%d\n", ri.driver_version / 1000,
           (ri.driver_version % 1000) / 10);
  else
    printf("CUDA driver: not available (%s)\n", ri.driver_error);
  if (ri.nvrtc_loaded)
    printf("NVRTC: %d.%d (%s)\n", ri.nvrtc_major, ri.nvrtc_minor, ri.nvrtc_path);
  else
    printf("NVRTC: not available (%s)\n", ri.nvrtc_error);
  if (ri.device_count == 0) {
    printf("GPUs: none (%s)\n", ri.driver_error[0] ? ri.driver_error : "no device");
    return EXIT_NO_GPU;
  }
  printf("GPUs: %d\n", ri.device_count);
  for (int d = 0; d < ri.device_count; d++) {
    scree_device_info di;
    if (scree_get_device_info(d, &di) != SCREE_OK) continue;
    printf("  [%d] %s  %s  %d SMs  %.1f GiB  L2 %d MiB\n", d, di.name, di.arch,
           di.sm_count, (double)di.total_memory / (1024.0 * 1024 * 1024),
           di.l2_bytes >> 20);
  }
  return EXIT_OK_;
}

/* ---- helpers shared by the commands ------------------------------------ */

double cli_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

const char *cli_value(int argc, char **argv, int *i, const char *name,
                      const char *cmd) {
  if (strcmp(argv[*i], name)) return NULL;
  if (*i + 1 >= argc) {
    fprintf(stderr, "scree-tune %s: %s needs a value\n", cmd, name);
    return NULL;
  }
  return argv[++*i];
}

int cli_common_opt(cli_common *c, int argc, char **argv, int *i, const char *cmd) {
  static const char *const valued[] = {"--cache", "--arch", "--op"};
  for (int k = 0; k < 3; k++)
    if (!strcmp(argv[*i], valued[k])) {
      if (*i + 1 >= argc) {
        fprintf(stderr, "scree-tune %s: %s needs a value\n", cmd, valued[k]);
        return -1;
      }
      const char *v = argv[++*i];
      if (k == 0) c->cache = v;
      if (k == 1) c->arch = v;
      if (k == 2) c->op = v;
      return 1;
    }
  if (!strcmp(argv[*i], "--quiet") || !strcmp(argv[*i], "-q")) {
    c->quiet = 1;
    return 1;
  }
  if (!strcmp(argv[*i], "--json")) {
    c->json = 1;
    return 1;
  }
  return 0;
}

int cli_unknown(const char *cmd, const char *arg) {
  fprintf(stderr, "scree-tune %s: unknown argument %s (see --help)\n", cmd, arg);
  return CLI_USAGE;
}

int cli_open_user_cache(const cli_common *c, scree__cache **out, const char *cmd,
                        int readonly) {
  char path[4096];
  *out = NULL;
  if (c->cache) {
    snprintf(path, sizeof path, "%s", c->cache);
  } else if (scree__cache_default_path(path, sizeof path) != SCREE_OK) {
    fprintf(stderr, "scree-tune %s: no cache path: set SCREE_CACHE_DIR or HOME, or pass --cache\n", cmd);
    return CLI_CACHE;
  }
  /* Reading commands never create, convert or move a cache: a shipped file
   * stays byte for byte as it was. */
  if (readonly && access(path, F_OK) != 0) {
    if (!c->quiet && !c->json) fprintf(stderr, "scree-tune %s: no cache at %s\n", cmd, path);
    return CLI_OK;
  }
  char why[1024] = "";
  int recovered = 0;
  scree_status st = scree__cache_open(path, readonly, out, &recovered, why, sizeof why);
  if (st != SCREE_OK) {
    fprintf(stderr, "scree-tune %s: cannot open cache %s: %s\n", cmd, path, why);
    return CLI_CACHE;
  }
  if (recovered) fprintf(stderr, "scree-tune %s: warning: %s\n", cmd, why);
  return CLI_OK;
}

void cli_progress_init(cli_progress *p, int quiet, const char *label) {
  p->enabled = !quiet && isatty(2);
  p->start = cli_now();
  p->label = label;
}

void cli_progress_update(void *vp, int done, int total, const char *stage) {
  cli_progress *p = vp;
  if (!p->enabled || total <= 0) return;
  const int width = 30, fill = done * width / total;
  const double el = cli_now() - p->start;
  const double eta = done > 0 ? el * (total - done) / done : 0;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r%-28.28s [%s] %3d/%-3d %-8s ETA %4.0fs", p->label ? p->label : "",
          bar, done, total, stage ? stage : "", eta);
  fflush(stderr);
}

void cli_progress_done(cli_progress *p) {
  if (p->enabled) fprintf(stderr, "\r%90s\r", "");
}

void cli_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    const unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

int cli_parse_dtype(const char *s, scree_dtype *out) {
  static const scree_dtype all[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};
  for (int i = 0; i < 3; i++)
    if (!strcmp(s, scree_dtype_name(all[i]))) {
      *out = all[i];
      return 0;
    }
  return -1;
}

/* Without a GPU: compile what would run, for the archs scree targets. */
static int demo_offline(scree_dtype dt, long cols) {
  char why[1024];
  const scree__nvrtc_api *nv = scree__nvrtc_load(why, sizeof why, NULL);
  if (!nv) {
    printf("NVRTC is not available either: %s\n", why);
    return EXIT_FAIL;
  }
  const scree__op *op = scree__op_find("rmsnorm");
  const scree__variant var = {{dt, dt, dt}};
  scree_rmsnorm_args a = {.cols = cols, .x_dtype = dt, .w_dtype = dt, .y_dtype = dt};
  static const char *const archs[2] = {"sm_80", "sm_90"};
  for (int i = 0; i < 2; i++) {
    scree__config cfg;
    op->default_config(i ? 90 : 80, &var, &a, &cfg);
    char cs[128];
    scree__config_str(op, &cfg, cs, sizeof cs);
    void *cubin;
    size_t size;
    char *log = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    scree_status st = scree__compile(nv, op, &cfg, &var, archs[i], &cubin, &size, &log);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (st != SCREE_OK) {
      printf("compile for %s failed: %s\n", archs[i], log ? log : "");
      free(log);
      return EXIT_FAIL;
    }
    printf("compiled rmsnorm %s (%s) for %s with NVRTC: %zu-byte cubin in %.0f ms\n",
           cs, scree_dtype_name(dt), archs[i], size, ms);
    free(cubin);
    free(log);
  }
  return EXIT_OK_;
}

static int cmd_demo(int argc, char **argv) {
  long rows = 16384, cols = 4096;
  scree_dtype dt = SCREE_DTYPE_FP16;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rows") && i + 1 < argc)
      rows = atol(argv[++i]);
    else if (!strcmp(argv[i], "--cols") && i + 1 < argc)
      cols = atol(argv[++i]);
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
      if (cli_parse_dtype(argv[++i], &dt)) {
        fprintf(stderr, "scree-tune demo: --dtype must be fp16, bf16 or fp32\n");
        return EXIT_USAGE;
      }
    } else {
      fprintf(stderr, "scree-tune demo: unknown option %s\n", argv[i]);
      return EXIT_USAGE;
    }
  }
  if (rows < 1 || cols < 1 || cols > 65536) {
    fprintf(stderr, "scree-tune demo: need rows >= 1 and 1 <= cols <= 65536\n");
    return EXIT_USAGE;
  }
  scree_context *ctx = NULL;
  char why[1024];
  scree_status st = scree_create(NULL, &ctx, why, sizeof why);
  if (st != SCREE_OK) {
    printf("no GPU here (%s: %s)\n", scree_status_name(st), why);
    printf("showing what runs without one: compiling RMSNorm %ldx%ld %s\n", rows,
           cols, scree_dtype_name(dt));
    return demo_offline(dt, cols);
  }
  printf("scree %s on %s (%s, %d SMs)\n", scree_version(), ctx->info.name,
         ctx->arch, ctx->info.sm_count);
  const size_t es = scree_dtype_size(dt), n = (size_t)rows * (size_t)cols;
  void *hx = malloc(n * es), *hw = malloc((size_t)cols * es);
  void *hy = malloc(n * es), *ref = malloc(n * es);
  if (!hx || !hw || !hy || !ref) {
    fprintf(stderr, "scree-tune demo: out of host memory\n");
    free(hx), free(hw), free(hy), free(ref);
    scree_destroy(ctx);
    return EXIT_FAIL;
  }
  uint64_t r = 88172645463325252ull;
  for (size_t i = 0; i < n; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    scree__store_elem(hx, dt, i, (double)(r >> 11) / 4503599627370496.0 - 1.0);
  }
  for (long i = 0; i < cols; i++) scree__store_elem(hw, dt, (size_t)i, 1.0 + 0.01 * (double)(i % 13));
  int pushed = scree__ctx_enter(ctx);
  CUdeviceptr x[2] = {0}, y[2] = {0}, w = 0, big0 = 0, big1 = 0;
  CUevent e0 = NULL, e1 = NULL;
  int rc = EXIT_FAIL;
  const scree__cu_api *cu = ctx->cu;
  if (cu->MemAlloc(&x[0], n * es) || cu->MemAlloc(&x[1], n * es) ||
      cu->MemAlloc(&y[0], n * es) || cu->MemAlloc(&y[1], n * es) ||
      cu->MemAlloc(&w, (size_t)cols * es) || cu->MemcpyHtoD(x[0], hx, n * es) ||
      cu->MemcpyHtoD(x[1], hx, n * es) || cu->MemcpyHtoD(w, hw, (size_t)cols * es) ||
      cu->MemsetD8(y[0], 0xff, n * es) || cu->EventCreate(&e0, 0) || cu->EventCreate(&e1, 0)) {
    fprintf(stderr, "scree-tune demo: device allocation or copy failed\n");
    goto done;
  }
  scree_rmsnorm_args a = {.x = x[0], .w = w, .y = y[0], .rows = rows, .cols = cols,
                          .x_dtype = dt, .w_dtype = dt, .y_dtype = dt, .eps = 1e-6f};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  st = scree_rmsnorm(ctx, &a, NULL);
  cu->CtxSynchronize();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (st != SCREE_OK) {
    fprintf(stderr, "scree_rmsnorm: %s: %s\n", scree_status_name(st), scree_last_error(ctx));
    goto done;
  }
  printf("first call (compile + load + run): %.1f ms\n",
         (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
  cu->MemcpyDtoH(hy, y[0], n * es);
  scree__ref_rmsnorm(&a, hx, hw, ref);
  double rtol, atol;
  scree__tolerance(dt, &rtol, &atol);
  size_t worst, bad = scree__compare(hy, ref, dt, n, rtol, atol, &worst);
  if (bad) {
    printf("WRONG: %zu of %zu elements differ from the CPU reference\n", bad, n);
    goto done;
  }
  printf("checked against the CPU reference: all %zu elements within rtol %.1e\n", n, rtol);
  float t[100];
  for (int i = 0; i < 110; i++) {
    a.x = x[i % 2];
    a.y = y[i % 2];
    cu->EventRecord(e0, NULL);
    scree_rmsnorm(ctx, &a, NULL);
    cu->EventRecord(e1, NULL);
    cu->EventSynchronize(e1);
    if (i >= 10) cu->EventElapsedTime(&t[i - 10], e0, e1);
  }
  const double us = scree__median(t, 100) * 1e3;
  const double bytes = 2.0 * (double)(n * es) + (double)cols * (double)es;
  const size_t cb = (size_t)1 << 30;
  double copy_gbps = 0;
  if (!cu->MemAlloc(&big0, cb) && !cu->MemAlloc(&big1, cb)) {
    float ct[20];
    for (int i = 0; i < 23; i++) {
      cu->EventRecord(e0, NULL);
      cu->MemcpyDtoDAsync(big1, big0, cb, NULL);
      cu->EventRecord(e1, NULL);
      cu->EventSynchronize(e1);
      if (i >= 3) cu->EventElapsedTime(&ct[i - 3], e0, e1);
    }
    copy_gbps = 2.0 * (double)cb / (scree__median(ct, 20) * 1e-3) / 1e9;
  }
  printf("rmsnorm %ldx%ld %s: %.2f us per call (median of 100), %.0f GB/s", rows, cols,
         scree_dtype_name(dt), us, bytes / (us * 1e-6) / 1e9);
  if (copy_gbps > 0)
    printf(" = %.0f%% of the %.0f GB/s device copy", 100 * bytes / (us * 1e-6) / 1e9 / copy_gbps,
           copy_gbps);
  printf("\n");
  rc = EXIT_OK_;
done:
  for (int i = 0; i < 2; i++) {
    if (x[i]) cu->MemFree(x[i]);
    if (y[i]) cu->MemFree(y[i]);
  }
  if (w) cu->MemFree(w);
  if (big0) cu->MemFree(big0);
  if (big1) cu->MemFree(big1);
  if (e0) cu->EventDestroy(e0);
  if (e1) cu->EventDestroy(e1);
  scree__ctx_leave(ctx, pushed);
  scree_destroy(ctx);
  free(hx), free(hw), free(hy), free(ref);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    usage(stdout);
    return EXIT_OK_;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("scree-tune %s\n", scree_version());
    return EXIT_OK_;
  }
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(argv[1], commands[i].name)) continue;
    if (wants_help(argc - 1, argv + 1)) {
      const char *u = commands[i].usage;
      if (!u) {
        const char *name = commands[i].name;
        u = !strcmp(name, "prewarm")    ? usage_prewarm
            : !strcmp(name, "list")     ? usage_list
            : !strcmp(name, "show")     ? usage_show
            : !strcmp(name, "export")   ? usage_export
            : !strcmp(name, "import")   ? usage_import
            : !strcmp(name, "merge")    ? usage_merge
            : !strcmp(name, "verify")   ? usage_verify
            : !strcmp(name, "clear")    ? usage_clear
                                        : usage_safelist;
      }
      fputs(u, stdout);
      return EXIT_OK_;
    }
    return commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "scree-tune: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return EXIT_USAGE;
}
