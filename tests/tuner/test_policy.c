/* test_policy.c - the tuner's policies without a GPU (src/tuner/policy.c):
 * the default policy's candidate list (safelist order, the default
 * appended, adapting that merges configs, pruning by check, worth_timing,
 * deny and bad records), the whole space, the winner within the noise band
 * and its tie-break, how many calls one timing interval covers, every op's list against the documented rules, and a
 * second policy built from the first one's parts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "tuner/trial.h"

static char g_dir[64];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/scree-policy-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* A driver table with only cuTensorMapEncodeTiled: scree__target_of then
 * says tensor maps can be built, as on a real Hopper driver, so that the
 * implementations that need them are candidates. Nothing calls it. */
static CUresult no_tensor_map(void *map, int dtype, unsigned rank, void *global,
                              const uint64_t *dims, const uint64_t *strides,
                              const unsigned *box, const unsigned *elem_strides,
                              int interleave, int swizzle, int l2promo, int oob_fill) {
  (void)map, (void)dtype, (void)rank, (void)global, (void)dims, (void)strides, (void)box;
  (void)elem_strides, (void)interleave, (void)swizzle, (void)l2promo, (void)oob_fill;
  return CUDA_ERROR_NOT_INITIALIZED;
}
static const scree__cu_api tensor_map_driver = {.TensorMapEncodeTiled = no_tensor_map};

/* An offline context that the policy sees as a device of `arch`: its
 * target, the safelist sl (NULL: none), and a user cache db in g_dir for
 * bad records. */
static scree_context *policy_ctx(const char *arch, scree__safelist *sl, const char *db) {
  scree_context *ctx = scree__context_offline();
  ck_assert_ptr_nonnull(ctx);
  snprintf(ctx->arch, sizeof ctx->arch, "%s", arch);
  ctx->sm = atoi(arch + 3);
  ctx->cu = &tensor_map_driver;
  ctx->safelist = sl;
  char path[256], warn[1024];
  snprintf(path, sizeof path, "%s/%s", g_dir, db);
  ctx->caches = calloc(1, sizeof *ctx->caches);
  ck_assert_int_eq(scree__cache_stack_open(ctx->caches, path, "", warn, sizeof warn), SCREE_OK);
  ck_assert_ptr_nonnull(ctx->caches->user);
  return ctx;
}

static void policy_ctx_free(scree_context *ctx) {
  scree__cache_stack_close(ctx->caches);
  free(ctx->caches);
  if (ctx->safelist) scree__safelist_free(ctx->safelist);
  free(ctx->safelist);
  ctx->cu = NULL; /* offline again: scree_destroy frees only the struct */
  scree_destroy(ctx);
}

static scree__safelist *safelist_of(const char *text) {
  scree__safelist *sl = calloc(1, sizeof *sl);
  char why[512];
  ck_assert_msg(scree__safelist_parse(text, "sm_90.txt", sl, why, sizeof why) == SCREE_OK, "%s",
                why);
  return sl;
}

/* One bucket of an op: its key and representative args. */
typedef struct bucket {
  scree__ckey key;
  _Alignas(16) unsigned char rep[SCREE__ARGS_MAX];
} bucket;

static void bucket_at(scree_context *ctx, const scree__op *op, const scree__variant *var,
                      const void *shape, bucket *b) {
  scree__bucket bk;
  scree__bucket_of(op, var, shape, &bk);
  memset(b->rep, 0, sizeof b->rep);
  op->representative(&bk, var, 0, b->rep);
  scree__make_key(ctx, op, var, &bk, &b->key);
}

static scree__policy_in in_of(scree_context *ctx, const scree__op *op,
                              const scree__variant *var, const bucket *b, double noise) {
  return (scree__policy_in){
      .ctx = ctx, .op = op, .var = var, .rep = b->rep, .key = &b->key, .noise = noise};
}

/* The policy's list as one string: "cfg | cfg | ...". */
static void run_policy(const scree__policy *p, const scree__policy_in *in, scree__cands *c,
                       char *list, size_t n) {
  memset(c, 0, sizeof *c);
  c->cap = SCREE__MAX_CANDIDATES;
  c->cfg = calloc((size_t)c->cap, sizeof *c->cfg);
  ck_assert_int_eq(p->candidates(p, in, c), SCREE_OK);
  size_t len = 0;
  list[0] = 0;
  for (int i = 0; i < c->n && len < n; i++) {
    char cs[128];
    scree__config_str(in->op, &c->cfg[i], cs, sizeof cs);
    len += (size_t)snprintf(list + len, n - len, "%s%s", i ? " | " : "", cs);
  }
}

