/* SPDX-License-Identifier: MIT */
/*
 * store_etcd.c: the etcd backend of store.h (SPEC 10). One key per row
 * under a prefix (default "/accel/"), the row as a JSON object:
 *
 *   meta/schema              the layout version (refusal of newer ones)
 *   apps/<app>               store_app
 *   allocs/<app>/<device>    store_alloc
 *   devices/<id>             store_device (a device's mode and settings)
 *   nodes/<node>             store_node (enabled)
 *   users/<name>, identities/<name>, limits/<name>
 *   uids/<uid>               the name holding a uid (unique uids)
 *   events/<node>/<seq>      store_event (seq: 16 hex digits, increasing)
 *   nodeinfo/<node>          a node's registration: its devices
 *   agents/<node>            its agent's live key, on the agent's lease
 *   parts/<app>/<node>       the part of an app bound across nodes that
 *                            runs on node (its leader)
 *   devalloc/<device>        bumped by every change of a device's
 *                            allocations: the guard of decisions on it
 *   ownalloc/<owner>         the same for a user's allocations (quotas)
 *   bynode/<node>/<app>      the index of the apps bound to a card of
 *                            node: written by every transaction that
 *                            writes the app's rows (index_tx), so that an
 *                            agent (--role agent) watches bynode/<node>/
 *                            alone and reads the rows of each app named
 *                            there (agent_cb)
 *
 * Guards. The daemon decides from memory, then writes the rows it changes.
 * This file remembers, for every key, the mod revision the daemon's memory
 * reflects (kept under the daemon's lock, together with the memory, by
 * the commits and the watch), and guards each write with it: a row is
 * written only if nobody wrote it since the daemon read it. An allocation
 * also guards (and bumps) devalloc/<device> and ownalloc/<owner>, and
 * guards the device's mode row and its node's row: what a placement read.
 *
 * etcd refuses a transaction that writes one key twice, so the writes of a
 * transaction are merged per key (the last one wins) before they are sent.
 */
#include "common/accel_setup.h"
#include "daemon/store/store_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/strmap.h"
#include "common/util.h"
#include "daemon/store/etcd.h"

#define ESTORE_LAYOUT 1          /* the key layout this build writes */
#define ESTORE_EVENT_RANK 1024   /* event id = revision * this + rank */
#define ESTORE_PRUNE_EVERY 64    /* events appended between two prunes */
#define ESTORE_OWN_REVS 64       /* own commit revisions remembered */
#define ESTORE_SYNC_WAIT_MS 10000 /* store_sync waits for the watch */

/* What this process knows of one key. */
struct kinfo {
    int64_t mod;   /* its mod revision as memory reflects it, 0 = absent */
    int64_t seen;  /* the newest revision applied to it (put or delete) */
};

/* One write of the transaction being built. */
struct wop {
    char *key;
    char *value;   /* NULL = delete */
    int64_t lease;
    bool guarded;  /* compare its mod revision with kinfo.mod */
    bool cache;    /* record its new revision at commit (not events) */
};

/* One extra guard (a key read, not written). */
struct wguard {
    char *key;
};

/* A compare of a queued batch: key's mod revision as the view of the
 * decision that queued it knew it. */
struct bcmp {
    char *key;
    int64_t mod;
};

/* Queued commits sent together as one etcd transaction (the section
 * "queued commits" below). */
struct ebatch {
    uint64_t id;
    struct wop *w;           /* writes, merged per key */
    size_t nw, cw;
    struct strmap *widx;
    struct bcmp *c;          /* compares, one per key */
    size_t nc, cc;
    struct strmap *cidx;
    size_t commits;          /* queued transactions in it */
    size_t waiting;          /* of those, not yet told the answer */
    bool done;
    enum accel_err err;      /* the answer, once done */
    int64_t rev;
    struct ebatch *next;
};

/* An event as kept in memory (the newest keep_max). */
struct eev {
    char *key;
    int64_t id, ts_ms;
    char *kind, *app, *node, *device, *message, *data;
};

/* The allocation keys of one app (for delete_app and the index). */
struct applist {
    char *name;
    char **dev;
    size_t n;
};

/* The ranges an agent watches (agent_cb), under the prefix; the
 * first is bynode/<node>/, the last agents/<node> (its own live key). */
#define AGENT_RANGES 7

/* An array of fixed-size elements found by name through a strmap. */
struct keyed {
    struct strmap *idx; /* name -> place in v */
    void *v;
    size_t n, cap;
};

struct estore {
    struct store base;       /* first: store.c's view (store_int.h) */
    struct etcd *e;
    char *prefix;
    size_t plen;
    char *node;
    bool created;
    /* key knowledge (caller's lock) */
    struct keyed keys;       /* key -> struct kinfo */
    struct keyed apps;       /* app -> struct applist */
    struct strmap *devnode;  /* device -> place in nodenames: the node of
                                each device an allocation row named */
    char **nodenames;
    size_t nnodenames;
    struct strmap *nodeidx;  /* node name -> place in nodenames */
    bool agent;              /* --role agent: load, watch and show only
                                this node's apps (agent_cb) */
    char *ranges[AGENT_RANGES]; /* an agent's watched prefixes (full) */
    int64_t reached[AGENT_RANGES]; /* and the revision each has applied
                                      (vlock): the view's is the lowest */
    /* the transaction */
    bool in_tx, tx_failed;
    struct strmap *widx;     /* key -> wops index */
    struct wop *w;
    size_t nw, cw;
    struct wguard *g;
    size_t ng, cg;
    int64_t conflict_rev;
    uint64_t ev_seq;         /* the next event key's sequence (atomic: an
                              * event of its own may come from any thread) */
    int64_t keep_max;        /* atomic, as ev_seq */
    bool housekeeper;        /* atomic: this process deletes pruned events */
    /* events (caller's lock) */
    struct eev *ev;
    size_t nev, cev;
    int64_t load_rev;
    /* the view's revision (own lock: store_sync runs without d->lock) */
    pthread_mutex_t vlock;
    pthread_cond_t vcond;
    int64_t applied_rev;     /* the watch has applied up to here */
    int64_t commit_rev;      /* this process's last commit */
    int64_t own_revs[ESTORE_OWN_REVS]; /* its latest commits' revisions:
                                          the watch does not decode them
                                          ahead (follow_cb) */
    unsigned own_next;
    /* queued commits (caller's lock; store_commit_queued) */
    struct ebatch *pending;  /* waiting to be sent, oldest first */
    struct ebatch *flying;   /* on its way to etcd, or NULL */
    uint64_t batch_seq;
    size_t unsettled;        /* queued commits whose caller has not yet
                              * made memory match the answer */
    bool drain;              /* the watch waits for every queued commit */
    pthread_cond_t bcond;    /* with the caller's lock: a batch answered,
                              * a commit settled, a drain over */
};

static void set_err(struct estore *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_err(struct estore *s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    store_set_errmsg(&s->base, "%s", msg);
}

static struct etcd *es_client(struct store *base)
{
    struct estore *s = (struct estore *)base;
    return s->e;
}

static const char *es_prefix(const struct store *base)
{
    const struct estore *s = (const struct estore *)base;
    return s->prefix;
}

static bool es_created(const struct store *base)
{
    const struct estore *s = (const struct estore *)base;
    return s->created;
}

/* ------------------------------------------------------------------ keys */

static char *key2(const struct estore *s, const char *kind, const char *a)
{
    return xasprintf("%s%s/%s", s->prefix, kind, a);
}

static char *key3(const struct estore *s, const char *kind, const char *a,
                  const char *b)
{
    return xasprintf("%s%s/%s/%s", s->prefix, kind, a, b);
}

/* The element of k named key, of size bytes; a zeroed one appended when
 * add and k has none (the array starts at first elements and doubles),
 * else NULL. */
static void *keyed_get(struct keyed *k, size_t size, size_t first,
                       const char *key, bool add)
{
    uint32_t i;
    if (strmap_get(k->idx, key, &i))
        return (char *)k->v + (size_t)i * size;
    if (!add)
        return NULL;
    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : first;
        k->v = xrealloc(k->v, k->cap * size);
    }
    strmap_put(k->idx, key, (uint32_t)k->n);
    return memset((char *)k->v + k->n++ * size, 0, size);
}

static struct kinfo *kinfo_get(struct estore *s, const char *key, bool add)
{
    return keyed_get(&s->keys, sizeof(struct kinfo), 256, key, add);
}

static int64_t kmod(struct estore *s, const char *key)
{
    struct kinfo *k = kinfo_get(s, key, false);
    return k ? k->mod : 0;
}

static struct applist *applist_get(struct estore *s, const char *app, bool add)
{
    struct applist *l = keyed_get(&s->apps, sizeof(struct applist), 64, app,
                                  add);
    if (l && l->name == NULL)
        l->name = xstrdup(app);
    return l;
}

/* The node of a device, as the allocation rows say (a device's node never
 * changes: its id is unique in the cluster); NULL when none said it. */
static const char *devnode_get(const struct estore *s, const char *dev)
{
    uint32_t i;
    return strmap_get(s->devnode, dev, &i) ? s->nodenames[i] : NULL;
}

static void devnode_set(struct estore *s, const char *dev, const char *node)
{
    uint32_t i;
    if (dev == NULL || node == NULL || strmap_get(s->devnode, dev, &i))
        return;
    if (!strmap_get(s->nodeidx, node, &i)) {
        i = (uint32_t)s->nnodenames;
        s->nodenames = xrealloc(s->nodenames,
                                (s->nnodenames + 1) * sizeof(char *));
        s->nodenames[s->nnodenames++] = xstrdup(node);
        strmap_put(s->nodeidx, node, i);
    }
    strmap_put(s->devnode, dev, i);
}

static void applist_set(struct estore *s, const char *app, const char *dev,
                        bool present)
{
    struct applist *l = applist_get(s, app, present);
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->dev[i], dev) != 0)
            continue;
        if (!present) {
            free(l->dev[i]);
            l->dev[i] = l->dev[--l->n];
        }
        return;
    }
    if (present) {
        l->dev = xrealloc(l->dev, (l->n + 1) * sizeof(*l->dev));
        l->dev[l->n++] = xstrdup(dev);
    }
}

/* Split "<prefix>allocs/<app>/<device>" into its two names (in buf). */
static bool split_alloc(const char *rest, char *buf, size_t len,
                        const char **app, const char **dev)
{
    char *slash;
    if (strlen(rest) >= len)
        return false;
    memcpy(buf, rest, strlen(rest) + 1);
    slash = strchr(buf, '/');
    if (slash == NULL || slash == buf || slash[1] == '\0')
        return false;
    *slash = '\0';
    *app = buf;
    *dev = slash + 1;
    return true;
}

/* ------------------------------------------------------------ JSON rows */

static const char *jstr(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_string(v) ||
        strlen(json_string_value(v)) != json_string_length(v))
        return NULL;
    return json_string_value(v);
}

/* A string member of a row struct and the key that holds it. */
struct jtext {
    const char *key;
    size_t off; /* offsetof the const char * member */
};
#define JT(row, member, key) {(key), offsetof(struct store_##row, member)}
#define NJT(a) (sizeof(a) / sizeof((a)[0]))

/* Set each of row's string members in f from o (jstr: NULL when missing). */
static void jtexts(const json_t *o, void *row, const struct jtext *f,
                   size_t n)
{
    for (size_t i = 0; i < n; i++)
        *(const char **)((char *)row + f[i].off) = jstr(o, f[i].key);
}

static bool jint(const json_t *o, const char *k, int64_t min, int64_t *out)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < min)
        return false;
    *out = json_integer_value(v);
    return true;
}

static void set_opt(json_t *o, const char *k, const char *v)
{
    if (v)
        json_object_set_new(o, k, json_string(v));
}

static char *dump(json_t *o)
{
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

static char *app_json(const struct store_app *a)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I}",
                          "name", a->name, "owner", a->owner, "state",
                          a->state, "manifest", a->manifest, "createdMs",
                          (json_int_t)a->created_ms, "updatedMs",
                          (json_int_t)a->updated_ms, "pid", (json_int_t)a->pid,
                          "pidStart", (json_int_t)a->pid_start, "exitStatus",
                          (json_int_t)a->exit_status);
    set_opt(o, "reason", a->reason);
    set_opt(o, "selectedType", a->selected_type);
    return dump(o);
}

static const char *app_decode(const json_t *o, void *row)
{
    struct store_app *a = row;
    int64_t ps = 0;
    static const struct jtext texts[] = {
        JT(app, name, "name"),         JT(app, owner, "owner"),
        JT(app, state, "state"),       JT(app, manifest, "manifest"),
        JT(app, reason, "reason"),     JT(app, selected_type, "selectedType")};
    *a = (struct store_app){0};
    jtexts(o, a, texts, NJT(texts));
    if (!a->name || !a->owner || !a->state || !a->manifest)
        return "name, owner, state or manifest is missing or not a string";
    if (!jint(o, "createdMs", 0, &a->created_ms) ||
        !jint(o, "updatedMs", 0, &a->updated_ms) ||
        !jint(o, "pid", 0, &a->pid) || !jint(o, "pidStart", 0, &ps) ||
        !jint(o, "exitStatus", INT64_MIN, &a->exit_status))
        return "a time, pid or exit status is missing or out of range";
    a->pid_start = (uint64_t)ps;
    return NULL;
}

static char *alloc_json(const struct store_alloc *a)
{
    return dump(json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "app", a->app,
                          "owner", a->owner, "type", a->type, "node", a->node,
                          "device", a->device, "memory",
                          (json_int_t)a->memory));
}

static const char *alloc_decode(const json_t *o, void *row)
{
    struct store_alloc *a = row;
    int64_t mem;
    static const struct jtext texts[] = {
        JT(alloc, app, "app"),   JT(alloc, owner, "owner"),
        JT(alloc, type, "type"), JT(alloc, node, "node"),
        JT(alloc, device, "device")};
    *a = (struct store_alloc){0};
    jtexts(o, a, texts, NJT(texts));
    if (!a->app || !a->owner || !a->type || !a->node || !a->device)
        return "app, owner, type, node or device is missing";
    if (!jint(o, "memory", 0, &mem))
        return "memory is missing or negative";
    a->memory = (uint64_t)mem;
    return NULL;
}

