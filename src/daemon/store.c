/* SPDX-License-Identifier: MIT */
/*
 * store.c: the SQLite implementation of store.h (SPEC 9). One connection,
 * WAL, synchronous=FULL, foreign_keys=ON, a busy timeout, the schema version
 * in PRAGMA user_version and ordered migrations (migrations[] below, each in
 * its own transaction). Every statement is prepared once in store_open and
 * kept in the struct. SQLite result codes are translated into enum accel_err
 * here and nowhere else (STYLE 6); the last SQLite message is kept for logs.
 *
 * What it is not: a cache or a query engine. The daemon keeps its state in
 * memory; this file only writes rows through and reads them back at start.
 * See docs/internals/store.md for the schema and the durability argument.
 */
#include "common/accel_setup.h"
#include "daemon/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/util.h"

#define STORE_BUSY_TIMEOUT_MS 5000 /* default wait for another writer */
#define STORE_PRUNE_EVERY 64       /* events appended between two prunes */
#define STORE_APPLICATION_ID 0x61636365 /* "acce": PRAGMA application_id */

/*
 * Ordered migrations: migrations[i] takes the schema from version i to i+1.
 * Append only; never edit a step that has shipped. Each runs in its own
 * transaction together with the user_version bump.
 */
static const char *const migrations[] = {
    /* 0 -> 1: the initial schema. */
    "PRAGMA application_id = 1633903461;" /* STORE_APPLICATION_ID */
    "CREATE TABLE apps ("
    " name TEXT PRIMARY KEY NOT NULL,"
    " owner TEXT NOT NULL,"
    " state TEXT NOT NULL,"
    " reason TEXT,"
    " manifest TEXT NOT NULL,"
    " selected_type TEXT,"
    " created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL,"
    " pid INTEGER NOT NULL DEFAULT 0,"
    " pid_start INTEGER NOT NULL DEFAULT 0," /* uint64 stored as int64 */
    " exit_status INTEGER NOT NULL DEFAULT -1);"
    "CREATE TABLE allocations ("
    " app TEXT NOT NULL,"
    " owner TEXT NOT NULL,"
    " type TEXT NOT NULL,"
    " node TEXT NOT NULL,"
    " device TEXT NOT NULL,"
    " memory INTEGER NOT NULL," /* uint64 stored as int64 */
    " PRIMARY KEY (app, device));"
    "CREATE INDEX allocations_by_device ON allocations(node, device);"
    "CREATE TABLE devices ("
    " node TEXT NOT NULL,"
    " id TEXT NOT NULL,"
    " support TEXT NOT NULL,"
    " settings TEXT,"
    " PRIMARY KEY (node, id));"
    "CREATE TABLE nodes ("
    " name TEXT PRIMARY KEY NOT NULL,"
    " enabled INTEGER NOT NULL);"
    "CREATE TABLE users ("
    " name TEXT PRIMARY KEY NOT NULL,"
    " role TEXT NOT NULL,"
    " token_hash TEXT NOT NULL,"
    " created_ms INTEGER NOT NULL);"
    "CREATE TABLE events ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT," /* never reused */
    " ts_ms INTEGER NOT NULL,"
    " kind TEXT NOT NULL,"
    " app TEXT,"
    " node TEXT,"
    " device TEXT,"
    " message TEXT NOT NULL,"
    " data TEXT);"
    "CREATE INDEX events_by_app ON events(app, id);"
    "CREATE INDEX events_by_device ON events(device, id);"
    "CREATE INDEX events_by_kind ON events(kind, id);"
    "CREATE INDEX events_by_ts ON events(ts_ms);",
    /* 1 -> 2: fewer pages per durable change. Each page a commit dirties is
     * one more WAL frame written and synced; a bind used to dirty about 14
     * (two tables with a separate primary-key index each, an event in four
     * indexes, sqlite_sequence). apps and allocations become WITHOUT ROWID
     * (the primary key is the only b-tree), events drop AUTOINCREMENT (ids
     * still never repeat: pruning never deletes the newest event) and the
     * indexes that only served filtered queries (with at most 20,000 events
     * kept, scanning them by id costs milliseconds). */
    "CREATE TABLE apps2 ("
    " name TEXT PRIMARY KEY NOT NULL,"
    " owner TEXT NOT NULL,"
    " state TEXT NOT NULL,"
    " reason TEXT,"
    " manifest TEXT NOT NULL,"
    " selected_type TEXT,"
    " created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL,"
    " pid INTEGER NOT NULL DEFAULT 0,"
    " pid_start INTEGER NOT NULL DEFAULT 0,"
    " exit_status INTEGER NOT NULL DEFAULT -1) WITHOUT ROWID;"
    "INSERT INTO apps2 SELECT * FROM apps;"
    "DROP TABLE apps;"
    "ALTER TABLE apps2 RENAME TO apps;"
    "CREATE TABLE allocations2 ("
    " app TEXT NOT NULL,"
    " owner TEXT NOT NULL,"
    " type TEXT NOT NULL,"
    " node TEXT NOT NULL,"
    " device TEXT NOT NULL,"
    " memory INTEGER NOT NULL,"
    " PRIMARY KEY (app, device)) WITHOUT ROWID;"
    "INSERT INTO allocations2 SELECT * FROM allocations;"
    "DROP TABLE allocations;"
    "ALTER TABLE allocations2 RENAME TO allocations;"
    "CREATE TABLE events2 ("
    " id INTEGER PRIMARY KEY,"
    " ts_ms INTEGER NOT NULL,"
    " kind TEXT NOT NULL,"
    " app TEXT,"
    " node TEXT,"
    " device TEXT,"
    " message TEXT NOT NULL,"
    " data TEXT);"
    "INSERT INTO events2 SELECT * FROM events;"
    "DROP TABLE events;"
    "ALTER TABLE events2 RENAME TO events;",
    /* 2 -> 3: who an app runs as (SPEC 3). One Unix uid per accel user
     * name (the "shared" owner included), allocated by acceld from
     * --app-uid-range and kept for good: a name keeps its uid across
     * restarts, a removed user's row stays so that its files are never
     * handed to another name, and UNIQUE makes two names sharing a uid
     * impossible at the database level. Existing users keep their rows;
     * acceld allocates their uids at the next start. */
    "CREATE TABLE identities ("
    " name TEXT PRIMARY KEY NOT NULL,"
    " uid INTEGER NOT NULL UNIQUE) WITHOUT ROWID;",
};
#define STORE_SCHEMA_VERSION                                                   \
    ((int)(sizeof(migrations) / sizeof(migrations[0])))

