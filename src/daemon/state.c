/* SPDX-License-Identifier: MIT */
/*
 * state.c: apps by name, node/device lookups, and the row-level writes that
 * mirror the in-memory model into the store.
 */
#include "common/accel_setup.h"
#include "daemon/state.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/strmap.h"
#include "common/util.h"
#include "daemon/log.h"
#include "daemon/store/store.h"

static const char *const state_names[] = {
#define APP_STATE_STR_(n, s) s,
    APP_STATE_MAP(APP_STATE_STR_)
#undef APP_STATE_STR_
};

const char *app_state_name(enum app_state s)
{
    return (unsigned)s < APP_STATE_COUNT ? state_names[s] : "unknown";
}

bool app_state_parse(const char *s, enum app_state *out)
{
    for (int i = 0; i < APP_STATE_COUNT; i++) {
        if (strcmp(s, state_names[i]) == 0) {
            *out = (enum app_state)i;
            return true;
        }
    }
    return false;
}

struct app *state_app_find(struct accel_daemon *d, const char *name)
{
    uint32_t i;
    if (!strmap_get(d->app_index, name, &i))
        return NULL;
    return d->apps[i];
}

/* The list of owner's apps, or NULL when owner has never had one. */
static struct owned *owned_of(const struct accel_daemon *d, const char *owner)
{
    uint32_t i;
    return strmap_get(d->owner_index, owner, &i) ? &d->owned[i] : NULL;
}

static void owned_add(struct accel_daemon *d, struct app *a)
{
    struct owned *o = owned_of(d, a->owner);
    if (o == NULL) {
        d->owned = xrealloc(d->owned, (d->nowned + 1) * sizeof(*d->owned));
        o = &d->owned[d->nowned];
        *o = (struct owned){0};
        strmap_put(d->owner_index, a->owner, (uint32_t)d->nowned++);
    }
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 8;
        o->v = xrealloc(o->v, o->cap * sizeof(*o->v));
    }
    a->owner_pos = o->n;
    o->v[o->n++] = a;
}

static void owned_remove(struct accel_daemon *d, struct app *a)
{
    struct owned *o = owned_of(d, a->owner);
    if (o == NULL || a->owner_pos >= o->n || o->v[a->owner_pos] != a)
        return;
    o->v[a->owner_pos] = o->v[--o->n];
    o->v[a->owner_pos]->owner_pos = a->owner_pos;
}

struct app *const *state_owned(const struct accel_daemon *d,
                               const char *owner, size_t *n)
{
    const struct owned *o = owned_of(d, owner);
    *n = o ? o->n : 0;
    return o ? o->v : NULL;
}

size_t state_owner_apps(const struct accel_daemon *d, const char *owner)
{
    size_t n;
    state_owned(d, owner, &n);
    return n;
}

void state_app_add(struct accel_daemon *d, struct app *a)
{
    if (d->napps == d->capps) {
        d->capps = d->capps ? d->capps * 2 : 64;
        d->apps = xrealloc(d->apps, d->capps * sizeof(*d->apps));
    }
    strmap_put(d->app_index, a->name, (uint32_t)d->napps);
    d->apps[d->napps++] = a;
    owned_add(d, a);
}

void state_app_free(struct app *a)
{
    if (a == NULL)
        return;
    free(a->name);
    free(a->owner);
    free(a->reason);
    free(a->manifest_text);
    manifest_release(&a->m);
    free(a->rows);
    free(a->row_usage);
    free(a->row_vram);
    free(a->vram_refused);
    json_decref(a->image_pin);
    json_decref(a->pull);
    free(a->stop.reason);
    for (size_t i = 0; i < a->nparts; i++)
        free(a->parts[i]);
    free(a->parts);
    free(a);
}

void state_app_remove(struct accel_daemon *d, struct app *a)
{
    uint32_t i;
    if (!strmap_get(d->app_index, a->name, &i))
        return;
    if (d->hooks.app_removed != NULL)
        d->hooks.app_removed(d, a);
    strmap_del(d->app_index, a->name);
    owned_remove(d, a);
    d->apps[i] = d->apps[--d->napps];
    if (i < d->napps)
        strmap_put(d->app_index, d->apps[i]->name, i);
    if (a->committing)
        a->removed = true; /* its committing thread frees it (state.h) */
    else
        state_app_free(a);
}

