/* SPDX-License-Identifier: MIT */
/*
 * shim_case.c: the snippet program of the shim tests. It is linked against
 * the fake libcuda.so.1 and run under LD_PRELOAD=libaccelshim.so by CTest;
 * argv[1] picks the case, the environment (set per test in CMakeLists.txt)
 * the limit. Exit status 0 = pass; each failed check prints why.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/node/ledger.h"
#include "fake_cuda.h"
#include "shim/cuda_types.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

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
struct fake_cuda_stats *fake_cuda_stats(void);

static int failures;

#define CHECK(c, ...)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            failures++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #c);       \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)

static char ledger_file[512];

static const char *ledger_path_env(void)
{
    snprintf(ledger_file, sizeof(ledger_file), "%s/accel/shim-%s-dev0.ledger",
             getenv("XDG_RUNTIME_DIR"), getenv("ACCEL_APP"));
    return ledger_file;
}

static uint64_t ledger_used(void)
{
    struct ledger_usage u = { 0 };
    enum accel_err rc = ledger_read(ledger_path_env(), &u);
    if (rc == ACCEL_ENOTFOUND) /* nothing was ever charged */
        return 0;
    if (rc != ACCEL_OK)
        return (uint64_t)-1;
    return u.used;
}

/* One allocation path: a first allocation within, one beyond the limit. */
struct path {
    const char *name;
    CUresult (*alloc)(uint64_t bytes, CUdeviceptr *key);
    CUresult (*release)(uint64_t key);
};

static CUresult a_alloc(uint64_t b, CUdeviceptr *k) { return cuMemAlloc_v2(k, b); }
static CUresult a_managed(uint64_t b, CUdeviceptr *k)
{
    return cuMemAllocManaged(k, b, 1);
}
static CUresult a_pitch(uint64_t b, CUdeviceptr *k)
{
    size_t pitch;
    return cuMemAllocPitch_v2(k, &pitch, 1000, b / 1000, 4);
}
static CUresult a_async(uint64_t b, CUdeviceptr *k)
{
    return cuMemAllocAsync(k, b, NULL);
}
static CUresult a_async_ptsz(uint64_t b, CUdeviceptr *k)
{
    return cuMemAllocAsync_ptsz(k, b, NULL);
}
static CUresult a_pool(uint64_t b, CUdeviceptr *k)
{
    return cuMemAllocFromPoolAsync(k, b, NULL, NULL);
}
static CUresult a_pool_ptsz(uint64_t b, CUdeviceptr *k)
{
    return cuMemAllocFromPoolAsync_ptsz(k, b, NULL, NULL);
}
static CUresult a_create(uint64_t b, CUdeviceptr *k)
{
    CUmemAllocationProp p = { .type = 1, .location = { 1, 0 } };
    return cuMemCreate(k, b, &p, 0);
}
static CUresult a_array(uint64_t b, CUdeviceptr *k)
{
    CUDA_ARRAY_DESCRIPTOR d = { .Width = 1024, .Height = b / 4096,
                                .Format = 0x20, .NumChannels = 1 };
    CUarray a;
    CUresult rc = cuArrayCreate_v2(&a, &d);
    *k = (uint64_t)(uintptr_t)a;
    return rc;
}
static CUresult a_array3d(uint64_t b, CUdeviceptr *k)
{
    CUDA_ARRAY3D_DESCRIPTOR d = { .Width = 1024, .Height = 1024,
                                  .Depth = b / (4 * MiB), .Format = 0x20,
                                  .NumChannels = 1 };
    CUarray a;
    CUresult rc = cuArray3DCreate_v2(&a, &d);
    *k = (uint64_t)(uintptr_t)a;
    return rc;
}
static CUresult a_mipmap(uint64_t b, CUdeviceptr *k)
{
    CUDA_ARRAY3D_DESCRIPTOR d = { .Width = 1024, .Height = b / 4096,
                                  .Format = 0x20, .NumChannels = 1 };
    CUmipmappedArray a;
    CUresult rc = cuMipmappedArrayCreate(&a, &d, 1);
    *k = (uint64_t)(uintptr_t)a;
    return rc;
}
static CUresult a_ctx(uint64_t b, CUdeviceptr *k)
{
    CUcontext c;
    CUresult rc = CUDA_SUCCESS;
    (void)b;
    rc = cuCtxCreate_v2(&c, 0, 0);
    *k = (uint64_t)(uintptr_t)c;
    return rc;
}
static CUresult r_free(uint64_t k) { return cuMemFree_v2(k); }
static CUresult r_free_async(uint64_t k) { return cuMemFreeAsync(k, NULL); }
static CUresult r_free_ptsz(uint64_t k) { return cuMemFreeAsync_ptsz(k, NULL); }
static CUresult r_release(uint64_t k) { return cuMemRelease(k); }
static CUresult r_array(uint64_t k) { return cuArrayDestroy((CUarray)k); }
static CUresult r_mipmap(uint64_t k)
{
    return cuMipmappedArrayDestroy((CUmipmappedArray)k);
}
static CUresult r_ctx(uint64_t k) { return cuCtxDestroy_v2((CUcontext)k); }

