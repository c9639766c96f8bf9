/*
 * cuda_api.h - the CUDA Driver API and NVRTC as function tables, opened at
 * run time with dlopen.
 *
 * scree never includes cuda.h or nvrtc.h: the few types and constants it
 * needs are declared here with the values the CUDA ABI fixes, so the library
 * builds without a CUDA toolkit and links nothing CUDA. Each table is loaded
 * once per process (thread-safe) and never unloaded.
 */
#ifndef SCREE_CUDA_API_H
#define SCREE_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES 701

/* CUdevice_attribute values used by scree. */
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE 38
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97

/* CUfunction_attribute values. */
#define CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK 0
#define CU_FUNC_ATTRIBUTE_NUM_REGS 4
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8

#define CU_EVENT_DEFAULT 0
#define CU_EVENT_DISABLE_TIMING 2
#define CU_STREAM_NON_BLOCKING 1

/* The Driver API entries scree calls. All but the optional ones at the end
 * are required: a driver too old to export one fails to load with a message
 * naming it. */
typedef struct scree__cu_api {
  CUresult (*Init)(unsigned int flags);
  CUresult (*DriverGetVersion)(int *version);
  CUresult (*GetErrorName)(CUresult err, const char **name);
  CUresult (*GetErrorString)(CUresult err, const char **text);
  CUresult (*DeviceGetCount)(int *count);
  CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
  CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
  CUresult (*DeviceGetAttribute)(int *value, int attrib, CUdevice dev);
  CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice dev);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
  CUresult (*CtxGetCurrent)(CUcontext *ctx);
  CUresult (*CtxPushCurrent)(CUcontext ctx);
  CUresult (*CtxPopCurrent)(CUcontext *ctx);
  CUresult (*CtxSynchronize)(void);
  CUresult (*ModuleLoadDataEx)(CUmodule *mod, const void *image,
                               unsigned int n, int *options, void **values);
  CUresult (*ModuleUnload)(CUmodule mod);
  CUresult (*ModuleGetFunction)(CUfunction *fn, CUmodule mod,
                                const char *name);
  CUresult (*FuncGetAttribute)(int *value, int attrib, CUfunction fn);
  CUresult (*FuncSetAttribute)(CUfunction fn, int attrib, int value);
  CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks, CUfunction fn,
                                                       int threads, size_t smem);
  CUresult (*LaunchKernel)(CUfunction fn, unsigned gx, unsigned gy,
                           unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned smem, CUstream stream, void **params,
                           void **extra);
  CUresult (*MemAlloc)(CUdeviceptr *ptr, size_t bytes);
  CUresult (*MemFree)(CUdeviceptr ptr);
  CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes);
  CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
  CUresult (*MemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                              CUstream stream);
  CUresult (*MemsetD8)(CUdeviceptr dst, unsigned char value, size_t n);
  CUresult (*MemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n,
                            CUstream stream);
  CUresult (*StreamCreate)(CUstream *stream, unsigned int flags);
  CUresult (*StreamDestroy)(CUstream stream);
  CUresult (*StreamSynchronize)(CUstream stream);
  CUresult (*StreamQuery)(CUstream stream);
  CUresult (*EventCreate)(CUevent *ev, unsigned int flags);
  CUresult (*EventDestroy)(CUevent ev);
  CUresult (*EventRecord)(CUevent ev, CUstream stream);
  CUresult (*EventSynchronize)(CUevent ev);
  CUresult (*EventQuery)(CUevent ev);
  CUresult (*EventElapsedTime)(float *ms, CUevent start, CUevent end);

  /* Optional entries: NULL when the driver does not export them. Code that
   * uses one checks for NULL and falls back (a Hopper implementation that
   * needs tensor maps is then not a candidate). */
  CUresult (*TensorMapEncodeTiled)(void *map, int dtype, unsigned rank,
                                   void *global, const uint64_t *dims,
                                   const uint64_t *strides,
                                   const unsigned *box, const unsigned *elem_strides,
                                   int interleave, int swizzle, int l2promo,
                                   int oob_fill);
  CUresult (*LaunchKernelEx)(const void *config, CUfunction fn, void **params,
                             void **extra);
} scree__cu_api;

/* cuLaunchKernelEx's configuration (CUlaunchConfig, CUlaunchAttribute in
 * cuda.h, same layout): the launch and a list of attributes, of which scree
 * uses the thread block cluster's shape. */
#define CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4
typedef struct scree__cu_launch_attr {
  int id;
  char pad[4];
  union {
    char pad[64];
    struct {
      unsigned x, y, z;
    } cluster_dim;
  } value;
} scree__cu_launch_attr;
typedef struct scree__cu_launch_config {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, smem;
  CUstream stream;
  scree__cu_launch_attr *attrs;
  unsigned nattrs;
} scree__cu_launch_config;

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#define NVRTC_SUCCESS 0
#define NVRTC_ERROR_OUT_OF_MEMORY 1
#define NVRTC_ERROR_COMPILATION 6

/* The NVRTC entries scree calls. NVRTC is thread-safe: separate programs
 * may be compiled on separate threads at once. */
typedef struct scree__nvrtc_api {
  const char *(*GetErrorString)(nvrtcResult r);
  nvrtcResult (*Version)(int *major, int *minor);
  nvrtcResult (*CreateProgram)(nvrtcProgram *prog, const char *src,
                               const char *name, int num_headers,
                               const char *const *headers,
                               const char *const *include_names);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *prog);
  nvrtcResult (*CompileProgram)(nvrtcProgram prog, int num_options,
                                const char *const *options);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram prog, size_t *size);
  nvrtcResult (*GetProgramLog)(nvrtcProgram prog, char *log);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram prog, size_t *size);
  nvrtcResult (*GetCUBIN)(nvrtcProgram prog, char *cubin);
} scree__nvrtc_api;

/* Loads the driver once: $SCREE_CUDA_LIBRARY if set, else libcuda.so.1.
 * Returns the table, or NULL with `why` filled (the dlopen/dlsym message)
 * and *nolib (if not NULL) set when the library itself is absent, as on a
 * machine without a GPU. Does not call cuInit. Thread-safe. */
const scree__cu_api *scree__cu_load(char *why, size_t why_size, int *nolib);

/* Loads NVRTC once: $SCREE_NVRTC_LIBRARY if set, else libnvrtc.so.13,
 * libnvrtc.so.12, libnvrtc.so, then the same names under $CUDA_HOME/lib64,
 * $CUDA_PATH/lib64 and /usr/local/cuda/lib64. Returns NULL with `why` listing
 * what was tried. `path_out`, if not NULL, gets the name that opened.
 * Thread-safe. */
const scree__nvrtc_api *scree__nvrtc_load(char *why, size_t why_size,
                                          const char **path_out);

/* The driver's name for an error code ("CUDA_ERROR_OUT_OF_MEMORY"), or
 * "CUDA_ERROR_<n>" if the driver does not know it. Static. */
const char *scree__cu_error_name(const scree__cu_api *cu, CUresult r);

#endif
