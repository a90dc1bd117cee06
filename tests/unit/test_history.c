/* SPDX-License-Identifier: MIT */
/*
 * test_history.c: the metric history's rings (nulls, wrap-around, series
 * that come and go, the series cap), its file (round trip, a smaller ring,
 * a corrupt file set aside) and its readers.
 */
#include "common/accel_setup.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "daemon/node/history/history.h"

#define GIB (1024.0 * 1024 * 1024)

static struct history *mk(int interval, int retention, const char *path)
{
    struct history *h = NULL;
    char *warn = NULL;
    ASSERT_EQ(history_new(&h, interval, retention, path, &warn), ACCEL_OK);
    ASSERT(warn == NULL);
    return h;
}

static struct history_dev_sample dev(const char *id, double util, double used)
{
    return (struct history_dev_sample){
        .id = id, .node = "n1", .model = "RTX", .driver = "550", .index = 0,
        .util = util, .mem_used = used, .mem_total = 24 * GIB,
        .power = 123.4, .temp = -1};
}

static int64_t tmp_counter;

static char *tmp_path(void)
{
    char *p = NULL;
    if (asprintf(&p, "%s/history-%d-%lld.bin", harness_tmp(), (int)getpid(),
                 (long long)++tmp_counter) < 0)
        abort();
    unlink(p);
    return p;
}

static void rm(const char *p)
{
    char buf[512];
    unlink(p);
    snprintf(buf, sizeof buf, "%s.corrupt", p);
    unlink(buf);
    snprintf(buf, sizeof buf, "%s.tmp", p);
    unlink(buf);
}

TEST(history_values_and_nulls)
{
    struct history *h = mk(15, 3600, NULL);
    struct history_dev_sample d = dev("GPU-a", 37, 2 * GIB);
    struct history_bind_sample b = {"app", "alice", "GPU-a", "n1", GIB,
                                    4 * GIB, 0, 25};
    struct history_meta m;

    ASSERT_EQ(history_capacity(h), 240);
    ASSERT_EQ(history_record(h, 1000, &d, 1, &b, 1), 0);
    d.util = -1; /* not measured */
    ASSERT_EQ(history_record(h, 1015, &d, 1, NULL, 0), 0);
    ASSERT_EQ(history_record(h, 1015, &d, 1, NULL, 0), 0); /* not after */
    history_lock(h);
    ASSERT_EQ(history_nsamples(h), 2);
    ASSERT_EQ(history_nseries(h), 2);
    ASSERT_EQ(history_time(h, 0), 1000);
    ASSERT_EQ(history_time(h, 1), 1015);
    history_meta(h, 0, &m);
    ASSERT_EQ(m.kind, HISTORY_DEVICE);
    ASSERT_STR_EQ(m.device, "GPU-a");
    ASSERT_STR_EQ(m.driver, "550");
    ASSERT(history_value(h, 0, HF_UTIL, 0) == 37);
    ASSERT(isnan(history_value(h, 0, HF_UTIL, 1)));
    ASSERT(history_value(h, 0, HF_MEM_USED, 1) == 2 * GIB);
    ASSERT(fabs(history_value(h, 0, HF_POWER, 0) - 123.4) < 0.05);
    ASSERT(isnan(history_value(h, 0, HF_TEMP, 0)));
    history_meta(h, 1, &m);
    ASSERT_EQ(m.kind, HISTORY_BINDING);
    ASSERT_STR_EQ(m.app, "app");
    ASSERT_STR_EQ(m.owner, "alice");
    ASSERT(history_value(h, 1, HF_B_ALLOC, 0) == 4 * GIB);
    ASSERT(history_value(h, 1, HF_B_UTIL, 0) == 25);
    ASSERT(isnan(history_value(h, 1, HF_B_USED, 1))); /* not recorded */
    ASSERT(history_mean(h, 0, HF_MEM_USED, 0, 2) == 2 * GIB);
    ASSERT(history_mean(h, 0, HF_UTIL, 0, 2) == 37);
    ASSERT(isnan(history_mean(h, 0, HF_TEMP, 0, 2)));
    ASSERT_EQ(history_find(h, 1001), 1);
    ASSERT_EQ(history_find(h, 999), 0);
    ASSERT_EQ(history_find(h, 2000), 2);
    history_unlock(h);
    history_free(h);
}

