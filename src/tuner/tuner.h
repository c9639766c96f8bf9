/* tuner.h - finds the fastest correct config for a bucket on the live GPU.
 * Not API. See docs/architecture.md ("Tuning"). */
#ifndef SCREE_TUNER_H
#define SCREE_TUNER_H

#include "internal.h"

typedef struct scree__tune_opts {
  int explore;          /* time the whole space, not only the safelist */
  int reps;             /* timed launches per candidate; default 25 */
  int warmup;           /* untimed launches first; default 3 */
  double noise;         /* configs within this fraction of the best tie; 0.02 */
  double time_limit_ms; /* one launch slower than this is a timeout; 1000 */
  int threads;          /* compile threads; 0 = online CPUs (at most 32) */
  int store;            /* write the winner into the user cache; default 1 */
  /* Called as candidates finish (done of total); may be NULL. */
  void (*progress)(void *user, int done, int total, const char *stage);
  void *user;
  /* If, once the tuning lock is taken, the user cache already holds the
   * bucket (another thread tuned it meanwhile), use that entry. */
  int reuse_cached;
  /* Testing hook: a config string that is treated as computing a wrong
   * answer, to exercise the bad-config path. NULL normally. */
  const char *poison_config;
} scree__tune_opts;

typedef struct scree__tune_result {
  scree__config cfg;    /* the winner (unadapted: aligned buffers) */
  double median_us, spread_us;
  double default_us;    /* the op's default config on the same problem, or 0 */
  int candidates;       /* considered after pruning */
  int timed;            /* compiled, loaded, correct and timed */
  int failed;           /* newly recorded as bad */
  int known_bad;        /* skipped: recorded bad before */
  double seconds;       /* wall time of the whole run */
  char bucket[96];
} scree__tune_result;

void scree__tune_opts_init(scree__tune_opts *o);

/* Tunes op/variant for `bucket` (op->bucket_key form): compiles the
 * candidates on a thread pool, loads them, checks each against the CPU
 * reference, times the correct ones, records failures as bad configs in the
 * user cache, picks the winner and (opts->store) stores it with its cubin.
 * The winner joins the context's kernel table, ready to launch; the other
 * candidates' modules are unloaded. Serialized per context. */
scree_status scree__tune(scree_context *ctx, const scree__op *op,
                         const scree__variant *var, uint64_t bucket,
                         const scree__tune_opts *opts,
                         scree__tune_result *res);

/* Checks one config on the bucket's check problem against the CPU
 * reference (SCREE_ERROR_WRONG_ANSWER with details in the context's
 * message), and if median_us is not NULL times it on the representative
 * problem. `cubin` may be NULL (then it is compiled or taken from the
 * kernel table); a given cubin is loaded into a module of its own, run and
 * unloaded, so that exactly those bytes are checked. */
scree_status scree__verify_config(scree_context *ctx, const scree__op *op,
                                  const scree__variant *var, uint64_t bucket,
                                  const scree__config *cfg, const void *cubin,
                                  double *median_us, double *spread_us);

/* Fills a cache key for op/variant/bucket on this context's device. */
struct scree__ckey;
void scree__make_key(const scree_context *ctx, const scree__op *op,
                     const scree__variant *var, uint64_t bucket,
                     struct scree__ckey *key);

/* Parses a variant string ("x=fp16,w=fp16,y=fp16") for op. 0 on success. */
int scree__variant_parse(const scree__op *op, const char *s,
                         scree__variant *var);

#endif
