/* SPDX-License-Identifier: MIT */
/*
 * cuda_types.h: the shim's own declarations of the CUDA driver and NVML types
 * it touches, so libaccelshim.so builds without any CUDA headers installed.
 * Only the types and constants the interposed functions need are here; layouts
 * and values follow the public driver ABI (stable since CUDA 11, unchanged in
 * 12 and 13). Opaque handles stay opaque. Nothing here is exported.
 */
#ifndef ACCEL_SHIM_CUDA_TYPES_H
#define ACCEL_SHIM_CUDA_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;                 /* enum cudaError_enum */
typedef int CUdevice;                 /* device ordinal */
typedef unsigned long long CUdeviceptr; /* device address (64-bit ABI) */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUfunc_st *CUfunction;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef int CUdriverProcAddressQueryResult;
typedef struct CUexecAffinityParam_st CUexecAffinityParam; /* opaque here */
typedef struct CUctxCreateParams_st CUctxCreateParams;     /* opaque here */
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUlaunchConfig_st CUlaunchConfig;           /* opaque here */
typedef struct CUDA_MEMCPY2D_st CUDA_MEMCPY2D;             /* opaque here */
typedef struct CUDA_MEMCPY3D_st CUDA_MEMCPY3D;             /* opaque here */
typedef struct CUDA_MEMCPY3D_PEER_st CUDA_MEMCPY3D_PEER;   /* opaque here */
typedef struct CUmemcpyAttributes_st CUmemcpyAttributes;   /* opaque here */
typedef union CUstreamBatchMemOpParams_union CUstreamBatchMemOpParams;
typedef unsigned int cuuint32_t;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_st CUDA_MEM_ALLOC_NODE_PARAMS;
typedef struct CUgraphEdgeData_st CUgraphEdgeData;         /* opaque here */
/* CUgraphNodeParams: only its first member, the node type, is read. */
typedef struct {
    int type;                 /* CUgraphNodeType */
} CUgraphNodeParams;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef struct CUdevResourceDesc_st *CUdevResourceDesc;
typedef int CUlimit;                  /* enum CUlimit_enum */
#define CU_LIMIT_STACK_SIZE 0x00      /* bytes of stack per GPU thread */
#define CU_LIMIT_PRINTF_FIFO_SIZE 0x01 /* bytes of the printf FIFO */
#define CU_LIMIT_MALLOC_HEAP_SIZE 0x02 /* bytes of the device malloc heap */
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR 39
typedef int CUmemAllocationHandleType; /* CU_MEM_HANDLE_TYPE_* */
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define CU_MEM_HANDLE_TYPE_FABRIC 0x8
#define CU_GRAPH_NODE_TYPE_MEM_ALLOC 10
#define CU_MEM_ATTACH_GLOBAL 0x1

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_PERMITTED 800
#define CUDA_ERROR_NOT_SUPPORTED 801

#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_GET_PROC_ADDRESS_SUCCESS 0

typedef struct {
    int type; /* CUmemLocationType */
    int id;   /* device ordinal when type is DEVICE */
} CUmemLocation;

typedef struct {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;   /* where the memory lives */
    void *win32HandleMetaData; /* unused on Linux */
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    size_t Width;             /* elements */
    size_t Height;            /* rows, 0 for 1D */
    int Format;               /* CUarray_format */
    unsigned int NumChannels; /* 1, 2 or 4 */
} CUDA_ARRAY_DESCRIPTOR;

typedef struct {
    size_t Width;             /* elements */
    size_t Height;            /* rows, 0 for 1D */
    size_t Depth;             /* slices or layers, 0 for 1D/2D */
    int Format;               /* CUarray_format */
    unsigned int NumChannels; /* 1, 2 or 4 */
    unsigned int Flags;       /* CUDA_ARRAY3D_* */
} CUDA_ARRAY3D_DESCRIPTOR;

/* NVML */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_FUNCTION_NOT_FOUND 13

typedef struct {
    unsigned long long total; /* bytes */
    unsigned long long free;  /* bytes */
    unsigned long long used;  /* bytes */
} nvmlMemory_t;

typedef struct {
    unsigned int version;        /* nvmlMemory_v2 */
    unsigned long long total;    /* bytes */
    unsigned long long reserved; /* bytes reserved by the driver */
    unsigned long long free;     /* bytes */
    unsigned long long used;     /* bytes */
} nvmlMemory_v2_t;

#endif /* ACCEL_SHIM_CUDA_TYPES_H */
