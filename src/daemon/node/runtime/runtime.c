/* SPDX-License-Identifier: MIT */
/*
 * runtime.c: what every runner shares (runner.h). Where an app runs (on
 * this node, on an agent, held outside); its start: the identity, the
 * shim's files and the cgroup with its limits (appsetup.c), the log pipe
 * and the environment of its bound devices, then its runner's start (SPEC
 * 4.1, 8.2); its stop (the blocking runtime_stop, or the supervisor's
 * asynchronous stop of SPEC 5.6); and the supervisor: a thread polls every
 * app with a process, drives stops (SIGTERM, cgroup.kill after the
 * timeout) and turns an empty cgroup into stopped/failed with its devices
 * released (or `releasing` while the driver still lists one of its
 * processes: d->hooks.app_lingering), refreshes the CDI spec (cdi.c) and
 * the shims' usage each second, runs the runners' tick, and watches
 * limitedDisk. It also answers the enforcement views. Starting an app
 * goes through launch.c, never here first. See docs/internals/runtime.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/quantity.h"
#include "common/util.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/ledger.h"
#include "daemon/node/limits/vram.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/proc/disk.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/proc/proc.h"
#include "daemon/node/runtime/applog.h"
#include "daemon/node/runtime/appsetup.h"
#include "daemon/node/runtime/cdi.h"
#include "daemon/node/runtime/diskwatch.h"
#include "daemon/node/runtime/engines.h"
#include "daemon/node/runtime/logs.h"
#include "daemon/node/runtime/runner.h"
#include "daemon/node/slice/broker.h"
#include "daemon/state.h"

#define SUPERVISE_MS 100     /* a supervisor round */
#define SUPERVISE_STOP_MS 20 /* ...while an app it watches is stopping */
#define SUPERVISE_MAX 1024   /* apps with a process looked at per round */
#define STOP_POLL_MS 10      /* a blocking stop polls the cgroup so often */
#define KILL_GRACE_MS 5000u  /* after the kill, survivors are waited for */
#define LEFT_WAIT_MS 30000u  /* a leader left to end on its own, at most */
#define MAX_ENV 512
#define DISK_CHECK_MS 1000   /* limitedDisk is checked at most so often */
#define DISK_CHECK_COST 10   /* ...and spends at most 1/10 of the time */
#define RUNTIME_APP_PATH "/usr/local/bin:/usr/bin:/bin" /* an app's PATH
                                    unless run.env sets one */

/* The node of a's cards when a is an external app of a cluster bound to
 * one node's cards only; -1 otherwise. */
static int64_t held_node(struct accel_daemon *d, const struct app *a)
{
    uint32_t node;
    if (d->cluster == NULL || manifest_runs(&a->m) || a->nrows == 0)
        return -1;
    node = d->snap.devs[a->rows[0].dev].node;
    for (size_t i = 1; i < a->nrows; i++)
        if (d->snap.devs[a->rows[i].dev].node != node)
            return -1;
    return node;
}

bool runtime_held_here(struct accel_daemon *d, const struct app *a)
{
    int64_t node = held_node(d, a);
    return node >= 0 && d->ninfo[node].local;
}

bool runtime_outside_here(struct accel_daemon *d, const struct app *a)
{
    if (manifest_runs(&a->m) || a->nrows == 0 || d->cg == NULL)
        return false;
    if (d->cluster != NULL && !runtime_held_here(d, a))
        return false;
    return cgroup_app_populated(d->cg, a->name) == 1;
}

bool runtime_held_on_agent(struct accel_daemon *d, const struct app *a)
{
    int64_t node = held_node(d, a);
    return node >= 0 && d->ninfo[node].member && !d->ninfo[node].local;
}

bool runtime_ends_on_agent(struct accel_daemon *d, const struct app *a)
{
    return runtime_runs_on_agent(d, a) || runtime_held_on_agent(d, a);
}

bool runtime_runs_on_agent(struct accel_daemon *d, const struct app *a)
{
    uint32_t node;
    if (!manifest_runs(&a->m) || a->nrows == 0)
        return false;
    node = d->snap.devs[a->rows[0].dev].node;
    for (size_t i = 1; i < a->nrows; i++)
        if (d->snap.devs[a->rows[i].dev].node != node)
            return false;
    return d->ninfo[node].member && !d->ninfo[node].local;
}

/* "GPU-a,GPU-b" of the app's NVIDIA devices (on this machine). */
static char *visible_devices(struct accel_daemon *d, const struct app *a)
{
    char *s = xstrdup("");
    for (size_t i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        char *n;
        if (!appsetup_row_local(d, a, i))
            continue;
        if (x->type != ACCEL_TYPE_NVIDIA && x->type != ACCEL_TYPE_NVIDIA_GB10)
            continue;
        n = xasprintf("%s%s%s", s, s[0] ? "," : "", x->id);
        free(s);
        s = n;
    }
    return s;
}

/* "0,1": the indexes of the app's local AMD devices (their position among
 * the machine's AMD cards, discovery.c), "" when it has none. */
static char *hip_visible(struct accel_daemon *d, const struct app *a)
{
    char *s = xstrdup("");
    for (size_t i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        char *n;
        if (!appsetup_row_local(d, a, i) || !cdi_amd_type(x->type))
            continue;
        n = xasprintf("%s%s%d", s, s[0] ? "," : "",
                      d->dinfo[a->rows[i].dev].index < 0
                          ? 0 : d->dinfo[a->rows[i].dev].index);
        free(s);
        s = n;
    }
    return s;
}

/*
 * Create the ledger of every Memory-slicing row (the limit is the row's
 * quota) and write the app's read-only shim config naming them (lock
 * held). Returns the config path (caller frees) or NULL with *cause set.
 */
static char *write_shim_config(struct accel_daemon *d, const struct app *a,
                               const struct identity_run *who,
                               struct appsetup_files *f, char **cause)
{
    enum accel_err rc = appsetup_plan(d, a, f);

    if (rc == ACCEL_OK)
        rc = appsetup_write(d, a->name, who, f);
    if (rc != ACCEL_OK) {
        *cause = xasprintf("cannot prepare the memory quota of '%s': %s",
                           a->name, accel_strerror(rc));
        return NULL;
    }
    return appsetup_config_path(d, a->name);
}

