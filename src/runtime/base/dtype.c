/* dtype.c - host-side fp16/bf16 conversions and the tolerance check. */
#include <math.h>
#include <string.h>

#include "base/base.h"

float scree__half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24); /* zero or subnormal */
    return sign ? -f : f;
  }
  uint32_t bits;
  if (exp == 31)
    bits = sign | 0x7f800000u | (man << 13); /* inf or NaN */
  else
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t scree__float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf or NaN */
    return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u; /* rounds to inf */
  if (ax < 0x38800000u) {                        /* subnormal or zero */
    /* Scale so that the half subnormal ulp (2^-24) becomes 1, then let the
     * FPU round to nearest even. */
    float a;
    memcpy(&a, &ax, 4);
    return sign | (uint16_t)nearbyintf(a * 16777216.0f);
  }
  /* Normal: round the 23-bit mantissa to 10 bits, nearest even. */
  uint32_t m = ax + 0xfffu + ((ax >> 13) & 1u);
  return sign | (uint16_t)((m - 0x38000000u) >> 13);
}

float scree__bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t scree__float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

size_t scree__elem_size(int dtype) {
  return dtype == SCREE__DTYPE_I32   ? 4
         : dtype == SCREE__DTYPE_I64 ? 8
                                     : scree_dtype_size((scree_dtype)dtype);
}

const char *scree__elem_name(int dtype) {
  return dtype == SCREE__DTYPE_I32   ? "int32"
         : dtype == SCREE__DTYPE_I64 ? "int64"
                                     : scree_dtype_name((scree_dtype)dtype);
}

double scree__load_elem(const void *p, int dtype, size_t i) {
  switch (dtype) {
    case SCREE__DTYPE_I32: return ((const int32_t *)p)[i];
    case SCREE__DTYPE_I64: return (double)((const int64_t *)p)[i];
    case SCREE_DTYPE_FP32: return ((const float *)p)[i];
    case SCREE_DTYPE_FP16: return scree__half_to_float(((const uint16_t *)p)[i]);
    case SCREE_DTYPE_BF16: return scree__bf16_to_float(((const uint16_t *)p)[i]);
  }
  return NAN;
}

void scree__store_elem(void *p, int dtype, size_t i, double v) {
  switch (dtype) {
    case SCREE__DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case SCREE__DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case SCREE_DTYPE_FP32: ((float *)p)[i] = (float)v; break;
    case SCREE_DTYPE_FP16: ((uint16_t *)p)[i] = scree__float_to_half((float)v); break;
    case SCREE_DTYPE_BF16: ((uint16_t *)p)[i] = scree__float_to_bf16((float)v); break;
  }
}

double scree__round_elem(int dtype, double v) {
  switch (dtype) {
    case SCREE_DTYPE_FP32: return (float)v;
    case SCREE_DTYPE_FP16: return scree__half_to_float(scree__float_to_half((float)v));
    case SCREE_DTYPE_BF16: return scree__bf16_to_float(scree__float_to_bf16((float)v));
  }
  return NAN;
}

/* One rounding of the output dtype apart is what separates a correct fp32
 * kernel from the double reference (both round once at the end); rtol is
 * two units in the last place, atol covers results that cancel to ~0. */
void scree__tolerance(scree_dtype dtype, double *rtol, double *atol) {
  switch (dtype) {
    case SCREE_DTYPE_FP32: *rtol = 1e-5; *atol = 1e-6; return;
    case SCREE_DTYPE_FP16: *rtol = 2e-3; *atol = 1e-5; return;
    case SCREE_DTYPE_BF16: *rtol = 1.6e-2; *atol = 1e-5; return;
  }
  *rtol = 0;
  *atol = 0;
}

size_t scree__compare(const void *got, const void *ref, int dtype, size_t n,
                      double rtol, double atol, size_t *worst) {
  size_t bad = 0, wi = 0;
  double wexcess = -1;
  for (size_t i = 0; i < n; i++) {
    const double g = scree__load_elem(got, dtype, i);
    const double r = scree__load_elem(ref, dtype, i);
    const double lim = atol + rtol * fabs(r);
    /* An infinite reference (an LSE of -inf) must be matched exactly. */
    const double err = isinf(r) ? (g == r ? 0 : INFINITY) : fabs(g - r);
    /* !(err <= lim) is true for NaN in either. */
    if (!(err <= lim)) {
      bad++;
      const double excess = isnan(err) ? INFINITY : err - lim;
      if (excess > wexcess) wexcess = excess, wi = i;
    }
  }
  if (worst) *worst = wi;
  return bad;
}
