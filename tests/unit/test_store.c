/* SPDX-License-Identifier: MIT */
/*
 * test_store.c: the SQLite store (src/daemon/store.c). Open, create and
 * migrate; refusal of newer, corrupt and foreign files with the file left
 * byte for byte as it was; round trips of every row kind through
 * store_load; rollback; allocation uniqueness; event retention and filters;
 * kill -9 in the middle of a stream of transactions; and fault injection:
 * a second connection holding the write lock (busy), a VFS that fails
 * writes and syncs (I/O errors) and an allocator that fails (no memory).
 * Each test runs in its own forked child, so the global SQLite
 * configuration a fault test installs dies with it.
 */
#include "common/accel_setup.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>

#include "common/util.h"
#include "harness.h"

/* ---------------------------------------------------------------- helpers */

/* token hashes as the store wants them: 64 lowercase hex digits */
#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HASH_F "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
#define HASH_9 "9999999999999999999999999999999999999999999999999999999999999999"

static char *tmp_dir(void)
{
    char *d = xasprintf("%s/store-XXXXXX", harness_tmp());
    ASSERT(mkdtemp(d) != NULL);
    return d;
}

static char *tmp_db(void)
{
    char *d = tmp_dir();
    char *p = xasprintf("%s/accel.db", d);
    free(d);
    return p;
}

static struct store *open_ok(const char *path)
{
    struct store *s = NULL;
    char *cause = NULL;
    enum accel_err err = store_open(path, &s, &cause);
    if (err != ACCEL_OK)
        FAIL_AT_("store_open(%s): %s: %s", path, accel_err_name(err),
                 cause ? cause : "(no cause)");
    ASSERT(s != NULL);
    ASSERT(cause == NULL);
    return s;
}

/* Read a whole file; *len gets its size. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    ASSERT(f != NULL);
    ASSERT_EQ(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    ASSERT(n >= 0);
    rewind(f);
    buf = xmalloc((size_t)n + 1);
    ASSERT_EQ(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ASSERT(f != NULL);
    ASSERT_EQ(fwrite(data, 1, len, f), len);
    ASSERT_EQ(fclose(f), 0);
}

static int64_t raw_int(const char *path, const char *sql)
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

static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    ASSERT_EQ(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        FAIL_AT_("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
}

/* A loader that prints every row, one per line, into a bounded buffer. */
struct dump {
    char buf[1 << 16];
    size_t len;
    int apps, allocs, devices, nodes, users, identities, limits;
};

static void dump_add(struct dump *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void dump_add(struct dump *d, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(d->buf + d->len, sizeof(d->buf) - d->len, fmt, ap);
    va_end(ap);
    ASSERT(n >= 0 && (size_t)n < sizeof(d->buf) - d->len);
    d->len += (size_t)n;
}

#define S_(x) ((x) ? (x) : "NULL")

static enum accel_err dump_app(void *ctx, const struct store_app *a,
                               char **why)
{
    (void)why;
    struct dump *d = ctx;
    d->apps++;
    dump_add(d, "app %s %s %s %s %s %s %jd %jd %jd %ju %jd\n", a->name,
             a->owner, a->state, S_(a->reason), a->manifest,
             S_(a->selected_type), (intmax_t)a->created_ms,
             (intmax_t)a->updated_ms, (intmax_t)a->pid,
             (uintmax_t)a->pid_start, (intmax_t)a->exit_status);
    return ACCEL_OK;
}

static enum accel_err dump_alloc(void *ctx, const struct store_alloc *a,
                                 char **why)
{
    (void)why;
    struct dump *d = ctx;
    d->allocs++;
    dump_add(d, "alloc %s %s %s %s %s %ju\n", a->app, a->owner, a->type,
             a->node, a->device, (uintmax_t)a->memory);
    return ACCEL_OK;
}

static enum accel_err dump_device(void *ctx, const struct store_device *v,
                                  char **why)
{
    (void)why;
    struct dump *d = ctx;
    d->devices++;
    dump_add(d, "device %s %s %s %s\n", v->node, v->id, v->support,
             S_(v->settings));
    return ACCEL_OK;
}

static enum accel_err dump_node(void *ctx, const struct store_node *n,
                                char **why)
{
    (void)why;
    struct dump *d = ctx;
    d->nodes++;
    dump_add(d, "node %s %d\n", n->name, n->enabled ? 1 : 0);
    return ACCEL_OK;
}

static enum accel_err dump_user(void *ctx, const struct store_user *u,
                                char **why)
{
    (void)why;
    struct dump *d = ctx;
    d->users++;
    dump_add(d, "user %s %s %s %jd\n", u->name, u->role, u->token_hash,
             (intmax_t)u->created_ms);
    return ACCEL_OK;
}

static enum accel_err dump_identity(void *ctx,
                                    const struct store_identity *id,
                                    char **why)
{
    (void)why;
    struct dump *d = ctx;
    d->identities++;
    dump_add(d, "identity %s %jd\n", id->name, (intmax_t)id->uid);
    return ACCEL_OK;
}

static enum accel_err dump_limits(void *ctx, const struct store_limits *l,
                                  char **why)
{
    (void)why;
    struct dump *d = ctx;
    d->limits++;
    dump_add(d, "limits %s %jd %jd\n", l->name, (intmax_t)l->max_apps,
             (intmax_t)l->max_gpu_memory);
    return ACCEL_OK;
}

static struct dump *load_all(struct store *s)
{
    struct dump *d = xcalloc(1, sizeof(*d));
    struct store_loader l = {d,         dump_app,  dump_alloc,    dump_device,
                             dump_node, dump_user, dump_identity, dump_limits,
                             false, NULL, NULL, NULL};
    char *cause = NULL;
    enum accel_err err = store_load(s, &l, &cause);
    if (err != ACCEL_OK)
        FAIL_AT_("store_load: %s: %s", accel_err_name(err),
                 cause ? cause : store_errmsg(s));
    ASSERT(cause == NULL);
    return d;
}

static struct store_alloc mk_alloc(const char *app, const char *device,
                                   uint64_t memory)
{
    struct store_alloc a = {app, "alice", "nvidia", "node1", device, memory};
    return a;
}

static struct store_app mk_app(const char *name)
{
    struct store_app a = {name, "alice", "installed", NULL, "{\"n\":1}",
                          "nvidia", 1000, 2000, 0, 0, -1};
    return a;
}

/* ------------------------------------------------------------- open/create */

TEST(store_open_create)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct dump *d = load_all(s);
    ASSERT_EQ(d->len, 0);
    ASSERT_STR_EQ(store_errmsg(s), "");
    /* schema 5: a new store's creation time is now (within a day: the
     * test checks the clock was read, not how fast it ran) */
    {
        int64_t now = (int64_t)time(NULL) * 1000, ms = store_created_ms(s);
        ASSERT(ms > now - 86400000 && ms < now + 86400000);
    }
    store_close(s);
    ASSERT_EQ(raw_int(path, "PRAGMA user_version"), store_schema_version());
    ASSERT_EQ(raw_int(path, "SELECT count(*) FROM sqlite_master WHERE "
                            "type = 'table' AND name IN ('apps', "
                            "'allocations', 'devices', 'nodes', 'users', "
                            "'events')"),
              6);
    /* schema 2: no secondary indexes (each cost every bind a page), the
     * keyed tables are WITHOUT ROWID, events have no AUTOINCREMENT */
    ASSERT_EQ(raw_int(path, "SELECT count(*) FROM sqlite_master WHERE "
                            "type = 'index' AND sql IS NOT NULL"),
              0);
    ASSERT_EQ(raw_int(path, "SELECT count(*) FROM sqlite_master WHERE "
                            "name IN ('apps', 'allocations') AND "
                            "sql LIKE '%WITHOUT ROWID'"),
              2);
    ASSERT_EQ(raw_int(path, "SELECT count(*) FROM sqlite_master WHERE "
                            "name = 'events' AND sql LIKE '%AUTOINCREMENT%'"),
              0);
    /* the file is in WAL mode (persistent in the header) */
    {
        size_t len;
        char *b = slurp(path, &len);
        ASSERT(len >= 100);
        ASSERT_EQ(b[18], 2);
        ASSERT_EQ(b[19], 2);
        free(b);
    }
    /* reopening an up-to-date file works and migrates nothing */
    s = open_ok(path);
    store_close(s);
    ASSERT_EQ(raw_int(path, "PRAGMA user_version"), store_schema_version());
    free(d);
    free(path);
}

