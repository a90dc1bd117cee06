/* SPDX-License-Identifier: MIT */
/*
 * identity.c: per-user uids (allocation from --app-uid-range, kept in the
 * store), the private homes under <data-dir>/home, the permissions of the
 * data directory, and the resolution of who an app runs as. See
 * identity.h for the contracts and docs/internals/runtime.md for the
 * permission table. errno becomes accel errors and sentences here.
 */
#include "common/accel_setup.h"
#include "daemon/node/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/cgroup.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

#define PW_BUF 16384 /* getpwnam_r / getgrgid_r scratch */

enum accel_err identity_parse_range(const char *s, uint32_t *lo, uint32_t *hi,
                                    char **cause)
{
    unsigned long long a, b;
    char *end = NULL;

    if (s == NULL || *s < '0' || *s > '9')
        goto bad;
    errno = 0;
    a = strtoull(s, &end, 10);
    if (errno || *end != '-' || end[1] < '0' || end[1] > '9')
        goto bad;
    b = strtoull(end + 1, &end, 10);
    if (errno || *end != '\0' || a < 1 || a > b || b >= 0x7fffffffULL)
        goto bad;
    *lo = (uint32_t)a;
    *hi = (uint32_t)b;
    return ACCEL_OK;
bad:
    if (cause != NULL)
        *cause = xasprintf("--app-uid-range \"%s\" must be LO-HI with "
                           "1 <= LO <= HI < 2147483647, e.g. %u-%u",
                           s ? s : "", IDENTITY_UID_LO_DEFAULT,
                           IDENTITY_UID_HI_DEFAULT);
    return ACCEL_EINVAL;
}

static bool in_list(uint32_t v, const uint32_t *taken, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (taken[i] == v)
            return true;
    return false;
}

enum accel_err identity_pick(uint32_t lo, uint32_t hi, const uint32_t *taken,
                             size_t n, bool (*busy)(uint32_t uid, void *ctx),
                             void *ctx, uint32_t *out)
{
    for (uint64_t u = lo; u <= hi; u++) {
        if (in_list((uint32_t)u, taken, n))
            continue;
        if (busy != NULL && busy((uint32_t)u, ctx))
            continue;
        *out = (uint32_t)u;
        return ACCEL_OK;
    }
    return ACCEL_ECONFLICT;
}

/* A uid or gid the machine already uses (passwd or group entry). */
static bool system_busy(uint32_t id, void *ctx)
{
    char *buf = xmalloc(PW_BUF);
    struct passwd pw, *pwp = NULL;
    struct group gr, *grp = NULL;
    bool used;

    (void)ctx;
    getpwuid_r((uid_t)id, &pw, buf, PW_BUF, &pwp);
    used = pwp != NULL;
    if (!used) {
        getgrgid_r((gid_t)id, &gr, buf, PW_BUF, &grp);
        used = grp != NULL;
    }
    free(buf);
    return used;
}

uint32_t identity_uid(const struct accel_daemon *d, const char *name)
{
    for (size_t i = 0; i < d->nids; i++)
        if (strcmp(d->ids[i].name, name) == 0)
            return d->ids[i].uid;
    return 0;
}

void identity_remember(struct accel_daemon *d, const char *name, uint32_t uid)
{
    if (identity_uid(d, name) != 0)
        return;
    d->ids = xrealloc(d->ids, (d->nids + 1) * sizeof(*d->ids));
    d->ids[d->nids].name = xstrdup(name);
    d->ids[d->nids].uid = uid;
    d->nids++;
}

enum accel_err identity_load_row(void *ctx, const char *name, int64_t uid)
{
    struct accel_daemon *d = ctx;

    if (uid <= 0 || uid > UINT32_MAX) {
        log_error("identity of %s has uid %jd: skipped", name, (intmax_t)uid);
        return ACCEL_OK;
    }
    identity_remember(d, name, (uint32_t)uid);
    return ACCEL_OK;
}

