/* cli_tune.c - scree-tune prewarm and verify: the commands that need a GPU. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

const char *const usage_prewarm =
    "usage: scree-tune prewarm [what] [options]\n\n"
    "Tunes shapes on this GPU now and stores the winners (with their cubins)\n"
    "in the user cache, so later processes start warm.\n\n"
    "what (any combination):\n"
    "  --op OP --shape S     one call shape of OP in its own fields, as misses\n"
    "                        record them (repeatable), e.g. --op rmsnorm\n"
    "                        --shape rows=16000,cols=4096, or --op attention\n"
    "                        --shape batch=16,total_q=12081,total_k=12081,\n"
    "                        max_seqlen_q=2048,max_seqlen_k=2048,heads_q=16,\n"
    "                        heads_kv=16,head_dim=64\n"
    "  --variant V           the variant of --shape calls in the op's form\n"
    "                        (dtype=bf16,head_dim=128,causal=1,window=0); default:\n"
    "                        every dtype field at --dtype, the rest from the shape\n"
    "                        or the op's example\n"
    "  --op rmsnorm --cols N[,N..] (--rows N[,N..] | --rows-max N)\n"
    "                        RMSNorm shorthand; --rows-max tunes every\n"
    "                        power-of-two row bucket from 1 to N\n"
    "  --shapes FILE         a JSON file {\"shapes\": [[rows, cols], ...],\n"
    "                        \"dtypes\": [\"fp16\", ...]} (bench/rowwise_shapes.json)\n"
    "  --model NAME          a preset: llama-3-8b, llama-3-70b, mistral-7b,\n"
    "                        qwen2.5-7b, gpt2: every op of the model's block for\n"
    "                        batches of 1..16384 tokens (RMSNorm and fused\n"
    "                        residual RMSNorm over the hidden size, or LayerNorm\n"
    "                        for gpt2; RoPE on its q/k heads; SwiGLU over the\n"
    "                        intermediate size; cross-entropy over the vocabulary)\n"
    "                        and causal attention with the model's heads for\n"
    "                        sequences up to 1k, 4k and 8k in batches of 16k\n"
    "                        and 64k tokens\n"
    "  --from-misses         every miss recorded in the user cache for this\n"
    "                        GPU's arch (each is removed once tuned)\n\n"
    "options:\n"
    "  --dtype fp16|bf16|fp32[,..]  dtypes for --op/--model (default bf16)\n"
    "  --explore             time the whole config space, not only the safelist\n"
    "  --force               retune buckets the user cache already holds\n"
    "  --reps N              timed launches per candidate (default 25)\n"
    "  --cache PATH          the user cache (default $SCREE_CACHE_DIR/tune.db,\n"
    "                        $XDG_CACHE_HOME/scree/tune.db or ~/.cache/scree/tune.db)\n"
    "  --device N            GPU ordinal (default 0)\n"
    "  --quiet, --json\n\n"
    "exit codes: 0 all tuned, 1 some bucket found no correct config,\n"
    "2 usage, 3 no GPU or NVRTC, 4 cache error\n";

const char *const usage_verify =
    "usage: scree-tune verify [--retime | --shipped] [--cache PATH] [--arch A] [--op OP]\n"
    "                         [--device N] [--quiet] [--json]\n\n"
    "Re-checks every cached winner for this GPU's architecture: loads its\n"
    "cubin (hash-checked) and compares its output with the CPU reference on\n"
    "random inputs. With --retime it also times each one and flags entries\n"
    "now slower than recorded (by more than 10% or 3x the recorded spread).\n"
    "Entries for another kernel source (stale) are reported, not run.\n"
    "--shipped checks the shipped tuned configs (caches/, SCREE_TUNED_CONFIGS)\n"
    "instead, without a GPU: each line, and whether its kernel source is\n"
    "this build's (stale ones are ignored at run time).\n\n"
    "exit codes: 0 all correct, 1 some entry wrong or not loadable,\n"
    "2 usage, 3 no GPU, 4 cache error\n";

typedef struct task {
  const scree__op *op;
  scree__variant var;
  scree__bucket bucket;
  int from_miss;
  scree__ckey miss_key;
} task;

typedef struct tasks {
  task *t;
  int n, cap;
} tasks;

/* Adds a task unless it is there already; returns its index, or -1 when
 * out of memory. */
