/* SPDX-License-Identifier: MIT */
/*
 * fake_nvml.c: a stand-in libnvidia-ml.so.1 for the shim tests: the card
 * of FAKE_CUDA_TOTAL bytes whose used memory is the fake driver's record
 * (FAKE_CUDA_SHM), so NVML and CUDA tell the same physical story, down to
 * each process's figure (nvmlDeviceGetComputeRunningProcesses). Its
 * UUIDs are the fake driver's cuDeviceGetUuid bytes, printed as NVML does.
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <stdio.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "shim/cuda_types.h"

#define EXPORT __attribute__((visibility("default")))

/* The card's record, read-only; NULL without one. */
static const struct fake_cuda_stats *card(void)
{
    static const struct fake_cuda_stats *st;
    const char *shm = getenv("FAKE_CUDA_SHM");
    void *m;
    int fd;

    if (st != NULL)
        return st;
    fd = shm ? open(shm, O_RDONLY) : -1;
    if (fd < 0)
        return NULL;
    m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED)
        st = m;
    return st;
}

static int64_t used_now(void)
{
    const struct fake_cuda_stats *st = card();
    int64_t u = st ? atomic_load(&st->used) : 0;
    return u < 0 ? 0 : u;
}

static unsigned long long total(void)
{
    const char *t = getenv("FAKE_CUDA_TOTAL");
    return t ? strtoull(t, NULL, 0) : (16ULL << 30);
}

/* Like the real NVML, every call but the init ones is refused with
 * NVML_ERROR_UNINITIALIZED until nvmlInit_v2 (or nvmlInit) has been
 * called, and again after as many nvmlShutdown as inits. */
static _Atomic int inits;
#define NEED_INIT()                                                            \
    do {                                                                       \
        if (atomic_load(&inits) <= 0)                                          \
            return 1; /* NVML_ERROR_UNINITIALIZED */                           \
    } while (0)
EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    atomic_fetch_add(&inits, 1);
    return 0;
}
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
EXPORT nvmlReturn_t nvmlShutdown(void)
{
    NEED_INIT();
    atomic_fetch_sub(&inits, 1);
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    NEED_INIT();
    *d = (nvmlDevice_t)(uintptr_t)(0x1000 + i);
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i)
{
    NEED_INIT();
    *i = (unsigned)((uintptr_t)d - 0x1000);
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
{
    NEED_INIT();
    *n = 16;
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *u, unsigned n)
{
    NEED_INIT();
    snprintf(u, n, "GPU-face0000-0000-0000-0000-0000000000%02x",
             (unsigned)((uintptr_t)d - 0x1000));
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *u, nvmlDevice_t *d)
{
    NEED_INIT();
    char want[96];
    for (unsigned i = 0; i < 16; i++) {
        nvmlDeviceGetUUID((nvmlDevice_t)(uintptr_t)(0x1000 + i), want,
                          sizeof(want));
        if (strcmp(u, want) == 0) {
            *d = (nvmlDevice_t)(uintptr_t)(0x1000 + i);
            return 0;
        }
    }
    return 6; /* NVML_ERROR_NOT_FOUND */
}

/* nvmlProcessInfo_v1_t and _v2_t (the _v2 and _v3 calls). */
struct proc_v1 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
};
struct proc_v2 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
};

/* Every live process holding memory of the card: the driver's list. */
static nvmlReturn_t procs(unsigned *count, void *infos, int v2)
{
    const struct fake_cuda_stats *st = card();
    unsigned n = 0;

    for (int i = 0; st != NULL && i < FAKE_PROCS; i++) {
        int64_t pid = atomic_load(&st->procs[i].pid);
        int64_t used = atomic_load(&st->procs[i].used);
        if (pid == 0 || used <= 0 ||
            (kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue;
        if (n < *count && infos != NULL && v2) {
            struct proc_v2 *p = (struct proc_v2 *)infos + n;
            p->pid = (unsigned)pid;
            p->usedGpuMemory = (unsigned long long)used;
            p->gpuInstanceId = p->computeInstanceId = 0xffffffffu;
        } else if (n < *count && infos != NULL) {
            struct proc_v1 *p = (struct proc_v1 *)infos + n;
            p->pid = (unsigned)pid;
            p->usedGpuMemory = (unsigned long long)used;
        }
        n++;
    }
    if (n > *count) {
        *count = n;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    *count = n;
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d,
                                                         unsigned *count,
                                                         void *infos)
{
    NEED_INIT();
    (void)d;
    return procs(count, infos, 0);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d,
                                                            unsigned *count,
                                                            void *infos)
{
    NEED_INIT();
    (void)d;
    return procs(count, infos, 1);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d,
                                                            unsigned *count,
                                                            void *infos)
{
    NEED_INIT();
    (void)d;
    return procs(count, infos, 1);
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    NEED_INIT();
    (void)d;
    m->total = total();
    m->used = (unsigned long long)used_now();
    m->free = m->total - m->used;
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d,
                                               nvmlMemory_v2_t *m)
{
    NEED_INIT();
    (void)d;
    m->total = total();
    m->reserved = 1ULL << 20;
    m->used = (unsigned long long)used_now();
    m->free = m->total - m->used - m->reserved;
    return 0;
}
