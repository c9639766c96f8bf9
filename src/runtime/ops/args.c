/* args.c - argument checks every op's validate hook shares. */
#include "ops/op.h"

scree_status scree__arg_ptr(scree_context *ctx, const char *name, scree_devptr p, size_t align) {
  if (!p) return scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
  if (align > 1 && p % align)
    return scree__fail(ctx, SCREE_ERROR_MISALIGNED, "%s=0x%llx is not aligned to %zu bytes", name,
                       (unsigned long long)p, align);
  return SCREE_OK;
}

int scree__byte_range(uint64_t base, int64_t rows, int64_t cols, int64_t stride, size_t esize,
                      uint64_t *lo, uint64_t *hi) {
  const __int128 last = ((__int128)(rows > 0 ? rows - 1 : 0) * stride + cols) * (__int128)esize;
  if (last > (__int128)UINT64_MAX - base) return 0;
  *lo = base;
  *hi = base + (uint64_t)last;
  return 1;
}

int scree__overlaps(uint64_t alo, uint64_t ahi, uint64_t blo, uint64_t bhi) {
  return alo < bhi && blo < ahi;
}
