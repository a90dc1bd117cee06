/* SPDX-License-Identifier: MIT */
/*
 * identity.h: who an app runs as (SPEC 3, 8.2). Every accel user name (the
 * "shared" owner included) gets its own Unix uid, allocated by acceld from
 * --app-uid-range and kept in the store for good; the gid has the same
 * number. An app runs as its owner's uid with a private HOME under
 * <data-dir>/home/<owner>; an admin's manifest may name run.user instead.
 * This module also lays out the permissions of the data directory so that
 * an app reaches nothing there but what it needs (docs/internals/runtime.md
 * has the table).
 *
 * When acceld is not root it cannot change uids: apps then run as acceld's
 * own user, and the runtime reports that containment by uid is off
 * (identity_status) instead of claiming it.
 *
 * What it is not: the child-side code (proc.c drops the privileges after
 * the fork) or the permission rules of the API (ops.c refuses a member's
 * run.user). Functions taking d need d->lock held unless stated.
 */
#ifndef ACCEL_DAEMON_NODE_PROC_IDENTITY_H
#define ACCEL_DAEMON_NODE_PROC_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"

struct accel_daemon;
struct app;

/* The default --app-uid-range: accel's own, outside every range that the
 * machine hands out (login.defs' regular, system and subordinate ids,
 * systemd's homed, DynamicUser= and container ranges, nobody); see
 * docs/internals/runtime.md. It used to be 61184-65519, systemd's
 * DynamicUser= range: uids given from it then are kept. */
#define IDENTITY_UID_LO_DEFAULT 65536u
#define IDENTITY_UID_HI_DEFAULT 99999u
#define IDENTITY_LOGIN_DEFS "/etc/login.defs"
/* A retired uid's NSS record is accel-removed-<uid> (--userdb-dir): no
 * user may be named so, which keeps the two name spaces apart. */
#define IDENTITY_RETIRED_PREFIX "removed-"

/* A name's uid, in memory (d->ids); loaded from and written to the store. */
struct identity_rec {
    char *name;          /* user name or "shared" */
    uint32_t uid;        /* also the gid */
};

/* What an app's process runs as; filled by identity_for_app. */
struct identity_run {
    bool drop;           /* change uid/gid in the child (acceld is root) */
    uid_t uid;           /* uid to run as (acceld's own when !drop) */
    gid_t gid;           /* its only group */
    char *user;          /* USER and LOGNAME */
    char *home;          /* HOME (exists; for an owner: 0700, owned by uid) */
};

/*
 * Parse "LO-HI" (decimal, 1 <= LO <= HI < 2^31-1) into *lo and *hi (set
 * only on success). ACCEL_EINVAL otherwise; *cause (may be NULL) gets an
 * allocated sentence naming the option.
 */
enum accel_err identity_parse_range(const char *s, uint32_t *lo, uint32_t *hi,
                                    char **cause);

/*
 * Pure: may [lo, hi] be handed to apps on this machine? It may not
 * overlap the ranges that login_defs (the text of /etc/login.defs; NULL
 * or a missing key = shadow's defaults) gives to useradd and newuidmap
 * (UID_MIN-UID_MAX, SYS_UID_MIN-SYS_UID_MAX, SUB_UID_MIN-SUB_UID_MAX and
 * the GID ones, as the gid has the same number), nor systemd's allocation
 * ranges (homed 60001-60513, nspawn's host users 60514-60577,
 * DynamicUser= 61184-65519, containers 524288-1879048191, foreign
 * 2147352576-2147418111), nor 0-99 (base-passwd's static ids) nor
 * 65534-65535 (nobody, the 16-bit -1). With
 * uid_map and gid_map (the text of /proc/self/uid_map and gid_map; NULL =
 * not checked) every id must be mapped in acceld's user namespace.
 * ACCEL_EINVAL with *cause (may be NULL) an allocated sentence naming
 * --app-uid-range, the range it collides with and where that comes from.
 */
enum accel_err identity_range_check(uint32_t lo, uint32_t hi,
                                    const char *login_defs,
                                    const char *uid_map, const char *gid_map,
                                    char **cause);

/*
 * identity_range_check of [lo, hi] against this machine's /etc/login.defs
 * and, when acceld is root, its /proc/self/uid_map and gid_map. Called at
 * start, before anything is opened or written.
 */
enum accel_err identity_check_machine_range(uint32_t lo, uint32_t hi,
                                            char **cause);

/*
 * Pure allocation: the lowest uid in [lo, hi] that is not in taken[0..n)
 * and for which busy (may be NULL) returns false (e.g. a uid or gid of
 * /etc/passwd or /etc/group). *out set only on success. ACCEL_ECONFLICT
 * when every uid of the range is taken.
 */
enum accel_err identity_pick(uint32_t lo, uint32_t hi, const uint32_t *taken,
                             size_t n, bool (*busy)(uint32_t uid, void *ctx),
                             void *ctx, uint32_t *out);

