/* SPDX-License-Identifier: MIT */
/*
 * ops_device.c: the operations on devices and nodes, and the read-only
 * checks: availability, validate, preflight, mode switch, node enable, and
 * the legacy bind / unassign / bulk moves of SPEC 5.3, and the PUT of a
 * device's time-slice settings.
 */
#include "common/accel_setup.h"
#include "daemon/api/ops.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/quantity.h"
#include "common/util.h"
#include "daemon/api/auth.h"
#include "daemon/api/ops_int.h"
#include "daemon/api/view.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/enforce/meter.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/node/slice/broker.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

#define MIB (1024ULL * 1024ULL)

void ops_availability(struct accel_daemon *d, const struct auth_user *u,
                      const char *name, struct op_result *res)
{
    struct app *a;
    pthread_mutex_lock(&d->lock);
    a = ops_find_app(d, u, name, res);
    if (a)
        ops_res_ok(res, 200,
                   view_availability(d, &a->m.req[a->sel >= 0 ? a->sel : 0],
                                     u));
    pthread_mutex_unlock(&d->lock);
}

/* The rows a valid selection would write, as Allocation objects. */
static json_t *would_be_rows(struct accel_daemon *d, const struct app *a,
                             const struct adm_req *r,
                             const struct adm_row *rows, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct adm_device *x = &d->snap.devs[rows[i].dev];
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "appName",
                           a->name, "owner", a->owner, "mode",
                           accel_type_name(r->type), "nodeName",
                           d->snap.nodes[x->node].name, "deviceId", x->id,
                           "memory", (json_int_t)rows[i].memory));
    }
    return arr;
}

/*
 * app-service's validateComputeBinding: a valid selection answers
 * {status:"valid", availability, validation, allocations}; a CPU app with
 * no selection needs none ("not-required"); no selection otherwise is the
 * failed check computeBindingRequired, an invalid one
 * computeBindingUnavailable. Changes nothing.
 */
void ops_validate(struct accel_daemon *d, const struct auth_user *u,
                  const char *name, const struct op_binding *b,
                  struct op_result *res)
{
    struct app *a;
    struct adm_verdict v;
    struct adm_row rows[ADM_MAX_SELECTION];
    const struct adm_req *r;

    pthread_mutex_lock(&d->lock);
    a = ops_find_app(d, u, name, res);
    if (a == NULL)
        goto out;
    r = &a->m.req[ops_pick_req(d, a, b)];
    if (b->n == 0 && r->type == ACCEL_TYPE_CPU) {
        ops_res_ok(res, 200,
                   json_pack("{s:s, s:o, s:n, s:[]}", "status", "not-required",
                             "availability", view_availability(d, r, u),
                             "validation", "allocations"));
    } else if (b->n == 0) {
        ops_res_check(res, "computeBindingRequired",
                      json_pack("{s:o}", "availability",
                                view_availability(d, r, u)));
    } else if (!ops_validate_own(d, a, r, b->sel, b->n, &v, rows)) {
        ops_res_check(res, "computeBindingUnavailable",
                      json_pack("{s:o, s:o}", "availability",
                                view_availability(d, r, u), "validation",
                                view_validation(d, &v)));
    } else {
        ops_res_ok(res, 200,
                   json_pack("{s:s, s:o, s:o, s:o}", "status", "valid",
                             "availability", view_availability(d, r, u),
                             "validation", view_validation(d, &v),
                             "allocations",
                             would_be_rows(d, a, r, rows, b->n)));
    }
out:
    pthread_mutex_unlock(&d->lock);
}

static int find_device(struct accel_daemon *d, const char *node,
                       const char *device, struct op_result *res)
{
    int n = node ? state_node_find(d, node) : 0, dev;
    if (n < 0) {
        ops_res_error(res, 404, "not-found", "node \"%s\" not found", node);
        return -1;
    }
    dev = state_dev_find(d, device);
    if (dev < 0 || (node && (int)d->snap.devs[dev].node != n)) {
        if (node)
            ops_res_error(res, 404, "not-found",
                          "device \"%s\" not found on node %s", device, node);
        else
            ops_res_error(res, 404, "not-found", "GPU \"%s\" not found",
                          device);
        return -1;
    }
    return dev;
}