static const scree__variant fp16 = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};

/* RMSNorm fp16's bucket of rows x cols on ctx, and what a policy is asked
 * about it. */
static scree__policy_in rms_in(scree_context *ctx, int64_t rows, int64_t cols, bucket *b) {
  const scree__op *op = scree__op_find("rmsnorm");
  const scree_rmsnorm_args shape = {.rows = rows, .cols = cols};
  bucket_at(ctx, op, &fp16, &shape, b);
  return in_of(ctx, op, &fp16, b, 0.02);
}

static const char rms_safelist[] =
    "arch sm_90\n"
    "rmsnorm allow tpr=128,rows=1,vec=8,cache=4\n"
    "rmsnorm allow tpr=128,rows=1,vec=4,cache=8\n"
    "rmsnorm allow tpr=1024,rows=1,vec=8,cache=8\n"
    "rmsnorm allow tpr=64,rows=2,vec=8,cache=2\n"
    "rmsnorm allow tpr=256,rows=1,vec=8,cache=2\n"
    "rmsnorm deny tpr=256,rows=1,vec=4,cache=4 -- denied by the test\n"
    "rmsnorm default tpr=32,rows=4,vec=8,cache=4\n";

static void record_bad(scree_context *ctx, const bucket *b, const char *cfg) {
  scree__ckey k = b->key;
  snprintf(k.bucket, sizeof k.bucket, "*");
  ck_assert_int_eq(
      scree__cache_record_bad(ctx->caches->user, &k, cfg, scree__nvrtc_version(ctx), "test"),
      SCREE_OK);
}

/* The safelist's allow lines in file order, the default appended; on a
 * row length that allows only 4-wide vectors, adapting merges the first
 * two lines (kept where the first was), narrows another onto the denied
 * line, and makes one not worth timing. */
START_TEST(default_follows_the_safelist) {
  scree_context *ctx = policy_ctx("sm_90", safelist_of(rms_safelist), "safelist.db");
  bucket b;
  scree__policy_in in = rms_in(ctx, 4096, 4096, &b);
  record_bad(ctx, &b, "tpr=256,rows=1,vec=8,cache=2");
  scree__cands c;
  char list[4096];
  /* tpr=64,rows=2,vec=8,cache=2 covers half the row: not worth timing. */
  run_policy(&scree__policy_default, &in, &c, list, sizeof list);
  ck_assert_str_eq(list,
                   "tpr=128,rows=1,vec=8,cache=4 | tpr=128,rows=1,vec=4,cache=8 | "
                   "tpr=1024,rows=1,vec=8,cache=8 | tpr=32,rows=4,vec=8,cache=4");
  ck_assert_str_eq(c.source, "safelist");
  ck_assert_int_eq(c.known_bad, 1);
  ck_assert_int_eq(scree__cands_find(&c, &c.dflt), 3);
  free(c.cfg);

  /* 1004 = 4 x 251: 4-wide vectors at most. The first two lines become
   * one, tpr=1024 is not worth timing on the shorter row, tpr=64 is now,
   * the bad 8-wide tpr=256 becomes the denied 4-wide one, and the default
   * (not worth timing either) stays. */
  in = rms_in(ctx, 4096, 1004, &b);
  run_policy(&scree__policy_default, &in, &c, list, sizeof list);
  ck_assert_str_eq(list,
                   "tpr=128,rows=1,vec=4,cache=8 | tpr=64,rows=2,vec=4,cache=4 | "
                   "tpr=32,rows=4,vec=4,cache=8");
  ck_assert_int_eq(c.known_bad, 0); /* denied before its record is asked */
  ck_assert_int_eq(scree__cands_find(&c, &c.dflt), 2);
  free(c.cfg);
  policy_ctx_free(ctx);
}
END_TEST

/* Swaps ctx's safelist for sl (NULL: none) and checks that the default
 * policy then proposes the whole space, as explore does. */
static void whole_space_with(scree_context *ctx, const scree__policy_in *in, scree__safelist *sl) {
  if (ctx->safelist) scree__safelist_free(ctx->safelist);
  free(ctx->safelist);
  ctx->safelist = sl;
  static char explored[65536], list[65536];
  scree__cands ex, c;
  run_policy(&scree__policy_explore, in, &ex, explored, sizeof explored);
  run_policy(&scree__policy_default, in, &c, list, sizeof list);
  ck_assert_str_eq(c.source, "whole space");
  ck_assert_msg(!strcmp(list, explored), "not the whole space");
  free(c.cfg);
  free(ex.cfg);
}

