/* SPDX-License-Identifier: MIT */
/*
 * admission_place.c: the decisions of SPEC 2 built on admission.c's
 * arithmetic: automatic placement (2.5, binpack or spread, single card,
 * multi-card on one node, multi-node), availability (2.4), the install plan
 * and preflight (2.8).
 *
 * Pure: no I/O, no locks, no globals. Only adm_availability (the arrays it
 * returns) and adm_preflight (its scratch copy of the snapshot and of its
 * index) allocate. With the snapshot's free-capacity index
 * (admission_index.c), adm_place asks it for the candidates that can win
 * and checks only those; without one it scans: each device once per level
 * (multi-card: plus the covering mode's cards of the nodes still in the
 * running), with no allocation, and the pressure arithmetic only for
 * nodes that matter. Both give the same answer.
 * Every placement it returns passes adm_validate, and equals a plain
 * restatement of 2.5 (the unit tests check both on randomized snapshots);
 * see docs/internals/admission.md.
 */
#include "daemon/rules/admission.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/rules/admission_int.h"

/* Sharing modes in placement order (2.5). */
static const enum accel_support mode_order[3] = {
    ACCEL_SUPPORT_EXCLUSIVE, ACCEL_SUPPORT_MEMSLICE, ACCEL_SUPPORT_TIMESLICE};

/* Room on a node for one requirement. */
struct room {
    bool ok;            /* no dimension pressured with no extra memory */
    uint64_t mem_extra; /* most TimeSlice VRAM that still passes 2.3 */
};

/* A placement in the making. */
struct pctx {
    const struct adm_snapshot *s; /* the cluster */
    const struct adm_req *r;      /* the requirement */
    enum adm_policy policy;       /* binpack or spread */
    bool check;                   /* apply node pressure (2.3) */
    uint64_t need;                /* required target: MemorySlice quota */
    uint64_t t[2];                /* target per level, never below need */
};

/* Multi-card gathering state. */
struct gather {
    struct adm_sel *out; /* where items go, or NULL to only count */
    size_t max;          /* most items */
    size_t n;            /* items so far */
    uint64_t left;       /* target still to cover */
    uint64_t free_sum;   /* Σ free memory of the gathered cards */
};

/*
 * The best single card per bucket (level * 3 + mode). key = free memory
 * (binpack) or its complement (spread): the smallest key wins, and a tie
 * keeps the lowest index because devices are scanned in index order.
 */
struct picks {
    uint64_t key[6]; /* key of the best card so far */
    uint32_t dev[6]; /* its index, NO_DEV when none */
};

#define NO_DEV UINT32_MAX

/* What one node's cards can give to a multi-card gathering, per mode. */
struct node_sums {
    uint64_t sum[3]; /* by mode: Σ free of the cards that can contribute
                        (TimeSlice: before the node's headroom) */
    uint32_t cnt[3]; /* by mode: how many such cards */
};

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t threshold(uint64_t cap)
{
    /* cap = 1000q + r: floor(cap * P / 1000) = qP + floor(rP / 1000), exact
     * and without a 128-bit division (a libcall: this runs per node). */
    return cap / 1000 * ADM_PRESSURE_PERMILLE +
           cap % 1000 * ADM_PRESSURE_PERMILLE / 1000;
}

/* Does used + req stay within 90 %? *left gets what remains below it. */
static bool dim_fits(const struct adm_res *res, uint64_t req, uint64_t *left)
{
    uint64_t t = threshold(res->total);

    if (res->used > UINT64_MAX - req || res->used + req > t)
        return false;
    *left = t - res->used - req;
    return true;
}

/* Same verdict as adm_node_pressure, as a headroom for TimeSlice VRAM. */
static struct room node_room(const struct pctx *c, uint32_t n)
{
    const struct adm_node *nd = &c->s->nodes[n];
    struct room rm = {true, UINT64_MAX};
    uint64_t unused;

    if (!c->check)
        return rm;
    rm.ok = dim_fits(&nd->cpu, c->r->req_cpu, &unused) &&
            dim_fits(&nd->disk, c->r->req_disk, &unused) &&
            dim_fits(&nd->mem, c->r->req_mem, &rm.mem_extra);
    return rm;
}

static void pctx_init(struct pctx *c, const struct adm_snapshot *s,
                      const struct adm_req *r, enum adm_policy policy,
                      bool check)
{
    uint64_t lim = adm_target(r, ADM_LEVEL_LIMIT);

    c->s = s;
    c->r = r;
    c->policy = policy;
    c->check = check;
    c->need = adm_target(r, ADM_LEVEL_REQUIRED);
    c->t[ADM_LEVEL_LIMIT] = lim > c->need ? lim : c->need;
    c->t[ADM_LEVEL_REQUIRED] = c->need;
}

/* adm_device_free, inlined into the scans. */
static inline uint64_t dev_free(const struct adm_device *d)
{
    if (d->st == ACCEL_SUPPORT_MEMSLICE)
        return d->overcommit > ADM_OVERCOMMIT_ONE
                   ? adm_memslice_free(d)
                   : d->memory > d->allocated ? d->memory - d->allocated : 0;
    if (d->st == ACCEL_SUPPORT_EXCLUSIVE && d->nbound > 0)
        return 0;
    return d->memory;
}

static bool usable(const struct pctx *c, const struct adm_device *d)
{
    return d->type == c->r->type && d->healthy && d->present &&
           (unsigned)d->st < ACCEL_SUPPORT_COUNT;
}

/*
 * The mode rules for d taking r alone, without health or type: *f gets its
 * free memory; false when its mode refuses (Exclusive taken, MemorySlice
 * with a zero quota, TimeSlice VRAM that would pressure the node).
 */
