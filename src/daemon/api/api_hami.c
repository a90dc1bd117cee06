/* SPDX-License-Identifier: MIT */
/*
 * api_hami.c: the HAMi-WebUI-compatible routes of SPEC 5.4, so the HAMi
 * dashboard and `olares-cli dashboard` can read accel as they read HAMi.
 * Shapes follow what those clients read (shared/reference/hami.md B.9,
 * olares.md 5): `{"list":[…]}` / `{"items":[…]}` / a bare object, no
 * envelope, memory in MiB, cores in percent of a card. Errors keep accel's
 * error body. Read-only: nothing here changes the state.
 *
 * How accel maps onto HAMi's vocabulary:
 * - a GPU is any device that is not the synthetic `cpu` one;
 * - a "container" is one allocation row: one app on one device; its podUid
 *   is a UUID-shaped digest of owner/app, stable across restarts, and its
 *   namespace is the owner;
 * - "used" means allocated, as in HAMi: a Memory slicing quota counts its
 *   quota, an Exclusive or Time slicing binding holds the whole card (all
 *   its memory and 100 % of its cores); accel has no core quotas, so a
 *   Memory slicing binding allocates 0 cores;
 * - vgpuTotal is 1 for an Exclusive card and 10 (HAMi's default split
 *   count, also the legacy route's `count`) otherwise.
 */
#include "common/accel_setup.h"
#include "daemon/api/api_hami.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/util.h"
#include "daemon/api/auth.h"
#include "daemon/api/http.h"
#include "daemon/api/monitor.h"
#include "daemon/node/devices/hostinfo.h"
#include "daemon/node/enforce/reconcile.h"
#include "daemon/state.h"

#define MIB (1024ULL * 1024ULL)
#define SPLIT_COUNT 10 /* vgpuTotal of a shared card */

/* The GPU filters of /gpus and /summary (NULL = any). */
struct gpu_filter {
    const char *uid;      /* device id */
    bool uid_prefix;      /* uid matches a prefix of the id (deviceId) */
    const char *type;     /* the GPU's "type" string */
    const char *node;     /* node name (nodeName or nodeUid) */
    const char *provider; /* vendor, case-insensitive */
};

/* The container filters of /containers (NULL = any). */
struct ctr_filter {
    const char *name;   /* substring of the app name */
    const char *node;   /* nodeName / nodeUid */
    const char *status; /* app state */
    const char *device; /* deviceId */
};

/* ---- request parsing ---- */

/*
 * The string filters[keys[i]] into out[i] (NULL when absent, null or "").
 * The body and filters are optional. Replies 400 and returns false when
 * filters is not an object or a filter is not a string.
 */
static bool read_filters(struct http_req *r, const json_t *body,
                         const char *const *keys, const char **out, size_t n)
{
    const json_t *f = body ? json_object_get(body, "filters") : NULL;
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (f == NULL || json_is_null(f))
        return true;
    if (!json_is_object(f)) {
        http_reply_error(r, ACCEL_EINVAL, "filters must be an object");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_object_get(f, keys[i]);
        if (v == NULL || json_is_null(v))
            continue;
        if (!json_is_string(v)) {
            http_reply_error(r, ACCEL_EINVAL, "filters.%s must be a string",
                             keys[i]);
            return false;
        }
        if (json_string_length(v) > 0)
            out[i] = json_string_value(v);
    }
    return true;
}

/* A positive integer member of pageSize, or def. */
static size_t page_field(const json_t *body, const char *key, size_t def)
{
    const json_t *p = json_object_get(body, "pageSize");
    const json_t *v = json_object_get(p, key);
    if (json_is_integer(v) && json_integer_value(v) > 0 &&
        json_integer_value(v) <= 1000000)
        return (size_t)json_integer_value(v);
    return def;
}

/* ---- devices ---- */

static const char *vendor_of(enum accel_type t)
{
    switch (t) {
    case ACCEL_TYPE_NVIDIA:
    case ACCEL_TYPE_NVIDIA_GB10:
        return "NVIDIA";
    case ACCEL_TYPE_AMD:
    case ACCEL_TYPE_AMD_GPU:
        return "AMD";
    case ACCEL_TYPE_INTEL:
    case ACCEL_TYPE_INTEL_GPU:
        return "Intel";
    case ACCEL_TYPE_APPLE_M:
        return "Apple";
    case ACCEL_TYPE_MOORE_SOC:
        return "Moore Threads";
    default:
        return "CPU";
    }
}

