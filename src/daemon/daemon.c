/* SPDX-License-Identifier: MIT */
/*
 * daemon.c: acceld's start-up and shutdown: options, data directory, admin
 * token, store, the node/device model (inventory + local discovery), the
 * stored modes and apps, the HTTP server and the supervisor.
 */
#include "common/accel_setup.h"
#include "daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/quantity.h"
#include "common/strmap.h"
#include "common/util.h"
#include "daemon/api/auth.h"
#include "daemon/api/http.h"
#include "daemon/api/metrics.h"
#include "daemon/api/prom_proxy.h"
#include "daemon/api/users.h"
#include "daemon/api/view.h"
#include "daemon/log.h"
#include "daemon/node/cluster/cluster.h"
#include "daemon/node/devices/ctxprobe.h"
#include "daemon/node/devices/discovery.h"
#include "daemon/node/devices/inventory.h"
#include "daemon/node/enforce/reclaim.h"
#include "daemon/node/enforce/reconcile.h"
#include "daemon/node/history/sampler.h"
#include "daemon/node/limits/vram.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/runtime/logs.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/node/slice/broker_ops.h"
#include "daemon/paths.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

/* Set by the handler, which runs on whichever thread the kernel picks
 * (the supervisor's, a worker's), and read by the main thread: a
 * lock-free atomic, safe in a handler and between threads (sig_atomic_t
 * is only the first). */
static _Atomic int got_signal;
/* The handler wakes the main thread through this pipe: pause() would wait
 * on when the signal was taken by another thread. */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    atomic_store(&got_signal, sig);
    if (signal_pipe[1] >= 0)
        (void)!write(signal_pipe[1], "s", 1);
    errno = saved;
}

/* ---- loading the store ---- */

/* Refuse a stored row: *why gets the sentence (store_loader's contract). */
static enum accel_err undecodable(char **why, char *sentence)
{
    *why = sentence;
    return ACCEL_ESTORE_CORRUPT;
}

static enum accel_err load_device(void *ctx, const struct store_device *row,
                                  char **why)
{
    struct accel_daemon *d = ctx;
    int dev = state_dev_find(d, row->id);
    enum accel_support st;
    json_t *settings = NULL;

    if (!accel_support_parse(row->support, &st))
        return undecodable(why, xasprintf("support \"%s\" is not a "
                                          "support type", row->support));
    if (row->settings) {
        settings = json_loads(row->settings, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(settings)) {
            json_decref(settings);
            return undecodable(why, xstrdup("settings is not a JSON "
                                            "object"));
        }
    }
    /* a device the inventory no longer declares, or of a type that no
     * longer allows the mode, is not an undecodable row: its mode is gone */
    if (dev < 0 || !accel_type_allows(d->snap.devs[dev].type, st)) {
        json_decref(settings);
        return ACCEL_OK;
    }
    d->snap.devs[dev].st = st;
    d->dinfo[dev].settings = settings;
    state_dev_settings_applied(d, dev);
    return ACCEL_OK;
}

static enum accel_err load_node(void *ctx, const struct store_node *row,
                                char **why)
{
    struct accel_daemon *d = ctx;
    int n = state_node_find(d, row->name);
    (void)why;
    if (n >= 0)
        d->snap.nodes[n].enabled = row->enabled;
    return ACCEL_OK;
}

static enum accel_err load_user(void *ctx, const struct store_user *row,
                                char **why)
{
    struct accel_daemon *d = ctx;
    struct user_rec *u;
    if (!accel_name_valid(row->name))
        return undecodable(why, xasprintf("\"%s\" is not a valid user "
                                          "name", row->name));
    d->users = xrealloc(d->users, (d->nusers + 1) * sizeof(*d->users));
    u = &d->users[d->nusers++];
    u->name = xstrdup(row->name);
    u->admin = strcmp(row->role, "admin") == 0;
    util_strlcpy(u->hash, row->token_hash, sizeof u->hash);
    u->created_ms = row->created_ms;
    u->max_apps = -1;
    u->max_gpu_mem = -1;
    return ACCEL_OK;
}

static enum accel_err load_limits(void *ctx, const struct store_limits *row,
                                  char **why)
{
    (void)why;
    struct user_rec *u = state_user_find(ctx, row->name);
    if (u) {
        u->max_apps = row->max_apps;
        u->max_gpu_mem = row->max_gpu_memory;
    }
    return ACCEL_OK;
}

static enum accel_err load_identity(void *ctx,
                                    const struct store_identity *row,
                                    char **why)
{
    (void)why; /* the store checks the name and the uid's range */
    return identity_load_row(ctx, row->name, row->uid);
}

/*
 * An app stored mid-transition (acceld died during it): a stop that still
 * has a leader carries on (the supervisor sends SIGTERM again, kills after
 * the stop timeout, and releases or deletes the app once its cgroup is
 * empty: the reason stored with `stopping` says which); one that was
 * resuming with a leader is running again; one resuming with none (the
 * resume was acknowledged, its start never reached the store) starts again
 * once what may be left of an unrecorded run is gone (runtime_end_orphans
 * kills it; the reconciler waits for it, then starts the app instead of
 * releasing it: SPEC 9, no acknowledged change lost across a kill -9); a
 * release that was waiting goes on waiting for the reconciler; a stop with
 * no process left finishes as a release.
 */
