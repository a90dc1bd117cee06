/* SPDX-License-Identifier: MIT */
/*
 * fake_alloc.c: the stand-in drivers' simulated card (fake_alloc.h).
 * A key is fake_base + (index << 12); the index's size and what it is (a
 * plain allocation, a VMM handle and its references, a pool's allocation)
 * are kept in private tables so that a free of a key never handed out is
 * told apart. The card's totals live in the shared record.
 */
#define _GNU_SOURCE 1
#include "fake_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAKE_SLOTS (1u << 22)
#define FAKE_MAPS 4096
#define FAKE_POOLS 64           /* 0..15: the devices' default pools */
#define FAKE_DEVS 16

#define VMM_RELEASED (1ULL << 63) /* in sizes[]: the handle was released */

enum key_kind { K_FREE = 0, K_PLAIN = 1, K_VMM = 2, K_POOL = 3 };

struct fake_pool {
    int live;
    uint64_t reserved, in_use, threshold, reserved_high, used_high;
};

static struct {
    pthread_once_t once;
    struct fake_cuda_stats *st;
    struct fake_proc *me;   /* this process's entry, NULL if none free */
    pthread_mutex_t me_mu;  /* taking that entry */
    uint64_t total;
    uint64_t ctx_bytes;
    int fail;
    _Atomic uint64_t next;  /* next pointer index */
    uint64_t *sizes;        /* bytes by pointer index */
    uint8_t *kind;          /* enum key_kind by pointer index */
    uint32_t *aux;          /* VMM: references (release + maps); pool: index */
    uint64_t *owner;        /* the context a plain key was made in, 0 none */
    uint8_t *shared;        /* VMM: its shared entry + 1, 0 not shared */
    pthread_mutex_t mu;     /* guards maps, pools and VMM references */
    struct { uint64_t va, size, handle; } maps[FAKE_MAPS];
    struct fake_pool pools[FAKE_POOLS];
    uintptr_t current[FAKE_DEVS];
    uint64_t next_va;
} fk = { .once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER };

static uint64_t env_bytes(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v ? strtoull(v, NULL, 0) : dflt;
}

/* The index + 1 of this process's app (ACCEL_APP), 0 when full. */
static int64_t app_index(struct fake_cuda_stats *st)
{
    uint64_t key = fake_app_key(getenv("ACCEL_APP"));

    for (int i = 0; i < FAKE_APPS; i++) {
        uint64_t k = atomic_load(&st->apps[i].key);
        if (k == key ||
            (k == 0 && atomic_compare_exchange_strong(&st->apps[i].key, &k,
                                                      key)) ||
            k == key)
            return i + 1;
    }
    return 0;
}

static void reap_dead(struct fake_cuda_stats *st);

/* This process's entry of the card's per-process table. */
static struct fake_proc *proc_entry(struct fake_cuda_stats *st)
{
    int64_t pid = getpid();

    for (int i = 0; i < FAKE_PROCS; i++)
        if (atomic_load(&st->procs[i].pid) == pid) /* before an exec */
            return &st->procs[i];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < FAKE_PROCS; i++) {
            int64_t z = 0;
            if (atomic_compare_exchange_strong(&st->procs[i].pid, &z, pid)) {
                atomic_store(&st->procs[i].used, 0);
                atomic_store(&st->procs[i].app, app_index(st));
                return &st->procs[i];
            }
        }
        reap_dead(st); /* full: dead processes' entries come back */
    }
    return NULL;
}

static struct fake_app *app_of(struct fake_cuda_stats *st, struct fake_proc *p)
{
    int64_t a = p != NULL ? atomic_load(&p->app) : 0;
    return a > 0 ? &st->apps[a - 1] : NULL;
}

