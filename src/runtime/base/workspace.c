/* workspace.c - per-stream device scratch (e.g. a varlen op's tile
 * schedule), and per-stream counters that are zero whenever a launch
 * starts. Launches on one stream run in order, so one buffer per stream
 * is never used by two kernels at once; a buffer only grows, and is freed
 * with the context. */
#include <stdlib.h>

#include "base/base.h"

typedef struct ws_entry {
  CUstream stream;
  CUdeviceptr ptr;
  size_t size;
} ws_entry;

/* A stream's counters (SCREE__COUNTERS ints). */
typedef struct ctr_entry {
  CUstream stream;
  CUdeviceptr ptr;
} ctr_entry;

struct scree__workspaces {
  pthread_mutex_t lock;
  ws_entry *e;
  int n, cap;
  ctr_entry *c;
  int cn, ccap;
};

static pthread_mutex_t g_create = PTHREAD_MUTEX_INITIALIZER;

/* The context's tables, made on first use (NULL: out of memory). */
static struct scree__workspaces *tables_of(scree_context *ctx) {
  struct scree__workspaces *w = __atomic_load_n(&ctx->ws, __ATOMIC_ACQUIRE);
  if (w) return w;
  pthread_mutex_lock(&g_create);
  if (!(w = ctx->ws)) {
    w = calloc(1, sizeof *w);
    if (w) pthread_mutex_init(&w->lock, NULL);
    __atomic_store_n(&ctx->ws, w, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_create);
  return w;
}

scree_status scree__workspace(scree_context *ctx, CUstream stream, size_t bytes,
                              CUdeviceptr *out) {
  struct scree__workspaces *w = tables_of(ctx);
  if (!w) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
  if (bytes < 256) bytes = 256;
  pthread_mutex_lock(&w->lock);
  ws_entry *e = NULL;
  for (int i = 0; i < w->n; i++)
    if (w->e[i].stream == stream) e = &w->e[i];
  if (e && e->size >= bytes) {
    *out = e->ptr;
    pthread_mutex_unlock(&w->lock);
    return SCREE_OK;
  }
  if (!e) {
    if (w->n == w->cap) {
      const int cap = w->cap ? 2 * w->cap : 8;
      ws_entry *ne = realloc(w->e, (size_t)cap * sizeof *ne);
      if (!ne) {
        pthread_mutex_unlock(&w->lock);
        return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
      }
      w->e = ne;
      w->cap = cap;
    }
    e = &w->e[w->n++];
    *e = (ws_entry){stream, 0, 0};
  }
  if (e->ptr) {
    /* Kernels queued earlier on this stream may still read the old buffer. */
    CUresult r = ctx->cu->StreamSynchronize(stream);
    if (r) {
      pthread_mutex_unlock(&w->lock);
      return scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "workspace: cuStreamSynchronize");
    }
    ctx->cu->MemFree(e->ptr);
    e->ptr = 0;
    e->size = 0;
  }
  const size_t size = bytes + bytes / 2; /* room to grow */
  CUresult r = ctx->cu->MemAlloc(&e->ptr, size);
  if (r) {
    e->ptr = 0;
    pthread_mutex_unlock(&w->lock);
    return scree__cu_fail(ctx, r, SCREE_ERROR_OUT_OF_MEMORY, "workspace: cuMemAlloc");
  }
  e->size = size;
  *out = e->ptr;
  pthread_mutex_unlock(&w->lock);
  return SCREE_OK;
}

/* The counters keep a table of their own beside the scratch's: a stream's
 * counters are allocated once and never move. */
scree_status scree__stream_counters(scree_context *ctx, CUstream stream, CUdeviceptr *out) {
  struct scree__workspaces *w = tables_of(ctx);
  if (!w) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
  scree_status st = SCREE_OK;
  pthread_mutex_lock(&w->lock);
  for (int i = 0; i < w->cn; i++)
    if (w->c[i].stream == stream) {
      *out = w->c[i].ptr;
      pthread_mutex_unlock(&w->lock);
      return SCREE_OK;
    }
  if (w->cn == w->ccap) {
    const int cap = w->ccap ? 2 * w->ccap : 8;
    ctr_entry *nc = realloc(w->c, (size_t)cap * sizeof *nc);
    if (!nc) {
      pthread_mutex_unlock(&w->lock);
      return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "stream counters table");
    }
    w->c = nc;
    w->ccap = cap;
  }
  const size_t bytes = SCREE__COUNTERS * sizeof(int);
  CUdeviceptr p = 0;
  CUresult r = ctx->cu->MemAlloc(&p, bytes);
  if (r) {
    st = scree__cu_fail(ctx, r, SCREE_ERROR_OUT_OF_MEMORY, "stream counters: cuMemAlloc");
  } else if ((r = ctx->cu->MemsetD8Async(p, 0, bytes, stream))) {
    ctx->cu->MemFree(p);
    st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "stream counters: cuMemsetD8Async");
  } else {
    w->c[w->cn++] = (ctr_entry){stream, p};
    *out = p;
  }
  pthread_mutex_unlock(&w->lock);
  return st;
}

void scree__workspace_free(scree_context *ctx) {
  struct scree__workspaces *w = ctx->ws;
  if (!w) return;
  for (int i = 0; i < w->n; i++)
    if (w->e[i].ptr) ctx->cu->MemFree(w->e[i].ptr);
  for (int i = 0; i < w->cn; i++) ctx->cu->MemFree(w->c[i].ptr);
  free(w->e);
  free(w->c);
  pthread_mutex_destroy(&w->lock);
  free(w);
  ctx->ws = NULL;
}
