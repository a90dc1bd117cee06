/* SPDX-License-Identifier: MIT */
/*
 * ops.h: the lifecycle operations of SPEC 2.7 (install, resume, stop,
 * remove from GPU, switch mode, uninstall, the legacy bind/unassign/bulk
 * moves, node enable) as domain functions. Each takes d->lock itself, runs
 * the pure rules, writes the whole change in one store transaction, and
 * only then changes memory. The HTTP layer only parses and serializes.
 */
#ifndef ACCEL_DAEMON_OPS_H
#define ACCEL_DAEMON_OPS_H

#include <jansson.h>

#include "daemon/daemon.h"

/* What an operation answers. */
struct op_result {
    int status;             /* HTTP status */
    const char *code;       /* machine code for errors, NULL on success */
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
void ops_node_enable(struct accel_daemon *d, const char *node, bool enabled,
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
void ops_preflight(struct accel_daemon *d, const struct auth_user *u,
                   const json_t *demands, struct op_result *res);

/*
 * The supervisor saw every process of running app a gone (its cgroup is
 * empty): `stopped` when the leader exited 0 and nothing went wrong, else
 * `failed` with why ("exited with status 3", "killed: out of memory
 * (limitedMemory 64Mi)"; oom forces failed). Its rows are released, or it
 * waits `releasing` while NVML still lists linger processes of it.
 * d->lock held.
 */
void ops_app_exited(struct accel_daemon *d, struct app *a, int status,
                    const char *why, bool oom, uint32_t linger);

/*
 * A stop handed to the supervisor (runtime_stop_begin) is over: every
 * process is gone, or linger > 0 processes still hold the GPU (or survived
 * the kill). Releases a to a->stop.to with a->stop.reason in one
 * transaction, or deletes it for an uninstall, or leaves it `releasing`
 * for the reconciler when linger > 0. d->lock held; a may be freed.
 */
void ops_stop_finished(struct accel_daemon *d, struct app *a, int status,
                       uint32_t linger);

/*
 * Processes of a still hold its GPU after a stop (SPEC 2.7, 8.3): keep its
 * rows, show it `releasing` (reason kept), and remember the state `to` it
 * gets once the reconciler sees them gone; they are killed after the app's
 * stop timeout. One transaction. d->lock held.
 */
enum accel_err ops_commit_releasing(struct accel_daemon *d, struct app *a,
                                    enum app_state to, const char *reason);

/*
 * The reconciler saw no process of the `releasing` app a any more: release
 * its rows and give it its final state, or delete it when the release was
 * an uninstall (a is freed then). d->lock held.
 */
enum accel_err ops_finish_release(struct accel_daemon *d, struct app *a);

#endif /* ACCEL_DAEMON_OPS_H */
