/* check.c - scree_check_args: the checks of an op entry without a device,
 * for callers that trace a call before its buffers exist. */
#include <string.h>

#include "api/api.h"
#include "ops/registry.h"

/* Stand-in buffers are this far apart: more than any real buffer, so that
 * distinct ones never overlap, and aligned for every access. */
#define STANDIN_SHIFT 48

SCREE_EXTERN scree_status scree_check_args(const char *op_name, const void *args, char *why,
                                           size_t why_size) {
  if (why && why_size) why[0] = 0;
  const scree__op *op = op_name ? scree__op_find(op_name) : NULL;
  if (!op || !args) {
    scree__set_why(why, why_size, op ? "args is NULL" : "unknown op \"%s\"",
                   op_name ? op_name : "(null)");
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  _Alignas(16) unsigned char a[SCREE__ARGS_MAX];
  memcpy(a, args, op->args_size);
  /* Each distinct nonzero pointer becomes its own stand-in buffer. */
  uint64_t given[SCREE__MAX_BUFS];
  int n = 0;
  for (int i = 0; i < op->nargs; i++) {
    const scree__arg *f = &op->args[i];
    if (f->ctype != SCREE__C_PTR) continue;
    uint64_t p;
    memcpy(&p, a + f->offset, sizeof p);
    if (!p) continue;
    int k = 0;
    while (k < n && given[k] != p) k++;
    if (k == n) given[n++] = p;
    p = (uint64_t)(k + 1) << STANDIN_SHIFT;
    memcpy(a + f->offset, &p, sizeof p);
  }
  scree_context *ctx = scree__context_offline();
  if (!ctx) {
    scree__set_why(why, why_size, "out of memory");
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  scree__variant var;
  memset(&var, 0, sizeof var);
  int skip = 0;
  const scree_status st = scree__args_check(ctx, op, a, NULL, &var, &skip);
  if (why && why_size) scree__error_copy(ctx, why, why_size);
  scree_destroy(ctx);
  return st;
}
