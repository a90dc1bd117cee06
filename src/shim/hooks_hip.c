/* SPDX-License-Identifier: MIT */
/*
 * hooks_hip.c: the interposed HIP runtime functions (libamdhip64.so), for a
 * memory slice on AMD GPUs. Same ledger, same rules, same order as the CUDA
 * hooks (hooks.c): reserve on the ledger first (a refusal is
 * hipErrorOutOfMemory and the runtime is not called), call the runtime,
 * then settle (the reservation goes back if the runtime failed, else the
 * pointer or array is recorded). A free takes the record out, calls the
 * runtime, and gives the charge back only if the runtime freed it. The
 * device is the calling thread's (hipGetDevice), its quota the one of that
 * ordinal (ACCEL_CONFIG, or ACCEL_MEMORY_LIMIT standalone).
 *
 * hipMemGetInfo and hipDeviceTotalMem answer the virtual view of quota.c:
 * total = min(limit, physical), free = min(total - usage, physical free).
 *
 * Within the quota but the card is short (the runtime refused): every
 * allocation the quota holds on a device asks acceld to have other apps
 * give memory back and calls again once it answers that the card has room
 * (elastic memory, SPEC 4.4), as the CUDA twins do (HIP_RECLAIM_RETRY).
 *
 * A real symbol the runtime does not have gives hipErrorNotFound.
 */
#include "shim/shim.h"
#include "shim/reclaim.h"

#define HOOK_PROTO_1(ret, name, params) ACCEL_EXPORT ret name params;
#define HOOK_PROTO_0(ret, name, params)
#define HOOK_PROTO(lib, hooked, ret, name, params)                             \
    HOOK_PROTO_##hooked(ret, name, params)
ACCEL_SHIM_SYMBOLS(HOOK_PROTO)

/* The HIP ordinal of the calling thread (0 when it cannot be asked). */
static int hip_ordinal(void)
{
    hipError_t (*fn)(int *) = SHIM_HIP_REAL(hipGetDevice);
    int d = 0;

    if (fn == NULL || fn(&d) != hipSuccess || d < 0)
        return 0;
    return d;
}

static int hip_quota_on(void)
{
    shim_core_init();
    return shim_state.any_limit;
}

static int hip_begin(struct shim_charge *c, uint64_t bytes)
{
    return quota_begin(c, hip_quota_on() ? hip_ordinal() : 0, bytes);
}

#define HIP_REAL_OR_NOT_FOUND(var, name)                                       \
    __typeof__(shim_state.real.name) var = SHIM_HIP_REAL(name);               \
    if (var == NULL)                                                           \
    return hipErrorNotFound

#define HIP_OOM_IF_REFUSED(c, bytes)                                           \
    do {                                                                       \
        if (hip_begin(&(c), (bytes)) != 0)                                     \
            return hipErrorOutOfMemory;                                        \
    } while (0)

/* hooks.c's RECLAIM_RETRY for HIP: while the runtime answers
 * hipErrorOutOfMemory for a charge held on a device's quota, and acceld
 * answers that the card's free memory covers `bytes` now, call again (at
 * most RECLAIM_TRIES times: another process may take what was freed). */
#define HIP_RECLAIM_RETRY(c, rc, bytes, call)                                  \
    for (int r_ = 0; r_ < RECLAIM_TRIES && (rc) == hipErrorOutOfMemory &&     \
                     (c).dev != NULL && reclaim_ask((c).ordinal, (bytes));    \
         r_++)                                                                 \
    (rc) = (call)

/* The pointer an allocation wrote, as a tracking key. */
static uint64_t key_of(void **ptr)
{
    return ptr ? (uint64_t)(uintptr_t)*ptr : 0;
}

/* Settle a release: the charge back on success, the record back else. */
static hipError_t hip_end_release(hipError_t rc, int had, enum shim_kind kind,
                                  uint64_t key, int ordinal, uint64_t bytes)
{
    if (!had)
        return rc;
    if (rc == hipSuccess)
        quota_release(ordinal, bytes);
    else
        track_put(kind, key, ordinal, bytes, 0);
    return rc;
}

