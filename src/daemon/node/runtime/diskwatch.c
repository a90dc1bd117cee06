/* SPDX-License-Identifier: MIT */
/*
 * diskwatch.c: limitedDisk, the watched tier (SPEC 8.2). Once a pass the
 * supervisor (runtime.c) has the homes of the running and stopping apps
 * with a limitedDisk measured: each owner's home once, the tree and the
 * files the owner's processes hold open after unlinking them, without
 * the lock; an app past its limit is handed back to the supervisor's
 * callback under the lock, which stops it (or kills it if it is stopping
 * already). Only the owner's private home under the data directory is
 * measured, not a run.user's. docs/internals/runtime.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/diskwatch.h"

#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>

#include "common/quantity.h"
#include "common/util.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/proc/disk.h"
#include "daemon/node/proc/identity.h"
#include "daemon/state.h"

#define DISK_WATCH_MAX 256 /* apps with a limitedDisk checked per pass */

uint64_t diskwatch_limit(const struct app *a)
{
    const struct adm_req *r = state_app_req(a);
    return r ? r->lim_disk : 0;
}

/* Does the supervisor measure a's home against its limitedDisk? Only the
 * owner's private home under the data directory (not a run.user's). */
static bool disk_watched(const struct app *a)
{
    return a->m.run.user == NULL && diskwatch_limit(a) > 0;
}

/* One app whose home is measured, copied under the lock. */
struct disk_watch {
    char *app;             /* its name (owned) */
    char *home;            /* <home root>/<owner> (owned) */
    uint64_t limit;        /* limitedDisk */
    pid_t pid;             /* the run measured */
    uint32_t uid;          /* its processes' (their unlinked files count) */
    char *mark;            /* "/accel.slice/<instance>/": those in this
                              acceld's cgroups only; NULL = no cgroups */
    char *ctr;             /* a container app's "/accel.slice/<instance>/
                              <app>/" (its /dev/shm counts), else NULL */
    uint64_t used;         /* measured without the lock */
    uint64_t shm;          /* of used, its container's /dev/shm */
    enum accel_err rc;     /* ACCEL_ERANGE: past the walk's bounds */
};

/* An app whose home is measured: running, or stopping by a stop the
 * supervisor drives and has not killed yet (one that ignores SIGTERM for
 * its stopTimeoutSeconds still writes). */
static bool disk_measured(const struct app *a)
{
    return a->state == APP_RUNNING ||
           (a->state == APP_STOPPING && a->stop.active && !a->stop.killed);
}

static size_t gather_disk(struct accel_daemon *d, struct disk_watch *w,
                          size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < d->napps && n < max; i++) {
        struct app *a = d->apps[i];
        uint32_t uid, gid;
        if (a->pid <= 0 || !disk_measured(a) || !disk_watched(a) ||
            !state_app_runs_here(d, a) || state_app_multi(d, a) ||
            identity_app_uid(d, a, &uid, &gid) != ACCEL_OK)
            continue;
        w[n] = (struct disk_watch){
            .app = xstrdup(a->name),
            .home = identity_home(d, a->owner),
            .limit = diskwatch_limit(a),
            .pid = (pid_t)a->pid,
            .uid = uid,
            .mark = d->cg != NULL ? xasprintf("/accel.slice/%s/",
                                              d->cg->instance)
                                  : NULL,
            .ctr = d->cg != NULL && a->m.run.ctr.image != NULL
                       ? xasprintf("/accel.slice/%s/%s/", d->cg->instance,
                                   a->name)
                       : NULL};
        n++;
    }
    return n;
}

/* The sentence an app past its limitedDisk is stopped with. */
static char *disk_reason(const struct disk_watch *w)
{
    char used[32], lim[32];

    quantity_format_bytes(w->limit, lim, sizeof lim);
    if (w->rc == ACCEL_ERANGE)
        return xasprintf("stopped: its home %s cannot be measured for "
                         "limitedDisk %s (more than %u entries, more than "
                         "%u directories deep, a directory acceld cannot "
                         "read, or more than %u open files)", w->home, lim,
                         DISK_WALK_MAX_ENTRIES, DISK_WALK_MAX_DEPTH,
                         DISK_WALK_MAX_ENTRIES);
    disk_format(w->used, used, sizeof used);
    if (w->shm > 0) {
        char shm[32];
        disk_format(w->shm, shm, sizeof shm);
        return xasprintf("stopped: its home %s and its container's /dev/shm "
                         "use %s (%s in /dev/shm), past limitedDisk %s",
                         w->home, used, shm, lim);
    }
    return xasprintf("stopped: its home %s uses %s on disk, past "
                     "limitedDisk %s", w->home, used, lim);
}

/* The pid namespaces above a process (the fields of NSpid in the status
 * at path, "\nNSpid:\t<pid>[\t<pid>...]"), and in *last its pid in its
 * own namespace (0 when unreadable: 0 namespaces). */