uint32_t runtime_held_outside(struct accel_daemon *d, const struct app *a)
{
    if (manifest_runs(&a->m) || d->cg == NULL || a->nrows == 0 ||
        cgroup_app_populated(d->cg, a->name) != 1)
        return 0;
    /* people's containers through their engine, so that a restart policy
     * sees a stop (the engine marks it stopped before it signals); a
     * SIGTERM of ours could reach them first and read as a crash. The
     * kill after the stop timeout (the reconciler) stays the fallback. */
    if (engines_stop(d, a->name, a->m.run.stop_timeout_s) == 0)
        cgroup_app_signal(d->cg, a->name, SIGTERM);
    return 1;
}

void runtime_release_files(struct accel_daemon *d, const struct app *a)
{
    /* a person's own container held through the app's CDI device (its
     * hook put it in the app's cgroup): the release waited for it
     * (runtime_held_outside); what a release that could not wait leaves
     * ends with the binding */
    if (!manifest_runs(&a->m) && d->cg != NULL &&
        cgroup_app_populated(d->cg, a->name) == 1)
        cgroup_app_kill(d->cg, a->name);
    char *rundir = appsetup_run_dir(d), *cfg = appsetup_config_path(d, a->name);
    char path[512];

    pthread_mutex_lock(&d->files_lock); /* after a refresh's writes */
    cdi_forget(d, a->name);
    engines_forget(d, a->name);
    vram_app_clear(d, a);
    for (size_t i = 0; i < a->nrows; i++) {
        if (appsetup_quota_row(d, a, i) &&
            ledger_path(path, sizeof path, rundir, a->name,
                        appsetup_ordinal(d, a, i)) == ACCEL_OK)
            ledger_remove(path);
    }
    unlink(cfg);
    free(cfg);
    cfg = appsetup_events_path(d, a->name);
    unlink(cfg);
    free(cfg);
    cfg = xasprintf("%s/run/apps/%s/" CDI_CTR_CONFIG_FILE, d->cfg.data_dir,
                    a->name);
    unlink(cfg); /* a container's copy (runner_container.c) */
    *strrchr(cfg, '/') = '\0';
    rmdir(cfg); /* and its folder */
    pthread_mutex_unlock(&d->files_lock);
    free(cfg);
    free(rundir);
}

/*
 * Which of acceld's own variables an app inherits: an allowlist, the
 * locale, the time zone and the terminal type, nothing else (not PWD,
 * not root's PATH, not a secret the operator exported before starting
 * acceld). Everything else an app sees is set by build_env.
 */
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

/* ACCEL_NODE_NAME, _RANK, _COUNT and _PEERS of a part of an app bound
 * across nodes (SPEC 10): the nodes in name order, this one's place among
 * them. Returns the variables written to env (4). */
static size_t multi_env(struct accel_daemon *d, const struct app *a, char **env)
{
    const char *names[ADM_MAX_SELECTION];
    size_t nn = 0, rank = 0;
    char *peers = xstrdup("");
    for (size_t i = 0; i < a->nrows && nn < ADM_MAX_SELECTION; i++) {
        const char *name = d->snap.nodes[d->snap.devs[a->rows[i].dev].node].name;
        size_t at = 0;
        bool dup = false;
        for (size_t k = 0; k < nn; k++)
            dup = dup || strcmp(names[k], name) == 0;
        if (dup)
            continue;
        while (at < nn && strcmp(names[at], name) < 0)
            at++;
        memmove(&names[at + 1], &names[at], (nn - at) * sizeof(*names));
        names[at] = name;
        nn++;
    }
    for (size_t k = 0; k < nn; k++) {
        char *p = xasprintf("%s%s%s", peers, k ? "," : "", names[k]);
        free(peers);
        peers = p;
        if (strcmp(names[k], d->cfg.node_name) == 0)
            rank = k;
    }
    env[0] = xasprintf("ACCEL_NODE_NAME=%s", d->cfg.node_name);
    env[1] = xasprintf("ACCEL_NODE_RANK=%zu", rank);
    env[2] = xasprintf("ACCEL_NODE_COUNT=%zu", nn);
    env[3] = xasprintf("ACCEL_NODE_PEERS=%s", peers);
    free(peers);
    return 4;
}

/*
 * The app's variables: PATH, SHELL and the identity first, then run.env
 * (which may replace PATH, SHELL, HOME, USER or LOGNAME), then acceld's
 * enforcement variables last, so they win over anything before them
 * (proc.c keeps the last entry of a key). A reserved key in a stored
 * run.env (refused at install since SPEC 3, but an older database may
 * hold one) is dropped. Of acceld's own environment only what
 * proc_env_inherited allows reaches the app, before all of these.
 */
