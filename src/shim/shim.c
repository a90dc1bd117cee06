/* SPDX-License-Identifier: MIT */
/*
 * shim.c: the state of libaccelshim.so, its staged initialisation and the
 * resolution of the real driver and NVML symbols.
 *
 * Nothing runs at load time: a process that never touches CUDA (a shell, a
 * compiler) pays only for mapping this small library. The first hook called
 * runs core init (config and limits, fork handler), the first CUDA hook loads
 * libcuda.so.1 and resolves every CUDA symbol of symbols.h once, the first
 * NVML hook does the same for libnvidia-ml.so.1. A symbol the driver lacks
 * stays NULL and its hook returns an error code; nothing calls through NULL.
 *
 * Logging goes to ACCEL_LOG ("stderr", "1" or a file path) and nowhere when
 * it is unset (opened here, written by base.c's shim_log). The shim never
 * aborts, exits or installs a signal handler.
 */
#include "shim/shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

SHIM_HIDDEN struct accel_shim_state shim_state = {
    .core_once = PTHREAD_ONCE_INIT,
    .cuda_once = PTHREAD_ONCE_INIT,
    .cuda_all_once = PTHREAD_ONCE_INIT,
    .nvml_once = PTHREAD_ONCE_INIT,
};
SHIM_HIDDEN _Thread_local int shim_in_init
    __attribute__((tls_model("initial-exec")));

/* Open the ACCEL_LOG target once; -1 means logging is off. */
static int log_open(void)
{
    const char *v = getenv("ACCEL_LOG");

    if (v == NULL || v[0] == '\0' || strcmp(v, "0") == 0)
        return -1;
    if (strcmp(v, "1") == 0 || strcmp(v, "stderr") == 0)
        return STDERR_FILENO;
    return open(v, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

/* Lock order: pools, then VMM, then the allocation table. */
static void fork_prepare(void)
{
    pool_fork_prepare();
    vmm_fork_prepare();
    track_fork_prepare();
}

static void fork_parent(void)
{
    track_fork_parent();
    vmm_fork_parent();
    pool_fork_parent();
}

/* In the child: new pid, own ledger slots, an empty allocation table (the
 * parent's allocations are not the child's to free). */
static void fork_child(void)
{
    shim_state.pid = getpid();
    track_fork_child();
    vmm_fork_child();
    pool_fork_child();
    ctx_fork_child();
    share_fork_child();
    quota_fork_child();
    timeslice_fork_child();
}

static void core_init_once(void)
{
    shim_in_init = 1;
    shim_state.pid = getpid();
    shim_state.log_fd = log_open() + 1;
    track_init();
    config_load();
    atomic_store_explicit(&shim_state.core_ready, 1, memory_order_release);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    shim_in_init = 0;
}

void shim_core_init(void)
{
    if (atomic_load_explicit(&shim_state.core_ready, memory_order_acquire))
        return;
    if (shim_in_init)
        return; /* re-entered from our own init: leave it to the outer call */
    pthread_once(&shim_state.core_once, core_init_once);
}

/* Resolve every symbol of library `lib` from `handle` into shim_state.real. */
#define SHIM_RESOLVE(lib_, hooked, ret, name, params)                          \
    if (lib_ == lib && handle != NULL)                                         \
        __atomic_store_n(&shim_state.real.name,                                \
                         (ret(*) params)(uintptr_t)shim_state.real_dlsym(      \
                             handle, #name),                                   \
                         __ATOMIC_RELEASE);
enum { CUDA = 1, NVML = 2, HIP = 3 };

static void resolve_lib(int lib, void *handle)
{
    ACCEL_SHIM_SYMBOLS(SHIM_RESOLVE)
}

static void cuda_init_once(void)
{
    shim_core_init();
    procaddr_dl_init();
    shim_in_init = 1;
    shim_state.libcuda = dlopen("libcuda.so.1", RTLD_LAZY);
    if (shim_state.libcuda == NULL)
        shim_log("libcuda.so.1 not loaded: %s", dlerror());
    atomic_store_explicit(&shim_state.cuda_ready, 1, memory_order_release);
    shim_in_init = 0;
}

void shim_cuda_init(void)
{
    if (shim_in_init)
        return;
    pthread_once(&shim_state.cuda_once, cuda_init_once);
}

void shim_cuda_resolve(int idx, const char *name, void **slot)
{
    _Atomic uint64_t *w = &shim_state.cuda_tried[idx / 64];
    uint64_t bit = 1ULL << (idx % 64);
    void *p;

    shim_cuda_init();
    if (shim_in_init || shim_state.real_dlsym == NULL ||
        shim_state.libcuda == NULL ||
        (atomic_load_explicit(w, memory_order_acquire) & bit))
        return;
    p = shim_state.real_dlsym(shim_state.libcuda, name);
    __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    atomic_fetch_or_explicit(w, bit, memory_order_release);
}

static void cuda_all_once(void)
{
    shim_cuda_init();
    shim_in_init = 1;
    if (shim_state.real_dlsym != NULL)
        resolve_lib(CUDA, shim_state.libcuda);
    shim_in_init = 0;
}

void shim_cuda_resolve_all(void)
{
    if (shim_in_init)
        return;
    pthread_once(&shim_state.cuda_all_once, cuda_all_once);
}

static void nvml_init_once(void)
{
    shim_core_init();
    procaddr_dl_init();
    shim_in_init = 1;
    shim_state.libnvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY);
    if (shim_state.libnvml == NULL)
        shim_log("libnvidia-ml.so.1 not loaded: %s", dlerror());
    if (shim_state.real_dlsym != NULL)
        resolve_lib(NVML, shim_state.libnvml);
    atomic_store_explicit(&shim_state.nvml_ready, 1, memory_order_release);
    shim_in_init = 0;
}

void shim_nvml_init(void)
{
    if (shim_in_init)
        return;
    pthread_once(&shim_state.nvml_once, nvml_init_once);
}

/* The HIP runtime the process uses: its soname (ROCm 6, 7, 5), or the
 * development name. A process that calls a hip* hook has it loaded
 * already, so the dlopen only finds it. */
static void hip_init_once(void)
{
    static const char *const names[] = { "libamdhip64.so.6",
                                         "libamdhip64.so.7",
                                         "libamdhip64.so.5",
                                         "libamdhip64.so" };
    shim_core_init();
    procaddr_dl_init();
    shim_in_init = 1;
    for (size_t i = 0; shim_state.libhip == NULL &&
                       i < sizeof(names) / sizeof(*names); i++)
        shim_state.libhip = dlopen(names[i], RTLD_LAZY);
    if (shim_state.libhip == NULL)
        shim_log("libamdhip64.so not loaded: %s", dlerror());
    if (shim_state.real_dlsym != NULL)
        resolve_lib(HIP, shim_state.libhip);
    atomic_store_explicit(&shim_state.hip_ready, 1, memory_order_release);
    shim_in_init = 0;
}

void shim_hip_init(void)
{
    if (shim_in_init)
        return;
    pthread_once(&shim_state.hip_once, hip_init_once);
}

/* Give this process's slots back when it ends cleanly (the driver frees its
 * memory when the process ends; a killed process is reclaimed by others). */
__attribute__((destructor)) static void shim_fini(void)
{
    if (atomic_load_explicit(&shim_state.core_ready, memory_order_acquire))
        quota_detach_all();
}
