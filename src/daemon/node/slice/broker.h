/* SPDX-License-Identifier: MIT */
/*
 * broker.h: the time-slice broker of acceld (SPEC 4.3). One broker per
 * TimeSlice device of the local node, each a UNIX socket; one thread serves
 * all of them. The broker hands the device's turn to one app at a time (all
 * processes of an app share the app's turn), asks the holder to give it back
 * after the quantum when another app waits, takes it back at once when the
 * holder's connections drop, takes it back anyway (revokes it) from a holder
 * that ignores the request for a grace period, never makes an app that is
 * alone wait, and admits only the processes of the apps bound to the device
 * (the peer's SO_PEERCRED checked by a callback the daemon supplies).
 *
 * Two layers: `broker_core` is the pure state machine of one device (no I/O,
 * time passed in, messages out through a callback), unit-tested in
 * tests/unit/test_broker.c; `broker_set` is the socket server and its thread.
 * Neither knows the daemon's state; broker_ops.c connects them to it.
 *
 * Wire protocol (SOCK_SEQPACKET, one short ASCII record per message):
 *   shim -> broker   "H 1 <app>"   hello (protocol 1), once, first
 *                    "R [<bytes>]" this process wants the turn; bytes: the
 *                                  device memory its app holds (issue 49)
 *                    "D"           this process gave the turn back (its
 *                                  submitted work is finished)
 *   broker -> shim   "G <contended> <quantumMs> <idleMs> <idleUs>"  turn
 *                                  granted (idleUs: the idle time in us;
 *                                  shims before issue 49 read three fields)
 *                    "C"           another app waits (give it back when idle)
 *                    "X"           give the turn back now (quantum used up)
 *                    "V"           the turn was taken back (X ignored for
 *                                  the grace period); ask again with R
 *                    "N <reason>"  hello refused (not a process of a bound
 *                                  app); the broker closes the connection
 *                    "L"           the card ledger: one descriptor of the
 *                                  device's sealed card memfd rides along
 *                                  (SCM_RIGHTS), sent once, as soon as the
 *                                  hello is admitted (and to nobody else)
 * Unknown records are ignored by both sides (future versions add fields).
 */
#ifndef ACCEL_DAEMON_NODE_SLICE_BROKER_H
#define ACCEL_DAEMON_NODE_SLICE_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"

#define BROKER_MAX_CONNS 128       /* connections per device */
#define BROKER_MAX_APPS 32         /* distinct apps per device */
#define BROKER_APP_MAX 64          /* app name bytes incl. NUL */
#define BROKER_HANDOFF_RING 256    /* recent handoffs kept for median/p99 */
#define BROKER_HIST_BUCKETS 10     /* handoff histogram buckets */
#define BROKER_MSG_MAX 128         /* bytes of one record */
/* Defaults, chosen by bench/shim/bench_timeslice (issue 49;
 * docs/internals/timeslice.md, "Settings and the rule for choosing them"). */
#define BROKER_DEFAULT_QUANTUM_MS 30
#define BROKER_DEFAULT_IDLE_MS 1         /* what old shims read */
#define BROKER_DEFAULT_IDLE_US 1000
#define BROKER_MIN_IDLE_US 50
#define BROKER_DEFAULT_MIN_TURN_US 2000
/* The share of device time paging may take that turns are planned for;
 * the bar is 10 %: the margin is for what the estimate misses (contexts,
 * a turn cut short at an app's start or end). */
#define BROKER_DEFAULT_PAGING_PCT 5
#define BROKER_DEFAULT_LINK_BPS 12000000000ULL /* 12 GB/s: PCIe 4 x16 for
                                                * managed memory's faults;
                                                * corrected on a GPU */
#define BROKER_MIN_QUANTUM_MS 10
#define BROKER_MAX_QUANTUM_MS 600000
#define BROKER_MAX_IDLE_MS 600000
/* A holder asked back (X) that has not given the turn back this long after
 * is revoked. Default 1 s: a well-behaved handoff is a context synchronize
 * of the holder's queued work (1-2 ms median on the fake driver, the
 * longest queued kernel on a GPU: ML kernels run for milliseconds, rarely
 * 100 ms); a waiting app waits at most quantum + 1 s for a holder that
 * never gives back, and an honest holder with a queue of long kernels is
 * not cut short (docs/internals/timeslice.md). */
