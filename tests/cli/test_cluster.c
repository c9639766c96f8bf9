/* test_cluster.c - scree-tune's cluster side without a GPU: prewarm's
 * shards (disjoint, complete, balanced, independent of input order, from
 * Slurm and Indexed Job variables), dry runs, user presets, and --devices
 * failing cleanly where there is no GPU. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <sqlite3.h>

#include "test_util.h"

static char dir[256];
static char out[1 << 16];

/* Runs a shell command line (SCREE_TUNE_BIN is $T in it); returns its exit
 * code and its stdout and stderr in out. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char body[4096], cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "cd '%s' && T='%s' && unset SLURM_ARRAY_TASK_ID "
           "JOB_COMPLETION_INDEX SCREE_SHARD_COUNT; { %s ; } 2>&1", dir, SCREE_TUNE_BIN, body);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  const size_t len = fread(out, 1, sizeof out - 1, p);
  out[len] = 0;
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/scree-cluster-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

#define WHAT "--model llama-3-8b --shapes '" SCREE_SOURCE_DIR "/bench/rowwise_shapes.json' --dtype bf16,fp16"
#define WHAT_REORDERED "--shapes '" SCREE_SOURCE_DIR "/bench/rowwise_shapes.json' --dtype fp16,bf16 --model llama-3-8b"

START_TEST(shards_partition_the_list) {
  ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run -q > all.txt && wc -l < all.txt"), 0);
  const int total = atoi(out);
  ck_assert_int_gt(total, 150);
  static const int counts[] = {1, 2, 3, 7};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    const int n = counts[c];
    ck_assert_int_eq(sh("rm -f s_*.txt; k=0; while [ $k -lt %d ]; do $T prewarm " WHAT
                        " --dry-run -q --shard $k/%d > s_$k.txt || exit 9; k=$((k+1)); done",
                        n, n),
                     0);
    /* Complete and disjoint: the shards together are the list, each line once. */
    ck_assert_msg(sh("cat s_*.txt | sort > u.txt; sort all.txt | cmp - u.txt") == 0,
                  "%d shards: not the whole list: %s", n, out);
    ck_assert_int_eq(sh("cat s_*.txt | sort | uniq -d | wc -l"), 0);
    ck_assert_int_eq(atoi(out), 0);
    /* Balanced: within one bucket of each other. */
    ck_assert_int_eq(sh("wc -l s_*.txt | grep -v total | awk '{print $1}' | sort -n | "
                        "sed -n '1p;$p' | tr '\\n' ' '"),
                     0);
    int lo, hi;
    ck_assert_int_eq(sscanf(out, "%d %d", &lo, &hi), 2);
    ck_assert_msg(hi - lo <= 1, "%d shards: sizes %d..%d", n, lo, hi);
  }
  /* More shards than buckets: one bucket each, then empty shards. */
  ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run -q --shard 0/1000 | wc -l"), 0);
  ck_assert_int_eq(atoi(out), 1);
  ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run -q --shard %d/1000 | wc -l", total - 1), 0);
  ck_assert_int_eq(atoi(out), 1);
  ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run -q --shard 999/1000 | wc -l"), 0);
  ck_assert_int_eq(atoi(out), 0);
  /* Stable: the same shard from a list built in another order, and again. */
  ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run -q --shard 2/7 | sort > a.txt && "
                      "$T prewarm " WHAT_REORDERED " --dry-run -q --shard 2/7 | sort > b.txt && "
                      "cmp a.txt b.txt && $T prewarm " WHAT " --dry-run -q --shard 2/7 | sort | "
                      "cmp - a.txt"),
                   0);
}
END_TEST

