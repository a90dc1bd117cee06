/* SPDX-License-Identifier: MIT */
/*
 * ops.c: lifecycle operations. Shape of each: lock; find and authorize;
 * run the pure rules; write the whole change in one store transaction;
 * change memory only after the commit; unlock. Stopping a real process
 * blocks, so it happens with the lock released while the app is marked
 * `stopping` (which makes other operations on it wait their turn: 409).
 */
#include "common/accel_setup.h"
#include "daemon/api/ops.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/quantity.h"
#include "common/util.h"
#include "daemon/api/auth.h"
#include "daemon/api/metrics.h"
#include "daemon/api/ops_int.h"
#include "daemon/api/view.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/cluster/cluster.h"
#include "daemon/node/enforce/reconcile.h"
#include "daemon/node/proc/disk.h"
#include "daemon/node/proc/homepath.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/proc/proc.h"
#include "daemon/node/runtime/launch.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

void op_result_release(struct op_result *r)
{
    free(r->message);
    json_decref(r->data);
    memset(r, 0, sizeof(*r));
}

void ops_res_error(struct op_result *res, int status, const char *code,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void ops_res_error(struct op_result *res, int status, const char *code,
                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    free(res->message);
    res->message = xvasprintf(fmt, ap);
    va_end(ap);
    res->status = status;
    res->code = code;
}

void ops_res_ok(struct op_result *res, int status, json_t *data)
{
    res->status = status;
    res->data = data;
}

void ops_res_check(struct op_result *res, const char *type, json_t *data)
{
    res->status = 422;
    res->check_type = type;
    res->data = data;
}

void ops_res_store_failed(struct op_result *res, enum accel_err rc)
{
    if (rc == ACCEL_ECONFLICT) {
        ops_res_error(res, 409, "conflict",
                      "another node of the cluster changed this at the same "
                      "moment, again and again; nothing was changed: try "
                      "again");
        return;
    }
    if (rc == ACCEL_EUNAVAIL) {
        /* no etcd member with a quorum answered in time (cut off, quorum
         * lost): a write sent may still apply, so do not say it did not */
        ops_res_error(res, 503, accel_err_name(rc),
                      "the cluster's store (etcd) did not answer in time; "
                      "the change is not acknowledged and may or may not "
                      "have been saved: read it back before trying again");
        return;
    }
    if (rc == ACCEL_ETOOBIG) {
        /* store_etcd.c's tx_too_big: refused before it was sent */
        ops_res_error(res, 413, accel_err_name(rc),
                      "the change needs more writes than the cluster's "
                      "store (etcd) takes in one transaction (128); nothing "
                      "was changed");
        return;
    }
    ops_res_error(res, 500, accel_err_name(rc),
              "the change could not be saved (%s); nothing was changed",
              accel_strerror(rc));
}

/* ---- computeBinding parsing ---- */

static bool sel_string(const json_t *item, const char *key, size_t i,
                       const char *field, char **out, struct op_result *res)
{
    const json_t *v = json_object_get(item, key);
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        json_string_length(v) > ACCEL_ID_MAX ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        ops_res_error(res, 400, "invalid-argument",
                  "%s[%zu].%s is required and must be a non-empty string of "
                  "at most %d bytes",
                  field, i, key, ACCEL_ID_MAX);
        return false;
    }
    *out = xstrdup(json_string_value(v));
    return true;
}

bool ops_parse_binding(const json_t *arr, const char *field,
                       struct op_binding *b, struct op_result *res)
{
    size_t i;
    const json_t *item;

    memset(b, 0, sizeof(*b));
    if (!json_is_array(arr)) {
        ops_res_error(res, 400, "invalid-argument", "%s must be a list of "
                  "{nodeName, deviceId, memory?}", field);
        return false;
    }
    if (json_array_size(arr) > ADM_MAX_SELECTION) {
        ops_res_error(res, 400, "invalid-argument",
                  "%s has %zu items; at most %d are allowed", field,
                  json_array_size(arr), ADM_MAX_SELECTION);
        return false;
    }
    json_array_foreach(arr, i, item) {
        const json_t *mem;
        const char *k;
        const json_t *v;
        if (!json_is_object(item)) {
            ops_res_error(res, 400, "invalid-argument",
                      "%s[%zu] must be an object", field, i);
            goto bad;
        }
        json_object_foreach((json_t *)item, k, v) {
            if (strcmp(k, "nodeName") && strcmp(k, "deviceId") &&
                strcmp(k, "memory")) {
                ops_res_error(res, 400, "invalid-argument",
                          "%s[%zu].%s is not a known field (nodeName, "
                          "deviceId, memory)", field, i, k);
                goto bad;
            }
        }
        if (!sel_string(item, "nodeName", i, field, &b->strs[2 * i], res) ||
            !sel_string(item, "deviceId", i, field, &b->strs[2 * i + 1], res))
            goto bad;
        b->sel[i].node = b->strs[2 * i];
        b->sel[i].device = b->strs[2 * i + 1];
        b->n = i + 1;
        mem = json_object_get(item, "memory");
        if (mem && !json_is_null(mem)) {
            if (!json_is_integer(mem) || json_integer_value(mem) < 0 ||
                (uint64_t)json_integer_value(mem) > QUANTITY_MAX) {
                ops_res_error(res, 400, "invalid-argument",
                          "%s[%zu].memory must be a non-negative integer "
                          "number of bytes (at most 2^62)", field, i);
                goto bad;
            }
            b->sel[i].memory = (uint64_t)json_integer_value(mem);
        }
    }
    return true;
bad:
    ops_binding_release(b);
    return false;
}

