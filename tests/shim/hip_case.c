/* SPDX-License-Identifier: MIT */
/*
 * hip_case.c: the HIP snippet program of the shim tests. Linked against the
 * stand-in libamdhip64.so.6 (fake_hip.c) and run under
 * LD_PRELOAD=libaccelshim.so by CTest, as shim_case.c is for CUDA: the same
 * ledger, the same quota rules, the same races (8 processes on one quota,
 * fork, kill -9). argv[1] picks the case. Exit status 0 = pass. It proves
 * the shim's logic against a stand-in, not against ROCm.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/node/ledger.h"
#include "fake_cuda.h"
#include "shim/hip_types.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

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
struct fake_cuda_stats *fake_hip_stats(void);

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
    if (rc == ACCEL_ENOTFOUND)
        return 0;
    return rc == ACCEL_OK ? u.used : (uint64_t)-1;
}

/* One allocation path: allocate about b bytes into *k, release k. */
struct path {
    const char *name;
    hipError_t (*alloc)(uint64_t b, void **k);
    hipError_t (*release)(void *k);
};

static hipError_t a_malloc(uint64_t b, void **k) { return hipMalloc(k, b); }
static hipError_t a_managed(uint64_t b, void **k)
{
    return hipMallocManaged(k, b, 1);
}
static hipError_t a_ext(uint64_t b, void **k)
{
    return hipExtMallocWithFlags(k, b, 0);
}
static hipError_t a_pitch(uint64_t b, void **k)
{
    size_t pitch = 0;
    return hipMallocPitch(k, &pitch, 1000, b / 1000);
}
static hipError_t a_async(uint64_t b, void **k)
{
    return hipMallocAsync(k, b, NULL);
}
static hipError_t a_pool(uint64_t b, void **k)
{
    return hipMallocFromPoolAsync(k, b, NULL, NULL);
}
static hipError_t a_array(uint64_t b, void **k)
{
    struct hip_channel_desc d = { 32, 0, 0, 0, 2 };
    return hipMallocArray((hipArray_t *)k, &d, 1024, b / 4096, 0);
}
static hipError_t a_array3d(uint64_t b, void **k)
{
    struct hip_channel_desc d = { 32, 0, 0, 0, 2 };
    struct hip_extent e = { 1024, 1024, b / (4 * MiB) };
    return hipMalloc3DArray((hipArray_t *)k, &d, e, 0);
}
static hipError_t a_create(uint64_t b, void **k)
{
    struct hip_array_desc d = { 1024, b / 4096, 0x20, 1 };
    return hipArrayCreate((hipArray_t *)k, &d);
}
static hipError_t r_free(void *k) { return hipFree(k); }
static hipError_t r_free_async(void *k) { return hipFreeAsync(k, NULL); }
static hipError_t r_free_array(void *k) { return hipFreeArray(k); }
static hipError_t r_destroy(void *k) { return hipArrayDestroy(k); }

static const struct path paths[] = {
    { "malloc", a_malloc, r_free },     { "managed", a_managed, r_free },
    { "ext", a_ext, r_free },           { "pitch", a_pitch, r_free },
    { "async", a_async, r_free_async }, { "pool", a_pool, r_free_async },
    { "array", a_array, r_free_array }, { "array3d", a_array3d, r_free_array },
    { "arraycreate", a_create, r_destroy },
};

/* Limit 1 GiB: 768 MiB fits, 512 MiB more is refused with
 * hipErrorOutOfMemory and never reaches the runtime; the free gives it
 * all back. */
