/* SPDX-License-Identifier: MIT */
/*
 * ts_turns.c: time slicing that follows the work (issue 49), on the
 * stand-in driver's ONE timeline (fake_cuda.h, struct fake_timeline) with
 * the shim preloaded and a standalone broker (ts_broker). argv[1] picks
 * the case; exit 0 = pass. Bounds are loose (a loaded 2-core machine
 * must not fail them); each case fails under the behaviour it replaces,
 * by a wide margin. The bars themselves are bench/shim/bench_timeslice.
 *
 *   timeline  no broker: two processes' kernels queue behind each other
 *             on the card (never both on it; the span of their work is
 *             the sum of it). Before issue 49 each process had its own
 *             timeline: both ran at once.
 *   paging    no broker: two apps of 14 GiB (managed) on a 24 GiB card
 *             take turns on the timeline: every switch moves 4 GiB over
 *             the link (the record's paged time is the moves over the
 *             link's speed); two apps of 10 GiB move nothing.
 *   giveback  a bursty app (bursts of 10 x 100 us, a synchronize, a host
 *             gap of 20 ms) beside a busy one, quantum 1 s: it gives the
 *             turn back in each gap and, asking again, gets it back
 *             within the holder's minimum turn (median wait < 200 ms, at
 *             least 20 bursts in 3 s). Before: it waited the busy app's
 *             whole 1 s quantum for each burst (idle 5 ms: the busy app's
 *             synchronizes are shorter, so the old rule never saw it idle).
 *   syncbusy  an app whose thread waits in cuCtxSynchronize for a 50 ms
 *             kernel, beside a busy app (which synchronizes every 4 ms),
 *             idle time 1 ms, quantum 300 ms: waiting for the device is
 *             not idle, so both keep their turns for the quantum (at most
 *             30 turns in 2.5 s). Before: each gave the turn back in its
 *             synchronizes (~90 turns).
 *   synccopy  as syncbusy, the result read back by a synchronous
 *             cuMemcpyDtoH (the thread waits inside a submission): at
 *             most 30 turns. Before this case's fix the idle probe saw no
 *             new submission and gave the turn back in every copy.
 *   syncevent as syncbusy, the thread waiting in cuEventSynchronize on an
 *             event recorded after the kernels (cudaEventSynchronize, as
 *             serving loops wait on a step): at most 30 turns. Before the
 *             shim hooked it, the event's wait looked idle.
 *   oversub   two busy apps of 14 GiB on a 24 GiB card through the broker
 *             (link 48 GB/s: 89 ms a switch): turns grow so that paging
 *             stays small (at most 12 switches that page in 4 s, paging
 *             at most 25 % of device time). Before: a switch every
 *             quantum (30 ms), paging most of the time.
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fake_cuda.h"
#include "shim/cuda_types.h"

CUresult cuInit(unsigned);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned,
                        unsigned, unsigned, unsigned, CUstream, void **,
                        void **);
CUresult cuCtxSynchronize(void);
CUresult cuEventCreate(CUevent *, unsigned int);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
struct fake_cuda_stats *fake_cuda_stats(void);

#define GIB (1ULL << 30)

int failures;
static char dir[160], sock[200], logpath[200], brokerout[200];
static char self_exe[512];

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void msleep(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* burst SECS GAP_US KERNEL_US N BYTES OUT: BYTES of managed memory, then
 * until SECS have passed: N kernels of KERNEL_US, a synchronize (with
 * TS_TURNS_COPY set: a synchronous copy to the host instead), a host gap
 * of GAP_US. Writes "bursts B median_us M max_us X" (the wait of
 * each burst's first launch: the turn's, the first burst's left out) to
 * OUT. Exit 3 on a failed call. */
