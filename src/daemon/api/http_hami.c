/* SPDX-License-Identifier: MIT */
/*
 * http_hami.c: whom the --hami-listen listener answers. It asks no token
 * and shows every app, so "loopback only" is not enough: every app of the
 * node is on the loopback too. A local peer is known by the uid owning its
 * socket (peer.h, as the broker knows its peers by SO_PEERCRED): with
 * --hami-users only the uids named there are served, else every uid
 * outside --app-uid-range (the accel users' apps); never a uid an app
 * runs as (an admin's run.user, acceld's own when it is not root). A peer in neither TCP
 * table of acceld's namespace is another machine's, reached only with
 * --hami-listen-any. Not the routes: http.c serves them.
 */
#include "common/accel_setup.h"
#include "daemon/api/http_int.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/proc/peer.h"
#include "daemon/state.h"

#define USERS_MAX 64 /* names in --hami-users */

/* One name or number of --hami-users as a uid; false if it is neither. */
static bool user_uid(const char *s, uint32_t *out)
{
    char *end = NULL;
    unsigned long v;
    struct passwd pw, *pwp = NULL;
    char buf[4096];

    errno = 0;
    v = strtoul(s, &end, 10);
    if (*s >= '0' && *s <= '9' && errno == 0 && *end == '\0' &&
        v <= UINT32_MAX) {
        *out = (uint32_t)v;
        return true;
    }
    if (getpwnam_r(s, &pw, buf, sizeof buf, &pwp) != 0 || pwp == NULL)
        return false;
    *out = (uint32_t)pwp->pw_uid;
    return true;
}

enum accel_err http_hami_users_parse(const char *list, uint32_t **out,
                                     size_t *out_n, char **cause)
{
    char *copy = xstrdup(list), *save = NULL;
    uint32_t *uids = xcalloc(USERS_MAX, sizeof(*uids));
    size_t n = 0;

    for (char *t = strtok_r(copy, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (n == USERS_MAX || !user_uid(t, &uids[n])) {
            *cause = n == USERS_MAX
                         ? xasprintf("--hami-users names at most %d users",
                                     USERS_MAX)
                         : xasprintf("--hami-users: \"%.64s\" is no user of "
                                     "this machine nor a uid", t);
            free(copy);
            free(uids);
            return ACCEL_EINVAL;
        }
        n++;
    }
    free(copy);
    if (n == 0) {
        free(uids);
        *cause = xstrdup("--hami-users must name one user or uid at least "
                         "(NAME|UID[,NAME|UID...])");
        return ACCEL_EINVAL;
    }
    *out = uids;
    *out_n = n;
    return ACCEL_OK;
}

/* Whether uid is one that an app runs as (an admin's run.user, or
 * acceld's own when it is not root and its apps share it). */
static bool an_apps_uid(struct accel_daemon *d, uint32_t uid)
{
    bool found = false;

    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps && !found; i++) {
        uid_t u;
        gid_t g;
        found = identity_app_uid(d, d->apps[i], &u, &g) == ACCEL_OK &&
                (uint32_t)u == uid;
    }
    pthread_mutex_unlock(&d->lock);
    return found;
}

/* Why uid may not use the listener, or NULL when it may. */
static char *uid_refusal(struct accel_daemon *d, uint32_t uid)
{
    if (uid >= d->cfg.uid_lo && uid <= d->cfg.uid_hi)
        return xasprintf("uid %u is an app's (--app-uid-range %u-%u); "
                         "--hami-users names who may use it", uid,
                         d->cfg.uid_lo, d->cfg.uid_hi);
    if (an_apps_uid(d, uid))
        return xasprintf("uid %u is one an app runs as", uid);
    if (d->cfg.hami_uids == NULL)
        return NULL;
    for (size_t i = 0; i < d->cfg.nhami_uids; i++)
        if (d->cfg.hami_uids[i] == uid)
            return NULL;
    return xasprintf("uid %u is not one --hami-users names", uid);
}

bool http_hami_peer_allowed(struct http_req *r)
{
    struct MHD_Connection *c = r->conn;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct sockaddr_storage here;
    socklen_t len = sizeof here;
    uint32_t uid;
    char *why = NULL;
    enum accel_err rc = ACCEL_EIO;

    if (ci != NULL && fi != NULL &&
        getsockname(fi->connect_fd, (struct sockaddr *)&here, &len) == 0)
        rc = peer_tcp_uid("/proc", ci->client_addr,
                          (const struct sockaddr *)&here, &uid);
    if (rc == ACCEL_OK)
        why = uid_refusal(r->d, uid);
    else if (rc != ACCEL_ENOTFOUND || !r->d->cfg.hami_any)
        why = xstrdup("its peer's uid cannot be found");
    if (why == NULL)
        return true;
    http_reply_error(r, ACCEL_EFORBIDDEN, "the HAMi listener does not answer "
                     "this client: %s", why);
    free(why);
    return false;
}
