/* attention_hopper.c - the host pieces of kernels/attention_hopper.cu that
 * scree_attention and scree_paged_attention share (ops/attention_hopper.h). */
#include "ops/attention_hopper.h"

#include <stdio.h>

const scree__field scree__hopper_fields[SCREE__H_NFIELDS] = {
    {"bn", "SCREE_BN", 2, {64, 128}},
    {"cwg", "SCREE_CWG", 3, {1, 2, 3}},
    {"stages", "SCREE_STAGES", 3, {2, 3, 4}},
    {"sched", "SCREE_SCHED", 2, {1, 2}},
    {"ovl", "SCREE_OVL", 2, {0, 1}},
};

/* Mirrors the kernel's layout: Q (64 * cwg rows), STAGES K and V tiles,
 * 1024 bytes of alignment slack, the mbarriers and two work slots. */
size_t scree__hopper_smem(const scree__config *c, int d) {
  const size_t row = (size_t)d * 2;
  return row * (size_t)(64 * c->v[SCREE__H_CWG] + 2 * c->v[SCREE__H_STAGES] * c->v[SCREE__H_BN]) +
         (size_t)8 * (size_t)(7 + 4 * c->v[SCREE__H_STAGES]) + 16 + 1024;
}

int scree__hopper_threads(const scree__config *c) { return 128 * (c->v[SCREE__H_CWG] + 1); }

/* Mirrors the static_asserts of kernels/attention_hopper.cu. */
int scree__hopper_check(const scree__config *c, int dtype, int d, int paged,
                        const scree__target *t, char *why, size_t n) {
  const int bn = c->v[SCREE__H_BN], cwg = c->v[SCREE__H_CWG], stages = c->v[SCREE__H_STAGES];
  if (dtype != SCREE_DTYPE_FP16 && dtype != SCREE_DTYPE_BF16) {
    scree__set_why(why, n, "dtype code %d is not fp16 or bf16", dtype);
    return 0;
  }
  if (d != 64 && d != 128) {
    scree__set_why(why, n, "head_dim=%d: the hopper implementation covers 64 and 128 (the "
                   "generic one serves the others)", d);
    return 0;
  }
  if ((bn != 64 && bn != 128) || cwg < 1 || cwg > 3 || stages < 2 || stages > 4 ||
      (c->v[SCREE__H_SCHED] != 1 && c->v[SCREE__H_SCHED] != 2) || (c->v[SCREE__H_OVL] & ~1)) {
    scree__set_why(why, n, "bn=%d, cwg=%d, stages=%d, sched=%d, ovl=%d: bn is 64 or 128, cwg "
                   "1..3, stages 2..4, sched 1 or 2, ovl 0 or 1", bn, cwg, stages,
                   c->v[SCREE__H_SCHED], c->v[SCREE__H_OVL]);
    return 0;
  }
  /* The consumers' registers: 65536 less the producer's 24 a thread, shared
   * by cwg warpgroups (at most 240 a thread); paged, the CTA's pool (65536 /
   * threads, rounded down to 8, a thread) less the producer's 32. The
   * accumulators of S, O and P plus about 48 of addresses and softmax state
   * must fit. */
  const int threads = scree__hopper_threads(c);
  int regs = paged ? ((65536 / threads) / 8 * 8 * threads - 128 * 32) / (128 * cwg) / 8 * 8
                   : (65536 / 128 - 24) / cwg / 8 * 8;
  if (regs > 240) regs = 240;
  const int acc = bn / 2 + d / 2 + bn / 4;
  if (acc + 48 > regs) {
    scree__set_why(why, n, "bn=%d, head_dim=%d: %d accumulator registers a thread, past the "
                   "%d a consumer of %d warpgroups has", bn, d, acc, regs - 48, cwg);
    return 0;
  }
  if (!scree__check_smem(scree__hopper_smem(c, d), t, why, n)) return 0;
  if (!t->tensor_maps) {
    scree__set_why(why, n, "the driver has no cuTensorMapEncodeTiled (tensor maps)");
    return 0;
  }
  return 1;
}

/* On an H100 sweep this config was within 2% of the best hopper config at
 * head_dim 64, where the overlap of softmax and P V cost 8-12%; at 128 the
 * overlap (ovl) was within 5% of the best and without it up to 6% slower
 * (docs/kernels/attention.md). */
void scree__hopper_default(int d, scree__config *out) {
  out->v[SCREE__H_BN] = 128;
  out->v[SCREE__H_CWG] = 2;
  out->v[SCREE__H_STAGES] = 2;
  out->v[SCREE__H_SCHED] = 2;
  out->v[SCREE__H_OVL] = d == 128;
}

/* cuTensorMapEncodeTiled's enums (cuda.h). */
#define TMAP_FP16 6
#define TMAP_BF16 9
#define TMAP_SWIZZLE_128B 3
#define TMAP_L2_256B 3

scree_status scree__hopper_tmap(scree_context *ctx, void *map, const char *name, scree_devptr p,
                                scree_dtype dt, int rank, const uint64_t *dims,
                                const uint64_t *strides, const unsigned *box) {
  const unsigned es[4] = {1, 1, 1, 1};
  CUresult r = ctx->cu->TensorMapEncodeTiled(map, dt == SCREE_DTYPE_BF16 ? TMAP_BF16 : TMAP_FP16,
                                             (unsigned)rank, (void *)(uintptr_t)p, dims, strides,
                                             box, es, 0, TMAP_SWIZZLE_128B, TMAP_L2_256B, 0);
  if (r) {
    char what[64];
    snprintf(what, sizeof what, "cuTensorMapEncodeTiled(%s)", name);
    return scree__cu_fail(ctx, r, SCREE_ERROR_LAUNCH, what);
  }
  return SCREE_OK;
}

int64_t scree__hopper_grid(scree_context *ctx, const scree__kernel *k, const scree__config *c,
                           int64_t work) {
  if (c->v[SCREE__H_SCHED] == 2) {
    const int64_t slots = (int64_t)ctx->info.sm_count * (k->occupancy > 0 ? k->occupancy : 1);
    if (work > slots) work = slots;
  }
  return work;
}
