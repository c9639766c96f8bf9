/* test_cli.c - every scree-tune command on a cache filled with synthetic
 * rows (no GPU needed), its output and exit code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <grp.h>
#include <sqlite3.h>
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

/* Runs a shell command line as given (redirections included); returns its
 * exit code and its stdout in out. */
static int shell(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int shell(char *out, size_t n, const char *fmt, ...) {
  static char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t len = fread(out, 1, n - 1, p);
  out[len] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Runs a shell command line as a user without privileges: as uid and gid
 * 65534 when this process is root (which bypasses file permissions), else
 * as this user. Returns its exit code and its stdout and stderr in out. */
static int shell_unprivileged(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int shell_unprivileged(char *out, size_t n, const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  fflush(NULL);
  const pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (!pid) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    if (geteuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) _exit(126);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t r;
  while (len < n - 1 && (r = read(fds[0], out + len, n - 1 - len)) > 0) len += (size_t)r;
  out[len] = 0;
  close(fds[0]);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
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

/* Runs SQL on a cache file directly, as anyone with the file can. */
static void sql(const char *path, const char *text) {
  sqlite3 *h = NULL;
  ck_assert_int_eq(sqlite3_open(path, &h), SQLITE_OK);
  char *err = NULL;
  ck_assert_msg(sqlite3_exec(h, text, NULL, NULL, &err) == SQLITE_OK, "%s: %s", text,
                err ? err : "?");
  sqlite3_free(err);
  sqlite3_close(h);
}

/* Copies the winner of bucket `from` into a new row with the columns given
 * as SQL expressions over the old ones (NULL: as it was). */
static void copy_row(const char *path, const char *from, const char *op, const char *bucket,
                     const char *causal, const char *median) {
  char q[2048];
  snprintf(q, sizeof q,
           "INSERT INTO winners SELECT %s, %s, dtype, %s, arch, src_hash, config, %s,"
           " spread_us, device_name, sm_count, driver_version, nvrtc_version, scree_version,"
           " created, cubin_hash, cubin FROM winners WHERE bucket = '%s' AND arch = 'sm_90'",
           op ? op : "op", bucket ? bucket : "bucket", causal ? causal : "causal",
           median ? median : "median_us", from);
  sql(path, q);
}

/* Counts the lines of text that contain needle. */
static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p++) n++;
  return n;
}

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
                                     "import", "merge", "verify", "clear", "safelist",
                                     "worker"};
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
  ck_assert(strstr(out, ", 0 skipped"));
  /* An empty output name is a usage error with a message. */
  ck_assert_int_eq(tune(out, sizeof out, "export '' --cache '%s'", db), 2);
  ck_assert_msg(strstr(out, "output file name is empty"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "merge '' --cache '%s'", db), 2);
  ck_assert_msg(strstr(out, "source cache name is empty"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --bucket ''", db), 2);
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
  ck_assert_msg(strstr(out, "1 added, 1 replaced by faster entries, 2 conflict(s), 0 skipped"),
                "%s", out);
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
  /* An empty filter is refused: it would match every row. */
  ck_assert_int_eq(tune(out, sizeof out, "clear --cache '%s' --arch ''", db), 2);
  ck_assert_msg(strstr(out, "--arch needs a non-empty value"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "clear --cache '%s' --op ''", db), 2);
  ck_assert_msg(strstr(out, "--op needs a non-empty value"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "clear --cache ''  --all"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", db), 0);
  ck_assert(strstr(out, "4 winner(s)"));
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
  /* The tuning worker says why it cannot start. */
  ck_assert_int_eq(tune(out, sizeof out, "worker --device 0 </dev/null"), 3);
  ck_assert_msg(strstr(out, "scree-tune worker: ERROR_NO_"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "worker --device x"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "worker --bogus"), 2);
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
  /* An empty file (a cache being created by another process right now)
   * holds nothing yet: not an error. */
  char empty[400];
  snprintf(empty, sizeof empty, "%s/empty.db", dir);
  FILE *f = fopen(empty, "w");
  fclose(f);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", empty), 0);
  ck_assert_msg(strstr(out, "is empty: nothing is cached in it yet"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s'", empty), 1);
}
END_TEST

/* A cache that cannot be reached is an error, not "no cache": a path
 * through a regular file, a symlink loop, a directory that cannot be
 * searched. */
START_TEST(unreachable_cache_is_an_error) {
  char through[400], loop[400], locked[400], inside[420];
  snprintf(through, sizeof through, "%s/tune.db/x.db", dir);
  snprintf(loop, sizeof loop, "%s/loop.db", dir);
  ck_assert_int_eq(symlink(loop, loop), 0);
  static const char *const cmds[] = {"list", "list --misses", "show",
                                     "safelist export --arch sm_90", "verify"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    ck_assert_int_eq(tune(out, sizeof out, "%s --cache '%s'", cmds[i], through), 4);
    ck_assert_msg(strstr(out, "Not a directory"), "%s: %s", cmds[i], out);
    ck_assert_int_eq(tune(out, sizeof out, "%s --cache '%s'", cmds[i], loop), 4);
    ck_assert_msg(strstr(out, "Too many levels of symbolic links"), "%s: %s", cmds[i], out);
  }
  ck_assert(!strstr(out, "no cache at"));
  /* Permissions: the test runs the command unprivileged (root would pass). */
  snprintf(locked, sizeof locked, "%s/locked", dir);
  ck_assert_int_eq(mkdir(locked, 0700), 0);
  snprintf(inside, sizeof inside, "%s/tune.db", locked);
  ck_assert_int_eq(rename(db, inside), 0);
  ck_assert_int_eq(chmod(dir, 0755), 0);
  ck_assert_int_eq(chmod(locked, 0), 0);
  const int rc = shell_unprivileged(out, sizeof out, "'%s' list --cache '%s'", SCREE_TUNE_BIN,
                                    inside);
  ck_assert_int_eq(chmod(locked, 0700), 0);
  ck_assert_int_eq(rc, 4);
  ck_assert_msg(strstr(out, "Permission denied"), "%s", out);
  /* A --cache path longer than a path may be is refused, never cut. */
  static char longp[5600];
  snprintf(longp, sizeof longp, "%s/%05000d", dir, 0);
  ck_assert_int_eq(shell(out, sizeof out, "'%s' clear --all --cache '%s' 2>&1", SCREE_TUNE_BIN,
                         longp), 2);
  ck_assert_msg(strstr(out, "--cache: the path is"), "%s", out);
}
END_TEST

/* import refuses a source that others could change, and says how to
 * accept it; the flag or the environment variable does. */
/* A cache name is the file it names: never a URI, and never a directory or
 * a foreign file to move aside. */
START_TEST(cache_names_are_files_and_foreign_files_stay) {
  char sub[400], notes[500];
  snprintf(sub, sizeof sub, "%s/names", dir);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  ck_assert_int_eq(tune(out, sizeof out, "export '%s/out.db' --cache '%s'", sub, db), 0);
  /* "file:out.db" is not out.db: export writes a new file of that name. */
  ck_assert_int_eq(shell(out, sizeof out, "cd '%s' && '%s' export file:out.db --cache '%s' 2>&1",
                         sub, SCREE_TUNE_BIN, db), 0);
  ck_assert_int_eq(shell(out, sizeof out, "cd '%s' && '%s' merge 'file:x.db?mode=memory'"
                         " --cache file:out.db 2>&1", sub, SCREE_TUNE_BIN), 4);
  ck_assert_msg(strstr(out, "file:x.db?mode=memory"), "%s", out);
  snprintf(notes, sizeof notes, "%s/file:out.db", sub);
  ck_assert_int_eq(access(notes, F_OK), 0);
  /* A directory and a text file given as --cache: an error, nothing moved. */
  ck_assert_int_eq(tune(out, sizeof out, "clear --op softmax --cache '%s'", sub), 4);
  ck_assert_msg(strstr(out, "is a directory"), "%s", out);
  snprintf(notes, sizeof notes, "%s/notes.txt", sub);
  FILE *f = fopen(notes, "w");
  ck_assert_ptr_nonnull(f);
  fputs("not a cache\n", f);
  fclose(f);
  ck_assert_int_eq(tune(out, sizeof out, "clear --op softmax --cache '%s'", notes), 4);
  ck_assert_msg(strstr(out, "not a damaged scree cache"), "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "ls '%s' | grep -c corrupt", sub), 1);
  ck_assert_str_eq(out, "0\n");
  ck_assert_int_eq(shell(out, sizeof out, "ls -d '%s'.corrupt-* 2>/dev/null | wc -l", sub), 0);
  ck_assert_str_eq(out, "0\n");
  ck_assert_int_eq(shell(out, sizeof out, "cat '%s'", notes), 0);
  ck_assert_str_eq(out, "not a cache\n");
}
END_TEST

START_TEST(import_refuses_loose_permissions) {
  char src[400], saved[400];
  snprintf(src, sizeof src, "%s/src.db", dir);
  snprintf(saved, sizeof saved, "%s", db);
  snprintf(db, sizeof db, "%s", src);
  put("sm_90", "rows<=8,cols=4096", "tpr=128,rows=1,vec=8,cache=4", 5.0, F16);
  snprintf(db, sizeof db, "%s", saved);
  ck_assert_int_eq(chmod(src, 0666), 0);
  ck_assert_int_eq(tune(out, sizeof out, "import '%s' --cache '%s'", src, db), 4);
  ck_assert_msg(strstr(out, "refusing ") && strstr(out, "writable by every user (mode 0666)") &&
                    strstr(out, "pass --no-strict-modes"),
                "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", db), 0);
  ck_assert(strstr(out, "4 winner(s)"));
  ck_assert_int_eq(chmod(src, 0644), 0);
  ck_assert_int_eq(chmod(dir, 0777), 0); /* the directory counts too */
  ck_assert_int_eq(tune(out, sizeof out, "merge '%s' --cache '%s'", src, db), 4);
  ck_assert_msg(strstr(out, "directory ") && strstr(out, "writable by every user"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "import --no-strict-modes '%s' --cache '%s'", src, db),
                   0);
  ck_assert_msg(strstr(out, "1 added"), "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_CACHE_STRICT_MODES=0 '%s' import '%s' --cache"
                         " '%s' 2>&1", SCREE_TUNE_BIN, src, db), 0);
  ck_assert_int_eq(chmod(dir, 0700), 0);
  ck_assert_int_eq(tune(out, sizeof out, "import '%s' --cache '%s'", src, db), 0);
}
END_TEST

/* A relative HOME does not put the cache under the working directory. */
START_TEST(relative_home_is_not_used) {
  ck_assert_int_eq(shell(out, sizeof out, "cd '%s' && env -u SCREE_CACHE_DIR -u XDG_CACHE_HOME"
                         " HOME=rel '%s' list 2>&1", dir, SCREE_TUNE_BIN), 0);
  ck_assert_msg(!strstr(out, "rel/.cache"), "%s", out);
  char rel[400];
  snprintf(rel, sizeof rel, "%s/rel", dir);
  ck_assert_int_ne(access(rel, F_OK), 0);
  /* A relative SCREE_CACHE_DIR is refused, and the message says why. */
  ck_assert_int_eq(shell(out, sizeof out, "cd '%s' && SCREE_CACHE_DIR=rel '%s' list 2>&1", dir,
                         SCREE_TUNE_BIN),
                   4);
  ck_assert_msg(strstr(out, "SCREE_CACHE_DIR='rel' is not an absolute path"), "%s", out);
  ck_assert_int_ne(access(rel, F_OK), 0);
}
END_TEST

/* A WAL-mode cache in a directory the reader cannot write is still read
 * (SQLite cannot create its -shm there). */
START_TEST(wal_cache_in_a_read_only_directory) {
  char ro[400], path[420];
  snprintf(ro, sizeof ro, "%s/ro", dir);
  ck_assert_int_eq(mkdir(ro, 0755), 0);
  snprintf(path, sizeof path, "%s/tune.db", ro);
  ck_assert_int_eq(rename(db, path), 0);
  ck_assert_int_eq(chmod(dir, 0755), 0);
  ck_assert_int_eq(chmod(ro, 0555), 0);
  ck_assert_int_eq(chmod(path, 0644), 0);
  int rc = shell_unprivileged(out, sizeof out, "'%s' list --cache '%s'", SCREE_TUNE_BIN, path);
  ck_assert_msg(rc == 0 && strstr(out, "4 winner(s)"), "%d: %s", rc, out);
  rc = shell_unprivileged(out, sizeof out, "'%s' show --cache '%s' --arch sm_80", SCREE_TUNE_BIN,
                          path);
  ck_assert_msg(rc == 0 && strstr(out, "(matches)"), "%d: %s", rc, out);
  ck_assert_int_eq(chmod(ro, 0755), 0);
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

/* Rows that fail their checks are skipped and counted by every reading
 * command alike: list never shows a row that show cannot find. */
START_TEST(rows_that_fail_their_checks) {
  char long_bucket[200];
  snprintf(long_bucket, sizeof long_bucket, "bucket || '%0100d'", 0);
  copy_row(db, "rows<=1024,cols=4096", NULL, long_bucket, NULL, NULL);
  copy_row(db, "rows<=1024,cols=4096", NULL, "'rows<=2,cols=4096'", "'yes'", NULL);
  copy_row(db, "rows<=1024,cols=4096", NULL, "'rows<=4,cols=4096'", NULL, "'fast'");
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", db), 0);
  ck_assert_msg(strstr(out, "4 winner(s)"), "%s", out);
  ck_assert_msg(strstr(out, "warning: skipped 3 row(s)"), "%s", out);
  ck_assert_msg(strstr(out, "bucket is 120 bytes, longer than 95"), "%s", out);
  ck_assert(!strstr(out, "rows<=2,cols=4096"));
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --json", db), 0);
  ck_assert_msg(strstr(out, "\"skipped\": 3"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s'", db), 0);
  ck_assert_int_eq(count_of(out, "  config "), 4);
  ck_assert_msg(strstr(out, "warning: skipped 3 row(s)"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --bucket 'rows<=2,cols=4096'", db),
                   1);
  ck_assert(strstr(out, "no matching entry"));
  /* A good import of a refused key replaces the row (it was 'fast'). */
  char other[400], saved[400];
  snprintf(other, sizeof other, "%s/other.db", dir);
  snprintf(saved, sizeof saved, "%s", db);
  snprintf(db, sizeof db, "%s", other);
  put("sm_90", "rows<=4,cols=4096", "tpr=64,rows=2,vec=8,cache=8", 99.0, F16);
  snprintf(db, sizeof db, "%s", saved);
  ck_assert_int_eq(tune(out, sizeof out, "merge '%s' --cache '%s'", other, db), 0);
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --bucket 'rows<=4,cols=4096'", db),
                   0);
  ck_assert_msg(strstr(out, "99.000 us median"), "%s", out);
}
END_TEST

/* import refuses rows it cannot check, never cuts two long keys into one,
 * and says what it left out, hash mismatches included; export too. */
START_TEST(import_and_export_report_skipped_rows) {
  char src[400], saved[400], shipped[400];
  snprintf(src, sizeof src, "%s/src.db", dir);
  snprintf(saved, sizeof saved, "%s", db);
  snprintf(db, sizeof db, "%s", src);
  put("sm_90", "rows<=8,cols=4096", "tpr=128,rows=1,vec=8,cache=4", 5.0, F16);
  put("sm_90", "rows<=16,cols=4096", "tpr=128,rows=1,vec=8,cache=4", 5.0, F16);
  put("sm_90", "rows<=32,cols=4096", "tpr=128,rows=1,vec=8,cache=4", 5.0, F16);
  snprintf(db, sizeof db, "%s", saved);
  /* Two buckets that differ past the 95th byte, and a damaged cubin. */
  sql(src, "UPDATE winners SET bucket = 'rows<=8,cols=4096' || printf('%0100d', rowid)"
           " WHERE bucket != 'rows<=32,cols=4096';"
           "UPDATE winners SET cubin = CAST('\177ELF synthetic cubiN' || X'00' AS BLOB)"
           " WHERE bucket = 'rows<=32,cols=4096'");
  ck_assert_int_eq(tune(out, sizeof out, "import '%s' --cache '%s'", src, db), 0);
  ck_assert_msg(strstr(out, ": 0 added, 0 replaced by faster entries, 0 conflict(s), 3 skipped"),
                "%s", out);
  ck_assert_msg(strstr(out, "warning: skipped 3 row(s)") &&
                    strstr(out, "1 winner(s) whose cubin failed its hash check") &&
                    strstr(out, "2 row(s) that failed their checks"),
                "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "import '%s' --cache '%s' --json --quiet", src, db), 0);
  ck_assert_msg(strstr(out, "\"skipped\": 3}"), "%s", out);
  ck_assert_msg(strstr(out, "warning: skipped 3 row(s)"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", db), 0);
  ck_assert_msg(strstr(out, "4 winner(s)"), "%s", out);
  /* export from the damaged file says what it left out. */
  snprintf(shipped, sizeof shipped, "%s/shipped.db", dir);
  ck_assert_int_eq(tune(out, sizeof out, "export '%s' --cache '%s' --quiet", shipped, src), 0);
  ck_assert_msg(strstr(out, "warning: skipped 3 row(s)"), "%s", out);
}
END_TEST

/* 1 if out holds a byte that could drive a terminal (a control other than
 * newline, DEL, a C1 byte or a stray UTF-8 byte). */
static int has_raw_control(const char *text) {
  for (const unsigned char *p = (const unsigned char *)text; *p; p++)
    if ((*p < 0x20 && *p != '\n') || *p == 0x7f || *p >= 0x80) return 1;
  return 0;
}

/* Text from a cache reaches the terminal escaped, and JSON stays JSON: no
 * raw controls, no inf or nan. */
START_TEST(text_from_a_cache_is_escaped) {
  /* ANSI colour and an OSC 52 clipboard write in device names, a newline
   * and a raw C1 CSI byte in a reason. */
  sql(db, "UPDATE winners SET device_name = 'GPU' || char(27) || '[2J' || char(27) ||"
          " ']52;c;ZWNobyBwd25lZA==' || char(7) WHERE bucket = 'rows<=1024,cols=4096';"
          "UPDATE bad_configs SET reason = 'load: x' || char(10) || 'fake line' ||"
          " CAST(X'9b' AS TEXT) || '31m' WHERE config = 'tpr=1024,rows=1,vec=8,cache=8';"
          "UPDATE misses SET example = 'rows=5' || char(27) || '[1m';"
          "UPDATE winners SET spread_us = 9e999 WHERE bucket = 'rows<=64,cols=100'");
  static const char *const cmds[] = {"list", "list --bad", "list --misses", "show",
                                     "list --json", "list --bad --json", "list --misses --json",
                                     "show --json"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    ck_assert_int_eq(tune(out, sizeof out, "%s --cache '%s'", cmds[i], db), 0);
    ck_assert_msg(!has_raw_control(out), "%s: %s", cmds[i], out);
    ck_assert_msg(!strstr(out, "\": inf") && !strstr(out, "\": -inf") &&
                      !strstr(out, "\": nan") && !strstr(out, "\": -nan"),
                  "%s: %s", cmds[i], out);
  }
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s'", db), 0);
  ck_assert_msg(strstr(out, "GPU\\x1b[2J\\x1b]52;c;"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list --bad --cache '%s'", db), 0);
  ck_assert_msg(strstr(out, "load: x\\x0afake line\\x9b31m"), "%s", out);
  ck_assert(!strstr(out, "\nfake line"));
  ck_assert_int_eq(tune(out, sizeof out, "list --json --cache '%s'", db), 0);
  ck_assert_msg(strstr(out, "\"device\": \"GPU\\u001b[2J\\u001b]52;c;ZWNobyBwd25lZA==\\u0007\""),
                "%s", out);
  ck_assert_msg(strstr(out, "\"skipped\": 1"), "%s", out); /* the infinite spread */
  ck_assert_int_eq(tune(out, sizeof out, "list --bad --json --cache '%s'", db), 0);
  ck_assert_msg(strstr(out, "\\u000afake line\\ufffd31m"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list --misses --json --cache '%s'", db), 0);
  ck_assert_msg(strstr(out, "\"example\": \"rows=5\\u001b[1m\""), "%s", out);

  /* A merge conflict line names the other machine's device, escaped. */
  char other[400], saved[400];
  snprintf(other, sizeof other, "%s/other.db", dir);
  snprintf(saved, sizeof saved, "%s", db);
  snprintf(db, sizeof db, "%s", other);
  put("sm_90", "rows<=16384,cols=4096", "tpr=64,rows=2,vec=8,cache=8", 60.0, F16);
  snprintf(db, sizeof db, "%s", saved);
  sql(other, "UPDATE winners SET device_name = 'evil' || char(27) || ']0;owned' || char(7)");
  ck_assert_int_eq(tune(out, sizeof out, "merge '%s' --cache '%s'", other, db), 0);
  ck_assert_msg(
      strstr(out, "theirs tpr=64,rows=2,vec=8,cache=8 (60.00 us, evil\\x1b]0;owned\\x07)"),
      "%s", out);
  ck_assert(!has_raw_control(out));
}
END_TEST

/* Lost output is an error: a command whose standard output cannot be
 * written (a full disk, /dev/full) exits 1 with a message. */
START_TEST(stdout_write_errors_are_errors) {
  ck_assert_int_eq(shell(out, sizeof out, "'%s' list --cache '%s' 2>&1 >/dev/full",
                         SCREE_TUNE_BIN, db), 1);
  ck_assert_msg(strstr(out, "error writing to standard output: No space left on device"), "%s",
                out);
  ck_assert_int_eq(shell(out, sizeof out, "'%s' list --json --cache '%s' 2>&1 >/dev/full",
                         SCREE_TUNE_BIN, db), 1);
  ck_assert_int_eq(shell(out, sizeof out, "'%s' --help 2>&1 >/dev/full", SCREE_TUNE_BIN), 1);
  ck_assert_int_eq(shell(out, sizeof out, "'%s' list --cache '%s' 2>&1 >/dev/null",
                         SCREE_TUNE_BIN, db), 0);
}
END_TEST

/* safelist export -o never leaves a truncated file behind, and a write
 * that fails (a full disk, /dev/full) exits 1 with the reason. */
START_TEST(safelist_export_write_errors) {
  ck_assert_int_eq(tune(out, sizeof out, "safelist export --arch sm_90 --cache '%s' -o /dev/full",
                        db), 1);
  ck_assert_msg(strstr(out, "writing /dev/full: No space left on device"), "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "'%s' safelist export --arch sm_90 --cache '%s' 2>&1"
                         " >/dev/full", SCREE_TUNE_BIN, db), 1);
  ck_assert_msg(strstr(out, "standard output: No space left on device"), "%s", out);

  /* A file that cannot grow (here: a file size limit, as a full disk would)
   * is left as it was, and no temporary file stays behind. */
  char path[400], tmpglob[500];
  snprintf(path, sizeof path, "%s/sm_90.txt", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("arch sm_90\n# keep me\n", f);
  fclose(f);
  ck_assert_int_eq(chmod(path, 0640), 0);
  char shipped[400]; /* rollback mode: read without writing a -shm file */
  snprintf(shipped, sizeof shipped, "%s/shipped.db", dir);
  ck_assert_int_eq(tune(out, sizeof out, "export '%s' --cache '%s'", shipped, db), 0);
  ck_assert_int_eq(shell(out, sizeof out, "trap '' XFSZ; ulimit -f 0; '%s' safelist export"
                         " --arch sm_90 --cache '%s' -o '%s' 2>&1", SCREE_TUNE_BIN, shipped,
                         path), 1);
  ck_assert_msg(strstr(out, "(left as it was)"), "%s", out);
  f = fopen(path, "r");
  char back[64] = "";
  ck_assert_uint_eq(fread(back, 1, sizeof back - 1, f), 21);
  fclose(f);
  ck_assert_str_eq(back, "arch sm_90\n# keep me\n");
  snprintf(tmpglob, sizeof tmpglob, "ls -a '%s' | grep -c '^\\.sm_90.txt\\.'", dir);
  ck_assert_int_eq(shell(out, sizeof out, "%s", tmpglob), 1); /* grep found none */
  /* Written for real, the file keeps its mode. */
  ck_assert_int_eq(tune(out, sizeof out, "safelist export --arch sm_90 --cache '%s' -o '%s'",
                        db, path), 0);
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 07777, 0640);
  ck_assert_int_gt(sb.st_size, 1000);
}
END_TEST

/* What safelist export writes always loads: learned lines whose config
 * fails the op's check are left out (and said), text from the cache is
 * escaped, and a safelist directory that is not there is an error. */
START_TEST(safelist_export_writes_only_what_loads) {
  put("sm_90", "rows<=2,cols=64", "tpr=16,rows=1,vec=8,cache=4", 1.0, F16);
  put("sm_90", "rows<=4,cols=64", "tpr=64,rows=1,vec=2,cache=4", 1.0, F16);
  sql(db, "UPDATE winners SET device_name = 'GPU' || char(27) || ']0;pwn' || char(7)"
          " WHERE bucket = 'rows<=4,cols=64';"
          "UPDATE bad_configs SET reason = 'load: a' || char(10) || 'b' || char(27) || '[1m'"
          " WHERE config = 'tpr=1024,rows=1,vec=8,cache=8'");
  char path[400];
  snprintf(path, sizeof path, "%s/sm_90.txt", dir);
  ck_assert_int_eq(tune(out, sizeof out, "safelist export --arch sm_90 --cache '%s' -o '%s'",
                        db, path), 0);
  ck_assert_msg(strstr(out, "left out 1 learned line(s) whose config fails the op's check"),
                "%s", out);
  scree__safelist sl;
  char why[512];
  ck_assert_msg(scree__safelist_load_file(path, &sl, why, sizeof why) == SCREE_OK, "%s", why);
  scree__safelist_free(&sl);
  FILE *f = fopen(path, "r");
  static char text[1 << 16];
  const size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  ck_assert(!has_raw_control(text));
  ck_assert_msg(strstr(text, "on GPU\\x1b]0;pwn\\x07"), "%s", text);
  ck_assert_msg(strstr(text, "learned: load: a b\\x1b[1m"), "%s", text);
  ck_assert(!strstr(text, "tpr=16,rows=1,vec=8,cache=4"));

  ck_assert_int_eq(shell(out, sizeof out, "SCREE_SAFELIST_DIR='%s/nowhere' '%s' safelist export"
                         " --arch sm_90 --cache '%s' 2>&1", dir, SCREE_TUNE_BIN, db), 1);
  ck_assert_msg(strstr(out, "/nowhere: No such file or directory"), "%s", out);
  ck_assert(!strstr(out, "arch sm_90"));
}
END_TEST

/* A cache too large to read is an error that says why, not a silent 4. */
START_TEST(too_many_rows_is_an_error_with_a_reason) {
  sql(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i <= 100000)"
          " INSERT INTO misses SELECT 'rmsnorm', 'rows<=' || i, 'x=fp16', 0, 'sm_90', '', 1,"
          " 1, 1 FROM n");
  ck_assert_int_eq(tune(out, sizeof out, "list --misses --cache '%s'", db), 4);
  ck_assert_msg(strstr(out, "more than 100000 rows in misses"), "%s", out);
}
END_TEST

/* 1 if text is one JSON value (SQLite's json_valid, as shapes.c reads JSON). */
static int json_ok(const char *text) {
  sqlite3 *h = NULL;
  sqlite3_stmt *st = NULL;
  int ok = 0;
  if (sqlite3_open(":memory:", &h) == SQLITE_OK &&
      sqlite3_prepare_v2(h, "SELECT json_valid(?1)", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    ok = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(h);
  return ok;
}

/* Every command takes --opt=value as --opt value, and an option it does
 * not take is an error that names it, never ignored. */
START_TEST(options_parse_alike_and_unknown_ones_are_errors) {
  ck_assert_int_eq(tune(out, sizeof out, "list --cache='%s' --arch=sm_80", db), 0);
  ck_assert_msg(strstr(out, "1 winner(s)"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --bucket='rows<=1024,cols=4096'", db),
                   0);
  ck_assert(strstr(out, "10.250 us median"));
  ck_assert_int_eq(tune(out, sizeof out, "list --arch sm_80 --cache='%s' -q", db), 0);
  ck_assert(!strstr(out, "winner(s)"));
  /* An option of another command. */
  ck_assert_int_eq(tune(out, sizeof out, "merge '%s' --arch sm_90 --cache '%s'", db, db), 2);
  ck_assert_msg(strstr(out, "scree-tune merge: --arch is not an option of merge"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "export '%s/x.db' --misses --cache '%s'", dir, db), 2);
  ck_assert_msg(strstr(out, "--misses is not an option of export"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "info --cache x"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "demo --quiet"), 2);
  /* Unknown, ambiguous, a value where none is taken, none where one is. */
  ck_assert_int_eq(tune(out, sizeof out, "list --bogus --cache '%s'", db), 2);
  ck_assert_msg(strstr(out, "unknown option --bogus"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dev 0 --model gpt2"), 2);
  ck_assert_msg(strstr(out, "--dev is ambiguous: --devices --device"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list --json=yes --cache '%s'", db), 2);
  ck_assert_msg(strstr(out, "--json takes no value"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache"), 2);
  ck_assert_msg(strstr(out, "--cache needs a value"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list --arch= --cache '%s'", db), 2);
  ck_assert_msg(strstr(out, "--arch needs a non-empty value"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list extra --cache '%s'", db), 2);
  ck_assert_msg(strstr(out, "unexpected argument 'extra'"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "worker --device=x"), 2);
  ck_assert_msg(strstr(out, "--device x: expected an integer from 0 to 1024"), "%s", out);
  /* Options that a variant of a command does not use are refused too. */
  ck_assert_int_eq(tune(out, sizeof out, "verify --shipped --retime"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --from-shipped --explore"), 2);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model gpt2 --arch sm_90"), 2);
  ck_assert_msg(strstr(out, "--arch goes with --from-shipped"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --op rmsnorm --shape rows=1,cols=64 --presets x"),
                   2);
}
END_TEST

/* --dry-run --from-misses --arch A,B: each arch's list as prewarm --devices
 * on GPUs of those archs reads it: the buckets given, then that arch's
 * misses only (the sm_90 miss of setup, and two sm_80 misses added here,
 * one of the same bucket). */
START_TEST(dry_run_misses_per_arch) {
  scree__cache *c;
  ck_assert_int_eq(scree__cache_open(db, 0, &c, NULL, NULL, 0), SCREE_OK);
  scree__ckey k;
  memset(&k, 0, sizeof k);
  snprintf(k.op, sizeof k.op, "rmsnorm");
  snprintf(k.dtype, sizeof k.dtype, "%s", F16);
  snprintf(k.arch, sizeof k.arch, "sm_80");
  snprintf(k.src_hash, sizeof k.src_hash, "%s", scree__source_hash(scree__op_find("rmsnorm")));
  snprintf(k.bucket, sizeof k.bucket, "rows<=64,cols=1024");
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=50,cols=1024"), SCREE_OK);
  snprintf(k.bucket, sizeof k.bucket, "rows<=8,cols=512");
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=6,cols=512"), SCREE_OK);
  scree__cache_close(c);

  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --from-misses --cache '%s' "
                        "--arch sm_80,sm_90 --op rmsnorm --shape rows=100,cols=256",
                        db),
                   0);
  ck_assert_msg(strstr(out, "sm_80 rmsnorm rows<=64,cols=1024 x=fp16,w=fp16,y=fp16 "
                            "rows=50,cols=1024\n"),
                "%s", out);
  ck_assert_msg(strstr(out, "sm_80 rmsnorm rows<=8,cols=512 x=fp16,w=fp16,y=fp16"), "%s", out);
  ck_assert_msg(strstr(out, "sm_90 rmsnorm rows<=8,cols=512 x=fp16,w=fp16,y=fp16"), "%s", out);
  ck_assert_msg(!strstr(out, "sm_90 rmsnorm rows<=64,cols=1024"), "%s", out);
  /* the bucket given is for every arch */
  ck_assert_msg(strstr(out, "sm_80 rmsnorm rows<=128,cols=256 x=bf16,w=bf16,y=bf16"), "%s", out);
  ck_assert_msg(strstr(out, "sm_90 rmsnorm rows<=128,cols=256 x=bf16,w=bf16,y=bf16"), "%s", out);
  ck_assert_msg(strstr(out, "dry run: sm_80: 3 bucket(s)"), "%s", out);
  ck_assert_msg(strstr(out, "dry run: sm_90: 2 bucket(s)"), "%s", out);
  /* One arch: the list as before, no arch on its lines. */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --from-misses --cache '%s' "
                        "--arch sm_80", db),
                   0);
  ck_assert_msg(!strncmp(out, "rmsnorm rows<=64,cols=1024 ", 27), "%s", out);
  ck_assert_msg(strstr(out, "dry run: 2 bucket(s)"), "%s", out);
  /* JSON: each bucket with its arch. */
  ck_assert_int_eq(shell(out, sizeof out, "'%s' prewarm --dry-run --json --from-misses "
                         "--cache '%s' --arch sm_90,sm_80 2>/dev/null",
                         SCREE_TUNE_BIN, db),
                   0);
  ck_assert_msg(json_ok(out), "%s", out);
  ck_assert_msg(strstr(out, "{\"arch\": \"sm_90\", \"op\": \"rmsnorm\", \"bucket\": "
                            "\"rows<=8,cols=512\""),
                "%s", out);
  ck_assert_msg(strstr(out, "{\"arch\": \"sm_80\", \"op\": \"rmsnorm\", \"bucket\": "
                            "\"rows<=64,cols=1024\""),
                "%s", out);
  ck_assert_msg(strstr(out, "\"count\": 3, \"total\": 3"), "%s", out);
  /* A shard of each arch's list. */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --from-misses --cache '%s' "
                        "--arch sm_80,sm_90 --shard 0/2", db),
                   0);
  ck_assert_msg(strstr(out, "dry run: sm_80: shard 0/2 (--shard): 1 of 2 bucket(s)"), "%s", out);
  ck_assert_msg(strstr(out, "dry run: sm_90: shard 0/2 (--shard): 1 of 1 bucket(s)"), "%s", out);
  /* Bad lists name themselves; a list without --from-misses is refused. */
  static const char *const bad[] = {"sm_80,,sm_90", "sm_80,", ",sm_80", "sm_80,sm_80",
                                    "sm_80,sm_90_and_a_very_long_name"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --from-misses --cache '%s' "
                          "--arch '%s'", db, bad[i]),
                     2);
    ck_assert_msg(strstr(out, "--arch "), "%s: %s", bad[i], out);
    ck_assert_msg(!strstr(out, "rmsnorm rows"), "%s: %s", bad[i], out);
  }
  ck_assert_msg(strstr(out, "give one architecture, or several"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --from-misses --cache '%s' "
                        "--arch sm_80,sm_80", db),
                   2);
  ck_assert_msg(strstr(out, "sm_80 is named twice"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model gpt2 --dry-run --arch sm_80,sm_90"),
                   2);
  ck_assert_msg(strstr(out, "--arch goes with --from-shipped"), "%s", out);
}
END_TEST

/* --dtype names the dtype it does not know. */
START_TEST(dtype_errors_name_the_dtype) {
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model gpt2 --dtype bf16,fp8 --dry-run"), 2);
  ck_assert_msg(strstr(out, "--dtype bf16,fp8: unknown dtype fp8 (fp32, fp16 or bf16)"), "%s",
                out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model gpt2 --dtype=bf16,bf16 --dry-run"), 2);
  ck_assert_msg(strstr(out, "bf16 is given twice"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model gpt2 --dtype fp16,bf16 --dry-run -q"),
                   0);
}
END_TEST

#define ATTN "batch=4,total_q=256,total_k=256,max_seqlen_q=64,max_seqlen_k=64,heads_q=8,heads_kv=8"

/* A dry run checks a shape as the op would check the call: an attention
 * head size the op does not serve, fields left out (they were read as 0),
 * and a shape whose call has another variant than the one to tune. */
START_TEST(dry_run_checks_shapes_as_the_op_does) {
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --op attention --shape " ATTN
                        ",head_dim=48,window_left=-1,window_right=-1"),
                   2);
  ck_assert_msg(strstr(out, "head_dim=48 is not supported (32, 64, 96, 128 or 256)"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --op attention --shape batch=4,"
                                         "total_q=256,heads_q=8"),
                   2);
  ck_assert_msg(strstr(out, "missing total_k, max_seqlen_q, max_seqlen_k, heads_kv, head_dim, "
                            "window_left, window_right"),
                "%s", out);
  /* window_left=0 is a window (of the diagonal): not the variant window=0. */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --op attention --shape " ATTN
                        ",head_dim=64,window_left=0,window_right=0"),
                   2);
  ck_assert_msg(strstr(out, "has the variant dtype=bf16,head_dim=64,causal=0,window=1, not "
                            "dtype=bf16,head_dim=64,causal=0,window=0"),
                "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --op attention --shape " ATTN
                        ",head_dim=64,window_left=0,window_right=0 --variant "
                        "dtype=fp16,head_dim=64,causal=1,window=1 -q"),
                   0);
  ck_assert_msg(strstr(out, "attention group=1,heads_kv=8,max_q<=64,max_k<=64,total_q<=256 "
                            "dtype=fp16,head_dim=64,causal=1,window=1 "),
                "%s", out);
  /* GQA: query heads a multiple of the KV heads. */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --op attention --shape batch=4,"
                        "total_q=256,total_k=256,max_seqlen_q=64,max_seqlen_k=64,heads_q=8,"
                        "heads_kv=3,head_dim=64,window_left=-1,window_right=-1"),
                   2);
  /* The same checks hold without --dry-run, before any GPU is looked for. */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --op attention --shape " ATTN
                        ",head_dim=48,window_left=-1,window_right=-1"),
                   2);
  /* JSON: the buckets and the count. */
  ck_assert_int_eq(shell(out, sizeof out, "'%s' prewarm --dry-run --json --op=rmsnorm "
                         "--shape=rows=4,cols=64 --shape rows=3,cols=64 2>/dev/null",
                         SCREE_TUNE_BIN),
                   0);
  ck_assert_msg(json_ok(out), "%s", out);
  ck_assert_msg(strstr(out, "{\"op\": \"rmsnorm\", \"bucket\": \"rows<=4,cols=64\", \"variant\": "
                            "\"x=bf16,w=bf16,y=bf16\", \"shape\": \"rows=4,cols=64\""),
                "%s", out);
  ck_assert_msg(strstr(out, "\"count\": 1, \"total\": 1, \"shard\": null"), "%s", out);
}
END_TEST

/* A shapes file is JSON: a nested "shapes" key does not count, and a
 * malformed file names its line. */
START_TEST(prewarm_shapes_file_is_json) {
  char path[400];
  snprintf(path, sizeof path, "%s/s.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"about\": {\"shapes\": [[1, 1]]},\n \"shapes\": [[16, 4096]]}\n", f);
  fclose(f);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --shapes '%s' --dry-run -q", path), 0);
  ck_assert_str_eq(out, "rmsnorm rows<=16,cols=4096 x=bf16,w=bf16,y=bf16 rows=16,cols=4096\n");
  f = fopen(path, "w");
  fputs("{\n \"shapes\": [\n  [16, 4096],\n ]\n}\n", f);
  fclose(f);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --shapes '%s' --dry-run", path), 2);
  ck_assert_msg(strstr(out, "line 3, column 13: a comma before ] (JSON has no trailing commas)"),
                "%s", out);
}
END_TEST

/* Every command that prints a result prints it as JSON with --json. */
START_TEST(json_everywhere) {
  static const char *const cmds[] = {
      "info --json", "doctor --json --cache '%s'", "list --json --cache '%s'",
      "list --misses --json --cache '%s'", "list --bad --json --cache '%s'",
      "show --json --cache '%s'", "verify --shipped --json", "prewarm --dry-run --json --model gpt2",
      "export '%s.out' --json --cache '%s'", "merge '%s' --json --cache '%s'",
      "clear --arch sm_80 --json --cache '%s'"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    char args[1200];
    snprintf(args, sizeof args, cmds[i], db, db);
    const int rc = shell(out, sizeof out, "'%s' %s 2>/dev/null", SCREE_TUNE_BIN, args);
    ck_assert_msg(rc == 0 || (rc == 3 && !strncmp(args, "info", 4)), "%s: exit %d", args, rc);
    ck_assert_msg(json_ok(out), "%s: not JSON: %s", args, out);
  }
  ck_assert_int_eq(shell(out, sizeof out, "'%s' clear --all --json --cache '%s'", SCREE_TUNE_BIN,
                         db),
                   0);
  ck_assert_msg(strstr(out, "\"deleted\": 3}"), "%s", out);
  /* --text - is the text on stdout: not with --json. */
  ck_assert_int_eq(tune(out, sizeof out, "export --text - --json --cache '%s'", db), 2);
  /* A command that fails before its document prints an error object (show
   * and verify printed nothing, or a document that hid the failure). */
  static const struct {
    const char *args;
    int rc;
    const char *message;
  } failing[] = {
      {"show --json --cache '%s/none.db'", 1, "no cache at "},
      {"export '%s/x.db' --json --cache '%s/none.db'", 4, "no cache at "},
      {"list --bogus --json --cache '%s'", 2, "unknown option --bogus"},
      {"verify --json --shipped --retime", 2, "not with --retime"},
      {"prewarm --json --op rmsnorm --shape rows=-1,cols=64 --dry-run", 2, "rows=-1"},
  };
  for (size_t i = 0; i < sizeof failing / sizeof failing[0]; i++) {
    char args[1200];
    snprintf(args, sizeof args, failing[i].args, dir, dir);
    const int rc = shell(out, sizeof out, "'%s' %s 2>/dev/null", SCREE_TUNE_BIN, args);
    ck_assert_msg(rc == failing[i].rc, "%s: exit %d", args, rc);
    ck_assert_msg(json_ok(out) && !strncmp(out, "{\"error\": {\"command\": ", 22) &&
                      strstr(out, failing[i].message),
                  "%s: %s", args, out);
  }
}
END_TEST

/* --quiet still says why a command failed (show and export failed
 * silently without a cache). */
START_TEST(quiet_still_says_errors) {
  static const char *const cmds[] = {"show -q --cache '%s/none.db'",
                                     "export '%s/x.db' -q --cache '%s/none.db'",
                                     "export --text - -q --cache '%s/none.db'"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    char args[1200];
    snprintf(args, sizeof args, cmds[i], dir, dir);
    const int rc = shell(out, sizeof out, "'%s' %s 2>&1 >/dev/null", SCREE_TUNE_BIN, args);
    ck_assert_msg(rc != 0, "%s: exit 0", args);
    ck_assert_msg(strstr(out, "no cache at "), "%s: said \"%s\"", args, out);
  }
}
END_TEST

/* The list table's columns are as wide as their longest cell. */
START_TEST(list_columns_fit_their_cells) {
  copy_row(db, "rows<=1024,cols=4096", "'ragged_softmax'",
           "'batch=16,total<=16384,max_seqlen<=2048,cols=4096'", NULL, NULL);
  sql(db, "UPDATE winners SET device_name = 'NVIDIA H100 80GB HBM3 with a long name'"
          " WHERE op = 'ragged_softmax'");
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --arch sm_90", db), 0);
  /* Each row's arch and age columns start where their headings do. */
  const char *head = out;
  const int arch_col = (int)(strstr(head, " arch ") - head) + 1;
  const int config_col = (int)(strstr(head, " config ") - head) + 1;
  int rows = 0;
  for (const char *l = strchr(out, '\n') + 1; *l && strncmp(l, "4 winner", 8); rows++) {
    ck_assert_msg(!strncmp(l + arch_col, "sm_90 ", 6), "arch not at %d: %s", arch_col, out);
    ck_assert_msg(l[config_col] == 't' && l[config_col - 1] == ' ', "config not at %d: %s",
                  config_col, out);
    l = strchr(l, '\n') + 1;
  }
  ck_assert_int_eq(rows, 4);
  ck_assert_msg(strstr(out, "NVIDIA H100 80GB HBM3 with a long name"), "%s", out);
}
END_TEST

/* A row compiled from a shipped tuned config has no SM count, driver or
 * tuning time: show says so instead of "0 SMs, driver 0, tuned 6s ago". */
START_TEST(show_says_what_a_shipped_row_lacks) {
  sql(db, "UPDATE winners SET sm_count = 0, driver_version = 0, spread_us = 0"
          " WHERE bucket = 'rows<=1024,cols=4096'");
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --bucket 'rows<=1024,cols=4096'", db),
                   0);
  ck_assert_msg(strstr(out, "Synthetic GPU (tuned there; SM count and driver not recorded)"),
                "%s", out);
  ck_assert_msg(strstr(out, "tuned         from a shipped tuned config, when not recorded; "
                            "compiled here by scree"),
                "%s", out);
  ck_assert_msg(!strstr(out, "0 SMs") && !strstr(out, "driver 0") && !strstr(out, "interquartile"),
                "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "'%s' show --json --cache '%s' --bucket "
                         "'rows<=1024,cols=4096' 2>&1", SCREE_TUNE_BIN, db),
                   0);
  ck_assert_msg(strstr(out, "\"origin\": \"shipped\", \"sm_count\": null, \"driver_version\": "
                            "null"),
                "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' --arch sm_90", db), 0);
  ck_assert_msg(strstr(out, "Synthetic GPU shipped\n"), "%s", out);
  /* A tuned row keeps its facts; another NVRTC than this machine's is said. */
  sql(db, "UPDATE winners SET nvrtc_version = 12080 WHERE bucket = 'rows<=16384,cols=4096'");
  ck_assert_int_eq(tune(out, sizeof out, "show --cache '%s' --arch sm_90 --bucket "
                        "'rows<=16384,cols=4096'", db),
                   0);
  ck_assert_msg(strstr(out, "Synthetic GPU, 132 SMs, driver 13.0, cubin by NVRTC 12.8"), "%s",
                out);
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  if (ri.nvrtc_loaded && ri.nvrtc_major * 1000 + ri.nvrtc_minor * 10 != 12080)
    ck_assert_msg(strstr(out, "NVRTC 12.8 (this machine has "), "%s", out);
}
END_TEST

/* doctor: versions, NVRTC's file, the caches with their facts and trust,
 * the environment, and what it did not find; no GPU needed. */
START_TEST(doctor_reports_what_a_bug_report_needs) {
  char loose[400];
  snprintf(loose, sizeof loose, "%s/loose.db", dir);
  ck_assert_int_eq(shell(out, sizeof out, "cp '%s' '%s' && chmod 0666 '%s'", db, loose, loose),
                   0);
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_JOBS=3 SCREE_CACHE_PATH='%s:%s/none.db' '%s' "
                         "doctor --cache '%s' 2>&1", loose, dir, SCREE_TUNE_BIN, db),
                   0);
  ck_assert_msg(strstr(out, "kernel sources (sha256") && strstr(out, "  rmsnorm "), "%s", out);
  ck_assert_msg(strstr(out, "compile threads: 3 (SCREE_JOBS=3)"), "%s", out);
  ck_assert_msg(strstr(out, "4 winner(s), 0 of them stale (another kernel source), 1 miss(es), "
                            "3 bad config(s)"),
                "%s", out);
  ck_assert_msg(strstr(out, "mode 0644") || strstr(out, "mode 0600"), "%s", out);
  ck_assert_msg(strstr(out, "NOT TRUSTED, skipped: refusing ") &&
                    strstr(out, "writable by every user (mode 0666)"),
                "%s", out);
  ck_assert_msg(strstr(out, "SCREE_JOBS=3") && strstr(out, "SCREE_CACHE_PATH="), "%s", out);
  ck_assert_msg(strstr(out, "shipped tuned configs: "), "%s", out);
  ck_assert_msg(strstr(out, "not found:") && strstr(out, "none.db"), "%s", out);
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  if (ri.nvrtc_loaded) ck_assert_msg(strstr(out, "NVRTC: ") && strstr(out, "/libnvrtc"), "%s", out);
  if (!ri.device_count) ck_assert_msg(strstr(out, "GPUs: none"), "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_JOBS=x '%s' doctor --json --cache '%s' "
                         "2>/dev/null", SCREE_TUNE_BIN, db),
                   0);
  ck_assert_msg(json_ok(out), "%s", out);
  ck_assert_msg(strstr(out, "SCREE_JOBS=x ignored: not a number from 1 to 1024"), "%s", out);
  ck_assert_msg(strstr(out, "\"winners\": 4, \"stale\": 0, \"misses\": 1, \"bad\": 3"), "%s",
                out);
}
END_TEST

/* Writes text to dir/name; the path in a static buffer. */
static const char *write_file(const char *name, const char *text, size_t len) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(text, 1, len, f), len);
  fclose(f);
  return path;
}

/* ---- prewarm --hf-config ---------------------------------------------------- */

#define HF_DIR SCREE_SOURCE_DIR "/tests/cli/hf_configs/"

/* The buckets of a dry run (stdout alone) into buf; the exit code. */
static int dry_run(char *buf, size_t n, const char *what) {
  return shell(buf, n, "'%s' prewarm --dry-run -q --dtype fp16,bf16 %s 2>/dev/null",
               SCREE_TUNE_BIN, what);
}

/* A HuggingFace config gives the buckets of the preset of the same model:
 * Llama 3 8B (and a multimodal config whose text_config is it), Mistral 7B
 * (a sliding window does not change a shape) and Qwen2.5 7B (GQA, 28/4
 * heads). */
START_TEST(hf_config_equals_the_presets) {
  static char want[1 << 16], got[1 << 16];
  static const char *const pairs[][2] = {
      {"llama-3-8b", "llama-3-8b.json"},
      {"llama-3-8b", "llava-llama-3-8b.json"},
      {"mistral-7b", "mistral-7b.json"},
      {"qwen2.5-7b", "qwen2.5-7b.json"}};
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    char what[512];
    snprintf(what, sizeof what, "--model %s", pairs[k][0]);
    ck_assert_int_eq(dry_run(want, sizeof want, what), 0);
    ck_assert_int_eq(count_of(want, "\n"), 2 * (5 * 15 + 6)); /* 15 token counts, 6 attentions */
    snprintf(what, sizeof what, "--hf-config '" HF_DIR "%s'", pairs[k][1]);
    ck_assert_int_eq(dry_run(got, sizeof got, what), 0);
    ck_assert_msg(!strcmp(got, want), "%s:\n%s\nwant (--model %s):\n%s", pairs[k][1], got,
                  pairs[k][0], want);
  }
}
END_TEST

/* The shapes of other architectures, from their sizes: explicit head_dim
 * (Qwen3, Gemma's 256), no SwiGLU for a GELU MLP, LayerNorm and partial
 * rotary dimensions (phi's partial_rotary_factor, GPT-NeoX's rotary_pct);
 * a head size that attention does not serve is refused with the reason. */
START_TEST(hf_config_architectures) {
  static char got[1 << 16];
  ck_assert_int_eq(dry_run(got, sizeof got, "--hf-config '" HF_DIR "qwen3-0.6b.json'"), 0);
  ck_assert_msg(strstr(got, "\nrmsnorm rows<=16,cols=1024 "), "%s", got);
  ck_assert_msg(strstr(got, " total=1,batch=1,max_position=0,heads_q=16,heads_kv=8,head_dim=128,"
                            "rotary_dim=128\n"), "%s", got);
  ck_assert_msg(strstr(got, " rows=1,cols=3072,gate_stride=0,up_stride=0\n"), "%s", got);
  ck_assert_msg(strstr(got, " rows=1,vocab=151936\n"), "%s", got);
  ck_assert_msg(strstr(got, "heads_q=16,heads_kv=8,head_dim=128,window_left=-1"), "%s", got);

  ck_assert_int_eq(dry_run(got, sizeof got, "--hf-config '" HF_DIR "gemma-7b.json'"), 0);
  ck_assert_msg(strstr(got, "\nadd_rmsnorm rows<=1,cols=3072 "), "%s", got);
  ck_assert_msg(strstr(got, "dtype=bf16,head_dim=256,causal=1,window=0 batch=16,total_q=16384,"
                            "total_k=16384,max_seqlen_q=1024,max_seqlen_k=1024,heads_q=16,"
                            "heads_kv=16,head_dim=256,"), "%s", got);
  ck_assert_int_eq(count_of(got, "swiglu"), 0); /* GeGLU: no scree op, and it says so */
  ck_assert_int_eq(shell(out, sizeof out, "'%s' prewarm --dry-run --hf-config '" HF_DIR
                                          "gemma-7b.json' 2>&1 >/dev/null", SCREE_TUNE_BIN), 0);
  ck_assert_msg(strstr(out, "gemma-7b.json: gemma (RMSNorm): hidden 3072, 16 query / 16 KV heads "
                            "of 256, RoPE on 256, gated gelu MLP: no scree op, not tuned, "
                            "vocabulary 256000\n"), "%s", out);
  ck_assert_int_eq(count_of(got, "\nrope "), 2 * 15);

  ck_assert_int_eq(dry_run(got, sizeof got, "--hf-config '" HF_DIR "phi-style.json'"), 0);
  ck_assert_int_eq(count_of(got, "rmsnorm"), 0);
  ck_assert_int_eq(count_of(got, "swiglu"), 0);
  ck_assert_int_eq(count_of(got, "layernorm rows<="), 2 * 15);
  ck_assert_msg(strstr(got, "heads_q=32,heads_kv=32,head_dim=64,rotary_dim=32\n"), "%s", got);
  ck_assert_msg(strstr(got, " rows=16384,vocab=51200\n"), "%s", got);

  ck_assert_int_eq(dry_run(got, sizeof got, "--hf-config '" HF_DIR "pythia-1b.json'"), 0);
  ck_assert_msg(strstr(got, "heads_q=8,heads_kv=8,head_dim=256,rotary_dim=64\n"), "%s", got);
  ck_assert_int_eq(count_of(got, "layernorm rows<="), 2 * 15);

  /* Phi-2's heads of 80 are not a head size scree's attention serves. */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --hf-config '" HF_DIR "phi-2.json'"),
                   2);
  ck_assert_msg(strstr(out, "phi-2.json: attention shape ") &&
                    strstr(out, "head_dim=80 is not supported (32, 64, 96, 128 or 256)"),
                "%s", out);
  ck_assert_int_eq(count_of(out, "\n"), 1); /* nothing listed */
}
END_TEST

/* A config that is not JSON, lacks a field, gives one of the wrong type or
 * a size that does not fit is refused, naming the place or the field; no
 * bucket is listed, and a prewarm without --dry-run stops before a GPU. */
START_TEST(hf_config_bad_inputs) {
  static const char *const cases[][2] = {
      {"hello", "line 1, column 1: expected a value"},
      {"{\"model_type\": \"llama\",\n \"hidden_size\": 40", "line 2, column 19: the text ends "
                                                          "inside an object"},
      {"{\"model_type\": \"llama\", \"hidden_size\": 4096,}",
       "line 1, column 44: a comma before }"},
      {"[1, 2]", "the file holds a list, not a config object"},
      {"{\"model_type\": \"llama\", \"hidden_size\": \"4096\", \"num_attention_heads\": 32, "
       "\"vocab_size\": 10}", "\"hidden_size\" is a string, not an integer"},
      {"{\"model_type\": \"llama\", \"hidden_size\": 4096.5, \"num_attention_heads\": 32, "
       "\"vocab_size\": 10}", "\"hidden_size\" is a number with a fraction, not an integer"},
      {"{\"model_type\": \"llama\", \"num_attention_heads\": 32, \"vocab_size\": 10}",
       "\"hidden_size\" is missing (a required field)"},
      {"{\"model_type\": \"llama\", \"hidden_size\": 4096, \"num_attention_heads\": 0, "
       "\"vocab_size\": 10}", "\"num_attention_heads\" is 0: give an integer from 1 to 2^31"},
      {"{\"model_type\": \"llama\", \"hidden_size\": 4096, \"num_attention_heads\": 32, "
       "\"num_key_value_heads\": 5, \"vocab_size\": 10}",
       "num_key_value_heads 5 does not divide num_attention_heads 32"},
      {"{\"model_type\": \"llama\", \"hidden_size\": 4000, \"num_attention_heads\": 48, "
       "\"vocab_size\": 10}", "num_attention_heads 48 does not divide hidden_size 4000"},
      {"{\"model_type\": \"mamba\", \"hidden_size\": 4096}",
       "model_type \"mamba\" is not supported (llama, mistral, qwen2, qwen3, gemma, phi3, "
       "gpt_neox, phi)"},
      {"{\"hidden_size\": 4096}", "\"model_type\" is missing"},
      {"{\"model_type\": [\"llama\"], \"hidden_size\": 4096}",
       "\"model_type\" is a list, not a string"},
      {"{\"model_type\": \"llama\", \"hidden_size\": 4096, \"num_attention_heads\": 32, "
       "\"vocab_size\": 10}", "\"intermediate_size\" is missing"},
      {"{\"model_type\": \"llama\", \"hidden_size\": 4096, \"hidden_size\": 8192}",
       "\"hidden_size\" is given 2 times"},
      {"{\"model_type\": \"llava\", \"text_config\": 7}", "\"text_config\" is an integer, not an "
                                                         "object"},
      {"{\"model_type\": \"llava\", \"text_config\": {\"model_type\": \"llama\"}}",
       "\"hidden_size\" is missing"},
      {"{\"model_type\": \"phi\", \"hidden_size\": 4096, \"num_attention_heads\": 32, "
       "\"vocab_size\": 10, \"partial_rotary_factor\": 1.5}",
       "\"partial_rotary_factor\" is 1.5: give a fraction in (0, 1]"},
      {"{\"model_type\": \"phi\", \"hidden_size\": 4096, \"num_attention_heads\": 32, "
       "\"vocab_size\": 10, \"hidden_act\": \"gelu\\nrmsnorm rows=1,cols=8\"}",
       "the MLP's activation is not a name"},
      {"{\"model_type\": \"phi\", \"hidden_size\": 4096, \"num_attention_heads\": 32, "
       "\"vocab_size\": 10, \"rotary_dim\": 7}",
       "rotary dimensions 7: RoPE needs an even number from 2 to head_dim 128"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const char *path = write_file("config.json", cases[k][0], strlen(cases[k][0]));
    for (int dry = 1; dry >= 0; dry--) {
      ck_assert_int_eq(tune(out, sizeof out, "prewarm %s--cache '%s' --hf-config '%s'",
                            dry ? "--dry-run " : "", db, path), 2);
      ck_assert_msg(strstr(out, "scree-tune prewarm: --hf-config: ") && strstr(out, path) &&
                        strstr(out, cases[k][1]), "case %zu: %s", k, out);
      ck_assert_int_eq(count_of(out, "\n"), 1);
    }
  }
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --hf-config '%s/none.json'", dir), 2);
  ck_assert_msg(strstr(out, "cannot read ") && strstr(out, "none.json"), "%s", out);
  /* --hf-config is a model: not with --from-shipped. */
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --from-shipped --hf-config '" HF_DIR
                                         "llama-3-8b.json'"), 2);
}
END_TEST

/* A preset of 65536 distinct buckets is listed at once (each bucket was
 * looked for in a linear scan: quadratic, 124k buckets took a minute);
 * more than a prewarm takes, or a line of too many shapes, is an error. */
START_TEST(prewarm_presets_scale) {
  static char big[1 << 20];
  size_t n = 0;
  for (int v = 0; v < 2; v++) {
    n += (size_t)snprintf(big + n, sizeof big - n, "let %c = 1", 'A' + v);
    for (int i = 2; i <= 64; i++) n += (size_t)snprintf(big + n, sizeof big - n, ",%d", i);
    n += (size_t)snprintf(big + n, sizeof big - n, "\n");
  }
  n += (size_t)snprintf(big + n, sizeof big - n, "let R = 1..32768\nlet S = 1..2\n");
  const size_t lets = n;
  n += (size_t)snprintf(big + n, sizeof big - n, "model wider -- a line of 131072 shapes\n"
                        "rmsnorm rows={R*S},cols={A*64+B}\n");
  char wider[512];
  snprintf(wider, sizeof wider, "%s", write_file("wider.txt", big, n));
  n = lets + (size_t)snprintf(big + lets, sizeof big - lets, "model wide -- 65536 buckets\n"
                              "rmsnorm rows={R},cols={A*64+B}\n");
  const char *presets = write_file("wide.txt", big, n);
  const double t0 = scree__now();
  ck_assert_int_eq(shell(out, sizeof out, "timeout 20 '%s' prewarm --model wide --presets '%s' "
                         "--dtype fp16 --dry-run 2>&1 >/dev/null", SCREE_TUNE_BIN, presets),
                   0);
  ck_assert_msg(strstr(out, "dry run: 65536 bucket(s)"), "%s", out);
  ck_assert_msg(scree__now() - t0 < 10, "took %.1f s", scree__now() - t0);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model wide --presets '%s' --dtype fp16,bf16 "
                        "--dry-run", presets),
                   2);
  ck_assert_msg(strstr(out, "more than 100000 buckets to tune"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model wider --presets '%s' --dry-run",
                        wider),
                   2);
  ck_assert_msg(strstr(out, "wider.txt:6: the line makes more than 65536 call shapes"), "%s", out);
}
END_TEST

