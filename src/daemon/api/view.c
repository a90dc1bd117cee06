/* SPDX-License-Identifier: MIT */
/*
 * view.c: serialization of nodes, devices, apps, availability and
 * validations. Bindings per device come only from allocation rows (SPEC
 * 2.9): a device's list is built by walking the apps' rows, never from
 * processes or names.
 */
#include "common/accel_setup.h"
#include "daemon/api/view.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/api/view_pack.h"
#include "daemon/node/devices/ctxprobe.h"
#include "daemon/node/devices/nvml.h"
#include "daemon/node/enforce/meter.h"
#include "daemon/node/enforce/reclaim.h"
#include "daemon/node/limits/vram.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/runtime/runner.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/node/slice/broker_ops.h"
#include "daemon/state.h"

#define MIB (1024ULL * 1024ULL)

/* The outside meter's reading of a row (docs/api.md): what the driver
 * holds for the app there, what of it the shim cannot see, and by how much
 * the app is over its quota. */
static void meter_fields(struct accel_daemon *d, const struct app *a,
                         const struct adm_row *row, json_t *o)
{
    const struct app_meter *m = meter_find(d, row->dev, a->name);
    if (m == NULL)
        return;
    json_object_set_new(o, "driverMemory", json_integer((json_int_t)m->driver));
    json_object_set_new(o, "untrackedMemory",
                        json_integer((json_int_t)m->untracked));
    json_object_set_new(o, "overQuota", json_integer((json_int_t)m->over));
    json_object_set_new(o, "overQuotaReported", json_boolean(m->reported));
}

json_t *view_allocation(struct accel_daemon *d, const struct app *a,
                        const struct adm_row *row, bool with_spec)
{
    const struct adm_device *dev = &d->snap.devs[row->dev];
    const struct adm_req *r = state_app_req(a);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "appName", a->name,
                          "owner", a->owner, "mode",
                          accel_type_name(r ? r->type : dev->type), "nodeName",
                          d->snap.nodes[dev->node].name, "deviceId", dev->id,
                          "memory", (json_int_t)row->memory);
    if (with_spec && r)
        json_object_set_new(o, "spec", manifest_req_json(r));
    if (a->row_usage)
        json_object_set_new(
            o, "usedMemory",
            json_integer((json_int_t)a->row_usage[row - a->rows]));
    meter_fields(d, a, row, o);
    return o;
}

bool view_hides(const struct auth_user *u, const struct app *a)
{
    return u != NULL && !u->admin && strcmp(a->owner, u->name) != 0 &&
           strcmp(a->owner, ACCEL_SHARED_OWNER) != 0;
}

/* A binding as viewer u sees it: another owner's app is only "another
 * user's app", its numbers kept (the hidden shape of docs/api.md). */
static json_t *binding_json(struct accel_daemon *d,
                            const struct auth_user *u, const struct app *a,
                            const struct adm_row *row)
{
    json_t *o = view_allocation(d, a, row, true);
    if (view_hides(u, a)) {
        json_object_set_new(o, "appName", json_string(""));
        json_object_set_new(o, "owner", json_string(""));
        json_object_set_new(o, "hidden", json_true());
    }
    return o;
}

/* One allocation row and its app. */
struct bound {
    const struct app *a;
    const struct adm_row *row;
};

/*
 * Where every device's bindings are (or only device `only`'s when >= 0),
 * from one walk over the allocation rows, so a listing of N devices costs
 * one pass over the allocations and not N: device i's rows are
 * at[first[i] .. first[i + 1]), in the order of the apps. Their JSON is
 * built only when a device's turn comes (take_bindings), as viewer u sees
 * it (NULL: all), so a listing never holds every binding's JSON at once
 * (at 20,000 bindings that was 50 MiB). Free with bindings_free.
 */
struct bindings {
    const struct auth_user *u;
    size_t *first; /* [ndevs + 1] */
    struct bound *at;
};

static struct bindings *bindings_by_device(struct accel_daemon *d, int only,
                                           const struct auth_user *u)
{
    struct bindings *idx = xcalloc(1, sizeof(*idx));
    size_t n = 0, *next;

    idx->u = u;
    idx->first = xcalloc(d->snap.ndevs + 2, sizeof(*idx->first));
    for (size_t i = 0; i < d->napps; i++)
        for (size_t k = 0; k < d->apps[i]->nrows; k++) {
            uint32_t dev = d->apps[i]->rows[k].dev;
            if (only < 0 || (int)dev == only) {
                idx->first[dev + 2]++;
                n++;
            }
        }
    /* first[i + 2] counted device i; sums shifted by one (first[i + 1] is
     * where device i's rows go while filling, first[i] once filled) */
    for (size_t i = 2; i < d->snap.ndevs + 2; i++)
        idx->first[i] += idx->first[i - 1];
    idx->at = xmalloc((n ? n : 1) * sizeof(*idx->at));
    next = idx->first + 1;
    for (size_t i = 0; i < d->napps; i++)
        for (size_t k = 0; k < d->apps[i]->nrows; k++) {
            const struct adm_row *row = &d->apps[i]->rows[k];
            if (only < 0 || (int)row->dev == only)
                idx->at[next[row->dev]++] = (struct bound){d->apps[i], row};
        }
    return idx;
}

