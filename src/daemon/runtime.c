/* SPDX-License-Identifier: MIT */
/*
 * runtime.c: starts an app's process with the environment of its bound
 * devices (SPEC 4.1, 8.2), stops its process group, and supervises: a
 * thread polls every running app and turns an exit into stopped/failed
 * with its devices released.
 */
#include "common/accel_setup.h"
#include "daemon/runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/broker.h"
#include "daemon/identity.h"
#include "daemon/ledger.h"
#include "daemon/log.h"
#include "daemon/ops.h"
#include "daemon/proc.h"
#include "daemon/state.h"

#define SUPERVISE_MS 200
#define MAX_ENV 512

bool runtime_runs_here(struct accel_daemon *d, const struct app *a)
{
    if (a->m.run.argv == NULL)
        return false;
    for (size_t i = 0; i < a->nrows; i++)
        if (!d->ninfo[d->snap.devs[a->rows[i].dev].node].local)
            return false;
    return true;
}

/* "GPU-a,GPU-b" of the app's NVIDIA devices. */
static char *visible_devices(struct accel_daemon *d, const struct app *a)
{
    char *s = xstrdup("");
    for (size_t i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        char *n;
        if (x->type != ACCEL_TYPE_NVIDIA && x->type != ACCEL_TYPE_NVIDIA_GB10)
            continue;
        n = xasprintf("%s%s%s", s, s[0] ? "," : "", x->id);
        free(s);
        s = n;
    }
    return s;
}

static bool needs_shim(struct accel_daemon *d, const struct app *a)
{
    for (size_t i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        if (x->type == ACCEL_TYPE_NVIDIA && x->st != ACCEL_SUPPORT_EXCLUSIVE)
            return true;
    }
    return false;
}

/* The CUDA ordinal of row i inside the app: its position among the app's
 * NVIDIA rows, the order of CUDA_VISIBLE_DEVICES. -1 for other types. */
static int cuda_ordinal(struct accel_daemon *d, const struct app *a, size_t i)
{
    int ord = 0;
    for (size_t k = 0; k < a->nrows; k++) {
        enum accel_type t = d->snap.devs[a->rows[k].dev].type;
        bool cuda = t == ACCEL_TYPE_NVIDIA || t == ACCEL_TYPE_NVIDIA_GB10;
        if (k == i)
            return cuda ? ord : -1;
        ord += cuda;
    }
    return -1;
}

/* Is row i a Memory-slicing quota the shim enforces? */
static bool quota_row(struct accel_daemon *d, const struct app *a, size_t i)
{
    const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
    return x->type == ACCEL_TYPE_NVIDIA && x->st == ACCEL_SUPPORT_MEMSLICE &&
           a->rows[i].memory > 0;
}

static char *run_dir(struct accel_daemon *d)
{
    return xasprintf("%s/run", d->cfg.data_dir);
}

static char *config_path(struct accel_daemon *d, const char *app)
{
    return xasprintf("%s/run/apps/%s/shim.conf", d->cfg.data_dir, app);
}

static void mkdirs(const char *path)
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

/* run/apps/<app>: root-owned, readable by the app's group only (0750), so
 * the app reads its config and cannot replace it; other apps see nothing. */
static enum accel_err config_dir_for(const char *dir,
                                     const struct identity_run *who)
{
    if (who->drop && chown(dir, 0, who->gid) != 0)
        return ACCEL_ESYS;
    return chmod(dir, who->drop ? 0750 : 0755) == 0 ? ACCEL_OK : ACCEL_ESYS;
}

/*
 * Create the ledger of every Memory-slicing row (the limit is the row's
 * quota) and write the app's read-only shim config naming them. Returns
 * the config path (caller frees) or NULL with *cause set.
 */
