/* SPDX-License-Identifier: MIT */
/* test_broker_turns.c: the broker's turn rules of issue 49 (broker_core_*,
 * pure, a fake clock): credit for a turn given back early (an app that
 * gave the turn back at a host gap takes it again after the holder's
 * minimum turn, not after its whole quantum), device time held per app,
 * turns that grow while a switch must move memory (and no credit jumps
 * then: no ping-pong), the idle time in microseconds in the grant. The
 * older rules are in test_broker.c. */
#include "common/accel_setup.h"
#include "daemon/node/slice/broker.h"

#include "harness.h"

#define US 1000ULL
#define MS 1000000ULL
#define GIB (1ULL << 30)

struct sink {
    char last[BROKER_MAX_CONNS][BROKER_MSG_MAX];
    int count[BROKER_MAX_CONNS];
};

static void sink_send(void *ctx, int conn, const char *msg)
{
    struct sink *s = ctx;
    snprintf(s->last[conn], BROKER_MSG_MAX, "%s", msg);
    s->count[conn]++;
}

static struct broker_core core;
static struct sink sink;

static void clear(int conn)
{
    sink.last[conn][0] = '\0';
}

static void setup_with(const struct broker_settings *st)
{
    memset(&sink, 0, sizeof(sink));
    broker_core_init(&core, st, sink_send, &sink);
}

/* quantum 100 ms, idle 500 us, min turn 2 ms */
static void setup(void)
{
    struct broker_settings st = {.quantum_ms = 100, .idle_ms = 1,
                                 .idle_us = 500, .min_turn_us = 2000};
    setup_with(&st);
}

static void conn(int k, const char *app)
{
    broker_core_open(&core, k);
    ASSERT_EQ(broker_core_hello(&core, k, app, 0), ACCEL_OK);
}

static int is(int k, const char *msg)
{
    return strcmp(sink.last[k], msg) == 0;
}

/* a (conn 0) holds from 1 ms, b (conn 1) waits from 2 ms. */
static void a_holds_b_waits(void)
{
    setup();
    conn(0, "a");
    conn(1, "b");
    broker_core_request(&core, 0, 1 * MS);
    broker_core_request(&core, 1, 2 * MS);
}

static const struct broker_app_stats *app(const struct broker_stats *s,
                                          const char *name)
{
    for (int i = 0; i < s->napps; i++)
        if (strcmp(s->apps[i].name, name) == 0)
            return &s->apps[i];
    return NULL;
}

TEST(turns_grant_carries_idle_us)
{
    setup();
    conn(0, "a");
    broker_core_request(&core, 0, 1 * MS);
    /* whole ms for shims before issue 49 (rounded up), then microseconds */
    ASSERT_STR_EQ(sink.last[0], "G 0 100 1 500");
}

/* Issue 49's starvation: an app that gave the turn back early (a host
 * gap) used to wait the holder's whole quantum to get it back. */
TEST(turns_credit_gets_turn_back_after_min_turn)
{
    struct broker_stats st;
    a_holds_b_waits();
    broker_core_done(&core, 0, 11 * MS); /* a's host gap: gave it back */
    ASSERT_STR_EQ(sink.last[1], "G 0 100 1 500");
    broker_core_stats(&core, 11 * MS, &st);
    ASSERT_U64_EQ(app(&st, "a")->credit_ns, 90 * MS); /* 100 - 10 used */
    /* a asks again 1 ms later: b has held for 1 ms, less than its 2 ms
     * minimum turn, so it is asked back at 13 ms */
    broker_core_request(&core, 0, 12 * MS);
    ASSERT_STR_EQ(sink.last[1], "C");
    ASSERT_U64_EQ(broker_core_tick(&core, 12 * MS), 13 * MS);
    ASSERT_STR_EQ(sink.last[1], "C");
    broker_core_tick(&core, 13 * MS);
    ASSERT_STR_EQ(sink.last[1], "X");
    broker_core_done(&core, 1, 13 * MS + 200 * US);
    ASSERT_STR_EQ(sink.last[0], "G 0 100 1 500");
    broker_core_request(&core, 1, 13 * MS + 200 * US); /* b is busy */
    broker_core_stats(&core, 14 * MS, &st);
    ASSERT_STR_EQ(st.holder, "a");
    /* a's turn is its credit: 90 ms, and half of its 1 ms gap (its fair
     * share of two apps), not a fresh quantum */
    ASSERT_U64_EQ(st.budget_ns, 90 * MS + 500 * US);
    ASSERT_U64_EQ(app(&st, "a")->credit_ns, 0);
    /* b was cut short (asked back): no credit, it waits in FIFO order;
     * credit for it would make the two cut each other short */
    ASSERT_U64_EQ(app(&st, "b")->credit_ns, 0);
    ASSERT_U64_EQ(broker_core_tick(&core, 14 * MS), 13 * MS + 200 * US +
                                                         90 * MS + 500 * US);
}

