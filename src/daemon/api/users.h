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

#include "daemon/state.h"

/*
 * Add a user with this token (only its hash is kept) and give it a uid
 * (SPEC 3) in the same transaction. ACCEL_EEXIST when the name is taken,
 * ACCEL_ECONFLICT when --app-uid-range has no free uid left (nothing is
 * written). Takes d->lock.
 */
enum accel_err users_add(struct accel_daemon *d, const char *name,
                         bool admin, const char *token);
/* ACCEL_ENOTFOUND, ACCEL_EFORBIDDEN for the built-in admin. Takes d->lock. */
enum accel_err users_remove(struct accel_daemon *d, const char *name);
/*
 * Set a member's limits (-1: the default apps / no memory limit), stored
 * and applied at the next install or resume. ACCEL_ENOTFOUND, or
 * ACCEL_EINVAL for an admin (admins are not limited). Takes d->lock.
 */
enum accel_err users_set_limits(struct accel_daemon *d,
                                const char *name, int64_t max_apps,
                                int64_t max_gpu_mem);

#endif /* ACCEL_DAEMON_API_USERS_H */
