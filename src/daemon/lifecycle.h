/* SPDX-License-Identifier: MIT */
/*
 * lifecycle.h: the transitions at the end of an app's run, shared by the
 * operations of the API (stop, uninstall, mode switch, force bind) and by
 * the node's threads (the supervisor sees the processes gone, the
 * reconciler sees the GPU free): release the rows, record the state and
 * its events in one transaction, or delete the app. They live in the state
 * layer, below both, so the node calls no API code (docs/internals/
 * layout.md). Each is called with d->lock held.
 */
#ifndef ACCEL_DAEMON_LIFECYCLE_H
#define ACCEL_DAEMON_LIFECYCLE_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/state.h"

/*
 * Record state st (reason may be NULL) of a and its app.state event in one
 * transaction, then set it in memory; rows untouched (a stop under way:
 * `stopping`, then runtime_stop_begin). d->lock held.
 */
enum accel_err lifecycle_commit_state(struct accel_daemon *d, struct app *a,
                                      enum app_state st, const char *reason);

/*
 * Release every row of a and give it state st (reason may be NULL), in one
 * transaction with its events; when processes of a still hold its GPU
 * (a->rel.linger > 0, stopped or failed) it goes `releasing` instead and
 * the reconciler finishes the release (SPEC 2.7, 8.3). d->lock held.
 */
enum accel_err lifecycle_commit_release(struct accel_daemon *d,
                                        struct app *a, enum app_state st,
                                        const char *reason);

/*
 * a's binding is about to end: processes its cgroup holds that acceld does
 * not run (a person's own container, through an external app's CDI
 * device) get SIGTERM and count in a->rel.linger, so the release waits
 * `releasing` until they are gone (SPEC 2.9); the reconciler kills them
 * after the app's stop timeout. d->lock held.
 */
void lifecycle_hold_outside(struct accel_daemon *d, struct app *a);

/*
 * An uninstall, the one sequence every uninstall goes through (an app's,
 * a removed user's apps, the last part of an app bound across nodes):
 * lifecycle_stage_uninstall writes it inside the caller's transaction (a's
 * rows released, its row deleted, its app.uninstall event "app <name>
 * uninstalled<why>", why NULL for nothing more, node the event's node or
 * NULL); once that commits, lifecycle_apply_uninstall makes memory follow
 * (a is freed). d->lock held.
 */
enum accel_err lifecycle_stage_uninstall(struct accel_daemon *d,
                                         struct app *a, const char *node,
                                         const char *why);
void lifecycle_apply_uninstall(struct accel_daemon *d, struct app *a);

/* Delete a and its rows in one transaction (the two above); frees a on
 * success. d->lock held. */
enum accel_err lifecycle_commit_uninstall(struct accel_daemon *d,
                                          struct app *a);

/*
 * The supervisor saw every process of running app a gone (its cgroup is
 * empty): `stopped` when the leader exited 0 and nothing went wrong, else
 * `failed` with why ("exited with status 3", "killed: out of memory
 * (limitedMemory 64Mi)"; oom forces failed). Its rows are released, or it
 * waits `releasing` while NVML still lists linger processes of it.
 * d->lock held.
 */
void lifecycle_app_exited(struct accel_daemon *d, struct app *a, int status,
                          const char *why, bool oom, uint32_t linger);

/*
 * A stop handed to the supervisor (runtime_stop_begin) is over: every
 * process is gone, or linger > 0 processes still hold the GPU (or survived
 * the kill). Releases a to a->stop.to with a->stop.reason in one
 * transaction, or deletes it for an uninstall, or leaves it `releasing`
 * for the reconciler when linger > 0. d->lock held; a may be freed.
 */
void lifecycle_stop_finished(struct accel_daemon *d, struct app *a,
                             int status, uint32_t linger);

/*
 * Processes of a still hold its GPU after a stop (SPEC 2.7, 8.3): keep its
 * rows, show it `releasing` (reason kept), and remember the state `to` it
 * gets once the reconciler sees them gone; they are killed after the app's
 * stop timeout. One transaction. d->lock held.
 */
enum accel_err lifecycle_commit_releasing(struct accel_daemon *d,
                                          struct app *a, enum app_state to,
                                          const char *reason);

/*
 * The reconciler saw no process of the `releasing` app a any more: release
 * its rows and give it its final state, or delete it when the release was
 * an uninstall (a is freed then). d->lock held.
 */
enum accel_err lifecycle_finish_release(struct accel_daemon *d, struct app *a);

#endif /* ACCEL_DAEMON_LIFECYCLE_H */
