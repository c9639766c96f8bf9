/* harness.c - problems on the device, checked and timed. */
#include "tuner/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fill_host(void *p, int dtype, size_t n, uint64_t *s) {
  for (size_t i = 0; i < n; i++) scree__store_elem(p, dtype, i, scree__rand_normal(s));
}

void scree__run_free(scree_context *ctx, scree__run *r) {
  for (int s = 0; s < r->nsets; s++)
    for (int b = 0; b < r->p.nbufs; b++)
      if (r->dev[s][b]) ctx->cu->MemFree(r->dev[s][b]);
  for (int b = 0; b < r->p.nbufs; b++) {
    free(r->host[b]);
    if (r->orig[b]) ctx->cu->MemFree(r->orig[b]);
  }
  scree__problem_free(&r->p);
  memset(r, 0, sizeof *r);
}

void scree__run_bind(const scree__run *r, int set, void *args) {
  memcpy(args, r->p.args, r->op->args_size);
  for (int b = 0; b < r->p.nbufs; b++) {
    const scree_devptr p = r->dev[set][b];
    memcpy((char *)args + r->p.bufs[b].arg_offset, &p, sizeof p);
  }
}

static scree_status upload(scree_context *ctx, scree__run *r, CUdeviceptr d, const void *h,
                           size_t n) {
  CUresult e = n ? ctx->cu->MemcpyHtoD(d, h, n) : CUDA_SUCCESS;
  if (e) {
    scree__run_free(ctx, r);
    return scree__cu_fail(ctx, e, SCREE_ERROR_CUDA, "uploading problem buffers");
  }
  return SCREE_OK;
}