/* Argument text in messages is escaped: an escape sequence given as a
 * command, an option, a value or an argument reaches the terminal as
 * \x1b, never raw. */
START_TEST(argument_text_is_escaped) {
  static const char *const lines[] = {
      "$'bad\e[31m'",
      "list $'--bo\egus'",
      "list $'arg\e[2J'",
      "prewarm --op $'x\e]0;t\a' --shape rows=1 --dry-run",
      "prewarm --op rmsnorm --cols 64 --rows 1 --dtype $'fp16,\e[31m' --dry-run",
      "prewarm --op rmsnorm --cols $'64\e' --rows 1 --dry-run",
      "prewarm --op rmsnorm --cols 64 --rows 1 --reps $'1\e' --dry-run",
      "prewarm --op attention --shape $'batch=1\e[1m' --dry-run",
      "prewarm --op rmsnorm --shape rows=1,cols=64 --devices $'0,\e'",
      "prewarm --op rmsnorm --shape rows=1,cols=64 --shard $'1/\e' --dry-run",
      "prewarm --model $'none\e[31m' --dry-run",
  };
  for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
    ck_assert_int_eq(shell(out, sizeof out, "bash -c \"'%s' %s\" 2>&1", SCREE_TUNE_BIN, lines[i]),
                     2);
    ck_assert_msg(!strchr(out, '\033') && strstr(out, "\\x1b"), "%s: %s", lines[i], out);
  }
}
END_TEST

