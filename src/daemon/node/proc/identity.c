/* SPDX-License-Identifier: MIT */
/*
 * identity.c: per-user uids (allocation from --app-uid-range, kept in the
 * store; the range checked against login.defs, systemd's ranges and the
 * user namespace, each uid against NSS), the private homes under
 * <data-dir>/home, the permissions of the data directory, and the
 * resolution of who an app runs as. See
 * identity.h for the contracts and docs/internals/runtime.md for the
 * permission table. errno becomes accel errors and sentences here.
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/proc/cgroup.h"
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

/* ---- is the range the machine's to give? ---- */

#define DEFS_MAX (64u * 1024u) /* bytes of login.defs or a map read */

/* A range of ids that something else on the machine hands out. */
struct id_range {
    uint64_t lo, hi;     /* inclusive */
    const char *what;    /* "UID_MIN-UID_MAX of /etc/login.defs (...)" */
};

static const struct id_range fixed_ranges[] = {
    {0, 99, "the static system ids of Debian's base-passwd (0-99)"},
    {60001, 60513, "systemd-homed's users (60001-60513)"},
    {60514, 60577, "the host users systemd-nspawn maps into containers "
                   "(60514-60577)"},
    {61184, 65519, "systemd's DynamicUser= service users (61184-65519)"},
    {65534, 65535, "nobody and the 16-bit -1 (65534-65535)"},
    {524288, 1879048191, "systemd-nspawn's container uid ranges "
                         "(524288-1879048191)"},
    {2147352576, 2147418111, "systemd's foreign uid range "
                             "(2147352576-2147418111)"},
};

/* The value of key in the text of login.defs (a "KEY VALUE" line; the last
 * one counts, as in shadow), or dflt when there is none or it is not a
 * number. */
static uint64_t defs_value(const char *defs, const char *key, uint64_t dflt)
{
    size_t kl = strlen(key);
    uint64_t v = dflt;

    for (const char *l = defs; l != NULL && *l; l = strchr(l, '\n')) {
        unsigned long long n;
        char *end = NULL;

        l += *l == '\n';
        l += strspn(l, " \t");
        if (strncmp(l, key, kl) != 0 || (l[kl] != ' ' && l[kl] != '\t'))
            continue;
        errno = 0;
        n = strtoull(l + kl, &end, 0);
        if (errno == 0 && end != l + kl && (*end == '\n' || *end == '\0' ||
                                            *end == ' ' || *end == '\t'))
            v = n;
    }
    return v;
}

/* The six ranges of login.defs into out (6 entries). */
static void defs_ranges(const char *defs, struct id_range *out)
{
    static const char *const what[] = {
        "UID_MIN-UID_MAX of " IDENTITY_LOGIN_DEFS " (regular users)",
        "SYS_UID_MIN-SYS_UID_MAX of " IDENTITY_LOGIN_DEFS " (system users)",
        "SUB_UID_MIN-SUB_UID_MAX of " IDENTITY_LOGIN_DEFS
        " (subordinate uids of /etc/subuid)",
        "GID_MIN-GID_MAX of " IDENTITY_LOGIN_DEFS " (regular groups)",
        "SYS_GID_MIN-SYS_GID_MAX of " IDENTITY_LOGIN_DEFS " (system groups)",
        "SUB_GID_MIN-SUB_GID_MAX of " IDENTITY_LOGIN_DEFS
        " (subordinate gids of /etc/subgid)"};
    static const char *const pre[] = {"U", "G"};

    for (int k = 0; k < 2; k++) {
        char key[16];
        uint64_t min, max, smin, smax, bmin, bmax;

        snprintf(key, sizeof key, "%sID_MIN", pre[k]);
        min = defs_value(defs, key, 1000);
        snprintf(key, sizeof key, "%sID_MAX", pre[k]);
        max = defs_value(defs, key, 60000);
        snprintf(key, sizeof key, "SYS_%sID_MIN", pre[k]);
        smin = defs_value(defs, key, 100);
        snprintf(key, sizeof key, "SYS_%sID_MAX", pre[k]);
        smax = defs_value(defs, key, min > 0 ? min - 1 : 0);
        snprintf(key, sizeof key, "SUB_%sID_MIN", pre[k]);
        bmin = defs_value(defs, key, 100000);
        snprintf(key, sizeof key, "SUB_%sID_MAX", pre[k]);
        bmax = defs_value(defs, key, 600100000);
        out[3 * k] = (struct id_range){min, max, what[3 * k]};
        out[3 * k + 1] = (struct id_range){smin, smax, what[3 * k + 1]};
        out[3 * k + 2] = (struct id_range){bmin, bmax, what[3 * k + 2]};
    }
}

/* The first id of [lo, hi] that the "inside outside count" lines of a
 * user namespace map do not map, or -1 when all are mapped. */
