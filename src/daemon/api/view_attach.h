/* SPDX-License-Identifier: MIT */
/*
 * view_attach.h: how people attach their own containers to an external
 * app (issue 47 item 5): the exact lines for podman, Docker (CDI or
 * accel-runc) and each compose tool, as `accelctl app attach-help`,
 * `app show` and the page show them (docs/containers.md section 5.1).
 */
#ifndef ACCEL_DAEMON_API_VIEW_ATTACH_H
#define ACCEL_DAEMON_API_VIEW_ATTACH_H

#include <jansson.h>

#include "daemon/state.h"

/*
 * The "attach" object of external app a (lock held): admits (whether its
 * CDI device holds a container now), reason (why not, when not), ways
 * ({tool, lines[]}, one per engine or compose tool) and notes (the
 * ulimits of a root without CAP_SYS_RESOURCE, the forms tools ignore).
 * NULL for an app acceld runs itself. A new reference.
 */
json_t *view_attach(struct accel_daemon *d, const struct app *a);

#endif
