/* SPDX-License-Identifier: MIT */
/*
 * ops_int.h: helpers shared by the ops_*.c files only (d->lock held).
 */
#ifndef ACCEL_DAEMON_API_OPS_INT_H
#define ACCEL_DAEMON_API_OPS_INT_H

#include "daemon/api/ops.h"

void ops_res_error(struct op_result *res, int status, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void ops_res_ok(struct op_result *res, int status, json_t *data);
void ops_res_check(struct op_result *res, const char *type, json_t *data);
void ops_res_store_failed(struct op_result *res, enum accel_err rc);
/* The app if it exists and u may see and act on it; else res is set. */
struct app *ops_find_app(struct accel_daemon *d, const struct auth_user *u,
                         const char *name, struct op_result *res);
/* true (and res set to 409) when the app is in a transition. */
bool ops_busy(struct app *a, struct op_result *res);
int ops_pick_req(struct accel_daemon *d, const struct app *a,
                 const struct op_binding *b);
enum accel_err ops_commit_bind(struct accel_daemon *d, struct app *a, int sel,
                               const struct adm_row *rows, size_t n,
                               enum app_state st, const char *reason);
struct app *ops_stop_processes(struct accel_daemon *d, struct app *a);
/* Validate a selection for a as if a's own rows were released: its current
 * binding does not count against it. Same contract as adm_validate. */
bool ops_validate_own(struct accel_daemon *d, const struct app *a,
                      const struct adm_req *r, const struct adm_sel *sel,
                      size_t n, struct adm_verdict *v, struct adm_row *rows);
int ops_select_rows(struct accel_daemon *d, const struct auth_user *u,
                    struct app *a,
                    const struct adm_req *r, const struct op_binding *b,
                    struct adm_row *rows, struct op_result *res);

/* true (and res set to 409 node-unreachable, naming what to do again
 * (retry) once it is back) when dev's node is another one that does not
 * answer: the apps bound to dev may still run there. */
bool ops_node_away(struct accel_daemon *d, int dev, const char *retry,
                   struct op_result *res);
/* ops_node_away for each card a is bound to. */
bool ops_app_away(struct accel_daemon *d, const struct app *a,
                  const char *retry, struct op_result *res);
/* true when a runs on another node's agent (or across nodes) and that
 * agent has not stopped it: after ops_stop_processes, its agent's to
 * finish and release; nothing here may release it on its behalf. */
bool ops_runs_elsewhere_still(struct accel_daemon *d, const struct app *a);

/* Per-member limits (ops_limits.c). Each returns false with res set to a
 * 403 "user-limit" naming the numbers. */
/* owner may hold one more app. */
bool ops_limits_apps(struct accel_daemon *d, const char *owner,
                     struct op_result *res);
/* a's owner may hold rows[0..n) for a, a's own current rows not counted. */
bool ops_limits_gpu(struct accel_daemon *d, const struct app *a,
                    const struct adm_row *rows, size_t n,
                    struct op_result *res);

/* The preflight's owner quota (SPEC 2.8): the same limits, applied to each
 * demand's owner cumulatively over the demands in order (the apps and GPU
 * memory of the earlier demands count). Owners without limits (admins,
 * "shared", names with no user) pass. */
struct ops_quota_use {
    const char *owner;
    uint64_t apps, bytes; /* added by the demands accepted so far */
};
struct ops_quota {
    struct accel_daemon *d;
    const char *const *owners; /* demand i's owner */
    struct ops_quota_use use[64];
    size_t nuse;
    json_t *pressure; /* on a refusal: [{source:"owner_quota", dimensions}] */
};
/* An adm_preflight_hook check; q->pressure is the caller's to release. */
bool ops_limits_preflight(void *q, size_t i, const struct adm_row *rows,
                          size_t n, uint64_t min_gpu);

#endif /* ACCEL_DAEMON_API_OPS_INT_H */
