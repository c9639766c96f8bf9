/* dispatch.c - which config a call runs, then the launch. */
#include "internal.h"

scree_status scree__dispatch(scree_context *ctx, const scree__op *op,
                             const scree__variant *var, const void *args,
                             void *stream) {
  if (!ctx->cu)
    return scree__fail(ctx, SCREE_ERROR_NO_DEVICE,
                       "this context has no device (offline)");
  scree__config cfg;
  op->default_config(ctx->sm, var, args, &cfg);
  op->adapt(&cfg, var, args);
  int pushed = scree__ctx_enter(ctx);
  scree__kernel k;
  scree_status st = scree__kernel_get(ctx, op, &cfg, var, &k);
  if (st == SCREE_OK) st = op->launch(ctx, k.fn, &cfg, args, (CUstream)stream);
  scree__ctx_leave(ctx, pushed);
  if (st == SCREE_OK) {
    pthread_mutex_lock(&ctx->lock);
    ctx->counters.calls++;
    ctx->counters.safelist_defaults++;
    pthread_mutex_unlock(&ctx->lock);
  }
  return st;
}

scree_status scree__run_config(scree_context *ctx, const scree__op *op,
                               const scree__config *cfg,
                               const scree__variant *var, const void *args,
                               void *stream) {
  if (!ctx->cu)
    return scree__fail(ctx, SCREE_ERROR_NO_DEVICE,
                       "this context has no device (offline)");
  int pushed = scree__ctx_enter(ctx);
  scree__kernel k;
  scree_status st = scree__kernel_get(ctx, op, cfg, var, &k);
  if (st == SCREE_OK) st = op->launch(ctx, k.fn, cfg, args, (CUstream)stream);
  scree__ctx_leave(ctx, pushed);
  return st;
}
