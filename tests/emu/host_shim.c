/* host_shim.c - the ragged softmax's host code as the emulation test needs
 * it, in C (the op interface is C): the cluster implementation's shared
 * memory and check hooks, the op's input shaping and the CPU reference. */
#include <string.h>

#include "ops/op.h"

SCREE__REFERENCE(ragged_softmax);

static const scree__op *op_(void) { return scree__op_find("ragged_softmax"); }

/* The implementation named "cluster", and a config of it from fields. */
static const scree__impl *cluster_impl(scree__config *c, const int *fields) {
  const scree__op *op = op_();
  for (int i = 0; i < op->nimpls; i++)
    if (!strcmp(op->impls[i].name, "cluster")) {
      memset(c, 0, sizeof *c);
      c->impl = i;
      for (int f = 0; f < op->impls[i].nfields; f++) c->v[f] = fields[f];
      return &op->impls[i];
    }
  return NULL;
}

static scree__variant variant(int x, int y) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = x;
  v.v[1] = y;
  return v;
}

size_t emu_host_cluster_smem(int x, int y, const int *fields);
size_t emu_host_cluster_smem(int x, int y, const int *fields) {
  scree__config c;
  const scree__impl *im = cluster_impl(&c, fields);
  const scree__variant v = variant(x, y);
  return im ? im->smem(&c, &v) : 0;
}

int emu_host_cluster_check(int x, int y, const int *fields, char *why, size_t n);
int emu_host_cluster_check(int x, int y, const int *fields, char *why, size_t n) {
  scree__config c;
  if (!cluster_impl(&c, fields)) return 0;
  const scree__variant v = variant(x, y);
  scree__target t;
  scree__target_for_arch("sm_90", &t);
  return scree__config_check(op_(), &c, &v, &t, why, n);
}

void emu_shape_inputs(const void *args, void *x, const int *cu_seqlens);
void emu_shape_inputs(const void *args, void *x, const int *cu_seqlens) {
  op_()->shape_inputs(args, (void *const[]){x, (void *)cu_seqlens});
}

void emu_reference(const void *args, const void *x, const int *cu_seqlens, void *y);
void emu_reference(const void *args, const void *x, const int *cu_seqlens, void *y) {
  scree__ref_ragged_softmax(args, (void *const[]){(void *)x, (void *)cu_seqlens, y});
}
