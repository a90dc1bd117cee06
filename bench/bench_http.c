/* SPDX-License-Identifier: MIT */
/*
 * bench_http.c: a small C load generator for acceld, so that on a 2-core
 * machine the client's own CPU does not decide the figure (the Python
 * driver in bench_api.py spends more per request than acceld does).
 *
 *   bench_http URL TOKEN binds N THREADS FIRST   install N apps over THREADS
 *                                                keep-alive connections,
 *                                                names from FIRST on
 *   bench_http URL TOKEN get N                   N x GET /api/compute-resources
 *
 * binds over several API servers (a cluster, SPEC 10): URL, TOKEN and an
 * optional last argument are comma-separated lists, one item per server
 * (one TOKEN serves all); request k of thread t goes to server (t+k) % n,
 * with that server's token, bound to its NODE/DEV (2 Gi) when given,
 * placed automatically otherwise.
 *
 * Prints one line: ops/s and latency for binds, median and p99 ms for gets.
 */
#include "common/accel_setup.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define MAX_LANES 16

/* One API server and what is sent through it: request k of thread t goes
 * through lane (t + k) % lanes, over that lane's kept-alive connection. */
struct lane {
    const char *url;    /* base URL */
    const char *token;  /* bearer token */
    const char *target; /* "node/device" to bind to, or NULL: placed */
};

struct job {
    const struct lane *lanes;
    int nlanes;
    long first, step, n; /* app numbers first, first+step, ... below n */
    long failed;         /* answers other than 200 with "code":200 */
    double *ms;          /* each request's latency, in order */
    long nms;
};

struct buf {
    char data[4096];
    size_t len;
};

static size_t sink(char *p, size_t size, size_t n, void *ctx)
{
    (void)p;
    *(size_t *)ctx += size * n;
    return size * n;
}

static size_t keep(char *p, size_t size, size_t n, void *ctx)
{
    struct buf *b = ctx;
    size_t take = size * n;
    if (take > sizeof b->data - 1 - b->len)
        take = sizeof b->data - 1 - b->len;
    memcpy(b->data + b->len, p, take);
    b->len += take;
    b->data[b->len] = '\0';
    return size * n;
}

static CURL *client(const char *token, struct curl_slist **hdrs)
{
    CURL *c = curl_easy_init();
    char *auth = xasprintf("Authorization: Bearer %s", token);
    *hdrs = curl_slist_append(NULL, auth);
    *hdrs = curl_slist_append(*hdrs, "Content-Type: application/json");
    free(auth);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    return c;
}

/* The install body of app number i, bound to target when there is one. */
static void bind_body(char *body, size_t len, long i, const char *target)
{
    char bindto[256] = "";
    const char *slash = target ? strchr(target, '/') : NULL;
    if (slash)
        snprintf(bindto, sizeof bindto,
                 ",\"computeBinding\":[{\"nodeName\":\"%.*s\","
                 "\"deviceId\":\"%s\",\"memory\":2147483648}]",
                 (int)(slash - target), target, slash + 1);
    snprintf(body, len,
             "{\"manifest\":{\"metadata\":{\"name\":\"b-%07ld\"},"
             "\"spec\":{\"accelerator\":[{\"mode\":\"nvidia\","
             "\"requiredGPUMemory\":\"2Gi\",\"limitedGPUMemory\":\"2Gi\","
             "\"requiredMemory\":\"256Mi\",\"limitedMemory\":\"256Mi\","
             "\"requiredCpu\":\"100m\",\"limitedCpu\":\"100m\","
             "\"requiredDisk\":\"1Gi\",\"limitedDisk\":\"1Gi\"}]}}%s}",
             i, bindto);
}

