/* cli.c - the scree-tune command line tool: main, shared helpers, info and
 * demo. The tuning and cache commands are in cli_tune.c and cli_cache.c.
 * See docs/cli.md. */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
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
static int cmd_worker(int argc, char **argv);

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
    {"demo", cmd_demo, "run each op through the runtime and report time and throughput",
     "usage: scree-tune demo [--op rmsnorm|attention|all [--shape S] [--variant V]]\n\n"
     "Runs RMSNorm (16384 x 4096 fp16) and varlen attention (the benchmark's\n"
     "headline batch: 16 sequences of 319..2048 tokens, 16 heads of 64, fp16,\n"
     "causal) through their public entries on GPU 0: the first call, a check\n"
     "against the CPU reference on the op's edge-case batch, the median of 100\n"
     "calls with TFLOP/s or GB/s (beside the device-to-device copy for\n"
     "bandwidth-bound ops). --shape and --variant replace an op's shape and\n"
     "variant in its own fields (as scree-tune prewarm takes them). Without a\n"
     "GPU it says so and compiles the default kernels for sm_80 and sm_90 with\n"
     "NVRTC instead, which needs no GPU.\n"},
    {"prewarm", cmd_prewarm, "tune shapes ahead of time into the user cache", NULL},
    {"list", cmd_list, "list cached winners (or misses, or bad configs)", NULL},
    {"show", cmd_show, "show cached entries in full", NULL},
    {"export", cmd_export, "write cached winners (with cubins) to a standalone cache", NULL},
    {"import", cmd_merge, "merge another cache into the user cache (same as merge)", NULL},
    {"merge", cmd_merge, "merge caches, keeping the faster entry per key", NULL},
    {"verify", cmd_verify, "re-check cached winners on this GPU (and --retime)", NULL},
    {"clear", cmd_clear, "delete cached entries", NULL},
    {"safelist", cmd_safelist, "safelist export: write the learned safelist", NULL},
    {"worker", cmd_worker, "the tuning worker (started by the library, not by hand)",
     "usage: scree-tune worker [--device N]\n\n"
     "Runs tuning candidates for a process that tunes: it reads requests (a\n"
     "bucket and compiled candidates) on stdin and answers one line per\n"
     "candidate on stdout, on a CUDA context of its own on GPU N (default 0),\n"
     "so that a candidate that faults or hangs takes down this worker, not\n"
     "the process that tunes. The library starts it (finding this program\n"
     "beside itself, or through SCREE_WORKER) and restarts it as needed;\n"
     "docs/architecture.md describes the protocol. Run by hand, it says why\n"
     "it cannot start (no GPU: exit 3) or waits for a request.\n"},
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
  if (!argv[*i + 1][0]) {
    fprintf(stderr, "scree-tune %s: %s needs a non-empty value\n", cmd, name);
    return NULL;
  }
  return argv[++*i];
}

