/* SPDX-License-Identifier: MIT */
/*
 * logs.c: an app's logs go with it, and a user's logs are bounded
 * together (logs.h). The files are measured and trimmed without d->lock.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/logs.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/node/runtime/applog.h"
#include "daemon/state.h"

void logs_app_removed(struct accel_daemon *d, const struct app *a)
{
    char *logdir;

    if (d->applog != NULL) {
        applog_remove(d->applog, a->name);
        return;
    }
    logdir = xasprintf("%s/logs", d->cfg.data_dir);
    applog_remove_dir(logdir, a->name);
    free(logdir);
}

/* One user's apps, copied under the lock. */
struct owner_logs {
    char *name;          /* the user (owned) */
    char **apps;         /* its apps' names (owned) */
    size_t n;
    uint64_t bytes;      /* measured without the lock */
};

static struct owner_logs *gather(struct accel_daemon *d, size_t *out_n)
{
    struct owner_logs *o = xcalloc(d->nusers + 1, sizeof(*o));

    for (size_t u = 0; u < d->nusers; u++) {
        o[u].name = xstrdup(d->users[u].name);
        o[u].apps = xcalloc(d->napps + 1, sizeof(char *));
        for (size_t i = 0; i < d->napps; i++)
            if (strcmp(d->apps[i]->owner, o[u].name) == 0)
                o[u].apps[o[u].n++] = xstrdup(d->apps[i]->name);
    }
    *out_n = d->nusers;
    return o;
}

void logs_bound_users(struct accel_daemon *d)
{
    char *logdir = xasprintf("%s/logs", d->cfg.data_dir);
    struct owner_logs *o;
    size_t n;

    pthread_mutex_lock(&d->lock);
    o = gather(d, &n);
    pthread_mutex_unlock(&d->lock);
    for (size_t u = 0; u < n; u++)
        o[u].bytes = applog_bound(logdir, (const char *const *)o[u].apps,
                                  o[u].n, d->cfg.user_logs_max);
    pthread_mutex_lock(&d->lock);
    for (size_t u = 0; u < n; u++) {
        struct user_rec *r = state_user_find(d, o[u].name);
        if (r != NULL)
            r->log_bytes = o[u].bytes;
    }
    pthread_mutex_unlock(&d->lock);
    for (size_t u = 0; u < n; u++) {
        for (size_t i = 0; i < o[u].n; i++)
            free(o[u].apps[i]);
        free(o[u].apps);
        free(o[u].name);
    }
    free(o);
    free(logdir);
}