static void adopt_state(struct accel_daemon *d, struct app *a)
{
    bool mid = a->state == APP_STOPPING || a->state == APP_RESUMING;
    bool uninstall = a->reason && strcmp(a->reason, "uninstalling") == 0;
    if (a->state == APP_STOPPING && a->pid > 0) {
        runtime_stop_begin(a, APP_STOPPED, uninstall ? NULL : a->reason,
                           uninstall);
    } else if (mid && a->pid > 0) {
        a->state = APP_RUNNING;
    } else if (a->state == APP_RESUMING && !state_app_multi(d, a)) {
        a->state = APP_RELEASING;
        a->rel.to = APP_RESUMING;
        a->rel.kill_at_ms =
            util_wall_ms() + (int64_t)a->m.run.stop_timeout_s * 1000;
    } else if (mid || a->state == APP_RELEASING) {
        a->state = APP_RELEASING;
        a->rel.to = APP_STOPPED;
        a->rel.uninstall = uninstall;
        a->rel.last_pid = a->pid;
        a->pid = 0;
    }
}

static enum accel_err load_app(void *ctx, const struct store_app *row,
                               char **why)
{
    struct accel_daemon *d = ctx;
    struct app *a = xcalloc(1, sizeof(*a));
    enum accel_type t = ACCEL_TYPE_CPU;

    *why = state_app_decode(row, a, &t);
    if (*why) {
        free(a);
        return ACCEL_ESTORE_CORRUPT;
    }
    a->name = xstrdup(row->name);
    a->owner = xstrdup(row->owner);
    a->reason = row->reason ? xstrdup(row->reason) : NULL;
    a->manifest_text = xstrdup(row->manifest);
    a->sel = -1;
    if (row->selected_type)
        a->sel = (int)(manifest_req(&a->m, t) - a->m.req);
    a->created_ms = row->created_ms;
    a->updated_ms = row->updated_ms;
    a->pid = row->pid;
    a->pid_start = row->pid_start;
    a->exit_status = row->exit_status;
    state_app_add(d, a); /* adopted once its rows are in (open_state) */
    return ACCEL_OK;
}

static enum accel_err load_alloc(void *ctx, const struct store_alloc *row,
                                 char **why)
{
    struct accel_daemon *d = ctx;
    struct app *a = state_app_find(d, row->app);
    int dev = state_dev_find(d, row->device);
    enum accel_type t;
    struct adm_row r;

    if (a == NULL) /* the store names a missing app row itself */
        return undecodable(why, xasprintf("its app \"%s\" is not loaded",
                                          row->app));
    if (!accel_type_parse(row->type, &t))
        return undecodable(why, xasprintf("type \"%s\" is not an "
                                          "accelerator type", row->type));
    if (dev < 0) {
        log_warn("app %s is bound to device %s on %s, which no longer "
                 "exists: the binding is reported, not kept in placement",
                 row->app, row->device, row->node);
        state_event(d, "reconciler.missing-device", row->app, row->node,
                    row->device, NULL,
                    "app %s is bound to device %s, which no longer exists",
                    row->app, row->device);
        return ACCEL_OK;
    }
    a->rows = xrealloc(a->rows, (a->nrows + 1) * sizeof(*a->rows));
    r = (struct adm_row){.dev = (uint32_t)dev, .memory = row->memory};
    a->rows[a->nrows++] = r; /* applied to the snapshot once all are read */
    return ACCEL_OK;
}

/*
 * Write a new token to path: created 0600 with O_EXCL|O_NOFOLLOW, so an
 * existing file or a link planted there is refused, never followed or
 * overwritten. 0 or 1 (after a message on stderr).
 */
static int write_token_file(const char *path, const char *token)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
    int err;
    if (fd < 0) {
        fprintf(stderr, "acceld: cannot create %s: %s%s\n", path,
                strerror(errno),
                errno == EEXIST ? " (a file or link is already there; it is "
                                  "not overwritten)"
                                : "");
        return 1;
    }
    if (write(fd, token, 64) == 64 && write(fd, "\n", 1) == 1 &&
        fsync(fd) == 0) {
        close(fd);
        return 0;
    }
    err = errno;
    close(fd);
    unlink(path);
    fprintf(stderr, "acceld: cannot write %s: %s\n", path, strerror(err));
    return 1;
}

/*
 * An existing admin.token must be a regular file of ours with no access
 * for anyone else: a link (never followed), another owner or a mode wider
 * than 0600 is refused. A missing file is fine (the admin may have moved
 * the token elsewhere). 0 or 1 (after a message).
 */
static int check_token_file(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT)
            return 0;
        fprintf(stderr, "acceld: cannot inspect %s: %s\n", path,
                strerror(errno));
        return 1;
    }
    if (S_ISLNK(sb.st_mode)) {
        fprintf(stderr, "acceld: %s is a symbolic link; refusing to start "
                        "(the token file is never read or written through a "
                        "link): remove the link\n", path);
        return 1;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() ||
        (sb.st_mode & 077) != 0) {
        fprintf(stderr, "acceld: %s has mode %04o and owner uid %ju; "
                        "refusing to start: the admin token must be a "
                        "regular file owned by uid %ju with mode 0600 "
                        "(chmod 600 %s, after checking nobody read it)\n",
                path, (unsigned)(sb.st_mode & 07777), (uintmax_t)sb.st_uid,
                (uintmax_t)geteuid(), path);
        return 1;
    }
    return 0;
}

/*
 * The admin user and its token file. First start (the database was just
 * created): create both. Otherwise the database must hold a user (an
 * existing database without one is refused), except with --repair, which
 * creates a new admin and replaces the token file when the admin row was
 * dropped.
 */
