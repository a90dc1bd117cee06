/* SPDX-License-Identifier: MIT */
/*
 * test_promql.c: the PromQL subset (promql.h): every query the Olares
 * Dashboard and olares-cli send (tests/data/monitor_queries.txt) parses and
 * gives the value a Prometheus would over the same series; the parts not
 * understood are refused with a sentence naming them; arithmetic,
 * aggregation and matching semantics.
 */
#include "common/accel_setup.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "daemon/api/promql.h"

/* Two GPUs and two containers, as HAMi's exporters would publish them. */
static bool fetch(void *ctx, const char *metric, int64_t t,
                  struct promql_value *out)
{
    static const struct {
        const char *metric, *dev, *app, *owner;
        double v;
    } rows[] = {
        {"hami_core_size", "GPU-a", NULL, NULL, 100},
        {"hami_core_size", "GPU-b", NULL, NULL, 100},
        {"hami_memory_size", "GPU-a", NULL, NULL, 24576},
        {"hami_memory_size", "GPU-b", NULL, NULL, 16384},
        {"hami_memory_used", "GPU-a", NULL, NULL, 1024},
        {"hami_memory_used", "GPU-b", NULL, NULL, 4096},
        {"hami_core_util", "GPU-a", NULL, NULL, 37},
        {"hami_core_util", "GPU-b", NULL, NULL, 10},
        {"hami_core_util_avg", "GPU-a", NULL, NULL, 37},
        {"hami_core_util_avg", "GPU-b", NULL, NULL, 10},
        {"hami_device_power", "GPU-a", NULL, NULL, 123.5},
        {"hami_device_power", "GPU-b", NULL, NULL, 50},
        {"hami_device_temperature", "GPU-a", NULL, NULL, 61},
        {"hami_device_temperature", "GPU-b", NULL, NULL, 40},
        {"hami_container_vcore_allocated", "GPU-a", "comfy", "alice", 100},
        {"hami_container_vcore_allocated", "GPU-b", "llm", "bob", 0},
        {"hami_container_vmemory_allocated", "GPU-a", "comfy", "alice", 24576},
        {"hami_container_vmemory_allocated", "GPU-b", "llm", "bob", 8192},
        {"hami_container_memory_used", "GPU-a", "comfy", "alice", 2048},
        {"hami_container_memory_used", "GPU-b", "llm", "bob", 4096},
        {"hami_container_memory_util", "GPU-a", "comfy", "alice",
         2048.0 / 24576 * 100},
        {"hami_container_memory_util", "GPU-b", "llm", "bob", 50},
        {"hami_container_core_used", "GPU-a", "comfy", "alice", 37},
        {"hami_container_core_util", "GPU-a", "comfy", "alice", 37},
    };
    bool known = false;
    (void)ctx;
    (void)t;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (strcmp(rows[i].metric, metric) != 0)
            continue;
        known = true;
        if (rows[i].app == NULL) {
            const char *kv[] = {"deviceuuid", rows[i].dev, "instance", "n1",
                                "node", "n1", "device_no", "nvidia0",
                                "driver_version", "550"};
            promql_add(out, kv, 5, rows[i].v);
        } else {
            const char *kv[] = {"deviceuuid", rows[i].dev, "instance", "n1",
                                "container_name", rows[i].app, "pod_name",
                                rows[i].app, "namespace_name", rows[i].owner};
            promql_add(out, kv, 5, rows[i].v);
        }
    }
    return known;
}

/* The value each client query gives over those series. */
static const struct {
    const char *key;
    double want;
} expected[] = {
    {"alloc_core", 100}, {"alloc_core_total", 100}, {"alloc_core_pct", 100},
    {"alloc_mem", 24}, {"alloc_mem_total", 24}, {"alloc_mem_pct", 100},
    {"util_core", 37}, {"util_core_pct", 37}, {"util_mem", 1},
    {"util_mem_total", 24}, {"util_mem_pct", 100.0 / 24},
    {"power", 123.5}, {"temperature", 61},
    {"core_used", 37}, {"core_alloc", 100}, {"core_pct", 37},
    {"mem_used", 2}, {"mem_alloc", 24}, {"mem_pct", 2.0 / 24 * 100},
    {"core_trend", 37}, {"mem_trend", 2048.0 / 24576 * 100},
    {"vram_usage", 2}, {"vram_alloc", 24}, {"compute_trend", 37},
    {"vram_trend", 2048.0 / 24576 * 100},
};

