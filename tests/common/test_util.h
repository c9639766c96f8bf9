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
 * nofork = 1: CUDA must not be initialised before a fork. A run that
 * selects no test (CK_RUN_CASE, CK_INCLUDE_TAGS, CK_EXCLUDE_TAGS, or
 * SCREE_TEST_ONLY: START_TEST names, comma-separated) fails,
 * so that a misspelled selection cannot pass by running nothing. */
int scree_test_run(Suite *s, int nofork);

/* A loop test (tcase_add_loop_test): a Check test (the name given to
 * START_TEST) run n times, with _i = 0 .. n - 1. A table of them ends with
 * {0}. */
typedef struct scree_test_loop {
  const TTest *test;
  int n;
} scree_test_loop;

/* What most test programs' main() is: one suite of the tests listed, each
 * run once (tests: NULL-terminated) or as a loop test (loops), and of the
 * slow ones (slow_tests, slow_loops), which go into a Check test case
 * tagged "slow". tests/CMakeLists.txt registers a program whose source
 * sets .slow_tests or .slow_loops twice: <name> runs the rest (label
 * quick), <name>_slow only the slow ones (label slow), through Check's
 * CK_EXCLUDE_TAGS and CK_INCLUDE_TAGS. Any list may be NULL. */
typedef struct scree_suite_def {
  const char *name;
  void (*init)(void); /* first of all, in main() (a GPU test's context) */
  const TTest *const *tests;
  const scree_test_loop *loops;
  const TTest *const *slow_tests;
  const scree_test_loop *slow_loops;
  /* The checked fixture runs around each test, in its process; the
   * unchecked one ("once") before and after all of a test case's tests, in
   * this process. */
  void (*setup)(void), (*teardown)(void);
  void (*setup_once)(void), (*teardown_once)(void);
  int timeout; /* seconds per test; 0: CK_DEFAULT_TIMEOUT */
  int nofork;  /* as scree_test_run's */
} scree_suite_def;

/* Runs def->init, builds the suite `def` describes, runs it
 * (scree_test_run) and returns the process exit code. */
int scree_test_main(const scree_suite_def *def);

/* A test program's main(): the suite that the designated initializers of
 * scree_suite_def describe, with the lists below, run by scree_test_main.
 *   SCREE_TEST_MAIN(.name = "dtype", .tests = SCREE_TESTS(half_known_values, bf16_rounding))
 */
#define SCREE_TEST_MAIN(...) \
  int main(void) { return scree_test_main(&(const scree_suite_def){__VA_ARGS__}); }
/* scree_suite_def's lists: tests run once, and loop tests, {test, n} each. */
#define SCREE_TESTS(...) ((const TTest *const[]){__VA_ARGS__, NULL})
#define SCREE_LOOPS(...) ((const scree_test_loop[]){__VA_ARGS__, {0}})

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
