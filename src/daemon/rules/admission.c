/* SPDX-License-Identifier: MIT */
/*
 * admission.c: the arithmetic of SPEC 2 (targets, free memory per mode, node
 * pressure at 90 % with exact integers), selection validation with every
 * code of 2.6 in its order, the formatting of verdicts and pressure details,
 * and applying/releasing rows on a snapshot.
 *
 * Pure: no I/O, no locks, no globals, no allocation. Placement, availability,
 * the install plan and preflight live in admission_place.c. The conditions
 * and their order are documented in docs/internals/admission.md.
 */
#include "daemon/rules/admission.h"

#include <stdio.h>
#include <string.h>

#include "common/quantity.h"
#include "common/strmap.h"

static const char *const code_names[] = {
#define ADM_CODE_STR_(n, s) s,
    ADM_CODE_MAP(ADM_CODE_STR_)
#undef ADM_CODE_STR_
};

const char *adm_code_name(enum adm_code c)
{
    return (unsigned)c < ADM_CODE_COUNT ? code_names[c] : "unknown";
}

uint64_t adm_target(const struct adm_req *r, enum adm_level level)
{
    bool lim = level == ADM_LEVEL_LIMIT;

    if (accel_type_has_vram(r->type))
        return lim && r->lim_gpu > 0 ? r->lim_gpu : r->req_gpu;
    return lim && r->lim_mem > 0 ? r->lim_mem : r->req_mem;
}

uint64_t adm_memslice_capacity(const struct adm_device *d)
{
    uint64_t m = d->memory, oc = d->overcommit, whole, part;

    if (oc <= ADM_OVERCOMMIT_ONE || oc > ADM_OVERCOMMIT_MAX)
        return m;
    /* m × oc / 1000 without overflow: m = 1000q + r */
    whole = m / ADM_OVERCOMMIT_ONE;
    part = m % ADM_OVERCOMMIT_ONE * oc / ADM_OVERCOMMIT_ONE;
    if (whole > (UINT64_MAX - part) / oc)
        return UINT64_MAX;
    return whole * oc + part;
}

uint64_t adm_memslice_free(const struct adm_device *d)
{
    uint64_t cap = adm_memslice_capacity(d);
    uint64_t f = cap > d->allocated ? cap - d->allocated : 0;
    return f < d->memory ? f : d->memory;
}

uint64_t adm_device_free(const struct adm_device *d)
{
    switch (d->st) {
    case ACCEL_SUPPORT_EXCLUSIVE:
        return d->nbound == 0 ? d->memory : 0;
    case ACCEL_SUPPORT_MEMSLICE:
        return adm_memslice_free(d);
    default:
        return d->memory;
    }
}

/* floor(cap * 0.9), exact: the largest integer use that is not pressured. */
static uint64_t threshold(uint64_t cap)
{
    /* cap = 1000q + r: floor(cap * P / 1000) = qP + floor(rP / 1000), exact
     * and without a 128-bit division (a libcall: this runs per node). */
    return cap / 1000 * ADM_PRESSURE_PERMILLE +
           cap % 1000 * ADM_PRESSURE_PERMILLE / 1000;
}

/* Fill one dimension; req_over: the required figure itself overflowed. */
static void dim_eval(struct adm_dim *d, uint64_t cap, uint64_t used,
                     uint64_t req, bool req_over)
{
    uint64_t t = threshold(cap);

    d->capacity = cap;
    d->used = used;
    d->required = req;
    d->available = t > used ? t - used : 0;
    d->pressured = req_over || used > UINT64_MAX - req || used + req > t;
}

bool adm_node_pressure(const struct adm_snapshot *s, uint32_t node,
                       const struct adm_req *r, uint64_t extra_mem,
                       struct adm_pressure *out)
{
    const struct adm_node *n = &s->nodes[node];
    bool over = r->req_mem > UINT64_MAX - extra_mem;
    uint64_t mem = over ? UINT64_MAX : r->req_mem + extra_mem;

    memset(out, 0, sizeof(*out));
    out->node = node;
    dim_eval(&out->dims[ADM_DIM_CPU], n->cpu.total, n->cpu.used, r->req_cpu,
             false);
    dim_eval(&out->dims[ADM_DIM_MEMORY], n->mem.total, n->mem.used, mem,
             over);
    dim_eval(&out->dims[ADM_DIM_DISK], n->disk.total, n->disk.used,
             r->req_disk, false);
    return out->dims[0].pressured || out->dims[1].pressured ||
           out->dims[2].pressured;
}

