/* SPDX-License-Identifier: MIT */
/*
 * test_admission.c: the rules of SPEC 2 (src/daemon/admission*.c): every
 * validation code of 2.6 and their order, free memory per mode, the 90 %
 * pressure arithmetic and the worked example to the hundredth of a GiB,
 * placement (binpack, spread, multi-card, multi-node), availability, the
 * install plan, preflight, overflow, and the property "an automatic pick
 * always passes manual validation" over randomized snapshots.
 */
#include "common/accel_setup.h"
#include "daemon/rules/admission.h"

#include <stdio.h>
#include <string.h>

#include "common/quantity.h"
#include "common/strmap.h"
#include "harness.h"

#define GiB (UINT64_C(1) << 30)
#define MAXN 16
#define MAXD 128

/* A small cluster built by hand. */
struct cluster {
    struct adm_node nodes[MAXN];
    struct adm_device devs[MAXD];
    char nname[MAXN][16];
    char dname[MAXD][16];
    struct adm_snapshot s;
};

static void cl_init(struct cluster *c)
{
    memset(c, 0, sizeof(*c));
    c->s.nodes = c->nodes;
    c->s.devs = c->devs;
}

/* A node with 64 cores and 1 TiB disk, idle; memory as given. */
static uint32_t cl_node(struct cluster *c, uint64_t mem_total, uint64_t used)
{
    uint32_t i = (uint32_t)c->s.nnodes++;
    struct adm_node *n = &c->nodes[i];

    snprintf(c->nname[i], sizeof(c->nname[i]), "n%u", i);
    n->name = c->nname[i];
    n->mem.total = mem_total;
    n->mem.used = used;
    n->cpu.total = 64000;
    n->disk.total = 1024 * GiB;
    n->enabled = true;
    n->first_dev = (uint32_t)c->s.ndevs;
    return i;
}

/* A healthy present device on the last node. */
static uint32_t cl_dev(struct cluster *c, enum accel_type t,
                       enum accel_support st, uint64_t mem)
{
    uint32_t i = (uint32_t)c->s.ndevs++;
    struct adm_device *d = &c->devs[i];

    snprintf(c->dname[i], sizeof(c->dname[i]), "g%u", i);
    d->id = c->dname[i];
    d->node = (uint32_t)c->s.nnodes - 1;
    d->type = t;
    d->st = st;
    d->healthy = true;
    d->present = true;
    d->memory = mem;
    c->nodes[d->node].ndev++;
    return i;
}

static struct adm_req nv(uint64_t req_gpu, uint64_t lim_gpu)
{
    struct adm_req r;
    memset(&r, 0, sizeof(r));
    r.type = ACCEL_TYPE_NVIDIA;
    r.req_gpu = req_gpu;
    r.lim_gpu = lim_gpu;
    r.req_mem = r.lim_mem = 1 * GiB;
    r.req_cpu = r.lim_cpu = 1000;
    r.req_disk = r.lim_disk = GiB;
    return r;
}

static struct adm_sel sel_of(const struct cluster *c, uint32_t dev,
                             uint64_t mem)
{
    struct adm_sel s = {c->nodes[c->devs[dev].node].name, c->devs[dev].id,
                        mem};
    return s;
}

/* Validate and return the formatted verdict in a static buffer. */
static const char *check(const struct cluster *c, const struct adm_req *r,
                         const struct adm_sel *sel, size_t n)
{
    static char buf[300];
    struct adm_verdict v;
    struct adm_row rows[ADM_MAX_SELECTION + 8];
    bool ok = adm_validate(&c->s, r, sel, n, &v, rows);

    if (ok != (v.code == ADM_VALID))
        FAIL_AT_("return value disagrees with the code");
    adm_verdict_format(&v, buf, sizeof(buf));
    return buf;
}

static const char *check1(const struct cluster *c, const struct adm_req *r,
                          uint32_t dev, uint64_t mem)
{
    struct adm_sel s = sel_of(c, dev, mem);
    return check(c, r, &s, 1);
}

/* ---- basics ---- */

TEST(admission_code_names)
{
    ASSERT_STR_EQ(adm_code_name(ADM_VALID), "valid");
    ASSERT_STR_EQ(adm_code_name(ADM_TOTAL_VRAM_BELOW),
                  "total-vram-below-requirement");
    ASSERT_STR_EQ(adm_code_name(ADM_NON_NVIDIA_SINGLE),
                  "non-nvidia-must-single-selection");
    ASSERT_STR_EQ(adm_code_name(ADM_NODE_PRESSURE), "node-pressure");
    ASSERT_STR_EQ(adm_code_name(ADM_CODE_COUNT), "unknown");
    {
        struct adm_verdict v;
        char b[8] = "keep";
        memset(&v, 0, sizeof(v));
        adm_verdict_format(&v, b, 0); /* no write at all */
        ASSERT_STR_EQ(b, "keep");
        adm_verdict_format(&v, b, sizeof(b));
        ASSERT_STR_EQ(b, "valid");
    }
    ASSERT_STR_EQ(adm_node_status_name(ADM_NODE_NOT_AVAILABLE),
                  "not_available");
    ASSERT_STR_EQ(adm_node_status_name(ADM_NODE_NOT_ENOUGH), "not_enough");
    ASSERT_STR_EQ(adm_node_status_name((enum adm_node_status)9), "unknown");
    ASSERT_STR_EQ(adm_scope_name(ADM_SCOPE_SINGLE_NODE), "single-node-cards");
    ASSERT_STR_EQ(adm_scope_name(ADM_SCOPE_CROSS_NODE), "cross-node-cards");
    ASSERT_STR_EQ(adm_scope_name((enum adm_scope)9), "unknown");
    ASSERT_STR_EQ(adm_plan_status_name(ADM_PLAN_NO_MATCHING_NODE),
                  "no-matching-node");
    ASSERT_STR_EQ(adm_plan_status_name((enum adm_plan_status)9), "unknown");
}

TEST(admission_targets)
{
    struct adm_req r = nv(8 * GiB, 12 * GiB);
    ASSERT_U64_EQ(adm_target(&r, ADM_LEVEL_LIMIT), 12 * GiB);
    ASSERT_U64_EQ(adm_target(&r, ADM_LEVEL_REQUIRED), 8 * GiB);
    r.lim_gpu = 0; /* a missing limit equals the request */
    ASSERT_U64_EQ(adm_target(&r, ADM_LEVEL_LIMIT), 8 * GiB);
    r.type = ACCEL_TYPE_APPLE_M; /* no VRAM: the RAM figures */
    r.req_mem = 4 * GiB;
    r.lim_mem = 6 * GiB;
    ASSERT_U64_EQ(adm_target(&r, ADM_LEVEL_LIMIT), 6 * GiB);
    ASSERT_U64_EQ(adm_target(&r, ADM_LEVEL_REQUIRED), 4 * GiB);
    r.lim_mem = 0;
    ASSERT_U64_EQ(adm_target(&r, ADM_LEVEL_LIMIT), 4 * GiB);
    r.type = ACCEL_TYPE_AMD_GPU; /* VRAM type */
    ASSERT_U64_EQ(adm_target(&r, ADM_LEVEL_REQUIRED), 8 * GiB);
}

TEST(admission_free_per_mode)
{
    struct adm_device d;
    memset(&d, 0, sizeof(d));
    d.memory = 24 * GiB;
    d.st = ACCEL_SUPPORT_EXCLUSIVE;
    ASSERT_U64_EQ(adm_device_free(&d), 24 * GiB);
    d.nbound = 1; /* whole-card row: allocated stays 0 */
    ASSERT_U64_EQ(adm_device_free(&d), 0);
    d.st = ACCEL_SUPPORT_MEMSLICE;
    d.allocated = 10 * GiB;
    ASSERT_U64_EQ(adm_device_free(&d), 14 * GiB);
    d.allocated = 30 * GiB; /* over-allocated: never wraps */
    ASSERT_U64_EQ(adm_device_free(&d), 0);
    d.st = ACCEL_SUPPORT_TIMESLICE;
    d.nbound = 5;
    ASSERT_U64_EQ(adm_device_free(&d), 24 * GiB);
}

/* ---- pressure ---- */

static void worked_cluster(struct cluster *c, enum accel_support st)
{
    uint64_t total = 0, used = 0;
    ASSERT_EQ(quantity_parse_bytes("46.89Gi", &total), ACCEL_OK);
    ASSERT_EQ(quantity_parse_bytes("7.41Gi", &used), ACCEL_OK);
    cl_init(c);
    cl_node(c, total, used);
    c->nname[0][0] = '\0';
    snprintf(c->nname[0], sizeof(c->nname[0]), "olares");
    cl_dev(c, ACCEL_TYPE_NVIDIA, st, 16 * GiB);
}

TEST(admission_worked_example)
{
    struct cluster c;
    struct adm_req r = nv(8 * GiB, 8 * GiB);
    struct adm_pressure p;
    struct adm_verdict v;
    struct adm_row rows[1];
    struct adm_sel s;
    char b[160], avail[32], shortfall[32];
    const struct adm_dim *m;

    worked_cluster(&c, ACCEL_SUPPORT_TIMESLICE);
    r.req_mem = r.lim_mem = 20 * GiB;
    ASSERT(adm_node_pressure(&c.s, 0, &r, 16 * GiB, &p));
    m = &p.dims[ADM_DIM_MEMORY];
    ASSERT(m->pressured);
    ASSERT(!p.dims[ADM_DIM_CPU].pressured && !p.dims[ADM_DIM_DISK].pressured);
    ASSERT_U64_EQ(m->required, 36 * GiB);
    quantity_format_gib(m->available, avail, sizeof(avail));
    ASSERT_STR_EQ(avail, "34.79");
    quantity_format_gib(m->required - m->available, shortfall,
                        sizeof(shortfall));
    ASSERT_STR_EQ(shortfall, "1.21");
    s = sel_of(&c, 0, 0);
    ASSERT(!adm_validate(&c.s, &r, &s, 1, &v, rows));
    adm_verdict_format(&v, b, sizeof(b));
    ASSERT_STR_EQ(b, "node-pressure:olares");
    ASSERT_EQ(v.pressure.node, 0);
    adm_pressure_format(&v.pressure, b, sizeof(b));
    ASSERT_STR_EQ(b, "Memory: Total 46.89 Gi, Used 7.41 Gi, Needed 36 Gi");
    /* without the TimeSlice term 20 GiB fit in 34.79 */
    ASSERT(!adm_node_pressure(&c.s, 0, &r, 0, &p));
}

TEST(admission_worked_example_other_modes)
{
    struct cluster c;
    struct adm_req r = nv(8 * GiB, 8 * GiB);
    size_t n = 0;
    struct adm_sel out[4];

    r.req_mem = 20 * GiB;
    worked_cluster(&c, ACCEL_SUPPORT_EXCLUSIVE); /* no VRAM term */
    ASSERT_STR_EQ(check1(&c, &r, 0, 0), "valid");
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    worked_cluster(&c, ACCEL_SUPPORT_TIMESLICE);
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    r.req_mem = 18 * GiB; /* 34 GiB needed, 34.79 available */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(check1(&c, &r, 0, 0), "valid");
}

TEST(admission_pressure_boundary)
{
    struct cluster c;
    struct adm_req r = nv(GiB, GiB);
    struct adm_pressure p;

    cl_init(&c);
    cl_node(&c, 1000, 100);
    r.req_mem = 800; /* 900 = exactly 90 %: not pressured */
    ASSERT(!adm_node_pressure(&c.s, 0, &r, 0, &p));
    ASSERT_U64_EQ(p.dims[ADM_DIM_MEMORY].available, 800);
    ASSERT(adm_node_pressure(&c.s, 0, &r, 1, &p));
    c.nodes[0].mem.total = 10; /* 9 */
    c.nodes[0].mem.used = 20;  /* used above the threshold: available 0 */
    r.req_mem = 0;
    ASSERT(adm_node_pressure(&c.s, 0, &r, 0, &p));
    ASSERT_U64_EQ(p.dims[ADM_DIM_MEMORY].available, 0);
    c.nodes[0].mem.total = 1001; /* 900.9: 900 fits, 901 does not */
    c.nodes[0].mem.used = 0;
    r.req_mem = 900;
    ASSERT(!adm_node_pressure(&c.s, 0, &r, 0, &p));
    r.req_mem = 901;
    ASSERT(adm_node_pressure(&c.s, 0, &r, 0, &p));
    /* zero capacity: nothing required is fine, anything is pressured */
    c.nodes[0].mem.total = 0;
    r.req_mem = 0;
    ASSERT(!adm_node_pressure(&c.s, 0, &r, 0, &p));
    r.req_cpu = 1;
    c.nodes[0].cpu.total = 0;
    ASSERT(adm_node_pressure(&c.s, 0, &r, 0, &p));
    ASSERT(p.dims[ADM_DIM_CPU].pressured);
}

