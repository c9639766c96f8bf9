/* cli.c - the scree-tune command line tool: main, the option parser and
 * the helpers the commands share, info, demo and worker. The tuning
 * commands are in cli_tune.c, the cache commands in cli_cache.c, the
 * shipped tuned configs in cli_shipped.c, shards in cli_shard.c and
 * doctor in cli_doctor.c. See docs/cli.md. */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int cmd_info(int argc, char **argv);
static int cmd_demo(int argc, char **argv);
static int cmd_worker(int argc, char **argv);

static const char *const usage_info =
    "usage: scree-tune info [--json]\n\n"
    "Prints scree's version, the CUDA driver and NVRTC versions, and each\n"
    "GPU's name, architecture, SM count and memory. On a machine without a\n"
    "GPU it says so and why; the exit code is then 3. scree-tune doctor\n"
    "reports more (caches, shipped configs, environment).\n";
static const char *const usage_demo =
    "usage: scree-tune demo [--op rmsnorm|attention|all] [--shape S] [--variant V] [--json]\n\n"
    "Runs RMSNorm (16384 x 4096 fp16) and varlen attention (the benchmark's\n"
    "headline batch: 16 sequences of 319..2048 tokens, 16 heads of 64, fp16,\n"
    "causal) through their public entries on GPU 0: the first call, a check\n"
    "against the CPU reference on the op's edge-case batch, the median of 100\n"
    "calls with TFLOP/s or GB/s (beside the device-to-device copy for\n"
    "bandwidth-bound ops). --shape and --variant replace the shape and\n"
    "variant of the op --op names, in its own fields (as scree-tune prewarm\n"
    "takes them). Without a GPU it says so and compiles the default kernels\n"
    "for sm_80 and sm_90 with NVRTC instead, which needs no GPU.\n";
static const char *const usage_worker =
    "usage: scree-tune worker [--device N]\n\n"
    "Runs tuning candidates for a process that tunes: it reads requests (a\n"
    "bucket and compiled candidates) on stdin and answers one line per\n"
    "candidate on stdout, on a CUDA context of its own on GPU N (default 0),\n"
    "so that a candidate that faults or hangs takes down this worker, not\n"
    "the process that tunes. The library starts it (finding this program\n"
    "beside itself, or through SCREE_WORKER) and restarts it as needed;\n"
    "docs/architecture.md describes the protocol. Run by hand, it says why\n"
    "it cannot start (no GPU: exit 3) or waits for a request.\n";

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
  const char *const *usage;
} command;

static const command commands[] = {
    {"info", cmd_info, "show scree, driver, NVRTC and GPU versions", &usage_info},
    {"doctor", cmd_doctor, "report what a bug report needs: versions, caches, environment",
     &usage_doctor},
    {"demo", cmd_demo, "run each op through the runtime and report time and throughput",
     &usage_demo},
    {"prewarm", cmd_prewarm, "tune shapes ahead of time into the user cache", &usage_prewarm},
    {"list", cmd_list, "list cached winners (or misses, or bad configs)", &usage_list},
    {"show", cmd_show, "show cached entries in full", &usage_show},
    {"export", cmd_export, "write cached winners (with cubins) to a standalone cache",
     &usage_export},
    {"import", cmd_merge, "merge another cache into the user cache (same as merge)",
     &usage_import},
    {"merge", cmd_merge, "merge caches, keeping the faster entry per key", &usage_merge},
    {"verify", cmd_verify, "re-check cached winners on this GPU (and --retime)", &usage_verify},
    {"clear", cmd_clear, "delete cached entries", &usage_clear},
    {"safelist", cmd_safelist, "safelist export: write the learned safelist", &usage_safelist},
    {"worker", cmd_worker, "the tuning worker (started by the library, not by hand)",
     &usage_worker},
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
          "\n`scree-tune <command> --help` describes a command. Options take their\n"
          "value as `--opt value` or `--opt=value`.\n"
          "exit codes: 0 success, 1 failure, 2 usage error, 3 no GPU or NVRTC,\n"
          "4 cache file error\n");
}

static int wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  return 0;
}

/* ---- the option parser ------------------------------------------------------- */

/* Every long option of every command: an option this command lacks but
 * another takes is "not an option of <cmd>", anything else unknown. */
static const char *const all_options[] = {
    "cache", "arch", "op", "quiet", "json", "bucket", "dtype", "misses", "bad", "text",
    "no-strict-modes", "all", "retime", "shipped", "device", "devices", "rows", "cols",
    "rows-max", "shape", "shapes", "variant", "model", "presets", "from-misses",
    "from-shipped", "shard", "shard-count", "dry-run", "explore", "force", "reps"};

