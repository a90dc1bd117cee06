/* SPDX-License-Identifier: MIT */
/*
 * hip_case.c: the HIP snippet program of the shim tests. Linked against the
 * stand-in libamdhip64.so.6 (fake_hip.c) and run under
 * LD_PRELOAD=libaccelshim.so by CTest, as shim_case.c is for CUDA: the same
 * ledger, the same quota rules, the same races (8 processes on one quota,
 * fork, kill -9), those cases being quota_cases.c's run through HIP's table
 * (`hip`); the ones below are HIP's own. argv[1] picks the case. Exit
 * status 0 = pass. It proves the shim's logic against a stand-in, not
 * against ROCm.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "daemon/node/ledger.h"
#include "quota_cases.h"
#include "shim/hip_types.h"

hipError_t hipMalloc(void **, size_t);
hipError_t hipMallocManaged(void **, size_t, unsigned);
hipError_t hipExtMallocWithFlags(void **, size_t, unsigned);
hipError_t hipMallocPitch(void **, size_t *, size_t, size_t);
hipError_t hipMallocAsync(void **, size_t, hipStream_t);
hipError_t hipMallocFromPoolAsync(void **, size_t, hipMemPool_t, hipStream_t);
hipError_t hipMallocArray(hipArray_t *, const struct hip_channel_desc *,
                          size_t, size_t, unsigned);
hipError_t hipMalloc3DArray(hipArray_t *, const struct hip_channel_desc *,
                            struct hip_extent, unsigned);
hipError_t hipArrayCreate(hipArray_t *, const struct hip_array_desc *);
hipError_t hipFree(void *);
hipError_t hipFreeAsync(void *, hipStream_t);
hipError_t hipFreeArray(hipArray_t);
hipError_t hipArrayDestroy(hipArray_t);
hipError_t hipMemGetInfo(size_t *, size_t *);
hipError_t hipDeviceTotalMem(size_t *, hipDevice_t);
hipError_t hipGetProcAddress(const char *, void **, int, uint64_t, int *);
hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *, size_t,
                        const hipMemAllocationProp *, unsigned long long);
hipError_t hipMemRelease(hipMemGenericAllocationHandle_t);
hipError_t hipMemAddressReserve(void **, size_t, size_t, void *,
                                unsigned long long);
hipError_t hipMemMap(void *, size_t, size_t, hipMemGenericAllocationHandle_t,
                     unsigned long long);
hipError_t hipMemUnmap(void *, size_t);
hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *, int);
hipError_t hipMemPoolSetAttribute(hipMemPool_t, int, void *);
hipError_t hipDeviceSynchronize(void);
hipError_t hipStreamSynchronize(hipStream_t);
hipError_t hipEventCreate(hipEvent_t *);
hipError_t hipEventRecord(hipEvent_t, hipStream_t);
hipError_t hipEventSynchronize(hipEvent_t);
hipError_t hipMemAllocPitch(void **, size_t *, size_t, size_t, unsigned);
hipError_t hipMalloc3D(struct hip_pitched_ptr *, struct hip_extent);
hipError_t hipArray3DCreate(hipArray_t *, const struct hip_array3d_desc *);
hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *,
                                   const struct hip_channel_desc *,
                                   struct hip_extent, unsigned, unsigned);
hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *,
                                   struct hip_array3d_desc *, unsigned);
hipError_t hipFreeMipmappedArray(hipMipmappedArray_t);
hipError_t hipMipmappedArrayDestroy(hipMipmappedArray_t);
hipError_t hipDeviceReset(void);
hipError_t hipMemExportToShareableHandle(void *, hipMemGenericAllocationHandle_t,
                                         hipMemAllocationHandleType,
                                         unsigned long long);
hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *,
                                           void *, hipMemAllocationHandleType);
struct fake_cuda_stats *fake_hip_stats(void);

/* The allocation paths (quota_cases.h): their keys are HIP's pointers. */
static int a_malloc(uint64_t b, union gpu_key *k)
{
    return hipMalloc(&k->ptr, b);
}
static int a_managed(uint64_t b, union gpu_key *k)
{
    return hipMallocManaged(&k->ptr, b, 1);
}
static int a_ext(uint64_t b, union gpu_key *k)
{
    return hipExtMallocWithFlags(&k->ptr, b, 0);
}
static int a_pitch(uint64_t b, union gpu_key *k)
{
    size_t pitch = 0;
    return hipMallocPitch(&k->ptr, &pitch, 1000, b / 1000);
}
static int a_async(uint64_t b, union gpu_key *k)
{
    return hipMallocAsync(&k->ptr, b, NULL);
}
static int a_pool(uint64_t b, union gpu_key *k)
{
    hipMemPool_t pool = NULL;
    if (hipDeviceGetDefaultMemPool(&pool, 0) != hipSuccess)
        return hipErrorInvalidValue;
    return hipMallocFromPoolAsync(&k->ptr, b, pool, NULL);
}
static int s_sync(void) { return hipDeviceSynchronize(); }
static int a_array(uint64_t b, union gpu_key *k)
{
    struct hip_channel_desc d = { 32, 0, 0, 0, 2 };
    return hipMallocArray((hipArray_t *)&k->ptr, &d, 1024, b / 4096, 0);
}
static int a_array3d(uint64_t b, union gpu_key *k)
{
    struct hip_channel_desc d = { 32, 0, 0, 0, 2 };
    struct hip_extent e = { 1024, 1024, b / (4 * MiB) };
    return hipMalloc3DArray((hipArray_t *)&k->ptr, &d, e, 0);
}
static int a_create(uint64_t b, union gpu_key *k)
{
    struct hip_array_desc d = { 1024, b / 4096, 0x20, 1 };
    return hipArrayCreate((hipArray_t *)&k->ptr, &d);
}
/* Issue 45: the HIP twins of cuMemAllocPitch, cuArray3DCreate and the
 * mipmapped arrays (one level: the stand-in takes what the shim charges). */
