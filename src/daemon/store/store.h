/* SPDX-License-Identifier: MIT */
/*
 * store.h: the durable state of acceld (SPEC 9). The daemon keeps its state
 * in memory and writes every change through to the store inside the same
 * critical section, before it answers: store_begin, the puts/deletes of one
 * operation, store_commit (or store_rollback on any failure). One SQLite
 * file (<data-dir>/accel.db), WAL, synchronous=FULL, schema version in
 * PRAGMA user_version, ordered migrations. A newer or corrupt database is
 * refused with a clear message and never overwritten.
 *
 * The interface speaks in rows, not SQL, so that a cluster store (etcd,
 * SPEC 10) can implement it too. Strings passed in are copied; strings
 * passed to loader callbacks are valid only during the call.
 *
 * Threads. A transaction belongs to the thread that began it: only that
 * thread's writes join it, and its commit or rollback ends it. A row write,
 * commit or part write from a thread with no transaction open is refused
 * (ACCEL_EINVAL, "without a transaction of this thread's"), and another
 * thread's open transaction is left as it was. The writes that may stand
 * alone (store_event_append, store_member_put/delete) are, from any other
 * thread, transactions of their own that never join the open one: on etcd
 * at once, beside anything; on SQLite (one connection) once the open
 * transaction is over. A store_begin while another thread's transaction is
 * open waits for it (at most the busy timeout, then ACCEL_EBUSY).
 * store_errmsg is per thread: the message of this thread's last failure.
 * Those stand-alone writes and store_sync may be called from any thread
 * without a lock; every other call is made under one lock of the caller's
 * (acceld's d->lock), which also orders the cluster store's view and its
 * watch (store_follow).
 */
#ifndef ACCEL_DAEMON_STORE_STORE_H
#define ACCEL_DAEMON_STORE_STORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "accel/accel.h"

struct store;

/* An installed app. */
struct store_app {
    const char *name;          /* app name, primary key */
    const char *owner;         /* user name or "shared" */
    const char *state;         /* "installed", "running", ... */
    const char *reason;        /* why it is in that state, or NULL */
    const char *manifest;      /* the manifest as compact JSON */
    const char *selected_type; /* chosen accelerator type, or NULL */
    int64_t created_ms;        /* wall clock at install */
    int64_t updated_ms;        /* wall clock at the last change */
    int64_t pid;               /* leader pid of its process group, 0 if none */
    uint64_t pid_start;        /* that process's start time (clock ticks) */
    int64_t exit_status;       /* last exit status, -1 if none */
};

/* One allocation row (binding). */
struct store_alloc {
    const char *app;    /* app name */
    const char *owner;  /* app owner */
    const char *type;   /* accelerator type name */
    const char *node;   /* node name */
    const char *device; /* device id */
    uint64_t memory;    /* quota bytes (MemorySlice), 0 = whole card */
};

/* A device's persisted settings (the mode a user chose wins over inventory). */
struct store_device {
    const char *node;       /* node name */
    const char *id;         /* device id */
    const char *support;    /* "Exclusive" | "MemorySlice" | "TimeSlice" */
    const char *settings;   /* JSON object of per-device settings, or NULL */
};

struct store_node {
    const char *name; /* node name */
    bool enabled;     /* accelerators take new placements */
};

struct store_user {
    const char *name;       /* user name */
    const char *role;       /* "admin" | "member" */
    const char *token_hash; /* hex SHA-256 of the token */
    int64_t created_ms;
};

/* The Unix uid of an accel user name (or "shared"), SPEC 3. */
struct store_identity {
    const char *name;       /* user name or "shared", primary key */
    int64_t uid;            /* > 0, unique; the gid has the same number */
};

/* A member's limits (SPEC 3); -1 = the default (max_apps) or none. */
struct store_limits {
    const char *name;       /* user name, primary key */
    int64_t max_apps;       /* apps the user may hold, or -1 */
    int64_t max_gpu_memory; /* bytes of GPU memory bound to its apps, or -1 */
};

struct store_event {
    int64_t id;          /* assigned by the store, increasing */
    int64_t ts_ms;       /* wall clock */
    const char *kind;    /* "app.state", "binding.add", "refusal", ... */
    const char *app;     /* or NULL */
    const char *node;    /* or NULL */
    const char *device;  /* or NULL */
    const char *message; /* one sentence */
    const char *data;    /* JSON object with details, or NULL */
};