static int burst(char **argv)
{
    double secs = atof(argv[2]);
    unsigned gap = (unsigned)strtoul(argv[3], NULL, 10);
    unsigned us = (unsigned)strtoul(argv[4], NULL, 10);
    int n = (int)strtol(argv[5], NULL, 10);
    unsigned long long bytes = strtoull(argv[6], NULL, 10);
    int64_t end, *waits = calloc(100000, sizeof(int64_t));
    long bursts = 0, nw = 0;
    int copy = getenv("TS_TURNS_COPY") != NULL;
    int event = getenv("TS_TURNS_EVENT") != NULL;
    CUevent ev = NULL;
    CUcontext ctx = NULL;
    CUdeviceptr p = 0;
    FILE *f;

    {
        CUresult r1 = waits ? cuDevicePrimaryCtxRetain(&ctx, 0) : 999;
        CUresult r2 = r1 == CUDA_SUCCESS ? cuCtxSetCurrent(ctx) : 999;
        CUresult r3 = r2 == CUDA_SUCCESS && bytes > 0
                          ? cuMemAllocManaged(&p, bytes, 1)
                          : CUDA_SUCCESS;
        if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS || r3 != CUDA_SUCCESS) {
            fprintf(stderr, "burst: primary %d, current %d, managed %d "
                    "(card used %lld, refused by the stand-in %lld)\n",
                    (int)r1, (int)r2, (int)r3,
                    (long long)atomic_load(&fake_cuda_stats()->used),
                    (long long)atomic_load(&fake_cuda_stats()->refused));
            free(waits);
            return 3;
        }
    }
    end = mono_ns() + (int64_t)(secs * 1e9);
    while (mono_ns() < end) {
        int64_t t0 = mono_ns();
        for (int k = 0; k < n; k++) {
            CUresult rl = cuLaunchKernel(NULL, us, 1, 1, 1, 1, 1, 0, NULL,
                                         NULL, NULL);
            if (rl != CUDA_SUCCESS) {
                fprintf(stderr, "burst: launch %d\n", (int)rl);
                free(waits);
                return 3;
            }
            if (k == 0 && bursts > 0 && nw < 100000)
                waits[nw++] = mono_ns() - t0;
        }
        if (copy) { /* the result read back: waits for the kernels */
            char r[64];
            if (cuMemcpyDtoH_v2(r, 0x1000, sizeof r) != CUDA_SUCCESS) {
                free(waits);
                return 3;
            }
        } else if (event) { /* waits on an event after the kernels */
            if ((ev == NULL && cuEventCreate(&ev, 0) != CUDA_SUCCESS) ||
                cuEventRecord(ev, NULL) != CUDA_SUCCESS ||
                cuEventSynchronize(ev) != CUDA_SUCCESS) {
                free(waits);
                return 3;
            }
        } else {
            cuCtxSynchronize();
        }
        bursts++;
        if (gap > 0) {
            struct timespec g = {gap / 1000000, (long)(gap % 1000000) * 1000L};
            nanosleep(&g, NULL);
        }
    }
    if (ev != NULL)
        cuEventDestroy_v2(ev);
    qsort(waits, (size_t)nw, sizeof(int64_t), cmp_i64);
    f = fopen(argv[7], "w");
    if (f != NULL) {
        fprintf(f, "bursts %ld median_us %.1f max_us %.1f\n", bursts,
                nw ? waits[nw / 2] / 1e3 : 0.0,
                nw ? waits[nw - 1] / 1e3 : 0.0);
        fclose(f);
    }
    free(waits);
    return f != NULL ? 0 : 3;
}

/* Start argv as app `app` (NULL: the broker, its stdout to brokerout);
 * with the broker's socket when `ts`. */
