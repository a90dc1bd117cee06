/* SPDX-License-Identifier: MIT */
/*
 * admission_index.c: the free-capacity index of a snapshot (admission.h,
 * adm_index_*; its layout in admission_int.h): built once, then kept
 * current node by node, so that adm_place asks it for the few candidates
 * that can win instead of reading every card.
 *
 * Pure: no I/O, no locks, no clock. Only adm_index_build allocates (and
 * adm_index_check, for its scratch copy). The treaps are keyed and
 * tie-broken exactly as the scans order cards and nodes, and their
 * priorities are a hash of the slot, so the shape (and every answer) is a
 * function of the snapshot alone.
 */
#include "daemon/rules/admission_int.h"

#include <stdlib.h>
#include <string.h>

#define NO_TREE 0xffu

/* ---- treap ---- */

static uint32_t prio(uint32_t id)
{
    uint32_t x = id * 0x9e3779b1u;

    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    return x ^ (x >> 16);
}

/* Is entry a ordered before (key, tie)? */
static bool before(const struct idx_ent *p, uint32_t a, uint64_t key,
                   uint32_t tie)
{
    return p[a].key < key || (p[a].key == key && p[a].tie < tie);
}

/* Does entry a carry a larger R than b (the lower node on ties)? */
static bool larger_r(const struct idx_ent *p, uint32_t a, uint32_t b)
{
    return p[a].aux > p[b].aux || (p[a].aux == p[b].aux && p[a].tie < p[b].tie);
}

/* Recompute t's subtree best (span only: aug). */
static void pull(struct idx_ent *p, uint32_t t, bool aug)
{
    uint32_t m = t;

    if (!aug)
        return;
    if (p[t].l != IDX_NIL && larger_r(p, p[p[t].l].mx, m))
        m = p[p[t].l].mx;
    if (p[t].r != IDX_NIL && larger_r(p, p[p[t].r].mx, m))
        m = p[p[t].r].mx;
    p[t].mx = m;
}

/* Is entry a ordered before entry b? */
static bool ent_before(const struct idx_ent *p, uint32_t a, uint32_t b)
{
    return before(p, a, p[b].key, p[b].tie);
}

static uint32_t rot_right(struct idx_ent *p, uint32_t t, bool aug)
{
    uint32_t l = p[t].l;

    p[t].l = p[l].r;
    p[l].r = t;
    pull(p, t, aug);
    pull(p, l, aug);
    return l;
}

static uint32_t rot_left(struct idx_ent *p, uint32_t t, bool aug)
{
    uint32_t r = p[t].r;

    p[t].r = p[r].l;
    p[r].l = t;
    pull(p, t, aug);
    pull(p, r, aug);
    return r;
}

/* Join a and b, every entry of a ordered before every entry of b. */
static uint32_t merge(struct idx_ent *p, uint32_t a, uint32_t b, bool aug)
{
    if (a == IDX_NIL)
        return b;
    if (b == IDX_NIL)
        return a;
    if (prio(a) > prio(b)) {
        p[a].r = merge(p, p[a].r, b, aug);
        pull(p, a, aug);
        return a;
    }
    p[b].l = merge(p, a, p[b].l, aug);
    pull(p, b, aug);
    return b;
}

/* Insert id under t (one descent, rotations on the way back up). */
static uint32_t insert_at(struct idx_ent *p, uint32_t t, uint32_t id,
                          bool aug)
{
    if (t == IDX_NIL)
        return id;
    if (ent_before(p, id, t)) {
        p[t].l = insert_at(p, p[t].l, id, aug);
        if (prio(p[t].l) > prio(t))
            return rot_right(p, t, aug);
    } else {
        p[t].r = insert_at(p, p[t].r, id, aug);
        if (prio(p[t].r) > prio(t))
            return rot_left(p, t, aug);
    }
    pull(p, t, aug);
    return t;
}

