/* SPDX-License-Identifier: MIT */
/*
 * bench_timeslice.c: the time-slicing bars of SPEC 11 (issue 49) on the
 * stand-in driver's ONE timeline (tests/shim/fake_cuda.c: kernels of all
 * processes queue behind each other; a switch pages when the apps' memory
 * passes the card), each with the same-run baseline without the shim:
 *   - an app alone (a busy app: 200 us kernels, a synchronize every 8):
 *     its rate with the shim under time slicing / without the shim;
 *   - a bursty app (20 kernels of 50 us, a synchronize, a host gap of
 *     0.2 / 1 / 10 / 30 ms) beside the busy app: its burst rate / its
 *     solo rate (without the shim), the busy app's share of the card,
 *     and the bursty app's wait for the turn (the first launch of each
 *     burst: p99 and max);
 *   - two bursting apps (1 ms and 10 ms gaps): each / solo;
 *   - two busy apps: each one's share against its fair share (1/2);
 *   - oversubscribed: two busy apps of 14 GiB (managed) on a 24 GiB card,
 *     link 24 GB/s: the share of device time spent paging.
 * A broker of src/daemon/node/slice (its own thread, this process) serves
 * the shim's children; children are this program ("worker ...") with or
 * without LD_PRELOAD of the shim. Usage:
 *   bench_timeslice [SECONDS]                 the bars (default 2 s a run)
 *   bench_timeslice sweep [SECONDS]           the curves behind the
 *                                             defaults (quantum, idle)
 * Prints Markdown tables; exit 0 (figures are reported, not judged: a
 * loaded machine must not fail a build).
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../tests/shim/fake_cuda.h"
#include "daemon/log.h"
#include "daemon/node/slice/broker.h"
#include "shim/cuda_types.h"

CUresult cuInit(unsigned);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned,
                        unsigned, unsigned, unsigned, CUstream, void **,
                        void **);
CUresult cuCtxSynchronize(void);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);

#define GIB (1ULL << 30)
#define CARD (24ULL * GIB)
#define MAX_WAITS 200000

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- the worker (a child) ---- */

/* worker busy|bursty PARAM_US SECONDS BYTES: busy: PARAM_US-long
 * kernels, a synchronize every 8; bursty: 20 kernels of 50 us, a
 * synchronize, a host gap of PARAM_US. BYTES of managed memory first.
 * Writes "units N device_us D p99_us P max_us M" to $BENCH_TS_OUT. */
static int worker(char **argv)
{
    int bursty = strcmp(argv[2], "bursty") == 0;
    unsigned param = (unsigned)strtoul(argv[3], NULL, 10);
    double secs = atof(argv[4]), end, dev_us = 0;
    unsigned long long bytes = strtoull(argv[5], NULL, 10);
    double *waits = calloc(MAX_WAITS, sizeof(double));
    long units = 0, nw = 0;
    CUcontext ctx = NULL;
    CUdeviceptr p = 0;
    FILE *f;

    if (waits == NULL || cuInit(0) != 0 ||
        cuDevicePrimaryCtxRetain(&ctx, 0) != 0 || cuCtxSetCurrent(ctx) != 0 ||
        (bytes > 0 && cuMemAllocManaged(&p, bytes, 1) != 0)) {
        free(waits);
        return 3;
    }
    end = now_s() + secs;
    while (now_s() < end) {
        int n = bursty ? 20 : 8;
        unsigned us = bursty ? 50 : param;
        double t0 = now_s();
        for (int k = 0; k < n; k++) {
            if (cuLaunchKernel(NULL, us, 1, 1, 1, 1, 1, 0, NULL, NULL,
                               NULL) != 0) {
                free(waits);
                return 5;
            }
            /* the turn's wait; not the first (the app's arrival: it has
             * no credit yet and may wait a whole quantum) */
            if (k == 0 && units > 0 && nw < MAX_WAITS)
                waits[nw++] = (now_s() - t0) * 1e6;
        }
        cuCtxSynchronize();
        dev_us += (double)n * us;
        units += bursty ? 1 : n;
        if (bursty && param > 0) {
            struct timespec g = {param / 1000000, (long)(param % 1000000) *
                                                      1000L};
            nanosleep(&g, NULL);
        }
    }
    qsort(waits, (size_t)nw, sizeof(double), cmp_double);
    f = fopen(getenv("BENCH_TS_OUT"), "w");
    if (f != NULL) {
        fprintf(f, "units %ld device_us %.0f p99_us %.1f max_us %.1f\n",
                units, dev_us, nw ? waits[(nw * 99 + 99) / 100 - 1] : 0.0,
                nw ? waits[nw - 1] : 0.0);
        fclose(f);
    }
    free(waits);
    return f != NULL ? 0 : 6;
}

