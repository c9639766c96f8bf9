/* cek_host_shim.c - cross-entropy's host check as the keep emulation test
 * needs it, in C (the op interface is C): impl=keep's config check for the
 * gradient variant on sm_90. */
#include <string.h>

#include "ops/op.h"

int emu_cek_host_check(int dtype, const int *fields, char *why, size_t n);
int emu_cek_host_check(int dtype, const int *fields, char *why, size_t n) {
  const scree__op *op = scree__op_find("cross_entropy");
  for (int i = 0; i < op->nimpls; i++)
    if (!strcmp(op->impls[i].name, "keep")) {
      scree__config c;
      memset(&c, 0, sizeof c);
      c.impl = i;
      for (int f = 0; f < op->impls[i].nfields; f++) c.v[f] = fields[f];
      scree__variant v;
      memset(&v, 0, sizeof v);
      v.v[0] = dtype;
      v.v[1] = 1;
      scree__target t;
      scree__target_for_arch("sm_90", &t);
      return scree__config_check(op, &c, &v, &t, why, n);
    }
  return 0;
}