/* --json was given to a command that takes it (even after a bad option),
 * and its JSON document was started: see json_error. */
static int json_wanted, json_opened;

void cli_args_init(cli_args *a, const char *cmd, int argc, char **argv,
                   const struct option *opts, const char *shortopts) {
  for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
    for (int k = 0; opts[k].name; k++)
      if (opts[k].val == OPT_JSON && !strcmp(argv[i], "--json")) json_wanted = 1;
  /* One command line per process: the room for its arguments stays (and
   * stays reachable) until the process ends. */
  static char **room;
  static int room_size;
  if (argc > room_size) {
    char **r = realloc(room, (size_t)argc * sizeof *r);
    if (!r) {
      fprintf(stderr, "scree-tune %s: out of memory\n", cmd);
      exit(CLI_FAIL);
    }
    room = r;
    room_size = argc;
  }
  a->pos = room;
  a->cmd = cmd;
  a->argc = argc;
  a->argv = argv;
  a->opts = opts;
  a->shortopts = shortopts;
  a->npos = 0;
  optind = 0; /* GNU: start afresh */
  opterr = 0; /* the messages are ours */
}

/* What an empty value of a common option would have meant. */
static const char *empty_hint(const char *name) {
  if (!strcmp(name, "cache")) return " (a cache file path)";
  if (!strcmp(name, "arch")) return " (an architecture such as sm_90)";
  if (!strcmp(name, "op")) return " (an op name such as rmsnorm)";
  return "";
}

/* The option of argv text "--name[=value]" as this command's table has it:
 * its index, -1 for none, -2 for several (an ambiguous prefix). */
static int find_long(const struct option *opts, const char *name, size_t len) {
  int found = -1, n = 0;
  for (int i = 0; opts[i].name; i++)
    if (!strncmp(opts[i].name, name, len)) {
      if (strlen(opts[i].name) == len) return i;
      found = i;
      n++;
    }
  return n > 1 ? -2 : found;
}

static int bad_option(const cli_args *a, int ch) {
  const char *cmd = a->cmd;
  const char *text = optind > 0 && optind <= a->argc ? a->argv[optind - 1] : "?";
  if (strncmp(text, "--", 2) && optopt > 0 && optopt < 256) { /* a short option */
    if (ch == ':')
      fprintf(stderr, "scree-tune %s: -%c needs a value\n", cmd, optopt);
    else
      fprintf(stderr, "scree-tune %s: unknown option -%c (see scree-tune %s --help)\n", cmd,
              optopt, cmd);
    return CLI_BAD_OPTION;
  }
  const char *name = !strncmp(text, "--", 2) ? text + 2 : text;
  const size_t len = strcspn(name, "=");
  const int i = find_long(a->opts, name, len);
  /* What the user typed, made safe for a terminal. */
  char typed[256];
  snprintf(typed, sizeof typed, "%.*s", (int)len, name);
  const char *shown = cli_esc(typed);
  if (ch == ':') {
    fprintf(stderr, "scree-tune %s: --%s needs a value%s\n", cmd, shown,
            empty_hint(i >= 0 ? a->opts[i].name : ""));
  } else if (i == -2) {
    fprintf(stderr, "scree-tune %s: --%s is ambiguous:", cmd, shown);
    for (int k = 0; a->opts[k].name; k++)
      if (!strncmp(a->opts[k].name, name, len)) fprintf(stderr, " --%s", a->opts[k].name);
    fprintf(stderr, "\n");
  } else if (i >= 0 && a->opts[i].has_arg == no_argument && name[len] == '=') {
    fprintf(stderr, "scree-tune %s: --%s takes no value\n", cmd, a->opts[i].name);
  } else {
    int elsewhere = 0;
    for (size_t k = 0; k < sizeof all_options / sizeof all_options[0]; k++)
      if (strlen(all_options[k]) == len && !strncmp(all_options[k], name, len)) elsewhere = 1;
    if (elsewhere)
      fprintf(stderr, "scree-tune %s: --%s is not an option of %s (see scree-tune %s --help)\n",
              cmd, shown, cmd, cmd);
    else
      fprintf(stderr, "scree-tune %s: unknown option %s%s (see scree-tune %s --help)\n", cmd,
              name != text ? "--" : "", shown, cmd);
  }
  return CLI_BAD_OPTION;
}

