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
  CUdeviceptr counters; /* SCREE__COUNTERS ints, 0 until first asked for */
} ws_entry;

struct scree__workspaces {
  pthread_mutex_t lock;
  ws_entry *e;
  int n, cap;
};

static pthread_mutex_t g_create = PTHREAD_MUTEX_INITIALIZER;

/* The table, created on first use; NULL when out of memory (recorded). */
static struct scree__workspaces *table(scree_context *ctx) {
  if (!ctx->ws) {
    pthread_mutex_lock(&g_create);
    if (!ctx->ws) {
      struct scree__workspaces *w = calloc(1, sizeof *w);
      if (w) pthread_mutex_init(&w->lock, NULL);
      __atomic_store_n(&ctx->ws, w, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_create);
    if (!ctx->ws) scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
  }
  return ctx->ws;
}

/* The stream's entry, added if new; the table's lock held. NULL when out
 * of memory (recorded). */
static ws_entry *entry(scree_context *ctx, struct scree__workspaces *w, CUstream stream) {
  for (int i = 0; i < w->n; i++)
    if (w->e[i].stream == stream) return &w->e[i];
  if (w->n == w->cap) {
    const int cap = w->cap ? 2 * w->cap : 8;
    ws_entry *ne = realloc(w->e, (size_t)cap * sizeof *ne);
    if (!ne) {
      scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
      return NULL;
    }
    w->e = ne;
    w->cap = cap;
  }
  ws_entry *e = &w->e[w->n++];
  *e = (ws_entry){stream, 0, 0, 0};
  return e;
}

scree_status scree__workspace(scree_context *ctx, CUstream stream, size_t bytes,
                              CUdeviceptr *out) {
  struct scree__workspaces *w = table(ctx);
  if (!w) return SCREE_ERROR_OUT_OF_MEMORY;
  if (bytes < 256) bytes = 256;
  pthread_mutex_lock(&w->lock);
  ws_entry *e = entry(ctx, w, stream);
  if (!e) {
    pthread_mutex_unlock(&w->lock);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  if (e->size >= bytes) {
    *out = e->ptr;
    pthread_mutex_unlock(&w->lock);
    return SCREE_OK;
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

scree_status scree__stream_counters(scree_context *ctx, CUstream stream, CUdeviceptr *out) {
  struct scree__workspaces *w = table(ctx);
  if (!w) return SCREE_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&w->lock);
  ws_entry *e = entry(ctx, w, stream);
  scree_status st = e ? SCREE_OK : SCREE_ERROR_OUT_OF_MEMORY;
  if (e && !e->counters) {
    const size_t bytes = SCREE__COUNTERS * sizeof(int);
    CUresult r = ctx->cu->MemAlloc(&e->counters, bytes);
    if (r) {
      e->counters = 0;
      st = scree__cu_fail(ctx, r, SCREE_ERROR_OUT_OF_MEMORY, "stream counters: cuMemAlloc");
    } else if ((r = ctx->cu->MemsetD8Async(e->counters, 0, bytes, stream))) {
      ctx->cu->MemFree(e->counters);
      e->counters = 0;
      st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "stream counters: cuMemsetD8Async");
    }
  }
  if (!st) *out = e->counters;
  pthread_mutex_unlock(&w->lock);
  return st;
}

void scree__workspace_free(scree_context *ctx) {
  struct scree__workspaces *w = ctx->ws;
  if (!w) return;
  for (int i = 0; i < w->n; i++) {
    if (w->e[i].ptr) ctx->cu->MemFree(w->e[i].ptr);
    if (w->e[i].counters) ctx->cu->MemFree(w->e[i].counters);
  }
  free(w->e);
  pthread_mutex_destroy(&w->lock);
  free(w);
  ctx->ws = NULL;
}
