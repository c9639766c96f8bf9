/* test_compile.c - every config of every op's space that passes the host
 * constraint check compiles with NVRTC to a cubin for sm_80 and sm_90, and
 * the host check agrees with the kernel's static_asserts. Needs NVRTC, not
 * a GPU. Compiles run on a thread pool (NVRTC is thread-safe). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static const scree__nvrtc_api *nv;

static void setup(void) {
  char why[1024];
  nv = scree__nvrtc_load(why, sizeof why, NULL);
  if (!nv) {
    printf("SKIP: NVRTC not available: %s\n", why);
    exit(SCREE_TEST_SKIP);
  }
}

typedef struct job {
  const scree__op *op;
  const scree__config *cfgs;
  const scree__variant *var;
  const char *arch;
  size_t failed;
  char first_failure[2048];
  pthread_mutex_t lock;
} job;

static void compile_one(void *p, int i) {
  job *j = p;
  void *cubin;
  size_t size;
  char *log = NULL;
  scree_status st = scree__compile(nv, j->op, &j->cfgs[i], j->var, j->arch, &cubin, &size, &log);
  if (st != SCREE_OK || size < 64 || memcmp(cubin, "\177ELF", 4)) {
    pthread_mutex_lock(&j->lock);
    if (!j->failed++) {
      char cs[128];
      scree__config_str(j->op, &j->cfgs[i], cs, sizeof cs);
      snprintf(j->first_failure, sizeof j->first_failure, "%s %s %s: %s", j->op->name, cs,
               j->arch, log ? log : "not an ELF cubin");
    }
    pthread_mutex_unlock(&j->lock);
  }
  if (st == SCREE_OK) free(cubin);
  free(log);
}

static size_t compile_all(const scree__op *op, const scree__config *cfgs,
                          size_t n, const scree__variant *var, const char *arch,
                          char *failure, size_t fsize) {
  job j = {.op = op, .cfgs = cfgs, .var = var, .arch = arch};
  pthread_mutex_init(&j.lock, NULL);
  scree__parallel_for((int)n, 16, compile_one, &j);
  pthread_mutex_destroy(&j.lock);
  snprintf(failure, fsize, "%s", j.first_failure);
  return j.failed;
}

static const char *const archs[] = {"sm_80", "sm_90"};

/* The whole space for one arch (loop index), fp16 in and out. */
START_TEST(whole_space_compiles) {
  const char *arch = archs[_i];
  for (int o = 0; scree__ops[o]; o++) {
    const scree__op *op = scree__ops[o];
    size_t total = (size_t)scree__config_space(op, NULL, 0);
    scree__config *all = calloc(total, sizeof *all);
    scree__config_space(op, all, (int)total);
    scree__variant var = {{0}};
    for (int v = 0; v < op->nvfields; v++)
      var.v[v] = op->vfields[v].is_dtype ? SCREE_DTYPE_FP16 : 0;
    size_t n = 0;
    char why[256];
    for (size_t i = 0; i < total; i++)
      if (op->check(&all[i], &var, why, sizeof why)) all[n++] = all[i];
    char failure[2048];
    size_t failed = compile_all(op, all, n, &var, arch, failure, sizeof failure);
    printf("%s %s: %zu of %zu configs pass the check; %zu failed to compile\n",
           op->name, arch, n, total, failed);
    ck_assert_msg(failed == 0, "%zu configs failed; first: %s", failed, failure);
    ck_assert_uint_gt(n, 0);
    free(all);
  }
}
END_TEST

/* Arch-specific targets compile too (ops that use wgmma or setmaxnreg ask
 * for sm_90a through scree__op.arch_specific). */
START_TEST(arch_specific_target_compiles) {
  const scree__op *op = scree__op_find("rmsnorm");
  const scree__variant var = {{SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16}};
  scree__config cfg;
  op->default_config(90, &var, NULL, &cfg);
  char failure[2048];
  ck_assert_msg(compile_all(op, &cfg, 1, &var, "sm_90a", failure, sizeof failure) == 0, "%s",
                failure);
  scree_context *ctx = scree__context_offline();
  snprintf(ctx->arch, sizeof ctx->arch, "sm_90");
  ctx->sm = 90;
  scree__op special = *op;
  char t[16];
  ck_assert_str_eq(scree__target_arch(ctx, op, t), "sm_90");
  special.arch_specific = 1;
  ck_assert_str_eq(scree__target_arch(ctx, &special, t), "sm_90a");
  snprintf(ctx->arch, sizeof ctx->arch, "sm_80");
  ctx->sm = 80;
  ck_assert_str_eq(scree__target_arch(ctx, &special, t), "sm_80");
  scree_destroy(ctx);
}
END_TEST

