/* SPDX-License-Identifier: MIT */
/*
 * quota.c: the shim's side of the ledger protocol (include/accel/ledger.h):
 * attaching to a device's ledger, reserving before the driver allocates,
 * settling or giving back after, and the one virtual memory view.
 *
 * Hot path cost: one atomic load of the device state, one CAS loop on the
 * shared `used` counter, two relaxed adds on our own slot. No system call,
 * no lock (the allocation table in track.c has its own striped locks).
 * Attaching (first charge on a device) maps the ledger, reclaims dead
 * processes' slots and claims one slot; it runs once per device. A refusal
 * reclaims dead slots again (at most every 100 ms) and retries once.
 */
#include "shim/shim.h"

#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Write a fresh header into a zero-filled ledger. */
static void ledger_format(struct accel_ledger *l, int ordinal, uint64_t limit)
{
    l->major = ACCEL_LEDGER_MAJOR;
    l->minor = ACCEL_LEDGER_MINOR;
    l->header_size = (uint32_t)offsetof(struct accel_ledger, slots);
    l->slot_count = ACCEL_LEDGER_SLOTS;
    l->device = ordinal;
    atomic_store(&l->limit, limit);
    atomic_store_explicit((_Atomic uint64_t *)&l->magic, ACCEL_LEDGER_MAGIC,
                          memory_order_release);
}

/* m, a mapping of a ledger file (or MAP_FAILED), when it holds a valid
 * ledger; else NULL, and m unmapped. */
static struct accel_ledger *checked_ledger(void *m)
{
    if (m == MAP_FAILED)
        return NULL;
    if (!accel_ledger_valid(m)) {
        munmap(m, ACCEL_LEDGER_SIZE);
        return NULL;
    }
    return m;
}

/* Map an existing, valid ledger; NULL if missing or not one of ours. */
static struct accel_ledger *ledger_map_existing(const char *path)
{
    struct accel_ledger *l;
    int fd = open(path, O_RDWR | O_CLOEXEC);

    if (fd < 0)
        return NULL;
    /* MAP_POPULATE: the five pages are read at once (attach reads the
     * header and scans every slot) instead of one page fault each */
    l = mmap(NULL, ACCEL_LEDGER_SIZE, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    /* a file shorter than the ledger would fault on access: size is
     * checked by acceld (creator) and below (standalone creation) */
    return checked_ledger(l);
}

/* Create (standalone use) and map; the flock only serialises formatting and
 * is dropped by the kernel if its holder dies. The fd is published in
 * d->attach_fd while open: a fork child inherits the open file (and with it
 * the flock) and must close its copy, or its own attach would wait on a
 * lock only it holds. Unlocked before it is unpublished, so a child forked
 * after that point holds no lock through its (close-on-exec) copy. */
static struct accel_ledger *ledger_create_map(struct shim_dev *d,
                                              const char *path, int ordinal,
                                              uint64_t limit)
{
    struct stat st;
    void *m = MAP_FAILED;
    int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);

    if (fd < 0)
        return NULL;
    atomic_store(&d->attach_fd, fd + 1);
    if (flock(fd, LOCK_EX) == 0 && fstat(fd, &st) == 0 &&
        (st.st_size >= (off_t)ACCEL_LEDGER_SIZE ||
         ftruncate(fd, (off_t)ACCEL_LEDGER_SIZE) == 0))
        m = mmap(NULL, ACCEL_LEDGER_SIZE, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m != MAP_FAILED && ((struct accel_ledger *)m)->magic == 0)
        ledger_format(m, ordinal, limit);
    flock(fd, LOCK_UN);
    atomic_store(&d->attach_fd, 0);
    close(fd);
    return checked_ledger(m);
}

