/* SPDX-License-Identifier: MIT */
/*
 * broker.c: the time-slice broker's server (SPEC 4.3): one UNIX socket per
 * TimeSlice device, every device's broker on one thread (broker_set_*),
 * the peer checks of a connecting app, and the pending changes the daemon
 * hands it. Each device's turns are decided by its state machine,
 * broker_core.c; this file only carries the messages and the time to it.
 * It knows nothing of the daemon's state; broker_ops.c feeds it the
 * TimeSlice devices and their settings. The protocol is in broker.h and
 * docs/internals/timeslice.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/slice/broker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/ledger.h"

/* ---- socket path ---- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

enum accel_err broker_socket_path(char *out, size_t cap, const char *data_dir,
                                  const char *dev_id)
{
    uint64_t h = fnv1a(dev_id);
    int n = snprintf(out, cap, "%s/run/ts-%08x.sock", data_dir,
                     (unsigned)(h >> 32));
    if (n > 0 && (size_t)n < cap && (size_t)n < sizeof(((struct sockaddr_un *)0)->sun_path))
        return ACCEL_OK;
    n = snprintf(out, cap, "/tmp/accel-ts-%u/%016llx.sock", (unsigned)getuid(),
                 (unsigned long long)(h ^ fnv1a(data_dir)));
    return n > 0 && (size_t)n < cap ? ACCEL_OK : ACCEL_ETOOBIG;
}

/* ---- the server ---- */

#define BROKER_MAX_DEVS 64
#define BROKER_SYNC_MS 500

struct broker_dev {
    char id[128];                 /* device id */
    char path[108];               /* socket path */
    uint64_t serial;              /* unique in the set (never reused) */
    uint64_t revoked_seen;        /* core.revoked_total already noted */
    int lfd;                      /* listening socket */
    int fds[BROKER_MAX_CONNS];    /* connection fds, -1 free */
    struct broker_peer peer[BROKER_MAX_CONNS]; /* SO_PEERCRED at accept */
    char claim[BROKER_MAX_CONNS][BROKER_APP_MAX]; /* hello awaiting
                                                   * admission, "" none */
    struct broker_core core;      /* the state machine */
    int card_fd;                  /* the card ledger (a sealed memfd), -1
                                   * none; each admitted app gets it */
    uint64_t card_bytes;          /* its limit as last written */
};

/* A hello to check outside the set's lock (admission may take the
 * daemon's lock, which is taken before ours elsewhere). */
struct pending {
    struct broker_dev *bd;        /* compared, never dereferenced unlocked */
    uint64_t serial;              /* bd's, to tell a reused address */
    int slot, fd;
    char id[128];
    char app[BROKER_APP_MAX];
    struct broker_peer peer;
    bool ok;
    char why[BROKER_REASON_MAX];
};

struct broker_set {
    pthread_mutex_t mu;           /* guards devs and every core */
    struct broker_dev *devs[BROKER_MAX_DEVS];
    int ndevs;
    int wake[2];                  /* self-pipe: stop, new devices */
    pthread_t thread;
    bool running;                 /* thread started */
    _Atomic int stop;             /* set by broker_set_free */
    broker_sync_fn sync;          /* reconciliation callback */
    void *sync_ctx;
    broker_admit_fn admit;        /* admission, NULL = same uid or root */
    void *admit_ctx;
    uint64_t serials;             /* last broker_dev serial */
    struct pending *pend;         /* hellos of one loop turn */
    int npend, cpend;
    struct broker_revocation notes[BROKER_REVOCATIONS_KEPT]; /* ring */
    size_t nnotes;                /* noted and not taken (<= KEPT) */
    size_t note_next;             /* ring index of the next note */
};

