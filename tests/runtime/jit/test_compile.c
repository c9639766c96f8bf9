/* test_compile.c - kernels compile with NVRTC to cubins for sm_80 and
 * sm_90 (sm_90a for arch-specific implementations), and the host check
 * agrees with the kernels' static_asserts. Needs NVRTC, not a GPU. Compiles
 * run on a thread pool (NVRTC is thread-safe).
 *
 * Two Check test cases, which tests/CMakeLists.txt registers apart:
 * - "quick" (ctest test_compile, label quick): for every op and arch, a
 *   sample of its variants in which every value of every variant field
 *   appears (all of them where there are at most 12) at their default
 *   configs, and the first, middle and last config the arch's safelist
 *   allows for the op; configs the host rejects
 *   fail the kernels' static_asserts; config strings and arch-specific
 *   targets. A kernel that no longer compiles at its defaults, or a host
 *   check that disagrees with a static_assert, fails here.
 * - "sweep" (ctest test_compile_<op>, label slow, one per op through
 *   SCREE_TEST_OPS): the op's whole checked space at the example variant
 *   (or a sample of it), every variant at its default and with every
 *   config the safelist allows for it, and every config of an
 *   arch-specific implementation at every variant.
 * Run by hand without CK_RUN_CASE, it runs both; SCREE_TEST_OPS=a,b limits
 * either to those ops. */
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
  const scree__variant *var;  /* one variant for all, or */
  const scree__variant *vars; /* one per config */
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
  const scree__variant *var = j->vars ? &j->vars[i] : j->var;
  char target[16];
  scree__target_arch(j->arch, atoi(j->arch + 3), &j->op->impls[j->cfgs[i].impl], target);
  scree_status st = scree__compile(nv, j->op, &j->cfgs[i], var, target, NULL, &cubin, &size, &log);
  if (st != SCREE_OK || size < 64 || memcmp(cubin, "\177ELF", 4)) {
    pthread_mutex_lock(&j->lock);
    if (!j->failed++) {
      char cs[128], vs[128];
      scree__config_str(j->op, &j->cfgs[i], cs, sizeof cs);
      scree__variant_str(j->op, var, vs, sizeof vs);
      snprintf(j->first_failure, sizeof j->first_failure, "%s %s %s %s: %.1500s", j->op->name,
               cs, vs, target, log ? log : "not an ELF cubin");
    }
    pthread_mutex_unlock(&j->lock);
  }
  if (st == SCREE_OK) free(cubin);
  free(log);
}

/* Compiles n configs, with one variant for all (var) or one each (vars). */
static size_t compile_all(const scree__op *op, const scree__config *cfgs,
                          const scree__variant *vars, size_t n, const scree__variant *var,
                          const char *arch, char *failure, size_t fsize) {
  job j = {.op = op, .cfgs = cfgs, .var = var, .vars = vars, .arch = arch};
  pthread_mutex_init(&j.lock, NULL);
  scree__parallel_for((int)n, 16, compile_one, &j);
  pthread_mutex_destroy(&j.lock);
  snprintf(failure, fsize, "%s", j.first_failure);
  return j.failed;
}

static const char *const archs[] = {"sm_80", "sm_90"};

/* 1 if the comma-separated list names the op. */
static int listed(const char *list, const scree__op *op) {
  const size_t n = strlen(op->name);
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && !strncmp(p, op->name, n)) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

/* SCREE_TEST_OPS=a,b limits the compile tests to those ops (while working
 * on one; each sweep's ctest sets it); unset, every op is compiled. */
static int op_selected(const scree__op *op) {
  const char *sel = getenv("SCREE_TEST_OPS");
  return !sel || !*sel || listed(sel, op);
}

static int variant_count(const scree__op *op) {
  int combos = 1;
  for (int v = 0; v < op->nvfields; v++) combos *= op->vfields[v].nvalues;
  return combos;
}

/* Variant number c of the product of the op's variant fields' values. */
static void variant_of_combo(const scree__op *op, int c, scree__variant *var) {
  memset(var, 0, sizeof *var);
  for (int v = 0; v < op->nvfields; v++) {
    var->v[v] = op->vfields[v].values[c % op->vfields[v].nvalues];
    c /= op->vfields[v].nvalues;
  }
}

/* Whether combo c is in the quick sample of an op with more than 12
 * variants: those whose value indices sum to a multiple of m = ceil(combos
 * / 12), about 12 variants in which every value of every field appears
 * (9 of attention's 40, 9 of a norm's 27, 12 of RoPE's 36); the sweep
 * compiles them all. */
