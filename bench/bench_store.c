/* SPDX-License-Identifier: MIT */
/*
 * bench_store.c: durable binds through the store against a bare SQLite
 * loop, in the same run, on one disk (SPEC 11: the API must
 * reach at least half the bare rate; the store is the floor under it).
 *
 *   bench_store [dir] [n]      dir defaults to /tmp, n to 2000
 *
 * bare:  one prepared "INSERT allocation row" + COMMIT per op, WAL,
 *        synchronous=FULL, on its own file.
 * store: store_begin, store_alloc_put, store_app_put, store_commit per op
 *        (what a bind writes), on another file in the same directory.
 * The two loops alternate in four slices each so that drift of the disk
 * hits both alike. Prints ops/s and the ratio.
 */
#include "common/accel_setup.h"
#include "daemon/store/store.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

#define SLICES 4

struct bare {
    sqlite3 *db;
    sqlite3_stmt *begin, *insert, *commit;
};

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_store: %s: %s\n", what, msg);
    exit(1);
}

static void bare_open(struct bare *b, const char *path)
{
    const char *schema =
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
        "CREATE TABLE allocations (app TEXT NOT NULL, owner TEXT NOT NULL,"
        " type TEXT NOT NULL, node TEXT NOT NULL, device TEXT NOT NULL,"
        " memory INTEGER NOT NULL, PRIMARY KEY (app, device));";
    if (sqlite3_open(path, &b->db) != SQLITE_OK ||
        sqlite3_exec(b->db, schema, NULL, NULL, NULL) != SQLITE_OK)
        die(path, sqlite3_errmsg(b->db));
    if (sqlite3_prepare_v2(b->db, "BEGIN IMMEDIATE", -1, &b->begin, NULL) ||
        sqlite3_prepare_v2(b->db,
                           "INSERT INTO allocations VALUES (?1, 'alice', "
                           "'nvidia', 'node1', ?2, ?3)",
                           -1, &b->insert, NULL) ||
        sqlite3_prepare_v2(b->db, "COMMIT", -1, &b->commit, NULL))
        die("prepare", sqlite3_errmsg(b->db));
}

static void bare_step(struct bare *b, sqlite3_stmt *st)
{
    if (sqlite3_step(st) != SQLITE_DONE)
        die("step", sqlite3_errmsg(b->db));
    sqlite3_reset(st);
}

static void bare_run(struct bare *b, int from, int to)
{
    char app[32];
    for (int i = from; i < to; i++) {
        snprintf(app, sizeof(app), "app-%07d", i);
        bare_step(b, b->begin);
        sqlite3_bind_text(b->insert, 1, app, -1, SQLITE_STATIC);
        sqlite3_bind_text(b->insert, 2, "GPU-1", -1, SQLITE_STATIC);
        sqlite3_bind_int64(b->insert, 3, i);
        bare_step(b, b->insert);
        bare_step(b, b->commit);
    }
}

static void store_run(struct store *s, int from, int to)
{
    char app[32];
    for (int i = from; i < to; i++) {
        struct store_alloc a = {app, "alice", "nvidia", "node1", "GPU-1",
                                (uint64_t)i};
        struct store_app p = {app, "alice", "running", NULL, "{}", "nvidia",
                              1, 2, 0, 0, -1};
        snprintf(app, sizeof(app), "app-%07d", i);
        if (store_begin(s) || store_alloc_put(s, &a) ||
            store_app_put(s, &p) || store_commit(s))
            die("store", store_errmsg(s));
    }
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 2000;
    char *tmpl = xasprintf("%s/accel-bench-store-XXXXXX", dir);
    char *d = mkdtemp(tmpl), *bare_path, *store_path, *cause = NULL;
    struct bare b = {0};
    struct store *s = NULL;
    uint64_t t_bare = 0, t_store = 0, t0;
    if (d == NULL || n < SLICES)
        die(dir, "cannot make a temporary directory (or n < 4)");
    bare_path = xasprintf("%s/bare.db", d);
    store_path = xasprintf("%s/accel.db", d);
    bare_open(&b, bare_path);
    if (store_open(store_path, &s, &cause) != ACCEL_OK)
        die("store_open", cause);
    for (int k = 0; k < SLICES; k++) {
        int from = (int)(n * k / SLICES), to = (int)(n * (k + 1) / SLICES);
        t0 = util_now_ns();
        bare_run(&b, from, to);
        t_bare += util_now_ns() - t0;
        t0 = util_now_ns();
        store_run(s, from, to);
        t_store += util_now_ns() - t0;
    }
    printf("dir %s, %ld ops each, sqlite %s\n", dir, n, sqlite3_libversion());
    printf("bare sqlite INSERT+COMMIT   %10.0f ops/s  %8.1f us/op\n",
           n * 1e9 / (double)t_bare, (double)t_bare / 1e3 / (double)n);
    printf("store bind (alloc+app put)  %10.0f ops/s  %8.1f us/op\n",
           n * 1e9 / (double)t_store, (double)t_store / 1e3 / (double)n);
    printf("ratio store/bare            %10.2f\n",
           (double)t_bare / (double)t_store);
    store_close(s);
    sqlite3_finalize(b.begin);
    sqlite3_finalize(b.insert);
    sqlite3_finalize(b.commit);
    sqlite3_close(b.db);
    for (int i = 0; i < 2; i++) {
        const char *p = i ? bare_path : store_path;
        char *w = xasprintf("%s-wal", p), *m = xasprintf("%s-shm", p);
        unlink(p);
        unlink(w);
        unlink(m);
        free(w);
        free(m);
    }
    rmdir(d);
    free(bare_path);
    free(store_path);
    free(tmpl);
    return 0;
}
