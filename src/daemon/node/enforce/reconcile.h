/* SPDX-License-Identifier: MIT */
/*
 * reconcile.h: the periodic NVML refresh and the reconciler of SPEC 8.3.
 *
 * One thread, started from daemon_main, runs a pass at start and then every
 * --reconcile-interval-ms (default 5 s):
 *   - it rescans NVML and updates the local node's NVIDIA devices (health,
 *     used memory, utilization); a device that disappears gets
 *     present=false and an event, one that returns is present again, a GPU
 *     that appears after start is reported in an event (not added);
 *   - it asks NVML which processes use each local device, maps them to
 *     apps (the app's cgroup, the process group of the app's leader,
 *     ACCEL_APP=<name> in /proc/<pid>/environ, or the leader pid of the
 *     last run that the driver still lists), and compares with the
 *     allocations: a process of
 *     a stopped app makes the app `releasing` (killed after its stop
 *     timeout), a process of no app is `foreignUsage` on the device plus an
 *     event, and an app `releasing` whose processes are gone (and whose
 *     cgroup is empty) is finished
 *     (its rows released, or the app deleted for an uninstall).
 * It is not the supervisor (runtime.c notices an app's leader exiting) and
 * makes no placement decision; placement reads present/healthy.
 *
 * Locking: NVML calls, /proc reads and kill() happen without d->lock; the
 * pass gathers what it needs under the lock, works outside, and applies the
 * result under the lock again.
 */
#ifndef ACCEL_DAEMON_NODE_ENFORCE_RECONCILE_H
#define ACCEL_DAEMON_NODE_ENFORCE_RECONCILE_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/state.h"

#define RECONCILE_DEFAULT_MS 5000 /* pass interval without an option */

/*
 * Start the reconciler thread (it opens NVML itself, and retries every pass
 * while NVML cannot be loaded). Sets d->reconcile. Returns ACCEL_OK or
 * ACCEL_ESYS when the thread cannot be created. Call once, without d->lock.
 */
enum accel_err reconcile_start(struct accel_daemon *d);

/* Stop and join the thread and close NVML. Without d->lock. NULL-safe. */
void reconcile_stop(struct accel_daemon *d);

/*
 * How many processes of app `name` (leader of its last run: last_pid) NVML
 * still lists on the app's local devices. A process query that fails counts
 * as one (the device cannot be shown free). 0 when NVML is not loaded or the
 * driver cannot list processes. Call WITHOUT d->lock (takes it briefly to
 * read the app's devices; queries NVML and /proc without it).
 */
uint32_t reconcile_app_lingering(struct accel_daemon *d, const char *name,
                                 pid_t last_pid);

/* The NVML driver version of the last pass, "" when unknown. Caller holds
 * d->lock; the string stays valid while it does. */
const char *reconcile_driver(struct accel_daemon *d);

/*
 * The runtime view of GET /api/runtime (caller holds d->lock): {nodeName,
 * nvml:{loaded, status, driver, cuda}, reconcileIntervalMs, devices,
 * identity, enforcement}, with devices the local node's devices as the
 * caller shows them (a JSON array, stolen). New reference.
 */
json_t *reconcile_runtime_json(struct accel_daemon *d, json_t *devices);

#endif /* ACCEL_DAEMON_NODE_ENFORCE_RECONCILE_H */
