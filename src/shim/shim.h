/* SPDX-License-Identifier: MIT */
/*
 * shim.h: internals shared by the files of libaccelshim.so (and nobody else).
 *
 * All process-global state lives in ONE struct, `shim_state`, initialised in
 * stages through pthread_once: core (config, limits, fork handler), then the
 * CUDA symbols and the NVML symbols, each on first use. It is a hidden global
 * rather than a file-static because the hooks, the quota code and the dlsym
 * trampoline (assembly, which needs a symbol name) live in separate files; it
 * is never visible outside the library.
 *
 * Files: shim.c (state, init, resolution), base.c (the log line and the
 * formatting helpers without stdio), config.c (ACCEL_CONFIG and
 * the environment), quota.c (ledger attach, reserve/release, virtual view),
 * track.c (pointer/handle table), hooks.c (the interposed functions),
 * procaddr.c (dlsym and cuGetProcAddress), hooks_hip.c (the HIP runtime's
 * allocation entry points, on the same ledger and quota rules), vmm.c (VMM
 * handles charged until released and unmapped), pool.c (stream-ordered
 * pools charged by what they reserve), ctx.c (contexts at their measured
 * size), devmap.c (NVML devices and CUDA ordinals, by UUID), timeslice.c
 * (the time-slice broker's client: a device's turns).
 */
#ifndef ACCEL_SHIM_SHIM_H
#define ACCEL_SHIM_SHIM_H

#include "common/accel_setup.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/ledger.h"
#include "shim/cuda_types.h"
#include "shim/symbols.h"
#include "shim/timeslice.h"

#define ACCEL_EXPORT __attribute__((visibility("default")))
#define SHIM_HIDDEN __attribute__((visibility("hidden")))

#define SHIM_MAX_DEV 16         /* CUDA ordinals the quota knows about */
/* A card ledger "path" (config's timeslice line, ACCEL_TS_LEDGER_<i>):
 * no file; the broker hands the sealed memfd over its socket. */
#define SHIM_CARD_BROKER "@broker"
#define SHIM_TRACK_STRIPES 64   /* locks of the allocation table */

enum shim_kind {                /* what a tracked key is (3 bits) */
    SHIM_KIND_PTR = 1,          /* CUdeviceptr from cuMemAlloc* */
    SHIM_KIND_HANDLE = 2,       /* CUmemGenericAllocationHandle */
    SHIM_KIND_ARRAY = 3,        /* CUarray */
    SHIM_KIND_MIPMAP = 4,       /* CUmipmappedArray */
    SHIM_KIND_CTX = 5,          /* CUcontext from cuCtxCreate*, CUgreenCtx */
    SHIM_KIND_LIMIT = 6,        /* a context's limit (cuCtxSetLimit): key
                                 * = the context + the CUlimit */
};

enum shim_dev_state {           /* shim_dev.state */
    SHIM_DEV_UNSET = 0,         /* not attached yet */
    SHIM_DEV_BUSY = 1,          /* one thread is attaching */
    SHIM_DEV_READY = 2,         /* ledger mapped, quota enforced */
    SHIM_DEV_NOLIMIT = 3,       /* no limit for this device: pass through */
};

struct shim_dev {
    _Atomic int state;              /* enum shim_dev_state */
    _Atomic uint64_t limit;         /* bytes this process enforces, 0 none;
                                     * a live quota (SPEC 4.4) rewrites it
                                     * from ACCEL_CONFIG when the ledger's
                                     * epoch moves (quota.c) */
    _Atomic uint64_t epoch_seen;    /* the ledger epoch that limit is of */
    char path[320];                 /* ledger file, "" = process-local */
    char uuid[64];                  /* device UUID from ACCEL_CONFIG or "" */
    struct accel_ledger *ledger;    /* mapped ledger (READY) */
    struct accel_ledger_slot *slot; /* our slot, NULL if the ledger is full */
    _Atomic int attach_fd;          /* fd + 1 of the ledger file attach has
                                     * open for its flock, 0 none: a fork
                                     * child closes its copy (quota.c) */
    char card_path[256];            /* time-sliced: the card's ledger, ""
                                     * none, SHIM_CARD_BROKER: the memfd
                                     * acceld's broker hands over
                                     * (docs/internals/timeslice.md) */
    struct accel_ledger *card;      /* mapped card ledger (READY) or NULL:
                                     * non-evictable bytes of every
                                     * time-sliced app of the device */
    struct accel_ledger_slot *card_slot; /* our slot in it, or NULL */
};

