/* replay.c - runs inputs through a harness's LLVMFuzzerTestOneInput without
 * libFuzzer, built with the normal compiler: replay_<target> is the CPU test
 * test_fuzz_<target>, which replays tests/fuzz/regressions/<target>/ (the
 * inputs of bugs the fuzzers found) and tests/fuzz/corpus/<target>/.
 *
 *   replay_<target> PATH...
 *
 * Each PATH is a file or a directory whose files are replayed in name
 * order; a directory that does not exist counts as empty (a target with no
 * regressions has none). A harness aborts on a broken invariant, so the
 * test fails with the input's name printed just before. Fails if no input
 * was replayed at all. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Reads the whole file; NULL (with errno) if it cannot. */
static uint8_t *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 4096;
      uint8_t *b = realloc(buf, cap);
      if (!b) abort();
      buf = b;
    }
    const size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  const int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    errno = EIO;
    return NULL;
  }
  *size = n;
  return buf;
}

/* Replays one file; returns 1, or 0 (with a message) if it cannot be read. */
static int replay_file(const char *path) {
  size_t size = 0;
  uint8_t *data = read_file(path, &size);
  if (!data) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return 0;
  }
  fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
  LLVMFuzzerTestOneInput(data, size);
  free(data);
  return 1;
}

/* Only plain, visible file names (no README or editor leftovers). */
static int is_input(const struct dirent *d) { return d->d_name[0] != '.'; }

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PATH...\n", argv[0]);
    return 2;
  }
  int total = 0, failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      if (errno != ENOENT) {
        fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
        failed++;
      }
      printf("%s: not there, nothing to replay\n", argv[i]);
      continue;
    }
    if (!S_ISDIR(sb.st_mode)) {
      if (replay_file(argv[i])) total++;
      else failed++;
      continue;
    }
    struct dirent **names;
    const int n = scandir(argv[i], &names, is_input, alphasort);
    if (n < 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      failed++;
      continue;
    }
    int count = 0;
    for (int k = 0; k < n; k++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
      if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        if (replay_file(path)) count++;
        else failed++;
      }
      free(names[k]);
    }
    free(names);
    printf("%s: %d input(s) replayed\n", argv[i], count);
    total += count;
  }
  if (!total) fprintf(stderr, "replay: no input replayed\n");
  return failed || !total ? 1 : 0;
}
