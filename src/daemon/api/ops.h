/* SPDX-License-Identifier: MIT */
/*
 * ops.h: the lifecycle operations of SPEC 2.7 (install, resume, stop,
 * remove from GPU, switch mode, uninstall, the legacy bind/unassign/bulk
 * moves, node enable) as domain functions. Each takes d->lock itself, runs
 * the pure rules, writes the whole change in one store transaction, and
 * only then changes memory. The HTTP layer only parses and serializes.
 * Every operation answers through res (struct op_result): the caller
 * passes a zeroed one and releases it with op_result_release; u is the
 * authenticated caller (its name and whether it is an admin), and an app
 * of another owner is "not installed" to a member (404) unless it is
 * shared. Any thread; the caller holds no lock.
 */
#ifndef ACCEL_DAEMON_API_OPS_H
#define ACCEL_DAEMON_API_OPS_H

#include <jansson.h>

#include "daemon/state.h"

/* What an operation answers. */
struct op_result {
    int status;             /* HTTP status */
    const char *code;       /* machine code for errors, NULL on success */
    char code_buf[2 * ACCEL_ID_MAX + 64]; /* a code made for this answer
                                             ("<check>:<subject>") */
    char *message;          /* sentence for errors (allocated) */
    const char *check_type; /* 422 check type, or NULL */
    json_t *data;           /* success data, or the 422 payload */
    bool raw;               /* data is sent without the envelope */
};

/* Free r's message and data; r is zeroed (ready for another operation). */
void op_result_release(struct op_result *r);

/* A parsed computeBinding list. */
struct op_binding {
    size_t n;
    struct adm_sel sel[ADM_MAX_SELECTION];
    char *strs[2 * ADM_MAX_SELECTION]; /* owned strings */
};

/*
 * Parse a computeBinding JSON array; field is the path used in messages.
 * On failure fills *res with a 400 and returns false.
 */
bool ops_parse_binding(const json_t *arr, const char *field,
                       struct op_binding *b, struct op_result *res);
/* Free b's strings; b is zeroed. */
void ops_binding_release(struct op_binding *b);

/*
 * Install an app from manifest (SPEC 2.7; borrowed), owned by owner (NULL:
 * u; another user or "shared" only for an admin), of accelerator type
 * type (NULL: the one the manifest allows, or the only installable one),
 * bound to b (NULL or empty: placed automatically, or installed unbound
 * when nothing fits). The runner's look at this machine comes first, off
 * the lock (launch_vet); a bound app that runs here starts through
 * launch_app (a pull answers at once: `pulling`). 200 with the app; 400,
 * 403, 409, 422 (a check), 503 or 507 with why.
 */
void ops_install(struct accel_daemon *d, const struct auth_user *u,
                 json_t *manifest, const char *owner, const char *type,
                 const struct op_binding *b, struct op_result *res);
/*
 * Start a stopped app again (SPEC 2.7) on b (NULL or empty: placed
 * automatically); an app already running is a 409. Bound, it starts
 * through launch_app (here) or the node agent that runs it. 200 with the
 * app; 404, 409, 422 (computeBindingRequired when nothing fits) otherwise.
 */
void ops_resume(struct accel_daemon *d, const struct auth_user *u,
                const char *name, const struct op_binding *b,
                struct op_result *res);
/* Stop an app and release its GPUs (SPEC 2.7, 5.6): answered at once, the
 * app `stopping` while its processes end (the supervisor or the agent
 * that runs it finishes the stop), else released now. 200 with the app. */
void ops_suspend(struct accel_daemon *d, const struct auth_user *u,
                 const char *name, struct op_result *res);
/* ops_suspend with the reason "removed-from-gpu" (remove from GPU). */
void ops_unbind(struct accel_daemon *d, const struct auth_user *u,
                const char *name, struct op_result *res);
/* Uninstall an app (SPEC 2.7): one with processes (here, on an agent,
 * across nodes) is stopped first and deleted once they are gone
 * (`stopping`, reason "uninstalling"); one whose GPU processes still
 * linger is `releasing` until they are; else deleted now
 * (lifecycle_commit_uninstall). 200 with {name, state}. */
void ops_uninstall(struct accel_daemon *d, const struct auth_user *u,
                   const char *name, struct op_result *res);
/* app-service's validateComputeBinding of b for app name: {status:
 * "valid", availability, validation, allocations}, "not-required" for a
 * CPU app with no selection, else a 422 check. Changes nothing. */
void ops_validate(struct accel_daemon *d, const struct auth_user *u,
                  const char *name, const struct op_binding *b,
                  struct op_result *res);
/* Where app name's selected type could be bound now, as u may see it
 * (view_availability). Changes nothing. */
void ops_availability(struct accel_daemon *d, const struct auth_user *u,
                      const char *name, struct op_result *res);
/* Switch device of node to support type support (Exclusive, MemorySlice,
 * TimeSlice; SPEC 2.8): the apps bound to it are stopped and released in
 * the same transaction (refused while one cannot be stopped now, or its
 * node cannot be reached). 200 with what was stopped; 400, 404, 409
 * otherwise. The route is an admin's. */
void ops_switch(struct accel_daemon *d, const char *node, const char *device,
                const char *support, struct op_result *res);
/* Forget a cluster node whose agent is gone (SPEC 10); force: stop and
 * release the apps bound there too. */
void ops_node_remove(struct accel_daemon *d, const char *node, bool force,
                     struct op_result *res);
