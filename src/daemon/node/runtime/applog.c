/* SPDX-License-Identifier: MIT */
/*
 * applog.c: one thread reads every app's output FIFO and appends it to the
 * app's log, rotating by rename at the cap (see applog.h). The registry's
 * entries are freed only by that thread; other threads add entries and
 * mark them closing under the lock, and wake the thread through a pipe.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/applog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"

#define CHUNK 65536              /* one read and one write */
#define READS_PER_TURN 4         /* chunks per app per poll: fair turns */
#define DRAIN_MAX (16u << 20)    /* bytes read from a closing FIFO */
#define PIPE_SIZE (1 << 20)      /* what an app may write ahead of us */
#define POLL_MS 200
#define CAP_MIN ((uint64_t)CHUNK)

struct entry {
    char *app;
    int rfd;                     /* acceld's read end; -1 once at EOF */
    int logfd;                   /* the log, -1 until the next write */
    uint64_t size;               /* of the log behind logfd */
    uint64_t dropped;            /* bytes no write could take */
    bool closing;                /* the app is gone: drain, then free */
    bool remove;                 /* ...then remove its logs (uninstalled) */
    struct entry *next;
};

struct applog {
    char *dir;
    uint64_t cap;
    pthread_mutex_t lock;        /* guards list and every closing flag */
    struct entry *list;
    int wake[2];                 /* a byte wakes the thread */
    _Atomic int stop;
    pthread_t thread;
};

static char *path_of(const struct applog *l, const char *app,
                     const char *suffix)
{
    return xasprintf("%s/%s%s", l->dir, app, suffix);
}

static void wake(struct applog *l)
{
    ssize_t w;

    do {
        w = write(l->wake[1], "w", 1);
    } while (w < 0 && errno == EINTR);
}

/* <app>.log -> .1 -> .2 ... (the oldest is dropped). */
static void rotate(const struct applog *l, const char *app)
{
    char *from, *to = NULL;

    for (int k = APPLOG_KEEP; k >= 1; k--) {
        char sfx[32];
        snprintf(sfx, sizeof sfx, ".log.%d", k);
        free(to);
        to = path_of(l, app, sfx);
        if (k > 1)
            snprintf(sfx, sizeof sfx, ".log.%d", k - 1);
        else
            snprintf(sfx, sizeof sfx, ".log");
        from = path_of(l, app, sfx);
        if (rename(from, to) < 0 && errno != ENOENT)
            log_warn("cannot rotate %s: %s", from, strerror(errno));
        free(from);
    }
    free(to);
}

static int open_log(const struct applog *l, struct entry *e)
{
    char *p = path_of(l, e->app, ".log");
    struct stat sb;

    e->logfd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
                            O_NOFOLLOW, 0640);
    e->size = e->logfd >= 0 && fstat(e->logfd, &sb) == 0
                  ? (uint64_t)sb.st_size : 0;
    free(p);
    return e->logfd;
}

/* Append n (<= CHUNK) bytes, rotating first when they would pass the cap. */
static void put(struct applog *l, struct entry *e, const char *buf, size_t n)
{
    if (e->logfd < 0)
        open_log(l, e);
    if (e->logfd >= 0 && e->size > 0 && e->size + n > l->cap) {
        close(e->logfd);
        e->logfd = -1;
        rotate(l, e->app);
        open_log(l, e);
    }
    for (size_t off = 0; off < n;) {
        ssize_t w = e->logfd >= 0 ? write(e->logfd, buf + off, n - off) : -1;
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) { /* a full disk: drop, never wait */
            if (e->dropped == 0)
                log_warn("log of %s: cannot write (%s): output dropped",
                         e->app, strerror(errno));
            e->dropped += n - off;
            return;
        }
        off += (size_t)w;
        e->size += (uint64_t)w;
    }
}

