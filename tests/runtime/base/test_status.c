/* test_status.c - status strings, names, version, dtypes. */
#include <string.h>

#include "test_util.h"

START_TEST(every_status_has_text) {
#define CHECK_(name, value, text)                                 \
  ck_assert_str_eq(scree_status_str(SCREE_##name), text);         \
  ck_assert_str_eq(scree_status_name(SCREE_##name), #name);       \
  ck_assert_int_eq(SCREE_##name, value);
  SCREE_STATUS_MAP(CHECK_)
#undef CHECK_
}
END_TEST

START_TEST(unknown_status_is_fixed_string) {
  ck_assert_str_eq(scree_status_str((scree_status)12345), "unknown scree status");
  ck_assert_str_eq(scree_status_name((scree_status)-1), "UNKNOWN");
}
END_TEST

START_TEST(version) {
  ck_assert_str_eq(scree_version(), SCREE_VERSION_STRING);
  ck_assert_int_eq(scree_version_number(), SCREE_VERSION_NUMBER);
}
END_TEST

START_TEST(dtypes) {
  ck_assert_str_eq(scree_dtype_name(SCREE_DTYPE_FP16), "fp16");
  ck_assert_str_eq(scree_dtype_name(SCREE_DTYPE_BF16), "bf16");
  ck_assert_str_eq(scree_dtype_name(SCREE_DTYPE_FP32), "fp32");
  ck_assert_str_eq(scree_dtype_name((scree_dtype)9), "unknown");
  ck_assert_uint_eq(scree_dtype_size(SCREE_DTYPE_FP32), 4);
  ck_assert_uint_eq(scree_dtype_size(SCREE_DTYPE_FP16), 2);
  ck_assert_uint_eq(scree_dtype_size((scree_dtype)9), 0);
}
END_TEST

SCREE_TEST_MAIN(.name = "status",
                .tests = SCREE_TESTS(every_status_has_text, unknown_status_is_fixed_string, version,
                                     dtypes))
