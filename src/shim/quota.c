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
 * first trims this process's stream-ordered pools and retries (pool.c),
 * then reclaims dead slots again (at most every 100 ms) and retries once.
 */
#include "shim/shim.h"
#include "shim/reclaim.h"

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
    int i = accel_ledger_claim_slot(l, accel_ledger_self_key(),
                                    accel_ledger_pidns_self());

    return i < 0 ? NULL : &l->slots[i];
}

/* The card's memory, the limit of a card ledger the shim creates
 * (standalone); 0 (no limit) if the driver cannot say. */
static uint64_t card_total(int ordinal)
{
    CUresult (*fn)(size_t *, CUdevice) = SHIM_CUDA_REAL(cuDeviceTotalMem_v2);
    size_t b = 0;

    return fn != NULL && fn(&b, ordinal) == CUDA_SUCCESS ? b : 0;
}

/* The card ledger acceld's broker hands this process: a memfd sealed
 * against shrinking (and against any further seal), so no app of the card
 * can cut it short under the others' mappings (SIGBUS) nor seal it
 * against their writes. Anything else is refused unmapped. */
static struct accel_ledger *card_from_broker(int ordinal)
{
    int need = F_SEAL_SHRINK | F_SEAL_SEAL;
    int fd = timeslice_card_fd(ordinal), seals;
    struct stat st;

    if (fd < 0)
        return NULL;
    seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & need) != need || fstat(fd, &st) != 0 ||
        st.st_size < (off_t)ACCEL_LEDGER_SIZE) {
        shim_log("dev %d: the broker's card ledger is not sealed against "
                 "shrinking: not mapped", ordinal);
        return NULL;
    }
    return checked_ledger(mmap(NULL, ACCEL_LEDGER_SIZE,
                               PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_POPULATE, fd, 0));
}

/* A time-sliced device's card ledger (docs/internals/timeslice.md): from
 * acceld's broker (card_path SHIM_CARD_BROKER), or a file created by the
 * first process in standalone use. */
static void card_attach(struct shim_dev *d, int ordinal)
{
    if (d->card != NULL || d->card_path[0] == '\0' ||
        !timeslice_managed(ordinal))
        return;
    if (strcmp(d->card_path, SHIM_CARD_BROKER) == 0)
        d->card = card_from_broker(ordinal);
    else
        d->card = ledger_map(d, d->card_path, shim_state.standalone,
                             ordinal,
                             shim_state.standalone ? card_total(ordinal) : 0);
    if (d->card == NULL) {
        shim_log("dev %d: card ledger %s unusable: non-evictable memory "
                 "not counted across the time-sliced apps", ordinal,
                 d->card_path);
        return;
    }
    accel_ledger_reclaim_all(d->card);
}

