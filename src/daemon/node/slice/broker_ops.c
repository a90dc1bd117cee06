/* SPDX-License-Identifier: MIT */
/*
 * broker_ops.c: acceld's side of the time-slice brokers (broker.c): which
 * devices get one (TimeSlice NVIDIA devices of the local node, checked every
 * 500 ms by the broker thread, so a mode switch needs no hook), their
 * settings (the device's settings JSON, key "timeSlice"), who may connect
 * (admit: only processes of an app bound to the device), the `timeSlice`
 * object of the device JSON and the /metrics block. The PUT of the settings
 * is an API operation (ops_timeslice_set, api/ops_device.c).
 */
#include "common/accel_setup.h"
#include "daemon/node/slice/broker_ops.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/proc/proc.h"
#include "daemon/node/slice/broker.h"
#include "daemon/state.h"

#define OVERSUB_DEFAULT_MS 1000 /* shortest turn while memory moves */
#define OVERSUB_USED_PCT 90     /* NVML use above this = looks full */

static uint32_t setting(const json_t *ts, const char *key, uint32_t def)
{
    json_t *v = json_object_get(ts, key);
    return json_is_integer(v) && json_integer_value(v) > 0
               ? (uint32_t)json_integer_value(v) : def;
}

/* The settings in force for dev (d->lock held): the stored ones (issue
 * 49: the idle time in microseconds, idleReleaseUs, else idleReleaseMs),
 * the card's memory (what the apps' reported bytes are held against) and
 * whether NVML shows the card nearly full (for shims that report none). */
static struct broker_settings dev_settings(struct accel_daemon *d, int dev)
{
    const json_t *ts = json_object_get(d->dinfo[dev].settings, "timeSlice");
    const struct adm_device *x = &d->snap.devs[dev];
    uint32_t idle_ms = setting(ts, "idleReleaseMs", 0);
    struct broker_settings s = {
        .quantum_ms = setting(ts, "quantumMs", BROKER_DEFAULT_QUANTUM_MS),
        .grace_ms = setting(ts, "revokeGraceMs", BROKER_DEFAULT_GRACE_MS),
        .idle_us = setting(ts, "idleReleaseUs",
                           idle_ms ? idle_ms * 1000 : BROKER_DEFAULT_IDLE_US),
        .min_turn_us = setting(ts, "minTurnUs", BROKER_DEFAULT_MIN_TURN_US),
        .oversub_ms = setting(ts, "oversubscribedQuantumMs",
                              OVERSUB_DEFAULT_MS),
        .paging_pct = setting(ts, "pagingPercent", BROKER_DEFAULT_PAGING_PCT),
        .card_bytes = x->memory > 0 ? (uint64_t)x->memory : 0,
        .link_bps = BROKER_DEFAULT_LINK_BPS,
    };

    s.idle_ms = (s.idle_us + 999) / 1000;
    s.card_full = x->memory > 0 &&
                  d->dinfo[dev].used_mem * 100 > x->memory * OVERSUB_USED_PCT;
    return s;
}

bool broker_ops_device(struct accel_daemon *d, int dev)
{
    const struct adm_device *x = &d->snap.devs[dev];
    return d->ninfo[x->node].local && x->type == ACCEL_TYPE_NVIDIA &&
           x->st == ACCEL_SUPPORT_TIMESLICE;
}

struct want {
    char id[128];
    char path[108];
    struct broker_settings s;
};

/* Turn the brokers' revocations into events (kind timeslice.revoke). */
static void log_revocations(struct accel_daemon *d, struct broker_set *bs)
{
    struct broker_revocation r[16];
    size_t n;

    while ((n = broker_set_take_revocations(bs, r, 16)) > 0) {
        pthread_mutex_lock(&d->lock);
        for (size_t i = 0; i < n; i++) {
            int dev = state_dev_find(d, r[i].dev);
            const char *node = dev >= 0
                                   ? d->snap.nodes[d->snap.devs[dev].node].name
                                   : NULL;
            state_event(d, "timeslice.revoke", r[i].app, node, r[i].dev,
                        json_pack("{s:i}", "graceMs", (int)r[i].grace_ms),
                        "the turn of %s on %s was taken back: not given back "
                        "within %u ms of being asked", r[i].app, r[i].dev,
                        (unsigned)r[i].grace_ms);
        }
        pthread_mutex_unlock(&d->lock);
    }
}

