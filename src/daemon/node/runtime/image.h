/* SPDX-License-Identifier: MIT */
/*
 * image.h: the images of container apps (SPEC 8.2.1), for the container
 * runner and its pull (runner_container.c, pull.c): is an image on this
 * machine, its pull, an app's pin (the image ID every start of it runs,
 * kept in <data-dir>/images/<app>.json), and the removal of an image
 * acceld pulled once its last app is gone. Not the pull as a job (pull.c)
 * nor the container's run.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_IMAGE_H
#define ACCEL_DAEMON_NODE_RUNTIME_IMAGE_H

#include <jansson.h>
#include <sys/stat.h>

#include "accel/accel.h"
#include "daemon/state.h"

/* Is image ref on this machine (podman image exists)? ACCEL_OK with *pin
 * {ref, id, digest, names (the image's names, podman's RepoTags), preload
 * (the image's own LD_PRELOAD, when it sets one)} from podman image
 * inspect; else ACCEL_ENOTFOUND, or ACCEL_ESYS
 * when podman cannot tell (not installed), with *cause naming run.image.
 * Blocks up to a minute: no lock. */
enum accel_err image_pin(const char *ref, json_t **pin, char **cause);

/* The file of an archive reference (oci-archive:/path[:name],
 * docker-archive:...) into *st: 0, or the errno of its stat (EINVAL for a
 * reference that is not an archive). */
int image_archive_stat(const char *ref, struct stat *st);

struct podman_watch;

/* Pull ref (podman pull; an archive is loaded): each line podman writes
 * to line(ctx, ...) as it comes (no lock held), then ACCEL_OK with *pin
 * as image_pin's of the image pulled (its ref ref); else *cause: "pulling
 * <ref> failed: ", its cause sorted (no such image, the registry cannot be
 * reached, the disk is full, no progress for the watch's stall_ms) and
 * podman's last line, or ACCEL_EBUSY with "pulling <ref> was cancelled".
 * watch (NULL: none) lets another thread cancel it and
 * ends a stalled pull (podman.h). Blocks for the pull, an hour at most:
 * no lock. */
enum accel_err image_pull(const char *ref,
                          void (*line)(void *ctx, const char *line), void *ctx,
                          struct podman_watch *watch, json_t **pin,
                          char **cause);

/* Pin a's image (lock held): pin (stolen; NULL = none) becomes a's, kept
 * in <data-dir>/images/<app>.json, so every later start, after an acceld
 * restart too, runs that image by its ID. */
void image_pin_set(struct accel_daemon *d, struct app *a, json_t *pin);

/* Field key ("id", "digest", "preload") of a's pin on this node (lock
 * held; its pin file read the first time), NULL when none. */
const char *image_pin_field(const struct accel_daemon *d, struct app *a,
                            const char *key);

/* Did acceld's own pull or load bring a's pinned image onto this node
 * (its pin's `pulled`; lock held)? */
bool image_pin_pulled(const struct accel_daemon *d, struct app *a);

/* The image ID a is pinned to on this node (lock held), NULL when none. */
const char *image_pinned_id(const struct accel_daemon *d, struct app *a);

/* Once a second (the supervisor, no lock): an image that an app acceld
 * pulls for (pull missing or always) used and no app uses any more (its
 * last app uninstalled) is removed (podman rmi, not waited for; one in use
 * by a container of someone else's stays). The volumes stay in the
 * owner's home. Only the supervisor's thread calls it. */
void image_sweep_unused(struct accel_daemon *d);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_IMAGE_H */