/* Remove id from under t: its children take its place. */
static uint32_t remove_at(struct idx_ent *p, uint32_t t, uint32_t id,
                          bool aug)
{
    if (t == IDX_NIL)
        return IDX_NIL; /* not there: nothing to undo */
    if (t == id)
        return merge(p, p[t].l, p[t].r, aug);
    if (ent_before(p, id, t))
        p[t].l = remove_at(p, p[t].l, id, aug);
    else
        p[t].r = remove_at(p, p[t].r, id, aug);
    pull(p, t, aug);
    return t;
}

/* Insert slot id with its key, aux and tie already set; aug: keep mx. */
static void tree_insert(struct idx_ent *p, uint32_t *root, uint32_t id,
                        bool aug)
{
    p[id].l = p[id].r = IDX_NIL;
    p[id].mx = id;
    *root = insert_at(p, *root, id, aug);
}

/* Remove slot id (in the tree, with the key it was inserted with). */
static void tree_remove(struct idx_ent *p, uint32_t *root, uint32_t id,
                        bool aug)
{
    *root = remove_at(p, *root, id, aug);
}

uint32_t idx_ceil(const struct idx_ent *p, uint32_t root, uint64_t key,
                  uint32_t tie)
{
    uint32_t best = IDX_NIL;

    for (uint32_t t = root; t != IDX_NIL;) {
        if (before(p, t, key, tie)) {
            t = p[t].r;
        } else {
            best = t;
            t = p[t].l;
        }
    }
    return best;
}

uint32_t idx_floor(const struct idx_ent *p, uint32_t root, uint64_t key,
                   uint32_t tie)
{
    uint32_t best = IDX_NIL;

    for (uint32_t t = root; t != IDX_NIL;) {
        if (p[t].key < key || (p[t].key == key && p[t].tie <= tie)) {
            best = t;
            t = p[t].r;
        } else {
            t = p[t].l;
        }
    }
    return best;
}

/* ---- what a node contributes ---- */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t threshold(uint64_t cap)
{
    return cap / 1000 * ADM_PRESSURE_PERMILLE +
           cap % 1000 * ADM_PRESSURE_PERMILLE / 1000;
}

static bool valid_dev(const struct adm_device *d)
{
    return d->healthy && d->present && (unsigned)d->st < ACCEL_SUPPORT_COUNT &&
           (unsigned)d->type < ACCEL_TYPE_COUNT;
}

/* The single-card tree of card i, NO_TREE when it takes no placement. */
static unsigned card_tree_of(const struct adm_snapshot *s, uint32_t i)
{
    const struct adm_device *d = &s->devs[i];

    if (!valid_dev(d) || d->node >= s->nnodes || !s->nodes[d->node].enabled)
        return NO_TREE;
    if (d->st == ACCEL_SUPPORT_EXCLUSIVE && d->nbound > 0)
        return NO_TREE;
    if (d->st == ACCEL_SUPPORT_MEMSLICE && adm_device_free(d) == 0)
        return NO_TREE;
    return (unsigned)d->type * 3 + (unsigned)d->st;
}

static void refresh_card(struct adm_index *x, const struct adm_snapshot *s,
                         uint32_t i)
{
    unsigned t = card_tree_of(s, i);
    uint64_t f = adm_device_free(&s->devs[i]);

    if (x->card_tree[i] == t && (t == NO_TREE || x->card[i].key == f))
        return;
    if (x->card_tree[i] != NO_TREE)
        tree_remove(x->card, &x->card_root[x->card_tree[i]], i, false);
    x->card_tree[i] = (uint8_t)t;
    if (t == NO_TREE)
        return;
    x->card[i].key = f;
    x->card[i].tie = i;
    x->card[i].aux = 0;
    tree_insert(x->card, &x->card_root[t], i, false);
}

/* What card d gives a multi-card gathering (0: nothing). */
static uint64_t gather_free(const struct adm_device *d)
{
    if (d->type != ACCEL_TYPE_NVIDIA || !valid_dev(d))
        return 0;
    return adm_device_free(d);
}

/* Walks a node's cards in gathering order (Exclusive, MemorySlice,
 * TimeSlice; index order in each), those that give something. */
