/* SPDX-License-Identifier: MIT */
/*
 * shim_case.c: the snippet program of the shim tests. It is linked against
 * the fake libcuda.so.1 and run under LD_PRELOAD=libaccelshim.so by CTest;
 * argv[1] picks the case, the environment (set per test in CMakeLists.txt)
 * the limit. Exit status 0 = pass; each failed check prints why. The cases
 * HIP shares are quota_cases.c's, run here through CUDA's table (`cuda`);
 * the ones below are CUDA's own (NVML's view, contexts, the config file,
 * the fork races).
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/node/ledger.h"
#include "quota_cases.h"
#include "shim/cuda_types.h"

CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *, size_t, CUmemoryPool,
                                      CUstream);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t,
                     const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *,
                                const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, int *);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuCtxSynchronize(void);
CUresult cuStreamSynchronize(CUstream);
CUresult cuEventCreate(CUevent *, unsigned int);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                             unsigned long long);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuMemPoolSetAttribute(CUmemoryPool, int, void *);
CUresult cuMemPoolCreate(CUmemoryPool *, const void *);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
struct fake_cuda_stats *fake_cuda_stats(void);

CUresult cuInit(unsigned);
CUresult cuCtxSetCurrent(CUcontext);
int run_escape_case(const char *c, char **argv, int argc); /* escape_cases.c */

/* libnvidia-ml.so.1, initialised as the real NVML requires before any
 * other call (the stand-in refuses them before); NULL if missing. */
static void *nvml_open(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    nvmlReturn_t (*init)(void) =
        h ? (nvmlReturn_t(*)(void))(uintptr_t)dlsym(h, "nvmlInit_v2") : NULL;

    if (init != NULL && init() != NVML_SUCCESS)
        return NULL;
    return h;
}

/* The context the cases work in, made as the CUDA runtime makes it: the
 * primary context of the app's device (FAKE_CUDA_DEVICE, else 0) retained
 * and made current. The real driver refuses every allocation, copy, launch
 * and synchronize of a thread without a current context, and so does the
 * stand-in; a thread starts without one, so each thread of a case calls
 * this first. Cases whose subject is the context make their own (main). */
static CUcontext app_ctx;

static void runtime_ctx(void)
{
    const char *e = getenv("FAKE_CUDA_DEVICE");
    CUdevice dev = e != NULL ? (CUdevice)strtol(e, NULL, 10) : 0;

    if (app_ctx == NULL)
        CHECK(cuDevicePrimaryCtxRetain(&app_ctx, dev) == 0,
              "the primary context");
    CHECK(cuCtxSetCurrent(app_ctx) == 0, "the primary context current");
}

/* The allocation paths (quota_cases.h): their keys are CUDA's numbers. */
static int a_alloc(uint64_t b, union gpu_key *k)
{
    return cuMemAlloc_v2(&k->dptr, b);
}
static int a_managed(uint64_t b, union gpu_key *k)
{
    return cuMemAllocManaged(&k->dptr, b, 1);
}
static int a_pitch(uint64_t b, union gpu_key *k)
{
    size_t pitch;
    return cuMemAllocPitch_v2(&k->dptr, &pitch, 1000, b / 1000, 4);
}
static int a_async(uint64_t b, union gpu_key *k)
{
    return cuMemAllocAsync(&k->dptr, b, NULL);
}
static int a_async_ptsz(uint64_t b, union gpu_key *k)
{
    return cuMemAllocAsync_ptsz(&k->dptr, b, NULL);
}
static int a_pool(uint64_t b, union gpu_key *k)
{
    return cuMemAllocFromPoolAsync(&k->dptr, b, NULL, NULL);
}
static int a_pool_ptsz(uint64_t b, union gpu_key *k)
{
    return cuMemAllocFromPoolAsync_ptsz(&k->dptr, b, NULL, NULL);
}
static int a_create(uint64_t b, union gpu_key *k)
{
    CUmemAllocationProp p = { .type = 1, .location = { 1, 0 } };
    return cuMemCreate(&k->dptr, b, &p, 0);
}
static int a_array(uint64_t b, union gpu_key *k)
{
    CUDA_ARRAY_DESCRIPTOR d = { .Width = 1024, .Height = b / 4096,
                                .Format = 0x20, .NumChannels = 1 };
    CUarray a;
    CUresult rc = cuArrayCreate_v2(&a, &d);
    k->dptr = (uintptr_t)a;
    return rc;
}
static int a_array3d(uint64_t b, union gpu_key *k)
{
    CUDA_ARRAY3D_DESCRIPTOR d = { .Width = 1024, .Height = 1024,
                                  .Depth = b / (4 * MiB), .Format = 0x20,
                                  .NumChannels = 1 };
    CUarray a;
    CUresult rc = cuArray3DCreate_v2(&a, &d);
    k->dptr = (uintptr_t)a;
    return rc;
}
static int a_mipmap(uint64_t b, union gpu_key *k)
{
    CUDA_ARRAY3D_DESCRIPTOR d = { .Width = 1024, .Height = b / 4096,
                                  .Format = 0x20, .NumChannels = 1 };
    CUmipmappedArray a;
    CUresult rc = cuMipmappedArrayCreate(&a, &d, 1);
    k->dptr = (uintptr_t)a;
    return rc;
}
static int a_ctx(uint64_t b, union gpu_key *k) /* 256 MiB, whatever b */
{
    CUcontext c;
    CUresult rc;
    (void)b;
    rc = cuCtxCreate_v2(&c, 0, 0);
    k->dptr = (uintptr_t)c;
    return rc;
}
static int r_free(union gpu_key k) { return cuMemFree_v2(k.dptr); }
static int r_free_async(union gpu_key k)
{
    return cuMemFreeAsync(k.dptr, NULL);
}
static int r_free_ptsz(union gpu_key k)
{
    return cuMemFreeAsync_ptsz(k.dptr, NULL);
}
static int r_release(union gpu_key k) { return cuMemRelease(k.dptr); }
static int r_array(union gpu_key k)
{
    return cuArrayDestroy((CUarray)(uintptr_t)k.dptr);
}
static int r_mipmap(union gpu_key k)
{
    return cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)k.dptr);
}
static int r_ctx(union gpu_key k)
{
    return cuCtxDestroy_v2((CUcontext)(uintptr_t)k.dptr);
}

static int s_sync(void) { return cuCtxSynchronize(); }

/* fill: four contexts of 256 MiB (FAKE_CUDA_CTX_BYTES of the test) take
 * the 1 GiB, the fifth is refused. The stream-ordered paths' memory stays
 * in their pool until a synchronize. */
static const struct alloc_path paths[] = {
    { "alloc", a_alloc, r_free, 0, NULL },
    { "managed", a_managed, r_free, 0, NULL },
    { "pitch", a_pitch, r_free, 0, NULL },
    { "async", a_async, r_free_async, 0, s_sync },
    { "async_ptsz", a_async_ptsz, r_free_ptsz, 0, s_sync },
    { "pool", a_pool, r_free_async, 0, s_sync },
    { "pool_ptsz", a_pool_ptsz, r_free, 0, s_sync },
    { "create", a_create, r_release, 0, NULL },
    { "array", a_array, r_array, 0, NULL },
    { "array3d", a_array3d, r_array, 0, NULL },
    { "mipmap", a_mipmap, r_mipmap, 0, NULL },
    { "ctx", a_ctx, r_ctx, 3, NULL },
};

static const struct gpu_api cuda = {
    .prog = "shim_case",
    .fake = "driver",
    .oom = CUDA_ERROR_OUT_OF_MEMORY,
    .alloc = a_alloc,
    .release = r_free,
    .record = fake_cuda_stats,
    .paths = paths,
    .npaths = sizeof(paths) / sizeof(*paths),
};

static void nvml_view(uint64_t *total, uint64_t *free_, uint64_t *used);

