/* SPDX-License-Identifier: MIT */
/*
 * vmm.c: the mappings of VMM handles (cuMemMap / hipMemMap), so that a
 * handle released while it is still mapped stays charged until its last
 * mapping is unmapped, as the driver keeps its memory (SPEC 4.2: llama.cpp's
 * VMM pool releases its handles right after mapping them; vLLM's sleep mode
 * and PyTorch's expandable segments on ROCm do the same through HIP).
 *
 * One table of mappings (address, size, handle) and one of handles released
 * while mapped, with their charge. Guarded by one mutex: mapping calls are
 * rare (a pool grows by chunks of tens of MiB) and never on the launch or
 * the plain allocation path.
 */
#include "shim/shim.h"

#include <stdlib.h>

struct vmm_map {
    uint64_t va, size, handle;
};

struct vmm_held {            /* released while mapped: still charged */
    uint64_t handle;
    int ordinal;
    uint64_t bytes;
};

static struct {
    pthread_mutex_t mu;
    struct vmm_map *maps;
    size_t nmaps, capmaps;
    struct vmm_held *held;
    size_t nheld, capheld;
} vm = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Room for one more element of an array (mu held); 0, or -1 out of memory. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    void *p;
    size_t c;

    if (n < *cap)
        return 0;
    c = *cap ? *cap * 2 : 64;
    p = realloc(*arr, c * elem);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

static int mapped(uint64_t handle)
{
    for (size_t i = 0; i < vm.nmaps; i++)
        if (vm.maps[i].handle == handle)
            return 1;
    return 0;
}

void vmm_mapped(uint64_t va, uint64_t size, uint64_t handle)
{
    pthread_mutex_lock(&vm.mu);
    if (grow((void **)&vm.maps, &vm.capmaps, vm.nmaps, sizeof(*vm.maps)) == 0)
        vm.maps[vm.nmaps++] = (struct vmm_map){ va, size, handle };
    else
        shim_log("vmm: mapping table full: a handle released while mapped "
                 "is given back at its release");
    pthread_mutex_unlock(&vm.mu);
}

int vmm_hold_release(uint64_t handle)
{
    int ordinal = 0, held = 0;
    uint64_t bytes = 0;

    pthread_mutex_lock(&vm.mu);
    if (mapped(handle) &&
        grow((void **)&vm.held, &vm.capheld, vm.nheld, sizeof(*vm.held)) ==
            0 &&
        track_take(SHIM_KIND_HANDLE, handle, &ordinal, &bytes, NULL)) {
        vm.held[vm.nheld++] = (struct vmm_held){ handle, ordinal, bytes };
        held = 1;
    }
    pthread_mutex_unlock(&vm.mu);
    return held;
}

void vmm_unhold(uint64_t handle)
{
    pthread_mutex_lock(&vm.mu);
    for (size_t i = 0; i < vm.nheld; i++) {
        if (vm.held[i].handle == handle) {
            track_put(SHIM_KIND_HANDLE, handle, vm.held[i].ordinal,
                      vm.held[i].bytes, 0);
            vm.held[i] = vm.held[--vm.nheld];
            break;
        }
    }
    pthread_mutex_unlock(&vm.mu);
}

void vmm_unmapped(uint64_t va, uint64_t size)
{
    struct vmm_held gone[16];
    size_t ngone = 0;

    pthread_mutex_lock(&vm.mu);
    for (size_t i = 0; i < vm.nmaps;) {
        uint64_t h = vm.maps[i].handle;
        if (vm.maps[i].va < va || vm.maps[i].va - va >= size) {
            i++;
            continue;
        }
        vm.maps[i] = vm.maps[--vm.nmaps];
        if (mapped(h))
            continue;
        for (size_t j = 0; j < vm.nheld; j++) {
            if (vm.held[j].handle != h)
                continue;
            if (ngone < sizeof(gone) / sizeof(*gone))
                gone[ngone++] = vm.held[j];
            else { /* more than 16 handles in one unmap: rare, not lost */
                quota_release(vm.held[j].ordinal, vm.held[j].bytes);
                share_gone(vm.held[j].handle);
            }
            vm.held[j] = vm.held[--vm.nheld];
            break;
        }
    }
    pthread_mutex_unlock(&vm.mu);
    for (size_t i = 0; i < ngone; i++) {
        quota_release(gone[i].ordinal, gone[i].bytes);
        share_gone(gone[i].handle);
    }
}

void vmm_fork_prepare(void)
{
    pthread_mutex_lock(&vm.mu);
}

void vmm_fork_parent(void)
{
    pthread_mutex_unlock(&vm.mu);
}

/* The parent's mappings and handles are not the child's. */
void vmm_fork_child(void)
{
    vm.nmaps = 0;
    vm.nheld = 0;
    pthread_mutex_unlock(&vm.mu);
}
