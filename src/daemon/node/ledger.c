/* SPDX-License-Identifier: MIT */
/*
 * ledger.c: create, read, re-limit and remove memory-slicing ledgers, and
 * write the shim's read-only config, all with pread/pwrite (never a
 * mapping: see below). See ledger.h for the contracts and
 * include/accel/ledger.h for the shared layout and protocol.
 */
#include "common/accel_setup.h"
#include "daemon/node/ledger.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
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

enum accel_err ledger_reclaim_socket_path(char *out, size_t cap,
                                         const char *rundir)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of the run directory */
    int n = snprintf(out, cap, "%s/reclaim.sock", rundir);

    if (n > 0 && (size_t)n < cap && (size_t)n < 108) /* sun_path */
        return ACCEL_OK;
    for (const char *c = rundir; *c != '\0'; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    n = snprintf(out, cap, "/tmp/accel-rc-%u/%016llx.sock",
                 (unsigned)getuid(), (unsigned long long)h);
    return n > 0 && (size_t)n < cap && (size_t)n < 108 ? ACCEL_OK
                                                       : ACCEL_ETOOBIG;
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

/*
 * acceld never maps a ledger. The app's processes hold the file open for
 * writing (they must, to charge their slots), so any of them can ftruncate
 * it; a mapping of ours would then fault with SIGBUS on the next access and
 * take acceld down with it (issue 25: a loop flipping the size between 4096
 * and 16888 bytes did so within seconds). What acceld needs it reads with
 * pread into its own buffer and writes with pwrite: a file that shrank
 * answers a short read, which is "not a ledger", never a signal.
 */

/* All of `len` bytes at `off`, read (or written, `out`); -1 on an error
 * or, reading, at the end of the file. */
static int io_all(int fd, void *buf, size_t len, off_t off, bool out)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n = out ? pwrite(fd, p, len, off) : pread(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        off += n;
        len -= (size_t)n;
    }
    return 0;
}

static int pread_all(int fd, void *buf, size_t len, off_t off)
{
    return io_all(fd, buf, len, off, false);
}

static int pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
    return io_all(fd, (void *)buf, len, off, true);
}

/*
 * Open a ledger without following a link or blocking on a FIFO, and only
 * if it is a regular file (the directory is acceld's, but the check costs
 * nothing). -1 with errno set otherwise.
 */
static int open_file(const char *path, int flags)
{
    struct stat st;
    int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0660);

    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

/* Read the whole ledger into *l: 0 when it is one of ours, -1 if it is
 * short, unreadable or of another layout. */
static int read_copy(int fd, struct accel_ledger *l)
{
    if (pread_all(fd, l, ACCEL_LEDGER_SIZE, 0) != 0)
        return -1;
    return accel_ledger_valid(l) ? 0 : -1;
}

static void format(struct accel_ledger *l, const char *app, int ordinal,
                   const char *uuid, uint64_t limit)
{
    memset(l, 0, ACCEL_LEDGER_SIZE);
    l->magic = ACCEL_LEDGER_MAGIC;
    l->major = ACCEL_LEDGER_MAJOR;
    l->minor = ACCEL_LEDGER_MINOR;
    l->header_size = (uint32_t)offsetof(struct accel_ledger, slots);
    l->slot_count = ACCEL_LEDGER_SLOTS;
    l->device = ordinal;
    snprintf(l->app, sizeof(l->app), "%s", app ? app : "");
    snprintf(l->uuid, sizeof(l->uuid), "%s", uuid ? uuid : "");
    atomic_store(&l->limit, limit);
    atomic_store(&l->epoch, 1);
}

/*
 * Store a new limit in an existing ledger, then bump its epoch. Each is one
 * aligned 8-byte pwrite; only acceld writes either field, and the shim
 * reads the limit with one atomic load and obeys the lower of it and its
 * read-only config.
 */
static int write_limit(int fd, const struct accel_ledger *l, uint64_t limit)
{
    uint64_t epoch = atomic_load(&l->epoch) + 1;

    if (atomic_load(&l->limit) != limit &&
        pwrite_all(fd, &limit, sizeof limit,
                   (off_t)offsetof(struct accel_ledger, limit)) != 0)
        return -1;
    return pwrite_all(fd, &epoch, sizeof epoch,
                      (off_t)offsetof(struct accel_ledger, epoch));
}

