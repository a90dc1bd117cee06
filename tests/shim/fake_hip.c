/* SPDX-License-Identifier: MIT */
/*
 * fake_hip.c: a stand-in libamdhip64.so.6 for the shim's HIP tests: the
 * HIP runtime entry points the shim interposes, over the same simulated
 * device memory and shared record as the fake libcuda (fake_alloc.h:
 * FAKE_CUDA_TOTAL, FAKE_CUDA_SHM, FAKE_CUDA_FAIL). Built twice: the full
 * library, and with FAKE_MINIMAL one that lacks hipMallocManaged and
 * hipGetProcAddress (an older runtime: the shim must answer
 * hipErrorNotFound, never call through NULL). It is not a model of ROCm.
 */
#define _GNU_SOURCE 1
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_alloc.h"
#include "shim/hip_types.h"

const uint64_t fake_base = 0x500000000000ULL;

static hipError_t give(uint64_t key)
{
    return fake_give(key) == 0 ? hipSuccess : hipErrorInvalidValue;
}

/* What a device reset frees: the plain allocations made on the device,
 * by this process (fake_give_owned). */
static uint64_t device_owner(void)
{
    return 0x4849500000ULL + (uint64_t)fake_device() + 1;
}

static hipError_t into(void **p, uint64_t bytes)
{
    uint64_t k = fake_take_in(bytes, device_owner());
    if (k == 0)
        return hipErrorOutOfMemory;
    *p = (void *)(uintptr_t)k;
    return hipSuccess;
}

