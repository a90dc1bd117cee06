/* SPDX-License-Identifier: MIT */
/*
 * fake_cuda.c: a stand-in libcuda.so.1 for the shim tests, over simulated
 * device memory (fake_alloc.h: FAKE_CUDA_TOTAL bytes, unique pointers, the
 * record of calls of fake_cuda.h, FAKE_CUDA_FAIL=1 to make every
 * allocation fail in the driver, contexts of FAKE_CUDA_CTX_BYTES that know
 * their device), refusing what the real driver refuses (below). Built
 * twice: the full library and,
 * with FAKE_MINIMAL, one lacking cuMemAllocManaged and cuMemCreate
 * (missing-symbol tests).
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake_alloc.h"
#include "shim/cuda_types.h"

const uint64_t fake_base = 0x700000000000ULL;
static uint64_t owner(void);

static CUresult give(uint64_t key)
{
    return fake_give(key) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

#define ALLOC_INTO(out, bytes)                                                 \
    do {                                                                       \
        uint64_t k_ = fake_take_in(bytes, owner());                            \
        if (k_ == 0)                                                           \
            return CUDA_ERROR_OUT_OF_MEMORY;                                   \
        *(out) = k_;                                                           \
        return CUDA_SUCCESS;                                                   \
    } while (0)

/* What the real driver refuses, the stand-in refuses (cuda.h's documented
 * returns): every call but cuInit, cuDriverGetVersion and cuGetProcAddress
 * before cuInit (CUDA_ERROR_NOT_INITIALIZED), and the calls bound to the
 * calling thread's context without a current one
 * (CUDA_ERROR_INVALID_CONTEXT): allocations and their frees (not VMM's
 * cuMemCreate, which names its device), arrays, copies, memsets,
 * launches, events, synchronizes, module and linker loads, cuMemGetInfo,
 * the limits, cuCtxGetDevice, a pop of an empty stack. A context is
 * current after cuCtxCreate (which pushes it), cuCtxSetCurrent or
 * cuCtxPushCurrent; a primary retain does not make it current. */
static _Atomic int inited;
static _Thread_local CUcontext current;

#define NEED_INIT()                                                            \
    do {                                                                       \
        if (!atomic_load(&inited))                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                 \
    } while (0)
#define NEED_CTX()                                                             \
    do {                                                                       \
        NEED_INIT();                                                           \
        if (current == NULL)                                                   \
            return CUDA_ERROR_INVALID_CONTEXT;                                 \
    } while (0)

EXPORT CUresult cuInit(unsigned int flags)
{
    (void)flags;
    fake_record();
    atomic_store(&inited, 1);
    return 0;
}
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
/* The device of each live context (the real driver's context knows its
 * device; cuCtxGetDevice answers for the current one). */
#define FAKE_CTXS 256
static struct {
    pthread_mutex_t mu;
    struct { CUcontext ctx; CUdevice dev; } c[FAKE_CTXS];
} ctxs = { .mu = PTHREAD_MUTEX_INITIALIZER };
static void ctx_dev_set(CUcontext c, CUdevice d)
{
    pthread_mutex_lock(&ctxs.mu);
    for (int i = 0; i < FAKE_CTXS; i++)
        if (ctxs.c[i].ctx == NULL || ctxs.c[i].ctx == c) {
            ctxs.c[i].ctx = c;
            ctxs.c[i].dev = d;
            break;
        }
    pthread_mutex_unlock(&ctxs.mu);
}
static void ctx_dev_drop(CUcontext c)
{
    pthread_mutex_lock(&ctxs.mu);
    for (int i = 0; i < FAKE_CTXS; i++)
        if (ctxs.c[i].ctx == c)
            ctxs.c[i].ctx = NULL;
    pthread_mutex_unlock(&ctxs.mu);
}
/* The device of the calling thread's current context, kept beside it
 * (read without a lock: a process forked while another thread held the
 * table's lock still asks). */
