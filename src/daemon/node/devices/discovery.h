/* SPDX-License-Identifier: MIT */
/*
 * discovery.h: the nodes and devices of the state at start-up (the
 * inventory's, or the local machine's with what NVML finds) and NVML
 * scanned again later (POST /api/gpu/rediscover).
 */
#ifndef ACCEL_DAEMON_NODE_DEVICES_DISCOVERY_H
#define ACCEL_DAEMON_NODE_DEVICES_DISCOVERY_H

#include <jansson.h>

#include "daemon/node/devices/inventory.h"
#include "daemon/state.h"

/* Add the inventory's nodes and devices (a node without devices gets a CPU
 * device of 3/4 of its memory). Start-up, before any thread. */
void discovery_inventory(struct accel_daemon *d,
                         const struct inventory *inv);
/* Add the local node (this machine: memory, load, the data directory's
 * disk) and the GPUs NVML lists, or a CPU device when it lists none; sets
 * d->nvml_status. Start-up, before any thread. */
void discovery_local(struct accel_daemon *d);
/*
 * Scan NVML again (POST /api/gpu/rediscover, after `accelctl gpu install`
 * loaded a driver): NVIDIA GPUs of the local node that acceld does not know
 * yet are added in their type's default mode, with a device.new event each;
 * those it knows are the reconciler's (missing, returned, health). Takes
 * d->lock. Returns the ids added (a JSON array, new reference, maybe empty)
 * and *status the NVML status sentence (malloc'd), or NULL with *status the
 * reason when NVML cannot be loaded or the local node is declared by the
 * inventory (its devices are the inventory's).
 */
json_t *discovery_rediscover(struct accel_daemon *d, char **status);

struct drm_gpu;
struct dev_info;

/*
 * What one refresh's fdinfo walk saw on a local DRM device, for the outside
 * meter (enforce/meter.h): one entry with app "" for each device the scan
 * listed (its clients of no app, maybe 0 bytes: the device was read), and
 * one for each app whose processes hold DRM clients there (by cgroup, else
 * the app's leader pid), their bytes summed.
 */
struct drm_usage {
    char dev[96];                 /* the device's id */
    char app[ACCEL_NAME_MAX + 1]; /* "" = the device's own entry */
    uint64_t bytes;               /* what the clients hold there */
};

/*
 * Read the DRM sysfs and fdinfo again (drm.h) and update the local node's
 * DRM devices: used memory, utilization, power, temperature, health. A
 * device no longer listed keeps its place with its readings unknown. The
 * reconciler's pass calls it. Reads the files without d->lock, takes it to
 * apply. Where use is not NULL, *use is set to a new array (caller frees;
 * NULL when no DRM device was read) of what the walk saw per device and
 * app, *nuse to its length.
 */
void discovery_drm_refresh(struct accel_daemon *d, struct drm_usage **use,
                           size_t *nuse);
/*
 * The DRM card ("card0") of the local DRM device dev_id, by one scan of the
 * sysfs (the ids as discovery gives them): true with card set, false when
 * no card of the scan has that id. Reads files only (no d->lock).
 */
bool discovery_drm_card(struct accel_daemon *d, const char *dev_id,
                        char *card, size_t cap);
/* What that card offers and holds now (drm_card_memory under acceld's
 * --sysfs-root and --proc-root). No d->lock. */
enum accel_err discovery_drm_memory(struct accel_daemon *d, const char *card,
                                    uint64_t *memory, uint64_t *used);
/* The readings of a DRM device into its dev_info (lock held). */
void discovery_drm_readings(struct dev_info *di, const struct drm_gpu *g);
/* The ids of g[0..n) on node: <node>-<type>-<k>, k counting per type in
 * card order. New array of n strings, caller frees each and the array. */
char **discovery_drm_ids(const char *node, const struct drm_gpu *g,
                         size_t n);

/* Append a node (then its devices: they must follow it, SPEC's snapshot
 * keeps a node's devices contiguous). */
void discovery_add_node(struct accel_daemon *d, const char *name, bool local,
                        uint64_t mem_total, uint64_t mem_used,
                        uint64_t cpu_total, uint64_t cpu_used,
                        uint64_t disk_total, uint64_t disk_used);
void discovery_add_device(struct accel_daemon *d, const char *id,
                          enum accel_type type, const char *model,
                          uint64_t memory, enum accel_support st,
                          bool healthy, int index);

/* Add a device to node (any node, not only the last): the devices after
 * its node's move one place up, and the apps' rows, the id index and the
 * nodes' first_dev follow. The placement index must be built again
 * (adm_index_build). Lock held, no device index kept across it. */
void discovery_insert_device(struct accel_daemon *d, uint32_t node,
                             const char *id, enum accel_type type,
                             const char *model, uint64_t memory,
                             enum accel_support st, bool healthy, int index);

#endif /* ACCEL_DAEMON_NODE_DEVICES_DISCOVERY_H */