static char *device_json(const struct store_device *d)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "node", d->node, "id", d->id,
                          "support", d->support);
    set_opt(o, "settings", d->settings);
    return dump(o);
}

static const char *device_decode(const json_t *o, void *row)
{
    struct store_device *d = row;
    static const struct jtext texts[] = {
        JT(device, node, "node"), JT(device, id, "id"),
        JT(device, support, "support"), JT(device, settings, "settings")};
    *d = (struct store_device){0};
    jtexts(o, d, texts, NJT(texts));
    return d->node && d->id && d->support ? NULL
                                          : "node, id or support is missing";
}

static const char *node_decode(const json_t *o, void *row)
{
    struct store_node *n = row;
    const json_t *en = json_object_get(o, "enabled");
    *n = (struct store_node){0};
    n->name = jstr(o, "name");
    if (!n->name || !json_is_boolean(en))
        return "name or enabled is missing";
    n->enabled = json_is_true(en);
    return NULL;
}

static const char *user_decode(const json_t *o, void *row)
{
    struct store_user *u = row;
    *u = (struct store_user){0};
    u->name = jstr(o, "name");
    u->role = jstr(o, "role");
    u->token_hash = jstr(o, "tokenHash");
    if (!u->name || !u->role || !u->token_hash)
        return "name, role or tokenHash is missing";
    if (strcmp(u->role, "admin") != 0 && strcmp(u->role, "member") != 0)
        return "role is neither admin nor member";
    if (strlen(u->token_hash) != 64 ||
        strspn(u->token_hash, "0123456789abcdef") != 64)
        return "tokenHash is not 64 lowercase hex digits";
    if (!jint(o, "createdMs", 0, &u->created_ms))
        return "createdMs is missing or negative";
    return NULL;
}

static const char *identity_decode(const json_t *o, void *row)
{
    struct store_identity *i = row;
    *i = (struct store_identity){0};
    i->name = jstr(o, "name");
    if (!i->name || !jint(o, "uid", 1, &i->uid) || i->uid > UINT32_MAX)
        return "name or uid is missing or out of range";
    return NULL;
}

static const char *limits_decode(const json_t *o, void *row)
{
    struct store_limits *l = row;
    *l = (struct store_limits){0};
    l->name = jstr(o, "name");
    if (!l->name || !jint(o, "maxApps", -1, &l->max_apps) ||
        !jint(o, "maxGpuMemory", -1, &l->max_gpu_memory))
        return "name, maxApps or maxGpuMemory is missing or out of range";
    return NULL;
}

static const char *event_decode(const json_t *o, struct store_event *e)
{
    static const struct jtext texts[] = {
        JT(event, kind, "kind"),     JT(event, message, "message"),
        JT(event, app, "app"),       JT(event, node, "node"),
        JT(event, device, "device"), JT(event, data, "data")};
    *e = (struct store_event){0};
    jtexts(o, e, texts, NJT(texts));
    if (!e->kind || !e->message || !jint(o, "ts", 0, &e->ts_ms))
        return "kind, message or ts is missing";
    return NULL;
}

/* Any one row, decoded (store_load, the watch). */
union erow {
    struct store_app app;
    struct store_alloc alloc;
    struct store_device dev;
    struct store_node node;
    struct store_user user;
    struct store_identity id;
    struct store_limits lim;
};

/*
 * The tables whose key is <prefix><table>/<name> with one row struct:
 * what decodes a value and which loader and follower callback takes it.
 * allocs (two names in the key, checked against the apps), parts,
 * events, nodeinfo and agents are handled where they are used.
 */
struct erow_table {
    const char *table;
    enum store_row kind;
    const char *(*decode)(const json_t *o, void *row);
    bool named; /* the watch takes a row only when its name (the first
                   member, a const char *) is the key's */
};

static const struct erow_table erow_tables[] = {
    {"nodes", STORE_ROW_NODE, node_decode, false},
    {"devices", STORE_ROW_DEVICE, device_decode, false},
    {"users", STORE_ROW_USER, user_decode, false},
    {"identities", STORE_ROW_IDENTITY, identity_decode, false},
    {"limits", STORE_ROW_LIMITS, limits_decode, false},
    {"apps", STORE_ROW_APP, app_decode, true},
};

static const struct erow_table *erow_table_of(const char *table)
{
    for (size_t i = 0; i < sizeof erow_tables / sizeof erow_tables[0]; i++)
        if (strcmp(erow_tables[i].table, table) == 0)
            return &erow_tables[i];
    return NULL;
}

/* An event key's value as store_load checks it (store.h: an event whose
 * data is not a JSON object is refused too); NULL or why not. */
static const char *event_check(const char *raw)
{
    json_t *o = json_loads(raw, JSON_REJECT_DUPLICATES, NULL), *data;
    struct store_event e;
    const char *bad = NULL;
    if (!json_is_object(o))
        bad = "the value is not a JSON object";
    else if ((bad = event_decode(o, &e)) == NULL && e.data) {
        data = json_loads(e.data, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(data))
            bad = "data is not a JSON object";
        json_decref(data);
    }
    json_decref(o);
    return bad;
}

/* ---------------------------------------------------------- the events */

static void eev_free(struct eev *x)
{
    free(x->key);
    free(x->kind);
    free(x->app);
    free(x->node);
    free(x->device);
    free(x->message);
    free(x->data);
}

static char *dup_opt(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

/* Keep event e (id set) in memory, in id order; drops the oldest beyond
 * keep_max (their keys stay in etcd until a prune). */
static void events_keep(struct estore *s, const char *key,
                        const struct store_event *e)
{
    size_t at = s->nev;
    if (s->nev == s->cev) {
        s->cev = s->cev ? s->cev * 2 : 256;
        s->ev = xrealloc(s->ev, s->cev * sizeof(*s->ev));
    }
    while (at > 0 && s->ev[at - 1].id > e->id)
        at--;
    memmove(&s->ev[at + 1], &s->ev[at], (s->nev - at) * sizeof(*s->ev));
    s->ev[at] = (struct eev){xstrdup(key),      e->id,
                             e->ts_ms,          xstrdup(e->kind),
                             dup_opt(e->app),   dup_opt(e->node),
                             dup_opt(e->device), xstrdup(e->message),
                             dup_opt(e->data)};
    s->nev++;
}

static int64_t keep_limit(const struct estore *s)
{
    int64_t keep = __atomic_load_n(&s->keep_max, __ATOMIC_RELAXED);
    return keep > 0 ? keep : 20000;
}

/* Forget the events beyond the newest keep_max (caller's lock). Every
 * view trims its own copy; only the housekeeper (store_set_housekeeper)
 * deletes their keys in etcd, once for the cluster: their keys go to
 * *out_keys (caller frees each and the array, and sends them with
 * events_delete once the lock is let go). */
static void events_prune(struct estore *s, char ***out_keys, size_t *out_n)
{
    size_t over;
    int64_t keep = keep_limit(s);
    bool hk = __atomic_load_n(&s->housekeeper, __ATOMIC_SEQ_CST);
    *out_keys = NULL;
    *out_n = 0;
    if ((int64_t)s->nev <= keep)
        return;
    over = s->nev - (size_t)keep;
    if (hk)
        *out_keys = xcalloc(over, sizeof(char *));
    for (size_t i = 0; i < over; i++) {
        if (hk) {
            (*out_keys)[i] = s->ev[i].key;
            s->ev[i].key = NULL;
        }
        eev_free(&s->ev[i]);
    }
    if (hk)
        *out_n = over;
    memmove(s->ev, s->ev + over, (s->nev - over) * sizeof(*s->ev));
    s->nev -= over;
}

/* Delete n event keys (and free them), in unguarded transactions of at
 * most 100 deletes (a key already gone changes nothing); off the caller's
 * lock. A batch that fails is left (the keys stay in etcd until the
 * housekeeper's next start loads and prunes them), as before. */
static void events_delete(struct estore *s, char **keys, size_t n)
{
    for (size_t i = 0; i < n; i += 100) {
        struct etcd_op ops[100];
        size_t k = 0;
        bool ok;
        for (size_t j = i; j < n && k < 100; j++)
            ops[k++] = (struct etcd_op){.kind = ETCD_DELETE, .key = keys[j]};
        (void)etcd_txn(s->e, NULL, 0, ops, k, &ok, NULL, NULL);
    }
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

static void es_set_housekeeper(struct store *base, bool on)
{
    struct estore *s = (struct estore *)base;
    __atomic_store_n(&s->housekeeper, on, __ATOMIC_SEQ_CST);
}

/* --------------------------------------------------------------- open */

static enum accel_err check_layout(struct estore *s, char **cause)
{
    char *k = key2(s, "meta", "schema");
    struct etcd_kv *kv = NULL, *any = NULL;
    size_t n = 0, nany = 0;
    enum accel_err err = etcd_get(s->e, k, false, 0, &kv, &n, NULL);
    int64_t v;
    char *end;

    if (err != ACCEL_OK) {
        *cause = xasprintf("etcd at %s did not answer (%s): is etcd running "
                           "and are the URLs right?",
                           etcd_endpoint(s->e), accel_strerror(err));
        goto out;
    }
    if (n == 0) {
        /* a prefix with keys but no layout is somebody else's */
        err = etcd_get(s->e, s->prefix, true, 0, &any, &nany, NULL);
        if (err == ACCEL_OK && nany > 0) {
            *cause = xasprintf("etcd prefix %s holds %zu key%s that accel "
                               "did not write (no %smeta/schema); refusing "
                               "to use it: choose another --etcd-prefix",
                               s->prefix, nany, nany == 1 ? "" : "s",
                               s->prefix);
            err = ACCEL_ESTORE_CORRUPT;
            goto out;
        }
        if (err == ACCEL_OK) {
            struct etcd_cmp c = {k, ETCD_CREATE, ETCD_EQUAL, 0, NULL, 0};
            char val[16];
            struct etcd_op op;
            bool ok;
            snprintf(val, sizeof val, "%d", ESTORE_LAYOUT);
            op = (struct etcd_op){ETCD_PUT, k, val, strlen(val), 0};
            err = etcd_txn(s->e, &c, 1, &op, 1, &ok, NULL, cause);
            s->created = err == ACCEL_OK && ok;
        }
        if (err != ACCEL_OK && *cause == NULL)
            *cause = xasprintf("cannot write %s to etcd: %s", k,
                               accel_strerror(err));
        goto out;
    }
    errno = 0;
    v = strtoll(kv[0].value, &end, 10);
    if (errno || *end || v < 1) {
        *cause = xasprintf("%s holds \"%.40s\", not a layout version; "
                           "refusing to use this prefix", k, kv[0].value);
        err = ACCEL_ESTORE_CORRUPT;
    } else if (v > ESTORE_LAYOUT) {
        *cause = xasprintf("etcd prefix %s was written by a newer accel "
                           "(layout %" PRId64 ", this build knows %d); "
                           "refusing to use it",
                           s->prefix, v, ESTORE_LAYOUT);
        err = ACCEL_ESTORE_NEWER;
    }
out:
    etcd_kvs_free(kv, n);
    etcd_kvs_free(any, nany);
    free(k);
    return err;
}

static const struct store_ops etcd_ops;
static void es_close(struct store *base);

enum accel_err store_etcd_open(const struct store_etcd_opts *o,
                               struct store **out, char **cause)
{
    struct etcd_opts eo = {o->endpoints, o->cacert, o->cert, o->key,
                           o->timeout_ms, true};
    struct estore *s = xcalloc(1, sizeof(*s));
    const char *p = o->prefix ? o->prefix : "/accel/";
    enum accel_err err;
    struct timespec ts;

    *cause = NULL;
    if (p[0] != '/' || p[strlen(p) - 1] != '/') {
        *cause = xasprintf("--etcd-prefix \"%s\" must start and end with /",
                           p);
        free(s);
        return ACCEL_EINVAL;
    }
    err = etcd_open(&eo, &s->e, cause);
    if (err != ACCEL_OK) {
        free(s);
        return err;
    }
    if (!o->insecure) {
        char *probe = xasprintf("%smeta/schema", p);
        err = etcd_check_closed(s->e, probe, cause);
        free(probe);
        if (err != ACCEL_OK) {
            etcd_close(s->e);
            free(s);
            return err;
        }
    }
    s->prefix = xstrdup(p);
    s->plen = strlen(p);
    s->node = xstrdup(o->node ? o->node : "node");
    s->keys.idx = strmap_new();
    s->apps.idx = strmap_new();
    s->devnode = strmap_new();
    s->nodeidx = strmap_new();
    s->agent = o->agent;
    if (s->agent) {
        const char *const rel[AGENT_RANGES] = {
            "bynode/", "devices/", "nodes/", "users/", "identities/",
            "uids/",   "agents/"};
        for (size_t i = 0; i < AGENT_RANGES; i++)
            s->ranges[i] = xasprintf("%s%s%s%s", p, rel[i],
                                     i == 0 || i == AGENT_RANGES - 1
                                         ? s->node
                                         : "",
                                     i == 0 ? "/" : "");
    }
    s->widx = strmap_new();
    pthread_mutex_init(&s->vlock, NULL);
    pthread_cond_init(&s->vcond, NULL);
    pthread_cond_init(&s->bcond, NULL);
    /* event keys of this node increase across restarts: microseconds */
    clock_gettime(CLOCK_REALTIME, &ts);
    s->ev_seq = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
    s->base.ops = &etcd_ops;
    err = check_layout(s, cause);
    if (err != ACCEL_OK) {
        es_close(&s->base);
        return err;
    }
    *out = &s->base;
    return ACCEL_OK;
}

/* Free the keys and values of n writes (the array stays). */
static void wops_clear(struct wop *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(w[i].key);
        free(w[i].value);
    }
}

static void tx_clear(struct estore *s)
{
    wops_clear(s->w, s->nw);
    for (size_t i = 0; i < s->ng; i++)
        free(s->g[i].key);
    s->nw = s->ng = 0;
    strmap_free(s->widx);
    s->widx = strmap_new();
    s->in_tx = false;
    s->tx_failed = false;
}

static void es_close(struct store *base)
{
    struct estore *s = (struct estore *)base;
    if (s == NULL)
        return;
    tx_clear(s);
    free(s->w);
    free(s->g);
    strmap_free(s->widx);
    strmap_free(s->keys.idx);
    free(s->keys.v);
    for (size_t i = 0; i < s->apps.n; i++) {
        struct applist *al = (struct applist *)s->apps.v + i;
        for (size_t j = 0; j < al->n; j++)
            free(al->dev[j]);
        free(al->dev);
        free(al->name);
    }
    free(s->apps.v);
    strmap_free(s->apps.idx);
    strmap_free(s->devnode);
    strmap_free(s->nodeidx);
    for (size_t i = 0; i < s->nnodenames; i++)
        free(s->nodenames[i]);
    free(s->nodenames);
    for (size_t i = 0; i < AGENT_RANGES; i++)
        free(s->ranges[i]);
    for (size_t i = 0; i < s->nev; i++)
        eev_free(&s->ev[i]);
    free(s->ev);
    etcd_close(s->e);
    pthread_mutex_destroy(&s->vlock);
    pthread_cond_destroy(&s->vcond);
    pthread_cond_destroy(&s->bcond);
    free(s->prefix);
    free(s->node);
    free(s);
}

/* -------------------------------------------------------- transactions */

static enum accel_err es_begin(struct store *base)
{
    struct estore *s = (struct estore *)base;
    /* a failed transaction is over: the next begin starts afresh, as
     * after a rollback (store.h) */
    if (s->in_tx && !s->tx_failed) {
        set_err(s, "store_begin inside a transaction");
        return ACCEL_EINVAL;
    }
    tx_clear(s);
    s->in_tx = true;
    return ACCEL_OK;
}

static void es_rollback(struct store *base)
{
    struct estore *s = (struct estore *)base;
    tx_clear(s);
}

/* The failure contract of store.h: a failed call rolls everything back
 * and later calls answer ACCEL_EINVAL until the next begin. */
static enum accel_err need_tx(struct estore *s)
{
    if (!s->in_tx || s->tx_failed) {
        set_err(s, "no transaction (or it failed)");
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

static enum accel_err tx_fail(struct estore *s, enum accel_err err,
                              const char *why)
{
    tx_clear(s);
    s->in_tx = true;
    s->tx_failed = true;
    set_err(s, "%s", why);
    return err;
}

static bool es_failed(const struct store *base)
{
    const struct estore *s = (const struct estore *)base;
    return s->in_tx && s->tx_failed;
}

static enum accel_err es_writable(struct store *base)
{
    return need_tx((struct estore *)base);
}

static enum accel_err es_fail(struct store *base, enum accel_err err,
                              const char *why)
{
    struct estore *s = (struct estore *)base;
    if (s->in_tx)
        return tx_fail(s, err, why);
    set_err(s, "%s", why);
    return err;
}

/* Add (or replace) the write of key; takes key and value. */
static void tx_write(struct estore *s, char *key, char *value, int64_t lease,
                     bool guarded, bool cache)
{
    uint32_t i;
    if (strmap_get(s->widx, key, &i)) {
        free(s->w[i].value);
        s->w[i].value = value;
        s->w[i].lease = lease;
        s->w[i].guarded |= guarded;
        free(key);
        return;
    }
    if (s->nw == s->cw) {
        s->cw = s->cw ? s->cw * 2 : 16;
        s->w = xrealloc(s->w, s->cw * sizeof(*s->w));
    }
    s->w[s->nw] = (struct wop){key, value, lease, guarded, cache};
    strmap_put(s->widx, key, (uint32_t)s->nw);
    s->nw++;
}

/* Guard key (read, not written); takes key. */
static void tx_guard(struct estore *s, char *key)
{
    for (size_t i = 0; i < s->ng; i++) {
        if (strcmp(s->g[i].key, key) == 0) {
            free(key);
            return;
        }
    }
    if (s->ng == s->cg) {
        s->cg = s->cg ? s->cg * 2 : 16;
        s->g = xrealloc(s->g, s->cg * sizeof(*s->g));
    }
    s->g[s->ng++] = (struct wguard){key};
}

/* The guards and bumps of a change to device dev's allocations. An
 * agent (which decides no placement: it releases, and claims what an API
 * server placed) bumps devalloc and ownalloc without guarding them: it
 * does not watch them (every bind of the owner anywhere writes ownalloc),
 * and a release depends on neither; the bump still fails the decisions
 * API servers took on the allocations it frees. */
static void tx_alloc_guards(struct estore *s, const char *dev,
                            const char *node, const char *owner)
{
    tx_write(s, key2(s, "devalloc", dev), xstrdup("{}"), 0, !s->agent, true);
    tx_guard(s, key2(s, "devices", dev));
    if (node)
        tx_guard(s, key2(s, "nodes", node));
    if (owner)
        tx_write(s, key2(s, "ownalloc", owner), xstrdup("{}"), 0, !s->agent,
                 true);
}

/* ------------------------------------------------------ the bynode index */

/*
 * bynode/<node>/<app> names the apps bound to a card of node, for the
 * agents (--role agent), which watch their node's index alone. It is kept
 * here, where every transaction passes, so that no writer can forget it:
 * for each app whose rows (apps/, allocs/, parts/) the open transaction
 * writes, the key of every node the app is bound to afterwards is written
 * (created with its first allocation there; rewritten by each later write
 * of the app, which is what wakes the agent), and the key of every node it
 * leaves is deleted (with its last allocation there, or with the app).
 * A device's node is known from the allocation rows (devnode).
 */
static const char *table_of(const struct estore *s, const char *key,
                            char *table, size_t len);

static bool is_row_table(const char *table)
{
    return strcmp(table, "apps") == 0 || strcmp(table, "allocs") == 0 ||
           strcmp(table, "parts") == 0;
}

static void nodes_add(const char ***v, size_t *n, const char *node)
{
    if (node == NULL)
        return;
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*v)[i], node) == 0)
            return;
    *v = xrealloc(*v, (*n + 1) * sizeof(**v));
    (*v)[(*n)++] = node;
}