#define BROKER_DEFAULT_GRACE_MS 1000
#define BROKER_MIN_GRACE_MS 10
#define BROKER_MAX_GRACE_MS 600000
#define BROKER_REASON_MAX 160      /* bytes of a refusal reason incl. NUL */

/* Upper bounds (seconds) of the handoff histogram buckets (+Inf implied). */
extern const double broker_hist_bounds[BROKER_HIST_BUCKETS];

struct broker_settings {
    uint32_t quantum_ms;   /* longest turn while another app waits (when
                            * no memory must move at a switch) */
    uint32_t idle_ms;      /* a holder idle this long gives the turn back
                            * early when another app waits (whole ms, for
                            * shims that read only this) */
    uint32_t grace_ms;     /* a holder asked back that keeps the turn this
                            * long after is revoked; 0 = the default */
    uint32_t idle_us;      /* the idle time in microseconds; 0 = idle_ms */
    uint32_t min_turn_us;  /* a holder keeps the turn at least this long
                            * before an app with credit takes it; 0 = the
                            * default */
    uint32_t oversub_ms;   /* while a switch must move memory, turns are
                            * at least this long; 0 = quantum_ms */
    uint32_t paging_pct;   /* while a switch must move memory, turns grow
                            * so that moving is at most this share of
                            * device time; 0 = the default */
    uint64_t card_bytes;   /* the card's memory; 0 = unknown */
    uint64_t link_bps;     /* bytes per second a switch moves; 0 = default */
    bool card_full;        /* the card looks full (NVML) though no shim
                            * reported its bytes: treat switches as moving
                            * memory (turns of oversub_ms) */
};

/* Sends `msg` to connection `conn`; broker_core never frees anything. */
typedef void (*broker_send_fn)(void *ctx, int conn, const char *msg);

struct broker_conn {
    bool open;             /* slot in use */
    int app;               /* index in apps[], -1 before hello */
    bool wants;            /* asked for the turn (R) and not done */
    bool held;             /* granted and not given back */
    uint64_t bytes;        /* the app's device memory, as this process last
                            * reported it ("R <bytes>"); 0 = not reported */
};

struct broker_app {
    char name[BROKER_APP_MAX]; /* app name, "" = free slot */
    int nconns;            /* open connections */
    bool queued;           /* in the wait queue */
    uint64_t wait_since;   /* ns when it started waiting, 0 = not waiting */
    uint64_t turns;        /* turns granted */
    uint64_t wait_ns;      /* total time waited (finished waits) */
    uint64_t revoked;      /* turns taken back from it */
    uint64_t held_ns;      /* device time held, finished turns */
    uint64_t credit_ns;    /* what its last turn did not use (it gave the
                            * turn back early): asking again, it takes
                            * the turn after the holder's minimum turn */
    bool jump;             /* queued ahead on its credit */
    uint64_t gap_since;    /* ns its last turn ended (its gap began), 0 =
                            * holding or asked since; a gap earns credit:
                            * the app's fair share of it (1 / the apps) */
};

struct broker_core {
    struct broker_settings set;              /* current settings */
    broker_send_fn send;                     /* message sink */
    void *ctx;                               /* its argument */
    struct broker_conn conns[BROKER_MAX_CONNS];
    struct broker_app apps[BROKER_MAX_APPS];
    int queue[BROKER_MAX_APPS];              /* waiting apps, FIFO */
    int nqueue;
    int holder;                              /* app index or -1 */
    uint64_t granted_ns;                     /* when the holder got it */
    uint64_t budget_ns;                      /* the holder's turn length
                                              * while others wait */
    uint64_t cut_ns;                         /* ask the holder back then
                                              * (an app with credit
                                              * waits), 0 = not */
    uint64_t move_ns;                        /* last switch's estimated
                                              * memory moving time */
    int last_holder;                         /* app that held it last */
    uint64_t moves;                          /* switches that moved
                                              * memory (estimated) */
    uint64_t moved_ns_total;                 /* their estimated time */
    uint64_t asked_ns;                       /* when X was sent, 0 = not */
    bool contended_sent;                     /* C sent this turn */
    uint64_t released_ns;                    /* last time the turn freed */
    uint64_t turns_total;                    /* turns granted, all apps */
    uint64_t revoked_total;                  /* turns revoked, all apps */
    int last_revoked;                        /* app index of the last
                                              * revocation, -1 none */
    uint64_t wait_ns_total;                  /* finished waits, all apps */
    uint64_t handoff[BROKER_HANDOFF_RING];   /* recent handoffs, ns */
    uint64_t nhandoff;                       /* handoffs ever recorded */
    uint64_t hist[BROKER_HIST_BUCKETS + 1];  /* per bucket (+Inf last) */
    double hist_sum_s;                       /* sum of handoffs, seconds */
};

