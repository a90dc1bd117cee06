/* SPDX-License-Identifier: MIT */
/*
 * cluster.h: the node agent's part in a cluster (SPEC 10). With --etcd,
 * each acceld registers its node and devices (nodeinfo/<node>), holds a
 * lease with its live key (agents/<node>), and follows every change the
 * other nodes make (store_follow) into its in-memory view, so that any
 * node answers for the whole cluster. Apps bound to this node's devices
 * are started and stopped here when another node's API asks for it.
 */
#ifndef ACCEL_DAEMON_NODE_CLUSTER_CLUSTER_H
#define ACCEL_DAEMON_NODE_CLUSTER_CLUSTER_H

#include "daemon/state.h"
#include "daemon/store/store.h"

/* The loader callbacks of a cluster's extra keys (set into l). */
void cluster_loader(struct store_loader *l);

/* After the state is loaded: register this node, take the lease, start
 * the keep-alive and the watch threads. *cause on failure. */
enum accel_err cluster_start(struct accel_daemon *d, char **cause);
/* Stop the threads and give the lease back (the node shows unreachable
 * at once; its apps keep running). Accepts a daemon without a cluster. */
void cluster_stop(struct accel_daemon *d);

/* How long ago (ms) etcd's quorum last renewed this node's lease, when
 * that is a whole lease TTL or more: the view it answers reads from may
 * miss what the other nodes changed since (they may count this node gone).
 * 0 while the lease holds, and without a cluster. Any thread. */
int64_t cluster_stale_ms(struct accel_daemon *d);

/* Apply what a node returned to this view after an app's rows changed
 * hands: start an app bound here that another node resumed, begin the
 * stop of one another node stopped. Lock held. */
void cluster_act(struct accel_daemon *d, struct app *a);

/* The node's registration as JSON text (its devices), for nodeinfo. */
char *cluster_nodeinfo(struct accel_daemon *d);

#endif /* ACCEL_DAEMON_NODE_CLUSTER_CLUSTER_H */
