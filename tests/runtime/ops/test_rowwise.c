/* test_rowwise.c - the row-wise ops' shared host code without a GPU
 * (src/runtime/ops/rowwise.c): the thread block cluster check and launch
 * that the ragged softmax, its backward and cross-entropy's keep
 * implementation share, the launch on a driver table that records it. */
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
    ck_assert_str_eq(op->impls[c.impl].name, cases[i].impl);
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

/* The norm backwards' "smem" implementation: its shared memory is ROWS *
 * nacc * TPR * VEC * CACHE fp32 sums (the loader's hook), checked with the
 * kernel's static scratch against the target's opt-in limit, the reason
 * naming the config, the bytes and the limit; the launch shape's own
 * checks first; generic configs of the same shape are not limited. */
START_TEST(nb_smem_check) {
  static const char *const names[] = {"rmsnorm_backward", "add_rmsnorm_backward",
                                      "layernorm_backward"};
  const scree__variant var = {{SCREE_DTYPE_FP16, SCREE_DTYPE_FP16, SCREE_DTYPE_FP16}};
  const scree__target sm86 = {86, 99 * 1024, 0};
  for (int k = 0; k < 3; k++) {
    const scree__op *op = scree__op_find(names[k]);
    ck_assert_ptr_nonnull(op);
    const size_t nacc = k == 2 ? 2 : 1;
    char why[256] = "";
    scree__config c;
    ck_assert_msg(!scree__config_parse(op, "impl=smem,tpr=128,rows=2,vec=4,cache=8", &c, why,
                                       sizeof why), "%s", why);
    ck_assert_str_eq(op->impls[c.impl].name, "smem");
    ck_assert_uint_eq(op->impls[c.impl].smem(&c, &var), 2 * nacc * 128 * 4 * 8 * 4);
    ck_assert_msg(scree__config_check(op, &c, &var, &sm80, why, sizeof why), "%s", why);
    /* 1024 threads of 32 elements: 128 KiB a sum. Static scratch: 32 floats. */
    ck_assert(!scree__config_parse(op, "impl=smem,tpr=1024,rows=1,vec=8,cache=4", &c, why,
                                   sizeof why));
    const size_t need = nacc * 131072 + 128;
    ck_assert_int_eq(scree__config_check(op, &c, &var, &sm90, why, sizeof why), nacc == 1);
    ck_assert(!scree__config_check(op, &c, &var, &sm86, why, sizeof why));
    char want[160];
    snprintf(want, sizeof want, "tpr=1024,rows=1,vec=8,cache=4: %zu bytes of shared memory for "
             "the column sums, past the %d a CTA may use on sm_86", need, 99 * 1024);
    ck_assert_msg(strstr(why, want), "%s: %s", names[k], why);
    if (nacc == 2) {
      ck_assert(!scree__config_check(op, &c, &var, &sm90, why, sizeof why));
      snprintf(want, sizeof want, "%zu bytes of shared memory for the column sums, past the %d "
               "a CTA may use on sm_90", need, 227 * 1024);
      ck_assert_msg(strstr(why, want), "%s: %s", names[k], why);
    }
    /* The generic implementation keeps the sums in registers: no limit. */
    ck_assert(!scree__config_parse(op, "impl=generic,tpr=1024,rows=1,vec=8,cache=4", &c, why,
                                   sizeof why));
    ck_assert_msg(scree__config_check(op, &c, &var, &sm86, why, sizeof why), "%s", why);
    /* The launch shape's reasons come first. */
    ck_assert(!scree__config_parse(op, "impl=smem,tpr=1024,rows=2,vec=8,cache=4", &c, why,
                                   sizeof why));
    ck_assert(!scree__config_check(op, &c, &var, &sm90, why, sizeof why));
    ck_assert_msg(strstr(why, "tpr*rows=2048 must be in [32, 1024]"), "%s", why);
  }
}
END_TEST

/* ---- scree__launch_grid, on a driver table that records the launches --- */

