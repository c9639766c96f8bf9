/* kernels.c - kernel sources, NVRTC compilation, the in-memory kernel table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sha256.h"

/* Generated at build time by cmake/embed_kernels.cmake. */
extern const scree__embedded scree__embedded_kernels[];
extern const size_t scree__embedded_kernel_count;
/* The NVRTC options every compile shares besides the target and the -D
 * options; part of every cubin's identity (scree__source_hash). */
#define SCREE__FIXED_NVRTC_OPTS "-std=c++17"

#ifndef SCREE_DEFAULT_KERNEL_DIR
#define SCREE_DEFAULT_KERNEL_DIR ""
#endif

static char *read_file(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return scree__read_text(path);
}

/* Sources are assembled once per process and kept: a few kB per op. */
#define MAX_SOURCES 32
static struct {
  char name[64];
  char *text;
} g_src[MAX_SOURCES];
static int g_nsrc;
static pthread_mutex_t g_src_lock = PTHREAD_MUTEX_INITIALIZER;

const char *scree__kernel_source(const char *file) {
  const char *result = NULL;
  pthread_mutex_lock(&g_src_lock);
  for (int i = 0; i < g_nsrc; i++)
    if (!strcmp(g_src[i].name, file)) {
      result = g_src[i].text;
      goto out;
    }
  if (g_nsrc == MAX_SOURCES) goto out;
  {
    const char *dir = getenv("SCREE_KERNEL_DIR");
    if (!dir || !*dir) dir = SCREE_DEFAULT_KERNEL_DIR;
    char *common = NULL, *body = NULL;
    if (*dir) {
      common = read_file(dir, "common.cuh");
      body = read_file(dir, file);
    } else {
      common = scree__embedded_text(scree__embedded_kernels,
                                    scree__embedded_kernel_count, "common.cuh");
      body = scree__embedded_text(scree__embedded_kernels,
                                  scree__embedded_kernel_count, file);
    }
    if (common && body) {
      size_t n = strlen(common) + strlen(body) + 64;
      char *all = malloc(n);
      if (all) {
        snprintf(all, n, "%s\n#line 1 \"%s\"\n%s", common, file, body);
        snprintf(g_src[g_nsrc].name, sizeof g_src[g_nsrc].name, "%s", file);
        g_src[g_nsrc].text = all;
        g_nsrc++;
        result = all;
      }
    }
    free(common);
    free(body);
  }
out:
  pthread_mutex_unlock(&g_src_lock);
  return result;
}

void scree__config_str(const scree__op *op, const scree__config *cfg,
                       char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < op->nfields && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%s=%d", i ? "," : "",
                          op->fields[i].name, cfg->v[i]);
}

int scree__config_parse(const scree__op *op, const char *s, scree__config *cfg,
                        char *why, size_t why_size) {
  memset(cfg, 0, sizeof *cfg);
  int seen[SCREE__MAX_FIELDS] = {0};
  const char *p = s;
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq) {
      snprintf(why, why_size, "expected name=value at \"%s\"", p);
      return -1;
    }
    int f = -1;
    for (int i = 0; i < op->nfields; i++)
      if (strlen(op->fields[i].name) == (size_t)(eq - p) &&
          !strncmp(op->fields[i].name, p, (size_t)(eq - p)))
        f = i;
    if (f < 0) {
      snprintf(why, why_size, "%s has no config field \"%.*s\"", op->name,
               (int)(eq - p), p);
      return -1;
    }
    char *end;
    errno = 0;
    long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || errno || v < -1000000 || v > 1000000 ||
        (*end && *end != ',')) {
      snprintf(why, why_size, "field %s: expected an integer at \"%s\"",
               op->fields[f].name, eq + 1);
      return -1;
    }
    if (seen[f]++) {
      snprintf(why, why_size, "field %s given twice", op->fields[f].name);
      return -1;
    }
    cfg->v[f] = (int)v;
    p = *end ? end + 1 : end;
  }
  for (int i = 0; i < op->nfields; i++)
    if (!seen[i]) {
      snprintf(why, why_size, "field %s missing", op->fields[i].name);
      return -1;
    }
  return 0;
}

int scree__config_space(const scree__op *op, scree__config *out, int cap) {
  int n = 0, idx[SCREE__MAX_FIELDS] = {0};
  for (;;) {
    if (n < cap) {
      memset(&out[n], 0, sizeof out[n]);
      for (int f = 0; f < op->nfields; f++) out[n].v[f] = op->fields[f].values[idx[f]];
    }
    n++;
    int f = 0;
    while (f < op->nfields && ++idx[f] == op->fields[f].nvalues) idx[f++] = 0;
    if (f == op->nfields) return n;
  }
}

