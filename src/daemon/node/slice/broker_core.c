/* SPDX-License-Identifier: MIT */
/*
 * broker_core.c: the time-slice broker's state machine of one device (SPEC
 * 4.3): who holds the turn, who waits, when a turn is asked back and when
 * it is revoked, and the hand-off statistics. No I/O and no clock of its
 * own: the caller passes the time in and the state machine answers through
 * the send callback of its settings, so the unit tests drive it by hand
 * (tests/unit/test_broker.c). The server that runs it on sockets is
 * broker.c; the protocol and the rules are in broker.h and
 * docs/internals/timeslice.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/slice/broker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

const double broker_hist_bounds[BROKER_HIST_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0};

/* ---- the state machine of one device ---- */

#define US 1000ULL
#define MSNS 1000000ULL

static uint64_t idle_us(const struct broker_settings *s)
{
    return s->idle_us ? s->idle_us : (uint64_t)s->idle_ms * 1000ULL;
}

static uint64_t min_turn_ns(const struct broker_core *c)
{
    uint32_t us = c->set.min_turn_us ? c->set.min_turn_us
                                     : BROKER_DEFAULT_MIN_TURN_US;
    return (uint64_t)us * US;
}

static uint64_t quantum_ns(const struct broker_core *c)
{
    return (uint64_t)c->set.quantum_ms * MSNS;
}

/* The app's device memory: the most any of its processes reported. */
static uint64_t app_bytes(const struct broker_core *c, int app)
{
    uint64_t b = 0;
    for (int i = 0; i < BROKER_MAX_CONNS; i++)
        if (c->conns[i].open && c->conns[i].app == app &&
            c->conns[i].bytes > b)
            b = c->conns[i].bytes;
    return b;
}

/* Bytes the apps hold together, and whether any reported. */
static uint64_t all_bytes(const struct broker_core *c, bool *known)
{
    uint64_t sum = 0;
    *known = false;
    for (int a = 0; a < BROKER_MAX_APPS; a++) {
        uint64_t b;
        if (c->apps[a].name[0] == '\0' || c->apps[a].nconns == 0)
            continue;
        b = app_bytes(c, a);
        if (b > 0)
            *known = true;
        sum += b;
    }
    return sum;
}

uint64_t broker_core_move_ns(const struct broker_core *c, int app)
{
    bool known;
    uint64_t sum = all_bytes(c, &known), mine, over, bps;

    if (app < 0 || !known || c->set.card_bytes == 0 ||
        sum <= c->set.card_bytes)
        return 0;
    mine = app_bytes(c, app);
    over = sum - c->set.card_bytes;
    if (mine < over)
        over = mine;
    bps = c->set.link_bps ? c->set.link_bps : BROKER_DEFAULT_LINK_BPS;
    return (uint64_t)((double)over * 1e9 / (double)bps);
}

/* Memory moves at switches: the apps' reported bytes pass the card, or,
 * when no shim reported any, the card looks full (NVML). */
static bool moving(const struct broker_core *c)
{
    bool known;
    uint64_t sum = all_bytes(c, &known);
    if (!known)
        return c->set.card_full;
    return c->set.card_bytes > 0 && sum > c->set.card_bytes;
}

/* The turn of app while others wait: the quantum while nothing moves;
 * while memory moves at a switch, long enough that moving (move_ns before
 * the turn's work) is at most paging_pct of the device's time, and at
 * least oversub_ms: never a ping-pong of memory. */
static uint64_t budget_for(const struct broker_core *c, int app)
{
    uint64_t q = quantum_ns(c), move, pct, grow, floor;

    if (!moving(c))
        return q;
    floor = c->set.oversub_ms ? (uint64_t)c->set.oversub_ms * MSNS : q;
    if (floor < q)
        floor = q;
    move = broker_core_move_ns(c, app);
    pct = c->set.paging_pct && c->set.paging_pct < 100
              ? c->set.paging_pct : BROKER_DEFAULT_PAGING_PCT;
    grow = move / pct * (100 - pct);
    return grow > floor ? grow : floor;
}