static _Thread_local CUdevice current_dev;
static void set_current(CUcontext c)
{
    CUdevice dev = 0;
    pthread_mutex_lock(&ctxs.mu);
    for (int i = 0; c != NULL && i < FAKE_CTXS; i++)
        if (ctxs.c[i].ctx == c)
            dev = ctxs.c[i].dev;
    pthread_mutex_unlock(&ctxs.mu);
    current = c;
    current_dev = dev;
}
/* cuda.h: CUDA_ERROR_INVALID_CONTEXT without a current context. */
EXPORT CUresult cuCtxGetDevice(CUdevice *d)
{
    NEED_CTX();
    *d = current_dev;
    return 0;
}
/* The owner context of an allocation: the current one (0 none). */
static uint64_t owner(void)
{
    return (uint64_t)(uintptr_t)current;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t b)
{
    NEED_CTX();
    ALLOC_INTO(p, b);
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w,
                                   size_t h, unsigned int e)
{
    NEED_CTX();
    (void)e;
    *pitch = (w + 1023) & ~(size_t)1023; /* a coarser pitch than the estimate */
    ALLOC_INTO(p, *pitch * h);
}
#ifndef FAKE_MINIMAL
/* Managed memory: with FAKE_CUDA_OVERSUB=1 it may pass the card (a real
 * driver pages it in and out; the timeline charges the moves). */
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t b, unsigned int f)
{
    uint64_t k;
    NEED_CTX();
    (void)f;
    fake_charge_oversub = getenv("FAKE_CUDA_OVERSUB") != NULL;
    k = fake_take_in(b, owner());
    fake_charge_oversub = 0;
    if (k == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = k;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t b,
                            const CUmemAllocationProp *prop,
                            unsigned long long f)
{
    uint64_t k;
    NEED_INIT();
    k = fake_vmm_create(
        b, prop == NULL || prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE);
    (void)f;
    if (k == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *h = k;
    return CUDA_SUCCESS;
}
/* Sharing by file descriptor (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR):
 * the descriptor is a memfd holding the shared entry's index; another
 * process gets it by fork or over a socket, as with the real driver. */
EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                             int type, unsigned long long f)
{
    int fd;
    NEED_INIT();
    (void)f;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || out == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    fd = fake_vmm_export_fd(h);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h,
                                               void *os, int type)
{
    uint64_t k;
    NEED_INIT();
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || h == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    k = fake_vmm_import_fd((int)(intptr_t)os);
    if (k == 0)
        return CUDA_ERROR_INVALID_VALUE;
    *h = k;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off,
                         CUmemGenericAllocationHandle h, unsigned long long f)
{
    NEED_INIT();
    (void)off;
    (void)f;
    return fake_vmm_map(p, size, h) == 0 ? CUDA_SUCCESS
                                         : CUDA_ERROR_INVALID_VALUE;
}
#endif
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align,
                                    CUdeviceptr addr, unsigned long long f)
{
    NEED_INIT();
    (void)align, (void)addr, (void)f;
    *p = fake_va_reserve(size);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
    NEED_INIT();
    (void)p, (void)size;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc,
                               size_t count)
{
    NEED_INIT();
    (void)p, (void)size, (void)desc, (void)count;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
    NEED_INIT();
    return fake_vmm_unmap(p, size) == 0 ? CUDA_SUCCESS
                                        : CUDA_ERROR_INVALID_VALUE;
}
#define POOL_INTO(out, pool, bytes)                                            \
    do {                                                                       \
        uint64_t k_ = fake_pool_alloc((uintptr_t)(pool), bytes);               \
        if (k_ == 0)                                                           \
            return CUDA_ERROR_OUT_OF_MEMORY;                                   \
        *(out) = k_;                                                           \
        return CUDA_SUCCESS;                                                   \
    } while (0)
/* Stream-ordered: from the device's current pool, or the one named. */
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t b, CUstream s)
{
    NEED_CTX();
    (void)s;
    POOL_INTO(p, 0, b);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t b, CUstream s)
{
    NEED_CTX();
    (void)s;
    POOL_INTO(p, 0, b);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t b,
                                        CUmemoryPool pool, CUstream s)
{
    NEED_CTX();
    (void)s;
    POOL_INTO(p, pool, b);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t b,
                                             CUmemoryPool pool, CUstream s)
{
    NEED_CTX();
    (void)s;
    POOL_INTO(p, pool, b);
}
static CUresult pool_rc(int rc)
{
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
    NEED_INIT();
    *pool = (CUmemoryPool)fake_pool_default(d);
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d)
{
    NEED_INIT();
    *pool = (CUmemoryPool)fake_pool_current(d);
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool pool)
{
    NEED_INIT();
    return pool_rc(fake_pool_set_current(d, (uintptr_t)pool));
}
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const void *props)
{
    NEED_INIT();
    (void)props;
    *pool = (CUmemoryPool)fake_pool_create(fake_device());
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    NEED_INIT();
    return pool_rc(fake_pool_destroy((uintptr_t)pool));
}
EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *v)
{
    NEED_INIT();
    return pool_rc(fake_pool_set((uintptr_t)pool, attr, *(cuuint64_t *)v));
}
EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *v)
{
    NEED_INIT();
    return pool_rc(fake_pool_get((uintptr_t)pool, attr, (uint64_t *)v));
}
EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    NEED_INIT();
    return pool_rc(fake_pool_trim((uintptr_t)pool, keep));
}
/* Stream capture (one capturing stream at a time is enough here) and
 * graph memory nodes, which the stand-in accepts without memory. */