/* The ring wraps: the oldest samples go, a series not measured for a whole
 * ring goes, and values stay at their times. */
TEST(history_wraps_and_drops)
{
    struct history *h = mk(1, 10, NULL);
    struct history_dev_sample ab[2] = {dev("GPU-a", 0, 0), dev("GPU-b", 5, 0)};
    for (int t = 1; t <= 25; t++) {
        ab[0].util = t;
        history_record(h, 100 + t, ab, t <= 3 ? 2 : 1, NULL, 0);
        history_record(h, 0, ab, 2, NULL, 0); /* ignored: t = 0 */
    }
    history_lock(h);
    ASSERT_EQ(history_nsamples(h), 10);
    ASSERT_EQ(history_nseries(h), 1); /* GPU-b not measured since: gone */
    ASSERT_EQ(history_time(h, 0), 116);
    ASSERT_EQ(history_time(h, 9), 125);
    for (size_t j = 0; j < 10; j++)
        ASSERT(history_value(h, 0, HF_UTIL, j) == 16 + (double)j);
    history_unlock(h);
    history_free(h);
}

TEST(history_series_come_and_go)
{
    struct history *h = mk(1, 5, NULL);
    struct history_dev_sample a = dev("GPU-a", 1, 0), b = dev("GPU-b", 2, 0);
    struct history_dev_sample both[2] = {a, b};
    history_record(h, 1, both, 2, NULL, 0);
    for (int t = 2; t <= 5; t++)
        history_record(h, t, &a, 1, NULL, 0);
    history_lock(h);
    ASSERT_EQ(history_nseries(h), 2); /* b's value at t=1 still held */
    history_unlock(h);
    history_record(h, 6, &a, 1, NULL, 0);
    history_lock(h);
    ASSERT_EQ(history_nseries(h), 1); /* t=1 left the ring */
    history_unlock(h);
    history_record(h, 7, both, 2, NULL, 0); /* b again: a new series */
    history_lock(h);
    ASSERT_EQ(history_nseries(h), 2);
    ASSERT(isnan(history_value(h, 1, HF_UTIL, 0)));
    ASSERT(history_value(h, 1, HF_UTIL, 4) == 2);
    history_unlock(h);
    history_free(h);
}

TEST(history_save_and_load)
{
    char *path = tmp_path();
    struct history *h = mk(15, 86400, path);
    struct history_dev_sample d = dev("GPU-a", 0, GIB);
    struct history_bind_sample b = {"app", "bob", "GPU-a", "n1", 3 * GIB,
                                    4 * GIB, 100, -1};
    char *cause = NULL;
    struct history_meta m;

    for (int t = 0; t < 100; t++) {
        d.util = t % 101;
        history_record(h, 1000 + 15 * t, &d, 1, t % 2 ? &b : NULL, t % 2);
    }
    ASSERT_EQ(history_save(h, &cause), ACCEL_OK);
    history_free(h);
    h = mk(15, 86400, path); /* restart */
    history_lock(h);
    ASSERT_EQ(history_nsamples(h), 100);
    ASSERT_EQ(history_nseries(h), 2);
    ASSERT_EQ(history_time(h, 99), 1000 + 15 * 99);
    ASSERT(history_value(h, 0, HF_UTIL, 42) == 42);
    history_meta(h, 1, &m);
    ASSERT_STR_EQ(m.app, "app");
    ASSERT_STR_EQ(m.owner, "bob");
    ASSERT(history_value(h, 1, HF_B_USED, 1) == 3 * GIB);
    ASSERT(isnan(history_value(h, 1, HF_B_USED, 2)));
    ASSERT(history_value(h, 1, HF_B_CORES, 3) == 100);
    history_unlock(h);
    /* recording goes on after the loaded samples */
    history_record(h, 1000 + 15 * 100, &d, 1, NULL, 0);
    history_lock(h);
    ASSERT_EQ(history_nsamples(h), 101);
    history_unlock(h);
    history_free(h);
    /* a smaller ring keeps the newest samples */
    h = mk(15, 15 * 10, path);
    history_lock(h);
    ASSERT_EQ(history_nsamples(h), 10);
    ASSERT_EQ(history_time(h, 0), 1000 + 15 * 90);
    ASSERT(history_value(h, 0, HF_UTIL, 0) == 90);
    history_unlock(h);
    history_free(h);
    rm(path);
    free(path);
}