/* Apps bound to dev, each once. */
static size_t bound_apps(struct accel_daemon *d, int dev, struct app **out,
                         size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < d->napps && n < max; i++) {
        struct app *a = d->apps[i];
        for (size_t k = 0; k < a->nrows; k++) {
            if ((int)a->rows[k].dev == dev) {
                out[n++] = a;
                break;
            }
        }
    }
    return n;
}

#define SWITCH_MAX_APPS 256

/* One entry of a blockedApps list (SPEC 5: {appName, owner, state,
 * reason}). */
static json_t *blocked_entry(const struct app *a, const char *reason)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "appName", a->name, "owner",
                     a->owner, "state", app_state_name(a->state), "reason",
                     reason);
}

/* The apps the switch cannot stop now. One already `stopping` is among
 * them: its stop is under way with its own end (an uninstall deletes the
 * app once it has stopped), and the switch stopping it again as its own
 * would save it `stopped` and undo that (the randomized test saw an
 * acknowledged uninstall come back so); the switch is asked again once it
 * has finished. */
static json_t *blocked_list(struct app **apps, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        enum app_state s = apps[i]->state;
        if (ops_in_transition(apps[i]))
            json_array_append_new(
                arr, blocked_entry(apps[i],
                                   s == APP_RELEASING
                                       ? "processes-still-on-device"
                                   : s == APP_STOPPING
                                       ? "stop-still-in-progress"
                                       : "stop-operation-not-allowed"));
    }
    return arr;
}

/* The apps a switch or a node's removal stops and releases, and why
 * (state_commit_parts). */
struct release_ctx {
    struct app **apps;
    const char *reason;  /* "mode-switch", "node-removed" */
    const char *node;    /* the node removed: each app's event names it */
    int dev;             /* the device switched, and to */
    enum accel_support st;
};

static enum accel_err release_stage(struct accel_daemon *d, size_t i,
                                    void *ctx)
{
    struct release_ctx *c = ctx;
    enum accel_err rc = state_save_app(d, c->apps[i], APP_STOPPED, c->reason);
    if (rc == ACCEL_OK)
        rc = state_save_rows(d, c->apps[i], NULL, 0);
    if (rc == ACCEL_OK && c->node)
        state_event(d, "app.state", c->apps[i]->name, c->node, NULL, NULL,
                    "app %s is stopped: its node %s was removed",
                    c->apps[i]->name, c->node);
    return rc;
}

static void release_apply(struct accel_daemon *d, size_t i, void *ctx)
{
    struct release_ctx *c = ctx;
    state_set_rows(d, c->apps[i], NULL, 0);
    state_set_state(c->apps[i], APP_STOPPED, c->reason);
}

static enum accel_err switch_last(struct accel_daemon *d, size_t n, void *ctx)
{
    struct release_ctx *c = ctx;
    const struct adm_device *x = &d->snap.devs[c->dev];
    enum accel_err rc = state_save_device(d, c->dev, c->st);
    if (rc == ACCEL_OK)
        state_event(d, "device.mode", NULL, d->snap.nodes[x->node].name,
                    x->id,
                    json_pack("{s:s, s:s, s:i}", "from",
                              accel_support_name(x->st), "to",
                              accel_support_name(c->st), "stoppedApps",
                              (int)n),
                    "device %s switched from %s to %s (%zu apps stopped)",
                    x->id, accel_support_label(x->st),
                    accel_support_label(c->st), n);
    return rc;
}

/* *done: the apps released, when it fails after some were. */
static enum accel_err commit_switch(struct accel_daemon *d, int dev,
                                    enum accel_support st, struct app **apps,
                                    size_t n, size_t *done)
{
    struct release_ctx c = {apps, "mode-switch", NULL, dev, st};
    struct state_parts p = {n, release_stage, release_apply, switch_last, &c};
    enum accel_err rc = state_commit_parts(d, &p, done);
    if (rc != ACCEL_OK)
        return rc;
    d->snap.devs[dev].st = st;
    adm_index_update_dev(&d->snap, (uint32_t)dev);
    view_touch(d, dev);
    return ACCEL_OK;
}

/* Apps whose processes still hold the GPU after the stop wait in
 * `releasing` with their rows (SPEC 2.7, 8.3); the others are switched. */
static bool on_device(const struct app *a, int dev)
{
    for (size_t k = 0; k < a->nrows; k++)
        if ((int)a->rows[k].dev == dev)
            return true;
    return false;
}