static int64_t first_unmapped(const char *map, uint32_t lo, uint32_t hi)
{
    uint64_t cur = lo;
    bool moved = true;

    while (cur <= hi && moved) {
        moved = false;
        for (const char *l = map; l != NULL && *l; l = strchr(l, '\n')) {
            unsigned long long in, outside, count;

            l += *l == '\n';
            if (sscanf(l, "%llu %llu %llu", &in, &outside, &count) == 3 &&
                in <= cur && cur < in + count) {
                cur = in + count;
                moved = true;
                break;
            }
        }
    }
    return cur <= hi ? (int64_t)cur : -1;
}

static enum accel_err range_refused(char **cause, char *sentence)
{
    if (cause != NULL)
        *cause = sentence;
    else
        free(sentence);
    return ACCEL_EINVAL;
}

/* The sentence of a range that overlaps r; login.defs ranges say their
 * values (the fixed ones have them in their text). */
static enum accel_err overlap_refused(char **cause, uint32_t lo, uint32_t hi,
                                      const struct id_range *r, bool values)
{
    char *where = values ? xasprintf("%s, %llu-%llu", r->what,
                                     (unsigned long long)r->lo,
                                     (unsigned long long)r->hi)
                         : xstrdup(r->what);
    char *s = xasprintf("--app-uid-range %u-%u overlaps %s: the machine may "
                        "give those ids to others, who would then own the "
                        "apps' files and processes; choose a range outside "
                        "it (the default is %u-%u)", lo, hi, where,
                        IDENTITY_UID_LO_DEFAULT, IDENTITY_UID_HI_DEFAULT);

    free(where);
    return range_refused(cause, s);
}

enum accel_err identity_range_check(uint32_t lo, uint32_t hi,
                                    const char *login_defs,
                                    const char *uid_map, const char *gid_map,
                                    char **cause)
{
    struct id_range defs[6];
    const struct id_range *r;
    const char *maps[2] = {uid_map, gid_map};
    int64_t miss;

    defs_ranges(login_defs, defs);
    for (size_t i = 0; i < 6 + sizeof(fixed_ranges) / sizeof(*fixed_ranges);
         i++) {
        r = i < 6 ? &defs[i] : &fixed_ranges[i - 6];
        if (r->lo <= r->hi && lo <= r->hi && r->lo <= hi)
            return overlap_refused(cause, lo, hi, r, i < 6);
    }
    for (int k = 0; k < 2; k++) {
        miss = maps[k] != NULL ? first_unmapped(maps[k], lo, hi) : -1;
        if (miss >= 0)
            return range_refused(cause, xasprintf(
                "--app-uid-range %u-%u: %s %lld is not mapped in acceld's "
                "user namespace (/proc/self/%s), so no app could run as "
                "it; choose a range that the map covers", lo, hi,
                k ? "gid" : "uid", (long long)miss,
                k ? "gid_map" : "uid_map"));
    }
    return ACCEL_OK;
}

/* The text of a small file (at most DEFS_MAX bytes), or NULL. Caller
 * frees. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "re");
    char *buf;
    size_t n;

    if (f == NULL)
        return NULL;
    buf = xmalloc(DEFS_MAX + 1);
    n = fread(buf, 1, DEFS_MAX, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

enum accel_err identity_check_machine_range(uint32_t lo, uint32_t hi,
                                            char **cause)
{
    char *defs = read_text(IDENTITY_LOGIN_DEFS), *um = NULL, *gm = NULL;
    enum accel_err rc;

    if (geteuid() == 0) { /* only root changes uids */
        um = read_text("/proc/self/uid_map");
        gm = read_text("/proc/self/gid_map");
    }
    rc = identity_range_check(lo, hi, defs, um, gm, cause);
    free(defs);
    free(um);
    free(gm);
    return rc;
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

/* ---- the uids made visible to NSS (systemd userdb drop-ins) ---- */

/*
 * With --userdb-dir DIR (the package: /run/userdb, which nss-systemd reads
 * without any daemon), every uid acceld gives is registered there: a user
 * and a group record "accel-<name>" with that number, as the JSON files
 * and <number>.user/.group links systemd's userdb drop-in format names.
 * getent, ls -l and ps then show the apps' uids by name, and whatever
 * allocates ids through NSS (systemd's DynamicUser=, useradd) skips them.
 * A retired uid (its user removed) stays registered, as
 * accel-removed-<uid>, since its files are kept. The records are written
 * whole (temporary file + rename); a failure is logged, nothing else.
 */
#define USERDB_PREFIX "accel-"

/* Whether the record at path is another number's than id (its "uid" for
 * a user, "gid" for a group): a record that is missing or does not say is
 * nobody else's. */