void ops_binding_release(struct op_binding *b)
{
    for (size_t i = 0; i < 2 * ADM_MAX_SELECTION; i++)
        free(b->strs[i]);
    memset(b, 0, sizeof(*b));
}

/* ---- helpers (d->lock held) ---- */

struct app *ops_find_app(struct accel_daemon *d, const struct auth_user *u,
                            const char *name, struct op_result *res)
{
    struct app *a = state_app_find(d, name);
    if (a == NULL || (!u->admin && strcmp(a->owner, u->name) != 0 &&
                      strcmp(a->owner, ACCEL_SHARED_OWNER) != 0)) {
        ops_res_error(res, 404, "not-found", "app \"%s\" is not installed", name);
        return NULL;
    }
    if (!auth_may_act(u, a->owner)) {
        ops_res_error(res, 403, "forbidden",
                  "app \"%s\" belongs to %s; only %s may change it", name,
                  a->owner,
                  strcmp(a->owner, ACCEL_SHARED_OWNER) == 0 ? "an admin"
                                                             : "its owner or "
                                                               "an admin");
        return NULL;
    }
    return a;
}

bool ops_in_transition(const struct app *a)
{
    return a->committing || a->state == APP_STOPPING ||
           a->state == APP_RESUMING || a->state == APP_UNINSTALLING ||
           a->state == APP_RELEASING;
}

const char *ops_transition_name(const struct app *a)
{
    return a->committing ? "being installed" : app_state_name(a->state);
}

bool ops_busy(struct app *a, struct op_result *res)
{
    if (!ops_in_transition(a))
        return false;
    ops_res_error(res, 409, "ops_busy",
                  "app \"%s\" is %s; retry when it has finished", a->name,
                  ops_transition_name(a));
    return true;
}

/* The requirement a selection is validated against: the selected type, or
 * the type of the first selected device when the app has none yet. */
int ops_pick_req(struct accel_daemon *d, const struct app *a,
                          const struct op_binding *b)
{
    if (a->sel >= 0)
        return a->sel;
    if (b && b->n > 0) {
        int dev = state_dev_find(d, b->sel[0].device);
        if (dev >= 0)
            for (size_t i = 0; i < a->m.nreq; i++)
                if (a->m.req[i].type == d->snap.devs[dev].type)
                    return (int)i;
    }
    return 0;
}

bool ops_validate_own(struct accel_daemon *d, const struct app *a,
                      const struct adm_req *r, const struct adm_sel *sel,
                      size_t n, struct adm_verdict *v, struct adm_row *rows)
{
    static const struct adm_req none;
    /* the rows were applied with the app's selected requirement
     * (state_set_rows), so they are taken out with the same one */
    const struct adm_req *cur = state_app_req(a) ? state_app_req(a) : &none;
    bool ok;

    if (a->nrows)
        adm_snapshot_release(&d->snap, cur, a->rows, a->nrows);
    ok = adm_validate(&d->snap, r, sel, n, v, rows);
    if (a->nrows)
        adm_snapshot_apply(&d->snap, cur, a->rows, a->nrows);
    return ok;
}

/* The numbers of a refusal: the validation, the app's targets and, per
 * selected device that exists, the quota asked, its total and free memory. */
static json_t *refusal_data(struct accel_daemon *d, const struct adm_req *r,
                            const struct adm_sel *sel, size_t n,
                            const struct adm_verdict *v)
{
    json_t *o = view_validation(d, v), *devs = json_array();
    json_object_set_new(o, "requiredGpu", json_integer((json_int_t)r->req_gpu));
    json_object_set_new(o, "limitedGpu", json_integer((json_int_t)r->lim_gpu));
    json_object_set_new(o, "requiredMemory",
                        json_integer((json_int_t)r->req_mem));
    for (size_t i = 0; i < n; i++) {
        int k = sel[i].device ? state_dev_find(d, sel[i].device) : -1;
        const struct adm_device *x = k >= 0 ? &d->snap.devs[k] : NULL;
        if (x != NULL)
            json_array_append_new(
                devs, json_pack("{s:s, s:I, s:I, s:I}", "deviceId", x->id,
                                "memory", (json_int_t)sel[i].memory, "total",
                                (json_int_t)x->memory, "free",
                                (json_int_t)adm_device_free(x)));
    }
    json_object_set_new(o, "devices", devs);
    return o;
}