int cli_common_opt(cli_common *c, int argc, char **argv, int *i, const char *cmd) {
  static const char *const valued[] = {"--cache", "--arch", "--op"};
  static const char *const what[] = {"a cache file path", "an architecture such as sm_90",
                                     "an op name such as rmsnorm"};
  for (int k = 0; k < 3; k++)
    if (!strcmp(argv[*i], valued[k])) {
      if (*i + 1 >= argc) {
        fprintf(stderr, "scree-tune %s: %s needs a value\n", cmd, valued[k]);
        return -1;
      }
      /* An empty filter would match every row: "clear --arch ''" must not
       * empty the cache. */
      if (!argv[*i + 1][0]) {
        fprintf(stderr, "scree-tune %s: %s needs a non-empty value (%s)\n", cmd, valued[k],
                what[k]);
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
    /* Never cut: a cut path names another file. */
    if (strlen(c->cache) >= sizeof path) {
      fprintf(stderr, "scree-tune %s: --cache: the path is %zu bytes, longer than the %zu a path"
                      " may have\n", cmd, strlen(c->cache), sizeof path - 1);
      return CLI_USAGE;
    }
    snprintf(path, sizeof path, "%s", c->cache);
  } else if (scree__cache_default_path(path, sizeof path) != SCREE_OK) {
    fprintf(stderr, "scree-tune %s: no cache path: set SCREE_CACHE_DIR or HOME (an absolute"
                    " path), or pass --cache\n", cmd);
    return CLI_CACHE;
  }
  char why[1024] = "";
  int recovered = 0;
  /* Reading commands never create, convert or move a cache: a shipped file
   * stays byte for byte as it was. A file that is not there, or is empty,
   * holds nothing yet; one that cannot be reached is an error. */
  scree_status st = scree__cache_open(path, readonly, out, &recovered, why, sizeof why);
  if (readonly && st == SCREE_ERROR_NOT_FOUND) {
    if (!c->quiet && !c->json) fprintf(stderr, "scree-tune %s: %s\n", cmd, why);
    return CLI_OK;
  }
  if (st != SCREE_OK) {
    fprintf(stderr, "scree-tune %s: cannot open cache %s: %s\n", cmd, path, why);
    return st == SCREE_ERROR_INVALID_ARGUMENT ? CLI_USAGE : CLI_CACHE;
  }
  if (recovered) fprintf(stderr, "scree-tune %s: warning: %s\n", cmd, why);
  return CLI_OK;
}

int cli_cache_failed(scree__cache *cache, scree_status st, const char *cmd) {
  if (st == SCREE_OK) return CLI_OK;
  char why[512];
  scree__cache_last_error(cache, why, sizeof why);
  fprintf(stderr, "scree-tune %s: %s: %s\n", cmd, scree_status_name(st),
          why[0] ? cli_esc(why) : scree_status_str(st));
  return CLI_CACHE;
}

int cli_report_refused(scree__cache *cache, const char *cmd) {
  char why[512];
  const int n = scree__cache_refused(cache, why, sizeof why);
  if (n)
    fprintf(stderr, "scree-tune %s: warning: skipped %d row(s) of %s that failed their checks"
                    " (first: %s)\n", cmd, n, scree__cache_path(cache), cli_esc(why));
  return n;
}

/* Writes all of data to fd: 0, or an errno. */
static int write_all(int fd, const char *data, size_t len) {
  while (len) {
    const ssize_t n = write(fd, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    len -= (size_t)n;
  }
  return 0;
}

int cli_write_file(const char *path, const char *data, size_t len, char *why, size_t why_size) {
  struct stat sb;
  int err = 0;
  if (stat(path, &sb) != 0) {
    if (errno != ENOENT) {
      snprintf(why, why_size, "%s: %s", path, strerror(errno));
      return -1;
    }
    sb.st_mode = 0;
  } else if (!S_ISREG(sb.st_mode)) {
    /* A device or a pipe: there is nothing to replace. */
    const int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) err = errno;
    if (!err) err = write_all(fd, data, len);
    if (fd >= 0 && close(fd) != 0 && !err) err = errno;
    if (err) snprintf(why, why_size, "writing %s: %s", path, strerror(err));
    return err ? -1 : 0;
  }
  /* The file itself, through any symlinks: its directory holds the
   * temporary file, so that rename replaces it in one step. */
  char *target = sb.st_mode ? realpath(path, NULL) : strdup(path);
  if (!target) {
    snprintf(why, why_size, "%s: %s", path, strerror(errno));
    return -1;
  }
  const char *slash = strrchr(target, '/');
  const char *base = slash ? slash + 1 : target;
  const int dlen = slash ? (int)(slash - target) + 1 : 0;
  const size_t tl = strlen(target) + 16;
  char *tmp = malloc(tl);
  if (!tmp) {
    free(target);
    snprintf(why, why_size, "%s: out of memory", path);
    return -1;
  }
  snprintf(tmp, tl, "%.*s.%s.XXXXXX", dlen, target, base);
  const int fd = mkstemp(tmp);
  if (fd < 0) {
    snprintf(why, why_size, "cannot create a temporary file beside %s: %s", target,
             strerror(errno));
    free(tmp);
    free(target);
    return -1;
  }
  mode_t mode = sb.st_mode & 07777;
  if (!sb.st_mode) {
    const mode_t mask = umask(0);
    umask(mask);
    mode = 0666 & ~mask;
  }
  if (fchmod(fd, mode) != 0) err = errno;
  if (!err) err = write_all(fd, data, len);
  if (!err && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, target) != 0) err = errno;
  if (err) {
    snprintf(why, why_size, "writing %s: %s (left as it was)", path, strerror(err));
    unlink(tmp);
  }
  free(tmp);
  free(target);
  return err ? -1 : 0;
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
  const size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    unsigned cp;
    const int len = scree__utf8_char(s + i, n - i, &cp);
    if (!len) {
      fputs("\\ufffd", f);
      i++;
    } else if (cp == '"' || cp == '\\') {
      fprintf(f, "\\%c", (char)cp);
      i++;
    } else if (scree__unsafe_char(cp)) {
      fprintf(f, "\\u%04x", cp);
      i += (size_t)len;
    } else {
      fwrite(s + i, 1, (size_t)len, f);
      i += (size_t)len;
    }
  }
  fputc('"', f);
}

