/* SPDX-License-Identifier: MIT */
/*
 * api.c: the route table and its thin handlers: parse the request, call
 * one ops_* function or view, serialize the op_result.
 */
#include "common/accel_setup.h"
#include "daemon/api/http.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/quantity.h"
#include "common/util.h"
#include "common/yamljson.h"
#include "daemon/api/api_hami.h"
#include "daemon/api/api_history.h"
#include "daemon/api/api_static.h"
#include "daemon/api/auth.h"
#include "daemon/api/metrics.h"
#include "daemon/api/ops.h"
#include "daemon/api/users.h"
#include "daemon/api/view.h"
#include "daemon/api/view_attach.h"
#include "daemon/node/devices/discovery.h"
#include "daemon/node/enforce/reclaim.h"
#include "daemon/node/enforce/reconcile.h"
#include "daemon/node/history/sampler.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/slice/broker_ops.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

#define MIB (1024ULL * 1024ULL)

static void send_result(struct http_req *r, struct op_result *res)
{
    if (res->check_type) {
        http_reply_check(r, res->check_type, res->data);
        res->data = NULL;
    } else if (res->code) {
        http_reply_error_code(r, res->status, res->code,
                              res->message ? res->message : "failed");
    } else if (res->raw) {
        http_reply_raw(r, res->status, res->data);
        res->data = NULL;
    } else {
        http_reply_data(r, res->status, res->data);
        res->data = NULL;
    }
    op_result_release(res);
}

/* GET /api/runtime: NVML state and the local node's devices (SPEC 6,
 * accelctl gpu status). Any user may read it, like the device list. */
static void h_runtime(struct http_req *r)
{
    json_t *v, *devs = json_array();
    int node;
    pthread_mutex_lock(&r->d->lock);
    node = state_node_find(r->d, r->d->cfg.node_name);
    for (size_t i = 0; node >= 0 && i < r->d->snap.ndevs; i++)
        if (r->d->snap.devs[i].node == (uint32_t)node)
            json_array_append_new(devs, view_device(r->d, (int)i, &r->user));
    v = reconcile_runtime_json(r->d, devs);
    json_object_set_new(v, "history", sampler_json(r->d));
    pthread_mutex_unlock(&r->d->lock);
    http_reply_data(r, 200, v);
}

static void h_healthz(struct http_req *r)
{
    http_reply_data(r, 200, json_pack("{s:s}", "status", "ok"));
}

static void h_resources(struct http_req *r)
{
    struct view_stream *s;
    pthread_mutex_lock(&r->d->lock);
    s = view_nodes_stream(r->d, &r->user,
                          "{\"code\":200,\"message\":\"\",\"data\":", "}");
    pthread_mutex_unlock(&r->d->lock);
    http_reply_stream(r, 200, s);
}

static void h_switch(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    if (b == NULL)
        return;
    ops_switch(r->d, r->params[0], r->params[1],
               json_string_value(json_object_get(b, "supportType")), &res);
    json_decref(b);
    send_result(r, &res);
}

/* PUT of one of a device's settings objects through op. */
static void device_setting(struct http_req *r,
                           void (*op)(struct accel_daemon *, const char *,
                                      const char *, const json_t *,
                                      struct op_result *))
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    if (b == NULL)
        return;
    op(r->d, r->params[0], r->params[1], b, &res);
    json_decref(b);
    send_result(r, &res);
}

static void h_timeslice(struct http_req *r)
{
    device_setting(r, ops_timeslice_set);
}

static void h_meter(struct http_req *r)
{
    device_setting(r, ops_meter_set);
}

static void h_elastic(struct http_req *r)
{
    device_setting(r, ops_elastic_set);
}

static void h_settings(struct http_req *r)
{
    json_t *v;
    pthread_mutex_lock(&r->d->lock);
    v = ops_settings_json(r->d);
    pthread_mutex_unlock(&r->d->lock);
    http_reply_data(r, 200, v);
}

static void h_settings_put(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    if (b == NULL)
        return;
    ops_settings_set(r->d, b, &res);
    json_decref(b);
    send_result(r, &res);
}

static void h_preflight(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    if (b == NULL)
        return;
    ops_preflight(r->d, &r->user, json_object_get(b, "demands"), &res);
    json_decref(b);
    send_result(r, &res);
}

static void h_nodes(struct http_req *r)
{
    h_resources(r);
}

static void h_node_put(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    const json_t *en;
    if (b == NULL)
        return;
    en = json_object_get(b, "enabled");
    if (!json_is_boolean(en)) {
        json_decref(b);
        http_reply_error(r, ACCEL_EINVAL, "enabled must be true or false");
        return;
    }
    ops_node_enable(r->d, r->params[0], json_is_true(en), &res);
    json_decref(b);
    send_result(r, &res);
}

static void h_node_delete(struct http_req *r)
{
    struct op_result res = {0};
    const char *f = http_query(r, "force");
    bool force = f && (strcmp(f, "true") == 0 || strcmp(f, "1") == 0);
    if (f && !force && strcmp(f, "false") != 0 && strcmp(f, "0") != 0) {
        http_reply_error(r, ACCEL_EINVAL, "force must be true or false");
        return;
    }
    ops_node_remove(r->d, r->params[0], force, &res);
    send_result(r, &res);
}