/* The HAMi "type" of a device: its model, else its accelerator type. */
static const char *gpu_type(struct accel_daemon *d, int dev)
{
    const char *m = d->dinfo[dev].model;
    return m && *m ? m : accel_type_name(d->snap.devs[dev].type);
}

/* Does a binding on this device hold the whole card? */
static bool whole_card(const struct adm_device *x)
{
    return x->st != ACCEL_SUPPORT_MEMSLICE;
}

/* Allocated memory of a device in bytes (see the file comment). */
static uint64_t allocated_bytes(const struct adm_device *x)
{
    if (whole_card(x))
        return x->nbound > 0 ? x->memory : 0;
    return x->allocated < x->memory ? x->allocated : x->memory;
}

static bool gpu_matches(struct accel_daemon *d, int dev,
                        const struct gpu_filter *f)
{
    const struct adm_device *x = &d->snap.devs[dev];
    if (x->type == ACCEL_TYPE_CPU)
        return false;
    if (f->uid && (f->uid_prefix ? strncmp(f->uid, x->id, strlen(f->uid))
                                 : strcmp(f->uid, x->id)) != 0)
        return false;
    if (f->type && strcmp(f->type, gpu_type(d, dev)) != 0)
        return false;
    if (f->node && strcmp(f->node, d->snap.nodes[x->node].name) != 0)
        return false;
    return f->provider == NULL ||
           strcasecmp(f->provider, vendor_of(x->type)) == 0;
}

/* NVML telemetry of a GPU in HAMi's fields: 0 when unknown (the proto
 * types have no null; accel's own routes say null plus a reason). */
static void add_telemetry(json_t *o, const struct adm_device *x,
                          const struct dev_info *di)
{
    double used = (double)(di->used_mem / MIB);
    json_object_set_new(o, "coreUtilizedPercent",
                        json_integer(di->util < 0 ? 0 : di->util));
    json_object_set_new(o, "memoryUtilized", json_real(used));
    json_object_set_new(o, "memoryUtilizedPercent",
                        json_real(x->memory ? (double)di->used_mem * 100.0 /
                                                  (double)x->memory
                                            : 0.0));
    json_object_set_new(o, "power", json_real(di->power_mw < 0
                                                  ? 0.0
                                                  : di->power_mw / 1000.0));
    json_object_set_new(o, "powerLimit",
                        json_real(di->power_limit_mw < 0
                                      ? 0.0
                                      : di->power_limit_mw / 1000.0));
    json_object_set_new(o, "temperature",
                        json_integer(di->temp < 0 ? 0 : di->temp));
}

/* One GPUReply (HAMi card.proto field names). */
static json_t *gpu_json(struct accel_daemon *d, int dev)
{
    const struct adm_device *x = &d->snap.devs[dev];
    const char *node = d->snap.nodes[x->node].name;
    int core_used = whole_card(x) && x->nbound > 0 ? 100 : 0;
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:i, s:i, s:I, s:I, s:b, s:s, "
        "s:s, s:i, s:I}",
        "uuid", x->id, "nodeName", node, "nodeUid", node, "type",
        gpu_type(d, dev), "provider", vendor_of(x->type), "vgpuUsed",
        (int)x->nbound, "vgpuTotal",
        (json_int_t)(x->st == ACCEL_SUPPORT_EXCLUSIVE ? 1 : SPLIT_COUNT),
        "coreUsed", core_used, "coreTotal", 100, "memoryUsed",
        (json_int_t)(allocated_bytes(x) / MIB), "memoryTotal",
        (json_int_t)(x->memory / MIB), "health", x->healthy && x->present,
        "mode", "hami-core", "shareMode", accel_support_code(x->st), "index",
        d->dinfo[dev].index < 0 ? 0 : d->dinfo[dev].index, "memoryInUse",
        (json_int_t)(d->dinfo[dev].used_mem / MIB));
    add_telemetry(o, x, &d->dinfo[dev]);
    return o;
}

/* The matching GPUs as a new array. Caller holds d->lock. */
static json_t *gpu_list(struct accel_daemon *d, const struct gpu_filter *f)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < d->snap.ndevs; i++)
        if (gpu_matches(d, (int)i, f))
            json_array_append_new(arr, gpu_json(d, (int)i));
    return arr;
}

