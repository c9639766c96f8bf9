/* module.c - loading cubins, and the context's table of loaded modules
 * keyed by (op, config, variant). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/jit.h"

scree__kkey scree__kkey_of(const scree__op *op, const scree__config *cfg,
                           const scree__variant *var) {
  scree__kkey k;
  memset(&k, 0, sizeof k);
  k.op = op;
  k.cfg = *cfg;
  k.var = *var;
  return k;
}

/* The module table: scree__kkey -> scree__kernel. */
scree_status scree__modtab_create(scree_context *ctx) {
  ctx->modules = scree__ltab_new(sizeof(scree__kkey), sizeof(scree__kernel));
  return ctx->modules ? SCREE_OK : SCREE_ERROR_OUT_OF_MEMORY;
}

void scree__modtab_free(scree_context *ctx) {
  scree__ltab *m = ctx->modules;
  if (!m) return;
  const int pushed = scree__ctx_enter(ctx);
  size_t pos = 0;
  void *v;
  while (scree__htab_next(&m->t, &pos, NULL, &v))
    ctx->cu->ModuleUnload(((scree__kernel *)v)->module);
  scree__ctx_leave(ctx, pushed);
  scree__ltab_free(m);
  ctx->modules = NULL;
}

/* Loads a cubin into the current context and resolves the entry points. */
static scree_status load_cubin(scree_context *ctx, const scree__op *op,
                               const scree__config *cfg, const scree__variant *var,
                               const void *cubin, scree__kernel *k) {
  memset(k, 0, sizeof *k);
  const scree__impl *im = &op->impls[cfg->impl];
  CUresult r = ctx->cu->ModuleLoadDataEx(&k->module, cubin, 0, NULL, NULL);
  if (r != CUDA_SUCCESS) return scree__cu_fail(ctx, r, SCREE_ERROR_LOAD, "cuModuleLoadDataEx");
  for (int i = 0; i < SCREE__MAX_ENTRIES && im->entries[i]; i++) {
    r = ctx->cu->ModuleGetFunction(&k->fn[i], k->module, im->entries[i]);
    if (r != CUDA_SUCCESS) {
      ctx->cu->ModuleUnload(k->module);
      char what[160];
      snprintf(what, sizeof what, "cuModuleGetFunction(%s)", im->entries[i]);
      return scree__cu_fail(ctx, r, SCREE_ERROR_LOAD, what);
    }
  }
  /* Past 48 KiB of static and dynamic shared memory together a kernel
   * must opt in to its dynamic part: once per module, so launches need
   * not. Every kernel with dynamic shared memory opts in (its static part
   * is not known here: 48 KiB of dynamic memory plus any static fails to
   * launch without it). */
  const size_t smem = im->smem ? im->smem(cfg, var) : 0;
  if (smem > 0) {
    r = ctx->cu->FuncSetAttribute(k->fn[0], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  (int)smem);
    if (r != CUDA_SUCCESS) {
      ctx->cu->ModuleUnload(k->module);
      return scree__cu_fail(ctx, r, SCREE_ERROR_LOAD,
                            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    }
  }
  if (im->threads && ctx->cu->OccupancyMaxActiveBlocksPerMultiprocessor(
                         &k->occupancy, k->fn[0], im->threads(cfg), smem) != CUDA_SUCCESS)
    k->occupancy = 1;
  return SCREE_OK;
}

scree_status scree__module_load(scree_context *ctx, const scree__op *op,
                                const scree__config *cfg, const scree__variant *var,
                                const void *cubin, scree__kernel *out) {
  const int pushed = scree__ctx_enter(ctx);
  scree_status st = load_cubin(ctx, op, cfg, var, cubin, out);
  scree__ctx_leave(ctx, pushed);
  return st;
}

scree_status scree__kernel_from_cubin(scree_context *ctx, const scree__op *op,
                                      const scree__config *cfg,
                                      const scree__variant *var, const void *cubin,
                                      scree__kernel *out) {
  const scree__kkey key = scree__kkey_of(op, cfg, var);
  scree__kernel k;
  scree_status st = scree__module_load(ctx, op, cfg, var, cubin, &k);
  if (st != SCREE_OK) return st;
  scree__count(&ctx->counters.module_loads);
  /* Another thread that won the race keeps its module (into *out). */
  const int put = scree__ltab_put(ctx->modules, &key, &k, out);
  if (put != 1) {
    const int pushed = scree__ctx_enter(ctx);
    ctx->cu->ModuleUnload(k.module);
    scree__ctx_leave(ctx, pushed);
    if (put < 0) return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "module table");
    return SCREE_OK;
  }
  *out = k;
  return SCREE_OK;
}

scree_status scree__kernel_get(scree_context *ctx, const scree__op *op,
                               const scree__config *cfg, const scree__variant *var,
                               scree__kernel *out) {
  const scree__kkey key = scree__kkey_of(op, cfg, var);
  if (scree__ltab_get(ctx->modules, &key, out)) return SCREE_OK;

  char why[512], cs[256];
  scree__config_str(op, cfg, cs, sizeof cs);
  scree__target t;
  scree__target_of(ctx, &t);
  if (!scree__config_check(op, cfg, var, &t, why, sizeof why))
    return scree__fail(ctx, SCREE_ERROR_INVALID_CONFIG, "%s config %s: %s", op->name, cs, why);
  if (!ctx->nvrtc)
    return scree__fail(ctx, SCREE_ERROR_NO_NVRTC,
                       "%s config %s must be compiled for %s, but NVRTC is not available "
                       "and no cache holds it: ship a cache with this shape "
                       "(scree-tune prewarm, export) or install NVRTC",
                       op->name, cs, ctx->arch);
  char target[16];
  scree__target_arch(ctx->arch, ctx->sm, &op->impls[cfg->impl], target);
  scree__log(ctx, SCREE_LOG_DEBUG, "compiling %s %s for %s", op->name, cs, target);
  /* Compile outside the lock: other calls keep running meanwhile. */
  void *cubin = NULL;
  size_t size = 0;
  char *log = NULL;
  scree_status st = scree__compile(ctx->nvrtc, op, cfg, var, target, NULL, &cubin, &size, &log);
  scree__count(&ctx->counters.compiles);
  if (st != SCREE_OK) {
    st = scree__fail(ctx, st, "%s config %s for %s: %s", op->name, cs, target,
                     log ? log : "(no log)");
    free(log);
    return st;
  }
  free(log);
  st = scree__kernel_from_cubin(ctx, op, cfg, var, cubin, out);
  free(cubin);
  return st;
}