enum accel_err ledger_create(const char *path, const char *app, int ordinal,
                             const char *uuid, uint64_t limit, uid_t uid,
                             gid_t gid)
{
    enum accel_err result = ACCEL_ESYS;
    struct accel_ledger copy, *l = &copy; /* 17 KB, on the stack */
    int fd;

    make_parents(path);
    fd = open_file(path, O_RDWR | O_CREAT);
    if (fd < 0)
        return ACCEL_ESYS;
    if (read_copy(fd, l) == 0) { /* a restart: keep slots and usage */
        if (write_limit(fd, l, limit) != 0)
            goto out;
        /* no longer than a ledger, as in read_existing */
        if (ftruncate(fd, (off_t)ACCEL_LEDGER_SIZE) != 0)
            goto out;
    } else { /* new, or not one of ours: the file is cut to a fresh one */
        format(l, app, ordinal, uuid, limit);
        if (ftruncate(fd, 0) != 0 ||
            pwrite_all(fd, l, ACCEL_LEDGER_SIZE, 0) != 0)
            goto out;
    }
    if (fchmod(fd, 0660) != 0)
        goto out;
    if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchown(fd, uid, gid) != 0)
        goto out;
    result = ACCEL_OK;
out:
    close(fd);
    return result;
}

/*
 * Open and read an existing ledger into *l (caller's buffer); the fd is
 * returned in *fdp (caller closes) on ACCEL_OK. A file the app made longer
 * than a ledger (it may write anywhere in a file it holds open) is cut back
 * to one: the room past the end is not the app's to fill on acceld's disk,
 * and the cut leaves every process's mapping of the ledger whole.
 */
static enum accel_err read_existing(const char *path, struct accel_ledger *l,
                                    int *fdp)
{
    struct stat st;
    int fd = open_file(path, O_RDWR);

    if (fd < 0)
        return errno == ENOENT ? ACCEL_ENOTFOUND : ACCEL_ESYS;
    if (fstat(fd, &st) == 0 && st.st_size > (off_t)ACCEL_LEDGER_SIZE)
        (void)!ftruncate(fd, (off_t)ACCEL_LEDGER_SIZE);
    if (read_copy(fd, l) != 0) {
        close(fd);
        return ACCEL_EPARSE;
    }
    *fdp = fd;
    return ACCEL_OK;
}

enum accel_err ledger_set_limit(const char *path, uint64_t limit)
{
    struct accel_ledger l;
    int fd;
    enum accel_err rc = read_existing(path, &l, &fd);

    if (rc == ACCEL_OK) {
        if (write_limit(fd, &l, limit) != 0)
            rc = ACCEL_ESYS;
        close(fd);
    }
    return rc;
}

enum accel_err ledger_set_untracked(const char *path, uint64_t bytes)
{
    struct accel_ledger l;
    int64_t v = bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes;
    int fd;
    enum accel_err rc = read_existing(path, &l, &fd);

