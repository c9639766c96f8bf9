/* test_context.c - context creation where there is no GPU, options,
 * runtime info. Each test runs in its own process (Check forks), so the
 * driver library chosen by SCREE_CUDA_LIBRARY is fresh per test. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

START_TEST(no_gpu_gives_no_device) {
  scree_runtime_info ri;
  ck_assert_int_eq(scree_get_runtime_info(&ri), SCREE_OK);
  if (ri.device_count > 0) return; /* a GPU machine: covered by gpu tests */
  scree_context *ctx = (scree_context *)0x1;
  char why[512];
  scree_status st = scree_create(NULL, &ctx, why, sizeof why);
  ck_assert_int_eq(st, SCREE_ERROR_NO_DEVICE);
  ck_assert_ptr_null(ctx);
  ck_assert_msg(strlen(why) > 10, "why is \"%s\"", why);
}
END_TEST

START_TEST(missing_driver_library_gives_no_device) {
  setenv("SCREE_CUDA_LIBRARY", "libcuda-does-not-exist.so.1", 1);
  scree_context *ctx = NULL;
  char why[512];
  ck_assert_int_eq(scree_create(NULL, &ctx, why, sizeof why), SCREE_ERROR_NO_DEVICE);
  ck_assert_ptr_null(ctx);
  ck_assert_msg(strstr(why, "libcuda-does-not-exist.so.1"), "why is \"%s\"", why);
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  ck_assert_int_eq(ri.device_count, 0);
  ck_assert(strstr(ri.driver_error, "libcuda-does-not-exist"));
}
END_TEST

/* The toolkit's stub libcuda (what links on a build machine) loads but
 * answers every call with CUDA_ERROR_STUB_LIBRARY: no device. */
START_TEST(stub_driver_gives_no_device) {
  const char *stub = getenv("SCREE_TEST_CUDA_STUB");
  if (!stub || !*stub) return;
  setenv("SCREE_CUDA_LIBRARY", stub, 1);
  scree_context *ctx = NULL;
  char why[512];
  ck_assert_int_eq(scree_create(NULL, &ctx, why, sizeof why), SCREE_ERROR_NO_DEVICE);
  ck_assert_msg(strstr(why, "cuInit"), "why is \"%s\"", why);
}
END_TEST