/* First start is only the absence of the file: created complete, under a
 * temporary name linked into place (nothing else left in the directory). */
TEST(store_first_start_only_when_absent)
{
    char *path = tmp_db(), *dir = xstrdup(path);
    struct store *s = open_ok(path);
    int entries = 0;
    DIR *dh;
    struct dirent *de;
    ASSERT(store_created(s));
    store_close(s);
    ASSERT_EQ(raw_int(path, "PRAGMA user_version"), store_schema_version());
    ASSERT_EQ(raw_int(path, "PRAGMA application_id"), 0x61636365);
    s = open_ok(path);
    ASSERT(!store_created(s));
    store_close(s);
    *strrchr(dir, '/') = '\0';
    dh = opendir(dir);
    ASSERT(dh != NULL);
    while ((de = readdir(dh)) != NULL)
        if (de->d_name[0] != '.') {
            ASSERT(strncmp(de->d_name, "accel.db", 8) == 0);
            ASSERT(strstr(de->d_name, ".new-") == NULL);
            entries++;
        }
    closedir(dh);
    ASSERT_GE(entries, 1);
    free(dir);
    free(path);
}

/* Schema 3 (identities) from a schema-2 file: users, apps and the rest are
 * kept, the new table is empty, and uids then round-trip and stay unique. */
TEST(store_migrate_v2_keeps_users_adds_identities)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct store_user u = {"alice", "member", HASH_A, 7};
    struct store_app a = mk_app("web");
    struct store_identity id1 = {"alice", 61184}, id2 = {"shared", 61185};
    struct store_identity dup_name = {"alice", 61186};
    struct store_identity dup_uid = {"bob", 61185};
    struct dump *d;

    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_user_put(s, &u), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    store_close(s);
    /* make it the schema-2 file an older acceld wrote */
    raw_exec(path, "DROP TABLE identities; DROP TABLE user_limits; "
                   "DROP TABLE meta; PRAGMA user_version = 2;");
    s = open_ok(path);
    ASSERT_EQ(raw_int(path, "PRAGMA user_version"), store_schema_version());
    ASSERT_EQ(store_schema_version(), 5);
    d = load_all(s);
    ASSERT_EQ(d->users, 1);
    ASSERT_EQ(d->apps, 1);
    ASSERT_EQ(d->identities, 0);
    ASSERT(strstr(d->buf, "user alice member " HASH_A " 7\n") != NULL);
    free(d);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_identity_put(s, &id1), ACCEL_OK);
    ASSERT_EQ(store_identity_put(s, &id2), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    /* a name keeps its uid; a uid belongs to one name */
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_identity_put(s, &dup_name), ACCEL_ECONFLICT);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_identity_put(s, &dup_uid), ACCEL_ECONFLICT);
    store_close(s);
    s = open_ok(path);
    d = load_all(s);
    ASSERT_EQ(d->identities, 2);
    ASSERT(strstr(d->buf, "identity alice 61184\nidentity shared 61185\n") !=
           NULL);
    free(d);
    store_close(s);
    free(path);
}

/* Schema 4 (user_limits) from a schema-3 file: users kept, no limits; then
 * limits round-trip (NULL = -1), are replaced, and go with their user. */
TEST(store_migrate_v3_adds_user_limits)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct store_user u = {"alice", "member", HASH_A, 7};
    struct store_limits l1 = {"alice", 2, -1};
    struct store_limits l2 = {"alice", -1, 24LL << 30};
    struct dump *d;

    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_user_put(s, &u), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    store_close(s);
    raw_exec(path, "DROP TABLE user_limits; DROP TABLE meta; "
                   "PRAGMA user_version = 3;");
    s = open_ok(path);
    ASSERT_EQ(raw_int(path, "PRAGMA user_version"), 5);
    /* schema 5: an older store's creation is its first user's */
    ASSERT_EQ(store_created_ms(s), 7);
    d = load_all(s);
    ASSERT_EQ(d->users, 1);
    ASSERT_EQ(d->limits, 0);
    free(d);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_limits_put(s, &l1), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    d = load_all(s);
    ASSERT(strstr(d->buf, "limits alice 2 -1\n") != NULL);
    free(d);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_limits_put(s, &l2), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    store_close(s);
    s = open_ok(path);
    d = load_all(s);
    ASSERT_EQ(d->limits, 1);
    ASSERT(strstr(d->buf, "limits alice -1 25769803776\n") != NULL);
    free(d);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_limits_delete(s, "alice"), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    d = load_all(s);
    ASSERT_EQ(d->limits, 0);
    free(d);
    store_close(s);
    free(path);
}

TEST(store_open_missing_dir_fails)
{
    struct store *s = (struct store *)0x1;
    char *cause = NULL;
    enum accel_err err =
        store_open("/nonexistent-accel-dir/x/accel.db", &s, &cause);
    ASSERT_NE(err, ACCEL_OK);
    ASSERT(s == (struct store *)0x1); /* untouched on failure */
    ASSERT(cause != NULL);
    ASSERT(strstr(cause, "/nonexistent-accel-dir/x/accel.db") != NULL);
    free(cause);
}

/* Open must fail with err and a cause containing each needle; the file's
 * bytes must not change. */
static void expect_refused(const char *path, enum accel_err want,
                           const char *needle1, const char *needle2)
{
    size_t len0, len1;
    char *before = slurp(path, &len0), *after;
    struct store *s = NULL;
    char *cause = NULL;
    enum accel_err err = store_open(path, &s, &cause);
    if (err != want)
        FAIL_AT_("store_open: want %s, got %s (%s)", accel_err_name(want),
                 accel_err_name(err), cause ? cause : "no cause");
    ASSERT(s == NULL);
    ASSERT(cause != NULL);
    ASSERT(strstr(cause, path) != NULL);
    if (strstr(cause, needle1) == NULL || strstr(cause, needle2) == NULL)
        FAIL_AT_("cause \"%s\" lacks \"%s\" or \"%s\"", cause, needle1,
                 needle2);
    fprintf(stderr, "refused as expected: %s\n", cause);
    free(cause);
    after = slurp(path, &len1);
    ASSERT_EQ(len0, len1);
    ASSERT(memcmp(before, after, len0) == 0);
    /* a second try says the same: nothing was "repaired" */
    ASSERT_EQ(store_open(path, &s, &cause), want);
    free(cause);
    free(before);
    free(after);
}

/* A zero-byte accel.db used to be taken for a first start (all state
 * gone, the token rewritten); so was an SQLite file without our schema. */
