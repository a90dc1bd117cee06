/* SPDX-License-Identifier: MIT */
/*
 * hip_hold.c: cuda_hold's HIP twin for the integration tests. It allocates
 * the sizes given on the command line (MiB) with hipMalloc, prints one line
 * per allocation ("alloc 512 MiB: 0"; 2 = hipErrorOutOfMemory), the total
 * hipMemGetInfo reports and HIP_VISIBLE_DEVICES, then holds the memory
 * until it is stopped. Linked against the tests' stand-in libamdhip64.so.6;
 * acceld preloads libaccelshim.so into it.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "shim/hip_types.h"

hipError_t hipMalloc(void **p, size_t bytes);
hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total_bytes);

int main(int argc, char **argv)
{
    const char *vis = getenv("HIP_VISIBLE_DEVICES");
    size_t fr = 0, total = 0;
    for (int i = 1; i < argc; i++) {
        void *p = NULL;
        unsigned long long mib = strtoull(argv[i], NULL, 10);
        hipError_t rc = hipMalloc(&p, (size_t)mib << 20);
        printf("alloc %llu MiB: %d\n", mib, (int)rc);
    }
    hipMemGetInfo(&fr, &total);
    printf("total %zu MiB free %zu MiB\n", total >> 20, fr >> 20);
    printf("HIP_VISIBLE_DEVICES=%s\n", vis ? vis : "(unset)");
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