/* ---- formatting ---- */

void adm_verdict_format(const struct adm_verdict *v, char *buf, size_t len)
{
    if (len == 0)
        return;
    if (v->subject[0] != '\0')
        snprintf(buf, len, "%s:%s", adm_code_name(v->code), v->subject);
    else
        snprintf(buf, len, "%s", adm_code_name(v->code));
}

/* Millicores as cores: "8", "7.5", "0.25". */
static void format_cores(uint64_t m, char *buf, size_t len)
{
    size_t end;

    snprintf(buf, len, "%llu.%03llu", (unsigned long long)(m / 1000),
             (unsigned long long)(m % 1000));
    end = strlen(buf);
    while (end > 0 && buf[end - 1] == '0')
        buf[--end] = '\0';
    if (end > 0 && buf[end - 1] == '.')
        buf[end - 1] = '\0';
}

static void format_amount(enum adm_dim_kind k, uint64_t v, char *buf,
                          size_t len)
{
    if (k == ADM_DIM_CPU)
        format_cores(v, buf, len);
    else
        quantity_format_gib(v, buf, len);
}

/* Append one dimension's sentence at buf+*pos; keeps *pos within len. */
static void format_dim(enum adm_dim_kind k, const struct adm_dim *d,
                       char *buf, size_t len, size_t *pos)
{
    static const char *const label[] = {"CPU", "Memory", "Disk"};
    const char *unit = k == ADM_DIM_CPU ? "cores" : "Gi";
    char t[32], u[32], n[32];
    int w;

    format_amount(k, d->capacity, t, sizeof(t));
    format_amount(k, d->used, u, sizeof(u));
    format_amount(k, d->required, n, sizeof(n));
    w = snprintf(buf + *pos, len - *pos, "%s%s: Total %s %s, Used %s %s, "
                 "Needed %s %s", *pos ? "; " : "", label[k], t, unit, u, unit,
                 n, unit);
    if (w > 0)
        *pos += (size_t)w < len - *pos ? (size_t)w : len - *pos - 1;
}

void adm_pressure_format(const struct adm_pressure *p, char *buf, size_t len)
{
    static const enum adm_dim_kind order[] = {ADM_DIM_MEMORY, ADM_DIM_CPU,
                                              ADM_DIM_DISK};
    size_t pos = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < 3; i++)
        if (p->dims[order[i]].pressured)
            format_dim(order[i], &p->dims[order[i]], buf, len, &pos);
}

/* ---- lookups ---- */

static bool find_node(const struct adm_snapshot *s, const char *name,
                      uint32_t *out)
{
    uint32_t i;

    if (name == NULL)
        return false;
    if (s->node_index != NULL)
        return strmap_get(s->node_index, name, out) && *out < s->nnodes;
    for (i = 0; i < s->nnodes; i++) {
        if (strcmp(s->nodes[i].name, name) == 0) {
            *out = i;
            return true;
        }
    }
    return false;
}

static bool find_dev(const struct adm_snapshot *s, const char *id,
                     uint32_t *out)
{
    uint32_t i;

    if (id == NULL)
        return false;
    if (s->dev_index != NULL)
        return strmap_get(s->dev_index, id, out) && *out < s->ndevs;
    for (i = 0; i < s->ndevs; i++) {
        if (strcmp(s->devs[i].id, id) == 0) {
            *out = i;
            return true;
        }
    }
    return false;
}

/* ---- validation ---- */

struct vctx {
    const struct adm_snapshot *s;     /* the cluster */
    const struct adm_req *r;          /* the requirement */
    const struct adm_sel *sel;        /* the items */
    size_t n;                         /* number of items */
    uint32_t node[ADM_MAX_SELECTION]; /* resolved node per item */
    uint32_t dev[ADM_MAX_SELECTION];  /* resolved device per item */
    uint64_t quota[ADM_MAX_SELECTION];/* MemorySlice quota, else 0 */
    uint64_t need;                    /* required target */
    bool vram;                        /* type has dedicated VRAM */
    struct adm_verdict *v;            /* the outcome */
};

static bool fail(struct vctx *c, enum adm_code code, const char *a,
                 const char *b)
{
    c->v->code = code;
    if (b != NULL)
        snprintf(c->v->subject, sizeof(c->v->subject), "%s/%s", a, b);
    else
        snprintf(c->v->subject, sizeof(c->v->subject), "%s", a ? a : "");
    return false;
}

