/* test_util.h - helpers shared by scree's tests. */
#ifndef SCREE_TEST_UTIL_H
#define SCREE_TEST_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Tests reach into every layer, the administration interface included. */
#include "api/admin.h"
#include "api/api.h"
#include "ops/presets.h"
#include "ops/registry.h"
#include "store/cache.h"
#include "store/keys.h"
#include "store/safelist.h"
#include "store/tuned.h"
#include "tuner/harness.h"
#include "tuner/tuner.h"
#include "tuner/worker.h"
#include "base/sha256.h"

/* Exit code ctest reports as "skipped" (SKIP_RETURN_CODE). */
#define SCREE_TEST_SKIP 77

/* A generator seeded fresh each run (time and pid) unless SCREE_TEST_SEED is
 * set; the seed is printed so a failure can be replayed. */
uint64_t scree_test_seed(void);
uint64_t scree_test_rand(void);
/* Uniform in [lo, hi). */
double scree_test_uniform(double lo, double hi);
/* Normal(0, 1). */
double scree_test_normal(void);
/* Fills n elements of `dtype` with normal(0, scale) values. */
void scree_test_fill(void *p, scree_dtype dtype, size_t n, double scale);

/* Runs a Check suite and returns the process exit code. GPU suites pass
 * nofork = 1: CUDA must not be initialised before a fork. */
int scree_test_run(Suite *s, int nofork);

/* For GPU tests: the shared context, created once. If there is no usable
 * GPU, prints "SKIP: <reason>" and exits with SCREE_TEST_SKIP. */
scree_context *scree_test_gpu_context(void);
/* Device memory through the driver table; abort the test on failure. */
scree_devptr scree_test_dalloc(scree_context *ctx, size_t bytes);
void scree_test_dfree(scree_context *ctx, scree_devptr p);
void scree_test_h2d(scree_context *ctx, scree_devptr dst, const void *src, size_t n);
void scree_test_d2h(scree_context *ctx, void *dst, scree_devptr src, size_t n);
/* Fills device memory with a byte pattern (poison) and waits. */
void scree_test_dpoison(scree_context *ctx, scree_devptr p, size_t n);
void scree_test_sync(scree_context *ctx);

#endif
