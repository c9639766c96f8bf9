/* fuzz_shapes.c - the shapes-file reader (scree__parse_shapes in
 * src/runtime/ops/shapes.c, scree-tune prewarm --shapes and bench_rowwise) on any
 * text. It is read twice, with room for every shape and for one: the two
 * must agree, as the callers rely on (shapes past cap are counted, not
 * stored); text that SQLite's JSON parser refuses is refused with the line
 * and column that the reader's own scan locates. Seeds: tests/fuzz/corpus/shapes/. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "ops/op.h"

/* Room for as many shapes as scree-tune prewarm takes. */
#define CAP 256

/* Reads the input twice, with room for CAP shapes and for one. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *json = fuzz_cstr(data, size);
  static long shapes[CAP][2], one[1][2];
  scree_dtype dts[3], dt1[1];
  int ndt = -1, ndt1 = -1;
  char why[256] = "", why1[256] = "";
  const int n = scree__parse_shapes(json, shapes, CAP, dts, 3, &ndt, why, sizeof why);
  const int n1 = scree__parse_shapes(json, one, 1, dt1, 1, &ndt1, why1, sizeof why1);
  FUZZ_CHECK(n == n1, "%d shapes with room for %d, %d with room for 1", n, CAP, n1);
  FUZZ_CHECK(n >= -1, "returned %d", n);
  if (n < 0) {
    FUZZ_CHECK(why[0] && !strcmp(why, why1), "failed with \"%s\", then \"%s\"", why, why1);
    /* Where SQLite refuses the text, the scan of shapes.c finds why. */
    FUZZ_CHECK(strncmp(why, "not JSON that SQLite", 20), "no line for what SQLite refused: %s",
               why);
  } else {
    for (int i = 0; i < n && i < CAP; i++)
      FUZZ_CHECK(shapes[i][0] >= 1 && shapes[i][1] >= 1, "shape %d is [%ld, %ld]", i + 1,
                 shapes[i][0], shapes[i][1]);
    if (n > 0)
      FUZZ_CHECK(one[0][0] == shapes[0][0] && one[0][1] == shapes[0][1],
                 "the first shape differs with less room");
  }
  FUZZ_CHECK(ndt >= 0 && ndt <= 3 && ndt1 >= 0 && ndt1 <= 1, "%d and %d dtypes", ndt, ndt1);
  if (n >= 0) {
    FUZZ_CHECK(ndt1 == (ndt > 0), "%d dtypes with room for 3, %d with room for 1", ndt, ndt1);
    for (int k = 0; k < ndt; k++)
      FUZZ_CHECK(dts[k] == SCREE_DTYPE_FP32 || dts[k] == SCREE_DTYPE_FP16 ||
                     dts[k] == SCREE_DTYPE_BF16,
                 "dtype %d is %d", k, (int)dts[k]);
    if (ndt) FUZZ_CHECK(dt1[0] == dts[0], "the first dtype differs with less room");
  }
  free(json);
  return 0;
}
