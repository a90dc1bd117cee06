/* SPDX-License-Identifier: MIT */
/*
 * store.c: the public functions of store.h, over the table of operations
 * of the store's backend (store_int.h): store_sqlite.c (SPEC 9) or
 * store_etcd.c (SPEC 10). What every backend shares is here; what one
 * backend does not have (its operation is NULL) is answered here too, in
 * the one function that calls it, as store.h says ("SQLite: ACCEL_OK at
 * once"). Nothing here knows SQL or keys.
 */
#include "common/accel_setup.h"
#include "daemon/store/store_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/util.h"

/* --------------------------------------------------------------- threads */

/* The message of the last failure on this thread, and its store. */
static _Thread_local struct {
    const struct store *s;
    char msg[512];
} last_err;

void store_set_errmsg(const struct store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err.msg, sizeof last_err.msg, fmt, ap);
    va_end(ap);
    last_err.s = s;
}

const char *store_errmsg(const struct store *s)
{
    return s && last_err.s == s ? last_err.msg : "";
}

void store_base_init(struct store *s)
{
    pthread_condattr_t ca;
    pthread_mutexattr_t ma;
    pthread_mutex_init(&s->txmu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->txfree, &ca);
    pthread_condattr_destroy(&ca);
    /* recursive: a query's callback may read the store again */
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->callmu, &ma);
    pthread_mutexattr_destroy(&ma);
    s->tx_held = false;
    s->wait_ms = 5000;
}

/* A backend whose own writes may meet other calls takes none of them at
 * the same time (store_int.h). */
static void call_enter(struct store *s)
{
    if (!s->ops->own_concurrent)
        pthread_mutex_lock(&s->callmu);
}

static void call_leave(struct store *s)
{
    if (!s->ops->own_concurrent)
        pthread_mutex_unlock(&s->callmu);
}

/* err, once the call is over (call_enter came before it). */
static enum accel_err left(struct store *s, enum accel_err err)
{
    call_leave(s);
    return err;
}

/* Is the open transaction this thread's? */
static bool tx_mine(struct store *s)
{
    bool mine;
    pthread_mutex_lock(&s->txmu);
    mine = s->tx_held && pthread_equal(s->tx_owner, pthread_self());
    pthread_mutex_unlock(&s->txmu);
    return mine;
}

/* Take the transaction slot for this thread, waiting (at most wait_ms)
 * while another thread's transaction is open; *had: it was this
 * thread's already. */
static enum accel_err slot_take(struct store *s, bool *had)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += s->wait_ms / 1000;
    until.tv_nsec += (long)(s->wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->txmu);
    *had = s->tx_held && pthread_equal(s->tx_owner, pthread_self());
    while (s->tx_held && !*had) {
        if (pthread_cond_timedwait(&s->txfree, &s->txmu, &until) ==
            ETIMEDOUT) {
            pthread_mutex_unlock(&s->txmu);
            store_set_errmsg(s, "another thread's store transaction stayed "
                                "open for %d ms", s->wait_ms);
            return ACCEL_EBUSY;
        }
    }
    s->tx_held = true;
    s->tx_owner = pthread_self();
    pthread_mutex_unlock(&s->txmu);
    return ACCEL_OK;
}

static void slot_give(struct store *s)
{
    pthread_mutex_lock(&s->txmu);
    s->tx_held = false;
    pthread_cond_broadcast(&s->txfree);
    pthread_mutex_unlock(&s->txmu);
}

/* A transaction's call from a thread that has none open: refused, and the
 * transaction another thread may have open is left as it is. */
static enum accel_err not_mine(struct store *s, const char *call)
{
    store_set_errmsg(s, "%s without a transaction of this thread's", call);
    return ACCEL_EINVAL;
}

/* ------------------------------------------------------------- lifetime */

/* The constructor's answer, the base of its store set up. */
static enum accel_err opened(enum accel_err err, struct store **out)
{
    if (err == ACCEL_OK)
        store_base_init(*out);
    return err;
}

enum accel_err store_open(const char *path, struct store **out, char **cause)
{
    return opened(store_sqlite_open(path, out, cause), out);
}

