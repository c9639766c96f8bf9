/* tuner.c - compile candidates in parallel, check them against the CPU
 * reference, time them on the live GPU, keep the fastest. */
#include "tuner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "safelist.h"

#define MAX_SETS 8
#define MAX_CANDIDATES 4096

void scree__tune_opts_init(scree__tune_opts *o) {
  memset(o, 0, sizeof *o);
  o->reps = 25;
  o->warmup = 3;
  o->noise = 0.02;
  o->time_limit_ms = 1000;
  o->store = 1;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int scree__variant_parse(const scree__op *op, const char *s,
                         scree__variant *var) {
  memset(var, 0, sizeof *var);
  for (int i = 0; i < op->nvfields; i++) {
    size_t n = strlen(op->vfields[i].name);
    if (strncmp(s, op->vfields[i].name, n) || s[n] != '=') return -1;
    s += n + 1;
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    if (op->vfields[i].is_dtype) {
      int found = -1;
      for (int d = 0; d < 3; d++)
        if (strlen(scree_dtype_name((scree_dtype)d)) == len &&
            !strncmp(s, scree_dtype_name((scree_dtype)d), len))
          found = d;
      if (found < 0) return -1;
      var->v[i] = found;
    } else {
      char *e;
      var->v[i] = (int)strtol(s, &e, 10);
      if (e != s + len) return -1;
    }
    s += len;
    if (i + 1 < op->nvfields) {
      if (*s != ',') return -1;
      s++;
    }
  }
  return *s ? -1 : 0;
}

void scree__make_key(const scree_context *ctx, const scree__op *op,
                     const scree__variant *var, uint64_t bucket,
                     scree__ckey *k) {
  memset(k, 0, sizeof *k);
  snprintf(k->op, sizeof k->op, "%s", op->name);
  op->bucket_str(bucket, k->bucket, sizeof k->bucket);
  scree__variant_str(op, var, k->dtype, sizeof k->dtype);
  k->causal = op->causal(var);
  snprintf(k->arch, sizeof k->arch, "%s", ctx->arch);
  snprintf(k->src_hash, sizeof k->src_hash, "%s", scree__source_hash(op));
}

/* ---- problems: the buffers a candidate runs on ------------------------- */

typedef struct problem {
  _Alignas(16) unsigned char args[256]; /* shape fields; pointers bound per set */
  int nbufs, nsets;
  scree__buf bufs[SCREE__MAX_BUFS];
  CUdeviceptr dev[MAX_SETS][SCREE__MAX_BUFS];
  void *host[SCREE__MAX_BUFS]; /* check problems: inputs, then reference outputs */
  size_t bytes[SCREE__MAX_BUFS];
} problem;

static uint64_t g_draws; /* distinct seeds for concurrent tunes */
static double rnd_normal(uint64_t *s) {
  double u[2];
  for (int i = 0; i < 2; i++) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    u[i] = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
  }
  return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

static void fill_host(void *p, scree_dtype dt, size_t n, uint64_t *s) {
  for (size_t i = 0; i < n; i++) scree__store_elem(p, dt, i, rnd_normal(s));
}

static void problem_free(scree_context *ctx, problem *p) {
  for (int s = 0; s < p->nsets; s++)
    for (int b = 0; b < p->nbufs; b++)
      if (p->dev[s][b]) ctx->cu->MemFree(p->dev[s][b]);
  for (int b = 0; b < p->nbufs; b++) free(p->host[b]);
  memset(p, 0, sizeof *p);
}

/* Allocates a problem. check = 1: one set, random host inputs uploaded and
 * the CPU reference computed into host[] of the outputs. check = 0: enough
 * sets to exceed 3x L2 when they are rotated (at most MAX_SETS, so small
 * buckets stay partly cache-resident, as they would be in use), filled on
 * the device from a random chunk (the values only need to be ordinary
 * numbers). Needs the primary context current. */
static scree_status problem_make(scree_context *ctx, const scree__op *op,
                                 const scree__variant *var, uint64_t bucket,
                                 int check, problem *p) {
  memset(p, 0, sizeof *p);
  if (op->args_size > sizeof p->args)
    return scree__fail(ctx, SCREE_ERROR_INTERNAL, "%s args too large", op->name);
  op->representative(bucket, var, check, p->args);
  p->nbufs = op->buffers(var, p->args, p->bufs);
  size_t per_set = 0;
  for (int b = 0; b < p->nbufs; b++) {
    p->bytes[b] = p->bufs[b].count * scree_dtype_size(p->bufs[b].dtype);
    per_set += p->bytes[b];
  }
  p->nsets = 1;
  if (!check) {
    const size_t l2 = (size_t)(ctx->info.l2_bytes > 0 ? ctx->info.l2_bytes : 64 << 20);
    p->nsets = (int)((3 * l2) / (per_set ? per_set : 1) + 1);
    if (p->nsets > MAX_SETS) p->nsets = MAX_SETS;
    size_t free_b = 0, total_b = 0;
    ctx->cu->MemGetInfo(&free_b, &total_b);
    while (p->nsets > 1 && per_set * (size_t)p->nsets > free_b / 4) p->nsets--;
  }
  uint64_t seed = ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32)) +
                  0x9e3779b97f4a7c15ull * (__atomic_fetch_add(&g_draws, 1, __ATOMIC_RELAXED) + 1);
  CUresult r;
  for (int s = 0; s < p->nsets; s++)
    for (int b = 0; b < p->nbufs; b++) {
      if ((r = ctx->cu->MemAlloc(&p->dev[s][b], p->bytes[b] ? p->bytes[b] : 16))) {
        problem_free(ctx, p);
        return scree__cu_fail(ctx, r, SCREE_ERROR_OUT_OF_MEMORY, "tuning buffers");
      }
    }
  if (check) {
    for (int b = 0; b < p->nbufs; b++) {
      if (!(p->host[b] = malloc(p->bytes[b] ? p->bytes[b] : 16))) {
        problem_free(ctx, p);
        return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "host buffers");
      }
      if (p->bufs[b].is_output) {
        memset(p->host[b], 0xff, p->bytes[b]);
      } else {
        fill_host(p->host[b], p->bufs[b].dtype, p->bufs[b].count, &seed);
        if ((r = ctx->cu->MemcpyHtoD(p->dev[0][b], p->host[b], p->bytes[b]))) {
          problem_free(ctx, p);
          return scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "upload");
        }
      }
    }
    if (op->shape_inputs) {
      op->shape_inputs(p->args, p->host);
      for (int b = 0; b < p->nbufs; b++)
        if (!p->bufs[b].is_output &&
            (r = ctx->cu->MemcpyHtoD(p->dev[0][b], p->host[b], p->bytes[b]))) {
          problem_free(ctx, p);
          return scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "upload");
        }
    }
    op->reference(p->args, p->host);
    return SCREE_OK;
  }
  /* Timing sets: a 1 MiB random chunk, replicated on the device. */
  const size_t chunk = 1 << 20;
  void *h = malloc(chunk);
  if (!h) {
    problem_free(ctx, p);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "host buffers");
  }
  for (int b = 0; b < p->nbufs; b++) {
    if (p->bufs[b].is_output) continue;
    const size_t es = scree_dtype_size(p->bufs[b].dtype);
    fill_host(h, p->bufs[b].dtype, chunk / es, &seed);
    for (int s = 0; s < p->nsets; s++) {
      const CUdeviceptr d = p->dev[s][b];
      size_t done = p->bytes[b] < chunk ? p->bytes[b] : chunk;
      r = ctx->cu->MemcpyHtoD(d, h, done);
      while (!r && done < p->bytes[b]) {
        size_t n = done < p->bytes[b] - done ? done : p->bytes[b] - done;
        r = ctx->cu->MemcpyDtoDAsync(d + done, d, n, NULL);
        done += n;
      }
      if (r) {
        free(h);
        problem_free(ctx, p);
        return scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "filling tuning buffers");
      }
    }
  }
  free(h);
  r = ctx->cu->CtxSynchronize();
  if (r) {
    problem_free(ctx, p);
    return scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "filling tuning buffers");
  }
  return SCREE_OK;
}