/* The physical peak: the stand-in card never held more than `limit`. */
static void peak_within(uint64_t limit, const char *what)
{
    int64_t peak = atomic_load(&fake_cuda_stats()->max_used);
    CHECK((uint64_t)peak <= limit, "%s: the card held %lld MiB, over %llu",
          what, (long long)(peak >> 20), (unsigned long long)(limit >> 20));
}

static uint64_t card_used(void)
{
    return (uint64_t)atomic_load(&fake_cuda_stats()->used);
}

/* llama.cpp's VMM pool (ggml_cuda_pool_vmm::alloc): reserve addresses,
 * cuMemCreate, cuMemMap, cuMemRelease at once while still mapped; the
 * memory stays on the card (and charged) until cuMemUnmap. Then
 * cudaMalloc to the quota: refused while the mapping lives. */
static void case_vmm_mapped(void)
{
    CUmemAllocationProp p = { .type = 1, .location = { 1, 0 } };
    CUmemGenericAllocationHandle h;
    CUdeviceptr va, d;

    CHECK(cuMemAddressReserve(&va, 512 * MiB, 0, 0, 0) == 0, "reserve");
    CHECK(cuMemCreate(&h, 512 * MiB, &p, 0) == 0, "create");
    CHECK(cuMemMap(va, 512 * MiB, 0, h, 0) == 0, "map");
    CHECK(cuMemRelease(h) == 0, "release while mapped");
    CHECK(card_used() == 512 * MiB, "the stand-in let the mapped handle go");
    CHECK(ledger_used() == 512 * MiB, "released while mapped: charge %llu",
          (unsigned long long)ledger_used());
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "768 MiB beside the mapped 512 MiB");
    CHECK(cuMemAlloc_v2(&d, 512 * MiB) == 0, "the rest of the quota");
    CHECK(cuMemFree_v2(d) == 0, "free");
    CHECK(cuMemUnmap(va, 512 * MiB) == 0, "unmap");
    CHECK(ledger_used() == 0 && card_used() == 0, "after unmap: %llu/%llu",
          (unsigned long long)ledger_used(), (unsigned long long)card_used());
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == 0 && cuMemFree_v2(d) == 0,
          "the quota back after the unmap");
    peak_within(GiB, "vmm");
}

/* PyTorch's cudaMallocAsync backend: the default pool's release threshold
 * at UINT64_MAX, 768 MiB used and freed (the pool keeps it), then
 * cudaMalloc to the quota. The shim trims the app's own pool rather than
 * let the card hold both, and the app can reuse its pool's slack. */
static void case_pool_keep(void)
{
    cuuint64_t keep = ~0ULL;
    CUmemoryPool pool;
    CUdeviceptr a, b, d;

    CHECK(cuDeviceGetDefaultMemPool(&pool, 0) == 0, "default pool");
    CHECK(cuMemPoolSetAttribute(pool, 4, &keep) == 0, "release threshold");
    CHECK(cuMemAllocAsync(&a, 768 * MiB, NULL) == 0, "async 768");
    CHECK(cuMemFreeAsync(a, NULL) == 0, "free async");
    CHECK(cuStreamSynchronize(NULL) == 0, "sync");
    CHECK(card_used() == 768 * MiB, "the stand-in's pool let go: %llu",
          (unsigned long long)card_used());
    CHECK(ledger_used() == 768 * MiB, "pool's memory not charged: %llu",
          (unsigned long long)ledger_used());
    CHECK(cuMemAllocAsync(&b, 768 * MiB, NULL) == 0, "reuse of the slack");
    CHECK(ledger_used() == 768 * MiB, "the slack charged twice: %llu",
          (unsigned long long)ledger_used());
    CHECK(cuMemFreeAsync(b, NULL) == 0 && cuCtxSynchronize() == 0, "free");
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == 0, "cudaMalloc beside the pool");
    CHECK(ledger_used() == 768 * MiB && card_used() == 768 * MiB,
          "after the trim: ledger %llu, card %llu",
          (unsigned long long)ledger_used(), (unsigned long long)card_used());
    CHECK(cuMemFree_v2(d) == 0, "free");
    CHECK(ledger_used() == 0, "ledger %llu", (unsigned long long)ledger_used());
    peak_within(GiB, "pool keep");
}

/* A free enqueued on a stream is not given back before the pool can hand
 * the memory out again: only a synchronize (threshold 0) releases it. A
 * created pool and its destruction likewise. */
static void case_pool_stream(void)
{
    CUmemoryPool mine;
    CUdeviceptr a, d;

    CHECK(cuMemAllocAsync(&a, 768 * MiB, NULL) == 0, "async 768");
    CHECK(cuMemFreeAsync(a, NULL) == 0, "free enqueued");
    CHECK(ledger_used() == 768 * MiB, "un-charged at the enqueue: %llu",
          (unsigned long long)ledger_used());
    CHECK(cuStreamSynchronize(NULL) == 0, "sync");
    CHECK(ledger_used() == 0 && card_used() == 0, "after sync: %llu/%llu",
          (unsigned long long)ledger_used(), (unsigned long long)card_used());
    CHECK(cuMemPoolCreate(&mine, NULL) == 0, "create pool");
    CHECK(cuMemAllocFromPoolAsync(&a, 512 * MiB, mine, NULL) == 0, "from pool");
    CHECK(cuMemAllocFromPoolAsync(&d, 768 * MiB, mine, NULL) ==
              CUDA_ERROR_OUT_OF_MEMORY, "beyond from the pool");
    CHECK(cuMemFreeAsync(a, NULL) == 0, "free");
    CHECK(cuMemPoolDestroy(mine) == 0, "destroy");
    CHECK(ledger_used() == 0 && card_used() == 0, "after destroy: %llu/%llu",
          (unsigned long long)ledger_used(), (unsigned long long)card_used());
    peak_within(GiB, "pool stream");
}

/* An event's synchronize is a point where the driver's pools release what
 * passes their threshold too (cudaEventSynchronize after a step): the
 * charge follows at once, as after a stream's synchronize. */
static void case_pool_event(void)
{
    CUevent ev;
    CUdeviceptr a;

    CHECK(cuEventCreate(&ev, 0) == 0, "event");
    CHECK(cuMemAllocAsync(&a, 768 * MiB, NULL) == 0, "async 768");
    CHECK(cuMemFreeAsync(a, NULL) == 0, "free enqueued");
    CHECK(cuEventRecord(ev, NULL) == 0, "record");
    CHECK(ledger_used() == 768 * MiB, "un-charged at the enqueue: %llu",
          (unsigned long long)ledger_used());
    CHECK(cuEventSynchronize(ev) == 0, "event sync");
    CHECK(card_used() == 0, "the stand-in's pool kept it: %llu",
          (unsigned long long)card_used());
    CHECK(ledger_used() == 0, "the event's synchronize freed it on the card "
          "and the charge stayed: %llu", (unsigned long long)ledger_used());
    CHECK(cuEventDestroy_v2(ev) == 0, "destroy event");
    peak_within(GiB, "pool event");
}

/* Every CUDA-runtime program: the primary context, here 384 MiB
 * (FAKE_CUDA_CTX_BYTES), then cudaMalloc to the quota; and a context of
 * cuCtxCreate at its measured size, not a constant. */