/* Initialise c (cannot fail); send(ctx, conn, msg) receives the messages. */
void broker_core_init(struct broker_core *c, const struct broker_settings *s,
                      broker_send_fn send, void *ctx);
/* New settings; they apply from the next decision on. */
void broker_core_configure(struct broker_core *c,
                           const struct broker_settings *s);
/* Connection `conn` (0..BROKER_MAX_CONNS-1) opened. */
void broker_core_open(struct broker_core *c, int conn);
/* Hello: conn belongs to app. ACCEL_EINVAL for a bad name or second hello,
 * ACCEL_ETOOBIG when no app slot is free (the server closes it then). */
enum accel_err broker_core_hello(struct broker_core *c, int conn,
                                 const char *app, uint64_t now);
/* The connection wants the turn. */
void broker_core_request(struct broker_core *c, int conn, uint64_t now);
/* The connection's app holds `bytes` of device memory (from "R <bytes>");
 * before broker_core_request. */
void broker_core_bytes(struct broker_core *c, int conn, uint64_t bytes);
/* Time one switch to app `app` moves memory for (ns): 0 while the apps'
 * memory together fits the card; else min(the app's bytes, what passes
 * the card) over the link. Pure: for the views and the tests. */
uint64_t broker_core_move_ns(const struct broker_core *c, int app);
/* The connection gave the turn back. */
void broker_core_done(struct broker_core *c, int conn, uint64_t now);
/* The connection closed (or crashed): whatever it held is free at once. */
void broker_core_close(struct broker_core *c, int conn, uint64_t now);
/* Time passed: asks the holder back (X) when its quantum is over and
 * another app waits, and revokes the turn (V to the holder's connections,
 * the turn to the next waiter) when the holder still has it grace_ms after
 * X. Returns the next time (ns) it wants to be called, 0 = none. */
uint64_t broker_core_tick(struct broker_core *c, uint64_t now);

/* What the views show of one device. */
struct broker_app_stats {
    char name[BROKER_APP_MAX]; /* app */
    int conns;                 /* connected processes */
    bool holding;              /* has the turn */
    bool waiting;              /* in the queue */
    uint64_t turns;            /* turns granted */
    uint64_t wait_ns;          /* time waited, the current wait included */
    uint64_t revoked;          /* turns taken back from it */
    uint64_t held_ns;          /* device time held, current turn included */
    uint64_t credit_ns;        /* unused time it may claim early */
    uint64_t bytes;            /* device memory it reported */
};

struct broker_stats {
    char holder[BROKER_APP_MAX];  /* "" = nobody */
    uint64_t held_ns;             /* how long the holder has had it */
    uint64_t budget_ns;           /* the holder's turn length while others
                                   * wait (grows while memory must move) */
    uint64_t moves;               /* switches that moved memory */
    uint64_t moved_ns_total;      /* their estimated moving time */
    char queue[BROKER_MAX_APPS][BROKER_APP_MAX]; /* waiting, in order */
    int nqueue;
    struct broker_app_stats apps[BROKER_MAX_APPS];
    int napps;
    uint64_t turns_total;         /* turns granted */
    uint64_t revoked_total;       /* turns revoked */
    uint64_t wait_ns_total;       /* waited, current waits included */
    uint64_t handoffs;            /* handoffs recorded */
    uint64_t handoff_p50_ns;      /* over the recent ring, 0 if none */
    uint64_t handoff_p99_ns;
    uint64_t hist[BROKER_HIST_BUCKETS + 1]; /* per bucket, +Inf last */
    double hist_sum_s;            /* sum of all handoffs, seconds */
    struct broker_settings set;   /* settings in force */
    char path[108];               /* socket path */
    bool listening;               /* the socket is bound */
};