void cli_json_num(FILE *f, const char *fmt, double v) {
  if (isfinite(v))
    fprintf(f, fmt, v);
  else
    fputs("null", f);
}

const char *cli_esc(const char *s) {
  static char bufs[8][1100];
  static int next;
  char *b = bufs[next];
  next = (next + 1) % 8;
  return scree__escape_text(b, sizeof bufs[0], s ? s : "");
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

void cli_rate(char *buf, size_t size, double flops, double bytes, double us) {
  if (us <= 0)
    snprintf(buf, size, "-");
  else if (flops > 0)
    snprintf(buf, size, "%.1f TFLOP/s", flops / (us * 1e-6) / 1e12);
  else
    snprintf(buf, size, "%.0f GB/s", bytes / (us * 1e-6) / 1e9);
}

/* What the demo runs: an op, a shape in its own fields, a variant, and for
 * varlen ops the sequence lengths (the benchmark's headline batch). */
typedef struct demo_case {
  const char *op, *shape, *variant;
  const int64_t *lens;
  int nlens;
} demo_case;

static const int64_t headline_lens[16] = {340, 618, 900, 886, 1136, 501, 2048, 840,
                                          550, 319, 389, 402, 1025, 771, 468, 888};

static demo_case demo_cases[] = {
    {"rmsnorm", "rows=16384,cols=4096", "x=fp16,w=fp16,y=fp16", NULL, 0},
    {"attention",
     "heads_q=16,heads_kv=16,head_dim=64,window_left=-1,window_right=-1",
     "dtype=fp16,head_dim=64,causal=1,window=0", headline_lens, 16},
};
#define NDEMO (int)(sizeof demo_cases / sizeof demo_cases[0])

/* 0, or -1 when the op's shape or variant text does not parse. */
static int demo_parse(const demo_case *dc, const scree__op **op, void *args,
                      scree__variant *var) {
  char why[512];
  *op = scree__op_find(dc->op);
  memset(args, 0, SCREE__ARGS_MAX);
  if (!*op || scree__shape_parse(*op, dc->shape, args, why, sizeof why) ||
      scree__variant_parse(*op, dc->variant, var, why, sizeof why)) {
    fprintf(stderr, "scree-tune demo: %s %s %s: %s\n", dc->op, dc->shape, dc->variant,
            *op ? why : "unknown op");
    return -1;
  }
  return 0;
}

/* Without a GPU: compile each op's default config for the archs scree
 * targets. */
static int demo_offline(int which) {
  char why[1024];
  const scree__nvrtc_api *nv = scree__nvrtc_load(why, sizeof why, NULL);
  if (!nv) {
    printf("NVRTC is not available either: %s\n", why);
    return EXIT_FAIL;
  }
  static const char *const archs[2] = {"sm_80", "sm_90"};
  for (int d = 0; d < NDEMO; d++) {
    if (which >= 0 && which != d) continue;
    const scree__op *op;
    _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
    scree__variant var;
    if (demo_parse(&demo_cases[d], &op, args, &var)) return EXIT_USAGE;
    for (int i = 0; i < 2; i++) {
      scree__target t;
      scree__target_for_arch(archs[i], &t);
      scree__config cfg;
      op->default_config(&t, &var, args, &cfg);
      char cs[128], target[16];
      scree__config_str(op, &cfg, cs, sizeof cs);
      scree__target_arch(archs[i], t.sm, &op->impls[cfg.impl], target);
      void *cubin;
      size_t size;
      char *log = NULL;
      const double t0 = cli_now();
      scree_status st = scree__compile(nv, op, &cfg, &var, target, NULL, &cubin, &size, &log);
      const double ms = (cli_now() - t0) * 1e3;
      if (st != SCREE_OK) {
        printf("compile of %s for %s failed: %s\n", op->name, target, log ? log : "");
        free(log);
        return EXIT_FAIL;
      }
      printf("compiled %s %s (%s) for %s with NVRTC: %zu-byte cubin in %.0f ms\n", op->name, cs,
             demo_cases[d].variant, target, size, ms);
      free(cubin);
      free(log);
    }
  }
  return EXIT_OK_;
}

/* One op through its public entry: the first call (tune or compile, load,
 * run), a check against the CPU reference on the op's edge-case problem,
 * then the median of 100 calls on the full problem. */
static int demo_one(scree_context *ctx, const demo_case *dc, double copy) {
  const scree__op *op;
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX], call[SCREE__ARGS_MAX];
  scree__variant var;
  if (demo_parse(dc, &op, args, &var)) return EXIT_USAGE;
  const scree__lens lens = {dc->nlens, dc->lens, dc->lens};
  scree__run big, chk;
  CUstream stream = NULL;
  char why[1024];
  const uint64_t seed = scree__fresh_seed();
  if (scree__run_make(ctx, op, &var, args, 0, seed, dc->lens ? &lens : NULL, &big)) {
    fprintf(stderr, "scree-tune demo: %s: %s\n", op->name, scree_last_error(ctx));
    return EXIT_FAIL;
  }
  int rc = EXIT_FAIL;
  void *user = (void *)op;
  scree__run_bind(&big, 0, call);
  const double t0 = cli_now();
  scree_status st = scree__run_config_api(user, ctx, call, NULL);
  ctx->cu->CtxSynchronize();
  const double first_ms = (cli_now() - t0) * 1e3;
  if (st) {
    fprintf(stderr, "scree_%s: %s: %s\n", op->name, scree_status_name(st), scree_last_error(ctx));
    scree__run_free(ctx, &big);
    return EXIT_FAIL;
  }
  printf("%s (%s) on %s\n", op->name, dc->variant, big.p.desc);
  printf("  first call (tune or compile, load, run): %.1f ms\n", first_ms);
  /* The op's edge-case batch for the same shape (sequence bounds included). */
  if ((st = scree__run_make(ctx, op, &var, big.p.args, 1, seed, NULL, &chk))) {
    fprintf(stderr, "scree-tune demo: %s\n", scree_last_error(ctx));
    scree__run_free(ctx, &big);
    return EXIT_FAIL;
  }
  ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  /* The config the timed calls run (their plan), checked on the edge-case
   * batch: through the public entry that batch would be a bucket of its own. */
  scree__config cfg;
  scree__kernel k;
  if (!scree__plan_config(ctx, op, &var, call, &cfg)) {
    printf("  no plan for the call\n");
    goto done;
  }
  if ((st = scree__kernel_get(ctx, op, &cfg, &var, &k))) {
    printf("  %s\n", scree_last_error(ctx));
    goto done;
  }
  scree__config_runner cr = {op, &cfg, &var, &k};
  st = scree__run_check(ctx, &chk, scree__run_config, &cr, stream, 10000, why, sizeof why);
  if (st) {
    printf("  WRONG: %s\n", why);
    goto done;
  }
  size_t nout = 0;
  for (int b = 0; b < chk.p.nbufs; b++)
    if (chk.p.bufs[b].kind == SCREE__BUF_OUT) nout += chk.p.bufs[b].count;
  char cs[128];
  scree__config_str(op, &cfg, cs, sizeof cs);
  printf("  config %s, checked against the CPU reference: %zu output elements of %s within "
         "tolerance\n", cs, nout, chk.p.desc);
  double us = 0, spread = 0;
  st = scree__run_time(ctx, &big, scree__run_config_api, user, stream, 10, 100, 1, 10000, &us,
                       &spread, why, sizeof why);
  if (st) {
    printf("  timing failed: %s\n", why);
    goto done;
  }
  char rate[32];
  cli_rate(rate, sizeof rate, big.p.flops, big.p.bytes, us);
  printf("  %.2f us per call (median of 100), %s", us, rate);
  if (big.p.flops <= 0 && copy > 0)
    printf(" = %.0f%% of the %.0f GB/s device copy", 100 * big.p.bytes / (us * 1e-6) / 1e9 / copy,
           copy);
  printf("\n");
  rc = EXIT_OK_;
done:
  if (stream) ctx->cu->StreamDestroy(stream);
  scree__run_free(ctx, &chk);
  scree__run_free(ctx, &big);
  return rc;
}