static const struct path paths[] = {
    { "alloc", a_alloc, r_free },         { "managed", a_managed, r_free },
    { "pitch", a_pitch, r_free },         { "async", a_async, r_free_async },
    { "async_ptsz", a_async_ptsz, r_free_ptsz },
    { "pool", a_pool, r_free_async },     { "pool_ptsz", a_pool_ptsz, r_free },
    { "create", a_create, r_release },    { "array", a_array, r_array },
    { "array3d", a_array3d, r_array },    { "mipmap", a_mipmap, r_mipmap },
    { "ctx", a_ctx, r_ctx },
};

/* Limit 1 GiB: 768 MiB fits, 512 MiB more does not and never reaches the
 * driver; after the free the ledger is back at 0. Contexts cost 256 MiB. */
static void case_refuse(const char *which)
{
    struct fake_cuda_stats *st = fake_cuda_stats();
    CUdeviceptr k1 = 0, k2 = 0, k3 = 0, k4 = 0, k5 = 0;
    int ctx = strcmp(which, "ctx") == 0;

    for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
        const struct path *p = &paths[i];
        if (strcmp(p->name, which) != 0)
            continue;
        CHECK(p->alloc(768 * MiB, &k1) == CUDA_SUCCESS, "first %s", which);
        if (ctx) { /* 4 x 256 MiB fit in 1 GiB, the 5th not */
            CHECK(p->alloc(0, &k2) == 0 && p->alloc(0, &k3) == 0 &&
                      p->alloc(0, &k4) == 0, "ctx 2-4");
        }
        uint64_t allocs = atomic_load(&st->allocs);
        CUresult rc = p->alloc(512 * MiB, &k5);
        CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "%s beyond: rc %d", which, rc);
        CHECK(atomic_load(&st->allocs) == allocs, "refused call reached driver");
        CHECK(p->release(k1) == CUDA_SUCCESS, "release");
        if (ctx)
            p->release(k2), p->release(k3), p->release(k4);
        CHECK(ledger_used() == 0, "ledger after free: %llu",
              (unsigned long long)ledger_used());
        CHECK(atomic_load(&st->used) == 0, "driver still holds memory");
        return;
    }
    CHECK(0, "no path %s", which);
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

/* Driver failure gives the reservation back. */
static void case_driver_fail(void)
{
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, 100 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "fail");
    CHECK(ledger_used() == 0, "reservation kept: %llu",
          (unsigned long long)ledger_used());
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
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
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
    CHECK(m2.total == m.total && m2.used == m.used, "nvml v1/v2 differ");
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
    struct ledger_device dev = { 0, 512 * MiB, led, "GPU-fake-0", NULL };
    struct ledger_usage u = { 0 };
    CUdeviceptr d, e;
    uint64_t nt, nf, nu;
    size_t f, t;

    snprintf(dir, sizeof(dir), "%s/run", getenv("XDG_RUNTIME_DIR"));
    CHECK(ledger_path(led, sizeof(led), dir, "cfg-app", 0) == ACCEL_OK, "path");
    CHECK(ledger_path(led, sizeof(led), dir, "../x", 0) == ACCEL_EINVAL, "..");
    CHECK(ledger_path(led, sizeof(led), dir, "cfg-app", 0) == ACCEL_OK, "path");
    snprintf(cfg, sizeof(cfg), "%s/cfg-app.shim.conf", dir);
    CHECK(ledger_create(led, "cfg-app", 0, "GPU-fake-0", 512 * MiB, (uid_t)-1,
                        (gid_t)-1) == ACCEL_OK, "create");
    CHECK(ledger_write_config(cfg, "cfg-app", &dev, 1) == ACCEL_OK, "config");
    setenv("ACCEL_CONFIG", cfg, 1); /* before the shim's first hook runs */
    setenv("ACCEL_MEMORY_LIMIT", "8Gi", 1); /* ignored under ACCEL_CONFIG */
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
    CHECK(ledger_create(led, "cfg-app", 0, "GPU-fake-0", 512 * MiB, (uid_t)-1,
                        (gid_t)-1) == ACCEL_OK, "re-create");
    CHECK(ledger_read(led, &u) == ACCEL_OK && u.used == 384 * MiB, "kept");
    CHECK(cuMemFree_v2(d) == 0, "free");
    CHECK(ledger_read(led, &u) == ACCEL_OK && u.used == 0, "after free");
    CHECK(ledger_remove(led) == ACCEL_OK && ledger_remove(led) == ACCEL_OK,
          "remove");
}

