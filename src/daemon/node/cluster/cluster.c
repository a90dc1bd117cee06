/* SPDX-License-Identifier: MIT */
/*
 * cluster.c: the node agent in a cluster (SPEC 10).
 *
 * Three things run here. The registration: nodeinfo/<node> says which
 * devices this node has (and how much of each is in use), agents/<node>
 * lives on a lease that a keep-alive thread renews every third of its
 * TTL; a node whose lease lapses loses that key, and every view then
 * shows it unreachable. The watch: every change another acceld commits
 * reaches this process through store_follow and is applied to memory under
 * d->lock, in the same critical section that moves the store's guard
 * revisions, so a decision never mixes an old view with a new guard. The
 * agent: an app bound to this node's devices that another node resumed
 * (`resuming`, no process here) is started here; one it stopped
 * (`stopping`) is stopped here, and released here once its processes are
 * gone. Nothing is released on another node's behalf.
 */
#include "common/accel_setup.h"
#include "daemon/node/cluster/cluster.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/util.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/cluster/monitor.h"
#include "daemon/node/devices/discovery.h"
#include "daemon/node/devices/hostinfo.h"
#include "daemon/node/devices/nvml.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/runtime/launch.h"
#include "daemon/node/runtime/livequota.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/store/etcd.h"

#define CLUSTER_USAGE_MS 5000  /* nodeinfo is refreshed at most this often */

/* Where an app's cards are, as far as its process goes (where_placed). */
enum placed { PLACED_NONE, PLACED_HERE, PLACED_ACROSS, PLACED_AWAY };

/* An allocation change of the revision being applied. */
struct pending_alloc {
    char *app, *dev;
    uint64_t memory;
    bool deleted;
    bool first;        /* the revision's first row of the app */
    enum placed was;   /* with first: where its cards were before */
};

struct cluster {
    pthread_t keeper, watcher;
    bool keeper_on, watcher_on;
    volatile int stop;
    int64_t lease;
    int64_t renewed_ns;           /* util_now_ns of the last renewal that
                                     etcd's quorum answered (atomic) */
    struct monitor *mon;          /* the beats, the monitor slots, the
                                     housekeeping (node/monitor.c) */
    char *info;                   /* the nodeinfo last written */
    char *live;                   /* the live key's value as taken */
    /* the revision being applied (d->lock) */
    struct pending_alloc *pa;
    size_t npa;
    char **touched;               /* apps changed by it */
    size_t ntouched;
    struct quota_over *over;      /* apps run here left above a quota cut
                                     on another node: d->hooks.quota_over
                                     once d->lock is released (f_unlock) */
    size_t nover;
    /* apps of the revision being applied, decoded without d->lock
     * (f_app_early; the watcher thread's alone) */
    struct early_app *early;
    size_t nearly;
};

/* An app row that may be new here, its manifest decoded before d->lock
 * was taken (issue 51). */
struct early_app {
    char *name;
    struct app *a;        /* decoded; NULL: it does not decode */
    char *why;            /* why not */
    enum accel_type t;
};