static bool visible(const struct http_req *r, const struct app *a)
{
    return r->user.admin || strcmp(a->owner, r->user.name) == 0 ||
           strcmp(a->owner, ACCEL_SHARED_OWNER) == 0;
}

static void h_apps(struct http_req *r)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&r->d->lock);
    for (size_t i = 0; i < r->d->napps; i++)
        if (visible(r, r->d->apps[i]))
            json_array_append_new(arr, view_app(r->d, r->d->apps[i], &r->user));
    pthread_mutex_unlock(&r->d->lock);
    http_reply_data(r, 200, arr);
}

static void h_app(struct http_req *r)
{
    struct app *a;
    json_t *v = NULL;
    pthread_mutex_lock(&r->d->lock);
    a = state_app_find(r->d, r->params[0]);
    if (a && visible(r, a))
        v = view_app(r->d, a, &r->user);
    if (v != NULL && !manifest_runs(&a->m)) /* the app's page alone */
        json_object_set_new(v, "attach", view_attach(r->d, a));
    pthread_mutex_unlock(&r->d->lock);
    if (v == NULL)
        http_reply_error(r, ACCEL_ENOTFOUND, "app \"%s\" is not installed",
                         r->params[0]);
    else
        http_reply_data(r, 200, v);
}

#define LOG_CHUNK 65536 /* bytes of an app's log per answer */

/* The bytes of buf as a JSON string: an invalid UTF-8 byte becomes '?'. */
static json_t *log_text(char *buf, size_t n)
{
    json_t *t = json_stringn(buf, n);
    for (size_t i = 0; t == NULL && i < n; i++)
        if ((unsigned char)buf[i] >= 0x80 || buf[i] == '\0')
            buf[i] = '?';
    return t ? t : json_stringn(buf, n);
}

/*
 * GET /api/apps/{name}/logs?offset=N: up to LOG_CHUNK bytes of the app's
 * log from byte N (0 by default), and the offset to ask for next. A log
 * shorter than N was rotated: it is read from its start ("rotated": true).
 */
static void h_app_logs(struct http_req *r)
{
    const char *q = http_query(r, "offset");
    char *end = NULL, *path, *buf;
    long long off = q ? strtoll(q, &end, 10) : 0;
    bool found, rotated = false;
    struct stat st;
    ssize_t n = 0;
    int fd;

    if (q != NULL && (*q == '\0' || *end != '\0' || off < 0)) {
        http_reply_error(r, ACCEL_EINVAL,
                         "offset must be a byte offset (an integer >= 0)");
        return;
    }
    pthread_mutex_lock(&r->d->lock);
    {
        struct app *a = state_app_find(r->d, r->params[0]);
        found = a != NULL && visible(r, a);
    }
    pthread_mutex_unlock(&r->d->lock);
    if (!found) {
        http_reply_error(r, ACCEL_ENOTFOUND, "app \"%s\" is not installed",
                         r->params[0]);
        return;
    }
    path = xasprintf("%s/logs/%s.log", r->d->cfg.data_dir, r->params[0]);
    buf = xmalloc(LOG_CHUNK);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && fstat(fd, &st) == 0) {
        if (st.st_size < off) {
            off = 0;
            rotated = true;
        }
        n = pread(fd, buf, LOG_CHUNK, (off_t)off);
        if (n < 0)
            n = 0;
    } else {
        off = 0;
        st.st_size = 0;
    }
    if (fd >= 0)
        close(fd);
    http_reply_data(r, 200,
                    json_pack("{s:o, s:I, s:I, s:b}", "text",
                              log_text(buf, (size_t)n), "offset",
                              (json_int_t)(off + n), "size",
                              (json_int_t)st.st_size, "rotated", rotated));
    free(buf);
    free(path);
}

/* A manifest given as an object, or as JSON/YAML text. New reference. */
static json_t *manifest_from(struct http_req *r, const json_t *m)
{
    json_t *out = NULL;
    char *cause = NULL;
    if (json_is_object(m))
        return json_incref((json_t *)m);
    if (!json_is_string(m)) {
        http_reply_error(r, ACCEL_EINVAL,
                         "manifest is required: an object, or JSON/YAML text");
        return NULL;
    }
    if (yamljson_parse_any(json_string_value(m), json_string_length(m), &out,
                           &cause) != ACCEL_OK) {
        http_reply_error(r, ACCEL_EPARSE, "manifest: %s", cause);
        free(cause);
        return NULL;
    }
    return out;
}

static bool is_yaml_body(struct http_req *r)
{
    const char *ct = http_header(r, "Content-Type");
    return ct && (strstr(ct, "yaml") != NULL);
}