static int in_sample(const scree__op *op, int c) {
  const int m = (variant_count(op) + 11) / 12;
  int sum = 0;
  for (int v = 0; v < op->nvfields; v++) {
    sum += c % op->vfields[v].nvalues;
    c /= op->vfields[v].nvalues;
  }
  return sum % m == 0;
}

/* Every variant the op supports (the product of its variant fields'
 * values), or with sample set in_sample's, in vars, and its shape-free
 * default for t in cfgs, which must pass the host check; returns the
 * count. */
static int variant_defaults(const scree__op *op, const scree__target *t, scree__config *cfgs,
                            scree__variant *vars, int sample) {
  const int combos = variant_count(op);
  int n = 0;
  for (int c = 0; c < combos; c++) {
    if (sample && !in_sample(op, c)) continue;
    char vs[128], why[512];
    variant_of_combo(op, c, &vars[n]);
    scree__variant_str(op, &vars[n], vs, sizeof vs);
    op->default_config(t, &vars[n], NULL, &cfgs[n]);
    ck_assert_msg(scree__config_check(op, &cfgs[n], &vars[n], t, why, sizeof why),
                  "%s default for %s fails its check: %s", op->name, vs, why);
    n++;
  }
  return n;
}

/* ---- quick ------------------------------------------------------------------ */

/* A sample of each op's variants compiles at the arch's default (the
 * sweep's every_variant_compiles compiles every variant's). */
START_TEST(every_variant_default_compiles) {
  const int sample = 1;
  const char *arch = archs[_i];
  scree__target t;
  scree__target_for_arch(arch, &t);
  for (int o = 0; scree__ops[o]; o++) {
    const scree__op *op = scree__ops[o];
    if (!op_selected(op)) continue;
    const int combos = variant_count(op);
    scree__config *cfgs = calloc((size_t)combos, sizeof *cfgs);
    scree__variant *vars = calloc((size_t)combos, sizeof *vars);
    const int n = variant_defaults(op, &t, cfgs, vars, sample);
    char failure[2048];
    const double t0 = scree__now();
    const size_t failed =
        compile_all(op, cfgs, vars, (size_t)n, NULL, arch, failure, sizeof failure);
    printf("%s %s: %d of %d variants at their defaults; %zu failed (%.1f s)\n", op->name, arch,
           n, combos, failed, scree__now() - t0);
    ck_assert_msg(failed == 0, "%zu configs failed; first: %s", failed, failure);
    free(cfgs);
    free(vars);
  }
}
END_TEST

/* The first, middle and last config the arch's safelist allows for each op
 * (its allow and default lines in file order), at the line's variant or,
 * for a "*" line, the example variant: each passes the host check and
 * compiles. The op's sweep compiles every line. */
START_TEST(safelisted_samples_compile) {
  const char *arch = archs[_i];
  scree__target t;
  scree__target_for_arch(arch, &t);
  scree__safelist sl;
  char why[512];
  ck_assert_msg(scree__safelist_for_arch(arch, &sl, why, sizeof why) == SCREE_OK, "%s", why);
  for (int o = 0; scree__ops[o]; o++) {
    const scree__op *op = scree__ops[o];
    if (!op_selected(op)) continue;
    int lines = 0;
    for (int e = 0; e < sl.n; e++)
      lines += sl.entries[e].op == op && sl.entries[e].verb != SCREE__SL_DENY;
    const int pick[3] = {0, (lines - 1) / 2, lines - 1};
    scree__config cfgs[3];
    scree__variant vars[3];
    size_t n = 0;
    for (int e = 0, k = 0; e < sl.n && lines; e++) {
      const scree__sl_entry *en = &sl.entries[e];
      if (en->op != op || en->verb == SCREE__SL_DENY) continue;
      if (k == pick[0] || k == pick[1] || k == pick[2]) {
        if (strcmp(en->dtype, "*"))
          ck_assert_int_eq(scree__variant_parse(op, en->dtype, &vars[n], NULL, 0), 0);
        else
          scree__variant_example(op, &vars[n]);
        ck_assert_msg(scree__config_check(op, &en->cfg, &vars[n], &t, why, sizeof why),
                      "%s:%d fails its check: %s", sl.source, en->line, why);
        cfgs[n++] = en->cfg;
      }
      k++;
    }
    char failure[2048];
    const size_t failed = compile_all(op, cfgs, vars, n, NULL, arch, failure, sizeof failure);
    printf("%s %s: %zu of %d safelisted configs; %zu failed\n", op->name, arch, n, lines, failed);
    ck_assert_msg(failed == 0, "%zu configs failed; first: %s", failed, failure);
  }
  scree__safelist_free(&sl);
}
END_TEST