void scree__variant_str(const scree__op *op, const scree__variant *var,
                        char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < op->nvfields && n < size; i++) {
    if (op->vfields[i].is_dtype)
      n += (size_t)snprintf(buf + n, size - n, "%s%s=%s", i ? "," : "",
                            op->vfields[i].name,
                            scree_dtype_name((scree_dtype)var->v[i]));
    else
      n += (size_t)snprintf(buf + n, size - n, "%s%s=%d", i ? "," : "",
                            op->vfields[i].name, var->v[i]);
  }
}

scree_status scree__compile(const scree__nvrtc_api *nv, const scree__op *op,
                            const scree__config *cfg,
                            const scree__variant *var, const char *arch,
                            void **cubin, size_t *cubin_size, char **log) {
  *cubin = NULL;
  *cubin_size = 0;
  if (log) *log = NULL;
  if (!nv) return SCREE_ERROR_NO_NVRTC;
  const char *src = scree__kernel_source(op->source);
  if (!src) {
    if (log && (*log = malloc(256)))
      snprintf(*log, 256, "kernel source %s not found", op->source);
    return SCREE_ERROR_COMPILE;
  }
  enum { MAXOPT = 3 + SCREE__MAX_FIELDS + SCREE__MAX_VARIANT };
  char optbuf[MAXOPT][64];
  const char *opts[MAXOPT];
  int n = 0;
  snprintf(optbuf[n], 64, "--gpu-architecture=%s", arch);
  n++;
  snprintf(optbuf[n], 64, "%s", SCREE__FIXED_NVRTC_OPTS);
  n++;
  for (int i = 0; i < op->nfields; i++, n++)
    snprintf(optbuf[n], 64, "-D%s=%d", op->fields[i].macro, cfg->v[i]);
  for (int i = 0; i < op->nvfields; i++, n++)
    snprintf(optbuf[n], 64, "-D%s=%d", op->vfields[i].macro, var->v[i]);
  for (int i = 0; i < n; i++) opts[i] = optbuf[i];

  nvrtcProgram prog;
  /* Only a compilation error (NVRTC_ERROR_COMPILATION) says the config
   * itself is bad; running out of memory or an NVRTC failure does not. */
  nvrtcResult r = nv->CreateProgram(&prog, src, op->source, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    if (log && (*log = malloc(256)))
      snprintf(*log, 256, "nvrtcCreateProgram: %s", nv->GetErrorString(r));
    return r == NVRTC_ERROR_OUT_OF_MEMORY ? SCREE_ERROR_OUT_OF_MEMORY : SCREE_ERROR_INTERNAL;
  }
  r = nv->CompileProgram(prog, n, opts);
  scree_status st = SCREE_OK;
  if (r != NVRTC_SUCCESS) {
    st = r == NVRTC_ERROR_COMPILATION      ? SCREE_ERROR_COMPILE
         : r == NVRTC_ERROR_OUT_OF_MEMORY ? SCREE_ERROR_OUT_OF_MEMORY
                                          : SCREE_ERROR_INTERNAL;
    size_t ls = 0;
    if (log && nv->GetProgramLogSize(prog, &ls) == NVRTC_SUCCESS &&
        (*log = malloc(ls + 128))) {
      int k = snprintf(*log, 128, "%s: ", nv->GetErrorString(r));
      nv->GetProgramLog(prog, *log + k);
    }
  } else {
    size_t sz = 0;
    if (nv->GetCUBINSize(prog, &sz) != NVRTC_SUCCESS || sz == 0 ||
        !(*cubin = malloc(sz)) || nv->GetCUBIN(prog, *cubin) != NVRTC_SUCCESS) {
      free(*cubin);
      *cubin = NULL;
      st = SCREE_ERROR_INTERNAL;
      if (log && (*log = malloc(128)))
        snprintf(*log, 128, "NVRTC produced no cubin for %s", arch);
    } else {
      *cubin_size = sz;
    }
  }
  nv->DestroyProgram(&prog);
  return st;
}

/* ---- the in-memory kernel table ---------------------------------------- */

