/* dispatch.c - a call from its public entry to the launch.
 *
 * scree_<op>() checks its arguments (its schema's checks and the op's own,
 * scree__args_check), then looks up the plan for (op, variant, bucket,
 * alignment class) in the in-memory plan table and launches. Only the
 * first call of a plan consults the cache stack (user, then shipped, then
 * the shipped tuned configs) and, on a miss, follows the miss policy: the
 * default config (recording the miss), tuning now, or an error. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "ops/registry.h"
#include "store/safelist.h"
#include "tuner/tuner.h"

typedef struct pkey {
  const scree__op *op;
  scree__variant var;
  scree__bucket b;
  int64_t aclass;
} pkey;
typedef struct pval {
  scree__config cfg; /* adapted */
  scree__kernel k;
} pval;
/* The plan table: pkey -> pval (its kernel is the module table's). */
scree_status scree__plans_create(scree_context *ctx) {
  ctx->plans = scree__ltab_new(sizeof(pkey), sizeof(pval));
  return ctx->plans ? SCREE_OK : SCREE_ERROR_OUT_OF_MEMORY;
}

void scree__plans_free(scree_context *ctx) {
  scree__ltab_free(ctx->plans);
  ctx->plans = NULL;
}

void scree__call_bucket(const scree_context *ctx, const scree__op *op, const scree__variant *var,
                        const void *args, scree__bucket *b) {
  scree__bucket_of(op, var, args, b);
  if (ctx->batch_invariant) scree__bucket_invariant(op, b);
}

/* The plan table's key of a call: op, variant, bucket (scree__call_bucket),
 * adapt class. */
static void plan_key(const scree_context *ctx, const scree__op *op, const scree__variant *var,
                     const void *args, pkey *key) {
  memset(key, 0, sizeof *key); /* hashed bytewise */
  key->op = op;
  key->var = *var;
  scree__call_bucket(ctx, op, var, args, &key->b);
  key->aclass = scree__adapt_class(op, var, args);
}

const void *scree__default_args(const scree__op *op, const scree__variant *var,
                                const scree__bucket *b, const void *args, void *rep) {
  if (!scree__bucket_is_invariant(op, b)) return args;
  scree__bucket cb;
  scree__bucket_concrete(op, b, &cb);
  memset(rep, 0, SCREE__ARGS_MAX);
  op->representative(&cb, var, 0, rep);
  return rep;
}

/* Whether a cache stack entry gives this call its config (in cfg): it
 * parses and passes the check for this device, and its cubin, if it has
 * one and it serves the call as stored (adapt keeps the config), loads.
 * A config without a cubin (a shipped tuned config), or one that adapt
 * narrows, is compiled by the caller. */
static int use_entry(scree_context *ctx, const scree__op *op, const scree__variant *var,
                     const void *args, const scree__ckey *key, const scree__centry *e,
                     scree__cache_level level, scree__config *cfg) {
  char why[256];
  scree__target t;
  scree__target_of(ctx, &t);
  if (scree__config_parse(op, e->config, cfg, why, sizeof why) ||
      !scree__config_check(op, cfg, var, &t, why, sizeof why)) {
    scree__log(ctx, SCREE_LOG_WARN, "%s %s: ignoring %s \"%s\": %s", op->name, key->bucket,
               level == SCREE__LEVEL_TUNED ? "shipped tuned config" : "cached config", e->config,
               why);
    return 0;
  }
  if (level != SCREE__LEVEL_TUNED) {
    scree__config adapted = *cfg;
    const scree__impl *im = &op->impls[cfg->impl];
    if (im->adapt) im->adapt(&adapted, var, args);
    scree__kernel k;
    if (!memcmp(&adapted, cfg, sizeof adapted) &&
        scree__kernel_from_cubin(ctx, op, cfg, var, e->cubin, &k) != SCREE_OK) {
      char err[512];
      scree__error_copy(ctx, err, sizeof err);
      scree__log(ctx, SCREE_LOG_WARN, "%s %s: cached cubin for %s does not load: %s", op->name,
                 key->bucket, e->config, err);
      return 0;
    }
  }
  scree__count(level == SCREE__LEVEL_USER ? &ctx->counters.user_cache_hits
                                          : &ctx->counters.shipped_cache_hits);
  if (level == SCREE__LEVEL_TUNED)
    scree__log(ctx, SCREE_LOG_DEBUG, "%s %s %s: shipped tuned config (%s, %.2f us): %s",
               op->name, key->bucket, key->dtype, e->device_name, e->median_us, e->config);
  else
    scree__log(ctx, SCREE_LOG_DEBUG, "%s %s %s: %s cache hit: %s", op->name, key->bucket,
               key->dtype, level == SCREE__LEVEL_USER ? "user" : "shipped", e->config);
  return 1;
}

