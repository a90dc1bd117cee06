/* SPDX-License-Identifier: MIT */
/*
 * ts_broker.c: acceld's time-slice broker on its own, for the shim tests
 * and the handoff benchmark: `ts_broker SOCKET QUANTUM_MS IDLE_MS [GRACE_MS
 * [APP]]` serves one device until SIGTERM/SIGINT, then prints the device's
 * stats. Admission: the default (peers of the broker's own uid, or root),
 * or, with APP, only hellos that claim APP (a fake of acceld's check).
 * IDLE_MS may be given in microseconds as "<n>us". The settings acceld
 * fills in from the device (issue 49) come from the environment:
 * TS_BROKER_CARD_BYTES, TS_BROKER_LINK_BPS, TS_BROKER_MIN_TURN_US,
 * TS_BROKER_OVERSUB_MS, TS_BROKER_PAGING_PCT (0 or unset: the defaults).
 */
#include "common/accel_setup.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/node/broker.h"
#include "daemon/log.h"

static volatile sig_atomic_t stop;

static void on_sig(int s)
{
    stop = s;
}

static bool only_app(void *ctx, const char *dev_id, const char *app,
                     const struct broker_peer *peer, char *why, size_t cap)
{
    (void)dev_id;
    if (strcmp(app, ctx) == 0)
        return true;
    snprintf(why, cap, "pid %d is not a process of app '%s'", (int)peer->pid,
             app);
    return false;
}

static uint64_t env_u64(const char *name)
{
    const char *v = getenv(name);
    return v != NULL ? strtoull(v, NULL, 10) : 0;
}

int main(int argc, char **argv)
{
    struct broker_settings st;
    struct broker_stats s;
    struct broker_set *bs;
    struct sigaction sa = {.sa_handler = on_sig};

    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: ts_broker SOCKET QUANTUM_MS IDLE_MS "
                        "[GRACE_MS [APP]]\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    memset(&st, 0, sizeof(st));
    st.quantum_ms = (uint32_t)strtoul(argv[2], NULL, 10);
    {
        char *end;
        unsigned long v = strtoul(argv[3], &end, 10);
        if (strcmp(end, "us") == 0) {
            st.idle_us = (uint32_t)v;
            st.idle_ms = (uint32_t)((v + 999) / 1000);
        } else {
            st.idle_ms = (uint32_t)v;
        }
    }
    st.grace_ms = argc >= 5 ? (uint32_t)strtoul(argv[4], NULL, 10) : 0;
    st.card_bytes = env_u64("TS_BROKER_CARD_BYTES");
    st.link_bps = env_u64("TS_BROKER_LINK_BPS");
    st.min_turn_us = (uint32_t)env_u64("TS_BROKER_MIN_TURN_US");
    st.oversub_ms = (uint32_t)env_u64("TS_BROKER_OVERSUB_MS");
    st.paging_pct = (uint32_t)env_u64("TS_BROKER_PAGING_PCT");
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    bs = broker_set_new(NULL, NULL);
    if (argc == 6)
        broker_set_admission(bs, only_app, argv[5]);
    if (broker_set_ensure(bs, "dev0", argv[1], &st) != ACCEL_OK ||
        broker_set_start(bs) != ACCEL_OK) {
        fprintf(stderr, "ts_broker: cannot serve %s\n", argv[1]);
        return 1;
    }
    while (!stop)
        pause();
    if (broker_set_stats(bs, "dev0", &s))
        printf("turns %llu handoffs %llu p50_us %.1f p99_us %.1f "
               "revoked %llu waited_us %.1f\n",
               (unsigned long long)s.turns_total,
               (unsigned long long)s.handoffs, s.handoff_p50_ns / 1e3,
               s.handoff_p99_ns / 1e3, (unsigned long long)s.revoked_total,
               s.wait_ns_total / 1e3);
    if (broker_set_stats(bs, "dev0", &s)) {
        printf("moves %llu moved_us %.1f\n", (unsigned long long)s.moves,
               s.moved_ns_total / 1e3);
        for (int i = 0; i < s.napps; i++)
            printf("app %s turns %llu held_us %.1f waited_us %.1f\n",
                   s.apps[i].name, (unsigned long long)s.apps[i].turns,
                   s.apps[i].held_ns / 1e3, s.apps[i].wait_ns / 1e3);
    }
    broker_set_free(bs);
    {
        /* the card memfd's identity, kept beside the socket for acceld's
         * next start to adopt the memfd (broker.c); this broker has none */
        char card[160];
        snprintf(card, sizeof card, "%s.card", argv[1]);
        unlink(card);
    }
    return 0;
}
