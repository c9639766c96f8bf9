/* policy.c - the tuner's built-in policies: candidate lists from the
 * safelist or the whole space, and the winner within the noise band. */
#include "tuner/policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "store/safelist.h"

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

/* ---- candidate lists ---------------------------------------------------- */

/* Configs compare bytewise: a config is always built from a zeroed one. */
static int same_cfg(const scree__config *a, const scree__config *b) {
  return !memcmp(a, b, sizeof *a);
}

int scree__cands_find(const scree__cands *c, const scree__config *cfg) {
  for (int i = 0; i < c->n; i++)
    if (same_cfg(&c->cfg[i], cfg)) return i;
  return -1;
}

void scree__cands_add(scree__cands *c, const scree__config *cfg) {
  if (c->n < c->cap && scree__cands_find(c, cfg) < 0) c->cfg[c->n++] = *cfg;
}

void scree__policy_finish(const scree__policy_in *in, scree__cands *c) {
  scree_context *ctx = in->ctx;
  const scree__op *op = in->op;
  scree__default_config(ctx, op, in->var, in->rep, &c->dflt);
  scree__cands_add(c, &c->dflt); /* adapted to the bucket already */
  /* Adapted in place: entry i moves to m <= i, and the list before m is
   * the adapted list so far, which the new entry is compared with. */
  const int n = c->n;
  c->n = 0;
  for (int i = 0; i < n; i++) {
    scree__config a = c->cfg[i];
    const scree__impl *im = &op->impls[a.impl];
    if (im->adapt) im->adapt(&a, in->var, in->rep);
    scree__cands_add(c, &a);
  }
  char vs[128];
  scree__variant_str(op, in->var, vs, sizeof vs);
  scree__target t;
  scree__target_of(ctx, &t);
  scree__cache *uc = ctx->caches ? ctx->caches->user : NULL;
  int m = 0;
  for (int i = 0; i < c->n; i++) {
    const scree__config *x = &c->cfg[i];
    const scree__impl *im = &op->impls[x->impl];
    if (!scree__config_check(op, x, in->var, &t, NULL, 0)) continue;
    if (!same_cfg(x, &c->dflt) && im->worth_timing && !im->worth_timing(x, in->var, in->rep))
      continue;
    if (ctx->safelist && scree__safelist_denied(ctx->safelist, op, vs, x)) continue;
    char cs[128];
    scree__config_str(op, x, cs, sizeof cs);
    if (uc && scree__cache_is_bad(uc, in->key, cs, scree__nvrtc_version(ctx), NULL, 0) == 1) {
      c->known_bad++;
      continue;
    }
    c->cfg[m++] = *x;
  }
  c->n = m;
}

/* Appends the whole config space of the op, in scree__config_space's order. */
static scree_status add_space(const scree__op *op, scree__cands *c) {
  scree__config *all = calloc(SCREE__MAX_CANDIDATES, sizeof *all);
  if (!all) return SCREE_ERROR_OUT_OF_MEMORY;
  const int total = scree__config_space(op, all, SCREE__MAX_CANDIDATES);
  for (int i = 0; i < total && i < SCREE__MAX_CANDIDATES; i++) scree__cands_add(c, &all[i]);
  free(all);
  c->source = "whole space";
  return SCREE_OK;
}

static scree_status default_candidates(const scree__policy *self, const scree__policy_in *in,
                                       scree__cands *c) {
  (void)self;
  scree_context *ctx = in->ctx;
  if (ctx->safelist) {
    scree__config *allowed = calloc(SCREE__MAX_CANDIDATES, sizeof *allowed);
    if (!allowed) return SCREE_ERROR_OUT_OF_MEMORY;
    char vs[128];
    scree__variant_str(in->op, in->var, vs, sizeof vs);
    const int m = scree__safelist_candidates(ctx->safelist, in->op, vs, allowed,
                                             SCREE__MAX_CANDIDATES);
    for (int i = 0; i < m && i < SCREE__MAX_CANDIDATES; i++) scree__cands_add(c, &allowed[i]);
    free(allowed);
    c->source = "safelist";
  }
  /* No safelist, or none of its lines is for this op and variant. */
  if (c->n == 0) {
    const scree_status st = add_space(in->op, c);
    if (st) return st;
  }
  scree__policy_finish(in, c);
  return SCREE_OK;
}

static scree_status explore_candidates(const scree__policy *self, const scree__policy_in *in,
                                       scree__cands *c) {
  (void)self;
  const scree_status st = add_space(in->op, c);
  if (!st) scree__policy_finish(in, c);
  return st;
}

/* ---- the winner ------------------------------------------------------------ */

/* The first candidate (in candidate order) within the noise band of the
 * fastest wins, so runs that differ only by noise pick the same config. */
static int first_within_noise(const scree__policy *self, const scree__policy_in *in,
                              const scree__outcome *o, int n) {
  (void)self;
  double best = INFINITY;
  for (int i = 0; i < n; i++)
    if (o[i].ok && o[i].median < best) best = o[i].median;
  for (int i = 0; i < n; i++)
    if (o[i].ok && o[i].median <= best * (1 + in->noise)) return i;
  return -1;
}

const scree__policy scree__policy_default = {
    .name = "default", .candidates = default_candidates, .pick = first_within_noise};
const scree__policy scree__policy_explore = {
    .name = "explore", .candidates = explore_candidates, .pick = first_within_noise};
