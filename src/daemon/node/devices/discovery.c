/* SPDX-License-Identifier: MIT */
/*
 * discovery.c: the nodes and devices acceld starts with: those the
 * inventory declares, or the local machine (memory, load, disk of the data
 * directory) with the GPUs NVML finds, or a CPU device when it finds none;
 * and a later NVML scan that adds GPUs found since (discovery.h).
 */
#include "common/accel_setup.h"
#include "daemon/node/devices/discovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/strmap.h"
#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/devices/drm.h"
#include "daemon/node/devices/nvml.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/state.h"

void discovery_add_node(struct accel_daemon *d, const char *name, bool local,
                     uint64_t mem_total, uint64_t mem_used,
                     uint64_t cpu_total, uint64_t cpu_used, uint64_t disk_total,
                     uint64_t disk_used)
{
    size_t i = d->snap.nnodes++;
    d->snap.nodes = xrealloc(d->snap.nodes, d->snap.nnodes * sizeof(struct adm_node));
    d->ninfo = xrealloc(d->ninfo, d->snap.nnodes * sizeof(struct node_info));
    d->snap.nodes[i] = (struct adm_node){.mem = {mem_total, mem_used},
                                         .cpu = {cpu_total, cpu_used},
                                         .disk = {disk_total, disk_used},
                                         .enabled = true};
    d->ninfo[i] = (struct node_info){.name = xstrdup(name),
                                     .local = local,
                                     .reachable = true};
    d->snap.nodes[i].name = d->ninfo[i].name;
    d->snap.nodes[i].first_dev = (uint32_t)d->snap.ndevs;
    strmap_put(d->node_index, name, (uint32_t)i);
}

void discovery_add_device(struct accel_daemon *d, const char *id,
                       enum accel_type type, const char *model, uint64_t memory,
                       enum accel_support st, bool healthy, int index)
{
    size_t i = d->snap.ndevs++;
    uint32_t node = (uint32_t)(d->snap.nnodes - 1);
    d->snap.devs = xrealloc(d->snap.devs, d->snap.ndevs * sizeof(struct adm_device));
    d->dinfo = xrealloc(d->dinfo, d->snap.ndevs * sizeof(struct dev_info));
    bool nv = d->ninfo[node].local && (type == ACCEL_TYPE_NVIDIA ||
                                       type == ACCEL_TYPE_NVIDIA_GB10);
    uint8_t na = nv ? NVML_NA_NOT_SEEN : NVML_NA_NOT_NVML;
    d->dinfo[i] = (struct dev_info){.id = xstrdup(id),
                                    .model = model ? xstrdup(model) : NULL,
                                    .index = index,
                                    .util = -1,
                                    .power_mw = -1,
                                    .power_limit_mw = -1,
                                    .temp = -1,
                                    .util_na = na,
                                    .power_na = na,
                                    .limit_na = na,
                                    .temp_na = na,
                                    .reported_healthy = healthy};
    d->snap.devs[i] = (struct adm_device){.id = d->dinfo[i].id,
                                          .node = node,
                                          .type = type,
                                          .st = st,
                                          .healthy = healthy,
                                          .present = true,
                                          .memory = memory};
    d->snap.nodes[node].ndev++;
    strmap_put(d->dev_index, id, (uint32_t)i);
}

void discovery_insert_device(struct accel_daemon *d, uint32_t node,
                             const char *id, enum accel_type type,
                             const char *model, uint64_t memory,
                             enum accel_support st, bool healthy, int index)
{
    uint32_t at = d->snap.nodes[node].first_dev + d->snap.nodes[node].ndev;
    size_t last = d->snap.ndevs;
    struct adm_device moved;
    struct dev_info moved_info;

    /* append, then rotate the new last entry down into place: the devices
     * from `at` on move one up, and every index that names them follows */
    discovery_add_device(d, id, type, model, memory, st, healthy, index);
    moved = d->snap.devs[last];
    moved_info = d->dinfo[last];
    d->snap.nodes[d->snap.nnodes - 1].ndev--; /* add_device counted it there */
    memmove(&d->snap.devs[at + 1], &d->snap.devs[at],
            (last - at) * sizeof(*d->snap.devs));
    memmove(&d->dinfo[at + 1], &d->dinfo[at], (last - at) * sizeof(*d->dinfo));
    moved.node = node;
    d->snap.devs[at] = moved;
    d->dinfo[at] = moved_info;
    d->snap.nodes[node].ndev++;
    for (size_t k = node + 1; k < d->snap.nnodes; k++)
        d->snap.nodes[k].first_dev++; /* nodes' devices follow node order */
    for (size_t i = at; i <= last; i++)
        strmap_put(d->dev_index, d->dinfo[i].id, (uint32_t)i);
    for (size_t i = 0; i < d->napps; i++)
        for (size_t k = 0; k < d->apps[i]->nrows; k++)
            if (d->apps[i]->rows[k].dev >= at)
                d->apps[i]->rows[k].dev++;
}

