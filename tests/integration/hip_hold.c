/* SPDX-License-Identifier: MIT */
/*
 * hip_hold.c: cuda_hold's HIP twin for the integration tests. It allocates
 * the sizes given on the command line (MiB) with hipMalloc, prints one line
 * per allocation ("alloc 512 MiB: 0"; 2 = hipErrorOutOfMemory), the total
 * hipMemGetInfo reports and HIP_VISIBLE_DEVICES, then holds the memory
 * until it is stopped (SIGTERM: it exits, as a program does, and the
 * stand-in's DRM client goes). An argument "@PATH" waits until PATH exists
 * (a test changes something meanwhile), printing "waiting" and then the
 * hipMemGetInfo figures ("info total 1024 MiB free 202 MiB"). An argument
 * "!NAME" calls one of the entry points whose memory the HIP runtime takes
 * inside itself (a context, a module, an executable graph, an external
 * memory import: the inventory's HIP "meter" rows, docs/shim-inventory.md)
 * as a program would, found by dlsym, and prints "call NAME: 0"; "!free"
 * ends the last thing made so (hipModuleUnload, hipGraphExecDestroy, ...)
 * and prints "free NAME: 0". Linked against the tests' stand-in
 * libamdhip64.so.6; acceld preloads libaccelshim.so into it.
 */
#include "common/accel_setup.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim/hip_types.h"

hipError_t hipMalloc(void **p, size_t bytes);
hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total_bytes);

/* The meter's entry points: how each is called, and what ends it. */
enum call_shape {
    OUT_PTR,      /* fn(&h, ptr) */
    OUT_PTR_JIT,  /* fn(&h, image, 0, NULL, NULL) */
    CTX_CREATE,   /* fn(&h, 0, device) */
    PRIMARY,      /* fn(&h, device); ended by fn(device) */
    GRAPH_FLAGS,  /* fn(&h, graph, 0) */
    GRAPH_LEGACY, /* fn(&h, graph, NULL, NULL, 0) */
};
static const struct {
    const char *name, *end;
    enum call_shape shape;
} calls[] = {
    { "hipModuleLoad", "hipModuleUnload", OUT_PTR },
    { "hipModuleLoadData", "hipModuleUnload", OUT_PTR },
    { "hipModuleLoadDataEx", "hipModuleUnload", OUT_PTR_JIT },
    { "hipCtxCreate", "hipCtxDestroy", CTX_CREATE },
    { "hipDevicePrimaryCtxRetain", "hipDevicePrimaryCtxRelease", PRIMARY },
    { "hipGraphInstantiate", "hipGraphExecDestroy", GRAPH_LEGACY },
    { "hipGraphInstantiateWithFlags", "hipGraphExecDestroy", GRAPH_FLAGS },
    { "hipImportExternalMemory", "hipDestroyExternalMemory", OUT_PTR },
};

static void *made;                 /* what the last "!NAME" made */
static const char *made_end;       /* and what ends it */
static enum call_shape made_shape; /* and how it is called */

static int call_outside(const char *name)
{
    static char image[64];
    void *fn = dlsym(RTLD_DEFAULT, name), *g = (void *)(uintptr_t)0x4000;
    int i = 0, rc;

    while (i < (int)(sizeof(calls) / sizeof(*calls)) &&
           strcmp(calls[i].name, name) != 0)
        i++;
    if (fn == NULL || i == (int)(sizeof(calls) / sizeof(*calls)))
        return -1;
    switch (calls[i].shape) {
    case OUT_PTR:
        rc = ((int (*)(void **, const void *))fn)(&made, image);
        break;
    case OUT_PTR_JIT:
        rc = ((int (*)(void **, const void *, unsigned, void *, void **))fn)(
            &made, image, 0, NULL, NULL);
        break;
    case CTX_CREATE:
        rc = ((int (*)(void **, unsigned, int))fn)(&made, 0, 0);
        break;
    case PRIMARY:
        rc = ((int (*)(void **, int))fn)(&made, 0);
        break;
    case GRAPH_FLAGS:
        rc = ((int (*)(void **, void *, unsigned long long))fn)(&made, g, 0);
        break;
    default: /* GRAPH_LEGACY */
        rc = ((int (*)(void **, void *, void *, char *, size_t))fn)(
            &made, g, NULL, NULL, 0);
        break;
    }
    made_end = calls[i].end;
    made_shape = calls[i].shape;
    return rc;
}

static int end_outside(void)
{
    void *fn = made_end ? dlsym(RTLD_DEFAULT, made_end) : NULL;

    if (fn == NULL)
        return -1;
    if (made_shape == PRIMARY)
        return ((int (*)(int))fn)(0);
    return ((int (*)(void *))fn)(made);
}

static sigset_t stop; /* SIGTERM, SIGINT: blocked, waited for */

/* "@PATH": wait for PATH (or a stop: exit), then say what hipMemGetInfo
 * says. */
static void wait_for_file(const char *path)
{
    size_t fr = 0, total = 0;
    printf("waiting\n");
    fflush(stdout);
    while (access(path, F_OK) != 0)
        if (sigtimedwait(&stop, NULL, &(struct timespec){0, 20000000}) > 0)
            exit(0);
    hipMemGetInfo(&fr, &total);
    printf("info total %zu MiB free %zu MiB\n", total >> 20, fr >> 20);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *vis = getenv("HIP_VISIBLE_DEVICES");
    size_t fr = 0, total = 0;
    int sig;

    /* SIGTERM ends it through exit(), as a program's end would: the
     * stand-in's DRM client closes (its fdinfo goes) */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    for (int i = 1; i < argc; i++) {
        void *p = NULL;
        unsigned long long mib;
        hipError_t rc;
        if (argv[i][0] == '@') {
            wait_for_file(argv[i] + 1);
            continue;
        }
        if (strcmp(argv[i], "!free") == 0) {
            printf("free %s: %d\n", made_end ? made_end : "-", end_outside());
            fflush(stdout);
            continue;
        }
        if (argv[i][0] == '!') {
            printf("call %s: %d\n", argv[i] + 1, call_outside(argv[i] + 1));
            fflush(stdout);
            continue;
        }
        mib = strtoull(argv[i], NULL, 10);
        rc = hipMalloc(&p, (size_t)mib << 20);
        printf("alloc %llu MiB: %d\n", mib, (int)rc);
        fflush(stdout);
    }
    hipMemGetInfo(&fr, &total);
    printf("total %zu MiB free %zu MiB\n", total >> 20, fr >> 20);
    printf("HIP_VISIBLE_DEVICES=%s\n", vis ? vis : "(unset)");
    printf("ready\n");
    fflush(stdout);
    while (sigwait(&stop, &sig) != 0)
        ;
    return 0;
}