static int a_allocpitch(uint64_t b, union gpu_key *k)
{
    size_t pitch = 0;
    return hipMemAllocPitch(&k->ptr, &pitch, 1000, b / 1000, 4);
}
static int a_malloc3d(uint64_t b, union gpu_key *k)
{
    struct hip_pitched_ptr p = { 0 };
    struct hip_extent e = { 1000, b / 4000, 4 };
    int rc = hipMalloc3D(&p, e);
    k->ptr = p.ptr;
    return rc;
}
static int a_array3dcreate(uint64_t b, union gpu_key *k)
{
    struct hip_array3d_desc d = { 1024, 1024, b / (4 * MiB), 0x20, 1, 0 };
    return hipArray3DCreate((hipArray_t *)&k->ptr, &d);
}
static int a_mipmap(uint64_t b, union gpu_key *k)
{
    struct hip_channel_desc d = { 32, 0, 0, 0, 2 };
    struct hip_extent e = { 1024, b / 4096, 1 };
    return hipMallocMipmappedArray((hipMipmappedArray_t *)&k->ptr, &d, e, 1,
                                   0);
}
static int a_mipmapcreate(uint64_t b, union gpu_key *k)
{
    struct hip_array3d_desc d = { 1024, b / 4096, 0, 0x20, 1, 0 };
    return hipMipmappedArrayCreate((hipMipmappedArray_t *)&k->ptr, &d, 1);
}
static int r_free_mipmap(union gpu_key k)
{
    return hipFreeMipmappedArray(k.ptr);
}
static int r_destroy_mipmap(union gpu_key k)
{
    return hipMipmappedArrayDestroy(k.ptr);
}
static int r_free(union gpu_key k) { return hipFree(k.ptr); }
static int r_free_async(union gpu_key k) { return hipFreeAsync(k.ptr, NULL); }
static int r_free_array(union gpu_key k) { return hipFreeArray(k.ptr); }
static int r_destroy(union gpu_key k) { return hipArrayDestroy(k.ptr); }

static const struct alloc_path paths[] = {
    { "malloc", a_malloc, r_free, 0, NULL },
    { "managed", a_managed, r_free, 0, NULL },
    { "ext", a_ext, r_free, 0, NULL },
    { "pitch", a_pitch, r_free, 0, NULL },
    { "async", a_async, r_free_async, 0, s_sync },
    { "pool", a_pool, r_free_async, 0, s_sync },
    { "array", a_array, r_free_array, 0, NULL },
    { "array3d", a_array3d, r_free_array, 0, NULL },
    { "arraycreate", a_create, r_destroy, 0, NULL },
    { "allocpitch", a_allocpitch, r_free, 0, NULL },
    { "malloc3d", a_malloc3d, r_free, 0, NULL },
    { "array3dcreate", a_array3dcreate, r_destroy, 0, NULL },
    { "mipmap", a_mipmap, r_free_mipmap, 0, NULL },
    { "mipmapcreate", a_mipmapcreate, r_destroy_mipmap, 0, NULL },
};