static int add_task(tasks *ts, const scree__op *op, const scree__variant *var,
                    const scree__bucket *bucket) {
  for (int i = 0; i < ts->n; i++)
    if (ts->t[i].op == op && !memcmp(&ts->t[i].bucket, bucket, sizeof *bucket) &&
        !memcmp(&ts->t[i].var, var, sizeof *var))
      return i;
  if (ts->n == ts->cap) {
    int cap = ts->cap ? ts->cap * 2 : 64;
    task *t = realloc(ts->t, (size_t)cap * sizeof *t);
    if (!t) return -1;
    ts->t = t;
    ts->cap = cap;
  }
  memset(&ts->t[ts->n], 0, sizeof ts->t[ts->n]);
  ts->t[ts->n].op = op;
  ts->t[ts->n].var = *var;
  ts->t[ts->n].bucket = *bucket;
  return ts->n++;
}

/* The variant of a shape: vtext if given, else every dtype field at dt
 * and every other field from the shape field of the same name, or the op's
 * example value. */
static int shape_variant(const scree__op *op, const void *args, const char *vtext,
                         scree_dtype dt, scree__variant *var) {
  char why[512];
  if (vtext) {
    if (scree__variant_parse(op, vtext, var, why, sizeof why)) {
      fprintf(stderr, "scree-tune prewarm: --variant: %s\n", why);
      return -1;
    }
    return 0;
  }
  scree__variant_example(op, var);
  for (int i = 0; i < op->nvfields; i++) {
    if (op->vfields[i].is_dtype) {
      var->v[i] = dt;
      continue;
    }
    for (int f = 0; f < op->nshape; f++)
      if (!strcmp(op->shape[f].name, op->vfields[i].name)) {
        int64_t v;
        memcpy(&v, (const char *)args + op->shape[f].offset, sizeof v);
        var->v[i] = (int)v;
      }
  }
  return 0;
}

/* A task for one call shape ("rows=16000,cols=4096") of op. The op's own
 * checks vet the shape first (a context-free call of validate would need
 * buffers), so only shapes its problem builder accepts are tuned. */
static int add_shape(tasks *ts, const scree__op *op, const char *shape, const char *vtext,
                     scree_dtype dt) {
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  memset(args, 0, sizeof args);
  char why[512];
  if (scree__shape_parse(op, shape, args, why, sizeof why)) {
    fprintf(stderr, "scree-tune prewarm: --shape: %s\n", why);
    return -1;
  }
  scree__variant var;
  if (shape_variant(op, args, vtext, dt, &var)) return -1;
  scree__problem p;
  memset(&p, 0, sizeof p);
  const int bad = op->problem(args, &var, 1, 1, NULL, &p, why, sizeof why);
  scree__problem_free(&p);
  if (bad) {
    fprintf(stderr, "scree-tune prewarm: %s shape %s: %s\n", op->name, shape, why);
    return -1;
  }
  scree__bucket b;
  scree__bucket_of(op, &var, args, &b);
  return add_task(ts, op, &var, &b);
}

static void add_rmsnorm(tasks *ts, long rows, long cols, scree_dtype dt) {
  char shape[96];
  snprintf(shape, sizeof shape, "rows=%ld,cols=%ld", rows, cols);
  add_shape(ts, scree__op_find("rmsnorm"), shape, NULL, dt);
}

static int parse_list(const char *s, long *out, int cap) {
  int n = 0;
  while (*s && n < cap) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v < 1) return -1;
    out[n++] = v;
    if (*end == ',')
      end++;
    else if (*end)
      return -1;
    s = end;
  }
  return n;
}