START_TEST(bad_arguments) {
  char why[256];
  ck_assert_int_eq(scree_create(NULL, NULL, why, sizeof why), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(why, "out is NULL");
  scree_destroy(NULL); /* harmless */
  ck_assert_int_eq(scree_get_runtime_info(NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_get_device_info(0, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree_get_counters(NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(scree_last_error(NULL), "ctx is NULL");
}
END_TEST

START_TEST(bad_ordinal) {
  scree_options o;
  scree_options_init(&o);
  o.device = 999;
  scree_context *ctx = NULL;
  char why[256];
  ck_assert_int_eq(scree_create(&o, &ctx, why, sizeof why), SCREE_ERROR_NO_DEVICE);
  ck_assert_ptr_null(ctx);
}
END_TEST

START_TEST(options_defaults) {
  scree_options o;
  memset(&o, 0x5a, sizeof o);
  scree_options_init(&o);
  ck_assert_int_eq(o.device, 0);
  ck_assert_ptr_null(o.cache_path);
  ck_assert_int_eq(o.miss_policy, SCREE_MISS_DEFAULT);
  ck_assert_int_eq(o.log_level, SCREE_LOG_WARN);
  ck_assert_ptr_null(o.log_fn);
}
END_TEST

/* The pinned cache: options.pin_path, else $SCREE_PIN; "" is no pin. */
START_TEST(pin_from_options_or_env) {
  scree_options o;
  scree_options_init(&o);
  ck_assert_ptr_null(o.pin_path);
  unsetenv("SCREE_PIN");
  ck_assert_ptr_null(scree__options_pin(&o));
  ck_assert_ptr_null(scree__options_pin(NULL));
  setenv("SCREE_PIN", "", 1);
  ck_assert_ptr_null(scree__options_pin(&o));
  setenv("SCREE_PIN", "/srv/pinned.db", 1);
  ck_assert_str_eq(scree__options_pin(&o), "/srv/pinned.db");
  ck_assert_str_eq(scree__options_pin(NULL), "/srv/pinned.db");
  o.pin_path = "/opt/mine.db"; /* the field, when set, wins */
  ck_assert_str_eq(scree__options_pin(&o), "/opt/mine.db");
  o.pin_path = "";
  ck_assert_ptr_null(scree__options_pin(&o));
  unsetenv("SCREE_PIN");
}
END_TEST

/* A pin that cannot be opened fails scree_create before anything else
 * (with or without a GPU), naming the file and where it came from. */
START_TEST(bad_pin_fails_create) {
  scree_context *ctx = (scree_context *)0x1;
  char why[1024];
  setenv("SCREE_PIN", "/nonexistent/pinned.db", 1);
  ck_assert_int_eq(scree_create(NULL, &ctx, why, sizeof why), SCREE_ERROR_NOT_FOUND);
  ck_assert_ptr_null(ctx);
  ck_assert_msg(strstr(why, "SCREE_PIN: pinned cache /nonexistent/pinned.db: missing"), "%s",
                why);
  char path[] = "/tmp/scree-pin-XXXXXX";
  const int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "not a cache, just text", 22), 22);
  close(fd);
  scree_options o;
  scree_options_init(&o);
  o.pin_path = path; /* the field wins over SCREE_PIN */
  ck_assert_int_eq(scree_create(&o, &ctx, why, sizeof why), SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, path) && !strstr(why, "SCREE_PIN"), "%s", why);
  unlink(path);
  unsetenv("SCREE_PIN");
}
END_TEST

START_TEST(runtime_info_reports_nvrtc) {
  scree_runtime_info ri;
  ck_assert_int_eq(scree_get_runtime_info(&ri), SCREE_OK);
  /* The build machine has NVRTC; if not, the reason must be given. */
  if (ri.nvrtc_loaded) {
    ck_assert_int_ge(ri.nvrtc_major, 12);
    /* The file that was opened, not the soname that was asked for. */
    ck_assert_msg(ri.nvrtc_path[0] == '/' && access(ri.nvrtc_path, R_OK) == 0,
                  "nvrtc_path \"%s\" is not a readable absolute path", ri.nvrtc_path);
  } else
    ck_assert(strlen(ri.nvrtc_error) > 0);
}
END_TEST

START_TEST(missing_nvrtc_is_reported) {
  setenv("SCREE_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
  setenv("CUDA_HOME", "/nonexistent", 1);
  setenv("CUDA_PATH", "/nonexistent", 1);
  /* An explicit library that does not open is reported, not replaced. */
  scree_runtime_info ri;
  ck_assert_int_eq(scree_get_runtime_info(&ri), SCREE_OK);
  ck_assert_int_eq(ri.nvrtc_loaded, 0);
  ck_assert_msg(strstr(ri.nvrtc_error, "/nonexistent/libnvrtc.so"), "%s", ri.nvrtc_error);
  if (ri.device_count > 0) {
    scree_context *ctx = NULL;
    char why[512];
    ck_assert_int_eq(scree_create(NULL, &ctx, why, sizeof why), SCREE_ERROR_NO_NVRTC);
    ck_assert(strstr(why, "/nonexistent/libnvrtc.so"));
  }
}
END_TEST

SCREE_TEST_MAIN(.name = "context",
                .tests = SCREE_TESTS(no_gpu_gives_no_device, missing_driver_library_gives_no_device,
                                     stub_driver_gives_no_device, bad_arguments, bad_ordinal,
                                     options_defaults, pin_from_options_or_env, bad_pin_fails_create,
                                     runtime_info_reports_nvrtc,
                                     missing_nvrtc_is_reported))