static const struct adm_device *item_dev(const struct vctx *c, size_t i)
{
    return &c->s->devs[c->dev[i]];
}

/* node-not-found, device-not-found, duplicate-selection: one pass each. */
static bool check_resolve(struct vctx *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (!find_node(c->s, c->sel[i].node, &c->node[i]))
            return fail(c, ADM_NODE_NOT_FOUND, c->sel[i].node, NULL);
    for (size_t i = 0; i < c->n; i++) {
        bool ok = find_dev(c->s, c->sel[i].device, &c->dev[i]);
        if (!ok || c->s->devs[c->dev[i]].node != c->node[i] ||
            !c->s->devs[c->dev[i]].present)
            return fail(c, ADM_DEVICE_NOT_FOUND, c->sel[i].device, NULL);
    }
    for (size_t i = 1; i < c->n; i++)
        for (size_t j = 0; j < i; j++)
            if (c->dev[j] == c->dev[i])
                return fail(c, ADM_DUPLICATE_SELECTION, c->sel[i].node,
                            c->sel[i].device);
    return true;
}

static bool several_nodes(const struct vctx *c)
{
    for (size_t i = 1; i < c->n; i++)
        if (c->node[i] != c->node[0])
            return true;
    return false;
}

static bool check_cardinality(struct vctx *c)
{
    const struct adm_req *r = c->r;

    if (r->type != ACCEL_TYPE_NVIDIA) {
        if (c->n != 1)
            return fail(c, ADM_NON_NVIDIA_SINGLE, NULL, NULL);
        return true;
    }
    if (!r->multi_cards && !r->multi_nodes && c->n != 1)
        return fail(c, ADM_MULTI_CARD_NOT_SUPPORTED, NULL, NULL);
    if (!r->multi_nodes && several_nodes(c))
        return fail(c, ADM_MULTI_NODE_NOT_SUPPORTED, NULL, NULL);
    return true;
}

/* device-unhealthy (incl. disabled node), gpu-type-mismatch, exclusive. */
static bool check_devices(struct vctx *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (!item_dev(c, i)->healthy || !c->s->nodes[c->node[i]].enabled)
            return fail(c, ADM_DEVICE_UNHEALTHY, c->sel[i].device, NULL);
    for (size_t i = 0; i < c->n; i++)
        if (item_dev(c, i)->type != c->r->type)
            return fail(c, ADM_GPU_TYPE_MISMATCH, NULL, NULL);
    for (size_t i = 0; i < c->n; i++) {
        const struct adm_device *d = item_dev(c, i);
        if (d->st == ACCEL_SUPPORT_EXCLUSIVE && d->nbound > 0)
            return fail(c, ADM_EXCLUSIVE_ALREADY_BOUND, c->sel[i].device,
                        NULL);
    }
    return true;
}

/* memory-required, memory-below-required (single item only). */
static bool check_quotas(struct vctx *c)
{
    for (size_t i = 0; i < c->n; i++) {
        c->quota[i] = 0;
        if (item_dev(c, i)->st == ACCEL_SUPPORT_MEMSLICE)
            c->quota[i] = c->sel[i].memory ? c->sel[i].memory : c->need;
        if (item_dev(c, i)->st == ACCEL_SUPPORT_MEMSLICE && c->quota[i] == 0)
            return fail(c, ADM_MEMORY_REQUIRED, c->sel[i].device, NULL);
    }
    if (c->n == 1 && item_dev(c, 0)->st == ACCEL_SUPPORT_MEMSLICE &&
        c->quota[0] < c->need)
        return fail(c, ADM_MEMORY_BELOW_REQUIRED, c->sel[0].device, NULL);
    return true;
}

