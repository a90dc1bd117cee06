/* SPDX-License-Identifier: MIT */
/*
 * reclaim.c: elastic memory, acceld's side (reclaim.h; SPEC 4.4,
 * docs/elastic.md). One thread accepts on the reclaim socket; each ask is
 * answered on a thread of its own (it may wait for seconds while an app
 * unloads a model), and each giver's call for it on another (call_thread:
 * one that hangs holds up the next giver for the hedge delay only, at
 * most HEDGE_PER_ASK of an ask's and CALLS_MAX in all in flight, each
 * ending by its ask's deadline), all counted so that reclaim_stop waits
 * for them. Lock
 * order: d->lock, then r->mu; nothing here takes d->lock while holding
 * r->mu, and no action is called with either held.
 */
#include "common/accel_setup.h"
#include "daemon/node/enforce/reclaim.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/devices/discovery.h"
#include "daemon/node/devices/nvml.h"
#include "daemon/node/enforce/lentbook.h"
#include "daemon/node/ledger.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/runtime/appsetup.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/node/slice/broker.h"
#include "daemon/node/slice/broker_ops.h"
#include "daemon/rules/manifest.h"
#include "daemon/store/store.h"

#define ASK_LINE_MAX 400     /* "reclaim <app> <device> <bytes>\n" */
#define ASK_READ_MS 2000     /* the asker sends its line at once */
#define POLL_MS 5            /* how often the card's free memory is read */
#define DRM_CARDS 16         /* DRM devices whose card is remembered */
#define HTTP_BODY_MAX (1 << 20)
#define MAX_GIVERS 64
#define MAX_SLEEPERS 16
#define WAKE_CHECK_MS 250    /* how often a sleeping vLLM's room is looked at */
#define ASKS_MAX 128         /* asks in flight, all askers together */
#define ASKS_PER_UID 16      /* asks in flight from one uid */
#define ASK_UIDS 64          /* uids with asks in flight */
#define GIVING_MAX 64        /* give-backs in flight (one per app, device) */
#define PROMISE_MS 1000      /* how long a giver's 2xx counts as memory to
                              * come (at most a quarter of the wait) */
#define VERDICT_MS 2000      /* how long after an ask a giver that freed
                              * nothing by then still may (a slow unload) */
#define MAX_VERDICTS 64      /* givers watched after an ask */
#define MAX_UNHELPFUL 64     /* givers asked after the others */
#define HEDGE_MS 250         /* a call that has not answered (nor started to
                              * free) within this, or a 16th of the wait
                              * when less, no longer holds up the next
                              * giver: the next is called beside it */
#define HEDGE_PER_ASK 16     /* calls in flight for one ask */
#define CALLS_MAX 64         /* calls in flight, all asks together */
#define LOOK_MS 50           /* how often an unanswered giver's memory is
                              * read (has it started to come back?) */

/* A vLLM put to sleep for another app: woken (POST /wake_up) once the card
 * has what it gave free again (SPEC 4.4, "taking it back"; Ollama and
 * llama-server reload at their next request by themselves). */
/* An app on a device: what the sleepers and the give-backs in flight are
 * kept by (appdev_find, appdev_remove). */
struct appdev {
    char app[ACCEL_ID_MAX + 1];        /* app name */
    char dev[ACCEL_ID_MAX + 1];        /* device id */
};

struct sleeper {
    struct appdev at;                  /* first: appdev_find's key */
    uint64_t bytes;                    /* what it gave */
    bool waking;                       /* a wake_thread is under way */
};

/* A giver called that had freed nothing when its ask ended: watched for
 * a while (a slow unload may still land), then, if it still holds what
 * it held, asked after the others from then on (unhelpful): a few idle
 * apps whose actions hang or lie would otherwise be asked first at every
 * ask and take the whole wait. */
struct verdict {
    struct appdev at;                  /* first: appdev_find's key */
    char ledger[512];
    int64_t pid;
    uint64_t quota, before;            /* holds_now's figure at the call */
    int64_t until;                     /* mono ms the watch ends */
};

struct reclaim {
    struct accel_daemon *d;
    char path[108];
    int lfd;
    int stop_pipe[2];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    pthread_cond_t answered;           /* a call_thread's call ended
                                        * (CLOCK_MONOTONIC) */
    int workers;                       /* asks and give-backs in flight */
    bool stopping;
    struct nvml *nv;                   /* the card's free memory */
    char *nvml_cause;                  /* why there is no NVML */
    /* the DRM devices' cards ("card0"), found by a scan of the sysfs once
     * and then read alone at every poll (drm_card_memory) */
    struct { char dev[ACCEL_ID_MAX + 1]; char card[16]; } cards[DRM_CARDS];
    size_t ncards;
    struct lentbook book;              /* what each app lent and got */
    uint64_t asks, granted, refused, bytes_reclaimed, calls, wakes;
    double seconds_sum;
    struct sleeper sleepers[MAX_SLEEPERS];
    size_t nsleep;
    /* the asks in flight, by the asker's uid: the socket is open to every
     * local user, and each ask holds a thread for up to the read time,
     * then the device's wait: one uid may not hold more than its share */
    unsigned asks_in_flight;
    struct { uid_t uid; unsigned n; } ask_uid[ASK_UIDS];
    size_t nask_uid;
    /* the give-backs in flight (a quota cut's): one per app and device,
     * so that cut after cut while the action hangs costs one thread */
    struct appdev giving[GIVING_MAX];
    size_t ngiving;
    /* the givers that freed nothing when asked (struct verdict) */
    struct verdict verdicts[MAX_VERDICTS];
    size_t nverdict;
    struct appdev unhelpful[MAX_UNHELPFUL];
    size_t nunhelpful;
    unsigned calls_in_flight;          /* call_threads running */
};

/* A candidate to give memory back, copied out of the state under d->lock. */
struct giver {
    char name[ACCEL_ID_MAX + 1];
    char ledger[512];
    int64_t pid;
    uint64_t pid_start;
    struct manifest_reclaim act;       /* path and body owned */
    char **ports;                      /* container: published, or NULL */
    bool container;
    uint64_t quota;                    /* its quota on the device */
    uint64_t held, held_after;
    bool by_driver;                    /* held is the driver's count */
    int64_t active_ms;                 /* mono ms the device last showed it
                                        * busy (busy_of) */
    int64_t promised_until;            /* mono ms its 2xx counts until */
    int64_t called_at, next_look;      /* mono ms: its call began; its
                                        * memory is next read */
    bool called, stopped;
    bool unhelpful;                    /* freed nothing when last asked */
    bool answered;                     /* its call has ended */
    bool coming;                       /* unanswered, but its memory has
                                        * started to come back */
};

/*
 * One giver's call for an ask, on a thread of its own (call_thread), so
 * that a call that hangs does not hold up the next giver (hedging). The
 * thread works on its own copy of the giver; what it reports (done,
 * status, answered_at) and refs are under r->mu. Two references, the
 * ask's and the thread's: the last to let go frees it, so an answer that
 * comes after its ask ended (abandoned) touches only this, never the
 * ask's memory.
 */
struct call {
    struct reclaim *r;
    struct giver g;                    /* the thread's copy */
    long timeout_ms;                   /* ends by the ask's deadline */
    char asker[ACCEL_ID_MAX + 1], dev[ACCEL_ID_MAX + 1], want[32];
    int refs;
    bool done, abandoned;
    long status;
    int64_t answered_at;
};

/* ---- small helpers ---- */

static int64_t mono_ms(void)
{
    return (int64_t)(util_now_ns() / 1000000u);
}

static void fmt_gib(uint64_t b, char *out, size_t cap)
{
    snprintf(out, cap, "%.1f GiB", (double)b / (double)(1ULL << 30));
}

/* giver gave back bytes for asker: recorded, and the totals after it
 * returned for the event that persists them (caller frees). */
static json_t *note_lent(struct reclaim *r, const char *giver,
                         const char *to, bool to_is_app, uint64_t bytes)
{
    json_t *totals = NULL;

    pthread_mutex_lock(&r->mu);
    lentbook_note(&r->book, giver, to, to_is_app, bytes, util_wall_ms(),
                  &totals);
    r->bytes_reclaimed += bytes;
    pthread_mutex_unlock(&r->mu);
    return totals;
}