static unsigned rnd(unsigned *s)
{
    *s ^= *s << 13; /* xorshift32: the low bits of an LCG cycle too fast */
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* A worker: `iters` rounds of alloc (random size up to max) and free,
 * keeping up to 8 live buffers (16 of 256 MiB in the SPEC 11 case). */
static void case_worker(int iters, uint64_t max, unsigned seed, long start)
{
    CUdeviceptr live[16] = { 0 };
    unsigned slots = max == 256 * MiB ? 16 : 8; /* 256 MiB case: 4 GiB each */
    struct timespec now;

    do { /* all workers start together, so they really contend */
        clock_gettime(CLOCK_REALTIME, &now);
    } while (now.tv_sec * 1000L + now.tv_nsec / 1000000L < start);
    for (int i = 0; i < iters; i++) {
        int s = (int)(rnd(&seed) % slots);
        sched_yield(); /* interleave with the other workers while holding */
        if (live[s] != 0) {
            CHECK(cuMemFree_v2(live[s]) == 0, "free");
            live[s] = 0;
        } else {
            uint64_t b = max == 256 * MiB ? max : 1 + rnd(&seed) % max;
            CUresult rc = cuMemAlloc_v2(&live[s], b);
            CHECK(rc == 0 || rc == CUDA_ERROR_OUT_OF_MEMORY, "rc %d", rc);
            if (rc != 0)
                live[s] = 0;
        }
    }
    for (unsigned s = 0; s < slots; s++)
        if (live[s] != 0)
            cuMemFree_v2(live[s]);
}

static pid_t spawn(char *const argv[], int out_fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (out_fd >= 0)
            dup2(out_fd, 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

static int wait_ok(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void case_stress(int nproc, const char *iters, const char *max,
                        uint64_t limit)
{
    struct fake_cuda_stats *st = fake_cuda_stats();
    pid_t pids[64];
    char seed[16], start[32];
    struct timespec now;
    struct ledger_usage lu = { 0 };

    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(start, sizeof(start), "%ld",
             now.tv_sec * 1000L + now.tv_nsec / 1000000L + 300);
    for (int i = 0; i < nproc && i < 64; i++) {
        snprintf(seed, sizeof(seed), "%d", i + 1);
        char *argv[] = { "shim_case", "worker", (char *)iters, (char *)max,
                         seed, start, NULL };
        pids[i] = spawn(argv, -1);
    }
    for (int i = 0; i < nproc && i < 64; i++)
        CHECK(wait_ok(pids[i]), "worker %d failed", i);
    CHECK((uint64_t)atomic_load(&st->max_used) <= limit,
          "driver held %lld > limit %llu", (long long)atomic_load(&st->max_used),
          (unsigned long long)limit);
    CHECK(atomic_load(&st->used) == 0, "driver still holds memory");
    CHECK(ledger_used() == 0, "ledger ends at %llu",
          (unsigned long long)ledger_used());
    CHECK(ledger_read(ledger_path_env(), &lu) == ACCEL_OK, "ledger");
    CHECK(lu.peak >= limit / 2, "no contention (peak %llu): test too weak",
          (unsigned long long)lu.peak);
    printf("max held by the driver %lld of %llu, ledger peak %llu, "
           "%llu allocations\n",
           (long long)atomic_load(&st->max_used), (unsigned long long)limit,
           (unsigned long long)lu.peak,
           (unsigned long long)atomic_load(&st->allocs));
}

/* Allocate, say "ready", wait to be killed. */
static void case_hold(uint64_t bytes)
{
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, bytes) == 0, "hold alloc");
    printf("ready\n");
    fflush(stdout);
    pause();
}

static void case_kill(void)
{
    int fds[2];
    char buf[8] = { 0 };
    struct timespec ts;
    CHECK(pipe(fds) == 0, "pipe");
    char *hold[] = { "shim_case", "hold", NULL };
    pid_t pid = spawn(hold, fds[1]);
    close(fds[1]);
    CHECK(read(fds[0], buf, 5) == 5 && strncmp(buf, "ready", 5) == 0, "hold");
    CHECK(ledger_used() == 768 * MiB, "held %llu",
          (unsigned long long)ledger_used());
    kill(pid, SIGKILL);
    wait_ok(pid);
    CHECK(ledger_used() == 0, "dead process not reclaimed: %llu",
          (unsigned long long)ledger_used());
    /* Kill processes at random moments, start-up included. */
    for (int i = 0; i < 40; i++) {
        char *full[] = { "shim_case", "full", NULL };
        pid = spawn(full, -1);
        ts.tv_sec = 0;
        ts.tv_nsec = (long)(rand() % 3000) * 1000;
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        wait_ok(pid);
    }
    char *full[] = { "shim_case", "full", NULL };
    CHECK(wait_ok(spawn(full, -1)), "a process after the kills was blocked");
}

/* The whole 1 GiB quota, then free. */
static void case_full(void)
{
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, GiB) == 0, "full quota not available");
    CHECK(cuMemFree_v2(d) == 0, "free");
}

