/* SPDX-License-Identifier: MIT */
/*
 * runner.h: how an app's processes are started and ended, one interface
 * with two runners, as the store has one interface and two backends:
 * runner_process.c (a host command, SPEC 8.2) and runner_container.c (an
 * OCI image under podman, SPEC 8.2.1). runtime.c keeps what both share:
 * the identity, the app's cgroup and limits, the shim's config and
 * ledgers, the log pipe, the environment, and the supervisor that decides
 * when an app is gone (its cgroup tree empty, its leader exited, NVML
 * listing none of its processes). See docs/internals/runtime.md.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_RUNNER_H
#define ACCEL_DAEMON_NODE_RUNTIME_RUNNER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "daemon/node/proc/cgroup.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/ledger.h"
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

struct runner {
    const char *kind; /* "process" or "container" (the API's app.runner) */
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
     * is the leader's wait status when acceld reaped it, else -1. */
    void (*finish)(struct accel_daemon *d, const char *app,
                   int leader_status);
};

extern const struct runner runner_process;
extern const struct runner runner_container;

/* The runner of a's manifest (an image: the container runner). */
const struct runner *runner_of(const struct app *a);

/* runner_container.c: acceld's containers at its start (no lock, before
 * the threads): a container of this instance whose app has no leader
 * alive (is in running) is removed with its cgroups; returns how many. */
size_t runner_container_sweep(struct accel_daemon *d);

/* Is image ref on this machine (podman image exists)? ACCEL_OK with *pin
 * {ref, id, digest, preload (the image's own LD_PRELOAD, when it sets
 * one)} from podman image inspect; else ACCEL_ENOTFOUND, or ACCEL_ESYS
 * when podman cannot tell (not installed), with *cause naming run.image.
 * Blocks up to a minute: no lock. */
enum accel_err runner_container_image_pin(const char *ref, json_t **pin,
                                          char **cause);

/* The file of an archive reference (oci-archive:/path[:name],
 * docker-archive:...) into *st: 0, or the errno of its stat (EINVAL for a
 * reference that is not an archive). */
int runner_container_archive_stat(const char *ref, struct stat *st);

/* Pull ref (podman pull; an archive is loaded): each line podman writes
 * to line(ctx, ...) as it comes (no lock held), then ACCEL_OK with *pin
 * as runner_container_image_pin's of the image pulled (its ref ref); else
 * *cause: "pulling <ref> failed: ", its cause sorted (no such image, the
 * registry cannot be reached, the disk is full) and podman's last line. Blocks for the
 * pull, an hour at most: no lock. */
enum accel_err runner_container_pull(const char *ref,
                                     void (*line)(void *ctx,
                                                  const char *line),
                                     void *ctx, json_t **pin, char **cause);

/* The image ID a is pinned to on this node (lock held; its pin file read
 * the first time), NULL when none. */
const char *runner_container_pinned_id(const struct accel_daemon *d,
                                       struct app *a);

/* Pin a's image (lock held): pin (stolen; NULL = none) becomes a's, kept
 * in <data-dir>/images/<app>.json, so every later start, after an acceld
 * restart too, runs that image by its ID. */
void runner_container_pin_set(struct accel_daemon *d, struct app *a,
                              json_t *pin);

/* The container's name of app in this instance (accel-<instance>-<app>)
 * into buf. */
void runner_container_name(const struct accel_daemon *d, const char *app,
                           char *buf, size_t len);

/* Once a second (the supervisor, no lock): an image that an app acceld
 * pulls for (pull missing or always) used and no app uses any more (its
 * last app uninstalled) is removed (podman rmi, not waited for; one in use
 * by a container of someone else's stays). The volumes stay in the
 * owner's home. */
void runner_container_images(struct accel_daemon *d);

/* An app's container as the API shows it (lock held): {image, pull, name,
 * state: "running"|"stopping"|"none"}; NULL for a host command. */
json_t *runner_container_json(const struct accel_daemon *d,
                              const struct app *a);

/* The CDI device of app a for people's own containers (lock held): name
 * a->name, containerEdits: the edits of NVIDIA's spec for each bound
 * NVIDIA GPU, the deviceNodes of each bound AMD GPU (/dev/kfd and its
 * render node) or Intel GPU (its render node), the shim first in
 * LD_PRELOAD, ACCEL_APP, ACCEL_CONFIG and the visible devices (AMD's as
 * the container numbers them), the mounts of the shim, a container copy of
 * its config, its ledgers and broker sockets (devs, host paths). The copy
 * is not written here: its text goes to *out_config (caller frees; set
 * only on success), for run/apps/<app>/RUNTIME_CTR_CONFIG. NULL with
 * *cause when NVIDIA's spec lacks a bound GPU, an AMD or Intel GPU's
 * render node is unknown or not on the machine, or the config cannot be
 * made. */
json_t *runner_container_cdi_device(struct accel_daemon *d,
                                    const struct app *a,
                                    const struct ledger_device *devs,
                                    size_t n, char **out_config,
                                    char **cause);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_RUNNER_H */