static bool nodes_has(const char *const *v, size_t n, const char *node)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], node) == 0)
            return true;
    return false;
}

/* The nodes app is bound to once the open transaction's first nw writes
 * are applied to what memory knows of it (*after), and before (*before). */
static void index_nodes(struct estore *s, const char *app, size_t nw,
                        const char ***before, size_t *nb,
                        const char ***after, size_t *na)
{
    const struct applist *l = applist_get(s, app, false);
    char *akey = key2(s, "apps", app), *pfx = key3(s, "allocs", app, "");
    size_t plen = strlen(pfx);
    uint32_t wi;
    bool gone = strmap_get(s->widx, akey, &wi) && s->w[wi].value == NULL;

    for (size_t i = 0; l && i < l->n; i++) {
        char *k = key3(s, "allocs", app, l->dev[i]);
        bool deleted = strmap_get(s->widx, k, &wi) && s->w[wi].value == NULL;
        nodes_add(before, nb, devnode_get(s, l->dev[i]));
        if (!gone && !deleted)
            nodes_add(after, na, devnode_get(s, l->dev[i]));
        free(k);
    }
    for (size_t i = 0; i < nw && !gone; i++)
        if (s->w[i].value && strncmp(s->w[i].key, pfx, plen) == 0)
            nodes_add(after, na, devnode_get(s, s->w[i].key + plen));
    free(akey);
    free(pfx);
}

static void index_app(struct estore *s, const char *app, size_t nw)
{
    const char **before = NULL, **after = NULL;
    size_t nb = 0, na = 0;
    index_nodes(s, app, nw, &before, &nb, &after, &na);
    for (size_t i = 0; i < na; i++)
        tx_write(s, key3(s, "bynode", after[i], app),
                 dump(json_pack("{s:s}", "app", app)), 0, false, true);
    for (size_t i = 0; i < nb; i++)
        if (!nodes_has(after, na, before[i]))
            tx_write(s, key3(s, "bynode", before[i], app), NULL, 0, false,
                     true);
    free(before);
    free(after);
}

/*
 * An upgrade (a cluster written before the index): every app bound to a
 * card of a node whose index key is missing gets it, each in its own
 * transaction that holds only while the app's allocation rows on that
 * node are still as loaded (a change since wrote the index itself).
 * Called by an API server at start, before its watch (nothing else runs
 * on the store yet). *written: the keys written.
 */
static enum accel_err es_index_fill(struct store *base, size_t *written)
{
    struct estore *s = (struct estore *)base;
    enum accel_err err = ACCEL_OK;
    *written = 0;
    for (size_t i = 0; i < s->apps.n && err == ACCEL_OK; i++) {
        const struct applist *l = (const struct applist *)s->apps.v + i;
        const char **nodes = NULL;
        size_t nn = 0;
        for (size_t j = 0; j < l->n; j++)
            nodes_add(&nodes, &nn, devnode_get(s, l->dev[j]));
        for (size_t k = 0; k < nn && err == ACCEL_OK; k++) {
            char *key = key3(s, "bynode", nodes[k], l->name);
            char *val = dump(json_pack("{s:s}", "app", l->name));
            struct etcd_cmp *cmps = xcalloc(l->n + 1, sizeof(*cmps));
            char **held = xcalloc(l->n + 1, sizeof(*held));
            size_t nc = 0;
            struct etcd_op op = {ETCD_PUT, key, val, strlen(val), 0};
            bool ok = false;
            int64_t rev = 0;
            if (kmod(s, key) == 0) {
                cmps[nc++] = (struct etcd_cmp){key, ETCD_CREATE, ETCD_EQUAL,
                                               0, NULL, 0};
                for (size_t j = 0; j < l->n; j++) {
                    const char *node = devnode_get(s, l->dev[j]);
                    if (node == NULL || strcmp(node, nodes[k]) != 0)
                        continue;
                    held[j] = key3(s, "allocs", l->name, l->dev[j]);
                    cmps[nc++] = (struct etcd_cmp){held[j], ETCD_MOD,
                                                   ETCD_EQUAL,
                                                   kmod(s, held[j]), NULL, 0};
                }
                err = etcd_txn(s->e, cmps, nc, &op, 1, &ok, &rev, NULL);
                if (err == ACCEL_OK && ok) {
                    struct kinfo *ki = kinfo_get(s, key, true);
                    ki->mod = ki->seen = rev;
                    (*written)++;
                }
            }
            for (size_t j = 0; j < l->n; j++)
                free(held[j]);
            free(held);
            free(cmps);
            free(val);
            free(key);
        }
        free(nodes);
    }
    if (err != ACCEL_OK)
        set_err(s, "writing the bynode index: %s", accel_strerror(err));
    return err;
}

/* The index writes of the open transaction, added to it. */
static void index_tx(struct estore *s)
{
    size_t nw = s->nw;
    struct strmap *done = strmap_new();
    for (size_t i = 0; i < nw; i++) {
        char table[32], app[512];
        const char *rest = table_of(s, s->w[i].key, table, sizeof table);
        size_t len;
        if (rest == NULL || !is_row_table(table))
            continue;
        len = strcspn(rest, "/");
        if (len == 0 || len >= sizeof app)
            continue;
        memcpy(app, rest, len);
        app[len] = '\0';
        if (strmap_get(done, app, &(uint32_t){0}))
            continue;
        strmap_put(done, app, 1);
        index_app(s, app, nw);
    }
    strmap_free(done);
}

/* After a commit at rev: memory will reflect these writes, so must the
 * guards; and store_sync waits for the watch to reach rev. */
static void record_commit(struct estore *s, const struct wop *ws, size_t n,
                          int64_t rev)
{
    for (size_t i = 0; i < n; i++) {
        const struct wop *w = &ws[i];
        struct kinfo *k;
        const char *rest = w->key + s->plen;
        if (!w->cache)
            continue;
        k = kinfo_get(s, w->key, true);
        k->mod = w->value ? rev : 0;
        if (rev > k->seen)
            k->seen = rev;
        if (strncmp(rest, "allocs/", 7) == 0) {
            char buf[512];
            const char *app, *dev;
            if (split_alloc(rest + 7, buf, sizeof buf, &app, &dev))
                applist_set(s, app, dev, w->value != NULL);
        }
    }
    pthread_mutex_lock(&s->vlock);
    if (rev > s->commit_rev)
        s->commit_rev = rev;
    s->own_revs[s->own_next++ % ESTORE_OWN_REVS] = rev;
    pthread_mutex_unlock(&s->vlock);
}

/* Was rev one of this process's latest commits? Then every row it wrote
 * is in memory already (record_commit), and the watch skips it (vlock
 * not held). A commit whose answer has not come yet is not: the watch
 * then decodes what it will skip, which costs only time. */
static bool own_rev(struct estore *s, int64_t rev)
{
    bool own = false;
    pthread_mutex_lock(&s->vlock);
    for (size_t i = 0; i < ESTORE_OWN_REVS && !own; i++)
        own = s->own_revs[i] == rev;
    pthread_mutex_unlock(&s->vlock);
    return own;
}

/* Does the open transaction (its index writes added) pass etcd's limit on
 * one transaction? If so it is refused before anything is sent, and says
 * why (a caller that can split its change does: users.c). */