static void case_ctx_measured(void)
{
    CUcontext pc, c;
    CUdeviceptr d;

    CHECK(cuDevicePrimaryCtxRetain(&pc, 0) == 0, "primary");
    CHECK(ledger_used() == 384 * MiB, "primary charged %llu",
          (unsigned long long)ledger_used());
    CHECK(cuDevicePrimaryCtxRetain(&pc, 0) == 0 && ledger_used() == 384 * MiB,
          "a second retain costs nothing");
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "768 MiB beside the primary context");
    CHECK(cuCtxCreate_v2(&c, 0, 0) == 0, "a context of 384 MiB");
    CHECK(ledger_used() == 768 * MiB, "measured %llu",
          (unsigned long long)ledger_used());
    CHECK(cuMemAlloc_v2(&d, 384 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "384 MiB beside two contexts");
    CHECK(cuCtxCreate_v2(&c, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY ||
              cuCtxDestroy_v2(c) != 0, "a third context");
    CHECK(cuCtxDestroy_v2(c) == 0, "destroy");
    CHECK(cuDevicePrimaryCtxRelease_v2(0) == 0 && ledger_used() == 384 * MiB,
          "still retained once: %llu", (unsigned long long)ledger_used());
    CHECK(cuDevicePrimaryCtxRelease_v2(0) == 0 && ledger_used() == 0,
          "primary gone: %llu", (unsigned long long)ledger_used());
    CHECK(card_used() == 0, "the stand-in holds %llu",
          (unsigned long long)card_used());
    peak_within(GiB, "contexts");
}

CUresult cuCtxGetDevice(CUdevice *);
CUresult cuCtxSetLimit(CUlimit, size_t);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned,
                        unsigned, unsigned, unsigned, CUstream, void **,
                        void **);

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* An allocation stamps the app's ledger with when it took memory
 * (active_ms, CLOCK_MONOTONIC ms: elastic memory asks the idlest app
 * first); the shim reads the coarse clock, a tick behind at most. */
static void case_stamp(void)
{
    struct ledger_usage u = { 0 };
    uint64_t lo, hi;
    CUdeviceptr d;

    lo = mono_ms();
    CHECK(cuMemAlloc_v2(&d, MiB) == 0, "alloc");
    hi = mono_ms();
    CHECK(ledger_read(ledger_path_env(), &u) == ACCEL_OK, "read");
    CHECK(u.active_ms + 100 >= lo && u.active_ms <= hi,
          "stamp %llu outside [%llu - 100, %llu]",
          (unsigned long long)u.active_ms, (unsigned long long)lo,
          (unsigned long long)hi);
    CHECK(cuMemFree_v2(d) == 0, "free");
}

/* Issue 45 item 5: the stand-ins refuse what the real driver and NVML
 * refuse (cuda.h's and nvml.h's documented returns), and the shim passes
 * each refusal on and charges nothing: every call before cuInit,
 * CUDA_ERROR_NOT_INITIALIZED; the context-bound calls without a current
 * context, CUDA_ERROR_INVALID_CONTEXT; NVML before nvmlInit_v2,
 * NVML_ERROR_UNINITIALIZED (also through the shim's view of the card). */
static void case_refusals(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    nvmlReturn_t (*init)(void) = h ? (nvmlReturn_t(*)(void))(uintptr_t)
                                         dlsym(h, "nvmlInit_v2") : NULL;
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *) =
        h ? (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))(uintptr_t)dlsym(
                h, "nvmlDeviceGetHandleByIndex_v2") : NULL;
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *) =
        h ? (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))(uintptr_t)dlsym(
                h, "nvmlDeviceGetMemoryInfo") : NULL;
    nvmlDevice_t nd = NULL;
    nvmlMemory_t m;
    union gpu_key k;
    CUdeviceptr d;
    CUcontext c;
    CUdevice dev;
    size_t f, t;

    CHECK(init && by_index && mem, "NVML's entry points");
    if (!init || !by_index || !mem)
        return;
    /* first (the shim initialises NVML for itself when it measures a
     * context, and NVML counts a process's inits together) */
    CHECK(by_index(0, &nd) == NVML_ERROR_UNINITIALIZED,
          "NVML before nvmlInit_v2");
    CHECK(mem((nvmlDevice_t)(uintptr_t)0x1000, &m) ==
              NVML_ERROR_UNINITIALIZED, "NVML's memory (the shim's view) "
          "before nvmlInit_v2");
    CHECK(cuMemAlloc_v2(&d, MiB) == CUDA_ERROR_NOT_INITIALIZED,
          "an allocation before cuInit");
    CHECK(cuDevicePrimaryCtxRetain(&c, 0) == CUDA_ERROR_NOT_INITIALIZED,
          "a primary retain before cuInit");
    CHECK(cuCtxCreate_v2(&c, 0, 0) == CUDA_ERROR_NOT_INITIALIZED,
          "a context before cuInit");
    CHECK(cuDeviceTotalMem_v2(&t, 0) == CUDA_ERROR_NOT_INITIALIZED,
          "a device query before cuInit");
    CHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
    for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
        int want = strcmp(paths[i].name, "create") == 0 ? CUDA_SUCCESS
                 : strcmp(paths[i].name, "ctx") == 0 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_CONTEXT; /* VMM and contexts need
                                                * none (cuda.h) */
        int rc = paths[i].alloc(MiB, &k);
        CHECK(rc == want, "%s without a current context: %d", paths[i].name,
              rc);
        if (rc == CUDA_SUCCESS)
            CHECK(paths[i].release(k) == CUDA_SUCCESS, "%s released",
                  paths[i].name);
        if (strcmp(paths[i].name, "ctx") == 0)
            cuCtxSetCurrent(NULL); /* cuCtxCreate made it current */
    }
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_ERROR_INVALID_CONTEXT,
          "cuMemGetInfo without a current context");
    CHECK(cuCtxGetDevice(&dev) == CUDA_ERROR_INVALID_CONTEXT,
          "cuCtxGetDevice without a current context");
    CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 64 * MiB) ==
              CUDA_ERROR_INVALID_CONTEXT, "a limit without a context");
    CHECK(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) ==
              CUDA_ERROR_INVALID_CONTEXT, "a launch without a context");
    CHECK(cuCtxSynchronize() == CUDA_ERROR_INVALID_CONTEXT,
          "a synchronize without a context");
    CHECK(ledger_used() == 0 && card_used() == 0,
          "refusals charged: ledger %llu, card %llu",
          (unsigned long long)ledger_used(), (unsigned long long)card_used());
    CHECK(init() == NVML_SUCCESS && by_index(0, &nd) == NVML_SUCCESS &&
              mem(nd, &m) == NVML_SUCCESS, "NVML after nvmlInit_v2");
}

/* Issue 45 item 5: a context of 512 MiB (FAKE_CUDA_CTX_BYTES) made the
 * way a program makes it (`primary`: retained and made current, as the
 * CUDA runtime does; `create`: cuCtxCreate) on the stand-in that refuses
 * cuMemGetInfo without a current context and NVML before nvmlInit, as the
 * real ones do; then 256 MiB allocations until one is refused. Under the
 * 4 GiB quota the card may hold 4 GiB, not 4.5: 14 allocations fit beside
 * the context, the 15th is refused by the shim (never by the card). */
static void case_ctx_fill(const char *how)
{
    CUdeviceptr d[20];
    CUcontext c = NULL;
    int n = 0;

    if (strcmp(how, "primary") == 0)
        CHECK(cuDevicePrimaryCtxRetain(&c, 0) == 0 && cuCtxSetCurrent(c) == 0,
              "the primary context, current");
    else
        CHECK(cuCtxCreate_v2(&c, 0, 0) == 0, "a context of cuCtxCreate");
    CHECK(ledger_used() == 512 * MiB, "%s context charged %llu MiB", how,
          (unsigned long long)(ledger_used() >> 20));
    while (n < 20 && cuMemAlloc_v2(&d[n], 256 * MiB) == 0)
        n++;
    CHECK(n == 14, "%d allocations of 256 MiB beside a 512 MiB context "
          "under 4 GiB (14 fit)", n);
    CHECK(atomic_load(&fake_cuda_stats()->refused) == 0,
          "the card refused, not the shim");
    peak_within(4 * GiB, how);
    while (n > 0)
        CHECK(cuMemFree_v2(d[--n]) == 0, "free");
}

/* A context made beside another of its device is measured by the driver
 * (cuMemGetInfo_v2 answers in the current context), with no NVML to ask:
 * the stand-in driver alone (FAKE_MIN_DIR: the shim's dlopen finds no
 * libnvidia-ml.so.1 there; this program's own would, through its RUNPATH).
 * Its primary context, made
 * first, has no context current before it to be measured in. */
