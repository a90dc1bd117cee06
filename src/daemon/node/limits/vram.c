/* SPDX-License-Identifier: MIT */
/*
 * vram.c: which tier holds each local device's VRAM quotas (the kernel's
 * dmem controller, the NVIDIA driver's per-cgroup limits, or the shim
 * alone), the limits written at an app's start and lifted when its rows
 * go, and the usage those tiers count (vram.h). The files are dmem.c's,
 * the driver calls nvml.c's; this module decides which, for whom.
 */
#include "common/accel_setup.h"
#include "daemon/node/limits/vram.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/devices/nvml.h"
#include "daemon/node/limits/dmem.h"
#include "daemon/node/proc/cgroup.h"

struct vram {
    char *root;        /* the cgroup root of the dmem files, NULL none */
    struct nvml *nv;   /* NVML, kept while it offers memory limits */
};

const char *vram_tier_name(enum vram_tier t)
{
    return t == VRAM_KERNEL ? "kernel"
           : t == VRAM_DRIVER ? "driver"
           : t == VRAM_SHIM   ? "shim"
                              : "none";
}

/* The directory the v2 cgroup paths are relative to: v2_dir less v2_rel
 * (a mount of a sub-tree included); NULL when they do not line up. */
static char *default_root(const struct cgroup_sys *cg)
{
    size_t n, r;

    if (cg == NULL || cg->v2_dir == NULL || cg->v2_rel == NULL)
        return NULL;
    n = strlen(cg->v2_dir);
    r = strlen(cg->v2_rel);
    if (r > n || strcmp(cg->v2_dir + n - r, cg->v2_rel) != 0)
        return NULL;
    return xasprintf("%.*s", (int)(n - r), cg->v2_dir);
}

/* The app's cgroup as /proc/<pid>/cgroup shows it (caller frees). */
static char *app_rel(const struct accel_daemon *d, const char *app)
{
    return xasprintf("%s/%s", d->cg->v2_rel, app);
}

static bool local_dev(const struct accel_daemon *d, uint32_t dev)
{
    return d->ninfo[d->snap.devs[dev].node].local;
}

/* ---- what each device offers ---- */

/* Why the kernel holds no quota on this machine (NULL: it may), and the
 * regions it has. */
static char *kernel_offer(struct accel_daemon *d, struct dmem_region **reg,
                          size_t *nreg)
{
    struct vram *v = d->vram;
    char *cause = NULL, *why;
    enum accel_err rc;

    if (d->cg == NULL || d->cg->v2_rel == NULL)
        return xstrdup("apps have no cgroup v2 cgroup here, where the "
                       "kernel's and the driver's limits are set");
    if (v->root == NULL)
        return xasprintf("the cgroup v2 root of %s is unknown",
                         d->cg->v2_dir);
    rc = dmem_read_capacity(v->root, reg, nreg, &cause);
    if (rc == ACCEL_OK)
        return NULL;
    if (rc == ACCEL_ENOTFOUND)
        why = xasprintf("this kernel has no dmem controller (no "
                        "%s/dmem.capacity; Linux 6.14 or later has it)",
                        v->root);
    else
        why = xasprintf("%s: the kernel's regions cannot be read", cause);
    if (rc == ACCEL_EPARSE) {
        pthread_mutex_lock(&d->lock);
        state_event(d, "node.dmem", NULL, d->cfg.node_name, NULL, NULL,
                    "%s/%s; the shim holds the VRAM quotas", v->root, cause);
        pthread_mutex_unlock(&d->lock);
        log_warn("%s/%s", v->root, cause);
    }
    free(cause);
    return why;
}

/* Why the driver holds no quota (NULL: it may; d->vram->nv kept open). */
static char *driver_offer(struct accel_daemon *d)
{
    struct nvml *nv = NULL;
    char drv[64] = "", *why = NULL;
    bool any = false;

    for (size_t i = 0; i < d->snap.ndevs && !any; i++)
        any = d->dinfo[i].discovered && local_dev(d, (uint32_t)i) &&
              d->snap.devs[i].type == ACCEL_TYPE_NVIDIA;
    if (!any)
        return NULL; /* said per device: not an NVML device */
    if (nvml_open(&nv, NULL) != ACCEL_OK)
        return xstrdup("NVML cannot be loaded");
    if (nvml_has_memory_limits(nv)) {
        d->vram->nv = nv;
        return NULL;
    }
    nvml_driver_version(nv, drv, sizeof drv, NULL);
    why = xasprintf("driver %s has no memory limits "
                    "(nvmlDeviceSetMemoryLimits_v1, r615 or later)",
                    drv[0] ? drv : "(unknown version)");
    nvml_close(nv);
    return why;
}