static void refusal(struct accel_daemon *d, const struct app *a,
                    const struct adm_req *r, const struct adm_sel *sel,
                    size_t n, const struct adm_verdict *v)
{
    char code[2 * ACCEL_ID_MAX + 64];
    adm_verdict_format(v, code, sizeof code);
    metrics_refusal(d, adm_code_name(v->code));
    state_event_refusal(d, a->name, refusal_data(d, r, sel, n, v),
                        "app %s refused: %s (%s)", a->name, code,
                        view_code_sentence(v->code));
}

/* Begin the transaction of a bind: app row, allocation rows, events.
 * a->sel is sel when it succeeds (state_save_* read the selected type). */
static enum accel_err bind_tx_write(struct accel_daemon *d, struct app *a,
                                    int sel, const struct adm_row *rows,
                                    size_t n, enum app_state st,
                                    const char *reason)
{
    enum accel_err rc = state_tx_begin(d);
    if (rc != ACCEL_OK)
        return rc;
    a->sel = sel;
    rc = state_save_app(d, a, st, reason);
    if (rc == ACCEL_OK)
        rc = state_save_rows(d, a, rows, n);
    if (rc != ACCEL_OK) {
        state_tx_rollback(d);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        const struct adm_device *x = &d->snap.devs[rows[i].dev];
        state_event(d, "binding.add", a->name, d->snap.nodes[x->node].name,
                    x->id,
                    json_pack("{s:I}", "memory", (json_int_t)rows[i].memory),
                    "app %s bound to %s (%s)", a->name, x->id,
                    accel_support_label(x->st));
    }
    state_event(d, "app.state", a->name, NULL, NULL, NULL, "app %s is %s",
                a->name, app_state_name(st));
    return ACCEL_OK;
}

/* Memory after a bind's commit: release the old rows under the old
 * requirement first. */
static void bind_apply(struct accel_daemon *d, struct app *a, int old_sel,
                       int sel, const struct adm_row *rows, size_t n,
                       enum app_state st, const char *reason)
{
    a->rel = (struct app_release){0};
    a->sel = old_sel;
    state_set_rows(d, a, NULL, 0);
    a->sel = sel;
    state_set_rows(d, a, rows, n);
    state_set_state(a, st, reason);
}

/* Write rows + state in one transaction, then apply to memory. */
enum accel_err ops_commit_bind(struct accel_daemon *d, struct app *a,
                                  int sel, const struct adm_row *rows,
                                  size_t n, enum app_state st,
                                  const char *reason)
{
    int old_sel = a->sel;
    enum accel_err rc = bind_tx_write(d, a, sel, rows, n, st, reason);
    if (rc == ACCEL_OK)
        rc = state_tx_commit(d);
    if (rc != ACCEL_OK) {
        a->sel = old_sel;
        return rc;
    }
    bind_apply(d, a, old_sel, sel, rows, n, st, reason);
    return ACCEL_OK;
}

/*
 * ops_commit_bind for a new app a (just added to memory) of a cluster
 * store, with d->lock released while etcd answers (issue 19). The bind is
 * applied to memory before the lock is released, as a reservation: binds
 * decided meanwhile on this node count its memory, quota and app name;
 * the app is `committing` (other operations on it answer 409). On failure
 * the reservation is taken back and the app removed (a is gone) before
 * anything else sees the view: nothing stays in memory that etcd does not
 * hold. An ambiguous failure (ACCEL_EUNAVAIL, answered as a 503 that
 * says so) is left to the watch, which brings the rows if they were
 * written. Another node may change or delete the app between etcd's
 * answer and the lock taken again (the watch applies it): *gone says it
 * was deleted (a is then the caller's to free, outside the state).
 */
static enum accel_err commit_install_queued(struct accel_daemon *d,
                                            struct app *a, int sel,
                                            const struct adm_row *rows,
                                            size_t n, enum app_state st,
                                            const char *reason, bool *gone)
{
    int old_sel = a->sel;
    enum accel_err rc = bind_tx_write(d, a, sel, rows, n, st, reason);
    if (rc != ACCEL_OK) {
        a->sel = old_sel;
        state_app_remove(d, a);
        return rc;
    }
    bind_apply(d, a, old_sel, sel, rows, n, st, reason);
    a->committing = true;
    rc = state_tx_commit_queued(d);
    a->committing = false;
    *gone = a->removed;
    if (rc != ACCEL_OK && !*gone) {
        state_set_rows(d, a, NULL, 0);
        state_app_remove(d, a);
    } else if (rc != ACCEL_OK) {
        state_app_free(a); /* unlinked by its remover already */
    }
    store_queued_settled(d->store);
    return rc;
}

/* Persist a state change only. */
static enum accel_err commit_state(struct accel_daemon *d, struct app *a,
                                   enum app_state st, const char *reason)
{
    return lifecycle_commit_state(d, a, st, reason);
}

/* Will a process start for a once it holds rows[0..n) (here, or by another
 * node's agent)? Then it is `resuming` until it does. Asked before the rows
 * are a's, so it reads these rows: with none yet, a read as an app that
 * runs here, and one bound to a declared node waited in `resuming` for a
 * start that never came. In a cluster every node is an agent's, one whose
 * agent is away now included (it starts the app when it is back). */
