/*
 * harness.h - problems on the device: buffers allocated and filled, a run
 * checked against the CPU reference, runs timed. The tuner, verify, the
 * benchmarks and `scree-tune demo` all run ops through it. Not API.
 */
#ifndef SCREE_HARNESS_H
#define SCREE_HARNESS_H

#include "jit/jit.h"

#define SCREE__MAX_SETS 8

/* A problem on the device. */
typedef struct scree__run {
  const scree__op *op;
  scree__problem p;
  int check;   /* 1: one set, host copies and reference outputs kept */
  int nsets;   /* buffer sets rotated between timed runs */
  CUdeviceptr dev[SCREE__MAX_SETS][SCREE__MAX_BUFS];
  size_t bytes[SCREE__MAX_BUFS];
  void *host[SCREE__MAX_BUFS]; /* check: inputs as uploaded, reference outputs */
  CUdeviceptr orig[SCREE__MAX_BUFS]; /* check: INOUT buffers' inputs, restored before a run */
} scree__run;

/* Runs the op once on args (bound to one buffer set) on stream. */
typedef scree_status (*scree__runner)(void *user, scree_context *ctx, const void *args,
                                      CUstream stream);

/* Builds the op's problem for a shape (args holds the shape fields) and
 * puts it on the device. check = 1: one set of random inputs (normal(0, 1),
 * reshaped by the op's shape_inputs), host-initialised buffers as the op
 * wrote them, and the reference outputs computed on the host. check = 0:
 * enough sets to exceed 3x the L2 when rotated (at most SCREE__MAX_SETS, and
 * a quarter of free memory), inputs filled on the device from a random
 * chunk. lens (may be NULL) fixes the sequence lengths of varlen ops. Needs
 * the primary context current. */
scree_status scree__run_make(scree_context *ctx, const scree__op *op,
                             const scree__variant *var, const void *args, int check,
                             uint64_t seed, const scree__lens *lens, scree__run *r);
/* The same for a bucket's representative shape. */
scree_status scree__run_make_bucket(scree_context *ctx, const scree__op *op,
                                    const scree__variant *var, const scree__bucket *b,
                                    int check, uint64_t seed, scree__run *r);
void scree__run_free(scree_context *ctx, scree__run *r);
/* The problem's args with the pointers of buffer set `set`. */
void scree__run_bind(const scree__run *r, int set, void *args);
/* Poisons the outputs (0xff bytes: NaN) and restores the in-place (INOUT)
 * buffers to their inputs, runs once, waits (a run longer
 * than limit_ms is SCREE_ERROR_TIMEOUT), and compares every output with the
 * reference at its stated tolerance: SCREE_ERROR_WRONG_ANSWER with the
 * worst element in why. */
scree_status scree__run_check(scree_context *ctx, scree__run *r, scree__runner fn,
                              void *user, CUstream stream, double limit_ms, char *why,
                              size_t why_size);
/* Warm-up runs, then `reps` measurements of `per_event` back-to-back runs
 * between CUDA events (rotating the sets); the median and interquartile
 * spread of one run, microseconds. */
scree_status scree__run_time(scree_context *ctx, scree__run *r, scree__runner fn,
                             void *user, CUstream stream, int warmup, int reps,
                             int per_event, double limit_ms, double *median_us,
                             double *spread_us, char *why, size_t why_size);

/* The device-to-device copy bandwidth of a 1 GiB buffer (bytes read +
 * written per second, GB/s; median of 20): the ceiling bandwidth-bound ops
 * are reported against. 0 if the memory cannot be had. Needs the primary
 * context current. */
double scree__copy_gbps(scree_context *ctx);
/* GB/s of copies moving `moved` bytes each (half read, half written),
 * `inner` back to back between two events, median of 20, over enough buffer
 * pairs to exceed 3x the L2: the ceiling of a bandwidth-bound op of the same
 * bytes, timed as scree__run_time times it. 0 if it cannot be measured. */
double scree__copy_gbps_sized(scree_context *ctx, size_t moved, int inner);

/* A runner for one loaded config (what the tuner times). */
typedef struct scree__config_runner {
  const scree__op *op;
  const scree__config *cfg;
  const scree__variant *var;
  const scree__kernel *k;
} scree__config_runner;
scree_status scree__run_config(void *user, scree_context *ctx, const void *args,
                               CUstream stream);

#endif