static bool tx_too_big(struct estore *s)
{
    size_t nc = 0;
    for (size_t i = 0; i < s->nw; i++)
        nc += s->w[i].guarded;
    for (size_t i = 0; i < s->ng; i++)
        nc += !strmap_get(s->widx, s->g[i].key, &(uint32_t){0});
    if (s->nw <= ETCD_TXN_MAX_OPS && nc <= ETCD_TXN_MAX_OPS)
        return false;
    set_err(s, "this change writes %zu keys and checks %zu; etcd takes at "
               "most %d of each in one transaction",
            s->nw, nc, ETCD_TXN_MAX_OPS);
    return true;
}

static enum accel_err commit_tx(struct store *base)
{
    struct estore *s = (struct estore *)base;
    enum accel_err err = need_tx(s);
    struct etcd_cmp *cmps;
    struct etcd_op *ops;
    size_t nc = 0;
    bool ok = false;
    int64_t rev = 0;
    char *cause = NULL;

    if (err != ACCEL_OK)
        return err;
    if (s->nw == 0) {
        tx_clear(s);
        return ACCEL_OK;
    }
    index_tx(s);
    if (tx_too_big(s)) {
        tx_clear(s);
        return ACCEL_ETOOBIG;
    }
    cmps = xcalloc(s->nw + s->ng, sizeof(*cmps));
    ops = xcalloc(s->nw, sizeof(*ops));
    for (size_t i = 0; i < s->nw; i++) {
        const struct wop *w = &s->w[i];
        if (w->guarded)
            cmps[nc++] = (struct etcd_cmp){w->key, ETCD_MOD, ETCD_EQUAL,
                                           kmod(s, w->key), NULL, 0};
        ops[i] = w->value ? (struct etcd_op){ETCD_PUT, w->key, w->value,
                                             strlen(w->value), w->lease}
                          : (struct etcd_op){ETCD_DELETE, w->key, NULL, 0, 0};
    }
    for (size_t i = 0; i < s->ng; i++)
        if (!strmap_get(s->widx, s->g[i].key, &(uint32_t){0}))
            cmps[nc++] = (struct etcd_cmp){s->g[i].key, ETCD_MOD, ETCD_EQUAL,
                                           kmod(s, s->g[i].key), NULL, 0};
    err = etcd_txn(s->e, cmps, nc, ops, s->nw, &ok, &rev, &cause);
    if (err == ACCEL_OK && !ok) {
        s->conflict_rev = rev;
        set_err(s, "another acceld changed what this decision read "
                   "(revision %" PRId64 ")",
                rev);
        err = ACCEL_ECONFLICT;
    } else if (err != ACCEL_OK) {
        set_err(s, "etcd transaction: %s", cause ? cause : accel_strerror(err));
    } else {
        record_commit(s, s->w, s->nw, rev);
    }
    free(cause);
    free(cmps);
    free(ops);
    tx_clear(s);
    return err;
}

/* etcd's "no member answered in time" (cut off, no quorum) differs from a
 * disk error of SQLite's: the transaction may still apply, and the API
 * answers 503 saying so (docs/cluster.md). Both commits answer it so. */
static enum accel_err unanswered(enum accel_err err)
{
    return err == ACCEL_EIO ? ACCEL_EUNAVAIL : err;
}

static enum accel_err es_commit(struct store *base)
{
    return unanswered(commit_tx(base));
}

static int64_t es_conflict_rev(const struct store *base)
{
    const struct estore *s = (const struct estore *)base;
    return s->conflict_rev;
}

/* ------------------------------------------------------ queued commits */

/*
 * A bind's transaction is sent with the caller's lock released (issue 19):
 * the caller decides and reserves the decision in memory under its lock,
 * then store_commit_queued queues the transaction and sends it, dropping
 * the lock while etcd answers, so that other binds decide meanwhile
 * (counting the reservation). One batch is on its way at a time; the
 * transactions queued during its round trip are merged into the next
 * batch and sent together as one etcd transaction when it has answered.
 * That is what lets one API server keep etcd busy: a server's binds
 * mostly share their devalloc/ownalloc guards, so two of its transactions
 * in flight at once would fail each other's guards.
 *
 * Each queued transaction's compares are taken when it is queued: the
 * revisions the view of its decision knew. A key a later transaction of
 * the same batch compares with another revision keeps the first one, so a
 * batch with a decision on an older view fails as a whole. When a batch
 * succeeds, the batches still waiting compare the keys it wrote with
 * their new revisions: their decisions were taken with its reservations
 * in memory. A failed guard fails every transaction of the batch
 * (ACCEL_ECONFLICT: each decides again); ACCEL_EIO leaves each unknown,
 * as store_commit does.
 *
 * The watch must not apply a change to a key a queued batch writes or
 * compares while the batch's reservations are in memory (it could be this
 * process's own write, applied twice, or another node's, applied over a
 * reservation that is about to be taken back). A revision that wrote one
 * of the flying batch's event keys is that batch's commit: the watch
 * records it as the answer would (the answer, when it comes, changes
 * nothing). For any other change to such a key it sets drain, waits until
 * every queued commit is answered and settled, and new decisions wait for
 * the drain to end (store_queue_gate).
 */

#define ESTORE_BATCH_MAX 16 /* queued transactions merged into one */

static struct ebatch *batch_new(struct estore *s)
{
    struct ebatch *b = xcalloc(1, sizeof(*b));
    b->id = ++s->batch_seq;
    b->widx = strmap_new();
    b->cidx = strmap_new();
    return b;
}

static void batch_free(struct ebatch *b)
{
    for (size_t i = 0; i < b->nw; i++) {
        free(b->w[i].key);
        free(b->w[i].value);
    }
    for (size_t i = 0; i < b->nc; i++)
        free(b->c[i].key);
    free(b->w);
    free(b->c);
    strmap_free(b->widx);
    strmap_free(b->cidx);
    free(b);
}

/* Compare key at mod, unless the batch already compares it (the older
 * view wins: see above). */
static void batch_cmp(struct ebatch *b, const char *key, int64_t mod)
{
    if (strmap_get(b->cidx, key, &(uint32_t){0}))
        return;
    if (b->nc == b->cc) {
        b->cc = b->cc ? b->cc * 2 : 16;
        b->c = xrealloc(b->c, b->cc * sizeof(*b->c));
    }
    b->c[b->nc] = (struct bcmp){xstrdup(key), mod};
    strmap_put(b->cidx, key, (uint32_t)b->nc);
    b->nc++;
}

/* Merge write w into the batch (the later value of a key wins, as within
 * one transaction); takes w's strings. */
static void batch_write(struct ebatch *b, struct wop *w)
{
    uint32_t i;
    if (strmap_get(b->widx, w->key, &i)) {
        free(b->w[i].value);
        b->w[i].value = w->value;
        b->w[i].lease = w->lease;
        b->w[i].guarded |= w->guarded;
        b->w[i].cache |= w->cache;
        free(w->key);
    } else {
        if (b->nw == b->cw) {
            b->cw = b->cw ? b->cw * 2 : 16;
            b->w = xrealloc(b->w, b->cw * sizeof(*b->w));
        }
        b->w[b->nw] = *w;
        strmap_put(b->widx, w->key, (uint32_t)b->nw);
        b->nw++;
    }
    w->key = w->value = NULL;
}

/* Can the current transaction join batch b within etcd's limits? */
static bool batch_fits(const struct estore *s, const struct ebatch *b)
{
    return b->commits < ESTORE_BATCH_MAX &&
           b->nw + s->nw <= ETCD_TXN_MAX_OPS &&
           b->nc + s->nw + s->ng <= ETCD_TXN_MAX_OPS;
}

/* Move the current transaction into the newest waiting batch (a new one
 * when it is full or none waits), its compares taken now. */
static struct ebatch *batch_enqueue(struct estore *s)
{
    struct ebatch *b = s->pending, **tail = &s->pending;
    while (b && b->next)
        b = b->next;
    if (b == NULL || !batch_fits(s, b)) {
        while (*tail)
            tail = &(*tail)->next;
        b = *tail = batch_new(s);
    }
    for (size_t i = 0; i < s->nw; i++)
        if (s->w[i].guarded)
            batch_cmp(b, s->w[i].key, kmod(s, s->w[i].key));
    for (size_t i = 0; i < s->ng; i++)
        if (!strmap_get(s->widx, s->g[i].key, &(uint32_t){0}))
            batch_cmp(b, s->g[i].key, kmod(s, s->g[i].key));
    for (size_t i = 0; i < s->nw; i++)
        batch_write(b, &s->w[i]);
    b->commits++;
    b->waiting++;
    s->unsettled++;
    tx_clear(s);
    return b;
}

/* A batch succeeded at rev: the batches still waiting decided with its
 * reservations, so they compare what it wrote with what it wrote. */
static void batch_rebase(struct estore *s, const struct ebatch *done,
                         int64_t rev)
{
    for (struct ebatch *b = s->pending; b; b = b->next)
        for (size_t i = 0; i < done->nw; i++) {
            uint32_t k;
            if (done->w[i].cache &&
                strmap_get(b->cidx, done->w[i].key, &k))
                b->c[k].mod = done->w[i].value ? rev : 0;
        }
}

/* Record batch b's answer (mu held) and wake every waiter. */
static void batch_done(struct estore *s, struct ebatch *b, enum accel_err err,
                       bool ok, int64_t rev, const char *cause)
{
    if (err == ACCEL_OK && !ok) {
        s->conflict_rev = rev;
        set_err(s, "another acceld changed what this decision read "
                   "(revision %" PRId64 ")", rev);
        err = ACCEL_ECONFLICT;
    } else if (err != ACCEL_OK) {
        set_err(s, "etcd transaction: %s", cause ? cause : accel_strerror(err));
    } else {
        record_commit(s, b->w, b->nw, rev);
        batch_rebase(s, b, rev);
    }
    b->err = err;
    b->rev = rev;
    b->done = true;
    if (s->flying == b)
        s->flying = NULL;
    pthread_cond_broadcast(&s->bcond);
}

/* Send the oldest waiting batch, with mu (held) released meanwhile, and
 * record its answer, unless the watch has already seen it applied
 * (watch_own_commit). */
static void batch_fly(struct estore *s, pthread_mutex_t *mu)
{
    struct ebatch *b = s->pending;
    struct etcd_cmp *cmps = xcalloc(b->nc + 1, sizeof(*cmps));
    struct etcd_op *ops = xcalloc(b->nw + 1, sizeof(*ops));
    bool ok = false;
    int64_t rev = 0;
    char *cause = NULL;
    enum accel_err err;

    s->pending = b->next;
    b->next = NULL;
    s->flying = b;
    b->waiting++; /* this sender's hold on it */
    for (size_t i = 0; i < b->nc; i++)
        cmps[i] = (struct etcd_cmp){b->c[i].key, ETCD_MOD, ETCD_EQUAL,
                                    b->c[i].mod, NULL, 0};
    for (size_t i = 0; i < b->nw; i++) {
        const struct wop *w = &b->w[i];
        ops[i] = w->value ? (struct etcd_op){ETCD_PUT, w->key, w->value,
                                             strlen(w->value), w->lease}
                          : (struct etcd_op){ETCD_DELETE, w->key, NULL, 0, 0};
    }
    pthread_mutex_unlock(mu);
    err = etcd_txn(s->e, cmps, b->nc, ops, b->nw, &ok, &rev, &cause);
    pthread_mutex_lock(mu);
    if (!b->done)
        batch_done(s, b, err, ok, rev, cause);
    if (--b->waiting == 0)
        batch_free(b);
    free(cause);
    free(cmps);
    free(ops);
}

static const char *table_of(const struct estore *s, const char *key,
                            char *table, size_t len);

/* Is revision rev (its events ev) the flying batch's own commit? It is
 * when it wrote one of the batch's event keys: this process alone writes
 * its events/<node>/<seq> keys, each once, and only a successful batch
 * writes them. */
static bool watch_own_commit(const struct estore *s,
                             const struct etcd_event *ev, size_t n)
{
    char table[32];
    if (s->flying == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        const char *rest = table_of(s, ev[i].kv.key, table, sizeof table);
        if (rest && strcmp(table, "events") == 0 &&
            ev[i].type != ETCD_EV_DELETE &&
            strmap_get(s->flying->widx, ev[i].kv.key, &(uint32_t){0}))
            return true;
    }
    return false;
}

/* Take the open transaction over into a batch (mu held); ticket NULL:
 * store.c refuses the caller, who settles all the same (store_int.h). */
static enum accel_err es_queue(struct store *base, void **ticket)
{
    struct estore *s = (struct estore *)base;
    enum accel_err err = ticket ? need_tx(s) : ACCEL_EINVAL;

    if (err != ACCEL_OK) {
        s->unsettled++; /* the caller settles whatever the answer */
        return err;
    }
    index_tx(s);
    *ticket = batch_enqueue(s);
    return ACCEL_OK;
}

static enum accel_err es_await(struct store *base, void *ticket,
                               pthread_mutex_t *mu, int64_t *conflict_rev)
{
    struct estore *s = (struct estore *)base;
    struct ebatch *b = ticket;
    enum accel_err err;

    /* whoever finds no batch on its way sends the oldest waiting one,
     * its own or not */
    while (!b->done) {
        if (s->flying == NULL && s->pending != NULL)
            batch_fly(s, mu);
        else
            pthread_cond_wait(&s->bcond, mu);
    }
    err = b->err;
    if (err == ACCEL_ECONFLICT && conflict_rev)
        *conflict_rev = b->rev;
    if (--b->waiting == 0)
        batch_free(b);
    return unanswered(err);
}

static void es_queued_settled(struct store *base)
{
    struct estore *s = (struct estore *)base;
    if (s->unsettled > 0)
        s->unsettled--;
    pthread_cond_broadcast(&s->bcond);
}

static void es_queue_gate(struct store *base, pthread_mutex_t *mu)
{
    struct estore *s = (struct estore *)base;
    while (s->drain)
        pthread_cond_wait(&s->bcond, mu);
}

/* Does batch b (or NULL) write or compare key? */
static bool batch_has(const struct ebatch *b, const char *key)
{
    return b && (strmap_get(b->widx, key, &(uint32_t){0}) ||
                 strmap_get(b->cidx, key, &(uint32_t){0}));
}