struct seq {
    const struct adm_snapshot *s; /* the snapshot */
    const struct adm_node *nd;    /* the node */
    int m;                        /* position in the mode order */
    uint32_t i;                   /* next device */
};

static void seq_init(struct seq *q, const struct adm_snapshot *s, uint32_t n)
{
    q->s = s;
    q->nd = &s->nodes[n];
    q->m = 0;
    q->i = q->nd->first_dev;
}

/* The next card's free memory and mode; false at the end. */
static bool seq_next(struct seq *q, uint64_t *f, enum accel_support *st)
{
    static const enum accel_support order[3] = {
        ACCEL_SUPPORT_EXCLUSIVE, ACCEL_SUPPORT_MEMSLICE,
        ACCEL_SUPPORT_TIMESLICE};
    const uint32_t end = q->nd->first_dev + q->nd->ndev;

    while (q->m < 3) {
        while (q->i < end) {
            const struct adm_device *d = &q->s->devs[q->i++];
            if (d->st == order[q->m] && (*f = gather_free(d)) > 0) {
                *st = order[q->m];
                return true;
            }
        }
        q->m++;
        q->i = q->nd->first_dev;
    }
    return false;
}

static void set_slack(struct adm_index *x, const struct adm_node *nd,
                      uint32_t n, uint64_t ts)
{
    uint64_t t = threshold(nd->mem.total), key = 0;

    if (nd->mem.used <= t && ts <= t - nd->mem.used)
        key = t - nd->mem.used - ts + 1;
    if (x->node[n].in_slack && x->node[n].slack == key && ts > 0)
        return;
    if (x->node[n].in_slack)
        tree_remove(x->slk, &x->slk_root, n, false);
    x->node[n].in_slack = false;
    x->node[n].slack = 0;
    if (ts == 0)
        return;
    x->node[n].slack = key;
    x->slk[n].key = key;
    x->slk[n].tie = n;
    x->slk[n].aux = 0;
    tree_insert(x->slk, &x->slk_root, n, false);
    x->node[n].in_slack = true;
}

/* Does slot hold (lo, hi) already? */
static bool entry_is(const struct adm_index *x, uint32_t slot, uint64_t lo,
                     uint64_t hi)
{
    return x->cov[slot].key == hi && x->cov[slot].aux == lo;
}

static void entry_remove(struct adm_index *x, uint32_t slot)
{
    tree_remove(x->cov, &x->cov_root, slot, false);
    tree_remove(x->spn, &x->spn_root, slot, true);
}

static void entry_insert(struct adm_index *x, uint32_t slot, uint32_t n,
                         uint64_t lo, uint64_t hi)
{
    x->cov[slot].key = hi;
    x->cov[slot].aux = lo;
    x->cov[slot].tie = n;
    tree_insert(x->cov, &x->cov_root, slot, false);
    x->spn[slot].key = lo;
    x->spn[slot].aux = hi;
    x->spn[slot].tie = n;
    tree_insert(x->spn, &x->spn_root, slot, true);
}

/*
 * Node n's cover/span entries, mode bits and slack. Entries that keep
 * their value stay; the others are taken out first and put in after, so
 * the trees never hold two equal keys of one node.
 */
static void refresh_cover(struct adm_index *x, const struct adm_snapshot *s,
                          uint32_t n)
{
    const struct adm_node *nd = &s->nodes[n];
    const uint32_t old = x->node[n].ncov;
    uint64_t cum = 0, ts = 0, f;
    enum accel_support st;
    uint32_t k = 0;
    struct seq q;

    for (int m = 0; m < 3; m++)
        x->mbits[m][n / 64] &= ~(UINT64_C(1) << (n % 64));
    seq_init(&q, s, n);
    while (nd->enabled && seq_next(&q, &f, &st)) {
        if (k < old && !entry_is(x, nd->first_dev + k, cum, sat_add(cum, f)))
            entry_remove(x, nd->first_dev + k);
        cum = sat_add(cum, f);
        k++;
    }
    for (uint32_t j = k; j < old; j++)
        entry_remove(x, nd->first_dev + j);
    cum = 0;
    k = 0;
    seq_init(&q, s, n);
    while (nd->enabled && seq_next(&q, &f, &st)) {
        uint32_t slot = nd->first_dev + k;
        if (k >= old || !entry_is(x, slot, cum, sat_add(cum, f)))
            entry_insert(x, slot, n, cum, sat_add(cum, f));
        cum = sat_add(cum, f);
        k++;
        x->mbits[st][n / 64] |= UINT64_C(1) << (n % 64);
        if (st == ACCEL_SUPPORT_TIMESLICE)
            ts = sat_add(ts, f);
    }
    x->node[n].ncov = k;
    set_slack(x, nd, n, ts);
}