static bool is_stopping(struct reclaim *r)
{
    bool s;
    pthread_mutex_lock(&r->mu);
    s = r->stopping;
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* The index of {app, dev} in the n entries of size bytes at base (each
 * starting with its struct appdev), or n. */
static size_t appdev_find(const void *base, size_t size, size_t n,
                          const char *app, const char *dev)
{
    for (size_t i = 0; i < n; i++) {
        const struct appdev *k =
            (const struct appdev *)((const char *)base + i * size);
        if (strcmp(k->app, app) == 0 && strcmp(k->dev, dev) == 0)
            return i;
    }
    return n;
}

/* Remove {app, dev} from those entries (the last takes its place);
 * *n is one less when it was there. */
static void appdev_remove(void *base, size_t size, size_t *n, const char *app,
                          const char *dev)
{
    size_t i = appdev_find(base, size, *n, app, dev);

    if (i == *n)
        return;
    (*n)--;
    if (i != *n)
        memcpy((char *)base + i * size, (char *)base + *n * size, size);
}

static void appdev_set(struct appdev *k, const char *app, const char *dev)
{
    util_strlcpy(k->app, app, sizeof k->app);
    util_strlcpy(k->dev, dev, sizeof k->dev);
}

static void note_sleeper(struct reclaim *r, const char *app, const char *dev,
                         uint64_t bytes)
{
    size_t i;

    pthread_mutex_lock(&r->mu);
    i = appdev_find(r->sleepers, sizeof r->sleepers[0], r->nsleep, app, dev);
    if (i < r->nsleep) {
        r->sleepers[i].bytes += bytes;
    } else if (r->nsleep < MAX_SLEEPERS) {
        struct sleeper *z = &r->sleepers[r->nsleep++];
        memset(z, 0, sizeof(*z));
        appdev_set(&z->at, app, dev);
        z->bytes = bytes;
    }
    pthread_mutex_unlock(&r->mu);
}

static void forget_sleeper(struct reclaim *r, const char *app,
                           const char *dev)
{
    pthread_mutex_lock(&r->mu);
    appdev_remove(r->sleepers, sizeof r->sleepers[0], &r->nsleep, app, dev);
    pthread_mutex_unlock(&r->mu);
}

/* Whether device uuid is a DRM device (AMD, Intel) of the state. */
static bool is_drm(struct accel_daemon *d, const char *uuid)
{
    int dev;
    bool drm;

    pthread_mutex_lock(&d->lock);
    dev = state_dev_find(d, uuid);
    drm = dev >= 0 && d->dinfo[dev].drm;
    pthread_mutex_unlock(&d->lock);
    return drm;
}

/* What a DRM device offers and holds now, as the outside meter reads it
 * (the amdgpu sysfs mem_info_vram_total / mem_info_vram_used, else its
 * clients' fdinfo): its card remembered, found again by a scan when the
 * card read is no longer a device of ours. */
static bool drm_memory(struct reclaim *r, const char *uuid, uint64_t *total,
                       uint64_t *used, const char **cause)
{
    char card[16] = "";
    size_t i;
    enum accel_err rc = ACCEL_ENOTFOUND;

    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->ncards; i++)
        if (strcmp(r->cards[i].dev, uuid) == 0)
            util_strlcpy(card, r->cards[i].card, sizeof card);
    pthread_mutex_unlock(&r->mu);
    if (card[0] != '\0')
        rc = discovery_drm_memory(r->d, card, total, used);
    if (rc == ACCEL_ENOTFOUND) {
        if (!discovery_drm_card(r->d, uuid, card, sizeof card)) {
            *cause = "no card of the DRM sysfs is that device";
            return false;
        }
        pthread_mutex_lock(&r->mu);
        for (i = 0; i < r->ncards && strcmp(r->cards[i].dev, uuid) != 0; i++)
            ;
        if (i == r->ncards && r->ncards < DRM_CARDS)
            r->ncards++;
        if (i < r->ncards) {
            util_strlcpy(r->cards[i].dev, uuid, sizeof r->cards[i].dev);
            util_strlcpy(r->cards[i].card, card, sizeof r->cards[i].card);
        }
        pthread_mutex_unlock(&r->mu);
        rc = discovery_drm_memory(r->d, card, total, used);
    }
    if (rc != ACCEL_OK) /* the use always reads (fdinfo, else 0 clients) */
        *cause = "the card's size cannot be read from the DRM sysfs "
                 "(mem_info_vram_total)";
    return rc == ACCEL_OK;
}

/* The card's free memory as the driver counts it (NVML; the DRM sysfs,
 * else fdinfo, for a DRM device: AMD's); false when unknown, with *cause
 * (may be NULL) saying why. */
static bool card_free(struct reclaim *r, const char *uuid, uint64_t *free_b,
                      const char **cause)
{
    uint64_t total = 0, used = 0;
    const char *why = NULL;
    bool ok;

    if (is_drm(r->d, uuid))
        ok = drm_memory(r, uuid, &total, &used, &why);
    else if (!(ok = r->nv != NULL && nvml_memory_now(r->nv, uuid, &total,
                                                     &used, NULL) == ACCEL_OK))
        why = r->nvml_cause ? r->nvml_cause : "NVML";
    if (cause != NULL)
        *cause = why;
    if (!ok)
        return false;
    *free_b = total > used ? total - used : 0;
    return true;
}

/* ---- who owns a port ---- */

/*
 * The inodes of the sockets listening at `port` that a connection to
 * 127.0.0.1:port may reach (/proc/net/tcp and tcp6): IPv4 on 127.0.0.1 or
 * any, IPv6 on any (dual stack) or on ::ffff:127.0.0.1 / ::ffff:0.0.0.0.
 * Not ::1 nor another 127/8 address: those are never reached by the call,
 * so holding one proves nothing (another app may hold 127.0.0.1:port).
 * How many, at most max; *more when there were more than max.
 */
static size_t listeners(unsigned port, unsigned long *ino, size_t max,
                        bool *more)
{
    static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    static const char *const reach[] = {
        "0100007F", "00000000", "00000000000000000000000000000000",
        "0000000000000000FFFF00000100007F",
        "0000000000000000FFFF000000000000"};
    size_t n = 0;

    *more = false;
    for (size_t f = 0; f < 2; f++) {
        FILE *fp = fopen(files[f], "re");
        char line[512];
        if (fp == NULL)
            continue;
        while (fgets(line, sizeof line, fp) != NULL) {
            char local[80];
            unsigned lport = 0, st = 0;
            unsigned long inode = 0;
            char *colon;
            bool hit = false;
            if (sscanf(line, " %*d: %79s %*s %x %*s %*s %*s %*u %*u %lu",
                       local, &st, &inode) != 3)
                continue;
            colon = strrchr(local, ':');
            if (colon == NULL || st != 0x0A /* LISTEN */)
                continue;
            lport = (unsigned)strtoul(colon + 1, NULL, 16);
            *colon = '\0';
            if (lport != port)
                continue;
            for (size_t k = 0; k < sizeof reach / sizeof reach[0]; k++)
                hit = hit || strcmp(local, reach[k]) == 0;
            if (!hit)
                continue;
            if (n == max)
                *more = true;
            else
                ino[n++] = inode;
        }
        fclose(fp);
    }
    return n;
}

/* Mark in held[] the socket inodes of ino[] that process pid holds. */
static void holds_socket(pid_t pid, const unsigned long *ino, size_t n,
                         bool *held)
{
    char dir[64], link[340], target[64];
    struct dirent *e;
    DIR *dp;

    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    dp = opendir(dir);
    if (dp == NULL)
        return;
    while ((e = readdir(dp)) != NULL) {
        ssize_t len;
        unsigned long v;
        if (e->d_name[0] == '.')
            continue;
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        len = readlink(link, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (sscanf(target, "socket:[%lu]", &v) != 1)
            continue;
        for (size_t i = 0; i < n; i++)
            if (ino[i] == v)
                held[i] = true;
    }
    closedir(dp);
}

static bool all_held(const bool *held, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!held[i])
            return false;
    return true;
}

/* The process group of pid (field 5 of its stat), 0 when gone. */
static pid_t pgrp_of(pid_t pid)
{
    char path[64], buf[1024];
    const char *p;
    int fd, g = 0;
    ssize_t n;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 1, " %*c %*d %d", &g) != 1)
        return 0;
    return (pid_t)g;
}

/* The processes of app `name` (its cgroup, else the process group of its
 * leader `leader`) into *out (caller frees; NULL when none): how many. */
static size_t app_pids(struct reclaim *r, const char *name, pid_t leader,
                       pid_t **out)
{
    pid_t *pids = NULL;
    ssize_t np = -1;
    size_t n = 0, cap = 0;
    DIR *dp;
    struct dirent *e;

    if (r->d->cg != NULL)
        np = cgroup_app_procs(r->d->cg, name, &pids);
    if (np > 0) {
        *out = pids;
        return (size_t)np;
    }
    free(pids);
    pids = NULL;
    dp = leader > 0 ? opendir("/proc") : NULL;
    while (dp != NULL && (e = readdir(dp)) != NULL) {
        pid_t p = (pid_t)strtol(e->d_name, NULL, 10);
        if (p <= 0 || pgrp_of(p) != leader)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            pids = xrealloc(pids, cap * sizeof(*pids));
        }
        pids[n++] = p;
    }
    if (dp != NULL)
        closedir(dp);
    *out = pids;
    return n;
}

/*
 * Is 127.0.0.1:port listened on by a process of g (its cgroup, else its
 * leader's process group)? What keeps a member's action to its own app:
 * a port another app (or anything else) listens on is never called.
 */
static bool port_is_own(struct reclaim *r, const struct giver *g,
                        unsigned port)
{
    unsigned long ino[16];
    bool held[16] = {false}, more;
    size_t n = listeners(port, ino, 16, &more), np;
    pid_t *pids = NULL;

    /* every listener the call may reach must be the app's: one of them
     * someone else's (an IPv4 one beside the app's, a SO_REUSEPORT group)
     * and the call may land there */
    if (n == 0 || more)
        return false;
    if (g->container) /* podman's port forwarder holds the listener: the
                       * port must be one the container publishes */
        for (size_t i = 0; g->ports != NULL && g->ports[i] != NULL; i++)
            if (manifest_port_reached(g->ports[i], port))
                return true;
    np = app_pids(r, g->name, (pid_t)g->pid, &pids);
    for (size_t i = 0; i < np && !all_held(held, n); i++)
        holds_socket(pids[i], ino, n, held);
    free(pids);
    return all_held(held, n);
}

/*
 * What the processes of app `name` hold on NVIDIA device uuid as the
 * driver counts it now (NVML's process list): the part of its quota an
 * ask can never have. The ledger cannot say it: the app can write it,
 * and the shim reserves an allocation there before it asks. 0 when
 * unknown (no NVML, a DRM device: docs/elastic.md says so).
 */
static uint64_t driver_held(struct reclaim *r, const char *name, pid_t leader,
                            const char *uuid)
{
    struct nvml_proc *v = NULL;
    size_t nv = 0, np;
    pid_t *pids = NULL;
    uint64_t sum = 0;

    if (r->nv == NULL || is_drm(r->d, uuid) ||
        nvml_processes(r->nv, uuid, &v, &nv, NULL) != ACCEL_OK || nv == 0) {
        free(v);
        return 0;
    }
    np = app_pids(r, name, leader, &pids);
    for (size_t i = 0; i < nv; i++)
        for (size_t k = 0; k < np; k++)
            if (v[i].pid == pids[k]) {
                sum += v[i].used_memory;
                break;
            }
    free(pids);
    free(v);
    return sum;
}

