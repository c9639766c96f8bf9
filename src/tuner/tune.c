/* tune.c - the tuner: the policy's candidates, compiled (in parallel), run
 * (checked, then timed) in the worker or here, the policy's winner stored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/tuner.h"
#include "tuner/worker.h"

/* The state a context keeps for tuning: one tune at a time. Compiled
 * candidates live in the process's cubin table (jit/cubins.c), which the
 * context holds while it lives: the buckets of one op share most
 * candidates, and the GPUs of one arch in a prewarm --devices share all,
 * so each candidate is compiled once per target. */
struct scree__tuner {
  pthread_mutex_t lock;
  struct scree__worker *worker; /* used under lock */
};

void scree__tune_opts_init(scree__tune_opts *o) {
  memset(o, 0, sizeof *o);
  o->reps = 25;
  o->warmup = 3;
  o->noise = 0.02;
  o->time_limit_ms = 1000;
  o->store = 1;
  o->isolate = -1;
}

scree_status scree__tuner_create(scree_context *ctx) {
  struct scree__tuner *t = calloc(1, sizeof *t);
  if (!t) return SCREE_ERROR_OUT_OF_MEMORY;
  pthread_mutex_init(&t->lock, NULL);
  scree__cubins_hold();
  ctx->tuner = t;
  return SCREE_OK;
}

void scree__tuner_free(scree_context *ctx) {
  struct scree__tuner *t = ctx->tuner;
  if (!t) return;
  scree__worker_free(t->worker);
  scree__cubins_release();
  pthread_mutex_destroy(&t->lock);
  free(t);
  ctx->tuner = NULL;
}

/* ---- candidates --------------------------------------------------------- */

/* A candidate of the policy's list on its way through the tuner; its
 * outcome (timed or not) is kept beside it, in a scree__outcome. */
typedef struct cand {
  scree__config cfg;
  void *cubin;
  size_t cubin_size;
  char *log;
  scree_status cst; /* compile status */
  char why[256];    /* why it failed */
} cand;

static void record_bad(scree_context *ctx, const scree__ckey *key, const scree__op *op,
                       const scree__config *cfg, int any_bucket, const char *reason) {
  char cs[128];
  scree__config_str(op, cfg, cs, sizeof cs);
  scree__log(ctx, SCREE_LOG_INFO, "tune %s %s: %s is bad: %s", op->name, key->bucket, cs,
             reason);
  if (!ctx->caches || !ctx->caches->user) return;
  scree__ckey k = *key;
  if (any_bucket) snprintf(k.bucket, sizeof k.bucket, "*");
  scree__cache_record_bad(ctx->caches->user, &k, cs, scree__nvrtc_version(ctx), reason);
}

/* Asks the policy for pin's candidates (into cl, allocated here; the
 * caller frees cl->cfg) and makes the tuner's candidates of them (*c, not
 * compiled yet) and their outcomes (*out, none timed yet). */
static scree_status candidates(const scree__policy *pol, const scree__policy_in *pin,
                               scree__cands *cl, cand **c, scree__outcome **out) {
  memset(cl, 0, sizeof *cl);
  cl->cap = SCREE__MAX_CANDIDATES;
  cl->cfg = calloc((size_t)cl->cap, sizeof *cl->cfg);
  const scree_status st = cl->cfg ? pol->candidates(pol, pin, cl) : SCREE_ERROR_OUT_OF_MEMORY;
  if (st) return st;
  const size_t m = cl->n > 0 ? (size_t)cl->n : 1;
  *c = calloc(m, sizeof **c);
  *out = calloc(m, sizeof **out);
  if (!*c || !*out) return SCREE_ERROR_OUT_OF_MEMORY;
  for (int i = 0; i < cl->n; i++) {
    (*c)[i].cfg = cl->cfg[i];
    (*c)[i].cst = SCREE_ERROR_INTERNAL; /* until compiled */
  }
  return SCREE_OK;
}

/* ---- compile ------------------------------------------------------------------ */

typedef struct cjob {
  scree_context *ctx;
  const scree__op *op;
  const scree__variant *var;
  cand *c;
  int n, done, compiled;
  pthread_mutex_t lock;
  const scree__tune_opts *o;
} cjob;

