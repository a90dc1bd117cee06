/* SPDX-License-Identifier: MIT */
/*
 * fake_hip.c: a stand-in libamdhip64.so.6 for the shim's HIP tests: the
 * HIP runtime entry points the shim interposes, over simulated device
 * memory of FAKE_CUDA_TOTAL bytes (default 16 GiB), with the same shared
 * record as the fake libcuda (fake_cuda.h, FAKE_CUDA_SHM). FAKE_CUDA_FAIL=1
 * makes every allocation fail in the runtime. Built twice: the full
 * library, and with FAKE_MINIMAL one that lacks hipMallocManaged and
 * hipGetProcAddress (an older runtime: the shim must answer
 * hipErrorNotFound, never call through NULL). It is not a model of ROCm.
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "shim/hip_types.h"

#define FAKE_SLOTS (1u << 22)
#define EXPORT __attribute__((visibility("default")))
#define BASE 0x500000000000ULL

static struct {
    pthread_once_t once;
    struct fake_cuda_stats *st;
    uint64_t total;
    int fail;
    _Atomic uint64_t next;  /* next pointer index */
    uint64_t *sizes;        /* bytes by pointer index, 0 = free */
} fk = { .once = PTHREAD_ONCE_INIT };

static void fake_init(void)
{
    const char *shm = getenv("FAKE_CUDA_SHM"), *t = getenv("FAKE_CUDA_TOTAL");
    void *m = MAP_FAILED;
    int fd;

    fk.total = t ? strtoull(t, NULL, 0) : (16ULL << 30);
    fk.fail = getenv("FAKE_CUDA_FAIL") != NULL;
    if (shm != NULL && (fd = open(shm, O_RDWR | O_CREAT, 0600)) >= 0) {
        if (ftruncate(fd, 4096) == 0)
            m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
    }
    if (m == MAP_FAILED)
        m = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fk.st = m;
    fk.sizes = mmap(NULL, FAKE_SLOTS * sizeof(uint64_t),
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fk.next = 1;
}

static void init(void)
{
    pthread_once(&fk.once, fake_init);
}

/* Take `bytes` of simulated memory; a pointer-ish key, or 0 when full. */
static uint64_t take(uint64_t bytes)
{
    int64_t now, m;
    uint64_t idx;

    init();
    if (fk.fail)
        return 0;
    now = atomic_fetch_add(&fk.st->used, (int64_t)bytes) + (int64_t)bytes;
    if ((uint64_t)now > fk.total) {
        atomic_fetch_sub(&fk.st->used, (int64_t)bytes);
        return 0;
    }
    m = atomic_load(&fk.st->max_used);
    while (now > m && !atomic_compare_exchange_weak(&fk.st->max_used, &m, now))
        ;
    idx = atomic_fetch_add(&fk.next, 1) % FAKE_SLOTS;
    fk.sizes[idx] = bytes ? bytes : 1;
    atomic_fetch_add(&fk.st->allocs, 1);
    return BASE + (idx << 12);
}

static hipError_t give(uint64_t key)
{
    uint64_t idx = (key - BASE) >> 12;

    init();
    atomic_store(&fk.st->last_free, key);
    if (key < BASE || idx >= FAKE_SLOTS || fk.sizes[idx] == 0) {
        atomic_fetch_add(&fk.st->unknown_frees, 1);
        return hipErrorInvalidValue;
    }
    atomic_fetch_sub(&fk.st->used, (int64_t)fk.sizes[idx]);
    fk.sizes[idx] = 0;
    atomic_fetch_add(&fk.st->frees, 1);
    return hipSuccess;
}

static hipError_t into(void **p, uint64_t bytes)
{
    uint64_t k = take(bytes);
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
EXPORT hipError_t hipMallocAsync(void **p, size_t b, hipStream_t s)
{
    (void)s;
    return into(p, b);
}
EXPORT hipError_t hipMallocFromPoolAsync(void **p, size_t b, hipMemPool_t pool,
                                         hipStream_t s)
{
    (void)pool;
    (void)s;
    return into(p, b);
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
EXPORT hipError_t hipFree(void *p) { return give((uintptr_t)p); }
EXPORT hipError_t hipFreeAsync(void *p, hipStream_t s)
{
    (void)s;
    return give((uintptr_t)p);
}
EXPORT hipError_t hipFreeArray(hipArray_t a) { return give((uintptr_t)a); }
EXPORT hipError_t hipArrayDestroy(hipArray_t a) { return give((uintptr_t)a); }
EXPORT hipError_t hipMemGetInfo(size_t *f, size_t *t)
{
    int64_t u;
    init();
    u = atomic_load(&fk.st->used);
    *t = fk.total;
    *f = fk.total - (size_t)(u < 0 ? 0 : u);
    return hipSuccess;
}
EXPORT hipError_t hipDeviceTotalMem(size_t *b, hipDevice_t d)
{
    (void)d;
    init();
    *b = fk.total;
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
    init();
    return fk.st;
}
