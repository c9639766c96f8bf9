/* cli_tune.c - scree-tune prewarm and verify: the commands that need a GPU. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

const char *const usage_prewarm =
    "usage: scree-tune prewarm [what] [options]\n\n"
    "Tunes shapes on this GPU now and stores the winners (with their cubins)\n"
    "in the user cache, so later processes start warm.\n\n"
    "what (any combination):\n"
    "  --op OP --shape S     one call shape of OP in its own fields, every field\n"
    "                        given, as misses record them (repeatable), e.g.\n"
    "                        --op rmsnorm --shape rows=16000,cols=4096, or --op\n"
    "                        attention --shape batch=16,total_q=12081,\n"
    "                        total_k=12081,max_seqlen_q=2048,max_seqlen_k=2048,\n"
    "                        heads_q=16,heads_kv=16,head_dim=64,window_left=-1,\n"
    "                        window_right=-1\n"
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
    "  --hf-config FILE      a HuggingFace config.json: the ops and buckets --model\n"
    "                        gives a preset, from the config's sizes (model_type\n"
    "                        llama, mistral, qwen2, qwen3, gemma, phi3, gpt_neox,\n"
    "                        phi; a multimodal config's text_config)\n"
    "  --from-misses         every miss recorded in the user cache for this\n"
    "                        GPU's arch, with --devices each GPU's, tuned by the\n"
    "                        GPUs of that arch (each is removed once tuned)\n"
    "  --from-shipped        compile the shipped tuned configs (caches/, or\n"
    "                        SCREE_TUNED_CONFIGS) for --arch (default: this GPU's,\n"
    "                        else every arch) into the user cache, with NVRTC\n"
    "                        alone: nothing is timed and no GPU is needed\n\n"
    "a cluster (docs/cluster.md):\n"
    "  --devices all|N,N..   one tuning worker per GPU; GPUs of one model share the\n"
    "                        buckets, each model tunes all of them; a candidate\n"
    "                        is compiled once per arch, for all its GPUs\n"
    "  --shard K/N | auto    this task's share (K of 0..N-1) of the buckets; auto\n"
    "                        reads SLURM_ARRAY_TASK_ID/_MIN/_STEP/_COUNT or\n"
    "                        JOB_COMPLETION_INDEX with --shard-count N (or\n"
    "                        SCREE_SHARD_COUNT)\n"
    "  --dry-run             print the buckets (op bucket variant shape) and stop:\n"
    "                        no GPU; --from-misses lists those of --arch (default\n"
    "                        every arch; --arch A,B: each arch's list, as\n"
    "                        --devices on GPUs of those archs tunes them)\n\n"
    "options:\n"
    "  --dtype fp16|bf16|fp32[,..]  dtypes for --op/--model/--hf-config (default bf16)\n"
    "  --explore             time the whole config space, not only the safelist\n"
    "  --force               retune buckets the user cache already holds\n"
    "  --reps N              timed launches per candidate (default 25)\n"
    "  --cache PATH          the user cache (default $SCREE_CACHE_DIR/tune.db,\n"
    "                        $XDG_CACHE_HOME/scree/tune.db or ~/.cache/scree/tune.db)\n"
    "  --device N            GPU ordinal (default 0; see --devices)\n"
    "  --arch A              with --from-shipped or --dry-run --from-misses\n"
    "  --quiet, --json\n\n"
    "exit codes: 0 all tuned, 1 some bucket found no correct config,\n"
    "2 usage, 3 no GPU or NVRTC, 4 cache error\n";

const char *const usage_verify =
    "usage: scree-tune verify [--retime] [--cache PATH] [--arch A] [--op OP] [--device N]\n"
    "                         [--quiet] [--json]\n"
    "       scree-tune verify --shipped [--arch A] [--op OP] [--quiet] [--json]\n"
    "       scree-tune verify --agree A.db B.db [C.db ...] [--arch A] [--op OP] [--quiet]\n"
    "                         [--json]\n\n"
    "Re-checks every cached winner for this GPU's architecture: loads its\n"
    "cubin (hash-checked) and compares its output with the CPU reference on\n"
    "random inputs. With --retime it also times each one and flags entries\n"
    "now slower than recorded (by more than 10% or 3x the recorded spread).\n"
    "Entries for another kernel source (stale) are reported, not run; entries\n"
    "built by another NVRTC or tuned under another driver are checked and\n"
    "marked. --shipped checks the shipped tuned configs (caches/,\n"
    "SCREE_TUNED_CONFIGS) instead, without a GPU: each line, and whether its\n"
    "kernel source is this build's (stale ones are ignored at run time).\n"
    "--agree reads the cache files given (read-only, no GPU) and reports\n"
    "every key whose winning config differs between them or that some file\n"
    "lacks: the ranks of a job must run the same config per bucket.\n\n"
    "exit codes: 0 all correct (--agree: all agree), 1 some entry wrong or\n"
    "not loadable, 2 usage, 3 no GPU, 4 cache error, 5 (--agree) the caches\n"
    "disagree\n";

/* ---- the buckets to tune -------------------------------------------------------- */

typedef scree__admin_tasks tasks;

/* Says why the last add to ts failed, if it did: CLI_OK, CLI_FAIL (out of
 * memory) or CLI_USAGE (more buckets than a prewarm takes). */
static int tasks_failed(const tasks *ts) {
  if (ts->failed == 1) fprintf(stderr, "scree-tune prewarm: out of memory\n");
  if (ts->failed == 2)
    fprintf(stderr, "scree-tune prewarm: more than %d buckets to tune, the most one prewarm "
                    "takes: give fewer shapes, models or values\n", SCREE__ADMIN_MAX_TASKS);
  return ts->failed == 1 ? CLI_FAIL : ts->failed ? CLI_USAGE : CLI_OK;
}

/* One call shape as a task; CLI_OK or CLI_USAGE with the reason said. */
static int add_shape(tasks *ts, const char *op, const char *shape, const char *variant,
                     scree_dtype dt) {
  scree__admin_task t;
  char why[1024];
  if (scree__admin_task_of_shape(op, shape, variant, dt, &t, why, sizeof why)) {
    fprintf(stderr, "scree-tune prewarm: %s\n", cli_esc(why));
    return CLI_USAGE;
  }
  scree__admin_tasks_add(ts, &t);
  return tasks_failed(ts);
}