static enum accel_support default_mode(enum accel_type t)
{
    enum accel_support m[3];
    accel_type_modes(t, m);
    return m[0];
}

static void add_cpu_fallback(struct accel_daemon *d, const char *node,
                             uint64_t ram)
{
    char *id = xasprintf("%s-cpu-0", node);
    discovery_add_device(d, id, ACCEL_TYPE_CPU, "CPU", ram / 4 * 3, ACCEL_SUPPORT_MEMSLICE,
               true, -1);
    d->dinfo[d->snap.ndevs - 1].mem_source =
        xstrdup("75% of node RAM (the CPU fallback)");
    free(id);
}

void discovery_inventory(struct accel_daemon *d,
                         const struct inventory *inv)
{
    for (size_t i = 0; i < inv->nnodes; i++) {
        const struct inv_node *n = &inv->nodes[i];
        bool local = strcmp(n->name, d->cfg.node_name) == 0;
        if (d->cfg.etcd && !local)
            continue; /* in a cluster, a node is declared by its own agent */
        discovery_add_node(d, n->name, local, n->mem_total, n->mem_used,
                 n->cpu_total, n->cpu_used, n->disk_total, n->disk_used);
        for (size_t k = 0; k < n->ndevs; k++) {
            const struct inv_device *x = &n->devs[k];
            uint64_t mem = x->memory ? x->memory : n->mem_total / 4 * 3;
            discovery_add_device(d, x->id, x->type, x->model, mem,
                       x->has_support ? x->st : default_mode(x->type),
                       x->healthy, x->index);
        }
        if (n->ndevs == 0)
            add_cpu_fallback(d, n->name, n->mem_total);
    }
}

static const char *sysfs_root(const struct accel_daemon *d)
{
    return d->cfg.sysfs_root ? d->cfg.sysfs_root : "/sys";
}

static const char *proc_root(const struct accel_daemon *d)
{
    return d->cfg.proc_root ? d->cfg.proc_root : "/proc";
}

static void read_meminfo(const char *proc, uint64_t *total, uint64_t *used)
{
    char path[4096], line[256];
    unsigned long long t = 0, avail = 0, v;
    FILE *f;
    *total = *used = 0;
    snprintf(path, sizeof path, "%.4000s/meminfo", proc);
    f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &v) == 1)
            t = v * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
            avail = v * 1024;
    }
    fclose(f);
    *total = t;
    *used = t > avail ? t - avail : 0;
}

static void read_load(const char *proc, uint64_t *total, uint64_t *used)
{
    double l = 0;
    char *path = xasprintf("%s/loadavg", proc);
    FILE *f = fopen(path, "r");

    free(path);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *total = (uint64_t)(n > 0 ? n : 1) * 1000;
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = 0;
        fclose(f);
    }
    *used = (uint64_t)(l * 1000);
    if (*used > *total)
        *used = *total;
}

/* An NVML GPU's type: a GB10 (by name, or because NVML reports no memory
 * of its own, as on unified-memory parts) is nvidia-gb10. */
static enum accel_type nvml_type(const struct nvml_gpu *g)
{
    if (g->memory_unified || strstr(g->name, "GB10") != NULL)
        return ACCEL_TYPE_NVIDIA_GB10;
    return ACCEL_TYPE_NVIDIA;
}

/* Its memory (SPEC 1: a unified-memory type has 3/4 of node RAM) and the
 * sentence that says where that figure came from (malloc'd). */
static uint64_t nvml_memory(const struct nvml_gpu *g, uint64_t ram,
                            char **source)
{
    if (nvml_type(g) == ACCEL_TYPE_NVIDIA) {
        *source = xstrdup("NVML nvmlDeviceGetMemoryInfo");
        return g->memory_total;
    }
    *source = xstrdup(g->memory_unified
                          ? "75% of node RAM (unified memory: NVML answers "
                            "NOT_SUPPORTED for the memory query)"
                          : "75% of node RAM (unified memory; NVML's figure "
                            "is the shared system RAM)");
    return ram / 4 * 3;
}