int cli_next(cli_args *a, const char **val) {
  /* "-": arguments come back in order as option 1 instead of being moved
   * to the end, so that options may follow them even where
   * POSIXLY_CORRECT would stop getopt at the first one; ":": a missing
   * value is told apart from an unknown option. */
  char so[40];
  snprintf(so, sizeof so, "-:%s", a->shortopts ? a->shortopts : "");
  int idx = -1, ch;
  while ((optopt = 0, ch = getopt_long(a->argc, a->argv, so, a->opts, &idx)) == 1) {
    a->pos[a->npos++] = optarg; /* at most argc - 1 of them */
    idx = -1;
  }
  *val = optarg;
  if (ch == -1) {
    /* What follows "--" is arguments. */
    while (optind < a->argc) a->pos[a->npos++] = a->argv[optind++];
    return -1;
  }
  if (ch == '?' || ch == ':') return bad_option(a, ch);
  if (optarg && !optarg[0]) {
    /* An empty filter would match every row: "clear --arch ''" must not
     * empty the cache; an empty file name names no file. */
    if (idx >= 0)
      fprintf(stderr, "scree-tune %s: --%s needs a non-empty value%s\n", a->cmd,
              a->opts[idx].name, empty_hint(a->opts[idx].name));
    else
      fprintf(stderr, "scree-tune %s: -%c needs a non-empty value\n", a->cmd, ch);
    return CLI_BAD_OPTION;
  }
  return ch;
}

char **cli_positional(cli_args *a, int *n) {
  *n = a->npos;
  return a->pos;
}

int cli_common_opt(cli_common *c, int id, const char *val) {
  switch (id) {
    case OPT_CACHE: c->cache = val; return 1;
    case OPT_ARCH: c->arch = val; return 1;
    case OPT_OP: c->op = val; return 1;
    case 'q': c->quiet = 1; return 1;
    case OPT_JSON: c->json = 1; return 1;
    default: return 0;
  }
}

scree__admin_filter cli_filter(const cli_common *c) {
  return (scree__admin_filter){c->arch, c->op, NULL, NULL};
}

int cli_unexpected(const char *cmd, const char *arg) {
  fprintf(stderr, "scree-tune %s: unexpected argument '%s' (see scree-tune %s --help)\n", cmd,
          cli_esc(arg), cmd);
  return CLI_USAGE;
}

int cli_parse_dtypes(const char *cmd, const char *s, scree_dtype *out, int cap, int *n) {
  static const scree_dtype all[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};
  *n = 0;
  for (const char *p = s;;) {
    const size_t len = strcspn(p, ",");
    int found = -1;
    for (int i = 0; i < 3; i++)
      if (strlen(scree_dtype_name(all[i])) == len && !strncmp(p, scree_dtype_name(all[i]), len))
        found = i;
    char piece[64];
    snprintf(piece, sizeof piece, "%.*s", (int)len, p);
    if (found < 0) {
      fprintf(stderr, "scree-tune %s: --dtype %s: unknown dtype %s%s (fp32, fp16 or bf16)\n",
              cmd, cli_esc(s), len ? "" : "\"\"", cli_esc(piece));
      return CLI_USAGE;
    }
    for (int k = 0; k < *n; k++)
      if (out[k] == all[found]) {
        fprintf(stderr, "scree-tune %s: --dtype %s: %s is given twice\n", cmd, cli_esc(s),
                piece);
        return CLI_USAGE;
      }
    if (*n == cap) return CLI_USAGE; /* cannot happen: each of three at most once */
    out[(*n)++] = all[found];
    if (!p[len]) break;
    p += len + 1;
  }
  return CLI_OK;
}

int cli_parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  const long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "scree-tune %s: --%s %s: expected an integer from %ld to %ld\n", cmd, opt,
            cli_esc(s), lo, hi);
    return CLI_USAGE;
  }
  *out = v;
  return CLI_OK;
}

/* ---- info -------------------------------------------------------------------- */