/* A tracked record's ordinal with this bit was also charged on the card's
 * ledger (track.c keeps 5 bits of device; SHIM_MAX_DEV needs 4). */
#define SHIM_ORD_CARD 16
#define SHIM_ORD_MASK 15

struct shim_track_entry {
    uint64_t key;                   /* pointer or handle value */
    uint64_t meta;                  /* bytes << 8 | dev << 3 | kind; 0 empty */
    uint64_t ctx;                   /* the context it was made in, 0 none:
                                     * the driver frees it with that context
                                     * (cuDevicePrimaryCtxReset, destroy) */
};

struct shim_track_stripe {
    pthread_mutex_t mu;             /* guards the fields below */
    uint32_t cap;                   /* power of two, 0 before first insert */
    uint32_t count;                 /* live entries */
    struct shim_track_entry *e;     /* open addressing, linear probing */
};

/* An allocation in flight: reserved by quota_begin, settled by quota_end. */
struct shim_charge {
    struct shim_dev *dev;           /* NULL when the device has no limit */
    int ordinal;                    /* CUDA ordinal charged */
    uint64_t bytes;                 /* reserved */
    int card;                       /* also reserved on dev->card */
    uint64_t ctx;                   /* the context it is made in, 0 none */
};

struct shim_real {
#define SHIM_REAL_FIELD(lib, hooked, ret, name, params) ret(*name) params;
    ACCEL_SHIM_SYMBOLS(SHIM_REAL_FIELD)
#undef SHIM_REAL_FIELD
};

/* Every symbol's index (shim_cuda_resolve keeps one bit per symbol). */
enum shim_sym {
#define SHIM_SYM_INDEX(lib, hooked, ret, name, params) SHIM_SYM_##name,
    ACCEL_SHIM_SYMBOLS(SHIM_SYM_INDEX)
#undef SHIM_SYM_INDEX
    SHIM_SYM_COUNT
};

struct accel_shim_state {
    /* First member: the dlsym trampoline (procaddr.c) jumps through it. */
    void *(*real_dlsym)(void *, const char *);
    _Atomic int dl_state;           /* real_dlsym: 0 not yet, 2 set
                                     * (procaddr.c) */
    pthread_once_t core_once;       /* config, limits, fork handler */
    pthread_once_t cuda_once;       /* libcuda.so.1 loaded */
    pthread_once_t cuda_all_once;   /* every CUDA symbol resolved */
    _Atomic uint64_t cuda_tried[(SHIM_SYM_COUNT + 63) / 64]; /* looked up */
    pthread_once_t nvml_once;       /* libnvidia-ml.so.1 symbols */
    pthread_once_t hip_once;        /* libamdhip64.so symbols */
    _Atomic int core_ready;         /* 1 after core_once ran */
    _Atomic int cuda_ready;         /* 1 after cuda_once ran */
    _Atomic int nvml_ready;         /* 1 after nvml_once ran */
    _Atomic int hip_ready;          /* 1 after hip_once ran */
    int any_limit;                  /* some device has a limit */
    int standalone;                 /* limits from env: shim creates ledgers */
    uint64_t env_limit;             /* standalone: ACCEL_MEMORY_LIMIT (or
                                     * CUDA_DEVICE_MEMORY_LIMIT) for every
                                     * device not named; applied when the
                                     * device is first used (config_dev) */
    char env_ledger[288];           /* standalone: "<dir>/shim-<key>-dev",
                                     * "" = process-local ledgers */
    char config[320];               /* ACCEL_CONFIG when it was read, ""
                                     * none: acceld's shim.events is beside
                                     * it (procaddr.c) */
    int log_fd;                     /* ACCEL_LOG fd + 1; 0 = off (keeps the
                                     * state all-zero, in .bss) */
    pid_t pid;                      /* cached; refreshed in the fork child */
    _Atomic uint64_t reclaim_next;  /* ns (CLOCK_MONOTONIC): earliest next
                                     * reclaim on a refusal (quota.c) */
    _Atomic uint64_t card_reclaim_next; /* the same for the cards' ledgers */
    void *libcuda;                  /* dlopen handle or NULL */
    void *libnvml;                  /* dlopen handle or NULL */
    void *libhip;                   /* dlopen handle or NULL */
    struct shim_real real;          /* typed real entry points, NULL missing */
    struct shim_dev dev[SHIM_MAX_DEV];
    struct shim_track_stripe track[SHIM_TRACK_STRIPES];
    struct shim_ts ts;              /* time slicing (timeslice.c) */
};