/* tests/CMakeLists.txt registers one sweep per op, test_compile_<op>, with
 * the ops it reads from src/runtime/ops/registry.h, and passes the list it
 * read: an op it missed (after a change to the list's format) fails here
 * rather than silently losing its sweep. */
START_TEST(every_op_has_a_sweep) {
  for (int o = 0; scree__ops[o]; o++)
    ck_assert_msg(listed(SCREE_TEST_SWEPT_OPS, scree__ops[o]),
                  "no test_compile_%s: tests/CMakeLists.txt read the ops %s from registry.h",
                  scree__ops[o]->name, SCREE_TEST_SWEPT_OPS);
}
END_TEST

/* Arch-specific targets: an implementation marked arch_specific compiles
 * for sm_90a on sm_90 and later, and for the plain arch before. */
START_TEST(arch_specific_target_compiles) {
  const scree__op *op = scree__op_find("rmsnorm");
  const scree__variant var = {{SCREE_DTYPE_BF16, SCREE_DTYPE_BF16, SCREE_DTYPE_BF16}};
  scree__target t = {90, 227 * 1024, 1};
  scree__config cfg;
  op->default_config(&t, &var, NULL, &cfg);
  void *cubin;
  size_t size;
  char *log = NULL;
  ck_assert_msg(scree__compile(nv, op, &cfg, &var, "sm_90a", NULL, &cubin, &size, &log) == SCREE_OK,
                "%s", log ? log : "");
  free(cubin);
  free(log);
  scree__impl special = op->impls[0];
  char buf[16];
  ck_assert_str_eq(scree__target_arch("sm_90", 90, &special, buf), "sm_90");
  special.arch_specific = 1;
  ck_assert_str_eq(scree__target_arch("sm_90", 90, &special, buf), "sm_90a");
  ck_assert_str_eq(scree__target_arch("sm_80", 80, &special, buf), "sm_80");
}
END_TEST

/* The attention backward's hopper implementation (sm_90a, wgmma): each of
 * its configs at four variants that between them take every branch the
 * variant selects (head_dim 64 and 128, both dtypes, causal, windows);
 * every one must pass the host check at sm_90 and compile. Its whole
 * space over every variant is in the sweep (arch_specific_space_compiles). */
START_TEST(attention_backward_hopper_compiles) {
  const scree__op *op = scree__op_find("attention_backward");
  static const char *const variants[] = {
      "dtype=fp16,head_dim=64,causal=1,window=0", "dtype=bf16,head_dim=64,causal=0,window=1",
      "dtype=fp16,head_dim=128,causal=0,window=0", "dtype=bf16,head_dim=128,causal=1,window=1"};
  static const char *const configs[] = {"impl=hopper,bn=64,stages=1", "impl=hopper,bn=64,stages=2",
                                        "impl=hopper,bn=128,stages=1",
                                        "impl=hopper,bn=128,stages=2"};
  scree__config cfgs[16];
  scree__variant vars[16];
  scree__target t;
  scree__target_for_arch("sm_90", &t);
  char why[256];
  size_t n = 0;
  for (int v = 0; v < 4; v++)
    for (int c = 0; c < 4; c++, n++) {
      ck_assert_int_eq(scree__variant_parse(op, variants[v], &vars[n], why, sizeof why), 0);
      ck_assert_msg(scree__config_parse(op, configs[c], &cfgs[n], why, sizeof why) == 0, "%s", why);
      ck_assert_str_eq(op->impls[cfgs[n].impl].name, "hopper");
      ck_assert(op->impls[cfgs[n].impl].arch_specific);
      ck_assert_msg(scree__config_check(op, &cfgs[n], &vars[n], &t, why, sizeof why), "%s %s: %s",
                    configs[c], variants[v], why);
    }
  char failure[2048];
  const size_t failed = compile_all(op, cfgs, vars, n, NULL, "sm_90", failure, sizeof failure);
  ck_assert_msg(failed == 0, "%zu of %zu failed; first: %s", failed, n, failure);
  /* Not on sm_80 (min_sm 90), and not the default (hopper_ws is sm_90's:
   * attention_backward_hopper_ws_compiles). */
  scree__target t80;
  scree__target_for_arch("sm_80", &t80);
  ck_assert(!scree__config_check(op, &cfgs[0], &vars[0], &t80, why, sizeof why));
  scree__config d;
  op->default_config(&t, &vars[3], NULL, &d);
  ck_assert_str_ne(op->impls[d.impl].name, "hopper");
}
END_TEST

