/* shapes.c - the row-wise shape lists of bench/rowwise_shapes.json, read by
 * scree-tune prewarm --shapes and the row-wise benchmark. */
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

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
    const long r = strtol(p + 1, &end, 10);
    while (*end == ',' || *end == ' ' || *end == '\n' || *end == '\t' || *end == '\r') end++;
    const long c = strtol(end, &end, 10);
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