TEST(store_refuse_empty_file)
{
    char *path = tmp_db();
    write_file(path, "", 0);
    expect_refused(path, ACCEL_ESTORE_CORRUPT, "is empty (0 bytes)",
                   "refusing");
    ASSERT_EQ(unlink(path), 0);
    raw_exec(path, "CREATE TABLE t (a); DROP TABLE t;");
    expect_refused(path, ACCEL_ESTORE_CORRUPT, "holds no accel schema",
                   "refusing");
    free(path);
}

TEST(store_refuse_newer)
{
    char *path = tmp_db();
    char *need;
    raw_exec(path, "PRAGMA user_version = 99; CREATE TABLE x (a);");
    need = xasprintf("this build knows %d", store_schema_version());
    expect_refused(path, ACCEL_ESTORE_NEWER, "schema 99", need);
    ASSERT_EQ(raw_int(path, "PRAGMA user_version"), 99);
    free(need);
    free(path);
}

TEST(store_refuse_random_bytes)
{
    char *path = tmp_db();
    char junk[8192];
    unsigned seed = 12345;
    for (size_t i = 0; i < sizeof(junk); i++) {
        seed = seed * 1103515245u + 12345u;
        junk[i] = (char)(seed >> 16);
    }
    write_file(path, junk, sizeof(junk));
    expect_refused(path, ACCEL_ESTORE_CORRUPT, "corrupt", "refusing");
    free(path);
}

/* A real database with enough rows to span many pages, checkpointed. */
static char *big_db(void)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    char name[32];
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    for (int i = 0; i < 2000; i++) {
        struct store_app a = mk_app(name);
        snprintf(name, sizeof(name), "app-%05d", i);
        a.name = name;
        ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    }
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    store_close(s); /* the last close checkpoints into the main file */
    return path;
}

TEST(store_refuse_truncated)
{
    char *path = big_db();
    struct stat sb;
    ASSERT_EQ(stat(path, &sb), 0);
    ASSERT_GT(sb.st_size, 40000);
    ASSERT_EQ(truncate(path, sb.st_size / 2), 0);
    expect_refused(path, ACCEL_ESTORE_CORRUPT, "corrupt", "refusing");
    ASSERT_EQ(truncate(path, 50), 0);
    expect_refused(path, ACCEL_ESTORE_CORRUPT, "corrupt", "refusing");
    free(path);
}

TEST(store_refuse_damaged_page)
{
    char *path = big_db();
    size_t len;
    char *b = slurp(path, &len);
    /* scribble over the middle of the file, past page 1 */
    memset(b + len / 2, 0x5a, 4096);
    write_file(path, b, len);
    expect_refused(path, ACCEL_ESTORE_CORRUPT, "corrupt", "refusing");
    free(b);
    free(path);
}

TEST(store_refuse_foreign_db)
{
    char *path = tmp_db();
    raw_exec(path, "CREATE TABLE photos (id INTEGER PRIMARY KEY);");
    expect_refused(path, ACCEL_ESTORE_CORRUPT, "another program",
                   "refusing");
    free(path);
}

/* ------------------------------------------------------------ round trips */


static const char *expected_full =
    "node node1 1\n"
    "node node2 0\n"
    "device node1 GPU-1 MemorySlice {\"quota\":1}\n"
    "device node1 GPU-2 Exclusive NULL\n"
    "user alice member " HASH_A " 11\n"
    "user root admin " HASH_F " 12\n"
    "app comfy alice running started {\"n\":2} nvidia 1000 3000 4242 "
    "18446744073709551615 -1\n"
    "app ollama alice installed NULL {\"n\":1} NULL 1000 2000 0 0 7\n"
    "alloc comfy alice nvidia node1 GPU-1 4611686018427387904\n"
    "alloc comfy alice nvidia node1 GPU-2 0\n"
    "alloc ollama alice nvidia node1 GPU-1 8589934592\n";

static void put_everything(struct store *s)
{
    struct store_app a1 = mk_app("ollama"), a2 = mk_app("comfy");
    struct store_device d1 = {"node1", "GPU-1", "MemorySlice",
                              "{\"quota\":1}"};
    struct store_device d2 = {"node1", "GPU-2", "Exclusive", NULL};
    struct store_node n1 = {"node1", true}, n2 = {"node2", false};
    struct store_user u1 = {"alice", "member", HASH_A, 11};
    struct store_user u2 = {"root", "admin", HASH_F, 12};
    struct store_alloc x1 = mk_alloc("ollama", "GPU-1", 8ULL << 30);
    struct store_alloc x2 = mk_alloc("comfy", "GPU-1", UINT64_C(1) << 62);
    struct store_alloc x3 = mk_alloc("comfy", "GPU-2", 0);
    a1.selected_type = NULL;
    a1.exit_status = 7;
    a2.state = "running";
    a2.reason = "started";
    a2.manifest = "{\"n\":2}";
    a2.updated_ms = 3000;
    a2.pid = 4242;
    a2.pid_start = UINT64_MAX;
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &x1), ACCEL_OK); /* allocs before apps */
    ASSERT_EQ(store_alloc_put(s, &x2), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &x3), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a1), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a2), ACCEL_OK);
    ASSERT_EQ(store_device_put(s, &d1), ACCEL_OK);
    ASSERT_EQ(store_device_put(s, &d2), ACCEL_OK);
    ASSERT_EQ(store_node_put(s, &n1), ACCEL_OK);
    ASSERT_EQ(store_node_put(s, &n2), ACCEL_OK);
    ASSERT_EQ(store_user_put(s, &u1), ACCEL_OK);
    ASSERT_EQ(store_user_put(s, &u2), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
}

TEST(store_roundtrip_every_row)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct dump *d;
    put_everything(s);
    d = load_all(s);
    ASSERT_STR_EQ(d->buf, expected_full);
    free(d);
    store_close(s);
    s = open_ok(path); /* and from the file */
    d = load_all(s);
    ASSERT_STR_EQ(d->buf, expected_full);
    ASSERT_EQ(d->apps, 2);
    ASSERT_EQ(d->allocs, 3);
    ASSERT_EQ(d->devices, 2);
    ASSERT_EQ(d->nodes, 2);
    ASSERT_EQ(d->users, 2);
    free(d);
    store_close(s);
    free(path);
}

TEST(store_put_replaces)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct store_node n = {"node2", true};
    struct store_device dv = {"node1", "GPU-2", "TimeSlice", "{}"};
    struct store_user u = {"alice", "admin", HASH_9, 13};
    struct store_app a = mk_app("ollama");
    struct dump *d;
    put_everything(s);
    a.state = "stopped";
    a.reason = NULL;
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_node_put(s, &n), ACCEL_OK);
    ASSERT_EQ(store_device_put(s, &dv), ACCEL_OK);
    ASSERT_EQ(store_user_put(s, &u), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    store_close(s);
    s = open_ok(path);
    d = load_all(s);
    ASSERT(strstr(d->buf, "node node2 1\n") != NULL);
    ASSERT(strstr(d->buf, "device node1 GPU-2 TimeSlice {}\n") != NULL);
    ASSERT(strstr(d->buf, "user alice admin " HASH_9 " 13\n") != NULL);
    ASSERT(strstr(d->buf, "app ollama alice stopped NULL {\"n\":1} nvidia "
                          "1000 2000 0 0 -1\n") != NULL);
    ASSERT_EQ(d->nodes, 2);
    ASSERT_EQ(d->devices, 2);
    ASSERT_EQ(d->users, 2);
    ASSERT_EQ(d->apps, 2);
    free(d);
    store_close(s);
    free(path);
}

