/* fuzz.h - what the libFuzzer harnesses of tests/fuzz share: the entry
 * point's declaration, the input as a C string, and a failed invariant.
 * Each fuzz_<target>.c is built twice: with clang and libFuzzer
 * (-DSCREE_FUZZ=ON, tests/fuzz/run.sh), and with the normal compiler into
 * replay_<target>, which runs the seed corpus and the regression inputs as
 * an ordinary CPU test (replay.c). */
#ifndef SCREE_FUZZ_H
#define SCREE_FUZZ_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The harness: one input, any bytes. Returns 0 (libFuzzer's convention). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated malloc'd copy of the input (the parsers read C strings,
 * so they see it up to its first NUL byte). Aborts if memory runs out. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  if (size) memcpy(s, data, size);
  s[size] = 0;
  return s;
}

/* A broken invariant: says which, then aborts (libFuzzer keeps the input as
 * a crash; the replay test fails). */
static inline void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void fuzz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fuzz invariant failed: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

/* Fails with the message (a printf format and its arguments) unless cond. */
#define FUZZ_CHECK(cond, ...)              \
  do {                                     \
    if (!(cond)) fuzz_fail(__VA_ARGS__);   \
  } while (0)

#endif