static int ensure_admin(struct accel_daemon *d, bool created)
{
    char token[65];
    char *path;
    enum accel_err rc;
    bool have_admin = false;

    for (size_t i = 0; i < d->nusers; i++)
        have_admin = have_admin || strcmp(d->users[i].name, "admin") == 0;
    if (have_admin)
        return 0;
    path = xasprintf("%s/admin.token", d->cfg.data_dir);
    if (!created && !d->cfg.repair && d->cfg.etcd) {
        /* the first acceld of a cluster creates the admin right after it
         * wrote the layout: one started at that moment comes back later */
        fprintf(stderr, "acceld: the cluster in etcd has no user \"admin\" "
                        "yet (the acceld that created it writes it at once "
                        "and its admin.token); refusing to start: start "
                        "this one again in a moment\n");
        free(path);
        return 1;
    }
    if (!created && !d->cfg.repair) {
        fprintf(stderr, "acceld: %s/accel.db: table users has no row "
                        "\"admin\"; refusing to start. `acceld --repair` "
                        "creates a new admin and replaces %s\n",
                d->cfg.data_dir, path);
        free(path);
        return 1;
    }
    if (!created && unlink(path) != 0 && errno != ENOENT) {
        fprintf(stderr, "acceld: cannot remove %s: %s\n", path,
                strerror(errno));
        free(path);
        return 1;
    }
    if (auth_token_new(token) != ACCEL_OK ||
        write_token_file(path, token) != 0) {
        free(path);
        return 1;
    }
    rc = users_add(d, "admin", true, token);
    if (rc != ACCEL_OK)
        fprintf(stderr, "acceld: cannot create the admin user: %s\n",
                accel_strerror(rc));
    else if (created)
        log_info("admin token written to %s", path);
    else
        fprintf(stderr, "acceld: --repair: the admin user was missing; a new "
                        "admin token is written to %s\n", path);
    free(path);
    return rc == ACCEL_OK ? 0 : 1;
}

/*
 * The data directory: created 0700 when missing; an existing one must be
 * a directory of ours that nobody else can write into (a link planted in
 * a group- or world-writable directory would redirect our files).
 */
static int check_data_dir(const char *dir)
{
    struct stat sb;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "acceld: cannot create %s: %s\n", dir,
                strerror(errno));
        return 1;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "acceld: the data directory %s is not a directory\n",
                dir);
        return 1;
    }
    if (sb.st_uid != geteuid() || (sb.st_mode & 022) != 0) {
        fprintf(stderr, "acceld: the data directory %s has mode %04o and "
                        "owner uid %ju; refusing to start: it must be owned "
                        "by uid %ju and writable by nobody else (chmod "
                        "go-w %s)\n",
                dir, (unsigned)(sb.st_mode & 07777), (uintmax_t)sb.st_uid,
                (uintmax_t)geteuid(), dir);
        return 1;
    }
    return 0;
}

/* ---- options ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: acceld [--data-dir DIR] [--listen HOST:PORT] "
            "[--inventory FILE]\n"
            "              [--node-name NAME] [--web-dir DIR] "
            "[--placement binpack|spread]\n"
            "              [--log-level debug|info|warn|error] "
            "[--reconcile-interval-ms MS]\n"
            "              [--app-uid-range LO-HI] [--userdb-dir DIR] "
            "[--history-interval SECONDS]\n"
            "              [--history-retention SECONDS] "
            "[--history-max-bytes SIZE]\n"
            "              [--prometheus URL]\n"
            "              [--no-cgroups] [--repair] [--version]\n"
            "              [--sysfs-root DIR] [--proc-root DIR] (discovery)\n"
            "              [--dev-root DIR] (a container app's device nodes; "
            "tests)\n"
            "              [--cgroup-root DIR] (dmem.capacity, the apps' "
            "dmem files)\n"
            "              [--hami-listen HOST:PORT [--hami-listen-any]\n"
            "               [--hami-users NAME|UID[,NAME|UID...]]]\n"
            "              [--user-logs-max SIZE|0]\n"
            "  a cluster (SPEC 10): --etcd URL[,URL...] [--etcd-prefix /accel/]\n"
            "              [--etcd-cacert FILE --etcd-cert FILE --etcd-key FILE]\n"
            "              [--etcd-insecure]\n"
            "              [--lease-ttl SECONDS] [--etcd-compact-retention SECONDS|0]\n"
            "              [--role agent|api|both] (default both)\n"
            "              with --node-name on every node\n"
            "defaults: --data-dir ./accel-data --listen %s "
            "--app-uid-range %u-%u\n",
            ACCEL_DEFAULT_LISTEN, IDENTITY_UID_LO_DEFAULT,
            IDENTITY_UID_HI_DEFAULT);
}

/* Milliseconds in [50, 3600000], or -1. */
static int parse_interval(const char *s)
{
    char *end = NULL;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 50 || v > 3600000)
        return -1;
    return (int)v;
}

/* A whole number in [lo, hi], or -1. */
#define OPT_RETENTION 1000 /* --etcd-compact-retention: no short form */
#define OPT_HISTORY_MAX 1001 /* --history-max-bytes */
#define OPT_ROLE 1002 /* --role */
#define HISTORY_MAX_BYTES_MIN ((uint64_t)1 << 20)
#define HISTORY_MAX_BYTES_MAX ((uint64_t)64 << 30)

static long parse_seconds(const char *s, long lo, long hi)
{
    char *end = NULL;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    return v;
}

/* *p made absolute against the working directory at start; NULL and
 * absolute paths stay as they are. 0, or -1 when the directory is gone. */