#define EV_COLS "id, ts_ms, kind, app, node, device, message, data"

/* Every cached statement: XX(NAME, "SQL"). */
#define STORE_STMT_MAP(XX)                                                     \
    XX(BEGIN, "BEGIN IMMEDIATE")                                               \
    XX(COMMIT, "COMMIT")                                                       \
    XX(ROLLBACK, "ROLLBACK")                                                   \
    XX(APP_PUT,                                                                \
       "INSERT OR REPLACE INTO apps (name, owner, state, reason, manifest,"    \
       " selected_type, created_ms, updated_ms, pid, pid_start, exit_status)"  \
       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")               \
    XX(APP_DEL, "DELETE FROM apps WHERE name = ?1")                            \
    XX(ALLOC_PUT,                                                              \
       "INSERT OR REPLACE INTO allocations (app, owner, type, node, device,"   \
       " memory) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")                             \
    XX(ALLOC_DEL_APP, "DELETE FROM allocations WHERE app = ?1")                \
    XX(ALLOC_DEL, "DELETE FROM allocations WHERE app = ?1 AND device = ?2")    \
    XX(DEVICE_PUT, "INSERT OR REPLACE INTO devices (node, id, support,"        \
                   " settings) VALUES (?1, ?2, ?3, ?4)")                       \
    XX(NODE_PUT, "INSERT OR REPLACE INTO nodes (name, enabled)"                \
                 " VALUES (?1, ?2)")                                           \
    XX(USER_PUT, "INSERT OR REPLACE INTO users (name, role, token_hash,"       \
                 " created_ms) VALUES (?1, ?2, ?3, ?4)")                       \
    XX(USER_DEL, "DELETE FROM users WHERE name = ?1")                          \
    XX(IDENTITY_PUT, "INSERT INTO identities (name, uid) VALUES (?1, ?2)")     \
    XX(EVENT_ADD, "INSERT INTO events (ts_ms, kind, app, node, device,"        \
                  " message, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")       \
    XX(EVENT_PRUNE, "DELETE FROM events WHERE id <= ?1")                       \
    XX(LOAD_APPS, "SELECT name, owner, state, reason, manifest,"               \
                  " selected_type, created_ms, updated_ms, pid, pid_start,"    \
                  " exit_status FROM apps ORDER BY name")                      \
    XX(LOAD_ALLOCS, "SELECT app, owner, type, node, device, memory"            \
                    " FROM allocations ORDER BY app, device")                  \
    XX(LOAD_DEVICES, "SELECT node, id, support, settings FROM devices"         \
                     " ORDER BY node, id")                                     \
    XX(LOAD_NODES, "SELECT name, enabled FROM nodes ORDER BY name")            \
    XX(LOAD_USERS, "SELECT name, role, token_hash, created_ms FROM users"      \
                   " ORDER BY name")                                           \
    XX(LOAD_IDENTITIES, "SELECT name, uid FROM identities ORDER BY uid")       \
    XX(READ_BEGIN, "BEGIN")                                                    \
    XX(READ_END, "COMMIT")                                                     \
    /* Event queries, one per combination of the optional string filters */   \
    /* (bit 0 app, bit 1 device, bit 2 kind) so each can use its index. */    \
    XX(EVQ0, "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2"    \
             " ORDER BY id LIMIT ?6")                                          \
    XX(EVQ1, "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2"    \
             " AND app = ?3 ORDER BY id LIMIT ?6")                             \
    XX(EVQ2, "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2"    \
             " AND device = ?4 ORDER BY id LIMIT ?6")                          \
    XX(EVQ3, "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2"    \
             " AND app = ?3 AND device = ?4 ORDER BY id LIMIT ?6")             \
    XX(EVQ4, "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2"    \
             " AND kind = ?5 ORDER BY id LIMIT ?6")                            \
    XX(EVQ5, "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2"    \
             " AND app = ?3 AND kind = ?5 ORDER BY id LIMIT ?6")               \
    XX(EVQ6, "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2"    \
             " AND device = ?4 AND kind = ?5 ORDER BY id LIMIT ?6")            \
    XX(EVQ7, "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2"    \
             " AND app = ?3 AND device = ?4 AND kind = ?5 ORDER BY id"         \
             " LIMIT ?6")

enum stmt_id {
#define STMT_ENUM_(name, sql) ST_##name,
    STORE_STMT_MAP(STMT_ENUM_)
#undef STMT_ENUM_
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
#define STMT_SQL_(name, sql) sql,
    STORE_STMT_MAP(STMT_SQL_)
#undef STMT_SQL_
};

struct store {
    sqlite3 *db;                  /* the one connection */
    char *path;                   /* file name, for messages */
    sqlite3_stmt *stmt[ST_COUNT]; /* prepared once at open */
    bool in_tx;                   /* between store_begin and commit */
    int prune_countdown;          /* appends until the next prune */
    int wal_fd;                   /* the WAL, for store_sync; -1 = none */
    bool group_commit;            /* synchronous=NORMAL + store_sync */
    char errmsg[256];             /* last SQLite message, "" if none */
};

/* The one place where SQLite result codes become accel codes. */
static enum accel_err map_rc(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return ACCEL_OK;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return ACCEL_EBUSY;
    case SQLITE_NOMEM:
        return ACCEL_ENOMEM;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return ACCEL_ESTORE_CORRUPT;
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
        return ACCEL_EIO;
    case SQLITE_CONSTRAINT:
        return ACCEL_ECONFLICT;
    default:
        return ACCEL_ESTORE;
    }
}

/* Remember SQLite's message for rc (store_errmsg) and translate rc. */
static enum accel_err fail_rc(struct store *s, int rc)
{
    const char *m = s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
    snprintf(s->errmsg, sizeof(s->errmsg), "%s (sqlite rc %d)", m, rc);
    return map_rc(rc);
}

static enum accel_err fail_msg(struct store *s, enum accel_err err,
                               const char *msg)
{
    util_strlcpy(s->errmsg, msg, sizeof(s->errmsg));
    return err;
}

const char *store_errmsg(const struct store *s)
{
    return s ? s->errmsg : "";
}

/* Run a statement that returns no rows, then reset it. */
static int step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int bind_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v == NULL)
        return sqlite3_bind_null(st, i);
    return sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

