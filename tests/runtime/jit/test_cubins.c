/* test_cubins.c - the process's table of compiled candidates
 * (jit/cubins.c): one compile per (NVRTC, target, op, config, variant)
 * however many contexts or threads ask, a separate compile per target, a
 * compile failure given to every caller that waited for it, transient
 * failures compiled again, the table freed with its last holder, and
 * (with the real NVRTC, which needs no GPU) the shared cubin the very
 * bytes a compile of one's own gives. Most tests use a stand-in NVRTC
 * that counts its compiles and can be made slow or failing; each test
 * runs in its own process (Check forks), so each starts with an empty
 * table. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

/* ---- a stand-in NVRTC ---------------------------------------------------- */

static int fake_compiles;     /* CompileProgram calls (atomic) */
static int fake_delay_us;     /* how long a compile takes */
static const char *fail_arch; /* this target fails with a compilation error */
static const char *oom_arch;  /* this target runs out of memory */

struct _nvrtcProgram {
  char target[32];
};

static const char *fake_error_string(nvrtcResult r) {
  return r == NVRTC_ERROR_COMPILATION ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR_FAKE";
}
static nvrtcResult fake_version(int *major, int *minor) {
  *major = 13, *minor = 0;
  return NVRTC_SUCCESS;
}
static nvrtcResult fake_create(nvrtcProgram *prog, const char *src, const char *name, int nh,
                               const char *const *h, const char *const *hn) {
  (void)src, (void)name, (void)nh, (void)h, (void)hn;
  *prog = calloc(1, sizeof **prog);
  return *prog ? NVRTC_SUCCESS : NVRTC_ERROR_OUT_OF_MEMORY;
}
static nvrtcResult fake_destroy(nvrtcProgram *prog) {
  free(*prog);
  *prog = NULL;
  return NVRTC_SUCCESS;
}
static nvrtcResult fake_compile(nvrtcProgram prog, int n, const char *const *opts) {
  __atomic_fetch_add(&fake_compiles, 1, __ATOMIC_SEQ_CST);
  if (fake_delay_us) usleep((useconds_t)fake_delay_us);
  for (int i = 0; i < n; i++)
    if (!strncmp(opts[i], "--gpu-architecture=", 19))
      snprintf(prog->target, sizeof prog->target, "%s", opts[i] + 19);
  if (fail_arch && !strcmp(prog->target, fail_arch)) return NVRTC_ERROR_COMPILATION;
  if (oom_arch && !strcmp(prog->target, oom_arch)) return NVRTC_ERROR_OUT_OF_MEMORY;
  return NVRTC_SUCCESS;
}
static nvrtcResult fake_log_size(nvrtcProgram prog, size_t *size) {
  *size = strlen("error: fake failure for ") + strlen(prog->target) + 1;
  return NVRTC_SUCCESS;
}
static nvrtcResult fake_log(nvrtcProgram prog, char *log) {
  sprintf(log, "error: fake failure for %s", prog->target);
  return NVRTC_SUCCESS;
}
/* The "cubin": an ELF magic, then the target. */
static nvrtcResult fake_cubin_size(nvrtcProgram prog, size_t *size) {
  *size = 4 + strlen(prog->target) + 1;
  return NVRTC_SUCCESS;
}
static nvrtcResult fake_cubin(nvrtcProgram prog, char *cubin) {
  memcpy(cubin, "\177ELF", 4);
  strcpy(cubin + 4, prog->target);
  return NVRTC_SUCCESS;
}

static const scree__nvrtc_api fake = {
    .GetErrorString = fake_error_string,
    .Version = fake_version,
    .CreateProgram = fake_create,
    .DestroyProgram = fake_destroy,
    .CompileProgram = fake_compile,
    .GetProgramLogSize = fake_log_size,
    .GetProgramLog = fake_log,
    .GetCUBINSize = fake_cubin_size,
    .GetCUBIN = fake_cubin,
};

/* ---- helpers --------------------------------------------------------------- */

static const scree__op *op;
static scree__variant var;
static scree__config cfg, other_cfg; /* the default config, and another */

static void setup(void) {
  op = scree__op_find("rmsnorm");
  ck_assert_ptr_nonnull(op);
  memset(&var, 0, sizeof var);
  scree__variant_example(op, &var);
  const scree__target t = {80, 163 * 1024, 0};
  op->default_config(&t, &var, NULL, &cfg);
  other_cfg = cfg;
  other_cfg.v[0] = cfg.v[0] == 1 ? 2 : 1; /* some other value of its first field */
  fake_compiles = 0;
  fake_delay_us = 0;
  fail_arch = oom_arch = NULL;
  scree__cubins_hold();
}

static void teardown(void) { scree__cubins_release(); }

typedef struct got {
  scree_status st;
  void *cubin;
  size_t size;
  char *log;
  int compiled;
} got;