struct user_rec *state_user_find(struct accel_daemon *d, const char *name)
{
    for (size_t i = 0; i < d->nusers; i++)
        if (strcmp(d->users[i].name, name) == 0)
            return &d->users[i];
    return NULL;
}

bool state_app_runs_here(struct accel_daemon *d, const struct app *a)
{
    if (!manifest_runs(&a->m))
        return false;
    for (size_t i = 0; i < a->nrows; i++)
        if (!d->ninfo[d->snap.devs[a->rows[i].dev].node].local)
            return false;
    return true;
}

int state_node_find(struct accel_daemon *d, const char *name)
{
    uint32_t i;
    return strmap_get(d->node_index, name, &i) ? (int)i : -1;
}

int state_dev_find(struct accel_daemon *d, const char *id)
{
    uint32_t i;
    return strmap_get(d->dev_index, id, &i) ? (int)i : -1;
}

uint32_t state_dev_overcommit(const struct accel_daemon *d, int dev)
{
    const json_t *e = json_object_get(d->dinfo[dev].settings, "elastic");
    const json_t *v = json_object_get(e, "overcommit");
    double r = json_is_number(v) ? json_number_value(v) : 1.0;

    /* the PUT allows 1 to 4; a row written otherwise counts as off */
    if (!(r >= 1.0 && r <= 4.0))
        return ADM_OVERCOMMIT_ONE;
    return (uint32_t)(r * ADM_OVERCOMMIT_ONE + 0.5);
}

uint32_t state_dev_reclaim_wait_ms(const struct accel_daemon *d, int dev)
{
    const json_t *e = json_object_get(d->dinfo[dev].settings, "elastic");
    const json_t *v = json_object_get(e, "reclaimWaitMs");

    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > STATE_RECLAIM_WAIT_MAX_MS)
        return STATE_RECLAIM_WAIT_DEFAULT_MS;
    return (uint32_t)json_integer_value(v);
}

void state_dev_settings_applied(struct accel_daemon *d, int dev)
{
    d->snap.devs[dev].overcommit = state_dev_overcommit(d, dev);
    adm_index_update_dev(&d->snap, (uint32_t)dev);
}

const struct adm_req *state_app_req(const struct app *a)
{
    if (a->sel < 0 || (size_t)a->sel >= a->m.nreq)
        return NULL;
    return &a->m.req[a->sel];
}

enum accel_err state_tx_begin(struct accel_daemon *d)
{
    return store_begin(d->store);
}

/* The revision of the last commit this thread lost to another node (0:
 * none since it was taken): the HTTP layer decides again (http.c). */
static _Thread_local int64_t lost_rev;
/* The transactions this thread has committed (state_commits_here). */
static _Thread_local uint64_t my_commits;

uint64_t state_commits_here(void)
{
    return my_commits;
}

int64_t state_take_conflict(void)
{
    int64_t rev = lost_rev;
    lost_rev = 0;
    return rev;
}

enum accel_err state_tx_commit(struct accel_daemon *d)
{
    uint64_t t0 = util_now_ns();
    enum accel_err rc = store_commit(d->store);
    if (d->hooks.commit_timed)
        d->hooks.commit_timed(d, util_now_ns() - t0);
    if (rc == ACCEL_OK) {
        atomic_fetch_add(&d->commit_seq, 1);
        my_commits++;
    }
    if (rc == ACCEL_ECONFLICT) {
        int64_t rev = store_conflict_rev(d->store);
        lost_rev = rev > 0 ? rev : 1;
        log_info("store commit lost a race with another node; deciding again");
        store_rollback(d->store);
    } else if (rc == ACCEL_ETOOBIG) {
        /* refused before it was sent: the caller splits it or says so */
        store_rollback(d->store);
    } else if (rc != ACCEL_OK) {
        log_error("store commit failed: %s", accel_strerror(rc));
        store_rollback(d->store);
    }
    return rc;
}

