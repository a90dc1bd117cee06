/* SPDX-License-Identifier: MIT */
/*
 * monitor.c: HAMi's metric names over accel's history and facts
 * (monitor.h). The facts (capacity, allocation, limits) are answered as the
 * state holds them; each measured metric is a kind of series, a formula over that series' fields at one
 * sample (MiB, percent, watts, degrees C, as HAMi's exporters publish
 * them), and the newest sample within the lookback where the formula has
 * a value is the series' value at t, as a PromQL instant selector sees it.
 */
#include "common/accel_setup.h"
#include "daemon/api/monitor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "common/util.h"

#define MIB (1024.0 * 1024.0)

enum formula {
    F_MEM_USED,    /* memory used, MiB */
    F_MEM_UTIL,    /* used / total, percent */
    F_UTIL,        /* utilization, percent */
    F_POWER,       /* watts */
    F_TEMP,        /* degrees C */
    F_C_USED,      /* container: memory used, MiB */
    F_C_MEM_UTIL,  /* container: used / allocated, percent */
    F_C_CORE_USED  /* container: its processes' SM utilization (NVML per
                      process), else the device's utilization when it is
                      the only binding there, else no value */
};

struct metric {
    const char *name;      /* HAMi metric */
    enum history_kind kind;
    enum formula f;
};

static const char *const fact_names[MF_COUNT] = {
    "hami_core_size", "hami_memory_size", "hami_vgpu_count",
    "hami_container_vgpu_allocated", "hami_container_vcore_allocated",
    "hami_container_vmemory_allocated", "kube_node_status_allocatable",
    "kube_pod_container_resource_limits"};

const char *monitor_fact_name(enum monitor_fact f)
{
    return fact_names[f];
}

void monitor_facts_release(struct monitor_facts *f)
{
    for (size_t i = 0; i < MF_COUNT; i++) {
        promql_value_release(&f->v[i]);
        free(f->since[i]);
    }
}

void monitor_fact_add(struct monitor_facts *f, enum monitor_fact which,
                      const char *const *kv, size_t nkv, double v,
                      int64_t since)
{
    size_t n = f->v[which].n;
    promql_add(&f->v[which], kv, nkv, v);
    if (n >= f->since_cap[which]) {
        f->since_cap[which] = f->since_cap[which] ? 2 * f->since_cap[which]
                                                  : 16;
        f->since[which] = xrealloc(f->since[which],
                                   f->since_cap[which] * sizeof(int64_t));
    }
    f->since[which][n] = since;
}

/* The measured metrics, read from the history. */
static const struct metric metrics[] = {
    {"hami_memory_used", HISTORY_DEVICE, F_MEM_USED},
    {"hami_memory_util", HISTORY_DEVICE, F_MEM_UTIL},
    {"hami_core_util", HISTORY_DEVICE, F_UTIL},
    {"hami_core_util_avg", HISTORY_DEVICE, F_UTIL},
    {"hami_core_used", HISTORY_DEVICE, F_UTIL},
    {"hami_core_used_avg", HISTORY_DEVICE, F_UTIL},
    {"hami_device_power", HISTORY_DEVICE, F_POWER},
    {"hami_device_temperature", HISTORY_DEVICE, F_TEMP},
    {"hami_container_memory_used", HISTORY_BINDING, F_C_USED},
    {"hami_container_memory_util", HISTORY_BINDING, F_C_MEM_UTIL},
    {"hami_container_core_used", HISTORY_BINDING, F_C_CORE_USED},
    {"hami_container_core_util", HISTORY_BINDING, F_C_CORE_USED},
};

#define NMETRICS (sizeof metrics / sizeof metrics[0])

const char *const *monitor_metrics(void)
{
    static const char *names[MF_COUNT + NMETRICS + 1];
    for (size_t i = 0; i < MF_COUNT; i++)
        names[i] = fact_names[i];
    for (size_t i = 0; i < NMETRICS; i++)
        names[MF_COUNT + i] = metrics[i].name;
    names[MF_COUNT + NMETRICS] = NULL;
    return names;
}

static double ratio(double a, double b)
{
    return isnan(a) || isnan(b) || b <= 0 ? NAN : a / b * 100.0;
}

/* The device series of a device id, or -1. */
static long device_series(const struct history *h, const char *id)
{
    struct history_meta m;
    for (size_t s = 0; s < history_nseries(h); s++) {
        history_meta(h, s, &m);
        if (m.kind == HISTORY_DEVICE && strcmp(m.device, id) == 0)
            return (long)s;
    }
    return -1;
}

/* Bindings holding an allocation on device id at sample j. */
static size_t bindings_at(const struct history *h, const char *id, size_t j)
{
    struct history_meta m;
    size_t n = 0;
    for (size_t s = 0; s < history_nseries(h); s++) {
        history_meta(h, s, &m);
        if (m.kind == HISTORY_BINDING && strcmp(m.device, id) == 0 &&
            !isnan(history_value(h, s, HF_B_ALLOC, j)))
            n++;
    }
    return n;
}

static double core_used(const struct history *h, size_t s, size_t j)
{
    struct history_meta m;
    double own = history_value(h, s, HF_B_UTIL, j);
    long dev;
    if (!isnan(own))
        return own;
    history_meta(h, s, &m);
    if (isnan(history_value(h, s, HF_B_ALLOC, j)) ||
        bindings_at(h, m.device, j) != 1)
        return NAN;
    dev = device_series(h, m.device);
    return dev < 0 ? NAN : history_value(h, (size_t)dev, HF_UTIL, j);
}

