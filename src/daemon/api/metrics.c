/* SPDX-License-Identifier: MIT */
/*
 * metrics.c: request counters and latency histograms per route, refusals
 * by code, store commit latency, and the Prometheus exposition of them plus
 * the per-device and per-app gauges read from the state.
 */
#include "common/accel_setup.h"
#include "daemon/api/metrics.h"

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/api/view.h"
#include "daemon/node/enforce/reclaim.h"
#include "daemon/node/slice/broker_ops.h"
#include "daemon/state.h"

#define MAX_SERIES 128
#define NBUCKETS 10

static const double bucket_s[NBUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                          0.025,  0.05,  0.1,    0.5,   1.0};

struct hist {
    uint64_t buckets[NBUCKETS]; /* cumulative at render time */
    uint64_t count;             /* observations */
    double sum;                 /* seconds */
};

struct http_series {
    char method[8];      /* GET ... */
    const char *route;   /* static pattern */
    int status;          /* HTTP status */
    uint64_t count;      /* requests */
};

struct route_hist {
    const char *route;   /* static pattern */
    struct hist h;       /* latency */
};

struct metrics {
    pthread_mutex_t lock;                 /* guards all below */
    struct http_series http[MAX_SERIES];  /* requests by route and status */
    size_t nhttp;
    struct route_hist lat[MAX_SERIES];    /* latency by route */
    size_t nlat;
    char *refusal_code[MAX_SERIES];       /* admission refusals by code */
    uint64_t refusal_count[MAX_SERIES];
    size_t nrefusal;
    struct hist commit;                   /* store commit latency */
};