static int cmd_info(int argc, char **argv) {
  static const struct option opts[] = {CLI_OPT_JSON, CLI_OPT_END};
  cli_args a;
  cli_args_init(&a, "info", argc, argv, opts, "");
  int json = 0, ch, npos;
  const char *v;
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    json = 1;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos) return cli_unexpected("info", pos[0]);
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  if (json)
    cli_json_begin();
  else
    printf("scree %s\n", scree_version());
  cli_report_driver(&ri, json);
  if (json) {
    printf(", \"nvrtc\": {\"loaded\": %s, \"version\": ", ri.nvrtc_loaded ? "true" : "false");
    cli_json_version(stdout, ri.nvrtc_loaded ? ri.nvrtc_major * 1000 + ri.nvrtc_minor * 10 : 0);
    printf(", \"library\": ");
    cli_json_str(stdout, ri.nvrtc_path);
    printf(", \"error\": ");
    cli_json_str(stdout, ri.nvrtc_error);
    printf("}, \"gpus\": [");
  } else {
    if (ri.nvrtc_loaded)
      printf("NVRTC: %d.%d (%s)\n", ri.nvrtc_major, ri.nvrtc_minor, ri.nvrtc_path);
    else
      printf("NVRTC: not available (%s)\n", ri.nvrtc_error);
    cli_report_gpu_count(&ri);
  }
  for (int d = 0; d < ri.device_count; d++) {
    scree_device_info di;
    if (scree_get_device_info(d, &di) != SCREE_OK) continue;
    const double gib = (double)di.total_memory / (1024.0 * 1024 * 1024);
    if (json) {
      printf("%s{\"ordinal\": %d, \"name\": ", d ? ", " : "", d);
      cli_json_str(stdout, di.name);
      printf(", \"arch\": \"%s\", \"sm_count\": %d, \"memory_gib\": %.1f, \"l2_mib\": %d}",
             di.arch, di.sm_count, gib, di.l2_bytes >> 20);
    } else {
      printf("  [%d] %s  %s  %d SMs  %.1f GiB  L2 %d MiB\n", d, di.name, di.arch, di.sm_count,
             gib, di.l2_bytes >> 20);
    }
  }
  if (json) printf("]}\n");
  return ri.device_count ? CLI_OK : CLI_NO_GPU;
}

/* ---- helpers shared by the commands ------------------------------------ */

void cli_json_bucket_fields(const char *op, const char *bucket, const char *vname,
                            const char *variant) {
  printf("\"op\": ");
  cli_json_str(stdout, op);
  printf(", \"bucket\": ");
  cli_json_str(stdout, bucket);
  printf(", \"%s\": ", vname);
  cli_json_str(stdout, variant);
}

void cli_json_key_start(const scree__admin_key *k) {
  cli_json_bucket_fields(k->op, k->bucket, "dtype", k->dtype);
}

void cli_json_begin(void) {
  cli_json_open();
  printf("\"scree_version\": ");
  cli_json_str(stdout, scree_version());
}

void cli_report_driver(const scree_runtime_info *ri, int json) {
  if (json) {
    printf(", \"driver\": {\"loaded\": %s, \"version\": ", ri->driver_loaded ? "true" : "false");
    cli_json_version(stdout, ri->driver_version);
    printf(", \"error\": ");
    cli_json_str(stdout, ri->driver_error);
    printf("}");
  } else if (ri->driver_version) {
    printf("CUDA driver: %d.%d\n", ri->driver_version / 1000, (ri->driver_version % 1000) / 10);
  } else {
    printf("CUDA driver: not available (%s)\n", ri->driver_error);
  }
}

void cli_report_gpu_count(const scree_runtime_info *ri) {
  if (ri->device_count == 0)
    printf("GPUs: none (%s)\n", ri->driver_error[0] ? ri->driver_error : "no device");
  else
    printf("GPUs: %d\n", ri->device_count);
}

double cli_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int cli_refuse_pinned(const char *cmd, const char *path) {
  const char *pin = getenv("SCREE_PIN");
  struct stat a, b;
  if (!pin || !*pin || stat(pin, &a) || stat(path, &b)) return 0;
  if (a.st_dev != b.st_dev || a.st_ino != b.st_ino) return 0;
  fprintf(stderr, "scree-tune %s: refusing to write %s: it is the pinned cache (SCREE_PIN=%s), "
                  "which is read-only; write another file, check it (verify --agree) and pin "
                  "that\n", cmd, cli_esc(path), cli_esc(pin));
  return 1;
}

int cli_open_user_cache(const cli_common *c, scree__admin_cache **out, const char *cmd,
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
  } else if (scree__admin_default_path(path, sizeof path) != SCREE_OK) {
    const char *d = getenv("SCREE_CACHE_DIR");
    if (d && *d && d[0] != '/')
      fprintf(stderr, "scree-tune %s: SCREE_CACHE_DIR='%s' is not an absolute path (a relative"
                      " one would follow the working directory); give an absolute path, or"
                      " pass --cache\n", cmd, cli_esc(d));
    else
      fprintf(stderr, "scree-tune %s: no cache path: set SCREE_CACHE_DIR or HOME (an absolute"
                      " path), or pass --cache\n", cmd);
    return CLI_CACHE;
  }
  if (!readonly && cli_refuse_pinned(cmd, path)) return CLI_CACHE;
  char why[1024] = "";
  int recovered = 0;
  /* Reading commands never create, convert or move a cache: a shipped file
   * stays byte for byte as it was. A file that is not there, or is empty,
   * holds nothing yet; one that cannot be reached is an error. */
  scree_status st = scree__admin_open(path, readonly != 0, out, &recovered, why, sizeof why);
  if (readonly && st == SCREE_ERROR_NOT_FOUND) {
    if ((!c->quiet && !c->json) || readonly == CLI_CACHE_NEEDED)
      fprintf(stderr, "scree-tune %s: %s\n", cmd, cli_esc(why));
    return CLI_OK;
  }
  if (st != SCREE_OK) {
    fprintf(stderr, "scree-tune %s: cannot open cache %s: %s\n", cmd, path, why);
    return st == SCREE_ERROR_INVALID_ARGUMENT ? CLI_USAGE : CLI_CACHE;
  }
  if (recovered) fprintf(stderr, "scree-tune %s: warning: %s\n", cmd, why);
  return CLI_OK;
}

