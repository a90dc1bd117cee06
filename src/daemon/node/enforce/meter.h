/* SPDX-License-Identifier: MIT */
/*
 * meter.h: the outside meter (SPEC 4.2, issues 35 and 45): what the
 * driver holds for an app on a Memory-slicing device, read at each
 * reconciler pass from NVML's per-process figures (host pids) on NVIDIA,
 * and on AMD from the memory the amdgpu driver prints for each DRM client
 * in /proc/<pid>/fdinfo (devices/drm.h), against what the shim charged in
 * the app's ledger. What the driver counts beyond the shim's
 * charges (a video session, a Vulkan or OpenGL context, another library's
 * context) is charged into the ledger as `untracked`, so the app's next
 * allocation is refused; an app above its quota by more than the device's
 * tolerance gets an event, a line in `accelctl gpu status`, a warning on
 * the page, and is stopped when the device's setting says `stop`.
 *
 * The reconciler (reconcile.c) drives it: meter_gather under d->lock,
 * meter_read before and after its NVML scan and meter_charge without the
 * lock, meter_apply under the lock. It maps no process itself: the
 * reconciler's mapping of NVML pids to apps, and the DRM refresh's of
 * fdinfo clients to apps (meter_driver_drm), fill each target's driver
 * figure. docs/internals/meter.md has the reasoning about races.
 */
#ifndef ACCEL_DAEMON_NODE_ENFORCE_METER_H
#define ACCEL_DAEMON_NODE_ENFORCE_METER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/node/limits/vram.h"
#include "daemon/state.h"

#define METER_DEFAULT_TOLERANCE (64ULL << 20) /* bytes over the quota */

struct drm_usage; /* devices/discovery.h */

/* Does the meter read devices of type t (NVIDIA through NVML, AMD through
 * the amdgpu fdinfo)? */
bool meter_type(enum accel_type t);

/* One pass's figures for one app on one device (pure arithmetic). */
struct meter_in {
    uint64_t driver;      /* bytes NVML lists for the app's processes */
    uint64_t charged;     /* the shim's charges (the ledger's used) */
    uint64_t last_excess; /* the previous pass's excess */
    uint64_t limit;       /* the quota */
    uint64_t tolerance;   /* bytes over the quota that are not reported */
};

struct meter_out {
    uint64_t excess;    /* driver - charged, 0 when below */
    uint64_t untracked; /* to charge: min(excess, last_excess) */
    uint64_t over;      /* charged + untracked - limit, 0 within it */
    bool beyond;        /* over > tolerance: report (and stop) */
};

/*
 * The meter's decision from one pass's figures: a rise is charged only
 * once two passes in a row saw it (an allocation or free that crosses the
 * moment NVML is read is never charged), a fall at once. Pure.
 */
void meter_compute(const struct meter_in *in, struct meter_out *out);

/* One (app, device) metered this pass. */
struct meter_target {
    char *app;            /* app name (owned) */
    size_t dev;           /* device index at gather time */
    char uuid[96];        /* its id (NVML UUID, or the DRM device's) */
    char path[512];       /* the app's ledger for it */
    struct meter_in in;   /* limit, tolerance, last_excess from d */
    bool stop;            /* the device's setting stops an app beyond */
    bool had;             /* d had a reading of it (last_excess real) */
    bool ledger_ok;       /* the ledger read, both times */
    bool seen;            /* NVML listed the device's processes, or
                           * the DRM refresh read the device's clients */
    struct vram_probe vp; /* the kernel's or the driver's count of the
                           * app's cgroup, where one of them holds it */
    bool vp_on;           /* vp is set */
    bool vp_ok;           /* and was read this pass: vp_used */
    uint64_t vp_used;
    struct meter_out out; /* meter_charge's decision */
};

/*
 * The (app, device) pairs to meter: each quota row of an app that runs
 * here, on a present local device of a metered type (meter_type). New array
 * (meter_free), *n set. Caller holds d->lock.
 */
struct meter_target *meter_gather(struct accel_daemon *d, size_t *n);

/*
 * Read the targets' ledgers (without d->lock): the charged figure is the
 * higher of the reading before the NVML scan and the one after (`after`),
 * so an allocation reserved or freed while NVML is read is counted on the
 * shim's side. A target not read both times is not charged.
 */
void meter_read(struct meter_target *t, size_t n, bool after);

/*
 * Read, between the two ledger readings, what the kernel (the app
 * cgroup's dmem.current) or the driver (NVML's count for the cgroup)
 * holds for targets whose row one of them holds (node/vram.h): that count
 * sees every allocation of the app's processes, whatever API made it, so
 * the driver figure is the higher of it and NVML's per-process sum.
 */
void meter_read_tier(const struct accel_daemon *d, struct meter_target *t,
                     size_t n);

/*
 * The driver figure of the targets on DRM devices from one DRM refresh
 * (discovery_drm_refresh): a target whose device the refresh read is seen,
 * and its app's DRM clients there are added to its driver figure. Targets
 * on devices the refresh did not read are left as they are.
 */
void meter_driver_drm(struct meter_target *t, size_t n,
                      const struct drm_usage *u, size_t nu);

/* Decide each seen target's charge and write it into its ledger (without
 * d->lock). Targets not seen or not read keep their ledger as it is. */
void meter_charge(struct meter_target *t, size_t n);

/*
 * Record the readings on the devices (d->dinfo[].meter, replacing the
 * last pass's), send meter.over-quota / meter.within-quota events, and
 * stop an app beyond its tolerance where the device says `stop`.
 * Caller holds d->lock.
 */
void meter_apply(struct accel_daemon *d, struct meter_target *t, size_t n);

/* Free an array from meter_gather. NULL-safe. */
void meter_free(struct meter_target *t, size_t n);

/* The reading of app on device dev, NULL when the meter has none. Lock
 * held; valid until the next pass. */
const struct app_meter *meter_find(const struct accel_daemon *d, size_t dev,
                                   const char *app);

/* The device's meter setting {overQuotaAction, tolerance} with defaults
 * filled in. New reference; lock held. */
json_t *meter_settings_json(const struct accel_daemon *d, size_t dev);

#endif /* ACCEL_DAEMON_NODE_ENFORCE_METER_H */
