/* SPDX-License-Identifier: MIT */
/*
 * reconcile.c: the NVML refresh and the reconciler (SPEC 8.1, 8.3). One
 * thread runs a pass at start and every cfg.reconcile_ms: gather the apps'
 * identities under d->lock; scan NVML and map each process that holds a
 * device to an app from /proc without the lock; apply the outcome (device
 * presence, health, usage, foreign processes, apps `releasing`, releases
 * that may finish) under the lock; kill leftovers without it.
 *
 * It is not the supervisor (runtime.c notices exits) and does not place.
 * See docs/internals/reconciler.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/enforce/reconcile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/devices/ctxprobe.h"
#include "daemon/node/devices/discovery.h"
#include "daemon/node/devices/nvml.h"
#include "daemon/node/enforce/meter.h"
#include "daemon/node/enforce/unheld.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/runtime/launch.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/state.h"

#define ENVIRON_MAX (256u * 1024u) /* bytes of /proc/<pid>/environ read */
#define STAT_MAX 1024              /* bytes of /proc/<pid>/stat read */
#define KILL_MAX 256               /* signals sent in one pass */

struct reconcile {
    struct accel_daemon *d;  /* owner */
    pthread_t thread;        /* the pass loop */
    pthread_mutex_t mu;      /* guards stop and nv */
    pthread_cond_t cv;       /* wakes the loop at stop */
    bool stop;               /* set by reconcile_stop */
    struct nvml *nv;         /* NVML once loaded; closed only at stop */
    bool loaded;             /* under d->lock: NVML answered the last pass */
    char driver[64];         /* under d->lock: driver version or "" */
    char cuda[32];           /* under d->lock: CUDA version or "" */
    unsigned passes;         /* thread only: passes run so far */
    struct unheld_book unheld; /* thread only: the shims' events files read
                                  so far (node/unheld.h) */
    char **new_seen;         /* thread only: new GPUs already reported */
    size_t nnew_seen;        /* their number */
};

/* An app's identity, copied under the lock for the mapping outside it. */
struct app_ref {
    char *name;     /* app name (owned) */
    pid_t pid;      /* leader of the current run, 0 if none */
    pid_t last_pid; /* leader of the last run, 0 if unknown */
};

/* One process NVML lists on a device. */
struct seen_proc {
    pid_t pid;     /* as NVML reports it */
    uint64_t used; /* bytes, 0 unknown */
    char *app;     /* the app it belongs to (owned), NULL = none */
    bool alive;    /* /proc/<pid> exists */
    int sm;        /* its SM utilization, percent; -1 unknown */
    char ctr_engine[16]; /* a process of no app in a container: its
                            engine (docker, podman), else "" */
    char ctr_id[65];     /* and the container's ID */
};

/* One device of the scan with its processes. */
struct seen_gpu {
    struct nvml_gpu g;        /* what the scan says */
    struct seen_proc *procs;  /* its processes */
    size_t nprocs;            /* their number */
    bool procs_ok;            /* the process query answered */
};

/* Everything one pass learns outside the lock. */
struct pass {
    bool loaded;             /* NVML is loaded */
    bool scan_ok;            /* the device scan answered */
    char *status;            /* sentence for d->nvml_status (owned) */
    char driver[64];         /* driver version */
    char cuda[32];           /* CUDA version */
    struct seen_gpu *gpus;   /* the devices */
    size_t ngpus;            /* their number */
    pid_t kill_pid[KILL_MAX]; /* signals to send after the lock */
    int kill_sig[KILL_MAX];
    size_t nkill;
};

/* ---- /proc ---- */
#define TASK_PF_EXITING 0x00000004u /* include/linux/sched.h: in do_exit */

/* How many entries /proc/<pid>/<sub> lists (-1: it cannot be read). */
static long proc_entries(pid_t pid, const char *sub)
{
    char path[64];
    DIR *dp;
    struct dirent *e;
    long n = 0;

    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, sub);
    dp = opendir(path);
    if (dp == NULL)
        return -1;
    while ((e = readdir(dp)) != NULL)
        n += e->d_name[0] != '.';
    closedir(dp);
    return n;
}

/*
 * Process group of pid, or -1 when the process holds nothing on a device
 * any more: there is no such process, or every thread of it has ended (a
 * zombie: its cgroup line still shows the app's cgroup until it is
 * reaped), or it is exiting and has closed its files (a driver frees a
 * process's memory at the last close, before the process leaves its
 * cgroup and long before it is reaped: the supervisor may find the
 * cgroup empty while it is in between). A leader that ended by itself
 * (pthread_exit in main) shows as a zombie while its other threads run
 * and hold the process's files: alive. So is a process stopped in its
 * exit with its files still open (a tracer's PTRACE_EVENT_EXIT).
 */