static void dev_send(void *ctx, int conn, const char *msg)
{
    struct broker_dev *bd = ctx;
    if (bd->fds[conn] >= 0)
        (void)send(bd->fds[conn], msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
}

struct broker_set *broker_set_new(broker_sync_fn sync, void *ctx)
{
    struct broker_set *bs = xcalloc(1, sizeof(*bs));
    pthread_mutex_init(&bs->mu, NULL);
    bs->sync = sync;
    bs->sync_ctx = ctx;
    if (pipe2(bs->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        bs->wake[0] = bs->wake[1] = -1;
    return bs;
}

void broker_set_admission(struct broker_set *bs, broker_admit_fn admit,
                          void *ctx)
{
    bs->admit = admit;
    bs->admit_ctx = ctx;
}

static void wake(struct broker_set *bs)
{
    if (bs->wake[1] >= 0)
        (void)!write(bs->wake[1], "w", 1);
}

/* Create the directories above path: 0711 (others may reach the socket
 * by its name, not list the directory). */
static void make_dir(const char *path)
{
    char dir[108];
    char *slash;
    util_strlcpy(dir, path, sizeof(dir));
    slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return;
    *slash = '\0';
    if (mkdir(dir, 0711) != 0 && errno == ENOENT) {
        make_dir(dir);
        (void)mkdir(dir, 0711);
    }
}

/* The socket's directory must be ours and not writable by everyone, or
 * anyone could replace the socket with their own broker (the /tmp fallback
 * is where that matters; a group-writable data dir is the admin's choice).
 * A sticky directory (/tmp itself: standalone brokers, tests) is accepted
 * if root's: others cannot remove or rename our socket there, and one they
 * placed first makes our bind fail. false with errno EPERM otherwise. */
static bool dir_trusted(const char *path)
{
    char dir[108];
    char *slash;
    struct stat st;

    util_strlcpy(dir, path, sizeof(dir));
    slash = strrchr(dir, '/');
    if (slash == NULL)
        return true;
    *slash = '\0';
    if (lstat(dir[0] ? dir : "/", &st) != 0)
        return false;
    if (S_ISDIR(st.st_mode) && st.st_uid == 0 && (st.st_mode & S_ISVTX))
        return true;
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 002) != 0) {
        log_warn("time-slice broker: %s must be a directory owned by uid %u "
                 "and not writable by others (owner %u, mode %03o)", dir,
                 (unsigned)geteuid(), (unsigned)st.st_uid,
                 (unsigned)(st.st_mode & 0777));
        errno = EPERM;
        return false;
    }
    return true;
}

static int listen_on(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    make_dir(path);
    if (!dir_trusted(path))
        return -1;
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    unlink(path); /* a stale socket of an earlier acceld */
    /* 0666: apps run as their owners' uids and must reach it; who may
     * use it is decided per connection (SO_PEERCRED, admission) */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        chmod(path, 0666) != 0 || listen(fd, 64) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static struct broker_dev *find_dev(struct broker_set *bs, const char *id)
{
    for (int i = 0; i < bs->ndevs; i++)
        if (strcmp(bs->devs[i]->id, id) == 0)
            return bs->devs[i];
    return NULL;
}

/* ---- the card ledger (docs/internals/timeslice.md) ---- */

/* Where the card memfd's identity (st_dev, st_ino) is kept for the next
 * acceld: beside the socket, "<socket>.card". */
static void card_id_path(char *out, size_t cap, const struct broker_dev *bd)
{
    snprintf(out, cap, "%s.card", bd->path);
}

/* The card ledger of bd: the previous acceld's memfd when a process still
 * holds it (a restart: the running apps keep counting where they did),
 * else a new one; its identity written down for the next restart. */
static void card_open(struct broker_dev *bd, uint64_t memory)
{
    char idp[128];
    unsigned long long dev = 0, ino = 0;
    struct stat st;
    FILE *f;

    card_id_path(idp, sizeof idp, bd);
    bd->card_fd = -1;
    f = fopen(idp, "re"); /* O_CLOEXEC */
    if (f != NULL) {
        if (fscanf(f, "%llu %llu", &dev, &ino) == 2)
            bd->card_fd = ledger_card_adopt(dev, ino);
        fclose(f);
    }
    if (bd->card_fd >= 0) {
        log_info("time-slice broker for %s: card ledger adopted from the "
                 "running apps", bd->id);
        (void)ledger_card_set_limit(bd->card_fd, memory);
        bd->card_bytes = memory;
        return;
    }
    bd->card_fd = ledger_card_memfd(bd->id, memory);
    bd->card_bytes = memory;
    if (bd->card_fd < 0) {
        log_warn("time-slice broker for %s: no card ledger (%s): the apps' "
                 "memory that cannot be evicted is not counted card-wide",
                 bd->id, strerror(errno));
        return;
    }
    if (fstat(bd->card_fd, &st) == 0) { /* acceld's alone: 0600 */
        char line[64];
        int n = snprintf(line, sizeof line, "%llu %llu\n",
                         (unsigned long long)st.st_dev,
                         (unsigned long long)st.st_ino);
        int fd = open(idp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
                               O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, line, (size_t)n) != n)
            log_warn("time-slice broker for %s: cannot keep %s (%s): a "
                     "restart makes a new card ledger", bd->id, idp,
                     strerror(errno));
        if (fd >= 0)
            close(fd);
    }
}

/* Hand the card ledger to connection `slot` ("L" with the descriptor). */
static void card_send(struct broker_dev *bd, int slot)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } cb;
    struct iovec iov = {.iov_base = "L", .iov_len = 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = cb.b, .msg_controllen = sizeof cb.b};
    struct cmsghdr *c;

    if (bd->card_fd < 0 || bd->fds[slot] < 0)
        return;
    memset(&cb, 0, sizeof cb);
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &bd->card_fd, sizeof(int));
    (void)sendmsg(bd->fds[slot], &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int broker_set_card_fd(struct broker_set *bs, const char *id)
{
    struct broker_dev *bd;
    int fd = -1;

    pthread_mutex_lock(&bs->mu);
    for (int i = 0; i < bs->ndevs; i++) {
        bd = bs->devs[i];
        if (strcmp(bd->id, id) == 0 && bd->card_fd >= 0)
            fd = fcntl(bd->card_fd, F_DUPFD_CLOEXEC, 0);
    }
    pthread_mutex_unlock(&bs->mu);
    return fd;
}

enum accel_err broker_set_ensure(struct broker_set *bs, const char *id,
                                 const char *path,
                                 const struct broker_settings *s)
{
    struct broker_dev *bd;
    enum accel_err rc = ACCEL_OK;

    pthread_mutex_lock(&bs->mu);
    bd = find_dev(bs, id);
    if (bd != NULL) {
        broker_core_configure(&bd->core, s);
        if (bd->card_fd >= 0 && bd->card_bytes != s->card_bytes &&
            ledger_card_set_limit(bd->card_fd, s->card_bytes) == ACCEL_OK)
            bd->card_bytes = s->card_bytes;
        goto out;
    }
    if (bs->ndevs >= BROKER_MAX_DEVS || strlen(path) >= sizeof(bd->path)) {
        rc = ACCEL_ETOOBIG;
        goto out;
    }
    bd = xcalloc(1, sizeof(*bd));
    util_strlcpy(bd->id, id, sizeof(bd->id));
    util_strlcpy(bd->path, path, sizeof(bd->path));
    bd->serial = ++bs->serials;
    for (int i = 0; i < BROKER_MAX_CONNS; i++)
        bd->fds[i] = -1;
    broker_core_init(&bd->core, s, dev_send, bd);
    bd->lfd = listen_on(path);
    if (bd->lfd < 0) {
        log_warn("time-slice broker for %s: cannot listen on %s: %s", id,
                 path, strerror(errno));
        free(bd);
        rc = ACCEL_ESYS;
        goto out;
    }
    card_open(bd, s->card_bytes);
    bs->devs[bs->ndevs++] = bd;
    log_info("time-slice broker for %s on %s", id, path);
    wake(bs);
out:
    pthread_mutex_unlock(&bs->mu);
    return rc;
}

static void dev_close(struct broker_dev *bd)
{
    for (int i = 0; i < BROKER_MAX_CONNS; i++)
        if (bd->fds[i] >= 0)
            close(bd->fds[i]);
    if (bd->lfd >= 0) {
        close(bd->lfd);
        unlink(bd->path);
    }
    if (bd->card_fd >= 0) /* its identity file stays: a later broker of
                           * the device adopts it while apps hold it */
        close(bd->card_fd);
    free(bd);
}

void broker_set_retain(struct broker_set *bs, const char *const *ids,
                       size_t n)
{
    pthread_mutex_lock(&bs->mu);
    for (int i = 0; i < bs->ndevs;) {
        bool keep = false;
        for (size_t k = 0; k < n && !keep; k++)
            keep = strcmp(bs->devs[i]->id, ids[k]) == 0;
        if (keep) {
            i++;
            continue;
        }
        log_info("time-slice broker for %s stopped", bs->devs[i]->id);
        dev_close(bs->devs[i]);
        bs->devs[i] = bs->devs[--bs->ndevs];
    }
    pthread_mutex_unlock(&bs->mu);
    wake(bs);
}

/* Note revocations the cores made since the last look (lock held): one
 * at most per device per loop turn (a grant starts a fresh quantum). */
static void note_revocations(struct broker_set *bs)
{
    for (int d = 0; d < bs->ndevs; d++) {
        struct broker_dev *bd = bs->devs[d];
        struct broker_core *c = &bd->core;
        struct broker_revocation *n;
        if (c->revoked_total == bd->revoked_seen || c->last_revoked < 0)
            continue;
        bd->revoked_seen = c->revoked_total;
        n = &bs->notes[bs->note_next];
        bs->note_next = (bs->note_next + 1) % BROKER_REVOCATIONS_KEPT;
        if (bs->nnotes < BROKER_REVOCATIONS_KEPT)
            bs->nnotes++;
        util_strlcpy(n->dev, bd->id, sizeof(n->dev));
        util_strlcpy(n->app, c->apps[c->last_revoked].name, sizeof(n->app));
        n->grace_ms = c->set.grace_ms ? c->set.grace_ms
                                      : BROKER_DEFAULT_GRACE_MS;
    }
}

size_t broker_set_take_revocations(struct broker_set *bs,
                                   struct broker_revocation *out, size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&bs->mu);
    while (bs->nnotes > 0 && n < max) {
        size_t i = (bs->note_next + BROKER_REVOCATIONS_KEPT - bs->nnotes) %
                   BROKER_REVOCATIONS_KEPT;
        out[n++] = bs->notes[i];
        bs->nnotes--;
    }
    pthread_mutex_unlock(&bs->mu);
    return n;
}