/* Append one NVML GPU to the last node (the local one). */
static void add_nvml_gpu(struct accel_daemon *d, const struct nvml_gpu *g,
                         uint64_t ram)
{
    char *source = NULL;
    enum accel_type t = nvml_type(g);
    uint64_t mem = nvml_memory(g, ram, &source);
    discovery_add_device(d, g->uuid, t, g->name, mem, default_mode(t),
                         g->healthy == 1, (int)g->index);
    d->dinfo[d->snap.ndevs - 1].mem_source = source;
    d->dinfo[d->snap.ndevs - 1].pci = g->pci[0] ? xstrdup(g->pci) : NULL;
}

static uint8_t drm_na_code(enum drm_na na)
{
    return (uint8_t)(na == DRM_NA_NONE     ? NVML_NA_NONE
                     : na == DRM_NA_ABSENT ? NVML_NA_SYSFS_ABSENT
                                           : NVML_NA_SYSFS_BAD);
}

void discovery_drm_readings(struct dev_info *di, const struct drm_gpu *g)
{
    di->used_mem = g->used == DRM_UNKNOWN ? 0 : g->used;
    free(di->used_source);
    di->used_source = g->used_source[0] ? xstrdup(g->used_source) : NULL;
    di->util = g->util;
    di->power_mw = g->power_mw;
    di->power_limit_mw = g->power_limit_mw;
    di->temp = g->temp;
    di->util_na = drm_na_code(g->util_na);
    di->power_na = drm_na_code(g->power_na);
    di->limit_na = drm_na_code(g->limit_na);
    di->temp_na = drm_na_code(g->temp_na);
}

/* The AMD and Intel devices of the DRM sysfs, onto the last node; ids
 * <node>-<type>-<k> in card order (discovery_drm_ids). */
static void add_drm_devices(struct accel_daemon *d, uint64_t ram)
{
    struct drm_gpu *g = NULL;
    struct drm_client *c = NULL;
    size_t n = 0, nc = 0;
    int amd = 0;
    char **ids;

    if (drm_scan(sysfs_root(d), ram, &g, &n) != ACCEL_OK || n == 0)
        return;
    drm_clients(proc_root(d), g, n, &c, &nc);
    ids = discovery_drm_ids(d->cfg.node_name, g, n);
    for (size_t i = 0; i < n; i++) {
        struct dev_info *di;
        /* an AMD device's index: its place among the AMD cards in card
         * order, the HIP ordinal of HIP_VISIBLE_DEVICES (runtime.c) */
        int index = g[i].vendor == DRM_VENDOR_AMD ? amd++ : -1;
        discovery_add_device(d, ids[i], g[i].type, g[i].name, g[i].memory,
                             default_mode(g[i].type), g[i].healthy == 1,
                             index);
        di = &d->dinfo[d->snap.ndevs - 1];
        di->drm = true;
        di->mem_source = xstrdup(g[i].mem_source);
        di->pci = g[i].pci[0] ? xstrdup(g[i].pci) : NULL;
        di->render = g[i].render[0] ? xstrdup(g[i].render) : NULL;
        discovery_drm_readings(di, &g[i]);
        log_info("%s %s (%s, %s): %s, memory %.1f GiB from %s%s%s", ids[i],
                 g[i].name, g[i].card, g[i].pci[0] ? g[i].pci : "no PCI "
                 "address", accel_type_name(g[i].type),
                 (double)g[i].memory / (1 << 30), g[i].mem_source,
                 g[i].healthy ? "" : "; unhealthy: ", g[i].health_cause);
        free(ids[i]);
    }
    free(ids);
    free(c);
    free(g);
}

char **discovery_drm_ids(const char *node, const struct drm_gpu *g, size_t n)
{
    unsigned k[ACCEL_TYPE_COUNT] = {0};
    char **ids = xcalloc(n + 1, sizeof(*ids));
    for (size_t i = 0; i < n; i++)
        ids[i] = drm_device_id(node, g[i].type, k[g[i].type]++);
    return ids;
}

