/* SPDX-License-Identifier: MIT */
/*
 * state.h: the one owned context of acceld (STYLE 13), struct accel_daemon,
 * and its in-memory state: nodes and devices (kept as the admission
 * snapshot plus parallel descriptive arrays), apps with their allocations,
 * users; and its write-through to the store. The layer below node/ and
 * api/ (docs/internals/layout.md): it includes neither. Everything is
 * guarded by d->lock; every change is written through to the store inside
 * the same critical section before the answer is sent. Callers of the
 * functions below hold d->lock. The pattern of every change (SPEC 9):
 * state_tx_begin, state_save_* of the rows as they will be, state_tx_commit;
 * only when the commit succeeded is memory changed. A failed commit leaves
 * memory and disk as they were.
 */
#ifndef ACCEL_DAEMON_STATE_H
#define ACCEL_DAEMON_STATE_H

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "accel/accel.h"
#include "daemon/rules/admission.h"
#include "daemon/rules/manifest.h"

struct cgroup_sys;
struct applog;

struct store;
struct store_app;
struct cluster;
struct strmap;
struct http_server;
struct metrics;
struct vram;
struct view_piece;
struct broker_set;
struct reconcile;
struct reclaim;
struct identity_rec;
struct history;
struct sampler;
struct app;
struct accel_daemon;

/* App states of SPEC 1 (+ releasing of SPEC 8.3). */
#define APP_STATE_MAP(XX)                                                      \
    XX(INSTALLED, "installed")                                                 \
    XX(RESUMING, "resuming")                                                   \
    XX(RUNNING, "running")                                                     \
    XX(STOPPING, "stopping")                                                   \
    XX(STOPPED, "stopped")                                                     \
    XX(FAILED, "failed")                                                       \
    XX(UNINSTALLING, "uninstalling")                                           \
    XX(RELEASING, "releasing")

enum app_state {
#define APP_STATE_ENUM_(n, s) APP_##n,
    APP_STATE_MAP(APP_STATE_ENUM_)
#undef APP_STATE_ENUM_
    APP_STATE_COUNT
};
const char *app_state_name(enum app_state s);
bool app_state_parse(const char *s, enum app_state *out);

struct node_info {
    char *name;          /* node name */
    bool local;          /* this machine: runs apps for real */
    bool probed;         /* added by NVML discovery, not the inventory */
    bool member;         /* cluster: another node's agent registered it
                            (its apps run there, not here) */
    bool reachable;      /* cluster: its agent's lease holds (always true
                            for this node and outside a cluster) */
    bool removed;        /* cluster: forgotten (accelctl node remove) */
    int64_t beat_ns;     /* cluster: util_now_ns when its agent's live key
                            was last written (its beat), 0 never */
    json_t *host;        /* cluster: what its agent registered of its
                            machine (hostinfo_json), NULL when unknown */
};

/* The SM utilization NVML attributes to one app's processes on a device,
 * and when acceld last saw the app busy there. */
struct app_util {
    char *app;           /* app name (owned) */
    int sm;              /* percent of the device, summed over its pids;
                            -1 when none of them has a sample */
    uint64_t used;       /* its processes' memory as the driver counts it */
    int64_t busy_ms;     /* monotonic ms of the last pass that saw it busy
                            here (SM above 0, or `used` changed: what the
                            device saw, never what the app wrote), 0 never;
                            elastic memory asks the idlest first */
};

/* The outside meter's reading of one app on a Memory-slicing device
 * (node/meter.c, docs/internals/meter.md). */
struct app_meter {
    char *app;           /* app name (owned) */
    uint64_t driver;     /* bytes NVML lists for the app's processes */
    uint64_t charged;    /* bytes the shim charged (the ledger's used) */
    uint64_t excess;     /* this pass: driver - charged, 0 if below */
    uint64_t untracked;  /* charged into the ledger: the lower of this
                            pass's excess and the last one's */
    uint64_t limit;      /* the quota */
    uint64_t over;       /* charged + untracked - limit, 0 within it */
    bool reported;       /* over beyond the tolerance: event sent */
};

