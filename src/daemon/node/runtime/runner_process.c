/* SPDX-License-Identifier: MIT */
/*
 * runner_process.c: the runner of a host command (SPEC 8.2): forked as
 * its owner's uid straight into the app's cgroup, SIGTERM to every
 * process of the cgroup (or, without cgroups, of its group and its tag)
 * to stop it.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/runner.h"

#include <signal.h>
#include <stdlib.h>

#include "daemon/node/runtime/runner_int.h"

/* What proc_start's place hook needs. */
struct placement {
    const struct cgroup_sys *cg;  /* the machine's cgroups */
    const char *app;              /* the app's name */
};

/* proc_spec.place: the child waits while it is moved into its cgroup. */
static int place_child(pid_t pid, void *arg, char **cause)
{
    const struct placement *p = arg;
    return cgroup_app_attach(p->cg, p->app, pid, cause);
}

static enum accel_err process_start(struct accel_daemon *d,
                                    const struct runner_start *s,
                                    struct proc_handle *h, char **cause)
{
    const struct app *a = s->a;
    struct placement pl = {d->cg, a->name};
    struct proc_cred cred = {.uid = s->who->uid, .gid = s->who->gid};
    struct proc_spec spec = {
        .name = a->name,
        .argv = a->m.run.argv,
        .env = s->env,
        .inherit = proc_env_inherited,
        .log_path = s->log_path,
        .has_out_fd = s->out_fd >= 0,
        .out_fd = s->out_fd,
        .cred = s->who->drop ? &cred : NULL,
        .workdir = a->m.run.workdir ? a->m.run.workdir : s->who->home,
    };

    if (d->cg->containment.tier != CGROUP_NONE) {
        spec.place = place_child; /* before the uid drop and the exec */
        spec.place_arg = &pl;
    }
    return proc_start(&spec, h, cause);
}

/* SIGTERM to its cgroup, else to its group and the processes it tagged;
 * runtime.c waits. */
static void process_term(struct accel_daemon *d, const char *app, pid_t pid,
                         uint64_t start, int timeout_s, bool wait)
{
    (void)timeout_s;
    (void)wait;
    cgroup_app_signal_all(d->cg, app, pid, start, SIGTERM);
}

static void process_finish(struct accel_daemon *d, const char *app,
                           int leader_status, char *why, size_t len)
{
    (void)leader_status;
    if (why != NULL && len > 0)
        why[0] = '\0'; /* the app's own exit: its status says it all */
    cgroup_app_remove(d->cg, app);
}

const struct runner runner_process = {
    .kind = "process",
    .start = process_start,
    .term = process_term,
    .leader_counts = false,
    .finish = process_finish,
};
