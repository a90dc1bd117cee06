/* SPDX-License-Identifier: MIT */
/*
 * pull.h: a container app's image pulled as a job (SPEC 8.2.1): podman
 * pull on a thread of its own, never under the lock, its lines the app's
 * progress, then the app pinned and started, or failed and released.
 * The install, a resume and the cluster's node agent start the same job.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_PULL_H
#define ACCEL_DAEMON_NODE_RUNTIME_PULL_H

#include <stdbool.h>

#include "daemon/state.h"

/* What starts a once its image is pinned (lock held). */
typedef void (*pull_start_fn)(struct accel_daemon *d, struct app *a);

/*
 * Must a's image be pulled before a start here (lock held)? An image app
 * with no pin on this node (an app installed in a cluster, or whose pin
 * file went) whose image acceld may pull (pull missing or always, or an
 * archive). A pull: never image stays podman run's to find.
 */
bool pull_needed(struct accel_daemon *d, struct app *a);

/*
 * Is the image the app name is pinned to gone from this machine (podman
 * image inspect of its ID)? Takes the lock to read the pin, asks podman
 * without it. False for an app with no pin, a pull: never image, or when
 * podman cannot say. Call it before the lock.
 */
bool pull_pinned_gone(struct accel_daemon *d, const char *name);

/* Is a's pull, or the check of its pin before it (pull_check_begin),
 * under way (lock held)? Its start waits for it. */
bool pull_running(const struct app *a);

/*
 * Must a's pinned image be looked for before a start here (lock held)?
 * An image app pinned on this node whose image acceld may pull again
 * (pull_pinned_gone's apps).
 */
bool pull_pin_to_check(struct accel_daemon *d, struct app *a);

/*
 * Start a (lock held, a resuming and bound here, pull_pin_to_check) once
 * podman has said, off the lock, whether its pinned image is still on
 * this machine: gone, it is pulled first (pull_begin); else, or when
 * podman cannot tell, start(d, a) runs (lock held, a still resuming with
 * no process and no newer check). Meanwhile pull_running(a) is true and
 * a's container.pull is as it was. start is run at once when no thread
 * can be had.
 */
void pull_check_begin(struct accel_daemon *d, struct app *a,
                      pull_start_fn start);

/*
 * Start a's pull (lock held, a resuming and bound here): answered at once,
 * the app shows `pulling`; start(d, a) runs once it is pinned (lock held,
 * a still resuming with no process), or a is failed and released with the
 * pull's cause. start is run at once when no thread can be had.
 */
void pull_begin(struct accel_daemon *d, struct app *a, pull_start_fn start);

#endif
