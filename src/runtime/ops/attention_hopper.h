/*
 * attention_hopper.h - what the host sides of kernels/attention_hopper.cu
 * share (ops/attention_hopper.c): scree_attention's implementation
 * "hopper" (ops/attention.c) and scree_paged_attention's (ops/
 * paged_attention.c, the kernel compiled with SCREE_PAGED=1). Their config
 * fields, the check that mirrors the kernel's static_asserts, its shared
 * memory and threads, the default config, and the tensor maps the copy
 * engine reads. Not API.
 */
#ifndef SCREE_OPS_ATTENTION_HOPPER_H
#define SCREE_OPS_ATTENTION_HOPPER_H

#include "ops/op.h"

/* Field indices of scree__hopper_fields. */
enum { SCREE__H_BN, SCREE__H_CWG, SCREE__H_STAGES, SCREE__H_SCHED, SCREE__H_OVL,
       SCREE__H_NFIELDS };
extern const scree__field scree__hopper_fields[SCREE__H_NFIELDS];

/* Dynamic shared memory and threads per CTA of a config at head_dim d. */
size_t scree__hopper_smem(const scree__config *c, int d);
int scree__hopper_threads(const scree__config *c);
/* 1 if the config compiles and runs for dtype and head_dim d on t (the
 * kernel's static_asserts, shared memory, tensor maps), else 0 with the
 * reason; paged: compiled with SCREE_PAGED=1 (another register split). The
 * variant's other fields are the caller's to check. */
int scree__hopper_check(const scree__config *c, int dtype, int d, int paged,
                        const scree__target *t, char *why, size_t n);
/* The fields of the default config at head_dim d (64 or 128), measured on
 * an H100 (ops/attention.c's default_config says how); out->impl is the
 * caller's. */
void scree__hopper_default(int d, scree__config *out);

/* A tensor map of rank 3 or 4 (cuTensorMapEncodeTiled through ctx->cu)
 * over 16-bit elements of dtype dt at p: extents dims (innermost first),
 * the strides of the outer rank - 1 dimensions in bytes, boxes of box
 * elements; 128-byte swizzle, 256-byte L2 promotion, zeros past the end.
 * name names the tensor in the failure message (SCREE_ERROR_LAUNCH). */
scree_status scree__hopper_tmap(scree_context *ctx, void *map, const char *name, scree_devptr p,
                                scree_dtype dt, int rank, const uint64_t *dims,
                                const uint64_t *strides, const unsigned *box);

/* The CUDA grid of a launch: one CTA per work item (sched 1), or at most
 * one per SM slot (sched 2, the persistent grid). */
int64_t scree__hopper_grid(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           int64_t work);

#endif