static void dev_attach(struct shim_dev *d, int ordinal)
{
    int standalone = shim_state.standalone;

    if (d->ledger != NULL) /* re-attach after fork: mapping inherited */
        goto claim;
    config_dev(d, ordinal); /* standalone default limit and ledger path */
    card_attach(d, ordinal);
    if (d->limit == 0 && d->card != NULL)
        d->limit = UINT64_MAX; /* no quota of its own: the card's counts */
    if (d->limit == 0) {
        atomic_store(&d->state, SHIM_DEV_NOLIMIT);
        return;
    }
    if (d->path[0] != '\0')
        d->ledger = ledger_map(d, d->path, standalone, ordinal, d->limit);
    if (d->ledger == NULL) {
        if (d->limit != UINT64_MAX)
            shim_log("dev %d: ledger %s unusable: process-local quota",
                     ordinal, d->path[0] ? d->path : "(none)");
        d->ledger = ledger_local(ordinal, d->limit);
    }
    if (d->ledger == NULL) {
        atomic_store(&d->state, SHIM_DEV_NOLIMIT);
        return;
    }
    accel_ledger_reclaim_all(d->ledger);
    /* a new ledger's epoch is 1 (ledger_create): one rewritten since the
     * config was read at load makes the first allocation read it again */
    atomic_store(&d->epoch_seen, 1);
claim:
    d->slot = slot_claim(d->ledger);
    if (d->card != NULL)
        d->card_slot = slot_claim(d->card);
    if (d->slot == NULL || (d->card != NULL && d->card_slot == NULL))
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

/*
 * The ledger's epoch moved past the one d's limit is of: acceld changed
 * the quota live (SPEC 4.4) and rewrote ACCEL_CONFIG first, so the
 * config's value is read again (a raise; a cut holds through the ledger's
 * limit at once either way). The app can bump the epoch itself (the
 * ledger is writable to it): that only makes it read its read-only
 * config again. One thread rereads at a time (a flag, not a lock: a fork
 * child never waits on it, and quota_fork_child clears it); the others go
 * on with the limit they have and look again at their next allocation. A
 * config that cannot be read or names no limit leaves the limit as it was.
 */
static _Atomic int reread_busy; /* a thread is in dev_reread */

static void dev_reread(struct shim_dev *d, int ordinal)
{
    _Atomic int *busy = &reread_busy;
    int idle = 0;
    uint64_t ep, lim;

    if (!atomic_compare_exchange_strong(busy, &idle, 1))
        return;
    do {
        ep = atomic_load_explicit(&d->ledger->epoch, memory_order_acquire);
        atomic_store_explicit(&d->epoch_seen, ep, memory_order_relaxed);
        lim = config_reread_limit(ordinal);
        if (lim != 0 && atomic_load(&d->limit) != UINT64_MAX) {
            atomic_store(&d->limit, lim);
            shim_log("dev %d: quota now %llu bytes (epoch %llu)", ordinal,
                     (unsigned long long)lim, (unsigned long long)ep);
        }
    } while (atomic_load_explicit(&d->ledger->epoch, memory_order_acquire) !=
             ep);
    atomic_store(busy, 0);
}

static uint64_t dev_limit(struct shim_dev *d)
{
    uint64_t shared = atomic_load_explicit(&d->ledger->limit,
                                           memory_order_relaxed), own;

    if (atomic_load_explicit(&d->ledger->epoch, memory_order_relaxed) !=
            atomic_load_explicit(&d->epoch_seen, memory_order_relaxed) &&
        shim_state.config[0] != '\0')
        dev_reread(d, (int)(d - shim_state.dev));
    own = atomic_load_explicit(&d->limit, memory_order_relaxed);
    /* acceld may lower the limit live; the app cannot raise it past its
     * read-only ACCEL_CONFIG value. */
    return shared != 0 && shared < own ? shared : own;
}

static void peak_note(struct accel_ledger *l, uint64_t now)
{
    uint64_t p = atomic_load_explicit(&l->peak, memory_order_relaxed);

    while (now > p && !atomic_compare_exchange_weak(&l->peak, &p, now))
        ;
}

/* Reserve `bytes` on ledger l (our slot s or NULL) under lim: one CAS on
 * the shared counter, never above lim. */
static int reserve_on(struct accel_ledger *l, struct accel_ledger_slot *s,
                      uint64_t lim, uint64_t bytes)
{
    int64_t cur = atomic_load_explicit(&l->used, memory_order_relaxed);

    do {
        if (bytes > lim || (cur > 0 && (uint64_t)cur > lim - bytes))
            return -1;
    } while (!atomic_compare_exchange_weak(&l->used, &cur,
                                           cur + (int64_t)bytes));
    if (s != NULL)
        atomic_fetch_add_explicit(&s->used, (int64_t)bytes,
                                  memory_order_relaxed);
    peak_note(l, (uint64_t)(cur + (int64_t)bytes));
    return 0;
}

/* Reserve `bytes` on d's own ledger. */
static int reserve(struct shim_dev *d, uint64_t bytes)
{
    uint64_t lim = dev_limit(d), out = accel_ledger_untracked(d->ledger);

    /* what acceld's outside meter saw the driver hold beyond our charges
     * takes room from the limit (include/accel/ledger.h) */
    lim = out < lim ? lim - out : 0;
    if (reserve_on(d->ledger, d->slot, lim, bytes) != 0)
        return -1;
    reclaim_stamp(d->ledger);
    return 0;
}

/* Reserve `bytes` on d's card ledger (its limit is the card; 0 none). */
static int card_reserve(struct shim_dev *d, uint64_t bytes)
{
    uint64_t lim = atomic_load_explicit(&d->card->limit, memory_order_relaxed);

    return reserve_on(d->card, d->card_slot, lim != 0 ? lim : UINT64_MAX,
                      bytes);
}

/* At most one dead-slot scan per process per this many ns. */
#define SHIM_RECLAIM_EVERY_NS 100000000ULL

/* A refusal: give back the charges of dead processes (a SIGKILLed sibling
 * or forked worker: only attaching processes did that before) and say
 * whether any came back. Rate-limited per process (one scan reads /proc
 * for every owned slot), so a loop of refused allocations costs a clock
 * read each, not a scan each. Never on the path of an allocation within
 * the quota. */
static int reclaim_dead(struct accel_ledger *l, _Atomic uint64_t *when)
{
    struct timespec ts;
    uint64_t now, next;
    int64_t got = 0;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    next = atomic_load_explicit(when, memory_order_relaxed);
    if (now < next || !atomic_compare_exchange_strong(
                          when, &next, now + SHIM_RECLAIM_EVERY_NS))
        return 0;
    for (unsigned i = 0; i < ACCEL_LEDGER_SLOTS; i++)
        got += accel_ledger_reclaim_slot(l, i);
    if (got > 0)
        shim_log("reclaimed %lld bytes of dead processes", (long long)got);
    return got > 0;
}

/* reserve; once more after trimming this process's stream-ordered pools
 * to what is live in them (their slack must not refuse the app: pool.c),
 * and once more after reclaiming dead processes' charges. */
static int reserve_or_reclaim(struct shim_dev *d, uint64_t bytes)
{
    if (reserve(d, bytes) == 0)
        return 0;
    if (pool_reclaim((int)(d - shim_state.dev)) && reserve(d, bytes) == 0)
        return 0;
    if (!reclaim_dead(d->ledger, &shim_state.reclaim_next))
        return -1;
    return reserve(d, bytes);
}

static void unreserve_on(struct accel_ledger *l, struct accel_ledger_slot *s,
                         uint64_t bytes)
{
    if (s != NULL) /* slot first: a kill in between overcounts only */
        atomic_fetch_sub_explicit(&s->used, (int64_t)bytes,
                                  memory_order_relaxed);
    atomic_fetch_sub_explicit(&l->used, (int64_t)bytes, memory_order_release);
}

static void unreserve(struct shim_dev *d, uint64_t bytes)
{
    unreserve_on(d->ledger, d->slot, bytes);
}

/* The card's share of a charge: the time-sliced apps' non-evictable
 * memory must fit the card together (docs/internals/timeslice.md), so
 * an allocation that would pass it is refused here, before the driver. */
static int card_take(struct shim_dev *d, uint64_t bytes)
{
    uint64_t lim;
    int64_t used;

    if (card_reserve(d, bytes) == 0 ||
        (reclaim_dead(d->card, &shim_state.card_reclaim_next) &&
         card_reserve(d, bytes) == 0))
        return 0;
    lim = atomic_load_explicit(&d->card->limit, memory_order_relaxed);
    used = atomic_load_explicit(&d->card->used, memory_order_relaxed);
    shim_log("dev %d: %llu bytes refused: the time-sliced apps' memory "
             "that cannot be evicted (%lld bytes) would pass the card's "
             "%llu", d->ledger->device, (unsigned long long)bytes,
             (long long)used, (unsigned long long)lim);
    return -1;
}

/* Both ledgers' shares of a change of `delta` bytes (negative: give). */
static int charge(struct shim_dev *d, int card, int64_t delta)
{
    if (delta < 0) {
        unreserve(d, (uint64_t)-delta);
        if (card)
            unreserve_on(d->card, d->card_slot, (uint64_t)-delta);
        return 0;
    }
    if (reserve_or_reclaim(d, (uint64_t)delta) != 0)
        return -1;
    if (card && card_take(d, (uint64_t)delta) != 0) {
        unreserve(d, (uint64_t)delta);
        return -1;
    }
    return 0;
}

static int begin(struct shim_charge *c, int ordinal, uint64_t bytes,
                 int evictable)
{
    c->dev = NULL;
    c->ordinal = ordinal;
    c->bytes = bytes;
    c->card = 0;
    c->ctx = 0;
    if (!shim_state.any_limit)
        return 0;
    c->dev = quota_dev(ordinal);
    if (c->dev == NULL)
        return 0;
    c->card = c->dev->card != NULL && !evictable;
    if (charge(c->dev, c->card, (int64_t)bytes) != 0) {
        c->dev = NULL;
        return -1;
    }
    return 0;
}

int quota_begin(struct shim_charge *c, int ordinal, uint64_t bytes)
{
    return begin(c, ordinal, bytes, 0);
}

int quota_begin_evictable(struct shim_charge *c, int ordinal, uint64_t bytes)
{
    return begin(c, ordinal, bytes, 1);
}

int quota_adjust(struct shim_charge *c, uint64_t bytes)
{
    if (c->dev == NULL || bytes == c->bytes)
        return 0;
    if (charge(c->dev, c->card, (int64_t)bytes - (int64_t)c->bytes) != 0)
        return -1;
    c->bytes = bytes;
    return 0;
}

CUresult quota_end(struct shim_charge *c, CUresult rc, enum shim_kind kind,
                   uint64_t key)
{
    if (c->dev == NULL)
        return rc;
    if (rc != CUDA_SUCCESS) {
        charge(c->dev, c->card, -(int64_t)c->bytes);
        return rc;
    }
    if (c->dev->slot != NULL)
        atomic_fetch_add_explicit(&c->dev->slot->allocs, 1,
                                  memory_order_relaxed);
    if (track_put(kind, key, c->ordinal | (c->card ? SHIM_ORD_CARD : 0),
                  c->bytes, c->ctx) != 0)
        shim_log("allocation table full: %llu bytes stay charged",
                 (unsigned long long)c->bytes);
    return rc;
}

void quota_release(int ordinal, uint64_t bytes)
{
    struct shim_dev *d = quota_dev(ordinal & SHIM_ORD_MASK);

    if (d == NULL)
        return;
    if (d->slot != NULL)
        atomic_fetch_sub_explicit(&d->slot->allocs, 1, memory_order_relaxed);
    charge(d, (ordinal & SHIM_ORD_CARD) && d->card != NULL, -(int64_t)bytes);
}

void quota_give(int ordinal, uint64_t bytes)
{
    struct shim_dev *d = quota_dev(ordinal);

    /* a pool's or a context's charge: never evictable */
    if (d != NULL && bytes != 0)
        charge(d, d->card != NULL, -(int64_t)bytes);
}

void quota_unslot(int ordinal, uint64_t bytes)
{
    struct shim_dev *d = quota_dev(ordinal);

    if (d != NULL && d->slot != NULL)
        atomic_fetch_sub_explicit(&d->slot->used, (int64_t)bytes,
                                  memory_order_relaxed);
}

void quota_unshared(int ordinal, uint64_t bytes)
{
    struct shim_dev *d = quota_dev(ordinal);

    if (d != NULL)
        atomic_fetch_sub_explicit(&d->ledger->used, (int64_t)bytes,
                                  memory_order_release);
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
    used = (u < 0 ? 0 : (uint64_t)u) + accel_ledger_untracked(d->ledger);
    used = used > total ? total : used;
    *out_total = total;
    /* never more than the card has free: a neighbour may hold the rest */
    *out_free = total - used < phys_free ? total - used : phys_free;
    *out_used = total - *out_free;
}

/* Give our slot of l back: its charge leaves the ledger with us. */
static void slot_release(struct accel_ledger *l,
                         struct accel_ledger_slot **slot)
{
    struct accel_ledger_slot *s = *slot;
    int64_t used;

    if (s == NULL)
        return;
    used = atomic_exchange(&s->used, 0);
    atomic_store(&s->allocs, 0);
    if (used != 0)
        atomic_fetch_sub(&l->used, used);
    atomic_store(&s->key, 0);
    *slot = NULL;
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
    d->card_slot = NULL;
    if (d->ledger == NULL && shim_state.standalone)
        d->path[0] = '\0'; /* config_dev may have been cut mid-write */
}

void quota_fork_child(void)
{
    /* a reread in flight at the fork is the parent's thread's */
    atomic_store(&reread_busy, 0);
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
        d->card_slot = NULL;
        atomic_store(&d->state, SHIM_DEV_UNSET);
    }
}

void quota_detach_all(void)
{
    for (int i = 0; i < SHIM_MAX_DEV; i++) {
        struct shim_dev *d = &shim_state.dev[i];
        if (atomic_load(&d->state) != SHIM_DEV_READY)
            continue;
        slot_release(d->ledger, &d->slot);
        if (d->card != NULL)
            slot_release(d->card, &d->card_slot);
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

int quota_member(int ordinal, pid_t pid)
{
    struct shim_dev *d = quota_dev(ordinal);

    if (pid == shim_state.pid)
        return 1;
    if (d == NULL)
        return 0;
    for (unsigned i = 0; i < ACCEL_LEDGER_SLOTS; i++) {
        uint64_t key = atomic_load_explicit(&d->ledger->slots[i].key,
                                            memory_order_relaxed);
        if (key != 0 && key != ACCEL_LEDGER_RECLAIMING &&
            (pid_t)(key & ((1ULL << ACCEL_LEDGER_PID_BITS) - 1)) == pid)
            return 1;
    }
    return 0;
}

size_t quota_total(int ordinal, size_t bytes)
{
    uint64_t vt, vf, vu;

    quota_view(ordinal, bytes, bytes, &vt, &vf, &vu);
    return (size_t)vt;
}