/* The warp-specialized implementation (hopper_ws: the same kernel file with
 * SCREE_WS=1; tensor maps, mbarriers, setmaxnreg, bulk reductions): every
 * config, each at one of the four variants below in turn, must pass the
 * host check at sm_90 and compile (the slow sweep's
 * arch_specific_space_compiles compiles every pair), and the kernel must
 * be the warp-specialized entry (the v1 entry is compiled out). The one
 * refusal: head_dim 128 with bn=128, stages=3 and dqb=1 needs 233048
 * bytes of shared memory. */
START_TEST(attention_backward_hopper_ws_compiles) {
  const scree__op *op = scree__op_find("attention_backward");
  static const char *const variants[] = {
      "dtype=fp16,head_dim=64,causal=1,window=0", "dtype=bf16,head_dim=64,causal=0,window=1",
      "dtype=fp16,head_dim=128,causal=0,window=0", "dtype=bf16,head_dim=128,causal=1,window=1"};
  scree__config all[64], cfgs[32];
  scree__variant vars[32];
  scree__target t;
  scree__target_for_arch("sm_90", &t);
  char why[256];
  const int na = scree__config_space(op, all, 64);
  ck_assert_int_le(na, 64);
  size_t n = 0, refused = 0;
  for (int i = 0, k = 0; i < na; i++) {
    if (strcmp(op->impls[all[i].impl].name, "hopper_ws")) continue;
    ck_assert_uint_lt(n, 32);
    cfgs[n] = all[i];
    ck_assert(op->impls[cfgs[n].impl].arch_specific);
    const char *v = variants[k++ % 4];
    ck_assert_int_eq(scree__variant_parse(op, v, &vars[n], why, sizeof why), 0);
    char cs[128];
    scree__config_str(op, &cfgs[n], cs, sizeof cs);
    if (!scree__config_check(op, &cfgs[n], &vars[n], &t, why, sizeof why)) {
      ck_assert_msg(strstr(cs, "bn=128,stages=3") && strstr(cs, "dqb=1") &&
                        strstr(v, "head_dim=128") && strstr(why, "shared memory"),
                    "%s %s: %s", cs, v, why);
      refused++;
      continue;
    }
    n++;
  }
  ck_assert_uint_eq(n + refused, 16); /* bn 64, 128 x stages 2, 3 x ovl 0, 1 x dqb 0, 1 */
  char failure[2048];
  const size_t failed = compile_all(op, cfgs, vars, n, NULL, "sm_90", failure, sizeof failure);
  ck_assert_msg(failed == 0, "%zu of %zu failed; first: %s", failed, n, failure);
  /* A config string names it in full, and it is never the default. */
  scree__config c;
  ck_assert_int_eq(
      scree__config_parse(op, "impl=hopper_ws,bn=128,stages=2,ovl=1,dqb=1", &c, why, sizeof why), 0);
  ck_assert_str_eq(op->impls[c.impl].name, "hopper_ws");
  ck_assert_str_eq(op->impls[c.impl].entries[0], "scree_attention_bwd_hopper_ws");
  ck_assert_int_ne(
      scree__config_parse(op, "impl=hopper_ws,bn=128,stages=2,ovl=1", &c, why, sizeof why), 0);
  scree__target t80;
  scree__target_for_arch("sm_80", &t80);
  ck_assert(!scree__config_check(op, &cfgs[0], &vars[0], &t80, why, sizeof why));
  /* sm_90's default at head_dim 64 and 128 (both in vars), the generic one
   * on sm_80, at head_dim 96, and without tensor maps. */
  scree__config d;
  char ds[128];
  for (size_t i = 0; i < n; i++) {
    op->default_config(&t, &vars[i], NULL, &d);
    scree__config_str(op, &d, ds, sizeof ds);
    ck_assert_str_eq(ds, "impl=hopper_ws,bn=128,stages=2,ovl=0,dqb=0");
    op->default_config(&t80, &vars[i], NULL, &d);
    ck_assert_str_eq(op->impls[d.impl].name, "generic");
  }
  scree__target nomaps = t;
  nomaps.tensor_maps = 0;
  op->default_config(&nomaps, &vars[0], NULL, &d);
  ck_assert_str_eq(op->impls[d.impl].name, "generic");
  scree__variant v96;
  ck_assert_int_eq(scree__variant_parse(op, "dtype=fp16,head_dim=96,causal=1,window=0", &v96, why,
                                        sizeof why),
                   0);
  op->default_config(&t, &v96, NULL, &d);
  ck_assert_str_eq(op->impls[d.impl].name, "generic");
}
END_TEST

/* Configs the host rejects are rejected by the kernel's static_asserts too,
 * so the two statements of the constraints agree. */
typedef struct bad_case {
  const char *op, *variant, *config;
} bad_case;