enum accel_err store_open_etcd(const struct store_etcd_opts *o,
                               struct store **out, char **cause)
{
    return opened(store_etcd_open(o, out, cause), out);
}

void store_close(struct store *s)
{
    if (s == NULL)
        return;
    if (last_err.s == s)
        last_err.s = NULL;
    pthread_mutex_destroy(&s->txmu);
    pthread_cond_destroy(&s->txfree);
    pthread_mutex_destroy(&s->callmu);
    s->ops->close(s);
}

bool store_created(const struct store *s)
{
    return s->ops->created(s);
}

int64_t store_created_ms(struct store *s)
{
    if (s->ops->created_ms == NULL)
        return 0;
    call_enter(s);
    int64_t ms = s->ops->created_ms(s);
    call_leave(s);
    return ms;
}

void store_set_busy_timeout(struct store *s, int ms)
{
    s->wait_ms = ms > 0 ? ms : 0;
    if (s->ops->set_busy_timeout) {
        call_enter(s);
        s->ops->set_busy_timeout(s, ms);
        call_leave(s);
    }
}

enum accel_err store_load(struct store *s, const struct store_loader *l,
                          char **cause)
{
    call_enter(s);
    return left(s, s->ops->load(s, l, cause));
}

/* ---------------------------------------------------------- transactions */

enum accel_err store_begin(struct store *s)
{
    bool had;
    enum accel_err err = slot_take(s, &had);
    if (err != ACCEL_OK)
        return err;
    call_enter(s);
    err = s->ops->begin(s);
    call_leave(s);
    if (err != ACCEL_OK && !had)
        slot_give(s);
    return err;
}

enum accel_err store_commit(struct store *s)
{
    enum accel_err err;
    if (!tx_mine(s))
        return not_mine(s, "store_commit");
    call_enter(s);
    err = s->ops->commit(s);
    call_leave(s);
    slot_give(s); /* a commit ends the transaction, whatever it answers */
    return err;
}

void store_rollback(struct store *s)
{
    if (!tx_mine(s))
        return;
    call_enter(s);
    s->ops->rollback(s);
    call_leave(s);
    slot_give(s);
}

enum accel_err store_set_group_commit(struct store *s, bool on)
{
    if (s->ops->set_group_commit == NULL)
        return ACCEL_OK;
    call_enter(s);
    return left(s, s->ops->set_group_commit(s, on));
}

enum accel_err store_sync(struct store *s)
{
    return s->ops->sync(s); /* any thread, beside any call (store.h) */
}

/* ------------------------------------------------------------ row writes */

/*
 * What every backend checks of a write, before its own work: a
 * transaction that no failure has ended (else ACCEL_EINVAL, nothing
 * changes), then the row's required fields (else the whole transaction
 * fails: nothing of it can commit, store.h). why names the fields.
 */
/* A transaction of another thread's is never touched: its owner alone
 * writes into it. On ACCEL_OK the call is entered (call_enter): the
 * caller ends with left(s, the backend's answer). */
static enum accel_err check_write(struct store *s, bool complete,
                                  const char *why)
{
    enum accel_err err;
    if (!tx_mine(s))
        return not_mine(s, "a store write");
    call_enter(s);
    err = s->ops->writable(s);
    if (err == ACCEL_OK && !complete)
        err = s->ops->fail(s, ACCEL_EINVAL, why);
    if (err != ACCEL_OK)
        call_leave(s);
    return err;
}

/* A delete by one key: the key must be there. */
static enum accel_err delete_key(struct store *s, const char *key,
                                 enum accel_err (*op)(struct store *s,
                                                      const char *key))
{
    enum accel_err err = check_write(s, key, "store delete without a key");
    return err != ACCEL_OK ? err : left(s, op(s, key));
}

enum accel_err store_app_put(struct store *s, const struct store_app *a)
{
    enum accel_err err =
        check_write(s, a->name && a->owner && a->state && a->manifest,
                    "app row without name, owner, "
                    "state or manifest");
    return err != ACCEL_OK ? err : left(s, s->ops->app_put(s, a));
}

enum accel_err store_app_delete(struct store *s, const char *name)
{
    return delete_key(s, name, s->ops->app_delete);
}

