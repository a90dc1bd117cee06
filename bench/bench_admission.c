/* SPDX-License-Identifier: MIT */
/*
 * bench_admission.c: SPEC 11's placement and validation bar. Builds 1,000
 * nodes x 8 nvidia GPUs with 20,000 allocations spread over them (a third
 * of the cards in each sharing mode), then times automatic placements
 * (binpack and spread; single card, multi-card on one node, multi-node)
 * and validations of the picked selections, one decision per timed call,
 * and prints the median and p99 per decision in nanoseconds.
 *
 * Usage: bench_admission [decisions] [seed]   (defaults 20000, 1)
 * Not a test: it fails only when a picked selection does not validate.
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
#define NODES 1000
#define GPUS 8
#define ALLOCS 20000

struct world {
    struct adm_node nodes[NODES];
    struct adm_device devs[NODES * GPUS];
    char nname[NODES][16];
    char dname[NODES * GPUS][48];
    struct adm_snapshot s;
    struct strmap *nidx, *didx;
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

    snprintf(w->nname[n], sizeof(w->nname[n]), "node-%04u", n);
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
        snprintf(w->dname[i], sizeof(w->dname[i]), "GPU-%08x-%04u-%u",
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

/* Spread ALLOCS rows: Exclusive takes one, MemorySlice 1-4 GiB slices
 * while they fit, TimeSlice any number. */
static void spread_allocations(struct world *w, uint64_t *seed)
{
    size_t placed = 0;

    while (placed < ALLOCS) {
        struct adm_device *d = &w->devs[rng(seed) % (NODES * GPUS)];
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

static void build(struct world *w, uint64_t seed)
{
    memset(w, 0, sizeof(*w));
    for (uint32_t n = 0; n < NODES; n++)
        build_node(w, n, &seed);
    spread_allocations(w, &seed);
    w->nidx = strmap_new();
    w->didx = strmap_new();
    for (uint32_t n = 0; n < NODES; n++)
        strmap_put(w->nidx, w->nodes[n].name, n);
    for (uint32_t i = 0; i < NODES * GPUS; i++)
        strmap_put(w->didx, w->devs[i].id, i);
    w->s.nodes = w->nodes;
    w->s.nnodes = NODES;
    w->s.devs = w->devs;
    w->s.ndevs = NODES * GPUS;
    w->s.node_index = w->nidx;
    w->s.dev_index = w->didx;
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

static void report(const char *what, uint64_t *t, size_t n)
{
    qsort(t, n, sizeof(*t), cmp_u64);
    printf("%-34s n=%-6zu median %7" PRIu64 " ns   p99 %7" PRIu64 " ns\n",
           what, n, t[n / 2], t[n * 99 / 100]);
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

/* Time n placements (and validations of what they pick). */
static int run(struct world *w, size_t n, enum adm_policy pol, enum shape shape,
               uint64_t seed, const char *label)
{
    uint64_t *tp = calloc(n, sizeof(*tp)), *tv = calloc(n, sizeof(*tv));
    struct adm_sel sel[ADM_MAX_SELECTION];
    struct adm_row rows[ADM_MAX_SELECTION];
    struct adm_verdict v;
    size_t placed = 0, nsel = 0;
    char name[80];
    int rc = 0;

    for (size_t i = 0; i < n && tp && tv; i++) {
        struct adm_req r = request(&seed, shape);
        uint64_t t0 = now_ns();
        bool ok = adm_place(&w->s, &r, pol, sel, ADM_MAX_SELECTION, &nsel);
        uint64_t t1 = now_ns();
        tp[i] = t1 - t0;
        if (!ok)
            continue;
        t0 = now_ns();
        ok = adm_validate(&w->s, &r, sel, nsel, &v, rows);
        tv[placed++] = now_ns() - t0;
        if (!ok) {
            fprintf(stderr, "%s: a pick failed validation (%s)\n", label,
                    adm_code_name(v.code));
            rc = 1;
        }
    }
    if (tp == NULL || tv == NULL || placed == 0) {
        fprintf(stderr, "%s: nothing placed or out of memory\n", label);
        rc = 1;
    } else {
        snprintf(name, sizeof(name), "place %s", label);
        report(name, tp, n);
        snprintf(name, sizeof(name), "validate %s", label);
        report(name, tv, placed);
    }
    free(tp);
    free(tv);
    return rc;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    size_t nm = n / 10 ? n / 10 : 1; /* multi-card decisions */
    struct world *w = malloc(sizeof(*w));
    int rc = 0;

    if (w == NULL || n == 0)
        return 2;
    build(w, seed);
    printf("admission: %d nodes x %d nvidia GPUs, %d allocations, "
           "%zu decisions each\n", NODES, GPUS, ALLOCS, n);
    rc |= run(w, n, ADM_POLICY_BINPACK, SINGLE, seed, "binpack single");
    rc |= run(w, n, ADM_POLICY_SPREAD, SINGLE, seed + 1, "spread single");
    rc |= run(w, nm, ADM_POLICY_BINPACK, MULTI_CARD, seed + 2,
              "binpack multi-card");
    rc |= run(w, nm, ADM_POLICY_SPREAD, MULTI_CARD, seed + 3,
              "spread multi-card");
    rc |= run(w, nm, ADM_POLICY_BINPACK, MULTI_NODE, seed + 4,
              "binpack multi-node");
    strmap_free(w->nidx);
    strmap_free(w->didx);
    free(w);
    return rc;
}