static const struct dmem_region *region_of(const struct dmem_region *reg,
                                           size_t n, const char *pci)
{
    for (size_t i = 0; pci && i < n; i++)
        if (strcmp(reg[i].pci, pci) == 0)
            return &reg[i];
    return NULL;
}

/* Set device i's tier and sentence from what the machine offers. */
static void offer(struct accel_daemon *d, size_t i,
                  const struct dmem_region *reg, size_t nreg,
                  const char *kwhy, const char *dwhy)
{
    struct dev_info *di = &d->dinfo[i];
    const struct adm_device *x = &d->snap.devs[i];
    const struct dmem_region *r = kwhy ? NULL : region_of(reg, nreg, di->pci);
    char *why = kwhy ? xstrdup(kwhy)
                : di->pci == NULL
                    ? xstrdup("its PCI address is unknown, so no dmem region "
                              "names it")
                    : xasprintf("the driver does not register its memory "
                                "(dmem.capacity has no region of %s)",
                                di->pci);
    bool nvidia = x->type == ACCEL_TYPE_NVIDIA && di->discovered;

    if (r != NULL) {
        di->vram_tier = VRAM_KERNEL;
        di->vram_region = xstrdup(r->name);
        di->vram_note = xasprintf("VRAM quotas enforced by the kernel (dmem "
                                  "region %s: each app's cgroup dmem.max)",
                                  r->name);
    } else if (nvidia && d->vram->nv && d->cg && d->cg->v2_rel) {
        di->vram_tier = VRAM_DRIVER;
        di->vram_note = xasprintf("VRAM quotas enforced by the NVIDIA driver "
                                  "(nvmlDeviceSetMemoryLimits_v1 for each "
                                  "app's cgroup); not by the kernel: %s", why);
    } else {
        di->vram_tier = VRAM_SHIM;
        di->vram_note = xasprintf("VRAM quotas not enforced by the kernel or "
                                  "the driver: %s%s%s", why,
                                  nvidia && dwhy ? "; " : "",
                                  nvidia && dwhy ? dwhy : "");
    }
    free(why);
}

void vram_init(struct accel_daemon *d)
{
    struct dmem_region *reg = NULL;
    size_t nreg = 0;
    char *kwhy, *dwhy;

    d->vram = xcalloc(1, sizeof(*d->vram));
    d->vram->root = d->cfg.cgroup_root ? xstrdup(d->cfg.cgroup_root)
                                       : default_root(d->cg);
    kwhy = kernel_offer(d, &reg, &nreg);
    dwhy = driver_offer(d);
    for (size_t i = 0; i < d->snap.ndevs; i++)
        if (local_dev(d, (uint32_t)i) &&
            d->snap.devs[i].type != ACCEL_TYPE_CPU) {
            offer(d, i, reg, nreg, kwhy, dwhy);
            log_info("%s: %s", d->dinfo[i].id, d->dinfo[i].vram_note);
        }
    free(reg);
    free(kwhy);
    free(dwhy);
    /* the apps found running again: their limits as they are now (written
     * again: the same value, read back, or a refusal said) */
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps; i++)
        if (d->apps[i]->pid > 0 && d->apps[i]->nrows > 0 && d->cg &&
            d->cg->v2_rel != NULL)
            vram_app_apply(d, d->apps[i]);
    pthread_mutex_unlock(&d->lock);
}

void vram_fini(struct accel_daemon *d)
{
    if (d->vram == NULL)
        return;
    nvml_close(d->vram->nv);
    free(d->vram->root);
    free(d->vram);
    d->vram = NULL;
}

/* ---- an app's limits ---- */

/* Write limit (0: none) of a's row on dev at the device's tier. */
static enum accel_err put_limit(struct accel_daemon *d, const char *app,
                                uint32_t dev, uint64_t limit, char **cause)
{
    const struct dev_info *di = &d->dinfo[dev];
    char *rel = app_rel(d, app), *dir;
    enum accel_err rc;

    if (di->vram_tier == VRAM_KERNEL) {
        rc = dmem_set_max(d->vram->root, rel, di->vram_region, limit, cause);
    } else {
        dir = xasprintf("%s%s", d->vram->root, rel);
        rc = nvml_set_memory_limit(d->vram->nv, di->id, dir, limit, cause);
        free(dir);
    }
    free(rel);
    return rc;
}