void broker_core_init(struct broker_core *c, const struct broker_settings *s,
                      broker_send_fn send, void *ctx)
{
    memset(c, 0, sizeof(*c));
    c->set = *s;
    c->send = send;
    c->ctx = ctx;
    c->holder = -1;
    c->last_holder = -1;
    c->last_revoked = -1;
    for (int i = 0; i < BROKER_MAX_CONNS; i++)
        c->conns[i].app = -1;
}

void broker_core_configure(struct broker_core *c,
                           const struct broker_settings *s)
{
    c->set = *s;
}

void broker_core_open(struct broker_core *c, int conn)
{
    c->conns[conn] = (struct broker_conn){.open = true, .app = -1};
}

/* Send msg to every connection of app that matches (held or wanting). */
static void send_app(struct broker_core *c, int app, bool held_only,
                     const char *msg)
{
    for (int i = 0; i < BROKER_MAX_CONNS; i++) {
        struct broker_conn *k = &c->conns[i];
        if (k->open && k->app == app && (!held_only || k->held))
            c->send(c->ctx, i, msg);
    }
}

static bool app_wants(const struct broker_core *c, int app)
{
    for (int i = 0; i < BROKER_MAX_CONNS; i++)
        if (c->conns[i].open && c->conns[i].app == app && c->conns[i].wants)
            return true;
    return false;
}

static bool app_holds(const struct broker_core *c, int app)
{
    for (int i = 0; i < BROKER_MAX_CONNS; i++)
        if (c->conns[i].open && c->conns[i].app == app && c->conns[i].held)
            return true;
    return false;
}

static void end_wait(struct broker_core *c, int app, uint64_t now)
{
    struct broker_app *a = &c->apps[app];
    if (a->wait_since != 0 && now >= a->wait_since) {
        a->wait_ns += now - a->wait_since;
        c->wait_ns_total += now - a->wait_since;
    }
    a->wait_since = 0;
}

static void enqueue(struct broker_core *c, int app, uint64_t now)
{
    if (c->apps[app].queued)
        return;
    c->apps[app].queued = true;
    if (c->apps[app].wait_since == 0)
        c->apps[app].wait_since = now ? now : 1;
    c->queue[c->nqueue++] = app;
}

static void dequeue(struct broker_core *c, int app)
{
    int j = 0;
    for (int i = 0; i < c->nqueue; i++)
        if (c->queue[i] != app)
            c->queue[j++] = c->queue[i];
    c->nqueue = j;
    c->apps[app].queued = false;
}

static void record_handoff(struct broker_core *c, uint64_t ns)
{
    double s = (double)ns / 1e9;
    int b = 0;

    c->handoff[c->nhandoff % BROKER_HANDOFF_RING] = ns;
    c->nhandoff++;
    while (b < BROKER_HIST_BUCKETS && s > broker_hist_bounds[b])
        b++;
    c->hist[b]++;
    c->hist_sum_s += s;
}

static void grant_conn(struct broker_core *c, int conn)
{
    char msg[BROKER_MSG_MAX];
    c->conns[conn].held = true;
    uint64_t iu = idle_us(&c->set);
    unsigned ims = (unsigned)((iu + 999) / 1000);
    snprintf(msg, sizeof(msg), "G %d %u %u %llu", c->nqueue > 0 ? 1 : 0,
             c->set.quantum_ms, ims ? ims : 1, (unsigned long long)iu);
    c->send(c->ctx, conn, msg);
}

/* Give the turn to app (its wanting connections get G). A turn on the
 * app's credit lasts what the credit holds; any other the app's budget. */
static void grant(struct broker_core *c, int app, uint64_t now,
                  uint64_t asked_prev)
{
    struct broker_app *a = &c->apps[app];
    bool jump = a->jump;

    if (a->queued)
        dequeue(c, app);
    end_wait(c, app, now);
    c->holder = app;
    c->granted_ns = now;
    c->asked_ns = 0;
    c->cut_ns = 0;
    /* memory moves when another app's ran last */
    c->move_ns = c->last_holder >= 0 && c->last_holder != app
                     ? broker_core_move_ns(c, app) : 0;
    if (c->move_ns > 0) {
        c->moves++;
        c->moved_ns_total += c->move_ns;
    }
    c->last_holder = app;
    c->budget_ns = jump && a->credit_ns > 0 ? a->credit_ns
                                             : budget_for(c, app);
    a->credit_ns = 0; /* spent on this turn (what is left comes back) */
    a->gap_since = 0;
    c->contended_sent = c->nqueue > 0;
    a->turns++;
    c->turns_total++;
    if (asked_prev != 0 && now >= asked_prev)
        record_handoff(c, now - asked_prev);
    for (int i = 0; i < BROKER_MAX_CONNS; i++)
        if (c->conns[i].open && c->conns[i].app == app && c->conns[i].wants &&
            !c->conns[i].held)
            grant_conn(c, i);
}