/*
 * Callbacks for store_load; any may be NULL. A callback that finds its row
 * undecodable (a manifest that does not parse, an unknown enum) returns
 * ACCEL_ESTORE_CORRUPT and sets *why to an allocated sentence; the row is
 * then one of the refused (or, with repair, dropped) rows. Any other
 * non-OK return stops the load and is returned by store_load.
 */
struct store_loader {
    void *ctx;
    enum accel_err (*app)(void *ctx, const struct store_app *a, char **why);
    enum accel_err (*alloc)(void *ctx, const struct store_alloc *a,
                            char **why);
    enum accel_err (*device)(void *ctx, const struct store_device *d,
                             char **why);
    enum accel_err (*node)(void *ctx, const struct store_node *n, char **why);
    enum accel_err (*user)(void *ctx, const struct store_user *u, char **why);
    enum accel_err (*identity)(void *ctx, const struct store_identity *id,
                               char **why);
    enum accel_err (*limits)(void *ctx, const struct store_limits *l,
                             char **why);
    bool repair; /* drop the undecodable rows instead of refusing */
    /* cluster stores only (store_open_etcd), called before every other
     * row: a node's registration (nodeinfo: its devices as JSON) and its
     * agent's live key (agents: present while its lease holds) */
    enum accel_err (*nodeinfo)(void *ctx, const char *node, const char *json,
                               char **why);
    enum accel_err (*agent)(void *ctx, const char *node, const char *json,
                            char **why);
    /* the running parts of apps bound across nodes (after the allocs) */
    enum accel_err (*part)(void *ctx, const char *app, const char *node,
                           int64_t pid, uint64_t pid_start, char **why);
};

/*
 * Open the database at path and migrate it to the current schema. First
 * start is recognised only by the absence of the file: then the database is
 * built under a temporary name and linked into place complete, so path
 * either does not exist or holds the whole schema (store_created then says
 * true). An existing file that is empty, not ours, newer, or without a
 * schema is refused and left as it is. *out is set only on success. On
 * failure *cause gets an allocated sentence naming the file (caller
 * frees), e.g. "accel.db was written by a newer accel (schema 7, this
 * build knows 2); refusing to open it", and the code is ACCEL_ESTORE_NEWER,
 * ACCEL_ESTORE_CORRUPT, ACCEL_EIO or ACCEL_ESTORE.
 */
enum accel_err store_open(const char *path, struct store **out, char **cause);
/* Whether store_open created the file (the first start). */
bool store_created(const struct store *s);
/* When the store was first created (ms since the epoch; SQLite only: the
 * meta table), 0 for a cluster store or when it cannot be read. */
int64_t store_created_ms(struct store *s);
void store_close(struct store *s); /* accepts NULL */

/* The last SQLite message (with its rc) behind a failure, for logs; "" if
 * none. Valid until the next store call. Accepts NULL. */
const char *store_errmsg(const struct store *s);

/* How long a write waits for another connection's lock before failing with
 * ACCEL_EBUSY (default 5000 ms). Tests shorten it. */
void store_set_busy_timeout(struct store *s, int ms);

/* The schema version this build creates and migrates to. */
int store_schema_version(void);

/*
 * Read every row into the loader (nodes, devices, users, identities, apps,
 * then allocs) and check every row of every table, events included: a column
 * of the wrong type, a NUL inside a text, a negative memory or time, an
 * unknown role or support type, an allocation whose app has no row (or a
 * dropped one), an event whose data is not a JSON object, and whatever a
 * callback refuses. Rows that do not decode are never passed on.
 *
 * Without l->repair, any such row makes the load fail with
 * ACCEL_ESTORE_CORRUPT and *cause naming the file, and each row's table,
 * key and reason; nothing is written. With l->repair, those rows (and the
 * allocations of a dropped app) are deleted in one transaction together
 * with a "store.repair" event that lists them, and *cause gets that list
 * (NULL when nothing was dropped). *cause is allocated; caller frees.
 */
enum accel_err store_load(struct store *s, const struct store_loader *l,
                          char **cause);

