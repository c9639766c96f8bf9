/* jobs.c - how many threads scree compiles on: SCREE_JOBS, else the CPUs
 * this process may run on. A container or a Slurm job often gets a few
 * CPUs of a large machine, through its affinity mask (cpusets, taskset)
 * or a CPU quota (cgroup v2's cpu.max, v1's cpu.cfs_quota_us); counting
 * the machine's online CPUs instead starts more NVRTC threads than can
 * run, each holding hundreds of MB while it waits. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

/* Reads a small file under root into buf; 0, or -1 if it cannot be read. */
static int read_small(const char *root, const char *path, char *buf, size_t size) {
  char full[PATH_MAX];
  if (snprintf(full, sizeof full, "%s%s", root, path) >= (int)sizeof full) return -1;
  FILE *f = fopen(full, "re");
  if (!f) return -1;
  const size_t n = fread(buf, 1, size - 1, f);
  fclose(f);
  buf[n] = 0;
  return 0;
}

/* The quota of one cgroup directory in CPUs: v2's cpu.max ("max 100000"
 * or "150000 100000"), v1's cpu.cfs_quota_us over cpu.cfs_period_us (-1:
 * none). 0 when it sets none or cannot be read. */
static double dir_quota(const char *root, const char *dir, int v2) {
  char path[PATH_MAX], buf[128];
  long long quota = -1, period = 0;
  if (v2) {
    if (snprintf(path, sizeof path, "%s/cpu.max", dir) >= (int)sizeof path ||
        read_small(root, path, buf, sizeof buf) || sscanf(buf, "%lld %lld", &quota, &period) != 2)
      return 0; /* "max ...": sscanf stops at the word */
  } else {
    if (snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir) >= (int)sizeof path ||
        read_small(root, path, buf, sizeof buf) || sscanf(buf, "%lld", &quota) != 1)
      return 0;
    if (snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir) >= (int)sizeof path ||
        read_small(root, path, buf, sizeof buf) || sscanf(buf, "%lld", &period) != 1)
      return 0;
  }
  return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

/* A mountinfo path field with its octal escapes (\040 for a blank) undone. */
static void unescape(char *s) {
  char *w = s;
  for (char *r = s; *r; r++) {
    if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
        r[3] <= '7') {
      *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
      r += 3;
    } else {
      *w++ = *r;
    }
  }
  *w = 0;
}

/* 1 if the comma-separated list has the word. */
static int has_word(const char *list, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (!strncmp(p, word, n) && (p[n] == ',' || p[n] == 0 || p[n] == '\n')) return 1;
  return 0;
}

