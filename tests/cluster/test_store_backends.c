/* SPDX-License-Identifier: MIT */
/*
 * test_store_backends.c: the contract of store.h, run against both of its
 * backends: the same test function once on a fresh SQLite file (store_open)
 * and once on a fresh prefix of a real etcd cluster (store_open_etcd). Not
 * run on its own: test_store_backends.py starts the etcd member
 * (etcd_harness.py) and runs this program with ACCEL_ETCD_ENDPOINTS set.
 *
 * What both must do alike: every row kind round-trips through store_load
 * with all its fields; puts replace; deletes; a rolled-back or failed
 * transaction writes nothing; identities are unique by name and by uid;
 * events are appended inside and outside transactions, queried by every
 * filter in id order and pruned beyond keep_max; a reopened store loads
 * what was committed; undecodable rows are refused or, with repair,
 * dropped with a "store.repair" event; newer and foreign stores are
 * refused and left as they are.
 *
 * Where the backends differ by design, each side's documented behaviour
 * is tested: event ids (SQLite: 1, 2, 3 and returned by the append;
 * etcd: revision * 1024 + rank, 0 from the append, shown once the watch
 * delivers them, and handed to this process's own follower too) and
 * device keys (SQLite: node and id; etcd: the id alone). Pruning is held
 * to what both promise (the newest keep_max kept, at most keep_max + 63).
 * Then etcd alone: two stores on one prefix, guarded commits that lose
 * with ACCEL_ECONFLICT, the follower's callbacks, and the allocation
 * guards of a device and an owner.
 *
 * The daemon's lock: the test thread holds fx->mu from open to close and
 * lets it go only while it waits for the watch (fx_settle, fx_wait_rev),
 * so the follower applies changes only then, as in acceld, and a "stale"
 * view is a deterministic state, not a race.
 */
#include "common/accel_setup.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <time.h>

#include "common/util.h"
#include "daemon/store/etcd.h"

#include "harness.h"

#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HASH_B "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define WAIT_MS 10000

enum kind { K_SQLITE, K_ETCD };

/* ------------------------------------------------------------ recorder */

/* A text log, one line per row or change, bounded. */
struct rec {
    char buf[1 << 15];
    size_t len;
};

static void rec_add(struct rec *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void rec_add(struct rec *r, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(r->buf + r->len, sizeof(r->buf) - r->len, fmt, ap);
    va_end(ap);
    ASSERT(n >= 0 && (size_t)n < sizeof(r->buf) - r->len);
    r->len += (size_t)n;
}

static int cmp_line(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The lines of text, sorted, as one allocated text (caller frees). */
static char *sorted_lines(const char *text)
{
    char *copy = xstrdup(text), *save = NULL, *line, *out;
    char **v = NULL;
    size_t n = 0, len = 1;
    for (line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        v = xrealloc(v, (n + 1) * sizeof(*v));
        v[n++] = line;
        len += strlen(line) + 1;
    }
    if (n > 1) /* qsort must not be given NULL, even for nothing */
        qsort(v, n, sizeof(*v), cmp_line);
    out = xmalloc(len);
    out[0] = '\0';
    for (size_t i = 0, at = 0; i < n; i++) {
        size_t l = strlen(v[i]);
        memcpy(out + at, v[i], l);
        out[at + l] = '\n';
        out[at + l + 1] = '\0';
        at += l + 1;
    }
    free(v);
    free(copy);
    return out;
}

#define ASSERT_LINES(got, want)                                                \
    do {                                                                       \
        char *g_ = sorted_lines(got), *w_ = sorted_lines(want);                \
        if (strcmp(g_, w_) != 0)                                               \
            FAIL_AT_("rows differ:\n--- got\n%s--- want\n%s", g_, w_);         \
        free(g_);                                                              \
        free(w_);                                                              \
    } while (0)

#define S_(x) ((x) ? (x) : "NULL")

/* ------------------------------------------------------------ loader */

struct dump {
    struct rec r;
    const char *refuse_app; /* the app callback refuses this one */
};

static enum accel_err d_app(void *ctx, const struct store_app *a, char **why)
{
    struct dump *d = ctx;
    if (d->refuse_app && strcmp(a->name, d->refuse_app) == 0) {
        *why = xstrdup("the daemon refuses it");
        return ACCEL_ESTORE_CORRUPT;
    }
    rec_add(&d->r, "app %s %s %s %s %s %s %jd %jd %jd %ju %jd\n", a->name,
            a->owner, a->state, S_(a->reason), a->manifest,
            S_(a->selected_type), (intmax_t)a->created_ms,
            (intmax_t)a->updated_ms, (intmax_t)a->pid,
            (uintmax_t)a->pid_start, (intmax_t)a->exit_status);
    return ACCEL_OK;
}

static enum accel_err d_alloc(void *ctx, const struct store_alloc *a,
                              char **why)
{
    struct dump *d = ctx;
    (void)why;
    rec_add(&d->r, "alloc %s %s %s %s %s %ju\n", a->app, a->owner, a->type,
            a->node, a->device, (uintmax_t)a->memory);
    return ACCEL_OK;
}

static enum accel_err d_device(void *ctx, const struct store_device *v,
                               char **why)
{
    struct dump *d = ctx;
    (void)why;
    rec_add(&d->r, "device %s %s %s %s\n", v->node, v->id, v->support,
            S_(v->settings));
    return ACCEL_OK;
}

static enum accel_err d_node(void *ctx, const struct store_node *n, char **why)
{
    struct dump *d = ctx;
    (void)why;
    rec_add(&d->r, "node %s %d\n", n->name, n->enabled ? 1 : 0);
    return ACCEL_OK;
}

static enum accel_err d_user(void *ctx, const struct store_user *u, char **why)
{
    struct dump *d = ctx;
    (void)why;
    rec_add(&d->r, "user %s %s %.8s %jd\n", u->name, u->role, u->token_hash,
            (intmax_t)u->created_ms);
    return ACCEL_OK;
}

static enum accel_err d_identity(void *ctx, const struct store_identity *i,
                                 char **why)
{
    struct dump *d = ctx;
    (void)why;
    rec_add(&d->r, "identity %s %jd\n", i->name, (intmax_t)i->uid);
    return ACCEL_OK;
}

static enum accel_err d_limits(void *ctx, const struct store_limits *l,
                               char **why)
{
    struct dump *d = ctx;
    (void)why;
    rec_add(&d->r, "limits %s %jd %jd\n", l->name, (intmax_t)l->max_apps,
            (intmax_t)l->max_gpu_memory);
    return ACCEL_OK;
}

static struct store_loader loader_of(struct dump *d, bool repair)
{
    return (struct store_loader){.ctx = d,
                                 .app = d_app,
                                 .alloc = d_alloc,
                                 .device = d_device,
                                 .node = d_node,
                                 .user = d_user,
                                 .identity = d_identity,
                                 .limits = d_limits,
                                 .repair = repair};
}

/* ------------------------------------------------------------ fixture */

/* One store of either kind, with the daemon's lock and (etcd) a follower
 * thread that records what it is handed. */
struct fx {
    enum kind kind;
    char *loc; /* SQLite: the file; etcd: the prefix */
    struct store *s;
    pthread_mutex_t mu;
    pthread_t th;
    bool following;
    volatile int stop;
    enum accel_err follow_rc;
    struct rec seen; /* the follower's callbacks, under mu */
    bool held;       /* the follower holds mu (f_lock to f_unlock): its
                        thread's alone, set and read by it */
    pthread_mutex_t pmu;
    struct rec early; /* app_early and nodeinfo, whether under mu: pmu */
};

static bool open_agent; /* the next open_at opens an agent's store */

static unsigned fresh_seq;

static const char *endpoints(void)
{
    const char *s = getenv("ACCEL_ETCD_ENDPOINTS");
    if (s == NULL || s[0] == '\0')
        FAIL_AT_("ACCEL_ETCD_ENDPOINTS is not set: run "
                 "test_store_backends.py");
    return s;
}

/* A location nothing has used: a file in this test's directory, or a
 * prefix named after this test's process (one per test) and a counter. */
static char *fresh_loc(enum kind k)
{
    unsigned n = fresh_seq++;
    if (k == K_SQLITE)
        return xasprintf("%s/accel-%u.db", harness_tmp(), n);
    return xasprintf("/tsb/%ld-%u/", (long)getpid(), n);
}

static enum accel_err open_at(enum kind k, const char *loc, const char *node,
                              struct store **out, char **cause)
{
    struct store_etcd_opts o = {.endpoints = endpoints(),
                                .prefix = loc,
                                .node = node,
                                .timeout_ms = 5000,
                                /* test_store_backends.py's etcd is plain
                                 * http on loopback, and its own */
                                .insecure = true,
                                .agent = open_agent};
    *cause = NULL;
    open_agent = false;
    if (k == K_SQLITE)
        return store_open(loc, out, cause);
    return store_open_etcd(&o, out, cause);
}

/* Follower callbacks: each records a line in fx->seen. */
static void f_lock(void *ctx)
{
    struct fx *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->held = true;
}
static void f_unlock(void *ctx)
{
    struct fx *f = ctx;
    f->held = false;
    pthread_mutex_unlock(&f->mu);
}
/* An app row that may be new, and whether the follower held mu then. */
static void f_app_early(void *ctx, const char *name,
                        const struct store_app *row)
{
    struct fx *f = ctx;
    bool held = f->held;
    pthread_mutex_lock(&f->pmu);
    rec_add(&f->early, "early %s %s %s\n", name, row->state,
            held ? "under the lock" : "without the lock");
    pthread_mutex_unlock(&f->pmu);
}
static void f_nodeinfo(void *ctx, const char *node, const char *json,
                       const struct json_t *parsed)
{
    struct fx *f = ctx;
    pthread_mutex_lock(&f->pmu);
    rec_add(&f->early, "nodeinfo %s %s\n", node,
            !json ? "deleted" : parsed ? "parsed" : "as text");
    pthread_mutex_unlock(&f->pmu);
    rec_add(&f->seen, "node %s\n", node); /* in order with the rows */
}
static void f_app(void *ctx, const char *name, const struct store_app *row)
{
    struct fx *f = ctx;
    if (row)
        rec_add(&f->seen, "app %s %s\n", name, row->state);
    else
        rec_add(&f->seen, "app %s deleted\n", name);
}
static void f_alloc(void *ctx, const char *app, const char *device,
                    const struct store_alloc *row)
{
    struct fx *f = ctx;
    if (row)
        rec_add(&f->seen, "alloc %s/%s %s\n", app, device, row->owner);
    else
        rec_add(&f->seen, "alloc %s/%s deleted\n", app, device);
}
static void f_user(void *ctx, const char *name, const struct store_user *row)
{
    struct fx *f = ctx;
    rec_add(&f->seen, "user %s %s\n", name, row ? row->role : "deleted");
}
static void f_event(void *ctx, const struct store_event *e)
{
    struct fx *f = ctx;
    rec_add(&f->seen, "event %s %s\n", e->kind, e->message);
}

static void *follow_main(void *arg)
{
    struct fx *f = arg;
    struct store_follower fo = {.ctx = f,
                                .lock = f_lock,
                                .unlock = f_unlock,
                                .app_early = f_app_early,
                                .app = f_app,
                                .nodeinfo = f_nodeinfo,
                                .alloc = f_alloc,
                                .user = f_user,
                                .event = f_event};
    f->follow_rc = store_follow(f->s, &fo, &f->stop);
    return NULL;
}

/* Start the follower of a loaded etcd store (nothing for SQLite). */
static void fx_follow(struct fx *f)
{
    if (f->kind != K_ETCD)
        return;
    ASSERT_EQ(pthread_create(&f->th, NULL, follow_main, f), 0);
    f->following = true;
}

/* Open the store at loc (a fresh one when loc is NULL), load it into d
 * (may be NULL) and follow it; returns with f->mu held. */
static struct fx *fx_open(enum kind k, const char *loc, const char *node,
                          struct dump *d)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    struct dump none = {0};
    struct store_loader l = loader_of(d ? d : &none, false);
    char *cause = NULL;
    enum accel_err err;

    f->kind = k;
    f->loc = loc ? xstrdup(loc) : fresh_loc(k);
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->pmu, NULL);
    pthread_mutex_lock(&f->mu);
    err = open_at(k, f->loc, node ? node : "n1", &f->s, &cause);
    if (err != ACCEL_OK)
        FAIL_AT_("open %s: %s: %s", f->loc, accel_err_name(err), S_(cause));
    err = store_load(f->s, &l, &cause);
    if (err != ACCEL_OK)
        FAIL_AT_("load %s: %s: %s", f->loc, accel_err_name(err), S_(cause));
    ASSERT(cause == NULL);
    fx_follow(f);
    return f;
}