static char *substitute(const char *q)
{
    static const char *const from[] = {"$deviceuuid", "$container", "$pod",
                                       "$namespace"};
    static const char *const to[] = {"GPU-a", "comfy", "comfy", "alice"};
    char *out = malloc(strlen(q) * 2 + 64), *o = out;
    while (*q) {
        size_t i;
        for (i = 0; i < 4; i++)
            if (strncmp(q, from[i], strlen(from[i])) == 0)
                break;
        if (i < 4) {
            memcpy(o, to[i], strlen(to[i]));
            o += strlen(to[i]);
            q += strlen(from[i]);
        } else {
            *o++ = *q++;
        }
    }
    *o = '\0';
    return out;
}

static double eval1(const char *q, size_t *n, struct promql_labels *labels)
{
    struct promql_query *pq = NULL;
    struct promql_value v = {0};
    char *cause = NULL;
    double r;
    if (promql_parse(q, &pq, &cause) != ACCEL_OK)
        FAIL_AT_("parse %s: %s", q, cause);
    if (promql_eval(pq, 1000, fetch, NULL, &v, &cause) != ACCEL_OK)
        FAIL_AT_("eval %s: %s", q, cause);
    *n = v.scalar ? 1 : v.n;
    r = v.scalar ? v.v : v.n ? v.s[0].v : NAN;
    if (labels && !v.scalar && v.n) {
        labels->n = v.s[0].l.n;
        for (size_t i = 0; i < labels->n; i++) {
            labels->k[i] = strdup(v.s[0].l.k[i]);
            labels->v[i] = strdup(v.s[0].l.v[i]);
        }
    }
    promql_value_release(&v);
    promql_free(pq);
    return r;
}

TEST(promql_client_queries)
{
    char path[512], line[2048];
    FILE *f;
    size_t count = 0;
    snprintf(path, sizeof path, "%s/monitor_queries.txt", ACCEL_TEST_DATA_DIR);
    f = fopen(path, "r");
    ASSERT(f != NULL);
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t'), *key, *q;
        size_t n = 0, k;
        double got;
        if (line[0] == '#' || tab == NULL)
            continue;
        *tab = '\0';
        line[strcspn(tab + 1, "\n") + (size_t)(tab + 1 - line)] = '\0';
        key = strchr(line, ':') + 1;
        q = substitute(tab + 1);
        got = eval1(q, &n, NULL);
        for (k = 0; k < sizeof expected / sizeof expected[0]; k++)
            if (strcmp(expected[k].key, key) == 0)
                break;
        if (k == sizeof expected / sizeof expected[0])
            FAIL_AT_("no expected value for %s", key);
        if (n != 1 || fabs(got - expected[k].want) > 1e-9)
            FAIL_AT_("%s: %zu samples, value %g, want %g (%s)", line, n, got,
                     expected[k].want, q);
        free(q);
        count++;
    }
    fclose(f);
    ASSERT_GE(count, 29);
}

/* avg by (device_no, driver_version) keeps exactly those labels: the page
 * reads them for the GPU's details. */
TEST(promql_by_labels)
{
    struct promql_labels l = {0};
    size_t n = 0;
    double v = eval1("avg by (device_no,driver_version) (hami_device_power)",
                     &n, &l);
    ASSERT_EQ(n, 1);
    ASSERT(fabs(v - (123.5 + 50) / 2) < 1e-9);
    ASSERT_EQ(l.n, 2);
    ASSERT_STR_EQ(l.k[0], "device_no");
    ASSERT_STR_EQ(l.v[0], "nvidia0");
    ASSERT_STR_EQ(l.k[1], "driver_version");
    ASSERT_STR_EQ(l.v[1], "550");
}