static json_t *stopped_entry(const struct app *a)
{
    return json_pack("{s:s, s:s, s:s}", "appName", a->name, "owner",
                     a->owner, "state", app_state_name(a->state));
}

/* Stop the processes of the bound apps (the lock is released while each
 * stops; apps are found again by name afterwards). Lists the ones that
 * have left dev meanwhile: another node's agent stopped and released
 * them (ops_stop_processes). */
static json_t *stop_bound(struct accel_daemon *d, int dev, struct app **apps,
                          size_t n)
{
    char *names[SWITCH_MAX_APPS];
    json_t *gone = json_array();
    for (size_t i = 0; i < n; i++)
        names[i] = xstrdup(apps[i]->name);
    for (size_t i = 0; i < n; i++) {
        struct app *a = state_app_find(d, names[i]);
        if (a)
            a = ops_stop_processes(d, a);
        if (a && !on_device(a, dev))
            json_array_append_new(gone, stopped_entry(a));
        free(names[i]);
    }
    return gone;
}

/* The apps another node runs that still run after the switch's stop:
 * their agents have not finished (ops_stop_processes waited its bound), or
 * the stop could not be saved. An agent that has stopped one has released
 * it too, so it is no longer bound; this node's own stopped apps stay
 * `stopping` until the switch commits. */
static json_t *still_running_elsewhere(struct accel_daemon *d,
                                       struct app **apps, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct app *a = apps[i];
        if (ops_runs_elsewhere_still(d, a))
            json_array_append_new(
                arr, blocked_entry(a, "stop-still-in-progress"));
    }
    return arr;
}

/* The apps bound now that the switch did not stop: bound while the lock
 * was let go for its stops (an install or a resume through another request
 * or node), or with a process or a start under way since. Saved `stopped`
 * with the switch, such an app would run on, or start, unseen (the
 * randomized test saw an app started by its node while the switch stopped
 * the others, then placed and run on a second machine). first: the names
 * of the apps bound when the switch began. */
static json_t *bound_meanwhile(struct app **apps, size_t n, char **first,
                               size_t nfirst)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct app *a = apps[i];
        bool known = false;
        for (size_t k = 0; k < nfirst && !known; k++)
            known = strcmp(first[k], a->name) == 0;
        if (known && a->pid <= 0 && !a->committing &&
            a->state != APP_RESUMING)
            continue;
        json_array_append_new(
            arr, blocked_entry(a, "stop-operation-not-allowed"));
    }
    return arr;
}

/* Is name among the apps of a blockedApps list? */
static bool blocked_names(const json_t *blocked, const char *name)
{
    size_t i;
    json_t *x;
    json_array_foreach(blocked, i, x)
        if (strcmp(json_string_value(json_object_get(x, "appName")), name) ==
            0)
            return true;
    return false;
}

/* Did the switch's own stop leave processes of some app on the GPU? */
static bool any_lingering(struct app **apps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (apps[i]->rel.linger > 0)
            return true;
    return false;
}

/* Settle every stopped app: one whose processes still hold the GPU becomes
 * `releasing` and keeps its binding, the others are released. Lists the
 * released ones. */
static json_t *settle_stopped(struct accel_daemon *d, struct app **apps,
                              size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        bool lingering = apps[i]->rel.linger > 0;
        lifecycle_commit_release(d, apps[i], APP_STOPPED, "mode-switch");
        if (!lingering)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "appName",
                                                 apps[i]->name, "owner",
                                                 apps[i]->owner, "state",
                                                 "stopped"));
    }
    return arr;
}

/* The switch refused (422) for the apps of blocked; stopped (or NULL)
 * names the apps it stopped before it found them. Takes both. */
static void answer_blocked(struct accel_daemon *d, int dev, json_t *blocked,
                           json_t *stopped, struct op_result *res)
{
    json_t *v = json_pack("{s:s, s:o, s:o}", "status",
                          "bound-apps-stop-blocked", "device",
                          view_device(d, dev, NULL), "blockedApps", blocked);
    if (stopped)
        json_object_set_new(v, "stoppedApps", stopped);
    ops_res_check(res, "computeDeviceSwitchBlocked", v);
}