static struct {
  int plain, ex;          /* calls of cuLaunchKernel and cuLaunchKernelEx */
  unsigned grid[3], block[3], smem, cluster[3], nattrs;
  int attr;
  CUresult result;        /* what the next launch returns */
} g_launch;

static CUresult fake_launch(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned smem, CUstream stream,
                            void **params, void **extra) {
  (void)fn, (void)stream, (void)params, (void)extra;
  g_launch.plain++;
  g_launch.grid[0] = gx, g_launch.grid[1] = gy, g_launch.grid[2] = gz;
  g_launch.block[0] = bx, g_launch.block[1] = by, g_launch.block[2] = bz;
  g_launch.smem = smem;
  return g_launch.result;
}

static CUresult fake_launch_ex(const void *config, CUfunction fn, void **params, void **extra) {
  (void)fn, (void)params, (void)extra;
  const scree__cu_launch_config *lc = config;
  g_launch.ex++;
  g_launch.grid[0] = lc->grid_x, g_launch.grid[1] = lc->grid_y, g_launch.grid[2] = lc->grid_z;
  g_launch.block[0] = lc->block_x, g_launch.block[1] = lc->block_y;
  g_launch.block[2] = lc->block_z;
  g_launch.smem = lc->smem;
  g_launch.nattrs = lc->nattrs;
  g_launch.attr = lc->attrs[0].id;
  g_launch.cluster[0] = lc->attrs[0].value.cluster_dim.x;
  g_launch.cluster[1] = lc->attrs[0].value.cluster_dim.y;
  g_launch.cluster[2] = lc->attrs[0].value.cluster_dim.z;
  return g_launch.result;
}

static CUresult fake_error_name(CUresult r, const char **name) {
  *name = r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES ? "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
                                                  : "CUDA_ERROR_OTHER";
  return CUDA_SUCCESS;
}

static CUresult fake_error_string(CUresult r, const char **text) {
  (void)r;
  *text = "refused by the test's driver";
  return CUDA_SUCCESS;
}

static const scree__cu_api with_ex = {.LaunchKernel = fake_launch,
                                      .LaunchKernelEx = fake_launch_ex,
                                      .GetErrorName = fake_error_name,
                                      .GetErrorString = fake_error_string};
static const scree__cu_api without_ex = {.LaunchKernel = fake_launch,
                                         .GetErrorName = fake_error_name,
                                         .GetErrorString = fake_error_string};

static scree_context *launch_ctx(const scree__cu_api *cu) {
  memset(&g_launch, 0, sizeof g_launch);
  scree_context *ctx = scree__context_offline();
  ck_assert_ptr_nonnull(ctx);
  ctx->cu = cu;
  return ctx;
}

static void launch_ctx_free(scree_context *ctx) {
  ctx->cu = NULL; /* offline again: scree_destroy frees only the struct */
  scree_destroy(ctx);
}

/* Without clusters: cuLaunchKernel on the grid, the block along x. */
START_TEST(launch_without_clusters) {
  scree_context *ctx = launch_ctx(&without_ex);
  const scree__grid g = {7, 5, 3, 128, 4096, 1};
  ck_assert_int_eq(scree__launch_grid(ctx, NULL, g, NULL, NULL, "op", NULL, "k"), SCREE_OK);
  ck_assert_int_eq(g_launch.plain, 1);
  ck_assert_int_eq(g_launch.ex, 0);
  ck_assert(g_launch.grid[0] == 7 && g_launch.grid[1] == 5 && g_launch.grid[2] == 3);
  ck_assert(g_launch.block[0] == 128 && g_launch.block[1] == 1 && g_launch.block[2] == 1);
  ck_assert_uint_eq(g_launch.smem, 4096);
  launch_ctx_free(ctx);
}
END_TEST

/* With clusters: cuLaunchKernelEx with one attribute, the cluster's shape
 * (cluster x 1 x 1), and the same grid, block and shared memory. */