/*
 * Transactions: begin → puts → commit (durable when it returns OK). Begin
 * takes the write lock at once (BEGIN IMMEDIATE); another writer makes it
 * wait up to the busy timeout, then ACCEL_EBUSY. Any failure of a call
 * between begin and commit, commit included, has already rolled the whole
 * transaction back when it returns (store_rollback is then a no-op) and
 * later puts answer ACCEL_EINVAL until the next begin, so nothing of a
 * failed transaction can be committed; events too, until the next begin
 * or store_rollback (after a failed commit the transaction is over, and
 * an event is one of its own). Errors: ACCEL_EBUSY, ACCEL_ENOMEM,
 * ACCEL_EIO (I/O error, disk full, read-only file), ACCEL_ESTORE_CORRUPT,
 * ACCEL_EINVAL (no transaction, NULL required field), ACCEL_ESTORE.
 */
enum accel_err store_begin(struct store *s);
enum accel_err store_commit(struct store *s);
void store_rollback(struct store *s);

/*
 * Group commit. By default every store_commit is durable when it returns
 * (synchronous=FULL: one fsync per commit). store_set_group_commit(s, true)
 * switches to synchronous=NORMAL: a commit then only writes the WAL, and
 * store_sync makes every commit written so far durable with one fdatasync
 * of the WAL, however many there were. The caller must call store_sync
 * before it acknowledges a change (acceld does so before every answer to a
 * changing request). store_sync may run on another thread than the commits
 * (it only syncs a file descriptor of its own). ACCEL_OK or ACCEL_EIO.
 */
enum accel_err store_set_group_commit(struct store *s, bool on);
enum accel_err store_sync(struct store *s);

/* Row writes; call between begin and commit. Put = insert or replace. */
enum accel_err store_app_put(struct store *s, const struct store_app *a);
enum accel_err store_app_delete(struct store *s, const char *name);
enum accel_err store_alloc_put(struct store *s, const struct store_alloc *a);
/* Delete every allocation row of an app. */
enum accel_err store_alloc_delete_app(struct store *s, const char *app);
/* Delete one row (app, device). */
enum accel_err store_alloc_delete(struct store *s, const char *app,
                                  const char *device);
enum accel_err store_device_put(struct store *s, const struct store_device *d);
enum accel_err store_node_put(struct store *s, const struct store_node *n);
enum accel_err store_user_put(struct store *s, const struct store_user *u);
enum accel_err store_user_delete(struct store *s, const char *name);
/* Insert a name's uid (never replaced: a name keeps its uid for good). A
 * second row for the name or for the uid is ACCEL_ECONFLICT (and rolls the
 * transaction back, like every failure); uid <= 0 is ACCEL_EINVAL. */
enum accel_err store_identity_put(struct store *s,
                                  const struct store_identity *id);
/*
 * Retire name's uid (a removed user, SPEC 3): its row is renamed to
 * retired->name (a name no user can have), uid retired->uid unchanged, so
 * the uid stays taken for good and the name, if it comes back, gets a
 * fresh one. ACCEL_ECONFLICT when retired->name is taken (the transaction
 * is rolled back, like every failure); ACCEL_EINVAL without names or uid.
 */
enum accel_err store_identity_retire(struct store *s, const char *name,
                                     const struct store_identity *retired);
/* Set (insert or replace) or forget a user's limits. */
enum accel_err store_limits_put(struct store *s,
                                const struct store_limits *l);
enum accel_err store_limits_delete(struct store *s, const char *name);

/* Append an event; *out_id (may be NULL) gets its id. Usable inside or
 * outside a transaction (outside: its own commit). Keeps the newest
 * keep_max events: older ones are pruned in batches, every 64 appends, so
 * the table holds at most keep_max + 63 rows. keep_max <= 0: keep all.
 * kind and message are required (ACCEL_EINVAL). */
enum accel_err store_event_append(struct store *s, const struct store_event *e,
                                  int64_t keep_max, int64_t *out_id);

/* Events with id > since_id, oldest first, at most limit (<= 0: no
 * limit), optionally filtered (NULL = any) by app, device and kind, and by
 * ts >= since_ms (0 = any). Stops early if cb returns non-OK and returns
 * that code. Strings in *e are valid only during the callback. */
struct store_event_filter {
    int64_t since_id;
    int64_t since_ms;
    const char *app;
    const char *device;
    const char *kind;
    int64_t limit;
};
enum accel_err store_events_query(struct store *s,
                                  const struct store_event_filter *f,
                                  enum accel_err (*cb)(void *ctx,
                                                       const struct store_event *e),
                                  void *ctx);

