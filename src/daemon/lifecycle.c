/* SPDX-License-Identifier: MIT */
/*
 * lifecycle.c: the end of an app's run (lifecycle.h): each transition
 * writes the app, its rows and its events in one store transaction and
 * changes memory only after the commit (SPEC 9).
 */
#include "common/accel_setup.h"
#include "daemon/lifecycle.h"

#include <stdlib.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

enum accel_err lifecycle_commit_state(struct accel_daemon *d, struct app *a,
                                      enum app_state st, const char *reason)
{
    enum accel_err rc = state_tx_begin(d);
    if (rc != ACCEL_OK)
        return rc;
    rc = state_save_app(d, a, st, reason);
    if (rc == ACCEL_OK)
        state_event(d, "app.state", a->name, NULL, NULL, NULL,
                    "app %s is %s%s%s", a->name, app_state_name(st),
                    reason ? ": " : "", reason ? reason : "");
    rc = state_tx_end(d, rc);
    if (rc == ACCEL_OK)
        state_set_state(a, st, reason);
    return rc;
}

enum accel_err lifecycle_commit_releasing(struct accel_daemon *d,
                                          struct app *a, enum app_state to,
                                          const char *reason)
{
    enum accel_err rc = state_tx_begin(d);
    if (rc != ACCEL_OK)
        return rc;
    rc = state_save_app(d, a, APP_RELEASING, reason);
    if (rc == ACCEL_OK)
        state_event(d, "app.state", a->name, NULL, NULL,
                    json_pack("{s:i}", "processes", (int)a->rel.linger),
                    "app %s is releasing: %u process(es) still hold its "
                    "GPU; it is released once they are gone",
                    a->name, (unsigned)a->rel.linger);
    rc = state_tx_end(d, rc);
    if (rc != ACCEL_OK)
        return rc;
    a->rel.to = to;
    a->rel.kill_at_ms =
        util_wall_ms() + (int64_t)a->m.run.stop_timeout_s * 1000;
    state_set_state(a, APP_RELEASING, reason);
    return ACCEL_OK;
}

void lifecycle_hold_outside(struct accel_daemon *d, struct app *a)
{
    if (a->rel.linger == 0 && d->hooks.held_outside)
        a->rel.linger = d->hooks.held_outside(d, a);
}

enum accel_err lifecycle_commit_release(struct accel_daemon *d,
                                        struct app *a, enum app_state st,
                                        const char *reason)
{
    enum accel_err rc;
    if (st == APP_STOPPED || st == APP_FAILED)
        lifecycle_hold_outside(d, a);
    if (a->rel.linger > 0 && (st == APP_STOPPED || st == APP_FAILED))
        return lifecycle_commit_releasing(d, a, st, reason);
    rc = state_tx_begin(d);
    if (rc != ACCEL_OK)
        return rc;
    rc = state_save_app(d, a, st, reason);
    if (rc == ACCEL_OK)
        rc = state_save_rows(d, a, NULL, 0);
    for (size_t i = 0; rc == ACCEL_OK && i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        state_event(d, "binding.release", a->name,
                    d->snap.nodes[x->node].name, x->id, NULL,
                    "app %s released %s", a->name, x->id);
    }
    if (rc == ACCEL_OK)
        state_event(d, "app.state", a->name, NULL, NULL, NULL,
                    "app %s is %s%s%s", a->name, app_state_name(st),
                    reason ? ": " : "", reason ? reason : "");
    rc = state_tx_end(d, rc);
    if (rc != ACCEL_OK)
        return rc;
    state_set_rows(d, a, NULL, 0);
    state_set_state(a, st, reason);
    return ACCEL_OK;
}

enum accel_err lifecycle_stage_uninstall(struct accel_daemon *d,
                                         struct app *a, const char *node,
                                         const char *why)
{
    enum accel_err rc = state_save_rows(d, a, NULL, 0);
    if (rc == ACCEL_OK)
        rc = store_app_delete(d->store, a->name);
    if (rc == ACCEL_OK)
        state_event(d, "app.uninstall", a->name, node, NULL, NULL,
                    "app %s uninstalled%s", a->name, why ? why : "");
    return rc;
}

void lifecycle_apply_uninstall(struct accel_daemon *d, struct app *a)
{
    state_set_rows(d, a, NULL, 0);
    state_app_remove(d, a);
}

enum accel_err lifecycle_commit_uninstall(struct accel_daemon *d,
                                          struct app *a)
{
    enum accel_err rc = state_tx_begin(d);
    if (rc == ACCEL_OK)
        rc = lifecycle_stage_uninstall(d, a, NULL, NULL);
    rc = state_tx_end(d, rc);
    if (rc == ACCEL_OK)
        lifecycle_apply_uninstall(d, a);
    return rc;
}