/* An app run here holding more than the quota another node just cut. */
struct quota_over {
    char *app, *dev;
    uint64_t held, quota;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------ node health */

/* A member node's devices are healthy when its agent says so and its
 * lease holds; placement then takes them (SPEC 10). */
static void node_recompute(struct accel_daemon *d, int n)
{
    const struct adm_node *x = &d->snap.nodes[n];
    const struct node_info *ni = &d->ninfo[n];
    for (uint32_t k = 0; k < x->ndev; k++) {
        uint32_t dev = x->first_dev + k;
        d->snap.devs[dev].healthy = d->dinfo[dev].reported_healthy &&
                                    ni->reachable && !ni->removed;
        d->snap.devs[dev].present = !ni->removed;
        /* only this node's device texts go stale: every agent reports
         * every few seconds, and a listing rebuilds what is stale */
        if (d->hooks.device_changed)
            d->hooks.device_changed(d, (int)dev);
    }
    adm_index_update_node(&d->snap, (uint32_t)n);
}

static uint64_t jpair(const json_t *o, const char *k, size_t i)
{
    json_int_t v = json_integer_value(json_array_get(json_object_get(o, k),
                                                     i));
    return v > 0 ? (uint64_t)v : 0;
}

/* One NVML reading of another node's device: [value, why unknown]. */
static void measure(const json_t *v, const char *k, int64_t *val,
                    uint8_t *na)
{
    const json_t *p = json_object_get(v, k);
    json_int_t x = json_integer_value(json_array_get(p, 0));
    json_int_t why = json_integer_value(json_array_get(p, 1));
    if (!json_is_array(p)) {
        *val = -1;
        *na = NVML_NA_NOT_SEEN; /* an agent of an older accel */
        return;
    }
    *val = x;
    *na = why >= NVML_NA_NONE && why <= NVML_NA_NOT_SEEN ? (uint8_t)why
                                                        : NVML_NA_ERROR;
}

static void take_measures(struct dev_info *di, const json_t *v)
{
    int64_t x;
    measure(v, "util", &x, &di->util_na);
    di->util = x >= 0 && x <= 100 ? (int)x : -1;
    measure(v, "power", &di->power_mw, &di->power_na);
    measure(v, "limit", &di->power_limit_mw, &di->limit_na);
    measure(v, "temp", &x, &di->temp_na);
    di->temp = x >= -100 && x <= 1000 ? (int)x : -1;
}

/* What another node's apps use of its cards (its shim ledgers). */
static void take_usage(struct accel_daemon *d, int n, const json_t *usage)
{
    size_t i;
    json_t *u;
    for (size_t k = 0; k < d->napps; k++) { /* unreported = 0 */
        struct app *a = d->apps[k];
        a->usage = 0;
        for (size_t r = 0; a->row_usage && r < a->nrows; r++) {
            if (d->snap.devs[a->rows[r].dev].node == (uint32_t)n)
                a->row_usage[r] = 0;
            a->usage += a->row_usage[r];
        }
    }
    json_array_foreach(usage, i, u) {
        const char *name = json_string_value(json_object_get(u, "app"));
        struct app *a = name ? state_app_find(d, name) : NULL;
        const char *id = json_string_value(json_object_get(u, "device"));
        int dev = id ? state_dev_find(d, id) : -1;
        json_int_t used = json_integer_value(json_object_get(u, "used"));
        if (a == NULL || dev < 0 || (int)d->snap.devs[dev].node != n ||
            used < 0 || a->row_usage == NULL)
            continue;
        for (size_t r = 0; r < a->nrows; r++) {
            if (a->rows[r].dev != (uint32_t)dev)
                continue;
            a->usage += (uint64_t)used - a->row_usage[r];
            a->row_usage[r] = (uint64_t)used;
        }
    }
}

/* Devices a known node registers that this view lacks (a GPU added to
 * that machine, which then restarted its acceld): inserted among that
 * node's devices, and the placement index built again. */
static void add_new_devices(struct accel_daemon *d, int n, const json_t *devs,
                            bool say)
{
    size_t i;
    json_t *v;
    bool added = false;
    json_array_foreach(devs, i, v) {
        const char *id = json_string_value(json_object_get(v, "id"));
        const char *ty = json_string_value(json_object_get(v, "type"));
        const char *su = json_string_value(json_object_get(v, "support"));
        json_int_t mem = json_integer_value(json_object_get(v, "memory"));
        enum accel_type t;
        enum accel_support st;
        if (id && state_dev_find(d, id) >= 0)
            continue; /* known (or another node's: its id is taken) */
        if (!id || !id[0] || strlen(id) > ACCEL_ID_MAX || !ty ||
            !accel_type_parse(ty, &t) || !su ||
            !accel_support_parse(su, &st) || mem < 0) {
            log_warn("node %s: a device that does not decode (%s) is not "
                     "taken", d->ninfo[n].name, id ? id : "no id");
            continue;
        }
        discovery_insert_device(
            d, (uint32_t)n, id, t,
            json_string_value(json_object_get(v, "model")), (uint64_t)mem, st,
            false, -1);
        if (say)
            log_info("node %s registered a new device %s", d->ninfo[n].name,
                     id);
        added = true;
    }
    if (added && d->snap.index && adm_index_build(&d->snap) != ACCEL_OK)
        log_error("the placement index could not be rebuilt; placement "
                  "scans every card");
}

/* This node's own registration as the store holds it (loaded at start):
 * the time of its first one carries over, so a restart is not a new node. */
static void keep_registered(struct accel_daemon *d, const char *text)
{
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    json_int_t ms = json_integer_value(
        json_object_get(json_object_get(o, "host"), "registered"));
    if (d->registered_ms == 0 && ms > 0)
        d->registered_ms = ms;
    json_decref(o);
}

/* Another node's registration: add it (and its devices) the first time,
 * then keep its devices' health and use current. NULL: it was removed.
 * parsed: text parsed already (the watch parses it before d->lock), or
 * NULL to parse it here. */
static void apply_nodeinfo(struct accel_daemon *d, const char *node,
                           const char *text, const json_t *parsed)
{
    json_t *o = NULL, *devs;
    int n;
    size_t i;
    json_t *v;

    if (strcmp(node, d->cfg.node_name) == 0) {
        keep_registered(d, text);
        return;
    }
    n = state_node_find(d, node);
    if (text == NULL) {
        if (n >= 0) {
            d->ninfo[n].removed = true;
            d->ninfo[n].reachable = false;
            node_recompute(d, n);
        }
        return;
    }
    o = parsed ? json_incref((json_t *)parsed) : json_loads(text, 0, NULL);
    devs = json_object_get(o, "devices");
    if (!json_is_array(devs)) {
        log_warn("node %s registered devices that do not decode; ignored",
                 node);
        json_decref(o);
        return;
    }
    if (n < 0) {
        discovery_add_node(d, node, false, jpair(o, "mem", 0),
                           jpair(o, "mem", 1), jpair(o, "cpu", 0),
                           jpair(o, "cpu", 1), jpair(o, "disk", 0),
                           jpair(o, "disk", 1));
        n = (int)d->snap.nnodes - 1;
        d->ninfo[n].member = true;
        d->ninfo[n].reachable = false; /* until its live key is seen */
        add_new_devices(d, n, devs, false);
        log_info("node %s joined the cluster with %u devices", node,
                 d->snap.nodes[n].ndev);
        /* the placement index is built for a set of nodes: once loaded,
         * a new one needs a new index (none yet at start-up: NULL);
         * add_new_devices built it when the node brought devices */
        if (d->snap.nodes[n].ndev == 0 && d->snap.index &&
            adm_index_build(&d->snap) != ACCEL_OK)
            log_error("the placement index could not be rebuilt; placement "
                      "scans every card");
    }
    d->ninfo[n].member = true;
    d->ninfo[n].removed = false;
    add_new_devices(d, n, devs, true);
    json_array_foreach(devs, i, v) {
        const char *id = json_string_value(json_object_get(v, "id"));
        int dev = id ? state_dev_find(d, id) : -1;
        if (dev < 0 || (int)d->snap.devs[dev].node != n)
            continue;
        d->dinfo[dev].reported_healthy =
            json_is_true(json_object_get(v, "healthy"));
        d->dinfo[dev].used_mem =
            (uint64_t)json_integer_value(json_object_get(v, "used"));
        take_measures(&d->dinfo[dev], v);
    }
    take_usage(d, n, json_object_get(o, "usage"));
    if (json_is_object(json_object_get(o, "host"))) {
        json_decref(d->ninfo[n].host);
        d->ninfo[n].host = json_incref(json_object_get(o, "host"));
    }
    d->snap.nodes[n].mem = (struct adm_res){jpair(o, "mem", 0),
                                            jpair(o, "mem", 1)};
    d->snap.nodes[n].cpu = (struct adm_res){jpair(o, "cpu", 0),
                                            jpair(o, "cpu", 1)};
    d->snap.nodes[n].disk = (struct adm_res){jpair(o, "disk", 0),
                                             jpair(o, "disk", 1)};
    node_recompute(d, n);
    json_decref(o);
}

static void apply_agent(struct accel_daemon *d, const char *node,
                        const char *text)
{
    int n = state_node_find(d, node);
    /* live: the key there and no monitor marked it silent */
    bool live = monitor_agent(d->cluster ? d->cluster->mon : NULL, node, text);
    if (n < 0 || strcmp(node, d->cfg.node_name) == 0)
        return;
    if (d->ninfo[n].reachable != live)
        log_info("node %s is %s", node,
                 live   ? "reachable (its agent holds its lease)"
                 : text ? "unreachable (a monitor heard no beat for a TTL)"
                        : "unreachable (its agent's lease lapsed)");
    d->ninfo[n].reachable = live;
    if (live)
        d->ninfo[n].beat_ns = (int64_t)util_now_ns();
    node_recompute(d, n);
}

/* A node whose agent has written no beat for a TTL is unreachable, though
 * its live key may still be in etcd: an etcd leader elected while that
 * agent hangs gives every lease its whole TTL again (and the election
 * timeout), so the key alone would call a hung agent live for up to a TTL
 * more (docs/benchmarks.md, issue 40 item 8). The beats are watched by
 * the elected monitors alone (node/monitor.c, issue 51: every view
 * watching every beat cost etcd N^2 events); a monitor marks a silent
 * node's key, which every view then shows unreachable. A monitor marks
 * only while its own lease holds (one cut off from etcd hears no one) and
 * only by what its watch has brought (silent: the last beat came a TTL
 * before the monitor's own beat last came back through the same watch,
 * so a lagging watch marks no one). The node, running again, writes its
 * key back unmarked. */
static void expire_silent(struct accel_daemon *d)
{
    /* the monitors' work now (node/monitor.c): a view hears no beat, only
     * the mark a monitor writes, so a beat costs the cluster O(1) */
    monitor_check(d->cluster->mon,
                  __atomic_load_n(&d->cluster->renewed_ns, __ATOMIC_SEQ_CST));
}

static enum accel_err load_nodeinfo(void *ctx, const char *node,
                                    const char *json, char **why)
{
    (void)why;
    apply_nodeinfo(ctx, node, json, NULL);
    return ACCEL_OK;
}

static enum accel_err load_agent(void *ctx, const char *node,
                                 const char *json, char **why)
{
    (void)why;
    apply_agent(ctx, node, json);
    return ACCEL_OK;
}

/* A running part of an app bound across nodes; this node's own is the
 * process it adopts (its leader). */
static enum accel_err load_part(void *ctx, const char *app, const char *node,
                                int64_t pid, uint64_t pid_start, char **why)
{
    struct accel_daemon *d = ctx;
    struct app *a = state_app_find(d, app);
    (void)why;
    if (a == NULL)
        return ACCEL_OK; /* a part left by an app that is gone */
    state_part_set(a, node, true);
    if (strcmp(node, d->cfg.node_name) == 0) {
        a->pid = pid;
        a->pid_start = pid_start;
    }
    return ACCEL_OK;
}

void cluster_loader(struct store_loader *l)
{
    l->nodeinfo = load_nodeinfo;
    l->agent = load_agent;
    l->part = load_part;
}

char *cluster_nodeinfo(struct accel_daemon *d)
{
    int n = state_node_find(d, d->cfg.node_name);
    json_t *o, *devs, *usage = NULL, *host;
    const struct adm_node *x;
    char *text;
    if (n < 0)
        return NULL;
    devs = json_array();
    x = &d->snap.nodes[n];
    for (uint32_t k = 0; k < x->ndev; k++) {
        uint32_t i = x->first_dev + k;
        const struct adm_device *dv = &d->snap.devs[i];
        const struct dev_info *di = &d->dinfo[i];
        json_array_append_new(
            devs,
            json_pack("{s:s, s:s, s:s, s:I, s:s, s:b, s:I, s:[i,i], s:[I,i],"
                      " s:[I,i], s:[i,i]}",
                      "id", dv->id, "type", accel_type_name(dv->type),
                      "model", di->model ? di->model : "", "memory",
                      (json_int_t)dv->memory, "support",
                      accel_support_name(dv->st), "healthy",
                      dv->healthy && dv->present, "used",
                      (json_int_t)di->used_mem, "util", di->util,
                      (int)di->util_na, "power", (json_int_t)di->power_mw,
                      (int)di->power_na, "limit",
                      (json_int_t)di->power_limit_mw, (int)di->limit_na,
                      "temp", di->temp, (int)di->temp_na));
    }
    /* what the apps bound here use of each card (the shim's ledgers): the
     * other nodes show it, sample it into their history and /metrics */
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        for (size_t k = 0; a->row_usage && k < a->nrows; k++) {
            uint32_t dev = a->rows[k].dev;
            if (d->snap.devs[dev].node != (uint32_t)n)
                continue;
            if (usage == NULL)
                usage = json_array();
            json_array_append_new(usage,
                                  json_pack("{s:s, s:s, s:I}", "app", a->name,
                                            "device", d->snap.devs[dev].id,
                                            "used",
                                            (json_int_t)a->row_usage[k]));
        }
    }
    o = json_pack("{s:s, s:o, s:[I,I], s:[I,I], s:[I,I]}", "node",
                  d->cfg.node_name, "devices", devs, "mem",
                  (json_int_t)x->mem.total, (json_int_t)x->mem.used, "cpu",
                  (json_int_t)x->cpu.total, (json_int_t)x->cpu.used, "disk",
                  (json_int_t)x->disk.total, (json_int_t)x->disk.used);
    if (usage)
        json_object_set_new(o, "usage", usage);
    /* the machine, for the other nodes' HAMi node fields */
    if (d->registered_ms == 0)
        d->registered_ms = util_wall_ms(); /* the first registration */
    host = hostinfo_json(d->cfg.listen, NULL);
    json_object_set_new(host, "registered", json_integer(d->registered_ms));
    json_object_set_new(o, "host", host);
    text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return text;
}