/* ------------------------------------------------- the cluster store */

/*
 * etcd as the store (SPEC 10; store_etcd.c says how rows become keys).
 * The calls above keep their meaning with these differences:
 * - store_commit sends the transaction's rows as one etcd transaction
 *   guarded by the mod revisions this process last saw of what it writes
 *   (and, for allocations, of the device's allocation set, its mode, its
 *   node and its owner's allocations). Another acceld that changed one of
 *   them first makes it fail with ACCEL_ECONFLICT, nothing written, and
 *   store_conflict_rev says the revision to wait for (store_wait_rev)
 *   before deciding again. ACCEL_EUNAVAIL: no member answered; whether
 *   the transaction applied is then unknown, and the watch will tell
 *   (store_commit and store_commit_queued alike; the API answers 503).
 * - store_sync waits until the watch has brought this process's view up
 *   to its own last commit (etcd made it durable before answering).
 * - Events are shown once the watch delivers them; their ids are
 *   revision * 1024 + rank within the revision.
 */
struct store_etcd_opts {
    const char *endpoints; /* "http://h1:2379,http://h2:2379" */
    const char *cacert;    /* TLS: CA, client cert and key, or NULL */
    const char *cert;
    const char *key;
    const char *prefix;    /* of every key; NULL = "/accel/" */
    const char *node;      /* this node's name (its event keys) */
    int timeout_ms;        /* per request; <= 0: 5000 */
    bool insecure;         /* false: refuse an etcd that serves clients
                            * without a client certificate, or any http://
                            * endpoint (etcd_check_closed) */
    bool agent;            /* acceld --role agent: load and follow only
                            * the apps bound to node's cards (its
                            * bynode/<node>/ index) and the small tables
                            * a node needs whole (docs/cluster.md) */
};
enum accel_err store_open_etcd(const struct store_etcd_opts *o,
                               struct store **out, char **cause);
bool store_is_cluster(const struct store *s);
/* The etcd client of a cluster store (leases), or NULL. */
struct etcd *store_etcd(struct store *s);
/* The prefix of every key ("/accel/"; "/" for SQLite); valid until
 * store_close. */
const char *store_prefix(const struct store *s);
/* Whether this process prunes the cluster's events in etcd (its elected
 * housekeeper, node/monitor.c): every view trims its own copy; only the
 * housekeeper deletes the keys, once for all (any thread). Off at open.
 * SQLite: nothing (it prunes in its own transactions). */
void store_set_housekeeper(struct store *s, bool on);
/* The full key of kind/name ("/accel/agents/n1"); caller frees. */
char *store_key(const struct store *s, const char *kind, const char *name);
/* After ACCEL_ECONFLICT: the revision the guards were checked at. */
int64_t store_conflict_rev(const struct store *s);
/*
 * store_commit with the caller's lock mu (held, the one every other store
 * call of this process is made under) released while etcd answers. The
 * caller has already made memory show the change (a reservation: other
 * decisions taken meanwhile count it); transactions queued while another
 * is on its way are sent together after it, as one etcd transaction, and
 * fail together when a guard of one fails. Returns with mu held, the
 * transaction over (as store_commit); *conflict_rev set on
 * ACCEL_ECONFLICT. Whatever the answer, once memory matches it (the
 * reservation kept, or taken back) the caller calls store_queued_settled.
 * store_queue_gate (mu held) waits, before a decision that will be queued,
 * while the watch waits for queued commits to settle. SQLite: store_commit.
 */
enum accel_err store_commit_queued(struct store *s, pthread_mutex_t *mu,
                                   int64_t *conflict_rev);
void store_queued_settled(struct store *s);
void store_queue_gate(struct store *s, pthread_mutex_t *mu);
/* Wait (at most ms) until the view has applied revision rev: ACCEL_OK,
 * or ACCEL_EBUSY on time-out. SQLite: ACCEL_OK at once. */
enum accel_err store_wait_rev(struct store *s, int64_t rev, int ms);

/* The revision this process's view has applied (cluster stores; 0 for
 * SQLite). */
int64_t store_view_rev(struct store *s);
/* Bring the view up to the cluster store's current revision: one read of
 * etcd for its revision, then a wait (at most ms) for the watch to apply
 * it. *moved says whether that revision is past since (a decision taken on
 * a view at since may have missed something). SQLite: ACCEL_OK, not
 * moved. */
