/* test_tuned.c - shipped tuned configs as text (store/tuned.c): lines
 * read back as written, lookups prefer the device's model, and malformed
 * lines are refused with the file, the line and the reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static char hash[65];
static const char *CFG = "tpr=128,rows=1,vec=8,cache=4";
static const char *F16 = "x=fp16,w=fp16,y=fp16";

static void setup(void) {
  snprintf(hash, sizeof hash, "%s", scree__source_hash(scree__op_find("rmsnorm")));
}

static scree__centry entry(const char *bucket, const char *config, double us, const char *dev) {
  scree__centry e;
  memset(&e, 0, sizeof e);
  snprintf(e.key.op, sizeof e.key.op, "rmsnorm");
  snprintf(e.key.bucket, sizeof e.key.bucket, "%s", bucket);
  snprintf(e.key.dtype, sizeof e.key.dtype, "%s", F16);
  snprintf(e.key.arch, sizeof e.key.arch, "sm_90");
  snprintf(e.key.src_hash, sizeof e.key.src_hash, "%s", hash);
  snprintf(e.config, sizeof e.config, "%s", config);
  snprintf(e.device_name, sizeof e.device_name, "%s", dev);
  e.median_us = us;
  return e;
}

START_TEST(written_lines_read_back) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fputs("# a comment\n\n", f);
  const scree__centry a = entry("rows<=16384,cols=4096", CFG, 70.5, "NVIDIA H100 80GB HBM3");
  const scree__centry b = entry("rows<=1024,cols=4096", "tpr=256,rows=1,vec=8,cache=2", 0.025,
                                "GPU\x1b[2J\twith\ncontrols");
  ck_assert_int_eq(scree__tuned_write(f, &a), 0);
  ck_assert_int_eq(scree__tuned_write(f, &b), 0);
  fclose(f);
  ck_assert_msg(strstr(buf, "rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 "
                            "NVIDIA_H100_80GB_HBM3 tpr=128,rows=1,vec=8,cache=4 70.500 "),
                "%s", buf);
  scree__tuned t = {0};
  char why[512];
  ck_assert_int_eq(scree__tuned_parse(buf, "x.txt", &t, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(t.n, 2);
  ck_assert_int_eq(t.nfiles, 1);
  ck_assert_str_eq(t.files[0], "x.txt");
  ck_assert_mem_eq(&t.e[0].key, &a.key, sizeof a.key);
  ck_assert_str_eq(t.e[0].config, CFG);
  ck_assert_int_eq(t.e[0].line, 3);
  ck_assert(t.e[0].median_us == 70.5);
  ck_assert_mem_eq(&t.e[1].key, &b.key, sizeof b.key);
  ck_assert(t.e[1].median_us == 0.025);
  ck_assert_str_eq(t.e[1].device, "GPU?[2J?with?controls");
  free(buf);
  scree__tuned_free(&t);
}
END_TEST

START_TEST(lookups_prefer_the_device_model) {
  char text[2048];
  snprintf(text, sizeof text,
           "rmsnorm rows<=16384,cols=4096 %s 0 sm_90 NVIDIA_H100_80GB_HBM3 %s 70.5 %s\n"
           "rmsnorm rows<=16384,cols=4096 %s 0 sm_90 NVIDIA_H200 tpr=256,rows=1,vec=8,cache=2 "
           "60.5 %s\n"
           "rmsnorm rows<=16384,cols=4096 %s 0 sm_90 NVIDIA_H200 %s 60.5 %064d\n",
           F16, CFG, hash, F16, hash, F16, CFG, 7);
  scree__tuned t = {0};
  char why[512];
  ck_assert_int_eq(scree__tuned_parse(text, "y.txt", &t, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(t.n, 3);
  const scree__centry k = entry("rows<=16384,cols=4096", CFG, 1, "");
  ck_assert_str_eq(scree__tuned_find(&t, &k.key, "NVIDIA H200")->config,
                   "tpr=256,rows=1,vec=8,cache=2");
  ck_assert_str_eq(scree__tuned_find(&t, &k.key, "NVIDIA H100 80GB HBM3")->config, CFG);
  ck_assert_str_eq(scree__tuned_find(&t, &k.key, "NVIDIA A100-SXM4-80GB")->config, CFG);
  ck_assert_str_eq(scree__tuned_find(&t, &k.key, NULL)->config, CFG);
  /* Another kernel source never matches: the key holds this build's hash. */
  scree__centry other = k;
  snprintf(other.key.src_hash, sizeof other.key.src_hash, "%064d", 8);
  ck_assert_ptr_null(scree__tuned_find(&t, &other.key, "NVIDIA H200"));
  snprintf(other.key.bucket, sizeof other.key.bucket, "rows<=8192,cols=4096");
  snprintf(other.key.src_hash, sizeof other.key.src_hash, "%s", hash);
  ck_assert_ptr_null(scree__tuned_find(&t, &other.key, NULL));
  scree__tuned_free(&t);
}
END_TEST

