/* SPDX-License-Identifier: MIT */
/*
 * users.c: the users of SPEC 3 as the API changes them: add (with a uid
 * from --app-uid-range, node/identity.c, in the same transaction), remove,
 * and a member's limits. Each takes d->lock and writes through the store.
 */
#include "common/accel_setup.h"
#include "daemon/api/users.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/api/auth.h"
#include "daemon/node/identity.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

enum accel_err users_add(struct accel_daemon *d, const char *name,
                         bool admin, const char *token)
{
    struct store_user row;
    struct user_rec *u;
    char hash[65];
    uint32_t uid = 0;
    bool new_uid = false;
    enum accel_err rc;

    auth_hash(token, hash);
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->nusers; i++) {
        if (strcmp(d->users[i].name, name) == 0) {
            pthread_mutex_unlock(&d->lock);
            return ACCEL_EEXIST;
        }
    }
    row = (struct store_user){name, admin ? "admin" : "member", hash,
                              util_wall_ms()};
    rc = state_tx_begin(d);
    if (rc == ACCEL_OK)
        rc = store_user_put(d->store, &row);
    if (rc == ACCEL_OK)
        rc = identity_assign(d, name, &uid, &new_uid);
    if (rc == ACCEL_OK) {
        state_event(d, "user.add", NULL, NULL, NULL, NULL, "user %s added (%s)",
                    name, row.role);
        rc = state_tx_commit(d);
    } else {
        state_tx_rollback(d);
    }
    if (rc == ACCEL_OK) {
        d->users = xrealloc(d->users, (d->nusers + 1) * sizeof(*d->users));
        u = &d->users[d->nusers++];
        u->name = xstrdup(name);
        u->admin = admin;
        u->max_apps = -1;
        u->max_gpu_mem = -1;
        util_strlcpy(u->hash, hash, sizeof u->hash);
        u->created_ms = row.created_ms;
        if (new_uid)
            identity_remember(d, name, uid);
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

enum accel_err users_remove(struct accel_daemon *d, const char *name)
{
    enum accel_err rc = ACCEL_ENOTFOUND;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->nusers; i++) {
        if (strcmp(d->users[i].name, name) != 0)
            continue;
        if (strcmp(name, "admin") == 0) {
            rc = ACCEL_EFORBIDDEN;
            break;
        }
        rc = state_tx_begin(d);
        if (rc == ACCEL_OK)
            rc = store_user_delete(d->store, name);
        if (rc == ACCEL_OK)
            rc = store_limits_delete(d->store, name);
        if (rc == ACCEL_OK) {
            state_event(d, "user.remove", NULL, NULL, NULL, NULL,
                        "user %s removed", name);
            rc = state_tx_commit(d);
        } else {
            state_tx_rollback(d);
        }
        if (rc == ACCEL_OK) {
            free(d->users[i].name);
            d->users[i] = d->users[--d->nusers];
        }
        break;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

enum accel_err users_set_limits(struct accel_daemon *d,
                                const char *name, int64_t max_apps,
                                int64_t max_gpu_mem)
{
    struct store_limits row = {name, max_apps, max_gpu_mem};
    struct user_rec *u;
    enum accel_err rc;
    pthread_mutex_lock(&d->lock);
    u = state_user_find(d, name);
    rc = u == NULL ? ACCEL_ENOTFOUND : u->admin ? ACCEL_EINVAL : ACCEL_OK;
    if (rc == ACCEL_OK)
        rc = state_tx_begin(d);
    if (rc == ACCEL_OK) {
        rc = store_limits_put(d->store, &row);
        if (rc == ACCEL_OK) {
            state_event(d, "user.limits", NULL, NULL, NULL,
                        json_pack("{s:I, s:I}", "maxApps",
                                  (json_int_t)max_apps, "maxGpuMemory",
                                  (json_int_t)max_gpu_mem),
                        "user %s limits set", name);
            rc = state_tx_commit(d);
        } else {
            state_tx_rollback(d);
        }
    }
    if (rc == ACCEL_OK) {
        u->max_apps = max_apps;
        u->max_gpu_mem = max_gpu_mem;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}
