/* SPDX-License-Identifier: MIT */
/*
 * store_sqlite.c: the SQLite backend of store.h (SPEC 9; store_int.h says
 * how a backend plugs in, store.c what every backend shares). One connection,
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
#include "daemon/store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "common/util.h"

#define STORE_BUSY_TIMEOUT_MS 5000 /* default wait for another writer */
#define STORE_PRUNE_EVERY 64       /* events appended between two prunes */
#define STORE_APPLICATION_ID 0x61636365 /* "acce": PRAGMA application_id */

/*
 * Columns of schema 1's tables, which the 1 -> 2 migration rebuilds with
 * the same columns (only the table options change). They belong to those
 * two steps: a later schema change is a new step, never an edit here.
 */
#define SCHEMA1_APPS_COLUMNS                                                   \
    " name TEXT PRIMARY KEY NOT NULL,"                                         \
    " owner TEXT NOT NULL,"                                                    \
    " state TEXT NOT NULL,"                                                    \
    " reason TEXT,"                                                            \
    " manifest TEXT NOT NULL,"                                                 \
    " selected_type TEXT,"                                                     \
    " created_ms INTEGER NOT NULL,"                                            \
    " updated_ms INTEGER NOT NULL,"                                            \
    " pid INTEGER NOT NULL DEFAULT 0,"                                         \
    " pid_start INTEGER NOT NULL DEFAULT 0," /* uint64 stored as int64 */     \
    " exit_status INTEGER NOT NULL DEFAULT -1"
#define SCHEMA1_ALLOCATIONS_COLUMNS                                            \
    " app TEXT NOT NULL,"                                                      \
    " owner TEXT NOT NULL,"                                                    \
    " type TEXT NOT NULL,"                                                     \
    " node TEXT NOT NULL,"                                                     \
    " device TEXT NOT NULL,"                                                   \
    " memory INTEGER NOT NULL," /* uint64 stored as int64 */                  \
    " PRIMARY KEY (app, device)"
/* the events' columns after id, whose definition 1 -> 2 changes */
#define SCHEMA1_EVENTS_COLUMNS_AFTER_ID                                        \
    " ts_ms INTEGER NOT NULL,"                                                 \
    " kind TEXT NOT NULL,"                                                     \
    " app TEXT,"                                                               \
    " node TEXT,"                                                              \
    " device TEXT,"                                                            \
    " message TEXT NOT NULL,"                                                  \
    " data TEXT"

/*
 * Ordered migrations: migrations[i] takes the schema from version i to i+1.
 * Append only; never edit a step that has shipped. Each runs in its own
 * transaction together with the user_version bump.
 */
static const char *const migrations[] = {
    /* 0 -> 1: the initial schema. */
    "PRAGMA application_id = 1633903461;" /* STORE_APPLICATION_ID */
    "CREATE TABLE apps (" SCHEMA1_APPS_COLUMNS ");"
    "CREATE TABLE allocations (" SCHEMA1_ALLOCATIONS_COLUMNS ");"
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
    SCHEMA1_EVENTS_COLUMNS_AFTER_ID ");"
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
    "CREATE TABLE apps2 (" SCHEMA1_APPS_COLUMNS ") WITHOUT ROWID;"
    "INSERT INTO apps2 SELECT * FROM apps;"
    "DROP TABLE apps;"
    "ALTER TABLE apps2 RENAME TO apps;"
    "CREATE TABLE allocations2 (" SCHEMA1_ALLOCATIONS_COLUMNS ") WITHOUT ROWID;"
    "INSERT INTO allocations2 SELECT * FROM allocations;"
    "DROP TABLE allocations;"
    "ALTER TABLE allocations2 RENAME TO allocations;"
    "CREATE TABLE events2 ("
    " id INTEGER PRIMARY KEY,"
    SCHEMA1_EVENTS_COLUMNS_AFTER_ID ");"
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
    /* 3 -> 4: per-member limits (SPEC 3, PUT /api/users/{name}). A table of
     * its own rather than columns of users: a user without a row has the
     * defaults, and the users rows stay as they are. NULL = the default
     * (max_apps) or no limit (max_gpu_memory). */
    "CREATE TABLE user_limits ("
    " name TEXT PRIMARY KEY NOT NULL,"
    " max_apps INTEGER,"
    " max_gpu_memory INTEGER) WITHOUT ROWID;",
    /* 4 -> 5: facts of the store itself. created_ms: when this machine's
     * accel first started (HAMi's node creationTimestamp): now for a new
     * store; for an older one the first user's creation, which the first
     * start wrote (its admin), or now when no user is left. */
    "CREATE TABLE meta ("
    " key TEXT PRIMARY KEY NOT NULL,"
    " value INTEGER NOT NULL) WITHOUT ROWID;"
    "INSERT INTO meta (key, value) SELECT 'created_ms',"
    " COALESCE((SELECT MIN(created_ms) FROM users),"
    " CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER));",
};
#define STORE_SCHEMA_VERSION                                                   \
    ((int)(sizeof(migrations) / sizeof(migrations[0])))

