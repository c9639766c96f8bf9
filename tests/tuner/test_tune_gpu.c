/* test_tune_gpu.c - the tuner end to end on a GPU (label gpu): tune a
 * bucket, a second process hits the cache without compiling, a denied
 * config is never compiled, a failing config is recorded and skipped, a
 * policy plugged in through the options, the miss policies, the shipped
 * tuned configs under the user cache, the hot path's host overhead, a
 * faulting and a hanging candidate kept in the worker process, eight
 * processes that miss one bucket tuning it once, and the cold tune in a
 * worker and in process. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

SCREE__REFERENCE(rmsnorm);

extern char **environ;

static char g_dir[256];
static char g_db[300];
static const char *g_probe;

/* Log lines captured from the context, to see what was compiled. */
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char *g_log;
static size_t g_log_len;

static void capture(void *user, scree_log_level lvl, const char *msg) {
  (void)user, (void)lvl;
  pthread_mutex_lock(&g_log_lock);
  size_t n = strlen(msg);
  g_log = realloc(g_log, g_log_len + n + 2);
  memcpy(g_log + g_log_len, msg, n);
  g_log[g_log_len + n] = '\n';
  g_log_len += n + 1;
  g_log[g_log_len] = 0;
  pthread_mutex_unlock(&g_log_lock);
}

static void log_reset(void) {
  pthread_mutex_lock(&g_log_lock);
  g_log_len = 0;
  if (g_log) g_log[0] = 0;
  pthread_mutex_unlock(&g_log_lock);
}

static int log_has(const char *needle) {
  pthread_mutex_lock(&g_log_lock);
  int r = g_log && strstr(g_log, needle);
  pthread_mutex_unlock(&g_log_lock);
  return r;
}

static scree_context *make_ctx(const char *db, scree_miss_policy policy) {
  scree_options o;
  scree_options_init(&o);
  o.cache_path = db;
  o.cache_search_path = "";
  o.miss_policy = policy;
  o.log_level = SCREE_LOG_DEBUG;
  o.log_fn = capture;
  scree_context *ctx = NULL;
  char why[512];
  scree_status st = scree_create(&o, &ctx, why, sizeof why);
  ck_assert_msg(st == SCREE_OK, "%s: %s", scree_status_name(st), why);
  return ctx;
}

static scree__bucket bucket_of(long rows, long cols) {
  scree_rmsnorm_args a = {.rows = rows, .cols = cols};
  const scree__variant v = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  scree__bucket b;
  scree__bucket_of(scree__op_find("rmsnorm"), &v, &a, &b);
  return b;
}
/* A pointer to a bucket, for calls that take one. */
#define BK(rows, cols) ((scree__bucket[1]){bucket_of(rows, cols)})

static const scree__variant fp16 = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};

/* Runs the probe in a new process (posix_spawn: exec, no CUDA across a
 * fork) and returns its exit status; its stdout line goes to out. */