static char **build_env(struct accel_daemon *d, const struct app *a,
                        const char *cfg, const struct identity_run *who)
{
    char **env = xcalloc(MAX_ENV + 16, sizeof(char *));
    size_t n = 0;
    char *vis = visible_devices(d, a), *pre = preload_value(d, a, cfg);
    const char *log = getenv("ACCEL_LOG");

    env[n++] = xstrdup("PATH=" RUNTIME_APP_PATH);
    env[n++] = xstrdup("SHELL=/bin/sh");
    env[n++] = xasprintf("HOME=%s", who->home);
    env[n++] = xasprintf("USER=%s", who->user);
    env[n++] = xasprintf("LOGNAME=%s", who->user);
    for (char **p = a->m.run.env; p && *p && n < MAX_ENV; p++)
        if (!manifest_env_reserved(*p))
            env[n++] = xstrdup(*p);
    if (log != NULL) /* acceld's own shim logging setting */
        env[n++] = xasprintf("ACCEL_LOG=%s", log);
    env[n++] = xasprintf("ACCEL_APP=%s", a->name);
    {
        char *tag = cgroup_app_tag(d->cg, a->name);
        env[n++] = xasprintf(CGROUP_APP_TAG_KEY "=%s", tag);
        free(tag);
    }
    if (state_app_multi(d, a))
        n += multi_env(d, a, env + n);
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
    vis = hip_visible(d, a);
    if (vis[0])
        env[n++] = xasprintf("HIP_VISIBLE_DEVICES=%s", vis);
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
    struct appsetup_files *files = xcalloc(1, sizeof(*files));
    const struct runner *r = runner_of(a);
    struct runner_start rs = {.a = a, .log_path = logpath, .out_fd = -1,
                              .lim = appsetup_limits(a)};
    bool have_who = false, have_log = false;
    int outfd = -1;
    enum accel_err rc;

    if (mkdir(logdir, 0700) != 0 && errno != EEXIST)
        log_warn("cannot create %s: %s", logdir, strerror(errno));
    rc = identity_for_app(d, a, &who, cause);
    if (rc != ACCEL_OK)
        goto out;
    have_who = true;
    rc = cgroup_app_prepare(d->cg, a->name, &rs.lim, cause);
    if (rc != ACCEL_OK)
        goto out;
    if (d->cg->v2_dir != NULL)
        vram_app_apply(d, a); /* the kernel's or the driver's VRAM limits */
    if (d->shim_path && appsetup_needs_shim(d, a)) {
        cfg = write_shim_config(d, a, &who, files, cause);
        if (cfg == NULL) {
            rc = ACCEL_ESYS;
            goto out;
        }
    }
    if (d->applog != NULL) { /* acceld writes the log, the app a pipe */
        rc = applog_open(d->applog, a->name, &outfd, cause);
        if (rc != ACCEL_OK)
            goto out;
        have_log = true;
        rs.out_fd = outfd;
    }
    env = build_env(d, a, cfg, &who);
    rs.who = &who;
    rs.env = env;
    rs.cfg = cfg;
    rs.devs = files->devs;
    rs.ndevs = files->n;
    rc = r->start(d, &rs, &h, cause);
    if (rc == ACCEL_OK) {
        a->pid = h.pid;
        a->pid_start = h.start_time;
        a->leader_gone = false;
        a->leader_status = -1;
        state_event(d, "app.start", a->name, NULL, NULL,
                    json_pack("{s:i, s:s}", "pid", (int)h.pid, "runner",
                              r->kind),
                    "app %s started (pid %d)", a->name, (int)h.pid);
    }
    free_env(env);
out:
    if (have_who)
        identity_run_release(&who);
    if (outfd >= 0)
        close(outfd); /* the app holds its own copy */
    if (rc != ACCEL_OK && have_log)
        applog_close(d->applog, a->name);
    if (rc != ACCEL_OK)
        cgroup_app_remove(d->cg, a->name);
    free(files);
    free(cfg);
    free(logpath);
    free(logdir);
    return rc;
}

/* ---- stopping ---- */

/* Reap the leader if it is our child (status kept in *status). */
static bool reap(pid_t pid, int *status)
{
    return pid > 1 && proc_reap(pid, status) == ACCEL_OK;
}

/* Is the app's leader still part of it (a runner's leader_counts)? */
static bool leader_alive(const struct runner *r, pid_t pid, uint64_t start)
{
    return r->leader_counts && proc_alive(pid, start);
}

/* Poll the app's cgroup until it is empty (and its leader gone, where
 * the runner counts it) or ms pass; true when empty. */
static bool wait_empty(struct accel_daemon *d, const struct runner *r,
                       const char *name, pid_t pid, uint64_t start, unsigned ms,
                       int *status)
{
    uint64_t deadline = util_now_ns() + (uint64_t)ms * 1000000ULL;
    for (;;) {
        reap(pid, status);
        if (cgroup_app_populated(d->cg, name) != 1 &&
            !leader_alive(r, pid, start)) {
            reap(pid, status);
            return true;
        }
        if (util_now_ns() >= deadline)
            return false;
        usleep(STOP_POLL_MS * 1000);
    }
}

enum accel_err runtime_stop(struct accel_daemon *d, const char *name, pid_t pid,
                            uint64_t start, int timeout_s, int *out_status)
{
    struct proc_handle h = { .pid = pid, .start_time = start };
    const struct runner *r = runner_named(d, name);
    char *cause = NULL;
    enum accel_err rc = ACCEL_OK;
    int status = -1;

    if (cgroup_app_populated(d->cg, name) < 0 && !r->leader_counts) {
        char *tag = cgroup_app_tag(d->cg, name); /* no cgroup: groups */
        rc = proc_stop(&h, CGROUP_APP_TAG_KEY, tag, (unsigned)timeout_s * 1000u,
                       KILL_GRACE_MS, &status, &cause);
        free(tag);
    } else {
        r->term(d, name, pid, start, timeout_s, true);
        if (!wait_empty(d, r, name, pid, start, (unsigned)timeout_s * 1000u,
                        &status)) {
            cgroup_app_kill(d->cg, name);
            if (!wait_empty(d, r, name, pid, start, KILL_GRACE_MS,
                            &status)) {
                rc = ACCEL_EBUSY;
                cause = xasprintf("processes of its cgroup survived the "
                                  "kill");
            }
        }
        if (rc == ACCEL_OK)
            r->finish(d, name, status, NULL, 0);
    }
    if (out_status != NULL && status != -1)
        *out_status = status;
    if (rc == ACCEL_OK && d->applog != NULL)
        applog_close(d->applog, name);
    if (rc != ACCEL_OK)
        log_warn("stopping %s: %s", name, cause ? cause : accel_strerror(rc));
    free(cause);
    return rc;
}

bool runtime_stop_outside(struct accel_daemon *d, const char *name,
                          int timeout_s)
{
    if (d->cg == NULL || cgroup_app_populated(d->cg, name) != 1)
        return true;
    /* through their engines, as runtime_held_outside stops them */
    if (engines_stop(d, name, timeout_s) == 0)
        cgroup_app_signal(d->cg, name, SIGTERM);
    if (wait_empty(d, runner_of(NULL), name, 0, 0,
                   (unsigned)timeout_s * 1000u, NULL))
        return true;
    cgroup_app_kill(d->cg, name);
    if (wait_empty(d, runner_of(NULL), name, 0, 0, KILL_GRACE_MS, NULL))
        return true;
    log_warn("stopping %s: what its cgroup holds survived the kill", name);
    return false;
}

/* The supervisor's wake-up: a stop handed to it starts at once, not at
 * its next round (one for the process; a wake only brings a round
 * forward, so daemons sharing it in one test process lose nothing). */
static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cv = PTHREAD_COND_INITIALIZER;
static bool wake_due;

