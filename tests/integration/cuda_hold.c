/* SPDX-License-Identifier: MIT */
/*
 * cuda_hold.c: a tiny "GPU app" for the integration tests. It allocates the
 * sizes given on the command line (MiB) with cuMemAlloc_v2, prints one line
 * per allocation ("alloc 512 MiB: 0"; 2 = CUDA_ERROR_OUT_OF_MEMORY) and the
 * total the driver reports through cuMemGetInfo_v2, then holds the memory
 * until it is stopped. An argument "@PATH" waits until PATH exists (a test
 * changes something meanwhile), printing "waiting" and then the
 * cuMemGetInfo_v2 figures ("info total 1024 MiB free 202 MiB"). An
 * argument "?NAME" looks NAME up through cuGetProcAddress_v2 (CUDA 12.0,
 * no flags) and prints "lookup NAME: 0". An argument "!NAME" calls one of
 * the entry points the shim leaves to the outside meter (a module or
 * library load, a linker, a graph's instantiation or upload, an external
 * memory import; docs/shim-inventory.md) as a program would, found by
 * dlsym, and prints "call NAME: 0"; "!free" ends the last thing made so
 * (cuModuleUnload, cuGraphExecDestroy, ...) and prints "free NAME: 0".
 * An argument "=N" makes N MiB of physical memory with cuMemCreate (VMM:
 * on a time-sliced card never paged out, so charged to the card's
 * ledger, where cuMemAlloc_v2's managed memory is not) and prints
 * "create N MiB: 0".
 * Linked against the tests' fake libcuda.so.1; acceld preloads
 * libaccelshim.so into it.
 */
#include "common/accel_setup.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim/cuda_types.h"

CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes,
                     const CUmemAllocationProp *prop,
                     unsigned long long flags);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                             cuuint64_t flags, void *symbolStatus);

/* The meter's entry points: how each is called, and what ends it. */
enum call_shape {
    OUT_PTR,          /* fn(&h, ptr) */
    OUT_PTR_JIT,      /* fn(&h, image, 0, NULL, NULL) */
    OUT_LIBRARY,      /* fn(&h, code, NULL, NULL, 0, NULL, NULL, 0) */
    LINKER,           /* fn(0, NULL, NULL, &h) */
    GRAPH_FLAGS,      /* fn(&h, graph, 0) */
    GRAPH_LEGACY,     /* fn(&h, graph, NULL, NULL, 0) */
    GRAPH_PARAMS,     /* fn(&h, graph, &params) */
    UPLOAD,           /* fn(h, stream): the graph made by the last call */
};
static const struct {
    const char *name, *end;
    enum call_shape shape;
} calls[] = {
    { "cuModuleLoad", "cuModuleUnload", OUT_PTR },
    { "cuModuleLoadData", "cuModuleUnload", OUT_PTR },
    { "cuModuleLoadFatBinary", "cuModuleUnload", OUT_PTR },
    { "cuModuleLoadDataEx", "cuModuleUnload", OUT_PTR_JIT },
    { "cuLibraryLoadData", "cuLibraryUnload", OUT_LIBRARY },
    { "cuLibraryLoadFromFile", "cuLibraryUnload", OUT_LIBRARY },
    { "cuLinkCreate", "cuLinkDestroy", LINKER },
    { "cuLinkCreate_v2", "cuLinkDestroy", LINKER },
    { "cuGraphInstantiateWithFlags", "cuGraphExecDestroy", GRAPH_FLAGS },
    { "cuGraphInstantiate", "cuGraphExecDestroy", GRAPH_LEGACY },
    { "cuGraphInstantiate_v2", "cuGraphExecDestroy", GRAPH_LEGACY },
    { "cuGraphInstantiateWithParams", "cuGraphExecDestroy", GRAPH_PARAMS },
    { "cuGraphInstantiateWithParams_ptsz", "cuGraphExecDestroy",
      GRAPH_PARAMS },
    { "cuGraphUpload", "cuGraphExecDestroy", UPLOAD },
    { "cuGraphUpload_ptsz", "cuGraphExecDestroy", UPLOAD },
    { "cuImportExternalMemory", "cuDestroyExternalMemory", OUT_PTR },
};

static void *made;            /* what the last "!NAME" made */
static const char *made_end;  /* and what ends it */

