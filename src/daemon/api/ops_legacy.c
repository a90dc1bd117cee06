/* SPDX-License-Identifier: MIT */
/*
 * ops_legacy.c: the legacy GPU moves of SPEC 5.3 (bind one app to one GPU,
 * unassign, bulk move) and preflight (SPEC 2.8). The legacy routes speak
 * MiB and answer 409 where the old scheduler did.
 */
#include "common/accel_setup.h"
#include "daemon/api/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/quantity.h"
#include "common/util.h"
#include "daemon/api/auth.h"
#include "daemon/api/ops_int.h"
#include "daemon/api/view.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/runtime/launch.h"
#include "daemon/state.h"

#define MIB (1024ULL * 1024ULL)

/* The app holding dev other than a, or NULL. */
static struct app *holder(struct accel_daemon *d, int dev, const struct app *a)
{
    for (size_t i = 0; i < d->napps; i++) {
        struct app *x = d->apps[i];
        if (x == a)
            continue;
        for (size_t k = 0; k < x->nrows; k++)
            if ((int)x->rows[k].dev == dev)
                return x;
    }
    return NULL;
}

/* How h is named to u: *pre "app " and its name, or "" and "another
 * user's app" for a member who may not see it (SPEC 3). */
static const char *holder_name(const struct auth_user *u, const struct app *h,
                               const char **pre)
{
    bool hidden = view_hides(u, h);
    *pre = hidden ? "" : "app ";
    return hidden ? "another user's app" : h->name;
}

/* May a hold sel[0..n) (its own rows taken out)? rows gets the rows;
 * else res is set. */
static bool move_allowed(struct accel_daemon *d, struct app *a, int ri,
                         const struct adm_sel *sel, size_t n,
                         struct adm_row *rows, struct op_result *res)
{
    struct adm_verdict v;

    if (!ops_validate_own(d, a, &a->m.req[ri], sel, n, &v, rows)) {
        /* res keeps the code it answers with (a local buffer would be
         * gone by the time the answer is written) */
        adm_verdict_format(&v, res->code_buf, sizeof res->code_buf);
        ops_res_error(res, v.code == ADM_DEVICE_NOT_FOUND ? 404 : 409,
                      res->code_buf, "%s", view_code_sentence(v.code));
        return false;
    }
    return ops_limits_gpu(d, a, rows, n, res);
}

/* Validate rows for a with its own rows taken out; commit; restart. */
static void rebind(struct accel_daemon *d, struct app *a,
                   const struct adm_sel *sel, size_t n, struct op_result *res)
{
    struct adm_row rows[ADM_MAX_SELECTION];
    struct op_binding b = {.n = n};
    int ri;
    bool restart, was_running = a->state == APP_RUNNING;
    enum accel_err rc;

    memcpy(b.sel, sel, n * sizeof(*sel));
    ri = ops_pick_req(d, a, &b);
    if (!move_allowed(d, a, ri, sel, n, rows, res))
        return;
    if (was_running && a->pid > 0) {
        /* another node's agent stops it there: never moved while that
         * node is away or has not stopped it (it would run twice) */
        if (ops_app_away(d, a, "move it", res))
            return;
        a = ops_stop_processes(d, a);
        if (a == NULL) {
            ops_res_error(res, 404, "not-found", "the app is gone");
            return;
        }
        if (ops_runs_elsewhere_still(d, a)) {
            ops_res_error(res, 409, "ops_busy",
                          "app %s has not been stopped by its node yet; "
                          "retry when it has", a->name);
            return;
        }
        /* the lock was released while it stopped: the cards may have
         * been given to others meanwhile. Then the move is refused and
         * the app, stopped by now, is released (as a mode switch's
         * stopped apps are), not started where it no longer fits. */
        if (!move_allowed(d, a, ri, sel, n, rows, res)) {
            if (a->state == APP_STOPPING &&
                lifecycle_commit_release(d, a, APP_STOPPED,
                                         "move-refused") != ACCEL_OK)
                log_warn("app %s: could not save its stop", a->name);
            return;
        }
    }
    /* an external app that was running stays running in the same
     * transaction; one with a process is restarted on its new GPUs */
    restart = was_running && manifest_runs(&a->m);
    rc = ops_commit_bind(d, a, ri, rows, n,
                         restart ? APP_RESUMING : a->state, a->reason);
    if (rc != ACCEL_OK) {
        ops_res_store_failed(res, rc);
        return;
    }
    if (restart)
        launch_app(d, a, RUNNER_SEEN, lifecycle_commit_state);
    ops_res_ok(res, 200, json_pack("{s:s}", "status", "ok"));
}

