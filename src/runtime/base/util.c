/* util.c - small helpers the runtime, the tuner, the CLI and the tests
 * share: reason strings, embedded files, a parallel loop. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

void scree__set_why(char *why, size_t why_size, const char *fmt, ...) {
  if (!why || !why_size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_size, fmt, ap);
  va_end(ap);
}

int scree__utf8_char(const char *p, size_t n, unsigned *cp) {
  const unsigned char *u = (const unsigned char *)p;
  if (!n) return 0;
  if (u[0] < 0x80) {
    *cp = u[0];
    return 1;
  }
  const int len = u[0] >= 0xc2 && u[0] <= 0xdf ? 2
                  : u[0] >= 0xe0 && u[0] <= 0xef ? 3
                  : u[0] >= 0xf0 && u[0] <= 0xf4 ? 4
                                                 : 0;
  if (!len || (size_t)len > n) return 0;
  unsigned c = u[0] & (0x7f >> len);
  for (int i = 1; i < len; i++) {
    if ((u[i] & 0xc0) != 0x80) return 0;
    c = c << 6 | (u[i] & 0x3f);
  }
  /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
  if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
      (c >= 0xd800 && c <= 0xdfff))
    return 0;
  *cp = c;
  return len;
}

int scree__unsafe_char(unsigned cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e ||
         cp == 0x200f || cp == 0x061c;
}

char *scree__escape_text(char *dst, size_t size, const char *src) {
  if (!size) return dst;
  size_t o = 0;
  const size_t n = src ? strlen(src) : 0;
  for (size_t i = 0; i < n;) {
    unsigned cp;
    const int len = scree__utf8_char(src + i, n - i, &cp);
    if (len && !scree__unsafe_char(cp)) {
      if (o + (size_t)len >= size) break;
      memcpy(dst + o, src + i, (size_t)len);
      o += (size_t)len;
      i += (size_t)len;
      continue;
    }
    /* One \xNN per byte of the character (or the one bad byte). */
    const int nb = len ? len : 1;
    if (o + 4 * (size_t)nb >= size) break;
    for (int b = 0; b < nb; b++, o += 4)
      snprintf(dst + o, 5, "\\x%02x", (unsigned char)src[i + (size_t)b]);
    i += (size_t)nb;
  }
  dst[o] = 0;
  return dst;
}

char *scree__embedded_text(const scree__embedded *table, size_t count,
                           const char *name) {
  for (size_t i = 0; i < count; i++) {
    if (strcmp(table[i].name, name)) continue;
    char *s = malloc(table[i].size + 1);
    if (!s) return NULL;
    memcpy(s, table[i].data, table[i].size);
    s[table[i].size] = 0;
    return s;
  }
  return NULL;
}

scree_status scree__embedded_each(const scree__embedded *table, size_t count,
                                  scree_status (*fn)(void *user, const char *name, char *text),
                                  void *user) {
  scree_status st = SCREE_OK;
  for (size_t i = 0; i < count && !st; i++) {
    char *text = scree__embedded_text(table, count, table[i].name);
    if (!text) return SCREE_ERROR_OUT_OF_MEMORY;
    char name[128];
    snprintf(name, sizeof name, "embedded:%s", table[i].name);
    st = fn(user, name, text);
    free(text);
  }
  return st;
}

scree_status scree__path_list_each(const char *list,
                                   scree_status (*fn)(void *user, const char *path),
                                   void *user) {
  char *copy = strdup(list);
  if (!copy) return SCREE_ERROR_OUT_OF_MEMORY;
  scree_status st = SCREE_OK;
  char *save = NULL;
  for (char *p = strtok_r(copy, ":", &save); p && !st; p = strtok_r(NULL, ":", &save))
    st = fn(user, p);
  free(copy);
  return st;
}

typedef struct pfor {
  void (*fn)(void *user, int i);
  void *user;
  int n, next;
  pthread_mutex_t lock;
} pfor;

static void *pfor_worker(void *p) {
  pfor *j = p;
  for (;;) {
    pthread_mutex_lock(&j->lock);
    const int i = j->next++;
    pthread_mutex_unlock(&j->lock);
    if (i >= j->n) return NULL;
    j->fn(j->user, i);
  }
}

void scree__parallel_for(int n, int threads, void (*fn)(void *user, int i),
                         void *user) {
  if (n <= 0) return;
  long nt = threads > 0 ? threads : scree__jobs(NULL, 0);
  if (nt < 1) nt = 1;
  if (nt > SCREE__MAX_JOBS) nt = SCREE__MAX_JOBS;
  if (nt > n) nt = n;
  pfor j = {.fn = fn, .user = user, .n = n};
  pthread_mutex_init(&j.lock, NULL);
  /* Without room for the threads' handles, the calling thread does it all. */
  pthread_t *th = nt > 1 ? malloc((size_t)(nt - 1) * sizeof *th) : NULL;
  int started = 0;
  for (long t = 1; th && t < nt; t++)
    if (pthread_create(&th[started], NULL, pfor_worker, &j) == 0) started++;
  pfor_worker(&j); /* the calling thread works too */
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  free(th);
  pthread_mutex_destroy(&j.lock);
}