static inline bool single_free(const struct adm_device *d, uint64_t need,
                               uint64_t mem_extra, uint64_t *f)
{
    switch (d->st) {
    case ACCEL_SUPPORT_EXCLUSIVE:
        *f = d->memory;
        return d->nbound == 0;
    case ACCEL_SUPPORT_MEMSLICE:
        *f = dev_free(d);
        return need != 0; /* a zero quota would be memory-required */
    case ACCEL_SUPPORT_TIMESLICE:
        *f = d->memory;
        return d->memory <= mem_extra;
    default:
        return false;
    }
}

/* Can d take r alone (at the required level), on a node with room rm? */
static bool card_fits(const struct pctx *c, const struct adm_device *d,
                      const struct room *rm)
{
    uint64_t f;

    return usable(c, d) && single_free(d, c->need, rm->mem_extra, &f) &&
           f >= c->need;
}

/* Can d add something to a multi-card gathering? */
static bool card_contributes(const struct pctx *c, const struct adm_device *d,
                             const struct room *rm, uint64_t extra)
{
    if (!usable(c, d))
        return false;
    if (d->st == ACCEL_SUPPORT_EXCLUSIVE)
        return d->nbound == 0 && d->memory > 0;
    if (d->st == ACCEL_SUPPORT_MEMSLICE)
        return dev_free(d) > 0;
    return d->memory > 0 && d->memory <= rm->mem_extra - extra;
}

static enum adm_level fit_level(const struct pctx *c,
                                const struct adm_device *d,
                                const struct room *rm)
{
    uint64_t f;

    if (!card_fits(c, d, rm))
        return ADM_LEVEL_NONE;
    f = dev_free(d);
    return f >= c->t[ADM_LEVEL_LIMIT] ? ADM_LEVEL_LIMIT : ADM_LEVEL_REQUIRED;
}

/* ---- single card ---- */

/*
 * The hot loop of adm_place: one pass over a node's devices. The node's
 * room (2.3) is computed only when one of its cards would replace a
 * bucket's best: a node none of whose cards would be kept needs no
 * pressure arithmetic, and before that point nothing of it was kept.
 */
static void scan_node(const struct pctx *c, uint32_t n, struct picks *p)
{
    const struct adm_node *nd = &c->s->nodes[n];
    const struct adm_device *devs = c->s->devs;
    const enum accel_type type = c->r->type;
    const uint64_t need = c->need, lim = c->t[ADM_LEVEL_LIMIT];
    const uint64_t flip = c->policy == ADM_POLICY_SPREAD ? UINT64_MAX : 0;
    const uint32_t end = nd->first_dev + nd->ndev;
    struct room rm = { false, 0 };
    bool have_room = false;

    for (uint32_t i = nd->first_dev; i < end; i++) {
        const struct adm_device *d = &devs[i];
        uint64_t f, key;
        unsigned b;
        if (d->type != type || !d->healthy || !d->present ||
            !single_free(d, need, UINT64_MAX, &f) || f < need)
            continue;
        b = (f >= lim ? 0u : 3u) + (unsigned)d->st;
        key = f ^ flip;
        if (p->dev[b] != NO_DEV && key >= p->key[b])
            continue;
        if (!have_room) {
            rm = node_room(c, n);
            have_room = true;
        }
        if (!rm.ok)
            return;
        if (d->st == ACCEL_SUPPORT_TIMESLICE && d->memory > rm.mem_extra)
            continue;
        p->key[b] = key;
        p->dev[b] = i;
    }
}

static bool place_single(const struct pctx *c, struct adm_sel *out)
{
    struct picks p;

    for (int b = 0; b < 6; b++)
        p.dev[b] = NO_DEV;
    for (uint32_t n = 0; n < c->s->nnodes; n++)
        if (c->s->nodes[n].enabled && c->s->nodes[n].ndev > 0)
            scan_node(c, n, &p);
    /* a card in the limit buckets beats every card in the required ones */
    for (int b = 0; b < 6; b++) {
        uint32_t i = p.dev[(b / 3) * 3 + (int)mode_order[b % 3]];
        const struct adm_device *d;
        if (i == NO_DEV)
            continue;
        d = &c->s->devs[i];
        out->node = c->s->nodes[d->node].name;
        out->device = d->id;
        out->memory = d->st == ACCEL_SUPPORT_MEMSLICE ? c->need : 0;
        return true;
    }
    return false;
}

/* ---- single card, through the index ---- */

/* Is the index there and built for this snapshot's size? */
static bool have_index(const struct adm_snapshot *s)
{
    return s->index != NULL && s->index->nnodes == s->nnodes &&
           s->index->ndevs == s->ndevs;
}

/* Card i (in the index: usable, its node enabled) passes 2.3 for r. */
static bool idx_card_ok(const struct pctx *c, uint32_t i)
{
    const struct adm_device *d = &c->s->devs[i];
    struct room rm = node_room(c, d->node);

    return rm.ok &&
           (d->st != ACCEL_SUPPORT_TIMESLICE || d->memory <= rm.mem_extra);
}

/*
 * The card scan_node would keep in one bucket: in the tree at root, free
 * memory in [lo, hi], the least (binpack) or most (spread) free that
 * passes 2.3, the lowest index on ties. NO_DEV if none.
 */