#define HIP_RELEASE(kind, key, call)                                           \
    do {                                                                       \
        int ord_ = 0, had_;                                                    \
        uint64_t bytes_ = 0;                                                   \
        shim_core_init();                                                      \
        had_ = track_take(kind, (uint64_t)(uintptr_t)(key), &ord_, &bytes_, NULL); \
        return hip_end_release(call, had_, kind, (uint64_t)(uintptr_t)(key),   \
                               ord_, bytes_);                                  \
    } while (0)

/* hipMalloc and the variants that take (ptr, size, ...): one body each. */
#define HIP_ALLOC(name, params, call)                                          \
    hipError_t name params                                                     \
    {                                                                          \
        struct shim_charge c;                                                  \
        HIP_REAL_OR_NOT_FOUND(fn, name);                                       \
        HIP_OOM_IF_REFUSED(c, size);                                           \
        hipError_t rc = fn call;                                               \
        HIP_RECLAIM_RETRY(c, rc, size, fn call);                               \
        return quota_end(&c, rc, SHIM_KIND_PTR, key_of(ptr));                  \
    }
HIP_ALLOC(hipMalloc, (void **ptr, size_t size), (ptr, size))
HIP_ALLOC(hipMallocManaged, (void **ptr, size_t size, unsigned int flags),
          (ptr, size, flags))
HIP_ALLOC(hipExtMallocWithFlags, (void **ptr, size_t size, unsigned int flags),
          (ptr, size, flags))
/* Stream-ordered: charged by what the pool they draw from holds on the
 * device, as the CUDA hooks (pool.c); by request on a runtime that cannot
 * tell. */
struct hip_async {
    void *fn;                   /* the real entry point */
    void **ptr;
    size_t size;
    hipMemPool_t pool;          /* NULL: the device's current pool */
    hipStream_t stream;
};

static int hip_call_async(void *p)
{
    struct hip_async *a = p;
    if (a->pool == NULL)
        return ((hipError_t(*)(void **, size_t, hipStream_t))(uintptr_t)
                    a->fn)(a->ptr, a->size, a->stream);
    return ((hipError_t(*)(void **, size_t, hipMemPool_t,
                           hipStream_t))(uintptr_t)a->fn)(a->ptr, a->size,
                                                         a->pool, a->stream);
}

static int hip_undo_async(void *p)
{
    struct hip_async *a = p;
    hipError_t (*fr)(void *, hipStream_t) = SHIM_HIP_REAL(hipFreeAsync);
    return fr != NULL && a->ptr != NULL ? fr(*a->ptr, a->stream)
                                        : hipErrorNotFound;
}

static hipError_t hip_async_alloc(struct hip_async *a)
{
    struct shim_charge c;
    hipError_t rc;

    if (hip_quota_on()) {
        int ord = hip_ordinal();
        void *p;
        if (quota_dev(ord) != NULL &&
            (p = pool_measurable(&pool_hip, a->pool, ord)) != NULL)
            return pool_alloc(&pool_hip, p, ord, a->size, hip_call_async, a,
                              hip_undo_async);
    }
    HIP_OOM_IF_REFUSED(c, a->size);
    rc = hip_call_async(a);
    HIP_RECLAIM_RETRY(c, rc, a->size, hip_call_async(a));
    return quota_end(&c, rc, SHIM_KIND_PTR, key_of(a->ptr));
}

hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t stream)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipMallocAsync);
    struct hip_async a = { (void *)(uintptr_t)fn, ptr, size, NULL, stream };
    return hip_async_alloc(&a);
}

hipError_t hipMallocFromPoolAsync(void **ptr, size_t size, hipMemPool_t pool,
                                  hipStream_t stream)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipMallocFromPoolAsync);
    struct hip_async a = { (void *)(uintptr_t)fn, ptr, size, pool, stream };
    if (pool == NULL) /* the runtime's answer to a NULL pool, untouched */
        return fn(ptr, size, pool, stream);
    return hip_async_alloc(&a);
}

