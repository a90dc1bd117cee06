/* SPDX-License-Identifier: MIT */
/*
 * cuda_spin.c: a tiny "GPU app" that keeps the device busy, for the
 * time-slicing integration tests. It launches kernels for ever (each a
 * simulated KERNEL_US microseconds on the fake libcuda.so.1 when
 * FAKE_CUDA_LOG is set; /dev/null will do) and synchronizes every 8
 * launches, like an app that reads its results. It prints "running" once
 * its first launch returned (under time slicing: once it held the turn).
 * Linked against the tests' fake libcuda.so.1; acceld preloads
 * libaccelshim.so into it.
 *
 *   cuda_spin [KERNEL_US]     default 1000
 */
#include "common/accel_setup.h"

#include <stdio.h>
#include <stdlib.h>

#include "shim/cuda_types.h"

CUresult cuInit(unsigned flags);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned,
                        unsigned, unsigned, unsigned, CUstream, void **,
                        void **);
CUresult cuCtxSynchronize(void);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);

int main(int argc, char **argv)
{
    unsigned us = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 1000;
    unsigned long n = 0;
    CUcontext ctx = NULL;

    /* as the CUDA runtime starts: the primary context, current (the shim
     * synchronizes the contexts it saw at the end of a turn); it costs
     * the stand-in nothing unless the test says otherwise */
    setenv("FAKE_CUDA_CTX_BYTES", "0", 0);
    cuInit(0);
    if (cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS)
        cuCtxSetCurrent(ctx);
    for (;;) {
        CUresult rc = cuLaunchKernel(NULL, us, 1, 1, 1, 1, 1, 0, NULL, NULL,
                                     NULL);
        if (rc != CUDA_SUCCESS) {
            printf("launch failed: %d\n", (int)rc);
            return 1;
        }
        if (++n == 1) {
            printf("running\n");
            fflush(stdout);
        }
        if (n % 8 == 0)
            cuCtxSynchronize();
    }
}