/* Formula f of series s at sample j (NAN: no value). */
static double formula(const struct history *h, size_t s, enum formula f,
                      size_t j)
{
    switch (f) {
    case F_MEM_USED: return history_value(h, s, HF_MEM_USED, j) / MIB;
    case F_MEM_UTIL:
        return ratio(history_value(h, s, HF_MEM_USED, j),
                     history_value(h, s, HF_MEM_TOTAL, j));
    case F_UTIL: return history_value(h, s, HF_UTIL, j);
    case F_POWER: return history_value(h, s, HF_POWER, j);
    case F_TEMP: return history_value(h, s, HF_TEMP, j);
    case F_C_USED: return history_value(h, s, HF_B_USED, j) / MIB;
    case F_C_MEM_UTIL:
        return ratio(history_value(h, s, HF_B_USED, j),
                     history_value(h, s, HF_B_ALLOC, j));
    case F_C_CORE_USED: return core_used(h, s, j);
    }
    return NAN;
}

/* Append a sample with label set l (copied). */
static void add_labels(struct promql_value *out, const struct promql_labels *l,
                       double v)
{
    const char *kv[2 * PROMQL_MAX_LABELS];
    for (size_t i = 0; i < l->n; i++) {
        kv[2 * i] = l->k[i];
        kv[2 * i + 1] = l->v[i];
    }
    promql_add(out, kv, l->n, v);
}

static const char *label_of(const struct promql_labels *l, const char *k)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->k[i], k) == 0)
            return l->v[i];
    return "";
}

/* The fact sample of f whose labels k[i] are v[i] (n pairs), or NULL. */
static const struct promql_labels *fact_labels(const struct monitor_ctx *c,
                                               enum monitor_fact f,
                                               const char *const *kv, size_t n)
{
    const struct promql_value *fv;
    if (c->facts == NULL)
        return NULL;
    fv = &c->facts->v[f];
    for (size_t i = 0; i < fv->n; i++) {
        size_t k = 0;
        while (k < n && strcmp(label_of(&fv->s[i].l, kv[2 * k]),
                               kv[2 * k + 1]) == 0)
            k++;
        if (k == n)
            return &fv->s[i].l;
    }
    return NULL;
}

static void add_device(const struct monitor_ctx *c, struct promql_value *out,
                       const struct history_meta *m, double v)
{
    char devno[32];
    const char *key[] = {"device_uuid", m->device};
    const struct promql_labels *l = fact_labels(c, MF_CORE_SIZE, key, 1);
    const char *kv[] = {"deviceuuid", m->device, "device_uuid", m->device,
                        "node", m->node, "instance", MONITOR_INSTANCE,
                        "provider", "NVIDIA", "devicetype", m->model,
                        "device_type", m->model, "device_no", devno,
                        "driver_version", m->driver};
    if (l != NULL) { /* the device as the state knows it */
        add_labels(out, l, v);
        return;
    }
    snprintf(devno, sizeof devno, "nvidia%d", m->index < 0 ? 0 : m->index);
    promql_add(out, kv, sizeof kv / sizeof kv[0] / 2, v);
}

static void add_container(const struct monitor_ctx *c,
                          struct promql_value *out,
                          const struct history_meta *m, double v)
{
    const char *key[] = {"device_uuid", m->device, "container_name", m->app,
                         "namespace_name", m->owner};
    const struct promql_labels *l = fact_labels(c, MF_C_VGPU, key, 3);
    const char *kv[] = {"container_name", m->app, "pod_name", m->app,
                        "namespace_name", m->owner, "deviceuuid", m->device,
                        "device_uuid", m->device, "node", m->node,
                        "instance", MONITOR_INSTANCE, "provider", "NVIDIA"};
    if (l != NULL) {
        add_labels(out, l, v);
        return;
    }
    promql_add(out, kv, sizeof kv / sizeof kv[0] / 2, v);
}

static bool visible(const struct monitor_ctx *c, const struct history_meta *m)
{
    return m->kind == HISTORY_DEVICE || c->admin ||
           strcmp(m->owner, c->user) == 0 ||
           strcmp(m->owner, ACCEL_SHARED_OWNER) == 0;
}

bool monitor_fetch(void *ctx, const char *metric, int64_t t,
                   struct promql_value *out)
{
    const struct monitor_ctx *c = ctx;
    const struct metric *mt = NULL;
    size_t hi, lo;

    for (size_t f = 0; f < MF_COUNT; f++)
        if (strcmp(fact_names[f], metric) == 0) {
            const struct promql_value *fv;
            if (c->facts == NULL)
                return false;
            fv = &c->facts->v[f];
            for (size_t i = 0; i < fv->n; i++)
                if (c->facts->since[f] == NULL || c->facts->since[f][i] <= t)
                    add_labels(out, &fv->s[i].l, fv->s[i].v);
            return true;
        }
    for (size_t i = 0; i < NMETRICS && mt == NULL; i++)
        if (strcmp(metrics[i].name, metric) == 0)
            mt = &metrics[i];
    if (mt == NULL)
        return false;
    hi = history_find(c->h, t + 1);           /* samples at or before t */
    lo = history_find(c->h, t - MONITOR_LOOKBACK + 1);
    for (size_t s = 0; s < history_nseries(c->h); s++) {
        struct history_meta m;
        history_meta(c->h, s, &m);
        if (m.kind != mt->kind || !visible(c, &m))
            continue;
        for (size_t j = hi; j > lo; j--) {
            double v = formula(c->h, s, mt->f, j - 1);
            if (isnan(v))
                continue;
            if (m.kind == HISTORY_DEVICE)
                add_device(c, out, &m, v);
            else
                add_container(c, out, &m, v);
            break;
        }
    }
    return true;
}
