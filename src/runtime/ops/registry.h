/*
 * registry.h - every op scree serves, one line each: X(name, args type).
 * The line declares scree__op_<name> (defined in ops/<name>.c), lists it in
 * scree__ops[] and generates the public entry scree_<name>() (api/dispatch.c).
 * Adding an op adds one line here.
 */
#ifndef SCREE_REGISTRY_H
#define SCREE_REGISTRY_H

#include "ops/op.h"

#define SCREE__OP_LIST(X)                   \
  X(rmsnorm, scree_rmsnorm_args)            \
  X(attention, scree_attention_args)        \
  X(softmax, scree_softmax_args)            \
  X(cross_entropy, scree_cross_entropy_args) \
  X(swiglu, scree_swiglu_args)              \
  X(rope, scree_rope_args)                  \
  X(layernorm, scree_layernorm_args)        \
  X(add_rmsnorm, scree_add_rmsnorm_args)    \
  X(ragged_softmax, scree_ragged_softmax_args)

#define SCREE__OP_EXTERN_(name, type) extern const scree__op scree__op_##name;
SCREE__OP_LIST(SCREE__OP_EXTERN_)
#undef SCREE__OP_EXTERN_

#endif