static void fx_close(struct fx *f)
{
    /* once the follower is gone nothing else takes f->mu: the store is
     * closed without it (taking it again here, with another fixture's
     * lock held, would order the two locks both ways) */
    pthread_mutex_unlock(&f->mu);
    if (f->following) {
        __atomic_store_n(&f->stop, 1, __ATOMIC_SEQ_CST);
        ASSERT_EQ(pthread_join(f->th, NULL), 0);
        ASSERT_EQ(f->follow_rc, ACCEL_OK);
    }
    store_close(f->s);
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->pmu);
    free(f->loc);
    free(f);
}

/* What acceld does before it answers: store_sync, without its lock (the
 * watch applies under it). */
static void fx_settle(struct fx *f)
{
    enum accel_err err;
    pthread_mutex_unlock(&f->mu);
    err = store_sync(f->s);
    pthread_mutex_lock(&f->mu);
    ASSERT_EQ(err, ACCEL_OK);
}

static enum accel_err fx_wait_rev(struct fx *f, int64_t rev)
{
    enum accel_err err;
    pthread_mutex_unlock(&f->mu);
    err = store_wait_rev(f->s, rev, WAIT_MS);
    pthread_mutex_lock(&f->mu);
    return err;
}

/* Open loc in a store of its own and load it: its rows. */
static char *reload_at(enum kind k, const char *loc)
{
    struct dump d = {0};
    struct fx *g = fx_open(k, loc, "n9", &d);
    fx_close(g);
    return xstrdup(d.r.buf);
}

static char *reload(const struct fx *f)
{
    return reload_at(f->kind, f->loc);
}

#define ASSERT_RELOAD_AT(k, loc, want)                                         \
    do {                                                                       \
        char *got_ = reload_at(k, loc);                                        \
        ASSERT_LINES(got_, want);                                              \
        free(got_);                                                            \
    } while (0)
#define ASSERT_RELOAD(f, want) ASSERT_RELOAD_AT((f)->kind, (f)->loc, want)

/* -------------------------------------------------------------- rows */

static struct store_app app_row(const char *name, const char *owner,
                                const char *state)
{
    return (struct store_app){.name = name,
                              .owner = owner,
                              .state = state,
                              .manifest = "{\"name\":\"x\"}",
                              .created_ms = 1000,
                              .updated_ms = 2000,
                              .exit_status = -1};
}

static struct store_alloc alloc_row(const char *app, const char *owner,
                                    const char *device)
{
    return (struct store_alloc){app, owner, "nvidia", "n1", device, 0};
}

#define OK(expr) ASSERT_EQ((expr), ACCEL_OK)

static void put_app(struct store *s, const char *name, const char *owner)
{
    struct store_app a = app_row(name, owner, "installed");
    OK(store_app_put(s, &a));
}

static void put_alloc(struct store *s, const char *app, const char *owner,
                      const char *device)
{
    struct store_alloc a = alloc_row(app, owner, device);
    OK(store_alloc_put(s, &a));
}

static void put_user(struct store *s, const char *name, const char *role)
{
    struct store_user u = {name, role, HASH_A, 5};
    OK(store_user_put(s, &u));
}

/* ------------------------------------------------------------ events */

struct evlist {
    int n;
    int64_t id[256];
    char line[256][1024];
    int stop_after; /* > 0: answer ACCEL_ERANGE after that many */
};

static enum accel_err ev_take(void *ctx, const struct store_event *e)
{
    struct evlist *l = ctx;
    ASSERT(l->n < 256);
    l->id[l->n] = e->id;
    snprintf(l->line[l->n], sizeof l->line[0], "%s %s %s %s %s %jd %s",
             e->kind, S_(e->app), S_(e->node), S_(e->device), e->message,
             (intmax_t)e->ts_ms, S_(e->data));
    l->n++;
    if (l->stop_after > 0 && l->n >= l->stop_after)
        return ACCEL_ERANGE;
    return ACCEL_OK;
}

static struct evlist *query(struct store *s, struct store_event_filter q)
{
    static struct evlist l;
    memset(&l, 0, sizeof l);
    OK(store_events_query(s, &q, ev_take, &l));
    for (int i = 1; i < l.n; i++)
        ASSERT_GT(l.id[i], l.id[i - 1]);
    return &l;
}

/* The messages of a query, space-separated (static buffer). */
static const char *messages(struct store *s, struct store_event_filter q)
{
    static char out[4096];
    struct evlist *l = query(s, q);
    out[0] = '\0';
    for (int i = 0; i < l->n; i++) {
        char kind[64], app[64], node[64], dev[64], msg[64];
        ASSERT_EQ(sscanf(l->line[i], "%63s %63s %63s %63s %63s", kind, app,
                         node, dev, msg),
                  5);
        util_strlcpy(out + strlen(out), i ? " " : "", sizeof out - strlen(out));
        util_strlcpy(out + strlen(out), msg, sizeof out - strlen(out));
    }
    return out;
}

static void event(struct store *s, const char *kind, const char *app,
                  const char *device, const char *msg, int64_t ts,
                  int64_t keep, int64_t *id)
{
    struct store_event e = {0,   ts,  kind, app,
                            "n1", device, msg, "{\"k\":1}"};
    OK(store_event_append(s, &e, keep, id));
}

/* ========================================================== generic */

/* Every row kind with every field, optional ones set and NULL; created
 * on the first open only. */
static void rows_round_trip(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct store_app a = {"web", "alice", "running", "started by alice",
                          "{\"name\":\"web\",\"x\":[1,2]}", "nvidia",
                          1700000000123, 1700000000456, 4242,
                          UINT64_C(987654321), 3};
    struct store_app b = {"batch", "shared", "installed", NULL, "{}", NULL,
                          0, 0, 0, 0, -1};
    struct store_alloc al = {"web", "alice", "nvidia", "n1", "GPU-1",
                             UINT64_C(8589934592)};
    struct store_alloc al2 = {"web", "alice", "nvidia", "n2", "GPU-2", 0};
    struct store_device dv = {"n1", "GPU-1", "MemorySlice",
                              "{\"memoryGiB\":8}"};
    struct store_device dv2 = {"n2", "GPU-2", "Exclusive", NULL};
    struct store_node n1 = {"n1", true}, n2 = {"n2", false};
    struct store_user u1 = {"alice", "member", HASH_B, 1234};
    struct store_user u2 = {"root", "admin", HASH_A, 0};
    struct store_identity i1 = {"alice", 70001}, i2 = {"shared", 70000};
    struct store_limits l1 = {"alice", 3, INT64_C(17179869184)};
    struct store_limits l2 = {"bob", -1, -1};

    ASSERT(store_created(f->s));
    ASSERT_EQ(store_is_cluster(f->s), k == K_ETCD);
    OK(store_begin(f->s));
    OK(store_app_put(f->s, &a));
    OK(store_app_put(f->s, &b));
    OK(store_alloc_put(f->s, &al));
    OK(store_alloc_put(f->s, &al2));
    OK(store_device_put(f->s, &dv));
    OK(store_device_put(f->s, &dv2));
    OK(store_node_put(f->s, &n1));
    OK(store_node_put(f->s, &n2));
    OK(store_user_put(f->s, &u1));
    OK(store_user_put(f->s, &u2));
    OK(store_identity_put(f->s, &i1));
    OK(store_identity_put(f->s, &i2));
    OK(store_limits_put(f->s, &l1));
    OK(store_limits_put(f->s, &l2));
    OK(store_commit(f->s));
    fx_settle(f);
    ASSERT_RELOAD(f, "app web alice running started by alice "
                     "{\"name\":\"web\",\"x\":[1,2]} nvidia 1700000000123 "
                     "1700000000456 4242 987654321 3\n"
                     "app batch shared installed NULL {} NULL 0 0 0 0 -1\n"
                     "alloc web alice nvidia n1 GPU-1 8589934592\n"
                     "alloc web alice nvidia n2 GPU-2 0\n"
                     "device n1 GPU-1 MemorySlice {\"memoryGiB\":8}\n"
                     "device n2 GPU-2 Exclusive NULL\n"
                     "node n1 1\nnode n2 0\n"
                     "user alice member 01234567 1234\n"
                     "user root admin aaaaaaaa 0\n"
                     "identity alice 70001\nidentity shared 70000\n"
                     "limits alice 3 17179869184\nlimits bob -1 -1\n");
    fx_close(f);
    {
        /* the second open of the same place did not create it */
        struct store *s = NULL;
        char *cause = NULL;
        char *loc = fresh_loc(k);
        struct fx *g = fx_open(k, loc, NULL, NULL);
        fx_close(g);
        OK(open_at(k, loc, "n1", &s, &cause));
        ASSERT(!store_created(s));
        store_close(s);
        free(loc);
    }
}

