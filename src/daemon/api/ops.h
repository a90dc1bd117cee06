/* SPDX-License-Identifier: MIT */
/*
 * ops.h: the lifecycle operations of SPEC 2.7 (install, resume, stop,
 * remove from GPU, switch mode, uninstall, the legacy bind/unassign/bulk
 * moves, node enable) as domain functions. Each takes d->lock itself, runs
 * the pure rules, writes the whole change in one store transaction, and
 * only then changes memory. The HTTP layer only parses and serializes.
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
void ops_binding_release(struct op_binding *b);

void ops_install(struct accel_daemon *d, const struct auth_user *u,
                 json_t *manifest, const char *owner, const char *type,
                 const struct op_binding *b, struct op_result *res);
void ops_resume(struct accel_daemon *d, const struct auth_user *u,
                const char *name, const struct op_binding *b,
                struct op_result *res);
void ops_suspend(struct accel_daemon *d, const struct auth_user *u,
                 const char *name, struct op_result *res);
void ops_unbind(struct accel_daemon *d, const struct auth_user *u,
                const char *name, struct op_result *res);
void ops_uninstall(struct accel_daemon *d, const struct auth_user *u,
                   const char *name, struct op_result *res);
void ops_validate(struct accel_daemon *d, const struct auth_user *u,
                  const char *name, const struct op_binding *b,
                  struct op_result *res);
void ops_availability(struct accel_daemon *d, const struct auth_user *u,
                      const char *name, struct op_result *res);
void ops_switch(struct accel_daemon *d, const char *node, const char *device,
                const char *support, struct op_result *res);
/* Forget a cluster node whose agent is gone (SPEC 10); force: stop and
 * release the apps bound there too. */
void ops_node_remove(struct accel_daemon *d, const char *node, bool force,
                     struct op_result *res);
void ops_node_enable(struct accel_daemon *d, const char *node, bool enabled,
                     struct op_result *res);
/* PUT .../devices/{device}/time-slice: {quantumMs, idleReleaseMs,
 * revokeGraceMs, oversubscribedQuantumMs}, each optional. Takes d->lock. */
void ops_timeslice_set(struct accel_daemon *d, const char *node,
                       const char *device, const json_t *body,
                       struct op_result *res);
/* PUT .../devices/{device}/meter: {overQuotaAction: "report"|"stop",
 * tolerance: bytes}, each optional (node/meter.h). Takes d->lock. */
void ops_meter_set(struct accel_daemon *d, const char *node,
                   const char *device, const json_t *body,
                   struct op_result *res);
/* Legacy routes (SPEC 5.3); memory in MiB. */
void ops_legacy_bind(struct accel_daemon *d, const struct auth_user *u,
                     const char *id, const char *app, uint64_t mem_mib,
                     bool force, struct op_result *res);
void ops_legacy_unassign(struct accel_daemon *d, const struct auth_user *u,
                         const char *id, const char *app,
                         struct op_result *res);
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
void ops_limits_held(struct accel_daemon *d, const char *owner,
                     uint64_t *apps, uint64_t *bytes);
void ops_preflight(struct accel_daemon *d, const struct auth_user *u,
                   const json_t *demands, struct op_result *res);

#endif /* ACCEL_DAEMON_API_OPS_H */