TEST(turns_credit_asked_at_once_after_min_turn)
{
    a_holds_b_waits();
    broker_core_done(&core, 0, 11 * MS);
    clear(1);
    broker_core_request(&core, 0, 40 * MS); /* b held 29 ms > 2 ms */
    ASSERT_STR_EQ(sink.last[1], "X");
}

/* Without credit (the last turn used its whole budget) nothing changes:
 * the waiter waits for the holder's quantum. */
TEST(turns_no_credit_after_whole_turn)
{
    struct broker_stats st;
    a_holds_b_waits();
    broker_core_tick(&core, 101 * MS);
    ASSERT_STR_EQ(sink.last[0], "X");
    broker_core_done(&core, 0, 102 * MS);
    ASSERT_STR_EQ(sink.last[1], "G 0 100 1 500");
    broker_core_stats(&core, 102 * MS, &st);
    ASSERT_U64_EQ(app(&st, "a")->credit_ns, 0);
    clear(1);
    broker_core_request(&core, 0, 103 * MS);
    ASSERT_STR_EQ(sink.last[1], "C");
    ASSERT_U64_EQ(broker_core_tick(&core, 104 * MS), 202 * MS);
    ASSERT_STR_EQ(sink.last[1], "C");
    broker_core_tick(&core, 202 * MS);
    ASSERT_STR_EQ(sink.last[1], "X");
}

/* Credit below the minimum turn claims nothing. */
TEST(turns_small_credit_claims_nothing)
{
    a_holds_b_waits();
    broker_core_done(&core, 0, 100 * MS); /* 1 ms left: below 2 ms */
    clear(1);
    broker_core_request(&core, 0, 101 * MS); /* + half its 1 ms gap */
    ASSERT_STR_EQ(sink.last[1], "C");
    ASSERT_U64_EQ(broker_core_tick(&core, 101 * MS), 200 * MS);
}

/* A gap earns credit: the app's fair share of it (1 / the apps). */
TEST(turns_gap_earns_credit)
{
    a_holds_b_waits();
    broker_core_tick(&core, 101 * MS);
    broker_core_done(&core, 0, 101 * MS); /* a used its whole turn */
    clear(1);
    /* asked back: no gap follows, 3 ms later it has no credit */
    broker_core_request(&core, 0, 104 * MS);
    ASSERT_STR_EQ(sink.last[1], "C");
    broker_core_done(&core, 0, 105 * MS);  /* gives up waiting: a gap */
    broker_core_request(&core, 0, 108 * MS); /* 3 ms: 1.5 ms, too little */
    ASSERT_STR_EQ(sink.last[1], "C");
    broker_core_done(&core, 0, 108 * MS);
    broker_core_request(&core, 0, 109 * MS); /* + 0.5: 2 ms, enough */
    ASSERT_STR_EQ(sink.last[1], "X");
}