bool broker_set_stats(struct broker_set *bs, const char *id,
                      struct broker_stats *out)
{
    struct broker_dev *bd;
    bool found = false;

    if (bs == NULL)
        return false;
    pthread_mutex_lock(&bs->mu);
    bd = find_dev(bs, id);
    if (bd != NULL) {
        broker_core_stats(&bd->core, util_now_ns(), out);
        util_strlcpy(out->path, bd->path, sizeof(out->path));
        out->listening = bd->lfd >= 0;
        found = true;
    }
    pthread_mutex_unlock(&bs->mu);
    return found;
}

static void accept_all(struct broker_dev *bd)
{
    for (;;) {
        int fd = accept4(bd->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        struct ucred cr;
        socklen_t len = sizeof(cr);
        int slot = -1;
        if (fd < 0)
            return;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 ||
            cr.pid <= 0) {
            close(fd); /* no credentials: nobody to admit */
            continue;
        }
        for (int i = 0; i < BROKER_MAX_CONNS && slot < 0; i++)
            if (bd->fds[i] < 0)
                slot = i;
        if (slot < 0) {
            close(fd); /* full: the shim runs without a turn (logged there) */
            continue;
        }
        bd->fds[slot] = fd;
        bd->peer[slot] = (struct broker_peer){cr.pid, cr.uid, cr.gid};
        bd->claim[slot][0] = '\0';
        broker_core_open(&bd->core, slot);
    }
}

