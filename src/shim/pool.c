/* SPDX-License-Identifier: MIT */
/*
 * pool.c: stream-ordered pools (cuMemAllocAsync, cuMemAllocFromPoolAsync and
 * their _ptsz variants) charged by what the pools hold on the device, as the
 * driver counts it, not by what is live in them (SPEC 4.2).
 *
 * A pool keeps what is freed into it until a synchronize finds it above its
 * release threshold (default 0; PyTorch's cudaMallocAsync backend sets it to
 * UINT64_MAX) or it is trimmed. So a free enqueued on a stream gives nothing
 * back; the charge of a pool follows its reserved memory
 * (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT):
 *   - an allocation reserves on the ledger what the pool must grow by
 *     (request - the pool's slack), then settles on the real growth; the
 *     app reuses its own pool's slack without a new charge;
 *   - a synchronize, a trim or a pool's destruction re-reads the pools and
 *     gives back what they released;
 *   - a refusal (here or on any other path of this process) first trims the
 *     process's pools down to what is live in them and re-reads them, then
 *     tries once more: the app's own slack never makes it fail.
 * A driver without the pool attributes (older than CUDA 11.2) keeps the
 * old rule: charged by size, given back when the free is enqueued.
 *
 * One mutex over the process's pools; never on the launch path or on the
 * plain allocation path (a refusal there takes it, once).
 */
#include "shim/shim.h"
#include "shim/reclaim.h"

#define POOL_MAX 64             /* pools one process allocates from */
#define ATTR_RESERVED_CURRENT 5 /* CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT */
#define ATTR_USED_CURRENT 7     /* CU_MEMPOOL_ATTR_USED_MEM_CURRENT */

/* What differs between CUDA's pools and HIP's: three runtime calls. */
struct pool_api {
    int (*attr)(void *pool, int attr, uint64_t *v); /* 0 = read */
    void (*trim)(void *pool);                       /* down to what is live */
    void *(*current)(int ordinal);                  /* the device's pool */
};

struct pool_entry {
    const struct pool_api *api;
    void *pool;
    int ordinal;
    uint64_t charged;           /* bytes of the ledger this pool holds */
};

static struct {
    pthread_mutex_t mu;
    _Atomic int n;              /* entries in use (read without mu) */
    struct pool_entry e[POOL_MAX];
} pl = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Set while this thread holds pl.mu: a refusal inside does not re-enter. */
static _Thread_local int pool_locked;

static int cu_attr(void *pool, int attr, uint64_t *v)
{
    CUresult (*fn)(CUmemoryPool, int, void *) =
        SHIM_CUDA_REAL(cuMemPoolGetAttribute);
    cuuint64_t x = 0;

    if (fn == NULL || fn((CUmemoryPool)pool, attr, &x) != CUDA_SUCCESS)
        return -1;
    *v = x;
    return 0;
}

static void cu_trim(void *pool)
{
    CUresult (*fn)(CUmemoryPool, size_t) = SHIM_CUDA_REAL(cuMemPoolTrimTo);
    if (fn != NULL)
        fn((CUmemoryPool)pool, 0);
}

static void *cu_current(int ordinal)
{
    CUresult (*fn)(CUmemoryPool *, CUdevice) =
        SHIM_CUDA_REAL(cuDeviceGetMemPool);
    CUmemoryPool p = NULL;
    return fn != NULL && fn(&p, ordinal) == CUDA_SUCCESS ? (void *)p : NULL;
}

static int hip_attr(void *pool, int attr, uint64_t *v)
{
    hipError_t (*fn)(hipMemPool_t, int, void *) =
        SHIM_HIP_REAL(hipMemPoolGetAttribute);
    uint64_t x = 0;

    if (fn == NULL || fn((hipMemPool_t)pool, attr, &x) != hipSuccess)
        return -1;
    *v = x;
    return 0;
}

static void hip_trim(void *pool)
{
    hipError_t (*fn)(hipMemPool_t, size_t) = SHIM_HIP_REAL(hipMemPoolTrimTo);
    if (fn != NULL)
        fn((hipMemPool_t)pool, 0);
}

static void *hip_current(int ordinal)
{
    hipError_t (*fn)(hipMemPool_t *, int) = SHIM_HIP_REAL(hipDeviceGetMemPool);
    hipMemPool_t p = NULL;
    return fn != NULL && fn(&p, ordinal) == hipSuccess ? (void *)p : NULL;
}

SHIM_HIDDEN const struct pool_api pool_cuda = { cu_attr, cu_trim, cu_current };
SHIM_HIDDEN const struct pool_api pool_hip = { hip_attr, hip_trim,
                                               hip_current };

void *pool_measurable(const struct pool_api *api, void *pool, int ordinal)
{
    uint64_t v;

    if (pool == NULL)
        pool = api->current(ordinal);
    if (pool == NULL || api->attr(pool, ATTR_RESERVED_CURRENT, &v) != 0)
        return NULL;
    return pool;
}

