/* SPDX-License-Identifier: MIT */
/*
 * bench_admission.c: SPEC 11's placement and validation bars. For each
 * size (1,000 nodes x 8 nvidia GPUs with 20,000 allocations, and 10,000 x
 * 8 with 200,000: the cluster bar of section 10), builds the world (a
 * third of the cards in each sharing mode) and its free-capacity index,
 * then times automatic placements (binpack and spread; single card,
 * multi-card on one node, multi-node) through the index and through the
 * plain scan (index NULL), validations of the picks, the index upkeep of
 * applying and releasing a pick, and a bare loop that only reads every
 * device struct. Bare-loop samples are taken between the placements, so
 * each figure is also printed as a ratio to the bare loop of the same
 * run: only such ratios compare across these shared machines.
 *
 * Usage: bench_admission [decisions] [seed] [sizes]   (20000, 1, 2: both
 * sizes; 1: the 1,000-node one only)
 * Not a test: it fails only when a pick does not validate or the index
 * and the scan pick differently.
 */
#include "common/accel_setup.h"
#include "daemon/rules/admission.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/strmap.h"

#define GiB (UINT64_C(1) << 30)
#define GPUS 8
#define BARE_EVERY 8 /* a bare-loop sample every this many placements */
#define NO_FIGURE 0  /* a category without samples */

struct world {
    uint32_t nnodes;          /* nodes */
    size_t allocs;            /* allocation rows spread over the cards */
    struct adm_node *nodes;   /* [nnodes] */
    struct adm_device *devs;  /* [nnodes * GPUS] */
    char (*nname)[16];        /* node names */
    char (*dname)[48];        /* device ids */
    struct adm_snapshot s;    /* the snapshot over them */
    struct strmap *nidx, *didx;
    uint64_t *bare;           /* bare-loop samples, ns */
    size_t nbare, cap_bare;   /* how many, room */
    volatile uint64_t sink;   /* the bare loop's sum: keeps the loop */
};

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void build_node(struct world *w, uint32_t n, uint64_t *seed)
{
    static const uint64_t sizes[] = {16, 24, 48, 80};
    struct adm_node *nd = &w->nodes[n];

    snprintf(w->nname[n], sizeof(w->nname[n]), "node-%05u", n);
    nd->name = w->nname[n];
    nd->mem.total = 1024 * GiB;
    nd->mem.used = (100 + rng(seed) % 400) * GiB;
    nd->cpu.total = 128000;
    nd->cpu.used = rng(seed) % 64000;
    nd->disk.total = 4096 * GiB;
    nd->disk.used = rng(seed) % 2048 * GiB;
    nd->enabled = n % 97 != 0;
    nd->first_dev = n * GPUS;
    nd->ndev = GPUS;
    for (uint32_t k = 0; k < GPUS; k++) {
        uint32_t i = n * GPUS + k;
        struct adm_device *d = &w->devs[i];
        snprintf(w->dname[i], sizeof(w->dname[i]), "GPU-%08x-%05u-%u",
                 (unsigned)(rng(seed) & 0xffffffffu), n, k);
        d->id = w->dname[i];
        d->node = n;
        d->type = ACCEL_TYPE_NVIDIA;
        d->st = (enum accel_support)(i % 3);
        d->healthy = rng(seed) % 50 != 0;
        d->present = true;
        d->memory = sizes[rng(seed) % 4] * GiB;
    }
}

/* Spread w->allocs rows: Exclusive takes one, MemorySlice 1-4 GiB slices
 * while they fit, TimeSlice any number. */
static void spread_allocations(struct world *w, uint64_t *seed)
{
    size_t placed = 0;

    while (placed < w->allocs) {
        struct adm_device *d = &w->devs[rng(seed) % (w->nnodes * GPUS)];
        uint64_t q = (1 + rng(seed) % 4) * GiB;
        if (d->st == ACCEL_SUPPORT_EXCLUSIVE && d->nbound > 0)
            continue;
        if (d->st == ACCEL_SUPPORT_MEMSLICE) {
            if (adm_device_free(d) < q)
                continue;
            d->allocated += q;
        }
        d->nbound++;
        placed++;
    }
}