static void drop(struct broker_dev *bd, int slot, uint64_t now)
{
    broker_core_close(&bd->core, slot, now);
    close(bd->fds[slot]);
    bd->fds[slot] = -1;
}

/* A hello: park it for admission (checked after this loop turn, outside
 * the lock); the connection's later records wait in its socket until then.
 * A second hello, or an empty or too long name, closes the connection. */
static bool park_hello(struct broker_set *bs, struct broker_dev *bd, int slot,
                       const char *app)
{
    struct pending *p;

    if (bd->core.conns[slot].app >= 0 || app[0] == '\0' ||
        strlen(app) >= BROKER_APP_MAX)
        return false;
    if (bs->npend == bs->cpend) {
        bs->cpend = bs->cpend ? bs->cpend * 2 : 16;
        bs->pend = xrealloc(bs->pend, (size_t)bs->cpend * sizeof(*p));
    }
    p = &bs->pend[bs->npend++];
    *p = (struct pending){.bd = bd, .serial = bd->serial, .slot = slot,
                          .fd = bd->fds[slot], .peer = bd->peer[slot]};
    util_strlcpy(p->id, bd->id, sizeof(p->id));
    util_strlcpy(p->app, app, sizeof(p->app));
    util_strlcpy(bd->claim[slot], app, BROKER_APP_MAX);
    return true;
}

