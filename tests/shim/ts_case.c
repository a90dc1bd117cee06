/* SPDX-License-Identifier: MIT */
/*
 * ts_case.c: time-slicing tests without a GPU. The fake libcuda.so.1 logs
 * every simulated submission as [start, end] per process (FAKE_CUDA_LOG);
 * this program starts a broker (ts_broker) and worker processes of
 * different apps (itself, `ts_case worker ...`, under the shim) and checks
 * the log. argv[1] picks the case; exit 0 = pass.
 *
 *   fair     two apps, busy: never on the device at the same time; each
 *            gets 50 % +- 20 points of the device time in the common window
 *   alone    one app, quantum 10 ms: never waits for the turn (the
 *            broker's own wait total stays exactly 0: a lone app's
 *            request is granted in the same step it arrives) and is never
 *            revoked; the longest gap between its submissions is printed,
 *            and only bounded loosely (1 s), since on a loaded machine the
 *            scheduler alone can make gaps of 100 ms and more
 *   kill     a holder killed with SIGKILL mid-turn (quantum 60 s): the
 *            waiting app runs within 1 s
 *   restart  the broker killed and restarted mid-run: both apps finish
 *   refused  the broker refuses the app (not a process of it): its
 *            launches fail with CUDA_ERROR_NOT_PERMITTED at once and
 *            ACCEL_LOG says why (issue 10, item 6)
 *   revoke   a holder stuck in its handoff (a 3 s kernel to synchronize)
 *            loses the turn after quantum + grace: the waiter runs within
 *            1.5 s; the holder's later submissions wait for the turn again
 *            (no overlap after its long kernel)
 *   pinned   memory that cannot be evicted at a turn switch (VMM, a
 *            stream-ordered pool, pitch) is counted across the apps of a
 *            4 GiB card through its card ledger (ACCEL_TS_LEDGER_0): an
 *            allocation that would pass the card is refused by the shim
 *            (CUDA_ERROR_OUT_OF_MEMORY, the stand-in never asked), a
 *            killed app's share comes back (issue 35)
 *   pinned_broker  the same with the card ledger from the broker
 *            (ACCEL_TS_LEDGER_0=@broker: the sealed memfd ts_broker hands
 *            each admitted process, as acceld's does; issue cardled)
 *   card_unsealed  a "broker" (this process) hands over a card ledger
 *            that is not sealed against shrinking (its owner could cut it
 *            short under the mapping: SIGBUS): the shim does not map it
 *            (ACCEL_LOG says so) and runs without the card's count, so
 *            that ledger's 1 GiB limit does not refuse a 2 GiB VMM handle
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/ledger.h"
#include "check.h"
#include "fake_cuda.h"
#include "shim/cuda_types.h"

CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned,
                        unsigned, unsigned, unsigned, CUstream, void **,
                        void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void **);
CUresult cuGraphLaunch(void *, CUstream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
CUresult cuCtxSynchronize(void);
CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemPrefetchAsync(CUdeviceptr, size_t, CUdevice, CUstream);
CUresult cuMemcpyBatchAsync(CUdeviceptr *, CUdeviceptr *, size_t *, size_t,
                            void *, size_t *, size_t, size_t *, CUstream);
CUresult cuStreamWriteValue32_v2(CUstream, CUdeviceptr, unsigned, unsigned);
CUresult cuMemcpy3DPeer(const void *);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t,
                     const CUmemAllocationProp *, unsigned long long);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t,
                            unsigned int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
struct fake_cuda_stats *fake_cuda_stats(void);

int failures;
static char dir[160], sock[200], logpath[200], shimlog[200], brokerout[200];
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

/* worker APP SECONDS KERNEL_US [FIRST_US]: submit until SECONDS have
 * passed; with FIRST_US, first one kernel that long, synchronized.
 * Exit 3: a submission failed, 4: with CUDA_ERROR_NOT_PERMITTED, 5: the
 * very first one did. */