static int cmd_demo(int argc, char **argv) {
  int which = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--op") && i + 1 < argc) {
      const char *name = argv[++i];
      for (int d = 0; d < NDEMO; d++)
        if (!strcmp(demo_cases[d].op, name)) which = d;
      if (which < 0 && strcmp(name, "all")) {
        fprintf(stderr, "scree-tune demo: --op must be one of:");
        for (int d = 0; d < NDEMO; d++) fprintf(stderr, " %s", demo_cases[d].op);
        fprintf(stderr, " all\n");
        return EXIT_USAGE;
      }
    } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && which >= 0) {
      demo_cases[which].shape = argv[++i];
      demo_cases[which].lens = NULL;
      demo_cases[which].nlens = 0;
    } else if (!strcmp(argv[i], "--variant") && i + 1 < argc && which >= 0) {
      demo_cases[which].variant = argv[++i];
    } else {
      fprintf(stderr, "scree-tune demo: unknown option %s (--shape and --variant follow --op)\n",
              argv[i]);
      return EXIT_USAGE;
    }
  }
  scree_context *ctx = NULL;
  char why[1024];
  scree_status st = scree_create(NULL, &ctx, why, sizeof why);
  if (st != SCREE_OK) {
    printf("no GPU here (%s: %s)\n", scree_status_name(st), why);
    printf("showing what runs without one: compiling the default kernels with NVRTC\n");
    return demo_offline(which);
  }
  scree_device_info dev;
  scree_context_device(ctx, &dev);
  printf("scree %s on %s (%s, %d SMs)\n", scree_version(), dev.name, dev.arch, dev.sm_count);
  const int pushed = scree__ctx_enter(ctx);
  const double copy = scree__copy_gbps(ctx);
  int rc = EXIT_OK_;
  for (int d = 0; d < NDEMO; d++) {
    if (which >= 0 && which != d) continue;
    const int r = demo_one(ctx, &demo_cases[d], copy);
    if (r != EXIT_OK_ && rc != EXIT_USAGE) rc = r;
  }
  scree__ctx_leave(ctx, pushed);
  scree_destroy(ctx);
  return rc;
}

