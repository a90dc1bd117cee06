/* SPDX-License-Identifier: MIT */
/*
 * ledger.h: the shared-memory ledger between libaccelshim.so and acceld.
 *
 * One ledger is one small file, mmap'd MAP_SHARED by every process of one app
 * on one device (and by acceld, which creates it). It holds the app's limit on
 * that device, the running total charged against it, and one slot per live
 * process so that the charge of a process that died can be given back.
 *
 * Protocol (docs/internals/shim.md has the long form):
 *   - `used` is the reservation counter: a process adds a request with one
 *     atomic fetch-add; if the new value passes the limit it subtracts it again
 *     and refuses. Nothing ever checks first and records later.
 *   - each process also adds its charges to its own slot (only the owner
 *     writes a slot), after `used` on the way up and before it on the way down,
 *     so a process killed between the two steps can only leave `used` too high
 *     (conservative), never too low.
 *   - a slot is owned by a key packing (pid, start time); a slot whose key no
 *     longer matches a live process is reclaimed by whoever notices first (a
 *     process attaching, or acceld): CAS the key to ACCEL_LEDGER_RECLAIMING,
 *     subtract the slot's charge from `used`, zero it, free the slot.
 *   - slots never move, so an index a process caches stays valid.
 *   - `untracked` (minor 1) is what the driver holds for the app on the
 *     device beyond `used` (a video session, a Vulkan or OpenGL context),
 *     measured by acceld from NVML's per-process figures; only acceld
 *     writes it, and a reserve counts used + untracked against the limit
 *     (docs/internals/meter.md).
 *   - a slot also records its owner's pid namespace (a container's pid 1 is
 *     not the host's): a slot of the reclaimer's namespace is judged by its
 *     /proc; another's by the processes of that namespace it can see
 *     (NSpid), and kept when it can see none unless the reclaimer is in
 *     the initial namespace, which sees them all. A claim
 *     holds the slot RECLAIMING while it writes the namespace, so no
 *     reclaimer ever sees the key without it.
 *   - a process in a container cannot see the host's processes, so it
 *     keeps a dead host process's slot for ever; acceld, which sees every
 *     namespace, writes the key of a slot it finds dead into the slot's
 *     `dead` (minor 2), and any reclaimer takes a slot whose key is its
 *     `dead`. A claim clears `dead` while it holds the slot RECLAIMING.
 *
 * This header is the ABI: magic + major/minor + sizes, _Atomic counters,
 * reserved space. A reader refuses a different major; a newer minor may only
 * use reserved space. It is not a general API: the shim has its own attach
 * code (src/shim/quota.c), acceld uses src/daemon/ledger.c; both use the
 * static inline protocol helpers below so the two cannot drift.
 */
#ifndef ACCEL_ACCEL_LEDGER_H
#define ACCEL_ACCEL_LEDGER_H

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define ACCEL_LEDGER_MAGIC 0x52474c4443434155ULL /* "UACCLDGR" little-endian */
#define ACCEL_LEDGER_MAJOR 1
#define ACCEL_LEDGER_MINOR 4 /* 1: `untracked`; 2: a slot's `dead`;
                                3: `shares`, `ctx_cost`; 4: `active_ms` */
#define ACCEL_LEDGER_SHARES 16 /* VMM allocations shared between processes */
#define ACCEL_LEDGER_SLOTS 256                    /* processes per app+device */
#define ACCEL_LEDGER_RECLAIMING UINT64_MAX        /* slot key while reclaimed */
#define ACCEL_LEDGER_PID_BITS 22                  /* Linux pid_max <= 2^22 */
#ifdef O_CLOEXEC /* POSIX 2008; absent in strict C11 without feature macros */
#define ACCEL_LEDGER_CLOEXEC O_CLOEXEC
#else
#define ACCEL_LEDGER_CLOEXEC 0
#endif

/* One process's share of the charge. 64 bytes, one cache line. */
struct accel_ledger_slot {
    _Atomic uint64_t key;    /* 0 free; (start<<22)|pid owner; RECLAIMING */
    _Atomic int64_t used;    /* bytes this process has charged (owner writes) */
    _Atomic uint64_t allocs; /* live allocations, for display */
    _Atomic uint64_t pidns;  /* the owner's pid namespace (the inode of
                                /proc/self/ns/pid); 0 = not recorded (a
                                shim of minor 0): judged in the reader's */
    _Atomic uint64_t dead;   /* minor 2: a key acceld found dead (only it
                                writes this); the slot is reclaimed while
                                its key is this one, by any reclaimer */
    uint64_t unused[3];      /* reserved, zero */
};