/* Read up to max bytes of e's FIFO into its log; false at EOF. */
static bool pump(struct applog *l, struct entry *e, char *buf, size_t max)
{
    size_t done = 0;

    while (done < max) {
        ssize_t n = read(e->rfd, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return true; /* EAGAIN: nothing more now */
        if (n == 0)
            return false;
        put(l, e, buf, (size_t)n);
        done += (size_t)n;
    }
    return true;
}

/* Remove app's log and its rotated ones. */
static void remove_logs(const struct applog *l, const char *app)
{
    for (int k = 0; k <= APPLOG_KEEP; k++) {
        char sfx[32];
        char *p;
        if (k == 0)
            snprintf(sfx, sizeof sfx, ".log");
        else
            snprintf(sfx, sizeof sfx, ".log.%d", k);
        p = path_of(l, app, sfx);
        if (unlink(p) < 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", p, strerror(errno));
        free(p);
    }
}

static void entry_free(struct entry *e)
{
    if (e->rfd >= 0)
        close(e->rfd);
    if (e->logfd >= 0)
        close(e->logfd);
    free(e->app);
    free(e);
}

/* Drain and free the closing entries (thread only). */
static void reap_closing(struct applog *l, char *buf)
{
    struct entry *done = NULL, **pp;

    pthread_mutex_lock(&l->lock);
    for (pp = &l->list; *pp != NULL;) {
        struct entry *e = *pp;
        if (!e->closing) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        e->next = done;
        done = e;
    }
    pthread_mutex_unlock(&l->lock);
    while (done != NULL) {
        struct entry *e = done;
        done = e->next;
        if (e->rfd >= 0)
            pump(l, e, buf, DRAIN_MAX);
        if (e->logfd >= 0) {
            close(e->logfd);
            e->logfd = -1;
        }
        if (e->remove)
            remove_logs(l, e->app);
        entry_free(e);
    }
}

static void *run(void *arg)
{
    struct applog *l = arg;
    char *buf = xmalloc(CHUNK);
    struct pollfd *fds = NULL;
    struct entry **who = NULL;
    size_t cap = 0;

    while (!l->stop) {
        size_t n = 1;
        char c[64];

        reap_closing(l, buf);
        pthread_mutex_lock(&l->lock);
        for (struct entry *e = l->list; e != NULL; e = e->next) {
            if (e->rfd < 0)
                continue;
            if (n + 1 > cap) {
                cap = cap ? cap * 2 : 16;
                fds = xrealloc(fds, cap * sizeof(*fds));
                who = xrealloc(who, cap * sizeof(*who));
            }
            fds[n] = (struct pollfd){.fd = e->rfd, .events = POLLIN};
            who[n++] = e; /* only this thread frees entries */
        }
        pthread_mutex_unlock(&l->lock);
        if (cap == 0) {
            cap = 16;
            fds = xcalloc(cap, sizeof(*fds));
            who = xcalloc(cap, sizeof(*who));
        }
        fds[0] = (struct pollfd){.fd = l->wake[0], .events = POLLIN};
        if (poll(fds, n, POLL_MS) < 0 && errno != EINTR)
            break;
        if (fds[0].revents & POLLIN)
            while (read(l->wake[0], c, sizeof c) > 0)
                ;
        for (size_t i = 1; i < n; i++) {
            if (fds[i].revents == 0)
                continue;
            if (!pump(l, who[i], buf, READS_PER_TURN * CHUNK)) {
                close(who[i]->rfd); /* every writer is gone */
                who[i]->rfd = -1;
            }
        }
    }
    free(fds);
    free(who);
    free(buf);
    return NULL;
}

enum accel_err applog_start(const char *logdir, uint64_t cap,
                            struct applog **out)
{
    struct applog *l = xcalloc(1, sizeof(*l));

    l->dir = xstrdup(logdir);
    l->cap = cap == 0 ? APPLOG_CAP_DEFAULT : cap < CAP_MIN ? CAP_MIN : cap;
    pthread_mutex_init(&l->lock, NULL);
    if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0)
        goto fail;
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        close(l->wake[0]);
        close(l->wake[1]);
        goto fail;
    }
    *out = l;
    return ACCEL_OK;
fail:
    pthread_mutex_destroy(&l->lock);
    free(l->dir);
    free(l);
    return ACCEL_ESYS;
}

void applog_stop(struct applog *l)
{
    char *buf;

    if (l == NULL)
        return;
    l->stop = 1;
    wake(l);
    pthread_join(l->thread, NULL);
    buf = xmalloc(CHUNK);
    while (l->list != NULL) { /* a last read; the FIFOs stay */
        struct entry *e = l->list;
        l->list = e->next;
        if (e->rfd >= 0)
            pump(l, e, buf, e->closing ? DRAIN_MAX : PIPE_SIZE);
        entry_free(e);
    }
    free(buf);
    close(l->wake[0]);
    close(l->wake[1]);
    pthread_mutex_destroy(&l->lock);
    free(l->dir);
    free(l);
}

/* Mark app's entries closing (lock held). */
static void mark_closing(struct applog *l, const char *app)
{
    for (struct entry *e = l->list; e != NULL; e = e->next)
        if (strcmp(e->app, app) == 0)
            e->closing = true;
}

static void add(struct applog *l, const char *app, int rfd)
{
    struct entry *e = xcalloc(1, sizeof(*e));

    e->app = xstrdup(app);
    e->rfd = rfd;
    e->logfd = -1;
    pthread_mutex_lock(&l->lock);
    mark_closing(l, app); /* a previous run's, not yet drained */
    e->next = l->list;
    l->list = e;
    pthread_mutex_unlock(&l->lock);
    wake(l);
}