bool discovery_drm_card(struct accel_daemon *d, const char *dev_id,
                        char *card, size_t cap)
{
    struct drm_gpu *g = NULL;
    uint64_t mt, mu;
    size_t n = 0;
    char **ids;
    bool found = false;

    read_meminfo(proc_root(d), &mt, &mu);
    if (drm_scan(sysfs_root(d), mt, &g, &n) != ACCEL_OK)
        return false;
    ids = discovery_drm_ids(d->cfg.node_name, g, n);
    for (size_t i = 0; i < n; i++) {
        if (!found && strcmp(ids[i], dev_id) == 0 &&
            strlen(g[i].card) < cap) {
            util_strlcpy(card, g[i].card, cap);
            found = true;
        }
        free(ids[i]);
    }
    free(ids);
    free(g);
    return found;
}

enum accel_err discovery_drm_memory(struct accel_daemon *d, const char *card,
                                    uint64_t *memory, uint64_t *used)
{
    uint64_t mt, mu;

    read_meminfo(proc_root(d), &mt, &mu);
    return drm_card_memory(sysfs_root(d), proc_root(d), card, mt, memory,
                           used);
}

void discovery_local(struct accel_daemon *d)
{
    uint64_t mt, mu, ct, cu, dt = 0, du = 0;
    struct statvfs vfs;
    struct nvml *nv = NULL;
    char *cause = NULL;

    read_meminfo(proc_root(d), &mt, &mu);
    read_load(proc_root(d), &ct, &cu);
    if (statvfs(d->cfg.data_dir, &vfs) == 0) {
        dt = (uint64_t)vfs.f_blocks * vfs.f_frsize;
        du = dt - (uint64_t)vfs.f_bavail * vfs.f_frsize;
    }
    discovery_add_node(d, d->cfg.node_name, true, mt, mu, ct, cu, dt, du);
    d->ninfo[d->snap.nnodes - 1].probed = true;
    if (nvml_open(&nv, &cause) == ACCEL_OK) {
        struct nvml_gpu *g = NULL;
        size_t n = 0;
        char drv[64] = "", cuda[32] = "";
        nvml_driver_version(nv, drv, sizeof drv, NULL);
        nvml_cuda_version(nv, cuda, sizeof cuda, NULL);
        if (nvml_scan(nv, &g, &n, NULL) == ACCEL_OK) {
            for (size_t i = 0; i < n; i++) {
                if (!g[i].uuid[0])
                    continue;
                add_nvml_gpu(d, &g[i], mt);
                d->dinfo[d->snap.ndevs - 1].discovered = true;
            }
        }
        free(d->nvml_status);
        d->nvml_status = xasprintf("NVML loaded: driver %s, CUDA %s, %zu GPUs",
                                   drv, cuda, n);
        free(g);
        nvml_close(nv);
    } else {
        free(d->nvml_status);
        d->nvml_status = cause ? cause : xstrdup("NVML is not available");
        cause = NULL;
    }
    add_drm_devices(d, mt);
    if (d->snap.nodes[d->snap.nnodes - 1].ndev == 0)
        add_cpu_fallback(d, d->cfg.node_name, mt);
    free(cause);
}

/* The new GPUs of g[0..n) onto the local node (inserted after its
 * devices, discovery_insert_device); ids into added. */
static void add_new_gpus(struct accel_daemon *d, int node,
                         const struct nvml_gpu *g, size_t n, json_t *added)
{
    for (size_t i = 0; i < n; i++) {
        if (!g[i].uuid[0] || state_dev_find(d, g[i].uuid) >= 0)
            continue;
        /* among the local node's devices, wherever that node is (in a
         * cluster, other nodes' devices may follow it) */
        char *source = NULL;
        enum accel_type t = nvml_type(&g[i]);
        uint64_t mem = nvml_memory(&g[i], d->snap.nodes[node].mem.total,
                                   &source);
        discovery_insert_device(d, (uint32_t)node, g[i].uuid, t, g[i].name,
                                mem, default_mode(t), g[i].healthy == 1,
                                (int)g[i].index);
        d->dinfo[state_dev_find(d, g[i].uuid)].discovered = true;
        d->dinfo[state_dev_find(d, g[i].uuid)].mem_source = source;
        d->dinfo[state_dev_find(d, g[i].uuid)].pci =
            g[i].pci[0] ? xstrdup(g[i].pci) : NULL;
        json_array_append_new(added, json_string(g[i].uuid));
        state_event(d, "device.new", NULL, d->cfg.node_name, g[i].uuid, NULL,
                    "GPU %s (%s) discovered; it takes placements", g[i].uuid,
                    g[i].name);
    }
}

