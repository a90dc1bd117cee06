/* SPDX-License-Identifier: MIT */
/*
 * homepath.h: a path acceld uses on a person's behalf inside that person's
 * home (a container app's volume source, SPEC 8.2.1), resolved beneath the
 * home without following any link and made, when missing, as the owner,
 * never as root. Not for acceld's own files (appsetup.c, identity.c).
 */
#ifndef ACCEL_DAEMON_NODE_PROC_HOMEPATH_H
#define ACCEL_DAEMON_NODE_PROC_HOMEPATH_H

#include <stdbool.h>
#include <sys/types.h>

#include "accel/accel.h"

/* Whose home, and as whom what is missing is made. */
struct homepath_owner {
    const char *home; /* the home's absolute path (a real directory) */
    uid_t uid;        /* what is resolved must be this uid's */
    gid_t gid;        /* the group a made directory gets */
    bool drop;        /* make as uid:gid in a child (acceld is root) */
};

/*
 * Resolve path (relative, or absolute inside o->home) beneath o->home
 * without following a link: openat2 with RESOLVE_BENEATH,
 * RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV, so a
 * component (the last included) that is a link, a ".." out of the home or
 * a mount point is refused; what is found must be o->uid's (a hard link
 * to another's file is). With create, each missing directory is first made
 * (0700) by a child running as o->uid:o->gid, component by component with
 * O_NOFOLLOW. field names the manifest field in a refusal's sentence.
 * *out_path (set only on success; the caller frees): the home's path
 * joined with the relative path. Returns ACCEL_OK; ACCEL_ENOTFOUND when
 * something is missing and !create (no cause); ACCEL_EFORBIDDEN with an
 * allocated *cause naming field and the rule; ACCEL_ESYS with *cause.
 */
enum accel_err homepath_resolve(const struct homepath_owner *o,
                                const char *path, /* the source's text */
                                const char *field, /* "run.volumes[0].source" */
                                bool create, char **out_path, char **cause);

#endif