static int parse_dtypes(const char *s, scree_dtype *out, int cap) {
  int n = 0;
  char buf[64];
  while (*s && n < cap) {
    size_t len = strcspn(s, ",");
    if (len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    if (cli_parse_dtype(buf, &out[n++])) return -1;
    s += len + (s[len] == ',');
  }
  return n;
}

typedef struct preset_ctx {
  tasks *ts;
  const scree__preset *p;
  scree_dtype dt;
} preset_ctx;

/* One call shape of a preset line (presets/models.txt); the op's problem
 * builder vets it, so a shape the op cannot serve names its line. */
static int on_preset_shape(void *user, const scree__preset_line *l, const char *shape,
                           const char *variant) {
  preset_ctx *pc = user;
  if (add_shape(pc->ts, l->op, shape, variant, pc->dt) < 0) {
    fprintf(stderr, "scree-tune prewarm: model %s: %s:%d\n", pc->p->name, pc->p->source,
            l->line);
    return 1;
  }
  return 0;
}

/* The tasks of --model NAME in each dtype, from the presets (the embedded
 * presets/ files, $SCREE_PRESETS, --presets FILE). */
static int add_model(tasks *ts, const char *model, const char *presets_file,
                     const scree_dtype *dts, int ndt) {
  scree__presets ps;
  char why[1024];
  if (scree__presets_load(presets_file, &ps, why, sizeof why)) {
    fprintf(stderr, "scree-tune prewarm: presets: %s\n", why);
    return -1;
  }
  const scree__preset *p = scree__preset_find(&ps, model);
  int rc = 0;
  if (!p) {
    fprintf(stderr, "scree-tune prewarm: unknown model %s; presets:\n", model);
    for (int k = 0; k < ps.n; k++)
      fprintf(stderr, "  %-18s %s\n", ps.p[k].name, ps.p[k].about);
    rc = -1;
  }
  for (int d = 0; p && !rc && d < ndt; d++) {
    preset_ctx pc = {ts, p, dts[d]};
    rc = scree__preset_expand(p, dts[d], on_preset_shape, &pc) ? -1 : 0;
  }
  scree__presets_free(&ps);
  return rc;
}

/* Reads {"shapes": [[r, c], ...], "dtypes": ["fp16", ...]}; bf16 if the
 * file names no dtypes. */
static int read_shapes_file(const char *path, tasks *ts) {
  char why[1024];
  char *text = scree__read_text(path, why, sizeof why);
  if (!text) {
    fprintf(stderr, "scree-tune prewarm: --shapes: cannot read %s\n", why);
    return -1;
  }
  long shapes[256][2];
  scree_dtype dts[3];
  int ndt = 0;
  const int n = scree__parse_shapes(text, shapes, 256, dts, 3, &ndt, why, sizeof why);
  free(text);
  if (n < 0 || n > 256) {
    fprintf(stderr, "scree-tune prewarm: %s: %s\n", path, n < 0 ? why : "more than 256 shapes");
    return -1;
  }
  if (!ndt) dts[ndt++] = SCREE_DTYPE_BF16;
  for (int i = 0; i < n; i++) {
    if (shapes[i][1] > 65536) {
      fprintf(stderr, "scree-tune prewarm: %s: shape %d has cols %ld > 65536\n", path, i + 1,
              shapes[i][1]);
      return -1;
    }
    for (int k = 0; k < ndt; k++) add_rmsnorm(ts, shapes[i][0], shapes[i][1], dts[k]);
  }
  return n;
}

typedef struct miss_ctx {
  tasks *ts;
  const char *arch;
  int bad;
} miss_ctx;

static int on_miss(void *user, const scree__cmiss *m) {
  miss_ctx *mc = user;
  const scree__op *op = scree__op_find(m->key.op);
  scree__variant var;
  scree__bucket bucket;
  if (!op || scree__variant_parse(op, m->key.dtype, &var, NULL, 0) ||
      scree__bucket_parse(op, m->key.bucket, &bucket, NULL, 0)) {
    fprintf(stderr, "scree-tune prewarm: skipping unreadable miss %s %s %s\n",
            cli_esc(m->key.op), cli_esc(m->key.bucket), cli_esc(m->key.dtype));
    mc->bad++;
    return 0;
  }
  const int i = add_task(mc->ts, op, &var, &bucket);
  if (i < 0) return 1;
  mc->ts->t[i].from_miss = 1;
  mc->ts->t[i].miss_key = m->key;
  return 0;
}

/* "op bucket variant": what a dry run prints for a task, and what shards
 * rank it by. */
static void task_id(const task *t, char *buf, size_t n) {
  char b[128], v[128];
  scree__bucket_str(t->op, &t->bucket, b, sizeof b);
  scree__variant_str(t->op, &t->var, v, sizeof v);
  snprintf(buf, n, "%s %s %s", t->op->name, b, v);
}

enum { ID_LEN = 320 };

/* Keeps this shard's tasks, in their order. 0, or -1 when out of memory. */
static int apply_shard(tasks *ts, const cli_shard *s) {
  if (!s->on || ts->n == 0) return 0;
  char *ids = malloc((size_t)ts->n * ID_LEN);
  const char **p = malloc((size_t)ts->n * sizeof *p);
  unsigned char *keep = malloc((size_t)ts->n);
  int rc = -1;
  if (ids && p && keep) {
    for (int i = 0; i < ts->n; i++) {
      task_id(&ts->t[i], ids + (size_t)i * ID_LEN, ID_LEN);
      p[i] = ids + (size_t)i * ID_LEN;
    }
    if (cli_shard_select(p, ts->n, s, keep) >= 0) {
      int m = 0;
      for (int i = 0; i < ts->n; i++)
        if (keep[i]) ts->t[m++] = ts->t[i];
      ts->n = m;
      rc = 0;
    }
  }
  free(ids);
  free(p);
  free(keep);
  return rc;
}

static int make_context(const cli_common *c, int device, scree_context **ctx,
                        const char *cmd) {
  scree_options o;
  scree_options_init(&o);
  o.device = device;
  o.cache_path = c->cache;
  o.miss_policy = SCREE_MISS_DEFAULT;
  if (c->quiet) o.log_level = SCREE_LOG_ERROR;
  char why[1024];
  scree_status st = scree_create(&o, ctx, why, sizeof why);
  if (st == SCREE_OK) return CLI_OK;
  fprintf(stderr, "scree-tune %s: %s: %s\n", cmd, scree_status_str(st), why);
  return st == SCREE_ERROR_NO_DEVICE || st == SCREE_ERROR_NO_DRIVER ||
                 st == SCREE_ERROR_NO_NVRTC
             ? CLI_NO_GPU
             : CLI_FAIL;
}

/* prewarm --dry-run: the buckets this task would tune, one "op bucket
 * variant" line each, without a GPU. Misses are those of the user cache
 * for --arch (every arch without it). */
static int dry_run_list(const cli_common *c, tasks *ts, int from_misses, const cli_shard *s) {
  if (from_misses) {
    scree__cache *user = NULL;
    int rc = cli_open_user_cache(c, &user, "prewarm", 1);
    if (rc) return rc;
    if (user) {
      miss_ctx mc = {.ts = ts, .arch = c->arch};
      const scree_status st = scree__cache_foreach_miss(user, c->arch, c->op, on_miss, &mc);
      rc = cli_cache_failed(user, st, "prewarm");
      scree__cache_close(user);
      if (rc) return rc;
    }
  }
  const int all = ts->n;
  if (apply_shard(ts, s)) {
    fprintf(stderr, "scree-tune prewarm: out of memory\n");
    return CLI_FAIL;
  }
  char id[ID_LEN];
  for (int i = 0; i < ts->n; i++) {
    task_id(&ts->t[i], id, sizeof id);
    printf("%s\n", id);
  }
  if (!c->quiet) {
    if (s->on)
      fprintf(stderr, "scree-tune prewarm: dry run: shard %d/%d (%s): %d of %d bucket(s)\n",
              s->k, s->n, s->source, ts->n, all);
    else
      fprintf(stderr, "scree-tune prewarm: dry run: %d bucket(s)\n", ts->n);
  }
  return CLI_OK;
}

static int prewarm(int argc, char **argv, tasks *tsp) {
  cli_common c = {0};
  long rows[64], cols[64], rows_max = 0;
  int nrows = 0, ncols = 0, ndt = 0, explore = 0, force = 0, reps = 25, device = 0;
  int from_misses = 0, have_op = 0, dry_run = 0, from_shipped = 0;
  const char *shard_spec = NULL, *shard_count = NULL;
  cli_shard shard = {0};
  scree_dtype dts[3];
  const char *shapes = NULL, *model = NULL, *variant = NULL, *presets_file = NULL;
  const char *shape_list[64];
  int nshape = 0;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_opt(&c, argc, argv, &i, "prewarm");
    if (r < 0) return CLI_USAGE;
    if (r) continue;
    const char *v;
    if ((v = cli_value(argc, argv, &i, "--rows", "prewarm"))) {
      if ((nrows = parse_list(v, rows, 64)) <= 0) return cli_unknown("prewarm", v);
    } else if ((v = cli_value(argc, argv, &i, "--cols", "prewarm"))) {
      if ((ncols = parse_list(v, cols, 64)) <= 0) return cli_unknown("prewarm", v);
    } else if ((v = cli_value(argc, argv, &i, "--rows-max", "prewarm"))) {
      rows_max = atol(v);
      if (rows_max < 1 || rows_max > (1L << 40)) {
        fprintf(stderr, "scree-tune prewarm: --rows-max must be in [1, 2^40]\n");
        return CLI_USAGE;
      }
    } else if ((v = cli_value(argc, argv, &i, "--dtype", "prewarm"))) {
      if ((ndt = parse_dtypes(v, dts, 3)) <= 0) return cli_unknown("prewarm", v);
    } else if ((v = cli_value(argc, argv, &i, "--shape", "prewarm"))) {
      if (nshape == 64) {
        fprintf(stderr, "scree-tune prewarm: at most 64 --shape options\n");
        return CLI_USAGE;
      }
      shape_list[nshape++] = v;
    } else if ((v = cli_value(argc, argv, &i, "--variant", "prewarm"))) {
      variant = v;
    } else if ((v = cli_value(argc, argv, &i, "--shapes", "prewarm"))) {
      shapes = v;
    } else if ((v = cli_value(argc, argv, &i, "--model", "prewarm"))) {
      model = v;
    } else if ((v = cli_value(argc, argv, &i, "--presets", "prewarm"))) {
      presets_file = v;
    } else if ((v = cli_value(argc, argv, &i, "--reps", "prewarm"))) {
      reps = atoi(v);
    } else if ((v = cli_value(argc, argv, &i, "--device", "prewarm"))) {
      device = atoi(v);
    } else if ((v = cli_value(argc, argv, &i, "--shard", "prewarm"))) {
      shard_spec = v;
    } else if ((v = cli_value(argc, argv, &i, "--shard-count", "prewarm"))) {
      shard_count = v;
    } else if (!strcmp(argv[i], "--dry-run")) {
      dry_run = 1;
    } else if (!strcmp(argv[i], "--from-shipped")) {
      from_shipped = 1;
    } else if (!strcmp(argv[i], "--explore")) {
      explore = 1;
    } else if (!strcmp(argv[i], "--force")) {
      force = 1;
    } else if (!strcmp(argv[i], "--from-misses")) {
      from_misses = 1;
    } else if (!strcmp(argv[i], "--rows") || !strcmp(argv[i], "--cols") ||
               !strcmp(argv[i], "--dtype") || !strcmp(argv[i], "--shapes") ||
               !strcmp(argv[i], "--model") || !strcmp(argv[i], "--reps") ||
               !strcmp(argv[i], "--rows-max") || !strcmp(argv[i], "--device") ||
               !strcmp(argv[i], "--shape") || !strcmp(argv[i], "--variant") ||
               !strcmp(argv[i], "--shard") || !strcmp(argv[i], "--shard-count") ||
               !strcmp(argv[i], "--presets")) {
      return CLI_USAGE; /* cli_value printed the missing value */
    } else {
      return cli_unknown("prewarm", argv[i]);
    }
  }
  if (shard_count && (!shard_spec || strcmp(shard_spec, "auto"))) {
    fprintf(stderr, "scree-tune prewarm: --shard-count goes with --shard auto (an Indexed "
                    "Job's completions)\n");
    return CLI_USAGE;
  }
  if (shard_spec && cli_shard_parse(shard_spec, shard_count, &shard)) return CLI_USAGE;
  if (from_shipped) {
    if (nshape || ncols || nrows || rows_max || shapes || model || from_misses || shard_spec ||
        dry_run) {
      fprintf(stderr, "scree-tune prewarm: --from-shipped compiles the shipped tuned configs "
                      "alone (with --arch, --op, --force)\n");
      return CLI_USAGE;
    }
    return cli_prewarm_from_shipped(&c, force);
  }
  if (c.op && !scree__op_find(c.op)) {
    fprintf(stderr, "scree-tune prewarm: unknown op %s\n", c.op);
    return CLI_USAGE;
  }
  /* --op names the op of --shape (and, for rmsnorm, --cols/--rows) shapes;
   * with --from-misses alone it filters the misses. */
  if ((nshape || variant) && !c.op) {
    fprintf(stderr, "scree-tune prewarm: --shape and --variant need --op\n");
    return CLI_USAGE;
  }
  if (c.op && (ncols || nrows || rows_max)) {
    if (strcmp(c.op, "rmsnorm")) {
      fprintf(stderr, "scree-tune prewarm: --op %s: --cols/--rows are RMSNorm's; use --shape\n",
              c.op);
      return CLI_USAGE;
    }
    have_op = 1;
  } else if (c.op && !nshape && !from_misses) {
    fprintf(stderr, "scree-tune prewarm: --op %s needs --shape (or, for rmsnorm, --cols and "
                    "--rows or --rows-max)\n", c.op);
    return CLI_USAGE;
  }
  if (!ndt) dts[ndt++] = SCREE_DTYPE_BF16;
  for (int k = 0; k < nshape; k++)
    for (int d = 0; d < (variant ? 1 : ndt); d++)
      if (add_shape(tsp, scree__op_find(c.op), shape_list[k], variant, dts[d]) < 0)
        return CLI_USAGE;
  if (have_op || ncols || nrows || rows_max) {
    if (!ncols || (!nrows && !rows_max)) {
      fprintf(stderr, "scree-tune prewarm: give --cols and --rows or --rows-max\n");
      return CLI_USAGE;
    }
    for (int k = 0; k < ncols; k++) {
      if (cols[k] > 65536) {
        fprintf(stderr, "scree-tune prewarm: --cols %ld exceeds 65536\n", cols[k]);
        return CLI_USAGE;
      }
      for (int d = 0; d < ndt; d++) {
        for (int r = 0; r < nrows; r++) add_rmsnorm(tsp, rows[r], cols[k], dts[d]);
        for (long r = 1; rows_max && r <= rows_max; r *= 2) add_rmsnorm(tsp, r, cols[k], dts[d]);
      }
    }
  }
  if (model && add_model(tsp, model, presets_file, dts, ndt)) return CLI_USAGE;
  if (shapes && read_shapes_file(shapes, tsp) < 0) return CLI_USAGE;
  if (!from_misses && tsp->n == 0) {
    fprintf(stderr, "scree-tune prewarm: nothing to tune: give --op/--cols/--rows, "
                    "--shapes, --model or --from-misses (see --help)\n");
    return CLI_USAGE;
  }

  if (dry_run) return dry_run_list(&c, tsp, from_misses, &shard);

  scree_context *ctx = NULL;
  int rc = make_context(&c, device, &ctx, "prewarm");
  if (rc) return rc;
  scree__cache *user = scree__user_cache(ctx);
  if (!user) {
    fprintf(stderr, "scree-tune prewarm: the user cache could not be opened; "
                    "nothing would be kept (see SCREE_LOG_LEVEL=warn)\n");
    scree_destroy(ctx);
    return CLI_CACHE;
  }
  scree_device_info dev;
  scree_context_device(ctx, &dev);
  if (from_misses) {
    miss_ctx mc = {.ts = tsp, .arch = dev.arch};
    const int before = tsp->n;
    const scree_status mst = scree__cache_foreach_miss(user, dev.arch, c.op, on_miss, &mc);
    if (mst) {
      rc = cli_cache_failed(user, mst, "prewarm");
      scree_destroy(ctx);
      return rc;
    }
    if (!c.quiet && !c.json)
      printf("%d recorded miss(es) for %s\n", tsp->n - before, dev.arch);
  }
  if (apply_shard(tsp, &shard)) {
    fprintf(stderr, "scree-tune prewarm: out of memory\n");
    scree_destroy(ctx);
    return CLI_FAIL;
  }
  if (shard.on && !c.quiet && !c.json)
    printf("shard %d/%d (%s): %d bucket(s)\n", shard.k, shard.n, shard.source, tsp->n);
  if (c.json) printf("{\"device\": "), cli_json_str(stdout, dev.name),
      printf(", \"arch\": \"%s\", \"results\": [", dev.arch);
  else if (!c.quiet)
    printf("%-9s %-24s %-20s %-32s %9s %12s %9s %6s %5s %6s\n", "op", "bucket", "dtype",
           "winner", "us", "rate", "default", "gain", "cand", "s");
  int failures = 0, first = 1;
  const double t0 = cli_now();
  for (int i = 0; i < tsp->n; i++) {
    task *t = &tsp->t[i];
    scree__ckey key;
    scree__make_key(ctx, t->op, &t->var, &t->bucket, &key);
    scree__centry e;
    if (!force && scree__cache_get(user, &key, &e) == SCREE_OK) {
      const int ok = e.cubin_ok;
      if (ok && !c.quiet && !c.json)
        printf("%-9s %-24s %-20s %-32s %9.2f %12s %9s %6s %5s %6s\n", key.op, key.bucket,
               key.dtype, cli_esc(e.config), e.median_us, "", "cached", "", "", "");
      scree__centry_free(&e);
      if (ok) {
        if (t->from_miss) scree__cache_delete_miss(user, &t->miss_key);
        continue;
      }
    }
    scree__tune_opts o;
    scree__tune_opts_init(&o);
    o.explore = explore;
    o.reps = reps;
    /* Another prewarm (or a process tuning on a miss) may tune the bucket
     * meanwhile: then its row is taken, unless --force. */
    o.reuse_cached = !force;
    cli_progress prog;
    char label[160];
    snprintf(label, sizeof label, "%s %s", key.bucket, key.dtype);
    cli_progress_init(&prog, c.quiet || c.json, label);
    o.progress = cli_progress_update;
    o.user = &prog;
    scree__tune_result res;
    scree_status st = scree__tune(ctx, t->op, &t->var, &t->bucket, &o, &res);
    char rate[32] = "";
    if (st == SCREE_OK) cli_rate(rate, sizeof rate, res.flops, res.bytes, res.median_us);
    cli_progress_done(&prog);
    char cs[128] = "";
    if (st == SCREE_OK) scree__config_str(t->op, &res.cfg, cs, sizeof cs);
    if (c.json) {
      printf("%s\n {\"op\": \"%s\", \"bucket\": ", first ? "" : ",", key.op);
      cli_json_str(stdout, key.bucket);
      printf(", \"dtype\": ");
      cli_json_str(stdout, key.dtype);
      printf(", \"status\": \"%s\", \"config\": ", scree_status_name(st));
      cli_json_str(stdout, cs);
      printf(", \"median_us\": ");
      cli_json_num(stdout, "%.3f", res.median_us);
      printf(", \"spread_us\": ");
      cli_json_num(stdout, "%.3f", res.spread_us);
      printf(", \"default_us\": ");
      cli_json_num(stdout, "%.3f", res.default_us);
      printf(", \"candidates\": %d, \"timed\": %d, \"failed\": %d, \"known_bad\": %d, "
             "\"seconds\": ", res.candidates, res.timed, res.failed, res.known_bad);
      cli_json_num(stdout, "%.3f", res.seconds);
      printf(", \"flops\": ");
      cli_json_num(stdout, "%.6g", res.flops);
      printf(", \"bytes\": ");
      cli_json_num(stdout, "%.6g", res.bytes);
      printf(", \"problem\": ");
      cli_json_str(stdout, res.problem);
      printf("}");
      first = 0;
    } else if (st != SCREE_OK) {
      printf("%-9s %-24s %-20s FAILED: %s\n", key.op, key.bucket, key.dtype,
             cli_esc(scree_last_error(ctx)));
    } else if (!c.quiet) {
      printf("%-9s %-24s %-20s %-32s %9.2f %12s %9.2f %5.2fx %5d %6.2f\n", key.op, key.bucket,
             key.dtype, cs, res.median_us, rate, res.default_us,
             res.default_us > 0 ? res.default_us / res.median_us : 0, res.candidates,
             res.seconds);
    }
    if (st != SCREE_OK) {
      failures++;
      if (st == SCREE_ERROR_CUDA) break; /* the CUDA context is gone */
    } else if (t->from_miss) {
      scree__cache_delete_miss(user, &t->miss_key);
    }
  }
  const int skipped = cli_report_refused(user, "prewarm");
  if (c.json)
    printf("\n], \"seconds\": %.3f, \"failures\": %d, \"skipped\": %d}\n", cli_now() - t0,
           failures, skipped);
  else if (!c.quiet)
    printf("%d bucket(s) in %.1f s, %d failed; cache %s\n", tsp->n, cli_now() - t0, failures,
           scree__cache_path(user));
  scree_destroy(ctx);
  return failures ? CLI_FAIL : CLI_OK;
}

