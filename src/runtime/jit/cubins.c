/* cubins.c - the cubins the tuner compiles, shared by every context of the
 * process: one compile per (NVRTC, target, op, config, variant). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "jit/jit.h"

/* What identifies a cubin within the process. The kernel sources and the
 * fixed options are the process's own (scree__kernel_source keeps them
 * for the process), so the op, its config and variant, the target and the
 * NVRTC library name everything that changes the bytes. Zeroed before
 * filling: it is hashed bytewise. */
typedef struct ckey {
  const scree__nvrtc_api *nvrtc;
  char target[16];
  scree__kkey k;
} ckey;

/* One compile, done or under way; the table keeps pointers to these, so
 * they do not move while a waiter looks at them. */
typedef struct centry {
  int busy;        /* a thread is compiling it; the others wait on g_done */
  int waiters;     /* callers waiting for it */
  int detached;    /* out of the table (a failure not the config's): the last waiter frees it */
  scree_status st; /* once done */
  void *cubin;     /* st == SCREE_OK */
  size_t size;
  char *log;       /* st != SCREE_OK: NVRTC's log (may be NULL) */
} centry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER;
static scree__htab g_tab; /* ckey -> centry * (NULL: none now); under g_lock */
static int g_ready, g_holders;
static uint64_t g_compiles, g_reuses;

static void free_table(void) {
  size_t pos = 0;
  void *v;
  while (scree__htab_next(&g_tab, &pos, NULL, &v)) {
    centry *e = *(centry **)v;
    if (!e) continue;
    free(e->cubin);
    free(e->log);
    free(e);
  }
  scree__htab_free(&g_tab);
  g_ready = 0;
}

void scree__cubins_hold(void) {
  pthread_mutex_lock(&g_lock);
  g_holders++;
  pthread_mutex_unlock(&g_lock);
}

void scree__cubins_release(void) {
  pthread_mutex_lock(&g_lock);
  if (g_holders > 0 && --g_holders == 0 && g_ready) free_table();
  pthread_mutex_unlock(&g_lock);
}

void scree__cubins_stats(uint64_t *compiles, uint64_t *reuses) {
  pthread_mutex_lock(&g_lock);
  if (compiles) *compiles = g_compiles;
  if (reuses) *reuses = g_reuses;
  pthread_mutex_unlock(&g_lock);
}

static char *dup_bytes(const void *p, size_t n) {
  char *s = p ? malloc(n) : NULL;
  if (s) memcpy(s, p, n);
  return s;
}

/* The caller's copy of a finished entry (under g_lock). */
static scree_status copy_out(const centry *e, void **cubin, size_t *size, char **log) {
  if (e->st != SCREE_OK) {
    if (log && e->log) *log = dup_bytes(e->log, strlen(e->log) + 1);
    return e->st;
  }
  if (!(*cubin = dup_bytes(e->cubin, e->size))) return SCREE_ERROR_OUT_OF_MEMORY;
  *size = e->size;
  return SCREE_OK;
}

scree_status scree__cubin_get(const scree__nvrtc_api *nv, const scree__op *op,
                              const scree__config *cfg, const scree__variant *var,
                              const char *target, void **cubin, size_t *cubin_size,
                              char **log, int *compiled) {
  *cubin = NULL;
  *cubin_size = 0;
  if (log) *log = NULL;
  if (compiled) *compiled = 0;
  if (!nv) return SCREE_ERROR_NO_NVRTC;
  ckey key;
  memset(&key, 0, sizeof key);
  key.nvrtc = nv;
  strncpy(key.target, target, sizeof key.target - 1);
  key.k = scree__kkey_of(op, cfg, var);

  pthread_mutex_lock(&g_lock);
  if (!g_ready) {
    scree__htab_init(&g_tab, sizeof(ckey), sizeof(centry *));
    g_ready = 1;
  }
  centry **slot = scree__htab_find(&g_tab, &key);
  centry *e = slot ? *slot : NULL;
  if (e) {
    /* Compiled, or being compiled: wait for that compile and take its
     * result, whatever it is. */
    e->waiters++;
    while (e->busy) pthread_cond_wait(&g_done, &g_lock);
    e->waiters--;
    g_reuses++;
    const scree_status st = copy_out(e, cubin, cubin_size, log);
    if (e->detached && !e->waiters) {
      free(e->log);
      free(e);
    }
    pthread_mutex_unlock(&g_lock);
    return st;
  }
  e = calloc(1, sizeof *e);
  if (e && slot) {
    *slot = e;
  } else if (!e || !scree__htab_insert(&g_tab, &key, &e)) {
    pthread_mutex_unlock(&g_lock);
    free(e);
    /* No room to share it: compile it alone. */
    if (compiled) *compiled = 1;
    return scree__compile(nv, op, cfg, var, target, NULL, cubin, cubin_size, log);
  }
  /* This thread compiles it: outside the lock, so that other keys compile
   * meanwhile; callers of this key wait for it. */
  e->busy = 1;
  g_compiles++;
  pthread_mutex_unlock(&g_lock);

  void *bytes = NULL;
  size_t size = 0;
  char *why = NULL;
  const scree_status st = scree__compile(nv, op, cfg, var, target, NULL, &bytes, &size, &why);
  if (compiled) *compiled = 1;

  pthread_mutex_lock(&g_lock);
  e->st = st;
  e->cubin = bytes;
  e->size = size;
  e->log = st != SCREE_OK ? why : NULL;
  e->busy = 0;
  pthread_cond_broadcast(&g_done);
  scree_status out = st;
  if (st == SCREE_OK) {
    out = copy_out(e, cubin, cubin_size, NULL);
    if (log)
      *log = why; /* warnings and ptxas' report, for the compiler only */
    else
      free(why);
  } else if (log && why) {
    *log = dup_bytes(why, strlen(why) + 1);
  }
  /* A compilation error or a config the implementation refuses is the
   * config's and comes again: it stays, as a cubin does. Running out of
   * memory or an NVRTC failure may not: the callers waiting now get it,
   * and the next caller compiles again. */
  if (st != SCREE_OK && st != SCREE_ERROR_COMPILE && st != SCREE_ERROR_INVALID_CONFIG) {
    centry **at = scree__htab_find(&g_tab, &key); /* the table may have grown */
    if (at) *at = NULL;
    e->detached = 1;
    if (!e->waiters) {
      free(e->log);
      free(e);
    }
  }
  pthread_mutex_unlock(&g_lock);
  return out;
}