/* Credit is at most one quantum (never a bank of many). */
TEST(turns_credit_capped_at_quantum)
{
    struct broker_settings st = {.quantum_ms = 100, .idle_us = 500,
                                 .min_turn_us = 2000, .oversub_ms = 1000,
                                 .card_bytes = 24 * GIB,
                                 .link_bps = 10000000000ULL};
    struct broker_stats s;
    setup_with(&st);
    conn(0, "a");
    conn(1, "b");
    broker_core_bytes(&core, 0, 14 * GIB);
    broker_core_bytes(&core, 1, 14 * GIB);
    broker_core_request(&core, 0, 1 * MS);
    broker_core_request(&core, 1, 2 * MS);
    broker_core_stats(&core, 2 * MS, &s);
    ASSERT_GE(s.budget_ns, 1000 * MS); /* memory moves: a long turn */
    broker_core_done(&core, 0, 11 * MS); /* a gives back early */
    broker_core_stats(&core, 11 * MS, &s);
    ASSERT_U64_EQ(app(&s, "a")->credit_ns, 100 * MS);
}

/* A revoked turn leaves no credit. */
TEST(turns_revoked_turn_no_credit)
{
    struct broker_settings st = {.quantum_ms = 100, .idle_us = 500,
                                 .grace_ms = 50, .min_turn_us = 2000};
    struct broker_stats s;
    setup_with(&st);
    conn(0, "a");
    conn(1, "b");
    broker_core_request(&core, 0, 1 * MS);
    broker_core_request(&core, 1, 2 * MS);
    broker_core_tick(&core, 101 * MS);
    broker_core_tick(&core, 151 * MS);
    ASSERT_STR_EQ(sink.last[0], "V");
    broker_core_stats(&core, 151 * MS, &s);
    ASSERT_U64_EQ(app(&s, "a")->credit_ns, 0);
    ASSERT_U64_EQ(app(&s, "a")->held_ns, 150 * MS);
    /* nor does the time after: it asks again 30 ms later and waits */
    broker_core_request(&core, 0, 181 * MS);
    ASSERT_STR_EQ(sink.last[1], "C");
}

/* Apps with credit go ahead of apps without, in the order they asked. */
TEST(turns_credit_queue_order)
{
    struct broker_stats s;
    setup();
    conn(0, "a");
    conn(1, "b");
    conn(2, "c");
    conn(3, "d");
    broker_core_request(&core, 0, 1 * MS);  /* a holds */
    broker_core_request(&core, 1, 2 * MS);  /* b waits */
    broker_core_done(&core, 0, 5 * MS);     /* a: early, credit; b holds */
    broker_core_request(&core, 2, 6 * MS);  /* c waits: no credit */
    broker_core_request(&core, 3, 6 * MS);  /* d waits: no credit */
    broker_core_request(&core, 0, 7 * MS);  /* a: credit, ahead */
    broker_core_stats(&core, 7 * MS, &s);
    ASSERT_EQ(s.nqueue, 3);
    ASSERT_STR_EQ(s.queue[0], "a");
    ASSERT_STR_EQ(s.queue[1], "c");
    ASSERT_STR_EQ(s.queue[2], "d");
    ASSERT_STR_EQ(sink.last[1], "X"); /* b held 2 ms: cut */
    broker_core_done(&core, 1, 7 * MS + 100 * US);
    broker_core_stats(&core, 8 * MS, &s);
    ASSERT_STR_EQ(s.holder, "a");
}

/* An app that no longer wants the turn leaves the queue and its place. */
TEST(turns_credit_waiter_gives_up)
{
    struct broker_stats s;
    a_holds_b_waits();
    broker_core_done(&core, 0, 11 * MS);
    broker_core_request(&core, 0, 11 * MS + 500 * US);
    broker_core_done(&core, 0, 12 * MS); /* not wanted after all */
    broker_core_stats(&core, 12 * MS, &s);
    ASSERT_EQ(s.nqueue, 0);
    ASSERT_EQ(broker_core_tick(&core, 20 * MS), 0); /* b alone: kept */
}