static bool userdb_others(const char *path, const char *key, uint32_t id)
{
    json_t *rec = json_load_file(path, 0, NULL);
    json_t *v = json_object_get(rec, key);
    bool others = json_is_integer(v) && json_integer_value(v) != (json_int_t)id;

    json_decref(rec);
    return others;
}

/* Write file (a record of number id, key "uid" or "gid") in dir, unless
 * it holds another number's record: that one is never rewritten (false). */
static bool userdb_put(const char *dir, const char *file, const char *key,
                       uint32_t id, const char *text)
{
    char *path = xasprintf("%s/%s", dir, file);
    char *tmp = xasprintf("%s/.%s.tmp", dir, file);
    size_t len = strlen(text);
    int fd = -1;
    bool mine = false;

    if (userdb_others(path, key, id)) {
        log_warn("%s records another %s than %u: not rewritten", path, key,
                 id);
        goto out;
    }
    mine = true;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
              0644);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len || close(fd) != 0 ||
        rename(tmp, path) != 0) {
        log_warn("cannot register %s in %s: %s", file, dir, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
    }
out:
    free(path);
    free(tmp);
    return mine;
}

static void userdb_link(const char *dir, uint32_t id, const char *kind,
                        const char *target)
{
    char *path = xasprintf("%s/%u.%s", dir, id, kind);
    char *tmp = xasprintf("%s/.%u.%s.tmp", dir, id, kind);

    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, path) != 0) {
        log_warn("cannot register %u.%s in %s: %s", id, kind, dir,
                 strerror(errno));
        unlink(tmp);
    }
    free(path);
    free(tmp);
}

/* The record name of an accel name: "accel-alice"; a retired one,
 * "~alice.65537", is "accel-removed-65537". */
static char *userdb_name(const char *name, uint32_t uid)
{
    return name[0] == '~'
               ? xasprintf(USERDB_PREFIX IDENTITY_RETIRED_PREFIX "%u", uid)
                          : xasprintf(USERDB_PREFIX "%s", name);
}

static void userdb_register(const struct accel_daemon *d, const char *name,
                            uint32_t uid)
{
    const char *dir = d->cfg.userdb_dir;
    char *un, *file, *text;

    if (dir == NULL || !d->uid_drop)
        return;
    un = userdb_name(name, uid);
    file = xasprintf("%s.user", un);
    text = xasprintf("{\"userName\":\"%s\",\"uid\":%u,\"gid\":%u,"
                     "\"realName\":\"accel user %s\",\"shell\":"
                     "\"/usr/sbin/nologin\",\"disposition\":\"regular\","
                     "\"locked\":true}\n", un, uid, uid, name);
    if (userdb_put(dir, file, "uid", uid, text))
        userdb_link(dir, uid, "user", file);
    free(file);
    free(text);
    file = xasprintf("%s.group", un);
    text = xasprintf("{\"groupName\":\"%s\",\"gid\":%u,"
                     "\"disposition\":\"regular\"}\n", un, uid);
    if (userdb_put(dir, file, "gid", uid, text))
        userdb_link(dir, uid, "group", file);
    free(file);
    free(text);
    free(un);
}

static void userdb_unregister(const struct accel_daemon *d, const char *name,
                              uint32_t uid)
{
    static const char *const kinds[] = {"user", "group"};
    static const char *const keys[] = {"uid", "gid"};
    char *un, *path;

    if (d->cfg.userdb_dir == NULL || !d->uid_drop)
        return;
    un = userdb_name(name, uid);
    for (int k = 0; k < 2; k++) {
        path = xasprintf("%s/%s.%s", d->cfg.userdb_dir, un, kinds[k]);
        if (!userdb_others(path, keys[k], uid))
            unlink(path);
        free(path);
        path = xasprintf("%s/%u.%s", d->cfg.userdb_dir, uid, kinds[k]);
        unlink(path);
        free(path);
    }
    free(un);
}

/* At start: make the directory (0755), or turn registration off (and say
 * so) when it is unusable; then register every uid known. */