static _Atomic(CUstream) captured = (CUstream)(uintptr_t)1;
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode)
{
    NEED_INIT();
    (void)mode;
    atomic_store(&captured, s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamEndCapture(CUstream s, void **graph)
{
    NEED_INIT();
    (void)s;
    atomic_store(&captured, (CUstream)(uintptr_t)1);
    *graph = (void *)(uintptr_t)0x4000;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status)
{
    NEED_INIT();
    *status = atomic_load(&captured) == s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphAddMemAllocNode(void **node, void *g, const void *deps,
                                       size_t n, void *params)
{
    NEED_INIT();
    (void)g, (void)deps, (void)n, (void)params;
    *node = (void *)(uintptr_t)0x5000;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphAddNode(void **node, void *g, const void *deps,
                               size_t n, void *params)
{
    NEED_INIT();
    (void)g, (void)deps, (void)n, (void)params;
    *node = (void *)(uintptr_t)0x5001;
    return CUDA_SUCCESS;
}
/* A synchronize: the pools above their release threshold shrink. */
static void wait_own_work(void);
EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    NEED_CTX();
    (void)s;
    fake_pools_sync();
    wait_own_work(); /* one stream per process here: its queued work */
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    return cuStreamSynchronize(s);
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    NEED_CTX();
    return give(p);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    NEED_CTX();
    (void)s;
    return give(p);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    NEED_CTX();
    (void)s;
    return give(p);
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    NEED_INIT();
    return give(h);
}
EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    uint64_t k;
    NEED_CTX();
    k = fake_take((uint64_t)d->Width * (d->Height ? d->Height : 1) * 4);
    if (k == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *a = (CUarray)(uintptr_t)k;
    return 0;
}
EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    uint64_t k;
    NEED_CTX();
    k = fake_take((uint64_t)d->Width * (d->Height ? d->Height : 1) *
                  (d->Depth ? d->Depth : 1) * 4);
    if (k == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *a = (CUarray)(uintptr_t)k;
    return 0;
}
EXPORT CUresult cuArrayDestroy(CUarray a)
{
    NEED_CTX();
    return give((uintptr_t)a);
}
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a,
                                       const CUDA_ARRAY3D_DESCRIPTOR *d,
                                       unsigned int n)
{
    uint64_t k;
    NEED_CTX();
    k = fake_take((uint64_t)d->Width * (d->Height ? d->Height : 1) * 4 *
                  (n ? n : 1));
    if (k == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *a = (CUmipmappedArray)(uintptr_t)k;
    return 0;
}
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
    NEED_CTX();
    return give((uintptr_t)a);
}
/* FAKE_CUDA_CTX_SYNC=<w>,<r> (two descriptors): while a context is
 * made, once the card holds it, write a byte to w and wait for one on r,
 * so that a test can have another process allocate at exactly that moment
 * (what two apps starting at once do now and then). */
static void ctx_sync(void)
{
    const char *e = getenv("FAKE_CUDA_CTX_SYNC");
    char *end, b = 'c';
    long w, r;

    if (e == NULL)
        return;
    w = strtol(e, &end, 10);
    if (*end != ',')
        return;
    r = strtol(end + 1, NULL, 10);
    if (write((int)w, &b, 1) != 1)
        return;
    while (read((int)r, &b, 1) < 0 && errno == EINTR)
        ;
}

/* A context costs fake_ctx_bytes() of the card (FAKE_CUDA_CTX_BYTES). */
static CUresult ctx_new(CUcontext *c, CUdevice d)
{
    uint64_t k;
    NEED_INIT();
    if (d < 0 || d >= 16)
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    fake_charge_ctx = 1;
    k = fake_take(fake_ctx_bytes());
    fake_charge_ctx = 0;
    if (k == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_sync();
    *c = (CUcontext)(uintptr_t)k;
    ctx_dev_set(*c, d);
    return 0;
}

/* The limits that reserve memory (cuCtxSetLimit), per context: what each
 * reserves beyond its default is taken from the card when set, and freed
 * with the context. The stack is reserved for every resident thread:
 * FAKE_CUDA_SMS multiprocessors (default 108) x 2048 threads. */
#define FAKE_LIMITS 64
static struct {
    pthread_mutex_t mu;
    struct { CUcontext ctx; int limit; size_t value; uint64_t key; } l[FAKE_LIMITS];
} limits = { .mu = PTHREAD_MUTEX_INITIALIZER };
static const size_t limit_default[3] = { 1024, 1 << 20, 8 << 20 };

static int sms(void)
{
    const char *e = getenv("FAKE_CUDA_SMS");
    return e ? (int)strtol(e, NULL, 10) : 108;
}
static uint64_t limit_cost(int limit, size_t v)
{
    uint64_t d = limit_default[limit];
    uint64_t per = limit == 0 ? (uint64_t)sms() * 2048 : 1;
    return v > d ? (v - d) * per : 0;
}
EXPORT CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice d)
{
    NEED_INIT();
    if (d < 0 || d >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    if (attrib == 16) /* MULTIPROCESSOR_COUNT */
        *pi = sms();
    else if (attrib == 39) /* MAX_THREADS_PER_MULTIPROCESSOR */
        *pi = 2048;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetLimit(size_t *v, int limit)
{
    NEED_CTX();
    if (limit < 0 || limit > 2)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&limits.mu);
    *v = limit_default[limit];
    for (int i = 0; i < FAKE_LIMITS; i++)
        if (limits.l[i].ctx == current && limits.l[i].limit == limit)
            *v = limits.l[i].value;
    pthread_mutex_unlock(&limits.mu);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSetLimit(int limit, size_t v)
{
    CUresult rc = CUDA_SUCCESS;
    int slot = -1;
    uint64_t key = 0, cost;
    NEED_CTX();
    if (limit < 0 || limit > 2)
        return CUDA_ERROR_INVALID_VALUE;
    cost = limit_cost(limit, v);
    pthread_mutex_lock(&limits.mu);
    for (int i = 0; i < FAKE_LIMITS && slot < 0; i++)
        if (limits.l[i].ctx == current && limits.l[i].limit == limit)
            slot = i;
    for (int i = 0; i < FAKE_LIMITS && slot < 0; i++)
        if (limits.l[i].ctx == NULL)
            slot = i;
    if (slot >= 0 && limits.l[slot].ctx == current && limits.l[slot].key) {
        fake_give(limits.l[slot].key); /* the old reservation first */
        limits.l[slot].key = 0;
    }
    if (slot < 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (cost > 0 && (key = fake_take_in(cost, owner())) == 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        limits.l[slot].key = fake_take_in(
            limit_cost(limit, limits.l[slot].value), owner()); /* back */
    } else {
        limits.l[slot].ctx = current;
        limits.l[slot].limit = limit;
        limits.l[slot].value = v;
        limits.l[slot].key = key;
    }
    pthread_mutex_unlock(&limits.mu);
    return rc;
}
/* The end of a context: everything made in it is freed (its allocations,
 * what its limits reserved), and it is no longer any thread's current. */
static void ctx_gone(CUcontext c)
{
    ctx_dev_drop(c);
    fake_give_owned((uint64_t)(uintptr_t)c);
    pthread_mutex_lock(&limits.mu);
    for (int i = 0; i < FAKE_LIMITS; i++)
        if (limits.l[i].ctx == c)
            limits.l[i].ctx = NULL, limits.l[i].key = 0;
    pthread_mutex_unlock(&limits.mu);
    if (current == c)
        current = NULL;
}
/* The primary context of each device: made at the first retain, gone at
 * the last release or a reset. */
static struct {
    pthread_mutex_t mu;
    unsigned refs[16];
    CUcontext ctx[16];
} primary = { .mu = PTHREAD_MUTEX_INITIALIZER };
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    CUresult rc = CUDA_SUCCESS;
    NEED_INIT();
    if (d < 0 || d >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary.mu);
    if (primary.ctx[d] == NULL)
        rc = ctx_new(&primary.ctx[d], d);
    if (rc == CUDA_SUCCESS) {
        primary.refs[d]++;
        *c = primary.ctx[d];
    }
    pthread_mutex_unlock(&primary.mu);
    return rc;
}
static CUresult primary_drop(CUdevice d, int reset)
{
    CUresult rc = CUDA_SUCCESS;
    NEED_INIT();
    if (d < 0 || d >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary.mu);
    if (!reset && primary.refs[d] == 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!reset)
        primary.refs[d]--;
    if (rc == CUDA_SUCCESS && (reset || primary.refs[d] == 0) &&
        primary.ctx[d] != NULL) {
        /* cuda.h: a reset "destroys all allocations and resets all
         * state on the primary context" */
        ctx_gone(primary.ctx[d]);
        fake_give((uintptr_t)primary.ctx[d]);
        primary.ctx[d] = NULL;
    }
    pthread_mutex_unlock(&primary.mu);
    return rc;
}
EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags,
                                           int *active)
{
    NEED_INIT();
    if (d < 0 || d >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary.mu);
    *flags = 0;
    *active = primary.ctx[d] != NULL;
    pthread_mutex_unlock(&primary.mu);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    return primary_drop(d, 0);
}
EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    return primary_drop(d, 1);
}
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    return primary_drop(d, 0);
}
EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d)
{
    return primary_drop(d, 1);
}
/* The prefix of the stand-in cards' UUIDs as NVML spells them (fake_nvml.c):
 * "GPU-face0000-0000-0000-0000-0000000000NN", NN the card in hex. */
