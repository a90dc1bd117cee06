/* SPDX-License-Identifier: MIT */
/*
 * escape_cases.c: the paths issue 45 found taking device memory past the
 * quota (docs/shim-inventory.md), each judged by what the stand-in card
 * physically holds (cases_done: the app's peak within its quota) and by
 * the ledger: limits that reserve memory (cuCtxSetLimit), green contexts,
 * a primary context's reset, the pre-3.2 ABI, VMM memory shared by file
 * descriptor, and standalone use across a program's process tree.
 * Linked into shim_case; run_escape_case picks the case.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accel/ledger.h"
#include "daemon/node/ledger.h"
#include "quota_cases.h"
#include "shim/cuda_types.h"

CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAlloc(unsigned int *, unsigned int);
CUresult cuCtxCreate(CUcontext *, unsigned, CUdevice);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuCtxDestroy(CUcontext);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSetLimit(CUlimit, size_t);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuGreenCtxCreate(CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned);
CUresult cuGreenCtxDestroy(CUgreenCtx);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t,
                     const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                             unsigned long long);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemExportToShareableHandle(void *, CUmemGenericAllocationHandle,
                                      CUmemAllocationHandleType,
                                      unsigned long long);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *,
                                        void *, CUmemAllocationHandleType);
struct fake_cuda_stats *fake_cuda_stats(void);

static uint64_t card(void)
{
    return (uint64_t)atomic_load(&fake_cuda_stats()->used);
}

/* The stack for 108 x 2048 resident threads (FAKE_CUDA_SMS), a 2 GiB
 * device heap, then a printf FIFO past the 4 GiB quota: each reserved when
 * set, as the driver does, and all given back with the context. */
static void case_ctx_limit(void)
{
    const uint64_t stack = (8192 - 1024) * 2048ULL * 108;
    const uint64_t heap = 2 * GiB - 8 * MiB;
    CUcontext c;
    CUdeviceptr d;

    CHECK(cuCtxCreate_v2(&c, 0, 0) == 0, "context");
    CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 8192) == 0, "8 KiB stack");
    CHECK(ledger_used() == stack, "stack charged %llu, want %llu",
          (unsigned long long)ledger_used(), (unsigned long long)stack);
    CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 2 * GiB) == 0, "heap");
    CHECK(ledger_used() == stack + heap, "heap charged: %llu",
          (unsigned long long)ledger_used());
    CHECK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 600 * MiB) ==
              CUDA_ERROR_OUT_OF_MEMORY, "a FIFO past the quota");
    CHECK(atomic_load(&fake_cuda_stats()->refused) == 0,
          "the shim refused it, not the card");
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "768 MiB beside the reserved stack and heap");
    CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, GiB) == 0, "heap down");
    CHECK(ledger_used() == stack + heap - GiB, "heap lowered: %llu",
          (unsigned long long)ledger_used());
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == 0, "768 MiB now");
    CHECK(cuCtxDestroy_v2(c) == 0, "destroy");
    CHECK(ledger_used() == 0 && card() == 0,
          "the context's end gave back its limits and allocations: %llu/%llu",
          (unsigned long long)ledger_used(), (unsigned long long)card());
}

/* Green contexts (FAKE_CUDA_CTX_BYTES each) measured as contexts are. */
static void case_green_ctx(void)
{
    CUgreenCtx g[8];
    int n = 0;

    while (n < 8 && cuGreenCtxCreate(&g[n], NULL, 0, 1) == 0)
        n++;
    CHECK(n == 4, "%d green contexts of 256 MiB under 1 GiB", n);
    CHECK(ledger_used() == (uint64_t)n * 256 * MiB, "charged %llu",
          (unsigned long long)ledger_used());
    while (n > 0)
        CHECK(cuGreenCtxDestroy(g[--n]) == 0, "destroy");
    CHECK(ledger_used() == 0 && card() == 0, "all given back: %llu/%llu",
          (unsigned long long)ledger_used(), (unsigned long long)card());
}

/* cudaDeviceReset (numba's cuda.close()): the driver frees everything of
 * the primary context; the shim must give all of it back, no more, no
 * less, and a context of cuCtxCreate likewise at its destroy. */
