/* SPDX-License-Identifier: MIT */
/*
 * drv.c: driver-API workloads for run-all.sh, with the driver reached the
 * way a program that links libcuda would reach it (dlopen + dlsym of
 * libcuda.so.1, which the shim interposes), so that it builds without a
 * CUDA toolkit (src/shim/cuda_types.h) and also runs on tests/shim's
 * stand-in driver. A function the driver lacks makes a mode print
 * "skipped: ..." and exit 77.
 *
 *   drv ctx HOLD_MS          context only: "ctx physical P charged C"
 *   drv fill CHUNK_MIB HOLD_MS [MAX_MIB]
 *                            cuMemAlloc CHUNK_MIB until refused (or MAX_MIB
 *                            held): "held H rc R physical P charged C"
 *   drv vmm POOL_MIB CHUNK_MIB HOLD_MS
 *                            llama.cpp's VMM pool (ggml_cuda_pool_vmm):
 *                            cuMemAddressReserve, then per chunk cuMemCreate
 *                            -> cuMemMap -> cuMemSetAccess -> cuMemRelease
 *                            while mapped; then cuMemAlloc CHUNK_MIB until
 *                            refused: "vmm V held H rc R physical P"
 *   drv allocfree N          N 1 MiB cuMemAlloc/cuMemFree pairs:
 *                            "allocfree_ns X"
 * physical: the device's used memory (outside meter) minus what it was
 * before cuInit; charged: the shim's view (total - free of cuMemGetInfo).
 */
#include "gpucheck.h"

#include "shim/cuda_types.h"

typedef struct {
    CUmemLocation location;
    int flags; /* CUmemAccess_flags */
} access_desc; /* CUmemAccessDesc */

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free_)(CUdeviceptr);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                        unsigned long long);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
                       const CUmemAllocationProp *, unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                    unsigned long long);
    CUresult (*set_access)(CUdeviceptr, size_t, const access_desc *, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, int);
} cu;

static void *lib;

static int need(void **slot, const char *name)
{
    *slot = dlsym(lib, name);
    if (*slot == NULL) {
        printf("skipped: the driver lacks %s\n", name);
        return -1;
    }
    return 0;
}

static long long base_used = -1;

static long long physical(void)
{
    long long used, proc;

    if (base_used < 0 || gc_outside(&used, &proc) != 0)
        return -1;
    return used - base_used;
}

static long long charged(void)
{
    size_t fr = 0, tot = 0;

    if (cu.info(&fr, &tot) != CUDA_SUCCESS)
        return -1;
    return (long long)tot - (long long)fr;
}

static int start(void)
{
    long long proc;
    CUdevice dev = 0;
    CUcontext ctx;

    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
        printf("skipped: no libcuda.so.1 (%s)\n", dlerror());
        return -1;
    }
    if (need((void **)&cu.init, "cuInit") || need((void **)&cu.alloc, "cuMemAlloc_v2") ||
        need((void **)&cu.free_, "cuMemFree_v2") ||
        need((void **)&cu.info, "cuMemGetInfo_v2"))
        return -1;
    /* optional (an older stand-in had no cuCtxSetCurrent) */
    *(void **)&cu.device_get = dlsym(lib, "cuDeviceGet");
    *(void **)&cu.primary_retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cu.ctx_set = dlsym(lib, "cuCtxSetCurrent");
    if (gc_outside(&base_used, &proc) != 0)
        base_used = -1;
    if (cu.init(0) != CUDA_SUCCESS ||
        (cu.device_get && cu.device_get(&dev, 0) != CUDA_SUCCESS)) {
        printf("error cuInit/cuDeviceGet failed\n");
        return -2;
    }
    if (cu.primary_retain && cu.ctx_set &&
        (cu.primary_retain(&ctx, dev) != CUDA_SUCCESS ||
         cu.ctx_set(ctx) != CUDA_SUCCESS)) {
        printf("error the primary context could not be made current\n");
        return -2;
    }
    return 0;
}

/* cuMemAlloc chunk bytes until refused or max held; returns the bytes held
 * and leaves the last refusal's code in *rc (0 when none). */