scree_status scree__run_make(scree_context *ctx, const scree__op *op,
                             const scree__variant *var, const void *args, int check,
                             uint64_t seed, const scree__lens *lens, scree__run *r) {
  memset(r, 0, sizeof *r);
  r->op = op;
  r->check = check;
  char why[512] = "";
  if (op->problem(args, var, check, seed, lens, &r->p, why, sizeof why)) {
    scree__problem_free(&r->p);
    return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s problem: %s", op->name, why);
  }
  r->p.var = *var;
  size_t per_set = 0;
  for (int b = 0; b < r->p.nbufs; b++) {
    r->bytes[b] = r->p.bufs[b].count * scree__elem_size(r->p.bufs[b].dtype);
    per_set += r->bytes[b];
  }
  r->nsets = 1;
  if (!check) {
    const size_t l2 = (size_t)(ctx->info.l2_bytes > 0 ? ctx->info.l2_bytes : 64 << 20);
    r->nsets = (int)((3 * l2) / (per_set ? per_set : 1) + 1);
    if (r->nsets > SCREE__MAX_SETS) r->nsets = SCREE__MAX_SETS;
    size_t free_b = 0, total_b = 0;
    ctx->cu->MemGetInfo(&free_b, &total_b);
    while (r->nsets > 1 && per_set * (size_t)r->nsets > free_b / 4) r->nsets--;
  }
  CUresult e;
  for (int s = 0; s < r->nsets; s++)
    for (int b = 0; b < r->p.nbufs; b++)
      if ((e = ctx->cu->MemAlloc(&r->dev[s][b], r->bytes[b] ? r->bytes[b] : 16))) {
        r->dev[s][b] = 0;
        scree__run_free(ctx, r);
        return scree__cu_fail(ctx, e, SCREE_ERROR_OUT_OF_MEMORY, "problem buffers");
      }
  uint64_t rng = seed ^ 0x5bd1e9955bd1e995ull;
  scree_status st;
  if (check) {
    for (int b = 0; b < r->p.nbufs; b++) {
      const scree__buf *bf = &r->p.bufs[b];
      if (!(r->host[b] = malloc(r->bytes[b] ? r->bytes[b] : 16))) {
        scree__run_free(ctx, r);
        return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "problem host buffers (%zu bytes)",
                           r->bytes[b]);
      }
      if (bf->kind == SCREE__BUF_IN || bf->kind == SCREE__BUF_INOUT)
        fill_host(r->host[b], bf->dtype, bf->count, &rng);
      else if (bf->kind == SCREE__BUF_HOST_IN)
        memcpy(r->host[b], bf->host, r->bytes[b]);
      else
        memset(r->host[b], 0xff, r->bytes[b]);
    }
    if (op->shape_inputs) op->shape_inputs(r->p.args, r->host);
    for (int b = 0; b < r->p.nbufs; b++) {
      const scree__buf_kind kind = r->p.bufs[b].kind;
      if (kind == SCREE__BUF_IN || kind == SCREE__BUF_HOST_IN || kind == SCREE__BUF_INOUT)
        if ((st = upload(ctx, r, r->dev[0][b], r->host[b], r->bytes[b]))) return st;
      /* An in-place buffer keeps a device copy of its inputs: each checked
       * run starts from them. */
      if (kind == SCREE__BUF_INOUT) {
        if ((e = ctx->cu->MemAlloc(&r->orig[b], r->bytes[b] ? r->bytes[b] : 16))) {
          r->orig[b] = 0;
          scree__run_free(ctx, r);
          return scree__cu_fail(ctx, e, SCREE_ERROR_OUT_OF_MEMORY, "problem buffers");
        }
        if ((st = upload(ctx, r, r->orig[b], r->host[b], r->bytes[b]))) return st;
      }
    }
    op->reference(r->p.args, r->host);
    return SCREE_OK;
  }
  /* Timing sets: the values only need to be ordinary numbers, so a 1 MiB
   * random chunk is replicated on the device. */
  const size_t chunk = 1 << 20;
  void *h = malloc(chunk);
  if (!h) {
    scree__run_free(ctx, r);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "problem host buffers");
  }
  for (int b = 0; b < r->p.nbufs; b++) {
    const scree__buf *bf = &r->p.bufs[b];
    if (bf->kind == SCREE__BUF_HOST_IN) {
      for (int s = 0; s < r->nsets; s++)
        if ((st = upload(ctx, r, r->dev[s][b], bf->host, r->bytes[b]))) {
          free(h);
          return st;
        }
      continue;
    }
    if (bf->kind != SCREE__BUF_IN && bf->kind != SCREE__BUF_INOUT) continue;
    fill_host(h, bf->dtype, chunk / scree__elem_size(bf->dtype), &rng);
    for (int s = 0; s < r->nsets; s++) {
      const CUdeviceptr d = r->dev[s][b];
      size_t done = r->bytes[b] < chunk ? r->bytes[b] : chunk;
      e = done ? ctx->cu->MemcpyHtoD(d, h, done) : CUDA_SUCCESS;
      while (!e && done < r->bytes[b]) {
        const size_t n = done < r->bytes[b] - done ? done : r->bytes[b] - done;
        e = ctx->cu->MemcpyDtoDAsync(d + done, d, n, NULL);
        done += n;
      }
      if (e) {
        free(h);
        scree__run_free(ctx, r);
        return scree__cu_fail(ctx, e, SCREE_ERROR_CUDA, "filling problem buffers");
      }
    }
  }
  free(h);
  if ((e = ctx->cu->CtxSynchronize())) {
    scree__run_free(ctx, r);
    return scree__cu_fail(ctx, e, SCREE_ERROR_CUDA, "filling problem buffers");
  }
  return SCREE_OK;
}

scree_status scree__run_make_bucket(scree_context *ctx, const scree__op *op,
                                    const scree__variant *var, const scree__bucket *bk,
                                    int check, uint64_t seed, scree__run *r) {
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  memset(args, 0, sizeof args);
  scree__bucket cb; /* a batch-invariant bucket: its representative batch */
  scree__bucket_concrete(op, bk, &cb);
  op->representative(&cb, var, check, args);
  return scree__run_make(ctx, op, var, args, check, seed, NULL, r);
}

/* Waits for the stream up to limit_ms; returns 1 if it took longer (the
 * wait still completes: a running kernel cannot be stopped). */
static int wait_stream(scree_context *ctx, CUstream st, double limit_ms, CUresult *res) {
  const double t0 = scree__now();
  int late = 0;
  for (;;) {
    const CUresult e = ctx->cu->StreamQuery(st);
    if (e != CUDA_ERROR_NOT_READY) {
      *res = e;
      return late;
    }
    if (!late && (scree__now() - t0) * 1e3 > limit_ms) late = 1;
    usleep(late ? 1000 : 20);
  }
}