/* What giver g holds on uuid now: what its processes hold as the driver
 * counts it, where NVML shows any (the app cannot write that), else what
 * its ledger says, up to its quota (the ledger is the app's to write: a
 * giver that zeroes it must still be asked, and named as a holder).
 * *driver (may be NULL): whether it is the driver's count. */
static uint64_t holds_now(struct reclaim *r, const char *name, pid_t leader,
                          const char *ledger, uint64_t quota,
                          const char *uuid, bool *driver)
{
    struct ledger_usage u;
    uint64_t drv = driver_held(r, name, leader, uuid), led = 0;

    if (ledger_read(ledger, &u) == ACCEL_OK)
        led = u.used < quota ? u.used : quota;
    if (driver != NULL)
        *driver = drv > 0;
    return drv > 0 ? drv : led;
}

/* ---- calling an action ---- */

struct body {
    char *buf;
    size_t len;
};

static size_t on_data(char *p, size_t sz, size_t nm, void *ctx)
{
    struct body *b = ctx;
    size_t n = sz * nm;

    if (b->len + n > HTTP_BODY_MAX)
        return 0;
    b->buf = xrealloc(b->buf, b->len + n + 1);
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return n;
}

/* One request to 127.0.0.1:port; the answer's body into *out (may be
 * NULL). The HTTP status, or 0 when there was none in time. */
/* curl's progress callback: a call is cut short when acceld stops (an
 * app's route that hangs must not hold acceld's stop for its timeout). */
static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn,
                       curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    return is_stopping(ctx) ? 1 : 0;
}

static long http_call(struct reclaim *r, unsigned port, const char *method,
                      const char *path, const char *body, long timeout_ms,
                      char **out)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    struct body b = {NULL, 0};
    char url[1200];
    long status = 0;

    if (c == NULL)
        return 0;
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 1 ? timeout_ms : 1);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
    if (body != NULL) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    }
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out != NULL)
        *out = b.buf;
    else
        free(b.buf);
    return status;
}

/* Ollama: every model /api/ps lists, unloaded (keep_alive 0).
 * llama-server (router mode): every loaded model of /models, unloaded. */
static long unload_each(struct reclaim *r, const struct manifest_reclaim *a,
                        long timeout_ms)
{
    /* every call shares timeout_ms: the list is the app's to write, and
     * one timeout per model would hold the asker past its wait */
    int64_t end = mono_ms() + timeout_ms;
    bool ollama = a->preset == MANIFEST_PRESET_OLLAMA;
    char *text = NULL;
    long st = http_call(r, a->port, "GET", ollama ? "/api/ps" : "/models",
                        NULL, timeout_ms, &text);
    json_t *j = text ? json_loads(text, 0, NULL) : NULL, *list, *m;
    size_t i;

    free(text);
    list = json_object_get(j, ollama ? "models" : "data");
    json_array_foreach(list, i, m) {
        const char *name = json_string_value(
            json_object_get(m, ollama ? "model" : "id"));
        const char *state = json_string_value(json_object_get(
            json_object_get(m, "status"), "value"));
        json_t *q;
        char *req;
        long left = (long)(end - mono_ms());
        if (left <= 0)
            break;
        if (name == NULL && ollama)
            name = json_string_value(json_object_get(m, "name"));
        if (name == NULL || (!ollama && state != NULL &&
                             strcmp(state, "loaded") != 0))
            continue;
        q = ollama ? json_pack("{s:s, s:i}", "model", name, "keep_alive", 0)
                   : json_pack("{s:s}", "model", name);
        req = json_dumps(q, JSON_COMPACT);
        json_decref(q);
        st = http_call(r, a->port, "POST",
                       ollama ? "/api/generate" : "/models/unload", req,
                       left, NULL);
        free(req);
    }
    json_decref(j);
    return st;
}

/* Call g's action within timeout_ms; a sentence of what was done, and
 * in *status the HTTP status (200 for a signal sent, 0 for none). */
static char *call_action(struct reclaim *r, struct giver *g, long timeout_ms,
                         long *status)
{
    const struct manifest_reclaim *a = &g->act;
    long st = 0;

    *status = 0;
    if (a->kind == MANIFEST_RECLAIM_SIGNAL) {
        cgroup_app_signal_all(r->d->cg, g->name, (pid_t)g->pid, g->pid_start,
                              a->signal);
        *status = 200;
        return xasprintf("sent %s", manifest_signal_name(a->signal));
    }
    if (!port_is_own(r, g, a->port))
        return xasprintf("not called: nothing of %s listens on "
                         "127.0.0.1:%u (an action reaches only its own app)",
                         g->name, (unsigned)a->port);
    if (a->kind == MANIFEST_RECLAIM_HTTP) {
        st = http_call(r, a->port, a->method, a->path, a->body, timeout_ms,
                       NULL);
        *status = st;
        return xasprintf("%s 127.0.0.1:%u%s answered %ld", a->method,
                         (unsigned)a->port, a->path, st);
    }
    switch (a->preset) {
    case MANIFEST_PRESET_OLLAMA:
    case MANIFEST_PRESET_LLAMA_SERVER:
        st = unload_each(r, a, timeout_ms);
        break;
    case MANIFEST_PRESET_VLLM:
        st = http_call(r, a->port, "POST", "/sleep?level=1", NULL,
                       timeout_ms, NULL);
        break;
    case MANIFEST_PRESET_COMFYUI:
        st = http_call(r, a->port, "POST", "/free",
                       "{\"unload_models\":true,\"free_memory\":true}",
                       timeout_ms, NULL);
        break;
    }
    *status = st;
    return xasprintf("%s's routes on 127.0.0.1:%u answered %ld",
                     manifest_preset_name(a->preset), (unsigned)a->port, st);
}

/* ---- choosing ---- */

static void giver_release(struct giver *g)
{
    manifest_reclaim_release(&g->act);
    for (size_t k = 0; g->ports != NULL && g->ports[k] != NULL; k++)
        free(g->ports[k]);
    free(g->ports);
}

static void givers_free(struct giver *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        giver_release(&g[i]);
    free(g);
}

/* A deep copy of from (giver_release frees it). */
static void giver_copy(struct giver *to, const struct giver *from)
{
    *to = *from;
    to->act.path = from->act.path ? xstrdup(from->act.path) : NULL;
    to->act.body = from->act.body ? xstrdup(from->act.body) : NULL;
    if (from->ports != NULL) {
        size_t np = 0;
        while (from->ports[np] != NULL)
            np++;
        to->ports = xcalloc(np + 1, sizeof(char *));
        for (size_t k = 0; k < np; k++)
            to->ports[k] = xstrdup(from->ports[k]);
    }
}

static int priority_of(const struct app *a, enum accel_type t)
{
    const struct manifest_reclaim *m = manifest_reclaim_of(&a->m, t);
    return m != NULL ? m->priority : 0;
}

/*
 * The apps on device dev (other than `asker`, NULL none) that may be asked
 * for memory: running here, with a reclaim, priority not above `prio`.
 * holders gets a sentence of every app holding a quota there (for a
 * refusal's event). d->lock held.
 */
/* When the device last showed app busy (the reconciler's pass: its SM
 * use or its memory as the driver counts it; never the ledger's
 * active_ms, which the app can write). An app no pass has seen on the
 * device (just started, or nothing of it there as the driver counts it)
 * is the busiest: asked last. */
static int64_t busy_of(const struct dev_info *di, const char *app)
{
    for (size_t i = 0; i < di->nautil; i++)
        if (strcmp(di->autil[i].app, app) == 0)
            return di->autil[i].busy_ms;
    return INT64_MAX;
}

static struct giver *gather(struct accel_daemon *d, int dev,
                            const char *asker, int prio, const char *only,
                            size_t *n)
{
    const struct adm_device *x = &d->snap.devs[dev];
    struct giver *g = xcalloc(MAX_GIVERS, sizeof(*g));

    *n = 0;
    for (size_t i = 0; i < d->napps && *n < MAX_GIVERS; i++) {
        const struct app *b = d->apps[i];
        const struct manifest_reclaim *m;
        if ((asker != NULL && strcmp(b->name, asker) == 0) ||
            (only != NULL && strcmp(b->name, only) != 0) || b->pid <= 0 ||
            !state_app_runs_here(d, b))
            continue;
        m = manifest_reclaim_of(&b->m, x->type);
        if (m == NULL || m->kind == MANIFEST_RECLAIM_NONE ||
            (only == NULL && m->priority > prio))
            continue;
        for (size_t k = 0; k < b->nrows; k++) {
            struct giver *v = &g[*n];
            if ((int)b->rows[k].dev != dev ||
                !runtime_ledger_of(d, b, k, v->ledger, sizeof v->ledger))
                continue;
            util_strlcpy(v->name, b->name, sizeof v->name);
            v->active_ms = busy_of(&d->dinfo[dev], b->name);
            v->quota = b->rows[k].memory;
            v->pid = b->pid;
            v->pid_start = b->pid_start;
            v->act = *m;
            v->act.path = m->path ? xstrdup(m->path) : NULL;
            v->act.body = m->body ? xstrdup(m->body) : NULL;
            v->container = b->m.run.ctr.image != NULL;
            if (v->container && b->m.run.ctr.ports != NULL) {
                size_t np = 0;
                while (b->m.run.ctr.ports[np] != NULL)
                    np++;
                v->ports = xcalloc(np + 1, sizeof(char *));
                for (size_t q = 0; q < np; q++)
                    v->ports[q] = xstrdup(b->m.run.ctr.ports[q]);
                v->container = np > 0;
            }
            (*n)++;
            break;
        }
    }
    return g;
}