static pid_t read_pgrp(pid_t pid)
{
    char path[64], buf[STAT_MAX], st;
    int ppid, pgrp;
    unsigned flags;
    const char *p;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (util_read_small(path, buf, sizeof buf) <= 0)
        return -1;
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 1, " %c %d %d %*d %*d %*d %u", &st, &ppid,
                            &pgrp, &flags) != 4)
        return -1;
    if ((st == 'Z' || st == 'X') && proc_entries(pid, "task") <= 1)
        return -1;
    if (st != 'Z' && st != 'X' && (flags & TASK_PF_EXITING) &&
        proc_entries(pid, "fd") == 0)
        return -1;
    return (pid_t)pgrp;
}

/* The value of ACCEL_APP in pid's environment into out; false if none. */
static bool env_app(pid_t pid, char *out, size_t len)
{
    static const char key[] = "ACCEL_APP=";
    char path[64];
    char *buf = xmalloc(ENVIRON_MAX);
    ssize_t n;
    bool found = false;

    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    n = util_read_small(path, buf, ENVIRON_MAX);
    for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(buf + i) + 1) {
        if (strncmp(buf + i, key, sizeof key - 1) == 0) {
            util_strlcpy(out, buf + i + sizeof key - 1, len);
            found = true;
            break;
        }
    }
    free(buf);
    return found;
}

/*
 * The app pid belongs to (allocated name) or NULL: a live process in an
 * app's cgroup, or whose group is an app's leader, or whose environment
 * says ACCEL_APP=<app>; a pid /proc no longer has that was an app's leader
 * (the driver still lists its context). *alive tells whether /proc has it.
 */
static char *map_pid(const struct cgroup_sys *cg, const struct app_ref *refs,
                     size_t n, pid_t pid, bool *alive)
{
    char val[ACCEL_NAME_MAX + 1];
    pid_t pg = read_pgrp(pid);

    *alive = pg >= 0;
    if (*alive && cgroup_pid_app(cg, pid, val, sizeof val)) {
        for (size_t i = 0; i < n; i++)
            if (strcmp(val, refs[i].name) == 0)
                return xstrdup(refs[i].name);
    }
    for (size_t i = 0; pg > 0 && i < n; i++)
        if ((refs[i].pid > 0 && pg == refs[i].pid) ||
            (refs[i].last_pid > 0 && pg == refs[i].last_pid))
            return xstrdup(refs[i].name);
    if (*alive && env_app(pid, val, sizeof val)) {
        for (size_t i = 0; i < n; i++)
            if (strcmp(val, refs[i].name) == 0)
                return xstrdup(refs[i].name);
    }
    for (size_t i = 0; !*alive && i < n; i++)
        if ((refs[i].pid > 0 && pid == refs[i].pid) ||
            (refs[i].last_pid > 0 && pid == refs[i].last_pid))
            return xstrdup(refs[i].name);
    return NULL;
}

/* ---- NVML, outside the lock ---- */

static struct nvml *get_nv(struct reconcile *r)
{
    struct nvml *nv;
    pthread_mutex_lock(&r->mu);
    nv = r->nv;
    pthread_mutex_unlock(&r->mu);
    return nv;
}

/* Load NVML if it is not yet; false with p->status set when it cannot. */
static bool ensure_nvml(struct reconcile *r, struct pass *p)
{
    struct nvml *nv = NULL;
    char *cause = NULL;
    if (get_nv(r))
        return true;
    if (nvml_open(&nv, &cause) != ACCEL_OK) {
        p->status = cause ? cause : xstrdup("NVML is not available");
        return false;
    }
    pthread_mutex_lock(&r->mu);
    r->nv = nv;
    pthread_mutex_unlock(&r->mu);
    return true;
}

/* Per-process SM utilization of the samples since since_us onto s's
 * processes (unknown stays -1). */
static void query_putil(struct nvml *nv, struct seen_gpu *s,
                        uint64_t since_us)
{
    struct nvml_putil *u = NULL;
    size_t n = 0;
    if (nvml_process_util(nv, s->g.uuid, since_us, &u, &n, NULL) != ACCEL_OK)
        return;
    for (size_t k = 0; k < s->nprocs; k++)
        for (size_t i = 0; i < n; i++)
            if (u[i].pid == s->procs[k].pid)
                s->procs[k].sm = (int)u[i].sm;
    free(u);
}

/*
 * The container a process of no app runs in, from its cgroup path: a
 * container given the GPU past accel (docker run --gpus, compose's driver:
 * nvidia) is shown by its engine and ID with the foreign use (issue 47
 * item 5). Docker's cgroupfs path (/docker/<ID>), its systemd scope
 * (docker-<ID>.scope), podman's (libpod-<ID>, not conmon's). Outside the
 * lock: a read of /proc.
 */