struct dev_info {
    char *id;            /* device id */
    char *model;         /* card model */
    int index;           /* NVML index, -1 if none */
    struct view_piece *json; /* cached device JSON, NULL = stale (view.c) */
    uint64_t used_mem;   /* live VRAM use (NVML or ledgers), bytes */
    int util;            /* utilization %, NVML; -1 unknown */
    int64_t power_mw;    /* power draw, milliwatts (NVML); -1 unknown */
    int64_t power_limit_mw; /* enforced power limit, mW; -1 unknown */
    int temp;            /* GPU temperature, degrees C; -1 unknown */
    uint8_t util_na, power_na, limit_na, temp_na; /* enum nvml_na: why
                            the value beside it is unknown (nvml.h) */
    json_t *settings;    /* per-device settings object (time slice, ...) */
    bool discovered;     /* found through NVML: a refresh may mark it gone */
    bool drm;            /* found in the DRM sysfs (drm.h): the
                            reconciler refreshes it from there */
    char *mem_source;    /* where `memory` came from (a sentence), NULL =
                            the inventory */
    char *used_source;   /* where used_mem came from (DRM devices), NULL =
                            not said */
    json_t *foreign;     /* reconciler: [{pid, usedMemory}] of processes of
                            no app on it; NULL when none (SPEC 8.3) */
    struct app_util *autil; /* reconciler: per-app SM utilization from
                            NVML's per-process samples; NULL when none */
    size_t nautil;       /* entries of autil */
    struct app_meter *meter; /* reconciler: the outside meter per app
                            bound with a quota here; NULL when none */
    size_t nmeter;       /* entries of meter */
    bool reported_healthy; /* cluster: health as its agent reported it
                            (snap health = this and the node reachable) */
    char *pci;           /* PCI address "0000:03:00.0" (NVML, the DRM
                            sysfs), NULL unknown: names its dmem region */
    char *render;        /* DRM render node "renderD128" (the DRM sysfs),
                            NULL unknown: a container app's device node */
    uint8_t vram_tier;   /* enum vram_tier this node offers the device's
                            quotas (node/vram.h); 0 = not looked at */
    char *vram_region;   /* its dmem region (the kernel tier), NULL none */
    char *vram_note;     /* that tier, or why no stronger one, as a
                            sentence (vram.c); NULL = not looked at */
};

/* Reconciler bookkeeping of an app whose processes still hold a device
 * after its stop (state `releasing`, SPEC 2.7/8.3). */
struct app_release {
    int64_t last_pid;            /* leader of the last run (NVML may still
                                    list it while the driver tears down) */
    uint32_t linger;             /* processes seen on its devices after the
                                    stop; >0 makes a release wait */
    enum app_state to;           /* state once the processes are gone */
    bool uninstall;              /* delete the app once they are gone */
    int64_t kill_at_ms;          /* SIGKILL leftovers after this, 0 = unset */
};

 /* A stop under way (state `stopping`) that the supervisor drives (SPEC
 * 5.6): SIGTERM to every process of the app's cgroup, cgroup.kill at
 * kill_at_ms, and once the cgroup is empty and NVML lists none of its
 * processes, the release (or the uninstall). */
struct app_stop {
    bool active;                 /* the supervisor drives this stop */
    int64_t pid;                 /* the leader it stops: a stop whose
                                    process is no longer the app's (it
                                    ended another way) is over */
    bool term_sent;              /* SIGTERM sent to the cgroup */
    bool term_found;             /* ...and the cgroup held processes then:
                                    once it is empty they are gone, the
                                    leader's own end aside (runtime.c) */
    bool killed;                 /* cgroup.kill (or SIGKILL) sent */
    bool uninstall;              /* delete the app once it is gone */
    enum app_state to;           /* state once gone (stopped) */
    char *reason;                /* reason then (owned), NULL = none */
    int64_t kill_at_ms;          /* kill after this (stopTimeoutSeconds) */
    int64_t give_up_ms;          /* survivors of the kill after this: the
                                    app waits `releasing` for the cgroup */
};