/* A write refused: said in an event and in a->vram_refused. */
static void refused(struct accel_daemon *d, struct app *a, uint32_t dev,
                    uint64_t quota, const char *cause)
{
    const struct dev_info *di = &d->dinfo[dev];
    const char *who = di->vram_tier == VRAM_KERNEL ? "the kernel (dmem)"
                                                   : "the NVIDIA driver";
    char *s = quota ? xasprintf("%s does not hold its quota on %s: %s; the "
                                "shim holds it", who, di->id, cause)
                    : xasprintf("%s cannot lift its limit on %s: %s", who,
                                di->id, cause);
    char *all = a->vram_refused ? xasprintf("%s; %s", a->vram_refused, s)
                                : xstrdup(s);

    free(a->vram_refused);
    a->vram_refused = all;
    state_event(d, "app.vram", a->name, d->cfg.node_name, di->id, NULL,
                "app %s: %s", a->name, s);
    log_warn("app %s: %s", a->name, s);
    free(s);
}

void vram_app_apply(struct accel_daemon *d, struct app *a)
{
    free(a->vram_refused);
    a->vram_refused = NULL;
    free(a->row_vram);
    a->row_vram = xcalloc(a->nrows ? a->nrows : 1, sizeof(*a->row_vram));
    for (size_t k = 0; d->vram && k < a->nrows; k++) {
        uint32_t dev = a->rows[k].dev;
        uint8_t tier = d->dinfo[dev].vram_tier;
        uint64_t quota = d->snap.devs[dev].st == ACCEL_SUPPORT_MEMSLICE
                             ? a->rows[k].memory : 0;
        char *cause = NULL;

        if (!local_dev(d, dev) || tier == VRAM_UNSET)
            continue;
        if (tier == VRAM_SHIM) {
            a->row_vram[k] = quota ? VRAM_SHIM : VRAM_UNSET;
            continue;
        }
        if (put_limit(d, a->name, dev, quota, &cause) == ACCEL_OK) {
            a->row_vram[k] = quota ? tier : VRAM_UNSET;
        } else {
            a->row_vram[k] = quota ? VRAM_SHIM : VRAM_UNSET;
            refused(d, a, dev, quota, cause ? cause : "?");
        }
        free(cause);
        if (d->hooks.device_changed)
            d->hooks.device_changed(d, (int)dev);
    }
}

void vram_app_clear(struct accel_daemon *d, const struct app *a)
{
    char *rel, *dir;

    if (d->vram == NULL || a->row_vram == NULL || d->cg == NULL ||
        d->cg->v2_rel == NULL)
        return;
    rel = app_rel(d, a->name);
    dir = xasprintf("%s%s", d->vram->root, rel);
    for (size_t k = 0; k < a->nrows && access(dir, F_OK) == 0; k++) {
        char *cause = NULL;
        if (a->row_vram[k] != VRAM_KERNEL && a->row_vram[k] != VRAM_DRIVER)
            continue;
        if (put_limit(d, a->name, a->rows[k].dev, 0, &cause) != ACCEL_OK)
            log_warn("app %s: cannot lift its VRAM limit on %s: %s",
                     a->name, d->dinfo[a->rows[k].dev].id, cause);
        free(cause);
    }
    free(dir);
    free(rel);
}

/* ---- usage as the kernel or the driver counts it ---- */

bool vram_probe_init(const struct accel_daemon *d, const struct app *a,
                     size_t k, struct vram_probe *p)
{
    const struct dev_info *di;

    memset(p, 0, sizeof(*p));
    if (d->vram == NULL || d->cg == NULL || d->cg->v2_rel == NULL ||
        a->pid <= 0 || a->row_vram == NULL || k >= a->nrows ||
        (a->row_vram[k] != VRAM_KERNEL && a->row_vram[k] != VRAM_DRIVER))
        return false;
    di = &d->dinfo[a->rows[k].dev];
    p->tier = a->row_vram[k];
    p->rel = app_rel(d, a->name);
    p->what = xstrdup(p->tier == VRAM_KERNEL ? di->vram_region : di->id);
    return true;
}

bool vram_probe_read(const struct accel_daemon *d, const struct vram_probe *p,
                     uint64_t *used)
{
    struct vram *v = d->vram;
    char *dir;
    bool ok;

    if (v == NULL || p->rel == NULL)
        return false;
    if (p->tier == VRAM_KERNEL)
        return dmem_read(v->root, p->rel, "dmem.current", p->what, used) ==
               ACCEL_OK;
    dir = xasprintf("%s%s", v->root, p->rel);
    ok = nvml_cgroup_memory_used(v->nv, p->what, dir, used, NULL) == ACCEL_OK;
    free(dir);
    return ok;
}