static void compile_one(void *p, int k) {
  cjob *j = p;
  cand *c = &j->c[k];
  char target[16];
  scree__target_arch(j->ctx->arch, j->ctx->sm, &j->op->impls[c->cfg.impl], target);
  int compiled = 0;
  c->cst = scree__cubin_get(j->ctx->nvrtc, j->op, &c->cfg, j->var, target, &c->cubin,
                            &c->cubin_size, &c->log, &compiled);
  /* One line per candidate, once its cubin is known: whether this tune
   * compiled it or took it from the process's table. */
  if (j->ctx->log_level >= SCREE_LOG_DEBUG) {
    char cs[128];
    scree__config_str(j->op, &c->cfg, cs, sizeof cs);
    const char *how = compiled ? (c->cst ? "compile failed" : "compiled")
                               : (c->cst ? "failed (an earlier compile's error, reused)"
                                         : "reused (compiled by an earlier tune or another "
                                           "context)");
    scree__log(j->ctx, SCREE_LOG_DEBUG, "candidate %s %s for %s: %s", j->op->name, cs, target,
               how);
  }
  pthread_mutex_lock(&j->lock);
  const int done = ++j->done;
  j->compiled += compiled;
  if (j->o->progress) j->o->progress(j->o->user, done, j->n, "compile");
  pthread_mutex_unlock(&j->lock);
}

/* Compiles the candidates through the process's cubin table: what an
 * earlier tune, or another context of the same arch, compiled (or is
 * compiling) is taken from it. *compiled: how many this tune compiled. */
static void compile_all(scree_context *ctx, const scree__op *op, const scree__variant *var,
                        cand *c, int n, const scree__tune_opts *o, int *compiled) {
  cjob j = {.ctx = ctx, .op = op, .var = var, .c = c, .n = n, .o = o};
  pthread_mutex_init(&j.lock, NULL);
  scree__parallel_for(n, o->threads, compile_one, &j);
  pthread_mutex_destroy(&j.lock);
  __atomic_fetch_add(&ctx->counters.compiles, (uint64_t)j.compiled, __ATOMIC_RELAXED);
  *compiled = j.compiled;
}

/* ---- run: check, then time --------------------------------------------------- */

static void first_line(const char *s, char *out, size_t n) {
  if (!s) s = "";
  /* Skip NVRTC's "NVRTC_ERROR_COMPILATION: " prefix to the first error line. */
  const char *e = strstr(s, "error");
  const char *start = e ? e : s;
  size_t len = strcspn(start, "\n");
  if (len >= n) len = n - 1;
  memcpy(out, start, len);
  out[len] = 0;
}

/* Where this tune runs its candidates: the options, else
 * SCREE_TUNE_ISOLATION (a worker process unless "off" or "0"). */
static int isolated(const scree__tune_opts *o) {
  if (o->isolate >= 0) return o->isolate;
  const char *e = getenv("SCREE_TUNE_ISOLATION");
  return !(e && (!strcmp(e, "off") || !strcmp(e, "0")));
}

static scree__trial_mode test_mode(const scree__tune_opts *o, const char *cs) {
  if (o->poison_config && !strcmp(o->poison_config, cs)) return SCREE__TRIAL_WRONG;
  if (o->fault_config && !strcmp(o->fault_config, cs)) return SCREE__TRIAL_FAULT;
  if (o->hang_config && !strcmp(o->hang_config, cs)) return SCREE__TRIAL_HANG;
  return SCREE__TRIAL_NORMAL;
}

/* A wall-clock limit of the worker: the option's, else the environment
 * variable's, else the default, in seconds. */
static double limit_s(double given, const char *env, double dflt) {
  if (given > 0) return given;
  const char *e = getenv(env);
  char *end;
  const double v = e && *e ? strtod(e, &end) : 0;
  return e && *e && !*end && v > 0 && v < 1e7 ? v : dflt;
}

static double bucket_limit_s(const scree__tune_opts *o) {
  return limit_s(o->bucket_limit_s, "SCREE_TUNE_BUCKET_TIMEOUT", 600);
}

/* Runs the compiled candidates (in the worker, or here with isolation
 * off) and fills out[i] for each candidate c[i]; records the failures as
 * bad. dflt_at: the default config's index in c, or -1. */