/* read_text's failure, its reason already in why: frees buf, closes fd (if
 * open), sets errno to err and returns NULL. */
static char *read_failed(int fd, char *buf, int err) {
  free(buf);
  if (fd >= 0) close(fd);
  errno = err;
  return NULL;
}

char *scree__read_text(const char *path, char *why, size_t why_size) {
  /* O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused
   * below); a regular file reads the same. */
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    const int err = errno;
    scree__set_why(why, why_size, "%s: %s", path, strerror(err));
    return read_failed(fd, NULL, err);
  }
  /* A directory's or a device's size is not its contents' (ftell on a
   * directory gave 2^63 bytes to allocate). */
  if (!S_ISREG(sb.st_mode)) {
    const char *kind = S_ISDIR(sb.st_mode)    ? "a directory"
                       : S_ISFIFO(sb.st_mode) ? "a FIFO"
                                              : "a device"; /* open() fails on a socket */
    scree__set_why(why, why_size, "%s: %s, not a regular file", path, kind);
    return read_failed(fd, NULL, S_ISDIR(sb.st_mode) ? EISDIR : EINVAL);
  }
  const size_t n = (size_t)sb.st_size;
  char *buf = malloc(n + 1);
  if (!buf) {
    scree__set_why(why, why_size, "%s: out of memory for its %zu bytes", path, n);
    return read_failed(fd, NULL, ENOMEM);
  }
  for (size_t got = 0; got < n;) {
    const ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      scree__set_why(why, why_size, "%s: %s", path, strerror(err));
      return read_failed(fd, buf, err);
    }
    if (r == 0) {
      scree__set_why(why, why_size, "%s: ended after %zu of its %zu bytes (changed while read)",
                     path, got, n);
      return read_failed(fd, buf, EIO);
    }
    got += (size_t)r;
  }
  buf[n] = 0;
  close(fd);
  /* Every reader takes the text line by line as C strings: a NUL byte
   * would silently end the file there (a `deny` line after it unread). */
  const char *nul = memchr(buf, 0, n);
  if (nul) {
    int line = 1;
    for (const char *p = buf; p < nul; p++) line += *p == '\n';
    scree__set_why(why, why_size, "%s:%d: a NUL byte (byte %zu): not a text file", path, line,
                   (size_t)(nul - buf) + 1);
    return read_failed(-1, buf, EINVAL);
  }
  return buf;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

double scree__median(float *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_float);
  return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + v[n / 2]);
}

double scree__now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

uint64_t scree__fresh_seed(void) {
  static uint64_t draws;
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  uint64_t s = ((uint64_t)t.tv_sec * 1000000007ull) ^ (uint64_t)t.tv_nsec ^
               ((uint64_t)getpid() << 32);
  s += 0x9e3779b97f4a7c15ull * (__atomic_fetch_add(&draws, 1, __ATOMIC_RELAXED) + 1);
  return s ? s : 1;
}

uint64_t scree__rand(uint64_t *s) {
  if (!*s) *s = 0x9e3779b97f4a7c15ull;
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

int64_t scree__rand_len(uint64_t *s, int64_t hi) {
  const double u = (double)(scree__rand(s) >> 11) / 9007199254740992.0;
  const int64_t v = (int64_t)(exp(log((double)hi / 8) + u * log(8.0)) + 0.5);
  return v < 1 ? 1 : v > hi ? hi : v;
}

int scree__tune_lens(int64_t total, int64_t longest, uint64_t seed, int64_t *l, int cap) {
  if (longest < 1) longest = 1;
  if (total < longest) total = longest;
  int64_t sum = 0;
  int n = 0;
  uint64_t s = seed | 1;
  while (n < cap && sum < total) {
    int64_t v = n > 0 ? scree__rand_len(&s, longest) : longest;
    if (v > total - sum) v = total - sum;
    l[n++] = v;
    sum += v;
  }
  return n;
}

int scree__check_lens(int64_t cols, int64_t longest, int64_t *l) {
  static const int64_t want[SCREE__CHECK_LENS_MAX] = {
      0, 1, -1, 17, 2, 65, 129, 257, 0, 3, 16, 15, 33, 64, 63, 128, 127, 31, 32, 255, 256, 7};
  int64_t budget = ((int64_t)1 << 24) / cols;
  if (budget < 256) budget = 256;
  if (longest < 1) longest = 1000; /* not given */
  int64_t lng = longest < 1000 ? longest : 1000;
  if (lng > budget / 2) lng = budget / 2;
  int n = 0;
  for (size_t i = 0; i < SCREE__CHECK_LENS_MAX; i++) {
    int64_t v = want[i] < 0 ? lng : want[i];
    if (v > longest) v = longest;
    if (v > budget) continue;
    budget -= v;
    l[n++] = v;
  }
  return n;
}

double scree__rand_normal(uint64_t *s) {
  const double u0 = ((double)(scree__rand(s) >> 11) + 0.5) / 9007199254740992.0;
  const double u1 = ((double)(scree__rand(s) >> 11) + 0.5) / 9007199254740992.0;
  return sqrt(-2 * log(u0)) * cos(6.283185307179586 * u1);
}