/* Under explore, without a safelist, or with one that has no line for
 * the variant: the whole space, checked for this device, with the
 * default in it, each config once, denied and bad ones left out. */
START_TEST(whole_space_when_the_safelist_has_nothing) {
  const scree__op *op = scree__op_find("rmsnorm");
  scree_context *ctx = policy_ctx("sm_90", safelist_of(rms_safelist), "space.db");
  bucket b;
  const scree__policy_in in = rms_in(ctx, 64, 4096, &b);
  record_bad(ctx, &b, "tpr=128,rows=1,vec=8,cache=4");
  scree__cands ex;
  char explored[65536];
  run_policy(&scree__policy_explore, &in, &ex, explored, sizeof explored);
  ck_assert_str_eq(ex.source, "whole space");
  ck_assert_int_eq(ex.known_bad, 1);
  ck_assert_int_gt(ex.n, 7);
  scree__target t;
  scree__target_of(ctx, &t);
  for (int i = 0; i < ex.n; i++) {
    ck_assert(scree__config_check(op, &ex.cfg[i], &fp16, &t, NULL, 0));
    ck_assert(!scree__safelist_denied(ctx->safelist, op, "x=fp16,w=fp16,y=fp16", &ex.cfg[i]));
    for (int j = 0; j < i; j++) ck_assert(memcmp(&ex.cfg[i], &ex.cfg[j], sizeof ex.cfg[i]));
  }
  ck_assert_int_ge(scree__cands_find(&ex, &ex.dflt), 0);
  scree__config bad;
  ck_assert_int_eq(scree__config_parse(op, "tpr=128,rows=1,vec=8,cache=4", &bad, NULL, 0), 0);
  ck_assert_int_eq(scree__cands_find(&ex, &bad), -1);
  free(ex.cfg);

  /* The default policy on a safelist whose lines are all for bf16, and
   * without a safelist. */
  whole_space_with(ctx, &in,
                   safelist_of("arch sm_90\n"
                               "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=x=bf16,w=bf16,"
                               "y=bf16\n"
                               "rmsnorm deny tpr=256,rows=1,vec=4,cache=4 -- denied by the test\n"));
  whole_space_with(ctx, &in, NULL);
  policy_ctx_free(ctx);
}
END_TEST

/* The winner: the first candidate, in list order, within the noise band
 * of the fastest; failed candidates never win. */
START_TEST(winner_within_the_noise_band) {
  const scree__policy *p = &scree__policy_default;
  scree__policy_in in = {.noise = 0.02};
  const scree__outcome o[] = {{1, 10.1, 0}, {0, 5.0, 0}, {1, 10.0, 0}, {1, 9.95, 0}};
  ck_assert_int_eq(p->pick(p, &in, o, 4), 0); /* 10.1 <= 9.95 * 1.02 */
  in.noise = 0.01;
  ck_assert_int_eq(p->pick(p, &in, o, 4), 2);
  in.noise = 0;
  ck_assert_int_eq(p->pick(p, &in, o, 4), 3);
  const scree__outcome tie[] = {{0, 1.0, 0}, {1, 7.0, 1}, {1, 7.0, 0}};
  ck_assert_int_eq(p->pick(p, &in, tie, 3), 1); /* equal medians: the earlier */
  const scree__outcome none[] = {{0, 1.0, 0}, {0, 2.0, 0}};
  ck_assert_int_eq(p->pick(p, &in, none, 2), -1);
  ck_assert_int_eq(p->pick(p, &in, none, 0), -1);
  ck_assert_int_eq(scree__policy_explore.pick(&scree__policy_explore, &in, tie, 3), 1);
}
END_TEST

/* ---- every op against the rules, stated plainly --------------------------- */

/* docs/architecture.md ("Candidates"): propose the allow lines (or the
 * whole space), at most SCREE__MAX_CANDIDATES of them, then the default if
 * there is room; adapt each; a config seen before (as adapted) is not
 * considered again; keep one the device can run, worth timing unless it is
 * the default, not denied, not recorded bad. */
