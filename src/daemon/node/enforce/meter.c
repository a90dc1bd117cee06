/* SPDX-License-Identifier: MIT */
/*
 * meter.c: the outside meter (meter.h): NVML's per-process figures of an
 * app's processes (NVIDIA), or the DRM clients the amdgpu driver lists in
 * their fdinfo (AMD), against the shim's charges in its ledger, the excess
 * charged into the ledger as untracked, an app over its quota reported and,
 * where the device asks for it, stopped. docs/internals/meter.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/enforce/meter.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/devices/discovery.h"
#include "daemon/node/ledger.h"
#include "daemon/node/runtime/runtime.h"

#define MIB (1024ULL * 1024ULL)

void meter_compute(const struct meter_in *in, struct meter_out *out)
{
    uint64_t held;

    out->excess = in->driver > in->charged ? in->driver - in->charged : 0;
    out->untracked =
        out->excess < in->last_excess ? out->excess : in->last_excess;
    held = in->charged + out->untracked;
    out->over = held > in->limit ? held - in->limit : 0;
    out->beyond = out->over > in->tolerance;
}

/* ---- the device setting ---- */

static const json_t *setting(const struct accel_daemon *d, size_t dev)
{
    return json_object_get(d->dinfo[dev].settings, "meter");
}

json_t *meter_settings_json(const struct accel_daemon *d, size_t dev)
{
    const json_t *m = setting(d, dev);
    const json_t *act = json_object_get(m, "overQuotaAction");
    const json_t *tol = json_object_get(m, "tolerance");

    return json_pack(
        "{s:s, s:I}", "overQuotaAction",
        json_is_string(act) ? json_string_value(act) : "report", "tolerance",
        json_is_integer(tol) ? json_integer_value(tol)
                             : (json_int_t)METER_DEFAULT_TOLERANCE);
}

/* ---- gathering, under d->lock ---- */

bool meter_type(enum accel_type t)
{
    return t == ACCEL_TYPE_NVIDIA || t == ACCEL_TYPE_NVIDIA_GB10 ||
           t == ACCEL_TYPE_AMD || t == ACCEL_TYPE_AMD_GPU;
}

static bool metered_device(const struct accel_daemon *d, size_t dev)
{
    const struct adm_device *x = &d->snap.devs[dev];
    return d->ninfo[x->node].local && x->present && meter_type(x->type);
}

const struct app_meter *meter_find(const struct accel_daemon *d, size_t dev,
                                   const char *app)
{
    const struct dev_info *di = &d->dinfo[dev];
    for (size_t i = 0; i < di->nmeter; i++)
        if (strcmp(di->meter[i].app, app) == 0)
            return &di->meter[i];
    return NULL;
}

/* Fill t for row k of a (lock held). */
static void target_init(struct accel_daemon *d, const struct app *a, size_t k,
                        struct meter_target *t)
{
    size_t dev = a->rows[k].dev;
    json_t *s = meter_settings_json(d, dev);
    const struct app_meter *m = meter_find(d, dev, a->name);

    t->app = xstrdup(a->name);
    t->dev = dev;
    util_strlcpy(t->uuid, d->snap.devs[dev].id, sizeof t->uuid);
    t->in.limit = a->rows[k].memory;
    t->in.tolerance =
        (uint64_t)json_integer_value(json_object_get(s, "tolerance"));
    t->stop = strcmp(json_string_value(json_object_get(s, "overQuotaAction")),
                     "stop") == 0;
    t->had = m != NULL;
    t->vp_on = vram_probe_init(d, a, k, &t->vp);
    t->in.last_excess = m ? m->excess : 0;
    json_decref(s);
}

struct meter_target *meter_gather(struct accel_daemon *d, size_t *n)
{
    struct meter_target *t = NULL;
    size_t cap = 0;
    char path[512];