TEST(admission_pressure_overflow)
{
    struct cluster c;
    struct adm_req r = nv(GiB, GiB);
    struct adm_pressure p;

    cl_init(&c);
    cl_node(&c, UINT64_MAX, UINT64_MAX - 5);
    r.req_mem = 10; /* used + required wraps: pressured */
    ASSERT(adm_node_pressure(&c.s, 0, &r, 0, &p));
    ASSERT(p.dims[ADM_DIM_MEMORY].pressured);
    ASSERT_U64_EQ(p.dims[ADM_DIM_MEMORY].available, 0);
    c.nodes[0].mem.used = 0;
    ASSERT(!adm_node_pressure(&c.s, 0, &r, 0, &p));
    ASSERT_U64_EQ(p.dims[ADM_DIM_MEMORY].available,
                  (uint64_t)(((unsigned __int128)UINT64_MAX * 9) / 10));
    r.req_mem = UINT64_MAX; /* required + TimeSlice VRAM wraps */
    ASSERT(adm_node_pressure(&c.s, 0, &r, 16 * GiB, &p));
    ASSERT_U64_EQ(p.dims[ADM_DIM_MEMORY].required, UINT64_MAX);
    r.req_mem = 0;
    r.req_disk = UINT64_MAX;
    ASSERT(adm_node_pressure(&c.s, 0, &r, 0, &p));
    ASSERT(p.dims[ADM_DIM_DISK].pressured);
}

TEST(admission_pressure_format)
{
    struct adm_pressure p;
    char b[256];

    memset(&p, 0, sizeof(p));
    adm_pressure_format(&p, b, sizeof(b));
    ASSERT_STR_EQ(b, "");
    p.dims[ADM_DIM_CPU] = (struct adm_dim){8000, 7500, 1250, 0, true};
    p.dims[ADM_DIM_MEMORY] = (struct adm_dim){16 * GiB, 15 * GiB, GiB / 2, 0,
                                              true};
    p.dims[ADM_DIM_DISK] = (struct adm_dim){100 * GiB, 95 * GiB, 2 * GiB, 0,
                                            true};
    adm_pressure_format(&p, b, sizeof(b));
    ASSERT_STR_EQ(b, "Memory: Total 16 Gi, Used 15 Gi, Needed 0.50 Gi; "
                     "CPU: Total 8 cores, Used 7.5 cores, Needed 1.25 cores; "
                     "Disk: Total 100 Gi, Used 95 Gi, Needed 2 Gi");
    p.dims[ADM_DIM_MEMORY].pressured = false;
    p.dims[ADM_DIM_DISK].pressured = false;
    p.dims[ADM_DIM_CPU].required = 1;
    adm_pressure_format(&p, b, sizeof(b));
    ASSERT_STR_EQ(b, "CPU: Total 8 cores, Used 7.5 cores, Needed 0.001 cores");
    p.dims[ADM_DIM_MEMORY].pressured = true;
    adm_pressure_format(&p, b, 20); /* truncated, still terminated */
    ASSERT_EQ(strlen(b), 19);
    adm_pressure_format(&p, b, 0); /* no write */
}

/* Elastic memory (SPEC 4.4): the quotas of a MemorySlice device may sum to
 * overcommit × its memory, each still at most the card; every value of
 * overcommit, in and out of range, and the other modes untouched. */
TEST(admission_overcommit_capacity)
{
    struct adm_device d;
    memset(&d, 0, sizeof(d));
    d.memory = 24 * GiB;
    d.st = ACCEL_SUPPORT_MEMSLICE;
    /* off: 0, 1.0, below 1, above 4 */
    ASSERT_U64_EQ(adm_memslice_capacity(&d), 24 * GiB);
    d.overcommit = ADM_OVERCOMMIT_ONE;
    ASSERT_U64_EQ(adm_memslice_capacity(&d), 24 * GiB);
    d.overcommit = 500;
    ASSERT_U64_EQ(adm_memslice_capacity(&d), 24 * GiB);
    d.overcommit = ADM_OVERCOMMIT_MAX + 1;
    ASSERT_U64_EQ(adm_memslice_capacity(&d), 24 * GiB);
    d.overcommit = 1500;
    ASSERT_U64_EQ(adm_memslice_capacity(&d), 36 * GiB);
    d.overcommit = ADM_OVERCOMMIT_MAX;
    ASSERT_U64_EQ(adm_memslice_capacity(&d), 96 * GiB);
    /* exact to the byte: 1000q + r */
    d.memory = 1999;
    d.overcommit = 1500;
    ASSERT_U64_EQ(adm_memslice_capacity(&d), 2998); /* floor(2998.5) */
    d.memory = UINT64_MAX; /* saturates, never wraps */
    ASSERT_U64_EQ(adm_memslice_capacity(&d), UINT64_MAX);
    d.memory = UINT64_MAX / 2;
    d.overcommit = 2000;
    ASSERT_U64_EQ(adm_memslice_capacity(&d), UINT64_MAX / 2 * 2);
    d.overcommit = 2001;
    ASSERT_U64_EQ(adm_memslice_capacity(&d), UINT64_MAX);

    /* free: what is left of the capacity, never more than the card */
    d.memory = 24 * GiB;
    d.overcommit = 1500;
    d.allocated = 0;
    ASSERT_U64_EQ(adm_device_free(&d), 24 * GiB);
    d.allocated = 20 * GiB; /* Ollama's 20: 16 left for ComfyUI */
    ASSERT_U64_EQ(adm_device_free(&d), 16 * GiB);
    d.allocated = 36 * GiB;
    ASSERT_U64_EQ(adm_device_free(&d), 0);
    d.allocated = 40 * GiB; /* above (the ratio was lowered): no wrap */
    ASSERT_U64_EQ(adm_device_free(&d), 0);
    d.allocated = 10 * GiB;
    d.overcommit = 0;
    ASSERT_U64_EQ(adm_device_free(&d), 14 * GiB);
    /* the other modes do not read it */
    d.overcommit = ADM_OVERCOMMIT_MAX;
    d.st = ACCEL_SUPPORT_EXCLUSIVE;
    ASSERT_U64_EQ(adm_device_free(&d), 24 * GiB);
    d.st = ACCEL_SUPPORT_TIMESLICE;
    d.nbound = 3;
    ASSERT_U64_EQ(adm_device_free(&d), 24 * GiB);
}

/* The home-lab case through validation and placement: at 1.5 a 24 GiB card
 * takes Ollama's 20 and ComfyUI's 16; off, it refuses the second; a quota
 * above the card is refused whatever the ratio. */
TEST(admission_overcommit_validate_place)
{
    struct cluster c;
    struct adm_req ollama = nv(20 * GiB, 20 * GiB);
    struct adm_req comfy = nv(16 * GiB, 16 * GiB);
    struct adm_req big = nv(30 * GiB, 30 * GiB);
    struct adm_row rows[2];
    struct adm_sel out[4];
    size_t nout = 0;

    cl_init(&c);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB);
    ASSERT_STR_EQ(check1(&c, &ollama, 0, 0), "valid");
    rows[0].dev = 0;
    rows[0].memory = 20 * GiB;
    adm_snapshot_apply(&c.s, &ollama, rows, 1);
    /* off: refused, by validation and by placement */
    ASSERT_STR_EQ(check1(&c, &comfy, 0, 0), "device-vram-insufficient:g0");
    ASSERT(!adm_place(&c.s, &comfy, ADM_POLICY_BINPACK, out, 4, &nout));
    /* 1.5: admitted, and placement finds the card */
    c.devs[0].overcommit = 1500;
    ASSERT_STR_EQ(check1(&c, &comfy, 0, 0), "valid");
    ASSERT(adm_place(&c.s, &comfy, ADM_POLICY_BINPACK, out, 4, &nout));
    ASSERT_EQ(nout, 1);
    ASSERT_STR_EQ(out[0].device, "g0");
    ASSERT_U64_EQ(out[0].memory, 16 * GiB);
    /* each quota still a ceiling: never above the card */
    c.devs[0].overcommit = ADM_OVERCOMMIT_MAX;
    ASSERT_STR_EQ(check1(&c, &big, 0, 0), "total-vram-below-requirement:g0");
    ASSERT(!adm_place(&c.s, &big, ADM_POLICY_BINPACK, out, 4, &nout));
    /* the sum bound: 20 + 16 = 36 = 1.5 × 24, one byte more is refused */
    c.devs[0].overcommit = 1500;
    rows[1].dev = 0;
    rows[1].memory = 16 * GiB;
    adm_snapshot_apply(&c.s, &comfy, &rows[1], 1);
    ASSERT_STR_EQ(check1(&c, &ollama, 0, 0), "device-vram-insufficient:g0");
    ASSERT(!adm_place(&c.s, &ollama, ADM_POLICY_BINPACK, out, 4, &nout));
}

/* ---- validation: each code ---- */

/* n0: nvidia Exclusive 24 + MemorySlice 16 (6 used) + TimeSlice 12;
 * n1: nvidia Exclusive 8, apple-m Exclusive 12 */
static void base(struct cluster *c)
{
    cl_init(c);
    cl_node(c, 256 * GiB, 0);
    cl_dev(c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 24 * GiB);
    cl_dev(c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 16 * GiB);
    c->devs[1].allocated = 6 * GiB;
    c->devs[1].nbound = 2;
    cl_dev(c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_TIMESLICE, 12 * GiB);
    cl_node(c, 256 * GiB, 0);
    cl_dev(c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 8 * GiB);
    cl_dev(c, ACCEL_TYPE_APPLE_M, ACCEL_SUPPORT_EXCLUSIVE, 12 * GiB);
}

TEST(admission_code_empty_and_too_many)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_sel s[ADM_MAX_SELECTION + 1];

    base(&c);
    ASSERT_STR_EQ(check(&c, &r, NULL, 0), "empty-selection");
    for (size_t i = 0; i <= ADM_MAX_SELECTION; i++)
        s[i] = sel_of(&c, 0, 0);
    r.multi_cards = r.multi_nodes = true;
    ASSERT_STR_EQ(check(&c, &r, s, ADM_MAX_SELECTION + 1),
                  "too-many-selections");
    /* 64 is accepted as far as the count goes: duplicates then */
    ASSERT_STR_EQ(check(&c, &r, s, ADM_MAX_SELECTION),
                  "duplicate-selection:n0/g0");
}

TEST(admission_code_not_found)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_sel s = {"nx", "g0", 0};

    base(&c);
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "node-not-found:nx");
    s.node = NULL;
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "node-not-found");
    s.node = "n0";
    s.device = "gx";
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "device-not-found:gx");
    s.device = NULL;
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "device-not-found");
    s.device = "g3"; /* exists, but on n1 */
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "device-not-found:g3");
    s.device = "g0";
    c.devs[0].present = false; /* gone: not found */
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "device-not-found:g0");
}

TEST(admission_code_duplicate)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_sel s[3];

    base(&c);
    s[0] = sel_of(&c, 0, 0);
    s[1] = sel_of(&c, 2, 0);
    s[2] = sel_of(&c, 0, 0);
    ASSERT_STR_EQ(check(&c, &r, s, 3), "duplicate-selection:n0/g0");
}

TEST(admission_code_cardinality)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_sel s[2];

    base(&c);
    s[0] = sel_of(&c, 0, 0);
    s[1] = sel_of(&c, 2, 0);
    ASSERT_STR_EQ(check(&c, &r, s, 2), "multi-card-not-supported");
    r.multi_cards = true;
    ASSERT_STR_EQ(check(&c, &r, s, 2), "valid");
    s[1] = sel_of(&c, 3, 0); /* other node */
    ASSERT_STR_EQ(check(&c, &r, s, 2), "multi-node-not-supported");
    r.multi_cards = false;
    r.multi_nodes = true; /* implies multi-card */
    ASSERT_STR_EQ(check(&c, &r, s, 2), "valid");
    r.type = ACCEL_TYPE_APPLE_M; /* multi flags are nvidia only */
    r.multi_cards = true;
    ASSERT_STR_EQ(check(&c, &r, s, 2), "non-nvidia-must-single-selection");
}