static struct accel_ledger *ledger_map(struct shim_dev *d, const char *path,
                                       int create, int ordinal, uint64_t limit)
{
    struct stat st;

    /* fast path (one open, one mmap) once the file exists at full size */
    if (!create || (stat(path, &st) == 0 &&
                    st.st_size >= (off_t)ACCEL_LEDGER_SIZE)) {
        struct accel_ledger *l = ledger_map_existing(path);
        if (l != NULL || !create)
            return l;
    }
    return ledger_create_map(d, path, ordinal, limit);
}

/* A ledger only this process sees: the quota still holds per process. */
static struct accel_ledger *ledger_local(int ordinal, uint64_t limit)
{
    void *m = mmap(NULL, ACCEL_LEDGER_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (m == MAP_FAILED)
        return NULL;
    ledger_format(m, ordinal, limit);
    return m;
}

/* Claim a free slot for this process; NULL if all are taken. */
static struct accel_ledger_slot *slot_claim(struct accel_ledger *l)
{
    uint64_t start = accel_ledger_proc_start(shim_state.pid);
    uint64_t key = accel_ledger_key(
        shim_state.pid, start == ACCEL_LEDGER_START_UNKNOWN ? 0 : start);

    int i = accel_ledger_claim_slot(l, key, accel_ledger_pidns_self());
    return i < 0 ? NULL : &l->slots[i];
}

static void dev_attach(struct shim_dev *d, int ordinal)
{
    int standalone = shim_state.standalone;

    if (d->ledger != NULL) /* re-attach after fork: mapping inherited */
        goto claim;
    config_dev(d, ordinal); /* standalone default limit and ledger path */
    if (d->limit == 0) {
        atomic_store(&d->state, SHIM_DEV_NOLIMIT);
        return;
    }
    if (d->path[0] != '\0')
        d->ledger = ledger_map(d, d->path, standalone, ordinal, d->limit);
    if (d->ledger == NULL) {
        shim_log("dev %d: ledger %s unusable: process-local quota", ordinal,
                 d->path[0] ? d->path : "(none)");
        d->ledger = ledger_local(ordinal, d->limit);
    }
    if (d->ledger == NULL) {
        atomic_store(&d->state, SHIM_DEV_NOLIMIT);
        return;
    }
    accel_ledger_reclaim_all(d->ledger);
claim:
    d->slot = slot_claim(d->ledger);
    if (d->slot == NULL)
        shim_log("dev %d: ledger full; charges of this process are not "
                 "reclaimable if it is killed", ordinal);
    atomic_store_explicit(&d->state, SHIM_DEV_READY, memory_order_release);
}

struct shim_dev *quota_dev(int ordinal)
{
    struct shim_dev *d;
    int st;