/* ------------------------------------------------------------ the agent */

static enum accel_err commit_state(struct accel_daemon *d, struct app *a,
                                   enum app_state st, const char *reason)
{
    enum accel_err rc = state_tx_begin(d);
    if (rc == ACCEL_OK)
        rc = state_save_app(d, a, st, reason);
    if (rc != ACCEL_OK) {
        state_tx_rollback(d);
        return rc;
    }
    state_event(d, "app.state", a->name, d->cfg.node_name, NULL, NULL,
                "app %s is %s on node %s", a->name, app_state_name(st),
                d->cfg.node_name);
    rc = state_tx_commit(d);
    if (rc == ACCEL_OK)
        state_set_state(a, st, reason);
    return rc;
}

/* The end of the app when no part of it runs any more (none started, or
 * every one ended): release every card, or delete it for an uninstall. */
static void multi_finish(struct accel_daemon *d, struct app *a)
{
    bool uninstall = a->reason && strcmp(a->reason, "uninstalling") == 0;
    char *r = a->reason ? xstrdup(a->reason) : NULL;
    if (uninstall)
        lifecycle_commit_uninstall(d, a);
    else
        lifecycle_commit_release(d, a, APP_STOPPED, r);
    free(r);
}

/* Start this node's part of a: its rows here, ACCEL_NODE_RANK and the
 * rest (runtime.c); the part row says it runs, and the part that makes
 * the set complete makes the app `running`. */
static void multi_start(struct accel_daemon *d, struct app *a)
{
    const char *me = d->cfg.node_name;
    char *cause = NULL, *why;
    bool all;
    enum accel_err rc;

    if (runtime_start(d, a, &cause) != ACCEL_OK) {
        a->pid = 0;
        why = xasprintf("its part could not start on node %s: %s", me,
                        cause ? cause : "failed");
        rc = state_tx_begin(d);
        if (rc == ACCEL_OK)
            rc = state_save_app(d, a, APP_STOPPING, why);
        if (rc == ACCEL_OK && (rc = state_tx_commit(d)) == ACCEL_OK)
            state_set_state(a, APP_STOPPING, why);
        else if (rc != ACCEL_OK)
            state_tx_rollback(d);
        if (rc == ACCEL_OK && a->nparts == 0)
            multi_finish(d, a);
        free(why);
        free(cause);
        return;
    }
    state_part_set(a, me, true);
    all = state_parts_complete(d, a);
    state_part_set(a, me, false);
    rc = state_tx_begin(d);
    if (rc == ACCEL_OK)
        rc = store_part_put(d->store, a->name, me, a->pid, a->pid_start);
    if (rc == ACCEL_OK && all && a->state == APP_RESUMING)
        rc = state_save_app(d, a, APP_RUNNING, NULL);
    if (rc == ACCEL_OK) {
        state_event(d, "app.part", a->name, me, NULL, NULL,
                    "app %s: its part on node %s started (pid %d)", a->name,
                    me, (int)a->pid);
        rc = state_tx_commit(d);
    } else {
        state_tx_rollback(d);
    }
    if (rc != ACCEL_OK) {
        /* unrecorded, it would run unseen: stop it again */
        log_error("app %s: its part on %s started but could not be "
                  "recorded (%s); stopping it",
                  a->name, me, accel_strerror(rc));
        runtime_stop_begin(a, a->state, a->reason, false);
        return;
    }
    state_part_set(a, me, true);
    if (all && a->state == APP_RESUMING)
        state_set_state(a, APP_RUNNING, NULL);
}

