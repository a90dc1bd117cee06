/* SPDX-License-Identifier: MIT */
/*
 * monitor.h: liveness and housekeeping of a cluster, done by a few elected
 * agents instead of by every one (SPEC 10; docs/cluster.md, "Liveness").
 *
 * Every agent writes its beat each keep-alive round to a key outside the
 * prefix the views watch (<prefix minus its slash>~live/beat/<node>), so a
 * beat costs etcd one write and no view anything. MONITOR_SLOTS agents
 * hold a monitor slot (~live/monitor/<k>, on their lease): they alone
 * watch the beats, and a monitor that has seen no beat of a node for a
 * lease TTL (counted to its own beat's return through the same watch, so a
 * lagging watch marks no one) marks that node's live key silent (the key
 * rewritten on the node's own lease with "silent" added, guarded by its
 * value). Every view shows a node reachable while its live key exists and
 * is not marked; the node, alive again, writes its key back unmarked.
 * The holder of slot 0 is the housekeeper: it prunes the cluster's events
 * and compacts etcd's history (store_set_housekeeper, monitor_compact).
 *
 * Threads: monitor_round and monitor_check run on the cluster keeper,
 * monitor_agent on the cluster watcher under d->lock; the beats' watch has
 * a thread of its own. The module's table has its own mutex, never held
 * while taking d->lock or waiting on etcd.
 */
#ifndef ACCEL_DAEMON_NODE_CLUSTER_MONITOR_H
#define ACCEL_DAEMON_NODE_CLUSTER_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

#include "accel/accel.h"
#include "daemon/store/store.h"

#define MONITOR_SLOTS 2 /* agents that watch the beats (two: one may hang) */

struct monitor;

struct monitor_opts {
    struct store *store;     /* the cluster store (its etcd client, prefix) */
    const char *node;        /* this node's name (copied) */
    int ttl_s;               /* the lease TTL: a beat older is silence */
    int compact_retention_s; /* history kept by compaction; 0: none */
    bool no_slot;            /* an agent (--role agent): it beats, but
                                never takes a monitor slot (a partial view
                                must not keep the cluster's house) */
};

/* Set up (nothing sent) and start the beats' watch thread. NULL when the
 * thread cannot start. Free with monitor_free. */
struct monitor *monitor_new(const struct monitor_opts *o);
/* Stop the thread and free; accepts NULL. */
void monitor_free(struct monitor *m);

/*
 * The keeper, once etcd renewed lease: write this node's beat; write its
 * live key again (live, its unmarked text) when a monitor marked it; take
 * a free monitor slot, or notice this node lost its own; as housekeeper,
 * compact when due. Each write is one of its own (store.h, "Threads").
 */
void monitor_round(struct monitor *m, int64_t lease, const char *live);

/* The keeper, every tick: as a monitor, mark the nodes silent for a TTL.
 * renewed_ns: when etcd last renewed this node's lease (util_now_ns). */
void monitor_check(struct monitor *m, int64_t renewed_ns);

/* The watcher (d->lock held): node's live key is now text (NULL: gone).
 * Returns whether the node is live (the key there and not marked silent). */
bool monitor_agent(struct monitor *m, const char *node, const char *text);

/* Whether a live key's text is marked silent (pure; any thread). */
bool monitor_marked(const char *text);

/* Which slot this node holds, or -1 (any thread). */
int monitor_slot(struct monitor *m);

#endif /* ACCEL_DAEMON_NODE_CLUSTER_MONITOR_H */
