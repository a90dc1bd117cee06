/* SPDX-License-Identifier: MIT */
/*
 * cuda_hold.c: a tiny "GPU app" for the integration tests. It allocates the
 * sizes given on the command line (MiB) with cuMemAlloc_v2, prints one line
 * per allocation ("alloc 512 MiB: 0"; 2 = CUDA_ERROR_OUT_OF_MEMORY) and the
 * total the driver reports through cuMemGetInfo_v2, then holds the memory
 * until it is stopped. Linked against the tests' fake libcuda.so.1; acceld
 * preloads libaccelshim.so into it.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "shim/cuda_types.h"

CUresult cuInit(unsigned flags);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);

int main(int argc, char **argv)
{
    size_t fr = 0, total = 0;
    cuInit(0);
    for (int i = 1; i < argc; i++) {
        CUdeviceptr p;
        unsigned long long mib = strtoull(argv[i], NULL, 10);
        CUresult rc = cuMemAlloc_v2(&p, (size_t)mib << 20);
        printf("alloc %llu MiB: %d\n", mib, (int)rc);
    }
    cuMemGetInfo_v2(&fr, &total);
    printf("total %zu MiB free %zu MiB\n", total >> 20, fr >> 20);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