static int absolute(char **p)
{
    char *cwd, *abs;
    const char *rel;
    if (*p == NULL || (*p)[0] == '/')
        return 0;
    cwd = getcwd(NULL, 0);
    if (cwd == NULL)
        return -1;
    rel = *p;
    while (rel[0] == '.' && rel[1] == '/')
        rel += 2;
    abs = strcmp(rel, ".") == 0 || rel[0] == '\0'
              ? xstrdup(cwd)
              : xasprintf("%s%s%s", cwd, strcmp(cwd, "/") == 0 ? "" : "/",
                          rel);
    free(cwd);
    free(*p);
    *p = abs;
    return 0;
}

/*
 * Every path acceld is given, and so every one it derives, absolute from
 * the start: acceld hands them to programs that run elsewhere (podman and
 * conmon resolve a relative path against their own directory, /), into
 * containers, CDI specs and shim configs (issue 47: the README's
 * `--data-dir ./accel-data` failed every container app). ACCEL_CDI_DIR
 * too, where people's containers' specs go.
 */
static int absolute_paths(struct accel_daemon *d)
{
    char **paths[] = {&d->cfg.data_dir,  &d->cfg.inventory,
                      &d->cfg.sysfs_root, &d->cfg.proc_root,
                      &d->cfg.dev_root,  &d->cfg.cgroup_root,
                      &d->cfg.web_dir,   &d->cfg.etcd_cacert,
                      &d->cfg.etcd_cert, &d->cfg.etcd_key};
    const char *cdi = getenv("ACCEL_CDI_DIR");
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        if (absolute(paths[i]) != 0) {
            fprintf(stderr, "acceld: %s is relative and the working "
                            "directory is gone: %s\n",
                    *paths[i], strerror(errno));
            return 2;
        }
    }
    if (cdi && cdi[0] != '/') {
        char *abs = xstrdup(cdi);
        if (absolute(&abs) != 0 || setenv("ACCEL_CDI_DIR", abs, 1) != 0) {
            fprintf(stderr, "acceld: ACCEL_CDI_DIR %s is relative and "
                            "cannot be made absolute: %s\n",
                    cdi, strerror(errno));
            free(abs);
            return 2;
        }
        free(abs);
    }
    return 0;
}