/* An app bound across nodes, seen from one of its nodes (SPEC 10). */
static void act_multi(struct accel_daemon *d, struct app *a)
{
    bool mine = state_part_has(a, d->cfg.node_name);
    bool uninstall = a->reason && strcmp(a->reason, "uninstalling") == 0;

    if ((a->state == APP_RESUMING || a->state == APP_RUNNING) &&
        a->pid <= 0 && !mine && !a->stop.active) {
        multi_start(d, a);
    } else if (a->state == APP_RESUMING && mine &&
               state_parts_complete(d, a)) {
        commit_state(d, a, APP_RUNNING, NULL);
    } else if (a->state == APP_STOPPING && a->pid > 0 && !a->stop.active) {
        runtime_stop_begin(a, APP_STOPPED, uninstall ? NULL : a->reason,
                           uninstall);
    } else if (a->state == APP_STOPPING && a->pid <= 0 && a->nparts == 0) {
        multi_finish(d, a);
    }
}

/*
 * Start an app bound to this node's cards. The view this runs on may lag
 * etcd (a watch catching up after a cut or a member's death) and still
 * show the app resuming here when another node has since stopped it and
 * started it on its own card: started now, it would run on two machines
 * (the randomized test saw it). So the start is claimed first: the app's
 * row is written again, guarded by the revision this view read, and only
 * when that succeeds is the process started (a newer row fails the
 * guard; the watch then brings it, and this node acts on that). Once
 * claimed, nobody can move the app without stopping it first (it is
 * `resuming`: busy), and a stop that comes meanwhile finds the pid here.
 * It starts through the one door (launch.h), which has its runner look
 * first (RUNNER_UNSEEN): an image not pinned on this node (pins are
 * node-local: nothing is pulled at a cluster's install) is pulled here
 * first, as a job; a pinned one acceld may pull again is looked for first,
 * off the lock (podman may take a minute), and pulled again when it has
 * gone from the machine: meanwhile launch_pending keeps the next watch
 * event from starting it again.
 */
static void start_here(struct accel_daemon *d, struct app *a)
{
    enum accel_err rc = commit_state(d, a, APP_RESUMING, a->reason);
    if (rc != ACCEL_OK) {
        log_info("app %s: not started on %s: its row is not the one this "
                 "view read (%s); the newer one decides",
                 a->name, d->cfg.node_name, accel_strerror(rc));
        return;
    }
    launch_app(d, a, RUNNER_UNSEEN, commit_state);
}

/*
 * The end of an external app bound to this node's cards, asked for by
 * another node (`stopping`): what its cgroup here holds (people's own
 * containers, put there by its CDI device's hook) gets SIGTERM, and the
 * app waits `releasing` with its cards until the cgroup is empty (the
 * reconciler kills it after the stop timeout, then releases or deletes
 * it); an empty cgroup releases or deletes it now.
 */
static void end_held(struct accel_daemon *d, struct app *a)
{
    char *r;

    if (a->reason && strcmp(a->reason, "uninstalling") == 0) {
        lifecycle_hold_outside(d, a);
        if (a->rel.linger == 0) {
            lifecycle_commit_uninstall(d, a);
            return;
        }
        a->rel.uninstall = true;
        if (lifecycle_commit_releasing(d, a, APP_STOPPED, "uninstalling") !=
            ACCEL_OK)
            a->rel.uninstall = false;
        return;
    }
    r = a->reason ? xstrdup(a->reason) : NULL;
    lifecycle_commit_release(d, a, APP_STOPPED, r);
    free(r);
}

void cluster_act(struct accel_daemon *d, struct app *a)
{
    /* an install still on its way to etcd acts once it is there (ops.c) */
    if (d->cluster == NULL || a->nrows == 0 || a->committing)
        return;
    if (state_app_multi(d, a)) {
        if (state_app_part_here(d, a))
            act_multi(d, a);
        return;
    }
    if (runtime_held_here(d, a)) {
        if (a->state == APP_STOPPING)
            end_held(d, a);
        return;
    }
    if (!state_app_runs_here(d, a))
        return;
    if (a->state == APP_RESUMING && a->pid <= 0 && !launch_pending(a)) {
        start_here(d, a);
    } else if (a->state == APP_STOPPING && !a->stop.active) {
        bool uninstall = a->reason && strcmp(a->reason, "uninstalling") == 0;
        if (a->pid > 0) {
            runtime_stop_begin(a, APP_STOPPED, uninstall ? NULL : a->reason,
                               uninstall);
        } else if (uninstall) {
            lifecycle_commit_uninstall(d, a);
        } else {
            char *r = a->reason ? xstrdup(a->reason) : NULL;
            lifecycle_commit_release(d, a, APP_STOPPED, r);
            free(r);
        }
    }
}

/* ------------------------------------------------------------ the watch */

static void f_lock(void *ctx)
{
    pthread_mutex_lock(&((struct accel_daemon *)ctx)->lock);
}

static void f_unlock(void *ctx)
{
    struct accel_daemon *d = ctx;
    struct cluster *c = d->cluster;
    struct quota_over *over = c ? c->over : NULL;
    size_t n = c ? c->nover : 0;

    if (c) {
        c->over = NULL;
        c->nover = 0;
    }
    pthread_mutex_unlock(&d->lock);
    /* SPEC 4.4: the reclaim action of an app left above its new quota,
     * called without the lock (as ops_quota_set does) */
    for (size_t i = 0; i < n; i++) {
        if (d->hooks.quota_over)
            d->hooks.quota_over(d, over[i].app, over[i].dev, over[i].held,
                                over[i].quota);
        free(over[i].app);
        free(over[i].dev);
    }
    free(over);
}

static void touch(struct cluster *c, const char *app)
{
    for (size_t i = 0; i < c->ntouched; i++)
        if (strcmp(c->touched[i], app) == 0)
            return;
    c->touched = xrealloc(c->touched, (c->ntouched + 1) * sizeof(char *));
    c->touched[c->ntouched++] = xstrdup(app);
}

/* Act on every app touched since the last time (d->lock held), and forget
 * them. An app gone meanwhile is skipped. */
static void act_on_touched(struct accel_daemon *d, struct cluster *c)
{
    for (size_t i = 0; i < c->ntouched; i++) {
        struct app *a = state_app_find(d, c->touched[i]);
        if (a)
            cluster_act(d, a);
        free(c->touched[i]);
    }
    c->ntouched = 0;
}

/* Rows of a under a new requirement (a resume chose another type): the
 * snapshot's accounting follows the requirement, so release, switch, and
 * apply again. */
static void switch_sel(struct accel_daemon *d, struct app *a, int sel)
{
    struct adm_row *rows = NULL;
    size_t n = a->nrows;
    if (sel == a->sel)
        return;
    if (n) {
        rows = xmalloc(n * sizeof(*rows));
        memcpy(rows, a->rows, n * sizeof(*rows));
    }
    state_set_rows(d, a, NULL, 0);
    a->sel = sel;
    state_set_rows(d, a, rows, n);
    free(rows);
}

/*
 * Does this node run a process of a (its pid, its rows here, before this
 * change is applied) that the row now arriving says is not running? Its
 * own saves never come back through the watch, and a node that stops
 * another's app asks its agent (`stopping`); so only a change decided on
 * a view that had not seen the process yet says so, and the process it
 * leaves would run unseen, on a card the cluster gives to others.
 */
static bool runs_unowned(struct accel_daemon *d, const struct app *a,
                         enum app_state st)
{
    return a->pid > 0 && !a->stop.active && !state_app_multi(d, a) &&
           state_app_runs_here(d, a) &&
           (st == APP_STOPPED || st == APP_FAILED || st == APP_INSTALLED);
}

