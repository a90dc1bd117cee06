/* SPDX-License-Identifier: MIT */
/*
 * store_int.h: what the backends of store.h implement, private to store/.
 *
 * A store is a backend's own struct whose first member is struct store,
 * the way an sqlite3_file heads every VFS's file: store.c sees only the
 * table of operations, and each backend turns the struct store * it is
 * handed back into its own struct (a pointer to a struct is a pointer to
 * its first member). store.c holds the public functions of store.h: what
 * is the same for every backend, then s->ops->x(...). An operation a
 * backend does not have is NULL and store.c gives its answer in the one
 * function that calls it (store.h says what that answer is: "SQLite:
 * ACCEL_OK at once" and the like), so a backend never writes a stub.
 *
 * Backends: store_sqlite.c (store_open) and store_etcd.c
 * (store_open_etcd). Neither includes the other; both include only this.
 * Every operation means what its store.h function says.
 */
#ifndef ACCEL_DAEMON_STORE_STORE_INT_H
#define ACCEL_DAEMON_STORE_STORE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/store/store.h"

struct store_ops;

/*
 * Threads (store.h, "Threads"). A transaction belongs to the thread that
 * began it: store.c records that thread here, and hands a backend a write
 * of the transaction only when it comes from its owner. An event or member
 * write from any other thread is one of its own: on a backend whose own
 * writes touch nothing of the transaction (own_concurrent: etcd), at once;
 * on another (SQLite: one connection), once the transaction is over, with
 * the transaction slot taken for its own commit. On a backend that is not
 * own_concurrent, store.c also runs every operation (but sync) under
 * callmu, so a write of its own from another thread never meets a call of
 * the lock holder's on the same connection.
 */
struct store {
    const struct store_ops *ops; /* the backend's table, never NULL */
    pthread_mutex_t txmu;        /* guards the slot below */
    pthread_cond_t txfree;       /* the slot was given up */
    bool tx_held;                /* a transaction (or an own write) is on */
    pthread_t tx_owner;          /* its thread */
    int wait_ms;                 /* how long to wait for the slot */
    pthread_mutex_t callmu;      /* !own_concurrent: one call at a time */
};

/* Set up the base of a store a backend has just built (ops set); store.c
 * calls it once the backend's constructor returns. */
void store_base_init(struct store *s);
/* The backend's sentence for the failure just returned, for store_errmsg:
 * kept per thread (the thread that made the call reads it), so threads
 * never write each other's message. */