/* Enable or disable node's accelerators for new bindings (the apps bound
 * there stay). 200; 404 for an unknown node. The route is an admin's. */
void ops_node_enable(struct accel_daemon *d, const char *node, bool enabled,
                     struct op_result *res);
/* PUT .../devices/{device}/time-slice: {quantumMs, idleReleaseMs or
 * idleReleaseUs, revokeGraceMs, oversubscribedQuantumMs, minTurnUs,
 * pagingPercent}, each optional. Takes d->lock. */
void ops_timeslice_set(struct accel_daemon *d, const char *node,
                       const char *device, const json_t *body,
                       struct op_result *res);
/* PUT .../devices/{device}/meter: {overQuotaAction: "report"|"stop",
 * tolerance: bytes}, each optional (node/meter.h). Takes d->lock. */
void ops_meter_set(struct accel_daemon *d, const char *node,
                   const char *device, const json_t *body,
                   struct op_result *res);
/* PUT /api/apps/{name}/compute-resources/bindings/{device} {memory}
 * (SPEC 4.4, ops_quota.c): the quota of app name on a Memory-slicing
 * device it is bound to, live. A raise passes the rules of section 2
 * (409 with the code and the numbers otherwise) and the owner's limits
 * (403); a cut lands at once, in the store, the shim's ledger and the
 * kernel's or driver's limit. 200 with the app; 400 (the body), 404 (app,
 * device or binding), 409 (busy, not Memory slicing, refused). */
void ops_quota_set(struct accel_daemon *d, const struct auth_user *u,
                   const char *name, const char *device, const json_t *body,
                   struct op_result *res);
/* PUT .../devices/{device}/elastic: {overcommit: 1..4 (1 = off),
 * reclaimWaitMs: 0..600000}, each optional (SPEC 4.4). overcommit above 1
 * only on a MemorySlice device with VRAM (400 otherwise); a ratio below
 * what the quotas bound there already sum to is a 409 naming the sum.
 * Takes d->lock. */
void ops_elastic_set(struct accel_daemon *d, const char *node,
                     const char *device, const json_t *body,
                     struct op_result *res);
/* Legacy routes (SPEC 5.3); memory in MiB. Bind app to GPU id with
 * mem_mib (required on a Memory-slicing GPU: 400 memory-required when 0),
 * in place of its rows (a running app restarts on it through launch_app);
 * an exclusive GPU another app holds is a 409 unless force (then that app
 * is stopped first, if u may act on it). */
void ops_legacy_bind(struct accel_daemon *d, const struct auth_user *u,
                     const char *id, const char *app, uint64_t mem_mib,
                     bool force, struct op_result *res);
/* Remove app from GPU id: as ops_unbind (every GPU of the app is
 * released, SPEC 2.7); 404 when the app is not bound to id. */
void ops_legacy_unassign(struct accel_daemon *d, const struct auth_user *u,
                         const char *id, const char *app,
                         struct op_result *res);
/* The legacy bulk move: app keeps its rows but those of unassign
 * ([{id}], may be NULL) and gets those of assign ([{id, memory}]), in one
 * bind (ops_legacy_bind's rules). 400 for lists of another shape. */
void ops_bulk(struct accel_daemon *d, const struct auth_user *u,
              const char *app, const json_t *unassign, const json_t *assign,
              struct op_result *res);
/* true when the app is in a transition: being installed, or stopping,
 * resuming, uninstalling or releasing. Nothing else may act on it then. */
bool ops_in_transition(const struct app *a);
/* What an app in a transition is doing: "being installed", or its state. */
const char *ops_transition_name(const struct app *a);
/* Per-member limits (ops_limits.c, d->lock held): the apps u may hold
 * (its maxApps, or the default), and the apps owner holds with the GPU
 * memory bound to them (a whole-card binding counts the card). */
int64_t ops_limits_max_apps(const struct user_rec *u);
/* ...and the apps owner holds and the GPU memory bound to them (bytes),
 * into *apps and *bytes. */
void ops_limits_held(struct accel_daemon *d, const char *owner,
                     uint64_t *apps, uint64_t *bytes);
/* POST /compute-resources/preflight: would these demands (1 to 64, each
 * a requirement and an owner, u by default) fit the cluster now,
 * together, within the members' limits? 200 with the answer per demand;
 * 400 for a malformed list. Changes nothing. */
void ops_preflight(struct accel_daemon *d, const struct auth_user *u,
                   const json_t *demands, struct op_result *res);
/* acceld's settings (ops_settings.c): GET /api/settings' object
 * {memberImages} (lock held; the caller frees it) and PUT's: body's known
 * fields checked (400 naming the field; nothing changes), kept in
 * <data-dir>/settings.json and in force for the next install; 200 with
 * the settings. */
json_t *ops_settings_json(struct accel_daemon *d);
void ops_settings_set(struct accel_daemon *d, const json_t *body,
                      struct op_result *res);
/* SPEC 8.2.1 (lock held): may a member's app of owner run found, the
 * local image its run.image ref names (image_pin's)? Yes when acceld's
 * pull brought that image ID for one of owner's apps, or one of the
 * image's names is in memberImages; else false with res a 403 naming
 * run.image and the rule. Admins' installs do not ask. */
bool ops_settings_image_allowed(struct accel_daemon *d, const char *owner,
                                const char *ref, const json_t *found,
                                struct op_result *res);

#endif /* ACCEL_DAEMON_API_OPS_H */