/* An app row that may be new here, before d->lock is taken (the watcher
 * thread, store.h): its manifest is decoded now, so that the lock is held
 * only to add it (f_app takes it; f_revision drops what is left). */
static void f_app_early(void *ctx, const char *name,
                        const struct store_app *row)
{
    struct cluster *c = ((struct accel_daemon *)ctx)->cluster;
    struct early_app *x;
    c->early = xrealloc(c->early, (c->nearly + 1) * sizeof(*c->early));
    x = &c->early[c->nearly++];
    *x = (struct early_app){.name = xstrdup(name),
                            .a = xcalloc(1, sizeof(struct app)),
                            .t = ACCEL_TYPE_CPU};
    x->why = state_app_decode(row, x->a, &x->t);
    if (x->why) {
        free(x->a);
        x->a = NULL;
    }
}

/* The decoding f_app_early made of name, taken (false: none). */
static bool early_take(struct cluster *c, const char *name, struct app **a,
                       char **why, enum accel_type *t)
{
    for (size_t i = 0; i < c->nearly; i++) {
        if (strcmp(c->early[i].name, name) != 0)
            continue;
        *a = c->early[i].a;
        *why = c->early[i].why;
        *t = c->early[i].t;
        free(c->early[i].name);
        c->early[i] = c->early[--c->nearly];
        return true;
    }
    return false;
}

static void early_drop(struct cluster *c)
{
    for (size_t i = 0; i < c->nearly; i++) {
        if (c->early[i].a) {
            manifest_release(&c->early[i].a->m);
            free(c->early[i].a);
        }
        free(c->early[i].why);
        free(c->early[i].name);
    }
    free(c->early);
    c->early = NULL;
    c->nearly = 0;
}

static void f_app(void *ctx, const char *name, const struct store_app *row)
{
    struct accel_daemon *d = ctx;
    struct app *a = state_app_find(d, name);
    enum accel_type t = ACCEL_TYPE_CPU;
    char *why;

    if (row == NULL) {
        if (a) {
            /* never left running unseen: a delete this node did not make
             * (it deletes only what it has stopped) */
            if (a->pid > 0 && !state_app_multi(d, a) &&
                state_app_runs_here(d, a))
                runtime_kill_unowned(d, a, "the app was deleted while it "
                                           "ran here");
            state_set_rows(d, a, NULL, 0);
            state_app_remove(d, a);
        }
        return;
    }
    touch(d->cluster, name);
    if (a == NULL) {
        /* decoded before the lock (f_app_early), or here when the watch
         * did not know it would be new (a key created earlier) */
        if (!early_take(d->cluster, name, &a, &why, &t)) {
            a = xcalloc(1, sizeof(*a));
            why = state_app_decode(row, a, &t);
        }
        if (why) {
            log_warn("app %s from another node does not decode (%s); not "
                     "shown",
                     name, why);
            free(why);
            free(a);
            return;
        }
        a->name = xstrdup(row->name);
        a->owner = xstrdup(row->owner);
        a->manifest_text = xstrdup(row->manifest);
        a->sel = row->selected_type
                     ? (int)(manifest_req(&a->m, t) - a->m.req)
                     : -1;
        a->created_ms = row->created_ms;
        state_app_add(d, a);
    } else {
        enum app_state st;
        if (!app_state_parse(row->state, &st))
            return;
        if (runs_unowned(d, a, st)) {
            runtime_kill_unowned(d, a, "another node saved it as not "
                                       "running while it ran here");
            a->pid = 0; /* the row's, below */
        }
        if (row->selected_type && accel_type_parse(row->selected_type, &t) &&
            manifest_req(&a->m, t))
            switch_sel(d, a, (int)(manifest_req(&a->m, t) - a->m.req));
        a->state = st;
    }
    free(a->reason);
    a->reason = row->reason ? xstrdup(row->reason) : NULL;
    a->updated_ms = row->updated_ms;
    a->exit_status = row->exit_status;
    /* the process of an app run here is this node's to know (and of an
     * app bound across nodes, its part here: never another node's pid) */
    if (state_app_multi(d, a) && state_app_part_here(d, a)) {
        /* keep */
    } else if (!state_app_runs_here(d, a) || a->pid <= 0) {
        a->pid = row->pid;
        a->pid_start = row->pid_start;
    }
}

static void f_alloc(void *ctx, const char *app, const char *dev,
                    const struct store_alloc *row)
{
    struct cluster *c = ((struct accel_daemon *)ctx)->cluster;
    c->pa = xrealloc(c->pa, (c->npa + 1) * sizeof(*c->pa));
    c->pa[c->npa++] = (struct pending_alloc){.app = xstrdup(app),
                                             .dev = xstrdup(dev),
                                             .memory = row ? row->memory : 0,
                                             .deleted = row == NULL};
}

/* A row of a on dev already, now with quota `memory`: a live quota
 * change (SPEC 4.4) made on another node, applied in place (the rows and
 * the ledgers they keep stay) and carried to the app's shim and limits
 * where it runs here. false when a has no row on dev. */
static bool quota_moved(struct accel_daemon *d, struct app *a, int dev,
                        uint64_t memory)
{
    for (size_t k = 0; k < a->nrows; k++) {
        if (a->rows[k].dev != (uint32_t)dev)
            continue;
        if (a->rows[k].memory != memory) {
            struct cluster *c = d->cluster;
            uint64_t held = 0;
            state_row_set_memory(d, a, k, memory);
            livequota_apply(d, a, k, &held);
            if (held > memory) {
                log_info("app %s holds %llu bytes on %s, above its new "
                         "quota of %llu: its allocations there are refused "
                         "until it is under", a->name,
                         (unsigned long long)held, d->dinfo[dev].id,
                         (unsigned long long)memory);
                c->over = xrealloc(c->over, (c->nover + 1) * sizeof(*c->over));
                c->over[c->nover++] = (struct quota_over){
                    xstrdup(a->name), xstrdup(d->dinfo[dev].id), held, memory};
            }
        }
        return true;
    }
    return false;
}

/* Where a's cards are, as far as its process goes: none; all on this
 * node (its process, if any, is this node's); across nodes with some
 * here (a->pid is this node's part's); or none here (a->pid, if any, is
 * another node's). */
static enum placed where_placed(struct accel_daemon *d, const struct app *a)
{
    if (a->nrows == 0)
        return PLACED_NONE;
    if (state_app_multi(d, a))
        return state_app_part_here(d, a) ? PLACED_ACROSS : PLACED_AWAY;
    return state_app_runs_here(d, a) ? PLACED_HERE : PLACED_AWAY;
}

/*
 * a's cards moved with this revision (was: where they were before its
 * first row of a; a move is a delete and an add, compared whole). The
 * process of an app on one node is that node's only while the app's
 * cards are all there: moved away (or released) while it runs, it would
 * run on unseen, on cards the cluster has given to others, so it is
 * killed (a stop under way here ends it anyway); brought here from
 * another node with that node's pid, the pid is not this node's to watch
 * or signal. Nothing moves a running app's cards (a move stops it
 * first), so either is a change decided on a view that had not seen the
 * run, as runs_unowned says of the app's row. The parts of an app
 * across nodes are left to act_multi.
 */
static void placement_moved(struct accel_daemon *d, struct app *a,
                            enum placed was)
{
    enum placed now = where_placed(d, a);

