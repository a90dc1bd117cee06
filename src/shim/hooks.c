/* SPDX-License-Identifier: MIT */
/*
 * hooks.c: the interposed driver and NVML functions.
 *
 * Every allocation path of SPEC 4.2 follows one pattern: reserve on the
 * ledger (quota_begin; refusal = CUDA_ERROR_OUT_OF_MEMORY, the driver is not
 * called), call the driver, then settle (quota_end: give the reservation back
 * if the driver failed, else record the pointer/handle). Every release takes
 * the record out first, calls the driver, and gives the charge back only if
 * the driver succeeded (a failed free puts the record back). A free of an
 * unknown pointer goes to the driver untouched.
 *
 * A real symbol the driver does not have gives CUDA_ERROR_NOT_FOUND (NVML:
 * NVML_ERROR_FUNCTION_NOT_FOUND); nothing calls through NULL.
 */
#include "shim/shim.h"
#include "shim/reclaim.h"

#include <string.h>

#define HOOK_PROTO_1(ret, name, params) ACCEL_EXPORT ret name params;
#define HOOK_PROTO_0(ret, name, params)
#define HOOK_PROTO(lib, hooked, ret, name, params)                             \
    HOOK_PROTO_##hooked(ret, name, params)
ACCEL_SHIM_SYMBOLS(HOOK_PROTO)

/* The CUDA ordinal of the calling thread's context (0 if it has none). */
static int current_ordinal(void)
{
    CUresult (*fn)(CUdevice *) = SHIM_CUDA_REAL(cuCtxGetDevice);
    CUdevice d = 0;

    if (fn == NULL || fn(&d) != CUDA_SUCCESS)
        return 0;
    return d;
}

static int quota_on(void)
{
    shim_core_init();
    return shim_state.any_limit;
}

/* Reserve for an allocation on the current device, in the current context
 * (the driver frees it with that context). */
static int begin_current(struct shim_charge *c, uint64_t bytes)
{
    int rc = quota_begin(c, quota_on() ? current_ordinal() : 0, bytes);

    if (rc == 0 && c->dev != NULL)
        c->ctx = ctx_current();
    return rc;
}

/* The same for memory the driver can evict at a turn switch. */
static int begin_evictable(struct shim_charge *c, uint64_t bytes)
{
    int rc = quota_begin_evictable(c, quota_on() ? current_ordinal() : 0,
                                   bytes);

    if (rc == 0 && c->dev != NULL)
        c->ctx = ctx_current();
    return rc;
}

/* Settle a release: give the charge back, or restore the record. */
static CUresult end_release(CUresult rc, int had, enum shim_kind kind,
                            uint64_t key, int ordinal, uint64_t bytes,
                            uint64_t ctx)
{
    if (!had)
        return rc;
    if (rc == CUDA_SUCCESS)
        quota_release(ordinal, bytes);
    else
        track_put(kind, key, ordinal, bytes, ctx);
    return rc;
}

#define OOM_IF_REFUSED(c, bytes)                                               \
    do {                                                                       \
        if (begin_current(&(c), (bytes)) != 0)                                 \
            return CUDA_ERROR_OUT_OF_MEMORY;                                   \
    } while (0)

/* Within the quota but the card is short (the driver refused): ask acceld
 * to have other apps give memory back, and call again once it answers that
 * the card has room (elastic memory, SPEC 4.4). Every allocation the quota
 * holds on a device goes through it, whatever its entry point. */
#define RECLAIM_RETRY(c, rc, bytes, call)                                      \
    for (int r_ = 0; r_ < RECLAIM_TRIES &&                                     \
                     (rc) == CUDA_ERROR_OUT_OF_MEMORY && (c).dev != NULL &&   \
                     reclaim_ask((c).ordinal, (bytes));                       \
         r_++)                                                                 \
    (rc) = (call)

#define REAL_OR_NOT_FOUND(var, name)                                           \
    __typeof__(shim_state.real.name) var = SHIM_CUDA_REAL(name);              \
    if (var == NULL)                                                           \
    return CUDA_ERROR_NOT_FOUND

