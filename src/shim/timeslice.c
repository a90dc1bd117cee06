/* SPDX-License-Identifier: MIT */
/*
 * timeslice.c: holding the app's turn on time-sliced devices (SPEC 4.3).
 *
 * The launch path is in shim.h (ts_enter/ts_leave). Here: the slow path
 * (first submission, waiting for a grant), the helper thread that talks to
 * the broker (grants, "another app waits", "give it back", idle release,
 * reconnects), and the handoff itself: close the gate, membarrier, wait
 * for submitting threads to leave the driver, synchronize the app's
 * contexts, then "D" to the broker.
 *
 * While no broker answers (acceld down or restarting) the process runs
 * (state FREE) and reconnects every 250 ms; it asks for the turn again as
 * soon as a broker answers. Running rather than waiting means an acceld
 * restart never stalls the apps; the price is that apps may overlap while
 * no broker runs (docs/internals/timeslice.md).
 *
 * The helper thread blocks every signal, never calls exit, and is started
 * only in processes that have a time-sliced device and submit work.
 */
#include "shim/shim.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TS_RETRY_MS 250           /* reconnect period without a broker */
#define TS_TICK_MS 250            /* helper wake-up when nothing is due */
#define TS_CARD_WAIT_S 10         /* a broker answers a hello in a loop turn */
#define MB_CMD_PRIVATE_EXPEDITED (1 << 3)
#define MB_CMD_REGISTER_PRIVATE_EXPEDITED (1 << 4)

SHIM_HIDDEN _Thread_local struct shim_ts_thread *shim_ts_self
    __attribute__((tls_model("initial-exec")));

#define TS (shim_state.ts)

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

void timeslice_config(int ordinal, const char *path)
{
    struct shim_ts_dev *d;
    if (ordinal < 0 || ordinal >= SHIM_TS_MAX_DEV || path == NULL ||
        strlen(path) >= sizeof(d->path))
        return;
    d = &TS.dev[ordinal];
    if (d->path[0] == '\0') {
        TS.ndev++;
        TS.only = ordinal;
    }
    shim_concat(d->path, sizeof(d->path), path, (char *)NULL);
    d->state = SHIM_TS_IDLE;
}

int timeslice_managed(int ordinal)
{
    return ordinal >= 0 && ordinal < SHIM_TS_MAX_DEV &&
           TS.dev[ordinal].path[0] != '\0';
}

/* Open = every time-sliced device held (or running free). mu held. */
static void gate_update(void)
{
    int open = 1;
    for (int i = 0; i < SHIM_TS_MAX_DEV; i++) {
        int s = TS.dev[i].state;
        if (TS.dev[i].path[0] != '\0' && s != SHIM_TS_HELD &&
            s != SHIM_TS_FREE)
            open = 0;
    }
    atomic_store_explicit(&TS.gate,
                          open ? SHIM_TS_GATE_OPEN : SHIM_TS_GATE_CLOSED,
                          memory_order_seq_cst);
}

static void wake_helper(void)
{
    if (TS.wake[1] > 0)
        (void)!write(TS.wake[1], "w", 1);
}

