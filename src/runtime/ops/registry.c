/* registry.c - the list of ops (from registry.h) and its lookups, and the
 * completeness check of a descriptor. */
#include "ops/registry.h"

#include <string.h>

const scree__op *const scree__ops[] = {
#define SCREE__OP_ADDR_(name, type) &scree__op_##name,
    SCREE__OP_LIST(SCREE__OP_ADDR_)
#undef SCREE__OP_ADDR_
    NULL,
};

const scree__op *scree__op_find(const char *name) {
  for (int i = 0; scree__ops[i]; i++)
    if (!strcmp(scree__ops[i]->name, name)) return scree__ops[i];
  return NULL;
}

const char *scree__op_missing(const scree__op *op) {
#define NEED(cond, what) \
  if (!(cond)) return what
  NEED(op->name && *op->name, "name");
  NEED(op->args_size > 0 && op->args_size <= SCREE__ARGS_MAX, "args_size (at most SCREE__ARGS_MAX)");
  NEED(op->nimpls >= 1 && op->nimpls <= SCREE__MAX_IMPLS && op->impls, "impls");
  NEED(op->nvfields >= 0 && op->nvfields <= SCREE__MAX_VARIANT, "vfields");
  NEED(op->nvfields == 0 || op->vfields, "vfields");
  NEED(op->ndims >= 1 && op->ndims <= SCREE__MAX_DIMS && op->dims, "dims");
  const char *schema = scree__schema_missing(op);
  NEED(!*schema, schema);
  for (int i = 0; i < op->ndims; i++) {
    const scree__arg *f = scree__arg_at(op, op->dims[i].arg);
    NEED(op->bucket || (f && f->ctype == SCREE__C_I64),
         "bucket (or every dims[].arg, a link to an int64 field)");
  }
  NEED(op->default_config, "default_config");
  NEED(op->representative, "representative");
  NEED(op->problem, "problem");
  NEED(op->reference, "reference");
  NEED(op->bench && op->bench[0], "bench (at least one benchmark entry)");
  for (int i = 0; i < op->nimpls; i++) {
    const scree__impl *im = &op->impls[i];
    NEED(im->name && *im->name, "impls[].name");
    NEED(im->source && *im->source, "impls[].source");
    NEED(im->entries[0], "impls[].entries[0]");
    NEED(im->nfields >= 1 && im->nfields <= SCREE__MAX_FIELDS && im->fields, "impls[].fields");
    NEED(im->check, "impls[].check");
    NEED(im->launch, "impls[].launch");
    NEED(im->min_sm >= 0 && (im->max_sm == 0 || im->max_sm >= im->min_sm), "impls[].min_sm/max_sm");
    /* A plan stores the adapted config: calls it would adapt differently
     * must not share it, so adapt needs the op's adapt_class. */
    int vector = 0;
    for (int k = 0; k < op->nargs; k++) vector |= (op->args[k].flags & SCREE__VECTOR) != 0;
    NEED(!im->adapt || op->adapt_class || vector,
         "adapt_class (an implementation adapts configs)");
  }
  for (int i = 0; i < op->nvfields; i++) {
    const scree__vfield *f = &op->vfields[i];
    NEED(f->name && f->macro, "vfields[].name/macro");
    NEED(f->nvalues >= 1 && f->nvalues <= 8, "vfields[].values");
    int has_example = 0;
    for (int k = 0; k < f->nvalues; k++) has_example |= f->values[k] == f->example;
    NEED(has_example, "vfields[].example (one of its values)");
  }
#undef NEED
  return "";
}