void api_hami_gpus(struct http_req *r)
{
    static const char *const keys[] = {"uid", "type", "nodeName", "provider"};
    const char *v[4];
    struct gpu_filter f;
    json_t *b = http_body_json(r), *arr;
    if (b == NULL)
        return;
    if (read_filters(r, b, keys, v, 4)) {
        f = (struct gpu_filter){v[0], false, v[1], v[2], v[3]};
        pthread_mutex_lock(&r->d->lock);
        arr = gpu_list(r->d, &f);
        pthread_mutex_unlock(&r->d->lock);
        http_reply_raw(r, 200, json_pack("{s:o}", "list", arr));
    }
    json_decref(b);
}

void api_hami_gpu(struct http_req *r)
{
    const char *uid = http_query(r, "uid");
    struct gpu_filter f = {0};
    json_t *arr;
    if (uid == NULL || *uid == '\0')
        uid = http_query(r, "uuid");
    if (uid == NULL || *uid == '\0') {
        http_reply_error(r, ACCEL_EINVAL, "uid is required (the GPU's UUID)");
        return;
    }
    f.uid = uid;
    pthread_mutex_lock(&r->d->lock);
    arr = gpu_list(r->d, &f);
    pthread_mutex_unlock(&r->d->lock);
    /* HAMi answers an unknown GPU with 200 and an empty object */
    http_reply_raw(r, 200, json_array_size(arr) == 0
                               ? json_object()
                               : json_incref(json_array_get(arr, 0)));
    json_decref(arr);
}

/* POST …/gpu-types (card.proto GetAllGPUTypes): one GPUReply per GPU type
 * of the cluster, first seen first, only its type filled (the rest zero,
 * as upstream's answer through protojson); filters.provider narrows it. */
void api_hami_gpu_types(struct http_req *r)
{
    static const char *const keys[] = {"uid", "type", "nodeName", "provider"};
    const char *v[4];
    struct gpu_filter f;
    json_t *b = http_body_json(r), *gpus, *out, *g;
    size_t i;
    if (b == NULL)
        return;
    if (read_filters(r, b, keys, v, 4)) {
        f = (struct gpu_filter){NULL, false, NULL, NULL, v[3]};
        pthread_mutex_lock(&r->d->lock);
        gpus = gpu_list(r->d, &f);
        pthread_mutex_unlock(&r->d->lock);
        out = json_array();
        json_array_foreach(gpus, i, g) {
            const char *t = json_string_value(json_object_get(g, "type"));
            size_t j;
            const json_t *seen;
            bool dup = false;
            json_array_foreach(out, j, seen) dup = dup || strcmp(t,
                json_string_value(json_object_get(seen, "type"))) == 0;
            if (!dup)
                json_array_append_new(out, json_pack(
                    "{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:b, "
                    "s:s}", "uuid", "", "nodeName", "", "type", t, "vgpuUsed",
                    0, "vgpuTotal", 0, "coreUsed", 0, "coreTotal", 0,
                    "memoryUsed", 0, "memoryTotal", 0, "nodeUid", "",
                    "health", 0, "mode", ""));
        }
        json_decref(gpus);
        http_reply_raw(r, 200, json_pack("{s:o}", "list", out));
    }
    json_decref(b);
}

/* ---- containers ---- */

static bool sees(const struct http_req *r, const struct app *a)
{
    return r->user.admin || strcmp(a->owner, r->user.name) == 0 ||
           strcmp(a->owner, ACCEL_SHARED_OWNER) == 0;
}

/* A UUID-shaped, stable id of the app's workload: digest of owner/name. */
static void pod_uid(const struct app *a, char out[37])
{
    char *key = xasprintf("%s/%s", a->owner, a->name);
    char hex[65];
    auth_hash(key, hex);
    free(key);
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12,
             hex + 16, hex + 20);
}

/* RFC 3339 UTC time of ms since the epoch, "" for 0. */
static void iso_time(int64_t ms, char out[32])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    out[0] = '\0';
    if (ms > 0 && gmtime_r(&t, &tm) != NULL)
        strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* An app's state in HAMi-WebUI's container words: success = running,
 * failed, closed = stopped (or not started), unknown = in between. */
static const char *hami_status(enum app_state s)
{
    switch (s) {
    case APP_RUNNING:
        return "success";
    case APP_FAILED:
        return "failed";
    case APP_STOPPED:
    case APP_INSTALLED:
        return "closed";
    default:
        return "unknown";
    }
}

/* The per-device arrays of a container, one entry per allocation row. */
struct ctr_devs {
    json_t *ids, *modes, *mem, *core;
    int64_t cores;  /* allocated cores, percent of a card, summed */
    uint64_t bytes; /* allocated memory, summed */
};

