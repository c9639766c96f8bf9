/* trial.c - one candidate checked and timed in this process's CUDA
 * context (scree__trial_run: the worker's side, and the caller's with
 * isolation off), and a bucket's candidates run here in turn
 * (scree__trials_here). */
#include "tuner/trial.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one candidate ------------------------------------------------------ */

/* The fault mode's runner: the config's own kernel with every output
 * pointer replaced by an address nothing is mapped at. */
typedef struct fault_runner {
  scree__config_runner cr;
  const scree__problem *p;
} fault_runner;

static scree_status run_faulting(void *user, scree_context *ctx, const void *args,
                                 CUstream stream) {
  fault_runner *f = user;
  _Alignas(16) unsigned char a[SCREE__ARGS_MAX];
  memcpy(a, args, sizeof a);
  for (int b = 0; b < f->p->nbufs; b++) {
    const scree__buf *bf = &f->p->bufs[b];
    if (bf->kind == SCREE__BUF_OUT || bf->kind == SCREE__BUF_INOUT) {
      const scree_devptr bad = (scree_devptr)1 << 44; /* 16 TiB: never mapped */
      memcpy(a + bf->arg_offset, &bad, sizeof bad);
    }
  }
  return scree__run_config(&f->cr, ctx, a, stream);
}

/* The hang mode's kernel: spins until a flag nobody sets is set. */
static const char hang_src[] =
    "extern \"C\" __global__ void scree_test_hang(volatile unsigned *flag) {\n"
    "  while (*flag == 0u) { }\n"
    "}\n";
typedef struct hang_runner {
  CUfunction fn;
  CUdeviceptr flag;
} hang_runner;

static scree_status run_hanging(void *user, scree_context *ctx, const void *args,
                                CUstream stream) {
  (void)args;
  hang_runner *h = user;
  void *params[] = {&h->flag};
  CUresult r = ctx->cu->LaunchKernel(h->fn, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
  return r ? scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "scree_test_hang") : SCREE_OK;
}

static scree_status hang_setup(scree_context *ctx, hang_runner *h, CUmodule *mod) {
  const scree__nvrtc_api *nv = ctx->nvrtc;
  if (!nv) return scree__fail(ctx, SCREE_ERROR_NO_NVRTC, "the hang test needs NVRTC");
  char opt[48];
  snprintf(opt, sizeof opt, "--gpu-architecture=%s", ctx->arch);
  const char *opts[] = {opt};
  nvrtcProgram prog;
  if (nv->CreateProgram(&prog, hang_src, "scree_test_hang.cu", 0, NULL, NULL))
    return scree__fail(ctx, SCREE_ERROR_INTERNAL, "nvrtcCreateProgram");
  size_t size = 0;
  char *cubin = NULL;
  scree_status st = SCREE_OK;
  if (nv->CompileProgram(prog, 1, opts) || nv->GetCUBINSize(prog, &size) || !size ||
      !(cubin = malloc(size)) || nv->GetCUBIN(prog, cubin))
    st = scree__fail(ctx, SCREE_ERROR_COMPILE, "the hang test's kernel did not compile");
  nv->DestroyProgram(&prog);
  if (!st && (ctx->cu->ModuleLoadDataEx(mod, cubin, 0, NULL, NULL) ||
              ctx->cu->ModuleGetFunction(&h->fn, *mod, "scree_test_hang")))
    st = scree__fail(ctx, SCREE_ERROR_LOAD, "the hang test's kernel did not load");
  free(cubin);
  if (!st && (ctx->cu->MemAlloc(&h->flag, 4) || ctx->cu->MemsetD8(h->flag, 0, 4)))
    st = scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "the hang test's flag");
  return st;
}

/* A short kernel between two events also times its launch: a call of a
 * few microseconds measured alone ranks configs by host time and noise
 * (measured: 12-29% regret on 64-row norms and 512-token RoPE against a
 * sweep of back-to-back calls). So a first estimate from 3 single calls
 * sets how many back-to-back calls each event pair covers: enough for
 * SCREE__TRIAL_SPAN_US of work, at most 32. */
#define SCREE__TRIAL_SPAN_US 40.0
int scree__trial_per_event(double one_call_us) {
  if (!(one_call_us > 0) || one_call_us >= SCREE__TRIAL_SPAN_US) return 1;
  const int n = (int)ceil(SCREE__TRIAL_SPAN_US / one_call_us);
  return n > 32 ? 32 : n;
}