/* The bindings of dev as JSON (new reference). */
static json_t *take_bindings(struct accel_daemon *d,
                             const struct bindings *idx, uint32_t dev)
{
    json_t *arr = json_array();
    for (size_t i = idx->first[dev]; i < idx->first[dev + 1]; i++)
        json_array_append_new(arr, binding_json(d, idx->u, idx->at[i].a,
                                                idx->at[i].row));
    return arr;
}

static void bindings_free(struct bindings *idx)
{
    if (idx == NULL)
        return;
    free(idx->first);
    free(idx->at);
    free(idx);
}

static json_t *support_list(enum accel_type t)
{
    enum accel_support m[3];
    size_t n = accel_type_modes(t, m);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_string(accel_support_name(m[i])));
    return arr;
}

/* A memory slice on a type no runtime of ours intercepts (the CPU
 * fallback, AMD and Intel, a GB10 without the CUDA shim): only the app's
 * cgroup (memory.max = limitedMemory) contains it, where there is one. */
static json_t *cgroup_only(struct accel_daemon *d, const struct adm_device *x)
{
    bool cg = d->cg && d->cg->memory.tier != CGROUP_NONE;
    const char *what = x->type == ACCEL_TYPE_CPU
                           ? "the CPU fallback has no device runtime"
                           : "no runtime of this type is intercepted";
    char *note = xasprintf("%s: %s", what,
                           cg ? "only the app's cgroup memory.max "
                                "(limitedMemory) contains it; the quota "
                                "itself is bookkeeping"
                              : "nothing contains it (no cgroup memory "
                                "controller); the quota is bookkeeping");
    json_t *o = json_pack("{s:s, s:s, s:s}", "memory", cg ? "cgroup" : "none",
                          "compute", "none", "memoryNote", note);
    free(note);
    return o;
}

static json_t *shim_enforcement(struct accel_daemon *d, int dev)
{
    const struct adm_device *x = &d->snap.devs[dev];
    const struct node_info *ni = &d->ninfo[x->node];
    bool real = ni->local && x->type == ACCEL_TYPE_NVIDIA;
    const char *mem = "none", *compute = "none";
    if (real && x->st == ACCEL_SUPPORT_MEMSLICE && d->shim_path)
        mem = "shim";
    if (real && x->st == ACCEL_SUPPORT_TIMESLICE && d->shim_path)
        compute = "broker";
    if (real && x->st == ACCEL_SUPPORT_EXCLUSIVE)
        mem = "visible-devices";
    if (ni->local && d->shim_path && x->st == ACCEL_SUPPORT_MEMSLICE &&
        x->type == ACCEL_TYPE_NVIDIA_GB10)
        return json_pack("{s:s, s:s, s:s}", "memory", "shim", "compute",
                         "none", "memoryNote",
                         "the shim holds CUDA allocations to the quota in "
                         "the shared RAM; host allocations of the app are "
                         "its cgroup's (limitedMemory)");
    if (ni->local && d->shim_path && x->st == ACCEL_SUPPORT_MEMSLICE &&
        (x->type == ACCEL_TYPE_AMD || x->type == ACCEL_TYPE_AMD_GPU))
        return json_pack("{s:s, s:s, s:s}", "memory", "shim", "compute",
                         "none", "memoryNote",
                         d->dinfo[dev].drm
                             ? "the shim holds HIP allocations to the quota; "
                               "what the app's processes hold beyond them "
                               "(the runtime's contexts, modules and graphs, "
                               "Vulkan or OpenCL) is charged by the outside "
                               "meter from the amdgpu fdinfo, after the fact"
                             : "the shim holds HIP allocations to the quota; "
                               "memory taken through Vulkan or OpenCL is not "
                               "seen (only the app's cgroup contains it)");
    if (!real && ni->local && x->st == ACCEL_SUPPORT_MEMSLICE)
        return cgroup_only(d, x);
    return json_pack("{s:s, s:s}", "memory", mem, "compute", compute);
}

/* The kernel or the driver where they hold the device's Memory-slicing
 * apps (vram.h), else what the shim and the cgroup do; and on a local
 * device, the tier the node offers its quotas (vramTier) and why
 * (vramQuotas). */