/* Device time held per app, the current turn included. */
TEST(turns_held_time_counted)
{
    struct broker_stats s;
    a_holds_b_waits();
    broker_core_tick(&core, 101 * MS);
    broker_core_done(&core, 0, 103 * MS);
    broker_core_stats(&core, 150 * MS, &s);
    ASSERT_U64_EQ(app(&s, "a")->held_ns, 102 * MS);
    ASSERT_U64_EQ(app(&s, "b")->held_ns, 47 * MS);
}

/* Two busy apps, one starting with credit: it cuts the other short once;
 * a turn cut short leaves no credit, so no ping-pong follows and turns are
 * whole quanta again. */
TEST(turns_credit_ping_pong_ends)
{
    uint64_t t, last_switch = 0, longest_late = 0;
    int switches_late = 0, switches = 0;
    setup();
    conn(0, "a");
    conn(1, "b");
    broker_core_request(&core, 0, 1 * MS);
    broker_core_request(&core, 1, 1 * MS);
    broker_core_done(&core, 0, 2 * MS);  /* a: 99 ms credit */
    broker_core_request(&core, 0, 3 * MS);
    for (t = 3 * MS; t < 3000 * MS; t += 100 * US) {
        broker_core_tick(&core, t);
        for (int k = 0; k < 2; k++)
            if (is(k, "X")) {
                clear(k);
                broker_core_done(&core, k, t);
                broker_core_request(&core, k, t); /* busy: asks again */
                switches++;
                if (t > 1000 * MS) {
                    switches_late++;
                    if (last_switch && t - last_switch > longest_late)
                        longest_late = t - last_switch;
                }
                last_switch = t;
            }
    }
    /* 3 s of 100 ms turns and the one cut: ~30 switches (with credit for
     * a cut turn they would cut each other every 2 ms at first) */
    ASSERT_LE(switches, 33);
    /* after the first second: turns of the whole quantum, ~10 a second */
    ASSERT_LE(switches_late, 22);
    ASSERT_GE(switches_late, 18);
    ASSERT_GE(longest_late, 100 * MS);
}

/* The memory estimate: nothing moves while the apps fit the card; then
 * min(the app's bytes, what passes the card) over the link. */
TEST(turns_move_estimate)
{
    struct broker_settings st = {.quantum_ms = 30, .idle_us = 500,
                                 .card_bytes = 24 * GIB,
                                 .link_bps = 8ULL * GIB};
    setup_with(&st);
    conn(0, "a");
    conn(1, "b");
    conn(2, "b"); /* a second process of b: the app's most counts */
    ASSERT_U64_EQ(broker_core_move_ns(&core, 0), 0); /* none reported */
    broker_core_bytes(&core, 0, 10 * GIB);
    broker_core_bytes(&core, 1, 12 * GIB);
    broker_core_bytes(&core, 2, 11 * GIB);
    ASSERT_U64_EQ(broker_core_move_ns(&core, 0), 0); /* 22 GiB fit */
    broker_core_bytes(&core, 1, 16 * GIB);
    /* 26 GiB: 2 GiB pass the card; at 8 GiB/s, 250 ms */
    ASSERT_U64_EQ(broker_core_move_ns(&core, 0), 250 * MS);
    ASSERT_U64_EQ(broker_core_move_ns(&core, 1), 250 * MS);
    broker_core_bytes(&core, 0, 1 * GIB);
    /* 17 GiB fit again */
    ASSERT_U64_EQ(broker_core_move_ns(&core, 1), 0);
    broker_core_bytes(&core, 0, 10 * GIB);
    broker_core_bytes(&core, 1, 20 * GIB);
    /* 6 GiB over: a brings back at most its own... */
    ASSERT_U64_EQ(broker_core_move_ns(&core, 0), 750 * MS);
    broker_core_bytes(&core, 0, 1 * GIB);
    broker_core_bytes(&core, 1, 24 * GIB);
    /* ...1 GiB over, and a has 1 GiB: 125 ms */
    ASSERT_U64_EQ(broker_core_move_ns(&core, 0), 125 * MS);
    /* unknown card: nothing is said to move */
    st.card_bytes = 0;
    broker_core_configure(&core, &st);
    ASSERT_U64_EQ(broker_core_move_ns(&core, 0), 0);
}

