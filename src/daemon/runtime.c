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

static char **build_env(struct accel_daemon *d, const struct app *a)
{
    char **env = xcalloc(MAX_ENV + 8, sizeof(char *));
    size_t n = 0;
    char *vis = visible_devices(d, a);

    for (char **p = a->m.run.env; p && *p && n < MAX_ENV; p++)
        env[n++] = xstrdup(*p);
    env[n++] = xasprintf("ACCEL_APP=%s", a->name);
    env[n++] = xasprintf("ACCEL_CONFIG=%s/run/%s", d->cfg.data_dir, a->name);
    if (vis[0]) {
        env[n++] = xasprintf("CUDA_VISIBLE_DEVICES=%s", vis);
        env[n++] = xasprintf("NVIDIA_VISIBLE_DEVICES=%s", vis);
    } else if (a->nrows > 0) {
        env[n++] = xstrdup("CUDA_VISIBLE_DEVICES=");
    }
    if (d->shim_path && needs_shim(d, a))
        env[n++] = xasprintf("LD_PRELOAD=%s", d->shim_path);
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
    char **env = build_env(d, a);
    struct proc_handle h;
    struct proc_spec spec = {
        .name = a->name,
        .argv = a->m.run.argv,
        .env = env,
        .workdir = a->m.run.workdir,
        .log_path = logpath,
    };
    enum accel_err rc;

    if (mkdir(logdir, 0755) != 0 && errno != EEXIST)
        log_warn("cannot create %s: %s", logdir, strerror(errno));
    rc = proc_start(&spec, &h, cause);
    if (rc == ACCEL_OK) {
        a->pid = h.pid;
        a->pid_start = h.start_time;
        state_event(d, "app.start", a->name, NULL, NULL,
                    json_pack("{s:i}", "pid", (int)h.pid),
                    "app %s started (pid %d)", a->name, (int)h.pid);
    }
    free_env(env);
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

static void *supervise(void *arg)
{
    struct accel_daemon *d = arg;
    struct exited ex[64];

    while (!d->stopping) {
        size_t n;
        usleep(SUPERVISE_MS * 1000);
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