json_t *discovery_rediscover(struct accel_daemon *d, char **status)
{
    struct nvml *nv = NULL;
    struct nvml_gpu *g = NULL;
    char drv[64] = "", cuda[32] = "";
    json_t *added = NULL;
    size_t n = 0;
    int node;

    *status = NULL;
    pthread_mutex_lock(&d->lock);
    node = state_node_find(d, d->cfg.node_name);
    if (node < 0 || !d->ninfo[node].probed) {
        *status = xasprintf("node %s is declared by the inventory: its "
                            "devices are the inventory's", d->cfg.node_name);
        goto out;
    }
    if (nvml_open(&nv, status) != ACCEL_OK) {
        if (*status == NULL)
            *status = xstrdup("NVML is not available");
        goto out;
    }
    nvml_driver_version(nv, drv, sizeof drv, NULL);
    nvml_cuda_version(nv, cuda, sizeof cuda, NULL);
    if (nvml_scan(nv, &g, &n, status) != ACCEL_OK) {
        if (*status == NULL)
            *status = xstrdup("the NVML device scan failed");
        goto out;
    }
    added = json_array();
    add_new_gpus(d, node, g, n, added);
    /* new devices: the index is rebuilt for the grown snapshot (until
     * then, or without memory for it, placement scans) */
    if (json_array_size(added) > 0 && adm_index_build(&d->snap) != ACCEL_OK)
        log_warn("no memory for the placement index: placement scans");
    free(d->nvml_status);
    d->nvml_status = xasprintf("NVML loaded: driver %s, CUDA %s, %zu GPUs",
                               drv, cuda, n);
    *status = xstrdup(d->nvml_status);
out:
    pthread_mutex_unlock(&d->lock);
    free(g);
    if (nv)
        nvml_close(nv);
    return added;
}

/* A DRM client with the app its process belongs to ("" none). */
struct drm_seen {
    struct drm_client c;           /* pid, device, bytes */
    char app[ACCEL_NAME_MAX + 1];  /* by cgroup; leader pid under lock */
};

/* The app of client s: its cgroup's, else the app whose leader it is. */
static struct app *seen_app(struct accel_daemon *d, const struct drm_seen *s)
{
    if (s->app[0])
        return state_app_find(d, s->app);
    for (size_t i = 0; i < d->napps; i++)
        if (d->apps[i]->pid > 0 && d->apps[i]->pid == s->c.pid)
            return d->apps[i];
    return NULL;
}

/* An app's row on dev uses what its clients hold there, where no shim
 * ledger measures it (a HIP slice on `amd` is the ledger's); the clients
 * of no app bound there are the device's foreignUsage (SPEC 8.3). */
static void apply_drm_clients(struct accel_daemon *d, size_t dev, size_t gpu,
                              const struct drm_seen *s, size_t ns)
{
    const struct adm_device *x = &d->snap.devs[dev];
    bool ledger = d->shim_path && x->st == ACCEL_SUPPORT_MEMSLICE &&
                  (x->type == ACCEL_TYPE_AMD || x->type == ACCEL_TYPE_AMD_GPU);
    json_t *foreign = json_array();

    for (size_t i = 0; i < d->napps && !ledger; i++)
        for (size_t k = 0; d->apps[i]->row_usage && k < d->apps[i]->nrows; k++)
            if (d->apps[i]->rows[k].dev == dev)
                d->apps[i]->row_usage[k] = 0;
    for (size_t i = 0; i < ns; i++) {
        struct app *a;
        size_t k = 0;
        if (s[i].c.gpu != gpu)
            continue;
        a = seen_app(d, &s[i]);
        while (a && k < a->nrows && a->rows[k].dev != dev)
            k++;
        if (a && k < a->nrows) {
            if (!ledger && a->row_usage)
                a->row_usage[k] += s[i].c.bytes;
            continue;
        }
        json_array_append_new(foreign, json_pack("{s:i, s:I}", "pid",
                                                 (int)s[i].c.pid, "usedMemory",
                                                 (json_int_t)s[i].c.bytes));
        if (a)
            json_object_set_new(json_array_get(foreign,
                                               json_array_size(foreign) - 1),
                                "app", json_string(a->name));
    }
    json_decref(d->dinfo[dev].foreign);
    d->dinfo[dev].foreign = json_array_size(foreign) ? foreign : NULL;
    if (d->dinfo[dev].foreign == NULL)
        json_decref(foreign);
}