TEST(promql_semantics)
{
    size_t n = 0;
    ASSERT(eval1("1 + 2 * 3", &n, NULL) == 7);
    ASSERT(eval1("(1 + 2) * 3", &n, NULL) == 9);
    ASSERT(eval1("-2 - -3", &n, NULL) == 1);
    ASSERT(eval1("((((((((((1))))))))))", &n, NULL) == 1);
    ASSERT(eval1("sum(hami_memory_size)", &n, NULL) == 24576 + 16384);
    ASSERT(eval1("max(hami_core_util)", &n, NULL) == 37);
    ASSERT(eval1("min(hami_core_util)", &n, NULL) == 10);
    ASSERT(eval1("count(hami_core_util)", &n, NULL) == 2);
    ASSERT(eval1("sum(hami_core_util) by (deviceuuid)", &n, NULL) == 37);
    ASSERT_EQ(n, 2);
    ASSERT(eval1("topk(1, hami_core_util)", &n, NULL) == 37);
    ASSERT_EQ(n, 1);
    ASSERT(eval1("bottomk(1, hami_core_util)", &n, NULL) == 10);
    eval1("topk(3, hami_core_util{node=\"none\"})", &n, NULL);
    ASSERT_EQ(n, 0); /* over nothing (UBSan: qsort of NULL) */
    eval1("topk(1e300, hami_core_util)", &n, NULL);
    ASSERT_EQ(n, 2);
    ASSERT(eval1("hami_core_util{deviceuuid!=\"GPU-a\"}", &n, NULL) == 10);
    ASSERT(eval1("hami_core_util{deviceuuid!~\"GPU-.\"}", &n, NULL) != 1);
    ASSERT_EQ(n, 0);
    ASSERT(eval1("hami_core_util{deviceuuid=~\"GPU\"}", &n, NULL) != 1);
    ASSERT_EQ(n, 0); /* regexes are anchored */
    ASSERT(eval1("hami_core_util{deviceuuid=~'GPU-a|GPU-b',}", &n, NULL) > 0);
    /* a few repeats, as the clients and people write them, still work */
    ASSERT(eval1("hami_core_util{deviceuuid=~\"GPU-.*\"}", &n, NULL) > 0);
    ASSERT(eval1("hami_core_util{deviceuuid=~\"GPU-[a-z]+\"}", &n, NULL) >
           0);
    ASSERT_EQ(n, 2);
    /* vector / vector on equal label sets; x / 0 is +Inf as in PromQL */
    ASSERT(eval1("hami_memory_used / hami_memory_size * 100", &n, NULL) ==
           1024.0 / 24576 * 100);
    ASSERT_EQ(n, 2);
    ASSERT(isinf(eval1("hami_core_util / 0", &n, NULL)));
    eval1("hami_core_util / hami_container_memory_used", &n, NULL);
    ASSERT_EQ(n, 0); /* label sets differ: no match */
}

/* clamp_min(vector, number), which HAMi-WebUI's task page divides by, and
 * the nestings of count and topk its overview sends. */
TEST(promql_clamp_min_and_counts)
{
    size_t n = 0;
    ASSERT(eval1("clamp_min(hami_core_util{deviceuuid=\"GPU-b\"}, 20)", &n,
                 NULL) == 20);
    ASSERT_EQ(n, 1);
    ASSERT(eval1("clamp_min(hami_core_util{deviceuuid=\"GPU-a\"}, 20)", &n,
                 NULL) == 37);
    ASSERT(eval1("clamp_min(hami_core_util{deviceuuid=\"GPU-a\"}, 2 * 50)",
                 &n, NULL) == 100);
    eval1("sum(hami_container_vmemory_allocated) / clamp_min("
          "sum(hami_container_vcore_allocated{node=\"none\"}), 1)", &n,
          NULL); /* nothing to divide by: no sample */
    ASSERT_EQ(n, 0);
    ASSERT(eval1("sum(hami_container_vmemory_allocated) / clamp_min(sum("
                 "hami_container_vcore_allocated{container_name=\"llm\"}), "
                 "1) / 1024", &n, NULL) == (24576.0 + 8192) / 1024);
    ASSERT(isnan(eval1("clamp_min(hami_core_util / 0 - hami_core_util / 0, "
                       "1)", &n, NULL))); /* NaN stays NaN */
    ASSERT(eval1("count(count by (instance, container_name) "
                 "(hami_container_vcore_allocated)) by (instance)", &n,
                 NULL) == 2);
    ASSERT_EQ(n, 1);
    ASSERT(eval1("topk(5, sum(hami_memory_used) by (deviceuuid) / "
                 "sum(hami_memory_size) by (deviceuuid) * 100)", &n, NULL) ==
           4096.0 / 16384 * 100);
    ASSERT_EQ(n, 2);
}