/* merge takes any number of sources: a cluster shards up to 65536 ways,
 * and more than 256 arguments was a usage error. */
START_TEST(merge_takes_any_number_of_sources) {
  ck_assert_int_eq(shell(out, sizeof out, "cd '%s' && for i in $(seq 300); do cp tune.db s$i.db "
                         "|| exit 1; done", dir),
                   0);
  ck_assert_int_eq(shell(out, sizeof out, "cd '%s' && '%s' merge s*.db --cache all.db 2>&1",
                         dir, SCREE_TUNE_BIN),
                   0);
  ck_assert_int_eq(count_of(out, ": 4 added") + count_of(out, ": 0 added"), 300);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s/all.db'", dir), 0);
  ck_assert_msg(strstr(out, "4 winner(s)"), "%s", out);
}
END_TEST

/* A NUL byte in a text input ended it there, silently: what followed (a
 * deny line, more shapes) was ignored with exit 0. Each names file:line. */
START_TEST(nul_bytes_in_inputs_are_refused) {
  static const char shapes[] = "{\"shapes\": [[1, 4096]],\n\0 \"dtypes\": [\"fp16\"]}";
  static const char presets[] = "model m -- m\nrmsnorm rows=1,cols=4096\n\0junk\n";
  static const char tuned[] = "# tuned\n\0rmsnorm rows<=3,cols=4 x=bf16,w=bf16,y=bf16 0 x\n";
  char path[512];
  snprintf(path, sizeof path, "%s", write_file("s.json", shapes, sizeof shapes - 1));
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --shapes '%s' --dry-run", path), 2);
  ck_assert_msg(strstr(out, "s.json:2: a NUL byte"), "%s", out);
  snprintf(path, sizeof path, "%s", write_file("p.txt", presets, sizeof presets - 1));
  ck_assert_int_eq(tune(out, sizeof out, "prewarm --model m --presets '%s' --dry-run", path), 2);
  ck_assert_msg(strstr(out, "p.txt:3: a NUL byte"), "%s", out);
  snprintf(path, sizeof path, "%s", write_file("t.txt", tuned, sizeof tuned - 1));
  ck_assert_int_ne(shell(out, sizeof out, "SCREE_TUNED_CONFIGS='%s' '%s' verify --shipped 2>&1",
                         path, SCREE_TUNE_BIN),
                   0);
  ck_assert_msg(strstr(out, "t.txt:2: a NUL byte"), "%s", out);
}
END_TEST