enum accel_err lifecycle_finish_release(struct accel_daemon *d, struct app *a)
{
    a->rel.linger = 0;
    a->rel.kill_at_ms = 0;
    if (a->rel.uninstall)
        return lifecycle_commit_uninstall(d, a);
    return lifecycle_commit_release(d, a, a->rel.to, a->reason);
}

/*
 * The part of an app bound across nodes (SPEC 10) that ran here ended
 * (stopped, or exited by itself). Its part row goes; while other parts run
 * the app is `stopping` (an exit asks the other nodes to stop theirs); the
 * last part to end releases every card of the app, on every node, in the
 * same transaction (or deletes the app, for an uninstall).
 */
static enum accel_err multi_part_ended(struct accel_daemon *d, struct app *a,
                                       enum app_state to, const char *reason,
                                       bool uninstall)
{
    const char *me = d->cfg.node_name;
    bool mine = state_part_has(a, me);
    bool last = a->nparts == (mine ? 1u : 0u);
    char *why = reason ? xstrdup(reason) : NULL;
    enum accel_err rc = state_tx_begin(d);

    if (rc == ACCEL_OK && mine)
        rc = store_part_delete(d->store, a->name, me);
    if (rc == ACCEL_OK && last && uninstall) {
        char *tail = xasprintf(" (its last part ended on %s)", me);
        rc = lifecycle_stage_uninstall(d, a, me, tail);
        free(tail);
    } else if (rc == ACCEL_OK && last) {
        rc = state_save_app(d, a, to, why);
        if (rc == ACCEL_OK)
            rc = state_save_rows(d, a, NULL, 0);
        if (rc == ACCEL_OK)
            state_event(d, "app.state", a->name, me, NULL, NULL,
                        "app %s is %s: its last part ended on %s, every "
                        "card released",
                        a->name, app_state_name(to), me);
    } else if (rc == ACCEL_OK && a->state != APP_STOPPING) {
        rc = state_save_app(d, a, APP_STOPPING, why);
        if (rc == ACCEL_OK)
            state_event(d, "app.state", a->name, me, NULL, NULL,
                        "app %s is stopping: %s", a->name,
                        why ? why : "its part here ended");
    }
    rc = state_tx_end(d, rc);
    if (rc == ACCEL_OK) {
        state_part_set(a, me, false);
        if (last && uninstall) {
            lifecycle_apply_uninstall(d, a);
        } else if (last) {
            state_set_rows(d, a, NULL, 0);
            state_set_state(a, to, why);
        } else if (a->state != APP_STOPPING) {
            state_set_state(a, APP_STOPPING, why);
        }
    }
    free(why);
    return rc;
}

/* What every end of an app's run records: the leader it had and the
 * processes still seen on its devices (the reconciler's release waits on
 * them), and its exit status. */
static void note_exit(struct app *a, int status, uint32_t linger)
{
    a->rel.last_pid = a->pid;
    a->rel.linger = linger;
    a->pid = 0;
    a->pid_start = 0;
    a->exit_status = status;
    a->leader_gone = false;
}

void lifecycle_app_exited(struct accel_daemon *d, struct app *a, int status,
                          const char *why, bool oom, uint32_t linger)
{
    bool ok = status == 0 && !oom;

    note_exit(a, status, linger);
    if (state_app_multi(d, a)) {
        char *r = xasprintf("its part on node %s exited%s%s",
                            d->cfg.node_name, ok ? "" : ": ",
                            ok ? "" : (why ? why : "failed"));
        if (multi_part_ended(d, a, ok ? APP_STOPPED : APP_FAILED, r,
                             false) != ACCEL_OK)
            log_error("app %s: the end of its part could not be saved",
                      a->name);
        free(r);
        return;
    }
    if (lifecycle_commit_release(d, a, ok ? APP_STOPPED : APP_FAILED,
                           ok ? NULL : why) != ACCEL_OK)
        log_error("app %s exited but its release could not be saved",
                  a->name);
}

void lifecycle_stop_finished(struct accel_daemon *d, struct app *a,
                             int status, uint32_t linger)
{
    struct app_stop st = a->stop;
    enum accel_err rc;

    a->stop = (struct app_stop){0};
    note_exit(a, status, linger);
    if (state_app_multi(d, a)) {
        /* a->reason: why the app was asked to stop (st.reason drops the
         * uninstall marker) */
        rc = multi_part_ended(d, a, st.to, st.uninstall ? NULL : a->reason,
                              st.uninstall);
    } else if (st.uninstall && linger > 0) {
        a->rel.uninstall = true;
        rc = lifecycle_commit_releasing(d, a, APP_STOPPED, "uninstalling");
    } else if (st.uninstall) {
        rc = lifecycle_commit_uninstall(d, a); /* frees a */
    } else {
        rc = lifecycle_commit_release(d, a, st.to, st.reason);
    }
    if (rc != ACCEL_OK)
        log_error("app %s: the end of its stop could not be saved "
                  "(%s)", a->name, accel_strerror(rc));
    free(st.reason);
}
