/* SPDX-License-Identifier: MIT */
/*
 * track.c: the table of live allocations, pointer or handle -> (bytes,
 * device), so a free gives back exactly what was charged and a free of an
 * unknown pointer is simply passed to the driver.
 *
 * O(1): the key's hash picks one of SHIM_TRACK_STRIPES stripes, each an
 * open-addressing table with linear probing and backward-shift deletion (no
 * tombstones, so churn never degrades it), grown at half load. A stripe has
 * its own mutex, held for a few dozen instructions; allocation and free paths
 * only (kernel launches never come here). Fork: all stripes are locked
 * around fork() so the child never inherits a held lock, and the child
 * starts empty (the parent's allocations are not its own).
 */
#include "shim/shim.h"

#include <stdlib.h>
#include <string.h>

#define META(bytes, dev, kind)                                                 \
    (((uint64_t)(bytes) << 8) | ((uint64_t)(dev) << 3) | (uint64_t)(kind))
#define META_KIND(m) ((int)((m)&7))
#define META_DEV(m) ((int)(((m) >> 3) & 31))
#define META_BYTES(m) ((m) >> 8)

static uint64_t mix(uint64_t key, enum shim_kind kind)
{
    uint64_t h = key ^ ((uint64_t)kind * 0x9e3779b97f4a7c15ULL);

    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

void track_init(void)
{
    /* The stripes live in zeroed .bss; where the default mutex initializer
     * is all zero bytes (glibc) they are ready as they are, and writing
     * them would fault in pages for nothing (start-up cost). */
    static const pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    static const pthread_mutex_t zero;

    if (memcmp(&init, &zero, sizeof(init)) == 0)
        return;
    for (int i = 0; i < SHIM_TRACK_STRIPES; i++)
        pthread_mutex_init(&shim_state.track[i].mu, NULL);
}

static struct shim_track_stripe *stripe_of(uint64_t h)
{
    return &shim_state.track[h % SHIM_TRACK_STRIPES];
}

static uint32_t home_of(const struct shim_track_stripe *s, uint64_t key,
                        int kind)
{
    return (uint32_t)(mix(key, (enum shim_kind)kind) / SHIM_TRACK_STRIPES) &
           (s->cap - 1);
}

static void place(struct shim_track_stripe *s, uint64_t key, uint64_t meta,
                  uint64_t ctx)
{
    uint32_t i = home_of(s, key, META_KIND(meta));

    while (s->e[i].meta != 0)
        i = (i + 1) & (s->cap - 1);
    s->e[i].key = key;
    s->e[i].meta = meta;
    s->e[i].ctx = ctx;
    s->count++;
}

static int grow(struct shim_track_stripe *s)
{
    uint32_t old_cap = s->cap, cap = old_cap ? old_cap * 2 : 64;
    struct shim_track_entry *old = s->e, *e = calloc(cap, sizeof(*e));

    if (e == NULL)
        return -1;
    s->e = e;
    s->cap = cap;
    s->count = 0;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i].meta != 0)
            place(s, old[i].key, old[i].meta, old[i].ctx);
    free(old);
    return 0;
}

int track_put(enum shim_kind kind, uint64_t key, int ordinal, uint64_t bytes,
              uint64_t ctx)
{
    struct shim_track_stripe *s = stripe_of(mix(key, kind));
    int rc = 0;

    pthread_mutex_lock(&s->mu);
    if ((s->count + 1) * 2 > s->cap)
        rc = grow(s);
    if (rc == 0)
        place(s, key, META(bytes, ordinal, kind), ctx);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Remove slot `i`, shifting later members of its cluster back. */
static void remove_at(struct shim_track_stripe *s, uint32_t i)
{
    uint32_t mask = s->cap - 1, j = i;

    for (;;) {
        j = (j + 1) & mask;
        if (s->e[j].meta == 0)
            break;
        uint32_t k = home_of(s, s->e[j].key, META_KIND(s->e[j].meta));
        /* move e[j] into the hole unless its home lies in (i, j] */
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            s->e[i] = s->e[j];
            i = j;
        }
    }
    s->e[i].meta = 0;
    s->e[i].key = 0;
    s->e[i].ctx = 0;
    s->count--;
}

