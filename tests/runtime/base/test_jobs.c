/* test_jobs.c - how many threads compile (src/runtime/base/jobs.c):
 * SCREE_JOBS, the affinity mask, and cgroup v1 and v2 CPU quotas read from
 * fake /proc and /sys trees (no GPU). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_util.h"

static char root[256];

/* Writes text to root/path, making its directories. */
static void put(const char *path, const char *text) {
  char full[512], cmd[700];
  snprintf(full, sizeof full, "%s%s", root, path);
  snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", full);
  ck_assert_int_eq(system(cmd), 0);
  FILE *f = fopen(full, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void setup(void) {
  snprintf(root, sizeof root, "/tmp/scree-jobs-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  ck_assert_int_eq(system(cmd), 0);
  unsetenv("SCREE_JOBS");
}

START_TEST(scree_jobs_sets_the_count) {
  char how[256];
  setenv("SCREE_JOBS", "3", 1);
  ck_assert_int_eq(scree__jobs(how, sizeof how), 3);
  ck_assert_str_eq(how, "3 (SCREE_JOBS=3)");
  setenv("SCREE_JOBS", "200", 1); /* past the default's 32: asked for */
  ck_assert_int_eq(scree__jobs(NULL, 0), 200);
  static const char *const bad[] = {"0", "-2", "two", "4x", "1025", "99999999999999999999"};
  unsetenv("SCREE_JOBS");
  const int dflt = scree__jobs(NULL, 0);
  ck_assert_int_ge(dflt, 1);
  ck_assert_int_le(dflt, SCREE__DEFAULT_JOBS_MAX);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("SCREE_JOBS", bad[i], 1);
    ck_assert_int_eq(scree__jobs(how, sizeof how), dflt);
    ck_assert_msg(strstr(how, "ignored: not a number from 1 to 1024"), "%s: %s", bad[i], how);
  }
}
END_TEST

/* cgroup v2: the smallest cpu.max from the process's cgroup up. */
START_TEST(cgroup_v2_quota) {
  put("/proc/self/cgroup", "0::/job/step\n");
  put("/proc/self/mountinfo",
      "25 1 0:22 / /proc rw - proc proc rw\n"
      "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  put("/sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
  put("/sys/fs/cgroup/job/cpu.max", "150000 100000\n");
  ck_assert(scree__cgroup_cpus(root) == 1.5);
  put("/sys/fs/cgroup/job/step/cpu.max", "50000 100000\n");
  ck_assert(scree__cgroup_cpus(root) == 0.5);
  put("/sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
  put("/sys/fs/cgroup/job/cpu.max", "max 100000\n");
  ck_assert(scree__cgroup_cpus(root) == 0);
}
END_TEST

/* cgroup v1 inside a container: the mount's root is the process's cgroup,
 * and a mount point with a blank is escaped in mountinfo. */
START_TEST(cgroup_v1_quota) {
  put("/proc/self/cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n");
  put("/proc/self/mountinfo",
      "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu\\040acct rw - cgroup cgroup rw,cpu,cpuacct\n"
      "33 31 0:30 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  put("/sys/fs/cgroup/cpu acct/cpu.cfs_quota_us", "200000\n");
  put("/sys/fs/cgroup/cpu acct/cpu.cfs_period_us", "100000\n");
  ck_assert(scree__cgroup_cpus(root) == 2.0);
  put("/sys/fs/cgroup/cpu acct/cpu.cfs_quota_us", "-1\n");
  ck_assert(scree__cgroup_cpus(root) == 0);
  /* Nothing readable: no quota. */
  ck_assert(scree__cgroup_cpus("/nonexistent") == 0);
}
END_TEST

/* The default honours the affinity mask of the process. */
START_TEST(affinity_mask) {
  unsetenv("SCREE_JOBS");
  cpu_set_t one, saved;
  ck_assert_int_eq(sched_getaffinity(0, sizeof saved, &saved), 0);
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
  char how[256];
  const int n = scree__jobs(how, sizeof how);
  ck_assert_int_eq(sched_setaffinity(0, sizeof saved, &saved), 0);
  ck_assert_int_eq(n, 1);
  ck_assert_msg(strstr(how, "1 CPU(s) in the affinity mask"), "%s", how);
}
END_TEST

int main(void) {
  Suite *s = suite_create("jobs");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, scree_jobs_sets_the_count);
  tcase_add_test(tc, cgroup_v2_quota);
  tcase_add_test(tc, cgroup_v1_quota);
  tcase_add_test(tc, affinity_mask);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
