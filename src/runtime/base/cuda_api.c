/* cuda_api.c - dlopen the CUDA driver and NVRTC into function tables. */
#include "base/cuda_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static scree__cu_api g_cu;
static int g_cu_ok;
static int g_cu_nolib; /* the library itself could not be opened */
static char g_cu_why[512];
static pthread_once_t g_cu_once = PTHREAD_ONCE_INIT;

static scree__nvrtc_api g_nvrtc;
static int g_nvrtc_ok;
static char g_nvrtc_why[1024];
static char g_nvrtc_path[PATH_MAX];
static pthread_once_t g_nvrtc_once = PTHREAD_ONCE_INIT;

/* Resolves the first of `names` that the library exports. */
static void *sym_any(void *lib, const char *const *names) {
  for (; *names; names++) {
    void *p = dlsym(lib, *names);
    if (p) return p;
  }
  return NULL;
}

#define CU_SYM(field, ...)                                                   \
  do {                                                                       \
    static const char *const names_[] = {__VA_ARGS__, NULL};                 \
    void *p_ = sym_any(lib, names_);                                         \
    if (!p_) {                                                               \
      snprintf(g_cu_why, sizeof g_cu_why,                                    \
               "libcuda.so.1 does not export %s (driver too old?)",          \
               names_[0]);                                                   \
      return;                                                                \
    }                                                                        \
    memcpy(&g_cu.field, &p_, sizeof p_);                                     \
  } while (0)

#define OPT_SYM(field, name)                                                 \
  do {                                                                       \
    void *p_ = dlsym(lib, name);                                             \
    memcpy(&g_cu.field, &p_, sizeof p_);                                     \
  } while (0)

