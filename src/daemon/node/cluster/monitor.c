/* SPDX-License-Identifier: MIT */
/*
 * monitor.c: the elected monitors of a cluster (monitor.h says what they
 * do). Why not every agent: with every agent watching every beat, etcd
 * sends N beats to N watches each round (N^2 events a second; 569 at 24
 * nodes, a core of etcd's at about 72) and every view decodes all of them
 * under its lock. Here a beat is one write that MONITOR_SLOTS watches see,
 * and a view hears of liveness only when it changes.
 *
 * Not here: the lease and the live key's registration (cluster.c), the
 * view's reachable flag (cluster.c's apply_agent, from monitor_agent).
 */
#include "common/accel_setup.h"
#include "daemon/node/cluster/monitor.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/store/etcd.h"

#define MONITOR_IDLE_MS 100        /* a non-monitor's watch thread naps */
#define MONITOR_COMPACT_EVERY_S 60 /* the housekeeper looks this often */
#define MONITOR_REVS 64            /* (time, revision) samples kept */

/* What a monitor knows of one node. */
struct mnode {
    char *name;
    char *text;      /* its live key's value as last seen, NULL: gone */
    bool marked;     /* that value is marked silent */
    int64_t beat_ns; /* util_now_ns when its beat (or key) last came */
};

/* A revision etcd had at a time: what compaction may drop later. */
struct mrev {
    int64_t ns;
    int64_t rev;
};

struct monitor {
    struct store *store;
    struct etcd *e;
    char *node;
    char *beat_prefix;       /* <base>~live/beat/ */
    char *slot_prefix;       /* <base>~live/monitor/ */
    char *agents_prefix;     /* <prefix>agents/ */
    int64_t ttl_ns;
    int64_t retention_ns;
    pthread_t thread;
    volatile int stop;       /* the thread ends (atomic) */
    volatile int watch_stop; /* the beats' watch ends (atomic) */
    bool no_slot;            /* an agent's: never takes one */
    int slot;                /* held slot or -1 (atomic) */
    int64_t lease;           /* the lease the slot was taken on (keeper) */
    bool own_marked;         /* this node's key is marked (atomic) */
    pthread_mutex_t mu;      /* below */
    struct mnode *nodes;
    size_t nnodes;
    int64_t echo_ns;         /* this node's beat last came back, 0: not yet */
    bool fresh;              /* monitoring began: seed the table (keeper) */
    struct mrev revs[MONITOR_REVS]; /* keeper only */
    size_t nrevs;
    int64_t next_compact_ns;
};

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

bool monitor_marked(const char *text)
{
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    bool marked = json_object_get(o, "silent") != NULL;
    json_decref(o);
    return marked;
}

/* The node's entry (m->mu held); added when add. */
static struct mnode *mnode_get(struct monitor *m, const char *name, bool add)
{
    for (size_t i = 0; i < m->nnodes; i++)
        if (strcmp(m->nodes[i].name, name) == 0)
            return &m->nodes[i];
    if (!add)
        return NULL;
    m->nodes = xrealloc(m->nodes, (m->nnodes + 1) * sizeof(*m->nodes));
    m->nodes[m->nnodes] = (struct mnode){xstrdup(name), NULL, false, 0};
    return &m->nodes[m->nnodes++];
}

/* A node's live key changed (m->mu held). A key written (registered
 * again, or unmarked by its node) counts as a beat. */
static void mnode_take(struct monitor *m, const char *name, const char *text)
{
    struct mnode *n = mnode_get(m, name, true);
    free(n->text);
    n->text = text ? xstrdup(text) : NULL;
    n->marked = monitor_marked(text);
    if (text && !n->marked)
        n->beat_ns = (int64_t)util_now_ns();
}

bool monitor_agent(struct monitor *m, const char *node, const char *text)
{
    bool marked = monitor_marked(text);
    if (m == NULL)
        return text && !marked;
    pthread_mutex_lock(&m->mu);
    mnode_take(m, node, text);
    pthread_mutex_unlock(&m->mu);
    if (strcmp(node, m->node) == 0)
        __atomic_store_n(&m->own_marked, text && marked, __ATOMIC_SEQ_CST);
    return text && !marked;
}

int monitor_slot(struct monitor *m)
{
    return m ? __atomic_load_n(&m->slot, __ATOMIC_SEQ_CST) : -1;
}

/* ------------------------------------------------------ the beats' watch */