/* "1,2,3": positive integers, at most cap. */
static int parse_list(const char *opt, const char *s, long *out, int cap, int *n) {
  *n = 0;
  for (const char *p = s;;) {
    char *end;
    errno = 0;
    const long v = strtol(p, &end, 10);
    if (end == p || errno || v < 1 || v > (1L << 40) || (*end && *end != ',') || *n == cap) {
      fprintf(stderr, "scree-tune prewarm: --%s %s: give at most %d integers from 1 to 2^40, "
                      "separated by commas\n", opt, cli_esc(s), cap);
      return CLI_USAGE;
    }
    out[(*n)++] = v;
    if (!*end) return CLI_OK;
    p = end + 1;
  }
}

static void print_preset(void *user, const char *name, const char *about) {
  (void)user;
  fprintf(stderr, "  %-18s %s\n", name, about);
}

/* The tasks of --model in each dtype; CLI_OK or CLI_USAGE with the reason. */
static int add_model(tasks *ts, const char *model, const char *presets_file,
                     const scree_dtype *dts, int ndt) {
  char why[1536];
  const scree_status st =
      scree__admin_model_tasks(model, presets_file, dts, ndt, scree__admin_tasks_add, ts, why, sizeof why);
  if (st == SCREE_ERROR_NOT_FOUND) {
    fprintf(stderr, "scree-tune prewarm: unknown model %s; presets:\n", cli_esc(model));
    scree__admin_presets(presets_file, print_preset, NULL, why, sizeof why);
    return CLI_USAGE;
  }
  if (st) {
    fprintf(stderr, "scree-tune prewarm: %s\n",
            st == SCREE_ERROR_OUT_OF_MEMORY ? "out of memory" : cli_esc(why));
    return st == SCREE_ERROR_OUT_OF_MEMORY ? CLI_FAIL : CLI_USAGE;
  }
  return tasks_failed(ts);
}

/* The tasks of --hf-config in each dtype, and what the config gave (on
 * stderr); CLI_OK, or CLI_USAGE with the reason (a file that cannot be
 * read or is refused, with nothing tuned). */
static int add_hf_config(const cli_common *c, tasks *ts, const char *path,
                         const scree_dtype *dts, int ndt) {
  char why[1536], about[256];
  const scree_status st = scree__admin_hf_config_tasks(path, dts, ndt, scree__admin_tasks_add, ts,
                                                       about, sizeof about, why, sizeof why);
  if (!st && !c->quiet && !c->json)
    fprintf(stderr, "scree-tune prewarm: --hf-config %s: %s\n", cli_esc(path), cli_esc(about));
  if (st) {
    fprintf(stderr, "scree-tune prewarm: --hf-config: %s\n",
            st == SCREE_ERROR_OUT_OF_MEMORY ? "out of memory" : cli_esc(why));
    return st == SCREE_ERROR_OUT_OF_MEMORY ? CLI_FAIL : CLI_USAGE;
  }
  return tasks_failed(ts);
}

/* The misses of cache for arch and op as tasks; unreadable ones said. */
static int add_misses(tasks *ts, scree__admin_cache *cache, const char *arch, const char *op) {
  int unreadable = 0;
  char why[1024];
  const scree_status st =
      scree__admin_miss_tasks(cache, arch, op, scree__admin_tasks_add, ts, &unreadable, why, sizeof why);
  if (st) {
    fprintf(stderr, "scree-tune prewarm: %s: %s\n", scree_status_name(st), cli_esc(why));
    return CLI_CACHE;
  }
  if (unreadable)
    fprintf(stderr, "scree-tune prewarm: skipping %d miss(es) this build cannot read (first: "
                    "%s)\n", unreadable, cli_esc(why));
  return tasks_failed(ts);
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
      scree__admin_task_id(&ts->t[i], ids + (size_t)i * ID_LEN, ID_LEN);
      p[i] = ids + (size_t)i * ID_LEN;
    }
    if (cli_shard_select(p, ts->n, s, keep) >= 0) {
      scree__admin_tasks_keep(ts, keep);
      rc = 0;
    }
  }
  free(ids);
  free(p);
  free(keep);
  return rc;
}

/* The buckets of a prewarm --from-misses for the GPUs of one arch: those
 * given (base), then the user cache's misses for arch (none when user is
 * NULL), cut to this shard. The misses of an arch are of no use to a GPU
 * of another, and each is deleted once its own arch has tuned it, so a
 * prewarm --devices keeps one list per arch. *nmiss: the buckets the
 * misses added; *all: the list's length before the shard. CLI_OK, or an
 * error said on stderr. */
static int arch_tasks(const tasks *base, scree__admin_cache *user, const char *arch,
                      const char *op, const cli_shard *s, tasks *out, int *nmiss, int *all) {
  for (int i = 0; i < base->n && !out->failed; i++) scree__admin_tasks_add(out, &base->t[i]);
  int rc = tasks_failed(out);
  if (!rc && user) rc = add_misses(out, user, arch, op);
  *nmiss = out->n - base->n;
  *all = out->n;
  if (!rc && apply_shard(out, s)) {
    fprintf(stderr, "scree-tune prewarm: out of memory\n");
    rc = CLI_FAIL;
  }
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
  int ordinal, group, alive, tuned, failed, compiled, reused;
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
  tasks *of[CLI_MAX_DEVICES]; /* per group: its buckets (with --from-misses, its arch's) */
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
  int wop, wbucket, wdtype; /* column widths: the longest op, bucket and variant to tune */
  double t0;
  cli_progress bar; /* --devices: one for the whole job */
} prun;

/* Failures that are not the config's: another GPU may do better. */
static int worth_retrying(scree_status st) {
  return st != SCREE_OK && st != SCREE_ERROR_WRONG_ANSWER && st != SCREE_ERROR_COMPILE &&
         st != SCREE_ERROR_INVALID_CONFIG && st != SCREE_ERROR_LOAD &&
         st != SCREE_ERROR_NO_NVRTC;
}