/* Oversubscribed (two 14 GiB apps, 24 GiB card): each turn is long enough
 * that moving is at most paging_pct of the device time, and no credit
 * jump cuts a turn (each switch would page). */
TEST(turns_grow_while_memory_moves)
{
    struct broker_settings st = {.quantum_ms = 30, .idle_us = 500,
                                 .min_turn_us = 2000, .oversub_ms = 100,
                                 .paging_pct = 10, .card_bytes = 24 * GIB,
                                 .link_bps = 8ULL * GIB};
    struct broker_stats s;
    uint64_t move;
    setup_with(&st);
    conn(0, "a");
    conn(1, "b");
    broker_core_bytes(&core, 0, 14 * GIB);
    broker_core_bytes(&core, 1, 14 * GIB);
    move = broker_core_move_ns(&core, 1); /* 4 GiB at 8 GiB/s: 500 ms */
    ASSERT_U64_EQ(move, 500 * MS);
    broker_core_request(&core, 0, 1 * MS);
    broker_core_request(&core, 1, 2 * MS);
    broker_core_stats(&core, 2 * MS, &s);
    ASSERT_U64_EQ(s.budget_ns, 4500 * MS); /* 9 x 500 ms: 10 % moving */
    broker_core_done(&core, 0, 10 * MS);   /* a: gives back early */
    broker_core_stats(&core, 10 * MS, &s);
    ASSERT_STR_EQ(s.holder, "b");
    ASSERT_U64_EQ(s.moves, 1);
    ASSERT_U64_EQ(s.moved_ns_total, 500 * MS);
    clear(1);
    broker_core_request(&core, 0, 20 * MS); /* credit, but memory moves */
    ASSERT_STR_EQ(sink.last[1], "C");
    ASSERT_U64_EQ(broker_core_tick(&core, 20 * MS), 4510 * MS);
    /* the paging share of a cycle of two turns stays within 10 % */
    ASSERT_LE(2 * move * 100, (2 * s.budget_ns + 2 * move) * 10);
    /* the floor: a small overflow keeps turns of oversub_ms */
    broker_core_bytes(&core, 0, 10 * GIB + 10 * (1ULL << 20));
    broker_core_bytes(&core, 1, 14 * GIB);
    broker_core_tick(&core, 4510 * MS);
    broker_core_done(&core, 1, 4511 * MS);
    broker_core_stats(&core, 4511 * MS, &s);
    ASSERT_STR_EQ(s.holder, "a");
    ASSERT_U64_EQ(s.budget_ns, 100 * MS);
}

/* While the apps fit the card, turns are the quantum, however large the
 * apps. */
/* The bytes come with each "R": a turn granted before the second app
 * said how much it holds grows once it has. */
TEST(turns_grow_when_bytes_learnt)
{
    struct broker_settings st = {.quantum_ms = 30, .idle_us = 500,
                                 .oversub_ms = 100, .paging_pct = 10,
                                 .card_bytes = 24 * GIB,
                                 .link_bps = 8ULL * GIB};
    struct broker_stats s;
    setup_with(&st);
    conn(0, "a");
    conn(1, "b");
    broker_core_bytes(&core, 0, 14 * GIB);
    broker_core_request(&core, 0, 1 * MS);
    broker_core_stats(&core, 1 * MS, &s);
    ASSERT_U64_EQ(s.budget_ns, 30 * MS); /* alone it fits */
    broker_core_bytes(&core, 1, 14 * GIB);
    broker_core_request(&core, 1, 2 * MS);
    broker_core_stats(&core, 2 * MS, &s);
    ASSERT_U64_EQ(s.budget_ns, 4500 * MS);
    ASSERT_U64_EQ(broker_core_tick(&core, 31 * MS), 4501 * MS);
}

