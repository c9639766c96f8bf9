/* keys.h - the cache key of a tuned config on this context's device. Not
 * API. */
#ifndef SCREE_KEYS_H
#define SCREE_KEYS_H

#include "ops/op.h"
#include "store/cache.h"

/* op, bucket text, variant text, causal flag, the context's arch and the
 * op's source hash. */
void scree__make_key(const scree_context *ctx, const scree__op *op,
                     const scree__variant *var, const scree__bucket *b,
                     scree__ckey *key);
/* The context's NVRTC version as the cache stores it (major*1000 +
 * minor*10). */
int scree__nvrtc_version(const scree_context *ctx);

#endif
