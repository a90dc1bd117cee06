/* SPDX-License-Identifier: MIT */
/*
 * fake_alloc.h: the simulated card behind the stand-in drivers (fake_cuda.c's
 * libcuda.so.1, fake_hip.c's libamdhip64.so.6), with the lifetimes of the
 * real driver:
 *   - FAKE_CUDA_TOTAL bytes (default 16 GiB), shared by every process of a
 *     test through FAKE_CUDA_SHM (fake_cuda.h), each process's share kept
 *     apart (NVML's per-process figure); a dead process's share goes back
 *     when the card next runs short, as the driver frees it at exit;
 *   - VMM: a handle's memory lives until it is released AND every mapping
 *     of it is unmapped;
 *   - stream-ordered pools (one default per device, and created ones) keep
 *     what is freed into them until a synchronize finds them above their
 *     release threshold (default 0) or they are trimmed;
 *   - a context costs FAKE_CUDA_CTX_BYTES (default 64 MiB) of the card;
 *   - FAKE_CUDA_FAIL=1 makes every allocation fail.
 * Each library links its own copy; hidden, so that two fakes in one process
 * never share one.
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

/* Hold `bytes` of the card for this process without a key (a pool's
 * growth, a context): 0, or -1 when the card is full or failing. */
FAKE_HIDDEN /* Set around a managed allocation with FAKE_CUDA_OVERSUB=1: the card's
 * memory may be passed (the driver pages managed memory; issue 49). */
extern _Thread_local int fake_charge_oversub;
/* Set around a context's creation: FAKE_CUDA_FAIL=1 fails the program's
 * allocations, not the context it makes before any (as the real driver
 * refuses an allocation without one). */
FAKE_HIDDEN extern _Thread_local int fake_charge_ctx;
int fake_charge(uint64_t bytes);
FAKE_HIDDEN void fake_uncharge(uint64_t bytes);

/* Take `bytes`: a key at or above fake_base, or 0 when full or failing. */
FAKE_HIDDEN uint64_t fake_take(uint64_t bytes);

/* fake_take for memory made in context `owner` (0 none), which
 * fake_give_owned frees all at once (a context's end or reset). */
FAKE_HIDDEN uint64_t fake_take_in(uint64_t bytes, uint64_t owner);
FAKE_HIDDEN void fake_give_owned(uint64_t owner);

/* VMM sharing: export a handle (the index of its shared entry, or -1),
 * import one (a new handle of this process, or 0). */
FAKE_HIDDEN int fake_vmm_export(uint64_t handle);
FAKE_HIDDEN uint64_t fake_vmm_import(int index);
/* The same by file descriptor, as the drivers hand it out (a memfd
 * holding the entry's index): a descriptor, or -1; a handle, or 0. */
FAKE_HIDDEN int fake_vmm_export_fd(uint64_t handle);
FAKE_HIDDEN uint64_t fake_vmm_import_fd(int fd);

/* Give back a key of fake_take (or of a pool, into its pool): 0, or -1 for
 * one it never handed out (or already took back), counted as an unknown
 * free. A VMM handle: its release (memory stays while it is mapped). */
FAKE_HIDDEN int fake_give(uint64_t key);

/* Free and total bytes now, as the drivers' meminfo calls answer them;
 * free may be NULL. */
FAKE_HIDDEN void fake_mem_info(size_t *free_bytes, size_t *total_bytes);

/* What one context costs on the card (FAKE_CUDA_CTX_BYTES). */
FAKE_HIDDEN uint64_t fake_ctx_bytes(void);

/* VMM: a handle of `bytes` (0 when full; one on the host takes no device
 * memory); a range of addresses (no memory); map a handle at va (0 or -1);
 * unmap every mapping that starts in [va, va + size) (0, or -1 if none
 * did). */
FAKE_HIDDEN uint64_t fake_vmm_create(uint64_t bytes, int on_device);
FAKE_HIDDEN uint64_t fake_va_reserve(uint64_t size);
FAKE_HIDDEN int fake_vmm_map(uint64_t va, uint64_t size, uint64_t handle);
FAKE_HIDDEN int fake_vmm_unmap(uint64_t va, uint64_t size);

/* Stream-ordered pools; a pool is a small number (its index + 1), 0 none. */
enum fake_pool_attr {        /* CUmemPool_attribute (hipMemPoolAttr alike) */
    FAKE_POOL_RELEASE_THRESHOLD = 4,
    FAKE_POOL_RESERVED_CURRENT = 5,
    FAKE_POOL_RESERVED_HIGH = 6,
    FAKE_POOL_USED_CURRENT = 7,
    FAKE_POOL_USED_HIGH = 8,
};
FAKE_HIDDEN uintptr_t fake_pool_default(int dev);
FAKE_HIDDEN uintptr_t fake_pool_current(int dev);
FAKE_HIDDEN int fake_pool_set_current(int dev, uintptr_t pool);
FAKE_HIDDEN uintptr_t fake_pool_create(int dev);
FAKE_HIDDEN int fake_pool_destroy(uintptr_t pool);
/* An allocation of `bytes` from pool (0 = the device's current pool of
 * FAKE_CUDA_DEVICE): a key, or 0 when the card cannot grow the pool. */
FAKE_HIDDEN uint64_t fake_pool_alloc(uintptr_t pool, uint64_t bytes);
FAKE_HIDDEN int fake_pool_set(uintptr_t pool, int attr, uint64_t v);
FAKE_HIDDEN int fake_pool_get(uintptr_t pool, int attr, uint64_t *v);
FAKE_HIDDEN int fake_pool_trim(uintptr_t pool, uint64_t keep);
/* A synchronize: every pool above its release threshold gives memory back
 * down to it (never below what is live in it). */
FAKE_HIDDEN void fake_pools_sync(void);

/* What this process holds on the card now (its per-process figure, as
 * NVML or the amdgpu fdinfo tells it). */
FAKE_HIDDEN int64_t fake_proc_used(void);

/* The device the calling thread works on (FAKE_CUDA_DEVICE, default 0). */
FAKE_HIDDEN int fake_device(void);

#endif /* ACCEL_TESTS_SHIM_FAKE_ALLOC_H */