static bool runs_somewhere(struct accel_daemon *d, const struct app *a,
                           const struct adm_row *rows, size_t n)
{
    struct app bound = *a; /* read only: its manifest, these rows */

    if (d->cfg.etcd != NULL)
        return manifest_runs(&a->m);
    bound.rows = (struct adm_row *)rows;
    bound.nrows = n;
    return state_app_runs_here(d, &bound);
}

#define STOP_ELSEWHERE_SLACK_MS 10000 /* past the app's stop timeout */

/* A change that stops and releases the apps bound to a card: on a node
 * that does not answer (its lease lapsed) they may still run, and nothing
 * is released on an unreachable node's behalf (SPEC 10); the randomized
 * test found a mode switch doing it. */
bool ops_node_away(struct accel_daemon *d, int dev, const char *retry,
                   struct op_result *res)
{
    uint32_t n = d->snap.devs[dev].node;
    if (d->ninfo[n].local || d->ninfo[n].reachable)
        return false;
    ops_res_error(res, 409, "node-unreachable",
                  "node %s is unreachable: the apps bound to %s may still "
                  "run there, and nothing is released on an unreachable "
                  "node's behalf; %s once the node is back",
                  d->snap.nodes[n].name, d->snap.devs[dev].id, retry);
    return true;
}

bool ops_app_away(struct accel_daemon *d, const struct app *a,
                  const char *retry, struct op_result *res)
{
    for (size_t k = 0; k < a->nrows; k++)
        if (ops_node_away(d, (int)a->rows[k].dev, retry, res))
            return true;
    return false;
}

bool ops_runs_elsewhere_still(struct accel_daemon *d, const struct app *a)
{
    return (runtime_ends_on_agent(d, a) || state_app_multi(d, a)) &&
           (a->pid > 0 || a->state == APP_STOPPING ||
            a->state == APP_RUNNING || a->state == APP_RELEASING);
}

/*
 * ops_stop_processes for an app another node's agent runs (or one bound
 * across nodes): its pid is that machine's, and signalling it here would
 * hit whatever process this machine has under that number. So the app is
 * made `stopping`, as a suspend does, and its agent stops it and releases
 * it; this waits (lock released) until the app has left `stopping` and
 * `releasing` (its agent waits there for processes, people's containers
 * included), for its stop timeout and some slack. An app still there then
 * is its agent's to finish; the caller sees it still bound.
 */
static struct app *stop_elsewhere(struct accel_daemon *d, struct app *a)
{
    char *name = xstrdup(a->name);
    uint64_t until = util_now_ns() +
                     ((uint64_t)a->m.run.stop_timeout_s * 1000 +
                      STOP_ELSEWHERE_SLACK_MS) * 1000000ULL;

    if (commit_state(d, a, APP_STOPPING, NULL) == ACCEL_OK &&
        state_app_multi(d, a))
        cluster_act(d, a); /* this node's part, if it has one */
    while ((a = state_app_find(d, name)) != NULL &&
           (a->state == APP_STOPPING || a->state == APP_RELEASING)) {
        uint64_t now = util_now_ns();
        int64_t rev = store_view_rev(d->store);
        if (now >= until)
            break;
        pthread_mutex_unlock(&d->lock);
        /* woken by the next change the watch applies */
        (void)store_wait_rev(d->store, rev + 1,
                             (int)((until - now) / 1000000ULL) + 1);
        pthread_mutex_lock(&d->lock);
    }
    free(name);
    return a;
}

/*
 * ops_stop_processes for an external app whose cgroup on this machine
 * holds people's own containers (its CDI hook put them there): they get
 * SIGTERM and, after the app's stop timeout, the cgroup's kill, with the
 * lock released, as an app's own processes do; a->rel.linger is 1 when
 * something survived. The app is `stopping` meanwhile.
 */
static struct app *stop_outside(struct accel_daemon *d, struct app *a)
{
    char *name = xstrdup(a->name);
    int timeout = a->m.run.stop_timeout_s;
    bool empty;

    commit_state(d, a, APP_STOPPING, NULL);
    pthread_mutex_unlock(&d->lock);
    empty = runtime_stop_outside(d, name, timeout);
    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, name);
    free(name);
    if (a != NULL)
        a->rel.linger = empty ? 0 : 1;
    return a;
}

/*
 * Stop a's processes with the lock released. Returns the app again (found
 * by name) or NULL if it vanished. The app is `stopping` meanwhile. An
 * external app's people's containers are processes of it too: here
 * (stop_outside), or on the node whose cards it holds (stop_elsewhere).
 */
struct app *ops_stop_processes(struct accel_daemon *d, struct app *a)
{
    char *name;
    pid_t pid = (pid_t)a->pid;
    uint64_t start = a->pid_start;
    int timeout = a->m.run.stop_timeout_s, status = -1;
    uint32_t linger;
    enum accel_err rc;