static void supervisor_wake(void)
{
    pthread_mutex_lock(&wake_mu);
    wake_due = true;
    pthread_cond_signal(&wake_cv);
    pthread_mutex_unlock(&wake_mu);
}

/* Sleep ms, or less when supervisor_wake is called. */
static void supervisor_sleep(unsigned ms)
{
    struct timespec ts = util_deadline(CLOCK_REALTIME, ms);
    pthread_mutex_lock(&wake_mu);
    while (!wake_due && pthread_cond_timedwait(&wake_cv, &wake_mu, &ts) == 0)
        ;
    wake_due = false;
    pthread_mutex_unlock(&wake_mu);
}

void runtime_stop_begin(struct app *a, enum app_state to, const char *reason,
                        bool uninstall)
{
    /* a request stopping it itself (a mode switch, a removal) has the
     * process: a second stop of it would outlive it (the request zeroes
     * the pid), and hold the app `stopping` with nothing to stop */
    if (a->stop_blocking)
        return;
    free(a->stop.reason);
    a->stop = (struct app_stop){
        .active = true,
        .pid = a->pid,
        .uninstall = uninstall,
        .to = to,
        .reason = reason ? xstrdup(reason) : NULL,
        .kill_at_ms = util_wall_ms() + (int64_t)a->m.run.stop_timeout_s * 1000,
    };
    supervisor_wake();
}

/* ---- the supervisor ---- */

/* One app the supervisor looks at this round, copied under the lock. */
struct watch {
    char *name;            /* app name (owned) */
    const struct runner *r; /* its runner */
    int timeout_s;         /* its stopTimeoutSeconds */
    pid_t pid;             /* its leader */
    uint64_t start;        /* the leader's start time */
    bool stopping;         /* a stop driven by us (else: watch for exit) */
    bool logs;             /* look at its log this round */
    bool term_sent, killed; /* the stop's progress */
    bool term_found;       /* the cgroup held processes at the SIGTERM */
    int64_t kill_at_ms, give_up_ms;
    /* found outside the lock */
    bool reaped;           /* the leader was reaped now */
    int status;            /* its wait status */
    bool term_now, kill_now; /* signals sent now */
    int pop;               /* cgroup_app_populated this round */
    bool found_now;        /* ...was 1 as SIGTERM went now */
    bool gone;             /* no process of the app is left */
    bool left;             /* ...but its leader lives on (struct left) */
    bool gave_up;          /* processes survived the kill */
    uint32_t linger;       /* NVML still lists processes of the app */
    uint64_t oom;          /* OOM kills in its memory cgroup */
    char why[256];         /* the runner's sentence for its own failure
                              (runner.h's finish), "" if none */
};

static size_t gather_watches(struct accel_daemon *d, struct watch *w,
                             size_t max, bool logs)
{
    size_t n = 0;
    for (size_t i = 0; i < d->napps && n < max; i++) {
        struct app *a = d->apps[i];
        if (a->stop.active && a->stop.pid != a->pid) {
            /* its process ended another way (not through this stop): the
             * stop is over, and what the app is left in (`stopping`, no
             * process) is what a watch event or the keeper's redrive acts
             * on, as for any stop without a process */
            log_warn("app %s: its stop ended without it: the process %lld "
                     "it stopped is no longer the app's", a->name,
                     (long long)a->stop.pid);
            free(a->stop.reason);
            a->stop = (struct app_stop){0};
        }
        if (a->pid <= 0 || (a->state == APP_STOPPING && !a->stop.active))
            continue; /* no process, or a blocking stop owns it */
        if (state_app_remote(d, a) && !state_app_part_here(d, a))
            continue; /* its pid is another machine's */
        w[n] = (struct watch){.name = xstrdup(a->name),
                              .r = runner_of(a),
                              .timeout_s = a->m.run.stop_timeout_s,
                              .pid = (pid_t)a->pid,
                              .start = a->pid_start,
                              .stopping = a->state == APP_STOPPING,
                              .logs = logs,
                              .term_sent = a->stop.term_sent,
                              .term_found = a->stop.term_found,
                              .killed = a->stop.killed,
                              .kill_at_ms = a->stop.kill_at_ms,
                              .give_up_ms = a->stop.give_up_ms,
                              .status = -1};
        n++;
    }
    return n;
}

/* Has w's leader ended (reaped now into w when it is our child)? Not
 * before a child of ours can be reaped: podman is a Go program, whose
 * group leader shows as a zombie while its other threads still exit. */
static bool leader_over(struct watch *w)
{
    enum accel_err rc = w->pid > 1 ? proc_reap(w->pid, &w->status)
                                   : ACCEL_ENOTFOUND;

    if (rc == ACCEL_OK)
        w->reaped = true;
    return rc == ACCEL_OK ||
           (rc == ACCEL_ENOTFOUND && !proc_alive(w->pid, w->start));
}

/* Is every process of the app gone? */
static bool app_gone(struct accel_daemon *d, struct watch *w)
{
    struct proc_handle h = { .pid = w->pid, .start_time = w->start };
    int pop = cgroup_app_populated(d->cg, w->name);
    char *tag;
    bool alive;

    w->pop = pop;
    if (w->r->leader_counts) { /* podman's run lives as long as it */
        if (pop <= 0 && (w->reaped || leader_over(w)))
            return true;
        /* but a stop that found the container's processes is over once
         * they are gone: the release does not wait for podman run's own
         * end (its --rm, after conmon notices the exit on a poll), which
         * the supervisor waits for afterwards (struct left) */
        w->left = pop == 0 && w->stopping && w->term_found;
        return w->left;
    }
    if (pop >= 0)
        return pop == 0;
    /* no cgroup: the run is over once its leader, its process group and
     * every process carrying its tag are gone, as a cgroup would say (a
     * child that left the group with setsid holds the app's card as much
     * as the leader did; released at the leader's end, it ran on with a
     * card the app no longer had). /proc is scanned only once the leader
     * is over, or for a stop. */
    if (!w->stopping && !w->reaped && proc_alive(w->pid, w->start))
        return false;
    tag = cgroup_app_tag(d->cg, w->name);
    alive = proc_app_alive(&h, CGROUP_APP_TAG_KEY, tag);
    free(tag);
    return !alive;
}