/* Replaces the first `from` in line with `to`. */
static void subst(char *line, size_t n, const char *from, const char *to) {
  char *p = strstr(line, from), tmp[1024];
  if (!p) return;
  snprintf(tmp, sizeof tmp, "%.*s%s%s", (int)(p - line), line, to, p + strlen(from));
  snprintf(line, n, "%s", tmp);
}

START_TEST(malformed_lines_name_file_and_line) {
  static const struct {
    const char *line, *why;
  } bad[] = {
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU", "6 field(s), expected 9"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 1 HASH extra", "more than 9 fields"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 2 sm_90 GPU CFG 1 HASH", "causal is \"2\", not 0 or 1"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG -1 HASH", "median_us is \"-1\""},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG nan HASH", "median_us is \"nan\""},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 12us HASH", "median_us is \"12us\""},
      /* Below the floor of a real kernel's time, however it is spelled. */
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 0.001 HASH", "median_us is 0.001, below the 0.01 us"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 1e-300 HASH", "median_us is 1e-300, below"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 0x1p-1074 HASH", "median_us is"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 4.9e-324 HASH", "median_us is"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 1 ABCD", "src_hash is not 64 lowercase hex digits"},
      {"frob rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 1 HASH", "frob"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,y=fp16 0 sm_90 GPU CFG 1 HASH", "x=fp16,y=fp16"},
      {"rmsnorm rows<=16000,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 1 HASH", "rows<=16000"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 gfx90 GPU CFG 1 HASH", "gfx90"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU tpr=3,rows=1,vec=8,cache=4 1 HASH", "tpr=3"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 GPU bogus 1 HASH", "bogus"},
      {"rmsnorm rows<=16384,cols=4096 x=fp16,w=fp16,y=fp16 0 sm_90 G\x7fPU CFG 1 HASH", "device holds byte 0x7f"},
      {"rmsnorm rows<=BUCKET x=fp16,w=fp16,y=fp16 0 sm_90 GPU CFG 1 HASH", "bucket is"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    /* Two good lines (one a comment) first: the bad one is line 3. */
    char line[1024], text[2048];
    snprintf(line, sizeof line, "%s", bad[i].line);
    char big[121];
    memset(big, '1', 120);
    big[120] = 0;
    subst(line, sizeof line, "CFG", CFG);
    subst(line, sizeof line, "HASH", hash);
    subst(line, sizeof line, "BUCKET", big);
    snprintf(text, sizeof text,
             "# shipped\nrmsnorm rows<=1,cols=64 %s 0 sm_90 GPU %s 1.5 %s\n%s\n", F16,
             "tpr=32,rows=1,vec=2,cache=1", hash, line);
    scree__tuned t = {0};
    char why[512] = "";
    ck_assert_msg(scree__tuned_parse(text, "h100.txt", &t, why, sizeof why) == SCREE_ERROR_PARSE,
                  "case %zu parsed: %s", i, text);
    ck_assert_msg(!strncmp(why, "h100.txt:3: ", 12) && strstr(why, bad[i].why),
                  "case %zu: got \"%s\"", i, why);
    ck_assert_int_eq(t.n, 0);
    scree__tuned_free(&t);
  }
}
END_TEST

START_TEST(files_from_the_environment) {
  char path[] = "/tmp/scree-tuned-XXXXXX";
  const int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  char text[1024];
  const int n = snprintf(text, sizeof text, "rmsnorm rows<=1,cols=64 %s 0 sm_90 GPU %s 1.5 %s\n",
                         F16, "tpr=32,rows=1,vec=2,cache=1", hash);
  ck_assert_int_eq(write(fd, text, (size_t)n), n);
  close(fd);
  char env[256];
  snprintf(env, sizeof env, "%s:/nonexistent/x.txt", path);
  setenv("SCREE_TUNED_CONFIGS", env, 1);
  scree__tuned t;
  char warn[1024] = "";
  ck_assert_int_eq(scree__tuned_load(&t, warn, sizeof warn), SCREE_OK);
  ck_assert_int_eq(t.n, 1);
  ck_assert_msg(strstr(warn, "/nonexistent/x.txt"), "%s", warn);
  scree__tuned_free(&t);
  setenv("SCREE_TUNED_CONFIGS", "none", 1);
  ck_assert_int_eq(scree__tuned_load(&t, warn, sizeof warn), SCREE_OK);
  ck_assert_int_eq(t.n, 0);
  scree__tuned_free(&t);
  unsetenv("SCREE_TUNED_CONFIGS");
  /* The embedded files (caches/) all load. */
  warn[0] = 0;
  ck_assert_int_eq(scree__tuned_load(&t, warn, sizeof warn), SCREE_OK);
  ck_assert_msg(!warn[0], "%s", warn);
  scree__tuned_free(&t);
  unlink(path);
}
END_TEST

SCREE_TEST_MAIN(.name = "tuned", .setup_once = setup,
                .tests = SCREE_TESTS(written_lines_read_back, lookups_prefer_the_device_model,
                                     malformed_lines_name_file_and_line,
                                     files_from_the_environment))