void vram_probe_free(struct vram_probe *p)
{
    free(p->rel);
    free(p->what);
    p->rel = p->what = NULL;
}

struct vprobe {
    char *app;             /* app name */
    size_t row;            /* its row */
    struct vram_probe p;   /* what to read */
    uint64_t used;         /* read without the lock */
    bool ok;
};

static size_t gather(struct accel_daemon *d, struct vprobe **out)
{
    struct vprobe *p = NULL;
    size_t n = 0;

    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        for (size_t k = 0; k < a->nrows; k++) {
            struct vram_probe vp;
            if (!vram_probe_init(d, a, k, &vp))
                continue;
            p = xrealloc(p, (n + 1) * sizeof(*p));
            p[n] = (struct vprobe){.app = xstrdup(a->name), .row = k, .p = vp};
            n++;
        }
    }
    *out = p;
    return n;
}

void vram_refresh_usage(struct accel_daemon *d)
{
    struct vprobe *p = NULL;
    size_t n;

    if (d->vram == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    n = gather(d, &p);
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < n; i++)
        p[i].ok = vram_probe_read(d, &p[i].p, &p[i].used);
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < n; i++) {
        struct app *a = state_app_find(d, p[i].app);
        if (a && p[i].ok && a->row_usage && a->row_vram &&
            p[i].row < a->nrows && a->row_vram[p[i].row] == p[i].p.tier) {
            uint64_t old = a->row_usage[p[i].row];
            a->usage = (a->usage > old ? a->usage - old : 0) + p[i].used;
            a->row_usage[p[i].row] = p[i].used;
        }
        free(p[i].app);
        vram_probe_free(&p[i].p);
    }
    pthread_mutex_unlock(&d->lock);
    free(p);
}

/* ---- what the views say ---- */

bool vram_device_holds(struct accel_daemon *d, int dev, const char **tier,
                       char **note)
{
    const struct dev_info *di = &d->dinfo[dev];

    if (di->vram_tier != VRAM_KERNEL && di->vram_tier != VRAM_DRIVER)
        return false;
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        /* refused at that app's last start: not claimed until its next
         * start or its release (the cached device JSON changes only then) */
        for (size_t k = 0; a->row_vram && k < a->nrows; k++)
            if (a->rows[k].dev == (uint32_t)dev &&
                a->row_vram[k] == VRAM_SHIM)
                return false;
    }
    *tier = vram_tier_name((enum vram_tier)di->vram_tier);
    *note = di->vram_tier == VRAM_KERNEL
                ? xasprintf("the kernel holds each app to its quota (dmem "
                            "region %s, the app cgroup's dmem.max); the shim "
                            "runs as well and refuses first", di->vram_region)
                : xstrdup("the NVIDIA driver holds each app's cgroup to its "
                          "quota (nvmlDeviceSetMemoryLimits_v1); the shim "
                          "runs as well and refuses first");
    return true;
}

static char *row_note(const struct accel_daemon *d, const struct app *a,
                      size_t k)
{
    const struct dev_info *di = &d->dinfo[a->rows[k].dev];
    unsigned long long q = (unsigned long long)a->rows[k].memory;

    if (a->row_vram[k] == VRAM_KERNEL)
        return xasprintf("dmem.max of region %s in its cgroup holds it to %llu "
                         "bytes; usedMemory is its dmem.current (a container "
                         "in its cgroup is held by the same limit)",
                         di->vram_region, q);
    if (a->row_vram[k] == VRAM_DRIVER)
        return xasprintf("the NVIDIA driver holds its cgroup to %llu bytes "
                         "(nvmlDeviceSetMemoryLimits_v1); usedMemory is what "
                         "the driver counts for it", q);
    return xstrdup(a->vram_refused ? a->vram_refused
                   : di->vram_note ? di->vram_note : "");
}

json_t *vram_app_json(struct accel_daemon *d, const struct app *a)
{
    json_t *arr = json_array();

    for (size_t k = 0; a->pid > 0 && a->row_vram && k < a->nrows; k++) {
        char *note;
        if (a->row_vram[k] == VRAM_UNSET)
            continue;
        note = row_note(d, a, k);
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:s}", "deviceId",
                           d->dinfo[a->rows[k].dev].id, "memory",
                           vram_tier_name((enum vram_tier)a->row_vram[k]),
                           "memoryNote", note));
        free(note);
    }
    return arr;
}