TEST(store_deletes_roundtrip)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct dump *d;
    put_everything(s);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_alloc_delete(s, "comfy", "GPU-2"), ACCEL_OK);
    ASSERT_EQ(store_alloc_delete(s, "comfy", "GPU-9"), ACCEL_OK); /* none */
    ASSERT_EQ(store_user_delete(s, "root"), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    store_close(s);
    s = open_ok(path);
    d = load_all(s);
    ASSERT(strstr(d->buf, "GPU-2 0\n") == NULL);
    ASSERT(strstr(d->buf, "alloc comfy alice nvidia node1 GPU-1") != NULL);
    ASSERT(strstr(d->buf, "user root") == NULL);
    ASSERT_EQ(d->allocs, 2);
    ASSERT_EQ(d->users, 1);
    free(d);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_alloc_delete_app(s, "comfy"), ACCEL_OK);
    ASSERT_EQ(store_app_delete(s, "comfy"), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    store_close(s);
    s = open_ok(path);
    d = load_all(s);
    ASSERT(strstr(d->buf, "comfy") == NULL);
    ASSERT_EQ(d->apps, 1);
    ASSERT_EQ(d->allocs, 1);
    free(d);
    store_close(s);
    free(path);
}

TEST(store_rollback_leaves_nothing)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct store_alloc x = mk_alloc("a", "GPU-1", 1);
    struct store_app a = mk_app("a");
    struct dump *d;
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &x), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    store_rollback(s);
    d = load_all(s);
    ASSERT_EQ(d->len, 0);
    free(d);
    /* an uncommitted transaction at close is rolled back too */
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    store_close(s);
    s = open_ok(path);
    d = load_all(s);
    ASSERT_EQ(d->len, 0);
    free(d);
    store_rollback(s); /* no transaction: harmless */
    store_close(s);
    free(path);
}

TEST(store_failure_rolls_back_whole_tx)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct store_alloc x = mk_alloc("a", "GPU-1", 1);
    struct store_alloc bad = mk_alloc("a", NULL, 1);
    struct store_app a = mk_app("a");
    struct dump *d;
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &x), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &bad), ACCEL_EINVAL);
    ASSERT(store_errmsg(s)[0] != '\0');
    /* later writes and the commit are refused: nothing half-applied */
    ASSERT_EQ(store_app_put(s, &a), ACCEL_EINVAL);
    ASSERT_EQ(store_commit(s), ACCEL_EINVAL);
    store_rollback(s);
    d = load_all(s);
    ASSERT_EQ(d->len, 0);
    free(d);
    /* writes outside a transaction are refused */
    ASSERT_EQ(store_app_put(s, &a), ACCEL_EINVAL);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_begin(s), ACCEL_EINVAL); /* no nesting */
    store_rollback(s);
    d = load_all(s);
    ASSERT_EQ(d->len, 0);
    free(d);
    store_close(s);
    free(path);
}

TEST(store_alloc_unique_app_device)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct store_alloc x1 = mk_alloc("a", "GPU-1", 1);
    struct store_alloc x2 = mk_alloc("a", "GPU-1", 2);
    struct store_alloc x3 = mk_alloc("a", "GPU-2", 3);
    struct store_alloc x4 = mk_alloc("b", "GPU-1", 4);
    struct store_app a = mk_app("a"), b = mk_app("b");
    struct dump *d;
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &b), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &x1), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &x2), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &x3), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &x4), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    d = load_all(s);
    ASSERT_EQ(d->allocs, 3);
    ASSERT(strstr(d->buf, "alloc a alice nvidia node1 GPU-1 2\n"
                          "alloc a alice nvidia node1 GPU-2 3\n"
                          "alloc b alice nvidia node1 GPU-1 4\n") != NULL);
    free(d);
    store_close(s);
    /* the schema itself refuses a duplicate (app, device) */
    {
        sqlite3 *db = NULL;
        ASSERT_EQ(sqlite3_open(path, &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db,
                               "INSERT INTO allocations VALUES ('a', 'x', "
                               "'nvidia', 'n', 'GPU-1', 9)",
                               NULL, NULL, NULL) &
                      0xff,
                  SQLITE_CONSTRAINT);
        sqlite3_close(db);
    }
    free(path);
}

/* ----------------------------------------------------------------- events */

struct ev_log {
    int n;
    int64_t ids[4096];
    char kinds[4096][16];
    int stop_after; /* 0 = never */
};

static enum accel_err ev_collect(void *ctx, const struct store_event *e)
{
    struct ev_log *l = ctx;
    ASSERT(l->n < 4096);
    l->ids[l->n] = e->id;
    util_strlcpy(l->kinds[l->n], e->kind, sizeof(l->kinds[0]));
    l->n++;
    if (l->stop_after && l->n >= l->stop_after)
        return ACCEL_ECONFLICT;
    return ACCEL_OK;
}

static int ev_query(struct store *s, struct store_event_filter f,
                    struct ev_log *l)
{
    memset(l, 0, sizeof(*l));
    ASSERT_EQ(store_events_query(s, &f, ev_collect, l), ACCEL_OK);
    for (int i = 1; i < l->n; i++)
        ASSERT_LT(l->ids[i - 1], l->ids[i]); /* oldest first */
    return l->n;
}

TEST(store_events_retention)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    static struct ev_log l;
    struct store_event_filter all = {0};
    int64_t id = 0, last = 0;
    for (int i = 0; i < 1000; i++) {
        struct store_event e = {0, i, "app.state", "a", NULL, NULL, "m",
                                NULL};
        ASSERT_EQ(store_event_append(s, &e, 100, &id), ACCEL_OK);
        ASSERT_GT(id, last);
        last = id;
    }
    ASSERT_EQ(last, 1000);
    ev_query(s, all, &l);
    ASSERT_GE(l.n, 100);
    ASSERT_LE(l.n, 100 + 63);
    ASSERT_EQ(l.ids[l.n - 1], 1000);
    ASSERT_EQ(l.ids[0], 1000 - l.n + 1); /* the newest, contiguous */
    store_close(s);
    /* ids are never reused, even after a prune and a reopen */
    s = open_ok(path);
    {
        struct store_event e = {0, 5, "k", NULL, NULL, NULL, "m", NULL};
        ASSERT_EQ(store_event_append(s, &e, 100, &id), ACCEL_OK);
        ASSERT_EQ(id, 1001);
        /* the first append after open prunes */
        ev_query(s, all, &l);
        ASSERT_EQ(l.n, 100);
        /* keep_max <= 0 keeps everything */
        for (int i = 0; i < 200; i++)
            ASSERT_EQ(store_event_append(s, &e, 0, NULL), ACCEL_OK);
        ASSERT_EQ(ev_query(s, all, &l), 300);
        /* invalid events are refused */
        e.kind = NULL;
        ASSERT_EQ(store_event_append(s, &e, 0, NULL), ACCEL_EINVAL);
    }
    store_close(s);
    free(path);
}

