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