/* Does a queued batch write or compare key? */
static bool batch_touches(const struct estore *s, const char *key)
{
    if (batch_has(s->flying, key))
        return true;
    for (const struct ebatch *b = s->pending; b; b = b->next)
        if (batch_has(b, key))
            return true;
    return false;
}

/* The watch, about to apply the events of revision rev (mu held): when
 * one touches a queued batch, wait until every queued commit is answered
 * and settled. A change this process's own answered commit wrote is
 * skipped by follow_one (seen): it needs no wait, though the next batch
 * writes the same devalloc/ownalloc keys. */
static void watch_drain(struct estore *s, const struct etcd_event *ev,
                        size_t n, int64_t rev, pthread_mutex_t *mu)
{
    bool touched = false;
    if (mu == NULL || (s->unsettled == 0 && s->flying == NULL &&
                       s->pending == NULL))
        return;
    /* the batch on its way, seen applied before its answer came: what
     * the answer would have recorded, recorded now (memory already shows
     * it: the reservations), so that nothing below waits for it */
    if (watch_own_commit(s, ev, n))
        batch_done(s, s->flying, ACCEL_OK, true, rev, NULL);
    for (size_t i = 0; i < n && !touched; i++) {
        const struct kinfo *k = kinfo_get(s, ev[i].kv.key, false);
        if (k == NULL || k->seen < rev)
            touched = batch_touches(s, ev[i].kv.key);
    }
    if (!touched)
        return;
    s->drain = true;
    while (s->unsettled > 0 || s->flying != NULL || s->pending != NULL)
        pthread_cond_wait(&s->bcond, mu);
    s->drain = false;
    pthread_cond_broadcast(&s->bcond);
}

#define ESTORE_PROBE_FIRST_MS 5 /* a view this far behind asks etcd */
#define ESTORE_PROBE_EVERY_MS 100

/* Whether nothing under the prefix changed from revision from to to:
 * no key there at to was written after from (so none was created), and
 * as many keys were there at both (so none was deleted). Three counts,
 * no keys sent. A key both created and deleted in between is not seen:
 * the state at to is the same as at from all the same. */
static bool range_still(struct estore *s, const char *prefix, int64_t from,
                        int64_t to)
{
    int64_t mod = 1, at_from = -1, at_to = -2;
    return from > 0 &&
           etcd_count(s->e, prefix, to, from + 1, 0, &mod) == ACCEL_OK &&
           mod == 0 &&
           etcd_count(s->e, prefix, from, 0, 0, &at_from) == ACCEL_OK &&
           etcd_count(s->e, prefix, to, 0, 0, &at_to) == ACCEL_OK &&
           at_from == at_to;
}

static void agent_reached(struct estore *s, size_t range, int64_t rev);

/* Whether the view is at to: for a whole view, nothing under the prefix
 * changed after from; for an agent's, each of its ranges is at to by its
 * watch or unchanged since the revision it reached (vlock not held). */
static bool prefix_still(struct estore *s, int64_t from, int64_t to)
{
    bool all = true;
    if (!s->agent)
        return range_still(s, s->prefix, from, to);
    for (size_t i = 0; i < AGENT_RANGES; i++) {
        int64_t at;
        pthread_mutex_lock(&s->vlock);
        at = s->reached[i];
        pthread_mutex_unlock(&s->vlock);
        if (at >= to)
            continue;
        if (range_still(s, s->ranges[i], at, to))
            agent_reached(s, i, to);
        else
            all = false;
    }
    return all;
}

/*
 * Wait until the view has applied rev. etcd's revisions count every write,
 * those outside the prefix too (the beats and monitor slots of
 * node/monitor.c), and this watch never sees those: a rev that is one of
 * them comes only with a progress notification (10 minutes apart by
 * etcd's default). So a view still behind after ESTORE_PROBE_FIRST_MS asks
 * etcd whether anything under the prefix changed since the revision it
 * has; if nothing did, it is at rev already.
 */
static enum accel_err es_wait_rev(struct store *base, int64_t rev, int ms)
{
    struct estore *s = (struct estore *)base;
    uint64_t start = util_now_ns(), end = start + (uint64_t)ms * 1000000;
    uint64_t probe = start + ESTORE_PROBE_FIRST_MS * 1000000ULL;
    int64_t probed = -1; /* the view's revision when etcd last said that
                          * the prefix changed after it */
    enum accel_err err = ACCEL_OK;
    pthread_mutex_lock(&s->vlock);
    while (s->applied_rev < rev && err == ACCEL_OK) {
        uint64_t now = util_now_ns(), next;
        struct timespec until;
        /* the watch brought what etcd said had changed: what is left up
         * to rev may be writes outside the prefix only, ask again now */
        if (probed >= 0 && s->applied_rev > probed)
            probe = now;
        next = probe < end ? probe : end;
        if (now < next) {
            until = util_deadline(CLOCK_REALTIME,
                                  (unsigned)((next - now + 999999) / 1000000));
            pthread_cond_timedwait(&s->vcond, &s->vlock, &until);
            continue;
        }
        if (now >= end) {
            err = ACCEL_EBUSY;
        } else {
            int64_t from = s->applied_rev;
            bool still;
            pthread_mutex_unlock(&s->vlock);
            still = prefix_still(s, from, rev);
            pthread_mutex_lock(&s->vlock);
            if (still && s->applied_rev < rev) {
                s->applied_rev = rev;
                pthread_cond_broadcast(&s->vcond);
            }
            probed = from;
            probe = util_now_ns() + ESTORE_PROBE_EVERY_MS * 1000000ULL;
        }
    }
    pthread_mutex_unlock(&s->vlock);
    return err;
}

static int64_t es_view_rev(struct store *base)
{
    struct estore *s = (struct estore *)base;
    int64_t rev;
    pthread_mutex_lock(&s->vlock);
    rev = s->applied_rev;
    pthread_mutex_unlock(&s->vlock);
    return rev;
}

static enum accel_err es_view_sync(struct store *base, int64_t since, int ms,
                                   bool *moved)
{
    struct estore *s = (struct estore *)base;
    char *k = key2(s, "meta", "schema");
    struct etcd_kv *kv = NULL;
    size_t n = 0;
    int64_t rev = 0;
    enum accel_err err = etcd_get(s->e, k, false, 0, &kv, &n, &rev);
    etcd_kvs_free(kv, n);
    free(k);
    if (err != ACCEL_OK)
        return err;
    *moved = rev > since;
    return *moved ? es_wait_rev(&s->base, rev, ms) : ACCEL_OK;
}

static enum accel_err es_sync(struct store *base)
{
    struct estore *s = (struct estore *)base;
    int64_t want;
    pthread_mutex_lock(&s->vlock);
    want = s->commit_rev;
    pthread_mutex_unlock(&s->vlock);
    /* the change is in etcd (durable on a quorum); the answer waits until
     * this node's view shows it too, so a read after it sees it */
    return es_wait_rev(&s->base, want, ESTORE_SYNC_WAIT_MS) == ACCEL_OK
               ? ACCEL_OK
               : ACCEL_EIO;
}

/* ------------------------------------------------------------ row writes */

static enum accel_err put_row(struct estore *s, char *key, char *json)
{
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK) {
        free(key);
        free(json);
        return err;
    }
    tx_write(s, key, json, 0, true, true);
    return ACCEL_OK;
}

static enum accel_err del_row(struct estore *s, char *key)
{
    return put_row(s, key, NULL);
}

/* Delete the row <prefix><table>/<name>: the one-name tables' deletes. */
static enum accel_err del_named(struct store *base, const char *table,
                                const char *name)
{
    struct estore *s = (struct estore *)base;
    return del_row(s, key2(s, table, name));
}

static enum accel_err es_app_put(struct store *base, const struct store_app *a)
{
    struct estore *s = (struct estore *)base;
    return put_row(s, key2(s, "apps", a->name), app_json(a));
}

static enum accel_err es_app_delete(struct store *base, const char *name)
{
    return del_named(base, "apps", name);
}

static enum accel_err es_alloc_put(struct store *base,
                                   const struct store_alloc *a)
{
    struct estore *s = (struct estore *)base;
    devnode_set(s, a->device, a->node);
    tx_alloc_guards(s, a->device, a->node, a->owner);
    return put_row(s, key3(s, "allocs", a->app, a->device), alloc_json(a));
}

static enum accel_err es_alloc_delete(struct store *base, const char *app,
                                      const char *device)
{
    struct estore *s = (struct estore *)base;
    tx_alloc_guards(s, device, NULL, NULL);
    return del_row(s, key3(s, "allocs", app, device));
}

static enum accel_err es_alloc_delete_app(struct store *base, const char *app)
{
    struct estore *s = (struct estore *)base;
    const struct applist *l;
    enum accel_err err = ACCEL_OK;
    l = applist_get(s, app, false);
    for (size_t i = 0; l && err == ACCEL_OK && i < l->n; i++) {
        /* a put of the same key later in this transaction replaces it */
        uint32_t w;
        char *k = key3(s, "allocs", app, l->dev[i]);
        bool written = strmap_get(s->widx, k, &w);
        free(k);
        if (!written)
            err = es_alloc_delete(&s->base, app, l->dev[i]);
    }
    return err;
}

static enum accel_err es_device_put(struct store *base,
                                    const struct store_device *d)
{
    struct estore *s = (struct estore *)base;
    /* a mode switch decides on the device's allocations */
    tx_guard(s, key2(s, "devalloc", d->id));
    return put_row(s, key2(s, "devices", d->id), device_json(d));
}

static enum accel_err es_node_put(struct store *base,
                                  const struct store_node *n)
{
    struct estore *s = (struct estore *)base;
    return put_row(
        s, key2(s, "nodes", n->name),
        dump(json_pack("{s:s, s:b}", "name", n->name, "enabled", n->enabled)));
}

static enum accel_err es_node_delete(struct store *base, const char *name)
{
    return del_named(base, "nodes", name);
}

static enum accel_err es_user_put(struct store *base,
                                  const struct store_user *u)
{
    struct estore *s = (struct estore *)base;
    return put_row(s, key2(s, "users", u->name),
                   dump(json_pack("{s:s, s:s, s:s, s:I}", "name", u->name,
                                  "role", u->role, "tokenHash", u->token_hash,
                                  "createdMs", (json_int_t)u->created_ms)));
}

static enum accel_err es_user_delete(struct store *base, const char *name)
{
    return del_named(base, "users", name);
}

/* Write v at k, a key that must be new: neither known to memory (a mod
 * revision: the guard would be 0) nor written earlier in this
 * transaction; else the transaction fails with taken. Takes k and v. */
static enum accel_err tx_create(struct estore *s, char *k, char *v,
                                const char *taken)
{
    uint32_t w;
    if (kmod(s, k) != 0 || strmap_get(s->widx, k, &w)) {
        free(k);
        free(v);
        return tx_fail(s, ACCEL_ECONFLICT, taken);
    }
    tx_write(s, k, v, 0, true, true);
    return ACCEL_OK;
}

static char *identity_json(const char *name, int64_t uid)
{
    return dump(
        json_pack("{s:s, s:I}", "name", name, "uid", (json_int_t)uid));
}

static char *uid_key(const struct estore *s, int64_t uid)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, uid);
    return key2(s, "uids", buf);
}

static enum accel_err es_identity_put(struct store *base,
                                      const struct store_identity *id)
{
    struct estore *s = (struct estore *)base;
    /* never replaced: both keys must be new (mod 0 guards, unless memory
     * already knows them, which is a conflict here as in SQLite) */
    enum accel_err err = tx_create(s, key2(s, "identities", id->name),
                                   identity_json(id->name, id->uid),
                                   "the name already has a uid");
    if (err != ACCEL_OK)
        return err;
    return tx_create(s, uid_key(s, id->uid), xstrdup(id->name),
                     "the uid is taken");
}

static enum accel_err es_identity_retire(struct store *base, const char *name,
                                         const struct store_identity *retired)
{
    struct estore *s = (struct estore *)base;
    enum accel_err err =
        tx_create(s, key2(s, "identities", retired->name),
                  identity_json(retired->name, retired->uid),
                  "the retired name is taken");
    if (err != ACCEL_OK)
        return err;
    /* the name's row goes and the uid's holder changes, each guarded by
     * the revision memory reflects: a concurrent change refuses all */
    del_row(s, key2(s, "identities", name));
    return put_row(s, uid_key(s, retired->uid), xstrdup(retired->name));
}

static enum accel_err es_limits_put(struct store *base,
                                    const struct store_limits *l)
{
    struct estore *s = (struct estore *)base;
    return put_row(s, key2(s, "limits", l->name),
                   dump(json_pack("{s:s, s:I, s:I}", "name", l->name,
                                  "maxApps", (json_int_t)l->max_apps,
                                  "maxGpuMemory",
                                  (json_int_t)l->max_gpu_memory)));
}

static enum accel_err es_limits_delete(struct store *base, const char *name)
{
    return del_named(base, "limits", name);
}

static enum accel_err es_part_put(struct store *base, const char *app,
                                  const char *node, int64_t pid,
                                  uint64_t pid_start)
{
    struct estore *s = (struct estore *)base;
    if (need_tx(s) != ACCEL_OK)
        return ACCEL_EINVAL;
    if (app == NULL || node == NULL)
        return tx_fail(s, ACCEL_EINVAL, "part row without a key");
    return put_row(s, key3(s, "parts", app, node),
                   dump(json_pack("{s:s, s:s, s:I, s:I}", "app", app, "node",
                                  node, "pid", (json_int_t)pid, "pidStart",
                                  (json_int_t)pid_start)));
}

static enum accel_err es_part_delete(struct store *base, const char *app,
                                     const char *node)
{
    struct estore *s = (struct estore *)base;
    if (need_tx(s) != ACCEL_OK)
        return ACCEL_EINVAL;
    if (app == NULL || node == NULL)
        return tx_fail(s, ACCEL_EINVAL, "part delete without a key");
    return del_row(s, key3(s, "parts", app, node));
}