TEST(admission_code_unhealthy)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);

    base(&c);
    c.devs[0].healthy = false;
    ASSERT_STR_EQ(check1(&c, &r, 0, 0), "device-unhealthy:g0");
    c.devs[0].healthy = true;
    c.nodes[0].enabled = false; /* disabled node: device-unhealthy */
    ASSERT_STR_EQ(check1(&c, &r, 0, 0), "device-unhealthy:g0");
}

TEST(admission_code_type_mismatch)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);

    base(&c);
    ASSERT_STR_EQ(check1(&c, &r, 4, 0), "gpu-type-mismatch");
    r.type = ACCEL_TYPE_APPLE_M;
    ASSERT_STR_EQ(check1(&c, &r, 0, 0), "gpu-type-mismatch");
}

TEST(admission_code_exclusive_bound)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);

    base(&c);
    c.devs[0].nbound = 1;
    ASSERT_STR_EQ(check1(&c, &r, 0, 0), "exclusive-already-bound:g0");
    r.type = ACCEL_TYPE_APPLE_M; /* any type */
    r.req_mem = GiB;
    c.devs[4].nbound = 1;
    ASSERT_STR_EQ(check1(&c, &r, 4, 0), "exclusive-already-bound:g4");
}

TEST(admission_code_memory_quota)
{
    struct cluster c;
    struct adm_req r = nv(0, 0);

    base(&c);
    /* no quota given and a zero requiredGpu */
    ASSERT_STR_EQ(check1(&c, &r, 1, 0), "memory-required:g1");
    ASSERT_STR_EQ(check1(&c, &r, 1, GiB), "valid");
    r = nv(4 * GiB, 4 * GiB);
    ASSERT_STR_EQ(check1(&c, &r, 1, 0), "valid"); /* default = required */
    ASSERT_STR_EQ(check1(&c, &r, 1, 3 * GiB), "memory-below-required:g1");
    ASSERT_STR_EQ(check1(&c, &r, 1, 10 * GiB), "valid"); /* 10 free */
}

TEST(admission_code_total_vs_device_vram)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);

    base(&c);
    /* MemorySlice 16 GiB, 6 assigned, 10 free */
    ASSERT_STR_EQ(check1(&c, &r, 1, 17 * GiB),
                  "total-vram-below-requirement:g1");
    ASSERT_STR_EQ(check1(&c, &r, 1, 11 * GiB), "device-vram-insufficient:g1");
    r = nv(12 * GiB, 12 * GiB); /* default quota 12 > 10 free */
    ASSERT_STR_EQ(check1(&c, &r, 1, 0), "device-vram-insufficient:g1");
    r = nv(20 * GiB, 20 * GiB); /* card of 16 GiB */
    ASSERT_STR_EQ(check1(&c, &r, 1, 0), "total-vram-below-requirement:g1");
    /* whole cards: Exclusive and TimeSlice */
    ASSERT_STR_EQ(check1(&c, &r, 2, 0), "total-vram-below-requirement:g2");
    ASSERT_STR_EQ(check1(&c, &r, 0, 0), "valid");
    r = nv(25 * GiB, 25 * GiB);
    ASSERT_STR_EQ(check1(&c, &r, 0, 0), "total-vram-below-requirement:g0");
    /* an explicit quota on a whole card is ignored */
    r = nv(4 * GiB, 4 * GiB);
    ASSERT_STR_EQ(check1(&c, &r, 2, 99 * GiB), "valid");
}

TEST(admission_code_aggregate)
{
    struct cluster c;
    struct adm_req r = nv(40 * GiB, 40 * GiB);
    struct adm_sel s[3];

    base(&c);
    r.multi_cards = true;
    s[0] = sel_of(&c, 0, 0);     /* 24 */
    s[1] = sel_of(&c, 2, 0);     /* 12 */
    s[2] = sel_of(&c, 1, 3 * GiB); /* 3 */
    ASSERT_STR_EQ(check(&c, &r, s, 3), "aggregate-vram-insufficient");
    s[2].memory = 4 * GiB; /* 40 */
    ASSERT_STR_EQ(check(&c, &r, s, 3), "valid");
    /* a one-item selection of a multi-card app follows single rules */
    ASSERT_STR_EQ(check(&c, &r, s, 1), "total-vram-below-requirement:g0");
    /* in a multi-card selection a small quota is not memory-below */
    s[2].memory = 11 * GiB; /* > 10 free */
    ASSERT_STR_EQ(check(&c, &r, s, 3), "device-vram-insufficient:g1");
}

TEST(admission_code_device_memory)
{
    struct cluster c;
    struct adm_req r;

    base(&c);
    memset(&r, 0, sizeof(r));
    r.type = ACCEL_TYPE_APPLE_M;
    r.req_mem = 13 * GiB;
    ASSERT_STR_EQ(check1(&c, &r, 4, 0), "device-memory-insufficient:g4");
    r.req_mem = 12 * GiB;
    ASSERT_STR_EQ(check1(&c, &r, 4, 0), "valid");
    /* unified memory in MemorySlice: quota against free */
    c.devs[4].st = ACCEL_SUPPORT_MEMSLICE;
    c.devs[4].allocated = 8 * GiB;
    r.req_mem = 2 * GiB;
    ASSERT_STR_EQ(check1(&c, &r, 4, 0), "valid");
    ASSERT_STR_EQ(check1(&c, &r, 4, 5 * GiB), "device-memory-insufficient:g4");
    ASSERT_STR_EQ(check1(&c, &r, 4, GiB), "memory-below-required:g4");
    r.req_mem = 0;
    ASSERT_STR_EQ(check1(&c, &r, 4, 0), "memory-required:g4");
}

TEST(admission_code_node_pressure_dims)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_verdict v;
    struct adm_row rows[2];
    struct adm_sel s[2];
    char b[200];

    base(&c);
    c.nodes[1].cpu.used = 57000; /* 57.6 cores is 90 % of 64 */
    ASSERT_STR_EQ(check1(&c, &r, 3, 0), "node-pressure:n1");
    s[0] = sel_of(&c, 3, 0);
    ASSERT(!adm_validate(&c.s, &r, s, 1, &v, rows));
    adm_pressure_format(&v.pressure, b, sizeof(b));
    ASSERT_STR_EQ(b, "CPU: Total 64 cores, Used 57 cores, Needed 1 cores");
    c.nodes[1].cpu.used = 0;
    c.nodes[1].disk.used = 1000 * GiB;
    ASSERT_STR_EQ(check1(&c, &r, 3, 0), "node-pressure:n1");
    c.nodes[1].disk.used = 0;
    /* memory: the TimeSlice VRAM of every selected card on a node adds up */
    r.multi_cards = true;
    c.nodes[0].mem.total = 40 * GiB; /* 36 GiB below 90 % */
    r.req_mem = 24 * GiB;
    s[0] = sel_of(&c, 2, 0); /* TimeSlice 12: 36 needed, fits */
    ASSERT_STR_EQ(check(&c, &r, s, 1), "valid");
    r.req_mem = 24 * GiB + 1;
    ASSERT_STR_EQ(check(&c, &r, s, 1), "node-pressure:n0");
    r.req_mem = 24 * GiB;
    s[1] = sel_of(&c, 0, 0); /* Exclusive: adds nothing */
    ASSERT_STR_EQ(check(&c, &r, s, 2), "valid");
    /* the first pressured node, in selection order */
    r.multi_nodes = true;
    c.nodes[1].mem.used = 256 * GiB;
    s[0] = sel_of(&c, 3, 0);
    s[1] = sel_of(&c, 0, 0);
    c.nodes[0].mem.used = 40 * GiB;
    ASSERT_STR_EQ(check(&c, &r, s, 2), "node-pressure:n1");
}

TEST(admission_rows_sorted)
{
    struct cluster c;
    struct adm_req r = nv(30 * GiB, 30 * GiB);
    struct adm_sel s[3];
    struct adm_row rows[3];
    struct adm_verdict v;

    base(&c);
    r.multi_nodes = true;
    s[0] = sel_of(&c, 3, 0);
    s[1] = sel_of(&c, 1, 2 * GiB);
    s[2] = sel_of(&c, 0, 0);
    ASSERT(adm_validate(&c.s, &r, s, 3, &v, rows));
    ASSERT_EQ(v.code, ADM_VALID);
    ASSERT_STR_EQ(v.subject, "");
    ASSERT_EQ(rows[0].dev, 0);
    ASSERT_U64_EQ(rows[0].memory, 0);
    ASSERT_EQ(rows[1].dev, 1);
    ASSERT_U64_EQ(rows[1].memory, 2 * GiB);
    ASSERT_EQ(rows[2].dev, 3);
    /* rows untouched on failure */
    rows[0].dev = 77;
    r.req_gpu = 99 * GiB;
    ASSERT(!adm_validate(&c.s, &r, s, 3, &v, rows));
    ASSERT_EQ(rows[0].dev, 77);
}

/* ---- validation: order ---- */

TEST(admission_order_precedence)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_sel s[3];

    base(&c);
    r.multi_cards = true;
    /* a later item's unknown node beats an earlier item's unknown device */
    s[0] = (struct adm_sel){"n0", "gx", 0};
    s[1] = (struct adm_sel){"nx", "g0", 0};
    ASSERT_STR_EQ(check(&c, &r, s, 2), "node-not-found:nx");
    /* unknown device beats a duplicate */
    s[0] = sel_of(&c, 0, 0);
    s[1] = sel_of(&c, 0, 0);
    s[2] = (struct adm_sel){"n0", "gx", 0};
    ASSERT_STR_EQ(check(&c, &r, s, 3), "device-not-found:gx");
    /* a duplicate beats multi-card-not-supported */
    r.multi_cards = false;
    ASSERT_STR_EQ(check(&c, &r, s, 2), "duplicate-selection:n0/g0");
    /* multi-card beats unhealthy */
    c.devs[2].healthy = false;
    s[1] = sel_of(&c, 2, 0);
    ASSERT_STR_EQ(check(&c, &r, s, 2), "multi-card-not-supported");
    /* a later unhealthy card beats an earlier type mismatch */
    r.multi_cards = r.multi_nodes = true;
    s[0] = sel_of(&c, 4, 0);
    ASSERT_STR_EQ(check(&c, &r, s, 2), "device-unhealthy:g2");
    c.devs[2].healthy = true;
    /* type mismatch beats exclusive-already-bound */
    c.devs[0].nbound = 1;
    s[1] = sel_of(&c, 0, 0);
    ASSERT_STR_EQ(check(&c, &r, s, 2), "gpu-type-mismatch");
    /* exclusive-bound beats memory-required */
    r.req_gpu = 0;
    s[0] = sel_of(&c, 1, 0);
    ASSERT_STR_EQ(check(&c, &r, s, 2), "exclusive-already-bound:g0");
    c.devs[0].nbound = 0;
}

TEST(admission_order_memory_codes)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_sel s[3];

    base(&c);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 8 * GiB); /* g5 n1 */
    r.multi_cards = r.multi_nodes = true;
    /* device-vram (g1, earlier) loses to total-vram (g5, later) */
    s[0] = sel_of(&c, 1, 11 * GiB);
    s[1] = sel_of(&c, 5, 9 * GiB);
    ASSERT_STR_EQ(check(&c, &r, s, 2), "total-vram-below-requirement:g5");
    /* memory-required beats total-vram */
    r.req_gpu = 0;
    s[2] = sel_of(&c, 1, 0);
    s[0] = sel_of(&c, 5, 9 * GiB);
    s[1] = sel_of(&c, 3, 0);
    ASSERT_STR_EQ(check(&c, &r, s, 3), "memory-required:g1");
    /* memory-below beats total-vram (single) */
    r = nv(12 * GiB, 12 * GiB);
    ASSERT_STR_EQ(check1(&c, &r, 5, 11 * GiB), "memory-below-required:g5");
    /* device-vram beats aggregate */
    r = nv(60 * GiB, 60 * GiB);
    r.multi_cards = true;
    s[0] = sel_of(&c, 0, 0);
    s[1] = sel_of(&c, 1, 11 * GiB);
    ASSERT_STR_EQ(check(&c, &r, s, 2), "device-vram-insufficient:g1");
    /* aggregate beats node pressure */
    c.nodes[0].mem.used = 256 * GiB;
    s[1] = sel_of(&c, 1, 1 * GiB);
    ASSERT_STR_EQ(check(&c, &r, s, 2), "aggregate-vram-insufficient");
    r.req_gpu = 25 * GiB;
    ASSERT_STR_EQ(check(&c, &r, s, 2), "node-pressure:n0");
}