    if (rc != ACCEL_OK)
        return rc;
    if (atomic_load(&l.untracked) != v &&
        pwrite_all(fd, &v, sizeof v,
                   (off_t)offsetof(struct accel_ledger, untracked)) != 0)
        rc = ACCEL_ESYS;
    close(fd);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

int ledger_ctx_vote(uint64_t *votes, size_t n, uint64_t *out)
{
    uint64_t m, slack;
    size_t near = 0;

    if (n < LEDGER_CTX_VOTES)
        return 0;
    qsort(votes, n, sizeof *votes, cmp_u64);
    m = votes[(n - 1) / 2]; /* the lower median: no vote is invented */
    slack = m / 16;
    for (size_t i = 0; i < n; i++)
        near += (votes[i] >= m ? votes[i] - m : m - votes[i]) <= slack;
    if (near * 2 <= n)
        return 0;
    *out = m;
    return 1;
}

/* Most ledgers read for one seed (the directory holds one per app and
 * device of the node). */
#define SEED_SCAN 1024

/* Is the file name "<app>-dev<N>.ledger" (acceld's name) of an app in
 * voters? */
static bool voter_file(const char *name, const char *const *voters,
                       size_t nvoters)
{
    size_t len = strlen(name), end;

    if (len < 7 || strcmp(name + len - 7, ".ledger") != 0)
        return false;
    end = len - 7;
    while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9')
        end--;
    if (end == len - 7 || end < 4 || strncmp(name + end - 4, "-dev", 4) != 0)
        return false;
    end -= 4;
    for (size_t i = 0; i < nvoters; i++)
        if (strlen(voters[i]) == end && strncmp(name, voters[i], end) == 0)
            return true;
    return false;
}

enum accel_err ledger_seed_ctx(const char *path, const char *uuid,
                               const char *const *voters, size_t nvoters,
                               uint64_t *seeded)
{
    struct accel_ledger *l = malloc(ACCEL_LEDGER_SIZE);
    uint64_t *votes = calloc(SEED_SCAN, sizeof *votes), seed, v;
    char dir[512], other[768];
    enum accel_err rc;
    const char *slash = strrchr(path, '/');
    size_t n = 0;
    struct dirent *e;
    DIR *dp = NULL;
    int fd = -1;

    if (seeded != NULL)
        *seeded = UINT64_MAX;
    if (l == NULL || votes == NULL) {
        rc = ACCEL_ESYS;
        goto out;
    }
    rc = read_existing(path, l, &fd);
    if (rc != ACCEL_OK)
        goto out;
    if (atomic_load(&l->ctx_cost) != 0 || uuid == NULL || uuid[0] == '\0' ||
        slash == NULL || (size_t)(slash - path) >= sizeof dir)
        goto out; /* measured already (a restart), or no device to match */
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    /* the voters' files, "<app>-dev<N>.ledger" (acceld names them; the
     * app field inside is the app's to write) */
    dp = nvoters > 0 ? opendir(dir) : NULL;
    while (dp != NULL && n < SEED_SCAN && (e = readdir(dp)) != NULL) {
        int ofd;
        if (!voter_file(e->d_name, voters, nvoters) ||
            snprintf(other, sizeof other, "%s/%s", dir, e->d_name) >=
                (int)sizeof other)
            continue;
        ofd = open_file(other, O_RDONLY);
        if (ofd < 0)
            continue;
        v = 0;
        /* the header is all a vote needs (no slot is read) */
        if (pread_all(ofd, l, offsetof(struct accel_ledger, slots), 0) == 0 &&
            accel_ledger_valid(l) &&
            strncmp(l->uuid, uuid, sizeof l->uuid) == 0)
            v = atomic_load(&l->ctx_cost);
        close(ofd);
        if ((v & ACCEL_LEDGER_CTX_MEASURED) && !(v & ACCEL_LEDGER_CTX_SEEDED))
            votes[n++] = ACCEL_LEDGER_CTX_BYTES(v);
    }
    if (!ledger_ctx_vote(votes, n, &seed))
        goto out;
    /* only a ledger no process has measured yet (a race with the app's
     * first process: the seed would be what it measures, within 1/16) */
    v = seed | ACCEL_LEDGER_CTX_MEASURED | ACCEL_LEDGER_CTX_SEEDED;
    if (pwrite_all(fd, &v, sizeof v,
                   (off_t)offsetof(struct accel_ledger, ctx_cost)) != 0) {
        rc = ACCEL_ESYS;
        goto out;
    }
    if (seeded != NULL)
        *seeded = seed;
out:
    if (dp != NULL)
        closedir(dp);
    if (fd >= 0)
        close(fd);
    free(votes);
    free(l);
    return rc;
}

enum accel_err ledger_seed_ctx_own(const char *path, uint64_t bytes)
{
    struct accel_ledger l;
    uint64_t v = (bytes & ~(ACCEL_LEDGER_CTX_MEASURED |
                            ACCEL_LEDGER_CTX_SEEDED)) |
                 ACCEL_LEDGER_CTX_MEASURED | ACCEL_LEDGER_CTX_SEEDED;
    int fd;
    enum accel_err rc = read_existing(path, &l, &fd);