static bool optional_string(struct http_req *r, const json_t *b,
                            const char *key, const char **out)
{
    const json_t *v = json_object_get(b, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return true;
    if (!json_is_string(v)) {
        http_reply_error(r, ACCEL_EINVAL, "%s must be a string", key);
        return false;
    }
    *out = json_string_value(v);
    return true;
}

static void h_install(struct http_req *r)
{
    struct op_result res = {0};
    struct op_binding bind;
    const json_t *cb;
    json_t *b = NULL, *man = NULL;
    const char *owner, *type;
    char *cause = NULL;

    if (is_yaml_body(r)) {
        if (yamljson_parse(r->body ? r->body : "", r->body_len, &man,
                           &cause) != ACCEL_OK) {
            http_reply_error(r, ACCEL_EPARSE, "manifest: %s", cause);
            free(cause);
            return;
        }
        b = json_object();
        if (http_query(r, "owner"))
            json_object_set_new(b, "owner", json_string(http_query(r, "owner")));
        if (http_query(r, "selectedGpuType"))
            json_object_set_new(b, "selectedGpuType",
                                json_string(http_query(r, "selectedGpuType")));
    } else {
        b = http_body_json(r);
        if (b == NULL)
            return;
        man = manifest_from(r, json_object_get(b, "manifest"));
        if (man == NULL)
            goto out;
    }
    if (!optional_string(r, b, "owner", &owner) ||
        !optional_string(r, b, "selectedGpuType", &type))
        goto out;
    cb = json_object_get(b, "computeBinding");
    if (cb && !json_is_null(cb)) {
        if (!ops_parse_binding(cb, "computeBinding", &bind, &res)) {
            send_result(r, &res);
            goto out;
        }
        ops_install(r->d, &r->user, man, owner, type, &bind, &res);
        ops_binding_release(&bind);
    } else {
        ops_install(r->d, &r->user, man, owner, type, NULL, &res);
    }
    send_result(r, &res);
out:
    json_decref(man);
    json_decref(b);
}

/* Parse the optional computeBinding of a body; false = replied already. */
static bool body_binding(struct http_req *r, json_t *b, struct op_binding *bind,
                         bool *has)
{
    struct op_result res = {0};
    const json_t *cb = json_object_get(b, "computeBinding");
    *has = cb && !json_is_null(cb);
    if (!*has)
        return true;
    if (ops_parse_binding(cb, "computeBinding", bind, &res))
        return true;
    send_result(r, &res);
    return false;
}

static void h_resume(struct http_req *r)
{
    struct op_result res = {0};
    struct op_binding bind;
    bool has;
    json_t *b = http_body_json(r);
    if (b == NULL)
        return;
    if (body_binding(r, b, &bind, &has)) {
        ops_resume(r->d, &r->user, r->params[0], has ? &bind : NULL, &res);
        if (has)
            ops_binding_release(&bind);
        send_result(r, &res);
    }
    json_decref(b);
}

static void h_suspend(struct http_req *r)
{
    struct op_result res = {0};
    ops_suspend(r->d, &r->user, r->params[0], &res);
    send_result(r, &res);
}

static void h_uninstall(struct http_req *r)
{
    struct op_result res = {0};
    ops_uninstall(r->d, &r->user, r->params[0], &res);
    send_result(r, &res);
}

static void h_availability(struct http_req *r)
{
    struct op_result res = {0};
    ops_availability(r->d, &r->user, r->params[0], &res);
    send_result(r, &res);
}

static void h_validate(struct http_req *r)
{
    struct op_result res = {0};
    struct op_binding bind = {0};
    bool has;
    json_t *b = http_body_json(r);
    if (b == NULL)
        return;
    if (body_binding(r, b, &bind, &has)) {
        ops_validate(r->d, &r->user, r->params[0], &bind, &res);
        ops_binding_release(&bind);
        send_result(r, &res);
    }
    json_decref(b);
}

/* PUT .../bindings/{deviceId} {memory}: a live quota (ops_quota.c) */
static void h_quota(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    if (b == NULL)
        return;
    ops_quota_set(r->d, &r->user, r->params[0], r->params[1], b, &res);
    send_result(r, &res);
    json_decref(b);
}

static void h_bindings(struct http_req *r)
{
    struct app *a;
    json_t *arr = NULL;
    pthread_mutex_lock(&r->d->lock);
    a = state_app_find(r->d, r->params[0]);
    if (a && visible(r, a)) {
        arr = json_array();
        for (size_t i = 0; i < a->nrows; i++)
            json_array_append_new(arr,
                                  view_allocation(r->d, a, &a->rows[i], true));
    }
    pthread_mutex_unlock(&r->d->lock);
    if (arr == NULL)
        http_reply_error(r, ACCEL_ENOTFOUND, "app \"%s\" is not installed",
                         r->params[0]);
    else
        http_reply_data(r, 200, arr);
}

static void h_unbind(struct http_req *r)
{
    struct op_result res = {0};
    ops_unbind(r->d, &r->user, r->params[0], &res);
    send_result(r, &res);
}

/* What one scan of the events collects. */
struct event_scan {
    struct http_req *r;
    json_t *arr;        /* the events shown */
    int64_t limit;      /* how many to show */
    int64_t last_id;    /* the last event looked at, shown or not */
    bool full;          /* limit reached: the scan stopped */
};

/*
 * May member r see event e (d->lock held)? The events of the apps it sees;
 * once an app is gone, by the owner its events recorded (data.owner).
 * An event older than the app of its name now is of an earlier app of
 * that name (deleted, maybe another member's, whose name was taken
 * again): judged as one of an app gone. Events of no app (modes, nodes,
 * users) are the admins'.
 */
static bool event_visible(struct http_req *r, const struct store_event *e)
{
    struct app *a;
    json_t *data;
    const char *owner;
    bool ok;
    if (e->app == NULL)
        return false;
    a = state_app_find(r->d, e->app);
    if (a && e->ts_ms >= a->created_ms)
        return visible(r, a);
    if (e->data == NULL)
        return false;
    data = json_loads(e->data, 0, NULL);
    owner = json_string_value(json_object_get(data, "owner"));
    ok = owner && (strcmp(owner, r->user.name) == 0 ||
                   strcmp(owner, ACCEL_SHARED_OWNER) == 0);
    json_decref(data);
    return ok;
}

/* Whether member r may not see app (of owner, NULL unknown) by name, in
 * an event it sees (d->lock held): by the owner the event recorded (the
 * app of that name now may be a later one, of another member), else an
 * app of another member's, or one gone. */
static bool event_hides(void *ctx, const char *app, const char *owner)
{
    struct http_req *r = ctx;
    const struct app *a;
    if (owner != NULL && owner[0] != '\0')
        return strcmp(owner, r->user.name) != 0 &&
               strcmp(owner, ACCEL_SHARED_OWNER) != 0;
    a = state_app_find(r->d, app);
    return a == NULL || !visible(r, a);
}

/* e's data, and its message as member r may see them: the apps of other
 * members that an elastic memory event names become "another user's
 * app" (SPEC 3; reclaim_event_message). *msg is set when it differs. */
static json_t *event_data_for(struct http_req *r, const struct store_event *e,
                              char **msg)
{
    json_t *data = e->data ? json_loads(e->data, 0, NULL) : NULL;
    bool changed = false;
    *msg = NULL;
    if (data == NULL || r->user.admin)
        return data;
    *msg = reclaim_event_message(e->kind, data, e->device, event_hides, r,
                                 &changed);
    if (!changed) {
        free(*msg);
        *msg = NULL;
    }
    return data;
}

static enum accel_err event_cb(void *ctx, const struct store_event *e)
{
    struct event_scan *sc = ctx;
    json_t *o, *data;
    char *msg;
    sc->last_id = e->id;
    if (!sc->r->user.admin && !event_visible(sc->r, e))
        return ACCEL_OK; /* and does not count against the limit */
    data = event_data_for(sc->r, e, &msg);
    o = json_pack("{s:I, s:I, s:s, s:s}", "id", (json_int_t)e->id, "ts",
                  (json_int_t)e->ts_ms, "kind", e->kind, "message",
                  msg != NULL ? msg : e->message);
    free(msg);
    if (e->app)
        json_object_set_new(o, "app", json_string(e->app));
    if (e->node)
        json_object_set_new(o, "node", json_string(e->node));
    if (e->device)
        json_object_set_new(o, "device", json_string(e->device));
    if (data)
        json_object_set_new(o, "data", data);
    json_array_append_new(sc->arr, o);
    if ((int64_t)json_array_size(sc->arr) < sc->limit)
        return ACCEL_OK;
    sc->full = true;
    return ACCEL_ECONFLICT; /* stops the scan; not an error */
}

static bool query_int(struct http_req *r, const char *key, int64_t *out)
{
    const char *v = http_query(r, key);
    char *end;
    long long x;
    if (v == NULL)
        return true;
    x = strtoll(v, &end, 10);
    if (*v == '\0' || *end != '\0' || x < 0) {
        http_reply_error(r, ACCEL_EINVAL,
                         "%s must be a non-negative integer (got \"%s\")", key,
                         v);
        return false;
    }
    *out = x;
    return true;
}

/*
 * The events of f as a new array, filtered before the limit: a member
 * sees only the events of apps they see. The scan starts after the last
 * event this request already looked at (a parked long-poll woken again
 * reads only what is new), and records where it stopped. NULL when the
 * store failed (replied). Takes d->lock.
 */
static json_t *events_read(struct http_req *r, struct store_event_filter *f)
{
    struct event_scan sc = {.r = r, .arr = json_array(), .limit = f->limit};
    enum accel_err rc;
    if (r->ev_cursor > f->since_id)
        f->since_id = r->ev_cursor;
    f->limit = r->user.admin ? f->limit : 0; /* members: counted in event_cb */
    pthread_mutex_lock(&r->d->lock);
    rc = store_events_query(r->d->store, f, event_cb, &sc);
    pthread_mutex_unlock(&r->d->lock);
    if (sc.full)
        rc = ACCEL_OK;
    if (rc != ACCEL_OK) {
        json_decref(sc.arr);
        http_reply_error(r, rc, "events could not be read");
        return NULL;
    }
    if (sc.last_id > r->ev_cursor)
        r->ev_cursor = sc.last_id;
    return sc.arr;
}

#define EVENTS_WAIT_MAX 60 /* seconds one GET /api/events may wait */

static uint64_t event_seq(struct accel_daemon *d)
{
    uint64_t s;
    pthread_mutex_lock(&d->ev_lock);
    s = d->ev_seq;
    pthread_mutex_unlock(&d->ev_lock);
    return s;
}

/*
 * GET /api/events?since=&sinceMs=&app=&device=&kind=&limit=&wait=. With
 * wait=N (seconds, at most 60) and nothing newer to show, the answer waits
 * until a matching event is appended or the time passes (then []).
 */
static void h_events(struct http_req *r)
{
    struct store_event_filter f = {.limit = 1000};
    int64_t wait = 0;
    uint64_t deadline, seen;
    json_t *arr;
    if (!query_int(r, "since", &f.since_id) ||
        !query_int(r, "sinceMs", &f.since_ms) ||
        !query_int(r, "limit", &f.limit) || !query_int(r, "wait", &wait))
        return;
    if (f.limit == 0 || f.limit > 10000)
        f.limit = 10000;
    f.app = http_query(r, "app");
    f.device = http_query(r, "device");
    f.kind = http_query(r, "kind");
    wait = wait > EVENTS_WAIT_MAX ? EVENTS_WAIT_MAX : wait;
    /* a resumed long-poll keeps the deadline of its first dispatch */
    deadline = r->park_until_ns ? r->park_until_ns
                                : util_now_ns() + (uint64_t)wait * 1000000000ULL;
    seen = event_seq(r->d);
    arr = events_read(r, &f);
    if (arr == NULL)
        return;
    if (json_array_size(arr) == 0 && wait > 0 && util_now_ns() < deadline) {
        /* nothing yet: wait without holding a server thread */
        json_decref(arr);
        http_park(r, deadline, seen);
        return;
    }
    http_reply_data(r, 200, arr);
}

/* A user's limits and holdings (d->lock held): maxApps (null for an
 * admin), maxGpuMemory (bytes, null = no limit), apps, gpuMemory held. */
static void add_limits(struct accel_daemon *d, const struct user_rec *u,
                       json_t *o)
{
    uint64_t napps, held;
    ops_limits_held(d, u->name, &napps, &held);
    json_object_set_new(o, "maxApps",
                        u->admin ? json_null()
                                 : json_integer(ops_limits_max_apps(u)));
    json_object_set_new(o, "maxGpuMemory",
                        u->admin || u->max_gpu_mem < 0
                            ? json_null()
                            : json_integer(u->max_gpu_mem));
    json_object_set_new(o, "apps", json_integer((json_int_t)napps));
    json_object_set_new(o, "gpuMemory", json_integer((json_int_t)held));
}

static json_t *user_json(struct accel_daemon *d, const struct user_rec *u)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:I}", "name", u->name, "role",
                          u->admin ? "admin" : "member", "createdAt",
                          (json_int_t)u->created_ms,
                          "uid", /* its apps' uid (SPEC 3), 0 = none */
                          (json_int_t)identity_uid(d, u->name));
    add_limits(d, u, o);
    /* its apps' logs on this node, and the bound (--user-logs-max) */
    json_object_set_new(o, "logBytes", json_integer((json_int_t)u->log_bytes));
    json_object_set_new(o, "maxLogBytes",
                        d->cfg.user_logs_max
                            ? json_integer((json_int_t)d->cfg.user_logs_max)
                            : json_null());
    return o;
}

