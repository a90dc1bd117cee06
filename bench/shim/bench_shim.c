/* SPDX-License-Identifier: MIT */
/*
 * bench_shim.c: what libaccelshim.so adds, measured against the same program
 * without it in the same run, on the fake driver (tests/shim/fake_cuda.c):
 *   - ns per cuLaunchKernel (the launch path: a forward, no lock, no syscall)
 *     without the shim, with it, and with it under time slicing with the
 *     turn held: a broker of src/daemon/broker.c runs in this process (its
 *     own thread) and the child gets ACCEL_TS_SOCKET_0; the child is alone,
 *     so it keeps the turn (the parent checks that the broker granted one
 *     turn per such child and that no handoff happened)
 *   - ns per 1 MiB cuMemAlloc_v2 + cuMemFree_v2 pair, quota active (4 GiB)
 *   - process start-up: spawn of a program doing cuInit and one 1 MiB
 *     alloc/free (with the shim: config, ledger file, slot), median
 *   - on a time-sliced card, the context and first allocation of a process
 *     (median, interleaved) with the card ledger handed over by the broker
 *     (ACCEL_TS_LEDGER_0=@broker: connect, hello, the sealed memfd back)
 *     against a card ledger file (a path: open and map)
 * The parent runs children with and without LD_PRELOAD, alternating, and
 * keeps the best of 5 rounds for the loops; start-up is the median of
 * interleaved spawns. Usage: bench_shim [launches pairs
 * starts]. Prints a Markdown table. BENCH_SHIM_ALT=<another
 * libaccelshim.so> (e.g. an older build) adds its launch (plain and with
 * the turn held), pair and start-up figures, in the same rounds and
 * interleaved with the others, so a change is measured in one run under
 * one load.
 */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/ledger.h"
#include "daemon/log.h"
#include "daemon/node/ledger.h"
#include "daemon/node/slice/broker.h"
#include "shim/cuda_types.h"

extern char **environ;
CUresult cuInit(unsigned);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned,
                        unsigned, unsigned, unsigned, CUstream, void **,
                        void **);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);

/* As the CUDA runtime starts: the primary context of device 0, retained
 * and current (the stand-in, as the driver, refuses launches and
 * allocations without a current context). */
