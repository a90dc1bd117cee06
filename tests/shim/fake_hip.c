/* SPDX-License-Identifier: MIT */
/*
 * fake_hip.c: a stand-in libamdhip64.so.6 for the shim's HIP tests: the
 * HIP runtime entry points the shim interposes, over the same simulated
 * device memory and shared record as the fake libcuda (fake_alloc.h:
 * FAKE_CUDA_TOTAL, FAKE_CUDA_SHM, FAKE_CUDA_FAIL). Built twice: the full
 * library, and with FAKE_MINIMAL one that lacks hipMallocManaged and
 * hipGetProcAddress (an older runtime: the shim must answer
 * hipErrorNotFound, never call through NULL). It is not a model of ROCm.
 *
 * Like amdgpu, it tells what the process holds on the card (everything:
 * what the shim charged and what the runtime takes inside itself) as a DRM
 * client's memory in fdinfo, where FAKE_HIP_DRM_ROOT names a fixture proc
 * root (acceld --proc-root): <root>/<pid>/fd/<n> links to
 * /dev/dri/FAKE_HIP_DRM_NODE (default renderD128) and <root>/<pid>/fdinfo/<n>
 * says drm-pdev: FAKE_HIP_DRM_PDEV (none when unset), drm-client-id and the
 * memory (drm-total-vram, drm-resident-vram and drm-memory-vram, or with
 * FAKE_HIP_DRM_FORMAT=memory the older kernels' drm-memory-vram only),
 * rewritten after every call that takes or frees memory, removed at exit.
 * Where FAKE_HIP_SYSFS_VRAM_USED names a file (a fixture sysfs's
 * mem_info_vram_used), it writes there, after the same calls, what the
 * whole card holds (every process's memory), as amdgpu's counter says it.
 * The entry points whose memory the runtime takes inside itself (the
 * inventory's HIP "meter" rows: contexts, modules, executable graphs,
 * external memory) take FAKE_HIP_OUTSIDE_BYTES (default 96 MiB) each,
 * given back by their matching end.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_alloc.h"
#include "shim/hip_types.h"

const uint64_t fake_base = 0x500000000000ULL;

/* ---- the DRM client's fdinfo (FAKE_HIP_DRM_ROOT) ---- */

#define DRM_FD "5" /* the fd number of the client in the fixture */

static pthread_mutex_t drm_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t drm_pid; /* the process whose files are written, 0 none */

static void drm_path(char *out, size_t cap, const char *root, pid_t pid,
                     const char *sub)
{
    snprintf(out, cap, "%s/%d%s%s", root, (int)pid, sub[0] ? "/" : "", sub);
}

/* Make <root>/<pid>/{fd,fdinfo} and the fd's link (once per process). */
static int drm_open(const char *root, pid_t pid)
{
    char p[4096], target[64];
    const char *node = getenv("FAKE_HIP_DRM_NODE");
    mode_t old = umask(022);
    int rc = 0;

    drm_path(p, sizeof p, root, pid, "");
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        rc = -1;
    drm_path(p, sizeof p, root, pid, "fd");
    if (rc == 0 && mkdir(p, 0755) != 0 && errno != EEXIST)
        rc = -1;
    drm_path(p, sizeof p, root, pid, "fdinfo");
    if (rc == 0 && mkdir(p, 0755) != 0 && errno != EEXIST)
        rc = -1;
    snprintf(target, sizeof target, "/dev/dri/%s", node ? node : "renderD128");
    drm_path(p, sizeof p, root, pid, "fd/" DRM_FD);
    if (rc == 0 && symlink(target, p) != 0 && errno != EEXIST)
        rc = -1;
    umask(old);
    return rc;
}

/* The card's figure into the fixture's mem_info_vram_used (by a rename:
 * a reader never sees half a number; under a lock of the file's, so that
 * two processes' notes never leave the older figure last). */