struct metrics *metrics_new(void)
{
    struct metrics *m = xcalloc(1, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void metrics_free(struct metrics *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nrefusal; i++)
        free(m->refusal_code[i]);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static void hist_observe(struct hist *h, double s)
{
    for (int i = 0; i < NBUCKETS; i++)
        if (s <= bucket_s[i]) {
            h->buckets[i]++;
            break;
        }
    h->count++;
    h->sum += s;
}

void metrics_http_observe(struct accel_daemon *d, const char *method,
                          const char *route, int status, uint64_t ns)
{
    struct metrics *m = d->metrics;
    size_t i;
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    for (i = 0; i < m->nhttp; i++)
        if (m->http[i].route == route && m->http[i].status == status &&
            strcmp(m->http[i].method, method) == 0)
            break;
    if (i == m->nhttp && m->nhttp < MAX_SERIES) {
        util_strlcpy(m->http[i].method, method, sizeof m->http[i].method);
        m->http[i].route = route;
        m->http[i].status = status;
        m->nhttp++;
    }
    if (i < m->nhttp)
        m->http[i].count++;
    for (i = 0; i < m->nlat; i++)
        if (m->lat[i].route == route)
            break;
    if (i == m->nlat && m->nlat < MAX_SERIES)
        m->lat[m->nlat++].route = route;
    if (i < m->nlat)
        hist_observe(&m->lat[i].h, (double)ns / 1e9);
    pthread_mutex_unlock(&m->lock);
}

void metrics_refusal(struct accel_daemon *d, const char *code)
{
    struct metrics *m = d->metrics;
    size_t i;
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    for (i = 0; i < m->nrefusal; i++)
        if (strcmp(m->refusal_code[i], code) == 0)
            break;
    if (i == m->nrefusal && m->nrefusal < MAX_SERIES)
        m->refusal_code[m->nrefusal++] = xstrdup(code);
    if (i < m->nrefusal)
        m->refusal_count[i]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_commit(struct accel_daemon *d, uint64_t ns)
{
    if (d->metrics == NULL)
        return;
    pthread_mutex_lock(&d->metrics->lock);
    hist_observe(&d->metrics->commit, (double)ns / 1e9);
    pthread_mutex_unlock(&d->metrics->lock);
}

/* A growing text buffer with a hard cap (STYLE 12). */
struct out {
    char *buf;
    size_t len, cap;
};

static void outf(struct out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void outf(struct out *o, const char *fmt, ...)
{
    va_list ap;
    int n;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        if (o->cap >= (64u << 20))
            return; /* cap reached: drop the line */
        o->cap *= 2;
        o->buf = xrealloc(o->buf, o->cap);
    }
}

/*
 * s as a label value of the exposition format: backslash, double quote and
 * newline escaped; cut (never mid-escape) to fit buf. Returns buf.
 */
static const char *esc(const char *s, char *buf, size_t len)
{
    size_t n = 0;
    for (; s && *s && n + 3 < len; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n')
            buf[n++] = '\\';
        buf[n++] = *s == '\n' ? 'n' : *s;
    }
    buf[n] = '\0';
    return buf;
}

#define LV 4 * ACCEL_ID_MAX /* room for one escaped label value */

static void hist_render(struct out *o, const char *name, const char *labels,
                        const struct hist *h)
{
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (int i = 0; i < NBUCKETS; i++) {
        cum += h->buckets[i];
        outf(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
             bucket_s[i], (unsigned long long)cum);
    }
    outf(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
         (unsigned long long)h->count);
    outf(o, "%s_sum%s%s%s %.9f\n", name, labels[0] ? "{" : "", labels,
         labels[0] ? "}" : "", h->sum);
    outf(o, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels,
         labels[0] ? "}" : "", (unsigned long long)h->count);
}

/* Σ usedMemory of the reconciler's foreign processes ([{pid, usedMemory}]). */
static double foreign_bytes(const json_t *foreign)
{
    double sum = 0;
    size_t i;
    const json_t *p;
    json_array_foreach(foreign, i, p)
        sum += (double)json_integer_value(json_object_get(p, "usedMemory"));
    return sum;
}

/* The value of device gauge k (in the order of dev_gauges) for device i. */
static double dev_value(struct accel_daemon *d, size_t i, size_t k)
{
    const struct adm_device *x = &d->snap.devs[i];
    switch (k) {
    case 0: return (double)x->memory;
    case 1: return (double)x->allocated;
    case 2: return (double)adm_device_free(x);
    case 3: return (double)d->dinfo[i].used_mem;
    case 4: return d->dinfo[i].util < 0 ? NAN : d->dinfo[i].util / 100.0;
    case 5: return x->healthy && x->present ? 1 : 0;
    case 6: return x->nbound;
    case 7: return (double)(x->st == ACCEL_SUPPORT_EXCLUSIVE ? 0
                            : x->st == ACCEL_SUPPORT_MEMSLICE ? 1 : 2);
    case 8: return (double)json_array_size(d->dinfo[i].foreign);
    case 9: return foreign_bytes(d->dinfo[i].foreign);
    case 10: return d->dinfo[i].power_mw < 0 ? NAN
                                             : d->dinfo[i].power_mw / 1000.0;
    case 11: return d->dinfo[i].power_limit_mw < 0
                        ? NAN : d->dinfo[i].power_limit_mw / 1000.0;
    default: return d->dinfo[i].temp < 0 ? NAN : (double)d->dinfo[i].temp;
    }
}

static const char *const dev_gauges[][2] = {
    {"accel_device_memory_total_bytes", "Dedicated memory of the device."},
    {"accel_device_memory_allocated_bytes",
     "Memory assigned to apps (Memory slicing quotas)."},
    {"accel_device_memory_free_bytes",
     "Memory free for new bindings, by the device's sharing mode."},
    {"accel_device_memory_used_bytes", "Memory in use (NVML or ledgers)."},
    {"accel_device_utilization_ratio", "GPU utilization (NVML), 0-1."},
    {"accel_device_healthy", "1 when the device is healthy and present."},
    {"accel_device_bound_apps", "Allocation rows (bindings) on the device."},
    {"accel_device_share_mode",
     "Sharing mode: 0 App exclusive, 1 Memory slicing, 2 Time slicing."},
    {"accel_device_foreign_processes",
     "Processes of no app on the device (reconciler, NVML)."},
    {"accel_device_foreign_memory_bytes",
     "Memory held by processes of no app on the device (reconciler)."},
    {"accel_device_power_watts", "Board power draw (NVML)."},
    {"accel_device_power_limit_watts", "Enforced power limit (NVML)."},
    {"accel_device_temperature_celsius", "GPU core temperature (NVML)."},
};

/* node="…",device="…",type="…" of device i into buf. */
static void dev_labels(struct accel_daemon *d, size_t i, char *buf,
                       size_t len)
{
    const struct adm_device *x = &d->snap.devs[i];
    char n[LV], id[LV];
    snprintf(buf, len, "node=\"%s\",device=\"%s\",type=\"%s\"",
             esc(d->snap.nodes[x->node].name, n, sizeof n),
             esc(x->id, id, sizeof id), accel_type_name(x->type));
}

static void render_devices(struct out *o, struct accel_daemon *d)
{
    char l[3 * LV + 64], model[LV];
    for (size_t k = 0; k < sizeof dev_gauges / sizeof dev_gauges[0]; k++) {
        outf(o, "# HELP %s %s\n# TYPE %s gauge\n", dev_gauges[k][0],
             dev_gauges[k][1], dev_gauges[k][0]);
        for (size_t i = 0; i < d->snap.ndevs; i++) {
            double v = dev_value(d, i, k);
            if (isnan(v))
                continue; /* unknown (NVML does not say): no sample */
            dev_labels(d, i, l, sizeof l);
            outf(o, "%s{%s} %.17g\n", dev_gauges[k][0], l, v);
        }
    }
    outf(o, "# HELP accel_device_info Model, sharing mode and NVML index of "
            "the device (value 1).\n# TYPE accel_device_info gauge\n");
    for (size_t i = 0; i < d->snap.ndevs; i++) {
        dev_labels(d, i, l, sizeof l);
        outf(o, "accel_device_info{%s,model=\"%s\",mode=\"%s\",index=\"%d\"} 1\n",
             l, esc(d->dinfo[i].model, model, sizeof model),
             accel_support_name(d->snap.devs[i].st), d->dinfo[i].index);
    }
}

static void render_app_rows(struct out *o, struct accel_daemon *d,
                            const struct auth_user *u)
{
    char a[LV], ow[LV], n[LV], dev[LV];
    outf(o, "# HELP accel_app_quota_bytes Memory quota per app and device "
            "(0 = the whole card).\n# TYPE accel_app_quota_bytes gauge\n");
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *x = d->apps[i];
        if (view_hides(u, x))
            continue; /* another user's app: no series for a member */
        esc(x->name, a, sizeof a);
        esc(x->owner, ow, sizeof ow);
        for (size_t k = 0; k < x->nrows; k++) {
            const struct adm_device *v = &d->snap.devs[x->rows[k].dev];
            outf(o, "accel_app_quota_bytes{app=\"%s\",owner=\"%s\",node=\"%s\","
                    "device=\"%s\"} %llu\n", a, ow,
                 esc(d->snap.nodes[v->node].name, n, sizeof n),
                 esc(v->id, dev, sizeof dev),
                 (unsigned long long)x->rows[k].memory);
        }
    }
}

/* The outside meter's readings (node/meter.c), one series per app and
 * metered device: what it charged as untracked and how far over the quota
 * the app is as the driver counts it. */
static void render_meter(struct out *o, struct accel_daemon *d,
                         const struct auth_user *u)
{
    static const char *const name[2] = {"accel_app_untracked_memory_bytes",
                                        "accel_app_over_quota_bytes"};
    static const char *const help[2] = {
        "Device memory the driver holds for the app beyond the shim's "
        "charges, charged into its ledger (the outside meter).",
        "How far the app is over its quota as the driver counts it (0 "
        "within it)."};
    char a[LV], ow[LV], n[LV], dev[LV];

    for (int k = 0; k < 2; k++) {
        outf(o, "# HELP %s %s\n# TYPE %s gauge\n", name[k], help[k], name[k]);
        for (size_t i = 0; i < d->snap.ndevs; i++) {
            const struct adm_device *v = &d->snap.devs[i];
            for (size_t j = 0; j < d->dinfo[i].nmeter; j++) {
                const struct app_meter *m = &d->dinfo[i].meter[j];
                const struct app *x = state_app_find(d, m->app);
                if (x == NULL || view_hides(u, x))
                    continue;
                outf(o, "%s{app=\"%s\",owner=\"%s\",node=\"%s\","
                        "device=\"%s\"} %llu\n", name[k],
                     esc(x->name, a, sizeof a), esc(x->owner, ow, sizeof ow),
                     esc(d->snap.nodes[v->node].name, n, sizeof n),
                     esc(v->id, dev, sizeof dev),
                     (unsigned long long)(k == 0 ? m->untracked : m->over));
            }
        }
    }
}

static void render_apps(struct out *o, struct accel_daemon *d,
                        const struct auth_user *u)
{
    char a[LV], ow[LV];
    size_t count[APP_STATE_COUNT] = {0};
    render_app_rows(o, d, u);
    render_meter(o, d, u);
    outf(o, "# HELP accel_app_memory_used_bytes Live memory use of the app "
            "(shim ledgers).\n# TYPE accel_app_memory_used_bytes gauge\n");
    for (size_t i = 0; i < d->napps; i++)
        if (!view_hides(u, d->apps[i]))
            outf(o, "accel_app_memory_used_bytes{app=\"%s\",owner=\"%s\"} "
                    "%llu\n",
             esc(d->apps[i]->name, a, sizeof a),
             esc(d->apps[i]->owner, ow, sizeof ow),
             (unsigned long long)d->apps[i]->usage);
    outf(o, "# HELP accel_app_state The app's current state (value 1).\n"
            "# TYPE accel_app_state gauge\n");
    for (size_t i = 0; i < d->napps; i++) {
        count[d->apps[i]->state]++;
        if (view_hides(u, d->apps[i]))
            continue;
        outf(o, "accel_app_state{app=\"%s\",owner=\"%s\",state=\"%s\"} 1\n",
             esc(d->apps[i]->name, a, sizeof a),
             esc(d->apps[i]->owner, ow, sizeof ow),
             app_state_name(d->apps[i]->state));
    }
    outf(o, "# HELP accel_apps Installed apps by state.\n"
            "# TYPE accel_apps gauge\n");
    for (int s = 0; s < APP_STATE_COUNT; s++)
        outf(o, "accel_apps{state=\"%s\"} %zu\n",
             app_state_name((enum app_state)s), count[s]);
}

static void render_counters(struct out *o, struct metrics *m)
{
    char route[LV], labels[LV + 16];
    outf(o, "# HELP accel_http_requests_total HTTP requests by route and "
            "status.\n# TYPE accel_http_requests_total counter\n");
    for (size_t i = 0; i < m->nhttp; i++)
        outf(o, "accel_http_requests_total{method=\"%s\",route=\"%s\","
                "status=\"%d\"} %llu\n", esc(m->http[i].method, labels,
                sizeof labels), esc(m->http[i].route, route, sizeof route),
             m->http[i].status, (unsigned long long)m->http[i].count);
    outf(o, "# HELP accel_http_request_duration_seconds Request latency "
            "(GET /api/events?wait= includes its wait).\n"
            "# TYPE accel_http_request_duration_seconds histogram\n");
    for (size_t i = 0; i < m->nlat; i++) {
        snprintf(labels, sizeof labels, "route=\"%s\"",
                 esc(m->lat[i].route, route, sizeof route));
        hist_render(o, "accel_http_request_duration_seconds", labels,
                    &m->lat[i].h);
    }
    outf(o, "# HELP accel_admission_refusals_total Admission refusals by "
            "reason (the validation code).\n"
            "# TYPE accel_admission_refusals_total counter\n");
    for (size_t i = 0; i < m->nrefusal; i++)
        outf(o, "accel_admission_refusals_total{reason=\"%s\"} %llu\n",
             esc(m->refusal_code[i], route, sizeof route),
             (unsigned long long)m->refusal_count[i]);
    outf(o, "# HELP accel_store_commit_duration_seconds Store commit "
            "latency.\n# TYPE accel_store_commit_duration_seconds histogram\n");
    hist_render(o, "accel_store_commit_duration_seconds", "", &m->commit);
}

/* Copy text's lines, leaving out those labelled app="X" for an app X
 * that u may not see (d->lock held). */
static void put_visible_lines(struct out *o, struct accel_daemon *d,
                              const struct auth_user *u, const char *text)
{
    while (*text) {
        const char *eol = strchr(text, '\n');
        size_t n = eol ? (size_t)(eol - text) + 1 : strlen(text);
        const char *lab = memmem(text, n, "app=\"", 5);
        bool keep = true;
        if (lab && !u->admin) {
            char name[ACCEL_NAME_MAX + 1];
            const char *end = memchr(lab + 5, '"', n - (size_t)(lab + 5 - text));
            size_t len = end ? (size_t)(end - lab - 5) : 0;
            struct app *a = NULL;
            if (len < sizeof name) {
                memcpy(name, lab + 5, len);
                name[len] = '\0';
                a = state_app_find(d, name);
            }
            keep = a == NULL || !view_hides(u, a);
        }
        if (keep)
            outf(o, "%.*s", (int)n, text);
        text += n;
    }
}

char *metrics_render(struct accel_daemon *d, const struct auth_user *u)
{
    struct out o = {xmalloc(65536), 0, 65536};
    o.buf[0] = '\0';
    pthread_mutex_lock(&d->lock);
    render_devices(&o, d);
    render_apps(&o, d, u);
    {
        char *ts = broker_ops_metrics(d);
        put_visible_lines(&o, d, u, ts);
        free(ts);
        ts = reclaim_metrics(d); /* elastic memory (SPEC 4.4) */
        put_visible_lines(&o, d, u, ts);
        free(ts);
    }
    /* time slicing (SPEC 4.3): the broker's per-device, per-app turns and
     * waits go here, as accel_timeslice_turns_total{node,device,app} and
     * accel_timeslice_wait_seconds_total{node,device,app} (counters) */
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_lock(&d->metrics->lock);
    render_counters(&o, d->metrics);
    pthread_mutex_unlock(&d->metrics->lock);
    return o.buf;
}
