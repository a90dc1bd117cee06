/* SPDX-License-Identifier: MIT */
/*
 * logs.h: the apps' logs as a user's spending (issue 39): an app's logs go
 * with the app, and one user's logs together are bounded by
 * --user-logs-max. The writing and the rotation are applog.h's; this is
 * what the daemon's state decides about them.
 *
 * Thread-safety: as each function says.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_LOGS_H
#define ACCEL_DAEMON_NODE_RUNTIME_LOGS_H

#include <stdint.h>

#define LOGS_USER_MAX_DEFAULT (100ULL << 20) /* --user-logs-max */

struct accel_daemon;
struct app;

/* a is leaving memory (uninstalled, or deleted by another node): its logs
 * here go too (the hook app_removed; d->lock held). */
void logs_app_removed(struct accel_daemon *d, const struct app *a);

/* Hold every user's logs here within --user-logs-max (applog_bound) and
 * note what they take (user_rec.log_bytes, GET /api/users' logBytes).
 * Takes d->lock itself; the supervisor calls it once a second. */
void logs_bound_users(struct accel_daemon *d);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_LOGS_H */