TEST(store_events_filters)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    static struct ev_log l;
    static const char *apps[] = {"a", "b", NULL};
    static const char *devs[] = {"GPU-1", "GPU-2", NULL};
    static const char *kinds[] = {"app.state", "binding.add", "refusal"};
    struct store_event_filter f;
    /* 60 events: app cycles a,b,NULL; device cycles by 2s; kind by i%3..
     * ts_ms = 1000 + 10 i */
    for (int i = 0; i < 60; i++) {
        struct store_event e = {0, 1000 + 10 * i, kinds[(i / 2) % 3],
                                apps[i % 3], "node1", devs[(i / 4) % 3],
                                "msg", "{}"};
        ASSERT_EQ(store_event_append(s, &e, 0, NULL), ACCEL_OK);
    }
    memset(&f, 0, sizeof(f));
    ASSERT_EQ(ev_query(s, f, &l), 60);
    f.since_id = 50;
    ASSERT_EQ(ev_query(s, f, &l), 10);
    ASSERT_EQ(l.ids[0], 51);
    memset(&f, 0, sizeof(f));
    f.since_ms = 1000 + 10 * 45; /* ts >= since_ms */
    ASSERT_EQ(ev_query(s, f, &l), 15);
    ASSERT_EQ(l.ids[0], 46);
    memset(&f, 0, sizeof(f));
    f.limit = 7;
    ASSERT_EQ(ev_query(s, f, &l), 7);
    ASSERT_EQ(l.ids[6], 7);
    f.since_id = 55; /* paging */
    ASSERT_EQ(ev_query(s, f, &l), 5);
    memset(&f, 0, sizeof(f));
    f.app = "a";
    ASSERT_EQ(ev_query(s, f, &l), 20);
    for (int i = 0; i < l.n; i++)
        ASSERT_EQ((l.ids[i] - 1) % 3, 0);
    memset(&f, 0, sizeof(f));
    f.device = "GPU-2";
    ASSERT_EQ(ev_query(s, f, &l), 20);
    for (int i = 0; i < l.n; i++)
        ASSERT_EQ(((l.ids[i] - 1) / 4) % 3, 1);
    memset(&f, 0, sizeof(f));
    f.kind = "refusal";
    ASSERT_EQ(ev_query(s, f, &l), 20);
    for (int i = 0; i < l.n; i++)
        ASSERT_STR_EQ(l.kinds[i], "refusal");
    /* every combination: count by brute force */
    for (int mask = 0; mask < 8; mask++) {
        int want = 0;
        memset(&f, 0, sizeof(f));
        f.app = mask & 1 ? "b" : NULL;
        f.device = mask & 2 ? "GPU-1" : NULL;
        f.kind = mask & 4 ? "binding.add" : NULL;
        f.since_id = 3;
        f.since_ms = 1000 + 10 * 5;
        for (int i = 0; i < 60; i++) {
            int id = i + 1;
            if (id <= 3 || 1000 + 10 * i < f.since_ms)
                continue;
            if (f.app && (apps[i % 3] == NULL || strcmp(apps[i % 3], f.app)))
                continue;
            if (f.device && (devs[(i / 4) % 3] == NULL ||
                             strcmp(devs[(i / 4) % 3], f.device)))
                continue;
            if (f.kind && strcmp(kinds[(i / 2) % 3], f.kind))
                continue;
            want++;
        }
        if (ev_query(s, f, &l) != want)
            FAIL_AT_("mask %d: %d events, want %d", mask, l.n, want);
    }
    /* the callback stops the query and its code comes back */
    memset(&f, 0, sizeof(f));
    memset(&l, 0, sizeof(l));
    l.stop_after = 3;
    ASSERT_EQ(store_events_query(s, &f, ev_collect, &l), ACCEL_ECONFLICT);
    ASSERT_EQ(l.n, 3);
    /* and the statement is reusable afterwards */
    ASSERT_EQ(ev_query(s, f, &l), 60);
    store_close(s);
    free(path);
}

TEST(store_event_inside_tx_rolls_back)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    static struct ev_log l;
    struct store_event_filter f = {0};
    struct store_event e = {0, 1, "k", NULL, NULL, NULL, "m", NULL};
    struct store_app a = mk_app("a");
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    ASSERT_EQ(store_event_append(s, &e, 10, NULL), ACCEL_OK);
    store_rollback(s);
    ASSERT_EQ(ev_query(s, f, &l), 0);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    ASSERT_EQ(store_event_append(s, &e, 10, NULL), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    ASSERT_EQ(ev_query(s, f, &l), 1);
    store_close(s);
    free(path);
}

/* ------------------------------------------------- rows that do not decode */

/* A loader like load_all's that also refuses, the way acceld does, an app
 * whose manifest does not start with '{'. */
static enum accel_err strict_app(void *ctx, const struct store_app *a,
                                 char **why)
{
    if (a->manifest[0] != '{') {
        *why = xstrdup("manifest is not valid JSON");
        return ACCEL_ESTORE_CORRUPT;
    }
    return dump_app(ctx, a, why);
}

/* store_load with repair off/on; returns the code, *cause kept. */
static enum accel_err load_with(struct store *s, struct dump *d, bool repair,
                                char **cause)
{
    struct store_loader l = {d,         strict_app, dump_alloc,    dump_device,
                             dump_node, dump_user,  dump_identity, dump_limits,
                             repair, NULL, NULL, NULL};
    return store_load(s, &l, cause);
}

/* Corrupt one row of a full database with sql; the load must refuse,
 * naming the file, table, key and reason, and write nothing. */
static void expect_bad_row(const char *sql, const char *table,
                           const char *key, const char *reason)
{
    char *path = tmp_db(), *cause = NULL, *need;
    struct store *s = open_ok(path);
    struct dump *d = xcalloc(1, sizeof(*d));
    int64_t rows0, rows1;
    static const char *count =
        "SELECT (SELECT count(*) FROM apps) + (SELECT count(*) FROM "
        "allocations) * 10 + (SELECT count(*) FROM users) * 100 + (SELECT "
        "count(*) FROM events) * 1000 + (SELECT count(*) FROM devices) * "
        "10000 + (SELECT count(*) FROM nodes) * 100000";
    struct store_event e = {0, 5, "app.state", "comfy", NULL, NULL, "m",
                            "{\"a\":1}"};
    put_everything(s);
    ASSERT_EQ(store_event_append(s, &e, 0, NULL), ACCEL_OK);
    store_close(s);
    raw_exec(path, sql);
    rows0 = raw_int(path, count);
    s = open_ok(path);
    ASSERT_EQ(load_with(s, d, false, &cause), ACCEL_ESTORE_CORRUPT);
    ASSERT(cause != NULL);
    need = xasprintf("table %s, row \"%s\": %s", table, key, reason);
    if (strstr(cause, path) == NULL || strstr(cause, need) == NULL ||
        strstr(cause, "--repair") == NULL)
        FAIL_AT_("%s: cause \"%s\" lacks \"%s\" or the file", sql, cause,
                 need);
    fprintf(stderr, "refused as expected: %s\n", cause);
    free(cause);
    free(need);
    store_close(s);
    rows1 = raw_int(path, count);
    ASSERT_EQ(rows0, rows1); /* nothing dropped without --repair */
    free(d);
    free(path);
}