/* A file that does not decode is set aside with a warning, not loaded. */
TEST(history_corrupt_file)
{
    char *path = tmp_path(), *aside = NULL, *warn = NULL;
    struct history *h = mk(1, 100, path);
    struct history_dev_sample d = dev("GPU-a", 5, GIB);
    struct stat st;
    FILE *f;

    history_record(h, 10, &d, 1, NULL, 0);
    ASSERT_EQ(history_save(h, NULL), ACCEL_OK);
    history_free(h);
    f = fopen(path, "r+b"); /* flip one byte in the middle */
    ASSERT(f != NULL);
    fseek(f, 30, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    h = NULL;
    ASSERT_EQ(history_new(&h, 1, 100, path, &warn), ACCEL_OK);
    ASSERT(warn != NULL);
    ASSERT(strstr(warn, "does not decode") != NULL);
    history_lock(h);
    ASSERT_EQ(history_nsamples(h), 0);
    history_unlock(h);
    if (asprintf(&aside, "%s.corrupt", path) < 0)
        abort();
    ASSERT_EQ(stat(aside, &st), 0);
    free(aside);
    free(warn);
    history_free(h);
    rm(path);
    free(path);
}

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void put(unsigned char *buf, size_t *len, const void *v, size_t n)
{
    memcpy(buf + *len, v, n);
    *len += n;
}

static void put_str(unsigned char *buf, size_t *len, const char *s)
{
    uint16_t l = (uint16_t)strlen(s);
    put(buf, len, &l, 2);
    put(buf, len, s, l);
}

/* A version 1 file (bindings without utilization), as acceld wrote it
 * before: read, the utilization null. */
TEST(history_reads_version_1)
{
    char *path = tmp_path();
    unsigned char buf[512];
    size_t len = 0;
    uint32_t hdr[4] = {1, 15, 2, 1}, ts[2] = {1000, 1015}, used[2] = {
        1024, 2048}, alloc[2] = {4096, 4096};
    uint8_t kind = 1, cores[2] = {0, 0};
    int32_t idx = -1;
    uint64_t sum;
    struct history *h;
    FILE *f;

    put(buf, &len, "ACCELHS1", 8);
    put(buf, &len, hdr, sizeof hdr);
    put(buf, &len, ts, sizeof ts);
    put(buf, &len, &kind, 1);
    put(buf, &len, &idx, 4);
    put_str(buf, &len, "GPU-a");
    put_str(buf, &len, "n1");
    put_str(buf, &len, "");
    put_str(buf, &len, "");
    put_str(buf, &len, "app");
    put_str(buf, &len, "bob");
    put(buf, &len, used, sizeof used);
    put(buf, &len, alloc, sizeof alloc);
    put(buf, &len, cores, sizeof cores);
    sum = fnv(buf, len);
    put(buf, &len, &sum, 8);
    f = fopen(path, "wb");
    ASSERT(f != NULL);
    ASSERT_EQ(fwrite(buf, 1, len, f), len);
    fclose(f);
    h = mk(15, 3600, path);
    history_lock(h);
    ASSERT_EQ(history_nsamples(h), 2);
    ASSERT_EQ(history_nseries(h), 1);
    ASSERT(history_value(h, 0, HF_B_USED, 1) == 2048 * 1024.0);
    ASSERT(isnan(history_value(h, 0, HF_B_UTIL, 1)));
    history_unlock(h);
    history_free(h);
    rm(path);
    free(path);
}

TEST(history_bad_arguments)
{
    struct history *h = NULL;
    ASSERT_EQ(history_new(&h, 0, 100, NULL, NULL), ACCEL_EINVAL);
    ASSERT_EQ(history_new(&h, 10, 5, NULL, NULL), ACCEL_EINVAL);
    ASSERT(h == NULL);
}

/* 24 h at 15 s: 5,760 samples, 12 bytes per device sample. */
TEST(history_cost)
{
    struct history *h = mk(15, 86400, NULL);
    struct history_dev_sample d = dev("GPU-a", 1, 1);
    size_t empty = history_bytes(h), one;
    history_record(h, 1, &d, 1, NULL, 0);
    one = history_bytes(h);
    ASSERT_EQ(history_capacity(h), 5760);
    ASSERT_GE(one - empty, 5760 * 12);
    ASSERT_LT(one - empty, 5760 * 12 + 1024);
    history_free(h);
}

/* The value arrays stay within 16 MiB: at 1 s for a day a device series
 * is 1 MiB, so 16 fit and the others are counted, not recorded. */
TEST(history_budget)
{
    struct history *h = mk(1, 86400, NULL);
    struct history_dev_sample d[20];
    char ids[20][16];
    for (int i = 0; i < 20; i++) {
        snprintf(ids[i], sizeof ids[i], "GPU-%d", i);
        d[i] = dev(ids[i], 1, 1);
    }
    ASSERT_EQ(history_record(h, 1, d, 20, NULL, 0), 4);
    history_lock(h);
    ASSERT_EQ(history_nseries(h), 16);
    history_unlock(h);
    ASSERT_LE(history_bytes(h), (16u << 20) + (1u << 20));
    history_free(h);
}

/* The bound is a setting, and what it keeps out is named: the devices
 * and bindings of the last sample that did not fit (issue 51: never a
 * card dropped in silence); a raise lets them in at the next sample. */
TEST(history_bound_names_what_it_keeps_out)
{
    struct history *h = mk(1, 86400, NULL);
    struct history_dev_sample d[3] = {dev("GPU-a", 1, 1), dev("GPU-b", 1, 1),
                                      dev("GPU-c", 1, 1)};
    struct history_bind_sample b = {"llm", "alice", "GPU-a", "n1", GIB,
                                    4 * GIB, 0, 25};
    const struct history_missed *m;

    ASSERT_EQ(history_max_bytes(h), HISTORY_DEFAULT_MAX_BYTES);
    history_set_max_bytes(h, (size_t)5 << 19); /* 2.5 MiB: two devices */
    ASSERT_EQ(history_record(h, 1, d, 3, &b, 1), 2);
    history_lock(h);
    ASSERT_EQ(history_nseries(h), 2);
    ASSERT_EQ(history_nmissed(h), 2);
    m = history_missed_at(h, 0);
    ASSERT_EQ(m->kind, HISTORY_DEVICE);
    ASSERT_STR_EQ(m->key, "GPU-c");
    m = history_missed_at(h, 1);
    ASSERT_EQ(m->kind, HISTORY_BINDING);
    ASSERT_STR_EQ(m->key, "llm\x1fGPU-a");
    ASSERT(history_missed_at(h, 2) == NULL);
    ASSERT_LE(history_value_bytes(h), (size_t)5 << 19);
    history_unlock(h);
    /* raised: every series at the next sample, nothing named */
    history_set_max_bytes(h, (size_t)8 << 20);
    ASSERT_EQ(history_record(h, 2, d, 3, &b, 1), 0);
    history_lock(h);
    ASSERT_EQ(history_nseries(h), 4);
    ASSERT_EQ(history_nmissed(h), 0);
    history_unlock(h);
    /* lowered below what is kept: nothing already kept goes */
    history_set_max_bytes(h, (size_t)1 << 20);
    ASSERT_EQ(history_record(h, 3, d, 3, &b, 1), 0);
    history_lock(h);
    ASSERT_EQ(history_nseries(h), 4);
    history_unlock(h);
    history_free(h);
}

#define TESTS(XX)                                                              \
    XX(history_values_and_nulls)                                               \
    XX(history_wraps_and_drops)                                                \
    XX(history_series_come_and_go)                                             \
    XX(history_save_and_load)                                                  \
    XX(history_corrupt_file)                                                   \
    XX(history_reads_version_1)                                                \
    XX(history_bad_arguments)                                                  \
    XX(history_cost)                                                           \
    XX(history_budget)                                                         \
    XX(history_bound_names_what_it_keeps_out)

TEST_MAIN(TESTS)
