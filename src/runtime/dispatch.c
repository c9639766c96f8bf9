/* dispatch.c - which config a call runs, then the launch.
 *
 * The hot path is one lookup in the in-memory plan table, keyed by op,
 * variant, shape bucket and alignment class, then cuLaunchKernel. Only the
 * first call of a plan consults the caches (user, then shipped), and on a
 * miss follows the miss policy: the default config (recording the miss),
 * tuning now, or an error. */
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "internal.h"
#include "safelist.h"
#include "tuner.h"

static uint64_t plan_hash(const scree__op *op, const scree__variant *var,
                          uint64_t bucket, int aclass) {
  uint64_t h = (uint64_t)(uintptr_t)op * 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < SCREE__MAX_VARIANT; i++)
    h = (h ^ (uint64_t)(uint32_t)var->v[i]) * 0x100000001b3ull;
  h = (h ^ bucket) * 0x9e3779b97f4a7c15ull;
  h ^= (uint64_t)aclass + (h >> 29);
  return h ? h : 1;
}

static scree__plan *plan_find(scree_context *ctx, const scree__op *op,
                              const scree__variant *var, uint64_t bucket,
                              int aclass, uint64_t h) {
  if (!ctx->plan_cap) return NULL;
  const size_t mask = ctx->plan_cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    scree__plan *p = &ctx->plans[i];
    if (!p->used) return NULL;
    if (p->hash == h && p->op == op && p->bucket == bucket && p->aclass == aclass &&
        !memcmp(&p->var, var, sizeof *var))
      return p;
  }
}

static int plan_insert(scree_context *ctx, const scree__plan *np) {
  if ((ctx->plan_len + 1) * 2 > ctx->plan_cap) {
    const size_t cap = ctx->plan_cap ? ctx->plan_cap * 2 : 64;
    scree__plan *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < ctx->plan_cap; i++) {
      if (!ctx->plans[i].used) continue;
      size_t j = ctx->plans[i].hash & (cap - 1);
      while (t[j].used) j = (j + 1) & (cap - 1);
      t[j] = ctx->plans[i];
    }
    free(ctx->plans);
    ctx->plans = t;
    ctx->plan_cap = cap;
  }
  size_t j = np->hash & (ctx->plan_cap - 1);
  while (ctx->plans[j].used) j = (j + 1) & (ctx->plan_cap - 1);
  ctx->plans[j] = *np;
  ctx->plans[j].used = 1;
  ctx->plan_len++;
  return 0;
}

void scree__plan_table_free(scree_context *ctx) {
  free(ctx->plans);
  ctx->plans = NULL;
  ctx->plan_cap = ctx->plan_len = 0;
}

