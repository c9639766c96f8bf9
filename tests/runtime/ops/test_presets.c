/* test_presets.c - the model presets (presets/models.txt): the embedded
 * file loads, expands to the shapes prewarm tunes, and bad files are
 * refused with the file, the line and the reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

typedef struct counts {
  int total, per_op[16];
  char last_shape[512], last_variant[256];
} counts;

static int count(void *user, const scree__preset_line *l, const char *shape,
                 const char *variant) {
  counts *c = user;
  c->total++;
  for (int i = 0; scree__ops[i]; i++)
    if (scree__ops[i] == l->op) c->per_op[i]++;
  snprintf(c->last_shape, sizeof c->last_shape, "%s", shape);
  snprintf(c->last_variant, sizeof c->last_variant, "%s", variant ? variant : "");
  return 0;
}

static int op_index(const char *name) {
  for (int i = 0; scree__ops[i]; i++)
    if (!strcmp(scree__ops[i]->name, name)) return i;
  return -1;
}

START_TEST(embedded_presets_cover_the_models) {
  scree__presets ps;
  char why[512];
  unsetenv("SCREE_PRESETS");
  ck_assert_int_eq(scree__presets_load(NULL, &ps, why, sizeof why), SCREE_OK);
  static const char *const names[] = {"llama-3-8b", "llama-3-70b", "mistral-7b",
                                      "qwen2.5-7b", "deepseek-moe-16b", "gpt2"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    ck_assert_msg(scree__preset_find(&ps, names[i]), "no preset %s", names[i]);
  /* llama-3-8b: 15 token counts of 5 row-wise ops, 6 attention buckets. */
  counts c = {0};
  scree__preset_expand(scree__preset_find(&ps, "llama-3-8b"), SCREE_DTYPE_BF16, count, &c);
  ck_assert_int_eq(c.total, 81);
  ck_assert_int_eq(c.per_op[op_index("attention")], 6);
  ck_assert_int_eq(c.per_op[op_index("rmsnorm")], 15);
  ck_assert_str_eq(c.last_variant, "dtype=bf16,head_dim=128,causal=1,window=0");
  ck_assert_str_eq(c.last_shape,
                   "batch=8,total_q=65536,total_k=65536,max_seqlen_q=8192,max_seqlen_k=8192,"
                   "heads_q=32,heads_kv=8,head_dim=128,window_left=-1,window_right=-1");
  /* fp32: attention lines are for fp16 and bf16 only. */
  memset(&c, 0, sizeof c);
  scree__preset_expand(scree__preset_find(&ps, "llama-3-8b"), SCREE_DTYPE_FP32, count, &c);
  ck_assert_int_eq(c.total, 75);
  /* The MoE layer: the router's softmax, the routed experts' share. */
  memset(&c, 0, sizeof c);
  scree__preset_expand(scree__preset_find(&ps, "deepseek-moe-16b"), SCREE_DTYPE_BF16, count, &c);
  ck_assert_int_eq(c.per_op[op_index("softmax")], 15);
  ck_assert_int_eq(c.per_op[op_index("swiglu")], 45);
  scree__presets_free(&ps);
}
END_TEST

START_TEST(expressions_and_overrides) {
  scree__presets ps = {0};
  char why[512];
  const char *text = "let T = 4..16   # 4, 8, 16\n"
                     "model m -- a test\n"
                     "let E = 3\n"
                     "swiglu rows={(T*6)/E-1},cols=128\n"
                     "softmax rows={T/3},cols={T+1} dtypes=fp32\n";
  ck_assert_int_eq(scree__presets_parse(text, "a.txt", &ps, why, sizeof why), SCREE_OK);
  const scree__preset *p = scree__preset_find(&ps, "m");
  ck_assert_ptr_nonnull(p);
  ck_assert_str_eq(p->about, "a test");
  counts c = {0};
  scree__preset_expand(p, SCREE_DTYPE_FP16, count, &c);
  ck_assert_int_eq(c.total, 3);
  ck_assert_str_eq(c.last_shape, "rows=31,cols=128");
  memset(&c, 0, sizeof c);
  scree__preset_expand(p, SCREE_DTYPE_FP32, count, &c);
  ck_assert_int_eq(c.total, 6);
  ck_assert_str_eq(c.last_shape, "rows=6,cols=17"); /* 16/3 rounds up */
  /* A later file's model of the same name replaces it. */
  ck_assert_int_eq(scree__presets_parse("model m\nrmsnorm rows=1,cols=64\n", "b.txt", &ps, why,
                                        sizeof why),
                   SCREE_OK);
  ck_assert_int_eq(ps.n, 1);
  ck_assert_str_eq(scree__preset_find(&ps, "m")->source, "b.txt");
  /* Two negative factors make a positive product, not "a value past 2^40". */
  ck_assert_msg(scree__presets_parse("model n\nrmsnorm rows={(0-2)*(0-3)},cols=64\n", "c.txt",
                                     &ps, why, sizeof why) == SCREE_OK, "%s", why);
  memset(&c, 0, sizeof c);
  scree__preset_expand(scree__preset_find(&ps, "n"), SCREE_DTYPE_FP16, count, &c);
  ck_assert_str_eq(c.last_shape, "rows=6,cols=64");
  scree__presets_free(&ps);
}
END_TEST