static void sync_brokers(void *ctx, struct broker_set *bs)
{
    struct accel_daemon *d = ctx;
    struct want *w;
    const char **ids;
    size_t n = 0;

    pthread_mutex_lock(&d->lock);
    w = xcalloc(d->snap.ndevs + 1, sizeof(*w));
    ids = xcalloc(d->snap.ndevs + 1, sizeof(*ids));
    for (size_t i = 0; i < d->snap.ndevs; i++) {
        if (!broker_ops_device(d, (int)i) ||
            broker_socket_path(w[n].path, sizeof w[n].path, d->cfg.data_dir,
                               d->snap.devs[i].id) != ACCEL_OK)
            continue;
        util_strlcpy(w[n].id, d->snap.devs[i].id, sizeof w[n].id);
        w[n].s = dev_settings(d, (int)i);
        ids[n] = w[n].id;
        n++;
    }
    pthread_mutex_unlock(&d->lock);
    log_revocations(d, bs);
    for (size_t i = 0; i < n; i++)
        broker_set_ensure(bs, w[i].id, w[i].path, &w[i].s);
    broker_set_retain(bs, ids, n);
    free(ids);
    free(w);
}

/* Process group and session of pid (fields 5 and 6 of /proc/<pid>/stat).
 * false when there is no such process. */
static bool group_session(pid_t pid, pid_t *pgrp, pid_t *sid)
{
    char path[64], buf[1024];
    const char *p;
    int fd, g, s;
    ssize_t n;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    if (p == NULL || sscanf(p + 1, " %*c %*d %d %d", &g, &s) != 2)
        return false;
    *pgrp = (pid_t)g;
    *sid = (pid_t)s;
    return true;
}

/* Is the app a bound to device dev_id (d->lock held)? */
static bool bound_to(struct accel_daemon *d, const struct app *a,
                     const char *dev_id)
{
    for (size_t i = 0; i < a->nrows; i++)
        if (a->rows[i].dev < d->snap.ndevs &&
            strcmp(d->snap.devs[a->rows[i].dev].id, dev_id) == 0)
            return true;
    return false;
}

/*
 * Admission (broker_admit_fn): `app` must be an app bound to this device
 * and running, and the peer one of its processes: in the app's cgroup
 * (cgroup_pid_in_app: this covers processes that setsid(), double-fork or
 * outlive the leader); on a machine without cgroup containment, in the
 * process group or the session of the app's leader (proc_start makes pid =
 * pgid = sid) with the leader still the one acceld started (pid and start
 * time). And the peer's uid must be the one the app runs as
 * (identity_app_uid; the leader's if that has none). A process outside the
 * app cannot claim its name. Called without the broker's lock; takes
 * d->lock briefly.
 */
static bool admit_peer(void *ctx, const char *dev_id, const char *app,
                       const struct broker_peer *peer, char *why, size_t cap)
{
    struct accel_daemon *d = ctx;
    struct app *a;
    pid_t leader = 0, pg, sid;
    uint64_t start = 0;
    bool bound = false, have_uid = false, contained;
    uid_t app_uid = 0;
    gid_t app_gid;
    struct stat st;
    char proc[64];

    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, app);
    if (a != NULL && bound_to(d, a, dev_id)) {
        bound = true;
        leader = (pid_t)a->pid;
        start = a->pid_start;
        have_uid = identity_app_uid(d, a, &app_uid, &app_gid) == ACCEL_OK;
    }
    pthread_mutex_unlock(&d->lock);
    if (!bound) {
        snprintf(why, cap, "no app named '%s' is bound to this device", app);
        return false;
    }
    contained = d->cg != NULL && d->cg->containment.tier != CGROUP_NONE;
    if (leader <= 0 || (!contained && !proc_alive(leader, start))) {
        snprintf(why, cap, "app '%s' is not running", app);
        return false;
    }
    if (contained ? !cgroup_pid_in_app(d->cg, peer->pid, app)
                  : (!group_session(peer->pid, &pg, &sid) ||
                     (pg != leader && sid != leader))) {
        snprintf(why, cap, "pid %d is not a process of app '%s'",
                 (int)peer->pid, app);
        return false;
    }
    snprintf(proc, sizeof proc, "/proc/%d", (int)leader);
    if (!have_uid && stat(proc, &st) == 0) {
        app_uid = st.st_uid; /* no uid on record: the leader's */
        have_uid = true;
    }
    if (!have_uid || app_uid != peer->uid) {
        snprintf(why, cap, "uid %u is not the uid app '%s' runs as",
                 (unsigned)peer->uid, app);
        return false;
    }
    return true;
}