static json_t *enforcement(struct accel_daemon *d, int dev)
{
    const struct dev_info *di = &d->dinfo[dev];
    const char *tier = NULL;
    char *note = NULL;
    uint64_t ctx;
    json_t *o;

    if (d->snap.devs[dev].st == ACCEL_SUPPORT_MEMSLICE &&
        vram_device_holds(d, dev, &tier, &note)) {
        o = json_pack("{s:s, s:s, s:s}", "memory", tier, "compute", "none",
                      "memoryNote", note);
        free(note);
    } else {
        o = shim_enforcement(d, dev);
    }
    if (ctxprobe_bytes(d, d->snap.devs[dev].id, &ctx))
        json_object_set_new(o, "contextMemory", json_integer((json_int_t)ctx));
    if (di->vram_note != NULL) {
        json_object_set_new(o, "vramTier", json_string(vram_tier_name(
                                               (enum vram_tier)di->vram_tier)));
        json_object_set_new(o, "vramQuotas", json_string(di->vram_note));
    }
    return o;
}

/* A measured value, or null when it is unknown (v < 0). */
static json_t *opt_int(int64_t v)
{
    return v < 0 ? json_null() : json_integer((json_int_t)v);
}

static json_t *opt_watts(int64_t mw)
{
    return mw < 0 ? json_null() : json_real((double)mw / 1000.0);
}

#define DECLARED_REASON \
    "not measured: a device declared in the inventory, which no driver " \
    "reports to acceld"

/* "<field>Reason" beside a field whose value is unknown (null). */
static void add_reason(json_t *o, const char *key, int64_t v, uint8_t na)
{
    char k[48];
    if (v >= 0)
        return;
    snprintf(k, sizeof k, "%sReason", key);
    json_object_set_new(o, k, json_string(nvml_na_reason((enum nvml_na)na)));
}

/* power, powerLimit (watts), temperature (degrees C) and the reasons of
 * the unknown ones, utilization's included (SPEC 5.4: null + a reason). */
static void add_telemetry(json_t *o, const struct dev_info *di)
{
    json_object_set_new(o, "power", opt_watts(di->power_mw));
    json_object_set_new(o, "powerLimit", opt_watts(di->power_limit_mw));
    json_object_set_new(o, "temperature", opt_int(di->temp));
    add_reason(o, "utilization", di->util, di->util_na);
    add_reason(o, "power", di->power_mw, di->power_na);
    add_reason(o, "powerLimit", di->power_limit_mw, di->limit_na);
    add_reason(o, "temperature", di->temp, di->temp_na);
}

/* A device only the inventory declares: no driver of this node lists it and
 * no member's acceld reports it, so nothing measures its VRAM use or its
 * telemetry. */
static bool declared(const struct accel_daemon *d, int dev)
{
    const struct dev_info *di = &d->dinfo[dev];
    return !di->discovered && !di->drm && di->mem_source == NULL &&
           !d->ninfo[d->snap.devs[dev].node].member;
}

/* usedMemory (null) and the telemetry's reasons of a declared device: the
 * fitting one, not NVML's "not an NVML device" (SPEC 5.4) */
