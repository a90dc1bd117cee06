/* SPDX-License-Identifier: MIT */
/*
 * metrics.h: counters and histograms that are not part of the state
 * (requests, refusals, store commit latency), and the Prometheus text
 * rendering of GET /metrics (SPEC 5.5). Has its own lock, so recording never
 * waits on the daemon's state lock.
 */
#ifndef ACCEL_DAEMON_API_METRICS_H
#define ACCEL_DAEMON_API_METRICS_H

#include <stdint.h>

struct accel_daemon;
struct auth_user;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m); /* accepts NULL */

/* One finished HTTP request on a route pattern. */
void metrics_http_observe(struct accel_daemon *d, const char *method,
                          const char *route, int status, uint64_t ns);
/* One admission refusal with its code ("device-vram-insufficient"). */
void metrics_refusal(struct accel_daemon *d, const char *code);
/* One store commit and how long it took. */
void metrics_commit(struct accel_daemon *d, uint64_t ns);

/* The whole exposition text (caller frees) as viewer u may see it: a
 * member gets no series of another user's app (counts stay). Takes
 * d->lock itself. */
char *metrics_render(struct accel_daemon *d, const struct auth_user *u);

#endif /* ACCEL_DAEMON_API_METRICS_H */