static struct pool_entry *entry(const struct pool_api *api, void *pool,
                                int ordinal)
{
    int n = atomic_load(&pl.n);

    for (int i = 0; i < n; i++)
        if (pl.e[i].pool == pool)
            return &pl.e[i];
    if (n == POOL_MAX)
        return NULL;
    pl.e[n] = (struct pool_entry){ api, pool, ordinal, 0 };
    atomic_store(&pl.n, n + 1);
    return &pl.e[n];
}

/* Re-read every pool (mu held): give back what they released. A pool the
 * driver no longer knows (destroyed) gives back all of its charge. */
static void refresh_locked(void)
{
    int n = atomic_load(&pl.n);

    for (int i = 0; i < n; i++) {
        struct pool_entry *e = &pl.e[i];
        uint64_t r;
        if (e->api->attr(e->pool, ATTR_RESERVED_CURRENT, &r) != 0) {
            quota_give(e->ordinal, e->charged);
            pl.e[i--] = pl.e[--n];
            continue;
        }
        if (r < e->charged) {
            quota_give(e->ordinal, e->charged - r);
            e->charged = r;
        }
    }
    atomic_store(&pl.n, n);
}

void pool_refresh(void)
{
    if (atomic_load_explicit(&pl.n, memory_order_relaxed) == 0 || pool_locked)
        return;
    pthread_mutex_lock(&pl.mu);
    refresh_locked();
    pthread_mutex_unlock(&pl.mu);
}

/* Trim every pool of ordinal down to what is live in it (mu held). */
static void trim_locked(int ordinal)
{
    int n = atomic_load(&pl.n);

    for (int i = 0; i < n; i++)
        if (pl.e[i].ordinal == ordinal)
            pl.e[i].api->trim(pl.e[i].pool);
    refresh_locked();
}

int pool_reclaim(int ordinal)
{
    if (atomic_load_explicit(&pl.n, memory_order_relaxed) == 0 || pool_locked)
        return 0;
    pthread_mutex_lock(&pl.mu);
    trim_locked(ordinal);
    pthread_mutex_unlock(&pl.mu);
    return 1;
}

int pool_alloc(const struct pool_api *api, void *pool, int ordinal,
               uint64_t bytes, int (*call)(void *), void *arg,
               int (*undo)(void *))
{
    struct shim_charge c;
    struct pool_entry *e;
    uint64_t reserved = 0, live = 0, grow, now;
    int rc;

    pthread_mutex_lock(&pl.mu);
    e = entry(api, pool, ordinal);
    if (e == NULL) {
        pthread_mutex_unlock(&pl.mu);
        shim_log("dev %d: more than %d stream-ordered pools: refused",
                 ordinal, POOL_MAX);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool_locked = 1;
    if (api->attr(pool, ATTR_RESERVED_CURRENT, &reserved) != 0 ||
        api->attr(pool, ATTR_USED_CURRENT, &live) != 0 || live > reserved)
        reserved = live = 0; /* unknown: charge the request */
    grow = reserved - live >= bytes ? 0 : bytes - (reserved - live);
    if (quota_begin(&c, ordinal, grow) != 0) {
        trim_locked(ordinal); /* the app's own slack first */
        if (quota_begin(&c, ordinal, grow) != 0) {
            pool_locked = 0;
            pthread_mutex_unlock(&pl.mu);
            shim_log("dev %d: stream-ordered allocation of %llu bytes "
                     "refused: over the quota", ordinal,
                     (unsigned long long)bytes);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    rc = call(arg);
    /* the pool could not grow on a short card: elastic memory (SPEC 4.4),
     * as for every other allocation (hooks.c); the pools' lock is held
     * meanwhile, as for the call itself */
    for (int i = 0; i < RECLAIM_TRIES && rc == CUDA_ERROR_OUT_OF_MEMORY &&
                    grow > 0 && c.dev != NULL && reclaim_ask(ordinal, grow);
         i++)
        rc = call(arg);
    if (rc != CUDA_SUCCESS) {
        quota_adjust(&c, 0);
    } else if (api->attr(pool, ATTR_RESERVED_CURRENT, &now) == 0) {
        /* settle on what the pool really grew by (its granularity) */
        uint64_t real = now > e->charged ? now - e->charged : 0;
        if (quota_adjust(&c, real) != 0) {
            undo(arg);
            trim_locked(ordinal);
            quota_adjust(&c, 0);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->charged += real;
        }
    } else {
        e->charged += c.bytes;
    }
    pool_locked = 0;
    pthread_mutex_unlock(&pl.mu);
    return rc;
}

void pool_fork_prepare(void)
{
    pthread_mutex_lock(&pl.mu);
}

void pool_fork_parent(void)
{
    pthread_mutex_unlock(&pl.mu);
}

void pool_fork_child(void)
{
    pthread_mutex_unlock(&pl.mu);
    atomic_store(&pl.n, 0); /* the parent's pools are not the child's */
}