void ops_switch(struct accel_daemon *d, const char *node, const char *device,
                const char *support, struct op_result *res)
{
    enum accel_support st;
    struct app *apps[SWITCH_MAX_APPS];
    char *first[SWITCH_MAX_APPS];
    json_t *blocked, *stopped, *gone;
    size_t n, nfirst = 0, done = 0;
    int dev;
    enum accel_err rc;

    pthread_mutex_lock(&d->lock);
    dev = find_device(d, node, device, res);
    if (dev < 0)
        goto out;
    if (support == NULL || !accel_support_parse(support, &st)) {
        ops_res_error(res, 400, "invalid-argument",
                      "supportType must be Exclusive, MemorySlice or "
                      "TimeSlice (got \"%s\")", support ? support : "");
        goto out;
    }
    if (!accel_type_allows(d->snap.devs[dev].type, st)) {
        ops_res_error(res, 400, "invalid-argument",
                      "supportType %s is not available for type %s",
                      accel_support_name(st),
                      accel_type_name(d->snap.devs[dev].type));
        goto out;
    }
    if (d->snap.devs[dev].st == st) {
        ops_res_ok(res, 200, json_pack("{s:s, s:o, s:[]}", "status",
                                       "unchanged", "device",
                                       view_device(d, dev, NULL), "stoppedApps"));
        goto out;
    }
    n = bound_apps(d, dev, apps, SWITCH_MAX_APPS);
    if (n > 0 && ops_node_away(d, dev, "switch its mode", res))
        goto out;
    blocked = blocked_list(apps, n);
    if (json_array_size(blocked) > 0) {
        answer_blocked(d, dev, blocked, NULL, res);
        goto out;
    }
    json_decref(blocked);
    for (size_t i = 0; i < n; i++)
        first[i] = xstrdup(apps[i]->name);
    nfirst = n;
    gone = stop_bound(d, dev, apps, n);
    n = bound_apps(d, dev, apps, SWITCH_MAX_APPS);
    /* one another node's agent has not stopped keeps its card: that agent
     * releases it once it has (nothing on its behalf here) */
    blocked = still_running_elsewhere(d, apps, n);
    if (json_array_size(blocked) > 0) {
        answer_blocked(d, dev, blocked, gone, res);
        goto out;
    }
    json_decref(blocked);
    blocked = bound_meanwhile(apps, n, first, nfirst);
    if (json_array_size(blocked) > 0) {
        /* the apps it did stop are released and named, as below */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (!blocked_names(blocked, apps[i]->name))
                apps[k++] = apps[i];
        stopped = settle_stopped(d, apps, k);
        json_array_extend(stopped, gone);
        json_decref(gone);
        answer_blocked(d, dev, blocked, stopped, res);
        goto out;
    }
    json_decref(blocked);
    /* an app whose processes still hold the GPU after its stop (releasing)
     * could not be stopped: the mode stays (SPEC 2.7); the apps that did
     * stop cannot be restarted behind the user's back, so they are
     * released and named */
    if (any_lingering(apps, n)) {
        stopped = settle_stopped(d, apps, n);
        json_array_extend(stopped, gone);
        json_decref(gone);
        blocked = blocked_list(apps, n);
        answer_blocked(d, dev, blocked, stopped, res);
        goto out;
    }
    stopped = gone;
    for (size_t i = 0; i < n; i++)
        json_array_append_new(stopped,
                              json_pack("{s:s, s:s, s:s}", "appName",
                                        apps[i]->name, "owner", apps[i]->owner,
                                        "state", "stopped"));
    rc = commit_switch(d, dev, st, apps, n, &done);
    if (rc != ACCEL_OK) {
        json_decref(stopped);
        if (done > 0)
            ops_res_error(res, accel_err_http_status(rc), accel_err_name(rc),
                          "device %s was not switched (%s); %zu of its %zu "
                          "apps were stopped and released before: retry",
                          d->snap.devs[dev].id, store_errmsg(d->store), done,
                          n);
        else
            ops_res_store_failed(res, rc);
        goto out;
    }
    ops_res_ok(res, 200, json_pack("{s:s, s:o, s:o}", "status", "switched",
                                   "device", view_device(d, dev, NULL),
                                   "stoppedApps", stopped));
out:
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < nfirst; i++)
        free(first[i]);
}

void ops_node_enable(struct accel_daemon *d, const char *node, bool enabled,
                     struct op_result *res)
{
    int n;
    enum accel_err rc;
    struct store_node row;

