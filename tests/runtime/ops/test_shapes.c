/* test_shapes.c - the shapes file of scree-tune prewarm --shapes and
 * bench_rowwise (scree__parse_shapes, src/runtime/ops/shapes.c): JSON read
 * by SQLite, so only the top-level keys count and malformed JSON is
 * refused with its line, column and reason (no GPU). */
#include <stdio.h>
#include <string.h>

#include "test_util.h"

static long shapes[8][2];
static scree_dtype dts[3];
static int ndt;
static char why[256];

static int parse(const char *json) {
  why[0] = 0;
  return scree__parse_shapes(json, shapes, 8, dts, 3, &ndt, why, sizeof why);
}

/* A "shapes" key inside another key is not the list: the hand-written
 * reader took the first "shapes" in the text and tuned rows<=1,cols=1. */
START_TEST(only_the_top_level_counts) {
  ck_assert_int_eq(parse("{\"about\": {\"shapes\": [[1, 1]], \"dtypes\": [\"fp32\"]},\n"
                         " \"shapes\": [[16, 4096]], \"dtypes\": [\"fp16\"]}"),
                   1);
  ck_assert_int_eq(shapes[0][0], 16);
  ck_assert_int_eq(shapes[0][1], 4096);
  ck_assert_int_eq(ndt, 1);
  ck_assert_int_eq(dts[0], SCREE_DTYPE_FP16);
  /* Nested only: there is no list. */
  ck_assert_int_eq(parse("{\"x\": {\"shapes\": [[1, 1]]}}"), -1);
  ck_assert_str_eq(why, "expected a \"shapes\" list at the top level");
  /* Given twice, neither is taken silently. */
  ck_assert_int_eq(parse("{\"shapes\": [[1, 2]], \"shapes\": [[3, 4]]}"), -1);
  ck_assert_str_eq(why, "\"shapes\" is given 2 times");
}
END_TEST

/* Malformed JSON is refused with its line and column: a trailing comma
 * was accepted. */
START_TEST(malformed_json_names_line_and_reason) {
  static const struct {
    const char *json, *why;
  } bad[] = {
      {"{\"shapes\": [[16, 4096],]}",
       "line 1, column 23: a comma before ] (JSON has no trailing commas)"},
      {"{\n \"shapes\": [[16, 4096]],\n}",
       "line 2, column 24: a comma before } (JSON has no trailing commas)"},
      {"{\n \"shapes\": [\n  [16, 4096]\n  [8, 4096]\n ]\n}",
       "line 4, column 3: expected , or ] after a list element"},
      {"{'shapes': [[1, 2]]}", "line 1, column 2: expected a key in double quotes, or }"},
      {"{\"shapes\": [[01, 2]]}", "line 1, column 14: a number with a leading zero"},
      {"{\"shapes\": [[1, 2]]", "line 1, column 20: the text ends inside an object"},
      {"{\"shapes\": [[1, 2]]} x", "line 1, column 22: more text after the end of the JSON value"},
      {"", "line 1, column 1: no JSON value (an empty file)"},
      {"{\"shapes\": [[1, 2]], \"about\": \"a\tb\"}",
       "line 1, column 33: a control character inside a string (write it as an escape)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(parse(bad[i].json) == -1, "%s was accepted", bad[i].json);
    ck_assert_msg(!strcmp(why, bad[i].why), "%s: \"%s\", expected \"%s\"", bad[i].json, why,
                  bad[i].why);
  }
}
END_TEST

/* Valid JSON of the wrong shape says what it found. */
START_TEST(wrong_types_say_what_they_are) {
  static const struct {
    const char *json, *why;
  } bad[] = {
      {"[[1, 2]]", "the file holds a list, not an object {\"shapes\": ...}"},
      {"{\"shapes\": {\"a\": 1}}", "\"shapes\" is an object, not a list of [rows, cols] pairs"},
      {"{\"shapes\": [[1.5, 2]]}", "shape 1: expected [rows, cols] of positive integers"},
      {"{\"shapes\": [[1, 2], [\"3\", 4]]}", "shape 2: expected [rows, cols] of positive integers"},
      {"{\"shapes\": [[1, 2]], \"dtypes\": \"fp16\"}",
       "\"dtypes\" is a string, not a list of dtype names"},
      {"{\"shapes\": [[1, 2]], \"dtypes\": [\"bf16\", 16]}",
       "dtype 2 is a number, not a dtype name in quotes"},
      {"{\"shapes\": [[1, 2]], \"dtypes\": [\"fp8\"]}", "unknown dtype \"fp8\" (fp32, fp16 or bf16)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(parse(bad[i].json) == -1, "%s was accepted", bad[i].json);
    ck_assert_msg(!strcmp(why, bad[i].why), "%s: \"%s\", expected \"%s\"", bad[i].json, why,
                  bad[i].why);
    ck_assert_int_eq(ndt, 0);
  }
  /* Whitespace, escapes and other keys of any type are fine. */
  ck_assert_int_eq(parse(" {\r\n\t\"about\": [null, true, false, -1.5e+3, \"\\u00e9\\n\"],"
                         " \"shapes\": [ [ 1 , 2 ] ] } \n"),
                   1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("shapes");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, only_the_top_level_counts);
  tcase_add_test(tc, malformed_json_names_line_and_reason);
  tcase_add_test(tc, wrong_types_say_what_they_are);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
