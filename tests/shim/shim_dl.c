/* SPDX-License-Identifier: MIT */
/*
 * shim_dl.c: a program that does not link the driver: it dlopens
 * libcuda.so.1 and looks functions up with dlsym, as the CUDA runtime and
 * ctypes-based tools do. Run under the shim with a 1 GiB limit:
 *   dlsym  - dlsym(h, "cuMemAlloc_v2") and dlsym(h, "cuGetProcAddress_v2")
 *            are held to the quota; other lookups behave as without the shim
 *   nolib  - no libcuda.so.1 at all: the shim's exported entry point gives
 *            an error code, no crash
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/cuda_types.h"

#define MiB (1ULL << 20)
static int failures;
#define CHECK(c, msg)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            failures++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s (%s)\n", __FILE__, __LINE__, #c,   \
                    msg);                                                      \
        }                                                                      \
    } while (0)

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*create_fn)(CUcontext *, unsigned, CUdevice);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, int *);

static void *sym(void *h, const char *name)
{
    return (void *)(uintptr_t)dlsym(h, name);
}

static void case_dlsym(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUdeviceptr a, b;
    CUcontext ctx = NULL;
    init_fn init;
    create_fn create;
    alloc_fn al;
    free_fn fr;
    gpa_fn gpa;

    CHECK(h != NULL, "dlopen");
    if (h == NULL)
        return;
    init = (init_fn)(uintptr_t)sym(h, "cuInit");
    create = (create_fn)(uintptr_t)sym(h, "cuCtxCreate_v2");
    /* what a program does first: the driver refuses an allocation before
     * cuInit and without a current context */
    CHECK(init != NULL && init(0) == 0, "cuInit");
    CHECK(create != NULL && create(&ctx, 0, 0) == 0, "a context");
    al = (alloc_fn)(uintptr_t)sym(h, "cuMemAlloc_v2");
    fr = (free_fn)(uintptr_t)sym(h, "cuMemFree_v2");
    CHECK(al != NULL && fr != NULL, "dlsym");
    CHECK(al(&a, 768 * MiB) == 0, "within");
    CHECK(al(&b, 512 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "beyond via dlsym");
    gpa = (gpa_fn)(uintptr_t)sym(h, "cuGetProcAddress_v2");
    CHECK(gpa != NULL, "gpa");
    al = NULL;
    CHECK(gpa && gpa("cuMemAlloc", (void **)&al, 12000, 0, NULL) == 0, "gpa");
    CHECK(al && al(&b, 512 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
          "beyond via dlsym+cuGetProcAddress");
    CHECK(fr(a) == 0, "free");
    /* everything else is untouched */
    CHECK(sym(h, "cuInit") != NULL, "cuInit");
    CHECK(sym(h, "cuNoSuchThing") == NULL && dlerror() != NULL, "missing");
    CHECK(sym(RTLD_NEXT, "malloc") != NULL, "RTLD_NEXT");
    CHECK(sym(RTLD_DEFAULT, "printf") != NULL, "RTLD_DEFAULT");
    CHECK(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34") != NULL ||
              dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5") != NULL, "dlvsym");
}

static void case_nolib(void)
{
    alloc_fn al = (alloc_fn)(uintptr_t)sym(RTLD_DEFAULT, "cuMemAlloc_v2");
    CUdeviceptr a;
    CHECK(al != NULL, "shim export");
    CHECK(al && al(&a, MiB) == CUDA_ERROR_NOT_FOUND, "error code, no crash");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "dlsym") == 0)
        case_dlsym();
    else if (argc > 1 && strcmp(argv[1], "nolib") == 0)
        case_nolib();
    else
        return 2;
    printf("%s: %d failed\n", argv[1], failures);
    return failures ? 1 : 0;
}
