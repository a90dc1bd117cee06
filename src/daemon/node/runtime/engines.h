/* SPDX-License-Identifier: MIT */
/*
 * engines.h: people's own containers of an external app, stopped through
 * the engine that runs them (SPEC 8.2.1, issue 47 item 4). The CDI hook
 * (accelctl cdi-hook --record) writes <data-dir>/run/containers/<app>/<ID>
 * holding the engine's name when it puts a container into the app's
 * cgroup; a stop of the app asks that engine to stop each one, so a
 * restart policy (`restart: unless-stopped`) sees a stop, not a crash.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_ENGINES_H
#define ACCEL_DAEMON_NODE_RUNTIME_ENGINES_H

#include "daemon/state.h"

/* The directory the hook records app's containers in (caller frees). */
char *engines_record_dir(const struct accel_daemon *d, const char *app);

/*
 * `podman stop` or `docker stop` (with acceld's DOCKER_HOST, else Docker's
 * default socket) of each recorded container of app, timeout_s before the
 * engine's kill, started and not waited for (the stop's end is the
 * cgroup's emptying, which the release waits for). Returns how many stops
 * were started: 0 when none is recorded or known. Any lock may be held.
 */
unsigned engines_stop(struct accel_daemon *d, const char *app, int timeout_s);

/* The app's records removed (its release: its containers are gone). */
void engines_forget(struct accel_daemon *d, const char *app);

#endif