void adm_index_update_node(struct adm_snapshot *s, uint32_t node)
{
    struct adm_index *x = s->index;
    const struct adm_node *nd;

    if (x == NULL || node >= s->nnodes || x->nnodes != s->nnodes ||
        x->ndevs != s->ndevs)
        return; /* a stale index is never read (have_index) */
    nd = &s->nodes[node];
    for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++)
        refresh_card(x, s, i);
    refresh_cover(x, s, node);
}

void adm_index_update_dev(struct adm_snapshot *s, uint32_t dev)
{
    if (s->index != NULL && dev < s->ndevs)
        adm_index_update_node(s, s->devs[dev].node);
}

/* ---- life cycle ---- */

static void index_free(struct adm_index *x)
{
    if (x == NULL)
        return;
    free(x->card);
    free(x->card_tree);
    free(x->cov);
    free(x->spn);
    free(x->slk);
    free(x->node);
    for (int m = 0; m < 3; m++)
        free(x->mbits[m]);
    free(x);
}

static struct adm_index *index_alloc(size_t nnodes, size_t ndevs)
{
    struct adm_index *x = calloc(1, sizeof(*x));
    size_t nd = ndevs ? ndevs : 1, nn = nnodes ? nnodes : 1;
    bool ok;

    if (x == NULL)
        return NULL;
    x->nnodes = nnodes;
    x->ndevs = ndevs;
    x->card = calloc(nd, sizeof(*x->card));
    x->card_tree = malloc(nd);
    x->cov = calloc(nd, sizeof(*x->cov));
    x->spn = calloc(nd, sizeof(*x->spn));
    x->slk = calloc(nn, sizeof(*x->slk));
    x->node = calloc(nn, sizeof(*x->node));
    ok = x->card && x->card_tree && x->cov && x->spn && x->slk && x->node;
    for (int m = 0; m < 3; m++) {
        x->mbits[m] = calloc((nn + 63) / 64, sizeof(uint64_t));
        ok = ok && x->mbits[m] != NULL;
    }
    if (!ok) {
        index_free(x);
        return NULL;
    }
    memset(x->card_tree, NO_TREE, nd);
    for (size_t t = 0; t < ACCEL_TYPE_COUNT * 3; t++)
        x->card_root[t] = IDX_NIL;
    x->cov_root = x->spn_root = x->slk_root = IDX_NIL;
    return x;
}

/* Devices beyond UINT32_MAX - 1 could not be told from IDX_NIL. */
static bool fits_slots(const struct adm_snapshot *s)
{
    return s->ndevs < UINT32_MAX && s->nnodes < UINT32_MAX;
}

enum accel_err adm_index_build(struct adm_snapshot *s)
{
    struct adm_index *x;

    adm_index_free(s);
    if (!fits_slots(s))
        return ACCEL_ENOMEM;
    x = index_alloc(s->nnodes, s->ndevs);
    if (x == NULL)
        return ACCEL_ENOMEM;
    s->index = x;
    for (uint32_t n = 0; n < s->nnodes; n++)
        adm_index_update_node(s, n);
    /* devices of no node's range (none in a well-formed snapshot) */
    return ACCEL_OK;
}

void adm_index_free(struct adm_snapshot *s)
{
    index_free(s->index);
    s->index = NULL;
}