    if (a->pid <= 0 && d->cluster && runtime_held_on_agent(d, a))
        return stop_elsewhere(d, a);
    if (a->pid <= 0 && runtime_outside_here(d, a))
        return stop_outside(d, a);
    if (a->pid <= 0)
        return a;
    if (d->cluster && (runtime_runs_on_agent(d, a) || state_app_multi(d, a)))
        return stop_elsewhere(d, a);
    commit_state(d, a, APP_STOPPING, NULL);
    name = xstrdup(a->name);
    a->stop_blocking = true; /* runtime_stop_begin: this thread stops it */
    pthread_mutex_unlock(&d->lock);
    rc = runtime_stop(d, name, pid, start, timeout, &status);
    /* the device is free only once NVML lists no process of the app */
    linger = reconcile_app_lingering(d, name, pid);
    if (rc != ACCEL_OK && linger == 0)
        linger = 1; /* survivors of SIGKILL: the reconciler decides */
    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, name);
    if (rc != ACCEL_OK)
        log_warn("app %s: some processes survived the stop", name);
    free(name);
    if (a) {
        a->stop_blocking = false;
        a->pid = 0;
        a->pid_start = 0;
        a->exit_status = status;
        a->rel.last_pid = pid;
        a->rel.linger = linger;
    }
    return a;
}

/* ---- install ---- */

static bool install_owner(struct accel_daemon *d, const struct auth_user *u,
                          const struct manifest *m, const char *owner,
                          const char **out, struct op_result *res)
{
    if (m->shared) {
        if (!u->admin) {
            ops_res_error(res, 403, "forbidden",
                      "only an admin can install shared apps");
            return false;
        }
        *out = ACCEL_SHARED_OWNER;
        return true;
    }
    if (owner == NULL || strcmp(owner, u->name) == 0) {
        *out = u->name;
        return true;
    }
    if (!u->admin) {
        ops_res_error(res, 403, "forbidden",
                  "owner: a member can install apps only for itself");
        return false;
    }
    for (size_t i = 0; i < d->nusers; i++) {
        if (strcmp(d->users[i].name, owner) == 0) {
            *out = d->users[i].name;
            return true;
        }
    }
    ops_res_error(res, 400, "invalid-argument", "owner \"%s\" is not a user",
              owner);
    return false;
}

/* SPEC 8.2.1: a member's volume sources as they are on the machine now,
 * resolved beneath the home without following a link (homepath.c): one
 * that is or passes through a link, or is not the owner's, is refused;
 * one not there yet is made as the owner at the start, and every start
 * resolves them again. */
static enum accel_err install_sources(const struct accel_daemon *d,
                                      const struct manifest *m,
                                      const char *owner, const char *home,
                                      char **cause)
{
    struct homepath_owner o = { .home = home, .uid = geteuid() };

    if (d->uid_drop)
        o.uid = identity_uid(d, owner);
    if (o.uid == 0 && d->uid_drop)
        return ACCEL_OK; /* no uid, so no home yet: the start checks */
    for (size_t i = 0; i < m->run.ctr.nvolumes; i++) {
        char field[48], *path = NULL;
        enum accel_err rc;
        snprintf(field, sizeof field, "run.volumes[%zu].source", i);
        rc = homepath_resolve(&o, m->run.ctr.volumes[i].source, field,
                              false, &path, cause);
        free(path);
        if (rc != ACCEL_OK && rc != ACCEL_ENOTFOUND)
            return rc;
    }
    return ACCEL_OK;
}

/* SPEC 3: reserved variables (400) and, for a member, run.user and a
 * run.workdir outside the owner's home (403). */
static bool install_run_allowed(struct accel_daemon *d,
                                const struct auth_user *u,
                                const struct manifest *m, const char *owner,
                                struct op_result *res)
{
    char *home = identity_home(d, owner);
    char *cause = NULL;
    enum accel_err rc = manifest_check_install(m, u->admin, home, &cause);
    uid_t uid;
    gid_t gid;

    if (rc == ACCEL_OK && !u->admin)
        rc = install_sources(d, m, owner, home, &cause);
    free(home);
    if (rc == ACCEL_OK && m->run.user != NULL &&
        identity_resolve_user(m->run.user, &uid, &gid, NULL) != ACCEL_OK) {
        rc = ACCEL_EINVAL;
        cause = xasprintf("run.user \"%s\" is not a user of this machine",
                          m->run.user);
    }
    if (rc == ACCEL_OK)
        return true;
    if (rc == ACCEL_EFORBIDDEN)
        ops_res_error(res, 403, "forbidden", "%s", cause);
    else
        ops_res_error(res, 400, "invalid-manifest", "%s", cause);
    free(cause);
    return false;
}

/* What the app's runner needs on this machine, asked before the lock
 * (podman takes a moment; in a cluster the node that runs it is not chosen
 * yet): *found for launch_adopt; else false with res set (a manifest that
 * cannot run here: 400; the runner could not tell: 503). */