#define FAKE_UUID_PREFIX "GPU-face0000-0000-0000-0000-0000000000"

/* One entry of CUDA_VISIBLE_DEVICES at v: an index, or a card's full UUID
 * (as the real driver takes it; acceld names an app's cards by UUID);
 * the card into *card and the end into *end, or -1 for an entry the
 * driver cannot use (CUDA stops there). */
static int visible_entry(const char *v, long *card, const char **end)
{
    size_t pre = sizeof(FAKE_UUID_PREFIX) - 1;
    char *e;

    if (strncmp(v, "GPU-", 4) == 0) {
        if (strncmp(v, FAKE_UUID_PREFIX, pre) != 0)
            return -1; /* no such card */
        *card = strtol(v + pre, &e, 16);
        if (e != v + pre + 2 || *card < 0 || *card > 15)
            return -1;
    } else {
        *card = strtol(v, &e, 10);
        if (e == v)
            return -1;
    }
    *end = e;
    return 0;
}

/* The card behind ordinal d: the d-th entry of CUDA_VISIBLE_DEVICES
 * (indices or UUIDs), d itself when unset; -1 if there is none. */
static int card_of(CUdevice d)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES"), *end;
    long i;

    if (v == NULL)
        return d >= 0 && d < 16 ? d : -1;
    for (int k = 0; *v != '\0'; k++) {
        if (visible_entry(v, &i, &end) != 0)
            return -1;
        if (k == d)
            return (int)i;
        v = *end == ',' ? end + 1 : end;
    }
    return -1;
}
/* The device of ordinal o: CUDA_ERROR_INVALID_DEVICE (101) when there is
 * no such ordinal, as the real driver answers. */