static void cu_load_once(void) {
  const char *name = getenv("SCREE_CUDA_LIBRARY");
  if (!name || !*name) name = "libcuda.so.1";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(g_cu_why, sizeof g_cu_why, "cannot open %s: %s", name,
             e ? e : "unknown dlopen error");
    g_cu_nolib = 1;
    return;
  }
  CU_SYM(Init, "cuInit");
  CU_SYM(DriverGetVersion, "cuDriverGetVersion");
  CU_SYM(GetErrorName, "cuGetErrorName");
  CU_SYM(GetErrorString, "cuGetErrorString");
  CU_SYM(DeviceGetCount, "cuDeviceGetCount");
  CU_SYM(DeviceGet, "cuDeviceGet");
  CU_SYM(DeviceGetName, "cuDeviceGetName");
  CU_SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
  CU_SYM(DeviceTotalMem, "cuDeviceTotalMem_v2");
  CU_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  CU_SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",
         "cuDevicePrimaryCtxRelease");
  CU_SYM(CtxGetCurrent, "cuCtxGetCurrent");
  CU_SYM(CtxPushCurrent, "cuCtxPushCurrent_v2");
  CU_SYM(CtxPopCurrent, "cuCtxPopCurrent_v2");
  CU_SYM(CtxSynchronize, "cuCtxSynchronize");
  CU_SYM(ModuleLoadDataEx, "cuModuleLoadDataEx");
  CU_SYM(ModuleUnload, "cuModuleUnload");
  CU_SYM(ModuleGetFunction, "cuModuleGetFunction");
  CU_SYM(FuncGetAttribute, "cuFuncGetAttribute");
  CU_SYM(FuncSetAttribute, "cuFuncSetAttribute");
  CU_SYM(OccupancyMaxActiveBlocksPerMultiprocessor,
         "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  CU_SYM(LaunchKernel, "cuLaunchKernel");
  CU_SYM(MemAlloc, "cuMemAlloc_v2");
  CU_SYM(MemFree, "cuMemFree_v2");
  CU_SYM(MemGetInfo, "cuMemGetInfo_v2");
  CU_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
  CU_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
  CU_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  CU_SYM(MemsetD8, "cuMemsetD8_v2");
  CU_SYM(MemsetD8Async, "cuMemsetD8Async");
  CU_SYM(StreamCreate, "cuStreamCreate");
  CU_SYM(StreamDestroy, "cuStreamDestroy_v2");
  CU_SYM(StreamSynchronize, "cuStreamSynchronize");
  CU_SYM(StreamQuery, "cuStreamQuery");
  CU_SYM(EventCreate, "cuEventCreate");
  CU_SYM(EventDestroy, "cuEventDestroy_v2");
  CU_SYM(EventRecord, "cuEventRecord");
  CU_SYM(EventSynchronize, "cuEventSynchronize");
  CU_SYM(EventQuery, "cuEventQuery");
  CU_SYM(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
  /* Optional: absent from older drivers; callers check for NULL. */
  OPT_SYM(TensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  OPT_SYM(LaunchKernelEx, "cuLaunchKernelEx");
  g_cu_ok = 1;
}

const scree__cu_api *scree__cu_load(char *why, size_t why_size, int *nolib) {
  pthread_once(&g_cu_once, cu_load_once);
  if (nolib) *nolib = g_cu_nolib;
  if (g_cu_ok) return &g_cu;
  if (why && why_size) snprintf(why, why_size, "%s", g_cu_why);
  return NULL;
}

const char *scree__cu_error_name(const scree__cu_api *cu, CUresult r) {
  static __thread char buf[32];
  const char *name = NULL;
  if (cu && cu->GetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  snprintf(buf, sizeof buf, "CUDA_ERROR_%d", r);
  return buf;
}

#define NV_SYM(field, name)                                                  \
  do {                                                                       \
    void *p_ = dlsym(lib, name);                                             \
    if (!p_) {                                                               \
      snprintf(g_nvrtc_why, sizeof g_nvrtc_why, "%s does not export %s",     \
               path, name);                                                  \
      dlclose(lib);                                                          \
      return 0;                                                              \
    }                                                                        \
    memcpy(&g_nvrtc.field, &p_, sizeof p_);                                  \
  } while (0)

static int nvrtc_try(const char *path, char *tried, size_t tried_size) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    size_t n = strlen(tried);
    if (n + 4 < tried_size)
      snprintf(tried + n, tried_size - n, "%s%s", n ? ", " : "", path);
    return 0;
  }
  NV_SYM(GetErrorString, "nvrtcGetErrorString");
  NV_SYM(Version, "nvrtcVersion");
  NV_SYM(CreateProgram, "nvrtcCreateProgram");
  NV_SYM(DestroyProgram, "nvrtcDestroyProgram");
  NV_SYM(CompileProgram, "nvrtcCompileProgram");
  NV_SYM(GetProgramLogSize, "nvrtcGetProgramLogSize");
  NV_SYM(GetProgramLog, "nvrtcGetProgramLog");
  NV_SYM(GetCUBINSize, "nvrtcGetCUBINSize");
  NV_SYM(GetCUBIN, "nvrtcGetCUBIN");
  /* Report the file that was opened, not the name asked for: a soname
   * ("libnvrtc.so.13") found on the loader path says nothing about which
   * toolkit or wheel it came from. dladdr names the object that holds a
   * symbol, as the loader resolved it; realpath follows the soname link
   * to the versioned file. */
  Dl_info di;
  char real[PATH_MAX];
  const char *file = path;
  void *sym;
  memcpy(&sym, &g_nvrtc.Version, sizeof sym);
  if (dladdr(sym, &di) && di.dli_fname && di.dli_fname[0] == '/') file = di.dli_fname;
  if (realpath(file, real)) file = real;
  snprintf(g_nvrtc_path, sizeof g_nvrtc_path, "%s", file);
  g_nvrtc_ok = 1;
  return 1;
}

static void nvrtc_load_once(void) {
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12",
                                      "libnvrtc.so", NULL};
  char tried[768] = "";
  char path[512];
  const char *env = getenv("SCREE_NVRTC_LIBRARY");
  if (env && *env) { /* an explicit choice: no fallback behind its back */
    if (!nvrtc_try(env, tried, sizeof tried) && !g_nvrtc_why[0])
      snprintf(g_nvrtc_why, sizeof g_nvrtc_why,
               "cannot open SCREE_NVRTC_LIBRARY=%s: %s", env, dlerror());
    return;
  }
  for (int i = 0; names[i]; i++)
    if (nvrtc_try(names[i], tried, sizeof tried)) return;
  const char *dirs[3] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"),
                         "/usr/local/cuda"};
  for (int d = 0; d < 3; d++) {
    if (!dirs[d] || !*dirs[d]) continue;
    for (int i = 0; names[i]; i++) {
      snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]);
      if (nvrtc_try(path, tried, sizeof tried)) return;
    }
  }
  if (!g_nvrtc_why[0])
    snprintf(g_nvrtc_why, sizeof g_nvrtc_why,
             "cannot open NVRTC (tried %s); set SCREE_NVRTC_LIBRARY to its path",
             tried);
}

const scree__nvrtc_api *scree__nvrtc_load(char *why, size_t why_size,
                                          const char **path_out) {
  pthread_once(&g_nvrtc_once, nvrtc_load_once);
  if (g_nvrtc_ok) {
    if (path_out) *path_out = g_nvrtc_path;
    return &g_nvrtc;
  }
  if (why && why_size) snprintf(why, why_size, "%s", g_nvrtc_why);
  return NULL;
}