static int by_the_rules(scree_context *ctx, const scree__op *op, const scree__variant *var,
                        const bucket *b, int explore, scree__config *out, int *known_bad) {
  char vs[128];
  scree__variant_str(op, var, vs, sizeof vs);
  scree__config *prop = calloc(SCREE__MAX_CANDIDATES + 1, sizeof *prop);
  scree__config *seen = calloc(SCREE__MAX_CANDIDATES + 1, sizeof *seen);
  int np = 0, nseen = 0, n = 0;
  if (!explore && ctx->safelist)
    np = scree__safelist_candidates(ctx->safelist, op, vs, prop, SCREE__MAX_CANDIDATES);
  if (np == 0) np = scree__config_space(op, prop, SCREE__MAX_CANDIDATES);
  if (np > SCREE__MAX_CANDIDATES) np = SCREE__MAX_CANDIDATES;
  scree__config dflt;
  scree__default_config(ctx, op, var, b->rep, &dflt);
  if (np < SCREE__MAX_CANDIDATES) prop[np++] = dflt;
  scree__target t;
  scree__target_of(ctx, &t);
  *known_bad = 0;
  for (int i = 0; i < np; i++) {
    scree__config a = prop[i];
    const scree__impl *im = &op->impls[a.impl];
    if (im->adapt) im->adapt(&a, var, b->rep);
    int dup = 0;
    for (int j = 0; j < nseen && !dup; j++) dup = !memcmp(&seen[j], &a, sizeof a);
    if (dup) continue;
    seen[nseen++] = a;
    const int is_default = !memcmp(&a, &dflt, sizeof a);
    char cs[128];
    scree__config_str(op, &a, cs, sizeof cs);
    if (!scree__config_check(op, &a, var, &t, NULL, 0) ||
        (!is_default && im->worth_timing && !im->worth_timing(&a, var, b->rep)) ||
        (ctx->safelist && scree__safelist_denied(ctx->safelist, op, vs, &a)))
      continue;
    if (scree__cache_is_bad(ctx->caches->user, &b->key, cs, scree__nvrtc_version(ctx), NULL,
                            0) == 1) {
      ++*known_bad;
      continue;
    }
    out[n++] = a;
  }
  free(prop);
  free(seen);
  return n;
}

/* Each op on sm_80 and sm_90, with its embedded safelist and without, for
 * each dtype (other variant fields at their examples), on aligned and
 * unaligned shapes, with
 * every 7th config of its space recorded bad: the built-in policies' lists
 * are what the rules say, entry for entry. */
/* Short calls are timed over several back-to-back calls per event pair
 * (src/tuner/trial.c), so that launch time does not rank them. */
START_TEST(short_calls_timed_back_to_back) {
  ck_assert_int_eq(scree__trial_per_event(400.0), 1);
  ck_assert_int_eq(scree__trial_per_event(40.0), 1);
  ck_assert_int_eq(scree__trial_per_event(39.0), 2);
  ck_assert_int_eq(scree__trial_per_event(10.0), 4);
  ck_assert_int_eq(scree__trial_per_event(4.1), 10);
  ck_assert_int_eq(scree__trial_per_event(1.0), 32);
  ck_assert_int_eq(scree__trial_per_event(0.0), 1); /* no estimate: one call */
}
END_TEST

START_TEST(every_op_follows_the_rules) {
  static const char *const archs[] = {"sm_80", "sm_90"};
  static const int64_t sizes[] = {1, 4095, 8192};
  scree__config *want = calloc(SCREE__MAX_CANDIDATES + 1, sizeof *want);
  int lists = 0;
  for (int ai = 0; ai < 2; ai++) {
    for (int with_sl = 0; with_sl < 2; with_sl++) {
      scree__safelist *sl = NULL;
      if (with_sl) {
        sl = calloc(1, sizeof *sl);
        char why[512];
        ck_assert_msg(scree__safelist_for_arch(archs[ai], sl, why, sizeof why) == SCREE_OK, "%s",
                      why);
      }
      char db[64];
      snprintf(db, sizeof db, "rules-%d.db", ai); /* the bad records of both passes */
      scree_context *ctx = policy_ctx(archs[ai], sl, db);
      for (int oi = 0; scree__ops[oi]; oi++) {
        const scree__op *op = scree__ops[oi];
        scree__variant vars[8];
        int nv = 0;
        for (int f = 0; f < op->nvfields; f++) {
          if (!op->vfields[f].is_dtype) continue;
          for (int k = 0; k < op->vfields[f].nvalues && nv < 8; k++) {
            scree__variant_example(op, &vars[nv]);
            for (int g = 0; g < op->nvfields; g++)
              if (op->vfields[g].is_dtype) vars[nv].v[g] = op->vfields[f].values[k];
            nv++;
          }
          break;
        }
        if (nv == 0) scree__variant_example(op, &vars[nv++]);
        for (int vi = 0; vi < nv; vi++) {
          for (int si = 0; si < 3; si++) {
            _Alignas(16) unsigned char shape[SCREE__ARGS_MAX];
            memset(shape, 0, sizeof shape);
            for (int f = 0; f < op->nargs; f++)
              if (op->args[f].flags & SCREE__SHAPE)
                memcpy(shape + op->args[f].offset, &sizes[si], sizeof sizes[si]);
            bucket b;
            bucket_at(ctx, op, &vars[vi], shape, &b);
            if (si == 0 && !with_sl) { /* every 7th config bad, for every bucket */
              scree__config *space = calloc(SCREE__MAX_CANDIDATES, sizeof *space);
              const int total = scree__config_space(op, space, SCREE__MAX_CANDIDATES);
              for (int i = 0; i < total && i < SCREE__MAX_CANDIDATES; i += 7) {
                char cs[128];
                scree__config_str(op, &space[i], cs, sizeof cs);
                record_bad(ctx, &b, cs);
              }
              free(space);
            }
            const scree__policy_in in = in_of(ctx, op, &vars[vi], &b, 0.02);
            for (int explore = 0; explore < 2; explore++) {
              const scree__policy *p = explore ? &scree__policy_explore : &scree__policy_default;
              int known_bad;
              const int n = by_the_rules(ctx, op, &vars[vi], &b, explore, want, &known_bad);
              scree__cands c;
              char list[16];
              run_policy(p, &in, &c, list, sizeof list);
              ck_assert_msg(c.n == n && c.known_bad == known_bad &&
                                !memcmp(c.cfg, want, (size_t)n * sizeof *want),
                            "%s %s %s on %s (safelist %d, %s): %d candidates, %d known bad; "
                            "the rules say %d, %d",
                            op->name, b.key.bucket, b.key.dtype, archs[ai], with_sl, p->name, c.n,
                            c.known_bad, n, known_bad);
              free(c.cfg);
              lists++;
            }
          }
        }
      }
      policy_ctx_free(ctx);
    }
  }
  free(want);
  printf("%d candidate lists as the rules say\n", lists);
}
END_TEST