static enum accel_err beats_cb(void *ctx, int64_t rev,
                               const struct etcd_event *ev, size_t n)
{
    struct monitor *m = ctx;
    size_t plen = strlen(m->beat_prefix);
    int64_t now = (int64_t)util_now_ns();
    (void)rev;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        const char *name = ev[i].kv.key + plen;
        if (ev[i].type != ETCD_EV_PUT || ev[i].kv.key_len <= plen)
            continue;
        mnode_get(m, name, true)->beat_ns = now;
        if (strcmp(name, m->node) == 0)
            m->echo_ns = now;
    }
    pthread_mutex_unlock(&m->mu);
    return ACCEL_OK;
}

/* Watch the beats while this node holds a slot. A watch begun (or begun
 * again after a break) gives every node a TTL from now: beats missed
 * meanwhile are not silence. */
static void *watch_main(void *arg)
{
    struct monitor *m = arg;
    while (!__atomic_load_n(&m->stop, __ATOMIC_SEQ_CST)) {
        int64_t now = (int64_t)util_now_ns();
        if (monitor_slot(m) < 0 ||
            __atomic_load_n(&m->watch_stop, __ATOMIC_SEQ_CST)) {
            nap_ms(MONITOR_IDLE_MS);
            continue;
        }
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < m->nnodes; i++)
            m->nodes[i].beat_ns = now;
        m->echo_ns = 0;
        pthread_mutex_unlock(&m->mu);
        if (etcd_watch(m->e, m->beat_prefix, 0, beats_cb, m,
                       &m->watch_stop) != ACCEL_OK)
            nap_ms(200); /* broken: again, from now */
    }
    return NULL;
}

/* ------------------------------------------------------------ the slots */

/* Seed the table from etcd's live keys (keeper; a new monitor). */
static void seed(struct monitor *m)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 0, plen = strlen(m->agents_prefix);
    if (etcd_get(m->e, m->agents_prefix, true, 0, &kvs, &n, NULL) != ACCEL_OK)
        return;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n; i++)
        if (kvs[i].key_len > plen && !mnode_get(m, kvs[i].key + plen, false))
            mnode_take(m, kvs[i].key + plen, kvs[i].value);
    m->fresh = false;
    pthread_mutex_unlock(&m->mu);
    etcd_kvs_free(kvs, n);
}

static void slot_set(struct monitor *m, int slot)
{
    int was = monitor_slot(m);
    if (was == slot)
        return;
    if (slot >= 0)
        log_info("node %s is a cluster monitor (slot %d%s)", m->node, slot,
                 slot == 0 ? ": it also prunes events and compacts" : "");
    else
        log_info("node %s is no longer a cluster monitor", m->node);
    __atomic_store_n(&m->watch_stop, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&m->slot, slot, __ATOMIC_SEQ_CST);
    store_set_housekeeper(m->store, slot == 0);
    if (slot >= 0) {
        pthread_mutex_lock(&m->mu);
        m->fresh = true;
        pthread_mutex_unlock(&m->mu);
        __atomic_store_n(&m->watch_stop, 0, __ATOMIC_SEQ_CST);
    }
}

/* Read the slots; keep the one this node holds on lease, or take the
 * first free one. A slot lives on its holder's lease: it frees itself
 * when that agent dies or is cut off. */
static void slots(struct monitor *m, int64_t lease)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 0, plen = strlen(m->slot_prefix);
    bool used[MONITOR_SLOTS] = {false};
    int mine = -1;
    if (m->no_slot)
        return; /* slot stays -1 */
    if (etcd_get(m->e, m->slot_prefix, true, 0, &kvs, &n, NULL) != ACCEL_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        char *end = NULL;
        long k = kvs[i].key_len > plen ? strtol(kvs[i].key + plen, &end, 10)
                                       : -1;
        if (k < 0 || k >= MONITOR_SLOTS || end == NULL || *end != '\0')
            continue;
        used[k] = true;
        if (strcmp(kvs[i].value, m->node) == 0 && kvs[i].lease == lease)
            mine = k;
    }
    etcd_kvs_free(kvs, n);
    for (int k = 0; mine < 0 && k < MONITOR_SLOTS; k++) {
        char *key;
        bool ok = false;
        if (used[k])
            continue;
        key = xasprintf("%s%d", m->slot_prefix, k);
        struct etcd_cmp cmp = {key, ETCD_CREATE, ETCD_EQUAL, 0, NULL, 0};
        struct etcd_op op = {ETCD_PUT, key, m->node, strlen(m->node), lease};
        if (etcd_txn(m->e, &cmp, 1, &op, 1, &ok, NULL, NULL) == ACCEL_OK &&
            ok)
            mine = k;
        free(key);
        break; /* one try a round: another agent may have won it */
    }
    slot_set(m, mine);
}