/* ---- the parent ---- */

struct app {
    const char *name;      /* ACCEL_APP, and its result file's name */
    const char *kind;      /* busy, bursty */
    unsigned param;        /* kernel us (busy), gap us (bursty) */
    unsigned long long bytes; /* managed memory it allocates first */
    /* results */
    long units;            /* kernels (busy) or bursts (bursty) done */
    double device_us, p99_us, max_us; /* its device time; its waits */
};

struct run {
    int shim;              /* 1 = under the shim and a broker */
    struct broker_settings set; /* the broker's (shim runs) */
    double secs;           /* each app's run */
    int window;            /* also measure while every app runs: from
                            * 0.5 s after the start to 0.2 s before the
                            * apps' end (no start or end effects) */
    /* results */
    double wall_s, paged_s, busy_s; /* the timeline's */
    double win_s, win_paged_s, win_busy_s; /* the same, in the window */
    uint64_t handoffs, moves; /* the broker's: handoffs, paging switches */
    double handoff_p99_ms; /* the broker's handoff p99 */
};

static char dir[128];

static void spawn_app(struct app *a, const struct run *r, const char *sock,
                      pid_t *pid)
{
    char secs[32], par[32], bytes[32], e[8][256];
    char *argv[] = {"bench_timeslice", "worker", (char *)a->kind, par, secs,
                    bytes, NULL};
    char *envp[16];
    int n = 0;

    snprintf(secs, sizeof secs, "%.3f", r->secs);
    snprintf(par, sizeof par, "%u", a->param);
    snprintf(bytes, sizeof bytes, "%llu", a->bytes);
    snprintf(e[0], sizeof e[0], "LD_PRELOAD=%s", r->shim ? SHIM_PATH : "");
    snprintf(e[1], sizeof e[1], "ACCEL_APP=%s", a->name);
    snprintf(e[2], sizeof e[2], "ACCEL_TS_SOCKET_0=%s", sock);
    snprintf(e[3], sizeof e[3], "FAKE_CUDA_SHM=%s/fake.shm", dir);
    snprintf(e[4], sizeof e[4], "BENCH_TS_OUT=%s/%s.out", dir, a->name);
    snprintf(e[5], sizeof e[5], "XDG_RUNTIME_DIR=%s", dir);
    snprintf(e[6], sizeof e[6], "FAKE_CUDA_TOTAL=%llu", CARD);
    for (int i = 0; i < 7; i++)
        envp[n++] = e[i];
    envp[n++] = "LD_LIBRARY_PATH=" FAKE_DIR;
    envp[n++] = "FAKE_CUDA_SIM=1";
    envp[n++] = "FAKE_CUDA_OVERSUB=1";
    envp[n++] = "FAKE_CUDA_LINK_GBPS=24";
    /* the app's own ledger counts its bytes (told to the broker) */
    envp[n++] = "ACCEL_MEMORY_LIMIT=24Gi";
    envp[n] = NULL;
    if (posix_spawn(pid, "/proc/self/exe", NULL, NULL, argv, envp) != 0)
        *pid = -1;
}

static void read_app(struct app *a)
{
    char path[256];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s.out", dir, a->name);
    a->units = 0;
    a->device_us = a->p99_us = a->max_us = 0;
    f = fopen(path, "r");
    if (f == NULL)
        return;
    if (fscanf(f, "units %ld device_us %lf p99_us %lf max_us %lf",
               &a->units, &a->device_us, &a->p99_us, &a->max_us) != 4)
        a->units = 0;
    fclose(f);
    unlink(path);
}