enum accel_err applog_open(struct applog *l, const char *app, int *out_fd,
                           char **cause)
{
    char *fifo = path_of(l, app, ".pipe");
    int rfd = -1, wfd = -1, err;

    if (unlink(fifo) < 0 && errno != ENOENT)
        goto fail;
    if (mkfifo(fifo, 0600) < 0)
        goto fail;
    rfd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (rfd < 0)
        goto fail;
    wfd = open(fifo, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (wfd < 0)
        goto fail;
    (void)fcntl(rfd, F_SETPIPE_SZ, PIPE_SIZE); /* the default 64 KiB else */
    add(l, app, rfd);
    free(fifo);
    *out_fd = wfd;
    return ACCEL_OK;
fail:
    err = errno;
    if (rfd >= 0)
        close(rfd);
    if (err != ENOTDIR && err != ENOENT)
        unlink(fifo);
    free(fifo);
    fifo = path_of(l, app, ".log");
    *cause = xasprintf("cannot open log file '%s' for '%s': %s", fifo, app,
                       strerror(err));
    free(fifo);
    return ACCEL_EIO;
}

bool applog_adopt(struct applog *l, const char *app)
{
    char *fifo;
    struct stat sb;
    int rfd;

    pthread_mutex_lock(&l->lock);
    for (struct entry *e = l->list; e != NULL; e = e->next)
        if (!e->closing && strcmp(e->app, app) == 0) {
            pthread_mutex_unlock(&l->lock);
            return true;
        }
    pthread_mutex_unlock(&l->lock);
    fifo = path_of(l, app, ".pipe");
    rfd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    free(fifo);
    if (rfd < 0)
        return false;
    if (fstat(rfd, &sb) < 0 || !S_ISFIFO(sb.st_mode)) {
        close(rfd);
        return false;
    }
    add(l, app, rfd);
    return true;
}

void applog_close(struct applog *l, const char *app)
{
    char *fifo = path_of(l, app, ".pipe");

    pthread_mutex_lock(&l->lock);
    mark_closing(l, app);
    unlink(fifo); /* the registered read end still drains it */
    pthread_mutex_unlock(&l->lock);
    free(fifo);
    wake(l);
}

void applog_remove(struct applog *l, const char *app)
{
    char *fifo = path_of(l, app, ".pipe");
    bool pending = false;

    pthread_mutex_lock(&l->lock);
    for (struct entry *e = l->list; e != NULL; e = e->next)
        if (strcmp(e->app, app) == 0) {
            e->closing = e->remove = true; /* removed once drained */
            pending = true;
        }
    if (!pending)
        remove_logs(l, app);
    unlink(fifo);
    pthread_mutex_unlock(&l->lock);
    free(fifo);
    wake(l);
}

void applog_remove_dir(const char *logdir, const char *app)
{
    struct applog l = {.dir = (char *)logdir};
    char *fifo = path_of(&l, app, ".pipe");

    remove_logs(&l, app);
    unlink(fifo);
    free(fifo);
}

/* One log file of an owner's, for applog_bound. */
struct logfile {
    char *path;
    uint64_t size;
    int64_t mtime_ns;
    int gen;                     /* 0: the current log, k: .log.k */
};

/* Oldest rotated first; then the current ones, largest first. */
static int logfile_cmp(const void *pa, const void *pb)
{
    const struct logfile *a = pa, *b = pb;

    if ((a->gen == 0) != (b->gen == 0))
        return a->gen == 0 ? 1 : -1;
    if (a->gen == 0)
        return a->size < b->size ? 1 : a->size > b->size ? -1 : 0;
    return a->mtime_ns < b->mtime_ns ? -1 : a->mtime_ns > b->mtime_ns;
}

uint64_t applog_bound(const char *logdir, const char *const *apps, size_t n,
                      uint64_t max)
{
    struct applog l = {.dir = (char *)logdir};
    struct logfile *f = xcalloc(n * (APPLOG_KEEP + 1) + 1, sizeof(*f));
    size_t nf = 0;
    uint64_t total = 0;

    for (size_t i = 0; i < n; i++)
        for (int k = 0; k <= APPLOG_KEEP; k++) {
            char sfx[32];
            struct stat sb;
            if (k == 0)
                snprintf(sfx, sizeof sfx, ".log");
            else
                snprintf(sfx, sizeof sfx, ".log.%d", k);
            f[nf].path = path_of(&l, apps[i], sfx);
            if (lstat(f[nf].path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
                free(f[nf].path);
                continue;
            }
            f[nf].size = (uint64_t)sb.st_size;
            f[nf].mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 +
                             sb.st_mtim.tv_nsec;
            f[nf].gen = k;
            total += f[nf++].size;
        }
    if (max > 0 && total > max)
        qsort(f, nf, sizeof(*f), logfile_cmp);
    for (size_t i = 0; i < nf; i++) {
        if (max > 0 && total > max && f[i].size > 0 &&
            (f[i].gen > 0 ? unlink(f[i].path) : truncate(f[i].path, 0)) == 0)
            total -= f[i].size;
        free(f[i].path);
    }
    free(f);
    return total;
}