static void ctr_devs_fill(struct accel_daemon *d, const struct app *a,
                          struct ctr_devs *c)
{
    c->ids = json_array();
    c->modes = json_array();
    c->mem = json_array();
    c->core = json_array();
    c->cores = 0;
    c->bytes = 0;
    for (size_t k = 0; k < a->nrows; k++) {
        int dev = (int)a->rows[k].dev;
        const struct adm_device *x = &d->snap.devs[dev];
        const struct dev_info *di = &d->dinfo[dev];
        uint64_t live = a->row_usage ? a->row_usage[k] : 0;
        json_array_append_new(c->ids, json_string(x->id));
        json_array_append_new(c->modes,
                              json_string(accel_support_code(x->st)));
        /* live use on the device (the shim's ledger), MiB */
        json_array_append_new(c->mem, json_real((double)(live / MIB)));
        /* NVML has no per-process utilization here: the card's */
        json_array_append_new(c->core,
                              json_real(di->util < 0 ? 0.0 : di->util));
        c->cores += whole_card(x) ? 100 : 0;
        c->bytes += whole_card(x) ? x->memory : a->rows[k].memory;
    }
}

/* The vendor of the app's first device ("NVIDIA"), HAMi's container type. */
static const char *ctr_type(struct accel_daemon *d, const struct app *a)
{
    if (a->nrows == 0)
        return "";
    return vendor_of(d->snap.devs[a->rows[0].dev].type);
}

/* One ContainerReply for app a (HAMi container.proto, every field). */
static json_t *container_json(struct accel_daemon *d, const struct app *a)
{
    const char *node = a->nrows
        ? d->snap.nodes[d->snap.devs[a->rows[0].dev].node].name : "";
    char uid[37], created[32], started[32];
    struct ctr_devs c;
    pod_uid(a, uid);
    iso_time(a->created_ms, created);
    iso_time(a->state == APP_RUNNING ? a->updated_ms : 0, started);
    ctr_devs_fill(d, a, &c);
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:s, s:s, s:s, s:s, s:s, "
        "s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:[], s:s}",
        "name", a->name, "status", hami_status(a->state), "appName", a->name,
        "nodeName", node, "nodeUid", node, "allocatedDevices", (int)a->nrows,
        "allocatedCores", (json_int_t)c.cores, "allocatedMem",
        (json_int_t)(c.bytes / MIB), "type", ctr_type(d, a), "createTime",
        created, "startTime", started, "endTime", "", "podUid", uid,
        "resourcePool", "", "flavor", "", "priority", "", "namespace",
        a->owner, "owner", a->owner, "deviceIds", c.ids, "deviceShareModes",
        c.modes, "devicesMemUtilized", c.mem, "devicesCoreUtilizedPercent",
        c.core, "images", "state", state_app_shown(d, a));
}

static bool ctr_matches(struct accel_daemon *d, const struct app *a,
                        const struct ctr_filter *f)
{
    bool dev_ok = f->device == NULL, node_ok = f->node == NULL;
    if (a->nrows == 0)
        return false;
    if (f->name && strstr(a->name, f->name) == NULL)
        return false;
    if (f->status && strcmp(f->status, hami_status(a->state)) != 0 &&
        strcmp(f->status, app_state_name(a->state)) != 0)
        return false;
    for (size_t k = 0; k < a->nrows; k++) {
        const struct adm_device *x = &d->snap.devs[a->rows[k].dev];
        /* HAMi matches deviceId as a prefix of the device's UUID */
        dev_ok = dev_ok ||
                 strncmp(x->id, f->device, strlen(f->device)) == 0;
        node_ok = node_ok ||
                  strcmp(f->node, d->snap.nodes[x->node].name) == 0;
    }
    return dev_ok && node_ok;
}

/* The caller's matching containers, one per app holding a device. Caller
 * holds d->lock. */
static json_t *container_list(struct http_req *r, const struct ctr_filter *f)
{
    struct accel_daemon *d = r->d;
    json_t *arr = json_array();
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        if (sees(r, a) && ctr_matches(d, a, f))
            json_array_append_new(arr, container_json(d, a));
    }
    return arr;
}

/* Items pageNo (from 1) of pageSize; all when no pageSize is given. */
static json_t *page_of(json_t *all, const json_t *body)
{
    size_t size = page_field(body, "pageSize", 0);
    size_t no = page_field(body, "pageNo", 1);
    json_t *out;
    if (size == 0)
        return all;
    out = json_array();
    for (size_t i = (no - 1) * size; i < json_array_size(all) &&
                                     i < no * size; i++)
        json_array_append(out, json_array_get(all, i));
    json_decref(all);
    return out;
}