static int run_probe(const char *db, long rows, long cols, const char *dtype, char *out,
                     size_t n) {
  char r[32], c[32];
  snprintf(r, sizeof r, "%ld", rows);
  snprintf(c, sizeof c, "%ld", cols);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char *args[] = {(char *)g_probe, (char *)db, r, c, (char *)dtype, NULL};
  pid_t pid;
  ck_assert_int_eq(posix_spawn(&pid, g_probe, &fa, NULL, args, environ), 0);
  close(fds[1]);
  size_t len = 0;
  ssize_t k;
  while (len + 1 < n && (k = read(fds[0], out + len, n - 1 - len)) > 0) len += (size_t)k;
  out[len] = 0;
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  posix_spawn_file_actions_destroy(&fa);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static long field(const char *line, const char *name) {
  const char *p = strstr(line, name);
  return p ? atol(p + strlen(name)) : -1;
}

START_TEST(tune_then_second_process_hits_cache) {
  scree_context *ctx = make_ctx(g_db, SCREE_MISS_DEFAULT);
  const scree__op *op = scree__op_find("rmsnorm");
  scree__tune_result res;
  const double t0 = (double)clock() / CLOCKS_PER_SEC;
  scree_status st = scree__tune(ctx, op, &fp16, BK(4096, 4096), NULL, &res);
  (void)t0;
  ck_assert_msg(st == SCREE_OK, "%s", scree_last_error(ctx));
  char cs[128];
  scree__config_str(op, &res.cfg, cs, sizeof cs);
  printf("cold tune rows<=4096,cols=4096 fp16: %.3f s, %d candidates, %d timed, winner %s "
         "%.2f us (default %.2f us)\n",
         res.seconds, res.candidates, res.timed, cs, res.median_us, res.default_us);
  ck_assert_int_gt(res.timed, 1);
  ck_assert_int_eq(res.failed, 0);
  ck_assert(res.median_us > 0 && res.median_us <= res.default_us * 1.05);
  /* The winner is in the cache with a matching cubin. */
  scree__ckey key;
  scree__make_key(ctx, op, &fp16, BK(4096, 4096), &key);
  scree__centry e;
  ck_assert_int_eq(scree__cache_get(ctx->caches->user, &key, &e), SCREE_OK);
  ck_assert_str_eq(e.config, cs);
  ck_assert(e.cubin_ok && e.cubin_size > 0);
  scree__centry_free(&e);
  /* A second tune of the same bucket picks the same config or one within
   * noise. */
  scree__tune_result again;
  ck_assert_int_eq(scree__tune(ctx, op, &fp16, BK(4096, 4096), NULL, &again), SCREE_OK);
  char cs2[128];
  scree__config_str(op, &again.cfg, cs2, sizeof cs2);
  printf("second tune: winner %s %.2f us\n", cs2, again.median_us);
  ck_assert_msg(!strcmp(cs, cs2) || again.median_us <= res.median_us * 1.05 ||
                    res.median_us <= again.median_us * 1.05,
                "tunes disagree beyond noise: %s %.2f vs %s %.2f", cs, res.median_us, cs2,
                again.median_us);
  scree_destroy(ctx);

  /* A new process, same cache, shape in the bucket: no compile at all. */
  char out[1024];
  int rc = run_probe(g_db, 3000, 4096, "fp16", out, sizeof out);
  printf("probe: %s", out);
  ck_assert_msg(rc == 0, "probe failed: %s", out);
  ck_assert_int_eq(field(out, "compiles="), 0);
  ck_assert_int_eq(field(out, "user_cache_hits="), 1);
  ck_assert_int_eq(field(out, "module_loads="), 1);
  /* The same on a machine without NVRTC; and a shape the cache lacks
   * fails there with a status that says so. */
  setenv("SCREE_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
  rc = run_probe(g_db, 3000, 4096, "fp16", out, sizeof out);
  printf("probe without NVRTC: %s", out);
  ck_assert_msg(rc == 0, "probe without NVRTC failed: %s", out);
  ck_assert_int_eq(field(out, "user_cache_hits="), 1);
  rc = run_probe(g_db, 3000, 4000, "fp16", out, sizeof out);
  unsetenv("SCREE_NVRTC_LIBRARY");
  ck_assert_int_eq(rc, 1);
  ck_assert_msg(strstr(out, "ERROR_CACHE_MISS"), "%s", out);
}
END_TEST

START_TEST(denied_config_is_never_compiled) {
  /* A safelist that allows two configs and denies the default: the tuner
   * compiles the two and never the denied one. */
  char sldir[300], path[400];
  snprintf(sldir, sizeof sldir, "%s/safelists", g_dir);
  mkdir(sldir, 0700);
  scree_context *probe = scree_test_gpu_context();
  snprintf(path, sizeof path, "%s/%s.txt", sldir, probe->arch);
  const scree__op *op = scree__op_find("rmsnorm");
  scree_rmsnorm_args rep = {.rows = 512, .cols = 2048, .x_dtype = SCREE_DTYPE_FP16,
                            .w_dtype = SCREE_DTYPE_FP16, .y_dtype = SCREE_DTYPE_FP16};
  scree__config dflt;
  scree__target tg;
  scree__target_of(probe, &tg);
  op->default_config(&tg, &fp16, &rep, &dflt);
  char ds[128];
  scree__config_str(op, &dflt, ds, sizeof ds);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  static const char *const allowed[2] = {"tpr=256,rows=1,vec=8,cache=1",
                                         "tpr=128,rows=1,vec=8,cache=2"};
  ck_assert_str_ne(ds, allowed[0]);
  ck_assert_str_ne(ds, allowed[1]);
  fprintf(f, "arch %s\nrmsnorm allow %s\nrmsnorm allow %s\n"
             "rmsnorm deny %s -- denied by the test\n", probe->arch, allowed[0], allowed[1], ds);
  fclose(f);
  setenv("SCREE_SAFELIST_DIR", sldir, 1);
  char db[400];
  snprintf(db, sizeof db, "%s/deny.db", g_dir);
  scree_context *ctx = make_ctx(db, SCREE_MISS_DEFAULT);
  unsetenv("SCREE_SAFELIST_DIR");
  log_reset();
  scree__tune_result res;
  ck_assert_int_eq(scree__tune(ctx, op, &fp16, BK(512, 2048), NULL, &res), SCREE_OK);
  char needle[200];
  /* The tuner logs each candidate once its cubin is known (compiled, or
   * reused from the process's table). */
  snprintf(needle, sizeof needle, "candidate rmsnorm %s for", ds);
  ck_assert_msg(!log_has(needle), "the denied config %s was compiled", ds);
  for (int i = 0; i < 2; i++) {
    snprintf(needle, sizeof needle, "candidate rmsnorm %s for", allowed[i]);
    ck_assert_msg(log_has(needle), "allowed %s was not compiled", allowed[i]);
  }
  ck_assert_msg(log_has(": compiled") || log_has(": reused ("), "no candidate's outcome logged");
  ck_assert_int_eq(res.candidates, 2);
  scree_destroy(ctx);
}
END_TEST

START_TEST(failing_config_recorded_and_skipped) {
  char db[400];
  snprintf(db, sizeof db, "%s/bad.db", g_dir);
  scree_context *ctx = make_ctx(db, SCREE_MISS_DEFAULT);
  const scree__op *op = scree__op_find("rmsnorm");
  scree__tune_opts o;
  scree__tune_opts_init(&o);
  /* Make the first safelisted candidate that survives pruning fail. */
  char vs[64];
  scree__variant_str(op, &fp16, vs, sizeof vs);
  scree__config cands[256];
  int n = scree__safelist_candidates(ctx->safelist, op, vs, cands, 256);
  scree_rmsnorm_args rep;
  op->representative(BK(1024, 1024), &fp16, 0, &rep);
  char victim[128] = "";
  for (int i = 0; i < n && !victim[0]; i++)
    if (op->impls[0].worth_timing(&cands[i], &fp16, &rep)) scree__config_str(op, &cands[i], victim, sizeof victim);
  ck_assert(victim[0]);
  o.poison_config = victim;
  scree__tune_result res;
  ck_assert_int_eq(scree__tune(ctx, op, &fp16, BK(1024, 1024), &o, &res), SCREE_OK);
  ck_assert_int_ge(res.failed, 1);
  char winner[128];
  scree__config_str(op, &res.cfg, winner, sizeof winner);
  ck_assert_str_ne(winner, victim);
  scree__ckey key;
  scree__make_key(ctx, op, &fp16, BK(1024, 1024), &key);
  char reason[256];
  const int nv = ctx->nvrtc_major * 1000 + ctx->nvrtc_minor * 10;
  ck_assert_int_eq(scree__cache_is_bad(ctx->caches->user, &key, victim, nv, reason, sizeof reason), 1);
  ck_assert(strstr(reason, "wrong answer"));
  /* Next time it is skipped before compiling. */
  log_reset();
  ck_assert_int_eq(scree__tune(ctx, op, &fp16, BK(1024, 1024), NULL, &res), SCREE_OK);
  ck_assert_int_ge(res.known_bad, 1);
  char needle[200];
  snprintf(needle, sizeof needle, "candidate rmsnorm %s for", victim);
  ck_assert_msg(!log_has(needle), "known-bad %s was compiled again", victim);
  scree_destroy(ctx);
}
END_TEST

/* A policy plugged in through opts.policy (tuner/policy.h): it proposes
 * nothing of its own, so the finished list is the default alone, and it
 * picks the last timed candidate. */
static int g_picks;

static scree_status only_the_default(const scree__policy *self, const scree__policy_in *in,
                                     scree__cands *c) {
  (void)self;
  scree__policy_finish(in, c);
  c->source = "the default alone";
  return SCREE_OK;
}

static int last_timed(const scree__policy *self, const scree__policy_in *in,
                      const scree__outcome *o, int n) {
  (void)self, (void)in;
  g_picks++;
  for (int i = n - 1; i >= 0; i--)
    if (o[i].ok) return i;
  return -1;
}

START_TEST(a_policy_plugs_in) {
  char db[400];
  snprintf(db, sizeof db, "%s/plugged.db", g_dir);
  scree_context *ctx = make_ctx(db, SCREE_MISS_DEFAULT);
  const scree__op *op = scree__op_find("rmsnorm");
  const scree__policy p = {
      .name = "only-default", .candidates = only_the_default, .pick = last_timed};
  scree__tune_opts o;
  scree__tune_opts_init(&o);
  o.policy = &p;
  o.store = 0;
  log_reset();
  scree__tune_result res;
  ck_assert_int_eq(scree__tune(ctx, op, &fp16, BK(2048, 2048), &o, &res), SCREE_OK);
  ck_assert_int_eq(res.candidates, 1);
  ck_assert_int_eq(res.timed, 1);
  ck_assert_int_eq(g_picks, 1);
  scree_rmsnorm_args rep;
  op->representative(BK(2048, 2048), &fp16, 0, &rep);
  scree__config d;
  scree__default_config(ctx, op, &fp16, &rep, &d);
  ck_assert(!memcmp(&res.cfg, &d, sizeof d));
  ck_assert(res.median_us > 0 && res.default_us == res.median_us);
  ck_assert(log_has("1 candidates (the default alone)"));
  scree_destroy(ctx);
}
END_TEST

static void run_once(scree_context *ctx, long rows, long cols, scree_status want) {
  const size_t es = 2, n = (size_t)rows * (size_t)cols;
  scree_devptr x = scree_test_dalloc(ctx, n * es), w = scree_test_dalloc(ctx, (size_t)cols * es),
               y = scree_test_dalloc(ctx, n * es);
  void *h = malloc(n * es);
  scree_test_fill(h, SCREE_DTYPE_FP16, n, 1);
  scree_test_h2d(ctx, x, h, n * es);
  scree_test_h2d(ctx, w, h, (size_t)cols * es);
  scree_rmsnorm_args a = {.x = x, .w = w, .y = y, .rows = rows, .cols = cols,
                          .x_dtype = SCREE_DTYPE_FP16, .w_dtype = SCREE_DTYPE_FP16,
                          .y_dtype = SCREE_DTYPE_FP16, .eps = 1e-6f};
  scree_test_dpoison(ctx, y, n * es);
  scree_status st = scree_rmsnorm(ctx, &a, NULL);
  ck_assert_msg(st == want, "got %s want %s: %s", scree_status_name(st), scree_status_name(want),
                scree_last_error(ctx));
  scree_test_sync(ctx);
  if (st == SCREE_OK) { /* whatever config ran, the answer is right */
    void *got = malloc(n * es), *ref = malloc(n * es);
    scree_test_d2h(ctx, got, y, n * es);
    scree__ref_rmsnorm(&a, (void *const[]){(void *)(h), (void *)(h), ref});
    double rtol, atol;
    scree__tolerance(SCREE_DTYPE_FP16, &rtol, &atol);
    ck_assert_uint_eq(scree__compare(got, ref, SCREE_DTYPE_FP16, n, rtol, atol, NULL), 0);
    free(got), free(ref);
  }
  scree_test_dfree(ctx, x), scree_test_dfree(ctx, w), scree_test_dfree(ctx, y);
  free(h);
}

START_TEST(miss_policies) {
  char db[400];
  snprintf(db, sizeof db, "%s/policy.db", g_dir);
  scree_counters c;
  /* error: nothing launched, the message says what to do. */
  scree_context *ctx = make_ctx(db, SCREE_MISS_ERROR);
  run_once(ctx, 100, 768, SCREE_ERROR_CACHE_MISS);
  ck_assert(strstr(scree_last_error(ctx), "prewarm"));
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.calls, 0);
  scree_destroy(ctx);
  /* default: runs, records the miss once per bucket. */
  ctx = make_ctx(db, SCREE_MISS_DEFAULT);
  run_once(ctx, 100, 768, SCREE_OK);
  run_once(ctx, 120, 768, SCREE_OK); /* same bucket: a memory hit */
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.safelist_defaults, 1);
  ck_assert_uint_eq(c.misses_recorded, 1);
  ck_assert_uint_eq(c.memory_hits, 1);
  ck_assert_uint_eq(c.calls, 2);
  scree_destroy(ctx);
  /* tune: tunes once, then the cache answers. */
  ctx = make_ctx(db, SCREE_MISS_TUNE);
  run_once(ctx, 100, 768, SCREE_OK);
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.tunes, 1);
  scree_destroy(ctx);
  ctx = make_ctx(db, SCREE_MISS_ERROR);
  run_once(ctx, 100, 768, SCREE_OK);
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.user_cache_hits, 1);
  ck_assert_uint_eq(c.tunes, 0);
  scree_destroy(ctx);
}
END_TEST

