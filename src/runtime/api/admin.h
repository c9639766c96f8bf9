/*
 * admin.h - what scree-tune and the benchmarks use beyond the public API:
 * the op registry and text forms, the model presets, the cache and
 * safelist files, the tuner,
 * verify and the problem harness, and through them the context's device
 * handles (ctx->cu, scree__ctx_enter) and the compiler (scree__compile) for
 * the demo's device buffers and offline compiles. Explicitly internal: not
 * installed, no stability promise. Programs outside src/ include only
 * scree.h and this; tests/test_layers.cmake holds src/cli/ to that.
 */
#ifndef SCREE_ADMIN_H
#define SCREE_ADMIN_H

#include "api/api.h"
#include "ops/presets.h"
#include "ops/registry.h"
#include "store/cache.h"
#include "store/keys.h"
#include "store/safelist.h"
#include "store/tuned.h"
#include "tuner/harness.h"
#include "tuner/tuner.h"
#include "tuner/worker.h"

/* The context's read-write user cache, or NULL when it could not be opened
 * or caching is off. */
scree__cache *scree__user_cache(scree_context *ctx);

#endif