static const bad_case bad_cases[] = {
    {"rmsnorm", "x=fp16,w=fp16,y=fp16", "tpr=8,rows=1,vec=8,cache=1"},    /* fewer than a warp */
    {"rmsnorm", "x=fp16,w=fp16,y=fp16", "tpr=1024,rows=2,vec=8,cache=1"}, /* 2048 threads */
    {"rmsnorm", "x=fp16,w=fp16,y=fp16", "tpr=128,rows=1,vec=8,cache=16"}, /* 128 registers */
    {"rmsnorm", "x=fp16,w=fp16,y=fp16", "tpr=96,rows=1,vec=8,cache=1"},   /* not a power of two */
    {"rmsnorm", "x=fp16,w=fp16,y=fp16", "tpr=128,rows=1,vec=3,cache=1"},  /* vec 3 */
    {"attention", "dtype=fp16,head_dim=128,causal=0,window=0",
     "impl=generic,bm=64,bn=64,warps=8,stages=2,qreg=1,sched=1"}, /* 8 rows per warp */
    {"attention", "dtype=fp16,head_dim=128,causal=0,window=0",
     "impl=generic,bm=128,bn=48,warps=4,stages=2,qreg=1,sched=1"}, /* bn not 32, 64 or 128 */
    {"attention", "dtype=fp16,head_dim=128,causal=0,window=0",
     "impl=generic,bm=128,bn=64,warps=4,stages=4,qreg=1,sched=1"}, /* 4 stages */
    {"attention", "dtype=fp16,head_dim=256,causal=0,window=0",
     "impl=generic,bm=128,bn=128,warps=4,stages=1,qreg=1,sched=1"}, /* 384 accumulator registers */
    {"attention", "dtype=fp16,head_dim=80,causal=0,window=0",
     "impl=generic,bm=128,bn=64,warps=4,stages=2,qreg=1,sched=1"}, /* head_dim 80 */
    {"attention", "dtype=fp16,head_dim=128,causal=0,window=0",
     "impl=hopper,bn=128,cwg=3,stages=2,sched=2,ovl=1"}, /* 176 accumulator registers of 160 */
    {"attention", "dtype=fp16,head_dim=128,causal=0,window=0",
     "impl=hopper,bn=128,cwg=2,stages=4,sched=2,ovl=0"}, /* 288 KiB of shared memory */
    {"attention", "dtype=fp16,head_dim=96,causal=0,window=0",
     "impl=hopper,bn=64,cwg=2,stages=2,sched=1,ovl=0"}, /* head_dim 96 */
    {"ragged_softmax", "x=bf16,y=fp16",
     "impl=cluster,tpr=8,vec=8,warps=8,stok=256,stages=2,csize=8,e1=1"}, /* e in bf16, y fp16 */
    {"paged_attention", "dtype=fp16,head_dim=128",
     "impl=hopper,bn=128,cwg=3,stages=2,sched=2,ovl=1"}, /* 176 accumulator registers of 160 */
    {"attention_backward", "dtype=fp16,head_dim=128,causal=0,window=0",
     "impl=generic,bm=128,bn=64,warps=4,stages=1"}, /* 256 accumulator registers of 192 */
    {"attention_backward", "dtype=fp16,head_dim=256,causal=0,window=0",
     "impl=generic,bm=128,bn=64,warps=8,stages=1"}, /* 192 accumulator registers of 160 */
    {"attention_backward", "dtype=fp16,head_dim=96,causal=0,window=0",
     "impl=generic,bm=32,bn=128,warps=8,stages=2"}, /* dQ warp tile of 24 columns */
    {"attention_backward", "dtype=bf16,head_dim=64,causal=1,window=0",
     "impl=generic,bm=32,bn=32,warps=8,stages=1"}, /* S warp tile of 8 query columns */
    {"attention_backward", "dtype=fp16,head_dim=256,causal=0,window=0",
     "impl=generic,bm=128,bn=32,warps=8,stages=2"}, /* 306 KiB of shared memory */
    {"attention_backward", "dtype=fp16,head_dim=64,causal=0,window=0",
     "impl=generic,bm=64,bn=64,warps=4,stages=3"}, /* 3 stages */
    {"attention_backward", "dtype=fp16,head_dim=96,causal=0,window=0",
     "impl=hopper,bn=128,stages=2"}, /* head_dim 96 */
    {"attention_backward", "dtype=bf16,head_dim=128,causal=1,window=0",
     "impl=hopper,bn=128,stages=3"}, /* 3 stages */
    {"attention_backward", "dtype=fp16,head_dim=96,causal=0,window=0",
     "impl=hopper_ws,bn=128,stages=2,ovl=1,dqb=0"}, /* head_dim 96 */
    {"attention_backward", "dtype=bf16,head_dim=64,causal=1,window=0",
     "impl=hopper_ws,bn=128,stages=1,ovl=0,dqb=1"}, /* 1 stage */
    {"attention_backward", "dtype=fp16,head_dim=64,causal=0,window=1",
     "impl=hopper_ws,bn=64,stages=2,ovl=2,dqb=0"}, /* ovl 2 */
    {"attention_backward", "dtype=bf16,head_dim=128,causal=0,window=0",
     "impl=hopper_ws,bn=192,stages=2,ovl=1,dqb=0"}, /* bn 192 */
    {"attention_backward", "dtype=fp16,head_dim=64,causal=0,window=0",
     "impl=hopper_ws,bn=64,stages=2,ovl=0,dqb=2"}, /* dqb 2 */
    {"attention_backward", "dtype=bf16,head_dim=128,causal=1,window=0",
     "impl=hopper_ws,bn=128,stages=3,ovl=1,dqb=1"}, /* 233048 bytes of shared memory */
};

