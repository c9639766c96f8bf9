/* tuner.h - finds the fastest correct config for a bucket on the live GPU.
 * Not API. See docs/architecture.md ("Tuning"). The tuner's files, each
 * using only those before it: policy (what to try, who wins), harness
 * (problems on the device), trial (one candidate), worker (the process),
 * tune (this header: the whole run); tests/test_layers.cmake checks it. */
#ifndef SCREE_TUNER_H
#define SCREE_TUNER_H

#include "store/keys.h"
#include "tuner/harness.h"
#include "tuner/policy.h"

typedef struct scree__tune_opts {
  int explore;          /* time the whole space, not only the safelist */
  /* How candidates and the winner are chosen (tuner/policy.h); NULL:
   * scree__policy_explore with explore, else scree__policy_default. */
  const scree__policy *policy;
  int reps;             /* timed runs per candidate; default 25 */
  int warmup;           /* untimed runs first; default 3 */
  double noise;         /* configs within this fraction of the best tie; 0.02 */
  double time_limit_ms; /* one run slower than this is a timeout; 1000 */
  int threads;          /* compile threads; 0 = scree__jobs() (SCREE_JOBS, else the usable CPUs) */
  int store;            /* write the winner into the user cache; default 1 */
  /* Called as candidates finish (done of total); may be NULL. */
  void (*progress)(void *user, int done, int total, const char *stage);
  void *user;
  /* If, once the tuning lock is taken, the user cache already holds the
   * bucket (another thread tuned it meanwhile), use that entry. */
  int reuse_cached;
  /* Where candidates run: 1 in a worker process (tuner/worker.c), 0 in
   * the caller's CUDA context, -1 (default) as SCREE_TUNE_ISOLATION says
   * (worker unless it is "off" or "0"). */
  int isolate;
  /* Wall-clock limits of the worker: seconds for one candidate (check and
   * timing; default 30, SCREE_TUNE_CANDIDATE_TIMEOUT) and for the bucket
   * (default 600, SCREE_TUNE_BUCKET_TIMEOUT). A candidate past its limit
   * is recorded as bad ("hang") and the worker restarted; candidates not
   * reached within the bucket's limit are left untimed, not bad. */
  double candidate_limit_s, bucket_limit_s;
  /* When another process holds this bucket's tuning lock: 0 waits for it
   * and then uses its result (default), 1 returns at once with
   * result->busy set (the caller runs the default config meanwhile).
   * SCREE_TUNE_BUSY=default sets 1 for the miss policy "tune". */
  int busy_default;
  /* Testing hooks, NULL normally: a config string treated as computing a
   * wrong answer; one whose run writes out of bounds (its output pointers
   * replaced by an unmapped address); one whose run never finishes (a
   * spinning kernel instead). Faults and hangs need the worker. */
  const char *poison_config, *fault_config, *hang_config;
} scree__tune_opts;

typedef struct scree__tune_result {
  scree__config cfg;    /* the winner (unadapted: aligned buffers) */
  double median_us, spread_us;
  double default_us;    /* the op's default config on the same problem, or 0 */
  double flops, bytes;  /* work of one run of the tuning problem */
  int candidates;       /* considered after pruning */
  int timed;            /* compiled, loaded, correct and timed */
  int failed;           /* newly recorded as bad */
  int known_bad;        /* skipped: recorded bad before */
  int workers;          /* worker processes started for this tune */
  int busy;             /* busy_default: another process is tuning it */
  int tuned;            /* 1: candidates were run; 0: an entry was reused */
  double seconds;       /* wall time of the whole run */
  char bucket[96];
  char problem[256];    /* what the candidates were timed on */
  /* Of the candidates: compiled by this tune, and taken compiled (or
   * failed to compile) from the process's cubin table, where an earlier
   * tune or another context of the same target put them (jit/cubins.c). */
  int compiled, reused;
} scree__tune_result;

void scree__tune_opts_init(scree__tune_opts *o);

/* The tuner's per-context state (its lock, compiled candidates). */
scree_status scree__tuner_create(scree_context *ctx);
void scree__tuner_free(scree_context *ctx);

/* Tunes op/variant for a bucket: the policy's candidates (by default the
 * safelist's or the whole space, filtered by the device), compiled on a
 * thread pool, each checked against the CPU reference on the bucket's
 * check problem and timed on its representative problem, in a worker
 * process unless opts->isolate says otherwise (tuner/worker.h); failures
 * are recorded as bad configs in the user cache; the policy's winner
 * (opts->store) is stored with its cubin and joins the context's module
 * table. Serialized per context, and per bucket across the processes that
 * share the user cache (its tune lock: a second process waits, then
 * reuses the first one's row when reuse_cached is set, or returns at once
 * with res->busy under busy_default). When no candidate works the status
 * says why: SCREE_ERROR_COMPILE if none compiled, SCREE_ERROR_WRONG_ANSWER
 * if none computed the right answer, with the first reason in the
 * message. */
scree_status scree__tune(scree_context *ctx, const scree__op *op,
                         const scree__variant *var, const scree__bucket *b,
                         const scree__tune_opts *opts, scree__tune_result *res);

/* Checks one config on the bucket's check problem (SCREE_ERROR_WRONG_ANSWER
 * with details in the context's message), and if median_us is not NULL
 * times it on the representative problem. `cubin` may be NULL (then it is
 * compiled or taken from the module table); a given cubin is loaded into a
 * module of its own, run and unloaded, so exactly those bytes are checked. */
scree_status scree__verify_config(scree_context *ctx, const scree__op *op,
                                  const scree__variant *var, const scree__bucket *b,
                                  const scree__config *cfg, const void *cubin,
                                  double *median_us, double *spread_us);

#endif
