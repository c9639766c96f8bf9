/* workspace.c - per-stream device scratch (e.g. a varlen op's tile
 * schedule), and per-stream counters that are zero whenever a launch
 * starts. Launches on one stream run in order, so one buffer per stream
 * is never used by two kernels at once; a buffer only grows, and is freed
 * with the context. */
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

scree_status scree__workspace(scree_context *ctx, CUstream stream, size_t bytes,
                              CUdeviceptr *out) {
  struct scree__workspaces *w = tables_of(ctx);
  if (!w) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
  if (bytes < 256) bytes = 256;
  pthread_mutex_lock(&w->lock);
  ws_entry *e = entry_of(&w->scratch, stream);
  if (!e) {
    pthread_mutex_unlock(&w->lock);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "workspace table");
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
  if (bytes < 256) bytes = 256;
  scree_status st = SCREE_OK;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&w->lock);
  ws_entry *e = entry_of(&w->zeroed, stream);
  if (!e) {
    st = scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "zeroed stream buffer table");
  } else if (e->size >= bytes) {
    *out = e->ptr;
  } else {
    /* Kernels queued earlier on this stream may still use the old buffer. */
    if (e->ptr && (r = ctx->cu->StreamSynchronize(stream))) {
      st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "zeroed stream buffer: cuStreamSynchronize");
    } else {
      if (e->ptr) ctx->cu->MemFree(e->ptr);
      e->ptr = 0;
      e->size = 0;
      const size_t size = bytes + bytes / 2;
      if ((r = ctx->cu->MemAlloc(&e->ptr, size))) {
        e->ptr = 0;
        st = scree__cu_fail(ctx, r, SCREE_ERROR_OUT_OF_MEMORY, "zeroed stream buffer: cuMemAlloc");
      } else if ((r = ctx->cu->MemsetD8Async(e->ptr, 0, size, stream))) {
        ctx->cu->MemFree(e->ptr);
        e->ptr = 0;
        st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "zeroed stream buffer: cuMemsetD8Async");
      } else {
        e->size = size;
        *out = e->ptr;
      }
    }
  }
  pthread_mutex_unlock(&w->lock);
  return st;
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