extern SHIM_HIDDEN struct accel_shim_state shim_state;
/* Re-entry guard. initial-exec: no __tls_get_addr call (which sanitizers
 * intercept and which must not run inside our dlsym before they are ready);
 * fine for a library loaded at start-up by LD_PRELOAD. */
extern SHIM_HIDDEN _Thread_local int shim_in_init
    __attribute__((tls_model("initial-exec")));

/* shim.c */
SHIM_HIDDEN void shim_core_init(void);
SHIM_HIDDEN void shim_cuda_init(void);
SHIM_HIDDEN void shim_nvml_init(void);
SHIM_HIDDEN void shim_hip_init(void);
/* base.c */
/* dst = the NULL-terminated list of strings, concatenated and cut to
 * cap - 1 bytes; 0, or -1 if it was cut. No stdio: a process's first
 * snprintf faults in several pages of libc (~100 us on our VM), which the
 * start-up path avoids (docs/benchmarks.md, Shim). */
SHIM_HIDDEN int shim_concat(char *dst, size_t cap, ...);
/* v in decimal, in buf; returns buf. */
SHIM_HIDDEN char *shim_utoa(unsigned long v, char buf[24]);
SHIM_HIDDEN void shim_log(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* Resolve one CUDA symbol into *slot the first time it is asked for
 * (libcuda.so.1 loaded first): a process's start-up pays for what it
 * uses, not for the whole list (docs/benchmarks.md, Shim). A symbol the
 * driver lacks is looked up once and stays NULL. */
SHIM_HIDDEN void shim_cuda_resolve(int idx, const char *name, void **slot);
/* Every CUDA symbol at once (before comparing an address with them all). */
SHIM_HIDDEN void shim_cuda_resolve_all(void);

/* The typed real pointer of a CUDA symbol, resolving once; NULL if missing. */
#define SHIM_CUDA_REAL(fn)                                                     \
    (__builtin_expect(__atomic_load_n(&shim_state.real.fn, __ATOMIC_ACQUIRE) != \
                          NULL, 1)                                             \
         ? shim_state.real.fn                                                  \
         : (shim_cuda_resolve(SHIM_SYM_##fn, #fn,                              \
                              (void **)(uintptr_t)&shim_state.real.fn),        \
            __atomic_load_n(&shim_state.real.fn, __ATOMIC_ACQUIRE)))
#define SHIM_HIP_REAL(fn)                                                      \
    (atomic_load_explicit(&shim_state.hip_ready, memory_order_acquire)         \
         ? shim_state.real.fn                                                  \
         : (shim_hip_init(), shim_state.real.fn))
#define SHIM_NVML_REAL(fn)                                                     \
    (atomic_load_explicit(&shim_state.nvml_ready, memory_order_acquire)        \
         ? shim_state.real.fn                                                  \
         : (shim_nvml_init(), shim_state.real.fn))

/* config.c: fill shim_state.dev[] from ACCEL_CONFIG or the environment. */
SHIM_HIDDEN void config_load(void);
/* The standalone default limit of device d (ordinal), at its first use. */
SHIM_HIDDEN void config_dev(struct shim_dev *d, int ordinal);
SHIM_HIDDEN int config_parse_bytes(const char *s, uint64_t *out_bytes);
/* The limit ACCEL_CONFIG gives device `ordinal` now (acceld rewrites the
 * file with a live quota, then bumps the ledger's epoch): 0 when there is
 * no config file, it cannot be read or names no limit for it. One open
 * and read; callers serialize (quota.c). */
SHIM_HIDDEN uint64_t config_reread_limit(int ordinal);

/* quota.c */
SHIM_HIDDEN struct shim_dev *quota_dev(int ordinal);
SHIM_HIDDEN int quota_begin(struct shim_charge *c, int ordinal,
                            uint64_t bytes);
/* quota_begin for memory the driver can evict at a turn switch (managed):
 * not charged on a time-sliced card's ledger. */
SHIM_HIDDEN int quota_begin_evictable(struct shim_charge *c, int ordinal,
                                      uint64_t bytes);
SHIM_HIDDEN int quota_adjust(struct shim_charge *c, uint64_t bytes);
SHIM_HIDDEN CUresult quota_end(struct shim_charge *c, CUresult rc,
                               enum shim_kind kind, uint64_t key);
/* ordinal as track_take gave it (SHIM_ORD_CARD included). */
SHIM_HIDDEN void quota_release(int ordinal, uint64_t bytes);
/* Give back bytes charged without a record (a pool's, a context's; on a
 * time-sliced card, from its ledger too). */
SHIM_HIDDEN void quota_give(int ordinal, uint64_t bytes);
/* A charge that leaves this process's slot but stays in the ledger's
 * `used` (a shared VMM allocation: share.c), and its end. */
SHIM_HIDDEN void quota_unslot(int ordinal, uint64_t bytes);
SHIM_HIDDEN void quota_unshared(int ordinal, uint64_t bytes);
SHIM_HIDDEN void quota_view(int ordinal, uint64_t phys_total,
                            uint64_t phys_free, uint64_t *out_total,
                            uint64_t *out_free, uint64_t *out_used);
/* A meminfo answer (the runtime's free f and total t) as the app sees it:
 * the quota's view of ordinal() when on, else as it is; NULLs skipped. */
SHIM_HIDDEN void quota_meminfo(int on, int (*ordinal)(void), size_t f,
                               size_t t, size_t *pfree, size_t *ptotal);
/* Whether pid is one of the processes of the app on ordinal (a live slot
 * of its ledger, or this process). */
SHIM_HIDDEN int quota_member(int ordinal, pid_t pid);
/* A device's total memory (bytes as the runtime says) in the quota's view. */
SHIM_HIDDEN size_t quota_total(int ordinal, size_t bytes);
SHIM_HIDDEN void quota_fork_child(void);
SHIM_HIDDEN void quota_detach_all(void);

/* track.c */
SHIM_HIDDEN void track_init(void);
/* ctx: the context the memory belongs to (0 none). */
SHIM_HIDDEN int track_put(enum shim_kind kind, uint64_t key, int ordinal,
                          uint64_t bytes, uint64_t ctx);
/* out_ctx may be NULL. */
SHIM_HIDDEN int track_take(enum shim_kind kind, uint64_t key,
                           int *out_ordinal, uint64_t *out_bytes,
                           uint64_t *out_ctx);
/* Take out every record made in context ctx (but the context's own and
 * VMM handles, which outlive it) and give each back with quota_release:
 * the driver freed them with the context. Returns how many. */
SHIM_HIDDEN unsigned track_drop_ctx(uint64_t ctx);
/* The same for every such record of device ordinal (HIP's device reset,
 * which keeps no contexts apart). */
SHIM_HIDDEN unsigned track_drop_dev(int ordinal);
SHIM_HIDDEN void track_fork_prepare(void);
SHIM_HIDDEN void track_fork_parent(void);
SHIM_HIDDEN void track_fork_child(void);

/* timeslice.c */
extern SHIM_HIDDEN _Thread_local struct shim_ts_thread *shim_ts_self
    __attribute__((tls_model("initial-exec")));
/* Set a device's broker socket (config.c, before init completes). */
SHIM_HIDDEN void timeslice_config(int ordinal, const char *path);
/* The slow path of ts_enter: init, wait for the turn. Returns this
 * thread's slot with busy set, SHIM_TS_UNCOUNTED (counted in
 * ts.inflight), SHIM_TS_DENIED (the broker refused this process: fail the
 * call, do not ts_leave) or NULL (time slicing off). */
SHIM_HIDDEN struct shim_ts_thread *timeslice_enter_slow(void);
/* Is ordinal a time-sliced device (allocations become managed)? */
SHIM_HIDDEN int timeslice_managed(int ordinal);
/* The card ledger of time-sliced device `ordinal` from its broker: the
 * sealed memfd it hands an admitted process ("L"); connects (hello only)
 * if not yet connected and waits for it. The descriptor stays the
 * shim's (do not close it); -1 when no broker answers or it refused. */
SHIM_HIDDEN int timeslice_card_fd(int ordinal);
SHIM_HIDDEN void timeslice_fork_child(void);
#define SHIM_TS_UNCOUNTED ((struct shim_ts_thread *)1)
#define SHIM_TS_DENIED ((struct shim_ts_thread *)2)

/* Around a synchronize (context or stream): a thread waiting for the
 * device keeps the turn held (not idle). begin returns whether it counted
 * the thread; pass that to end. */
SHIM_HIDDEN int timeslice_sync_begin(void);
SHIM_HIDDEN void timeslice_sync_end(int counted);

/* Before a submission: hold the turn. Pair with ts_leave, unless *denied
 * was set (the broker refused this process: fail the call). *denied is
 * written only on the slow path, so after inlining the check costs the
 * held path nothing (the compiler sees it still 0 there). */
static inline struct shim_ts_thread *ts_enter(int *denied)
{
    struct shim_ts_thread *t;
    int g = atomic_load_explicit(&shim_state.ts.gate, memory_order_relaxed);

    if (__builtin_expect(g == SHIM_TS_GATE_OFF, 1))
        return NULL;
    t = shim_ts_self;
    if (t != NULL) {
        atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst); /* membarrier pairs */
        if (atomic_load_explicit(&shim_state.ts.gate, memory_order_relaxed) ==
            SHIM_TS_GATE_OPEN)
            return t;
        atomic_store_explicit(&t->busy, 0, memory_order_release);
    }
    t = timeslice_enter_slow();
    if (__builtin_expect(t == SHIM_TS_DENIED, 0)) {
        *denied = 1;
        return NULL;
    }
    return t;
}