void store_set_errmsg(const struct store *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef enum accel_err (*store_event_cb)(void *ctx,
                                         const struct store_event *e);

struct store_ops {
    bool cluster; /* store_is_cluster: shared by several acceld */
    /* event_append and member writes with own set touch nothing a
     * transaction or another call uses: they may run beside any call */
    bool own_concurrent;

    /* ---- every backend */
    void (*close)(struct store *s);
    bool (*created)(const struct store *s);
    enum accel_err (*load)(struct store *s, const struct store_loader *l,
                           char **cause);
    enum accel_err (*begin)(struct store *s);
    enum accel_err (*commit)(struct store *s);
    void (*rollback)(struct store *s);
    enum accel_err (*sync)(struct store *s);
    /* ACCEL_OK inside a transaction that no failure has ended, else
     * ACCEL_EINVAL (why kept for errmsg), nothing changed */
    enum accel_err (*writable)(struct store *s);
    /* A failure ended the open transaction, and neither begin nor
     * rollback has come since (an event then belongs to that one). */
    bool (*failed)(const struct store *s);
    /* A call store.c refuses (a required field missing): the open
     * transaction, if any, fails as a whole (store.h); why is kept for
     * errmsg; returns err. */
    enum accel_err (*fail)(struct store *s, enum accel_err err,
                           const char *why);

    /* The writes below are called once store.c's checks passed: inside a
     * transaction, every required field set. */

    enum accel_err (*app_put)(struct store *s, const struct store_app *a);
    enum accel_err (*app_delete)(struct store *s, const char *name);
    enum accel_err (*alloc_put)(struct store *s, const struct store_alloc *a);
    enum accel_err (*alloc_delete_app)(struct store *s, const char *app);
    enum accel_err (*alloc_delete)(struct store *s, const char *app,
                                   const char *device);
    enum accel_err (*device_put)(struct store *s, const struct store_device *d);
    enum accel_err (*node_put)(struct store *s, const struct store_node *n);
    enum accel_err (*node_delete)(struct store *s, const char *name);
    enum accel_err (*user_put)(struct store *s, const struct store_user *u);
    enum accel_err (*user_delete)(struct store *s, const char *name);
    enum accel_err (*identity_put)(struct store *s,
                                   const struct store_identity *id);
    enum accel_err (*identity_retire)(struct store *s, const char *name,
                                      const struct store_identity *retired);
    enum accel_err (*limits_put)(struct store *s, const struct store_limits *l);
    enum accel_err (*limits_delete)(struct store *s, const char *name);
    /* own: a transaction of its own (store.c decided: the caller is not
     * the open transaction's thread, or none is open); else part of the
     * caller's open transaction */
    enum accel_err (*event_append)(struct store *s, const struct store_event *e,
                                   int64_t keep_max, bool own,
                                   int64_t *out_id);
    enum accel_err (*events_query)(struct store *s,
                                   const struct store_event_filter *f,
                                   store_event_cb cb, void *ctx);

    /* ---- may be NULL (store.c answers as store.h says) */
    int64_t (*created_ms)(struct store *s);            /* NULL: 0 */
    void (*set_busy_timeout)(struct store *s, int ms); /* NULL: nothing */
    enum accel_err (*set_group_commit)(struct store *s, bool on); /* OK */

    /* ---- cluster stores only: NULL for a local one */
    struct etcd *(*client)(struct store *s);        /* NULL: NULL */
    const char *(*prefix)(const struct store *s);   /* NULL: "/" */
    void (*set_housekeeper)(struct store *s, bool on); /* NULL: nothing */
    int64_t (*conflict_rev)(const struct store *s); /* NULL: 0 */
    /* store_commit_queued in two steps: queue takes the transaction
     * over (mu held; afterwards the backend holds nothing of it, so store.c
     * gives the slot up), await sends and waits with mu released meanwhile
     * (ticket: what queue returned). NULL: commit. */
    enum accel_err (*queue)(struct store *s, void **ticket);
    enum accel_err (*await)(struct store *s, void *ticket, pthread_mutex_t *mu,
                            int64_t *conflict_rev);
    void (*queued_settled)(struct store *s);                /* NULL: nothing */
    void (*queue_gate)(struct store *s, pthread_mutex_t *mu); /* nothing */
    enum accel_err (*wait_rev)(struct store *s, int64_t rev, int ms); /* OK */
    int64_t (*view_rev)(struct store *s); /* NULL: 0 */
    enum accel_err (*view_sync)(struct store *s, int64_t since, int ms,
                                bool *moved); /* OK, not moved */
    /* NULL: ACCEL_ENOTSUP, for the four below */
    /* json NULL: delete; own as for event_append */
    enum accel_err (*member_write)(struct store *s, const char *kind,
                                   const char *node, const char *json,
                                   int64_t lease, bool own);
    enum accel_err (*part_put)(struct store *s, const char *app,
                               const char *node, int64_t pid,
                               uint64_t pid_start);
    enum accel_err (*part_delete)(struct store *s, const char *app,
                                  const char *node);
    enum accel_err (*follow)(struct store *s, const struct store_follower *f,
                             volatile int *stop);
    enum accel_err (*index_fill)(struct store *s, size_t *written);
};

/*
 * The rows (SQLite) or keys (etcd) a load found undecodable: both
 * backends refuse to start naming them, or with repair drop them and say
 * so in a "store.repair" event, in the same words.
 */
struct store_bad {
    const char *table; /* the row's table, or NULL: key is an etcd key */
    char *key;         /* the row's key as shown in messages */
    char *why;
};
struct store_bads {
    struct store_bad *v;
    size_t n;
};
/* Append one; takes key and why. */
void store_bads_add(struct store_bads *b, const char *table, char *key,
                    char *why);
bool store_bads_has(const struct store_bads *b, const char *table,
                    const char *key);
/* "table apps, row "x": why; key /accel/y: why; ... and N more" (at most
 * 20 named), for messages; caller frees. */
char *store_bads_list(const struct store_bads *b);
/* The repair event's data, {"dropped": [{table, key, reason}]} (no table
 * for a key); caller frees. */
char *store_bads_json(const struct store_bads *b);
void store_bads_free(struct store_bads *b);

/*
 * The kinds of row a loader takes, one callback each (store_loader). Both
 * backends decode a row into its struct and hand it over by kind, through
 * the one function that knows which callback takes which struct.
 */
enum store_row {
    STORE_ROW_APP,
    STORE_ROW_ALLOC,
    STORE_ROW_DEVICE,
    STORE_ROW_NODE,
    STORE_ROW_USER,
    STORE_ROW_IDENTITY,
    STORE_ROW_LIMITS,
};
/* Hand row (a struct store_<kind>) to l's callback for kind: what it
 * answers, or ACCEL_OK when l has none (the row is taken). */
enum accel_err store_loader_give(const struct store_loader *l,
                                 enum store_row kind, const void *row,
                                 char **why);

/* The backends' constructors: *out (its ops set) only on success. */
enum accel_err store_sqlite_open(const char *path, struct store **out,
                                 char **cause);
enum accel_err store_etcd_open(const struct store_etcd_opts *o,
                               struct store **out, char **cause);

#endif /* ACCEL_DAEMON_STORE_STORE_INT_H */