    pthread_mutex_lock(&d->lock);
    n = state_node_find(d, node);
    if (n < 0) {
        ops_res_error(res, 404, "not-found", "node \"%s\" not found", node);
        goto out;
    }
    row = (struct store_node){.name = node, .enabled = enabled};
    rc = state_tx_begin(d);
    if (rc == ACCEL_OK)
        rc = store_node_put(d->store, &row);
    if (rc == ACCEL_OK)
        state_event(d, "node.enable", NULL, node, NULL, NULL,
                    "node %s accelerators %s", node,
                    enabled ? "enabled" : "disabled");
    rc = state_tx_end(d, rc);
    if (rc != ACCEL_OK) {
        ops_res_store_failed(res, rc);
        goto out;
    }
    d->snap.nodes[n].enabled = enabled;
    adm_index_update_node(&d->snap, (uint32_t)n);
    for (uint32_t k = 0; k < d->snap.nodes[n].ndev; k++)
        view_touch(d, (int)(d->snap.nodes[n].first_dev + k));
    ops_res_ok(res, 200, view_node(d, n, NULL));
out:
    pthread_mutex_unlock(&d->lock);
}

/*
 * Forget node (SPEC 10, `accelctl node remove`): its registration, its
 * row and, with force, the bindings of every app bound there (those apps
 * become `stopped`, reason node-removed, in the same transaction). Only a
 * cluster has nodes to forget, and only one whose agent is gone: a node
 * that still holds its lease would register again at once. Without force,
 * apps bound there refuse it (409, naming them).
 */
/* The node's rows, after (or with) its apps' releases. */
static enum accel_err node_last(struct accel_daemon *d, size_t n, void *ctx)
{
    struct release_ctx *c = ctx;
    enum accel_err rc = store_node_delete(d->store, c->node);
    if (rc == ACCEL_OK)
        rc = store_member_delete(d->store, "nodeinfo", c->node);
    if (rc == ACCEL_OK)
        state_event(d, "node.remove", NULL, c->node, NULL, NULL,
                    "node %s was removed from the cluster%s", c->node,
                    n ? " and its apps stopped" : "");
    return rc;
}

void ops_node_remove(struct accel_daemon *d, const char *node, bool force,
                     struct op_result *res)
{
    int n;
    enum accel_err rc;
    json_t *stopped = json_array();
    struct app **hit = NULL;
    size_t nhit = 0, done = 0;
    struct release_ctx c;
    struct state_parts parts;

    pthread_mutex_lock(&d->lock);
    n = state_node_find(d, node);
    if (!store_is_cluster(d->store)) {
        ops_res_error(res, 400, "not-supported",
                      "this acceld keeps one machine (no --etcd): there is "
                      "no cluster node to remove");
        goto out;
    }
    if (n < 0 || d->ninfo[n].removed) {
        ops_res_error(res, 404, "not-found", "node \"%s\" not found", node);
        goto out;
    }
    if (d->ninfo[n].local || d->ninfo[n].reachable) {
        ops_res_error(res, 409, "conflict",
                      "node %s is running (its agent holds its lease): stop "
                      "its acceld first, or it registers again at once",
                      node);
        goto out;
    }
    hit = xcalloc(d->napps + 1, sizeof(*hit));
    for (size_t i = 0; i < d->napps; i++) {
        struct app *a = d->apps[i];
        for (size_t k = 0; k < a->nrows; k++) {
            if (d->snap.devs[a->rows[k].dev].node == (uint32_t)n) {
                hit[nhit++] = a;
                json_array_append_new(stopped, json_string(a->name));
                break;
            }
        }
    }
    if (nhit > 0 && !force) {
        ops_res_error(res, 409, "conflict",
                      "%zu app%s %s bound to node %s (%s%s): stop %s first, "
                      "or remove the node with --force, which stops and "
                      "releases %s",
                      nhit, nhit == 1 ? "" : "s", nhit == 1 ? "is" : "are",
                      node, hit[0]->name, nhit > 1 ? ", ..." : "",
                      nhit == 1 ? "it" : "them", nhit == 1 ? "it" : "them");
        goto out;
    }
    c = (struct release_ctx){hit, "node-removed", node, -1, 0};
    parts = (struct state_parts){nhit, release_stage, release_apply,
                                 node_last, &c};
    rc = state_commit_parts(d, &parts, &done);
    if (rc != ACCEL_OK) {
        if (done > 0)
            ops_res_error(res, accel_err_http_status(rc),
                          accel_err_name(rc),
                          "node %s was not removed (%s); %zu of its %zu "
                          "apps were stopped and released before: retry",
                          node, store_errmsg(d->store), done, nhit);
        else
            ops_res_store_failed(res, rc);
        goto out;
    }
    /* the watch marks the node removed on every node, this one included,
     * before the answer goes out (store_sync waits for it) */
    ops_res_ok(res, 200, json_pack("{s:s, s:s, s:O}", "node", node, "status",
                                   "removed", "stoppedApps", stopped));
out:
    json_decref(stopped);
    free(hit);
    pthread_mutex_unlock(&d->lock);
}

