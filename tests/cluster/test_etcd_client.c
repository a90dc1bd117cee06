/* SPDX-License-Identifier: MIT */
/*
 * test_etcd_client.c: the etcd client (src/daemon/store/etcd.c) against a
 * real etcd cluster. Not run on its own: test_etcd_client.py starts three
 * members (etcd_harness.py) and runs this program with
 *
 *   ACCEL_ETCD_ENDPOINTS  the members' client URLs, comma-separated
 *   ACCEL_ETCD_TLS_*      a second, one-member cluster on https that
 *                         requires a client certificate: ENDPOINTS, CA,
 *                         CERT, KEY (for etcd_tls)
 *   ACCEL_ETCD_CTL        "R,W": file descriptors of a control channel to
 *                         the driver, which owns the members. A line
 *                         "leader", "kill URL" or "restart URL" written to
 *                         W is answered on R with "ok [URL]" or "err ...".
 *
 * Each test runs in a forked child (tests/unit/harness.h), in the order
 * listed: the compaction test comes after every test that reads old
 * revisions, and the failover test (which kills members, then restarts
 * them) last. Each test writes under a key prefix of its own.
 */
#include "common/accel_setup.h"
#include "daemon/store/etcd.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <jansson.h>

#include "common/util.h"

#include "harness.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static const char *endpoints(void)
{
    const char *s = getenv("ACCEL_ETCD_ENDPOINTS");
    if (s == NULL || s[0] == '\0')
        FAIL_AT_("ACCEL_ETCD_ENDPOINTS is not set: run test_etcd_client.py");
    return s;
}

static struct etcd *open_with(const char *eps, int timeout_ms)
{
    struct etcd_opts o = { .endpoints = eps, .timeout_ms = timeout_ms };
    struct etcd *e = NULL;
    char *cause = NULL;
    enum accel_err rc = etcd_open(&o, &e, &cause);
    if (rc != ACCEL_OK)
        FAIL_AT_("etcd_open(%s): %s: %s", eps, accel_err_name(rc),
                 cause ? cause : "");
    return e;
}

static struct etcd *open_client(void)
{
    return open_with(endpoints(), 0);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static uint64_t ms_since(uint64_t t0)
{
    return (util_now_ns() - t0) / 1000000u;
}

/* Put key = value[0..len) (no guard); the revision it made. */
static int64_t put_n(struct etcd *e, const char *key, const char *value,
                     size_t len)
{
    struct etcd_op op = {
        .kind = ETCD_PUT, .key = key, .value = value, .value_len = len
    };
    bool ok = false;
    int64_t rev = 0;
    char *cause = NULL;
    enum accel_err rc = etcd_txn(e, NULL, 0, &op, 1, &ok, &rev, &cause);
    if (rc != ACCEL_OK || !ok)
        FAIL_AT_("put %s: %s %s", key, accel_err_name(rc), cause ? cause : "");
    return rev;
}

static int64_t put(struct etcd *e, const char *key, const char *value)
{
    return put_n(e, key, value, strlen(value));
}

/* The store's current revision. */
static int64_t store_rev(struct etcd *e)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int64_t rev = 0;
    ASSERT_EQ(etcd_get(e, "/t/none", false, 0, &kvs, &n, &rev), ACCEL_OK);
    etcd_kvs_free(kvs, n);
    return rev;
}

/* How many keys under prefix. */
static size_t count(struct etcd *e, const char *prefix)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    ASSERT_EQ(etcd_get(e, prefix, true, 0, &kvs, &n, NULL), ACCEL_OK);
    etcd_kvs_free(kvs, n);
    return n;
}

/* One single-guard transaction putting key = value; did it apply? */
static bool guarded_put(struct etcd *e, const struct etcd_cmp *c,
                        const char *key, const char *value, int64_t *rev)
{
    struct etcd_op op = {
        .kind = ETCD_PUT, .key = key, .value = value, .value_len = strlen(value)
    };
    bool ok = false;
    ASSERT_EQ(etcd_txn(e, c, 1, &op, 1, &ok, rev, NULL), ACCEL_OK);
    return ok;
}

/* The control channel to the driver: send a line, get "ok ..." back. */
static void ctl(const char *cmd, char *answer, size_t cap)
{
    const char *fds = getenv("ACCEL_ETCD_CTL");
    int rfd, wfd;
    char line[512];
    size_t len = 0;

    if (fds == NULL || sscanf(fds, "%d,%d", &rfd, &wfd) != 2)
        FAIL_AT_("ACCEL_ETCD_CTL is not set: run test_etcd_client.py");
    snprintf(line, sizeof line, "%s\n", cmd);
    ASSERT_EQ(write(wfd, line, strlen(line)), (ssize_t)strlen(line));
    while (len + 1 < sizeof line) {
        ssize_t r = read(rfd, line + len, 1);
        if (r <= 0)
            FAIL_AT_("control channel closed during \"%s\"", cmd);
        if (line[len] == '\n')
            break;
        len++;
    }
    line[len] = '\0';
    if (strncmp(line, "ok", 2) != 0)
        FAIL_AT_("driver refused \"%s\": %s", cmd, line);
    if (answer)
        util_strlcpy(answer, line[2] == ' ' ? line + 3 : "", cap);
}

/* ------------------------------------------------------------------ */
/* A watch running on its own thread, recording what it is told         */
/* ------------------------------------------------------------------ */

#define REC_EVENTS 8  /* events kept per revision */
#define REC_GROUPS 64 /* revisions kept */

struct rec_ev {
    enum etcd_ev_type type; /* PUT or DELETE */
    char key[64];           /* the key (NUL-terminated, truncated) */
    char value[64];         /* the value's bytes (truncated) */
    size_t value_len;       /* its full length */
    int64_t mod_rev;        /* the kv's mod revision */
};

struct rec_group {
    int64_t rev;                  /* the callback's revision */
    size_t n;                     /* events it carried */
    struct rec_ev ev[REC_EVENTS]; /* the first REC_EVENTS of them */
};

struct recorder {
    pthread_mutex_t mu;             /* guards everything below it */
    pthread_cond_t cv;              /* signalled on every change */
    struct rec_group g[REC_GROUPS]; /* revisions with events, in order */
    size_t ngroups;                 /* how many */
    size_t nprogress;               /* progress notifications */
    int64_t progress_rev;           /* the last one's revision */
    bool finished;                  /* etcd_watch returned */
    enum accel_err rc;              /* what it returned */
    uint64_t finished_ns;           /* when */
    struct etcd *e;                 /* the watch's client */
    const char *prefix;             /* what it watches */
    int64_t start;                  /* from this revision */
    volatile int stop;              /* the stop flag */
    pthread_t th;                   /* the watching thread */
};