/* The shipped tuned configs are the cache stack's lowest level: a bucket
 * that only they hold runs their config (compiled: they carry no cubin)
 * and counts as a shipped hit; a row of the user cache outranks them. */
START_TEST(shipped_tuned_configs_answer_last) {
  char db[400], txt[400];
  snprintf(db, sizeof db, "%s/shipped-text.db", g_dir);
  snprintf(txt, sizeof txt, "%s/tuned.txt", g_dir);
  const scree__op *op = scree__op_find("rmsnorm");
  scree_context *ctx = make_ctx(db, SCREE_MISS_ERROR);
  scree__centry e;
  memset(&e, 0, sizeof e);
  scree__make_key(ctx, op, &fp16, BK(100, 768), &e.key);
  snprintf(e.config, sizeof e.config, "tpr=64,rows=2,vec=4,cache=4");
  scree_rmsnorm_args a = {.rows = 100, .cols = 768, .x_dtype = SCREE_DTYPE_FP16,
                          .w_dtype = SCREE_DTYPE_FP16, .y_dtype = SCREE_DTYPE_FP16};
  scree__config d;
  char cs[128];
  scree__default_config(ctx, op, &fp16, &a, &d);
  scree__config_str(op, &d, cs, sizeof cs);
  ck_assert_str_ne(cs, e.config); /* so that the config that ran shows */
  e.median_us = 1.5;
  snprintf(e.device_name, sizeof e.device_name, "%.127s", ctx->info.name);
  FILE *f = fopen(txt, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(scree__tuned_write(f, &e), 0);
  fclose(f);
  scree_destroy(ctx);

  setenv("SCREE_TUNED_CONFIGS", txt, 1);
  ctx = make_ctx(db, SCREE_MISS_ERROR);
  log_reset();
  run_once(ctx, 100, 768, SCREE_OK);
  scree_counters c;
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.shipped_cache_hits, 1);
  ck_assert_uint_eq(c.user_cache_hits, 0);
  ck_assert_uint_ge(c.compiles, 1);
  ck_assert(log_has("shipped tuned config"));
  scree__config ran;
  ck_assert(scree__plan_config(ctx, op, &fp16, &a, &ran));
  scree__config_str(op, &ran, cs, sizeof cs);
  ck_assert_str_eq(cs, e.config);
  /* A tune stores a row in the user cache: the next context takes it. */
  scree__tune_result res;
  ck_assert_int_eq(scree__tune(ctx, op, &fp16, BK(100, 768), NULL, &res), SCREE_OK);
  scree_destroy(ctx);
  ctx = make_ctx(db, SCREE_MISS_ERROR);
  run_once(ctx, 100, 768, SCREE_OK);
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.user_cache_hits, 1);
  ck_assert_uint_eq(c.shipped_cache_hits, 0);
  ck_assert_uint_eq(c.compiles, 0);
  scree_destroy(ctx);
  setenv("SCREE_TUNED_CONFIGS", "none", 1);
}
END_TEST