static scree_status run_all(scree_context *ctx, const scree__op *op, const scree__variant *var,
                            const scree__bucket *b, const scree__ckey *key, cand *c,
                            scree__outcome *out, int n, int dflt_at, const scree__tune_opts *o,
                            scree__tune_result *res) {
  scree__trial *t = calloc((size_t)(n > 0 ? n : 1), sizeof *t);
  int *of = calloc((size_t)(n > 0 ? n : 1), sizeof *of); /* trial -> candidate */
  if (!t || !of) {
    free(t);
    free(of);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "tuner: trials");
  }
  int m = 0;
  for (int i = 0; i < n; i++) {
    cand *k = &c[i];
    if (k->cst != SCREE_OK) {
      char line[200];
      first_line(k->log, line, sizeof line);
      snprintf(k->why, sizeof k->why, "compile: %s", line);
      /* Only a compilation error is the config's fault; out of memory or
       * an NVRTC failure may pass next time. */
      if (k->cst == SCREE_ERROR_COMPILE) record_bad(ctx, key, op, &k->cfg, 1, k->why);
      res->failed++;
      continue;
    }
    char cs[128];
    scree__config_str(op, &k->cfg, cs, sizeof cs);
    t[m].cfg = k->cfg;
    t[m].cubin = k->cubin;
    t[m].cubin_size = k->cubin_size;
    t[m].mode = test_mode(o, cs);
    of[m++] = i;
  }
  const uint64_t seed = scree__fresh_seed();
  scree_status st = SCREE_OK;
  if (m > 0) {
    const scree__trial_opts to = {
        .reps = o->reps,
        .warmup = o->warmup,
        .time_limit_ms = o->time_limit_ms,
        .candidate_limit_s = limit_s(o->candidate_limit_s, "SCREE_TUNE_CANDIDATE_TIMEOUT", 30),
        .bucket_limit_s = bucket_limit_s(o),
        .progress = o->progress,
        .user = o->user};
    scree__trials_info info;
    memset(&info, 0, sizeof info);
    if (isolated(o))
      st = scree__worker_trials(ctx, op, var, b, seed, &to, t, m, &info, &ctx->tuner->worker);
    else
      st = scree__trials_here(ctx, op, var, b, seed, &to, t, m, &info);
    res->flops = info.flops;
    res->bytes = info.bytes;
    memcpy(res->problem, info.problem, sizeof res->problem);
    res->workers = info.workers;
  }
  for (int j = 0; j < m; j++) {
    const int i = of[j];
    cand *k = &c[i];
    if (!t[j].ran) continue;
    snprintf(k->why, sizeof k->why, "%s", t[j].why);
    if (t[j].st != SCREE_OK) {
      if (t[j].record) record_bad(ctx, key, op, &k->cfg, t[j].record == 2, k->why);
      res->failed++;
      continue;
    }
    out[i].ok = 1;
    out[i].median = t[j].median;
    out[i].spread = t[j].spread;
    res->timed++;
    if (i == dflt_at) res->default_us = out[i].median;
  }
  free(t);
  free(of);
  return st;
}

/* ---- pick and store -------------------------------------------------------------- */

/* Why nothing won, as a status and a message. */
static scree_status no_winner(scree_context *ctx, const scree__op *op, const scree__ckey *key,
                              const cand *c, int n, const scree__tune_result *res) {
  int compiled = 0;
  const char *why = NULL;
  for (int i = 0; i < n; i++) {
    if (c[i].cst == SCREE_OK) compiled++;
    if (!why && c[i].why[0]) why = c[i].why;
  }
  const scree_status st = n == 0         ? SCREE_ERROR_INVALID_CONFIG
                          : compiled == 0 ? SCREE_ERROR_COMPILE
                                          : SCREE_ERROR_WRONG_ANSWER;
  return scree__fail(ctx, st,
                     "tune %s %s %s: no candidate compiled and computed the right answer "
                     "(%d tried, %d known bad%s%s)",
                     op->name, key->bucket, key->dtype, n, res->known_bad,
                     why ? "; first failure: " : "", why ? why : "");
}

static void store(scree_context *ctx, const scree__op *op, const scree__ckey *key,
                  const cand *w, const scree__outcome *wo) {
  if (!ctx->caches || !ctx->caches->user) return;
  scree__centry e;
  memset(&e, 0, sizeof e);
  e.key = *key;
  scree__config_str(op, &w->cfg, e.config, sizeof e.config);
  e.median_us = wo->median;
  e.spread_us = wo->spread;
  snprintf(e.device_name, sizeof e.device_name, "%.127s", ctx->info.name);
  e.sm_count = ctx->info.sm_count;
  e.driver_version = ctx->driver_version;
  e.nvrtc_version = scree__nvrtc_version(ctx);
  e.cubin = w->cubin;
  e.cubin_size = w->cubin_size;
  int replaced = 0;
  const scree_status st = scree__cache_put(ctx->caches->user, &e, &replaced);
  if (st)
    scree__log(ctx, SCREE_LOG_WARN, "could not store the tuned config: %s", scree_status_str(st));
  else
    scree__cache_delete_miss(ctx->caches->user, key); /* answered now */
}

