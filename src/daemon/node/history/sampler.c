/* SPDX-License-Identifier: MIT */
/*
 * sampler.c: the history's sampling thread (sampler.h): what one sample
 * holds, the loop, and the periodic save.
 */
#include "common/accel_setup.h"
#include "daemon/node/history/sampler.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/enforce/reconcile.h"
#include "daemon/node/history/history.h"

struct sampler {
    pthread_t thread;        /* the loop */
    pthread_mutex_t mu;      /* guards stop */
    pthread_cond_t cv;       /* wakes the loop at stop */
    bool stop;               /* set by sampler_stop */
    bool running;            /* the thread was started */
    size_t missed;           /* series the last tick could not keep */
};

/* A device this node samples: its own, and in a cluster every reachable
 * node's (their agents report their readings, cluster.c), so that each
 * node's history covers the whole cluster (SPEC 10). */
static bool local_device(struct accel_daemon *d, size_t i)
{
    const struct adm_device *x = &d->snap.devs[i];
    const struct node_info *n = &d->ninfo[x->node];
    bool known = n->local || (n->member && n->reachable && !n->removed);
    return known && x->type != ACCEL_TYPE_CPU;
}

static void dev_sample(struct accel_daemon *d, size_t i,
                       struct history_dev_sample *s)
{
    const struct adm_device *x = &d->snap.devs[i];
    const struct dev_info *di = &d->dinfo[i];
    bool here = x->present;
    *s = (struct history_dev_sample){
        .id = x->id,
        .node = d->snap.nodes[x->node].name,
        .model = di->model ? di->model : "",
        .driver = d->ninfo[x->node].local ? reconcile_driver(d) : "",
        .index = di->index,
        .util = here && di->util >= 0 ? di->util : -1,
        .mem_used = here ? (double)di->used_mem : -1,
        .mem_total = (double)x->memory,
        .power = here && di->power_mw >= 0 ? di->power_mw / 1000.0 : -1,
        .temp = here && di->temp >= 0 ? di->temp : -1,
    };
}

static bool app_measured(const struct app *a)
{
    return a->state == APP_RUNNING || a->state == APP_STOPPING ||
           a->state == APP_RELEASING;
}

/* The SM utilization NVML attributes to app on device dev, or -1. */
static double app_util(const struct dev_info *di, const char *app)
{
    for (size_t i = 0; i < di->nautil; i++)
        if (strcmp(di->autil[i].app, app) == 0)
            return di->autil[i].sm;
    return -1;
}

/* Row k of app a on a local device, as a binding sample. */
static void bind_sample(struct accel_daemon *d, const struct app *a,
                        size_t k, struct history_bind_sample *s)
{
    const struct adm_device *x = &d->snap.devs[a->rows[k].dev];
    bool whole = x->st != ACCEL_SUPPORT_MEMSLICE;
    *s = (struct history_bind_sample){
        .app = a->name,
        .owner = a->owner,
        .device = x->id,
        .node = d->snap.nodes[x->node].name,
        .used = app_measured(a) && a->row_usage
                    ? (double)a->row_usage[k] : -1,
        .alloc = (double)(whole ? x->memory : a->rows[k].memory),
        .cores = whole ? 100 : 0,
        .util = app_measured(a) ? app_util(&d->dinfo[a->rows[k].dev], a->name)
                                : -1,
    };
}

/* Gather and record one sample (caller holds d->lock). */
static size_t record_locked(struct accel_daemon *d, int64_t t)
{
    struct history_dev_sample *devs = xcalloc(d->snap.ndevs + 1,
                                              sizeof(*devs));
    struct history_bind_sample *binds = NULL;
    size_t nd = 0, nb = 0, cb = 0, dropped;

    for (size_t i = 0; i < d->snap.ndevs; i++)
        if (local_device(d, i))
            dev_sample(d, i, &devs[nd++]);
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        for (size_t k = 0; k < a->nrows; k++) {
            if (!local_device(d, a->rows[k].dev))
                continue;
            if (nb == cb) {
                cb = cb ? cb * 2 : 16;
                binds = xrealloc(binds, cb * sizeof(*binds));
            }
            bind_sample(d, a, k, &binds[nb++]);
        }
    }
    dropped = history_record(d->history, t, devs, nd, binds, nb);
    free(devs);
    free(binds);
    return dropped;
}