static char *write_shim_config(struct accel_daemon *d, const struct app *a,
                               const struct identity_run *who, char **cause)
{
    struct ledger_device devs[ADM_MAX_SELECTION];
    char paths[ADM_MAX_SELECTION][512];
    char *rundir = run_dir(d), *cfg = config_path(d, a->name), *dir;
    size_t n = 0;
    enum accel_err rc = ACCEL_OK;

    for (size_t i = 0; i < a->nrows && rc == ACCEL_OK; i++) {
        int ord = cuda_ordinal(d, a, i);
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        if (x->type == ACCEL_TYPE_NVIDIA && x->st == ACCEL_SUPPORT_TIMESLICE &&
            n < ADM_MAX_SELECTION &&
            broker_socket_path(paths[n], sizeof paths[n], d->cfg.data_dir,
                               x->id) == ACCEL_OK) { /* time slicing */
            devs[n] = (struct ledger_device){.ordinal = ord, .uuid = x->id,
                                             .ts_socket = paths[n]};
            n++;
            continue;
        }
        if (!quota_row(d, a, i) || n == ADM_MAX_SELECTION)
            continue;
        rc = ledger_path(paths[n], sizeof paths[n], rundir, a->name, ord);
        if (rc == ACCEL_OK)
            rc = ledger_create(paths[n], a->name, ord,
                               d->snap.devs[a->rows[i].dev].id,
                               a->rows[i].memory, (uid_t)-1,
                               who->drop ? who->gid : (gid_t)-1);
        devs[n] = (struct ledger_device){ord, a->rows[i].memory, paths[n],
                                         d->snap.devs[a->rows[i].dev].id, NULL};
        n++;
    }
    dir = xstrdup(cfg);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    if (rc == ACCEL_OK)
        rc = config_dir_for(dir, who);
    if (rc == ACCEL_OK)
        rc = ledger_write_config(cfg, a->name, devs, n);
    free(dir);
    free(rundir);
    if (rc != ACCEL_OK) {
        *cause = xasprintf("cannot prepare the memory quota of '%s': %s",
                           a->name, accel_strerror(rc));
        free(cfg);
        return NULL;
    }
    return cfg;
}

void runtime_release_files(struct accel_daemon *d, const struct app *a)
{
    char *rundir = run_dir(d), *cfg = config_path(d, a->name);
    char path[512];
    for (size_t i = 0; i < a->nrows; i++) {
        if (quota_row(d, a, i) &&
            ledger_path(path, sizeof path, rundir, a->name,
                        cuda_ordinal(d, a, i)) == ACCEL_OK)
            ledger_remove(path);
    }
    unlink(cfg);
    free(cfg);
    free(rundir);
}

/* Which of acceld's own variables an app inherits: none that carry
 * enforcement (acceld sets those itself) and none that describe acceld's
 * user (the app gets its own HOME, USER, LOGNAME). */
static int inherit_var(const char *entry)
{
    static const char *const own[] = {"HOME=", "USER=", "LOGNAME=",
                                      "XDG_RUNTIME_DIR=", "MAIL="};

    if (manifest_env_reserved(entry))
        return 0;
    for (size_t i = 0; i < sizeof(own) / sizeof(*own); i++)
        if (strncmp(entry, own[i], strlen(own[i])) == 0)
            return 0;
    return 1;
}

/* LD_PRELOAD: the shim first (when it is needed), then run.preload. */
static char *preload_value(struct accel_daemon *d, const struct app *a,
                           const char *cfg)
{
    char *v = xstrdup(cfg ? d->shim_path : "");

    for (char **p = a->m.run.preload; p != NULL && *p != NULL; p++) {
        char *n = xasprintf("%s%s%s", v, v[0] ? ":" : "", *p);
        free(v);
        v = n;
    }
    return v;
}

/*
 * The app's variables: identity first, then run.env (which may replace
 * HOME, USER or LOGNAME), then acceld's enforcement variables last, so
 * they win over anything before them (proc.c keeps the last entry of a
 * key). A reserved key in a stored run.env (refused at install since SPEC
 * 3, but an older database may hold one) is dropped.
 */