/* The card's paged and busy seconds so far (out[0], out[1]). */
static void timeline(const char *shm, double out[2])
{
    int fd = open(shm, O_RDONLY);
    out[0] = out[1] = 0;
    if (fd < 0)
        return;
    struct fake_cuda_stats *st = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd,
                                      0);
    if (st != MAP_FAILED) {
        out[0] = st->tl.paged_ns / 1e9;
        out[1] = st->tl.busy_ns / 1e9;
        munmap(st, 4096);
    }
    close(fd);
}

/* Run apps[n] together (each for r->secs); results into them and r. */
static void run(struct run *r, struct app *apps, int n)
{
    char shm[200], sock[200];
    struct broker_set *bs = NULL;
    pid_t pid[4];
    double t0;

    snprintf(shm, sizeof shm, "%s/fake.shm", dir);
    unlink(shm);
    snprintf(sock, sizeof sock, "%s/ts.sock", dir);
    if (r->shim) {
        bs = broker_set_new(NULL, NULL);
        if (broker_set_ensure(bs, "dev0", sock, &r->set) != ACCEL_OK ||
            broker_set_start(bs) != ACCEL_OK) {
            fprintf(stderr, "bench_timeslice: no broker on %s\n", sock);
            exit(1);
        }
    }
    t0 = now_s();
    for (int i = 0; i < n; i++)
        spawn_app(&apps[i], r, sock, &pid[i]);
    r->win_s = r->win_paged_s = r->win_busy_s = 0;
    if (r->window && r->secs > 1) {
        double a[3], b[3];
        struct timespec d = {0, 500000000L};
        nanosleep(&d, NULL);
        timeline(shm, a);
        a[2] = now_s();
        d.tv_sec = (time_t)(r->secs - 0.7);
        d.tv_nsec = (long)((r->secs - 0.7 - (double)d.tv_sec) * 1e9);
        nanosleep(&d, NULL);
        timeline(shm, b);
        b[2] = now_s();
        r->win_s = b[2] - a[2];
        r->win_paged_s = b[0] - a[0];
        r->win_busy_s = b[1] - a[1];
    }
    for (int i = 0; i < n; i++) {
        int st;
        if (pid[i] > 0)
            waitpid(pid[i], &st, 0);
        read_app(&apps[i]);
    }
    r->wall_s = now_s() - t0;
    {
        double t[2];
        timeline(shm, t);
        r->paged_s = t[0];
        r->busy_s = t[1];
    }
    unlink(shm);
    r->handoffs = r->moves = 0;
    r->handoff_p99_ms = 0;
    if (bs != NULL) {
        struct broker_stats *s = malloc(sizeof(*s));
        if (s != NULL && broker_set_stats(bs, "dev0", s)) {
            r->handoffs = s->handoffs;
            r->moves = s->moves;
            r->handoff_p99_ms = s->handoff_p99_ns / 1e6;
        }
        free(s);
        broker_set_free(bs);
    }
}

static struct broker_settings defaults(void)
{
    struct broker_settings s = {
        .quantum_ms = BROKER_DEFAULT_QUANTUM_MS,
        .idle_ms = (BROKER_DEFAULT_IDLE_US + 999) / 1000,
        .grace_ms = BROKER_DEFAULT_GRACE_MS,
        .idle_us = BROKER_DEFAULT_IDLE_US,
        .min_turn_us = BROKER_DEFAULT_MIN_TURN_US,
        .oversub_ms = 1000,
        .paging_pct = BROKER_DEFAULT_PAGING_PCT,
        .card_bytes = CARD,
        .link_bps = 24000000000ULL,
    };
    /* to try other settings: BENCH_TS_QUANTUM_MS, BENCH_TS_IDLE_US,
     * BENCH_TS_MIN_TURN_US */
    const char *q = getenv("BENCH_TS_QUANTUM_MS"), *i = getenv(
        "BENCH_TS_IDLE_US"), *m = getenv("BENCH_TS_MIN_TURN_US");
    if (q != NULL)
        s.quantum_ms = (uint32_t)strtoul(q, NULL, 10);
    if (i != NULL) {
        s.idle_us = (uint32_t)strtoul(i, NULL, 10);
        s.idle_ms = (s.idle_us + 999) / 1000;
    }
    if (m != NULL)
        s.min_turn_us = (uint32_t)strtoul(m, NULL, 10);
    return s;
}

