/* SPDX-License-Identifier: MIT */
/*
 * quota_cases.c: the memory-quota cases CUDA's and HIP's snippet programs
 * share (quota_cases.h). Each runs under LD_PRELOAD=libaccelshim.so against
 * the program's stand-in (fake_cuda.c, fake_hip.c) through its gpu_api.
 */
#define _GNU_SOURCE 1
#include "quota_cases.h"

#include <signal.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/node/ledger.h"

int failures;

static char ledger_file[512];

const char *ledger_path_env(void)
{
    const char *dev = getenv("FAKE_CUDA_DEVICE"); /* the app's device */

    snprintf(ledger_file, sizeof(ledger_file), "%s/accel/shim-%s-dev%s.ledger",
             getenv("XDG_RUNTIME_DIR"), getenv("ACCEL_APP"), dev ? dev : "0");
    return ledger_file;
}

uint64_t ledger_used(void)
{
    struct ledger_usage u = { 0 };
    enum accel_err rc = ledger_read(ledger_path_env(), &u);
    if (rc == ACCEL_ENOTFOUND) /* nothing was ever charged */
        return 0;
    if (rc != ACCEL_OK)
        return (uint64_t)-1;
    return u.used;
}

unsigned rnd(unsigned *s)
{
    *s ^= *s << 13; /* xorshift32: the low bits of an LCG cycle too fast */
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

pid_t spawn(char *const argv[], int out_fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (out_fd >= 0)
            dup2(out_fd, 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

int peer_start(struct peer *p, const char *prog, const char *what,
               const char *arg)
{
    int to[2], from[2];

    if (pipe(to) != 0)
        return -1;
    if (pipe(from) != 0) {
        close(to[0]);
        close(to[1]);
        return -1;
    }
    p->pid = fork();
    if (p->pid == 0) {
        char *av[] = { (char *)prog, (char *)what, (char *)arg, NULL };
        dup2(to[0], 0);
        dup2(from[1], 1);
        execv("/proc/self/exe", av);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    p->to = to[1];
    p->from = from[0];
    return p->pid > 0 ? 0 : -1;
}

int peer_hear(struct peer *p, char want)
{
    char b = 0;
    return read(p->from, &b, 1) == 1 && b == want;
}

int peer_go(struct peer *p)
{
    return write(p->to, "x", 1) == 1;
}

int peer_end(struct peer *p)
{
    int ok = wait_ok(p->pid);
    close(p->to);
    close(p->from);
    return ok;
}

int peer_say(char c)
{
    return write(1, &c, 1) == 1;
}

int peer_wait(void)
{
    char b;
    return read(0, &b, 1) == 1;
}

int wait_ok(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Limit 1 GiB: 768 MiB fits, 512 MiB more does not and never reaches the
 * fake; after the free (and the device's settling: a pool's synchronize)
 * the ledger is back at 0, and the card never held more than the quota. */
static void case_refuse(const struct gpu_api *api, const char *which)
{
    struct fake_cuda_stats *st = api->record();
    union gpu_key k1 = { 0 }, more[4] = { { 0 } }, k2 = { 0 };

    for (size_t i = 0; i < api->npaths; i++) {
        const struct alloc_path *p = &api->paths[i];
        uint64_t allocs;
        int rc, ok = 1;
        if (strcmp(p->name, which) != 0)
            continue;
        CHECK(p->alloc(768 * MiB, &k1) == 0, "first %s", which);
        for (int f = 0; f < p->fill && f < 4; f++)
            ok = ok && p->alloc(0, &more[f]) == 0;
        if (p->fill > 0)
            CHECK(ok, "%s: the %d after the first", which, p->fill);
        CHECK(ledger_used() >= 768 * MiB, "%s not charged: %llu", which,
              (unsigned long long)ledger_used());
        allocs = atomic_load(&st->allocs);
        rc = p->alloc(512 * MiB, &k2);
        CHECK(rc == api->oom, "%s beyond: rc %d", which, rc);
        CHECK(atomic_load(&st->allocs) == allocs, "refused call reached %s",
              api->fake);
        CHECK(p->release(k1) == 0, "release");
        for (int f = 0; f < p->fill && f < 4; f++)
            p->release(more[f]);
        if (p->settle != NULL)
            CHECK(p->settle() == 0, "settle");
        CHECK((uint64_t)atomic_load(&st->max_used) <= GiB,
              "%s: the %s held %lld, over the 1 GiB quota", which, api->fake,
              (long long)atomic_load(&st->max_used));
        CHECK(ledger_used() == 0, "ledger after free: %llu",
              (unsigned long long)ledger_used());
        CHECK(atomic_load(&st->used) == 0, "%s still holds memory", api->fake);
        return;
    }
    CHECK(0, "no path %s", which);
}

/* The fake fails the allocation: the reservation goes back. */
static void case_driver_fail(const struct gpu_api *api)
{
    union gpu_key d;
    CHECK(api->alloc(100 * MiB, &d) == api->oom, "fail");
    CHECK(ledger_used() == 0, "reservation kept: %llu",
          (unsigned long long)ledger_used());
}

/* A worker: `iters` rounds of alloc and free over 8 slots, each of a
 * random size up to max; fixed (the SPEC 11 case, 256 MiB buffers against
 * 4 GiB): 16 slots, every buffer max. All workers start at `start` (ms of
 * CLOCK_REALTIME), so they really contend. */
static void case_worker(const struct gpu_api *api, int iters, uint64_t max,
                        unsigned seed, long start, int fixed)
{
    union gpu_key live[16] = { { 0 } };
    unsigned slots = fixed ? 16 : 8;
    struct timespec now;

    do {
        clock_gettime(CLOCK_REALTIME, &now);
    } while (now.tv_sec * 1000L + now.tv_nsec / 1000000L < start);
    for (int i = 0; i < iters; i++) {
        int s = (int)(rnd(&seed) % slots);
        sched_yield(); /* interleave with the other workers while holding */
        if (live[s].dptr != 0) {
            CHECK(api->release(live[s]) == 0, "free");
            live[s].dptr = 0;
        } else {
            uint64_t b = fixed ? max : 1 + rnd(&seed) % max;
            int rc = api->alloc(b, &live[s]);
            CHECK(rc == 0 || rc == api->oom, "rc %d", rc);
            if (rc != 0)
                live[s].dptr = 0;
        }
    }
    for (unsigned s = 0; s < slots; s++)
        if (live[s].dptr != 0)
            api->release(live[s]);
}

/* nproc workers on one quota: the fake never holds more than the limit,
 * and they contend (the ledger's peak reaches half of it at least). */
static void case_stress(const struct gpu_api *api, int nproc,
                        const char *iters, const char *max, uint64_t limit,
                        const char *fixed)
{
    struct fake_cuda_stats *st = api->record();
    struct ledger_usage lu = { 0 };
    char seed[16], start[32];
    struct timespec now;
    pid_t pids[64];

    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(start, sizeof(start), "%ld",
             now.tv_sec * 1000L + now.tv_nsec / 1000000L + 300);
    for (int i = 0; i < nproc && i < 64; i++) {
        char *argv[] = { (char *)api->prog, "worker", (char *)iters,
                         (char *)max, seed, start, (char *)fixed, NULL };
        snprintf(seed, sizeof(seed), "%d", i + 1);
        pids[i] = spawn(argv, -1);
    }
    for (int i = 0; i < nproc && i < 64; i++)
        CHECK(wait_ok(pids[i]), "worker %d failed", i);
    CHECK((uint64_t)atomic_load(&st->max_used) <= limit,
          "%s held %lld > limit %llu", api->fake,
          (long long)atomic_load(&st->max_used), (unsigned long long)limit);
    CHECK(atomic_load(&st->used) == 0, "%s still holds memory", api->fake);
    CHECK(ledger_used() == 0, "ledger ends at %llu",
          (unsigned long long)ledger_used());
    CHECK(ledger_read(ledger_path_env(), &lu) == ACCEL_OK, "ledger");
    CHECK(lu.peak >= limit / 2, "no contention (peak %llu): test too weak",
          (unsigned long long)lu.peak);
    printf("max held by the %s %lld of %llu, ledger peak %llu, "
           "%llu allocations\n", api->fake,
           (long long)atomic_load(&st->max_used), (unsigned long long)limit,
           (unsigned long long)lu.peak,
           (unsigned long long)atomic_load(&st->allocs));
}

void case_hold(const struct gpu_api *api)
{
    union gpu_key d;
    CHECK(api->alloc(768 * MiB, &d) == 0, "hold alloc");
    printf("ready\n");
    fflush(stdout);
    pause();
}

/* The whole 1 GiB quota, then free. */
static void case_full(const struct gpu_api *api)
{
    union gpu_key d;
    CHECK(api->alloc(GiB, &d) == 0, "full quota not available");
    CHECK(api->release(d) == 0, "free");
}

/* kill -9 of a holder: its 768 MiB are reclaimed; random kills, start-up
 * included, never leave the quota blocked. */
static void case_kill(const struct gpu_api *api)
{
    char *hold[] = { (char *)api->prog, "hold", NULL };
    char *full[] = { (char *)api->prog, "full", NULL };
    char buf[8] = { 0 };
    struct timespec ts;
    int fds[2];
    pid_t pid;

    CHECK(pipe(fds) == 0, "pipe");
    pid = spawn(hold, fds[1]);
    close(fds[1]);
    CHECK(read(fds[0], buf, 5) == 5 && strncmp(buf, "ready", 5) == 0, "hold");
    close(fds[0]);
    CHECK(ledger_used() == 768 * MiB, "held %llu",
          (unsigned long long)ledger_used());
    kill(pid, SIGKILL);
    wait_ok(pid);
    CHECK(ledger_used() == 0, "dead process not reclaimed: %llu",
          (unsigned long long)ledger_used());
    for (int i = 0; i < 40; i++) {
        pid = spawn(full, -1);
        ts.tv_sec = 0;
        ts.tv_nsec = (long)(rand() % 3000) * 1000;
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        wait_ok(pid);
    }
    CHECK(wait_ok(spawn(full, -1)), "a process after the kills was blocked");
}

/* A fork child has its own slot: the parent's charge is not its to free,
 * its own goes back when it exits. */
static void case_fork(const struct gpu_api *api)
{
    union gpu_key d, e;
    pid_t pid;

    CHECK(api->alloc(512 * MiB, &d) == 0, "parent");
    pid = fork();
    if (pid == 0) {
        CHECK(api->alloc(512 * MiB, &e) == 0, "child within");
        CHECK(api->alloc(MiB, &e) == api->oom, "child over");
        _exit(failures ? 1 : 0);
    }
    CHECK(wait_ok(pid), "child");
    CHECK(ledger_used() == 512 * MiB, "child's charge not given back: %llu",
          (unsigned long long)ledger_used());
    CHECK(api->release(d) == 0, "free");
}

/* The cases that take nothing but the API. */
static const struct {
    const char *name;
    void (*run)(const struct gpu_api *api);
} plain_cases[] = {
    { "driver_fail", case_driver_fail }, { "hold", case_hold },
    { "full", case_full },               { "kill", case_kill },
    { "fork", case_fork },
};

int run_quota_case(const struct gpu_api *api, int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";

    for (size_t i = 0; i < sizeof(plain_cases) / sizeof(*plain_cases); i++) {
        if (strcmp(c, plain_cases[i].name) == 0) {
            plain_cases[i].run(api);
            return 1;
        }
    }
    if (strcmp(c, "refuse") == 0 && argc > 2)
        case_refuse(api, argv[2]);
    else if (strcmp(c, "worker") == 0 && argc > 5)
        case_worker(api, (int)strtol(argv[2], NULL, 10),
                    strtoull(argv[3], NULL, 0),
                    (unsigned)strtol(argv[4], NULL, 10),
                    strtol(argv[5], NULL, 10),
                    argc > 6 && strcmp(argv[6], "fixed") == 0);
    else if (strcmp(c, "stress") == 0 && argc > 5)
        case_stress(api, (int)strtol(argv[2], NULL, 10), argv[3], argv[4],
                    strtoull(argv[5], NULL, 0), argc > 6 ? argv[6] : NULL);
    else
        return 0;
    return 1;
}

/* "1Gi", "1024m", "1g", plain bytes: powers of 1024. */
static uint64_t parse_bytes(const char *v)
{
    char *end;
    uint64_t n = strtoull(v, &end, 10);
    switch (*end | 0x20) {
    case 'k': return n << 10;
    case 'm': return n << 20;
    case 'g': return n << 30;
    case 't': return n << 40;
    default: return n;
    }
}

/* The smallest quota the environment sets, 0 when none. */
static uint64_t env_quota(void)
{
    extern char **environ;
    uint64_t q = 0;

    for (char **e = environ; *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (eq == NULL || (strncmp(*e, "ACCEL_MEMORY_LIMIT=", 19) != 0 &&
                           strncmp(*e, "CUDA_DEVICE_MEMORY_LIMIT", 24) != 0))
            continue;
        if (q == 0 || parse_bytes(eq + 1) < q)
            q = parse_bytes(eq + 1);
    }
    return q;
}

int cases_done(const struct gpu_api *api, const char *name)
{
    struct fake_cuda_stats *st = api->record();
    uint64_t key = fake_app_key(getenv("ACCEL_APP")), q = env_quota();

    for (int i = 0; q != 0 && i < FAKE_APPS; i++)
        if (atomic_load(&st->apps[i].key) == key)
            CHECK((uint64_t)atomic_load(&st->apps[i].peak) <= q,
                  "the app held %lld MiB of the card at once, quota %llu MiB",
                  (long long)(atomic_load(&st->apps[i].peak) >> 20),
                  (unsigned long long)(q >> 20));
    printf("%s: %d failed\n", name, failures);
    return failures ? 1 : 0;
}