/* Every dtype combination with each arch's default config. */
START_TEST(every_dtype_compiles) {
  for (int o = 0; scree__ops[o]; o++) {
    const scree__op *op = scree__ops[o];
    int ndt = 0;
    for (int v = 0; v < op->nvfields; v++) ndt += op->vfields[v].is_dtype;
    int combos = 1;
    for (int i = 0; i < ndt; i++) combos *= 3;
    scree__config *cfgs = calloc((size_t)combos, sizeof *cfgs);
    scree__variant *vars = calloc((size_t)combos, sizeof *vars);
    for (int c = 0; c < combos; c++) {
      int k = c;
      for (int v = 0; v < op->nvfields; v++)
        if (op->vfields[v].is_dtype) vars[c].v[v] = k % 3, k /= 3;
    }
    for (int a = 0; a < 2; a++) {
      for (int c = 0; c < combos; c++) {
        char failure[2048];
        op->default_config(a ? 90 : 80, &vars[c], NULL, &cfgs[c]);
        size_t failed = compile_all(op, &cfgs[c], 1, &vars[c], archs[a], failure,
                                    sizeof failure);
        ck_assert_msg(failed == 0, "%s", failure);
      }
    }
    free(cfgs);
    free(vars);
  }
}
END_TEST

/* Configs the host rejects are rejected by the kernel's static_asserts too,
 * so the two statements of the constraints agree. */
START_TEST(host_check_matches_static_asserts) {
  const scree__op *op = scree__op_find("rmsnorm");
  ck_assert_ptr_nonnull(op);
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  const scree__config bad[] = {
      {{8, 1, 8, 1}},    /* 8 threads: fewer than a warp */
      {{1024, 2, 8, 1}}, /* 2048 threads */
      {{128, 1, 8, 16}}, /* 128 elements of registers per thread */
      {{96, 1, 8, 1}},   /* not a power of two */
      {{128, 1, 3, 1}},  /* vec 3 */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char why[256] = "";
    ck_assert_int_eq(op->check(&bad[i], &var, why, sizeof why), 0);
    ck_assert(strlen(why) > 0);
    void *cubin = NULL;
    size_t size;
    char *log = NULL;
    scree_status st = scree__compile(nv, op, &bad[i], &var, "sm_90", &cubin, &size, &log);
    ck_assert_msg(st == SCREE_ERROR_COMPILE, "config %zu compiled", i);
    ck_assert_msg(log && strstr(log, "static assertion"), "log: %s", log ? log : "");
    free(log);
  }
}
END_TEST

START_TEST(config_strings_roundtrip) {
  const scree__op *op = scree__op_find("rmsnorm");
  scree__config c = {{256, 2, 8, 4}}, back;
  char s[128], why[128];
  scree__config_str(op, &c, s, sizeof s);
  ck_assert_str_eq(s, "tpr=256,rows=2,vec=8,cache=4");
  ck_assert_int_eq(scree__config_parse(op, s, &back, why, sizeof why), 0);
  ck_assert_int_eq(memcmp(&c, &back, sizeof c), 0);
  ck_assert_int_eq(scree__config_parse(op, "tpr=256,rows=2,vec=8", &back, why, sizeof why), -1);
  ck_assert(strstr(why, "cache missing"));
  ck_assert_int_eq(scree__config_parse(op, "tpr=256,rows=2,vec=8,cache=4,foo=1", &back, why, sizeof why), -1);
  ck_assert(strstr(why, "foo"));
  ck_assert_int_eq(scree__config_parse(op, "tpr=x,rows=2,vec=8,cache=4", &back, why, sizeof why), -1);
  ck_assert_int_eq(scree__config_parse(op, "tpr=1,tpr=2,rows=2,vec=8,cache=4", &back, why, sizeof why), -1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("compile");
  TCase *tc = tcase_create("nvrtc");
  tcase_add_unchecked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 1800);
  tcase_add_loop_test(tc, whole_space_compiles, 0, 2);
  tcase_add_test(tc, every_dtype_compiles);
  tcase_add_test(tc, arch_specific_target_compiles);
  tcase_add_test(tc, host_check_matches_static_asserts);
  tcase_add_test(tc, config_strings_roundtrip);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