/* On a time-sliced device the allocation is managed memory, so that its
 * pages can leave the GPU while another app holds the turn (SPEC 4.3). */
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct shim_charge c;
    CUresult rc;
    int managed;
    REAL_OR_NOT_FOUND(fn, cuMemAlloc_v2);
    managed = shim_state.ts.ndev > 0 && timeslice_managed(current_ordinal()) &&
              SHIM_CUDA_REAL(cuMemAllocManaged) != NULL;
    if (!managed)
        OOM_IF_REFUSED(c, bytesize);
    else if (begin_evictable(&c, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (managed)
        rc = shim_state.real.cuMemAllocManaged(dptr, bytesize,
                                               CU_MEM_ATTACH_GLOBAL);
    else
        rc = fn(dptr, bytesize);
    if (!managed) /* managed memory pages out; it is not refused so */
        RECLAIM_RETRY(c, rc, bytesize, fn(dptr, bytesize));
    return quota_end(&c, rc, SHIM_KIND_PTR, dptr ? *dptr : 0);
}

/* Managed memory can leave the GPU at a turn switch: not charged on a
 * time-sliced card's ledger. */
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                           unsigned int flags)
{
    struct shim_charge c;
    REAL_OR_NOT_FOUND(fn, cuMemAllocManaged);
    if (begin_evictable(&c, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fn(dptr, bytesize, flags);
    return quota_end(&c, rc, SHIM_KIND_PTR, dptr ? *dptr : 0);
}

/* Pitch: reserve a 512-byte-aligned estimate, then settle on the pitch the
 * driver really chose (more may be refused: the allocation is undone). */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
                            size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    struct shim_charge c;
    REAL_OR_NOT_FOUND(fn, cuMemAllocPitch_v2);
    OOM_IF_REFUSED(c, ((WidthInBytes + 511) & ~(size_t)511) * Height);
    CUresult rc = fn(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    RECLAIM_RETRY(c, rc, c.bytes,
                  fn(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    if (rc == CUDA_SUCCESS && pPitch != NULL &&
        quota_adjust(&c, (uint64_t)*pPitch * Height) != 0) {
        CUresult (*fr)(CUdeviceptr) = SHIM_CUDA_REAL(cuMemFree_v2);
        if (fr != NULL)
            fr(*dptr);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return quota_end(&c, rc, SHIM_KIND_PTR, dptr ? *dptr : 0);
}

/* Stream-ordered allocations: charged by what the pool they draw from
 * holds on the device (pool.c); by request on a driver that cannot tell. */
struct async_args {
    void *fn;                   /* the real entry point */
    CUdeviceptr *dptr;
    size_t bytes;
    CUmemoryPool pool;          /* NULL: the device's current pool */
    CUstream stream;
};

static CUresult call_async(void *p)
{
    struct async_args *a = p;
    return ((CUresult(*)(CUdeviceptr *, size_t, CUstream))(uintptr_t)a->fn)(
        a->dptr, a->bytes, a->stream);
}

static CUresult call_from_pool(void *p)
{
    struct async_args *a = p;
    return ((CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool,
                         CUstream))(uintptr_t)a->fn)(a->dptr, a->bytes,
                                                     a->pool, a->stream);
}

static CUresult undo_async(void *p)
{
    struct async_args *a = p;
    CUresult (*fr)(CUdeviceptr, CUstream) = SHIM_CUDA_REAL(cuMemFreeAsync);
    return fr != NULL ? fr(*a->dptr, a->stream) : CUDA_ERROR_NOT_FOUND;
}

/* CUDA graph memory (memory nodes, and stream-ordered allocations made
 * while a stream is being captured, which become such nodes) is refused
 * under a quota: the driver takes it from a per-device graph pool at
 * instantiation, upload or launch, where no refusal can be given. */
static CUresult graph_mem_refused(const char *how)
{
    shim_log("CUDA graph memory (%s) refused: graph memory nodes are not "
             "held to the quota, so they are not allowed under one", how);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static int capturing(CUstream s)
{
    CUresult (*fn)(CUstream, int *) = SHIM_CUDA_REAL(cuStreamIsCapturing);
    int status = 0;

    return fn != NULL && fn(s, &status) == CUDA_SUCCESS && status != 0;
}

static CUresult async_alloc(struct async_args *a, int from_pool)
{
    CUresult (*call)(void *) = from_pool ? call_from_pool : call_async;
    struct shim_charge c;
    CUresult rc;

    if (quota_on()) {
        int ord = current_ordinal();
        void *p;
        if (quota_dev(ord) != NULL) { /* a quota on this device */
            if (capturing(a->stream))
                return graph_mem_refused(
                    "an allocation during stream capture");
            if ((p = pool_measurable(&pool_cuda, a->pool, ord)) != NULL)
                return pool_alloc(&pool_cuda, p, ord, a->bytes, call, a,
                                  undo_async);
        }
    }
    OOM_IF_REFUSED(c, a->bytes);
    rc = call(a);
    RECLAIM_RETRY(c, rc, a->bytes, call(a));
    return quota_end(&c, rc, SHIM_KIND_PTR, a->dptr ? *a->dptr : 0);
}

#define ASYNC_ALLOC(name, params, pool_arg, from_pool)                         \
    CUresult name params                                                       \
    {                                                                          \
        REAL_OR_NOT_FOUND(fn, name);                                           \
        struct async_args a = { (void *)(uintptr_t)fn, dptr, bytesize,         \
                                pool_arg, hStream };                           \
        return async_alloc(&a, from_pool);                                     \
    }
ASYNC_ALLOC(cuMemAllocAsync,
            (CUdeviceptr * dptr, size_t bytesize, CUstream hStream), NULL, 0)
ASYNC_ALLOC(cuMemAllocAsync_ptsz,
            (CUdeviceptr * dptr, size_t bytesize, CUstream hStream), NULL, 0)
ASYNC_ALLOC(cuMemAllocFromPoolAsync,
            (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool,
             CUstream hStream), pool, 1)
ASYNC_ALLOC(cuMemAllocFromPoolAsync_ptsz,
            (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool,
             CUstream hStream), pool, 1)

CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *dependencies,
                                size_t numDependencies,
                                CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    REAL_OR_NOT_FOUND(fn, cuGraphAddMemAllocNode);
    if (quota_on() && quota_dev(current_ordinal()) != NULL)
        return graph_mem_refused("cuGraphAddMemAllocNode");
    return fn(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

static int mem_alloc_node(const CUgraphNodeParams *p)
{
    return p != NULL && p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && quota_on() &&
           quota_dev(current_ordinal()) != NULL;
}

CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                        const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    REAL_OR_NOT_FOUND(fn, cuGraphAddNode);
    if (mem_alloc_node(nodeParams))
        return graph_mem_refused("cuGraphAddNode");
    return fn(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                           const CUgraphNode *dependencies,
                           const CUgraphEdgeData *dependencyData,
                           size_t numDependencies,
                           CUgraphNodeParams *nodeParams)
{
    REAL_OR_NOT_FOUND(fn, cuGraphAddNode_v2);
    if (mem_alloc_node(nodeParams))
        return graph_mem_refused("cuGraphAddNode_v2");
    return fn(phGraphNode, hGraph, dependencies, dependencyData,
              numDependencies, nodeParams);
}

/* What releases a pool's memory: a synchronize (above the release
 * threshold), a trim, the pool's end. The pools are read again after. */
#define POOL_SHRINK(name, params, args)                                        \
    CUresult name params                                                       \
    {                                                                          \
        REAL_OR_NOT_FOUND(fn, name);                                           \
        CUresult rc = fn args;                                                 \
        pool_refresh();                                                        \
        return rc;                                                             \
    }
/* A synchronize also releases pools; while it waits for the device the
 * app is busy, not idle, for time slicing (issue 49). */
#define SYNC_HOOK(name, params, args)                                          \
    CUresult name params                                                       \
    {                                                                          \
        REAL_OR_NOT_FOUND(fn, name);                                           \
        int ts_ = timeslice_sync_begin();                                      \
        CUresult rc = fn args;                                                 \
        timeslice_sync_end(ts_);                                               \
        pool_refresh();                                                        \
        return rc;                                                             \
    }
SYNC_HOOK(cuCtxSynchronize, (void), ())
SYNC_HOOK(cuStreamSynchronize, (CUstream hStream), (hStream))
SYNC_HOOK(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
/* an event's wait is a synchronize too (cudaEventSynchronize, serving
 * loops that wait on a step's event): a thread in it waits for the device */
SYNC_HOOK(cuEventSynchronize, (CUevent hEvent), (hEvent))
POOL_SHRINK(cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep),
            (pool, minBytesToKeep))
POOL_SHRINK(cuMemPoolDestroy, (CUmemoryPool pool), (pool))

/* Release of a tracked key of `kind` through the real `fn` call. */
#define RELEASE(kind, key, call)                                               \
    do {                                                                       \
        int ord_ = 0, had_;                                                    \
        uint64_t bytes_ = 0, ctx_ = 0;                                         \
        shim_core_init();                                                      \
        had_ = track_take(kind, (uint64_t)(key), &ord_, &bytes_, &ctx_);       \
        return end_release(call, had_, kind, (uint64_t)(key), ord_, bytes_,    \
                           ctx_);                                              \
    } while (0)

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    REAL_OR_NOT_FOUND(fn, cuMemFree_v2);
    RELEASE(SHIM_KIND_PTR, dptr, fn(dptr));
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    REAL_OR_NOT_FOUND(fn, cuMemFreeAsync);
    RELEASE(SHIM_KIND_PTR, dptr, fn(dptr, hStream));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    REAL_OR_NOT_FOUND(fn, cuMemFreeAsync_ptsz);
    RELEASE(SHIM_KIND_PTR, dptr, fn(dptr, hStream));
}

/* Physical allocations count when they live on a device; host-located ones
 * (NCCL uses them) do not take VRAM. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    struct shim_charge c;
    int on_dev = prop != NULL &&
                 prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    REAL_OR_NOT_FOUND(fn, cuMemCreate);
    if (quota_begin(&c, quota_on() && on_dev ? prop->location.id : -1,
                    size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fn(handle, size, prop, flags);
    RECLAIM_RETRY(c, rc, size, fn(handle, size, prop, flags));
    return quota_end(&c, rc, SHIM_KIND_HANDLE, handle ? *handle : 0);
}

/* A handle released while mapped stays charged until its last mapping is
 * unmapped: the driver keeps its memory until then (vmm.c). */
CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    REAL_OR_NOT_FOUND(fn, cuMemRelease);
    shim_core_init();
    if (vmm_hold_release(handle)) {
        CUresult rc = fn(handle);
        if (rc != CUDA_SUCCESS)
            vmm_unhold(handle);
        return rc;
    }
    {
        int ord = 0, had;
        uint64_t bytes = 0;
        CUresult rc;
        had = track_take(SHIM_KIND_HANDLE, handle, &ord, &bytes, NULL);
        rc = end_release(fn(handle), had, SHIM_KIND_HANDLE, handle, ord, bytes,
                         0);
        if (rc == CUDA_SUCCESS && had)
            share_gone(handle);
        return rc;
    }
}

/* VMM memory shared with other processes (share.c): the charge follows
 * the memory until the last process holding it lets it go. */
CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                      CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags)
{
    REAL_OR_NOT_FOUND(fn, cuMemExportToShareableHandle);
    CUresult rc = fn(shareableHandle, handle, handleType, flags);
    if (rc == CUDA_SUCCESS && quota_on())
        share_export(handle, handleType, shareableHandle);
    return rc;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                        void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
    REAL_OR_NOT_FOUND(fn, cuMemImportFromShareableHandle);
    CUresult rc = fn(handle, osHandle, shHandleType);
    if (rc == CUDA_SUCCESS && handle != NULL && quota_on())
        share_import(*handle, shHandleType, osHandle, current_ordinal());
    return rc;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                  CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    REAL_OR_NOT_FOUND(fn, cuMemMap);
    CUresult rc = fn(ptr, size, offset, handle, flags);
    if (rc == CUDA_SUCCESS)
        vmm_mapped(ptr, size, handle);
    return rc;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    REAL_OR_NOT_FOUND(fn, cuMemUnmap);
    CUresult rc = fn(ptr, size);
    if (rc == CUDA_SUCCESS)
        vmm_unmapped(ptr, size);
    return rc;
}

/* Bytes per element of a CUarray_format (unknown formats: 4). */
static uint64_t format_bytes(int format)
{
    switch (format) {
    case 0x01: case 0x08: case 0xc0: case 0xc6: return 1;
    case 0x02: case 0x09: case 0x10: case 0xc1: case 0xc3: case 0xc7:
    case 0xc9: return 2;
    case 0xc5: case 0xcb: return 8;
    default: return 4;
    }
}

static uint64_t dim(size_t v)
{
    return v == 0 ? 1 : (uint64_t)v;
}

/* Estimated VRAM of an array of elements of `elem` bytes, rounded up to
 * the 2 MiB granularity tiled arrays are placed at. */
static uint64_t extent_bytes(size_t w, size_t h, size_t d, uint64_t elem)
{
    uint64_t b = dim(w) * dim(h) * dim(d) * elem;
    return (b + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
}

/* The same for elements of a CUarray_format and channels. */
static uint64_t array_bytes(size_t w, size_t h, size_t d, int format,
                            unsigned channels)
{
    return extent_bytes(w, h, d, format_bytes(format) * (channels ? channels : 1));
}

uint64_t hooks_mipmap_bytes(size_t w, size_t h, size_t z, int layered,
                            uint64_t elem, unsigned n)
{
    uint64_t total = 0;

    for (unsigned i = 0; i < (n ? n : 1) && i < 32; i++) {
        total += extent_bytes(w, h, z, elem);
        w = w > 1 ? w / 2 : w;
        h = h > 1 ? h / 2 : h;
        z = layered || z <= 1 ? z : z / 2;
    }
    return total;
}

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    struct shim_charge c;
    REAL_OR_NOT_FOUND(fn, cuArrayCreate_v2);
    if (desc == NULL)
        return fn(pHandle, desc);
    OOM_IF_REFUSED(c, array_bytes(desc->Width, desc->Height, 0, desc->Format,
                                  desc->NumChannels));
    CUresult rc = fn(pHandle, desc);
    RECLAIM_RETRY(c, rc, c.bytes, fn(pHandle, desc));
    return quota_end(&c, rc, SHIM_KIND_ARRAY,
                     pHandle ? (uint64_t)(uintptr_t)*pHandle : 0);
}

CUresult cuArray3DCreate_v2(CUarray *pHandle,
                            const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    struct shim_charge c;
    REAL_OR_NOT_FOUND(fn, cuArray3DCreate_v2);
    if (desc == NULL)
        return fn(pHandle, desc);
    OOM_IF_REFUSED(c, array_bytes(desc->Width, desc->Height, desc->Depth,
                                  desc->Format, desc->NumChannels));
    CUresult rc = fn(pHandle, desc);
    RECLAIM_RETRY(c, rc, c.bytes, fn(pHandle, desc));
    return quota_end(&c, rc, SHIM_KIND_ARRAY,
                     pHandle ? (uint64_t)(uintptr_t)*pHandle : 0);
}

CUresult cuArrayDestroy(CUarray hArray)
{
    REAL_OR_NOT_FOUND(fn, cuArrayDestroy);
    RELEASE(SHIM_KIND_ARRAY, (uintptr_t)hArray, fn(hArray));
}

/* A mipmap chain: each level halves every dimension, down to 1. */
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned n)
{
    return hooks_mipmap_bytes(d->Width, d->Height, d->Depth,
                              (d->Flags & 0x01) != 0, /* LAYERED */
                              format_bytes(d->Format) *
                                  (d->NumChannels ? d->NumChannels : 1),
                              n);
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                unsigned int numLevels)
{
    struct shim_charge c;
    REAL_OR_NOT_FOUND(fn, cuMipmappedArrayCreate);
    if (desc == NULL)
        return fn(pHandle, desc, numLevels);
    OOM_IF_REFUSED(c, mipmap_bytes(desc, numLevels));
    CUresult rc = fn(pHandle, desc, numLevels);
    RECLAIM_RETRY(c, rc, c.bytes, fn(pHandle, desc, numLevels));
    return quota_end(&c, rc, SHIM_KIND_MIPMAP,
                     pHandle ? (uint64_t)(uintptr_t)*pHandle : 0);
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    REAL_OR_NOT_FOUND(fn, cuMipmappedArrayDestroy);
    RELEASE(SHIM_KIND_MIPMAP, (uintptr_t)h, fn(h));
}

/* Contexts: charged at what they really took of the device (ctx.c). The
 * last measured size is reserved first (a context that cannot fit is
 * refused before the driver makes it); one that turns out larger than the
 * quota allows is destroyed again and refused. */
static CUresult destroy_ctx(void *h)
{
    CUresult (*d)(CUcontext) = SHIM_CUDA_REAL(cuCtxDestroy_v2);
    return d != NULL ? d((CUcontext)h) : CUDA_ERROR_NOT_FOUND;
}

static CUresult destroy_green(void *h)
{
    CUresult (*d)(CUgreenCtx) = SHIM_CUDA_REAL(cuGreenCtxDestroy);
    return d != NULL ? d((CUgreenCtx)h) : CUDA_ERROR_NOT_FOUND;
}

/* h: the new context's handle (NULL when rc failed); destroy undoes it. */
static CUresult ctx_settle(struct shim_charge *c, CUresult rc, void *h,
                           CUresult (*destroy)(void *), CUdevice dev,
                           struct ctx_mark before)
{
    uint64_t cost;

    if (rc != CUDA_SUCCESS || h == NULL)
        return quota_end(c, rc, SHIM_KIND_CTX, 0);
    cost = ctx_cost(dev, before);
    if (quota_adjust(c, cost) != 0) {
        destroy(h);
        shim_log("dev %d: a context (%llu bytes) does not fit the quota: "
                 "refused", dev, (unsigned long long)cost);
        return quota_end(c, CUDA_ERROR_OUT_OF_MEMORY, SHIM_KIND_CTX, 0);
    }
    return quota_end(c, rc, SHIM_KIND_CTX, (uint64_t)(uintptr_t)h);
}

#define CTX_CREATE(name, params, call)                                         \
    CUresult name params                                                       \
    {                                                                          \
        struct shim_charge c_;                                                 \
        REAL_OR_NOT_FOUND(fn, name);                                           \
        int on_ = quota_on() && quota_dev(dev) != NULL;                        \
        struct ctx_mark before_ = {-1, -1};                                    \
        if (on_)                                                               \
            before_ = ctx_before(dev);                                         \
        if (on_ && quota_begin(&c_, dev, ctx_estimate(dev)) != 0)              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                   \
        CUresult rc = fn call;                                                 \
        return on_ ? ctx_settle(&c_, rc, pctx && rc == 0 ? (void *)*pctx : NULL, \
                                destroy_ctx, dev, before_)                     \
                   : rc;                                                       \
    }
CTX_CREATE(cuCtxCreate_v2, (CUcontext * pctx, unsigned int flags, CUdevice dev),
           (pctx, flags, dev))
/* The pre-3.2 name, with the same parameters: ctypes scripts still call
 * it by name; held as _v2 is. */
CTX_CREATE(cuCtxCreate, (CUcontext * pctx, unsigned int flags, CUdevice dev),
           (pctx, flags, dev))
CTX_CREATE(cuCtxCreate_v3,
           (CUcontext * pctx, CUexecAffinityParam *params, int numParams,
            unsigned int flags, CUdevice dev),
           (pctx, params, numParams, flags, dev))
CTX_CREATE(cuCtxCreate_v4,
           (CUcontext * pctx, CUctxCreateParams *params, unsigned int flags,
            CUdevice dev),
           (pctx, params, flags, dev))

/* The runtime's primary context: charged once, when a retain made it. */
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    REAL_OR_NOT_FOUND(fn, cuDevicePrimaryCtxRetain);
    return ctx_primary_retain(fn, pctx, dev, quota_on());
}

/* Green contexts (CUDA 12.4+): measured and charged as contexts are. */
CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc,
                          CUdevice dev, unsigned int flags)
{
    struct shim_charge c;
    REAL_OR_NOT_FOUND(fn, cuGreenCtxCreate);
    int on = quota_on() && quota_dev(dev) != NULL;
    struct ctx_mark before = {-1, -1};
    if (on)
        before = ctx_before(dev);
    if (on && quota_begin(&c, dev, ctx_estimate(dev)) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fn(phCtx, desc, dev, flags);
    return on ? ctx_settle(&c, rc, phCtx && rc == 0 ? (void *)*phCtx : NULL,
                           destroy_green, dev, before)
              : rc;
}

CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    REAL_OR_NOT_FOUND(fn, cuGreenCtxDestroy);
    RELEASE(SHIM_KIND_CTX, (uintptr_t)hCtx, fn(hCtx));
}