enum accel_err store_view_sync(struct store *s, int64_t since, int ms,
                               bool *moved);

/* Forget a node's row (inside a transaction; both stores). */
enum accel_err store_node_delete(struct store *s, const char *name);

/*
 * A node's registration (kind "nodeinfo", kept) or its agent's live key
 * (kind "agents", attached to lease so that it vanishes with the agent).
 * Inside a transaction: part of it; outside: written at once, unguarded.
 * Cluster stores only (SQLite: ACCEL_ENOTSUP).
 */
enum accel_err store_member_put(struct store *s, const char *kind,
                                const char *node, const char *json,
                                int64_t lease);
enum accel_err store_member_delete(struct store *s, const char *kind,
                                   const char *node);

/* The part of an app bound across nodes that runs on node (its leader),
 * or no longer does; inside a transaction, cluster stores only. */
enum accel_err store_part_put(struct store *s, const char *app,
                              const char *node, int64_t pid,
                              uint64_t pid_start);
enum accel_err store_part_delete(struct store *s, const char *app,
                                 const char *node);

/*
 * What other processes change, as it happens (cluster stores). Each
 * revision's changes are handed over under the caller's lock (lock/unlock
 * around them, so that the view and the guards' revisions move together):
 * a row, or NULL for a deleted one (its key in the names). Changes this
 * process made itself are not handed back, except events: every event is
 * (this process's own too), since the view shows an event only once the
 * watch has delivered it. revision() ends each revision (and comes alone
 * for progress). Any callback may be NULL.
 *
 * The lock is held to apply a change, not to decode it (issue 51): each
 * revision's values are parsed and their rows decoded before lock() (a
 * revision this process committed itself is not: memory has it), and
 * app_early() comes then, without the lock, for an app row that may be
 * new to the follower (its key created in this revision; an agent's: any
 * row its index brought), so that the follower's own decoding of it (the
 * manifest) is done there; the same row comes to app() under the lock
 * after, unless it is this process's own. nodeinfo() is handed the value
 * parsed too (parsed: NULL when deleted or not JSON).
 */
struct json_t;
struct store_follower {
    void *ctx;
    void (*lock)(void *ctx);
    void (*unlock)(void *ctx);
    pthread_mutex_t *mutex; /* what lock() takes, or NULL: the watch waits
                             * on it for queued commits that touch what it
                             * is about to apply (store_commit_queued) */
    void (*app_early)(void *ctx, const char *name,
                      const struct store_app *row); /* without the lock */
    void (*app)(void *ctx, const char *name, const struct store_app *row);
    void (*alloc)(void *ctx, const char *app, const char *device,
                  const struct store_alloc *row);
    void (*device)(void *ctx, const char *id, const struct store_device *row);
    void (*node)(void *ctx, const char *name, const struct store_node *row);
    void (*user)(void *ctx, const char *name, const struct store_user *row);
    void (*identity)(void *ctx, const char *name,
                     const struct store_identity *row);
    void (*limits)(void *ctx, const char *name, const struct store_limits *row);
    void (*event)(void *ctx, const struct store_event *e);
    void (*nodeinfo)(void *ctx, const char *node, const char *json,
                     const struct json_t *parsed);
    void (*agent)(void *ctx, const char *node, const char *json);
    void (*part)(void *ctx, const char *app, const char *node, bool running,
                 int64_t pid, uint64_t pid_start);
    void (*revision)(void *ctx, int64_t rev);
};
/* Follow until *stop (ACCEL_OK) or a failure that needs a restart of the
 * process (ACCEL_ESTORE_CORRUPT: the watched history was compacted past
 * this view, which then reloads; logged by the caller). Reconnects by
 * itself after a broken stream. */
enum accel_err store_follow(struct store *s, const struct store_follower *f,
                            volatile int *stop);

/* A cluster written before the bynode index (docs/cluster.md): write the
 * index key of every app bound to a card of a node that lacks it (*written:
 * how many). An API server's start, before store_follow; ACCEL_ENOTSUP on
 * a local store. Every commit writes the index by itself. */
enum accel_err store_index_fill(struct store *s, size_t *written);

#endif /* ACCEL_DAEMON_STORE_STORE_H */
