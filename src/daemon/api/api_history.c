/* SPDX-License-Identifier: MIT */
/*
 * api_history.c: the history's routes (api_history.h).
 *
 * GET /api/metrics/history cuts [now - range, now] into range/step buckets
 * (t - step, t] and gives per bucket the mean of what was measured in it,
 * null when nothing was. The monitor routes evaluate a PromQL query at one
 * time (instant: now) or at start, start + step, ... end (range), each
 * selector taking a series' newest value within 5 minutes, and answer in
 * HAMi-WebUI's shape (monitor.proto through protojson): int64 timestamps
 * are strings of milliseconds; a range series has a point at every step,
 * a step without a value being {"value":0,"missing":true}, as HAMi-WebUI's
 * fillLessSamplePoint does.
 */
#include "common/accel_setup.h"
#include "daemon/api/api_history.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "daemon/api/api_hami.h"
#include "daemon/api/monitor.h"
#include "daemon/api/prom_proxy.h"
#include "daemon/api/promql.h"
#include "daemon/node/history/history.h"
#include "daemon/state.h"

#define MAX_POINTS 240        /* default step keeps the route under this */
#define MAX_RANGE_POINTS 11000 /* as Prometheus refuses above */

/* ---- GET /api/metrics/history ---- */

/* A whole number query parameter in [lo, hi]; def when absent. false after
 * replying 400. */