static char **build_env(struct accel_daemon *d, const struct app *a,
                        const char *cfg, const struct identity_run *who)
{
    char **env = xcalloc(MAX_ENV + 16, sizeof(char *));
    size_t n = 0;
    char *vis = visible_devices(d, a), *pre = preload_value(d, a, cfg);
    const char *log = getenv("ACCEL_LOG");

    env[n++] = xasprintf("HOME=%s", who->home);
    env[n++] = xasprintf("USER=%s", who->user);
    env[n++] = xasprintf("LOGNAME=%s", who->user);
    for (char **p = a->m.run.env; p && *p && n < MAX_ENV; p++)
        if (!manifest_env_reserved(*p))
            env[n++] = xstrdup(*p);
    if (log != NULL) /* acceld's own shim logging setting */
        env[n++] = xasprintf("ACCEL_LOG=%s", log);
    env[n++] = xasprintf("ACCEL_APP=%s", a->name);
    if (cfg)
        env[n++] = xasprintf("ACCEL_CONFIG=%s", cfg);
    if (vis[0]) {
        env[n++] = xasprintf("CUDA_VISIBLE_DEVICES=%s", vis);
        env[n++] = xasprintf("NVIDIA_VISIBLE_DEVICES=%s", vis);
    } else if (a->nrows > 0) {
        env[n++] = xstrdup("CUDA_VISIBLE_DEVICES=");
    }
    if (pre[0])
        env[n++] = xasprintf("LD_PRELOAD=%s", pre);
    free(pre);
    free(vis);
    return env;
}

static void free_env(char **env)
{
    for (char **p = env; *p; p++)
        free(*p);
    free(env);
}

enum accel_err runtime_start(struct accel_daemon *d, struct app *a,
                             char **cause)
{
    char *logdir = xasprintf("%s/logs", d->cfg.data_dir);
    char *logpath = xasprintf("%s/%s.log", logdir, a->name);
    char **env;
    char *cfg = NULL;
    struct proc_handle h;
    struct identity_run who;
    struct proc_cred cred;
    struct proc_spec spec = {
        .name = a->name,
        .argv = a->m.run.argv,
        .inherit = inherit_var,
        .log_path = logpath,
    };
    enum accel_err rc;

    if (mkdir(logdir, 0700) != 0 && errno != EEXIST)
        log_warn("cannot create %s: %s", logdir, strerror(errno));
    rc = identity_for_app(d, a, &who, cause);
    if (rc != ACCEL_OK) {
        free(logpath);
        free(logdir);
        return rc;
    }
    if (d->shim_path && needs_shim(d, a)) {
        cfg = write_shim_config(d, a, &who, cause);
        if (cfg == NULL) {
            identity_run_release(&who);
            free(logpath);
            free(logdir);
            return ACCEL_ESYS;
        }
    }
    cred = (struct proc_cred){.uid = who.uid, .gid = who.gid};
    spec.cred = who.drop ? &cred : NULL;
    spec.workdir = a->m.run.workdir ? a->m.run.workdir : who.home;
    env = build_env(d, a, cfg, &who);
    spec.env = env;
    rc = proc_start(&spec, &h, cause);
    if (rc == ACCEL_OK) {
        a->pid = h.pid;
        a->pid_start = h.start_time;
        state_event(d, "app.start", a->name, NULL, NULL,
                    json_pack("{s:i}", "pid", (int)h.pid),
                    "app %s started (pid %d)", a->name, (int)h.pid);
    }
    free_env(env);
    identity_run_release(&who);
    free(cfg);
    free(logpath);
    free(logdir);
    return rc;
}

enum accel_err runtime_stop(const char *name, pid_t pid, uint64_t start,
                            int timeout_s, int *out_status)
{
    struct proc_handle h = {.pid = pid, .start_time = start};
    char *cause = NULL;
    enum accel_err rc = proc_stop(&h, "ACCEL_APP", name,
                                  (unsigned)timeout_s * 1000u, 5000u,
                                  out_status, &cause);
    if (rc != ACCEL_OK)
        log_warn("stopping %s: %s", name, cause ? cause : accel_strerror(rc));
    free(cause);
    return rc;
}

