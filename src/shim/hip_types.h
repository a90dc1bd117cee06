/* SPDX-License-Identifier: MIT */
/*
 * hip_types.h: the slice of the HIP runtime ABI (hip_runtime_api.h, ROCm 6)
 * that the shim interposes, declared here so that nothing of ROCm is needed
 * to build. Only what the hooks read or pass through: error codes, opaque
 * handles, and the array descriptors whose sizes are charged.
 */
#ifndef ACCEL_SHIM_HIP_TYPES_H
#define ACCEL_SHIM_HIP_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef int hipError_t;                /* enum hipError_t */
typedef int hipDevice_t;               /* device ordinal */
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipMemPoolHandle_t *hipMemPool_t;
typedef struct hipArray *hipArray_t;
typedef struct ihipMemGenericAllocationHandle *hipMemGenericAllocationHandle_t;

#define hipSuccess 0
#define hipErrorInvalidValue 1
#define hipErrorOutOfMemory 2          /* the refusal, as CUDA's 2 */
#define hipErrorNotFound 500           /* a real symbol the runtime lacks */

/* hipChannelFormatDesc: bits per channel, then the kind (enum). */
struct hip_channel_desc {
    int x, y, z, w;
    int f;
};

/* hipExtent, passed by value to hipMalloc3DArray. */
struct hip_extent {
    size_t width, height, depth;
};

/* HIP_ARRAY_DESCRIPTOR (hipArrayCreate), laid out as CUDA's. */
struct hip_array_desc {
    size_t Width;
    size_t Height;
    int Format;                        /* hipArray_Format, CUDA's values */
    unsigned int NumChannels;
};

/* hipMemAllocationProp: laid out as CUDA's CUmemAllocationProp. */
/* hipPitchedPtr: what hipMalloc3D fills in. */
struct hip_pitched_ptr {
    void *ptr;
    size_t pitch;                  /* bytes per row */
    size_t xsize, ysize;
};
/* HIP_ARRAY3D_DESCRIPTOR: CUDA's CUDA_ARRAY3D_DESCRIPTOR, field by field. */
struct hip_array3d_desc {
    size_t Width, Height, Depth;
    int Format;                    /* hipArray_Format, CUDA's values */
    unsigned int NumChannels;
    unsigned int Flags;
};
typedef struct hipMipmappedArray *hipMipmappedArray_t;
typedef int hipMemAllocationHandleType; /* 1: a POSIX file descriptor */
#define hipMemLocationTypeDevice 1
typedef struct {
    int type;                 /* hipMemAllocationType */
    int requestedHandleType;  /* hipMemAllocationHandleType */
    struct {
        int type;             /* hipMemLocationType */
        int id;               /* device ordinal when type is Device */
    } location;
    void *win32HandleMetaData; /* unused on Linux */
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
    } allocFlags;
} hipMemAllocationProp;

#endif /* ACCEL_SHIM_HIP_TYPES_H */