static void read_conn(struct broker_set *bs, struct broker_dev *bd, int slot)
{
    char msg[BROKER_MSG_MAX];
    for (;;) {
        if (bd->claim[slot][0] != '\0')
            return; /* awaiting admission: read on after it */
        ssize_t n = recv(bd->fds[slot], msg, sizeof(msg) - 1, MSG_DONTWAIT);
        uint64_t now = util_now_ns();
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            drop(bd, slot, now);
            return;
        }
        msg[n] = '\0';
        if (msg[0] == 'R') {
            if (msg[1] == ' ') /* "R <bytes>": its app's device memory */
                broker_core_bytes(&bd->core, slot,
                                  strtoull(msg + 2, NULL, 10));
            broker_core_request(&bd->core, slot, now);
        }
        else if (msg[0] == 'D')
            broker_core_done(&bd->core, slot, now);
        else if (strncmp(msg, "H 1 ", 4) == 0 &&
                 !park_hello(bs, bd, slot, msg + 4)) {
            drop(bd, slot, now);
            return;
        }
    }
}

/* Poll set: [0] the wake pipe, then per device its listener and conns. */
struct pollmap {
    struct pollfd pfd[1 + BROKER_MAX_DEVS * (1 + BROKER_MAX_CONNS)];
    struct broker_dev *dev[1 + BROKER_MAX_DEVS * (1 + BROKER_MAX_CONNS)];
    int slot[1 + BROKER_MAX_DEVS * (1 + BROKER_MAX_CONNS)]; /* -1 listener */
    nfds_t n;
};

static void pollmap_add(struct pollmap *pm, int fd, struct broker_dev *bd,
                        int slot)
{
    pm->pfd[pm->n] = (struct pollfd){.fd = fd, .events = POLLIN};
    pm->dev[pm->n] = bd;
    pm->slot[pm->n++] = slot;
}

/* Build the poll set and the timeout (ms) to the next quantum end. */
static int prepare(struct broker_set *bs, struct pollmap *pm)
{
    uint64_t now = util_now_ns(), next = 0;
    int timeout = BROKER_SYNC_MS;

    pm->n = 0;
    pollmap_add(pm, bs->wake[0], NULL, -1);
    for (int d = 0; d < bs->ndevs; d++) {
        struct broker_dev *bd = bs->devs[d];
        uint64_t due = broker_core_tick(&bd->core, now);
        if (due != 0 && (next == 0 || due < next))
            next = due;
        pollmap_add(pm, bd->lfd, bd, -1);
        for (int i = 0; i < BROKER_MAX_CONNS; i++)
            if (bd->fds[i] >= 0)
                pollmap_add(pm, bd->fds[i], bd, i);
    }
    if (next != 0) {
        uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 0;
        if (ms < (uint64_t)timeout)
            timeout = (int)ms;
    }
    return timeout;
}

static void dispatch(struct broker_set *bs, struct pollmap *pm)
{
    char buf[64];
    if (pm->pfd[0].revents)
        while (read(bs->wake[0], buf, sizeof(buf)) > 0)
            ;
    for (nfds_t i = 1; i < pm->n; i++) {
        struct broker_dev *bd = pm->dev[i];
        if (pm->pfd[i].revents == 0)
            continue;
        if (pm->slot[i] < 0)
            accept_all(bd);
        else if (bd->fds[pm->slot[i]] == pm->pfd[i].fd)
            read_conn(bs, bd, pm->slot[i]);
    }
}

/* The default admission: the broker's own user, or root. */
static bool admit_same_uid(const struct broker_peer *peer, char *why,
                           size_t cap)
{
    if (peer->uid == geteuid() || peer->uid == 0)
        return true;
    snprintf(why, cap, "uid %u is not the broker's (%u)", (unsigned)peer->uid,
             (unsigned)geteuid());
    return false;
}

/* Run the admission checks of the parked hellos (no lock held). */
static void admit_pending(struct broker_set *bs)
{
    for (int i = 0; i < bs->npend; i++) {
        struct pending *p = &bs->pend[i];
        p->why[0] = '\0';
        p->ok = bs->admit != NULL
                    ? bs->admit(bs->admit_ctx, p->id, p->app, &p->peer,
                                p->why, sizeof(p->why))
                    : admit_same_uid(&p->peer, p->why, sizeof(p->why));
        if (!p->ok && p->why[0] == '\0')
            util_strlcpy(p->why, "refused", sizeof(p->why));
    }
}

static bool dev_live(struct broker_set *bs, const struct broker_dev *bd,
                     uint64_t serial)
{
    for (int d = 0; d < bs->ndevs; d++)
        if (bs->devs[d] == bd && bd->serial == serial)
            return true;
    return false;
}

