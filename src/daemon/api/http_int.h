/* SPDX-License-Identifier: MIT */
/*
 * http_int.h: what http.c and http_slow.c share, and nobody else.
 */
#ifndef ACCEL_DAEMON_API_HTTP_INT_H
#define ACCEL_DAEMON_API_HTTP_INT_H

#include "daemon/api/http.h"

#define HTTP_SLOW_WAIT_S 10 /* a parked slow operation answers by then */
#define HTTP_SLOW_MAX 64    /* slow operations on their own threads at once;
                               more run on the server thread */

/* Run rt's handler for r on this thread as r's user, then wait until what
 * it changed is durable (the core of dispatch). */
void http_run_handler(struct http_req *r, const struct http_route *rt);

/*
 * A ROUTE_SLOW route (SPEC 5.6): the first dispatch hands the handler to a
 * thread of its own, working on a copy of the request, and parks r; a
 * later dispatch answers with the handler's reply once it has finished
 * and the app the request concerns has left `stopping`/`releasing`, or,
 * HTTP_SLOW_WAIT_S after the first, 202 with the state reached (the
 * operation then completes on its own).
 */
void http_slow_dispatch(struct http_req *r, const struct http_route *rt);

/* r ends (d->ev_lock held): forget it in its slow operation, if any. */
void http_slow_detach_locked(struct http_req *r);

/* A request of the --hami-listen listener: whether its peer may use it
 * (http_hami.c: --hami-users, else no uid of --app-uid-range); false after
 * replying 403 naming why. */
bool http_hami_peer_allowed(struct http_req *r);

#endif /* ACCEL_DAEMON_API_HTTP_INT_H */