void api_hami_containers(struct http_req *r)
{
    static const char *const keys[] = {"name", "nodeName", "status",
                                       "deviceId", "nodeUid"};
    const char *v[5];
    struct ctr_filter f;
    json_t *b = http_body_json(r), *arr;
    if (b == NULL)
        return;
    if (read_filters(r, b, keys, v, 5)) {
        f = (struct ctr_filter){v[0], v[1] ? v[1] : v[4], v[2], v[3]};
        pthread_mutex_lock(&r->d->lock);
        arr = container_list(r, &f);
        pthread_mutex_unlock(&r->d->lock);
        http_reply_raw(r, 200, json_pack("{s:o}", "items", page_of(arr, b)));
    }
    json_decref(b);
}

/* The visible container named name (with that podUid and device, when
 * given), or NULL. */
static json_t *find_container(struct http_req *r, const char *name,
                              const char *uid, const char *device)
{
    struct accel_daemon *d = r->d;
    const struct app *a = state_app_find(d, name);
    struct ctr_filter f = {.device = device && *device ? device : NULL};
    char have[37];
    if (a == NULL || !sees(r, a) || !ctr_matches(d, a, &f))
        return NULL;
    pod_uid(a, have);
    if (uid && *uid && strcmp(uid, have) != 0)
        return NULL;
    return container_json(d, a);
}

void api_hami_container(struct http_req *r)
{
    const char *name = http_query(r, "name");
    json_t *c;
    if (name == NULL || *name == '\0') {
        http_reply_error(r, ACCEL_EINVAL, "name is required");
        return;
    }
    pthread_mutex_lock(&r->d->lock);
    c = find_container(r, name, http_query(r, "podUid"),
                       http_query(r, "deviceId"));
    pthread_mutex_unlock(&r->d->lock);
    /* HAMi answers an unknown container with 200 and an empty object */
    http_reply_raw(r, 200, c ? c : json_object());
}

/* ---- summary ---- */

/* Sum the integer member key over the GPUs. */
static json_int_t sum_of(const json_t *gpus, const char *key)
{
    json_int_t s = 0;
    size_t i;
    const json_t *g;
    json_array_foreach(gpus, i, g) s += json_integer_value(json_object_get(g, key));
    return s;
}

static size_t node_count(const json_t *gpus)
{
    size_t n = 0, i, j;
    const json_t *g;
    json_array_foreach(gpus, i, g) {
        const char *node = json_string_value(json_object_get(g, "nodeName"));
        for (j = 0; j < i; j++)
            if (strcmp(node, json_string_value(json_object_get(
                                 json_array_get(gpus, j), "nodeName"))) == 0)
                break;
        n += j == i;
    }
    return n;
}

static json_t *summary_of(const json_t *gpus)
{
    static const char *const keys[] = {"vgpuUsed",   "vgpuTotal",
                                       "coreUsed",   "coreTotal",
                                       "memoryUsed", "memoryTotal"};
    json_t *o = json_object();
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        json_object_set_new(o, keys[k], json_integer(sum_of(gpus, keys[k])));
    json_object_set_new(o, "gpuCount",
                        json_integer((json_int_t)json_array_size(gpus)));
    json_object_set_new(o, "nodeCount",
                        json_integer((json_int_t)node_count(gpus)));
    return o;
}

void api_hami_summary(struct http_req *r)
{
    static const char *const keys[] = {"type", "nodeUid", "deviceId",
                                       "nodeName"};
    const char *v[4];
    struct gpu_filter f;
    json_t *b = http_body_json(r), *gpus;
    if (b == NULL)
        return;
    if (read_filters(r, b, keys, v, 4)) {
        f = (struct gpu_filter){v[2], true, v[0], v[1] ? v[1] : v[3], NULL};
        pthread_mutex_lock(&r->d->lock);
        gpus = gpu_list(r->d, &f);
        pthread_mutex_unlock(&r->d->lock);
        http_reply_raw(r, 200, summary_of(gpus));
        json_decref(gpus);
    }
    json_decref(b);
}

/* allocated / total in percent, 0 without a total. */
static double rate_of(const json_t *gpus, const char *used, const char *total)
{
    json_int_t t = sum_of(gpus, total);
    return t > 0 ? (double)sum_of(gpus, used) * 100.0 / (double)t : 0.0;
}