static unsigned long long fill(size_t chunk, unsigned long long max, int *rc)
{
    unsigned long long held = 0;
    CUdeviceptr p;

    *rc = 0;
    while (max == 0 || held + chunk <= max) {
        *rc = cu.alloc(&p, chunk);
        if (*rc != CUDA_SUCCESS)
            break;
        held += chunk;
    }
    return held;
}

static int vmm(size_t pool, size_t chunk, unsigned hold_ms)
{
    CUmemAllocationProp prop;
    access_desc acc;
    CUdeviceptr va;
    size_t gran = 0, mapped = 0;
    unsigned long long held;
    int rc = 0;

    if (need((void **)&cu.reserve, "cuMemAddressReserve") ||
        need((void **)&cu.create, "cuMemCreate") || need((void **)&cu.map, "cuMemMap") ||
        need((void **)&cu.set_access, "cuMemSetAccess") ||
        need((void **)&cu.release, "cuMemRelease") ||
        need((void **)&cu.granularity, "cuMemGetAllocationGranularity"))
        return GC_SKIP;
    memset(&prop, 0, sizeof(prop));
    prop.type = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED */
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    if (cu.granularity(&gran, &prop, 0) != CUDA_SUCCESS || gran == 0)
        gran = 2 * GC_MIB;
    chunk = (chunk + gran - 1) / gran * gran;
    if (cu.reserve(&va, pool, 0, 0, 0) != CUDA_SUCCESS) {
        printf("error cuMemAddressReserve of %zu failed\n", pool);
        return 2;
    }
    acc.location = prop.location;
    acc.flags = 3; /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
    while (mapped + chunk <= pool) {
        CUmemGenericAllocationHandle h;

        rc = cu.create(&h, chunk, &prop, 0);
        if (rc != CUDA_SUCCESS)
            break;
        if (cu.map(va + mapped, chunk, 0, h, 0) != CUDA_SUCCESS ||
            cu.set_access(va + mapped, chunk, &acc, 1) != CUDA_SUCCESS) {
            printf("error cuMemMap/cuMemSetAccess failed\n");
            return 2;
        }
        cu.release(h); /* as ggml-cuda does: the mapping keeps it */
        mapped += chunk;
    }
    held = fill(chunk, 0, &rc);
    printf("vmm %zu held %llu rc %d physical %lld charged %lld\n", mapped,
           held, rc, physical(), charged());
    fflush(stdout);
    gc_sleep_ms(hold_ms);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    unsigned long long a = gc_arg(argc, argv, 2), b = gc_arg(argc, argv, 3);
    unsigned long long c = gc_arg(argc, argv, 4);
    int rc = start();

    if (rc != 0)
        return rc == -1 ? GC_SKIP : 2;
    if (strcmp(mode, "ctx") == 0) {
        printf("ctx physical %lld charged %lld\n", physical(), charged());
        fflush(stdout);
        gc_sleep_ms((unsigned)a);
        return 0;
    }
    if (strcmp(mode, "fill") == 0 && a > 0) {
        unsigned long long held = fill(a * GC_MIB, c * GC_MIB, &rc);

        printf("held %llu rc %d physical %lld charged %lld\n", held, rc,
               physical(), charged());
        fflush(stdout);
        gc_sleep_ms((unsigned)b);
        return 0;
    }
    if (strcmp(mode, "vmm") == 0 && a > 0 && b > 0)
        return vmm(a * GC_MIB, b * GC_MIB, (unsigned)c);
    if (strcmp(mode, "allocfree") == 0 && a > 0) {
        unsigned long long t0 = gc_now_ns();
        CUdeviceptr p;

        for (unsigned long long i = 0; i < a; i++)
            if (cu.alloc(&p, GC_MIB) != CUDA_SUCCESS || cu.free_(p) != CUDA_SUCCESS) {
                printf("error alloc/free failed at %llu\n", i);
                return 2;
            }
        printf("allocfree_ns %.1f\n", (double)(gc_now_ns() - t0) / (double)a);
        return 0;
    }
    fprintf(stderr, "usage: drv ctx HOLD_MS | fill CHUNK_MIB HOLD_MS [MAX_MIB]"
                    " | vmm POOL_MIB CHUNK_MIB HOLD_MS | allocfree N\n");
    return 2;
}