TEST(store_refuse_undecodable_rows)
{
    expect_bad_row("UPDATE apps SET manifest = 'not json' WHERE name = "
                   "'comfy'", "apps", "comfy", "manifest is not valid JSON");
    expect_bad_row("UPDATE apps SET created_ms = -5 WHERE name = 'ollama'",
                   "apps", "ollama", "created_ms is -5");
    expect_bad_row("UPDATE apps SET pid = 'abc' WHERE name = 'ollama'",
                   "apps", "ollama", "pid is text, not an integer");
    expect_bad_row("UPDATE apps SET owner = 'al' || char(0) || 'ice' WHERE "
                   "name = 'ollama'",
                   "apps", "ollama", "owner contains a NUL character");
    expect_bad_row("UPDATE allocations SET memory = -1 WHERE app = 'ollama'",
                   "allocations", "ollama/GPU-1", "memory is -1");
    expect_bad_row("UPDATE allocations SET memory = 'lots' WHERE app = "
                   "'ollama'",
                   "allocations", "ollama/GPU-1", "memory is text");
    expect_bad_row("INSERT INTO allocations VALUES ('ghost', 'alice', "
                   "'nvidia', 'node1', 'GPU-1', 1)",
                   "allocations", "ghost/GPU-1",
                   "its app \"ghost\" has no row in apps");
    expect_bad_row("UPDATE devices SET support = 'Sideways' WHERE id = "
                   "'GPU-2'",
                   "devices", "node1/GPU-2",
                   "support \"Sideways\" is not one this build knows");
    expect_bad_row("UPDATE devices SET settings = x'7b7d' WHERE id = "
                   "'GPU-1'",
                   "devices", "node1/GPU-1", "settings is a blob, not text");
    expect_bad_row("UPDATE nodes SET enabled = 7 WHERE name = 'node2'",
                   "nodes", "node2", "enabled is 7, outside [0, 1]");
    expect_bad_row("UPDATE users SET role = 'root' WHERE name = 'alice'",
                   "users", "alice", "role \"root\" is not one");
    expect_bad_row("UPDATE users SET token_hash = 'abcd' WHERE name = "
                   "'alice'",
                   "users", "alice", "token_hash is not a SHA-256");
    expect_bad_row("INSERT INTO identities VALUES ('bob', -3)",
                   "identities", "bob", "uid is -3");
    expect_bad_row("UPDATE events SET data = '{bad'", "events", "1",
                   "data is not valid JSON");
    expect_bad_row("UPDATE events SET data = '[1]'", "events", "1",
                   "data is not a JSON object");
    expect_bad_row("UPDATE events SET kind = x'6b'", "events", "1",
                   "kind is not a text");
    expect_bad_row("UPDATE events SET message = 'a' || char(0) || 'b'",
                   "events", "1", "a text contains a NUL character");
}

/* --repair drops exactly the bad rows and what depends on them, says so
 * (cause and a store.repair event), and the next load is clean. */
TEST(store_repair_drops_what_does_not_decode)
{
    char *path = tmp_db(), *cause = NULL;
    struct store *s = open_ok(path);
    struct dump *d = xcalloc(1, sizeof(*d));
    static struct ev_log l;
    struct store_event_filter f = {.kind = "store.repair"};
    put_everything(s);
    store_close(s);
    raw_exec(path, "UPDATE apps SET manifest = 'x' WHERE name = 'comfy';"
                   "UPDATE users SET role = 'root' WHERE name = 'alice';");
    s = open_ok(path);
    ASSERT_EQ(load_with(s, d, true, &cause), ACCEL_OK);
    ASSERT(cause != NULL);
    fprintf(stderr, "repair: %s\n", cause);
    ASSERT(strstr(cause, "dropped 4 undecodable rows") != NULL);
    ASSERT(strstr(cause, "table apps, row \"comfy\": manifest is not valid "
                         "JSON") != NULL);
    ASSERT(strstr(cause, "table allocations, row \"comfy/GPU-1\": its app "
                         "\"comfy\" does not decode") != NULL);
    ASSERT(strstr(cause, "table allocations, row \"comfy/GPU-2\"") != NULL);
    ASSERT(strstr(cause, "table users, row \"alice\": role") != NULL);
    /* the good rows were passed on, the bad ones never */
    ASSERT_EQ(d->apps, 1);
    ASSERT_EQ(d->allocs, 1);
    ASSERT_EQ(d->users, 1);
    ASSERT(strstr(d->buf, "comfy") == NULL);
    free(cause);
    ASSERT_EQ(ev_query(s, f, &l), 1);
    store_close(s);
    ASSERT_EQ(raw_int(path, "SELECT count(*) FROM apps WHERE name = "
                            "'comfy'"),
              0);
    ASSERT_EQ(raw_int(path, "SELECT count(*) FROM allocations"), 1);
    ASSERT_EQ(raw_int(path, "SELECT count(*) FROM events WHERE data LIKE "
                            "'%\"table\":\"users\",\"key\":\"alice\"%'"),
              1);
    /* clean now, without repair */
    s = open_ok(path);
    free(d);
    d = load_all(s);
    ASSERT_EQ(d->apps, 1);
    store_close(s);
    free(d);
    free(path);
}

/* ------------------------------------------------------------- kill -9 */

/* Child: transactions of an app row tNNNNNN and its two allocation rows
 * (GPU-a and GPU-b), acknowledging each commit on the pipe, until killed. */
static void kill9_child(const char *path, int ackfd, int start)
{
    struct store *s = open_ok(path);
    char name[32];
    for (int i = start;; i++) {
        struct store_alloc a = mk_alloc(name, "GPU-a", (uint64_t)i);
        struct store_alloc b = mk_alloc(name, "GPU-b", (uint64_t)i);
        snprintf(name, sizeof(name), "t%07d", i);
        struct store_app app = mk_app(name);
        if (store_begin(s) != ACCEL_OK || store_app_put(s, &app) ||
            store_alloc_put(s, &a) || store_alloc_put(s, &b) ||
            store_commit(s) != ACCEL_OK)
            _exit(3);
        if (write(ackfd, &i, sizeof(i)) != (ssize_t)sizeof(i))
            _exit(4);
    }
}

struct pairs {
    int n[1 << 16]; /* rows per transaction number */
    int bad;        /* rows whose memory disagrees with the name */
};

static enum accel_err pair_row(void *ctx, const struct store_alloc *a,
                               char **why)
{
    (void)why;
    struct pairs *p = ctx;
    char *end = NULL;
    long i = strtol(a->app + 1, &end, 10);
    if (a->app[0] != 't' || *end != '\0' || i < 0 || i >= (1 << 16) ||
        a->memory != (uint64_t)i) {
        p->bad++;
        return ACCEL_OK;
    }
    p->n[i]++;
    return ACCEL_OK;
}

/*
 * Check that transactions 0..acked are all present, each exactly two rows,
 * that those after form a prefix too (a transaction the child committed
 * but had not acknowledged yet may be there), and none is half there.
 * Returns the number of complete transactions.
 */
static int check_pairs(const char *path, int acked)
{
    struct pairs *p = xcalloc(1, sizeof(*p));
    struct store *s = open_ok(path);
    struct store_loader l = {0};
    int complete = 0;
    l.ctx = p;
    l.alloc = pair_row;
    {
        char *cause = NULL;
        ASSERT_EQ(store_load(s, &l, &cause), ACCEL_OK);
        ASSERT(cause == NULL);
    }
    store_close(s);
    ASSERT_EQ(p->bad, 0);
    while (complete < (1 << 16) && p->n[complete] == 2)
        complete++;
    for (int i = complete; i < (1 << 16); i++)
        if (p->n[i] != 0)
            FAIL_AT_("transaction %d has %d rows (complete up to %d)", i,
                     p->n[i], complete);
    if (complete < acked + 1)
        FAIL_AT_("acknowledged transaction %d lost (have %d)", acked,
                 complete);
    free(p);
    return complete;
}

