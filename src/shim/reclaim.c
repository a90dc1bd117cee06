/* SPDX-License-Identifier: MIT */
/*
 * reclaim.c: asking acceld for memory the card lacks (reclaim.h, SPEC
 * 4.4). One short connection per shortage (a rare event: the card is
 * short, and the allocation would otherwise fail): a line
 * "reclaim <app> <device-uuid> <bytes>\n", then the answer "ok ...\n" or
 * "no ...\n". acceld checks who we are (SO_PEERCRED: a process of the app
 * bound to the device), so the line only says what we want.
 */
#include "shim/shim.h"
#include "shim/reclaim.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* acceld bounds the wait by reclaimWaitMs (at most 600 s); this is only
 * for an acceld that neither answers nor closes. */
#define RECLAIM_ANSWER_MS 615000

static char paths[SHIM_MAX_DEV][108];

void reclaim_config(int ordinal, const char *path)
{
    if (ordinal < 0 || ordinal >= SHIM_MAX_DEV || path[0] != '/' ||
        shim_concat(paths[ordinal], sizeof paths[ordinal], path,
                    (char *)NULL) != 0)
        paths[ordinal][0] = '\0';
}

/* The coarse clock (the last tick's CLOCK_MONOTONIC: 1 to 10 ms behind,
 * ~9 ns a read against ~25-50 ns for the precise one on these VMs, a
 * third of a bare allocation and free of the stand-in), and a store only
 * when the stamp moved: the reserve path's cost, and no write to the
 * ledger page the app's processes share while it stays. acceld only
 * orders apps by it (docs/benchmarks.md, Shim). */
void reclaim_stamp(struct accel_ledger *l)
{
    struct timespec ts;
    uint64_t ms;

    if (l == NULL || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        return;
    ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    if (atomic_load_explicit(&l->active_ms, memory_order_relaxed) != ms)
        atomic_store_explicit(&l->active_ms, ms, memory_order_relaxed);
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The answer line into buf (terminated, without its newline); -1 when
 * acceld closes or says nothing in time. */
static int read_line(int fd, char *buf, size_t cap)
{
    int64_t end = now_ms() + RECLAIM_ANSWER_MS;
    size_t got = 0;

    while (got + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = end - now_ms();
        ssize_t n;
        if (left <= 0)
            return -1;
        if (poll(&p, 1, (int)left) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
        buf[got] = '\0';
        if (strchr(buf, '\n') != NULL) {
            *strchr(buf, '\n') = '\0';
            return 0;
        }
    }
    return -1;
}

int reclaim_ask(int ordinal, uint64_t bytes)
{
    struct sockaddr_un sa;
    const char *app = getenv("ACCEL_APP");
    const char *uuid;
    char line[400], num[24], ans[256];
    int fd, ok = 0, e = errno;

    if (ordinal < 0 || ordinal >= SHIM_MAX_DEV || paths[ordinal][0] == '\0' ||
        app == NULL || app[0] == '\0' || strchr(app, ' ') != NULL)
        return 0;
    uuid = shim_state.dev[ordinal].uuid[0] ? shim_state.dev[ordinal].uuid
                                           : "-";
    if (shim_concat(line, sizeof line, "reclaim ", app, " ", uuid, " ",
                    shim_utoa((unsigned long)bytes, num), "\n",
                    (char *)NULL) != 0)
        return 0;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, paths[ordinal], sizeof sa.sun_path - 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        send_all(fd, line, strlen(line)) == 0 &&
        read_line(fd, ans, sizeof ans) == 0)
        ok = strncmp(ans, "ok", 2) == 0;
    shim_log("reclaim: asked acceld for %s bytes on device %d: %s", num,
             ordinal, ok ? "freed" : "not freed");
    close(fd);
    errno = e;
    return ok;
}