static void h_users(struct http_req *r)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&r->d->lock);
    for (size_t i = 0; i < r->d->nusers; i++)
        json_array_append_new(arr, user_json(r->d, &r->d->users[i]));
    pthread_mutex_unlock(&r->d->lock);
    http_reply_data(r, 200, arr);
}

/*
 * One limit of PUT /api/users/{name}: absent keeps *out; null sets -1
 * (default / no limit); else an integer in [0, max], or for bytes a
 * quantity string ("24Gi"). false = replied 400 naming the field.
 */
static bool limit_field(struct http_req *r, const json_t *b, const char *key,
                        bool bytes, int64_t max, int64_t *out)
{
    const json_t *v = json_object_get(b, key);
    uint64_t q;
    if (v == NULL)
        return true;
    if (json_is_null(v)) {
        *out = -1;
        return true;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= max) {
        *out = json_integer_value(v);
        return true;
    }
    if (bytes && json_is_string(v) &&
        quantity_parse_bytes(json_string_value(v), &q) == ACCEL_OK &&
        q <= (uint64_t)max) {
        *out = (int64_t)q;
        return true;
    }
    http_reply_error(r, ACCEL_EINVAL,
                     bytes ? "%s must be null (no limit), a number of bytes "
                             "or a quantity such as \"24Gi\""
                           : "%s must be null (the default) or an integer "
                             "from 0 to %lld",
                     key, (long long)max);
    return false;
}