static got get(const scree__nvrtc_api *nv, const scree__config *c, const char *target) {
  got g;
  g.st = scree__cubin_get(nv, op, c, &var, target, &g.cubin, &g.size, &g.log, &g.compiled);
  return g;
}

static void got_free(got *g) {
  free(g->cubin);
  free(g->log);
}

/* ---- tests ----------------------------------------------------------------- */

START_TEST(same_target_compiles_once) {
  got a = get(&fake, &cfg, "sm_80"), b = get(&fake, &cfg, "sm_80");
  ck_assert_int_eq(a.st, SCREE_OK);
  ck_assert_int_eq(b.st, SCREE_OK);
  ck_assert_int_eq(a.compiled, 1);
  ck_assert_int_eq(b.compiled, 0);
  ck_assert_int_eq(fake_compiles, 1);
  ck_assert_uint_eq(a.size, b.size);
  ck_assert_mem_eq(a.cubin, b.cubin, a.size);
  ck_assert_ptr_ne(a.cubin, b.cubin); /* each caller owns its copy */
  uint64_t compiles, reuses;
  scree__cubins_stats(&compiles, &reuses);
  ck_assert_uint_eq(compiles, 1);
  ck_assert_uint_eq(reuses, 1);
  got_free(&a);
  got_free(&b);
}
END_TEST

/* Another target, config or NVRTC is another cubin. */
START_TEST(other_keys_compile_apart) {
  got a = get(&fake, &cfg, "sm_80"), b = get(&fake, &cfg, "sm_90"),
      c = get(&fake, &other_cfg, "sm_80"), d = get(&fake, &cfg, "sm_90a");
  scree__nvrtc_api fake2 = fake; /* another library: another table pointer */
  got e = get(&fake2, &cfg, "sm_80");
  ck_assert_int_eq(fake_compiles, 5);
  ck_assert(a.compiled && b.compiled && c.compiled && d.compiled && e.compiled);
  ck_assert_str_eq((char *)a.cubin + 4, "sm_80");
  ck_assert_str_eq((char *)b.cubin + 4, "sm_90");
  ck_assert_str_eq((char *)d.cubin + 4, "sm_90a");
  /* and each is then reused for its own key */
  got f = get(&fake, &cfg, "sm_90");
  ck_assert_int_eq(f.compiled, 0);
  ck_assert_str_eq((char *)f.cubin + 4, "sm_90");
  ck_assert_int_eq(fake_compiles, 5);
  got *all[] = {&a, &b, &c, &d, &e, &f};
  for (int i = 0; i < 6; i++) got_free(all[i]);
}
END_TEST

/* Threads asking for one key at once, as the GPUs of one arch in a
 * prewarm --devices do. */
enum { NT = 8 };
typedef struct racer {
  pthread_barrier_t *start;
  const char *target;
  got g;
} racer;

static void *race(void *p) {
  racer *r = p;
  pthread_barrier_wait(r->start);
  r->g = get(&fake, &cfg, r->target);
  return NULL;
}

static void run_race(racer *r, const char *target) {
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, NT);
  pthread_t th[NT];
  for (int i = 0; i < NT; i++) {
    r[i] = (racer){&start, target, {0}};
    ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
  }
  for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
}

/* NT threads ask for target at once while its compile fails with want
 * (SCREE_ERROR_COMPILE: a compilation error; SCREE_ERROR_OUT_OF_MEMORY:
 * NVRTC out of memory, a transient failure): one compile, and every waiter
 * gets the failure and no cubin (a compilation error with its log). */
static void race_to_failure(const char *target, scree_status want) {
  fake_delay_us = 200000; /* the others arrive while it compiles */
  if (want == SCREE_ERROR_COMPILE)
    fail_arch = target;
  else
    oom_arch = target;
  racer r[NT];
  run_race(r, target);
  ck_assert_int_eq(fake_compiles, 1);
  char needle[64];
  snprintf(needle, sizeof needle, "fake failure for %s", target);
  for (int i = 0; i < NT; i++) {
    ck_assert_int_eq(r[i].g.st, want);
    ck_assert_ptr_null(r[i].g.cubin);
    if (want == SCREE_ERROR_COMPILE) {
      ck_assert_ptr_nonnull(r[i].g.log);
      ck_assert_msg(strstr(r[i].g.log, needle), "log: %s", r[i].g.log);
    }
    got_free(&r[i].g);
  }
}

START_TEST(concurrent_requests_compile_once) {
  fake_delay_us = 200000; /* the others arrive while it compiles */
  racer r[NT];
  run_race(r, "sm_90");
  ck_assert_int_eq(fake_compiles, 1);
  int compiled = 0;
  for (int i = 0; i < NT; i++) {
    ck_assert_int_eq(r[i].g.st, SCREE_OK);
    ck_assert_uint_eq(r[i].g.size, 4 + strlen("sm_90") + 1);
    ck_assert_mem_eq(r[i].g.cubin, "\177ELFsm_90", r[i].g.size);
    compiled += r[i].g.compiled;
    got_free(&r[i].g);
  }
  ck_assert_int_eq(compiled, 1);
  uint64_t compiles, reuses;
  scree__cubins_stats(&compiles, &reuses);
  ck_assert_uint_eq(compiles, 1);
  ck_assert_uint_eq(reuses, NT - 1);
}
END_TEST