static uint64_t key_hash(const scree__op *op, const scree__config *cfg,
                         const scree__variant *var) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char *parts[3] = {(const unsigned char *)&op,
                                   (const unsigned char *)cfg,
                                   (const unsigned char *)var};
  const size_t sizes[3] = {sizeof op, sizeof *cfg, sizeof *var};
  for (int p = 0; p < 3; p++)
    for (size_t i = 0; i < sizes[p]; i++) {
      h ^= parts[p][i];
      h *= 1099511628211ull;
    }
  return h;
}

static scree__kentry *table_find(scree_context *ctx, const scree__op *op,
                                 const scree__config *cfg,
                                 const scree__variant *var, uint64_t h) {
  if (!ctx->ktab_cap) return NULL;
  size_t mask = ctx->ktab_cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    scree__kentry *e = &ctx->ktab[i];
    if (!e->used) return NULL;
    if (e->hash == h && e->op == op && !memcmp(&e->cfg, cfg, sizeof *cfg) &&
        !memcmp(&e->var, var, sizeof *var))
      return e;
  }
}

static int table_insert(scree_context *ctx, const scree__kentry *ne) {
  if ((ctx->ktab_len + 1) * 2 > ctx->ktab_cap) {
    size_t cap = ctx->ktab_cap ? ctx->ktab_cap * 2 : 64;
    scree__kentry *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < ctx->ktab_cap; i++) {
      if (!ctx->ktab[i].used) continue;
      size_t j = ctx->ktab[i].hash & (cap - 1);
      while (t[j].used) j = (j + 1) & (cap - 1);
      t[j] = ctx->ktab[i];
    }
    free(ctx->ktab);
    ctx->ktab = t;
    ctx->ktab_cap = cap;
  }
  size_t j = ne->hash & (ctx->ktab_cap - 1);
  while (ctx->ktab[j].used) j = (j + 1) & (ctx->ktab_cap - 1);
  ctx->ktab[j] = *ne;
  ctx->ktab[j].used = 1;
  ctx->ktab_len++;
  return 0;
}

void scree__kernel_table_free(scree_context *ctx) {
  for (size_t i = 0; i < ctx->ktab_cap; i++)
    if (ctx->ktab[i].used) ctx->cu->ModuleUnload(ctx->ktab[i].k.module);
  free(ctx->ktab);
  ctx->ktab = NULL;
  ctx->ktab_cap = ctx->ktab_len = 0;
}

/* Loads a cubin into the current context and resolves the entry point. */
static scree_status load_cubin(scree_context *ctx, const scree__op *op,
                               const void *cubin, scree__kernel *k) {
  CUresult r = ctx->cu->ModuleLoadDataEx(&k->module, cubin, 0, NULL, NULL);
  if (r != CUDA_SUCCESS) return scree__cu_fail(ctx, r, SCREE_ERROR_LOAD, "cuModuleLoadDataEx");
  r = ctx->cu->ModuleGetFunction(&k->fn, k->module, op->entry);
  if (r != CUDA_SUCCESS) {
    ctx->cu->ModuleUnload(k->module);
    return scree__cu_fail(ctx, r, SCREE_ERROR_LOAD, "cuModuleGetFunction");
  }
  return SCREE_OK;
}

const char *scree__target_arch(const scree_context *ctx, const scree__op *op,
                               char *buf) {
  /* Arch-specific features ("a" targets) exist from sm_90 on; the cubin
   * then runs only on exactly that arch, which the cache key already
   * records. */
  snprintf(buf, 16, "%.14s%s", ctx->arch, op->arch_specific && ctx->sm >= 90 ? "a" : "");
  return buf;
}