static void count(uint64_t *counter) { __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

/* Decides the config of a new plan: cache, then the miss policy. Loads the
 * kernel (from a cached cubin when there is one). */
static scree_status plan_build(scree_context *ctx, const scree__op *op,
                               const scree__variant *var, const void *args,
                               uint64_t bucket, scree__plan *out) {
  scree__config cfg;
  int have = 0;
  scree__ckey key;
  scree__make_key(ctx, op, var, bucket, &key);
  if (ctx->caches) {
    scree__centry e;
    scree__cache_level level = SCREE__LEVEL_NONE;
    if (scree__cache_stack_get(ctx->caches, &key, &e, &level) == SCREE_OK) {
      char why[256];
      if (scree__config_parse(op, e.config, &cfg, why, sizeof why) == 0 &&
          op->check(&cfg, var, why, sizeof why)) {
        /* The cached cubin serves the call only if adapt keeps the config;
         * otherwise the narrowed config is compiled below. */
        scree__config adapted = cfg;
        op->adapt(&adapted, var, args);
        scree_status st = SCREE_OK;
        if (!memcmp(&adapted, &cfg, sizeof cfg)) {
          scree__kernel k;
          st = scree__kernel_from_cubin(ctx, op, &cfg, var, e.cubin, &k);
        }
        if (st == SCREE_OK) {
          have = 1;
          count(level == SCREE__LEVEL_USER ? &ctx->counters.user_cache_hits
                                                : &ctx->counters.shipped_cache_hits);
          scree__log(ctx, SCREE_LOG_DEBUG, "%s %s %s: %s cache hit: %s", op->name,
                     key.bucket, key.dtype, level == SCREE__LEVEL_USER ? "user" : "shipped",
                     e.config);
        } else {
          char err[512];
          scree__error_copy(ctx, err, sizeof err);
          scree__log(ctx, SCREE_LOG_WARN, "%s %s: cached cubin for %s does not load: %s",
                     op->name, key.bucket, e.config, err);
        }
      } else {
        scree__log(ctx, SCREE_LOG_WARN, "%s %s: ignoring cached config \"%s\": %s",
                   op->name, key.bucket, e.config, why);
      }
      scree__centry_free(&e);
    }
  }
  if (!have) {
    switch (ctx->miss_policy) {
      case SCREE_MISS_ERROR:
        return scree__fail(ctx, SCREE_ERROR_CACHE_MISS,
                           "no tuned config for %s %s %s on %s (miss policy: error); "
                           "run scree-tune prewarm", op->name, key.bucket, key.dtype, ctx->arch);
      case SCREE_MISS_TUNE: {
        scree__tune_result res;
        scree__tune_opts o;
        scree__tune_opts_init(&o);
        o.reuse_cached = 1; /* another thread may have tuned it meanwhile */
        scree_status st = scree__tune(ctx, op, var, bucket, &o, &res);
        if (st) return st;
        cfg = res.cfg;
        break;
      }
      default: {
        char vs[64];
        scree__variant_str(op, var, vs, sizeof vs);
        if (!ctx->safelist || !scree__safelist_default(ctx->safelist, op, vs, &cfg))
          op->default_config(ctx->sm, var, args, &cfg);
        count(&ctx->counters.safelist_defaults);
        char shape[128];
        op->shape_str(args, shape, sizeof shape);
        if (ctx->caches && ctx->caches->user &&
            scree__cache_record_miss(ctx->caches->user, &key, shape) == SCREE_OK)
          count(&ctx->counters.misses_recorded);
        scree__log(ctx, SCREE_LOG_DEBUG, "%s %s %s: miss, default config", op->name,
                   key.bucket, key.dtype);
      }
    }
  }
  op->adapt(&cfg, var, args);
  out->cfg = cfg;
  return scree__kernel_get(ctx, op, &cfg, var, &out->k);
}

scree_status scree__dispatch(scree_context *ctx, const scree__op *op,
                             const scree__variant *var, const void *args,
                             void *stream) {
  if (!ctx->cu)
    return scree__fail(ctx, SCREE_ERROR_NO_DEVICE,
                       "this context has no device (offline)");
  const uint64_t bucket = op->bucket_key(args);
  const int aclass = op->adapt_class(var, args);
  const uint64_t h = plan_hash(op, var, bucket, aclass);
  scree__config cfg;
  scree__kernel k = {0};
  pthread_mutex_lock(&ctx->lock);
  const scree__plan *p = plan_find(ctx, op, var, bucket, aclass, h);
  if (p) {
    cfg = p->cfg;
    k = p->k;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (!k.fn) {
    scree__plan np;
    memset(&np, 0, sizeof np);
    scree_status st = plan_build(ctx, op, var, args, bucket, &np);
    if (st) return st;
    np.op = op;
    np.var = *var;
    np.bucket = bucket;
    np.aclass = aclass;
    np.hash = h;
    pthread_mutex_lock(&ctx->lock);
    if (!plan_find(ctx, op, var, bucket, aclass, h) && plan_insert(ctx, &np)) {
      pthread_mutex_unlock(&ctx->lock);
      return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "plan table");
    }
    pthread_mutex_unlock(&ctx->lock);
    cfg = np.cfg;
    k = np.k;
    /* Building the plan may have noted a failure it recovered from (a
     * cached cubin that did not load): the call itself succeeds. */
    scree__clear_error(ctx);
  } else {
    count(&ctx->counters.memory_hits);
  }
  const int pushed = scree__ctx_enter(ctx);
  scree_status st = op->launch(ctx, &k, &cfg, args, (CUstream)stream);
  scree__ctx_leave(ctx, pushed);
  if (st == SCREE_OK) count(&ctx->counters.calls);
  return st;
}

scree_status scree__run_config(scree_context *ctx, const scree__op *op,
                               const scree__config *cfg,
                               const scree__variant *var, const void *args,
                               void *stream) {
  if (!ctx->cu)
    return scree__fail(ctx, SCREE_ERROR_NO_DEVICE,
                       "this context has no device (offline)");
  scree__kernel k;
  scree_status st = scree__kernel_get(ctx, op, cfg, var, &k);
  if (st) return st;
  const int pushed = scree__ctx_enter(ctx);
  st = op->launch(ctx, &k, cfg, args, (CUstream)stream);
  scree__ctx_leave(ctx, pushed);
  return st;
}
