/* SPDX-License-Identifier: MIT */
/*
 * http_slow.c: requests that wait on a slow operation (an app's stop
 * through suspend, unbind, uninstall, a forced or restarting legacy bind,
 * a mode switch) hold no server thread (SPEC 5.6). The handler runs on a
 * thread of its own against a private copy of the request; the request is
 * parked like a long-poll and answered when the operation has finished and
 * the app it concerns has left `stopping` (woken by the app's events, so an
 * asynchronous stop is followed to its end too), or after HTTP_SLOW_WAIT_S
 * with the state reached (HTTP 200, code 200: the state says it goes
 * on; the clients of SPEC 5 take any other code as a failure). An app left `releasing` answers at once:
 * its processes are gone, and the driver's release completes on its own
 * (the reconciler ends it). The operation is owned jointly by its thread
 * and its request: whichever ends last frees it.
 */
#include "common/accel_setup.h"
#include "daemon/api/http_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/api/view.h"
#include "daemon/log.h"
#include "daemon/state.h"

struct slow_op {
    struct accel_daemon *d;
    const struct http_route *rt;
    struct http_req *copy;   /* what the handler reads and answers into */
    struct http_req *r;      /* the parked request; NULL once it ended */
    char *app;               /* the app it concerns, or NULL */
    bool done;               /* the handler returned (guarded by ev_lock) */
    bool waited;             /* the request waited on past the handler's
                                return (request thread only) */
    int refs;                /* thread + request (guarded by ev_lock) */
};

/* The app a request concerns: /api/apps/{name}/..., or the body's
 * appName (legacy routes); NULL for a mode switch. */
static char *app_of(struct http_req *r)
{
    json_t *b;
    char *out = NULL;
    if (strncmp(r->path, "/api/apps/", 10) == 0 && r->params[0])
        return xstrdup(r->params[0]);
    if (r->body == NULL)
        return NULL;
    b = json_loadb(r->body, r->body_len, 0, NULL);
    if (json_is_string(json_object_get(b, "appName")))
        out = xstrdup(json_string_value(json_object_get(b, "appName")));
    json_decref(b);
    return out;
}

/* A copy of r the handler may use from another thread: no connection
 * (http_query/http_header answer NULL), its own body and params. */
static struct http_req *copy_of(const struct http_req *r)
{
    struct http_req *c = xcalloc(1, sizeof(*c));
    c->d = r->d;
    /* MHD's method string lives in the connection's memory, which goes
     * with the connection: the copy keeps its own */
    c->method = xstrdup(r->method);
    c->path = xstrdup(r->path);
    c->route = r->route;
    c->pathbuf = xmalloc(strlen(r->path) + 1);
    memcpy(c->pathbuf, r->pathbuf, strlen(r->path) + 1);
    for (int k = 0; k < HTTP_MAX_PARAMS; k++)
        if (r->params[k])
            c->params[k] = c->pathbuf + (r->params[k] - r->pathbuf);
    if (r->body) {
        c->body = xmalloc(r->body_len + 1);
        memcpy(c->body, r->body, r->body_len + 1);
        c->body_len = r->body_len;
    }
    c->user = r->user;
    c->authed = r->authed;
    return c;
}

static void copy_free(struct http_req *c)
{
    free((char *)c->method);
    free(c->body);
    free(c->reply);
    free(c->pathbuf);
    free((char *)c->path);
    view_stream_free(c->reply_stream);
    free(c);
}

/* Drop one reference (ev_lock held). */
static void op_put_locked(struct slow_op *op)
{
    if (--op->refs > 0)
        return;
    copy_free(op->copy);
    free(op->app);
    free(op);
}

static void *op_main(void *arg)
{
    struct slow_op *op = arg;
    struct accel_daemon *d = op->d;
    http_run_handler(op->copy, op->rt);
    pthread_mutex_lock(&d->ev_lock);
    op->done = true;
    d->ev_seq++; /* a request about to park sees it and does not */
    if (op->r)
        http_wake_req_locked(d, op->r);
    op_put_locked(op);
    pthread_mutex_unlock(&d->ev_lock);
    atomic_fetch_sub(&d->slow_ops, 1);
    return NULL;
}

/* Start op's thread; false (nothing started) when there is no room. */
static bool op_start(struct slow_op *op)
{
    pthread_t t;
    pthread_attr_t at;
    bool ok;
    if (atomic_fetch_add(&op->d->slow_ops, 1) >= HTTP_SLOW_MAX) {
        atomic_fetch_sub(&op->d->slow_ops, 1);
        return false;
    }
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    ok = pthread_create(&t, &at, op_main, op) == 0;
    pthread_attr_destroy(&at);
    if (!ok)
        atomic_fetch_sub(&op->d->slow_ops, 1);
    return ok;
}