void ops_legacy_bind(struct accel_daemon *d, const struct auth_user *u,
                     const char *id, const char *name, uint64_t mem_mib,
                     bool force, struct op_result *res)
{
    struct app *a, *h;
    struct adm_sel sel;
    int dev;

    pthread_mutex_lock(&d->lock);
    a = ops_find_app(d, u, name, res);
    if (a == NULL || ops_busy(a, res))
        goto out;
    dev = state_dev_find(d, id);
    if (dev < 0) {
        ops_res_error(res, 404, "not-found", "GPU %s not found", id);
        goto out;
    }
    h = holder(d, dev, a);
    if (d->snap.devs[dev].st == ACCEL_SUPPORT_EXCLUSIVE && h) {
        const char *pre, *hn = holder_name(u, h, &pre);
        if (!force) {
            ops_res_error(res, 409, "exclusive-already-bound",
                          "GPU %s is in App exclusive mode and already "
                          "assigned to %s%s; refusing to assign it to app "
                          "%s (send force: true to replace it)",
                          id, pre, hn, name);
            goto out;
        }
        if (!auth_may_act(u, h->owner)) {
            /* force never evicts what the caller may not stop */
            ops_res_error(res, 403, "forbidden",
                          "GPU %s is held by %s%s; only %s may replace it",
                          id, pre, hn,
                          strcmp(h->owner, ACCEL_SHARED_OWNER) == 0
                              ? "an admin"
                              : "its owner or an admin");
            goto out;
        }
        if (ops_in_transition(h)) {
            /* its stop, uninstall or install is under way: replacing it
             * now would undo that (a stopped app must not come back bound,
             * an uninstalled one must not come back at all) */
            ops_res_error(res, 409, "ops_busy",
                          "GPU %s is held by %s%s, which is %s; retry when "
                          "it has finished", id, pre, hn,
                          ops_transition_name(h));
            goto out;
        }
        if (ops_node_away(d, dev, "assign it", res))
            goto out;
        h = ops_stop_processes(d, h);
        if (h && ops_runs_elsewhere_still(d, h)) {
            /* its agent has not stopped it within the wait: that agent
             * releases it once it has, nothing here on its behalf (h was
             * found again: its name is named afresh) */
            hn = holder_name(u, h, &pre);
            ops_res_error(res, 409, "ops_busy",
                          "GPU %s is held by %s%s, whose node has not "
                          "stopped it yet; retry when it has", id, pre, hn);
            goto out;
        }
        /* an app its agent stopped has been released there already */
        if (h && h->nrows > 0 &&
            lifecycle_commit_release(d, h, APP_STOPPED,
                                     "replaced-by-force") != ACCEL_OK) {
            ops_res_error(res, 500, "store-error", "could not release %s",
                          h->name);
            goto out;
        }
        a = state_app_find(d, name);
        if (a == NULL) {
            ops_res_error(res, 404, "not-found",
                          "app %s is gone (uninstalled while %s stopped)",
                          name, id);
            goto out;
        }
    }
    if (d->snap.devs[dev].st == ACCEL_SUPPORT_MEMSLICE && mem_mib == 0) {
        ops_res_error(res, 400, "memory-required",
                      "memory (MiB) is required for GPU %s in Memory slicing "
                      "mode", id);
        goto out;
    }
    sel = (struct adm_sel){.node = d->snap.nodes[d->snap.devs[dev].node].name,
                           .device = d->snap.devs[dev].id,
                           .memory = mem_mib * MIB};
    rebind(d, a, &sel, 1, res);
out:
    pthread_mutex_unlock(&d->lock);
}

void ops_legacy_unassign(struct accel_daemon *d, const struct auth_user *u,
                         const char *id, const char *name,
                         struct op_result *res)
{
    struct app *a;
    int dev;
    bool bound = false;

    pthread_mutex_lock(&d->lock);
    dev = state_dev_find(d, id);
    if (dev < 0) {
        ops_res_error(res, 404, "not-found", "GPU %s not found", id);
        pthread_mutex_unlock(&d->lock);
        return;
    }
    a = ops_find_app(d, u, name, res);
    if (a)
        for (size_t k = 0; k < a->nrows; k++)
            bound = bound || (int)a->rows[k].dev == dev;
    pthread_mutex_unlock(&d->lock);
    if (a == NULL)
        return;
    if (!bound) {
        ops_res_error(res, 404, "not-found", "app %s is not assigned to GPU %s",
                      name, id);
        return;
    }
    /* removing from one GPU releases all of them (SPEC 2.7) */
    ops_unbind(d, u, name, res);
}