static void case_refuse(const char *which)
{
    struct fake_cuda_stats *st = fake_hip_stats();
    void *k1 = NULL, *k2 = NULL;

    for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
        const struct path *p = &paths[i];
        uint64_t allocs;
        hipError_t rc;
        if (strcmp(p->name, which) != 0)
            continue;
        CHECK(p->alloc(768 * MiB, &k1) == hipSuccess, "first %s", which);
        CHECK(ledger_used() >= 768 * MiB, "%s not charged: %llu", which,
              (unsigned long long)ledger_used());
        allocs = atomic_load(&st->allocs);
        rc = p->alloc(512 * MiB, &k2);
        CHECK(rc == hipErrorOutOfMemory, "%s beyond: rc %d", which, rc);
        CHECK(atomic_load(&st->allocs) == allocs, "refused call reached HIP");
        CHECK(p->release(k1) == hipSuccess, "release");
        CHECK(ledger_used() == 0, "ledger after free: %llu",
              (unsigned long long)ledger_used());
        CHECK(atomic_load(&st->used) == 0, "runtime still holds memory");
        return;
    }
    CHECK(0, "no path %s", which);
}

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

static void case_driver_fail(void)
{
    void *d = NULL;
    CHECK(hipMalloc(&d, 100 * MiB) == hipErrorOutOfMemory, "fail");
    CHECK(ledger_used() == 0, "reservation kept: %llu",
          (unsigned long long)ledger_used());
}

static void case_unknown_free(void)
{
    struct fake_cuda_stats *st = fake_hip_stats();
    hipError_t rc = hipFree((void *)(uintptr_t)0x123456789000ULL);
    CHECK(rc == hipErrorInvalidValue, "runtime's answer passed: %d", rc);
    CHECK(atomic_load(&st->unknown_frees) == 1, "free not at runtime");
}