static uint32_t idx_pick(const struct pctx *c, uint32_t root, uint64_t lo,
                         uint64_t hi)
{
    const struct idx_ent *p = c->s->index->card;
    uint32_t e;

    if (c->policy != ADM_POLICY_SPREAD) {
        for (e = idx_ceil(p, root, lo, 0); e != IDX_NIL && p[e].key <= hi;
             e = idx_ceil(p, root, p[e].key, e + 1))
            if (idx_card_ok(c, e))
                return e;
        return NO_DEV;
    }
    for (e = idx_floor(p, root, hi, UINT32_MAX);
         e != IDX_NIL && p[e].key >= lo;) {
        uint64_t f = p[e].key; /* the cards with this much free, by index */
        for (uint32_t g = idx_ceil(p, root, f, 0);
             g != IDX_NIL && p[g].key == f; g = idx_ceil(p, root, f, g + 1))
            if (idx_card_ok(c, g))
                return g;
        e = f > 0 ? idx_floor(p, root, f - 1, UINT32_MAX) : IDX_NIL;
    }
    return NO_DEV;
}

/* place_single from the index: per level and mode, one bucket's best. */
static bool place_single_idx(const struct pctx *c, struct adm_sel *out)
{
    const uint64_t need = c->need, lim = c->t[ADM_LEVEL_LIMIT];
    const unsigned type = (unsigned)c->r->type;

    for (int lvl = 0; lvl < (lim > need ? 2 : 1); lvl++) {
        uint64_t lo = lvl == 0 ? lim : need;
        uint64_t hi = lvl == 0 ? UINT64_MAX : lim - 1;
        for (int m = 0; m < 3; m++) {
            enum accel_support st = mode_order[m];
            uint32_t i;
            if (st == ACCEL_SUPPORT_MEMSLICE && need == 0)
                continue; /* a zero quota would be memory-required */
            i = idx_pick(c, c->s->index->card_root[type * 3 + st], lo, hi);
            if (i == NO_DEV)
                continue;
            out->node = c->s->nodes[c->s->devs[i].node].name;
            out->device = c->s->devs[i].id;
            out->memory = st == ACCEL_SUPPORT_MEMSLICE ? need : 0;
            return true;
        }
    }
    return false;
}

/* ---- multi-card ---- */

/* Take card i into g if it contributes; *extra: TimeSlice VRAM so far. */
static void gather_card(const struct pctx *c, struct gather *g, uint32_t i,
                        const struct room *rm, uint64_t *extra)
{
    const struct adm_device *d = &c->s->devs[i];
    uint64_t give = d->memory, quota = 0, f;

    if ((g->left == 0 && g->n > 0) || g->n >= g->max ||
        !card_contributes(c, d, rm, *extra))
        return; /* a zero target still takes one card */
    if (d->st == ACCEL_SUPPORT_MEMSLICE && g->left == 0)
        return; /* a zero quota would be memory-required */
    f = dev_free(d);
    if (d->st == ACCEL_SUPPORT_MEMSLICE) {
        give = f < g->left ? f : g->left;
        quota = give;
    }
    if (d->st == ACCEL_SUPPORT_TIMESLICE)
        *extra += d->memory;
    if (g->out != NULL) {
        g->out[g->n].node = c->s->nodes[d->node].name;
        g->out[g->n].device = d->id;
        g->out[g->n].memory = quota;
    }
    g->n++;
    g->free_sum = f > UINT64_MAX - g->free_sum ? UINT64_MAX : g->free_sum + f;
    g->left = give >= g->left ? 0 : g->left - give;
}

/* Gather the cards of mode m on node n. */
static void gather_mode(const struct pctx *c, struct gather *g, uint32_t n,
                        enum accel_support m, const struct room *rm,
                        uint64_t *extra)
{
    const struct adm_node *nd = &c->s->nodes[n];

    for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++)
        if (c->s->devs[i].st == m)
            gather_card(c, g, i, rm, extra);
}

/* Gather on one node, modes in order. */
static void gather_node(const struct pctx *c, struct gather *g, uint32_t n)
{
    struct room rm;
    uint64_t extra = 0;

    if (!c->s->nodes[n].enabled)
        return;
    rm = node_room(c, n);
    if (!rm.ok)
        return;
    for (int m = 0; m < 3; m++)
        gather_mode(c, g, n, mode_order[m], &rm, &extra);
}

/* Nothing more can be taken: the target is covered, or max reached. */
static bool gather_done(const struct gather *g)
{
    return (g->left == 0 && g->n > 0) || g->n >= g->max;
}

/*
 * gather_mode for gather_all: node n's room is computed only once one of
 * its cards of mode m could contribute (the others are skipped anyway).
 */
static void gather_mode_lazy(const struct pctx *c, struct gather *g, uint32_t n,
                             enum accel_support m)
{
    const struct adm_node *nd = &c->s->nodes[n];
    const uint32_t end = nd->first_dev + nd->ndev;
    struct room rm = { false, 0 };
    bool have_room = false;
    uint64_t extra = 0;

    for (uint32_t i = nd->first_dev; i < end && !gather_done(g); i++) {
        const struct adm_device *d = &c->s->devs[i];
        if (d->st != m || !usable(c, d) || dev_free(d) == 0)
            continue;
        if (!have_room) {
            rm = node_room(c, n);
            have_room = true;
        }
        if (!rm.ok)
            return;
        gather_card(c, g, i, &rm, &extra);
    }
}

/* Gather across nodes: for each mode, every node in order, until done. */
static void gather_all(const struct pctx *c, struct gather *g)
{
    for (int m = 0; m < 3 && !gather_done(g); m++)
        for (uint32_t n = 0; n < c->s->nnodes && !gather_done(g); n++)
            if (c->s->nodes[n].enabled)
                gather_mode_lazy(c, g, n, mode_order[m]);
}

