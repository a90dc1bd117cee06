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
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>

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
    __atomic_store_n(&shim_state.real_dlsym,
                     p ? (void *(*)(void *, const char *))(uintptr_t)p
                       : no_dlsym,
                     __ATOMIC_RELEASE);
}

/*
 * Resolve real_dlsym. Not through pthread_once: a sanitizer's runtime
 * (TSan, loaded ahead of the shim) looks its own interceptors up with
 * dlsym while it starts, before its pthread_once may be called, and that
 * dlsym is ours. Nor a once of our own that others wait on: a fork while
 * one thread resolves would leave the child waiting for a thread it does
 * not have. The resolution is idempotent (the same lookups, the same
 * pointer stored atomically), so threads that come at once each do it.
 */
void procaddr_dl_init(void)
{
    if (atomic_load_explicit(&shim_state.dl_state, memory_order_acquire) ==
        2)
        return;
    dl_init_once();
    atomic_store_explicit(&shim_state.dl_state, 2, memory_order_release);
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
    if (atomic_load(&shim_state.cuda_ready)) /* a driver's address: all */
        shim_cuda_resolve_all();             /* its functions known */
    ACCEL_SHIM_SYMBOLS(HOOK_MATCH)
    return NULL;
}

#define IS_HOOK_1(name)                                                        \
    if (p == (void *)(uintptr_t)&name)                                         \
        return 1;
#define IS_HOOK_0(name)
#define IS_HOOK(lib, hooked, ret, name, params) IS_HOOK_##hooked(name)

/* Whether p is one of our own hooks (a driver that answers with the
 * exported name sees ours: nothing to say). */