static unsigned rnd(unsigned *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* A worker: iters rounds of hipMalloc (up to max bytes) and hipFree over
 * 8 slots, all workers starting at the same instant. */
static void case_worker(int iters, uint64_t max, unsigned seed, long start)
{
    void *live[8] = { 0 };
    struct timespec now;

    do {
        clock_gettime(CLOCK_REALTIME, &now);
    } while (now.tv_sec * 1000L + now.tv_nsec / 1000000L < start);
    for (int i = 0; i < iters; i++) {
        int s = (int)(rnd(&seed) % 8);
        sched_yield();
        if (live[s] != NULL) {
            CHECK(hipFree(live[s]) == hipSuccess, "free");
            live[s] = NULL;
        } else {
            hipError_t rc = hipMalloc(&live[s], 1 + rnd(&seed) % max);
            CHECK(rc == hipSuccess || rc == hipErrorOutOfMemory, "rc %d", rc);
            if (rc != hipSuccess)
                live[s] = NULL;
        }
    }
    for (int s = 0; s < 8; s++)
        if (live[s] != NULL)
            hipFree(live[s]);
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

/* nproc processes on one quota: the runtime never holds more than it. */
static void case_stress(int nproc, const char *iters, const char *max,
                        uint64_t limit)
{
    struct fake_cuda_stats *st = fake_hip_stats();
    struct ledger_usage lu = { 0 };
    char seed[16], start[32];
    struct timespec now;
    pid_t pids[64];

    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(start, sizeof(start), "%ld",
             now.tv_sec * 1000L + now.tv_nsec / 1000000L + 300);
    for (int i = 0; i < nproc && i < 64; i++) {
        char *argv[] = { "hip_case", "worker", (char *)iters, (char *)max,
                         seed, start, NULL };
        snprintf(seed, sizeof(seed), "%d", i + 1);
        pids[i] = spawn(argv, -1);
    }
    for (int i = 0; i < nproc && i < 64; i++)
        CHECK(wait_ok(pids[i]), "worker %d failed", i);
    CHECK((uint64_t)atomic_load(&st->max_used) <= limit,
          "runtime held %lld > limit %llu",
          (long long)atomic_load(&st->max_used), (unsigned long long)limit);
    CHECK(atomic_load(&st->used) == 0, "runtime still holds memory");
    CHECK(ledger_used() == 0, "ledger ends at %llu",
          (unsigned long long)ledger_used());
    CHECK(ledger_read(ledger_path_env(), &lu) == ACCEL_OK, "ledger");
    CHECK(lu.peak >= limit / 2, "no contention (peak %llu): test too weak",
          (unsigned long long)lu.peak);
}

static void case_hold(void)
{
    void *d = NULL;
    CHECK(hipMalloc(&d, 768 * MiB) == hipSuccess, "hold alloc");
    printf("ready\n");
    fflush(stdout);
    pause();
}

static void case_full(void)
{
    void *d = NULL;
    CHECK(hipMalloc(&d, GiB) == hipSuccess, "full quota not available");
    CHECK(hipFree(d) == hipSuccess, "free");
}

/* kill -9 of a holder: its 768 MiB are reclaimed; random kills, start-up
 * included, never leave the quota blocked. */
static void case_kill(void)
{
    char buf[8] = { 0 };
    struct timespec ts;
    char *hold[] = { "hip_case", "hold", NULL };
    char *full[] = { "hip_case", "full", NULL };
    int fds[2];
    pid_t pid;

    CHECK(pipe(fds) == 0, "pipe");
    pid = spawn(hold, fds[1]);
    close(fds[1]);
    CHECK(read(fds[0], buf, 5) == 5 && strncmp(buf, "ready", 5) == 0, "hold");
    close(fds[0]);
    CHECK(ledger_used() == 768 * MiB, "held %llu",
          (unsigned long long)ledger_used());
    kill(pid, SIGKILL);
    wait_ok(pid);
    CHECK(ledger_used() == 0, "dead process not reclaimed: %llu",
          (unsigned long long)ledger_used());
    for (int i = 0; i < 40; i++) {
        pid = spawn(full, -1);
        ts.tv_sec = 0;
        ts.tv_nsec = (long)(rand() % 3000) * 1000;
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        wait_ok(pid);
    }
    CHECK(wait_ok(spawn(full, -1)), "a process after the kills was blocked");
}

/* A fork child has its own slot: the parent's charge is not its to free,
 * its own goes back when it exits. */
static void case_fork(void)
{
    void *d = NULL, *e = NULL;
    pid_t pid;

    CHECK(hipMalloc(&d, 512 * MiB) == hipSuccess, "parent");
    pid = fork();
    if (pid == 0) {
        CHECK(hipMalloc(&e, 512 * MiB) == hipSuccess, "child within");
        CHECK(hipMalloc(&e, MiB) == hipErrorOutOfMemory, "child over");
        _exit(failures ? 1 : 0);
    }
    CHECK(wait_ok(pid), "child");
    CHECK(ledger_used() == 512 * MiB, "child's charge not given back: %llu",
          (unsigned long long)ledger_used());
    CHECK(hipFree(d) == hipSuccess, "free");
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";

    if (strcmp(c, "refuse") == 0 && argc > 2)
        case_refuse(argv[2]);
    else if (strcmp(c, "view") == 0)
        case_view(argc > 2 && strcmp(argv[2], "limited") == 0);
    else if (strcmp(c, "procaddr") == 0)
        case_procaddr();
    else if (strcmp(c, "dlsym") == 0)
        case_dlsym();
    else if (strcmp(c, "missing") == 0)
        case_missing();
    else if (strcmp(c, "driver_fail") == 0)
        case_driver_fail();
    else if (strcmp(c, "unknown_free") == 0)
        case_unknown_free();
    else if (strcmp(c, "worker") == 0 && argc > 5)
        case_worker((int)strtol(argv[2], NULL, 10), strtoull(argv[3], NULL, 0),
                    (unsigned)strtol(argv[4], NULL, 10),
                    strtol(argv[5], NULL, 10));
    else if (strcmp(c, "stress") == 0 && argc > 5)
        case_stress((int)strtol(argv[2], NULL, 10), argv[3], argv[4],
                    strtoull(argv[5], NULL, 0));
    else if (strcmp(c, "hold") == 0)
        case_hold();
    else if (strcmp(c, "full") == 0)
        case_full();
    else if (strcmp(c, "kill") == 0)
        case_kill();
    else if (strcmp(c, "fork") == 0)
        case_fork();
    else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    printf("%s: %d failed\n", c, failures);
    return failures ? 1 : 0;
}