static void case_ctx_reset(void)
{
    CUcontext pc, c;
    CUdeviceptr d, e;

    CHECK(cuDevicePrimaryCtxRetain(&pc, 0) == 0 && cuCtxSetCurrent(pc) == 0,
          "primary");
    CHECK(cuMemAlloc_v2(&d, 512 * MiB) == 0, "512 MiB");
    CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 136 * MiB) == 0, "heap");
    CHECK(ledger_used() == 704 * MiB, "charged %llu",
          (unsigned long long)(ledger_used() >> 20));
    CHECK(cuDevicePrimaryCtxReset_v2(0) == 0, "reset");
    CHECK(card() == 0, "the stand-in kept %llu", (unsigned long long)card());
    CHECK(ledger_used() == 0, "after the reset %llu MiB stay charged",
          (unsigned long long)(ledger_used() >> 20));
    /* the runtime's next call makes the primary context again */
    CHECK(cuDevicePrimaryCtxRetain(&pc, 0) == 0 && cuCtxSetCurrent(pc) == 0,
          "primary again");
    CHECK(cuMemAlloc_v2(&d, 960 * MiB) == 0, "the whole quota again");
    CHECK(cuMemFree_v2(d) == 0, "free");
    CHECK(cuCtxCreate_v2(&c, 0, 0) == 0, "a context of our own");
    CHECK(cuMemAlloc_v2(&e, 256 * MiB) == 0, "256 MiB in it");
    CHECK(cuCtxDestroy_v2(c) == 0, "destroy");
    CHECK(ledger_used() == 64 * MiB && card() == 64 * MiB,
          "its allocation went with it: %llu/%llu MiB",
          (unsigned long long)(ledger_used() >> 20),
          (unsigned long long)(card() >> 20));
}

/* The pre-3.2 ABI, exported and handed out below version 3020: its
 * 32-bit allocations refused under a quota, its cuCtxCreate (which
 * ctypes scripts still call by name) held as cuCtxCreate_v2. */
static void case_legacy_abi(void)
{
    CUresult (*old)(unsigned int *, unsigned int) = NULL;
    unsigned int p = 0;
    CUcontext c;

    CHECK(cuMemAlloc(&p, 64 << 20) == CUDA_ERROR_NOT_SUPPORTED,
          "cuMemAlloc (32-bit)");
    CHECK(cuGetProcAddress("cuMemAlloc", (void **)&old, 3000, 0) == 0 &&
              old != NULL && old(&p, 64 << 20) == CUDA_ERROR_NOT_SUPPORTED,
          "cuMemAlloc at version 3000 through cuGetProcAddress");
    CHECK(card() == 0, "the card gave %llu", (unsigned long long)card());
    CHECK(cuCtxCreate(&c, 0, 0) == 0, "cuCtxCreate (pre-3.2 name)");
    CHECK(ledger_used() == 64 * MiB && card() == 64 * MiB,
          "the context charged: %llu of %llu MiB",
          (unsigned long long)(ledger_used() >> 20),
          (unsigned long long)(card() >> 20));
    CHECK(cuCtxDestroy(c) == 0 && ledger_used() == 0, "given back: %llu",
          (unsigned long long)ledger_used());
}

/* The importing side: import the descriptor, map, say 'm'; when told,
 * unmap, release, say 'd'. */
static void case_vmm_import(char **argv)
{
    int fd = (int)strtol(argv[2], NULL, 10);
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;

    CHECK(cuMemImportFromShareableHandle(
              &h, (void *)(intptr_t)fd,
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0, "import");
    CHECK(cuMemAddressReserve(&va, 512 * MiB, 0, 0, 0) == 0 &&
              cuMemMap(va, 512 * MiB, 0, h, 0) == 0, "map");
    CHECK(peer_say('m') && peer_wait(), "the creator");
    CHECK(cuMemUnmap(va, 512 * MiB) == 0 && cuMemRelease(h) == 0, "let go");
    CHECK(peer_say('d'), "the creator");
}

/* 512 MiB of VMM memory exported by file descriptor to another process of
 * the app; the creator unmaps and releases it while the importer still
 * maps it: the card keeps it, and so must the quota, until the importer
 * lets it go too. */
static void case_vmm_share(void)
{
    CUmemAllocationProp p = { .type = 1, .location = { 1, 0 } };
    CUmemGenericAllocationHandle h;
    CUdeviceptr va, d;
    struct peer imp;
    char num[16];
    int fd = -1;

    CHECK(cuMemCreate(&h, 512 * MiB, &p, 0) == 0, "create");
    CHECK(cuMemAddressReserve(&va, 512 * MiB, 0, 0, 0) == 0 &&
              cuMemMap(va, 512 * MiB, 0, h, 0) == 0, "map");
    CHECK(cuMemExportToShareableHandle(
              &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == 0,
          "export");
    snprintf(num, sizeof(num), "%d", fd);
    if (fd < 0 || peer_start(&imp, "shim_case", "vmm_import", num) != 0) {
        failures++;
        return;
    }
    CHECK(peer_hear(&imp, 'm'), "the importer mapped it");
    CHECK(cuMemUnmap(va, 512 * MiB) == 0 && cuMemRelease(h) == 0,
          "the creator lets go");
    CHECK(card() == 512 * MiB, "the stand-in keeps the imported memory");
    CHECK(ledger_used() == 512 * MiB, "still charged: %llu MiB",
          (unsigned long long)(ledger_used() >> 20));
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "768 MiB beside the importer's 512");
    CHECK(peer_go(&imp) && peer_hear(&imp, 'd'), "the importer let go");
    CHECK(peer_end(&imp), "the importer's checks");
    CHECK(ledger_used() == 0 && card() == 0, "given back: %llu/%llu",
          (unsigned long long)ledger_used(), (unsigned long long)card());
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == 0, "768 MiB now");
    close(fd);
}