static inline void ts_leave(struct shim_ts_thread *t)
{
    if (t == NULL)
        return;
    if (t == SHIM_TS_UNCOUNTED)
        atomic_fetch_sub(&shim_state.ts.inflight, 1);
    else
        atomic_store_explicit(&t->busy, 0, memory_order_release);
}

/* vmm.c: VMM handles stay charged while mapped. */
SHIM_HIDDEN void vmm_mapped(uint64_t va, uint64_t size, uint64_t handle);
/* Before the driver releases handle: 1 if it is mapped (its record moves
 * aside and stays charged until its last mapping goes), else 0. */
SHIM_HIDDEN int vmm_hold_release(uint64_t handle);
SHIM_HIDDEN void vmm_unhold(uint64_t handle); /* the release failed */
SHIM_HIDDEN void vmm_unmapped(uint64_t va, uint64_t size);
SHIM_HIDDEN void vmm_fork_prepare(void);
SHIM_HIDDEN void vmm_fork_parent(void);
SHIM_HIDDEN void vmm_fork_child(void);

/* pool.c: stream-ordered pools, charged by what they hold on the device;
 * CUDA's (pool_cuda) and HIP's (pool_hip), whose codes agree (0 success,
 * 2 out of memory). */
struct pool_api;
extern SHIM_HIDDEN const struct pool_api pool_cuda, pool_hip;
/* pool, or the device's current pool when NULL, if the runtime tells its
 * reserved memory; else NULL (charge by request). */