enum accel_err identity_assign(struct accel_daemon *d, const char *name,
                               uint32_t *out_uid, bool *out_new)
{
    uint32_t *taken, uid = identity_uid(d, name);
    struct store_identity row;
    enum accel_err rc;

    *out_new = false;
    if (uid != 0) {
        *out_uid = uid;
        return ACCEL_OK;
    }
    /* every uid ever given stays taken, whatever the range is now */
    taken = xcalloc(d->nids + 1, sizeof(*taken));
    for (size_t i = 0; i < d->nids; i++)
        taken[i] = d->ids[i].uid;
    rc = identity_pick(d->cfg.uid_lo, d->cfg.uid_hi, taken, d->nids,
                       system_busy, NULL, &uid);
    free(taken);
    if (rc != ACCEL_OK)
        return rc;
    row = (struct store_identity){name, (int64_t)uid};
    rc = store_identity_put(d->store, &row);
    if (rc != ACCEL_OK)
        return rc;
    *out_uid = uid;
    *out_new = true;
    return ACCEL_OK;
}

/* ---- start: uids for every name, permissions of the data directory ---- */

/* The names that need a uid: users, app owners, "shared". Borrowed. */
static size_t wanted_names(struct accel_daemon *d, const char **out)
{
    size_t n = 0;

    out[n++] = ACCEL_SHARED_OWNER;
    for (size_t i = 0; i < d->nusers; i++)
        out[n++] = d->users[i].name;
    for (size_t i = 0; i < d->napps; i++)
        out[n++] = d->apps[i]->owner;
    return n;
}

static void forget(struct accel_daemon *d, const char *name)
{
    for (size_t k = 0; k < d->nids; k++) {
        if (strcmp(d->ids[k].name, name) != 0)
            continue;
        free(d->ids[k].name);
        d->ids[k] = d->ids[--d->nids];
        return;
    }
}

static enum accel_err assign_all(struct accel_daemon *d)
{
    const char **names = xcalloc(1 + d->nusers + d->napps, sizeof(*names));
    uint32_t *uids = xcalloc(1 + d->nusers + d->napps, sizeof(*uids));
    bool *fresh = xcalloc(1 + d->nusers + d->napps, sizeof(*fresh));
    size_t n = wanted_names(d, names), done = 0;
    enum accel_err rc = state_tx_begin(d);

    while (rc == ACCEL_OK && done < n) {
        rc = identity_assign(d, names[done], &uids[done], &fresh[done]);
        if (rc != ACCEL_OK)
            break;
        if (fresh[done]) /* visible to the next pick */
            identity_remember(d, names[done], uids[done]);
        done++;
    }
    if (rc == ACCEL_ECONFLICT) {
        log_error("no free uid left in --app-uid-range %u-%u: %s and the "
                  "names after it have no uid, and their apps cannot start",
                  d->cfg.uid_lo, d->cfg.uid_hi, names[done]);
        rc = ACCEL_OK; /* keep what was assigned */
    }
    if (rc == ACCEL_OK)
        rc = state_tx_commit(d);
    else
        state_tx_rollback(d);
    if (rc != ACCEL_OK) /* nothing was written: forget the new ones */
        for (size_t i = 0; i < done; i++)
            if (fresh[i])
                forget(d, names[i]);
    free(names);
    free(uids);
    free(fresh);
    return rc;
}

/* chmod a path that acceld owns (a missing one is fine). */
static void set_mode(const char *path, mode_t mode)
{
    if (chmod(path, mode) != 0 && errno != ENOENT)
        log_warn("cannot chmod %s to %04o: %s", path, (unsigned)mode,
                 strerror(errno));
}

static void make_dir(const char *path, mode_t mode)
{
    if (mkdir(path, mode) != 0 && errno != EEXIST)
        log_warn("cannot create %s: %s", path, strerror(errno));
    set_mode(path, mode);
}

/* Can others search every directory above dir (so an app uid reaches its
 * home)? Returns the first one that blocks, allocated, or NULL. */
static char *blocking_parent(const char *dir)
{
    char *abs = realpath(dir, NULL), *p;
    struct stat st;

    if (abs == NULL)
        return NULL;
    for (p = strrchr(abs, '/'); p != NULL && p != abs; p = strrchr(abs, '/')) {
        *p = '\0';
        if (stat(abs, &st) == 0 && (st.st_mode & S_IXOTH) == 0)
            return abs;
    }
    free(abs);
    return NULL;
}

/* Is path a directory acceld may keep other users' homes in: a real
 * directory (not a link), owned by acceld's uid, writable by nobody else? */
static bool safe_root_dir(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
           st.st_uid == geteuid() && (st.st_mode & 022) == 0;
}