/* Send the refusal and close so that the client reads it: shut the socket
 * first (the client's later sends fail), then drain what it sent (closing
 * a UNIX socket with unread data makes the peer's next recv fail with
 * ECONNRESET before it sees the refusal). */
static void refuse(struct broker_dev *bd, int slot, const char *msg,
                   uint64_t now)
{
    char buf[BROKER_MSG_MAX];
    int fd = bd->fds[slot];

    dev_send(bd, slot, msg);
    shutdown(fd, SHUT_RDWR);
    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
    drop(bd, slot, now);
}

/* Apply the answers (lock held): admitted hellos join the core, refused
 * ones get "N <why>" and are closed. */
static void apply_pending(struct broker_set *bs)
{
    for (int i = 0; i < bs->npend; i++) {
        struct pending *p = &bs->pend[i];
        struct broker_dev *bd = p->bd;
        uint64_t now = util_now_ns();
        char msg[BROKER_MSG_MAX + BROKER_REASON_MAX];

        if (!dev_live(bs, bd, p->serial) || bd->fds[p->slot] != p->fd)
            continue; /* device stopped or connection gone meanwhile */
        bd->claim[p->slot][0] = '\0';
        if (p->ok &&
            broker_core_hello(&bd->core, p->slot, p->app, now) == ACCEL_OK) {
            card_send(bd, p->slot); /* only an admitted app gets it */
            continue;
        }
        if (p->ok) { /* admitted, but every app slot is taken */
            snprintf(msg, sizeof(msg), "N more than %d apps on this device",
                     BROKER_MAX_APPS);
        } else {
            log_warn("time-slice broker for %s: refused pid %d (uid %u) "
                     "claiming app %s: %s", bd->id, (int)p->peer.pid,
                     (unsigned)p->peer.uid, p->app, p->why);
            snprintf(msg, sizeof(msg), "N %s", p->why);
        }
        refuse(bd, p->slot, msg, now);
    }
    bs->npend = 0;
}

static void *broker_thread(void *arg)
{
    struct broker_set *bs = arg;
    struct pollmap *pm = xmalloc(sizeof(*pm));
    uint64_t last_sync = 0;

    while (!bs->stop) {
        int timeout;
        if (bs->sync && util_now_ns() - last_sync >= BROKER_SYNC_MS * 1000000ULL) {
            bs->sync(bs->sync_ctx, bs);
            last_sync = util_now_ns();
        }
        pthread_mutex_lock(&bs->mu);
        timeout = prepare(bs, pm);
        note_revocations(bs); /* the quantum ticks may revoke */
        pthread_mutex_unlock(&bs->mu);
        /* broker_set_retain may close a device while we poll: events of
         * devices no longer in the set are dropped below */
        if (poll(pm->pfd, pm->n, timeout) < 0 && errno != EINTR)
            break;
        pthread_mutex_lock(&bs->mu);
        /* devices may have gone while polling: only dispatch live ones */
        for (nfds_t i = 1; i < pm->n; i++) {
            bool live = false;
            for (int d = 0; d < bs->ndevs && !live; d++)
                live = bs->devs[d] == pm->dev[i];
            if (!live)
                pm->pfd[i].revents = 0;
        }
        dispatch(bs, pm);
        if (bs->npend > 0) {
            pthread_mutex_unlock(&bs->mu);
            admit_pending(bs);
            pthread_mutex_lock(&bs->mu);
            apply_pending(bs);
        }
        note_revocations(bs);
        pthread_mutex_unlock(&bs->mu);
    }
    free(pm);
    return NULL;
}

enum accel_err broker_set_start(struct broker_set *bs)
{
    if (bs->wake[0] < 0 ||
        pthread_create(&bs->thread, NULL, broker_thread, bs) != 0)
        return ACCEL_ESYS;
    bs->running = true;
    return ACCEL_OK;
}

void broker_set_free(struct broker_set *bs)
{
    if (bs == NULL)
        return;
    if (bs->running) {
        bs->stop = 1;
        wake(bs);
        pthread_join(bs->thread, NULL);
    }
    for (int i = 0; i < bs->ndevs; i++)
        dev_close(bs->devs[i]);
    if (bs->wake[0] >= 0) {
        close(bs->wake[0]);
        close(bs->wake[1]);
    }
    pthread_mutex_destroy(&bs->mu);
    free(bs->pend);
    free(bs);
}