/* With reuse_cached: the user cache's entry, if it is there and loads. */
static int reuse(scree_context *ctx, const scree__op *op, const scree__variant *var,
                 const scree__ckey *key, scree__tune_result *res) {
  scree__centry e;
  if (!ctx->caches || !ctx->caches->user ||
      scree__cache_get(ctx->caches->user, key, &e) != SCREE_OK)
    return 0;
  scree__target t;
  scree__target_of(ctx, &t);
  scree__kernel k;
  const int ok = e.cubin_ok && !scree__config_parse(op, e.config, &res->cfg, NULL, 0) &&
                 scree__config_check(op, &res->cfg, var, &t, NULL, 0) &&
                 scree__kernel_from_cubin(ctx, op, &res->cfg, var, e.cubin, &k) == SCREE_OK;
  res->median_us = e.median_us;
  res->spread_us = e.spread_us;
  scree__centry_free(&e);
  return ok;
}

scree_status scree__tune(scree_context *ctx, const scree__op *op, const scree__variant *var,
                         const scree__bucket *b, const scree__tune_opts *opts,
                         scree__tune_result *res) {
  scree__tune_opts o;
  if (opts)
    o = *opts;
  else
    scree__tune_opts_init(&o);
  memset(res, 0, sizeof *res);
  if (!ctx->cu) return scree__fail(ctx, SCREE_ERROR_NO_DEVICE, "offline context");
  if (!ctx->nvrtc) return scree__fail(ctx, SCREE_ERROR_NO_NVRTC, "tuning needs NVRTC");
  const double t0 = scree__now();
  struct scree__tuner *tu = ctx->tuner;
  pthread_mutex_lock(&tu->lock);
  scree__ckey key;
  scree__make_key(ctx, op, var, b, &key);
  snprintf(res->bucket, sizeof res->bucket, "%s", key.bucket);
  /* One tune of a bucket at a time across processes too: another process
   * that holds the bucket's lock is tuning it. */
  int lockfd = -1;
  scree__cache *uc = ctx->caches ? ctx->caches->user : NULL;
  if (uc && scree__cache_tune_lock(uc, &key, 0, 0, &lockfd) == 0) {
    if (o.busy_default) {
      res->busy = 1;
      res->seconds = scree__now() - t0;
      pthread_mutex_unlock(&tu->lock);
      return SCREE_OK;
    }
    const double limit = bucket_limit_s(&o) + 120;
    scree__log(ctx, SCREE_LOG_INFO, "tune %s %s %s: another process is tuning it; waiting",
               op->name, key.bucket, key.dtype);
    if (scree__cache_tune_lock(uc, &key, 1, limit, &lockfd) == 0) {
      pthread_mutex_unlock(&tu->lock);
      return scree__fail(ctx, SCREE_ERROR_TIMEOUT,
                         "tune %s %s %s: another process held the bucket's tuning lock "
                         "(%s.tune-lock) for over %.0f s",
                         op->name, key.bucket, key.dtype, scree__cache_path(uc), limit);
    }
  }
  if (o.reuse_cached && reuse(ctx, op, var, &key, res)) {
    scree__cache_tune_unlock(lockfd);
    res->seconds = scree__now() - t0;
    pthread_mutex_unlock(&tu->lock);
    return SCREE_OK;
  }
  scree__count(&ctx->counters.tunes);
  res->tuned = 1;
  _Alignas(16) unsigned char rep[SCREE__ARGS_MAX];
  memset(rep, 0, sizeof rep);
  scree__bucket cb; /* a batch-invariant bucket: its representative batch */
  scree__bucket_concrete(op, b, &cb);
  op->representative(&cb, var, 0, rep);

  const scree__policy *pol = o.policy    ? o.policy
                              : o.explore ? &scree__policy_explore
                                          : &scree__policy_default;
  const scree__policy_in pin = {
      .ctx = ctx, .op = op, .var = var, .rep = rep, .key = &key, .noise = o.noise};
  scree__cands cl;
  cand *c = NULL;
  scree__outcome *out = NULL;
  scree_status st = candidates(pol, &pin, &cl, &c, &out);
  const int n = cl.n;
  if (st) {
    free(cl.cfg);
    free(c);
    free(out);
    scree__cache_tune_unlock(lockfd);
    pthread_mutex_unlock(&tu->lock);
    return scree__fail(ctx, st, "tuner: candidate list");
  }
  res->candidates = n;
  res->known_bad = cl.known_bad;
  scree__log(ctx, SCREE_LOG_INFO, "tune %s %s %s: %d candidates (%s), %d known bad", op->name,
             key.bucket, key.dtype, n, cl.source ? cl.source : pol->name, res->known_bad);

  compile_all(ctx, op, var, c, n, &o, &res->compiled);
  res->reused = n - res->compiled;
  const int pushed = scree__ctx_enter(ctx);
  const int dflt_at = scree__cands_find(&cl, &cl.dflt);
  if (!st) st = run_all(ctx, op, var, b, &key, c, out, n, dflt_at, &o, res);
  scree__ctx_leave(ctx, pushed);

  int win = st ? -1 : pol->pick(pol, &pin, out, n);
  if (win >= n || (win >= 0 && !out[win].ok)) win = -1; /* only a timed candidate can win */
  if (!st && win < 0) st = no_winner(ctx, op, &key, c, n, res);
  if (win >= 0) {
    scree__kernel wk;
    st = scree__kernel_from_cubin(ctx, op, &c[win].cfg, var, c[win].cubin, &wk);
  }
  if (!st && win >= 0) {
    res->cfg = c[win].cfg;
    res->median_us = out[win].median;
    res->spread_us = out[win].spread;
    char cs[128];
    scree__config_str(op, &res->cfg, cs, sizeof cs);
    scree__log(ctx, SCREE_LOG_INFO, "tune %s %s %s: winner %s %.2f us (default %.2f us), %d timed",
               op->name, key.bucket, key.dtype, cs, res->median_us, res->default_us, res->timed);
    if (o.store) store(ctx, op, &key, &c[win], &out[win]);
  }
  for (int i = 0; i < n; i++) {
    free(c[i].cubin);
    free(c[i].log);
  }
  free(c);
  free(out);
  free(cl.cfg);
  scree__cache_tune_unlock(lockfd); /* after the store: a waiter finds the row */
  res->seconds = scree__now() - t0;
  pthread_mutex_unlock(&tu->lock);
  return st;
}