/* Candidates run in a worker process: one that writes out of bounds and
 * one that never finishes take down workers, are recorded as bad with
 * their reasons, and the tune goes on to a winner; this process's context
 * is untouched and runs RMSNorm correctly after. */
START_TEST(fault_and_hang_stay_in_the_worker) {
  char sldir[300], path[400];
  snprintf(sldir, sizeof sldir, "%s/safelists-fault", g_dir);
  mkdir(sldir, 0700);
  scree_context *probe = scree_test_gpu_context();
  snprintf(path, sizeof path, "%s/%s.txt", sldir, probe->arch);
  static const char *const allowed[3] = {"tpr=256,rows=1,vec=8,cache=1",
                                         "tpr=128,rows=1,vec=8,cache=2",
                                         "tpr=64,rows=1,vec=8,cache=4"};
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "arch %s\n", probe->arch);
  for (int i = 0; i < 3; i++) fprintf(f, "rmsnorm allow %s\n", allowed[i]);
  fclose(f);
  setenv("SCREE_SAFELIST_DIR", sldir, 1);
  char db[400];
  snprintf(db, sizeof db, "%s/fault.db", g_dir);
  scree_context *ctx = make_ctx(db, SCREE_MISS_ERROR);
  unsetenv("SCREE_SAFELIST_DIR");
  const scree__op *op = scree__op_find("rmsnorm");
  scree__tune_opts o;
  scree__tune_opts_init(&o);
  o.isolate = 1;
  o.fault_config = allowed[0];
  o.hang_config = allowed[1];
  o.candidate_limit_s = 5;
  scree__tune_result res;
  const double t0 = scree__now();
  scree_status st = scree__tune(ctx, op, &fp16, BK(512, 2048), &o, &res);
  ck_assert_msg(st == SCREE_OK, "%s", scree_last_error(ctx));
  char winner[128];
  scree__config_str(op, &res.cfg, winner, sizeof winner);
  printf("fault and hang: tune %.2f s, %d candidates, %d timed, %d failed, %d worker starts, "
         "winner %s %.2f us\n", scree__now() - t0, res.candidates, res.timed, res.failed,
         res.workers, winner, res.median_us);
  ck_assert_int_eq(res.failed, 2);
  ck_assert_int_eq(res.timed, res.candidates - 2);
  ck_assert_int_eq(res.workers, 3); /* the first, then one after each */
  ck_assert_str_ne(winner, allowed[0]);
  ck_assert_str_ne(winner, allowed[1]);
  scree__ckey key;
  scree__make_key(ctx, op, &fp16, BK(512, 2048), &key);
  const int nv = ctx->nvrtc_major * 1000 + ctx->nvrtc_minor * 10;
  char reason[256];
  ck_assert_int_eq(scree__cache_is_bad(ctx->caches->user, &key, allowed[0], nv, reason,
                                       sizeof reason), 1);
  printf("recorded bad %s: %s\n", allowed[0], reason);
  ck_assert_msg(strstr(reason, "ILLEGAL_ADDRESS"), "%s", reason);
  ck_assert_int_eq(scree__cache_is_bad(ctx->caches->user, &key, allowed[1], nv, reason,
                                       sizeof reason), 1);
  printf("recorded bad %s: %s\n", allowed[1], reason);
  ck_assert_msg(strstr(reason, "hang"), "%s", reason);
  /* This process's context never ran them: healthy, and RMSNorm on the
   * tuned bucket (a cache hit) and on another one is right. */
  const int pushed = scree__ctx_enter(ctx);
  ck_assert_int_eq(ctx->cu->CtxSynchronize(), CUDA_SUCCESS);
  scree__ctx_leave(ctx, pushed);
  run_once(ctx, 500, 2048, SCREE_OK);
  scree_counters c;
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.user_cache_hits, 1);
  scree_destroy(ctx);
  printf("after the fault and the hang, this process's RMSNorm (500 x 2048 fp16) is right\n");
}
END_TEST