TEST(admission_index_lookup)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct strmap *nm = strmap_new(), *dm = strmap_new();
    struct adm_sel s = {"n1", "g3", 0};

    base(&c);
    for (uint32_t i = 0; i < c.s.nnodes; i++)
        strmap_put(nm, c.nodes[i].name, i);
    for (uint32_t i = 0; i < c.s.ndevs; i++)
        strmap_put(dm, c.devs[i].id, i);
    c.s.node_index = nm;
    c.s.dev_index = dm;
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "valid");
    s.node = "nx";
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "node-not-found:nx");
    s.node = "n1";
    s.device = "gx";
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "device-not-found:gx");
    strmap_put(dm, "stale", 999); /* an index past the end is not found */
    s.device = "stale";
    ASSERT_STR_EQ(check(&c, &r, &s, 1), "device-not-found:stale");
    strmap_free(nm);
    strmap_free(dm);
}

TEST(admission_apply_release)
{
    struct cluster c, before;
    struct adm_req r = nv(30 * GiB, 30 * GiB);
    struct adm_sel s[3];
    struct adm_row rows[3];
    struct adm_verdict v;

    base(&c);
    r.multi_cards = true;
    s[0] = sel_of(&c, 0, 0);
    s[1] = sel_of(&c, 1, 4 * GiB);
    s[2] = sel_of(&c, 2, 0);
    ASSERT(adm_validate(&c.s, &r, s, 3, &v, rows));
    before = c;
    adm_snapshot_apply(&c.s, &r, rows, 3);
    ASSERT_EQ(c.devs[0].nbound, 1);
    ASSERT_U64_EQ(c.devs[1].allocated, 10 * GiB);
    ASSERT_EQ(c.devs[1].nbound, 3);
    ASSERT_U64_EQ(c.nodes[0].mem.used, GiB); /* once per node */
    ASSERT_U64_EQ(c.nodes[0].cpu.used, 1000);
    ASSERT_U64_EQ(c.nodes[0].disk.used, GiB);
    ASSERT_U64_EQ(adm_device_free(&c.devs[0]), 0);
    adm_snapshot_release(&c.s, &r, rows, 3);
    ASSERT(memcmp(c.devs, before.devs, sizeof(c.devs)) == 0);
    ASSERT(memcmp(c.nodes, before.nodes, sizeof(c.nodes)) == 0);
    /* release never wraps */
    adm_snapshot_release(&c.s, &r, rows, 3);
    ASSERT_U64_EQ(c.nodes[0].mem.used, 0);
    ASSERT_U64_EQ(c.devs[1].allocated, 2 * GiB);
    ASSERT_EQ(c.devs[0].nbound, 0);
    adm_snapshot_release(&c.s, &r, rows, 3);
    ASSERT_EQ(c.devs[0].nbound, 0);
    /* apply saturates */
    c.nodes[0].mem.used = UINT64_MAX - 1;
    c.devs[1].allocated = UINT64_MAX;
    adm_snapshot_apply(&c.s, &r, rows, 3);
    ASSERT_U64_EQ(c.nodes[0].mem.used, UINT64_MAX);
    ASSERT_U64_EQ(c.devs[1].allocated, UINT64_MAX);
}

/* ---- placement ---- */

static uint32_t placed_dev(const struct cluster *c, const struct adm_sel *s)
{
    for (uint32_t i = 0; i < c->s.ndevs; i++)
        if (strcmp(c->devs[i].id, s->device) == 0)
            return i;
    FAIL_AT_("placed device %s not in the snapshot", s->device);
}

TEST(admission_place_binpack_spread)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_sel out[4];
    size_t n = 0;

    cl_init(&c);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB); /* 14 */
    c.devs[0].allocated = 10 * GiB;
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 16 * GiB); /* 6 */
    c.devs[1].allocated = 10 * GiB;
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 16 * GiB); /* 16 */
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 16 * GiB); /* 16 */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_EQ(n, 1);
    ASSERT_STR_EQ(out[0].device, "g1");
    ASSERT_STR_EQ(out[0].node, "n0");
    ASSERT_U64_EQ(out[0].memory, 4 * GiB); /* quota = requiredGpu */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_SPREAD, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g2"); /* most free, lowest index on ties */
    r = nv(8 * GiB, 8 * GiB); /* g1 (6 free) no longer fits */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g0");
    c.devs[0].allocated = 0; /* ties: lowest index */
    c.devs[0].memory = 16 * GiB;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g0");
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 0, &n));
    /* a max above ADM_MAX_SELECTION is capped, not trusted */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 1000, &n));
    ASSERT_EQ(n, 1);
}

TEST(admission_place_mode_and_level_order)
{
    struct cluster c;
    struct adm_req r = nv(8 * GiB, 16 * GiB);
    struct adm_sel out[4];
    size_t n = 0;

    cl_init(&c);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_TIMESLICE, 24 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 24 * GiB);
    /* all fit at limit: Exclusive first */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g2");
    ASSERT_U64_EQ(out[0].memory, 0);
    c.devs[2].nbound = 1; /* then MemorySlice */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g1");
    ASSERT_U64_EQ(out[0].memory, 8 * GiB);
    /* MemorySlice fits only at required: TimeSlice at limit wins */
    c.devs[1].allocated = 12 * GiB;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g0");
    ASSERT_U64_EQ(out[0].memory, 0);
    /* TimeSlice too small for the limit: MemorySlice at required */
    c.devs[0].memory = 12 * GiB;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g1");
    /* a limit below the request counts as the request */
    r = nv(8 * GiB, 4 * GiB);
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
}

TEST(admission_place_skips)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_sel out[4];
    size_t n = 0;

    cl_init(&c);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 8 * GiB);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 16 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 12 * GiB);
    cl_dev(&c, ACCEL_TYPE_AMD_GPU, ACCEL_SUPPORT_EXCLUSIVE, 4 * GiB);
    c.devs[0].healthy = false;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g2");
    c.devs[2].present = false;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g1");
    c.devs[0].healthy = true;
    c.nodes[1].enabled = false;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g0");
    c.nodes[0].cpu.used = 64000; /* pressured */
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    r.type = ACCEL_TYPE_AMD_GPU;
    c.nodes[1].enabled = true;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g3");
    /* a zero target never lands on MemorySlice (quota would be 0) */
    r = nv(0, 0);
    c.nodes[0].cpu.used = 0;
    c.devs[2].present = true;
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    c.devs[1].st = ACCEL_SUPPORT_TIMESLICE;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].device, "g1");
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
    /* an unknown mode value is never picked */
    c.devs[1].st = (enum accel_support)7;
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
}

TEST(admission_place_timeslice_pressure)
{
    struct cluster c;
    struct adm_req r = nv(8 * GiB, 8 * GiB);
    struct adm_sel out[4];
    size_t n = 0;

    worked_cluster(&c, ACCEL_SUPPORT_TIMESLICE);
    r.req_mem = 20 * GiB;
    cl_node(&c, 46 * GiB, 0); /* 41.4 below 90 %: 36 fits */
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_TIMESLICE, 16 * GiB);
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 4, &n));
    ASSERT_STR_EQ(out[0].node, "n1");
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
}

TEST(admission_place_multi_card)
{
    struct cluster c;
    struct adm_req r = nv(40 * GiB, 40 * GiB);
    struct adm_sel out[8];
    size_t n = 0;

    cl_init(&c);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 24 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 24 * GiB);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_TIMESLICE, 24 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 24 * GiB);
    c.devs[2].allocated = 20 * GiB;
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    r.multi_cards = true;
    /* binpack: node with the least free among the gathered cards (n0: 48) */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    ASSERT_EQ(n, 2);
    ASSERT_STR_EQ(out[0].node, "n0");
    ASSERT_STR_EQ(out[1].node, "n0");
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
    /* spread: n1 gathers Exclusive g4 (24), MemorySlice g2 (4), TimeSlice
     * g3 (24): free sum 52 > 48 */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_SPREAD, out, 8, &n));
    ASSERT_EQ(n, 3);
    ASSERT_STR_EQ(out[0].device, "g4");
    ASSERT_STR_EQ(out[1].device, "g2");
    ASSERT_U64_EQ(out[1].memory, 4 * GiB);
    ASSERT_STR_EQ(out[2].device, "g3");
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
    /* max too small to cover */
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_SPREAD, out, 1, &n));
    /* 72 GiB: no single node has it */
    r.req_gpu = r.lim_gpu = 72 * GiB;
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
}

TEST(admission_place_multi_node)
{
    struct cluster c;
    struct adm_req r = nv(60 * GiB, 60 * GiB);
    struct adm_sel out[8];
    size_t n = 0;

    cl_init(&c);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 24 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 24 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_TIMESLICE, 24 * GiB);
    r.multi_nodes = true;
    /* modes first, then nodes: g0, g2 (Exclusive), g1 (12 of MemorySlice) */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    ASSERT_EQ(n, 3);
    ASSERT_STR_EQ(out[0].device, "g0");
    ASSERT_STR_EQ(out[1].device, "g2");
    ASSERT_STR_EQ(out[2].device, "g1");
    ASSERT_U64_EQ(out[2].memory, 12 * GiB);
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
    r.req_gpu = r.lim_gpu = 96 * GiB;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    ASSERT_EQ(n, 4);
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
    r.req_gpu = r.lim_gpu = 97 * GiB;
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    /* a TimeSlice card that would pressure its node is left out */
    r.req_gpu = r.lim_gpu = 96 * GiB;
    c.nodes[1].mem.total = 24 * GiB;
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    r.req_gpu = r.lim_gpu = 72 * GiB;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
    for (size_t i = 0; i < n; i++)
        ASSERT(placed_dev(&c, &out[i]) != 3);
}

/* ---- availability ---- */

static void avail(const struct cluster *c, const struct adm_req *r,
                  struct adm_availability *a)
{
    ASSERT_EQ(adm_availability(&c->s, r, a), ACCEL_OK);
}

TEST(admission_availability_card)
{
    struct cluster c;
    struct adm_req r = nv(10 * GiB, 20 * GiB);
    struct adm_availability a;

    base(&c);
    avail(&c, &r, &a);
    ASSERT(a.schedulable);
    ASSERT(a.reason == NULL);
    ASSERT_EQ(a.scope, ADM_SCOPE_CARD);
    ASSERT_EQ(a.nnodes, 2);
    ASSERT_EQ(a.ndevs, 4); /* nvidia devices only */
    ASSERT_EQ(a.nodes[0].status, ADM_NODE_AVAILABLE);
    ASSERT_EQ(a.nodes[1].status, ADM_NODE_NOT_ENOUGH); /* 8 GiB card */
    ASSERT_EQ(a.nodes[0].nopt, 3);
    ASSERT_EQ(a.devs[0].fit_level, ADM_LEVEL_LIMIT);
    ASSERT(a.devs[0].operable);
    ASSERT_U64_EQ(a.devs[1].available, 10 * GiB);
    ASSERT_EQ(a.devs[1].fit_level, ADM_LEVEL_REQUIRED);
    ASSERT(a.devs[1].operable);
    ASSERT_EQ(a.devs[2].fit_level, ADM_LEVEL_REQUIRED); /* 12 < 20 */
    ASSERT_EQ(a.devs[3].fit_level, ADM_LEVEL_NONE);
    ASSERT(!a.devs[3].operable);
    adm_availability_release(&a);
    ASSERT(a.nodes == NULL && a.devs == NULL);
    /* everything taken or busy: not_available, no-card-with-enough-vram */
    c.devs[0].nbound = 1;
    c.devs[1].allocated = 16 * GiB;
    c.nodes[0].mem.used = 256 * GiB;
    avail(&c, &r, &a);
    ASSERT(!a.schedulable);
    ASSERT_STR_EQ(a.reason, "no-card-with-enough-vram");
    ASSERT_EQ(a.nodes[0].status, ADM_NODE_NOT_AVAILABLE);
    ASSERT(!a.devs[2].operable);
    adm_availability_release(&a);
    /* disabled node: not_available */
    c.nodes[0].mem.used = 0;
    c.nodes[0].enabled = false;
    avail(&c, &r, &a);
    ASSERT_EQ(a.nodes[0].status, ADM_NODE_NOT_AVAILABLE);
    adm_availability_release(&a);
    /* all unhealthy: not_enough */
    c.nodes[0].enabled = true;
    for (int i = 0; i < 3; i++)
        c.devs[i].healthy = false;
    avail(&c, &r, &a);
    ASSERT_EQ(a.nodes[0].status, ADM_NODE_NOT_ENOUGH);
    ASSERT_EQ(a.devs[0].fit_level, ADM_LEVEL_NONE);
    adm_availability_release(&a);
}