TEST(store_kill9_mid_stream)
{
    char *path = tmp_db();
    int next = 0;
    struct store *s = open_ok(path); /* create before the children */
    store_close(s);
    srand((unsigned)time(NULL));
    for (int round = 0; round < 6; round++) {
        int fds[2], acked = -1, got, target = 20 + rand() % 150;
        pid_t pid;
        ASSERT_EQ(pipe(fds), 0);
        pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            kill9_child(path, fds[1], next);
        }
        close(fds[1]);
        for (got = 0; got < target; got++) {
            int v;
            if (read(fds[0], &v, sizeof(v)) != (ssize_t)sizeof(v))
                FAIL_AT_("child stopped early");
            acked = v;
        }
        /* a few microseconds in: likely mid-transaction */
        {
            struct timespec ts = {0, (long)(rand() % 2000) * 1000};
            nanosleep(&ts, NULL);
        }
        ASSERT_EQ(kill(pid, SIGKILL), 0);
        ASSERT_EQ(waitpid(pid, NULL, 0), pid);
        close(fds[0]);
        next = check_pairs(path, acked);
        fprintf(stderr, "round %d: acked %d, %d complete\n", round, acked,
                next);
    }
    free(path);
}

/* ------------------------------------------------------- fault injection */

TEST(store_busy_second_writer)
{
    char *path = tmp_db();
    struct store *s = open_ok(path);
    struct store_app a = mk_app("a");
    struct store_event e = {0, 1, "k", NULL, NULL, NULL, "m", NULL};
    sqlite3 *other = NULL;
    struct dump *d;
    store_set_busy_timeout(s, 50);
    ASSERT_EQ(sqlite3_open(path, &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL),
              SQLITE_OK);
    ASSERT_EQ(store_begin(s), ACCEL_EBUSY);
    ASSERT(strstr(store_errmsg(s), "locked") != NULL);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_EINVAL); /* no transaction */
    ASSERT_EQ(store_event_append(s, &e, 10, NULL), ACCEL_EBUSY);
    ASSERT_EQ(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    /* the lock gone, the store works again */
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    /* a reader does not block a writer in WAL mode */
    ASSERT_EQ(sqlite3_exec(other, "BEGIN; SELECT count(*) FROM apps;", NULL,
                           NULL, NULL),
              SQLITE_OK);
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_app_delete(s, "a"), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    sqlite3_exec(other, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(other);
    d = load_all(s);
    ASSERT_EQ(d->apps, 0);
    free(d);
    store_close(s);
    free(path);
}

TEST(store_readonly_file)
{
    char *path = tmp_db();
    char *dir;
    struct store *s = open_ok(path);
    char *cause = NULL;
    size_t len0, len1;
    char *before, *after;
    enum accel_err err;
    store_close(s);
    if (geteuid() == 0) {
        fprintf(stderr, "skipped: root ignores file modes\n");
        free(path);
        return;
    }
    dir = xstrdup(path);
    *strrchr(dir, '/') = '\0';
    before = slurp(path, &len0);
    ASSERT_EQ(chmod(path, 0444), 0);
    ASSERT_EQ(chmod(dir, 0555), 0); /* no new -wal/-shm either */
    err = store_open(path, &s, &cause);
    ASSERT_NE(err, ACCEL_OK);
    ASSERT(cause != NULL && strstr(cause, path) != NULL);
    fprintf(stderr, "read-only: %s: %s\n", accel_err_name(err), cause);
    free(cause);
    ASSERT_EQ(chmod(dir, 0755), 0);
    after = slurp(path, &len1);
    ASSERT_EQ(len0, len1);
    ASSERT(memcmp(before, after, len0) == 0);
    free(before);
    free(after);
    free(dir);
    free(path);
}

/*
 * A VFS over the default one that fails writes and syncs on demand:
 * fault_countdown counts xWrite and xSync calls; when it reaches zero that
 * call fails with SQLITE_IOERR_WRITE / _FSYNC / _TRUNCATE, and so does
 * every later one if fault_persistent, until disarmed (fault_countdown < 0). Installed as the default VFS in the
 * forked test child only.
 */
struct fault_file {
    sqlite3_file base;
    sqlite3_file *real; /* the default VFS's file, right after this */
};

static sqlite3_vfs fault_vfs;
static sqlite3_vfs *real_vfs;
static int fault_countdown = -1;
static int fault_persistent;
static int fault_fired;

static int fault_now(void)
{
    if (fault_countdown < 0)
        return 0;
    if (fault_countdown == 0) {
        fault_fired = 1;
        if (!fault_persistent)
            fault_countdown = -1; /* transient: this call only */
        return 1;
    }
    fault_countdown--;
    return 0;
}

#define REAL(f) (((struct fault_file *)(f))->real)

static int f_close(sqlite3_file *f)
{
    return REAL(f)->pMethods->xClose(REAL(f));
}
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
    return REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    if (fault_now())
        return SQLITE_IOERR_WRITE;
    return REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    if (fault_now())
        return SQLITE_IOERR_TRUNCATE;
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int f_sync(sqlite3_file *f, int flags)
{
    if (fault_now())
        return SQLITE_IOERR_FSYNC;
    return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), size);
}
static int f_lock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int f_unlock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), l);
}
static int f_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int f_fcntl(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int f_sector(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int f_devchar(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int f_shmmap(sqlite3_file *f, int pg, int sz, int ext,
                    void volatile **pp)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, pp);
}
static int f_shmlock(sqlite3_file *f, int off, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void f_shmbarrier(sqlite3_file *f)
{
    REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int f_shmunmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int f_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp)
{
    *pp = NULL; /* no memory-mapped pages: every read goes via xRead */
    (void)f;
    (void)o;
    (void)n;
    return SQLITE_OK;
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{
    (void)f;
    (void)o;
    (void)p;
    return SQLITE_OK;
}

static const sqlite3_io_methods fault_io = {
    3,         f_close,  f_read,    f_write,       f_truncate,
    f_sync,    f_size,   f_lock,    f_unlock,      f_reserved,
    f_fcntl,   f_sector, f_devchar, f_shmmap,      f_shmlock,
    f_shmbarrier, f_shmunmap, f_fetch, f_unfetch,
};

static int f_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file,
                  int flags, int *out_flags)
{
    struct fault_file *ff = (struct fault_file *)file;
    int rc;
    (void)vfs;
    ff->real = (sqlite3_file *)(ff + 1);
    rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out_flags);
    ff->base.pMethods = ff->real->pMethods ? &fault_io : NULL;
    return rc;
}

static void fault_vfs_install(void)
{
    real_vfs = sqlite3_vfs_find(NULL);
    ASSERT(real_vfs != NULL);
    fault_vfs = *real_vfs;
    fault_vfs.iVersion = real_vfs->iVersion;
    fault_vfs.zName = "accel-fault";
    fault_vfs.szOsFile = (int)sizeof(struct fault_file) + real_vfs->szOsFile;
    fault_vfs.xOpen = f_open;
    ASSERT_EQ(sqlite3_vfs_register(&fault_vfs, 1), SQLITE_OK);
}

/* Over a committed base transaction (t0): open, then a transaction of two
 * rows (t1), then close, with faults armed at the countdown. Returns 1 if
 * a fault fired anywhere; *out_in_tx says whether one fired before the
 * commit returned. */
static int fault_round(const char *path, int countdown, int persistent,
                       enum accel_err *out_err, int *out_in_tx)
{
    struct store *s;
    struct store_alloc a = mk_alloc("t0000001", "GPU-a", 1);
    struct store_alloc b = mk_alloc("t0000001", "GPU-b", 1);
    enum accel_err err;
    char *cause = NULL;
    fault_countdown = countdown;
    fault_persistent = persistent;
    fault_fired = 0;
    *out_in_tx = 0;
    err = store_open(path, &s, &cause);
    if (err != ACCEL_OK) {
        ASSERT(cause != NULL && strstr(cause, path) != NULL);
        free(cause);
        goto done;
    }
    err = store_begin(s);
    if (err == ACCEL_OK)
        err = store_alloc_put(s, &a);
    if (err == ACCEL_OK)
        err = store_alloc_put(s, &b);
    if (err == ACCEL_OK)
        err = store_commit(s);
    *out_in_tx = fault_fired;
    if (err != ACCEL_OK) {
        ASSERT(store_errmsg(s)[0] != '\0' || err == ACCEL_EINVAL);
        /* the transaction is gone: a put now is refused */
        ASSERT_EQ(store_alloc_put(s, &a), ACCEL_EINVAL);
    }
    store_close(s);
done:
    fault_countdown = -1;
    *out_err = err;
    return fault_fired;
}

static void fault_prepare(const char *path)
{
    struct store *s = open_ok(path);
    struct store_alloc a = mk_alloc("t0000000", "GPU-a", 0);
    struct store_alloc b = mk_alloc("t0000000", "GPU-b", 0);
    struct store_app a0 = mk_app("t0000000"), a1 = mk_app("t0000001");
    ASSERT_EQ(store_begin(s), ACCEL_OK);
    ASSERT_EQ(store_app_put(s, &a0), ACCEL_OK); /* the apps of both pairs */
    ASSERT_EQ(store_app_put(s, &a1), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &a), ACCEL_OK);
    ASSERT_EQ(store_alloc_put(s, &b), ACCEL_OK);
    ASSERT_EQ(store_commit(s), ACCEL_OK);
    store_close(s);
}