/* ---------------------------------------------------------- compaction */

/* As housekeeper: compact etcd's history to the revision it had a
 * retention ago (samples taken each round), at most once a minute. A
 * view's watch resumes from where it broke, seconds back; one that fell
 * a retention behind reloads (docs/cluster.md). */
static void compact(struct monitor *m)
{
    int64_t now = (int64_t)util_now_ns(), rev = 0, to = 0;
    struct etcd_kv *kvs = NULL;
    size_t n = 0, keep = 0;
    char *cause = NULL;
    if (m->retention_ns <= 0 || monitor_slot(m) != 0)
        return;
    if (etcd_get(m->e, m->slot_prefix, true, 0, &kvs, &n, &rev) == ACCEL_OK &&
        (m->nrevs == 0 ||
         now - m->revs[m->nrevs - 1].ns >= m->retention_ns / MONITOR_REVS)) {
        if (m->nrevs == MONITOR_REVS) {
            memmove(m->revs, m->revs + 1, (MONITOR_REVS - 1) * sizeof(*m->revs));
            m->nrevs--;
        }
        m->revs[m->nrevs++] = (struct mrev){now, rev};
    }
    etcd_kvs_free(kvs, n);
    if (now < m->next_compact_ns)
        return;
    m->next_compact_ns = now + MONITOR_COMPACT_EVERY_S * 1000000000LL;
    for (size_t i = 0; i < m->nrevs && now - m->revs[i].ns >= m->retention_ns;
         i++) {
        to = m->revs[i].rev;
        keep = i + 1;
    }
    if (to <= 0)
        return;
    memmove(m->revs, m->revs + keep, (m->nrevs - keep) * sizeof(*m->revs));
    m->nrevs -= keep;
    if (etcd_compact(m->e, to, &cause) == ACCEL_OK)
        log_info("compacted etcd's history up to revision %" PRId64
                 " (kept the last %" PRId64 " s)",
                 to, m->retention_ns / (int64_t)1000000000);
    else
        log_debug("compaction to %" PRId64 " not done: %s", to,
                  cause ? cause : "");
    free(cause);
}

void monitor_round(struct monitor *m, int64_t lease, const char *live)
{
    struct etcd_op op = {ETCD_PUT, NULL, "1", 1, lease};
    char *key = xasprintf("%s%s", m->beat_prefix, m->node);
    bool ok, fresh;
    op.key = key;
    if (etcd_txn(m->e, NULL, 0, &op, 1, &ok, NULL, NULL) != ACCEL_OK)
        log_debug("node %s: beat not written", m->node);
    free(key);
    if (live && __atomic_load_n(&m->own_marked, __ATOMIC_SEQ_CST) &&
        store_member_put(m->store, "agents", m->node, live, lease) ==
            ACCEL_OK) {
        log_info("node %s was marked silent; it says it is alive again",
                 m->node);
        __atomic_store_n(&m->own_marked, false, __ATOMIC_SEQ_CST);
    }
    slots(m, lease);
    pthread_mutex_lock(&m->mu);
    fresh = m->fresh;
    pthread_mutex_unlock(&m->mu);
    if (fresh)
        seed(m);
    compact(m);
}

/* ------------------------------------------------------------- marking */

struct mark {
    char *name, *text;
};

/* Rewrite name's live key, text, marked silent on the node's own lease,
 * guarded by its value: a key written again meanwhile, or gone, stays. */
static bool mark_one(struct monitor *m, const struct mark *k, int64_t age_ms)
{
    json_t *o = json_loads(k->text, 0, NULL);
    json_int_t lease = json_integer_value(json_object_get(o, "lease"));
    char *key = store_key(m->store, "agents", k->name), *val;
    bool ok = false;
    json_object_set_new(o, "silent", json_pack("{s:s, s:I}", "by", m->node,
                                               "ms", (json_int_t)age_ms));
    val = json_dumps(o, JSON_COMPACT);
    if (o && val && lease > 0) {
        struct etcd_cmp cmp = {key, ETCD_VALUE, ETCD_EQUAL, 0, k->text,
                               strlen(k->text)};
        struct etcd_op op = {ETCD_PUT, key, val, strlen(val), lease};
        if (etcd_txn(m->e, &cmp, 1, &op, 1, &ok, NULL, NULL) != ACCEL_OK)
            ok = false;
    }
    free(val);
    free(key);
    json_decref(o);
    return ok;
}