static void add_declared_reasons(json_t *o)
{
    static const char *const keys[] = {"usedMemoryReason",
                                       "utilizationReason", "powerReason",
                                       "powerLimitReason",
                                       "temperatureReason"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        json_object_set_new(o, keys[i], json_string(DECLARED_REASON));
}

/* The elastic settings of dev as the API shows them (lock held): the
 * ratio, the wait, and what the quotas may sum to. */
json_t *view_elastic_json(struct accel_daemon *d, int dev)
{
    const struct adm_device *x = &d->snap.devs[dev];
    uint32_t oc = state_dev_overcommit(d, dev);

    return json_pack("{s:f, s:i, s:I, s:I, s:b}", "overcommit",
                     (double)oc / ADM_OVERCOMMIT_ONE, "reclaimWaitMs",
                     (int)state_dev_reclaim_wait_ms(d, dev), "quotaCapacity",
                     (json_int_t)(x->st == ACCEL_SUPPORT_MEMSLICE
                                      ? adm_memslice_capacity(x)
                                      : x->memory),
                     "allocated", (json_int_t)x->allocated, "inForce",
                     x->st == ACCEL_SUPPORT_MEMSLICE &&
                         oc > ADM_OVERCOMMIT_ONE);
}

static json_t *device_json(struct accel_daemon *d, int dev,
                           const struct bindings *idx)
{
    const struct adm_device *x = &d->snap.devs[dev];
    const struct dev_info *di = &d->dinfo[dev];
    json_t *o = json_pack(
        "{s:s, s:s, s:i, s:s, s:s, s:I, s:s, s:s, s:o, s:o, s:I, s:I, s:o, "
        "s:o, s:b, s:o, s:o}",
        "id", x->id, "nodeName", d->snap.nodes[x->node].name, "index",
        di->index, "mode", accel_type_name(x->type), "cardModel",
        di->model ? di->model : "", "memory", (json_int_t)x->memory, "health",
        x->healthy && x->present ? "yes" : "no", "supportType",
        accel_support_name(x->st), "availableSupportTypes",
        support_list(x->type), "bindings", take_bindings(d, idx, (uint32_t)dev),
        "allocated", (json_int_t)x->allocated, "free",
        (json_int_t)adm_device_free(x), "usedMemory",
        declared(d, dev) ? json_null() : json_integer((json_int_t)di->used_mem),
        "utilization", opt_int(di->util), "present",
        x->present, "enforcement", enforcement(d, dev), "timeSlice",
        broker_ops_view(d, dev));
    json_object_set_new(o, "meter", meter_type(x->type)
                                        ? meter_settings_json(d, (size_t)dev)
                                        : json_null());
    /* elastic memory (SPEC 4.4): the ratio, the wait, what quotas may
     * sum to; shown for cards with VRAM of their own and the AMD APU */
    json_object_set_new(o, "elastic", accel_type_elastic(x->type)
                                          ? view_elastic_json(d, dev)
                                          : json_null());
    add_telemetry(o, di);
    if (declared(d, dev)) /* nothing measures it: say so, not "0" */
        add_declared_reasons(o);
    /* where `memory` came from (SPEC 1: VRAM, or the RAM share) */
    json_object_set_new(o, "memorySource",
                        json_string(di->mem_source ? di->mem_source
                                    : d->ninfo[x->node].member
                                        ? "reported by its node's acceld"
                                        : "declared (inventory)"));
    if (di->drm) /* and where the readings came from */
        json_object_set_new(o, "readingsSource",
                            json_pack("{s:s, s:s}", "usedMemory",
                                      di->used_source ? di->used_source
                                                      : "not reported",
                                      "telemetry",
                                      "the driver's sysfs "
                                      "(gpu_busy_percent, hwmon)"));
    else if (di->discovered)
        json_object_set_new(o, "readingsSource",
                            json_pack("{s:s, s:s}", "usedMemory", "NVML",
                                      "telemetry", "NVML"));
    /* processes NVML lists on it that hold no binding there (SPEC 8.3) */
    json_object_set_new(o, "foreignUsage", di->foreign
                                               ? json_deep_copy(di->foreign)
                                               : json_array());
    return o;
}

static json_t *res_json(const struct adm_res *r)
{
    return json_pack("{s:I, s:I}", "total", (json_int_t)r->total, "used",
                     (json_int_t)r->used);
}

json_t *view_device(struct accel_daemon *d, int dev,
                    const struct auth_user *u)
{
    struct bindings *idx = bindings_by_device(d, dev, u);
    json_t *o = device_json(d, dev, idx);
    bindings_free(idx);
    return o;
}

/* A node's fields without its devices (they are added by the caller). */
static json_t *node_json_shell(struct accel_daemon *d, int node)
{
    const struct adm_node *n = &d->snap.nodes[node];
    json_t *types = json_array();
    bool seen[ACCEL_TYPE_COUNT] = {false};
    bool healthy = false;

    for (uint32_t i = 0; i < n->ndev; i++) {
        const struct adm_device *x = &d->snap.devs[n->first_dev + i];
        if (!seen[x->type] && x->type != ACCEL_TYPE_CPU)
            json_array_append_new(types, json_string(accel_type_name(x->type)));
        seen[x->type] = true;
        healthy = healthy || (x->healthy && x->present);
    }
    return json_pack("{s:s, s:o, s:s, s:b, s:b, s:b, s:o, s:o, s:o, s:o}",
                     "nodeName", n->name, "gpuTypes", types, "health",
                     healthy ? "yes" : "no", "enabled", n->enabled, "local",
                     d->ninfo[node].local, "reachable",
                     d->ninfo[node].reachable && !d->ninfo[node].removed,
                     "memory", res_json(&n->mem), "cpu",
                     res_json(&n->cpu), "disk", res_json(&n->disk),
                     "enforcement",
                     d->ninfo[node].local && d->cg
                         ? runtime_enforcement(d, NULL)
                         : json_null());
}

static json_t *node_json(struct accel_daemon *d, int node,
                         const struct bindings *idx)
{
    const struct adm_node *n = &d->snap.nodes[node];
    json_t *o = node_json_shell(d, node), *devs = json_array();
    for (uint32_t i = 0; i < n->ndev; i++)
        json_array_append_new(devs,
                              device_json(d, (int)(n->first_dev + i), idx));
    json_object_set_new(o, "devices", devs);
    return o;
}

json_t *view_node(struct accel_daemon *d, int node,
                  const struct auth_user *u)
{
    struct bindings *idx = bindings_by_device(d, -1, u);
    json_t *o = node_json(d, node, idx);
    bindings_free(idx);
    return o;
}

/* An immutable, reference-counted text: a device's cached JSON, packed
 * (view_pack.h: the key runs every device repeats take one byte each, a
 * third of the bytes at 1,000 nodes x 8 GPUs). A listing being sent holds
 * references, so a change (view_touch) never pulls text from under an
 * answer that is still going out. */
struct view_piece {
    _Atomic unsigned refs; /* the cache's reference + one per listing */
    size_t len;            /* bytes of text, unpacked */
    size_t plen;           /* bytes of packed */
    char packed[];
};

static struct view_piece *piece_new(const char *s, size_t n)
{
    char *tmp = xmalloc(view_pack_bound(n));
    size_t plen = view_pack(s, n, tmp);
    struct view_piece *p = xmalloc(sizeof(*p) + plen);
    atomic_init(&p->refs, 1);
    p->len = n;
    p->plen = plen;
    memcpy(p->packed, tmp, plen);
    free(tmp);
    return p;
}

static void piece_put(struct view_piece *p)
{
    if (p && atomic_fetch_sub(&p->refs, 1) == 1)
        free(p);
}

void view_touch(struct accel_daemon *d, int dev)
{
    size_t from = dev < 0 ? 0 : (size_t)dev;
    size_t to = dev < 0 ? d->snap.ndevs : (size_t)dev + 1;
    for (size_t i = from; i < to; i++) {
        piece_put(d->dinfo[i].json);
        d->dinfo[i].json = NULL;
    }
}

/* One part of a listing: static glue, owned text or a cached piece. */
struct chunk {
    const char *p;          /* the bytes (NULL for a piece: packed) */
    size_t len;             /* bytes, unpacked */
    char *owned;            /* to free, or NULL */
    struct view_piece *ref; /* to release, or NULL */
};

struct view_stream {
    struct chunk *c;  /* the parts in order */
    size_t n, cap;
    size_t total;     /* bytes in all */
    size_t at, off;   /* read position: chunk, offset in it */
    char *unpacked;   /* chunk `at` unpacked, when it is read in parts */
};

static void stream_push(struct view_stream *s, struct chunk c)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->c = xrealloc(s->c, s->cap * sizeof(*s->c));
    }
    s->c[s->n++] = c;
    s->total += c.len;
}