/* ctx_known's other process: no NVML where it runs (the stand-in driver
 * without it, FAKE_MIN_DIR), so it cannot measure its primary context. */
static void case_ctx_known_child(void)
{
    CUcontext pc;

    CHECK(cuDevicePrimaryCtxRetain(&pc, 0) == 0, "primary");
    CHECK(peer_say('r') && peer_wait(), "the first process");
}

/* A context is measured once per device and app (NVML loaded for it by
 * the first process that makes one); another process of the app charges
 * what was found without measuring: here one that has no NVML at all. */
static void case_ctx_known(void)
{
    const char *min = getenv("FAKE_MIN_DIR"), *old = getenv("LD_LIBRARY_PATH");
    char keep[512];
    struct peer other;
    CUcontext pc;

    CHECK(min != NULL, "FAKE_MIN_DIR");
    CHECK(cuDevicePrimaryCtxRetain(&pc, 0) == 0, "primary");
    CHECK(ledger_used() == 384 * MiB, "measured %llu MiB",
          (unsigned long long)(ledger_used() >> 20));
    snprintf(keep, sizeof(keep), "%s", old ? old : "");
    setenv("LD_LIBRARY_PATH", min ? min : "", 1);
    if (peer_start(&other, "shim_case", "ctx_known_child", "-") != 0) {
        failures++;
        return;
    }
    setenv("LD_LIBRARY_PATH", keep, 1);
    CHECK(peer_hear(&other, 'r'), "the other process retained its own");
    CHECK(card() == 768 * MiB, "the stand-in holds %llu MiB",
          (unsigned long long)(card() >> 20));
    CHECK(ledger_used() == 768 * MiB, "charged %llu MiB for two contexts",
          (unsigned long long)(ledger_used() >> 20));
    CHECK(peer_go(&other) && peer_end(&other), "the other's checks");
}

/* An app whose ledger acceld seeded (a context's size other apps measured
 * on the device, docs/internals/shim.md) measures nothing: its first
 * process's primary context is charged the seed (here 100 MiB, where the
 * stand-in's context really takes 384), and NVML is never loaded for it.
 * The 284 MiB more are the outside meter's to charge (test_meter.py). */
static void case_ctx_seeded(void)
{
    uint64_t seed = 100 * MiB | ACCEL_LEDGER_CTX_MEASURED |
                    ACCEL_LEDGER_CTX_SEEDED;
    CUcontext pc;
    int fd;

    /* the app's ledger as acceld makes it, before the shim maps it */
    CHECK(ledger_create(ledger_path_env(), "app", 0, "", 1024 * MiB,
                        (uid_t)-1, (gid_t)-1) == ACCEL_OK, "the ledger");
    fd = open(ledger_path_env(), O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0 && pwrite(fd, &seed, sizeof seed,
                            (off_t)offsetof(struct accel_ledger, ctx_cost)) ==
                         (ssize_t)sizeof seed, "the seed written");
    if (fd >= 0)
        close(fd);
    CHECK(cuDevicePrimaryCtxRetain(&pc, 0) == 0, "primary");
    CHECK(ledger_used() == 100 * MiB, "charged %llu MiB, not the seed's 100",
          (unsigned long long)(ledger_used() >> 20));
    CHECK(card() == 384 * MiB, "the stand-in holds %llu MiB",
          (unsigned long long)(card() >> 20));
    CHECK(dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD) == NULL,
          "NVML was loaded");
    CHECK(cuDevicePrimaryCtxRelease_v2(0) == 0 && ledger_used() == 0,
          "given back: %llu", (unsigned long long)ledger_used());
}

