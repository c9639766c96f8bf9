/*
 * worker.h - candidates run (checked, then timed) one at a time: in the
 * caller's CUDA context, or in a worker process that the caller's context
 * never shares a fault or a hang with. Not API. docs/architecture.md
 * ("Tuning in a worker process") describes the protocol and its limits.
 */
#ifndef SCREE_TUNER_WORKER_H
#define SCREE_TUNER_WORKER_H

#include "tuner/tuner.h"

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

/* Loads t's cubin into a module of its own, checks the config on chk,
 * times it on tp and unloads; fills t's outcome. Needs the primary context
 * current. */
void scree__trial_run(scree_context *ctx, const scree__op *op, const scree__variant *var,
                      scree__run *chk, scree__run *tp, CUstream stream,
                      const scree__tune_opts *o, scree__trial *t);

/* A bucket's wall-clock limit in seconds: o->bucket_limit_s, else
 * SCREE_TUNE_BUCKET_TIMEOUT, else 600. */
double scree__tune_bucket_limit(const scree__tune_opts *o);

/* The worker process of a context's tuner (NULL until the first tune). */
struct scree__worker;
/* Ends the worker process, if any, and frees w. */
void scree__worker_free(struct scree__worker *w);

/* Runs trials [0, n) of a bucket in the worker *w (created, started, and
 * restarted after a fault, a crash or a hang, as needed), within the
 * limits of o; fills every trial and res' problem fields (flops, bytes,
 * problem) and workers. A failure that is no candidate's (the worker
 * cannot start or build the problem) returns its status. Serialized by
 * the caller (the tuner's lock). */
scree_status scree__worker_trials(scree_context *ctx, const scree__op *op,
                                  const scree__variant *var, const scree__bucket *b,
                                  uint64_t seed, const scree__tune_opts *o, scree__trial *t,
                                  int n, scree__tune_result *res, struct scree__worker **w);

/* The worker's side: serves requests read from fd `in` and answers on fd
 * `out` with ctx's device until `in` ends. Returns the exit status: 0
 * after the end of input, 3 after a candidate broke the CUDA context, 2
 * on a protocol error. */
int scree__worker_serve(scree_context *ctx, int in, int out);

#endif