static void container_of(struct seen_proc *q)
{
    static const struct { const char *mark, *engine; } marks[] = {
        {"/docker/", "docker"}, {"docker-", "docker"}, {"libpod-", "podman"},
    };
    char path[64], buf[4096];
    ssize_t n;

    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)q->pid);
    n = util_read_small(path, buf, sizeof buf);
    for (size_t m = 0; n > 0 && m < sizeof marks / sizeof marks[0]; m++) {
        const char *at = buf;
        while ((at = strstr(at, marks[m].mark)) != NULL) {
            at += strlen(marks[m].mark);
            if (strspn(at, "0123456789abcdef") >= 64) {
                util_strlcpy(q->ctr_engine, marks[m].engine,
                             sizeof q->ctr_engine);
                memcpy(q->ctr_id, at, 64);
                q->ctr_id[64] = '\0';
                return;
            }
        }
    }
}

static void query_procs(const struct cgroup_sys *cg, struct nvml *nv,
                        struct seen_gpu *s, const struct app_ref *refs,
                        size_t nrefs, uint64_t since_us)
{
    struct nvml_proc *v = NULL;
    size_t n = 0;
    enum accel_err rc = nvml_processes(nv, s->g.uuid, &v, &n, NULL);

    s->procs_ok = rc == ACCEL_OK || rc == ACCEL_ENOTSUP;
    if (rc != ACCEL_OK)
        return;
    s->procs = xcalloc(n ? n : 1, sizeof(*s->procs));
    for (size_t i = 0; i < n; i++) {
        struct seen_proc *q = &s->procs[s->nprocs++];
        q->pid = v[i].pid;
        q->used = v[i].used_memory;
        q->app = map_pid(cg, refs, nrefs, v[i].pid, &q->alive);
        q->sm = -1;
        if (q->app == NULL && q->alive)
            container_of(q);
    }
    free(v);
    query_putil(nv, s, since_us);
}

static void query_nvml(struct reconcile *r, struct pass *p,
                       const struct app_ref *refs, size_t nrefs)
{
    struct nvml_gpu *g = NULL;
    struct nvml *nv;
    char *cause = NULL;
    size_t n = 0;
    uint64_t since;

    if (!ensure_nvml(r, p))
        return;
    nv = get_nv(r);
    p->loaded = true;
    nvml_driver_version(nv, p->driver, sizeof p->driver, NULL);
    nvml_cuda_version(nv, p->cuda, sizeof p->cuda, NULL);
    if (nvml_scan(nv, &g, &n, &cause) != ACCEL_OK) {
        p->status = xasprintf("NVML error: %s",
                              cause ? cause : "the device scan failed");
        free(cause);
        return;
    }
    p->scan_ok = true;
    /* per-process samples of the last two passes (NVML keeps a window) */
    since = (uint64_t)(util_wall_ms() - 2 * (int64_t)(r->d->cfg.reconcile_ms > 0
                                                    ? r->d->cfg.reconcile_ms
                                                    : RECONCILE_DEFAULT_MS)) *
            1000;
    p->gpus = xcalloc(n ? n : 1, sizeof(*p->gpus));
    p->ngpus = n;
    for (size_t i = 0; i < n; i++) {
        p->gpus[i].g = g[i];
        if (g[i].uuid[0])
            query_procs(r->d->cg, nv, &p->gpus[i], refs, nrefs, since);
    }
    free(g);
    p->status = xasprintf("NVML loaded: driver %s, CUDA %s, %zu GPUs",
                          p->driver, p->cuda, n);
}

static void pass_release(struct pass *p)
{
    for (size_t i = 0; i < p->ngpus; i++) {
        for (size_t k = 0; k < p->gpus[i].nprocs; k++)
            free(p->gpus[i].procs[k].app);
        free(p->gpus[i].procs);
    }
    free(p->gpus);
    free(p->status);
}

/* ---- applying, under d->lock ---- */

static bool is_local_nvidia(struct accel_daemon *d, size_t dev)
{
    const struct adm_device *x = &d->snap.devs[dev];
    return d->ninfo[x->node].local && (x->type == ACCEL_TYPE_NVIDIA ||
                                       x->type == ACCEL_TYPE_NVIDIA_GB10);
}

static struct seen_gpu *find_gpu(struct pass *p, const char *uuid)
{
    for (size_t i = 0; i < p->ngpus; i++)
        if (p->gpus[i].g.uuid[0] && strcmp(p->gpus[i].g.uuid, uuid) == 0)
            return &p->gpus[i];
    return NULL;
}

static void apply_status(struct accel_daemon *d, struct reconcile *r,
                         struct pass *p)
{
    r->loaded = p->loaded;
    util_strlcpy(r->driver, p->driver, sizeof r->driver);
    util_strlcpy(r->cuda, p->cuda, sizeof r->cuda);
    if (p->status == NULL ||
        (d->nvml_status && strcmp(d->nvml_status, p->status) == 0))
        return;
    /* The start-up status is in acceld's first lines, so the first pass
     * is quiet, but not about a loaded NVML whose scan fails: that is news
     * however early it comes (a failure before the first pass would
     * otherwise never be told). */
    bool failed = p->loaded && !p->scan_ok;
    if (r->passes > 0 || failed)
        state_event(d, p->scan_ok ? "nvml.status" : "nvml.error", NULL,
                    d->cfg.node_name, NULL, NULL, "%s", p->status);
    if (!p->scan_ok && (r->passes > 0 || failed))
        log_warn("%s", p->status);
    free(d->nvml_status);
    d->nvml_status = p->status;
    p->status = NULL;
}