/* Tunes task t on g (or finds it cached); no output. */
static void run_task(prun *r, gpu *g, const scree__admin_task *t, scree__admin_tuned *out) {
  cli_progress prog;
  char label[160];
  snprintf(label, sizeof label, "%s %s", t->bucket, t->variant);
  cli_progress_init(&prog, r->c->quiet || r->c->json || r->multi, label);
  const scree__admin_tune_opts o = {r->explore, r->force, r->reps, cli_progress_update, &prog};
  const double t0 = cli_now();
  scree__admin_tune(g->ctx, t, &o, out);
  cli_progress_done(&prog);
  g->busy_s += cli_now() - t0;
}

/* Prints one bucket's line (the caller holds r->lock). note: "" or what
 * happens next to a failed bucket. */
static void report(prun *r, const gpu *g, const scree__admin_tuned *o, const char *note) {
  const cli_common *c = r->c;
  const int wo = r->wop, wb = r->wbucket, wd = r->wdtype;
  if (r->multi) cli_progress_done(&r->bar);
  if (o->cached) {
    if (!c->quiet && !c->json) {
      if (r->multi) printf("%-3d ", g->ordinal);
      printf("%-*s %-*s %-*s %-32s %9.2f %12s %9s %6s %5s %6s\n", wo, o->key.op, wb, o->key.bucket,
             wd, o->key.dtype, cli_esc(o->config), o->median_us, "", "cached", "", "", "");
    }
  } else if (c->json) {
    printf("%s\n {", r->first ? "" : ",");
    cli_json_key_start(&o->key);
    if (r->multi) printf(", \"gpu\": %d", g->ordinal);
    printf(", \"status\": \"%s\", \"config\": ", scree_status_name(o->st));
    cli_json_str(stdout, o->config);
    printf(", \"median_us\": ");
    cli_json_num(stdout, "%.3f", o->median_us);
    printf(", \"spread_us\": ");
    cli_json_num(stdout, "%.3f", o->spread_us);
    printf(", \"default_us\": ");
    cli_json_num(stdout, "%.3f", o->default_us);
    printf(", \"candidates\": %d, \"timed\": %d, \"failed\": %d, \"known_bad\": %d, "
           "\"seconds\": ", o->candidates, o->timed, o->failed, o->known_bad);
    cli_json_num(stdout, "%.3f", o->seconds);
    printf(", \"flops\": ");
    cli_json_num(stdout, "%.6g", o->flops);
    printf(", \"bytes\": ");
    cli_json_num(stdout, "%.6g", o->bytes);
    printf(", \"problem\": ");
    cli_json_str(stdout, o->problem);
    if (o->st) {
      printf(", \"error\": ");
      cli_json_str(stdout, o->why);
    }
    printf("}");
    r->first = 0;
  } else if (o->st != SCREE_OK) {
    if (r->multi) printf("%-3d ", g->ordinal);
    printf("%-*s %-*s %-*s FAILED%s: %s\n", wo, o->key.op, wb, o->key.bucket, wd, o->key.dtype,
           note, cli_esc(o->why));
  } else if (!c->quiet) {
    char rate[32];
    cli_rate(rate, sizeof rate, o->flops, o->bytes, o->median_us);
    if (r->multi) printf("%-3d ", g->ordinal);
    printf("%-*s %-*s %-*s %-32s %9.2f %12s %9.2f %5.2fx %5d %6.2f\n", wo, o->key.op, wb,
           o->key.bucket, wd, o->key.dtype, o->config, o->median_us, rate, o->default_us,
           o->default_us > 0 ? o->default_us / o->median_us : 0, o->candidates, o->seconds);
  }
  fflush(stdout);
  if (r->multi) cli_progress_update(&r->bar, r->done, r->total, "buckets");
}

/* One GPU's loop: retries meant for it first, then its group's queue. */
static void *gpu_main(void *p) {
  gpu *g = p;
  prun *r = g->r;
  scree__admin_tuned *o = malloc(sizeof *o);
  pthread_mutex_lock(&r->lock);
  while (g->alive && o) {
    int ti = -1, retried = 0, pending = 0;
    for (int k = 0; k < r->nrq && ti < 0; k++) {
      if (r->rq[k].group != g->group) continue;
      pending = 1;
      if (r->rq[k].exclude == g->ordinal) continue;
      ti = r->rq[k].task;
      retried = 1;
      r->rq[k] = r->rq[--r->nrq];
    }
    const tasks *ts = r->of[g->group];
    if (ti < 0 && r->next[g->group] < ts->n) ti = r->next[g->group]++;
    if (ti < 0) {
      /* A retry only the others may take: wait while one of them works. */
      if (pending && r->live[g->group] > 1) {
        pthread_cond_wait(&r->cv, &r->lock);
        continue;
      }
      break;
    }
    pthread_mutex_unlock(&r->lock);
    run_task(r, g, &ts->t[ti], o);
    pthread_mutex_lock(&r->lock);
    g->compiled += o->compiled;
    g->reused += o->reused;
    if (o->st == SCREE_ERROR_CUDA && !o->cached) g->alive = 0; /* its context is gone */
    if (!o->cached && worth_retrying(o->st) && !retried && r->live[g->group] > 1) {
      r->rq[r->nrq++] = (retry){ti, g->group, g->ordinal};
      report(r, g, o, " (will retry on another GPU of this model)");
      g->failed++;
    } else {
      r->done++;
      if (o->st != SCREE_OK) {
        r->failures++;
        g->failed++;
      } else if (!o->cached) {
        g->tuned++;
      }
      report(r, g, o, "");
    }
    pthread_cond_broadcast(&r->cv);
  }
  if (!o) g->alive = 0;
  r->live[g->group]--;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->lock);
  free(o);
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
                      " commas (at most %d), such as 0,1,2\n", cli_esc(spec), CLI_MAX_DEVICES);
      return CLI_USAGE;
    }
    for (int k = 0; k < *n; k++)
      if (ords[k] == d) {
        fprintf(stderr, "scree-tune prewarm: --devices %s: GPU %ld is named twice\n",
                cli_esc(spec), d);
        return CLI_USAGE;
      }
    ords[(*n)++] = (int)d;
    s = *end ? end + 1 : end;
  }
  return CLI_OK;
}