/* The stop's next step: SIGTERM first, the kill when it is due. */
static void stop_step(struct accel_daemon *d, struct watch *w)
{
    int64_t now = util_wall_ms();
    if (!w->term_sent) {
        w->found_now = w->pop == 1;
        w->r->term(d, w->name, w->pid, w->start, w->timeout_s, false);
        w->term_now = true;
    } else if (!w->killed && now >= w->kill_at_ms) {
        cgroup_app_signal_all(d->cg, w->name, w->pid, w->start, SIGKILL);
        w->kill_now = true;
    } else if (w->killed && now >= w->give_up_ms) {
        w->gave_up = true;
    }
}

/*
 * The app's output: read by the log writer (adopted again after an acceld
 * restart), or, for an app started with the log file as its stdout (by an
 * older acceld, or when the log writer could not start), that file
 * copy-truncated at the cap.
 */
static void watch_log(struct accel_daemon *d, const struct watch *w)
{
    char *path;

    if (d->applog != NULL && applog_adopt(d->applog, w->name))
        return;
    path = xasprintf("%s/logs/%s.log", d->cfg.data_dir, w->name);
    if (proc_rotate_log(path, 0) != ACCEL_OK)
        log_warn("cannot rotate %s", path);
    free(path);
}

/* Everything about one app that needs /proc, cgroups or NVML: no lock. */
static void probe(struct accel_daemon *d, struct watch *w)
{
    w->reaped = reap(w->pid, &w->status);
    w->gone = app_gone(d, w);
    if (!w->gone && w->logs)
        watch_log(d, w);
    if (w->gone && !w->reaped && w->pid > 1) {
        enum accel_err rc = proc_reap(w->pid, &w->status);
        w->reaped = rc == ACCEL_OK;
        /* a leader of ours that has not ended yet (a Go podman's group
         * leader is a zombie while its threads exit: not alive, not yet
         * reapable) is reaped later, as a left one */
        if (rc == ACCEL_EBUSY && w->r->leader_counts)
            w->left = true;
    }
    if (w->reaped)
        w->left = false;
    if (!w->gone && w->stopping)
        stop_step(d, w);
    if (!w->gone && !w->gave_up)
        return;
    w->linger = d->hooks.app_lingering != NULL
                    ? d->hooks.app_lingering(d, w->name, w->pid)
                    : 0;
    if (w->gave_up && w->linger == 0)
        w->linger = 1; /* survivors: the reconciler waits for the cgroup */
    w->oom = cgroup_app_oom_kills(d->cg, w->name);
    if (w->gone && !w->left) /* the container, its cgroups (after the OOM
                                count); a left leader's: settle_left */
        w->r->finish(d, w->name, w->reaped ? w->status : -1, w->why,
                     sizeof w->why);
}

/* "killed: out of memory (limitedMemory 64Mi)" into buf. */
static void oom_reason(const struct app *a, char *buf, size_t len)
{
    char q[32];
    quantity_format_bytes(appsetup_limits(a).memory, q, sizeof q);
    snprintf(buf, len, "killed: out of memory (limitedMemory %s)", q);
}

/* The app's exit (or the end of its stop) as the reason it ends with. */
static const char *exit_reason(const struct app *a, const struct watch *w,
                               int status, char *buf, size_t len)
{
    if (w->oom > 0)
        oom_reason(a, buf, len);
    else if (status < 0)
        snprintf(buf, len, "the process exited (status unknown)");
    else
        proc_exit_status(status, buf, len);
    if (w->why[0] != '\0' && status >= 0 && w->oom == 0) {
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, ": %s", w->why);
    }
    return buf;
}

/* Apply one round's findings to the app (lock held). */
static void apply_watch(struct accel_daemon *d, const struct watch *w)
{
    struct app *a = state_app_find(d, w->name);
    char why[512];
    int status;

    if (a == NULL || a->pid != w->pid)
        return;
    if (w->reaped) {
        a->leader_gone = true;
        a->leader_status = w->status;
    }
    if (w->term_now) {
        a->stop.term_sent = true;
        a->stop.term_found = w->found_now;
    }
    if (w->kill_now) {
        a->stop.killed = true;
        a->stop.give_up_ms = util_wall_ms() + KILL_GRACE_MS;
        state_event(d, "app.kill", a->name, NULL, NULL, NULL,
                    "app %s did not stop within %d s of SIGTERM: killing "
                    "every process of its cgroup", a->name,
                    a->m.run.stop_timeout_s);
    }
    if (!w->gone && !w->gave_up)
        return;
    status = a->leader_gone ? a->leader_status : -1;
    if (w->gone)
        cgroup_app_remove(d->cg, a->name);
    if (w->gone && d->applog != NULL)
        applog_close(d->applog, a->name);
    if (a->state == APP_STOPPING && a->stop.active)
        lifecycle_stop_finished(d, a, status, w->linger);
    else if (a->state != APP_STOPPING)
        lifecycle_app_exited(d, a, status, exit_reason(a, w, status, why,
                                                  sizeof why),
                       w->oom > 0, w->linger);
}

/*
 * The leaders of apps already released whose own end the supervisor waits
 * for (a container app's podman run, removing its container after the
 * container's processes are gone): reaped, then the runner's finish,
 * unless the app has started again meanwhile (its new container's cgroups
 * are not to be removed, and its podman run --replace removes what the
 * old one left). Killed after LEFT_WAIT_MS. The supervisor thread's own.
 */
struct left {
    char *name;               /* the app (owned) */
    const struct runner *r;   /* its runner */
    pid_t pid;                /* the leader */
    uint64_t start;           /* its start time */
    uint64_t kill_at_ns;      /* SIGKILL after this */
    bool killed;              /* sent */
};

struct leftovers {
    struct left *v;           /* the leaders (owned) */
    size_t n, cap;            /* used, allocated */
};

static void left_add(struct leftovers *lo, const struct watch *w)
{
    if (lo->n == lo->cap) {
        lo->cap = lo->cap ? lo->cap * 2 : 8;
        lo->v = xrealloc(lo->v, lo->cap * sizeof(*lo->v));
    }
    lo->v[lo->n++] = (struct left){
        .name = xstrdup(w->name),
        .r = w->r,
        .pid = w->pid,
        .start = w->start,
        .kill_at_ns = util_now_ns() + LEFT_WAIT_MS * 1000000ULL,
    };
}