/* Apps bound to dev, named in an event about its disappearance. */
static void report_missing(struct accel_daemon *d, size_t dev)
{
    const struct adm_device *x = &d->snap.devs[dev];
    for (size_t i = 0; i < d->napps; i++)
        for (size_t k = 0; k < d->apps[i]->nrows; k++)
            if (d->apps[i]->rows[k].dev == dev)
                state_event(d, "reconciler.missing-device", d->apps[i]->name,
                            d->snap.nodes[x->node].name, x->id, NULL,
                            "app %s is bound to %s, which NVML no longer "
                            "lists", d->apps[i]->name, x->id);
}

/* Utilization, power and temperature as NVML gave them (unknown = -1 with
 * its reason); g NULL = the device is no longer seen. */
static void set_telemetry(struct dev_info *di, const struct nvml_gpu *g)
{
    di->util = g ? g->utilization : -1;
    di->power_mw = g ? g->power_mw : -1;
    di->power_limit_mw = g ? g->power_limit_mw : -1;
    di->temp = g ? g->temperature : -1;
    di->util_na = (uint8_t)(g ? g->util_na : NVML_NA_NOT_SEEN);
    di->power_na = (uint8_t)(g ? g->power_na : NVML_NA_NOT_SEEN);
    di->limit_na = (uint8_t)(g ? g->limit_na : NVML_NA_NOT_SEEN);
    di->temp_na = (uint8_t)(g ? g->temp_na : NVML_NA_NOT_SEEN);
}

static void update_device(struct accel_daemon *d, size_t dev,
                          const struct seen_gpu *s)
{
    struct adm_device *x = &d->snap.devs[dev];
    const char *node = d->snap.nodes[x->node].name;
    bool healthy = s->g.healthy == 1;
    bool was_present = x->present;

    if (!x->present)
        state_event(d, "device.returned", NULL, node, x->id, NULL,
                    "GPU %s is back", x->id);
    x->present = true;
    d->dinfo[dev].discovered = true; /* NVML knows it: it can go missing */
    if (healthy != x->healthy)
        state_event(d, "device.health", NULL, node, x->id,
                    json_pack("{s:s}", "health", healthy ? "yes" : "no"),
                    "GPU %s is %s%s%s", x->id,
                    healthy ? "healthy again" : "unhealthy",
                    healthy ? "" : ": ", healthy ? "" : s->g.health_cause);
    if (!was_present || healthy != x->healthy) {
        x->healthy = healthy;
        adm_index_update_dev(&d->snap, (uint32_t)dev);
    }
    d->dinfo[dev].used_mem = s->g.memory_used;
    set_telemetry(&d->dinfo[dev], &s->g);
}

static void apply_devices(struct accel_daemon *d, struct pass *p)
{
    /* no scan this pass: what the last one read is no longer measured */
    for (size_t i = 0; !p->scan_ok && i < d->snap.ndevs; i++)
        if (is_local_nvidia(d, i))
            set_telemetry(&d->dinfo[i], NULL);
    for (size_t i = 0; p->scan_ok && i < d->snap.ndevs; i++) {
        struct adm_device *x = &d->snap.devs[i];
        struct seen_gpu *s;
        if (!is_local_nvidia(d, i))
            continue;
        s = find_gpu(p, x->id);
        if (s) {
            update_device(d, i, s);
        } else if (d->dinfo[i].discovered && x->present) {
            x->present = false;
            adm_index_update_dev(&d->snap, (uint32_t)i);
            set_telemetry(&d->dinfo[i], NULL);
            state_event(d, "device.missing", NULL,
                        d->snap.nodes[x->node].name, x->id, NULL,
                        "GPU %s has disappeared; it takes no placements",
                        x->id);
            report_missing(d, i);
        }
    }
}

static void report_new(struct accel_daemon *d, struct reconcile *r,
                       struct pass *p)
{
    for (size_t i = 0; p->scan_ok && i < p->ngpus; i++) {
        const struct nvml_gpu *g = &p->gpus[i].g;
        bool seen = false;
        if (!g->uuid[0] || state_dev_find(d, g->uuid) >= 0)
            continue;
        for (size_t k = 0; k < r->nnew_seen && !seen; k++)
            seen = strcmp(r->new_seen[k], g->uuid) == 0;
        if (seen)
            continue;
        r->new_seen = xrealloc(r->new_seen,
                               (r->nnew_seen + 1) * sizeof(*r->new_seen));
        r->new_seen[r->nnew_seen++] = xstrdup(g->uuid);
        state_event(d, "device.new", NULL, d->cfg.node_name, g->uuid, NULL,
                    "GPU %s (%s) appeared after acceld started; restart "
                    "acceld to schedule on it", g->uuid, g->name);
    }
}