    if (a->pid <= 0)
        return;
    if (was == PLACED_HERE && (now == PLACED_NONE || now == PLACED_AWAY) &&
        !a->stop.active) {
        runtime_kill_unowned(d, a, "another node placed it on other cards "
                                   "while it ran here");
    } else if (!(was == PLACED_AWAY && now == PLACED_HERE)) {
        return; /* the parts of an app across nodes are act_multi's */
    }
    a->pid = 0;
    a->pid_start = 0;
}

/* The revision's allocation changes, app by app, once its app rows are
 * in (a transaction may write an app's rows before its app row). */
static void apply_allocs(struct accel_daemon *d)
{
    struct cluster *c = d->cluster;
    for (size_t i = 0; i < c->npa; i++) {
        struct pending_alloc *p = &c->pa[i];
        struct app *a = state_app_find(d, p->app);
        p->first = a != NULL;
        for (size_t j = 0; p->first && j < i; j++)
            p->first = strcmp(c->pa[j].app, p->app) != 0;
        if (p->first)
            p->was = where_placed(d, a);
    }
    for (size_t i = 0; i < c->npa; i++) {
        struct pending_alloc *p = &c->pa[i];
        struct app *a = state_app_find(d, p->app);
        int dev = state_dev_find(d, p->dev);
        struct adm_row *rows;
        size_t n = 0;
        if (a == NULL || dev < 0) {
            if (!p->deleted)
                log_warn("allocation of %s on %s from another node is not "
                         "shown: %s is unknown here",
                         p->app, p->dev, a ? "the device" : "the app");
            continue;
        }
        if (!p->deleted && quota_moved(d, a, dev, p->memory)) {
            touch(c, p->app);
            continue;
        }
        rows = xmalloc((a->nrows + 1) * sizeof(*rows));
        for (size_t k = 0; k < a->nrows; k++)
            if (a->rows[k].dev != (uint32_t)dev)
                rows[n++] = a->rows[k];
        if (!p->deleted)
            rows[n++] = (struct adm_row){.dev = (uint32_t)dev,
                                         .memory = p->memory};
        state_set_rows(d, a, rows, n);
        free(rows);
        touch(c, p->app);
    }
    for (size_t i = 0; i < c->npa; i++) {
        struct app *a = c->pa[i].first ? state_app_find(d, c->pa[i].app)
                                       : NULL;
        if (a)
            placement_moved(d, a, c->pa[i].was);
    }
    for (size_t i = 0; i < c->npa; i++) {
        free(c->pa[i].app);
        free(c->pa[i].dev);
    }
    c->npa = 0;
}

static void f_device(void *ctx, const char *id, const struct store_device *row)
{
    struct accel_daemon *d = ctx;
    int dev = state_dev_find(d, id);
    enum accel_support st;
    json_t *settings = NULL;
    if (dev < 0 || row == NULL || !accel_support_parse(row->support, &st))
        return;
    if (row->settings) {
        settings = json_loads(row->settings, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(settings)) {
            json_decref(settings);
            return;
        }
    }
    d->snap.devs[dev].st = st;
    json_decref(d->dinfo[dev].settings);
    d->dinfo[dev].settings = settings;
    state_dev_settings_applied(d, dev); /* the index too */
    if (d->hooks.device_changed)
        d->hooks.device_changed(d, dev);
}

static void f_node(void *ctx, const char *name, const struct store_node *row)
{
    struct accel_daemon *d = ctx;
    int n = state_node_find(d, name);
    if (n < 0)
        return;
    d->snap.nodes[n].enabled = row ? row->enabled : true;
    adm_index_update_node(&d->snap, (uint32_t)n);
    if (d->hooks.device_changed)
        d->hooks.device_changed(d, -1);
}

static void f_user(void *ctx, const char *name, const struct store_user *row)
{
    struct accel_daemon *d = ctx;
    struct user_rec *u = state_user_find(d, name);
    if (row == NULL) {
        if (u) {
            size_t i = (size_t)(u - d->users);
            free(u->name);
            memmove(u, u + 1, (d->nusers - i - 1) * sizeof(*u));
            d->nusers--;
        }
        return;
    }
    if (u == NULL) {
        d->users = xrealloc(d->users, (d->nusers + 1) * sizeof(*d->users));
        u = &d->users[d->nusers++];
        *u = (struct user_rec){.name = xstrdup(name),
                               .max_apps = -1,
                               .max_gpu_mem = -1};
    }
    u->admin = strcmp(row->role, "admin") == 0;
    util_strlcpy(u->hash, row->token_hash, sizeof u->hash);
    u->created_ms = row->created_ms;
}

static void f_identity(void *ctx, const char *name,
                       const struct store_identity *row)
{
    struct accel_daemon *d = ctx;
    uint32_t uid = identity_uid(d, name);
    if (row && uid == 0)
        identity_load_row(d, name, row->uid);
    else if (row == NULL && uid != 0) /* another node removed the user */
        identity_retired(d, name, uid);
}

static void f_limits(void *ctx, const char *name,
                     const struct store_limits *row)
{
    struct user_rec *u = state_user_find(ctx, name);
    if (u) {
        u->max_apps = row ? row->max_apps : -1;
        u->max_gpu_mem = row ? row->max_gpu_memory : -1;
    }
}

/* An event another node appended: wake the long-polls it concerns. Its
 * data (the owner a member's long-poll is woken by) is parsed only while
 * a long-poll waits: no one else needs it under the lock (issue 51). */
static void f_event(void *ctx, const struct store_event *e)
{
    struct accel_daemon *d = ctx;
    json_t *data = NULL;
    pthread_mutex_lock(&d->ev_lock);
    d->ev_seq++;
    pthread_cond_broadcast(&d->ev_cond);
    if (d->hooks.event_appended && d->parked) {
        data = e->data ? json_loads(e->data, 0, NULL) : NULL;
        d->hooks.event_appended(
            d, e->app, json_string_value(json_object_get(data, "owner")));
    }
    pthread_mutex_unlock(&d->ev_lock);
    json_decref(data);
}

static void f_part(void *ctx, const char *app, const char *node,
                   bool running, int64_t pid, uint64_t pid_start)
{
    struct accel_daemon *d = ctx;
    struct app *a = state_app_find(d, app);
    (void)pid;
    (void)pid_start;
    if (a == NULL || strcmp(node, d->cfg.node_name) == 0)
        return; /* this node's own part is known from its own process */
    state_part_set(a, node, running);
    touch(d->cluster, app);
}

static void f_nodeinfo(void *ctx, const char *node, const char *json,
                       const json_t *parsed)
{
    apply_nodeinfo(ctx, node, json, parsed);
}

static void f_agent(void *ctx, const char *node, const char *json)
{
    apply_agent(ctx, node, json);
}

static void f_revision(void *ctx, int64_t rev)
{
    struct accel_daemon *d = ctx;
    struct cluster *c = d->cluster;
    (void)rev;
    apply_allocs(d);
    act_on_touched(d, c);
    early_drop(c); /* rows of apps known already, or this node's own */
}

