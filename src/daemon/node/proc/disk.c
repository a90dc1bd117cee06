/* SPDX-License-Identifier: MIT */
/*
 * disk.c: a bounded measurement of a directory tree and the data
 * directory's reserve (disk.h).
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/disk.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/quantity.h"
#include "common/util.h"

struct walk {
    dev_t dev;            /* the tree's file system */
    size_t entries, max;
    uint64_t bytes;
    bool over;            /* too many entries or too deep */
};

static void count(struct walk *w, const struct stat *sb)
{
    w->entries++;
    w->bytes += (uint64_t)sb->st_blocks * 512u;
    if (w->entries > w->max)
        w->over = true;
}

/* Walk the open directory fd (closed here) at depth. */
static void walk_dir(struct walk *w, int fd, unsigned depth)
{
    DIR *dir;
    struct dirent *e;

    if (depth > DISK_WALK_MAX_DEPTH) {
        w->over = true;
        close(fd);
        return;
    }
    dir = fdopendir(fd);
    if (dir == NULL) {
        close(fd);
        return;
    }
    while (!w->over && (e = readdir(dir)) != NULL) {
        struct stat sb;
        int sub;

        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd(dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* removed meanwhile */
        count(w, &sb);
        if (!S_ISDIR(sb.st_mode) || sb.st_dev != w->dev)
            continue;
        sub = openat(dirfd(dir), e->d_name,
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0)
            walk_dir(w, sub, depth + 1);
        else if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP)
            w->over = true; /* unreadable (acceld not root): not hidden */
    }
    closedir(dir);
}

enum accel_err disk_usage(const char *path, size_t max_entries,
                          uint64_t *out_bytes, size_t *out_entries)
{
    struct walk w = {.max = max_entries};
    struct stat sb;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0 || fstat(fd, &sb) < 0) {
        if (fd >= 0)
            close(fd);
        return ACCEL_ENOTFOUND;
    }
    w.dev = sb.st_dev;
    count(&w, &sb);
    walk_dir(&w, fd, 1);
    *out_bytes = w.bytes;
    if (out_entries != NULL)
        *out_entries = w.entries;
    return w.over ? ACCEL_ERANGE : ACCEL_OK;
}

#define UNLINKED_SEEN_MAX 4096 /* files told apart; more are all counted */

struct unlinked {
    dev_t dev;                    /* the file system measured */
    size_t fds, max_fds;          /* descriptors looked at, at most */
    uint64_t bytes;
    ino_t seen[UNLINKED_SEEN_MAX]; /* files counted already */
    size_t nseen;
};

/* Count the file behind one descriptor if it is unlinked and on u->dev. */
static void count_unlinked(struct unlinked *u, int fddir, const char *name)
{
    struct stat sb;

    if (fstatat(fddir, name, &sb, 0) != 0 || !S_ISREG(sb.st_mode) ||
        sb.st_nlink != 0 || sb.st_dev != u->dev)
        return;
    for (size_t i = 0; i < u->nseen; i++)
        if (u->seen[i] == sb.st_ino)
            return;
    if (u->nseen < UNLINKED_SEEN_MAX)
        u->seen[u->nseen++] = sb.st_ino;
    u->bytes += (uint64_t)sb.st_blocks * 512u;
}

/* The descriptors of process pid (a directory of proc, fd procfd). */
static void scan_fds(struct unlinked *u, int procfd, const char *pid)
{
    char *path = xasprintf("%s/fd", pid);
    int fddir = openat(procfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fddir >= 0 ? fdopendir(fddir) : NULL;
    struct dirent *e;

    free(path);
    if (dir == NULL) { /* the process is gone */
        if (fddir >= 0)
            close(fddir);
        return;
    }
    while (u->fds <= u->max_fds && (e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        u->fds++;
        count_unlinked(u, dirfd(dir), e->d_name);
    }
    closedir(dir);
}

/* Does process pid's /proc/<pid>/cgroup name a cgroup with mark in its
 * path (in any hierarchy)? */
static bool in_cgroups(int procfd, const char *pid, const char *mark)
{
    char *path = xasprintf("%s/cgroup", pid), buf[4096];
    int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;

    if (fd >= 0)
        close(fd);
    free(path);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return strstr(buf, mark) != NULL;
}

enum accel_err disk_unlinked_open(const char *proc_root, uint32_t uid,
                                  const char *cgroup_mark, dev_t dev,
                                  size_t max_fds, uint64_t *out_bytes)
{
    struct unlinked *u = xcalloc(1, sizeof(*u));
    int procfd = open(proc_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = procfd >= 0 ? fdopendir(dup(procfd)) : NULL;
    struct dirent *e;
    enum accel_err rc = ACCEL_EIO;

    u->dev = dev;
    u->max_fds = max_fds;
    if (dir == NULL)
        goto out;
    while (u->fds <= max_fds && (e = readdir(dir)) != NULL) {
        struct stat sb;
        if (e->d_name[0] < '1' || e->d_name[0] > '9' ||
            fstatat(procfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            sb.st_uid != (uid_t)uid ||
            (cgroup_mark != NULL &&
             !in_cgroups(procfd, e->d_name, cgroup_mark)))
            continue;
        scan_fds(u, procfd, e->d_name);
    }
    closedir(dir);
    *out_bytes = u->bytes;
    rc = u->fds > max_fds ? ACCEL_ERANGE : ACCEL_OK;
out:
    if (procfd >= 0)
        close(procfd);
    free(u);
    return rc;
}

void disk_format(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB",
                                        "PiB", "EiB"};
    double v = (double)bytes;
    size_t u = 0;

    if (bytes < 1024) {
        snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
        return;
    }
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof *units) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.1f %s", v, units[u]);
}

char *disk_check_reserve(const char *dir, int *out_status)
{
    return disk_check_room(dir, 0, NULL, out_status);
}

char *disk_check_room(const char *dir, uint64_t need, const char *what,
                      int *out_status)
{
    const char *env = getenv(DISK_RESERVE_ENV);
    uint64_t reserve = DISK_RESERVE_DEFAULT, avail;
    struct statvfs vs;
    char f[32], r[32];

    if (env != NULL && quantity_parse_bytes(env, &reserve) != ACCEL_OK) {
        *out_status = 500;
        return xasprintf("%s=\"%s\" is not a quantity of bytes (e.g. 64Mi, "
                         "or 0 for no reserve): nothing was changed; fix "
                         "acceld's environment", DISK_RESERVE_ENV, env);
    }
    if (statvfs(dir, &vs) < 0)
        return NULL; /* not ours to refuse: the store says what fails */
    avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
    if (avail > reserve && avail - reserve > need)
        return NULL;
    disk_format(avail, f, sizeof f);
    disk_format(reserve, r, sizeof r);
    *out_status = 507;
    if (need > 0 && avail > reserve) {
        char n[32];
        disk_format(need, n, sizeof n);
        return xasprintf("%s takes %s and the file system of the data "
                         "directory %s has %s free: it would leave less "
                         "than the reserve of %s (%s); free some space (or "
                         "lower the reserve) and try again", what, n, dir, f,
                         r, DISK_RESERVE_ENV);
    }
    return xasprintf("the file system of the data directory %s has %s free, "
                     "not more than the reserve of %s (%s): nothing was "
                     "changed; free some space (or lower the reserve) and "
                     "try again", dir, f, r, DISK_RESERVE_ENV);
}