static int worker(int argc, char **argv)
{
    double secs = atof(argv[3]);
    unsigned us = (unsigned)strtoul(argv[4], NULL, 10);
    int64_t end;
    char host[64] = {0};
    long n = 0;
    const char *memops = getenv("TS_MEMOPS_APP");
    int only_memops = memops != NULL && strcmp(memops, argv[2]) == 0;
    CUcontext ctx = NULL;

    /* as the CUDA runtime starts: the primary context, made current (the
     * shim synchronizes the contexts it saw at a turn's end) */
    if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 3;
    if (argc > 5) {
        CUresult rc = cuLaunchKernel(NULL, (unsigned)strtoul(argv[5], NULL, 10),
                                     1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        if (rc != CUDA_SUCCESS)
            return rc == CUDA_ERROR_NOT_PERMITTED ? 4 : 3;
        cuCtxSynchronize();
    }
    end = mono_ns() + (int64_t)(secs * 1e9);

    while (mono_ns() < end) {
        CUresult rc;
        switch (only_memops ? 16 + 8 * (n % 4) : n % 50) {
        case 10: rc = cuLaunchCooperativeKernel(NULL, us, 1, 1, 1, 1, 1, 0,
                                                NULL, NULL); break;
        case 20: rc = cuGraphLaunch(NULL, NULL); break;
        case 30: rc = cuMemcpyHtoD_v2(0x1000, host, sizeof host); break;
        case 40: rc = cuMemsetD8_v2(0x1000, 0, 64); break;
        /* issue 35: copies, prefetches and stream memory operations,
         * each the first submission after a synchronize */
        case 16: rc = cuMemPrefetchAsync(0x1000, 64, 0, NULL); break;
        case 24: {
            CUdeviceptr d = 0x1000, s = 0x2000;
            size_t sz = 64, idx = 0, fail = 0;
            rc = cuMemcpyBatchAsync(&d, &s, &sz, 1, NULL, &idx, 0, &fail,
                                    NULL);
            break;
        }
        case 32: rc = cuStreamWriteValue32_v2(NULL, 0x1000, 1, 0); break;
        case 48: rc = cuMemcpy3DPeer(host); break;
        default:
            rc = cuLaunchKernel(NULL, us, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        }
        if (rc != CUDA_SUCCESS)
            return rc != CUDA_ERROR_NOT_PERMITTED ? 3 : n == 0 ? 5 : 4;
        if (++n % 8 == 0)
            cuCtxSynchronize(); /* like an app reading its results */
    }
    cuCtxSynchronize();
    return 0;
}

/* hold APP KIND MIB MARKER: allocate MIB MiB the KIND way (vmm, pool,
 * pitch, managed: cuMemAlloc_v2, managed on a time-sliced device), create
 * MARKER and hold it until killed. Exit 10: out of memory, 3: another
 * error. */
static int hold(char **argv)
{
    size_t b = strtoull(argv[4], NULL, 10) << 20, pitch = 0;
    CUdeviceptr p = 0;
    CUcontext ctx = NULL;
    CUresult rc;

    /* as the CUDA runtime starts (the driver refuses an allocation
     * without a current context) */
    if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 3;
    if (strcmp(argv[3], "vmm") == 0) {
        CUmemAllocationProp pr = {.type = 1, .location = {1, 0}};
        CUmemGenericAllocationHandle h = 0;
        rc = cuMemCreate(&h, b, &pr, 0);
    } else if (strcmp(argv[3], "pool") == 0) {
        rc = cuMemAllocAsync(&p, b, NULL);
    } else if (strcmp(argv[3], "pitch") == 0) {
        rc = cuMemAllocPitch_v2(&p, &pitch, 1 << 20, b >> 20, 4);
    } else {
        rc = cuMemAlloc_v2(&p, b);
    }
    if (rc != CUDA_SUCCESS)
        return rc == CUDA_ERROR_OUT_OF_MEMORY ? 10 : 3;
    close(open(argv[5], O_WRONLY | O_CREAT, 0600));
    for (;;)
        pause();
}

static pid_t spawn(char *const argv[], const char *app)
{
    pid_t p = fork();
    if (p == 0) {
        char e1[160], e2[240], e3[240], e4[240];
        snprintf(e1, sizeof e1, "ACCEL_APP=%s", app ? app : "broker");
        snprintf(e2, sizeof e2, "ACCEL_TS_SOCKET_0=%s", sock);
        snprintf(e3, sizeof e3, "FAKE_CUDA_LOG=%s", logpath);
        putenv(e1);
        putenv(e2);
        putenv(e3);
        snprintf(e4, sizeof e4, "ACCEL_LOG=%s", shimlog);
        putenv(e4);
        if (app == NULL) { /* the broker: its stats on exit go to a file */
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

static pid_t broker_as(const char *quantum, const char *idle,
                       const char *grace, const char *only)
{
    char exe[600];
    snprintf(exe, sizeof exe, "%s", self_exe);
    *strrchr(exe, '/') = '\0';
    strncat(exe, "/ts_broker", sizeof exe - strlen(exe) - 1);
    char *argv[] = {exe, sock, (char *)quantum, (char *)idle, (char *)grace,
                    (char *)only, NULL};
    pid_t p = spawn(argv, NULL);
    for (int i = 0; i < 200 && access(sock, F_OK) != 0; i++)
        msleep(10);
    return p;
}

static pid_t broker(const char *quantum, const char *idle)
{
    return broker_as(quantum, idle, NULL, NULL);
}

static pid_t app(const char *name, const char *secs, const char *us)
{
    char *argv[] = {self_exe, "worker", (char *)name, (char *)secs,
                    (char *)us, NULL};
    return spawn(argv, name);
}

/* Wait for p at most ms; its exit status, or -1 (then it is killed). */
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

static struct fake_interval *load(size_t *n)
{
    struct stat st;
    struct fake_interval *v;
    int fd = open(logpath, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0) {
        *n = 0;
        return NULL;
    }
    v = malloc((size_t)st.st_size + 1);
    *n = (size_t)read(fd, v, (size_t)st.st_size) / sizeof(*v);
    close(fd);
    return v;
}

static int by_submit(const void *a, const void *b)
{
    const struct fake_interval *x = a, *y = b;
    return x->submit < y->submit ? -1 : x->submit > y->submit;
}

/* Two apps on the card at once (at most 2 pids): on the shared timeline
 * nothing overlaps on the device, so what time slicing must prevent is
 * one process submitting while the other's work is still queued or
 * running ([submit, end] intervals of different pids overlap). */
static int overlaps(struct fake_interval *v, size_t n, int64_t after)
{
    int64_t end[2] = {0, 0}, pid[2] = {0, 0};
    int bad = 0;
    qsort(v, n, sizeof(*v), by_submit);
    for (size_t i = 0; i < n; i++) {
        int k = pid[0] == 0 || pid[0] == v[i].pid ? 0 : 1;
        pid[k] = v[i].pid;
        if (v[i].submit >= after && end[1 - k] > v[i].submit) {
            if (bad++ < 3)
                fprintf(stderr, "overlap: pid %lld submits %lld ns before "
                        "pid %lld's work ends\n", (long long)v[i].pid,
                        (long long)(end[1 - k] - v[i].submit),
                        (long long)pid[1 - k]);
        }
        if (v[i].end > end[k])
            end[k] = v[i].end;
    }
    return bad;
}

/* Apps "a" and "b" submitting for secs under one broker (quantum 50 ms,
 * idle 20 ms); their pids, and the log of what ran, never overlapping. */
static struct fake_interval *two_apps(const char *secs, pid_t *a1, pid_t *a2,
                                      size_t *n)
{
    pid_t b = broker("50", "20");
    struct fake_interval *v;

    *a1 = app("a", secs, "500");
    *a2 = app("b", secs, "500");
    CHECK(wait_for(*a1, 30000) == 0, "worker a failed");
    CHECK(wait_for(*a2, 30000) == 0, "worker b failed");
    kill(b, SIGTERM);
    wait_for(b, 5000);
    v = load(n);
    CHECK(*n > 100, "only %zu submissions logged", *n);
    CHECK(overlaps(v, *n, 0) == 0, "two apps on the device at once");
    return v;
}

static int case_fair(void)
{
    pid_t a1, a2;
    size_t n;
    struct fake_interval *v = two_apps("3", &a1, &a2, &n);
    int64_t first[2] = {0, 0}, last[2] = {0, 0}, busy[2] = {0, 0}, lo, hi;

    for (size_t i = 0; i < n; i++) {
        int k = v[i].pid == a1 ? 0 : 1;
        if (first[k] == 0 || v[i].start < first[k])
            first[k] = v[i].start;
        if (v[i].end > last[k])
            last[k] = v[i].end;
    }
    lo = first[0] > first[1] ? first[0] : first[1];
    hi = last[0] < last[1] ? last[0] : last[1];
    for (size_t i = 0; i < n; i++) {
        int k = v[i].pid == a1 ? 0 : 1;
        if (v[i].start >= lo && v[i].end <= hi)
            busy[k] += v[i].end - v[i].start;
    }
    double share = busy[0] + busy[1] > 0
                       ? (double)busy[0] / (double)(busy[0] + busy[1]) : 0;
    printf("fair: %zu submissions, app a %.1f %% of the shared window "
           "(%.2f s)\n", n, share * 100, (hi - lo) / 1e9);
    CHECK(share > 0.30 && share < 0.70, "share of a %.3f", share);
    free(v);
    return failures;
}

/* The broker's stats line, printed when it exits: waited (us) and
 * revoked; -1 when the line is missing. */
static int broker_stats_read(double *waited_us, long *revoked)
{
    char line[512] = {0};
    FILE *f = fopen(brokerout, "r");
    char *w, *r;

    if (f == NULL)
        return -1;
    if (fgets(line, sizeof line, f) == NULL)
        line[0] = '\0';
    fclose(f);
    w = strstr(line, "waited_us ");
    r = strstr(line, "revoked ");
    if (w == NULL || r == NULL)
        return -1;
    *waited_us = strtod(w + 10, NULL);
    *revoked = strtol(r + 8, NULL, 10);
    return 0;
}

static int case_alone(void)
{
    pid_t b = broker("10", "5");
    int64_t t0 = mono_ns(), t1, gap = 0, busy = 0;
    pid_t a1 = app("solo", "1.5", "200");
    double waited = -1;
    long revoked = -1;
    size_t n;
    struct fake_interval *v;

    CHECK(wait_for(a1, 30000) == 0, "worker failed");
    t1 = mono_ns();
    kill(b, SIGTERM);
    CHECK(wait_for(b, 5000) == 0, "broker did not exit cleanly");
    v = load(&n);
    qsort(v, n, sizeof(*v), by_submit);
    for (size_t i = 0; i < n; i++) {
        busy += v[i].end - v[i].start;
        if (i > 0 && v[i].start - v[i - 1].end > gap)
            gap = v[i].start - v[i - 1].end;
    }
    printf("alone: %zu submissions, longest gap %.2f ms, device busy "
           "%.2f of %.2f s\n", n, gap / 1e6, busy / 1e9, (t1 - t0) / 1e9);
    CHECK(n > 100, "only %zu submissions", n);
    CHECK(broker_stats_read(&waited, &revoked) == 0,
          "no stats line from the broker");
    CHECK(waited == 0, "a lone app waited %.1f us for the turn", waited);
    CHECK(revoked == 0, "a lone app lost the turn %ld times", revoked);
    CHECK(gap < 1000 * 1000000LL, "waited %.1f ms", gap / 1e6);
    free(v);
    return failures;
}

static int case_kill(void)
{
    pid_t b = broker("60000", "60000");
    pid_t a1 = app("holder", "20", "1000"), a2;
    int64_t killed, first = 0;
    size_t n;
    struct fake_interval *v;

    msleep(300);
    a2 = app("waiter", "1", "1000");
    msleep(500);
    killed = mono_ns();
    kill(a1, SIGKILL);
    wait_for(a1, 5000);
    CHECK(wait_for(a2, 30000) == 0, "waiter failed");
    kill(b, SIGTERM);
    wait_for(b, 5000);
    v = load(&n);
    for (size_t i = 0; i < n; i++)
        if (v[i].pid == a2 && (first == 0 || v[i].start < first))
            first = v[i].start;
    printf("kill: waiter ran %.1f ms after the holder was killed\n",
           (first - killed) / 1e6);
    CHECK(first != 0, "the waiter never ran");
    /* its queued work may end up to 1 ms after the kill */
    CHECK(first >= killed - 2000000, "the waiter ran while the holder held");
    CHECK(first - killed < 1000000000LL, "waited %.1f ms", (first - killed) / 1e6);
    free(v);
    return failures;
}

static int case_restart(void)
{
    pid_t b = broker("20", "10");
    pid_t a1 = app("a", "3", "300"), a2 = app("b", "3", "300");
    int64_t t0 = mono_ns();

    msleep(800);
    kill(b, SIGKILL);
    wait_for(b, 5000);
    unlink(sock);
    msleep(400);
    b = broker("20", "10");
    CHECK(wait_for(a1, 20000) == 0, "app a did not finish (deadlock?)");
    CHECK(wait_for(a2, 20000) == 0, "app b did not finish (deadlock?)");
    printf("restart: both apps done %.2f s after start (3 s of work)\n",
           (mono_ns() - t0) / 1e9);
    kill(b, SIGTERM);
    wait_for(b, 5000);
    return failures;
}

static int case_refused(void)
{
    pid_t b = broker_as("50", "20", "1000", "good");
    int64_t t0 = mono_ns();
    pid_t a1 = app("intruder", "30", "100");
    int rc = wait_for(a1, 10000);
    char buf[2048] = {0};
    int fd = open(shimlog, O_RDONLY);

    printf("refused: worker exit %d after %.0f ms\n", rc,
           (mono_ns() - t0) / 1e6);
    CHECK(rc == 5, "exit %d: want 5 (its first launch failed with "
          "CUDA_ERROR_NOT_PERMITTED; 4: a later one; -1: still running "
          "after 10 s)", rc);
    CHECK(fd >= 0 && read(fd, buf, sizeof buf - 1) > 0, "no ACCEL_LOG");
    CHECK(strstr(buf, "refused this process: pid ") != NULL &&
          strstr(buf, "is not a process of app 'intruder'") != NULL,
          "log lacks the reason: %s", buf);
    if (fd >= 0)
        close(fd);
    kill(b, SIGTERM);
    wait_for(b, 5000);
    return failures;
}

static int case_revoke(void)
{
    pid_t b = broker_as("50", "20", "200", NULL);
    char *hog_argv[] = {self_exe, "worker", "hog", "1", "300", "3000000",
                        NULL};
    pid_t hog = spawn(hog_argv, "hog"), w;
    int64_t asked, first = 0, big_end = 0;
    size_t n;
    struct fake_interval *v;

    msleep(300); /* the hog holds the turn, synchronizing its 3 s kernel */
    asked = mono_ns();
    w = app("waiter", "2", "300");
    CHECK(wait_for(w, 30000) == 0, "waiter failed");
    CHECK(wait_for(hog, 30000) == 0, "hog failed");
    kill(b, SIGTERM);
    wait_for(b, 5000);
    v = load(&n);
    for (size_t i = 0; i < n; i++) {
        /* when it submitted: on the one timeline its kernels then
         * queue behind the hog's 3 s kernel, as on a card (no GPU is
         * preempted from user space) */
        if (v[i].pid == w && (first == 0 || v[i].submit < first))
            first = v[i].submit;
        if (v[i].pid == hog && v[i].end - v[i].start >= 2000000000LL)
            big_end = v[i].end;
    }
    printf("revoke: the waiter submitted %.0f ms after asking (quantum 50 + "
           "grace 200 ms; the hog's kernel ran 3 s)\n", (first - asked) / 1e6);
    CHECK(first != 0 && big_end != 0, "log incomplete");
    CHECK(first - asked < 1500000000LL, "waited %.0f ms: the turn was not "
          "taken back", (first - asked) / 1e6);
    /* after its long kernel the hog waits for the turn again */
    CHECK(overlaps(v, n, big_end + 1) == 0,
          "the revoked hog submitted during the waiter's turn");
    free(v);
    return failures;
}

/* Issue 35: an app whose every submission is a prefetch, a batched copy,
 * a stream memory operation or a 3D peer copy takes turns with one that
 * launches kernels: never on the device at once. */
static int case_memops(void)
{
    pid_t a1, a2;
    size_t n;
    struct fake_interval *v;

    setenv("TS_MEMOPS_APP", "b", 1); /* the memory operations of b must
                                      * not overlap a's kernels */
    v = two_apps("2", &a1, &a2, &n);
    printf("memops: %zu submissions\n", n);
    free(v);
    return failures;
}

/* Start `hold` as app NAME; with MARKER, wait until it holds (its pid),
 * else until it exits: -(its exit status). */
static pid_t holder(const char *name, const char *kind, const char *mib,
                    int wait_held)
{
    char marker[240];
    snprintf(marker, sizeof marker, "%s/%s.held", dir, name);
    unlink(marker);
    char *argv[] = {self_exe, "hold", (char *)name, (char *)kind,
                    (char *)mib, marker, NULL};
    pid_t p = spawn(argv, name);
    if (!wait_held)
        return -wait_for(p, 20000);
    for (int i = 0; i < 2000 && access(marker, F_OK) != 0; i++) {
        int st;
        if (waitpid(p, &st, WNOHANG) == p)
            return -(WIFEXITED(st) ? WEXITSTATUS(st) : 128);
        msleep(10);
    }
    unlink(marker);
    return p;
}

static int grep_file(const char *path, const char *needle)
{
    char buf[8192] = {0};
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? 0 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    return n > 0 && strstr(buf, needle) != NULL;
}

/* pinned with ACCEL_TS_LEDGER_0=card (a path, or @broker). */
static int case_pinned_as(const char *card)
{
    struct fake_cuda_stats *st;
    pid_t a, b;
    int rc;

    setenv("ACCEL_TS_LEDGER_0", card, 1);
    setenv("FAKE_CUDA_TOTAL", "4294967296", 1);
    setenv("FAKE_CUDA_CTX_BYTES", "0", 1); /* the card: the apps' memory */
    st = fake_cuda_stats();
    a = holder("a", "vmm", "2560", 1); /* llama.cpp's VMM pool */
    CHECK(a > 0, "app a holds 2.5 GiB of VMM memory");
    rc = -holder("b", "vmm", "2048", 0);
    CHECK(rc == 10, "app b's 2 GiB VMM handle refused (exit %d)", rc);
    rc = -holder("b", "pool", "2048", 0);
    CHECK(rc == 10, "app b's 2 GiB from the pool refused (exit %d)", rc);
    CHECK(atomic_load(&st->refused) == 0,
          "the shim refused, the card was never asked (%llu refusals "
          "reached it)", (unsigned long long)atomic_load(&st->refused));
    CHECK(grep_file(shimlog, "would pass the card"),
          "ACCEL_LOG says why (%s)", shimlog);
    b = holder("b", "pitch", "1024", 1); /* 3.5 GiB: fits */
    CHECK(b > 0, "app b's 1 GiB pitch allocation fits beside a");
    if (b > 0)
        wait_for(b, 0); /* SIGKILL: its share must come back */
    b = holder("c", "vmm", "1536", 1); /* 4 GiB: exactly the card */
    CHECK(b > 0, "a killed app's share came back: c holds 1.5 GiB");
    CHECK(atomic_load(&st->max_used) <= 4294967296LL,
          "physical peak %lld within the card",
          (long long)atomic_load(&st->max_used));
    if (b > 0)
        wait_for(b, 0);
    if (a > 0)
        wait_for(a, 0);
    return failures;
}

static int case_pinned(void)
{
    char card[240];
    int rc;

    snprintf(card, sizeof card, "%s/card.ledger", dir);
    rc = case_pinned_as(card);
    unlink(card);
    return rc;
}

/* pinned, with the card ledger from ts_broker (a 4 GiB card). */
static int case_pinned_broker(void)
{
    pid_t b;
    int rc;

    setenv("TS_BROKER_CARD_BYTES", "4294967296", 1);
    b = broker("1000", "50");
    rc = case_pinned_as("@broker");
    CHECK(!grep_file(shimlog, "unusable"), "the card ledger was mapped");
    kill(b, SIGTERM);
    wait_for(b, 5000);
    return rc;
}

/* One "L" record with fd attached to connection c. */
static int send_card(int c, int fd)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } cb;
    struct iovec iov = {.iov_base = "L", .iov_len = 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = cb.b, .msg_controllen = sizeof cb.b};
    struct cmsghdr *h;

    memset(&cb, 0, sizeof cb);
    h = CMSG_FIRSTHDR(&mh);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    return sendmsg(c, &mh, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

static int case_card_unsealed(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct accel_ledger *l;
    struct pollfd pfd;
    char hello[128], marker[240];
    int lfd, c = -1, mfd, st = 0;
    pid_t a;

    /* a valid ledger of a 1 GiB card, in a memfd with no seals */
    mfd = memfd_create("not-sealed", MFD_CLOEXEC);
    CHECK(mfd >= 0 && ftruncate(mfd, (off_t)ACCEL_LEDGER_SIZE) == 0,
          "memfd");
    l = mmap(NULL, ACCEL_LEDGER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
             mfd, 0);
    CHECK(l != MAP_FAILED, "mapped");
    if (failures)
        return failures;
    l->major = ACCEL_LEDGER_MAJOR;
    l->minor = ACCEL_LEDGER_MINOR;
    l->header_size = (uint32_t)offsetof(struct accel_ledger, slots);
    l->slot_count = ACCEL_LEDGER_SLOTS;
    l->device = -1;
    atomic_store(&l->limit, 1ULL << 30);
    atomic_store(&l->epoch, 1);
    atomic_store_explicit((_Atomic uint64_t *)&l->magic, ACCEL_LEDGER_MAGIC,
                          memory_order_release);
    CHECK(accel_ledger_valid(l), "a valid ledger");
    munmap(l, ACCEL_LEDGER_SIZE);
    /* this process is the broker */
    CHECK(strlen(sock) < sizeof sa.sun_path, "socket path fits");
    if (failures)
        return failures;
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
          listen(lfd, 4) == 0, "listening on %s", sock);
    setenv("ACCEL_TS_LEDGER_0", "@broker", 1);
    setenv("FAKE_CUDA_TOTAL", "4294967296", 1);
    setenv("FAKE_CUDA_CTX_BYTES", "0", 1);
    snprintf(marker, sizeof marker, "%s/a.held", dir);
    unlink(marker);
    {
        char *argv[] = {self_exe, "hold", "a", "vmm", "2048", marker, NULL};
        a = spawn(argv, "a"); /* this process serves it meanwhile */
    }
    pfd = (struct pollfd){.fd = lfd, .events = POLLIN};
    if (poll(&pfd, 1, 20000) == 1)
        c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    CHECK(c >= 0, "the shim connected for its card ledger");
    if (c >= 0) {
        ssize_t n = recv(c, hello, sizeof hello - 1, 0);
        hello[n > 0 ? n : 0] = '\0';
        CHECK(strncmp(hello, "H 1 a", 5) == 0, "its hello (%s)", hello);
        CHECK(send_card(c, mfd) == 0, "L sent");
    }
    /* held (the marker), or exited (10: refused by that ledger) */
    for (int i = 0; i < 2000 && access(marker, F_OK) != 0 &&
                    waitpid(a, &st, WNOHANG) != a;
         i++)
        msleep(10);
    CHECK(access(marker, F_OK) == 0,
          "the 2 GiB VMM handle was not refused by the 1 GiB ledger");
    unlink(marker);
    CHECK(grep_file(shimlog, "not sealed against shrinking: not mapped"),
          "ACCEL_LOG says why (%s)", shimlog);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    if (c >= 0)
        close(c);
    close(lfd);
    close(mfd);
    return failures;
}

int main(int argc, char **argv)
{
    int rc;
    cuInit(0); /* as every CUDA program does first */
    if (argc >= 5 && strcmp(argv[1], "worker") == 0)
        return worker(argc, argv);
    if (argc >= 6 && strcmp(argv[1], "hold") == 0)
        return hold(argv);
    if (argc < 2)
        return 2;
    if (readlink("/proc/self/exe", self_exe, sizeof self_exe - 1) < 0)
        return 2;
    snprintf(dir, sizeof dir, "%s/accel-tstest-XXXXXX",
             getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR")
                                                     : "/tmp");
    if (mkdtemp(dir) == NULL)
        return 2;
    snprintf(sock, sizeof sock, "%s/ts.sock", dir);
    snprintf(logpath, sizeof logpath, "%s/gpu.log", dir);
    snprintf(shimlog, sizeof shimlog, "%s/shim.log", dir);
    snprintf(brokerout, sizeof brokerout, "%s/broker.out", dir);
    if (strcmp(argv[1], "fair") == 0)
        rc = case_fair();
    else if (strcmp(argv[1], "memops") == 0)
        rc = case_memops();
    else if (strcmp(argv[1], "alone") == 0)
        rc = case_alone();
    else if (strcmp(argv[1], "kill") == 0)
        rc = case_kill();
    else if (strcmp(argv[1], "restart") == 0)
        rc = case_restart();
    else if (strcmp(argv[1], "refused") == 0)
        rc = case_refused();
    else if (strcmp(argv[1], "revoke") == 0)
        rc = case_revoke();
    else if (strcmp(argv[1], "pinned") == 0)
        rc = case_pinned();
    else if (strcmp(argv[1], "pinned_broker") == 0)
        rc = case_pinned_broker();
    else if (strcmp(argv[1], "card_unsealed") == 0)
        rc = case_card_unsealed();
    else
        rc = 2;
    unlink(logpath);
    unlink(shimlog);
    unlink(brokerout);
    unlink(sock);
    rmdir(dir);
    return rc ? 1 : 0;
}