static void case_ctx_driver(void)
{
    CUcontext pc, c;
    uint64_t base;

    CHECK(cuDevicePrimaryCtxRetain(&pc, 0) == 0 && cuCtxSetCurrent(pc) == 0,
          "the primary context, current");
    base = ledger_used();
    CHECK(cuCtxCreate_v2(&c, 0, 0) == 0, "a context beside it");
    CHECK(ledger_used() - base == 384 * MiB, "charged %llu MiB for a "
          "context of 384 MiB", (unsigned long long)((ledger_used() - base)
                                                   >> 20));
    CHECK(cuCtxDestroy_v2(c) == 0 && ledger_used() == base,
          "given back at its destroy");
}

/* A neighbour (another app, no quota) holds 1.75 of the card's 2 GiB: the
 * app is told 256 MiB free, not the 1 GiB of its quota. */
/* Start the neighbour (case_hold_unlimited) and wait until it holds its
 * 1.75 GiB; its pid. */
static pid_t neighbour(void)
{
    char *hold[] = { "shim_case", "hold_unlimited", NULL };
    char buf[8] = { 0 };
    int fds[2];
    pid_t pid;

    CHECK(pipe(fds) == 0, "pipe");
    pid = spawn(hold, fds[1]);
    close(fds[1]);
    CHECK(read(fds[0], buf, 5) == 5 && strncmp(buf, "ready", 5) == 0,
          "neighbour");
    close(fds[0]);
    return pid;
}

