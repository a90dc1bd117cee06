/* SPDX-License-Identifier: MIT */
/*
 * vram.h: the strongest tier that holds an app to its VRAM quota on this
 * node (SPEC 4). The shim always runs (it keeps the views right and
 * refuses first); above it, where the machine offers one:
 *
 *   kernel  the cgroup dmem controller has the device's memory as a region
 *           (dmem.capacity, matched by PCI address): the quota is the app
 *           cgroup's dmem.max for that region (node/dmem.h);
 *   driver  the NVIDIA driver sets the limit for the app's cgroup
 *           (nvmlDeviceSetMemoryLimits_v1, looked up at run time).
 *
 * At start vram_init says per local device which tier it offers and why
 * not a stronger one; each start of an app writes its rows' limits (a
 * Memory-slicing row its quota, any other row no limit), each release of
 * its rows clears them, and a refused write is an event and a fallback to
 * the shim, never a silent claim. See docs/internals/enforcement.md.
 *
 * Thread-safety: vram_init and vram_fini run before and after the threads;
 * the rest with d->lock held, except vram_refresh_usage (takes it).
 */
#ifndef ACCEL_DAEMON_NODE_LIMITS_VRAM_H
#define ACCEL_DAEMON_NODE_LIMITS_VRAM_H

#include <jansson.h>

#include "daemon/state.h"

/* Who holds a quota (dev_info.vram_tier, app.row_vram). */
enum vram_tier {
    VRAM_UNSET = 0, /* not a local device / not a quota row */
    VRAM_SHIM,      /* the shim alone (or nothing, where no shim runs) */
    VRAM_DRIVER,    /* the NVIDIA driver's limit for the app's cgroup */
    VRAM_KERNEL,    /* the kernel: the app cgroup's dmem.max */
};

/* "kernel", "driver", "shim" (UNSET: "none"). */
const char *vram_tier_name(enum vram_tier t);

/*
 * After discovery and runtime_cgroups_init, before the threads: read
 * dmem.capacity under the cgroup root (--cgroup-root, else the v2 mount),
 * match its regions to the local devices by PCI address, see whether
 * NVML offers memory limits, and set each local device's vram_tier and
 * vram_note. A malformed dmem.capacity is an event and the shim's tier.
 * The apps found running again get the tier their limits read back.
 */
void vram_init(struct accel_daemon *d);
void vram_fini(struct accel_daemon *d);

/*
 * Write a's limits on this node (lock held; its cgroup exists: after
 * cgroup_app_prepare): per local row on a device of the kernel or driver
 * tier, the row's quota for a Memory-slicing row, no limit for any other.
 * Fills a->row_vram; a refusal is an event, the row falls back to the
 * shim and a->vram_refused says why.
 */
void vram_app_apply(struct accel_daemon *d, struct app *a);

/* a's rows are going (lock held): lift what vram_app_apply set, where its
 * cgroup still exists. */
void vram_app_clear(struct accel_daemon *d, const struct app *a);

/* The usage of the rows the kernel or the driver holds, as they count it
 * (dmem.current, NVML's currentUsed for the cgroup): into row_usage and
 * usage. Takes d->lock; reads without it. */
void vram_refresh_usage(struct accel_daemon *d);

/* What to read for one app row the kernel or the driver holds: its tier,
 * the app's cgroup, the dmem region or the device UUID. */
struct vram_probe {
    uint8_t tier;      /* VRAM_KERNEL or VRAM_DRIVER */
    char *rel;         /* the app's cgroup (owned) */
    char *what;        /* the region (kernel) or the device UUID (driver) */
};

/* Fill *p for row k of a (lock held); false (nothing to free) when
 * neither the kernel nor the driver holds the row. */
bool vram_probe_init(const struct accel_daemon *d, const struct app *a,
                     size_t k, struct vram_probe *p);
/* Read what the tier counts for the row into *used (without the lock:
 * file I/O or an NVML call); false when it cannot be read. */
bool vram_probe_read(const struct accel_daemon *d, const struct vram_probe *p,
                     uint64_t *used);
void vram_probe_free(struct vram_probe *p);

/*
 * Device dev's memory enforcement when the kernel or the driver holds the
 * apps bound to it in Memory slicing: *tier "kernel"/"driver" and *note a
 * new sentence naming the region or the API; false (nothing set) when
 * not, or when an app's write there was refused.
 */
bool vram_device_holds(struct accel_daemon *d, int dev, const char **tier,
                       char **note);

/* [{deviceId, memory, memoryNote}] of a's local Memory-slicing rows: who
 * holds each quota (new reference). */
json_t *vram_app_json(struct accel_daemon *d, const struct app *a);

#endif /* ACCEL_DAEMON_NODE_LIMITS_VRAM_H */