/* A put replaces the row of the same key, in one transaction or later
 * ones; devices are keyed by node and id (SQLite) or by id (etcd). */
static void insert_or_replace(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct store_app a = app_row("web", "alice", "installed");
    struct store_alloc al = alloc_row("web", "alice", "GPU-1");
    struct store_device dv = {"n1", "GPU-1", "Exclusive", NULL};
    struct store_node n = {"n1", true};
    struct store_user u = {"alice", "member", HASH_A, 1};
    struct store_limits l = {"alice", 1, 2};

    OK(store_begin(f->s));
    OK(store_app_put(f->s, &a));
    a.state = "starting";
    OK(store_app_put(f->s, &a)); /* twice in one transaction */
    OK(store_alloc_put(f->s, &al));
    OK(store_device_put(f->s, &dv));
    OK(store_node_put(f->s, &n));
    OK(store_user_put(f->s, &u));
    OK(store_limits_put(f->s, &l));
    OK(store_commit(f->s));
    fx_settle(f);

    a.state = "running";
    a.reason = "up";
    a.pid = 77;
    al.memory = 1024;
    dv.support = "TimeSlice";
    dv.settings = "{\"slice\":2}";
    n.enabled = false;
    u.role = "admin";
    u.token_hash = HASH_B;
    l.max_apps = -1;
    l.max_gpu_memory = 99;
    OK(store_begin(f->s));
    OK(store_app_put(f->s, &a));
    OK(store_alloc_put(f->s, &al));
    OK(store_device_put(f->s, &dv));
    OK(store_node_put(f->s, &n));
    OK(store_user_put(f->s, &u));
    OK(store_limits_put(f->s, &l));
    OK(store_commit(f->s));
    fx_settle(f);
    ASSERT_RELOAD(f, "app web alice running up {\"name\":\"x\"} NULL 1000 "
                     "2000 77 0 -1\n"
                     "alloc web alice nvidia n1 GPU-1 1024\n"
                     "device n1 GPU-1 TimeSlice {\"slice\":2}\n"
                     "node n1 0\n"
                     "user alice admin 01234567 1\n"
                     "limits alice -1 99\n");

    /* the same device id on another node */
    dv = (struct store_device){"n2", "GPU-1", "Exclusive", NULL};
    OK(store_begin(f->s));
    OK(store_device_put(f->s, &dv));
    OK(store_commit(f->s));
    fx_settle(f);
    {
        char *got = reload(f);
        if (k == K_SQLITE) /* keyed by (node, id): two rows */
            ASSERT(strstr(got, "device n1 GPU-1 TimeSlice") &&
                   strstr(got, "device n2 GPU-1 Exclusive NULL"));
        else /* devices/<id>: device ids are unique in a cluster */
            ASSERT(!strstr(got, "device n1 GPU-1") &&
                   strstr(got, "device n2 GPU-1 Exclusive NULL"));
        free(got);
    }
    fx_close(f);
}

/* Deletes of every kind that has one; an app's allocations by a store
 * that only loaded them. */
static void deletes(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct store_node n1 = {"n1", true}, n2 = {"n2", true};
    struct store_limits l = {"alice", 2, 3}, lb = {"bob", 4, 5};

    OK(store_begin(f->s));
    put_app(f->s, "a1", "alice");
    put_app(f->s, "a2", "alice");
    put_app(f->s, "a3", "bob");
    put_alloc(f->s, "a1", "alice", "GPU-1");
    put_alloc(f->s, "a1", "alice", "GPU-2");
    put_alloc(f->s, "a2", "alice", "GPU-3");
    put_alloc(f->s, "a2", "alice", "GPU-4");
    put_alloc(f->s, "a3", "bob", "GPU-5");
    put_alloc(f->s, "a3", "bob", "GPU-6");
    put_user(f->s, "alice", "member");
    put_user(f->s, "bob", "member");
    OK(store_limits_put(f->s, &l));
    OK(store_limits_put(f->s, &lb));
    OK(store_node_put(f->s, &n1));
    OK(store_node_put(f->s, &n2));
    OK(store_commit(f->s));
    fx_settle(f);

    OK(store_begin(f->s));
    OK(store_alloc_delete_app(f->s, "a1"));
    OK(store_app_delete(f->s, "a1"));
    OK(store_alloc_delete(f->s, "a2", "GPU-3"));
    OK(store_user_delete(f->s, "bob"));
    OK(store_limits_delete(f->s, "bob"));
    OK(store_node_delete(f->s, "n2"));
    OK(store_alloc_delete_app(f->s, "nothing")); /* no rows: fine */
    OK(store_user_delete(f->s, "nobody"));
    OK(store_commit(f->s));
    fx_settle(f);
    ASSERT_RELOAD(f, "app a2 alice installed NULL {\"name\":\"x\"} NULL 1000 2000 "
                     "0 0 -1\n"
                     "app a3 bob installed NULL {\"name\":\"x\"} NULL 1000 2000 0 "
                     "0 -1\n"
                     "alloc a2 alice nvidia n1 GPU-4 0\n"
                     "alloc a3 bob nvidia n1 GPU-5 0\n"
                     "alloc a3 bob nvidia n1 GPU-6 0\n"
                     "user alice member aaaaaaaa 5\n"
                     "limits alice 2 3\n"
                     "node n1 1\n");
    fx_close(f);
}

/* The same, for a reopened store: delete_app of rows it loaded. */
static void delete_loaded(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL), *g;
    OK(store_begin(f->s));
    put_app(f->s, "a3", "bob");
    put_alloc(f->s, "a3", "bob", "GPU-5");
    put_alloc(f->s, "a3", "bob", "GPU-6");
    put_app(f->s, "a4", "bob");
    put_alloc(f->s, "a4", "bob", "GPU-7");
    OK(store_commit(f->s));
    fx_settle(f);
    g = fx_open(k, f->loc, "n2", NULL);
    fx_close(f);
    OK(store_begin(g->s));
    OK(store_alloc_delete_app(g->s, "a3"));
    OK(store_commit(g->s));
    fx_settle(g);
    ASSERT_RELOAD(g, "app a3 bob installed NULL {\"name\":\"x\"} NULL 1000 2000 0 "
                     "0 -1\n"
                     "app a4 bob installed NULL {\"name\":\"x\"} NULL 1000 2000 0 "
                     "0 -1\n"
                     "alloc a4 bob nvidia n1 GPU-7 0\n");
    fx_close(g);
}

/* A live quota (SPEC 4.4) as acceld writes it (state_save_rows, then the
 * event app.quota): the app's rows replaced, one of them with a new
 * quota, in one transaction with the event. Committed: the new quota and
 * the event, the other row as it was; rolled back: neither. */
static void quota_replaced_in_one_transaction(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct store_alloc g1 = alloc_row("a1", "alice", "GPU-1");
    struct store_alloc g2 = alloc_row("a1", "alice", "GPU-2");

    g1.memory = 8ULL << 30;
    g2.memory = 4ULL << 30;
    OK(store_begin(f->s));
    put_app(f->s, "a1", "alice");
    OK(store_alloc_put(f->s, &g1));
    OK(store_alloc_put(f->s, &g2));
    OK(store_commit(f->s));
    fx_settle(f);

    OK(store_begin(f->s)); /* the cut, committed */
    OK(store_alloc_delete_app(f->s, "a1"));
    g1.memory = 2ULL << 30;
    OK(store_alloc_put(f->s, &g1));
    OK(store_alloc_put(f->s, &g2));
    event(f->s, "app.quota", "a1", "GPU-1", "cut", 1, 0, NULL);
    OK(store_commit(f->s));
    OK(store_begin(f->s)); /* a raise, rolled back */
    OK(store_alloc_delete_app(f->s, "a1"));
    g1.memory = 16ULL << 30;
    OK(store_alloc_put(f->s, &g1));
    OK(store_alloc_put(f->s, &g2));
    event(f->s, "app.quota", "a1", "GPU-1", "raise", 2, 0, NULL);
    store_rollback(f->s);
    OK(store_begin(f->s)); /* to know the watch has passed both */
    event(f->s, "marker", NULL, NULL, "after", 3, 0, NULL);
    OK(store_commit(f->s));
    fx_settle(f);
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){
                                     .kind = "app.quota"}),
                  "cut");
    ASSERT_RELOAD(f, "app a1 alice installed NULL {\"name\":\"x\"} NULL 1000 "
                     "2000 0 0 -1\n"
                     "alloc a1 alice nvidia n1 GPU-1 2147483648\n"
                     "alloc a1 alice nvidia n1 GPU-2 4294967296\n");
    fx_close(f);
}