/* What item i must find on its card: its quota, or the target (single). */
static uint64_t item_need(const struct vctx *c, size_t i)
{
    if (item_dev(c, i)->st == ACCEL_SUPPORT_MEMSLICE)
        return c->quota[i];
    return c->n == 1 ? c->need : 0;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void adm_cluster_totals(const struct adm_snapshot *s, struct adm_res tot[3])
{
    memset(tot, 0, 3 * sizeof(*tot));
    for (size_t i = 0; i < s->nnodes; i++) {
        const struct adm_node *n = &s->nodes[i];
        const struct adm_res *r[3] = {&n->cpu, &n->mem, &n->disk};
        for (int k = 0; k < 3; k++) {
            tot[k].total = sat_add(tot[k].total, r[k]->total);
            tot[k].used = sat_add(tot[k].used, r[k]->used);
        }
    }
}

/* The cluster checks: each dimension at `limit` of its capacity. */
static bool cluster_eval(const struct adm_res tot[3], const struct adm_req *r,
                         bool pressure, struct adm_dim out[3])
{
    const uint64_t req[3] = {r->req_cpu, r->req_mem, r->req_disk};
    bool any = false;

    for (int k = 0; k < 3; k++) {
        uint64_t cap = tot[k].total, used = tot[k].used;
        uint64_t t = pressure ? threshold(cap) : cap;
        out[k].capacity = cap;
        out[k].used = used;
        out[k].required = req[k];
        out[k].available = t > used ? t - used : 0;
        out[k].pressured = used > UINT64_MAX - req[k] || used + req[k] > t;
        any = any || out[k].pressured;
    }
    return any;
}

bool adm_cluster_capacity(const struct adm_res tot[3], const struct adm_req *r,
                          struct adm_dim out[3])
{
    return cluster_eval(tot, r, false, out);
}

bool adm_cluster_pressure(const struct adm_res tot[3], const struct adm_req *r,
                          struct adm_dim out[3])
{
    return cluster_eval(tot, r, true, out);
}

/* total-vram-below-requirement, device-vram-insufficient, aggregate. */
static bool check_vram(struct vctx *c)
{
    uint64_t total = 0;

    for (size_t i = 0; i < c->n; i++)
        if (item_need(c, i) > item_dev(c, i)->memory)
            return fail(c, ADM_TOTAL_VRAM_BELOW, c->sel[i].device, NULL);
    for (size_t i = 0; i < c->n; i++)
        if (item_need(c, i) > adm_device_free(item_dev(c, i)))
            return fail(c, ADM_DEVICE_VRAM_INSUFFICIENT, c->sel[i].device,
                        NULL);
    for (size_t i = 0; i < c->n; i++) {
        const struct adm_device *d = item_dev(c, i);
        total = sat_add(total, d->st == ACCEL_SUPPORT_MEMSLICE
                                   ? c->quota[i]
                                   : adm_device_free(d));
    }
    if (c->n > 1 && total < c->need)
        return fail(c, ADM_AGGREGATE_VRAM_INSUFFICIENT, NULL, NULL);
    return true;
}

/* Unified-memory types (always one item): device-memory-insufficient. */
static bool check_memory(struct vctx *c)
{
    if (item_need(c, 0) > adm_device_free(item_dev(c, 0)))
        return fail(c, ADM_DEVICE_MEMORY_INSUFFICIENT, c->sel[0].device, NULL);
    return true;
}

/* node-pressure per distinct node, in order of first appearance. */
static bool check_pressure(struct vctx *c)
{
    for (size_t i = 0; i < c->n; i++) {
        uint64_t extra = 0;
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen = seen || c->node[j] == c->node[i];
        if (seen)
            continue;
        for (size_t j = i; j < c->n; j++)
            if (c->node[j] == c->node[i] &&
                item_dev(c, j)->st == ACCEL_SUPPORT_TIMESLICE)
                extra = sat_add(extra, item_dev(c, j)->memory);
        if (adm_node_pressure(c->s, c->node[i], c->r, extra,
                              &c->v->pressure))
            return fail(c, ADM_NODE_PRESSURE, c->s->nodes[c->node[i]].name,
                        NULL);
    }
    memset(&c->v->pressure, 0, sizeof(c->v->pressure));
    return true;
}

static void write_rows(const struct vctx *c, struct adm_row *rows)
{
    for (size_t i = 0; i < c->n; i++) {
        struct adm_row row = {c->dev[i], c->quota[i]};
        size_t j = i;
        for (; j > 0 && rows[j - 1].dev > row.dev; j--)
            rows[j] = rows[j - 1];
        rows[j] = row;
    }
}

static bool run_checks(struct vctx *c)
{
    if (c->n == 0)
        return fail(c, ADM_EMPTY_SELECTION, NULL, NULL);
    if (c->n > ADM_MAX_SELECTION)
        return fail(c, ADM_TOO_MANY_SELECTIONS, NULL, NULL);
    if (!check_resolve(c) || !check_cardinality(c) || !check_devices(c) ||
        !check_quotas(c))
        return false;
    if (c->vram ? !check_vram(c) : !check_memory(c))
        return false;
    return check_pressure(c);
}

bool adm_validate(const struct adm_snapshot *s, const struct adm_req *r,
                  const struct adm_sel *sel, size_t nsel,
                  struct adm_verdict *verdict, struct adm_row *rows)
{
    struct vctx c;

    c.s = s;
    c.r = r;
    c.sel = sel;
    c.n = nsel;
    c.need = adm_target(r, ADM_LEVEL_REQUIRED);
    c.vram = accel_type_has_vram(r->type);
    c.v = verdict;
    memset(verdict, 0, sizeof(*verdict));
    if (!run_checks(&c))
        return false;
    verdict->code = ADM_VALID;
    verdict->subject[0] = '\0';
    write_rows(&c, rows);
    return true;
}

/* ---- applying rows ---- */

static uint64_t sat_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

/* Add (sign > 0) or take away r's node usage on node n. */
static void node_usage(struct adm_node *n, const struct adm_req *r, int sign)
{
    if (sign > 0) {
        n->mem.used = sat_add(n->mem.used, r->req_mem);
        n->cpu.used = sat_add(n->cpu.used, r->req_cpu);
        n->disk.used = sat_add(n->disk.used, r->req_disk);
    } else {
        n->mem.used = sat_sub(n->mem.used, r->req_mem);
        n->cpu.used = sat_sub(n->cpu.used, r->req_cpu);
        n->disk.used = sat_sub(n->disk.used, r->req_disk);
    }
}

/* Is rows[i]'s node new among rows[0..i)? */
static bool first_on_node(const struct adm_snapshot *s,
                          const struct adm_row *rows, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (s->devs[rows[j].dev].node == s->devs[rows[i].dev].node)
            return false;
    return true;
}

/* Bring the index up to date on each node rows touch (once per node). */
static void refresh_index(struct adm_snapshot *s, const struct adm_row *rows,
                          size_t n)
{
    if (s->index == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        if (first_on_node(s, rows, i))
            adm_index_update_dev(s, rows[i].dev);
}

void adm_snapshot_apply(struct adm_snapshot *s, const struct adm_req *r,
                        const struct adm_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct adm_device *d = &s->devs[rows[i].dev];
        d->allocated = sat_add(d->allocated, rows[i].memory);
        d->nbound++;
        if (first_on_node(s, rows, i))
            node_usage(&s->nodes[d->node], r, 1);
    }
    refresh_index(s, rows, n);
}

void adm_snapshot_release(struct adm_snapshot *s, const struct adm_req *r,
                          const struct adm_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct adm_device *d = &s->devs[rows[i].dev];
        d->allocated = sat_sub(d->allocated, rows[i].memory);
        if (d->nbound > 0)
            d->nbound--;
        if (first_on_node(s, rows, i))
            node_usage(&s->nodes[d->node], r, -1);
    }
    refresh_index(s, rows, n);
}