TEST(admission_availability_reasons)
{
    struct cluster c;
    struct adm_req r = nv(30 * GiB, 30 * GiB);
    struct adm_availability a;

    base(&c);
    r.type = ACCEL_TYPE_INTEL_GPU;
    avail(&c, &r, &a);
    ASSERT(!a.schedulable);
    ASSERT_STR_EQ(a.reason, "no-matching-node");
    ASSERT_EQ(a.nnodes, 0);
    adm_availability_release(&a);
    r.type = ACCEL_TYPE_NVIDIA;
    r.multi_cards = true; /* n0: 24 + 10 + 12 = 46 */
    avail(&c, &r, &a);
    ASSERT_EQ(a.scope, ADM_SCOPE_SINGLE_NODE);
    ASSERT(a.schedulable);
    ASSERT_EQ(a.nodes[0].status, ADM_NODE_AVAILABLE);
    ASSERT_EQ(a.nodes[1].status, ADM_NODE_NOT_ENOUGH);
    ASSERT(a.devs[2].operable);  /* TimeSlice 12 contributes */
    ASSERT(!a.devs[3].operable); /* node not available */
    adm_availability_release(&a);
    c.devs[0].nbound = 1; /* 10 + 12 left */
    avail(&c, &r, &a);
    ASSERT(!a.schedulable);
    ASSERT_STR_EQ(a.reason, "no-node-with-enough-cards");
    ASSERT_EQ(a.nodes[0].status, ADM_NODE_NOT_AVAILABLE);
    adm_availability_release(&a);
    r.multi_nodes = true; /* 10 + 12 + 8 = 30 */
    avail(&c, &r, &a);
    ASSERT_EQ(a.scope, ADM_SCOPE_CROSS_NODE);
    ASSERT(a.schedulable);
    ASSERT(a.devs[3].operable); /* cross-node: every node's cards */
    adm_availability_release(&a);
    r.req_gpu = r.lim_gpu = 31 * GiB;
    avail(&c, &r, &a);
    ASSERT(!a.schedulable);
    ASSERT_STR_EQ(a.reason, "insufficient-cluster-vram");
    adm_availability_release(&a);
}

/* ---- plan ---- */

TEST(admission_plan_statuses)
{
    struct cluster c;
    struct adm_req r = nv(24 * GiB, 24 * GiB);

    base(&c);
    c.devs[0].nbound = 1; /* capacity, not free, decides */
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_INSTALLABLE);
    r.req_gpu = 25 * GiB;
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_INSUFFICIENT);
    r.multi_cards = true; /* n0 sum 52 */
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_INSTALLABLE);
    r.req_gpu = 53 * GiB;
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_INSUFFICIENT);
    r.multi_nodes = true; /* cluster sum 60 */
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_INSTALLABLE);
    r.req_gpu = 61 * GiB;
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_INSUFFICIENT);
    r.type = ACCEL_TYPE_AMD_GPU;
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_NO_MATCHING_NODE);
    r.type = ACCEL_TYPE_APPLE_M;
    r.req_mem = 12 * GiB;
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_INSTALLABLE);
    c.devs[4].present = false;
    ASSERT_EQ(adm_plan(&c.s, &r), ADM_PLAN_NO_MATCHING_NODE);
}

/* ---- preflight ---- */

