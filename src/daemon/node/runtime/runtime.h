/* SPDX-License-Identifier: MIT */
/*
 * runtime.h: the node runtime seen from the operations: start an app's
 * process in a cgroup of its own with its devices' environment and its
 * limits, stop it (blocking, or handed to the supervisor), and the
 * supervisor thread that drives stops and notices apps exiting by
 * themselves: an app is running until its cgroup is empty (SPEC 8.2, 5.6).
 * See docs/internals/runtime.md for the states a stop goes through.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_RUNTIME_H
#define ACCEL_DAEMON_NODE_RUNTIME_RUNTIME_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/state.h"

/* Is a run by another node's agent (a cluster: all its rows on one other
 * node, and a command to run)? Then this node only writes what it asks
 * for (`resuming`, `stopping`) and that agent does it. */
bool runtime_runs_on_agent(struct accel_daemon *d, const struct app *a);

/* Is a an external app (no run.command, no run.image) of a cluster bound
 * to one node's cards only, that node this one (here) or another whose
 * agent is a member (on_agent)? People's own containers of it run there,
 * in its cgroup on that machine: that node's agent waits for them at the
 * app's end (cluster.c) and releases it. */
bool runtime_held_here(struct accel_daemon *d, const struct app *a);
bool runtime_held_on_agent(struct accel_daemon *d, const struct app *a);

/* Is a an external app whose cgroup on this machine holds processes
 * (people's own containers): on one acceld, or in a cluster held here? */
bool runtime_outside_here(struct accel_daemon *d, const struct app *a);

/* Does another node's agent end a and release it (runs_on_agent or
 * held_on_agent)? This node then only writes `stopping`. */
bool runtime_ends_on_agent(struct accel_daemon *d, const struct app *a);

/*
 * Start a's process through its runner (caller holds d->lock): the start
 * step of launch_app (launch.h), which is what starts an app; nothing
 * else calls this. On success sets a->pid and a->pid_start. On failure
 * *cause gets an allocated sentence.
 */
enum accel_err runtime_start(struct accel_daemon *d, struct app *a,
                             char **cause);

/*
 * Stop app name (leader pid, identity start) and wait: SIGTERM to every
 * process of its cgroup, cgroup.kill after timeout_s, then up to 5 s more
 * until the cgroup is empty (without cgroups: its process group and the
 * processes tagged ACCEL_APP=name). The empty cgroup is removed. Blocks for
 * up to timeout_s + 5 s: call WITHOUT d->lock, and only where an operation
 * must know the outcome before it answers (the mode switch, a forced or
 * legacy rebind). *out_status gets the leader's status when known.
 * ACCEL_OK, or ACCEL_EBUSY when processes survived the kill.
 */
enum accel_err runtime_stop(struct accel_daemon *d, const char *name,
                            pid_t pid, uint64_t start, int timeout_s,
                            int *out_status);

/*
 * End what an external app's cgroup on this machine holds (people's own
 * containers, docs/containers.md section 5): SIGTERM, cgroup.kill after
 * timeout_s, then up to 5 s for the survivors. Blocks as runtime_stop
 * does: call WITHOUT d->lock. True when the cgroup is empty (or there is
 * none); false when processes survived the kill.
 */
bool runtime_stop_outside(struct accel_daemon *d, const char *name,
                          int timeout_s);

/*
 * Hand a's stop to the supervisor (lock held; the caller has committed the
 * state `stopping`). The supervisor sends SIGTERM to every process of the
 * app's cgroup within a round (100 ms), cgroup.kill after the manifest's
 * stopTimeoutSeconds, and once the cgroup is empty and NVML lists none of
 * the app's processes calls lifecycle_stop_finished (state `to` with
 * reason, or the uninstall). Processes that survive the kill by 5 s leave the app
 * `releasing` until the reconciler sees the cgroup empty (SPEC 5.6, 2.7).
 */
void runtime_stop_begin(struct app *a, enum app_state to, const char *reason,
                        bool uninstall);

/*
 * The ledger file of a's allocation row `row` into out (cap bytes): true
 * when that row is a Memory-slicing quota the shim enforces (it has a
 * ledger while a runs), false otherwise. Caller holds d->lock.
 */
bool runtime_ledger_of(struct accel_daemon *d, const struct app *a,
                       size_t row, char *out, size_t cap);

/*
 * Which tier enforces what (SPEC 8.2): {containment, memory, cpu, pids:
 * "cgroup-v2"|"cgroup-v1"|"none", reasons: {<key>: why none}, cgroup:
 * path}. For a NULL app, what this node offers (plus pidsMax); for an app,
 * what applies to it (a limit its manifest does not set is "none").
 * Lock held. New reference.
 */
json_t *runtime_enforcement(struct accel_daemon *d, const struct app *a);

/* Detect the machine's cgroups and make accel.slice/<instance> (at start,
 * before the threads); at shutdown remove the empty app cgroups and the
 * instance's directories (running apps keep theirs). */
void runtime_cgroups_init(struct accel_daemon *d);
void runtime_cgroups_fini(struct accel_daemon *d);
/* At start: kill what is left of an app this acceld runs no process of (no
 * leader recorded), in its cgroup or with its tag; an event says so. */
void runtime_end_orphans(struct accel_daemon *d);

/* a's process here belongs to no app any more (another node of the
 * cluster deleted the app while it ran here): SIGKILL to its cgroup, its
 * group and its tagged processes now, and a warning with why (lock held;
 * no store access: the watch calls it while it applies a revision). */
void runtime_kill_unowned(struct accel_daemon *d, const struct app *a,
                          const char *why);

/* Remove the quota ledgers and shim config of a's current rows (lock
 * held; takes d->files_lock, so it waits for a CDI refresh writing them).
 * Called whenever rows are dropped. */
void runtime_release_files(struct accel_daemon *d, const struct app *a);

/* The binding of the external app a is about to end: SIGTERM to what its
 * cgroup holds (a person's own container, moved there by the CDI hook);
 * returns 1 while it holds anything, else 0 (0 too for an app acceld
 * runs: its stop has emptied its cgroup). Lock held. */
uint32_t runtime_held_outside(struct accel_daemon *d, const struct app *a);

/* Start / stop the supervisor thread. */
enum accel_err runtime_supervisor_start(struct accel_daemon *d);
void runtime_supervisor_stop(struct accel_daemon *d);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_RUNTIME_H */
