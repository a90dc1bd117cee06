/* SPDX-License-Identifier: MIT */
/*
 * users.c: the users of SPEC 3 as the API changes them: add (with a uid
 * from --app-uid-range, node/identity.c, in the same transaction), remove
 * (refused while the user owns apps, unless forced: then its apps are
 * uninstalled in the same transaction, and its uid retired), and a
 * member's limits. Each takes d->lock and writes through the store.
 */
#include "common/accel_setup.h"
#include "daemon/api/users.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/api/auth.h"
#include "daemon/api/ops.h"
#include "daemon/lifecycle.h"
#include "daemon/node/cluster/cluster.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/runtime/launch.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

/*
 * A name with a uid but no user: one removed by an acceld from before uids
 * were retired (its identity row stayed). Retire that uid (and move the
 * home aside) in a transaction of its own before the name is given again,
 * so the new user never gets the old uid or its files. Lock held.
 */
static enum accel_err retire_leftover(struct accel_daemon *d, const char *name)
{
    uint32_t uid = 0;
    enum accel_err rc;

    if (identity_uid(d, name) == 0)
        return ACCEL_OK;
    rc = state_tx_begin(d);
    if (rc == ACCEL_OK)
        rc = identity_retire(d, name, &uid);
    rc = state_tx_end(d, rc);
    if (rc == ACCEL_OK && uid != 0)
        identity_retired(d, name, uid);
    return rc;
}

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
    /* a removed user's apps still being uninstalled: the new user must
     * not inherit them */
    if (state_owner_apps(d, name) > 0) {
        pthread_mutex_unlock(&d->lock);
        return ACCEL_EBUSY;
    }
    rc = retire_leftover(d, name);
    if (rc != ACCEL_OK) {
        pthread_mutex_unlock(&d->lock);
        return rc;
    }
    row = (struct store_user){name, admin ? "admin" : "member", hash,
                              util_wall_ms()};
    rc = state_tx_begin(d);
    if (rc == ACCEL_OK)
        rc = store_user_put(d->store, &row);
    if (rc == ACCEL_OK)
        rc = identity_assign(d, name, &uid, &new_uid);
    if (rc == ACCEL_OK)
        state_event(d, "user.add", NULL, NULL, NULL, NULL, "user %s added (%s)",
                    name, row.role);
    rc = state_tx_end(d, rc);
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

/* ---- remove ---- */

/* What becomes of an app of a removed user (SPEC 3, users_remove). */
enum rm_kind {
    RM_DELETE,  /* no process: deleted, its bindings released, now */
    RM_STOP,    /* processes run (here, on an agent, across nodes): it is
                   `stopping` for an uninstall that finishes the rest */
    RM_RELEASE, /* stopped, processes still hold its GPU: `releasing` for
                   an uninstall (the reconciler finishes it) */
};

static const char *const rm_state[] = {"uninstalled", "stopping",
                                       "releasing"};

static enum rm_kind rm_kind_of(struct accel_daemon *d, const struct app *a)
{
    if (a->pid > 0 || runtime_ends_on_agent(d, a) || state_app_multi(d, a))
        return RM_STOP;
    return a->rel.linger > 0 ? RM_RELEASE : RM_DELETE;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(struct app *const *)a)->name,
                  (*(struct app *const *)b)->name);
}

/* The apps of owner (borrowed pointers) by name, copied out of the owner's
 * list (the removal changes that list); *out freed by the caller. */
static size_t owned_apps(struct accel_daemon *d, const char *owner,
                         struct app ***out)
{
    size_t n;
    struct app *const *v = state_owned(d, owner, &n);

    *out = xcalloc(n + 1, sizeof(**out));
    if (n > 0)
        memcpy(*out, v, n * sizeof(**out));
    qsort(*out, n, sizeof(**out), by_name);
    return n;
}

/* "carol1, carol2" (the first ten, then "and N more"); allocated. */
static char *app_names(struct app **apps, size_t n)
{
    char *out = xstrdup(""), *next;

    for (size_t i = 0; i < n && i < 10; i++) {
        next = xasprintf("%s%s%s", out, i ? ", " : "", apps[i]->name);
        free(out);
        out = next;
    }
    if (n > 10) {
        next = xasprintf("%s and %zu more", out, n - 10);
        free(out);
        out = next;
    }
    return out;
}

/* Can the user's apps go? ACCEL_OK, or ACCEL_ECONFLICT (not forced) or
 * ACCEL_EBUSY (an app is in the middle of an operation) with *cause. */
static enum accel_err rm_check(const char *name, bool force,
                               struct app **apps, size_t n, char **cause)
{
    char *list;

    if (n > 0 && !force) {
        list = app_names(apps, n);
        *cause = xasprintf(
            "user %s owns %zu app%s (%s): uninstall %s first, or remove the "
            "user with force (DELETE /api/users/%s?force=true, accelctl user "
            "remove %s --force), which stops and uninstalls %s",
            name, n, n == 1 ? "" : "s", list, n == 1 ? "it" : "them", name,
            name, n == 1 ? "it" : "them");
        free(list);
        return ACCEL_ECONFLICT;
    }
    for (size_t i = 0; i < n; i++) {
        if (ops_in_transition(apps[i])) {
            *cause = xasprintf("app %s of user %s is %s; retry the removal "
                               "when it has finished",
                               apps[i]->name, name,
                               ops_transition_name(apps[i]));
            return ACCEL_EBUSY;
        }
    }
    return ACCEL_OK;
}

/* The store writes of one app's end, inside the removal's transaction. */
static enum accel_err rm_stage(struct accel_daemon *d, struct app *a,
                               enum rm_kind k, const char *owner)
{
    enum accel_err rc;

