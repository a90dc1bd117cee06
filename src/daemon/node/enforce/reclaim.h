/* SPDX-License-Identifier: MIT */
/*
 * reclaim.h: elastic memory, acceld's side (SPEC 4.4; docs/elastic.md).
 *
 * A shim whose allocation is within its app's quota but finds the card
 * physically short asks here (a UNIX socket, ledger_reclaim_socket_path:
 * "reclaim <app> <device> <bytes>\n"; the peer must be a process of that
 * app bound to the device, broker_ops_admit). acceld picks the apps on the
 * card that have a reclaim action and a priority not above the asker's,
 * idle ones first (when the device last showed each busy: the
 * reconciler's busy_ms, never what an app writes), calls their actions
 * (HTTP to 127.0.0.1 at a port one of the app's own processes listens on,
 * or a signal to its processes), and answers "ok" once the card's free
 * memory as the driver counts it (NVML; on a DRM device, AMD's, the sysfs
 * or else its clients' fdinfo: drm_card_memory) covers the request, or
 * "no" when the device's reclaimWaitMs passes first (the allocation then
 * fails as on a full card, and an event names who holds the memory). An
 * app is stopped only when its reclaim says orStop. Every reclaim is an
 * event `memory.reclaim` {asker, giver, bytes, ms}; what each app lent and
 * got is kept for its JSON (reclaim_app_json) and /metrics.
 */
#ifndef ACCEL_DAEMON_NODE_ENFORCE_RECLAIM_H
#define ACCEL_DAEMON_NODE_ENFORCE_RECLAIM_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/state.h"

/* Start the socket's thread; d->reclaim is set. ACCEL_OK or ACCEL_ESYS
 * (acceld runs on without elastic memory: the shims' asks fail, so their
 * allocations fail as on a full card). */
enum accel_err reclaim_start(struct accel_daemon *d);
/* Stop it: no new ask is taken, those in flight are answered "no" within
 * their wait, and the socket is removed. d->reclaim is NULL after. */
void reclaim_stop(struct accel_daemon *d);

/*
 * Ask app `app` to give back memory on device `dev_id` (its reclaim
 * action: the preset's routes, its http request or its signal), without
 * waiting for it: the call runs on a thread of its own and its outcome is
 * an event (memory.reclaim with asker "quota" for a cut quota). This is
 * what a live quota cut calls for an app above its new quota (SPEC 4.4,
 * "an app above its new quota has its reclaim action called"); `why`
 * names the cause in the event ("quota", or an app's name). Returns true
 * when the app has an action and it was started, or one for the same app
 * and device is still in flight (one at a time: a cut after cut while the
 * action hangs costs one thread, not one each), false when the app has no
 * reclaim (it is never asked: all it holds counts as held), is not running
 * here, or acceld's reclaim is not running. Takes d->lock briefly: call it
 * WITHOUT d->lock held, and not once reclaim_stop may run (from a request:
 * the HTTP server is stopped first).
 */
bool reclaim_give_back(struct accel_daemon *d, const char *app,
                       const char *dev_id, uint64_t bytes, const char *why);

/* app leaves for good (d->lock held): what it lent and got is dropped,
 * so that a later app of its name (maybe another member's) starts at 0. */
void reclaim_app_removed(struct accel_daemon *d, const char *app);

/* What app lent and got on its devices (lock held by the caller: d->lock):
 * {"lent": {bytes, count, lastAt, lastBytes, lastTo}, "reclaimed": {...,
 * lastFrom}} or NULL when it never did either. */
json_t *reclaim_app_json(struct accel_daemon *d, const char *app);

/* Whether the viewer may not see app (of owner, NULL when the event did
 * not record it) by name (SPEC 3: "another user's app"). */
typedef bool (*reclaim_hide_fn)(void *ctx, const char *app,
                                const char *owner);

/*
 * The sentence of an elastic memory event (kind "memory.reclaim" or
 * "memory.reclaim.failed") from its data, as a viewer sees it: the apps
 * hide() says the viewer may not see are "another user's app" in it, and
 * are made anonymous in data itself (a holder's app and owner "" with
 * "hidden": true; the asker "" with "askerHidden": true, its totals
 * taken out), *changed then true. hide NULL: every name shown (what the
 * store keeps). NULL for another kind or data not an object (the stored
 * message stands). Caller frees. Pure: no lock, no I/O.
 */
char *reclaim_event_message(const char *kind, json_t *data,
                            const char *device, reclaim_hide_fn hide,
                            void *ctx, bool *changed);

/* The /metrics block (caller frees). */
char *reclaim_metrics(struct accel_daemon *d);

#endif /* ACCEL_DAEMON_NODE_ENFORCE_RECLAIM_H */