SHIM_HIDDEN void *pool_measurable(const struct pool_api *api, void *pool,
                                  int ordinal);
/* An allocation from pool through call(arg); undo(arg) frees it. */
SHIM_HIDDEN int pool_alloc(const struct pool_api *api, void *pool,
                           int ordinal, uint64_t bytes, int (*call)(void *),
                           void *arg, int (*undo)(void *));
SHIM_HIDDEN void pool_refresh(void);      /* give back what pools released */
SHIM_HIDDEN int pool_reclaim(int ordinal); /* trim, refresh; 1 if it ran */
SHIM_HIDDEN void pool_fork_prepare(void);
SHIM_HIDDEN void pool_fork_parent(void);
SHIM_HIDDEN void pool_fork_child(void);

/* ctx.c: contexts charged at their measured size. */
/* What ctx_before read before a context is made: the card's free memory
 * and this process's own figure (NVML's process list; 0 not listed), each
 * -1 when unknown; card CTX_KNOWN (-2) when the app knows the cost. */
struct ctx_mark {
    int64_t card;
    int64_t own;
};
SHIM_HIDDEN struct ctx_mark ctx_before(int ordinal);
SHIM_HIDDEN uint64_t ctx_cost(int ordinal, struct ctx_mark before);
/* What the last context measured on ordinal took (0 none yet): reserved
 * before the next one is made, so that one over the quota is refused
 * before the driver makes it. */
