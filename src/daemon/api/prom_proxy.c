/* SPDX-License-Identifier: MIT */
/*
 * prom_proxy.c: the monitor routes against a real Prometheus
 * (prom_proxy.h): one libcurl GET per request, Prometheus's JSON turned
 * into HAMi-WebUI's (timestamps as strings of milliseconds, values as
 * numbers, a range series filled at every step with missing points, as
 * HAMi-WebUI's own server does).
 */
#include "common/accel_setup.h"
#include "daemon/api/prom_proxy.h"

#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "daemon/state.h"

#define PROM_MAX_BODY (16u << 20) /* a bigger answer is refused */

struct body {
    char *p;        /* bytes, NUL-terminated */
    size_t len;     /* used */
    bool too_big;   /* went over PROM_MAX_BODY */
};

static size_t on_data(char *ptr, size_t size, size_t n, void *arg)
{
    struct body *b = arg;
    size_t add = size * n;
    if (b->len + add > PROM_MAX_BODY) {
        b->too_big = true;
        return 0;
    }
    b->p = xrealloc(b->p, b->len + add + 1);
    memcpy(b->p + b->len, ptr, add);
    b->len += add;
    b->p[b->len] = '\0';
    return add;
}

static bool is_success(const json_t *doc)
{
    const char *s = json_string_value(json_object_get(doc, "status"));
    return s != NULL && strcmp(s, "success") == 0;
}

void prom_proxy_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void bad_gateway(struct http_req *r, const char *url, const char *why)
{
    char *msg = xasprintf("Prometheus at %s did not answer: %s", url, why);
    http_reply_error_code(r, 502, "prometheus-unavailable", msg);
    free(msg);
}

/*
 * GET base + path + "?" + args; the decoded "data" of a success, NULL
 * after replying (502 unreachable or not Prometheus, 400 refused query).
 */
static json_t *prom_get(struct http_req *r, const char *path, char *args)
{
    const char *base = r->d->cfg.prometheus;
    size_t bl = strlen(base);
    char *url = xasprintf("%.*s%s?%s", (int)(bl && base[bl - 1] == '/' ?
                                             bl - 1 : bl), base, path, args);
    struct body b = {NULL, 0, false};
    CURL *c = curl_easy_init();
    json_t *doc = NULL, *data = NULL;
    CURLcode rc;
    long status = 0;

    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)PROM_PROXY_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        bad_gateway(r, base, b.too_big ? "the answer is over 16 MiB"
                                       : curl_easy_strerror(rc));
        goto out;
    }
    doc = b.p ? json_loads(b.p, 0, NULL) : NULL;
    if (!json_is_object(doc)) {
        char why[64];
        snprintf(why, sizeof why, "HTTP %ld without Prometheus's JSON",
                 status);
        bad_gateway(r, base, why);
        goto out;
    }
    if (!is_success(doc)) {
        const char *e = json_string_value(json_object_get(doc, "error"));
        http_reply_error(r, ACCEL_EINVAL, "Prometheus refused the query: %s",
                         e ? e : "no reason given");
        goto out;
    }
    data = json_incref(json_object_get(doc, "data"));
out:
    json_decref(doc);
    free(b.p);
    free(url);
    free(args);
    return data;
}

static char *escape(const char *q)
{
    CURL *c = curl_easy_init();
    char *e = curl_easy_escape(c, q, 0);
    char *out = xstrdup(e ? e : "");
    curl_free(e);
    curl_easy_cleanup(c);
    return out;
}

json_t *prom_proxy_json_float(double v)
{
    if (isnan(v))
        return json_string("NaN");
    if (isinf(v))
        return json_string(v > 0 ? "Infinity" : "-Infinity");
    return json_real(v);
}

json_t *prom_proxy_json_ms(int64_t ms)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)ms);
    return json_string(buf);
}

static json_t *value_of(const json_t *pair, int64_t *ms)
{
    const char *s = json_string_value(json_array_get(pair, 1));
    double v = s ? strtod(s, NULL) : NAN;
    *ms = (int64_t)llround(json_number_value(json_array_get(pair, 0)) * 1000);
    return prom_proxy_json_float(v);
}

void prom_proxy_instant(struct http_req *r, const char *q)
{
    char *e = escape(q);
    json_t *data = prom_get(r, "/api/v1/query",
                            xasprintf("query=%s&time=%lld", e,
                                      (long long)time(NULL)));
    json_t *out, *res, *x;
    const char *type;
    size_t i;
    int64_t ms;
    free(e);
    if (data == NULL)
        return;
    out = json_array();
    type = json_string_value(json_object_get(data, "resultType"));
    res = json_object_get(data, "result");
    if (type && strcmp(type, "scalar") == 0) {
        json_t *v = value_of(res, &ms);
        json_array_append_new(out, json_pack("{s:{}, s:o, s:o}", "metric",
                                             "value", v, "timestamp",
                                             prom_proxy_json_ms(ms)));
    } else {
        json_array_foreach(res, i, x) {
            json_t *v = value_of(json_object_get(x, "value"), &ms);
            json_array_append_new(out, json_pack(
                "{s:O, s:o, s:o}", "metric", json_object_get(x, "metric"),
                "value", v, "timestamp", prom_proxy_json_ms(ms)));
        }
    }
    json_decref(data);
    http_reply_raw(r, 200, json_pack("{s:o}", "data", out));
}

/* One matrix series as HAMi-WebUI's: a point per step, missing filled. */
static json_t *stream_json(const json_t *series, int64_t start, int64_t end,
                           int64_t step)
{
    json_t *vals = json_array(), *pts = json_object_get(series, "values");
    size_t n = (size_t)((end - start) / step) + 1, i = 0;
    for (size_t k = 0; k < n; k++) {
        int64_t want = (start + (int64_t)k * step) * 1000, ms = 0;
        json_t *v = NULL;
        while (i < json_array_size(pts)) {
            json_t *cand = value_of(json_array_get(pts, i), &ms);
            if (ms > want) {
                json_decref(cand);
                break;
            }
            i++;
            if (ms == want) {
                v = cand;
                break;
            }
            json_decref(cand);
        }
        json_array_append_new(vals, json_pack(
            "{s:o, s:o, s:b}", "value", v ? v : json_integer(0), "timestamp",
            prom_proxy_json_ms(want), "missing", v == NULL));
    }
    return json_pack("{s:O, s:o}", "metric", json_object_get(series, "metric"),
                     "values", vals);
}

void prom_proxy_range(struct http_req *r, const char *q, int64_t start,
                      int64_t end, int64_t step)
{
    char *e = escape(q);
    json_t *data = prom_get(r, "/api/v1/query_range",
                            xasprintf("query=%s&start=%lld&end=%lld&step=%lld",
                                      e, (long long)start, (long long)end,
                                      (long long)step));
    json_t *out, *x;
    size_t i;
    free(e);
    if (data == NULL)
        return;
    out = json_array();
    json_array_foreach(json_object_get(data, "result"), i, x)
        json_array_append_new(out, stream_json(x, start, end, step));
    json_decref(data);
    http_reply_raw(r, 200, json_pack("{s:o}", "data", out));
}