enum accel_err state_tx_commit_queued(struct accel_daemon *d)
{
    uint64_t t0 = util_now_ns();
    int64_t rev = 0;
    enum accel_err rc = store_commit_queued(d->store, &d->lock, &rev);
    if (d->hooks.commit_timed)
        d->hooks.commit_timed(d, util_now_ns() - t0);
    if (rc == ACCEL_OK) {
        atomic_fetch_add(&d->commit_seq, 1);
        my_commits++;
    }
    if (rc == ACCEL_ECONFLICT) {
        lost_rev = rev > 0 ? rev : 1;
        log_info("store commit lost a race with another node; deciding again");
    } else if (rc != ACCEL_OK) {
        log_error("store commit failed: %s", accel_strerror(rc));
    }
    store_rollback(d->store); /* the transaction is over either way */
    return rc;
}

void state_tx_rollback(struct accel_daemon *d)
{
    store_rollback(d->store);
}

enum accel_err state_tx_end(struct accel_daemon *d, enum accel_err rc)
{
    if (rc == ACCEL_OK)
        return state_tx_commit(d);
    state_tx_rollback(d);
    return rc;
}

/* Apps from..from+k of p, and its last writes when last, in one
 * transaction. */
static enum accel_err part_commit(struct accel_daemon *d,
                                  const struct state_parts *p, size_t from,
                                  size_t k, bool last)
{
    enum accel_err rc = state_tx_begin(d);
    for (size_t i = from; rc == ACCEL_OK && i < from + k; i++)
        rc = p->stage(d, i, p->ctx);
    if (rc == ACCEL_OK && last && p->last)
        rc = p->last(d, p->n, p->ctx);
    return state_tx_end(d, rc);
}

enum accel_err state_commit_parts(struct accel_daemon *d,
                                  const struct state_parts *p, size_t *done)
{
    size_t part = p->n;
    bool alone = false; /* the last writes in a transaction of their own */
    enum accel_err rc;

    *done = 0;
    for (;;) {
        size_t left = p->n - *done, k = left < part ? left : part;
        bool last = k == left && !(alone && k > 0);
        rc = part_commit(d, p, *done, k, last);
        if (rc == ACCEL_ETOOBIG) { /* nothing was written */
            if (part == p->n)
                log_info("a change of %zu apps is committed in parts: %s",
                         p->n, store_errmsg(d->store));
            if (k > 1) {
                part = k / 2;
                continue;
            }
            if (k == 1 && last) {
                alone = true;
                continue;
            }
            return rc; /* one app's writes alone do not fit */
        }
        if (rc != ACCEL_OK)
            return rc;
        for (size_t i = *done; i < *done + k; i++)
            if (p->apply)
                p->apply(d, i, p->ctx);
        *done += k;
        if (last)
            return ACCEL_OK;
    }
}

enum accel_err state_durable_wait(struct accel_daemon *d)
{
    uint64_t want = atomic_load(&d->commit_seq);
    enum accel_err rc = ACCEL_OK;

    pthread_mutex_lock(&d->sync_lock);
    while (d->synced_seq < want && rc == ACCEL_OK) {
        uint64_t target;
        if (d->syncing) {
            pthread_cond_wait(&d->sync_cond, &d->sync_lock);
            continue;
        }
        /* lead a sync for everything committed up to now */
        d->syncing = true;
        target = atomic_load(&d->commit_seq);
        pthread_mutex_unlock(&d->sync_lock);
        rc = store_sync(d->store);
        pthread_mutex_lock(&d->sync_lock);
        d->syncing = false;
        if (rc == ACCEL_OK && target > d->synced_seq)
            d->synced_seq = target;
        pthread_cond_broadcast(&d->sync_cond);
    }
    pthread_mutex_unlock(&d->sync_lock);
    return rc;
}