static void world_free(struct world *w)
{
    adm_index_free(&w->s);
    if (w->nidx)
        strmap_free(w->nidx);
    if (w->didx)
        strmap_free(w->didx);
    free(w->nodes);
    free(w->devs);
    free(w->nname);
    free(w->dname);
    free(w->bare);
    memset(w, 0, sizeof(*w));
}

static int build(struct world *w, uint32_t nnodes, size_t allocs,
                 uint64_t seed)
{
    size_t nd = (size_t)nnodes * GPUS;

    memset(w, 0, sizeof(*w));
    w->nnodes = nnodes;
    w->allocs = allocs;
    w->nodes = calloc(nnodes, sizeof(*w->nodes));
    w->devs = calloc(nd, sizeof(*w->devs));
    w->nname = calloc(nnodes, sizeof(*w->nname));
    w->dname = calloc(nd, sizeof(*w->dname));
    w->cap_bare = 1 << 16;
    w->bare = calloc(w->cap_bare, sizeof(*w->bare));
    if (!w->nodes || !w->devs || !w->nname || !w->dname || !w->bare)
        return -1;
    for (uint32_t n = 0; n < nnodes; n++)
        build_node(w, n, &seed);
    spread_allocations(w, &seed);
    w->nidx = strmap_new();
    w->didx = strmap_new();
    for (uint32_t n = 0; n < nnodes; n++)
        strmap_put(w->nidx, w->nodes[n].name, n);
    for (uint32_t i = 0; i < nd; i++)
        strmap_put(w->didx, w->devs[i].id, i);
    w->s.nodes = w->nodes;
    w->s.nnodes = nnodes;
    w->s.devs = w->devs;
    w->s.ndevs = nd;
    w->s.node_index = w->nidx;
    w->s.dev_index = w->didx;
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *t, size_t n)
{
    if (n == 0)
        return NO_FIGURE;
    qsort(t, n, sizeof(*t), cmp_u64);
    return t[n / 2];
}

/*
 * The bare loop: read every device struct once, as a scan must, and sum
 * memory - allocated of the healthy nvidia cards, inline (about the least
 * a placement scan computes per card). The sum goes to a volatile so the
 * loop stays.
 */
static void bare_sample(struct world *w)
{
    const struct adm_device *d = w->devs;
    const size_t nd = w->s.ndevs;
    uint64_t sum = 0, t0 = now_ns();

    for (size_t i = 0; i < nd; i++)
        if (d[i].type == ACCEL_TYPE_NVIDIA && d[i].healthy &&
            d[i].memory > d[i].allocated)
            sum += d[i].memory - d[i].allocated;
    w->sink = sum;
    if (w->nbare < w->cap_bare)
        w->bare[w->nbare++] = now_ns() - t0;
}

/* One printed figure, kept until the run's bare median is known. */
struct figure {
    char what[64];  /* its label */
    size_t n;       /* samples */
    uint64_t med;   /* median, ns */
    uint64_t p99;   /* 99th percentile, ns */
};

#define MAX_FIGURES 32

struct figures {
    struct figure f[MAX_FIGURES];
    size_t n;
};

static void record(struct figures *fs, const char *what, uint64_t *t,
                   size_t n)
{
    struct figure *f;

    if (fs->n == MAX_FIGURES)
        return;
    f = &fs->f[fs->n++];
    snprintf(f->what, sizeof(f->what), "%s", what);
    f->n = n;
    f->med = median(t, n);
    f->p99 = n ? t[n * 99 / 100] : NO_FIGURE;
}

static void print_figures(const struct figures *fs, uint64_t bare)
{
    for (size_t i = 0; i < fs->n; i++) {
        const struct figure *f = &fs->f[i];
        if (f->n == 0) {
            printf("  %-38s (no samples)\n", f->what);
            continue;
        }
        printf("  %-38s n=%-6zu median %8.2f us  p99 %8.2f us  "
               "/ bare %7.4f\n", f->what, f->n, f->med / 1e3, f->p99 / 1e3,
               bare ? (double)f->med / (double)bare : 0.0);
    }
}