/* POST …/monitor/summary {node?, device?} (monitor.proto Summary): the
 * share of vGPUs, memory and cores allocated on the matching GPUs, in
 * percent, and their scaling (accel oversubscribes nothing: 1). */
void api_hami_monitor_summary(struct http_req *r)
{
    static const char *const keys[] = {"node", "device"};
    const char *v[2] = {NULL, NULL};
    struct gpu_filter f = {0};
    json_t *b = http_body_json(r), *gpus;
    if (b == NULL)
        return;
    for (size_t i = 0; i < 2; i++) {
        const json_t *x = json_object_get(b, keys[i]);
        if (x != NULL && !json_is_null(x) && !json_is_string(x)) {
            http_reply_error(r, ACCEL_EINVAL, "%s must be a string", keys[i]);
            json_decref(b);
            return;
        }
        if (json_string_length(x) > 0)
            v[i] = json_string_value(x);
    }
    f.node = v[0];
    f.uid = v[1];
    pthread_mutex_lock(&r->d->lock);
    gpus = gpu_list(r->d, &f);
    pthread_mutex_unlock(&r->d->lock);
    http_reply_raw(r, 200, json_pack(
        "{s:{s:f, s:f, s:f}, s:{s:f, s:f, s:f}}", "distributionRate", "vgpu",
        rate_of(gpus, "vgpuUsed", "vgpuTotal"), "memory",
        rate_of(gpus, "memoryUsed", "memoryTotal"), "core",
        rate_of(gpus, "coreUsed", "coreTotal"), "scaling", "vgpu", 1.0,
        "memory", 1.0, "core", 1.0));
    json_decref(gpus);
    json_decref(b);
}

/* ---- nodes ---- */

/* The machine of node n: this one's read here, another's as its agent
 * registered it; NULL when unknown (a node only declared). */
static json_t *node_host(struct accel_daemon *d, uint32_t n)
{
    json_t *host;
    if (!d->ninfo[n].local)
        return d->ninfo[n].host ? json_incref(d->ninfo[n].host) : NULL;
    host = hostinfo_json(d->cfg.listen, NULL);
    json_object_set_new(host, "registered", json_integer(d->registered_ms));
    return host;
}

static const char *host_field(const json_t *host, const char *k)
{
    const char *v = json_string_value(json_object_get(host, k));
    return v ? v : "";
}

/* One NodeReply (HAMi node.proto, every field) for node n: its GPUs'
 * figures summed; what the node knows of its machine (architecture,
 * kernel, OS, the address it listens on, its first registration); what
 * only Kubernetes has (kubelet, kube-proxy, container runtime) is "" (the
 * proto has no null). Caller holds d->lock. */
static json_t *node_json(struct accel_daemon *d, uint32_t n)
{
    const struct adm_node *nd = &d->snap.nodes[n];
    struct gpu_filter f = {.node = nd->name};
    json_t *gpus = gpu_list(d, &f), *types = json_array(), *o, *host;
    size_t i;
    const json_t *g;
    bool healthy = false;
    char created[32];
    json_array_foreach(gpus, i, g) {
        const json_t *t = json_object_get(g, "type");
        size_t j;
        const json_t *seen;
        bool dup = false;
        json_array_foreach(types, j, seen) dup = dup || json_equal(seen, t);
        if (!dup)
            json_array_append(types, (json_t *)t);
        healthy = healthy || json_is_true(json_object_get(g, "health"));
    }
    host = node_host(d, n);
    iso_time(json_integer_value(json_object_get(host, "registered")),
             created);
    o = summary_of(gpus);
    json_object_del(o, "gpuCount");
    json_object_del(o, "nodeCount");
    json_object_update_new(o, json_pack(
        "{s:s, s:b, s:b, s:o, s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:s, "
        "s:s, s:s, s:s}",
        "ip", host_field(host, "ip"), "isSchedulable", nd->enabled,
        "isReady", healthy || json_array_size(gpus) == 0, "type", types,
        "uid", nd->name, "name", nd->name, "cardCnt",
        (json_int_t)json_array_size(gpus), "osImage",
        host_field(host, "osImage"), "operatingSystem",
        host_field(host, "os"), "kernelVersion", host_field(host, "kernel"),
        "containerRuntimeVersion", "", "kubeletVersion", "",
        "kubeProxyVersion", "", "architecture", host_field(host, "arch"),
        "creationTimestamp", created));
    json_decref(host);
    json_decref(gpus);
    return o;
}