scree_status scree__kernel_get(scree_context *ctx, const scree__op *op,
                               const scree__config *cfg,
                               const scree__variant *var, scree__kernel *out) {
  const uint64_t h = key_hash(op, cfg, var);
  pthread_mutex_lock(&ctx->lock);
  scree__kentry *e = table_find(ctx, op, cfg, var, h);
  if (e) {
    *out = e->k;
    pthread_mutex_unlock(&ctx->lock);
    return SCREE_OK;
  }
  pthread_mutex_unlock(&ctx->lock);

  char why[512];
  if (!op->check(cfg, var, why, sizeof why)) {
    char cs[256];
    scree__config_str(op, cfg, cs, sizeof cs);
    return scree__fail(ctx, SCREE_ERROR_INVALID_CONFIG, "%s config %s: %s",
                       op->name, cs, why);
  }
  if (!ctx->nvrtc) {
    char cs[256];
    scree__config_str(op, cfg, cs, sizeof cs);
    return scree__fail(ctx, SCREE_ERROR_NO_NVRTC,
                       "%s config %s must be compiled for %s, but NVRTC is not available "
                       "and no cache holds it: ship a cache with this shape "
                       "(scree-tune prewarm, export) or install NVRTC",
                       op->name, cs, ctx->arch);
  }
  if (ctx->log_level >= SCREE_LOG_DEBUG) {
    char cs[256];
    scree__config_str(op, cfg, cs, sizeof cs);
    char t[16];
    scree__log(ctx, SCREE_LOG_DEBUG, "compiling %s %s for %s", op->name, cs,
               scree__target_arch(ctx, op, t));
  }
  /* Compile outside the lock: other calls keep running meanwhile. */
  void *cubin = NULL;
  size_t size = 0;
  char *log = NULL;
  char target[16];
  scree_status st = scree__compile(ctx->nvrtc, op, cfg, var,
                                   scree__target_arch(ctx, op, target), &cubin, &size, &log);
  __atomic_fetch_add(&ctx->counters.compiles, 1, __ATOMIC_RELAXED);
  if (st != SCREE_OK) {
    char cs[256];
    scree__config_str(op, cfg, cs, sizeof cs);
    st = scree__fail(ctx, st, "%s config %s for %s: %s", op->name, cs,
                     ctx->arch, log ? log : "(no log)");
    free(log);
    return st;
  }
  free(log);
  st = scree__kernel_from_cubin(ctx, op, cfg, var, cubin, out);
  free(cubin);
  return st;
}

scree_status scree__module_load(scree_context *ctx, const scree__op *op,
                                const void *cubin, scree__kernel *out) {
  const int pushed = scree__ctx_enter(ctx);
  scree_status st = load_cubin(ctx, op, cubin, out);
  scree__ctx_leave(ctx, pushed);
  return st;
}

scree_status scree__kernel_from_cubin(scree_context *ctx, const scree__op *op,
                                      const scree__config *cfg,
                                      const scree__variant *var,
                                      const void *cubin, scree__kernel *out) {
  const uint64_t h = key_hash(op, cfg, var);
  scree__kernel k;
  const int pushed = scree__ctx_enter(ctx);
  scree_status st = load_cubin(ctx, op, cubin, &k);
  scree__ctx_leave(ctx, pushed);
  if (st != SCREE_OK) return st;

  pthread_mutex_lock(&ctx->lock);
  scree__kentry *e;
  __atomic_fetch_add(&ctx->counters.module_loads, 1, __ATOMIC_RELAXED);
  e = table_find(ctx, op, cfg, var, h);
  if (e) { /* another thread won the race: keep its module */
    *out = e->k;
    pthread_mutex_unlock(&ctx->lock);
    const int p2 = scree__ctx_enter(ctx);
    ctx->cu->ModuleUnload(k.module);
    scree__ctx_leave(ctx, p2);
    return SCREE_OK;
  }
  scree__kentry ne = {.op = op, .cfg = *cfg, .var = *var, .k = k, .hash = h};
  if (table_insert(ctx, &ne) != 0) {
    pthread_mutex_unlock(&ctx->lock);
    const int p2 = scree__ctx_enter(ctx);
    ctx->cu->ModuleUnload(k.module);
    scree__ctx_leave(ctx, p2);
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "kernel table is full");
  }
  pthread_mutex_unlock(&ctx->lock);
  *out = k;
  return SCREE_OK;
}

const char *scree__source_hash(const scree__op *op) {
  static struct {
    const scree__op *op;
    char hex[65];
  } memo[32];
  static int n;
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  const char *r = "";
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n; i++)
    if (memo[i].op == op) {
      r = memo[i].hex;
      goto out;
    }
  const char *src = scree__kernel_source(op->source);
  if (src && n < 32) {
    /* What NVRTC compiles: the source and the options every config shares
     * (the config's and variant's -D options are in the cache key). */
    const size_t len = strlen(src) + sizeof SCREE__FIXED_NVRTC_OPTS + 16;
    char *all = malloc(len);
    if (all) {
      const int k = snprintf(all, len, "%s\n//nvrtc %s", src, SCREE__FIXED_NVRTC_OPTS);
      memo[n].op = op;
      scree__sha256_hex(all, (size_t)k, memo[n].hex);
      r = memo[n++].hex;
      free(all);
    }
  }
out:
  pthread_mutex_unlock(&lock);
  return r;
}
