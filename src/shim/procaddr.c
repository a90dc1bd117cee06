/* SPDX-License-Identifier: MIT */
/*
 * procaddr.c: the two ways a program finds driver functions without linking
 * them, both turned back to our hooks.
 *
 * cuGetProcAddress(_v2): the CUDA runtime (and so PyTorch) gets every driver
 * entry point this way. We ask the real driver first, with the caller's
 * version and flags untouched, then swap the answer for our hook when the
 * pointer it returned is one of the real functions we interpose (compared by
 * address against the table resolved from symbols.h). So the driver's own
 * version logic decides which ABI variant is meant (cuMemAlloc -> _v2,
 * per-thread-stream -> _ptsz), and we never guess from names or versions.
 *
 * dlsym: a program that dlopens libcuda.so.1 or libnvidia-ml.so.1 and looks
 * symbols up in that handle would get the real functions. We interpose
 * dlsym itself with a small assembly trampoline: it asks
 * procaddr_dlsym_lookup() for a replacement and, when there is none, JUMPS
 * (not calls) into the real dlsym with the original arguments and return
 * address. glibc's dlsym uses its caller's address for RTLD_NEXT and for the
 * namespace, so the real one still sees the program as its caller and every
 * lookup we do not change behaves exactly as without the shim. Only the
 * names we export are looked at (a few strcmp, for cu/nvml prefixes only). The real dlsym comes from
 * dlvsym (not interposed). Architectures: x86-64 and AArch64; elsewhere dlsym
 * is not interposed (documented in docs/internals/shim.md).
 */
#include "shim/shim.h"

#include <dlfcn.h>
#include <string.h>

#define HOOK_PROTO_1(ret, name, params) ACCEL_EXPORT ret name params;
#define HOOK_PROTO_0(ret, name, params)
#define HOOK_PROTO(lib, hooked, ret, name, params)                             \
    HOOK_PROTO_##hooked(ret, name, params)
ACCEL_SHIM_SYMBOLS(HOOK_PROTO)

/* Used when no real dlsym could be found at all: lookups fail cleanly. */
static void *no_dlsym(void *handle, const char *name)
{
    (void)handle;
    (void)name;
    return NULL;
}

static void dl_init_once(void)
{
    static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5",
                                            "GLIBC_2.17", "GLIBC_2.0" };
    void *p = NULL;

    for (size_t i = 0; p == NULL && i < sizeof(versions) / sizeof(*versions);
         i++)
        p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    shim_state.real_dlsym =
        p ? (void *(*)(void *, const char *))(uintptr_t)p : no_dlsym;
}

void procaddr_dl_init(void)
{
    pthread_once(&shim_state.dl_once, dl_init_once);
}

#define HOOK_MATCH_1(name)                                                     \
    if (shim_state.real.name != NULL &&                                        \
        real == (void *)(uintptr_t)shim_state.real.name)                       \
        return (void *)(uintptr_t)&name;
#define HOOK_MATCH_0(name)
#define HOOK_MATCH(lib, hooked, ret, name, params) HOOK_MATCH_##hooked(name)

void *procaddr_hook_for(void *real)
{
    if (real == NULL)
        return NULL;
    ACCEL_SHIM_SYMBOLS(HOOK_MATCH)
    return NULL;
}

#define NAME_MATCH_1(name_)                                                    \
    if (strcmp(name, #name_) == 0)                                             \
        return 1;
#define NAME_MATCH_0(name_)
#define NAME_MATCH(lib, hooked, ret, name_, params) NAME_MATCH_##hooked(name_)

/* Whether `name` is one we export (so unrelated lookups such as "curl_*"
 * never make us load the driver). Only called for cu/nvml prefixes. */
static int hooked_name(const char *name)
{
    ACCEL_SHIM_SYMBOLS(NAME_MATCH)
    return 0;
}

/* Called by the trampoline: a replacement for dlsym(handle, name), or NULL
 * to let the real dlsym answer with the caller's own context. */
SHIM_HIDDEN __attribute__((used)) void *
procaddr_dlsym_lookup(void *handle, const char *name)
{
    void *p;
    int cu, nvml, hip;

    procaddr_dl_init(); /* the trampoline jumps through real_dlsym */
    if (name == NULL || handle == RTLD_NEXT)
        return NULL;
    cu = name[0] == 'c' && name[1] == 'u';
    nvml = name[0] == 'n' && strncmp(name, "nvml", 4) == 0;
    hip = name[0] == 'h' && strncmp(name, "hip", 3) == 0;
    if ((!cu && !nvml && !hip) || !hooked_name(name) || shim_in_init)
        return NULL;
    if (cu)
        shim_cuda_init();
    else if (hip)
        shim_hip_init();
    else
        shim_nvml_init();
    p = shim_state.real_dlsym(handle, name);
    return procaddr_hook_for(p);
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    push %rdi\n"
        "    push %rsi\n"
        "    sub $8, %rsp\n"
        "    call procaddr_dlsym_lookup@PLT\n"
        "    add $8, %rsp\n"
        "    pop %rsi\n"
        "    pop %rdi\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        "1:  jmp *shim_state(%rip)\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        "dlsym:\n"
        "    stp x29, x30, [sp, #-32]!\n"
        "    mov x29, sp\n"
        "    stp x0, x1, [sp, #16]\n"
        "    bl procaddr_dlsym_lookup\n"
        "    mov x2, x0\n"
        "    ldp x0, x1, [sp, #16]\n"
        "    ldp x29, x30, [sp], #32\n"
        "    cbz x2, 1f\n"
        "    mov x0, x2\n"
        "    ret\n"
        "1:  adrp x16, shim_state\n"
        "    ldr x16, [x16, #:lo12:shim_state]\n"
        "    br x16\n"
        ".size dlsym, .-dlsym\n");
#endif

/* Swap a real pointer the driver handed out for our hook, if we have one. */
static void swap_for_hook(CUresult rc, void **pfn)
{
    void *h;

    if (rc != CUDA_SUCCESS || pfn == NULL)
        return;
    h = procaddr_hook_for(*pfn);
    if (h != NULL)
        *pfn = h;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                          cuuint64_t flags)
{
    CUresult (*fn)(const char *, void **, int, cuuint64_t) =
        SHIM_CUDA_REAL(cuGetProcAddress);
    if (fn == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult rc = fn(symbol, pfn, cudaVersion, flags);
    swap_for_hook(rc, pfn);
    return rc;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                             cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult (*fn)(const char *, void **, int, cuuint64_t,
                   CUdriverProcAddressQueryResult *) =
        SHIM_CUDA_REAL(cuGetProcAddress_v2);
    if (fn == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult rc = fn(symbol, pfn, cudaVersion, flags, symbolStatus);
    swap_for_hook(rc, pfn);
    return rc;
}

/* hipGetProcAddress (ROCm 6.2+): as cuGetProcAddress, the pointer the
 * runtime hands out is swapped for our hook of the same function. */
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion,
                             uint64_t flags, int *symbolStatus)
{
    hipError_t (*fn)(const char *, void **, int, uint64_t, int *) =
        SHIM_HIP_REAL(hipGetProcAddress);
    if (fn == NULL)
        return hipErrorNotFound;
    hipError_t rc = fn(symbol, pfn, hipVersion, flags, symbolStatus);
    swap_for_hook(rc, pfn);
    return rc;
}