int cli_cache_failed(scree__admin_cache *cache, scree_status st, const char *cmd) {
  if (st == SCREE_OK) return CLI_OK;
  char why[512];
  scree__admin_cache_error(cache, why, sizeof why);
  fprintf(stderr, "scree-tune %s: %s: %s\n", cmd, scree_status_name(st),
          why[0] ? cli_esc(why) : scree_status_str(st));
  return CLI_CACHE;
}

int cli_report_refused(scree__admin_cache *cache, const char *cmd) {
  char why[512];
  const int n = scree__admin_refused(cache, why, sizeof why);
  if (n)
    fprintf(stderr, "scree-tune %s: warning: skipped %d row(s) of %s that failed their checks"
                    " (first: %s)\n", cmd, n, scree__admin_path(cache), cli_esc(why));
  return n;
}

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

void cli_json_str(FILE *f, const char *s) { scree__admin_json_string(f, s ? s : ""); }

void cli_json_version(FILE *f, int v) {
  if (v > 0)
    fprintf(f, "\"%d.%d\"", v / 1000, (v % 1000) / 10);
  else
    fputs("null", f);
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
  return scree__admin_escape(b, sizeof bufs[0], s ? s : "");
}

void cli_rate(char *buf, size_t size, double flops, double bytes, double us) {
  if (us <= 0)
    snprintf(buf, size, "-");
  else if (flops > 0)
    snprintf(buf, size, "%.1f TFLOP/s", flops / (us * 1e-6) / 1e12);
  else
    snprintf(buf, size, "%.0f GB/s", bytes / (us * 1e-6) / 1e9);
}

/* ---- tables ------------------------------------------------------------------ */

void cli_table_init(cli_table *t, int ncols, const char *const *heads, const char *align) {
  *t = (cli_table){.ncols = ncols, .heads = heads, .align = align};
}

int cli_table_add(cli_table *t, const char *const *cells) {
  if (t->nrows == t->cap) {
    const int cap = t->cap ? t->cap * 2 : 16;
    char **c = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *c);
    if (!c) return -1;
    t->cells = c;
    t->cap = cap;
  }
  char **row = t->cells + (size_t)t->nrows * (size_t)t->ncols;
  for (int i = 0; i < t->ncols; i++) {
    row[i] = strdup(cells[i] ? cells[i] : "");
    if (!row[i]) {
      while (i--) free(row[i]);
      return -1;
    }
  }
  t->nrows++;
  return 0;
}

/* The width of a cell on a terminal: its UTF-8 characters (cells are
 * escaped text, so no controls). */
static int cell_width(const char *s) {
  int w = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) w += (*p & 0xc0) != 0x80;
  return w;
}

static void print_row(FILE *f, const cli_table *t, const char *const *cells, const int *width) {
  for (int i = 0; i < t->ncols; i++) {
    const int pad = width[i] - cell_width(cells[i]);
    const int last = i == t->ncols - 1;
    if (i) fputc(' ', f);
    if (t->align[i] == 'r') fprintf(f, "%*s", pad > 0 ? pad : 0, "");
    fputs(cells[i], f);
    if (t->align[i] != 'r' && !last) fprintf(f, "%*s", pad > 0 ? pad : 0, "");
  }
  fputc('\n', f);
}