static void *watcher_main(void *arg)
{
    struct accel_daemon *d = arg;
    struct store_follower f = {.ctx = d,
                               .lock = f_lock,
                               .unlock = f_unlock,
                               .mutex = &d->lock,
                               .app_early = f_app_early,
                               .app = f_app,
                               .alloc = f_alloc,
                               .device = f_device,
                               .node = f_node,
                               .user = f_user,
                               .identity = f_identity,
                               .limits = f_limits,
                               .event = f_event,
                               .nodeinfo = f_nodeinfo,
                               .agent = f_agent,
                               .part = f_part,
                               .revision = f_revision};
    enum accel_err rc = store_follow(d->store, &f, &d->cluster->stop);
    if (rc != ACCEL_OK && !__atomic_load_n(&d->cluster->stop, __ATOMIC_SEQ_CST)) {
        /* the history this view needs was compacted away: only a reload
         * can make it whole, and a restart is that reload */
        log_error("the cluster watch cannot continue (%s): etcd compacted "
                  "the revisions this node still needed; acceld stops so "
                  "that a restart loads the current state",
                  accel_strerror(rc));
        kill(getpid(), SIGTERM);
    }
    return NULL;
}

/* --------------------------------------------------- lease and liveness */

static char *agent_json(struct accel_daemon *d, int64_t lease)
{
    /* the lease: a monitor marks the key silent on it (node/monitor.c) */
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I}", "node",
                          d->cfg.node_name, "listen",
                          d->cfg.listen ? d->cfg.listen : "", "pid",
                          (json_int_t)getpid(), "startedMs",
                          (json_int_t)util_wall_ms(), "lease",
                          (json_int_t)lease);
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

/* Take the lease and the live key. The key must be free: another acceld
 * with this node name would run its apps twice. One that died leaves its
 * key until its lease lapses, so that is waited for (TTL + 1 s). */
static enum accel_err take_lease(struct accel_daemon *d, char **cause)
{
    struct cluster *c = d->cluster;
    struct etcd *e = store_etcd(d->store);
    char *key = store_key(d->store, "agents", d->cfg.node_name);
    char *val = NULL;
    int64_t deadline = util_wall_ms() + (d->cfg.lease_ttl + 1) * 1000;
    enum accel_err rc;
    bool ok = false;

    rc = etcd_lease_grant(e, d->cfg.lease_ttl, &c->lease);
    if (rc == ACCEL_OK)
        val = agent_json(d, c->lease);
    while (rc == ACCEL_OK) {
        struct etcd_cmp cmp = {key, ETCD_CREATE, ETCD_EQUAL, 0, NULL, 0};
        struct etcd_op op = {ETCD_PUT, key, val, strlen(val), c->lease};
        rc = etcd_txn(e, &cmp, 1, &op, 1, &ok, NULL, NULL);
        if (rc != ACCEL_OK || ok || util_wall_ms() > deadline)
            break;
        sleep_ms(250);
    }
    if (rc == ACCEL_OK && !ok) {
        *cause = xasprintf("node name %s is held by another running acceld "
                           "(%s exists and its lease is renewed); give this "
                           "one another --node-name",
                           d->cfg.node_name, key);
        rc = ACCEL_EEXIST;
    } else if (rc != ACCEL_OK) {
        *cause = xasprintf("cannot take the lease of node %s in etcd: %s",
                           d->cfg.node_name, accel_strerror(rc));
    }
    free(key);
    if (rc == ACCEL_OK) {
        free(c->live);
        c->live = val;
    } else {
        free(val);
    }
    return rc;
}

/* The beat: written on the lease etcd just renewed, to a key only the
 * monitors watch (node/monitor.c), which mark a node silent for a TTL in
 * every view; with it this node's own key written back if one did. */
static void beat(struct accel_daemon *d)
{
    struct cluster *c = d->cluster;
    monitor_round(c->mon, c->lease, c->live);
}

/* Write nodeinfo when it changed (devices, health, use), or (again) at
 * every call. */
static void publish_info(struct accel_daemon *d, bool again)
{
    struct cluster *c = d->cluster;
    char *info;
    pthread_mutex_lock(&d->lock);
    info = cluster_nodeinfo(d);
    pthread_mutex_unlock(&d->lock);
    if (info == NULL)
        return;
    if (c->info && strcmp(c->info, info) == 0 && !again) {
        free(info);
        return;
    }
    if (store_member_put(d->store, "nodeinfo", d->cfg.node_name, info, 0) ==
        ACCEL_OK) {
        free(c->info);
        c->info = info;
    } else {
        free(info);
    }
}

/*
 * Drive again what this node's apps were left in the middle of. A start or
 * a stop whose state change etcd did not take (this node cut off, no
 * quorum) leaves the app `resuming` or `stopping` in every view, and no
 * watch event comes to retry it until someone touches the app again; the
 * keeper calls this once etcd renews the lease again, every round. What
 * it does is what a watch event on the app would do (cluster_act), plus
 * the two steps cluster_act does not repeat: saving `running` for an app
 * whose process started while the save failed, and the release of an app
 * left `running` whose process ended while the save of its end failed
 * (its card would stay held by nothing).
 */
#define REDRIVE_SYNC_MS 2000 /* at most, for the view to catch up */

/* Is a `running` here with no process (it exited; the save failed)? */
static bool ended_unsaved(struct accel_daemon *d, const struct app *a)
{
    return a->state == APP_RUNNING && a->pid <= 0 && !a->stop.active &&
           !state_app_multi(d, a) && state_app_runs_here(d, a);
}

static void release_ended(struct accel_daemon *d, struct app *a)
{
    char *why = a->exit_status == 0 ? NULL
                : a->exit_status < 0
                    ? xstrdup("its process ended")
                    : xasprintf("its process exited (status %" PRId64 ")",
                                a->exit_status);
    if (lifecycle_commit_release(d, a, why ? APP_FAILED : APP_STOPPED, why) ==
        ACCEL_OK)
        log_info("app %s: the end of its process saved again", a->name);
    free(why);
}

static void redrive(struct accel_daemon *d)
{
    char **names;
    size_t n = 0;
    bool moved = false;

    /* nothing left in the middle (most rounds): no sync with etcd */
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps && n == 0; i++)
        n = d->apps[i]->state == APP_RESUMING ||
            d->apps[i]->state == APP_STOPPING || ended_unsaved(d, d->apps[i]);
    pthread_mutex_unlock(&d->lock);
    if (n == 0)
        return;
    n = 0;
    /* act only on a view as fresh as etcd now: one that lags (a watch
     * resuming after its member died) may still show an app resuming here
     * that another node has since moved, and starting it then would run
     * it on two nodes (the randomized test saw it) */
    if (store_view_sync(d->store, 0, REDRIVE_SYNC_MS, &moved) != ACCEL_OK)
        return;
    pthread_mutex_lock(&d->lock);
    names = xcalloc(d->napps + 1, sizeof(*names));
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        if (a->state == APP_RESUMING || a->state == APP_STOPPING ||
            ended_unsaved(d, a))
            names[n++] = xstrdup(a->name);
    }
    /* by name: cluster_act may uninstall (free) an app and move the rest */
    for (size_t i = 0; i < n; i++) {
        struct app *a = state_app_find(d, names[i]);
        if (a == NULL)
            continue;
        if (a->state == APP_RESUMING && a->pid > 0 &&
            !state_app_multi(d, a) && state_app_runs_here(d, a))
            (void)commit_state(d, a, APP_RUNNING, NULL);
        else if (ended_unsaved(d, a))
            release_ended(d, a);
        else
            cluster_act(d, a);
    }
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The keeper's round: a third of the lease TTL. ACCEL_BEAT_MS (tests:
 * the keeper's writes due at every round while binds race: the beat, and
 * the nodeinfo written again through the store from this thread, a write
 * of its own beside the workers' transactions) makes it shorter, down to
 * 10 ms; anything else in it is ignored. */