    if (k == RM_DELETE) {
        char *why = xasprintf(": its owner %s was removed", owner);
        rc = lifecycle_stage_uninstall(d, a, NULL, why);
        free(why);
        return rc;
    }
    rc = state_save_app(d, a, k == RM_STOP ? APP_STOPPING : APP_RELEASING,
                        "uninstalling");
    if (rc == ACCEL_OK)
        state_event(d, "app.state", a->name, NULL, NULL, NULL,
                    "app %s is %s: uninstalling (its owner %s was removed)",
                    a->name, rm_state[k], owner);
    return rc;
}

/* After the commit: memory follows, and the stops begin. a may be freed. */
static void rm_apply(struct accel_daemon *d, struct app *a, enum rm_kind k)
{
    bool multi;

    if (k == RM_DELETE) {
        lifecycle_apply_uninstall(d, a);
    } else if (k == RM_RELEASE) {
        a->rel.uninstall = true;
        a->rel.to = APP_STOPPED;
        a->rel.kill_at_ms =
            util_wall_ms() + (int64_t)a->m.run.stop_timeout_s * 1000;
        state_set_state(a, APP_RELEASING, "uninstalling");
    } else {
        multi = state_app_multi(d, a);
        state_set_state(a, APP_STOPPING, "uninstalling");
        if (multi)
            cluster_act(d, a); /* may delete a */
        else if (!runtime_ends_on_agent(d, a))
            runtime_stop_begin(a, APP_STOPPED, "uninstalling", true);
    }
}

/* A removal's apps and their ends (state_commit_parts). */
struct rm_ctx {
    const char *name;
    struct app **apps;
    const enum rm_kind *kinds;
    uint32_t uid; /* the retired uid (0: none) */
};

static enum accel_err rm_stage_part(struct accel_daemon *d, size_t i,
                                    void *ctx)
{
    struct rm_ctx *c = ctx;
    return rm_stage(d, c->apps[i], c->kinds[i], c->name);
}

static void rm_apply_part(struct accel_daemon *d, size_t i, void *ctx)
{
    struct rm_ctx *c = ctx;
    rm_apply(d, c->apps[i], c->kinds[i]);
}

/* The user's rows and its uid's retirement, after (or with) its apps. */
static enum accel_err rm_last(struct accel_daemon *d, size_t n, void *ctx)
{
    struct rm_ctx *c = ctx;
    enum accel_err rc = store_user_delete(d->store, c->name);
    if (rc == ACCEL_OK)
        rc = store_limits_delete(d->store, c->name);
    if (rc == ACCEL_OK)
        rc = identity_retire(d, c->name, &c->uid);
    if (rc == ACCEL_OK)
        state_event(d, "user.remove", NULL, NULL, NULL, NULL,
                    "user %s removed%s", c->name,
                    n ? " and its apps uninstalled" : "");
    return rc;
}

enum accel_err users_remove(struct accel_daemon *d, const char *name,
                            bool force, json_t **out_apps, char **cause)
{
    struct user_rec *u;
    struct app **apps = NULL;
    enum rm_kind *kinds = NULL;
    json_t *list = NULL;
    uint32_t uid = 0;
    size_t n, done = 0;
    struct rm_ctx rm;
    struct state_parts parts;
    enum accel_err rc;

    pthread_mutex_lock(&d->lock);
    u = state_user_find(d, name);
    rc = u == NULL ? ACCEL_ENOTFOUND
         : strcmp(name, "admin") == 0 ? ACCEL_EFORBIDDEN
                                      : ACCEL_OK;
    if (rc != ACCEL_OK)
        goto out;
    n = owned_apps(d, name, &apps);
    /* a forced removal cancels its apps' pulls (issue 44), which leave
     * them stopped and released: then uninstalled with the rest */
    for (size_t i = 0; force && i < n; i++)
        launch_cancel(d, apps[i], "uninstalling");
    rc = rm_check(name, force, apps, n, cause);
    if (rc != ACCEL_OK)
        goto out;
    kinds = xcalloc(n + 1, sizeof(*kinds));
    list = json_array();
    for (size_t i = 0; i < n; i++) {
        kinds[i] = rm_kind_of(d, apps[i]);
        json_array_append_new(list,
                              json_pack("{s:s, s:s}", "name", apps[i]->name,
                                        "state", rm_state[kinds[i]]));
    }
    rm = (struct rm_ctx){name, apps, kinds, 0};
    parts = (struct state_parts){n, rm_stage_part, rm_apply_part, rm_last,
                                 &rm};
    rc = state_commit_parts(d, &parts, &done);
    if (rc != ACCEL_OK) {
        if (done > 0 || rc == ACCEL_ETOOBIG)
            *cause = xasprintf("user %s was not removed (%s); %zu of its %zu "
                               "apps were uninstalled or set stopping "
                               "before: retry the removal",
                               name, store_errmsg(d->store), done, n);
        goto out;
    }
    uid = rm.uid;
    free(u->name);
    *u = d->users[--d->nusers];
    if (uid != 0)
        identity_retired(d, name, uid);
    *out_apps = list;
    list = NULL;
out:
    pthread_mutex_unlock(&d->lock);
    json_decref(list);
    free(apps);
    free(kinds);
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
        if (rc == ACCEL_OK)
            state_event(d, "user.limits", NULL, NULL, NULL,
                        json_pack("{s:I, s:I}", "maxApps",
                                  (json_int_t)max_apps, "maxGpuMemory",
                                  (json_int_t)max_gpu_mem),
                        "user %s limits set", name);
        rc = state_tx_end(d, rc);
    }
    if (rc == ACCEL_OK) {
        u->max_apps = max_apps;
        u->max_gpu_mem = max_gpu_mem;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}
