/* SPDX-License-Identifier: MIT */
/*
 * fake_nvml.c: a stand-in libnvidia-ml.so.1 for the shim tests: one device
 * of FAKE_CUDA_TOTAL bytes whose used memory is the fake driver's record
 * (FAKE_CUDA_SHM), so NVML and CUDA tell the same physical story.
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "shim/cuda_types.h"

#define EXPORT __attribute__((visibility("default")))

static int64_t used_now(void)
{
    const char *shm = getenv("FAKE_CUDA_SHM");
    struct fake_cuda_stats *st;
    int64_t u = 0;
    int fd = shm ? open(shm, O_RDONLY) : -1;

    if (fd < 0)
        return 0;
    st = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (st != MAP_FAILED) {
        u = atomic_load(&st->used);
        munmap(st, 4096);
    }
    return u < 0 ? 0 : u;
}

static unsigned long long total(void)
{
    const char *t = getenv("FAKE_CUDA_TOTAL");
    return t ? strtoull(t, NULL, 0) : (16ULL << 30);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return 0; }
EXPORT nvmlReturn_t nvmlShutdown(void) { return 0; }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    *d = (nvmlDevice_t)(uintptr_t)(0x1000 + i);
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i)
{
    *i = (unsigned)((uintptr_t)d - 0x1000);
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *u, unsigned n)
{
    snprintf(u, n, "GPU-fake-%u", (unsigned)((uintptr_t)d - 0x1000));
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    (void)d;
    m->total = total();
    m->used = (unsigned long long)used_now();
    m->free = m->total - m->used;
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d,
                                               nvmlMemory_v2_t *m)
{
    (void)d;
    m->total = total();
    m->reserved = 1ULL << 20;
    m->used = (unsigned long long)used_now();
    m->free = m->total - m->used - m->reserved;
    return 0;
}