enum accel_err state_save_app(struct accel_daemon *d, const struct app *a,
                              enum app_state st, const char *reason)
{
    const struct adm_req *r = state_app_req(a);
    struct store_app row = {
        .name = a->name,
        .owner = a->owner,
        .state = app_state_name(st),
        .reason = reason,
        .manifest = a->manifest_text,
        .selected_type = r ? accel_type_name(r->type) : NULL,
        .created_ms = a->created_ms,
        .updated_ms = util_wall_ms(),
        .pid = a->pid,
        .pid_start = a->pid_start,
        .exit_status = a->exit_status,
    };
    return store_app_put(d->store, &row);
}

enum accel_err state_save_rows(struct accel_daemon *d, const struct app *a,
                               const struct adm_row *rows, size_t n)
{
    const struct adm_req *r = state_app_req(a);
    enum accel_err rc = store_alloc_delete_app(d->store, a->name);
    for (size_t i = 0; rc == ACCEL_OK && i < n; i++) {
        const struct adm_device *dev = &d->snap.devs[rows[i].dev];
        struct store_alloc al = {
            .app = a->name,
            .owner = a->owner,
            .type = accel_type_name(r ? r->type : dev->type),
            .node = d->snap.nodes[dev->node].name,
            .device = dev->id,
            .memory = rows[i].memory,
        };
        rc = store_alloc_put(d->store, &al);
    }
    return rc;
}

enum accel_err state_save_device(struct accel_daemon *d, int dev,
                                 enum accel_support st)
{
    const struct adm_device *x = &d->snap.devs[dev];
    char *settings = d->dinfo[dev].settings
                         ? json_dumps(d->dinfo[dev].settings, JSON_COMPACT)
                         : NULL;
    struct store_device row = {
        .node = d->snap.nodes[x->node].name,
        .id = x->id,
        .support = accel_support_name(st),
        .settings = settings,
    };
    enum accel_err rc = store_device_put(d->store, &row);
    free(settings);
    return rc;
}

/*
 * The user whose request this thread is serving ("" when none: the
 * supervisor, the reconciler, start-up). A thread-local rather than a
 * parameter threaded through every operation only to reach the events:
 * it is set and cleared around one request by http.c, on the same thread.
 */
static _Thread_local char current_actor[ACCEL_NAME_MAX + 1];

void state_set_actor(const char *user)
{
    util_strlcpy(current_actor, user ? user : "", sizeof current_actor);
}

void state_event(struct accel_daemon *d, const char *kind, const char *app,
                 const char *node, const char *device, json_t *data,
                 const char *fmt, ...)
{
    va_list ap;
    char *msg, *js = NULL;
    struct store_event e;
    enum accel_err rc;
    /* callers hold d->lock: the app is still listed, even when this is
     * its uninstall */
    const struct app *a = app ? state_app_find(d, app) : NULL;

    va_start(ap, fmt);
    msg = xvasprintf(fmt, ap);
    va_end(ap);
    if (a) {
        /* whose app: who may see the event once the app is gone */
        if (data == NULL)
            data = json_object();
        if (json_is_object(data) && !json_object_get(data, "owner"))
            json_object_set_new(data, "owner", json_string(a->owner));
    }
    if (current_actor[0]) {
        /* who did it: the user of the request this thread is answering */
        if (data == NULL)
            data = json_object();
        if (json_is_object(data))
            json_object_set_new(data, "by", json_string(current_actor));
    }
    if (data)
        js = json_dumps(data, JSON_COMPACT);
    e = (struct store_event){.ts_ms = util_wall_ms(),
                             .kind = kind,
                             .app = app,
                             .node = node,
                             .device = device,
                             .message = msg,
                             .data = js};
    rc = store_event_append(d->store, &e, STATE_EVENTS_KEEP, NULL);
    if (rc == ACCEL_OK) /* outside a transaction it committed by itself */
        atomic_fetch_add(&d->commit_seq, 1);
    if (rc != ACCEL_OK)
        log_warn("event not recorded (%s): %s", accel_strerror(rc), msg);
    /* wake the long-polls; they re-read the store under d->lock, so an
     * event of a transaction that rolls back is never shown */
    {
        pthread_mutex_lock(&d->ev_lock);
        d->ev_seq++;
        pthread_cond_broadcast(&d->ev_cond);
        if (d->hooks.event_appended)
            d->hooks.event_appended(d, app, a ? a->owner : NULL);
        pthread_mutex_unlock(&d->ev_lock);
    }
    log_info("event %s: %s", kind, msg);
    free(msg);
    free(js);
    json_decref(data);
}