/* What an outside probe found accepted, each a usage error (exit 2) that
 * names the value: shapes and variants go through the op's checks, numbers
 * parse whole, lists are not cut, shapes files are strict JSON. */
/* verify --agree: the caches of a job's ranks compared key by key, every
 * file read-only; exit 5 when they disagree. */
START_TEST(verify_agree_compares_caches) {
  char a[400], b[400], c3[400], saved[400];
  snprintf(saved, sizeof saved, "%s", db);
  snprintf(a, sizeof a, "%s/a.db", dir);
  snprintf(b, sizeof b, "%s/b.db", dir);
  snprintf(c3, sizeof c3, "%s/c.db", dir);
  const char *paths[] = {a, b, c3};
  for (int i = 0; i < 3; i++) {
    snprintf(db, sizeof db, "%s", paths[i]);
    put("sm_90", "rows<=16384,cols=4096", "tpr=128,rows=1,vec=8,cache=4", 70.5 + i, F16);
    put("sm_90", "rows<=1024,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 10.25, F16);
  }
  snprintf(db, sizeof db, "%s", saved);
  /* Same configs (times may differ): they agree. */
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s' '%s'", a, b, c3), 0);
  ck_assert_msg(strstr(out, "2 key(s) in 3 file(s): 2 agree, 0 differ, 0 missing"), "%s", out);
  struct stat before, after;
  ck_assert_int_eq(stat(b, &before), 0);
  /* One rank picked another config; another lacks a bucket. */
  snprintf(db, sizeof db, "%s", b);
  put("sm_90", "rows<=16384,cols=4096", "tpr=64,rows=2,vec=8,cache=8", 60.0, F16);
  snprintf(db, sizeof db, "%s", a);
  put("sm_90", "rows<=2,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 4.5, F16);
  /* The same bucket for another arch is another key: only in a.db. */
  put("sm_80", "rows<=1024,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 10.25, F16);
  snprintf(db, sizeof db, "%s", saved);
  ck_assert_int_eq(stat(b, &before), 0);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s' '%s'", a, b, c3), 5);
  ck_assert_msg(strstr(out, "differ  rmsnorm sm_90 rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 "
                            "causal=0 src="), "%s", out);
  ck_assert_msg(strstr(out, "b.db tpr=64,rows=2,vec=8,cache=8"), "%s", out);
  ck_assert_msg(strstr(out, "a.db tpr=128,rows=1,vec=8,cache=4"), "%s", out);
  ck_assert_msg(strstr(out, "missing rmsnorm sm_90 rows<=2,cols=4096"), "%s", out);
  ck_assert_msg(strstr(out, "b.db (missing)"), "%s", out);
  ck_assert_msg(strstr(out, "missing rmsnorm sm_80 rows<=1024,cols=4096"), "%s", out);
  ck_assert_msg(strstr(out, "4 key(s) in 3 file(s): 1 agree, 1 differ, 2 missing from some"),
                "%s", out);
  ck_assert_int_eq(stat(b, &after), 0);
  ck_assert(before.st_mtime == after.st_mtime && before.st_size == after.st_size);
  /* The filters narrow the keys compared. */
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s' --arch sm_90 --op rmsnorm "
                                         "--json", a, c3), 5);
  ck_assert_msg(json_ok(out), "%s", out);
  ck_assert_msg(strstr(out, "\"kind\": \"missing\", \"configs\": [\"tpr=256,rows=1,vec=8,cache=2\","
                            " null]"), "%s", out);
  ck_assert_msg(strstr(out, "\"keys\": 3, \"agree\": 2, \"differ\": 0, \"missing\": 1"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s' --arch sm_80 -q", b, c3), 0);
  ck_assert_msg(!strstr(out, "key(s)"), "%s", out);
  /* A row that fails its checks in both is skipped in both: they agree on
   * the rest, but exit 1 says that not everything could be compared. */
  char b2[400], c2[400];
  snprintf(b2, sizeof b2, "%s/b2.db", dir);
  snprintf(c2, sizeof c2, "%s/c2.db", dir);
  ck_assert_int_eq(shell(out, sizeof out, "cp '%s' '%s' && cp '%s' '%s'", c3, b2, c3, c2), 0);
  copy_row(b2, "rows<=1024,cols=4096", NULL, NULL, "7", NULL);
  copy_row(c2, "rows<=1024,cols=4096", NULL, NULL, "7", NULL);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s'", b2, c2), 1);
  ck_assert_msg(strstr(out, "skipped 1 row(s) of") && strstr(out, "b2.db") &&
                    strstr(out, "2 key(s) in 2 file(s): 2 agree, 0 differ, 0 missing"),
                "%s", out);
  /* Bad input: each error names the file, nothing compared. */
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s'", a), 2);
  ck_assert_msg(strstr(out, "give at least two"), "%s", out);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' ''", a), 2);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s/none.db'", a, dir), 4);
  ck_assert_msg(strstr(out, "none.db: cannot read it as a scree cache: missing"), "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "echo 'not sqlite' > '%s/text.db'", dir), 0);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s/text.db'", a, dir), 4);
  ck_assert_msg(strstr(out, "text.db: cannot read it as a scree cache"), "%s", out);
  sql(c3, "PRAGMA user_version = 99");
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s'", a, c3), 4);
  ck_assert_msg(strstr(out, "c.db: cannot read it as a scree cache") && strstr(out, "99"), "%s",
                out);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s' --retime", a, b), 2);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s' --cache '%s'", a, b, db), 2);
  ck_assert_int_eq(tune(out, sizeof out, "verify --agree '%s' '%s' --json", a, dir), 4);
  ck_assert_msg(strstr(out, "\"error\""), "%s", out);
}
END_TEST

/* A pinned cache is never written: commands that write a cache refuse it
 * (however its path is spelled), and prewarm does not tune under a pin. */
START_TEST(writers_refuse_the_pinned_cache) {
  struct stat before, after;
  ck_assert_int_eq(stat(db, &before), 0);
  ck_assert_int_eq(tune(out, sizeof out, "list --cache '%s' -q", db), 0);
  char other[400], alias[400];
  snprintf(other, sizeof other, "%s/other.db", dir);
  snprintf(alias, sizeof alias, "%s/./tune.db", dir);
  ck_assert_int_eq(shell(out, sizeof out, "cp '%s' '%s'", db, other), 0);
  ck_assert_int_eq(tune(out, sizeof out, "clear --all --cache '%s'", db), 0); /* not pinned: fine */
  ck_assert_int_eq(shell(out, sizeof out, "cp '%s' '%s'", other, db), 0);
  ck_assert_int_eq(stat(db, &before), 0);
  const char *writers[] = {"clear --all", "merge '%s'", "prewarm --from-shipped --arch sm_90"};
  for (int i = 0; i < 3; i++) {
    char args[600];
    snprintf(args, sizeof args, writers[i], other);
    ck_assert_int_eq(shell(out, sizeof out, "SCREE_PIN='%s' '%s' %s --cache '%s' 2>&1", db,
                           SCREE_TUNE_BIN, args, alias),
                     4);
    ck_assert_msg(strstr(out, "refusing to write") && strstr(out, "it is the pinned cache"),
                  "%s: %s", args, out);
  }
  ck_assert_int_eq(stat(db, &after), 0);
  ck_assert(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
            before.st_mtim.tv_nsec == after.st_mtim.tv_nsec && before.st_size == after.st_size);
  /* Reading commands may read it; writing another file is fine. */
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_PIN='%s' '%s' list --cache '%s' -q 2>&1", db,
                         SCREE_TUNE_BIN, db),
                   0);
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_PIN='%s' '%s' clear --all --cache '%s' 2>&1",
                         db, SCREE_TUNE_BIN, other),
                   0);
  /* prewarm tunes nothing under a pin (a dry run only lists). */
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_PIN='%s' '%s' prewarm --op rmsnorm --cols 4096 "
                                          "--rows 1024 --cache '%s' 2>&1", db, SCREE_TUNE_BIN,
                         other),
                   4);
  ck_assert_msg(strstr(out, "pins this process to a read-only cache"), "%s", out);
  /* doctor shows the pin: every context runs from it alone. */
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_PIN='%s' '%s' doctor 2>&1", db, SCREE_TUNE_BIN),
                   0);
  ck_assert_msg(strstr(out, "pinned cache (SCREE_PIN; the only source") && strstr(out, db),
                "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_PIN='%s/none.db' '%s' doctor 2>&1", dir,
                         SCREE_TUNE_BIN),
                   0);
  ck_assert_msg(strstr(out, "none.db (SCREE_PIN): contexts fail to create"), "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_PIN='%s' '%s' doctor --json", db,
                         SCREE_TUNE_BIN),
                   0);
  ck_assert_msg(json_ok(out) && strstr(out, "\"pinned_cache\": {\"path\": "), "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "env -u SCREE_PIN '%s' doctor --json", SCREE_TUNE_BIN),
                   0);
  ck_assert_msg(strstr(out, "\"pinned_cache\": null"), "%s", out);
  ck_assert_int_eq(shell(out, sizeof out, "SCREE_PIN='%s' '%s' prewarm --dry-run --op rmsnorm "
                                          "--cols 4096 --rows 1024 2>&1", db, SCREE_TUNE_BIN),
                   0);
}
END_TEST

