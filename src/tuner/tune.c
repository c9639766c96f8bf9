/* tune.c - the tuner: candidates, compile (in parallel), run (check, then
 * time), pick, store. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/safelist.h"
#include "tuner/tuner.h"
#include "tuner/worker.h"

#define MAX_CANDIDATES 4096

/* The state a context keeps for tuning: one tune at a time, and the cubins
 * compiled so far. The buckets of one op share most candidates and a cubin
 * depends only on (op, config, variant, target), so a prewarm of many
 * buckets compiles each candidate once. */
typedef struct mval {
  void *cubin;
  size_t size;
} mval;
struct scree__tuner {
  pthread_mutex_t lock;
  scree__htab memo; /* scree__kkey -> mval; used under lock */
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
  scree__htab_init(&t->memo, sizeof(scree__kkey), sizeof(mval));
  ctx->tuner = t;
  return SCREE_OK;
}

void scree__tuner_free(scree_context *ctx) {
  struct scree__tuner *t = ctx->tuner;
  if (!t) return;
  size_t pos = 0;
  void *v;
  while (scree__htab_next(&t->memo, &pos, NULL, &v)) free(((mval *)v)->cubin);
  scree__htab_free(&t->memo);
  scree__worker_free(t->worker);
  pthread_mutex_destroy(&t->lock);
  free(t);
  ctx->tuner = NULL;
}

void scree__default_config(scree_context *ctx, const scree__op *op, const scree__variant *var,
                           const void *args, scree__config *out) {
  char vs[128];
  scree__variant_str(op, var, vs, sizeof vs);
  scree__target t;
  scree__target_of(ctx, &t);
  if (!ctx->safelist || !scree__safelist_default(ctx->safelist, op, vs, out) ||
      !scree__config_check(op, out, var, &t, NULL, 0))
    op->default_config(&t, var, args, out);
  const scree__impl *im = &op->impls[out->impl];
  if (args && im->adapt) im->adapt(out, var, args);
}

/* ---- candidates --------------------------------------------------------- */

typedef struct cand {
  scree__config cfg;
  void *cubin;
  size_t cubin_size;
  char *log;
  scree_status cst; /* compile status */
  double median, spread;
  int ok;
  char why[256]; /* why it failed */
} cand;

static int same_cfg(const scree__config *a, const scree__config *b) {
  return !memcmp(a, b, sizeof *a);
}

static int add_cand(cand *c, int n, const scree__config *cfg) {
  for (int i = 0; i < n; i++)
    if (same_cfg(&c[i].cfg, cfg)) return n;
  if (n >= MAX_CANDIDATES) return n;
  memset(&c[n], 0, sizeof c[n]);
  c[n].cfg = *cfg;
  c[n].cst = SCREE_ERROR_INTERNAL; /* until compiled */
  return n + 1;
}

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

/* The candidate list: the safelist's allowed configs in file order (or the
 * whole space), then the default; each adapted to the bucket's alignment
 * (which may make two one), then those the device cannot run, that cannot
 * win, that are denied or recorded bad are dropped. */
static int candidates(scree_context *ctx, const scree__op *op, const scree__variant *var,
                      const void *rep, const scree__ckey *key, const scree__tune_opts *o,
                      cand *c, scree__config *dflt, scree__tune_result *res, int *whole) {
  char vs[128];
  scree__variant_str(op, var, vs, sizeof vs);
  int n = 0;
  *whole = o->explore || !ctx->safelist;
  scree__config *list = calloc(MAX_CANDIDATES, sizeof *list);
  if (!list) return -1;
  if (!*whole) {
    const int m = scree__safelist_candidates(ctx->safelist, op, vs, list, MAX_CANDIDATES);
    for (int i = 0; i < m && i < MAX_CANDIDATES; i++) n = add_cand(c, n, &list[i]);
    if (n == 0) *whole = 1;
  }
  if (*whole) {
    const int total = scree__config_space(op, list, MAX_CANDIDATES);
    for (int i = 0; i < total && i < MAX_CANDIDATES; i++) n = add_cand(c, n, &list[i]);
  }
  free(list);
  scree__default_config(ctx, op, var, rep, dflt);
  n = add_cand(c, n, dflt); /* adapted to the bucket already */
  int m = 0;
  for (int i = 0; i < n; i++) {
    scree__config a = c[i].cfg;
    const scree__impl *im = &op->impls[a.impl];
    if (im->adapt) im->adapt(&a, var, rep);
    m = add_cand(c, m, &a);
  }
  n = m;
  scree__target t;
  scree__target_of(ctx, &t);
  m = 0;
  for (int i = 0; i < n; i++) {
    const scree__impl *im = &op->impls[c[i].cfg.impl];
    char cs[128];
    if (!scree__config_check(op, &c[i].cfg, var, &t, NULL, 0)) continue;
    if (!same_cfg(&c[i].cfg, dflt) && im->worth_timing && !im->worth_timing(&c[i].cfg, var, rep))
      continue;
    if (ctx->safelist && scree__safelist_denied(ctx->safelist, op, vs, &c[i].cfg)) continue;
    scree__config_str(op, &c[i].cfg, cs, sizeof cs);
    if (ctx->caches && ctx->caches->user &&
        scree__cache_is_bad(ctx->caches->user, key, cs, scree__nvrtc_version(ctx), NULL, 0) == 1) {
      res->known_bad++;
      continue;
    }
    c[m++] = c[i];
  }
  return m;
}