static void bind_set(const scree__op *op, problem *p, int set, void *args) {
  memcpy(args, p->args, op->args_size);
  scree_devptr ptrs[SCREE__MAX_BUFS];
  for (int b = 0; b < p->nbufs; b++) ptrs[b] = p->dev[set][b];
  op->bind(args, ptrs);
}

/* Waits for the stream up to limit_ms; returns 1 if it took longer (the
 * wait still completes: a running kernel cannot be stopped). */
static int wait_stream(scree_context *ctx, CUstream st, double limit_ms,
                       CUresult *res) {
  const double t0 = now_s();
  int late = 0;
  for (;;) {
    CUresult r = ctx->cu->StreamQuery(st);
    if (r != CUDA_ERROR_NOT_READY) {
      *res = r;
      return late;
    }
    if (!late && (now_s() - t0) * 1e3 > limit_ms) late = 1;
    usleep(late ? 1000 : 20);
  }
}

/* Runs cfg on the check problem and compares. On a mismatch writes a
 * one-line description into why. */
static scree_status check_one(scree_context *ctx, const scree__op *op,
                              const scree__config *cfg, const scree__kernel *fn,
                              problem *chk, CUstream stream, double limit_ms,
                              char *why, size_t why_size) {
  _Alignas(16) unsigned char args[256];
  snprintf(why, why_size, "check failed"); /* replaced below by the cause */
  bind_set(op, chk, 0, args);
  for (int b = 0; b < chk->nbufs; b++)
    if (chk->bufs[b].is_output) ctx->cu->MemsetD8Async(chk->dev[0][b], 0xff, chk->bytes[b], stream);
  scree_status st = op->launch(ctx, fn, cfg, args, stream);
  if (st) {
    char err[400];
    scree__error_copy(ctx, err, sizeof err);
    snprintf(why, why_size, "launch: %s", err);
    return st;
  }
  CUresult r;
  if (wait_stream(ctx, stream, limit_ms, &r)) {
    snprintf(why, why_size, "timeout: one launch of the check problem took over %.0f ms", limit_ms);
    return SCREE_ERROR_TIMEOUT;
  }
  if (r) {
    snprintf(why, why_size, "run: %s", scree__cu_error_name(ctx->cu, r));
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "candidate run");
  }
  for (int b = 0; b < chk->nbufs; b++) {
    if (!chk->bufs[b].is_output) continue;
    void *got = malloc(chk->bytes[b] ? chk->bytes[b] : 16);
    if (!got) return SCREE_ERROR_OUT_OF_MEMORY;
    r = ctx->cu->MemcpyDtoH(got, chk->dev[0][b], chk->bytes[b]);
    if (r) {
      free(got);
      return scree__cu_fail(ctx, r, SCREE_ERROR_CUDA, "download");
    }
    double rtol, atol;
    scree__tolerance(chk->bufs[b].dtype, &rtol, &atol);
    size_t worst = 0;
    size_t bad = scree__compare(got, chk->host[b], chk->bufs[b].dtype,
                                chk->bufs[b].count, rtol, atol, &worst);
    if (bad) {
      snprintf(why, why_size,
               "wrong answer: %zu of %zu elements outside rtol %.1e, e.g. [%zu] got %.6g want %.6g",
               bad, chk->bufs[b].count, rtol, worst,
               scree__load_elem(got, chk->bufs[b].dtype, worst),
               scree__load_elem(chk->host[b], chk->bufs[b].dtype, worst));
      free(got);
      return SCREE_ERROR_WRONG_ANSWER;
    }
    free(got);
  }
  return SCREE_OK;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Times fn on the rotated timing problem: warm-up, then back-to-back
 * launches between events; median and interquartile spread in us. */
