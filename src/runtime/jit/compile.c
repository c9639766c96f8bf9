/* compile.c - one config of one op through NVRTC into a cubin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/jit.h"

const char *scree__target_arch(const char *arch, int sm, const scree__impl *im, char *buf) {
  /* Arch-specific features ("a" targets) exist from sm_90 on; the cubin
   * then runs only on exactly that arch, which the cache key records. */
  snprintf(buf, 16, "%.14s%s", arch, im->arch_specific && sm >= 90 ? "a" : "");
  return buf;
}

static char *log_msg(const char *fmt, const char *a) {
  char *s = malloc(512);
  if (s) snprintf(s, 512, fmt, a);
  return s;
}

scree_status scree__compile(const scree__nvrtc_api *nv, const scree__op *op,
                            const scree__config *cfg, const scree__variant *var,
                            const char *arch, const char *extra_opts, void **cubin,
                            size_t *cubin_size, char **log) {
  *cubin = NULL;
  *cubin_size = 0;
  if (log) *log = NULL;
  if (!nv) return SCREE_ERROR_NO_NVRTC;
  if (cfg->impl < 0 || cfg->impl >= op->nimpls) {
    if (log) *log = log_msg("no implementation %s", "");
    return SCREE_ERROR_INVALID_CONFIG;
  }
  const scree__impl *im = &op->impls[cfg->impl];
  const char *src = scree__kernel_source(im->source);
  if (!src) {
    if (log) *log = log_msg("kernel source %s (or a header it includes) not found", im->source);
    return SCREE_ERROR_COMPILE;
  }
  enum { MAXOPT = 4 + SCREE__MAX_FIELDS + SCREE__MAX_VARIANT + SCREE__MAX_DEFINES };
  char optbuf[MAXOPT][96];
  const char *opts[MAXOPT];
  int n = 0;
  snprintf(optbuf[n++], 96, "--gpu-architecture=%s", arch);
  snprintf(optbuf[n++], 96, "%s", SCREE__FIXED_NVRTC_OPTS);
  for (int i = 0; i < im->nfields; i++)
    snprintf(optbuf[n++], 96, "-D%s=%d", im->fields[i].macro, cfg->v[i]);
  for (int i = 0; i < op->nvfields; i++)
    snprintf(optbuf[n++], 96, "-D%s=%d", op->vfields[i].macro, var->v[i]);
  /* The implementation's fixed macros, one -D a space-separated word. */
  for (const char *d = im->defines; d && *d;) {
    while (*d == ' ') d++;
    const size_t len = strcspn(d, " ");
    if (!len) break;
    if (n == MAXOPT - 1 || len > 80) {
      if (log) *log = log_msg("implementation %s: too many or too long defines", im->name);
      return SCREE_ERROR_INVALID_CONFIG;
    }
    snprintf(optbuf[n++], 96, "-D%.*s", (int)len, d);
    d += len;
  }
  if (extra_opts && *extra_opts) snprintf(optbuf[n++], 96, "%s", extra_opts);
  for (int i = 0; i < n; i++) opts[i] = optbuf[i];

  nvrtcProgram prog;
  /* Only a compilation error (NVRTC_ERROR_COMPILATION) says the config
   * itself is bad; running out of memory or an NVRTC failure does not. */
  nvrtcResult r = nv->CreateProgram(&prog, src, im->source, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    if (log) *log = log_msg("nvrtcCreateProgram: %s", nv->GetErrorString(r));
    return r == NVRTC_ERROR_OUT_OF_MEMORY ? SCREE_ERROR_OUT_OF_MEMORY : SCREE_ERROR_INTERNAL;
  }
  r = nv->CompileProgram(prog, n, opts);
  scree_status st = SCREE_OK;
  size_t ls = 0;
  if (r != NVRTC_SUCCESS) {
    st = r == NVRTC_ERROR_COMPILATION      ? SCREE_ERROR_COMPILE
         : r == NVRTC_ERROR_OUT_OF_MEMORY ? SCREE_ERROR_OUT_OF_MEMORY
                                          : SCREE_ERROR_INTERNAL;
    if (log && nv->GetProgramLogSize(prog, &ls) == NVRTC_SUCCESS && (*log = malloc(ls + 128))) {
      const int k = snprintf(*log, 128, "%s: ", nv->GetErrorString(r));
      nv->GetProgramLog(prog, *log + k);
    }
  } else {
    size_t sz = 0;
    if (nv->GetCUBINSize(prog, &sz) != NVRTC_SUCCESS || sz == 0 || !(*cubin = malloc(sz)) ||
        nv->GetCUBIN(prog, *cubin) != NVRTC_SUCCESS) {
      free(*cubin);
      *cubin = NULL;
      st = SCREE_ERROR_INTERNAL;
      if (log) *log = log_msg("NVRTC produced no cubin for %s", arch);
    } else {
      *cubin_size = sz;
      /* A successful compile's log holds warnings and ptxas' report. */
      if (log && nv->GetProgramLogSize(prog, &ls) == NVRTC_SUCCESS && ls > 1 &&
          (*log = malloc(ls)))
        nv->GetProgramLog(prog, *log);
    }
  }
  nv->DestroyProgram(&prog);
  return st;
}