static void gather_init(struct gather *g, struct adm_sel *out, size_t max,
                        uint64_t target)
{
    g->out = out;
    g->max = max;
    g->n = 0;
    g->left = target;
    g->free_sum = 0;
}

/* One pass over node n's cards: per mode, what they can give. */
static void sum_node(const struct pctx *c, uint32_t n, struct node_sums *ns)
{
    const struct adm_node *nd = &c->s->nodes[n];
    const struct adm_device *devs = c->s->devs;
    const enum accel_type type = c->r->type;
    const uint32_t end = nd->first_dev + nd->ndev;
    uint64_t se = 0, sm = 0, st = 0; /* sums in registers, not in *ns */
    uint32_t ce = 0, cm = 0, ct = 0;

    for (uint32_t i = nd->first_dev; i < end; i++) {
        const struct adm_device *d = &devs[i];
        uint64_t f;
        if (d->type != type || !d->healthy || !d->present)
            continue;
        switch (d->st) {
        case ACCEL_SUPPORT_EXCLUSIVE:
            f = d->nbound == 0 ? d->memory : 0;
            se = sat_add(se, f);
            ce += f > 0;
            break;
        case ACCEL_SUPPORT_MEMSLICE:
            f = dev_free(d);
            sm = sat_add(sm, f);
            cm += f > 0;
            break;
        case ACCEL_SUPPORT_TIMESLICE:
            st = sat_add(st, d->memory);
            ct += d->memory > 0;
            break;
        default:
            break;
        }
    }
    ns->sum[ACCEL_SUPPORT_EXCLUSIVE] = se;
    ns->sum[ACCEL_SUPPORT_MEMSLICE] = sm;
    ns->sum[ACCEL_SUPPORT_TIMESLICE] = st;
    ns->cnt[ACCEL_SUPPORT_EXCLUSIVE] = ce;
    ns->cnt[ACCEL_SUPPORT_MEMSLICE] = cm;
    ns->cnt[ACCEL_SUPPORT_TIMESLICE] = ct;
}

/*
 * gather_mode(m) on node n in its common case: g->left > 0 and every card
 * of mode m fits (TimeSlice: their sum is within the headroom), so card k
 * is taken exactly when the frees before it fall short of left (a
 * MemorySlice card gives min(free, left) only when it covers). False when
 * max would cut the walk short: the caller then walks card by card.
 */
static bool gather_prefix(const struct pctx *c, struct gather *g, uint32_t n,
                          enum accel_support m)
{
    const struct adm_node *nd = &c->s->nodes[n];
    const struct adm_device *devs = c->s->devs;
    const enum accel_type type = c->r->type;
    const uint32_t end = nd->first_dev + nd->ndev;
    const uint64_t left = g->left;
    uint64_t cum = 0;
    size_t k = 0;

    for (uint32_t i = nd->first_dev; i < end && cum < left; i++) {
        const struct adm_device *d = &devs[i];
        uint64_t f;
        if (d->st != m || d->type != type || !d->healthy || !d->present)
            continue;
        f = dev_free(d);
        k += f > 0;
        cum = sat_add(cum, f);
    }
    if (g->n > g->max || k > g->max - g->n)
        return false;
    g->n += k;
    g->free_sum = sat_add(g->free_sum, cum);
    g->left = cum >= left ? 0 : left - cum;
    return true;
}

/*
 * Index in mode_order of the mode during which gather_node reaches target,
 * the earlier modes being taken whole; -1 when even every card (TimeSlice
 * before the headroom) falls short. A zero target takes the first
 * Exclusive or TimeSlice card, never a MemorySlice one.
 */
static int covering_mode(const struct node_sums *ns, uint64_t target)
{
    uint64_t sum = 0;

    if (target == 0)
        return ns->cnt[ACCEL_SUPPORT_EXCLUSIVE] > 0   ? 0
               : ns->cnt[ACCEL_SUPPORT_TIMESLICE] > 0 ? 2
                                                      : -1;
    for (int m = 0; m < 3; m++) {
        sum = sat_add(sum, ns->sum[mode_order[m]]);
        if (sum >= target)
            return m;
    }
    return -1;
}

/* Would a gathering with free sum fs replace the best so far? */
static bool beats(const struct pctx *c, bool found, uint64_t score, uint64_t fs)
{
    if (!found)
        return true;
    return c->policy == ADM_POLICY_SPREAD ? fs > score : fs < score;
}

/*
 * A floor under node_room(c, n).mem_extra with no division (7/8 of the
 * memory instead of 90 %; (t >> 4) * 14 never exceeds floor(0.9 t)),
 * valid whenever the node passes 2.3; 0 when it cannot tell.
 */
static uint64_t headroom_floor(const struct pctx *c, uint32_t n)
{
    const struct adm_res *mem = &c->s->nodes[n].mem;
    uint64_t t = (mem->total >> 4) * 14;

    if (!c->check)
        return UINT64_MAX;
    if (mem->used > t || c->r->req_mem > t - mem->used)
        return 0;
    return t - mem->used - c->r->req_mem;
}

/*
 * gather_node(n) with out NULL, from one pass over the node's cards (their
 * per-mode sums) and a walk over the cards of the covering mode only: the
 * modes before it are taken whole, so their sums give the count and the
 * free sum. True when it covers target and beats (found, score); *fs gets
 * its free sum. The room (2.3) is computed only for a node that would win,
 * or earlier when the TimeSlice headroom might cut the walk.
 */
