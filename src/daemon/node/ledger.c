/* SPDX-License-Identifier: MIT */
/*
 * ledger.c: create, read, resize and remove memory-slicing ledgers, and
 * write the shim's read-only config. See ledger.h for the contracts and
 * include/accel/ledger.h for the shared layout and protocol.
 */
#include "common/accel_setup.h"
#include "daemon/node/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/ledger.h"

enum accel_err ledger_path(char *out, size_t cap, const char *rundir,
                           const char *app, int ordinal)
{
    int n;

    if (app == NULL || app[0] == '\0' || strchr(app, '/') != NULL ||
        strstr(app, "..") != NULL || ordinal < 0)
        return ACCEL_EINVAL;
    n = snprintf(out, cap, "%s/ledgers/%s-dev%d.ledger", rundir, app, ordinal);
    return n < 0 || (size_t)n >= cap ? ACCEL_ETOOBIG : ACCEL_OK;
}

/* mkdir -p of the directory part of `path`. */
static void make_parents(const char *path)
{
    char dir[512];
    size_t len = strlen(path);

    if (len >= sizeof(dir))
        return;
    memcpy(dir, path, len + 1);
    for (char *p = dir + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
}

static struct accel_ledger *map_fd(int fd)
{
    void *m = mmap(NULL, ACCEL_LEDGER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    return m == MAP_FAILED ? NULL : m;
}

static void format(struct accel_ledger *l, const char *app, int ordinal,
                   const char *uuid)
{
    memset(l, 0, ACCEL_LEDGER_SIZE);
    l->major = ACCEL_LEDGER_MAJOR;
    l->minor = ACCEL_LEDGER_MINOR;
    l->header_size = (uint32_t)offsetof(struct accel_ledger, slots);
    l->slot_count = ACCEL_LEDGER_SLOTS;
    l->device = ordinal;
    snprintf(l->app, sizeof(l->app), "%s", app ? app : "");
    snprintf(l->uuid, sizeof(l->uuid), "%s", uuid ? uuid : "");
    atomic_store_explicit((_Atomic uint64_t *)&l->magic, ACCEL_LEDGER_MAGIC,
                          memory_order_release);
}

enum accel_err ledger_create(const char *path, const char *app, int ordinal,
                             const char *uuid, uint64_t limit, uid_t uid,
                             gid_t gid)
{
    enum accel_err result = ACCEL_ESYS;
    struct accel_ledger *l = NULL;
    struct stat st;
    int fd;

    make_parents(path);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0660);
    if (fd < 0)
        return ACCEL_ESYS;
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0)
        goto out;
    if (st.st_size < (off_t)ACCEL_LEDGER_SIZE &&
        ftruncate(fd, (off_t)ACCEL_LEDGER_SIZE) != 0)
        goto out;
    fchmod(fd, 0660);
    if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchown(fd, uid, gid) != 0)
        goto out;
    l = map_fd(fd);
    if (l == NULL)
        goto out;
    if (!accel_ledger_valid(l))
        format(l, app, ordinal, uuid);
    atomic_store(&l->limit, limit);
    atomic_fetch_add(&l->epoch, 1);
    result = ACCEL_OK;
out:
    if (l != NULL)
        munmap(l, ACCEL_LEDGER_SIZE);
    close(fd);
    return result;
}

/* Map an existing ledger; *out set only on ACCEL_OK. */
static enum accel_err open_existing(const char *path, struct accel_ledger **out)
{
    struct accel_ledger *l;
    struct stat st;
    int fd = open(path, O_RDWR | O_CLOEXEC);

    if (fd < 0)
        return errno == ENOENT ? ACCEL_ENOTFOUND : ACCEL_ESYS;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)ACCEL_LEDGER_SIZE) {
        close(fd);
        return ACCEL_EPARSE;
    }
    l = map_fd(fd);
    close(fd);
    if (l == NULL)
        return ACCEL_ESYS;
    if (!accel_ledger_valid(l)) {
        munmap(l, ACCEL_LEDGER_SIZE);
        return ACCEL_EPARSE;
    }
    *out = l;
    return ACCEL_OK;
}

enum accel_err ledger_set_limit(const char *path, uint64_t limit)
{
    struct accel_ledger *l;
    enum accel_err rc = open_existing(path, &l);

    if (rc != ACCEL_OK)
        return rc;
    atomic_store(&l->limit, limit);
    atomic_fetch_add(&l->epoch, 1);
    munmap(l, ACCEL_LEDGER_SIZE);
    return ACCEL_OK;
}

enum accel_err ledger_read(const char *path, struct ledger_usage *out)
{
    struct accel_ledger *l;
    enum accel_err rc = open_existing(path, &l);
    int64_t used;

    if (rc != ACCEL_OK)
        return rc;
    out->processes = accel_ledger_reclaim_all(l);
    used = atomic_load(&l->used);
    out->used = used < 0 ? 0 : (uint64_t)used;
    out->limit = atomic_load(&l->limit);
    out->peak = atomic_load(&l->peak);
    munmap(l, ACCEL_LEDGER_SIZE);
    return ACCEL_OK;
}

enum accel_err ledger_remove(const char *path)
{
    return unlink(path) == 0 || errno == ENOENT ? ACCEL_OK : ACCEL_ESYS;
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The config text into buf; -1 if it does not fit. */
static int config_text(char *buf, size_t cap, const char *app,
                       const struct ledger_device *devs, size_t n)
{
    size_t off = 0;
    int w = snprintf(buf, cap, "accel-shim 1\napp %s\n", app);

    for (size_t i = 0; w >= 0 && (size_t)w < cap - off && i < n; i++) {
        off += (size_t)w;
        w = 0;
        if (devs[i].ts_socket != NULL) {
            if (strchr(devs[i].ts_socket, ' ') != NULL)
                return -1;
            w = snprintf(buf + off, cap - off, "timeslice %d %s\n",
                         devs[i].ordinal, devs[i].ts_socket);
            if (w < 0 || (size_t)w >= cap - off || devs[i].path == NULL)
                continue;
            off += (size_t)w;
        }
        if (strchr(devs[i].path, ' ') != NULL)
            return -1;
        w = snprintf(buf + off, cap - off, "device %d %llu %s %s\n",
                     devs[i].ordinal, (unsigned long long)devs[i].limit,
                     devs[i].path, devs[i].uuid ? devs[i].uuid : "");
    }
    if (w < 0 || (size_t)w >= cap - off)
        return -1;
    return (int)(off + (size_t)w);
}

enum accel_err ledger_write_config(const char *path, const char *app,
                                   const struct ledger_device *devs, size_t n)
{
    char buf[8192], tmp[600];
    int len, fd;

    if (app == NULL || strchr(app, '\n') != NULL ||
        snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return ACCEL_EINVAL;
    len = config_text(buf, sizeof(buf), app, devs, n);
    if (len < 0)
        return ACCEL_EINVAL;
    make_parents(path);
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (fd < 0)
        return ACCEL_ESYS;
    if (write_all(fd, buf, (size_t)len) != 0 || fsync(fd) != 0) {
        close(fd);
        unlink(tmp);
        return ACCEL_ESYS;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return ACCEL_ESYS;
    }
    return ACCEL_OK;
}