/* A rolled-back transaction writes nothing, events included. */
static void rollback_writes_nothing(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct store_identity id = {"alice", 70001};
    struct store_limits l = {"alice", 1, 1};
    struct store_device dv = {"n1", "GPU-1", "Exclusive", NULL};
    struct store_node n = {"n1", true};

    OK(store_begin(f->s));
    put_app(f->s, "a1", "alice");
    put_alloc(f->s, "a1", "alice", "GPU-1");
    put_user(f->s, "alice", "member");
    OK(store_identity_put(f->s, &id));
    OK(store_limits_put(f->s, &l));
    OK(store_device_put(f->s, &dv));
    OK(store_node_put(f->s, &n));
    event(f->s, "app.state", "a1", NULL, "rolled", 1, 0, NULL);
    store_rollback(f->s);
    ASSERT_EQ(store_commit(f->s), ACCEL_EINVAL); /* no transaction */
    ASSERT_EQ(store_app_put(f->s, &(struct store_app){0}), ACCEL_EINVAL);
    store_rollback(f->s); /* twice: a no-op */

    /* an event after it, to know the watch has passed the rollback */
    OK(store_begin(f->s));
    event(f->s, "marker", NULL, NULL, "after", 2, 0, NULL);
    OK(store_commit(f->s));
    fx_settle(f);
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){0}), "after");
    ASSERT_RELOAD(f, "");
    /* the identity can still be taken: nothing of it was written */
    OK(store_begin(f->s));
    OK(store_identity_put(f->s, &id));
    OK(store_commit(f->s));
    fx_close(f);
}

/* A failed call rolls the transaction back: later writes (events too)
 * answer EINVAL until the next begin, which works without a rollback, and
 * nothing of it commits. */
static void failed_call_poisons_transaction(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct store_app bad = app_row(NULL, "alice", "installed");
    struct store_event late = {0, 3, "late", NULL, NULL, NULL, "late", NULL};
    struct store_user u = {"carol", "member", HASH_A, 5};

    OK(store_begin(f->s));
    put_app(f->s, "a1", "alice");
    event(f->s, "early", NULL, NULL, "early", 1, 0, NULL);
    ASSERT_EQ(store_app_put(f->s, &bad), ACCEL_EINVAL);
    ASSERT_EQ(store_user_put(f->s, &u), ACCEL_EINVAL);
    ASSERT_EQ(store_alloc_delete_app(f->s, "a1"), ACCEL_EINVAL);
    ASSERT_EQ(store_event_append(f->s, &late, 0, NULL), ACCEL_EINVAL);
    ASSERT_EQ(store_commit(f->s), ACCEL_EINVAL);
    /* the next begin starts afresh, no rollback needed */
    OK(store_begin(f->s));
    put_user(f->s, "bob", "member");
    event(f->s, "marker", NULL, NULL, "after", 4, 0, NULL);
    OK(store_commit(f->s));
    fx_settle(f);
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){0}), "after");
    ASSERT_RELOAD(f, "user bob member aaaaaaaa 5\n");

    /* the same after a failure of a required event field */
    OK(store_begin(f->s));
    put_user(f->s, "dave", "member");
    late.kind = NULL;
    ASSERT_EQ(store_event_append(f->s, &late, 0, NULL), ACCEL_EINVAL);
    ASSERT_EQ(store_user_put(f->s, &u), ACCEL_EINVAL);
    ASSERT_EQ(store_commit(f->s), ACCEL_EINVAL);
    store_rollback(f->s);
    ASSERT_EQ(store_event_append(f->s, &late, 0, NULL), ACCEL_EINVAL);
    ASSERT_RELOAD(f, "user bob member aaaaaaaa 5\n");
    fx_close(f);
}

/* A name keeps its uid and a uid its name: a second row for either is
 * ACCEL_ECONFLICT, in one transaction or across them, before and after a
 * reopen; the failure rolls back what came with it. */
static void identity_unique(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL), *g;
    struct store_identity a = {"alice", 70001}, a2 = {"alice", 70002};
    struct store_identity b = {"bob", 70001}, c = {"carol", 70003};
    struct store_identity d = {"dave", 70003}, z = {"zero", 0};

    OK(store_begin(f->s));
    OK(store_identity_put(f->s, &a));
    OK(store_commit(f->s));
    OK(store_begin(f->s));
    put_user(f->s, "alice", "member");
    ASSERT_EQ(store_identity_put(f->s, &a2), ACCEL_ECONFLICT);
    ASSERT_EQ(store_commit(f->s), ACCEL_EINVAL);
    OK(store_begin(f->s));
    ASSERT_EQ(store_identity_put(f->s, &b), ACCEL_ECONFLICT);
    store_rollback(f->s);
    OK(store_begin(f->s));
    OK(store_identity_put(f->s, &c));
    ASSERT_EQ(store_identity_put(f->s, &d), ACCEL_ECONFLICT);
    store_rollback(f->s);
    OK(store_begin(f->s));
    ASSERT_EQ(store_identity_put(f->s, &z), ACCEL_EINVAL);
    store_rollback(f->s);
    fx_settle(f);
    ASSERT_RELOAD(f, "identity alice 70001\n");

    g = fx_open(k, f->loc, "n2", NULL);
    fx_close(f);
    OK(store_begin(g->s));
    ASSERT_EQ(store_identity_put(g->s, &a2), ACCEL_ECONFLICT);
    store_rollback(g->s);
    OK(store_begin(g->s));
    ASSERT_EQ(store_identity_put(g->s, &b), ACCEL_ECONFLICT);
    store_rollback(g->s);
    OK(store_begin(g->s));
    OK(store_identity_put(g->s, &c));
    OK(store_commit(g->s));
    fx_settle(g);
    ASSERT_RELOAD(g, "identity alice 70001\nidentity carol 70003\n");
    fx_close(g);
}

/* A removed user's uid is retired (issue 25): the row is renamed, the
 * uid stays taken (for the same name too), the name is free for a fresh
 * uid; a retired name already taken is ACCEL_ECONFLICT and rolls back. */
static void identity_retire(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL), *g;
    struct store_identity a = {"alice", 70001}, b = {"bob", 70002};
    struct store_identity ra = {"~alice.70001", 70001};
    struct store_identity rb = {"~alice.70001", 70002};
    struct store_identity again = {"alice", 70001}, fresh = {"alice", 70000};

    OK(store_begin(f->s));
    OK(store_identity_put(f->s, &a));
    OK(store_identity_put(f->s, &b));
    OK(store_commit(f->s));
    OK(store_begin(f->s));
    OK(store_identity_retire(f->s, "alice", &ra));
    OK(store_commit(f->s));
    OK(store_begin(f->s));
    ASSERT_EQ(store_identity_put(f->s, &again), ACCEL_ECONFLICT);
    store_rollback(f->s);
    OK(store_begin(f->s));
    ASSERT_EQ(store_identity_retire(f->s, "bob", &rb), ACCEL_ECONFLICT);
    store_rollback(f->s);
    fx_settle(f);
    ASSERT_RELOAD(f, "identity ~alice.70001 70001\nidentity bob 70002\n");

    g = fx_open(k, f->loc, "n2", NULL);
    fx_close(f);
    OK(store_begin(g->s));
    ASSERT_EQ(store_identity_put(g->s, &again), ACCEL_ECONFLICT);
    store_rollback(g->s);
    OK(store_begin(g->s));
    OK(store_identity_put(g->s, &fresh));
    OK(store_commit(g->s));
    fx_settle(g);
    ASSERT_RELOAD(g, "identity alice 70000\nidentity ~alice.70001 70001\n"
                     "identity bob 70002\n");
    fx_close(g);
}

/* Events inside and outside transactions, every filter, id order; the
 * fields round-trip; a callback's code stops the query. */
static void events_query(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct evlist *l;
    int64_t id2;
    struct store_event nokind = {0, 1, NULL, NULL, NULL, NULL, "m", NULL};

    event(f->s, "k1", "a", "d1", "e1", 1000, 0, NULL); /* its own commit */
    OK(store_begin(f->s));
    event(f->s, "k2", "b", "d2", "e2", 2000, 0, NULL);
    event(f->s, "k2", "a", NULL, "e3", 3000, 0, NULL);
    OK(store_commit(f->s));
    event(f->s, "k1", NULL, "d1", "e4", 4000, 0, NULL);
    ASSERT_EQ(store_event_append(f->s, &nokind, 0, NULL), ACCEL_EINVAL);
    nokind = (struct store_event){0, 1, "k", NULL, NULL, NULL, NULL, NULL};
    ASSERT_EQ(store_event_append(f->s, &nokind, 0, NULL), ACCEL_EINVAL);
    fx_settle(f); /* what acceld does before it answers */

    l = query(f->s, (struct store_event_filter){0});
    ASSERT_EQ(l->n, 4);
    ASSERT_STR_EQ(l->line[0], "k1 a n1 d1 e1 1000 {\"k\":1}");
    ASSERT_STR_EQ(l->line[1], "k2 b n1 d2 e2 2000 {\"k\":1}");
    ASSERT_STR_EQ(l->line[2], "k2 a n1 NULL e3 3000 {\"k\":1}");
    ASSERT_STR_EQ(l->line[3], "k1 NULL n1 d1 e4 4000 {\"k\":1}");
    id2 = l->id[1];
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.since_id = id2}),
                  "e3 e4");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.app = "a"}),
                  "e1 e3");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.device = "d1"}),
                  "e1 e4");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.kind = "k2"}),
                  "e2 e3");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.limit = 2}),
                  "e1 e2");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.since_ms = 2500}),
                  "e3 e4");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.since_ms = 3000}),
                  "e3 e4");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.app = "a",
                                                             .kind = "k2"}),
                  "e3");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.app = "a",
                                                             .device = "d1"}),
                  "e1");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.kind = "k1",
                                                             .since_id = id2,
                                                             .limit = 1}),
                  "e4");
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){.app = "zz"}),
                  "");
    {
        struct evlist stop;
        memset(&stop, 0, sizeof stop);
        stop.stop_after = 2;
        ASSERT_EQ(store_events_query(f->s, &(struct store_event_filter){0},
                                     ev_take, &stop),
                  ACCEL_ERANGE);
        ASSERT_EQ(stop.n, 2);
    }
    /* a reopened store has them, with the same ids */
    {
        struct fx *g = fx_open(k, f->loc, "n2", NULL);
        struct evlist *m = query(g->s, (struct store_event_filter){0});
        ASSERT_EQ(m->n, 4);
        ASSERT_EQ(m->id[1], id2);
        ASSERT_STR_EQ(m->line[3], "k1 NULL n1 d1 e4 4000 {\"k\":1}");
        fx_close(g);
    }
    fx_close(f);
}