static bool node_candidate(const struct pctx *c, uint32_t n, size_t max,
                           uint64_t target, bool found, uint64_t score,
                           uint64_t *fs)
{
    struct node_sums ns;
    struct room rm = { true, UINT64_MAX };
    bool have_room = false;
    struct gather g;
    enum accel_support mode;
    uint64_t extra = 0;
    int m;

    if (!c->s->nodes[n].enabled || c->s->nodes[n].ndev == 0)
        return false;
    sum_node(c, n, &ns);
    m = covering_mode(&ns, target);
    if (m < 0)
        return false;
    mode = mode_order[m];
    gather_init(&g, NULL, max, target);
    for (int k = 0; k < m && target > 0; k++) {
        g.n += ns.cnt[mode_order[k]];
        g.free_sum += ns.sum[mode_order[k]]; /* < target: no wrap */
    }
    g.left = target - g.free_sum;
    /* bounds: binpack never goes below target, spread above the sums */
    if (!beats(c, found, score,
               c->policy == ADM_POLICY_SPREAD
                   ? sat_add(g.free_sum, ns.sum[mode])
                   : target))
        return false;
    if (target == 0 ||
        (mode == ACCEL_SUPPORT_TIMESLICE &&
         headroom_floor(c, n) < ns.sum[mode]) ||
        !gather_prefix(c, &g, n, mode)) {
        if (mode == ACCEL_SUPPORT_TIMESLICE) {
            rm = node_room(c, n);
            have_room = true;
            if (!rm.ok)
                return false;
        }
        gather_mode(c, &g, n, mode, &rm, &extra);
    }
    if (g.n == 0 || g.left != 0 || !beats(c, found, score, g.free_sum))
        return false;
    if (!have_room && !node_room(c, n).ok)
        return false;
    *fs = g.free_sum;
    return true;
}

/* The node whose gathering covers target, by policy; false if none. */
static bool best_node(const struct pctx *c, size_t max, uint64_t target,
                      uint32_t *out)
{
    bool found = false;
    uint64_t score = 0, fs = 0;

    for (uint32_t n = 0; n < c->s->nnodes; n++) {
        if (!node_candidate(c, n, max, target, found, score, &fs))
            continue;
        found = true;
        score = fs;
        *out = n;
    }
    return found;
}

/* ---- multi-card, through the index ---- */

/* The best gathering so far: its free sum and node. */
struct best {
    bool found;   /* any */
    uint64_t fs;  /* its free sum */
    uint32_t node; /* its node */
};

/* Does (fs, n) beat b: policy first, then the lower node (scan order)? */
static bool best_beaten(const struct pctx *c, const struct best *b,
                        uint64_t fs, uint32_t n)
{
    if (!b->found || fs == b->fs)
        return !b->found || n < b->node;
    return c->policy == ADM_POLICY_SPREAD ? fs > b->fs : fs < b->fs;
}

static void best_offer(const struct pctx *c, struct best *b, uint64_t fs,
                       uint32_t n)
{
    if (!best_beaten(c, b, fs, n))
        return;
    b->found = true;
    b->fs = fs;
    b->node = n;
}

/* May the TimeSlice headroom of 2.3 cut node n's gathering short? */
static bool idx_limited(const struct pctx *c, uint32_t n)
{
    const struct idx_node *xn = &c->s->index->node[n];

    return c->check && xn->in_slack && xn->slack <= c->r->req_mem;
}

/*
 * Is the entry at slot (node n's k-th gathered card, L and R the free sums
 * before and with it) node n's whole answer for target: it covers target
 * there, within max cards, on a node that passes 2.3 and whose headroom
 * cannot cut the gathering (those are gathered the plain way)?
 */
static bool idx_entry_ok(const struct pctx *c, uint32_t slot, uint32_t n,
                         uint64_t lo, uint64_t hi, size_t max,
                         uint64_t target)
{
    return lo < target && hi >= target &&
           slot - c->s->nodes[n].first_dev < max && !idx_limited(c, n) &&
           node_room(c, n).ok;
}

/* Binpack: the first entry by (R, node) from target on that stands. */
static void idx_binpack(const struct pctx *c, size_t max, uint64_t target,
                        struct best *b)
{
    const struct adm_index *x = c->s->index;
    const struct idx_ent *p = x->cov;

    for (uint32_t e = idx_ceil(p, x->cov_root, target, 0); e != IDX_NIL;
         e = idx_ceil(p, x->cov_root, p[e].key, p[e].tie + 1)) {
        if (idx_entry_ok(c, e, p[e].tie, p[e].aux, p[e].key, max, target)) {
            best_offer(c, b, p[e].key, p[e].tie);
            return;
        }
    }
}

/*
 * Spread: the entry of largest (R, then lowest node) among those with
 * L < target that stands, branch and bound over the span subtree at t
 * (each subtree knows its largest R).
 */
static void idx_spread(const struct pctx *c, uint32_t t, size_t max,
                       uint64_t target, struct best *b)
{
    const struct idx_ent *p = c->s->index->spn;

    while (t != IDX_NIL) {
        uint32_t m = p[t].mx, u, v;
        if (p[m].aux < target || !best_beaten(c, b, p[m].aux, p[m].tie))
            return;
        if (p[t].key >= target) { /* t and its right: L too large */
            t = p[t].l;
            continue;
        }
        if (idx_entry_ok(c, t, p[t].tie, p[t].key, p[t].aux, max, target))
            best_offer(c, b, p[t].aux, p[t].tie);
        u = p[t].l;
        v = p[t].r;
        if (u == IDX_NIL ||
            (v != IDX_NIL && p[p[v].mx].aux > p[p[u].mx].aux)) {
            u = p[t].r; /* the more promising side first */
            v = p[t].l;
        }
        idx_spread(c, u, max, target, b);
        t = v;
    }
}