/* The widths of the op, bucket and dtype columns: the longest of the
 * tasks (and the headings), so that long attention buckets stay in line. */
static void column_widths(prun *r) {
  r->wop = 9, r->wbucket = 24, r->wdtype = 20;
  for (int grp = 0; grp < r->ngroups; grp++)
    for (int i = 0; i < r->of[grp]->n; i++) {
      const scree__admin_task *t = &r->of[grp]->t[i];
      if ((int)strlen(t->op) > r->wop) r->wop = (int)strlen(t->op);
      if ((int)strlen(t->bucket) > r->wbucket) r->wbucket = (int)strlen(t->bucket);
      if ((int)strlen(t->variant) > r->wdtype) r->wdtype = (int)strlen(t->variant);
    }
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
    if (!scree__admin_context_cache(x->ctx)) {
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
  scree__admin_cache *user = scree__admin_context_cache(g[0].ctx);
  const scree_device_info *dev = &g[0].dev;
  prun r = {.c = &c, .explore = explore, .force = force, .reps = reps,
            .multi = devices_spec != NULL, .g = g, .ng = ng, .first = 1};
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
  /* The buckets of each group: those given, and with --from-misses the
   * misses of the group's arch, one list per arch (the misses of one arch
   * are no use to a GPU of another, and each is deleted once its own arch
   * has tuned it). */
  tasks *lists = calloc((size_t)ng, sizeof *lists);
  const char *list_arch[CLI_MAX_DEVICES];
  int nlists = 0;
  if (!lists) rc = CLI_FAIL;
  if (!rc && !from_misses) { /* one list for all */
    lists[nlists++] = *tsp;
    memset(tsp, 0, sizeof *tsp); /* its tasks, moved */
    if (apply_shard(&lists[0], shard)) {
      fprintf(stderr, "scree-tune prewarm: out of memory\n");
      rc = CLI_FAIL;
    }
  }
  for (int k = 0; k < ng && !rc; k++) {
    int l = 0;
    while (from_misses && l < nlists && strcmp(list_arch[l], g[k].dev.arch)) l++;
    if (l == nlists) {
      list_arch[nlists++] = g[k].dev.arch;
      int nmiss, all;
      rc = arch_tasks(tsp, user, g[k].dev.arch, c.op, shard, &lists[l], &nmiss, &all);
      if (!rc && !c.quiet && !c.json)
        printf("%d recorded miss(es) for %s\n", nmiss, g[k].dev.arch);
    }
    r.of[g[k].group] = &lists[l];
  }
  int rq_len = 0;
  for (int l = 0; l < nlists; l++) rq_len += lists[l].n;
  r.rq = calloc((size_t)(rq_len ? rq_len : 1) * (size_t)ng, sizeof *r.rq);
  if (!rc && !r.rq) rc = CLI_FAIL;
  if (rc) {
    for (int k = 0; k < ng; k++) scree_destroy(g[k].ctx);
    for (int l = 0; lists && l < nlists; l++) scree__admin_tasks_free(&lists[l]);
    free(lists);
    free(g);
    free(r.rq);
    return rc;
  }
  column_widths(&r);
  for (int grp = 0; grp < r.ngroups; grp++) r.total += r.of[grp]->n;
  if (shard->on && !c.quiet && !c.json)
    for (int l = 0; l < nlists; l++)
      printf("shard %d/%d (%s): %d bucket(s)%s%s\n", shard->k, shard->n, shard->source,
             lists[l].n, nlists > 1 ? " for " : "", nlists > 1 ? list_arch[l] : "");
  if (r.multi && !c.quiet && !c.json)
    for (int k = 0; k < ng; k++)
      printf("gpu %d: %s (%s, %d SMs), model group %d\n", g[k].ordinal, cli_esc(g[k].dev.name),
             g[k].dev.arch, g[k].dev.sm_count, g[k].group);
  if (c.json) {
    cli_json_open();
    printf("\"device\": ");
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
    printf("%-*s %-*s %-*s %-32s %9s %12s %9s %6s %5s %6s\n", r.wop, "op", r.wbucket, "bucket",
           r.wdtype, "dtype", "winner", "us", "rate", "default", "gain", "cand", "s");
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
    scree__admin_task_id(&r.of[r.rq[k].group]->t[r.rq[k].task], id, sizeof id);
    r.failures++;
    if (!c.json) printf("%s: FAILED: not retried: no other GPU of its model is left\n", id);
  }
  for (int grp = 0; grp < r.ngroups; grp++)
    if (r.next[grp] < r.of[grp]->n) {
      r.failures += r.of[grp]->n - r.next[grp];
      if (!c.json)
        printf("%d bucket(s) not tuned: every GPU of model group %d stopped\n",
               r.of[grp]->n - r.next[grp], grp);
    }
  const int skipped = cli_report_refused(user, "prewarm");
  /* Candidates compiled, and taken compiled from another bucket's or
   * another GPU's compile of the same target (docs/cli.md). */
  int nbuckets = 0, compiled = 0, reused = 0;
  for (int l = 0; l < nlists; l++) nbuckets += lists[l].n;
  for (int k = 0; k < ng; k++) compiled += g[k].compiled, reused += g[k].reused;
  if (c.json) {
    printf("\n], \"seconds\": %.3f, \"failures\": %d, \"skipped\": %d, \"compiled\": %d, "
           "\"reused\": %d", cli_now() - r.t0, r.failures, skipped, compiled, reused);
    if (r.multi) {
      printf(", \"per_gpu\": [");
      for (int k = 0; k < ng; k++)
        printf("%s{\"gpu\": %d, \"tuned\": %d, \"failed\": %d, \"busy_s\": %.3f, "
               "\"compiled\": %d, \"reused\": %d}", k ? ", " : "", g[k].ordinal, g[k].tuned,
               g[k].failed, g[k].busy_s, g[k].compiled, g[k].reused);
      printf("]");
    }
    printf("}\n");
  } else if (!c.quiet) {
    printf("%d bucket(s) in %.1f s, %d failed; cache %s\n", nbuckets, cli_now() - r.t0,
           r.failures, scree__admin_path(user));
    if (compiled || reused)
      printf("candidates: %d compiled, %d reused\n", compiled, reused);
    if (r.multi)
      for (int k = 0; k < ng; k++)
        printf("gpu %d (%s): %d tuned, %d failed, %.1f s tuning, %d compiled, %d reused%s\n",
               g[k].ordinal, cli_esc(g[k].dev.name), g[k].tuned, g[k].failed, g[k].busy_s,
               g[k].compiled, g[k].reused,
               g[k].alive ? "" : "; stopped (its CUDA context broke)");
  }
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.lock);
  for (int k = 0; k < ng; k++) scree_destroy(g[k].ctx);
  for (int l = 0; l < nlists; l++) scree__admin_tasks_free(&lists[l]);
  free(lists);
  free(g);
  free(r.rq);
  return r.failures || first_rc ? CLI_FAIL : CLI_OK;
}