static bool bulk_item(const json_t *item, const char *field, size_t i,
                      const char **id, uint64_t *mib, struct op_result *res)
{
    const json_t *v = json_object_get(item, "id");
    const json_t *m = json_object_get(item, "memory");
    if (!json_is_string(v)) {
        ops_res_error(res, 400, "invalid-argument", "%s[%zu].id is required",
                      field, i);
        return false;
    }
    *id = json_string_value(v);
    *mib = 0;
    if (m && !json_is_null(m)) {
        if (json_is_string(m)) {
            char *end;
            unsigned long long x = strtoull(json_string_value(m), &end, 10);
            if (*end || json_string_value(m)[0] == '-' ||
                x > QUANTITY_MAX / MIB) {
                ops_res_error(res, 400, "invalid-argument",
                              "%s[%zu].memory must be a number of MiB", field,
                              i);
                return false;
            }
            *mib = x;
        } else if (json_is_integer(m) && json_integer_value(m) >= 0 &&
                   (uint64_t)json_integer_value(m) <= QUANTITY_MAX / MIB) {
            *mib = (uint64_t)json_integer_value(m);
        } else {
            ops_res_error(res, 400, "invalid-argument",
                          "%s[%zu].memory must be a non-negative number of "
                          "MiB", field, i);
            return false;
        }
    }
    return true;
}

void ops_bulk(struct accel_daemon *d, const struct auth_user *u,
              const char *name, const json_t *unassign, const json_t *assign,
              struct op_result *res)
{
    struct adm_sel sel[ADM_MAX_SELECTION];
    size_t n = 0, i;
    const json_t *item;
    struct app *a;

    if ((unassign && !json_is_array(unassign)) || !json_is_array(assign)) {
        ops_res_error(res, 400, "invalid-argument",
                      "assign must be a list of {id, memory} and unassign a "
                      "list of {id}");
        return;
    }
    pthread_mutex_lock(&d->lock);
    a = ops_find_app(d, u, name, res);
    if (a == NULL || ops_busy(a, res))
        goto out;
    /* keep the current rows that are not unassigned */
    for (size_t k = 0; k < a->nrows && n < ADM_MAX_SELECTION; k++) {
        const struct adm_device *x = &d->snap.devs[a->rows[k].dev];
        bool drop = false;
        json_array_foreach(unassign, i, item) {
            const json_t *v = json_object_get(item, "id");
            drop = drop || (json_is_string(v) &&
                            strcmp(json_string_value(v), x->id) == 0);
        }
        if (!drop)
            sel[n++] = (struct adm_sel){d->snap.nodes[x->node].name, x->id,
                                        a->rows[k].memory};
    }
    json_array_foreach(assign, i, item) {
        const char *id;
        uint64_t mib;
        int dev;
        if (!bulk_item(item, "assign", i, &id, &mib, res))
            goto out;
        dev = state_dev_find(d, id);
        if (dev < 0) {
            ops_res_error(res, 404, "not-found", "GPU %s not found", id);
            goto out;
        }
        if (n == ADM_MAX_SELECTION) {
            ops_res_error(res, 400, "invalid-argument", "too many GPUs");
            goto out;
        }
        sel[n++] = (struct adm_sel){d->snap.nodes[d->snap.devs[dev].node].name,
                                    d->snap.devs[dev].id, mib * MIB};
    }
    if (n == 0) {
        pthread_mutex_unlock(&d->lock);
        ops_unbind(d, u, name, res);
        return;
    }
    rebind(d, a, sel, n, res);
out:
    pthread_mutex_unlock(&d->lock);
}

/* One quantity of a demand in app-service's wire form: a required,
 * non-negative quantity string (SPEC 5.1). False with res set (400 naming
 * the field: a missing key is never read as 0). */
static bool demand_qty(const json_t *dm, size_t i, const char *key, bool cpu,
                       uint64_t *out, struct op_result *res)
{
    const json_t *v = json_object_get(dm, key);
    const char *s = json_string_value(v);
    enum accel_err rc;
    if (v == NULL || json_is_null(v) || (s != NULL && s[0] == '\0')) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands[%zu].%s is required (a quantity string such "
                      "as \"8Gi\", \"2\" or \"0\")", i, key);
        return false;
    }
    if (s == NULL || json_string_length(v) > 256) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands[%zu].%s must be a quantity string of at most "
                      "256 bytes", i, key);
        return false;
    }
    rc = cpu ? quantity_parse_millicores(s, out) : quantity_parse_bytes(s, out);
    if (rc == ACCEL_ERANGE) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands[%zu].%s (%s) is too large (at most 4Ei)", i,
                      key, s);
        return false;
    }
    if (rc != ACCEL_OK) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands[%zu].%s must be a non-negative quantity (got "
                      "\"%s\")", i, key, s);
        return false;
    }
    return true;
}