/* Nodes holding at least one GPU, filtered by type (a GPU type of the
 * node) and isSchedulable ("true"/"false"). Caller holds d->lock. */
static json_t *node_list(struct accel_daemon *d, const char *type,
                         const char *sched, const char *uid, const char *ip)
{
    json_t *arr = json_array();
    for (uint32_t n = 0; n < d->snap.nnodes; n++) {
        json_t *o;
        if (d->ninfo[n].removed)
            continue;
        o = node_json(d, n);
        const json_t *types = json_object_get(o, "type");
        bool keep = json_integer_value(json_object_get(o, "cardCnt")) > 0;
        size_t j;
        const json_t *t;
        bool type_ok = type == NULL;
        json_array_foreach(types, j, t)
            type_ok = type_ok || strcmp(json_string_value(t), type) == 0;
        keep = keep && type_ok &&
               (uid == NULL || strcmp(uid, d->snap.nodes[n].name) == 0) &&
               (ip == NULL || strcmp(ip, json_string_value(json_object_get(
                                             o, "ip"))) == 0) &&
               (sched == NULL ||
                strcmp(sched, json_is_true(json_object_get(
                                  o, "isSchedulable")) ? "true" : "false") == 0);
        if (keep)
            json_array_append_new(arr, o);
        else
            json_decref(o);
    }
    return arr;
}

void api_hami_nodes(struct http_req *r)
{
    static const char *const keys[] = {"ip", "type", "isSchedulable"};
    const char *v[3];
    json_t *b = http_body_json(r), *arr;
    if (b == NULL)
        return;
    if (read_filters(r, b, keys, v, 3)) {
        pthread_mutex_lock(&r->d->lock);
        arr = node_list(r->d, v[1], v[2], NULL, v[0]);
        pthread_mutex_unlock(&r->d->lock);
        http_reply_raw(r, 200, json_pack("{s:o}", "list", arr));
    }
    json_decref(b);
}

void api_hami_node(struct http_req *r)
{
    const char *uid = http_query(r, "uid");
    json_t *arr;
    if (uid == NULL || *uid == '\0') {
        http_reply_error(r, ACCEL_EINVAL, "uid is required (the node's name)");
        return;
    }
    pthread_mutex_lock(&r->d->lock);
    arr = node_list(r->d, NULL, NULL, uid, NULL);
    pthread_mutex_unlock(&r->d->lock);
    http_reply_raw(r, 200, json_array_size(arr) == 0
                               ? json_object()
                               : json_incref(json_array_get(arr, 0)));
    json_decref(arr);
}

/* ---- the facts of the monitor metrics (monitor.h) ---- */

/* HAMi's device_no: nvidia<NVML index>, else <type><position on node>. */
static void device_no(struct accel_daemon *d, size_t i, char out[48])
{
    const struct adm_device *x = &d->snap.devs[i];
    int idx = d->dinfo[i].index;
    if (idx < 0)
        idx = (int)(i - d->snap.nodes[x->node].first_dev);
    if (strcmp(vendor_of(x->type), "NVIDIA") == 0)
        snprintf(out, 48, "nvidia%d", idx);
    else
        snprintf(out, 48, "%s%d", accel_type_name(x->type), idx);
}

static void fact_devices(struct accel_daemon *d, struct monitor_facts *f)
{
    for (size_t i = 0; i < d->snap.ndevs; i++) {
        const struct adm_device *x = &d->snap.devs[i];
        const char *node = d->snap.nodes[x->node].name, *type;
        const char *drv = "";
        char no[48];
        if (x->type == ACCEL_TYPE_CPU || d->ninfo[x->node].removed)
            continue;
        type = gpu_type(d, (int)i);
        if (d->ninfo[x->node].local &&
            strcmp(vendor_of(x->type), "NVIDIA") == 0)
            drv = reconcile_driver(d);
        device_no(d, i, no);
        const char *kv[] = {"deviceuuid", x->id, "device_uuid", x->id,
                            "node", node, "instance", MONITOR_INSTANCE,
                            "provider", vendor_of(x->type), "devicetype", type,
                            "device_type", type, "device_no", no,
                            "driver_version", drv ? drv : ""};
        size_t n = sizeof kv / sizeof kv[0] / 2;
        monitor_fact_add(f, MF_CORE_SIZE, kv, n, 100, 0);
        monitor_fact_add(f, MF_MEMORY_SIZE, kv, n,
                         (double)(x->memory / MIB), 0);
        monitor_fact_add(f, MF_VGPU_COUNT, kv, n,
                         x->st == ACCEL_SUPPORT_EXCLUSIVE ? 1 : SPLIT_COUNT,
                         0);
    }
}