void sampler_tick(struct accel_daemon *d)
{
    size_t dropped;
    if (d->history == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    dropped = record_locked(d, (int64_t)time(NULL));
    pthread_mutex_unlock(&d->lock);
    /* said when it changes, never silently (issue 51); gpu status and
     * GET /api/runtime name the series (sampler_json) */
    if (d->sampler && dropped != d->sampler->missed) {
        if (dropped > 0)
            log_warn("metric history full: %zu series (cards or bindings) "
                     "not recorded: their values would pass "
                     "--history-max-bytes (%zu MiB); `accelctl gpu status` "
                     "names them; raise the bound, or shorten "
                     "--history-retention or lengthen --history-interval",
                     dropped, history_max_bytes(d->history) >> 20);
        else
            log_info("metric history: every series recorded again");
        d->sampler->missed = dropped;
    }
}

json_t *sampler_json(struct accel_daemon *d)
{
    json_t *missed = json_array(), *v;
    struct history *h = d->history;

    if (h == NULL) {
        json_decref(missed);
        return json_null();
    }
    history_lock(h);
    for (size_t i = 0; i < history_nmissed(h); i++) {
        const struct history_missed *m = history_missed_at(h, i);
        const char *sep = strchr(m->key, '\x1f');
        if (m->kind == HISTORY_BINDING && sep)
            json_array_append_new(
                missed, json_pack("{s:s%, s:s}", "app", m->key,
                                  (size_t)(sep - m->key), "device", sep + 1));
        else
            json_array_append_new(missed, json_pack("{s:s}", "device", m->key));
    }
    v = json_pack("{s:i, s:I, s:I, s:I, s:o}", "intervalSeconds",
                  history_interval(h), "samples",
                  (json_int_t)history_capacity(h), "bytes",
                  (json_int_t)history_value_bytes(h), "maxBytes",
                  (json_int_t)history_max_bytes(h), "notRecorded", missed);
    history_unlock(h);
    return v;
}

static void save(struct accel_daemon *d)
{
    char *cause = NULL;
    if (history_save(d->history, &cause) != ACCEL_OK) {
        log_warn("%s", cause);
        free(cause);
    }
}

/* Wait until the next tick; false when stopping. */
static bool wait_tick(struct sampler *s, int interval)
{
    struct timespec ts;
    bool stop;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += interval;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT)
            break;
    }
    stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    return !stop;
}

static void *loop(void *arg)
{
    struct accel_daemon *d = arg;
    int interval = history_interval(d->history);
    int64_t last_save = (int64_t)time(NULL);

    while (wait_tick(d->sampler, interval)) {
        sampler_tick(d);
        if ((int64_t)time(NULL) - last_save >= SAMPLER_SAVE_EVERY) {
            save(d);
            last_save = (int64_t)time(NULL);
        }
    }
    return NULL;
}

enum accel_err sampler_start(struct accel_daemon *d)
{
    char *path = xasprintf("%s/history.bin", d->cfg.data_dir);
    char *warning = NULL;
    struct sampler *s;
    enum accel_err err = history_new(&d->history, d->cfg.history_interval,
                                     d->cfg.history_retention, path,
                                     &warning);
    free(path);
    if (err != ACCEL_OK)
        return err;
    if (warning) {
        log_warn("%s", warning);
        free(warning);
    }
    if (d->cfg.history_max_bytes > 0)
        history_set_max_bytes(d->history, d->cfg.history_max_bytes);
    s = xcalloc(1, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    d->sampler = s;
    if (pthread_create(&s->thread, NULL, loop, d) != 0)
        return ACCEL_ESYS;
    s->running = true;
    return ACCEL_OK;
}

void sampler_stop(struct accel_daemon *d)
{
    struct sampler *s = d->sampler;
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->running)
        pthread_join(s->thread, NULL);
    save(d);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    d->sampler = NULL;
}