static void userdb_start(struct accel_daemon *d)
{
    struct stat st;

    if (d->cfg.userdb_dir == NULL || !d->uid_drop)
        return;
    if (mkdir(d->cfg.userdb_dir, 0755) != 0 && errno != EEXIST)
        log_warn("cannot create --userdb-dir %s: %s", d->cfg.userdb_dir,
                 strerror(errno));
    if (lstat(d->cfg.userdb_dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
        log_warn("--userdb-dir %s is not a directory of uid %u that no one "
                 "else may write: the apps' uids are not registered",
                 d->cfg.userdb_dir, (unsigned)geteuid());
        free(d->cfg.userdb_dir);
        d->cfg.userdb_dir = NULL;
        return;
    }
    for (size_t i = 0; i < d->nids; i++)
        userdb_register(d, d->ids[i].name, d->ids[i].uid);
    log_info("the apps' %zu uids are registered in %s (NSS shows them as "
             USERDB_PREFIX "<name>)", d->nids, d->cfg.userdb_dir);
}

/* The passwd user or group that NSS knows with number id, as "user 'x'"
 * or "group 'x'" (allocated), or NULL when NSS knows neither. A record of
 * acceld's own for `mine` (accel-<mine>, see above; NULL: none is) is not
 * someone else's and is not reported. */
static char *nss_holder_but(uint32_t id, const char *mine)
{
    char *buf = xmalloc(PW_BUF), *who = NULL;
    char *own = mine ? userdb_name(mine, id) : NULL;
    struct passwd pw, *pwp = NULL;
    struct group gr, *grp = NULL;

    getpwuid_r((uid_t)id, &pw, buf, PW_BUF, &pwp);
    if (pwp != NULL && (own == NULL || strcmp(pwp->pw_name, own) != 0))
        who = xasprintf("user '%s'", pwp->pw_name);
    if (who == NULL) {
        getgrgid_r((gid_t)id, &gr, buf, PW_BUF, &grp);
        if (grp != NULL && (own == NULL || strcmp(grp->gr_name, own) != 0))
            who = xasprintf("group '%s'", grp->gr_name);
    }
    free(own);
    free(buf);
    return who;
}

static char *nss_holder(uint32_t id)
{
    return nss_holder_but(id, NULL);
}

/* A uid or gid the machine already uses (NSS: passwd or group, LDAP,
 * systemd's dynamic users...): skipped, and said so. */
static bool system_busy(uint32_t id, void *ctx)
{
    char *who = nss_holder(id);

    (void)ctx;
    if (who == NULL)
        return false;
    log_warn("uid %u of --app-uid-range is already the system's %s: "
             "skipped (not given to an accel user)", id, who);
    free(who);
    return true;
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
    userdb_register(d, name, uid);
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
        userdb_unregister(d, name, d->ids[k].uid);
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
    rc = state_tx_end(d, rc);
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
    /* before identity_start has chosen (a user removed while the store
     * opens): the place every acceld before the fallback used */
    if (d->home_root == NULL)
        return xasprintf("%s/home/%s", d->cfg.data_dir, owner);
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
    /* in this order: run before run/apps */
    static const struct {
        const char *name;
        mode_t mode;
    } subdirs[] = {{"logs", 0700},
                   {"home", 0711},
                   {"run", 0711},
                   {"run/apps", 0711},
                   {"run/ledgers", 0711}};
    const char *dir = d->cfg.data_dir;
    char *p, *block;

    set_mode(dir, 0711);
    for (size_t i = 0; i < sizeof(private_files) / sizeof(*private_files);
         i++) {
        p = xasprintf("%s/%s", dir, private_files[i]);
        set_mode(p, 0600);
        free(p);
    }
    for (size_t i = 0; i < sizeof(subdirs) / sizeof(*subdirs); i++) {
        p = xasprintf("%s/%s", dir, subdirs[i].name);
        make_dir(p, subdirs[i].mode);
        free(p);
    }
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
    bool inside = d->home_root == NULL || strcmp(def, d->home_root) == 0;

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

/* Every uid already given that NSS now knows as someone else's (a passwd
 * entry added since, or a systemd dynamic user, which nss-systemd shows
 * while its service runs): the apps of that name do not start (see
 * owner_uid_clash), and this says why at start. */
static void warn_shared_uids(struct accel_daemon *d)
{
    for (size_t i = 0; d->uid_drop && i < d->nids; i++) {
        char *who = nss_holder_but(d->ids[i].uid, d->ids[i].name);

        if (who != NULL)
            log_warn("uid %u of accel user %s is also the system's %s: its "
                     "apps will not start while the system knows that uid",
                     d->ids[i].uid, d->ids[i].name, who);
        free(who);
    }
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
    userdb_start(d); /* the loaded uids; assign_all's new ones follow */
    rc = assign_all(d);
    warn_shared_uids(d);
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

/* Is the owner's uid someone else's too by now (NSS knows it)? Then *cause
 * says so: running the app as that uid would let it signal and read what
 * the other one owns. */
static bool owner_uid_clash(const struct app *a, uint32_t uid, char **cause)
{
    char *who = nss_holder_but(uid, a->owner);

    if (who == NULL)
        return false;
    *cause = xasprintf("'%s' cannot start: uid %u of its owner %s is also "
                       "the system's %s", a->name, uid, a->owner, who);
    free(who);
    return true;
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
    if (d->uid_drop && owner_uid_clash(a, uid, cause))
        return ACCEL_ECONFLICT;
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