/* The default plans for 5 % paging (the bar is 10 %): 19 x the move. */
TEST(turns_default_paging_share)
{
    struct broker_settings st = {.quantum_ms = 30, .idle_us = 500,
                                 .card_bytes = 24 * GIB,
                                 .link_bps = 8ULL * GIB};
    struct broker_stats s;
    setup_with(&st);
    conn(0, "a");
    conn(1, "b");
    broker_core_bytes(&core, 0, 14 * GIB);
    broker_core_bytes(&core, 1, 14 * GIB);
    broker_core_request(&core, 0, 1 * MS);
    broker_core_request(&core, 1, 2 * MS);
    broker_core_stats(&core, 2 * MS, &s);
    ASSERT_U64_EQ(s.budget_ns, 19 * 500 * MS);
}

TEST(turns_quantum_while_memory_fits)
{
    struct broker_settings st = {.quantum_ms = 30, .idle_us = 500,
                                 .oversub_ms = 1000, .card_bytes = 24 * GIB};
    struct broker_stats s;
    setup_with(&st);
    conn(0, "a");
    conn(1, "b");
    broker_core_bytes(&core, 0, 11 * GIB);
    broker_core_bytes(&core, 1, 11 * GIB);
    broker_core_request(&core, 0, 1 * MS);
    broker_core_request(&core, 1, 2 * MS);
    broker_core_stats(&core, 2 * MS, &s);
    ASSERT_U64_EQ(s.budget_ns, 30 * MS);
    ASSERT_U64_EQ(broker_core_tick(&core, 2 * MS), 31 * MS);
}

/* No shim reported its bytes (older shims) and NVML says the card is
 * full: turns of oversub_ms, and no credit jumps. */
TEST(turns_card_full_fallback)
{
    struct broker_settings st = {.quantum_ms = 30, .idle_us = 500,
                                 .oversub_ms = 1000, .card_bytes = 24 * GIB,
                                 .card_full = true};
    struct broker_stats s;
    setup_with(&st);
    conn(0, "a");
    conn(1, "b");
    broker_core_request(&core, 0, 1 * MS);
    broker_core_request(&core, 1, 2 * MS);
    broker_core_stats(&core, 2 * MS, &s);
    ASSERT_U64_EQ(s.budget_ns, 1000 * MS);
    /* once a shim reports bytes that fit, the reports decide */
    broker_core_bytes(&core, 0, 1 * GIB);
    broker_core_tick(&core, 1001 * MS);
    broker_core_done(&core, 0, 1002 * MS);
    broker_core_stats(&core, 1002 * MS, &s);
    ASSERT_U64_EQ(s.budget_ns, 30 * MS);
}

/* The bursty app of issue 49 beside a busy one, on the broker alone: the
 * bursty app (1 ms of work, then a host gap) gives the turn back after
 * its idle time and asks again after its gap; the busy app always wants
 * it and gives it back when asked, 200 us later. The bursty app waits at
 * most the minimum turn plus the busy app's handoff for each burst (the
 * old rule: up to a whole quantum), and the busy app keeps at least 40 %
 * of the time. */
