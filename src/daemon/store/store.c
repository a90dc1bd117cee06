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

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/util.h"

/* ------------------------------------------------------------- lifetime */

enum accel_err store_open(const char *path, struct store **out, char **cause)
{
    return store_sqlite_open(path, out, cause);
}

enum accel_err store_open_etcd(const struct store_etcd_opts *o,
                               struct store **out, char **cause)
{
    return store_etcd_open(o, out, cause);
}

void store_close(struct store *s)
{
    if (s)
        s->ops->close(s);
}

bool store_created(const struct store *s)
{
    return s->ops->created(s);
}

int64_t store_created_ms(struct store *s)
{
    return s->ops->created_ms ? s->ops->created_ms(s) : 0;
}

const char *store_errmsg(const struct store *s)
{
    return s ? s->ops->errmsg(s) : "";
}

void store_set_busy_timeout(struct store *s, int ms)
{
    if (s->ops->set_busy_timeout)
        s->ops->set_busy_timeout(s, ms);
}

enum accel_err store_load(struct store *s, const struct store_loader *l,
                          char **cause)
{
    return s->ops->load(s, l, cause);
}

/* ---------------------------------------------------------- transactions */

enum accel_err store_begin(struct store *s)
{
    return s->ops->begin(s);
}

enum accel_err store_commit(struct store *s)
{
    return s->ops->commit(s);
}

void store_rollback(struct store *s)
{
    s->ops->rollback(s);
}

enum accel_err store_set_group_commit(struct store *s, bool on)
{
    return s->ops->set_group_commit ? s->ops->set_group_commit(s, on)
                                    : ACCEL_OK;
}

enum accel_err store_sync(struct store *s)
{
    return s->ops->sync(s);
}

/* ------------------------------------------------------------ row writes */

/*
 * What every backend checks of a write, before its own work: a
 * transaction that no failure has ended (else ACCEL_EINVAL, nothing
 * changes), then the row's required fields (else the whole transaction
 * fails: nothing of it can commit, store.h). why names the fields.
 */
static enum accel_err check_write(struct store *s, bool complete,
                                  const char *why)
{
    enum accel_err err = s->ops->writable(s);
    if (err == ACCEL_OK && !complete)
        err = s->ops->fail(s, ACCEL_EINVAL, why);
    return err;
}

/* A delete by one key: the key must be there. */
static enum accel_err delete_key(struct store *s, const char *key,
                                 enum accel_err (*op)(struct store *s,
                                                      const char *key))
{
    enum accel_err err = check_write(s, key, "store delete without a key");
    return err != ACCEL_OK ? err : op(s, key);
}

enum accel_err store_app_put(struct store *s, const struct store_app *a)
{
    enum accel_err err =
        check_write(s, a->name && a->owner && a->state && a->manifest,
                    "app row without name, owner, "
                    "state or manifest");
    return err != ACCEL_OK ? err : s->ops->app_put(s, a);
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
    return err != ACCEL_OK ? err : s->ops->alloc_put(s, a);
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
    return err != ACCEL_OK ? err : s->ops->alloc_delete(s, app, device);
}

enum accel_err store_device_put(struct store *s, const struct store_device *d)
{
    enum accel_err err = check_write(s, d->node && d->id && d->support,
                                     "device row with a NULL key");
    return err != ACCEL_OK ? err : s->ops->device_put(s, d);
}

enum accel_err store_node_put(struct store *s, const struct store_node *n)
{
    enum accel_err err = check_write(s, n->name, "node row without a name");
    return err != ACCEL_OK ? err : s->ops->node_put(s, n);
}

enum accel_err store_node_delete(struct store *s, const char *name)
{
    return delete_key(s, name, s->ops->node_delete);
}

enum accel_err store_user_put(struct store *s, const struct store_user *u)
{
    enum accel_err err = check_write(s, u->name && u->role && u->token_hash,
                                     "user row with a NULL field");
    return err != ACCEL_OK ? err : s->ops->user_put(s, u);
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
    return err != ACCEL_OK ? err : s->ops->identity_put(s, id);
}

enum accel_err store_identity_retire(struct store *s, const char *name,
                                     const struct store_identity *retired)
{
    enum accel_err err =
        check_write(s, name && retired->name && retired->uid > 0,
                    "identity retirement without a "
                    "name or with uid <= 0");
    return err != ACCEL_OK ? err : s->ops->identity_retire(s, name, retired);
}

enum accel_err store_limits_put(struct store *s, const struct store_limits *l)
{
    enum accel_err err = check_write(s, l->name, "limits row without a name");
    return err != ACCEL_OK ? err : s->ops->limits_put(s, l);
}

enum accel_err store_limits_delete(struct store *s, const char *name)
{
    return delete_key(s, name, s->ops->limits_delete);
}

/* ---------------------------------------------------------------- events */

enum accel_err store_event_append(struct store *s, const struct store_event *e,
                                  int64_t keep_max, int64_t *out_id)
{
    if (s->ops->failed(s)) /* not a transaction of its own: part of that one */
        return s->ops->fail(s, ACCEL_EINVAL, "event in a transaction that a "
                                             "failure rolled back");
    if (e->kind == NULL || e->message == NULL)
        return s->ops->fail(s, ACCEL_EINVAL, "event without kind or message");
    return s->ops->event_append(s, e, keep_max, out_id);
}

enum accel_err
store_events_query(struct store *s, const struct store_event_filter *f,
                   enum accel_err (*cb)(void *ctx, const struct store_event *e),
                   void *ctx)
{
    return s->ops->events_query(s, f, cb, ctx);
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
    if (s->ops->commit_queued)
        return s->ops->commit_queued(s, mu, conflict_rev);
    return s->ops->commit(s);
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

enum accel_err store_member_put(struct store *s, const char *kind,
                                const char *node, const char *json,
                                int64_t lease)
{
    return CLUSTER_OP(member_put, kind, node, json, lease);
}

enum accel_err store_member_delete(struct store *s, const char *kind,
                                   const char *node)
{
    return CLUSTER_OP(member_delete, kind, node);
}

enum accel_err store_part_put(struct store *s, const char *app,
                              const char *node, int64_t pid, uint64_t pid_start)
{
    return CLUSTER_OP(part_put, app, node, pid, pid_start);
}

enum accel_err store_part_delete(struct store *s, const char *app,
                                 const char *node)
{
    return CLUSTER_OP(part_delete, app, node);
}

enum accel_err store_follow(struct store *s, const struct store_follower *f,
                            volatile int *stop)
{
    return CLUSTER_OP(follow, f, stop);
}

#undef CLUSTER_OP