struct app {
    char *name;                  /* app name */
    char *owner;                 /* owner user or "shared" */
    size_t owner_pos;            /* index in its owner's list (owned) */
    enum app_state state;        /* lifecycle state */
    char *reason;                /* why (failed, insufficient-resources) */
    char *manifest_text;         /* the manifest as installed, compact JSON
                                    (text: a tree per app costs kilobytes) */
    struct manifest m;           /* parsed */
    int sel;                     /* index into m.req of the selected type, -1 */
    struct adm_row *rows;        /* allocations (device index + memory) */
    size_t nrows;
    int64_t created_ms, updated_ms;
    int64_t pid;                 /* process group leader, 0 if none */
    uint64_t pid_start;          /* its start time (identity) */
    int64_t exit_status;         /* last exit status, -1 if none */
    uint64_t usage;              /* live memory use from ledgers, bytes */
    uint64_t *row_usage;         /* [nrows] live use per allocation row */
    struct app_release rel;      /* releasing: what waits for the GPU */
    struct app_stop stop;        /* stopping: the stop under way */
    bool stop_blocking;          /* a request's own stop holds the app, the
                                    lock let go (ops_stop_processes): no
                                    supervisor stop begins beside it */
    bool leader_gone;            /* the leader exited; its cgroup still
                                    holds processes, so the app runs on */
    int leader_status;           /* its wait status then */
    char **parts;                /* bound across nodes (SPEC 10): the nodes
                                    whose part runs (parts/<app>/<node>);
                                    this node's part's leader is pid */
    size_t nparts;
    bool committing;             /* installed in memory, its transaction on
                                    its way to etcd (ops.c): other changes
                                    to it wait (409); d->lock is released
                                    meanwhile, so a removal (another node's
                                    delete through the watch, its owner
                                    removed) only unlinks it and sets
                                    removed: the committing thread, which
                                    still holds the pointer, frees it */
    bool removed;
    uint8_t *row_vram;           /* [nrows] enum vram_tier holding each
                                    row's quota on this node (node/vram.c),
                                    NULL = none applied */
    char *vram_refused;          /* why a stronger tier was refused at its
                                    start (vram.c), NULL = none was */
    json_t *image_pin;           /* a container app's image on this node
                                    (runner_container.c): {ref, id, digest,
                                    preload}, {} = none, NULL = not read */
    json_t *pull;                /* its install's pull (ops.c): {state:
                                    "pulling"|"done"|"failed", progress,
                                    message}, NULL = none */
    uint64_t pin_check;          /* a cluster's start asking podman whether
                                    its pinned image is still here (pull.c):
                                    that check's number, 0 = none */
};

/* What a cluster's acceld does (--role; docs/cluster.md, "Roles"). */
enum node_role {
    ROLE_BOTH = 0, /* the default: an API server that also runs its
                      node's apps (every node before the roles) */
    ROLE_API,      /* the same; says the node is meant to serve */
    ROLE_AGENT,    /* runs and enforces its node's apps, decides nothing,
                      watches only what its node needs */
};

struct accel_config {
    char *data_dir;      /* --data-dir */
    char *listen;        /* --listen HOST:PORT */
    char *hami_listen;   /* --hami-listen HOST:PORT or NULL (http.h) */
    bool hami_any;       /* --hami-listen-any: not loopback only */
    uint64_t user_logs_max; /* --user-logs-max bytes: one user's logs
                               together (node/logs.c), 0 = no bound */
    uint32_t *hami_uids; /* --hami-users: the local uids it serves, or
                            NULL: those outside uid_lo-uid_hi (http_hami.c) */
    size_t nhami_uids;   /* how many */
    char *inventory;     /* --inventory FILE or NULL */
    char *sysfs_root;    /* --sysfs-root DIR: DRM discovery (default /sys) */
    char *proc_root;     /* --proc-root DIR: meminfo, fdinfo (default /proc) */
    char *dev_root;      /* --dev-root DIR: where a container app's device
                            nodes (kfd, dri/renderD*) are, for tests'
                            stand-in nodes (default /dev) */
    char *cgroup_root;   /* --cgroup-root DIR: dmem.capacity and the apps'
                            dmem files (default: the cgroup v2 mount) */
    char *node_name;     /* --node-name or host name */
    char *web_dir;       /* --web-dir */
    int log_level;       /* --log-level */
    enum adm_policy policy; /* --placement binpack|spread */
    int reconcile_ms;    /* --reconcile-interval-ms (default 5000) */
    uint32_t uid_lo;     /* --app-uid-range LO (default 65536) */
    uint32_t uid_hi;     /* --app-uid-range HI (default 99999) */
    int history_interval;  /* --history-interval seconds (default 15) */
    int history_retention; /* --history-retention seconds (default 86400) */
    uint64_t history_max_bytes; /* --history-max-bytes (0: the history's
                                   default, 16 MiB) */
    char *prometheus;    /* --prometheus URL: monitor queries go there */
    bool repair;         /* --repair: drop undecodable store rows */
    bool no_cgroups;     /* --no-cgroups: apps in no cgroup (runtime.c) */
    char *userdb_dir;    /* --userdb-dir: register the apps' uids there as
                            systemd userdb records (identity.c), or NULL */
    char *etcd;          /* --etcd URLS: the cluster store (SPEC 10) */
    char *etcd_prefix;   /* --etcd-prefix (default /accel/) */
    char *etcd_cacert;   /* --etcd-cacert, --etcd-cert, --etcd-key */
    char *etcd_cert;
    char *etcd_key;
    bool etcd_insecure;  /* --etcd-insecure: accept an etcd open to all */
    int lease_ttl;       /* --lease-ttl seconds (default 5) */
    int compact_retention; /* --etcd-compact-retention seconds of etcd's
                              history the elected housekeeper keeps
                              (default 600), 0: no compaction */
    enum node_role role; /* --role (default both; docs/cluster.md) */
};

