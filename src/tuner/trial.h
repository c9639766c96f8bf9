/*
 * trial.h - one candidate checked, then timed, in the CUDA context of the
 * process that runs it, and a bucket's candidates run that way in the
 * caller's context (isolation off). The worker process (tuner/worker.h)
 * runs the same trials on its side. Not API. docs/architecture.md
 * ("Checking", "Timing") describes a trial.
 */
#ifndef SCREE_TUNER_TRIAL_H
#define SCREE_TUNER_TRIAL_H

#include "tuner/harness.h"

/* What a candidate's run is made to do, for the tests of the failure
 * paths (scree__tune_opts' poison, fault and hang configs). */
typedef enum {
  SCREE__TRIAL_NORMAL = 0,
  SCREE__TRIAL_WRONG = 1, /* reported as a wrong answer */
  SCREE__TRIAL_FAULT = 2, /* output pointers unmapped: an illegal address */
  SCREE__TRIAL_HANG = 3   /* a kernel that spins forever */
} scree__trial_mode;

/* One candidate: the config and its cubin in, the outcome out. */
typedef struct scree__trial {
  scree__config cfg;
  const void *cubin;
  size_t cubin_size;
  scree__trial_mode mode;
  scree_status st;  /* SCREE_OK: right answer, timed */
  double median, spread;
  int record;       /* st != OK: 0 not the config's fault, 1 bad here, 2 bad anywhere */
  int fatal;        /* the CUDA context did not survive it */
  int ran;          /* 0: never reached (a fatal failure or the bucket's limit came first) */
  char why[256];
} scree__trial;

/* How a bucket's trials run: the tuner's options that concern them. */
typedef struct scree__trial_opts {
  int reps;             /* timed runs per candidate */
  int warmup;           /* untimed runs first */
  double time_limit_ms; /* one run slower than this is a timeout */
  /* The worker's wall-clock limits, seconds (> 0): for one candidate and
   * for the bucket (in the caller's context a running kernel cannot be
   * stopped, so only time_limit_ms applies there). */
  double candidate_limit_s, bucket_limit_s;
  /* Called as each candidate's turn comes (done = its number, of total;
   * stage "time"); may be NULL. */
  void (*progress)(void *user, int done, int total, const char *stage);
  void *user;
} scree__trial_opts;

/* What the trials of a bucket report besides each trial's outcome. */
typedef struct scree__trials_info {
  double flops, bytes; /* work of one run of the timing problem */
  char problem[256];   /* the timing problem's description */
  int workers;         /* worker processes started */
} scree__trials_info;

/* Loads t's cubin into a module of its own, checks the config on chk,
 * times it on tp and unloads; fills t's outcome. Needs the primary context
 * current. */
/* How many back-to-back calls one event pair of a trial's timing covers,
 * from one call's time measured alone (1 for calls of 40 us or more, at
 * most 32). */
int scree__trial_per_event(double one_call_us);

void scree__trial_run(scree_context *ctx, const scree__op *op, const scree__variant *var,
                      scree__run *chk, scree__run *tp, CUstream stream,
                      const scree__trial_opts *o, scree__trial *t);

/* Runs trials [0, n) of a bucket in ctx, in order, on the bucket's check
 * and timing problems built from seed, until one breaks the context
 * (SCREE_ERROR_CUDA; the rest stay unreached). Fault and hang modes fail
 * without running: they need the worker. Fills info (workers stays 0). A
 * failure that is no candidate's (the problems cannot be built) returns
 * its status. Needs the primary context current. */
scree_status scree__trials_here(scree_context *ctx, const scree__op *op,
                                const scree__variant *var, const scree__bucket *b,
                                uint64_t seed, const scree__trial_opts *o, scree__trial *t,
                                int n, scree__trials_info *info);

#endif