/* best_node from the index; a zero target (one card, any mode) scans. */
static bool best_node_idx(const struct pctx *c, size_t max, uint64_t target,
                          uint32_t *out)
{
    const struct adm_index *x = c->s->index;
    const struct idx_ent *p = x->slk;
    struct best b = { false, 0, 0 };
    uint64_t fs = 0;

    if (target == 0)
        return best_node(c, max, target, out);
    /* the nodes whose headroom may bind: gathered the plain way */
    for (uint32_t e = c->check ? idx_ceil(p, x->slk_root, 0, 0) : IDX_NIL;
         e != IDX_NIL && p[e].key <= c->r->req_mem;
         e = idx_ceil(p, x->slk_root, p[e].key, p[e].tie + 1))
        if (node_candidate(c, p[e].tie, max, target, false, 0, &fs))
            best_offer(c, &b, fs, p[e].tie);
    if (c->policy == ADM_POLICY_SPREAD)
        idx_spread(c, x->spn_root, max, target, &b);
    else
        idx_binpack(c, max, target, &b);
    *out = b.node;
    return b.found;
}

/* gather_all over the nodes the index says have cards of each mode. */
static void gather_all_idx(const struct pctx *c, struct gather *g)
{
    const struct adm_index *x = c->s->index;
    const size_t words = (c->s->nnodes + 63) / 64;

    for (int m = 0; m < 3 && !gather_done(g); m++) {
        const uint64_t *bits = x->mbits[mode_order[m]];
        for (size_t w = 0; w < words && !gather_done(g); w++) {
            for (uint64_t v = bits[w]; v != 0 && !gather_done(g);
                 v &= v - 1) {
                uint32_t bit = 0;
                while (!(v >> bit & 1))
                    bit++;
                gather_mode_lazy(c, g, (uint32_t)(w * 64 + bit),
                                 mode_order[m]);
            }
        }
    }
}

static bool place_multi(const struct pctx *c, struct adm_sel *out, size_t max,
                        size_t *nout)
{
    const bool idx = have_index(c->s);

    /* the gathering depends on the target alone: the same target at the
     * required level would fail again */
    for (int lvl = 0; lvl < (c->t[0] == c->t[1] ? 1 : 2); lvl++) {
        struct gather g;
        uint32_t n = 0;
        gather_init(&g, out, max, c->t[lvl]);
        if (c->r->multi_nodes) {
            if (idx)
                gather_all_idx(c, &g);
            else
                gather_all(c, &g);
        } else if (idx ? best_node_idx(c, max, c->t[lvl], &n)
                       : best_node(c, max, c->t[lvl], &n)) {
            gather_node(c, &g, n);
        }
        if (g.n > 0 && g.left == 0) {
            *nout = g.n;
            return true;
        }
    }
    return false;
}

static bool is_multi(const struct adm_req *r)
{
    return r->type == ACCEL_TYPE_NVIDIA && (r->multi_cards || r->multi_nodes);
}

static bool place_impl(const struct pctx *c, struct adm_sel *out, size_t max,
                       size_t *nout)
{
    if (max > ADM_MAX_SELECTION)
        max = ADM_MAX_SELECTION;
    if (max == 0)
        return false;
    if (is_multi(c->r))
        return place_multi(c, out, max, nout);
    if (have_index(c->s) && (unsigned)c->r->type < ACCEL_TYPE_COUNT
            ? !place_single_idx(c, out)
            : !place_single(c, out))
        return false;
    *nout = 1;
    return true;
}

bool adm_place(const struct adm_snapshot *s, const struct adm_req *r,
               enum adm_policy policy, struct adm_sel *out, size_t max,
               size_t *nout)
{
    struct pctx c;

    pctx_init(&c, s, r, policy, true);
    return place_impl(&c, out, max, nout);
}

/* ---- availability ---- */

static const char *const node_status_names[] = {"available", "not_available",
                                                "not_enough"};
static const char *const scope_names[] = {"card", "single-node-cards",
                                          "cross-node-cards"};
static const char *const plan_names[] = {"installable", "no-matching-node",
                                         "insufficient-resources"};

const char *adm_node_status_name(enum adm_node_status s)
{
    return (unsigned)s < 3 ? node_status_names[s] : "unknown";
}

const char *adm_scope_name(enum adm_scope s)
{
    return (unsigned)s < 3 ? scope_names[s] : "unknown";
}

const char *adm_plan_status_name(enum adm_plan_status s)
{
    return (unsigned)s < 3 ? plan_names[s] : "unknown";
}

static enum adm_scope scope_of(const struct adm_req *r)
{
    if (r->type != ACCEL_TYPE_NVIDIA)
        return ADM_SCOPE_CARD;
    if (r->multi_nodes)
        return ADM_SCOPE_CROSS_NODE;
    return r->multi_cards ? ADM_SCOPE_SINGLE_NODE : ADM_SCOPE_CARD;
}

/* Devices of r's type on node n. */
static uint32_t count_type(const struct pctx *c, uint32_t n)
{
    const struct adm_node *nd = &c->s->nodes[n];
    uint32_t k = 0;

    for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++)
        k += c->s->devs[i].type == c->r->type;
    return k;
}

/* Is the node large enough in total (max card, or sum for multi)? */
static bool node_big_enough(const struct pctx *c, uint32_t n)
{
    const struct adm_node *nd = &c->s->nodes[n];
    uint64_t max = 0, sum = 0;
    uint32_t k = 0;

    for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++) {
        const struct adm_device *d = &c->s->devs[i];
        if (!usable(c, d))
            continue;
        k++;
        max = d->memory > max ? d->memory : max;
        sum = sat_add(sum, d->memory);
    }
    return k > 0 && (is_multi(c->r) ? sum : max) >= c->need;
}

