/* SPDX-License-Identifier: MIT */
/*
 * sampler.h: the thread that feeds the metric history (history.h) from the
 * daemon's state every --history-interval seconds (default 15): per device
 * of this node its utilization, memory used and total, power and
 * temperature (as the reconciler last read them from NVML), and per app
 * binding on this node the memory the app uses there (its shim ledger,
 * while it runs), what is allocated to it and its cores. It saves the
 * history to <data-dir>/history.bin every minute and at stop.
 *
 * It reads under d->lock and records into the history under the history's
 * own lock, taken inside d->lock (never the other way round).
 */
#ifndef ACCEL_DAEMON_NODE_HISTORY_SAMPLER_H
#define ACCEL_DAEMON_NODE_HISTORY_SAMPLER_H

#include "daemon/state.h"

#define SAMPLER_DEFAULT_INTERVAL 15     /* seconds */
#define SAMPLER_DEFAULT_RETENTION 86400 /* seconds */
#define SAMPLER_SAVE_EVERY 60           /* seconds between saves */

/*
 * Open the history (d->history, read from its file) and start the thread.
 * Returns ACCEL_OK, ACCEL_EINVAL (bad interval/retention) or ACCEL_ESYS
 * (no thread; the history stays readable). Without d->lock.
 */
enum accel_err sampler_start(struct accel_daemon *d);

/* Stop the thread, save the history once more, keep d->history readable
 * until sampler_free. Without d->lock. NULL-safe on a daemon never
 * started. */
void sampler_stop(struct accel_daemon *d);

/* Take one sample now (the thread's step; tests and start-up use it).
 * Without d->lock. */
void sampler_tick(struct accel_daemon *d);

/* The history's bounds and what the last sample could not keep, for
 * GET /api/runtime: {intervalSeconds, samples, bytes, maxBytes,
 * notRecorded: [{device} | {app, device}]}; JSON null before the
 * history exists. d->lock held (the history's lock is taken inside it). */
json_t *sampler_json(struct accel_daemon *d);

#endif /* ACCEL_DAEMON_NODE_HISTORY_SAMPLER_H */