/* A member without a limit of its own may hold this many apps: what one
 * user can make acceld keep (each app's manifest is up to 1 MiB). */
#define ACCEL_MEMBER_MAX_APPS_DEFAULT 100
#define ACCEL_MAX_APPS_LIMIT 100000 /* the largest maxApps an admin may set */

struct user_rec {
    char *name;          /* user name */
    bool admin;          /* role admin */
    char hash[65];       /* hex SHA-256 of the token */
    int64_t created_ms;
    int64_t max_apps;    /* PUT /api/users: -1 = the default (members) */
    int64_t max_gpu_mem; /* bytes, -1 = no limit */
    uint64_t log_bytes;  /* its apps' logs on this node (node/logs.c) */
};

/*
 * What the shared state (state.c) tells the parts above it: state.c
 * includes no header of node/ or api/ (docs/internals/layout.md) and calls
 * these instead. The wiring (daemon.c) sets them before any thread starts;
 * they are read-only then. A NULL hook is skipped (a daemon built by hand
 * in a unit test).
 */
struct accel_hooks {
    /* a store commit took ns (the /metrics histogram) */
    void (*commit_timed)(struct accel_daemon *d, uint64_t ns);
    /* an event of app (NULL: none) owned by owner (NULL: unknown) was
     * appended: wake the long-polls it concerns (d->ev_lock held) */
    void (*event_appended)(struct accel_daemon *d, const char *app,
                           const char *owner);
    /* device dev (-1: every device) changed: its cached JSON is stale */
    void (*device_changed)(struct accel_daemon *d, int dev);
    /* a's rows are about to be released: drop what the node keeps for
     * them (the quota ledgers) */
    void (*rows_released)(struct accel_daemon *d, const struct app *a);
    /* a's binding is about to end: processes a node holds in a's cgroup
     * without running them (a person's own container brought in through
     * an external app's CDI device) get SIGTERM; how many there are (the
     * release waits for them) */
    uint32_t (*held_outside)(struct accel_daemon *d, const struct app *a);
    /* a leaves memory for good (uninstalled, deleted): drop what the
     * node keeps of it (its logs) */
    void (*app_removed)(struct accel_daemon *d, const struct app *a);
    /* how many processes of app name (leader of its last run: last_pid)
     * the driver still lists on its devices, once its processes are gone
     * (the supervisor waits for them; reconcile_app_lingering). Called
     * without d->lock */
    uint32_t (*app_lingering)(struct accel_daemon *d, const char *name,
                              pid_t last_pid);
    /* app name holds `held` bytes on device (its ledger's count) above
     * its new quota of `quota` bytes, just cut (SPEC 4.4): ask it to give
     * memory back (its reclaim action; issue 46). The shim refuses its
     * allocations meanwhile whether or not this is set. Called without
     * d->lock, after the cut is committed and applied; must not block
     * for long (queue the work) */
    void (*quota_over)(struct accel_daemon *d, const char *name,
                       const char *device, uint64_t held, uint64_t quota);
};