static int by_idleness(const void *pa, const void *pb)
{
    const struct giver *a = pa, *b = pb;

    if (a->unhelpful != b->unhelpful) /* those that freed before first */
        return a->unhelpful ? 1 : -1;
    if (a->active_ms != b->active_ms)
        return a->active_ms < b->active_ms ? -1 : 1; /* idlest first */
    if (a->held != b->held)
        return a->held > b->held ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Who else holds what on dev, into list: {app, owner, bytes, why}: the
 * apps copied under d->lock, what each holds read without it (holds_now:
 * the driver's count where NVML shows it, so that a ledger zeroed by its
 * app hides nothing from the event). */
static void holders(struct reclaim *r, const char *uuid, const char *asker,
                    json_t *list)
{
    struct accel_daemon *d = r->d;
    struct giver *h = NULL;
    const char **why = NULL;
    char **owner = NULL;
    size_t n = 0;
    int dev;

    pthread_mutex_lock(&d->lock);
    dev = state_dev_find(d, uuid);
    if (dev >= 0 && d->napps > 0) {
        h = xcalloc(d->napps, sizeof(*h));
        why = xcalloc(d->napps, sizeof(*why));
        owner = xcalloc(d->napps, sizeof(*owner));
    }
    for (size_t i = 0; dev >= 0 && i < d->napps; i++) {
        const struct app *b = d->apps[i];
        const struct manifest_reclaim *m =
            manifest_reclaim_of(&b->m, d->snap.devs[dev].type);
        for (size_t k = 0; strcmp(b->name, asker) != 0 && k < b->nrows;
             k++) {
            if ((int)b->rows[k].dev != dev || b->pid <= 0 ||
                !runtime_ledger_of(d, b, k, h[n].ledger,
                                   sizeof h[n].ledger))
                continue;
            util_strlcpy(h[n].name, b->name, sizeof h[n].name);
            h[n].pid = b->pid;
            h[n].quota = b->rows[k].memory;
            owner[n] = xstrdup(b->owner);
            why[n] = m == NULL || m->kind == MANIFEST_RECLAIM_NONE
                         ? "no reclaim"
                         : "priority too high, or gave too little";
            n++;
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++) {
        uint64_t held = holds_now(r, h[i].name, (pid_t)h[i].pid,
                                  h[i].ledger, h[i].quota, uuid, NULL);
        if (held > 0)
            json_array_append_new(
                list, json_pack("{s:s, s:s, s:I, s:s}", "app", h[i].name,
                                "owner", owner[i], "bytes", (json_int_t)held,
                                "why", why[i]));
        free(owner[i]);
    }
    free(h);
    free(why);
    free(owner);
}

/* The name of app (of owner, NULL unknown) as the viewer sees it. */
static const char *seen_name(const char *app, const char *owner,
                             reclaim_hide_fn hide, void *ctx, bool *hidden)
{
    *hidden = hide != NULL && app != NULL && app[0] != '\0' &&
              hide(ctx, app, owner);
    return *hidden ? "another user's app" : app != NULL ? app : "";
}

/* memory.reclaim.failed's sentence; its holders hidden from the viewer
 * are made anonymous in data. */
static char *failed_message(json_t *data, const char *device,
                            reclaim_hide_fn hide, void *ctx, bool *changed)
{
    json_t *list = json_object_get(data, "holders"), *h;
    char want[32], got[32], gib[32], *who = xstrdup(""), *prev, *msg;
    size_t i;
    bool hidden;

    fmt_gib((uint64_t)json_integer_value(json_object_get(data, "bytes")),
            want, sizeof want);
    fmt_gib((uint64_t)json_integer_value(json_object_get(data, "free")), got,
            sizeof got);
    json_array_foreach(list, i, h)
    {
        const char *name = seen_name(
            json_string_value(json_object_get(h, "app")),
            json_string_value(json_object_get(h, "owner")), hide, ctx,
            &hidden);
        const char *why = json_string_value(json_object_get(h, "why"));
        fmt_gib((uint64_t)json_integer_value(json_object_get(h, "bytes")),
                gib, sizeof gib);
        prev = who;
        who = xasprintf("%s%s%s holds %s (%s)", prev, prev[0] ? ", " : "",
                        name, gib, why != NULL ? why : "not freed");
        free(prev);
        if (hidden) {
            json_object_set_new(h, "app", json_string(""));
            json_object_set_new(h, "owner", json_string(""));
            json_object_set_new(h, "hidden", json_true());
            *changed = true;
        }
    }
    msg = xasprintf("%s's allocation of %s on %s failed as on a full card: "
                    "only %s was free after %d ms; %s",
                    json_string_value(json_object_get(data, "asker")), want,
                    device != NULL ? device : "?", got,
                    (int)json_integer_value(json_object_get(data, "waitMs")),
                    who[0] ? who : "no other app holds memory there");
    free(who);
    return msg;
}

/* memory.reclaim's sentence; an asker hidden from the viewer is made
 * anonymous in data (its totals, askerGot, taken out). */
static char *given_message(json_t *data, const char *device,
                           reclaim_hide_fn hide, void *ctx, bool *changed)
{
    uint64_t freed =
        (uint64_t)json_integer_value(json_object_get(data, "bytes"));
    long long ms = json_integer_value(json_object_get(data, "milliseconds"));
    const char *giver = json_string_value(json_object_get(data, "giver"));
    const char *asker = json_string_value(json_object_get(data, "asker"));
    const char *stopped = json_is_true(json_object_get(data, "stopped"))
                              ? " (stopped: its reclaim says orStop)"
                              : "";
    const char *asker_owner =
        json_string_value(json_object_get(data, "askerOwner"));
    char gib[32], *msg;
    bool hidden = false;
    /* a cut quota's give-back says so ("cut", or, from an acceld before
     * it, asker "quota" with no owner): an app may be named "quota" too,
     * and its name and totals are hidden like any other app's */
    bool cut = json_is_true(json_object_get(data, "cut")) ||
               (asker != NULL && strcmp(asker, "quota") == 0 &&
                asker_owner == NULL);

    if (asker != NULL && !cut)
        asker = seen_name(asker, asker_owner, hide, ctx, &hidden);
    asker = asker != NULL ? asker : "";
    giver = giver != NULL ? giver : "";
    device = device != NULL ? device : "?";
    fmt_gib(freed, gib, sizeof gib);
    if (freed > 0)
        msg = xasprintf("%s gave back %s on %s for %s in %lld ms%s", giver,
                        gib, device, asker, ms, stopped);
    else
        msg = xasprintf("%s was asked to give back memory on %s for %s but "
                        "freed nothing (%s) in %lld ms%s",
                        giver, device, asker, gib, ms, stopped);
    if (hidden) {
        json_object_set_new(data, "asker", json_string(""));
        json_object_set_new(data, "askerOwner", json_string(""));
        json_object_set_new(data, "askerHidden", json_true());
        json_object_del(data, "askerGot");
        *changed = true;
    }
    return msg;
}

char *reclaim_event_message(const char *kind, json_t *data,
                            const char *device, reclaim_hide_fn hide,
                            void *ctx, bool *changed)
{
    *changed = false;
    if (!json_is_object(data))
        return NULL;
    if (strcmp(kind, "memory.reclaim.failed") == 0)
        return failed_message(data, device, hide, ctx, changed);
    if (strcmp(kind, "memory.reclaim") == 0)
        return given_message(data, device, hide, ctx, changed);
    return NULL;
}

static void stop_app(struct accel_daemon *d, const char *name)
{
    static const char reason[] = "reclaim-or-stop";
    struct app *a;

    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, name);
    if (a != NULL && a->state == APP_RUNNING && a->pid > 0 &&
        state_app_runs_here(d, a) &&
        lifecycle_commit_state(d, a, APP_STOPPING, reason) == ACCEL_OK)
        runtime_stop_begin(a, APP_STOPPED, reason, false);
    pthread_mutex_unlock(&d->lock);
}

/* A called giver's standing: one that freed is helpful again; one that
 * freed nothing yet is watched (check_verdicts). */
static void judge(struct reclaim *r, const struct giver *g, const char *uuid,
                  uint64_t freed)
{
    pthread_mutex_lock(&r->mu);
    if (freed > 0 || g->stopped) {
        appdev_remove(r->unhelpful, sizeof r->unhelpful[0], &r->nunhelpful,
                      g->name, uuid);
    } else if (appdev_find(r->verdicts, sizeof r->verdicts[0], r->nverdict,
                           g->name, uuid) == r->nverdict &&
               r->nverdict < MAX_VERDICTS) {
        struct verdict *v = &r->verdicts[r->nverdict++];
        memset(v, 0, sizeof(*v));
        appdev_set(&v->at, g->name, uuid);
        util_strlcpy(v->ledger, g->ledger, sizeof v->ledger);
        v->pid = g->pid;
        v->quota = g->quota;
        v->before = g->held;
        v->until = mono_ms() + VERDICT_MS;
    }
    pthread_mutex_unlock(&r->mu);
}

/* The watched givers: one whose memory went down is helpful; one still
 * holding what it held when its watch ends is asked after the others. */
static void check_verdicts(struct reclaim *r)
{
    struct verdict due[MAX_VERDICTS];
    size_t n;

    pthread_mutex_lock(&r->mu);
    n = r->nverdict;
    memcpy(due, r->verdicts, n * sizeof due[0]);
    pthread_mutex_unlock(&r->mu);
    for (size_t i = 0; i < n; i++) {
        const struct verdict *v = &due[i];
        uint64_t now = holds_now(r, v->at.app, (pid_t)v->pid, v->ledger,
                                 v->quota, v->at.dev, NULL);
        bool freed = now < v->before, over = mono_ms() >= v->until;
        if (!freed && !over)
            continue;
        pthread_mutex_lock(&r->mu);
        appdev_remove(r->verdicts, sizeof r->verdicts[0], &r->nverdict,
                      v->at.app, v->at.dev);
        if (freed)
            appdev_remove(r->unhelpful, sizeof r->unhelpful[0],
                          &r->nunhelpful, v->at.app, v->at.dev);
        else if (appdev_find(r->unhelpful, sizeof r->unhelpful[0],
                             r->nunhelpful, v->at.app, v->at.dev) ==
                     r->nunhelpful &&
                 r->nunhelpful < MAX_UNHELPFUL)
            appdev_set(&r->unhelpful[r->nunhelpful++], v->at.app,
                       v->at.dev);
        pthread_mutex_unlock(&r->mu);
        if (!freed)
            log_info("reclaim: %s freed nothing on %s when asked: asked "
                     "after the others from now on, until it gives memory "
                     "back", v->at.app, v->at.dev);
    }
}

/* The events of what each called giver gave (d->lock taken here);
 * asker_is_app false for a cut quota's give-back (asker "quota"). */
static void report_givers(struct reclaim *r, const char *asker,
                          bool asker_is_app, const char *uuid,
                          struct giver *g, size_t n, int64_t t0)
{
    struct accel_daemon *d = r->d;
    int64_t ms = mono_ms() - t0;

    for (size_t i = 0; i < n; i++) {
        struct ledger_usage u;
        uint64_t freed;
        json_t *data, *totals = NULL;
        const struct app *asker_app;
        char *msg;
        bool changed;
        if (!g[i].called)
            continue;
        /* by the same count as before the call: the driver's where it
         * showed the giver (a ledger zeroed after the call must not
         * count as memory given), else the ledger's */
        if (g[i].by_driver)
            g[i].held_after = driver_held(r, g[i].name, (pid_t)g[i].pid,
                                          uuid);
        else
            g[i].held_after = ledger_read(g[i].ledger, &u) == ACCEL_OK
                                  ? u.used : 0;
        freed = g[i].held > g[i].held_after ? g[i].held - g[i].held_after
                                            : 0;
        if (freed > 0)
            totals = note_lent(r, g[i].name, asker, asker_is_app, freed);
        judge(r, &g[i], uuid, freed);
        if (freed > 0 && g[i].act.kind == MANIFEST_RECLAIM_PRESET &&
            g[i].act.preset == MANIFEST_PRESET_VLLM && !g[i].stopped)
            note_sleeper(r, g[i].name, uuid, freed);
        data = json_pack("{s:s, s:s, s:I, s:I, s:b}", "asker", asker,
                         "giver", g[i].name, "bytes", (json_int_t)freed,
                         "milliseconds", (json_int_t)ms, "stopped",
                         g[i].stopped);
        if (totals != NULL) /* what persists the book (reclaim_start) */
            json_object_update(data, totals);
        if (!asker_is_app) /* no app's: a replay credits no "quota" app */
            json_object_set_new(data, "cut", json_true());
        json_decref(totals);
        pthread_mutex_lock(&d->lock);
        asker_app = state_app_find(d, asker);
        if (asker_app != NULL) /* who may see its name (api.c) */
            json_object_set_new(data, "askerOwner",
                                json_string(asker_app->owner));
        msg = reclaim_event_message("memory.reclaim", data, uuid, NULL, NULL,
                                    &changed);
        state_event(d, "memory.reclaim", g[i].name, d->cfg.node_name, uuid,
                    data, "%s", msg);
        pthread_mutex_unlock(&d->lock);
        free(msg);
    }
}

static void answer(int fd, const char *s);
static void job_done(struct reclaim *r);

/* Let go of one reference to c (r->mu not held); the last frees it. */
static void call_unref(struct reclaim *r, struct call *c, bool abandon)
{
    bool last;

    pthread_mutex_lock(&r->mu);
    if (abandon)
        c->abandoned = true;
    last = --c->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last) {
        giver_release(&c->g);
        free(c);
    }
}

