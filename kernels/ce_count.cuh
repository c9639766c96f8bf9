/*
 * ce_count.cuh - cross-entropy's count of the rows not ignored, for the
 * gradient's mean: the kernel scree_ce_count that both implementations
 * (kernels/cross_entropy.cu, kernels/cross_entropy_keep.cu) name as their
 * second entry and the host launches before the row kernel
 * (src/runtime/ops/cross_entropy.c). It reads no macro.
 */

/* The number of rows whose target is not ignore_index, into *count: one
 * CTA of 256 threads (integer sums: exact, whatever the order). */
extern "C" __global__ void __launch_bounds__(256)
scree_ce_count(const long long *__restrict__ targets, long long rows, long long ignore_index,
               unsigned long long *__restrict__ count) {
  __shared__ unsigned long long total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  unsigned long long n = 0;
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) n += targets[r] != ignore_index;
  atomicAdd(&total, n);
  __syncthreads();
  if (threadIdx.x == 0) *count = total;
}