START_TEST(shard_auto_from_the_scheduler) {
  ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run -q --shard 1/3 > want.txt"), 0);
  /* A Slurm array --array=4-6: task 5 is the second of three. */
  ck_assert_int_eq(sh("SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_COUNT=3 "
                      "$T prewarm " WHAT " --dry-run --shard auto > got.txt && cmp got.txt "
                      "want.txt"),
                   0);
  ck_assert_msg(strstr(out, "shard 1/3 (Slurm array task 5)"), "%s", out);
  /* --array=0-8:4: ids 0, 4, 8. */
  ck_assert_int_eq(sh("SLURM_ARRAY_TASK_ID=4 SLURM_ARRAY_TASK_STEP=4 SLURM_ARRAY_TASK_COUNT=3 "
                      "$T prewarm " WHAT " --dry-run -q --shard auto | cmp - want.txt"),
                   0);
  /* An Indexed Job: the index, and the count from a flag or the environment. */
  ck_assert_int_eq(sh("JOB_COMPLETION_INDEX=1 $T prewarm " WHAT " --dry-run -q --shard auto "
                      "--shard-count 3 | cmp - want.txt"),
                   0);
  ck_assert_int_eq(sh("JOB_COMPLETION_INDEX=1 SCREE_SHARD_COUNT=3 $T prewarm " WHAT
                      " --dry-run -q --shard auto | cmp - want.txt"),
                   0);
  /* Refused, with the reason. */
  ck_assert_int_eq(sh("JOB_COMPLETION_INDEX=1 $T prewarm " WHAT " --dry-run --shard auto"), 2);
  ck_assert_msg(strstr(out, "pass --shard-count N or set SCREE_SHARD_COUNT"), "%s", out);
  ck_assert_int_eq(sh("JOB_COMPLETION_INDEX=3 SCREE_SHARD_COUNT=3 $T prewarm " WHAT
                      " --dry-run --shard auto"),
                   2);
  ck_assert_msg(strstr(out, "JOB_COMPLETION_INDEX=3 is not in 0..2"), "%s", out);
  ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run --shard auto"), 2);
  ck_assert_msg(strstr(out, "neither SLURM_ARRAY_TASK_ID"), "%s", out);
  ck_assert_int_eq(sh("SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_COUNT=3 $T prewarm " WHAT
                      " --dry-run --shard auto"),
                   2);
  ck_assert_msg(strstr(out, "SLURM_ARRAY_TASK_ID=3 is not one of 3 ids from 0"), "%s", out);
  static const char *const bad[] = {"3/3", "1/0", "-1/2", "1", "a/b", "1/2x", "0/70000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run --shard '%s'", bad[i]), 2);
    ck_assert_msg(strstr(out, "give K/N with N in 1..65536"), "%s: %s", bad[i], out);
  }
  ck_assert_int_eq(sh("$T prewarm " WHAT " --dry-run --shard 0/2 --shard-count 2"), 2);
}
END_TEST

START_TEST(user_presets) {
  ck_assert_int_eq(sh("printf 'let T = 1..4\\nmodel mine -- test\\nrmsnorm rows={T},cols=5120\\n"
                      "softmax rows={T},cols=64 dtypes=fp32\\n' > mine.txt && "
                      "$T prewarm --model mine --presets mine.txt --dtype bf16,fp32 --dry-run -q"),
                   0);
  ck_assert_int_eq(strlen(out) > 0, 1);
  ck_assert_msg(strstr(out, "rmsnorm rows<=4,cols=5120 x=bf16,w=bf16,y=bf16 rows=4,cols=5120\n"), "%s", out);
  ck_assert_msg(strstr(out, "softmax rows<=2,cols=64 x=fp32,y=fp32 rows=2,cols=64\n"), "%s", out);
  ck_assert(!strstr(out, "softmax rows<=2,cols=64 x=bf16"));
  /* The same through the environment; the shipped presets stay. */
  ck_assert_int_eq(sh("SCREE_PRESETS=mine.txt $T prewarm --model mine --dry-run -q | wc -l"), 0);
  ck_assert_int_eq(atoi(out), 3);
  ck_assert_int_eq(sh("SCREE_PRESETS=mine.txt $T prewarm --model qwen2.5-7b --dry-run -q | wc -l"),
                   0);
  ck_assert_int_eq(atoi(out), 81);
  /* A bad file names its line; an unknown model lists the presets. */
  ck_assert_int_eq(sh("printf 'model x\\nrmsnorm rows={N},cols=1\\n' > bad.txt && "
                      "$T prewarm --model x --presets bad.txt --dry-run"),
                   2);
  ck_assert_msg(strstr(out, "bad.txt:2: {N}: a variable that no `let` defines"), "%s", out);
  ck_assert_int_eq(sh("$T prewarm --model nope --dry-run"), 2);
  ck_assert_msg(strstr(out, "deepseek-moe-16b"), "%s", out);
  /* A shape the op's problem builder refuses names the preset line. */
  ck_assert_int_eq(sh("printf 'model y\\nrope total=4,batch=1,heads_q=4,heads_kv=2,head_dim=63,"
                      "rotary_dim=64\\n' > y.txt && $T prewarm --model y --presets y.txt "
                      "--dry-run"),
                   2);
  ck_assert_msg(strstr(out, "model y: y.txt:2"), "%s", out);
}
END_TEST