/* An event appended outside a transaction is a commit of its own: once
 * store_sync has returned (acceld answers after it), a query shows it. */
static void event_alone_is_synced(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    event(f->s, "k", NULL, NULL, "alone", 1, 0, NULL);
    fx_settle(f);
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){0}), "alone");
    event(f->s, "k", NULL, NULL, "again", 2, 0, NULL);
    fx_settle(f);
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){0}),
                  "alone again");
    fx_close(f);
}

/* Event ids, as each backend documents them. */
static void event_ids(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    int64_t i1 = -1, i2 = -1, i3 = -1;
    struct evlist *l;

    event(f->s, "k", NULL, NULL, "e1", 1, 0, &i1);
    OK(store_begin(f->s));
    event(f->s, "k", NULL, NULL, "e2", 2, 0, &i2);
    event(f->s, "k", NULL, NULL, "e3", 3, 0, &i3);
    OK(store_commit(f->s));
    if (k == K_SQLITE) {
        /* 1, 2, 3, returned by the append and shown at once */
        ASSERT_EQ(i1, 1);
        ASSERT_EQ(i2, 2);
        ASSERT_EQ(i3, 3);
        l = query(f->s, (struct store_event_filter){0});
        ASSERT_EQ(l->n, 3);
        ASSERT_EQ(l->id[0], 1);
        ASSERT_EQ(l->id[2], 3);
    } else {
        /* known once the watch delivers them: the append says 0 and the
         * view does not have them until the follower applied them */
        ASSERT_EQ(i1, 0);
        ASSERT_EQ(i2, 0);
        ASSERT_EQ(i3, 0);
        ASSERT_EQ(query(f->s, (struct store_event_filter){0})->n, 0);
        fx_settle(f);
        l = query(f->s, (struct store_event_filter){0});
        ASSERT_EQ(l->n, 3);
        /* revision * 1024 + rank within the revision */
        ASSERT_EQ(l->id[0] % 1024, 0);
        ASSERT_EQ(l->id[1] % 1024, 0);
        ASSERT_EQ(l->id[2], l->id[1] + 1);
        ASSERT_GT(l->id[1] / 1024, l->id[0] / 1024);
        ASSERT(strstr(f->seen.buf, "event k e1\nevent k e2\nevent k e3\n"));
    }
    fx_close(f);
}

/* keep_max: the newest are kept, at most keep_max + 63, by the store
 * that appends and in what a reopened store loads. */
/* 80 events "e00".."e79" in 8 transactions of 10, each kept newest 10
 * (pruned beyond: store.h). */
static void append_80(struct fx *f)
{
    char msg[16];
    for (int t = 0; t < 8; t++) {
        OK(store_begin(f->s));
        for (int i = 0; i < 10; i++) {
            snprintf(msg, sizeof msg, "e%02d", t * 10 + i);
            event(f->s, "k", NULL, NULL, msg, t * 10 + i, 10, NULL);
        }
        OK(store_commit(f->s));
    }
}

static void events_pruned(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL), *g;
    struct evlist *l;

    store_set_housekeeper(f->s, true); /* etcd: the one that prunes */
    append_80(f);
    fx_settle(f);
    l = query(f->s, (struct store_event_filter){0});
    ASSERT_GE(l->n, 10);
    ASSERT_LE(l->n, 10 + 63);
    ASSERT(strstr(l->line[l->n - 1], " e79 "));
    ASSERT(strstr(l->line[l->n - 10], " e70 "));
    ASSERT(!strstr(l->line[0], " e00 "));
    g = fx_open(k, f->loc, "n2", NULL);
    fx_close(f);
    l = query(g->s, (struct store_event_filter){0});
    ASSERT_GE(l->n, 10);
    ASSERT_LE(l->n, 10 + 63);
    ASSERT(strstr(l->line[l->n - 1], " e79 "));
    fx_close(g);
}

/* ------------------------------------------------ writing underneath */

static struct etcd *raw_etcd(void)
{
    struct etcd_opts o = {.endpoints = endpoints(), .timeout_ms = 5000};
    struct etcd *e = NULL;
    char *cause = NULL;
    if (etcd_open(&o, &e, &cause) != ACCEL_OK)
        FAIL_AT_("etcd_open: %s", S_(cause));
    return e;
}

static void raw_put(const char *prefix, const char *key, const char *value)
{
    struct etcd *e = raw_etcd();
    char *k = xasprintf("%s%s", prefix, key);
    struct etcd_op op = {ETCD_PUT, k, value, strlen(value), 0};
    bool ok = false;
    OK(etcd_txn(e, NULL, 0, &op, 1, &ok, NULL, NULL));
    ASSERT(ok);
    free(k);
    etcd_close(e);
}

/* The value of prefix+key ("" when absent: *mod 0); mod may be NULL. */
static char *raw_get(const char *prefix, const char *key, int64_t *mod)
{
    struct etcd *e = raw_etcd();
    char *k = xasprintf("%s%s", prefix, key), *v;
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    OK(etcd_get(e, k, false, 0, &kvs, &n, NULL));
    v = xstrdup(n ? kvs[0].value : "");
    if (mod)
        *mod = n ? kvs[0].mod_rev : 0;
    etcd_kvs_free(kvs, n);
    free(k);
    etcd_close(e);
    return v;
}

