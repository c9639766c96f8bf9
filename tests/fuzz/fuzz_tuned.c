/* fuzz_tuned.c - the shipped tuned configs' parser (src/runtime/store/tuned.c) on
 * any text. A file that parses holds only entries a cache row leaving its
 * file could be (scree__centry_check), and what scree__tuned_write makes of
 * them parses back to the same entries (docs/cache.md, "Shipped tuned
 * configs"). Seeds: tests/fuzz/corpus/tuned/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "store/tuned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstr(data, size);
  scree__tuned t = {0};
  char why[512];
  const scree_status st = scree__tuned_parse(text, "fuzz.txt", &t, why, sizeof why);
  free(text);
  if (st != SCREE_OK) {
    FUZZ_CHECK(t.n == 0, "a failed parse kept %d entries", t.n);
    FUZZ_CHECK(!strncmp(why, "fuzz.txt:", 9), "a reason without its line: %s", why);
    scree__tuned_free(&t);
    return 0;
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) abort();
  for (int i = 0; i < t.n; i++) {
    scree__centry e;
    memset(&e, 0, sizeof e);
    e.key = t.e[i].key;
    memcpy(e.config, t.e[i].config, sizeof e.config);
    memcpy(e.device_name, t.e[i].device, sizeof e.device_name);
    e.median_us = t.e[i].median_us;
    FUZZ_CHECK(scree__centry_check(&e, why, sizeof why), "line %d passed but: %s", t.e[i].line,
               why);
    FUZZ_CHECK(scree__tuned_write(f, &e) == 0, "write failed");
  }
  fclose(f);
  scree__tuned back = {0};
  FUZZ_CHECK(scree__tuned_parse(buf, "back.txt", &back, why, sizeof why) == SCREE_OK,
             "written entries do not parse back: %s", why);
  FUZZ_CHECK(back.n == t.n, "%d entries came back of %d", back.n, t.n);
  for (int i = 0; i < t.n; i++) {
    FUZZ_CHECK(!memcmp(&back.e[i].key, &t.e[i].key, sizeof t.e[i].key), "entry %d: key", i);
    FUZZ_CHECK(!strcmp(back.e[i].config, t.e[i].config), "entry %d: config", i);
    FUZZ_CHECK(!strcmp(back.e[i].device, t.e[i].device), "entry %d: device", i);
    /* Written with three decimals (six significant digits below a
     * nanosecond, nine from 1e12 us up). */
    const double a = back.e[i].median_us, b = t.e[i].median_us;
    FUZZ_CHECK(a > 0 && (a - b < 1e-3 + 1e-6 * b) && (b - a < 1e-3 + 1e-6 * b),
               "entry %d: %g came back as %g", i, b, a);
  }
  free(buf);
  scree__tuned_free(&back);
  scree__tuned_free(&t);
  return 0;
}