/* The holder's turn ends at now: its device time is counted. Only a turn
 * given back of the app's own accord (a host gap: D before any X) leaves
 * credit, the rest of its budget (at most a quantum), and starts a gap
 * that earns more. A turn asked back (its budget used up, or cut short for
 * an app with credit) or revoked leaves none: the app wants the card more
 * than it gets, and credit for it would only make two apps cut each other
 * short, a handoff each time. */
static void end_turn(struct broker_core *c, uint64_t now, bool revoked)
{
    struct broker_app *a = &c->apps[c->holder];
    uint64_t used = now > c->granted_ns ? now - c->granted_ns : 0;
    bool own = !revoked && c->asked_ns == 0;

    a->held_ns += used;
    a->credit_ns = 0;
    if (own && used < c->budget_ns) {
        a->credit_ns = c->budget_ns - used;
        if (a->credit_ns > quantum_ns(c))
            a->credit_ns = quantum_ns(c);
    }
    a->jump = false;
    a->gap_since = own ? (now ? now : 1) : 0;
    c->cut_ns = 0;
}

/* The turn is free: the first waiting app that still wants it gets it. */
static void next_holder(struct broker_core *c, uint64_t now, uint64_t asked)
{
    while (c->nqueue > 0) {
        int app = c->queue[0];
        if (app_wants(c, app)) {
            grant(c, app, now, asked);
            return;
        }
        dequeue(c, app);
        c->apps[app].jump = false;
        end_wait(c, app, now);
    }
}

/* If the holder has no held connection left, the turn moves on. */
static void maybe_free(struct broker_core *c, int app, uint64_t now)
{
    uint64_t asked = c->asked_ns;

    if (c->holder != app || app_holds(c, app))
        return;
    end_turn(c, now, false);
    c->holder = -1;
    c->released_ns = now;
    c->asked_ns = 0;
    if (app_wants(c, app))
        enqueue(c, app, now); /* its other processes still want it: queue */
    next_holder(c, now, asked);
    if (c->holder < 0 && app_wants(c, app)) /* alone: straight back */
        grant(c, app, now, 0);
}

static int find_app(struct broker_core *c, const char *name)
{
    int free_slot = -1;
    for (int i = 0; i < BROKER_MAX_APPS; i++) {
        if (c->apps[i].name[0] != '\0' && strcmp(c->apps[i].name, name) == 0)
            return i;
        if (free_slot < 0 &&
            (c->apps[i].name[0] == '\0' ||
             (c->apps[i].nconns == 0 && c->holder != i && !c->apps[i].queued)))
            free_slot = i;
    }
    if (free_slot >= 0) {
        c->apps[free_slot] = (struct broker_app){0};
        util_strlcpy(c->apps[free_slot].name, name, BROKER_APP_MAX);
    }
    return free_slot;
}

enum accel_err broker_core_hello(struct broker_core *c, int conn,
                                 const char *app, uint64_t now)
{
    struct broker_conn *k = &c->conns[conn];
    int a;

    (void)now;
    if (!k->open || k->app >= 0 || app == NULL || app[0] == '\0' ||
        strlen(app) >= BROKER_APP_MAX)
        return ACCEL_EINVAL;
    a = find_app(c, app);
    if (a < 0)
        return ACCEL_ETOOBIG;
    k->app = a;
    c->apps[a].nconns++;
    return ACCEL_OK;
}

/* Ask the holder back (X) now; remember when. */
static void ask_back(struct broker_core *c, uint64_t now)
{
    c->asked_ns = now ? now : 1;
    send_app(c, c->holder, true, "X");
}