void cli_table_print(cli_table *t, FILE *f) {
  if (t->nrows) {
    int width[16] = {0};
    for (int i = 0; i < t->ncols && i < 16; i++) width[i] = cell_width(t->heads[i]);
    for (int r = 0; r < t->nrows; r++)
      for (int i = 0; i < t->ncols && i < 16; i++) {
        const int w = cell_width(t->cells[(size_t)r * (size_t)t->ncols + (size_t)i]);
        if (w > width[i]) width[i] = w;
      }
    print_row(f, t, t->heads, width);
    for (int r = 0; r < t->nrows; r++)
      print_row(f, t, (const char *const *)(t->cells + (size_t)r * (size_t)t->ncols), width);
  }
  for (size_t i = 0; i < (size_t)t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
  free(t->cells);
  t->cells = NULL;
  t->nrows = t->cap = 0;
}

/* ---- demo -------------------------------------------------------------------- */

static const int64_t headline_lens[16] = {340, 618, 900, 886, 1136, 501, 2048, 840,
                                          550, 319, 389, 402, 1025, 771, 468, 888};

/* What the demo runs: an op, a shape in its own fields, a variant, and for
 * varlen ops the sequence lengths (the benchmark's headline batch). */
static scree__admin_demo_case demo_cases[] = {
    {"rmsnorm", "rows=16384,cols=4096", "x=fp16,w=fp16,y=fp16", NULL, 0},
    {"attention",
     "heads_q=16,heads_kv=16,head_dim=64,window_left=-1,window_right=-1",
     "dtype=fp16,head_dim=64,causal=1,window=0", headline_lens, 16},
};
#define NDEMO (int)(sizeof demo_cases / sizeof demo_cases[0])

/* Without a GPU: compile each case's default config for the archs scree
 * targets. */
static int demo_offline(int which, int json, const char *no_gpu) {
  static const char *const archs[2] = {"sm_80", "sm_90"};
  if (json) {
    cli_json_begin();
    printf(", \"device\": null, \"no_gpu\": ");
    cli_json_str(stdout, no_gpu);
    printf(", \"compiled\": [");
  } else {
    printf("no GPU here (%s)\n", no_gpu);
    printf("showing what runs without one: compiling the default kernels with NVRTC\n");
  }
  int rc = CLI_OK, first = 1;
  char why[4096];
  for (int d = 0; d < NDEMO && rc == CLI_OK; d++) {
    if (which >= 0 && which != d) continue;
    for (int i = 0; i < 2 && rc == CLI_OK; i++) {
      scree__admin_offline_compile r;
      const scree_status st = scree__admin_compile_default(&demo_cases[d], archs[i], &r, why,
                                                           sizeof why);
      if (st == SCREE_ERROR_NO_NVRTC) {
        if (!json) printf("NVRTC is not available either: %s\n", why);
        else fprintf(stderr, "scree-tune demo: NVRTC is not available either: %s\n", why);
        rc = CLI_FAIL;
      } else if (st) {
        if (!json) printf("compile of %s for %s failed: %s\n", demo_cases[d].op, r.target, why);
        else fprintf(stderr, "scree-tune demo: compile of %s for %s failed: %s\n",
                     demo_cases[d].op, r.target, why);
        rc = st == SCREE_ERROR_INVALID_ARGUMENT ? CLI_USAGE : CLI_FAIL;
      } else if (json) {
        printf("%s\n {\"op\": \"%s\", \"config\": ", first ? "" : ",", demo_cases[d].op);
        cli_json_str(stdout, r.config);
        printf(", \"variant\": ");
        cli_json_str(stdout, demo_cases[d].variant);
        printf(", \"target\": \"%s\", \"cubin_bytes\": %zu, \"ms\": %.0f}", r.target,
               r.cubin_size, r.ms);
        first = 0;
      } else {
        printf("compiled %s %s (%s) for %s with NVRTC: %zu-byte cubin in %.0f ms\n",
               demo_cases[d].op, r.config, demo_cases[d].variant, r.target, r.cubin_size, r.ms);
      }
    }
  }
  if (json) printf("\n]}\n");
  return rc;
}

/* One case's lines (or JSON object) from what scree__admin_demo gave. */
static void demo_report(const scree__admin_demo_case *dc, const scree__admin_demo_result *r,
                        scree_status st, double copy, int json, int first) {
  char rate[32];
  cli_rate(rate, sizeof rate, r->flops, r->bytes, r->us);
  const double gbps = r->us > 0 ? r->bytes / (r->us * 1e-6) / 1e9 : 0;
  if (json) {
    printf("%s\n {\"op\": \"%s\", \"variant\": ", first ? "" : ",", dc->op);
    cli_json_str(stdout, dc->variant);
    printf(", \"problem\": ");
    cli_json_str(stdout, r->desc);
    printf(", \"status\": \"%s\", \"first_ms\": ", scree_status_name(st));
    cli_json_num(stdout, "%.3f", r->stage >= 1 ? r->first_ms : NAN);
    printf(", \"config\": ");
    cli_json_str(stdout, r->config);
    printf(", \"check_problem\": ");
    cli_json_str(stdout, r->check_desc);
    printf(", \"checked_elements\": %zu, \"us\": ", r->stage >= 2 ? r->check_elems : 0);
    cli_json_num(stdout, "%.3f", r->stage >= 3 ? r->us : NAN);
    printf(", \"flops\": ");
    cli_json_num(stdout, "%.6g", r->flops);
    printf(", \"bytes\": ");
    cli_json_num(stdout, "%.6g", r->bytes);
    if (r->stage >= 3) {
      printf(r->flops > 0 ? ", \"tflops\": " : ", \"gbps\": ");
      cli_json_num(stdout, "%.2f", r->flops > 0 ? r->flops / (r->us * 1e-6) / 1e12 : gbps);
    }
    if (st) {
      printf(", \"error\": ");
      cli_json_str(stdout, r->why);
    }
    printf("}");
    return;
  }
  if (r->stage < 1) {
    fprintf(stderr, "scree-tune demo: %s\n", r->why);
    return;
  }
  printf("%s (%s) on %s\n", dc->op, dc->variant, r->desc);
  printf("  first call (tune or compile, load, run): %.1f ms\n", r->first_ms);
  if (r->stage < 2) {
    printf(st == SCREE_ERROR_WRONG_ANSWER ? "  WRONG: %s\n" : "  %s\n", r->why);
    return;
  }
  printf("  config %s, checked against the CPU reference: %zu output elements of %s within "
         "tolerance\n", r->config, r->check_elems, r->check_desc);
  if (r->stage < 3) {
    printf("  timing failed: %s\n", r->why);
    return;
  }
  printf("  %.2f us per call (median of 100), %s", r->us, rate);
  if (r->flops <= 0 && copy > 0)
    printf(" = %.0f%% of the %.0f GB/s device copy", 100 * gbps / copy, copy);
  printf("\n");
}

static int cmd_demo(int argc, char **argv) {
  static const struct option opts[] = {CLI_OPT_OP,
                                       {"shape", required_argument, NULL, OPT_SHAPE},
                                       {"variant", required_argument, NULL, OPT_VARIANT},
                                       CLI_OPT_JSON,
                                       CLI_OPT_END};
  cli_args a;
  cli_args_init(&a, "demo", argc, argv, opts, "");
  const char *op = NULL, *shape = NULL, *variant = NULL, *v;
  int json = 0, ch, npos;
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (ch == OPT_OP) op = v;
    if (ch == OPT_SHAPE) shape = v;
    if (ch == OPT_VARIANT) variant = v;
    if (ch == OPT_JSON) json = 1;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos) return cli_unexpected("demo", pos[0]);
  int which = -1;
  if (op) {
    for (int d = 0; d < NDEMO; d++)
      if (!strcmp(demo_cases[d].op, op)) which = d;
    if (which < 0 && strcmp(op, "all")) {
      fprintf(stderr, "scree-tune demo: --op must be one of:");
      for (int d = 0; d < NDEMO; d++) fprintf(stderr, " %s", demo_cases[d].op);
      fprintf(stderr, " all\n");
      return CLI_USAGE;
    }
  }
  if ((shape || variant) && which < 0) {
    fprintf(stderr, "scree-tune demo: --shape and --variant replace the case of the op --op "
                    "names (rmsnorm or attention)\n");
    return CLI_USAGE;
  }
  if (shape) {
    demo_cases[which].shape = shape;
    demo_cases[which].lens = NULL; /* the op generates a batch for the shape */
    demo_cases[which].nlens = 0;
  }
  if (variant) demo_cases[which].variant = variant;
  char why[1024];
  for (int d = 0; d < NDEMO; d++)
    if ((which < 0 || which == d) && scree__admin_demo_check(&demo_cases[d], why, sizeof why)) {
      fprintf(stderr, "scree-tune demo: %s\n", why);
      return CLI_USAGE;
    }
  scree_context *ctx = NULL;
  scree_status st = scree_create(NULL, &ctx, why, sizeof why);
  if (st != SCREE_OK) {
    char no_gpu[1100];
    snprintf(no_gpu, sizeof no_gpu, "%s: %s", scree_status_name(st), why);
    return demo_offline(which, json, no_gpu);
  }
  scree_device_info dev;
  scree_context_device(ctx, &dev);
  const double copy = scree__admin_copy_gbps(ctx);
  if (json) {
    cli_json_begin();
    printf(", \"device\": {\"name\": ");
    cli_json_str(stdout, dev.name);
    printf(", \"arch\": \"%s\", \"sm_count\": %d}, \"copy_gbps\": ", dev.arch, dev.sm_count);
    cli_json_num(stdout, "%.1f", copy);
    printf(", \"cases\": [");
  } else {
    printf("scree %s on %s (%s, %d SMs)\n", scree_version(), dev.name, dev.arch, dev.sm_count);
  }
  int rc = CLI_OK, first = 1;
  scree__admin_demo_result *r = malloc(sizeof *r);
  for (int d = 0; r && d < NDEMO; d++) {
    if (which >= 0 && which != d) continue;
    st = scree__admin_demo(ctx, &demo_cases[d], r);
    demo_report(&demo_cases[d], r, st, copy, json, first);
    fflush(stdout);
    first = 0;
    if (st) rc = CLI_FAIL;
  }
  if (!r) rc = CLI_FAIL;
  if (json) printf("\n]}\n");
  free(r);
  scree_destroy(ctx);
  return rc;
}