static void refused(const char *q, const char *part)
{
    struct promql_query *pq = NULL;
    struct promql_value v = {0};
    char *cause = NULL;
    if (promql_parse(q, &pq, &cause) == ACCEL_OK) {
        ASSERT_EQ(promql_eval(pq, 1, fetch, NULL, &v, &cause), ACCEL_EINVAL);
        promql_value_release(&v);
        promql_free(pq);
    }
    ASSERT(cause != NULL);
    if (strstr(cause, part) == NULL)
        FAIL_AT_("%s: \"%s\" lacks \"%s\"", q, cause, part);
    free(cause);
}

TEST(promql_refusals)
{
    refused("rate(hami_core_util[5m])", "functions are not supported");
    refused("clamp_max(hami_core_util, 1)", "functions are not supported");
    refused("clamp_min(hami_core_util)", "clamp_min(<vector>, <number>)");
    refused("clamp_min(hami_core_util, 1", "expected ) after clamp_min");
    refused("clamp_min(1, 1)", "clamp_min needs a vector");
    refused("clamp_min(hami_core_util, hami_core_util)",
            "clamp_min needs a number");
    refused("hami_core_util[5m]", "range selectors are not supported");
    refused("hami_core_util offset 5m", "offset is not supported");
    refused("hami_core_util > 1", "comparisons are not supported");
    refused("sum without (node) (hami_core_util)", "without");
    refused("hami_core_util{node=\"a\"", "expected");
    refused("hami_core_util{node=~\"(\"}", "regular expression");
    /* stacked or nested repeats: glibc's regcomp copies what each repeats,
     * and 40 pluses made it allocate gigabytes (a fuzzer's find) */
    refused("hami_core_util{node=~\"p++++++++++++++++++++++++++++++++++++++++\"}",
            "repeats too much");
    refused("hami_core_util{node=~\"((((a{100}){100}){100}){100})\"}",
            "repeats too much");
    refused("hami_core_util{node=~\"a{999999999999}\"}", "repeats too much");
    refused("hami_core_util{node=a}", "quoted string");
    refused("sum(hami_core_util", "expected )");
    refused("", "expected a number");
    refused("hami_nope", "hami_nope is not one accel keeps");
    refused("sum(1)", "needs a vector");
    refused("avg(sum(hami_core_util) by (instance)) )", "offset 39");
    refused("-", "expected");
    /* hostile sizes: bounded recursion, bounded trees */
    {
        size_t n = 200000;
        char *q = malloc(2 * n + 2);
        for (size_t i = 0; i < n; i++)
            q[i] = '(';
        q[n] = '\0';
        refused(q, "nested too deep");
        memset(q, '-', n);
        q[n] = '1';
        q[n + 1] = '\0';
        refused(q, "nested too deep");
        for (size_t i = 0; i < n; i++) {
            q[2 * i] = '1';
            q[2 * i + 1] = '+';
        }
        q[2 * n - 1] = '\0';
        refused(q, "too long");
        free(q);
    }
}

#define TESTS(XX)                                                              \
    XX(promql_client_queries)                                                  \
    XX(promql_by_labels)                                                       \
    XX(promql_semantics)                                                       \
    XX(promql_clamp_min_and_counts)                                            \
    XX(promql_refusals)

TEST_MAIN(TESTS)