#define EV_COLS "id, ts_ms, kind, app, node, device, message, data"
/* The event query with the string filters in where (see EVQ0..EVQ7). */
#define EVQ(where)                                                             \
    "SELECT " EV_COLS " FROM events WHERE id > ?1 AND ts_ms >= ?2" where       \
    " ORDER BY id LIMIT ?6"

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
    XX(IDENTITY_DEL, "DELETE FROM identities WHERE name = ?1")                 \
    XX(IDENTITY_RETIRE, "UPDATE identities SET name = ?2"                      \
                        " WHERE name = ?1 AND uid = ?3")                       \
    XX(DEVICE_DEL, "DELETE FROM devices WHERE node = ?1 AND id = ?2")          \
    XX(NODE_DEL, "DELETE FROM nodes WHERE name = ?1")                          \
    XX(EVENT_DEL, "DELETE FROM events WHERE id = ?1")                          \
    XX(LIMITS_PUT, "INSERT OR REPLACE INTO user_limits (name, max_apps,"       \
                   " max_gpu_memory) VALUES (?1, ?2, ?3)")                     \
    XX(LIMITS_DEL, "DELETE FROM user_limits WHERE name = ?1")                  \
    XX(EVENT_ADD, "INSERT INTO events (ts_ms, kind, app, node, device,"        \
                  " message, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")       \
    XX(EVENT_PRUNE, "DELETE FROM events WHERE id <= ?1")                       \
    XX(LOAD_APPS, "SELECT name, owner, state, reason, manifest,"               \
                  " selected_type, created_ms, updated_ms, pid, pid_start,"    \
                  " exit_status FROM apps ORDER BY name")                      \
    XX(LOAD_ALLOCS, "SELECT app, owner, type, node, device, memory,"           \
                    " EXISTS (SELECT 1 FROM apps WHERE apps.name ="            \
                    " allocations.app) FROM allocations ORDER BY app, device") \
    /* an event's columns have no other check: name the bad ones here */     \
    XX(LOAD_BAD_EVENTS,                                                        \
       "SELECT id, CASE"                                                       \
       " WHEN typeof(ts_ms) != 'integer' THEN 'ts_ms is not an integer'"       \
       " WHEN typeof(kind) != 'text' OR kind = '' THEN 'kind is not a text'"   \
       " WHEN typeof(message) != 'text' THEN 'message is not a text'"          \
       " WHEN typeof(app) NOT IN ('text', 'null') OR typeof(node) NOT IN"      \
       " ('text', 'null') OR typeof(device) NOT IN ('text', 'null')"           \
       " THEN 'app, node or device is not a text'"                             \
       " WHEN instr(kind || message || ifnull(app, '') || ifnull(node, '')"    \
       " || ifnull(device, '') || ifnull(data, ''), char(0)) > 0"              \
       " THEN 'a text contains a NUL character'"                               \
       " WHEN data IS NOT NULL AND (typeof(data) != 'text' OR"                 \
       " NOT json_valid(data)) THEN 'data is not valid JSON'"                  \
       " WHEN data IS NOT NULL AND json_type(data) != 'object'"                \
       " THEN 'data is not a JSON object'"                                     \
       " END AS why FROM events WHERE why IS NOT NULL ORDER BY id")            \
    XX(LOAD_DEVICES, "SELECT node, id, support, settings FROM devices"         \
                     " ORDER BY node, id")                                     \
    XX(LOAD_NODES, "SELECT name, enabled FROM nodes ORDER BY name")            \
    XX(LOAD_USERS, "SELECT name, role, token_hash, created_ms FROM users"      \
                   " ORDER BY name")                                           \
    XX(LOAD_IDENTITIES, "SELECT name, uid FROM identities ORDER BY uid")       \
    XX(LOAD_LIMITS, "SELECT name, max_apps, max_gpu_memory FROM user_limits"   \
                    " ORDER BY name")                                          \
    XX(READ_BEGIN, "BEGIN")                                                    \
    XX(READ_END, "COMMIT")                                                     \
    /* Event queries, one per combination of the optional string filters */   \
    /* (bit 0 app, bit 1 device, bit 2 kind) so each can use its index. */    \
    XX(EVQ0, EVQ(""))                                                          \
    XX(EVQ1, EVQ(" AND app = ?3"))                                             \
    XX(EVQ2, EVQ(" AND device = ?4"))                                          \
    XX(EVQ3, EVQ(" AND app = ?3 AND device = ?4"))                             \
    XX(EVQ4, EVQ(" AND kind = ?5"))                                            \
    XX(EVQ5, EVQ(" AND app = ?3 AND kind = ?5"))                               \
    XX(EVQ6, EVQ(" AND device = ?4 AND kind = ?5"))                            \
    XX(EVQ7, EVQ(" AND app = ?3 AND device = ?4 AND kind = ?5"))

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

struct sqlstore {
    struct store base;            /* first: store.c's view (store_int.h) */
    sqlite3 *db;                  /* the one connection */
    char *path;                   /* file name, for messages */
    sqlite3_stmt *stmt[ST_COUNT]; /* prepared once at open */
    bool in_tx;                   /* between store_begin and commit */
    bool tx_failed;               /* a failure rolled the transaction
                                     back: writes, events too, answer
                                     EINVAL until begin or rollback */
    int prune_countdown;          /* appends until the next prune */
    int wal_fd;                   /* the WAL, for store_sync; -1 = none */
    bool group_commit;            /* synchronous=NORMAL + store_sync */
    bool created;                 /* this open created the file */
};

static const struct store_ops sqlite_ops;
static void sq_close(struct store *base);

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
static enum accel_err fail_rc(struct sqlstore *s, int rc)
{
    const char *m = s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
    store_set_errmsg(&s->base, "%s (sqlite rc %d)", m, rc);
    return map_rc(rc);
}