/* One giver's call (struct call): the action, then what it answered. */
static void *call_thread(void *arg)
{
    struct call *c = arg;
    struct reclaim *r = c->r;
    long st;
    char *what = call_action(r, &c->g, c->timeout_ms, &st);
    bool late;

    pthread_mutex_lock(&r->mu);
    late = c->abandoned;
    pthread_mutex_unlock(&r->mu);
    log_info("reclaim: %s's action for %s on %s: %s%s", c->g.name, c->asker,
             c->dev, what,
             late ? " (after its ask had ended: nothing more done)" : "");
    free(what);
    pthread_mutex_lock(&r->mu);
    c->status = st;
    c->answered_at = mono_ms();
    c->done = true;
    r->calls_in_flight--;
    pthread_cond_broadcast(&r->answered); /* its ask looks at once */
    pthread_mutex_unlock(&r->mu);
    call_unref(r, c, false);
    job_done(r);
    return NULL;
}

/* Begin g's call for asker's ask on a thread of its own, to end within
 * timeout_ms; NULL when none may begin now (CALLS_MAX in flight, acceld
 * stopping, no thread). */
static struct call *call_begin(struct reclaim *r, const struct giver *g,
                               long timeout_ms, const char *asker,
                               const char *uuid, const char *want)
{
    struct call *c;
    pthread_t t;
    pthread_attr_t at;
    bool ok;

    pthread_mutex_lock(&r->mu);
    if (r->stopping || r->calls_in_flight >= CALLS_MAX) {
        pthread_mutex_unlock(&r->mu);
        return NULL;
    }
    r->calls_in_flight++;
    r->workers++; /* reclaim_stop waits for it */
    pthread_mutex_unlock(&r->mu);
    c = xcalloc(1, sizeof(*c));
    c->r = r;
    giver_copy(&c->g, g);
    c->timeout_ms = timeout_ms > 1 ? timeout_ms : 1;
    util_strlcpy(c->asker, asker, sizeof c->asker);
    util_strlcpy(c->dev, uuid, sizeof c->dev);
    util_strlcpy(c->want, want, sizeof c->want);
    c->refs = 2;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    ok = pthread_create(&t, &at, call_thread, c) == 0;
    pthread_attr_destroy(&at);
    if (!ok) {
        pthread_mutex_lock(&r->mu);
        r->calls_in_flight--;
        pthread_mutex_unlock(&r->mu);
        giver_release(&c->g);
        free(c);
        job_done(r);
        return NULL;
    }
    return c;
}

/*
 * Resolve one ask and answer it on fd ("ok <why>" when the card's free
 * memory covers `bytes` within the device's wait, "no <why>" otherwise),
 * then record it: the answer goes out first, the events (store writes)
 * after, so the asker never waits for them.
 */