/*
 * Minor 3: a VMM allocation exported to other processes of the app
 * (cuMemExportToShareableHandle): its charge leaves the creator's slot and
 * is held here, in `used` but in no slot, until the last process holding
 * it (creator or importer) releases and unmaps it. 16 bytes.
 */
struct accel_ledger_share {
    _Atomic uint64_t id;     /* what identifies the shared handle, 0 free */
    _Atomic uint64_t word;   /* bytes << 16 | references (holders) */
};
#define ACCEL_LEDGER_SHARE_REFS(w) ((w)&0xffffu)
#define ACCEL_LEDGER_SHARE_BYTES(w) ((w) >> 16)

/* The whole file. 64 bytes of header fields + reserved, then the slots. */
struct accel_ledger {
    uint64_t magic;          /* ACCEL_LEDGER_MAGIC */
    uint16_t major;          /* ACCEL_LEDGER_MAJOR; a reader refuses others */
    uint16_t minor;          /* ACCEL_LEDGER_MINOR */
    uint32_t header_size;    /* offsetof(struct accel_ledger, slots) */
    uint32_t slot_count;     /* ACCEL_LEDGER_SLOTS */
    int32_t device;          /* CUDA ordinal inside the app, for display */
    _Atomic uint64_t limit;  /* bytes; 0 = no limit (acceld may lower live) */
    _Atomic int64_t used;    /* bytes reserved by all processes (see above) */
    _Atomic uint64_t peak;   /* highest `used` seen, for display and tests */
    _Atomic uint64_t epoch;  /* bumped by acceld when it rewrites the limit */
    char uuid[64];           /* device UUID, NUL-terminated, may be empty */
    char app[64];            /* app name, NUL-terminated, may be empty */
    _Atomic int64_t untracked; /* minor 1: bytes the driver holds for the
                                  app beyond `used` (acceld's outside
                                  meter writes it); charged like `used` */
    struct accel_ledger_share shares[ACCEL_LEDGER_SHARES]; /* minor 3 */
    _Atomic uint64_t ctx_cost; /* minor 3: what a context of this device
                                  took when one of the app's processes
                                  measured it (NVML), 0 not yet: the
                                  others charge it without measuring.
                                  The bytes with ACCEL_LEDGER_CTX_MEASURED
                                  set; ..._SEEDED too when acceld wrote
                                  it from other apps' measures (below) */
    _Atomic uint64_t active_ms; /* minor 4: when a process of the app last
                                  took memory on the device
                                  (CLOCK_MONOTONIC, ms; the shim writes
                                  it, 0 never); the app can write it,
                                  so acceld does not order elastic
                                  memory's givers by it (SPEC 4.4: it
                                  trusts what NVML shows) */
    uint64_t unused[5];      /* reserved, zero */
    struct accel_ledger_slot slots[ACCEL_LEDGER_SLOTS]; /* fixed, never move */
};

#define ACCEL_LEDGER_SIZE sizeof(struct accel_ledger)

/* ctx_cost's top bits: the size is known (a process of the app measured
 * it, or acceld seeded it), and acceld seeded it (a size agreed on by
 * other apps' measures of the same device: docs/internals/shim.md, "A
 * context's size, seeded"). The bytes are the rest. */
#define ACCEL_LEDGER_CTX_MEASURED (1ULL << 63)
#define ACCEL_LEDGER_CTX_SEEDED (1ULL << 62)
#define ACCEL_LEDGER_CTX_BYTES(v)                                              \
    ((v) & ~(ACCEL_LEDGER_CTX_MEASURED | ACCEL_LEDGER_CTX_SEEDED))

/* The header never grows: new fields take reserved space (minor bump). */
_Static_assert(offsetof(struct accel_ledger, slots) == 504,
               "the ledger header is 504 bytes in every minor version");

/*
 * What the outside meter charges on top of `used` (0 when it charges
 * nothing, or a ledger of minor 0 whose reserved space is zero). The shim
 * counts used + this against the limit, in its reserve and its views.
 */
static inline uint64_t accel_ledger_untracked(const struct accel_ledger *l)
{
    int64_t v = atomic_load_explicit(&((struct accel_ledger *)l)->untracked,
                                     memory_order_relaxed);
    return v > 0 ? (uint64_t)v : 0;
}

