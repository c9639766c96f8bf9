/* test_util.c - helpers shared by scree's tests. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t g_state;
static int g_seeded;

uint64_t scree_test_seed(void) {
  if (!g_seeded) {
    const char *e = getenv("SCREE_TEST_SEED");
    g_state = e ? strtoull(e, NULL, 0)
                : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^
                      (uint64_t)clock();
    if (!g_state) g_state = 1;
    g_seeded = 1;
    fprintf(stderr, "random seed: SCREE_TEST_SEED=%llu\n",
            (unsigned long long)g_state);
  }
  return g_state;
}

uint64_t scree_test_rand(void) {
  scree_test_seed();
  /* xorshift64* */
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  return g_state * 2685821657736338717ull;
}

double scree_test_uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(scree_test_rand() >> 11) / 9007199254740992.0);
}

double scree_test_normal(void) {
  double u = scree_test_uniform(1e-12, 1.0), v = scree_test_uniform(0, 1);
  return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

void scree_test_fill(void *p, scree_dtype dtype, size_t n, double scale) {
  for (size_t i = 0; i < n; i++)
    scree__store_elem(p, dtype, i, scale * scree_test_normal());
}

int scree_test_run(Suite *s, int nofork) {
  scree_test_seed();
  /* The tests tune, miss and count cache hits of their own making: the
   * shipped tuned configs (caches/) must not answer for them, unless a
   * test sets SCREE_TUNED_CONFIGS itself. */
  setenv("SCREE_TUNED_CONFIGS", "none", 0);
  SRunner *sr = srunner_create(s);
  if (nofork) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr), ran = srunner_ntests_run(sr);
  srunner_free(sr);
  if (!ran) fprintf(stderr, "no test ran: CK_RUN_CASE, CK_INCLUDE_TAGS or CK_EXCLUDE_TAGS selects none\n");
  return failed || !ran ? 1 : 0;
}

/* SCREE_TEST_ONLY=a,b: only the tests (START_TEST names) listed, e.g. one
 * case under compute-sanitizer. */
static int wanted(const TTest *t) {
  const char *only = getenv("SCREE_TEST_ONLY");
  if (!only || !*only) return 1;
  const size_t n = strlen(t->name);
  for (const char *p = only; *p;) {
    const char *e = strchr(p, ',');
    const size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, t->name, n)) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

static TCase *make_case(Suite *s, const char *name, const scree_suite_def *def,
                        const TTest *const *tests, const scree_test_loop *loops) {
  TCase *tc = tcase_create(name);
  if (def->setup || def->teardown) tcase_add_checked_fixture(tc, def->setup, def->teardown);
  if (def->setup_once || def->teardown_once)
    tcase_add_unchecked_fixture(tc, def->setup_once, def->teardown_once);
  if (def->timeout) tcase_set_timeout(tc, def->timeout);
  for (; tests && *tests; tests++)
    if (wanted(*tests)) tcase_add_test(tc, *tests);
  for (; loops && loops->test; loops++)
    if (wanted(loops->test)) tcase_add_loop_test(tc, loops->test, 0, loops->n);
  suite_add_tcase(s, tc);
  return tc;
}

int scree_test_main(const scree_suite_def *def) {
  if (def->init) def->init();
  Suite *s = suite_create(def->name);
  make_case(s, "quick", def, def->tests, def->loops);
  if (def->slow_tests || def->slow_loops)
    tcase_set_tags(make_case(s, "slow", def, def->slow_tests, def->slow_loops), "slow");
  return scree_test_run(s, def->nofork);
}

static scree_context *g_ctx;

scree_context *scree_test_gpu_context(void) {
  if (g_ctx) return g_ctx;
  char why[1024];
  scree_options o;
  scree_options_init(&o);
  o.disable_cache = 1;
  scree_status st = scree_create(&o, &g_ctx, why, sizeof why);
  if (st == SCREE_ERROR_NO_DEVICE || st == SCREE_ERROR_NO_DRIVER) {
    printf("SKIP: no usable GPU: %s\n", why);
    fflush(stdout);
    exit(SCREE_TEST_SKIP);
  }
  if (st != SCREE_OK) {
    fprintf(stderr, "scree_create failed: %s: %s\n", scree_status_name(st), why);
    exit(1);
  }
  return g_ctx;
}

#define CU_OK(call)                                                           \
  do {                                                                        \
    CUresult r_ = (call);                                                     \
    ck_assert_msg(r_ == CUDA_SUCCESS, "%s: %s", #call,                        \
                  scree__cu_error_name(ctx->cu, r_));                         \
  } while (0)

scree_devptr scree_test_dalloc(scree_context *ctx, size_t bytes) {
  CUdeviceptr p = 0;
  int pushed = scree__ctx_enter(ctx);
  CU_OK(ctx->cu->MemAlloc(&p, bytes ? bytes : 1));
  scree__ctx_leave(ctx, pushed);
  return p;
}

void scree_test_dfree(scree_context *ctx, scree_devptr p) {
  int pushed = scree__ctx_enter(ctx);
  ctx->cu->MemFree(p);
  scree__ctx_leave(ctx, pushed);
}

void scree_test_h2d(scree_context *ctx, scree_devptr dst, const void *src, size_t n) {
  int pushed = scree__ctx_enter(ctx);
  CU_OK(ctx->cu->MemcpyHtoD(dst, src, n));
  scree__ctx_leave(ctx, pushed);
}

void scree_test_d2h(scree_context *ctx, void *dst, scree_devptr src, size_t n) {
  int pushed = scree__ctx_enter(ctx);
  CU_OK(ctx->cu->MemcpyDtoH(dst, src, n));
  scree__ctx_leave(ctx, pushed);
}

void scree_test_dpoison(scree_context *ctx, scree_devptr p, size_t n) {
  int pushed = scree__ctx_enter(ctx);
  /* 0xff bytes are NaN in fp32, fp16 and bf16. */
  CU_OK(ctx->cu->MemsetD8(p, 0xff, n));
  CU_OK(ctx->cu->CtxSynchronize());
  scree__ctx_leave(ctx, pushed);
}

void scree_test_sync(scree_context *ctx) {
  int pushed = scree__ctx_enter(ctx);
  CU_OK(ctx->cu->CtxSynchronize());
  scree__ctx_leave(ctx, pushed);
}