/* --arch A,B,..: the archs of a dry run's --from-misses, each once.
 * CLI_OK or CLI_USAGE with the reason said. */
static int parse_archs(const char *spec, char (*archs)[16], int *n) {
  *n = 0;
  for (const char *p = spec;;) {
    const size_t len = strcspn(p, ",");
    if (len == 0 || len >= 16 || *n == CLI_MAX_DEVICES) {
      fprintf(stderr, "scree-tune prewarm: --arch %s: give one architecture, or several "
                      "separated by commas (at most %d), such as sm_80,sm_90\n",
              cli_esc(spec), CLI_MAX_DEVICES);
      return CLI_USAGE;
    }
    snprintf(archs[*n], 16, "%.*s", (int)len, p);
    for (int k = 0; k < *n; k++)
      if (!strcmp(archs[k], archs[*n])) {
        fprintf(stderr, "scree-tune prewarm: --arch %s: %s is named twice\n", cli_esc(spec),
                cli_esc(archs[k]));
        return CLI_USAGE;
      }
    (*n)++;
    if (!p[len]) return CLI_OK;
    p += len + 1;
  }
}

/* prewarm --dry-run: the buckets this task would tune, one "op bucket
 * variant shape" line each (shape: the first call shape given for the
 * bucket, which bench_ops --file takes as "op variant shape"), or JSON,
 * without a GPU. Misses are those of the user cache for --arch (every
 * arch without it). With several archs (--arch sm_80,sm_90), each arch's
 * list as prewarm --devices on GPUs of those archs would tune it (the
 * buckets given and that arch's misses), each line after its arch. */
static int dry_run_list(const cli_common *c, tasks *ts, int from_misses, const cli_shard *s) {
  char archs[CLI_MAX_DEVICES][16];
  int narch = 0, rc = CLI_OK;
  const int multi = from_misses && c->arch && strchr(c->arch, ',');
  if (multi && (rc = parse_archs(c->arch, archs, &narch))) return rc;
  tasks *lists = calloc((size_t)(multi ? narch : 1), sizeof *lists);
  int *all = calloc((size_t)(multi ? narch : 1), sizeof *all);
  if (!lists || !all) {
    free(lists);
    free(all);
    fprintf(stderr, "scree-tune prewarm: out of memory\n");
    return CLI_FAIL;
  }
  scree__admin_cache *user = NULL;
  if (from_misses) rc = cli_open_user_cache(c, &user, "prewarm", 1);
  if (!rc && multi) {
    int nmiss;
    for (int a = 0; a < narch && !rc; a++)
      rc = arch_tasks(ts, user, archs[a], c->op, s, &lists[a], &nmiss, &all[a]);
  } else if (!rc) {
    narch = 1;
    lists[0] = *ts;
    memset(ts, 0, sizeof *ts); /* its tasks, moved */
    if (user) rc = add_misses(&lists[0], user, c->arch, c->op);
    all[0] = lists[0].n;
    if (!rc && apply_shard(&lists[0], s)) {
      fprintf(stderr, "scree-tune prewarm: out of memory\n");
      rc = CLI_FAIL;
    }
  }
  if (user) scree__admin_close(user);
  int count = 0, total = 0;
  for (int a = 0; a < narch; a++) count += lists[a].n, total += all[a];
  if (rc) {
  } else if (c->json) {
    cli_json_open();
    printf("\"buckets\": [");
    for (int a = 0, first = 1; a < narch; a++)
      for (int i = 0; i < lists[a].n; i++, first = 0) {
        const scree__admin_task *t = &lists[a].t[i];
        printf("%s\n {", first ? "" : ",");
        if (multi) printf("\"arch\": \"%s\", ", cli_esc(archs[a]));
        cli_json_bucket_fields(t->op, t->bucket, "variant", t->variant);
        printf(", \"shape\": ");
        if (t->shape[0])
          cli_json_str(stdout, t->shape);
        else
          printf("null");
        printf(", \"from_miss\": %s}", t->from_miss ? "true" : "false");
      }
    printf("\n], \"count\": %d, \"total\": %d, \"shard\": ", count, total);
    if (s->on) {
      printf("{\"k\": %d, \"n\": %d, \"source\": ", s->k, s->n);
      cli_json_str(stdout, s->source);
      printf("}");
    } else {
      printf("null");
    }
    printf("}\n");
  } else {
    char id[ID_LEN];
    for (int a = 0; a < narch; a++)
      for (int i = 0; i < lists[a].n; i++) {
        scree__admin_task_id(&lists[a].t[i], id, sizeof id);
        printf("%s%s%s %s\n", multi ? cli_esc(archs[a]) : "", multi ? " " : "", id,
               lists[a].t[i].shape[0] ? cli_esc(lists[a].t[i].shape) : "-");
      }
    fflush(stdout); /* the list before the summary, where both go to one file */
    for (int a = 0; a < narch && !c->quiet; a++) {
      char what[40] = "";
      if (multi) snprintf(what, sizeof what, "%.15s: ", archs[a]);
      if (s->on)
        fprintf(stderr, "scree-tune prewarm: dry run: %sshard %d/%d (%s): %d of %d bucket(s)\n",
                cli_esc(what), s->k, s->n, s->source, lists[a].n, all[a]);
      else
        fprintf(stderr, "scree-tune prewarm: dry run: %s%d bucket(s)\n", cli_esc(what),
                lists[a].n);
    }
  }
  for (int a = 0; a < narch; a++) scree__admin_tasks_free(&lists[a]);
  free(lists);
  free(all);
  return rc;
}