/* ---- compile ------------------------------------------------------------------ */

typedef struct cjob {
  scree_context *ctx;
  const scree__op *op;
  const scree__variant *var;
  cand *c;
  const int *todo; /* indexes into c of the candidates to compile */
  int n, done;
  pthread_mutex_t lock;
  const scree__tune_opts *o;
} cjob;

static void compile_one(void *p, int k) {
  cjob *j = p;
  cand *c = &j->c[j->todo[k]];
  char target[16];
  scree__target_arch(j->ctx->arch, j->ctx->sm, &j->op->impls[c->cfg.impl], target);
  if (j->ctx->log_level >= SCREE_LOG_DEBUG) {
    char cs[128];
    scree__config_str(j->op, &c->cfg, cs, sizeof cs);
    scree__log(j->ctx, SCREE_LOG_DEBUG, "compiling %s %s for %s", j->op->name, cs, target);
  }
  c->cst = scree__compile(j->ctx->nvrtc, j->op, &c->cfg, j->var, target, NULL, &c->cubin,
                          &c->cubin_size, &c->log);
  pthread_mutex_lock(&j->lock);
  const int done = ++j->done;
  if (j->o->progress) j->o->progress(j->o->user, done, j->n, "compile");
  pthread_mutex_unlock(&j->lock);
}

/* Compiles what no earlier tune of this context compiled already (tuning
 * is serialized, so the memo needs no lock of its own). */
static scree_status compile_all(scree_context *ctx, const scree__op *op,
                                const scree__variant *var, cand *c, int n,
                                const scree__tune_opts *o) {
  struct scree__tuner *t = ctx->tuner;
  int *todo = calloc((size_t)(n > 0 ? n : 1), sizeof *todo);
  if (!todo) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "tuner: compile list");
  int ntodo = 0;
  for (int i = 0; i < n; i++) {
    const scree__kkey key = scree__kkey_of(op, &c[i].cfg, var);
    const mval *mv = scree__htab_find(&t->memo, &key);
    if (mv && (c[i].cubin = malloc(mv->size))) {
      memcpy(c[i].cubin, mv->cubin, mv->size);
      c[i].cubin_size = mv->size;
      c[i].cst = SCREE_OK;
    } else {
      todo[ntodo++] = i;
    }
  }
  cjob j = {.ctx = ctx, .op = op, .var = var, .c = c, .todo = todo, .n = ntodo, .o = o};
  pthread_mutex_init(&j.lock, NULL);
  scree__parallel_for(ntodo, o->threads, compile_one, &j);
  pthread_mutex_destroy(&j.lock);
  for (int k = 0; k < ntodo; k++) {
    cand *x = &c[todo[k]];
    if (x->cst != SCREE_OK) continue;
    const scree__kkey key = scree__kkey_of(op, &x->cfg, var);
    mval mv = {malloc(x->cubin_size), x->cubin_size};
    if (!mv.cubin) continue;
    memcpy(mv.cubin, x->cubin, x->cubin_size);
    if (!scree__htab_insert(&t->memo, &key, &mv)) free(mv.cubin);
  }
  free(todo);
  __atomic_fetch_add(&ctx->counters.compiles, (uint64_t)ntodo, __ATOMIC_RELAXED);
  return SCREE_OK;
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

/* The candidates run in this process, in order, until one breaks the
 * context (isolation off). */
static scree_status trials_here(scree_context *ctx, const scree__op *op,
                                const scree__variant *var, const scree__bucket *b,
                                uint64_t seed, const scree__tune_opts *o, scree__trial *t,
                                int n, scree__tune_result *res) {
  scree__run chk, tp;
  CUstream stream = NULL;
  scree_status st = scree__run_make_bucket(ctx, op, var, b, 1, seed, &chk);
  if (st) return st;
  if ((st = scree__run_make_bucket(ctx, op, var, b, 0, seed + 1, &tp))) {
    scree__run_free(ctx, &chk);
    return st;
  }
  res->flops = tp.p.flops;
  res->bytes = tp.p.bytes;
  snprintf(res->problem, sizeof res->problem, "%s", tp.p.desc);
  if (ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
    scree__run_free(ctx, &chk);
    scree__run_free(ctx, &tp);
    return scree__fail(ctx, SCREE_ERROR_CUDA, "cuStreamCreate");
  }
  for (int i = 0; i < n; i++) {
    if (o->progress) o->progress(o->user, i + 1, n, "time");
    if (t[i].mode == SCREE__TRIAL_FAULT || t[i].mode == SCREE__TRIAL_HANG) {
      t[i].ran = 1;
      t[i].st = SCREE_ERROR_INVALID_ARGUMENT;
      snprintf(t[i].why, sizeof t[i].why, "fault and hang tests need the tuning worker");
      continue;
    }
    scree__trial_run(ctx, op, var, &chk, &tp, stream, o, &t[i]);
    if (t[i].fatal) {
      st = scree__cu_fail(ctx, ctx->cu->CtxSynchronize(), SCREE_ERROR_CUDA,
                          "the CUDA context failed while tuning (recorded the config as bad)");
      break;
    }
  }
  ctx->cu->StreamDestroy(stream);
  scree__run_free(ctx, &chk);
  scree__run_free(ctx, &tp);
  return st;
}

