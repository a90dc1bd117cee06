/* SPDX-License-Identifier: MIT */
/*
 * monitor.h: the HAMi metrics (the names HAMi's exporters publish and the
 * Olares Dashboard and olares-cli query) as series read out of accel's
 * metric history, for the PromQL evaluator (promql.h). Device metrics
 * carry the labels deviceuuid, device_uuid, node, instance, provider,
 * devicetype, device_no, driver_version; container metrics (one app on one
 * device) carry container_name and pod_name (the app), namespace_name (its
 * owner), deviceuuid, device_uuid, node, instance. The mapping is in
 * docs/compat.md.
 */
#ifndef ACCEL_DAEMON_API_MONITOR_H
#define ACCEL_DAEMON_API_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/api/promql.h"
#include "daemon/node/history.h"

#define MONITOR_LOOKBACK 300 /* seconds: PromQL's default staleness */

/* The source context: a history locked by the caller, and who asks. */
struct monitor_ctx {
    struct history *h;     /* locked (history_lock) while queries run */
    const char *user;      /* the asking user's name */
    bool admin;            /* sees every app */
};

/*
 * promql_fetch_fn over the history: every series of metric with a value
 * in (t - MONITOR_LOOKBACK, t]. false for a metric it does not know.
 */
bool monitor_fetch(void *ctx, const char *metric, int64_t t,
                   struct promql_value *out);

/* The metric names monitor_fetch knows, NULL-terminated (static). */
const char *const *monitor_metrics(void);

#endif /* ACCEL_DAEMON_API_MONITOR_H */
