/* SPDX-License-Identifier: MIT */
/*
 * launch.c: the one door every start of an app goes through (launch.h):
 * the runner's look, prepare and start, then the commit or the release.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/launch.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/runtime/runtime.h"

enum accel_err launch_vet(const struct manifest *m, bool cluster,
                          json_t **out_found, char **cause)
{
    const struct runner *r = runner_for(m);

    *out_found = NULL;
    return r->vet != NULL ? r->vet(m, cluster, out_found, cause) : ACCEL_OK;
}

void launch_adopt(struct accel_daemon *d, struct app *a, json_t *found)
{
    const struct runner *r = runner_of(a);

    if (r->adopt != NULL)
        r->adopt(d, a, found);
    else
        json_decref(found);
}

enum runner_seen launch_look(struct accel_daemon *d, const char *name)
{
    const struct runner *r = runner_named(d, name);
    return r->look != NULL ? r->look(d, name) : RUNNER_SEEN;
}

/* The start and its end (lock held): runner_go_fn, so that a runner's
 * prepare runs it once a may start. */
static void start_app(struct accel_daemon *d, struct app *a,
                      runner_commit_fn commit)
{
    char *cause = NULL;

    if (!state_app_runs_here(d, a)) { /* external: running once bound */
        (void)commit(d, a, APP_RUNNING, NULL);
        return;
    }
    if (runtime_start(d, a, &cause) == ACCEL_OK) {
        /* unsaved, the pid is still this node's: a stop finds it here,
         * and the cluster's redrive saves `running` once the row is read
         * again */
        if (commit(d, a, APP_RUNNING, NULL) != ACCEL_OK)
            log_error("app %s started but its state was not saved", a->name);
        return;
    }
    a->pid = 0;
    lifecycle_commit_release(d, a, APP_FAILED, cause);
    free(cause);
}

void launch_app(struct accel_daemon *d, struct app *a, enum runner_seen seen,
                runner_commit_fn commit)
{
    const struct runner *r = runner_of(a);

    if (state_app_runs_here(d, a) && r->prepare != NULL &&
        r->prepare(d, a, seen, start_app, commit))
        return;
    start_app(d, a, commit);
}

bool launch_pending(const struct app *a)
{
    const char *st = json_string_value(json_object_get(a->pull, "state"));
    return a->pin_check != 0 || (st != NULL && strcmp(st, "pulling") == 0);
}

bool launch_cancel(struct accel_daemon *d, struct app *a, const char *reason)
{
    const struct runner *r = runner_of(a);

    if (a->state != APP_RESUMING || a->pid > 0 || !launch_pending(a) ||
        !state_app_runs_here(d, a) || r->cancel == NULL || !r->cancel(d, a))
        return false;
    return lifecycle_commit_release(d, a, APP_STOPPED, reason) == ACCEL_OK;
}