static scree_status time_one(scree_context *ctx, const scree__op *op,
                             const scree__config *cfg, const scree__kernel *fn,
                             problem *tp, CUstream stream, int warmup, int reps,
                             double limit_ms, double *median, double *spread,
                             char *why, size_t why_size) {
  _Alignas(16) unsigned char args[256];
  CUevent ev[129];
  snprintf(why, why_size, "timing failed"); /* replaced below by the cause */
  if (reps > 128) reps = 128;
  if (reps < 3) reps = 3;
  for (int i = 0; i <= reps; i++)
    if (ctx->cu->EventCreate(&ev[i], CU_EVENT_DEFAULT)) {
      for (int j = 0; j < i; j++) ctx->cu->EventDestroy(ev[j]);
      return scree__fail(ctx, SCREE_ERROR_CUDA, "cuEventCreate");
    }
  scree_status st = SCREE_OK;
  CUresult r;
  for (int i = 0; i < warmup && !st; i++) {
    bind_set(op, tp, i % tp->nsets, args);
    st = op->launch(ctx, fn, cfg, args, stream);
    if (!st && i == 0) {
      const double t0 = now_s();
      if (wait_stream(ctx, stream, limit_ms, &r)) {
        snprintf(why, why_size, "timeout: one launch took %.0f ms (limit %.0f ms)",
                 (now_s() - t0) * 1e3, limit_ms);
        st = SCREE_ERROR_TIMEOUT;
      } else if (r) {
        st = scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "candidate run");
      }
    }
  }
  if (!st) {
    ctx->cu->EventRecord(ev[0], stream);
    for (int i = 0; i < reps && !st; i++) {
      bind_set(op, tp, (warmup + i) % tp->nsets, args);
      st = op->launch(ctx, fn, cfg, args, stream);
      ctx->cu->EventRecord(ev[i + 1], stream);
    }
    if (st) {
      char err[400];
      scree__error_copy(ctx, err, sizeof err);
      snprintf(why, why_size, "launch: %s", err);
    }
  }
  if (!st) {
    r = ctx->cu->EventSynchronize(ev[reps]);
    if (r) st = scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, "candidate run");
  }
  if (!st) {
    float t[128];
    for (int i = 0; i < reps; i++) ctx->cu->EventElapsedTime(&t[i], ev[i], ev[i + 1]);
    qsort(t, (size_t)reps, sizeof t[0], cmp_float);
    *median = 1e3 * (reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]));
    *spread = 1e3 * (t[(3 * reps) / 4] - t[reps / 4]);
  }
  for (int i = 0; i <= reps; i++) ctx->cu->EventDestroy(ev[i]);
  return st;
}