/* The options of a prewarm, as given. */
typedef struct popts {
  cli_common c;
  long rows[64], cols[64], rows_max, reps, device;
  int nrows, ncols, ndt, explore, force, from_misses, dry_run, from_shipped, have_device,
      have_reps;
  const char *shard_spec, *shard_count, *devices_spec, *shapes, *model, *variant,
      *presets_file, *hf_config, *shape_list[64];
  int nshape;
  scree_dtype dts[3];
} popts;

static int prewarm_options(int argc, char **argv, popts *p) {
  static const struct option opts[] = {
      CLI_OPT_OP,
      {"shape", required_argument, NULL, OPT_SHAPE},
      {"variant", required_argument, NULL, OPT_VARIANT},
      {"rows", required_argument, NULL, OPT_ROWS},
      {"cols", required_argument, NULL, OPT_COLS},
      {"rows-max", required_argument, NULL, OPT_ROWS_MAX},
      {"dtype", required_argument, NULL, OPT_DTYPE},
      {"shapes", required_argument, NULL, OPT_SHAPES},
      {"model", required_argument, NULL, OPT_MODEL},
      {"presets", required_argument, NULL, OPT_PRESETS},
      {"hf-config", required_argument, NULL, OPT_HF_CONFIG},
      {"from-misses", no_argument, NULL, OPT_FROM_MISSES},
      {"from-shipped", no_argument, NULL, OPT_FROM_SHIPPED},
      {"devices", required_argument, NULL, OPT_DEVICES},
      {"device", required_argument, NULL, OPT_DEVICE},
      {"shard", required_argument, NULL, OPT_SHARD},
      {"shard-count", required_argument, NULL, OPT_SHARD_COUNT},
      {"dry-run", no_argument, NULL, OPT_DRY_RUN},
      {"explore", no_argument, NULL, OPT_EXPLORE},
      {"force", no_argument, NULL, OPT_FORCE},
      {"reps", required_argument, NULL, OPT_REPS},
      CLI_OPT_ARCH,
      CLI_OPT_CACHE,
      CLI_OPT_QUIET,
      CLI_OPT_JSON,
      CLI_OPT_END};
  cli_args a;
  cli_args_init(&a, "prewarm", argc, argv, opts, "q");
  int ch, npos;
  const char *v;
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_common_opt(&p->c, ch, v)) continue;
    int rc = CLI_OK;
    switch (ch) {
      case OPT_ROWS: rc = parse_list("rows", v, p->rows, 64, &p->nrows); break;
      case OPT_COLS: rc = parse_list("cols", v, p->cols, 64, &p->ncols); break;
      case OPT_ROWS_MAX:
        rc = cli_parse_int("prewarm", "rows-max", v, 1, 1L << 40, &p->rows_max);
        break;
      case OPT_DTYPE: rc = cli_parse_dtypes("prewarm", v, p->dts, 3, &p->ndt); break;
      case OPT_SHAPE:
        if (p->nshape == 64) {
          fprintf(stderr, "scree-tune prewarm: at most 64 --shape options\n");
          rc = CLI_USAGE;
        } else {
          p->shape_list[p->nshape++] = v;
        }
        break;
      case OPT_VARIANT: p->variant = v; break;
      case OPT_SHAPES: p->shapes = v; break;
      case OPT_MODEL: p->model = v; break;
      case OPT_PRESETS: p->presets_file = v; break;
      case OPT_HF_CONFIG: p->hf_config = v; break;
      case OPT_REPS:
        rc = cli_parse_int("prewarm", "reps", v, 1, 1000000, &p->reps);
        p->have_reps = 1;
        break;
      case OPT_DEVICE:
        rc = cli_parse_int("prewarm", "device", v, 0, 1024, &p->device);
        p->have_device = 1;
        break;
      case OPT_DEVICES: p->devices_spec = v; break;
      case OPT_SHARD: p->shard_spec = v; break;
      case OPT_SHARD_COUNT: p->shard_count = v; break;
      case OPT_DRY_RUN: p->dry_run = 1; break;
      case OPT_FROM_SHIPPED: p->from_shipped = 1; break;
      case OPT_EXPLORE: p->explore = 1; break;
      case OPT_FORCE: p->force = 1; break;
      case OPT_FROM_MISSES: p->from_misses = 1; break;
    }
    if (rc) return rc;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos) return cli_unexpected("prewarm", pos[0]);
  return CLI_OK;
}

