/* SPDX-License-Identifier: MIT */
/*
 * strmap.c: linear probing with tombstones, FNV-1a hashing, grown at 70 %
 * load (tombstones included, so probes stay short).
 */
#include "common/accel_setup.h"
#include "common/strmap.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define TOMBSTONE ((char *)1)

struct slot {
    char *key;      /* NULL = empty, TOMBSTONE = deleted */
    uint32_t hash;  /* cached hash of key */
    uint32_t value; /* the mapped value */
};

struct strmap {
    struct slot *slots; /* capacity entries, a power of two */
    size_t cap;         /* number of slots */
    size_t live;        /* keys present */
    size_t used;        /* keys present + tombstones */
};

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 16777619u;
    }
    return h;
}

struct strmap *strmap_new(void)
{
    struct strmap *m = xcalloc(1, sizeof(*m));
    m->cap = 16;
    m->slots = xcalloc(m->cap, sizeof(struct slot));
    return m;
}

void strmap_free(struct strmap *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key && m->slots[i].key != TOMBSTONE)
            free(m->slots[i].key);
    free(m->slots);
    free(m);
}

static struct slot *find(const struct strmap *m, const char *key, uint32_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct slot *s = &m->slots[i];
        if (s->key == NULL)
            return NULL;
        if (s->key != TOMBSTONE && s->hash == h && strcmp(s->key, key) == 0)
            return s;
    }
}

static void grow(struct strmap *m)
{
    struct slot *old = m->slots;
    size_t oldcap = m->cap;
    size_t ncap = m->live * 2 >= m->cap / 2 ? m->cap * 2 : m->cap;

    m->slots = xcalloc(ncap, sizeof(struct slot));
    m->cap = ncap;
    m->used = m->live;
    for (size_t i = 0; i < oldcap; i++) {
        struct slot *s = &old[i];
        if (s->key == NULL || s->key == TOMBSTONE)
            continue;
        size_t j = s->hash & (ncap - 1);
        while (m->slots[j].key)
            j = (j + 1) & (ncap - 1);
        m->slots[j] = *s;
    }
    free(old);
}

void strmap_put(struct strmap *m, const char *key, uint32_t value)
{
    uint32_t h = hash_str(key);
    struct slot *s = find(m, key, h);
    size_t mask, i;

    if (s) {
        s->value = value;
        return;
    }
    if ((m->used + 1) * 10 >= m->cap * 7)
        grow(m);
    mask = m->cap - 1;
    for (i = h & mask; m->slots[i].key && m->slots[i].key != TOMBSTONE;
         i = (i + 1) & mask)
        ;
    if (m->slots[i].key == NULL)
        m->used++;
    m->slots[i].key = xstrdup(key);
    m->slots[i].hash = h;
    m->slots[i].value = value;
    m->live++;
}

bool strmap_get(const struct strmap *m, const char *key, uint32_t *out)
{
    struct slot *s = find(m, key, hash_str(key));
    if (s == NULL)
        return false;
    *out = s->value;
    return true;
}

bool strmap_del(struct strmap *m, const char *key)
{
    struct slot *s = find(m, key, hash_str(key));
    if (s == NULL)
        return false;
    free(s->key);
    s->key = TOMBSTONE;
    m->live--;
    return true;
}

size_t strmap_count(const struct strmap *m)
{
    return m->live;
}
