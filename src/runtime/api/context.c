/* context.c - context lifetime, device queries, errors and logging. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "store/safelist.h"

#define set_why scree__set_why

/* Loads the driver and runs cuInit. Returns the status a caller reports. */
static scree_status driver_up(const scree__cu_api **out, char *why, size_t n) {
  char buf[512];
  int nolib = 0;
  const scree__cu_api *cu = scree__cu_load(buf, sizeof buf, &nolib);
  if (!cu) {
    /* No driver library at all means no GPU here; a library that lacks
     * entry points is a driver too old for scree. */
    set_why(why, n, "%s", buf);
    return nolib ? SCREE_ERROR_NO_DEVICE : SCREE_ERROR_NO_DRIVER;
  }
  CUresult r = cu->Init(0);
  if (r != CUDA_SUCCESS) {
    set_why(why, n, "cuInit failed: %s", scree__cu_error_name(cu, r));
    return (r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_INVALID_DEVICE ||
            r == CUDA_ERROR_STUB_LIBRARY)
               ? SCREE_ERROR_NO_DEVICE
               : SCREE_ERROR_NO_DRIVER;
  }
  *out = cu;
  return SCREE_OK;
}

static scree_status fill_device_info(const scree__cu_api *cu, int ordinal,
                                     CUdevice *dev_out, scree_device_info *info,
                                     char *why, size_t n) {
  int count = 0;
  CUresult r = cu->DeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    set_why(why, n, "no CUDA device (%s)",
            r != CUDA_SUCCESS ? scree__cu_error_name(cu, r) : "count is 0");
    return SCREE_ERROR_NO_DEVICE;
  }
  if (ordinal < 0 || ordinal >= count) {
    set_why(why, n, "device=%d is out of range: %d device(s)", ordinal, count);
    return SCREE_ERROR_NO_DEVICE;
  }
  CUdevice dev;
  r = cu->DeviceGet(&dev, ordinal);
  if (r != CUDA_SUCCESS) {
    set_why(why, n, "cuDeviceGet(%d): %s", ordinal, scree__cu_error_name(cu, r));
    return SCREE_ERROR_NO_DEVICE;
  }
  memset(info, 0, sizeof *info);
  info->ordinal = ordinal;
  cu->DeviceGetName(info->name, (int)sizeof info->name, dev);
  cu->DeviceGetAttribute(&info->cc_major,
                         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cu->DeviceGetAttribute(&info->cc_minor,
                         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  cu->DeviceGetAttribute(&info->sm_count,
                         CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  cu->DeviceGetAttribute(&info->l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                         dev);
  cu->DeviceGetAttribute(&info->max_smem_per_block_optin,
                         CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                         dev);
  cu->DeviceTotalMem(&info->total_memory, dev);
  snprintf(info->arch, sizeof info->arch, "sm_%d%d", info->cc_major,
           info->cc_minor);
  if (dev_out) *dev_out = dev;
  return SCREE_OK;
}

scree_status scree_get_runtime_info(scree_runtime_info *info) {
  if (!info) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(info, 0, sizeof *info);
  const scree__cu_api *cu = NULL;
  char why[512] = "";
  if (scree__cu_load(why, sizeof why, NULL)) info->driver_loaded = 1;
  scree_status st = driver_up(&cu, why, sizeof why);
  if (st == SCREE_OK) {
    cu->DriverGetVersion(&info->driver_version);
    if (cu->DeviceGetCount(&info->device_count) != CUDA_SUCCESS)
      info->device_count = 0;
    if (info->device_count == 0)
      snprintf(info->driver_error, sizeof info->driver_error,
               "the driver loaded but reports no CUDA device");
  } else {
    if (info->driver_loaded) {
      const scree__cu_api *c2 = scree__cu_load(NULL, 0, NULL);
      c2->DriverGetVersion(&info->driver_version);
    }
    snprintf(info->driver_error, sizeof info->driver_error, "%.255s", why);
  }
  const char *path = NULL;
  const scree__nvrtc_api *nv = scree__nvrtc_load(why, sizeof why, &path);
  if (nv) {
    info->nvrtc_loaded = 1;
    nv->Version(&info->nvrtc_major, &info->nvrtc_minor);
    snprintf(info->nvrtc_path, sizeof info->nvrtc_path, "%s", path);
  } else {
    snprintf(info->nvrtc_error, sizeof info->nvrtc_error, "%.255s", why);
  }
  return SCREE_OK;
}

scree_status scree_get_device_info(int ordinal, scree_device_info *info) {
  if (!info) return SCREE_ERROR_INVALID_ARGUMENT;
  const scree__cu_api *cu = NULL;
  scree_status st = driver_up(&cu, NULL, 0);
  if (st != SCREE_OK) return st;
  return fill_device_info(cu, ordinal, NULL, info, NULL, 0);
}

void scree_options_init(scree_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->device = 0;
  opts->miss_policy = SCREE_MISS_DEFAULT;
  opts->log_level = SCREE_LOG_WARN;
}

const char *scree__options_pin(const scree_options *opts) {
  if (opts && opts->pin_path) return opts->pin_path[0] ? opts->pin_path : NULL;
  const char *e = getenv("SCREE_PIN");
  return e && *e ? e : NULL;
}

int scree__options_batch_invariant(const scree_options *opts) {
  if (opts && opts->batch_invariant) return opts->batch_invariant > 0;
  const char *e = getenv("SCREE_BATCH_INVARIANT");
  return e && *e && strcmp(e, "0") ? 1 : 0;
}

static scree_miss_policy env_miss_policy(scree_miss_policy dflt) {
  const char *e = getenv("SCREE_MISS_POLICY");
  if (!e || !*e) return dflt;
  if (!strcmp(e, "default")) return SCREE_MISS_DEFAULT;
  if (!strcmp(e, "tune")) return SCREE_MISS_TUNE;
  if (!strcmp(e, "error")) return SCREE_MISS_ERROR;
  return dflt;
}

static int env_log_level(scree_log_level dflt) {
  const char *e = getenv("SCREE_LOG_LEVEL");
  if (!e || !*e) return dflt;
  static const char *const names[] = {"off", "error", "warn", "info", "debug"};
  for (int i = 0; i < 5; i++)
    if (!strcmp(e, names[i])) return i;
  if (e[0] >= '0' && e[0] <= '4' && !e[1]) return e[0] - '0';
  return dflt;
}

scree_status scree_create(const scree_options *opts_in, scree_context **out,
                          char *why, size_t why_size) {
  if (why && why_size) why[0] = 0;
  if (!out) {
    set_why(why, why_size, "out is NULL");
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  *out = NULL;
  scree_options opts;
  if (opts_in)
    opts = *opts_in;
  else
    scree_options_init(&opts);

  /* A pinned cache is the only source of tuned configs; one that cannot be
   * opened fails the create, naming the file, before anything else. */
  const char *pin = scree__options_pin(&opts);
  scree__cache_stack *pinned = NULL;
  if (pin) {
    pinned = calloc(1, sizeof *pinned);
    if (!pinned) {
      set_why(why, why_size, "cannot allocate the pinned cache");
      return SCREE_ERROR_OUT_OF_MEMORY;
    }
    char pwhy[2560];
    const scree_status pst = scree__cache_stack_open_pinned(pinned, pin, pwhy, sizeof pwhy);
    if (pst != SCREE_OK) {
      set_why(why, why_size, "%s%s", opts.pin_path ? "" : "SCREE_PIN: ", pwhy);
      free(pinned);
      return pst;
    }
  }

  const scree__cu_api *cu = NULL;
  scree_status st = driver_up(&cu, why, why_size);
  scree_context *ctx = st == SCREE_OK ? calloc(1, sizeof *ctx) : NULL;
  if (st == SCREE_OK && !ctx) {
    set_why(why, why_size, "cannot allocate the context");
    st = SCREE_ERROR_OUT_OF_MEMORY;
  }
  if (st != SCREE_OK) {
    scree__cache_stack_close(pinned);
    free(pinned);
    return st;
  }
  ctx->caches = pinned; /* NULL unless pinned */
  ctx->cu = cu;
  st = fill_device_info(cu, opts.device, &ctx->dev, &ctx->info, why, why_size);
  if (st != SCREE_OK) {
    scree__cache_stack_close(ctx->caches);
    free(ctx->caches);
    free(ctx);
    return st;
  }
  ctx->sm = ctx->info.cc_major * 10 + ctx->info.cc_minor;
  snprintf(ctx->arch, sizeof ctx->arch, "%s", ctx->info.arch);
  cu->DriverGetVersion(&ctx->driver_version);

  char nvwhy[1024];
  ctx->nvrtc = scree__nvrtc_load(nvwhy, sizeof nvwhy, NULL);
  const char *nvopt = getenv("SCREE_NVRTC_OPTIONAL");
  const int nvrtc_optional =
      opts.nvrtc_optional || (nvopt && *nvopt && strcmp(nvopt, "0"));
  if (!ctx->nvrtc && !nvrtc_optional) {
    set_why(why, why_size, "%s", nvwhy);
    scree__cache_stack_close(ctx->caches);
    free(ctx->caches);
    free(ctx);
    return SCREE_ERROR_NO_NVRTC;
  }
  if (ctx->nvrtc) ctx->nvrtc->Version(&ctx->nvrtc_major, &ctx->nvrtc_minor);

  CUresult r = cu->DevicePrimaryCtxRetain(&ctx->pctx, ctx->dev);
  if (r != CUDA_SUCCESS) {
    set_why(why, why_size, "cuDevicePrimaryCtxRetain(device %d): %s",
            opts.device, scree__cu_error_name(cu, r));
    scree__cache_stack_close(ctx->caches);
    free(ctx->caches);
    free(ctx);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? SCREE_ERROR_OUT_OF_MEMORY
                                         : SCREE_ERROR_NO_DEVICE;
  }
  pthread_mutex_init(&ctx->err_lock, NULL);
  ctx->log_level = (scree_log_level)env_log_level(opts.log_level);
  ctx->log_fn = opts.log_fn;
  ctx->log_user = opts.log_user;
  ctx->miss_policy = env_miss_policy(opts.miss_policy);
  const char *val = getenv("SCREE_VALIDATE");
  ctx->validate = opts.validate || (val && *val && strcmp(val, "0"));
  ctx->batch_invariant = scree__options_batch_invariant(&opts);
  if (ctx->batch_invariant)
    scree__log(ctx, SCREE_LOG_INFO,
               "batch-invariant mode: configs chosen per sequence, not per batch");
  if (scree__modtab_create(ctx) || scree__tuner_create(ctx) || scree__plans_create(ctx)) {
    set_why(why, why_size, "cannot allocate the context's tables");
    scree_destroy(ctx);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }

  if (pinned)
    scree__log(ctx, SCREE_LOG_INFO, "pinned cache %s: the only source of tuned configs", pin);
  /* The tuning cache and the safelist are optional: without them scree
   * runs default configs and says so once. */
  const char *nocache = getenv("SCREE_NO_CACHE");
  if (!pin && !opts.disable_cache && !(nocache && *nocache && strcmp(nocache, "0"))) {
    ctx->caches = calloc(1, sizeof *ctx->caches);
    char warn[2048] = "";
    if (ctx->caches &&
        scree__cache_stack_open(ctx->caches, opts.cache_path, opts.cache_search_path,
                                warn, sizeof warn) != SCREE_OK) {
      free(ctx->caches);
      ctx->caches = NULL;
    }
    if (ctx->caches) /* this GPU's model's shipped tuned configs answer first */
      snprintf(ctx->caches->device, sizeof ctx->caches->device, "%.127s", ctx->info.name);
    if (warn[0]) scree__log(ctx, SCREE_LOG_WARN, "%s", warn);
    if (ctx->caches && ctx->caches->user)
      scree__log(ctx, SCREE_LOG_DEBUG, "user cache %s, %d shipped cache(s)",
                 scree__cache_path(ctx->caches->user), ctx->caches->nshipped);
  }
  ctx->safelist = calloc(1, sizeof *ctx->safelist);
  char slwhy[512] = "";
  scree_status slst = SCREE_OK;
  if (ctx->safelist &&
      (slst = scree__safelist_for_arch(ctx->arch, ctx->safelist, slwhy, sizeof slwhy)) != SCREE_OK) {
    /* No list for this arch is normal; a list that does not parse is not. */
    scree__log(ctx, slst == SCREE_ERROR_NOT_FOUND ? SCREE_LOG_INFO : SCREE_LOG_WARN,
               "no safelist for %s (%s): tuning explores the whole space", ctx->arch, slwhy);
    free(ctx->safelist);
    ctx->safelist = NULL;
  }
  if (!ctx->nvrtc)
    scree__log(ctx, SCREE_LOG_INFO,
               "NVRTC is not available (%s): only cached kernels can run", nvwhy);
  scree__log(ctx, SCREE_LOG_INFO,
             "context on device %d (%s, %s, %d SMs), driver %d, NVRTC %d.%d",
             opts.device, ctx->info.name, ctx->arch, ctx->info.sm_count,
             ctx->driver_version, ctx->nvrtc_major, ctx->nvrtc_minor);
  *out = ctx;
  return SCREE_OK;
}

void scree_destroy(scree_context *ctx) {
  if (!ctx) return;
  if (!ctx->cu) { /* offline */
    pthread_mutex_destroy(&ctx->err_lock);
    free(ctx);
    return;
  }
  scree__plans_free(ctx);
  scree__modtab_free(ctx);
  scree__tuner_free(ctx);
  const int pushed = scree__ctx_enter(ctx);
  scree__workspace_free(ctx);
  scree__ctx_leave(ctx, pushed);
  if (ctx->caches) {
    scree__cache_stack_close(ctx->caches);
    free(ctx->caches);
  }
  if (ctx->safelist) {
    scree__safelist_free(ctx->safelist);
    free(ctx->safelist);
  }
  ctx->cu->DevicePrimaryCtxRelease(ctx->dev);
  pthread_mutex_destroy(&ctx->err_lock);
  free(ctx);
}

const char *scree_last_error(const scree_context *ctx) {
  /* A copy per thread: another thread's failure or success cannot change
   * the string while the caller reads it. */
  static __thread char copy[sizeof ctx->err];
  if (!ctx) return "ctx is NULL";
  scree__error_copy((scree_context *)ctx, copy, sizeof copy);
  return copy;
}

scree_status scree_context_device(const scree_context *ctx,
                                  scree_device_info *info) {
  if (!ctx || !info) return SCREE_ERROR_INVALID_ARGUMENT;
  *info = ctx->info;
  return SCREE_OK;
}

scree_status scree_get_counters(const scree_context *ctx, scree_counters *out) {
  if (!ctx || !out) return SCREE_ERROR_INVALID_ARGUMENT;
  const uint64_t *src = (const uint64_t *)&ctx->counters;
  uint64_t *dst = (uint64_t *)out;
  for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
    dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
  return SCREE_OK;
}


scree__cache *scree__user_cache(scree_context *ctx) {
  return ctx->caches ? ctx->caches->user : NULL;
}