/* The uid of name, 0 when it has none yet. */
uint32_t identity_uid(const struct accel_daemon *d, const char *name);

/*
 * Inside the caller's open store transaction: give name a uid if it has
 * none (the lowest free one of the range, skipping, with a log line, each
 * uid that NSS knows as a user or group) and write it. *out_uid gets the
 * uid (set only on success); *out_new is set to true when a row was
 * written, and the caller must then call identity_remember after a
 * successful commit. Returns ACCEL_OK, ACCEL_ECONFLICT (the range is
 * full), or the store's error (the transaction is then rolled back).
 */
enum accel_err identity_assign(struct accel_daemon *d, const char *name,
                               uint32_t *out_uid, bool *out_new);

/*
 * Inside the caller's open store transaction: retire the uid of name (a
 * user being removed, SPEC 3). Its row becomes "~<name>.<uid>", a name no
 * user can have: the uid stays taken for good, and the name, if it comes
 * back, gets a fresh uid. *out_uid gets the uid, 0 when name has none
 * (then nothing is written). After a successful commit the caller calls
 * identity_retired. Returns ACCEL_OK or the store's error (the
 * transaction is then rolled back).
 */
enum accel_err identity_retire(struct accel_daemon *d, const char *name,
                               uint32_t *out_uid);

/*
 * After the commit of identity_retire (or when another node's removal
 * arrives through the watch): d->ids follows, and this node's
 * <data-dir>/home/<name> is moved aside to
 * <data-dir>/removed-homes/<name>.<uid> (that directory 0700, acceld's
 * own; the files keep the retired uid, which no one is given again), so
 * a new user of the name starts with an empty home. A failed move is
 * logged; identity_for_app never hands a home owned by another accel uid
 * to a name either.
 */
void identity_retired(struct accel_daemon *d, const char *name, uint32_t uid);

/* Record name -> uid in d->ids (after the commit). Copies name. */
void identity_remember(struct accel_daemon *d, const char *name, uint32_t uid);

/* The in-memory table loaded from the store (store_loader callback;
 * ctx is the daemon). */
enum accel_err identity_load_row(void *ctx, const char *name, int64_t uid);

/*
 * At start (lock not needed, nothing else runs yet): decide whether uids
 * can be changed (acceld is root), give every user, every app owner and
 * "shared" a uid (one transaction), and set the permissions of the data
 * directory. A full range is logged and leaves those names without a uid
 * (their apps then fail to start with a sentence saying why). Returns
 * ACCEL_OK or the store's error.
 */
enum accel_err identity_start(struct accel_daemon *d);

/*
 * Who app a runs as: its owner's uid, HOME = <data-dir>/home/<owner>
 * (created 0700 and owned by that uid when missing or wrong), or the
 * run.user of an admin's manifest (its passwd entry when there is one).
 * On failure *cause gets an allocated sentence and out is untouched:
 * ACCEL_ENOTFOUND (run.user unknown), ACCEL_ECONFLICT (no uid: range full;
 * or, when acceld is root, NSS knows the owner's uid as another user or
 * group, e.g. a systemd dynamic user holding a uid of the old range),
 * ACCEL_EFORBIDDEN (run.user while acceld is not root), ACCEL_ESYS (home).
 * Release out with identity_run_release.
 */
enum accel_err identity_for_app(struct accel_daemon *d, const struct app *a,
                                struct identity_run *out, char **cause);
void identity_run_release(struct identity_run *r);

/* Where the apps' homes go when others cannot reach the data directory
 * (identity_start decides, d->home_root): one directory per data dir. */
#define IDENTITY_HOME_FALLBACK "/var/lib/accel-homes"
/* The home of owner's apps, <d->home_root>/<owner> (caller frees). */
char *identity_home(const struct accel_daemon *d, const char *owner);

/*
 * Resolve a run.user value: a user name of this machine or a decimal uid
 * (any uid, root included). *uid, *gid (the passwd group, or the uid's
 * number when there is no entry) set only on success; home (may be NULL)
 * gets the passwd home or NULL. ACCEL_ENOTFOUND for an unknown name.
 */
enum accel_err identity_resolve_user(const char *spec, uid_t *uid, gid_t *gid,
                                     char **home);

/*
 * The uid and gid app a's processes run as, without creating anything (for
 * checks such as the time-slice broker's SO_PEERCRED): its owner's uid, or
 * its run.user's, or acceld's own when acceld is not root. ACCEL_ENOTFOUND
 * when there is none (no uid allocated, or run.user unknown); *uid and
 * *gid set only on ACCEL_OK.
 */
enum accel_err identity_app_uid(const struct accel_daemon *d,
                                const struct app *a, uid_t *uid, gid_t *gid);

#endif /* ACCEL_DAEMON_NODE_PROC_IDENTITY_H */