/* Eight processes start at once and miss the same bucket (miss policy
 * tune): one tunes it, the others wait for its row; every answer is right
 * and the cache holds the one row. */
START_TEST(eight_processes_tune_once) {
  enum { NPROC = 8 };
  char db[400];
  snprintf(db, sizeof db, "%s/ranks.db", g_dir);
  pid_t pid[NPROC];
  int fd[NPROC];
  const double t0 = scree__now();
  for (int i = 0; i < NPROC; i++) {
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    char *args[] = {(char *)g_probe, db, "3000", "2560", "fp16", "tune", NULL};
    ck_assert_int_eq(posix_spawn(&pid[i], g_probe, &fa, NULL, args, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    fd[i] = p[0];
  }
  long tunes = 0;
  int failed = 0;
  for (int i = 0; i < NPROC; i++) {
    char out[1024];
    size_t len = 0;
    ssize_t k;
    while (len + 1 < sizeof out && (k = read(fd[i], out + len, sizeof out - 1 - len)) > 0)
      len += (size_t)k;
    out[len] = 0;
    close(fd[i]);
    int status;
    waitpid(pid[i], &status, 0);
    const int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("rank %d: %s%s", i, ok ? "" : "FAILED ", out);
    failed += !ok;
    tunes += field(out, "tunes=") > 0 ? field(out, "tunes=") : 0;
  }
  printf("%d processes at once: %ld tune(s) of the bucket in all, %.2f s\n", NPROC, tunes,
         scree__now() - t0);
  ck_assert_int_eq(failed, 0);
  ck_assert_int_eq(tunes, 1);
  scree_context *ctx = make_ctx(db, SCREE_MISS_ERROR);
  scree__ckey key;
  scree__make_key(ctx, scree__op_find("rmsnorm"), &fp16, BK(3000, 2560), &key);
  scree__centry e;
  ck_assert_int_eq(scree__cache_get(ctx->caches->user, &key, &e), SCREE_OK);
  ck_assert(e.cubin_ok);
  scree__centry_free(&e);
  scree_destroy(ctx);
}
END_TEST

/* The cold tune of one bucket with candidates in the worker and in this
 * process, side by side (fresh contexts and caches: both compile). */
START_TEST(cold_tune_isolated_and_in_process) {
  const scree__op *op = scree__op_find("rmsnorm");
  double secs[2];
  for (int iso = 1; iso >= 0; iso--) {
    char db[400];
    snprintf(db, sizeof db, "%s/cold%d.db", g_dir, iso);
    scree_context *ctx = make_ctx(db, SCREE_MISS_ERROR);
    scree__tune_opts o;
    scree__tune_opts_init(&o);
    o.isolate = iso;
    scree__tune_result res;
    ck_assert_int_eq(scree__tune(ctx, op, &fp16, BK(4096, 4096), &o, &res), SCREE_OK);
    secs[iso] = res.seconds;
    printf("cold tune rows<=4096,cols=4096 fp16 %s: %.3f s, %d timed, %d worker start(s), "
           "winner %.2f us\n", iso ? "in a worker" : "in process", res.seconds, res.timed,
           res.workers, res.median_us);
    ck_assert_int_eq(res.workers, iso);
    scree_destroy(ctx);
  }
  ck_assert_msg(secs[1] < secs[0] * 1.5 + 1.0, "worker %.2f s against %.2f s", secs[1], secs[0]);
}
END_TEST

static int count_miss(void *user, const scree__cmiss *m) {
  (void)m;
  ++*(int *)user;
  return 0;
}

/* Misses recorded by production calls are what prewarm --from-misses
 * tunes; each is removed once its bucket is cached. */
START_TEST(prewarm_from_misses) {
  char db[400], cmd[1024];
  snprintf(db, sizeof db, "%s/misses.db", g_dir);
  scree_context *ctx = make_ctx(db, SCREE_MISS_DEFAULT);
  /* An odd row length: the tuner must narrow the vectors as calls do. */
  run_once(ctx, 50, 1531, SCREE_OK);
  scree_counters c;
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.misses_recorded, 1);
  scree_destroy(ctx);
  snprintf(cmd, sizeof cmd, "'%s' prewarm --from-misses --cache '%s' --quiet", SCREE_TUNE_BIN, db);
  ck_assert_int_eq(system(cmd), 0);
  scree__cache *cache;
  ck_assert_int_eq(scree__cache_open(db, 1, &cache, NULL, NULL, 0), SCREE_OK);
  int misses = 0;
  scree__cache_foreach_miss(cache, NULL, NULL, count_miss, &misses);
  ck_assert_int_eq(misses, 0);
  scree__cache_close(cache);
  /* The next process finds the bucket tuned. */
  ctx = make_ctx(db, SCREE_MISS_ERROR);
  run_once(ctx, 60, 1531, SCREE_OK);
  scree_get_counters(ctx, &c);
  ck_assert_uint_eq(c.user_cache_hits, 1);
  scree_destroy(ctx);
}
END_TEST

/* verify re-checks every winner on this GPU: a good cache passes, and an
 * entry whose cubin computes something else (a bf16 kernel filed under an
 * fp16 key) is caught. */
START_TEST(verify_catches_a_wrong_entry) {
  char db[400], cmd[1024];
  snprintf(db, sizeof db, "%s/verify.db", g_dir);
  scree_context *ctx = make_ctx(db, SCREE_MISS_TUNE);
  run_once(ctx, 30, 2048, SCREE_OK); /* tunes rows<=32,cols=2048 */
  snprintf(cmd, sizeof cmd, "'%s' verify --cache '%s' --quiet", SCREE_TUNE_BIN, db);
  ck_assert_int_eq(system(cmd), 0);

  const scree__op *op = scree__op_find("rmsnorm");
  /* Same element size, so nothing is read out of bounds: only the values
   * are wrong (fp16 bits read as bf16). */
  const scree__variant bf16 = {{SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16}};
  scree_rmsnorm_args rep;
  op->representative(BK(64, 2048), &fp16, 0, &rep);
  scree__config cfg;
  scree__default_config(ctx, op, &fp16, &rep, &cfg);
  scree__centry e;
  memset(&e, 0, sizeof e);
  scree__make_key(ctx, op, &fp16, BK(64, 2048), &e.key);
  scree__config_str(op, &cfg, e.config, sizeof e.config);
  e.median_us = 1;
  snprintf(e.device_name, sizeof e.device_name, "test");
  char *log = NULL;
  ck_assert_int_eq(scree__compile(ctx->nvrtc, op, &cfg, &bf16, ctx->arch, NULL, &e.cubin,
                                  &e.cubin_size, &log),
                   SCREE_OK);
  free(log);
  ck_assert_int_eq(scree__cache_put(ctx->caches->user, &e, NULL), SCREE_OK);
  free(e.cubin);
  scree_destroy(ctx);
  snprintf(cmd, sizeof cmd, "'%s' verify --cache '%s' --quiet | grep -q WRONG", SCREE_TUNE_BIN, db);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "'%s' verify --cache '%s' --quiet >/dev/null", SCREE_TUNE_BIN, db);
  const int st = system(cmd);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}
