/* test_read_text.c - the shared file reader (scree__read_text in
 * src/runtime/base/util.c): whole regular files, and a clear refusal of anything
 * else without reading it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

/* A scratch directory per test, removed at its end. */
static char dir[64];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/scree-read-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* dir/name, in a static buffer. */
static const char *in_dir(const char *name) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

/* Expects read_text(path) to fail with errno err and why "<path>: <rest>". */
static void expect_refused(const char *path, int err, const char *rest) {
  char why[512] = "", want[512];
  errno = 0;
  char *text = scree__read_text(path, why, sizeof why);
  ck_assert_ptr_null(text);
  ck_assert_int_eq(errno, err);
  snprintf(want, sizeof want, "%s: %s", path, rest);
  ck_assert_str_eq(why, want);
  ck_assert_ptr_null(scree__read_text(path, NULL, 0)); /* why may be NULL */
}

START_TEST(regular_files_whole) {
  const char *path = in_dir("a.txt");
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  static char big[100000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (char)('a' + i % 26);
  ck_assert_uint_eq(fwrite(big, 1, sizeof big, f), sizeof big);
  fclose(f);
  char why[256] = "untouched";
  char *text = scree__read_text(path, why, sizeof why);
  ck_assert_ptr_nonnull(text);
  ck_assert_uint_eq(strlen(text), sizeof big);
  ck_assert_int_eq(memcmp(text, big, sizeof big), 0);
  free(text);
  /* An empty file is an empty string, not a failure. */
  f = fopen(path, "wb");
  fclose(f);
  text = scree__read_text(path, why, sizeof why);
  ck_assert_ptr_nonnull(text);
  ck_assert_str_eq(text, "");
  free(text);
}
END_TEST

START_TEST(missing_file) {
  expect_refused(in_dir("none.txt"), ENOENT, "No such file or directory");
}
END_TEST

/* ftell on a directory gave 2^63: the reader asked for that much memory
 * ("Cannot allocate memory"; AddressSanitizer: allocation-size-too-big). */
START_TEST(directory_refused) {
  expect_refused(dir, EISDIR, "a directory, not a regular file");
  expect_refused("/", EISDIR, "a directory, not a regular file");
}
END_TEST

/* A FIFO is refused without waiting for a writer, a device without being
 * read. */
START_TEST(other_files_refused) {
  const char *fifo = in_dir("fifo");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  expect_refused(fifo, EINVAL, "a FIFO, not a regular file");
  expect_refused("/dev/zero", EINVAL, "a device, not a regular file");
}
END_TEST

/* A NUL byte ended the text there for every line reader (a safelist's
 * deny line after it was never read): the file is refused, naming the
 * line. */
START_TEST(nul_byte_refused) {
  const char *path = in_dir("nul.txt");
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  static const char text[] = "one\ntwo\nth\0ree\n";
  ck_assert_uint_eq(fwrite(text, 1, sizeof text - 1, f), sizeof text - 1);
  fclose(f);
  char why[512];
  errno = 0;
  ck_assert_ptr_null(scree__read_text(path, why, sizeof why));
  ck_assert_int_eq(errno, EINVAL);
  char want[512];
  snprintf(want, sizeof want, "%s:3: a NUL byte (byte 11): not a text file", path);
  ck_assert_str_eq(why, want);
}
END_TEST

SCREE_TEST_MAIN(.name = "read_text", .setup = setup, .teardown = teardown,
                .tests = SCREE_TESTS(regular_files_whole, missing_file, directory_refused,
                                     other_files_refused, nul_byte_refused))