static int send_msg(struct shim_ts_dev *d, const char *msg)
{
    if (d->fd < 0)
        return -1;
    return send(d->fd, msg, strlen(msg), MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* Connect to the broker and say hello. mu held. 0 or -1. */
static int ts_connect(struct shim_ts_dev *d)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *app = getenv("ACCEL_APP");
    char hello[96];
    int fd;

    shim_concat(sa.sun_path, sizeof(sa.sun_path), d->path, (char *)NULL);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    if (app == NULL || app[0] == '\0')
        app = "unnamed";
    {
        char name[64]; /* the app name, at most 63 bytes */
        shim_concat(name, sizeof(name), app, (char *)NULL);
        shim_concat(hello, sizeof(hello), "H 1 ", name, (char *)NULL);
    }
    d->fd = fd;
    if (send_msg(d, hello) != 0) {
        close(fd);
        d->fd = -1;
        return -1;
    }
    wake_helper();
    return 0;
}

/* The device memory the app holds on ordinal, as its ledger counts it
 * (managed memory included), told to the broker with each "R" so that it
 * knows whether a switch moves memory (issue 49). 0 while the device's
 * ledger is not mapped (nothing allocated yet, or no quota). Only reads:
 * no attach, no lock. */
static uint64_t app_bytes(int ordinal)
{
    struct shim_dev *q;
    int64_t u;

    if (ordinal < 0 || ordinal >= SHIM_MAX_DEV)
        return 0;
    q = &shim_state.dev[ordinal];
    if (atomic_load_explicit(&q->state, memory_order_acquire) !=
            SHIM_DEV_READY || q->ledger == NULL)
        return 0;
    u = atomic_load_explicit(&q->ledger->used, memory_order_relaxed);
    return u > 0 ? (uint64_t)u : 0;
}

/* Ask for the turn (state IDLE or FREE after a reconnect). mu held. */
static void ask(struct shim_ts_dev *d)
{
    if (d->fd < 0 && ts_connect(d) != 0) {
        if (d->state != SHIM_TS_FREE)
            shim_log("time slicing: no broker at %s: running without turns",
                     d->path);
        d->state = SHIM_TS_FREE;
        d->retry_at = now_ns() + TS_RETRY_MS * 1000000ULL;
        return;
    }
    /* WANT even if the send failed: the helper then reads the broker's
     * answer ("N" when it refused the hello and shut the socket already)
     * or the end of the connection (lost: FREE) and wakes the waiters;
     * FREE here would let submissions run before the refusal is read */
    {
        char r[32];
        uint64_t b = app_bytes((int)(d - TS.dev));
        if (b > 0)
            snprintf(r, sizeof(r), "R %llu", (unsigned long long)b);
        else
            shim_concat(r, sizeof(r), "R", (char *)NULL);
        (void)send_msg(d, r);
    }
    d->state = SHIM_TS_WANT;
}

static void lost(struct shim_ts_dev *d)
{
    if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
    d->state = SHIM_TS_FREE;
    d->retry_at = now_ns() + TS_RETRY_MS * 1000000ULL;
    shim_log("time slicing: broker %s gone: running without turns", d->path);
}

static void *helper_main(void *arg);

static void slot_free(void *p)
{
    struct shim_ts_thread *t = p;
    atomic_store(&t->busy, 0);
    atomic_store(&t->used, 0);
}

static void start_once(void)
{
    sigset_t all, old;

    TS.wake[0] = TS.wake[1] = 0;
    if (TS.ndev == 0) { /* fds unused: leave dev[] pages untouched */
        atomic_store(&TS.gate, SHIM_TS_GATE_OFF);
        return;
    }
    for (int i = 0; i < SHIM_TS_MAX_DEV; i++)
        TS.dev[i].fd = -1;
    pthread_mutex_init(&TS.mu, NULL);
    pthread_cond_init(&TS.cv, NULL);
    pthread_key_create(&TS.key, slot_free);
    TS.membarrier_ok =
        syscall(SYS_membarrier, MB_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    {
        int p[2];
        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
            TS.wake[0] = p[0];
            TS.wake[1] = p[1];
        }
    }
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&TS.helper, NULL, helper_main, NULL) != 0) {
        shim_log("time slicing: no helper thread: running without turns");
        atomic_store(&TS.gate, SHIM_TS_GATE_OFF);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Start once per process (again in a fork child). */
static void ts_start(void)
{
    int s = atomic_load(&TS.started), zero = 0;
    if (s == 2)
        return;
    if (atomic_compare_exchange_strong(&TS.started, &zero, 1)) {
        shim_core_init();
        start_once();
        atomic_store(&TS.started, 2);
        return;
    }
    while (atomic_load(&TS.started) != 2)
        sched_yield();
}

/* This thread's busy word, claimed once; NULL when all are taken. */
static struct shim_ts_thread *slot(void)
{
    if (shim_ts_self != NULL)
        return shim_ts_self;
    for (int i = 0; i < SHIM_TS_MAX_THREADS; i++) {
        int zero = 0;
        if (atomic_compare_exchange_strong(&TS.thr[i].used, &zero, 1)) {
            shim_ts_self = &TS.thr[i];
            pthread_setspecific(TS.key, shim_ts_self);
            return shim_ts_self;
        }
    }
    return NULL;
}

static int submit_ordinal(void)
{
    CUresult (*fn)(CUdevice *);
    CUdevice dv = 0;
    if (TS.ndev == 1)
        return TS.only;
    fn = SHIM_CUDA_REAL(cuCtxGetDevice);
    if (fn == NULL || fn(&dv) != CUDA_SUCCESS || dv < 0 ||
        dv >= SHIM_TS_MAX_DEV)
        return -1;
    return dv;
}

static void note_ctx(struct shim_ts_dev *d)
{
    CUresult (*fn)(CUcontext *) = SHIM_CUDA_REAL(cuCtxGetCurrent);
    CUcontext c = NULL;
    if (fn == NULL || fn(&c) != CUDA_SUCCESS || c == NULL)
        return;
    for (int i = 0; i < d->nctx; i++)
        if (d->ctx[i] == c)
            return;
    if (d->nctx < SHIM_TS_MAX_CTX)
        d->ctx[d->nctx++] = c;
}

/* Wait (mu held) until dev holds the turn or runs free (0), or the broker
 * refused this process (-1). */
static int hold(struct shim_ts_dev *d)
{
    for (;;) {
        struct timespec dl;
        switch (d->state) {
        case SHIM_TS_HELD:
        case SHIM_TS_FREE:
            return 0;
        case SHIM_TS_REFUSED:
            return -1;
        case SHIM_TS_PROBE:
            d->state = SHIM_TS_HELD; /* busy: not idle */
            return 0;
        case SHIM_TS_IDLE:
            ask(d);
            continue;
        default:
            break;
        }
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 1;
        d->waiters++;
        pthread_cond_timedwait(&TS.cv, &TS.mu, &dl);
        d->waiters--;
    }
}

struct shim_ts_thread *timeslice_enter_slow(void)
{
    struct shim_ts_thread *t;
    int ord, denied = 0;

    ts_start();
    if (atomic_load(&TS.gate) == SHIM_TS_GATE_OFF)
        return NULL;
    t = slot();
    ord = submit_ordinal();
    pthread_mutex_lock(&TS.mu);
    if (ord >= 0 && TS.dev[ord].path[0] != '\0') {
        note_ctx(&TS.dev[ord]);
        denied = hold(&TS.dev[ord]) != 0;
    }
    if (denied) {
        gate_update();
        pthread_mutex_unlock(&TS.mu);
        return SHIM_TS_DENIED;
    }
    /* marked busy under mu: a release starting after this sees it */
    if (t != NULL)
        atomic_store(&t->busy, 1);
    else
        atomic_fetch_add(&TS.inflight, 1);
    gate_update();
    pthread_mutex_unlock(&TS.mu);
    return t != NULL ? t : SHIM_TS_UNCOUNTED;
}

/* Every thread that passed the open gate has left the driver. */
static void quiesce(void)
{
    if (TS.membarrier_ok)
        syscall(SYS_membarrier, MB_CMD_PRIVATE_EXPEDITED, 0, 0);
    else
        usleep(2000); /* old kernel: a grace period instead */
    for (int i = 0; i < SHIM_TS_MAX_THREADS; i++)
        while (atomic_load(&TS.thr[i].busy) && atomic_load(&TS.thr[i].used))
            usleep(20);
    while (atomic_load(&TS.inflight) > 0)
        usleep(20);
}

static void sync_contexts(CUcontext *ctx, int n)
{
    CUresult (*push)(CUcontext) = SHIM_CUDA_REAL(cuCtxPushCurrent_v2);
    CUresult (*pop)(CUcontext *) = SHIM_CUDA_REAL(cuCtxPopCurrent_v2);
    CUresult (*sync)(void) = SHIM_CUDA_REAL(cuCtxSynchronize);
    CUcontext old;

    if (push == NULL || pop == NULL || sync == NULL)
        return;
    for (int i = 0; i < n; i++)
        if (push(ctx[i]) == CUDA_SUCCESS) {
            sync();
            pop(&old);
        }
}

/* Give the turn of d back: the handoff. Called by the helper only. */
static void release(struct shim_ts_dev *d)
{
    CUcontext ctx[SHIM_TS_MAX_CTX];
    int n;

    pthread_mutex_lock(&TS.mu);
    if (d->state != SHIM_TS_HELD && d->state != SHIM_TS_PROBE) {
        pthread_mutex_unlock(&TS.mu);
        return;
    }
    d->state = SHIM_TS_RELEASING;
    gate_update();
    n = d->nctx;
    memcpy(ctx, d->ctx, sizeof(ctx));
    pthread_mutex_unlock(&TS.mu);
    quiesce();
    sync_contexts(ctx, n);
    pthread_mutex_lock(&TS.mu);
    if (d->state == SHIM_TS_RELEASING) {
        if (send_msg(d, "D") != 0)
            lost(d);
        else
            d->state = SHIM_TS_IDLE;
        if (d->state == SHIM_TS_IDLE && d->waiters > 0)
            ask(d); /* threads want it again: back in the queue */
        d->contended = 0;
        gate_update();
        pthread_cond_broadcast(&TS.cv);
    }
    pthread_mutex_unlock(&TS.mu);
}

/* The next idle check of d in idle_us. mu held. */
static void probe_arm(struct shim_ts_dev *d, uint64_t now)
{
    d->probe_at = now + (uint64_t)d->idle_us * 1000ULL;
    d->probe_epoch = atomic_load(&TS.sync_epoch);
}

/* "L": the card ledger's descriptor (the first one kept: the same memfd
 * again after an acceld restart adopted it; a different one, when no
 * process held it, is not the one this process has charged). */
static void on_card(struct shim_ts_dev *d, int passed)
{
    pthread_mutex_lock(&TS.mu);
    if (d->card_fd == 0 && passed >= 0) {
        d->card_fd = passed + 1;
        passed = -1;
    }
    pthread_cond_broadcast(&TS.cv);
    pthread_mutex_unlock(&TS.mu);
    if (passed >= 0)
        close(passed);
}

/* A record from the broker; `passed` a descriptor that came with it (-1
 * none), only "L"'s kept. */
static void on_msg(struct shim_ts_dev *d, const char *m, int passed,
                   uint64_t now)
{
    unsigned c = 0, q = 0, idle = 0;
    unsigned long long idle_us = 0;

    if (m[0] == 'L') {
        on_card(d, passed);
        return;
    }
    if (passed >= 0)
        close(passed);
    if (m[0] == 'X') {
        release(d);
        return;
    }
    if (m[0] == 'V') { /* revoked: X not honoured within the grace period */
        shim_log("time slicing: the broker at %s took the turn back (not "
                 "given back within its grace period)", d->path);
        release(d); /* if still held: stop submitting, ask again later */
        return;
    }
    pthread_mutex_lock(&TS.mu);
    if (m[0] == 'N') {
        shim_log("time slicing: the broker at %s refused this process: %s; "
                 "its submissions to this device fail with "
                 "CUDA_ERROR_NOT_PERMITTED", d->path, m[1] ? m + 2 : "");
        d->state = SHIM_TS_REFUSED;
        gate_update();
        pthread_cond_broadcast(&TS.cv);
        pthread_mutex_unlock(&TS.mu);
        return;
    }
    if (m[0] == 'G' && sscanf(m, "G %u %u %u %llu", &c, &q, &idle,
                              &idle_us) >= 3 &&
        d->state == SHIM_TS_WANT) {
        d->state = SHIM_TS_HELD;
        d->contended = (int)c;
        /* a broker before issue 49 sends whole ms only */
        d->idle_us = idle_us > 0 && idle_us < UINT32_MAX
                         ? (uint32_t)idle_us : idle * 1000U;
        probe_arm(d, now);
        gate_update();
        pthread_cond_broadcast(&TS.cv);
    } else if (m[0] == 'C') {
        d->contended = 1;
        probe_arm(d, now);
    }
    pthread_mutex_unlock(&TS.mu);
}

/* A thread is inside a submission (a synchronous copy waiting for the
 * device, say): busy, not idle. */
static int in_driver(void)
{
    if (atomic_load(&TS.inflight) > 0)
        return 1;
    for (int i = 0; i < SHIM_TS_MAX_THREADS; i++)
        if (atomic_load_explicit(&TS.thr[i].used, memory_order_relaxed) &&
            atomic_load_explicit(&TS.thr[i].busy, memory_order_relaxed))
            return 1;
    return 0;
}

/* Idle detection and reconnects; returns us until the next thing due.
 * Idle = a host gap: no submission since the probe began (the gate was
 * closed, so the next one would have set HELD), none still inside the
 * driver (a synchronous copy waiting for the device), no thread waiting
 * in a synchronize (it waits for the device: busy) and none finished one
 * since (the gap began only then). */
static uint64_t housekeeping(uint64_t now)
{
    uint64_t timeout = TS_TICK_MS * 1000ULL;
    for (int i = 0; i < SHIM_TS_MAX_DEV; i++) {
        struct shim_ts_dev *d = &TS.dev[i];
        int idle = 0;
        if (d->path[0] == '\0')
            continue;
        pthread_mutex_lock(&TS.mu);
        if (d->state == SHIM_TS_PROBE && now >= d->probe_at) {
            if (atomic_load(&TS.syncing) == 0 &&
                atomic_load(&TS.sync_epoch) == d->probe_epoch &&
                !in_driver())
                idle = 1;
            else
                probe_arm(d, now); /* in or just out of a synchronize */
        } else if (d->state == SHIM_TS_HELD && d->contended &&
                   now >= d->probe_at) {
            d->state = SHIM_TS_PROBE; /* the next submission clears it */
            probe_arm(d, now);
            gate_update();
        } else if (d->state == SHIM_TS_FREE && d->fd < 0 &&
                   now >= d->retry_at) {
            ask(d); /* WANT when a broker answers, else FREE again */
            gate_update();
            pthread_cond_broadcast(&TS.cv);
        }
        if ((d->state == SHIM_TS_PROBE || d->state == SHIM_TS_HELD) &&
            d->contended && !idle) {
            uint64_t us = d->probe_at > now
                              ? (d->probe_at - now + 999) / 1000ULL : 1;
            if (us < timeout)
                timeout = us;
        }
        pthread_mutex_unlock(&TS.mu);
        if (idle)
            release(d);
    }
    return timeout;
}

int timeslice_card_fd(int ordinal)
{
    struct shim_ts_dev *d;
    struct timespec dl;
    int fd;

    if (!timeslice_managed(ordinal))
        return -1;
    ts_start();
    if (atomic_load(&TS.gate) == SHIM_TS_GATE_OFF)
        return -1; /* no helper thread to read the answer */
    d = &TS.dev[ordinal];
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += TS_CARD_WAIT_S;
    pthread_mutex_lock(&TS.mu);
    /* the hello alone (no "R": this process has not asked for a turn);
     * ask() later finds the connection made */
    if (d->card_fd == 0 && d->fd < 0 && d->state == SHIM_TS_IDLE)
        (void)ts_connect(d);
    /* the answer is "L" (admitted), "N" (refused) or the connection's end
     * (lost: FREE, fd -1), each of which wakes us */
    while (d->card_fd == 0 && d->fd >= 0 && d->state != SHIM_TS_REFUSED &&
           pthread_cond_timedwait(&TS.cv, &TS.mu, &dl) == 0)
        ;
    fd = d->card_fd - 1;
    pthread_mutex_unlock(&TS.mu);
    return fd;
}

/* Around a synchronize (hooks.c): the thread waits for the device, which
 * is busy work, not a host gap. One atomic each way; nothing when time
 * slicing is off. */
int timeslice_sync_begin(void)
{
    if (atomic_load_explicit(&TS.gate, memory_order_relaxed) ==
        SHIM_TS_GATE_OFF)
        return 0;
    atomic_fetch_add(&TS.syncing, 1);
    return 1;
}

void timeslice_sync_end(int counted)
{
    if (!counted)
        return;
    atomic_fetch_add(&TS.sync_epoch, 1);
    atomic_fetch_sub(&TS.syncing, 1);
}

/* One record into m; *passed the descriptor that came with it, or -1
 * (one at most: further ones are closed by the kernel, MSG_CTRUNC). */
static ssize_t recv_rec(int fd, char *m, size_t cap, int *passed)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } cb;
    struct iovec iov = {.iov_base = m, .iov_len = cap};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = cb.b, .msg_controllen = sizeof cb.b};
    ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

    *passed = -1;
    for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c != NULL;
         c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len >= CMSG_LEN(sizeof(int)) && *passed < 0)
            memcpy(passed, CMSG_DATA(c), sizeof(int));
    return n;
}