enum accel_err broker_ops_start(struct accel_daemon *d)
{
    d->brokers = broker_set_new(sync_brokers, d);
    broker_set_admission(d->brokers, admit_peer, d);
    return broker_set_start(d->brokers);
}

void broker_ops_stop(struct accel_daemon *d)
{
    broker_set_free(d->brokers);
    d->brokers = NULL;
}

json_t *broker_ops_view(struct accel_daemon *d, int dev)
{
    struct broker_stats *s;
    json_t *o, *q, *apps;

    if (!broker_ops_device(d, dev))
        return json_null();
    s = xmalloc(sizeof(*s));
    if (!broker_set_stats(d->brokers, d->snap.devs[dev].id, s)) {
        struct broker_settings st = dev_settings(d, dev);
        free(s);
        return json_pack("{s:b, s:i, s:i, s:i, s:i}", "running", 0,
                         "quantumMs", (int)st.quantum_ms, "idleReleaseMs",
                         (int)st.idle_ms, "idleReleaseUs", (int)st.idle_us,
                         "revokeGraceMs", (int)st.grace_ms);
    }
    q = json_array();
    for (int i = 0; i < s->nqueue; i++)
        json_array_append_new(q, json_string(s->queue[i]));
    apps = json_array();
    for (int i = 0; i < s->napps; i++)
        json_array_append_new(
            apps, json_pack("{s:s, s:i, s:b, s:b, s:I, s:I, s:f, s:f, s:f, "
                            "s:I}", "app",
                            s->apps[i].name, "processes", s->apps[i].conns,
                            "holding", s->apps[i].holding, "waiting",
                            s->apps[i].waiting, "turns",
                            (json_int_t)s->apps[i].turns, "revocations",
                            (json_int_t)s->apps[i].revoked, "waitSeconds",
                            s->apps[i].wait_ns / 1e9, "heldSeconds",
                            s->apps[i].held_ns / 1e9, "creditMs",
                            s->apps[i].credit_ns / 1e6, "bytes",
                            (json_int_t)s->apps[i].bytes));
    o = json_pack("{s:b, s:s, s:s?, s:f, s:o, s:I, s:I, s:f, s:o, s:{s:I, "
                  "s:f, s:f}, s:i, s:i, s:i}",
                  "running", 1, "socket", s->path, "holder",
                  s->holder[0] ? s->holder : NULL, "heldSeconds",
                  s->held_ns / 1e9, "queue", q, "turns",
                  (json_int_t)s->turns_total, "revocations",
                  (json_int_t)s->revoked_total, "waitSeconds",
                  s->wait_ns_total / 1e9, "apps", apps, "handoff", "count",
                  (json_int_t)s->handoffs, "p50Ms", s->handoff_p50_ns / 1e6,
                  "p99Ms", s->handoff_p99_ns / 1e6, "quantumMs",
                  (int)s->set.quantum_ms, "idleReleaseMs",
                  (int)s->set.idle_ms, "revokeGraceMs",
                  (int)(s->set.grace_ms ? s->set.grace_ms
                                        : BROKER_DEFAULT_GRACE_MS));
    json_object_set_new(o, "idleReleaseUs", json_integer(s->set.idle_us));
    json_object_set_new(o, "oversubscribedQuantumMs",
                        json_integer(s->set.oversub_ms));
    json_object_set_new(o, "minTurnUs", json_integer(s->set.min_turn_us));
    json_object_set_new(o, "pagingPercent", json_integer(s->set.paging_pct));
    json_object_set_new(o, "turnMs", json_real(s->budget_ns / 1e6));
    json_object_set_new(o, "paging",
                        json_pack("{s:I, s:f}", "switches",
                                  (json_int_t)s->moves, "estimatedSeconds",
                                  s->moved_ns_total / 1e9));
    free(s);
    return o;
}

