/* SPDX-License-Identifier: MIT */
/*
 * etcd_txn_bench.c: the floor under the cluster's binds (SPEC 10, 11): a
 * bare loop of guarded etcd transactions through the client acceld uses
 * (src/daemon/store/etcd.c). Each transaction is what a bind's commit is
 * at its simplest: "if the key's mod revision is still M, put it"; M is
 * read from the previous answer's revision, so no read is spent between
 * two writes. The cluster bind benchmark compares against this rate.
 *
 *   etcd_txn_bench [endpoints] [n] [threads] [puts] [bytes] [guards]
 *
 * endpoints: comma-separated client URLs, default $ACCEL_ETCD_ENDPOINTS;
 * n: transactions per thread (default 2000); threads: loops running at
 * once, each on a key of its own through one shared client (default 1);
 * puts: keys each transaction puts (default 1: the guarded key only; more
 * are keys of the loop's own next to it, put unguarded, as a bind writes
 * its app, allocation and event rows with the guarded counters); bytes:
 * each value's size (default: the loop's counter, a few bytes); guards:
 * how many of the transaction's keys it guards by their mod revision
 * (default 1; a bind guards 7, the six it writes and its device's mode).
 * The keys live under $ACCEL_BENCH_PREFIX (default /accel-bench/): under a
 * prefix the cluster's agents watch (/accel/bench/), every transaction
 * also reaches their watches, as a bind does.
 * Prints the rate and the latency percentiles; exits 1 if any guarded
 * transaction fails (nothing else writes the keys, so none should).
 */
#include "common/accel_setup.h"
#include "daemon/store/etcd.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

#define MAX_THREADS 64
#define MAX_PUTS    32
#define MAX_BYTES   65536

struct loop {
    struct etcd *e;           /* shared client */
    char key[128];             /* this loop's key */
    char extra[MAX_PUTS][160]; /* the other keys each transaction puts */
    long puts;        /* keys per transaction, the guarded one included */
    long guards;      /* of those, guarded by their mod revision */
    const char *pad;  /* the value of every put when bytes is given */
    long n;           /* transactions to run */
    uint64_t *lat_ns; /* each one's latency */
    long failed;      /* guards that did not hold, or errors */
    char *cause;      /* the first error's message */
};

static void die(const char *what)
{
    fprintf(stderr, "etcd_txn_bench: %s\n", what);
    exit(1);
}

/* Put the loop's keys once (no guard); their mod revision. */
static int64_t seed(struct loop *l)
{
    struct etcd_op op[MAX_PUTS];
    bool ok = false;
    int64_t rev = 0;
    char *cause = NULL;
    for (long k = 0; k < l->puts; k++)
        op[k] = (struct etcd_op){.kind = ETCD_PUT,
                                 .key = k ? l->extra[k] : l->key,
                                 .value = "0",
                                 .value_len = 1};
    if (etcd_txn(l->e, NULL, 0, op, (size_t)l->puts, &ok, &rev, &cause) !=
        ACCEL_OK)
        die(cause ? cause : "the first put failed");
    return rev;
}

static void *loop_main(void *arg)
{
    struct loop *l = arg;
    char val[32];
    int64_t mod = seed(l);

    for (long i = 0; i < l->n; i++) {
        struct etcd_cmp c[MAX_PUTS];
        struct etcd_op op[MAX_PUTS];
        bool ok = false;
        int64_t rev = 0;
        char *cause = NULL;
        uint64_t t0 = util_now_ns();
        enum accel_err rc;
        size_t len = (size_t)snprintf(val, sizeof val, "%ld", i);

        for (long k = 0; k < l->guards; k++)
            c[k] = (struct etcd_cmp){.key = k ? l->extra[k] : l->key,
                                     .target = ETCD_MOD,
                                     .result = ETCD_EQUAL,
                                     .num = mod};
        for (long k = 0; k < l->puts; k++)
            op[k] =
                (struct etcd_op){ .kind = ETCD_PUT,
                                  .key = k ? l->extra[k] : l->key,
                                  .value = l->pad ? l->pad : val,
                                  .value_len = l->pad ? strlen(l->pad) : len };
        rc = etcd_txn(l->e, c, (size_t)l->guards, op, (size_t)l->puts, &ok,
                      &rev, &cause);
        l->lat_ns[i] = util_now_ns() - t0;
        if (rc != ACCEL_OK || !ok) {
            l->failed++;
            if (l->cause == NULL)
                l->cause = cause ? cause
                                 : xstrdup(rc == ACCEL_OK ? "guard failed"
                                                          : accel_strerror(rc));
            else
                free(cause);
            break;
        }
        mod = rev; /* the put's revision is the key's new mod revision */
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static long parse_count(const char *s, long max, const char *what)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1 || v > max) {
        fprintf(stderr, "etcd_txn_bench: bad %s \"%s\"\n", what, s);
        exit(2);
    }
    return v;
}