int cmd_prewarm(int argc, char **argv) {
  tasks ts = {0};
  const int rc = prewarm(argc, argv, &ts); /* every path leaves ts to us */
  free(ts.t);
  return rc;
}

/* ---- verify ------------------------------------------------------------ */

typedef struct vctx {
  scree_context *ctx;
  const cli_common *c;
  int retime, checked, wrong, slower, stale, other_arch, first;
} vctx;

static int on_entry(void *user, const scree__centry *e) {
  vctx *v = user;
  scree_context *ctx = v->ctx;
  scree_device_info dev;
  scree_context_device(ctx, &dev);
  if (strcmp(e->key.arch, dev.arch)) {
    v->other_arch++;
    return 0;
  }
  const scree__op *op = scree__op_find(e->key.op);
  scree__variant var;
  scree__bucket bucket;
  scree__config cfg;
  char why[256];
  const char *verdict = NULL;
  double now_us = 0, sp = 0;
  if (!op) {
    verdict = "unknown op";
  } else if (strcmp(e->key.src_hash, scree__source_hash(op))) {
    verdict = "stale";
    v->stale++;
  } else if (scree__variant_parse(op, e->key.dtype, &var, NULL, 0) ||
             scree__bucket_parse(op, e->key.bucket, &bucket, NULL, 0) ||
             scree__config_parse(op, e->config, &cfg, why, sizeof why)) {
    verdict = "unreadable";
    v->wrong++;
  } else if (!e->cubin_ok) {
    verdict = "cubin hash mismatch";
    v->wrong++;
  } else {
    scree_status st = scree__verify_config(ctx, op, &var, &bucket, &cfg, e->cubin,
                                           v->retime ? &now_us : NULL, &sp);
    v->checked++;
    if (st) {
      verdict = st == SCREE_ERROR_WRONG_ANSWER ? "WRONG" : scree_status_name(st);
      v->wrong++;
    } else if (v->retime) {
      const double band = fmax(0.10 * e->median_us, 3 * e->spread_us);
      if (now_us > e->median_us + band) {
        verdict = "slower";
        v->slower++;
      } else {
        verdict = "ok";
      }
    } else {
      verdict = "ok";
    }
  }
  if (v->c->json) {
    printf("%s\n {\"op\": ", v->first ? "" : ",");
    cli_json_str(stdout, e->key.op);
    printf(", \"bucket\": ");
    cli_json_str(stdout, e->key.bucket);
    printf(", \"dtype\": ");
    cli_json_str(stdout, e->key.dtype);
    printf(", \"config\": ");
    cli_json_str(stdout, e->config);
    printf(", \"verdict\": ");
    cli_json_str(stdout, verdict);
    printf(", \"recorded_us\": ");
    cli_json_num(stdout, "%.3f", e->median_us);
    printf(", \"now_us\": ");
    cli_json_num(stdout, "%.3f", now_us);
    if (!strcmp(verdict, "WRONG")) {
      printf(", \"detail\": ");
      cli_json_str(stdout, scree_last_error(ctx));
    }
    printf("}");
    v->first = 0;
  } else if (!v->c->quiet || strcmp(verdict, "ok")) {
    printf("%-8s %-24s %-20s %-32s %-8s", cli_esc(e->key.op), cli_esc(e->key.bucket),
           cli_esc(e->key.dtype), cli_esc(e->config), verdict);
    if (v->retime && now_us > 0) printf(" recorded %.2f us, now %.2f us", e->median_us, now_us);
    if (!strcmp(verdict, "WRONG")) printf(" (%s)", cli_esc(scree_last_error(ctx)));
    printf("\n");
  }
  return 0;
}