/* A part row: app, node, pid, pidStart. NULL or why not. */
static const char *part_decode(const json_t *o, const char **app,
                               const char **node, int64_t *pid,
                               int64_t *start)
{
    *app = jstr(o, "app");
    *node = jstr(o, "node");
    if (!*app || !*node || !jint(o, "pid", 0, pid) ||
        !jint(o, "pidStart", 0, start))
        return "app, node, pid or pidStart is missing";
    return NULL;
}

static bool member_kind(const char *kind)
{
    return kind && (strcmp(kind, "nodeinfo") == 0 ||
                    strcmp(kind, "agents") == 0);
}

/* Outside a transaction: one of its own, unguarded. A commit like the
 * others for store_sync, which waits until the view has it (an event
 * appended alone is shown once the answer goes out). */
static enum accel_err write_now(struct estore *s, const char *key,
                                const char *value, int64_t lease)
{
    struct etcd_op op = {value ? ETCD_PUT : ETCD_DELETE, key, value,
                         value ? strlen(value) : 0, lease};
    bool ok;
    int64_t rev = 0;
    char *cause = NULL;
    enum accel_err err = etcd_txn(s->e, NULL, 0, &op, 1, &ok, &rev, &cause);
    if (err != ACCEL_OK) {
        set_err(s, "etcd: %s", cause ? cause : accel_strerror(err));
    } else {
        pthread_mutex_lock(&s->vlock);
        if (rev > s->commit_rev)
            s->commit_rev = rev;
        pthread_mutex_unlock(&s->vlock);
    }
    free(cause);
    return err;
}

/* A member key (nodeinfo, agents) written or (json NULL) deleted: in the
 * caller's open transaction, or (own) at once in one of its own, which
 * touches nothing of the transaction (store.c decided which). */
static enum accel_err es_member_write(struct store *base, const char *kind,
                                      const char *node, const char *json,
                                      int64_t lease, bool own)
{
    struct estore *s = (struct estore *)base;
    char *k;
    enum accel_err err;
    if (!member_kind(kind) || node == NULL)
        return ACCEL_EINVAL;
    if (!own && need_tx(s) != ACCEL_OK)
        return ACCEL_EINVAL;
    k = key2(s, kind, node);
    if (!own) {
        tx_write(s, k, json ? xstrdup(json) : NULL, lease, false, false);
        return ACCEL_OK;
    }
    err = write_now(s, k, json, lease);
    free(k);
    return err;
}

static enum accel_err es_event_append(struct store *base,
                                      const struct store_event *e,
                                      int64_t keep_max, bool own,
                                      int64_t *out_id)
{
    struct estore *s = (struct estore *)base;
    json_t *o;
    char seq[24], *k, *v;
    enum accel_err err = ACCEL_OK;

    if (out_id)
        *out_id = 0; /* known once the watch delivers it */
    __atomic_store_n(&s->keep_max, keep_max, __ATOMIC_RELAXED);
    o = json_pack("{s:I, s:s, s:s}", "ts", (json_int_t)e->ts_ms, "kind",
                  e->kind, "message", e->message);
    set_opt(o, "app", e->app);
    set_opt(o, "node", e->node);
    set_opt(o, "device", e->device);
    set_opt(o, "data", e->data);
    v = dump(o);
    snprintf(seq, sizeof seq, "%016" PRIx64,
             __atomic_fetch_add(&s->ev_seq, 1, __ATOMIC_RELAXED));
    k = key3(s, "events", s->node, seq);
    if (!own) {
        tx_write(s, k, v, 0, false, false);
    } else {
        err = write_now(s, k, v, 0);
        free(k);
        free(v);
    }
    return err;
}

static enum accel_err
es_events_query(struct store *base, const struct store_event_filter *f,
                enum accel_err (*cb)(void *ctx, const struct store_event *e),
                void *ctx)
{
    struct estore *s = (struct estore *)base;
    int64_t sent = 0;
    size_t lo = 0, hi = s->nev;
    /* the first event after since_id */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ev[mid].id <= f->since_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < s->nev; i++) {
        const struct eev *x = &s->ev[i];
        struct store_event e;
        enum accel_err err;
        if (f->limit > 0 && sent >= f->limit)
            break;
        if (x->ts_ms < f->since_ms ||
            (f->app && (!x->app || strcmp(f->app, x->app) != 0)) ||
            (f->device && (!x->device || strcmp(f->device, x->device) != 0)) ||
            (f->kind && strcmp(f->kind, x->kind) != 0))
            continue;
        e = (struct store_event){x->id,     x->ts_ms,  x->kind,    x->app,
                                 x->node,   x->device, x->message, x->data};
        err = cb(ctx, &e);
        sent++;
        if (err != ACCEL_OK)
            return err;
    }
    return ACCEL_OK;
}

/* ------------------------------------------------------------ load */

struct lrun {
    struct estore *s;
    const struct store_loader *l;
    struct store_bads bad;   /* keys (store_int.h) */
    struct strmap *dropped_apps;
    struct strmap *apps;     /* the apps passed on */
    struct strmap *own;      /* an agent's: the apps of its node (others
                                are neither loaded nor known) */
};

/* The app a key of apps/, allocs/ or parts/ is about (in buf), or NULL
 * for a key of another table. */
static const char *row_app(const struct estore *s, const char *key,
                           char *buf, size_t len)
{
    char table[32];
    const char *rest = table_of(s, key, table, sizeof table);
    size_t n;
    if (rest == NULL || !is_row_table(table))
        return NULL;
    n = strcspn(rest, "/");
    if (n == 0 || n >= len)
        return NULL;
    memcpy(buf, rest, n);
    buf[n] = '\0';
    return buf;
}

/* An agent's apps at load: those its node's index names, and those with
 * an allocation row on its node (an index an API server of this version
 * has not filled yet). */
static struct strmap *own_apps(struct estore *s, const struct etcd_kv *kvs,
                               size_t n)
{
    struct strmap *own = strmap_new();
    char *pfx = key3(s, "bynode", s->node, "");
    size_t plen = strlen(pfx);
    char table[32];
    for (size_t i = 0; i < n; i++) {
        const char *rest = table_of(s, kvs[i].key, table, sizeof table);
        if (strncmp(kvs[i].key, pfx, plen) == 0 && kvs[i].key[plen]) {
            strmap_put(own, kvs[i].key + plen, 1);
        } else if (rest && strcmp(table, "allocs") == 0) {
            json_t *o = json_loads(kvs[i].value, JSON_REJECT_DUPLICATES,
                                   NULL);
            struct store_alloc a;
            if (json_is_object(o) && !alloc_decode(o, &a) &&
                strcmp(a.node, s->node) == 0)
                strmap_put(own, a.app, 1);
            json_decref(o);
        }
    }
    free(pfx);
    return own;
}

/* Whether an agent's load leaves key out: a row of another node's app. */
static bool not_own(const struct lrun *r, const char *key)
{
    char buf[512];
    const char *app;
    if (r->own == NULL)
        return false;
    app = row_app(r->s, key, buf, sizeof buf);
    return app && !strmap_get(r->own, app, &(uint32_t){0});
}

static void bad_add(struct lrun *r, const char *key, char *why)
{
    store_bads_add(&r->bad, NULL, xstrdup(key), why);
}

/* The table of a key ("apps", ...) and what follows it, or NULL. */
static const char *table_of(const struct estore *s, const char *key,
                            char *table, size_t len)
{
    const char *rest = key + s->plen, *slash;
    if (strncmp(key, s->prefix, s->plen) != 0)
        return NULL;
    slash = strchr(rest, '/');
    if (slash == NULL || (size_t)(slash - rest) >= len)
        return NULL;
    memcpy(table, rest, (size_t)(slash - rest));
    table[slash - rest] = '\0';
    return slash + 1;
}

/* Hand one row of table to the loader; returns what the callback says. */
static enum accel_err load_row(struct lrun *r, const char *table,
                               const char *name, const json_t *o,
                               const char *raw, char **why)
{
    const struct store_loader *l = r->l;
    const struct erow_table *t = erow_table_of(table);
    const char *bad = NULL;
    union erow u;

    if (strcmp(table, "nodeinfo") == 0)
        return l->nodeinfo ? l->nodeinfo(l->ctx, name, raw, why) : ACCEL_OK;
    if (strcmp(table, "agents") == 0)
        return l->agent ? l->agent(l->ctx, name, raw, why) : ACCEL_OK;
    if (o == NULL) {
        *why = xstrdup("the value is not a JSON object");
        return ACCEL_ESTORE_CORRUPT;
    }
    if (t) {
        if (!(bad = t->decode(o, &u)))
            return store_loader_give(l, t->kind, &u, why);
    } else if (strcmp(table, "parts") == 0) {
        const char *app, *node;
        int64_t pid, start;
        if (!(bad = part_decode(o, &app, &node, &pid, &start)))
            return l->part ? l->part(l->ctx, app, node, pid,
                                     (uint64_t)start, why)
                           : ACCEL_OK;
    } else if (strcmp(table, "allocs") == 0) {
        if (!(bad = alloc_decode(o, &u.alloc))) {
            if (strmap_get(r->dropped_apps, u.alloc.app, &(uint32_t){0})) {
                *why = xasprintf("its app \"%s\" was dropped", u.alloc.app);
                return ACCEL_ESTORE_CORRUPT;
            }
            if (!strmap_get(r->apps, u.alloc.app, &(uint32_t){0})) {
                *why = xasprintf("its app \"%s\" has no key %sapps/%s",
                                 u.alloc.app, r->s->prefix, u.alloc.app);
                return ACCEL_ESTORE_CORRUPT;
            }
            devnode_set(r->s, u.alloc.device, u.alloc.node);
            return store_loader_give(l, STORE_ROW_ALLOC, &u.alloc, why);
        }
    } else {
        return ACCEL_OK;
    }
    *why = xstrdup(bad);
    return ACCEL_ESTORE_CORRUPT;
}

/* The order of store_load: what later rows refer to comes first. */
static const char *const load_order[] = {
    "nodeinfo", "agents", "nodes",  "devices", "users",
    "identities", "limits", "apps", "allocs", "parts",
};

static enum accel_err load_event(struct estore *s, const struct etcd_kv *kv,
                                 int64_t id)
{
    json_t *o = json_loads(kv->value, JSON_REJECT_DUPLICATES, NULL);
    struct store_event e;
    if (o && !event_check(kv->value) && !event_decode(o, &e)) {
        e.id = id;
        events_keep(s, kv->key, &e);
    }
    json_decref(o);
    return ACCEL_OK;
}