/* ---- --json failures ---------------------------------------------------------
 * A command given --json prints one JSON document. One that fails before
 * it starts its document (a usage error, a cache that is not there) gets
 * {"error": {...}} from main, with the first thing it said on stderr:
 * stderr goes through a stream that keeps that line as it writes. */

static char first_error[1024];
static size_t first_error_len;
static int first_error_done;

void cli_json_open(void) {
  json_opened = 1;
  fputc('{', stdout);
}

/* The stream behind stderr: writes through to fd 2, keeping the first
 * line that is not a warning. */
static ssize_t stderr_write(void *cookie, const char *buf, size_t n) {
  (void)cookie;
  for (size_t i = 0; i < n && !first_error_done; i++) {
    if (buf[i] == '\n') {
      first_error[first_error_len] = 0;
      if (strstr(first_error, ": warning: ")) first_error_len = 0;
      else if (first_error_len) first_error_done = 1;
    } else if (buf[i] != '\r' && first_error_len + 1 < sizeof first_error) {
      first_error[first_error_len++] = buf[i];
    }
  }
  for (size_t done = 0; done < n;) {
    const ssize_t w = write(2, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return done ? (ssize_t)done : -1;
    done += (size_t)w;
  }
  return (ssize_t)n;
}

static void keep_first_error(void) {
  static cookie_io_functions_t io = {.write = stderr_write};
  FILE *f = fopencookie(NULL, "w", io);
  if (!f) return; /* stderr as it was: the error object then has no message */
  setvbuf(f, NULL, _IONBF, 0);
  stderr = f;
}

static const char *exit_kind(int rc) {
  switch (rc) {
    case CLI_FAIL: return "failure";
    case CLI_USAGE: return "usage";
    case CLI_NO_GPU: return "no_gpu";
    case CLI_CACHE: return "cache";
    default: return "error";
  }
}

/* The error object of a --json command that failed without a document. */
static int json_error(const char *cmd, int rc) {
  if (!json_wanted || json_opened || rc == CLI_OK) return rc;
  first_error[first_error_len < sizeof first_error ? first_error_len : 0] = 0;
  printf("{\"error\": {\"command\": ");
  cli_json_str(stdout, cmd);
  printf(", \"exit_code\": %d, \"kind\": \"%s\", \"message\": ", rc, exit_kind(rc));
  cli_json_str(stdout, first_error);
  printf("}}\n");
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
  static const struct option opts[] = {{"device", required_argument, NULL, OPT_DEVICE},
                                       CLI_OPT_END};
  cli_args a;
  cli_args_init(&a, "worker", argc, argv, opts, "");
  long device = 0;
  int ch, npos;
  const char *v;
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_parse_int("worker", "device", v, 0, 1024, &device)) return CLI_USAGE;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos) return cli_unexpected("worker", pos[0]);
  scree_options o;
  scree_options_init(&o);
  o.device = (int)device;
  o.disable_cache = 1;   /* the caller records and stores */
  o.nvrtc_optional = 1;  /* it runs the caller's cubins */
  scree_context *ctx;
  char why[512];
  const scree_status st = scree_create(&o, &ctx, why, sizeof why);
  if (st) {
    fprintf(stderr, "scree-tune worker: %s: %s\n", scree_status_name(st), why);
    return st == SCREE_ERROR_NO_DEVICE || st == SCREE_ERROR_NO_DRIVER ? CLI_NO_GPU : CLI_FAIL;
  }
  const int rc = scree__admin_worker(ctx, 0, 1);
  if (rc == 3) _exit(3); /* a broken context: leave it to the driver */
  scree_destroy(ctx);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    usage(stdout);
    return finish_stdout(CLI_OK);
  }
  if (!strcmp(argv[1], "--version")) {
    printf("scree-tune %s\n", scree_version());
    return finish_stdout(CLI_OK);
  }
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(argv[1], commands[i].name)) continue;
    if (wants_help(argc - 1, argv + 1)) {
      fputs(*commands[i].usage, stdout);
      return finish_stdout(CLI_OK);
    }
    keep_first_error();
    return finish_stdout(json_error(commands[i].name, commands[i].run(argc - 1, argv + 1)));
  }
  fprintf(stderr, "scree-tune: unknown command '%s'\n\n", cli_esc(argv[1]));
  usage(stderr);
  return CLI_USAGE;
}
