/* status.c - status strings, version, dtype names. */
#include "scree.h"

const char *scree_status_str(scree_status status) {
  switch (status) {
#define SCREE_STATUS_STR_(name, value, text) \
  case SCREE_##name:                         \
    return text;
    SCREE_STATUS_MAP(SCREE_STATUS_STR_)
#undef SCREE_STATUS_STR_
  }
  return "unknown scree status";
}

const char *scree_status_name(scree_status status) {
  switch (status) {
#define SCREE_STATUS_NAME_(name, value, text) \
  case SCREE_##name:                          \
    return #name;
    SCREE_STATUS_MAP(SCREE_STATUS_NAME_)
#undef SCREE_STATUS_NAME_
  }
  return "UNKNOWN";
}

const char *scree_version(void) { return SCREE_VERSION_STRING; }
int scree_version_number(void) { return SCREE_VERSION_NUMBER; }

const char *scree_dtype_name(scree_dtype dtype) {
  switch (dtype) {
    case SCREE_DTYPE_FP32: return "fp32";
    case SCREE_DTYPE_FP16: return "fp16";
    case SCREE_DTYPE_BF16: return "bf16";
  }
  return "unknown";
}

size_t scree_dtype_size(scree_dtype dtype) {
  switch (dtype) {
    case SCREE_DTYPE_FP32: return 4;
    case SCREE_DTYPE_FP16: return 2;
    case SCREE_DTYPE_BF16: return 2;
  }
  return 0;
}
