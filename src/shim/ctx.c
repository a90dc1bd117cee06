/* SPDX-License-Identifier: MIT */
/*
 * ctx.c: what a context costs, measured on the machine (SPEC 4.2): the
 * device's free memory, as NVML counts it (or the driver's own
 * cuMemGetInfo_v2 when NVML cannot be asked and a context of the device is
 * current), read before and after the driver makes the context. The CUDA
 * runtime's primary context (cuDevicePrimaryCtxRetain) is charged the same
 * way, once, when the retain really made it (it was not active), and given
 * back when the driver says it is gone (cuDevicePrimaryCtxGetState after a
 * release or a reset).
 *
 * The card's reading is of the whole card: another process allocating at
 * the same moment makes it larger (two apps starting at once: one app's
 * context was measured at the other's 14 GiB, issue 49's ts_turns oversub).
 * So NVML's figure of this process itself (its per-process list, which
 * another process's allocation does not move) decides when it has one:
 * what this process's figure grew by while the driver made the context.
 * The card's drop is the fallback, for a driver that lists no per-process
 * figure, and a process in a pid namespace of its own (NVML names host
 * pids: it is not found, or another process is, whose figure does not grow
 * by a context meanwhile). acceld's outside meter corrects what the shim
 * cannot see (the ledger's untracked count); a context that cannot be
 * measured at all (no NVML, no current context) is not charged, and the
 * shim says so once in ACCEL_LOG.
 */
#include "shim/shim.h"

#include <string.h>

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t primary_charged[SHIM_MAX_DEV]; /* ctx_mu */
static uint64_t primary_ctx[SHIM_MAX_DEV];     /* ctx_mu: its handle */
static unsigned primary_refs[SHIM_MAX_DEV];     /* ctx_mu: retains seen */
static _Atomic int unmeasured_said;
static _Atomic uint64_t last_cost[SHIM_MAX_DEV]; /* the last one measured */

/* NVML for the measure: loaded at the first context the shim measures
 * (never at start-up), and initialised, as the real NVML wants before any
 * other call (nvmlInit_v2 counts its callers: the app's own init and
 * shutdown are not disturbed). 1 when NVML can be asked. */
static int nvml_ok; /* 1 initialised, -1 not: set once */

static void nvml_init_for_measure(void)
{
    nvmlReturn_t (*fn)(void) = SHIM_NVML_REAL(nvmlInit_v2);

    nvml_ok = fn != NULL && fn() == NVML_SUCCESS ? 1 : -1;
}

static int nvml_ready(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, nvml_init_for_measure);
    return nvml_ok == 1;
}

/* NVML's handle of each CUDA ordinal, looked up by UUID (devmap.c) at the
 * first measure on it: the reading after a context is made, and any later
 * measure, ask NVML for the memory only. */
static _Atomic(nvmlDevice_t) nvml_dev[SHIM_MAX_DEV];

static nvmlDevice_t nvml_dev_of(int ordinal)
{
    nvmlDevice_t d;

    if (ordinal < 0 || ordinal >= SHIM_MAX_DEV)
        return devmap_nvml(ordinal);
    d = atomic_load_explicit(&nvml_dev[ordinal], memory_order_acquire);
    if (d == NULL) {
        d = devmap_nvml(ordinal);
        atomic_store_explicit(&nvml_dev[ordinal], d, memory_order_release);
    }
    return d;
}

/* The device's free memory now, or -1 when it cannot be read: from NVML,
 * else from the driver while a context of the device is current (the
 * driver refuses cuMemGetInfo without one). */
static int64_t dev_free(int ordinal)
{
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *);
    CUresult (*info)(size_t *, size_t *) = SHIM_CUDA_REAL(cuMemGetInfo_v2);
    CUresult (*cur)(CUdevice *) = SHIM_CUDA_REAL(cuCtxGetDevice);
    nvmlDevice_t d;
    nvmlMemory_t m;
    size_t f, t;
    CUdevice now;

    if (nvml_ready()) {
        mem = SHIM_NVML_REAL(nvmlDeviceGetMemoryInfo);
        d = nvml_dev_of(ordinal);
        if (d != NULL && mem != NULL && mem(d, &m) == NVML_SUCCESS)
            return (int64_t)m.free;
    }
    if (info != NULL && cur != NULL && cur(&now) == CUDA_SUCCESS &&
        now == ordinal && info(&f, &t) == CUDA_SUCCESS)
        return (int64_t)f;
    return -1;
}