scree_status scree__run_check(scree_context *ctx, scree__run *r, scree__runner fn,
                              void *user, CUstream stream, double limit_ms, char *why,
                              size_t why_size) {
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  scree__run_bind(r, 0, args);
  for (int b = 0; b < r->p.nbufs; b++) {
    if (r->p.bufs[b].kind == SCREE__BUF_OUT && r->bytes[b])
      ctx->cu->MemsetD8Async(r->dev[0][b], 0xff, r->bytes[b], stream);
    if (r->p.bufs[b].kind == SCREE__BUF_INOUT && r->bytes[b] && r->orig[b])
      ctx->cu->MemcpyDtoDAsync(r->dev[0][b], r->orig[b], r->bytes[b], stream);
  }
  scree_status st = fn(user, ctx, args, stream);
  if (st) {
    char err[400];
    scree__error_copy(ctx, err, sizeof err);
    scree__set_why(why, why_size, "launch: %s", err);
    return st;
  }
  CUresult e;
  if (wait_stream(ctx, stream, limit_ms, &e)) {
    scree__set_why(why, why_size, "timeout: one run of the check problem took over %.0f ms",
                   limit_ms);
    return scree__fail(ctx, SCREE_ERROR_TIMEOUT, "%s", why);
  }
  if (e) {
    scree__set_why(why, why_size, "run: %s", scree__cu_error_name(ctx->cu, e));
    return scree__cu_fail(ctx, e, SCREE_ERROR_LAUNCH, "run");
  }
  for (int b = 0; b < r->p.nbufs; b++) {
    const scree__buf *bf = &r->p.bufs[b];
    if ((bf->kind != SCREE__BUF_OUT && bf->kind != SCREE__BUF_INOUT) || !bf->count) continue;
    void *got = malloc(r->bytes[b]);
    if (!got) {
      scree__set_why(why, why_size, "out of host memory (%zu bytes)", r->bytes[b]);
      return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "%s", why);
    }
    if ((e = ctx->cu->MemcpyDtoH(got, r->dev[0][b], r->bytes[b]))) {
      free(got);
      scree__set_why(why, why_size, "download: %s", scree__cu_error_name(ctx->cu, e));
      return scree__cu_fail(ctx, e, SCREE_ERROR_CUDA, "download");
    }
    size_t worst = 0;
    const size_t bad =
        scree__compare(got, r->host[b], bf->dtype, bf->count, bf->rtol, bf->atol, &worst);
    if (bad) {
      scree__set_why(why, why_size,
                     "wrong answer: %zu of %zu elements of %s outside atol %.1e + rtol %.1e, "
                     "e.g. [%zu] got %.6g want %.6g",
                     bad, bf->count, bf->name, bf->atol, bf->rtol, worst,
                     scree__load_elem(got, bf->dtype, worst),
                     scree__load_elem(r->host[b], bf->dtype, worst));
      free(got);
      return scree__fail(ctx, SCREE_ERROR_WRONG_ANSWER, "%s", why);
    }
    free(got);
  }
  return SCREE_OK;
}

scree_status scree__run_time(scree_context *ctx, scree__run *r, scree__runner fn,
                             void *user, CUstream stream, int warmup, int reps,
                             int per_event, double limit_ms, double *median,
                             double *spread, char *why, size_t why_size) {
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  CUevent ev[129];
  scree__set_why(why, why_size, "timing failed");
  if (reps > 128) reps = 128;
  if (reps < 3) reps = 3;
  if (per_event < 1) per_event = 1;
  for (int i = 0; i <= reps; i++)
    if (ctx->cu->EventCreate(&ev[i], CU_EVENT_DEFAULT)) {
      for (int j = 0; j < i; j++) ctx->cu->EventDestroy(ev[j]);
      return scree__fail(ctx, SCREE_ERROR_CUDA, "cuEventCreate");
    }
  scree_status st = SCREE_OK;
  CUresult e;
  int set = 0;
  for (int i = 0; i < warmup && !st; i++) {
    scree__run_bind(r, set++ % r->nsets, args);
    st = fn(user, ctx, args, stream);
    if (!st && i == 0) {
      const double t0 = scree__now();
      if (wait_stream(ctx, stream, limit_ms, &e)) {
        scree__set_why(why, why_size, "timeout: one run took %.0f ms (limit %.0f ms)",
                       (scree__now() - t0) * 1e3, limit_ms);
        st = scree__fail(ctx, SCREE_ERROR_TIMEOUT, "%s", why);
      } else if (e) {
        scree__set_why(why, why_size, "run: %s", scree__cu_error_name(ctx->cu, e));
        st = scree__cu_fail(ctx, e, SCREE_ERROR_LAUNCH, "run");
      }
    }
  }
  if (!st) {
    ctx->cu->EventRecord(ev[0], stream);
    for (int i = 0; i < reps && !st; i++) {
      for (int k = 0; k < per_event && !st; k++) {
        scree__run_bind(r, set++ % r->nsets, args);
        st = fn(user, ctx, args, stream);
      }
      ctx->cu->EventRecord(ev[i + 1], stream);
    }
    if (st) {
      char err[400];
      scree__error_copy(ctx, err, sizeof err);
      scree__set_why(why, why_size, "launch: %s", err);
    }
  }
  if (!st && (e = ctx->cu->EventSynchronize(ev[reps]))) {
    scree__set_why(why, why_size, "run: %s", scree__cu_error_name(ctx->cu, e));
    st = scree__cu_fail(ctx, e, SCREE_ERROR_LAUNCH, "run");
  }
  if (!st) {
    float t[128];
    for (int i = 0; i < reps; i++) {
      ctx->cu->EventElapsedTime(&t[i], ev[i], ev[i + 1]);
      t[i] /= (float)per_event;
    }
    *median = 1e3 * scree__median(t, reps); /* sorts t */
    *spread = 1e3 * (double)(t[(3 * reps) / 4] - t[reps / 4]);
  }
  for (int i = 0; i <= reps; i++) ctx->cu->EventDestroy(ev[i]);
  return st;
}