EXPORT CUresult cuDeviceGet(CUdevice *d, int o)
{
    NEED_INIT();
    if (card_of(o) < 0)
        return 101;
    *d = o;
    return CUDA_SUCCESS;
}
/* The card's UUID: fa ce 00 .. 00 <card>, as fake_nvml.c prints it. */
EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice d)
{
    int card = card_of(d);
    NEED_INIT();
    if (card < 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(uuid, 0, 16);
    uuid[0] = 0xfa;
    uuid[1] = 0xce;
    uuid[15] = (unsigned char)card;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetUuid(unsigned char *uuid, CUdevice d)
{
    return cuDeviceGetUuid_v2(uuid, d);
}
/* cuCtxCreate makes the new context current (pushes it). */
static CUresult ctx_create(CUcontext *c, CUdevice d)
{
    CUresult rc = ctx_new(c, d);
    if (rc == CUDA_SUCCESS)
        set_current(*c);
    return rc;
}
EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned int f, CUdevice d)
{
    (void)f;
    return ctx_create(c, d);
}
EXPORT CUresult cuCtxCreate_v3(CUcontext *c, void *p, int n, unsigned int f,
                               CUdevice d)
{
    (void)p;
    (void)n;
    (void)f;
    return ctx_create(c, d);
}
EXPORT CUresult cuCtxCreate_v4(CUcontext *c, void *p, unsigned int f,
                               CUdevice d)
{
    (void)p;
    (void)f;
    return ctx_create(c, d);
}
/* The pre-3.2 ABI (32-bit sizes): as the driver still exports it. */
EXPORT CUresult cuCtxCreate(CUcontext *c, unsigned int f, CUdevice d)
{
    (void)f;
    return ctx_create(c, d); /* not through an exported name: the shim's */
}
EXPORT CUresult cuMemAlloc(unsigned int *p, unsigned int b)
{
    uint64_t k;
    NEED_CTX();
    k = fake_take_in(b, owner());
    if (k == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (unsigned int)k; /* the low bits: never freed in the tests */
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxDestroy_v2(CUcontext c)
{
    CUresult rc = give((uintptr_t)c);
    if (rc == CUDA_SUCCESS)
        ctx_gone(c);
    return rc;
}
EXPORT CUresult cuCtxDestroy(CUcontext c)
{
    CUresult rc = give((uintptr_t)c);
    if (rc == CUDA_SUCCESS)
        ctx_gone(c);
    return rc;
}
/* Green contexts cost what a context costs. */
EXPORT CUresult cuGreenCtxCreate(void **g, void *desc, CUdevice d,
                                 unsigned int f)
{
    (void)desc, (void)f;
    return ctx_new((CUcontext *)g, d);
}
EXPORT CUresult cuGreenCtxDestroy(void *g)
{
    NEED_INIT();
    return give((uintptr_t)g);
}
EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
    NEED_CTX();
    fake_mem_info(f, t);
    return 0;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d)
{
    (void)d;
    NEED_INIT();
    fake_mem_info(NULL, b);
    return 0;
}
/* Simulated execution for the time-slicing tests (FAKE_CUDA_LOG or
 * FAKE_CUDA_SIM set): a submission "runs" on the card's ONE timeline
 * (fake_cuda.h, struct fake_timeline: shared by every process of the
 * card through FAKE_CUDA_SHM) after whatever any process queued before it,
 * for `us` microseconds, plus a switch's paging time when the apps' memory
 * passes the card; its [start, end] and the time it was submitted go to
 * the log, and a synchronize (context or stream) sleeps until this
 * process's last end. Without either variable a submission does nothing
 * (the benchmarks of the launch path measure the shim, not this). */
static struct {
    pthread_once_t once;
    int on;                       /* simulating */
    int fd;                       /* FAKE_CUDA_LOG, -1 none */
    uint64_t app;                 /* fake_app_key(ACCEL_APP) */
    double link_bpns;             /* bytes per ns over the link */
    pthread_mutex_t mu;           /* guards last_end */
    int64_t last_end;             /* ns: this process's last work ends */
} gpu = { .once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER };

static void gpu_init(void)
{
    const char *p = getenv("FAKE_CUDA_LOG"), *l = getenv("FAKE_CUDA_LINK_GBPS");
    double gbps = l != NULL ? atof(l) : 0;
    gpu.fd = p ? open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
    gpu.on = p != NULL || getenv("FAKE_CUDA_SIM") != NULL;
    gpu.app = fake_app_key(getenv("ACCEL_APP"));
    gpu.link_bpns = gbps > 0 ? gbps : 12.0; /* GB/s = bytes per ns */
}

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The timeline's lock: its holder's pid; a dead holder's is taken over
 * (the tests kill processes with SIGKILL). */
static void tl_lock(struct fake_timeline *tl)
{
    int64_t me = getpid();
    for (unsigned spin = 0;; spin++) {
        int64_t o = 0;
        if (atomic_compare_exchange_weak(&tl->lock, &o, me))
            return;
        if (o != 0 && spin % 1024 == 1023 && kill((pid_t)o, 0) != 0 &&
            errno == ESRCH)
            atomic_compare_exchange_strong(&tl->lock, &o, 0);
        sched_yield();
    }
}

static void tl_unlock(struct fake_timeline *tl)
{
    atomic_store(&tl->lock, 0);
}

/* Bytes this app must bring back when it follows another app on the card:
 * what passes the card, at most its own (the card's record; tl locked). */
static int64_t tl_move_bytes(struct fake_cuda_stats *st)
{
    int64_t over, mine = 0;
    size_t total = 0;

    fake_mem_info(NULL, &total);
    over = atomic_load(&st->used) - (int64_t)total;
    if (over <= 0)
        return 0;
    for (int i = 0; i < FAKE_APPS; i++)
        if (atomic_load(&st->apps[i].key) == gpu.app)
            mine = atomic_load(&st->apps[i].used);
    return mine < over ? mine : over;
}

static CUresult work(unsigned us)
{
    struct fake_cuda_stats *st;
    struct fake_timeline *tl;
    struct fake_interval r;

    pthread_once(&gpu.once, gpu_init);
    if (!gpu.on)
        return 0;
    st = fake_record();
    tl = &st->tl;
    pthread_mutex_lock(&gpu.mu);
    tl_lock(tl);
    r.submit = mono_ns();
    r.pid = getpid();
    r.start = tl->busy_until > r.submit ? tl->busy_until : r.submit;
    if (tl->resident != gpu.app) {
        int64_t move = tl->resident != 0 ? tl_move_bytes(st) : 0;
        if (tl->resident != 0)
            tl->switches++;
        if (move > 0) {
            int64_t ns = (int64_t)((double)move / gpu.link_bpns);
            r.start += ns;
            tl->paged_ns += ns;
            tl->moves++;
            tl->moved_bytes += move;
        }
        tl->resident = gpu.app;
    }
    r.end = r.start + (int64_t)us * 1000;
    tl->busy_until = r.end;
    tl->busy_ns += (int64_t)us * 1000;
    tl_unlock(tl);
    gpu.last_end = r.end;
    pthread_mutex_unlock(&gpu.mu);
    if (gpu.fd >= 0 && write(gpu.fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        return CUDA_ERROR_INVALID_VALUE;
    return 0;
}

/* Wait until this process's queued work has run. */
static void wait_own_work(void)
{
    int64_t end, now;
    pthread_once(&gpu.once, gpu_init);
    pthread_mutex_lock(&gpu.mu);
    end = gpu.last_end;
    pthread_mutex_unlock(&gpu.mu);
    now = mono_ns();
    if (end > now) {
        struct timespec t = { (end - now) / 1000000000LL,
                              (end - now) % 1000000000LL };
        nanosleep(&t, NULL);
    }
}

EXPORT CUresult cuCtxSynchronize(void)
{
    NEED_CTX();
    fake_pools_sync();
    wait_own_work();
    return 0;
}
/* An event holds the time this process's queued work ends when it is
 * recorded; its synchronize waits until then (and, a synchronize, lets
 * the pools above their release threshold shrink). */
EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
    int64_t *t;
    NEED_CTX();
    t = calloc(1, sizeof(*t));
    (void)flags;
    if (t == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *e = (CUevent)(void *)t;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    NEED_CTX();
    (void)s;
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_once(&gpu.once, gpu_init);
    pthread_mutex_lock(&gpu.mu);
    *(int64_t *)(void *)e = gpu.last_end;
    pthread_mutex_unlock(&gpu.mu);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventSynchronize(CUevent e)
{
    int64_t end, now;
    NEED_CTX();
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    fake_pools_sync();
    end = *(int64_t *)(void *)e;
    now = mono_ns();
    if (end > now) {
        struct timespec t = { (end - now) / 1000000000LL,
                              (end - now) % 1000000000LL };
        nanosleep(&t, NULL);
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    NEED_CTX();
    free(e);
    return CUDA_SUCCESS;
}
/* One current context per thread (the real driver keeps a stack; one
 * level is what the shim and the tests use). */
static _Thread_local CUcontext pushed;
EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
    NEED_INIT();
    *c = current;
    return 0;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    NEED_INIT();
    set_current(c);
    return 0;
}
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    NEED_INIT();
    pushed = current;
    set_current(c);
    return 0;
}
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
    NEED_CTX(); /* an empty stack */
    if (c)
        *c = current;
    set_current(pushed);
    pushed = NULL;
    return 0;
}

/* cuLaunchKernel: gx is the simulated duration in microseconds. */
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy,
                               unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned sh, CUstream s, void **p,
                               void **e)
{
    NEED_CTX();
    (void)f, (void)gy, (void)gz, (void)bx, (void)by, (void)bz;
    (void)sh, (void)s, (void)p, (void)e;
    return work(gx);
}
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                    unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned sh, CUstream s,
                                    void **p, void **e)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
}
EXPORT CUresult cuLaunchKernelEx(const void *cfg, CUfunction f, void **p,
                                 void **e)
{
    NEED_CTX();
    (void)cfg, (void)f, (void)p, (void)e;
    return work(100);
}
EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx,
                                          unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by,
                                          unsigned bz, unsigned sh,
                                          CUstream s, void **p)
{
    NEED_CTX();
    (void)f, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)sh;
    (void)s, (void)p;
    return work(gx);
}
EXPORT CUresult cuGraphLaunch(void *g, CUstream s)
{
    NEED_INIT();
    (void)g, (void)s;
    return work(100);
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n)
{
    NEED_CTX();
    (void)d, (void)h, (void)n;
    return work(20);
}
/* A synchronous copy to the host: it runs after the process's queued
 * work and returns when it has (time-slicing tests: a thread waiting in
 * it is busy, not idle). */