static bool row_on(const struct app *a, size_t dev)
{
    for (size_t k = 0; k < a->nrows; k++)
        if (a->rows[k].dev == dev)
            return true;
    return false;
}

static bool pid_in(const json_t *arr, pid_t pid)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
        if (json_integer_value(json_object_get(e, "pid")) == pid)
            return true;
    return false;
}

static void queue_kill(struct pass *p, pid_t pid, int sig)
{
    if (p->nkill < KILL_MAX && pid > 1) {
        p->kill_pid[p->nkill] = pid;
        p->kill_sig[p->nkill++] = sig;
    }
}

/* A process of a stopped app still holds dev: the app shows releasing. */
static void start_lingering(struct accel_daemon *d, struct pass *p,
                            struct app *a, size_t dev,
                            const struct seen_proc *q)
{
    enum app_state to = a->state;
    a->rel.linger = 1;
    if (lifecycle_commit_releasing(d, a, to, a->reason) != ACCEL_OK) {
        a->rel.linger = 0;
        return;
    }
    state_event(d, "reconciler.lingering", a->name,
                d->snap.nodes[d->snap.devs[dev].node].name,
                d->snap.devs[dev].id, json_pack("{s:i}", "pid", (int)q->pid),
                "process %d of %s app %s still uses %s; it is stopped "
                "(SIGTERM now, SIGKILL after %d s)", (int)q->pid,
                app_state_name(to), a->name, d->snap.devs[dev].id,
                a->m.run.stop_timeout_s);
    if (q->alive)
        queue_kill(p, q->pid, SIGTERM);
}

/* A releasing app past its stop timeout: its live processes get SIGKILL. */
static void kill_lingering(struct accel_daemon *d, struct pass *p,
                           struct app *a, size_t dev,
                           const struct seen_proc *q)
{
    int64_t now = util_wall_ms();
    if (!q->alive || a->rel.kill_at_ms == 0 || now < a->rel.kill_at_ms)
        return;
    state_event(d, "reconciler.kill", a->name,
                d->snap.nodes[d->snap.devs[dev].node].name,
                d->snap.devs[dev].id, json_pack("{s:i}", "pid", (int)q->pid),
                "process %d of app %s still uses %s after the stop "
                "timeout: SIGKILL", (int)q->pid, a->name,
                d->snap.devs[dev].id);
    queue_kill(p, q->pid, SIGKILL);
    a->rel.kill_at_ms = now + RECONCILE_DEFAULT_MS; /* again if it stays */
}

static json_t *foreign_entry(const struct seen_proc *q)
{
    json_t *o = json_pack("{s:i, s:I}", "pid", (int)q->pid, "usedMemory",
                          (json_int_t)q->used);
    if (q->app)
        json_object_set_new(o, "app", json_string(q->app));
    if (q->ctr_engine[0] != '\0')
        json_object_set_new(o, "container",
                            json_pack("{s:s, s:s}", "engine", q->ctr_engine,
                                      "id", q->ctr_id));
    return o;
}

/* One process on dev: fine, foreign, or an app that should not be there. */
static void apply_proc(struct accel_daemon *d, struct pass *p, size_t dev,
                       const struct seen_proc *q, json_t *foreign)
{
    struct app *a = q->app ? state_app_find(d, q->app) : NULL;
    if (a && a->state == APP_RELEASING) {
        kill_lingering(d, p, a, dev, q);
        return;
    }
    if (a && (a->state == APP_STOPPED || a->state == APP_FAILED ||
              a->state == APP_INSTALLED)) {
        start_lingering(d, p, a, dev, q);
        return;
    }
    if (a && row_on(a, dev))
        return;
    /* acceld's own context probe, on the card for a moment at start */
    if (a == NULL && ctxprobe_is_probe(d, q->pid))
        return;
    /* no app, or a running app on a device it is not bound to */
    json_array_append_new(foreign, foreign_entry(q));
}

static void report_foreign(struct accel_daemon *d, size_t dev, json_t *now)
{
    struct dev_info *di = &d->dinfo[dev];
    const struct adm_device *x = &d->snap.devs[dev];
    const char *node = d->snap.nodes[x->node].name;
    size_t i;
    json_t *e;

    json_array_foreach(now, i, e) {
        pid_t pid = (pid_t)json_integer_value(json_object_get(e, "pid"));
        const char *app = json_string_value(json_object_get(e, "app"));
        const json_t *ctr = json_object_get(e, "container");
        char in[96] = "";
        if (di->foreign && pid_in(di->foreign, pid))
            continue;
        if (ctr != NULL)
            snprintf(in, sizeof in, " (%s container %.12s)",
                     json_string_value(json_object_get(ctr, "engine")),
                     json_string_value(json_object_get(ctr, "id")));
        state_event(d, "reconciler.foreign", app, node, x->id,
                    json_deep_copy(e),
                    "process %d %s%s%s uses %s without a binding there",
                    (int)pid, app ? "of app " : "of no app",
                    app ? app : "", in, x->id);
    }
    if (json_array_size(now) == 0 && di->foreign)
        state_event(d, "reconciler.foreign-gone", NULL, node, x->id, NULL,
                    "no foreign process uses %s any more", x->id);
    json_decref(di->foreign);
    di->foreign = json_array_size(now) ? json_incref(now) : NULL;
}

