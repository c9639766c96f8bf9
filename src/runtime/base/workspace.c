/* workspace.c - per-stream device scratch (e.g. a varlen op's tile
 * schedule), and per-stream counters that are zero whenever a launch
 * starts. Launches on one stream run in order, so one buffer per stream
 * is never used by two kernels at once; a buffer only grows, and is freed
 * with the context. */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

/* A stream's buffer: ptr 0 until it is allocated. */
typedef struct ws_entry {
  CUstream stream;
  CUdeviceptr ptr;
  size_t size;
} ws_entry;

/* One entry per stream. */
typedef struct ws_table {
  ws_entry *e;
  int n, cap;
} ws_table;

struct scree__workspaces {
  pthread_mutex_t lock;
  ws_table scratch;  /* grows with the largest request */
  ws_table counters; /* SCREE__COUNTERS ints each, allocated once, never moved */
  ws_table zeroed;   /* kept zero by the kernels that use it; grows */
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

/* The entry of stream in t (lock held), added with no buffer if there is
 * none; NULL when out of memory. */
static ws_entry *entry_of(ws_table *t, CUstream stream) {
  for (int i = 0; i < t->n; i++)
    if (t->e[i].stream == stream) return &t->e[i];
  if (t->n == t->cap) {
    const int cap = t->cap ? 2 * t->cap : 8;
    ws_entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
    if (!ne) return NULL;
    t->e = ne;
    t->cap = cap;
  }
  ws_entry *e = &t->e[t->n++];
  *e = (ws_entry){stream, 0, 0};
  return e;
}

/* A buffer of at least bytes from table t's entry for stream (lock
 * taken here); a larger one replaces it once the stream's queued work is
 * done with it, zeroed on the stream when zero is set. what names the
 * buffer in messages. */
static scree_status grow(scree_context *ctx, struct scree__workspaces *w, ws_table *t,
                         CUstream stream, size_t bytes, int zero, const char *what,
                         CUdeviceptr *out) {
  if (bytes < 256) bytes = 256;
  scree_status st = SCREE_OK;
  CUresult r;
  char msg[96];
  pthread_mutex_lock(&w->lock);
  ws_entry *e = entry_of(t, stream);
  if (!e) {
    st = scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "%s table", what);
  } else if (e->size >= bytes) {
    *out = e->ptr;
  } else if (e->ptr && (r = ctx->cu->StreamSynchronize(stream))) {
    /* Kernels queued earlier on this stream may still use the old buffer. */
    snprintf(msg, sizeof msg, "%s: cuStreamSynchronize", what);
    st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, msg);
  } else {
    if (e->ptr) ctx->cu->MemFree(e->ptr);
    e->ptr = 0;
    e->size = 0;
    const size_t size = bytes + bytes / 2; /* room to grow */
    if ((r = ctx->cu->MemAlloc(&e->ptr, size))) {
      e->ptr = 0;
      snprintf(msg, sizeof msg, "%s: cuMemAlloc", what);
      st = scree__cu_fail(ctx, r, SCREE_ERROR_OUT_OF_MEMORY, msg);
    } else if (zero && (r = ctx->cu->MemsetD8Async(e->ptr, 0, size, stream))) {
      ctx->cu->MemFree(e->ptr);
      e->ptr = 0;
      snprintf(msg, sizeof msg, "%s: cuMemsetD8Async", what);
      st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, msg);
    } else {
      e->size = size;
      *out = e->ptr;
    }
  }
  pthread_mutex_unlock(&w->lock);
  return st;
}

scree_status scree__workspace(scree_context *ctx, CUstream stream, size_t bytes,
                              CUdeviceptr *out) {
  struct scree__workspaces *w = tables_of(ctx);
  if (!w) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
  return grow(ctx, w, &w->scratch, stream, bytes, 0, "workspace", out);
}

/* The counters keep a table of their own beside the scratch's: a stream's
 * counters are allocated once and never move. */
scree_status scree__stream_counters(scree_context *ctx, CUstream stream, CUdeviceptr *out) {
  struct scree__workspaces *w = tables_of(ctx);
  if (!w) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
  scree_status st = SCREE_OK;
  pthread_mutex_lock(&w->lock);
  ws_entry *e = entry_of(&w->counters, stream);
  const size_t bytes = SCREE__COUNTERS * sizeof(int);
  CUresult r;
  if (!e) {
    st = scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "stream counters table");
  } else if (e->ptr) {
    *out = e->ptr;
  } else if ((r = ctx->cu->MemAlloc(&e->ptr, bytes))) {
    e->ptr = 0;
    st = scree__cu_fail(ctx, r, SCREE_ERROR_OUT_OF_MEMORY, "stream counters: cuMemAlloc");
  } else if ((r = ctx->cu->MemsetD8Async(e->ptr, 0, bytes, stream))) {
    ctx->cu->MemFree(e->ptr);
    e->ptr = 0;
    st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "stream counters: cuMemsetD8Async");
  } else {
    e->size = bytes;
    *out = e->ptr;
  }
  pthread_mutex_unlock(&w->lock);
  return st;
}

scree_status scree__stream_zeroed(scree_context *ctx, CUstream stream, size_t bytes,
                                  CUdeviceptr *out) {
  struct scree__workspaces *w = tables_of(ctx);
  if (!w) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
  return grow(ctx, w, &w->zeroed, stream, bytes, 1, "zeroed stream buffer", out);
}

static void table_free(scree_context *ctx, ws_table *t) {
  for (int i = 0; i < t->n; i++)
    if (t->e[i].ptr) ctx->cu->MemFree(t->e[i].ptr);
  free(t->e);
}

void scree__workspace_free(scree_context *ctx) {
  struct scree__workspaces *w = ctx->ws;
  if (!w) return;
  table_free(ctx, &w->scratch);
  table_free(ctx, &w->counters);
  table_free(ctx, &w->zeroed);
  pthread_mutex_destroy(&w->lock);
  free(w);
  ctx->ws = NULL;
}