    *n = 0;
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        if (a->pid <= 0 || !state_app_runs_here(d, a))
            continue;
        for (size_t k = 0; k < a->nrows; k++) {
            if (!metered_device(d, a->rows[k].dev) ||
                !runtime_ledger_of(d, a, k, path, sizeof path))
                continue;
            if (*n == cap) {
                cap = cap ? cap * 2 : 8;
                t = xrealloc(t, cap * sizeof(*t));
            }
            memset(&t[*n], 0, sizeof(*t));
            util_strlcpy(t[*n].path, path, sizeof t[*n].path);
            target_init(d, a, k, &t[*n]);
            (*n)++;
        }
    }
    return t;
}

void meter_free(struct meter_target *t, size_t n)
{
    for (size_t i = 0; t != NULL && i < n; i++) {
        free(t[i].app);
        if (t[i].vp_on)
            vram_probe_free(&t[i].vp);
    }
    free(t);
}

/* ---- reading and charging, without the lock ---- */

void meter_read(struct meter_target *t, size_t n, bool after)
{
    for (size_t i = 0; i < n; i++) {
        struct ledger_usage u;
        bool ok = ledger_read(t[i].path, &u) == ACCEL_OK;
        if (!after) {
            t[i].ledger_ok = ok;
            t[i].in.charged = ok ? u.used : 0;
            /* after a restart of acceld the ledger remembers the charge */
            if (ok && !t[i].had)
                t[i].in.last_excess = u.untracked;
            continue;
        }
        t[i].ledger_ok = t[i].ledger_ok && ok;
        if (ok && u.used > t[i].in.charged)
            t[i].in.charged = u.used;
    }
}

void meter_driver_drm(struct meter_target *t, size_t n,
                      const struct drm_usage *u, size_t nu)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < nu; k++) {
            if (strcmp(u[k].dev, t[i].uuid) != 0)
                continue;
            if (u[k].app[0] == '\0')
                t[i].seen = true; /* the device was read this pass */
            else if (strcmp(u[k].app, t[i].app) == 0)
                t[i].in.driver += u[k].bytes;
        }
}

void meter_read_tier(const struct accel_daemon *d, struct meter_target *t,
                     size_t n)
{
    for (size_t i = 0; i < n; i++)
        t[i].vp_ok = t[i].vp_on && vram_probe_read(d, &t[i].vp, &t[i].vp_used);
}

void meter_charge(struct meter_target *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        enum accel_err rc;
        if (t[i].vp_ok) { /* the kernel's or the driver's count of it */
            t[i].seen = true;
            if (t[i].vp_used > t[i].in.driver)
                t[i].in.driver = t[i].vp_used;
        }
        if (!t[i].seen || !t[i].ledger_ok)
            continue;
        meter_compute(&t[i].in, &t[i].out);
        rc = ledger_set_untracked(t[i].path, t[i].out.untracked);
        if (rc != ACCEL_OK && rc != ACCEL_ENOTFOUND) /* gone: it stopped */
            log_warn("app %s: cannot charge untracked memory into %s: %s",
                     t[i].app, t[i].path, accel_strerror(rc));
    }
}

/* ---- applying, under d->lock ---- */

/* The device index of t now (devices may have been added since gather),
 * -1 when it is gone. */
static int target_dev(struct accel_daemon *d, const struct meter_target *t)
{
    if (t->dev < d->snap.ndevs && strcmp(d->snap.devs[t->dev].id, t->uuid) == 0)
        return (int)t->dev;
    return state_dev_find(d, t->uuid);
}

static void stop_over(struct accel_daemon *d, struct app *a)
{
    static const char reason[] = "over-quota";

    if (a->state != APP_RUNNING || a->pid <= 0 || !state_app_runs_here(d, a))
        return;
    if (lifecycle_commit_state(d, a, APP_STOPPING, reason) != ACCEL_OK) {
        log_error("app %s: its stop (over its quota) could not be saved",
                  a->name);
        return;
    }
    runtime_stop_begin(a, APP_STOPPED, reason, false);
}

