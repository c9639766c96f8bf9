/*
 * worker.h - a bucket's candidates run (checked, then timed) in a worker
 * process that the caller's CUDA context never shares a fault or a hang
 * with. Not API. docs/architecture.md ("In a worker process") describes
 * the protocol and its limits.
 */
#ifndef SCREE_TUNER_WORKER_H
#define SCREE_TUNER_WORKER_H

#include "tuner/trial.h"

/* The worker process of a context's tuner (NULL until the first tune). */
struct scree__worker;
/* Ends the worker process, if any, and frees w. */
void scree__worker_free(struct scree__worker *w);

/* Runs trials [0, n) of a bucket in the worker *w (created, started, and
 * restarted after a fault, a crash or a hang, as needed), within the
 * limits of o; fills every trial and info. A failure that is no
 * candidate's (the worker cannot start or build the problem) returns its
 * status. Serialized by the caller (the tuner's lock). */
scree_status scree__worker_trials(scree_context *ctx, const scree__op *op,
                                  const scree__variant *var, const scree__bucket *b,
                                  uint64_t seed, const scree__trial_opts *o, scree__trial *t,
                                  int n, scree__trials_info *info, struct scree__worker **w);

/* The worker's side: serves requests read from fd `in` and answers on fd
 * `out` with ctx's device until `in` ends. Returns the exit status: 0
 * after the end of input, 3 after a candidate broke the CUDA context, 2
 * on a protocol error. */
int scree__worker_serve(scree_context *ctx, int in, int out);

#endif