END_TEST

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Host time per call on a cache hit against a bare cuLaunchKernel of the
 * same kernel, interleaved in batches; the median difference is scree's
 * overhead. The bound here is loose (a shared CI-less machine); the
 * measured figure goes in docs/performance.md. */
START_TEST(hot_path_overhead) {
  scree_context *ctx = scree_test_gpu_context();
  const long rows = 1, cols = 256;
  scree_devptr x = scree_test_dalloc(ctx, 4096), w = scree_test_dalloc(ctx, 4096),
               y = scree_test_dalloc(ctx, 4096);
  scree_rmsnorm_args a = {.x = x, .w = w, .y = y, .rows = rows, .cols = cols,
                          .x_dtype = SCREE_DTYPE_FP16, .w_dtype = SCREE_DTYPE_FP16,
                          .y_dtype = SCREE_DTYPE_FP16, .eps = 1e-6f};
  ck_assert_int_eq(scree_rmsnorm(ctx, &a, NULL), SCREE_OK);
  scree_test_sync(ctx);
  /* The plan the call used. */
  const scree__op *op = scree__op_find("rmsnorm");
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  scree__config cfg;
  scree__default_config(ctx, op, &var, &a, &cfg);
  scree__kernel k;
  ck_assert_int_eq(scree__kernel_get(ctx, op, &cfg, &var, &k), SCREE_OK);
  enum { BATCH = 200, ROUNDS = 31 };
  double s[ROUNDS], b[ROUNDS];
  int pushed = scree__ctx_enter(ctx);
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++) scree_rmsnorm(ctx, &a, NULL);
    double t1 = now_ns();
    ctx->cu->CtxSynchronize();
    double t2 = now_ns();
    for (int i = 0; i < BATCH; i++) op->impls[0].launch(ctx, &k, &cfg, &var, &a, NULL);
    double t3 = now_ns();
    ctx->cu->CtxSynchronize();
    s[r] = (t1 - t0) / BATCH;
    b[r] = (t3 - t2) / BATCH;
  }
  scree__ctx_leave(ctx, pushed);
  qsort(s, ROUNDS, sizeof s[0], cmp_d);
  qsort(b, ROUNDS, sizeof b[0], cmp_d);
  printf("host time per call: scree_rmsnorm %.0f ns, bare cuLaunchKernel %.0f ns, "
         "overhead %.0f ns\n", s[ROUNDS / 2], b[ROUNDS / 2], s[ROUNDS / 2] - b[ROUNDS / 2]);
  ck_assert_msg(s[ROUNDS / 2] - b[ROUNDS / 2] < 5000, "overhead %.0f ns",
                s[ROUNDS / 2] - b[ROUNDS / 2]);
  scree_test_dfree(ctx, x), scree_test_dfree(ctx, w), scree_test_dfree(ctx, y);
}
END_TEST