scree_status scree__run_config(void *user, scree_context *ctx, const void *args,
                               CUstream stream) {
  const scree__config_runner *cr = user;
  return cr->op->impls[cr->cfg->impl].launch(ctx, cr->k, cr->cfg, cr->var, args, stream);
}

double scree__copy_gbps_sized(scree_context *ctx, size_t moved, int inner) {
  const scree__cu_api *cu = ctx->cu;
  const size_t half = (moved / 2 + 255) & ~(size_t)255;
  if (half == 0 || inner < 1) return 0;
  /* Enough pairs that one round of them exceeds 3x the L2, as the ops'
   * inputs rotate (scree__run_make). */
  const size_t l2 = (size_t)(ctx->info.l2_bytes > 0 ? ctx->info.l2_bytes : 64 << 20);
  int pairs = (int)((3 * l2) / (2 * half) + 1);
  if (pairs > 64) pairs = 64;
  CUdeviceptr buf = 0;
  CUevent e0 = NULL, e1 = NULL;
  double gbps = 0;
  if (!cu->MemAlloc(&buf, 2 * half * (size_t)pairs) && !cu->EventCreate(&e0, 0) &&
      !cu->EventCreate(&e1, 0)) {
    float ct[20];
    int n = 0;
    for (int i = 0; i < 23; i++) {
      cu->EventRecord(e0, NULL);
      for (int j = 0; j < inner; j++) {
        const CUdeviceptr a = buf + 2 * half * (size_t)((i * inner + j) % pairs);
        cu->MemcpyDtoDAsync(a + half, a, half, NULL);
      }
      cu->EventRecord(e1, NULL);
      cu->EventSynchronize(e1);
      if (i >= 3 && !cu->EventElapsedTime(&ct[n], e0, e1)) n++;
    }
    if (n) gbps = 2.0 * (double)half * inner / (scree__median(ct, n) * 1e-3) / 1e9;
  }
  if (buf) cu->MemFree(buf);
  if (e0) cu->EventDestroy(e0);
  if (e1) cu->EventDestroy(e1);
  return gbps;
}

double scree__copy_gbps(scree_context *ctx) {
  const scree__cu_api *cu = ctx->cu;
  const size_t cb = (size_t)1 << 30;
  CUdeviceptr a = 0, b = 0;
  CUevent e0 = NULL, e1 = NULL;
  double gbps = 0;
  if (!cu->MemAlloc(&a, cb) && !cu->MemAlloc(&b, cb) && !cu->EventCreate(&e0, 0) &&
      !cu->EventCreate(&e1, 0)) {
    float ct[20];
    for (int i = 0; i < 23; i++) {
      cu->EventRecord(e0, NULL);
      cu->MemcpyDtoDAsync(b, a, cb, NULL);
      cu->EventRecord(e1, NULL);
      cu->EventSynchronize(e1);
      if (i >= 3) cu->EventElapsedTime(&ct[i - 3], e0, e1);
    }
    gbps = 2.0 * (double)cb / (scree__median(ct, 20) * 1e-3) / 1e9;
  }
  if (a) cu->MemFree(a);
  if (b) cu->MemFree(b);
  if (e0) cu->EventDestroy(e0);
  if (e1) cu->EventDestroy(e1);
  return gbps;
}

