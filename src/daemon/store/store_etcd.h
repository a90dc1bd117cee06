/* SPDX-License-Identifier: MIT */
/*
 * store_etcd.h: the etcd backend of store.h (SPEC 10), private to store/.
 * store.c forwards each store_* call of a store opened with
 * store_open_etcd here; the meaning of every call is the one store.h
 * gives, and what differs is said in store_etcd.c's header comment.
 */
#ifndef ACCEL_DAEMON_STORE_STORE_ETCD_H
#define ACCEL_DAEMON_STORE_STORE_ETCD_H

#include <pthread.h>

#include "daemon/store/etcd.h"
#include "daemon/store/store.h"

struct estore;

enum accel_err estore_open(const struct store_etcd_opts *o,
                           struct estore **out, char **cause);
bool estore_created(const struct estore *s);
void estore_close(struct estore *s);
const char *estore_errmsg(const struct estore *s);
struct etcd *estore_client(struct estore *s);
const char *estore_prefix(const struct estore *s);

enum accel_err estore_load(struct estore *s, const struct store_loader *l,
                           char **cause);
enum accel_err estore_begin(struct estore *s);
enum accel_err estore_commit(struct estore *s);
void estore_rollback(struct estore *s);
enum accel_err estore_sync(struct estore *s);
int64_t estore_conflict_rev(const struct estore *s);
enum accel_err estore_commit_queued(struct estore *s, pthread_mutex_t *mu,
                                    int64_t *conflict_rev);
void estore_queued_settled(struct estore *s);
void estore_queue_gate(struct estore *s, pthread_mutex_t *mu);
enum accel_err estore_wait_rev(struct estore *s, int64_t rev, int ms);
int64_t estore_view_rev(struct estore *s);
enum accel_err estore_view_sync(struct estore *s, int64_t since, int ms,
                                bool *moved);

enum accel_err estore_app_put(struct estore *s, const struct store_app *a);
enum accel_err estore_app_delete(struct estore *s, const char *name);
enum accel_err estore_alloc_put(struct estore *s, const struct store_alloc *a);
enum accel_err estore_alloc_delete_app(struct estore *s, const char *app);
enum accel_err estore_alloc_delete(struct estore *s, const char *app,
                                   const char *device);
enum accel_err estore_device_put(struct estore *s,
                                 const struct store_device *d);
enum accel_err estore_node_put(struct estore *s, const struct store_node *n);
enum accel_err estore_node_delete(struct estore *s, const char *name);
enum accel_err estore_user_put(struct estore *s, const struct store_user *u);
enum accel_err estore_user_delete(struct estore *s, const char *name);
enum accel_err estore_identity_retire(struct estore *s, const char *name,
                                      const struct store_identity *retired);
enum accel_err estore_identity_put(struct estore *s,
                                   const struct store_identity *id);
enum accel_err estore_limits_put(struct estore *s,
                                 const struct store_limits *l);
enum accel_err estore_limits_delete(struct estore *s, const char *name);
enum accel_err estore_member_put(struct estore *s, const char *kind,
                                 const char *node, const char *json,
                                 int64_t lease);
enum accel_err estore_member_delete(struct estore *s, const char *kind,
                                    const char *node);
enum accel_err estore_part_put(struct estore *s, const char *app,
                               const char *node, int64_t pid,
                               uint64_t pid_start);
enum accel_err estore_part_delete(struct estore *s, const char *app,
                                  const char *node);
enum accel_err estore_event_append(struct estore *s,
                                   const struct store_event *e,
                                   int64_t keep_max);
enum accel_err estore_events_query(struct estore *s,
                                   const struct store_event_filter *f,
                                   enum accel_err (*cb)(void *ctx,
                                                        const struct store_event *e),
                                   void *ctx);
enum accel_err estore_follow(struct estore *s, const struct store_follower *f,
                             volatile int *stop);

#endif /* ACCEL_DAEMON_STORE_STORE_ETCD_H */