/* What releases a pool's memory; the pools are read again after. */
#define HIP_POOL_SHRINK(name, params, args)                                    \
    hipError_t name params                                                     \
    {                                                                          \
        HIP_REAL_OR_NOT_FOUND(fn, name);                                       \
        hipError_t rc = fn args;                                               \
        pool_refresh();                                                        \
        return rc;                                                             \
    }
HIP_POOL_SHRINK(hipDeviceSynchronize, (void), ())
HIP_POOL_SHRINK(hipStreamSynchronize, (hipStream_t stream), (stream))
HIP_POOL_SHRINK(hipEventSynchronize, (hipEvent_t event), (event))
HIP_POOL_SHRINK(hipMemPoolTrimTo, (hipMemPool_t pool, size_t minBytesToHold),
                (pool, minBytesToHold))
HIP_POOL_SHRINK(hipMemPoolDestroy, (hipMemPool_t pool), (pool))

/* Pitch: reserve a 512-byte-aligned estimate, settle on the real pitch
 * (a pitch that passes the limit undoes the allocation). */
hipError_t hipMallocPitch(void **ptr, size_t *pitch, size_t width,
                          size_t height)
{
    struct shim_charge c;
    HIP_REAL_OR_NOT_FOUND(fn, hipMallocPitch);
    HIP_OOM_IF_REFUSED(c, ((width + 511) & ~(size_t)511) * height);
    hipError_t rc = fn(ptr, pitch, width, height);
    HIP_RECLAIM_RETRY(c, rc, c.bytes, fn(ptr, pitch, width, height));
    if (rc == hipSuccess && pitch != NULL &&
        quota_adjust(&c, (uint64_t)*pitch * height) != 0) {
        hipError_t (*fr)(void *) = SHIM_HIP_REAL(hipFree);
        if (fr != NULL && ptr != NULL)
            fr(*ptr);
        rc = hipErrorOutOfMemory;
    }
    return quota_end(&c, rc, SHIM_KIND_PTR, key_of(ptr));
}

/* Bytes of an element of a channel description (bits per channel). */
static uint64_t channel_bytes(const struct hip_channel_desc *d)
{
    int bits = d ? d->x + d->y + d->z + d->w : 0;
    return bits > 0 ? (uint64_t)(bits + 7) / 8 : 4;
}

static uint64_t dim(size_t v)
{
    return v ? v : 1;
}

static hipError_t array_end(struct shim_charge *c, hipError_t rc,
                            hipArray_t *array)
{
    return quota_end(c, rc, SHIM_KIND_ARRAY,
                     array ? (uint64_t)(uintptr_t)*array : 0);
}

hipError_t hipMallocArray(hipArray_t *array,
                          const struct hip_channel_desc *desc, size_t width,
                          size_t height, unsigned int flags)
{
    struct shim_charge c;
    HIP_REAL_OR_NOT_FOUND(fn, hipMallocArray);
    HIP_OOM_IF_REFUSED(c, channel_bytes(desc) * dim(width) * dim(height));
    hipError_t rc = fn(array, desc, width, height, flags);
    HIP_RECLAIM_RETRY(c, rc, c.bytes, fn(array, desc, width, height, flags));
    return array_end(&c, rc, array);
}

hipError_t hipMalloc3DArray(hipArray_t *array,
                            const struct hip_channel_desc *desc,
                            struct hip_extent extent, unsigned int flags)
{
    struct shim_charge c;
    HIP_REAL_OR_NOT_FOUND(fn, hipMalloc3DArray);
    HIP_OOM_IF_REFUSED(c, channel_bytes(desc) * dim(extent.width) *
                              dim(extent.height) * dim(extent.depth));
    hipError_t rc = fn(array, desc, extent, flags);
    HIP_RECLAIM_RETRY(c, rc, c.bytes, fn(array, desc, extent, flags));
    return array_end(&c, rc, array);
}

