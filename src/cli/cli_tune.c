/* cli_tune.c - scree-tune prewarm and verify: the commands that need a GPU. */
#include <errno.h>
#include <pthread.h>
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
    "  --model NAME          a model preset (presets/models.txt): llama-3-8b,\n"
    "                        llama-3-70b, mistral-7b, qwen2.5-7b, deepseek-moe-16b,\n"
    "                        gpt2: every op of the model's layers for prefill\n"
    "                        batches of 1..16384 tokens, and causal attention for\n"
    "                        sequences up to 1k, 4k and 8k in batches of 16k and\n"
    "                        64k tokens\n"
    "  --presets FILE        more presets, in the same form (also SCREE_PRESETS=\n"
    "                        FILE[:FILE..]); a model of the same name replaces one\n"
    "  --from-misses         every miss recorded in the user cache for this\n"
    "                        GPU's arch (each is removed once tuned)\n"
    "  --from-shipped        compile the shipped tuned configs (caches/, or\n"
    "                        SCREE_TUNED_CONFIGS) for --arch (default: this GPU's,\n"
    "                        else every arch) into the user cache, with NVRTC\n"
    "                        alone: nothing is timed and no GPU is needed\n\n"
    "a cluster (docs/cluster.md):\n"
    "  --devices all|N,N..   one tuning worker per GPU; GPUs of one model share the\n"
    "                        buckets, each model tunes all of them\n"
    "  --shard K/N | auto    this task's share (K of 0..N-1) of the buckets; auto\n"
    "                        reads SLURM_ARRAY_TASK_ID/_MIN/_STEP/_COUNT or\n"
    "                        JOB_COMPLETION_INDEX with --shard-count N (or\n"
    "                        SCREE_SHARD_COUNT)\n"
    "  --dry-run             print the buckets (op bucket variant shape) and stop:\n"
    "                        no GPU\n\n"
    "options:\n"
    "  --dtype fp16|bf16|fp32[,..]  dtypes for --op/--model (default bf16)\n"
    "  --explore             time the whole config space, not only the safelist\n"
    "  --force               retune buckets the user cache already holds\n"
    "  --reps N              timed launches per candidate (default 25)\n"
    "  --cache PATH          the user cache (default $SCREE_CACHE_DIR/tune.db,\n"
    "                        $XDG_CACHE_HOME/scree/tune.db or ~/.cache/scree/tune.db)\n"
    "  --device N            GPU ordinal (default 0; see --devices)\n"
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
  char shape[256]; /* the first call shape that gave the bucket ("" for a miss without one) */
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
    const scree__arg *f = scree__shape_field(op, op->vfields[i].name);
    if (f) {
      int64_t v;
      memcpy(&v, (const char *)args + f->offset, sizeof v);
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
  const int i = add_task(ts, op, &var, &b);
  if (i >= 0 && !ts->t[i].shape[0]) snprintf(ts->t[i].shape, sizeof ts->t[i].shape, "%s", shape);
  return i;
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
  if (!mc->ts->t[i].shape[0])
    snprintf(mc->ts->t[i].shape, sizeof mc->ts->t[i].shape, "%s", m->example);
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

/* ---- running a prewarm on one GPU or several ------------------------------ */

/* One GPU of a prewarm: its context (and so its tuning worker process). */
typedef struct gpu {
  int ordinal, group, alive, tuned, failed;
  double busy_s;
  scree_context *ctx;
  scree_device_info dev;
  pthread_t thread;
  struct prun *r;
} gpu;

/* A bucket to tune again on another GPU of its group. */
typedef struct retry {
  int task, group, exclude;
} retry;

/* The state the GPUs of a prewarm share, under lock. */
typedef struct prun {
  const cli_common *c;
  tasks *ts;
  int explore, force, reps, multi;
  gpu *g;
  int ng, ngroups;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int next[CLI_MAX_DEVICES]; /* per group: the next task of its queue */
  int live[CLI_MAX_DEVICES]; /* per group: GPUs still taking work */
  retry *rq;
  int nrq;
  int failures, first, done, total;
  double t0;
  cli_progress bar; /* --devices: one for the whole job */
} prun;

/* What one bucket's run gave. */
typedef struct outcome {
  scree__ckey key;
  int cached;
  double cached_us;
  char config[128];
  scree_status st;
  scree__tune_result res;
  char err[512];
} outcome;

/* Failures that are not the config's: another GPU may do better. */
static int worth_retrying(scree_status st) {
  return st != SCREE_OK && st != SCREE_ERROR_WRONG_ANSWER && st != SCREE_ERROR_COMPILE &&
         st != SCREE_ERROR_INVALID_CONFIG && st != SCREE_ERROR_LOAD &&
         st != SCREE_ERROR_NO_NVRTC;
}

/* Tunes task t on g (or finds it cached); no output. */
static void run_task(prun *r, gpu *g, task *t, outcome *out) {
  memset(out, 0, sizeof *out);
  scree__cache *user = scree__user_cache(g->ctx);
  scree__make_key(g->ctx, t->op, &t->var, &t->bucket, &out->key);
  scree__centry e;
  if (!r->force && scree__cache_get(user, &out->key, &e) == SCREE_OK) {
    const int ok = e.cubin_ok;
    if (ok) {
      out->cached = 1;
      out->cached_us = e.median_us;
      snprintf(out->config, sizeof out->config, "%s", e.config);
    }
    scree__centry_free(&e);
    if (ok) {
      if (t->from_miss) scree__cache_delete_miss(user, &t->miss_key);
      return;
    }
  }
  scree__tune_opts o;
  scree__tune_opts_init(&o);
  o.explore = r->explore;
  o.reps = r->reps;
  /* Another prewarm, another GPU of this one, or a process tuning on a
   * miss may tune the bucket meanwhile: then its row is taken, unless
   * --force. */
  o.reuse_cached = !r->force;
  cli_progress prog;
  char label[160];
  snprintf(label, sizeof label, "%s %s", out->key.bucket, out->key.dtype);
  cli_progress_init(&prog, r->c->quiet || r->c->json || r->multi, label);
  o.progress = cli_progress_update;
  o.user = &prog;
  const double t0 = cli_now();
  out->st = scree__tune(g->ctx, t->op, &t->var, &t->bucket, &o, &out->res);
  cli_progress_done(&prog);
  g->busy_s += cli_now() - t0;
  if (out->st == SCREE_OK) {
    scree__config_str(t->op, &out->res.cfg, out->config, sizeof out->config);
    if (!out->res.tuned) { /* another process or GPU stored it meanwhile */
      out->cached = 1;
      out->cached_us = out->res.median_us;
    }
    if (t->from_miss) scree__cache_delete_miss(user, &t->miss_key);
  } else {
    snprintf(out->err, sizeof out->err, "%s", scree_last_error(g->ctx));
  }
}

/* Prints one bucket's line (the caller holds r->lock). note: "" or what
 * happens next to a failed bucket. */
static void report(prun *r, const gpu *g, const outcome *o, const char *note) {
  const cli_common *c = r->c;
  const scree__tune_result *res = &o->res;
  if (r->multi) cli_progress_done(&r->bar);
  if (o->cached) {
    if (!c->quiet && !c->json) {
      if (r->multi) printf("%-3d ", g->ordinal);
      printf("%-9s %-24s %-20s %-32s %9.2f %12s %9s %6s %5s %6s\n", o->key.op, o->key.bucket,
             o->key.dtype, cli_esc(o->config), o->cached_us, "", "cached", "", "", "");
    }
  } else if (c->json) {
    printf("%s\n {\"op\": \"%s\", \"bucket\": ", r->first ? "" : ",", o->key.op);
    cli_json_str(stdout, o->key.bucket);
    printf(", \"dtype\": ");
    cli_json_str(stdout, o->key.dtype);
    if (r->multi) printf(", \"gpu\": %d", g->ordinal);
    printf(", \"status\": \"%s\", \"config\": ", scree_status_name(o->st));
    cli_json_str(stdout, o->config);
    printf(", \"median_us\": ");
    cli_json_num(stdout, "%.3f", res->median_us);
    printf(", \"spread_us\": ");
    cli_json_num(stdout, "%.3f", res->spread_us);
    printf(", \"default_us\": ");
    cli_json_num(stdout, "%.3f", res->default_us);
    printf(", \"candidates\": %d, \"timed\": %d, \"failed\": %d, \"known_bad\": %d, "
           "\"seconds\": ", res->candidates, res->timed, res->failed, res->known_bad);
    cli_json_num(stdout, "%.3f", res->seconds);
    printf(", \"flops\": ");
    cli_json_num(stdout, "%.6g", res->flops);
    printf(", \"bytes\": ");
    cli_json_num(stdout, "%.6g", res->bytes);
    printf(", \"problem\": ");
    cli_json_str(stdout, res->problem);
    printf("}");
    r->first = 0;
  } else if (o->st != SCREE_OK) {
    if (r->multi) printf("%-3d ", g->ordinal);
    printf("%-9s %-24s %-20s FAILED%s: %s\n", o->key.op, o->key.bucket, o->key.dtype, note,
           cli_esc(o->err));
  } else if (!c->quiet) {
    char rate[32];
    cli_rate(rate, sizeof rate, res->flops, res->bytes, res->median_us);
    if (r->multi) printf("%-3d ", g->ordinal);
    printf("%-9s %-24s %-20s %-32s %9.2f %12s %9.2f %5.2fx %5d %6.2f\n", o->key.op,
           o->key.bucket, o->key.dtype, o->config, res->median_us, rate, res->default_us,
           res->default_us > 0 ? res->default_us / res->median_us : 0, res->candidates,
           res->seconds);
  }
  fflush(stdout);
  if (r->multi) cli_progress_update(&r->bar, r->done, r->total, "buckets");
}

/* One GPU's loop: retries meant for it first, then its group's queue. */
static void *gpu_main(void *p) {
  gpu *g = p;
  prun *r = g->r;
  pthread_mutex_lock(&r->lock);
  while (g->alive) {
    int ti = -1, retried = 0, pending = 0;
    for (int k = 0; k < r->nrq && ti < 0; k++) {
      if (r->rq[k].group != g->group) continue;
      pending = 1;
      if (r->rq[k].exclude == g->ordinal) continue;
      ti = r->rq[k].task;
      retried = 1;
      r->rq[k] = r->rq[--r->nrq];
    }
    if (ti < 0 && r->next[g->group] < r->ts->n) ti = r->next[g->group]++;
    if (ti < 0) {
      /* A retry only the others may take: wait while one of them works. */
      if (pending && r->live[g->group] > 1) {
        pthread_cond_wait(&r->cv, &r->lock);
        continue;
      }
      break;
    }
    pthread_mutex_unlock(&r->lock);
    outcome o;
    run_task(r, g, &r->ts->t[ti], &o);
    pthread_mutex_lock(&r->lock);
    if (o.st == SCREE_ERROR_CUDA && !o.cached) g->alive = 0; /* its context is gone */
    if (!o.cached && worth_retrying(o.st) && !retried && r->live[g->group] > 1) {
      r->rq[r->nrq++] = (retry){ti, g->group, g->ordinal};
      report(r, g, &o, " (will retry on another GPU of this model)");
      g->failed++;
    } else {
      r->done++;
      if (o.st != SCREE_OK) {
        r->failures++;
        g->failed++;
      } else if (!o.cached) {
        g->tuned++;
      }
      report(r, g, &o, "");
    }
    pthread_cond_broadcast(&r->cv);
  }
  r->live[g->group]--;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

/* --devices all | 0,1,3: the ordinals, each once. CLI_OK, CLI_USAGE or
 * CLI_NO_GPU with the reason on stderr. */
static int parse_devices(const char *spec, int *ords, int *n) {
  *n = 0;
  if (!strcmp(spec, "all")) {
    scree_runtime_info ri;
    scree_get_runtime_info(&ri);
    if (ri.device_count <= 0) {
      fprintf(stderr, "scree-tune prewarm: --devices all: no GPU here (%s)\n",
              ri.driver_error[0] ? ri.driver_error : "no device");
      return CLI_NO_GPU;
    }
    for (int d = 0; d < ri.device_count && d < CLI_MAX_DEVICES; d++) ords[(*n)++] = d;
    return CLI_OK;
  }
  for (const char *s = spec; *s;) {
    char *end;
    errno = 0;
    const long d = strtol(s, &end, 10);
    if (end == s || errno || d < 0 || d > 1024 || (*end && *end != ',') ||
        *n == CLI_MAX_DEVICES) {
      fprintf(stderr, "scree-tune prewarm: --devices %s: give all, or GPU ordinals separated by"
                      " commas (at most %d), such as 0,1,2\n", spec, CLI_MAX_DEVICES);
      return CLI_USAGE;
    }
    for (int k = 0; k < *n; k++)
      if (ords[k] == d) {
        fprintf(stderr, "scree-tune prewarm: --devices %s: GPU %ld is named twice\n", spec, d);
        return CLI_USAGE;
      }
    ords[(*n)++] = (int)d;
    s = *end ? end + 1 : end;
  }
  return CLI_OK;
}

static int run_prewarm(const cli_common *cp, tasks *tsp, const char *devices_spec, int device,
                       int from_misses, const cli_shard *shard, int explore, int force,
                       int reps) {
  cli_common c = *cp;
  int ords[CLI_MAX_DEVICES], nords = 1, rc = CLI_OK;
  ords[0] = device;
  if (devices_spec && (rc = parse_devices(devices_spec, ords, &nords))) return rc;
  gpu *g = calloc((size_t)nords, sizeof *g);
  if (!g) return CLI_FAIL;
  /* A context per GPU, each with its tuning worker; a GPU whose context
   * cannot be made is reported and left out. */
  int ng = 0, first_rc = CLI_OK;
  for (int k = 0; k < nords; k++) {
    gpu *x = &g[ng];
    const int r = make_context(&c, ords[k], &x->ctx, "prewarm");
    if (r) {
      if (!first_rc) first_rc = r;
      continue;
    }
    if (!scree__user_cache(x->ctx)) {
      fprintf(stderr, "scree-tune prewarm: the user cache could not be opened; "
                      "nothing would be kept (see SCREE_LOG_LEVEL=warn)\n");
      scree_destroy(x->ctx);
      first_rc = CLI_CACHE;
      break;
    }
    x->ordinal = ords[k];
    x->alive = 1;
    scree_context_device(x->ctx, &x->dev);
    ng++;
  }
  if (first_rc == CLI_CACHE || ng == 0) {
    for (int k = 0; k < ng; k++) scree_destroy(g[k].ctx);
    free(g);
    return first_rc ? first_rc : CLI_NO_GPU;
  }
  scree__cache *user = scree__user_cache(g[0].ctx);
  const scree_device_info *dev = &g[0].dev;
  if (from_misses) {
    miss_ctx mc = {.ts = tsp, .arch = dev->arch};
    const int before = tsp->n;
    const scree_status mst = scree__cache_foreach_miss(user, dev->arch, c.op, on_miss, &mc);
    if (mst) rc = cli_cache_failed(user, mst, "prewarm");
    else if (!c.quiet && !c.json)
      printf("%d recorded miss(es) for %s\n", tsp->n - before, dev->arch);
  }
  if (!rc && apply_shard(tsp, shard)) {
    fprintf(stderr, "scree-tune prewarm: out of memory\n");
    rc = CLI_FAIL;
  }
  prun r = {.c = &c, .ts = tsp, .explore = explore, .force = force, .reps = reps,
            .multi = devices_spec != NULL, .g = g, .ng = ng, .first = 1};
  r.rq = calloc((size_t)(tsp->n ? tsp->n : 1) * (size_t)ng, sizeof *r.rq);
  if (!rc && !r.rq) rc = CLI_FAIL;
  if (rc) {
    for (int k = 0; k < ng; k++) scree_destroy(g[k].ctx);
    free(g);
    free(r.rq);
    return rc;
  }
  /* Groups: GPUs of one model (name, SM count, arch) share a queue, so a
   * bucket is tuned once per model; each model tunes every bucket. */
  for (int k = 0; k < ng; k++) {
    g[k].r = &r;
    g[k].group = -1;
    for (int j = 0; j < k && g[k].group < 0; j++)
      if (!strcmp(g[j].dev.name, g[k].dev.name) && g[j].dev.sm_count == g[k].dev.sm_count &&
          !strcmp(g[j].dev.arch, g[k].dev.arch))
        g[k].group = g[j].group;
    if (g[k].group < 0) g[k].group = r.ngroups++;
    r.live[g[k].group]++;
  }
  r.total = tsp->n * r.ngroups;
  if (shard->on && !c.quiet && !c.json)
    printf("shard %d/%d (%s): %d bucket(s)\n", shard->k, shard->n, shard->source, tsp->n);
  if (r.multi && !c.quiet && !c.json)
    for (int k = 0; k < ng; k++)
      printf("gpu %d: %s (%s, %d SMs), model group %d\n", g[k].ordinal, cli_esc(g[k].dev.name),
             g[k].dev.arch, g[k].dev.sm_count, g[k].group);
  if (c.json) {
    printf("{\"device\": ");
    cli_json_str(stdout, dev->name);
    printf(", \"arch\": \"%s\", ", dev->arch);
    if (r.multi) {
      printf("\"gpus\": [");
      for (int k = 0; k < ng; k++) {
        printf("%s{\"gpu\": %d, \"name\": ", k ? ", " : "", g[k].ordinal);
        cli_json_str(stdout, g[k].dev.name);
        printf(", \"group\": %d}", g[k].group);
      }
      printf("], ");
    }
    printf("\"results\": [");
  } else if (!c.quiet) {
    if (r.multi) printf("%-3s ", "gpu");
    printf("%-9s %-24s %-20s %-32s %9s %12s %9s %6s %5s %6s\n", "op", "bucket", "dtype",
           "winner", "us", "rate", "default", "gain", "cand", "s");
  }
  fflush(stdout);
  pthread_mutex_init(&r.lock, NULL);
  pthread_cond_init(&r.cv, NULL);
  cli_progress_init(&r.bar, c.quiet || c.json || !r.multi, "prewarm");
  r.t0 = cli_now();
  if (ng == 1) {
    gpu_main(&g[0]);
  } else {
    int started[CLI_MAX_DEVICES] = {0};
    for (int k = 0; k < ng; k++)
      if (pthread_create(&g[k].thread, NULL, gpu_main, &g[k]) == 0) {
        started[k] = 1;
      } else {
        pthread_mutex_lock(&r.lock);
        r.live[g[k].group]--;
        g[k].alive = 0;
        pthread_mutex_unlock(&r.lock);
        fprintf(stderr, "scree-tune prewarm: gpu %d: cannot start its thread\n", g[k].ordinal);
      }
    for (int k = 0; k < ng; k++)
      if (started[k]) pthread_join(g[k].thread, NULL);
  }
  cli_progress_done(&r.bar);
  /* What no GPU of its model was left to take, and what no GPU reached. */
  for (int k = 0; k < r.nrq; k++) {
    char id[ID_LEN];
    task_id(&tsp->t[r.rq[k].task], id, sizeof id);
    r.failures++;
    if (!c.json) printf("%s: FAILED: not retried: no other GPU of its model is left\n", id);
  }
  for (int grp = 0; grp < r.ngroups; grp++)
    if (r.next[grp] < tsp->n) {
      r.failures += tsp->n - r.next[grp];
      if (!c.json)
        printf("%d bucket(s) not tuned: every GPU of model group %d stopped\n",
               tsp->n - r.next[grp], grp);
    }
  const int skipped = cli_report_refused(user, "prewarm");
  if (c.json) {
    printf("\n], \"seconds\": %.3f, \"failures\": %d, \"skipped\": %d", cli_now() - r.t0,
           r.failures, skipped);
    if (r.multi) {
      printf(", \"per_gpu\": [");
      for (int k = 0; k < ng; k++)
        printf("%s{\"gpu\": %d, \"tuned\": %d, \"failed\": %d, \"busy_s\": %.3f}", k ? ", " : "",
               g[k].ordinal, g[k].tuned, g[k].failed, g[k].busy_s);
      printf("]");
    }
    printf("}\n");
  } else if (!c.quiet) {
    printf("%d bucket(s) in %.1f s, %d failed; cache %s\n", tsp->n, cli_now() - r.t0,
           r.failures, scree__cache_path(user));
    if (r.multi)
      for (int k = 0; k < ng; k++)
        printf("gpu %d (%s): %d tuned, %d failed, %.1f s tuning%s\n", g[k].ordinal,
               cli_esc(g[k].dev.name), g[k].tuned, g[k].failed, g[k].busy_s,
               g[k].alive ? "" : "; stopped (its CUDA context broke)");
  }
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.lock);
  for (int k = 0; k < ng; k++) scree_destroy(g[k].ctx);
  free(g);
  free(r.rq);
  return r.failures || first_rc ? CLI_FAIL : CLI_OK;
}

/* prewarm --dry-run: the buckets this task would tune, one "op bucket
 * variant shape" line each (shape: the first call shape given for the
 * bucket, which bench_ops --file takes as "op variant shape"), without a
 * GPU. Misses are those of the user cache
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
    printf("%s %s\n", id, ts->t[i].shape[0] ? ts->t[i].shape : "-");
  }
  fflush(stdout); /* the list before the summary, where both go to one file */
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
  const char *shard_spec = NULL, *shard_count = NULL, *devices_spec = NULL;
  int have_device = 0;
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
      have_device = 1;
    } else if ((v = cli_value(argc, argv, &i, "--devices", "prewarm"))) {
      devices_spec = v;
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
               !strcmp(argv[i], "--presets") || !strcmp(argv[i], "--devices")) {
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
  if (devices_spec && have_device) {
    fprintf(stderr, "scree-tune prewarm: give --device N or --devices LIST, not both\n");
    return CLI_USAGE;
  }
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

  return run_prewarm(&c, tsp, devices_spec, device, from_misses, &shard, explore, force, reps);
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