static void fake_init(void)
{
    const char *shm = getenv("FAKE_CUDA_SHM");
    void *m = MAP_FAILED;
    int fd;

    fk.total = env_bytes("FAKE_CUDA_TOTAL", 16ULL << 30);
    fk.ctx_bytes = env_bytes("FAKE_CUDA_CTX_BYTES", 64ULL << 20);
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
    fk.kind = mmap(NULL, FAKE_SLOTS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fk.aux = mmap(NULL, FAKE_SLOTS * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fk.owner = mmap(NULL, FAKE_SLOTS * sizeof(uint64_t),
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fk.shared = mmap(NULL, FAKE_SLOTS, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fk.next = 1;
    fk.next_va = 0x600000000000ULL;
    for (int d = 0; d < FAKE_DEVS; d++) {
        fk.pools[d].live = 1;
        fk.current[d] = (uintptr_t)d + 1;
    }
}

/* me_mu is held across a fork (prepare, parent), so that no thread of the
 * parent holds it in the child; the child is another process of the card:
 * its own entry. Registered when the stand-in is loaded, before any thread
 * can take the mutex. */
static void fake_fork_prepare(void)
{
    pthread_mutex_lock(&fk.me_mu);
}

static void fake_fork_parent(void)
{
    pthread_mutex_unlock(&fk.me_mu);
}

static void fake_fork_child(void)
{
    fk.me = NULL;
    pthread_mutex_init(&fk.me_mu, NULL);
}

__attribute__((constructor)) static void fake_atfork(void)
{
    pthread_atfork(fake_fork_prepare, fake_fork_parent, fake_fork_child);
}

struct fake_cuda_stats *fake_record(void)
{
    pthread_once(&fk.once, fake_init);
    return fk.st;
}

static struct fake_proc *me(void)
{
    /* threads of a fresh process ask at once: one of them finds or takes
     * the entry (two could each take one), the others wait for it */
    struct fake_proc *p = __atomic_load_n(&fk.me, __ATOMIC_ACQUIRE);
    if (p == NULL) { /* a fork child starts again (fake_fork_child) */
        pthread_mutex_lock(&fk.me_mu);
        p = __atomic_load_n(&fk.me, __ATOMIC_ACQUIRE);
        if (p == NULL) {
            p = proc_entry(fake_record());
            __atomic_store_n(&fk.me, p, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&fk.me_mu);
    }
    return p;
}

int64_t fake_proc_used(void)
{
    struct fake_proc *p = me();
    return p != NULL ? atomic_load(&p->used) : 0;
}

/* The card frees a dead process's memory (the driver does at exit). */
static void reap_dead(struct fake_cuda_stats *st)
{
    for (int i = 0; i < FAKE_PROCS; i++) {
        struct fake_proc *p = &st->procs[i];
        int64_t pid = atomic_load(&p->pid), gone;
        struct fake_app *a;
        if (pid == 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH) == 0)
            continue;
        a = app_of(st, p);
        gone = atomic_exchange(&p->used, 0);
        atomic_fetch_sub(&st->used, gone);
        if (a != NULL)
            atomic_fetch_sub(&a->used, gone);
        atomic_store(&p->pid, 0); /* last: the entry is free again */
    }
}

/* Note the app's new total; a new peak is first checked against dead
 * processes' shares, which a real driver would have freed. */
static void app_note(struct fake_cuda_stats *st, struct fake_app *a,
                     int64_t bytes)
{
    int64_t now = atomic_fetch_add(&a->used, bytes) + bytes;
    int64_t peak = atomic_load(&a->peak);

    if (now <= peak)
        return;
    reap_dead(st);
    now = atomic_load(&a->used);
    while (now > peak && !atomic_compare_exchange_weak(&a->peak, &peak, now))
        ;
}

_Thread_local int fake_charge_oversub;
_Thread_local int fake_charge_ctx;

int fake_charge(uint64_t bytes)
{
    struct fake_cuda_stats *st = fake_record();
    struct fake_proc *p = me();
    int64_t now, m;

    if (fk.fail && !fake_charge_ctx)
        return -1;
    for (int tries = 0;; tries++) {
        now = atomic_fetch_add(&st->used, (int64_t)bytes) + (int64_t)bytes;
        if ((uint64_t)now <= fk.total || fake_charge_oversub)
            break;
        atomic_fetch_sub(&st->used, (int64_t)bytes);
        if (tries > 0) {
            atomic_fetch_add(&st->refused, 1);
            return -1;
        }
        reap_dead(st);
    }
    if (p != NULL)
        atomic_fetch_add(&p->used, (int64_t)bytes);
    if (app_of(st, p) != NULL)
        app_note(st, app_of(st, p), (int64_t)bytes);
    m = atomic_load(&st->max_used);
    while (now > m && !atomic_compare_exchange_weak(&st->max_used, &m, now))
        ;
    return 0;
}

void fake_uncharge(uint64_t bytes)
{
    struct fake_cuda_stats *st = fake_record();
    struct fake_proc *p = me();

    if (p != NULL)
        atomic_fetch_sub(&p->used, (int64_t)bytes);
    if (app_of(st, p) != NULL)
        atomic_fetch_sub(&app_of(st, p)->used, (int64_t)bytes);
    atomic_fetch_sub(&st->used, (int64_t)bytes);
}

/* A fresh key of `bytes` and `kind`, charged to the card or not. */
static uint64_t new_key(uint64_t bytes, enum key_kind kind, uint32_t aux)
{
    uint64_t idx = atomic_fetch_add(&fk.next, 1) % FAKE_SLOTS;

    fk.sizes[idx] = bytes; /* liveness is kind[], so 0 is a size */
    fk.aux[idx] = aux;
    fk.owner[idx] = 0;
    fk.shared[idx] = 0;
    fk.kind[idx] = (uint8_t)kind;
    atomic_fetch_add(&fake_record()->allocs, 1);
    return fake_base + (idx << 12);
}

uint64_t fake_take(uint64_t bytes)
{
    if (fake_charge(bytes) != 0)
        return 0;
    return new_key(bytes, K_PLAIN, 0);
}

/* The index of a key handed out, or -1. */
static int64_t key_index(uint64_t key)
{
    uint64_t idx = (key - fake_base) >> 12;

    if (key < fake_base || idx >= FAKE_SLOTS || fk.kind[idx] == K_FREE)
        return -1;
    return (int64_t)idx;
}

/* Drop one reference of VMM handle idx (mu held): at none, its memory,
 * or, for a shared one, this process's hold on it (the last process's
 * frees it). */
static void vmm_unref(uint64_t idx)
{
    struct fake_cuda_stats *st = fake_record();

    if (--fk.aux[idx] != 0)
        return;
    fk.kind[idx] = K_FREE;
    if (fk.shared[idx] != 0) {
        struct fake_share *sh = &st->shares[fk.shared[idx] - 1];
        int64_t b = atomic_load(&sh->bytes);
        if (atomic_fetch_sub(&sh->refs, 1) == 1) {
            struct fake_app *a = app_of(st, me());
            if (a != NULL)
                atomic_fetch_sub(&a->used, b);
            atomic_fetch_sub(&st->used, b);
        }
        return;
    }
    fake_uncharge(fk.sizes[idx] & ~VMM_RELEASED);
}

uint64_t fake_take_in(uint64_t bytes, uint64_t owner)
{
    uint64_t k = fake_take(bytes);

    if (k != 0)
        fk.owner[(k - fake_base) >> 12] = owner;
    return k;
}

void fake_give_owned(uint64_t owner)
{
    uint64_t n = atomic_load(&fk.next);

    if (owner == 0)
        return;
    for (uint64_t i = 1; i < n && i < FAKE_SLOTS; i++)
        if (fk.kind[i] == K_PLAIN && fk.owner[i] == owner)
            fake_give(fake_base + (i << 12));
}

int fake_vmm_export_fd(uint64_t handle)
{
    int ix = fake_vmm_export(handle), fd;

    if (ix < 0 || (fd = memfd_create("fake-vmm-share", 0)) < 0)
        return -1;
    if (pwrite(fd, &ix, sizeof ix, 0) != (ssize_t)sizeof ix) {
        close(fd);
        return -1;
    }
    return fd;
}

uint64_t fake_vmm_import_fd(int fd)
{
    int ix = -1;

    if (pread(fd, &ix, sizeof ix, 0) != (ssize_t)sizeof ix)
        return 0;
    return fake_vmm_import(ix);
}

int fake_vmm_export(uint64_t handle)
{
    struct fake_cuda_stats *st = fake_record();
    struct fake_proc *p = me();
    int64_t idx, z;
    int rc = -1;

    pthread_mutex_lock(&fk.mu);
    idx = key_index(handle);
    if (idx >= 0 && fk.kind[idx] == K_VMM && fk.shared[idx] != 0)
        rc = fk.shared[idx] - 1;
    for (int i = 0; rc < 0 && idx >= 0 && fk.kind[idx] == K_VMM &&
                    i < FAKE_SHARES; i++) {
        z = 0;
        if (atomic_compare_exchange_strong(&st->shares[i].refs, &z, 1)) {
            int64_t b = (int64_t)(fk.sizes[idx] & ~VMM_RELEASED);
            atomic_store(&st->shares[i].bytes, b);
            if (p != NULL) /* no process's alone any more */
                atomic_fetch_sub(&p->used, b);
            fk.shared[idx] = (uint8_t)(i + 1);
            rc = i;
        }
    }
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

uint64_t fake_vmm_import(int index)
{
    struct fake_cuda_stats *st = fake_record();
    struct fake_share *sh;
    int64_t r;
    uint64_t k;

    if (index < 0 || index >= FAKE_SHARES)
        return 0;
    sh = &st->shares[index];
    r = atomic_load(&sh->refs);
    do {
        if (r <= 0)
            return 0; /* freed already */
    } while (!atomic_compare_exchange_weak(&sh->refs, &r, r + 1));
    pthread_mutex_lock(&fk.mu);
    k = new_key((uint64_t)atomic_load(&sh->bytes), K_VMM, 1);
    fk.shared[(k - fake_base) >> 12] = (uint8_t)(index + 1);
    pthread_mutex_unlock(&fk.mu);
    return k;
}

int fake_give(uint64_t key)
{
    struct fake_cuda_stats *st = fake_record();
    int64_t idx;
    int rc = 0;

    atomic_store(&st->last_free, key);
    pthread_mutex_lock(&fk.mu);
    idx = key_index(key);
    if (idx < 0) {
        rc = -1;
    } else if (fk.kind[idx] == K_VMM) {
        if (fk.sizes[idx] & VMM_RELEASED) {
            rc = -1;
        } else {
            fk.sizes[idx] |= VMM_RELEASED;
            vmm_unref((uint64_t)idx);
        }
    } else if (fk.kind[idx] == K_POOL) {
        struct fake_pool *p = &fk.pools[fk.aux[idx]];
        p->in_use -= fk.sizes[idx];
        fk.kind[idx] = K_FREE;
    } else {
        fake_uncharge(fk.sizes[idx]);
        fk.kind[idx] = K_FREE;
    }
    pthread_mutex_unlock(&fk.mu);
    atomic_fetch_add(rc == 0 ? &st->frees : &st->unknown_frees, 1);
    return rc;
}

void fake_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    int64_t u = atomic_load(&fake_record()->used);

    if (free_bytes != NULL)
        *free_bytes = (uint64_t)u >= fk.total ? 0 /* oversubscribed */
                      : fk.total - (size_t)(u < 0 ? 0 : u);
    *total_bytes = fk.total;
}

uint64_t fake_ctx_bytes(void)
{
    fake_record();
    return fk.ctx_bytes;
}

uint64_t fake_vmm_create(uint64_t bytes, int on_device)
{
    if (!on_device)
        return fake_take(0);
    if (fake_charge(bytes) != 0)
        return 0;
    return new_key(bytes, K_VMM, 1); /* one reference: not released */
}

uint64_t fake_va_reserve(uint64_t size)
{
    uint64_t va;

    fake_record();
    pthread_mutex_lock(&fk.mu);
    va = fk.next_va;
    fk.next_va += (size + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
    pthread_mutex_unlock(&fk.mu);
    return va;
}

int fake_vmm_map(uint64_t va, uint64_t size, uint64_t handle)
{
    int64_t idx;
    int rc = -1;

    fake_record();
    pthread_mutex_lock(&fk.mu);
    idx = key_index(handle);
    if (idx >= 0 && fk.kind[idx] == K_VMM &&
        !(fk.sizes[idx] & VMM_RELEASED)) {
        for (int i = 0; i < FAKE_MAPS; i++) {
            if (fk.maps[i].handle == 0) {
                fk.maps[i].va = va;
                fk.maps[i].size = size;
                fk.maps[i].handle = handle;
                fk.aux[idx]++;
                rc = 0;
                break;
            }
        }
    }
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

int fake_vmm_unmap(uint64_t va, uint64_t size)
{
    int rc = -1;

    fake_record();
    pthread_mutex_lock(&fk.mu);
    for (int i = 0; i < FAKE_MAPS; i++) {
        if (fk.maps[i].handle != 0 && fk.maps[i].va >= va &&
            fk.maps[i].va < va + size) {
            int64_t idx = key_index(fk.maps[i].handle);
            if (idx >= 0)
                vmm_unref((uint64_t)idx);
            fk.maps[i].handle = 0;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

int fake_device(void)
{
    const char *e = getenv("FAKE_CUDA_DEVICE");
    int d = e ? (int)strtol(e, NULL, 10) : 0;
    return d >= 0 && d < FAKE_DEVS ? d : 0;
}

/* The pool of a handle (mu held), NULL if none. */
static struct fake_pool *pool_of(uintptr_t pool)
{
    if (pool == 0 || pool > FAKE_POOLS || !fk.pools[pool - 1].live)
        return NULL;
    return &fk.pools[pool - 1];
}

uintptr_t fake_pool_default(int dev)
{
    fake_record();
    return dev >= 0 && dev < FAKE_DEVS ? (uintptr_t)dev + 1 : 0;
}

uintptr_t fake_pool_current(int dev)
{
    fake_record();
    return dev >= 0 && dev < FAKE_DEVS ? fk.current[dev] : 0;
}

int fake_pool_set_current(int dev, uintptr_t pool)
{
    int rc = -1;

    fake_record();
    pthread_mutex_lock(&fk.mu);
    if (dev >= 0 && dev < FAKE_DEVS && pool_of(pool) != NULL) {
        fk.current[dev] = pool;
        rc = 0;
    }
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

uintptr_t fake_pool_create(int dev)
{
    uintptr_t h = 0;

    (void)dev;
    fake_record();
    pthread_mutex_lock(&fk.mu);
    for (int i = FAKE_DEVS; i < FAKE_POOLS && h == 0; i++) {
        if (!fk.pools[i].live) {
            struct fake_pool z = { .live = 1 };
            fk.pools[i] = z;
            h = (uintptr_t)i + 1;
        }
    }
    pthread_mutex_unlock(&fk.mu);
    return h;
}

/* Give back what pool p holds beyond max(keep, what is live) (mu held). */
static void pool_shrink(struct fake_pool *p, uint64_t keep)
{
    uint64_t floor = keep > p->in_use ? keep : p->in_use;

    if (p->reserved > floor) {
        fake_uncharge(p->reserved - floor);
        p->reserved = floor;
    }
}

int fake_pool_destroy(uintptr_t pool)
{
    struct fake_pool *p;
    int rc = -1;

    fake_record();
    pthread_mutex_lock(&fk.mu);
    p = pool_of(pool);
    if (p != NULL && pool > FAKE_DEVS) {
        pool_shrink(p, 0); /* live allocations keep theirs until freed */
        p->live = p->in_use > 0;
        rc = 0;
    }
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

uint64_t fake_pool_alloc(uintptr_t pool, uint64_t bytes)
{
    struct fake_pool *p;
    uint64_t key = 0;

    fake_record();
    if (fk.fail)
        return 0;
    pthread_mutex_lock(&fk.mu);
    p = pool_of(pool ? pool : fk.current[fake_device()]);
    if (p != NULL) {
        uint64_t slack = p->reserved - p->in_use;
        if (slack >= bytes || fake_charge(bytes - slack) == 0) {
            if (slack < bytes)
                p->reserved += bytes - slack;
            p->in_use += bytes;
            if (p->reserved > p->reserved_high)
                p->reserved_high = p->reserved;
            if (p->in_use > p->used_high)
                p->used_high = p->in_use;
            key = new_key(bytes, K_POOL, (uint32_t)(p - fk.pools));
        }
    }
    pthread_mutex_unlock(&fk.mu);
    return key;
}

int fake_pool_set(uintptr_t pool, int attr, uint64_t v)
{
    struct fake_pool *p;
    int rc = -1;

    fake_record();
    pthread_mutex_lock(&fk.mu);
    p = pool_of(pool);
    if (p != NULL && attr == FAKE_POOL_RELEASE_THRESHOLD) {
        p->threshold = v;
        rc = 0;
    }
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

int fake_pool_get(uintptr_t pool, int attr, uint64_t *v)
{
    struct fake_pool *p;
    int rc = 0;

    fake_record();
    pthread_mutex_lock(&fk.mu);
    p = pool_of(pool);
    if (p == NULL)
        rc = -1;
    else if (attr == FAKE_POOL_RELEASE_THRESHOLD)
        *v = p->threshold;
    else if (attr == FAKE_POOL_RESERVED_CURRENT)
        *v = p->reserved;
    else if (attr == FAKE_POOL_RESERVED_HIGH)
        *v = p->reserved_high;
    else if (attr == FAKE_POOL_USED_CURRENT)
        *v = p->in_use;
    else if (attr == FAKE_POOL_USED_HIGH)
        *v = p->used_high;
    else
        rc = -1;
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

int fake_pool_trim(uintptr_t pool, uint64_t keep)
{
    struct fake_pool *p;

    fake_record();
    pthread_mutex_lock(&fk.mu);
    p = pool_of(pool);
    if (p != NULL)
        pool_shrink(p, keep);
    pthread_mutex_unlock(&fk.mu);
    return p != NULL ? 0 : -1;
}

void fake_pools_sync(void)
{
    fake_record();
    pthread_mutex_lock(&fk.mu);
    for (int i = 0; i < FAKE_POOLS; i++)
        if (fk.pools[i].live)
            pool_shrink(&fk.pools[i], fk.pools[i].threshold);
    pthread_mutex_unlock(&fk.mu);
}
