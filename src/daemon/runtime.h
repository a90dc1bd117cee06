/* SPDX-License-Identifier: MIT */
/*
 * runtime.h: the node runtime seen from the operations: start an app's
 * process with its devices' environment, stop its process group, and the
 * supervisor thread that notices apps exiting by themselves (SPEC 8.2).
 */
#ifndef ACCEL_DAEMON_RUNTIME_H
#define ACCEL_DAEMON_RUNTIME_H

#include <stdint.h>
#include <sys/types.h>

#include "daemon/daemon.h"

/* Is the app run by this node (has `run` and is bound to the local node)? */
bool runtime_runs_here(struct accel_daemon *d, const struct app *a);

/*
 * Start a's process (caller holds d->lock). On success sets a->pid and
 * a->pid_start. On failure *cause gets an allocated sentence.
 */
enum accel_err runtime_start(struct accel_daemon *d, struct app *a,
                             char **cause);

/*
 * Stop the process group pid (identity start) of app name: SIGTERM, then
 * SIGKILL after timeout_s, then wait until every process is gone. Blocks:
 * call WITHOUT d->lock. *out_status gets the leader's status when known.
 */
enum accel_err runtime_stop(const char *name, pid_t pid, uint64_t start,
                            int timeout_s, int *out_status);

/* Remove the quota ledgers and shim config of a's current rows (lock
 * held). Called whenever rows are dropped. */
void runtime_release_files(struct accel_daemon *d, const struct app *a);

/* Start / stop the supervisor thread. */
enum accel_err runtime_supervisor_start(struct accel_daemon *d);
void runtime_supervisor_stop(struct accel_daemon *d);

#endif /* ACCEL_DAEMON_RUNTIME_H */
