/* cli_shard.c - prewarm's shards: which share of the bucket list one task
 * of a cluster job tunes (--shard K/N, or --shard auto from a Slurm job
 * array or a Kubernetes Indexed Job). docs/cluster.md. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* A shard count or index: a decimal integer in [lo, hi], nothing else. */
static int parse_int(const char *s, long lo, long hi, long *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  const long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* The count of --shard auto under an Indexed Job: --shard-count, else
 * SCREE_SHARD_COUNT. */
static int indexed_count(const char *count_opt, long *n) {
  const char *src = count_opt ? "--shard-count" : "SCREE_SHARD_COUNT";
  const char *v = count_opt ? count_opt : getenv("SCREE_SHARD_COUNT");
  if (!v || !*v) {
    fprintf(stderr, "scree-tune prewarm: --shard auto: JOB_COMPLETION_INDEX is set but the "
                    "number of shards is not: pass --shard-count N or set SCREE_SHARD_COUNT "
                    "(the Job's completions)\n");
    return -1;
  }
  if (parse_int(v, 1, CLI_MAX_SHARDS, n)) {
    fprintf(stderr, "scree-tune prewarm: %s %s: not a shard count in 1..%d\n", src, cli_esc(v),
            CLI_MAX_SHARDS);
    return -1;
  }
  return 0;
}

int cli_shard_parse(const char *spec, const char *count_opt, cli_shard *out) {
  long k, n;
  memset(out, 0, sizeof *out);
  if (!strcmp(spec, "auto")) {
    const char *id = getenv("SLURM_ARRAY_TASK_ID");
    const char *jci = getenv("JOB_COMPLETION_INDEX");
    if (id && *id) {
      long min = 0, step = 1;
      const char *cnt = getenv("SLURM_ARRAY_TASK_COUNT");
      const char *mn = getenv("SLURM_ARRAY_TASK_MIN");
      const char *st = getenv("SLURM_ARRAY_TASK_STEP");
      if (parse_int(id, 0, 1L << 30, &k) || parse_int(cnt, 1, CLI_MAX_SHARDS, &n) ||
          (mn && *mn && parse_int(mn, 0, 1L << 30, &min)) ||
          (st && *st && parse_int(st, 1, 1L << 30, &step))) {
        fprintf(stderr, "scree-tune prewarm: --shard auto: SLURM_ARRAY_TASK_ID=%s, "
                        "SLURM_ARRAY_TASK_COUNT=%s, SLURM_ARRAY_TASK_MIN=%s, "
                        "SLURM_ARRAY_TASK_STEP=%s: need integers, a count in 1..%d\n",
                cli_esc(id), cli_esc(cnt ? cnt : "(unset)"), cli_esc(mn ? mn : "(unset)"),
                cli_esc(st ? st : "(unset)"),
                CLI_MAX_SHARDS);
        return CLI_USAGE;
      }
      /* --array=A-B[:S]: task ids A, A+S, ... ; a list of ids that is not
       * such a range has no position to take. */
      if (k < min || (k - min) % step || (k - min) / step >= n) {
        fprintf(stderr, "scree-tune prewarm: --shard auto: SLURM_ARRAY_TASK_ID=%ld is not "
                        "one of %ld ids from %ld in steps of %ld: use --array=A-B[:S]\n",
                k, n, min, step);
        return CLI_USAGE;
      }
      out->k = (int)((k - min) / step);
      out->n = (int)n;
      snprintf(out->source, sizeof out->source, "Slurm array task %ld", k);
    } else if (jci && *jci) {
      if (indexed_count(count_opt, &n)) return CLI_USAGE;
      if (parse_int(jci, 0, n - 1, &k)) {
        fprintf(stderr, "scree-tune prewarm: --shard auto: JOB_COMPLETION_INDEX=%s is not "
                        "in 0..%ld\n", cli_esc(jci), n - 1);
        return CLI_USAGE;
      }
      out->k = (int)k;
      out->n = (int)n;
      snprintf(out->source, sizeof out->source, "Indexed Job completion index %ld", k);
    } else {
      fprintf(stderr, "scree-tune prewarm: --shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm "
                      "job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) is "
                      "set; give --shard K/N\n");
      return CLI_USAGE;
    }
    out->on = 1;
    return CLI_OK;
  }
  const char *slash = strchr(spec, '/');
  char kbuf[32];
  if (!slash || (size_t)(slash - spec) >= sizeof kbuf) goto bad;
  memcpy(kbuf, spec, (size_t)(slash - spec));
  kbuf[slash - spec] = 0;
  if (parse_int(slash + 1, 1, CLI_MAX_SHARDS, &n) || parse_int(kbuf, 0, n - 1, &k)) goto bad;
  out->on = 1;
  out->k = (int)k;
  out->n = (int)n;
  snprintf(out->source, sizeof out->source, "--shard");
  return CLI_OK;
bad:
  fprintf(stderr, "scree-tune prewarm: --shard %s: give K/N with N in 1..%d and K in "
                  "0..N-1 (shards count from 0, as Slurm array ids and Indexed Job "
                  "indexes do), or auto\n", cli_esc(spec), CLI_MAX_SHARDS);
  return CLI_USAGE;
}

typedef struct ranked {
  const char *id;
  int index;
} ranked;

static int by_id(const void *a, const void *b) {
  return strcmp(((const ranked *)a)->id, ((const ranked *)b)->id);
}

int cli_shard_select(const char *const *ids, int n, const cli_shard *s, unsigned char *keep) {
  if (n <= 0) return 0;
  if (!s->on) {
    memset(keep, 1, (size_t)n);
    return n;
  }
  ranked *r = malloc((size_t)n * sizeof *r);
  if (!r) return -1;
  for (int i = 0; i < n; i++) r[i] = (ranked){ids[i], i};
  /* Ranked by the ids' text, the shares do not depend on the order the
   * list was built in; dealt round-robin, each op's buckets spread over
   * the shards and the shares differ by at most one bucket. */
  qsort(r, (size_t)n, sizeof *r, by_id);
  memset(keep, 0, (size_t)n);
  int kept = 0;
  for (int i = 0; i < n; i++)
    if (i % s->n == s->k) {
      keep[r[i].index] = 1;
      kept++;
    }
  free(r);
  return kept;
}