EXPORT CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n)
{
    CUresult rc;
    NEED_CTX();
    (void)h, (void)d, (void)n;
    rc = work(20);
    wait_own_work();
    return rc;
}
EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr d, size_t n, CUdevice dev,
                                   CUstream s)
{
    NEED_INIT();
    (void)d, (void)n, (void)dev, (void)s;
    return work(20);
}
EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *d, CUdeviceptr *src,
                                   size_t *sz, size_t n, void *attrs,
                                   size_t *idx, size_t na, size_t *fail,
                                   CUstream s)
{
    NEED_INIT();
    (void)d, (void)src, (void)sz, (void)n, (void)attrs, (void)idx;
    (void)na, (void)fail, (void)s;
    return work(20);
}
EXPORT CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr a, unsigned v,
                                        unsigned f)
{
    NEED_INIT();
    (void)s, (void)a, (void)v, (void)f;
    return work(20);
}
EXPORT CUresult cuMemcpy3DPeer(const void *p)
{
    NEED_CTX();
    (void)p;
    return work(20);
}
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
    NEED_CTX();
    (void)d, (void)v, (void)n;
    return work(20);
}

/* What the driver takes where no interposer can see how much (the
 * inventory's "meter" rows, docs/shim-inventory.md): code and globals of
 * a module or library, a linker's state, an executable graph (and what an
 * upload adds), memory another API allocated and CUDA imported. Each
 * takes FAKE_CUDA_OUTSIDE_BYTES (default 96 MiB) of the card for the
 * calling process, given back by its matching end. */
