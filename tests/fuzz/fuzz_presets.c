/* fuzz_presets.c - the model presets' parser (src/runtime/ops/presets.c) on any
 * text. A file that parses expands, for every model and dtype, into call
 * shapes that each parse as their op's shape (and variant), within the
 * bounds of presets.h; a failed parse leaves nothing behind and names its
 * line (docs/cli.md, "Model presets"). Seeds: tests/fuzz/corpus/presets/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "ops/presets.h"

typedef struct seen {
  long n;
} seen;

static int check(void *user, const scree__preset_line *l, const char *shape,
                 const char *variant) {
  seen *s = user;
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  memset(args, 0, sizeof args);
  char why[256];
  FUZZ_CHECK(scree__shape_parse(l->op, shape, args, why, sizeof why) == 0,
             "line %d: %s does not parse: %s", l->line, shape, why);
  scree__variant var;
  FUZZ_CHECK(!variant || scree__variant_parse(l->op, variant, &var, why, sizeof why) == 0,
             "line %d: %s does not parse: %s", l->line, variant, why);
  /* A preset can ask for many shapes (64 values of 16 variables), but
   * the fuzzer need not walk them all. */
  return ++s->n > 100000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstr(data, size);
  scree__presets ps = {0};
  char why[512];
  const scree_status st = scree__presets_parse(text, "fuzz.txt", &ps, why, sizeof why);
  free(text);
  if (st != SCREE_OK) {
    FUZZ_CHECK(ps.n == 0 && !ps.p, "a failed parse kept %d presets", ps.n);
    FUZZ_CHECK(!strncmp(why, "fuzz.txt:", 9), "a reason without its line: %s", why);
    return 0;
  }
  static const scree_dtype dts[3] = {SCREE_DTYPE_FP32, SCREE_DTYPE_FP16, SCREE_DTYPE_BF16};
  for (int i = 0; i < ps.n; i++) {
    FUZZ_CHECK(ps.p[i].nlines > 0 && ps.p[i].nlines <= SCREE__PRESET_MAX_LINES,
               "model %s: %d lines", ps.p[i].name, ps.p[i].nlines);
    FUZZ_CHECK(scree__preset_find(&ps, ps.p[i].name) == &ps.p[i], "model %s twice",
               ps.p[i].name);
    for (int d = 0; d < 3; d++) {
      seen s = {0};
      scree__preset_expand(&ps.p[i], dts[d], check, &s);
    }
  }
  scree__presets_free(&ps);
  return 0;
}