/* Has l's leader ended (reaped: *status its wait status, else -1)? A
 * child of ours has once it is reaped: podman is a Go program, whose
 * group leader shows as a zombie while its other threads still exit, and
 * waitpid takes it only after them. One that is not ours (adopted after
 * an acceld restart) has once it is no longer alive. */
static bool left_ended(struct left *l, int *status)
{
    enum accel_err rc;

    *status = -1;
    rc = l->pid > 1 ? proc_reap(l->pid, status) : ACCEL_ENOTFOUND;
    if (rc == ACCEL_OK ||
        (rc == ACCEL_ENOTFOUND && !proc_alive(l->pid, l->start)))
        return true;
    if (!l->killed && util_now_ns() >= l->kill_at_ns) {
        log_warn("app %s: its leader %d has not ended %u s after the "
                 "app's processes: killed", l->name, (int)l->pid,
                 LEFT_WAIT_MS / 1000);
        kill(l->pid, SIGKILL);
        l->killed = true;
    }
    return false;
}

/* One look at the left leaders (no lock held). */
static void settle_left(struct accel_daemon *d, struct leftovers *lo)
{
    size_t keep = 0;

    for (size_t i = 0; i < lo->n; i++) {
        struct left *l = &lo->v[i];
        const struct app *a;
        bool again;
        int status;

        if (!left_ended(l, &status)) {
            lo->v[keep++] = *l;
            continue;
        }
        pthread_mutex_lock(&d->lock);
        a = state_app_find(d, l->name);
        again = a != NULL && a->pid > 0;
        pthread_mutex_unlock(&d->lock);
        if (!again)
            l->r->finish(d, l->name, status, NULL, 0);
        free(l->name);
    }
    lo->n = keep;
}

static void leftovers_release(struct leftovers *lo)
{
    for (size_t i = 0; i < lo->n; i++)
        free(lo->v[i].name);
    free(lo->v);
    *lo = (struct leftovers){0};
}

/* One supervisor round over every app with a process, then the left
 * leaders; true when one of them is stopping or a leader is left (the
 * next round comes sooner). */
static bool supervise_round(struct accel_daemon *d, struct leftovers *lo,
                            bool logs)
{
    bool stopping = false;
    struct watch *w = xcalloc(SUPERVISE_MAX, sizeof(*w));
    size_t n;

    pthread_mutex_lock(&d->lock);
    n = gather_watches(d, w, SUPERVISE_MAX, logs);
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++) {
        probe(d, &w[i]);
        stopping = stopping || (w[i].stopping && !w[i].gone);
    }
    settle_left(d, lo); /* before this round's: none is looked at yet */
    for (size_t i = 0; i < n; i++)
        if (w[i].gone && w[i].left)
            left_add(lo, &w[i]);
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < n; i++)
        apply_watch(d, &w[i]);
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++)
        free(w[i].name);
    free(w);
    return stopping || lo->n > 0;
}

bool runtime_ledger_of(struct accel_daemon *d, const struct app *a, size_t row,
                       char *out, size_t cap)
{
    char *rundir;
    bool ok;

    if (row >= a->nrows || !appsetup_quota_row(d, a, row))
        return false;
    rundir = appsetup_run_dir(d);
    ok = ledger_path(out, cap, rundir, a->name, appsetup_ordinal(d, a, row)) ==
         ACCEL_OK;
    free(rundir);
    return ok;
}

/* One ledger to read: which app row it belongs to. */
struct usage_probe {
    char *app;         /* app name */
    size_t row;        /* row index at gather time */
    char path[512];    /* ledger file */
    uint64_t used;     /* read outside the lock */
    bool ok;
    bool card;         /* a time-sliced card's ledger: read for the dead
                          marks only (ledger_read_fd), its figures unused */
    int fd;            /* card: its broker's memfd (a descriptor of our
                          own, closed after the read); -1 otherwise */
    char dev[128];     /* card: the device id, once per card */
};

/* Add the card ledger of a's row k (a time-sliced GPU here: its broker's
 * sealed memfd) to p, once per card; false when there is none or p is
 * full. Lock held (the broker set's lock is taken after it). */
static bool gather_card(struct accel_daemon *d, const struct app *a, size_t k,
                        struct usage_probe *p, size_t n, size_t max)
{
    const struct adm_device *x;

    if (n >= max || a->rows[k].dev >= d->snap.ndevs ||
        !appsetup_row_local(d, a, k) || d->brokers == NULL)
        return false;
    x = &d->snap.devs[a->rows[k].dev];
    if (x->type != ACCEL_TYPE_NVIDIA || x->st != ACCEL_SUPPORT_TIMESLICE)
        return false;
    for (size_t i = 0; i < n; i++)
        if (p[i].card && strcmp(p[i].dev, x->id) == 0)
            return false;
    p[n].fd = broker_set_card_fd(d->brokers, x->id);
    if (p[n].fd < 0)
        return false;
    util_strlcpy(p[n].dev, x->id, sizeof p[n].dev);
    p[n].app = xstrdup(a->name);
    p[n].row = k;
    p[n].card = true;
    return true;
}

/* Gather the ledgers of running apps, and the card ledgers of their
 * time-sliced GPUs (lock held). */
static size_t gather_probes(struct accel_daemon *d, struct usage_probe *p,
                            size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < d->napps && n < max; i++) {
        struct app *a = d->apps[i];
        if (a->pid <= 0 && !cdi_app_here(d, a)) /* no process, no CDI device */
            continue;
        for (size_t k = 0; k < a->nrows && n < max; k++) {
            if (gather_card(d, a, k, p, n, max))
                n++;
            if (n == max ||
                !runtime_ledger_of(d, a, k, p[n].path, sizeof p[n].path))
                continue;
            p[n].fd = -1;
            p[n].app = xstrdup(a->name);
            p[n].row = k;
            n++;
        }
    }
    return n;
}