static enum accel_err fail_msg(struct sqlstore *s, enum accel_err err,
                               const char *msg)
{
    store_set_errmsg(&s->base, "%s", msg);
    return err;
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

/* Roll back the open transaction, if SQLite has not done so already. A
 * transaction rolled back here (a failure) stays failed until the caller's
 * next begin or rollback, so that nothing of it commits. */
static void rollback_quiet(struct sqlstore *s)
{
    if (!sqlite3_get_autocommit(s->db))
        step_done(s->stmt[ST_ROLLBACK]);
    s->tx_failed = s->in_tx;
    s->in_tx = false;
    s->prune_countdown = 0; /* a rolled-back prune is redone next time */
}

/*
 * Finish a write inside a transaction: on failure remember the message, roll
 * the whole transaction back and translate rc.
 */
static enum accel_err tx_result(struct sqlstore *s, int rc)
{
    enum accel_err err;
    if (rc == SQLITE_OK)
        return ACCEL_OK;
    err = fail_rc(s, rc);
    rollback_quiet(s);
    return err;
}

static enum accel_err need_tx(struct sqlstore *s)
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

/* Prepare sql and step it once: SQLITE_ROW, SQLITE_DONE or the failure;
 * the caller finalizes *st (NULL when it did not prepare). */
static int query_step(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? sqlite3_step(*st) : rc;
}

static int query_rc(int rc)
{
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Read one integer from a single-row query (a PRAGMA); 0 without a row. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = query_step(db, sql, &st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return query_rc(rc);
}

/* Read one text from a single-row query into buf (a PRAGMA); "" without
 * a row. */
static int query_text(sqlite3 *db, const char *sql, char *buf, size_t len)
{
    sqlite3_stmt *st = NULL;
    int rc = query_step(db, sql, &st);
    const char *t =
        rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    util_strlcpy(buf, t ? t : "", len);
    sqlite3_finalize(st);
    return query_rc(rc);
}

/*
 * Look at the file before SQLite does: an existing file must be non-empty
 * and start with the SQLite header. A file that is not is refused untouched.
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
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return ACCEL_OK;
    }
    if (sb.st_size == 0) {
        close(fd);
        *cause = xasprintf("%s is empty (0 bytes): an empty file is not a "
                           "first start, the state that was there is gone; "
                           "refusing to start. Restore it from a backup, or "
                           "remove it to start afresh (every app, binding "
                           "and user is then forgotten)",
                           path);
        return ACCEL_ESTORE_CORRUPT;
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
 * Run the PRAGMA sql that answers one word (what: the step, for messages).
 * ACCEL_OK when the word is want; else err, *cause from mismatch: a format
 * taking the path and the word, in that order.
 */
static enum accel_err pragma_expect(sqlite3 *db, const char *path,
                                    const char *sql, const char *want,
                                    const char *what, enum accel_err err,
                                    const char *mismatch, char **cause)
{
    char got[256];
    int rc = query_text(db, sql, got, sizeof(got));
    if (rc != SQLITE_OK)
        return open_fail(db, path, rc, what, cause);
    if (strcmp(got, want) == 0)
        return ACCEL_OK;
    *cause = xasprintf(mismatch, path, got);
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
    enum accel_err err;
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
    if (version == 0 && tables == 0 && appid == 0) {
        *cause = xasprintf("%s holds no accel schema (an empty SQLite "
                           "database where the state was); refusing to "
                           "start. Restore it from a backup, or remove it "
                           "to start afresh",
                           path);
        return ACCEL_ESTORE_CORRUPT;
    }
    if ((appid != 0 && appid != STORE_APPLICATION_ID) || version == 0) {
        *cause = xasprintf("%s is an SQLite database of another program "
                           "(application_id %jd, schema %jd, %jd tables); "
                           "refusing to open it",
                           path, (intmax_t)appid, (intmax_t)version,
                           (intmax_t)tables);
        return ACCEL_ESTORE_CORRUPT;
    }
    err = pragma_expect(db, path, "PRAGMA quick_check", "ok",
                        "running quick_check", ACCEL_ESTORE_CORRUPT,
                        "%s is corrupt (quick_check: %s); refusing to "
                        "open it, the file is left as it is",
                        cause);
    if (err == ACCEL_OK)
        *out_version = version;
    return err;
}

static enum accel_err set_pragmas(sqlite3 *db, const char *path, char **cause)
{
    enum accel_err err = pragma_expect(
        db, path, "PRAGMA journal_mode=WAL", "wal", "setting journal_mode=WAL",
        ACCEL_ESTORE,
        "cannot open the state database %s: journal_mode "
        "is %s, not wal (no shared memory here?)",
        cause);
    int rc;
    if (err != ACCEL_OK)
        return err;
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

static enum accel_err prepare_all(struct sqlstore *s, char **cause)
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

/* Open path read-write (never creating it) with our connection settings. */
static int open_db(const char *path, bool create, sqlite3 **db)
{
    int rc = sqlite3_open_v2(path, db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
                                 (create ? SQLITE_OPEN_CREATE : 0),
                             NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_extended_result_codes(*db, 1);
    if (rc == SQLITE_OK)
        rc = sqlite3_busy_timeout(*db, STORE_BUSY_TIMEOUT_MS);
    return rc;
}

/* Remove a temporary database and its WAL and shared-memory files. */
static void unlink_db(const char *tmp)
{
    char *p;
    unlink(tmp);
    p = xasprintf("%s-wal", tmp);
    unlink(p);
    free(p);
    p = xasprintf("%s-shm", tmp);
    unlink(p);
    free(p);
}

/* fsync the directory holding path, so a new name in it is durable. */
static int sync_dir(const char *path)
{
    char *dir = xstrdup(path), *slash = strrchr(dir, '/');
    int fd, rc;
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

/*
 * First start: build the whole schema in <path>.new-<pid>, close it (the
 * WAL is checkpointed into the file) and link it to path, which fails
 * rather than replace a file another process created meanwhile. *created
 * says whether ours is the one now at path.
 */
static enum accel_err create_fresh(const char *path, bool *created,
                                   char **cause)
{
    char *tmp = xasprintf("%s.new-%ld", path, (long)getpid());
    sqlite3 *db = NULL;
    enum accel_err result;
    int rc;

    *created = false;
    unlink_db(tmp); /* a leftover of a crashed first start of this pid */
    rc = open_db(tmp, true, &db);
    if (rc != SQLITE_OK) {
        result = open_fail(db, path, rc, "creating it", cause);
        goto out;
    }
    result = set_pragmas(db, path, cause);
    if (result == ACCEL_OK)
        result = migrate(db, path, cause);
    if (result != ACCEL_OK)
        goto out;
    rc = sqlite3_close(db);
    db = NULL;
    if (rc != SQLITE_OK) {
        result = open_fail(NULL, path, rc, "closing the new database",
                           cause);
        goto out;
    }
    if (link(tmp, path) == 0) {
        *created = true;
    } else if (errno != EEXIST) {
        *cause = xasprintf("cannot create the state database %s: %s", path,
                           strerror(errno));
        result = ACCEL_EIO;
        goto out;
    }
    if (sync_dir(path) != 0) {
        *cause = xasprintf("cannot create the state database %s: fsync of "
                           "its directory: %s",
                           path, strerror(errno));
        result = ACCEL_EIO;
    }
out:
    sqlite3_close(db);
    unlink_db(tmp);
    free(tmp);
    return result;
}

enum accel_err store_sqlite_open(const char *path, struct store **out,
                                 char **cause)
{
    enum accel_err result = ACCEL_ESTORE;
    struct sqlstore *s = NULL;
    int64_t version = 0;
    bool created = false;
    struct stat sb;
    int rc;

    *cause = NULL;
    if (stat(path, &sb) != 0 && errno == ENOENT) {
        result = create_fresh(path, &created, cause);
        if (result != ACCEL_OK)
            goto out;
    }
    result = check_header(path, cause);
    if (result != ACCEL_OK)
        goto out;
    s = xcalloc(1, sizeof(*s));
    s->base.ops = &sqlite_ops;
    s->path = xstrdup(path);
    s->wal_fd = -1;
    s->created = created;
    rc = open_db(path, false, &s->db);
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
    *out = &s->base;
    s = NULL;
    result = ACCEL_OK;
out:
    if (s)
        sq_close(&s->base);
    return result;
}

static bool sq_created(const struct store *base)
{
    const struct sqlstore *s = (const struct sqlstore *)base;
    return s->created;
}

static int64_t sq_created_ms(struct store *base)
{
    struct sqlstore *s = (struct sqlstore *)base;
    int64_t ms = 0; /* query_int: 0 without the row, or when it fails */
    query_int(s->db, "SELECT value FROM meta WHERE key = 'created_ms'", &ms);
    return ms;
}

static void sq_close(struct store *base)
{
    struct sqlstore *s = (struct sqlstore *)base;
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

static void sq_set_busy_timeout(struct store *base, int ms)
{
    struct sqlstore *s = (struct sqlstore *)base;
    sqlite3_busy_timeout(s->db, ms);
}

int store_schema_version(void)
{
    return STORE_SCHEMA_VERSION;
}

/* ---------------------------------------------------------- transactions */

static enum accel_err sq_begin(struct store *base)
{
    struct sqlstore *s = (struct sqlstore *)base;
    int rc;
    if (s->in_tx)
        return fail_msg(s, ACCEL_EINVAL, "store_begin inside a transaction");
    rc = step_done(s->stmt[ST_BEGIN]);
    if (rc != SQLITE_OK) {
        enum accel_err err = fail_rc(s, rc);
        rollback_quiet(s);
        s->tx_failed = false;
        return err;
    }
    s->in_tx = true;
    s->tx_failed = false;
    return ACCEL_OK;
}

static enum accel_err sq_commit(struct store *base)
{
    struct sqlstore *s = (struct sqlstore *)base;
    enum accel_err err = need_tx(s);
    if (err != ACCEL_OK)
        return err;
    err = tx_result(s, step_done(s->stmt[ST_COMMIT]));
    s->in_tx = false;
    s->tx_failed = false; /* a commit ends the transaction, failed or not */
    return err;
}

static enum accel_err sq_set_group_commit(struct store *base, bool on)
{
    struct sqlstore *s = (struct sqlstore *)base;
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

static enum accel_err sq_sync(struct store *base)
{
    struct sqlstore *s = (struct sqlstore *)base;
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

static void sq_rollback(struct store *base)
{
    struct sqlstore *s = (struct sqlstore *)base;
    if (s->in_tx)
        rollback_quiet(s);
    s->tx_failed = false;
}

/* ------------------------------------------------------------ row writes */

static bool sq_failed(const struct store *base)
{
    return ((const struct sqlstore *)base)->tx_failed;
}

static enum accel_err sq_writable(struct store *base)
{
    return need_tx((struct sqlstore *)base);
}

static enum accel_err sq_fail(struct store *base, enum accel_err err,
                              const char *why)
{
    struct sqlstore *s = (struct sqlstore *)base;
    if (s->in_tx)
        rollback_quiet(s);
    return fail_msg(s, err, why);
}

/*
 * Row layouts. A table's put statement binds its row's fields as ?1, ?2,
 * ... in the order its load query returns them as columns 0, 1, ..., so
 * one list per table, of each field's kind, place in its struct and what
 * its column must hold when loaded, serves all three: bind_fields for the
 * writes, check_col and read_fields for the load.
 */
enum field_kind {
    F_TEXT,    /* const char *, NULL as SQL NULL */
    F_I64,     /* int64_t */
    F_U64,     /* uint64_t, stored as int64 */
    F_BOOL,    /* bool, stored as 0 or 1 */
    F_OPT_I64, /* int64_t, < 0 ("none") stored as NULL */
};

/* What a column of a loaded row must hold: the checks are the same for
 * every table, so one function applies them (check_col). */
enum col_kind {
    COL_KEY,      /* a non-empty text without NUL */
    COL_TEXT,     /* NULL or a text without NUL */
    COL_INT,      /* an integer in [min, max] */
    COL_OPT_INT,  /* NULL or an integer in [0, INT64_MAX] */
    COL_ENUM,     /* one of the words in set */
    COL_HASH,     /* a SHA-256 in lowercase hex */
    COL_BY_QUERY, /* checked by the table's load query (events) */
};

struct col_rule {
    enum col_kind kind;
    int64_t min, max;       /* COL_INT */
    const char *const *set; /* COL_ENUM, NULL-terminated */
};

struct field {
    enum field_kind kind;
    size_t off; /* offsetof the member in its row struct */
    struct col_rule rule;
};

#define TIME_MAX INT64_C(253402300799999) /* 9999-12-31, in ms */
#define KEY {COL_KEY, 0, 0, NULL}
#define TEXT {COL_TEXT, 0, 0, NULL}
#define INT(lo, hi) {COL_INT, (lo), (hi), NULL}
#define TIME INT(0, TIME_MAX)
#define ENUM(set) {COL_ENUM, 0, 0, (set)}
#define HASH {COL_HASH, 0, 0, NULL}
#define OPT_INT {COL_OPT_INT, 0, 0, NULL}

/* A column of struct store_<row>: its kind, member and rule. */
#define COL(row, kind, member, rule)                                           \
    {(kind), offsetof(struct store_##row, member), rule}
#define EV_COL(kind, member)                                                   \
    {(kind), offsetof(struct store_event, member), {COL_BY_QUERY, 0, 0, NULL}}
#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

static const char *const supports[] = {"Exclusive", "MemorySlice",
                                       "TimeSlice", NULL};
static const char *const roles[] = {"admin", "member", NULL};

/* Two columns a line, as the rule lists these took over were written. */
static const struct field app_fields[] = {
    COL(app, F_TEXT, name, KEY), COL(app, F_TEXT, owner, KEY),
    COL(app, F_TEXT, state, KEY), COL(app, F_TEXT, reason, TEXT),
    COL(app, F_TEXT, manifest, KEY), COL(app, F_TEXT, selected_type, TEXT),
    COL(app, F_I64, created_ms, TIME), COL(app, F_I64, updated_ms, TIME),
    COL(app, F_I64, pid, INT(0, INT32_MAX)),
    COL(app, F_U64, pid_start, INT(INT64_MIN, INT64_MAX)),
    COL(app, F_I64, exit_status, INT(INT32_MIN, INT32_MAX))};
static const struct field alloc_fields[] = {
    COL(alloc, F_TEXT, app, KEY), COL(alloc, F_TEXT, owner, KEY),
    COL(alloc, F_TEXT, type, KEY), COL(alloc, F_TEXT, node, KEY),
    COL(alloc, F_TEXT, device, KEY),
    COL(alloc, F_U64, memory, INT(0, INT64_MAX))};
static const struct field device_fields[] = {
    COL(device, F_TEXT, node, KEY), COL(device, F_TEXT, id, KEY),
    COL(device, F_TEXT, support, ENUM(supports)),
    COL(device, F_TEXT, settings, TEXT)};
static const struct field node_fields[] = {
    COL(node, F_TEXT, name, KEY), COL(node, F_BOOL, enabled, INT(0, 1))};
static const struct field user_fields[] = {
    COL(user, F_TEXT, name, KEY), COL(user, F_TEXT, role, ENUM(roles)),
    COL(user, F_TEXT, token_hash, HASH), COL(user, F_I64, created_ms, TIME)};
static const struct field identity_fields[] = {
    COL(identity, F_TEXT, name, KEY),
    COL(identity, F_I64, uid, INT(1, INT64_C(4294967294)))};
static const struct field limits_fields[] = {
    COL(limits, F_TEXT, name, KEY), COL(limits, F_OPT_I64, max_apps, OPT_INT),
    COL(limits, F_OPT_I64, max_gpu_memory, OPT_INT)};
/* an event's columns start with its id, which its insert does not bind */
static const struct field event_fields[] = {
    EV_COL(F_I64, ts_ms),  EV_COL(F_TEXT, kind),   EV_COL(F_TEXT, app),
    EV_COL(F_TEXT, node),  EV_COL(F_TEXT, device), EV_COL(F_TEXT, message),
    EV_COL(F_TEXT, data)};

#undef KEY
#undef TEXT
#undef INT
#undef TIME
#undef ENUM
#undef HASH
#undef OPT_INT
#undef COL
#undef EV_COL

/* Bind the fields of row as ?1 .. ?n; an SQLite rc. */
static int bind_fields(sqlite3_stmt *st, const void *row, const struct field *f,
                       size_t n)
{
    int rc = SQLITE_OK;
    for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
        const char *p = (const char *)row + f[i].off;
        int k = (int)i + 1;
        int64_t v;
        switch (f[i].kind) {
        case F_TEXT:
            rc = bind_text(st, k, *(const char *const *)p);
            break;
        case F_I64:
            rc = sqlite3_bind_int64(st, k, *(const int64_t *)p);
            break;
        case F_U64:
            rc = sqlite3_bind_int64(st, k, (int64_t)*(const uint64_t *)p);
            break;
        case F_BOOL:
            rc = sqlite3_bind_int(st, k, *(const bool *)p);
            break;
        case F_OPT_I64:
            v = *(const int64_t *)p;
            rc = v < 0 ? sqlite3_bind_null(st, k)
                       : sqlite3_bind_int64(st, k, v);
            break;
        }
    }
    return rc;
}

/* Fill row's fields from columns first .. first + n - 1 of st (already
 * checked by the table's rules); texts point into st. */
static void read_fields(sqlite3_stmt *st, int first, void *row,
                        const struct field *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *p = (char *)row + f[i].off;
        int c = first + (int)i;
        switch (f[i].kind) {
        case F_TEXT:
            *(const char **)p = col_text(st, c);
            break;
        case F_I64:
            *(int64_t *)p = sqlite3_column_int64(st, c);
            break;
        case F_U64:
            *(uint64_t *)p = (uint64_t)sqlite3_column_int64(st, c);
            break;
        case F_BOOL:
            *(bool *)p = sqlite3_column_int(st, c) != 0;
            break;
        case F_OPT_I64:
            *(int64_t *)p = sqlite3_column_type(st, c) == SQLITE_NULL
                                ? -1
                                : sqlite3_column_int64(st, c);
            break;
        }
    }
}

/* A put inside the transaction: bind the row, run, finish the write. */
static enum accel_err put_row(struct store *base, enum stmt_id id,
                              const void *row, const struct field *f, size_t n)
{
    struct sqlstore *s = (struct sqlstore *)base;
    sqlite3_stmt *st = s->stmt[id];
    int rc = bind_fields(st, row, f, n);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

/* The put operation of table: its statement ST_<ID>_PUT binds the row
 * by <table>_fields. C has no generic functions: one line per table. */
#define SQ_PUT(table, ID)                                                      \
    static enum accel_err sq_##table##_put(struct store *base,                 \
                                           const struct store_##table *row)    \
    {                                                                          \
        return put_row(base, ST_##ID##_PUT, row, table##_fields,               \
                       NFIELDS(table##_fields));                               \
    }

SQ_PUT(app, APP)
SQ_PUT(alloc, ALLOC)
SQ_PUT(device, DEVICE)
SQ_PUT(node, NODE)
SQ_PUT(user, USER)
SQ_PUT(identity, IDENTITY)
SQ_PUT(limits, LIMITS)

#undef SQ_PUT

/* Run a cached statement with up to two text keys inside the transaction. */
static enum accel_err write_keys(struct sqlstore *s, enum stmt_id id,
                                 const char *k1, const char *k2)
{
    sqlite3_stmt *st = s->stmt[id];
    int rc;
    rc = bind_text(st, 1, k1);
    if (rc == SQLITE_OK && k2)
        rc = bind_text(st, 2, k2);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

/* A delete operation by one key: statement id binds it as ?1. */
#define SQ_DELETE(op, id)                                                      \
    static enum accel_err sq_##op(struct store *base, const char *key)         \
    {                                                                          \
        return write_keys((struct sqlstore *)base, id, key, NULL);             \
    }

SQ_DELETE(app_delete, ST_APP_DEL)
SQ_DELETE(alloc_delete_app, ST_ALLOC_DEL_APP)
SQ_DELETE(node_delete, ST_NODE_DEL)
SQ_DELETE(user_delete, ST_USER_DEL)
SQ_DELETE(limits_delete, ST_LIMITS_DEL)

#undef SQ_DELETE

static enum accel_err sq_alloc_delete(struct store *base, const char *app,
                                      const char *device)
{
    return write_keys((struct sqlstore *)base, ST_ALLOC_DEL, app, device);
}

static enum accel_err sq_identity_retire(struct store *base, const char *name,
                                     const struct store_identity *retired)
{
    struct sqlstore *s = (struct sqlstore *)base;
    sqlite3_stmt *st = s->stmt[ST_IDENTITY_RETIRE];
    int rc;
    rc = bind_text(st, 1, name);
    rc = rc ? rc : bind_text(st, 2, retired->name);
    rc = rc ? rc : sqlite3_bind_int64(st, 3, retired->uid);
    rc = rc ? rc : step_done(st);
    return tx_result(s, rc);
}

/* ---------------------------------------------------------------- events */

/* Insert the row and, every STORE_PRUNE_EVERY appends, prune; in a tx. */
static int event_insert(struct sqlstore *s, const struct store_event *e,
                        int64_t keep_max, int64_t *out_id)
{
    sqlite3_stmt *st = s->stmt[ST_EVENT_ADD];
    int64_t id;
    int rc = bind_fields(st, e, event_fields, NFIELDS(event_fields));
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

static enum accel_err sq_event_append(struct store *base,
                                      const struct store_event *e,
                                      int64_t keep_max, bool own_tx,
                                      int64_t *out_id)
{
    struct sqlstore *s = (struct sqlstore *)base;
    int64_t id = 0;
    enum accel_err err;
    if (own_tx) {
        err = sq_begin(&s->base);
        if (err != ACCEL_OK)
            return err;
    }
    err = tx_result(s, event_insert(s, e, keep_max, &id));
    if (err == ACCEL_OK && own_tx)
        err = sq_commit(&s->base);
    if (own_tx)
        s->tx_failed = false; /* its own transaction: over either way */
    if (err == ACCEL_OK && out_id)
        *out_id = id;
    return err;
}

static void event_from_row(sqlite3_stmt *st, struct store_event *e)
{
    e->id = sqlite3_column_int64(st, 0);
    read_fields(st, 1, e, event_fields, NFIELDS(event_fields));
}

static enum accel_err
sq_events_query(struct store *base, const struct store_event_filter *f,
                enum accel_err (*cb)(void *ctx, const struct store_event *e),
                void *ctx)
{
    struct sqlstore *s = (struct sqlstore *)base;
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

/* One run of store_load: the rows that do not decode (store_int.h) and,
 * for each, its key's values as stored (to delete it in a repair). */
struct load_run {
    struct sqlstore *s;
    const struct store_loader *l;
    struct store_bads bad;
    sqlite3_value *(*keyv)[2];
};

/* Record the current row of st as undecodable; takes why. */
static void bad_add(struct load_run *r, const char *table, sqlite3_stmt *st,
                    int k0, int k1, char *why)
{
    const char *t0 = col_text(st, k0), *t1 = k1 >= 0 ? col_text(st, k1) : "";
    sqlite3_value **kv;
    r->keyv = xrealloc(r->keyv, (r->bad.n + 1) * sizeof(*r->keyv));
    kv = r->keyv[r->bad.n];
    kv[0] = sqlite3_value_dup(sqlite3_column_value(st, k0));
    kv[1] = k1 >= 0 ? sqlite3_value_dup(sqlite3_column_value(st, k1)) : NULL;
    store_bads_add(&r->bad, table,
                   k1 >= 0 ? xasprintf("%s/%s", t0 ? t0 : "NULL",
                                       t1 ? t1 : "NULL")
                           : xstrdup(t0 ? t0 : "NULL"),
                   why);
}

static void bad_free(struct load_run *r)
{
    for (size_t i = 0; i < r->bad.n; i++) {
        sqlite3_value_free(r->keyv[i][0]);
        sqlite3_value_free(r->keyv[i][1]);
    }
    free(r->keyv);
    store_bads_free(&r->bad);
}

static const char *type_name(int t)
{
    switch (t) {
    case SQLITE_INTEGER: return "an integer";
    case SQLITE_FLOAT: return "a real";
    case SQLITE_BLOB: return "a blob";
    case SQLITE_NULL: return "NULL";
    default: return "text";
    }
}

/* NULL when column i holds a NUL-free text (or NULL, if nullable; a key
 * must also be non-empty), else why. Call before any other column_* on i. */
static char *check_text(sqlite3_stmt *st, int i, bool nullable, bool key)
{
    int t = sqlite3_column_type(st, i);
    const char *name = sqlite3_column_name(st, i), *v;
    if (t == SQLITE_NULL && nullable)
        return NULL;
    if (t != SQLITE_TEXT)
        return xasprintf("%s is %s, not text", name, type_name(t));
    v = col_text(st, i);
    if (v == NULL || strlen(v) != (size_t)sqlite3_column_bytes(st, i))
        return xasprintf("%s contains a NUL character", name);
    if (key && v[0] == '\0')
        return xasprintf("%s is empty", name);
    return NULL;
}

/* NULL when column i holds an integer in [min, max], else why. */
static char *check_int(sqlite3_stmt *st, int i, int64_t min, int64_t max)
{
    int t = sqlite3_column_type(st, i);
    const char *name = sqlite3_column_name(st, i);
    int64_t v;
    if (t != SQLITE_INTEGER)
        return xasprintf("%s is %s, not an integer", name, type_name(t));
    v = sqlite3_column_int64(st, i);
    if (v < min || v > max)
        return xasprintf("%s is %jd, outside [%jd, %jd]", name, (intmax_t)v,
                         (intmax_t)min, (intmax_t)max);
    return NULL;
}

/* NULL when column i is one of the words in set (NULL-terminated). */
static char *check_enum(sqlite3_stmt *st, int i, const char *const *set)
{
    char *why = check_text(st, i, false, true);
    const char *v;
    if (why)
        return why;
    v = col_text(st, i);
    for (size_t k = 0; set[k]; k++)
        if (strcmp(v, set[k]) == 0)
            return NULL;
    return xasprintf("%s \"%s\" is not one this build knows",
                     sqlite3_column_name(st, i), v);
}

/* NULL when column i is 64 lowercase hex digits (a SHA-256). */
static char *check_hash(sqlite3_stmt *st, int i)
{
    char *why = check_text(st, i, false, true);
    const char *v;
    if (why)
        return why;
    v = col_text(st, i);
    if (strlen(v) != 64 || strspn(v, "0123456789abcdef") != 64)
        return xasprintf("%s is not a SHA-256 in hex",
                         sqlite3_column_name(st, i));
    return NULL;
}

/* NULL when column i keeps its rule, else why. */
static char *check_col(sqlite3_stmt *st, int i, const struct col_rule *c)
{
    switch (c->kind) {
    case COL_KEY: return check_text(st, i, false, true);
    case COL_TEXT: return check_text(st, i, true, false);
    case COL_INT: return check_int(st, i, c->min, c->max);
    case COL_OPT_INT:
        return sqlite3_column_type(st, i) == SQLITE_NULL
                   ? NULL
                   : check_int(st, i, 0, INT64_MAX);
    case COL_ENUM: return check_enum(st, i, c->set);
    case COL_HASH: return check_hash(st, i);
    case COL_BY_QUERY: return NULL;
    }
    return NULL;
}

/* An allocation also needs its app: a row in apps that decoded. */
static char *check_alloc_app(struct load_run *r, sqlite3_stmt *st)
{
    if (sqlite3_column_int(st, 6) == 0)
        return xasprintf("its app \"%s\" has no row in apps",
                         col_text(st, 0));
    if (store_bads_has(&r->bad, "apps", col_text(st, 0)))
        return xasprintf("its app \"%s\" does not decode", col_text(st, 0));
    return NULL;
}

/* Events are not loaded, only checked: the query returns only the bad
 * ones, and names why in its second column. */
static char *check_event(struct load_run *r, sqlite3_stmt *st)
{
    (void)r;
    return xstrdup(col_text(st, 1));
}

/* One table's load: its query, its key columns (k1 < 0: one), its row
 * layout (ncols fields, with their columns' rules), what else it checks
 * and which kind of row it hands over. */
struct table_load {
    enum stmt_id id;
    const char *table;
    int k0, k1;
    const struct field *fields; /* NULL: never handed over (events) */
    size_t ncols;
    char *(*check)(struct load_run *r, sqlite3_stmt *st); /* or NULL */
    enum store_row kind;
};

/* Every table in load order (allocations after apps: they check theirs). */

#define LAYOUT(fields) (fields), NFIELDS(fields)

static const struct table_load tables[] = {
    {ST_LOAD_NODES, "nodes", 0, -1, LAYOUT(node_fields), NULL, STORE_ROW_NODE},
    {ST_LOAD_DEVICES, "devices", 0, 1, LAYOUT(device_fields), NULL,
     STORE_ROW_DEVICE},
    {ST_LOAD_USERS, "users", 0, -1, LAYOUT(user_fields), NULL, STORE_ROW_USER},
    {ST_LOAD_IDENTITIES, "identities", 0, -1, LAYOUT(identity_fields), NULL,
     STORE_ROW_IDENTITY},
    {ST_LOAD_LIMITS, "user_limits", 0, -1, LAYOUT(limits_fields), NULL,
     STORE_ROW_LIMITS},
    {ST_LOAD_APPS, "apps", 0, -1, LAYOUT(app_fields), NULL, STORE_ROW_APP},
    {ST_LOAD_ALLOCS, "allocations", 0, 4, LAYOUT(alloc_fields),
     check_alloc_app, STORE_ROW_ALLOC},
    /* the query returns only the bad events, and why in its column 1 */
    {ST_LOAD_BAD_EVENTS, "events", 0, -1, NULL, 0, check_event,
     STORE_ROW_APP /* unused: fields NULL */},
};

#undef LAYOUT

/* Check one row by its table's rules and hand it over; a row that fails
 * a check or that the callback refuses is recorded as undecodable. */
static enum accel_err load_row(struct load_run *r, sqlite3_stmt *st,
                               const struct table_load *t)
{
    char *why = NULL;
    enum accel_err err;
    for (size_t i = 0; why == NULL && i < t->ncols; i++)
        why = check_col(st, (int)i, &t->fields[i].rule);
    if (why == NULL && t->check)
        why = t->check(r, st);
    if (why == NULL && t->fields) {
        union {
            struct store_app app;
            struct store_alloc alloc;
            struct store_device device;
            struct store_node node;
            struct store_user user;
            struct store_identity identity;
            struct store_limits limits;
        } row;
        read_fields(st, 0, &row, t->fields, t->ncols);
        err = store_loader_give(r->l, t->kind, &row, &why);
        if (err != ACCEL_ESTORE_CORRUPT)
            return err;
        if (why == NULL)
            why = xstrdup("refused by the daemon");
    }
    bad_add(r, t->table, st, t->k0, t->k1, why);
    return ACCEL_OK;
}

/* Step one load query, checking each row; stops on the first non-OK. */
static enum accel_err load_table(struct load_run *r,
                                 const struct table_load *t)
{
    sqlite3_stmt *st = r->s->stmt[t->id];
    enum accel_err err = ACCEL_OK;
    int rc;
    for (;;) {
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW)
            break;
        err = load_row(r, st, t);
        if (err != ACCEL_OK)
            break;
    }
    if (err == ACCEL_OK && rc != SQLITE_DONE)
        err = fail_rc(r->s, rc);
    sqlite3_reset(st);
    return err;
}

static enum accel_err load_tables(struct load_run *r)
{
    enum accel_err err = ACCEL_OK;
    for (size_t i = 0; err == ACCEL_OK && i < sizeof tables / sizeof tables[0];
         i++)
        err = load_table(r, &tables[i]);
    return err;
}

/* The statement that deletes one row of table by its key values. */
static enum stmt_id delete_stmt(const char *table)
{
    static const struct {
        const char *table;
        enum stmt_id id;
    } map[] = {{"apps", ST_APP_DEL},         {"allocations", ST_ALLOC_DEL},
               {"devices", ST_DEVICE_DEL},   {"nodes", ST_NODE_DEL},
               {"users", ST_USER_DEL},       {"events", ST_EVENT_DEL},
               {"identities", ST_IDENTITY_DEL},
               {"user_limits", ST_LIMITS_DEL}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i].table, table) == 0)
            return map[i].id;
    return ST_COUNT;
}

/* Delete every bad row and append the event, in one transaction. */
static enum accel_err repair(struct load_run *r, const char *list)
{
    struct sqlstore *s = r->s;
    char *msg = xasprintf("acceld --repair dropped %zu undecodable row%s of "
                          "%s: %s",
                          r->bad.n, r->bad.n == 1 ? "" : "s", s->path, list);
    char *data = store_bads_json(&r->bad);
    struct store_event e = {0, util_wall_ms(), "store.repair", NULL, NULL,
                            NULL, msg, data};
    enum accel_err err = sq_begin(&s->base);
    for (size_t i = 0; err == ACCEL_OK && i < r->bad.n; i++) {
        sqlite3_stmt *st = s->stmt[delete_stmt(r->bad.v[i].table)];
        int rc = sqlite3_bind_value(st, 1, r->keyv[i][0]);
        if (rc == SQLITE_OK && r->keyv[i][1])
            rc = sqlite3_bind_value(st, 2, r->keyv[i][1]);
        rc = rc ? rc : step_done(st);
        err = tx_result(s, rc);
    }
    if (err == ACCEL_OK)
        err = sq_event_append(&s->base, &e, 0, false, NULL);
    if (err == ACCEL_OK)
        err = sq_commit(&s->base);
    free(msg);
    free(data);
    return err;
}

static enum accel_err sq_load(struct store *base, const struct store_loader *l,
                          char **cause)
{
    struct sqlstore *s = (struct sqlstore *)base;
    struct load_run r = {s, l, {NULL, 0}, NULL};
    enum accel_err err;
    char *list;
    int rc;

    *cause = NULL;
    if (s->in_tx)
        return fail_msg(s, ACCEL_EINVAL, "store_load inside a transaction");
    rc = step_done(s->stmt[ST_READ_BEGIN]); /* one snapshot for all tables */
    if (rc != SQLITE_OK)
        return fail_rc(s, rc);
    err = load_tables(&r);
    rc = SQLITE_OK;
    if (!sqlite3_get_autocommit(s->db)) {
        rc = step_done(s->stmt[ST_READ_END]);
        if (rc != SQLITE_OK)
            step_done(s->stmt[ST_ROLLBACK]);
    }
    if (err == ACCEL_OK && rc != SQLITE_OK)
        err = fail_rc(s, rc);
    if (err != ACCEL_OK || r.bad.n == 0)
        goto out;
    list = store_bads_list(&r.bad);
    if (!l->repair) {
        *cause = xasprintf("%s: %zu row%s do%s not decode: %s; refusing to "
                           "start, nothing was loaded or changed. `acceld "
                           "--repair` drops these rows (and what depends on "
                           "them) and says what it dropped",
                           s->path, r.bad.n, r.bad.n == 1 ? "" : "s",
                           r.bad.n == 1 ? "es" : "", list);
        free(list);
        err = ACCEL_ESTORE_CORRUPT;
        goto out;
    }
    err = repair(&r, list);
    if (err == ACCEL_OK)
        *cause = xasprintf("dropped %zu undecodable row%s of %s: %s",
                           r.bad.n, r.bad.n == 1 ? "" : "s", s->path, list);
    else
        *cause = xasprintf("cannot drop the undecodable rows of %s: %s",
                           s->path, store_errmsg(&s->base));
    free(list);
out:
    bad_free(&r);
    return err;
}

static const struct store_ops sqlite_ops = {
    .cluster = false,
    .own_concurrent = false, /* one connection: an own write waits */
    .close = sq_close,
    .created = sq_created,
    .load = sq_load,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .sync = sq_sync,
    .app_put = sq_app_put,
    .app_delete = sq_app_delete,
    .alloc_put = sq_alloc_put,
    .alloc_delete_app = sq_alloc_delete_app,
    .alloc_delete = sq_alloc_delete,
    .device_put = sq_device_put,
    .node_put = sq_node_put,
    .node_delete = sq_node_delete,
    .user_put = sq_user_put,
    .user_delete = sq_user_delete,
    .identity_put = sq_identity_put,
    .identity_retire = sq_identity_retire,
    .limits_put = sq_limits_put,
    .limits_delete = sq_limits_delete,
    .event_append = sq_event_append,
    .events_query = sq_events_query,
    .writable = sq_writable,
    .failed = sq_failed,
    .fail = sq_fail,
    .created_ms = sq_created_ms,
    .set_busy_timeout = sq_set_busy_timeout,
    .set_group_commit = sq_set_group_commit,
    /* the cluster operations stay NULL: store.c answers for a local store */
};