static int call_outside(const char *name)
{
    static char image[64], params[64];
    void *fn = dlsym(RTLD_DEFAULT, name), *g = (void *)(uintptr_t)0x4000;
    int i = 0, rc;

    while (i < (int)(sizeof(calls) / sizeof(*calls)) &&
           strcmp(calls[i].name, name) != 0)
        i++;
    if (fn == NULL || i == (int)(sizeof(calls) / sizeof(*calls)))
        return -1;
    switch (calls[i].shape) {
    case OUT_PTR:
        rc = ((int (*)(void **, const void *))fn)(&made, image);
        break;
    case OUT_PTR_JIT:
        rc = ((int (*)(void **, const void *, unsigned, void *, void **))fn)(
            &made, image, 0, NULL, NULL);
        break;
    case OUT_LIBRARY:
        rc = ((int (*)(void **, const void *, void *, void **, unsigned,
                       void *, void **, unsigned))fn)(&made, image, NULL, NULL,
                                                      0, NULL, NULL, 0);
        break;
    case LINKER:
        rc = ((int (*)(unsigned, void *, void **, void **))fn)(0, NULL, NULL,
                                                               &made);
        break;
    case GRAPH_FLAGS:
        rc = ((int (*)(void **, void *, unsigned long long))fn)(&made, g, 0);
        break;
    case GRAPH_LEGACY:
        rc = ((int (*)(void **, void *, void *, char *, size_t))fn)(
            &made, g, NULL, NULL, 0);
        break;
    case GRAPH_PARAMS:
        rc = ((int (*)(void **, void *, void *))fn)(&made, g, params);
        break;
    default: /* UPLOAD */
        rc = ((int (*)(void *, void *))fn)(made, NULL);
        break;
    }
    made_end = calls[i].end;
    return rc;
}

static int end_outside(void)
{
    void *fn = made_end ? dlsym(RTLD_DEFAULT, made_end) : NULL;

    return fn ? ((int (*)(void *))fn)(made) : -1;
}

/* "@PATH": wait for PATH, then say what cuMemGetInfo_v2 says. */
static void wait_for_file(const char *path)
{
    size_t fr = 0, total = 0;
    printf("waiting\n");
    fflush(stdout);
    while (access(path, F_OK) != 0)
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    cuMemGetInfo_v2(&fr, &total);
    printf("info total %zu MiB free %zu MiB\n", total >> 20, fr >> 20);
}

int main(int argc, char **argv)
{
    size_t fr = 0, total = 0;
    CUcontext ctx = NULL;

    /* cuMemGetInfo_v2 needs a current context (the stand-in refuses it
     * without one, as the driver does): the primary one, made current as
     * the CUDA runtime does. On the stand-in it costs nothing (unless the
     * test says otherwise), so that the figures are the allocations'. */
    setenv("FAKE_CUDA_CTX_BYTES", "0", 0);
    cuInit(0);
    if (cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS)
        cuCtxSetCurrent(ctx);
    for (int i = 1; i < argc; i++) {
        CUdeviceptr p;
        unsigned long long mib;
        CUresult rc;
        if (argv[i][0] == '@') {
            wait_for_file(argv[i] + 1);
            continue;
        }
        if (strcmp(argv[i], "!free") == 0) {
            printf("free %s: %d\n", made_end ? made_end : "-", end_outside());
            fflush(stdout);
            continue;
        }
        if (argv[i][0] == '!') {
            printf("call %s: %d\n", argv[i] + 1, call_outside(argv[i] + 1));
            fflush(stdout);
            continue;
        }
        if (argv[i][0] == '=') {
            CUmemAllocationProp pr = {
                .type = 1, /* pinned */
                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
            CUmemGenericAllocationHandle h = 0;
            mib = strtoull(argv[i] + 1, NULL, 10);
            rc = cuMemCreate(&h, (size_t)mib << 20, &pr, 0);
            printf("create %llu MiB: %d\n", mib, (int)rc);
            fflush(stdout);
            continue;
        }
        if (argv[i][0] == '?') {
            void *fn = NULL;
            rc = cuGetProcAddress_v2(argv[i] + 1, &fn, 12000, 0, NULL);
            printf("lookup %s: %d\n", argv[i] + 1, (int)rc);
            fflush(stdout);
            continue;
        }
        mib = strtoull(argv[i], NULL, 10);
        rc = cuMemAlloc_v2(&p, (size_t)mib << 20);
        printf("alloc %llu MiB: %d\n", mib, (int)rc);
        fflush(stdout);
    }
    cuMemGetInfo_v2(&fr, &total);
    printf("total %zu MiB free %zu MiB\n", total >> 20, fr >> 20);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