/* The config of a bucket from the cache stack: the first entry, in the
 * stack's order, that this call can use (use_entry); one it cannot is
 * passed over for the next level's. 1 if found. */
static int from_cache(scree_context *ctx, const scree__op *op, const scree__variant *var,
                      const void *args, const scree__ckey *key, scree__config *cfg) {
  if (!ctx->caches) return 0;
  scree__centry e;
  scree__cache_level level;
  for (int pos = 0; scree__cache_stack_next(ctx->caches, key, &pos, &e, &level) == SCREE_OK;) {
    const int have = use_entry(ctx, op, var, args, key, &e, level, cfg);
    scree__centry_free(&e);
    if (have) return 1;
  }
  return 0;
}

/* Decides the config of a new plan: cache, then the miss policy; loads the
 * kernel. *temporary: the config serves this call only, not the plan
 * (another process is tuning the bucket; SCREE_TUNE_BUSY=default). */
static scree_status plan_build(scree_context *ctx, const scree__op *op, const scree__variant *var,
                               const void *args, const scree__bucket *b, pval *out,
                               int *temporary) {
  scree__config cfg;
  scree__ckey key;
  scree__make_key(ctx, op, var, b, &key);
  *temporary = 0;
  _Alignas(16) unsigned char rep[SCREE__ARGS_MAX];
  const void *dargs = scree__default_args(op, var, b, args, rep);
  char pinned[1024];
  if (from_cache(ctx, op, var, args, &key, &cfg)) {
    /* the cache stack answers; a config it holds no usable cubin for is
     * compiled below */
  } else if (scree__cache_stack_pinned_miss(ctx->caches, &key, pinned, sizeof pinned)) {
    /* pinned: whatever the miss policy, nothing is tuned, recorded or
     * defaulted */
    return scree__fail(ctx, SCREE_ERROR_CACHE_MISS, "%s", pinned);
  } else if (ctx->miss_policy == SCREE_MISS_ERROR) {
    return scree__fail(ctx, SCREE_ERROR_CACHE_MISS,
                       "no tuned config for %s %s %s on %s (miss policy: error); "
                       "run scree-tune prewarm",
                       op->name, key.bucket, key.dtype, ctx->arch);
  } else if (ctx->miss_policy == SCREE_MISS_TUNE) {
    scree__tune_result res;
    scree__tune_opts o;
    scree__tune_opts_init(&o);
    o.reuse_cached = 1; /* another thread or process may have tuned it meanwhile */
    const char *busy = getenv("SCREE_TUNE_BUSY");
    o.busy_default = busy && !strcmp(busy, "default");
    const scree_status st = scree__tune(ctx, op, var, b, &o, &res);
    if (st) return st; /* the tuner's status and message say why */
    cfg = res.cfg;
    if (res.busy) {
      /* Another process is tuning this bucket: the default config for now,
       * and no plan, so that a later call finds its result. */
      scree__default_config(ctx, op, var, dargs, &cfg);
      *temporary = 1;
      scree__log(ctx, SCREE_LOG_DEBUG, "%s %s %s: another process is tuning it, default config",
                 op->name, key.bucket, key.dtype);
    }
  } else {
    scree__default_config(ctx, op, var, dargs, &cfg);
    scree__count(&ctx->counters.safelist_defaults);
    char shape[256];
    scree__shape_str(op, args, shape, sizeof shape);
    if (ctx->caches && ctx->caches->user &&
        scree__cache_record_miss(ctx->caches->user, &key, shape) == SCREE_OK)
      scree__count(&ctx->counters.misses_recorded);
    scree__log(ctx, SCREE_LOG_DEBUG, "%s %s %s: miss, default config", op->name, key.bucket,
               key.dtype);
  }
  const scree__impl *im = &op->impls[cfg.impl];
  if (im->adapt) im->adapt(&cfg, var, args);
  out->cfg = cfg;
  return scree__kernel_get(ctx, op, &cfg, var, &out->k);
}