/* ---- candidates --------------------------------------------------------- */

typedef struct cand {
  scree__config cfg;
  void *cubin;
  size_t cubin_size;
  char *log;
  scree_status cst; /* compile status */
  scree__kernel k;
  double median, spread;
  int ok;
} cand;

typedef struct cjob {
  scree_context *ctx;
  const scree__op *op;
  const scree__variant *var;
  cand *c;
  const int *todo; /* indexes into c of the candidates to compile */
  int n, done;
  pthread_mutex_t lock;
  const scree__tune_opts *o;
} cjob;

static void compile_one(void *p, int k) {
  cjob *j = p;
  cand *c = &j->c[j->todo[k]];
  if (j->ctx->log_level >= SCREE_LOG_DEBUG) {
    char cs[128];
    scree__config_str(j->op, &c->cfg, cs, sizeof cs);
    char t[16];
    scree__log(j->ctx, SCREE_LOG_DEBUG, "compiling %s %s for %s", j->op->name, cs,
               scree__target_arch(j->ctx, j->op, t));
  }
  char target[16];
  c->cst = scree__compile(j->ctx->nvrtc, j->op, &c->cfg, j->var,
                          scree__target_arch(j->ctx, j->op, target), &c->cubin,
                          &c->cubin_size, &c->log);
  pthread_mutex_lock(&j->lock);
  const int done = ++j->done;
  if (j->o->progress) j->o->progress(j->o->user, done, j->n, "compile");
  pthread_mutex_unlock(&j->lock);
}

/* ---- compiled candidates, kept for the context's later tunes ------------
 * The buckets of one op share most candidates, and a cubin depends only on
 * (op, config, variant, target): a prewarm of many buckets compiles each
 * candidate once. */

typedef struct memo_entry {
  const scree__op *op;
  scree__config cfg;
  scree__variant var;
  void *cubin;
  size_t size;
} memo_entry;

struct scree__cubin_memo {
  memo_entry *e;
  int n, cap;
};

static memo_entry *memo_find(scree_context *ctx, const scree__op *op,
                             const scree__config *cfg, const scree__variant *var) {
  struct scree__cubin_memo *m = ctx->cubin_memo;
  for (int i = 0; m && i < m->n; i++)
    if (m->e[i].op == op && !memcmp(&m->e[i].cfg, cfg, sizeof *cfg) &&
        !memcmp(&m->e[i].var, var, sizeof *var))
      return &m->e[i];
  return NULL;
}

static void memo_add(scree_context *ctx, const scree__op *op, const scree__config *cfg,
                     const scree__variant *var, const void *cubin, size_t size) {
  if (!ctx->cubin_memo && !(ctx->cubin_memo = calloc(1, sizeof *ctx->cubin_memo))) return;
  struct scree__cubin_memo *m = ctx->cubin_memo;
  if (m->n == m->cap) {
    const int cap = m->cap ? m->cap * 2 : 64;
    memo_entry *e = realloc(m->e, (size_t)cap * sizeof *e);
    if (!e) return;
    m->e = e;
    m->cap = cap;
  }
  void *copy = malloc(size);
  if (!copy) return;
  memcpy(copy, cubin, size);
  m->e[m->n++] = (memo_entry){op, *cfg, *var, copy, size};
}