/* Entries of NVML's process list read at once (a card with more
 * processes: the card's reading decides). */
#define CTX_PROCS 128

/* What this process holds on the device as the driver counts it (NVML's
 * per-process figure): 0 when the list names it not (it holds nothing
 * yet), -1 when the list cannot be read or gives no figure. */
static int64_t own_used(int ordinal)
{
    nvmlReturn_t (*fn)(nvmlDevice_t, unsigned *, void *) =
        SHIM_NVML_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
    unsigned char buf[CTX_PROCS * 24];
    size_t stride = 24; /* nvmlProcessInfo_t; _v1_t: 16. The pid and
                         * usedGpuMemory lead every version. */
    nvmlDevice_t d;
    unsigned n;

    if (fn == NULL)
        fn = SHIM_NVML_REAL(nvmlDeviceGetComputeRunningProcesses_v2);
    if (fn == NULL) {
        fn = SHIM_NVML_REAL(nvmlDeviceGetComputeRunningProcesses);
        stride = 16;
    }
    n = (unsigned)(sizeof buf / stride);
    if (fn == NULL || !nvml_ready() || (d = devmap_nvml(ordinal)) == NULL ||
        fn(d, &n, buf) != NVML_SUCCESS)
        return -1;
    for (unsigned i = 0; i < n && i < sizeof buf / stride; i++) {
        unsigned pid;
        unsigned long long used;
        memcpy(&pid, buf + i * stride, sizeof pid);
        memcpy(&used, buf + i * stride + 8, sizeof used);
        if ((pid_t)pid != shim_state.pid)
            continue;
        /* NVML_VALUE_NOT_AVAILABLE: no figure */
        return used == ~0ULL || used > INT64_MAX ? -1 : (int64_t)used;
    }
    return 0;
}

/* ctx_before's answer when the app already knows what a context of the
 * device takes (the ledger's ctx_cost): nothing to measure. */
#define CTX_KNOWN (-2)

/* The ledger's ctx_cost holds the measured bytes with this bit set (a
 * context measured at 0 bytes is known too); acceld's seed (a size other
 * apps measured on the device and agree on) has it too, and its own bit. */
#define CTX_MEASURED ACCEL_LEDGER_CTX_MEASURED

/* Whether one of the app's processes measured a context of ordinal; what
 * it took into *bytes. */
static int known_cost(int ordinal, uint64_t *bytes)
{
    struct shim_dev *d = quota_dev(ordinal);
    uint64_t v = d != NULL ? atomic_load_explicit(&d->ledger->ctx_cost,
                                                  memory_order_relaxed)
                           : 0;

    *bytes = ACCEL_LEDGER_CTX_BYTES(v);
    return (v & CTX_MEASURED) != 0;
}

/* A context is measured once per device and app: the first process that
 * makes one loads NVML for it; the others charge what it found, with no
 * NVML and no driver query (start-up: docs/benchmarks.md, Shim). An app
 * whose ledger acceld seeded measures none: docs/internals/shim.md. */
struct ctx_mark ctx_before(int ordinal)
{
    struct ctx_mark m = { CTX_KNOWN, -1 };
    uint64_t k;

    if (known_cost(ordinal, &k))
        return m;
    m.own = own_used(ordinal);
    m.card = dev_free(ordinal);
    return m;
}

uint64_t ctx_cost(int ordinal, struct ctx_mark before)
{
    int64_t after, own;
    uint64_t cost;
    struct shim_dev *d;

    if (before.card == CTX_KNOWN) {
        known_cost(ordinal, &cost);
        return cost;
    }
    after = before.card < 0 ? -1 : dev_free(ordinal);
    own = before.own < 0 ? -1 : own_used(ordinal);
    if (own > before.own) {
        /* a context takes memory: this process's own figure grew by it */
        cost = (uint64_t)(own - before.own);
    } else if (after >= 0) {
        cost = before.card > after ? (uint64_t)(before.card - after) : 0;
    } else {
        if (atomic_exchange(&unmeasured_said, 1) == 0)
            shim_log("dev %d: a context's size could not be measured (no "
                     "NVML, no current context): not charged", ordinal);
        return 0;
    }
    if (ordinal >= 0 && ordinal < SHIM_MAX_DEV)
        atomic_store(&last_cost[ordinal], cost);
    d = quota_dev(ordinal);
    if (d != NULL) /* for the app's other processes */
        atomic_store_explicit(&d->ledger->ctx_cost, cost | CTX_MEASURED,
                              memory_order_relaxed);
    return cost;
}

