/* SPDX-License-Identifier: MIT */
/*
 * broker_ops.h: acceld's side of the time-slice brokers: starting them for
 * the local TimeSlice devices, their per-device settings, and what the
 * device JSON and /metrics show of them.
 */
#ifndef ACCEL_DAEMON_NODE_SLICE_BROKER_OPS_H
#define ACCEL_DAEMON_NODE_SLICE_BROKER_OPS_H

#include <jansson.h>
#include <stdbool.h>

#include "daemon/state.h"

/* Start the broker thread (it keeps the brokers in step with the devices'
 * modes every 500 ms). ACCEL_OK or ACCEL_ESYS. */
enum accel_err broker_ops_start(struct accel_daemon *d);
/* Stop it and remove the sockets (the apps run on, reconnecting). */
void broker_ops_stop(struct accel_daemon *d);
/* Does device dev get a broker (local NVIDIA, TimeSlice)? d->lock held. */
bool broker_ops_device(struct accel_daemon *d, int dev);
/* The device JSON's `timeSlice` object, or JSON null for other devices.
 * d->lock held. New reference. */
json_t *broker_ops_view(struct accel_daemon *d, int dev);
/* The /metrics block of all brokers (caller frees). d->lock held. */
char *broker_ops_metrics(struct accel_daemon *d);
/*
 * Is peer a process of app, bound to device dev_id and running (the
 * brokers' own admission, SPEC 8.2)? The elastic memory's reclaim socket
 * (node/enforce/reclaim.c) asks the same of who asks it for memory. false
 * with the reason in why. Takes d->lock briefly.
 */
struct broker_peer;
bool broker_ops_admit(struct accel_daemon *d, const char *dev_id,
                      const char *app, const struct broker_peer *peer,
                      char *why, size_t cap);

#endif /* ACCEL_DAEMON_NODE_SLICE_BROKER_OPS_H */