void scree__tuner_free(scree_context *ctx) {
  struct scree__cubin_memo *m = ctx->cubin_memo;
  if (!m) return;
  for (int i = 0; i < m->n; i++) free(m->e[i].cubin);
  free(m->e);
  free(m);
  ctx->cubin_memo = NULL;
}

static int same_cfg(const scree__config *a, const scree__config *b) {
  return !memcmp(a, b, sizeof *a);
}

static int add_cand(cand *c, int n, const scree__config *cfg) {
  for (int i = 0; i < n; i++)
    if (same_cfg(&c[i].cfg, cfg)) return n;
  if (n >= MAX_CANDIDATES) return n;
  memset(&c[n], 0, sizeof c[n]);
  c[n].cfg = *cfg;
  c[n].cst = SCREE_ERROR_INTERNAL; /* until compiled */
  return n + 1;
}

static void record_bad(scree_context *ctx, const scree__ckey *key,
                       const scree__op *op, const scree__config *cfg,
                       int any_bucket, const char *reason) {
  char cs[128];
  scree__config_str(op, cfg, cs, sizeof cs);
  scree__log(ctx, SCREE_LOG_INFO, "tune %s %s: %s is bad: %s", op->name,
             key->bucket, cs, reason);
  if (!ctx->caches || !ctx->caches->user) return;
  scree__ckey k = *key;
  if (any_bucket) snprintf(k.bucket, sizeof k.bucket, "*");
  const int nvrtc = ctx->nvrtc_major * 1000 + ctx->nvrtc_minor * 10;
  scree__cache_record_bad(ctx->caches->user, &k, cs, nvrtc, reason);
}

static int first_line(const char *s, char *out, size_t n) {
  if (!s) s = "";
  /* Skip NVRTC's "NVRTC_ERROR_COMPILATION: " prefix to the first error line. */
  const char *e = strstr(s, "error");
  const char *start = e ? e : s;
  size_t len = strcspn(start, "\n");
  if (len >= n) len = n - 1;
  memcpy(out, start, len);
  out[len] = 0;
  return (int)len;
}