static const struct gpu_api hip = {
    .prog = "hip_case",
    .fake = "HIP",
    .oom = hipErrorOutOfMemory,
    .alloc = a_malloc,
    .release = r_free,
    .record = fake_hip_stats,
    .paths = paths,
    .npaths = sizeof(paths) / sizeof(*paths),
};

/* hipMemGetInfo and hipDeviceTotalMem: the quota's view (or physical). */
static void case_view(int limited)
{
    uint64_t total = limited ? GiB : 16 * GiB;
    size_t f = 0, t = 0, dt = 0;
    void *d = NULL;

    CHECK(hipMalloc(&d, 256 * MiB) == hipSuccess, "alloc");
    CHECK(hipMemGetInfo(&f, &t) == hipSuccess, "meminfo");
    CHECK(hipDeviceTotalMem(&dt, 0) == hipSuccess, "totalmem");
    CHECK(t == total && dt == total, "total %zu/%zu want %llu", t, dt,
          (unsigned long long)total);
    CHECK(f == total - 256 * MiB, "free %zu", f);
    if (limited) { /* acceld lowers the limit below the usage */
        CHECK(ledger_set_limit(ledger_path_env(), 128 * MiB) == ACCEL_OK,
              "lower");
        CHECK(hipMemGetInfo(&f, &t) == hipSuccess && t == 128 * MiB && f == 0,
              "lowered view %zu/%zu (no underflow)", f, t);
    }
    CHECK(hipFree(d) == hipSuccess, "free");
}

/* The runtime's own lookup hands out our hooks. */
static void case_procaddr(void)
{
    hipError_t (*alloc)(void **, size_t) = NULL;
    hipError_t (*gpa)(const char *, void **, int, uint64_t, int *) = NULL;
    void *d = NULL, *e = NULL;

    CHECK(hipGetProcAddress("hipMalloc", (void **)&alloc, 600, 0, NULL) ==
              hipSuccess && alloc != NULL, "lookup");
    CHECK(alloc(&d, 768 * MiB) == hipSuccess, "within");
    CHECK(alloc(&e, 512 * MiB) == hipErrorOutOfMemory, "beyond via pfn");
    CHECK(hipGetProcAddress("hipGetProcAddress", (void **)&gpa, 600, 0,
                            NULL) == hipSuccess && gpa != NULL, "nested");
    alloc = NULL;
    CHECK(gpa("hipMalloc", (void **)&alloc, 600, 0, NULL) == hipSuccess,
          "nested lookup");
    CHECK(alloc != NULL && alloc(&e, 512 * MiB) == hipErrorOutOfMemory,
          "beyond via nested pfn");
    CHECK(hipFree(d) == hipSuccess, "free");
    CHECK(ledger_used() == 0, "ledger not 0");
}

/* A program (or framework) that looks the runtime up with dlsym on its
 * handle gets our hook too. */
static void case_dlsym(void)
{
    void *h = dlopen("libamdhip64.so.6", RTLD_NOW | RTLD_NOLOAD);
    hipError_t (*alloc)(void **, size_t) =
        h ? (hipError_t(*)(void **, size_t))(uintptr_t)dlsym(h, "hipMalloc")
          : NULL;
    void *d = NULL, *e = NULL;

    CHECK(alloc != NULL, "dlsym");
    CHECK(alloc && alloc(&d, 768 * MiB) == hipSuccess, "within");
    CHECK(alloc && alloc(&e, 512 * MiB) == hipErrorOutOfMemory,
          "beyond via dlsym");
    CHECK(hipFree(d) == hipSuccess, "free");
}

/* An older runtime without hipMallocManaged / hipGetProcAddress. */
static void case_missing(void)
{
    void *d = NULL, *pfn = NULL;
    CHECK(hipMallocManaged(&d, MiB, 1) == hipErrorNotFound, "managed");
    CHECK(hipGetProcAddress("hipMalloc", &pfn, 600, 0, NULL) ==
              hipErrorNotFound, "procaddr");
    CHECK(hipMalloc(&d, MiB) == hipSuccess && hipFree(d) == hipSuccess,
          "malloc still works");
}

