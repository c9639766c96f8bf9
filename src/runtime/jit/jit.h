/*
 * jit.h - kernel sources, NVRTC compilation, module loading and the
 * context's module table. Not API. Sits on ops/ (descriptors) and base/.
 */
#ifndef SCREE_JIT_H
#define SCREE_JIT_H

#include "ops/op.h"

/* The NVRTC options every compile shares besides the target and the -D
 * options; part of every cubin's identity (scree__source_hash). */
#define SCREE__FIXED_NVRTC_OPTS "-std=c++17"

/* The source NVRTC compiles for a kernel file: kernels/common.cuh, then the
 * file with each line `#include "X.cuh"` replaced by kernels/X.cuh. From
 * the embedded copies, or from $SCREE_KERNEL_DIR. NULL if a file is
 * missing. Owned by scree, kept for the process. Thread-safe. */
const char *scree__kernel_source(const char *file);
/* sha256 hex over every implementation's source as compiled and the fixed
 * options: the cache key's src_hash. Computed once per process. "" if a
 * source is missing. Thread-safe. */
const char *scree__source_hash(const scree__op *op);
/* 0 when every kernel source of every op can be read (from
 * SCREE_KERNEL_DIR, the build's kernel directory, or the embedded
 * copies); else -1 with the first that cannot, and why, in why. Without
 * its sources an op's hash is "", and every row for it looks stale. */
int scree__kernel_sources_error(char *why, size_t why_size);
/* The NVRTC target of an implementation on an arch: "sm_90", or "sm_90a"
 * for an arch-specific one on sm_90 and newer. Writes buf (16 bytes). */
const char *scree__target_arch(const char *arch, int sm, const scree__impl *im,
                               char *buf);
/* Compiles op/config/variant for `arch` ("sm_90", "sm_90a") into a
 * malloc'd cubin. On failure returns SCREE_ERROR_COMPILE (a compilation
 * error: the config's fault), SCREE_ERROR_OUT_OF_MEMORY or
 * SCREE_ERROR_INTERNAL, with NVRTC's log in *log (malloc'd, may be NULL).
 * extra_opts (may be NULL) are appended (e.g. "--ptxas-options=-v").
 * Needs no GPU. Thread-safe. */
scree_status scree__compile(const scree__nvrtc_api *nvrtc, const scree__op *op,
                            const scree__config *cfg, const scree__variant *var,
                            const char *arch, const char *extra_opts,
                            void **cubin, size_t *cubin_size, char **log);
/* Loads a cubin into a module of the caller's own (the caller unloads
 * k->module): resolves the implementation's entries and raises the main
 * entry's dynamic shared-memory limit when it needs more than 48 KiB. */
scree_status scree__module_load(scree_context *ctx, const scree__op *op,
                                const scree__config *cfg, const scree__variant *var,
                                const void *cubin, scree__kernel *k);
/* What identifies a compiled kernel on a context's device (the arch is the
 * context's): the module table's key, and part of the cubin table's
 * memo's. Zeroed before filling (it is hashed bytewise). */
typedef struct scree__kkey {
  const scree__op *op;
  scree__config cfg;
  scree__variant var;
} scree__kkey;
scree__kkey scree__kkey_of(const scree__op *op, const scree__config *cfg,
                           const scree__variant *var);

/* ---- cubins.c: the tuner's compiled candidates, shared by the process ----
 * Every context of a process (scree-tune prewarm --devices runs one per
 * GPU, each on its own thread) shares one table of compiled cubins keyed
 * by (NVRTC library, target, op, config, variant): a candidate is compiled
 * once per target, by the first caller; callers of the same key meanwhile
 * wait for that compile and get its result, a failure included. The bytes
 * are those a compile of their own would give (the same source, options
 * and compiler). A compilation error (SCREE_ERROR_COMPILE,
 * SCREE_ERROR_INVALID_CONFIG) is kept like a cubin; any other failure goes
 * to the callers waiting for it, and the next caller compiles again.
 * Thread-safe. */

/* As scree__compile (no extra options) through the table: *cubin is the
 * caller's copy; *log, when a compile failed, a copy of NVRTC's log, and
 * after a successful compile its warnings for the caller that compiled.
 * *compiled (may be NULL) is 1 when this call ran NVRTC, 0 when it took
 * the result of another caller's compile. */
scree_status scree__cubin_get(const scree__nvrtc_api *nvrtc, const scree__op *op,
                              const scree__config *cfg, const scree__variant *var,
                              const char *target, void **cubin, size_t *cubin_size,
                              char **log, int *compiled);
/* Each context holds the table from scree_create to scree_destroy; the
 * last release frees it and its cubins. */
void scree__cubins_hold(void);
void scree__cubins_release(void);
/* Since the process started: compiles run through the table, and results
 * taken from it (waiters included). Either may be NULL. */
void scree__cubins_stats(uint64_t *compiles, uint64_t *reuses);

/* The context's module table: finds or builds (compile + load) a kernel.
 * Thread-safe. */
scree_status scree__kernel_get(scree_context *ctx, const scree__op *op,
                               const scree__config *cfg,
                               const scree__variant *var, scree__kernel *out);
/* Loads a cubin (from a cache or the tuner) into the table as
 * op/config/variant; an existing entry wins. Thread-safe. */
scree_status scree__kernel_from_cubin(scree_context *ctx, const scree__op *op,
                                      const scree__config *cfg,
                                      const scree__variant *var,
                                      const void *cubin, scree__kernel *out);
/* Creates the table (scree_create) and frees it with its modules. */
scree_status scree__modtab_create(scree_context *ctx);
void scree__modtab_free(scree_context *ctx);

#endif