scree_status scree__tune(scree_context *ctx, const scree__op *op,
                         const scree__variant *var, uint64_t bucket,
                         const scree__tune_opts *opts,
                         scree__tune_result *res) {
  scree__tune_opts o;
  if (opts)
    o = *opts;
  else
    scree__tune_opts_init(&o);
  memset(res, 0, sizeof *res);
  if (!ctx->cu) return scree__fail(ctx, SCREE_ERROR_NO_DEVICE, "offline context");
  if (!ctx->nvrtc) return scree__fail(ctx, SCREE_ERROR_NO_NVRTC, "tuning needs NVRTC");
  const double t0 = now_s();
  pthread_mutex_lock(&ctx->tune_lock);

  scree__ckey key;
  scree__make_key(ctx, op, var, bucket, &key);
  snprintf(res->bucket, sizeof res->bucket, "%s", key.bucket);
  if (o.reuse_cached && ctx->caches && ctx->caches->user) {
    scree__centry e;
    char why[256];
    if (scree__cache_get(ctx->caches->user, &key, &e) == SCREE_OK) {
      scree__kernel k;
      const int ok = e.cubin_ok &&
                     !scree__config_parse(op, e.config, &res->cfg, why, sizeof why) &&
                     op->check(&res->cfg, var, why, sizeof why) &&
                     scree__kernel_from_cubin(ctx, op, &res->cfg, var, e.cubin, &k) == SCREE_OK;
      res->median_us = e.median_us;
      res->spread_us = e.spread_us;
      scree__centry_free(&e);
      if (ok) {
        res->seconds = now_s() - t0;
        pthread_mutex_unlock(&ctx->tune_lock);
        return SCREE_OK;
      }
    }
  }
  char vs[64];
  scree__variant_str(op, var, vs, sizeof vs);
  const int nvrtc = ctx->nvrtc_major * 1000 + ctx->nvrtc_minor * 10;

  __atomic_fetch_add(&ctx->counters.tunes, 1, __ATOMIC_RELAXED);
  _Alignas(16) unsigned char rep[256];
  op->representative(bucket, var, 0, rep);

  /* Candidates: the safelist's allowed configs in file order (or the whole
   * space), then the default, minus known-bad and pointless ones. */
  cand *c = calloc(MAX_CANDIDATES, sizeof *c);
  if (!c) {
    pthread_mutex_unlock(&ctx->tune_lock);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "candidates");
  }
  int n = 0;
  int use_space = o.explore || !ctx->safelist;
  if (!use_space) {
    scree__config *sl = calloc(MAX_CANDIDATES, sizeof *sl);
    int m = sl ? scree__safelist_candidates(ctx->safelist, op, vs, sl, MAX_CANDIDATES) : 0;
    for (int i = 0; i < m; i++) n = add_cand(c, n, &sl[i]);
    free(sl);
    if (n == 0) use_space = 1;
  }
  if (use_space) {
    scree__config *all = calloc(MAX_CANDIDATES, sizeof *all);
    const int total = all ? scree__config_space(op, all, MAX_CANDIDATES) : 0;
    for (int i = 0; i < total && i < MAX_CANDIDATES; i++) n = add_cand(c, n, &all[i]);
    free(all);
  }
  scree__config dflt;
  if (!ctx->safelist || !scree__safelist_default(ctx->safelist, op, vs, &dflt))
    op->default_config(ctx->sm, var, rep, &dflt);
  n = add_cand(c, n, &dflt);
  /* Candidates run as a contiguous call of the bucket would: adapted to
   * its alignment (a row length that is not a multiple of the vector
   * width narrows the vectors), which may make two candidates one. */
  op->adapt(&dflt, var, rep);
  {
    int m2 = 0;
    for (int i = 0; i < n; i++) {
      scree__config a = c[i].cfg;
      op->adapt(&a, var, rep);
      m2 = add_cand(c, m2, &a);
    }
    n = m2;
  }
  int m = 0;
  for (int i = 0; i < n; i++) {
    char why[256], cs[128];
    if (!op->check(&c[i].cfg, var, why, sizeof why)) continue;
    if (!same_cfg(&c[i].cfg, &dflt) && !op->worth_timing(&c[i].cfg, var, rep)) continue;
    if (ctx->safelist && scree__safelist_denied(ctx->safelist, op, vs, &c[i].cfg)) continue;
    scree__config_str(op, &c[i].cfg, cs, sizeof cs);
    if (ctx->caches && ctx->caches->user &&
        scree__cache_is_bad(ctx->caches->user, &key, cs, nvrtc, NULL, 0) == 1) {
      res->known_bad++;
      continue;
    }
    c[m++] = c[i];
  }
  n = m;
  res->candidates = n;
  scree__log(ctx, SCREE_LOG_INFO, "tune %s %s %s: %d candidates (%s), %d known bad",
             op->name, key.bucket, vs, n, use_space ? "whole space" : "safelist",
             res->known_bad);

  /* Compile on a thread pool (NVRTC is thread-safe) what no earlier tune
   * of this context compiled already; tuning is serialized, so the memo
   * needs no lock of its own. */
  int *todo = calloc((size_t)(n > 0 ? n : 1), sizeof *todo);
  if (!todo) {
    free(c);
    pthread_mutex_unlock(&ctx->tune_lock);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "candidates");
  }
  int ntodo = 0;
  for (int i = 0; i < n; i++) {
    const memo_entry *me = memo_find(ctx, op, &c[i].cfg, var);
    if (me && (c[i].cubin = malloc(me->size))) {
      memcpy(c[i].cubin, me->cubin, me->size);
      c[i].cubin_size = me->size;
      c[i].cst = SCREE_OK;
    } else {
      todo[ntodo++] = i;
    }
  }
  cjob j = {.ctx = ctx, .op = op, .var = var, .c = c, .todo = todo, .n = ntodo, .o = &o};
  pthread_mutex_init(&j.lock, NULL);
  scree__parallel_for(ntodo, o.threads, compile_one, &j);
  pthread_mutex_destroy(&j.lock);
  for (int t = 0; t < ntodo; t++)
    if (c[todo[t]].cst == SCREE_OK)
      memo_add(ctx, op, &c[todo[t]].cfg, var, c[todo[t]].cubin, c[todo[t]].cubin_size);
  free(todo);
  __atomic_fetch_add(&ctx->counters.compiles, (uint64_t)ntodo, __ATOMIC_RELAXED);

  const int pushed = scree__ctx_enter(ctx);
  problem chk, tp;
  CUstream stream = NULL;
  scree_status st = problem_make(ctx, op, var, bucket, 1, &chk);
  if (!st) {
    st = problem_make(ctx, op, var, bucket, 0, &tp);
    if (st) problem_free(ctx, &chk);
  }
  if (!st && ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
    st = scree__fail(ctx, SCREE_ERROR_CUDA, "cuStreamCreate");
    problem_free(ctx, &chk);
    problem_free(ctx, &tp);
  }
  if (st) goto out_nobuf;

  for (int i = 0; i < n; i++) {
    cand *k = &c[i];
    char why[512], cs[128];
    scree__config_str(op, &k->cfg, cs, sizeof cs);
    if (o.progress) o.progress(o.user, i + 1, n, "time");
    if (k->cst != SCREE_OK) {
      char line[400];
      first_line(k->log, line, sizeof line);
      snprintf(why, sizeof why, "compile: %s", line);
      /* Only a compilation error is the config's fault; out of memory or
       * an NVRTC failure may pass next time. */
      if (k->cst == SCREE_ERROR_COMPILE) record_bad(ctx, &key, op, &k->cfg, 1, why);
      res->failed++;
      continue;
    }
    /* Candidates run from modules of their own, unloaded when the tune
     * ends; only the winner joins the kernel table. */
    st = scree__module_load(ctx, op, k->cubin, &k->k);
    if (st) {
      char err[400];
      scree__error_copy(ctx, err, sizeof err);
      snprintf(why, sizeof why, "load: %s", err);
      /* Too many resources or a bad image is the config's; running out of
       * device memory is not. */
      if (st == SCREE_ERROR_LOAD) record_bad(ctx, &key, op, &k->cfg, 1, why);
      memset(&k->k, 0, sizeof k->k);
      res->failed++;
      st = SCREE_OK;
      continue;
    }
    st = check_one(ctx, op, &k->cfg, &k->k, &chk, stream, o.time_limit_ms, why, sizeof why);
    if (!st && o.poison_config && !strcmp(o.poison_config, cs)) {
      snprintf(why, sizeof why, "wrong answer: poisoned for testing");
      st = SCREE_ERROR_WRONG_ANSWER;
    }
    if (!st)
      st = time_one(ctx, op, &k->cfg, &k->k, &tp, stream, o.warmup, o.reps,
                    o.time_limit_ms, &k->median, &k->spread, why, sizeof why);
    if (st) {
      if (!strcmp(why, "check failed") || !strcmp(why, "timing failed")) {
        char generic[32];
        snprintf(generic, sizeof generic, "%.20s", why);
        char err[400];
        scree__error_copy(ctx, err, sizeof err);
        snprintf(why, sizeof why, "%s: %s", generic, err);
      }
      record_bad(ctx, &key, op, &k->cfg, 0, why);
      res->failed++;
      /* A fault poisons the whole CUDA context: nothing after it can run. */
      CUresult r = ctx->cu->CtxSynchronize();
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
        st = scree__cu_fail(ctx, r, SCREE_ERROR_CUDA,
                            "the CUDA context failed while tuning (recorded the config as bad)");
        break;
      }
      st = SCREE_OK;
      continue;
    }
    k->ok = 1;
    res->timed++;
    if (same_cfg(&k->cfg, &dflt)) res->default_us = k->median;
  }

  ctx->cu->StreamDestroy(stream);
  problem_free(ctx, &chk);
  problem_free(ctx, &tp);