/* Snapshot of c at time now into *out. */
void broker_core_stats(const struct broker_core *c, uint64_t now,
                       struct broker_stats *out);

/*
 * The socket path of a device's broker: "<data_dir>/run/ts-<hash>.sock",
 * where <hash> is 8 hex digits of the device id, or, when that exceeds the
 * 107 bytes of sun_path, "/tmp/accel-ts-<uid>/<hash16>.sock". ACCEL_OK or
 * ACCEL_ETOOBIG (cap too small).
 */
enum accel_err broker_socket_path(char *out, size_t cap, const char *data_dir,
                                  const char *dev_id);

/* ---- the server: all brokers of this node, one thread ---- */
struct broker_set;

/* Called by the broker thread about every 500 ms, without any broker lock
 * held: the place to reconcile the set with the daemon's devices. */
typedef void (*broker_sync_fn)(void *ctx, struct broker_set *bs);

/* Who connected (SO_PEERCRED at connect time). */
struct broker_peer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
};

/*
 * Admission: may `peer`, which claims app `app` in its hello, use device
 * `dev_id`'s turns? true = yes; false = no, with a sentence in why[cap]
 * (sent to the client as "N <why>", which the shim logs). Called on the
 * broker thread WITHOUT any broker lock held (it may take the daemon's).
 */
typedef bool (*broker_admit_fn)(void *ctx, const char *dev_id,
                                const char *app,
                                const struct broker_peer *peer, char *why,
                                size_t cap);

/* A new, empty set (no thread yet). Caller frees with broker_set_free.
 * Until broker_set_admission is called, only peers with the broker's own
 * effective uid (or root) are admitted. */
struct broker_set *broker_set_new(broker_sync_fn sync, void *ctx);
/* The admission check (before broker_set_start). */
void broker_set_admission(struct broker_set *bs, broker_admit_fn admit,
                          void *ctx);
/* Start the thread. ACCEL_OK or ACCEL_ESYS. */
enum accel_err broker_set_start(struct broker_set *bs);
/* Stop the thread, close every socket and remove the socket files.
 * Accepts NULL. */
void broker_set_free(struct broker_set *bs);
/*
 * Make sure device `id` has a broker on `path` with settings s (create and
 * bind it, or update its settings). A stale socket file is replaced.
 * ACCEL_OK, ACCEL_ETOOBIG (no room), ACCEL_ESYS (bind failed). Thread-safe.
 */
enum accel_err broker_set_ensure(struct broker_set *bs, const char *id,
                                 const char *path,
                                 const struct broker_settings *s);
/* Remove every broker whose id is not in ids[n] (its apps run free). */
void broker_set_retain(struct broker_set *bs, const char *const *ids,
                       size_t n);
/* A new descriptor (close-on-exec) of device id's card ledger, the
 * sealed memfd its broker hands each admitted app ("L", SCM_RIGHTS;
 * docs/internals/timeslice.md), for acceld's own reads; -1 if none.
 * Thread-safe. */
int broker_set_card_fd(struct broker_set *bs, const char *id);
/* Stats of device id into *out (set only on success): true if it has a
 * broker. Thread-safe. */
bool broker_set_stats(struct broker_set *bs, const char *id,
                      struct broker_stats *out);

/* One revocation, for the daemon's events. */
struct broker_revocation {
    char dev[128];                /* device id */
    char app[BROKER_APP_MAX];     /* the app whose turn was taken back */
    uint32_t grace_ms;            /* the grace it overran */
};
#define BROKER_REVOCATIONS_KEPT 64 /* noted between two takes; older dropped */

/* Move up to max revocations noted since the last call into out (oldest
 * first); their number. Thread-safe. */
size_t broker_set_take_revocations(struct broker_set *bs,
                                   struct broker_revocation *out, size_t max);

#endif /* ACCEL_DAEMON_NODE_SLICE_BROKER_H */