/*
 * Would place_multi succeed on node n (n < 0: across all nodes)? Tries both
 * levels like it does: a zero requiredGpu can still take a MemorySlice
 * quota at the limit level.
 */
static bool gather_covers(const struct pctx *c, int64_t n)
{
    for (int lvl = 0; lvl < 2; lvl++) {
        struct gather g;
        gather_init(&g, NULL, ADM_MAX_SELECTION, c->t[lvl]);
        if (n < 0)
            gather_all(c, &g);
        else
            gather_node(c, &g, (uint32_t)n);
        if (g.n > 0 && g.left == 0)
            return true;
    }
    return false;
}

static enum adm_node_status node_status(const struct pctx *c, uint32_t n)
{
    const struct adm_node *nd = &c->s->nodes[n];
    struct room rm;

    if (!node_big_enough(c, n))
        return ADM_NODE_NOT_ENOUGH;
    if (is_multi(c->r))
        return gather_covers(c, (int64_t)n) ? ADM_NODE_AVAILABLE
                                            : ADM_NODE_NOT_AVAILABLE;
    rm = node_room(c, n);
    if (!nd->enabled || !rm.ok)
        return ADM_NODE_NOT_AVAILABLE;
    for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++)
        if (card_fits(c, &c->s->devs[i], &rm))
            return ADM_NODE_AVAILABLE;
    return ADM_NODE_NOT_AVAILABLE;
}

static void fill_dev(const struct pctx *c, enum adm_scope scope,
                     const struct adm_node_opt *no, uint32_t i,
                     struct adm_dev_opt *o)
{
    const struct adm_device *d = &c->s->devs[i];
    struct room rm = node_room(c, no->node);
    bool on = c->s->nodes[no->node].enabled && rm.ok;

    o->dev = i;
    o->available = dev_free(d);
    o->fit_level = on ? fit_level(c, d, &rm) : ADM_LEVEL_NONE;
    if (scope == ADM_SCOPE_CARD)
        o->operable = no->status == ADM_NODE_AVAILABLE &&
                      o->fit_level != ADM_LEVEL_NONE;
    else
        o->operable = on && card_contributes(c, d, &rm, 0) &&
                      (scope == ADM_SCOPE_CROSS_NODE ||
                       no->status == ADM_NODE_AVAILABLE);
}

static void fill_node(const struct pctx *c, struct adm_availability *a,
                      uint32_t n)
{
    const struct adm_node *nd = &c->s->nodes[n];
    struct adm_node_opt *no = &a->nodes[a->nnodes++];

    no->node = n;
    no->status = node_status(c, n);
    no->first_opt = (uint32_t)a->ndevs;
    no->nopt = 0;
    for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++) {
        if (c->s->devs[i].type != c->r->type)
            continue;
        fill_dev(c, a->scope, no, i, &a->devs[a->ndevs++]);
        no->nopt++;
    }
}

static void decide(const struct pctx *c, struct adm_availability *a)
{
    a->schedulable = false;
    if (a->nnodes == 0) {
        a->reason = "no-matching-node";
        return;
    }
    if (a->scope == ADM_SCOPE_CROSS_NODE) {
        a->schedulable = gather_covers(c, -1);
        a->reason = a->schedulable ? NULL : "insufficient-cluster-vram";
        return;
    }
    for (size_t i = 0; i < a->nnodes; i++)
        a->schedulable = a->schedulable ||
                         a->nodes[i].status == ADM_NODE_AVAILABLE;
    if (a->schedulable)
        a->reason = NULL;
    else if (a->scope == ADM_SCOPE_SINGLE_NODE)
        a->reason = "no-node-with-enough-cards";
    else
        a->reason = "no-card-with-enough-vram";
}

enum accel_err adm_availability(const struct adm_snapshot *s,
                                const struct adm_req *r,
                                struct adm_availability *out)
{
    struct pctx c;
    size_t nn = 0, nd = 0;

    pctx_init(&c, s, r, ADM_POLICY_BINPACK, true);
    memset(out, 0, sizeof(*out));
    out->scope = scope_of(r);
    for (uint32_t n = 0; n < s->nnodes; n++) {
        uint32_t k = count_type(&c, n);
        nn += k > 0;
        nd += k;
    }
    out->nodes = calloc(nn ? nn : 1, sizeof(*out->nodes));
    out->devs = calloc(nd ? nd : 1, sizeof(*out->devs));
    if (out->nodes == NULL || out->devs == NULL) {
        adm_availability_release(out);
        return ACCEL_ENOMEM;
    }
    for (uint32_t n = 0; n < s->nnodes; n++)
        if (count_type(&c, n) > 0)
            fill_node(&c, out, n);
    decide(&c, out);
    return ACCEL_OK;
}

void adm_availability_release(struct adm_availability *a)
{
    free(a->nodes);
    free(a->devs);
    a->nodes = NULL;
    a->devs = NULL;
    a->nnodes = 0;
    a->ndevs = 0;
}

/* ---- install plan ---- */