out_nobuf:
  for (int i = 0; i < n; i++)
    if (c[i].k.module) ctx->cu->ModuleUnload(c[i].k.module);
  scree__ctx_leave(ctx, pushed);

  int win = -1;
  if (!st) {
    double best = INFINITY;
    for (int i = 0; i < n; i++)
      if (c[i].ok && c[i].median < best) best = c[i].median;
    /* The first config in candidate order within the noise band wins, so
     * runs that differ only by noise pick the same config. */
    for (int i = 0; i < n && win < 0; i++)
      if (c[i].ok && c[i].median <= best * (1 + o.noise)) win = i;
    if (win < 0)
      st = scree__fail(ctx, SCREE_ERROR_NOT_FOUND,
                       "tune %s %s %s: no candidate compiled and computed the right answer "
                       "(%d tried, %d known bad)", op->name, key.bucket, vs, n, res->known_bad);
  }
  if (win >= 0) {
    scree__kernel wk;
    scree_status ls = scree__kernel_from_cubin(ctx, op, &c[win].cfg, var, c[win].cubin, &wk);
    if (ls) st = ls, win = -1;
  }
  if (win >= 0) {
    res->cfg = c[win].cfg;
    res->median_us = c[win].median;
    res->spread_us = c[win].spread;
    char cs[128];
    scree__config_str(op, &res->cfg, cs, sizeof cs);
    scree__log(ctx, SCREE_LOG_INFO, "tune %s %s %s: winner %s %.2f us (default %.2f us), %d timed",
               op->name, key.bucket, vs, cs, res->median_us, res->default_us, res->timed);
    if (o.store && ctx->caches && ctx->caches->user) {
      scree__centry e;
      memset(&e, 0, sizeof e);
      e.key = key;
      snprintf(e.config, sizeof e.config, "%s", cs);
      e.median_us = res->median_us;
      e.spread_us = res->spread_us;
      snprintf(e.device_name, sizeof e.device_name, "%.127s", ctx->info.name);
      e.sm_count = ctx->info.sm_count;
      e.driver_version = ctx->driver_version;
      e.nvrtc_version = nvrtc;
      e.cubin = c[win].cubin;
      e.cubin_size = c[win].cubin_size;
      int replaced = 0;
      scree_status cs2 = scree__cache_put(ctx->caches->user, &e, &replaced);
      if (cs2) scree__log(ctx, SCREE_LOG_WARN, "could not store the tuned config: %s",
                          scree_status_str(cs2));
      else
        scree__cache_delete_miss(ctx->caches->user, &key); /* answered now */
    }
  }
  for (int i = 0; i < n; i++) {
    free(c[i].cubin);
    free(c[i].log);
  }
  free(c);
  res->seconds = now_s() - t0;
  pthread_mutex_unlock(&ctx->tune_lock);
  return st;
}

