/* test_rope_backward_gpu.c - the RoPE backward on the GPU against its CPU
 * reference (label gpu; skipped with a reason where there is none): every
 * test of test_rope_gpu.c (every variant through the harness, a spread of
 * configs, packed and strided q/k, narrow vectors, a large batch, nothing
 * launched for 0 tokens, device-side validation), run on
 * scree_rope_backward, whose arguments are RoPE's with dq and dk in q and
 * k; same tolerances (one rounding of the dtype; fp32 atol 4e-6), the rest
 * of each buffer bitwise untouched. */
#define SCREE_TEST_ROPE_BACKWARD 1
#include "test_rope_gpu.c"