static void autil_clear(struct dev_info *di)
{
    for (size_t i = 0; i < di->nautil; i++)
        free(di->autil[i].app);
    free(di->autil);
    di->autil = NULL;
    di->nautil = 0;
}

/* The entry of app in u[0..n), or NULL. */
static const struct app_util *autil_find(const struct app_util *u, size_t n,
                                         const char *app)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(u[i].app, app) == 0)
            return &u[i];
    return NULL;
}

/* When the device last showed app x busy (SPEC 4.4, docs/elastic.md):
 * this pass (now_ms) when its processes used the SM or their memory as
 * the driver counts it changed since the last pass (or it is new here
 * with memory), else what the last pass said. */
static int64_t busy_stamp(const struct app_util *x, const struct app_util *old,
                          int64_t now_ms)
{
    if (x->sm > 0 || (old == NULL && x->used > 0) ||
        (old != NULL && old->used != x->used))
        return now_ms;
    return old != NULL ? old->busy_ms : 0;
}

/* The per-app SM utilization and memory on a device from its processes'
 * samples, and when each was last busy there. */
static void apply_autil(struct dev_info *di, const struct seen_gpu *s)
{
    struct app_util *u = NULL;
    size_t n = 0;
    int64_t now_ms = (int64_t)(util_now_ns() / 1000000u);

    for (size_t k = 0; s != NULL && k < s->nprocs; k++) {
        const struct seen_proc *q = &s->procs[k];
        size_t i = 0;
        if (q->app == NULL)
            continue;
        while (i < n && strcmp(u[i].app, q->app) != 0)
            i++;
        if (i == n) {
            u = xrealloc(u, (n + 1) * sizeof(*u));
            u[n++] = (struct app_util){xstrdup(q->app), -1, 0, 0};
        }
        if (q->sm >= 0) /* -1: no sample of any of its processes */
            u[i].sm = (u[i].sm > 0 ? u[i].sm : 0) + q->sm;
        if (u[i].sm > 100)
            u[i].sm = 100;
        u[i].used += q->used;
    }
    for (size_t i = 0; i < n; i++)
        u[i].busy_ms = busy_stamp(&u[i], autil_find(di->autil, di->nautil,
                                                    u[i].app),
                                  now_ms);
    autil_clear(di);
    di->autil = u;
    di->nautil = n;
}

static void apply_processes(struct accel_daemon *d, struct pass *p)
{
    for (size_t i = 0; !p->scan_ok && i < d->snap.ndevs; i++)
        autil_clear(&d->dinfo[i]);
    for (size_t i = 0; p->scan_ok && i < d->snap.ndevs; i++) {
        struct seen_gpu *s;
        json_t *foreign;
        if (!is_local_nvidia(d, i))
            continue;
        s = find_gpu(p, d->snap.devs[i].id);
        apply_autil(&d->dinfo[i], s && s->procs_ok ? s : NULL);
        if (s == NULL || !s->procs_ok)
            continue;
        foreign = json_array();
        for (size_t k = 0; k < s->nprocs; k++)
            apply_proc(d, p, i, &s->procs[k], foreign);
        report_foreign(d, i, foreign);
        json_decref(foreign);
    }
}

/* Does this pass show that no process of a holds a device, and is a's
 * cgroup empty (a kill it survived may still be under way)? */
static bool app_gone(struct accel_daemon *d, struct pass *p,
                     const struct app *a)
{
    if (cgroup_app_populated(d->cg, a->name) == 1)
        return false;
    if (!p->loaded)
        return true; /* no NVML: nothing to wait for */
    if (!p->scan_ok)
        return false;
    for (size_t i = 0; i < p->ngpus; i++) {
        const struct seen_gpu *s = &p->gpus[i];
        int dev = state_dev_find(d, s->g.uuid);
        bool mine = dev >= 0 && row_on(a, (size_t)dev);
        if (!s->procs_ok && (mine || a->nrows == 0))
            return false;
        for (size_t k = 0; k < s->nprocs; k++)
            if (s->procs[k].app && strcmp(s->procs[k].app, a->name) == 0)
                return false;
    }
    return true;
}

/* A releasing app whose cgroup still holds processes past its stop
 * timeout (a person's own container that ignored the SIGTERM of
 * lifecycle_hold_outside): the cgroup's kill. */
static void kill_held(struct accel_daemon *d, struct app *a)
{
    int64_t now = util_wall_ms();
    if (a->rel.kill_at_ms == 0 || now < a->rel.kill_at_ms ||
        cgroup_app_populated(d->cg, a->name) != 1)
        return;
    state_event(d, "reconciler.kill", a->name, d->cfg.node_name, NULL, NULL,
                "processes of app %s are still in its cgroup after the stop "
                "timeout: killed", a->name);
    cgroup_app_kill(d->cg, a->name);
    a->rel.kill_at_ms = now + RECONCILE_DEFAULT_MS; /* again if it stays */
}