static void runtime_ctx(void)
{
    CUcontext c;

    if (cuDevicePrimaryCtxRetain(&c, 0) == 0)
        cuCtxSetCurrent(c);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double child_launch(long n)
{
    double t;
    cuInit(0);
    runtime_ctx();
    if (cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != 0)
        return -1; /* warm (and a launch that works) */
    t = now_ns();
    for (long i = 0; i < n; i++)
        cuLaunchKernel(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    return (now_ns() - t) / (double)n;
}

static double child_pair(long n)
{
    CUdeviceptr d;
    double t;
    cuInit(0);
    runtime_ctx();
    if (cuMemAlloc_v2(&d, 1 << 20) != 0)
        return -1; /* (an allocation that works) */
    cuMemFree_v2(d); /* warm: ledger attached */
    t = now_ns();
    for (long i = 0; i < n; i++) {
        cuMemAlloc_v2(&d, 1 << 20);
        cuMemFree_v2(d);
    }
    return (now_ns() - t) / (double)n;
}

static char ts_env[160]; /* "ACCEL_TS_SOCKET_0=<broker socket>" */
static char alt_env[600]; /* "LD_PRELOAD=$BENCH_SHIM_ALT" or "" */
static char xdg_dir[64];  /* the children's XDG_RUNTIME_DIR: their ledgers */
static char xdg_env[96];  /* "XDG_RUNTIME_DIR=<xdg_dir>" */
static char app_env[64] = "ACCEL_APP=bench-shim";
static char card_env[200]; /* "ACCEL_TS_LEDGER_0=..." or "": a time-sliced
                            * child's card ledger (with ts_env) */

/* Run "self child <what> <n>" without the shim (shim 0), with it (1),
 * with it under time slicing (2), with BENCH_SHIM_ALT (3), or with that
 * under time slicing (4); its stdout number. */
static double run_child(const char *what, long n, int shim, int capture)
{
    char nbuf[32], out[64] = { 0 };
    char *argv[] = { "bench_shim", "child", (char *)what, nbuf, NULL };
    char *envp[] = { shim >= 3 ? alt_env
                     : shim ? "LD_PRELOAD=" SHIM_PATH : "LD_PRELOAD=",
                     "LD_LIBRARY_PATH=" FAKE_DIR, "ACCEL_MEMORY_LIMIT=4Gi",
                     app_env, xdg_env,
                     shim == 2 || shim == 4 || card_env[0] ? ts_env : NULL,
                     card_env[0] ? card_env : NULL, NULL };
    posix_spawn_file_actions_t fa;
    int fds[2], st;
    pid_t pid;

    snprintf(nbuf, sizeof(nbuf), "%ld", n);
    if (pipe(fds) != 0)
        return -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    if (posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, envp) != 0)
        return -1;
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (capture && read(fds[0], out, sizeof(out) - 1) < 0)
        out[0] = '\0';
    close(fds[0]);
    waitpid(pid, &st, 0);
    return capture ? strtod(out, NULL) : 0;
}

/* Remove the children's ledgers and their directory. */
static void rm_ledgers(void)
{
    char sub[96], path[400];
    struct dirent *e;
    DIR *d;

    snprintf(sub, sizeof sub, "%s/accel", xdg_dir);
    d = opendir(sub);
    while (d != NULL && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
            unlink(path);
        }
    if (d != NULL)
        closedir(d);
    rmdir(sub);
    rmdir(xdg_dir);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The ledger at path as acceld makes it for a new app whose device's
 * context size it knows (docs/internals/shim.md): 0, -1 on an error. */
static int seed_ledger(const char *path, uint64_t bytes)
{
    uint64_t v = bytes | ACCEL_LEDGER_CTX_MEASURED | ACCEL_LEDGER_CTX_SEEDED;
    int fd, rc;

    if (ledger_create(path, "bench", 0, "", 4ULL << 30, (uid_t)-1,
                      (gid_t)-1) != ACCEL_OK)
        return -1;
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    rc = pwrite(fd, &v, sizeof v,
                (off_t)offsetof(struct accel_ledger, ctx_cost)) ==
                 (ssize_t)sizeof v ? 0 : -1;
    close(fd);
    return rc;
}

/* Median start-up of n spawns each way, interleaved one by one so machine
 * load hits every side alike; out[0] native, out[1] with the shim, out[2]
 * with BENCH_SHIM_ALT when set. */
static void startup_us(const char *what, long n, double out[3],
                       double first[3])
{
    int ways = alt_env[0] ? 3 : 2;
    double *t[3], *f[3];
    int okay = 1;

    for (int w = 0; w < 3; w++) {
        t[w] = calloc((size_t)n, sizeof(double));
        f[w] = calloc((size_t)n, sizeof(double));
        okay = okay && t[w] && f[w];
    }
    for (long i = 0; okay && i < n; i++)
        for (int w = 0; w < ways; w++) {
            int seeded = strcmp(what, "startseeded") == 0;
            int fresh = seeded || strcmp(what, "startfirst") == 0;
            char led[160];
            double s0;
            if (fresh) /* a new app: its ledger knows no context yet */
                snprintf(app_env, sizeof app_env, "ACCEL_APP=bench-first-%ld",
                         i);
            snprintf(led, sizeof led, "%s/accel/shim-bench-first-%ld-"
                     "dev0.ledger", xdg_dir, i);
            if (seeded && w == 1) /* acceld's part, before the start: the
                                   * ledger seeded with the stand-in's
                                   * context (64 MiB); BENCH_SHIM_ALT
                                   * (older: no seed) measures */
                okay = okay && seed_ledger(led, 64ULL << 20) == 0;
            s0 = now_ns();
            f[w][i] = run_child(what, 0, w == 2 ? 3 : w, 1);
            t[w][i] = (now_ns() - s0) / 1e3;
            okay = okay && f[w][i] >= 0; /* the child's calls worked */
            if (fresh) {
                unlink(led);
                snprintf(app_env, sizeof app_env, "ACCEL_APP=bench-shim");
            }
        }
    if (!okay)
        fprintf(stderr, "bench_shim: a %s child's calls failed\n", what);
    for (int w = 0; w < 3; w++) {
        out[w] = first[w] = 0;
        if (okay) {
            qsort(t[w], (size_t)n, sizeof(double), cmp_double);
            qsort(f[w], (size_t)n, sizeof(double), cmp_double);
            out[w] = t[w][n / 2];
            first[w] = f[w][n / 2];
        }
        free(t[w]);
        free(f[w]);
    }
}

/* Median context and first allocation (in the child, us) of n processes
 * on the time-sliced card each way, interleaved: out[0] with the card
 * ledger from the broker (the sealed memfd), out[1] from a file. */
static void card_first_us(long n, double out[2])
{
    double *t[2] = { calloc((size_t)n, sizeof(double)),
                     calloc((size_t)n, sizeof(double)) };
    char file[160];
    int okay = t[0] != NULL && t[1] != NULL;

    snprintf(file, sizeof file, "%s/accel/card.ledger", xdg_dir);
    for (long i = 0; okay && i < n; i++)
        for (int w = 0; w < 2; w++) {
            snprintf(card_env, sizeof card_env, "ACCEL_TS_LEDGER_0=%s",
                     w == 0 ? "@broker" : file);
            t[w][i] = run_child("startctx", 0, 1, 1);
            okay = t[w][i] >= 0;
        }
    card_env[0] = '\0';
    unlink(file);
    for (int w = 0; w < 2; w++) {
        out[w] = -1;
        if (okay) {
            qsort(t[w], (size_t)n, sizeof(double), cmp_double);
            out[w] = t[w][n / 2];
        }
        free(t[w]);
    }
}

static void row(const char *name, const char *unit, double base, double with,
                const char *bar)
{
    printf("| %s | %.1f %s | %.1f %s | %+.1f %s | %s |\n", name, base, unit,
           with, unit, with - base, unit, bar);
}

/* The in-process broker the time-slicing children talk to. */
static struct broker_set *start_broker(char *path, size_t cap)
{
    struct broker_settings st = { .quantum_ms = BROKER_DEFAULT_QUANTUM_MS,
                                  .idle_ms = BROKER_DEFAULT_IDLE_MS,
                                  .grace_ms = BROKER_DEFAULT_GRACE_MS,
                                  .idle_us = BROKER_DEFAULT_IDLE_US };
    struct broker_set *bs;

    snprintf(path, cap, "/tmp/accel-bench-shim-%ld.sock", (long)getpid());
    snprintf(ts_env, sizeof ts_env, "ACCEL_TS_SOCKET_0=%s", path);
    log_set_level(LOG_WARN);
    bs = broker_set_new(NULL, NULL);
    if (broker_set_ensure(bs, "dev0", path, &st) != ACCEL_OK ||
        broker_set_start(bs) != ACCEL_OK) {
        broker_set_free(bs);
        return NULL;
    }
    return bs;
}

static uint64_t broker_turns(struct broker_set *bs, uint64_t *handoffs)
{
    struct broker_stats *st = malloc(sizeof(*st));
    uint64_t turns = 0;
    *handoffs = 0;
    if (st != NULL && broker_set_stats(bs, "dev0", st)) {
        turns = st->turns_total;
        *handoffs = st->handoffs;
    }
    free(st);
    return turns;
}

int main(int argc, char **argv)
{
    long launches = 20000000, pairs = 2000000, starts = 300;
    double b[3] = { 1e18, 1e18, 1e18 }, s[3] = { 1e18, 1e18, 1e18 }, v;
    double v2[3], f2[3], c2[3], g2[3], p2[3], h2[3], e2[3], k2[3], ts = 1e18, a[3] = { 1e18, 1e18, 1e18 };
    double card[2];
    uint64_t want_turns = 5;
    const char *alt = getenv("BENCH_SHIM_ALT");
    char sock[108];
    struct broker_set *bs;
    uint64_t turns, handoffs;

    if (argc > 3 && strcmp(argv[1], "child") == 0) {
        long n = strtol(argv[3], NULL, 10);
        if (strcmp(argv[2], "launch") == 0)
            printf("%.3f\n", child_launch(n));
        else if (strcmp(argv[2], "pair") == 0)
            printf("%.3f\n", child_pair(n));
        else { /* start: init, a context of cuCtxCreate (as a program
                * of the driver API makes one: the driver refuses an
                * allocation without), one allocation (shim: config,
                * ledger, the context charged); startctx and startfirst:
                * the primary context, retained and made current, as the
                * CUDA runtime starts (startfirst: each child a new app,
                * whose first process measures its context through NVML;
                * startseeded: the same with its ledger seeded by acceld);
                * prints the time from after cuInit to after the first
                * allocation in us, -1 when a call failed */
            CUdeviceptr d;
            CUcontext c;
            double t0;
            int ok;
            cuInit(0);
            t0 = now_ns();
            if (strcmp(argv[2], "start") == 0)
                ok = cuCtxCreate_v2(&c, 0, 0) == 0;
            else
                ok = cuDevicePrimaryCtxRetain(&c, 0) == 0 &&
                     cuCtxSetCurrent(c) == 0;
            ok = ok && cuMemAlloc_v2(&d, 1 << 20) == 0;
            printf("%.3f\n", ok ? (now_ns() - t0) / 1e3 : -1.0);
            if (ok)
                cuMemFree_v2(d);
        }
        return 0;
    }
    if (argc > 3) {
        launches = strtol(argv[1], NULL, 10);
        pairs = strtol(argv[2], NULL, 10);
        starts = strtol(argv[3], NULL, 10);
    }
    if (alt != NULL && alt[0] != '\0')
        snprintf(alt_env, sizeof alt_env, "LD_PRELOAD=%s", alt);
    snprintf(xdg_dir, sizeof xdg_dir, "/tmp/accel-bench-shim-XXXXXX");
    if (mkdtemp(xdg_dir) == NULL) {
        perror("bench_shim: mkdtemp");
        return 1;
    }
    snprintf(xdg_env, sizeof xdg_env, "XDG_RUNTIME_DIR=%s", xdg_dir);
    bs = start_broker(sock, sizeof sock);
    if (bs == NULL) {
        fprintf(stderr, "bench_shim: cannot start a broker on %s\n", sock);
        rm_ledgers();
        return 1;
    }
    for (int r = 0; r < 5; r++) {
        for (int shim = 0; shim < 2; shim++) {
            double *m = shim ? s : b;
            v = run_child("launch", launches, shim, 1);
            m[0] = v < m[0] ? v : m[0];
            v = run_child("pair", pairs, shim, 1);
            m[1] = v < m[1] ? v : m[1];
        }
        v = run_child("launch", launches, 2, 1);
        ts = v < ts ? v : ts;
        if (alt_env[0] == '\0')
            continue;
        v = run_child("launch", launches, 3, 1);
        a[0] = v < a[0] ? v : a[0];
        v = run_child("launch", launches, 4, 1);
        a[1] = v < a[1] ? v : a[1];
        v = run_child("pair", pairs, 3, 1);
        a[2] = v < a[2] ? v : a[2];
    }
    if (alt_env[0] != '\0')
        want_turns = 10;
    turns = broker_turns(bs, &handoffs);
    card_first_us(starts, card); /* hellos, no turns asked */
    broker_set_free(bs);
    {
        char id[160]; /* the card memfd's identity beside the socket */
        snprintf(id, sizeof id, "%s.card", sock);
        unlink(id);
    }
    if (turns != want_turns || handoffs != 0) {
        fprintf(stderr, "bench_shim: the time-slicing children did not hold "
                "the turn alone (turns %llu, handoffs %llu; want %llu, 0)\n",
                (unsigned long long)turns, (unsigned long long)handoffs,
                (unsigned long long)want_turns);
        rm_ledgers();
        return 1;
    }
    if (b[0] < 0 || b[1] < 0 || s[0] < 0 || s[1] < 0 || ts < 0 ||
        a[0] < 0 || a[1] < 0 || a[2] < 0) {
        fprintf(stderr, "bench_shim: a launch or pair child's calls failed\n");
        rm_ledgers();
        return 1;
    }
    startup_us("start", starts, v2, f2);
    startup_us("startctx", starts, c2, g2);
    startup_us("startfirst", starts, p2, h2);
    startup_us("startseeded", starts, e2, k2);
    rm_ledgers();
    b[2] = v2[0];
    s[2] = v2[1];
    printf("| measure | without shim | with shim | added | SPEC 11 bar |\n");
    printf("|---|---|---|---|---|\n");
    row("cuLaunchKernel", "ns", b[0], s[0], "<= 10 ns");
    row("cuLaunchKernel, time slicing, turn held (broker live)", "ns", b[0],
        ts, "<= 10 ns");
    row("1 MiB cuMemAlloc_v2 + cuMemFree_v2", "ns", b[1], s[1], "<= 300 ns");
    row("process start-up (spawn, cuInit, cuCtxCreate, 1 alloc; median)",
        "us", b[2], s[2], "<= 500 us");
    row("of which the first 1 MiB cuMemAlloc_v2 (in the child; median)",
        "us", f2[0], f2[1], "");
    row("start-up as the CUDA runtime starts (spawn, cuInit, primary "
        "context retained and current, 1 alloc; median)", "us", c2[0], c2[1],
        "<= 500 us");
    row("of which the context and the first allocation (in the child)", "us",
        g2[0], g2[1], "");
    row("the same, the first process of an app (its context measured; "
        "median)", "us", p2[0], p2[1], "<= 500 us");
    row("of which the context and the first allocation (in the child)", "us",
        h2[0], h2[1], "");
    row("the same, the first process of an app whose ledger acceld seeded "
        "(the device's context size known: no NVML; median)", "us", e2[0],
        e2[1], "<= 500 us");
    row("of which the context and the first allocation (in the child)", "us",
        k2[0], k2[1], "");
    row("time-sliced card: context and first allocation, card ledger "
        "from the broker (sealed memfd) vs a file (median)", "us", card[1],
        card[0], "");
    if (alt_env[0]) {
        row("cuLaunchKernel, BENCH_SHIM_ALT", "ns", b[0], a[0], "<= 10 ns");
        row("cuLaunchKernel, time slicing, turn held, BENCH_SHIM_ALT", "ns",
            b[0], a[1], "<= 10 ns");
        row("1 MiB cuMemAlloc_v2 + cuMemFree_v2, BENCH_SHIM_ALT", "ns", b[1],
            a[2], "<= 300 ns");
        printf("| process start-up with BENCH_SHIM_ALT (%s) | %.1f us | "
               "%.1f us | %+.1f us | <= 500 us |\n", alt, b[2], v2[2],
               v2[2] - b[2]);
        printf("| of which the first cuMemAlloc_v2, BENCH_SHIM_ALT | %.1f us "
               "| %.1f us | %+.1f us | |\n", f2[0], f2[2], f2[2] - f2[0]);
        printf("| start-up with the primary context, BENCH_SHIM_ALT | %.1f "
               "us | %.1f us | %+.1f us | <= 500 us |\n", c2[0], c2[2],
               c2[2] - c2[0]);
        printf("| of which the context and the first allocation, "
               "BENCH_SHIM_ALT | %.1f us | %.1f us | %+.1f us | |\n", g2[0],
               g2[2], g2[2] - g2[0]);
        printf("| the first process of an app, BENCH_SHIM_ALT | %.1f us | "
               "%.1f us | %+.1f us | <= 500 us |\n", p2[0], p2[2],
               p2[2] - p2[0]);
        printf("| of which the context and the first allocation, "
               "BENCH_SHIM_ALT | %.1f us | %.1f us | %+.1f us | |\n", h2[0],
               h2[2], h2[2] - h2[0]);
        printf("| the first process of an app, seeded run, BENCH_SHIM_ALT "
               "(no seed: it measures) | %.1f us | %.1f us | %+.1f us | "
               "<= 500 us |\n", e2[0], e2[2], e2[2] - e2[0]);
    }
    return 0;
}