/* HIP_ARRAY_DESCRIPTOR formats are CUDA's: 8-bit 0x01/0x08, 16-bit
 * 0x02/0x09/0x10, 32-bit 0x03/0x0a/0x20; others counted as 4 bytes. */
static uint64_t format_bytes(int f)
{
    switch (f) {
    case 0x01: case 0x08: return 1;
    case 0x02: case 0x09: case 0x10: return 2;
    default: return 4;
    }
}

hipError_t hipArrayCreate(hipArray_t *array, const struct hip_array_desc *desc)
{
    struct shim_charge c;
    uint64_t bytes = desc ? format_bytes(desc->Format) *
                                dim(desc->NumChannels) * dim(desc->Width) *
                                dim(desc->Height)
                          : 0;
    HIP_REAL_OR_NOT_FOUND(fn, hipArrayCreate);
    HIP_OOM_IF_REFUSED(c, bytes);
    hipError_t rc = fn(array, desc);
    HIP_RECLAIM_RETRY(c, rc, c.bytes, fn(array, desc));
    return array_end(&c, rc, array);
}

hipError_t hipFree(void *ptr)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipFree);
    HIP_RELEASE(SHIM_KIND_PTR, ptr, fn(ptr));
}

hipError_t hipFreeAsync(void *ptr, hipStream_t stream)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipFreeAsync);
    HIP_RELEASE(SHIM_KIND_PTR, ptr, fn(ptr, stream));
}

hipError_t hipFreeArray(hipArray_t array)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipFreeArray);
    HIP_RELEASE(SHIM_KIND_ARRAY, array, fn(array));
}

hipError_t hipArrayDestroy(hipArray_t array)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipArrayDestroy);
    HIP_RELEASE(SHIM_KIND_ARRAY, array, fn(array));
}

/* VMM (vLLM's sleep mode on ROCm, PyTorch-ROCm's expandable segments):
 * as CUDA's cuMemCreate, charged when it lives on a device, until it is
 * released AND its last mapping is unmapped (vmm.c). */
hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
                        const hipMemAllocationProp *prop,
                        unsigned long long flags)
{
    struct shim_charge c;
    int on_dev = prop != NULL &&
                 prop->location.type == hipMemLocationTypeDevice;
    HIP_REAL_OR_NOT_FOUND(fn, hipMemCreate);
    if (quota_begin(&c, hip_quota_on() && on_dev ? prop->location.id : -1,
                    size) != 0)
        return hipErrorOutOfMemory;
    hipError_t rc = fn(handle, size, prop, flags);
    HIP_RECLAIM_RETRY(c, rc, size, fn(handle, size, prop, flags));
    return quota_end(&c, rc, SHIM_KIND_HANDLE,
                     handle ? (uint64_t)(uintptr_t)*handle : 0);
}

hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipMemRelease);
    shim_core_init();
    if (vmm_hold_release((uint64_t)(uintptr_t)handle)) {
        hipError_t rc = fn(handle);
        if (rc != hipSuccess)
            vmm_unhold((uint64_t)(uintptr_t)handle);
        return rc;
    }
    {
        int ord = 0, had;
        uint64_t bytes = 0, key = (uint64_t)(uintptr_t)handle;
        hipError_t rc;
        had = track_take(SHIM_KIND_HANDLE, key, &ord, &bytes, NULL);
        rc = hip_end_release(fn(handle), had, SHIM_KIND_HANDLE, key, ord,
                             bytes);
        if (rc == hipSuccess && had)
            share_gone(key);
        return rc;
    }
}

/* VMM memory shared with other processes: as CUDA's (share.c). */
hipError_t hipMemExportToShareableHandle(void *shareableHandle,
                                         hipMemGenericAllocationHandle_t handle,
                                         hipMemAllocationHandleType handleType,
                                         unsigned long long flags)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipMemExportToShareableHandle);
    hipError_t rc = fn(shareableHandle, handle, handleType, flags);
    if (rc == hipSuccess && hip_quota_on())
        share_export((uint64_t)(uintptr_t)handle, handleType,
                     shareableHandle);
    return rc;
}

