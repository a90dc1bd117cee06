/* SPDX-License-Identifier: MIT */
/*
 * cdi.h: the GPUs and the shim as a container gets them (SPEC 8.2.1), for
 * the container runner (runner_container.c) and for people's own
 * containers (the CDI device of an external app): NVIDIA's GPUs as the
 * CDI devices of NVIDIA's spec, an AMD or Intel GPU as its device nodes,
 * the shim, a container copy of its config, the ledgers and the broker
 * sockets mounted at fixed paths; and the CDI spec acceld writes for
 * people's own containers. Not the podman run. Any thread; the lock as
 * each function says.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_CDI_H
#define ACCEL_DAEMON_NODE_RUNTIME_CDI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"
#include "daemon/node/ledger.h"
#include "daemon/state.h"

/* The paths inside a container. */
#define CDI_CTR_SHIM    "/usr/lib/accel/libaccelshim.so" /* the shim (ro) */
#define CDI_CTR_CONFIG  "/run/accel/conf/shim.conf" /* its config, read-only */
#define CDI_CTR_CONFIG_DIR "/run/accel/conf" /* the config's folder */
#define CDI_CTR_LEDGERS "/run/accel/ledgers"   /* the ledgers */
#define CDI_CTR_BROKER  "/run/accel/broker"    /* broker sockets */
#define CDI_CTR_RECLAIM "/run/accel/reclaim.sock" /* elastic memory's */
#define CDI_CTR_KFD     "/dev/kfd" /* AMD's compute interface (KFD) */
#define CDI_CTR_DRI     "/dev/dri" /* the render nodes */
/* The container's copy of the shim config, in <data-dir>/run/apps/<app>:
 * its folder (CDI_CTR_CONFIG_HOSTDIR) is what the container mounts, at
 * CDI_CTR_CONFIG_DIR, so that a rewrite (a rename: a live quota,
 * livequota.c) reaches the running container; a file's own bind mount
 * would keep the inode it started with. */
#define CDI_CTR_CONFIG_HOSTDIR "container"
#define CDI_CTR_CONFIG_FILE CDI_CTR_CONFIG_HOSTDIR "/shim.conf"

/* A device node a container gets. */
struct cdi_node {
    char *host; /* its path on the host (owned) */
    char *ctr;  /* its path in the container (owned) */
    gid_t gid;  /* the host node's group */
};

/*
 * The CDI spec in /etc/cdi or /var/run/cdi that lists kind=name: true, and
 * with edits not NULL, its device's containerEdits and the spec's own
 * appended to *edits (a new object of arrays env, deviceNodes, mounts,
 * hooks when *edits is NULL).
 */
bool cdi_find(const char *kind, const char *name, json_t **edits);

/* How to make NVIDIA's spec, for a refusal (caller frees). */
char *cdi_missing_cause(const char *uuid);

/* Is t an AMD GPU type (amd, amd-gpu)? */
bool cdi_amd_type(enum accel_type t);
/* Is t an Intel GPU type (intel, intel-gpu)? */
bool cdi_intel_type(enum accel_type t);

/*
 * The device nodes of snapshot device dev, an AMD or Intel GPU: for AMD,
 * /dev/kfd (the compute interface every AMD GPU's work goes through) and
 * the GPU's own render node; for Intel its render node alone. Each at the
 * same path in the container: ROCm (libhsakmt) opens
 * /dev/dri/renderD<minor> of each GPU the kernel's KFD topology lists and
 * leaves out one it cannot open, and Intel's runtimes open the render
 * nodes they find, so the GPU this node is the only one the container can
 * use. Never another card's render node, never a /dev/dri/card* (the
 * display side). out[0..*out_n) allocated (cdi_nodes_free), set only on
 * success. ACCEL_ENOTFOUND with *cause naming the device and why when its
 * render node is unknown or a node is not on this machine.
 */
enum accel_err cdi_drm_nodes(const struct accel_daemon *d, uint32_t dev,
                             struct cdi_node out[2], size_t *out_n,
                             char **cause);

/* Free n[0..count)'s strings. */
void cdi_nodes_free(struct cdi_node *n, size_t count);

/*
 * HIP_VISIBLE_DEVICES in the container, "" when the app has no AMD row
 * here. The host's (runtime.c) lists each local AMD row's index, its place
 * among the machine's AMD cards in card order. The container has the
 * render nodes of the app's own AMD GPUs alone, and ROCm numbers the GPUs
 * it can open in the kernel's order, so there the app's card of the
 * lowest index is device 0 (a single GPU: "0"): each row's entry is the
 * number of the app's AMD rows of a lower index. In row order, as on the
 * host, so a row's HIP ordinal is still the one its shim config gives it
 * (its place among the app's AMD rows, runtime.c).
 */
char *cdi_hip_visible(const struct accel_daemon *d, const struct app *a);

/*
 * The container's copy of the shim config (its own paths), written (with
 * out_text NULL) or its text put in *out_text (caller frees; nothing
 * written), and what the container mounts for the shim: [{hostPath,
 * containerPath, readOnly}] of the shim, that config, the ledgers and the
 * broker sockets. NULL with *cause when the config cannot be written or
 * made.
 */
json_t *cdi_shim_mounts(struct accel_daemon *d, const char *app,
                        const struct ledger_device *host, size_t n,
                        char **out_text, char **cause);

/* The CDI device of app a for people's own containers (lock held): name
 * a->name, containerEdits: the edits of NVIDIA's spec for each bound
 * NVIDIA GPU, the deviceNodes of each bound AMD GPU (/dev/kfd and its
 * render node) or Intel GPU (its render node), the shim first in
 * LD_PRELOAD, ACCEL_APP, ACCEL_CONFIG and the visible devices (AMD's as
 * the container numbers them), the mounts of the shim, a container copy of
 * its config, its ledgers and broker sockets (devs, host paths). The copy
 * is not written here: its text goes to *out_config (caller frees; set
 * only on success), for run/apps/<app>/CDI_CTR_CONFIG_FILE. NULL with
 * *cause when NVIDIA's spec lacks a bound GPU, an AMD or Intel GPU's
 * render node is unknown or not on the machine, or the config cannot be
 * made. */
json_t *cdi_app_device(struct accel_daemon *d, const struct app *a,
                       const struct ledger_device *devs, size_t n,
                       char **out_config, char **cause);

/*
 * People's own containers (SPEC 8.2.1): the CDI spec
 * <dir>/accel-<instance>.json (dir: ACCEL_CDI_DIR, else /var/run/cdi on a
 * machine with /var/run/cdi or /etc/cdi, else none is written), kind
 * accel.dev/app, one device per external app bound here to a GPU that
 * needs the shim (its ledgers and config made for it, planned under
 * d->lock and written under d->files_lock alone, only when the plan
 * changed or a file is gone or replaced), rewritten when it changes (the
 * supervisor, every second) and removed with the last such app; removed
 * when the supervisor stops. No lock held.
 */
/* Is a an app of this node that acceld does not run (external), bound to
 * a GPU here that needs the shim: one the spec lists (lock held)? */
bool cdi_app_here(struct accel_daemon *d, const struct app *a);

#define CDI_DIR "/var/run/cdi"
void cdi_refresh(struct accel_daemon *d);
void cdi_remove(struct accel_daemon *d);

/* Forget what cdi_refresh wrote for app (files_lock held): its files are
 * being removed (runtime_release_files), and are written again if it is
 * still an external app at the next refresh. */
void cdi_forget(struct accel_daemon *d, const char *app);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_CDI_H */
