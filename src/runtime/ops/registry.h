/*
 * registry.h - every op scree serves. The list, SCREE__OP_LIST(X) with one
 * X(name, args type) per op, is generated from the op entries the public
 * header declares (cmake/op_list.cmake), in its order: declaring
 * scree_<name>() in include/scree.h registers the op. Here each line
 * declares scree__op_<name> (defined in ops/<name>.c); registry.c lists them
 * in scree__ops[] and api/dispatch.c generates the public entries.
 */
#ifndef SCREE_REGISTRY_H
#define SCREE_REGISTRY_H

#include "ops/op.h"
#include "ops/op_list.h"

#define SCREE__OP_EXTERN_(name, type) extern const scree__op scree__op_##name;
SCREE__OP_LIST(SCREE__OP_EXTERN_)
#undef SCREE__OP_EXTERN_

#endif