static bool resolve(struct reclaim *r, int fd, const char *asker,
                    const char *uuid, uint64_t bytes)
{
    char *why = NULL, *line;
    struct accel_daemon *d = r->d;
    struct giver *g;
    struct call *calls[MAX_GIVERS] = {NULL};
    size_t n = 0, called = 0, inflight = 0;
    int64_t t0 = mono_ms(), deadline, promise_ms, hedge_ms;
    uint64_t fr = 0, need, promised = 0, quota = 0, mine;
    uint32_t wait_ms;
    pid_t leader;
    bool ok = false, stopped_any = false;
    int dev, prio;
    struct app *a;
    char want[32];
    const char *cause = NULL;

    pthread_mutex_lock(&d->lock);
    dev = state_dev_find(d, uuid);
    a = state_app_find(d, asker);
    if (dev < 0 || a == NULL ||
        d->snap.devs[dev].st != ACCEL_SUPPORT_MEMSLICE) {
        pthread_mutex_unlock(&d->lock);
        answer(fd, "no not a Memory-slicing device of this node\n");
        return false;
    }
    /* an ask is for one allocation within the asker's quota on the card
     * (the shim asks only then): a larger one (a forged ask, from any
     * process of the app) would have others unload, or be stopped
     * (orStop), for memory the asker may never hold */
    for (size_t k = 0; k < a->nrows; k++)
        if ((int)a->rows[k].dev == dev)
            quota = a->rows[k].memory;
    if (bytes == 0 || bytes > quota) {
        pthread_mutex_unlock(&d->lock);
        line = xasprintf("no over-quota: %llu bytes is not an allocation "
                         "within %s's quota on %s (%llu bytes)\n",
                         (unsigned long long)bytes, asker, uuid,
                         (unsigned long long)quota);
        answer(fd, line);
        free(line);
        return false;
    }
    wait_ms = state_dev_reclaim_wait_ms(d, dev);
    prio = priority_of(a, d->snap.devs[dev].type);
    leader = (pid_t)a->pid;
    pthread_mutex_unlock(&d->lock);
    /* nor beyond what the asker's quota has left once what its processes
     * hold there as the driver counts it is taken out: an app that holds
     * its quota already could otherwise have others unload (or be
     * stopped) for memory it may never hold */
    mine = driver_held(r, asker, leader, uuid);
    if (mine > quota - bytes) {
        line = xasprintf("no over-quota: %llu bytes is not an allocation "
                         "within %s's quota on %s (%llu bytes, of which "
                         "its processes hold %llu as the driver counts "
                         "it)\n", (unsigned long long)bytes, asker, uuid,
                         (unsigned long long)quota,
                         (unsigned long long)mine);
        answer(fd, line);
        free(line);
        return false;
    }
    pthread_mutex_lock(&d->lock);
    dev = state_dev_find(d, uuid);
    g = dev >= 0 ? gather(d, dev, asker, prio, NULL, &n) : NULL;
    pthread_mutex_unlock(&d->lock);
    if (g == NULL) { /* the device went while the driver was read */
        answer(fd, "no not a Memory-slicing device of this node\n");
        return false;
    }

    for (size_t i = 0; i < n; i++)
        g[i].held = holds_now(r, g[i].name, (pid_t)g[i].pid, g[i].ledger,
                              g[i].quota, uuid, &g[i].by_driver);
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < n; i++)
        g[i].unhelpful = appdev_find(r->unhelpful, sizeof r->unhelpful[0],
                                     r->nunhelpful, g[i].name, uuid) <
                         r->nunhelpful;
    pthread_mutex_unlock(&r->mu);
    qsort(g, n, sizeof(*g), by_idleness);
    promise_ms = wait_ms / 4 < PROMISE_MS ? (int64_t)wait_ms / 4
                                          : PROMISE_MS;
    hedge_ms = wait_ms / 16 < HEDGE_MS ? (int64_t)wait_ms / 16 : HEDGE_MS;
    deadline = t0 + wait_ms;
    fmt_gib(bytes, want, sizeof want);
    if (!card_free(r, uuid, &fr, &cause)) {
        line = xasprintf("no the driver's free memory of %s cannot be read "
                         "(%s)\n", uuid, cause);
        answer(fd, line);
        free(line);
        givers_free(g, n);
        return false;
    }
    while (!(ok = fr >= bytes)) {
        int64_t now = mono_ms();
        need = bytes - fr;
        /* the calls that answered since the last look */
        pthread_mutex_lock(&r->mu);
        for (size_t i = 0; i < called; i++) {
            if (calls[i] == NULL || g[i].answered || !calls[i]->done)
                continue;
            g[i].answered = true;
            inflight--;
            /* only an action that answered 2xx counts on its memory */
            if (calls[i]->status >= 200 && calls[i]->status < 300)
                g[i].promised_until = calls[i]->answered_at + promise_ms;
        }
        pthread_mutex_unlock(&r->mu);
        /* what is to come: a call in flight for the hedge delay, or
         * longer while the giver's memory comes back; a giver's 2xx for
         * a moment only (one that answered and freed nothing, or less,
         * must not keep the next givers from being asked) */
        promised = 0;
        for (size_t i = 0; i < called; i++) {
            struct giver *v = &g[i];
            if (calls[i] == NULL)
                continue;
            if (!v->answered && now - v->called_at >= hedge_ms &&
                !v->coming && now >= v->next_look) {
                v->coming = holds_now(r, v->name, (pid_t)v->pid, v->ledger,
                                      v->quota, uuid, NULL) < v->held;
                v->next_look = now + LOOK_MS;
            }
            if (v->answered ? v->promised_until > now
                            : now - v->called_at < hedge_ms || v->coming)
                promised += v->held;
        }
        /* call the idlest givers until what they hold covers the need,
         * each on a thread of its own: one that hangs holds up the next
         * for the hedge delay only */
        while (promised < need && called < n && now < deadline &&
               inflight < HEDGE_PER_ASK) {
            struct giver *v = &g[called];
            /* an orStop giver is stopped at half the wait: its call may
             * not go on past that; another's ends by the deadline */
            long left = v->act.or_stop ? (long)(t0 + wait_ms / 2 - now)
                                       : (long)(deadline - now);
            if (v->held == 0) {
                called++;
                continue;
            }
            calls[called] = call_begin(r, v, left, asker, uuid, want);
            if (calls[called] == NULL)
                break; /* CALLS_MAX in flight: at the next look */
            /* said before the call can end (and the ask be answered) */
            log_info("reclaim: %s asked for %s on %s: %s (holds %llu "
                     "bytes): called", asker, want, uuid, v->name,
                     (unsigned long long)v->held);
            v->called = true;
            v->called_at = now;
            v->next_look = now + hedge_ms;
            called++;
            inflight++;
            promised += v->held;
        }
        /* an action that answers once it has freed (Ollama's unload,
         * vLLM's sleep) leaves the memory free now: look before waiting */
        if (called > 0 && card_free(r, uuid, &fr, NULL) && fr >= bytes)
            continue;
        /* half the wait gone and still short: the orStop givers stop */
        if (!stopped_any && now - t0 >= (int64_t)wait_ms / 2) {
            for (size_t i = 0; i < called; i++) {
                /* what it holds now: one that gave all it held back is
                 * spared (stopping it would free nothing more) */
                if (!g[i].act.or_stop || g[i].held == 0 ||
                    holds_now(r, g[i].name, (pid_t)g[i].pid, g[i].ledger,
                              g[i].quota, uuid, NULL) == 0)
                    continue;
                stop_app(d, g[i].name);
                g[i].stopped = true;
            }
            stopped_any = true;
        }
        if (now >= deadline || is_stopping(r))
            break;
        /* until the next look at the card, or a call of this ask
         * answers (its memory is then free, for most actions) */
        {
            struct timespec ts = util_deadline(CLOCK_MONOTONIC, POLL_MS);
            bool seen = false;
            pthread_mutex_lock(&r->mu);
            for (size_t i = 0; i < called && !seen; i++)
                seen = calls[i] != NULL && !g[i].answered && calls[i]->done;
            if (!seen)
                pthread_cond_timedwait(&r->answered, &r->mu, &ts);
            pthread_mutex_unlock(&r->mu);
        }
        if (!card_free(r, uuid, &fr, NULL))
            break;
    }
    if (ok)
        why = xasprintf("%s free on the card after %lld ms", want,
                        (long long)(mono_ms() - t0));
    else
        why = xasprintf("%s not free within %u ms", want, (unsigned)wait_ms);
    line = xasprintf("%s %s\n", ok ? "ok" : "no", why);
    answer(fd, line); /* first: the asker waits for nothing below */
    free(line);
    free(why);
    /* what a giver gave is measured once its call has answered (its own
     * books, the ledger or the driver's per-process count, may lag the
     * card's): the calls in flight within their hedge delay, or whose
     * giver's memory is coming back, are waited for (the deadline at
     * most); the others (past it, nothing coming: a hang) are left to
     * end on their own copies, what they answer only logged */
    for (;;) {
        bool more = false;
        int64_t now = mono_ms();
        struct timespec ts;
        for (size_t i = 0; i < called; i++) {
            struct giver *v = &g[i];
            if (calls[i] != NULL && !v->coming &&
                now - v->called_at >= hedge_ms && now >= v->next_look) {
                v->coming = holds_now(r, v->name, (pid_t)v->pid, v->ledger,
                                      v->quota, uuid, NULL) < v->held;
                v->next_look = now + LOOK_MS;
            }
        }
        ts = util_deadline(CLOCK_MONOTONIC, POLL_MS);
        pthread_mutex_lock(&r->mu);
        for (size_t i = 0; i < called && !more; i++)
            more = calls[i] != NULL && !calls[i]->done &&
                   (now - g[i].called_at < hedge_ms || g[i].coming);
        more = more && now < deadline && !r->stopping;
        if (more)
            pthread_cond_timedwait(&r->answered, &r->mu, &ts);
        pthread_mutex_unlock(&r->mu);
        if (!more)
            break;
    }
    for (size_t i = 0; i < called; i++)
        if (calls[i] != NULL)
            call_unref(r, calls[i], true);
    report_givers(r, asker, true, uuid, g, called, t0);
    if (!ok) {
        json_t *list = json_array(), *data;
        char *msg;
        bool changed;
        holders(r, uuid, asker, list);
        data = json_pack("{s:s, s:I, s:I, s:i, s:o}", "asker", asker, "bytes",
                         (json_int_t)bytes, "free", (json_int_t)fr, "waitMs",
                         (int)wait_ms, "holders", list);
        msg = reclaim_event_message("memory.reclaim.failed", data, uuid, NULL,
                                    NULL, &changed);
        pthread_mutex_lock(&d->lock);
        state_event(d, "memory.reclaim.failed", asker, d->cfg.node_name,
                    uuid, data, "%s", msg);
        pthread_mutex_unlock(&d->lock);
        free(msg);
    }
    pthread_mutex_lock(&r->mu);
    r->asks++;
    if (ok)
        r->granted++;
    else
        r->refused++;
    r->calls += called;
    r->seconds_sum += (double)(mono_ms() - t0) / 1000.0;
    pthread_mutex_unlock(&r->mu);
    givers_free(g, n);
    return ok;
}

/* ---- the socket ---- */

struct job {
    struct reclaim *r;
    int fd;                            /* an ask; -1 for a give-back */
    uid_t uid;                         /* an ask's asker (counted) */
    char app[ACCEL_ID_MAX + 1], dev[ACCEL_ID_MAX + 1], why[ACCEL_ID_MAX + 1];
    uint64_t bytes;
};

static void job_done(struct reclaim *r)
{
    pthread_mutex_lock(&r->mu);
    r->workers--;
    pthread_cond_broadcast(&r->idle);
    pthread_mutex_unlock(&r->mu);
}