scree_status scree__verify_config(scree_context *ctx, const scree__op *op,
                                  const scree__variant *var, const scree__bucket *b,
                                  const scree__config *cfg, const void *cubin,
                                  double *median_us, double *spread_us) {
  if (!ctx->cu) return scree__fail(ctx, SCREE_ERROR_NO_DEVICE, "offline context");
  char why[512] = "", cs[128];
  scree__config_str(op, cfg, cs, sizeof cs);
  scree__target t;
  scree__target_of(ctx, &t);
  if (!scree__config_check(op, cfg, var, &t, why, sizeof why))
    return scree__fail(ctx, SCREE_ERROR_INVALID_CONFIG, "%s: %s", cs, why);
  /* A config that this bucket's calls would narrow cannot run as stored. */
  _Alignas(16) unsigned char rep[SCREE__ARGS_MAX];
  memset(rep, 0, sizeof rep);
  scree__bucket cb; /* a batch-invariant bucket: its representative batch */
  scree__bucket_concrete(op, b, &cb);
  op->representative(&cb, var, 0, rep);
  scree__config adapted = *cfg;
  const scree__impl *im = &op->impls[cfg->impl];
  if (im->adapt) im->adapt(&adapted, var, rep);
  if (memcmp(&adapted, cfg, sizeof adapted))
    return scree__fail(ctx, SCREE_ERROR_INVALID_CONFIG, "%s does not suit this bucket's alignment",
                       cs);
  scree__kernel k;
  scree_status st = cubin ? scree__module_load(ctx, op, cfg, var, cubin, &k)
                          : scree__kernel_get(ctx, op, cfg, var, &k);
  if (st) return st;
  const int pushed = scree__ctx_enter(ctx);
  scree__run chk, tp;
  CUstream stream = NULL;
  const uint64_t seed = scree__fresh_seed();
  scree__config_runner cr = {op, cfg, var, &k};
  st = scree__run_make_bucket(ctx, op, var, b, 1, seed, &chk);
  if (st) goto out;
  if (ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
    scree__run_free(ctx, &chk);
    st = scree__fail(ctx, SCREE_ERROR_CUDA, "cuStreamCreate");
    goto out;
  }
  st = scree__run_check(ctx, &chk, scree__run_config, &cr, stream, 1000, why, sizeof why);
  if (!st && median_us) {
    st = scree__run_make_bucket(ctx, op, var, b, 0, seed + 1, &tp);
    if (!st) {
      double sp = 0;
      st = scree__run_time(ctx, &tp, scree__run_config, &cr, stream, 3, 25, 1, 1000, median_us,
                           &sp, why, sizeof why);
      if (spread_us) *spread_us = sp;
      scree__run_free(ctx, &tp);
    }
  }
  ctx->cu->StreamDestroy(stream);
  scree__run_free(ctx, &chk);
out:
  if (cubin) ctx->cu->ModuleUnload(k.module);
  scree__ctx_leave(ctx, pushed);
  return st;
}