EXPORT hipError_t hipGetDevice(int *d)
{
    const char *e = getenv("FAKE_CUDA_DEVICE");
    *d = e ? (int)strtol(e, NULL, 10) : 0;
    return hipSuccess;
}
EXPORT hipError_t hipMalloc(void **p, size_t b) { return into(p, b); }
#ifndef FAKE_MINIMAL
EXPORT hipError_t hipMallocManaged(void **p, size_t b, unsigned f)
{
    (void)f;
    return into(p, b);
}
#endif
EXPORT hipError_t hipExtMallocWithFlags(void **p, size_t b, unsigned f)
{
    (void)f;
    return into(p, b);
}
EXPORT hipError_t hipMallocPitch(void **p, size_t *pitch, size_t w, size_t h)
{
    *pitch = (w + 1023) & ~(size_t)1023; /* coarser than the shim's estimate */
    return into(p, *pitch * h);
}
/* Stream-ordered pools, with the driver's lifetime (fake_alloc.h). */
static hipError_t pool_into(void **p, hipMemPool_t pool, uint64_t b)
{
    uint64_t k = fake_pool_alloc((uintptr_t)pool, b);
    if (k == 0)
        return hipErrorOutOfMemory;
    *p = (void *)(uintptr_t)k;
    return hipSuccess;
}
static hipError_t pool_rc(int rc)
{
    return rc == 0 ? hipSuccess : hipErrorInvalidValue;
}
EXPORT hipError_t hipMallocAsync(void **p, size_t b, hipStream_t s)
{
    (void)s;
    return pool_into(p, NULL, b);
}
EXPORT hipError_t hipMallocFromPoolAsync(void **p, size_t b, hipMemPool_t pool,
                                         hipStream_t s)
{
    (void)s;
    if (pool == NULL)
        return hipErrorInvalidValue;
    return pool_into(p, pool, b);
}
EXPORT hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *pool, int d)
{
    *pool = (hipMemPool_t)fake_pool_default(d);
    return *pool ? hipSuccess : hipErrorInvalidValue;
}
EXPORT hipError_t hipDeviceGetMemPool(hipMemPool_t *pool, int d)
{
    *pool = (hipMemPool_t)fake_pool_current(d);
    return *pool ? hipSuccess : hipErrorInvalidValue;
}
EXPORT hipError_t hipMemPoolSetAttribute(hipMemPool_t pool, int attr, void *v)
{
    return pool_rc(fake_pool_set((uintptr_t)pool, attr, *(uint64_t *)v));
}
EXPORT hipError_t hipMemPoolGetAttribute(hipMemPool_t pool, int attr, void *v)
{
    return pool_rc(fake_pool_get((uintptr_t)pool, attr, (uint64_t *)v));
}
EXPORT hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t keep)
{
    return pool_rc(fake_pool_trim((uintptr_t)pool, keep));
}
EXPORT hipError_t hipMemPoolDestroy(hipMemPool_t pool)
{
    return pool_rc(fake_pool_destroy((uintptr_t)pool));
}
EXPORT hipError_t hipStreamSynchronize(hipStream_t s)
{
    (void)s;
    fake_pools_sync();
    return hipSuccess;
}
EXPORT hipError_t hipDeviceSynchronize(void)
{
    fake_pools_sync();
    return hipSuccess;
}
EXPORT hipError_t hipMallocArray(hipArray_t *a,
                                 const struct hip_channel_desc *d, size_t w,
                                 size_t h, unsigned f)
{
    (void)f;
    return into((void **)a, (uint64_t)(d->x + d->y + d->z + d->w) / 8 * w *
                                (h ? h : 1));
}
EXPORT hipError_t hipMalloc3DArray(hipArray_t *a,
                                   const struct hip_channel_desc *d,
                                   struct hip_extent e, unsigned f)
{
    (void)f;
    return into((void **)a, (uint64_t)(d->x + d->y + d->z + d->w) / 8 *
                                e.width * (e.height ? e.height : 1) *
                                (e.depth ? e.depth : 1));
}
EXPORT hipError_t hipArrayCreate(hipArray_t *a, const struct hip_array_desc *d)
{
    return into((void **)a, (uint64_t)d->Width * (d->Height ? d->Height : 1) *
                                4 * (d->NumChannels ? d->NumChannels : 1));
}
EXPORT hipError_t hipMemAllocPitch(void **p, size_t *pitch, size_t w,
                                   size_t h, unsigned e)
{
    (void)e;
    return hipMallocPitch(p, pitch, w, h);
}
EXPORT hipError_t hipMalloc3D(struct hip_pitched_ptr *p, struct hip_extent e)
{
    p->pitch = (e.width + 1023) & ~(size_t)1023;
    p->xsize = e.width;
    p->ysize = e.height;
    return into(&p->ptr, (uint64_t)p->pitch * (e.height ? e.height : 1) *
                             (e.depth ? e.depth : 1));
}
EXPORT hipError_t hipArray3DCreate(hipArray_t *a,
                                   const struct hip_array3d_desc *d)
{
    return into((void **)a, (uint64_t)d->Width * (d->Height ? d->Height : 1) *
                                (d->Depth ? d->Depth : 1) * 4 *
                                (d->NumChannels ? d->NumChannels : 1));
}
/* A mipmap chain: what its first level takes, twice over at most. */
EXPORT hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *a,
                                          const struct hip_channel_desc *d,
                                          struct hip_extent e, unsigned n,
                                          unsigned f)
{
    (void)f;
    return into((void **)a, (uint64_t)(d->x + d->y + d->z + d->w) / 8 *
                                e.width * (e.height ? e.height : 1) *
                                (e.depth ? e.depth : 1) * (n > 1 ? 4 : 3) /
                                3);
}
EXPORT hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *a,
                                          struct hip_array3d_desc *d,
                                          unsigned n)
{
    return into((void **)a, (uint64_t)d->Width * (d->Height ? d->Height : 1) *
                                4 * (d->NumChannels ? d->NumChannels : 1) *
                                (n > 1 ? 4 : 3) / 3);
}
EXPORT hipError_t hipFreeMipmappedArray(hipMipmappedArray_t a)
{
    return give((uintptr_t)a);
}
EXPORT hipError_t hipMipmappedArrayDestroy(hipMipmappedArray_t a)
{
    return give((uintptr_t)a);
}
/* A device reset frees what the process allocated on the device. */
EXPORT hipError_t hipDeviceReset(void)
{
    fake_give_owned(device_owner());
    return hipSuccess;
}
EXPORT hipError_t hipDevicePrimaryCtxReset(hipDevice_t d)
{
    (void)d;
    return hipDeviceReset();
}
/* VMM sharing by file descriptor, as the CUDA stand-in's. */
EXPORT hipError_t hipMemExportToShareableHandle(void *out,
                                                hipMemGenericAllocationHandle_t h,
                                                int type, unsigned long long f)
{
    int fd;
    (void)f;
    if (type != 1 || out == NULL)
        return hipErrorInvalidValue;
    fd = fake_vmm_export_fd((uint64_t)(uintptr_t)h);
    if (fd < 0)
        return hipErrorInvalidValue;
    *(int *)out = fd;
    return hipSuccess;
}
EXPORT hipError_t hipMemImportFromShareableHandle(
    hipMemGenericAllocationHandle_t *h, void *os, int type)
{
    uint64_t k = type == 1 && h != NULL
                     ? fake_vmm_import_fd((int)(intptr_t)os) : 0;
    if (k == 0)
        return hipErrorInvalidValue;
    *h = (hipMemGenericAllocationHandle_t)(uintptr_t)k;
    return hipSuccess;
}
EXPORT hipError_t hipFree(void *p) { return give((uintptr_t)p); }
EXPORT hipError_t hipFreeAsync(void *p, hipStream_t s)
{
    (void)s;
    return give((uintptr_t)p);
}
EXPORT hipError_t hipFreeArray(hipArray_t a) { return give((uintptr_t)a); }
EXPORT hipError_t hipArrayDestroy(hipArray_t a) { return give((uintptr_t)a); }
/* VMM, with the driver's lifetime: a handle's memory lives until it is
 * released and unmapped (fake_alloc.h). */