void state_set_state(struct app *a, enum app_state st,
                     const char *reason)
{
    char *nr = reason ? xstrdup(reason) : NULL;
    free(a->reason);
    a->reason = nr;
    a->state = st;
    a->updated_ms = util_wall_ms();
    if (st != APP_RESUMING)
        a->pin_check = 0; /* a check for a start no longer wanted: its
                             end does nothing (pull.c) */
}

void state_set_rows(struct accel_daemon *d, struct app *a,
                    const struct adm_row *rows, size_t n)
{
    const struct adm_req *r = state_app_req(a);
    static const struct adm_req none;
    /* rows going away take their quota ledgers with them, whichever
     * operation drops them */
    for (size_t i = 0; d->hooks.device_changed && i < a->nrows; i++)
        d->hooks.device_changed(d, (int)a->rows[i].dev);
    for (size_t i = 0; d->hooks.device_changed && i < n; i++)
        d->hooks.device_changed(d, (int)rows[i].dev);
    if (a->nrows > 0) {
        if (d->hooks.rows_released)
            d->hooks.rows_released(d, a);
        adm_snapshot_release(&d->snap, r ? r : &none, a->rows, a->nrows);
    }
    free(a->rows);
    free(a->row_usage);
    free(a->row_vram);
    a->rows = NULL;
    a->row_usage = NULL;
    a->row_vram = NULL;
    a->nrows = 0;
    a->usage = 0;
    if (n > 0) {
        a->rows = xmalloc(n * sizeof(*rows));
        memcpy(a->rows, rows, n * sizeof(*rows));
        a->row_usage = xcalloc(n, sizeof(*a->row_usage));
        a->nrows = n;
        adm_snapshot_apply(&d->snap, r ? r : &none, a->rows, n);
    }
}

void state_row_set_memory(struct accel_daemon *d, struct app *a, size_t k,
                          uint64_t memory)
{
    const struct adm_req *r = state_app_req(a);
    static const struct adm_req none;

    if (k >= a->nrows)
        return;
    /* only the quota moves: the rows stay, and so do their ledgers (no
     * rows_released), the card's accounting follows */
    adm_snapshot_release(&d->snap, r ? r : &none, a->rows, a->nrows);
    a->rows[k].memory = memory;
    adm_snapshot_apply(&d->snap, r ? r : &none, a->rows, a->nrows);
    if (d->hooks.device_changed)
        d->hooks.device_changed(d, (int)a->rows[k].dev);
}

char *state_app_decode(const struct store_app *row, struct app *a,
                       enum accel_type *sel_type)
{
    json_t *man;
    char *cause = NULL, *why;
    json_error_t e;

    if (!accel_name_valid(row->name))
        return xasprintf("\"%s\" is not a valid app name", row->name);
    if (!app_state_parse(row->state, &a->state))
        return xasprintf("state \"%s\" is not an app state", row->state);
    if (row->selected_type && !accel_type_parse(row->selected_type, sel_type))
        return xasprintf("selected_type \"%s\" is not an accelerator type",
                         row->selected_type);
    man = json_loads(row->manifest, JSON_REJECT_DUPLICATES, &e);
    if (man == NULL)
        return xasprintf("manifest is not valid JSON (%s)", e.text);
    if (manifest_parse(man, &a->m, &cause) != ACCEL_OK) {
        json_decref(man);
        why = xasprintf("manifest does not validate (%s)",
                        cause ? cause : "invalid");
        free(cause);
        return why;
    }
    json_decref(man);
    if (row->selected_type && manifest_req(&a->m, *sel_type) == NULL) {
        manifest_release(&a->m);
        return xasprintf("selected_type \"%s\" is not a mode of its "
                         "manifest", row->selected_type);
    }
    return NULL;
}