static int cmp_evkv(const void *a, const void *b)
{
    const struct etcd_kv *x = *(const struct etcd_kv *const *)a;
    const struct etcd_kv *y = *(const struct etcd_kv *const *)b;
    if (x->mod_rev != y->mod_rev)
        return x->mod_rev < y->mod_rev ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Events by (revision, key): ids revision * 1024 + rank. */
static void load_events(struct estore *s, struct etcd_kv *kvs, size_t n)
{
    const struct etcd_kv **ev = xmalloc((n + 1) * sizeof(*ev));
    size_t ne = 0;
    char table[32];
    int64_t rank = 0, last = -1;
    for (size_t i = 0; i < n; i++) {
        const char *rest = table_of(s, kvs[i].key, table, sizeof table);
        if (rest && strcmp(table, "events") == 0)
            ev[ne++] = &kvs[i];
    }
    qsort(ev, ne, sizeof(*ev), cmp_evkv);
    for (size_t i = 0; i < ne; i++) {
        rank = ev[i]->mod_rev == last ? rank + 1 : 0;
        last = ev[i]->mod_rev;
        load_event(s, ev[i], ev[i]->mod_rev * ESTORE_EVENT_RANK + rank);
    }
    free(ev);
}

static enum accel_err repair(struct lrun *r)
{
    struct estore *s = r->s;
    enum accel_err err = ACCEL_OK;
    char *data, *msg;
    struct store_event e;
    for (size_t i = 0; i < r->bad.n && err == ACCEL_OK; i += 100) {
        struct etcd_op ops[100];
        size_t n = 0;
        bool ok;
        for (size_t j = i; j < r->bad.n && n < 100; j++)
            ops[n++] = (struct etcd_op){.kind = ETCD_DELETE,
                                        .key = r->bad.v[j].key};
        err = etcd_txn(s->e, NULL, 0, ops, n, &ok, NULL, NULL);
    }
    data = store_bads_json(&r->bad);
    msg = xasprintf("acceld --repair dropped %zu undecodable key%s of etcd "
                    "prefix %s",
                    r->bad.n, r->bad.n == 1 ? "" : "s", s->prefix);
    e = (struct store_event){0,    util_wall_ms(), "store.repair", NULL,
                             NULL, NULL,           msg,            data};
    if (err == ACCEL_OK)
        err = es_event_append(&s->base, &e, 0, true, NULL);
    free(data);
    free(msg);
    return err;
}

static enum accel_err es_load(struct store *base, const struct store_loader *l,
                              char **cause)
{
    struct estore *s = (struct estore *)base;
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int64_t rev = 0;
    struct lrun r = {s, l, {NULL, 0}, strmap_new(), strmap_new(), NULL};
    enum accel_err err;
    char table[32];

    *cause = NULL;
    err = etcd_get(s->e, s->prefix, true, 0, &kvs, &n, &rev);
    if (err != ACCEL_OK) {
        *cause = xasprintf("cannot read etcd prefix %s: %s", s->prefix,
                           accel_strerror(err));
        goto out;
    }
    if (s->agent)
        r.own = own_apps(s, kvs, n);
    for (size_t t = 0; t < sizeof load_order / sizeof load_order[0]; t++) {
        for (size_t i = 0; i < n && err == ACCEL_OK; i++) {
            const char *name = table_of(s, kvs[i].key, table, sizeof table);
            json_t *o;
            char *why = NULL;
            if (name == NULL || strcmp(table, load_order[t]) != 0 ||
                not_own(&r, kvs[i].key))
                continue;
            o = json_loads(kvs[i].value, JSON_REJECT_DUPLICATES, NULL);
            if (o && !json_is_object(o)) {
                json_decref(o);
                o = NULL;
            }
            err = load_row(&r, table, name, o, kvs[i].value, &why);
            json_decref(o);
            if (err == ACCEL_ESTORE_CORRUPT) {
                if (strcmp(table, "apps") == 0)
                    strmap_put(r.dropped_apps, name, 1);
                bad_add(&r, kvs[i].key, why ? why : xstrdup("undecodable"));
                err = ACCEL_OK;
            } else {
                if (err == ACCEL_OK && strcmp(table, "apps") == 0)
                    strmap_put(r.apps, name, 1);
                free(why);
            }
        }
    }
    if (err != ACCEL_OK)
        goto out;
    /* the events are checked like the rows (and loaded below) */
    for (size_t i = 0; i < n; i++) {
        const char *name = table_of(s, kvs[i].key, table, sizeof table);
        const char *bad;
        if (name == NULL || strcmp(table, "events") != 0)
            continue;
        if ((bad = event_check(kvs[i].value)) != NULL)
            bad_add(&r, kvs[i].key, xstrdup(bad));
    }
    if (r.bad.n > 0) {
        char *list = store_bads_list(&r.bad);
        if (!l->repair) {
            *cause = xasprintf("etcd prefix %s: %zu key%s do%s not decode: "
                               "%s; refusing to start, nothing was loaded or "
                               "changed. `acceld --repair` drops these keys "
                               "and says what it dropped",
                               s->prefix, r.bad.n, r.bad.n == 1 ? "" : "s",
                               r.bad.n == 1 ? "es" : "", list);
            free(list);
            err = ACCEL_ESTORE_CORRUPT;
            goto out;
        }
        err = repair(&r);
        *cause = xasprintf("dropped %zu undecodable key%s of etcd prefix "
                           "%s: %s",
                           r.bad.n, r.bad.n == 1 ? "" : "s", s->prefix, list);
        free(list);
        if (err != ACCEL_OK)
            goto out;
    }
    /* what memory now reflects: every key at its mod revision */
    for (size_t i = 0; i < n; i++) {
        struct kinfo *k;
        const char *rest = table_of(s, kvs[i].key, table, sizeof table);
        if ((rest && strcmp(table, "events") == 0) || not_own(&r, kvs[i].key))
            continue;
        k = kinfo_get(s, kvs[i].key, true);
        k->mod = kvs[i].mod_rev;
        k->seen = kvs[i].mod_rev;
        if (rest && strcmp(table, "allocs") == 0) {
            char buf[512];
            const char *app, *dev;
            if (split_alloc(rest, buf, sizeof buf, &app, &dev))
                applist_set(s, app, dev, true);
        }
    }
    if (!s->agent) /* an agent watches no events: it would show old ones */
        load_events(s, kvs, n);
    s->load_rev = rev;
    pthread_mutex_lock(&s->vlock);
    s->applied_rev = rev;
    for (size_t i = 0; i < AGENT_RANGES; i++)
        s->reached[i] = rev;
    pthread_mutex_unlock(&s->vlock);
out:
    store_bads_free(&r.bad);
    strmap_free(r.dropped_apps);
    strmap_free(r.apps);
    strmap_free(r.own);
    etcd_kvs_free(kvs, n);
    return err;
}

/* ----------------------------------------------------------- the watch */

struct frun {
    struct estore *s;
    const struct store_follower *f;
    int64_t next;   /* the revision to watch from after a break */
};

/* Hand row (NULL: its key was deleted) of an erow_tables kind to f's
 * callback for it, if f has one. The callbacks take different structs, so
 * each kind is named once here. */
#define FOLLOW(cb) (f->cb ? f->cb(f->ctx, name, row) : (void)0)

static void follower_give(const struct store_follower *f, enum store_row kind,
                          const char *name, const void *row)
{
    switch (kind) {
    case STORE_ROW_APP: FOLLOW(app); break;
    case STORE_ROW_DEVICE: FOLLOW(device); break;
    case STORE_ROW_NODE: FOLLOW(node); break;
    case STORE_ROW_USER: FOLLOW(user); break;
    case STORE_ROW_IDENTITY: FOLLOW(identity); break;
    case STORE_ROW_LIMITS: FOLLOW(limits); break;
    case STORE_ROW_ALLOC: break; /* its key has two names: follow_one */
    }
}

#undef FOLLOW

/* One change, decoded before the follower's lock is taken (issue 51: the
 * lock is held to apply a change, not to parse it). */
struct fpre {
    bool decoded;          /* follow_decode has run */
    json_t *o;             /* the value parsed (NULL: deleted, not JSON) */
    const char *bad;       /* why its row does not decode, or NULL */
    union erow u;          /* an erow_tables or allocs row, from o */
    struct store_event e;  /* an event, from o */
};

/* Parse a change's value and decode its row: nothing but the change is
 * read, so it needs no lock. early: the follower's own decoding of an app
 * row (app_early) is done here too. */
static void follow_decode(struct frun *fr, const struct etcd_event *ev,
                          struct fpre *p, bool early)
{
    const struct store_follower *f = fr->f;
    char table[32];
    const char *name = table_of(fr->s, ev->kv.key, table, sizeof table);
    const struct erow_table *t;

    p->decoded = true;
    if (name == NULL || ev->type == ETCD_EV_DELETE ||
        strcmp(table, "agents") == 0) /* handed over as text, parsed there */
        return;
    p->o = json_loads(ev->kv.value, JSON_REJECT_DUPLICATES, NULL);
    if (strcmp(table, "events") == 0) {
        p->bad = p->o ? event_decode(p->o, &p->e) : "not JSON";
        return;
    }
    if (strcmp(table, "nodeinfo") == 0)
        return; /* handed over parsed */
    if (!json_is_object(p->o)) {
        p->bad = "not a JSON object";
        return;
    }
    t = erow_table_of(table);
    if (t) {
        p->bad = t->decode(p->o, &p->u);
        if (p->bad == NULL && t->named && strcmp(p->u.app.name, name) != 0)
            p->bad = "its name is not its key's";
        if (p->bad == NULL && early && t->kind == STORE_ROW_APP &&
            f->app_early)
            f->app_early(f->ctx, name, &p->u.app);
    } else if (strcmp(table, "allocs") == 0) {
        p->bad = alloc_decode(p->o, &p->u.alloc);
    }
}

static void fpre_free(struct fpre *p, size_t n)
{
    for (size_t i = 0; p && i < n; i++)
        json_decref(p[i].o);
    free(p);
}

/* One changed key, handed to the follower when it is news (the caller's
 * lock held). p: the change decoded before; one that was not (a revision
 * of this process's own, or a key it wrote outside its transactions) is
 * decoded here when it is news after all. */
static void follow_one(struct frun *fr, const struct etcd_event *ev,
                       struct fpre *p, int64_t rev, int64_t rank)
{
    struct estore *s = fr->s;
    const struct store_follower *f = fr->f;
    const struct etcd_kv *kv = &ev->kv;
    bool del = ev->type == ETCD_EV_DELETE;
    char table[32];
    const char *name = table_of(s, kv->key, table, sizeof table);
    const struct erow_table *t;
    struct kinfo *k;

    if (name == NULL)
        return;
    t = erow_table_of(table);
    if (strcmp(table, "events") == 0) {
        struct store_event e;
        if (del)
            return;
        if (!p->decoded)
            follow_decode(fr, ev, p, false);
        if (p->o && p->bad == NULL) {
            e = p->e;
            e.id = rev * ESTORE_EVENT_RANK + rank;
            events_keep(s, kv->key, &e);
            if (f->event)
                f->event(f->ctx, &e);
        }
        return;
    }
    k = kinfo_get(s, kv->key, true);
    if (rev <= k->seen)
        return; /* this process wrote it: memory has it already */
    k->seen = rev;
    k->mod = del ? 0 : kv->mod_rev;
    if (strcmp(table, "allocs") == 0) {
        char buf[512];
        const char *app, *dev;
        if (split_alloc(name, buf, sizeof buf, &app, &dev))
            applist_set(s, app, dev, !del);
    }
    if (!del && !p->decoded)
        follow_decode(fr, ev, p, false);
    if (!del && !json_is_object(p->o) && strcmp(table, "nodeinfo") != 0 &&
        strcmp(table, "agents") != 0)
        return;
    if (t) {
        if (del)
            follower_give(f, t->kind, name, NULL);
        else if (p->bad == NULL)
            follower_give(f, t->kind, name, &p->u);
    } else if (strcmp(table, "allocs") == 0 && f->alloc) {
        char buf[512];
        const char *app, *dev;
        if (!split_alloc(name, buf, sizeof buf, &app, &dev))
            return;
        if (del) {
            f->alloc(f->ctx, app, dev, NULL);
        } else if (p->bad == NULL) {
            devnode_set(s, p->u.alloc.device, p->u.alloc.node);
            f->alloc(f->ctx, app, dev, &p->u.alloc);
        }
    } else if (strcmp(table, "parts") == 0 && f->part) {
        char buf[512];
        const char *app, *node, *a2, *n2;
        int64_t pid = 0, start = 0;
        if (!split_alloc(name, buf, sizeof buf, &app, &node))
            return;
        if (del)
            f->part(f->ctx, app, node, false, 0, 0);
        else if (!part_decode(p->o, &a2, &n2, &pid, &start))
            f->part(f->ctx, app, node, true, pid, (uint64_t)start);
    } else if (strcmp(table, "nodeinfo") == 0 && f->nodeinfo) {
        f->nodeinfo(f->ctx, name, del ? NULL : kv->value, del ? NULL : p->o);
    } else if (strcmp(table, "agents") == 0 && f->agent) {
        f->agent(f->ctx, name, del ? NULL : kv->value);
    }
}

/*
 * One revision's changes: decoded first, without the follower's lock,
 * then applied under it (store.h). A revision this process committed
 * itself is not decoded: memory has its rows, and only its events are
 * handed over (decoded under the lock, as small as they are).
 */
static enum accel_err follow_cb(void *ctx, int64_t rev,
                                const struct etcd_event *ev, size_t n)
{
    struct frun *fr = ctx;
    struct estore *s = fr->s;
    const struct store_follower *f = fr->f;
    char table[32];
    int64_t rank = 0;
    char **pruned = NULL;
    size_t npruned = 0;
    struct fpre *pre = xcalloc(n ? n : 1, sizeof(*pre));

    if (n > 0 && !own_rev(s, rev))
        for (size_t i = 0; i < n; i++) /* an app row whose key this
                                          revision created is new here */
            follow_decode(fr, &ev[i], &pre[i], ev[i].kv.version == 1);
    if (f->lock)
        f->lock(f->ctx);
    watch_drain(s, ev, n, rev, f->mutex);
    for (size_t i = 0; i < n; i++) {
        const char *rest = table_of(s, ev[i].kv.key, table, sizeof table);
        follow_one(fr, &ev[i], &pre[i], rev, rank);
        if (rest && strcmp(table, "events") == 0)
            rank++;
    }
    if (f->revision)
        f->revision(f->ctx, rev);
    if ((int64_t)s->nev >= keep_limit(s) + ESTORE_PRUNE_EVERY)
        events_prune(s, &pruned, &npruned);
    if (f->unlock)
        f->unlock(f->ctx);
    fpre_free(pre, n);
    if (npruned > 0)
        events_delete(s, pruned, npruned);
    pthread_mutex_lock(&s->vlock);
    if (rev > s->applied_rev)
        s->applied_rev = rev;
    pthread_cond_broadcast(&s->vcond);
    pthread_mutex_unlock(&s->vlock);
    if (n > 0 || rev >= fr->next)
        fr->next = rev + 1;
    return ACCEL_OK;
}

/* ------------------------------------------------------ an agent's watch */

/*
 * An agent (--role agent) watches s->ranges on one stream: its node's
 * index (bynode/<node>/), the small tables it needs whole (devices/,
 * nodes/, users/, identities/, uids/) and its own live key. For each
 * event of the index it reads the rows of the app named (apps/<app>,
 * allocs/<app>/, parts/<app>/) at the event's revision, before taking the
 * caller's lock, and applies them as the whole watch would have: a row
 * memory has not seen is handed over, a row memory knows and the
 * revision lacks is handed over deleted. An app the index no longer names
 * here (released, moved, deleted) leaves the view. Each range keeps its
 * own pace; the view's revision is the lowest they reached.
 */
struct arun {
    struct frun fr;
    int64_t next[AGENT_RANGES];
    char **nodes;          /* the nodes whose registration it has read
                              (agent_nodes): the watcher thread's own */
    size_t nnodes;
    struct strmap *shown;  /* the apps whose row it has handed over and
                              not taken out since: their rows are not
                              decoded early again (the watcher's own) */
};

/* The events of one app of the index: its rows at the revision. */
struct arows {
    char *app;
    bool unbound;          /* its index key was deleted: once its rows
                              are applied, it leaves the view unless one
                              still binds it here */
    struct etcd_event *ev; /* the rows as PUT events */
    struct fpre *pre;      /* and decoded, before the lock */
    size_t n;
};

static void arows_free(struct arows *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < a[i].n; j++) {
            free(a[i].ev[j].kv.key);
            free(a[i].ev[j].kv.value);
        }
        free(a[i].ev);
        fpre_free(a[i].pre, a[i].n);
        free(a[i].app);
    }
    free(a);
}

/* Append the kvs that key (prefix: every key under it) held at rev. */
static enum accel_err arows_read(struct estore *s, struct arows *a,
                                 char *key, bool prefix, int64_t rev)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    enum accel_err err = etcd_get(s->e, key, prefix, rev, &kvs, &n, NULL);
    free(key);
    if (err != ACCEL_OK)
        return err;
    a->ev = xrealloc(a->ev, (a->n + n + 1) * sizeof(*a->ev));
    for (size_t i = 0; i < n; i++) /* the strings move */
        a->ev[a->n++] = (struct etcd_event){ETCD_EV_PUT, kvs[i]};
    free(kvs);
    return ACCEL_OK;
}