static int parse_options(struct accel_daemon *d, int argc, char **argv)
{
    static const struct option opts[] = {
        {"data-dir", required_argument, NULL, 'd'},
        {"listen", required_argument, NULL, 'l'},
        {"inventory", required_argument, NULL, 'i'},
        {"sysfs-root", required_argument, NULL, 'S'},
        {"proc-root", required_argument, NULL, 'O'},
        {"dev-root", required_argument, NULL, 'D'},
        {"cgroup-root", required_argument, NULL, 'g'},
        {"node-name", required_argument, NULL, 'n'},
        {"web-dir", required_argument, NULL, 'w'},
        {"log-level", required_argument, NULL, 'L'},
        {"placement", required_argument, NULL, 'p'},
        {"reconcile-interval-ms", required_argument, NULL, 'r'},
        {"app-uid-range", required_argument, NULL, 'u'},
        {"history-interval", required_argument, NULL, 'H'},
        {"history-retention", required_argument, NULL, 'R'},
        {"history-max-bytes", required_argument, NULL, OPT_HISTORY_MAX},
        {"role", required_argument, NULL, OPT_ROLE},
        {"prometheus", required_argument, NULL, 'P'},
        {"repair", no_argument, NULL, 'X'},
        {"no-cgroups", no_argument, NULL, 'G'},
        {"userdb-dir", required_argument, NULL, 'U'},
        {"etcd", required_argument, NULL, 'E'},
        {"etcd-prefix", required_argument, NULL, 'F'},
        {"etcd-cacert", required_argument, NULL, 'A'},
        {"etcd-cert", required_argument, NULL, 'C'},
        {"etcd-key", required_argument, NULL, 'K'},
        {"etcd-insecure", no_argument, NULL, 'Y'},
        {"lease-ttl", required_argument, NULL, 'T'},
        {"etcd-compact-retention", required_argument, NULL, OPT_RETENTION},
        {"hami-listen", required_argument, NULL, 'W'},
        {"hami-listen-any", no_argument, NULL, 'Z'},
        {"hami-users", required_argument, NULL, 'M'},
        {"user-logs-max", required_argument, NULL, 'B'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    char host[256], *cause = NULL;
    int c;

    d->cfg.data_dir = xstrdup("./accel-data");
    d->cfg.listen = xstrdup(ACCEL_DEFAULT_LISTEN);
    d->cfg.web_dir = paths_find(ACCEL_WEB_REL, ACCEL_WEB_DIR);
    d->cfg.log_level = LOG_INFO;
    d->cfg.uid_lo = IDENTITY_UID_LO_DEFAULT;
    d->cfg.uid_hi = IDENTITY_UID_HI_DEFAULT;
    d->cfg.history_interval = SAMPLER_DEFAULT_INTERVAL;
    d->cfg.history_retention = SAMPLER_DEFAULT_RETENTION;
    d->cfg.lease_ttl = 5;
    d->cfg.compact_retention = 600;
    d->cfg.user_logs_max = LOGS_USER_MAX_DEFAULT;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': free(d->cfg.data_dir); d->cfg.data_dir = xstrdup(optarg); break;
        case 'l': free(d->cfg.listen); d->cfg.listen = xstrdup(optarg); break;
        case 'i': d->cfg.inventory = xstrdup(optarg); break;
        case 'S': free(d->cfg.sysfs_root); d->cfg.sysfs_root = xstrdup(optarg); break;
        case 'O': free(d->cfg.proc_root); d->cfg.proc_root = xstrdup(optarg); break;
        case 'D': free(d->cfg.dev_root); d->cfg.dev_root = xstrdup(optarg); break;
        case 'g': free(d->cfg.cgroup_root); d->cfg.cgroup_root = xstrdup(optarg); break;
        case 'n': d->cfg.node_name = xstrdup(optarg); break;
        case 'W': free(d->cfg.hami_listen); d->cfg.hami_listen = xstrdup(optarg); break;
        case 'Z': d->cfg.hami_any = true; break;
        case 'B':
            if (quantity_parse_bytes(optarg, &d->cfg.user_logs_max) !=
                ACCEL_OK) {
                fprintf(stderr, "acceld: --user-logs-max must be a size such "
                                "as 100Mi or 1Gi (0: no bound)\n");
                return 2;
            }
            break;
        case 'M':
            free(d->cfg.hami_uids);
            if (http_hami_users_parse(optarg, &d->cfg.hami_uids,
                                      &d->cfg.nhami_uids, &cause) != ACCEL_OK) {
                fprintf(stderr, "acceld: %s\n", cause);
                free(cause);
                return 2;
            }
            break;
        case 'w': free(d->cfg.web_dir); d->cfg.web_dir = xstrdup(optarg); break;
        case 'L':
            d->cfg.log_level = log_level_parse(optarg);
            if (d->cfg.log_level < 0) {
                fprintf(stderr, "acceld: --log-level must be debug, info, "
                                "warn or error\n");
                return 2;
            }
            break;
        case 'p':
            if (strcmp(optarg, "binpack") == 0)
                d->cfg.policy = ADM_POLICY_BINPACK;
            else if (strcmp(optarg, "spread") == 0)
                d->cfg.policy = ADM_POLICY_SPREAD;
            else {
                fprintf(stderr, "acceld: --placement must be binpack or "
                                "spread\n");
                return 2;
            }
            break;
        case 'r':
            d->cfg.reconcile_ms = parse_interval(optarg);
            if (d->cfg.reconcile_ms <= 0) {
                fprintf(stderr, "acceld: --reconcile-interval-ms must be a "
                                "number from 50 to 3600000\n");
                return 2;
            }
            break;
        case 'u':
            if (identity_parse_range(optarg, &d->cfg.uid_lo, &d->cfg.uid_hi,
                                     &cause) != ACCEL_OK) {
                fprintf(stderr, "acceld: %s\n", cause);
                free(cause);
                return 2;
            }
            break;
        case 'H':
            d->cfg.history_interval = (int)parse_seconds(optarg, 1, 3600);
            if (d->cfg.history_interval <= 0) {
                fprintf(stderr, "acceld: --history-interval must be a number "
                                "of seconds from 1 to 3600\n");
                return 2;
            }
            break;
        case OPT_HISTORY_MAX:
            if (quantity_parse_bytes(optarg, &d->cfg.history_max_bytes) !=
                    ACCEL_OK ||
                d->cfg.history_max_bytes < HISTORY_MAX_BYTES_MIN ||
                d->cfg.history_max_bytes > HISTORY_MAX_BYTES_MAX) {
                fprintf(stderr, "acceld: --history-max-bytes must be a size "
                                "from 1Mi to 64Gi, such as 64Mi (the metric "
                                "history's values, every node's cards and "
                                "bindings together)\n");
                return 2;
            }
            break;
        case 'R':
            d->cfg.history_retention = (int)parse_seconds(optarg, 60,
                                                          31 * 86400);
            if (d->cfg.history_retention <= 0) {
                fprintf(stderr, "acceld: --history-retention must be a "
                                "number of seconds from 60 to 2678400\n");
                return 2;
            }
            break;
        case 'P':
            if (strncmp(optarg, "http://", 7) != 0 &&
                strncmp(optarg, "https://", 8) != 0) {
                fprintf(stderr, "acceld: --prometheus must be an http:// or "
                                "https:// URL\n");
                return 2;
            }
            free(d->cfg.prometheus);
            d->cfg.prometheus = xstrdup(optarg);
            break;
        case 'X': d->cfg.repair = true; break;
        case 'G': d->cfg.no_cgroups = true; break;
        case 'U':
            if (optarg[0] != '/') {
                fprintf(stderr, "acceld: --userdb-dir must be an absolute "
                                "path (systemd's is /run/userdb)\n");
                return 2;
            }
            free(d->cfg.userdb_dir);
            d->cfg.userdb_dir = xstrdup(optarg);
            break;
        case 'E':
            if (strncmp(optarg, "http://", 7) != 0 &&
                strncmp(optarg, "https://", 8) != 0) {
                fprintf(stderr, "acceld: --etcd must be a comma-separated "
                                "list of http:// or https:// URLs\n");
                return 2;
            }
            free(d->cfg.etcd);
            d->cfg.etcd = xstrdup(optarg);
            break;
        case 'F': free(d->cfg.etcd_prefix); d->cfg.etcd_prefix = xstrdup(optarg); break;
        case 'A': free(d->cfg.etcd_cacert); d->cfg.etcd_cacert = xstrdup(optarg); break;
        case 'C': free(d->cfg.etcd_cert); d->cfg.etcd_cert = xstrdup(optarg); break;
        case 'K': free(d->cfg.etcd_key); d->cfg.etcd_key = xstrdup(optarg); break;
        case 'Y': d->cfg.etcd_insecure = true; break;
        case 'T':
            d->cfg.lease_ttl = (int)parse_seconds(optarg, 2, 300);
            if (d->cfg.lease_ttl <= 0) {
                fprintf(stderr, "acceld: --lease-ttl must be a number of "
                                "seconds from 2 to 300\n");
                return 2;
            }
            break;
        case OPT_RETENTION:
            d->cfg.compact_retention = (int)parse_seconds(optarg, 0, 7 * 86400);
            if (d->cfg.compact_retention < 0 ||
                (d->cfg.compact_retention > 0 &&
                 d->cfg.compact_retention < 10)) {
                fprintf(stderr, "acceld: --etcd-compact-retention must be 0 "
                                "(no compaction) or a number of seconds from "
                                "10 to 604800\n");
                return 2;
            }
            break;
        case OPT_ROLE:
            if (strcmp(optarg, "both") == 0) {
                d->cfg.role = ROLE_BOTH;
            } else if (strcmp(optarg, "api") == 0) {
                d->cfg.role = ROLE_API;
            } else if (strcmp(optarg, "agent") == 0) {
                d->cfg.role = ROLE_AGENT;
            } else {
                fprintf(stderr, "acceld: --role must be agent, api or both "
                                "(got \"%.40s\")\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return -1;
        case 'V':
            printf("acceld %s (database schema %d)\n", ACCEL_VERSION,
                   store_schema_version());
            return -1;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (d->cfg.etcd == NULL &&
        (d->cfg.etcd_cacert || d->cfg.etcd_cert || d->cfg.etcd_key ||
         d->cfg.etcd_insecure || d->cfg.etcd_prefix)) {
        fprintf(stderr, "acceld: --etcd-cacert, --etcd-cert, --etcd-key, "
                        "--etcd-insecure and --etcd-prefix need --etcd (they "
                        "are about the cluster's etcd)\n");
        return 2;
    }
    if (d->cfg.role != ROLE_BOTH && d->cfg.etcd == NULL) {
        fprintf(stderr, "acceld: --role needs --etcd (a node's role is in "
                        "a cluster)\n");
        return 2;
    }
    if (d->cfg.hami_uids != NULL && d->cfg.hami_listen == NULL) {
        fprintf(stderr, "acceld: --hami-users needs --hami-listen (it says "
                        "who may use that listener)\n");
        return 2;
    }
    if (d->cfg.hami_listen &&
        http_check_hami(d->cfg.hami_listen, d->cfg.hami_any, &cause) !=
            ACCEL_OK) {
        fprintf(stderr, "acceld: %s\n", cause);
        free(cause);
        return 2;
    }
    if (d->cfg.node_name == NULL) {
        if (gethostname(host, sizeof host) != 0)
            util_strlcpy(host, "localhost", sizeof host);
        host[sizeof host - 1] = '\0';
        for (char *p = host; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
            else if (*p == '.')
                *p = '\0';
        d->cfg.node_name = xstrdup(accel_name_valid(host) ? host : "local");
    }
    if (!accel_name_valid(d->cfg.node_name)) {
        fprintf(stderr, "acceld: --node-name must be 1-63 characters of a-z, "
                        "0-9 and '-'\n");
        return 2;
    }
    return absolute_paths(d);
}

/*
 * Before the database is opened: the data directory is safe, an existing
 * token file is one we may trust, and a token without a database (the
 * database removed or lost) is not taken for a first start.
 */
static int check_files(struct accel_daemon *d, const char *db)
{
    char *token = xasprintf("%s/admin.token", d->cfg.data_dir);
    struct stat sb;
    int rc = check_token_file(token);
    if (rc == 0 && !d->cfg.etcd && lstat(db, &sb) != 0 && errno == ENOENT &&
        lstat(token, &sb) == 0) {
        fprintf(stderr, "acceld: %s exists but %s does not; refusing to "
                        "start: a first start writes a new token there. "
                        "Restore %s, or remove %s to start afresh\n",
                token, db, db, token);
        rc = 1;
    }
    free(token);
    return rc;
}

/* Read every table; with --repair say what was dropped. 0 or 1. */
static int load_state(struct accel_daemon *d)
{
    struct store_loader l = {.ctx = d,
                             .app = load_app,
                             .alloc = load_alloc,
                             .device = load_device,
                             .node = load_node,
                             .user = load_user,
                             .identity = load_identity,
                             .limits = load_limits,
                             .repair = d->cfg.repair};
    char *cause = NULL;
    if (d->cfg.etcd)
        cluster_loader(&l);
    else
        d->registered_ms = store_created_ms(d->store); /* one machine */
    enum accel_err rc = store_set_group_commit(d->store, true);
    if (rc == ACCEL_OK)
        rc = store_load(d->store, &l, &cause);
    if (rc != ACCEL_OK) {
        if (cause)
            fprintf(stderr, "acceld: %s\n", cause);
        else
            fprintf(stderr, "acceld: cannot load the state: %s (%s)\n",
                    accel_strerror(rc), store_errmsg(d->store));
        free(cause);
        return 1;
    }
    if (d->cfg.repair) {
        fprintf(stderr, "acceld: --repair: %s\n",
                cause ? cause : "every row decodes; nothing was dropped");
        if (cause)
            log_warn("--repair %s", cause);
    }
    free(cause);
    return 0;
}

static int open_state(struct accel_daemon *d)
{
    char *path, *cause = NULL;
    enum accel_err rc;
    struct inventory inv = {0};

    if (check_data_dir(d->cfg.data_dir) != 0)
        return 1;
    path = xasprintf("%s/accel.db", d->cfg.data_dir);
    if (check_files(d, path) != 0) {
        free(path);
        return 1;
    }
    if (d->cfg.inventory &&
        inventory_load(d->cfg.inventory, &inv, &cause) != ACCEL_OK) {
        fprintf(stderr, "acceld: %s\n", cause);
        free(cause);
        free(path);
        return 1;
    }
    if (d->cfg.etcd) {
        struct store_etcd_opts eo = {.endpoints = d->cfg.etcd,
                                     .cacert = d->cfg.etcd_cacert,
                                     .cert = d->cfg.etcd_cert,
                                     .key = d->cfg.etcd_key,
                                     .prefix = d->cfg.etcd_prefix,
                                     .node = d->cfg.node_name,
                                     .insecure = d->cfg.etcd_insecure,
                                     .agent = d->cfg.role == ROLE_AGENT,
                                     /* a write stuck on a member that lost
                                      * its leader gives up in time for the
                                      * next to go through the new one
                                      * (SPEC 11: writes resume within 5 s) */
                                     .timeout_ms = 3000};
        rc = store_open_etcd(&eo, &d->store, &cause);
    } else {
        rc = store_open(path, &d->store, &cause);
    }
    free(path);
    if (rc != ACCEL_OK) {
        fprintf(stderr, "acceld: %s\n", cause ? cause : accel_strerror(rc));
        free(cause);
        inventory_release(&inv);
        return 1;
    }
    discovery_inventory(d, &inv);
    if (state_node_find(d, d->cfg.node_name) < 0)
        discovery_local(d);
    else if (d->nvml_status == NULL)
        d->nvml_status = xstrdup("the local node is declared by the inventory");
    inventory_release(&inv);
    /* one WAL fsync serves every request waiting at that moment; each
     * answer to a changing request waits for it (http.c) */
    if (load_state(d) != 0)
        return 1;
    for (size_t i = 0; i < d->napps; i++) {
        static const struct adm_req none;
        struct app *a = d->apps[i];
        const struct adm_req *req = state_app_req(a);
        if (a->nrows) {
            a->row_usage = xcalloc(a->nrows, sizeof(*a->row_usage));
            adm_snapshot_apply(&d->snap, req ? req : &none, a->rows, a->nrows);
        }
        /* another node's app is that node's agent's to adopt */
        if (!state_app_remote(d, a))
            adopt_state(d, a);
    }
    /* from here on every change to the snapshot keeps it current */
    if (adm_index_build(&d->snap) != ACCEL_OK)
        log_warn("no memory for the placement index: placement scans");
    if (ensure_admin(d, store_created(d->store)) != 0)
        return 1;
    rc = identity_start(d);
    if (rc != ACCEL_OK) {
        fprintf(stderr, "acceld: cannot store the users' uids: %s\n",
                accel_strerror(rc));
        return 1;
    }
    return 0;
}

static void find_shim(struct accel_daemon *d)
{
    char *p = getenv("ACCEL_SHIM") ? xstrdup(getenv("ACCEL_SHIM"))
                                   : paths_find(ACCEL_SHIM_REL,
                                                ACCEL_SHIM_PATH);
    if (access(p, R_OK) == 0) {
        log_info("apps get the preload shim %s", p);
        d->shim_path = p;
    } else {
        log_warn("no preload shim at %s: apps run without enforcement", p);
        free(p);
    }
}
/* An app leaves for good: its logs go, and what it lent and got. */
static void app_removed(struct accel_daemon *d, const struct app *a)
{
    logs_app_removed(d, a);
    reclaim_app_removed(d, a->name);
}

/* A live quota cut left an app above its new quota (SPEC 4.4): its reclaim
 * action is asked for what passes the quota (issue 46 items 3 and 4); an
 * app with none keeps getting refusals until it frees by itself. */
static void quota_over(struct accel_daemon *d, const char *name,
                       const char *device, uint64_t held, uint64_t quota)
{
    if (held <= quota)
        return;
    if (!reclaim_give_back(d, name, device, held - quota, "quota"))
        log_info("app %s holds %llu MiB above its new quota on %s and has "
                 "no reclaim action running here: its allocations are "
                 "refused until it is under",
                 name, (unsigned long long)((held - quota) >> 20), device);
}

int daemon_main(int argc, char **argv)
{
    static struct accel_daemon daemon; /* the one context */
    struct accel_daemon *d = &daemon;
    char *cause = NULL;
    int port, port_hami, rc;
    struct sigaction sa;

    /* Memory (SPEC 11: <= 50 MiB at 1,000 nodes x 8 GPUs): listings are
     * megabytes, built on the HTTP threads. With glibc's defaults each
     * thread's arena keeps them resident, and the adaptive mmap threshold
     * climbs to the largest buffer freed (so the next ones stay in the
     * heap) and takes the trim threshold with it. A fixed threshold puts
     * every buffer of 256 KiB or more in its own mapping, unmapped when
     * freed, and a heap gives back a free top of more than 1 MiB. (The
     * 64 MiB threshold set here before did the opposite: it kept every
     * listing's text in the heap and trimmed nothing under 128 MiB.) The
     * trees the listings build are many small blocks: http.c trims after
     * a request whose trees took megabytes (HTTP_TRIM_AFTER). */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
    mallopt(M_ARENA_MAX, 2);
    http_count_trees(); /* before any thread: jansson's allocator */
    prom_proxy_init();
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->sync_lock, NULL);
    pthread_mutex_init(&d->files_lock, NULL);
    pthread_cond_init(&d->sync_cond, NULL);
    pthread_mutex_init(&d->ev_lock, NULL);
    pthread_cond_init(&d->ev_cond, NULL);
    d->node_index = strmap_new();
    d->dev_index = strmap_new();
    d->app_index = strmap_new();
    d->owner_index = strmap_new();
    d->snap.node_index = d->node_index;
    d->snap.dev_index = d->dev_index;
    d->metrics = metrics_new();
    /* what the shared state calls above itself (daemon.h) */
    d->hooks = (struct accel_hooks){.commit_timed = metrics_commit,
                                    .event_appended = http_wake_parked_locked,
                                    .device_changed = view_touch,
                                    .rows_released = runtime_release_files,
                                    .held_outside = runtime_held_outside,
                                    .app_removed = app_removed,
                                    .app_lingering = reconcile_app_lingering,
                                    .quota_over = quota_over};
    rc = parse_options(d, argc, argv);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (identity_check_machine_range(d->cfg.uid_lo, d->cfg.uid_hi, &cause) !=
        ACCEL_OK) {
        fprintf(stderr, "acceld: %s\n", cause);
        free(cause);
        return 2;
    }
    log_set_level((enum log_level)d->cfg.log_level);
    find_shim(d);
    log_info("the web page is served from %s", d->cfg.web_dir);
    if (d->cfg.user_logs_max > 0) {
        char b[32];
        quantity_format_bytes(d->cfg.user_logs_max, b, sizeof b);
        log_info("each user's apps' logs take %s at most together "
                 "(--user-logs-max); GET /api/users shows logBytes", b);
    }
    if (open_state(d) != 0)
        return 1;
    runtime_cgroups_init(d);
    runtime_end_orphans(d);
    vram_init(d); /* which tier holds each device's VRAM quotas */
    /* before the routes that read it: a request never sees no history */
    if (sampler_start(d) != ACCEL_OK)
        log_error("cannot start the metric history");
    runtime_supervisor_start(d);
    /* a cluster's node joins before it answers: a second acceld with the
     * same node name is refused here, having served nothing */
    if (d->cfg.etcd && cluster_start(d, &cause) != ACCEL_OK) {
        fprintf(stderr, "acceld: %s\n", cause ? cause : "cannot join");
        free(cause);
        cluster_stop(d);
        runtime_supervisor_stop(d);
        return 1;
    }
    /* everything a request reads is in place before the server answers
     * the first one (and, below, is taken down only after the server has
     * answered its last): the brokers and the reconciler publish
     * d->brokers and d->reconcile (docs/internals/threads.md) */
    if (broker_ops_start(d) != ACCEL_OK)
        log_warn("time-slice brokers not started");
    if (reconcile_start(d) != ACCEL_OK)
        log_error("cannot start the reconciler thread");
    if (reclaim_start(d) != ACCEL_OK) /* elastic memory (SPEC 4.4) */
        log_warn("elastic memory's reclaim socket not started");
    if (http_start(d, d->cfg.listen, &port, &cause) != ACCEL_OK) {
        fprintf(stderr, "acceld: %s\n", cause);
        free(cause);
        reclaim_stop(d);
        reconcile_stop(d);
        broker_ops_stop(d);
        cluster_stop(d);
        runtime_supervisor_stop(d);
        return 1;
    }
    if (d->cfg.hami_listen &&
        http_start_hami(d, d->cfg.hami_listen, d->cfg.hami_any, &port_hami,
                        &cause) != ACCEL_OK) {
        fprintf(stderr, "acceld: %s\n", cause);
        free(cause);
        http_stop(d);
        reclaim_stop(d);
        reconcile_stop(d);
        broker_ops_stop(d);
        cluster_stop(d);
        runtime_supervisor_stop(d);
        return 1;
    }
    /* in the background, once the server answers: nothing waits for it */
    if (ctxprobe_start(d) != ACCEL_OK)
        log_warn("cannot start the context probe's thread: the apps' "
                 "first processes measure a context's size");
    if (pipe2(signal_pipe, O_CLOEXEC) == 0)
        fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* under the lock: the reconciler, started above, replaces
     * d->nvml_status (and the counts) when NVML's status changes */
    pthread_mutex_lock(&d->lock);
    log_info("acceld listening on http://127.0.0.1:%d (node %s, %zu nodes, "
             "%zu devices, %zu apps; %s)", port, d->cfg.node_name,
             d->snap.nnodes, d->snap.ndevs, d->napps, d->nvml_status);
    pthread_mutex_unlock(&d->lock);
    {
        char *addr = xasprintf("%s/acceld.port", d->cfg.data_dir);
        int fd = open(addr, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
                                O_CLOEXEC, 0644);
        if (fd >= 0) {
            dprintf(fd, "%d\n", port);
            close(fd);
        }
        free(addr);
    }
    while (!atomic_load(&got_signal)) {
        char c;
        if (signal_pipe[0] < 0)
            pause();
        else if (read(signal_pipe[0], &c, 1) < 0 && errno != EINTR)
            pause();
    }
    log_info("acceld stopping (signal %d); apps keep running",
             atomic_load(&got_signal));
    /* the server first: no request is in flight while what it reads is
     * taken down (a request waiting for the watch still has it) */
    http_stop(d);
    ctxprobe_stop(d); /* a probe in flight is killed */
    runtime_supervisor_stop(d);
    cluster_stop(d); /* the lease is given back: unreachable at once */
    reclaim_stop(d);
    broker_ops_stop(d);
    reconcile_stop(d);
    sampler_stop(d);
    /* a slow operation may still be stopping an app on its own thread
     * (http_slow.c): it is not waited for (apps keep running), and from
     * here on it finds d->lock held and the process gone; the cgroups and
     * the store are closed only when no such thread could still use them
     * (no new one starts: the server is stopped) */
    if (atomic_load(&d->slow_ops) == 0) {
        vram_fini(d);
        runtime_cgroups_fini(d);
    }
    pthread_mutex_lock(&d->lock);
    if (atomic_load(&d->slow_ops) == 0)
        store_close(d->store);
    else
        log_info("acceld: %d operations still stopping apps; their apps "
                 "are reconciled at the next start",
                 (int)atomic_load(&d->slow_ops));
    return 0;
}