/* Apply a fresh scan to the local node's DRM devices (lock held). */
static void apply_drm(struct accel_daemon *d, const struct drm_gpu *g,
                      char **ids, size_t n, const struct drm_seen *s,
                      size_t ns)
{
    for (size_t i = 0; i < d->snap.ndevs; i++) {
        struct adm_device *x = &d->snap.devs[i];
        struct dev_info *di = &d->dinfo[i];
        size_t k = 0;
        if (!di->drm || !d->ninfo[x->node].local)
            continue;
        while (k < n && strcmp(ids[k], x->id) != 0)
            k++;
        if (k == n) {
            struct drm_gpu gone = {.util = -1, .power_mw = -1,
                                   .power_limit_mw = -1, .temp = -1,
                                   .used = DRM_UNKNOWN,
                                   .util_na = DRM_NA_ABSENT,
                                   .power_na = DRM_NA_ABSENT,
                                   .limit_na = DRM_NA_ABSENT,
                                   .temp_na = DRM_NA_ABSENT};
            discovery_drm_readings(di, &gone);
            continue;
        }
        discovery_drm_readings(di, &g[k]);
        apply_drm_clients(d, i, k, s, ns);
        if (x->healthy != (g[k].healthy == 1)) {
            x->healthy = g[k].healthy == 1;
            adm_index_update_dev(&d->snap, (uint32_t)i);
        }
    }
}

/* The entry of (dev, app) in *u, added at 0 bytes when there is none. */
static struct drm_usage *usage_entry(struct drm_usage **u, size_t *n,
                                     const char *dev, const char *app)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*u)[i].dev, dev) == 0 && strcmp((*u)[i].app, app) == 0)
            return &(*u)[i];
    *u = xrealloc(*u, (*n + 1) * sizeof(**u));
    memset(&(*u)[*n], 0, sizeof(**u));
    util_strlcpy((*u)[*n].dev, dev, sizeof((*u)[*n].dev));
    util_strlcpy((*u)[*n].app, app, sizeof((*u)[*n].app));
    return &(*u)[(*n)++];
}

/* What the walk saw per local DRM device and app (lock held): the meter's
 * driver figures (struct drm_usage). */
static void drm_usage_of(struct accel_daemon *d, char **ids, size_t n,
                         const struct drm_seen *s, size_t ns,
                         struct drm_usage **u, size_t *nu)
{
    for (size_t i = 0; i < d->snap.ndevs; i++) {
        const struct adm_device *x = &d->snap.devs[i];
        size_t k = 0;
        if (!d->dinfo[i].drm || !d->ninfo[x->node].local)
            continue;
        while (k < n && strcmp(ids[k], x->id) != 0)
            k++;
        if (k == n)
            continue; /* not listed: not read */
        usage_entry(u, nu, x->id, "");
        for (size_t c = 0; c < ns; c++) {
            const struct app *a;
            if (s[c].c.gpu != k)
                continue;
            a = seen_app(d, &s[c]);
            usage_entry(u, nu, x->id, a ? a->name : "")->bytes += s[c].c.bytes;
        }
    }
}

void discovery_drm_refresh(struct accel_daemon *d, struct drm_usage **use,
                           size_t *nuse)
{
    struct drm_gpu *g = NULL;
    struct drm_client *c = NULL;
    size_t n = 0, nc = 0;
    uint64_t mt, mu;
    char **ids;
    struct drm_seen *seen;
    bool any = false;

    if (use != NULL) {
        *use = NULL;
        *nuse = 0;
    }
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->snap.ndevs && !any; i++)
        any = d->dinfo[i].drm;
    pthread_mutex_unlock(&d->lock);
    if (!any)
        return;
    read_meminfo(proc_root(d), &mt, &mu);
    if (drm_scan(sysfs_root(d), mt, &g, &n) != ACCEL_OK)
        return;
    drm_clients(proc_root(d), g, n, &c, &nc);
    seen = xcalloc(nc + 1, sizeof(*seen));
    for (size_t i = 0; i < nc; i++) { /* /proc reads without the lock */
        seen[i].c = c[i];
        if (!cgroup_pid_app(d->cg, c[i].pid, seen[i].app,
                            sizeof seen[i].app))
            seen[i].app[0] = '\0';
    }
    ids = discovery_drm_ids(d->cfg.node_name, g, n);
    pthread_mutex_lock(&d->lock);
    apply_drm(d, g, ids, n, seen, nc);
    if (use != NULL)
        drm_usage_of(d, ids, n, seen, nc, use, nuse);
    pthread_mutex_unlock(&d->lock);
    free(seen);
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(c);
    free(g);
}