/* ---- time-slice settings (the brokers read them: node/broker_ops.c) ---- */

static bool parse_ms(const json_t *b, const char *key, uint32_t lo,
                     uint32_t hi, json_t *ts, struct op_result *res)
{
    json_t *v = json_object_get(b, key);
    if (v == NULL)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < lo ||
        json_integer_value(v) > hi) {
        ops_res_error(res, 400, "invalid-argument",
                      "%s must be an integer from %u to %u", key, lo, hi);
        return false;
    }
    json_object_set(ts, key, v);
    return true;
}

/* Device `device` of `node` (lock held) and a copy of its settings with
 * the object `key` in it (*sub); -1 with a 404 in res when there is no
 * such device. */
static int settings_edit(struct accel_daemon *d, const char *node,
                         const char *device, const char *key,
                         json_t **settings, json_t **sub,
                         struct op_result *res)
{
    int n = state_node_find(d, node), dev = state_dev_find(d, device);

    if (n < 0 || dev < 0 || (int)d->snap.devs[dev].node != n) {
        ops_res_error(res, 404, "not-found", "device \"%s\" not found on "
                      "node %s", device, node);
        return -1;
    }
    *settings = d->dinfo[dev].settings
                    ? json_deep_copy(d->dinfo[dev].settings)
                    : json_object();
    *sub = json_object_get(*settings, key);
    if (!json_is_object(*sub)) {
        *sub = json_object();
        json_object_set_new(*settings, key, *sub);
    }
    return dev;
}

/* Store *settings as dev's (lock held); on success they are the device's
 * and *settings holds the old ones for the caller to drop. false with a
 * 500 in res when the store refused (nothing changed). */
static bool settings_store(struct accel_daemon *d, int dev, json_t **settings,
                           struct op_result *res)
{
    json_t *old = d->dinfo[dev].settings;
    enum accel_err rc;

    d->dinfo[dev].settings = *settings; /* state_save_device reads it */
    rc = state_tx_begin(d);
    if (rc == ACCEL_OK)
        rc = state_save_device(d, dev, d->snap.devs[dev].st);
    rc = state_tx_end(d, rc);
    if (rc != ACCEL_OK) {
        d->dinfo[dev].settings = old;
        ops_res_error(res, 500, accel_err_name(rc), "%s", accel_strerror(rc));
        return false;
    }
    *settings = old;
    state_dev_settings_applied(d, dev);
    view_touch(d, dev);
    return true;
}

void ops_timeslice_set(struct accel_daemon *d, const char *node,
                       const char *device, const json_t *body,
                       struct op_result *res)
{
    int dev;
    json_t *settings = NULL, *ts;