static int prewarm(int argc, char **argv, tasks *tsp) {
  popts p = {.reps = 0};
  int rc = prewarm_options(argc, argv, &p);
  if (rc) return rc;
  const cli_common *c = &p.c;
  cli_shard shard = {0};
  if (p.shard_count && (!p.shard_spec || strcmp(p.shard_spec, "auto"))) {
    fprintf(stderr, "scree-tune prewarm: --shard-count goes with --shard auto (an Indexed "
                    "Job's completions)\n");
    return CLI_USAGE;
  }
  if (p.shard_spec && cli_shard_parse(p.shard_spec, p.shard_count, &shard)) return CLI_USAGE;
  if (p.devices_spec && p.have_device) {
    fprintf(stderr, "scree-tune prewarm: give --device N or --devices LIST, not both\n");
    return CLI_USAGE;
  }
  if (p.from_shipped) {
    if (p.nshape || p.variant || p.ncols || p.nrows || p.rows_max || p.shapes || p.model ||
        p.presets_file || p.hf_config || p.from_misses || p.shard_spec || p.dry_run || p.ndt ||
        p.explore || p.have_reps || p.have_device || p.devices_spec) {
      fprintf(stderr, "scree-tune prewarm: --from-shipped compiles the shipped tuned configs "
                      "alone: it takes --arch, --op, --force, --cache, --quiet and --json\n");
      return CLI_USAGE;
    }
    return cli_prewarm_from_shipped(c, p.force);
  }
  /* A prewarm tunes for the GPU it runs on: --arch names the misses a dry
   * run lists, nothing else. */
  if (c->arch && !(p.dry_run && p.from_misses)) {
    fprintf(stderr, "scree-tune prewarm: --arch goes with --from-shipped, or with --dry-run "
                    "--from-misses; a prewarm tunes for this GPU's architecture\n");
    return CLI_USAGE;
  }
  if (c->op && !scree__admin_source_hash(c->op)) {
    fprintf(stderr, "scree-tune prewarm: unknown op %s (ops:", cli_esc(c->op));
    for (int i = 0; scree__admin_op_name(i); i++) fprintf(stderr, " %s", scree__admin_op_name(i));
    fprintf(stderr, ")\n");
    return CLI_USAGE;
  }
  /* --op names the op of --shape (and, for rmsnorm, --cols/--rows) shapes;
   * with --from-misses alone it filters the misses. */
  if ((p.nshape || p.variant) && !c->op) {
    fprintf(stderr, "scree-tune prewarm: --shape and --variant need --op\n");
    return CLI_USAGE;
  }
  if (p.variant && !p.nshape) {
    fprintf(stderr, "scree-tune prewarm: --variant is the variant of --shape calls; give "
                    "--shape\n");
    return CLI_USAGE;
  }
  const int rmsnorm_flags = p.ncols || p.nrows || p.rows_max;
  if (c->op && rmsnorm_flags && strcmp(c->op, "rmsnorm")) {
    fprintf(stderr, "scree-tune prewarm: --op %s: --cols/--rows are RMSNorm's; use --shape\n",
            c->op);
    return CLI_USAGE;
  }
  if (c->op && !p.nshape && !rmsnorm_flags && !p.from_misses) {
    fprintf(stderr, "scree-tune prewarm: --op %s needs --shape (or, for rmsnorm, --cols and "
                    "--rows or --rows-max)\n", c->op);
    return CLI_USAGE;
  }
  if (p.ndt && p.variant && !p.model && !p.hf_config && !rmsnorm_flags) {
    fprintf(stderr, "scree-tune prewarm: --dtype does not apply to --shape calls with "
                    "--variant (the variant names their dtypes)\n");
    return CLI_USAGE;
  }
  if (!p.ndt) p.dts[p.ndt++] = SCREE_DTYPE_BF16;
  for (int k = 0; k < p.nshape; k++)
    for (int d = 0; d < (p.variant ? 1 : p.ndt); d++)
      if ((rc = add_shape(tsp, c->op, p.shape_list[k], p.variant, p.dts[d]))) return rc;
  if (rmsnorm_flags) {
    if (!p.ncols || (!p.nrows && !p.rows_max)) {
      fprintf(stderr, "scree-tune prewarm: give --cols and --rows or --rows-max\n");
      return CLI_USAGE;
    }
    for (int k = 0; k < p.ncols; k++) {
      if (p.cols[k] > 65536) {
        fprintf(stderr, "scree-tune prewarm: --cols %ld exceeds 65536\n", p.cols[k]);
        return CLI_USAGE;
      }
      for (int d = 0; d < p.ndt; d++) {
        char shape[96];
        for (int r = 0; r < p.nrows; r++) {
          snprintf(shape, sizeof shape, "rows=%ld,cols=%ld", p.rows[r], p.cols[k]);
          if ((rc = add_shape(tsp, "rmsnorm", shape, NULL, p.dts[d]))) return rc;
        }
        for (long r = 1; p.rows_max && r <= p.rows_max; r *= 2) {
          snprintf(shape, sizeof shape, "rows=%ld,cols=%ld", r, p.cols[k]);
          if ((rc = add_shape(tsp, "rmsnorm", shape, NULL, p.dts[d]))) return rc;
        }
      }
    }
  }
  if (p.model && (rc = add_model(tsp, p.model, p.presets_file, p.dts, p.ndt))) return rc;
  if (p.hf_config && (rc = add_hf_config(c, tsp, p.hf_config, p.dts, p.ndt))) return rc;
  if (p.presets_file && !p.model) {
    fprintf(stderr, "scree-tune prewarm: --presets adds model presets; name one with --model\n");
    return CLI_USAGE;
  }
  if (p.shapes) {
    char why[1536];
    if (scree__admin_shapes_file_tasks(p.shapes, scree__admin_tasks_add, tsp, why, sizeof why) < 0) {
      fprintf(stderr, "scree-tune prewarm: --shapes: %s\n", cli_esc(why));
      return CLI_USAGE;
    }
    if ((rc = tasks_failed(tsp))) return rc;
  }
  if (!p.from_misses && tsp->n == 0) {
    fprintf(stderr, "scree-tune prewarm: nothing to tune: give --op/--cols/--rows, "
                    "--shapes, --model, --hf-config or --from-misses (see --help)\n");
    return CLI_USAGE;
  }
  if (p.dry_run) return dry_run_list(c, tsp, p.from_misses, &shard);
  /* A pinned process never tunes: neither does a prewarm under SCREE_PIN. */
  const char *pin = getenv("SCREE_PIN");
  if (pin && *pin) {
    fprintf(stderr, "scree-tune prewarm: SCREE_PIN=%s pins this process to a read-only cache, "
                    "in which nothing is tuned; unset SCREE_PIN to prewarm (into --cache or the "
                    "user cache), then merge and pin the result (docs/cache.md)\n", cli_esc(pin));
    return CLI_CACHE;
  }
  return run_prewarm(c, tsp, p.devices_spec, (int)p.device, p.from_misses, &shard, p.explore,
                     p.force, (int)p.reps);
}

int cmd_prewarm(int argc, char **argv) {
  tasks ts = {0};
  const int rc = prewarm(argc, argv, &ts); /* every path leaves ts to us */
  scree__admin_tasks_free(&ts);
  return rc;
}

/* ---- verify ------------------------------------------------------------ */

typedef struct vctx {
  const cli_common *c;
  int retime, first;
  int nvrtc_here, driver_here;
} vctx;