static int keeper_round_ms(const struct accel_daemon *d)
{
    int every = d->cfg.lease_ttl * 1000 / 3;
    const char *env = getenv("ACCEL_BEAT_MS");
    char *end = NULL;
    long ms = env ? strtol(env, &end, 10) : 0;
    if (env && end != env && *end == '\0' && ms >= 10 && ms < every)
        every = (int)ms;
    return every;
}

static void *keeper_main(void *arg)
{
    struct accel_daemon *d = arg;
    struct cluster *c = d->cluster;
    struct etcd *e = store_etcd(d->store);
    int every = keeper_round_ms(d), step = every < 50 ? every : 50;
    bool forced = every < d->cfg.lease_ttl * 1000 / 3; /* ACCEL_BEAT_MS */
    int64_t next_info = 0;

    while (!__atomic_load_n(&c->stop, __ATOMIC_SEQ_CST)) {
        int64_t left = 0;
        enum accel_err rc = etcd_lease_keepalive(e, c->lease, &left);
        if (rc == ACCEL_OK && left > 0) {
            __atomic_store_n(&c->renewed_ns, (int64_t)util_now_ns(),
                             __ATOMIC_SEQ_CST);
            beat(d);
            redrive(d);
        }
        if (rc == ACCEL_OK && left == 0) {
            char *cause = NULL;
            log_warn("node %s: its lease lapsed (acceld was stopped or cut "
                     "off longer than %d s); registering again",
                     d->cfg.node_name, d->cfg.lease_ttl);
            if (take_lease(d, &cause) != ACCEL_OK) {
                log_error("%s", cause ? cause : "lease");
                free(cause);
            }
            free(c->info);
            c->info = NULL; /* say again what runs here */
        } else if (rc != ACCEL_OK) {
            log_warn("node %s: cannot renew its lease: %s", d->cfg.node_name,
                     accel_strerror(rc));
        }
        if (forced || util_wall_ms() >= next_info) {
            publish_info(d, forced);
            next_info = util_wall_ms() + CLUSTER_USAGE_MS;
        }
        for (int t = 0; t < every && !__atomic_load_n(&c->stop, __ATOMIC_SEQ_CST);
             t += step) {
            sleep_ms(step);
            expire_silent(d);
        }
    }
    return NULL;
}

enum accel_err cluster_start(struct accel_daemon *d, char **cause)
{
    struct cluster *c = xcalloc(1, sizeof(*c));
    enum accel_err rc;

    *cause = NULL;
    d->cluster = c;
    publish_info(d, false);
    if (c->info == NULL) {
        *cause = xasprintf("cannot register node %s in etcd: %s",
                           d->cfg.node_name, store_errmsg(d->store));
        return ACCEL_EIO;
    }
    rc = take_lease(d, cause);
    if (rc != ACCEL_OK)
        return rc;
    c->mon = monitor_new(&(struct monitor_opts){
        d->store, d->cfg.node_name, d->cfg.lease_ttl,
        d->cfg.compact_retention, d->cfg.role == ROLE_AGENT});
    if (c->mon == NULL) {
        *cause = xstrdup("cannot start the cluster monitor's thread");
        return ACCEL_ESYS;
    }
    __atomic_store_n(&c->renewed_ns, (int64_t)util_now_ns(), __ATOMIC_SEQ_CST);
    /* a cluster written before the bynode index gets it, once, from an
     * API server (an agent reads it, never fills it: it knows only its
     * own apps) */
    if (d->cfg.role != ROLE_AGENT) {
        size_t written = 0;
        enum accel_err ferr;
        /* under the lock: the supervisor, already running, may commit
         * (the store's key knowledge is the caller's lock's) */
        pthread_mutex_lock(&d->lock);
        ferr = store_index_fill(d->store, &written);
        if (ferr != ACCEL_OK)
            log_warn("node %s: the bynode index was not completed (%s); "
                     "agents may miss apps bound to their cards before it",
                     d->cfg.node_name, store_errmsg(d->store));
        else if (written > 0)
            log_info("node %s wrote %zu missing key%s of the bynode index "
                     "(a cluster written before it)",
                     d->cfg.node_name, written, written == 1 ? "" : "s");
        pthread_mutex_unlock(&d->lock);
    }
    /* what other nodes asked of this one while it was away */
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps; i++)
        touch(c, d->apps[i]->name);
    act_on_touched(d, c);
    pthread_mutex_unlock(&d->lock);
    if (pthread_create(&c->watcher, NULL, watcher_main, d) == 0)
        c->watcher_on = true;
    if (pthread_create(&c->keeper, NULL, keeper_main, d) == 0)
        c->keeper_on = true;
    if (!c->watcher_on || !c->keeper_on) {
        *cause = xstrdup("cannot start the cluster threads");
        return ACCEL_ESYS;
    }
    log_info("node %s joined the cluster at %s (lease %" PRId64 ", TTL %d s)",
             d->cfg.node_name, etcd_endpoint(store_etcd(d->store)), c->lease,
             d->cfg.lease_ttl);
    return ACCEL_OK;
}

int64_t cluster_stale_ms(struct accel_daemon *d)
{
    struct cluster *c = d->cluster;
    int64_t since, age;
    if (c == NULL)
        return 0;
    since = __atomic_load_n(&c->renewed_ns, __ATOMIC_SEQ_CST);
    if (since == 0)
        return 0; /* not started yet: nothing is served from a view */
    age = ((int64_t)util_now_ns() - since) / 1000000;
    /* within the TTL the lease holds, so etcd answered this node's renewal
     * less than a TTL ago and the others still count it in */
    return age >= (int64_t)d->cfg.lease_ttl * 1000 ? age : 0;
}

void cluster_stop(struct accel_daemon *d)
{
    struct cluster *c = d->cluster;
    if (c == NULL)
        return;
    __atomic_store_n(&c->stop, 1, __ATOMIC_SEQ_CST); /* etcd.h: read atomically */
    if (c->keeper_on)
        pthread_join(c->keeper, NULL);
    if (c->watcher_on)
        pthread_join(c->watcher, NULL);
    monitor_free(c->mon); /* after the watcher: apply_agent uses it */
    if (c->lease)
        etcd_lease_revoke(store_etcd(d->store), c->lease);
    for (size_t i = 0; i < c->npa; i++) {
        free(c->pa[i].app);
        free(c->pa[i].dev);
    }
    free(c->pa);
    for (size_t i = 0; i < c->ntouched; i++)
        free(c->touched[i]);
    free(c->touched);
    for (size_t i = 0; i < c->nover; i++) {
        free(c->over[i].app);
        free(c->over[i].dev);
    }
    free(c->over);
    early_drop(c);
    free(c->info);
    free(c->live);
    /* a slow operation's thread (http_slow.c) may still read d->cluster,
     * under d->lock: it finds it gone, never freed under it */
    pthread_mutex_lock(&d->lock);
    d->cluster = NULL;
    pthread_mutex_unlock(&d->lock);
    free(c);
}
