/* SPDX-License-Identifier: MIT */
/*
 * runner.h: how an app's processes are started and ended: the table of
 * operations every runner fills (struct runner) and the chooser, as the
 * store has one interface over its backends. The runners are
 * runner_process.c (a host command, SPEC 8.2) and runner_container.c (an
 * OCI image under podman, SPEC 8.2.1, with its extras each in a file of
 * its own: podman.c, image.c, cdi.c, pull.c); runner.c chooses. Nothing
 * outside this wing names a runner: it asks runner_of(a) and calls the
 * slots, an optional slot being NULL where a runner has nothing to do.
 * runtime.c keeps what every runner shares: the identity, the app's cgroup
 * and limits, the shim's config and ledgers, the log pipe, the
 * environment, and the supervisor that decides when an app is gone (its
 * cgroup tree empty, its leader exited, NVML listing none of its
 * processes). launch.h is the one door a start goes through. See
 * docs/internals/runtime.md.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_RUNNER_H
#define ACCEL_DAEMON_NODE_RUNTIME_RUNNER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "daemon/node/ledger.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/proc/proc.h"
#include "daemon/state.h"

/* What runtime.c has prepared for a start, the same for both runners. */
struct runner_start {
    struct app *a;                 /* the app (d->lock held) */
    const struct identity_run *who; /* its uid, gid, home */
    char **env;                    /* its variables (host paths) */
    const char *cfg;               /* the shim config, or NULL */
    const struct ledger_device *devs; /* what cfg names (host paths) */
    size_t ndevs;
    const char *log_path;          /* the app's log (for messages) */
    int out_fd;                    /* the log pipe, or -1 (then log_path) */
    struct cgroup_limits lim;      /* the manifest's limits */
};

/* What the caller of a start knows of what the runner needs on this
 * machine (the container runner: whether a's pinned image is still here). */
enum runner_seen {
    RUNNER_SEEN,   /* looked at just now, off the lock (install, resume) */
    RUNNER_GONE,   /* looked at just now and gone (resume): made again */
    RUNNER_UNSEEN, /* not looked at (the cluster's agent): look first */
};

/* Save a's state st (reason may be NULL) and its event, then set it in
 * memory (lock held): how the caller of a start records it (lifecycle.h's
 * lifecycle_commit_state, or the cluster agent's, which names the node). */
typedef enum accel_err (*runner_commit_fn)(struct accel_daemon *d,
                                           struct app *a, enum app_state st,
                                           const char *reason);

/* What starts a once its runner is prepared (lock held, a still resuming
 * here with no process): the door's start (launch.c). */
typedef void (*runner_go_fn)(struct accel_daemon *d, struct app *a,
                             runner_commit_fn commit);

struct runner {
    const char *kind; /* "process" or "container" (the API's app.runner) */

    /* ---- every runner */

    /* Start the app's leader (lock held). h gets the pid acceld watches
     * (the process, or podman's run of the container) and its start
     * time. On failure *cause gets an allocated sentence. */
    enum accel_err (*start)(struct accel_daemon *d,
                            const struct runner_start *s,
                            struct proc_handle *h, char **cause);
    /* The graceful step of a stop: ask every process of the app to end
     * (no lock). With wait, return once it has, or timeout_s passed
     * (a blocking stop); without, return at once (the supervisor). */
    void (*term)(struct accel_daemon *d, const char *app, pid_t pid,
                 uint64_t start, int timeout_s, bool wait);
    /* Is the leader part of the app: is the app running while it lives
     * with an empty cgroup (podman's run before and after its container)? */
    bool leader_counts;
    /* Once no process of the app is left: remove what the runner made
     * for it (no lock; the container, every child cgroup). leader_status
     * is the leader's wait status when acceld reaped it, else -1. why
     * (len bytes, may be NULL) gets the runtime's own sentence when the
     * leader's status says the runtime, not the app, failed (podman's
     * last error line), else "": the reason a failed start ends with. */
    void (*finish)(struct accel_daemon *d, const char *app,
                   int leader_status, char *why, size_t len);

    /* ---- optional: NULL where the runner has nothing to do */

    /* Before an install, off the lock: can an app of manifest m start on
     * this machine (cluster: the node that runs it is not chosen yet, so
     * nothing is asked)? ACCEL_OK with *out_found what a start will need
     * (a new reference, or NULL: made by prepare; set only on success);
     * ACCEL_EINVAL when the manifest cannot run here, else the error of
     * the failed look, each with *cause. Blocks up to a minute. */
    enum accel_err (*vet)(const struct manifest *m, bool cluster,
                          json_t **out_found, char **cause);
    /* What vet found becomes a's (lock held, a just installed on this
     * acceld's own store); takes ownership of found (NULL: none). */
    void (*adopt)(struct accel_daemon *d, struct app *a, json_t *found);
    /* Before a resume of app name, off the lock (takes d->lock briefly):
     * is what its start needs still on this machine? RUNNER_SEEN or
     * RUNNER_GONE. */
    enum runner_seen (*look)(struct accel_daemon *d, const char *name);
    /* Before a start of a (lock held, a resuming and bound here): true
     * when the runner has begun a job off the lock (the container runner:
     * the pull of a's image, or the look for its pinned one when seen is
     * RUNNER_UNSEEN) that calls go(d, a, commit) under the lock once a
     * may start, or fails a and releases it; false: a may start now. go
     * runs at once when no thread can be had. */
    bool (*prepare)(struct accel_daemon *d, struct app *a,
                    enum runner_seen seen, runner_go_fn go,
                    runner_commit_fn commit);
    /* End the job prepare began for a (lock held): its go never runs.
     * True when there was one (the caller then releases a). */
    bool (*cancel)(struct accel_daemon *d, struct app *a);
    /* At acceld's start (no lock, before the threads): remove what the
     * runner left of apps that no longer run (the container runner: its
     * containers); returns how many. */
    size_t (*sweep)(struct accel_daemon *d);
    /* Once a second (the supervisor's thread, no lock): the runner's own
     * upkeep (the container runner: remove the images no app uses). */
    void (*tick)(struct accel_daemon *d);
    /* a as the API shows the runner's part of it (lock held): a new
     * object (the container runner: {image, pullPolicy, name, state, ...}),
     * or NULL for none. */
    json_t *(*json)(const struct accel_daemon *d, const struct app *a);
};

/* The runner of a's manifest (an image: the container runner); of a NULL
 * app (one that is gone), the host command's, which ends any process. */
const struct runner *runner_of(const struct app *a);

/* The runner of an app of manifest m. */
const struct runner *runner_for(const struct manifest *m);

/* The runner of the app named name (takes d->lock: the caller holds
 * none); runner_of(NULL)'s when there is no such app. */
const struct runner *runner_named(struct accel_daemon *d, const char *name);

/* The runners, i from 0 until NULL (for sweep and tick). */
const struct runner *runner_each(size_t i);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_RUNNER_H */