hipError_t hipMemImportFromShareableHandle(
    hipMemGenericAllocationHandle_t *handle, void *osHandle,
    hipMemAllocationHandleType shHandleType)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipMemImportFromShareableHandle);
    hipError_t rc = fn(handle, osHandle, shHandleType);
    if (rc == hipSuccess && handle != NULL && hip_quota_on())
        share_import((uint64_t)(uintptr_t)*handle, shHandleType, osHandle,
                     hip_ordinal());
    return rc;
}

hipError_t hipMemMap(void *ptr, size_t size, size_t offset,
                     hipMemGenericAllocationHandle_t handle,
                     unsigned long long flags)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipMemMap);
    hipError_t rc = fn(ptr, size, offset, handle, flags);
    if (rc == hipSuccess)
        vmm_mapped((uint64_t)(uintptr_t)ptr, size,
                   (uint64_t)(uintptr_t)handle);
    return rc;
}

hipError_t hipMemUnmap(void *ptr, size_t size)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipMemUnmap);
    hipError_t rc = fn(ptr, size);
    if (rc == hipSuccess)
        vmm_unmapped((uint64_t)(uintptr_t)ptr, size);
    return rc;
}

/* Pitched allocations of the driver-style and 3D APIs: as hipMallocPitch,
 * an estimate reserved, settled on the runtime's pitch. */
static hipError_t pitch_settle(struct shim_charge *c, hipError_t rc,
                               void *ptr, size_t pitch, uint64_t rows)
{
    if (rc == hipSuccess && quota_adjust(c, (uint64_t)pitch * rows) != 0) {
        hipError_t (*fr)(void *) = SHIM_HIP_REAL(hipFree);
        if (fr != NULL)
            fr(ptr);
        rc = hipErrorOutOfMemory;
    }
    return quota_end(c, rc, SHIM_KIND_PTR, (uint64_t)(uintptr_t)ptr);
}

hipError_t hipMemAllocPitch(void **dptr, size_t *pitch, size_t widthInBytes,
                            size_t height, unsigned int elementSizeBytes)
{
    struct shim_charge c;
    HIP_REAL_OR_NOT_FOUND(fn, hipMemAllocPitch);
    HIP_OOM_IF_REFUSED(c, ((widthInBytes + 511) & ~(size_t)511) * height);
    hipError_t rc = fn(dptr, pitch, widthInBytes, height, elementSizeBytes);
    HIP_RECLAIM_RETRY(c, rc, c.bytes,
                      fn(dptr, pitch, widthInBytes, height, elementSizeBytes));
    return pitch_settle(&c, rc, rc == hipSuccess && dptr ? *dptr : NULL,
                        pitch && rc == hipSuccess ? *pitch : 0, height);
}

hipError_t hipMalloc3D(struct hip_pitched_ptr *p, struct hip_extent e)
{
    struct shim_charge c;
    uint64_t rows = dim(e.height) * dim(e.depth);
    HIP_REAL_OR_NOT_FOUND(fn, hipMalloc3D);
    HIP_OOM_IF_REFUSED(c, ((e.width + 511) & ~(size_t)511) * rows);
    hipError_t rc = fn(p, e);
    HIP_RECLAIM_RETRY(c, rc, c.bytes, fn(p, e));
    return pitch_settle(&c, rc, rc == hipSuccess && p ? p->ptr : NULL,
                        rc == hipSuccess && p ? p->pitch : 0, rows);
}

hipError_t hipArray3DCreate(hipArray_t *array,
                            const struct hip_array3d_desc *desc)
{
    struct shim_charge c;
    HIP_REAL_OR_NOT_FOUND(fn, hipArray3DCreate);
    if (desc == NULL)
        return fn(array, desc);
    HIP_OOM_IF_REFUSED(c, hooks_mipmap_bytes(desc->Width, desc->Height,
                                             desc->Depth, 1,
                                             format_bytes(desc->Format) *
                                                 dim(desc->NumChannels),
                                             1));
    hipError_t rc = fn(array, desc);
    HIP_RECLAIM_RETRY(c, rc, c.bytes, fn(array, desc));
    return array_end(&c, rc, array);
}