    if (rc != ACCEL_OK)
        return rc;
    /* a ledger a process measured already (or acceld restarted) keeps its
     * own figure */
    if (atomic_load(&l.ctx_cost) == 0 &&
        pwrite_all(fd, &v, sizeof v,
                   (off_t)offsetof(struct accel_ledger, ctx_cost)) != 0)
        rc = ACCEL_ESYS;
    close(fd);
    return rc;
}

uint64_t ledger_ctx_read(const char *path)
{
    struct accel_ledger l;
    int fd;

    if (read_existing(path, &l, &fd) != ACCEL_OK)
        return 0;
    close(fd);
    return atomic_load(&l.ctx_cost);
}

/*
 * The figures of ledger_usage_of; with fd >= 0 (the file l was read from),
 * the key of each slot found dead is written into its `dead`, so that a
 * reclaimer which cannot see the owner's pid namespace (a container's
 * process, for a host process's slot) takes it back. Only slots that
 * record their namespace: a minor-0 shim's slot is judged in acceld's
 * namespace, which may not be its owner's.
 */
static void judge(const struct accel_ledger *l, struct ledger_usage *out,
                  int fd)
{
    int64_t used = atomic_load(&l->used), dead = 0;
    unsigned live = 0;

    for (unsigned i = 0; i < ACCEL_LEDGER_SLOTS; i++) {
        struct accel_ledger_slot *s = (struct accel_ledger_slot *)&l->slots[i];
        uint64_t key = atomic_load(&s->key);
        if (key == 0)
            continue;
        if (key == ACCEL_LEDGER_RECLAIMING || accel_ledger_slot_alive(s, key)) {
            live++;
            continue;
        }
        dead += atomic_load(&s->used);
        if (fd >= 0 && atomic_load(&s->pidns) != 0 &&
            atomic_load(&s->dead) != key)
            (void)!pwrite_all(fd, &key, sizeof key,
                              (off_t)(offsetof(struct accel_ledger, slots) +
                                      i * sizeof(*s) +
                                      offsetof(struct accel_ledger_slot,
                                               dead)));
    }
    /* what the reclaim would leave: the dead slots' charges given back,
     * and nothing at all when no process is attached */
    used = live == 0 ? 0 : used - dead;
    out->processes = live;
    out->used = used < 0 ? 0 : (uint64_t)used;
    out->limit = atomic_load(&l->limit);
    out->peak = atomic_load(&l->peak);
    out->active_ms = l->minor >= 4 ? atomic_load(&l->active_ms) : 0;
    out->untracked = accel_ledger_untracked(l);
}

void ledger_usage_of(const struct accel_ledger *l, struct ledger_usage *out)
{
    judge(l, out, -1);
}

enum accel_err ledger_read(const char *path, struct ledger_usage *out)
{
    struct accel_ledger l;
    int fd;
    enum accel_err rc = read_existing(path, &l, &fd);

    if (rc == ACCEL_OK) {
        judge(&l, out, fd);
        close(fd);
    }
    return rc;
}

enum accel_err ledger_read_fd(int fd, struct ledger_usage *out)
{
    struct accel_ledger l;

    if (read_copy(fd, &l) != 0)
        return ACCEL_EPARSE;
    judge(&l, out, fd);
    return ACCEL_OK;
}

/* ---- the card ledger as a sealed memfd (docs/internals/timeslice.md) ---- */

#define CARD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* fd is a card memfd as ledger_card_memfd makes them: a ledger's size,
 * sealed against shrinking, growing and further seals, never against
 * writing, and a valid ledger. */
static bool card_memfd_ok(int fd)
{
    struct accel_ledger l;
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);

    return seals >= 0 && (seals & CARD_SEALS) == CARD_SEALS &&
           (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) == 0 &&
           fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
           st.st_size == (off_t)ACCEL_LEDGER_SIZE && read_copy(fd, &l) == 0;
}