uint64_t ctx_estimate(int ordinal)
{
    uint64_t k;

    if (known_cost(ordinal, &k))
        return k;
    return ordinal >= 0 && ordinal < SHIM_MAX_DEV
               ? atomic_load(&last_cost[ordinal])
               : 0;
}

/* Whether the primary context of ordinal is active (-1: cannot tell). */
static int primary_active(int ordinal)
{
    CUresult (*fn)(CUdevice, unsigned *, int *) =
        SHIM_CUDA_REAL(cuDevicePrimaryCtxGetState);
    unsigned flags;
    int active = 0;

    if (fn == NULL || fn(ordinal, &flags, &active) != CUDA_SUCCESS)
        return -1;
    return active != 0;
}

CUresult ctx_primary_retain(CUresult (*fn)(CUcontext *, CUdevice),
                            CUcontext *pctx, CUdevice dev, int on)
{
    struct shim_charge c;
    struct ctx_mark before;
    CUresult rc;

    if (!on || dev < 0 || dev >= SHIM_MAX_DEV || quota_dev(dev) == NULL)
        return fn(pctx, dev);
    pthread_mutex_lock(&ctx_mu);
    if (primary_charged[dev] != 0 || primary_active(dev) == 1) {
        rc = fn(pctx, dev); /* made already: costs nothing more */
        primary_refs[dev] += rc == CUDA_SUCCESS;
        pthread_mutex_unlock(&ctx_mu);
        return rc;
    }
    before = ctx_before(dev);
    if (quota_begin(&c, dev, ctx_estimate(dev)) != 0) {
        pthread_mutex_unlock(&ctx_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    rc = fn(pctx, dev);
    if (rc != CUDA_SUCCESS) {
        quota_adjust(&c, 0);
    } else {
        uint64_t cost = ctx_cost(dev, before);
        if (quota_adjust(&c, cost) != 0) {
            CUresult (*rel)(CUdevice) =
                SHIM_CUDA_REAL(cuDevicePrimaryCtxRelease_v2);
            if (rel != NULL)
                rel(dev);
            quota_adjust(&c, 0);
            shim_log("dev %d: the primary context (%llu bytes) does not fit "
                     "the quota: refused", dev, (unsigned long long)cost);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            primary_charged[dev] = cost ? cost : 1; /* 1: made, nothing
                                                     * to give back */
            primary_refs[dev]++;
        }
    }
    if (rc == CUDA_SUCCESS && pctx != NULL)
        primary_ctx[dev] = (uint64_t)(uintptr_t)*pctx;
    pthread_mutex_unlock(&ctx_mu);
    return rc;
}

CUresult ctx_primary_drop(CUresult rc, CUdevice dev, int reset)
{
    int active;

    uint64_t gone = 0;

    if (rc != CUDA_SUCCESS || dev < 0 || dev >= SHIM_MAX_DEV)
        return rc;
    pthread_mutex_lock(&ctx_mu);
    if (reset)
        primary_refs[dev] = 0;
    else if (primary_refs[dev] > 0)
        primary_refs[dev]--;
    active = primary_active(dev); /* the driver's word, else our count */
    if (active < 0)
        active = primary_refs[dev] > 0;
    if (primary_charged[dev] != 0 && !active) {
        if (primary_charged[dev] > 1)
            quota_give(dev, primary_charged[dev]);
        primary_charged[dev] = 0;
    }
    /* a reset frees everything made in the context even while retained
     * (the driver keeps the handle for the next use); the last release
     * ends the context and all it held */
    if (reset || !active)
        gone = primary_ctx[dev];
    if (!active)
        primary_ctx[dev] = 0;
    pthread_mutex_unlock(&ctx_mu);
    if (gone != 0)
        track_drop_ctx(gone);
    return rc;
}

uint64_t ctx_current(void)
{
    CUresult (*fn)(CUcontext *) = SHIM_CUDA_REAL(cuCtxGetCurrent);
    CUcontext c = NULL;

    if (fn == NULL || fn(&c) != CUDA_SUCCESS)
        return 0;
    return (uint64_t)(uintptr_t)c;
}

/* Device memory a limit of `value` reserves on ordinal: the stack for
 * every thread the device can hold at once, or the heap or FIFO itself. */
static uint64_t limit_bytes(int ordinal, CUlimit limit, size_t value)
{
    CUresult (*attr)(int *, int, CUdevice) = SHIM_CUDA_REAL(cuDeviceGetAttribute);
    int sms = 0, threads = 0;

    if (limit != CU_LIMIT_STACK_SIZE)
        return value;
    if (attr == NULL ||
        attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal) != 0 ||
        attr(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
             ordinal) != 0 || sms <= 0 || threads <= 0) {
        shim_log("dev %d: the stack size is charged per thread of 2048 x "
                 "132 (the device's own figures could not be read)", ordinal);
        sms = 132;
        threads = 2048;
    }
    return (uint64_t)value * (uint64_t)sms * (uint64_t)threads;
}

/*
 * A limit reserves device memory for the current context when it is set:
 * charged by what it grows over the value the driver had (the default
 * values are part of the context's measured cost), before the driver
 * takes it; recorded (SHIM_KIND_LIMIT, key = context + limit) with the
 * context, so that the context's end gives it back.
 */
CUresult ctx_set_limit(CUresult (*fn)(CUlimit, size_t), CUlimit limit,
                       size_t value)
{
    CUresult (*get)(size_t *, CUlimit) = SHIM_CUDA_REAL(cuCtxGetLimit);
    CUresult (*dev_of)(CUdevice *) = SHIM_CUDA_REAL(cuCtxGetDevice);
    uint64_t ctx = ctx_current(), key, old = 0, now_b, target;
    struct shim_charge c = { 0 };
    CUdevice dev = 0;
    size_t cur = 0;
    int ord = 0, had;
    CUresult rc;

    if (ctx == 0 || dev_of == NULL || dev_of(&dev) != CUDA_SUCCESS ||
        quota_dev(dev) == NULL)
        return fn(limit, value); /* no context: the driver refuses */
    if (get == NULL || get(&cur, limit) != CUDA_SUCCESS)
        cur = 0; /* unknown: the whole new value is charged */
    key = ctx + (uint64_t)limit;
    had = track_take(SHIM_KIND_LIMIT, key, &ord, &old, NULL);
    if (!had)
        ord = dev;
    now_b = limit_bytes(dev, limit, cur);
    target = limit_bytes(dev, limit, value);
    target = target > now_b ? old + (target - now_b)
                            : (now_b - target < old ? old - (now_b - target) : 0);
    if (target > old && quota_begin(&c, dev, target - old) != 0) {
        if (had)
            track_put(SHIM_KIND_LIMIT, key, ord, old, ctx);
        shim_log("dev %d: limit %d of %zu bytes refused: it would reserve "
                 "%llu bytes past the quota", dev, limit, value,
                 (unsigned long long)(target - old));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    rc = fn(limit, value);
    if (rc != CUDA_SUCCESS) {
        if (target > old)
            quota_end(&c, rc, SHIM_KIND_LIMIT, 0); /* gives it back */
        target = old;
    } else if (target < old) {
        quota_release(ord, old - target);
    }
    if (!had && c.card)
        ord |= SHIM_ORD_CARD;
    if (target > 0)
        track_put(SHIM_KIND_LIMIT, key, ord, target, ctx);
    return rc;
}

void ctx_fork_child(void)
{
    pthread_mutex_init(&ctx_mu, NULL);
    memset(primary_charged, 0, sizeof(primary_charged)); /* the parent's */
    memset(primary_refs, 0, sizeof(primary_refs));
    memset(primary_ctx, 0, sizeof(primary_ctx));
}
