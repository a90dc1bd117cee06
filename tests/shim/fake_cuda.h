/* SPDX-License-Identifier: MIT */
/*
 * fake_cuda.h: the simulated card the stand-in libcuda.so.1,
 * libamdhip64.so.6 and libnvidia-ml.so.1 share, one for every process of a
 * test through the file named by FAKE_CUDA_SHM (process-local when unset).
 * It counts what the device holds, as a real driver does: allocations,
 * stream-ordered pools' reserved memory (not only what is live in them),
 * VMM handles until released and unmapped, and each context's own cost.
 * Tests read it to see what reached the driver and the most device memory
 * ever held at once: the physical peak, whatever the shim believed.
 */
#ifndef ACCEL_TESTS_SHIM_FAKE_CUDA_H
#define ACCEL_TESTS_SHIM_FAKE_CUDA_H

#include <stdatomic.h>
#include <stdint.h>

#define FAKE_PROCS 64              /* processes the card tells apart */
#define FAKE_APPS 8                /* apps (ACCEL_APP) it tells apart */

/* One process's figure, as NVML's per-process list gives it. */
struct fake_proc {
    _Atomic int64_t pid;           /* 0 = free entry */
    _Atomic int64_t used;          /* device bytes this process holds */
    _Atomic int64_t app;           /* its apps[] index + 1, 0 none */
};

/* What the processes of one app (same ACCEL_APP) hold together: the
 * physical side of the app's quota. A dead process's share leaves with it
 * (looked for whenever a new peak would be set). */
struct fake_app {
    _Atomic uint64_t key;          /* fake_app_key(ACCEL_APP), 0 free */
    _Atomic int64_t used;
    _Atomic int64_t peak;          /* the most it ever held at once */
};

/* A VMM allocation shared between processes (export / import): its
 * memory lives until every process holding it lets it go. */
#define FAKE_SHARES 16
struct fake_share {
    _Atomic int64_t refs;          /* processes' handles on it, 0 free */
    _Atomic int64_t bytes;
};

/* The device's timeline, ONE for every process of the card (issue 49): a
 * submission runs after whatever any process queued before it (start =
 * max(now, busy_until)), as kernels of different processes queue on a real
 * card. When the apps' memory together passes the card (FAKE_CUDA_TOTAL),
 * the first submission of an app after another app's ran first moves its
 * memory back (min(its bytes, what passes the card) over the link,
 * FAKE_CUDA_LINK_GBPS, default 12 GB/s), which the device spends before
 * that submission starts: a switch's paging time. Guarded by `lock` (the
 * holder's pid; a dead holder's lock is taken over). */
struct fake_timeline {
    _Atomic int64_t lock;          /* pid holding it, 0 = free */
    int64_t busy_until;            /* ns (CLOCK_MONOTONIC): queued work ends */
    uint64_t resident;             /* app key whose memory is on the card */
    int64_t busy_ns;               /* device time spent running work */
    int64_t paged_ns;              /* device time spent moving memory */
    uint64_t switches;             /* submissions of another app than the
                                    * last one's */
    uint64_t moves;                /* of them, switches that moved memory */
    int64_t moved_bytes;           /* bytes moved, all switches */
};

struct fake_cuda_stats {
    _Atomic int64_t used;          /* device bytes held now, all processes */
    _Atomic int64_t max_used;      /* highest `used` ever: the physical peak */
    _Atomic uint64_t allocs;       /* successful allocations */
    _Atomic uint64_t frees;        /* successful frees */
    _Atomic uint64_t unknown_frees; /* frees of pointers the fake never made */
    _Atomic uint64_t last_free;    /* last pointer/handle passed to a free */
    _Atomic uint64_t launches;     /* cuLaunchKernel calls */
    _Atomic uint64_t refused;      /* allocations the card refused (full):
                                    * what the shim let reach the driver */
    struct fake_proc procs[FAKE_PROCS];
    struct fake_app apps[FAKE_APPS];
    struct fake_share shares[FAKE_SHARES];
    struct fake_timeline tl;       /* the device's one timeline */
};

/* The key of an app's name (FNV-1a, never 0). */
static inline uint64_t fake_app_key(const char *name)
{
    uint64_t h = 1469598103934665603ULL;
    for (; name != NULL && *name; name++)
        h = (h ^ (unsigned char)*name) * 1099511628211ULL;
    return h | 1;
}

/* One simulated submission in FAKE_CUDA_LOG (time-slicing tests). On the
 * shared timeline submissions never overlap on the device; two apps ran
 * "at once" (what time slicing must prevent) when one submitted while
 * the other's work was still queued: [submit, end] intervals overlap. */
struct fake_interval {
    int64_t pid;                   /* submitting process */
    int64_t start, end;            /* ns, CLOCK_MONOTONIC: on the device */
    int64_t submit;                /* ns: when the process submitted it */
};

_Static_assert(sizeof(struct fake_cuda_stats) <= 4096,
               "the shared record is one page");

#endif /* ACCEL_TESTS_SHIM_FAKE_CUDA_H */