/*
 * Where the apps' homes are (issue 20): <data-dir>/home, unless the apps'
 * uids cannot reach it because a directory above the data directory is not
 * searchable by others (a checkout in a 0700 home: Debian's adduser makes
 * them so). Then they are kept in <IDENTITY_HOME_FALLBACK>/<instance>
 * (root-owned, 0711; <instance> as the cgroups', from the data directory's
 * realpath), and acceld says so. The choice sticks: once that directory
 * exists it is used, so making the data directory reachable later does not
 * hide the homes the apps have. block is the blocking parent or NULL.
 */
static void choose_home_root(struct accel_daemon *d, const char *block)
{
    const char *base = IDENTITY_HOME_FALLBACK;
    char inst[CGROUP_INSTANCE_LEN + 1], *alt;

    free(d->home_root);
    d->home_root = xasprintf("%s/home", d->cfg.data_dir);
    if (!d->uid_drop)
        return;
    cgroup_instance_of(d->cfg.data_dir, inst);
    alt = xasprintf("%s/%s", base, inst);
    if (block == NULL && !safe_root_dir(alt)) {
        free(alt);
        return;
    }
    if (mkdir(base, 0711) != 0 && errno != EEXIST)
        log_warn("cannot create %s: %s", base, strerror(errno));
    if (mkdir(alt, 0711) != 0 && errno != EEXIST)
        log_warn("cannot create %s: %s", alt, strerror(errno));
    if (!safe_root_dir(base) || !safe_root_dir(alt) || chmod(alt, 0711) != 0) {
        if (block != NULL)
            log_warn("%s is not searchable by other users, and %s cannot "
                     "hold the apps' homes (it must be a directory of uid %u "
                     "that no one else may write): apps, which run as their "
                     "owner's uid, cannot reach their home under %s/home "
                     "(chmod o+x %s)",
                     block, alt, (unsigned)geteuid(), d->cfg.data_dir, block);
        free(alt);
        return;
    }
    if (block != NULL)
        log_info("apps' homes are in %s: %s is not searchable by other "
                 "users, so the apps' uids could not reach %s/home",
                 alt, block, d->cfg.data_dir);
    else
        log_info("apps' homes are in %s (chosen when the data directory "
                 "could not be reached by other users; it is kept)", alt);
    free(d->home_root);
    d->home_root = alt;
}

char *identity_home(const struct accel_daemon *d, const char *owner)
{
    return xasprintf("%s/%s", d->home_root, owner);
}

/*
 * The data directory as apps see it (docs/internals/runtime.md):
 * searchable but not listable (0711), the store and the token private to
 * acceld, logs reached only through the descriptor acceld hands over.
 */
static void lay_out_data_dir(struct accel_daemon *d)
{
    static const char *const private_files[] = {
        "accel.db", "accel.db-wal", "accel.db-shm", "admin.token"};
    const char *dir = d->cfg.data_dir;
    char *p, *block;

    set_mode(dir, 0711);
    for (size_t i = 0; i < sizeof(private_files) / sizeof(*private_files);
         i++) {
        p = xasprintf("%s/%s", dir, private_files[i]);
        set_mode(p, 0600);
        free(p);
    }
    p = xasprintf("%s/logs", dir);
    make_dir(p, 0700);
    free(p);
    p = xasprintf("%s/home", dir);
    make_dir(p, 0711);
    free(p);
    p = xasprintf("%s/run", dir);
    make_dir(p, 0711);
    free(p);
    p = xasprintf("%s/run/apps", dir);
    make_dir(p, 0711);
    free(p);
    p = xasprintf("%s/run/ledgers", dir);
    make_dir(p, 0711);
    free(p);
    block = blocking_parent(dir);
    choose_home_root(d, block);
    free(block);
}

/* ---- a removed user: its uid retired, its home moved aside ---- */

enum accel_err identity_retire(struct accel_daemon *d, const char *name,
                               uint32_t *out_uid)
{
    uint32_t uid = identity_uid(d, name);
    struct store_identity row;
    enum accel_err rc;
    char *retired;

    *out_uid = 0;
    if (uid == 0)
        return ACCEL_OK;
    retired = xasprintf("~%s.%u", name, uid);
    row = (struct store_identity){retired, (int64_t)uid};
    rc = store_identity_retire(d->store, name, &row);
    free(retired);
    if (rc == ACCEL_OK)
        *out_uid = uid;
    return rc;
}

/* Where removed users' homes go, on the homes' file system:
 * <data-dir>/removed-homes, or <home root>.removed beside a fallback home
 * root (choose_home_root). */