/* Tell what changed for m (the reading now) against was (the last one). */
static void report(struct accel_daemon *d, size_t dev,
                   const struct meter_target *t, struct app_meter *m, bool was)
{
    const struct adm_device *x = &d->snap.devs[dev];
    const char *node = d->snap.nodes[x->node].name;
    struct app *a;

    m->reported = t->out.beyond;
    if (!t->out.beyond) {
        if (was)
            state_event(d, "meter.within-quota", m->app, node, x->id, NULL,
                        "app %s is within its quota on %s again", m->app,
                        x->id);
        return;
    }
    if (was)
        return;
    a = state_app_find(d, m->app);
    state_event(
        d, "meter.over-quota", m->app, node, x->id,
        json_pack("{s:I, s:I, s:I, s:I, s:I}", "over", (json_int_t)m->over,
                  "driverMemory", (json_int_t)m->driver, "usedMemory",
                  (json_int_t)m->charged, "untrackedMemory",
                  (json_int_t)m->untracked, "quota", (json_int_t)m->limit),
        "app %s on %s is over quota by %llu MiB: memory the "
        "shim cannot see (the driver holds %llu MiB for it, the "
        "shim charged %llu MiB, quota %llu MiB)%s",
        m->app, x->id, (unsigned long long)(m->over / MIB),
        (unsigned long long)(m->driver / MIB),
        (unsigned long long)(m->charged / MIB),
        (unsigned long long)(m->limit / MIB),
        t->stop && a && a->state == APP_RUNNING
            ? "; the device's setting stops it"
            : "");
    if (t->stop && a)
        stop_over(d, a);
}

/* The last pass's lists, taken off the devices while this pass's are
 * built. */
struct old_list {
    size_t dev;
    struct app_meter *m;
    size_t n;
};

static const struct app_meter *old_find(const struct old_list *o, size_t no,
                                        size_t dev, const char *app)
{
    for (size_t i = 0; i < no; i++)
        for (size_t k = 0; o[i].dev == dev && k < o[i].n; k++)
            if (strcmp(o[i].m[k].app, app) == 0)
                return &o[i].m[k];
    return NULL;
}

static struct old_list *take_lists(struct accel_daemon *d, size_t *no)
{
    struct old_list *o = NULL;
    *no = 0;
    for (size_t i = 0; i < d->snap.ndevs; i++) {
        struct dev_info *di = &d->dinfo[i];
        if (di->nmeter == 0)
            continue;
        o = xrealloc(o, (*no + 1) * sizeof(*o));
        o[(*no)++] = (struct old_list){ i, di->meter, di->nmeter };
        di->meter = NULL;
        di->nmeter = 0;
    }
    return o;
}

static void free_lists(struct old_list *o, size_t no)
{
    for (size_t i = 0; i < no; i++) {
        for (size_t k = 0; k < o[i].n; k++)
            free(o[i].m[k].app);
        free(o[i].m);
    }
    free(o);
}

/* This pass's reading of t, or the last one when t was not measured. */
static bool next_reading(const struct meter_target *t,
                         const struct app_meter *prev, struct app_meter *m)
{
    if (!t->seen || !t->ledger_ok) {
        if (prev == NULL)
            return false;
        *m = *prev;
        m->app = xstrdup(prev->app);
        return true;
    }
    *m = (struct app_meter){ .app = xstrdup(t->app),
                             .driver = t->in.driver,
                             .charged = t->in.charged,
                             .excess = t->out.excess,
                             .untracked = t->out.untracked,
                             .limit = t->in.limit,
                             .over = t->out.over,
                             .reported = prev ? prev->reported : false };
    return true;
}

void meter_apply(struct accel_daemon *d, struct meter_target *t, size_t n)
{
    size_t no;
    struct old_list *o = take_lists(d, &no);

    for (size_t i = 0; i < n; i++) {
        int dev = target_dev(d, &t[i]);
        struct dev_info *di;
        const struct app_meter *prev;
        struct app_meter m;
        if (dev < 0)
            continue;
        prev = old_find(o, no, (size_t)dev, t[i].app);
        if (!next_reading(&t[i], prev, &m))
            continue;
        di = &d->dinfo[dev];
        di->meter = xrealloc(di->meter, (di->nmeter + 1) * sizeof(*di->meter));
        di->meter[di->nmeter++] = m;
        if (t[i].seen && t[i].ledger_ok)
            report(d, (size_t)dev, &t[i], &di->meter[di->nmeter - 1],
                   m.reported);
    }
    free_lists(o, no);
}