START_TEST(probed_inputs_are_usage_errors) {
#define PROBE_ATTN(f) "prewarm --dry-run --op attention --shape batch=16,total_q=12081," \
  "total_k=12081,max_seqlen_q=2048,max_seqlen_k=2048,heads_q=16,heads_kv=16," f
  static const struct {
    const char *args, *said;
  } probes[] = {
      {PROBE_ATTN("head_dim=7,window_left=-1,window_right=-1"), "head_dim=7"},
      {PROBE_ATTN("head_dim=-128,window_left=-1,window_right=-1"), "head_dim=-128"},
      {PROBE_ATTN("head_dim=4294967424,window_left=-1,window_right=-1"), "head_dim=4294967424"},
      {PROBE_ATTN("head_dim=128,window_left=-5,window_right=-1"), "window_left=-5"},
      {PROBE_ATTN("head_dim=128,window_left=-1,window_right=-1 --variant "
                  "dtype=fp32,head_dim=128,causal=1,window=0"), "fp32"},
      {PROBE_ATTN("head_dim=128,window_left=-1,window_right=-1 --variant "
                  "dtype=fp16,head_dim=7,causal=1,window=0"), "head_dim=7"},
      {"prewarm --dry-run --op attention --shape batch=-5,total_q=1,total_k=1,max_seqlen_q=1,"
       "max_seqlen_k=1,heads_q=1,heads_kv=1,head_dim=64,window_left=-1,window_right=-1",
       "batch=-5"},
      {"prewarm --dry-run --op attention --shape batch=1,total_q=-1,total_k=1,max_seqlen_q=1,"
       "max_seqlen_k=1,heads_q=1,heads_kv=1,head_dim=64,window_left=-1,window_right=-1",
       "total_q=-1"},
      {"prewarm --dry-run --op rmsnorm --cols 4096 --rows-max 1e3", "--rows-max 1e3"},
      {"prewarm --dry-run --op rmsnorm --cols 4096 --rows-max 5x", "--rows-max 5x"},
      {"prewarm --dry-run --op rmsnorm --cols 4096 --rows 1 --device abc", "--device abc"},
      {"prewarm --dry-run --op rmsnorm --cols 4096 --rows 1 --reps abc", "--reps abc"},
      {"prewarm --dry-run --op rmsnorm --rows 1 --cols 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,"
       "17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,"
       "46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65", "at most 64"},
      {"prewarm --dry-run --op rmsnorm --cols 64 --rows 1 --dtype fp16,bf16,fp32,garbage",
       "unknown dtype garbage"},
      {"demo --op rmsnorm --shape rows=-1,cols=4096", "rows=-1"},
      {"demo --op rmsnorm --shape rows=1,cols=0", "cols=0"},
      {"demo --op attention --shape batch=1,total_q=1,total_k=1,max_seqlen_q=1,max_seqlen_k=1,"
       "heads_q=1,heads_kv=1,head_dim=7,window_left=-1,window_right=-1", "head_dim=7"},
  };
#undef PROBE_ATTN
  for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
    ck_assert_msg(tune(out, sizeof out, "%s", probes[i].args) == 2, "%s: %s", probes[i].args,
                  out);
    ck_assert_msg(strstr(out, probes[i].said), "%s: %s", probes[i].args, out);
  }
  static const char *const files[][2] = {
      {"{\"shapes\": [[1, 4096]], \"dtypes\": \"fp16\"}", "\"dtypes\" is a string"},
      {"{\"shapes\": [[1, 4096],], \"dtypes\": [\"fp16\"]}", "line 1, column 22: a comma"},
      {"{\"shapes\": [[1, 4096]]} x", "line 1, column 25: more text"},
      {"{\"shapes\": [[01, 4096]]}", "line 1, column 14: a number with a leading zero"},
  };
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    const char *path = write_file("probe.json", files[i][0], strlen(files[i][0]));
    ck_assert_int_eq(tune(out, sizeof out, "prewarm --dry-run --shapes '%s'", path), 2);
    ck_assert_msg(strstr(out, files[i][1]), "%s: %s", files[i][0], out);
  }
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
  tcase_add_test(tc, unreachable_cache_is_an_error);
  tcase_add_test(tc, wal_cache_in_a_read_only_directory);
  tcase_add_test(tc, relative_home_is_not_used);
  tcase_add_test(tc, import_refuses_loose_permissions);
  tcase_add_test(tc, cache_names_are_files_and_foreign_files_stay);
  tcase_add_test(tc, reading_commands_do_not_touch_the_file);
  tcase_add_test(tc, rows_that_fail_their_checks);
  tcase_add_test(tc, import_and_export_report_skipped_rows);
  tcase_add_test(tc, too_many_rows_is_an_error_with_a_reason);
  tcase_add_test(tc, text_from_a_cache_is_escaped);
  tcase_add_test(tc, stdout_write_errors_are_errors);
  tcase_add_test(tc, safelist_export_write_errors);
  tcase_add_test(tc, safelist_export_writes_only_what_loads);
  tcase_add_test(tc, options_parse_alike_and_unknown_ones_are_errors);
  tcase_add_test(tc, dtype_errors_name_the_dtype);
  tcase_add_test(tc, dry_run_checks_shapes_as_the_op_does);
  tcase_add_test(tc, dry_run_misses_per_arch);
  tcase_add_test(tc, prewarm_shapes_file_is_json);
  tcase_add_test(tc, json_everywhere);
  tcase_add_test(tc, list_columns_fit_their_cells);
  tcase_add_test(tc, show_says_what_a_shipped_row_lacks);
  tcase_add_test(tc, doctor_reports_what_a_bug_report_needs);
  tcase_add_test(tc, prewarm_presets_scale);
  tcase_add_test(tc, hf_config_equals_the_presets);
  tcase_add_test(tc, hf_config_architectures);
  tcase_add_test(tc, hf_config_bad_inputs);
  tcase_add_test(tc, argument_text_is_escaped);
  tcase_add_test(tc, quiet_still_says_errors);
  tcase_add_test(tc, merge_takes_any_number_of_sources);
  tcase_add_test(tc, nul_bytes_in_inputs_are_refused);
  tcase_add_test(tc, probed_inputs_are_usage_errors);
  tcase_add_test(tc, verify_agree_compares_caches);
  tcase_add_test(tc, writers_refuse_the_pinned_cache);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