TEST(admission_preflight)
{
    struct cluster c, before;
    struct adm_req d[4];
    struct adm_preflight p;
    char b[160];

    worked_cluster(&c, ACCEL_SUPPORT_MEMSLICE);
    c.nodes[0].mem.used = 0; /* 42.2 GiB below 90 % */
    before = c;
    d[0] = nv(8 * GiB, 8 * GiB);
    d[0].req_mem = 20 * GiB;
    d[1] = d[0];
    d[2] = d[0];
    ASSERT_EQ(adm_preflight(&c.s, d, 2, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT(p.installable);
    ASSERT(p.reason == NULL);
    /* 20 + 23 GiB of memory on a one-node cluster with 42.2 below 90 %:
     * the cluster's pressure, checked before any node's */
    d[1].req_mem = 23 * GiB;
    ASSERT_EQ(adm_preflight(&c.s, d, 3, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT(!p.installable);
    ASSERT_EQ(p.failed, 1);
    ASSERT_STR_EQ(p.reason, "cluster-pressure");
    ASSERT(p.has_cluster && !p.has_pressure);
    ASSERT(p.cluster[ADM_DIM_MEMORY].pressured);
    ASSERT(!p.cluster[ADM_DIM_CPU].pressured);
    ASSERT_U64_EQ(p.cluster[ADM_DIM_MEMORY].used, 20 * GiB);
    ASSERT_U64_EQ(p.cluster[ADM_DIM_MEMORY].required, 23 * GiB);
    /* node pressure: the Time-slicing VRAM term is the node's alone */
    c.devs[0].st = ACCEL_SUPPORT_TIMESLICE;
    d[1].req_mem = 20 * GiB; /* 20 + 20 + 16 GiB > 42.2 on the node */
    ASSERT_EQ(adm_preflight(&c.s, d, 3, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT_EQ(p.failed, 1);
    ASSERT_STR_EQ(p.reason, "node-pressure");
    ASSERT(p.has_pressure && !p.has_cluster);
    adm_pressure_format(&p.pressure, b, sizeof(b));
    ASSERT_STR_EQ(b, "Memory: Total 46.89 Gi, Used 20 Gi, Needed 36 Gi");
    c.devs[0].st = before.devs[0].st;
    /* the third 8 GiB slice no longer fits the 16 GiB card */
    d[1].req_mem = GiB;
    d[2].req_mem = GiB;
    ASSERT_EQ(adm_preflight(&c.s, d, 3, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT_EQ(p.failed, 2);
    ASSERT_STR_EQ(p.reason, "unschedulable");
    ASSERT(!p.has_pressure);
    /* a type the cluster has not, a demand no card can hold: both fit
     * the cluster's cpu, memory and disk, and cannot be placed */
    d[1].type = ACCEL_TYPE_AMD_GPU;
    ASSERT_EQ(adm_preflight(&c.s, d, 3, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT_EQ(p.failed, 1);
    ASSERT_STR_EQ(p.reason, "unschedulable");
    d[0].req_gpu = 17 * GiB;
    ASSERT_EQ(adm_preflight(&c.s, d, 3, ADM_POLICY_SPREAD, &p), ACCEL_OK);
    ASSERT_EQ(p.failed, 0);
    ASSERT_STR_EQ(p.reason, "unschedulable");
    ASSERT(!p.has_cluster && !p.has_pressure);
    ASSERT_EQ(adm_preflight(&c.s, d, 0, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT(p.installable);
    /* the snapshot is never changed */
    ASSERT(memcmp(&c, &before, sizeof(c)) == 0);
}

TEST(admission_preflight_empty_cluster)
{
    struct cluster c;
    struct adm_req d = nv(GiB, GiB);
    struct adm_preflight p;

    cl_init(&c);
    ASSERT_EQ(adm_preflight(&c.s, &d, 1, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT(!p.installable);
    ASSERT_STR_EQ(p.reason, "cluster-capacity"); /* 1 core of none */
    d.req_cpu = d.req_mem = d.req_disk = 0;
    ASSERT_EQ(adm_preflight(&c.s, &d, 1, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "unschedulable");
}

/* What the owner-quota hook of the order test saw and answers. */
struct quota_probe {
    int pre, post;      /* calls before placement, after */
    uint64_t min_gpu;   /* last min_gpu before placement */
    bool refuse_pre, refuse_post;
};

static bool quota_check(void *ctx, size_t i, const struct adm_row *rows,
                        size_t n, uint64_t min_gpu)
{
    struct quota_probe *q = ctx;
    (void)i;
    (void)n;
    if (rows == NULL) {
        q->pre++;
        q->min_gpu = min_gpu;
        return !q->refuse_pre;
    }
    q->post++;
    return !q->refuse_post;
}

/*
 * The reasons in app-service's order (SimulatePreflight): cluster
 * capacity, cluster pressure, owner quota, unschedulable, node pressure.
 * Two nodes of 64 GiB (57.6 below 90 %), 64 cores and 1 TiB each, one
 * 24 GiB Memory-slicing card each; each case fails exactly one check and
 * passes every one before it.
 */
TEST(admission_preflight_order)
{
    struct cluster c;
    struct adm_req d[3];
    struct adm_preflight p;
    struct quota_probe q = {0};
    struct adm_preflight_hook hook = {quota_check, &q};
    struct adm_res tot[3];

    cl_init(&c);
    cl_node(&c, 64 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB);
    cl_node(&c, 64 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB);
    adm_cluster_totals(&c.s, tot);
    ASSERT_U64_EQ(tot[ADM_DIM_MEMORY].total, 128 * GiB);
    ASSERT_U64_EQ(tot[ADM_DIM_CPU].total, 128000);
    ASSERT_U64_EQ(tot[ADM_DIM_DISK].total, 2048 * GiB);
    /* 1. cluster capacity: 129 GiB of memory, more than the cluster has;
     * the quota would refuse too, and is not asked */
    d[0] = nv(GiB, GiB);
    d[0].req_mem = 129 * GiB;
    q.refuse_pre = true;
    ASSERT_EQ(adm_preflight_hooked(&c.s, d, 1, ADM_POLICY_BINPACK, &hook, &p),
              ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "cluster-capacity");
    ASSERT(p.has_cluster);
    ASSERT(p.cluster[ADM_DIM_MEMORY].pressured);
    ASSERT_U64_EQ(p.cluster[ADM_DIM_MEMORY].capacity, 128 * GiB);
    ASSERT_U64_EQ(p.cluster[ADM_DIM_MEMORY].available, 128 * GiB);
    ASSERT_EQ(q.pre, 0);
    /* cpu and disk count too */
    d[0].req_mem = GiB;
    d[0].req_cpu = 128001;
    ASSERT_EQ(adm_preflight(&c.s, d, 1, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "cluster-capacity");
    ASSERT(p.cluster[ADM_DIM_CPU].pressured);
    d[0].req_cpu = 1000;
    d[0].req_disk = 2049 * GiB;
    ASSERT_EQ(adm_preflight(&c.s, d, 1, ADM_POLICY_BINPACK, &p), ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "cluster-capacity");
    ASSERT(p.cluster[ADM_DIM_DISK].pressured);
    d[0].req_disk = GiB;
    /* 2. cluster pressure: 120 GiB fits 128, not 90 % of it (115.2) */
    d[0].req_mem = 120 * GiB;
    ASSERT_EQ(adm_preflight_hooked(&c.s, d, 1, ADM_POLICY_BINPACK, &hook, &p),
              ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "cluster-pressure");
    ASSERT_U64_EQ(p.cluster[ADM_DIM_MEMORY].available,
                  128 * GiB / 1000 * 900 + 128 * GiB % 1000 * 900 / 1000);
    ASSERT_EQ(q.pre, 0);
    /* 3. owner quota, asked with the least GPU memory the demand holds,
     * before placement: an 80 GiB demand no card can hold is refused by
     * the quota first */
    d[0].req_mem = GiB;
    d[0].req_gpu = d[0].lim_gpu = 80 * GiB;
    ASSERT_EQ(adm_preflight_hooked(&c.s, d, 1, ADM_POLICY_BINPACK, &hook, &p),
              ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "owner-quota");
    ASSERT_EQ(q.pre, 1);
    ASSERT_U64_EQ(q.min_gpu, 80 * GiB);
    ASSERT_EQ(q.post, 0);
    /* 4. unschedulable: the same demand with the quota allowing it (it
     * fits the cluster's cpu, memory and disk: not cluster-capacity) */
    q.refuse_pre = false;
    ASSERT_EQ(adm_preflight_hooked(&c.s, d, 1, ADM_POLICY_BINPACK, &hook, &p),
              ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "unschedulable");
    ASSERT(!p.has_cluster && !p.has_pressure);
    ASSERT_EQ(q.post, 0);
    /* 5. node pressure: 58 GiB fits the cluster below 90 % and no node */
    d[0].req_gpu = d[0].lim_gpu = GiB;
    d[0].req_mem = 58 * GiB;
    ASSERT_EQ(adm_preflight_hooked(&c.s, d, 1, ADM_POLICY_BINPACK, &hook, &p),
              ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "node-pressure");
    ASSERT(p.has_pressure && !p.has_cluster);
    ASSERT_EQ(q.post, 0);
    /* the quota's second look, at the placed rows, comes last */
    d[0].req_mem = GiB;
    q.refuse_post = true;
    ASSERT_EQ(adm_preflight_hooked(&c.s, d, 1, ADM_POLICY_BINPACK, &hook, &p),
              ACCEL_OK);
    ASSERT_STR_EQ(p.reason, "owner-quota");
    ASSERT_EQ(q.post, 1);
    q.refuse_post = false;
    /* demands add up: 50 + 50 GiB fit the cluster (one per node), a third
     * 20 GiB passes 115.2 */
    d[0].req_mem = d[1].req_mem = 50 * GiB;
    d[1].req_gpu = d[1].lim_gpu = GiB;
    d[2] = d[1];
    d[2].req_mem = 20 * GiB;
    ASSERT_EQ(adm_preflight_hooked(&c.s, d, 2, ADM_POLICY_BINPACK, &hook, &p),
              ACCEL_OK);
    ASSERT(p.installable);
    ASSERT_EQ(adm_preflight_hooked(&c.s, d, 3, ADM_POLICY_BINPACK, &hook, &p),
              ACCEL_OK);
    ASSERT_EQ(p.failed, 2);
    ASSERT_STR_EQ(p.reason, "cluster-pressure");
    ASSERT_U64_EQ(p.cluster[ADM_DIM_MEMORY].used, 100 * GiB);
}

/* ---- property: automatic picks pass validation ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return n ? rng_next(s) % n : 0;
}

static const enum accel_type rand_types[] = {ACCEL_TYPE_NVIDIA,
                                             ACCEL_TYPE_NVIDIA,
                                             ACCEL_TYPE_AMD_GPU,
                                             ACCEL_TYPE_APPLE_M};

static void rand_device(struct cluster *c, uint64_t *s)
{
    enum accel_type t = rand_types[rng_below(s, 4)];
    enum accel_support st = (enum accel_support)rng_below(s, 3);
    uint32_t i = cl_dev(c, t, st, (1 + rng_below(s, 32)) * GiB);
    struct adm_device *d = &c->devs[i];

    d->healthy = rng_below(s, 10) != 0;
    d->present = rng_below(s, 20) != 0;
    d->nbound = (uint32_t)rng_below(s, 3);
    if (st == ACCEL_SUPPORT_EXCLUSIVE && rng_below(s, 2))
        d->nbound = 0;
    if (st == ACCEL_SUPPORT_MEMSLICE && d->nbound)
        d->allocated = rng_below(s, d->memory + GiB);
    if (rng_below(s, 3) == 0) /* elastic memory: 0.5 .. 4.5, off outside */
        d->overcommit = 500 + (uint32_t)rng_below(s, 4001);
}

static void rand_cluster(struct cluster *c, uint64_t *s)
{
    size_t nn = 1 + rng_below(s, 6);

    cl_init(c);
    for (size_t n = 0; n < nn; n++) {
        size_t nd = rng_below(s, 7);
        uint32_t k = cl_node(c, (16 + rng_below(s, 112)) * GiB, 0);
        c->nodes[k].mem.used = rng_below(s, c->nodes[k].mem.total);
        c->nodes[k].cpu.used = rng_below(s, 64000);
        c->nodes[k].enabled = rng_below(s, 8) != 0;
        for (size_t i = 0; i < nd; i++)
            rand_device(c, s);
    }
}

static struct adm_req rand_req(uint64_t *s)
{
    struct adm_req r;

    memset(&r, 0, sizeof(r));
    r.type = rand_types[rng_below(s, 4)];
    r.req_gpu = rng_below(s, 40) * GiB / 2;
    r.lim_gpu = rng_below(s, 3) ? r.req_gpu + rng_below(s, 8) * GiB : 0;
    r.req_mem = rng_below(s, 24) * GiB;
    r.lim_mem = r.req_mem;
    r.req_cpu = rng_below(s, 8000);
    r.req_disk = rng_below(s, 8) * GiB;
    r.multi_cards = rng_below(s, 3) == 0;
    r.multi_nodes = rng_below(s, 4) == 0;
    return r;
}

/* Print a failing random case so it can be turned into a fixed test. */
static void dump_case(const struct cluster *c, const struct adm_req *r)
{
    fprintf(stderr, "req type %d gpu %" PRIu64 "/%" PRIu64 " mem %" PRIu64
            " cpu %" PRIu64 " disk %" PRIu64 " multi %d/%d\n", r->type,
            r->req_gpu, r->lim_gpu, r->req_mem, r->req_cpu, r->req_disk,
            r->multi_cards, r->multi_nodes);
    for (size_t n = 0; n < c->s.nnodes; n++) {
        const struct adm_node *nd = &c->nodes[n];
        fprintf(stderr, "node %zu en %d mem %" PRIu64 "/%" PRIu64
                " cpu %" PRIu64 "/%" PRIu64 "\n", n, nd->enabled,
                nd->mem.used, nd->mem.total, nd->cpu.used, nd->cpu.total);
        for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++) {
            const struct adm_device *d = &c->devs[i];
            fprintf(stderr, "  dev %u type %d st %d h %d p %d mem %" PRIu64
                    " alloc %" PRIu64 " nb %u\n", i, d->type, d->st,
                    d->healthy, d->present, d->memory, d->allocated,
                    d->nbound);
        }
    }
}

/* One random case; returns whether a placement was found. */
static bool property_case(uint64_t seed, size_t *nmulti)
{
    uint64_t s = seed;
    struct cluster c;
    struct adm_req r;
    struct adm_sel out[ADM_MAX_SELECTION];
    struct adm_row rows[ADM_MAX_SELECTION];
    struct adm_verdict v;
    struct adm_availability a;
    size_t n = 0;
    bool placed;
    char b[300];

    rand_cluster(&c, &s);
    r = rand_req(&s);
    placed = adm_place(&c.s, &r, (enum adm_policy)rng_below(&s, 2), out,
                       ADM_MAX_SELECTION, &n);
    if (placed && !adm_validate(&c.s, &r, out, n, &v, rows)) {
        dump_case(&c, &r);
        adm_verdict_format(&v, b, sizeof(b));
        FAIL_AT_("seed %" PRIu64 ": placement fails validation: %s", seed, b);
    }
    if (adm_availability(&c.s, &r, &a) != ACCEL_OK)
        FAIL_AT_("seed %" PRIu64 ": availability ENOMEM", seed);
    if (a.schedulable != placed)
        dump_case(&c, &r);
    if (a.schedulable != placed)
        FAIL_AT_("seed %" PRIu64 ": schedulable %d but placed %d", seed,
                 a.schedulable, placed);
    adm_availability_release(&a);
    if (placed && adm_plan(&c.s, &r) != ADM_PLAN_INSTALLABLE)
        FAIL_AT_("seed %" PRIu64 ": placed but plan says no", seed);
    *nmulti += placed && n > 1;
    return placed;
}

TEST(admission_property_pick_validates)
{
    uint64_t base_seed = 20240611;
    size_t placed = 0, multi = 0, cases = 20000;

    for (size_t i = 0; i < cases; i++)
        placed += property_case(base_seed + i, &multi);
    printf("property: %zu of %zu cases placed, %zu multi-card\n", placed,
           cases, multi);
    /* the generator must exercise both outcomes */
    ASSERT_GT(placed, cases / 10);
    ASSERT_LT(placed, cases - cases / 10);
    ASSERT_GT(multi, 50);
}

/* ---- property: placement equals a plain restatement of SPEC 2.5 ---- */

/*
 * The reference below is the placement as SPEC 2.5 and
 * docs/internals/admission.md state it, written the slow, obvious way
 * (loop over levels, then modes, then every device; gather card by card).
 * adm_place is optimized (per-node sums, early rejection, lazy pressure
 * arithmetic); it must pick exactly the same cards with the same quotas.
 */
static bool ref_dim_ok(const struct adm_res *res, uint64_t req, uint64_t *left)
{
    uint64_t t = res->total / 1000 * ADM_PRESSURE_PERMILLE +
                 res->total % 1000 * ADM_PRESSURE_PERMILLE / 1000;

    if (res->used > UINT64_MAX - req || res->used + req > t)
        return false;
    *left = t - res->used - req;
    return true;
}

/* Node passes 2.3 with no card; *ts: most TimeSlice VRAM it still takes. */
static bool ref_room(const struct adm_snapshot *s, uint32_t n,
                     const struct adm_req *r, uint64_t *ts)
{
    const struct adm_node *nd = &s->nodes[n];
    uint64_t unused;

    return nd->enabled && ref_dim_ok(&nd->cpu, r->req_cpu, &unused) &&
           ref_dim_ok(&nd->disk, r->req_disk, &unused) &&
           ref_dim_ok(&nd->mem, r->req_mem, ts);
}

static bool ref_usable(const struct adm_device *d, const struct adm_req *r)
{
    return d->type == r->type && d->healthy && d->present &&
           (unsigned)d->st < ACCEL_SUPPORT_COUNT;
}

static bool ref_single(const struct adm_snapshot *s, const struct adm_req *r,
                       enum adm_policy pol, struct adm_sel *out)
{
    uint64_t need = adm_target(r, ADM_LEVEL_REQUIRED);
    uint64_t lim = adm_target(r, ADM_LEVEL_LIMIT);
    uint64_t t[2] = { lim > need ? lim : need, need };
    static const enum accel_support modes[3] = { ACCEL_SUPPORT_EXCLUSIVE,
                                                 ACCEL_SUPPORT_MEMSLICE,
                                                 ACCEL_SUPPORT_TIMESLICE };

    for (int lvl = 0; lvl < 2; lvl++) {
        for (int m = 0; m < 3; m++) {
            uint32_t best = UINT32_MAX;
            uint64_t bf = 0;
            for (uint32_t i = 0; i < s->ndevs; i++) {
                const struct adm_device *d = &s->devs[i];
                uint64_t f = adm_device_free(d), ts = 0;
                if (d->st != modes[m] || !ref_usable(d, r) ||
                    !ref_room(s, d->node, r, &ts) || f < t[lvl])
                    continue;
                if ((d->st == ACCEL_SUPPORT_EXCLUSIVE && d->nbound > 0) ||
                    (d->st == ACCEL_SUPPORT_MEMSLICE && need == 0) ||
                    (d->st == ACCEL_SUPPORT_TIMESLICE && d->memory > ts))
                    continue;
                if (best != UINT32_MAX &&
                    (pol == ADM_POLICY_SPREAD ? f <= bf : f >= bf))
                    continue;
                best = i;
                bf = f;
            }
            if (best == UINT32_MAX)
                continue;
            out->node = s->nodes[s->devs[best].node].name;
            out->device = s->devs[best].id;
            out->memory = modes[m] == ACCEL_SUPPORT_MEMSLICE ? need : 0;
            return true;
        }
    }
    return false;
}

/* A gathering: cards taken so far, what is left, their free sum. */
struct ref_gather {
    struct adm_sel *out;
    size_t n, max;
    uint64_t left, free_sum;
};

/* Gather node n's cards of mode st, in index order. */
static void ref_gather_mode(const struct adm_snapshot *s,
                            const struct adm_req *r, uint32_t n,
                            enum accel_support st, struct ref_gather *g)
{
    const struct adm_node *nd = &s->nodes[n];
    uint64_t ts = 0, extra = 0;

    if (!ref_room(s, n, r, &ts))
        return;
    for (uint32_t i = nd->first_dev; i < nd->first_dev + nd->ndev; i++) {
        const struct adm_device *d = &s->devs[i];
        uint64_t f = adm_device_free(d), give = d->memory, quota = 0;
        if (d->st != st || !ref_usable(d, r) || f == 0 ||
            (g->left == 0 && g->n > 0) || g->n >= g->max)
            continue;
        if (st == ACCEL_SUPPORT_MEMSLICE) {
            if (g->left == 0)
                continue;
            give = quota = f < g->left ? f : g->left;
        }
        if (st == ACCEL_SUPPORT_TIMESLICE) {
            if (d->memory > ts - extra)
                continue;
            extra += d->memory;
        }
        g->out[g->n].node = nd->name;
        g->out[g->n].device = d->id;
        g->out[g->n].memory = quota;
        g->n++;
        g->free_sum =
            f > UINT64_MAX - g->free_sum ? UINT64_MAX : g->free_sum + f;
        g->left = give >= g->left ? 0 : g->left - give;
    }
}

static bool ref_multi(const struct adm_snapshot *s, const struct adm_req *r,
                      enum adm_policy pol, struct adm_sel *out, size_t max,
                      size_t *nout)
{
    uint64_t need = adm_target(r, ADM_LEVEL_REQUIRED);
    uint64_t lim = adm_target(r, ADM_LEVEL_LIMIT);
    uint64_t t[2] = { lim > need ? lim : need, need };
    struct adm_sel tmp[ADM_MAX_SELECTION];

    for (int lvl = 0; lvl < 2; lvl++) {
        struct ref_gather g = { out, 0, max, t[lvl], 0 };
        uint64_t best = 0;
        bool found = false;
        uint32_t bn = 0;
        for (uint32_t n = 0; n < s->nnodes && !r->multi_nodes; n++) {
            struct ref_gather h = { tmp, 0, max, t[lvl], 0 };
            for (int m = 0; m < 3; m++)
                ref_gather_mode(s, r, n, (enum accel_support)m, &h);
            if (h.n == 0 || h.left != 0 ||
                (found && (pol == ADM_POLICY_SPREAD ? h.free_sum <= best
                                                    : h.free_sum >= best)))
                continue;
            found = true;
            best = h.free_sum;
            bn = n;
        }
        for (int m = 0; m < 3; m++)
            for (uint32_t n = 0; n < s->nnodes; n++)
                if (r->multi_nodes || (found && n == bn))
                    ref_gather_mode(s, r, n, (enum accel_support)m, &g);
        if (g.n > 0 && g.left == 0) {
            *nout = g.n;
            return true;
        }
    }
    return false;
}

static bool ref_place(const struct adm_snapshot *s, const struct adm_req *r,
                      enum adm_policy pol, struct adm_sel *out, size_t max,
                      size_t *nout)
{
    if (max > ADM_MAX_SELECTION)
        max = ADM_MAX_SELECTION;
    if (max == 0)
        return false;
    if (r->type == ACCEL_TYPE_NVIDIA && (r->multi_cards || r->multi_nodes))
        return ref_multi(s, r, pol, out, max, nout);
    *nout = 1;
    return ref_single(s, r, pol, out);
}

/* Nodes of up to 24 cards, some of one mode only, a few nodes. */
static void rand_big_cluster(struct cluster *c, uint64_t *s)
{
    size_t nn = 1 + rng_below(s, 5);

    cl_init(c);
    for (size_t n = 0; n < nn && c->s.ndevs + 24 <= MAXD; n++) {
        size_t nd = rng_below(s, 25);
        uint32_t k = cl_node(c, (16 + rng_below(s, 400)) * GiB, 0);
        int one_mode = (int)rng_below(s, 4); /* 3: mixed */
        c->nodes[k].mem.used = rng_below(s, c->nodes[k].mem.total);
        c->nodes[k].cpu.used = rng_below(s, 64000);
        c->nodes[k].enabled = rng_below(s, 8) != 0;
        for (size_t i = 0; i < nd; i++) {
            rand_device(c, s);
            if (one_mode < 3)
                c->devs[c->s.ndevs - 1].st = (enum accel_support)one_mode;
        }
    }
}

/* Same answer, same items in the same order, same quotas. */
static void same_place(const struct cluster *c, const struct adm_req *r,
                       enum adm_policy pol, size_t max, uint64_t seed)
{
    struct adm_sel a[ADM_MAX_SELECTION], b[ADM_MAX_SELECTION];
    size_t na = 0, nb = 0;
    bool pa = adm_place(&c->s, r, pol, a, max, &na);
    bool pb = ref_place(&c->s, r, pol, b, max, &nb);

    if (pa != pb || (pa && na != nb))
        dump_case(c, r);
    if (pa != pb || (pa && na != nb))
        FAIL_AT_("seed %" PRIu64 " policy %d max %zu: placed %d/%zu, "
                 "reference %d/%zu",
                 seed, pol, max, pa, na, pb, nb);
    for (size_t i = 0; pa && i < na; i++) {
        if (strcmp(a[i].device, b[i].device) != 0 ||
            strcmp(a[i].node, b[i].node) != 0 || a[i].memory != b[i].memory) {
            dump_case(c, r);
            FAIL_AT_("seed %" PRIu64 " policy %d item %zu: %s/%s %" PRIu64
                     " vs reference %s/%s %" PRIu64,
                     seed, pol, i, a[i].node, a[i].device, a[i].memory,
                     b[i].node, b[i].device, b[i].memory);
        }
    }
}

TEST(admission_property_place_matches_reference)
{
    static const size_t maxes[] = { ADM_MAX_SELECTION, 1, 2, 3, 5 };
    size_t placed = 0, multi = 0, cases = 20000;

    for (size_t i = 0; i < cases; i++) {
        uint64_t seed = 777000 + i, s = seed;
        struct cluster c;
        struct adm_req r;
        size_t max = maxes[rng_below(&s, 5)];
        size_t na = 0;
        struct adm_sel tmp[ADM_MAX_SELECTION];
        if (i % 2)
            rand_cluster(&c, &s);
        else
            rand_big_cluster(&c, &s);
        r = rand_req(&s);
        if (rng_below(&s, 2)) { /* a multi-card app worth gathering for */
            r.type = ACCEL_TYPE_NVIDIA;
            r.multi_cards = true;
            r.req_gpu = rng_below(&s, 160) * GiB;
            r.lim_gpu = r.req_gpu + rng_below(&s, 3) * 8 * GiB;
        }
        same_place(&c, &r, ADM_POLICY_BINPACK, max, seed);
        same_place(&c, &r, ADM_POLICY_SPREAD, max, seed);
        if (adm_place(&c.s, &r, ADM_POLICY_BINPACK, tmp, max, &na)) {
            placed++;
            multi += na > 1;
        }
    }
    printf("reference: %zu of %zu cases placed, %zu multi-card\n", placed,
           cases, multi);
    ASSERT_GT(placed, cases / 10);
    ASSERT_GT(multi, cases / 20);
    ASSERT_LT(placed, cases - cases / 10);
}

/* The TimeSlice headroom between 7/8 and 90 % of the memory, and max. */
TEST(admission_place_multi_headroom_edge)
{
    struct cluster c;
    struct adm_req r = nv(88 * GiB, 88 * GiB);
    struct adm_sel out[8], ref[8];
    size_t n = 0, nr = 0;

    cl_init(&c);
    cl_node(&c, 100 * GiB, 0); /* 90 GiB below 90 %, 87.5 below 7/8 */
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_TIMESLICE, 40 * GiB);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_TIMESLICE, 48 * GiB);
    r.multi_cards = true; /* 1 GiB RAM + 88 GiB VRAM = 89 GiB needed */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    ASSERT_EQ(n, 2);
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
    c.nodes[0].mem.used = GiB; /* exactly at 90 % */
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_SPREAD, out, 8, &n));
    ASSERT_EQ(n, 2);
    ASSERT_STR_EQ(check(&c, &r, out, n), "valid");
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 1, &n)); /* max */
    c.nodes[0].mem.used = 2 * GiB; /* the 48 GiB card no longer fits */
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    r.req_gpu = r.lim_gpu = 48 * GiB; /* takes 40, skips 48: short */
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    r.req_gpu = r.lim_gpu = 40 * GiB;
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 8, &n));
    ASSERT(ref_place(&c.s, &r, ADM_POLICY_BINPACK, ref, 8, &nr));
    ASSERT_EQ(n, 1);
    ASSERT_EQ(nr, 1);
    ASSERT_STR_EQ(out[0].device, "g0");
    ASSERT_STR_EQ(ref[0].device, "g0");
}

/* ---- property: the free-capacity index answers as the scan does ---- */

/*
 * adm_place with an index (adm_index_build) must pick what the scan (the
 * same snapshot, index NULL) and the reference above pick, after any
 * sequence of changes: rows applied and released, modes, health,
 * presence, VRAM, bindings and node usage changed behind its back and
 * reported with adm_index_update_node/_dev. adm_index_check compares the
 * index with a fresh build after every step.
 */

/* Up to 16 nodes of up to 8 cards of few sizes: many ties in free memory. */
static void rand_wide_cluster(struct cluster *c, uint64_t *s)
{
    size_t nn = 1 + rng_below(s, MAXN);

    cl_init(c);
    for (size_t n = 0; n < nn; n++) {
        size_t nd = rng_below(s, 9);
        uint32_t k = cl_node(c, (32 + 32 * rng_below(s, 4)) * GiB, 0);
        c->nodes[k].mem.used = rng_below(s, 4) * 8 * GiB;
        c->nodes[k].cpu.used = rng_below(s, 2) * 32000;
        c->nodes[k].enabled = rng_below(s, 10) != 0;
        for (size_t i = 0; i < nd; i++) {
            rand_device(c, s);
            c->devs[c->s.ndevs - 1].memory = (8 + 8 * rng_below(s, 3)) * GiB;
            if (rng_below(s, 2))
                c->devs[c->s.ndevs - 1].type = ACCEL_TYPE_NVIDIA;
        }
    }
}

/* A requirement worth placing here: nvidia half the time, often multi. */
static struct adm_req rand_idx_req(uint64_t *s)
{
    struct adm_req r = rand_req(s);

    if (rng_below(s, 2))
        r.type = ACCEL_TYPE_NVIDIA;
    if (r.type == ACCEL_TYPE_NVIDIA && rng_below(s, 2)) {
        r.multi_cards = true;
        r.multi_nodes = rng_below(s, 3) == 0;
        r.req_gpu = rng_below(s, 120) * GiB;
        r.lim_gpu = rng_below(s, 2) ? r.req_gpu + rng_below(s, 3) * 8 * GiB
                                    : 0;
    }
    return r;
}

/* adm_place with the index, without it and the reference: one answer. */
static void same_three(struct cluster *c, const struct adm_req *r,
                       enum adm_policy pol, size_t max, uint64_t seed,
                       size_t step, size_t *placed)
{
    struct adm_sel a[ADM_MAX_SELECTION], b[ADM_MAX_SELECTION];
    struct adm_sel f[ADM_MAX_SELECTION];
    struct adm_index *x = c->s.index;
    size_t na = 0, nb = 0, nf = 0;
    bool pa = adm_place(&c->s, r, pol, a, max, &na);
    bool pb, pf;

    c->s.index = NULL;
    pb = adm_place(&c->s, r, pol, b, max, &nb);
    c->s.index = x;
    pf = ref_place(&c->s, r, pol, f, max, &nf);
    if (pa != pb || pa != pf || (pa && (na != nb || na != nf)))
        dump_case(c, r);
    if (pa != pb || pa != pf || (pa && (na != nb || na != nf)))
        FAIL_AT_("seed %" PRIu64 " step %zu policy %d max %zu: index %d/%zu"
                 ", scan %d/%zu, reference %d/%zu", seed, step, pol, max, pa,
                 na, pb, nb, pf, nf);
    for (size_t i = 0; pa && i < na; i++) {
        if (strcmp(a[i].device, b[i].device) != 0 ||
            strcmp(a[i].device, f[i].device) != 0 ||
            a[i].memory != b[i].memory || a[i].memory != f[i].memory) {
            dump_case(c, r);
            FAIL_AT_("seed %" PRIu64 " step %zu policy %d item %zu: index "
                     "%s %" PRIu64 ", scan %s %" PRIu64 ", reference %s",
                     seed, step, pol, i, a[i].device, a[i].memory,
                     b[i].device, b[i].memory, f[i].device);
        }
    }
    *placed += pa;
}

/* Rows applied so far, to release later. */
struct held {
    struct adm_req r[32];
    struct adm_row rows[32][ADM_MAX_SELECTION];
    size_t n[32];
    size_t count;
};

/* Place r and apply what it picks (if it validates); false if nothing. */
static bool hold_one(struct cluster *c, struct held *h, const struct adm_req *r,
                     enum adm_policy pol)
{
    struct adm_sel sel[ADM_MAX_SELECTION];
    struct adm_verdict v;
    size_t n = 0, k = h->count;

    if (k == 32 || !adm_place(&c->s, r, pol, sel, ADM_MAX_SELECTION, &n) ||
        !adm_validate(&c->s, r, sel, n, &v, h->rows[k]))
        return false;
    h->r[k] = *r;
    h->n[k] = n;
    h->count++;
    adm_snapshot_apply(&c->s, r, h->rows[k], n);
    return true;
}

static void release_one(struct cluster *c, struct held *h, size_t k)
{
    adm_snapshot_release(&c->s, &h->r[k], h->rows[k], h->n[k]);
    h->count--;
    h->r[k] = h->r[h->count];
    h->n[k] = h->n[h->count];
    memmove(h->rows[k], h->rows[h->count], sizeof(h->rows[k]));
}

/* A change the daemon makes outside apply/release, then reported. */
static void poke(struct cluster *c, uint64_t *s)
{
    if (c->s.ndevs > 0 && rng_below(s, 3) != 0) {
        uint32_t i = (uint32_t)rng_below(s, c->s.ndevs);
        struct adm_device *d = &c->devs[i];
        switch (rng_below(s, 7)) {
        case 0: d->st = (enum accel_support)rng_below(s, 3); break;
        case 1: d->healthy = !d->healthy; break;
        case 2: d->present = !d->present; break;
        case 3: d->memory = (8 + 8 * rng_below(s, 3)) * GiB; break;
        case 4: d->nbound = (uint32_t)rng_below(s, 2); break;
        case 5: d->overcommit = (uint32_t)rng_below(s, 4500); break;
        default: d->allocated = rng_below(s, d->memory + 1); break;
        }
        adm_index_update_dev(&c->s, i);
    } else if (c->s.nnodes > 0) {
        uint32_t n = (uint32_t)rng_below(s, c->s.nnodes);
        if (rng_below(s, 2))
            c->nodes[n].enabled = !c->nodes[n].enabled;
        else
            c->nodes[n].mem.used = rng_below(s, c->nodes[n].mem.total);
        adm_index_update_node(&c->s, n);
    }
}

/* One cluster through steps of changes, compared after each. */
static void index_case(uint64_t seed, size_t *placed, size_t *held_max)
{
    static const size_t maxes[] = { ADM_MAX_SELECTION, 1, 2, 3, 5 };
    uint64_t s = seed;
    struct cluster c;
    struct held h;

    h.count = 0;
    if (seed % 3 == 0)
        rand_cluster(&c, &s);
    else if (seed % 3 == 1)
        rand_big_cluster(&c, &s);
    else
        rand_wide_cluster(&c, &s);
    if (adm_index_build(&c.s) != ACCEL_OK)
        FAIL_AT_("seed %" PRIu64 ": adm_index_build", seed);
    for (size_t step = 0; step < 24; step++) {
        struct adm_req r = rand_idx_req(&s);
        uint64_t op = rng_below(&s, 8);
        if (op < 3)
            hold_one(&c, &h, &r, (enum adm_policy)rng_below(&s, 2));
        else if (op < 5 && h.count > 0)
            release_one(&c, &h, rng_below(&s, h.count));
        else
            poke(&c, &s);
        if (!adm_index_check(&c.s)) {
            dump_case(&c, &r);
            FAIL_AT_("seed %" PRIu64 " step %zu: index differs from a "
                     "fresh build", seed, step);
        }
        r = rand_idx_req(&s);
        same_three(&c, &r, ADM_POLICY_BINPACK, maxes[rng_below(&s, 5)], seed,
                   step, placed);
        same_three(&c, &r, ADM_POLICY_SPREAD, maxes[rng_below(&s, 5)], seed,
                   step, placed);
        *held_max = h.count > *held_max ? h.count : *held_max;
    }
    adm_index_free(&c.s);
}

TEST(admission_index_matches_scan)
{
    size_t placed = 0, held_max = 0, cases = 10000;

    for (size_t i = 0; i < cases; i++)
        index_case(515000 + i, &placed, &held_max);
    printf("index: %zu of %zu placements found, up to %zu apps held\n",
           placed, cases * 48, held_max);
    ASSERT_GT(placed, cases * 48 / 10);
    ASSERT_LT(placed, cases * 48 - cases * 48 / 10);
    ASSERT_GT(held_max, 5);
}

/* Preflight on an indexed snapshot: same verdicts, the index untouched. */
TEST(admission_index_preflight)
{
    for (uint64_t seed = 91000; seed < 91500; seed++) {
        uint64_t s = seed;
        struct cluster c;
        struct adm_req d[6];
        struct adm_preflight a, b;
        enum adm_policy pol = (enum adm_policy)rng_below(&s, 2);
        rand_wide_cluster(&c, &s);
        for (size_t i = 0; i < 6; i++)
            d[i] = rand_idx_req(&s);
        ASSERT_EQ(adm_preflight(&c.s, d, 6, pol, &b), ACCEL_OK);
        ASSERT_EQ(adm_index_build(&c.s), ACCEL_OK);
        ASSERT_EQ(adm_preflight(&c.s, d, 6, pol, &a), ACCEL_OK);
        ASSERT(adm_index_check(&c.s));
        ASSERT_EQ(a.installable, b.installable);
        ASSERT_EQ(a.failed, b.failed);
        ASSERT((a.reason == NULL) == (b.reason == NULL));
        if (a.reason != NULL)
            ASSERT_STR_EQ(a.reason, b.reason);
        adm_index_free(&c.s);
    }
}

/* The index follows a node switched off and on, and a mode switch. */
TEST(admission_index_follows_changes)
{
    struct cluster c;
    struct adm_req r = nv(8 * GiB, 8 * GiB);
    struct adm_sel out[2];
    size_t n = 0;

    cl_init(&c);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 16 * GiB);
    cl_node(&c, 256 * GiB, 0);
    cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB);
    ASSERT_EQ(adm_index_build(&c.s), ACCEL_OK);
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 2, &n));
    ASSERT_STR_EQ(out[0].device, "g0");
    c.nodes[0].enabled = false;
    adm_index_update_node(&c.s, 0);
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 2, &n));
    ASSERT_STR_EQ(out[0].device, "g1");
    c.devs[1].st = ACCEL_SUPPORT_EXCLUSIVE;
    c.devs[1].nbound = 1;
    adm_index_update_dev(&c.s, 1);
    ASSERT(!adm_place(&c.s, &r, ADM_POLICY_BINPACK, out, 2, &n));
    c.nodes[0].enabled = true;
    adm_index_update_node(&c.s, 0);
    ASSERT(adm_place(&c.s, &r, ADM_POLICY_SPREAD, out, 2, &n));
    ASSERT_STR_EQ(out[0].device, "g0");
    ASSERT(adm_index_check(&c.s));
    adm_index_free(&c.s);
    ASSERT(c.s.index == NULL);
}

