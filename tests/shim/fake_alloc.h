/* SPDX-License-Identifier: MIT */
/*
 * fake_alloc.h: the simulated device memory behind both stand-in drivers
 * (fake_cuda.c's libcuda.so.1, fake_hip.c's libamdhip64.so.6): FAKE_CUDA_TOTAL
 * bytes (default 16 GiB), unique pointer-ish keys from the driver's own
 * fake_base, the shared record of fake_cuda.h (FAKE_CUDA_SHM), and
 * FAKE_CUDA_FAIL=1 to make every allocation fail. Each library links its
 * own copy; hidden, so that two fakes in one process never share one.
 */
#ifndef ACCEL_TESTS_SHIM_FAKE_ALLOC_H
#define ACCEL_TESTS_SHIM_FAKE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "fake_cuda.h"

#define FAKE_HIDDEN __attribute__((visibility("hidden")))
/* What a fake library exports: the driver's entry points. */
#define EXPORT __attribute__((visibility("default")))

/* Where the driver's keys start (each driver defines it: its pointers
 * must not look like the other's). */
FAKE_HIDDEN extern const uint64_t fake_base;

/* The record, set up on first use (any of these functions sets it up). */
FAKE_HIDDEN struct fake_cuda_stats *fake_record(void);

/* Take `bytes`: a key at or above fake_base, or 0 when full or failing. */
FAKE_HIDDEN uint64_t fake_take(uint64_t bytes);

/* Give back a key of fake_take: 0, or -1 for one it never handed out (or
 * already took back), counted as an unknown free. */
FAKE_HIDDEN int fake_give(uint64_t key);

/* Free and total bytes now, as the drivers' meminfo calls answer them;
 * free may be NULL. */
FAKE_HIDDEN void fake_mem_info(size_t *free_bytes, size_t *total_bytes);

#endif /* ACCEL_TESTS_SHIM_FAKE_ALLOC_H */