    if (ordinal < 0 || ordinal >= SHIM_MAX_DEV)
        return NULL;
    d = &shim_state.dev[ordinal];
    st = atomic_load_explicit(&d->state, memory_order_acquire);
    if (st == SHIM_DEV_READY)
        return d;
    if (st == SHIM_DEV_NOLIMIT)
        return NULL;
    if (st == SHIM_DEV_UNSET &&
        atomic_compare_exchange_strong(&d->state, &st, SHIM_DEV_BUSY)) {
        dev_attach(d, ordinal);
        return quota_dev(ordinal);
    }
    while (atomic_load_explicit(&d->state, memory_order_acquire) ==
           SHIM_DEV_BUSY)
        sched_yield(); /* another thread of ours is attaching: microseconds */
    return quota_dev(ordinal);
}

static uint64_t dev_limit(const struct shim_dev *d)
{
    uint64_t shared = atomic_load_explicit(&d->ledger->limit,
                                           memory_order_relaxed);

    /* acceld may lower the limit live; the app cannot raise it past its
     * read-only ACCEL_CONFIG value. */
    return shared != 0 && shared < d->limit ? shared : d->limit;
}

static void peak_note(struct accel_ledger *l, uint64_t now)
{
    uint64_t p = atomic_load_explicit(&l->peak, memory_order_relaxed);

    while (now > p && !atomic_compare_exchange_weak(&l->peak, &p, now))
        ;
}

/* Reserve `bytes` on `d`: one CAS on the shared counter, never above limit. */
static int reserve(struct shim_dev *d, uint64_t bytes)
{
    struct accel_ledger *l = d->ledger;
    uint64_t lim = dev_limit(d);
    int64_t cur = atomic_load_explicit(&l->used, memory_order_relaxed);

    do {
        if (bytes > lim || (cur > 0 && (uint64_t)cur > lim - bytes))
            return -1;
    } while (!atomic_compare_exchange_weak(&l->used, &cur,
                                           cur + (int64_t)bytes));
    if (d->slot != NULL)
        atomic_fetch_add_explicit(&d->slot->used, (int64_t)bytes,
                                  memory_order_relaxed);
    peak_note(l, (uint64_t)(cur + (int64_t)bytes));
    return 0;
}

/* At most one dead-slot scan per process per this many ns. */
#define SHIM_RECLAIM_EVERY_NS 100000000ULL

/* A refusal: give back the charges of dead processes (a SIGKILLed sibling
 * or forked worker: only attaching processes did that before) and say
 * whether any came back. Rate-limited per process (one scan reads /proc
 * for every owned slot), so a loop of refused allocations costs a clock
 * read each, not a scan each. Never on the path of an allocation within
 * the quota. */
static int reclaim_dead(struct shim_dev *d)
{
    struct timespec ts;
    uint64_t now, next;
    int64_t got = 0;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    next = atomic_load_explicit(&shim_state.reclaim_next,
                                memory_order_relaxed);
    if (now < next ||
        !atomic_compare_exchange_strong(&shim_state.reclaim_next, &next,
                                        now + SHIM_RECLAIM_EVERY_NS))
        return 0;
    for (unsigned i = 0; i < ACCEL_LEDGER_SLOTS; i++)
        got += accel_ledger_reclaim_slot(d->ledger, i);
    if (got > 0)
        shim_log("reclaimed %lld bytes of dead processes", (long long)got);
    return got > 0;
}

/* reserve, and once more after reclaiming dead processes' charges. */
static int reserve_or_reclaim(struct shim_dev *d, uint64_t bytes)
{
    if (reserve(d, bytes) == 0)
        return 0;
    if (!reclaim_dead(d))
        return -1;
    return reserve(d, bytes);
}

static void unreserve(struct shim_dev *d, uint64_t bytes)
{
    if (d->slot != NULL) /* slot first: a kill in between overcounts only */
        atomic_fetch_sub_explicit(&d->slot->used, (int64_t)bytes,
                                  memory_order_relaxed);
    atomic_fetch_sub_explicit(&d->ledger->used, (int64_t)bytes,
                              memory_order_release);
}

int quota_begin(struct shim_charge *c, int ordinal, uint64_t bytes)
{
    c->dev = NULL;
    c->ordinal = ordinal;
    c->bytes = bytes;
    if (!shim_state.any_limit)
        return 0;
    c->dev = quota_dev(ordinal);
    if (c->dev == NULL)
        return 0;
    if (reserve_or_reclaim(c->dev, bytes) != 0) {
        c->dev = NULL;
        return -1;
    }
    return 0;
}

int quota_adjust(struct shim_charge *c, uint64_t bytes)
{
    if (c->dev == NULL || bytes == c->bytes)
        return 0;
    if (bytes < c->bytes) {
        unreserve(c->dev, c->bytes - bytes);
    } else if (reserve_or_reclaim(c->dev, bytes - c->bytes) != 0) {
        return -1;
    }
    c->bytes = bytes;
    return 0;
}

CUresult quota_end(struct shim_charge *c, CUresult rc, enum shim_kind kind,
                   uint64_t key)
{
    if (c->dev == NULL)
        return rc;
    if (rc != CUDA_SUCCESS) {
        unreserve(c->dev, c->bytes);
        return rc;
    }
    if (c->dev->slot != NULL)
        atomic_fetch_add_explicit(&c->dev->slot->allocs, 1,
                                  memory_order_relaxed);
    if (track_put(kind, key, c->ordinal, c->bytes) != 0)
        shim_log("allocation table full: %llu bytes stay charged",
                 (unsigned long long)c->bytes);
    return rc;
}

void quota_release(int ordinal, uint64_t bytes)
{
    struct shim_dev *d = quota_dev(ordinal);

    if (d == NULL)
        return;
    if (d->slot != NULL)
        atomic_fetch_sub_explicit(&d->slot->allocs, 1, memory_order_relaxed);
    unreserve(d, bytes);
}

void quota_view(int ordinal, uint64_t phys_total, uint64_t phys_free,
                uint64_t *out_total, uint64_t *out_free, uint64_t *out_used)
{
    struct shim_dev *d = shim_state.any_limit ? quota_dev(ordinal) : NULL;
    uint64_t total, used;
    int64_t u;

    if (d == NULL) {
        *out_total = phys_total;
        *out_free = phys_free < phys_total ? phys_free : phys_total;
        *out_used = phys_total - *out_free;
        return;
    }
    total = dev_limit(d) < phys_total ? dev_limit(d) : phys_total;
    u = atomic_load_explicit(&d->ledger->used, memory_order_acquire);
    used = u < 0 ? 0 : ((uint64_t)u > total ? total : (uint64_t)u);
    *out_total = total;
    *out_free = total - used;
    *out_used = used;
}

/* Give our slot back: its charge leaves the ledger with us. */
static void slot_release(struct shim_dev *d)
{
    int64_t used;

    if (d->slot == NULL)
        return;
    used = atomic_exchange(&d->slot->used, 0);
    atomic_store(&d->slot->allocs, 0);
    if (used != 0)
        atomic_fetch_sub(&d->ledger->used, used);
    atomic_store(&d->slot->key, 0);
    d->slot = NULL;
}

/* A device another thread of the parent was attaching at the fork: that
 * thread does not exist here, so its BUSY mark would make every allocation
 * of the child wait forever (issue 10, item 9). Undo what it left half
 * done and attach again from the start at the first charge. */
static void fork_reset_busy(struct shim_dev *d)
{
    int fd = atomic_exchange(&d->attach_fd, 0);

    if (fd > 0)
        close(fd - 1); /* the parent's flock stays the parent's */
    d->slot = NULL;    /* a claim in flight is the parent's slot */
    if (d->ledger == NULL && shim_state.standalone)
        d->path[0] = '\0'; /* config_dev may have been cut mid-write */
}

void quota_fork_child(void)
{
    for (int i = 0; i < SHIM_MAX_DEV; i++) {
        struct shim_dev *d = &shim_state.dev[i];
        int st = atomic_load(&d->state);
        if (st == SHIM_DEV_BUSY)
            fork_reset_busy(d);
        else if (st != SHIM_DEV_READY)
            continue;
        /* The parent's slot stays the parent's; the child claims its own on
         * its first charge (a child that only execs never takes one). */
        d->slot = NULL;
        atomic_store(&d->state, SHIM_DEV_UNSET);
    }
}

void quota_detach_all(void)
{
    for (int i = 0; i < SHIM_MAX_DEV; i++) {
        struct shim_dev *d = &shim_state.dev[i];
        if (atomic_load(&d->state) == SHIM_DEV_READY)
            slot_release(d);
    }
}

void quota_meminfo(int on, int (*ordinal)(void), size_t f, size_t t,
                   size_t *pfree, size_t *ptotal)
{
    uint64_t vt = t, vf = f, vu;

    if (on)
        quota_view(ordinal(), t, f, &vt, &vf, &vu);
    if (pfree != NULL)
        *pfree = (size_t)vf;
    if (ptotal != NULL)
        *ptotal = (size_t)vt;
}

size_t quota_total(int ordinal, size_t bytes)
{
    uint64_t vt, vf, vu;

    quota_view(ordinal, bytes, bytes, &vt, &vf, &vu);
    return (size_t)vt;
}