/* Flushes and closes stdout: a command whose output was lost (a full disk,
 * /dev/full) fails with CLI_FAIL and a message, whatever it returned. */
static int finish_stdout(int rc) {
  errno = 0;
  int err = fflush(stdout) != 0 ? errno : 0;
  const int lost = ferror(stdout);
  if (fclose(stdout) != 0 && !err) err = errno;
  if (!err && !lost) return rc;
  fprintf(stderr, "scree-tune: error writing to standard output%s%s\n", err ? ": " : "",
          err ? strerror(err) : "");
  return rc ? rc : CLI_FAIL;
}

static int cmd_worker(int argc, char **argv) {
  int device = 0;
  for (int i = 1; i < argc; i++) {
    char *end;
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      const long d = strtol(argv[++i], &end, 10);
      if (*end || d < 0 || d > 1024) {
        fprintf(stderr, "scree-tune worker: --device %s: not a device ordinal\n", argv[i]);
        return EXIT_USAGE;
      }
      device = (int)d;
    } else {
      fprintf(stderr, "scree-tune worker: unknown option '%s'\n", argv[i]);
      return EXIT_USAGE;
    }
  }
  scree_options o;
  scree_options_init(&o);
  o.device = device;
  o.disable_cache = 1;   /* the caller records and stores */
  o.nvrtc_optional = 1;  /* it runs the caller's cubins */
  scree_context *ctx;
  char why[512];
  const scree_status st = scree_create(&o, &ctx, why, sizeof why);
  if (st) {
    fprintf(stderr, "scree-tune worker: %s: %s\n", scree_status_name(st), why);
    return st == SCREE_ERROR_NO_DEVICE || st == SCREE_ERROR_NO_DRIVER ? 3 : 1;
  }
  const int rc = scree__worker_serve(ctx, 0, 1);
  if (rc == 3) _exit(3); /* a broken context: leave it to the driver */
  scree_destroy(ctx);
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
    return finish_stdout(EXIT_OK_);
  }
  if (!strcmp(argv[1], "--version")) {
    printf("scree-tune %s\n", scree_version());
    return finish_stdout(EXIT_OK_);
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
      return finish_stdout(EXIT_OK_);
    }
    return finish_stdout(commands[i].run(argc - 1, argv + 1));
  }
  fprintf(stderr, "scree-tune: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return EXIT_USAGE;
}
