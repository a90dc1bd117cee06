/* SPDX-License-Identifier: MIT */
/*
 * fake_cuda.h: the record the fake libcuda.so.1 / libnvidia-ml.so.1 keep,
 * shared by every process of a test through the file named by FAKE_CUDA_SHM
 * (process-local when unset). Tests read it to see what reached the driver
 * and the most device memory ever held at once.
 */
#ifndef ACCEL_TESTS_SHIM_FAKE_CUDA_H
#define ACCEL_TESTS_SHIM_FAKE_CUDA_H

#include <stdatomic.h>
#include <stdint.h>

struct fake_cuda_stats {
    _Atomic int64_t used;          /* device bytes held now, all processes */
    _Atomic int64_t max_used;      /* highest `used` ever */
    _Atomic uint64_t allocs;       /* successful allocations */
    _Atomic uint64_t frees;        /* successful frees */
    _Atomic uint64_t unknown_frees; /* frees of pointers the fake never made */
    _Atomic uint64_t last_free;    /* last pointer/handle passed to a free */
    _Atomic uint64_t launches;     /* cuLaunchKernel calls */
};

/* One simulated submission in FAKE_CUDA_LOG (time-slicing tests). */
struct fake_interval {
    int64_t pid;                   /* submitting process */
    int64_t start, end;            /* ns, CLOCK_MONOTONIC */
};

#endif /* ACCEL_TESTS_SHIM_FAKE_CUDA_H */