/* Is the app still stopping? Takes d->lock. */
static bool app_in_transit(struct accel_daemon *d, const char *name)
{
    struct app *a;
    bool busy = false;
    if (name == NULL)
        return false;
    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, name);
    busy = a && a->state == APP_STOPPING;
    pthread_mutex_unlock(&d->lock);
    return busy;
}

/* The handler's answer, moved from the copy into r. */
static void take_reply(struct http_req *r, struct slow_op *op)
{
    struct http_req *c = op->copy;
    free(r->reply);
    view_stream_free(r->reply_stream);
    r->status = c->status;
    r->reply = c->reply;
    r->reply_type = c->reply_type;
    r->reply_stream = c->reply_stream;
    c->reply = NULL;
    c->reply_stream = NULL;
}

/*
 * The answer once the app has left stopping/releasing after the handler
 * returned (an asynchronous stop, or a release the reconciler finished):
 * the app as it is now for the routes that answer with the app, the end
 * of an uninstall, else the handler's own answer.
 */
static void final_reply(struct http_req *r, struct slow_op *op)
{
    struct accel_daemon *d = r->d;
    struct app *a;
    json_t *v = NULL;
    bool app_route = strcmp(r->route, "/api/apps/{}/suspend") == 0 ||
                     strcmp(r->route,
                            "/api/apps/{}/compute-resources/bindings") == 0;
    bool uninstall = strcmp(r->route, "/api/apps/{}") == 0;
    int st = op->copy->status;

    if (!op->waited || op->app == NULL || st < 200 || st > 299) {
        take_reply(r, op);
        return;
    }
    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, op->app);
    if (a && app_route)
        v = view_app(d, a, &r->user);
    else if (uninstall && (a == NULL || a->state == APP_RELEASING))
        v = json_pack("{s:s, s:s}", "name", op->app, "state",
                      a ? "releasing" : "uninstalled");
    st = 200;
    pthread_mutex_unlock(&d->lock);
    if (v)
        http_reply_data(r, st, v);
    else
        take_reply(r, op);
}

/* 200 with the state reached: the app as r's user sees it. */
static void reply_in_progress(struct http_req *r, const char *app)
{
    struct accel_daemon *d = r->d;
    struct app *a;
    json_t *v = NULL;
    if (app) {
        pthread_mutex_lock(&d->lock);
        a = state_app_find(d, app);
        if (a && !view_hides(&r->user, a))
            v = view_app(d, a, &r->user);
        pthread_mutex_unlock(&d->lock);
    }
    if (v == NULL)
        v = json_pack("{s:s, s:s}", "status", "in-progress", "message",
                      "the operation goes on; GET /api/events shows its "
                      "end");
    http_reply_data(r, 200, v);
}

/* Park r until its operation ends, an event of its app, or the deadline
 * (ev_seq read before the state was looked at: nothing is missed). */
static void park(struct http_req *r, struct slow_op *op, uint64_t seen)
{
    http_park_app(r, r->park_until_ns, seen, op->app ? op->app : "");
}

static void first_dispatch(struct http_req *r, const struct http_route *rt)
{
    struct slow_op *op = xcalloc(1, sizeof(*op));
    uint64_t seen;
    op->d = r->d;
    op->rt = rt;
    op->copy = copy_of(r);
    op->app = app_of(r);
    op->refs = 2;
    op->r = r;
    pthread_mutex_lock(&r->d->ev_lock);
    seen = r->d->ev_seq;
    pthread_mutex_unlock(&r->d->ev_lock);
    if (r->d->stopping || !op_start(op)) {
        /* no room for another thread: run it here, as before */
        copy_free(op->copy);
        free(op->app);
        free(op);
        http_run_handler(r, rt);
        return;
    }
    r->slow = op;
    r->park_until_ns = util_now_ns() + HTTP_SLOW_WAIT_S * 1000000000ULL;
    park(r, op, seen);
}

void http_slow_dispatch(struct http_req *r, const struct http_route *rt)
{
    struct slow_op *op = r->slow;
    uint64_t seen;
    bool done;

    if (op == NULL) {
        first_dispatch(r, rt);
        return;
    }
    pthread_mutex_lock(&r->d->ev_lock);
    seen = r->d->ev_seq;
    done = op->done;
    pthread_mutex_unlock(&r->d->ev_lock);
    if (done && (op->copy->status < 200 || op->copy->status > 299 ||
                 !app_in_transit(r->d, op->app))) {
        final_reply(r, op);
        return;
    }
    op->waited = op->waited || done;
    if (util_now_ns() < r->park_until_ns && !r->d->stopping) {
        park(r, op, seen);
        return;
    }
    reply_in_progress(r, op->app);
}

void http_slow_detach_locked(struct http_req *r)
{
    struct slow_op *op = r->slow;
    if (op == NULL)
        return;
    r->slow = NULL;
    op->r = NULL;
    op_put_locked(op);
}