static int on_verdict(void *user, const scree__admin_row *e, const scree__admin_verdict *v) {
  vctx *x = user;
  const int ok = !strcmp(v->verdict, "ok");
  if (x->c->json) {
    printf("%s\n {", x->first ? "" : ",");
    cli_json_key_start(&e->key);
    printf(", \"config\": ");
    cli_json_str(stdout, e->config);
    printf(", \"verdict\": ");
    cli_json_str(stdout, v->verdict);
    printf(", \"recorded_us\": ");
    cli_json_num(stdout, "%.3f", e->median_us);
    printf(", \"now_us\": ");
    cli_json_num(stdout, "%.3f", v->now_us);
    printf(", \"nvrtc_version\": %d, \"other_nvrtc\": %s, \"other_driver\": %s",
           e->nvrtc_version, v->other_nvrtc ? "true" : "false",
           v->other_driver ? "true" : "false");
    if (v->detail[0]) {
      printf(", \"detail\": ");
      cli_json_str(stdout, v->detail);
    }
    printf("}");
    x->first = 0;
  } else if (!x->c->quiet || !ok) {
    printf("%-8s %-24s %-20s %-32s %-8s", cli_esc(e->key.op), cli_esc(e->key.bucket),
           cli_esc(e->key.dtype), cli_esc(e->config), v->verdict);
    if (x->retime && v->now_us > 0)
      printf(" recorded %.2f us, now %.2f us", e->median_us, v->now_us);
    if (v->other_nvrtc)
      printf(" (cubin by NVRTC %d.%d, this machine has %d.%d)", e->nvrtc_version / 1000,
             (e->nvrtc_version % 1000) / 10, x->nvrtc_here / 1000, (x->nvrtc_here % 1000) / 10);
    if (v->other_driver)
      printf(" (tuned under driver %d.%d, this machine has %d.%d)", e->driver_version / 1000,
             (e->driver_version % 1000) / 10, x->driver_here / 1000, (x->driver_here % 1000) / 10);
    if (v->detail[0]) printf(" (%s)", cli_esc(v->detail));
    printf("\n");
  }
  fflush(stdout);
  return 0;
}

int cmd_verify(int argc, char **argv) {
  static const struct option opts[] = {{"retime", no_argument, NULL, OPT_RETIME},
                                       {"shipped", no_argument, NULL, OPT_SHIPPED},
                                       {"agree", no_argument, NULL, OPT_AGREE},
                                       {"device", required_argument, NULL, OPT_DEVICE},
                                       CLI_OPT_ARCH, CLI_OPT_OP, CLI_OPT_CACHE, CLI_OPT_QUIET,
                                       CLI_OPT_JSON, CLI_OPT_END};
  cli_common c = {0};
  int retime = 0, shipped = 0, agree = 0, have_device = 0, ch, npos;
  long device = 0;
  const char *v;
  cli_args a;
  cli_args_init(&a, "verify", argc, argv, opts, "q");
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_common_opt(&c, ch, v)) continue;
    if (ch == OPT_RETIME) retime = 1;
    if (ch == OPT_SHIPPED) shipped = 1;
    if (ch == OPT_AGREE) agree = 1;
    if (ch == OPT_DEVICE) {
      if (cli_parse_int("verify", "device", v, 0, 1024, &device)) return CLI_USAGE;
      have_device = 1;
    }
  }
  char **pos = cli_positional(&a, &npos);
  /* Caches compared with each other: no GPU, no user cache. */
  if (agree) {
    if (retime || have_device || c.cache || shipped) {
      fprintf(stderr, "scree-tune verify: --agree compares the cache files it is given, without "
                      "a GPU: not with --retime, --device, --cache or --shipped\n");
      return CLI_USAGE;
    }
    return cli_verify_agree(&c, pos, npos);
  }
  if (npos) return cli_unexpected("verify", pos[0]);
  /* The shipped tuned configs need no GPU and no cache: stale ones are listed. */
  if (shipped) {
    if (retime || have_device || c.cache) {
      fprintf(stderr, "scree-tune verify: --shipped checks the shipped tuned configs without a "
                      "GPU or a cache: not with --retime, --device or --cache\n");
      return CLI_USAGE;
    }
    return cli_verify_shipped(&c);
  }
  scree__admin_cache *cache = NULL;
  int rc = cli_open_user_cache(&c, &cache, "verify", 1);
  if (rc) return rc;
  if (!cache) {
    if (c.json) {
      cli_json_open();
      printf("\"arch\": null, \"entries\": [], \"checked\": 0, \"wrong\": 0, \"slower\": 0, "
             "\"stale\": 0, \"other_arch\": 0, \"other_compiler\": 0, \"skipped\": 0}\n");
    }
    return CLI_OK; /* nothing cached: nothing to verify */
  }
  scree_context *ctx = NULL;
  if ((rc = make_context(&c, (int)device, &ctx, "verify"))) {
    scree__admin_close(cache);
    return rc;
  }
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  vctx x = {.c = &c, .retime = retime, .first = 1,
            .nvrtc_here = ri.nvrtc_major * 1000 + ri.nvrtc_minor * 10,
            .driver_here = ri.driver_version};
  scree_device_info dev;
  scree_context_device(ctx, &dev);
  if (c.json) {
    cli_json_open();
    printf("\"arch\": \"%s\", \"entries\": [", dev.arch);
  }
  scree__admin_verify_counts n;
  const scree__admin_filter f = cli_filter(&c);
  scree_status st = scree__admin_verify(ctx, cache, &f, retime, on_verdict, &x, &n);
  const int skipped = cli_report_refused(cache, "verify");
  if (c.json)
    printf("\n], \"checked\": %d, \"wrong\": %d, \"slower\": %d, \"stale\": %d, "
           "\"other_arch\": %d, \"other_compiler\": %d, \"skipped\": %d}\n", n.checked, n.wrong,
           n.slower, n.stale, n.other_arch, n.other_compiler, skipped);
  else
    printf("%d checked on %s: %d wrong, %d slower than recorded, %d stale, %d for other archs, "
           "%d built by another NVRTC or driver\n",
           n.checked, dev.arch, n.wrong, n.slower, n.stale, n.other_arch, n.other_compiler);
  if (!c.json) cli_shipped_summary(&c);
  scree_destroy(ctx);
  rc = cli_cache_failed(cache, st, "verify");
  scree__admin_close(cache);
  if (rc) return rc;
  return n.wrong || skipped ? CLI_FAIL : CLI_OK;
}