/* ---- live quotas (SPEC 4.4): a raise is a resume's validation, a cut
 * lands, a card without a quota of its own says so ---- */

TEST(admission_quota_change)
{
    struct cluster c;
    struct adm_req r = nv(4 * GiB, 4 * GiB);
    struct adm_row rows[1], other[1], out[1];
    struct adm_verdict v;
    char code[128];
    uint32_t g, ex;

    cl_init(&c);
    cl_node(&c, 512 * GiB, 0);
    g = cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_MEMSLICE, 24 * GiB);
    ex = cl_dev(&c, ACCEL_TYPE_NVIDIA, ACCEL_SUPPORT_EXCLUSIVE, 24 * GiB);
    rows[0] = (struct adm_row){g, 8 * GiB};       /* this app: 8 Gi */
    other[0] = (struct adm_row){g, 12 * GiB};     /* another: 12 Gi */
    adm_snapshot_apply(&c.s, &r, rows, 1);
    adm_snapshot_apply(&c.s, &r, other, 1);
    ASSERT_U64_EQ(c.devs[g].allocated, 20 * GiB);

    /* a raise into the free 4 Gi (8 + 4 = 12 beside 12): admitted */
    ASSERT_EQ(adm_quota_change(&c.s, &r, rows, 1, 0, 12 * GiB, &v, out),
              ADM_QUOTA_RAISE);
    ASSERT_EQ(v.code, ADM_VALID);
    ASSERT_U64_EQ(out[0].memory, 12 * GiB);
    ASSERT_EQ(out[0].dev, g);
    /* the snapshot is as it was: the app's own rows put back */
    ASSERT_U64_EQ(c.devs[g].allocated, 20 * GiB);
    ASSERT_EQ(c.devs[g].nbound, 2);

    /* one byte more than is free: device-vram-insufficient, rows kept */
    out[0].memory = 1;
    ASSERT_EQ(adm_quota_change(&c.s, &r, rows, 1, 0, 12 * GiB + 1, &v, out),
              ADM_QUOTA_REFUSED);
    adm_verdict_format(&v, code, sizeof code);
    ASSERT_STR_EQ(code, "device-vram-insufficient:g0");
    ASSERT_U64_EQ(out[0].memory, 1);
    ASSERT_U64_EQ(c.devs[g].allocated, 20 * GiB);

    /* above the whole card: total-vram-below-requirement */
    ASSERT_EQ(adm_quota_change(&c.s, &r, rows, 1, 0, 25 * GiB, &v, out),
              ADM_QUOTA_REFUSED);
    ASSERT_EQ(v.code, ADM_TOTAL_VRAM_BELOW);

    /* a raise still below the requirement (a cut went there first) is
     * refused as a resume's selection would be */
    {
        struct adm_row low[1] = {{g, 1 * GiB}};
        adm_snapshot_release(&c.s, &r, rows, 1);
        adm_snapshot_apply(&c.s, &r, low, 1);
        ASSERT_EQ(adm_quota_change(&c.s, &r, low, 1, 0, 2 * GiB, &v, out),
                  ADM_QUOTA_REFUSED);
        ASSERT_EQ(v.code, ADM_MEMORY_BELOW_REQUIRED);
        adm_snapshot_release(&c.s, &r, low, 1);
        adm_snapshot_apply(&c.s, &r, rows, 1);
    }

    /* a cut lands whatever the card holds, even below the requirement */
    c.devs[g].healthy = false; /* no check at all: not even health */
    ASSERT_EQ(adm_quota_change(&c.s, &r, rows, 1, 0, 1 * GiB, &v, out),
              ADM_QUOTA_CUT);
    ASSERT_EQ(v.code, ADM_VALID);
    ASSERT_U64_EQ(out[0].memory, 1 * GiB);
    /* ... while a raise on an unhealthy card is refused */
    ASSERT_EQ(adm_quota_change(&c.s, &r, rows, 1, 0, 9 * GiB, &v, out),
              ADM_QUOTA_REFUSED);
    ASSERT_EQ(v.code, ADM_DEVICE_UNHEALTHY);
    c.devs[g].healthy = true;

    ASSERT_EQ(adm_quota_change(&c.s, &r, rows, 1, 0, 8 * GiB, &v, out),
              ADM_QUOTA_SAME);

    /* an Exclusive card's row (memory 0: the whole card) has no quota */
    {
        struct adm_row whole[1] = {{ex, 0}};
        ASSERT_EQ(adm_quota_change(&c.s, &r, whole, 1, 0, 4 * GiB, &v, out),
                  ADM_QUOTA_FIXED);
    }
    /* no such row */
    ASSERT_EQ(adm_quota_change(&c.s, &r, rows, 1, 1, 4 * GiB, &v, out),
              ADM_QUOTA_FIXED);
}