enum accel_err store_alloc_put(struct store *s, const struct store_alloc *a)
{
    enum accel_err err =
        check_write(s, a->app && a->owner && a->type && a->node && a->device,
                    "allocation row with a NULL field");
    return err != ACCEL_OK ? err : left(s, s->ops->alloc_put(s, a));
}

enum accel_err store_alloc_delete_app(struct store *s, const char *app)
{
    return delete_key(s, app, s->ops->alloc_delete_app);
}

enum accel_err store_alloc_delete(struct store *s, const char *app,
                                  const char *device)
{
    enum accel_err err =
        check_write(s, app && device, "allocation delete without a key");
    return err != ACCEL_OK ? err : left(s, s->ops->alloc_delete(s, app, device));
}

enum accel_err store_device_put(struct store *s, const struct store_device *d)
{
    enum accel_err err = check_write(s, d->node && d->id && d->support,
                                     "device row with a NULL key");
    return err != ACCEL_OK ? err : left(s, s->ops->device_put(s, d));
}

enum accel_err store_node_put(struct store *s, const struct store_node *n)
{
    enum accel_err err = check_write(s, n->name, "node row without a name");
    return err != ACCEL_OK ? err : left(s, s->ops->node_put(s, n));
}

enum accel_err store_node_delete(struct store *s, const char *name)
{
    return delete_key(s, name, s->ops->node_delete);
}

enum accel_err store_user_put(struct store *s, const struct store_user *u)
{
    enum accel_err err = check_write(s, u->name && u->role && u->token_hash,
                                     "user row with a NULL field");
    return err != ACCEL_OK ? err : left(s, s->ops->user_put(s, u));
}

enum accel_err store_user_delete(struct store *s, const char *name)
{
    return delete_key(s, name, s->ops->user_delete);
}

enum accel_err store_identity_put(struct store *s,
                                  const struct store_identity *id)
{
    enum accel_err err = check_write(s, id->name && id->uid > 0,
                                     "identity row without a name or "
                                     "with uid <= 0");
    return err != ACCEL_OK ? err : left(s, s->ops->identity_put(s, id));
}

enum accel_err store_identity_retire(struct store *s, const char *name,
                                     const struct store_identity *retired)
{
    enum accel_err err =
        check_write(s, name && retired->name && retired->uid > 0,
                    "identity retirement without a "
                    "name or with uid <= 0");
    return err != ACCEL_OK ? err : left(s, s->ops->identity_retire(s, name, retired));
}

enum accel_err store_limits_put(struct store *s, const struct store_limits *l)
{
    enum accel_err err = check_write(s, l->name, "limits row without a name");
    return err != ACCEL_OK ? err : left(s, s->ops->limits_put(s, l));
}

enum accel_err store_limits_delete(struct store *s, const char *name)
{
    return delete_key(s, name, s->ops->limits_delete);
}

/* ---------------------------------------------------------------- events */

/*
 * A write that may stand alone (events, member keys): part of the
 * caller's transaction when this thread has one open, else one of its own,
 * which never joins another thread's (store_int.h). A backend that is not
 * own_concurrent writes it holding the transaction slot, so it waits for
 * another thread's transaction to end. *own says which; on ACCEL_OK the
 * call is entered and own_end ends it.
 */
static enum accel_err own_begin(struct store *s, bool *own)
{
    bool had;
    enum accel_err err;
    *own = !tx_mine(s);
    if (*own && !s->ops->own_concurrent) {
        err = slot_take(s, &had);
        if (err != ACCEL_OK)
            return err;
    }
    call_enter(s);
    return ACCEL_OK;
}

static enum accel_err own_end(struct store *s, bool own, enum accel_err err)
{
    call_leave(s);
    if (own && !s->ops->own_concurrent)
        slot_give(s);
    return err;
}