static void case_unknown_free(void)
{
    struct fake_cuda_stats *st = fake_hip_stats();
    hipError_t rc = hipFree((void *)(uintptr_t)0x123456789000ULL);
    CHECK(rc == hipErrorInvalidValue, "runtime's answer passed: %d", rc);
    CHECK(atomic_load(&st->unknown_frees) == 1, "free not at runtime");
}

/* vLLM's sleep mode on ROCm, PyTorch-ROCm's expandable segments: a VMM
 * handle released while mapped stays on the card, and charged, until its
 * mapping is unmapped; hipMalloc beside it is held to the quota. */
static void case_vmm_mapped(void)
{
    struct fake_cuda_stats *st = fake_hip_stats();
    hipMemAllocationProp p = { .type = 1 };
    hipMemGenericAllocationHandle_t h;
    void *va = NULL, *d = NULL;

    p.location.type = hipMemLocationTypeDevice;
    CHECK(hipMemAddressReserve(&va, 512 * MiB, 0, NULL, 0) == 0, "reserve");
    CHECK(hipMemCreate(&h, 512 * MiB, &p, 0) == 0, "create");
    CHECK(hipMemMap(va, 512 * MiB, 0, h, 0) == 0, "map");
    CHECK(hipMemRelease(h) == 0, "release while mapped");
    CHECK(ledger_used() == 512 * MiB, "released while mapped: charge %llu",
          (unsigned long long)ledger_used());
    CHECK(hipMalloc(&d, 768 * MiB) == hipErrorOutOfMemory,
          "768 MiB beside the mapped 512 MiB");
    CHECK(hipMemUnmap(va, 512 * MiB) == 0, "unmap");
    CHECK(ledger_used() == 0 && atomic_load(&st->used) == 0,
          "after unmap: %llu", (unsigned long long)ledger_used());
    CHECK(hipMalloc(&d, 768 * MiB) == 0 && hipFree(d) == 0, "quota back");
    CHECK((uint64_t)atomic_load(&st->max_used) <= GiB,
          "the card held %lld, over the quota",
          (long long)atomic_load(&st->max_used));
}

/* PyTorch-ROCm's hipMallocAsync backend: the default pool keeps what is
 * freed into it (release threshold UINT64_MAX); its memory stays charged
 * until the pool gives it back, and hipMalloc beside it is held to the
 * quota by trimming the app's own pool first. */
static void case_pool_keep(void)
{
    struct fake_cuda_stats *st = fake_hip_stats();
    uint64_t keep = ~0ULL;
    hipMemPool_t pool;
    void *a = NULL, *d = NULL;

    CHECK(hipDeviceGetDefaultMemPool(&pool, 0) == 0, "default pool");
    CHECK(hipMemPoolSetAttribute(pool, 4, &keep) == 0, "threshold");
    CHECK(hipMallocAsync(&a, 768 * MiB, NULL) == 0, "async 768");
    CHECK(hipFreeAsync(a, NULL) == 0 && hipStreamSynchronize(NULL) == 0,
          "free, sync");
    CHECK(ledger_used() == 768 * MiB && atomic_load(&st->used) == 768 * MiB,
          "the pool's memory: ledger %llu", (unsigned long long)ledger_used());
    CHECK(hipMalloc(&d, 768 * MiB) == 0, "hipMalloc beside the pool");
    CHECK(ledger_used() == 768 * MiB && atomic_load(&st->used) == 768 * MiB,
          "after the trim: ledger %llu", (unsigned long long)ledger_used());
    CHECK(hipFree(d) == 0 && ledger_used() == 0, "free");
}

/* The twin of shim.pool_event: memory freed into a pool with threshold 0
 * is released at an event's synchronize, and the charge follows at once. */
