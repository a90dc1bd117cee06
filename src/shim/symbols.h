/* SPDX-License-Identifier: MIT */
/*
 * symbols.h: the one list of driver and NVML symbols the shim knows.
 *
 * X(lib, hooked, ret, name, params):
 *   lib     CUDA (resolved from libcuda.so.1) or NVML (libnvidia-ml.so.1)
 *   hooked  1 if libaccelshim.so exports a replacement of the same name (it is
 *           then also returned by dlsym and cuGetProcAddress in place of the
 *           real one), 0 if the shim only calls the real one itself
 *   ret     return type; params the full typed parameter list
 *
 * From this list come the typed `real.*` pointers (shim.h), the resolution
 * loop (shim.c) and the real-to-hook table behind dlsym/cuGetProcAddress
 * (procaddr.c). Adding a hook = one line here + its body in hooks.c.
 */
#ifndef ACCEL_SHIM_SYMBOLS_H
#define ACCEL_SHIM_SYMBOLS_H

#include "shim/cuda_types.h"

#define ACCEL_SHIM_SYMBOLS(X)                                                  \
    X(CUDA, 1, CUresult, cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize)) \
    X(CUDA, 1, CUresult, cuMemAllocPitch_v2,                                   \
      (CUdeviceptr * dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, \
       unsigned int ElementSizeBytes))                                         \
    X(CUDA, 1, CUresult, cuMemAllocManaged,                                    \
      (CUdeviceptr * dptr, size_t bytesize, unsigned int flags))               \
    X(CUDA, 1, CUresult, cuMemAllocAsync,                                      \
      (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))                 \
    X(CUDA, 1, CUresult, cuMemAllocAsync_ptsz,                                 \
      (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))                 \
    X(CUDA, 1, CUresult, cuMemAllocFromPoolAsync,                              \
      (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool,                 \
       CUstream hStream))                                                      \
    X(CUDA, 1, CUresult, cuMemAllocFromPoolAsync_ptsz,                         \
      (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool,                 \
       CUstream hStream))                                                      \
    X(CUDA, 1, CUresult, cuMemFree_v2, (CUdeviceptr dptr))                     \
    X(CUDA, 1, CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream)) \
    X(CUDA, 1, CUresult, cuMemFreeAsync_ptsz,                                  \
      (CUdeviceptr dptr, CUstream hStream))                                    \
    X(CUDA, 1, CUresult, cuMemCreate,                                          \
      (CUmemGenericAllocationHandle * handle, size_t size,                     \
       const CUmemAllocationProp *prop, unsigned long long flags))             \
    X(CUDA, 1, CUresult, cuMemRelease, (CUmemGenericAllocationHandle handle))  \
    X(CUDA, 1, CUresult, cuArrayCreate_v2,                                     \
      (CUarray * pHandle, const CUDA_ARRAY_DESCRIPTOR *desc))                  \
    X(CUDA, 1, CUresult, cuArray3DCreate_v2,                                   \
      (CUarray * pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc))                \
    X(CUDA, 1, CUresult, cuArrayDestroy, (CUarray hArray))                     \
    X(CUDA, 1, CUresult, cuMipmappedArrayCreate,                               \
      (CUmipmappedArray * pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,        \
       unsigned int numLevels))                                                \
    X(CUDA, 1, CUresult, cuMipmappedArrayDestroy, (CUmipmappedArray h))        \
    X(CUDA, 1, CUresult, cuCtxCreate_v2,                                       \
      (CUcontext * pctx, unsigned int flags, CUdevice dev))                    \
    X(CUDA, 1, CUresult, cuCtxCreate_v3,                                       \
      (CUcontext * pctx, CUexecAffinityParam * params, int numParams,          \
       unsigned int flags, CUdevice dev))                                      \
    X(CUDA, 1, CUresult, cuCtxCreate_v4,                                       \
      (CUcontext * pctx, CUctxCreateParams * params, unsigned int flags,       \
       CUdevice dev))                                                          \
    X(CUDA, 1, CUresult, cuCtxDestroy_v2, (CUcontext ctx))                     \
    X(CUDA, 1, CUresult, cuMemGetInfo_v2, (size_t * pfree, size_t *ptotal))    \
    X(CUDA, 1, CUresult, cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev))  \
    X(CUDA, 1, CUresult, cuLaunchKernel,                                       \
      (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,        \
       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,  \
       CUstream hStream, void **kernelParams, void **extra))                   \
    X(CUDA, 1, CUresult, cuLaunchKernel_ptsz,                                  \
      (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,        \
       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,  \
       CUstream hStream, void **kernelParams, void **extra))                   \
    X(CUDA, 1, CUresult, cuGetProcAddress,                                     \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags))     \
    X(CUDA, 1, CUresult, cuGetProcAddress_v2,                                  \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,      \
       CUdriverProcAddressQueryResult *symbolStatus))                          \
    X(CUDA, 0, CUresult, cuCtxGetDevice, (CUdevice * dev))                     \
    X(NVML, 1, nvmlReturn_t, nvmlDeviceGetMemoryInfo,                          \
      (nvmlDevice_t device, nvmlMemory_t * memory))                            \
    X(NVML, 1, nvmlReturn_t, nvmlDeviceGetMemoryInfo_v2,                       \
      (nvmlDevice_t device, nvmlMemory_v2_t * memory))                         \
    X(NVML, 0, nvmlReturn_t, nvmlDeviceGetIndex,                               \
      (nvmlDevice_t device, unsigned int *index))                              \
    X(NVML, 0, nvmlReturn_t, nvmlDeviceGetUUID,                                \
      (nvmlDevice_t device, char *uuid, unsigned int length))

#endif /* ACCEL_SHIM_SYMBOLS_H */
