/* diag.c - failure messages, logging and the CUDA context scope: what every
 * layer uses to report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

scree_context *scree__context_offline(void) {
  scree_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return NULL;
  pthread_mutex_init(&ctx->err_lock, NULL);
  ctx->log_level = SCREE_LOG_OFF;
  return ctx;
}

scree_status scree__fail(scree_context *ctx, scree_status st, const char *fmt,
                         ...) {
  if (!ctx) return st;
  char buf[sizeof ctx->err];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&ctx->err_lock);
  memcpy(ctx->err, buf, strlen(buf) + 1);
  __atomic_store_n(&ctx->has_err, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ctx->err_lock);
  scree__log(ctx, SCREE_LOG_DEBUG, "%s: %s", scree_status_name(st), buf);
  return st;
}

void scree__clear_error(scree_context *ctx) {
  /* The hot path takes no lock when there is nothing to clear. */
  if (__atomic_load_n(&ctx->has_err, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&ctx->err_lock);
    ctx->err[0] = 0;
    __atomic_store_n(&ctx->has_err, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ctx->err_lock);
  }
}

void scree__error_copy(scree_context *ctx, char *buf, size_t size) {
  if (!size) return;
  pthread_mutex_lock(&ctx->err_lock);
  snprintf(buf, size, "%s", ctx->err);
  pthread_mutex_unlock(&ctx->err_lock);
}

scree_status scree__cu_fail(scree_context *ctx, CUresult r, scree_status st,
                            const char *what) {
  const char *text = NULL;
  ctx->cu->GetErrorString(r, &text);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) st = SCREE_ERROR_OUT_OF_MEMORY;
  return scree__fail(ctx, st, "%s: %s (%s)", what,
                     scree__cu_error_name(ctx->cu, r), text ? text : "");
}

scree_status scree__read_device(scree_context *ctx, CUstream stream, void *dst, CUdeviceptr src,
                                size_t bytes, const char *what) {
  const int pushed = scree__ctx_enter(ctx);
  CUresult r = ctx->cu->StreamSynchronize(stream);
  if (!r) r = ctx->cu->MemcpyDtoH(dst, src, bytes);
  scree__ctx_leave(ctx, pushed);
  if (!r) return SCREE_OK;
  char w[96];
  snprintf(w, sizeof w, "validate: reading %s", what);
  return scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, w);
}

void scree__log(scree_context *ctx, scree_log_level lvl, const char *fmt, ...) {
  if (!ctx || lvl > ctx->log_level || lvl == SCREE_LOG_OFF) return;
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (ctx->log_fn) {
    ctx->log_fn(ctx->log_user, lvl, buf);
  } else {
    static const char *const tag[] = {"", "error", "warn", "info", "debug"};
    fprintf(stderr, "scree %s: %s\n", tag[lvl], buf);
  }
}

int scree__ctx_enter(scree_context *ctx) {
  CUcontext cur = NULL;
  ctx->cu->CtxGetCurrent(&cur);
  if (cur == ctx->pctx) return 0;
  return ctx->cu->CtxPushCurrent(ctx->pctx) == CUDA_SUCCESS;
}

void scree__ctx_leave(scree_context *ctx, int pushed) {
  if (pushed) {
    CUcontext popped;
    ctx->cu->CtxPopCurrent(&popped);
  }
}