static void stream_static(struct view_stream *s, const char *lit)
{
    stream_push(s, (struct chunk){lit, strlen(lit), NULL, NULL});
}

/* json's compact text, owned by the stream (drops the reference). */
static void stream_json(struct view_stream *s, json_t *v, bool strip_close)
{
    char *t = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    stream_push(s, (struct chunk){t, strlen(t) - (strip_close ? 1 : 0), t,
                                  NULL});
}

/* The device's JSON as member u sees it: built now, never cached (the
 * cache holds the whole view). */
static void stream_device_for(struct view_stream *s, struct accel_daemon *d,
                              int dev, struct bindings **idx,
                              const struct auth_user *u)
{
    if (*idx == NULL)
        *idx = bindings_by_device(d, -1, u);
    stream_json(s, device_json(d, dev, *idx), false);
}

/* The device's JSON: from the cache, or built now and cached. */
static void stream_device(struct view_stream *s, struct accel_daemon *d,
                          int dev, struct bindings **idx,
                          const struct auth_user *u)
{
    struct dev_info *di = &d->dinfo[dev];
    bool live = d->ninfo[d->snap.devs[dev].node].local;
    json_t *o;
    char *t;

    if (u != NULL && !u->admin) {
        stream_device_for(s, d, dev, idx, u);
        return;
    }
    if (di->json == NULL || live) {
        if (live) {
            /* only this device's bindings: one walk, few JSON objects */
            struct bindings *one = bindings_by_device(d, dev, NULL);
            o = device_json(d, dev, one);
            bindings_free(one);
        } else {
            if (*idx == NULL)
                *idx = bindings_by_device(d, -1, NULL);
            o = device_json(d, dev, *idx);
        }
        t = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        piece_put(di->json);
        di->json = piece_new(t, strlen(t));
        free(t);
    }
    atomic_fetch_add(&di->json->refs, 1);
    stream_push(s, (struct chunk){NULL, di->json->len, NULL, di->json});
}

struct view_stream *view_nodes_stream(struct accel_daemon *d,
                                      const struct auth_user *u,
                                      const char *head, const char *tail)
{
    struct view_stream *s = xcalloc(1, sizeof(*s));
    struct bindings *idx = NULL;

    stream_static(s, head);
    stream_static(s, "[");
    bool first = true;
    for (size_t i = 0; i < d->snap.nnodes; i++) {
        const struct adm_node *n = &d->snap.nodes[i];
        if (d->ninfo[i].removed)
            continue; /* forgotten (accelctl node remove) */
        if (!first)
            stream_static(s, ",");
        first = false;
        /* the node without its devices, then the devices' texts */
        stream_json(s, node_json_shell(d, (int)i), true);
        stream_static(s, ",\"devices\":[");
        for (uint32_t k = 0; k < n->ndev; k++) {
            if (k > 0)
                stream_static(s, ",");
            stream_device(s, d, (int)(n->first_dev + k), &idx, u);
        }
        stream_static(s, "]}");
    }
    stream_static(s, "]");
    stream_static(s, tail);
    bindings_free(idx);
    return s;
}

