/* rope_backward.c - RoPE backward's host side: RoPE's (ops/rope.c)
 * compiled again for the op rope_backward, whose implementation passes
 * SCREE_INVERSE=1 to kernels/rope.cu (the inverse rotation, in place on dq
 * and dk, or into q_out and k_out) and whose reference negates the sine.
 * The arguments are RoPE's, member for member (scree_rope_backward_args). */
#include <stddef.h>

#include "scree.h"

#define SCREE__ROPE_OP rope_backward
#define SCREE__ROPE_INVERSE 1

/* The two structs are one layout: rope.c reads its arguments as
 * scree_rope_args. */
_Static_assert(sizeof(scree_rope_backward_args) == sizeof(scree_rope_args) &&
                   offsetof(scree_rope_backward_args, theta) == offsetof(scree_rope_args, theta) &&
                   offsetof(scree_rope_backward_args, positions_int64) ==
                       offsetof(scree_rope_args, positions_int64) &&
                   offsetof(scree_rope_backward_args, k_head_stride) ==
                       offsetof(scree_rope_args, k_head_stride) &&
                   offsetof(scree_rope_backward_args, q_out) == offsetof(scree_rope_args, q_out) &&
                   offsetof(scree_rope_backward_args, k_out_head_stride) ==
                       offsetof(scree_rope_args, k_out_head_stride),
               "scree_rope_backward_args must have scree_rope_args' layout");

#include "ops/rope.c"