/* PUT /api/users/{name} {maxApps, maxGpuMemory}: a member's limits. */
static void h_user_put(struct http_req *r)
{
    json_t *b = http_body_json(r);
    struct user_rec *u;
    int64_t max_apps, max_mem;
    enum accel_err rc;
    const char *k;
    json_t *v;

    if (b == NULL)
        return;
    json_object_foreach(b, k, v) {
        if (strcmp(k, "maxApps") != 0 && strcmp(k, "maxGpuMemory") != 0) {
            http_reply_error(r, ACCEL_EINVAL,
                             "unknown field \"%.64s\": only maxApps and "
                             "maxGpuMemory can be set", k);
            goto out;
        }
    }
    pthread_mutex_lock(&r->d->lock);
    u = state_user_find(r->d, r->params[0]);
    max_apps = u ? u->max_apps : -1;
    max_mem = u ? u->max_gpu_mem : -1;
    pthread_mutex_unlock(&r->d->lock);
    if (!limit_field(r, b, "maxApps", false, ACCEL_MAX_APPS_LIMIT,
                     &max_apps) ||
        !limit_field(r, b, "maxGpuMemory", true, INT64_MAX, &max_mem))
        goto out;
    rc = users_set_limits(r->d, r->params[0], max_apps, max_mem);
    if (rc == ACCEL_ENOTFOUND)
        http_reply_error(r, rc, "user \"%.64s\" not found", r->params[0]);
    else if (rc == ACCEL_EINVAL)
        http_reply_error(r, rc, "%.64s is an admin; admins are not limited",
                         r->params[0]);
    else if (rc != ACCEL_OK)
        http_reply_error(r, rc, "the limits could not be saved");
    else {
        pthread_mutex_lock(&r->d->lock);
        u = state_user_find(r->d, r->params[0]);
        http_reply_data(r, 200, u ? user_json(r->d, u) : json_object());
        pthread_mutex_unlock(&r->d->lock);
    }
out:
    json_decref(b);
}