/* An app acceld found resuming with no process at its start (daemon.c,
 * adopt_state): what was left of its unrecorded run is gone, so the
 * acknowledged resume goes on: alone, it starts now; in a cluster, the
 * keeper's next round starts it, claimed against etcd's row first
 * (cluster.c, redrive), as any resume of this node's. */
static void resume_again(struct accel_daemon *d, struct app *a)
{
    memset(&a->rel, 0, sizeof(a->rel));
    a->state = APP_RESUMING;
    log_info("app %s: its resume had not started when acceld stopped; "
             "starting it now",
             a->name);
    if (d->cluster == NULL)
        launch_app(d, a, RUNNER_UNSEEN, lifecycle_commit_state);
}

static void finish_releases(struct accel_daemon *d, struct pass *p)
{
    char **names = xcalloc(d->napps + 1, sizeof(*names));
    size_t n = 0;
    for (size_t i = 0; i < d->napps; i++) {
        struct app *a = d->apps[i];
        if (a->state != APP_RELEASING || runtime_ends_on_agent(d, a))
            continue;
        if (app_gone(d, p, a))
            names[n++] = xstrdup(a->name);
        else
            kill_held(d, a);
    }
    for (size_t i = 0; i < n; i++) {
        struct app *a = state_app_find(d, names[i]);
        cgroup_app_remove(d->cg, names[i]);
        if (a && a->rel.to == APP_RESUMING)
            resume_again(d, a);
        else if (a && lifecycle_finish_release(d, a) != ACCEL_OK)
            log_error("app %s: the release could not be saved", names[i]);
        free(names[i]);
    }
    free(names);
}

/* ---- the pass ---- */

static struct app_ref *gather_refs(struct accel_daemon *d, size_t *n)
{
    struct app_ref *refs;
    pthread_mutex_lock(&d->lock);
    refs = xcalloc(d->napps + 1, sizeof(*refs));
    for (size_t i = 0; i < d->napps; i++) {
        refs[i].name = xstrdup(d->apps[i]->name);
        refs[i].pid = (pid_t)d->apps[i]->pid;
        refs[i].last_pid = (pid_t)d->apps[i]->rel.last_pid;
    }
    *n = d->napps;
    pthread_mutex_unlock(&d->lock);
    return refs;
}

static void refs_free(struct app_ref *refs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(refs[i].name);
    free(refs);
}

/* The outside meter's driver figure of each target: the memory NVML lists
 * for the target app's processes on its device (meter.h). */
static void meter_driver(struct pass *p, struct meter_target *t,
                         size_t n)
{
    for (size_t i = 0; p->scan_ok && i < n; i++) {
        const struct seen_gpu *s = find_gpu(p, t[i].uuid);
        if (s == NULL || !s->procs_ok || s->procs == NULL)
            continue; /* no process figures: nothing is charged */
        t[i].seen = true;
        for (size_t k = 0; k < s->nprocs; k++)
            if (s->procs[k].app && strcmp(s->procs[k].app, t[i].app) == 0)
                t[i].in.driver += s->procs[k].used;
    }
}

static void run_pass(struct reconcile *r)
{
    struct accel_daemon *d = r->d;
    struct pass p;
    size_t nrefs, nmeter, nunheld;
    struct app_ref *refs = gather_refs(d, &nrefs);
    struct meter_target *meter;
    struct unheld_target *unheld;
    struct drm_usage *drm = NULL;
    size_t ndrm = 0;

    memset(&p, 0, sizeof p);
    pthread_mutex_lock(&d->lock);
    meter = meter_gather(d, &nmeter);
    unheld = unheld_gather(d, &r->unheld, &nunheld);
    pthread_mutex_unlock(&d->lock);
    unheld_read(unheld, nunheld);
    meter_read(meter, nmeter, false);
    /* AMD and Intel devices: their sysfs, and the DRM clients' fdinfo the
     * meter reads between its two ledger readings, as NVML's figures */
    discovery_drm_refresh(d, &drm, &ndrm);
    query_nvml(r, &p, refs, nrefs);
    meter_read_tier(d, meter, nmeter);
    meter_read(meter, nmeter, true);
    refs_free(refs, nrefs);
    meter_driver(&p, meter, nmeter);
    meter_driver_drm(meter, nmeter, drm, ndrm);
    free(drm);
    meter_charge(meter, nmeter);
    pthread_mutex_lock(&d->lock);
    apply_status(d, r, &p);
    apply_devices(d, &p);
    report_new(d, r, &p);
    apply_processes(d, &p);
    meter_apply(d, meter, nmeter);
    unheld_apply(d, &r->unheld, unheld, nunheld);
    finish_releases(d, &p);
    r->passes++;
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < p.nkill; i++)
        if (kill(p.kill_pid[i], p.kill_sig[i]) != 0 && errno != ESRCH)
            log_warn("cannot signal process %d: %s", (int)p.kill_pid[i],
                     strerror(errno));
    pass_release(&p);
    meter_free(meter, nmeter);
}