static bool fact_sees(const struct app *a, const char *user, bool admin)
{
    return admin || strcmp(a->owner, user) == 0 ||
           strcmp(a->owner, ACCEL_SHARED_OWNER) == 0;
}

/* One series per allocation row: container_pod_uuid is "<container>:<pod
 * uid>" as HAMi-WebUI's exporter writes it. A range has no point of it
 * before the app was installed. */
static void fact_rows(struct accel_daemon *d, const struct app *a,
                      struct monitor_facts *f)
{
    int64_t since = a->created_ms / 1000;
    char uid[37], *cpu;
    pod_uid(a, uid);
    cpu = xasprintf("%s:%s", a->name, uid);
    for (size_t k = 0; k < a->nrows; k++) {
        const struct adm_device *x = &d->snap.devs[a->rows[k].dev];
        const char *node = d->snap.nodes[x->node].name;
        const char *kv[] = {"container_name", a->name, "pod_name", a->name,
                            "namespace_name", a->owner,
                            "container_pod_uuid", cpu, "deviceuuid", x->id,
                            "device_uuid", x->id, "node", node,
                            "instance", MONITOR_INSTANCE, "provider", vendor_of(x->type),
                            "device_type", gpu_type(d, (int)a->rows[k].dev)};
        size_t n = sizeof kv / sizeof kv[0] / 2;
        if (x->type == ACCEL_TYPE_CPU)
            continue;
        monitor_fact_add(f, MF_C_VGPU, kv, n, 1, since);
        monitor_fact_add(f, MF_C_VCORE, kv, n, whole_card(x) ? 100 : 0,
                         since);
        monitor_fact_add(f, MF_C_VMEMORY, kv, n,
                         (double)((whole_card(x) ? x->memory
                                                 : a->rows[k].memory) / MIB),
                         since);
    }
    free(cpu);
}

/* kube-state-metrics' limits of the app's selected requirement: cpu in
 * cores, memory in bytes, where the manifest sets them. */
static void fact_limits(struct accel_daemon *d, const struct app *a,
                        struct monitor_facts *f)
{
    const struct adm_req *q;
    const char *node = a->nrows
        ? d->snap.nodes[d->snap.devs[a->rows[0].dev].node].name : "";
    char uid[37];
    if (a->sel < 0 || (size_t)a->sel >= a->m.nreq)
        return;
    q = &a->m.req[a->sel];
    pod_uid(a, uid);
    for (int r = 0; r < 2; r++) {
        double v = r == 0 ? (double)q->lim_cpu / 1000.0 : (double)q->lim_mem;
        const char *kv[] = {"namespace", a->owner, "pod", a->name,
                            "container", a->name, "uid", uid, "node", node,
                            "resource", r == 0 ? "cpu" : "memory",
                            "unit", r == 0 ? "core" : "byte"};
        if (v > 0)
            monitor_fact_add(f, MF_POD_LIMITS, kv, sizeof kv / sizeof kv[0] / 2,
                             v, a->created_ms / 1000);
    }
}

static void fact_nodes(struct accel_daemon *d, struct monitor_facts *f)
{
    for (size_t n = 0; n < d->snap.nnodes; n++) {
        const struct adm_node *nd = &d->snap.nodes[n];
        const char *cpu[] = {"node", nd->name, "resource", "cpu", "unit",
                             "core"};
        const char *mem[] = {"node", nd->name, "resource", "memory", "unit",
                             "byte"};
        if (d->ninfo[n].removed)
            continue;
        if (nd->cpu.total > 0)
            monitor_fact_add(f, MF_NODE_ALLOCATABLE, cpu, 3,
                             (double)nd->cpu.total / 1000.0, 0);
        if (nd->mem.total > 0)
            monitor_fact_add(f, MF_NODE_ALLOCATABLE, mem, 3,
                             (double)nd->mem.total, 0);
    }
}

void api_hami_facts(struct accel_daemon *d, const char *user, bool admin,
                    struct monitor_facts *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&d->lock);
    fact_devices(d, out);
    fact_nodes(d, out);
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        if (!fact_sees(a, user, admin))
            continue;
        fact_rows(d, a, out);
        fact_limits(d, a, out);
    }
    pthread_mutex_unlock(&d->lock);
}