void broker_core_bytes(struct broker_core *c, int conn, uint64_t bytes)
{
    if (conn >= 0 && conn < BROKER_MAX_CONNS && c->conns[conn].open)
        c->conns[conn].bytes = bytes;
}

/* A waiting app with credit (its last turn ended early) goes ahead of the
 * apps without, and the holder is asked back once it has held the turn
 * for the minimum turn: an app that gave the turn back at a host gap gets
 * it again within a few ms of asking, not after a whole quantum. Not
 * while memory moves at a switch (each switch would page: no ping-pong). */
static void claim_credit(struct broker_core *c, int app, uint64_t now)
{
    struct broker_app *a = &c->apps[app];
    uint64_t cut;
    int pos = 0;

    if (a->gap_since != 0 && now > a->gap_since) {
        /* its gap: a fair share of that time was left unused */
        int napps = 0;
        for (int i = 0; i < BROKER_MAX_APPS; i++)
            napps += c->apps[i].name[0] != '\0' && c->apps[i].nconns > 0;
        a->credit_ns += (now - a->gap_since) / (uint64_t)(napps > 1 ? napps
                                                                     : 2);
        if (a->credit_ns > quantum_ns(c))
            a->credit_ns = quantum_ns(c);
    }
    a->gap_since = 0;
    if (a->jump || a->credit_ns < min_turn_ns(c) || moving(c))
        return;
    dequeue(c, app);
    while (pos < c->nqueue && c->apps[c->queue[pos]].jump)
        pos++;
    memmove(&c->queue[pos + 1], &c->queue[pos],
            (size_t)(c->nqueue - pos) * sizeof(c->queue[0]));
    c->queue[pos] = app;
    c->nqueue++;
    a->queued = true;
    a->jump = true;
    cut = c->granted_ns + min_turn_ns(c);
    if (cut < now)
        cut = now;
    if (c->cut_ns == 0 || cut < c->cut_ns)
        c->cut_ns = cut;
}

void broker_core_request(struct broker_core *c, int conn, uint64_t now)
{
    struct broker_conn *k = &c->conns[conn];

    if (!k->open || k->app < 0 || k->wants)
        return;
    k->wants = true;
    if (c->holder == k->app) {
        if (c->asked_ns == 0)
            grant_conn(c, conn); /* join the app's turn */
        return;                  /* else: queued again when it ends */
    }
    if (c->holder < 0) {
        grant(c, k->app, now, 0);
        return;
    }
    enqueue(c, k->app, now);
    claim_credit(c, k->app, now);
    if (!c->contended_sent) {
        c->contended_sent = true;
        send_app(c, c->holder, true, "C");
    }
    broker_core_tick(c, now);
}

void broker_core_done(struct broker_core *c, int conn, uint64_t now)
{
    struct broker_conn *k = &c->conns[conn];
    bool held = k->held;

    if (!k->open || k->app < 0)
        return;
    k->held = false;
    k->wants = false;
    if (held)
        maybe_free(c, k->app, now);
    else if (c->apps[k->app].queued && !app_wants(c, k->app)) {
        dequeue(c, k->app);
        c->apps[k->app].jump = false;
        c->apps[k->app].gap_since = now ? now : 1; /* a gap again */
        end_wait(c, k->app, now);
    }
}

void broker_core_close(struct broker_core *c, int conn, uint64_t now)
{
    struct broker_conn *k = &c->conns[conn];
    int app = k->app;

    if (!k->open)
        return;
    if (app >= 0) {
        broker_core_done(c, conn, now);
        c->apps[app].nconns--;
    }
    *k = (struct broker_conn){.app = -1};
    if (app >= 0 && c->holder == app)
        maybe_free(c, app, now);
}

static uint64_t grace_ns(const struct broker_core *c)
{
    uint32_t ms = c->set.grace_ms ? c->set.grace_ms : BROKER_DEFAULT_GRACE_MS;
    return (uint64_t)ms * 1000000ULL;
}

/* The holder ignored X for the grace period: its held connections lose the
 * turn (V) and the next waiter gets it. Its processes ask again with R. */
