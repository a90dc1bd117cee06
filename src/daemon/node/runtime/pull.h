/* SPDX-License-Identifier: MIT */
/*
 * pull.h: the container runner's prepare and look (runner.h): a container
 * app's image pulled as a job (SPEC 8.2.1), podman pull on a thread of its
 * own, never under the lock, its lines the app's progress, then the app
 * pinned and started, or failed and released; and the look for a pinned
 * image that may have gone from the machine. Only runner_container.c's
 * table names these: the rest of acceld starts an app through launch.h.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_PULL_H
#define ACCEL_DAEMON_NODE_RUNTIME_PULL_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "daemon/node/runtime/runner.h"
#include "daemon/state.h"

/*
 * The container runner's prepare (runner.h; lock held, a resuming and
 * bound here): an image app with no pin on this node whose image acceld
 * may pull (pull missing or always, or an archive), or whose image seen
 * says is gone, is pulled first: answered at once, the app shows
 * `pulling`, go runs once it is pinned, or a is failed and released with
 * the pull's cause. With seen RUNNER_UNSEEN, a pinned image acceld may
 * pull again is first looked for off the lock (podman may take a minute),
 * and pulled when it has gone (meanwhile a->pin_check is set: launch.h's
 * launch_pending). Else false: a may start now.
 */
bool pull_prepare(struct accel_daemon *d, struct app *a, enum runner_seen seen,
                  runner_go_fn go, runner_commit_fn commit);

/*
 * The container runner's look (runner.h): is the image the app name is
 * pinned to gone from this machine (podman image inspect of its ID)?
 * Takes the lock to read the pin, asks podman without it. RUNNER_SEEN for
 * an app with no pin, a pull: never image, or when podman cannot say.
 * Call it before the lock.
 */
enum runner_seen pull_look(struct accel_daemon *d, const char *name);

/* The no-progress time after which a pull fails (issue 44): no line from
 * podman and no byte read by it for so long. ACCEL_PULL_STALL_SECONDS
 * (0 to 86400; 0: never) sets it, as tests do. */
#define PULL_STALL_ENV "ACCEL_PULL_STALL_SECONDS"
#define PULL_STALL_S_DEFAULT 300

/*
 * The container runner's cancel (runner.h; lock held): a's pull under way
 * is ended (its podman killed within PODMAN_WATCH_STEP_MS, what it left
 * in its TMPDIR removed, the app left alone when it ends: container.pull
 * says `cancelled`), and a look for its pinned image is forgotten. True
 * when there was one; the caller then releases a.
 */
bool pull_cancel(struct accel_daemon *d, struct app *a);

/* At acceld's start, before any pull: what pulls of an acceld killed
 * meanwhile left in their TMPDIRs (<data-dir>/run/pulls) is removed (a
 * podman pull dies with its acceld: PR_SET_PDEATHSIG). */
void pull_sweep(struct accel_daemon *d);

/* ---- a pull's progress as podman reports it ---- */

#define PULL_BLOBS_MAX 256 /* layers followed; those past it are not */
#define PULL_BLOB_ID 72    /* a layer's name as podman prints it, at most */

/* One layer (podman's "blob") of a pull. */
struct pull_blob {
    char id[PULL_BLOB_ID]; /* its short digest, as podman prints it */
    uint64_t done;         /* bytes copied, as podman last said */
    uint64_t total;        /* its size (0: not said yet) */
    bool finished;         /* "done", or "skipped: already exists" */
};

/* The layers of one pull, as its lines said them. */
struct pull_progress {
    struct pull_blob blobs[PULL_BLOBS_MAX]; /* in the order first seen */
    size_t n;                               /* used */
};

/*
 * One line of podman pull's output (its terminal's escape sequences left
 * out: podman.h) into p: "Copying blob ID [bar] 18.1MiB / 28.6MiB" (on a
 * terminal), "Copying blob ID done", "Copying blob ID skipped: already
 * exists", "Copying blob sha256:ID" (off a terminal: no bytes). True when
 * the line was a layer's; other lines leave p as it was. Pure: no lock,
 * no I/O.
 */
bool pull_progress_feed(struct pull_progress *p, const char *line);

/* p as the API shows it: {"layers": {"done", "total"}, "bytes": {"done",
 * "total"}}, the totals those of the layers podman has named so far.
 * Returns a new reference. */
json_t *pull_progress_json(const struct pull_progress *p);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_PULL_H */