size_t view_stream_size(const struct view_stream *s)
{
    return s->total;
}

size_t view_stream_read(struct view_stream *s, char *buf, size_t max)
{
    size_t got = 0;
    while (got < max && s->at < s->n) {
        const struct chunk *c = &s->c[s->at];
        const char *from = c->p;
        size_t k = c->len - s->off;
        if (c->ref && s->off == 0 && k <= max - got) {
            /* a whole piece fits: unpack it in place */
            view_unpack(c->ref->packed, c->ref->plen, buf + got, max - got);
            got += k;
            s->at++;
            continue;
        }
        if (c->ref) {
            /* read in parts: unpacked once, beside the stream */
            if (s->unpacked == NULL) {
                s->unpacked = xmalloc(c->len);
                view_unpack(c->ref->packed, c->ref->plen, s->unpacked,
                            c->len);
            }
            from = s->unpacked;
        }
        if (k > max - got)
            k = max - got;
        memcpy(buf + got, from + s->off, k);
        got += k;
        s->off += k;
        if (s->off == c->len) {
            s->at++;
            s->off = 0;
            free(s->unpacked);
            s->unpacked = NULL;
        }
    }
    return got;
}

void view_stream_free(struct view_stream *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->c[i].owned);
        piece_put(s->c[i].ref);
    }
    free(s->unpacked);
    free(s->c);
    free(s);
}

/* usage: the shim's charges, and the outside meter's untracked memory and
 * excess over the quota summed over the app's devices. */
static json_t *app_usage(struct accel_daemon *d, const struct app *a)
{
    uint64_t untracked = 0, over = 0;
    for (size_t i = 0; i < a->nrows; i++) {
        const struct app_meter *m = meter_find(d, a->rows[i].dev, a->name);
        untracked += m ? m->untracked : 0;
        over += m ? m->over : 0;
    }
    return json_pack("{s:I, s:I, s:I}", "memory", (json_int_t)a->usage,
                     "untrackedMemory", (json_int_t)untracked, "overQuota",
                     (json_int_t)over);
}

/* One side of what an app lent or got, as viewer u sees it: the other
 * app (key) of another member's, or one gone, is "" with <key>Hidden
 * (SPEC 3: "another user's app"); "quota" (a cut quota) is no app,
 * unless an app has that name. */
static json_t *lent_side_for(struct accel_daemon *d, json_t *side,
                             const char *key, const struct auth_user *u)
{
    const char *peer = json_string_value(json_object_get(side, key));
    const struct app *p;
    char *hidden_key;

    if (side == NULL || peer == NULL || u == NULL || u->admin)
        return side != NULL ? json_incref(side) : json_null();
    p = state_app_find(d, peer);
    /* a cut quota, unless an app is named so (then judged as an app) */
    if (p == NULL && strcmp(peer, "quota") == 0)
        return json_incref(side);
    if (p != NULL && !view_hides(u, p))
        return json_incref(side);
    side = json_deep_copy(side);
    json_object_set_new(side, key, json_string(""));
    hidden_key = xasprintf("%sHidden", key);
    json_object_set_new(side, hidden_key, json_true());
    free(hidden_key);
    return side;
}

/* Elastic memory (SPEC 4.4): how the app gives memory back, its
 * priority, and what it lent and got (node/enforce/reclaim.c), as viewer
 * u sees it (NULL: every name). */
static json_t *app_elastic(struct accel_daemon *d, const struct app *a,
                           enum accel_type t, const struct auth_user *u)
{
    const struct manifest_reclaim *m = manifest_reclaim_of(&a->m, t);
    json_t *rec = reclaim_app_json(d, a->name);
    json_t *o = json_pack("{s:o, s:i}", "reclaim",
                          m != NULL ? manifest_reclaim_json(m) : json_null(),
                          "priority", m != NULL ? m->priority : 0);

    json_object_set_new(o, "lent",
                        lent_side_for(d, json_object_get(rec, "lent"),
                                      "lastTo", u));
    json_object_set_new(o, "reclaimed",
                        lent_side_for(d, json_object_get(rec, "reclaimed"),
                                      "lastFrom", u));
    json_decref(rec);
    return o;
}

