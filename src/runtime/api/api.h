/* api.h - the API layer's internals: the call path from a public entry, and
 * what context.c creates. Not API. */
#ifndef SCREE_API_H
#define SCREE_API_H

#include "tuner/tuner.h"

/* A public op call: argument checks (scree__args_check), the plan lookup,
 * the launch. */
scree_status scree__call(scree_context *ctx, const scree__op *op, const void *args,
                         void *stream);
/* Runs exactly cfg (no adapt, no plan): benchmarks and tests. The caller has
 * validated args and made sure cfg suits them. */
scree_status scree__run_exact(scree_context *ctx, const scree__op *op, const scree__config *cfg,
                              const scree__variant *var, const void *args, void *stream);
/* A harness runner that calls through the public entry (user: the op). */
scree_status scree__run_config_api(void *user, scree_context *ctx, const void *args,
                                   CUstream stream);

/* The (adapted) config the plan of this call runs, if a call of its bucket
 * ran already: 1 and *cfg filled, else 0. */
int scree__plan_config(scree_context *ctx, const scree__op *op, const scree__variant *var,
                       const void *args, scree__config *cfg);

scree_status scree__plans_create(scree_context *ctx);
void scree__plans_free(scree_context *ctx);

/* The context's read-write user cache, or NULL when it could not be opened
 * or caching is off. */
scree__cache *scree__user_cache(scree_context *ctx);

/* The pinned cache a context of opts runs from (docs/cache.md#a-pinned-cache):
 * opts->pin_path when it is set ("" means none), else $SCREE_PIN when it is
 * set and not empty, else NULL. */
const char *scree__options_pin(const scree_options *opts);

/* Whether a context of opts runs in batch-invariant mode: opts->batch_invariant
 * when it is nonzero (1 on, -1 off), else $SCREE_BATCH_INVARIANT set, not
 * empty and not "0". */
int scree__options_batch_invariant(const scree_options *opts);

/* The bucket of a call on ctx (dispatch.c): scree__bucket_of, with the
 * batch dimensions "any" (SCREE__BUCKET_ANY) in batch-invariant mode, so
 * that the plan, the cache key and so the config are the same for every
 * batch. */
void scree__call_bucket(const scree_context *ctx, const scree__op *op, const scree__variant *var,
                        const void *args, scree__bucket *b);
/* The args a bucket's default config is chosen for: the call's, or for a
 * batch-invariant bucket the representative batch of its any values
 * (written to rep, SCREE__ARGS_MAX bytes), so that the default does not
 * depend on the call's batch either. The call's own args still adapt it
 * (to its alignment, which no batch size changes). */
const void *scree__default_args(const scree__op *op, const scree__variant *var,
                                const scree__bucket *b, const void *args, void *rep);

/* A cache winner as a row of the administration interface (admin.c);
 * with_cubin: e's cubin was read, and its cubin_ok holds. */
struct scree__admin_row;
void scree__admin_row_of(const scree__centry *e, int with_cubin, struct scree__admin_row *r);
/* 0 if a winner's key is outside the filter's bucket or dtype (admin.c).
 * The cache's queries apply the filter's arch and op themselves. */
struct scree__admin_filter;
int scree__admin_keeps(const struct scree__admin_filter *f, const scree__ckey *k);

#endif