static void fault_io_run(int persistent)
{
    int n, fired = 1, failures = 0;
    fault_vfs_install();
    for (n = 0; fired && n < 500; n++) {
        char *path = tmp_db();
        enum accel_err err;
        int complete, in_tx;
        fault_prepare(path);
        fired = fault_round(path, n, persistent, &err, &in_tx);
        if (in_tx && err == ACCEL_OK && persistent)
            FAIL_AT_("countdown %d: a write failed yet commit said OK", n);
        if (err != ACCEL_OK) {
            failures++;
            ASSERT(err == ACCEL_EIO || err == ACCEL_ESTORE ||
                   err == ACCEL_ESTORE_CORRUPT);
        }
        /* consistent afterwards: t0 whole, t1 whole or absent */
        complete = check_pairs(path, 0);
        if (err == ACCEL_OK)
            ASSERT_EQ(complete, 2);
        free(path);
    }
    ASSERT(!fired); /* reached a countdown with no fault left to fire */
    ASSERT_GT(failures, 0);
    fprintf(stderr, "%d fault points, %d failed transactions\n", n,
            failures);
}

TEST(store_fault_io_persistent)
{
    fault_io_run(1);
}

TEST(store_fault_io_transient)
{
    fault_io_run(0);
}

/*
 * An allocator that fails: after malloc_countdown successful calls to
 * xMalloc/xRealloc, calls fail (all of them if malloc_persistent, else
 * only one). SQLite's own allocations only; the store's xmalloc is the
 * daemon's abort-on-exhaustion policy and is not exercised here.
 */
static sqlite3_mem_methods real_mem;
static int malloc_countdown = -1;
static int malloc_persistent;
static int malloc_fired;

static int malloc_fail_now(void)
{
    if (malloc_countdown < 0)
        return 0;
    if (malloc_countdown == 0) {
        malloc_fired = 1;
        if (!malloc_persistent)
            malloc_countdown = -1;
        return 1;
    }
    malloc_countdown--;
    return 0;
}

static void *m_malloc(int n)
{
    return malloc_fail_now() ? NULL : real_mem.xMalloc(n);
}

static void *m_realloc(void *p, int n)
{
    return malloc_fail_now() ? NULL : real_mem.xRealloc(p, n);
}

static void malloc_install(void)
{
    sqlite3_mem_methods m;
    ASSERT_EQ(sqlite3_shutdown(), SQLITE_OK);
    ASSERT_EQ(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &real_mem), SQLITE_OK);
    m = real_mem;
    m.xMalloc = m_malloc;
    m.xRealloc = m_realloc;
    ASSERT_EQ(sqlite3_config(SQLITE_CONFIG_MALLOC, &m), SQLITE_OK);
    ASSERT_EQ(sqlite3_initialize(), SQLITE_OK);
}

static void fault_malloc_run(int persistent)
{
    int n, failures = 0, fired = 1;
    malloc_install();
    for (n = 0; fired && n < 5000; n += 1 + n / 50) {
        char *path = tmp_db();
        struct store *s = NULL;
        char *cause = NULL;
        struct store_alloc a = mk_alloc("t0000001", "GPU-a", 1);
        struct store_alloc b = mk_alloc("t0000001", "GPU-b", 1);
        enum accel_err err;
        fault_prepare(path);
        malloc_countdown = n;
        malloc_persistent = persistent;
        malloc_fired = 0;
        err = store_open(path, &s, &cause);
        if (err == ACCEL_OK) {
            err = store_begin(s);
            err = err ? err : store_alloc_put(s, &a);
            err = err ? err : store_alloc_put(s, &b);
            err = err ? err : store_commit(s);
            if (err != ACCEL_OK)
                ASSERT_EQ(store_alloc_put(s, &a), ACCEL_EINVAL);
            store_close(s);
        } else {
            ASSERT(cause != NULL);
            free(cause);
        }
        fired = malloc_fired;
        malloc_countdown = -1;
        if (err != ACCEL_OK) {
            failures++;
            if (err != ACCEL_ENOMEM && err != ACCEL_ESTORE &&
                err != ACCEL_EIO)
                FAIL_AT_("countdown %d: %s", n, accel_err_name(err));
        }
        if (check_pairs(path, 0) != 2)
            ASSERT_NE(err, ACCEL_OK);
        free(path);
    }
    ASSERT(!fired);
    ASSERT_GT(failures, 0);
    fprintf(stderr, "%d malloc fault points, %d failed\n", n, failures);
}

TEST(store_fault_malloc_transient)
{
    fault_malloc_run(0);
}

TEST(store_fault_malloc_persistent)
{
    fault_malloc_run(1);
}

#define STORE_TESTS(XX)                                                        \
    XX(store_open_create)                                                      \
    XX(store_migrate_v2_keeps_users_adds_identities)                           \
    XX(store_first_start_only_when_absent)                                     \
    XX(store_refuse_empty_file)                                                \
    XX(store_migrate_v3_adds_user_limits)                                      \
    XX(store_open_missing_dir_fails)                                           \
    XX(store_refuse_newer)                                                     \
    XX(store_refuse_random_bytes)                                              \
    XX(store_refuse_truncated)                                                 \
    XX(store_refuse_damaged_page)                                              \
    XX(store_refuse_foreign_db)                                                \
    XX(store_roundtrip_every_row)                                              \
    XX(store_put_replaces)                                                     \
    XX(store_deletes_roundtrip)                                                \
    XX(store_rollback_leaves_nothing)                                          \
    XX(store_failure_rolls_back_whole_tx)                                      \
    XX(store_alloc_unique_app_device)                                          \
    XX(store_events_retention)                                                 \
    XX(store_events_filters)                                                   \
    XX(store_event_inside_tx_rolls_back)                                       \
    XX(store_refuse_undecodable_rows)                                          \
    XX(store_repair_drops_what_does_not_decode)                                \
    XX(store_kill9_mid_stream)                                                 \
    XX(store_busy_second_writer)                                               \
    XX(store_readonly_file)                                                    \
    XX(store_fault_io_persistent)                                              \
    XX(store_fault_io_transient)                                               \
    XX(store_fault_malloc_transient)                                           \
    XX(store_fault_malloc_persistent)

TEST_MAIN(STORE_TESTS)