int main(int argc, char **argv) {
  (void)argc;
  scree_test_gpu_context(); /* exits 77 with a reason where there is no GPU */
  /* The probe sits next to this binary. */
  static char probe[4096];
  snprintf(probe, sizeof probe, "%s", argv[0]);
  char *slash = strrchr(probe, '/');
  snprintf(slash ? slash + 1 : probe, sizeof probe - (size_t)(slash ? slash + 1 - probe : 0),
           "cache_probe");
  g_probe = probe;
  snprintf(g_dir, sizeof g_dir, "/tmp/scree-tune-test-XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(g_db, sizeof g_db, "%s/tune.db", g_dir);
  Suite *s = suite_create("tune_gpu");
  TCase *tc = tcase_create("gpu");
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, tune_then_second_process_hits_cache);
  tcase_add_test(tc, denied_config_is_never_compiled);
  tcase_add_test(tc, failing_config_recorded_and_skipped);
  tcase_add_test(tc, a_policy_plugs_in);
  tcase_add_test(tc, miss_policies);
  tcase_add_test(tc, shipped_tuned_configs_answer_last);
  tcase_add_test(tc, prewarm_from_misses);
  tcase_add_test(tc, verify_catches_a_wrong_entry);
  tcase_add_test(tc, hot_path_overhead);
  tcase_add_test(tc, fault_and_hang_stay_in_the_worker);
  tcase_add_test(tc, eight_processes_tune_once);
  tcase_add_test(tc, cold_tune_isolated_and_in_process);
  suite_add_tcase(s, tc);
  int rc = scree_test_run(s, 1);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd)) {
  }
  return rc;
}