enum accel_err store_event_append(struct store *s, const struct store_event *e,
                                  int64_t keep_max, int64_t *out_id)
{
    bool own;
    enum accel_err err = own_begin(s, &own);
    if (err != ACCEL_OK)
        return err;
    /* in a failed transaction: not one of its own but part of that one */
    if (!own && s->ops->failed(s))
        err = s->ops->fail(s, ACCEL_EINVAL, "event in a transaction that a "
                                            "failure rolled back");
    else if (e->kind == NULL || e->message == NULL)
        err = own ? (store_set_errmsg(s, "event without kind or message"),
                     ACCEL_EINVAL)
                  : s->ops->fail(s, ACCEL_EINVAL,
                                 "event without kind or message");
    else
        err = s->ops->event_append(s, e, keep_max, own, out_id);
    return own_end(s, own, err);
}

enum accel_err
store_events_query(struct store *s, const struct store_event_filter *f,
                   enum accel_err (*cb)(void *ctx, const struct store_event *e),
                   void *ctx)
{
    call_enter(s);
    return left(s, s->ops->events_query(s, f, cb, ctx));
}

/* ------------------------------------------------------- loaded rows */

/* The callbacks take different structs, so each kind is named once here:
 * GIVE(cb) is l->cb's answer for row, or ACCEL_OK when l has none. */
#define GIVE(cb) (l->cb ? l->cb(l->ctx, row, why) : ACCEL_OK)

enum accel_err store_loader_give(const struct store_loader *l,
                                 enum store_row kind, const void *row,
                                 char **why)
{
    switch (kind) {
    case STORE_ROW_APP: return GIVE(app);
    case STORE_ROW_ALLOC: return GIVE(alloc);
    case STORE_ROW_DEVICE: return GIVE(device);
    case STORE_ROW_NODE: return GIVE(node);
    case STORE_ROW_USER: return GIVE(user);
    case STORE_ROW_IDENTITY: return GIVE(identity);
    case STORE_ROW_LIMITS: return GIVE(limits);
    }
    return ACCEL_OK;
}

#undef GIVE

/* ------------------------------------------------- undecodable rows */

void store_bads_add(struct store_bads *b, const char *table, char *key,
                    char *why)
{
    b->v = xrealloc(b->v, (b->n + 1) * sizeof(*b->v));
    b->v[b->n++] = (struct store_bad){table, key, why};
}

bool store_bads_has(const struct store_bads *b, const char *table,
                    const char *key)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->v[i].table && strcmp(b->v[i].table, table) == 0 &&
            strcmp(b->v[i].key, key) == 0)
            return true;
    return false;
}

char *store_bads_list(const struct store_bads *b)
{
    char *out = xstrdup("");
    for (size_t i = 0; i < b->n && i < 20; i++) {
        const struct store_bad *r = &b->v[i];
        char *n = r->table ? xasprintf("%s%stable %s, row \"%s\": %s", out,
                                       i ? "; " : "", r->table, r->key, r->why)
                           : xasprintf("%s%skey %s: %s", out, i ? "; " : "",
                                       r->key, r->why);
        free(out);
        out = n;
    }
    if (b->n > 20) {
        char *n = xasprintf("%s; and %zu more", out, b->n - 20);
        free(out);
        out = n;
    }
    return out;
}

char *store_bads_json(const struct store_bads *b)
{
    json_t *list = json_array(), *o;
    char *text;
    for (size_t i = 0; i < b->n; i++) {
        const struct store_bad *r = &b->v[i];
        json_array_append_new(
            list, r->table ? json_pack("{s:s, s:s, s:s}", "table", r->table,
                                       "key", r->key, "reason", r->why)
                           : json_pack("{s:s, s:s}", "key", r->key, "reason",
                                       r->why));
    }
    o = json_pack("{s:o}", "dropped", list);
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

void store_bads_free(struct store_bads *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->v[i].key);
        free(b->v[i].why);
    }
    free(b->v);
    b->v = NULL;
    b->n = 0;
}

/* ----------------------------------------------------- the cluster store */

bool store_is_cluster(const struct store *s)
{
    return s && s->ops->cluster;
}

struct etcd *store_etcd(struct store *s)
{
    return s && s->ops->client ? s->ops->client(s) : NULL;
}

const char *store_prefix(const struct store *s)
{
    return s->ops->prefix ? s->ops->prefix(s) : "/";
}