START_TEST(host_check_matches_static_asserts) {
  scree__target t = {90, 227 * 1024, 1};
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const scree__op *op = scree__op_find(bad_cases[i].op);
    ck_assert_ptr_nonnull(op);
    scree__variant var;
    scree__config cfg;
    char why[256] = "";
    ck_assert_int_eq(scree__variant_parse(op, bad_cases[i].variant, &var, why, sizeof why), 0);
    ck_assert_msg(scree__config_parse(op, bad_cases[i].config, &cfg, why, sizeof why) == 0, "%s",
                  why);
    why[0] = 0;
    ck_assert_msg(scree__config_check(op, &cfg, &var, &t, why, sizeof why) == 0,
                  "the host accepts %s %s", bad_cases[i].op, bad_cases[i].config);
    ck_assert(strlen(why) > 0);
    void *cubin = NULL;
    size_t size;
    char *log = NULL;
    char arch[16];
    scree__target_arch("sm_90", 90, &op->impls[cfg.impl], arch);
    scree_status st = scree__compile(nv, op, &cfg, &var, arch, NULL, &cubin, &size, &log);
    ck_assert_msg(st == SCREE_ERROR_COMPILE, "%s %s compiled", bad_cases[i].op,
                  bad_cases[i].config);
    ck_assert_msg(log && strstr(log, "static assertion"), "log: %s", log ? log : "");
    free(log);
  }
}
END_TEST

/* An implementation's fixed macros (scree__impl.defines) reach NVRTC and
 * the source hash: paged attention's hopper implementation is
 * attention_hopper.cu with SCREE_PAGED=1 (entry scree_paged_attention_hopper,
 * which only exists with it), SCREE_CAUSAL=0, SCREE_WINDOW=1 (required by
 * the kernel, absent from the op's variant). The op's every hopper config
 * compiles in its sweep (arch_specific_space_compiles). */
START_TEST(impl_defines_compile_and_hash) {
  const scree__op *op = scree__op_find("paged_attention");
  int h = -1;
  for (int i = 0; i < op->nimpls; i++)
    if (!strcmp(op->impls[i].name, "hopper")) h = i;
  ck_assert_int_ge(h, 0);
  ck_assert_ptr_nonnull(op->impls[h].defines);
  const scree__variant var = {{SCREE_DTYPE_BF16, 128}};
  scree__target t = {90, 227 * 1024, 1};
  scree_paged_attention_args a = {.batch = 2, .total_q = 4096, .max_seqlen_q = 2048,
                                  .max_seqlen_k = 16384, .num_pages = 2048, .page_size = 16,
                                  .block_table_stride = 1024, .heads_q = 32, .heads_kv = 8,
                                  .head_dim = 128, .dtype = SCREE_DTYPE_BF16, .causal = 1,
                                  .window_left = -1, .window_right = -1};
  scree__config cfg;
  op->default_config(&t, &var, &a, &cfg);
  ck_assert_int_eq(cfg.impl, h);
  void *cubin;
  size_t size;
  char *log = NULL;
  ck_assert_msg(scree__compile(nv, op, &cfg, &var, "sm_90a", NULL, &cubin, &size, &log) == SCREE_OK,
                "%s", log ? log : "");
  ck_assert(memmem(cubin, size, "scree_paged_attention_hopper", 28) != NULL);
  free(cubin);
  free(log);
  /* The same op with other defines hashes apart; without them the kernel
   * does not compile (its macros are missing). */
  scree__impl impls[SCREE__MAX_IMPLS];
  memcpy(impls, op->impls, (size_t)op->nimpls * sizeof *impls);
  scree__op other = *op;
  other.impls = impls;
  impls[h].defines = "SCREE_PAGED=1 SCREE_CAUSAL=0 SCREE_WINDOW=0";
  ck_assert_str_ne(scree__source_hash(op), scree__source_hash(&other));
  scree__op none = *op;
  scree__impl impls2[SCREE__MAX_IMPLS];
  memcpy(impls2, op->impls, (size_t)op->nimpls * sizeof *impls2);
  impls2[h].defines = NULL;
  none.impls = impls2;
  ck_assert_str_ne(scree__source_hash(op), scree__source_hash(&none));
  log = NULL;
  ck_assert_int_eq(scree__compile(nv, &none, &cfg, &var, "sm_90a", NULL, &cubin, &size, &log),
                   SCREE_ERROR_COMPILE);
  free(log);
}
END_TEST

