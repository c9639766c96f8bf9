/* test_cli.c - every scree-tune command on a cache filled with synthetic
 * rows (no GPU needed), its output and exit code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static char dir[256], db[400];

/* Runs scree-tune with args (a shell-quoted string); returns its exit
 * code and its stdout (+ stderr) in out. */
static int tune(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int tune(char *out, size_t n, const char *fmt, ...) {
  char args[2048], cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", SCREE_TUNE_BIN, args);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t len = fread(out, 1, n - 1, p);
  out[len] = 0;
  int st = pclose(p);
  /* In the sanitizer build a report ends scree-tune with exit code 23;
   * show the report beside the test's failure, which gives only the code. */
  if (strstr(out, "Sanitizer") || strstr(out, "runtime error:"))
    fprintf(stderr, "scree-tune %s:\n%s\n", args, out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void put(const char *arch, const char *bucket, const char *config, double us,
                const char *dtype) {
  scree__cache *c;
  char why[512];
  ck_assert_int_eq(scree__cache_open(db, 0, &c, NULL, why, sizeof why), SCREE_OK);
  scree__centry e;
  memset(&e, 0, sizeof e);
  snprintf(e.key.op, sizeof e.key.op, "rmsnorm");
  snprintf(e.key.bucket, sizeof e.key.bucket, "%s", bucket);
  snprintf(e.key.dtype, sizeof e.key.dtype, "%s", dtype);
  snprintf(e.key.arch, sizeof e.key.arch, "%s", arch);
  snprintf(e.key.src_hash, sizeof e.key.src_hash, "%s", scree__source_hash(scree__op_find("rmsnorm")));
  snprintf(e.config, sizeof e.config, "%s", config);
  snprintf(e.device_name, sizeof e.device_name, "Synthetic GPU");
  e.median_us = us;
  e.spread_us = us / 50;
  e.sm_count = 132;
  e.driver_version = 13000;
  e.nvrtc_version = 13000;
  static const char blob[] = "\177ELF synthetic cubin";
  e.cubin = (void *)blob;
  e.cubin_size = sizeof blob;
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_OK);
  scree__cache_close(c);
}

static const char *F16 = "x=fp16,w=fp16,y=fp16";

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/scree-cli-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(db, sizeof db, "%s/tune.db", dir);
  put("sm_90", "rows<=16384,cols=4096", "tpr=128,rows=1,vec=8,cache=4", 70.5, F16);
  put("sm_90", "rows<=1024,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 10.25, F16);
  put("sm_80", "rows<=16384,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 120.0, F16);
  /* A winner the shipped safelist does not list, to be learned as allowed. */
  put("sm_90", "rows<=64,cols=100", "tpr=32,rows=8,vec=2,cache=2", 3.0, F16);
  scree__cache *c;
  ck_assert_int_eq(scree__cache_open(db, 0, &c, NULL, NULL, 0), SCREE_OK);
  scree__ckey k;
  memset(&k, 0, sizeof k);
  snprintf(k.op, sizeof k.op, "rmsnorm");
  snprintf(k.bucket, sizeof k.bucket, "*");
  snprintf(k.dtype, sizeof k.dtype, "%s", F16);
  snprintf(k.arch, sizeof k.arch, "sm_90");
  snprintf(k.src_hash, sizeof k.src_hash, "%s", scree__source_hash(scree__op_find("rmsnorm")));
  ck_assert_int_eq(scree__cache_record_bad(c, &k, "tpr=1024,rows=1,vec=8,cache=8", 13000,
                                           "load: CUDA_ERROR_OUT_OF_RESOURCES"),
                   SCREE_OK);
  /* Not learned: a timeout of one bucket, and a record for another source. */
  snprintf(k.bucket, sizeof k.bucket, "rows<=4,cols=64");
  ck_assert_int_eq(scree__cache_record_bad(c, &k, "tpr=512,rows=1,vec=8,cache=2", 13000,
                                           "timeout: one launch took 2000 ms"),
                   SCREE_OK);
  snprintf(k.bucket, sizeof k.bucket, "*");
  snprintf(k.src_hash, sizeof k.src_hash, "%064d", 7);
  ck_assert_int_eq(scree__cache_record_bad(c, &k, "tpr=256,rows=1,vec=8,cache=4", 13000,
                                           "compile: an older kernel"),
                   SCREE_OK);
  snprintf(k.bucket, sizeof k.bucket, "rows<=8,cols=512");
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=5,cols=512"), SCREE_OK);
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=7,cols=512"), SCREE_OK);
  scree__cache_close(c);
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static char out[1 << 16];

START_TEST(help_everywhere) {
  static const char *const cmds[] = {"info", "demo", "prewarm", "list", "show", "export",
                                     "import", "merge", "verify", "clear", "safelist"};
  static char top[8192];
  ck_assert_int_eq(tune(top, sizeof top, "--help"), 0);
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    ck_assert_msg(strstr(top, cmds[i]), "--help lacks %s", cmds[i]);
    char want[64];
    snprintf(want, sizeof want, "usage: scree-tune %s", cmds[i]);
    ck_assert_int_eq(tune(out, sizeof out, "%s --help", cmds[i]), 0);
    ck_assert_msg(strstr(out, want), "%s --help: %s", cmds[i], out);
  }
  ck_assert_int_eq(tune(out, sizeof out, "frobnicate"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "list --bogus"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "%s", ""), 2);
}
END_TEST

START_TEST(list_table_json_filters) {
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", db), 0);
  ck_assert(strstr(out, "rows<=16384,cols=4096"));
  ck_assert(strstr(out, "tpr=128,rows=1,vec=8,cache=4"));
  ck_assert(strstr(out, "4 winner(s)"));
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --arch sm_80", db), 0);
  ck_assert(strstr(out, "1 winner(s)"));
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --json --arch sm_90", db), 0);
  ck_assert(strstr(out, "\"entries\": ["));
  ck_assert(strstr(out, "\"median_us\": 70.500"));
  ck_assert(!strstr(out, "sm_80"));
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --misses", db), 0);
  ck_assert(strstr(out, "rows<=8,cols=512"));
  ck_assert(strstr(out, "1 miss(es)"));
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --misses --json", db), 0);
  ck_assert(strstr(out, "\"count\": 2"));
  ck_assert(strstr(out, "\"example\": \"rows=5,cols=512\""));
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --bad", db), 0);
  ck_assert(strstr(out, "CUDA_ERROR_OUT_OF_RESOURCES"));
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --bad --misses", db), 2);
}
END_TEST

START_TEST(show_entries) {
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --bucket 'rows<=1024,cols=4096'", db), 0);
  ck_assert(strstr(out, "tpr=256,rows=1,vec=8,cache=2"));
  ck_assert(strstr(out, "10.250 us median"));
  ck_assert(strstr(out, "Synthetic GPU"));
  ck_assert(strstr(out, "(matches)"));
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --json --arch sm_80", db), 0);
  ck_assert(strstr(out, "\"cubin_ok\": true"));
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --bucket nope", db), 1);
  ck_assert(strstr(out, "no matching entry"));
}
END_TEST

START_TEST(export_then_merge_and_import) {
  char shipped[400], other[400];
  snprintf(shipped, sizeof shipped, "%s/shipped.db", dir);
  ck_assert_int_eq(tune(out, sizeof out, "export '%s' --cache '%s' --arch sm_90", shipped, db), 0);
  ck_assert(strstr(out, "exported 3 winner(s)"));
  /* Exporting onto an existing file is refused. */
  ck_assert_int_eq(tune(out, sizeof out, "export '%s' --cache '%s'", shipped, db), 4);
  scree__cache *c;
  ck_assert_int_eq(scree__cache_open(shipped, 1, &c, NULL, NULL, 0), SCREE_OK);
  int n = 0;
  scree__cache_clear(c, NULL, NULL, &n); /* read-only: must fail and delete nothing */
  scree__cache_close(c);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", shipped), 0);
  ck_assert(strstr(out, "3 winner(s)"));
  ck_assert(!strstr(out, "sm_80"));

  /* Another machine's cache: one faster entry with another config (a
   * conflict it wins), one slower (a conflict it loses), one new. */
  snprintf(other, sizeof other, "%s/other.db", dir);
  char saved[400];
  snprintf(saved, sizeof saved, "%s", db);
  snprintf(db, sizeof db, "%s", other);
  put("sm_90", "rows<=16384,cols=4096", "tpr=64,rows=2,vec=8,cache=8", 60.0, F16);
  put("sm_90", "rows<=1024,cols=4096", "tpr=512,rows=1,vec=8,cache=1", 11.0, F16);
  put("sm_90", "rows<=2,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 4.5, F16);
  snprintf(db, sizeof db, "%s", saved);
  ck_assert_int_eq(tune(out, sizeof out, "merge '%s' --cache '%s'", other, db), 0);
  ck_assert_msg(strstr(out, "1 added, 1 replaced by faster entries, 2 conflict(s)"), "%s", out);
  ck_assert(strstr(out, "kept theirs"));
  ck_assert(strstr(out, "kept mine"));
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --bucket 'rows<=16384,cols=4096' --arch sm_90", db), 0);
  ck_assert(strstr(out, "tpr=64,rows=2,vec=8,cache=8"));
  /* import is merge: merging the same file again changes nothing. */
  ck_assert_int_eq(tune(out, sizeof out, "import '%s' --cache '%s' --json", other, db), 0);
  ck_assert_msg(strstr(out, "\"added\": 0, \"replaced\": 0"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "merge /nonexistent/x.db --cache '%s'", db), 4);
}
END_TEST

START_TEST(clear_with_filters) {
  ck_assert_int_eq(tune(out, sizeof out, "clear --cache '%s'", db), 2);
  ck_assert_int_eq(tune(out, sizeof out, "clear --cache '%s' --arch sm_80", db), 0);
  ck_assert(strstr(out, "deleted 1 winner(s)"));
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", db), 0);
  ck_assert(strstr(out, "3 winner(s)"));
  ck_assert_int_eq(tune(out, sizeof out, "clear --cache '%s' --all", db), 0);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --misses", db), 0);
  ck_assert(strstr(out, "0 miss(es)"));
}
END_TEST

START_TEST(safelist_export_learns) {
  char path[400];
  snprintf(path, sizeof path, "%s/sm_90.txt", dir);
  ck_assert_int_eq(tune(out, sizeof out, "safelist export --arch sm_90 --cache '%s' -o '%s'", db, path), 0);
  scree__safelist sl;
  char why[512];
  ck_assert_msg(scree__safelist_load_file(path, &sl, why, sizeof why) == SCREE_OK, "%s", why);
  const scree__op *op = scree__op_find("rmsnorm");
  scree__config bad = {0, {1024, 1, 8, 8}}, learned = {0, {32, 8, 2, 2}};
  const scree__sl_entry *d = scree__safelist_denied(&sl, op, F16, &bad);
  ck_assert_ptr_nonnull(d);
  ck_assert(strstr(d->reason, "OUT_OF_RESOURCES"));
  ck_assert(scree__safelist_allows(&sl, op, F16, &learned));
  scree__config local = {0, {512, 1, 8, 2}}, stale = {0, {256, 1, 8, 4}};
  ck_assert_ptr_null(scree__safelist_denied(&sl, op, F16, &local));
  ck_assert_ptr_null(scree__safelist_denied(&sl, op, F16, &stale));
  scree__safelist_free(&sl);
  ck_assert_int_eq(tune(out, sizeof out, "safelist export --cache '%s'", db), 2);
  ck_assert_int_eq(tune(out, sizeof out, "safelist frob"), 2);
  /* An --arch too long for an int is a usage error, not an overflow. */
  ck_assert_int_eq(
      tune(out, sizeof out, "safelist export --arch sm_99999999999999999999 --cache '%s'", db),
      2);
  ck_assert_msg(strstr(out, "--arch: bad arch name \"sm_99999999999999999999\""), "%s", out);
}
END_TEST

START_TEST(gpu_commands_without_gpu) {
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  if (ri.device_count > 0) return; /* on a GPU machine the gpu tests cover them */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --cache '%s' --model llama-3-8b", db), 3);
  ck_assert(strstr(out, "no usable CUDA device"));
  ck_assert_int_eq(tune(out, sizeof out, "verify --cache '%s'", db), 3);
  ck_assert_int_eq(tune(out, sizeof out, "info"), 3);
  ck_assert(strstr(out, "GPUs: none"));
  /* Usage errors are found before looking for a GPU. */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model nope"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --cols 70000 --rows 1"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --shapes /nonexistent.json"), 2);
}
END_TEST

/* A shapes file that is not a regular file, or a shape with a value out of
 * range, is a usage error found before looking for a GPU; a directory was
 * read as 2^63 bytes ("Cannot allocate memory"). */
START_TEST(prewarm_shapes_refused) {
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --shapes '%s'", dir), 2);
  char want[400];
  snprintf(want, sizeof want, "--shapes: cannot read %s: a directory, not a regular file", dir);
  ck_assert_msg(strstr(out, want), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --shapes /dev/null"), 2);
  ck_assert_msg(strstr(out, "/dev/null: a device, not a regular file"), "%s", out);
  /* A value past a long was read as LONG_MAX rows and tuned. */
  char path[400];
  snprintf(path, sizeof path, "%s/big.json", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("{\"shapes\": [[99999999999999999999999, 4096]]}\n", f);
  fclose(f);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --shapes '%s'", path), 2);
  ck_assert_msg(strstr(out, "rows 99999999999999999999999 is out of range"), "%s", out);
  /* So is a --shape field past 2^40 (heads_q overflowed the check problem). */
  ck_assert_int_eq(tune(out, sizeof out,
                        "prewarm --op attention --shape batch=4,total_q=256,total_k=256,"
                        "max_seqlen_q=64,max_seqlen_k=64,heads_q=4611686018427387904,heads_kv=8"),
                   2);
  ck_assert_msg(strstr(out, "heads_q=4611686018427387904 is out of range"), "%s", out);
}
END_TEST

START_TEST(unwritable_cache_location) {
  ck_assert_int_eq(tune(out, sizeof out, "clear --all --cache /proc/scree/tune.db"), 4);
  ck_assert(strstr(out, "cannot open cache"));
  /* Reading commands on a missing cache: nothing cached, nothing created. */
  char missing[400];
  snprintf(missing, sizeof missing, "%s/none/tune.db", dir);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", missing), 0);
  ck_assert(strstr(out, "no cache at"));
  ck_assert_int_ne(access(missing, F_OK), 0);
}
END_TEST

/* Reading commands leave a shipped cache byte for byte as it was. */
START_TEST(reading_commands_do_not_touch_the_file) {
  char shipped[400];
  snprintf(shipped, sizeof shipped, "%s/shipped.db", dir);
  ck_assert_int_eq(tune(out, sizeof out, "export '%s' --cache '%s'", shipped, db), 0);
  FILE *f = fopen(shipped, "rb");
  static unsigned char before[1 << 16], after[1 << 16];
  size_t nb = fread(before, 1, sizeof before, f);
  fclose(f);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", shipped), 0);
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s'", shipped), 0);
  ck_assert_int_eq(tune(out, sizeof out, "list --misses --cache '%s'", shipped), 0);
  f = fopen(shipped, "rb");
  size_t na = fread(after, 1, sizeof after, f);
  fclose(f);
  ck_assert_uint_eq(na, nb);
  ck_assert_int_eq(memcmp(before, after, nb), 0);
  char wal[420];
  snprintf(wal, sizeof wal, "%s-wal", shipped);
  ck_assert_int_ne(access(wal, F_OK), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cli");
  TCase *tc = tcase_create("commands");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, help_everywhere);
  tcase_add_test(tc, list_table_json_filters);
  tcase_add_test(tc, show_entries);
  tcase_add_test(tc, export_then_merge_and_import);
  tcase_add_test(tc, clear_with_filters);
  tcase_add_test(tc, safelist_export_learns);
  tcase_add_test(tc, gpu_commands_without_gpu);
  tcase_add_test(tc, prewarm_shapes_refused);
  tcase_add_test(tc, unwritable_cache_location);
  tcase_add_test(tc, reading_commands_do_not_touch_the_file);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
