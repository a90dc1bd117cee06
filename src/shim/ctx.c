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
 * The reading is of the whole card: another process allocating at the same
 * moment makes it larger or smaller. acceld's outside meter corrects what
 * the shim cannot see (the ledger's untracked count); a context that cannot
 * be measured at all (no NVML, no current context) is not charged, and the
 * shim says so once in ACCEL_LOG.
 */
#include "shim/shim.h"

#include <string.h>

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t primary_charged[SHIM_MAX_DEV]; /* ctx_mu */
static unsigned primary_refs[SHIM_MAX_DEV];     /* ctx_mu: retains seen */
static _Atomic int unmeasured_said;
static _Atomic uint64_t last_cost[SHIM_MAX_DEV]; /* the last one measured */

/* The device's free memory now, or -1 when it cannot be read. */
static int64_t dev_free(int ordinal)
{
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *) =
        SHIM_NVML_REAL(nvmlDeviceGetMemoryInfo);
    CUresult (*info)(size_t *, size_t *) = SHIM_CUDA_REAL(cuMemGetInfo_v2);
    CUresult (*cur)(CUdevice *) = SHIM_CUDA_REAL(cuCtxGetDevice);
    nvmlDevice_t d = devmap_nvml(ordinal);
    nvmlMemory_t m;
    size_t f, t;
    CUdevice now;

    if (d != NULL && mem != NULL && mem(d, &m) == NVML_SUCCESS)
        return (int64_t)m.free;
    if (info != NULL && cur != NULL && cur(&now) == CUDA_SUCCESS &&
        now == ordinal && info(&f, &t) == CUDA_SUCCESS)
        return (int64_t)f;
    return -1;
}

int64_t ctx_before(int ordinal)
{
    return dev_free(ordinal);
}

uint64_t ctx_cost(int ordinal, int64_t before)
{
    int64_t after = before < 0 ? -1 : dev_free(ordinal);

    if (after < 0) {
        if (atomic_exchange(&unmeasured_said, 1) == 0)
            shim_log("dev %d: a context's size could not be measured (no "
                     "NVML, no current context): not charged", ordinal);
        return 0;
    }
    if (before <= after)
        return 0;
    if (ordinal >= 0 && ordinal < SHIM_MAX_DEV)
        atomic_store(&last_cost[ordinal], (uint64_t)(before - after));
    return (uint64_t)(before - after);
}

uint64_t ctx_estimate(int ordinal)
{
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
    int64_t before;
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
    pthread_mutex_unlock(&ctx_mu);
    return rc;
}

CUresult ctx_primary_drop(CUresult rc, CUdevice dev, int reset)
{
    int active;

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
    pthread_mutex_unlock(&ctx_mu);
    return rc;
}

void ctx_fork_child(void)
{
    pthread_mutex_init(&ctx_mu, NULL);
    memset(primary_charged, 0, sizeof(primary_charged)); /* the parent's */
    memset(primary_refs, 0, sizeof(primary_refs));
}