json_t *view_app(struct accel_daemon *d, const struct app *a,
                 const struct auth_user *u)
{
    const struct adm_req *r = state_app_req(a);
    json_t *reqs = json_array(), *allocs = json_array();
    json_t *o;

    for (size_t i = 0; i < a->m.nreq; i++)
        json_array_append_new(reqs, manifest_req_json(&a->m.req[i]));
    for (size_t i = 0; i < a->nrows; i++)
        json_array_append_new(allocs,
                              view_allocation(d, a, &a->rows[i], false));
    o = json_pack("{s:s, s:s, s:s, s:s, s:b, s:o, s:o, s:I, s:I, s:o}",
                  "name", a->name, "title", a->m.title, "owner", a->owner,
                  "state", state_app_shown(d, a), "external",
                  !manifest_runs(&a->m), "requirements", reqs, "allocations",
                  allocs, "createdAt", (json_int_t)a->created_ms, "updatedAt",
                  (json_int_t)a->updated_ms, "usage", app_usage(d, a));
    if (a->reason)
        json_object_set_new(o, "reason", json_string(a->reason));
    if (r) {
        json_object_set_new(o, "selectedType",
                            json_string(accel_type_name(r->type)));
        json_object_set_new(o, "requirement", manifest_req_json(r));
    }
    if (r && accel_type_has_vram(r->type))
        json_object_set_new(o, "elastic", app_elastic(d, a, r->type, u));
    if (a->pid > 0)
        json_object_set_new(o, "pid", json_integer(a->pid));
    if (a->exit_status >= 0)
        json_object_set_new(o, "exitStatus", json_integer(a->exit_status));
    if (d->cg)
        json_object_set_new(o, "enforcement", runtime_enforcement(d, a));
    if (manifest_runs(&a->m))
        json_object_set_new(o, "runner",
                            json_string(runner_of(a)->kind));
    if (d->cg && runner_of(a)->json != NULL) /* the runner's own part */
        json_object_set_new(o, runner_of(a)->kind, runner_of(a)->json(d, a));
    return o;
}

static const char *const level_names[] = {"limit", "required", ""};

static json_t *view_dev_opt(struct accel_daemon *d,
                            const struct adm_dev_opt *o,
                            const struct bindings *idx)
{
    const struct adm_device *x = &d->snap.devs[o->dev];
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:b, s:o}",
                     "nodeName", d->snap.nodes[x->node].name, "deviceId",
                     x->id, "cardModel",
                     d->dinfo[o->dev].model ? d->dinfo[o->dev].model : "",
                     "supportType", accel_support_name(x->st), "capacity",
                     (json_int_t)x->memory, "available",
                     (json_int_t)o->available, "fitLevel",
                     level_names[o->fit_level], "health",
                     x->healthy && x->present ? "yes" : "no", "operable",
                     o->operable, "bindings",
                     take_bindings(d, idx, o->dev));
}

json_t *view_availability(struct accel_daemon *d, const struct adm_req *r,
                          const struct auth_user *u)
{
    struct adm_availability av;
    struct bindings *idx;
    json_t *nodes, *o;

    if (adm_availability(&d->snap, r, &av) != ACCEL_OK)
        return json_pack("{s:b, s:s}", "schedulable", 0, "reason",
                         "out-of-memory");
    nodes = json_array();
    idx = bindings_by_device(d, -1, u);
    for (size_t i = 0; i < av.nnodes; i++) {
        const struct adm_node_opt *no = &av.nodes[i];
        json_t *devs = json_array();
        for (uint32_t k = 0; k < no->nopt; k++)
            json_array_append_new(devs,
                                  view_dev_opt(d, &av.devs[no->first_opt + k],
                                               idx));
        json_array_append_new(
            nodes, json_pack("{s:s, s:s, s:s, s:o}", "nodeName",
                             d->snap.nodes[no->node].name, "gpuType",
                             accel_type_name(r->type), "status",
                             adm_node_status_name(no->status), "devices",
                             devs));
    }
    bindings_free(idx);
    o = json_pack("{s:b, s:s, s:o, s:o}", "schedulable", av.schedulable,
                  "scope", adm_scope_name(av.scope), "requirement",
                  manifest_req_json(r), "nodes", nodes);
    if (av.reason)
        json_object_set_new(o, "reason", json_string(av.reason));
    adm_availability_release(&av);
    return o;
}

const char *view_code_sentence(enum adm_code c)
{
    switch (c) {
    case ADM_VALID:
        return "The selection is valid.";
    case ADM_EMPTY_SELECTION:
        return "Select at least one GPU.";
    case ADM_NODE_NOT_FOUND:
        return "The selected node does not exist.";
    case ADM_DEVICE_NOT_FOUND:
        return "The selected device does not exist on that node.";
    case ADM_DUPLICATE_SELECTION:
        return "The same GPU is selected twice.";
    case ADM_MULTI_CARD_NOT_SUPPORTED:
        return "This app runs on a single GPU; select only one.";
    case ADM_MULTI_NODE_NOT_SUPPORTED:
        return "This app cannot span nodes; select GPUs on one node.";
    case ADM_NON_NVIDIA_SINGLE:
        return "Only NVIDIA apps can use several devices; select one.";
    case ADM_DEVICE_UNHEALTHY:
        return "This GPU is unhealthy or unavailable; select another GPU.";
    case ADM_GPU_TYPE_MISMATCH:
        return "This device is not of the type the app runs on.";
    case ADM_EXCLUSIVE_ALREADY_BOUND:
        return "This GPU is in App exclusive mode and already assigned to "
               "another app. Remove that app first or select another GPU.";
    case ADM_MEMORY_REQUIRED:
        return "Enter a VRAM quota for this GPU (Memory slicing).";
    case ADM_MEMORY_BELOW_REQUIRED:
        return "The VRAM quota is below the app's minimum requirement.";
    case ADM_TOTAL_VRAM_BELOW:
        return "This GPU's total VRAM is below the app's requirement. "
               "Removing apps will not help; select another GPU.";
    case ADM_DEVICE_VRAM_INSUFFICIENT:
        return "This GPU does not have enough free VRAM. Remove apps from "
               "this GPU to free up VRAM first.";
    case ADM_AGGREGATE_VRAM_INSUFFICIENT:
        return "The selected GPUs do not have enough combined VRAM. Add more "
               "GPUs or pick another node.";
    case ADM_DEVICE_MEMORY_INSUFFICIENT:
        return "The node for this GPU does not have enough memory. Pick "
               "another GPU or node.";
    case ADM_NODE_PRESSURE:
        return "Scheduling the app to this node would overload it. Retry "
               "later or pick another node.";
    default:
        return "The selection cannot be used.";
    }
}