static void case_pool_event(void)
{
    struct fake_cuda_stats *st = fake_hip_stats();
    hipEvent_t ev;
    void *a = NULL;

    CHECK(hipEventCreate(&ev) == 0, "event");
    CHECK(hipMallocAsync(&a, 768 * MiB, NULL) == 0, "async 768");
    CHECK(hipFreeAsync(a, NULL) == 0 && hipEventRecord(ev, NULL) == 0,
          "free, record");
    CHECK(ledger_used() == 768 * MiB, "un-charged at the enqueue: %llu",
          (unsigned long long)ledger_used());
    CHECK(hipEventSynchronize(ev) == 0, "event sync");
    CHECK(atomic_load(&st->used) == 0, "the stand-in's pool kept it");
    CHECK(ledger_used() == 0, "the event's synchronize freed it on the card "
          "and the charge stayed: %llu", (unsigned long long)ledger_used());
}

static uint64_t card(void)
{
    return (uint64_t)atomic_load(&fake_hip_stats()->used);
}

/* hipDeviceReset frees everything the process allocated on the device:
 * the shim gives all of it back, and the whole quota is there again. */
static void case_reset(void)
{
    struct hip_channel_desc d = { 32, 0, 0, 0, 2 };
    void *p = NULL, *q = NULL;
    hipArray_t a = NULL;

    CHECK(hipMalloc(&p, 512 * MiB) == hipSuccess, "512 MiB");
    CHECK(hipMallocArray(&a, &d, 1024, 64 * 256, 0) == hipSuccess, "array");
    CHECK(hipDeviceReset() == hipSuccess, "reset");
    CHECK(card() == 0, "the stand-in kept %llu", (unsigned long long)card());
    CHECK(ledger_used() == 0, "after the reset %llu MiB stay charged",
          (unsigned long long)(ledger_used() >> 20));
    CHECK(hipMalloc(&q, 960 * MiB) == hipSuccess, "the whole quota again");
}

/* The importer of case_vmm_share: map, say 'm', when told let go, 'd'. */
static void case_vmm_import(char **argv)
{
    hipMemGenericAllocationHandle_t h = NULL;
    void *va = NULL;

    CHECK(hipMemImportFromShareableHandle(
              &h, (void *)(intptr_t)strtol(argv[2], NULL, 10), 1) ==
              hipSuccess, "import");
    CHECK(hipMemAddressReserve(&va, 512 * MiB, 0, NULL, 0) == hipSuccess &&
              hipMemMap(va, 512 * MiB, 0, h, 0) == hipSuccess, "map");
    CHECK(peer_say('m') && peer_wait(), "the creator");
    CHECK(hipMemUnmap(va, 512 * MiB) == hipSuccess &&
              hipMemRelease(h) == hipSuccess, "let go");
    CHECK(peer_say('d'), "the creator");
}

/* VMM memory exported by descriptor: charged until the last process that
 * holds it lets it go (CUDA's shim.vmm_share, through HIP). */
static void case_vmm_share(void)
{
    hipMemAllocationProp pr = { 0 };
    hipMemGenericAllocationHandle_t h = NULL;
    void *va = NULL, *d = NULL;
    struct peer imp;
    char num[16];
    int fd = -1;

    pr.type = 1;
    pr.location.type = hipMemLocationTypeDevice;
    CHECK(hipMemCreate(&h, 512 * MiB, &pr, 0) == hipSuccess, "create");
    CHECK(hipMemAddressReserve(&va, 512 * MiB, 0, NULL, 0) == hipSuccess &&
              hipMemMap(va, 512 * MiB, 0, h, 0) == hipSuccess, "map");
    CHECK(hipMemExportToShareableHandle(&fd, h, 1, 0) == hipSuccess, "export");
    snprintf(num, sizeof(num), "%d", fd);
    if (fd < 0 || peer_start(&imp, "hip_case", "vmm_import", num) != 0) {
        failures++;
        return;
    }
    CHECK(peer_hear(&imp, 'm'), "the importer mapped it");
    CHECK(hipMemUnmap(va, 512 * MiB) == hipSuccess &&
              hipMemRelease(h) == hipSuccess, "the creator lets go");
    CHECK(ledger_used() == 512 * MiB, "still charged: %llu MiB",
          (unsigned long long)(ledger_used() >> 20));
    CHECK(hipMalloc(&d, 768 * MiB) == hipErrorOutOfMemory,
          "768 MiB beside the importer's 512");
    CHECK(peer_go(&imp) && peer_hear(&imp, 'd'), "the importer let go");
    CHECK(peer_end(&imp), "the importer's checks");
    CHECK(ledger_used() == 0 && card() == 0, "given back: %llu/%llu",
          (unsigned long long)ledger_used(), (unsigned long long)card());
    close(fd);
}