static char *removed_dir(const struct accel_daemon *d)
{
    char *def = xasprintf("%s/home", d->cfg.data_dir);
    bool inside = strcmp(def, d->home_root) == 0;

    free(def);
    return inside ? xasprintf("%s/removed-homes", d->cfg.data_dir)
                  : xasprintf("%s.removed", d->home_root);
}

/* Move a home aside to <removed dir>/<name>.<uid> (with the time appended
 * if that is taken). False when it is still there; *err (may be NULL) then
 * gets errno. */
static bool move_home_aside(struct accel_daemon *d, const char *home,
                            const char *name, uint32_t uid, int *err)
{
    char *dir = removed_dir(d);
    char *to = xasprintf("%s/%s.%u", dir, name, uid);
    struct stat st;
    bool moved = true;

    if (lstat(home, &st) != 0) {
        if (errno != ENOENT)
            log_warn("cannot read the home %s of removed user %s: %s", home,
                     name, strerror(errno));
        goto out;
    }
    make_dir(dir, 0700);
    if (lstat(to, &st) == 0) {
        free(to);
        to = xasprintf("%s/%s.%u.%lld", dir, name, uid,
                       (long long)util_wall_ms());
    }
    if (rename(home, to) != 0) {
        moved = false;
        if (err != NULL)
            *err = errno;
        log_error("cannot move the home %s of removed user %s (uid %u) "
                  "aside to %s: %s", home, name, uid, to, strerror(errno));
    } else {
        log_info("the home of removed user %s (uid %u) is now %s (root "
                 "only; delete it when it is no longer needed)", name, uid,
                 to);
    }
out:
    free(dir);
    free(to);
    return moved;
}

void identity_retired(struct accel_daemon *d, const char *name, uint32_t uid)
{
    char *retired = xasprintf("~%s.%u", name, uid);
    char *home = identity_home(d, name);

    forget(d, name);
    identity_remember(d, retired, uid);
    move_home_aside(d, home, name, uid, NULL);
    free(retired);
    free(home);
}

/* Is a home there owned by the uid of another accel name (a removed
 * user's, whose move aside failed)? Then it is not for uid. */
static bool home_of_another(const struct accel_daemon *d, const char *home,
                            uid_t uid, uid_t *owner)
{
    struct stat st;

    if (lstat(home, &st) != 0 || st.st_uid == uid)
        return false;
    for (size_t i = 0; i < d->nids; i++) {
        if ((uid_t)d->ids[i].uid == st.st_uid) {
            *owner = st.st_uid;
            return true;
        }
    }
    return false;
}

enum accel_err identity_start(struct accel_daemon *d)
{
    enum accel_err rc;

    d->uid_drop = geteuid() == 0;
    free(d->identity_status);
    if (d->uid_drop)
        d->identity_status = xasprintf(
            "apps run as their owner's uid (range %u-%u), with no new "
            "privileges and a private HOME",
            d->cfg.uid_lo, d->cfg.uid_hi);
    else
        d->identity_status = xasprintf(
            "acceld runs as uid %u, not root: apps run as that same uid "
            "(containment by uid is off)",
            (unsigned)geteuid());
    rc = assign_all(d);
    lay_out_data_dir(d);
    if (!d->uid_drop)
        log_warn("%s", d->identity_status);
    return rc;
}

/* ---- who an app runs as ---- */

enum accel_err identity_resolve_user(const char *spec, uid_t *uid, gid_t *gid,
                                     char **home)
{
    char *buf = xmalloc(PW_BUF), *end = NULL;
    struct passwd pw, *pwp = NULL;
    unsigned long long v = 0;
    bool numeric = spec[0] >= '0' && spec[0] <= '9';

    if (numeric) {
        errno = 0;
        v = strtoull(spec, &end, 10);
        if (errno || *end != '\0' || v >= 0xffffffffULL) {
            free(buf);
            return ACCEL_ENOTFOUND;
        }
        getpwuid_r((uid_t)v, &pw, buf, PW_BUF, &pwp);
    } else {
        getpwnam_r(spec, &pw, buf, PW_BUF, &pwp);
        if (pwp == NULL) {
            free(buf);
            return ACCEL_ENOTFOUND;
        }
    }
    *uid = pwp ? pwp->pw_uid : (uid_t)v;
    *gid = pwp ? pwp->pw_gid : (gid_t)v;
    if (home != NULL)
        *home = pwp && pwp->pw_dir && pwp->pw_dir[0] ? xstrdup(pwp->pw_dir)
                                                     : NULL;
    free(buf);
    return ACCEL_OK;
}