/* A compilation error reaches every caller that waited for it, with the
 * log; it is the config's, so a later caller gets it without a compile. */
START_TEST(compile_failure_reaches_every_waiter) {
  race_to_failure("sm_90", SCREE_ERROR_COMPILE);
  got later = get(&fake, &cfg, "sm_90");
  ck_assert_int_eq(later.st, SCREE_ERROR_COMPILE);
  ck_assert_int_eq(later.compiled, 0);
  ck_assert_ptr_nonnull(later.log);
  ck_assert_int_eq(fake_compiles, 1);
  got_free(&later);
  /* other targets are not affected */
  got ok = get(&fake, &cfg, "sm_80");
  ck_assert_int_eq(ok.st, SCREE_OK);
  got_free(&ok);
}
END_TEST

/* Running out of memory is not the config's: the waiters get it, and the
 * next caller compiles again. */
START_TEST(transient_failure_compiles_again) {
  race_to_failure("sm_80", SCREE_ERROR_OUT_OF_MEMORY);
  oom_arch = NULL;
  fake_delay_us = 0;
  got a = get(&fake, &cfg, "sm_80"), b = get(&fake, &cfg, "sm_80");
  ck_assert_int_eq(a.st, SCREE_OK);
  ck_assert_int_eq(a.compiled, 1);
  ck_assert_int_eq(b.compiled, 0);
  ck_assert_int_eq(fake_compiles, 2);
  got_free(&a);
  got_free(&b);
}
END_TEST

/* The table lives while a holder (a context) does: two holders share it;
 * after the last release a new holder starts empty. */
START_TEST(table_lives_with_its_holders) {
  scree__cubins_hold(); /* a second context */
  got a = get(&fake, &cfg, "sm_80");
  scree__cubins_release();
  got b = get(&fake, &cfg, "sm_80");
  ck_assert_int_eq(b.compiled, 0);
  ck_assert_int_eq(fake_compiles, 1);
  scree__cubins_release(); /* the last: the table goes */
  scree__cubins_hold();    /* teardown's */
  got c = get(&fake, &cfg, "sm_80");
  ck_assert_int_eq(c.compiled, 1);
  ck_assert_int_eq(fake_compiles, 2);
  got_free(&a);
  got_free(&b);
  got_free(&c);
}
END_TEST

START_TEST(no_nvrtc_is_refused) {
  got a = get(NULL, &cfg, "sm_80");
  ck_assert_int_eq(a.st, SCREE_ERROR_NO_NVRTC);
  ck_assert_ptr_null(a.cubin);
  ck_assert_int_eq(fake_compiles, 0);
}
END_TEST

/* With the real NVRTC (no GPU needed): the shared cubin is the one a
 * compile of one's own gives, byte for byte, and sm_80 and sm_90 are
 * compiled apart. */
START_TEST(real_nvrtc_shares_identical_cubins) {
  char why[1024];
  const scree__nvrtc_api *nv = scree__nvrtc_load(why, sizeof why, NULL);
  if (!nv) {
    printf("NVRTC not available (%s): real_nvrtc_shares_identical_cubins not run\n", why);
    return;
  }
  void *own;
  size_t own_size;
  char *log = NULL;
  ck_assert_int_eq(scree__compile(nv, op, &cfg, &var, "sm_80", NULL, &own, &own_size, &log),
                   SCREE_OK);
  free(log);
  got a = get(nv, &cfg, "sm_80"), b = get(nv, &cfg, "sm_80"), c = get(nv, &cfg, "sm_90");
  ck_assert_int_eq(a.st, SCREE_OK);
  ck_assert_int_eq(c.st, SCREE_OK);
  ck_assert(a.compiled && !b.compiled && c.compiled);
  ck_assert_uint_eq(a.size, own_size);
  ck_assert_mem_eq(a.cubin, own, own_size);
  ck_assert_mem_eq(b.cubin, own, own_size);
  ck_assert(c.size != own_size || memcmp(c.cubin, own, own_size));
  uint64_t compiles;
  scree__cubins_stats(&compiles, NULL);
  ck_assert_uint_eq(compiles, 2);
  free(own);
  got_free(&a);
  got_free(&b);
  got_free(&c);
}
END_TEST

SCREE_TEST_MAIN(.name = "cubins",
                .tests = SCREE_TESTS(same_target_compiles_once, other_keys_compile_apart,
                                     concurrent_requests_compile_once,
                                     compile_failure_reaches_every_waiter,
                                     transient_failure_compiles_again,
                                     table_lives_with_its_holders, no_nvrtc_is_refused,
                                     real_nvrtc_shares_identical_cubins),
                .setup = setup, .teardown = teardown)
