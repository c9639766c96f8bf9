/* test_rowwise.c - the row-wise ops' shared host code without a GPU
 * (src/runtime/ops/rowwise.c): the thread block cluster check that the
 * ragged softmax, its backward and cross-entropy's keep implementation
 * share. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "ops/rowwise.h"

static const scree__target sm80 = {80, 163 * 1024, 1}, sm90 = {90, 227 * 1024, 1};

/* Sizes 1, 2, 4 and 8 pass on sm_90, only 1 on sm_80 (with the reason);
 * any other size fails on both, naming the field and its value. */
START_TEST(cluster_sizes) {
  char why[256];
  for (int size = -1; size <= 16; size++) {
    const int valid = size == 1 || size == 2 || size == 4 || size == 8;
    why[0] = 0;
    ck_assert_int_eq(scree__check_cluster("split", size, &sm90, why, sizeof why), valid);
    if (!valid) {
      char want[64];
      snprintf(want, sizeof want, "split=%d: must be 1, 2, 4 or 8", size);
      ck_assert_str_eq(why, want);
    }
    why[0] = 0;
    ck_assert_int_eq(scree__check_cluster("csize", size, &sm80, why, sizeof why), size == 1);
    if (valid && size > 1) {
      char want[96];
      snprintf(want, sizeof want, "csize=%d: thread block clusters need sm_90, not sm_80", size);
      ck_assert_str_eq(why, want);
    }
  }
  ck_assert(scree__check_cluster("split", 8, &sm90, NULL, 0)); /* no reason wanted */
  ck_assert(!scree__check_cluster("split", 3, &sm90, NULL, 0));
}
END_TEST

/* The index of op's implementation `name`. */
static int impl_of(const scree__op *op, const char *name) {
  for (int i = 0; i < op->nimpls; i++)
    if (!strcmp(op->impls[i].name, name)) return i;
  ck_abort_msg("%s has no implementation %s", op->name, name);
  return -1;
}

/* Each op's config check refuses a cluster field the helper refuses, with
 * its reason: a size outside the list, and clusters on sm_80. */
START_TEST(ops_check_clusters) {
  static const struct {
    const char *op, *impl, *cfg;
    int field; /* the cluster field's index */
    scree__variant var;
  } cases[] = {
      {"ragged_softmax", "smem", "impl=smem,tpr=2,rows=64,vec=8,stok=256,split=2", 4,
       {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}}},
      {"ragged_softmax_backward", "smem", "tpr=2,rows=64,vec=8,stok=256,split=2", 4,
       {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}}},
      {"cross_entropy", "keep", "impl=keep,tpr=512,rows=1,vec=8,cache=4,csize=2", 4,
       {{SCREE_DTYPE_BF16, 1}}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const scree__op *op = scree__op_find(cases[i].op);
    ck_assert_ptr_nonnull(op);
    scree__config c;
    char why[256] = "";
    ck_assert_msg(!scree__config_parse(op, cases[i].cfg, &c, why, sizeof why), "%s", why);
    ck_assert_int_eq(c.impl, impl_of(op, cases[i].impl));
    const char *field = op->impls[c.impl].fields[cases[i].field].name;
    ck_assert_msg(scree__config_check(op, &c, &cases[i].var, &sm90, why, sizeof why), "%s: %s",
                  cases[i].cfg, why);
    ck_assert(!scree__config_check(op, &c, &cases[i].var, &sm80, why, sizeof why));
    char want[96];
    snprintf(want, sizeof want, "%s=2: thread block clusters need sm_90, not sm_80", field);
    ck_assert_msg(strstr(why, want), "%s: %s", cases[i].op, why);
    c.v[cases[i].field] = 3;
    ck_assert(!scree__config_check(op, &c, &cases[i].var, &sm90, why, sizeof why));
    snprintf(want, sizeof want, "%s=3: must be 1, 2, 4 or 8", field);
    ck_assert_msg(strstr(why, want), "%s: %s", cases[i].op, why);
  }
}
END_TEST

SCREE_TEST_MAIN(.name = "rowwise", .tests = SCREE_TESTS(cluster_sizes, ops_check_clusters))