/* Create or repair <home root>/<owner>: a real directory (never a
 * link), 0700, owned by uid:gid when acceld may chown. */
static enum accel_err ensure_home(const char *path, bool chown_it, uid_t uid,
                                  gid_t gid, char **cause)
{
    struct stat st;
    int fd;

    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        goto fail;
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        goto fail;
    if (fstat(fd, &st) != 0 ||
        (chown_it && (st.st_uid != uid || st.st_gid != gid) &&
         fchown(fd, uid, gid) != 0) ||
        ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0)) {
        close(fd);
        goto fail;
    }
    close(fd);
    return ACCEL_OK;
fail:
    *cause = xasprintf("cannot prepare the home directory %s: %s", path,
                       strerror(errno));
    return ACCEL_ESYS;
}

static enum accel_err for_run_user(struct accel_daemon *d, const struct app *a,
                                   struct identity_run *out, char **cause)
{
    const char *spec = a->m.run.user;
    uid_t uid;
    gid_t gid;
    char *home = NULL;

    if (identity_resolve_user(spec, &uid, &gid, &home) != ACCEL_OK) {
        *cause = xasprintf("run.user \"%s\" of '%s' is not a user of this "
                           "machine", spec, a->name);
        return ACCEL_ENOTFOUND;
    }
    if (!d->uid_drop && uid != geteuid()) {
        free(home);
        *cause = xasprintf("run.user \"%s\" of '%s' needs acceld to run as "
                           "root (it runs as uid %u)", spec, a->name,
                           (unsigned)geteuid());
        return ACCEL_EFORBIDDEN;
    }
    *out = (struct identity_run){.drop = d->uid_drop, .uid = uid, .gid = gid,
                                 .user = xstrdup(spec),
                                 .home = home ? home : xstrdup("/")};
    return ACCEL_OK;
}

enum accel_err identity_for_app(struct accel_daemon *d, const struct app *a,
                                struct identity_run *out, char **cause)
{
    uint32_t uid;
    char *home;
    uid_t run_uid, other;
    gid_t run_gid;
    int err = 0;

    if (a->m.run.user != NULL)
        return for_run_user(d, a, out, cause);
    uid = identity_uid(d, a->owner);
    if (uid == 0) {
        *cause = xasprintf("'%s' cannot start: its owner %s has no uid (no "
                           "free uid left in --app-uid-range %u-%u)",
                           a->name, a->owner, d->cfg.uid_lo, d->cfg.uid_hi);
        return ACCEL_ECONFLICT;
    }
    run_uid = d->uid_drop ? (uid_t)uid : geteuid();
    run_gid = d->uid_drop ? (gid_t)uid : getegid();
    home = identity_home(d, a->owner);
    if (d->uid_drop && home_of_another(d, home, run_uid, &other) &&
        !move_home_aside(d, home, a->owner, (uint32_t)other, &err)) {
        *cause = xasprintf("'%s' cannot start: the home %s belongs to uid "
                           "%u, a removed user's, and cannot be moved "
                           "aside: %s", a->name, home, (unsigned)other,
                           strerror(err));
        free(home);
        return ACCEL_ESYS;
    }
    if (ensure_home(home, d->uid_drop, run_uid, run_gid, cause) != ACCEL_OK) {
        free(home);
        return ACCEL_ESYS;
    }
    *out = (struct identity_run){.drop = d->uid_drop, .uid = run_uid,
                                 .gid = run_gid, .user = xstrdup(a->owner),
                                 .home = home};
    return ACCEL_OK;
}

void identity_run_release(struct identity_run *r)
{
    free(r->user);
    free(r->home);
    memset(r, 0, sizeof(*r));
}

enum accel_err identity_app_uid(const struct accel_daemon *d,
                                const struct app *a, uid_t *uid, gid_t *gid)
{
    uint32_t own;
    uid_t u;
    gid_t g;

    if (a->m.run.user != NULL) {
        if (identity_resolve_user(a->m.run.user, &u, &g, NULL) != ACCEL_OK)
            return ACCEL_ENOTFOUND;
    } else {
        own = identity_uid(d, a->owner);
        if (own == 0)
            return ACCEL_ENOTFOUND;
        u = (uid_t)own;
        g = (gid_t)own;
    }
    if (!d->uid_drop) { /* apps run as acceld's own user */
        u = geteuid();
        g = getegid();
    }
    *uid = u;
    *gid = g;
    return ACCEL_OK;
}
