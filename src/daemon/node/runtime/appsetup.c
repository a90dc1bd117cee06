/* SPDX-License-Identifier: MIT */
/*
 * appsetup.c: what a start prepares for an app on this node (appsetup.h):
 * its shim files and its cgroup's limits.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/appsetup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/devices/ctxprobe.h"
#include "daemon/node/slice/broker.h"

bool appsetup_row_local(struct accel_daemon *d, const struct app *a, size_t i)
{
    return d->ninfo[d->snap.devs[a->rows[i].dev].node].local;
}

/* AMD types, whose quota the shim holds through the HIP runtime (a GB10's
 * it holds through CUDA, as an nvidia's). */
static bool hip_type(enum accel_type t)
{
    return t == ACCEL_TYPE_AMD || t == ACCEL_TYPE_AMD_GPU;
}

/* The types whose shim asks acceld on a short card (elastic memory, SPEC
 * 4.4): NVIDIA through the CUDA hooks, AMD through the HIP hooks. */
static bool elastic_type(enum accel_type t)
{
    return t == ACCEL_TYPE_NVIDIA || hip_type(t);
}

bool appsetup_needs_shim(struct accel_daemon *d, const struct app *a)
{
    for (size_t i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        if (appsetup_row_local(d, a, i) && x->type == ACCEL_TYPE_NVIDIA &&
            x->st != ACCEL_SUPPORT_EXCLUSIVE)
            return true;
        if (appsetup_row_local(d, a, i) && x->st == ACCEL_SUPPORT_MEMSLICE &&
            (hip_type(x->type) || x->type == ACCEL_TYPE_NVIDIA_GB10))
            return true;
    }
    return false;
}

int appsetup_ordinal(struct accel_daemon *d, const struct app *a, size_t i)
{
    enum accel_type ti = d->snap.devs[a->rows[i].dev].type;
    int ord = 0;
    for (size_t k = 0; k < a->nrows; k++) {
        enum accel_type t = d->snap.devs[a->rows[k].dev].type;
        bool cuda = (t == ACCEL_TYPE_NVIDIA || t == ACCEL_TYPE_NVIDIA_GB10);
        bool same = hip_type(ti) ? hip_type(t) : cuda;
        if (k == i)
            return same && appsetup_row_local(d, a, k) ? ord : -1;
        ord += same && appsetup_row_local(d, a, k);
    }
    return -1;
}

bool appsetup_quota_row(struct accel_daemon *d, const struct app *a, size_t i)
{
    const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
    return (x->type == ACCEL_TYPE_NVIDIA || x->type == ACCEL_TYPE_NVIDIA_GB10 ||
            hip_type(x->type)) &&
           x->st == ACCEL_SUPPORT_MEMSLICE && a->rows[i].memory > 0;
}

char *appsetup_run_dir(struct accel_daemon *d)
{
    return xasprintf("%s/run", d->cfg.data_dir);
}

char *appsetup_config_path(struct accel_daemon *d, const char *app)
{
    return xasprintf("%s/run/apps/%s/shim.conf", d->cfg.data_dir, app);
}

void appsetup_mkdirs(const char *path)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
    mkdir(p, 0755);
    free(p);
}

char *appsetup_events_path(struct accel_daemon *d, const char *app)
{
    return xasprintf("%s/run/apps/%s/shim.events", d->cfg.data_dir, app);
}

/* The app's shim.events, empty at each start: the shim appends a line
 * when a looked-up name goes by unheld (node/unheld.c reads it). Group-
 * writable by the app's group only (0620); without a uid drop, 0600. */
static enum accel_err events_file_for(struct accel_daemon *d, const char *app,
                                      const struct identity_run *who)
{
    char *path = appsetup_events_path(d, app);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                  0600);
    enum accel_err rc = ACCEL_ESYS;

    if (fd >= 0 && (!who->drop || (fchown(fd, 0, who->gid) == 0 &&
                                   fchmod(fd, 0620) == 0)))
        rc = ACCEL_OK;
    if (fd >= 0)
        close(fd);
    free(path);
    return rc;
}

/* run/apps/<app>: root-owned, readable by the app's group only (0750), so
 * the app reads its config and cannot replace it; other apps see nothing. */
static enum accel_err config_dir_for(const char *dir,
                                     const struct identity_run *who,
                                     const struct appsetup_files *f)
{
    bool group = who->drop || f->dir_group;
    gid_t gid = who->drop ? who->gid : f->dir_gid;

    if (group && chown(dir, 0, gid) != 0)
        return ACCEL_ESYS;
    return chmod(dir, group ? 0750 : 0755) == 0 ? ACCEL_OK : ACCEL_ESYS;
}

/* Does b share a device with a? */
static bool share_a_device(const struct app *a, const struct app *b)
{
    for (size_t i = 0; i < a->nrows; i++)
        for (size_t k = 0; k < b->nrows; k++)
            if (a->rows[i].dev == b->rows[k].dev)
                return true;
    return false;
}