static scree_status run_all(scree_context *ctx, const scree__op *op, const scree__variant *var,
                            const scree__bucket *b, const scree__ckey *key, cand *c, int n,
                            const scree__config *dflt, const scree__tune_opts *o,
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
    if (isolated(o))
      st = scree__worker_trials(ctx, op, var, b, seed, o, t, m, res, &ctx->tuner->worker);
    else
      st = trials_here(ctx, op, var, b, seed, o, t, m, res);
  }
  for (int j = 0; j < m; j++) {
    cand *k = &c[of[j]];
    if (!t[j].ran) continue;
    snprintf(k->why, sizeof k->why, "%s", t[j].why);
    if (t[j].st != SCREE_OK) {
      if (t[j].record) record_bad(ctx, key, op, &k->cfg, t[j].record == 2, k->why);
      res->failed++;
      continue;
    }
    k->median = t[j].median;
    k->spread = t[j].spread;
    k->ok = 1;
    res->timed++;
    if (same_cfg(&k->cfg, dflt)) res->default_us = k->median;
  }
  free(t);
  free(of);
  return st;
}

/* ---- pick and store -------------------------------------------------------------- */

/* The first candidate (in candidate order) within the noise band of the
 * fastest wins, so runs that differ only by noise pick the same config. */
static int pick(const cand *c, int n, double noise) {
  double best = INFINITY;
  for (int i = 0; i < n; i++)
    if (c[i].ok && c[i].median < best) best = c[i].median;
  for (int i = 0; i < n; i++)
    if (c[i].ok && c[i].median <= best * (1 + noise)) return i;
  return -1;
}

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
                  const cand *w) {
  if (!ctx->caches || !ctx->caches->user) return;
  scree__centry e;
  memset(&e, 0, sizeof e);
  e.key = *key;
  scree__config_str(op, &w->cfg, e.config, sizeof e.config);
  e.median_us = w->median;
  e.spread_us = w->spread;
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
    const double limit = scree__tune_bucket_limit(&o) + 120;
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
  op->representative(b, var, 0, rep);

  cand *c = calloc(MAX_CANDIDATES, sizeof *c);
  scree__config dflt;
  int whole = 0;
  const int n = c ? candidates(ctx, op, var, rep, &key, &o, c, &dflt, res, &whole) : -1;
  if (n < 0) {
    free(c);
    scree__cache_tune_unlock(lockfd);
    pthread_mutex_unlock(&tu->lock);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "tuner: candidate list");
  }
  res->candidates = n;
  scree__log(ctx, SCREE_LOG_INFO, "tune %s %s %s: %d candidates (%s), %d known bad", op->name,
             key.bucket, key.dtype, n, whole ? "whole space" : "safelist", res->known_bad);

  scree_status st = compile_all(ctx, op, var, c, n, &o);
  const int pushed = scree__ctx_enter(ctx);
  if (!st) st = run_all(ctx, op, var, b, &key, c, n, &dflt, &o, res);
  scree__ctx_leave(ctx, pushed);

  const int win = st ? -1 : pick(c, n, o.noise);
  if (!st && win < 0) st = no_winner(ctx, op, &key, c, n, res);
  if (win >= 0) {
    scree__kernel wk;
    st = scree__kernel_from_cubin(ctx, op, &c[win].cfg, var, c[win].cubin, &wk);
  }
  if (!st && win >= 0) {
    res->cfg = c[win].cfg;
    res->median_us = c[win].median;
    res->spread_us = c[win].spread;
    char cs[128];
    scree__config_str(op, &res->cfg, cs, sizeof cs);
    scree__log(ctx, SCREE_LOG_INFO, "tune %s %s %s: winner %s %.2f us (default %.2f us), %d timed",
               op->name, key.bucket, key.dtype, cs, res->median_us, res->default_us, res->timed);
    if (o.store) store(ctx, op, &key, &c[win]);
  }
  for (int i = 0; i < n; i++) {
    free(c[i].cubin);
    free(c[i].log);
  }
  free(c);
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
  op->representative(b, var, 0, rep);
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