int ledger_card_memfd(const char *dev_id, uint64_t memory)
{
    struct accel_ledger copy, *l = &copy; /* 17 KB, on the stack */
    int fd = memfd_create("accel-card", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    format(l, "", -1, dev_id, memory);
    if (fd >= 0 && (ftruncate(fd, (off_t)ACCEL_LEDGER_SIZE) != 0 ||
                    pwrite_all(fd, l, ACCEL_LEDGER_SIZE, 0) != 0 ||
                    fcntl(fd, F_ADD_SEALS, CARD_SEALS) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

enum accel_err ledger_card_set_limit(int fd, uint64_t limit)
{
    struct accel_ledger l;

    if (read_copy(fd, &l) != 0)
        return ACCEL_EPARSE;
    return write_limit(fd, &l, limit) == 0 ? ACCEL_OK : ACCEL_ESYS;
}

/* An fd of the memfd with inode (dev, ino), opened again through the
 * /proc entry `path` (a process's fd or mapping of it); -1 if it is not
 * that file or not a card memfd. */
static int adopt_entry(const char *path, dev_t dev, ino_t ino)
{
    struct stat st;
    int fd;

    if (stat(path, &st) != 0 || st.st_dev != dev || st.st_ino != ino)
        return -1;
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || st.st_dev != dev || st.st_ino != ino ||
        !card_memfd_ok(fd)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Look through one /proc/<pid>/<sub> directory; an fd or -1. */
static int adopt_in(const char *pid, const char *sub, dev_t dev, ino_t ino)
{
    char dir[64], path[320];
    struct dirent *e;
    DIR *dp;
    int fd = -1;

    snprintf(dir, sizeof dir, "/proc/%s/%s", pid, sub);
    dp = opendir(dir);
    if (dp == NULL)
        return -1;
    while (fd < 0 && (e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        fd = adopt_entry(path, dev, ino);
    }
    closedir(dp);
    return fd;
}

/* Every process's /proc/<pid>/<sub>; an fd or -1. */
static int adopt_pass(const char *sub, dev_t dev, ino_t ino)
{
    struct dirent *e;
    DIR *dp = opendir("/proc");
    int fd = -1;

    if (dp == NULL)
        return -1;
    while (fd < 0 && (e = readdir(dp)) != NULL)
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
            fd = adopt_in(e->d_name, sub, dev, ino);
    closedir(dp);
    return fd;
}

int ledger_card_adopt(uint64_t dev, uint64_t ino)
{
    /* the shim keeps the descriptor: the fds find it, the first pass; a
     * program that closed it still maps it (map_files, readable by root
     * only, and longer lists): the second */
    int fd = adopt_pass("fd", (dev_t)dev, (ino_t)ino);

    return fd >= 0 ? fd : adopt_pass("map_files", (dev_t)dev, (ino_t)ino);
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
            if (devs[i].card != NULL && strchr(devs[i].card, ' ') != NULL)
                return -1;
            w = snprintf(buf + off, cap - off, "timeslice %d %s%s%s\n",
                         devs[i].ordinal, devs[i].ts_socket,
                         devs[i].card ? " " : "",
                         devs[i].card ? devs[i].card : "");
            if (w < 0 || (size_t)w >= cap - off || devs[i].path == NULL)
                continue;
            off += (size_t)w;
        }
        if (strchr(devs[i].path, ' ') != NULL)
            return -1;
        if (devs[i].reclaim != NULL) { /* before its device line */
            if (strchr(devs[i].reclaim, ' ') != NULL)
                return -1;
            w = snprintf(buf + off, cap - off, "reclaim %d %s\n",
                         devs[i].ordinal, devs[i].reclaim);
            if (w < 0 || (size_t)w >= cap - off)
                continue;
            off += (size_t)w;
        }
        w = snprintf(buf + off, cap - off, "device %d %llu %s %s\n",
                     devs[i].ordinal, (unsigned long long)devs[i].limit,
                     devs[i].path, devs[i].uuid ? devs[i].uuid : "");
    }
    if (w < 0 || (size_t)w >= cap - off)
        return -1;
    return (int)(off + (size_t)w);
}

#define CONFIG_MAX 8192 /* a config's text, at most */

enum accel_err ledger_config_text(const char *app,
                                  const struct ledger_device *devs, size_t n,
                                  char **out_text)
{
    char *buf;
    int len;

    if (app == NULL || strchr(app, '\n') != NULL)
        return ACCEL_EINVAL;
    buf = malloc(CONFIG_MAX); /* no xmalloc: the shim's tests link this */
    if (buf == NULL)
        return ACCEL_ENOMEM;
    len = config_text(buf, CONFIG_MAX, app, devs, n);
    if (len < 0) {
        free(buf);
        return ACCEL_EINVAL;
    }
    *out_text = buf;
    return ACCEL_OK;
}

enum accel_err ledger_write_text(const char *path, const char *text)
{
    char tmp[600];
    int fd;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return ACCEL_EINVAL;
    make_parents(path);
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (fd < 0)
        return ACCEL_ESYS;
    if (write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
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

enum accel_err ledger_write_config(const char *path, const char *app,
                                   const struct ledger_device *devs, size_t n)
{
    char *text = NULL;
    enum accel_err rc = ledger_config_text(app, devs, n, &text);

    if (rc == ACCEL_OK)
        rc = ledger_write_text(path, text);
    free(text);
    return rc;
}