static int procaddr_is_hook(void *p)
{
    ACCEL_SHIM_SYMBOLS(IS_HOOK)
    return 0;
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

/* Whether hooked name `full` is of the family `sym` asks for: its base
 * (without _ptsz/_ptds, then _vN) is sym; *suffixed says it had the
 * per-thread-stream suffix, *versioned the _vN one. */
static int family_of(const char *full, const char *sym, int *suffixed,
                     int *versioned)
{
    size_t n = strlen(full), m = strlen(sym);

    *suffixed = n > 5 && (strcmp(full + n - 5, "_ptsz") == 0 ||
                          strcmp(full + n - 5, "_ptds") == 0);
    if (*suffixed)
        n -= 5;
    *versioned = 0;
    if (n > 3 && full[n - 1] >= '0' && full[n - 1] <= '9' &&
        full[n - 2] == 'v' && full[n - 3] == '_') {
        *versioned = 1;
        n -= 3;
    }
    return n == m && strncmp(full, sym, m) == 0;
}

/* The hook of the one hooked variant of `sym` that version and flags can
 * mean, when the driver handed out an address that is none of the real
 * functions we know (an internal entry point). *family: how many hooked
 * variants sym has at all. NULL when it is not exactly one. */
static void *hook_by_name(const char *sym, int version, cuuint64_t flags,
                          int *family)
{
    int want_ptsz = (flags & 2) != 0; /* CU_GET_PROC_ADDRESS_PER_THREAD_.. */
    void *found[2][2] = { { NULL, NULL }, { NULL, NULL } };
    int n[2][2] = { { 0, 0 }, { 0, 0 } }, suffixed, versioned, s, v;

    *family = 0;
#define BY_NAME_CUDA1(name_)                                                   \
    if (family_of(#name_, sym, &suffixed, &versioned)) {                       \
        ++*family;                                                             \
        /* _vN variants are of CUDA 3.2 and later (3020) */                    \
        if (!(versioned && version < 3020) && (!suffixed || want_ptsz)) {      \
            found[suffixed][versioned] = (void *)(uintptr_t)&name_;            \
            n[suffixed][versioned]++;                                          \
        }                                                                      \
    }
#define BY_NAME_CUDA0(name_)
#define BY_NAME_NVML1(name_)
#define BY_NAME_NVML0(name_)
#define BY_NAME_HIP1(name_)
#define BY_NAME_HIP0(name_)
#define BY_NAME(lib, hooked, ret, name_, params) BY_NAME_##lib##hooked(name_)
    ACCEL_SHIM_SYMBOLS(BY_NAME)
    s = want_ptsz && n[1][0] + n[1][1] > 0;
    /* from 3020 on, a name with a _vN variant means it, not the pre-3.2
     * ABI of the bare name (cuMemAlloc at 12000 is cuMemAlloc_v2) */
    v = n[s][1] > 0; /* below 3020 no _vN was counted */
    return n[s][v] == 1 ? found[s][v] : NULL;
}

/* acceld's shim.events: in the ACCEL_CONFIG directory, or beside the
 * ACCEL_CONFIG file; 0, or -1 (standalone, too long). */
static int events_path(char *out, size_t cap)
{
    const char *cfg = shim_state.config;
    const char *slash = strrchr(cfg, '/');
    struct stat st;

    if (cfg[0] == '\0' || slash == NULL)
        return -1;
    if (stat(cfg, &st) == 0 && S_ISDIR(st.st_mode))
        return shim_concat(out, cap, cfg, "/shim.events", (char *)NULL);
    if ((size_t)(slash - cfg) + sizeof("/shim.events") > cap)
        return -1;
    memcpy(out, cfg, (size_t)(slash - cfg));
    memcpy(out + (slash - cfg), "/shim.events", sizeof("/shim.events"));
    return 0;
}

/* Tell acceld (the app's events): one line appended to the shim.events
 * file it made beside ACCEL_CONFIG, "unheld <name> <version> <flags>".
 * Only on a lookup, never on an allocation or a launch; an O_APPEND write
 * of one short line does not block and is not torn; no file (standalone,
 * an older acceld), nothing. */
static void report_unheld(const char *sym, int version, cuuint64_t flags)
{
    char line[256], path[352], v[24], f[24];
    int fd;

    if (version < 0 || events_path(path, sizeof(path)) != 0 ||
        shim_concat(line, sizeof(line), "unheld ", sym, " ",
                    shim_utoa((unsigned long)version, v), " ",
                    shim_utoa((unsigned long)flags, f), "\n",
                    (char *)NULL) != 0)
        return;
    fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return;
    if (write(fd, line, strlen(line)) < 0)
        shim_log("cannot report to acceld through %s", path);
    close(fd);
}

/* Names (a hash each) already said to go by unheld: said once each. */
static _Atomic uint64_t unheld_said[64];

static void say_unheld(const char *sym, int version, cuuint64_t flags)
{
    uint64_t h = 1469598103934665603ULL;

    for (const char *p = sym; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h = (h ^ (uint64_t)version) * 1099511628211ULL;
    h = (h ^ flags) * 1099511628211ULL;
    h |= 1;
    for (int i = 0; i < 64; i++) {
        uint64_t z = 0;
        uint64_t cur = atomic_load(&unheld_said[i]);
        if (cur == h)
            return;
        if (cur == 0 && atomic_compare_exchange_strong(&unheld_said[i], &z, h))
            break;
    }
    shim_log("cuGetProcAddress(%s, version %d, flags %llu): the driver "
             "handed out an address the shim cannot tell apart; calls "
             "through it are NOT held to the quota", sym, version,
             (unsigned long long)flags);
    report_unheld(sym, version, flags);
}

/* Swap the address the driver handed out for our hook: by address when it
 * is one of the real functions we interpose; else (an internal entry
 * point) by name, when exactly one hooked variant fits the version and
 * flags; else, for a name we hook, say once that it goes by unheld. */
static void swap_for_hook(CUresult rc, void **pfn, const char *sym,
                          int version, cuuint64_t flags)
{
    void *h;
    int family;

    if (rc != CUDA_SUCCESS || pfn == NULL || *pfn == NULL)
        return;
    h = procaddr_hook_for(*pfn);
    if (h == NULL && sym != NULL && sym[0] == 'c' && sym[1] == 'u') {
        h = hook_by_name(sym, version, flags, &family);
        if (h == NULL && family > 0 && procaddr_is_hook(*pfn) == 0)
            say_unheld(sym, version, flags);
    }
    if (h != NULL)
        *pfn = h;
}

/* hipGetProcAddress hands out the runtime's exported functions. */
static void swap_hip(hipError_t rc, void **pfn)
{
    void *h;

    if (rc != hipSuccess || pfn == NULL)
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
    swap_for_hook(rc, pfn, symbol, cudaVersion, flags);
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
    swap_for_hook(rc, pfn, symbol, cudaVersion, flags);
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
    swap_hip(rc, pfn);
    return rc;
}
