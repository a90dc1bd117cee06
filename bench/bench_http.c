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
 * Prints one line: ops/s for binds, median and p99 ms for gets.
 */
#include "common/accel_setup.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct job {
    const char *url;      /* base URL */
    const char *token;    /* bearer token */
    long first, step, n;  /* app numbers first, first+step, ... below n */
    long failed;          /* answers other than 200 */
};

static size_t sink(char *p, size_t size, size_t n, void *ctx)
{
    (void)p;
    *(size_t *)ctx += size * n;
    return size * n;
}

static CURL *client(const char *token, struct curl_slist **hdrs, size_t *got)
{
    CURL *c = curl_easy_init();
    char *auth = xasprintf("Authorization: Bearer %s", token);
    *hdrs = curl_slist_append(NULL, auth);
    *hdrs = curl_slist_append(*hdrs, "Content-Type: application/json");
    free(auth);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, got);
    return c;
}

static void *bind_worker(void *arg)
{
    struct job *j = arg;
    struct curl_slist *hdrs;
    size_t got = 0;
    CURL *c = client(j->token, &hdrs, &got);
    char *url = xasprintf("%s/api/apps", j->url);

    curl_easy_setopt(c, CURLOPT_URL, url);
    for (long i = j->first; i < j->n; i += j->step) {
        long code = 0;
        char body[512];
        snprintf(body, sizeof body,
                 "{\"manifest\":{\"metadata\":{\"name\":\"b-%07ld\"},"
                 "\"spec\":{\"accelerator\":[{\"mode\":\"nvidia\","
                 "\"requiredGPUMemory\":\"2Gi\",\"limitedGPUMemory\":\"2Gi\","
                 "\"requiredMemory\":\"256Mi\",\"limitedMemory\":\"256Mi\","
                 "\"requiredCpu\":\"100m\",\"limitedCpu\":\"100m\","
                 "\"requiredDisk\":\"1Gi\",\"limitedDisk\":\"1Gi\"}]}}}",
                 i);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        if (curl_easy_perform(c) != CURLE_OK ||
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK ||
            code != 200)
            j->failed++;
    }
    free(url);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return NULL;
}

static int binds(const char *url, const char *token, long n, int threads,
                 long first)
{
    pthread_t t[64];
    struct job jobs[64];
    long failed = 0;
    uint64_t t0;
    double s;

    if (threads < 1 || threads > 64)
        return 2;
    t0 = util_now_ns();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){url, token, first + i, threads, first + n, 0};
        pthread_create(&t[i], NULL, bind_worker, &jobs[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        failed += jobs[i].failed;
    }
    s = (double)(util_now_ns() - t0) / 1e9;
    printf("binds %ld in %.2f s = %.0f/s with %d connections, %ld failed\n",
           n, s, (double)n / s, threads, failed);
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
    CURL *c = client(token, &hdrs, &got);
    char *u = xasprintf("%s/api/compute-resources", url);
    double *ms = xcalloc((size_t)n, sizeof(double));

    curl_easy_setopt(c, CURLOPT_URL, u);
    for (long i = 0; i < n; i++) {
        uint64_t t0 = util_now_ns();
        got = 0;
        curl_easy_perform(c);
        ms[i] = (double)(util_now_ns() - t0) / 1e6;
    }
    qsort(ms, (size_t)n, sizeof(double), cmp_double);
    printf("get /api/compute-resources %zu bytes: median %.1f ms, p99 %.1f "
           "ms over %ld\n",
           got, ms[n / 2], ms[(n * 99) / 100 >= n ? n - 1 : (n * 99) / 100],
           n);
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
        fprintf(stderr, "usage: bench_http URL TOKEN binds N THREADS FIRST | "
                        "get N\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (strcmp(argv[3], "binds") == 0 && argc == 7 && num(argv[4]) > 0 &&
        num(argv[5]) > 0 && num(argv[6]) > 0)
        rc = binds(argv[1], argv[2], num(argv[4]), (int)num(argv[5]),
                   num(argv[6]));
    else if (strcmp(argv[3], "get") == 0 && num(argv[4]) > 0)
        rc = get_loop(argv[1], argv[2], num(argv[4]));
    curl_global_cleanup();
    return rc;
}