enum adm_quota adm_quota_change(struct adm_snapshot *s,
                                const struct adm_req *r,
                                const struct adm_row *rows, size_t n,
                                size_t k, uint64_t memory,
                                struct adm_verdict *v, struct adm_row *out)
{
    struct adm_sel sel[ADM_MAX_SELECTION];
    struct adm_row scratch[ADM_MAX_SELECTION];
    const struct adm_device *x;
    bool ok;

    memset(v, 0, sizeof(*v));
    v->code = ADM_VALID;
    if (k >= n || n > ADM_MAX_SELECTION)
        return ADM_QUOTA_FIXED;
    x = &s->devs[rows[k].dev];
    if (x->st != ACCEL_SUPPORT_MEMSLICE || rows[k].memory == 0)
        return ADM_QUOTA_FIXED;
    if (memory <= rows[k].memory) {
        memcpy(out, rows, n * sizeof(*rows));
        out[k].memory = memory;
        return memory == rows[k].memory ? ADM_QUOTA_SAME : ADM_QUOTA_CUT;
    }
    /* a raise is a selection of the same cards, validated as a resume's
     * (2.6) with the app's own rows not counted against it */
    for (size_t i = 0; i < n; i++) {
        const struct adm_device *y = &s->devs[rows[i].dev];
        sel[i] = (struct adm_sel){s->nodes[y->node].name, y->id,
                                  i == k ? memory : rows[i].memory};
    }
    adm_snapshot_release(s, r, rows, n);
    ok = adm_validate(s, r, sel, n, v, scratch);
    adm_snapshot_apply(s, r, rows, n);
    if (!ok)
        return ADM_QUOTA_REFUSED;
    memcpy(out, rows, n * sizeof(*rows));
    out[k].memory = memory;
    return ADM_QUOTA_RAISE;
}