START_TEST(config_strings_roundtrip) {
  const scree__op *op = scree__op_find("rmsnorm");
  scree__config c = {0, {256, 2, 8, 4}}, back;
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

/* ---- sweep ------------------------------------------------------------------ */

/* At most this many configs of an op's checked space are compiled per arch:
 * an evenly spaced sample (first and last included) when the space is
 * larger, so CI time stays bounded as ops are added. The row-wise ops share
 * one launch-shape space (kernels/rowwise.cuh); the sample still reaches
 * every value of every field. */
#define SPACE_SAMPLE 240

/* The whole space of each op for one arch (loop index), at the op's example
 * variant: every config the host check passes compiles. */
START_TEST(whole_space_compiles) {
  const char *arch = archs[_i];
  scree__target t;
  scree__target_for_arch(arch, &t);
  for (int o = 0; scree__ops[o]; o++) {
    const scree__op *op = scree__ops[o];
    if (!op_selected(op)) continue;
    size_t total = (size_t)scree__config_space(op, NULL, 0);
    scree__config *all = calloc(total, sizeof *all);
    scree__config_space(op, all, (int)total);
    scree__variant var;
    scree__variant_example(op, &var);
    size_t n = 0;
    for (size_t i = 0; i < total; i++)
      if (scree__config_check(op, &all[i], &var, &t, NULL, 0)) all[n++] = all[i];
    const size_t checked = n;
    if (n > SPACE_SAMPLE) {
      for (size_t k = 0; k < SPACE_SAMPLE; k++)
        all[k] = all[k * (checked - 1) / (SPACE_SAMPLE - 1)];
      n = SPACE_SAMPLE;
    }
    /* Every "*" line of the arch's safelist is compiled too. */
    scree__safelist sl;
    char why[512];
    ck_assert_msg(scree__safelist_for_arch(arch, &sl, why, sizeof why) == SCREE_OK, "%s", why);
    all = realloc(all, (n + (size_t)sl.n + 1) * sizeof *all);
    for (int e = 0; e < sl.n; e++)
      if (sl.entries[e].op == op && sl.entries[e].verb != SCREE__SL_DENY && !strcmp(sl.entries[e].dtype, "*") &&
          scree__config_check(op, &sl.entries[e].cfg, &var, &t, NULL, 0))
        all[n++] = sl.entries[e].cfg;
    scree__safelist_free(&sl);
    char failure[2048];
    const double t0 = scree__now();
    size_t failed = compile_all(op, all, NULL, n, &var, arch, failure, sizeof failure);
    printf("%s %s: %zu of %zu configs pass the check, %zu compiled; %zu failed (%.1f s)\n",
           op->name, arch, checked, total, n, failed, scree__now() - t0);
    ck_assert_msg(failed == 0, "%zu configs failed; first: %s", failed, failure);
    ck_assert_uint_gt(n, 0);
    free(all);
  }
}
END_TEST

/* Every variant an op supports (the product of its variant fields' values)
 * compiles with the arch's default config, and with every config the arch's
 * safelist allows for that variant specifically ("*" lines are compiled at
 * the example variant by whole_space_compiles). */
START_TEST(every_variant_compiles) {
  const char *arch = archs[_i];
  scree__target t;
  scree__target_for_arch(arch, &t);
  scree__safelist sl;
  char why[512];
  ck_assert_msg(scree__safelist_for_arch(arch, &sl, why, sizeof why) == SCREE_OK, "%s", why);
  for (int o = 0; scree__ops[o]; o++) {
    const scree__op *op = scree__ops[o];
    if (!op_selected(op)) continue;
    enum { CAP = 8192 };
    scree__config *cfgs = calloc(CAP, sizeof *cfgs);
    scree__variant *vars = calloc(CAP, sizeof *vars);
    const int combos = variant_defaults(op, &t, cfgs, vars, 0);
    size_t n = (size_t)combos, listed_for_one = 0;
    for (int c = 0; c < combos; c++) {
      const scree__variant var = vars[c];
      char vs[128];
      scree__variant_str(op, &var, vs, sizeof vs);
      for (int e = 0; e < sl.n && n < CAP; e++) {
        const scree__sl_entry *en = &sl.entries[e];
        if (en->op != op || en->verb == SCREE__SL_DENY || strcmp(en->dtype, vs)) continue;
        ck_assert_msg(scree__config_check(op, &en->cfg, &var, &t, why, sizeof why),
                      "%s:%d fails its check: %s", sl.source, en->line, why);
        cfgs[n] = en->cfg, vars[n++] = var, listed_for_one++;
      }
    }
    char failure[2048];
    const double t0 = scree__now();
    const size_t failed = compile_all(op, cfgs, vars, n, NULL, arch, failure, sizeof failure);
    printf("%s %s: %d variants, %zu configs (%zu listed for one variant); %zu failed (%.1f s)\n",
           op->name, arch, combos, n, listed_for_one, failed, scree__now() - t0);
    ck_assert_msg(failed == 0, "%zu configs failed; first: %s", failed, failure);
    free(cfgs);
    free(vars);
  }
  scree__safelist_free(&sl);
}
END_TEST

/* Every config of an arch-specific implementation (sm_90a: wgmma, tensor
 * maps) that the host check passes, at every variant, compiles for sm_90a:
 * these are never sampled, so each one CI lets through has compiled. */
START_TEST(arch_specific_space_compiles) {
  scree__target t;
  scree__target_for_arch("sm_90", &t);
  for (int o = 0; scree__ops[o]; o++) {
    const scree__op *op = scree__ops[o];
    if (!op_selected(op)) continue;
    int specific = 0;
    for (int i = 0; i < op->nimpls; i++) specific |= op->impls[i].arch_specific;
    if (!specific) continue;
    const int total = scree__config_space(op, NULL, 0);
    scree__config *all = calloc((size_t)total, sizeof *all);
    scree__config_space(op, all, total);
    const int combos = variant_count(op);
    enum { CAP = 8192 };
    scree__config *cfgs = calloc(CAP, sizeof *cfgs);
    scree__variant *vars = calloc(CAP, sizeof *vars);
    size_t n = 0;
    for (int c = 0; c < combos; c++) {
      scree__variant var;
      variant_of_combo(op, c, &var);
      for (int i = 0; i < total && n < CAP; i++)
        if (op->impls[all[i].impl].arch_specific &&
            scree__config_check(op, &all[i], &var, &t, NULL, 0))
          cfgs[n] = all[i], vars[n++] = var;
    }
    char failure[2048];
    const double t0 = scree__now();
    const size_t failed = compile_all(op, cfgs, vars, n, NULL, "sm_90", failure, sizeof failure);
    printf("%s sm_90a: %zu arch-specific configs x variants; %zu failed (%.1f s)\n", op->name, n,
           failed, scree__now() - t0);
    ck_assert_msg(failed == 0, "%zu configs failed; first: %s", failed, failure);
    ck_assert_uint_gt(n, 0);
    free(all);
    free(cfgs);
    free(vars);
  }
}
END_TEST

int main(void) {
  setup(); /* exits 77 with a reason where there is no NVRTC */
  Suite *s = suite_create("compile");
  TCase *quick = tcase_create("quick"), *sweep = tcase_create("sweep");
  tcase_set_timeout(quick, 600);
  tcase_set_timeout(sweep, 1800);
  tcase_add_loop_test(quick, every_variant_default_compiles, 0, 2);
  tcase_add_loop_test(quick, safelisted_samples_compile, 0, 2);
  tcase_add_test(quick, host_check_matches_static_asserts);
  tcase_add_test(quick, arch_specific_target_compiles);
  tcase_add_test(quick, attention_backward_hopper_compiles);
  tcase_add_test(quick, attention_backward_hopper_ws_compiles);
  tcase_add_test(quick, config_strings_roundtrip);
  tcase_add_test(quick, impl_defines_compile_and_hash);
  tcase_add_test(quick, every_op_has_a_sweep);
  tcase_add_loop_test(sweep, whole_space_compiles, 0, 2);
  tcase_add_loop_test(sweep, every_variant_compiles, 0, 2);
  tcase_add_test(sweep, arch_specific_space_compiles);
  suite_add_tcase(s, quick);
  suite_add_tcase(s, sweep);
  return scree_test_run(s, 0);
}