static bool runner_vet(const struct manifest *m, bool cluster, json_t **found,
                       struct op_result *res)
{
    char *cause = NULL;
    enum accel_err rc = launch_vet(m, cluster, found, &cause);

    if (rc == ACCEL_OK)
        return true;
    if (rc == ACCEL_EINVAL)
        ops_res_error(res, 400, "invalid-manifest", "%s", cause);
    else
        ops_res_error(res, 503, "unavailable", "%s", cause);
    free(cause);
    return false;
}

/* Choose the type (2.5). Returns the index, or -1 with res filled. */
static int install_type(struct accel_daemon *d, const struct manifest *m,
                        const char *type, struct op_result *res)
{
    int installable = -1, matching = -1, count = 0;
    json_t *modes;

    if (type) {
        enum accel_type t;
        if (!accel_type_parse(type, &t) || manifest_req(m, t) == NULL) {
            ops_res_error(res, 400, "invalid-argument",
                      "selectedGpuType \"%s\" is not one of the manifest's "
                      "spec.accelerator modes", type);
            return -1;
        }
        return (int)(manifest_req(m, t) - m->req);
    }
    if (m->nreq == 1)
        return 0;
    modes = json_array();
    for (size_t i = 0; i < m->nreq; i++) {
        enum adm_plan_status ps = adm_plan(&d->snap, &m->req[i]);
        /* app-service's ModePlanResult: status is the plan status
         * (installable, insufficient-resources, no-matching-node) */
        json_t *e = json_pack("{s:s, s:s}", "computeType",
                              accel_type_name(m->req[i].type), "status",
                              adm_plan_status_name(ps));
        if (ps != ADM_PLAN_INSTALLABLE)
            json_object_set_new(e, "reason",
                                json_string(adm_plan_status_name(ps)));
        json_array_append_new(modes, e);
        if (ps == ADM_PLAN_INSTALLABLE) {
            count++;
            if (installable < 0)
                installable = (int)i;
        }
        if (ps != ADM_PLAN_NO_MATCHING_NODE && matching < 0)
            matching = (int)i;
    }
    if (count > 1) {
        ops_res_check(res, "computeModeSelect", modes);
        return -1;
    }
    json_decref(modes);
    if (installable >= 0)
        return installable;
    return matching >= 0 ? matching : 0;
}

static struct app *app_new(const struct manifest *m, json_t *manifest,
                           const char *owner, int sel)
{
    struct app *a = xcalloc(1, sizeof(*a));
    a->name = xstrdup(m->name);
    a->owner = xstrdup(owner);
    a->state = APP_INSTALLED;
    a->manifest_text = json_dumps(manifest, JSON_COMPACT);
    a->m = *m;
    a->sel = sel;
    a->created_ms = a->updated_ms = util_wall_ms();
    a->exit_status = -1;
    return a;
}

/* Validate a selection or place automatically. Returns the number of rows
 * (0 = no placement found) or -1 when a given selection failed (res set). */
int ops_select_rows(struct accel_daemon *d, const struct auth_user *u,
                    struct app *a,
                       const struct adm_req *r, const struct op_binding *b,
                       struct adm_row *rows, struct op_result *res)
{
    struct adm_verdict v;
    struct adm_sel auto_sel[ADM_MAX_SELECTION];
    const struct adm_sel *sel = b ? b->sel : auto_sel;
    size_t n = b ? b->n : 0;

    if (b == NULL &&
        !adm_place(&d->snap, r, d->cfg.policy, auto_sel, ADM_MAX_SELECTION, &n))
        return 0;
    if (adm_validate(&d->snap, r, sel, n, &v, rows))
        return (int)n;
    if (b == NULL) {
        log_error("automatic placement of %s failed validation", a->name);
        return 0;
    }
    refusal(d, a, r, sel, n, &v);
    ops_res_check(res, "computeBindingUnavailable",
              json_pack("{s:o, s:o}", "availability", view_availability(d, r, u),
                        "validation", view_validation(d, &v)));
    return -1;
}

/* Room for the store's writes (SPEC 9): false with res set when the data
 * directory's file system is at its reserve (disk.h). */
static bool disk_room(struct accel_daemon *d, struct op_result *res)
{
    int status = 0;
    char *why = disk_check_reserve(d->cfg.data_dir, &status);

    if (why == NULL)
        return true;
    ops_res_error(res, status, status == 507 ? "insufficient-storage"
                                             : "system-error", "%s", why);
    free(why);
    return false;
}