struct exited {
    char *name;
    int status;
};

/* Apps whose leader is gone (lock held). */
static size_t find_exited(struct accel_daemon *d, struct exited *out,
                          size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < d->napps && n < max; i++) {
        struct app *a = d->apps[i];
        int status = -1;
        if (a->pid <= 0 || a->state == APP_STOPPING)
            continue;
        if (proc_reap((pid_t)a->pid, &status) == ACCEL_OK) {
            out[n].name = xstrdup(a->name);
            out[n++].status = status;
        } else if (!proc_alive((pid_t)a->pid, a->pid_start) &&
                   !proc_group_alive((pid_t)a->pid)) {
            out[n].name = xstrdup(a->name);
            out[n++].status = -1;
        }
    }
    return n;
}

/* One ledger to read: which app row it belongs to. */
struct usage_probe {
    char *app;         /* app name */
    size_t row;        /* row index at gather time */
    char path[512];    /* ledger file */
    uint64_t used;     /* read outside the lock */
    bool ok;
};

/* Gather the ledgers of running apps (lock held). */
static size_t gather_probes(struct accel_daemon *d, struct usage_probe *p,
                            size_t max)
{
    char *rundir = run_dir(d);
    size_t n = 0;
    for (size_t i = 0; i < d->napps && n < max; i++) {
        struct app *a = d->apps[i];
        if (a->pid <= 0)
            continue;
        for (size_t k = 0; k < a->nrows && n < max; k++) {
            if (!quota_row(d, a, k) ||
                ledger_path(p[n].path, sizeof p[n].path, rundir, a->name,
                            cuda_ordinal(d, a, k)) != ACCEL_OK)
                continue;
            p[n].app = xstrdup(a->name);
            p[n].row = k;
            n++;
        }
    }
    free(rundir);
    return n;
}

/*
 * Refresh the apps' live memory use from their ledgers: gather the paths
 * under the lock, read the files without it, store the figures under it
 * (rows that changed meanwhile are skipped: the next round fixes them).
 */
static void refresh_usage(struct accel_daemon *d)
{
    struct usage_probe *p = xcalloc(256, sizeof(*p));
    size_t n;

    pthread_mutex_lock(&d->lock);
    n = gather_probes(d, p, 256);
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++) {
        struct ledger_usage u;
        p[i].ok = ledger_read(p[i].path, &u) == ACCEL_OK;
        p[i].used = p[i].ok ? u.used : 0;
    }
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps; i++)
        d->apps[i]->usage = 0;
    for (size_t i = 0; i < n; i++) {
        struct app *a = state_app_find(d, p[i].app);
        if (a && p[i].ok && p[i].row < a->nrows && a->row_usage) {
            a->row_usage[p[i].row] = p[i].used;
            a->usage += p[i].used;
        }
        free(p[i].app);
    }
    pthread_mutex_unlock(&d->lock);
    free(p);
}

static void *supervise(void *arg)
{
    struct accel_daemon *d = arg;
    struct exited ex[64];
    unsigned tick = 0;

    while (!d->stopping) {
        size_t n;
        usleep(SUPERVISE_MS * 1000);
        if (++tick % 5 == 0)
            refresh_usage(d);
        pthread_mutex_lock(&d->lock);
        n = find_exited(d, ex, 64);
        pthread_mutex_unlock(&d->lock);
        for (size_t i = 0; i < n; i++) {
            ops_app_exited(d, ex[i].name, ex[i].status);
            free(ex[i].name);
        }
    }
    return NULL;
}

enum accel_err runtime_supervisor_start(struct accel_daemon *d)
{
    if (pthread_create(&d->supervisor, NULL, supervise, d) != 0)
        return ACCEL_ESYS;
    d->supervisor_running = true;
    return ACCEL_OK;
}

void runtime_supervisor_stop(struct accel_daemon *d)
{
    if (!d->supervisor_running)
        return;
    d->stopping = 1;
    pthread_join(d->supervisor, NULL);
    d->supervisor_running = false;
}