/* ---- a second policy ---------------------------------------------------- */

/* A policy made of the default's parts: the same candidates in reverse
 * order, and the fastest wins outright (no noise band, later on ties). */
static scree_status reversed_candidates(const scree__policy *self, const scree__policy_in *in,
                                        scree__cands *c) {
  (void)self;
  const scree_status st = scree__policy_default.candidates(&scree__policy_default, in, c);
  for (int i = 0, j = c->n - 1; i < j; i++, j--) {
    const scree__config x = c->cfg[i];
    c->cfg[i] = c->cfg[j];
    c->cfg[j] = x;
  }
  return st;
}

static int fastest(const scree__policy *self, const scree__policy_in *in, const scree__outcome *o,
                   int n) {
  (void)in;
  int *calls = self->data, best = -1;
  ++*calls;
  for (int i = 0; i < n; i++)
    if (o[i].ok && (best < 0 || o[i].median <= o[best].median)) best = i;
  return best;
}

START_TEST(a_second_policy_plugs_in) {
  scree_context *ctx = policy_ctx("sm_90", safelist_of(rms_safelist), "second.db");
  bucket b;
  const scree__policy_in in = rms_in(ctx, 4096, 4096, &b);
  int calls = 0;
  const scree__policy reversed = {
      .name = "reversed", .candidates = reversed_candidates, .pick = fastest, .data = &calls};
  scree__cands c;
  char list[4096];
  run_policy(&reversed, &in, &c, list, sizeof list);
  ck_assert_str_eq(list,
                   "tpr=32,rows=4,vec=8,cache=4 | tpr=256,rows=1,vec=8,cache=2 | "
                   "tpr=1024,rows=1,vec=8,cache=8 | tpr=128,rows=1,vec=4,cache=8 | "
                   "tpr=128,rows=1,vec=8,cache=4");
  ck_assert_int_eq(scree__cands_find(&c, &c.dflt), 0);
  free(c.cfg);
  /* The same timings, two winners. */
  const scree__outcome o[] = {{1, 10.0, 0}, {1, 9.9, 0}, {0, 1.0, 0}, {1, 9.9, 0}};
  ck_assert_int_eq(scree__policy_default.pick(&scree__policy_default, &in, o, 4), 0);
  ck_assert_int_eq(reversed.pick(&reversed, &in, o, 4), 3);
  ck_assert_int_eq(calls, 1);
  policy_ctx_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("policy");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, default_follows_the_safelist);
  tcase_add_test(tc, whole_space_when_the_safelist_has_nothing);
  tcase_add_test(tc, winner_within_the_noise_band);
  tcase_add_test(tc, short_calls_timed_back_to_back);
  tcase_add_test(tc, every_op_follows_the_rules);
  tcase_add_test(tc, a_second_policy_plugs_in);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