    pthread_mutex_lock(&d->lock);
    dev = settings_edit(d, node, device, "timeSlice", &settings, &ts, res);
    if (dev < 0)
        goto out;
    if (!parse_ms(body, "quantumMs", BROKER_MIN_QUANTUM_MS,
                  BROKER_MAX_QUANTUM_MS, ts, res) ||
        !parse_ms(body, "idleReleaseMs", 1, BROKER_MAX_IDLE_MS, ts, res) ||
        !parse_ms(body, "revokeGraceMs", BROKER_MIN_GRACE_MS,
                  BROKER_MAX_GRACE_MS, ts, res) ||
        !parse_ms(body, "oversubscribedQuantumMs", BROKER_MIN_QUANTUM_MS,
                  BROKER_MAX_QUANTUM_MS, ts, res) ||
        !parse_ms(body, "idleReleaseUs", BROKER_MIN_IDLE_US,
                  BROKER_MAX_IDLE_MS, ts, res) ||
        !parse_ms(body, "minTurnUs", 100, 1000000, ts, res) ||
        !parse_ms(body, "pagingPercent", 1, 50, ts, res))
        goto out;
    /* the idle time is one setting in two units: the one given wins */
    if (json_object_get(body, "idleReleaseMs") != NULL &&
        json_object_get(body, "idleReleaseUs") == NULL)
        json_object_del(ts, "idleReleaseUs");
    else if (json_object_get(body, "idleReleaseUs") != NULL &&
             json_object_get(body, "idleReleaseMs") == NULL)
        json_object_del(ts, "idleReleaseMs");
    if (!settings_store(d, dev, &settings, res))
        goto out;
    ops_res_ok(res, 200,
               json_pack("{s:s, s:O}", "device", device, "timeSlice",
                         json_object_get(d->dinfo[dev].settings,
                                         "timeSlice")));
out:
    json_decref(settings);
    pthread_mutex_unlock(&d->lock);
}

/* ---- the outside meter's settings (node/meter.c reads them) ---- */

/* Every key of body is one of `keys`; else a 400 naming the first that is
 * not. */
static bool known_keys(const json_t *body, const char *const *keys,
                       struct op_result *res)
{
    const char *k;
    json_t *v;

    json_object_foreach((json_t *)body, k, v) {
        size_t i = 0;
        while (keys[i] != NULL && strcmp(keys[i], k) != 0)
            i++;
        if (keys[i] == NULL) {
            ops_res_error(res, 400, "invalid-argument",
                          "%s is not a meter setting (overQuotaAction, "
                          "tolerance)", k);
            return false;
        }
    }
    return true;
}

/* tolerance: bytes as an integer or a quantity ("64Mi"), 0 to the
 * device's memory, into m. */
static bool parse_tolerance(const json_t *body, uint64_t max, json_t *m,
                            struct op_result *res)
{
    json_t *v = json_object_get(body, "tolerance");
    uint64_t b = 0;
    bool ok;

    if (v == NULL)
        return true;
    if (json_is_integer(v)) {
        ok = json_integer_value(v) >= 0;
        b = ok ? (uint64_t)json_integer_value(v) : 0;
    } else {
        ok = json_is_string(v) &&
             quantity_parse_bytes(json_string_value(v), &b) == ACCEL_OK;
    }
    if (!ok || b > max) {
        ops_res_error(res, 400, "invalid-argument",
                      "tolerance must be bytes (an integer, or a quantity "
                      "such as \"64Mi\") from 0 to the device's memory "
                      "(%llu)", (unsigned long long)max);
        return false;
    }
    json_object_set_new(m, "tolerance", json_integer((json_int_t)b));
    return true;
}

static bool parse_action(const json_t *body, json_t *m, struct op_result *res)
{
    json_t *v = json_object_get(body, "overQuotaAction");
    const char *s = json_string_value(v);

    if (v == NULL)
        return true;
    if (s == NULL || (strcmp(s, "report") != 0 && strcmp(s, "stop") != 0)) {
        ops_res_error(res, 400, "invalid-argument",
                      "overQuotaAction must be \"report\" or \"stop\"");
        return false;
    }
    json_object_set(m, "overQuotaAction", v);
    return true;
}

void ops_meter_set(struct accel_daemon *d, const char *node,
                   const char *device, const json_t *body,
                   struct op_result *res)
{
    static const char *const keys[] = {"overQuotaAction", "tolerance", NULL};
    int dev;
    json_t *settings = NULL, *m;
    enum accel_type t;

    pthread_mutex_lock(&d->lock);
    dev = settings_edit(d, node, device, "meter", &settings, &m, res);
    if (dev < 0)
        goto out;
    t = d->snap.devs[dev].type;
    if (!meter_type(t)) {
        ops_res_error(res, 400, "invalid-argument",
                      "device %s is not an NVIDIA or AMD GPU: the outside "
                      "meter reads NVML and the amdgpu driver's fdinfo",
                      device);
        goto out;
    }
    if (!json_is_object(body) || !known_keys(body, keys, res) ||
        !parse_action(body, m, res) ||
        !parse_tolerance(body, d->snap.devs[dev].memory, m, res))
        goto out;
    if (!settings_store(d, dev, &settings, res))
        goto out;
    ops_res_ok(res, 200, json_pack("{s:s, s:o}", "device", device, "meter",
                                   meter_settings_json(d, (size_t)dev)));
out:
    json_decref(settings);
    pthread_mutex_unlock(&d->lock);
}