/* Roll back the open transaction, if SQLite has not done so already. */
static void rollback_quiet(struct store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        step_done(s->stmt[ST_ROLLBACK]);
    s->in_tx = false;
    s->prune_countdown = 0; /* a rolled-back prune is redone next time */
}

/*
 * Finish a write inside a transaction: on failure remember the message, roll
 * the whole transaction back and translate rc.
 */
static enum accel_err tx_result(struct store *s, int rc)
{
    enum accel_err err;
    if (rc == SQLITE_OK)
        return ACCEL_OK;
    err = fail_rc(s, rc);
    rollback_quiet(s);
    return err;
}

static enum accel_err need_tx(struct store *s)
{
    if (!s->in_tx)
        return fail_msg(s, ACCEL_EINVAL,
                        "store write outside a transaction (or after a "
                        "failure rolled it back)");
    return ACCEL_OK;
}

/* ------------------------------------------------------------------ open */

/* Run one SQL text (no rows wanted) on the raw connection. */
static int exec_sql(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* Read one integer from a single-row query (a PRAGMA). */
static int query_int(sqlite3 *db, const char *sql, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        *out = 0;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Read one text from a single-row query into buf (a PRAGMA). */
static int query_text(sqlite3 *db, const char *sql, char *buf, size_t len)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    buf[0] = '\0';
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        util_strlcpy(buf, t ? t : "", len);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/*
 * Look at the file before SQLite does: an existing non-empty file must start
 * with the SQLite header. A file that does not is refused untouched.
 */
static enum accel_err check_header(const char *path, char **cause)
{
    static const char magic[16] = "SQLite format 3";
    char head[100];
    struct stat sb;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ACCEL_OK; /* missing (created below) or unreadable */
    if (fstat(fd, &sb) != 0 || sb.st_size == 0) {
        close(fd);
        return ACCEL_OK;
    }
    n = read(fd, head, sizeof(head));
    close(fd);
    if (n == (ssize_t)sizeof(head) && memcmp(head, magic, 16) == 0)
        return ACCEL_OK;
    *cause = xasprintf("%s is not an SQLite database or is corrupt (%jd "
                       "bytes, bad header); refusing to open it, the file "
                       "is left as it is",
                       path, (intmax_t)sb.st_size);
    return ACCEL_ESTORE_CORRUPT;
}

/* Turn an SQLite failure during open into (code, cause). */
static enum accel_err open_fail(sqlite3 *db, const char *path, int rc,
                                const char *what, char **cause)
{
    enum accel_err err = map_rc(rc);
    const char *m = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    if (err == ACCEL_ESTORE_CORRUPT)
        *cause = xasprintf("%s is not an SQLite database or is corrupt (%s "
                           "while %s); refusing to open it, the file is "
                           "left as it is",
                           path, m, what);
    else if (err == ACCEL_EBUSY)
        *cause = xasprintf("the state database %s is in use by another "
                           "process (is another acceld running on this data "
                           "directory?)",
                           path);
    else
        *cause = xasprintf("cannot open the state database %s: %s while %s",
                           path, m, what);
    if (err == ACCEL_OK)
        err = ACCEL_ESTORE;
    return err;
}

/*
 * Read-only checks before anything is written: the schema version is one
 * this build knows, the file is ours, and PRAGMA quick_check says "ok".
 */
static enum accel_err check_existing(sqlite3 *db, const char *path,
                                     int64_t *out_version, char **cause)
{
    int64_t version = 0, appid = 0, tables = 0;
    char qc[256];
    int rc = query_int(db, "PRAGMA user_version", &version);
    if (rc != SQLITE_OK)
        return open_fail(db, path, rc, "reading user_version", cause);
    if (version > STORE_SCHEMA_VERSION) {
        *cause = xasprintf("%s was written by a newer accel (schema %jd, "
                           "this build knows %d); refusing to open it",
                           path, (intmax_t)version, STORE_SCHEMA_VERSION);
        return ACCEL_ESTORE_NEWER;
    }
    rc = query_int(db, "PRAGMA application_id", &appid);
    if (rc == SQLITE_OK)
        rc = query_int(db, "SELECT count(*) FROM sqlite_master", &tables);
    if (rc != SQLITE_OK)
        return open_fail(db, path, rc, "reading the schema", cause);
    if ((appid != 0 && appid != STORE_APPLICATION_ID) ||
        (version == 0 && tables != 0)) {
        *cause = xasprintf("%s is an SQLite database of another program "
                           "(application_id %jd, schema %jd, %jd tables); "
                           "refusing to open it",
                           path, (intmax_t)appid, (intmax_t)version,
                           (intmax_t)tables);
        return ACCEL_ESTORE_CORRUPT;
    }
    rc = query_text(db, "PRAGMA quick_check", qc, sizeof(qc));
    if (rc != SQLITE_OK)
        return open_fail(db, path, rc, "running quick_check", cause);
    if (strcmp(qc, "ok") != 0) {
        *cause = xasprintf("%s is corrupt (quick_check: %s); refusing to "
                           "open it, the file is left as it is",
                           path, qc);
        return ACCEL_ESTORE_CORRUPT;
    }
    *out_version = version;
    return ACCEL_OK;
}

static enum accel_err set_pragmas(sqlite3 *db, const char *path, char **cause)
{
    char mode[32];
    int rc = query_text(db, "PRAGMA journal_mode=WAL", mode, sizeof(mode));
    if (rc != SQLITE_OK)
        return open_fail(db, path, rc, "setting journal_mode=WAL", cause);
    if (strcmp(mode, "wal") != 0) {
        *cause = xasprintf("cannot open the state database %s: journal_mode "
                           "is %s, not wal (no shared memory here?)",
                           path, mode);
        return ACCEL_ESTORE;
    }
    rc = exec_sql(db, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;");
    if (rc != SQLITE_OK)
        return open_fail(db, path, rc, "setting pragmas", cause);
    return ACCEL_OK;
}

/*
 * Apply migrations[from..] in order, each in its own transaction. The
 * version is read again under the write lock, so two processes opening the
 * same file at once do not both migrate.
 */
static enum accel_err migrate(sqlite3 *db, const char *path, char **cause)
{
    for (;;) {
        int64_t v = 0;
        char *sql;
        int rc = exec_sql(db, "BEGIN IMMEDIATE");
        if (rc != SQLITE_OK)
            return open_fail(db, path, rc, "starting a migration", cause);
        rc = query_int(db, "PRAGMA user_version", &v);
        if (rc != SQLITE_OK || v >= STORE_SCHEMA_VERSION || v < 0) {
            exec_sql(db, "ROLLBACK");
            if (rc != SQLITE_OK)
                return open_fail(db, path, rc, "reading user_version",
                                 cause);
            return ACCEL_OK;
        }
        sql = xasprintf("%s; PRAGMA user_version = %jd;", migrations[v],
                        (intmax_t)v + 1);
        rc = exec_sql(db, sql);
        free(sql);
        if (rc == SQLITE_OK)
            rc = exec_sql(db, "COMMIT");
        if (rc != SQLITE_OK) {
            enum accel_err err =
                open_fail(db, path, rc, "migrating the schema", cause);
            if (!sqlite3_get_autocommit(db))
                exec_sql(db, "ROLLBACK");
            return err;
        }
    }
}

static enum accel_err prepare_all(struct store *s, char **cause)
{
    for (int i = 0; i < ST_COUNT; i++) {
        int rc = sqlite3_prepare_v3(s->db, stmt_sql[i], -1,
                                    SQLITE_PREPARE_PERSISTENT, &s->stmt[i],
                                    NULL);
        if (rc != SQLITE_OK)
            return open_fail(s->db, s->path, rc, "preparing statements",
                             cause);
    }
    return ACCEL_OK;
}

enum accel_err store_open(const char *path, struct store **out, char **cause)
{
    enum accel_err result = ACCEL_ESTORE;
    struct store *s = NULL;
    int64_t version = 0;
    int rc;

    *cause = NULL;
    result = check_header(path, cause);
    if (result != ACCEL_OK)
        goto out;
    s = xcalloc(1, sizeof(*s));
    s->path = xstrdup(path);
    s->wal_fd = -1;
    rc = sqlite3_open_v2(path, &s->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                             SQLITE_OPEN_NOMUTEX,
                         NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_extended_result_codes(s->db, 1);
    if (rc == SQLITE_OK)
        rc = sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS);
    if (rc != SQLITE_OK) {
        result = open_fail(s->db, path, rc, "opening", cause);
        goto out;
    }
    result = check_existing(s->db, path, &version, cause);
    if (result == ACCEL_OK)
        result = set_pragmas(s->db, path, cause);
    if (result == ACCEL_OK)
        result = migrate(s->db, path, cause);
    if (result == ACCEL_OK)
        result = prepare_all(s, cause);
    if (result != ACCEL_OK)
        goto out;
    *out = s;
    s = NULL;
    result = ACCEL_OK;
out:
    store_close(s);
    return result;
}

void store_close(struct store *s)
{
    if (s == NULL)
        return;
    if (s->db && s->in_tx)
        rollback_quiet(s);
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(s->stmt[i]);
    sqlite3_close_v2(s->db);
    if (s->wal_fd >= 0)
        close(s->wal_fd);
    free(s->path);
    free(s);
}

void store_set_busy_timeout(struct store *s, int ms)
{
    sqlite3_busy_timeout(s->db, ms);
}

int store_schema_version(void)
{
    return STORE_SCHEMA_VERSION;
}

/* ---------------------------------------------------------- transactions */

enum accel_err store_begin(struct store *s)
{
    int rc;
    if (s->in_tx)
        return fail_msg(s, ACCEL_EINVAL, "store_begin inside a transaction");
    rc = step_done(s->stmt[ST_BEGIN]);
    if (rc != SQLITE_OK) {
        enum accel_err err = fail_rc(s, rc);
        rollback_quiet(s);
        return err;
    }
    s->in_tx = true;
    return ACCEL_OK;
}

enum accel_err store_commit(struct store *s)
{
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    err = tx_result(s, step_done(s->stmt[ST_COMMIT]));
    s->in_tx = false;
    return err;
}

enum accel_err store_set_group_commit(struct store *s, bool on)
{
    /* acceld is the only writer of its database: exclusive locking drops
     * the file-lock system calls of every transaction and makes a second
     * acceld on the same data directory fail instead of interleaving */
    int rc = exec_sql(s->db, on ? "PRAGMA synchronous=NORMAL;"
                                  "PRAGMA locking_mode=EXCLUSIVE"
                                : "PRAGMA synchronous=FULL");
    if (rc != SQLITE_OK)
        return map_rc(rc);
    s->group_commit = on;
    return ACCEL_OK;
}

enum accel_err store_sync(struct store *s)
{
    if (!s->group_commit)
        return ACCEL_OK;
    if (s->wal_fd < 0) {
        char *wal = xasprintf("%s-wal", s->path);
        s->wal_fd = open(wal, O_RDONLY | O_CLOEXEC);
        free(wal);
        if (s->wal_fd < 0)
            return errno == ENOENT ? ACCEL_OK : ACCEL_EIO; /* nothing yet */
    }
    /* fsync of any descriptor flushes the file: every WAL frame written
     * before this call is on disk when it returns */
    return fdatasync(s->wal_fd) == 0 ? ACCEL_OK : ACCEL_EIO;
}

void store_rollback(struct store *s)
{
    if (s->in_tx)
        rollback_quiet(s);
}

/* ------------------------------------------------------------ row writes */

enum accel_err store_app_put(struct store *s, const struct store_app *a)
{
    sqlite3_stmt *st = s->stmt[ST_APP_PUT];
    int rc;
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    if (!a->name || !a->owner || !a->state || !a->manifest) {
        rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "app row without name, owner, "
                                         "state or manifest");
    }
    rc = bind_text(st, 1, a->name);
    rc = rc ? rc : bind_text(st, 2, a->owner);
    rc = rc ? rc : bind_text(st, 3, a->state);
    rc = rc ? rc : bind_text(st, 4, a->reason);
    rc = rc ? rc : bind_text(st, 5, a->manifest);
    rc = rc ? rc : bind_text(st, 6, a->selected_type);
    rc = rc ? rc : sqlite3_bind_int64(st, 7, a->created_ms);
    rc = rc ? rc : sqlite3_bind_int64(st, 8, a->updated_ms);
    rc = rc ? rc : sqlite3_bind_int64(st, 9, a->pid);
    rc = rc ? rc : sqlite3_bind_int64(st, 10, (int64_t)a->pid_start);
    rc = rc ? rc : sqlite3_bind_int64(st, 11, a->exit_status);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

/* Run a cached statement with up to two text keys inside the transaction. */
static enum accel_err write_keys(struct store *s, enum stmt_id id,
                                 const char *k1, const char *k2)
{
    sqlite3_stmt *st = s->stmt[id];
    int rc;
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    if (k1 == NULL) {
        rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "store delete without a key");
    }
    rc = bind_text(st, 1, k1);
    if (rc == SQLITE_OK && k2)
        rc = bind_text(st, 2, k2);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

enum accel_err store_app_delete(struct store *s, const char *name)
{
    return write_keys(s, ST_APP_DEL, name, NULL);
}

enum accel_err store_alloc_put(struct store *s, const struct store_alloc *a)
{
    sqlite3_stmt *st = s->stmt[ST_ALLOC_PUT];
    int rc;
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    if (!a->app || !a->owner || !a->type || !a->node || !a->device) {
        rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "allocation row with a NULL field");
    }
    rc = bind_text(st, 1, a->app);
    rc = rc ? rc : bind_text(st, 2, a->owner);
    rc = rc ? rc : bind_text(st, 3, a->type);
    rc = rc ? rc : bind_text(st, 4, a->node);
    rc = rc ? rc : bind_text(st, 5, a->device);
    rc = rc ? rc : sqlite3_bind_int64(st, 6, (int64_t)a->memory);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

enum accel_err store_alloc_delete_app(struct store *s, const char *app)
{
    return write_keys(s, ST_ALLOC_DEL_APP, app, NULL);
}

enum accel_err store_alloc_delete(struct store *s, const char *app,
                                  const char *device)
{
    if (device == NULL && s->in_tx) {
        rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "allocation delete without device");
    }
    return write_keys(s, ST_ALLOC_DEL, app, device);
}

enum accel_err store_device_put(struct store *s, const struct store_device *d)
{
    sqlite3_stmt *st = s->stmt[ST_DEVICE_PUT];
    int rc;
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    if (!d->node || !d->id || !d->support) {
        rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "device row with a NULL key");
    }
    rc = bind_text(st, 1, d->node);
    rc = rc ? rc : bind_text(st, 2, d->id);
    rc = rc ? rc : bind_text(st, 3, d->support);
    rc = rc ? rc : bind_text(st, 4, d->settings);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

enum accel_err store_node_put(struct store *s, const struct store_node *n)
{
    sqlite3_stmt *st = s->stmt[ST_NODE_PUT];
    int rc;
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    if (!n->name) {
        rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "node row without a name");
    }
    rc = bind_text(st, 1, n->name);
    rc = rc ? rc : sqlite3_bind_int(st, 2, n->enabled ? 1 : 0);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

enum accel_err store_user_put(struct store *s, const struct store_user *u)
{
    sqlite3_stmt *st = s->stmt[ST_USER_PUT];
    int rc;
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    if (!u->name || !u->role || !u->token_hash) {
        rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "user row with a NULL field");
    }
    rc = bind_text(st, 1, u->name);
    rc = rc ? rc : bind_text(st, 2, u->role);
    rc = rc ? rc : bind_text(st, 3, u->token_hash);
    rc = rc ? rc : sqlite3_bind_int64(st, 4, u->created_ms);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

enum accel_err store_user_delete(struct store *s, const char *name)
{
    return write_keys(s, ST_USER_DEL, name, NULL);
}

enum accel_err store_identity_put(struct store *s,
                                  const struct store_identity *id)
{
    sqlite3_stmt *st = s->stmt[ST_IDENTITY_PUT];
    int rc;
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    if (!id->name || id->uid <= 0) {
        rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "identity row without a name or "
                                         "with uid <= 0");
    }
    rc = bind_text(st, 1, id->name);
    rc = rc ? rc : sqlite3_bind_int64(st, 2, id->uid);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

/* ---------------------------------------------------------------- events */

/* Insert the row and, every STORE_PRUNE_EVERY appends, prune; in a tx. */
static int event_insert(struct store *s, const struct store_event *e,
                        int64_t keep_max, int64_t *out_id)
{
    sqlite3_stmt *st = s->stmt[ST_EVENT_ADD];
    int64_t id;
    int rc = sqlite3_bind_int64(st, 1, e->ts_ms);
    rc = rc ? rc : bind_text(st, 2, e->kind);
    rc = rc ? rc : bind_text(st, 3, e->app);
    rc = rc ? rc : bind_text(st, 4, e->node);
    rc = rc ? rc : bind_text(st, 5, e->device);
    rc = rc ? rc : bind_text(st, 6, e->message);
    rc = rc ? rc : bind_text(st, 7, e->data);
    rc = rc ? rc : step_done(st);
    if (rc != SQLITE_OK)
        return rc;
    id = sqlite3_last_insert_rowid(s->db);
    if (keep_max > 0 && --s->prune_countdown <= 0 && id > keep_max) {
        st = s->stmt[ST_EVENT_PRUNE];
        rc = sqlite3_bind_int64(st, 1, id - keep_max);
        rc = rc ? rc : step_done(st);
        if (rc != SQLITE_OK)
            return rc;
        s->prune_countdown = STORE_PRUNE_EVERY;
    }
    *out_id = id;
    return SQLITE_OK;
}

enum accel_err store_event_append(struct store *s, const struct store_event *e,
                                  int64_t keep_max, int64_t *out_id)
{
    bool own_tx = !s->in_tx;
    int64_t id = 0;
    enum accel_err err;
    if (e->kind == NULL || e->message == NULL) {
        if (s->in_tx)
            rollback_quiet(s);
        return fail_msg(s, ACCEL_EINVAL, "event without kind or message");
    }
    if (own_tx) {
        err = store_begin(s);
        if (err != ACCEL_OK)
            return err;
    }
    err = tx_result(s, event_insert(s, e, keep_max, &id));
    if (err == ACCEL_OK && own_tx)
        err = store_commit(s);
    if (err == ACCEL_OK && out_id)
        *out_id = id;
    return err;
}

static void event_from_row(sqlite3_stmt *st, struct store_event *e)
{
    e->id = sqlite3_column_int64(st, 0);
    e->ts_ms = sqlite3_column_int64(st, 1);
    e->kind = col_text(st, 2);
    e->app = col_text(st, 3);
    e->node = col_text(st, 4);
    e->device = col_text(st, 5);
    e->message = col_text(st, 6);
    e->data = col_text(st, 7);
}

enum accel_err store_events_query(struct store *s,
                                  const struct store_event_filter *f,
                                  enum accel_err (*cb)(void *ctx,
                                                       const struct store_event *e),
                                  void *ctx)
{
    int variant = (f->app ? 1 : 0) | (f->device ? 2 : 0) | (f->kind ? 4 : 0);
    sqlite3_stmt *st = s->stmt[ST_EVQ0 + variant];
    enum accel_err err = ACCEL_OK;
    int rc = sqlite3_bind_int64(st, 1, f->since_id);
    rc = rc ? rc : sqlite3_bind_int64(st, 2, f->since_ms);
    if (rc == SQLITE_OK && f->app)
        rc = bind_text(st, 3, f->app);
    if (rc == SQLITE_OK && f->device)
        rc = bind_text(st, 4, f->device);
    if (rc == SQLITE_OK && f->kind)
        rc = bind_text(st, 5, f->kind);
    rc = rc ? rc : sqlite3_bind_int64(st, 6, f->limit > 0 ? f->limit : -1);
    while (rc == SQLITE_OK) {
        struct store_event e;
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW)
            break;
        event_from_row(st, &e);
        rc = SQLITE_OK;
        err = cb(ctx, &e);
        if (err != ACCEL_OK)
            break;
    }
    if (rc != SQLITE_OK && rc != SQLITE_DONE)
        err = fail_rc(s, rc);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return err;
}

/* ------------------------------------------------------------------ load */

static enum accel_err load_apps(struct store *s, const struct store_loader *l,
                                sqlite3_stmt *st)
{
    struct store_app a;
    a.name = col_text(st, 0);
    a.owner = col_text(st, 1);
    a.state = col_text(st, 2);
    a.reason = col_text(st, 3);
    a.manifest = col_text(st, 4);
    a.selected_type = col_text(st, 5);
    a.created_ms = sqlite3_column_int64(st, 6);
    a.updated_ms = sqlite3_column_int64(st, 7);
    a.pid = sqlite3_column_int64(st, 8);
    a.pid_start = (uint64_t)sqlite3_column_int64(st, 9);
    a.exit_status = sqlite3_column_int64(st, 10);
    (void)s;
    return l->app(l->ctx, &a);
}

static enum accel_err load_allocs(struct store *s,
                                  const struct store_loader *l,
                                  sqlite3_stmt *st)
{
    struct store_alloc a;
    a.app = col_text(st, 0);
    a.owner = col_text(st, 1);
    a.type = col_text(st, 2);
    a.node = col_text(st, 3);
    a.device = col_text(st, 4);
    a.memory = (uint64_t)sqlite3_column_int64(st, 5);
    (void)s;
    return l->alloc(l->ctx, &a);
}

static enum accel_err load_devices(struct store *s,
                                   const struct store_loader *l,
                                   sqlite3_stmt *st)
{
    struct store_device d;
    d.node = col_text(st, 0);
    d.id = col_text(st, 1);
    d.support = col_text(st, 2);
    d.settings = col_text(st, 3);
    (void)s;
    return l->device(l->ctx, &d);
}

static enum accel_err load_nodes(struct store *s, const struct store_loader *l,
                                 sqlite3_stmt *st)
{
    struct store_node n;
    n.name = col_text(st, 0);
    n.enabled = sqlite3_column_int(st, 1) != 0;
    (void)s;
    return l->node(l->ctx, &n);
}

static enum accel_err load_users(struct store *s, const struct store_loader *l,
                                 sqlite3_stmt *st)
{
    struct store_user u;
    u.name = col_text(st, 0);
    u.role = col_text(st, 1);
    u.token_hash = col_text(st, 2);
    u.created_ms = sqlite3_column_int64(st, 3);
    (void)s;
    return l->user(l->ctx, &u);
}

static enum accel_err load_identities(struct store *s,
                                      const struct store_loader *l,
                                      sqlite3_stmt *st)
{
    struct store_identity id;
    id.name = col_text(st, 0);
    id.uid = sqlite3_column_int64(st, 1);
    (void)s;
    return l->identity(l->ctx, &id);
}

typedef enum accel_err (*row_fn)(struct store *s, const struct store_loader *l,
                                 sqlite3_stmt *st);

/* Step one load query, calling fn per row; stops on the first non-OK. */
static enum accel_err load_table(struct store *s, const struct store_loader *l,
                                 enum stmt_id id, bool wanted, row_fn fn)
{
    sqlite3_stmt *st = s->stmt[id];
    enum accel_err err = ACCEL_OK;
    int rc;
    if (!wanted)
        return ACCEL_OK;
    for (;;) {
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW)
            break;
        err = fn(s, l, st);
        if (err != ACCEL_OK)
            break;
    }
    if (err == ACCEL_OK && rc != SQLITE_DONE)
        err = fail_rc(s, rc);
    sqlite3_reset(st);
    return err;
}

