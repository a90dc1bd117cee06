/* SPDX-License-Identifier: MIT */
/*
 * accel-ctxprobe: makes one driver context, so that acceld learns what a
 * context takes on a device (docs/internals/shim.md, "A context's size,
 * measured by acceld"). acceld runs it as its child with the shim
 * preloaded, ACCEL_CONFIG naming a ledger acceld made for it and
 * CUDA_VISIBLE_DEVICES naming the one device (ordinal 0). The program
 * loads libcuda.so.1, calls cuInit, retains the device's primary context
 * (the context the CUDA runtime makes for every app) and releases it: the
 * shim measures that context exactly as it measures an app's, and writes
 * the size into the ledger's ctx_cost, where acceld reads it.
 *
 * It measures nothing itself and knows nothing of ledgers: what the
 * driver and NVML count decides. The driver's functions are looked up
 * through dlsym on the library's handle, which the shim answers with its
 * hooks (src/shim/procaddr.c), as for any program that loads the driver
 * itself. Exit status 0 when the context was made; otherwise 1, with one
 * line on stderr naming the step that failed and the driver's code.
 */
#include "common/accel_setup.h"

#include <dlfcn.h>
#include <stdio.h>

typedef int (*init_fn)(unsigned);
typedef int (*get_fn)(int *, int);
typedef int (*retain_fn)(void **, int);
typedef int (*release_fn)(int);

/* The driver function `name` of library h, or NULL (said on stderr). */
static void *need(void *h, const char *name)
{
    void *p = dlsym(h, name);

    if (p == NULL)
        fprintf(stderr, "accel-ctxprobe: libcuda.so.1 has no %s\n", name);
    return p;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *ctx = NULL;
    init_fn init;
    get_fn get;
    retain_fn retain;
    release_fn release;
    int dev = -1, rc;

    if (h == NULL) {
        fprintf(stderr, "accel-ctxprobe: cannot load libcuda.so.1: %s\n",
                dlerror());
        return 1;
    }
    *(void **)&init = need(h, "cuInit");
    *(void **)&get = need(h, "cuDeviceGet");
    *(void **)&retain = need(h, "cuDevicePrimaryCtxRetain");
    *(void **)&release = need(h, "cuDevicePrimaryCtxRelease_v2");
    if (init == NULL || get == NULL || retain == NULL || release == NULL)
        return 1;
    rc = init(0);
    if (rc == 0)
        rc = get(&dev, 0);
    if (rc == 0)
        rc = retain(&ctx, dev);
    if (rc != 0) {
        fprintf(stderr, "accel-ctxprobe: %s failed: CUresult %d\n",
                dev < 0 ? "cuInit or cuDeviceGet" : "cuDevicePrimaryCtxRetain",
                rc);
        return 1;
    }
    (void)release(dev);
    return 0;
}