static void sysfs_note(void)
{
    const char *path = getenv("FAKE_HIP_SYSFS_VRAM_USED");
    char tmp[4096], lock[4096];
    FILE *f;
    int lfd;

    if (path == NULL || path[0] == '\0' ||
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >=
            (int)sizeof tmp ||
        snprintf(lock, sizeof lock, "%s.lock", path) >= (int)sizeof lock)
        return;
    lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lfd < 0 || flock(lfd, LOCK_EX) != 0) {
        if (lfd >= 0)
            close(lfd);
        return;
    }
    f = fopen(tmp, "w");
    if (f != NULL) {
        fprintf(f, "%lld\n", (long long)atomic_load(&fake_record()->used));
        if (fclose(f) != 0 || rename(tmp, path) != 0)
            unlink(tmp);
    }
    close(lfd); /* the lock with it */
}

/* Write this process's figure into its fdinfo (whole, by a rename). */
static void drm_note(void)
{
    const char *root = getenv("FAKE_HIP_DRM_ROOT");
    const char *pdev = getenv("FAKE_HIP_DRM_PDEV");
    const char *fmt = getenv("FAKE_HIP_DRM_FORMAT");
    char path[4096], tmp[4096];
    pid_t pid = getpid();
    unsigned long long kib;
    FILE *f;

    sysfs_note();
    if (root == NULL || root[0] == '\0')
        return;
    pthread_mutex_lock(&drm_mu);
    if (drm_pid != pid) {
        if (drm_open(root, pid) != 0) {
            pthread_mutex_unlock(&drm_mu);
            return;
        }
        drm_pid = pid;
    }
    kib = (unsigned long long)fake_proc_used() / 1024;
    drm_path(path, sizeof path, root, pid, "fdinfo/" DRM_FD);
    drm_path(tmp, sizeof tmp, root, pid, "fdinfo/." DRM_FD ".tmp");
    f = fopen(tmp, "w");
    if (f != NULL) {
        fprintf(f,
                "pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\n"
                "drm-client-id:\t%d\n",
                (int)pid);
        if (pdev != NULL && pdev[0])
            fprintf(f, "drm-pdev:\t%s\n", pdev);
        if (fmt == NULL || strcmp(fmt, "memory") != 0)
            fprintf(f,
                    "drm-total-vram:\t%llu KiB\ndrm-shared-vram:\t0\n"
                    "drm-resident-vram:\t%llu KiB\n"
                    "drm-total-gtt:\t0\n",
                    kib, kib);
        fprintf(f,
                "drm-memory-vram:\t%llu KiB\ndrm-memory-gtt: \t0 KiB\n"
                "drm-memory-cpu: \t0 KiB\n",
                kib);
        if (fclose(f) != 0 || rename(tmp, path) != 0)
            unlink(tmp);
    }
    pthread_mutex_unlock(&drm_mu);
}

/* At exit the kernel closes the client: its files go. */
__attribute__((destructor)) static void drm_close(void)
{
    const char *root = getenv("FAKE_HIP_DRM_ROOT");
    char p[4096];

    if (root == NULL || drm_pid != getpid())
        return;
    drm_path(p, sizeof p, root, drm_pid, "fdinfo/" DRM_FD);
    unlink(p);
    drm_path(p, sizeof p, root, drm_pid, "fd/" DRM_FD);
    unlink(p);
    drm_path(p, sizeof p, root, drm_pid, "fdinfo");
    rmdir(p);
    drm_path(p, sizeof p, root, drm_pid, "fd");
    rmdir(p);
    drm_path(p, sizeof p, root, drm_pid, "");
    rmdir(p);
}

/* rc, once the fdinfo tells what the call left on the card. */
static hipError_t noted(hipError_t rc)
{
    drm_note();
    return rc;
}

static hipError_t give(uint64_t key)
{
    return noted(fake_give(key) == 0 ? hipSuccess : hipErrorInvalidValue);
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
    return noted(hipSuccess);
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
    return noted(hipSuccess);
}
static hipError_t pool_rc(int rc)
{
    return noted(rc == 0 ? hipSuccess : hipErrorInvalidValue);
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
    return noted(hipSuccess);
}
/* Events: the stand-in's work is done when it is queued, so an event's
 * synchronize has nothing to wait for; it lets the pools shrink, as the
 * driver's do at any synchronize. */