/* f->voters: the apps a trusts for a context's size (lock held). */
static void plan_voters(struct accel_daemon *d, const struct app *a,
                        struct appsetup_files *f)
{
    f->nvoters = 0;
    for (size_t i = 0; i < d->napps && f->nvoters < APPSETUP_VOTERS; i++) {
        const struct app *b = d->apps[i];
        const struct user_rec *u;
        bool trusted = strcmp(b->owner, a->owner) == 0 ||
                       strcmp(b->owner, "shared") == 0 ||
                       ((u = state_user_find(d, b->owner)) != NULL && u->admin);
        if (b == a || strcmp(b->name, a->name) == 0 || !trusted ||
            !share_a_device(a, b))
            continue; /* itself, another member's, or elsewhere */
        util_strlcpy(f->voters[f->nvoters++], b->name,
                     sizeof f->voters[0]);
    }
}

enum accel_err appsetup_plan(struct accel_daemon *d, const struct app *a,
                             struct appsetup_files *f)
{
    struct ledger_device *devs = f->devs;
    char *rundir = appsetup_run_dir(d);
    size_t n = 0;
    enum accel_err rc = ACCEL_OK;

    f->dir_group = false;
    f->reclaim[0] = '\0';
    for (size_t i = 0; i < ADM_MAX_SELECTION; i++)
        f->ctx[i] = UINT64_MAX;
    plan_voters(d, a, f);
    for (size_t i = 0; i < a->nrows && rc == ACCEL_OK; i++) {
        int ord = appsetup_ordinal(d, a, i);
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        if (!appsetup_row_local(d, a, i))
            continue;
        if (x->type == ACCEL_TYPE_NVIDIA && x->st == ACCEL_SUPPORT_TIMESLICE &&
            n < ADM_MAX_SELECTION &&
            broker_socket_path(f->paths[n], sizeof f->paths[n],
                               d->cfg.data_dir, x->id) == ACCEL_OK) {
            /* time slicing */
            util_strlcpy(f->ids[n], x->id, sizeof f->ids[n]);
            devs[n] = (struct ledger_device){.ordinal = ord,
                                             .uuid = f->ids[n],
                                             .ts_socket = f->paths[n]};
            /* the card's ledger: the apps' memory that cannot be evicted
             * at a turn switch, counted together (issue 35); no file: the
             * broker hands each admitted process its sealed memfd */
            devs[n].card = LEDGER_CARD_BROKER;
            n++;
            continue;
        }
        if (!appsetup_quota_row(d, a, i) || n == ADM_MAX_SELECTION)
            continue;
        rc = ledger_path(f->paths[n], sizeof f->paths[n], rundir, a->name,
                         ord);
        util_strlcpy(f->ids[n], x->id, sizeof f->ids[n]);
        devs[n] = (struct ledger_device){ord, a->rows[i].memory, f->paths[n],
                                         f->ids[n], NULL, NULL, NULL};
        (void)ctxprobe_bytes(d, x->id, &f->ctx[n]);
        /* elastic memory: a short allocation asks acceld (SPEC 4.4), on
         * NVIDIA (the CUDA hooks) and AMD (the HIP hooks, issue 46) */
        if (elastic_type(x->type) && f->reclaim[0] == '\0' &&
            ledger_reclaim_socket_path(f->reclaim, sizeof f->reclaim,
                                       rundir) != ACCEL_OK)
            f->reclaim[0] = '\0';
        if (elastic_type(x->type) && f->reclaim[0] != '\0')
            devs[n].reclaim = f->reclaim;
        n++;
    }
    f->n = n;
    free(rundir);
    return rc;
}

enum accel_err appsetup_write(struct accel_daemon *d, const char *app,
                              const struct identity_run *who,
                              struct appsetup_files *f)
{
    char *cfg = appsetup_config_path(d, app), *dir;
    enum accel_err rc = ACCEL_OK;
    /* the ledgers' group: the app's, or an external app's owner's */
    gid_t group = who->drop ? who->gid
                            : f->dir_group ? f->dir_gid : (gid_t)-1;
    const char *voters[APPSETUP_VOTERS];

    for (size_t i = 0; i < f->nvoters; i++)
        voters[i] = f->voters[i];

    for (size_t i = 0; i < f->n && rc == ACCEL_OK; i++) {
        struct ledger_device *x = &f->devs[i];
        if (x->path != NULL)
            rc = ledger_create(x->path, app, x->ordinal, x->uuid, x->limit,
                               (uid_t)-1, group);
        /* a context's size acceld measured on the device, else one other
         * apps agree on: the app's first process on the device loads no
         * NVML (docs/internals/shim.md); a seed that cannot be written
         * leaves the measure to the shim */
        if (x->path != NULL && rc == ACCEL_OK && f->ctx[i] != UINT64_MAX)
            (void)ledger_seed_ctx_own(x->path, f->ctx[i]);
        else if (x->path != NULL && rc == ACCEL_OK)
            (void)ledger_seed_ctx(x->path, x->uuid, voters, f->nvoters,
                                  NULL);
    }
    dir = xstrdup(cfg);
    *strrchr(dir, '/') = '\0';
    appsetup_mkdirs(dir);
    if (rc == ACCEL_OK)
        rc = config_dir_for(dir, who, f);
    if (rc == ACCEL_OK)
        rc = ledger_write_config(cfg, app, f->devs, f->n);
    if (rc == ACCEL_OK)
        rc = events_file_for(d, app, who);
    free(dir);
    free(cfg);
    return rc;
}

struct cgroup_limits appsetup_limits(const struct app *a)
{
    const struct adm_req *r = state_app_req(a);
    struct cgroup_limits lim = { 0, 0, 0 };
    if (r) {
        lim.memory = r->lim_mem;
        lim.cpu_millis = r->lim_cpu;
    }
    return lim;
}
