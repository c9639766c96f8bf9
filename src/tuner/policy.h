/*
 * policy.h - how the tuner chooses: which configs are the candidates for a
 * bucket, in which order, and which of the timed ones wins. Not API.
 * docs/architecture.md ("Tuning": Policies, Candidates, Winner) describes the
 * seam and the default policy.
 *
 * A policy is a table of two functions (scree__policy). scree__tune asks it
 * once per tune for the candidate list, compiles, checks and times every
 * candidate on the list in that order, then hands it the outcomes, in the
 * same order, to pick the winner from. Everything in between (compiling,
 * the worker process, recording failures, storing the winner) is the
 * tuner's and does not change with the policy.
 *
 * The built-in policies are scree__policy_default and, for opts.explore,
 * scree__policy_explore. Another policy may reuse their parts:
 * scree__policy_finish turns proposed configs into a candidate list the
 * way the built-in ones do, and a built-in policy's functions may be
 * called from another's. Whatever it proposes, a policy should end with
 * scree__policy_finish or prune as it does: it drops the configs that must
 * not run (the device cannot run them, a safelist denies them, they failed
 * before), which the tuner does not check again.
 */
#ifndef SCREE_TUNER_POLICY_H
#define SCREE_TUNER_POLICY_H

#include "store/keys.h"

/* The most candidates one tune considers; configs proposed beyond it are
 * dropped. Every op's whole space fits but ragged_softmax's (7136 configs:
 * a whole-space tune of it considers the first 4096, and not the default,
 * which finds no room). */
#define SCREE__MAX_CANDIDATES 4096

/* What a policy decides about: one bucket of an op on a context. */
typedef struct scree__policy_in {
  scree_context *ctx;
  const scree__op *op;
  const scree__variant *var;
  const void *rep;        /* the bucket's representative args: the shape it is
                             tuned on, on aligned buffers (pointers zero) */
  const scree__ckey *key; /* the bucket's cache key: bad records are kept by it */
  double noise;           /* medians within this fraction of the best tie
                             (opts.noise) */
} scree__policy_in;

/* A candidate list, made by a policy's candidates function. */
typedef struct scree__cands {
  scree__config *cfg;  /* cap entries, the first n used, each config once, in
                          the order they are compiled, run and tie-broken */
  int n, cap;
  scree__config dflt;  /* what an untuned call of the bucket runs
                          (scree__default_config for the representative
                          shape); its median is the result's default_us */
  int known_bad;       /* configs left out because they are recorded bad */
  const char *source;  /* where the configs came from, for the log:
                          "safelist", "whole space" */
} scree__cands;

/* One candidate's outcome, in list order. */
typedef struct scree__outcome {
  int ok;                /* compiled, loaded, right answer, timed */
  double median, spread; /* microseconds, when ok */
} scree__outcome;

typedef struct scree__policy scree__policy;
struct scree__policy {
  const char *name;
  /* Fills c (c->cfg has room for c->cap configs; c->n is 0, the other
   * fields zero) with the candidates for `in`'s bucket. SCREE_OK, or
   * SCREE_ERROR_OUT_OF_MEMORY (the tuner then fails with it). */
  scree_status (*candidates)(const scree__policy *self, const scree__policy_in *in,
                             scree__cands *c);
  /* The index of the winner among the n outcomes of c's candidates, or
   * -1 if none may win (the tuner then reports why none worked). Only an
   * outcome with ok set may win. */
  int (*pick)(const scree__policy *self, const scree__policy_in *in, const scree__outcome *o,
              int n);
  void *data; /* the policy's own state, for its functions; NULL in the built-in ones */
};

/* The safelist's allow lines for the op and variant, in file order (the
 * whole config space when there is no safelist or it allows none), each
 * finished by scree__policy_finish; the winner is the first candidate, in
 * list order, whose median is within in->noise of the fastest, so that
 * runs that differ only by noise pick the same config. */
extern const scree__policy scree__policy_default;
/* As the default, but always the whole config space (opts.explore). */
extern const scree__policy scree__policy_explore;

/* Appends cfg to c unless it is there already or c is full. */
void scree__cands_add(scree__cands *c, const scree__config *cfg);
/* The index of cfg in c, or -1. */
int scree__cands_find(const scree__cands *c, const scree__config *cfg);

/* What the built-in policies do to the configs they propose (in c, in
 * order): sets c->dflt and appends it if it is not there, so that the
 * result can always be compared with what an untuned call runs; passes
 * each config through its implementation's adapt for in->rep, as a call
 * of the bucket on aligned buffers would be (two that become one are kept
 * once, where the first was); then drops, in this order, a config that
 * fails scree__config_check on this device, one the implementation's
 * worth_timing says cannot win here (never the default), one a safelist
 * deny line matches, and one the user cache records as bad for this
 * bucket or for every bucket (counted in c->known_bad). */
void scree__policy_finish(const scree__policy_in *in, scree__cands *c);

/* The config the op runs without tuning: the safelist's default line for
 * this variant, else the op's heuristic; adapted to args when not NULL. */
void scree__default_config(scree_context *ctx, const scree__op *op,
                           const scree__variant *var, const void *args,
                           scree__config *out);

#endif