static double rate(const struct app *a, double secs)
{
    return a->units / secs;
}

/* One app alone: its rate (units/s). */
static double solo(int shim, const char *kind, unsigned param, double secs)
{
    struct run r = {.shim = shim, .set = defaults(), .secs = secs};
    struct app a = {.name = "solo", .kind = kind, .param = param};
    run(&r, &a, 1);
    return rate(&a, secs);
}

static void bars(double secs)
{
    unsigned gaps[] = {200, 1000, 10000, 30000};
    double busy_solo, busy_solo_shim, bursty_solo[4];

    printf("## Time slicing bars (%.1f s a run, defaults: quantum %u ms, "
           "idle %u us, min turn %u us)\n\n", secs,
           BROKER_DEFAULT_QUANTUM_MS, BROKER_DEFAULT_IDLE_US,
           BROKER_DEFAULT_MIN_TURN_US);
    /* best of 3 alternated runs each way: one run swings with the load */
    busy_solo = busy_solo_shim = 0;
    for (int i = 0; i < 3; i++) {
        double a = solo(0, "busy", 200, secs / 2), b = solo(1, "busy", 200,
                                                            secs / 2);
        busy_solo = a > busy_solo ? a : busy_solo;
        busy_solo_shim = b > busy_solo_shim ? b : busy_solo_shim;
    }
    printf("| app alone (best of 3 alternated runs) | no shim | shim, time "
           "slicing | ratio | bar |\n"
           "|---|---|---|---|---|\n"
           "| busy app, kernels/s | %.0f | %.0f | **%.3f** | >= 0.98 |\n\n",
           busy_solo, busy_solo_shim, busy_solo_shim / busy_solo);
    for (int g = 0; g < 4; g++)
        bursty_solo[g] = solo(0, "bursty", gaps[g], secs);

    printf("| bursty app beside a busy one, gap | layer | bursty / solo | "
           "busy app's share of the card | card busy | bursty's wait for "
           "the turn p99 / max | bars |\n|---|---|---|---|---|---|---|\n");
    for (int g = 0; g < 4; g++)
        for (int shim = 1; shim >= 0; shim--) {
            struct run r = {.shim = shim, .set = defaults(), .secs = secs};
            struct app a[2] = {
                {.name = "bursty", .kind = "bursty", .param = gaps[g]},
                {.name = "busy", .kind = "busy", .param = 200}};
            run(&r, a, 2);
            printf("| %.1f ms | %s | **%.2f** | **%.2f** | %.2f | %.1f / "
                   "%.1f ms | %s |\n", gaps[g] / 1e3,
                   shim ? "shim" : "none", rate(&a[0], secs) / bursty_solo[g],
                   a[1].device_us / 1e6 / secs, r.busy_s / secs,
                   a[0].p99_us / 1e3, a[0].max_us / 1e3,
                   !shim ? "(no layer)"
                   : gaps[g] >= 10000 ? ">= 0.75, >= 0.4, p99 <= 50 ms"
                                      : ">= 0.4, >= 0.4, p99 <= 50 ms");
        }
    printf("\n| two bursting apps (1 ms, 10 ms gaps) | layer | 1 ms app / "
           "solo | 10 ms app / solo | card busy | p99 wait (1 ms / 10 ms "
           "app) | bar |\n|---|---|---|---|---|---|---|\n");
    for (int shim = 1; shim >= 0; shim--) {
        struct run r = {.shim = shim, .set = defaults(), .secs = secs};
        struct app a[2] = {
            {.name = "b1", .kind = "bursty", .param = 1000},
            {.name = "b10", .kind = "bursty", .param = 10000}};
        run(&r, a, 2);
        printf("| | %s | **%.2f** | **%.2f** | %.2f | %.1f / %.1f ms | %s "
               "|\n", shim ? "shim" : "none",
               rate(&a[0], secs) / bursty_solo[1],
               rate(&a[1], secs) / bursty_solo[2], r.busy_s / secs,
               a[0].p99_us / 1e3, a[1].p99_us / 1e3,
               shim ? ">= 0.75 each" : "(no layer)");
    }
    printf("\n| two busy apps | layer | a's share | b's share | lowest / "
           "fair share (1/2) | card busy | handoffs (p99) | p99 wait (a / "
           "b) | bar |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int shim = 1; shim >= 0; shim--) {
        struct run r = {.shim = shim, .set = defaults(), .secs = secs};
        struct app a[2] = {{.name = "a", .kind = "busy", .param = 200},
                           {.name = "b", .kind = "busy", .param = 200}};
        double sa, sb;
        run(&r, a, 2);
        sa = a[0].device_us / 1e6 / secs;
        sb = a[1].device_us / 1e6 / secs;
        printf("| | %s | %.2f | %.2f | **%.2f** | %.2f | %llu (%.2f ms) | "
               "%.1f / %.1f ms | %s |\n", shim ? "shim" : "none", sa, sb,
               (sa < sb ? sa : sb) / 0.5, r.busy_s / secs,
               (unsigned long long)r.handoffs, r.handoff_p99_ms,
               a[0].p99_us / 1e3, a[1].p99_us / 1e3,
               shim ? ">= 1/3; p99 <= 50 ms" : "(no layer)");
    }
    printf("\n| oversubscribed: two busy 14 GiB apps, 24 GiB card, 24 GB/s "
           "| layer | paging / device time, both apps running | the same, "
           "whole run (start and end included) | paging / wall time, both "
           "running | a's share | b's share | switches that paged | bar "
           "|\n|---|---|---|---|---|---|---|---|---|\n");
    for (int shim = 1; shim >= 0; shim--) {
        /* turns of ~3.5 s here (19 x 183 ms): 16 s for a few cycles */
        struct run r = {.shim = shim, .set = defaults(), .window = 1,
                        .secs = !shim ? 4 : secs < 8 ? 16 : 2 * secs};
        struct app a[2] = {
            {.name = "a", .kind = "busy", .param = 200, .bytes = 14 * GIB},
            {.name = "b", .kind = "busy", .param = 200, .bytes = 14 * GIB}};
        run(&r, a, 2);
        printf("| | %s | **%.3f** | %.3f | %.3f | %.2f | %.2f | %llu | %s "
               "|\n", shim ? "shim" : "none",
               r.win_paged_s / (r.win_paged_s + r.win_busy_s > 0
                                    ? r.win_paged_s + r.win_busy_s : 1),
               r.paged_s / (r.paged_s + r.busy_s > 0 ? r.paged_s + r.busy_s
                                                     : 1),
               r.win_s > 0 ? r.win_paged_s / r.win_s : 0,
               a[0].device_us / 1e6 / r.secs, a[1].device_us / 1e6 / r.secs,
               (unsigned long long)r.moves,
               shim ? "<= 0.10" : "(no layer)");
    }
}