/* ---- elastic memory (SPEC 4.4; docs/elastic.md) ---- */

static bool elastic_keys(const json_t *body, struct op_result *res)
{
    const char *k;
    json_t *v;

    if (!json_is_object(body)) {
        ops_res_error(res, 400, "invalid-argument",
                      "the body must be an object: {\"overcommit\": 1.5, "
                      "\"reclaimWaitMs\": 10000}");
        return false;
    }
    json_object_foreach((json_t *)body, k, v) {
        if (strcmp(k, "overcommit") != 0 && strcmp(k, "reclaimWaitMs") != 0) {
            ops_res_error(res, 400, "invalid-argument",
                          "%s is not an elastic setting (overcommit, "
                          "reclaimWaitMs)", k);
            return false;
        }
    }
    return true;
}

/* overcommit: a number from 1 to 4 (thousandths kept), into *oc. */
static bool parse_overcommit(const json_t *body, uint32_t *oc,
                             struct op_result *res)
{
    json_t *v = json_object_get(body, "overcommit");
    double r;

    if (v == NULL)
        return true;
    r = json_is_number(v) ? json_number_value(v) : 0.0;
    if (!json_is_number(v) || !(r >= 1.0 && r <= 4.0)) {
        ops_res_error(res, 400, "invalid-argument",
                      "overcommit must be a number from 1 (off) to 4: the "
                      "quotas on the device may sum to that many times its "
                      "memory");
        return false;
    }
    *oc = (uint32_t)(r * ADM_OVERCOMMIT_ONE + 0.5);
    return true;
}

void ops_elastic_set(struct accel_daemon *d, const char *node,
                     const char *device, const json_t *body,
                     struct op_result *res)
{
    int dev;
    json_t *settings = NULL, *e;
    struct adm_device *x, probe;
    uint32_t oc = 0;

    pthread_mutex_lock(&d->lock);
    dev = settings_edit(d, node, device, "elastic", &settings, &e, res);
    if (dev < 0)
        goto out;
    x = &d->snap.devs[dev];
    if (!elastic_keys(body, res) || !parse_overcommit(body, &oc, res) ||
        !parse_ms(body, "reclaimWaitMs", 0, STATE_RECLAIM_WAIT_MAX_MS, e,
                  res))
        goto out;
    if (oc > ADM_OVERCOMMIT_ONE &&
        (!accel_type_elastic(x->type) || x->st != ACCEL_SUPPORT_MEMSLICE)) {
        ops_res_error(res, 400, "invalid-argument",
                      "overcommit above 1 needs a Memory-slicing GPU: device "
                      "%s is %s", device, accel_type_elastic(x->type)
                                              ? accel_support_name(x->st)
                                              : "without GPU memory acceld "
                                                "can take back");
        goto out;
    }
    if (oc != 0) {
        probe = *x;
        probe.overcommit = oc;
        if (x->st == ACCEL_SUPPORT_MEMSLICE &&
            x->allocated > adm_memslice_capacity(&probe)) {
            char have[32], cap[32];
            quantity_format_gib(x->allocated, have, sizeof have);
            quantity_format_gib(adm_memslice_capacity(&probe), cap,
                                sizeof cap);
            ops_res_error(res, 409, "conflict",
                          "overcommit %.3g lets the quotas on %s sum to %s, "
                          "but those of the apps bound there sum to %s: "
                          "lower a quota or unbind an app first",
                          (double)oc / ADM_OVERCOMMIT_ONE, device, cap, have);
            goto out;
        }
        json_object_set_new(e, "overcommit",
                            oc % ADM_OVERCOMMIT_ONE == 0
                                ? json_integer(oc / ADM_OVERCOMMIT_ONE)
                                : json_real((double)oc / ADM_OVERCOMMIT_ONE));
    }
    if (!settings_store(d, dev, &settings, res))
        goto out;
    ops_res_ok(res, 200, json_pack("{s:s, s:o}", "device", device, "elastic",
                                   view_elastic_json(d, dev)));
out:
    json_decref(settings);
    pthread_mutex_unlock(&d->lock);
}