/* A mark etcd refused (the key written again, or gone): what the table
 * held is not etcd's value, and the watch brings the new one. */
static void forget_text(struct monitor *m, const struct mark *k)
{
    struct mnode *x;
    pthread_mutex_lock(&m->mu);
    x = mnode_get(m, k->name, false);
    if (x && x->text && strcmp(x->text, k->text) == 0) {
        free(x->text);
        x->text = NULL;
    }
    pthread_mutex_unlock(&m->mu);
}

void monitor_check(struct monitor *m, int64_t renewed_ns)
{
    int64_t now = (int64_t)util_now_ns();
    struct mark *marks = NULL;
    size_t n = 0;
    if (monitor_slot(m) < 0 || renewed_ns == 0 || now - renewed_ns >= m->ttl_ns)
        return; /* a monitor whose own lease lapsed marks no one */
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; m->echo_ns != 0 && i < m->nnodes; i++) {
        struct mnode *x = &m->nodes[i];
        if (x->text == NULL || x->marked || strcmp(x->name, m->node) == 0 ||
            now - x->beat_ns < m->ttl_ns || m->echo_ns - x->beat_ns < m->ttl_ns)
            continue;
        marks = xrealloc(marks, (n + 1) * sizeof(*marks));
        marks[n++] = (struct mark){xstrdup(x->name), xstrdup(x->text)};
        x->marked = true; /* once: the watch brings what etcd took */
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        int64_t age;
        struct mnode *x;
        pthread_mutex_lock(&m->mu);
        x = mnode_get(m, marks[i].name, false);
        age = x ? (now - x->beat_ns) / 1000000 : 0;
        pthread_mutex_unlock(&m->mu);
        if (mark_one(m, &marks[i], age))
            log_info("node %s is unreachable (no beat from its agent for "
                     "%" PRId64 " ms); marked silent",
                     marks[i].name, age);
        else
            forget_text(m, &marks[i]);
        free(marks[i].name);
        free(marks[i].text);
    }
    free(marks);
}

/* ----------------------------------------------------------- lifecycle */

/* "<prefix minus its last slash>~live/<what>/": outside the range the
 * views watch ([prefix, prefix's last byte + 1)), '~' sorting after it. */
static char *live_prefix(struct store *s, const char *what)
{
    const char *p = store_prefix(s);
    return xasprintf("%.*s~live/%s/", (int)strlen(p) - 1, p, what);
}

/* What monitor_new made before its thread: freed with m. */
static void release(struct monitor *m)
{
    pthread_mutex_destroy(&m->mu);
    free(m->beat_prefix);
    free(m->slot_prefix);
    free(m->agents_prefix);
    free(m->node);
    free(m);
}

struct monitor *monitor_new(const struct monitor_opts *o)
{
    struct monitor *m = xcalloc(1, sizeof(*m));
    m->store = o->store;
    m->e = store_etcd(o->store);
    m->node = xstrdup(o->node);
    m->beat_prefix = live_prefix(o->store, "beat");
    m->slot_prefix = live_prefix(o->store, "monitor");
    m->agents_prefix = store_key(o->store, "agents", "");
    m->ttl_ns = (int64_t)o->ttl_s * 1000000000LL;
    m->retention_ns = (int64_t)o->compact_retention_s * 1000000000LL;
    m->slot = -1;
    m->no_slot = o->no_slot;
    pthread_mutex_init(&m->mu, NULL);
    if (pthread_create(&m->thread, NULL, watch_main, m) != 0) {
        release(m);
        return NULL;
    }
    return m;
}

void monitor_free(struct monitor *m)
{
    if (m == NULL)
        return;
    __atomic_store_n(&m->stop, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&m->watch_stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(m->thread, NULL);
    for (size_t i = 0; i < m->nnodes; i++) {
        free(m->nodes[i].name);
        free(m->nodes[i].text);
    }
    free(m->nodes);
    release(m);
}