static void revoke_turn(struct broker_core *c, uint64_t now)
{
    int app = c->holder;
    uint64_t asked = c->asked_ns;

    for (int i = 0; i < BROKER_MAX_CONNS; i++) {
        struct broker_conn *k = &c->conns[i];
        if (k->open && k->app == app && k->held) {
            k->held = false;
            k->wants = false;
            c->send(c->ctx, i, "V");
        }
    }
    end_turn(c, now, true);
    c->apps[app].revoked++;
    c->revoked_total++;
    c->last_revoked = app;
    c->holder = -1;
    c->released_ns = now;
    c->asked_ns = 0;
    if (app_wants(c, app))
        enqueue(c, app, now); /* its waiting processes: behind the others */
    next_holder(c, now, asked);
    if (c->holder < 0 && app_wants(c, app))
        grant(c, app, now, 0);
}

uint64_t broker_core_tick(struct broker_core *c, uint64_t now)
{
    uint64_t due;

    if (c->holder < 0 || c->nqueue == 0)
        return 0;
    if (c->asked_ns == 0 && moving(c)) {
        /* memory moves (perhaps learnt from a later "R <bytes>"): the
         * turn grows to what paging needs, and no credit cuts it */
        uint64_t b = budget_for(c, c->holder);
        if (b > c->budget_ns)
            c->budget_ns = b;
        c->cut_ns = 0;
    }
    if (c->asked_ns == 0) {
        due = c->granted_ns + c->budget_ns;
        if (c->cut_ns != 0 && c->cut_ns < due)
            due = c->cut_ns;
        if (now < due)
            return due;
        ask_back(c, now);
    }
    due = c->asked_ns + grace_ns(c);
    if (now < due)
        return due;
    revoke_turn(c, now);
    return broker_core_tick(c, now); /* the new holder's quantum */
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void percentiles(const struct broker_core *c, struct broker_stats *out)
{
    uint64_t tmp[BROKER_HANDOFF_RING];
    size_t n = c->nhandoff < BROKER_HANDOFF_RING ? (size_t)c->nhandoff
                                                 : BROKER_HANDOFF_RING;
    if (n == 0)
        return;
    memcpy(tmp, c->handoff, n * sizeof(tmp[0]));
    qsort(tmp, n, sizeof(tmp[0]), cmp_u64);
    out->handoff_p50_ns = tmp[(n - 1) / 2];
    out->handoff_p99_ns = tmp[(n * 99 + 99) / 100 - 1];
}

void broker_core_stats(const struct broker_core *c, uint64_t now,
                       struct broker_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (c->holder >= 0) {
        util_strlcpy(out->holder, c->apps[c->holder].name, BROKER_APP_MAX);
        out->held_ns = now > c->granted_ns ? now - c->granted_ns : 0;
        out->budget_ns = c->budget_ns;
    }
    out->moves = c->moves;
    out->moved_ns_total = c->moved_ns_total;
    for (int i = 0; i < c->nqueue; i++)
        util_strlcpy(out->queue[i], c->apps[c->queue[i]].name, BROKER_APP_MAX);
    out->nqueue = c->nqueue;
    out->wait_ns_total = c->wait_ns_total;
    for (int i = 0; i < BROKER_MAX_APPS; i++) {
        const struct broker_app *a = &c->apps[i];
        struct broker_app_stats *s = &out->apps[out->napps];
        uint64_t cur = a->wait_since && now > a->wait_since
                           ? now - a->wait_since : 0;
        if (a->name[0] == '\0')
            continue;
        util_strlcpy(s->name, a->name, BROKER_APP_MAX);
        s->conns = a->nconns;
        s->holding = c->holder == i;
        s->waiting = a->queued;
        s->turns = a->turns;
        s->revoked = a->revoked;
        s->wait_ns = a->wait_ns + cur;
        s->held_ns = a->held_ns + (c->holder == i && now > c->granted_ns
                                       ? now - c->granted_ns : 0);
        s->credit_ns = a->credit_ns;
        s->bytes = app_bytes(c, i);
        out->wait_ns_total += cur;
        out->napps++;
    }
    out->turns_total = c->turns_total;
    out->revoked_total = c->revoked_total;
    out->handoffs = c->nhandoff;
    memcpy(out->hist, c->hist, sizeof(out->hist));
    out->hist_sum_s = c->hist_sum_s;
    out->set = c->set;
    percentiles(c, out);
}