/* How many cards a benched requirement may take. */
enum shape { SINGLE = 0, MULTI_CARD = 1, MULTI_NODE = 2 };

static struct adm_req request(uint64_t *seed, enum shape shape)
{
    static const uint64_t gpu[] = {4, 8, 12, 20};
    struct adm_req r;

    memset(&r, 0, sizeof(r));
    r.type = ACCEL_TYPE_NVIDIA;
    r.req_gpu = gpu[rng(seed) % 4] * GiB;
    r.lim_gpu = r.req_gpu + (rng(seed) % 2) * 4 * GiB;
    r.req_mem = r.lim_mem = (2 + rng(seed) % 14) * GiB;
    r.req_cpu = r.lim_cpu = 1000 + rng(seed) % 4000;
    r.req_disk = r.lim_disk = 10 * GiB;
    if (shape != SINGLE) {
        r.req_gpu = r.lim_gpu = (100 + rng(seed) % 60) * GiB;
        r.multi_cards = true;
        r.multi_nodes = shape == MULTI_NODE;
    }
    return r;
}

/* The same picks, card for card? */
static bool same_picks(const struct adm_sel *a, size_t na,
                       const struct adm_sel *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].device, b[i].device) != 0 ||
            a[i].memory != b[i].memory)
            return false;
    return true;
}

/* Samples of one category: placements (index, scan), validations, upkeep. */
struct samples {
    uint64_t *place, *scan, *valid, *upkeep;
    size_t nplace, nscan, nvalid, nupkeep;
};

/*
 * One decision: place through the index (timed), every scan_every-th also
 * through the scan (timed, and the picks compared), validate the pick
 * (timed), and apply + release it (timed: the index upkeep of a bind and
 * of its release). Returns -1 on a wrong pick.
 */
static int decide(struct world *w, const struct adm_req *r,
                  enum adm_policy pol, bool with_scan, struct samples *sm,
                  const char *label)
{
    struct adm_sel sel[ADM_MAX_SELECTION], ref[ADM_MAX_SELECTION];
    struct adm_row rows[ADM_MAX_SELECTION];
    struct adm_index *x = w->s.index;
    struct adm_verdict v;
    size_t nsel = 0, nref = 0;
    uint64_t t0 = now_ns();
    bool ok = adm_place(&w->s, r, pol, sel, ADM_MAX_SELECTION, &nsel), rok;

    sm->place[sm->nplace++] = now_ns() - t0;
    if (with_scan) {
        w->s.index = NULL;
        t0 = now_ns();
        rok = adm_place(&w->s, r, pol, ref, ADM_MAX_SELECTION, &nref);
        sm->scan[sm->nscan++] = now_ns() - t0;
        w->s.index = x;
        if (rok != ok || (ok && !same_picks(sel, nsel, ref, nref))) {
            fprintf(stderr, "%s: the index and the scan pick differently\n",
                    label);
            return -1;
        }
    }
    if (!ok)
        return 0;
    t0 = now_ns();
    ok = adm_validate(&w->s, r, sel, nsel, &v, rows);
    sm->valid[sm->nvalid++] = now_ns() - t0;
    if (!ok) {
        fprintf(stderr, "%s: a pick failed validation (%s)\n", label,
                adm_code_name(v.code));
        return -1;
    }
    t0 = now_ns();
    adm_snapshot_apply(&w->s, r, rows, nsel);
    adm_snapshot_release(&w->s, r, rows, nsel);
    sm->upkeep[sm->nupkeep++] = now_ns() - t0;
    return 0;
}

