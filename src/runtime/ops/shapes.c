/* shapes.c - the row-wise shape lists of bench/rowwise_shapes.json, read by
 * scree-tune prewarm --shapes and the row-wise benchmark. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

/* The largest rows or cols a shapes file may give: 2^40, as prewarm's
 * --rows-max (past any GPU's memory; products of two stay far from
 * overflow). */
#define SHAPE_MAX ((long)1 << 40)

/* Reads one of a shape's values at s into *v, *end after it; -1 with the
 * reason in why when it is out of range, naming the value as written. */
static int read_value(const char *s, char **end, long *v, int shape, const char *name,
                      char *why, size_t why_size) {
  errno = 0;
  *v = strtol(s, end, 10);
  if (errno == ERANGE || *v > SHAPE_MAX) {
    while (isspace((unsigned char)*s)) s++; /* as strtol skipped them */
    scree__set_why(why, why_size, "shape %d: %s %.*s is out of range (1 to 2^40 = %ld)", shape,
                   name, (int)(*end - s < 64 ? *end - s : 64), s, SHAPE_MAX);
    return -1;
  }
  return 0;
}

int scree__parse_shapes(const char *json, long (*shapes)[2], int cap,
                        scree_dtype *dtypes, int dcap, int *ndtypes, char *why,
                        size_t why_size) {
  *ndtypes = 0;
  const char *d = strstr(json, "\"dtypes\"");
  if (d && (d = strchr(d, '['))) {
    for (const char *q = d + 1; *q && *q != ']'; q++) {
      if (*q != '"') continue;
      const char *e = strchr(q + 1, '"');
      if (!e) break;
      int found = -1;
      for (int k = 0; k < 3; k++)
        if (strlen(scree_dtype_name((scree_dtype)k)) == (size_t)(e - q - 1) &&
            !strncmp(q + 1, scree_dtype_name((scree_dtype)k), (size_t)(e - q - 1)))
          found = k;
      if (found < 0) {
        scree__set_why(why, why_size, "unknown dtype \"%.*s\"", (int)(e - q - 1), q + 1);
        return -1;
      }
      if (*ndtypes < dcap) dtypes[(*ndtypes)++] = (scree_dtype)found;
      q = e;
    }
  }
  const char *p = strstr(json, "\"shapes\"");
  if (!p || !(p = strchr(p, '['))) {
    scree__set_why(why, why_size, "expected a \"shapes\" list");
    return -1;
  }
  p++;
  int count = 0;
  for (;;) {
    while (*p && *p != '[' && *p != ']') p++;
    if (*p != '[') break;
    char *end;
    long r, c;
    if (read_value(p + 1, &end, &r, count + 1, "rows", why, why_size)) return -1;
    while (*end == ',' || *end == ' ' || *end == '\n' || *end == '\t' || *end == '\r') end++;
    if (read_value(end, &end, &c, count + 1, "cols", why, why_size)) return -1;
    while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r') end++;
    if (*end != ']' || r < 1 || c < 1) {
      scree__set_why(why, why_size, "shape %d: expected [rows, cols] of positive integers",
                     count + 1);
      return -1;
    }
    if (count < cap) shapes[count][0] = r, shapes[count][1] = c;
    count++;
    p = end + 1;
  }
  return count;
}