/* A limit that reserves device memory for the context (ctx.c). */
CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    REAL_OR_NOT_FOUND(fn, cuCtxSetLimit);
    if (!quota_on() || limit > CU_LIMIT_MALLOC_HEAP_SIZE || limit < 0)
        return fn(limit, value);
    return ctx_set_limit(fn, limit, value);
}

#define PRIMARY_DROP(name, reset)                                              \
    CUresult name(CUdevice dev)                                                \
    {                                                                          \
        REAL_OR_NOT_FOUND(fn, name);                                           \
        return ctx_primary_drop(fn(dev), dev, reset);                          \
    }
PRIMARY_DROP(cuDevicePrimaryCtxRelease_v2, 0)
PRIMARY_DROP(cuDevicePrimaryCtxReset_v2, 1)
PRIMARY_DROP(cuDevicePrimaryCtxRelease, 0)
PRIMARY_DROP(cuDevicePrimaryCtxReset, 1)

/* A context's end frees what was made in it (allocations, limits). */
static CUresult ctx_destroyed(CUresult (*fn)(CUcontext), CUcontext ctx)
{
    int ord = 0, had;
    uint64_t bytes = 0, owner = 0;
    CUresult rc;

    shim_core_init();
    had = track_take(SHIM_KIND_CTX, (uintptr_t)ctx, &ord, &bytes, &owner);
    rc = end_release(fn(ctx), had, SHIM_KIND_CTX, (uintptr_t)ctx, ord, bytes,
                     owner);
    if (rc == CUDA_SUCCESS)
        track_drop_ctx((uintptr_t)ctx);
    return rc;
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    REAL_OR_NOT_FOUND(fn, cuCtxDestroy_v2);
    return ctx_destroyed(fn, ctx);
}