/* The smallest quota from the process's cgroup up to the mount's top. */
static double hierarchy_quota(const char *root, const char *mount_root, const char *mount_point,
                              const char *cg_path, int v2) {
  /* The cgroup's path as this mount shows it: relative to the mount's
   * root. A path outside it (a container whose namespace hides the rest)
   * is the mount's top. */
  const size_t mr = strcmp(mount_root, "/") ? strlen(mount_root) : 0;
  const char *rel = "";
  if (!strncmp(cg_path, mount_root, mr) && (cg_path[mr] == '/' || !cg_path[mr]))
    rel = cg_path + mr;
  char dir[PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s%s", mount_point, rel) >= (int)sizeof dir) return 0;
  const size_t top = strlen(mount_point);
  double best = 0;
  for (;;) {
    const double q = dir_quota(root, dir, v2);
    if (q > 0 && (best == 0 || q < best)) best = q;
    char *slash = strrchr(dir, '/');
    if (!slash || (size_t)(slash - dir) < top) break;
    *slash = 0;
  }
  return best;
}

double scree__cgroup_cpus(const char *root) {
  if (!root) root = "";
  char *cg = NULL, *mi = NULL;
  size_t n = 0;
  double best = 0;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
  FILE *fc = fopen(path, "re");
  snprintf(path, sizeof path, "%s/proc/self/mountinfo", root);
  FILE *fm = fopen(path, "re");
  if (!fc || !fm) goto done;
  /* The cpu controller's paths: v2 ("0::/path") and v1 ("4:cpu,cpuacct:/path"). */
  char v2_path[PATH_MAX] = "", v1_path[PATH_MAX] = "";
  int have_v2 = 0, have_v1 = 0;
  while (getline(&cg, &n, fc) > 0) {
    char *c1 = strchr(cg, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = 0;
    char *p = c2 + 1;
    p[strcspn(p, "\n")] = 0;
    if (c1[1] == 0 && !strncmp(cg, "0", 1)) {
      snprintf(v2_path, sizeof v2_path, "%s", p);
      have_v2 = 1;
    } else if (has_word(c1 + 1, "cpu")) {
      snprintf(v1_path, sizeof v1_path, "%s", p);
      have_v1 = 1;
    }
  }
  /* The mounts: "id parent maj:min root mount-point options ... - type source super-options". */
  while (getline(&mi, &n, fm) > 0) {
    char mroot[PATH_MAX], mpoint[PATH_MAX], type[64] = "", super[512] = "";
    const char *dash = strstr(mi, " - ");
    if (!dash || sscanf(mi, "%*s %*s %*s %4095s %4095s", mroot, mpoint) != 2 ||
        sscanf(dash + 3, "%63s %*s %511s", type, super) < 1)
      continue;
    unescape(mroot);
    unescape(mpoint);
    char point[PATH_MAX];
    snprintf(point, sizeof point, "%.4095s", mpoint);
    double q = 0;
    if (have_v2 && !strcmp(type, "cgroup2"))
      q = hierarchy_quota(root, mroot, point, v2_path, 1);
    else if (have_v1 && !strcmp(type, "cgroup") && has_word(super, "cpu"))
      q = hierarchy_quota(root, mroot, point, v1_path, 0);
    if (q > 0 && (best == 0 || q < best)) best = q;
  }
done:
  if (fc) fclose(fc);
  if (fm) fclose(fm);
  free(cg);
  free(mi);
  return best;
}

/* The CPUs of the process's affinity mask, else the online CPUs. */
static int affinity_cpus(void) {
  for (int ncpu = 1024; ncpu <= 1 << 20; ncpu *= 2) {
    cpu_set_t *set = CPU_ALLOC(ncpu);
    if (!set) break;
    const size_t size = CPU_ALLOC_SIZE(ncpu);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      const int count = CPU_COUNT_S(size, set);
      CPU_FREE(set);
      return count > 0 ? count : 1;
    }
    CPU_FREE(set);
    if (errno != EINVAL) break; /* EINVAL: a mask larger than ncpu */
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? (int)online : 1;
}

int scree__jobs(char *how, size_t how_size) {
  const char *env = getenv("SCREE_JOBS");
  char ignored[160] = "";
  if (env && *env) {
    char *end;
    errno = 0;
    const long v = strtol(env, &end, 10);
    if (!errno && !*end && v >= 1 && v <= SCREE__MAX_JOBS) {
      scree__set_why(how, how_size, "%ld (SCREE_JOBS=%ld)", v, v);
      return (int)v;
    }
    snprintf(ignored, sizeof ignored, "; SCREE_JOBS=%.40s ignored: not a number from 1 to %d",
             env, SCREE__MAX_JOBS);
  }
  const int cpus = affinity_cpus();
  const double quota = scree__cgroup_cpus(NULL);
  int n = cpus;
  char q[64] = "";
  if (quota > 0) {
    const double up = ceil(quota - 1e-9); /* 1.5 CPUs of quota: 2 threads */
    snprintf(q, sizeof q, ", a cgroup quota of %.2f", quota);
    if (up < n) n = up < 1 ? 1 : (int)up;
  }
  const int capped = n > SCREE__DEFAULT_JOBS_MAX;
  if (capped) n = SCREE__DEFAULT_JOBS_MAX;
  scree__set_why(how, how_size, "%d (%d CPU(s) in the affinity mask%s%s)%s", n, cpus, q,
                 capped ? "; at most 32 unless SCREE_JOBS says more" : "", ignored);
  return n;
}