EXPORT hipError_t hipEventCreate(hipEvent_t *e)
{
    static char ev;
    *e = (hipEvent_t)(void *)&ev;
    return noted(hipSuccess);
}
EXPORT hipError_t hipEventRecord(hipEvent_t e, hipStream_t s)
{
    (void)e, (void)s;
    return noted(hipSuccess);
}
EXPORT hipError_t hipEventSynchronize(hipEvent_t e)
{
    (void)e;
    fake_pools_sync();
    return noted(hipSuccess);
}
EXPORT hipError_t hipDeviceSynchronize(void)
{
    fake_pools_sync();
    return noted(hipSuccess);
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
    return noted(hipSuccess);
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
    return noted(hipSuccess);
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
    return noted(hipSuccess);
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
    return noted(fake_vmm_unmap((uintptr_t)p, size) == 0
                     ? hipSuccess
                     : hipErrorInvalidValue);
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
/* ---- what the runtime takes inside itself (the "meter" rows) ---- */

static uint64_t outside_bytes(void)
{
    const char *e = getenv("FAKE_HIP_OUTSIDE_BYTES");
    return e ? strtoull(e, NULL, 0) : 96ULL << 20;
}
static hipError_t outside_take(void **out)
{
    uint64_t k = fake_take(outside_bytes());
    if (k == 0)
        return hipErrorOutOfMemory;
    if (out != NULL)
        *out = (void *)(uintptr_t)k;
    return noted(hipSuccess);
}
EXPORT hipError_t hipCtxCreate(void **ctx, unsigned flags, hipDevice_t d)
{
    (void)flags, (void)d;
    return outside_take(ctx);
}
EXPORT hipError_t hipCtxDestroy(void *ctx) { return give((uintptr_t)ctx); }
/* The primary context of each device: made by the first retain, freed by
 * the last release. */
static struct {
    pthread_mutex_t mu;
    uint64_t key[16];
    int refs[16];
} primary = { .mu = PTHREAD_MUTEX_INITIALIZER };
EXPORT hipError_t hipDevicePrimaryCtxRetain(void **ctx, hipDevice_t d)
{
    hipError_t rc = hipSuccess;
    void *k = NULL;
    if (d < 0 || d >= 16)
        return hipErrorInvalidValue;
    pthread_mutex_lock(&primary.mu);
    if (primary.refs[d] == 0) {
        rc = outside_take(&k);
        primary.key[d] = (uint64_t)(uintptr_t)k;
    }
    if (rc == hipSuccess) {
        primary.refs[d]++;
        *ctx = (void *)(uintptr_t)primary.key[d];
    }
    pthread_mutex_unlock(&primary.mu);
    return rc;
}
EXPORT hipError_t hipDevicePrimaryCtxRelease(hipDevice_t d)
{
    hipError_t rc = hipSuccess;
    if (d < 0 || d >= 16)
        return hipErrorInvalidValue;
    pthread_mutex_lock(&primary.mu);
    if (primary.refs[d] == 0)
        rc = hipErrorInvalidValue;
    else if (--primary.refs[d] == 0)
        rc = give(primary.key[d]);
    pthread_mutex_unlock(&primary.mu);
    return rc;
}
EXPORT hipError_t hipModuleLoad(void **m, const char *fname)
{
    (void)fname;
    return outside_take(m);
}
EXPORT hipError_t hipModuleLoadData(void **m, const void *image)
{
    (void)image;
    return outside_take(m);
}
EXPORT hipError_t hipModuleLoadDataEx(void **m, const void *image,
                                      unsigned n, void *opts, void **vals)
{
    (void)image, (void)n, (void)opts, (void)vals;
    return outside_take(m);
}
EXPORT hipError_t hipModuleUnload(void *m) { return give((uintptr_t)m); }
EXPORT hipError_t hipGraphInstantiateWithFlags(void **e, void *g,
                                               unsigned long long f)
{
    (void)g, (void)f;
    return outside_take(e);
}
EXPORT hipError_t hipGraphInstantiate(void **e, void *g, void *node,
                                      char *log, size_t n)
{
    (void)node, (void)log, (void)n;
    return hipGraphInstantiateWithFlags(e, g, 0);
}
EXPORT hipError_t hipGraphExecDestroy(void *e) { return give((uintptr_t)e); }
EXPORT hipError_t hipImportExternalMemory(void **m, const void *desc)
{
    (void)desc;
    return outside_take(m);
}
EXPORT hipError_t hipDestroyExternalMemory(void *m)
{
    return give((uintptr_t)m);
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