int cmd_verify(int argc, char **argv) {
  cli_common c = {0};
  int retime = 0, device = 0, shipped = 0;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_opt(&c, argc, argv, &i, "verify");
    if (r < 0) return CLI_USAGE;
    if (r) continue;
    const char *v;
    if (!strcmp(argv[i], "--retime"))
      retime = 1;
    else if (!strcmp(argv[i], "--shipped"))
      shipped = 1;
    else if ((v = cli_value(argc, argv, &i, "--device", "verify")))
      device = atoi(v);
    else
      return cli_unknown("verify", argv[i]);
  }
  /* The shipped tuned configs need no GPU: stale ones are listed. */
  if (shipped) return cli_shipped_report(&c, 1);
  scree__cache *cache = NULL;
  int rc = cli_open_user_cache(&c, &cache, "verify", 1);
  if (rc) return rc;
  if (!cache) return CLI_OK; /* nothing cached: nothing to verify */
  scree_context *ctx = NULL;
  if ((rc = make_context(&c, device, &ctx, "verify"))) {
    scree__cache_close(cache);
    return rc;
  }
  vctx v = {.ctx = ctx, .c = &c, .retime = retime, .first = 1};
  scree_device_info dev;
  scree_context_device(ctx, &dev);
  if (c.json) printf("{\"arch\": \"%s\", \"entries\": [", dev.arch);
  scree_status st = scree__cache_foreach_entry(cache, c.arch, c.op, 1, on_entry, &v);
  const int skipped = cli_report_refused(cache, "verify");
  if (c.json)
    printf("\n], \"checked\": %d, \"wrong\": %d, \"slower\": %d, \"stale\": %d, "
           "\"other_arch\": %d, \"skipped\": %d}\n", v.checked, v.wrong, v.slower, v.stale,
           v.other_arch, skipped);
  else
    printf("%d checked on %s: %d wrong, %d slower than recorded, %d stale, %d for other archs\n",
           v.checked, dev.arch, v.wrong, v.slower, v.stale, v.other_arch);
  if (!c.json) cli_shipped_report(&c, 0);
  scree_destroy(ctx);
  rc = cli_cache_failed(cache, st, "verify");
  scree__cache_close(cache);
  if (rc) return rc;
  return v.wrong || skipped ? CLI_FAIL : CLI_OK;
}
