/* SPDX-License-Identifier: MIT */
/*
 * prom_proxy.h: with `acceld --prometheus URL`, the HAMi monitor routes ask
 * that Prometheus (its HTTP API, /api/v1/query and /api/v1/query_range)
 * instead of accel's own history, and answer in the same HAMi-WebUI shape.
 * Any query Prometheus understands passes. Prometheus unreachable or
 * answering something that is not its API: 502 with a sentence naming the
 * URL and the failure ("error":"prometheus-unavailable"); a query
 * Prometheus refuses: 400 with Prometheus's own message.
 *
 * Runs on the request's thread, without d->lock, at most
 * PROM_PROXY_TIMEOUT_S seconds.
 */
#ifndef ACCEL_DAEMON_API_PROM_PROXY_H
#define ACCEL_DAEMON_API_PROM_PROXY_H

#include <jansson.h>
#include <stdint.h>

#include "daemon/api/http.h"

#define PROM_PROXY_TIMEOUT_S 10 /* the whole exchange */

/* libcurl's global set-up; once, before any thread starts. */
void prom_proxy_init(void);

/* Answer r with the instant query q evaluated by Prometheus now. */
void prom_proxy_instant(struct http_req *r, const char *q);

/* Answer r with the range query q over [start, end] every step seconds. */
void prom_proxy_range(struct http_req *r, const char *q, int64_t start,
                      int64_t end, int64_t step);

/* A sample's value as protojson writes a float, for the monitor's answers
 * (Grafana's Prometheus data source and app-service read them): a number,
 * NaN and the infinities as the strings "NaN", "Infinity" and
 * "-Infinity". New reference. */
json_t *prom_proxy_json_float(double v);

/* A timestamp in milliseconds as protojson writes an int64: a decimal
 * string. New reference. */
json_t *prom_proxy_json_ms(int64_t ms);

#endif /* ACCEL_DAEMON_API_PROM_PROXY_H */