static void put(const char *db, const char *arch, const char *bucket, const char *config,
                double us, const char *src_hash) {
  scree__cache *c;
  char why[512];
  ck_assert_int_eq(scree__cache_open(db, 0, &c, NULL, why, sizeof why), SCREE_OK);
  scree__centry e;
  memset(&e, 0, sizeof e);
  snprintf(e.key.op, sizeof e.key.op, "rmsnorm");
  snprintf(e.key.bucket, sizeof e.key.bucket, "%s", bucket);
  snprintf(e.key.dtype, sizeof e.key.dtype, "x=bf16,w=bf16,y=bf16");
  snprintf(e.key.arch, sizeof e.key.arch, "%s", arch);
  snprintf(e.key.src_hash, sizeof e.key.src_hash, "%s", src_hash);
  snprintf(e.config, sizeof e.config, "%s", config);
  snprintf(e.device_name, sizeof e.device_name, "NVIDIA H100 80GB HBM3");
  e.median_us = us;
  e.sm_count = 132;
  static const char blob[] = "\177ELF synthetic cubin";
  e.cubin = (void *)blob;
  e.cubin_size = sizeof blob;
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_OK);
  scree__cache_close(c);
}

/* export --text, read back, verify --shipped, prewarm --from-shipped (a
 * compile with NVRTC, no GPU). */