static void *loop(void *arg)
{
    struct reconcile *r = arg;
    int ms = r->d->cfg.reconcile_ms > 0 ? r->d->cfg.reconcile_ms
                                         : RECONCILE_DEFAULT_MS;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec ts;
        pthread_mutex_unlock(&r->mu);
        run_pass(r);
        ts = util_deadline(CLOCK_MONOTONIC, (unsigned)ms);
        pthread_mutex_lock(&r->mu);
        while (!r->stop &&
               pthread_cond_timedwait(&r->cv, &r->mu, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

enum accel_err reconcile_start(struct accel_daemon *d)
{
    struct reconcile *r = xcalloc(1, sizeof(*r));
    pthread_condattr_t ca;

    r->d = d;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&r->thread, NULL, loop, r) != 0) {
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return ACCEL_ESYS;
    }
    d->reconcile = r;
    return ACCEL_OK;
}

void reconcile_stop(struct accel_daemon *d)
{
    struct reconcile *r = d ? d->reconcile : NULL;
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    nvml_close(r->nv);
    for (size_t i = 0; i < r->nnew_seen; i++)
        free(r->new_seen[i]);
    free(r->new_seen);
    unheld_book_free(&r->unheld);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    d->reconcile = NULL;
    free(r);
}

/* ---- for the operations ---- */

/* UUIDs of the app's present local NVIDIA devices (lock taken here). */
static char **app_uuids(struct accel_daemon *d, const char *name, size_t *n)
{
    char **v;
    struct app *a;
    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, name);
    v = xcalloc(a ? a->nrows + 1 : 1, sizeof(*v));
    *n = 0;
    for (size_t i = 0; a && i < a->nrows; i++) {
        size_t dev = a->rows[i].dev;
        if (is_local_nvidia(d, dev) && d->snap.devs[dev].present)
            v[(*n)++] = xstrdup(d->snap.devs[dev].id);
    }
    pthread_mutex_unlock(&d->lock);
    return v;
}

static uint32_t count_on(const struct cgroup_sys *cg, struct nvml *nv,
                         const char *uuid, const struct app_ref *ref)
{
    struct nvml_proc *v = NULL;
    size_t n = 0;
    uint32_t count = 0;
    char *cause = NULL;
    enum accel_err rc = nvml_processes(nv, uuid, &v, &n, &cause);

    if (rc == ACCEL_EIO) {
        log_warn("app %s: cannot list the processes on %s (%s); its "
                 "release waits", ref->name, uuid, cause ? cause : "");
        count = 1;
    }
    for (size_t i = 0; rc == ACCEL_OK && i < n; i++) {
        bool alive;
        char *app = map_pid(cg, ref, 1, v[i].pid, &alive);
        count += app != NULL;
        free(app);
    }
    free(cause);
    free(v);
    return count;
}

uint32_t reconcile_app_lingering(struct accel_daemon *d, const char *name,
                                 pid_t last_pid)
{
    struct nvml *nv = d->reconcile ? get_nv(d->reconcile) : NULL;
    struct app_ref ref = {.name = (char *)name, .last_pid = last_pid};
    char **uuids;
    size_t n;
    uint32_t count = 0;

    if (nv == NULL)
        return 0;
    uuids = app_uuids(d, name, &n);
    for (size_t i = 0; i < n; i++) {
        count += count_on(d->cg, nv, uuids[i], &ref);
        free(uuids[i]);
    }
    free(uuids);
    return count;
}

const char *reconcile_driver(struct accel_daemon *d)
{
    return d->reconcile ? d->reconcile->driver : "";
}

json_t *reconcile_runtime_json(struct accel_daemon *d, json_t *devices)
{
    struct reconcile *r = d->reconcile;
    char range[32];

    snprintf(range, sizeof range, "%u-%u", d->cfg.uid_lo, d->cfg.uid_hi);
    return json_pack(
        "{s:s, s:{s:b, s:s, s:s, s:s}, s:i, s:o, s:{s:b, s:s, s:s}, s:o}",
        "nodeName", d->cfg.node_name, "nvml", "loaded",
        r ? r->loaded : false, "status", d->nvml_status ? d->nvml_status : "",
        "driver", r ? r->driver : "", "cuda", r ? r->cuda : "",
        "reconcileIntervalMs",
        d->cfg.reconcile_ms > 0 ? d->cfg.reconcile_ms : RECONCILE_DEFAULT_MS,
        "devices", devices, "identity", "perUserUid", d->uid_drop, "uidRange",
        range, "status", d->identity_status ? d->identity_status : "",
        "enforcement", d->cg ? runtime_enforcement(d, NULL) : json_null());
}