void ops_install(struct accel_daemon *d, const struct auth_user *u,
                 json_t *manifest, const char *owner, const char *type,
                 const struct op_binding *b, struct op_result *res)
{
    struct manifest m;
    char *cause = NULL;
    const char *own;
    struct app *a;
    struct adm_row rows[ADM_MAX_SELECTION];
    int sel, n;
    enum app_state st = APP_INSTALLED;
    bool cluster = store_is_cluster(d->store), gone = false;
    json_t *pin = NULL;
    enum accel_err rc;

    if (manifest_parse(manifest, &m, &cause) != ACCEL_OK) {
        ops_res_error(res, 400, "invalid-manifest", "%s", cause);
        free(cause);
        return;
    }
    if (manifest_check_texts(manifest, &cause) != ACCEL_OK) {
        ops_res_error(res, 400, "invalid-manifest", "%s", cause);
        free(cause);
        manifest_release(&m);
        return;
    }
    if (!disk_room(d, res) || !runner_vet(&m, cluster, &pin, res)) {
        manifest_release(&m);
        return;
    }
    pthread_mutex_lock(&d->lock);
    if (cluster) /* a decision that will be queued (store.h) */
        store_queue_gate(d->store, &d->lock);
    if (!install_owner(d, u, &m, owner, &own, res) ||
        !install_run_allowed(d, u, &m, own, res) ||
        (!u->admin && pin != NULL &&
         !ops_settings_image_allowed(d, own, m.run.ctr.image, pin, res)) ||
        !ops_limits_apps(d, own, res))
        goto fail;
    if (state_app_find(d, m.name)) {
        ops_res_error(res, 409, "already-exists", "app \"%s\" is already "
                  "installed", m.name);
        goto fail;
    }
    sel = install_type(d, &m, type, res);
    if (sel < 0)
        goto fail;
    a = app_new(&m, manifest, own, sel);
    n = ops_select_rows(d, u, a, &a->m.req[sel], b, rows, res);
    if (n < 0 || !ops_limits_gpu(d, a, rows, (size_t)(n > 0 ? n : 0), res)) {
        a->m = (struct manifest){0};
        state_app_free(a);
        goto fail;
    }
    state_app_add(d, a);
    if (!cluster) {
        launch_adopt(d, a, pin); /* before its first start */
        pin = NULL;
    }
    if (n > 0)
        st = runs_somewhere(d, a, rows, (size_t)n) ? APP_RESUMING
                                                    : APP_RUNNING;
    if (cluster)
        rc = commit_install_queued(d, a, sel, rows, (size_t)n, st,
                                   n ? NULL : "insufficient-resources",
                                   &gone);
    else
        rc = ops_commit_bind(d, a, sel, rows, (size_t)n, st,
                             n ? NULL : "insufficient-resources");
    if (rc != ACCEL_OK) {
        if (!cluster) /* the queued commit has removed it already */
            state_app_remove(d, a);
        ops_res_store_failed(res, rc);
        pthread_mutex_unlock(&d->lock);
        return;
    }
    if (gone) {
        /* installed, then deleted through another node before this one
         * had the lock again: the install was made, and undone since */
        ops_res_ok(res, 200, view_app(d, a, u));
        state_app_free(a);
        pthread_mutex_unlock(&d->lock);
        return;
    }
    if (cluster && a->state != st)
        cluster_act(d, a); /* changed meanwhile (a stop through another
                              node): what it is now decides, not st */
    else if (n > 0 && state_app_runs_here(d, a)) /* a pull answers at once */
        launch_app(d, a, RUNNER_SEEN, lifecycle_commit_state);
    else if (n > 0 && state_app_multi(d, a))
        cluster_act(d, a); /* this node's part, if it has one */
    ops_res_ok(res, 200, view_app(d, a, u));
    pthread_mutex_unlock(&d->lock);
    return;
fail:
    pthread_mutex_unlock(&d->lock);
    manifest_release(&m);
    json_decref(pin);
}

/* ---- resume / stop / unbind / uninstall ---- */

void ops_resume(struct accel_daemon *d, const struct auth_user *u,
                const char *name, const struct op_binding *b,
                struct op_result *res)
{
    struct app *a;
    struct adm_row rows[ADM_MAX_SELECTION];
    int sel, n;
    enum accel_err rc;
    /* asked before the lock: is what its runner needs still here? */
    enum runner_seen seen = launch_look(d, name);

    pthread_mutex_lock(&d->lock);
    a = ops_find_app(d, u, name, res);
    if (a == NULL || ops_busy(a, res) || !disk_room(d, res))
        goto out;
    if (a->state == APP_RUNNING) {
        ops_res_error(res, 409, "conflict", "app \"%s\" is already running; stop "
                  "it first to change its GPUs", name);
        goto out;
    }
    sel = ops_pick_req(d, a, b);
    n = ops_select_rows(d, u, a, &a->m.req[sel], b, rows, res);
    if (n < 0 || !ops_limits_gpu(d, a, rows, (size_t)(n > 0 ? n : 0), res))
        goto out;
    if (n == 0) {
        ops_res_check(res, "computeBindingRequired",
                  json_pack("{s:o}", "availability",
                            view_availability(d, &a->m.req[sel], u)));
        goto out;
    }
    rc = ops_commit_bind(d, a, sel, rows, (size_t)n,
                     runs_somewhere(d, a, rows, (size_t)n) ? APP_RESUMING
                                                           : APP_RUNNING,
                     NULL);
    if (rc != ACCEL_OK) {
        ops_res_store_failed(res, rc);
        goto out;
    }
    if (state_app_runs_here(d, a)) /* a pull answers at once */
        launch_app(d, a, seen, lifecycle_commit_state);
    else if (state_app_multi(d, a))
        cluster_act(d, a);
    ops_res_ok(res, 200, view_app(d, a, u));
out:
    pthread_mutex_unlock(&d->lock);
}

