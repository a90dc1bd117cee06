/* SPDX-License-Identifier: MIT */
/*
 * users.h: adding and removing users and setting a member's limits (the
 * users routes of SPEC 3; the built-in admin at start-up). Lookups are the
 * state layer's (state_user_find).
 */
#ifndef ACCEL_DAEMON_API_USERS_H
#define ACCEL_DAEMON_API_USERS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "daemon/state.h"

/*
 * Add a user with this token (only its hash is kept) and give it a uid
 * (SPEC 3) in the same transaction. ACCEL_EEXIST when the name is taken,
 * ACCEL_ECONFLICT when --app-uid-range has no free uid left (nothing is
 * written), ACCEL_EBUSY while apps of a removed user of that name are
 * still being uninstalled. Takes d->lock.
 */
enum accel_err users_add(struct accel_daemon *d, const char *name,
                         bool admin, const char *token);
/*
 * Remove a user (SPEC 3, docs/api.md). While it owns apps the removal is
 * ACCEL_ECONFLICT with *cause naming them, unless force: then each app is
 * uninstalled in the same transaction as the user's rows (one without a
 * process at once, its bindings released; one whose processes run
 * `stopping` for an uninstall the supervisor or the agent running it
 * finishes; one whose stopped processes still hold its GPU `releasing`).
 * An app in the middle of another operation is ACCEL_EBUSY (*cause names
 * it). The user's uid is retired and its home moved aside
 * (identity_retire): a user of the same name later gets a fresh uid and
 * an empty home. On ACCEL_OK *out_apps gets [{"name","state"}] of what
 * became of each app (state "uninstalled", "stopping" or "releasing";
 * the caller frees it). ACCEL_ENOTFOUND; ACCEL_EFORBIDDEN for the built-in
 * admin; the store's error. Nothing changes on any error. Takes d->lock.
 */
enum accel_err users_remove(struct accel_daemon *d, const char *name,
                            bool force, json_t **out_apps, char **cause);
/*
 * Set a member's limits (-1: the default apps / no memory limit), stored
 * and applied at the next install or resume. ACCEL_ENOTFOUND, or
 * ACCEL_EINVAL for an admin (admins are not limited). Takes d->lock.
 */
enum accel_err users_set_limits(struct accel_daemon *d,
                                const char *name, int64_t max_apps,
                                int64_t max_gpu_mem);

#endif /* ACCEL_DAEMON_API_USERS_H */