/* The keys of accel's old preflight form, refused so that a caller still
 * sending them learns the right name instead of getting a silent 0. */
static bool old_key_used(const json_t *dm, size_t i, struct op_result *res)
{
    static const char *const old[][2] = {{"requiredCpu", "requiredCPU"},
                                         {"requiredGpu", "requiredGPU"},
                                         {"limitedGpu", "limitedGPU"}};
    for (size_t k = 0; k < sizeof old / sizeof old[0]; k++)
        if (json_object_get(dm, old[k][0]) != NULL &&
            json_object_get(dm, old[k][1]) == NULL) {
            ops_res_error(res, 400, "invalid-argument",
                          "demands[%zu].%s is required; %s is not a key of "
                          "the preflight wire form", i, old[k][1], old[k][0]);
            return true;
        }
    return false;
}

static bool demand_req(const json_t *dm, size_t i, struct adm_req *r,
                       struct op_result *res)
{
    static const struct {
        const char *key;
        bool cpu;
        size_t off;
    } f[] = {
        {"requiredCPU", true, offsetof(struct adm_req, req_cpu)},
        {"requiredGPU", false, offsetof(struct adm_req, req_gpu)},
        {"limitedGPU", false, offsetof(struct adm_req, lim_gpu)},
        {"requiredMemory", false, offsetof(struct adm_req, req_mem)},
        {"limitedMemory", false, offsetof(struct adm_req, lim_mem)},
        {"requiredDisk", false, offsetof(struct adm_req, req_disk)},
    };
    const json_t *mode = json_object_get(dm, "mode");
    memset(r, 0, sizeof(*r));
    if (!json_is_string(mode) || !accel_type_parse(json_string_value(mode),
                                                   &r->type)) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands[%zu].mode is required: an accelerator type "
                      "(cpu, nvidia, nvidia-gb10, apple-m, intel, amd, "
                      "intel-gpu, amd-gpu, moore-soc)", i);
        return false;
    }
    if (old_key_used(dm, i, res))
        return false;
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
        if (!demand_qty(dm, i, f[k].key, f[k].cpu,
                        (uint64_t *)((char *)r + f[k].off), res))
            return false;
    if (r->lim_gpu && r->lim_gpu < r->req_gpu) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands[%zu].limitedGPU must be zero or at least "
                      "requiredGPU", i);
        return false;
    }
    if (r->lim_mem && r->lim_mem < r->req_mem) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands[%zu].limitedMemory must be zero or at least "
                      "requiredMemory", i);
        return false;
    }
    if (!r->lim_gpu)
        r->lim_gpu = r->req_gpu;
    if (!r->lim_mem)
        r->lim_mem = r->req_mem;
    r->multi_nodes = json_is_true(json_object_get(dm, "supportMultiNodes")) &&
                     r->type == ACCEL_TYPE_NVIDIA;
    r->multi_cards = r->multi_nodes ||
                     (json_is_true(json_object_get(dm, "supportMultiCards")) &&
                      r->type == ACCEL_TYPE_NVIDIA);
    return true;
}

/* A required non-empty string member of demand i; false with res set. */
static bool demand_string(const json_t *dm, size_t i, const char *key,
                          struct op_result *res)
{
    const json_t *v = json_object_get(dm, key);
    if (json_is_string(v) && json_string_length(v) > 0 &&
        json_string_length(v) <= 256)
        return true;
    ops_res_error(res, 400, "invalid-argument",
                  "demands[%zu].%s is required: a string of 1 to 256 bytes",
                  i, key);
    return false;
}

/* Check demand i's identity and owner (the caller when absent; a member
 * may only ask for itself). False with res set. */