/* Elastic memory on every HIP allocation path the quota holds (SPEC 4.4,
 * issue 46 on AMD), the twin of shim.elastic_<path>: a card of 1 GiB
 * (FAKE_CUDA_TOTAL) of which another app (a process without the shim)
 * holds 768 MiB; this app's 512 MiB through PATH is within its 1 GiB
 * quota but the card is short, so the shim asks acceld's reclaim socket
 * (here the test's own server, which has the other app free its memory
 * and answers "ok") and the call succeeds the second time. Before, no HIP
 * path asked: each failed as on a full card. */
static struct {
    int fd;              /* the reclaim socket */
    pid_t hog;           /* the other app */
    int hog_out;         /* its "freed" line */
    _Atomic int asks;
} el;

/* VMM, which the quota cases' table has not: hipMemCreate on device 0. */
static int a_memcreate(uint64_t b, union gpu_key *k)
{
    hipMemAllocationProp p = { .type = 1 };
    p.location.type = hipMemLocationTypeDevice;
    return hipMemCreate((hipMemGenericAllocationHandle_t *)&k->ptr, b, &p, 0);
}
static int r_memrelease(union gpu_key k) { return hipMemRelease(k.ptr); }
static const struct alloc_path memcreate = { "memcreate", a_memcreate,
                                             r_memrelease, 0, NULL };

/* The other app: 768 MiB on the card until SIGUSR1, then freed. */
static void case_hog(void)
{
    void *p = NULL;
    sigset_t set;
    int sig = 0;

    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if (hipMalloc(&p, 768 * MiB) != hipSuccess)
        _exit(3);
    (void)!write(1, "ready", 5);
    sigwait(&set, &sig);
    hipFree(p);
    (void)!write(1, "freed", 5);
    _exit(0);
}

static void *el_serve(void *arg)
{
    (void)arg;
    for (;;) {
        char line[256] = "", buf[8] = "";
        int c = accept(el.fd, NULL, NULL);
        ssize_t n;
        if (c < 0)
            return NULL; /* the socket was shut down */
        n = read(c, line, sizeof line - 1);
        if (n > 0 && strncmp(line, "reclaim ", 8) == 0 && el.hog > 0) {
            atomic_fetch_add(&el.asks, 1);
            kill(el.hog, SIGUSR1); /* its reclaim action */
            if (read(el.hog_out, buf, 5) == 5 &&
                strncmp(buf, "freed", 5) == 0) {
                el.hog = 0;
                (void)!write(c, "ok\n", 3);
            } else {
                (void)!write(c, "no\n", 3);
            }
        } else {
            (void)!write(c, "no\n", 3);
        }
        close(c);
    }
}

/* This app: started with acceld's config (the shim reads it at its first
 * HIP call), the other app's pid and pipe from its parent. */
static void case_elastic_run(const char *which)
{
    const struct alloc_path *pth = NULL;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    const char *sock = getenv("EL_SOCK");
    union gpu_key k = { 0 };
    pthread_t th;

    for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++)
        if (strcmp(paths[i].name, which) == 0)
            pth = &paths[i];
    if (strcmp(which, memcreate.name) == 0)
        pth = &memcreate;
    el.hog = (pid_t)strtol(getenv("EL_HOG") ? getenv("EL_HOG") : "0", NULL,
                           10);
    el.hog_out = (int)strtol(getenv("EL_FD") ? getenv("EL_FD") : "-1", NULL,
                             10);
    CHECK(pth != NULL && sock != NULL && el.hog > 0 && el.hog_out >= 0,
          "path %s, the socket, the other app", which);
    if (pth == NULL || sock == NULL || el.hog <= 0 || el.hog_out < 0)
        return;
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    unlink(sock);
    el.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(el.fd >= 0 && bind(el.fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
              listen(el.fd, 4) == 0 &&
              pthread_create(&th, NULL, el_serve, NULL) == 0,
          "the reclaim socket");
    CHECK(pth->alloc(512 * MiB, &k) == hipSuccess,
          "%s: 512 MiB within the quota on a short card", which);
    CHECK(atomic_load(&el.asks) >= 1 && el.hog == 0,
          "%s: acceld was not asked (%d asks)", which, atomic_load(&el.asks));
    CHECK(pth->release(k) == hipSuccess, "release");
    if (pth->settle)
        pth->settle();
    CHECK((uint64_t)atomic_load(&fake_hip_stats()->max_used) <= GiB,
          "%s: the card held %lld MiB, over 1024", which,
          (long long)(atomic_load(&fake_hip_stats()->max_used) >> 20));
    shutdown(el.fd, SHUT_RDWR);
    close(el.fd);
    pthread_join(th, NULL);
    unlink(sock);
}