enum adm_plan_status adm_plan(const struct adm_snapshot *s,
                              const struct adm_req *r)
{
    uint64_t need = adm_target(r, ADM_LEVEL_REQUIRED), all = 0;
    bool any = false, fits = false;

    for (uint32_t n = 0; n < s->nnodes; n++) {
        const struct adm_node *nd = &s->nodes[n];
        uint64_t node_sum = 0;
        for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++) {
            const struct adm_device *d = &s->devs[i];
            if (d->type != r->type || !d->present)
                continue;
            any = true;
            node_sum = sat_add(node_sum, d->memory);
            fits = fits || d->memory >= need;
        }
        all = sat_add(all, node_sum);
        fits = fits || (is_multi(r) && node_sum >= need);
    }
    if (!any)
        return ADM_PLAN_NO_MATCHING_NODE;
    fits = fits || (is_multi(r) && r->multi_nodes && all >= need);
    return fits ? ADM_PLAN_INSTALLABLE : ADM_PLAN_INSUFFICIENT;
}

/* ---- preflight ---- */

static bool preflight_fail(struct adm_preflight *out, const char *reason)
{
    out->reason = reason;
    return false;
}

/* The demand's cpu, memory and disk added once to the cluster's use. */
static void cluster_add(struct adm_res tot[3], const struct adm_req *r)
{
    tot[ADM_DIM_CPU].used = sat_add(tot[ADM_DIM_CPU].used, r->req_cpu);
    tot[ADM_DIM_MEMORY].used = sat_add(tot[ADM_DIM_MEMORY].used, r->req_mem);
    tot[ADM_DIM_DISK].used = sat_add(tot[ADM_DIM_DISK].used, r->req_disk);
}

/*
 * Install one demand on the scratch snapshot; false with out's reason. The
 * checks run in app-service's order (SimulatePreflight): cluster capacity,
 * cluster pressure and the owner's quota on what the demand adds
 * whatever card it gets, then placement without the pressure rule (no
 * placement at all is "unschedulable": a GPU demand no card or node can
 * hold, or a type the cluster has not), then with it ("node-pressure").
 */
static bool preflight_one(struct adm_snapshot *cp, struct adm_res tot[3],
                          const struct adm_req *r, enum adm_policy policy,
                          const struct adm_preflight_hook *hook, size_t i,
                          struct adm_preflight *out)
{
    struct adm_sel sel[ADM_MAX_SELECTION];
    struct adm_row rows[ADM_MAX_SELECTION];
    struct adm_verdict v;
    struct pctx c;
    size_t n = 0;
    uint64_t min_gpu = accel_type_has_vram(r->type)
                           ? adm_target(r, ADM_LEVEL_REQUIRED)
                           : 0;

    if (adm_cluster_capacity(tot, r, out->cluster)) {
        out->has_cluster = true;
        return preflight_fail(out, "cluster-capacity");
    }
    if (adm_cluster_pressure(tot, r, out->cluster)) {
        out->has_cluster = true;
        return preflight_fail(out, "cluster-pressure");
    }
    if (hook != NULL && !hook->check(hook->ctx, i, NULL, 0, min_gpu))
        return preflight_fail(out, "owner-quota");
    pctx_init(&c, cp, r, policy, false);
    if (adm_plan(cp, r) != ADM_PLAN_INSTALLABLE ||
        !place_impl(&c, sel, ADM_MAX_SELECTION, &n))
        return preflight_fail(out, "unschedulable");
    c.check = true;
    if (!place_impl(&c, sel, ADM_MAX_SELECTION, &n)) {
        pctx_init(&c, cp, r, policy, false);
        place_impl(&c, sel, ADM_MAX_SELECTION, &n);
        adm_validate(cp, r, sel, n, &v, rows);
        out->has_pressure = v.code == ADM_NODE_PRESSURE;
        out->pressure = v.pressure;
        return preflight_fail(out, "node-pressure");
    }
    if (!adm_validate(cp, r, sel, n, &v, rows))
        return preflight_fail(out, "unschedulable");
    if (hook != NULL && !hook->check(hook->ctx, i, rows, n, min_gpu))
        return preflight_fail(out, "owner-quota");
    adm_snapshot_apply(cp, r, rows, n);
    cluster_add(tot, r);
    return true;
}

enum accel_err adm_preflight(const struct adm_snapshot *s,
                             const struct adm_req *demands, size_t n,
                             enum adm_policy policy, struct adm_preflight *out)
{
    return adm_preflight_hooked(s, demands, n, policy, NULL, out);
}

enum accel_err adm_preflight_hooked(const struct adm_snapshot *s,
                                    const struct adm_req *demands, size_t n,
                                    enum adm_policy policy,
                                    const struct adm_preflight_hook *hook,
                                    struct adm_preflight *out)
{
    struct adm_snapshot cp = *s;
    struct adm_res tot[3];
    enum accel_err rc = ACCEL_ENOMEM;

    cp.index = NULL;
    memset(out, 0, sizeof(*out));
    cp.nodes = malloc((s->nnodes ? s->nnodes : 1) * sizeof(*cp.nodes));
    cp.devs = malloc((s->ndevs ? s->ndevs : 1) * sizeof(*cp.devs));
    if (cp.nodes == NULL || cp.devs == NULL)
        goto out;
    if (s->nnodes)
        memcpy(cp.nodes, s->nodes, s->nnodes * sizeof(*cp.nodes));
    if (s->ndevs)
        memcpy(cp.devs, s->devs, s->ndevs * sizeof(*cp.devs));
    if (adm_index_clone(s, &cp) != ACCEL_OK)
        goto out; /* the copy applies rows: it needs its own index */
    adm_cluster_totals(s, tot);
    out->installable = true;
    for (size_t i = 0; i < n && out->installable; i++) {
        if (!preflight_one(&cp, tot, &demands[i], policy, hook, i, out)) {
            out->installable = false;
            out->failed = i;
        }
    }
    rc = ACCEL_OK;
out:
    adm_index_free(&cp);
    free(cp.nodes);
    free(cp.devs);
    return rc;
}
