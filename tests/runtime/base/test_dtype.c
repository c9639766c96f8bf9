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

/* scree__round_elem is the store and load: ties to even in fp16 and bf16,
 * double to float in fp32, and fp16's subnormals and overflow. */
START_TEST(round_elem_is_store_then_load) {
  ck_assert(scree__round_elem(SCREE_DTYPE_BF16, 1.0 + 0x1p-8) == 1.0);
  ck_assert(scree__round_elem(SCREE_DTYPE_BF16, 1.0 + 0x1p-7 + 0x1p-8) == 1.0 + 0x1p-6);
  ck_assert(scree__round_elem(SCREE_DTYPE_BF16, -(1.0 + 0x1p-8 + 0x1p-12)) == -(1.0 + 0x1p-7));
  ck_assert(scree__round_elem(SCREE_DTYPE_FP16, 1.0 + 0x1p-11) == 1.0);
  ck_assert(scree__round_elem(SCREE_DTYPE_FP16, 1.0 + 0x1p-10 + 0x1p-11) == 1.0 + 0x1p-9);
  ck_assert(scree__round_elem(SCREE_DTYPE_FP16, 0x1p-25 + 0x1p-30) == 0x1p-24);
  ck_assert(isinf(scree__round_elem(SCREE_DTYPE_FP16, 70000.0)));
  ck_assert(scree__round_elem(SCREE_DTYPE_FP32, 1.0 + 0x1p-30) == 1.0);
  ck_assert(isnan(scree__round_elem(SCREE__DTYPE_I32, 1.0)));
  uint64_t s = 12345;
  for (int i = 0; i < 100000; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double v = ldexp((double)(s >> 11) * 0x1p-53 - 0.5, (int)(s % 40) - 20);
    for (int dt = SCREE_DTYPE_FP32; dt <= SCREE_DTYPE_BF16; dt++) {
      unsigned char buf[4];
      scree__store_elem(buf, dt, 0, v);
      ck_assert(scree__round_elem(dt, v) == scree__load_elem(buf, dt, 0));
    }
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
                                     round_elem_is_store_then_load,
                                     compare_catches_errors_and_nan))