enum accel_err store_load(struct store *s, const struct store_loader *l)
{
    enum accel_err err;
    bool own_tx = !s->in_tx;
    int rc;
    if (own_tx) { /* one snapshot for all tables */
        rc = step_done(s->stmt[ST_READ_BEGIN]);
        if (rc != SQLITE_OK)
            return fail_rc(s, rc);
    }
    err = load_table(s, l, ST_LOAD_NODES, l->node != NULL, load_nodes);
    if (err == ACCEL_OK)
        err = load_table(s, l, ST_LOAD_DEVICES, l->device != NULL,
                         load_devices);
    if (err == ACCEL_OK)
        err = load_table(s, l, ST_LOAD_USERS, l->user != NULL, load_users);
    if (err == ACCEL_OK)
        err = load_table(s, l, ST_LOAD_IDENTITIES, l->identity != NULL,
                         load_identities);
    if (err == ACCEL_OK)
        err = load_table(s, l, ST_LOAD_APPS, l->app != NULL, load_apps);
    if (err == ACCEL_OK)
        err = load_table(s, l, ST_LOAD_ALLOCS, l->alloc != NULL,
                         load_allocs);
    if (own_tx && !sqlite3_get_autocommit(s->db)) {
        rc = step_done(s->stmt[ST_READ_END]);
        if (rc != SQLITE_OK && err == ACCEL_OK)
            err = fail_rc(s, rc);
        if (rc != SQLITE_OK)
            step_done(s->stmt[ST_ROLLBACK]);
    }
    return err;
}