int track_take(enum shim_kind kind, uint64_t key, int *out_ordinal,
               uint64_t *out_bytes, uint64_t *out_ctx)
{
    struct shim_track_stripe *s = stripe_of(mix(key, kind));
    int found = 0;

    pthread_mutex_lock(&s->mu);
    if (s->cap != 0) {
        uint32_t i = home_of(s, key, kind);
        for (; s->e[i].meta != 0; i = (i + 1) & (s->cap - 1)) {
            if (s->e[i].key != key || META_KIND(s->e[i].meta) != (int)kind)
                continue;
            *out_ordinal = META_DEV(s->e[i].meta);
            *out_bytes = META_BYTES(s->e[i].meta);
            if (out_ctx != NULL)
                *out_ctx = s->e[i].ctx;
            remove_at(s, i);
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

/* Whether a record of this kind dies with the context it was made in. */
static int dies_with_ctx(int kind)
{
    return kind == SHIM_KIND_PTR || kind == SHIM_KIND_ARRAY ||
           kind == SHIM_KIND_MIPMAP || kind == SHIM_KIND_LIMIT;
}

/* Whether e is made in ctx (ctx != 0), or else on device `dev`. */
static int made_in(const struct shim_track_entry *e, uint64_t ctx, int dev)
{
    if (e->meta == 0 || !dies_with_ctx(META_KIND(e->meta)))
        return 0;
    return ctx != 0 ? e->ctx == ctx
                    : (META_DEV(e->meta) & SHIM_ORD_MASK) == dev;
}

/* Take out the records of stripe s made in ctx (or on dev) into out (up
 * to cap); returns how many (the rest stays for the next pass). */
static unsigned drop_from(struct shim_track_stripe *s, uint64_t ctx, int dev,
                          struct shim_track_entry *out, unsigned cap)
{
    unsigned n = 0;

    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->cap && n < cap;) {
        struct shim_track_entry *e = &s->e[i];
        if (!made_in(e, ctx, dev)) {
            i++;
            continue;
        }
        out[n++] = *e;
        remove_at(s, i); /* a later entry may move into i: look again */
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

static unsigned drop(uint64_t ctx, int dev)
{
    struct shim_track_entry out[64];
    unsigned total = 0, n;

    for (int i = 0; i < SHIM_TRACK_STRIPES; i++) {
        do {
            n = drop_from(&shim_state.track[i], ctx, dev, out, 64);
            for (unsigned k = 0; k < n; k++)
                quota_release(META_DEV(out[k].meta), META_BYTES(out[k].meta));
            total += n;
        } while (n == 64);
    }
    return total;
}

unsigned track_drop_ctx(uint64_t ctx)
{
    return ctx != 0 ? drop(ctx, -1) : 0;
}

unsigned track_drop_dev(int ordinal)
{
    return drop(0, ordinal);
}

void track_fork_prepare(void)
{
    if (!atomic_load(&shim_state.core_ready))
        return;
    for (int i = 0; i < SHIM_TRACK_STRIPES; i++)
        pthread_mutex_lock(&shim_state.track[i].mu);
}

void track_fork_parent(void)
{
    if (!atomic_load(&shim_state.core_ready))
        return;
    for (int i = 0; i < SHIM_TRACK_STRIPES; i++)
        pthread_mutex_unlock(&shim_state.track[i].mu);
}

void track_fork_child(void)
{
    if (!atomic_load(&shim_state.core_ready))
        return;
    for (int i = 0; i < SHIM_TRACK_STRIPES; i++) {
        struct shim_track_stripe *s = &shim_state.track[i];
        if (s->cap != 0)
            memset(s->e, 0, (size_t)s->cap * sizeof(*s->e));
        s->count = 0;
        pthread_mutex_unlock(&s->mu);
    }
}
