/* SPDX-License-Identifier: MIT */
/*
 * homepath.c: paths acceld uses on a person's behalf inside the person's
 * home, resolved beneath it without following a link, and made as the
 * owner (a child that drops to the owner's uid before it makes anything),
 * never as root (SPEC 8.2.1). See homepath.h.
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/homepath.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"

/* The part of path below home ("." for the home itself), or NULL when an
 * absolute path is not inside home by its text. */
static const char *below_home(const char *path, const char *home)
{
    size_t n = strlen(home);

    if (path[0] != '/')
        return path[0] != '\0' ? path : ".";
    if (strncmp(path, home, n) != 0 || (path[n] != '\0' && path[n] != '/'))
        return NULL;
    path += n;
    while (*path == '/')
        path++;
    return *path != '\0' ? path : ".";
}

/* In the child, as the owner: each component of rel (a private copy,
 * cut up here) made if missing and entered without following a link.
 * Only system calls: the parent has threads. */
static void make_components(const struct homepath_owner *o, char *rel)
{
    int dfd;
    char *next;

    if (o->drop && (setgroups(0, NULL) != 0 ||
                    setresgid(o->gid, o->gid, o->gid) != 0 ||
                    setresuid(o->uid, o->uid, o->uid) != 0))
        _exit(1);
    dfd = open(o->home, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        _exit(1);
    for (char *c = rel; c != NULL && *c != '\0'; c = next) {
        int nfd;
        next = strchr(c, '/');
        if (next != NULL)
            *next++ = '\0';
        if (*c == '\0' || strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0)
            _exit(1);
        if (mkdirat(dfd, c, 0700) != 0 && errno != EEXIST)
            _exit(1);
        nfd = openat(dfd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0)
            _exit(1);
        close(dfd);
        dfd = nfd;
    }
    _exit(0);
}

/* What is missing of rel made as the owner. Whether it could be is for
 * the resolution after it to say. */
static void make_as_owner(const struct homepath_owner *o, const char *rel)
{
    char *copy = xstrdup(rel); /* no malloc in the child */
    pid_t pid = fork();

    if (pid == 0)
        make_components(o, copy);
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    free(copy);
}

static enum accel_err refuse(const char *field, const char *path,
                             const char *why, char **cause)
{
    *cause = xasprintf("%s: %s %s: a source inside a home is resolved "
                       "beneath it without following a link and must be "
                       "its owner's", field, path, why);
    return ACCEL_EFORBIDDEN;
}

/* The resolution's errno as the answer: a link, an escape or a mount
 * point is refused; a missing part is ENOTFOUND. */
static enum accel_err resolve_error(int err, const char *field,
                                    const char *path, char **cause)
{
    if (err == ELOOP)
        return refuse(field, path, "is or passes through a link", cause);
    if (err == EXDEV)
        return refuse(field, path, "leads out of the home (\"..\" or a "
                      "mount point)", cause);
    if (err == ENOENT)
        return ACCEL_ENOTFOUND;
    if (err == ENOTDIR)
        return refuse(field, path, "passes through something that is not "
                      "a directory", cause);
    *cause = xasprintf("%s: cannot resolve %s: %s", field, path,
                       strerror(err));
    return ACCEL_ESYS;
}

enum accel_err homepath_resolve(const struct homepath_owner *o,
                                const char *path, const char *field,
                                bool create, char **out_path, char **cause)
{
    const char *rel = below_home(path, o->home);
    struct open_how how = {
        .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                   RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    struct stat st;
    int home, fd, err;

    if (rel == NULL)
        return refuse(field, path, "is not inside the home", cause);
    if (create)
        make_as_owner(o, rel);
    home = open(o->home, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (home < 0) {
        err = errno;
        return resolve_error(err == ENOTDIR ? ELOOP : err, field, path,
                             cause);
    }
    fd = (int)syscall(SYS_openat2, home, rel, &how, sizeof how);
    err = errno;
    close(home);
    if (fd < 0)
        return resolve_error(err, field, path, cause);
    /* O_PATH|O_NOFOLLOW opens a last component that is a link itself */
    if (fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
        close(fd);
        return resolve_error(ELOOP, field, path, cause);
    }
    if (fstat(fd, &st) != 0 || st.st_uid != o->uid) {
        close(fd);
        return refuse(field, path, "is not its owner's", cause);
    }
    close(fd);
    *out_path = strcmp(rel, ".") == 0 ? xstrdup(o->home)
                                      : xasprintf("%s/%s", o->home, rel);
    return ACCEL_OK;
}