static scree_status dispatch(scree_context *ctx, const scree__op *op, const scree__variant *var,
                             const void *args, void *stream) {
  if (!ctx->cu)
    return scree__fail(ctx, SCREE_ERROR_NO_DEVICE, "this context has no device (offline)");
  pkey key;
  plan_key(ctx, op, var, args, &key);
  pval v;
  if (scree__ltab_get(ctx->plans, &key, &v)) {
    scree__count(&ctx->counters.memory_hits);
  } else {
    memset(&v, 0, sizeof v);
    int temporary = 0;
    scree_status st = plan_build(ctx, op, var, args, &key.b, &v, &temporary);
    if (st) return st;
    if (temporary) goto launch;
    /* A plan another thread stored first is as good as this one. */
    if (scree__ltab_put(ctx->plans, &key, &v, NULL) < 0)
      return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "plan table");
    /* Building the plan may have noted a failure it recovered from (a
     * cached cubin that did not load): the call itself succeeds. */
    scree__clear_error(ctx);
  }
launch:;
  const int pushed = scree__ctx_enter(ctx);
  const scree_status st =
      op->impls[v.cfg.impl].launch(ctx, &v.k, &v.cfg, var, args, (CUstream)stream);
  scree__ctx_leave(ctx, pushed);
  if (st == SCREE_OK) scree__count(&ctx->counters.calls);
  return st;
}

int scree__plan_config(scree_context *ctx, const scree__op *op, const scree__variant *var,
                       const void *args, scree__config *cfg) {
  pkey key;
  plan_key(ctx, op, var, args, &key);
  pval v;
  if (!scree__ltab_get(ctx->plans, &key, &v)) return 0;
  *cfg = v.cfg;
  return 1;
}

scree_status scree__call(scree_context *ctx, const scree__op *op, const void *args,
                         void *stream) {
  if (!ctx) return SCREE_ERROR_INVALID_ARGUMENT;
  scree__clear_error(ctx);
  if (!args) return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "args is NULL");
  scree__variant var;
  memset(&var, 0, sizeof var);
  int skip = 0;
  const scree_status st = scree__args_check(ctx, op, args, (CUstream)stream, &var, &skip);
  if (st || skip) return st;
  return dispatch(ctx, op, &var, args, stream);
}

/* The public entry of every op in the registry: scree_<name>(). */
#define SCREE__OP_ENTRY_(name, type)                                                    \
  SCREE_EXTERN scree_status scree_##name(scree_context *ctx, const type *args,         \
                                         void *stream) {                               \
    return scree__call(ctx, &scree__op_##name, args, stream);                          \
  }
SCREE__OP_LIST(SCREE__OP_ENTRY_)
#undef SCREE__OP_ENTRY_

scree_status scree__run_config_api(void *user, scree_context *ctx, const void *args,
                                   CUstream stream) {
  return scree__call(ctx, user, args, stream);
}

scree_status scree__run_exact(scree_context *ctx, const scree__op *op, const scree__config *cfg,
                              const scree__variant *var, const void *args, void *stream) {
  if (!ctx->cu)
    return scree__fail(ctx, SCREE_ERROR_NO_DEVICE, "this context has no device (offline)");
  scree__kernel k;
  scree_status st = scree__kernel_get(ctx, op, cfg, var, &k);
  if (st) return st;
  const int pushed = scree__ctx_enter(ctx);
  st = op->impls[cfg->impl].launch(ctx, &k, cfg, var, args, (CUstream)stream);
  scree__ctx_leave(ctx, pushed);
  return st;
}