EXPORT hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *h, size_t b,
                               const hipMemAllocationProp *prop,
                               unsigned long long f)
{
    uint64_t k = fake_vmm_create(
        b, prop == NULL || prop->location.type == hipMemLocationTypeDevice);
    (void)f;
    if (k == 0)
        return hipErrorOutOfMemory;
    *h = (hipMemGenericAllocationHandle_t)(uintptr_t)k;
    return hipSuccess;
}
EXPORT hipError_t hipMemRelease(hipMemGenericAllocationHandle_t h)
{
    return give((uintptr_t)h);
}
EXPORT hipError_t hipMemAddressReserve(void **p, size_t size, size_t align,
                                       void *addr, unsigned long long f)
{
    (void)align, (void)addr, (void)f;
    *p = (void *)(uintptr_t)fake_va_reserve(size);
    return hipSuccess;
}
EXPORT hipError_t hipMemMap(void *p, size_t size, size_t off,
                            hipMemGenericAllocationHandle_t h,
                            unsigned long long f)
{
    (void)off, (void)f;
    return fake_vmm_map((uintptr_t)p, size, (uintptr_t)h) == 0
               ? hipSuccess
               : hipErrorInvalidValue;
}
EXPORT hipError_t hipMemUnmap(void *p, size_t size)
{
    return fake_vmm_unmap((uintptr_t)p, size) == 0 ? hipSuccess
                                                   : hipErrorInvalidValue;
}
EXPORT hipError_t hipMemGetInfo(size_t *f, size_t *t)
{
    fake_mem_info(f, t);
    return hipSuccess;
}
EXPORT hipError_t hipDeviceTotalMem(size_t *b, hipDevice_t d)
{
    (void)d;
    fake_mem_info(NULL, b);
    return hipSuccess;
}
#ifndef FAKE_MINIMAL
/* The runtime's own lookup: its own entry points by name. */
EXPORT hipError_t hipGetProcAddress(const char *sym, void **pfn, int ver,
                                    uint64_t flags, int *status)
{
    static const struct {
        const char *name;
        void *fn;
    } t[] = {
        { "hipMalloc", (void *)(uintptr_t)hipMalloc },
        { "hipMallocAsync", (void *)(uintptr_t)hipMallocAsync },
        { "hipFree", (void *)(uintptr_t)hipFree },
        { "hipMemGetInfo", (void *)(uintptr_t)hipMemGetInfo },
        { "hipGetProcAddress", (void *)(uintptr_t)hipGetProcAddress },
    };
    (void)ver;
    (void)flags;
    for (size_t i = 0; i < sizeof(t) / sizeof(*t); i++) {
        if (strcmp(sym, t[i].name) == 0) {
            *pfn = t[i].fn;
            if (status)
                *status = 0;
            return hipSuccess;
        }
    }
    *pfn = NULL;
    if (status)
        *status = 1;
    return hipErrorNotFound;
}
#endif
/* The record, for the tests (as fake_cuda_stats). */
EXPORT struct fake_cuda_stats *fake_hip_stats(void)
{
    return fake_record();
}
