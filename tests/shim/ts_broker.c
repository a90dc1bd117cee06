/* SPDX-License-Identifier: MIT */
/*
 * ts_broker.c: acceld's time-slice broker on its own, for the shim tests
 * and the handoff benchmark: `ts_broker SOCKET QUANTUM_MS IDLE_MS [GRACE_MS
 * [APP]]` serves one device until SIGTERM/SIGINT, then prints the device's
 * stats. Admission: the default (peers of the broker's own uid, or root),
 * or, with APP, only hellos that claim APP (a fake of acceld's check).
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
    st.quantum_ms = (uint32_t)strtoul(argv[2], NULL, 10);
    st.idle_ms = (uint32_t)strtoul(argv[3], NULL, 10);
    st.grace_ms = argc >= 5 ? (uint32_t)strtoul(argv[4], NULL, 10) : 0;
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
    broker_set_free(bs);
    return 0;
}