static void case_fork(void)
{
    CUdeviceptr d, e;
    CHECK(cuMemAlloc_v2(&d, 512 * MiB) == 0, "parent");
    pid_t pid = fork();
    if (pid == 0) {
        CHECK(cuMemAlloc_v2(&e, 512 * MiB) == 0, "child within");
        CHECK(cuMemAlloc_v2(&e, MiB) == CUDA_ERROR_OUT_OF_MEMORY, "child over");
        _exit(failures ? 1 : 0);
    }
    CHECK(wait_ok(pid), "child");
    CHECK(ledger_used() == 512 * MiB, "child's charge not given back: %llu",
          (unsigned long long)ledger_used());
    CHECK(cuMemFree_v2(d) == 0, "free");
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
    volatile int stop;
    pthread_barrier_t go;
};

static void *alloc_loop(void *p)
{
    struct race_arg *a = p;
    CUdeviceptr d;
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
                case_hold(768 * MiB);
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

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";

    if (strcmp(c, "refuse") == 0 && argc > 2)
        case_refuse(argv[2]);
    else if (strcmp(c, "create_host") == 0)
        case_create_host();
    else if (strcmp(c, "driver_fail") == 0)
        case_driver_fail();
    else if (strcmp(c, "procaddr") == 0)
        case_procaddr();
    else if (strcmp(c, "unknown_free") == 0)
        case_unknown_free();
    else if (strcmp(c, "missing") == 0)
        case_missing();
    else if (strcmp(c, "view") == 0)
        case_view(argc > 2 && strcmp(argv[2], "limited") == 0);
    else if (strcmp(c, "worker") == 0 && argc > 5)
        case_worker((int)strtol(argv[2], NULL, 10), strtoull(argv[3], NULL, 0),
                    (unsigned)strtol(argv[4], NULL, 10),
                    strtol(argv[5], NULL, 10));
    else if (strcmp(c, "stress") == 0 && argc > 5)
        case_stress((int)strtol(argv[2], NULL, 10), argv[3], argv[4],
                    strtoull(argv[5], NULL, 0));
    else if (strcmp(c, "hold") == 0)
        case_hold(768 * MiB);
    else if (strcmp(c, "kill") == 0)
        case_kill();
    else if (strcmp(c, "full") == 0)
        case_full();
    else if (strcmp(c, "fork") == 0)
        case_fork();
    else if (strcmp(c, "reclaim") == 0)
        case_reclaim();
    else if (strcmp(c, "fork_attach") == 0)
        case_fork_attach();
    else if (strcmp(c, "fork_race") == 0 && argc > 2)
        case_fork_race((int)strtol(argv[2], NULL, 10));
    else if (strcmp(c, "config") == 0)
        case_config();
    else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    printf("%s: %d failed\n", c, failures);
    return failures ? 1 : 0;
}