static void answer(int fd, const char *s)
{
    size_t len = strlen(s);
    while (len > 0) {
        ssize_t w = send(fd, s, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        len -= (size_t)w;
    }
}

/* May a process of uid ask at all? Where acceld is root, apps run as
 * their owners' uids from --app-uid-range (and root's own apps, a
 * container's root included, as root): any other local user is refused
 * at once, so that it cannot fill the caps below and refuse the apps'
 * asks. Without the uid drop every app runs as acceld's uid: no rule. */
static bool uid_may_ask(const struct accel_daemon *d, uid_t uid)
{
    return !d->uid_drop || uid == 0 ||
           (uid >= d->cfg.uid_lo && uid <= d->cfg.uid_hi);
}

/* Count one more ask of uid in flight; false (nothing counted) when that
 * uid, or all askers together, already have their most. */
static bool ask_take(struct reclaim *r, uid_t uid)
{
    size_t i;
    bool ok = false;

    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->nask_uid && r->ask_uid[i].uid != uid; i++)
        ;
    if (r->asks_in_flight < ASKS_MAX &&
        (i < r->nask_uid ? r->ask_uid[i].n < ASKS_PER_UID
                         : r->nask_uid < ASK_UIDS)) {
        if (i == r->nask_uid) {
            r->ask_uid[i].uid = uid;
            r->ask_uid[i].n = 0;
            r->nask_uid++;
        }
        r->ask_uid[i].n++;
        r->asks_in_flight++;
        ok = true;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static void ask_release(struct reclaim *r, uid_t uid)
{
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nask_uid; i++)
        if (r->ask_uid[i].uid == uid) {
            if (--r->ask_uid[i].n == 0)
                r->ask_uid[i] = r->ask_uid[--r->nask_uid];
            r->asks_in_flight--;
            break;
        }
    pthread_mutex_unlock(&r->mu);
}

static bool read_ask(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    int64_t end = mono_ms() + ASK_READ_MS;

    while (got + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = end - mono_ms();
        ssize_t k;
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return false;
        k = recv(fd, buf + got, cap - 1 - got, 0);
        if (k <= 0)
            return false;
        got += (size_t)k;
        buf[got] = '\0';
        if (strchr(buf, '\n') != NULL) {
            *strchr(buf, '\n') = '\0';
            return true;
        }
    }
    return false;
}

static void *ask_thread(void *arg)
{
    struct job *j = arg;
    struct reclaim *r = j->r;
    char line[ASK_LINE_MAX + 1], app[ACCEL_ID_MAX + 1], dev[ACCEL_ID_MAX + 1];
    char why[256], *out;
    unsigned long long bytes = 0;
    struct broker_peer peer;
    struct ucred cr;
    socklen_t len = sizeof cr;

    if (getsockopt(j->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 ||
        !read_ask(j->fd, line, sizeof line) ||
        sscanf(line, "reclaim %127s %127s %llu", app, dev, &bytes) != 3) {
        answer(j->fd, "no bad-request\n");
        goto out;
    }
    peer.pid = cr.pid;
    peer.uid = cr.uid;
    peer.gid = cr.gid;
    if (!broker_ops_admit(r->d, dev, app, &peer, why, sizeof why)) {
        out = xasprintf("no not-admitted: %s\n", why);
        answer(j->fd, out);
        free(out);
        goto out;
    }
    resolve(r, j->fd, app, dev, (uint64_t)bytes);
out:
    close(j->fd);
    ask_release(r, j->uid);
    free(j);
    job_done(r);
    return NULL;
}

/* Note a give-back of app on dev in flight; false when one already is
 * (or too many are). */
static bool giving_take(struct reclaim *r, const char *app, const char *dev)
{
    bool ok;

    pthread_mutex_lock(&r->mu);
    ok = r->ngiving < GIVING_MAX &&
         appdev_find(r->giving, sizeof r->giving[0], r->ngiving, app, dev) ==
             r->ngiving;
    if (ok)
        appdev_set(&r->giving[r->ngiving++], app, dev);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static void giving_release(struct reclaim *r, const char *app,
                           const char *dev)
{
    pthread_mutex_lock(&r->mu);
    appdev_remove(r->giving, sizeof r->giving[0], &r->ngiving, app, dev);
    pthread_mutex_unlock(&r->mu);
}

static void *give_back_thread(void *arg)
{
    struct job *j = arg;
    struct reclaim *r = j->r;
    struct accel_daemon *d = r->d;
    struct giver *g = NULL;
    size_t n = 0;
    int dev;
    int64_t t0 = mono_ms();

    pthread_mutex_lock(&d->lock);
    dev = state_dev_find(d, j->dev);
    if (dev >= 0)
        g = gather(d, dev, NULL, 0, j->app, &n);
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++) {
        char *what;
        long st;
        g[i].held = holds_now(r, g[i].name, (pid_t)g[i].pid, g[i].ledger,
                              UINT64_MAX, j->dev, &g[i].by_driver);
        what = call_action(r, &g[i], 10000, &st);
        g[i].called = true;
        log_info("reclaim: %s asked to give back %llu bytes on %s (%s): %s",
                 g[i].name, (unsigned long long)j->bytes, j->dev, j->why,
                 what);
        free(what);
    }
    if (n > 0) { /* what it gave, once the action had a moment */
        for (int k = 0; k < 20 && !is_stopping(r); k++) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
        report_givers(r, j->why, false, j->dev, g, n, t0);
    }
    givers_free(g, n);
    giving_release(r, j->app, j->dev);
    free(j);
    job_done(r);
    return NULL;
}

static bool spawn(struct reclaim *r, void *(*fn)(void *), struct job *j);

/* Wake a vLLM put to sleep (j->app on j->dev, j->bytes it gave). */
static void *wake_thread(void *arg)
{
    struct job *j = arg;
    struct reclaim *r = j->r;
    struct accel_daemon *d = r->d;
    struct giver *g = NULL;
    size_t n = 0;
    long st = 0;
    int dev;
    bool own = false;
    char gib[32];

    pthread_mutex_lock(&d->lock);
    dev = state_dev_find(d, j->dev);
    if (dev >= 0)
        g = gather(d, dev, NULL, 0, j->app, &n);
    pthread_mutex_unlock(&d->lock);
    if (n > 0 && (own = port_is_own(r, &g[0], g[0].act.port)))
        st = http_call(r, g[0].act.port, "POST", "/wake_up", NULL, 60000,
                       NULL);
    forget_sleeper(r, j->app, j->dev);
    fmt_gib(j->bytes, gib, sizeof gib);
    if (n > 0) {
        pthread_mutex_lock(&d->lock);
        state_event(d, "memory.reclaim.return", j->app, d->cfg.node_name,
                    j->dev,
                    json_pack("{s:s, s:I, s:i}", "app", j->app, "bytes",
                              (json_int_t)j->bytes, "status", (int)st),
                    "%s was woken up (POST /wake_up answered %ld): the card "
                    "has the %s it gave back free again%s", j->app, st, gib,
                    own ? "" : " (not called: nothing of it listens on its "
                               "port)");
        pthread_mutex_unlock(&d->lock);
        pthread_mutex_lock(&r->mu);
        r->wakes++;
        pthread_mutex_unlock(&r->mu);
    }
    givers_free(g, n);
    free(j);
    job_done(r);
    return NULL;
}

/* The sleepers whose memory the card has free again get woken. */
static void check_sleepers(struct reclaim *r)
{
    struct sleeper due[MAX_SLEEPERS];
    size_t n = 0;

    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nsleep; i++)
        if (!r->sleepers[i].waking)
            due[n++] = r->sleepers[i];
    pthread_mutex_unlock(&r->mu);
    for (size_t i = 0; i < n; i++) {
        uint64_t fr = 0;
        struct job *j;
        size_t k;
        if (!card_free(r, due[i].at.dev, &fr, NULL) || fr < due[i].bytes)
            continue;
        pthread_mutex_lock(&r->mu);
        k = appdev_find(r->sleepers, sizeof r->sleepers[0], r->nsleep,
                        due[i].at.app, due[i].at.dev);
        if (k < r->nsleep)
            r->sleepers[k].waking = true;
        pthread_mutex_unlock(&r->mu);
        j = xcalloc(1, sizeof(*j));
        j->r = r;
        j->fd = -1;
        j->bytes = due[i].bytes;
        util_strlcpy(j->app, due[i].at.app, sizeof j->app);
        util_strlcpy(j->dev, due[i].at.dev, sizeof j->dev);
        if (!spawn(r, wake_thread, j))
            free(j);
    }
}

static bool spawn(struct reclaim *r, void *(*fn)(void *), struct job *j)
{
    pthread_t t;
    pthread_attr_t at;
    bool ok;

    pthread_mutex_lock(&r->mu);
    if (r->stopping) {
        pthread_mutex_unlock(&r->mu);
        return false;
    }
    r->workers++;
    pthread_mutex_unlock(&r->mu);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    ok = pthread_create(&t, &at, fn, j) == 0;
    pthread_attr_destroy(&at);
    if (!ok)
        job_done(r);
    return ok;
}

static void *accept_thread(void *arg)
{
    struct reclaim *r = arg;

    for (;;) {
        struct pollfd p[2] = {{r->lfd, POLLIN, 0},
                              {r->stop_pipe[0], POLLIN, 0}};
        struct job *j;
        struct ucred cr;
        socklen_t crlen = sizeof cr;
        int fd, k;
        size_t sleeping, watched;
        pthread_mutex_lock(&r->mu);
        sleeping = r->nsleep;
        watched = r->nverdict;
        pthread_mutex_unlock(&r->mu);
        /* a sleeper may be added while we wait: look every
         * WAKE_CHECK_MS (four wake-ups a second, nothing more) */
        k = poll(p, 2, WAKE_CHECK_MS);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents != 0)
            break;
        if (sleeping > 0)
            check_sleepers(r);
        if (watched > 0)
            check_verdicts(r);
        if (p[0].revents == 0)
            continue;
        fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) != 0 ||
            !uid_may_ask(r->d, cr.uid)) {
            /* not a uid apps run as: no thread, no share of the caps */
            answer(fd, "no: not a process of an app of this node\n");
            close(fd);
            continue;
        }
        if (!ask_take(r, cr.uid)) {
            answer(fd, "no busy: too many asks in flight\n");
            close(fd);
            continue;
        }
        j = xcalloc(1, sizeof(*j));
        j->r = r;
        j->fd = fd;
        j->uid = cr.uid;
        if (!spawn(r, ask_thread, j)) {
            answer(fd, "no stopping\n");
            close(fd);
            ask_release(r, cr.uid);
            free(j);
        }
    }
    return NULL;
}

static int listen_at(const char *path)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char dir[108];

    if (fd < 0)
        return -1;
    util_strlcpy(dir, path, sizeof dir);
    if (strrchr(dir, '/') != NULL) {
        struct stat st;
        *strrchr(dir, '/') = '\0';
        /* the /tmp fallback must be ours: no one else may have made it
         * first (and put a socket of theirs there) */
        if ((mkdir(dir, 0755) != 0 && errno != EEXIST) ||
            lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
            st.st_uid != geteuid() || (st.st_mode & 0022) != 0) {
            close(fd);
            errno = EPERM;
            return -1;
        }
    }
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    util_strlcpy(sa.sun_path, path, sizeof sa.sun_path);
    unlink(path);
    /* anyone may connect: who asks is checked per connection
     * (SO_PEERCRED, broker_ops_admit) */
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        chmod(path, 0666) != 0 || listen(fd, 64) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* When the app of that name now was made (what of a lend it may be
 * credited with: lentbook_replay_since), INT64_MAX when there is none.
 * d->lock held. */
