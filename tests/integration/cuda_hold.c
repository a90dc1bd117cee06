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
 * no flags) and prints "lookup NAME: 0". Linked against the tests' fake libcuda.so.1; acceld
 * preloads libaccelshim.so into it.
 */
#include "common/accel_setup.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "shim/cuda_types.h"

CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                             cuuint64_t flags, void *symbolStatus);

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