static void bursty_beside_busy(uint64_t gap, uint64_t *worst_wait,
                               double *busy_share, int *bursts)
{
    enum { WORKING, IDLE, GAP, WAITING } bs = WAITING;
    uint64_t t, phase_end = 0, asked = 0, busy_release = 0;
    struct broker_stats s;
    bool busy_held = false;

    setup();
    conn(0, "bursty");
    conn(1, "busy");
    broker_core_request(&core, 1, 1 * MS);
    busy_held = true;
    clear(1);
    broker_core_request(&core, 0, 2 * MS);
    asked = 2 * MS;
    *worst_wait = 0;
    *bursts = 0;
    for (t = 2 * MS; t < 2000 * MS; t += 50 * US) {
        broker_core_tick(&core, t);
        if (busy_held && is(1, "X") && busy_release == 0)
            busy_release = t + 200 * US; /* its handoff */
        if (busy_release != 0 && t >= busy_release) {
            clear(1);
            busy_release = 0;
            busy_held = false;
            broker_core_done(&core, 1, t);
            broker_core_request(&core, 1, t);
        }
        if (!busy_held && strncmp(sink.last[1], "G", 1) == 0) {
            busy_held = true;
            clear(1);
        }
        switch (bs) {
        case WAITING:
            if (strncmp(sink.last[0], "G", 1) == 0) {
                clear(0);
                if (t - asked > *worst_wait && *bursts > 2)
                    *worst_wait = t - asked;
                bs = WORKING;
                phase_end = t + 1 * MS;
            }
            break;
        case WORKING:
            if (t >= phase_end) {
                (*bursts)++;
                bs = IDLE;
                phase_end = t + 500 * US; /* idle detection */
            }
            break;
        case IDLE:
            if (t >= phase_end || gap < 500 * US) {
                clear(0);
                broker_core_done(&core, 0, t);
                bs = GAP;
                phase_end = t + gap - (gap < 500 * US ? 0 : 500 * US);
            }
            break;
        case GAP:
            if (t >= phase_end) {
                broker_core_request(&core, 0, t);
                asked = t;
                bs = WAITING;
            }
            break;
        }
    }
    broker_core_stats(&core, t, &s);
    *busy_share = (double)app(&s, "busy")->held_ns / (double)(t - 1 * MS);
}

TEST(turns_bursty_beside_busy)
{
    uint64_t gaps[] = {1 * MS, 10 * MS, 30 * MS};
    for (size_t i = 0; i < sizeof(gaps) / sizeof(gaps[0]); i++) {
        uint64_t worst;
        double share;
        int bursts;
        bursty_beside_busy(gaps[i], &worst, &share, &bursts);
        /* every burst: min turn (2 ms) + the handoff (0.2 ms) + steps
         * (the old broker: up to the 100 ms quantum); at 1 ms gaps the
         * bursty app wants more than its fair share, its credit runs out
         * and it waits a quantum now and then */
        ASSERT_LE(worst, gaps[i] >= 10 * MS ? 3 * MS : 103 * MS);
        ASSERT_GE(share, 0.4);
        /* solo: 2000 ms / (1 ms + gap) bursts; here at least 75 % at
         * 10 and 30 ms gaps and 40 % at 1 ms */
        ASSERT_GE((double)bursts * (1.0 + (double)gaps[i] / 1e6) / 2000.0,
                  gaps[i] >= 10 * MS ? 0.75 : 0.4);
    }
}

#define LIST(XX)                                                               \
    XX(turns_grant_carries_idle_us)                                            \
    XX(turns_credit_gets_turn_back_after_min_turn)                             \
    XX(turns_credit_asked_at_once_after_min_turn)                              \
    XX(turns_no_credit_after_whole_turn)                                       \
    XX(turns_small_credit_claims_nothing)                                      \
    XX(turns_gap_earns_credit)                                                 \
    XX(turns_credit_capped_at_quantum)                                         \
    XX(turns_revoked_turn_no_credit)                                           \
    XX(turns_credit_queue_order)                                               \
    XX(turns_credit_waiter_gives_up)                                           \
    XX(turns_held_time_counted)                                                \
    XX(turns_credit_ping_pong_ends)                                            \
    XX(turns_move_estimate)                                                    \
    XX(turns_grow_while_memory_moves)                                          \
    XX(turns_grow_when_bytes_learnt)                                           \
    XX(turns_default_paging_share)                                             \
    XX(turns_quantum_while_memory_fits)                                        \
    XX(turns_card_full_fallback)                                               \
    XX(turns_bursty_beside_busy)
TEST_MAIN(LIST)
