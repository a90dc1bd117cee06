/* SPDX-License-Identifier: MIT */
/*
 * view.h: the JSON shapes of docs/api.md built from the in-memory state.
 * Callers hold d->lock. Every function returns a new reference.
 */
#ifndef ACCEL_DAEMON_API_VIEW_H
#define ACCEL_DAEMON_API_VIEW_H

#include <jansson.h>

#include "daemon/state.h"

json_t *view_allocation(struct accel_daemon *d, const struct app *a,
                        const struct adm_row *row, bool with_spec);
/*
 * Functions that take a viewer u show what u may see (SPEC 3): NULL or an
 * admin sees everything; a member sees another owner's (not shared) app's
 * binding only as {"appName":"","owner":"","hidden":true, ...its numbers}.
 * view_hides says whether u sees a only so.
 */
bool view_hides(const struct auth_user *u, const struct app *a);
/* The device's elastic memory settings as the API shows them (SPEC 4.4;
 * d->lock held): {overcommit, reclaimWaitMs, quotaCapacity, allocated,
 * inForce}. */
json_t *view_elastic_json(struct accel_daemon *d, int dev);
json_t *view_device(struct accel_daemon *d, int dev,
                    const struct auth_user *u);
json_t *view_node(struct accel_daemon *d, int node,
                  const struct auth_user *u);
/*
 * The node list as JSON, between head and tail (an envelope), as a stream
 * of parts the HTTP layer reads out after the lock is released. A
 * device's text is cached until view_touch marks it stale, except on the
 * local node, whose devices carry live NVML, ledger and broker figures and
 * are rebuilt every time (there are only a few). Every change to what a
 * cached device shows (its bindings, mode, node) must call view_touch.
 */
struct view_stream;
struct view_stream *view_nodes_stream(struct accel_daemon *d,
                                      const struct auth_user *u,
                                      const char *head, const char *tail);
/* Total bytes; read sequentially (no lock needed); free (accepts NULL). */
size_t view_stream_size(const struct view_stream *s);
size_t view_stream_read(struct view_stream *s, char *buf, size_t max);
void view_stream_free(struct view_stream *s);
/* Mark a device's cached text stale; dev -1 = every device. */
void view_touch(struct accel_daemon *d, int dev);
/* App a's JSON (docs/api.md `App`) as viewer u sees it: in its elastic
 * memory's lent and reclaimed, an app u may not see is "" (NULL: every
 * name). d->lock held; new reference. */
json_t *view_app(struct accel_daemon *d, const struct app *a,
                 const struct auth_user *u);
json_t *view_availability(struct accel_daemon *d, const struct adm_req *r,
                          const struct auth_user *u);
json_t *view_validation(struct accel_daemon *d, const struct adm_verdict *v);
/* A node-pressure detail: {nodeName, dimensions:[{resource, capacity, used,
 * required, available, pressured}]} (cpu in millicores, bytes otherwise). */
json_t *view_pressure(struct accel_daemon *d, const struct adm_pressure *p);
/* The sentence for a validation code (SPEC 7). */
const char *view_code_sentence(enum adm_code c);
/* Legacy /api/gpu/list entry (MiB). */
json_t *view_legacy_gpu(struct accel_daemon *d, int dev,
                        const struct auth_user *u);

#endif /* ACCEL_DAEMON_API_VIEW_H */