/* accel_ledger_proc_start's answer when it cannot tell (see there). */
#define ACCEL_LEDGER_START_UNKNOWN UINT64_MAX
/*
 * Start time in clock ticks since boot (field 22) of the process whose
 * stat file is `path` ("/proc/<pid>/stat", "/proc/self/stat"); the same in
 * every pid namespace. 0 if the process does not exist (ENOENT/ESRCH, or
 * an empty read);
 * ACCEL_LEDGER_START_UNKNOWN if /proc could not be read for another reason
 * (EMFILE, ENFILE, ENOMEM, EACCES, EINTR, a line that does not parse). The
 * difference matters: a reclaimer must never take "could not read" for
 * "dead", or it gives a live process's charge away for good (the app's
 * usage then reads 0 and its quota is no longer held). Async-signal-safe
 * (open/read/close); errno is left as the failing call set it.
 */
static inline uint64_t accel_ledger_stat_start(const char *path)
{
    char buf[1024];
    const char *p;
    uint64_t v = 0;
    ssize_t n;
    int fd, field;

    fd = open(path, O_RDONLY | ACCEL_LEDGER_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? 0
                                                 : ACCEL_LEDGER_START_UNKNOWN;
    n = read(fd, buf, sizeof(buf) - 1);
    if (n < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return e == ESRCH ? 0 : ACCEL_LEDGER_START_UNKNOWN;
    }
    close(fd);
    if (n == 0)
        return 0;
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (p == NULL)
        return ACCEL_LEDGER_START_UNKNOWN;
    for (field = 2; *p != '\0' && field < 22; p++)
        if (*p == ' ')
            field++;
    while (*p >= '0' && *p <= '9')
        v = v * 10 + (uint64_t)(*p++ - '0');
    return v != 0 ? v : ACCEL_LEDGER_START_UNKNOWN;
}

/* accel_ledger_stat_start of "/proc/<pid>/stat": pid as the /proc mounted
 * here numbers it. */
static inline uint64_t accel_ledger_proc_start(pid_t pid)
{
    char path[48] = "/proc/", digits[16];
    int nd = 0, at = 6;
    unsigned u = (unsigned)pid;

    do { /* "/proc/<pid>/stat" without stdio (async-signal-safe) */
        digits[nd++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0 && nd < 15);
    while (nd > 0)
        path[at++] = digits[--nd];
    memcpy(path + at, "/stat", 6);
    return accel_ledger_stat_start(path);
}

/* The slot key of a process: (start time << 22) | pid, never 0. */
static inline uint64_t accel_ledger_key(pid_t pid, uint64_t start)
{
    return (start << ACCEL_LEDGER_PID_BITS) | ((uint64_t)pid & 0x3fffff) |
           (start == 0 ? (1ULL << 63) : 0);
}

/*
 * The calling process's key: getpid() (the pid its own namespace gives it)
 * with the start time of /proc/self/stat. Not /proc/<getpid()>/stat: in a
 * pid namespace whose /proc is the host's (unshare --pid --fork without
 * --mount-proc) that file is another process's, the host's pid 1 for the
 * namespace's pid 1, and the key then named a start time the owner never
 * had: a reclaimer in the initial namespace took its live charge. Start 0
 * (bit 63) when /proc/self cannot be read. AS-safe.
 */
static inline uint64_t accel_ledger_self_key(void)
{
    uint64_t start = accel_ledger_stat_start("/proc/self/stat");
    return accel_ledger_key(getpid(),
                            start == ACCEL_LEDGER_START_UNKNOWN ? 0 : start);
}

/*
 * Whether the owner of `key` may still be alive: same pid and start time;
 * or /proc could not tell (kept: reclaiming is only for the certainly
 * dead); or the owner could not read its own start time when it claimed
 * the slot (bit 63, start 0: its pid alone decides).
 */
static inline int accel_ledger_key_alive(uint64_t key)
{
    pid_t pid = (pid_t)(key & 0x3fffff);
    uint64_t start = accel_ledger_proc_start(pid);
    if (start == ACCEL_LEDGER_START_UNKNOWN)
        return 1;
    if (start == 0)
        return 0;
    if ((key >> 63) != 0)
        return 1;
    return accel_ledger_key(pid, start) == key;
}

/* The calling process's pid namespace (inode of /proc/self/ns/pid), 0 when
 * it cannot be read. Async-signal-safe. */
static inline uint64_t accel_ledger_pidns_self(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/*
 * Claim a free slot for the owner `key` of pid namespace `pidns`: the key
 * goes in only after the namespace (the slot is RECLAIMING meanwhile, which
 * every reclaimer skips). Returns the slot's index, or -1 when all are taken.
 */
static inline int accel_ledger_claim_slot(struct accel_ledger *l,
                                          uint64_t key, uint64_t pidns)
{
    for (unsigned i = 0; i < ACCEL_LEDGER_SLOTS; i++) {
        uint64_t expect = 0;
        if (atomic_compare_exchange_strong(&l->slots[i].key, &expect,
                                           ACCEL_LEDGER_RECLAIMING)) {
            atomic_store(&l->slots[i].pidns, pidns);
            atomic_store(&l->slots[i].dead, 0);
            atomic_store(&l->slots[i].key, key);
            return (int)i;
        }
    }
    return -1;
}

/* Whether the /proc mounted here numbers processes as the caller's pid
 * namespace does (/proc/self names getpid()); not in a namespace whose
 * /proc is an ancestor's (unshare --pid --fork without --mount-proc).
 * Taken as yes when /proc/self cannot be read. AS-safe. */
static inline int accel_ledger_proc_is_own(void)
{
    char buf[16];
    ssize_t n = readlink("/proc/self", buf, sizeof buf);
    pid_t v = 0;

    if (n <= 0 || n >= (ssize_t)sizeof buf)
        return 1;
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return 1;
        v = v * 10 + (buf[i] - '0');
    }
    return v == getpid();
}

/* The kernel's initial pid namespace (PROC_PID_INIT_INO): a process in it
 * sees every process of every namespace in its /proc. */
#define ACCEL_LEDGER_PIDNS_INIT 0xEFFFFFFCULL

/* "/proc/<pid>/<leaf>" into path (at least 48 bytes), AS-safe. */
static inline void accel_ledger_proc_path(char *path, const char *pid,
                                          const char *leaf)
{
    size_t n = 6, k;
    memcpy(path, "/proc/", 6);
    for (k = 0; pid[k] != '\0' && k < 12; k++)
        path[n++] = pid[k];
    path[n++] = '/';
    for (k = 0; leaf[k] != '\0' && k < 12; k++)
        path[n++] = leaf[k];
    path[n] = '\0';
}

/* The last pid of "NSpid:" in /proc/<pid>/status (the pid its own
 * namespace gives it), 0 when unreadable. AS-safe. */
static inline pid_t accel_ledger_inner_pid(const char *pid)
{
    char path[48], buf[4096];
    const char *p;
    pid_t last = 0;
    ssize_t n;
    int fd;

    accel_ledger_proc_path(path, pid, "status");
    fd = open(path, O_RDONLY | ACCEL_LEDGER_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    p = strstr(buf, "\nNSpid:");
    if (p == NULL)
        return 0;
    for (p += 7; *p != '\0' && *p != '\n'; p++) {
        if (*p < '0' || *p > '9')
            continue;
        last = 0;
        while (*p >= '0' && *p <= '9')
            last = last * 10 + (*p++ - '0');
        p--;
    }
    return last;
}

/*
 * Whether the owner of `key`, of pid namespace `ns`, may still be alive: a
 * process of /proc in namespace ns whose NSpid ends with the key's pid,
 * with the key's start time (the same in every namespace). A process whose
 * namespace cannot be read (stat of its ns/pid needs ptrace access: a
 * process of another uid, or a non-dumpable one, seen by a caller without
 * CAP_SYS_PTRACE) counts as the owner when its NSpid and start time match:
 * such a caller used to pass over it, see no process of ns, and, in the
 * initial namespace, take a live charge for the gone namespace's. When no
 * process of ns is in /proc: dead if the caller is in the initial
 * namespace (it sees them all: ns is gone), else kept (ns may be one it
 * cannot see). Kept when /proc cannot be listed. AS-safe (getdents64,
 * open, read, stat).
 */
static inline int accel_ledger_foreign_alive(uint64_t key, uint64_t ns,
                                             uint64_t self)
{
    char buf[4096];
    int dfd = open("/proc", O_RDONLY | O_DIRECTORY | ACCEL_LEDGER_CLOEXEC);
    int seen = 0;
    long n;

    if (dfd < 0)
        return 1;
    while ((n = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct accel_dirent64 {
                uint64_t ino;
                int64_t off;
                unsigned short reclen;
                unsigned char type;
                char name[];
            } *e = (struct accel_dirent64 *)(buf + off);
            char path[48];
            struct stat st;
            off += e->reclen;
            if (e->name[0] < '1' || e->name[0] > '9')
                continue;
            accel_ledger_proc_path(path, e->name, "ns/pid");
            if (stat(path, &st) == 0) {
                if ((uint64_t)st.st_ino != ns)
                    continue;
                seen = 1;
            } else if (errno == ENOENT || errno == ESRCH) {
                continue; /* gone since the listing */
            } /* else EACCES: another uid's or a non-dumpable process,
               * whose namespace only a ptrace-capable reader sees; it may
               * be the owner, so its pid and start time are asked */
            if (accel_ledger_inner_pid(e->name) == (pid_t)(key & 0x3fffff)) {
                pid_t host = 0;
                uint64_t start;
                for (const char *c = e->name; *c >= '0' && *c <= '9'; c++)
                    host = host * 10 + (*c - '0');
                start = accel_ledger_proc_start(host);
                if (start == ACCEL_LEDGER_START_UNKNOWN || (key >> 63) ||
                    (start != 0 &&
                     accel_ledger_key((pid_t)(key & 0x3fffff), start) ==
                         key)) {
                    close(dfd);
                    return 1;
                }
            }
        }
    }
    close(dfd);
    if (n < 0)
        return 1;
    return seen || self == ACCEL_LEDGER_PIDNS_INIT ? 0 : 1;
}

/* Whether slot `s`'s owner may still be alive, judged in its own pid
 * namespace: by its pid in the caller's /proc when the slot is of the
 * caller's namespace and that /proc numbers it; else by the processes of
 * its namespace (accel_ledger_foreign_alive), which a /proc of an
 * ancestor namespace lists too. */
static inline int accel_ledger_slot_alive(struct accel_ledger_slot *s,
                                          uint64_t key)
{
    uint64_t ns = atomic_load(&s->pidns), self;
    if (ns == 0)
        return accel_ledger_key_alive(key);
    self = accel_ledger_pidns_self();
    if (self == 0 || (self == ns && accel_ledger_proc_is_own()))
        return accel_ledger_key_alive(key);
    return accel_ledger_foreign_alive(key, ns, self);
}

/*
 * Give back slot `i`'s charge if its owner is dead (judged in its own pid
 * namespace: accel_ledger_slot_alive; or so judged by acceld, which wrote
 * the key into the slot's `dead`). Safe against any number of
 * concurrent reclaimers and against the (dead) owner: the CAS makes one winner.
 * Returns the bytes given back (0 if the slot was free, live or taken).
 */
static inline int64_t accel_ledger_reclaim_slot(struct accel_ledger *l,
                                                unsigned i)
{
    struct accel_ledger_slot *s = &l->slots[i];
    uint64_t key = atomic_load(&s->key);
    int64_t used;

    if (key == 0 || key == ACCEL_LEDGER_RECLAIMING)
        return 0;
    if (atomic_load(&s->dead) != key && accel_ledger_slot_alive(s, key))
        return 0;
    if (!atomic_compare_exchange_strong(&s->key, &key,
                                        ACCEL_LEDGER_RECLAIMING))
        return 0;
    used = atomic_exchange(&s->used, 0);
    atomic_store(&s->allocs, 0);
    if (used != 0)
        atomic_fetch_sub(&l->used, used);
    atomic_store(&s->key, 0);
    return used;
}

/*
 * Reclaim every dead slot; then, if no slot is owned at all, reset a `used`
 * left behind by a process killed between its two counter updates (a CAS, so
 * a process that attaches meanwhile is never undercounted). Returns the
 * number of live slots seen.
 */
static inline unsigned accel_ledger_reclaim_all(struct accel_ledger *l)
{
    unsigned live = 0;
    int64_t before = atomic_load(&l->used);

    for (unsigned i = 0; i < ACCEL_LEDGER_SLOTS; i++) {
        accel_ledger_reclaim_slot(l, i);
        if (atomic_load(&l->slots[i].key) != 0)
            live++;
    }
    /* `before` was read before the scan: a process that claimed a slot
     * after the scan passed it has changed `used` since, so the CAS fails. */
    if (live == 0 && before != 0)
        atomic_compare_exchange_strong(&l->used, &before, 0);
    return live;
}

/* Whether a mapped ledger has a layout this code understands. */
static inline int accel_ledger_valid(const struct accel_ledger *l)
{
    return l->magic == ACCEL_LEDGER_MAGIC && l->major == ACCEL_LEDGER_MAJOR &&
           l->header_size == offsetof(struct accel_ledger, slots) &&
           l->slot_count == ACCEL_LEDGER_SLOTS;
}

#endif /* ACCEL_ACCEL_LEDGER_H */