static hipError_t mipmap_end(struct shim_charge *c, hipError_t rc,
                             hipMipmappedArray_t *a)
{
    return quota_end(c, rc, SHIM_KIND_MIPMAP,
                     a ? (uint64_t)(uintptr_t)*a : 0);
}

hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *a,
                                   const struct hip_channel_desc *desc,
                                   struct hip_extent e, unsigned int levels,
                                   unsigned int flags)
{
    struct shim_charge c;
    HIP_REAL_OR_NOT_FOUND(fn, hipMallocMipmappedArray);
    HIP_OOM_IF_REFUSED(c, hooks_mipmap_bytes(e.width, e.height, e.depth,
                                             (flags & 0x01) != 0,
                                             channel_bytes(desc), levels));
    hipError_t rc = fn(a, desc, e, levels, flags);
    HIP_RECLAIM_RETRY(c, rc, c.bytes, fn(a, desc, e, levels, flags));
    return mipmap_end(&c, rc, a);
}

hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *a,
                                   struct hip_array3d_desc *desc,
                                   unsigned int levels)
{
    struct shim_charge c;
    HIP_REAL_OR_NOT_FOUND(fn, hipMipmappedArrayCreate);
    if (desc == NULL)
        return fn(a, desc, levels);
    HIP_OOM_IF_REFUSED(c, hooks_mipmap_bytes(desc->Width, desc->Height,
                                             desc->Depth,
                                             (desc->Flags & 0x01) != 0,
                                             format_bytes(desc->Format) *
                                                 dim(desc->NumChannels),
                                             levels));
    hipError_t rc = fn(a, desc, levels);
    HIP_RECLAIM_RETRY(c, rc, c.bytes, fn(a, desc, levels));
    return mipmap_end(&c, rc, a);
}

hipError_t hipFreeMipmappedArray(hipMipmappedArray_t a)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipFreeMipmappedArray);
    HIP_RELEASE(SHIM_KIND_MIPMAP, a, fn(a));
}

hipError_t hipMipmappedArrayDestroy(hipMipmappedArray_t a)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipMipmappedArrayDestroy);
    HIP_RELEASE(SHIM_KIND_MIPMAP, a, fn(a));
}

/* A device reset frees everything the process allocated on the device
 * (HIP keeps no contexts apart): every record of it is given back. */
hipError_t hipDeviceReset(void)
{
    int ord = hip_quota_on() ? hip_ordinal() : -1;
    HIP_REAL_OR_NOT_FOUND(fn, hipDeviceReset);
    hipError_t rc = fn();
    if (rc == hipSuccess && ord >= 0) {
        track_drop_dev(ord);
        pool_refresh();
    }
    return rc;
}

hipError_t hipDevicePrimaryCtxReset(hipDevice_t dev)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipDevicePrimaryCtxReset);
    hipError_t rc = fn(dev);
    if (rc == hipSuccess && hip_quota_on()) {
        track_drop_dev(dev);
        pool_refresh();
    }
    return rc;
}

hipError_t hipMemGetInfo(size_t *pfree, size_t *ptotal)
{
    size_t f = 0, t = 0;
    HIP_REAL_OR_NOT_FOUND(fn, hipMemGetInfo);
    hipError_t rc = fn(&f, &t);
    if (rc != hipSuccess)
        return rc;
    quota_meminfo(hip_quota_on(), hip_ordinal, f, t, pfree, ptotal);
    return rc;
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t dev)
{
    HIP_REAL_OR_NOT_FOUND(fn, hipDeviceTotalMem);
    hipError_t rc = fn(bytes, dev);
    if (rc != hipSuccess || bytes == NULL || !hip_quota_on())
        return rc;
    *bytes = quota_total(dev, *bytes);
    return rc;
}
