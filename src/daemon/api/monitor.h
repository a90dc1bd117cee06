/* SPDX-License-Identifier: MIT */
/*
 * monitor.h: the HAMi metrics (the names HAMi's exporters publish and the
 * Olares Dashboard, olares-cli and HAMi-WebUI query) for the PromQL
 * evaluator (promql.h): capacity, allocation and limits as facts of the
 * state (struct monitor_facts), measurements as series read out of accel's
 * metric history. Device metrics carry the labels node, provider,
 * device_type, device_uuid, driver_version, device_no (and deviceuuid,
 * devicetype, instance); container metrics (one app on one device) carry
 * container_name and pod_name (the app), namespace_name (its owner),
 * container_pod_uuid, node, provider, device_type, device_uuid (and
 * deviceuuid, instance: one value, "accel", for every series of the
 * cluster, as upstream's one exporter). The mapping is in docs/compat.md.
 */
#ifndef ACCEL_DAEMON_API_MONITOR_H
#define ACCEL_DAEMON_API_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/api/promql.h"

#include "daemon/node/history/history.h"

/* Every series' `instance`: one value for the whole cluster. Upstream's one
 * exporter gives all its series one instance, and HAMi-WebUI's overview
 * tiles are avg(sum(X) by (instance)), the cluster's total only then; an
 * instance per node made them the average of the nodes' totals (half of a
 * two-node cluster). Nodes and cards are told apart by node, device_uuid. */
#define MONITOR_INSTANCE "accel"

#define MONITOR_LOOKBACK 300 /* seconds: PromQL's default staleness */

/*
 * The facts accel holds rather than measures (capacity and allocation), for
 * every device of every node, read out of the state at the query's start
 * (api_hami_facts) and answered at every step of a query as they are now.
 * v[i] holds the series of monitor_fact_names()[i], with the labels of
 * HAMi-WebUI's exporter; the hami_core_size samples also give the labels
 * of the measured series of their device, the hami_container_vgpu_allocated
 * ones those of the measured series of their container.
 */
enum monitor_fact {
    MF_CORE_SIZE,        /* hami_core_size: 100 per GPU */
    MF_MEMORY_SIZE,      /* hami_memory_size: memory, MiB */
    MF_VGPU_COUNT,       /* hami_vgpu_count: vgpuTotal (1 or 10) */
    MF_C_VGPU,           /* hami_container_vgpu_allocated: 1 per row */
    MF_C_VCORE,          /* hami_container_vcore_allocated: 100 or 0 */
    MF_C_VMEMORY,        /* hami_container_vmemory_allocated: MiB */
    MF_NODE_ALLOCATABLE, /* kube_node_status_allocatable: cores, bytes */
    MF_POD_LIMITS,       /* kube_pod_container_resource_limits */
    MF_COUNT
};

struct monitor_facts {
    struct promql_value v[MF_COUNT];
    /* per sample of v[i], the unix second from which it exists (an app's
     * series: the app's creation), 0 for always: a range query's earlier
     * steps have no point of it, so a trend does not draw today's
     * allocation back over the time before the app existed */
    int64_t *since[MF_COUNT];
    size_t since_cap[MF_COUNT];
};

/* Add a sample to f->v[which] (promql_add) that exists from `since`. */
void monitor_fact_add(struct monitor_facts *f, enum monitor_fact which,
                      const char *const *kv, size_t nkv, double v,
                      int64_t since);

/* Their metric names, by enum monitor_fact (static). */
const char *monitor_fact_name(enum monitor_fact f);

void monitor_facts_release(struct monitor_facts *f);

/* The source context: a history locked by the caller, the facts, and who
 * asks. */
struct monitor_ctx {
    struct history *h;     /* locked (history_lock) while queries run */
    const char *user;      /* the asking user's name */
    bool admin;            /* sees every app */
    const struct monitor_facts *facts; /* or NULL: no fact metric known */
};

/*
 * promql_fetch_fn over the history: every series of metric with a value
 * in (t - MONITOR_LOOKBACK, t]. false for a metric it does not know.
 */
bool monitor_fetch(void *ctx, const char *metric, int64_t t,
                   struct promql_value *out);

/* The metric names monitor_fetch knows, NULL-terminated (static). */
const char *const *monitor_metrics(void);

#endif /* ACCEL_DAEMON_API_MONITOR_H */