static void raw_sql(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    ASSERT_EQ(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        FAIL_AT_("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
}

static int64_t raw_sql_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    ASSERT_EQ(sqlite3_open(path, &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Open loc and load it with l: the code, *cause (caller frees). */
static enum accel_err try_load(enum kind k, const char *loc,
                               const struct store_loader *l, char **cause)
{
    struct store *s = NULL;
    enum accel_err err = open_at(k, loc, "n1", &s, cause);
    if (err != ACCEL_OK)
        FAIL_AT_("open %s: %s: %s", loc, accel_err_name(err), S_(*cause));
    err = store_load(s, l, cause);
    store_close(s);
    return err;
}

#define ASSERT_HAS(text, part)                                                 \
    do {                                                                       \
        const char *t_ = (text);                                               \
        if (t_ == NULL || strstr(t_, (part)) == NULL)                          \
            FAIL_AT_("\"%s\" is not in \"%s\"", (part), S_(t_));               \
    } while (0)

/* Undecodable rows (an unknown role, an app that does not decode and its
 * allocation, an event that does not) and a row the daemon's callback
 * refuses: refused, each named, nothing changed; with repair, dropped
 * with a "store.repair" event that lists them. */
static void undecodable_rows(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    char *loc = xstrdup(f->loc), *cause = NULL;
    struct dump d = {0};
    struct store_loader l = loader_of(&d, false);
    struct evlist *ev;

    OK(store_begin(f->s));
    put_app(f->s, "good", "alice");
    put_alloc(f->s, "good", "alice", "GPU-1");
    put_user(f->s, "alice", "member");
    OK(store_commit(f->s));
    fx_settle(f);
    fx_close(f);

    /* the daemon refuses a row: the app and its allocation */
    d.refuse_app = "good";
    ASSERT_EQ(try_load(k, loc, &l, &cause), ACCEL_ESTORE_CORRUPT);
    ASSERT_HAS(cause, "the daemon refuses it");
    ASSERT(strstr(d.r.buf, "alloc good") == NULL);
    free(cause);
    d = (struct dump){0};

    if (k == K_SQLITE) {
        raw_sql(loc, "INSERT INTO users VALUES ('mallory', 'root', '" HASH_A
                     "', 1);"
                     "INSERT INTO apps (name, owner, state, manifest,"
                     " created_ms, updated_ms) VALUES ('broken', 'alice',"
                     " 'installed', '{}', 'soon', 0);"
                     "INSERT INTO allocations VALUES ('broken', 'alice',"
                     " 'nvidia', 'n1', 'GPU-9', 0);"
                     "INSERT INTO events (ts_ms, kind, message, data)"
                     " VALUES (1, 'k', 'm', '[1]');");
    } else {
        raw_put(loc, "users/mallory",
                "{\"name\":\"mallory\",\"role\":\"root\",\"tokenHash\":\"" HASH_A
                "\",\"createdMs\":1}");
        raw_put(loc, "apps/broken", "{\"name\":\"broken\"");
        raw_put(loc, "allocs/broken/GPU-9",
                "{\"app\":\"broken\",\"owner\":\"alice\",\"type\":\"nvidia\","
                "\"node\":\"n1\",\"device\":\"GPU-9\",\"memory\":0}");
        raw_put(loc, "events/n7/0000000000000001", "not json");
    }
    for (int i = 0; i < 2; i++) { /* refused, and the same again */
        ASSERT_EQ(try_load(k, loc, &l, &cause), ACCEL_ESTORE_CORRUPT);
        ASSERT_HAS(cause, "mallory");
        ASSERT_HAS(cause, "broken");
        ASSERT_HAS(cause, "GPU-9");
        ASSERT_HAS(cause, "events");
        ASSERT_HAS(cause, "--repair");
        ASSERT(strstr(d.r.buf, "mallory") == NULL);
        ASSERT(strstr(d.r.buf, "broken") == NULL);
        free(cause);
        d = (struct dump){0};
    }

    /* repair: dropped, said, and an event */
    {
        struct fx *g = xcalloc(1, sizeof(*g));
        l.repair = true;
        g->kind = k;
        g->loc = xstrdup(loc);
        pthread_mutex_init(&g->mu, NULL);
        pthread_mutex_lock(&g->mu);
        OK(open_at(k, loc, "n1", &g->s, &cause));
        OK(store_load(g->s, &l, &cause));
        ASSERT_HAS(cause, "dropped 4 undecodable");
        ASSERT_HAS(cause, "mallory");
        free(cause);
        fx_follow(g);
        fx_settle(g);
        ev = query(g->s, (struct store_event_filter){.kind = "store.repair"});
        ASSERT_EQ(ev->n, 1);
        ASSERT_HAS(ev->line[0], "dropped 4 undecodable");
        ASSERT_HAS(ev->line[0], "{\"dropped\":[");
        ASSERT_HAS(ev->line[0], "GPU-9");
        fx_close(g);
    }
    ASSERT_RELOAD_AT(k, loc,
                     "app good alice installed NULL {\"name\":\"x\"} NULL 1000 "
                     "2000 0 0 -1\n"
                     "alloc good alice nvidia n1 GPU-1 0\n"
                     "user alice member aaaaaaaa 5\n");
    free(loc);
}

/* An allocation whose app has no row: refused; with repair, dropped. */
static void orphan_alloc(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    char *loc = xstrdup(f->loc), *cause = NULL;
    struct dump d = {0};
    struct store_loader l = loader_of(&d, false);

    OK(store_begin(f->s));
    put_user(f->s, "alice", "member");
    OK(store_commit(f->s));
    fx_settle(f);
    fx_close(f);
    if (k == K_SQLITE)
        raw_sql(loc, "INSERT INTO allocations VALUES ('ghost', 'alice',"
                     " 'nvidia', 'n1', 'GPU-9', 0);");
    else
        raw_put(loc, "allocs/ghost/GPU-9",
                "{\"app\":\"ghost\",\"owner\":\"alice\",\"type\":\"nvidia\","
                "\"node\":\"n1\",\"device\":\"GPU-9\",\"memory\":0}");
    ASSERT_EQ(try_load(k, loc, &l, &cause), ACCEL_ESTORE_CORRUPT);
    ASSERT_HAS(cause, "ghost");
    ASSERT(strstr(d.r.buf, "ghost") == NULL);
    free(cause);
    d = (struct dump){0};
    l.repair = true;
    OK(try_load(k, loc, &l, &cause));
    ASSERT_HAS(cause, "dropped 1 undecodable");
    free(cause);
    ASSERT_RELOAD_AT(k, loc, "user alice member aaaaaaaa 5\n");
    free(loc);
}

/* The layout a fresh store records; a newer one and another program's
 * data refused and left as they are. */
static void newer_and_foreign(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    char *loc = xstrdup(f->loc), *cause = NULL, *v;
    struct store *s = NULL;
    char *other = fresh_loc(k), *junk = fresh_loc(k);

    fx_close(f);
    if (k == K_SQLITE) {
        char *sql = xasprintf("PRAGMA user_version = %d",
                              store_schema_version() + 1);
        ASSERT_EQ(raw_sql_int(loc, "PRAGMA user_version"),
                  store_schema_version());
        raw_sql(loc, sql);
        free(sql);
        raw_sql(other, "CREATE TABLE t (x); INSERT INTO t VALUES (1)");
        {
            FILE *fp = fopen(junk, "w");
            ASSERT(fp != NULL);
            fputs("this is not a database, it only sits where one would\n",
                  fp);
            for (int i = 0; i < 8; i++)
                fputs("padding padding padding padding padding\n", fp);
            fclose(fp);
        }
    } else {
        v = raw_get(loc, "meta/schema", NULL);
        ASSERT_STR_EQ(v, "1");
        free(v);
        raw_put(loc, "meta/schema", "2");
        raw_put(other, "somebody/else", "1");
        raw_put(junk, "meta/schema", "one");
    }
    ASSERT_EQ(open_at(k, loc, "n1", &s, &cause), ACCEL_ESTORE_NEWER);
    ASSERT_HAS(cause, "newer");
    free(cause);
    ASSERT_EQ(open_at(k, other, "n1", &s, &cause), ACCEL_ESTORE_CORRUPT);
    ASSERT(cause != NULL);
    free(cause);
    ASSERT_EQ(open_at(k, junk, "n1", &s, &cause), ACCEL_ESTORE_CORRUPT);
    ASSERT(cause != NULL);
    free(cause);
    /* left as they were */
    if (k == K_SQLITE) {
        ASSERT_EQ(raw_sql_int(loc, "PRAGMA user_version"),
                  store_schema_version() + 1);
        ASSERT_EQ(raw_sql_int(other, "SELECT count(*) FROM sqlite_master"),
                  1);
    } else {
        v = raw_get(loc, "meta/schema", NULL);
        ASSERT_STR_EQ(v, "2");
        free(v);
        v = raw_get(other, "meta/schema", NULL);
        ASSERT_STR_EQ(v, "");
        free(v);
        v = raw_get(junk, "meta/schema", NULL);
        ASSERT_STR_EQ(v, "one");
        free(v);
    }
    free(loc);
    free(other);
    free(junk);
}

/* ============================================================ etcd */

/* Two stores on one prefix: a write of a row the other has not seen yet
 * makes its guarded commit fail whole with ACCEL_ECONFLICT; after waiting
 * for the revision the follower has handed the change over, and the
 * decision made again commits. A store is never handed its own writes. */
static void etcd_guarded_commit(void)
{
    struct fx *a = fx_open(K_ETCD, NULL, "n1", NULL);
    struct fx *b = fx_open(K_ETCD, a->loc, "n2", NULL);
    struct store_app x = app_row("x", "alice", "installed");
    int64_t rev, mod;
    char *v;

    OK(store_begin(a->s));
    OK(store_app_put(a->s, &x));
    OK(store_commit(a->s));

    x.state = "running";
    OK(store_begin(b->s));
    OK(store_app_put(b->s, &x));
    put_user(b->s, "bob", "member");
    ASSERT_EQ(store_commit(b->s), ACCEL_ECONFLICT);
    rev = store_conflict_rev(b->s);
    ASSERT_GT(rev, 0);
    ASSERT_EQ(store_commit(b->s), ACCEL_EINVAL); /* it is over */
    v = raw_get(a->loc, "apps/x", NULL);
    ASSERT_HAS(v, "\"installed\"");
    free(v);
    v = raw_get(a->loc, "users/bob", NULL);
    ASSERT_STR_EQ(v, ""); /* nothing of it was written */
    free(v);

    OK(fx_wait_rev(b, rev));
    ASSERT_HAS(b->seen.buf, "app x installed\n");
    OK(store_begin(b->s));
    OK(store_app_put(b->s, &x));
    put_user(b->s, "bob", "member");
    OK(store_commit(b->s));
    fx_settle(b);
    ASSERT(strstr(b->seen.buf, "app x running") == NULL);

    v = raw_get(a->loc, "apps/x", &mod);
    free(v);
    OK(fx_wait_rev(a, mod));
    ASSERT_STR_EQ(a->seen.buf, "app x running\nuser bob member\n");

    /* a delete, the other way round */
    OK(store_begin(a->s));
    OK(store_app_delete(a->s, "x"));
    OK(store_commit(a->s));
    fx_settle(a);
    {
        /* b learns of it through its watch: the progress of its view */
        int64_t now = 0;
        struct etcd *e = raw_etcd();
        struct etcd_kv *kvs = NULL;
        size_t n = 0;
        OK(etcd_get(e, a->loc, true, 0, &kvs, &n, &now));
        etcd_kvs_free(kvs, n);
        etcd_close(e);
        OK(fx_wait_rev(b, now));
    }
    ASSERT_HAS(b->seen.buf, "app x deleted\n");
    ASSERT(strstr(a->seen.buf, "deleted") == NULL);
    fx_close(a);
    fx_close(b);
}

/* The allocation guards: another store's allocation on the same device
 * (devalloc/<device>) or by the same owner (ownalloc/<owner>) makes a
 * stale one fail; one on another device by another owner does not; a
 * device's mode switch is guarded by its allocations. */
static void etcd_alloc_guards(void)
{
    struct fx *a = fx_open(K_ETCD, NULL, "n1", NULL);
    struct fx *b = fx_open(K_ETCD, a->loc, "n2", NULL);
    struct store_device dv = {"n1", "GPU-0", "MemorySlice", NULL};
    int64_t rev;

    OK(store_begin(a->s));
    put_alloc(a->s, "app1", "u1", "GPU-0");
    OK(store_commit(a->s));

    OK(store_begin(b->s));
    put_alloc(b->s, "app2", "u2", "GPU-0");
    ASSERT_EQ(store_commit(b->s), ACCEL_ECONFLICT);
    rev = store_conflict_rev(b->s);
    ASSERT_GT(rev, 0);
    OK(store_begin(b->s));
    put_alloc(b->s, "app2", "u2", "GPU-1");
    OK(store_commit(b->s));
    OK(store_begin(b->s));
    put_alloc(b->s, "app3", "u1", "GPU-2");
    ASSERT_EQ(store_commit(b->s), ACCEL_ECONFLICT);
    OK(store_begin(b->s));
    OK(store_device_put(b->s, &dv));
    ASSERT_EQ(store_commit(b->s), ACCEL_ECONFLICT);
    /* a is as stale about GPU-1 now */
    OK(store_begin(a->s));
    put_alloc(a->s, "app4", "u4", "GPU-1");
    ASSERT_EQ(store_commit(a->s), ACCEL_ECONFLICT);
    OK(store_begin(a->s));
    put_alloc(a->s, "app4", "u4", "GPU-3");
    OK(store_commit(a->s));

    /* once b's view has a's allocation, its decisions go through */
    OK(fx_wait_rev(b, rev));
    ASSERT_HAS(b->seen.buf, "alloc app1/GPU-0 u1\n");
    OK(store_begin(b->s));
    put_alloc(b->s, "app3", "u1", "GPU-2");
    OK(store_device_put(b->s, &dv));
    OK(store_commit(b->s));
    /* and a release by b is an allocation change a must see first */
    OK(store_begin(b->s));
    OK(store_alloc_delete(b->s, "app1", "GPU-0"));
    OK(store_commit(b->s));
    fx_settle(b);
    OK(store_begin(a->s));
    put_alloc(a->s, "app5", "u5", "GPU-0");
    ASSERT_EQ(store_commit(a->s), ACCEL_ECONFLICT);
    OK(fx_wait_rev(a, store_conflict_rev(a->s)));
    ASSERT_HAS(a->seen.buf, "alloc app1/GPU-0 deleted\n");
    OK(store_begin(a->s));
    put_alloc(a->s, "app5", "u5", "GPU-0");
    OK(store_commit(a->s));
    fx_settle(a);
    /* what etcd holds (no app rows here: a load would refuse these) */
    {
        static const char *const keys[] = {
            "allocs/app2/GPU-1", "allocs/app3/GPU-2", "allocs/app4/GPU-3",
            "allocs/app5/GPU-0", "devices/GPU-0",     "allocs/app1/GPU-0",
            "allocs/app2/GPU-0", "allocs/app4/GPU-1"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            char *v = raw_get(a->loc, keys[i], NULL);
            if ((v[0] != '\0') != (i < 5))
                FAIL_AT_("%s: \"%s\"", keys[i], v);
            free(v);
        }
    }
    fx_close(a);
    fx_close(b);
}

/* The bynode index (docs/cluster.md, "Roles"): every transaction that
 * writes an app's rows writes bynode/<node>/<app> for each node the app is
 * bound to afterwards and deletes it for each node it left, whoever
 * writes (another store, which knows the devices' nodes from the rows it
 * loaded), with no call of the caller's. */
static void etcd_bynode_index(void)
{
    struct fx *a = fx_open(K_ETCD, NULL, "n1", NULL);
    struct fx *b;
    struct store_alloc on2 = {"x", "u1", "nvidia", "n2", "GPU-9", 0};
    int64_t m1 = 0, m2 = 0;
    char *v;

    OK(store_begin(a->s));
    put_app(a->s, "x", "u1");
    OK(store_commit(a->s));
    v = raw_get(a->loc, "bynode/n1/x", NULL);
    ASSERT_STR_EQ(v, ""); /* installed, bound nowhere */
    free(v);
    OK(store_begin(a->s));
    put_alloc(a->s, "x", "u1", "GPU-0");
    OK(store_alloc_put(a->s, &on2));
    OK(store_commit(a->s));
    v = raw_get(a->loc, "bynode/n1/x", &m1);
    ASSERT_STR_EQ(v, "{\"app\":\"x\"}");
    free(v);
    free(raw_get(a->loc, "bynode/n2/x", &m2));
    ASSERT_GT(m2, 0);
    /* a write of the app row alone rewrites both: what wakes the agents */
    OK(store_begin(a->s));
    put_app(a->s, "x", "u1");
    OK(store_commit(a->s));
    {
        int64_t n1 = 0, n2 = 0;
        free(raw_get(a->loc, "bynode/n1/x", &n1));
        free(raw_get(a->loc, "bynode/n2/x", &n2));
        ASSERT_GT(n1, m1);
        ASSERT_EQ(n1, n2);
    }
    /* another store, which loaded the rows, releases GPU-9: n2's key goes
     * with its last allocation there, n1's stays */
    b = fx_open(K_ETCD, a->loc, "n2", NULL);
    OK(store_begin(b->s));
    OK(store_alloc_delete(b->s, "x", "GPU-9"));
    OK(store_commit(b->s));
    v = raw_get(a->loc, "bynode/n2/x", NULL);
    ASSERT_STR_EQ(v, "");
    free(v);
    v = raw_get(a->loc, "bynode/n1/x", NULL);
    ASSERT_STR_EQ(v, "{\"app\":\"x\"}");
    free(v);
    /* the app deleted: its last key goes with it */
    fx_settle(b);
    OK(fx_wait_rev(a, store_view_rev(b->s)));
    OK(store_begin(a->s));
    OK(store_alloc_delete_app(a->s, "x"));
    OK(store_app_delete(a->s, "x"));
    OK(store_commit(a->s));
    v = raw_get(a->loc, "bynode/n1/x", NULL);
    ASSERT_STR_EQ(v, "");
    free(v);
    fx_close(a);
    fx_close(b);
}

/* A transaction past etcd's limit of operations (its index writes
 * counted) is refused before it is sent: ACCEL_ETOOBIG, a message that
 * says so, nothing written, and the store takes the next one. */
static void etcd_too_big_is_refused_whole(void)
{
    struct fx *f = fx_open(K_ETCD, NULL, "n1", NULL);
    char name[32];
    char *v;

    OK(store_begin(f->s));
    for (int i = 0; i < 64; i++) { /* 64 rows: 64 operations */
        snprintf(name, sizeof name, "a%d", i);
        put_app(f->s, name, "u1");
    }
    /* their allocations and their index keys: 128 more, where the
     * rows alone were well within */
    for (int i = 0; i < 64; i++) {
        snprintf(name, sizeof name, "a%d", i);
        put_alloc(f->s, name, "u1", "GPU-0");
    }
    ASSERT_EQ(store_commit(f->s), ACCEL_ETOOBIG);
    ASSERT(strstr(store_errmsg(f->s), "at most 128"));
    v = raw_get(f->loc, "apps/a0", NULL);
    ASSERT_STR_EQ(v, "");
    free(v);
    OK(store_begin(f->s));
    put_app(f->s, "a0", "u1");
    OK(store_commit(f->s));
    v = raw_get(f->loc, "apps/a0", NULL);
    ASSERT(strstr(v, "\"a0\""));
    free(v);
    fx_close(f);
}

/* The watch decodes a change before it takes the follower's lock (issue
 * 51): an app row whose key was just created goes to app_early without
 * the lock, then to app under it; a later change of the row does not go
 * to app_early; a key created again after its delete does; a node's
 * registration comes parsed. An agent's view hands an app row its index
 * brings to app_early, without the lock too, the first time (not at
 * each later write of the app), and the registration of a node that a
 * row names and the agent has not met, before that row. */
static char *early_of(struct fx *f)
{
    char *t;
    pthread_mutex_lock(&f->pmu);
    t = xstrdup(f->early.buf);
    pthread_mutex_unlock(&f->pmu);
    return t;
}

#define ASSERT_EARLY(f, want)                                                  \
    do {                                                                       \
        char *t_ = early_of(f);                                                \
        ASSERT_STR_EQ(t_, want);                                               \
        free(t_);                                                              \
    } while (0)

/* f's view has what g committed. */
static void fx_caught_up(struct fx *f, struct fx *g)
{
    fx_settle(g);
    OK(fx_wait_rev(f, store_view_rev(g->s)));
}

static void put_row_of(struct fx *f, struct store_app *x)
{
    OK(store_begin(f->s));
    OK(store_app_put(f->s, x));
    OK(store_commit(f->s));
}

static void etcd_decoded_off_the_lock(void)
{
    struct fx *a = fx_open(K_ETCD, NULL, "n1", NULL);
    struct fx *b = fx_open(K_ETCD, a->loc, "n2", NULL);
    struct fx *c;
    struct store_app x = app_row("x", "alice", "installed");
    struct store_alloc on3 = {"z", "u1", "nvidia", "n3", "GPU-3", 0};
    struct store_alloc on4 = {"z", "u1", "nvidia", "n4", "GPU-4", 0};
    struct store_app z = app_row("z", "u1", "running");

    put_row_of(b, &x);
    fx_caught_up(a, b);
    x.state = "running";
    put_row_of(b, &x);
    fx_caught_up(a, b);
    ASSERT_STR_EQ(a->seen.buf, "app x installed\napp x running\n");
    ASSERT_EARLY(a, "early x installed without the lock\n");

    /* deleted and created again: a new key to the watch */
    OK(store_begin(b->s));
    OK(store_app_delete(b->s, "x"));
    OK(store_commit(b->s));
    x.state = "stopped";
    put_row_of(b, &x);
    fx_caught_up(a, b);
    ASSERT_STR_EQ(a->seen.buf, "app x installed\napp x running\n"
                               "app x deleted\napp x stopped\n");
    ASSERT_EARLY(a, "early x installed without the lock\n"
                    "early x stopped without the lock\n");

    /* a registration, parsed before the lock */
    OK(store_member_put(b->s, "nodeinfo", "n2", "{\"devices\":[]}", 0));
    fx_caught_up(a, b);
    ASSERT_EARLY(a, "early x installed without the lock\n"
                    "early x stopped without the lock\n"
                    "nodeinfo n2 parsed\n");

    /* an agent of n3: the row of an app bound there, early, once bound */
    open_agent = true;
    c = fx_open(K_ETCD, a->loc, "n3", NULL);
    OK(store_begin(a->s));
    put_app(a->s, "z", "u1");
    OK(store_alloc_put(a->s, &on3));
    OK(store_commit(a->s));
    fx_caught_up(c, a);
    ASSERT_STR_EQ(c->seen.buf, "app z installed\nalloc z/GPU-3 u1\n");
    ASSERT_EARLY(c, "early z installed without the lock\n");
    /* a later write of z: its row again, not decoded early again */
    put_row_of(a, &z);
    fx_caught_up(c, a);
    ASSERT_STR_EQ(c->seen.buf, "app z installed\nalloc z/GPU-3 u1\n"
                               "app z running\n");
    ASSERT_EARLY(c, "early z installed without the lock\n");
    /* n4 registers after the agent loaded; z is bound to its card too:
     * n4's registration comes first, then the row that names it, and
     * only once */
    OK(store_member_put(a->s, "nodeinfo", "n4", "{\"devices\":[]}", 0));
    OK(store_begin(a->s));
    OK(store_alloc_put(a->s, &on4));
    OK(store_commit(a->s));
    fx_caught_up(c, a);
    z.state = "stopped";
    put_row_of(a, &z);
    fx_caught_up(c, a);
    ASSERT_STR_EQ(c->seen.buf, "app z installed\nalloc z/GPU-3 u1\n"
                               "app z running\nnode n4\n"
                               "alloc z/GPU-4 u1\napp z stopped\n");
    ASSERT_EARLY(c, "early z installed without the lock\n"
                    "nodeinfo n4 parsed\n");
    fx_close(c);
    fx_close(b);
    fx_close(a);
}

/* ====================================================== threads */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* What another thread did while the test thread's transaction was open. */
struct other {
    struct fx *f;
    int rounds;          /* stand-alone writes to make */
    enum accel_err put;  /* its row write */
    enum accel_err ev;   /* its events (the first failure, or OK) */
    enum accel_err member;
    int started;         /* atomic: the row write is done */
};

static void *other_main(void *arg)
{
    struct other *o = arg;
    struct store_app a = app_row("theirs", "bob", "installed");
    struct store_event e = {0, 3, "own", NULL, "n1", NULL, "other", NULL};
    o->put = store_app_put(o->f->s, &a);
    __atomic_store_n(&o->started, 1, __ATOMIC_SEQ_CST);
    o->ev = o->member = ACCEL_OK;
    for (int i = 0; i < o->rounds; i++) {
        enum accel_err err = store_event_append(o->f->s, &e, 0, NULL);
        if (o->ev == ACCEL_OK)
            o->ev = err;
        if (o->f->kind != K_ETCD)
            continue;
        err = store_member_put(o->f->s, "agents", "n7", "{\"beat\":1}", 0);
        if (o->member == ACCEL_OK)
            o->member = err;
    }
    return NULL;
}

/*
 * A transaction belongs to the thread that began it (store.h, issue 48):
 * another thread's row write is refused, not joined; its event (and, on
 * etcd, its member key, as the keeper's beat) is a transaction of its own
 * that the open one's rollback does not take with it. On etcd the other
 * thread is done before the rollback (its writes go beside the open
 * transaction); on SQLite it waits for the transaction to end.
 */
static void tx_belongs_to_its_thread(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct other o = {.f = f, .rounds = 1};
    pthread_t th;

    OK(store_begin(f->s));
    put_app(f->s, "mine", "alice");
    ASSERT_EQ(pthread_create(&th, NULL, other_main, &o), 0);
    if (k == K_ETCD) {
        ASSERT_EQ(pthread_join(th, NULL), 0);
    } else {
        while (!__atomic_load_n(&o.started, __ATOMIC_SEQ_CST))
            sleep_ms(1);
        sleep_ms(100); /* its event waits for the slot meanwhile */
    }
    store_rollback(f->s);
    if (k != K_ETCD)
        ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(o.put, ACCEL_EINVAL);
    OK(o.ev);
    OK(o.member);
    fx_settle(f);
    ASSERT_STR_EQ(messages(f->s, (struct store_event_filter){0}), "other");
    ASSERT_RELOAD(f, "");
    if (k == K_ETCD) {
        char *v = raw_get(f->loc, "agents/n7", NULL);
        ASSERT_STR_EQ(v, "{\"beat\":1}");
        free(v);
    }

    /* and a commit of the owner's takes its own writes only */
    o = (struct other){.f = f, .rounds = 1};
    OK(store_begin(f->s));
    put_app(f->s, "mine", "alice");
    event(f->s, "tx", NULL, NULL, "mine", 4, 0, NULL);
    ASSERT_EQ(pthread_create(&th, NULL, other_main, &o), 0);
    if (k == K_ETCD)
        ASSERT_EQ(pthread_join(th, NULL), 0);
    OK(store_commit(f->s));
    if (k != K_ETCD)
        ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(o.put, ACCEL_EINVAL);
    OK(o.ev);
    fx_settle(f);
    ASSERT_EQ(query(f->s, (struct store_event_filter){.kind = "own"})->n, 2);
    ASSERT_EQ(query(f->s, (struct store_event_filter){.kind = "tx"})->n, 1);
    ASSERT_RELOAD(f, "app mine alice installed NULL {\"name\":\"x\"} NULL "
                     "1000 2000 0 0 -1\n");
    fx_close(f);
}

/* Stand-alone writes of another thread, many, while this one commits
 * transactions: every write of both lands, each where it belongs (and
 * the sanitizers' builds see no race). */
static void own_writes_beside_transactions(enum kind k)
{
    struct fx *f = fx_open(k, NULL, NULL, NULL);
    struct other o = {.f = f, .rounds = 120};
    char want[4096] = "", name[32];
    pthread_t th;

    ASSERT_EQ(pthread_create(&th, NULL, other_main, &o), 0);
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "a%02d", i);
        OK(store_begin(f->s));
        put_app(f->s, name, "alice");
        event(f->s, "tx", NULL, NULL, name, 5, 0, NULL);
        OK(store_commit(f->s));
        snprintf(want + strlen(want), sizeof want - strlen(want),
                 "app %s alice installed NULL {\"name\":\"x\"} NULL 1000 "
                 "2000 0 0 -1\n", name);
    }
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(o.put, ACCEL_EINVAL); /* none of this thread's was open, or
                                     * another's: never joined */
    OK(o.ev);
    OK(o.member);
    fx_settle(f);
    ASSERT_EQ(query(f->s, (struct store_event_filter){.kind = "own"})->n, 120);
    ASSERT_EQ(query(f->s, (struct store_event_filter){.kind = "tx"})->n, 40);
    ASSERT_RELOAD(f, want);
    fx_close(f);
}

/* ============================================================ list */

#define BOTH(fn)                                                               \
    TEST(fn##_sqlite) { fn(K_SQLITE); }                                        \
    TEST(fn##_etcd) { fn(K_ETCD); }

/* Issue 51: a cluster store that is not the housekeeper trims its own
 * copy of the events but deletes none of their keys: one node prunes for
 * all, not N. */
static void events_pruned_once_etcd(void)
{
    struct fx *f = fx_open(K_ETCD, NULL, NULL, NULL);
    struct evlist *l;
    struct etcd *e = raw_etcd();
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    char *pre;

    append_80(f);
    fx_settle(f);
    l = query(f->s, (struct store_event_filter){0});
    ASSERT_LE(l->n, 10 + 63);
    pre = xasprintf("%sevents/", f->loc);
    OK(etcd_get(e, pre, true, 0, &kvs, &n, NULL));
    ASSERT_EQ(n, 80);
    etcd_kvs_free(kvs, n);
    free(pre);
    etcd_close(e);
    fx_close(f);
}

BOTH(rows_round_trip)
BOTH(insert_or_replace)
BOTH(deletes)
BOTH(delete_loaded)
BOTH(rollback_writes_nothing)
BOTH(quota_replaced_in_one_transaction)
BOTH(failed_call_poisons_transaction)
BOTH(identity_unique)
BOTH(identity_retire)
BOTH(events_query)
BOTH(event_alone_is_synced)
BOTH(event_ids)
BOTH(events_pruned)
BOTH(undecodable_rows)
BOTH(orphan_alloc)
BOTH(newer_and_foreign)
BOTH(tx_belongs_to_its_thread)
BOTH(own_writes_beside_transactions)
TEST(etcd_guarded_commit) { etcd_guarded_commit(); }
TEST(events_pruned_once_etcd) { events_pruned_once_etcd(); }
TEST(etcd_alloc_guards) { etcd_alloc_guards(); }
TEST(etcd_bynode_index) { etcd_bynode_index(); }
TEST(etcd_decoded_off_the_lock) { etcd_decoded_off_the_lock(); }
TEST(etcd_too_big_is_refused_whole) { etcd_too_big_is_refused_whole(); }

#define PAIR_(XX, fn) XX(fn##_sqlite) XX(fn##_etcd)
#define TEST_LIST(XX)                                                          \
    PAIR_(XX, rows_round_trip)                                                 \
    PAIR_(XX, insert_or_replace)                                               \
    PAIR_(XX, deletes)                                                         \
    PAIR_(XX, delete_loaded)                                                   \
    PAIR_(XX, rollback_writes_nothing)                                         \
    PAIR_(XX, quota_replaced_in_one_transaction)                               \
    PAIR_(XX, failed_call_poisons_transaction)                                 \
    PAIR_(XX, identity_unique)                                                 \
    PAIR_(XX, identity_retire)                                                 \
    PAIR_(XX, events_query)                                                    \
    PAIR_(XX, event_alone_is_synced)                                           \
    PAIR_(XX, event_ids)                                                       \
    PAIR_(XX, events_pruned)                                                   \
    PAIR_(XX, undecodable_rows)                                                \
    PAIR_(XX, orphan_alloc)                                                    \
    PAIR_(XX, newer_and_foreign)                                               \
    PAIR_(XX, tx_belongs_to_its_thread)                                        \
    PAIR_(XX, own_writes_beside_transactions)                                  \
    XX(etcd_guarded_commit)                                                    \
    XX(events_pruned_once_etcd)                                                \
    XX(etcd_alloc_guards)                                                      \
    XX(etcd_bynode_index)                                                      \
    XX(etcd_decoded_off_the_lock)                                              \
    XX(etcd_too_big_is_refused_whole)

TEST_MAIN(TEST_LIST)