/*
 * Stop a (lock held) without waiting for its processes (SPEC 5.6): an app
 * another node's agent runs is only asked to stop (`stopping`): that agent
 * stops and releases it, never this node on its behalf (SPEC 10); an app
 * with a process becomes `stopping` (its reason stored with it, so that a
 * restarted acceld carries the stop on) and the supervisor finishes the
 * stop and the release; one without is released at once. res gets 200
 * with the app in either case: its state says which (`stopping` or the
 * released state), as u sees it. The clients of SPEC 5 accept only code
 * 0 or 200.
 */
static void stop_async(struct accel_daemon *d, const struct auth_user *u,
                       struct app *a, const char *reason,
                       struct op_result *res)
{
    enum accel_err rc;

    if (runtime_ends_on_agent(d, a) || state_app_multi(d, a)) {
        rc = commit_state(d, a, APP_STOPPING, reason);
        if (rc != ACCEL_OK) {
            ops_res_store_failed(res, rc);
            return;
        }
        if (state_app_multi(d, a))
            cluster_act(d, a); /* stop this node's part, if any (a stop
                                  releases, never deletes: a stays) */
        ops_res_ok(res, 200, view_app(d, a, u));
        return;
    }
    if (a->pid <= 0) {
        rc = lifecycle_commit_release(d, a, APP_STOPPED, reason);
        if (rc != ACCEL_OK)
            ops_res_store_failed(res, rc);
        else
            ops_res_ok(res, 200, view_app(d, a, u));
        return;
    }
    rc = commit_state(d, a, APP_STOPPING, reason);
    if (rc != ACCEL_OK) {
        ops_res_store_failed(res, rc);
        return;
    }
    runtime_stop_begin(a, APP_STOPPED, reason, false);
    ops_res_ok(res, 200, view_app(d, a, u));
}

static void stop_common(struct accel_daemon *d, const struct auth_user *u,
                        const char *name, const char *reason,
                        struct op_result *res)
{
    struct app *a;

    pthread_mutex_lock(&d->lock);
    a = ops_find_app(d, u, name, res);
    if (a != NULL && launch_cancel(d, a, reason)) /* its pull ended */
        ops_res_ok(res, 200, view_app(d, a, u));
    else if (a != NULL && !ops_busy(a, res))
        stop_async(d, u, a, reason, res);
    pthread_mutex_unlock(&d->lock);
}

void ops_suspend(struct accel_daemon *d, const struct auth_user *u,
                 const char *name, struct op_result *res)
{
    stop_common(d, u, name, NULL, res);
}

void ops_unbind(struct accel_daemon *d, const struct auth_user *u,
                const char *name, struct op_result *res)
{
    stop_common(d, u, name, "removed-from-gpu", res);
}

void ops_uninstall(struct accel_daemon *d, const struct auth_user *u,
                   const char *name, struct op_result *res)
{
    struct app *a;
    enum accel_err rc;

    pthread_mutex_lock(&d->lock);
    a = ops_find_app(d, u, name, res);
    /* a pull under way is cancelled, the app released: then uninstalled */
    if (a == NULL ||
        (!launch_cancel(d, a, "uninstalling") && ops_busy(a, res)))
        goto out;
    if (a->pid > 0 || runtime_ends_on_agent(d, a) || state_app_multi(d, a)) {
        /* the supervisor stops it, then deletes it (here or on the nodes
         * whose agents run it or hold its people's containers) */
        bool multi = state_app_multi(d, a);
        rc = commit_state(d, a, APP_STOPPING, "uninstalling");
        if (rc != ACCEL_OK) {
            ops_res_store_failed(res, rc);
            goto out;
        }
        if (multi)
            cluster_act(d, a); /* may delete a: not used after this */
        else if (!runtime_ends_on_agent(d, a))
            runtime_stop_begin(a, APP_STOPPED, "uninstalling", true);
        ops_res_ok(res, 200, json_pack("{s:s, s:s}", "name", name, "state",
                                       "stopping"));
        goto out;
    }
    lifecycle_hold_outside(d, a);
    if (a->rel.linger > 0) {
        a->rel.uninstall = true;
        rc = lifecycle_commit_releasing(d, a, APP_STOPPED, "uninstalling");
        if (rc != ACCEL_OK)
            ops_res_store_failed(res, rc);
        else
            ops_res_ok(res, 200, json_pack("{s:s, s:s}", "name", name,
                                           "state", "releasing"));
        goto out;
    }
    rc = lifecycle_commit_uninstall(d, a);
    if (rc != ACCEL_OK) {
        ops_res_store_failed(res, rc);
        goto out;
    }
    ops_res_ok(res, 200, json_pack("{s:s, s:s}", "name", name, "state",
                               "uninstalled"));
out:
    pthread_mutex_unlock(&d->lock);
}