/* The curves behind the defaults: the bursty app (1 and 10 ms gaps)
 * beside the busy one, and two busy apps, over quantum and idle time. */
static void sweep(double secs)
{
    unsigned quanta[] = {10, 30, 100, 500}, idles[] = {100, 300, 1000, 3000};
    double solo1 = solo(0, "bursty", 1000, secs);
    double solo10 = solo(0, "bursty", 10000, secs);

    printf("## Time slicing curves (%.1f s a run)\n\n", secs);
    printf("| quantum | idle | bursty(1 ms) / solo | busy share | bursty(10 "
           "ms) / solo | busy share | p99 wait (10 ms app) | two busy: card "
           "busy | two busy: lowest / fair share | two busy: p99 wait |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int qi = 0; qi < 4; qi++)
        for (int ii = 0; ii < 4; ii++) {
            struct broker_settings s = defaults();
            struct app a1[2] = {
                {.name = "bursty", .kind = "bursty", .param = 1000},
                {.name = "busy", .kind = "busy", .param = 200}};
            struct app a10[2] = {
                {.name = "bursty", .kind = "bursty", .param = 10000},
                {.name = "busy", .kind = "busy", .param = 200}};
            struct app bb[2] = {{.name = "a", .kind = "busy", .param = 200},
                                {.name = "b", .kind = "busy", .param = 200}};
            struct run r1, r10, rb;
            if (quanta[qi] != BROKER_DEFAULT_QUANTUM_MS &&
                idles[ii] != BROKER_DEFAULT_IDLE_US)
                continue; /* one axis at a time */
            s.quantum_ms = quanta[qi];
            s.idle_us = idles[ii];
            s.idle_ms = (idles[ii] + 999) / 1000;
            r1 = (struct run){.shim = 1, .set = s, .secs = secs};
            r10 = r1;
            rb = r1;
            run(&r1, a1, 2);
            run(&r10, a10, 2);
            run(&rb, bb, 2);
            {
                double sa = bb[0].device_us / 1e6 / secs;
                double sb = bb[1].device_us / 1e6 / secs;
                printf("| %u ms | %u us | %.2f | %.2f | %.2f | %.2f | %.1f ms "
                       "| %.2f | %.2f | %.1f / %.1f ms |\n", quanta[qi],
                       idles[ii], rate(&a1[0], secs) / solo1,
                       a1[1].device_us / 1e6 / secs,
                       rate(&a10[0], secs) / solo10,
                       a10[1].device_us / 1e6 / secs, a10[0].p99_us / 1e3,
                       rb.busy_s / secs, (sa < sb ? sa : sb) / 0.5,
                       bb[0].p99_us / 1e3, bb[1].p99_us / 1e3);
            }
        }
}

/* Everything the runs left in dir goes (ledgers under XDG_RUNTIME_DIR). */
static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(path);
}