SHIM_HIDDEN uint64_t ctx_estimate(int ordinal);
SHIM_HIDDEN CUresult ctx_primary_retain(CUresult (*fn)(CUcontext *, CUdevice),
                                        CUcontext *pctx, CUdevice dev, int on);
/* After a release (reset 0) or a reset (1) that returned rc. */
SHIM_HIDDEN CUresult ctx_primary_drop(CUresult rc, CUdevice dev, int reset);
SHIM_HIDDEN void ctx_fork_child(void);

/* The calling thread's current context, 0 none. */
SHIM_HIDDEN uint64_t ctx_current(void);
/* cuCtxSetLimit of a limit that reserves device memory, through fn. */
SHIM_HIDDEN CUresult ctx_set_limit(CUresult (*fn)(CUlimit, size_t),
                                   CUlimit limit, size_t value);

/* share.c: VMM memory shared between the app's processes. */
SHIM_HIDDEN void share_export(uint64_t handle, CUmemAllocationHandleType type,
                              const void *os);
/* here: the caller's current device (looked at even before this process
 * charged anything there). */
SHIM_HIDDEN void share_import(uint64_t handle, CUmemAllocationHandleType type,
                              const void *os, int here);
/* handle's charge was given back (released and unmapped): its share loses
 * this process's reference. */
SHIM_HIDDEN void share_gone(uint64_t handle);
SHIM_HIDDEN void share_drop(struct shim_dev *d, int entry);
SHIM_HIDDEN void share_fork_child(void);

/* devmap.c: NVML devices and CUDA ordinals, tied by UUID. */
SHIM_HIDDEN nvmlDevice_t devmap_nvml(int ordinal);
/* The CUDA ordinal of NVML card (uuid, NVML index idx if have_idx); -1
 * when the app has none for it (not visible, or not bound under acceld). */
SHIM_HIDDEN int devmap_ordinal(const char *uuid, unsigned idx, int have_idx);

/* hooks.c: the estimated VRAM of a mipmap chain of n levels (each level
 * halves every dimension; a layered one keeps its depth), elements of
 * `elem` bytes, each level in 2 MiB granules (hooks_hip.c shares it). */
SHIM_HIDDEN uint64_t hooks_mipmap_bytes(size_t w, size_t h, size_t z,
                                        int layered, uint64_t elem,
                                        unsigned n);

/* procaddr.c */
SHIM_HIDDEN void *procaddr_hook_for(void *real);
SHIM_HIDDEN void procaddr_dl_init(void);

#endif /* ACCEL_SHIM_SHIM_H */