static int64_t made_at(struct accel_daemon *d, const char *name)
{
    const struct app *a = name != NULL ? state_app_find(d, name) : NULL;

    return a != NULL ? a->created_ms : INT64_MAX;
}

/* One kept memory.reclaim event of this node into the book (d->lock
 * held): each side only to the app of its name that was there then. */
static enum accel_err replay_one(void *ctx, const struct store_event *e)
{
    struct reclaim *r = ctx;
    json_t *data;
    const char *giver, *asker;
    json_int_t bytes;
    int64_t asker_since;

    if (e->node == NULL || e->data == NULL ||
        strcmp(e->node, r->d->cfg.node_name) != 0)
        return ACCEL_OK;
    data = json_loads(e->data, 0, NULL);
    giver = json_string_value(json_object_get(data, "giver"));
    asker = json_string_value(json_object_get(data, "asker"));
    bytes = json_integer_value(json_object_get(data, "bytes"));
    asker_since = json_is_true(json_object_get(data, "cut"))
                      ? INT64_MAX : made_at(r->d, asker);
    if (giver != NULL && asker != NULL && bytes > 0)
        lentbook_replay_since(&r->book, giver, made_at(r->d, giver), asker,
                              asker_since, (uint64_t)bytes, e->ts_ms, data,
                              util_wall_ms());
    json_decref(data);
    return ACCEL_OK;
}

/* What apps lent and got before this start: the kept memory.reclaim
 * events of this node, oldest first (each carries both apps' totals). */
static void replay_book(struct reclaim *r)
{
    /* what is older than the book keeps would be skipped anyway */
    struct store_event_filter f = {
        .kind = "memory.reclaim",
        .since_ms = util_wall_ms() - LENTBOOK_MAX_AGE_MS};
    enum accel_err err;

    lentbook_init(&r->book);
    pthread_mutex_lock(&r->d->lock);
    err = store_events_query(r->d->store, &f, replay_one, r);
    pthread_mutex_unlock(&r->d->lock);
    if (err != ACCEL_OK)
        log_warn("elastic memory: the apps' lent and got records were not "
                 "read back (%s): they start again at 0",
                 accel_strerror(err));
}

enum accel_err reclaim_start(struct accel_daemon *d)
{
    struct reclaim *r = xcalloc(1, sizeof(*r));
    char *rundir = appsetup_run_dir(d);

    r->d = d;
    r->lfd = -1;
    r->stop_pipe[0] = r->stop_pipe[1] = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->idle, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&r->answered, &ca);
        pthread_condattr_destroy(&ca);
    }
    if (ledger_reclaim_socket_path(r->path, sizeof r->path, rundir) !=
            ACCEL_OK ||
        (r->lfd = listen_at(r->path)) < 0 ||
        pipe2(r->stop_pipe, O_CLOEXEC) != 0) {
        log_warn("elastic memory: cannot listen on %s (%s): a short "
                 "allocation fails as on a full card", r->path,
                 strerror(errno));
        free(rundir);
        if (r->lfd >= 0)
            close(r->lfd);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->idle);
        pthread_cond_destroy(&r->answered);
        free(r);
        return ACCEL_ESYS;
    }
    free(rundir);
    replay_book(r);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (nvml_open(&r->nv, &r->nvml_cause) != ACCEL_OK)
        r->nv = NULL;
    if (pthread_create(&r->thread, NULL, accept_thread, r) != 0) {
        close(r->lfd);
        unlink(r->path);
        close(r->stop_pipe[0]);
        close(r->stop_pipe[1]);
        nvml_close(r->nv);
        free(r->nvml_cause);
        curl_global_cleanup();
        free(r);
        return ACCEL_ESYS;
    }
    d->reclaim = r;
    return ACCEL_OK;
}

void reclaim_stop(struct accel_daemon *d)
{
    struct reclaim *r = d->reclaim;

    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_mutex_unlock(&r->mu);
    (void)!write(r->stop_pipe[1], "x", 1);
    pthread_join(r->thread, NULL);
    /* the asks in flight end within their wait (they see stopping) */
    pthread_mutex_lock(&r->mu);
    while (r->workers > 0)
        pthread_cond_wait(&r->idle, &r->mu);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&d->lock);
    d->reclaim = NULL;
    pthread_mutex_unlock(&d->lock);
    close(r->lfd);
    unlink(r->path);
    close(r->stop_pipe[0]);
    close(r->stop_pipe[1]);
    nvml_close(r->nv);
    free(r->nvml_cause);
    curl_global_cleanup();
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->idle);
    pthread_cond_destroy(&r->answered);
    free(r);
}

bool reclaim_give_back(struct accel_daemon *d, const char *app,
                       const char *dev_id, uint64_t bytes, const char *why)
{
    struct reclaim *r;
    struct job *j;
    struct app *a;
    int dev;
    bool has = false;

    pthread_mutex_lock(&d->lock);
    r = d->reclaim;
    a = state_app_find(d, app);
    dev = state_dev_find(d, dev_id);
    if (r != NULL && a != NULL && dev >= 0 && a->pid > 0 &&
        state_app_runs_here(d, a)) {
        const struct manifest_reclaim *m =
            manifest_reclaim_of(&a->m, d->snap.devs[dev].type);
        has = m != NULL && m->kind != MANIFEST_RECLAIM_NONE;
    }
    pthread_mutex_unlock(&d->lock);
    if (!has)
        return false;
    /* one in flight for this app and device already: it asks for what
     * the app holds above its quota, which covers this cut too */
    if (!giving_take(r, app, dev_id))
        return true;
    j = xcalloc(1, sizeof(*j));
    j->r = r;
    j->fd = -1;
    j->bytes = bytes;
    util_strlcpy(j->app, app, sizeof j->app);
    util_strlcpy(j->dev, dev_id, sizeof j->dev);
    util_strlcpy(j->why, why ? why : "quota", sizeof j->why);
    if (!spawn(r, give_back_thread, j)) {
        giving_release(r, app, dev_id);
        free(j);
        return false;
    }
    return true;
}

static json_t *side_json(const struct lent_side *s, const char *peer_key)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:s}", "bytes",
                     (json_int_t)s->bytes, "count", (json_int_t)s->count,
                     "lastAt", (json_int_t)s->at, "lastBytes",
                     (json_int_t)s->last, peer_key, s->peer);
}

void reclaim_app_removed(struct accel_daemon *d, const char *app)
{
    struct reclaim *r = d->reclaim;

    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    lentbook_forget(&r->book, app);
    for (size_t i = r->nunhelpful; i-- > 0;) /* any device */
        if (strcmp(r->unhelpful[i].app, app) == 0)
            r->unhelpful[i] = r->unhelpful[--r->nunhelpful];
    pthread_mutex_unlock(&r->mu);
}

json_t *reclaim_app_json(struct accel_daemon *d, const char *app)
{
    struct reclaim *r = d->reclaim;
    const struct lent_record *c;
    json_t *o = NULL;

    if (r == NULL)
        return NULL;
    pthread_mutex_lock(&r->mu);
    c = lentbook_find(&r->book, app);
    if (c != NULL) {
        o = json_object();
        if (c->lent.count > 0)
            json_object_set_new(o, "lent", side_json(&c->lent, "lastTo"));
        if (c->got.count > 0)
            json_object_set_new(o, "reclaimed",
                                side_json(&c->got, "lastFrom"));
    }
    pthread_mutex_unlock(&r->mu);
    return o;
}

char *reclaim_metrics(struct accel_daemon *d)
{
    struct reclaim *r = d->reclaim;
    char *s, *prev;

    if (r == NULL)
        return xstrdup("");
    pthread_mutex_lock(&r->mu);
    s = xasprintf(
        "# HELP accel_reclaim_asks_total Allocations short on the card that "
        "asked acceld for memory (elastic memory), by outcome.\n"
        "# TYPE accel_reclaim_asks_total counter\n"
        "accel_reclaim_asks_total{outcome=\"granted\"} %llu\n"
        "accel_reclaim_asks_total{outcome=\"refused\"} %llu\n"
        "# HELP accel_reclaim_seconds_total Time the asks waited.\n"
        "# TYPE accel_reclaim_seconds_total counter\n"
        "accel_reclaim_seconds_total %.6f\n"
        "# HELP accel_reclaim_actions_total Reclaim actions called.\n"
        "# TYPE accel_reclaim_actions_total counter\n"
        "accel_reclaim_actions_total %llu\n"
        "# HELP accel_reclaim_bytes_total Bytes apps gave back for others.\n"
        "# TYPE accel_reclaim_bytes_total counter\n"
        "accel_reclaim_bytes_total %llu\n"
        "# HELP accel_reclaim_wakes_total vLLM apps woken up once the card "
        "had their memory free again.\n"
        "# TYPE accel_reclaim_wakes_total counter\n"
        "accel_reclaim_wakes_total %llu\n"
        "# HELP accel_app_memory_lent_bytes_total Bytes an app gave back "
        "for others.\n# TYPE accel_app_memory_lent_bytes_total counter\n"
        "# HELP accel_app_memory_reclaimed_bytes_total Bytes others gave "
        "back for an app.\n"
        "# TYPE accel_app_memory_reclaimed_bytes_total counter\n",
        (unsigned long long)r->granted, (unsigned long long)r->refused,
        r->seconds_sum, (unsigned long long)r->calls,
        (unsigned long long)r->bytes_reclaimed,
        (unsigned long long)r->wakes);
    lentbook_prune(&r->book, util_wall_ms());
    for (size_t i = 0; i < r->book.n; i++) {
        const struct lent_record *c = &r->book.rec[i];
        prev = s;
        s = xasprintf("%saccel_app_memory_lent_bytes_total{app=\"%s\"} %llu\n"
                      "accel_app_memory_reclaimed_bytes_total{app=\"%s\"} "
                      "%llu\n",
                      prev, c->app, (unsigned long long)c->lent.bytes,
                      c->app, (unsigned long long)c->got.bytes);
        free(prev);
    }
    pthread_mutex_unlock(&r->mu);
    return s;
}