static void *bind_worker(void *arg)
{
    struct job *j = arg;
    CURL *c[MAX_LANES];
    struct curl_slist *hdrs[MAX_LANES];
    char *urls[MAX_LANES];
    struct buf got;
    long k = 0;

    for (int l = 0; l < j->nlanes; l++) {
        c[l] = client(j->lanes[l].token, &hdrs[l]);
        urls[l] = xasprintf("%s/api/apps", j->lanes[l].url);
        curl_easy_setopt(c[l], CURLOPT_URL, urls[l]);
        curl_easy_setopt(c[l], CURLOPT_WRITEFUNCTION, keep);
        curl_easy_setopt(c[l], CURLOPT_WRITEDATA, &got);
    }
    for (long i = j->first; i < j->n; i += j->step, k++) {
        int l = (int)((j->first + k) % j->nlanes);
        long code = 0;
        char body[1024];
        uint64_t t0 = util_now_ns();

        bind_body(body, sizeof body, i, j->lanes[l].target);
        got.len = 0;
        got.data[0] = '\0';
        curl_easy_setopt(c[l], CURLOPT_POSTFIELDS, body);
        if (curl_easy_perform(c[l]) != CURLE_OK ||
            curl_easy_getinfo(c[l], CURLINFO_RESPONSE_CODE, &code) !=
                CURLE_OK ||
            code != 200 ||
            (strstr(got.data, "\"code\":200") == NULL &&
             strstr(got.data, "\"code\": 200") == NULL)) {
            if (j->failed++ == 0)
                fprintf(stderr, "bench_http: bind %ld: HTTP %ld %.300s\n", i,
                        code, got.data);
        }
        j->ms[j->nms++] = (double)(util_now_ns() - t0) / 1e6;
    }
    for (int l = 0; l < j->nlanes; l++) {
        free(urls[l]);
        curl_slist_free_all(hdrs[l]);
        curl_easy_cleanup(c[l]);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b);

/* Split s at commas into at most max pieces (s is changed); the count. */
static int split(char *s, char **out, int max)
{
    int n = 0;
    for (char *p = s; p && n < max;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        out[n++] = p;
        p = comma ? comma + 1 : NULL;
    }
    return n;
}

static int binds(char *url, char *token, long n, int threads, long first,
                 char *targets)
{
    pthread_t t[64];
    struct job jobs[64];
    struct lane lanes[MAX_LANES];
    char *u[MAX_LANES], *tok[MAX_LANES], *tg[MAX_LANES];
    int nl, nt, ng = 0;
    long failed = 0, all = 0;
    double *ms;
    uint64_t t0;
    double s;

    if (threads < 1 || threads > 64)
        return 2;
    nl = split(url, u, MAX_LANES);
    nt = split(token, tok, MAX_LANES);
    if (targets)
        ng = split(targets, tg, MAX_LANES);
    if ((nt != 1 && nt != nl) || (targets && ng != nl)) {
        fprintf(stderr, "bench_http: give one token (or one per URL) and "
                        "one target per URL\n");
        return 2;
    }
    for (int l = 0; l < nl; l++)
        lanes[l] =
            (struct lane){ u[l], tok[nt == 1 ? 0 : l], targets ? tg[l] : NULL };
    ms = xcalloc((size_t)n, sizeof(double));
    t0 = util_now_ns();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){ lanes,
                                nl,
                                first + i,
                                threads,
                                first + n,
                                0,
                                xcalloc((size_t)n / (size_t)threads + 1,
                                        sizeof(double)),
                                0 };
        pthread_create(&t[i], NULL, bind_worker, &jobs[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        failed += jobs[i].failed;
        memcpy(ms + all, jobs[i].ms, (size_t)jobs[i].nms * sizeof(double));
        all += jobs[i].nms;
        free(jobs[i].ms);
    }
    s = (double)(util_now_ns() - t0) / 1e9;
    qsort(ms, (size_t)all, sizeof(double), cmp_double);
    printf("binds %ld in %.2f s = %.0f/s with %d connections over %d "
           "servers, %ld failed, p50 %.2f ms p99 %.2f ms\n",
           n, s, (double)n / s, threads, nl, failed, all ? ms[all / 2] : 0.0,
           all ? ms[(all * 99) / 100 >= all ? all - 1 : (all * 99) / 100]
               : 0.0);
    free(ms);
    return failed ? 1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int get_loop(const char *url, const char *token, long n)
{
    struct curl_slist *hdrs;
    size_t got = 0;
    CURL *c = client(token, &hdrs);
    char *u = xasprintf("%s/api/compute-resources", url);
    double *ms = xcalloc((size_t)n, sizeof(double));

    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
    for (long i = 0; i < n; i++) {
        uint64_t t0 = util_now_ns();
        got = 0;
        curl_easy_perform(c);
        ms[i] = (double)(util_now_ns() - t0) / 1e6;
    }
    qsort(ms, (size_t)n, sizeof(double), cmp_double);
    printf("get /api/compute-resources %zu bytes: median %.1f ms, p99 %.1f "
           "ms over %ld\n",
           got, ms[n / 2], ms[(n * 99) / 100 >= n ? n - 1 : (n * 99) / 100], n);
    free(ms);
    free(u);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return 0;
}

static long num(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *s && *end == '\0' && v > 0 ? v : -1;
}

int main(int argc, char **argv)
{
    int rc = 2;
    if (argc < 5) {
        fprintf(stderr, "usage: bench_http URL[,URL...] TOKEN[,TOKEN...] "
                        "binds N THREADS FIRST [NODE/DEV,...] | "
                        "URL TOKEN get N\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (strcmp(argv[3], "binds") == 0 && (argc == 7 || argc == 8) &&
        num(argv[4]) > 0 && num(argv[5]) > 0 && num(argv[6]) > 0)
        rc = binds(argv[1], argv[2], num(argv[4]), (int)num(argv[5]),
                   num(argv[6]), argc == 8 ? argv[7] : NULL);
    else if (strcmp(argv[3], "get") == 0 && num(argv[4]) > 0)
        rc = get_loop(argv[1], argv[2], num(argv[4]));
    curl_global_cleanup();
    return rc;
}