static pid_t spawn(char *const argv[], const char *app, int ts,
                   const char *extra)
{
    pid_t p = fork();
    if (p == 0) {
        char e1[160], e2[240], e3[240], e4[240];
        snprintf(e1, sizeof e1, "ACCEL_APP=%s", app ? app : "broker");
        snprintf(e2, sizeof e2, "ACCEL_TS_SOCKET_0=%s", sock);
        snprintf(e3, sizeof e3, "FAKE_CUDA_LOG=%s", logpath);
        putenv(e1);
        if (ts)
            putenv(e2);
        else
            unsetenv("ACCEL_TS_SOCKET_0");
        putenv(e3);
        if (extra != NULL) {
            snprintf(e4, sizeof e4, "%s", extra);
            putenv(e4);
        }
        if (app == NULL) {
            int fd = open(brokerout, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd >= 0) {
                dup2(fd, 1);
                close(fd);
            }
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return p;
}

static pid_t broker(const char *quantum, const char *idle, const char *env)
{
    char exe[600];
    snprintf(exe, sizeof exe, "%s", self_exe);
    *strrchr(exe, '/') = '\0';
    strncat(exe, "/ts_broker", sizeof exe - strlen(exe) - 1);
    char *argv[] = {exe, sock, (char *)quantum, (char *)idle, NULL};
    pid_t p = spawn(argv, NULL, 0, env);
    for (int i = 0; i < 200 && access(sock, F_OK) != 0; i++)
        msleep(10);
    return p;
}

/* An app running `burst` with the given figures; its results go to
 * dir/<app>.out. */
static pid_t app(const char *name, int ts, const char *secs, const char *gap,
                 const char *us, const char *n, const char *bytes,
                 const char *extra)
{
    char out[240];
    snprintf(out, sizeof out, "%s/%s.out", dir, name);
    char *argv[] = {self_exe, "burst", (char *)secs, (char *)gap, (char *)us,
                    (char *)n, (char *)bytes, out, NULL};
    return spawn(argv, name, ts, extra);
}

static int wait_for(pid_t p, int ms)
{
    int st;
    for (int i = 0; i < ms / 10; i++) {
        if (waitpid(p, &st, WNOHANG) == p)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        msleep(10);
    }
    kill(p, SIGKILL);
    waitpid(p, &st, 0);
    return -1;
}

static void stop_broker(pid_t b)
{
    kill(b, SIGTERM);
    wait_for(b, 5000);
}

/* An app's results: bursts, median and max wait (us); -1 if missing. */
static long results(const char *name, double *median_us, double *max_us)
{
    char path[240];
    long bursts = -1;
    FILE *f;
    snprintf(path, sizeof path, "%s/%s.out", dir, name);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    if (fscanf(f, "bursts %ld median_us %lf max_us %lf", &bursts, median_us,
               max_us) != 3)
        bursts = -1;
    fclose(f);
    unlink(path);
    return bursts;
}

/* "turns N" of the broker's stats line. */
static long broker_turns(void)
{
    char line[512] = {0};
    FILE *f = fopen(brokerout, "r");
    char *t;
    if (f == NULL)
        return -1;
    if (fgets(line, sizeof line, f) == NULL)
        line[0] = '\0';
    fclose(f);
    t = strstr(line, "turns ");
    return t ? strtol(t + 6, NULL, 10) : -1;
}

static struct fake_interval *load(size_t *n)
{
    struct stat st;
    struct fake_interval *v;
    int fd = open(logpath, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0) {
        *n = 0;
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    v = malloc((size_t)st.st_size + 1);
    *n = (size_t)read(fd, v, (size_t)st.st_size) / sizeof(*v);
    close(fd);
    return v;
}

static int case_timeline(void)
{
    pid_t a = app("a", 0, "0.3", "0", "1000", "8", "0", NULL);
    pid_t b = app("b", 0, "0.3", "0", "1000", "8", "0", NULL);
    struct fake_interval *v;
    int64_t lo = INT64_MAX, hi = 0, busy = 0;
    size_t n, both = 0;

    {
        int sa = wait_for(a, 30000), sb = wait_for(b, 30000);
        CHECK(sa == 0 && sb == 0, "a worker failed (a: %d, b: %d)", sa, sb);
    }
    v = load(&n);
    CHECK(v != NULL && n > 0, "no log");
    for (size_t i = 0; i < n; i++) {
        if (v[i].start < lo)
            lo = v[i].start;
        if (v[i].end > hi)
            hi = v[i].end;
        busy += v[i].end - v[i].start;
        for (size_t j = 0; j < n; j++)
            if (v[j].pid != v[i].pid && v[j].start < v[i].end &&
                v[i].start < v[j].end)
                both++;
    }
    printf("timeline: %zu kernels, %.1f ms of work in a span of %.1f ms, "
           "%zu overlapping pairs\n", n, busy / 1e6, (hi - lo) / 1e6, both);
    CHECK(both == 0, "two processes' kernels ran at once (%zu pairs)", both);
    CHECK(hi - lo >= busy, "the span (%.1f ms) is shorter than the work "
          "(%.1f ms): the processes did not share one timeline",
          (hi - lo) / 1e6, busy / 1e6);
    free(v);
    return failures;
}

/* Two apps of `gib` GiB each, no broker, 24 GiB card: moves and paged ns
 * of the card's record. */
static void paging_run(const char *gib, uint64_t *moves, int64_t *paged,
                       int64_t *moved)
{
    struct fake_cuda_stats *st = fake_cuda_stats();
    uint64_t m0 = st->tl.moves;
    int64_t p0 = st->tl.paged_ns, b0 = st->tl.moved_bytes;
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%llu",
             strtoull(gib, NULL, 10) * GIB);
    pid_t a = app("a", 0, "0.4", "2000", "1000", "2", bytes, NULL);
    pid_t b = app("b", 0, "0.4", "2000", "1000", "2", bytes, NULL);
    {
        int sa = wait_for(a, 60000), sb = wait_for(b, 60000);
        CHECK(sa == 0 && sb == 0, "a worker failed (a: %d, b: %d)", sa, sb);
    }
    *moves = st->tl.moves - m0;
    *paged = st->tl.paged_ns - p0;
    *moved = st->tl.moved_bytes - b0;
}

static int case_paging(void)
{
    uint64_t moves;
    int64_t paged, moved;

    paging_run("10", &moves, &paged, &moved);
    printf("paging: 2 x 10 GiB on 24 GiB: %llu switches moved memory\n",
           (unsigned long long)moves);
    CHECK(moves == 0 && paged == 0, "memory that fits the card moved");
    paging_run("14", &moves, &paged, &moved);
    printf("paging: 2 x 14 GiB on 24 GiB: %llu switches moved %.1f GiB in "
           "%.1f ms\n", (unsigned long long)moves, moved / (double)GIB,
           paged / 1e6);
    CHECK(moves > 0, "the apps took turns but no switch moved memory");
    /* each switch brings back what passes the card: 4 GiB (the apps'
     * contexts add a little), at 48 GB/s */
    CHECK(moved >= (int64_t)(moves * 4 * GIB) &&
          moved <= (int64_t)(moves * 5 * GIB),
          "moved %.2f GiB a switch, not ~4", moved / (double)GIB / moves);
    CHECK(paged >= (int64_t)((double)moved / 48.0 * 0.99) &&
          paged <= (int64_t)((double)moved / 48.0 * 1.01) + 1000,
          "paged %.1f ms for %.1f GiB at 48 GB/s", paged / 1e6,
          moved / (double)GIB);
    return failures;
}

static int case_giveback(void)
{
    /* idle 5 ms: the busy app's synchronizes (8 x 200 us) are shorter,
     * so even a shim that counts them as idle keeps its turn */
    pid_t b = broker("1000", "5", NULL);
    pid_t busy = app("busy", 1, "3.5", "0", "200", "8", "0", NULL);
    pid_t bursty;
    double median = 0, max = 0, m2 = 0, x2 = 0;
    long bursts;

    msleep(200); /* the busy app holds the turn */
    /* arriving, the bursty app has no credit: its first burst waits up to
     * the 1 s quantum (left out of its waits); then ~2 s of bursts */
    bursty = app("bursty", 1, "3", "20000", "100", "10", "0", NULL);
    CHECK(wait_for(bursty, 30000) == 0, "bursty app failed");
    CHECK(wait_for(busy, 30000) == 0, "busy app failed");
    stop_broker(b);
    bursts = results("bursty", &median, &max);
    results("busy", &m2, &x2);
    printf("giveback: %ld bursts in 3 s (solo: ~140; the first waits for "
           "the holder's quantum), wait for the turn median %.1f ms, max "
           "%.1f ms (quantum 1 s)\n", bursts, median / 1e3, max / 1e3);
    CHECK(bursts >= 0, "no results from the bursty app");
    CHECK(median < 200e3, "the bursty app waited %.1f ms (median) for the "
          "turn it gave back early", median / 1e3);
    CHECK(bursts >= 20, "only %ld bursts in 3 s", bursts);
    return failures;
}

static int case_syncbusy(void)
{
    pid_t b = broker("300", "1", NULL);
    pid_t busy = app("busy", 1, "2.5", "0", "500", "8", "0", NULL);
    pid_t lng = app("long", 1, "2.5", "0", "50000", "1", "0", NULL);
    double median = 0, max = 0;
    long kernels, turns;

    CHECK(wait_for(lng, 30000) == 0, "long-kernel app failed");
    CHECK(wait_for(busy, 30000) == 0, "busy app failed");
    stop_broker(b);
    kernels = results("long", &median, &max);
    results("busy", &median, &max);
    turns = broker_turns();
    printf("syncbusy: the app synchronizing 50 ms kernels ran %ld of them "
           "in 2.5 s, %ld turns in all (quantum 300 ms: ~10; given back in "
           "each synchronize: ~90)\n", kernels, turns);
    CHECK(kernels >= 12, "only %ld kernels of 50 ms in 2.5 s", kernels);
    /* two apps that never pause swap at the quantum: ~2.5 s / 300 ms */
    CHECK(turns >= 0 && turns <= 30, "%ld turns in 2.5 s: the turn was given "
          "back while the apps waited for the device", turns);
    return failures;
}

/* The same with the result read back by a synchronous copy: the thread
 * waits inside a submission, which is busy too. */
static int case_synccopy(void)
{
    pid_t b = broker("300", "1", NULL);
    pid_t busy = app("busy", 1, "2.5", "0", "500", "8", "0", NULL);
    pid_t lng = app("long", 1, "2.5", "0", "50000", "1", "0",
                    "TS_TURNS_COPY=1");
    double median = 0, max = 0;
    long kernels, turns;

    CHECK(wait_for(lng, 30000) == 0, "long-kernel app failed");
    CHECK(wait_for(busy, 30000) == 0, "busy app failed");
    stop_broker(b);
    kernels = results("long", &median, &max);
    results("busy", &median, &max);
    turns = broker_turns();
    printf("synccopy: the app reading back 50 ms kernels' results ran %ld "
           "of them in 2.5 s, %ld turns in all (quantum 300 ms: ~10)\n",
           kernels, turns);
    CHECK(kernels >= 12, "only %ld kernels of 50 ms in 2.5 s", kernels);
    CHECK(turns >= 0 && turns <= 30, "%ld turns in 2.5 s: the turn was given "
          "back while a copy waited for the device", turns);
    return failures;
}

/* The same, the thread waiting on an event recorded after its kernels. */
static int case_syncevent(void)
{
    pid_t b = broker("300", "1", NULL);
    pid_t busy = app("busy", 1, "2.5", "0", "500", "8", "0", NULL);
    pid_t lng = app("long", 1, "2.5", "0", "50000", "1", "0",
                    "TS_TURNS_EVENT=1");
    double median = 0, max = 0;
    long kernels, turns;

    CHECK(wait_for(lng, 30000) == 0, "long-kernel app failed");
    CHECK(wait_for(busy, 30000) == 0, "busy app failed");
    stop_broker(b);
    kernels = results("long", &median, &max);
    results("busy", &median, &max);
    turns = broker_turns();
    printf("syncevent: the app waiting on events after 50 ms kernels ran "
           "%ld of them in 2.5 s, %ld turns in all (quantum 300 ms: ~10)\n",
           kernels, turns);
    CHECK(kernels >= 12, "only %ld kernels of 50 ms in 2.5 s", kernels);
    CHECK(turns >= 0 && turns <= 30, "%ld turns in 2.5 s: the turn was given "
          "back while a thread waited on an event", turns);
    return failures;
}

static int case_oversub(void)
{
    struct fake_cuda_stats *st = fake_cuda_stats();
    uint64_t m0 = st->tl.moves;
    int64_t p0 = st->tl.paged_ns, b0 = st->tl.busy_ns;
    char bytes[32];
    pid_t b, x, y;
    uint64_t moves;
    double paged, busy;

    snprintf(bytes, sizeof bytes, "%llu", 14 * GIB);
    b = broker("30", "1", NULL);
    x = app("a", 1, "4", "0", "1000", "8", bytes,
            "ACCEL_MEMORY_LIMIT=24Gi");
    y = app("b", 1, "4", "0", "1000", "8", bytes,
            "ACCEL_MEMORY_LIMIT=24Gi");
    {
        /* both reaped whatever the first says, and both said: a worker's
         * status names the step (3: a call failed; 66: a sanitizer's
         * report; -1: timed out) */
        int sa = wait_for(x, 60000), sb = wait_for(y, 60000);
        CHECK(sa == 0 && sb == 0, "a worker failed (a: %d, b: %d)", sa, sb);
    }
    stop_broker(b);
    results("a", &paged, &busy);
    results("b", &paged, &busy);
    moves = st->tl.moves - m0;
    paged = (double)(st->tl.paged_ns - p0);
    busy = (double)(st->tl.busy_ns - b0);
    printf("oversub: 2 x 14 GiB on 24 GiB, 48 GB/s, quantum 30 ms: %llu "
           "switches paged, paging %.1f %% of device time\n",
           (unsigned long long)moves, 100.0 * paged / (paged + busy));
    CHECK(moves <= 12, "%llu switches moved memory in 4 s: a ping-pong",
          (unsigned long long)moves);
    CHECK(paged <= 0.25 * (paged + busy), "paging took %.1f %% of device "
          "time", 100.0 * paged / (paged + busy));
    CHECK(busy > 0, "no work ran");
    return failures;
}

int main(int argc, char **argv)
{
    int rc;
    cuInit(0);
    if (argc >= 8 && strcmp(argv[1], "burst") == 0)
        return burst(argv);
    if (argc < 2 || readlink("/proc/self/exe", self_exe,
                             sizeof self_exe - 1) < 0)
        return 2;
    snprintf(dir, sizeof dir, "%s/accel-tsturns-XXXXXX",
             getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR")
                                                     : "/tmp");
    if (mkdtemp(dir) == NULL)
        return 2;
    snprintf(sock, sizeof sock, "%s/ts.sock", dir);
    snprintf(logpath, sizeof logpath, "%s/gpu.log", dir);
    snprintf(brokerout, sizeof brokerout, "%s/broker.out", dir);
    /* the card: 24 GiB, managed memory may pass it, 48 GB/s link; the
     * broker knows the same card */
    setenv("FAKE_CUDA_TOTAL", "25769803776", 1);
    setenv("FAKE_CUDA_OVERSUB", "1", 1);
    setenv("FAKE_CUDA_LINK_GBPS", "48", 1);
    setenv("TS_BROKER_CARD_BYTES", "25769803776", 1);
    setenv("TS_BROKER_LINK_BPS", "48000000000", 1);
    if (strcmp(argv[1], "timeline") == 0)
        rc = case_timeline();
    else if (strcmp(argv[1], "paging") == 0)
        rc = case_paging();
    else if (strcmp(argv[1], "giveback") == 0)
        rc = case_giveback();
    else if (strcmp(argv[1], "syncbusy") == 0)
        rc = case_syncbusy();
    else if (strcmp(argv[1], "oversub") == 0)
        rc = case_oversub();
    else if (strcmp(argv[1], "synccopy") == 0)
        rc = case_synccopy();
    else if (strcmp(argv[1], "syncevent") == 0)
        rc = case_syncevent();
    else
        rc = 2;
    {
        const char *names[] = {"a", "b", "busy", "bursty", "long"};
        char path[240];
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            snprintf(path, sizeof path, "%s/%s.out", dir, names[i]);
            unlink(path);
        }
    }
    unlink(logpath);
    unlink(brokerout);
    unlink(sock);
    if (rmdir(dir) != 0) {
        fprintf(stderr, "ts_turns: %s left behind\n", dir);
        rc = 1;
    }
    return rc ? 1 : 0;
}