/*
 * Refresh the apps' live memory use from their ledgers: gather the paths
 * under the lock, read the files without it, store the figures under it
 * (rows that changed meanwhile are skipped: the next round fixes them).
 * Each read marks the slots of dead processes (ledger_read), the card
 * ledgers' too, for the reclaimers in containers that cannot see them.
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
        if (p[i].card) {
            p[i].ok = ledger_read_fd(p[i].fd, &u) == ACCEL_OK;
            close(p[i].fd);
        } else {
            p[i].ok = ledger_read(p[i].path, &u) == ACCEL_OK;
        }
        p[i].used = p[i].ok ? u.used : 0;
    }
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps; i++)
        d->apps[i]->usage = 0;
    for (size_t i = 0; i < n; i++) {
        struct app *a = state_app_find(d, p[i].app);
        if (a && p[i].ok && !p[i].card && p[i].row < a->nrows &&
            a->row_usage) {
            a->row_usage[p[i].row] = p[i].used;
            a->usage += p[i].used;
        }
        free(p[i].app);
    }
    pthread_mutex_unlock(&d->lock);
    free(p);
}

/* ---- limitedDisk: the watched tier (diskwatch.c measures) ---- */

/* Stop a with reason, as a user's stop would but ending `failed` (lock
 * held). The supervisor's next rounds drive it. */
static void stop_for_disk(struct accel_daemon *d, struct app *a,
                          const char *reason)
{
    enum accel_err rc = state_tx_begin(d);

    if (rc == ACCEL_OK) {
        rc = state_save_app(d, a, APP_STOPPING, reason);
        if (rc == ACCEL_OK)
            state_event(d, "app.state", a->name, NULL, NULL, NULL,
                        "app %s is stopping: %s", a->name, reason);
        rc = state_tx_end(d, rc);
    }
    if (rc != ACCEL_OK) {
        log_error("app %s: %s; the stop could not be saved (%s)", a->name,
                  reason, accel_strerror(rc));
        return;
    }
    state_set_state(a, APP_STOPPING, reason);
    runtime_stop_begin(a, APP_FAILED, reason, false);
}

/* a is stopping and past its limit meanwhile: its kill is due now, not at
 * the end of its stopTimeoutSeconds (lock held). */
static void kill_for_disk(struct accel_daemon *d, struct app *a,
                          const char *reason)
{
    a->stop.kill_at_ms = util_wall_ms();
    state_event(d, "app.state", a->name, NULL, NULL, NULL,
                "app %s is killed while it stops: %s", a->name, reason);
}

/* An app past its limitedDisk (diskwatch_pass, lock held): stopped, or
 * killed now if it is stopping already. */
static void disk_over(struct accel_daemon *d, struct app *a, const char *why)
{
    if (a->state == APP_RUNNING)
        stop_for_disk(d, a, why);
    else if (a->stop.kill_at_ms > util_wall_ms())
        kill_for_disk(d, a, why);
}

static void *supervise(void *arg)
{
    struct accel_daemon *d = arg;
    uint64_t disk_next = 0, second_next = 0;
    struct leftovers lo = {0};
    bool stopping = false;

    while (!d->stopping) {
        bool second;
        supervisor_sleep(stopping ? SUPERVISE_STOP_MS : SUPERVISE_MS);
        second = util_now_ns() >= second_next;
        if (second) {
            second_next = util_now_ns() + 10ULL * SUPERVISE_MS * 1000000ULL;
            refresh_usage(d);
            vram_refresh_usage(d); /* the kernel's or the driver's count */
            cdi_refresh(d);
            for (size_t i = 0; runner_each(i) != NULL; i++)
                if (runner_each(i)->tick != NULL)
                    runner_each(i)->tick(d); /* the runners' upkeep */
        }
        if (util_now_ns() >= disk_next) {
            uint64_t ms = diskwatch_pass(d, disk_over) * DISK_CHECK_COST;
            logs_bound_users(d);
            disk_next = util_now_ns() +
                        (ms > DISK_CHECK_MS ? ms : DISK_CHECK_MS) * 1000000u;
        }
        stopping = supervise_round(d, &lo, second);
    }
    /* acceld ends: the left leaders end by themselves, and what they
     * leave is swept at the next start (the runners' sweep) */
    leftovers_release(&lo);
    return NULL;
}

enum accel_err runtime_supervisor_start(struct accel_daemon *d)
{
    char *logdir = xasprintf("%s/logs", d->cfg.data_dir);
    char *why;
    int status;

    if (applog_start(logdir, 0, &d->applog) != ACCEL_OK)
        log_error("cannot start the log writer: apps write their log "
                  "files themselves (not rotated while they run)");
    free(logdir);
    why = disk_check_reserve(d->cfg.data_dir, &status);
    if (why != NULL) /* said at start, refused at each install */
        log_warn("%s", why);
    free(why);
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
    cdi_remove(d); /* its ledgers are acceld's to keep up */
    applog_stop(d->applog);
    d->applog = NULL;
}

/*
 * At start, before the supervisor: an app this acceld runs no process of
 * (no leader recorded: stopped, failed, or a resume whose leader never
 * reached the store because acceld died first) must have none. Any process
 * still in its cgroup or carrying its tag is a run nobody tracks; it could
 * hold the app's cards on this machine while the cluster places the app
 * elsewhere. It gets SIGKILL, and an event says so.
 */
void runtime_end_orphans(struct accel_daemon *d)
{
    struct proc_tagged *t = NULL;
    size_t nt = 0;
    char *prefix =
        cgroup_app_tag(d->cg, ""); /* "<instance>/": this acceld's apps */

    /* one /proc scan for every app, not one per app */
    if (proc_find_by_env_prefix(CGROUP_APP_TAG_KEY, prefix, &t, &nt) !=
        ACCEL_OK)
        nt = 0;
    free(prefix);
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps; i++) {
        struct app *a = d->apps[i];
        bool any = false;

        if (a->pid > 0 || state_app_remote(d, a))
            continue;
        if (cgroup_app_populated(d->cg, a->name) == 1) {
            cgroup_app_kill(d->cg, a->name);
            any = true;
        }
        for (size_t k = 0; k < nt; k++)
            if (strcmp(t[k].rest, a->name) == 0)
                any |= kill(t[k].pid, SIGKILL) == 0;
        if (any)
            state_event(d, "runtime.orphan", a->name, d->cfg.node_name, NULL,
                        NULL, "app %s is %s but processes of it were still "
                        "running (acceld stopped before it recorded them): "
                        "they were killed", a->name,
                        app_state_name(a->state));
    }
    pthread_mutex_unlock(&d->lock);
    proc_tagged_free(t, nt);
    for (size_t i = 0; runner_each(i) != NULL; i++)
        if (runner_each(i)->sweep != NULL) /* what no running app uses */
            runner_each(i)->sweep(d);
}