scree_status scree__verify_config(scree_context *ctx, const scree__op *op,
                                  const scree__variant *var, uint64_t bucket,
                                  const scree__config *cfg, const void *cubin,
                                  double *median_us, double *spread_us) {
  if (!ctx->cu) return scree__fail(ctx, SCREE_ERROR_NO_DEVICE, "offline context");
  char why[512] = "";
  if (!op->check(cfg, var, why, sizeof why))
    return scree__fail(ctx, SCREE_ERROR_INVALID_CONFIG, "%s", why);
  /* A config that this bucket's calls would narrow cannot run as stored. */
  _Alignas(16) unsigned char rep[256];
  op->representative(bucket, var, 0, rep);
  scree__config adapted = *cfg;
  op->adapt(&adapted, var, rep);
  if (memcmp(&adapted, cfg, sizeof adapted)) {
    char cs[128];
    scree__config_str(op, cfg, cs, sizeof cs);
    return scree__fail(ctx, SCREE_ERROR_INVALID_CONFIG,
                       "%s does not suit this bucket's alignment", cs);
  }
  scree__kernel k;
  scree_status st = cubin ? scree__module_load(ctx, op, cubin, &k)
                          : scree__kernel_get(ctx, op, cfg, var, &k);
  if (st) return st;
  const int pushed = scree__ctx_enter(ctx);
  problem chk, tp;
  CUstream stream = NULL;
  memset(&tp, 0, sizeof tp);
  st = problem_make(ctx, op, var, bucket, 1, &chk);
  if (st) goto out;
  if (ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
    problem_free(ctx, &chk);
    st = scree__fail(ctx, SCREE_ERROR_CUDA, "cuStreamCreate");
    goto out;
  }
  st = check_one(ctx, op, cfg, &k, &chk, stream, 1000, why, sizeof why);
  if (st) st = scree__fail(ctx, st, "%s", why);
  if (!st && median_us) {
    st = problem_make(ctx, op, var, bucket, 0, &tp);
    if (!st) {
      double sp = 0;
      st = time_one(ctx, op, cfg, &k, &tp, stream, 3, 25, 1000, median_us, &sp, why, sizeof why);
      if (st) st = scree__fail(ctx, st, "%s", why);
      if (spread_us) *spread_us = sp;
      problem_free(ctx, &tp);
    }
  }
  ctx->cu->StreamDestroy(stream);
  problem_free(ctx, &chk);
out:
  if (cubin) ctx->cu->ModuleUnload(k.module);
  scree__ctx_leave(ctx, pushed);
  return st;
}