static void h_user_add(struct http_req *r)
{
    json_t *b = http_body_json(r);
    const char *name, *role;
    char token[65];
    bool admin;
    enum accel_err rc;

    if (b == NULL)
        return;
    name = json_string_value(json_object_get(b, "name"));
    role = json_string_value(json_object_get(b, "role"));
    admin = role && strcmp(role, "admin") == 0;
    if (!accel_name_valid(name) || strcmp(name, ACCEL_SHARED_OWNER) == 0) {
        http_reply_error(r, ACCEL_EINVAL,
                         "name must be 1-63 characters of a-z, 0-9 and '-' "
                         "(not \"shared\")");
        goto out;
    }
    if (strncmp(name, IDENTITY_RETIRED_PREFIX,
                strlen(IDENTITY_RETIRED_PREFIX)) == 0) {
        http_reply_error(r, ACCEL_EINVAL,
                         "name must not begin with \"" IDENTITY_RETIRED_PREFIX
                         "\" (a removed user's uid keeps the record "
                         "accel-" IDENTITY_RETIRED_PREFIX "<uid>)");
        goto out;
    }
    if (role && !admin && strcmp(role, "member") != 0) {
        http_reply_error(r, ACCEL_EINVAL, "role must be admin or member");
        goto out;
    }
    if (auth_token_new(token) != ACCEL_OK) {
        http_reply_error(r, ACCEL_ESYS, "no randomness for a token");
        goto out;
    }
    rc = users_add(r->d, name, admin, token);
    if (rc == ACCEL_EEXIST)
        http_reply_error(r, rc, "user \"%s\" already exists", name);
    else if (rc == ACCEL_EBUSY)
        http_reply_error(r, rc, "apps of the removed user \"%s\" are still "
                         "being uninstalled; retry when they are gone", name);
    else if (rc == ACCEL_ECONFLICT)
        http_reply_error(r, rc, "no free uid left in --app-uid-range %u-%u "
                         "for user \"%s\" (every user runs its apps as a "
                         "uid of its own): widen the range",
                         r->d->cfg.uid_lo, r->d->cfg.uid_hi, name);
    else if (rc != ACCEL_OK)
        http_reply_error(r, rc, "the user could not be saved");
    else
        http_reply_data(r, 200, json_pack("{s:s, s:s, s:s}", "name", name,
                                          "role", admin ? "admin" : "member",
                                          "token", token));
out:
    json_decref(b);
}

/* DELETE /api/users/{name}[?force=true]: refused while the user owns
 * apps, unless forced (users_remove). */
static void h_user_del(struct http_req *r)
{
    const char *f = http_query(r, "force");
    bool force = f && (strcmp(f, "true") == 0 || strcmp(f, "1") == 0);
    json_t *apps = NULL;
    char *cause = NULL;
    enum accel_err rc;

    if (f && !force && strcmp(f, "false") != 0 && strcmp(f, "0") != 0) {
        http_reply_error(r, ACCEL_EINVAL, "force must be true or false");
        return;
    }
    rc = users_remove(r->d, r->params[0], force, &apps, &cause);
    if (rc == ACCEL_ENOTFOUND)
        http_reply_error(r, rc, "user \"%s\" not found", r->params[0]);
    else if (rc == ACCEL_EFORBIDDEN)
        http_reply_error(r, rc, "the admin user cannot be removed");
    else if (cause != NULL)
        http_reply_error(r, rc, "%s", cause);
    else if (rc != ACCEL_OK)
        http_reply_error(r, rc, "the user could not be removed");
    else
        http_reply_data(r, 200, json_pack("{s:s, s:o}", "name", r->params[0],
                                          "apps", apps));
    free(cause);
}

static void h_metrics(struct http_req *r)
{
    free(r->reply);
    r->reply = metrics_render(r->d, &r->user);
    r->status = 200;
    r->reply_type = "text/plain; version=0.0.4";
}