void runtime_kill_unowned(struct accel_daemon *d, const struct app *a,
                          const char *why)
{
    struct proc_handle h = { .pid = (pid_t)a->pid, .start_time = a->pid_start };
    char *tag = cgroup_app_tag(d->cg, a->name);
    if (cgroup_app_populated(d->cg, a->name) == 1)
        cgroup_app_kill(d->cg, a->name);
    proc_signal_app(&h, CGROUP_APP_TAG_KEY, tag, SIGKILL);
    free(tag);
    /* logged, not an event: this runs inside the watch's apply, where no
     * store write belongs */
    log_warn("app %s: its process %d on node %s was killed: %s", a->name,
             (int)a->pid, d->cfg.node_name, why);
}

/* ---- cgroups of the instance ---- */

void runtime_cgroups_init(struct accel_daemon *d)
{
    struct cgroup_sys *cg = xcalloc(1, sizeof(*cg));
    if (d->cfg.no_cgroups)
        cgroup_disable(cg, d->cfg.data_dir, "acceld runs with --no-cgroups");
    else
        cgroup_detect(cg, d->cfg.data_dir);
    d->cg = cg;
    log_info("app cgroups: containment %s, memory %s, cpu %s, pids %s "
             "(instance %s%s%s)", cgroup_tier_name(cg->containment.tier),
             cgroup_tier_name(cg->memory.tier), cgroup_tier_name(cg->cpu.tier),
             cgroup_tier_name(cg->pids.tier), cg->instance,
             cg->containment.tier == CGROUP_NONE ? "; " : "",
             cg->containment.reason);
    if (cg->v2_leaf_note != NULL)
        log_info("app cgroups: %s", cg->v2_leaf_note);
}

void runtime_cgroups_fini(struct accel_daemon *d)
{
    if (d->cg == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps; i++)
        cgroup_app_remove(d->cg, d->apps[i]->name); /* empty ones only */
    pthread_mutex_unlock(&d->lock);
    cgroup_instance_remove(d->cg);
    cgroup_release(d->cg);
    free(d->cg);
    d->cg = NULL;
}

/* {tier, reason?} of one capability into o under key. */
static void put_cap(json_t *o, json_t *reasons, const char *key,
                    const struct cgroup_cap *c)
{
    json_object_set_new(o, key, json_string(cgroup_tier_name(c->tier)));
    if (c->tier == CGROUP_NONE)
        json_object_set_new(reasons, key, json_string(c->reason));
}

/* A limit of an app: enforced by the tier only when the manifest sets it. */
static void put_limit(json_t *o, json_t *reasons, const char *key,
                      const struct cgroup_cap *c, uint64_t limit,
                      const char *field)
{
    if (limit > 0 || c->tier == CGROUP_NONE) {
        put_cap(o, reasons, key, c);
        return;
    }
    json_object_set_new(o, key, json_string("none"));
    json_object_set_new(reasons, key,
                        json_sprintf("the manifest sets no %s", field));
}

/* limitedDisk: "watched" (the supervisor measures the owner's home and
 * stops the app past its limit: diskwatch_pass), or none with the reason. */
static void put_disk(json_t *o, json_t *reasons, const struct app *a)
{
    const char *why = NULL;

    if (a != NULL && a->m.run.user != NULL)
        why = "the app runs as run.user with that user's own home; acceld "
              "measures only the owner's home under the data directory";
    else if (a != NULL && diskwatch_limit(a) == 0)
        why = "the manifest sets no limitedDisk";
    json_object_set_new(o, "disk", json_string(why ? "none" : "watched"));
    if (why != NULL)
        json_object_set_new(reasons, "disk", json_string(why));
}

static json_t *cgroup_path(struct accel_daemon *d, const char *app)
{
    const struct cgroup_sys *cg = d->cg;
    const char *rel = cg->v2_rel ? cg->v2_rel
                      : cg->v1_rel[CGV1_FREEZER] ? cg->v1_rel[CGV1_FREEZER]
                                                 : cg->v1_rel[CGV1_PIDS];
    if (rel == NULL)
        return json_null();
    return app ? json_sprintf("%s/%s", rel, app) : json_string(rel);
}

json_t *runtime_enforcement(struct accel_daemon *d, const struct app *a)
{
    json_t *o = json_object(), *reasons = json_object();
    const struct cgroup_sys *cg = d->cg;
    struct cgroup_limits lim;
    static const struct cgroup_cap outside = {
        CGROUP_NONE, "acceld starts no process for this app (no run, or "
                     "bound to another node)"};

    if (a != NULL && !state_app_runs_here(d, a)) {
        put_cap(o, reasons, "containment", &outside);
        put_cap(o, reasons, "memory", &outside);
        put_cap(o, reasons, "cpu", &outside);
        put_cap(o, reasons, "pids", &outside);
        put_cap(o, reasons, "disk", &outside);
    } else if (a != NULL) {
        lim = appsetup_limits(a);
        put_cap(o, reasons, "containment", &cg->containment);
        put_limit(o, reasons, "memory", &cg->memory, lim.memory,
                  "limitedMemory");
        put_limit(o, reasons, "cpu", &cg->cpu, lim.cpu_millis, "limitedCpu");
        put_cap(o, reasons, "pids", &cg->pids);
        put_disk(o, reasons, a);
        json_object_set_new(o, "cgroup", cgroup_path(d, a->name));
        json_object_set_new(o, "vram", vram_app_json(d, a));
    } else {
        put_cap(o, reasons, "containment", &cg->containment);
        put_cap(o, reasons, "memory", &cg->memory);
        put_cap(o, reasons, "cpu", &cg->cpu);
        put_cap(o, reasons, "pids", &cg->pids);
        put_disk(o, reasons, NULL);
        json_object_set_new(o, "cgroup", cgroup_path(d, NULL));
        json_object_set_new(o, "pidsMax",
                            json_integer(CGROUP_PIDS_MAX_DEFAULT));
    }
    json_object_set_new(o, "reasons", reasons);
    return o;
}
