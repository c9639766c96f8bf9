/* test_dtype.c - host fp16/bf16 conversions and the tolerance check. */
#include <math.h>
#include <string.h>

#include "test_util.h"

START_TEST(half_roundtrip_all_bits) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = scree__half_to_float((uint16_t)h);
    if (isnan(f)) {
      ck_assert(isnan(scree__half_to_float(scree__float_to_half(f))));
      continue;
    }
    ck_assert_uint_eq(scree__float_to_half(f), h);
  }
}
END_TEST

START_TEST(half_known_values) {
  ck_assert_uint_eq(scree__float_to_half(1.0f), 0x3c00);
  ck_assert_uint_eq(scree__float_to_half(-2.0f), 0xc000);
  ck_assert_uint_eq(scree__float_to_half(65504.0f), 0x7bff);
  ck_assert_uint_eq(scree__float_to_half(65520.0f), 0x7c00); /* rounds to inf */
  ck_assert_uint_eq(scree__float_to_half(5.9604645e-8f), 0x0001); /* min subnormal */
  /* 1 + 2^-11 is a tie between 1 and 1 + 2^-10: rounds to even (1). */
  ck_assert_uint_eq(scree__float_to_half(1.0f + 0x1p-11f), 0x3c00);
  ck_assert_uint_eq(scree__float_to_half(1.0f + 0x1p-10f + 0x1p-11f), 0x3c02);
  ck_assert_float_eq(scree__half_to_float(0x3555), 0.333251953125f);
}
END_TEST

START_TEST(bf16_rounding) {
  ck_assert_uint_eq(scree__float_to_bf16(1.0f), 0x3f80);
  /* 1 + 2^-8 is a tie: rounds to even. */
  ck_assert_uint_eq(scree__float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  ck_assert_uint_eq(scree__float_to_bf16(1.0f + 0x1p-8f + 0x1p-9f), 0x3f81);
  ck_assert(isnan(scree__bf16_to_float(scree__float_to_bf16(NAN))));
  for (uint32_t h = 0; h < 65536; h++) {
    float f = scree__bf16_to_float((uint16_t)h);
    if (!isnan(f)) ck_assert_uint_eq(scree__float_to_bf16(f), h);
  }
}
END_TEST

START_TEST(compare_catches_errors_and_nan) {
  float ref[4] = {1, 2, 3, 4}, got[4] = {1, 2, 3, 4};
  size_t worst = 99;
  ck_assert_uint_eq(scree__compare(got, ref, SCREE_DTYPE_FP32, 4, 1e-5, 0, &worst), 0);
  got[2] = 3.001f;
  ck_assert_uint_eq(scree__compare(got, ref, SCREE_DTYPE_FP32, 4, 1e-5, 0, &worst), 1);
  ck_assert_uint_eq(worst, 2);
  got[2] = 3;
  got[0] = NAN;
  ck_assert_uint_eq(scree__compare(got, ref, SCREE_DTYPE_FP32, 4, 1, 1, &worst), 1);
  ck_assert_uint_eq(worst, 0);
}
END_TEST

SCREE_TEST_MAIN(.name = "dtype",
                .tests = SCREE_TESTS(half_roundtrip_all_bits, half_known_values, bf16_rounding,
                                     compare_catches_errors_and_nan))