static void case_elastic(const char *which)
{
    char dir[400], led[512], cfg[512], sock[108], buf[8] = "", num[24];
    struct ledger_device dev = { 0, GiB, led, "", NULL, NULL, sock };
    char *hog_argv[] = { "hip_case", "hog", NULL };
    char *run_argv[] = { "hip_case", "elastic_run", (char *)which, NULL };
    const char *preload = getenv("LD_PRELOAD");
    char *keep = preload ? strdup(preload) : NULL;
    int fds[2], status = -1;
    pid_t hog, app;

    /* the other app, without the shim */
    CHECK(pipe(fds) == 0, "pipe");
    unsetenv("LD_PRELOAD");
    hog = spawn(hog_argv, fds[1]);
    if (keep)
        setenv("LD_PRELOAD", keep, 1);
    free(keep);
    close(fds[1]);
    CHECK(read(fds[0], buf, 5) == 5 && strncmp(buf, "ready", 5) == 0,
          "the other app's 768 MiB");
    /* this app's quota, with acceld's reclaim socket, as acceld writes it */
    snprintf(dir, sizeof(dir), "%s/run", getenv("XDG_RUNTIME_DIR"));
    snprintf(sock, sizeof(sock), "%s/reclaim.sock", getenv("XDG_RUNTIME_DIR"));
    CHECK(ledger_path(led, sizeof(led), dir, "el-app", 0) == ACCEL_OK, "path");
    snprintf(cfg, sizeof(cfg), "%s/el-app.shim.conf", dir);
    CHECK(ledger_create(led, "el-app", 0, "", GiB, (uid_t)-1, (gid_t)-1) ==
              ACCEL_OK, "ledger");
    CHECK(ledger_write_config(cfg, "el-app", &dev, 1) == ACCEL_OK, "config");
    setenv("ACCEL_CONFIG", cfg, 1);
    setenv("EL_SOCK", sock, 1);
    snprintf(num, sizeof num, "%d", (int)hog);
    setenv("EL_HOG", num, 1);
    snprintf(num, sizeof num, "%d", fds[0]);
    setenv("EL_FD", num, 1);
    app = spawn(run_argv, -1);
    CHECK(app > 0 && waitpid(app, &status, 0) == app && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0,
          "%s: the app's process failed (status %d)", which, status);
    kill(hog, SIGKILL);
    waitpid(hog, NULL, 0);
    close(fds[0]);
    CHECK(ledger_remove(led) == ACCEL_OK, "remove");
    unlink(cfg);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";

    if (run_quota_case(&hip, argc, argv))
        return cases_done(&hip, c);
    if (strcmp(c, "view") == 0)
        case_view(argc > 2 && strcmp(argv[2], "limited") == 0);
    else if (strcmp(c, "procaddr") == 0)
        case_procaddr();
    else if (strcmp(c, "dlsym") == 0)
        case_dlsym();
    else if (strcmp(c, "missing") == 0)
        case_missing();
    else if (strcmp(c, "unknown_free") == 0)
        case_unknown_free();
    else if (strcmp(c, "vmm_mapped") == 0)
        case_vmm_mapped();
    else if (strcmp(c, "pool_keep") == 0)
        case_pool_keep();
    else if (strcmp(c, "pool_event") == 0)
        case_pool_event();
    else if (strcmp(c, "reset") == 0)
        case_reset();
    else if (strcmp(c, "vmm_share") == 0)
        case_vmm_share();
    else if (strcmp(c, "vmm_import") == 0 && argc > 2)
        case_vmm_import(argv);
    else if (strcmp(c, "hog") == 0)
        case_hog();
    else if (strcmp(c, "elastic") == 0 && argc > 2)
        case_elastic(argv[2]);
    else if (strcmp(c, "elastic_run") == 0 && argc > 2)
        case_elastic_run(argv[2]);
    else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    return cases_done(&hip, c);
}