static bool arows_has(const struct arows *a, const char *key)
{
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->ev[i].kv.key, key) == 0)
            return true;
    return false;
}

/* Hand key over deleted at rev when memory holds it. */
static void agent_forget(struct frun *fr, char *key, int64_t rev)
{
    struct etcd_event del = {ETCD_EV_DELETE, {0}};
    struct fpre none = {.decoded = true};
    if (kmod(fr->s, key) != 0) {
        del.kv = (struct etcd_kv){.key = key, .key_len = strlen(key),
                                  .value = "", .mod_rev = rev};
        follow_one(fr, &del, &none, rev, 0);
    }
    free(key);
}

static void agent_apply_end(char **devs, size_t nd, const char **nodes);

/*
 * The registrations (nodeinfo/<node>, agents/<node>) of the nodes that the
 * index's apps' allocation rows name, read at rev into reg the first time
 * this watch meets each node, before the lock. An agent does not follow
 * nodeinfo/ (every node's usage would reach every agent), so a node
 * registered after it loaded was unknown to it: an app across that node's
 * card and this one's was taken for an app of this node alone, and run
 * whole here beside its part there. Applied before the rows naming them.
 */
static enum accel_err agent_nodes(struct arun *ar, const struct arows *rows,
                                  size_t nrows, int64_t rev,
                                  struct arows *reg)
{
    struct estore *s = ar->fr.s;
    enum accel_err err = ACCEL_OK;
    size_t from = reg->n;

    for (size_t i = 0; i < nrows && err == ACCEL_OK; i++) {
        for (size_t j = 0; j < rows[i].n && err == ACCEL_OK; j++) {
            const struct fpre *p = &rows[i].pre[j];
            char table[32];
            const char *node;
            bool met = false;
            if (p->o == NULL || p->bad != NULL ||
                !table_of(s, rows[i].ev[j].kv.key, table, sizeof table) ||
                strcmp(table, "allocs") != 0)
                continue;
            node = p->u.alloc.node;
            for (size_t k = 0; k < ar->nnodes && !met; k++)
                met = strcmp(ar->nodes[k], node) == 0;
            if (met || strcmp(node, s->node) == 0)
                continue;
            err = arows_read(s, reg, key2(s, "nodeinfo", node), false, rev);
            if (err == ACCEL_OK)
                err = arows_read(s, reg, key2(s, "agents", node), false,
                                 rev);
            if (err != ACCEL_OK)
                break;
            ar->nodes = xrealloc(ar->nodes,
                                 (ar->nnodes + 1) * sizeof(*ar->nodes));
            ar->nodes[ar->nnodes++] = xstrdup(node);
        }
    }
    if (err != ACCEL_OK)
        return err;
    reg->pre = xrealloc(reg->pre, (reg->n + 1) * sizeof(*reg->pre));
    for (size_t j = from; j < reg->n; j++) {
        reg->pre[j] = (struct fpre){0};
        follow_decode(&ar->fr, &reg->ev[j], &reg->pre[j], false);
    }
    return ACCEL_OK;
}

/* Whether an allocation row of a's, at its revision, is on this node. */
static bool bound_here(const struct estore *s, const struct arows *a)
{
    char table[32];
    for (size_t i = 0; i < a->n; i++) {
        const char *rest = table_of(s, a->ev[i].kv.key, table, sizeof table);
        const struct fpre *p = &a->pre[i];
        if (rest && strcmp(table, "allocs") == 0 && p->o && p->bad == NULL &&
            strcmp(p->u.alloc.node, s->node) == 0)
            return true;
    }
    return false;
}

/* One app of the index at rev (the caller's lock held). */
static void agent_apply(struct frun *fr, const struct arows *a, int64_t rev)
{
    struct estore *s = fr->s;
    const struct applist *l;
    char **devs = NULL;
    const char **nodes = NULL;
    size_t nd = 0, nn = 0;

    /* what memory knows of it, before: its devices and their nodes */
    l = applist_get(s, a->app, false);
    for (size_t i = 0; l && i < l->n; i++) {
        devs = xrealloc(devs, (nd + 1) * sizeof(*devs));
        devs[nd++] = xstrdup(l->dev[i]);
        nodes_add(&nodes, &nn, devnode_get(s, l->dev[i]));
    }
    /* rows the revision has, memory has not seen (a row this process
     * wrote itself is skipped by follow_one: its revision is seen) */
    for (size_t i = 0; i < a->n; i++)
        follow_one(fr, &a->ev[i], &a->pre[i], a->ev[i].kv.mod_rev, 0);
    /* unbound here: the whole app leaves the view, unless a row still
     * binds it here (an index key deleted by hand: kept, not dropped) */
    if (a->unbound && bound_here(s, a)) {
        agent_apply_end(devs, nd, nodes);
        return;
    }
    /* rows memory holds that the revision lacks */
    for (size_t i = 0; i < nd; i++) {
        char *k = key3(s, "allocs", a->app, devs[i]);
        if (a->unbound || !arows_has(a, k))
            agent_forget(fr, k, rev);
        else
            free(k);
    }
    for (size_t i = 0; i < nn; i++) {
        char *k = key3(s, "parts", a->app, nodes[i]);
        if (a->unbound || !arows_has(a, k))
            agent_forget(fr, k, rev);
        else
            free(k);
    }
    {
        char *k = key2(s, "apps", a->app);
        if (a->unbound || !arows_has(a, k))
            agent_forget(fr, k, rev);
        else
            free(k);
    }
    agent_apply_end(devs, nd, nodes);
}

static void agent_apply_end(char **devs, size_t nd, const char **nodes)
{
    for (size_t i = 0; i < nd; i++)
        free(devs[i]);
    free(devs);
    free(nodes);
}

/* Range range has applied rev: so has the view, up to the lowest. */
static void agent_reached(struct estore *s, size_t range, int64_t rev)
{
    int64_t low;
    pthread_mutex_lock(&s->vlock);
    if (rev > s->reached[range])
        s->reached[range] = rev;
    low = s->reached[0];
    for (size_t i = 1; i < AGENT_RANGES; i++)
        if (s->reached[i] < low)
            low = s->reached[i];
    if (low > s->applied_rev)
        s->applied_rev = low;
    pthread_cond_broadcast(&s->vcond);
    pthread_mutex_unlock(&s->vlock);
}

static enum accel_err agent_cb(void *ctx, size_t range, int64_t rev,
                               const struct etcd_event *ev, size_t n)
{
    struct arun *ar = ctx;
    struct frun *fr = &ar->fr;
    struct estore *s = fr->s;
    const struct store_follower *f = fr->f;
    struct arows *rows = NULL;
    struct arows *reg; /* agent_nodes */
    struct fpre *pre = NULL;
    size_t nrows = 0, plen = strlen(s->ranges[0]);
    enum accel_err err = ACCEL_OK;

    if (range >= AGENT_RANGES)
        return ACCEL_EIO;
    reg = xcalloc(1, sizeof(*reg));
    /* the index's apps, read before the lock is taken */
    if (range == 0 && n > 0) {
        rows = xcalloc(n, sizeof(*rows));
        for (size_t i = 0; i < n && err == ACCEL_OK; i++) {
            const char *app = ev[i].kv.key + plen;
            struct arows *a = &rows[nrows++];
            a->app = xstrdup(app);
            a->unbound = ev[i].type == ETCD_EV_DELETE;
            if (strchr(app, '/') || !app[0])
                continue;
            err = arows_read(s, a, key2(s, "apps", app), false, rev);
            if (err == ACCEL_OK)
                err = arows_read(s, a, key3(s, "allocs", app, ""), true,
                                 rev);
            if (err == ACCEL_OK)
                err = arows_read(s, a, key3(s, "parts", app, ""), true, rev);
        }
        /* decoded before the lock too; an app row read here may be new
         * to this view, so the follower decodes it early as well, unless
         * this watch has handed it over already (every write of an app
         * rewrites its index key: its manifest would be decoded at each) */
        for (size_t i = 0; i < nrows && err == ACCEL_OK; i++) {
            bool early = !strmap_get(ar->shown, rows[i].app, &(uint32_t){0});
            rows[i].pre = xcalloc(rows[i].n + 1, sizeof(*rows[i].pre));
            for (size_t j = 0; j < rows[i].n; j++)
                follow_decode(fr, &rows[i].ev[j], &rows[i].pre[j], early);
        }
        if (err == ACCEL_OK)
            err = agent_nodes(ar, rows, nrows, rev, reg);
        if (err != ACCEL_OK) { /* the watch resumes from here */
            arows_free(rows, nrows);
            arows_free(reg, 1);
            /* a revision compacted away: only a reload makes it whole */
            return err == ACCEL_ESTORE ? ACCEL_ESTORE_CORRUPT : err;
        }
    } else if (n > 0) {
        pre = xcalloc(n, sizeof(*pre));
        if (!own_rev(s, rev))
            for (size_t i = 0; i < n; i++)
                follow_decode(fr, &ev[i], &pre[i], false);
    }
    if (f->lock)
        f->lock(f->ctx);
    for (size_t i = 0; i < nrows; i++)
        watch_drain(s, rows[i].ev, rows[i].n, rev, f->mutex);
    for (size_t j = 0; j < reg->n; j++) /* the nodes first */
        follow_one(fr, &reg->ev[j], &reg->pre[j], rev, 0);
    for (size_t i = 0; i < nrows; i++)
        agent_apply(fr, &rows[i], rev);
    for (size_t i = 0; range > 0 && i < n; i++) {
        /* agents/<node> is a prefix of agents/<node>x too */
        if (range == AGENT_RANGES - 1 &&
            strcmp(ev[i].kv.key, s->ranges[range]) != 0)
            continue;
        follow_one(fr, &ev[i], &pre[i], rev, 0);
    }
    if (f->revision)
        f->revision(f->ctx, rev);
    if (f->unlock)
        f->unlock(f->ctx);
    for (size_t i = 0; i < nrows; i++) {
        char *k = key2(s, "apps", rows[i].app);
        if (!rows[i].unbound && arows_has(&rows[i], k))
            strmap_put(ar->shown, rows[i].app, 1);
        else
            strmap_del(ar->shown, rows[i].app);
        free(k);
    }
    arows_free(rows, nrows);
    arows_free(reg, 1);
    fpre_free(pre, pre ? n : 0);
    agent_reached(s, range, rev);
    if (n > 0 || rev >= ar->next[range])
        ar->next[range] = rev + 1;
    return ACCEL_OK;
}

/* One watch stream of es_follow, from where the last one broke. */
static enum accel_err watch_once(struct estore *s, struct frun *fr,
                                 struct arun *ar, volatile int *stop)
{
    if (ar)
        return etcd_watch_multi(s->e, (const char *const *)s->ranges,
                                ar->next, AGENT_RANGES, agent_cb, ar, stop);
    return etcd_watch(s->e, s->prefix, fr->next, follow_cb, fr, stop);
}

static enum accel_err es_follow(struct store *base,
                                const struct store_follower *f,
                                volatile int *stop)
{
    struct estore *s = (struct estore *)base;
    struct arun ar = {.fr = {s, f, s->load_rev + 1}, .shown = strmap_new()};
    enum accel_err err = ACCEL_OK;
    for (size_t i = 0; i < AGENT_RANGES; i++)
        ar.next[i] = s->load_rev + 1;
    while (!__atomic_load_n(stop, __ATOMIC_SEQ_CST)) {
        err = watch_once(s, &ar.fr, s->agent ? &ar : NULL, stop);
        if (err == ACCEL_ESTORE_CORRUPT)
            break;
        if (err != ACCEL_OK && !__atomic_load_n(stop, __ATOMIC_SEQ_CST)) {
            /* a broken stream: watch again from where it broke, after a
             * pause so that a dead cluster is not hammered */
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    for (size_t i = 0; i < ar.nnodes; i++)
        free(ar.nodes[i]);
    free(ar.nodes);
    strmap_free(ar.shown);
    return err == ACCEL_ESTORE_CORRUPT ? err : ACCEL_OK;
}

static const struct store_ops etcd_ops = {
    .cluster = true,
    .own_concurrent = true,
    .close = es_close,
    .created = es_created,
    .load = es_load,
    .begin = es_begin,
    .commit = es_commit,
    .rollback = es_rollback,
    .sync = es_sync,
    .app_put = es_app_put,
    .app_delete = es_app_delete,
    .alloc_put = es_alloc_put,
    .alloc_delete_app = es_alloc_delete_app,
    .alloc_delete = es_alloc_delete,
    .device_put = es_device_put,
    .node_put = es_node_put,
    .node_delete = es_node_delete,
    .user_put = es_user_put,
    .user_delete = es_user_delete,
    .identity_put = es_identity_put,
    .identity_retire = es_identity_retire,
    .limits_put = es_limits_put,
    .limits_delete = es_limits_delete,
    .event_append = es_event_append,
    .events_query = es_events_query,
    .writable = es_writable,
    .failed = es_failed,
    .fail = es_fail,
    /* no meta table, no busy timeout, no group commit: etcd made every
     * commit durable before it answered (created_ms, set_busy_timeout and
     * set_group_commit stay NULL) */
    .client = es_client,
    .prefix = es_prefix,
    .set_housekeeper = es_set_housekeeper,
    .conflict_rev = es_conflict_rev,
    .queue = es_queue,
    .await = es_await,
    .queued_settled = es_queued_settled,
    .queue_gate = es_queue_gate,
    .wait_rev = es_wait_rev,
    .view_rev = es_view_rev,
    .view_sync = es_view_sync,
    .member_write = es_member_write,
    .part_put = es_part_put,
    .part_delete = es_part_delete,
    .follow = es_follow,
    .index_fill = es_index_fill,
};