struct accel_daemon {
    struct accel_config cfg;
    struct accel_hooks hooks;    /* set by the wiring, then read-only */
    pthread_mutex_t lock;        /* guards everything below */
    struct store *store;
    /* nodes and devices: the admission snapshot + parallel info arrays */
    struct adm_snapshot snap;
    struct node_info *ninfo;     /* [snap.nnodes] */
    struct dev_info *dinfo;      /* [snap.ndevs] */
    struct strmap *node_index;   /* name → node index */
    struct strmap *dev_index;    /* id → device index */
    /* apps */
    struct app **apps;
    size_t napps, capps;
    struct strmap *app_index;    /* name → index in apps */
    struct strmap *owner_index;  /* owner → index in owned */
    struct owned {               /* the apps of one owner, any order */
        struct app **v;
        size_t n, cap;
    } *owned;
    size_t nowned;               /* owners seen (a list may be empty) */
    struct user_rec *users;      /* all users, admin first */
    size_t nusers;
    struct identity_rec *ids;    /* name -> uid of every user and
                                    "shared" (identity.c, SPEC 3) */
    size_t nids;
    bool uid_drop;               /* acceld is root: apps run as their
                                    owner's uid; false = containment by
                                    uid is off (reported, never claimed) */
    char *identity_status;       /* that decision as a sentence */
    json_t *member_images;       /* the memberImages setting: the local
                                    images members may run without a pull
                                    of their own (ops_settings.c), this
                                    node's; NULL until loaded */
    char *home_root;             /* the apps' homes are <home_root>/<owner>:
                                    <data-dir>/home, or a fallback when
                                    others cannot reach the data dir
                                    (identity.c) */
    struct http_server *http;
    struct vram *vram;           /* the kernel's and the driver's VRAM
                                    limits (node/vram.c), NULL = none */
    struct metrics *metrics;     /* counters (own lock) */
    struct broker_set *brokers;  /* time-slice brokers (broker_ops.c) */
    char *nvml_status;           /* why there is or is no NVML */
    char *shim_path;             /* libaccelshim.so to preload, or NULL */
    /* the shim files of external apps (node/runtime/cdi.c): files_lock
     * is taken with lock held (never the other way round), and the CDI
     * refresh keeps it past lock's release while it writes them */
    pthread_mutex_t files_lock;
    struct cdi_written *written; /* what that refresh last wrote, by app
                                    (cdi.c; under files_lock) */
    size_t nwritten;
    /* group commit (state.c): commits counted under d->lock, made durable
     * by one WAL fsync shared by every request waiting at that moment */
    _Atomic uint64_t commit_seq; /* commits written */
    pthread_mutex_t sync_lock;   /* guards the two below */
    pthread_cond_t sync_cond;    /* a sync finished */
    uint64_t synced_seq;         /* commits known durable */
    bool syncing;                /* a thread is in store_sync */
    pthread_t supervisor;        /* runtime supervisor thread */
    bool supervisor_running;
    struct reconcile *reconcile; /* NVML refresh + reconciler thread */
    struct reclaim *reclaim;     /* elastic memory (enforce/reclaim.c) */
    struct history *history;     /* metric history (own lock; history.h) */
    struct sampler *sampler;     /* its sampling thread (sampler.c) */
    struct ctxprobe *ctxprobe;   /* acceld's own measure of a context on
                                    each local NVIDIA device
                                    (node/devices/ctxprobe.h); NULL none;
                                    set and cleared under lock */
    struct cluster *cluster;     /* the node agent's lease and watch
                                    (cluster.c); NULL outside a cluster */
    int64_t registered_ms;       /* this node's first registration (ms
                                    since the epoch; cluster: kept in its
                                    nodeinfo across restarts), 0 = not yet */
    struct cgroup_sys *cg;       /* the cgroups of apps (cgroup.h); set
                                    before the threads start, then read-only */
    struct applog *applog;       /* the apps' log writer (applog.h), from
                                    the supervisor's start to its stop */
    _Atomic int stopping;        /* set at shutdown (read by every thread) */
    /* the event feed of GET /api/events?wait= (own lock, never held while
     * taking d->lock) */
    pthread_mutex_t ev_lock;     /* guards ev_seq and parked */
    pthread_cond_t ev_cond;      /* broadcast by state_event */
    uint64_t ev_seq;             /* events appended since start */
    struct http_req *parked;     /* long-polls suspended until an event
                                    or their deadline (http.c) */
    _Atomic int slow_ops;        /* slow operations running on threads of
                                    their own (http_slow.c) */
};