#define TESTS(XX)                                                              \
    XX(admission_code_names)                                                   \
    XX(admission_targets)                                                      \
    XX(admission_free_per_mode)                                                \
    XX(admission_worked_example)                                               \
    XX(admission_worked_example_other_modes)                                   \
    XX(admission_pressure_boundary)                                            \
    XX(admission_pressure_overflow)                                            \
    XX(admission_pressure_format)                                              \
    XX(admission_code_empty_and_too_many)                                      \
    XX(admission_code_not_found)                                               \
    XX(admission_code_duplicate)                                               \
    XX(admission_code_cardinality)                                             \
    XX(admission_code_unhealthy)                                               \
    XX(admission_code_type_mismatch)                                           \
    XX(admission_code_exclusive_bound)                                         \
    XX(admission_code_memory_quota)                                            \
    XX(admission_code_total_vs_device_vram)                                    \
    XX(admission_code_aggregate)                                               \
    XX(admission_code_device_memory)                                           \
    XX(admission_code_node_pressure_dims)                                      \
    XX(admission_overcommit_capacity)                                          \
    XX(admission_overcommit_validate_place)                                    \
    XX(admission_rows_sorted)                                                  \
    XX(admission_order_precedence)                                             \
    XX(admission_order_memory_codes)                                           \
    XX(admission_index_lookup)                                                 \
    XX(admission_apply_release)                                                \
    XX(admission_place_binpack_spread)                                         \
    XX(admission_place_mode_and_level_order)                                   \
    XX(admission_place_skips)                                                  \
    XX(admission_place_timeslice_pressure)                                     \
    XX(admission_place_multi_card)                                             \
    XX(admission_place_multi_node)                                             \
    XX(admission_availability_card)                                            \
    XX(admission_availability_reasons)                                         \
    XX(admission_plan_statuses)                                                \
    XX(admission_preflight)                                                    \
    XX(admission_preflight_empty_cluster)                                      \
    XX(admission_preflight_order)                                              \
    XX(admission_property_pick_validates)                                      \
    XX(admission_property_place_matches_reference)                             \
    XX(admission_place_multi_headroom_edge)                                  \
    XX(admission_index_matches_scan)                                           \
    XX(admission_index_preflight)                                              \
    XX(admission_index_follows_changes)                                        \
    XX(admission_quota_change)

TEST_MAIN(TESTS)