static size_t ns_depth(const char *path, long *last)
{
    char buf[4096], *ns, *t;
    size_t n = 0;

    *last = 0;
    if (util_read_small(path, buf, sizeof buf) <= 0 ||
        (ns = strstr(buf, "\nNSpid:")) == NULL)
        return 0;
    ns[strcspn(ns + 1, "\n") + 1] = '\0';
    for (t = strchr(ns, '\t'); t != NULL; t = strchr(t + 1, '\t')) {
        *last = strtol(t + 1, NULL, 10);
        n++;
    }
    return n;
}

/* Is pid the init of a container in cgroup ctr (a line of its
 * /proc/<pid>/cgroup holds ctr, and it is pid 1 of a pid namespace one
 * below acceld's own: not of one a process of the container made)? */
static bool container_init(const char *pid, const char *ctr)
{
    char path[300], buf[4096];
    long own, in_ns;
    size_t depth = ns_depth("/proc/self/status", &own);

    snprintf(path, sizeof path, "/proc/%s/cgroup", pid);
    if (depth == 0 || util_read_small(path, buf, sizeof buf) <= 0 ||
        strstr(buf, ctr) == NULL)
        return false;
    snprintf(path, sizeof path, "/proc/%s/status", pid);
    return ns_depth(path, &in_ns) == depth + 1 && in_ns == 1;
}

/* The bytes used in the /dev/shm of the container in cgroup ctr (a tmpfs
 * of its own: its init's, through /proc/<pid>/root, where no process of
 * the container's user can change what is mounted); 0 when none. */
static uint64_t container_shm(const char *ctr)
{
    DIR *dir = opendir("/proc");
    struct dirent *e;
    uint64_t used = 0;

    while (dir != NULL && (e = readdir(dir)) != NULL) {
        char path[300];
        struct statfs fs;
        if (!isdigit((unsigned char)e->d_name[0]) ||
            !container_init(e->d_name, ctr))
            continue;
        snprintf(path, sizeof path, "/proc/%s/root/dev/shm", e->d_name);
        if (statfs(path, &fs) == 0 && fs.f_type == 0x01021994 /* tmpfs */ &&
            fs.f_blocks >= fs.f_bfree)
            used = (uint64_t)(fs.f_blocks - fs.f_bfree) * (uint64_t)fs.f_bsize;
        break;
    }
    if (dir != NULL)
        closedir(dir);
    return used;
}

/* Measure the home at w (used and rc): the tree, and the files the
 * owner's processes hold open after unlinking them on its file system. */
static void measure_home(struct disk_watch *w)
{
    struct stat sb;
    uint64_t held = 0;
    enum accel_err rc;

    w->rc = disk_usage(w->home, DISK_WALK_MAX_ENTRIES, &w->used, NULL);
    if (w->rc != ACCEL_OK || stat(w->home, &sb) != 0)
        return;
    rc = disk_unlinked_open("/proc", w->uid, w->mark, sb.st_dev,
                            DISK_WALK_MAX_ENTRIES, &held);
    w->used += held;
    if (rc == ACCEL_ERANGE)
        w->rc = rc;
    if (w->ctr != NULL) {
        w->shm = container_shm(w->ctr);
        w->used += w->shm;
    }
}

uint64_t diskwatch_pass(struct accel_daemon *d,
                        void (*over)(struct accel_daemon *d, struct app *a,
                                     const char *why))
{
    struct disk_watch *w = xcalloc(DISK_WATCH_MAX, sizeof(*w));
    uint64_t t0 = util_now_ns();
    size_t n;

    pthread_mutex_lock(&d->lock);
    n = gather_disk(d, w, DISK_WATCH_MAX);
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < i && strcmp(w[k].home, w[i].home) != 0)
            k++;
        if (k < i) { /* the owner's home, measured for another app */
            w[i].used = w[k].used - w[k].shm;
            w[i].rc = w[k].rc;
            if (w[i].ctr != NULL) {
                w[i].shm = container_shm(w[i].ctr);
                w[i].used += w[i].shm;
            }
            continue;
        }
        measure_home(&w[i]);
    }
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < n; i++) {
        struct app *a = state_app_find(d, w[i].app);
        char *why;
        if (a == NULL || a->pid != w[i].pid || !disk_measured(a) ||
            (w[i].rc != ACCEL_ERANGE &&
             (w[i].rc != ACCEL_OK || w[i].used <= w[i].limit)))
            continue;
        why = disk_reason(&w[i]);
        over(d, a, why);
        free(why);
    }
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++) {
        free(w[i].app);
        free(w[i].home);
        free(w[i].mark);
        free(w[i].ctr);
    }
    free(w);
    return (util_now_ns() - t0) / 1000000u;
}