START_TEST(launch_with_clusters) {
  scree_context *ctx = launch_ctx(&with_ex);
  const scree__grid g = {64, 9, 2, 256, 1000, 8};
  ck_assert_int_eq(scree__launch_grid(ctx, NULL, g, NULL, NULL, "op", "split", "k"), SCREE_OK);
  ck_assert_int_eq(g_launch.plain, 0);
  ck_assert_int_eq(g_launch.ex, 1);
  ck_assert(g_launch.grid[0] == 64 && g_launch.grid[1] == 9 && g_launch.grid[2] == 2);
  ck_assert(g_launch.block[0] == 256 && g_launch.block[1] == 1 && g_launch.block[2] == 1);
  ck_assert_uint_eq(g_launch.smem, 1000);
  ck_assert_uint_eq(g_launch.nattrs, 1);
  ck_assert_int_eq(g_launch.attr, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  ck_assert(g_launch.cluster[0] == 8 && g_launch.cluster[1] == 1 && g_launch.cluster[2] == 1);
  launch_ctx_free(ctx);
}
END_TEST

/* A driver without cuLaunchKernelEx: clusters are refused by op and field,
 * nothing launched; a grid without clusters still launches. */
START_TEST(clusters_need_launch_ex) {
  scree_context *ctx = launch_ctx(&without_ex);
  ck_assert_int_eq(scree__need_clusters(ctx, 1, "cross_entropy", "csize"), SCREE_OK);
  ck_assert_int_eq(scree__need_clusters(ctx, 2, "cross_entropy", "csize"),
                   SCREE_ERROR_UNSUPPORTED);
  ck_assert_str_eq(scree_last_error(ctx), "cross_entropy csize=2 needs cuLaunchKernelEx (thread "
                                          "block clusters), which this driver does not export");
  const scree__grid g = {16, 1, 1, 128, 0, 4};
  ck_assert_int_eq(scree__launch_grid(ctx, NULL, g, NULL, NULL, "ragged_softmax", "split",
                                      "ragged_softmax_smem"),
                   SCREE_ERROR_UNSUPPORTED);
  ck_assert_str_eq(scree_last_error(ctx), "ragged_softmax split=4 needs cuLaunchKernelEx "
                                          "(thread block clusters), which this driver does not "
                                          "export");
  ck_assert_int_eq(g_launch.plain + g_launch.ex, 0);
  launch_ctx_free(ctx);
}
END_TEST

/* A launch the driver refuses: SCREE_ERROR_LAUNCH naming the call and the
 * kernel, with the driver's error. */
START_TEST(launch_errors_name_the_kernel) {
  scree_context *ctx = launch_ctx(&with_ex);
  g_launch.result = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  ck_assert_int_eq(scree__launch_grid(ctx, NULL, (scree__grid){1, 1, 1, 32, 0, 1}, NULL, NULL,
                                      "op", NULL, "cross_entropy keep"),
                   SCREE_ERROR_LAUNCH);
  ck_assert_str_eq(scree_last_error(ctx), "cuLaunchKernel(cross_entropy keep): "
                                          "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (refused by "
                                          "the test's driver)");
  ck_assert_int_eq(scree__launch_grid(ctx, NULL, (scree__grid){2, 1, 1, 32, 0, 2}, NULL, NULL,
                                      "op", "csize", "cross_entropy keep"),
                   SCREE_ERROR_LAUNCH);
  ck_assert_str_eq(scree_last_error(ctx), "cuLaunchKernelEx(cross_entropy keep): "
                                          "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (refused by "
                                          "the test's driver)");
  launch_ctx_free(ctx);
}
END_TEST

SCREE_TEST_MAIN(.name = "rowwise",
                .tests = SCREE_TESTS(cluster_sizes, ops_check_clusters, nb_smem_check,
                                     launch_without_clusters,
                                     launch_with_clusters, clusters_need_launch_ex,
                                     launch_errors_name_the_kernel))