static bool int_param(struct http_req *r, const char *key, long def, long lo,
                      long hi, long *out)
{
    const char *s = http_query(r, key);
    char *end = NULL;
    long v;
    if (s == NULL || *s == '\0') {
        *out = def;
        return true;
    }
    v = strtol(s, &end, 10);
    if (*end != '\0' || !isdigit((unsigned char)*s) || v < lo || v > hi) {
        http_reply_error(r, ACCEL_EINVAL, "%s must be a whole number of "
                         "seconds from %ld to %ld", key, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

static json_t *num_or_null(double v, double scale)
{
    return isnan(v) ? json_null() : json_real(round(v * scale) / scale);
}

static json_t *int_or_null(double v)
{
    return isnan(v) ? json_null() : json_integer((json_int_t)llround(v));
}

struct buckets {
    int64_t start, end, step;  /* range */
    size_t n;                  /* buckets */
    size_t *j0;                /* [n+1]: bucket k = samples [j0[k], j0[k+1]) */
};

static void buckets_init(struct buckets *b, const struct history *h)
{
    b->j0 = xcalloc(b->n + 1, sizeof(*b->j0));
    for (size_t k = 0; k <= b->n; k++)
        b->j0[k] = history_find(h, b->start + (int64_t)k * b->step + 1);
}

static json_t *dev_json(const struct history *h, size_t s,
                        const struct buckets *b)
{
    struct history_meta m;
    json_t *u = json_array(), *mu = json_array(), *p = json_array(),
           *t = json_array();
    double total = NAN;
    history_meta(h, s, &m);
    for (size_t j = history_nsamples(h); j > 0 && isnan(total); j--)
        total = history_value(h, s, HF_MEM_TOTAL, j - 1);
    for (size_t k = 0; k < b->n; k++) {
        size_t a = b->j0[k], z = b->j0[k + 1];
        json_array_append_new(u, num_or_null(history_mean(h, s, HF_UTIL, a, z), 10));
        json_array_append_new(mu, int_or_null(history_mean(h, s, HF_MEM_USED, a, z)));
        json_array_append_new(p, num_or_null(history_mean(h, s, HF_POWER, a, z), 10));
        json_array_append_new(t, num_or_null(history_mean(h, s, HF_TEMP, a, z), 10));
    }
    return json_pack("{s:s, s:s, s:i, s:s, s:o, s:o, s:o, s:o, s:o}", "id",
                     m.device, "nodeName", m.node, "index", m.index, "model",
                     m.model, "memoryTotal", int_or_null(total),
                     "utilization", u, "memoryUsed", mu, "power", p,
                     "temperature", t);
}

/* Add the binding's SM utilization (NVML per process) into util, summed
 * over the app's devices (percent of one GPU), rounded to 0.1. */
static void add_util(const struct history *h, size_t s,
                     const struct buckets *b, json_t *util)
{
    for (size_t k = 0; k < b->n; k++) {
        double u = history_mean(h, s, HF_B_UTIL, b->j0[k], b->j0[k + 1]);
        json_t *pu = json_array_get(util, k);
        if (!isnan(u))
            json_array_set_new(util, k, json_real(
                round((json_number_value(pu) + u) * 10) / 10));
    }
}

/* Add series s (a binding) into its app's entry of apps (an object keyed
 * by app name). */
static void add_binding(const struct history *h, size_t s,
                        const struct buckets *b, json_t *apps)
{
    struct history_meta m;
    json_t *a, *used, *alloc;
    history_meta(h, s, &m);
    a = json_object_get(apps, m.app);
    if (a == NULL) {
        a = json_pack("{s:s, s:s, s:[], s:[], s:[], s:[]}", "name", m.app,
                      "owner", m.owner, "deviceIds", "memoryUsed",
                      "memoryAllocated", "utilization");
        for (size_t k = 0; k < b->n; k++) {
            json_array_append_new(json_object_get(a, "memoryUsed"), json_null());
            json_array_append_new(json_object_get(a, "memoryAllocated"),
                                  json_null());
            json_array_append_new(json_object_get(a, "utilization"),
                                  json_null());
        }
        json_object_set_new(apps, m.app, a);
    }
    json_array_append_new(json_object_get(a, "deviceIds"),
                          json_string(m.device));
    used = json_object_get(a, "memoryUsed");
    alloc = json_object_get(a, "memoryAllocated");
    add_util(h, s, b, json_object_get(a, "utilization"));
    for (size_t k = 0; k < b->n; k++) {
        double u = history_mean(h, s, HF_B_USED, b->j0[k], b->j0[k + 1]);
        double q = history_mean(h, s, HF_B_ALLOC, b->j0[k], b->j0[k + 1]);
        json_t *pu = json_array_get(used, k), *pq = json_array_get(alloc, k);
        if (!isnan(u))
            json_array_set_new(used, k, json_integer(
                json_integer_value(pu) + (json_int_t)llround(u)));
        if (!isnan(q))
            json_array_set_new(alloc, k, json_integer(
                json_integer_value(pq) + (json_int_t)llround(q)));
    }
}

static bool may_see(const struct http_req *r, const char *owner)
{
    return r->user.admin || strcmp(owner, r->user.name) == 0 ||
           strcmp(owner, ACCEL_SHARED_OWNER) == 0;
}

static json_t *history_json(struct http_req *r, struct history *h,
                            struct buckets *b)
{
    json_t *ts = json_array(), *devs = json_array(), *apps = json_object();
    json_t *list = json_array(), *v;
    const char *k;
    buckets_init(b, h);
    for (size_t i = 0; i < b->n; i++)
        json_array_append_new(ts, json_integer(b->start +
                                               (json_int_t)(i + 1) * b->step));
    for (size_t s = 0; s < history_nseries(h); s++) {
        struct history_meta m;
        history_meta(h, s, &m);
        if (m.kind == HISTORY_DEVICE)
            json_array_append_new(devs, dev_json(h, s, b));
        else if (may_see(r, m.owner))
            add_binding(h, s, b, apps);
    }
    json_object_foreach(apps, k, v)
        json_array_append(list, v);
    json_decref(apps);
    free(b->j0);
    return json_pack("{s:I, s:I, s:I, s:o, s:o, s:o}", "start",
                     (json_int_t)b->start, "end", (json_int_t)b->end, "step",
                     (json_int_t)b->step, "timestamps", ts, "devices", devs,
                     "apps", list);
}

void api_history_get(struct http_req *r)
{
    struct history *h = r->d->history;
    struct buckets b;
    long range, step, def;
    json_t *data;

    if (h == NULL) {
        http_reply_error(r, ACCEL_ENOTSUP, "the metric history is not kept");
        return;
    }
    if (!int_param(r, "range", 3600, 60, 86400, &range))
        return;
    def = (range + MAX_POINTS - 1) / MAX_POINTS;
    if (def < history_interval(h))
        def = history_interval(h);
    if (!int_param(r, "step", def, history_interval(h), range, &step))
        return;
    b.end = (int64_t)time(NULL);
    b.step = step;
    b.n = (size_t)(range / step);
    b.start = b.end - (int64_t)b.n * step;
    history_lock(h);
    data = history_json(r, h, &b);
    history_unlock(h);
    http_reply_data(r, 200, data);
}

/* ---- the monitor routes ---- */

/* Unix time t (seconds) as prom_proxy_json_ms writes it. */
static json_t *ms_string(int64_t t)
{
    return prom_proxy_json_ms(t * 1000);
}

static json_t *labels_json(const struct promql_labels *l)
{
    json_t *o = json_object();
    for (size_t i = 0; i < l->n; i++)
        json_object_set_new(o, l->k[i], json_string(l->v[i]));
    return o;
}

/* The query string of the body; false after replying 400. */
static bool body_query(struct http_req *r, const json_t *b, const char **q)
{
    const json_t *v = json_object_get(b, "query");
    if (!json_is_string(v) || json_string_length(v) == 0) {
        http_reply_error(r, ACCEL_EINVAL, "query is required (a PromQL "
                         "expression)");
        return false;
    }
    *q = json_string_value(v);
    return true;
}

/* Evaluate q at t over the history (caller holds its lock) and facts. */
static enum accel_err run_query(struct http_req *r,
                                const struct promql_query *pq, int64_t t,
                                const struct monitor_facts *facts,
                                struct promql_value *out, char **cause)
{
    struct monitor_ctx c = {r->d->history, r->user.name, r->user.admin,
                            facts};
    return promql_eval(pq, t, monitor_fetch, &c, out, cause);
}

static struct promql_query *parse_or_reply(struct http_req *r, const char *q)
{
    struct promql_query *pq = NULL;
    char *cause = NULL;
    if (promql_parse(q, &pq, &cause) != ACCEL_OK) {
        http_reply_error(r, ACCEL_EPARSE, "%s", cause);
        free(cause);
        return NULL;
    }
    if (r->d->history == NULL) {
        promql_free(pq);
        http_reply_error(r, ACCEL_ENOTSUP, "the metric history is not kept");
        return NULL;
    }
    return pq;
}

static json_t *instant_json(const struct promql_value *v, int64_t t)
{
    json_t *data = json_array();
    if (v->scalar)
        json_array_append_new(data, json_pack("{s:{}, s:o, s:o}", "metric",
                                              "value", prom_proxy_json_float(v->v),
                                              "timestamp", ms_string(t)));
    for (size_t i = 0; i < v->n; i++)
        json_array_append_new(data, json_pack(
            "{s:o, s:o, s:o}", "metric", labels_json(&v->s[i].l), "value",
            prom_proxy_json_float(v->s[i].v), "timestamp", ms_string(t)));
    return json_pack("{s:o}", "data", data);
}

void api_history_instant(struct http_req *r)
{
    json_t *b = http_body_json(r);
    struct promql_query *pq = NULL;
    struct promql_value v = {0};
    struct monitor_facts facts;
    const char *q;
    char *cause = NULL;
    int64_t t = (int64_t)time(NULL);
    enum accel_err err;

    if (b == NULL)
        return;
    if (!body_query(r, b, &q))
        goto out;
    if (r->d->cfg.prometheus) {
        prom_proxy_instant(r, q);
        goto out;
    }
    pq = parse_or_reply(r, q);
    if (pq == NULL)
        goto out;
    api_hami_facts(r->d, r->user.name, r->user.admin, &facts);
    history_lock(r->d->history);
    err = run_query(r, pq, t, &facts, &v, &cause);
    history_unlock(r->d->history);
    monitor_facts_release(&facts);
    if (err != ACCEL_OK)
        http_reply_error(r, err, "%s", cause);
    else
        http_reply_raw(r, 200, instant_json(&v, t));
out:
    free(cause);
    promql_value_release(&v);
    promql_free(pq);
    json_decref(b);
}

/* ---- range: times and steps ---- */

static bool rfc3339_zone(const char *z, struct tm *tm, int64_t *out);

/* Unix seconds from a number (milliseconds when above 1e11); false
 * outside (0, year 9999]. */
static bool epoch_of(double x, int64_t *out)
{
    if (x > 1e11)
        x /= 1000;
    if (!(x > 0 && x < 253402300800.0))
        return false;
    *out = (int64_t)x;
    return true;
}

/* "2006-01-02 15:04:05" (acceld's local time), RFC 3339, or unix seconds
 * (a number or digit string; milliseconds when above 1e11). */
static bool parse_time(const json_t *v, int64_t *out)
{
    const char *s, *rest;
    struct tm tm;
    if (json_is_number(v))
        return epoch_of(json_number_value(v), out);
    if (!json_is_string(v))
        return false;
    s = json_string_value(v);
    memset(&tm, 0, sizeof tm);
    rest = strptime(s, "%Y-%m-%d", &tm);
    if (rest == NULL) {
        char *end = NULL;
        double x = strtod(s, &end);
        return end != s && *end == '\0' && epoch_of(x, out);
    }
    if (*rest != ' ' && *rest != 'T')
        return false;
    rest = strptime(rest + 1, "%H:%M:%S", &tm);
    if (rest == NULL)
        return false;
    while (*rest == '.' || isdigit((unsigned char)*rest))
        rest++; /* fractions of a second */
    if (*rest == '\0') {
        tm.tm_isdst = -1;
        *out = (int64_t)mktime(&tm); /* local, as HAMi-WebUI's time.Local */
        return true;
    }
    return rfc3339_zone(rest, &tm, out);
}

/* "Z" or "+hh:mm" / "-hh:mm" after an RFC 3339 time. */
static bool rfc3339_zone(const char *z, struct tm *tm, int64_t *out)
{
    int sign = 0, hh = 0, mm = 0;
    int64_t utc = (int64_t)timegm(tm);
    if (strcmp(z, "Z") == 0 || strcmp(z, "z") == 0) {
        *out = utc;
        return true;
    }
    if ((*z == '+' || *z == '-') &&
        sscanf(z + 1, "%2d:%2d", &hh, &mm) == 2 && strlen(z) == 6) {
        sign = *z == '+' ? 1 : -1;
        *out = utc - sign * (hh * 3600 + mm * 60);
        return true;
    }
    return false;
}

/* A Go duration ("30m", "1h30m", "15s", "500ms") or a number of seconds;
 * whole seconds, at least 1. */
static bool parse_step(const json_t *v, int64_t *out)
{
    const char *s;
    double total = 0;
    if (json_is_number(v)) {
        total = json_number_value(v);
        if (!(total >= 1 && total <= 86400.0 * 366))
            return false;
        *out = (int64_t)total;
        return true;
    }
    if (!json_is_string(v))
        return false;
    s = json_string_value(v);
    while (*s) {
        char *end = NULL;
        double x = strtod(s, &end);
        double unit = 1;
        if (end == s || x < 0)
            return false;
        s = end;
        if (strncmp(s, "ms", 2) == 0) {
            unit = 0.001;
            s += 2;
        } else if (*s == 'h' || *s == 'm' || *s == 's' || *s == 'd') {
            unit = *s == 'h' ? 3600 : *s == 'm' ? 60 : *s == 'd' ? 86400 : 1;
            s++;
        } else if (*s != '\0') {
            return false;
        }
        total += x * unit;
        if (!(total <= 86400.0 * 366))
            return false;
    }
    *out = (int64_t)total;
    return *out >= 1;
}

struct range_req {
    int64_t start, end, step;  /* unix seconds */
};

/* start/end/step from body.range or the body itself; false after 400. */
static bool read_range(struct http_req *r, const json_t *b,
                       struct range_req *rr)
{
    const json_t *g = json_object_get(b, "range");
    if (!json_is_object(g))
        g = b;
    if (!parse_time(json_object_get(g, "start"), &rr->start) ||
        !parse_time(json_object_get(g, "end"), &rr->end)) {
        http_reply_error(r, ACCEL_EINVAL, "range.start and range.end must be "
                         "times (\"2006-01-02 15:04:05\", RFC 3339 or unix "
                         "seconds)");
        return false;
    }
    if (!parse_step(json_object_get(g, "step"), &rr->step)) {
        http_reply_error(r, ACCEL_EINVAL, "range.step must be a duration of "
                         "at least 1s (\"30s\", \"5m\", \"1h\") or seconds");
        return false;
    }
    if (rr->end < rr->start ||
        (rr->end - rr->start) / rr->step + 1 > MAX_RANGE_POINTS) {
        http_reply_error(r, ACCEL_EINVAL, "range.end must not be before "
                         "range.start, and the range must hold at most %d "
                         "steps", MAX_RANGE_POINTS);
        return false;
    }
    return true;
}

/* Series of a range answer, keyed by their labels. */
struct streams {
    json_t *bykey;   /* key -> {"metric":…, "values":[…]} */
    json_t *order;   /* the objects in first-seen order */
    size_t npoints;  /* points per series */
};

/* The stream of labels l, created with every point missing. */
static json_t *stream_of(struct streams *st, const struct promql_labels *l,
                         const struct range_req *rr)
{
    char *key = promql_labels_key(l);
    json_t *s = json_object_get(st->bykey, key), *vals;
    if (s == NULL) {
        vals = json_array();
        for (size_t k = 0; k < st->npoints; k++)
            json_array_append_new(vals, json_pack(
                "{s:i, s:o, s:b}", "value", 0, "timestamp",
                ms_string(rr->start + (int64_t)k * rr->step), "missing", 1));
        s = json_pack("{s:o, s:o}", "metric", labels_json(l), "values", vals);
        json_object_set_new(st->bykey, key, s);
        json_array_append(st->order, s);
    }
    free(key);
    return s;
}

static void put_point(struct streams *st, const struct promql_labels *l,
                      const struct range_req *rr, size_t k, double v)
{
    json_t *s = stream_of(st, l, rr);
    json_t *p = json_array_get(json_object_get(s, "values"), k);
    json_object_set_new(p, "value", prom_proxy_json_float(v));
    json_object_set_new(p, "missing", json_false());
}

static enum accel_err range_eval(struct http_req *r,
                                 const struct promql_query *pq,
                                 const struct range_req *rr,
                                 const struct monitor_facts *facts,
                                 struct streams *st, char **cause)
{
    static const struct promql_labels none = {0};
    for (size_t k = 0; k < st->npoints; k++) {
        struct promql_value v = {0};
        enum accel_err err = run_query(r, pq, rr->start +
                                       (int64_t)k * rr->step, facts, &v,
                                       cause);
        if (err != ACCEL_OK) {
            promql_value_release(&v);
            return err;
        }
        if (v.scalar)
            put_point(st, &none, rr, k, v.v);
        for (size_t i = 0; i < v.n; i++)
            put_point(st, &v.s[i].l, rr, k, v.s[i].v);
        promql_value_release(&v);
    }
    return ACCEL_OK;
}

static void range_local(struct http_req *r, const char *q,
                        const struct range_req *rr)
{
    struct promql_query *pq = parse_or_reply(r, q);
    struct monitor_facts facts;
    struct streams st;
    char *cause = NULL;
    enum accel_err err;
    if (pq == NULL)
        return;
    st.bykey = json_object();
    st.order = json_array();
    st.npoints = (size_t)((rr->end - rr->start) / rr->step) + 1;
    api_hami_facts(r->d, r->user.name, r->user.admin, &facts);
    history_lock(r->d->history);
    err = range_eval(r, pq, rr, &facts, &st, &cause);
    history_unlock(r->d->history);
    monitor_facts_release(&facts);
    if (err != ACCEL_OK)
        http_reply_error(r, err, "%s", cause);
    else
        http_reply_raw(r, 200, json_pack("{s:O}", "data", st.order));
    free(cause);
    json_decref(st.bykey);
    json_decref(st.order);
    promql_free(pq);
}

void api_history_range(struct http_req *r)
{
    json_t *b = http_body_json(r);
    struct range_req rr;
    const char *q;
    if (b == NULL)
        return;
    if (body_query(r, b, &q) && read_range(r, b, &rr)) {
        if (r->d->cfg.prometheus)
            prom_proxy_range(r, q, rr.start, rr.end, rr.step);
        else
            range_local(r, q, &rr);
    }
    json_decref(b);
}