CUresult cuCtxDestroy(CUcontext ctx)
{
    REAL_OR_NOT_FOUND(fn, cuCtxDestroy);
    return ctx_destroyed(fn, ctx);
}

/* The pre-3.2 ABI: refused under a quota (symbols.h, ACCEL_SHIM_LEGACY). */
static CUresult legacy_refused(const char *name, int ordinal)
{
    if (!quota_on() || quota_dev(ordinal) == NULL)
        return CUDA_SUCCESS;
    shim_log("%s (the pre-3.2 ABI) refused under a quota", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define LEGACY_ALLOC(name, params, ordinal, args)                              \
    CUresult name params                                                       \
    {                                                                          \
        REAL_OR_NOT_FOUND(fn, name);                                           \
        CUresult refused_ = legacy_refused(#name, ordinal);                    \
        return refused_ != CUDA_SUCCESS ? refused_ : fn args;                  \
    }
LEGACY_ALLOC(cuMemAlloc, (unsigned int *dptr, unsigned int bytesize),
             current_ordinal(), (dptr, bytesize))
LEGACY_ALLOC(cuMemAllocPitch,
             (unsigned int *dptr, unsigned int *pPitch, unsigned int w,
              unsigned int h, unsigned int e),
             current_ordinal(), (dptr, pPitch, w, h, e))
LEGACY_ALLOC(cuArrayCreate, (CUarray * pHandle, const void *desc),
             current_ordinal(), (pHandle, desc))
LEGACY_ALLOC(cuArray3DCreate, (CUarray * pHandle, const void *desc),
             current_ordinal(), (pHandle, desc))

CUresult cuMemGetInfo_v2(size_t *pfree, size_t *ptotal)
{
    size_t f = 0, t = 0;
    REAL_OR_NOT_FOUND(fn, cuMemGetInfo_v2);
    CUresult rc = fn(&f, &t);
    if (rc != CUDA_SUCCESS)
        return rc;
    quota_meminfo(quota_on(), current_ordinal, f, t, pfree, ptotal);
    return rc;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    REAL_OR_NOT_FOUND(fn, cuDeviceTotalMem_v2);
    CUresult rc = fn(bytes, dev);
    if (rc != CUDA_SUCCESS || bytes == NULL || !quota_on())
        return rc;
    *bytes = quota_total(dev, *bytes);
    return rc;
}

/* Submissions: hold the app's turn on a time-sliced device first (one
 * atomic load when time slicing is off; see timeslice.h). */
#define SUBMIT_HOOK(X, name, params, args)                                     \
    CUresult name params                                                       \
    {                                                                          \
        REAL_OR_NOT_FOUND(fn, name);                                           \
        int denied_ = 0;                                                       \
        struct shim_ts_thread *t_ = ts_enter(&denied_);                        \
        if (__builtin_expect(denied_, 0))                                      \
            return CUDA_ERROR_NOT_PERMITTED; /* refused: logged once */        \
        CUresult rc_ = fn args;                                                \
        ts_leave(t_);                                                          \
        return rc_;                                                            \
    }
ACCEL_SHIM_SUBMIT(SUBMIT_HOOK, _)

/* NVML: the same view, of the CUDA ordinal the card is to the app
 * (devmap.c: by UUID; a card the app does not see shows no quota). */
static int nvml_ordinal(nvmlDevice_t device)
{
    nvmlReturn_t (*uuid_fn)(nvmlDevice_t, char *, unsigned) =
        SHIM_NVML_REAL(nvmlDeviceGetUUID);
    nvmlReturn_t (*idx_fn)(nvmlDevice_t, unsigned *) =
        SHIM_NVML_REAL(nvmlDeviceGetIndex);
    char uuid[96];
    unsigned idx = 0;
    int have_uuid = uuid_fn != NULL &&
                    uuid_fn(device, uuid, sizeof(uuid)) == NVML_SUCCESS;
    int have_idx = idx_fn != NULL && idx_fn(device, &idx) == NVML_SUCCESS;

    return devmap_ordinal(have_uuid ? uuid : NULL, idx, have_idx);
}

/* What NVML answered for device (total, free, used: either struct's),
 * replaced by the quota's view of it. Not an allocation path. */
static void nvml_quota_view(nvmlDevice_t device, unsigned long long *total,
                            unsigned long long *free_, unsigned long long *used)
{
    uint64_t t, f, u;
    quota_view(nvml_ordinal(device), *total, *free_, &t, &f, &u);
    *total = t;
    *free_ = f;
    *used = u;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t (*fn)(nvmlDevice_t, nvmlMemory_t *) =
        SHIM_NVML_REAL(nvmlDeviceGetMemoryInfo);
    if (fn == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = fn(device, memory);
    if (rc != NVML_SUCCESS || memory == NULL || !quota_on())
        return rc;
    nvml_quota_view(device, &memory->total, &memory->free, &memory->used);
    return rc;
}

/*
 * NVML's process list, as the app is shown the card (docs/shim.md, "The
 * views agree"): under a quota only the app's own processes (its ledger's
 * live slots), each with the driver's figure, their sum capped at the
 * header's used (nvmlDeviceGetMemoryInfo under the quota), so no process
 * holds more than the header says was used. `stride`: the entry's size
 * (nvmlProcessInfo_v1_t 16 bytes, _v2_t and nvmlProcessInfo_t 24); the pid
 * and usedGpuMemory lead every version.
 */
static nvmlReturn_t nvml_procs(nvmlDevice_t device, unsigned *count,
                               void *infos, size_t stride, nvmlReturn_t rc)
{
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *) =
        SHIM_NVML_REAL(nvmlDeviceGetMemoryInfo);
    nvmlMemory_t m = {0};
    struct shim_dev *d;
    uint64_t t, f, room;
    unsigned n = 0;
    int ord;

    if (rc != NVML_SUCCESS || count == NULL || infos == NULL || !quota_on())
        return rc;
    ord = nvml_ordinal(device);
    d = ord >= 0 ? quota_dev(ord) : NULL;
    /* a card the app has no quota on (or only a time-sliced card's
     * ledger, no quota of its own): as the driver says */
    if (d == NULL || d->limit == UINT64_MAX || mem == NULL ||
        mem(device, &m) != NVML_SUCCESS)
        return rc;
    quota_view(ord, m.total, m.free, &t, &f, &room);
    for (unsigned i = 0; i < *count; i++) {
        unsigned char *e = (unsigned char *)infos + i * stride;
        unsigned pid;
        unsigned long long used;
        memcpy(&pid, e, sizeof pid);
        memcpy(&used, e + 8, sizeof used);
        if (!quota_member(ord, (pid_t)pid))
            continue;
        if (used != ~0ULL) { /* NVML_VALUE_NOT_AVAILABLE stays */
            used = used < room ? used : room;
            room -= used;
            memcpy(e + 8, &used, sizeof used);
        }
        if (n != i)
            memmove((unsigned char *)infos + n * stride, e, stride);
        n++;
    }
    *count = n;
    return rc;
}

#define NVML_PROCS_HOOK(name, stride)                                          \
    nvmlReturn_t name(nvmlDevice_t device, unsigned *count, void *infos)       \
    {                                                                          \
        nvmlReturn_t (*fn)(nvmlDevice_t, unsigned *, void *) =                 \
            SHIM_NVML_REAL(name);                                              \
        if (fn == NULL)                                                        \
            return NVML_ERROR_FUNCTION_NOT_FOUND;                              \
        return nvml_procs(device, count, infos, stride,                        \
                          fn(device, count, infos));                           \
    }
NVML_PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses, 16)
NVML_PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses_v2, 24)
NVML_PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses_v3, 24)

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                        nvmlMemory_v2_t *memory)
{
    nvmlReturn_t (*fn)(nvmlDevice_t, nvmlMemory_v2_t *) =
        SHIM_NVML_REAL(nvmlDeviceGetMemoryInfo_v2);
    if (fn == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = fn(device, memory);
    unsigned long long driver_total;
    if (rc != NVML_SUCCESS || memory == NULL || !quota_on())
        return rc;
    driver_total = memory->total;
    nvml_quota_view(device, &memory->total, &memory->free, &memory->used);
    if (memory->total != driver_total) /* limited: the driver's reserve */
        memory->reserved = 0;          /* is ours */
    return rc;
}