/* ---- legacy /api/gpu routes (MiB, in the {code, message, data} envelope
 * the Settings page's interceptor and olares-cli require) ---- */

static void h_gpu_list(struct http_req *r)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&r->d->lock);
    for (size_t i = 0; i < r->d->snap.ndevs; i++)
        if (accel_type_has_vram(r->d->snap.devs[i].type) ||
            r->d->snap.devs[i].type == ACCEL_TYPE_NVIDIA_GB10)
            json_array_append_new(arr, view_legacy_gpu(r->d, (int)i, &r->user));
    pthread_mutex_unlock(&r->d->lock);
    http_reply_data(r, 200, arr);
}

static bool legacy_fields(struct http_req *r, json_t *b, const char **id,
                          const char **app)
{
    *id = json_string_value(json_object_get(b, "id"));
    *app = json_string_value(json_object_get(b, "appName"));
    if (*id == NULL || (app != NULL && *app == NULL)) {
        http_reply_error(r, ACCEL_EINVAL, "id and appName are required");
        return false;
    }
    return true;
}

static void h_gpu_mode(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    const char *id = b ? json_string_value(json_object_get(b, "id")) : NULL;
    const char *mode = b ? json_string_value(json_object_get(b, "mode")) : NULL;
    const json_t *num = b ? json_object_get(b, "mode") : NULL;
    static const char *const codes[] = {"0", "1", "2"};
    if (b == NULL)
        return;
    /* the page sends "0"/"1"/"2"; a number 0..2 means the same */
    if (json_is_integer(num) && json_integer_value(num) >= 0 &&
        json_integer_value(num) <= 2)
        mode = codes[json_integer_value(num)];
    if (id == NULL || mode == NULL) {
        http_reply_error(r, ACCEL_EINVAL, "id and mode are required");
    } else {
        ops_switch(r->d, NULL, id, mode, &res);
        send_result(r, &res);
    }
    json_decref(b);
}

/* POST /api/gpu/rediscover (admin): NVML again, new GPUs added. */
static void h_gpu_rediscover(struct http_req *r)
{
    char *status = NULL;
    json_t *added = discovery_rediscover(r->d, &status);
    if (added == NULL) {
        http_reply_error_code(r, 409, "not-rediscovered", status);
    } else {
        http_reply_data(r, 200, json_pack("{s:o,s:s}", "added", added,
                                          "nvml", status));
    }
    free(status);
}

static bool mib_field(struct http_req *r, const json_t *v, uint64_t *out)
{
    *out = 0;
    if (v == NULL || json_is_null(v))
        return true;
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        (uint64_t)json_integer_value(v) < (1ULL << 40)) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (json_is_string(v)) {
        char *end;
        unsigned long long x = strtoull(json_string_value(v), &end, 10);
        if (*json_string_value(v) && *end == '\0' &&
            json_string_value(v)[0] != '-' && x < (1ULL << 40)) {
            *out = x;
            return true;
        }
    }
    http_reply_error(r, ACCEL_EINVAL,
                     "memory must be a non-negative number of MiB");
    return false;
}

static void h_gpu_update(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    const char *id, *app;
    uint64_t mib;
    if (b == NULL)
        return;
    if (legacy_fields(r, b, &id, &app) &&
        mib_field(r, json_object_get(b, "memory"), &mib)) {
        ops_legacy_bind(r->d, &r->user, id, app, mib,
                        json_is_true(json_object_get(b, "force")), &res);
        send_result(r, &res);
    }
    json_decref(b);
}

static void h_gpu_unassign(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    const char *id, *app;
    if (b == NULL)
        return;
    if (legacy_fields(r, b, &id, &app)) {
        ops_legacy_unassign(r->d, &r->user, id, app, &res);
        send_result(r, &res);
    }
    json_decref(b);
}

static void h_gpu_bulk(struct http_req *r)
{
    struct op_result res = {0};
    json_t *b = http_body_json(r);
    const char *app;
    if (b == NULL)
        return;
    app = json_string_value(json_object_get(b, "appName"));
    if (app == NULL) {
        http_reply_error(r, ACCEL_EINVAL, "appName is required");
    } else {
        ops_bulk(r->d, &r->user, app, json_object_get(b, "unassign"),
                 json_object_get(b, "assign"), &res);
        send_result(r, &res);
    }
    json_decref(b);
}

#define A "/api"
#define H "/hami/api/vgpu/v1" /* HAMi-WebUI routes (api_hami.c), Olares's */
#define HU "/api/vgpu/v1"       /* and upstream HAMi-WebUI's path */
#define HAMI_ROUTES(P)                                                         \
    {"POST", P "/gpus", api_hami_gpus, ROUTE_BODY | ROUTE_READ},                            \
    {"GET", P "/gpu", api_hami_gpu, 0},                                        \
    {"POST", P "/containers", api_hami_containers, ROUTE_BODY | ROUTE_READ},                \
    {"GET", P "/container", api_hami_container, 0},                            \
    {"POST", P "/summary", api_hami_summary, ROUTE_BODY | ROUTE_READ},                      \
    {"POST", P "/nodes", api_hami_nodes, ROUTE_BODY | ROUTE_READ},                          \
    {"GET", P "/node", api_hami_node, 0},                                      \
    {"POST", P "/gpu-types", api_hami_gpu_types, ROUTE_BODY | ROUTE_READ},                  \
    {"POST", P "/monitor/summary", api_hami_monitor_summary, ROUTE_BODY | ROUTE_READ}