/* Users (SPEC 3) are stored, not cached: looked up by token hash. */
struct auth_user {
    char name[ACCEL_NAME_MAX + 1];
    bool admin;
};

#define STATE_EVENTS_KEEP 20000 /* events retained in the store */

/* Is the app run by this node (has `run` and is bound to the local
 * node's devices only)? A question of state alone: every wing asks it. */
bool state_app_runs_here(struct accel_daemon *d, const struct app *a);
struct app *state_app_find(struct accel_daemon *d, const char *name);
/* The user named name, or NULL. */
struct user_rec *state_user_find(struct accel_daemon *d, const char *name);
/* Takes ownership of a. */
void state_app_add(struct accel_daemon *d, struct app *a);
/* Removes and frees a (its rows must be released first). */
void state_app_remove(struct accel_daemon *d, struct app *a);
/* The apps owner owns (borrowed; valid until an app is added or removed)
 * and their number in *n, without a scan of every app of the cluster: the
 * limit checks of every install and the users' holdings use it. */
struct app *const *state_owned(const struct accel_daemon *d,
                               const char *owner, size_t *n);
size_t state_owner_apps(const struct accel_daemon *d, const char *owner);
void state_app_free(struct app *a);

/* Index of a node / device, or -1. */
int state_node_find(struct accel_daemon *d, const char *name);
int state_dev_find(struct accel_daemon *d, const char *id);

/*
 * What the rules read of dev's settings (d->dinfo[dev].settings), into the
 * snapshot: the elastic overcommit (SPEC 4.4, "elastic": {"overcommit"}) as
 * adm_device.overcommit, and the admission index refreshed. Called after
 * every change of the settings: loaded, watched (cluster) or PUT.
 */
void state_dev_settings_applied(struct accel_daemon *d, int dev);

/* The elastic settings of dev as stored (d->lock held): the overcommit in
 * thousandths (ADM_OVERCOMMIT_ONE when off) and the wait for a reclaim in
 * ms (STATE_RECLAIM_WAIT_DEFAULT_MS when not set). */
#define STATE_RECLAIM_WAIT_DEFAULT_MS 10000u
#define STATE_RECLAIM_WAIT_MAX_MS 600000u
uint32_t state_dev_overcommit(const struct accel_daemon *d, int dev);
uint32_t state_dev_reclaim_wait_ms(const struct accel_daemon *d, int dev);

/* The requirement of the app's selected type, or NULL. */
const struct adm_req *state_app_req(const struct app *a);
#define state_app_req_const state_app_req

/* Store writes (inside a transaction). */
enum accel_err state_tx_begin(struct accel_daemon *d);
enum accel_err state_tx_commit(struct accel_daemon *d);
/* state_tx_commit with d->lock released while a cluster store's etcd
 * answers (store_commit_queued): memory already shows the change, and the
 * caller takes it back on failure, then calls store_queued_settled. */
enum accel_err state_tx_commit_queued(struct accel_daemon *d);
void state_tx_rollback(struct accel_daemon *d);
/* End the open transaction: with rc ACCEL_OK commit it (state_tx_commit's
 * result), else roll it back and return rc. The writes' own checks go
 * first, then one call: rc = state_tx_end(d, rc). */
enum accel_err state_tx_end(struct accel_daemon *d, enum accel_err rc);
/*
 * A change of many apps, in one transaction where the store takes it
 * whole. etcd takes at most 128 operations in one (ACCEL_ETOOBIG before
 * anything is sent), and the writes of n apps can need more: then the
 * apps go first, in parts as large as fit (halved until one does), and
 * the change's own writes (last) with the final part, or alone. Each part
 * is committed and applied to memory (apply) by itself, so a failure
 * after the first leaves a change of some apps done, whole: *done says
 * how many (the caller says so). stage writes app i's rows; last may be
 * NULL. d->lock is held throughout.
 */