int main(int argc, char **argv)
{
    int sw = argc > 1 && strcmp(argv[1], "sweep") == 0;
    double secs = 2.0;

    if (argc > 1 && strcmp(argv[1], "worker") == 0 && argc == 6)
        return worker(argv);
    if (argc > 1 + sw && strcmp(argv[1], "pair") != 0)
        secs = atof(argv[1 + sw]);
    if (secs <= 0)
        secs = 2.0;
    snprintf(dir, sizeof dir, "%s/accel-bench-ts-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    log_set_level(LOG_WARN);
    {
        double l[3] = {0};
        FILE *f = fopen("/proc/loadavg", "r");
        if (f != NULL) {
            if (fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3)
                l[0] = 0;
            fclose(f);
        }
        printf("load average at start: %.2f, %ld CPUs\n\n", l[0],
               sysconf(_SC_NPROCESSORS_ONLN));
    }
    if (argc == 4 && strcmp(argv[1], "pair") == 0) {
        /* pair GAP_US SECONDS: the bursty app beside the busy one */
        unsigned gap = (unsigned)strtoul(argv[2], NULL, 10);
        double so;
        struct run r = {.shim = 1, .set = defaults(), .secs = atof(argv[3])};
        struct app a[2] = {
            {.name = "bursty", .kind = "bursty", .param = gap},
            {.name = "busy", .kind = "busy", .param = 200}};
        so = solo(0, "bursty", gap, r.secs);
        run(&r, a, 2);
        printf("gap %u us: bursty/solo %.2f busy share %.2f card %.2f p99 "
               "wait %.1f ms handoffs %llu\n", gap,
               rate(&a[0], r.secs) / so, a[1].device_us / 1e6 / r.secs,
               r.busy_s / r.secs, a[0].p99_us / 1e3,
               (unsigned long long)r.handoffs);
    } else if (sw)
        sweep(secs);
    else
        bars(secs);
    return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : 1;
}
