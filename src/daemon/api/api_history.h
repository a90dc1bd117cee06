/* SPDX-License-Identifier: MIT */
/*
 * api_history.h: the routes that read the metric history (SPEC 5.4, 5.5):
 * accel's own GET /api/metrics/history (the web page's Dashboard) and the
 * HAMi monitor routes POST …/monitor/query/instant-vector and
 * …/range-vector, answered from the history through the PromQL subset of
 * promql.h, or proxied to a real Prometheus with --prometheus URL.
 * Read-only. Members see the apps of their own and of "shared" only.
 */
#ifndef ACCEL_DAEMON_API_API_HISTORY_H
#define ACCEL_DAEMON_API_API_HISTORY_H

#include "daemon/api/http.h"

/* GET /api/metrics/history?range=&step= */
void api_history_get(struct http_req *r);

/* POST …/monitor/query/instant-vector {query} */
void api_history_instant(struct http_req *r);

/* POST …/monitor/query/range-vector {query, range:{start,end,step}}
 * (or start, end, step at the top level) */
void api_history_range(struct http_req *r);

#endif /* ACCEL_DAEMON_API_API_HISTORY_H */