const struct http_route api_routes[] = {
    {"GET", "/healthz", h_healthz, ROUTE_PUBLIC},
    {"GET", "/metrics", h_metrics, 0},
    {"GET", A "/compute-resources", h_resources, 0},
    {"PUT", A "/compute-resources/nodes/{}/devices/{}/support-type", h_switch,
     ROUTE_ADMIN | ROUTE_BODY | ROUTE_SLOW},
    {"PUT", A "/compute-resources/nodes/{}/devices/{}/time-slice", h_timeslice,
     ROUTE_ADMIN | ROUTE_BODY},
    {"PUT", A "/compute-resources/nodes/{}/devices/{}/meter", h_meter,
     ROUTE_ADMIN | ROUTE_BODY},
    {"PUT", A "/compute-resources/nodes/{}/devices/{}/elastic", h_elastic,
     ROUTE_ADMIN | ROUTE_BODY},
    {"POST", A "/compute-resources/preflight", h_preflight, ROUTE_BODY | ROUTE_READ},
    {"GET", A "/nodes", h_nodes, 0},
    {"GET", A "/runtime", h_runtime, 0},
    {"GET", A "/settings", h_settings, 0},
    {"PUT", A "/settings", h_settings_put,
     ROUTE_ADMIN | ROUTE_BODY | ROUTE_LOCAL},
    {"PUT", A "/nodes/{}", h_node_put, ROUTE_ADMIN | ROUTE_BODY},
    {"DELETE", A "/nodes/{}", h_node_delete, ROUTE_ADMIN},
    {"GET", A "/apps", h_apps, 0},
    {"POST", A "/apps", h_install, ROUTE_BODY},
    {"GET", A "/apps/{}", h_app, 0},
    {"GET", A "/apps/{}/logs", h_app_logs, 0},
    {"DELETE", A "/apps/{}", h_uninstall, ROUTE_SLOW},
    {"POST", A "/apps/{}/resume", h_resume, ROUTE_BODY},
    {"POST", A "/apps/{}/suspend", h_suspend, ROUTE_SLOW},
    {"GET", A "/apps/{}/compute-resources/availability", h_availability, 0},
    {"POST", A "/apps/{}/compute-resources/bindings/validate", h_validate,
     ROUTE_BODY | ROUTE_READ},
    {"POST", A "/apps/{}/compute-resources/validate", h_validate,
     ROUTE_BODY | ROUTE_READ},
    {"GET", A "/apps/{}/compute-resources/bindings", h_bindings, 0},
    {"PUT", A "/apps/{}/compute-resources/bindings/{}", h_quota, ROUTE_BODY},
    {"DELETE", A "/apps/{}/compute-resources/bindings", h_unbind,
     ROUTE_SLOW},
    {"GET", A "/events", h_events, 0},
    {"GET", A "/users", h_users, ROUTE_ADMIN},
    {"POST", A "/users", h_user_add, ROUTE_ADMIN | ROUTE_BODY},
    {"PUT", A "/users/{}", h_user_put, ROUTE_ADMIN | ROUTE_BODY},
    {"DELETE", A "/users/{}", h_user_del, ROUTE_ADMIN},
    {"GET", A "/gpu/list", h_gpu_list, 0},
    {"POST", A "/gpu/mode", h_gpu_mode,
     ROUTE_ADMIN | ROUTE_BODY | ROUTE_SLOW},
    {"POST", A "/gpu/rediscover", h_gpu_rediscover,
     ROUTE_ADMIN | ROUTE_SLOW | ROUTE_LOCAL},
    {"POST", A "/gpu/update/app", h_gpu_update, ROUTE_BODY | ROUTE_SLOW},
    {"POST", A "/gpu/unassign/app", h_gpu_unassign,
     ROUTE_BODY | ROUTE_SLOW},
    {"PUT", A "/gpu/assignments/bulk", h_gpu_bulk,
     ROUTE_BODY | ROUTE_SLOW},
    HAMI_ROUTES(H),
    HAMI_ROUTES(HU),
    {"GET", A "/metrics/history", api_history_get, 0},
    {"POST", H "/monitor/query/instant-vector", api_history_instant,
     ROUTE_BODY | ROUTE_READ},
    {"POST", H "/monitor/query/range-vector", api_history_range, ROUTE_BODY | ROUTE_READ},
    {"POST", HU "/monitor/query/instant-vector", api_history_instant,
     ROUTE_BODY | ROUTE_READ},
    {"POST", HU "/monitor/query/range-vector", api_history_range, ROUTE_BODY | ROUTE_READ},
    {"GET", "/", api_static, ROUTE_PUBLIC | ROUTE_PREFIX},
};
const size_t api_nroutes = sizeof(api_routes) / sizeof(api_routes[0]);