static void read_dev(struct shim_ts_dev *d, int fd)
{
    char m[128];
    for (;;) {
        int passed;
        ssize_t n = recv_rec(fd, m, sizeof(m) - 1, &passed);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            if (passed >= 0)
                close(passed);
            pthread_mutex_lock(&TS.mu);
            if (d->fd == fd && d->state == SHIM_TS_REFUSED) {
                close(fd); /* refused for good: no reconnect */
                d->fd = -1;
            } else if (d->fd == fd) {
                lost(d);
                gate_update();
                pthread_cond_broadcast(&TS.cv);
            }
            pthread_mutex_unlock(&TS.mu);
            return;
        }
        m[n] = '\0';
        on_msg(d, m, passed, now_ns());
    }
}

static void *helper_main(void *arg)
{
    struct pollfd pfd[SHIM_TS_MAX_DEV + 1];
    int owner[SHIM_TS_MAX_DEV + 1];
    char buf[64];

    (void)arg;
    for (;;) {
        uint64_t us = housekeeping(now_ns());
        struct timespec timeout = {(time_t)(us / 1000000ULL),
                                   (long)(us % 1000000ULL) * 1000L};
        int n = 0;
        pfd[n] = (struct pollfd){.fd = TS.wake[0], .events = POLLIN};
        owner[n++] = -1;
        pthread_mutex_lock(&TS.mu);
        for (int i = 0; i < SHIM_TS_MAX_DEV; i++)
            if (TS.dev[i].fd >= 0) {
                pfd[n] = (struct pollfd){.fd = TS.dev[i].fd, .events = POLLIN};
                owner[n++] = i;
            }
        pthread_mutex_unlock(&TS.mu);
        if (ppoll(pfd, (nfds_t)n, &timeout, NULL) <= 0)
            continue;
        if (pfd[0].revents)
            while (read(TS.wake[0], buf, sizeof(buf)) > 0)
                ;
        for (int k = 1; k < n; k++)
            if (pfd[k].revents)
                read_dev(&TS.dev[owner[k]], pfd[k].fd);
    }
    return NULL;
}

