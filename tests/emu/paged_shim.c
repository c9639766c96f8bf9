/* paged_shim.c - paged attention's host code as the emulation test needs
 * it, in C (the op interface is C): the split implementation's shared
 * memory and check, and the CPU reference. */
#include <string.h>

#include "ops/op.h"

SCREE__REFERENCE(paged_attention);

/* The implementation named "split", and a config of it from fields. */
static const scree__impl *split_impl(const scree__op **op, scree__config *c, const int *fields) {
  *op = scree__op_find("paged_attention");
  for (int i = 0; *op && i < (*op)->nimpls; i++)
    if (!strcmp((*op)->impls[i].name, "split")) {
      memset(c, 0, sizeof *c);
      c->impl = i;
      for (int f = 0; f < (*op)->impls[i].nfields; f++) c->v[f] = fields[f];
      return &(*op)->impls[i];
    }
  return NULL;
}

static scree__variant variant(int dtype, int d) {
  scree__variant v;
  memset(&v, 0, sizeof v);
  v.v[0] = dtype;
  v.v[1] = d;
  return v;
}

size_t emu_pa_smem(int dtype, int d, const int *fields);
size_t emu_pa_smem(int dtype, int d, const int *fields) {
  const scree__op *op;
  scree__config c;
  const scree__impl *im = split_impl(&op, &c, fields);
  const scree__variant v = variant(dtype, d);
  return im ? im->smem(&c, &v) : 0;
}

int emu_pa_check(int dtype, int d, const int *fields, char *why, size_t n);
int emu_pa_check(int dtype, int d, const int *fields, char *why, size_t n) {
  const scree__op *op;
  scree__config c;
  if (!split_impl(&op, &c, fields)) return 0;
  const scree__variant v = variant(dtype, d);
  scree__target t;
  scree__target_for_arch("sm_90", &t);
  return scree__config_check(op, &c, &v, &t, why, n);
}

void emu_pa_reference(const void *args, void *const *host);
void emu_pa_reference(const void *args, void *const *host) {
  scree__ref_paged_attention(args, host);
}
