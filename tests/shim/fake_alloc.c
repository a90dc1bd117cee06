/* SPDX-License-Identifier: MIT */
/*
 * fake_alloc.c: the stand-in drivers' simulated device memory (fake_alloc.h).
 * A key is fake_base + (index << 12); the index's size is kept in a private
 * table so that a free of a key never handed out is told apart.
 */
#define _GNU_SOURCE 1
#include "fake_alloc.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAKE_SLOTS (1u << 22)

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

struct fake_cuda_stats *fake_record(void)
{
    pthread_once(&fk.once, fake_init);
    return fk.st;
}

uint64_t fake_take(uint64_t bytes)
{
    struct fake_cuda_stats *st = fake_record();
    int64_t now, m;
    uint64_t idx;

    if (fk.fail)
        return 0;
    now = atomic_fetch_add(&st->used, (int64_t)bytes) + (int64_t)bytes;
    if ((uint64_t)now > fk.total) {
        atomic_fetch_sub(&st->used, (int64_t)bytes);
        return 0;
    }
    m = atomic_load(&st->max_used);
    while (now > m && !atomic_compare_exchange_weak(&st->max_used, &m, now))
        ;
    idx = atomic_fetch_add(&fk.next, 1) % FAKE_SLOTS;
    fk.sizes[idx] = bytes ? bytes : 1;
    atomic_fetch_add(&st->allocs, 1);
    return fake_base + (idx << 12);
}

int fake_give(uint64_t key)
{
    struct fake_cuda_stats *st = fake_record();
    uint64_t idx = (key - fake_base) >> 12;

    atomic_store(&st->last_free, key);
    if (key < fake_base || idx >= FAKE_SLOTS || fk.sizes[idx] == 0) {
        atomic_fetch_add(&st->unknown_frees, 1);
        return -1;
    }
    atomic_fetch_sub(&st->used, (int64_t)fk.sizes[idx]);
    fk.sizes[idx] = 0;
    atomic_fetch_add(&st->frees, 1);
    return 0;
}

void fake_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    int64_t u = atomic_load(&fake_record()->used);

    if (free_bytes != NULL)
        *free_bytes = fk.total - (size_t)(u < 0 ? 0 : u);
    *total_bytes = fk.total;
}