/* Time n decisions of one kind; the scan on every scan_every-th. */
static int run(struct world *w, struct figures *fs, size_t n,
               size_t scan_every, enum adm_policy pol, enum shape shape,
               uint64_t seed, const char *label)
{
    struct samples sm;
    char name[80];
    int rc = 0;

    memset(&sm, 0, sizeof(sm));
    sm.place = calloc(n, sizeof(uint64_t));
    sm.scan = calloc(n, sizeof(uint64_t));
    sm.valid = calloc(n, sizeof(uint64_t));
    sm.upkeep = calloc(n, sizeof(uint64_t));
    for (size_t i = 0; i < n && sm.place && sm.scan && sm.valid && sm.upkeep;
         i++) {
        struct adm_req r = request(&seed, shape);
        if (i % BARE_EVERY == 0)
            bare_sample(w);
        if (decide(w, &r, pol, i % scan_every == 0, &sm, label) != 0)
            rc = 1;
    }
    if (!sm.place || !sm.scan || !sm.valid || !sm.upkeep || sm.nvalid == 0) {
        fprintf(stderr, "%s: nothing placed or out of memory\n", label);
        rc = 1;
    } else {
        snprintf(name, sizeof(name), "place %s (index)", label);
        record(fs, name, sm.place, sm.nplace);
        snprintf(name, sizeof(name), "place %s (scan)", label);
        record(fs, name, sm.scan, sm.nscan);
        snprintf(name, sizeof(name), "validate %s", label);
        record(fs, name, sm.valid, sm.nvalid);
        snprintf(name, sizeof(name), "apply+release %s", label);
        record(fs, name, sm.upkeep, sm.nupkeep);
    }
    free(sm.place);
    free(sm.scan);
    free(sm.valid);
    free(sm.upkeep);
    return rc;
}

/* Every kind of decision on one world. */
static int bench_size(uint32_t nnodes, size_t allocs, size_t n, uint64_t seed)
{
    struct world w;
    struct figures fs;
    size_t nm = n / 10 ? n / 10 : 1; /* multi-card decisions */
    size_t every = nnodes > 2000 ? 20 : 4; /* scan samples: the slow ones */
    uint64_t t0, bare;
    int rc = 0;

    fs.n = 0;
    if (build(&w, nnodes, allocs, seed) != 0) {
        world_free(&w);
        return 2;
    }
    t0 = now_ns();
    if (adm_index_build(&w.s) != ACCEL_OK) {
        world_free(&w);
        return 2;
    }
    printf("admission: %u nodes x %d nvidia GPUs, %zu allocations, %zu "
           "single-card and %zu multi-card decisions each; index built in "
           "%.1f ms\n", nnodes, GPUS, allocs, n, nm, (double)(now_ns() - t0) / 1e6);
    rc |= run(&w, &fs, n, every, ADM_POLICY_BINPACK, SINGLE, seed,
              "binpack single");
    rc |= run(&w, &fs, n, every, ADM_POLICY_SPREAD, SINGLE, seed + 1,
              "spread single");
    rc |= run(&w, &fs, nm, every, ADM_POLICY_BINPACK, MULTI_CARD, seed + 2,
              "binpack multi-card");
    rc |= run(&w, &fs, nm, every, ADM_POLICY_SPREAD, MULTI_CARD, seed + 3,
              "spread multi-card");
    rc |= run(&w, &fs, nm, every, ADM_POLICY_BINPACK, MULTI_NODE, seed + 4,
              "binpack multi-node");
    bare = median(w.bare, w.nbare);
    print_figures(&fs, bare);
    printf("  %-38s n=%-6zu median %8.2f us  (%zu device structs of %zu "
           "bytes, read between the placements)\n", "bare loop over the devices",
           w.nbare, bare / 1e3, w.s.ndevs, sizeof(struct adm_device));
    if (!adm_index_check(&w.s)) {
        fprintf(stderr, "the index drifted from a fresh build\n");
        rc = 1;
    }
    world_free(&w);
    return rc;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    unsigned sizes = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 2;
    int rc;

    if (n == 0)
        return 2;
    rc = bench_size(1000, 20000, n, seed);
    if (sizes > 1)
        rc |= bench_size(10000, 200000, n, seed);
    return rc;
}