/* tree_child MIB: allocate MIB MiB; exit 0, 10 refused, 3 another error. */
static int case_tree_child(char **argv)
{
    CUdeviceptr d;
    CUresult rc = cuMemAlloc_v2(&d, strtoull(argv[2], NULL, 10) << 20);

    return rc == 0 ? 0 : rc == CUDA_ERROR_OUT_OF_MEMORY ? 10 : 3;
}

/* Run "shim_case tree_child MIB" in a session of its own (torchrun's
 * start_new_session=True), with envp (NULL: ours); its exit status. */
static int tree_spawn(const char *mib, char **envp)
{
    char *av[] = { "shim_case", "tree_child", (char *)mib, NULL };
    pid_t pid = fork();
    int st = 0;

    if (pid == 0) {
        setsid();
        if (envp != NULL)
            execve("/proc/self/exe", av, envp);
        else
            execv("/proc/self/exe", av);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* The root of the tree (exec'd by case_tree without ACCEL_APP, so that
 * the standalone key is the shim's own): 768 MiB of its 1 GiB, then
 * children in new sessions ask for 512 MiB each, one with our
 * environment, one with an environment of its own that keeps only what
 * the shim and the stand-in need. Both must be refused. */
static void case_tree_root(void)
{
    static const char *keep[] = { "LD_PRELOAD=", "LD_LIBRARY_PATH=",
                                  "XDG_RUNTIME_DIR=", "FAKE_CUDA_SHM=",
                                  "ACCEL_MEMORY_LIMIT=", NULL };
    char *envp[8];
    int n = 0, rc;
    CUdeviceptr d;

    for (char **e = environ; *e != NULL && n < 7; e++)
        for (int i = 0; keep[i] != NULL; i++)
            if (strncmp(*e, keep[i], strlen(keep[i])) == 0)
                envp[n++] = *e;
    envp[n] = NULL;
    CHECK(getenv("ACCEL_SHIM_TREE") != NULL, "the root named its tree");
    CHECK(cuMemAlloc_v2(&d, 768 * MiB) == 0, "768 MiB in the root");
    rc = tree_spawn("512", NULL);
    CHECK(rc == 10, "a child in a new session: exit %d (0: a quota of "
          "its own)", rc);
    rc = tree_spawn("512", envp);
    CHECK(rc == 10, "a child with an environment of its own: exit %d", rc);
    rc = tree_spawn("256", envp);
    CHECK(rc == 0, "what is left of the quota: exit %d", rc);
}

static void case_tree(void)
{
    char *av[] = { "shim_case", "tree_root", NULL };

    unsetenv("ACCEL_APP"); /* the shim's own grouping, not the test's */
    execv("/proc/self/exe", av);
    failures++;
}

int run_escape_case(const char *c, char **argv, int argc)
{
    if (strcmp(c, "ctx_limit") == 0)
        case_ctx_limit();
    else if (strcmp(c, "green_ctx") == 0)
        case_green_ctx();
    else if (strcmp(c, "ctx_reset") == 0)
        case_ctx_reset();
    else if (strcmp(c, "legacy_abi") == 0)
        case_legacy_abi();
    else if (strcmp(c, "vmm_share") == 0)
        case_vmm_share();
    else if (strcmp(c, "vmm_import") == 0 && argc > 2)
        case_vmm_import(argv);
    else if (strcmp(c, "ctx_known") == 0)
        case_ctx_known();
    else if (strcmp(c, "ctx_seeded") == 0)
        case_ctx_seeded();
    else if (strcmp(c, "ctx_known_child") == 0)
        case_ctx_known_child();
    else if (strcmp(c, "tree") == 0)
        case_tree();
    else if (strcmp(c, "tree_root") == 0)
        case_tree_root();
    else if (strcmp(c, "tree_child") == 0 && argc > 2)
        exit(case_tree_child(argv));
    else
        return 0;
    return 1;
}
