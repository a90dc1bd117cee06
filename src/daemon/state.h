/* SPDX-License-Identifier: MIT */
/*
 * state.h: the in-memory model of acceld and its write-through to the
 * store. Callers hold d->lock. The pattern of every change (SPEC 9):
 * state_tx_begin, state_save_* of the rows as they will be, state_tx_commit;
 * only when the commit succeeded is memory changed. A failed commit leaves
 * memory and disk as they were.
 */
#ifndef ACCEL_DAEMON_STATE_H
#define ACCEL_DAEMON_STATE_H

#include <jansson.h>

#include "daemon/daemon.h"

#define STATE_EVENTS_KEEP 20000 /* events retained in the store */

struct app *state_app_find(struct accel_daemon *d, const char *name);
/* Takes ownership of a. */
void state_app_add(struct accel_daemon *d, struct app *a);
/* Removes and frees a (its rows must be released first). */
void state_app_remove(struct accel_daemon *d, struct app *a);
void state_app_free(struct app *a);

/* Index of a node / device, or -1. */
int state_node_find(struct accel_daemon *d, const char *name);
int state_dev_find(struct accel_daemon *d, const char *id);

/* The requirement of the app's selected type, or NULL. */
const struct adm_req *state_app_req(const struct app *a);
#define state_app_req_const state_app_req

/* Store writes (inside a transaction). */
enum accel_err state_tx_begin(struct accel_daemon *d);
enum accel_err state_tx_commit(struct accel_daemon *d);
void state_tx_rollback(struct accel_daemon *d);
/*
 * Block until every commit written so far is durable (group commit: one
 * thread fsyncs for all that wait). Call WITHOUT d->lock, before answering
 * a request that may have changed anything. ACCEL_OK or ACCEL_EIO.
 */
enum accel_err state_durable_wait(struct accel_daemon *d);
/* Write app a as it will be with this state and reason (NULL = none). */
enum accel_err state_save_app(struct accel_daemon *d, const struct app *a,
                              enum app_state st, const char *reason);
/* Replace the app's allocation rows in the store with rows[n]. */
enum accel_err state_save_rows(struct accel_daemon *d, const struct app *a,
                               const struct adm_row *rows, size_t n);
enum accel_err state_save_device(struct accel_daemon *d, int dev,
                                 enum accel_support st);
/* The acting user recorded in the events this thread appends (data "by");
 * NULL or "" = none. Set by http.c around each request. */
void state_set_actor(const char *user);
/* Append an event (steals data, may be NULL). Inside or outside a tx. */
void state_event(struct accel_daemon *d, const char *kind, const char *app,
                 const char *node, const char *device, json_t *data,
                 const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* In-memory changes after a successful commit. */
void state_set_state(struct app *a, enum app_state st,
                     const char *reason);
/* Replace the app's rows (releasing the old ones from the snapshot). */
void state_set_rows(struct accel_daemon *d, struct app *a,
                    const struct adm_row *rows, size_t n);

#endif /* ACCEL_DAEMON_STATE_H */