static void render_dev(struct accel_daemon *d, int dev, char **buf)
{
    struct broker_stats *s = xmalloc(sizeof(*s));
    const char *id = d->snap.devs[dev].id;
    char *t, *prev;
    uint64_t cum = 0;

    if (!broker_set_stats(d->brokers, id, s)) {
        free(s);
        return;
    }
    t = xasprintf("accel_timeslice_turns_total{device=\"%s\"} %llu\n"
                  "accel_timeslice_revocations_total{device=\"%s\"} %llu\n",
                  id, (unsigned long long)s->turns_total, id,
                  (unsigned long long)s->revoked_total);
    for (int i = 0; i < s->napps; i++) {
        prev = t;
        t = xasprintf("%saccel_timeslice_app_turns_total{device=\"%s\",app=\"%s\"} %llu\n"
                      "accel_timeslice_wait_seconds_total{device=\"%s\",app=\"%s\"} %.6f\n",
                      prev, id, s->apps[i].name,
                      (unsigned long long)s->apps[i].turns, id,
                      s->apps[i].name, s->apps[i].wait_ns / 1e9);
        free(prev);
    }
    for (int b = 0; b <= BROKER_HIST_BUCKETS; b++) {
        char le[32];
        cum += s->hist[b];
        if (b < BROKER_HIST_BUCKETS)
            snprintf(le, sizeof le, "%g", broker_hist_bounds[b]);
        else
            snprintf(le, sizeof le, "+Inf");
        prev = t;
        t = xasprintf("%saccel_timeslice_handoff_seconds_bucket{device=\"%s\",le=\"%s\"} %llu\n",
                      prev, id, le, (unsigned long long)cum);
        free(prev);
    }
    prev = *buf;
    *buf = xasprintf("%s%saccel_timeslice_handoff_seconds_sum{device=\"%s\"} %.9f\n"
                     "accel_timeslice_handoff_seconds_count{device=\"%s\"} %llu\n",
                     prev, t, id, s->hist_sum_s, id,
                     (unsigned long long)s->handoffs);
    free(prev);
    free(t);
    free(s);
}

char *broker_ops_metrics(struct accel_daemon *d)
{
    char *buf = xstrdup(
        "# HELP accel_timeslice_turns_total Turns granted on a time-sliced "
        "device (per app: accel_timeslice_app_turns_total).\n"
        "# TYPE accel_timeslice_turns_total counter\n"
        "# TYPE accel_timeslice_app_turns_total counter\n"
        "# HELP accel_timeslice_revocations_total Turns taken back from a "
        "holder that kept them past quantum + grace.\n"
        "# TYPE accel_timeslice_revocations_total counter\n"
        "# HELP accel_timeslice_wait_seconds_total Time apps waited for the "
        "turn.\n# TYPE accel_timeslice_wait_seconds_total counter\n"
        "# HELP accel_timeslice_handoff_seconds From asking the holder back "
        "to the next app's grant.\n"
        "# TYPE accel_timeslice_handoff_seconds histogram\n");
    for (size_t i = 0; i < d->snap.ndevs; i++)
        if (broker_ops_device(d, (int)i))
            render_dev(d, (int)i, &buf);
    return buf;
}

bool broker_ops_admit(struct accel_daemon *d, const char *dev_id,
                      const char *app, const struct broker_peer *peer,
                      char *why, size_t cap)
{
    return admit_peer(d, dev_id, app, peer, why, cap);
}