json_t *view_pressure(struct accel_daemon *d, const struct adm_pressure *p)
{
    static const char *const names[] = {"cpu", "memory", "disk"};
    json_t *dims = json_array();
    for (int i = 0; i < 3; i++) {
        const struct adm_dim *x = &p->dims[i];
        json_array_append_new(
            dims, json_pack("{s:s, s:I, s:I, s:I, s:I, s:b}", "resource",
                            names[i], "capacity", (json_int_t)x->capacity,
                            "used", (json_int_t)x->used, "required",
                            (json_int_t)x->required, "available",
                            (json_int_t)x->available, "pressured",
                            x->pressured));
    }
    return json_pack("{s:s, s:o}", "nodeName", d->snap.nodes[p->node].name,
                     "dimensions", dims);
}

json_t *view_validation(struct accel_daemon *d, const struct adm_verdict *v)
{
    char code[2 * ACCEL_ID_MAX + 64];
    json_t *o;

    adm_verdict_format(v, code, sizeof code);
    o = json_pack("{s:b, s:s, s:s}", "ok", v->code == ADM_VALID, "code", code,
                  "reason", view_code_sentence(v->code));
    if (v->code == ADM_NODE_PRESSURE) {
        char detail[256];
        adm_pressure_format(&v->pressure, detail, sizeof detail);
        json_object_set_new(o, "detail", json_string(detail));
        json_object_set_new(o, "nodePressure", view_pressure(d, &v->pressure));
    }
    return o;
}

json_t *view_legacy_gpu(struct accel_daemon *d, int dev,
                        const struct auth_user *u)
{
    const struct adm_device *x = &d->snap.devs[dev];
    const struct dev_info *di = &d->dinfo[dev];
    enum accel_support m[3];
    size_t nm = accel_type_modes(x->type, m);
    json_t *allowed = json_array(), *apps = json_array(), *o;
    uint64_t alloc_mib = 0;

    for (size_t i = 0; i < nm; i++)
        json_array_append_new(allowed, json_string(accel_support_code(m[i])));
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        for (size_t k = 0; k < a->nrows; k++) {
            json_t *e;
            if ((int)a->rows[k].dev != dev)
                continue;
            if (view_hides(u, a))
                e = json_pack("{s:s, s:s, s:b}", "appName", "", "owner", "",
                              "hidden", 1);
            else
                e = json_pack("{s:s}", "appName", a->name);
            if (x->st == ACCEL_SUPPORT_MEMSLICE) {
                json_object_set_new(e, "memory",
                                    json_integer((json_int_t)(a->rows[k].memory / MIB)));
                alloc_mib += a->rows[k].memory / MIB;
            }
            json_array_append_new(apps, e);
        }
    }
    o = json_pack("{s:s, s:s, s:i, s:i, s:I, s:i, s:s, s:s, s:b, s:s, s:o, "
                  "s:o}",
                  "nodeName", d->snap.nodes[x->node].name, "id", x->id,
                  "index", di->index < 0 ? 0 : di->index, "count", 10,
                  "devmem", (json_int_t)(x->memory / MIB), "devcore", 100,
                  "type",
                  di->model ? di->model : accel_type_name(x->type), "mode",
                  "hami-core", "health", x->healthy && x->present,
                  "sharemode", accel_support_code(x->st), "allowedShareModes",
                  allowed, "apps", apps);
    if (x->st == ACCEL_SUPPORT_MEMSLICE) {
        uint64_t devmem = x->memory / MIB;
        json_object_set_new(o, "memoryAllocated",
                            json_integer((json_int_t)alloc_mib));
        json_object_set_new(o, "memoryAvailable",
                            json_integer((json_int_t)(alloc_mib > devmem
                                                          ? 0
                                                          : devmem - alloc_mib)));
    }
    return o;
}