bool state_app_remote(const struct accel_daemon *d, const struct app *a)
{
    for (size_t i = 0; i < a->nrows; i++) {
        const struct node_info *n = &d->ninfo[d->snap.devs[a->rows[i].dev].node];
        if (n->member && !n->local)
            return true;
    }
    return false;
}

const char *state_app_shown(const struct accel_daemon *d, const struct app *a)
{
    for (size_t i = 0; i < a->nrows; i++) {
        const struct node_info *n = &d->ninfo[d->snap.devs[a->rows[i].dev].node];
        if (n->member && !n->reachable)
            return "unknown";
    }
    return app_state_name(a->state);
}

bool state_app_multi(const struct accel_daemon *d, const struct app *a)
{
    if (d->cfg.etcd == NULL || !manifest_runs(&a->m) || a->nrows < 2)
        return false;
    for (size_t i = 1; i < a->nrows; i++)
        if (d->snap.devs[a->rows[i].dev].node != d->snap.devs[a->rows[0].dev].node)
            return true;
    return false;
}

bool state_app_part_here(const struct accel_daemon *d, const struct app *a)
{
    for (size_t i = 0; i < a->nrows; i++)
        if (d->ninfo[d->snap.devs[a->rows[i].dev].node].local)
            return true;
    return false;
}

bool state_part_has(const struct app *a, const char *node)
{
    for (size_t i = 0; i < a->nparts; i++)
        if (strcmp(a->parts[i], node) == 0)
            return true;
    return false;
}

void state_part_set(struct app *a, const char *node, bool on)
{
    for (size_t i = 0; i < a->nparts; i++) {
        if (strcmp(a->parts[i], node) != 0)
            continue;
        if (!on) {
            free(a->parts[i]);
            a->parts[i] = a->parts[--a->nparts];
        }
        return;
    }
    if (on) {
        a->parts = xrealloc(a->parts, (a->nparts + 1) * sizeof(*a->parts));
        a->parts[a->nparts++] = xstrdup(node);
    }
}

bool state_parts_complete(const struct accel_daemon *d, const struct app *a)
{
    for (size_t i = 0; i < a->nrows; i++) {
        const char *n = d->snap.nodes[d->snap.devs[a->rows[i].dev].node].name;
        if (!state_part_has(a, n))
            return false;
    }
    return a->nrows > 0;
}

/* Refusal events held back by this thread (state_refusals_hold). */
struct held_refusal {
    char *app_name;
    json_t *data;
    char *msg;
};
static _Thread_local bool refusals_held;
static _Thread_local struct held_refusal *held;
static _Thread_local size_t nheld;

void state_event_refusal(struct accel_daemon *d, const char *app,
                         json_t *data, const char *fmt, ...)
{
    va_list ap;
    char *msg;
    va_start(ap, fmt);
    msg = xvasprintf(fmt, ap);
    va_end(ap);
    if (!refusals_held) {
        state_event(d, "refusal", app, NULL, NULL, data, "%s", msg);
        free(msg);
        return;
    }
    held = xrealloc(held, (nheld + 1) * sizeof(*held));
    held[nheld++] = (struct held_refusal){app ? xstrdup(app) : NULL, data,
                                          msg};
}

void state_refusals_hold(void)
{
    refusals_held = true;
}

void state_refusals_release(struct accel_daemon *d, bool keep)
{
    refusals_held = false;
    if (keep && nheld > 0)
        pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < nheld; i++) {
        if (keep)
            state_event(d, "refusal", held[i].app_name, NULL, NULL, held[i].data,
                        "%s", held[i].msg);
        else
            json_decref(held[i].data);
        free(held[i].app_name);
        free(held[i].msg);
    }
    if (keep && nheld > 0)
        pthread_mutex_unlock(&d->lock);
    free(held);
    held = NULL;
    nheld = 0;
}
