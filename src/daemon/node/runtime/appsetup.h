/* SPDX-License-Identifier: MIT */
/*
 * appsetup.h: what a start prepares for an app on this node, shared by
 * runtime.c (an app acceld runs) and cdi.c (an external app, for people's
 * own containers): its shim files (the ledger of each Memory-slicing row,
 * a time-sliced card's ledger and broker socket, the config naming them,
 * the events file), planned under d->lock and written without it, and its
 * cgroup's limits. Which rows are here and how the shim numbers them are
 * answered here too. Not the start, nor the CDI spec.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_APPSETUP_H
#define ACCEL_DAEMON_NODE_RUNTIME_APPSETUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"
#include "daemon/node/ledger.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/proc/identity.h"
#include "daemon/state.h"

/* The devices of an app's shim config, with their files' paths: a plan
 * (appsetup_plan) that owns every string its devs point to, so that it
 * can be written after d->lock is released. */
#define APPSETUP_VOTERS 32

struct appsetup_files {
    struct ledger_device devs[ADM_MAX_SELECTION]; /* the config's devices */
    char paths[ADM_MAX_SELECTION][512]; /* ledgers' or sockets' paths */
    char ids[ADM_MAX_SELECTION][ACCEL_ID_MAX + 1]; /* the devices' ids */
    char reclaim[108];   /* acceld's reclaim socket (SPEC 4.4), "" none */
    size_t n;                                      /* devs in use */
    bool dir_group;  /* an external app's config directory: 0750, root and
                        group dir_gid, though its run identity is acceld's
                        (appsetup_plan clears it; the CDI refresh sets it) */
    gid_t dir_gid;   /* that group: the app owner's */
    /* the apps whose measured context sizes may seed this app's ledgers
     * (ledger_seed_ctx): its owner's own apps and admins' (or shared)
     * apps on one of its devices, at most APPSETUP_VOTERS; never another
     * member's, who could write a size into its own ledger to have this
     * app over-charged (denied) or under-charged */
    char voters[APPSETUP_VOTERS][ACCEL_ID_MAX + 1];
    size_t nvoters;
    /* acceld's own measure of a context on each device of devs
     * (node/devices/ctxprobe.h), UINT64_MAX none: seeds that ledger in
     * preference to the voters */
    uint64_t ctx[ADM_MAX_SELECTION];
};

/* Is row i of a on this machine? An app bound across nodes (SPEC 10) runs
 * one part per node, each with that node's devices only. */
bool appsetup_row_local(struct accel_daemon *d, const struct app *a, size_t i);

/* Does a need the shim on this node: a local NVIDIA row shared (not
 * exclusive), or a local AMD or GB10 row with a Memory-slicing quota? */
bool appsetup_needs_shim(struct accel_daemon *d, const struct app *a);

/* The CUDA ordinal of row i inside the app: its position among the app's
 * NVIDIA rows, the order of CUDA_VISIBLE_DEVICES; for an AMD row its HIP
 * ordinal, the position among the AMD rows (HIP_VISIBLE_DEVICES). -1 for
 * other types. */
int appsetup_ordinal(struct accel_daemon *d, const struct app *a, size_t i);

/* Is row i a Memory-slicing quota the shim enforces? */
bool appsetup_quota_row(struct accel_daemon *d, const struct app *a, size_t i);

/* "<data-dir>/run" (caller frees). */
char *appsetup_run_dir(struct accel_daemon *d);

/* "<data-dir>/run/apps/<app>/shim.conf", the app's shim config (caller
 * frees). */
char *appsetup_config_path(struct accel_daemon *d, const char *app);

/* mkdir -p path (0755), errors ignored: what follows fails on its own. */
void appsetup_mkdirs(const char *path);

/* "<data-dir>/run/apps/<app>/shim.events" (caller frees): where the
 * app's shim reports the names that go by unheld (enforce/unheld.h). */
char *appsetup_events_path(struct accel_daemon *d, const char *app);

/*
 * What a's shim files should be, into f (lock held): a ledger for every
 * Memory-slicing row (its limit the row's quota), the broker socket and
 * the card's ledger of a time-sliced one. Reads nothing on disk and writes
 * nothing. ACCEL_OK, or ACCEL_EINVAL when a path does not fit.
 */
enum accel_err appsetup_plan(struct accel_daemon *d, const struct app *a,
                             struct appsetup_files *f);

/*
 * Make what f plans for app (no lock needed: f owns its strings; d only
 * for its data dir): each ledger (an existing one of ours keeps its slots
 * and usage and takes the planned limit, ledger_create), the app's
 * directory, the config naming them and its events file, emptied. A time-
 * sliced device's card ledger is no file: the config names
 * LEDGER_CARD_BROKER. ACCEL_OK or the first failure.
 */
enum accel_err appsetup_write(struct accel_daemon *d, const char *app,
                              const struct identity_run *who,
                              struct appsetup_files *f);

/* The limits of a's selected type (SPEC 8.2). */
struct cgroup_limits appsetup_limits(const struct app *a);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_APPSETUP_H */
