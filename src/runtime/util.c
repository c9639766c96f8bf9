/* util.c - small helpers the runtime, the tuner, the CLI and the tests
 * share: reason strings, embedded files, a parallel loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

void scree__set_why(char *why, size_t why_size, const char *fmt, ...) {
  if (!why || !why_size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_size, fmt, ap);
  va_end(ap);
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
  long nt = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
  if (nt < 1) nt = 1;
  if (nt > 32) nt = 32;
  if (nt > n) nt = n;
  pfor j = {.fn = fn, .user = user, .n = n};
  pthread_mutex_init(&j.lock, NULL);
  pthread_t th[32];
  int started = 0;
  for (long t = 1; t < nt; t++)
    if (pthread_create(&th[started], NULL, pfor_worker, &j) == 0) started++;
  pfor_worker(&j); /* the calling thread works too */
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&j.lock);
}

char *scree__read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    const long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
      if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
      } else {
        buf[n] = 0;
      }
    }
  }
  fclose(f);
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