static void report(struct loop *loops, long threads, long n, uint64_t ns)
{
    size_t total = (size_t)(threads * n);
    uint64_t *all = xmalloc(total * sizeof *all);
    double secs = (double)ns / 1e9;

    for (long t = 0; t < threads; t++)
        memcpy(all + t * n, loops[t].lat_ns, (size_t)n * sizeof *all);
    qsort(all, total, sizeof *all, cmp_u64);
    printf("etcd guarded txn: %zu txns, %ld thread(s), %.2f s\n", total,
           threads, secs);
    printf("latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
           (double)all[total / 2] / 1e6, (double)all[total * 99 / 100] / 1e6,
           (double)all[total - 1] / 1e6);
    printf("rate: %.0f txns/s\n", (double)total / secs);
    free(all);
}

int main(int argc, char **argv)
{
    const char *eps = argc > 1 ? argv[1] : getenv("ACCEL_ETCD_ENDPOINTS");
    long n = argc > 2 ? parse_count(argv[2], 10000000, "count") : 2000;
    long threads = argc > 3 ? parse_count(argv[3], MAX_THREADS, "threads") : 1;
    long puts = argc > 4 ? parse_count(argv[4], MAX_PUTS, "puts") : 1;
    long bytes = argc > 5 ? parse_count(argv[5], MAX_BYTES, "bytes") : 0;
    long guards = argc > 6 ? parse_count(argv[6], MAX_PUTS, "guards") : 1;
    const char *prefix = getenv("ACCEL_BENCH_PREFIX") ? getenv("ACCEL_BENCH_PREFIX")
                                                      : "/accel-bench/";
    char *pad = NULL;
    struct etcd_opts o = { .endpoints = eps };
    struct loop loops[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    struct etcd *e = NULL;
    char *cause = NULL;
    long failed = 0;
    uint64_t t0;

    if (eps == NULL || eps[0] == '\0') {
        fprintf(stderr, "usage: etcd_txn_bench [endpoints] [n] [threads] "
                        "[puts] [bytes] (or ACCEL_ETCD_ENDPOINTS)\n");
        return 2;
    }
    if (etcd_open(&o, &e, &cause) != ACCEL_OK)
        die(cause);
    memset(loops, 0, sizeof loops);
    if (bytes > 0) {
        pad = xmalloc((size_t)bytes + 1);
        memset(pad, 'x', (size_t)bytes);
        pad[bytes] = '\0';
    }
    if (strlen(prefix) > 64)
        die("ACCEL_BENCH_PREFIX is longer than 64 bytes");
    for (long t = 0; t < threads; t++) {
        loops[t].e = e;
        loops[t].n = n;
        loops[t].lat_ns = xcalloc((size_t)n, sizeof(uint64_t));
        snprintf(loops[t].key, sizeof loops[t].key, "%stxn/%ld/%ld", prefix,
                 (long)getpid(), t);
        loops[t].puts = puts;
        loops[t].guards = guards < puts ? guards : puts;
        loops[t].pad = pad;
        for (long k = 1; k < puts; k++) {
            char base[sizeof loops[t].key]; /* not the struct it writes */
            memcpy(base, loops[t].key, sizeof base);
            snprintf(loops[t].extra[k], sizeof loops[t].extra[k], "%s/%ld",
                     base, k);
        }
    }
    t0 = util_now_ns();
    for (long t = 0; t < threads; t++)
        if (pthread_create(&th[t], NULL, loop_main, &loops[t]) != 0)
            die("pthread_create failed");
    for (long t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    for (long t = 0; t < threads; t++) {
        failed += loops[t].failed;
        if (loops[t].cause)
            fprintf(stderr, "etcd_txn_bench: %s: %s\n", loops[t].key,
                    loops[t].cause);
    }
    if (failed == 0)
        report(loops, threads, n, util_now_ns() - t0);
    for (long t = 0; t < threads; t++) {
        struct etcd_op del = { .kind = ETCD_DELETE, .key = loops[t].key };
        bool ok = false;
        etcd_txn(e, NULL, 0, &del, 1, &ok, NULL, NULL);
        for (long k = 1; k < puts; k++) {
            del.key = loops[t].extra[k];
            etcd_txn(e, NULL, 0, &del, 1, &ok, NULL, NULL);
        }
        free(loops[t].lat_ns);
        free(loops[t].cause);
    }
    etcd_close(e);
    free(pad);
    return failed == 0 ? 0 : 1;
}
