/* SPDX-License-Identifier: MIT */
/*
 * symbols.h: the one list of driver and NVML symbols the shim knows.
 *
 * X(lib, hooked, ret, name, params):
 *   lib     CUDA (resolved from libcuda.so.1), NVML (libnvidia-ml.so.1) or
 *           HIP (libamdhip64.so, the AMD runtime: hooks_hip.c)
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
#include "shim/hip_types.h"

/* Work submission: every call that puts work on a device. S(X, name,
 * params, args): args forwards params. Time slicing (timeslice.c) makes
 * the process hold its app's turn before each of them. */
#define ACCEL_SHIM_SUBMIT(S, X) \
    S(X, cuLaunchKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream, void **kernelParams, void **extra), (f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams, extra)) \
    S(X, cuLaunchKernel_ptsz, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream, void **kernelParams, void **extra), (f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams, extra)) \
    S(X, cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), (config, f, kernelParams, extra)) \
    S(X, cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), (config, f, kernelParams, extra)) \
    S(X, cuLaunchCooperativeKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream, void **kernelParams), (f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams)) \
    S(X, cuLaunchCooperativeKernel_ptsz, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream, void **kernelParams), (f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams)) \
    S(X, cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream)) \
    S(X, cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream)) \
    S(X, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    S(X, cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    S(X, cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    S(X, cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    S(X, cuMemcpyPeer, (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n), (dst, dctx, src, sctx, n)) \
    S(X, cuMemcpyPeer_ptds, (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n), (dst, dctx, src, sctx, n)) \
    S(X, cuMemcpyPeerAsync, (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream hStream), (dst, dctx, src, sctx, n, hStream)) \
    S(X, cuMemcpyPeerAsync_ptsz, (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream hStream), (dst, dctx, src, sctx, n, hStream)) \
    S(X, cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n)) \
    S(X, cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n)) \
    S(X, cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    S(X, cuMemcpyDtoH_v2_ptds, (void *dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    S(X, cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    S(X, cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    S(X, cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    S(X, cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void *src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    S(X, cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    S(X, cuMemcpyDtoHAsync_v2_ptsz, (void *dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    S(X, cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    S(X, cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    S(X, cuMemcpy2D_v2, (const CUDA_MEMCPY2D *p), (p)) \
    S(X, cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *p), (p)) \
    S(X, cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *p, CUstream hStream), (p, hStream)) \
    S(X, cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *p, CUstream hStream), (p, hStream)) \
    S(X, cuMemcpy3D_v2, (const CUDA_MEMCPY3D *p), (p)) \
    S(X, cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *p), (p)) \
    S(X, cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *p, CUstream hStream), (p, hStream)) \
    S(X, cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *p, CUstream hStream), (p, hStream)) \
    S(X, cuMemsetD8_v2, (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n)) \
    S(X, cuMemsetD8_v2_ptds, (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n)) \
    S(X, cuMemsetD16_v2, (CUdeviceptr dst, unsigned short v, size_t n), (dst, v, n)) \
    S(X, cuMemsetD16_v2_ptds, (CUdeviceptr dst, unsigned short v, size_t n), (dst, v, n)) \
    S(X, cuMemsetD32_v2, (CUdeviceptr dst, unsigned int v, size_t n), (dst, v, n)) \
    S(X, cuMemsetD32_v2_ptds, (CUdeviceptr dst, unsigned int v, size_t n), (dst, v, n)) \
    S(X, cuMemsetD8Async, (CUdeviceptr dst, unsigned char v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    S(X, cuMemsetD8Async_ptsz, (CUdeviceptr dst, unsigned char v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    S(X, cuMemsetD16Async, (CUdeviceptr dst, unsigned short v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    S(X, cuMemsetD16Async_ptsz, (CUdeviceptr dst, unsigned short v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    S(X, cuMemsetD32Async, (CUdeviceptr dst, unsigned int v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    S(X, cuMemsetD32Async_ptsz, (CUdeviceptr dst, unsigned int v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    S(X, cuMemsetD2D8_v2, (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h), (dst, pitch, v, w, h)) \
    S(X, cuMemsetD2D8_v2_ptds, (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h), (dst, pitch, v, w, h)) \
    S(X, cuMemsetD2D16_v2, (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h), (dst, pitch, v, w, h)) \
    S(X, cuMemsetD2D16_v2_ptds, (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h), (dst, pitch, v, w, h)) \
    S(X, cuMemsetD2D32_v2, (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h), (dst, pitch, v, w, h)) \
    S(X, cuMemsetD2D32_v2_ptds, (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h), (dst, pitch, v, w, h)) \
    S(X, cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *p), (p)) \
    S(X, cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *p), (p)) \
    S(X, cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *p, CUstream hStream), (p, hStream)) \
    S(X, cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER *p, CUstream hStream), (p, hStream)) \
    S(X, cuMemPrefetchAsync, (CUdeviceptr p, size_t n, CUdevice dst, CUstream hStream), (p, n, dst, hStream)) \
    S(X, cuMemPrefetchAsync_ptsz, (CUdeviceptr p, size_t n, CUdevice dst, CUstream hStream), (p, n, dst, hStream)) \
    S(X, cuMemPrefetchAsync_v2, (CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream hStream), (p, n, loc, flags, hStream)) \
    S(X, cuMemPrefetchAsync_v2_ptsz, (CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream hStream), (p, n, loc, flags, hStream)) \
    S(X, cuMemcpyBatchAsync, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream), (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream)) \
    S(X, cuMemcpyBatchAsync_ptsz, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream), (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream)) \
    S(X, cuStreamWaitValue32_v2, (CUstream hStream, CUdeviceptr addr, cuuint32_t v, unsigned int flags), (hStream, addr, v, flags)) \
    S(X, cuStreamWaitValue32_v2_ptsz, (CUstream hStream, CUdeviceptr addr, cuuint32_t v, unsigned int flags), (hStream, addr, v, flags)) \
    S(X, cuStreamWaitValue64_v2, (CUstream hStream, CUdeviceptr addr, cuuint64_t v, unsigned int flags), (hStream, addr, v, flags)) \
    S(X, cuStreamWaitValue64_v2_ptsz, (CUstream hStream, CUdeviceptr addr, cuuint64_t v, unsigned int flags), (hStream, addr, v, flags)) \
    S(X, cuStreamWriteValue32_v2, (CUstream hStream, CUdeviceptr addr, cuuint32_t v, unsigned int flags), (hStream, addr, v, flags)) \
    S(X, cuStreamWriteValue32_v2_ptsz, (CUstream hStream, CUdeviceptr addr, cuuint32_t v, unsigned int flags), (hStream, addr, v, flags)) \
    S(X, cuStreamWriteValue64_v2, (CUstream hStream, CUdeviceptr addr, cuuint64_t v, unsigned int flags), (hStream, addr, v, flags)) \
    S(X, cuStreamWriteValue64_v2_ptsz, (CUstream hStream, CUdeviceptr addr, cuuint64_t v, unsigned int flags), (hStream, addr, v, flags)) \
    S(X, cuStreamBatchMemOp_v2, (CUstream hStream, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags), (hStream, count, ops, flags)) \
    S(X, cuStreamBatchMemOp_v2_ptsz, (CUstream hStream, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags), (hStream, count, ops, flags))
#define SHIM_SUBMIT_SYMBOL(X, name, params, args)                              \
    X(CUDA, 1, CUresult, name, params)

/* The pre-3.2 ABI (32-bit sizes): still exported by libcuda, and handed
 * out by cuGetProcAddress below version 3020. Allocations are refused
 * under a quota; contexts (the same parameters as _v2's) are held as
 * _v2's are. */
#define ACCEL_SHIM_LEGACY(X)                                                   \
    X(CUDA, 1, CUresult, cuMemAlloc, (unsigned int *dptr, unsigned int bytesize)) \
    X(CUDA, 1, CUresult, cuMemAllocPitch,                                      \
      (unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,    \
       unsigned int Height, unsigned int ElementSizeBytes))                    \
    X(CUDA, 1, CUresult, cuArrayCreate, (CUarray * pHandle, const void *desc)) \
    X(CUDA, 1, CUresult, cuArray3DCreate, (CUarray * pHandle, const void *desc)) \
    X(CUDA, 1, CUresult, cuCtxCreate,                                          \
      (CUcontext * pctx, unsigned int flags, CUdevice dev))                    \
    X(CUDA, 1, CUresult, cuCtxDestroy, (CUcontext ctx))                        \
    X(CUDA, 1, CUresult, cuDevicePrimaryCtxRelease, (CUdevice dev))            \
    X(CUDA, 1, CUresult, cuDevicePrimaryCtxReset, (CUdevice dev))

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
    X(CUDA, 1, CUresult, cuMemMap,                                             \
      (CUdeviceptr ptr, size_t size, size_t offset,                            \
       CUmemGenericAllocationHandle handle, unsigned long long flags))         \
    X(CUDA, 1, CUresult, cuMemUnmap, (CUdeviceptr ptr, size_t size))          \
    X(CUDA, 1, CUresult, cuMemPoolTrimTo,                                      \
      (CUmemoryPool pool, size_t minBytesToKeep))                              \
    X(CUDA, 1, CUresult, cuMemPoolDestroy, (CUmemoryPool pool))                \
    X(CUDA, 1, CUresult, cuGraphAddMemAllocNode,                               \
      (CUgraphNode * phGraphNode, CUgraph hGraph,                              \
       const CUgraphNode *dependencies, size_t numDependencies,                \
       CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams))                                \
    X(CUDA, 1, CUresult, cuGraphAddNode,                                       \
      (CUgraphNode * phGraphNode, CUgraph hGraph,                              \
       const CUgraphNode *dependencies, size_t numDependencies,                \
       CUgraphNodeParams *nodeParams))                                         \
    X(CUDA, 1, CUresult, cuGraphAddNode_v2,                                    \
      (CUgraphNode * phGraphNode, CUgraph hGraph,                              \
       const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, \
       size_t numDependencies, CUgraphNodeParams *nodeParams))                 \
    X(CUDA, 1, CUresult, cuStreamSynchronize, (CUstream hStream))              \
    X(CUDA, 1, CUresult, cuStreamSynchronize_ptsz, (CUstream hStream))         \
    X(CUDA, 1, CUresult, cuCtxSynchronize, (void))                             \
    X(CUDA, 1, CUresult, cuEventSynchronize, (CUevent hEvent))                 \
    X(CUDA, 1, CUresult, cuDevicePrimaryCtxRetain,                             \
      (CUcontext * pctx, CUdevice dev))                                        \
    X(CUDA, 1, CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice dev))         \
    X(CUDA, 1, CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice dev))           \
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
    X(CUDA, 1, CUresult, cuCtxSetLimit, (CUlimit limit, size_t value))        \
    X(CUDA, 1, CUresult, cuGreenCtxCreate,                                     \
      (CUgreenCtx * phCtx, CUdevResourceDesc desc, CUdevice dev,              \
       unsigned int flags))                                                    \
    X(CUDA, 1, CUresult, cuGreenCtxDestroy, (CUgreenCtx hCtx))                \
    X(CUDA, 1, CUresult, cuMemExportToShareableHandle,                         \
      (void *shareableHandle, CUmemGenericAllocationHandle handle,             \
       CUmemAllocationHandleType handleType, unsigned long long flags))        \
    X(CUDA, 1, CUresult, cuMemImportFromShareableHandle,                       \
      (CUmemGenericAllocationHandle * handle, void *osHandle,                  \
       CUmemAllocationHandleType shHandleType))                                \
    ACCEL_SHIM_LEGACY(X)                                                       \
    X(CUDA, 1, CUresult, cuMemGetInfo_v2, (size_t * pfree, size_t *ptotal))    \
    X(CUDA, 1, CUresult, cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev))  \
    ACCEL_SHIM_SUBMIT(SHIM_SUBMIT_SYMBOL, X)                                   \
    X(CUDA, 1, CUresult, cuGetProcAddress,                                     \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags))     \
    X(CUDA, 1, CUresult, cuGetProcAddress_v2,                                  \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,      \
       CUdriverProcAddressQueryResult *symbolStatus))                          \
    X(CUDA, 0, CUresult, cuCtxGetDevice, (CUdevice * dev))                     \
    X(CUDA, 0, CUresult, cuCtxGetLimit, (size_t * pvalue, CUlimit limit))      \
    X(CUDA, 0, CUresult, cuDeviceGetAttribute,                                 \
      (int *pi, int attrib, CUdevice dev))                                     \
    X(CUDA, 0, CUresult, cuCtxGetCurrent, (CUcontext * pctx))                  \
    X(CUDA, 0, CUresult, cuCtxPushCurrent_v2, (CUcontext ctx))                 \
    X(CUDA, 0, CUresult, cuCtxPopCurrent_v2, (CUcontext * pctx))               \
    X(CUDA, 0, CUresult, cuDevicePrimaryCtxGetState,                           \
      (CUdevice dev, unsigned int *flags, int *active))                        \
    X(CUDA, 0, CUresult, cuDeviceGetUuid_v2, (unsigned char *uuid, CUdevice dev)) \
    X(CUDA, 0, CUresult, cuDeviceGetMemPool, (CUmemoryPool * pool, CUdevice dev)) \
    X(CUDA, 0, CUresult, cuStreamIsCapturing, (CUstream hStream, int *status)) \
    X(CUDA, 0, CUresult, cuMemPoolGetAttribute,                                \
      (CUmemoryPool pool, int attr, void *value))                              \
    X(NVML, 1, nvmlReturn_t, nvmlDeviceGetMemoryInfo,                          \
      (nvmlDevice_t device, nvmlMemory_t * memory))                            \
    X(NVML, 1, nvmlReturn_t, nvmlDeviceGetMemoryInfo_v2,                       \
      (nvmlDevice_t device, nvmlMemory_v2_t * memory))                         \
    X(NVML, 1, nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses,            \
      (nvmlDevice_t device, unsigned int *count, void *infos))                 \
    X(NVML, 1, nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v2,         \
      (nvmlDevice_t device, unsigned int *count, void *infos))                 \
    X(NVML, 1, nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v3,         \
      (nvmlDevice_t device, unsigned int *count, void *infos))                 \
    X(NVML, 0, nvmlReturn_t, nvmlDeviceGetIndex,                               \
      (nvmlDevice_t device, unsigned int *index))                              \
    X(NVML, 0, nvmlReturn_t, nvmlDeviceGetUUID,                                \
      (nvmlDevice_t device, char *uuid, unsigned int length))                  \
    X(NVML, 0, nvmlReturn_t, nvmlDeviceGetHandleByUUID,                        \
      (const char *uuid, nvmlDevice_t *device))                                \
    X(NVML, 0, nvmlReturn_t, nvmlInit_v2, (void))                              \
    X(HIP, 1, hipError_t, hipMalloc, (void **ptr, size_t size))                \
    X(HIP, 1, hipError_t, hipMallocManaged,                                    \
      (void **ptr, size_t size, unsigned int flags))                           \
    X(HIP, 1, hipError_t, hipExtMallocWithFlags,                               \
      (void **ptr, size_t size, unsigned int flags))                           \
    X(HIP, 1, hipError_t, hipMallocPitch,                                      \
      (void **ptr, size_t *pitch, size_t width, size_t height))                \
    X(HIP, 1, hipError_t, hipMallocAsync,                                      \
      (void **ptr, size_t size, hipStream_t stream))                           \
    X(HIP, 1, hipError_t, hipMallocFromPoolAsync,                              \
      (void **ptr, size_t size, hipMemPool_t pool, hipStream_t stream))        \
    X(HIP, 1, hipError_t, hipMallocArray,                                      \
      (hipArray_t * array, const struct hip_channel_desc *desc, size_t width,  \
       size_t height, unsigned int flags))                                     \
    X(HIP, 1, hipError_t, hipMalloc3DArray,                                    \
      (hipArray_t * array, const struct hip_channel_desc *desc,                \
       struct hip_extent extent, unsigned int flags))                          \
    X(HIP, 1, hipError_t, hipArrayCreate,                                      \
      (hipArray_t * array, const struct hip_array_desc *desc))                 \
    X(HIP, 1, hipError_t, hipFree, (void *ptr))                                \
    X(HIP, 1, hipError_t, hipFreeAsync, (void *ptr, hipStream_t stream))       \
    X(HIP, 1, hipError_t, hipFreeArray, (hipArray_t array))                    \
    X(HIP, 1, hipError_t, hipArrayDestroy, (hipArray_t array))                 \
    X(HIP, 1, hipError_t, hipMalloc3D,                                         \
      (struct hip_pitched_ptr * pitchedDevPtr, struct hip_extent extent))      \
    X(HIP, 1, hipError_t, hipMemAllocPitch,                                    \
      (void **dptr, size_t *pitch, size_t widthInBytes, size_t height,         \
       unsigned int elementSizeBytes))                                         \
    X(HIP, 1, hipError_t, hipArray3DCreate,                                    \
      (hipArray_t * array, const struct hip_array3d_desc *desc))               \
    X(HIP, 1, hipError_t, hipMallocMipmappedArray,                             \
      (hipMipmappedArray_t * mipmappedArray,                                   \
       const struct hip_channel_desc *desc, struct hip_extent extent,          \
       unsigned int numLevels, unsigned int flags))                            \
    X(HIP, 1, hipError_t, hipMipmappedArrayCreate,                             \
      (hipMipmappedArray_t * pHandle, struct hip_array3d_desc * desc,          \
       unsigned int numMipmapLevels))                                          \
    X(HIP, 1, hipError_t, hipFreeMipmappedArray, (hipMipmappedArray_t a))      \
    X(HIP, 1, hipError_t, hipMipmappedArrayDestroy, (hipMipmappedArray_t a))   \
    X(HIP, 1, hipError_t, hipDeviceReset, (void))                              \
    X(HIP, 1, hipError_t, hipDevicePrimaryCtxReset, (hipDevice_t dev))         \
    X(HIP, 1, hipError_t, hipMemExportToShareableHandle,                       \
      (void *shareableHandle, hipMemGenericAllocationHandle_t handle,          \
       hipMemAllocationHandleType handleType, unsigned long long flags))       \
    X(HIP, 1, hipError_t, hipMemImportFromShareableHandle,                     \
      (hipMemGenericAllocationHandle_t * handle, void *osHandle,               \
       hipMemAllocationHandleType shHandleType))                               \
    X(HIP, 1, hipError_t, hipMemCreate,                                        \
      (hipMemGenericAllocationHandle_t * handle, size_t size,                  \
       const hipMemAllocationProp *prop, unsigned long long flags))            \
    X(HIP, 1, hipError_t, hipMemRelease,                                       \
      (hipMemGenericAllocationHandle_t handle))                                \
    X(HIP, 1, hipError_t, hipMemMap,                                           \
      (void *ptr, size_t size, size_t offset,                                  \
       hipMemGenericAllocationHandle_t handle, unsigned long long flags))      \
    X(HIP, 1, hipError_t, hipMemUnmap, (void *ptr, size_t size))               \
    X(HIP, 1, hipError_t, hipStreamSynchronize, (hipStream_t stream))          \
    X(HIP, 1, hipError_t, hipEventSynchronize, (hipEvent_t event))             \
    X(HIP, 1, hipError_t, hipDeviceSynchronize, (void))                        \
    X(HIP, 1, hipError_t, hipMemPoolTrimTo,                                    \
      (hipMemPool_t pool, size_t minBytesToHold))                              \
    X(HIP, 1, hipError_t, hipMemPoolDestroy, (hipMemPool_t pool))              \
    X(HIP, 0, hipError_t, hipDeviceGetMemPool,                                 \
      (hipMemPool_t * pool, int device))                                       \
    X(HIP, 0, hipError_t, hipMemPoolGetAttribute,                              \
      (hipMemPool_t pool, int attr, void *value))                              \
    X(HIP, 1, hipError_t, hipMemGetInfo, (size_t * free, size_t *total))       \
    X(HIP, 1, hipError_t, hipDeviceTotalMem, (size_t * bytes, hipDevice_t dev)) \
    X(HIP, 1, hipError_t, hipGetProcAddress,                                   \
      (const char *symbol, void **pfn, int hipVersion, uint64_t flags,         \
       int *symbolStatus))                                                     \
    X(HIP, 0, hipError_t, hipGetDevice, (int *device))

#endif /* ACCEL_SHIM_SYMBOLS_H */
