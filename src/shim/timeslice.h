/* SPDX-License-Identifier: MIT */
/*
 * timeslice.h: the shim's side of time slicing (SPEC 4.3): before work is
 * submitted to a TimeSlice device the process holds its app's turn, which
 * acceld's broker grants (src/daemon/node/slice/broker.h has the
 * protocol). Included by shim.h; the state lives in shim_state.ts.
 *
 * The launch path (ts_enter/ts_leave, inlined into every submission hook):
 *   - time slicing off in this process: one atomic load;
 *   - turn held: a thread-local pointer, a store to this thread's own
 *     "busy" word, the gate load, and a store after the call. No system
 *     call, no lock, no shared cache line written.
 * The helper thread that gives the turn back closes the gate, then runs
 * membarrier(PRIVATE_EXPEDITED) so that every thread either saw the gate
 * closed or has its busy word visible, waits for the busy words to clear,
 * synchronizes the app's contexts and only then tells the broker. So no
 * submission slips past a handoff (asymmetric Dekker, as in userspace RCU).
 */
#ifndef ACCEL_SHIM_TIMESLICE_H
#define ACCEL_SHIM_TIMESLICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shim/cuda_types.h"

#define SHIM_TS_MAX_THREADS 1024 /* threads with a busy word */
#define SHIM_TS_MAX_CTX 8        /* contexts synchronized per device */
#define SHIM_TS_MAX_DEV 16       /* = SHIM_MAX_DEV */

enum shim_ts_gate {              /* shim_state.ts.gate */
    SHIM_TS_GATE_CLOSED = 0,     /* take the slow path (also: before init) */
    SHIM_TS_GATE_OPEN = 1,       /* every time-sliced device's turn held */
    SHIM_TS_GATE_OFF = 2,        /* no time slicing in this process */
};

enum shim_ts_state {             /* shim_ts_dev.state */
    SHIM_TS_NONE = 0,            /* device not time-sliced */
    SHIM_TS_IDLE,                /* no turn, none asked */
    SHIM_TS_WANT,                /* asked (R sent), waiting for G */
    SHIM_TS_HELD,                /* turn held */
    SHIM_TS_PROBE,               /* held; the next submission proves we are
                                  * busy (idle detection without a clock on
                                  * the launch path) */
    SHIM_TS_RELEASING,           /* giving it back (X or idle) */
    SHIM_TS_FREE,                /* no broker answers: run (see docs) */
    SHIM_TS_REFUSED,             /* the broker refused this process ("N"):
                                  * submissions fail, CUDA_ERROR_NOT_PERMITTED */
};

struct shim_ts_thread {
    _Atomic int busy;            /* 1 while this thread submits */
    _Atomic int used;            /* slot owned by a live thread */
    char pad[56];                /* one cache line per thread */
};

struct shim_ts_dev {
    char path[108];              /* broker socket, "" = not time-sliced */
    int state;                   /* enum shim_ts_state, guarded by ts.mu */
    int fd;                      /* connection, -1 none (valid after init) */
    int card_fd;                 /* the card ledger's memfd from the broker
                                  * ("L"), plus one: 0 none. Kept open (an
                                  * acceld restart adopts it through /proc) */
    int contended;               /* another app waits */
    uint32_t idle_us;            /* from the grant: idle this long with
                                  * another app waiting = give it back */
    uint64_t probe_at;           /* ns: next idle check */
    unsigned probe_epoch;        /* ts.sync_epoch when the probe began */
    uint64_t retry_at;           /* ns: next reconnect */
    int waiters;                 /* threads blocked for the turn */
    int nctx;                    /* contexts seen submitting */
    CUcontext ctx[SHIM_TS_MAX_CTX];
};

struct shim_ts {
    _Atomic int gate;            /* enum shim_ts_gate: the launch check */
    _Atomic int started;         /* 0 no, 1 starting, 2 ready */
    int ndev;                    /* time-sliced devices */
    int only;                    /* their ordinal when ndev == 1 */
    int membarrier_ok;           /* MEMBARRIER_CMD_PRIVATE_EXPEDITED works */
    pthread_mutex_t mu;          /* guards dev[] states and fds */
    pthread_cond_t cv;           /* state changes */
    pthread_t helper;            /* the helper thread */
    int wake[2];                 /* wakes the helper */
    _Atomic int inflight;        /* submissions of threads without a slot */
    _Atomic int syncing;         /* threads in a synchronize: waiting for
                                  * the device is busy, not idle (issue 49) */
    _Atomic unsigned sync_epoch; /* synchronizes finished so far */
    pthread_key_t key;           /* frees a thread's slot at its exit */
    struct shim_ts_dev dev[SHIM_TS_MAX_DEV];
    struct shim_ts_thread thr[SHIM_TS_MAX_THREADS];
};

#endif /* ACCEL_SHIM_TIMESLICE_H */