static enum accel_err rec_cb(void *ctx, int64_t rev,
                             const struct etcd_event *ev, size_t n)
{
    struct recorder *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (n == 0) {
        r->nprogress++;
        r->progress_rev = rev;
    } else if (r->ngroups < REC_GROUPS) {
        struct rec_group *g = &r->g[r->ngroups++];
        g->rev = rev;
        g->n = n;
        for (size_t i = 0; i < n && i < REC_EVENTS; i++) {
            struct rec_ev *x = &g->ev[i];
            x->type = ev[i].type;
            snprintf(x->key, sizeof x->key, "%s", ev[i].kv.key);
            memcpy(x->value, ev[i].kv.value,
                   ev[i].kv.value_len < sizeof x->value ? ev[i].kv.value_len
                                                        : sizeof x->value);
            x->value_len = ev[i].kv.value_len;
            x->mod_rev = ev[i].kv.mod_rev;
        }
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return ACCEL_OK;
}

static void *rec_thread(void *arg)
{
    struct recorder *r = arg;
    enum accel_err rc =
        etcd_watch(r->e, r->prefix, r->start, rec_cb, r, &r->stop);
    pthread_mutex_lock(&r->mu);
    r->rc = rc;
    r->finished = true;
    r->finished_ns = util_now_ns();
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static struct recorder *rec_start(struct etcd *e, const char *prefix,
                                  int64_t start)
{
    struct recorder *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->e = e;
    r->prefix = prefix;
    r->start = start;
    ASSERT_EQ(pthread_create(&r->th, NULL, rec_thread, r), 0);
    return r;
}

/* Wait (up to ms) until the recorder has ngroups revisions, or progress
 * notifications, or has finished; false on timeout. */
enum rec_what { REC_GROUPS_AT_LEAST, REC_PROGRESS_AT_LEAST, REC_FINISHED };

static bool rec_wait(struct recorder *r, enum rec_what what, size_t n, long ms)
{
    uint64_t t0 = util_now_ns();
    bool ok = false;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        ok = what == REC_GROUPS_AT_LEAST     ? r->ngroups >= n
             : what == REC_PROGRESS_AT_LEAST ? r->nprogress >= n
                                             : r->finished;
        if (ok || (long)ms_since(t0) >= ms)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* Stop the watch, wait for it; what etcd_watch returned. */
static enum accel_err rec_stop(struct recorder *r)
{
    enum accel_err rc;
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
    if (!rec_wait(r, REC_FINISHED, 0, 5000))
        FAIL_AT_("etcd_watch did not return within 5 s of its stop flag");
    pthread_join(r->th, NULL);
    rc = r->rc;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

TEST(etcd_open_rejects)
{
    struct etcd *e = NULL;
    char *cause = NULL;
    struct etcd_opts o = { .endpoints = "ftp://x:1" };
    char many[17 * 24 + 1] = "";

    ASSERT_EQ(etcd_open(&o, &e, &cause), ACCEL_EINVAL);
    ASSERT(cause != NULL && strstr(cause, "ftp://x:1") != NULL);
    free(cause);
    cause = NULL;
    o.endpoints = "";
    ASSERT_EQ(etcd_open(&o, &e, &cause), ACCEL_EINVAL);
    free(cause);
    cause = NULL;
    for (int i = 0; i < 17; i++) {
        size_t l = strlen(many);
        snprintf(many + l, sizeof many - l, "%shttp://h%d:2379", i ? "," : "",
                 i);
    }
    o.endpoints = many;
    ASSERT_EQ(etcd_open(&o, &e, &cause), ACCEL_EINVAL);
    ASSERT(cause != NULL && strstr(cause, "16") != NULL);
    free(cause);
    ASSERT(e == NULL);
    etcd_close(NULL);
}

/* Nothing listens on port 1: refused, so the next endpoint is tried, and
 * with no next one the answer is ACCEL_EIO, quickly. */
TEST(etcd_unreachable_and_skip)
{
    char eps[2048];
    struct etcd *e = open_with("http://127.0.0.1:1", 1000);
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    uint64_t t0 = util_now_ns();

    ASSERT_EQ(etcd_get(e, "/t/x", false, 0, &kvs, &n, NULL), ACCEL_EIO);
    ASSERT_LT(ms_since(t0), 1500);
    etcd_close(e);
    snprintf(eps, sizeof eps, "http://127.0.0.1:1/ , %s", endpoints());
    e = open_with(eps, 0);
    ASSERT_EQ(etcd_get(e, "/t/x", false, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT(strncmp(endpoints(), etcd_endpoint(e), strlen(etcd_endpoint(e))) ==
           0);
    etcd_kvs_free(kvs, n);
    etcd_close(e);
}

/* etcd_count with a revision filter counts the keys that pass it: etcd's
 * own count (count_only) is of the whole range whatever the filters say,
 * and a view that asked it whether anything changed was told yes for
 * ever (issue 51's wait for a revision outside the prefix). */
TEST(etcd_count_filters)
{
    struct etcd *e = open_client();
    int64_t n = -1, r1, r2, r3;

    r1 = put(e, "/t/cnt/a", "1");
    r2 = put(e, "/t/cnt/b", "1");
    r3 = put(e, "/t/cnt/a", "2");
    put(e, "/t/cntx", "outside the prefix");
    ASSERT_EQ(etcd_count(e, "/t/cnt/", r3, 0, 0, &n), ACCEL_OK);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(etcd_count(e, "/t/cnt/", r3, r3, 0, &n), ACCEL_OK);
    ASSERT_EQ(n, 1); /* a, written again at r3 */
    ASSERT_EQ(etcd_count(e, "/t/cnt/", r3, r3 + 1, 0, &n), ACCEL_OK);
    ASSERT_EQ(n, 0); /* nothing since */
    ASSERT_EQ(etcd_count(e, "/t/cnt/", r2, r2, 0, &n), ACCEL_OK);
    ASSERT_EQ(n, 1); /* at r2: b alone was that new */
    ASSERT_EQ(etcd_count(e, "/t/cnt/", r3, 0, r2, &n), ACCEL_OK);
    ASSERT_EQ(n, 1); /* created at r2 or later: b */
    ASSERT_EQ(etcd_count(e, "/t/cnt/", r1, 0, 0, &n), ACCEL_OK);
    ASSERT_EQ(n, 1);
    etcd_close(e);
}

TEST(etcd_put_get)
{
    struct etcd *e = open_client();
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int64_t hdr = 0;
    int64_t r1 = put(e, "/t/pg/a", "hello");
    int64_t r2 = put(e, "/t/pg/a", "world!");

    ASSERT_GT(r1, 0);
    ASSERT_GT(r2, r1);
    ASSERT_EQ(etcd_get(e, "/t/pg/a", false, 0, &kvs, &n, &hdr), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_STR_EQ(kvs[0].key, "/t/pg/a");
    ASSERT_EQ(kvs[0].key_len, 7);
    ASSERT_STR_EQ(kvs[0].value, "world!");
    ASSERT_EQ(kvs[0].value_len, 6);
    ASSERT_EQ(kvs[0].create_rev, r1);
    ASSERT_EQ(kvs[0].mod_rev, r2);
    ASSERT_EQ(kvs[0].version, 2);
    ASSERT_EQ(kvs[0].lease, 0);
    ASSERT_GE(hdr, r2);
    etcd_kvs_free(kvs, n);
    /* an older revision */
    ASSERT_EQ(etcd_get(e, "/t/pg/a", false, r1, &kvs, &n, &hdr), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_STR_EQ(kvs[0].value, "hello");
    ASSERT_EQ(kvs[0].version, 1);
    ASSERT_EQ(hdr, r1);
    etcd_kvs_free(kvs, n);
    /* a missing key, an empty value */
    ASSERT_EQ(etcd_get(e, "/t/pg/missing", false, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(n, 0);
    etcd_kvs_free(kvs, n);
    put(e, "/t/pg/empty", "");
    ASSERT_EQ(etcd_get(e, "/t/pg/empty", false, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_STR_EQ(kvs[0].value, "");
    ASSERT_EQ(kvs[0].value_len, 0);
    etcd_kvs_free(kvs, n);
    /* a future revision is refused */
    ASSERT_EQ(etcd_get(e, "/t/pg/a", false, hdr + 1000, &kvs, &n, NULL),
              ACCEL_ESTORE);
    etcd_close(e);
}

#define PAGE_KEYS 2500

/* A writer that adds keys between the existing ones while pages are read;
 * it records the revision of each of its writes. */
struct page_writer {
    struct etcd *e;       /* its client */
    atomic_int stop;      /* set by the test */
    atomic_int written;   /* writes done */
    int64_t revs[100000]; /* the revision of each */
};

static void *page_writer_main(void *arg)
{
    struct page_writer *w = arg;
    char key[64];
    while (!atomic_load(&w->stop)) {
        int i = atomic_load(&w->written);
        if (i >= (int)(sizeof w->revs / sizeof w->revs[0]))
            break;
        snprintf(key, sizeof key, "/t/page/k%05d-w", (i * 7919) % PAGE_KEYS);
        w->revs[i] = put(w->e, key, "w");
        atomic_store(&w->written, i + 1);
    }
    return NULL;
}

static void check_sorted(const struct etcd_kv *kvs, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        size_t l = kvs[i - 1].key_len < kvs[i].key_len ? kvs[i - 1].key_len
                                                       : kvs[i].key_len;
        int c = memcmp(kvs[i - 1].key, kvs[i].key, l);
        if (c > 0 || (c == 0 && kvs[i - 1].key_len >= kvs[i].key_len))
            FAIL_AT_("keys out of order at %zu: %s, %s", i, kvs[i - 1].key,
                     kvs[i].key);
    }
}

TEST(etcd_prefix_paging)
{
    struct etcd *e = open_client();
    struct page_writer *w = xcalloc(1, sizeof *w);
    struct etcd_op ops[125];
    char keys[125][32];
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int64_t base = 0, hdr = 0;
    pthread_t th;
    bool ok;

    for (int t = 0; t < PAGE_KEYS / 125; t++) {
        for (int i = 0; i < 125; i++) {
            snprintf(keys[i], sizeof keys[i], "/t/page/k%05d", t * 125 + i);
            ops[i] = (struct etcd_op){
                .kind = ETCD_PUT, .key = keys[i], .value = "v", .value_len = 1
            };
        }
        ASSERT_EQ(etcd_txn(e, NULL, 0, ops, 125, &ok, &base, NULL), ACCEL_OK);
        ASSERT(ok);
    }
    /* at the revision of the last batch: exactly those keys, in order */
    ASSERT_EQ(etcd_get(e, "/t/page/", true, base, &kvs, &n, &hdr), ACCEL_OK);
    ASSERT_EQ(n, PAGE_KEYS);
    ASSERT_EQ(hdr, base);
    check_sorted(kvs, n);
    ASSERT_STR_EQ(kvs[0].key, "/t/page/k00000");
    ASSERT_STR_EQ(kvs[n - 1].key, "/t/page/k02499");
    etcd_kvs_free(kvs, n);

    /* while a writer inserts keys between them, each paged read is one
     * view: no key newer than its revision, and exactly the writer's
     * writes up to that revision */
    w->e = open_client();
    ASSERT_EQ(pthread_create(&th, NULL, page_writer_main, w), 0);
    while (atomic_load(&w->written) < 3)
        sleep_ms(5);
    for (int round = 0; round < 5; round++) {
        size_t expect = PAGE_KEYS, seen_w = 0;
        ASSERT_EQ(etcd_get(e, "/t/page/", true, 0, &kvs, &n, &hdr), ACCEL_OK);
        check_sorted(kvs, n);
        for (size_t i = 0; i < n; i++)
            ASSERT_LE(kvs[i].mod_rev, hdr);
        while (atomic_load(&w->written) < 1 ||
               w->revs[atomic_load(&w->written) - 1] <= hdr)
            sleep_ms(2); /* until the writer has passed hdr */
        for (int i = 0; i < atomic_load(&w->written); i++)
            if (w->revs[i] <= hdr)
                seen_w++;
        /* the writer cycles through 2500 slots; count distinct ones */
        expect += seen_w < PAGE_KEYS ? seen_w : PAGE_KEYS;
        ASSERT_EQ(n, expect);
        etcd_kvs_free(kvs, n);
    }
    atomic_store(&w->stop, 1);
    pthread_join(th, NULL);
    etcd_close(w->e);
    free(w);
    etcd_close(e);
}

/* A prefix ending in 0xff: its range end drops the 0xff and increments
 * the byte before it. */
TEST(etcd_prefix_ff)
{
    struct etcd *e = open_client();
    struct etcd_kv *kvs = NULL;
    size_t n = 0;

    put(e, "/t/ff", "shorter");
    put(e, "/t/ff\xff", "1");
    put(e, "/t/ff\xff\xff", "2");
    put(e, "/t/ff\xffz", "3");
    put(e, "/t/fg", "after");
    ASSERT_EQ(etcd_get(e, "/t/ff\xff", true, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(n, 3);
    ASSERT_STR_EQ(kvs[0].value, "1");
    ASSERT_STR_EQ(kvs[1].value, "3"); /* 'z' sorts before 0xff */
    ASSERT_STR_EQ(kvs[2].value, "2");
    etcd_kvs_free(kvs, n);
    ASSERT_EQ(count(e, "/t/f"), 5);
    etcd_close(e);
}

TEST(etcd_guards)
{
    struct etcd *e = open_client();
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int64_t m1 = put(e, "/t/g/k", "v1"), m2 = 0, rev = 0;
    struct etcd_cmp c = {
        .key = "/t/g/k", .target = ETCD_MOD, .result = ETCD_EQUAL, .num = m1
    };

    /* the mod revision of an existing key: right, then stale */
    ASSERT(guarded_put(e, &c, "/t/g/k", "v2", &m2));
    ASSERT_GT(m2, m1);
    ASSERT(!guarded_put(e, &c, "/t/g/k", "v3", &rev));
    ASSERT_EQ(rev, m2); /* the revision the guard was checked at */
    ASSERT_EQ(etcd_get(e, "/t/g/k", false, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_STR_EQ(kvs[0].value, "v2");
    etcd_kvs_free(kvs, n);

    /* a missing key has mod revision 0: create-if-absent, once */
    c = (struct etcd_cmp){
        .key = "/t/g/new", .target = ETCD_MOD, .result = ETCD_EQUAL, .num = 0
    };
    ASSERT(guarded_put(e, &c, "/t/g/new", "first", NULL));
    ASSERT(!guarded_put(e, &c, "/t/g/new", "second", NULL));

    /* the other targets and results, on /t/g/k (version 2, created m1) */
    struct {
        enum etcd_target t;
        enum etcd_result r;
        int64_t num;
        const char *value;
        bool holds;
    } cases[] = {
        { ETCD_CREATE, ETCD_EQUAL, m1, NULL, true },
        { ETCD_CREATE, ETCD_NOT_EQUAL, m1, NULL, false },
        { ETCD_VERSION, ETCD_EQUAL, 2, NULL, true },
        { ETCD_VERSION, ETCD_GREATER, 1, NULL, true },
        { ETCD_VERSION, ETCD_GREATER, 2, NULL, false },
        { ETCD_VERSION, ETCD_LESS, 3, NULL, true },
        { ETCD_VERSION, ETCD_LESS, 2, NULL, false },
        { ETCD_MOD, ETCD_LESS, m2 + 1, NULL, true },
        { ETCD_MOD, ETCD_GREATER, m2, NULL, false },
        { ETCD_VALUE, ETCD_EQUAL, 0, "v2", true },
        { ETCD_VALUE, ETCD_EQUAL, 0, "v1", false },
        { ETCD_VALUE, ETCD_NOT_EQUAL, 0, "v1", true },
        { ETCD_VALUE, ETCD_GREATER, 0, "v1", true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct etcd_cmp g = { .key = "/t/g/k",
                              .target = cases[i].t,
                              .result = cases[i].r,
                              .num = cases[i].num,
                              .value = cases[i].value,
                              .value_len =
                                  cases[i].value ? strlen(cases[i].value) : 0 };
        if (guarded_put(e, &g, "/t/g/side", "x", NULL) != cases[i].holds)
            FAIL_AT_("guard case %zu: expected %s", i,
                     cases[i].holds ? "to hold" : "to fail");
    }

    /* several guards: one failing applies nothing */
    {
        struct etcd_cmp two[2] = {
            { .key = "/t/g/k",
              .target = ETCD_VERSION,
              .result = ETCD_EQUAL,
              .num = 2 },
            { .key = "/t/g/new",
              .target = ETCD_MOD,
              .result = ETCD_EQUAL,
              .num = 0 },
        };
        struct etcd_op op = {
            .kind = ETCD_PUT, .key = "/t/g/never", .value = "x", .value_len = 1
        };
        bool ok = true;
        ASSERT_EQ(etcd_txn(e, two, 2, &op, 1, &ok, NULL, NULL), ACCEL_OK);
        ASSERT(!ok);
        ASSERT_EQ(count(e, "/t/g/never"), 0);
    }
    etcd_close(e);
}

TEST(etcd_delete_prefix)
{
    struct etcd *e = open_client();
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    bool ok = false;
    struct etcd_op del = { .kind = ETCD_DELETE_PREFIX, .key = "/t/dp/a/" };

    put(e, "/t/dp/a", "stays: not under a/");
    put(e, "/t/dp/a/1", "x");
    put(e, "/t/dp/a/2", "x");
    put(e, "/t/dp/a/3/deep", "x");
    put(e, "/t/dp/ab", "stays");
    ASSERT_EQ(etcd_txn(e, NULL, 0, &del, 1, &ok, NULL, NULL), ACCEL_OK);
    ASSERT(ok);
    ASSERT_EQ(etcd_get(e, "/t/dp/", true, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(n, 2);
    ASSERT_STR_EQ(kvs[0].key, "/t/dp/a");
    ASSERT_STR_EQ(kvs[1].key, "/t/dp/ab");
    etcd_kvs_free(kvs, n);
    /* a single delete takes exactly its key */
    del = (struct etcd_op){ .kind = ETCD_DELETE, .key = "/t/dp/a" };
    ASSERT_EQ(etcd_txn(e, NULL, 0, &del, 1, &ok, NULL, NULL), ACCEL_OK);
    ASSERT_EQ(count(e, "/t/dp/"), 1);
    etcd_close(e);
}

TEST(etcd_nul_in_value)
{
    struct etcd *e = open_client();
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    static const char v[] = { 'a', '\0', 'b', '\0', '\xff' };
    struct etcd_cmp c = { .key = "/t/nul/k",
                          .target = ETCD_VALUE,
                          .result = ETCD_EQUAL,
                          .value = v,
                          .value_len = sizeof v };

    put_n(e, "/t/nul/k", v, sizeof v);
    ASSERT_EQ(etcd_get(e, "/t/nul/k", false, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(kvs[0].value_len, sizeof v);
    ASSERT(memcmp(kvs[0].value, v, sizeof v) == 0);
    ASSERT_EQ(kvs[0].value[sizeof v], '\0');
    etcd_kvs_free(kvs, n);
    /* the whole value is compared, not up to its first NUL */
    ASSERT(guarded_put(e, &c, "/t/nul/side", "x", NULL));
    c.value_len = 1;
    ASSERT(!guarded_put(e, &c, "/t/nul/side", "x", NULL));
    etcd_close(e);
}

TEST(etcd_txn_op_limit)
{
    struct etcd *e = open_client();
    static struct etcd_op ops[ETCD_TXN_MAX_OPS + 1];
    static char keys[ETCD_TXN_MAX_OPS + 1][32];
    bool ok = false;
    char *cause = NULL;

    for (int i = 0; i <= ETCD_TXN_MAX_OPS; i++) {
        snprintf(keys[i], sizeof keys[i], "/t/many/%03d", i);
        ops[i] = (struct etcd_op){
            .kind = ETCD_PUT, .key = keys[i], .value = "v", .value_len = 1
        };
    }
    ASSERT_EQ(
        etcd_txn(e, NULL, 0, ops, ETCD_TXN_MAX_OPS + 1, &ok, NULL, &cause),
        ACCEL_EINVAL);
    ASSERT(cause != NULL && strstr(cause, "128") != NULL);
    free(cause);
    ASSERT_EQ(count(e, "/t/many/"), 0); /* nothing was sent */
    ASSERT_EQ(etcd_txn(e, NULL, 0, ops, ETCD_TXN_MAX_OPS, &ok, NULL, NULL),
              ACCEL_OK);
    ASSERT(ok);
    ASSERT_EQ(count(e, "/t/many/"), ETCD_TXN_MAX_OPS);
    /* and etcd's own refusal comes back with its message: a txn that
     * puts one key twice */
    ops[1].key = keys[0];
    cause = NULL;
    ASSERT_EQ(etcd_txn(e, NULL, 0, ops, 2, &ok, NULL, &cause), ACCEL_ESTORE);
    ASSERT(cause != NULL && strstr(cause, "duplicate") != NULL);
    free(cause);
    etcd_close(e);
}

/* One transaction of several writes arrives as one callback, its events
 * in the order the transaction wrote them. */
TEST(etcd_watch_txn_order)
{
    struct etcd *e = open_client();
    struct recorder *r;
    struct etcd_op ops[4] = {
        { .kind = ETCD_PUT, .key = "/t/wo/3", .value = "c", .value_len = 1 },
        { .kind = ETCD_PUT, .key = "/t/wo/1", .value = "a", .value_len = 1 },
        { .kind = ETCD_DELETE, .key = "/t/wo/0" },
        { .kind = ETCD_PUT, .key = "/t/wo/2", .value = "b", .value_len = 1 },
    };
    static const char *const want[] = { "/t/wo/3", "/t/wo/1", "/t/wo/0",
                                        "/t/wo/2" };
    bool ok = false;
    int64_t start, r1 = 0, r2;

    put(e, "/t/wo/0", "gone soon");
    start = store_rev(e) + 1;
    r = rec_start(e, "/t/wo/", start);
    ASSERT_EQ(etcd_txn(e, NULL, 0, ops, 4, &ok, &r1, NULL), ACCEL_OK);
    r2 = put(e, "/t/wo/4", "d");
    ASSERT(rec_wait(r, REC_GROUPS_AT_LEAST, 2, 10000));
    ASSERT_EQ(r->ngroups, 2);
    ASSERT_EQ(r->g[0].rev, r1);
    ASSERT_EQ(r->g[0].n, 4);
    for (int i = 0; i < 4; i++) {
        ASSERT_STR_EQ(r->g[0].ev[i].key, want[i]);
        ASSERT_EQ(r->g[0].ev[i].mod_rev, r1);
        ASSERT_EQ(r->g[0].ev[i].type, i == 2 ? ETCD_EV_DELETE : ETCD_EV_PUT);
    }
    ASSERT_EQ(r->g[0].ev[2].value_len, 0);
    ASSERT(memcmp(r->g[0].ev[1].value, "a", 1) == 0);
    ASSERT_EQ(r->g[1].rev, r2);
    ASSERT_EQ(r->g[1].n, 1);
    ASSERT_STR_EQ(r->g[1].ev[0].key, "/t/wo/4");
    ASSERT_EQ(rec_stop(r), ACCEL_OK);
    etcd_close(e);
}

/* Several prefixes on one stream (etcd_watch_multi): each revision's
 * events come with the place of the prefix they are under, each prefix
 * from its own start revision (the third replays a put made before the
 * watch began), and nothing outside the prefixes comes. */
struct multi_rec {
    pthread_mutex_t mu;
    size_t n;
    size_t range[16];
    char key[16][64];
    int64_t rev[16];
    volatile int stop;
    struct etcd *e;
    enum accel_err rc;
    bool finished;
};

static enum accel_err multi_cb(void *ctx, size_t range, int64_t rev,
                               const struct etcd_event *ev, size_t n)
{
    struct multi_rec *m = ctx;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n && m->n < 16; i++) {
        m->range[m->n] = range;
        m->rev[m->n] = rev;
        snprintf(m->key[m->n], sizeof m->key[0], "%s", ev[i].kv.key);
        m->n++;
    }
    pthread_mutex_unlock(&m->mu);
    return ACCEL_OK;
}

static int64_t multi_start_rev[3];

static void *multi_thread(void *arg)
{
    struct multi_rec *m = arg;
    static const char *const prefixes[3] = {"/t/wm/a/", "/t/wm/b/",
                                            "/t/wm/c/"};
    enum accel_err rc = etcd_watch_multi(m->e, prefixes, multi_start_rev, 3,
                                         multi_cb, m, &m->stop);
    pthread_mutex_lock(&m->mu);
    m->rc = rc;
    m->finished = true;
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static size_t multi_count(struct multi_rec *m)
{
    size_t n;
    pthread_mutex_lock(&m->mu);
    n = m->n;
    pthread_mutex_unlock(&m->mu);
    return n;
}

TEST(etcd_watch_multi_ranges)
{
    struct etcd *e = open_client();
    struct multi_rec m = {.e = e};
    pthread_t th;
    int64_t rc_early, ra, rb, rc2;
    uint64_t t0;

    pthread_mutex_init(&m.mu, NULL);
    rc_early = put(e, "/t/wm/c/early", "0");
    multi_start_rev[0] = multi_start_rev[1] = store_rev(e) + 1;
    multi_start_rev[2] = rc_early; /* replayed: its own start */
    ASSERT_EQ(pthread_create(&th, NULL, multi_thread, &m), 0);
    t0 = util_now_ns();
    while (multi_count(&m) < 1 && ms_since(t0) < 10000)
        usleep(10000);
    ra = put(e, "/t/wm/a/1", "a");
    put(e, "/t/wm/outside", "x");
    rb = put(e, "/t/wm/b/1", "b");
    rc2 = put(e, "/t/wm/c/2", "c");
    while (multi_count(&m) < 4 && ms_since(t0) < 10000)
        usleep(10000);
    __atomic_store_n(&m.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    ASSERT_EQ(m.rc, ACCEL_OK);
    ASSERT_EQ(m.n, 4);
    ASSERT_STR_EQ(m.key[0], "/t/wm/c/early");
    ASSERT_EQ(m.range[0], 2);
    ASSERT_EQ(m.rev[0], rc_early);
    for (size_t i = 1; i < 4; i++) {
        size_t want = i == 1 ? 0 : i == 2 ? 1 : 2;
        ASSERT_EQ(m.range[i], want);
        ASSERT_EQ(m.rev[i], i == 1 ? ra : i == 2 ? rb : rc2);
    }
    ASSERT_STR_EQ(m.key[1], "/t/wm/a/1");
    ASSERT_STR_EQ(m.key[2], "/t/wm/b/1");
    ASSERT_STR_EQ(m.key[3], "/t/wm/c/2");
    pthread_mutex_destroy(&m.mu);
    etcd_close(e);
}

/* A watch from an old revision replays what happened since, in order;
 * a value with a NUL inside survives the trip. */
TEST(etcd_watch_replay_order)
{
    struct etcd *e = open_client();
    int64_t r1 = put(e, "/t/wq/a", "1");
    int64_t r2 = put_n(e, "/t/wq/b", "x\0y", 3);
    struct etcd_op del = { .kind = ETCD_DELETE, .key = "/t/wq/a" };
    bool ok = false;
    int64_t r3 = 0;
    struct recorder *r;

    ASSERT_EQ(etcd_txn(e, NULL, 0, &del, 1, &ok, &r3, NULL), ACCEL_OK);
    r = rec_start(e, "/t/wq/", r1);
    ASSERT(rec_wait(r, REC_GROUPS_AT_LEAST, 3, 10000));
    pthread_mutex_lock(&r->mu);
    ASSERT_EQ(r->ngroups, 3);
    ASSERT_EQ(r->g[0].rev, r1);
    ASSERT_EQ(r->g[1].rev, r2);
    ASSERT_EQ(r->g[2].rev, r3);
    ASSERT_EQ(r->g[0].ev[0].type, ETCD_EV_PUT);
    ASSERT_EQ(r->g[1].ev[0].value_len, 3);
    ASSERT(memcmp(r->g[1].ev[0].value, "x\0y", 3) == 0);
    ASSERT_EQ(r->g[2].ev[0].type, ETCD_EV_DELETE);
    ASSERT_STR_EQ(r->g[2].ev[0].key, "/t/wq/a");
    pthread_mutex_unlock(&r->mu);
    ASSERT_EQ(rec_stop(r), ACCEL_OK);
    etcd_close(e);
}

/* A revision far larger than one read from the socket (100 values of
 * 8 KiB: one JSON line of ~1.1 MB, split across many chunks) still
 * arrives whole, as one callback. */
struct big_check {
    size_t calls;  /* callbacks with events */
    size_t events; /* events in the first */
    size_t bad;    /* events whose key or value differs */
};

#define BIG_N   100
#define BIG_LEN 8192

static void big_value(char *v, int i)
{
    for (int j = 0; j < BIG_LEN; j++)
        v[j] = (char)((i * 131 + j * 7) & 0xff); /* NUL bytes included */
}

static enum accel_err big_cb(void *ctx, int64_t rev,
                             const struct etcd_event *ev, size_t n)
{
    struct big_check *b = ctx;
    static char want[BIG_LEN];
    char key[32];
    (void)rev;
    if (n == 0)
        return ACCEL_OK;
    if (b->calls++ == 0)
        b->events = n;
    for (size_t i = 0; i < n; i++) {
        snprintf(key, sizeof key, "/t/wb/%03zu", i);
        big_value(want, (int)i);
        if (strcmp(ev[i].kv.key, key) != 0 || ev[i].kv.value_len != BIG_LEN ||
            memcmp(ev[i].kv.value, want, BIG_LEN) != 0)
            b->bad++;
    }
    return ACCEL_ESTORE_NEWER; /* any non-OK ends the watch with it */
}

TEST(etcd_watch_large_revision)
{
    struct etcd *e = open_client();
    static struct etcd_op ops[BIG_N];
    static char keys[BIG_N][32], vals[BIG_N][BIG_LEN];
    struct big_check b = { 0 };
    volatile int stop = 0;
    int64_t start = store_rev(e) + 1;
    bool ok = false;

    for (int i = 0; i < BIG_N; i++) {
        snprintf(keys[i], sizeof keys[i], "/t/wb/%03d", i);
        big_value(vals[i], i);
        ops[i] = (struct etcd_op){ .kind = ETCD_PUT,
                                   .key = keys[i],
                                   .value = vals[i],
                                   .value_len = BIG_LEN };
    }
    ASSERT_EQ(etcd_txn(e, NULL, 0, ops, BIG_N, &ok, NULL, NULL), ACCEL_OK);
    ASSERT(ok);
    /* the callback's own error ends the watch and is returned */
    ASSERT_EQ(etcd_watch(e, "/t/wb/", start, big_cb, &b, &stop),
              ACCEL_ESTORE_NEWER);
    ASSERT_EQ(b.calls, 1);
    ASSERT_EQ(b.events, BIG_N);
    ASSERT_EQ(b.bad, 0);
    etcd_close(e);
}

/* Nothing changes under the prefix: progress notifications come (the
 * driver's cluster sends them every second) with the store's revision. */
TEST(etcd_watch_progress)
{
    struct etcd *e = open_client();
    int64_t now = store_rev(e);
    struct recorder *r = rec_start(e, "/t/wp/", now + 1);

    ASSERT(rec_wait(r, REC_PROGRESS_AT_LEAST, 2, 15000));
    pthread_mutex_lock(&r->mu);
    ASSERT_EQ(r->ngroups, 0);
    ASSERT_GE(r->progress_rev, now);
    pthread_mutex_unlock(&r->mu);
    ASSERT_EQ(rec_stop(r), ACCEL_OK);
    etcd_close(e);
}

/* The stop flag ends an idle watch within ~200 ms (it is looked at every
 * 100 ms; 400 allows for a loaded machine), with ACCEL_OK. */
TEST(etcd_watch_stop)
{
    struct etcd *e = open_client();
    uint64_t worst = 0;

    for (int i = 0; i < 5; i++) {
        struct recorder *r = rec_start(e, "/t/ws/", 0);
        uint64_t t0, took;
        sleep_ms(150 + 70 * i); /* land at different points of the poll */
        t0 = util_now_ns();
        __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
        ASSERT(rec_wait(r, REC_FINISHED, 0, 5000));
        took = (r->finished_ns - t0) / 1000000u;
        worst = took > worst ? took : worst;
        ASSERT_EQ(rec_stop(r), ACCEL_OK);
    }
    printf("watch stop: slowest return %" PRIu64 " ms\n", worst);
    ASSERT_LE(worst, 400);
    etcd_close(e);
}

static enum accel_err never_cb(void *ctx, int64_t rev,
                               const struct etcd_event *ev, size_t n)
{
    (void)ctx;
    (void)ev;
    FAIL_AT_("a cancelled watch called back (revision %" PRId64 ", %zu "
             "events)",
             rev, n);
    return ACCEL_OK;
}

/* A watch from a compacted revision is cancelled by etcd: the caller
 * must reload (ACCEL_ESTORE_CORRUPT); a read there is refused. */
TEST(etcd_watch_compacted)
{
    struct etcd *e = open_client();
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    volatile int stop = 0;
    int64_t r1 = put(e, "/t/wc/a", "1");
    int64_t r2 = put(e, "/t/wc/a", "2");
    char *cause = NULL;
    struct recorder *r;

    ASSERT_EQ(etcd_compact(e, r2, &cause), ACCEL_OK);
    ASSERT_EQ(etcd_watch(e, "/t/wc/", r1, never_cb, NULL, &stop),
              ACCEL_ESTORE_CORRUPT);
    ASSERT_EQ(etcd_get(e, "/t/wc/a", false, r1, &kvs, &n, NULL), ACCEL_ESTORE);
    ASSERT_EQ(etcd_compact(e, r1, &cause), ACCEL_ESTORE);
    ASSERT(cause != NULL && strstr(cause, "compacted") != NULL);
    free(cause);
    /* from the compaction revision on, the watch works */
    r = rec_start(e, "/t/wc/", r2);
    ASSERT(rec_wait(r, REC_GROUPS_AT_LEAST, 1, 10000));
    ASSERT_EQ(r->g[0].rev, r2);
    ASSERT_EQ(rec_stop(r), ACCEL_OK);
    etcd_close(e);
}

TEST(etcd_lease_expire)
{
    struct etcd *e = open_client();
    int64_t id = 0, ttl = -1;
    struct etcd_op op = {
        .kind = ETCD_PUT, .key = "/t/le/k", .value = "v", .value_len = 1
    };
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    bool ok = false;
    uint64_t t0;

    ASSERT_EQ(etcd_lease_grant(e, 2, &id), ACCEL_OK);
    ASSERT_NE(id, 0);
    op.lease = id;
    ASSERT_EQ(etcd_txn(e, NULL, 0, &op, 1, &ok, NULL, NULL), ACCEL_OK);
    ASSERT_EQ(etcd_get(e, "/t/le/k", false, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(kvs[0].lease, id);
    etcd_kvs_free(kvs, n);
    /* renewed every 500 ms, it outlives its TTL */
    t0 = util_now_ns();
    while (ms_since(t0) < 3500) {
        ASSERT_EQ(etcd_lease_keepalive(e, id, &ttl), ACCEL_OK);
        ASSERT_GE(ttl, 1);
        ASSERT_LE(ttl, 2);
        sleep_ms(500);
    }
    ASSERT_EQ(count(e, "/t/le/"), 1);
    /* left alone, it expires and takes its key */
    t0 = util_now_ns();
    while (count(e, "/t/le/") != 0) {
        if (ms_since(t0) > 15000)
            FAIL_AT_("the key of a lease of 2 s is still there after 15 s");
        sleep_ms(100);
    }
    printf("lease of 2 s: key gone %" PRIu64 " ms after the last renewal\n",
           ms_since(t0));
    ASSERT_EQ(etcd_lease_keepalive(e, id, &ttl), ACCEL_OK);
    ASSERT_EQ(ttl, 0);
    ASSERT_EQ(etcd_lease_revoke(e, id), ACCEL_ENOTFOUND);
    etcd_close(e);
}

TEST(etcd_lease_revoke)
{
    struct etcd *e = open_client();
    int64_t id = 0, ttl = 0;
    struct etcd_op ops[2] = {
        { .kind = ETCD_PUT, .key = "/t/lr/a", .value = "1", .value_len = 1 },
        { .kind = ETCD_PUT, .key = "/t/lr/b", .value = "2", .value_len = 1 },
    };
    bool ok = false;

    ASSERT_EQ(etcd_lease_grant(e, 60, &id), ACCEL_OK);
    ops[0].lease = ops[1].lease = id;
    ASSERT_EQ(etcd_txn(e, NULL, 0, ops, 2, &ok, NULL, NULL), ACCEL_OK);
    put(e, "/t/lr/c", "no lease");
    ASSERT_EQ(count(e, "/t/lr/"), 3);
    ASSERT_EQ(etcd_lease_keepalive(e, id, &ttl), ACCEL_OK);
    ASSERT_GT(ttl, 50);
    ASSERT_EQ(etcd_lease_revoke(e, id), ACCEL_OK);
    ASSERT_EQ(count(e, "/t/lr/"), 1);
    ASSERT_EQ(etcd_lease_keepalive(e, id, &ttl), ACCEL_OK);
    ASSERT_EQ(ttl, 0);
    ASSERT_EQ(etcd_lease_revoke(e, id), ACCEL_ENOTFOUND);
    etcd_close(e);
}

TEST(etcd_members_list)
{
    struct etcd *e = open_client();
    char *text = NULL;
    json_t *arr;
    size_t i, leaders = 0;
    json_t *m;

    ASSERT_EQ(etcd_members(e, &text), ACCEL_OK);
    arr = json_loads(text, 0, NULL);
    ASSERT(json_is_array(arr));
    ASSERT_EQ(json_array_size(arr), 3);
    json_array_foreach (arr, i, m) {
        const char *name = json_string_value(json_object_get(m, "name"));
        json_t *urls = json_object_get(m, "clientURLs");
        ASSERT(name != NULL && name[0] == 'm');
        ASSERT_EQ(json_array_size(urls), 1);
        ASSERT(strstr(endpoints(), json_string_value(json_array_get(urls, 0))));
        if (json_is_true(json_object_get(m, "leader")))
            leaders++;
    }
    ASSERT_EQ(leaders, 1);
    json_decref(arr);
    free(text);
    etcd_close(e);
}

#define RACE_ROUNDS 1000

/* Two threads, one client: each round both read the key's mod revision,
 * then both put it guarded on that revision. */
struct race {
    struct etcd *e;               /* shared client (thread-safe) */
    pthread_barrier_t bar;        /* rounds in step */
    int64_t seen[2][RACE_ROUNDS]; /* the mod revision each read */
    bool won[2][RACE_ROUNDS];     /* whose txn applied */
    enum accel_err err[2];        /* first failure, if any */
};

struct racer {
    struct race *race; /* shared */
    int id;            /* 0 or 1 */
};

static void *racer_main(void *arg)
{
    struct racer *me = arg;
    struct race *ra = me->race;
    char val[32];

    for (int round = 0; round < RACE_ROUNDS; round++) {
        struct etcd_kv *kvs = NULL;
        size_t n = 0;
        enum accel_err rc;
        pthread_barrier_wait(&ra->bar); /* the previous round is over */
        rc = etcd_get(ra->e, "/t/race/k", false, 0, &kvs, &n, NULL);
        if (rc != ACCEL_OK || n != 1) {
            ra->err[me->id] = rc != ACCEL_OK ? rc : ACCEL_ENOTFOUND;
            ra->seen[me->id][round] = -1;
        } else {
            ra->seen[me->id][round] = kvs[0].mod_rev;
        }
        etcd_kvs_free(kvs, n);
        pthread_barrier_wait(&ra->bar); /* both have read */
        struct etcd_cmp c = { .key = "/t/race/k",
                              .target = ETCD_MOD,
                              .result = ETCD_EQUAL,
                              .num = ra->seen[me->id][round] };
        struct etcd_op op = { .kind = ETCD_PUT,
                              .key = "/t/race/k",
                              .value = val };
        op.value_len =
            (size_t)snprintf(val, sizeof val, "%d-%d", me->id, round);
        rc =
            etcd_txn(ra->e, &c, 1, &op, 1, &ra->won[me->id][round], NULL, NULL);
        if (rc != ACCEL_OK)
            ra->err[me->id] = rc;
    }
    return NULL;
}

TEST(etcd_guarded_race)
{
    struct race *ra = xcalloc(1, sizeof *ra);
    struct racer who[2] = { { ra, 0 }, { ra, 1 } };
    pthread_t th[2];
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    uint64_t t0 = util_now_ns();

    ra->e = open_client();
    put(ra->e, "/t/race/k", "start");
    pthread_barrier_init(&ra->bar, NULL, 2);
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&th[i], NULL, racer_main, &who[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ASSERT_EQ(ra->err[0], ACCEL_OK);
    ASSERT_EQ(ra->err[1], ACCEL_OK);
    for (int round = 0; round < RACE_ROUNDS; round++) {
        ASSERT_EQ(ra->seen[0][round], ra->seen[1][round]);
        if (ra->won[0][round] == ra->won[1][round])
            FAIL_AT_("round %d: %s", round,
                     ra->won[0][round] ? "both won" : "neither won");
    }
    /* one put per round: version 1 + RACE_ROUNDS */
    ASSERT_EQ(etcd_get(ra->e, "/t/race/k", false, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(kvs[0].version, 1 + RACE_ROUNDS);
    etcd_kvs_free(kvs, n);
    printf("guarded race: %d rounds in %" PRIu64 " ms, one winner each\n",
           RACE_ROUNDS, ms_since(t0));
    pthread_barrier_destroy(&ra->bar);
    etcd_close(ra->e);
    free(ra);
}

static const char *tls_env(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        FAIL_AT_("%s is not set: run test_etcd_client.py", name);
    return v;
}

/* https members that require a client certificate (the driver's second
 * cluster): with the CA and the certificate every call works; without
 * the certificate, or without the CA, no member answers. */
TEST(etcd_tls)
{
    struct etcd_opts o = { .endpoints = tls_env("ACCEL_ETCD_TLS_ENDPOINTS"),
                           .cacert = tls_env("ACCEL_ETCD_TLS_CA"),
                           .cert = tls_env("ACCEL_ETCD_TLS_CERT"),
                           .key = tls_env("ACCEL_ETCD_TLS_KEY") };
    struct etcd *e = NULL;
    struct etcd_kv *kvs = NULL;
    struct recorder *r;
    size_t n = 0;
    int64_t rev, id = 0;

    ASSERT_EQ(etcd_open(&o, &e, NULL), ACCEL_OK);
    rev = put(e, "/t/tls/a", "secret");
    ASSERT_EQ(etcd_get(e, "/t/tls/", true, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_STR_EQ(kvs[0].value, "secret");
    etcd_kvs_free(kvs, n);
    ASSERT_EQ(etcd_lease_grant(e, 5, &id), ACCEL_OK);
    ASSERT_EQ(etcd_lease_revoke(e, id), ACCEL_OK);
    r = rec_start(e, "/t/tls/", rev);
    ASSERT(rec_wait(r, REC_GROUPS_AT_LEAST, 1, 10000));
    ASSERT_EQ(r->g[0].rev, rev);
    ASSERT_EQ(rec_stop(r), ACCEL_OK);
    etcd_close(e);

    o.cert = o.key = NULL; /* the members refuse the handshake */
    ASSERT_EQ(etcd_open(&o, &e, NULL), ACCEL_OK);
    ASSERT_EQ(etcd_get(e, "/t/tls/a", false, 0, &kvs, &n, NULL), ACCEL_EIO);
    etcd_close(e);
    o.cert = tls_env("ACCEL_ETCD_TLS_CERT");
    o.key = tls_env("ACCEL_ETCD_TLS_KEY");
    o.cacert = NULL; /* the system's CAs do not know the test CA */
    ASSERT_EQ(etcd_open(&o, &e, NULL), ACCEL_OK);
    ASSERT_EQ(etcd_get(e, "/t/tls/a", false, 0, &kvs, &n, NULL), ACCEL_EIO);
    etcd_close(e);
    o.key = NULL; /* a certificate without its key */
    ASSERT_EQ(etcd_open(&o, &e, NULL), ACCEL_EINVAL);
}

/* etcd_check_closed: the TLS members refuse a request without the client
 * certificate; the plain cluster is refused for its http:// URLs; members
 * that do not answer cannot be judged. */
TEST(etcd_check_closed)
{
    struct etcd_opts o = { .endpoints = tls_env("ACCEL_ETCD_TLS_ENDPOINTS"),
                           .cacert = tls_env("ACCEL_ETCD_TLS_CA"),
                           .cert = tls_env("ACCEL_ETCD_TLS_CERT"),
                           .key = tls_env("ACCEL_ETCD_TLS_KEY") };
    struct etcd *e = NULL;
    char *cause = NULL;

    ASSERT_EQ(etcd_open(&o, &e, NULL), ACCEL_OK);
    ASSERT_EQ(etcd_check_closed(e, "/t/probe", &cause), ACCEL_OK);
    ASSERT(cause == NULL);
    etcd_close(e);

    o = (struct etcd_opts){ .endpoints = endpoints() };
    ASSERT_EQ(etcd_open(&o, &e, NULL), ACCEL_OK);
    ASSERT_EQ(etcd_check_closed(e, "/t/probe", &cause), ACCEL_EFORBIDDEN);
    ASSERT(cause != NULL && strstr(cause, "is plain http") != NULL);
    free(cause);
    cause = NULL;
    etcd_close(e);

    o = (struct etcd_opts){ .endpoints = "https://127.0.0.1:9" };
    ASSERT_EQ(etcd_open(&o, &e, NULL), ACCEL_OK);
    ASSERT_EQ(etcd_check_closed(e, "/t/probe", &cause), ACCEL_EIO);
    ASSERT(cause != NULL && strstr(cause, "no etcd member answered"));
    free(cause);
    etcd_close(e);
}

/* Order the client's endpoints so that it uses member `first`. */
static struct etcd *open_on(const char *first)
{
    char eps[2048];
    const char *all = endpoints();
    size_t len = 0;

    len += (size_t)snprintf(eps, sizeof eps, "%s", first);
    for (const char *p = all; *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (!(l == strlen(first) && strncmp(p, first, l) == 0))
            len += (size_t)snprintf(eps + len, sizeof eps - len, ",%.*s",
                                    (int)l, p);
        p += l + (comma ? 1 : 0);
    }
    return open_with(eps, 0);
}

/* A follower of the leader, by URL. */
static void pick_follower(char *out, size_t cap)
{
    char leader[256];
    const char *all = endpoints();
    const char *comma = strchr(all, ',');
    size_t l = comma ? (size_t)(comma - all) : strlen(all);

    ctl("leader", leader, sizeof leader);
    if (l == strlen(leader) && strncmp(all, leader, l) == 0) {
        all = comma + 1;
        comma = strchr(all, ',');
        l = comma ? (size_t)(comma - all) : strlen(all);
    }
    snprintf(out, cap, "%.*s", (int)l, all);
}

/*
 * Kill the member the client uses (a follower, so the cluster keeps its
 * leader): the watch on it breaks with ACCEL_EIO, the next call succeeds
 * on another member, and a watch resumed from the next revision carries
 * on there. Then the leader itself: calls fail over once a new leader is
 * elected (the caller retries meanwhile, as acceld does).
 */
TEST(etcd_failover)
{
    char victim[256], cmd[300], leader[256];
    struct etcd *e;
    struct recorder *r;
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int64_t r1, r2;
    uint64_t t0;
    int tries = 0;

    pick_follower(victim, sizeof victim);
    e = open_on(victim);
    r1 = put(e, "/t/fo/a", "1");
    ASSERT_STR_EQ(etcd_endpoint(e), victim);
    r = rec_start(e, "/t/fo/", r1);
    ASSERT(rec_wait(r, REC_GROUPS_AT_LEAST, 1, 10000));
    snprintf(cmd, sizeof cmd, "kill %s", victim);
    ctl(cmd, NULL, 0);
    ASSERT(rec_wait(r, REC_FINISHED, 0, 15000));
    ASSERT_EQ(rec_stop(r), ACCEL_EIO);

    ASSERT_EQ(etcd_get(e, "/t/fo/a", false, 0, &kvs, &n, NULL), ACCEL_OK);
    ASSERT_EQ(n, 1);
    etcd_kvs_free(kvs, n);
    ASSERT(strcmp(etcd_endpoint(e), victim) != 0);
    r2 = put(e, "/t/fo/b", "2");
    r = rec_start(e, "/t/fo/", r1 + 1);
    ASSERT(rec_wait(r, REC_GROUPS_AT_LEAST, 1, 10000));
    ASSERT_EQ(r->g[0].rev, r2);
    ASSERT_EQ(rec_stop(r), ACCEL_OK);
    snprintf(cmd, sizeof cmd, "restart %s", victim);
    ctl(cmd, NULL, 0);

    /* now the leader, with the client on it */
    ctl("leader", leader, sizeof leader);
    etcd_close(e);
    e = open_on(leader);
    put(e, "/t/fo/c", "3");
    snprintf(cmd, sizeof cmd, "kill %s", leader);
    ctl(cmd, NULL, 0);
    t0 = util_now_ns();
    for (;;) {
        struct etcd_op op = {
            .kind = ETCD_PUT, .key = "/t/fo/d", .value = "4", .value_len = 1
        };
        bool ok = false;
        tries++;
        if (etcd_txn(e, NULL, 0, &op, 1, &ok, NULL, NULL) == ACCEL_OK && ok)
            break;
        if (ms_since(t0) > 30000)
            FAIL_AT_("no write succeeded within 30 s of killing the leader");
        sleep_ms(100);
    }
    printf("leader killed: a write succeeded after %" PRIu64 " ms (%d "
           "tries)\n",
           ms_since(t0), tries);
    ASSERT(strcmp(etcd_endpoint(e), leader) != 0);
    ASSERT_EQ(count(e, "/t/fo/"), 4);
    snprintf(cmd, sizeof cmd, "restart %s", leader);
    ctl(cmd, NULL, 0);
    etcd_close(e);
}

#define LIST(XX)                  \
    XX(etcd_open_rejects)         \
    XX(etcd_unreachable_and_skip) \
    XX(etcd_count_filters)        \
    XX(etcd_put_get)              \
    XX(etcd_prefix_paging)        \
    XX(etcd_prefix_ff)            \
    XX(etcd_guards)               \
    XX(etcd_delete_prefix)        \
    XX(etcd_nul_in_value)         \
    XX(etcd_txn_op_limit)         \
    XX(etcd_watch_txn_order)      \
    XX(etcd_watch_replay_order)   \
    XX(etcd_watch_large_revision) \
    XX(etcd_watch_progress)       \
    XX(etcd_watch_multi_ranges)   \
    XX(etcd_watch_stop)           \
    XX(etcd_lease_expire)         \
    XX(etcd_lease_revoke)         \
    XX(etcd_members_list)         \
    XX(etcd_guarded_race)         \
    XX(etcd_watch_compacted)      \
    XX(etcd_tls)                  \
    XX(etcd_check_closed)         \
    XX(etcd_failover)
TEST_MAIN(LIST)