static scree_status trial_time(scree_context *ctx, scree__run *tp, scree__runner fn, void *user,
                               CUstream stream, const scree__trial_opts *o, scree__trial *t) {
  double first, spread;
  scree_status st = scree__run_time(ctx, tp, fn, user, stream, o->warmup, 3, 1,
                                    o->time_limit_ms, &first, &spread, t->why, sizeof t->why);
  if (st) return st;
  const int per = scree__trial_per_event(first);
  return scree__run_time(ctx, tp, fn, user, stream, 1, o->reps, per, o->time_limit_ms,
                         &t->median, &t->spread, t->why, sizeof t->why);
}

void scree__trial_run(scree_context *ctx, const scree__op *op, const scree__variant *var,
                      scree__run *chk, scree__run *tp, CUstream stream,
                      const scree__trial_opts *o, scree__trial *t) {
  t->ran = 1;
  t->record = 0;
  t->fatal = 0;
  t->why[0] = 0;
  scree__kernel k;
  memset(&k, 0, sizeof k);
  scree_status st = scree__module_load(ctx, op, &t->cfg, var, t->cubin, &k);
  if (st) {
    char err[200];
    scree__error_copy(ctx, err, sizeof err);
    snprintf(t->why, sizeof t->why, "load: %s", err);
    /* Too many resources or a bad image is the config's (on any bucket);
     * running out of device memory is not. */
    t->record = st == SCREE_ERROR_LOAD ? 2 : 0;
    t->st = st;
    return;
  }
  scree__config_runner cr = {op, &t->cfg, var, &k};
  fault_runner fr = {cr, &chk->p};
  hang_runner hr = {NULL, 0};
  CUmodule hmod = NULL;
  scree__runner fn = scree__run_config;
  void *user = &cr;
  if (t->mode == SCREE__TRIAL_FAULT) {
    fn = run_faulting;
    user = &fr;
  } else if (t->mode == SCREE__TRIAL_HANG) {
    st = hang_setup(ctx, &hr, &hmod);
    if (st) scree__error_copy(ctx, t->why, sizeof t->why);
    fn = run_hanging;
    user = &hr;
  }
  if (!st) st = scree__run_check(ctx, chk, fn, user, stream, o->time_limit_ms, t->why,
                                 sizeof t->why);
  if (!st && t->mode == SCREE__TRIAL_WRONG) {
    snprintf(t->why, sizeof t->why, "wrong answer: poisoned for testing");
    st = SCREE_ERROR_WRONG_ANSWER;
  }
  if (!st) st = trial_time(ctx, tp, fn, user, stream, o, t);
  t->st = st;
  if (st) {
    t->record = 1;
    /* A fault leaves the context unusable: nothing after it can run. */
    const CUresult r = ctx->cu->CtxSynchronize();
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) t->fatal = 1;
  }
  if (hr.flag) ctx->cu->MemFree(hr.flag);
  if (hmod) ctx->cu->ModuleUnload(hmod);
  ctx->cu->ModuleUnload(k.module);
}

/* ---- a bucket's candidates in the caller's context ------------------------ */

scree_status scree__trials_here(scree_context *ctx, const scree__op *op,
                                const scree__variant *var, const scree__bucket *b,
                                uint64_t seed, const scree__trial_opts *o, scree__trial *t,
                                int n, scree__trials_info *info) {
  scree__run chk, tp;
  CUstream stream = NULL;
  scree_status st = scree__run_make_bucket(ctx, op, var, b, 1, seed, &chk);
  if (st) return st;
  if ((st = scree__run_make_bucket(ctx, op, var, b, 0, seed + 1, &tp))) {
    scree__run_free(ctx, &chk);
    return st;
  }
  info->flops = tp.p.flops;
  info->bytes = tp.p.bytes;
  snprintf(info->problem, sizeof info->problem, "%s", tp.p.desc);
  if (ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
    scree__run_free(ctx, &chk);
    scree__run_free(ctx, &tp);
    return scree__fail(ctx, SCREE_ERROR_CUDA, "cuStreamCreate");
  }
  for (int i = 0; i < n; i++) {
    if (o->progress) o->progress(o->user, i + 1, n, "time");
    if (t[i].mode == SCREE__TRIAL_FAULT || t[i].mode == SCREE__TRIAL_HANG) {
      t[i].ran = 1;
      t[i].st = SCREE_ERROR_INVALID_ARGUMENT;
      snprintf(t[i].why, sizeof t[i].why, "fault and hang tests need the tuning worker");
      continue;
    }
    scree__trial_run(ctx, op, var, &chk, &tp, stream, o, &t[i]);
    if (t[i].fatal) {
      st = scree__cu_fail(ctx, ctx->cu->CtxSynchronize(), SCREE_ERROR_CUDA,
                          "the CUDA context failed while tuning (recorded the config as bad)");
      break;
    }
  }
  ctx->cu->StreamDestroy(stream);
  scree__run_free(ctx, &chk);
  scree__run_free(ctx, &tp);
  return st;
}