static uint64_t outside_bytes(void)
{
    const char *e = getenv("FAKE_CUDA_OUTSIDE_BYTES");
    return e ? strtoull(e, NULL, 0) : 96ULL << 20;
}
static CUresult outside_take(void *out)
{
    uint64_t k;
    NEED_INIT();
    k = fake_take(outside_bytes());
    if (k == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (out != NULL)
        *(uint64_t *)out = k;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleLoad(void **m, const char *f)
{
    NEED_CTX();
    (void)f;
    return outside_take(m);
}
EXPORT CUresult cuModuleLoadData(void **m, const void *img)
{
    NEED_CTX();
    (void)img;
    return outside_take(m);
}
EXPORT CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n,
                                   void *o, void **v)
{
    NEED_CTX();
    (void)img, (void)n, (void)o, (void)v;
    return outside_take(m);
}
EXPORT CUresult cuModuleLoadFatBinary(void **m, const void *fat)
{
    NEED_CTX();
    (void)fat;
    return outside_take(m);
}
EXPORT CUresult cuModuleUnload(void *m)
{
    NEED_CTX();
    return give((uintptr_t)m);
}
EXPORT CUresult cuLibraryLoadData(void **l, const void *code, void *jo,
                                  void **jv, unsigned nj, void *lo, void **lv,
                                  unsigned nl)
{
    NEED_INIT();
    (void)code, (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    return outside_take(l);
}
EXPORT CUresult cuLibraryLoadFromFile(void **l, const char *f, void *jo,
                                      void **jv, unsigned nj, void *lo,
                                      void **lv, unsigned nl)
{
    return cuLibraryLoadData(l, f, jo, jv, nj, lo, lv, nl);
}
EXPORT CUresult cuLibraryUnload(void *l)
{
    NEED_INIT();
    return give((uintptr_t)l);
}
EXPORT CUresult cuLinkCreate_v2(unsigned n, void *o, void **v, void **state)
{
    NEED_CTX();
    (void)n, (void)o, (void)v;
    return outside_take(state);
}
EXPORT CUresult cuLinkCreate(unsigned n, void *o, void **v, void **state)
{
    return cuLinkCreate_v2(n, o, v, state);
}
EXPORT CUresult cuLinkDestroy(void *state)
{
    NEED_INIT();
    return give((uintptr_t)state);
}
EXPORT CUresult cuGraphInstantiateWithFlags(void **e, void *g,
                                            unsigned long long f)
{
    NEED_INIT();
    (void)g, (void)f;
    return outside_take(e);
}
EXPORT CUresult cuGraphInstantiate(void **e, void *g, void *node, char *log,
                                   size_t n)
{
    (void)node, (void)log, (void)n;
    return cuGraphInstantiateWithFlags(e, g, 0);
}
EXPORT CUresult cuGraphInstantiate_v2(void **e, void *g, void *node,
                                      char *log, size_t n)
{
    return cuGraphInstantiate(e, g, node, log, n);
}
EXPORT CUresult cuGraphInstantiateWithParams(void **e, void *g, void *p)
{
    (void)p;
    return cuGraphInstantiateWithFlags(e, g, 0);
}
EXPORT CUresult cuGraphInstantiateWithParams_ptsz(void **e, void *g, void *p)
{
    return cuGraphInstantiateWithParams(e, g, p);
}
/* An upload places the executable graph on the device: its memory (one
 * upload per graph here), freed with the graph. */
static struct {
    pthread_mutex_t mu;
    uint64_t exec[16], key[16];
} uploads = { .mu = PTHREAD_MUTEX_INITIALIZER };
EXPORT CUresult cuGraphUpload(void *e, CUstream s)
{
    uint64_t k = 0;
    CUresult rc;
    NEED_INIT();
    (void)s;
    rc = outside_take(&k);
    pthread_mutex_lock(&uploads.mu);
    for (int i = 0; rc == CUDA_SUCCESS && i < 16; i++)
        if (uploads.exec[i] == 0) {
            uploads.exec[i] = (uint64_t)(uintptr_t)e;
            uploads.key[i] = k;
            k = 0;
            break;
        }
    pthread_mutex_unlock(&uploads.mu);
    if (k != 0)
        fake_give(k); /* no room: as if it took nothing */
    return rc;
}
EXPORT CUresult cuGraphUpload_ptsz(void *e, CUstream s)
{
    return cuGraphUpload(e, s);
}
EXPORT CUresult cuGraphExecDestroy(void *e)
{
    NEED_INIT();
    pthread_mutex_lock(&uploads.mu);
    for (int i = 0; i < 16; i++)
        if (uploads.exec[i] == (uint64_t)(uintptr_t)e) {
            fake_give(uploads.key[i]);
            uploads.exec[i] = 0;
        }
    pthread_mutex_unlock(&uploads.mu);
    return give((uintptr_t)e);
}
EXPORT CUresult cuImportExternalMemory(void **m, const void *desc)
{
    NEED_INIT();
    (void)desc;
    return outside_take(m);
}
EXPORT CUresult cuDestroyExternalMemory(void *m)
{
    NEED_INIT();
    return give((uintptr_t)m);
}

/* Internal entry points, as a driver may hand out instead of its exported
 * functions (FAKE_CUDA_INTERNAL=1): not in the dynamic symbol table. */
static CUresult internal_alloc(CUdeviceptr *p, size_t b)
{
    NEED_CTX();
    ALLOC_INTO(p, b);
}
static CUresult internal_ctx(CUcontext *c, unsigned int f, CUdevice d)
{
    (void)f;
    return ctx_new(c, d);
}

/* Like the real driver: a base name plus version picks the ABI variant;
 * the per-thread-stream flag (2) picks _ptsz. Answers from this library
 * only (it does not see the shim's exports). */
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver,
                                    cuuint64_t flags, int *status)
{
    static const char *const v2[] = { "cuMemAlloc", "cuMemAllocPitch",
        "cuMemFree", "cuMemGetInfo", "cuDeviceTotalMem", "cuArrayCreate",
        "cuArray3DCreate", "cuCtxDestroy", "cuGetProcAddress",
        "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset",
        "cuDeviceGetUuid", NULL };
    static const char *const ptsz[] = { "cuMemAllocAsync", "cuMemFreeAsync",
        "cuMemAllocFromPoolAsync", "cuLaunchKernel", "cuStreamSynchronize",
        NULL };
    char name[128];
    void *self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *(*real_dlsym)(void *, const char *) =
        (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym",
                                                "GLIBC_2.34");

    if (real_dlsym == NULL)
        real_dlsym = (void *(*)(void *, const char *))dlvsym(
            RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    snprintf(name, sizeof(name), "%s", sym);
    for (int i = 0; ver >= 3020 && v2[i]; i++) /* the _v2 ABIs of 3.2 */
        if (strcmp(sym, v2[i]) == 0)
            snprintf(name, sizeof(name), "%s_v2", sym);
    if (strcmp(sym, "cuCtxCreate") == 0)
        snprintf(name, sizeof(name), "cuCtxCreate_v4");
    for (int i = 0; (flags & 2) && ptsz[i]; i++)
        if (strcmp(sym, ptsz[i]) == 0)
            snprintf(name, sizeof(name), "%s_ptsz", sym);
    *pfn = self ? real_dlsym(self, name) : NULL;
    if (getenv("FAKE_CUDA_INTERNAL") != NULL && ver >= 3020 &&
        strcmp(sym, "cuMemAlloc") == 0)
        *pfn = (void *)(uintptr_t)internal_alloc;
    if (getenv("FAKE_CUDA_INTERNAL") != NULL && strcmp(sym, "cuCtxCreate") == 0)
        *pfn = (void *)(uintptr_t)internal_ctx;
    if (self)
        dlclose(self);
    if (status)
        *status = *pfn ? 0 : 1;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver,
                                 cuuint64_t flags)
{
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
/* Test-only: the record, for programs that want to read it in-process. */
EXPORT struct fake_cuda_stats *fake_cuda_stats(void)
{
    return fake_record();
}