enum accel_err adm_index_clone(const struct adm_snapshot *from,
                               struct adm_snapshot *to)
{
    const struct adm_index *a = from->index;
    struct adm_index *x;
    size_t nd, nn;

    to->index = NULL;
    if (a == NULL)
        return ACCEL_OK;
    x = index_alloc(a->nnodes, a->ndevs);
    if (x == NULL)
        return ACCEL_ENOMEM;
    nd = a->ndevs ? a->ndevs : 1;
    nn = a->nnodes ? a->nnodes : 1;
    memcpy(x->card, a->card, nd * sizeof(*x->card));
    memcpy(x->card_tree, a->card_tree, nd);
    memcpy(x->cov, a->cov, nd * sizeof(*x->cov));
    memcpy(x->spn, a->spn, nd * sizeof(*x->spn));
    memcpy(x->slk, a->slk, nn * sizeof(*x->slk));
    memcpy(x->node, a->node, nn * sizeof(*x->node));
    for (int m = 0; m < 3; m++)
        memcpy(x->mbits[m], a->mbits[m], (nn + 63) / 64 * sizeof(uint64_t));
    memcpy(x->card_root, a->card_root, sizeof(x->card_root));
    x->cov_root = a->cov_root;
    x->spn_root = a->spn_root;
    x->slk_root = a->slk_root;
    to->index = x;
    return ACCEL_OK;
}

/* ---- self-check (tests) ---- */

/* Are the trees rooted at a and b the same sequence of (slot, key, aux)? */
static bool same_tree(const struct idx_ent *p, uint32_t a,
                      const struct idx_ent *q, uint32_t b)
{
    uint32_t x = a == IDX_NIL ? IDX_NIL : idx_ceil(p, a, 0, 0);
    uint32_t y = b == IDX_NIL ? IDX_NIL : idx_ceil(q, b, 0, 0);

    while (x != IDX_NIL && y != IDX_NIL) {
        if (x != y || p[x].key != q[y].key || p[x].aux != q[y].aux ||
            p[x].tie != q[y].tie || p[x].mx != q[y].mx)
            return false;
        x = p[x].tie == UINT32_MAX ? IDX_NIL
                                   : idx_ceil(p, a, p[x].key, p[x].tie + 1);
        y = q[y].tie == UINT32_MAX ? IDX_NIL
                                   : idx_ceil(q, b, q[y].key, q[y].tie + 1);
    }
    return x == IDX_NIL && y == IDX_NIL;
}

static bool same_index(const struct adm_index *a, const struct adm_index *b)
{
    size_t nn = a->nnodes ? a->nnodes : 1;

    for (size_t t = 0; t < ACCEL_TYPE_COUNT * 3; t++)
        if (!same_tree(a->card, a->card_root[t], b->card, b->card_root[t]))
            return false;
    if (!same_tree(a->cov, a->cov_root, b->cov, b->cov_root) ||
        !same_tree(a->spn, a->spn_root, b->spn, b->spn_root) ||
        !same_tree(a->slk, a->slk_root, b->slk, b->slk_root))
        return false;
    for (int m = 0; m < 3; m++)
        if (memcmp(a->mbits[m], b->mbits[m], (nn + 63) / 64 * 8) != 0)
            return false;
    for (size_t n = 0; n < a->nnodes; n++)
        if (a->node[n].ncov != b->node[n].ncov ||
            a->node[n].in_slack != b->node[n].in_slack ||
            a->node[n].slack != b->node[n].slack)
            return false;
    return true;
}

bool adm_index_check(const struct adm_snapshot *s)
{
    struct adm_snapshot fresh = *s;
    bool ok;

    if (s->index == NULL)
        return true;
    if (s->index->nnodes != s->nnodes || s->index->ndevs != s->ndevs)
        return false;
    fresh.index = NULL;
    if (adm_index_build(&fresh) != ACCEL_OK)
        return false;
    ok = same_index(s->index, fresh.index);
    adm_index_free(&fresh);
    return ok;
}