static void case_view_neighbour(void)
{
    uint64_t nt, nf, nu;
    size_t f = 0, t = 0;
    pid_t pid = neighbour();

    CHECK(cuMemGetInfo_v2(&f, &t) == 0, "meminfo");
    CHECK(t == GiB && f == 256 * MiB, "cuMemGetInfo_v2 %zu of %zu", f, t);
    nvml_view(&nt, &nf, &nu);
    CHECK(nt == GiB && nf == 256 * MiB, "nvml %llu of %llu",
          (unsigned long long)nf, (unsigned long long)nt);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* NVML's process list of the card (version 1, 2 or 3): *n entries, the
 * pids in pids[], the sum of their figures returned. */
static uint64_t nvml_procs(int version, unsigned pids[], unsigned *n)
{
    static const char *names[] = { "nvmlDeviceGetComputeRunningProcesses",
                                   "nvmlDeviceGetComputeRunningProcesses_v2",
                                   "nvmlDeviceGetComputeRunningProcesses_v3" };
    void *h = nvml_open();
    nvmlReturn_t (*fn)(nvmlDevice_t, unsigned *, void *) =
        h ? (nvmlReturn_t(*)(nvmlDevice_t, unsigned *, void *))(uintptr_t)
                dlsym(h, names[version - 1])
          : NULL;
    size_t stride = version == 1 ? 16 : 24;
    unsigned char buf[16 * 24];
    uint64_t sum = 0;

    *n = 16;
    CHECK(fn != NULL && fn((nvmlDevice_t)0x1000, n, buf) == 0, "%s",
          names[version - 1]);
    for (unsigned i = 0; i < *n && i < 16; i++) {
        unsigned long long used;
        memcpy(&pids[i], buf + i * stride, sizeof(unsigned));
        memcpy(&used, buf + i * stride + 8, sizeof used);
        sum += used;
    }
    return sum;
}

/* The process list agrees with the header (issue 35; docs/shim.md): a
 * neighbour holds 1.75 of the card's 2 GiB, the app 128 MiB of its 1 GiB
 * quota. The list shows the app's process only, its figure within the
 * header's used, and the header's used is the list's sum plus what the
 * neighbour keeps from the quota (the 768 MiB the card does not have). */
static void case_nvml_procs(void)
{
    uint64_t nt, nf, nu, sum;
    unsigned pids[16] = { 0 }, n = 0;
    CUdeviceptr d;
    pid_t pid = neighbour();

    CHECK(cuMemAlloc_v2(&d, 128 * MiB) == 0, "alloc");
    nvml_view(&nt, &nf, &nu);
    for (int v = 1; v <= 3; v++) {
        sum = nvml_procs(v, pids, &n);
        CHECK(n == 1 && pids[0] == (unsigned)getpid(),
              "v%d: %u processes listed, the first %u (ours %d)", v, n,
              n > 0 ? pids[0] : 0, (int)getpid());
        CHECK(sum <= nu, "v%d: the list holds %llu, the header's used %llu",
              v, (unsigned long long)sum, (unsigned long long)nu);
        CHECK(nu - sum == GiB - 256 * MiB,
              "v%d: the header's used %llu = the list's %llu + the "
              "neighbour's share of the quota", v, (unsigned long long)nu,
              (unsigned long long)sum);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(cuMemFree_v2(d) == 0, "free");
}

/* The neighbour: another app without a quota (its own environment). */
/*
 * Two apps starting at once: a neighbour (another app, no quota) takes
 * 1.5 GiB of the 2 GiB card while the app's primary context is being
 * made (the stand-in waits there: FAKE_CUDA_CTX_SYNC). The context is
 * charged what it took (256 MiB), not all the card's free memory that
 * went meanwhile: before, it was measured at 1.75 GiB, past the 1 GiB
 * quota, and refused (and under a larger quota charged 1.5 GiB of
 * phantom: ts_turns oversub's refusal, issue 49).
 */
static void case_ctx_neighbour(void)
{
    char *cue[] = { "shim_case", "alloc_on_cue", NULL };
    int go[2], done[2], st;
    char env[48];
    CUcontext pc = NULL;
    CUresult rc;
    pid_t pid;

    CHECK(pipe(go) == 0 && pipe(done) == 0, "pipes");
    pid = fork();
    if (pid == 0) {
        dup2(go[0], 0);
        dup2(done[1], 1);
        execv("/proc/self/exe", cue);
        _exit(127);
    }
    close(go[0]);
    close(done[1]);
    snprintf(env, sizeof env, "%d,%d", go[1], done[0]);
    setenv("FAKE_CUDA_CTX_SYNC", env, 1);
    rc = cuDevicePrimaryCtxRetain(&pc, 0);
    CHECK(rc == CUDA_SUCCESS, "the primary context was refused (measured with the neighbour's "
          "allocation)");
    unsetenv("FAKE_CUDA_CTX_SYNC");
    CHECK(card_used() == 256 * MiB + 1536 * MiB,
          "the neighbour did not allocate meanwhile: the card holds %llu",
          (unsigned long long)card_used());
    CHECK(ledger_used() == 256 * MiB, "the context charged %llu, not its "
          "256 MiB", (unsigned long long)ledger_used());
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    close(go[1]);
    close(done[0]);
    if (rc == CUDA_SUCCESS)
        CHECK(cuDevicePrimaryCtxRelease_v2(0) == 0 && ledger_used() == 0,
              "release: %llu", (unsigned long long)ledger_used());
}

/* ctx_neighbour's neighbour: unlimited, another app, its context (of no
 * bytes, so that the card's figures are the test's alone) made first as a
 * real program's is; takes 1.5 GiB when a byte arrives on stdin, says so
 * on stdout, then waits to be killed. */
static void case_alloc_on_cue(char **argv)
{
    CUdeviceptr d;
    char b;

    if (getenv("ACCEL_MEMORY_LIMIT") != NULL) {
        unsetenv("ACCEL_MEMORY_LIMIT");
        setenv("ACCEL_APP", "neighbour", 1);
        setenv("FAKE_CUDA_CTX_BYTES", "0", 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    runtime_ctx();
    if (read(0, &b, 1) != 1)
        _exit(3);
    CHECK(cuMemAlloc_v2(&d, 1536 * MiB) == 0, "neighbour's 1.5 GiB");
    if (write(1, "d", 1) != 1)
        _exit(3);
    pause();
}

static void case_hold_unlimited(char **argv)
{
    CUdeviceptr d;
    if (getenv("ACCEL_MEMORY_LIMIT") != NULL) {
        unsetenv("ACCEL_MEMORY_LIMIT");
        setenv("ACCEL_APP", "neighbour", 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    runtime_ctx(); /* as the other app, after the exec */
    CHECK(cuMemAlloc_v2(&d, 1792 * MiB) == 0, "neighbour's 1.75 GiB");
    printf("ready\n");
    fflush(stdout);
    pause();
}

CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, void **);
CUresult cuGraphAddMemAllocNode(void **, void *, const void *, size_t, void *);
CUresult cuGraphAddNode(void **, void *, const void *, size_t, void *);

/* CUDA graph memory is refused under a quota, with a line in ACCEL_LOG:
 * a memory node added to a graph, by either call, and a stream-ordered
 * allocation made while its stream is captured (PyTorch's graphs with
 * the cudaMallocAsync backend). Other nodes and uncaptured streams pass. */
static void case_graph_mem(void)
{
    CUstream s = (CUstream)(uintptr_t)0x77;
    int params[32] = { 10 }; /* CU_GRAPH_NODE_TYPE_MEM_ALLOC */
    void *node, *graph;
    CUdeviceptr d;
    char buf[4096] = { 0 };
    int fd;

    CHECK(cuGraphAddMemAllocNode(&node, NULL, NULL, 0, params) ==
              CUDA_ERROR_OUT_OF_MEMORY, "memory node added");
    CHECK(cuGraphAddNode(&node, NULL, NULL, 0, params) ==
              CUDA_ERROR_OUT_OF_MEMORY, "memory node by cuGraphAddNode");
    params[0] = 0; /* a kernel node */
    CHECK(cuGraphAddNode(&node, NULL, NULL, 0, params) == 0, "kernel node");
    CHECK(cuStreamBeginCapture_v2(s, 0) == 0, "capture");
    CHECK(cuMemAllocAsync(&d, MiB, s) == CUDA_ERROR_OUT_OF_MEMORY,
          "allocation during capture");
    CHECK(cuStreamEndCapture(s, &graph) == 0, "end capture");
    CHECK(cuMemAllocAsync(&d, MiB, s) == 0 && cuMemFreeAsync(d, s) == 0,
          "after the capture");
    fd = open(getenv("ACCEL_LOG"), O_RDONLY);
    CHECK(fd >= 0 && read(fd, buf, sizeof(buf) - 1) > 0, "log");
    if (fd >= 0)
        close(fd);
    CHECK(strstr(buf, "CUDA graph memory (cuGraphAddMemAllocNode) refused"),
          "no log line: %s", buf);
}

/* Host-located cuMemCreate takes no VRAM and is not charged. */
static void case_create_host(void)
{
    CUmemAllocationProp p = { .type = 1, .location = { 2, 0 } };
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, 2 * GiB, &p, 0) == 0, "host create");
    CHECK(ledger_used() == 0, "host create was charged");
    CHECK(cuMemRelease(h) == 0, "release");
}

/* The runtime's path: entry points from cuGetProcAddress(_v2). */
static void case_procaddr(void)
{
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, int *) = NULL;
    CUresult (*async)(CUdeviceptr *, size_t, CUstream) = NULL;
    CUdeviceptr d, e;

    CHECK(cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc, 12000, 0, NULL) ==
              0 && alloc != NULL, "lookup");
    CHECK(alloc(&d, 768 * MiB) == 0, "within");
    CHECK(alloc(&e, 512 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "beyond via pfn");
    CHECK(cuGetProcAddress_v2("cuGetProcAddress", (void **)&gpa, 12000, 0,
                              NULL) == 0 && gpa != NULL, "nested");
    CHECK(gpa("cuMemAllocAsync", (void **)&async, 12000, 2, NULL) == 0,
          "ptsz lookup");
    CHECK(async(&e, 512 * MiB, NULL) == CUDA_ERROR_OUT_OF_MEMORY,
          "beyond via nested ptsz");
    alloc = NULL;
    CHECK(cuGetProcAddress("cuMemAlloc", (void **)&alloc, 11000, 0) == 0,
          "v1 lookup");
    CHECK(alloc(&e, 512 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "beyond via v1");
    CHECK(cuMemFree_v2(d) == 0, "free");
    CHECK(ledger_used() == 0, "ledger not 0");
}

/* A driver that hands out internal entry points (FAKE_CUDA_INTERNAL): the
 * one hooked variant of cuMemAlloc at this version is still held; the
 * ambiguous cuCtxCreate (_v2, _v3, _v4) is said once in ACCEL_LOG. */
static void case_procaddr_internal(void)
{
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    void *ctx = NULL;
    CUdeviceptr d, e;
    char buf[4096] = { 0 }, *p;
    int fd, n = 0;

    CHECK(cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc, 12000, 0,
                              NULL) == 0 && alloc != NULL, "lookup");
    CHECK(alloc(&d, 768 * MiB) == 0, "within");
    CHECK(alloc(&e, 512 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "an internal cuMemAlloc_v2 went by unheld");
    CHECK(cuMemFree_v2(d) == 0 && ledger_used() == 0, "free");
    for (int i = 0; i < 2; i++)
        CHECK(cuGetProcAddress_v2("cuCtxCreate", &ctx, 12000, 0, NULL) == 0,
              "ctx lookup");
    fd = open(getenv("ACCEL_LOG"), O_RDONLY);
    CHECK(fd >= 0 && read(fd, buf, sizeof(buf) - 1) >= 0, "log");
    if (fd >= 0)
        close(fd);
    for (p = buf; (p = strstr(p, "cuGetProcAddress(cuCtxCreate")); p++)
        n++;
    CHECK(n == 1, "unheld cuCtxCreate said %d times: %s", n, buf);
    CHECK(strstr(buf, "cuMemAlloc") == NULL, "cuMemAlloc said unheld");
}

static void case_unknown_free(void)
{
    struct fake_cuda_stats *st = fake_cuda_stats();
    CUresult rc = cuMemFree_v2(0x123456789000ULL);
    CHECK(rc == CUDA_ERROR_INVALID_VALUE, "driver's answer passed: %d", rc);
    CHECK(atomic_load(&st->unknown_frees) == 1, "free not at driver");
    CHECK(atomic_load(&st->last_free) == 0x123456789000ULL, "wrong pointer");
    CHECK(cuMemRelease(77) == CUDA_ERROR_INVALID_VALUE, "release unknown");
    CHECK(atomic_load(&st->unknown_frees) == 2, "release not at driver");
}

/* Missing real symbols (FAKE_MINIMAL driver): an error code, no crash. */
static void case_missing(void)
{
    CUdeviceptr d;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp p = { .type = 1, .location = { 1, 0 } };
    CHECK(cuMemAllocManaged(&d, MiB, 1) == CUDA_ERROR_NOT_FOUND, "managed");
    CHECK(cuMemCreate(&h, MiB, &p, 0) == CUDA_ERROR_NOT_FOUND, "create");
    CHECK(cuMemAlloc_v2(&d, MiB) == 0 && cuMemFree_v2(d) == 0, "alloc ok");
}

static void nvml_view(uint64_t *total, uint64_t *free_, uint64_t *used)
{
    void *h = nvml_open();
    nvmlReturn_t (*get)(nvmlDevice_t, nvmlMemory_t *) =
        h ? (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))(uintptr_t)dlsym(
                h, "nvmlDeviceGetMemoryInfo")
          : NULL;
    nvmlReturn_t (*get2)(nvmlDevice_t, nvmlMemory_v2_t *) =
        h ? (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))(uintptr_t)dlsym(
                h, "nvmlDeviceGetMemoryInfo_v2")
          : NULL;
    nvmlMemory_t m = { 0 };
    nvmlMemory_v2_t m2 = { 0 };
    CHECK(get && get((nvmlDevice_t)0x1000, &m) == 0, "nvml v1");
    CHECK(get2 && get2((nvmlDevice_t)0x1000, &m2) == 0, "nvml v2");
    /* _v2 keeps the driver's reserve apart: when the card's free memory
     * is what limits the view, its free is that much smaller */
    CHECK(m2.total == m.total && m2.free <= m.free &&
              m.free - m2.free <= MiB, "nvml v1/v2 differ");
    CHECK(m.free + m.used == m.total, "nvml free+used != total");
    *total = m.total;
    *free_ = m.free;
    *used = m.used;
}

/* argv: expected total (0 = physical). Checks every query agrees. */
static void view_expect(uint64_t want_total, uint64_t want_used)
{
    size_t f = 0, t = 0, dt = 0;
    uint64_t nt, nf, nu;
    CHECK(cuMemGetInfo_v2(&f, &t) == 0, "meminfo");
    CHECK(cuDeviceTotalMem_v2(&dt, 0) == 0, "totalmem");
    nvml_view(&nt, &nf, &nu);
    CHECK(t == want_total && dt == want_total && nt == want_total,
          "total %zu/%zu/%llu want %llu", t, dt, (unsigned long long)nt,
          (unsigned long long)want_total);
    CHECK(f == want_total - want_used && nf == f, "free %zu/%llu want %llu",
          f, (unsigned long long)nf,
          (unsigned long long)(want_total - want_used));
    CHECK(f <= t, "free > total (underflow)");
}

static void case_view(int limited)
{
    uint64_t total = limited ? GiB : 16 * GiB;
    CUdeviceptr d, e;
    view_expect(total, 0);
    CHECK(cuMemAlloc_v2(&d, 256 * MiB) == 0, "alloc");
    view_expect(total, 256 * MiB);
    if (limited) { /* acceld lowers the limit below the usage */
        CHECK(ledger_set_limit(ledger_path_env(), 128 * MiB) == ACCEL_OK,
              "lower");
        view_expect(128 * MiB, 128 * MiB);
        CHECK(cuMemAlloc_v2(&e, MiB) == CUDA_ERROR_OUT_OF_MEMORY, "over");
    }
    CHECK(cuMemFree_v2(d) == 0, "free");
}

/* acceld's way: ledger_create + ledger_write_config, ACCEL_CONFIG set
 * before the first CUDA call; limit 512 MiB on ordinal 0, NVML by UUID. */
static void case_config(void)
{
    char dir[400], led[512], cfg[512];
    struct ledger_device dev = { 0, 512 * MiB, led, "GPU-face0000-0000-0000-0000-000000000000", NULL, NULL, NULL };
    struct ledger_usage u = { 0 };
    CUdeviceptr d, e;
    uint64_t nt, nf, nu;
    size_t f, t;

    snprintf(dir, sizeof(dir), "%s/run", getenv("XDG_RUNTIME_DIR"));
    CHECK(ledger_path(led, sizeof(led), dir, "cfg-app", 0) == ACCEL_OK, "path");
    CHECK(ledger_path(led, sizeof(led), dir, "../x", 0) == ACCEL_EINVAL, "..");
    CHECK(ledger_path(led, sizeof(led), dir, "cfg-app", 0) == ACCEL_OK, "path");
    snprintf(cfg, sizeof(cfg), "%s/cfg-app.shim.conf", dir);
    CHECK(ledger_create(led, "cfg-app", 0, "GPU-face0000-0000-0000-0000-000000000000", 512 * MiB, (uid_t)-1,
                        (gid_t)-1) == ACCEL_OK, "create");
    CHECK(ledger_write_config(cfg, "cfg-app", &dev, 1) == ACCEL_OK, "config");
    setenv("ACCEL_CONFIG", cfg, 1); /* before the shim's first hook runs */
    setenv("ACCEL_MEMORY_LIMIT", "8Gi", 1); /* ignored under ACCEL_CONFIG */
    runtime_ctx(); /* the program's first CUDA call after cuInit */
    CHECK(cuMemAlloc_v2(&d, 384 * MiB) == 0, "within");
    CHECK(cuMemAlloc_v2(&e, 256 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "beyond");
    CHECK(cuMemGetInfo_v2(&f, &t) == 0 && t == 512 * MiB && f == 128 * MiB,
          "view %zu/%zu", f, t);
    nvml_view(&nt, &nf, &nu);
    CHECK(nt == 512 * MiB && nu == 384 * MiB, "nvml by uuid %llu/%llu",
          (unsigned long long)nt, (unsigned long long)nu);
    CHECK(ledger_read(led, &u) == ACCEL_OK && u.used == 384 * MiB &&
              u.processes == 1 && u.limit == 512 * MiB, "read %llu %u",
          (unsigned long long)u.used, u.processes);
    /* acceld restarts: ledger_create again keeps the usage */
    CHECK(ledger_create(led, "cfg-app", 0, "GPU-face0000-0000-0000-0000-000000000000", 512 * MiB, (uid_t)-1,
                        (gid_t)-1) == ACCEL_OK, "re-create");
    CHECK(ledger_read(led, &u) == ACCEL_OK && u.used == 384 * MiB, "kept");
    CHECK(cuMemFree_v2(d) == 0, "free");
    CHECK(ledger_read(led, &u) == ACCEL_OK && u.used == 0, "after free");
    CHECK(ledger_remove(led) == ACCEL_OK && ledger_remove(led) == ACCEL_OK,
          "remove");
}

/* A live quota (SPEC 4.4) as acceld writes it (livequota.c): the config
 * first, then the ledger's limit and epoch. A cut refuses the next
 * allocation of a process above it until it is under; a raise past the
 * config the process read at its start is taken at its next allocation
 * (the epoch moved: the config is read again); a limit the app writes into
 * its own ledger (it can: the file is its group's) without acceld's
 * config raises nothing. */
static void live_set(const char *cfg, struct ledger_device *dev,
                     const char *led, uint64_t limit)
{
    dev->limit = limit;
    CHECK(ledger_write_config(cfg, "live-app", dev, 1) == ACCEL_OK,
          "config %llu", (unsigned long long)limit);
    CHECK(ledger_set_limit(led, limit) == ACCEL_OK, "limit");
}

static void case_live_quota(void)
{
    char dir[400], led[512], cfg[512];
    struct ledger_device dev = { 0, 512 * MiB, led, "", NULL, NULL, NULL };
    CUdeviceptr a, b, c;
    size_t f, t;

    snprintf(dir, sizeof(dir), "%s/run", getenv("XDG_RUNTIME_DIR"));
    CHECK(ledger_path(led, sizeof(led), dir, "live-app", 0) == ACCEL_OK,
          "path");
    snprintf(cfg, sizeof(cfg), "%s/live-app.shim.conf", dir);
    CHECK(ledger_create(led, "live-app", 0, "", 512 * MiB, (uid_t)-1,
                        (gid_t)-1) == ACCEL_OK, "create");
    CHECK(ledger_write_config(cfg, "live-app", &dev, 1) == ACCEL_OK,
          "config");
    setenv("ACCEL_CONFIG", cfg, 1);
    runtime_ctx(); /* the program's first CUDA call after cuInit */
    CHECK(cuMemAlloc_v2(&a, 384 * MiB) == 0, "within 512 MiB");
    /* cut to 256 MiB below the 384 MiB held: refused until under */
    live_set(cfg, &dev, led, 256 * MiB);
    CHECK(cuMemAlloc_v2(&b, MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "1 MiB over the cut");
    CHECK(cuMemGetInfo_v2(&f, &t) == 0 && t == 256 * MiB && f == 0,
          "view after the cut %zu/%zu", f, t);
    CHECK(cuMemFree_v2(a) == 0, "free");
    CHECK(cuMemAlloc_v2(&a, 256 * MiB) == 0, "under the cut again");
    CHECK(cuMemAlloc_v2(&b, MiB) == CUDA_ERROR_OUT_OF_MEMORY, "at the cut");
    /* raise to 1 GiB, past the 512 MiB of the config read at start */
    live_set(cfg, &dev, led, GiB);
    CHECK(cuMemAlloc_v2(&b, 640 * MiB) == 0, "within the raise (896 MiB)");
    CHECK(cuMemGetInfo_v2(&f, &t) == 0 && t == GiB && f == 128 * MiB,
          "view after the raise %zu/%zu", f, t);
    CHECK(cuMemAlloc_v2(&c, 256 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "beyond the raise");
    /* the app writes 4 GiB into its ledger itself: nothing moves */
    CHECK(ledger_set_limit(led, 4 * GiB) == ACCEL_OK, "app's own write");
    CHECK(cuMemAlloc_v2(&c, 256 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "an app's own raise");
    CHECK(cuMemFree_v2(a) == 0 && cuMemFree_v2(b) == 0, "free all");
    CHECK(ledger_remove(led) == ACCEL_OK, "remove");
    unlink(cfg);
}

/* The memory NVML shows for the card of NVML index idx. */
static uint64_t nvml_total_of(unsigned idx)
{
    void *h = nvml_open();
    nvmlReturn_t (*get)(nvmlDevice_t, nvmlMemory_t *) =
        h ? (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))(uintptr_t)dlsym(
                h, "nvmlDeviceGetMemoryInfo")
          : NULL;
    nvmlMemory_t m = { 0 };
    CHECK(get && get((nvmlDevice_t)(uintptr_t)(0x1000 + idx), &m) == 0,
          "nvml %u", idx);
    return m.total;
}

/* Standalone under CUDA_VISIBLE_DEVICES=1 with a quota on CUDA ordinal 0
 * only: NVML's card 1 is that ordinal (its quota), card 0 is not the
 * app's (the whole card), whatever their NVML indices. */
static void case_nvml_visible(void)
{
    CHECK(nvml_total_of(1) == GiB, "card 1 (CUDA 0): %llu",
          (unsigned long long)nvml_total_of(1));
    CHECK(nvml_total_of(0) == 16 * GiB, "card 0 (not visible): %llu",
          (unsigned long long)nvml_total_of(0));
}

/* Under acceld: the app's ordinal 0 is bound to NVML card 1 (by UUID); an
 * unbound card (NVML index 0) never shows the app's quota. */
static void case_nvml_unbound(void)
{
    const char *uuid = "GPU-face0000-0000-0000-0000-000000000001";
    char dir[400], led[512], cfg[512];
    struct ledger_device dev = { 0, 512 * MiB, led, uuid, NULL, NULL, NULL };

    snprintf(dir, sizeof(dir), "%s/run", getenv("XDG_RUNTIME_DIR"));
    CHECK(ledger_path(led, sizeof(led), dir, "unb-app", 0) == ACCEL_OK, "path");
    snprintf(cfg, sizeof(cfg), "%s/unb-app.shim.conf", dir);
    CHECK(ledger_create(led, "unb-app", 0, uuid, 512 * MiB, (uid_t)-1,
                        (gid_t)-1) == ACCEL_OK, "create");
    CHECK(ledger_write_config(cfg, "unb-app", &dev, 1) == ACCEL_OK, "config");
    setenv("ACCEL_CONFIG", cfg, 1);
    CHECK(nvml_total_of(1) == 512 * MiB, "bound card: %llu",
          (unsigned long long)nvml_total_of(1));
    CHECK(nvml_total_of(0) == 16 * GiB, "unbound card: %llu",
          (unsigned long long)nvml_total_of(0));
    CHECK(ledger_remove(led) == ACCEL_OK, "remove");
}

/* Wait up to ms for pid; 1 = exited with status 0. Kills it on time-out. */
static int wait_bounded(pid_t pid, int ms, const char *what)
{
    int st = 0;
    for (int i = 0; i < ms; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (r < 0 && errno != EINTR)
            return 0;
        usleep(1000);
    }
    fprintf(stderr, "%s: pid %d still running after %d ms (spinning?)\n",
            what, (int)pid, ms);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return 0;
}

static void *alloc_free_256m(void *arg)
{
    CUdeviceptr d;
    (void)arg;
    runtime_ctx(); /* a new thread has no current context */
    if (cuMemAlloc_v2(&d, 256 * MiB) != 0)
        return (void *)1;
    return cuMemFree_v2(d) == 0 ? NULL : (void *)1;
}

/* Whether a line of /proc/locks shows a process waiting ("->") on a flock. */
static int flock_waiter(void)
{
    char line[256];
    int found = 0;
    FILE *f = fopen("/proc/locks", "r");
    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        int pid = 0;
        if (strstr(line, "-> FLOCK") != NULL &&
            sscanf(strstr(line, "FLOCK"), "FLOCK %*s %*s %d", &pid) == 1)
            found = pid == (int)getpid();
    }
    fclose(f);
    return found;
}

/* Issue 10, item 9 (deterministic): a fork while another thread is attaching
 * the device's ledger. The ledger's flock is held from outside, so the
 * attaching thread is parked inside attach when we fork; the child must
 * attach again itself (old code: it inherited the BUSY mark and spun). */
static void case_fork_attach(void)
{
    char dir[512];
    pthread_t th;
    void *ret = NULL;
    int fd;
    pid_t pid;

    snprintf(dir, sizeof(dir), "%s/accel", getenv("XDG_RUNTIME_DIR"));
    mkdir(dir, 0700);
    fd = open(ledger_path_env(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0, "hold the ledger's flock");
    CHECK(pthread_create(&th, NULL, alloc_free_256m, NULL) == 0, "thread");
    for (int i = 0; i < 10000 && !flock_waiter(); i++)
        usleep(1000);
    CHECK(flock_waiter(), "the allocating thread never waited on the flock");
    pid = fork();
    if (pid == 0) {
        close(fd); /* the test's lock is the parent's to drop */
        _exit(alloc_free_256m(NULL) == NULL ? 0 : 1);
    }
    usleep(20000); /* let the child reach its first allocation */
    flock(fd, LOCK_UN);
    close(fd);
    CHECK(pthread_join(th, &ret) == 0 && ret == NULL, "parent's allocation");
    CHECK(wait_bounded(pid, 20000, "child"),
          "the child forked during attach could not allocate");
}

struct race_arg {
    _Atomic int stop;
    pthread_barrier_t go;
};

static void *alloc_loop(void *p)
{
    struct race_arg *a = p;
    CUdeviceptr d;
    runtime_ctx();
    pthread_barrier_wait(&a->go);
    while (!a->stop)
        if (cuMemAlloc_v2(&d, MiB) == 0)
            cuMemFree_v2(d);
    return NULL;
}

/* One round: a fresh process (a fork child attaches anew) starts 4
 * allocating threads and forks at once; the grandchild allocates. */
static int fork_race_round(unsigned seed)
{
    struct race_arg a = { 0 };
    pthread_t th[4];
    int ok;
    pid_t g;

    pthread_barrier_init(&a.go, NULL, 5);
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, alloc_loop, &a);
    pthread_barrier_wait(&a.go); /* the threads attach from here on */
    for (volatile unsigned spin = rnd(&seed) % 20000; spin > 0; spin--)
        ; /* fork at a random point of the attach (0 to ~50 us) */
    g = fork();
    if (g == 0) {
        CUdeviceptr d;
        _exit(cuMemAlloc_v2(&d, MiB) == 0 ? 0 : 1);
    }
    ok = g > 0 && wait_bounded(g, 5000, "grandchild");
    a.stop = 1;
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    return ok;
}

/* Issue 10, item 9 (the random race): 300 forks beside 4 allocating
 * threads, each fork during a fresh attach; bounded in time. */
static void case_fork_race(int rounds)
{
    int bad = 0;
    for (int r = 0; r < rounds && bad == 0; r++) {
        pid_t w = fork();
        if (w == 0)
            _exit(fork_race_round((unsigned)r * 2654435761u + 1) ? 0 : 1);
        if (!wait_bounded(w, 15000, "round"))
            bad++;
    }
    CHECK(bad == 0, "a round of %d had a child stuck or failing", rounds);
}

/* Allocate `bytes`, retrying for up to 3 s (a refusal reclaims at most
 * every 100 ms); 1 on success. */
static int alloc_within(uint64_t bytes, CUdeviceptr *d)
{
    for (int i = 0; i < 300; i++) {
        if (cuMemAlloc_v2(d, bytes) == 0)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* Issue 10, item 9 (standalone): a sibling (exec'd) or a forked worker is
 * SIGKILLed while holding 768 MiB of the 1 GiB; the survivor, attached
 * before, gets that share back on its next allocation that needs it (old
 * code: only a newly attaching process reclaimed). */
static void case_reclaim(void)
{
    CUdeviceptr mine, big, tmp;
    char buf[8];
    int fds[2];

    CHECK(cuMemAlloc_v2(&mine, 256 * MiB) == 0, "survivor's 256 MiB");
    for (int round = 0; round < 2; round++) {
        pid_t pid;
        memset(buf, 0, sizeof(buf));
        CHECK(pipe(fds) == 0, "pipe");
        if (round == 0) {
            char *hold[] = { "shim_case", "hold", NULL };
            pid = spawn(hold, fds[1]);
        } else {
            pid = fork(); /* a forked worker, no exec */
            if (pid == 0) {
                close(fds[0]);
                dup2(fds[1], 1);
                case_hold(&cuda);
                _exit(1);
            }
        }
        close(fds[1]);
        CHECK(read(fds[0], buf, 5) == 5 && strncmp(buf, "ready", 5) == 0,
              "holder %d", round);
        close(fds[0]);
        CHECK(cuMemAlloc_v2(&tmp, MiB) == CUDA_ERROR_OUT_OF_MEMORY,
              "quota full while the holder lives");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (!alloc_within(768 * MiB, &big)) {
            CHECK(0, "round %d: the killed %s's 768 MiB never came back",
                  round, round == 0 ? "sibling" : "forked worker");
            break;
        }
        CHECK(cuMemFree_v2(big) == 0, "free");
    }
    CHECK(cuMemFree_v2(mine) == 0, "free");
}

/* Elastic memory on every allocation path the quota holds (SPEC 4.4): a
 * card of 1 GiB (FAKE_CUDA_TOTAL) of which another app (a process without
 * the shim) holds 768 MiB; this app's 512 MiB through PATH is within its
 * 1 GiB quota but the card is short, so the shim asks acceld's reclaim
 * socket (here the test's own server, which has the other app free its
 * memory and answers "ok") and the call succeeds the second time. Before,
 * only cuMemAlloc_v2, pitch and cuMemCreate asked: the others failed as
 * on a full card. */
static struct {
    int fd;              /* the reclaim socket */
    pid_t hog;           /* the other app */
    int hog_out;         /* its "freed" line */
    _Atomic int asks;
} el;

/* The other app: 768 MiB on the card until SIGUSR1, then freed. */
static void case_hog(void)
{
    CUdeviceptr p = 0;
    sigset_t set;
    int sig = 0;

    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if (cuMemAlloc_v2(&p, 768 * MiB) != CUDA_SUCCESS)
        _exit(3);
    (void)!write(1, "ready", 5);
    sigwait(&set, &sig);
    cuMemFree_v2(p);
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

/* This app: started with acceld's config (the shim reads it at cuInit),
 * the other app's pid and pipe from its parent. */
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
    CHECK(pth->alloc(512 * MiB, &k) == CUDA_SUCCESS,
          "%s: 512 MiB within the quota on a short card", which);
    CHECK(atomic_load(&el.asks) >= 1 && el.hog == 0,
          "%s: acceld was not asked (%d asks)", which, atomic_load(&el.asks));
    CHECK(pth->release(k) == CUDA_SUCCESS, "release");
    if (pth->settle)
        pth->settle();
    peak_within(GiB, which);
    shutdown(el.fd, SHUT_RDWR);
    close(el.fd);
    pthread_join(th, NULL);
    unlink(sock);
}

static void case_elastic(const char *which)
{
    char dir[400], led[512], cfg[512], sock[108], buf[8] = "", num[24];
    struct ledger_device dev = { 0, GiB, led, "", NULL, NULL, sock };
    char *hog_argv[] = { "shim_case", "hog", NULL };
    char *run_argv[] = { "shim_case", "elastic_run", (char *)which, NULL };
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

/* The cases that make their contexts themselves (their subject). */
static int own_ctx(const char *c, const char *arg)
{
    static const char *const own[] = {
        "ctx_limit", "green_ctx", "ctx_reset", "legacy_abi", "ctx_known",
        "ctx_seeded",
        "ctx_known_child", "ctx_measured", "ctx_fill", "ctx_driver",
        "ctx_neighbour", "alloc_on_cue", /* theirs after the exec */
        /* theirs once their setting is made: the config and the ledger's
         * flock come before the first CUDA call after cuInit */
        "config", "live_quota", "fork_attach", "hold_unlimited",
        "nvml_unbound", /* NVML only */
        NULL
    };

    for (int i = 0; own[i] != NULL; i++)
        if (strcmp(c, own[i]) == 0)
            return 1;
    return strcmp(c, "refuse") == 0 && strcmp(arg, "ctx") == 0;
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";

    if (strcmp(c, "refusals") == 0) { /* before cuInit */
        case_refusals();
        return cases_done(&cuda, c);
    }
    if (strcmp(c, "nvml_visible_noinit") == 0) { /* an NVML-only program: */
        case_nvml_visible();     /* CUDA refuses the shim's UUID queries */
        return cases_done(&cuda, c);
    }
    cuInit(0); /* as every CUDA program does first */
    if (!own_ctx(c, argc > 2 ? argv[2] : ""))
        runtime_ctx();
    if (run_quota_case(&cuda, argc, argv) || run_escape_case(c, argv, argc))
        return cases_done(&cuda, c);
    if (strcmp(c, "create_host") == 0)
        case_create_host();
    else if (strcmp(c, "procaddr") == 0)
        case_procaddr();
    else if (strcmp(c, "procaddr_internal") == 0)
        case_procaddr_internal();
    else if (strcmp(c, "unknown_free") == 0)
        case_unknown_free();
    else if (strcmp(c, "missing") == 0)
        case_missing();
    else if (strcmp(c, "view") == 0)
        case_view(argc > 2 && strcmp(argv[2], "limited") == 0);
    else if (strcmp(c, "reclaim") == 0)
        case_reclaim();
    else if (strcmp(c, "fork_attach") == 0)
        case_fork_attach();
    else if (strcmp(c, "fork_race") == 0 && argc > 2)
        case_fork_race((int)strtol(argv[2], NULL, 10));
    else if (strcmp(c, "config") == 0)
        case_config();
    else if (strcmp(c, "live_quota") == 0)
        case_live_quota();
    else if (strcmp(c, "elastic") == 0 && argc > 2)
        case_elastic(argv[2]);
    else if (strcmp(c, "hog") == 0)
        case_hog();
    else if (strcmp(c, "elastic_run") == 0 && argc > 2)
        case_elastic_run(argv[2]);
    else if (strcmp(c, "nvml_visible") == 0)
        case_nvml_visible();
    else if (strcmp(c, "nvml_unbound") == 0)
        case_nvml_unbound();
    else if (strcmp(c, "graph_mem") == 0)
        case_graph_mem();
    else if (strcmp(c, "vmm_mapped") == 0)
        case_vmm_mapped();
    else if (strcmp(c, "pool_keep") == 0)
        case_pool_keep();
    else if (strcmp(c, "pool_stream") == 0)
        case_pool_stream();
    else if (strcmp(c, "pool_event") == 0)
        case_pool_event();
    else if (strcmp(c, "ctx_measured") == 0)
        case_ctx_measured();
    else if (strcmp(c, "stamp") == 0)
        case_stamp();
    else if (strcmp(c, "ctx_driver") == 0)
        case_ctx_driver();
    else if (strcmp(c, "ctx_fill") == 0 && argc > 2)
        case_ctx_fill(argv[2]);
    else if (strcmp(c, "view_neighbour") == 0)
        case_view_neighbour();
    else if (strcmp(c, "nvml_procs") == 0)
        case_nvml_procs();
    else if (strcmp(c, "hold_unlimited") == 0)
        case_hold_unlimited(argv);
    else if (strcmp(c, "ctx_neighbour") == 0)
        case_ctx_neighbour();
    else if (strcmp(c, "alloc_on_cue") == 0)
        case_alloc_on_cue(argv);
    else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    return cases_done(&cuda, c);
}