struct state_parts {
    size_t n;
    enum accel_err (*stage)(struct accel_daemon *d, size_t i, void *ctx);
    void (*apply)(struct accel_daemon *d, size_t i, void *ctx);
    enum accel_err (*last)(struct accel_daemon *d, size_t n, void *ctx);
    void *ctx;
};
enum accel_err state_commit_parts(struct accel_daemon *d,
                                  const struct state_parts *p, size_t *done);
/* The revision to wait for when this thread's last commit lost a race
 * with another node of the cluster (ACCEL_ECONFLICT), and forget it; 0 if
 * none. */
int64_t state_take_conflict(void);
/* How many transactions this thread has committed: the HTTP layer's
 * "did this request write anything?" (http_run_handler). */
uint64_t state_commits_here(void);
/*
 * Block until every commit written so far is durable (group commit: one
 * thread fsyncs for all that wait). Call WITHOUT d->lock, before answering
 * a request that may have changed anything. ACCEL_OK or ACCEL_EIO.
 */
enum accel_err state_durable_wait(struct accel_daemon *d);
/* Write app a as it will be with this state and reason (NULL = none). */
enum accel_err state_save_app(struct accel_daemon *d, const struct app *a,
                              enum app_state st, const char *reason);
/* Replace the app's allocation rows in the store with rows[n]. */
enum accel_err state_save_rows(struct accel_daemon *d, const struct app *a,
                               const struct adm_row *rows, size_t n);
enum accel_err state_save_device(struct accel_daemon *d, int dev,
                                 enum accel_support st);
/* The acting user recorded in the events this thread appends (data "by");
 * NULL or "" = none. Set by http.c around each request. */
void state_set_actor(const char *user);
/* Append an event (steals data, may be NULL). Inside or outside a tx. */
void state_event(struct accel_daemon *d, const char *kind, const char *app,
                 const char *node, const char *device, json_t *data,
                 const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/*
 * A refusal's event (outside a transaction, lock held): appended at once,
 * or, while this thread holds refusals back (state_refusals_hold), kept
 * until state_refusals_release says whether the decision stands. A
 * cluster's HTTP layer holds them while a refusal may yet be decided
 * again on a fresher view (http.c): a decision taken back leaves no event.
 */
void state_event_refusal(struct accel_daemon *d, const char *app,
                         json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void state_refusals_hold(void);
/* Append (keep) or drop what was held, and stop holding. Takes d->lock. */
void state_refusals_release(struct accel_daemon *d, bool keep);

/* Why a stored app row cannot be taken (allocated sentence), or NULL:
 * then a->m, a->state and *sel_type are filled from the row. */
char *state_app_decode(const struct store_app *row, struct app *a,
                       enum accel_type *sel_type);
/* Is a bound to another node of the cluster (run by that node's agent)? */
bool state_app_remote(const struct accel_daemon *d, const struct app *a);
/* Is a bound across nodes of a cluster, with a command: one part (a
 * process group) runs on each of its nodes (SPEC 10)? */
bool state_app_multi(const struct accel_daemon *d, const struct app *a);
/* Has a a row on this node (then a part of a multi-node app runs here)? */
bool state_app_part_here(const struct accel_daemon *d, const struct app *a);
/* Does node run a part of a (a->parts)? */
bool state_part_has(const struct app *a, const char *node);
/* Record that node's part runs (on) or not. */
void state_part_set(struct app *a, const char *node, bool on);
/* Do the parts cover every node a is bound to? */
bool state_parts_complete(const struct accel_daemon *d, const struct app *a);

/* The state the API shows: "unknown" while a node a is bound to is
 * unreachable (its processes may still run), else its state's name. */
const char *state_app_shown(const struct accel_daemon *d, const struct app *a);

/* In-memory changes after a successful commit. */
void state_set_state(struct app *a, enum app_state st,
                     const char *reason);
/* Replace the app's rows (releasing the old ones from the snapshot). */
void state_set_rows(struct accel_daemon *d, struct app *a,
                    const struct adm_row *rows, size_t n);
/* Change the quota of a's row k in place (a live quota, SPEC 4.4): the
 * snapshot follows, the rows and what the node keeps for them (their
 * ledgers) stay. */
void state_row_set_memory(struct accel_daemon *d, struct app *a, size_t k,
                          uint64_t memory);

#endif /* ACCEL_DAEMON_STATE_H */