void store_set_housekeeper(struct store *s, bool on)
{
    if (s->ops->set_housekeeper)
        s->ops->set_housekeeper(s, on);
}

char *store_key(const struct store *s, const char *kind, const char *name)
{
    return xasprintf("%s%s/%s", s->ops->prefix ? s->ops->prefix(s) : "/", kind,
                     name);
}

int64_t store_conflict_rev(const struct store *s)
{
    return s->ops->conflict_rev ? s->ops->conflict_rev(s) : 0;
}

enum accel_err store_commit_queued(struct store *s, pthread_mutex_t *mu,
                                   int64_t *conflict_rev)
{
    void *ticket = NULL;
    enum accel_err err;
    if (s->ops->queue == NULL)
        return store_commit(s);
    if (!tx_mine(s)) {
        s->ops->queue(s, NULL); /* counted as unsettled, like any answer */
        return not_mine(s, "store_commit_queued");
    }
    call_enter(s);
    err = s->ops->queue(s, &ticket);
    call_leave(s);
    /* the backend holds nothing of the transaction now: mu may be let go
     * while the answer comes, and another thread begin its own */
    slot_give(s);
    if (err != ACCEL_OK)
        return err;
    return s->ops->await(s, ticket, mu, conflict_rev);
}

void store_queued_settled(struct store *s)
{
    if (s->ops->queued_settled)
        s->ops->queued_settled(s);
}

void store_queue_gate(struct store *s, pthread_mutex_t *mu)
{
    if (s->ops->queue_gate)
        s->ops->queue_gate(s, mu);
}

enum accel_err store_wait_rev(struct store *s, int64_t rev, int ms)
{
    return s->ops->wait_rev ? s->ops->wait_rev(s, rev, ms) : ACCEL_OK;
}

int64_t store_view_rev(struct store *s)
{
    return s->ops->view_rev ? s->ops->view_rev(s) : 0;
}

enum accel_err store_view_sync(struct store *s, int64_t since, int ms,
                               bool *moved)
{
    *moved = false;
    return s->ops->view_sync ? s->ops->view_sync(s, since, ms, moved)
                             : ACCEL_OK;
}

/* A cluster operation: what it answers, or ACCEL_ENOTSUP on a local
 * store (its op is NULL). */
#define CLUSTER_OP(op, ...)                                                    \
    (s->ops->op ? s->ops->op(s, __VA_ARGS__) : ACCEL_ENOTSUP)

/* A member key written (json) or deleted (NULL), as store_event_append. */
static enum accel_err member_write(struct store *s, const char *kind,
                                   const char *node, const char *json,
                                   int64_t lease)
{
    bool own;
    enum accel_err err;
    if (s->ops->member_write == NULL)
        return ACCEL_ENOTSUP;
    err = own_begin(s, &own);
    if (err != ACCEL_OK)
        return err;
    return own_end(s, own,
                   s->ops->member_write(s, kind, node, json, lease, own));
}

enum accel_err store_member_put(struct store *s, const char *kind,
                                const char *node, const char *json,
                                int64_t lease)
{
    return json ? member_write(s, kind, node, json, lease) : ACCEL_EINVAL;
}

enum accel_err store_member_delete(struct store *s, const char *kind,
                                   const char *node)
{
    return member_write(s, kind, node, NULL, 0);
}

enum accel_err store_part_put(struct store *s, const char *app,
                              const char *node, int64_t pid, uint64_t pid_start)
{
    if (s->ops->part_put && !tx_mine(s))
        return not_mine(s, "store_part_put");
    return CLUSTER_OP(part_put, app, node, pid, pid_start);
}

enum accel_err store_part_delete(struct store *s, const char *app,
                                 const char *node)
{
    if (s->ops->part_delete && !tx_mine(s))
        return not_mine(s, "store_part_delete");
    return CLUSTER_OP(part_delete, app, node);
}

enum accel_err store_follow(struct store *s, const struct store_follower *f,
                            volatile int *stop)
{
    return CLUSTER_OP(follow, f, stop);
}

enum accel_err store_index_fill(struct store *s, size_t *written)
{
    *written = 0;
    return CLUSTER_OP(index_fill, written);
}

#undef CLUSTER_OP