static bool demand_head(const struct auth_user *u, const json_t *demands,
                        size_t i, struct op_result *res)
{
    const json_t *dm = json_array_get(demands, i);
    const json_t *id = json_object_get(dm, "id");
    const char *owner = json_string_value(json_object_get(dm, "owner"));
    if (!json_is_object(dm)) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands[%zu] must be an object", i);
        return false;
    }
    if (!demand_string(dm, i, "id", res) ||
        !demand_string(dm, i, "application", res))
        return false;
    if (owner != NULL && !u->admin && strcmp(owner, u->name) != 0) {
        ops_res_error(res, 403, "forbidden",
                      "demands[%zu].owner \"%s\" is not authorized (a member "
                      "may only ask for itself)", i, owner);
        return false;
    }
    for (size_t k = 0; k < i; k++)
        if (json_equal(json_object_get(json_array_get(demands, k), "id"), id)) {
            ops_res_error(res, 400, "invalid-argument",
                          "demands[%zu]: duplicate id \"%s\"", i,
                          json_string_value(id));
            return false;
        }
    return true;
}

/* accel's preflight failures in app-service's reason vocabulary. */
static const char *preflight_reason(const char *r)
{
    static const char *const map[][2] = {
        {"cluster-capacity", "cluster_capacity"},
        {"cluster-pressure", "cluster_pressure"},
        {"owner-quota", "owner_quota"},
        {"node-pressure", "node_pressure"},
    };
    for (size_t i = 0; r != NULL && i < sizeof map / sizeof map[0]; i++)
        if (strcmp(r, map[i][0]) == 0)
            return map[i][1];
    return "unschedulable";
}

/* [{source, dimensions}] of a cluster check (app-service's form). */
static json_t *cluster_pressure_json(const char *source,
                                     const struct adm_dim dims[3])
{
    static const char *const names[] = {"cpu", "memory", "disk"};
    json_t *a = json_array();
    for (int i = 0; i < 3; i++)
        json_array_append_new(
            a, json_pack("{s:s, s:I, s:I, s:I, s:I, s:b}", "resource",
                         names[i], "capacity", (json_int_t)dims[i].capacity,
                         "used", (json_int_t)dims[i].used, "required",
                         (json_int_t)dims[i].required, "available",
                         (json_int_t)dims[i].available, "pressured",
                         dims[i].pressured));
    return json_pack("[{s:s, s:o}]", "source", source, "dimensions", a);
}

void ops_preflight(struct accel_daemon *d, const struct auth_user *u,
                   const json_t *demands, struct op_result *res)
{
    struct adm_req reqs[64];
    const char *owners[64];
    struct ops_quota q = {.d = d, .owners = owners};
    struct adm_preflight_hook hook = {ops_limits_preflight, &q};
    struct adm_preflight pf;
    size_t n = json_array_size(demands), i;
    const json_t *dm;
    json_t *out;

    if (!json_is_array(demands) || n == 0 || n > 64) {
        ops_res_error(res, 400, "invalid-argument",
                      "demands must list 1 to 64 demands");
        return;
    }
    json_array_foreach(demands, i, dm) {
        if (!demand_head(u, demands, i, res) ||
            !demand_req(dm, i, &reqs[i], res))
            return;
        owners[i] = json_string_value(json_object_get(dm, "owner"));
        if (owners[i] == NULL)
            owners[i] = u->name;
    }
    pthread_mutex_lock(&d->lock);
    if (adm_preflight_hooked(&d->snap, reqs, n, d->cfg.policy, &hook, &pf) !=
        ACCEL_OK) {
        pthread_mutex_unlock(&d->lock);
        ops_res_error(res, 500, "out-of-memory", "preflight ran out of memory");
        return;
    }
    out = json_pack("{s:b}", "installable", pf.installable);
    if (!pf.installable) {
        json_object_set(out, "failedDemandId",
                        json_object_get(json_array_get(demands, pf.failed),
                                        "id"));
        json_object_set_new(out, "reason",
                            json_string(preflight_reason(pf.reason)));
        if (pf.has_pressure) {
            char source[ACCEL_NAME_MAX + 8];
            json_t *np = view_pressure(d, &pf.pressure);
            snprintf(source, sizeof source, "node/%s",
                     d->snap.nodes[pf.pressure.node].name);
            json_object_set_new(
                out, "pressure",
                json_pack("[{s:s, s:O}]", "source", source, "dimensions",
                          json_object_get(np, "dimensions")));
            json_decref(np);
        }
        if (pf.has_cluster)
            json_object_set_new(
                out, "pressure",
                cluster_pressure_json(preflight_reason(pf.reason),
                                      pf.cluster));
        if (q.pressure != NULL)
            json_object_set(out, "pressure", q.pressure);
    }
    json_decref(q.pressure);
    pthread_mutex_unlock(&d->lock);
    ops_res_ok(res, 200, out);
}
