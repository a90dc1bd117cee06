/* SPDX-License-Identifier: MIT */
/*
 * drm.h: AMD and Intel accelerators found through the kernel's DRM sysfs
 * (amdgpu, i915, xe) and the per-client memory the kernel prints in
 * /proc/<pid>/fdinfo of a DRM file (the drm-memory-* / drm-total-* keys of
 * the kernel's drm-usage-stats). No vendor library, no ioctl: only files
 * the driver already offers, read under a root that tests replace with a
 * fixture tree (acceld --sysfs-root / --proc-root).
 *
 * It reports what the files say and the rule that turned them into a
 * device's memory (drm_gpu.mem_source); it keeps no inventory and makes no
 * placement decision. A malformed or unreadable file leaves that one figure
 * unknown, with a log line naming the file, never a crash.
 *
 * Thread-safety: no state; every call reads the files afresh.
 */
#ifndef ACCEL_DAEMON_NODE_DEVICES_DRM_H
#define ACCEL_DAEMON_NODE_DEVICES_DRM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"

#define DRM_VENDOR_AMD 0x1002u
#define DRM_VENDOR_INTEL 0x8086u
#define DRM_NAME_LEN 128   /* product name */
#define DRM_SOURCE_LEN 200 /* the memory rule as a sentence */
#define DRM_UNKNOWN UINT64_MAX /* a figure the driver does not report */

/* Why a reading is unknown (mirrors enum nvml_na's use in the daemon). */
enum drm_na {
    DRM_NA_NONE = 0,  /* known */
    DRM_NA_ABSENT,    /* the driver offers no such file */
    DRM_NA_MALFORMED  /* the file holds no number (logged) */
};

/* One DRM card of a supported vendor. */
struct drm_gpu {
    char card[16];             /* "card0" */
    char pci[32];              /* PCI address "0000:c3:00.0", "" unknown */
    char render[16];           /* "renderD128", "" unknown */
    unsigned vendor, device;   /* PCI ids */
    char driver[16];           /* "amdgpu", "i915", "xe", "" unknown */
    enum accel_type type;      /* amd, amd-gpu, intel, intel-gpu */
    char name[DRM_NAME_LEN];   /* product_name, else pci.ids, else ids */
    uint64_t vram_total;       /* bytes, DRM_UNKNOWN if not reported */
    uint64_t vram_used;        /* bytes, DRM_UNKNOWN */
    uint64_t gtt_total;        /* bytes, DRM_UNKNOWN */
    uint64_t gtt_used;         /* bytes, DRM_UNKNOWN */
    uint64_t memory;           /* what the device offers (the rule), 0 unknown */
    uint64_t used;             /* bytes in use, DRM_UNKNOWN */
    char mem_source[DRM_SOURCE_LEN]; /* where memory came from */
    char used_source[DRM_SOURCE_LEN]; /* where used came from, "" unknown */
    int util;                  /* gpu_busy_percent, -1 unknown */
    int64_t power_mw;          /* hwmon power1_average (or _input), -1 */
    int64_t power_limit_mw;    /* hwmon power1_cap (or _max), -1 */
    int temp;                  /* hwmon temp1_input, degrees C, -1 */
    enum drm_na util_na, power_na, limit_na, temp_na; /* why unknown */
    int healthy;               /* 1, or 0 when the memory is unreadable */
    char health_cause[160];    /* why unhealthy, "" when healthy */
};

/* One DRM client's memory, from /proc/<pid>/fdinfo. */
struct drm_client {
    pid_t pid;                 /* process holding the DRM file */
    size_t gpu;                /* index into the scan's array */
    uint64_t bytes;            /* memory it holds on that device */
};

/*
 * Scan <sysfs_root>/class/drm/card* (cards only, not connectors) for
 * devices of vendor 0x1002 (amdgpu) and 0x8086 (i915/xe).
 *   sysfs_root  "/sys" normally; a fixture tree in tests.
 *   node_ram    bytes of node RAM (MemTotal), for the unified-memory share.
 *   out         new array in card order (caller frees), NULL when none;
 *               set only on success.
 * The memory rule (docs/internals/discovery.md): amd-gpu and intel-gpu
 * offer their VRAM; an amd APU offers its carve-out (mem_info_vram_total)
 * plus the GTT it may map (mem_info_gtt_total), the GTT capped at the
 * SPEC's share of node RAM (3/4); intel integrated offers the share.
 * Product names come from device/product_name, else pci.ids ($ACCEL_PCI_IDS,
 * /usr/share/misc/pci.ids, /usr/share/hwdata/pci.ids). Returns ACCEL_OK
 * (no DRM directory: count 0).
 */
enum accel_err drm_scan(const char *sysfs_root, uint64_t node_ram,
                        struct drm_gpu **out, size_t *count);

/*
 * The DRM clients of every process under proc_root ("/proc"): each
 * /proc/<pid>/fdinfo/<fd> whose fd links into /dev/dri and that carries
 * drm-pdev (else the render node) of one of g[0..n). A client id seen on
 * several fds, or in several processes (fork), counts once on its device,
 * for the first process found. Dedicated-VRAM types count their vram/local
 * regions; unified ones every region. Sets g[i].used (where sysfs did not
 * report it) to the sum of its clients.
 *   out  new array (caller frees), NULL when none; always set.
 * Unreadable processes (another user's, gone) are skipped.
 */
void drm_clients(const char *proc_root, struct drm_gpu *g, size_t n,
                 struct drm_client **out, size_t *count);

/*
 * Bytes of a "drm-memory-vram:  1024 KiB" value ("1024 KiB", "3 MiB",
 * "17"); false when it is not a number with an optional unit.
 */
bool drm_parse_size(const char *s, uint64_t *out);

/*
 * What one card holds now, by drm_scan's rule, reading only the files its
 * memory needs (no product name, no hwmon: elastic memory reads it every
 * few milliseconds while an ask waits, SPEC 4.4):
 *   card    "card0" (a drm_gpu's card)
 *   memory  what the device offers (drm_gpu.memory)
 *   used    what is in use: the driver's sysfs figure (amdgpu
 *           mem_info_vram_used, + mem_info_gtt_used on an APU), else the
 *           sum of the card's DRM clients under proc_root (fdinfo)
 * ACCEL_OK; ACCEL_ENOTFOUND when card is no device of ours; ACCEL_EIO when
 * its memory or its use cannot be read.
 */
enum accel_err drm_card_memory(const char *sysfs_root, const char *proc_root,
                               const char *card, uint64_t node_ram,
                               uint64_t *memory, uint64_t *used);

/* The stand-in id of the k-th device of a type on a node:
 * "<node>-<type>-<k>" (SPEC 1 synthetic ids). Caller frees. */
char *drm_device_id(const char *node, enum accel_type t, unsigned k);

#endif /* ACCEL_DAEMON_NODE_DEVICES_DRM_H */