START_TEST(bad_files_name_the_line) {
  static const struct {
    const char *text, *why;
  } bad[] = {
      {"rmsnorm rows=1,cols=64\n", "f.txt:1: \"rmsnorm rows=1,cols=64\": expected `let` or `model NAME` before the first op line"},
      {"model m\nrmsnorm rows={X},cols=64\n", "f.txt:2: {X}: a variable that no `let` defines"},
      {"model m\nfrobnicate rows=1\n", "f.txt:2: unknown op \"frobnicate\""},
      {"model m\nrmsnorm rows={1,cols=64\n", "f.txt:2: a { without its }"},
      {"model m\nrmsnorm rows=1},cols=64\n", "f.txt:2: a } without its {"},
      {"let T = 8..4\nmodel m\nrmsnorm rows={T},cols=64\n", "f.txt:1: let T = 8..4: need 1 <= A <= B <= 2^40"},
      {"let T = 1,x\n", "f.txt:1: let T: values are integers in 1..2^40, separated by commas"},
      {"let dtype = 1\n", "f.txt:1: let: dtype is not a variable's name"},
      {"model m\nrmsnorm rows=1,cols=64\nmodel m\nrmsnorm rows=2,cols=64\n", "f.txt:3: model m is defined twice in this file"},
      {"model m\nmodel n\nrmsnorm rows=1,cols=64\n", "f.txt:1: model m has no op lines"},
      {"model m\nrmsnorm rows=1,colz=64\n", "f.txt:2: rmsnorm shape rows=1,colz=64:"},
      {"model m\nrmsnorm rows=1,cols=64 dtypes=fp8\n", "f.txt:2: dtypes=: \"fp8\" is not fp16, bf16 or fp32"},
      {"model m\nrmsnorm rows=1,cols=64 variant=x=fp16\n", "f.txt:2: rmsnorm variant x=fp16:"},
      {"model m\nrmsnorm rows=1,cols=64 extra\n", "f.txt:2: \"extra\": expected variant=V or dtypes=a,b"},
      {"model m\nrmsnorm rows={1/0},cols=64\n", "f.txt:2: {1/0}: a division by zero"},
      {"model m\nrmsnorm rows={4096*4096*4096*4096},cols=64\n", "f.txt:2: {4096*4096*4096*4096}: a value past 2^40"},
      /* Checked arithmetic: the product wrapped to 0 (undefined behaviour),
       * leaving rows=5. */
      {"model m\nrmsnorm rows={(0-1099511627776)*1099511627776+5},cols=64\n", "f.txt:2: {(0-1099511627776)*1099511627776+5}: a value below -2^40"},
      {"model m\nrmsnorm rows={(0-1099511627776)*(0-1099511627776)},cols=64\n", "f.txt:2: {(0-1099511627776)*(0-1099511627776)}: a value past 2^40"},
      {"model m\nrmsnorm rows={(0-1099511627776)-1},cols=64\n", "f.txt:2: {(0-1099511627776)-1}: a value below -2^40"},
      {"model bad name\n", "f.txt:1: model: one name, then optionally -- and a description"},
      {"model m\nrmsnorm\n", "f.txt:2: rmsnorm: the line needs a shape"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    scree__presets ps = {0};
    char why[512] = "";
    ck_assert_msg(scree__presets_parse(bad[i].text, "f.txt", &ps, why, sizeof why) ==
                      SCREE_ERROR_PARSE,
                  "case %zu parsed", i);
    ck_assert_msg(!strncmp(why, bad[i].why, strlen(bad[i].why)), "case %zu: got \"%s\"", i, why);
    ck_assert_int_eq(ps.n, 0);
  }
}
END_TEST

START_TEST(user_files_from_the_environment) {
  char path[] = "/tmp/scree-presets-XXXXXX";
  const int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char text[] = "model mine -- my model\nrmsnorm rows={T},cols=5120\n";
  ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
  close(fd);
  setenv("SCREE_PRESETS", path, 1);
  scree__presets ps;
  char why[512];
  /* The file's lines see no T: variables are per file. */
  ck_assert_int_eq(scree__presets_load(NULL, &ps, why, sizeof why), SCREE_ERROR_PARSE);
  ck_assert_ptr_nonnull(strstr(why, ":2: {T}: a variable that no `let` defines"));
  FILE *f = fopen(path, "w");
  fputs("let T = 1..4\nmodel mine\nrmsnorm rows={T},cols=5120\n", f);
  fclose(f);
  ck_assert_int_eq(scree__presets_load(NULL, &ps, why, sizeof why), SCREE_OK);
  ck_assert_ptr_nonnull(scree__preset_find(&ps, "mine"));
  ck_assert_ptr_nonnull(scree__preset_find(&ps, "llama-3-8b"));
  scree__presets_free(&ps);
  setenv("SCREE_PRESETS", "/nonexistent/presets.txt", 1);
  ck_assert_int_eq(scree__presets_load(NULL, &ps, why, sizeof why), SCREE_ERROR_IO);
  ck_assert_ptr_nonnull(strstr(why, "/nonexistent/presets.txt"));
  unsetenv("SCREE_PRESETS");
  unlink(path);
}
END_TEST

SCREE_TEST_MAIN(.name = "presets",
                .tests = SCREE_TESTS(embedded_presets_cover_the_models, expressions_and_overrides,
                                     bad_files_name_the_line, user_files_from_the_environment))
