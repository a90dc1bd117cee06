/* SPDX-License-Identifier: MIT */
/*
 * launch.h: the one door every start of an app goes through: an install,
 * a resume, a legacy bind's restart, the cluster agent's start here. Off
 * the lock, the runner looks at what a start will need on this machine
 * (launch_vet at an install, launch_look before a resume); under the lock,
 * launch_app prepares (the container runner pulls its image, or looks for
 * its pinned one, as a job off the lock), starts, then commits `running`,
 * or releases the app `failed` with why. The callers say how the state is
 * saved (runner_commit_fn); nothing else of the runner is theirs to know.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_LAUNCH_H
#define ACCEL_DAEMON_NODE_RUNTIME_LAUNCH_H

#include <jansson.h>
#include <stdbool.h>

#include "accel/accel.h"
#include "daemon/node/runtime/runner.h"
#include "daemon/state.h"

/*
 * Before an install, off the lock: may an app of manifest m start here
 * (the runner's vet; cluster: its node is not chosen yet)? ACCEL_OK with
 * *out_found (NULL: nothing; set only on success) for launch_adopt;
 * ACCEL_EINVAL when the manifest cannot run here (a 400), else the error
 * of a look that failed (a 503), each with *cause (caller frees).
 */
enum accel_err launch_vet(const struct manifest *m, bool cluster,
                          json_t **out_found, char **cause);

/* What launch_vet found becomes a's (lock held, a just installed on this
 * acceld's own store); takes ownership of found (NULL: none). */
void launch_adopt(struct accel_daemon *d, struct app *a, json_t *found);

/* Before a resume of app name, off the lock (takes d->lock briefly):
 * RUNNER_GONE when what its runner needs has gone from this machine (its
 * pinned image), else RUNNER_SEEN; for launch_app. */
enum runner_seen launch_look(struct accel_daemon *d, const char *name);

/*
 * Start a (lock held, its rows committed, a resuming, or a legacy bind's
 * restart): when a runs here, its runner's prepare first (seen: what the
 * caller looked at; RUNNER_UNSEEN: the runner looks first, off the lock),
 * then the start, then commit(d, a, APP_RUNNING, NULL); a start that fails
 * releases a `failed` with its cause (lifecycle_commit_release). An app
 * that runs on no process here (external) is only committed `running`.
 * Answered at once when the runner prepares off the lock (a `pulling`):
 * the rest follows on that job, under the lock.
 */
void launch_app(struct accel_daemon *d, struct app *a, enum runner_seen seen,
                runner_commit_fn commit);

/* Is a's prepare under way (lock held): its image pulled, or its pin
 * looked for? Its start waits for it. */
bool launch_pending(const struct app *a);

/*
 * A stop, an uninstall or a user's removal of a whose start waits for its
 * prepare (lock held; launch_pending, a resuming with no process): the
 * job is cancelled (a pull's podman killed, what it left removed) and a
 * released `stopped` with reason (may be NULL), so that the caller goes
 * on with an app that is not busy (issue 44: a stalled pull held the GPU
 * and answered the admin 409). False, nothing done, otherwise, or when the
 * release could not be saved (the caller's ops_busy answers then).
 */
bool launch_cancel(struct accel_daemon *d, struct app *a, const char *reason);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_LAUNCH_H */
