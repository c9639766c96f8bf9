/* registry.c - every op scree serves. Adding an op adds one line here. */
#include <string.h>

#include "internal.h"

extern const scree__op scree__op_rmsnorm;

const scree__op *const scree__ops[] = {
    &scree__op_rmsnorm,
    NULL,
};

const scree__op *scree__op_find(const char *name) {
  for (int i = 0; scree__ops[i]; i++)
    if (!strcmp(scree__ops[i]->name, name)) return scree__ops[i];
  return NULL;
}
