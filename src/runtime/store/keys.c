/* keys.c - cache keys from op descriptors. */
#include "store/keys.h"

#include <stdio.h>
#include <string.h>

#include "jit/jit.h"

void scree__make_key(const scree_context *ctx, const scree__op *op,
                     const scree__variant *var, const scree__bucket *b, scree__ckey *k) {
  memset(k, 0, sizeof *k);
  snprintf(k->op, sizeof k->op, "%s", op->name);
  scree__bucket_str(op, b, k->bucket, sizeof k->bucket);
  scree__variant_str(op, var, k->dtype, sizeof k->dtype);
  k->causal = scree__variant_causal(op, var);
  snprintf(k->arch, sizeof k->arch, "%s", ctx->arch);
  snprintf(k->src_hash, sizeof k->src_hash, "%s", scree__source_hash(op));
}

int scree__nvrtc_version(const scree_context *ctx) {
  return ctx->nvrtc_major * 1000 + ctx->nvrtc_minor * 10;
}