/* In a fork child: no helper, no connections (the parent's are its own),
 * no other threads. Start over at the next submission. */
void timeslice_fork_child(void)
{
    int started = atomic_load(&TS.started);

    if (started == 1) { /* another thread was starting: start over here */
        atomic_store(&TS.gate, SHIM_TS_GATE_CLOSED);
        atomic_store(&TS.started, 0);
        return;
    }
    if (started != 2 || TS.ndev == 0)
        return;
    for (int i = 0; i < SHIM_TS_MAX_DEV; i++) {
        struct shim_ts_dev *d = &TS.dev[i];
        if (d->fd >= 0)
            close(d->fd);
        d->fd = -1;
        d->nctx = 0;
        d->waiters = 0;
        if (d->path[0] != '\0')
            d->state = SHIM_TS_IDLE;
    }
    for (int i = 0; i < SHIM_TS_MAX_THREADS; i++) {
        atomic_store(&TS.thr[i].busy, 0);
        if (&TS.thr[i] != shim_ts_self)
            atomic_store(&TS.thr[i].used, 0);
    }
    if (TS.wake[0] > 0) {
        close(TS.wake[0]);
        close(TS.wake[1]);
    }
    atomic_store(&TS.inflight, 0);
    atomic_store(&TS.syncing, 0); /* the forking thread is in no sync */
    atomic_store(&TS.gate, SHIM_TS_GATE_CLOSED);
    atomic_store(&TS.started, 0);
}