START_TEST(shipped_text_round_trip) {
  char db[400], file[400];
  snprintf(db, sizeof db, "%s/c.db", dir);
  const char *h = scree__source_hash(scree__op_find("rmsnorm"));
  put(db, "sm_90", "rows<=16384,cols=4096", "tpr=128,rows=1,vec=8,cache=4", 73.81, h);
  put(db, "sm_80", "rows<=16384,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 120.0, h);
  char old[65];
  snprintf(old, sizeof old, "%064d", 7);
  put(db, "sm_90", "rows<=1024,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 10.25, old);
  ck_assert_int_eq(sh("$T export --text shipped.txt --cache c.db"), 0);
  ck_assert_msg(strstr(out, "exported 3 winner(s) as text to shipped.txt, 0 skipped"), "%s", out);
  ck_assert_int_eq(sh("$T export --text - --cache c.db --arch sm_80 | grep -v '^#'"), 0);
  ck_assert_msg(!strncmp(out, "rmsnorm rows<=16384,cols=4096 x=bf16,w=bf16,y=bf16 0 sm_80 "
                              "NVIDIA_H100_80GB_HBM3 tpr=256,rows=1,vec=8,cache=2 120.000 ", 113),
                "%s", out);
  /* Read back: the same keys and configs. */
  snprintf(file, sizeof file, "%s/shipped.txt", dir);
  char why[512];
  char *text = scree__read_text(file, why, sizeof why);
  ck_assert_ptr_nonnull(text);
  scree__tuned t = {0};
  ck_assert_int_eq(scree__tuned_parse(text, file, &t, why, sizeof why), SCREE_OK);
  free(text);
  ck_assert_int_eq(t.n, 3);
  scree__cache *c;
  ck_assert_int_eq(scree__cache_open(db, 1, &c, NULL, why, sizeof why), SCREE_OK);
  for (int i = 0; i < t.n; i++) {
    scree__centry e;
    ck_assert_int_eq(scree__cache_get(c, &t.e[i].key, &e), SCREE_OK);
    ck_assert_str_eq(e.config, t.e[i].config);
    ck_assert_str_eq(t.e[i].device, "NVIDIA_H100_80GB_HBM3");
    ck_assert(fabs(e.median_us - t.e[i].median_us) < 1e-3);
    scree__centry_free(&e);
  }
  scree__cache_close(c);
  scree__tuned_free(&t);
  /* verify --shipped: no GPU; the entry of an older kernel source is stale. */
  ck_assert_int_eq(sh("SCREE_TUNED_CONFIGS=shipped.txt $T verify --shipped"), 0);
  ck_assert_msg(strstr(out, "3 shipped tuned config(s) in 1 file(s): 1 stale"), "%s", out);
  ck_assert_int_eq(sh("SCREE_TUNED_CONFIGS=shipped.txt $T verify --shipped -q | grep -c stale"),
                   0);
  ck_assert_int_eq(atoi(out), 2); /* the entry and the summary */
  ck_assert_int_eq(sh("printf 'rmsnorm rows<=3,cols=4 x=bf16,w=bf16,y=bf16 0 sm_90 G c 1 h\n' "
                      "> bad.txt && SCREE_TUNED_CONFIGS=bad.txt $T verify --shipped"),
                   1);
  ck_assert_msg(strstr(out, "bad.txt:1: "), "%s", out);
  /* Kernel sources that cannot be read made every shipped config look
   * stale, with exit 0. */
  ck_assert_int_eq(sh("SCREE_KERNEL_DIR=/nonexistent SCREE_TUNED_CONFIGS=shipped.txt $T verify "
                      "--shipped"),
                   1);
  ck_assert_msg(strstr(out, "cannot read the kernel sources") &&
                    strstr(out, "SCREE_KERNEL_DIR: /nonexistent/"),
                "%s", out);
  ck_assert_int_eq(sh("SCREE_KERNEL_DIR=/nonexistent SCREE_TUNED_CONFIGS=shipped.txt $T prewarm "
                      "--from-shipped --cache new.db"),
                   1);
  ck_assert_msg(strstr(out, "cannot read the kernel sources"), "%s", out);
  /* prewarm --from-shipped: compiled with NVRTC, stored without timing. */
  const int rc = sh("SCREE_TUNED_CONFIGS=shipped.txt $T prewarm --from-shipped --arch sm_90 "
                    "--cache new.db");
  if (rc == 3) {
    ck_assert_msg(strstr(out, "NVRTC"), "%s", out);
    return; /* no NVRTC here */
  }
  ck_assert_msg(rc == 0, "%s", out);
  ck_assert_msg(strstr(out, "1 shipped config(s) compiled (1 compile(s)"), "%s", out);
  ck_assert_msg(strstr(out, "1 stale, 1 for other archs, 0 for other ops, 0 failed"), "%s", out);
  /* Entries --op leaves out are of other ops, not of other archs; with
   * nothing to compile it says so and fails. */
  ck_assert_int_eq(sh("SCREE_TUNED_CONFIGS=shipped.txt $T prewarm --from-shipped --arch sm_90 "
                      "--op layernorm --cache new.db"),
                   1);
  ck_assert_msg(strstr(out, "nothing to compile: the shipped tuned configs hold no config for "
                            "sm_90 and op layernorm") &&
                    strstr(out, "(0 stale, 1 for other archs, 2 for other ops;"),
                "%s", out);
  ck_assert_msg(strstr(out, "0 stale, 1 for other archs, 2 for other ops, 0 failed"), "%s", out);
  ck_assert_int_eq(sh("$T list --cache new.db"), 0);
  ck_assert_msg(strstr(out, "tpr=128,rows=1,vec=8,cache=4") && strstr(out, "73.81") &&
                    strstr(out, "NVIDIA H100 80GB HBM3"),
                "%s", out);
  ck_assert_int_eq(sh("SCREE_TUNED_CONFIGS=shipped.txt $T prewarm --from-shipped --arch sm_90 "
                      "--cache new.db"),
                   0);
  ck_assert_msg(strstr(out, "0 shipped config(s) compiled (0 compile(s)") &&
                    strstr(out, "1 cached already"),
                "%s", out);
  /* A damaged row (its cubin's hash no longer matches, and a median no
   * good row beats) is compiled again and replaced, and the count says so;
   * a row is counted as stored only when it was written. */
  char newdb[400];
  snprintf(newdb, sizeof newdb, "%s/new.db", dir);
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open(newdb, &d), SQLITE_OK);
  ck_assert_int_eq(sqlite3_exec(d, "UPDATE winners SET median_us = 0.02, cubin_hash = "
                                   "'00' || substr(cubin_hash, 3)", NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(d);
  ck_assert_int_eq(sh("SCREE_TUNED_CONFIGS=shipped.txt $T prewarm --from-shipped --arch sm_90 "
                      "--cache new.db"),
                   0);
  ck_assert_msg(strstr(out, "1 shipped config(s) compiled (1 compile(s)") &&
                    strstr(out, "0 cached already"),
                "%s", out);
  ck_assert_int_eq(sh("$T list --cache new.db"), 0);
  ck_assert_msg(strstr(out, "73.81"), "%s", out);
  ck_assert_int_eq(sh("$T prewarm --from-shipped --model gpt2 --cache new.db"), 2);
}
END_TEST

START_TEST(devices_without_a_gpu) {
  /* No GPU here (CI): a clean exit 3 with the reason. Skipped where there is one. */
  if (sh("$T info >/dev/null") == 0) return;
  ck_assert_int_eq(sh("$T prewarm --model llama-3-8b --devices all --cache tune.db"), 3);
  ck_assert_msg(strstr(out, "--devices"), "%s", out);
  ck_assert_int_eq(sh("$T prewarm --model llama-3-8b --devices 0,1 --cache tune.db"), 3);
  ck_assert_int_eq(sh("$T prewarm --model llama-3-8b --devices 0,x --cache tune.db"), 2);
  ck_assert_int_eq(sh("$T prewarm --model llama-3-8b --devices 0 --device 1 --cache tune.db"), 2);
}
END_TEST

/* prewarm --from-shipped shows its progress like the other prewarms (a
 * bar on a terminal's stderr) and a line per config it stored. */
START_TEST(from_shipped_shows_progress) {
  if (sh("command -v script >/dev/null") != 0) return; /* no pseudo-terminal to draw on */
  const char *h = scree__source_hash(scree__op_find("rmsnorm"));
  ck_assert_int_eq(sh("printf 'rmsnorm rows<=16,cols=4096 x=bf16,w=bf16,y=bf16 0 sm_90 "
                      "NVIDIA_H100_80GB_HBM3 tpr=128,rows=1,vec=8,cache=4 5.0 %s\\n"
                      "rmsnorm rows<=32,cols=4096 x=bf16,w=bf16,y=bf16 0 sm_90 "
                      "NVIDIA_H100_80GB_HBM3 tpr=256,rows=1,vec=8,cache=2 6.0 %s\\n' > s.txt",
                      h, h),
                   0);
  const int rc = sh("SCREE_TUNED_CONFIGS=s.txt script -qefc \"$T prewarm --from-shipped --arch "
                    "sm_90 --op rmsnorm --cache p.db\" /dev/null");
  if (rc == 3) return; /* no NVRTC here */
  ck_assert_msg(rc == 0, "%s", out);
  ck_assert_msg(strstr(out, "shipped configs              [") && strstr(out, " compile "),
                "%s", out);
  ck_assert_msg(strstr(out, "us (shipped) tuned on") && strstr(out, "NVIDIA H100 80GB HBM3"),
                "%s", out);
  ck_assert_msg(strstr(out, "2 shipped config(s) compiled (2 compile(s)"), "%s", out);
  ck_assert_int_eq(sh("SCREE_TUNED_CONFIGS=s.txt $T prewarm --from-shipped --arch sm_90 --op "
                      "rmsnorm --cache p.db --json"),
                   0);
  ck_assert_msg(strstr(out, "\"stored\": 0, \"compiles\": 0, \"cached\": 2"), "%s", out);
  ck_assert_int_eq(sh("SCREE_TUNED_CONFIGS=s.txt $T prewarm --from-shipped --arch sm_90 --op "
                      "rmsnorm --cache p.db"),
                   0);
  ck_assert_msg(strstr(out, "nothing left to compile: the 2 shipped config(s) for sm_90 are "
                            "cached already"), "%s", out);
}
END_TEST

/* prewarm --from-shipped with nothing for the arch says what it looked for
 * and exits 1, never a silent 0; quiet or not. */
START_TEST(from_shipped_with_nothing_to_compile) {
  const char *h = scree__source_hash(scree__op_find("rmsnorm"));
  ck_assert_int_eq(sh("printf 'rmsnorm rows<=16,cols=4096 x=bf16,w=bf16,y=bf16 0 sm_90 "
                      "NVIDIA_H100_80GB_HBM3 tpr=128,rows=1,vec=8,cache=4 5.0 %s\\n' > s.txt", h),
                   0);
  int rc = sh("SCREE_TUNED_CONFIGS=s.txt $T prewarm --from-shipped --arch sm_80 --cache p.db -q");
  if (rc == 3) return; /* no NVRTC here */
  ck_assert_int_eq(rc, 1);
  ck_assert_msg(strstr(out, "nothing to compile: the shipped tuned configs hold no config for "
                            "sm_80 of this build's kernel sources (0 stale, 1 for other archs, "
                            "0 for other ops;"),
                "%s", out);
  rc = sh("SCREE_TUNED_CONFIGS=s.txt $T prewarm --from-shipped --arch sm_80 --cache p.db --json");
  ck_assert_int_eq(rc, 1);
  ck_assert_msg(strstr(out, "\"stored\": 0, \"compiles\": 0, \"cached\": 0"), "%s", out);
}
END_TEST

/* deploy/prewarm.sbatch and the Indexed Job take SCREE_DTYPES
 * blank-separated, as SCREE_MODELS is, or comma-separated; run here as
 * plain scripts (the task of an array of one, the pod of one completion). */
START_TEST(sbatch_takes_blank_separated_dtypes) {
  ck_assert_int_eq(sh("for m in llama-3-8b gpt2; do $T prewarm --model $m --dtype bf16,fp16 "
                      "--dry-run -q; done | sort > all.txt; wc -l < all.txt"),
                   0);
  const int total = atoi(out);
  ck_assert_int_gt(total, 200);
  static const char *const forms[] = {"bf16 fp16", " bf16  fp16 ", "bf16,fp16", "bf16, fp16"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    ck_assert_msg(sh("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=1 SCREE_TUNE=$T "
                     "SCREE_DRY_RUN=1 SCREE_MODELS='llama-3-8b gpt2' SCREE_DTYPES='%s' "
                     "SCREE_OUT=out bash '" SCREE_SOURCE_DIR "/deploy/prewarm.sbatch' "
                     "2>/dev/null | grep -v '^task ' | sort | cmp - all.txt",
                     forms[i]) == 0,
                  "SCREE_DTYPES='%s': %s", forms[i], out);
    /* The Indexed Job's script, the same way (scree-tune on its PATH). */
    ck_assert_msg(sh("sed -n '/set -eu/,/^ *done$/p' '" SCREE_SOURCE_DIR
                     "/deploy/prewarm-indexed-job.yaml' | sed 's/^ *//' > job.sh && "
                     "PATH=$(dirname \"$T\"):$PATH JOB_COMPLETION_INDEX=0 SCREE_SHARD_COUNT=1 "
                     "SCREE_DRY_RUN=1 SCREE_MODELS='llama-3-8b gpt2' SCREE_DTYPES='%s' sh job.sh "
                     "2>/dev/null | sort | cmp - all.txt",
                     forms[i]) == 0,
                  "Indexed Job, SCREE_DTYPES='%s': %s", forms[i], out);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("cluster");
  TCase *tc = tcase_create("cli");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, shards_partition_the_list);
  tcase_add_test(tc, shard_auto_from_the_scheduler);
  tcase_add_test(tc, user_presets);
  tcase_add_test(tc, shipped_text_round_trip);
  tcase_add_test(tc, devices_without_a_gpu);
  tcase_add_test(tc, from_shipped_shows_progress);
  tcase_add_test(tc, from_shipped_with_nothing_to_compile);
  tcase_add_test(tc, sbatch_takes_blank_separated_dtypes);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
