/* SPDX-License-Identifier: MIT */
/*
 * cgroup.h: one cgroup per app (SPEC 8.2). At start acceld finds what the
 * machine offers (pure cgroup v2 with controllers, a hybrid of an empty v2
 * hierarchy and v1 controllers, v1 only, or nothing usable) and keeps it in
 * a struct cgroup_sys that is read-only afterwards. An app's cgroup is
 *
 *     <acceld's own cgroup>/accel.slice/<instance>/<app>
 *
 * in every hierarchy used, where <instance> is 12 hex digits of the FNV-1a
 * hash of the data directory's realpath, so that several acceld on one
 * machine never share a cgroup even with the same app names.
 *
 * Containment (who belongs to the app, "is it empty", kill them all) uses
 * the v2 hierarchy when there is one (cgroup.events populated, cgroup.kill);
 * otherwise the v1 freezer (then pids) hierarchy's task list, freezing
 * before SIGKILL. Limits use the v2 controllers delegated to us (memory.max,
 * cpu.max, pids.max), else the v1 memory/cpu/pids ones, else none, and each
 * tier says which it is (cgroup_tier_name) with a reason when it is none.
 *
 * Thread-safety: a struct cgroup_sys is written by cgroup_detect only;
 * every other function reads it and the file system and may be called from
 * any thread without d->lock. Nothing here blocks longer than a freeze
 * (bounded, 200 ms).
 */
#ifndef ACCEL_DAEMON_NODE_PROC_CGROUP_H
#define ACCEL_DAEMON_NODE_PROC_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"

#define CGROUP_PIDS_MAX_DEFAULT 4096 /* pids.max of every app */
#define CGROUP_CPU_PERIOD_US 100000  /* cpu.max / cfs period */
#define CGROUP_INSTANCE_LEN 12       /* hex digits of <instance> */
#define CGROUP_LEAF "daemon"         /* acceld's own leaf in a v2 cgroup */

/* Which mechanism enforces a limit or the containment. */
enum cgroup_tier {
    CGROUP_NONE = 0, /* nothing: see the reason */
    CGROUP_V1,       /* a cgroup v1 controller */
    CGROUP_V2,       /* the cgroup v2 hierarchy */
};

/* The v1 hierarchies we may use. */
enum cgroup_v1 { CGV1_MEMORY, CGV1_CPU, CGV1_PIDS, CGV1_FREEZER, CGV1_COUNT };

/* One capability (containment, memory, cpu, pids) as detected. */
struct cgroup_cap {
    enum cgroup_tier tier;    /* who enforces */
    char reason[160];         /* why none (empty otherwise) */
};

/* What the machine offers; filled by cgroup_detect, then read-only. */
struct cgroup_sys {
    char instance[CGROUP_INSTANCE_LEN + 1];  /* hash of the data dir */
    char *v2_dir;        /* ".../accel.slice/<instance>" in v2, or NULL */
    char *v2_rel;        /* the same as /proc/<pid>/cgroup shows it */
    bool v2_kill;        /* cgroup.kill is available */
    char *v1_dir[CGV1_COUNT]; /* ".../accel.slice/<instance>" per v1
                                 hierarchy we use, or NULL */
    char *v1_rel[CGV1_COUNT]; /* as /proc/<pid>/cgroup shows them */
    struct cgroup_cap containment, memory, cpu, pids;
    char *v2_leaf_note;  /* what the leaf step did, or NULL (for the log) */
};

/* An app's limits (0 = none). */
struct cgroup_limits {
    uint64_t memory;          /* bytes: limitedMemory */
    uint64_t cpu_millis;      /* millicores: limitedCpu */
    uint64_t pids;            /* 0 = CGROUP_PIDS_MAX_DEFAULT */
};

/*
 * Find the hierarchies from /proc/self/mountinfo and /proc/self/cgroup,
 * try accel.slice/<instance> in each (made, then removed again: they
 * exist only while an app needs them) and enable the v2 controllers we
 * can. Never fails: what cannot be had is a tier "none" with its reason.
 * data_dir must exist (its realpath names the instance).
 */
void cgroup_detect(struct cgroup_sys *cs, const char *data_dir);

/*
 * The v2 "no internal processes" rule: a non-root cgroup that holds
 * processes cannot enable controllers for its children. When acceld's own
 * v2 cgroup is delegated to it (writable), not the root, and offers
 * memory/cpu/pids, cgroup_detect first moves acceld into the leaf
 * <own cgroup>/CGROUP_LEAF, so that <own cgroup> is empty and can give the
 * controllers to accel.slice. An acceld that already runs in a leaf of
 * that name (systemd's DelegateSubgroup=daemon) takes the leaf's parent
 * as its own cgroup and moves nothing. Not done for a systemd service that
 * systemd did not start in the leaf (INVOCATION_ID set): systemd older
 * than 254 starts the next acceld in the unit's cgroup, which the enabled
 * controllers would make impossible while apps still run (docs/install.md).
 *
 * cgroup_leaf_move is that move: when dir's cgroup.procs lists pid and no
 * other process, make dir/CGROUP_LEAF and move pid there. 1 moved, 0 not
 * (another process shares dir, or pid is not in it; nothing made), -1
 * with *cause (a leaf it made is removed again).
 */
int cgroup_leaf_move(const char *dir, pid_t pid, char **cause);

/* No cgroups at all (acceld --no-cgroups): every tier "none" with reason
 * why, so that apps are contained by process group and ACCEL_APP only. */
/* The <instance> of data_dir (which must exist): 12 hex digits of the
 * FNV-1a hash of its realpath. Also names the homes' fallback directory
 * (identity.c). */
void cgroup_instance_of(const char *data_dir,
                        char out[CGROUP_INSTANCE_LEN + 1]);
void cgroup_disable(struct cgroup_sys *cs, const char *data_dir,
                    const char *why);

/* Free what cgroup_detect allocated (the directories stay). NULL-safe. */
void cgroup_release(struct cgroup_sys *cs);

/* "cgroup-v2", "cgroup-v1" or "none". */
const char *cgroup_tier_name(enum cgroup_tier t);

/*
 * Create the app's cgroup in every hierarchy used and write its limits.
 * An existing empty cgroup (a previous run) is reused; one that still holds
 * processes is refused (ACCEL_EBUSY) with a sentence in *cause. ACCEL_ESYS
 * with *cause when a directory cannot be made. ACCEL_OK and nothing done
 * when there is no containment.
 */
enum accel_err cgroup_app_prepare(const struct cgroup_sys *cs, const char *app,
                                  const struct cgroup_limits *lim,
                                  char **cause);

/*
 * Move pid into the app's cgroups (call from the parent between fork and
 * exec, while the child waits: proc_spec.place). 0 or -1 with *cause.
 */
int cgroup_app_attach(const struct cgroup_sys *cs, const char *app, pid_t pid,
                      char **cause);

/*
 * 1 when the app's cgroup holds a process, 0 when empty, -1 when it has no
 * cgroup (none on this machine, or never made / removed): the caller falls
 * back to process groups.
 */
int cgroup_app_populated(const struct cgroup_sys *cs, const char *app);

/*
 * The app's processes (cgroup.procs). *out is a new array (caller frees),
 * NULL when none. Returns the count, or -1 when it has no cgroup.
 */
ssize_t cgroup_app_procs(const struct cgroup_sys *cs, const char *app,
                         pid_t **out);

/* Send sig to every process of the app's cgroup. Returns how many. */
size_t cgroup_app_signal(const struct cgroup_sys *cs, const char *app,
                         int sig);

/* sig to every process of the app's cgroup and of the cgroups below it (a
 * container's libpod-<id>); how many were sent. */
size_t cgroup_app_signal_tree(const struct cgroup_sys *cs, const char *app,
                              int sig);

/*
 * Kill every process of the app's cgroup for good: cgroup.kill (v2), else
 * freeze, SIGKILL every task, thaw (v1 freezer), else SIGKILL each listed
 * process a few times over. Does not wait for them to be gone.
 */
void cgroup_app_kill(const struct cgroup_sys *cs, const char *app);

/* OOM kills recorded in the app's memory cgroup (v2 memory.events
 * oom_kill, v1 memory.oom_control oom_kill); 0 when unknown. */
uint64_t cgroup_app_oom_kills(const struct cgroup_sys *cs, const char *app);

/* Remove the app's (empty) cgroups, a populated one stays; then
 * accel.slice/<instance> and accel.slice if nothing else is in them. */
void cgroup_app_remove(const struct cgroup_sys *cs, const char *app);

/* Remove accel.slice/<instance> (and accel.slice when nobody else uses
 * it) if no app cgroup is under it. The directories exist only while an
 * app of this instance has a cgroup: cgroup_detect removes what it made,
 * cgroup_app_prepare makes them again, cgroup_app_remove removes them
 * after the last app. */
void cgroup_instance_remove(const struct cgroup_sys *cs);

/* The app's cgroup directory in every hierarchy used, into out (at most
 * 1 + CGV1_COUNT, each allocated: the caller frees them); the count. */
size_t cgroup_app_dirs(const struct cgroup_sys *cs, const char *app,
                       char **out);

/* The app's cgroup as /proc/<pid>/cgroup shows it in the v2 hierarchy
 * (the --cgroup-parent of its container), or NULL without one. */
char *cgroup_app_rel(const struct cgroup_sys *cs, const char *app);

/* Remove the app's cgroup with every child cgroup in it (a container's
 * libpod-<id>, conmon), depth-first, in every hierarchy mounted on the
 * machine (a runtime makes its path in those acceld does not use too),
 * then what cgroup_app_remove removes. Quiet where a cgroup still holds
 * a process. */
void cgroup_app_remove_tree(const struct cgroup_sys *cs, const char *app);

/*
 * Is process pid in app's cgroup (by /proc/<pid>/cgroup, the containment
 * hierarchy's line)? false when there is no such process or no containment.
 * This is the peer-credential check of the time-slice broker (SPEC 8.2).
 */
bool cgroup_pid_in_app(const struct cgroup_sys *cs, pid_t pid,
                       const char *app);

/*
 * The app a process belongs to by its cgroup (name copied into out), or
 * false when it is in no app cgroup of this instance.
 */
bool cgroup_pid_app(const struct cgroup_sys *cs, pid_t pid, char *out,
                    size_t len);

/*
 * The tag every process of an app carries in its environment, and the one
 * acceld looks for where no cgroup holds the app (--no-cgroups, a machine
 * without them): ACCEL_APP_ID=<instance>/<app>, the instance being the hash
 * of this acceld's data directory. ACCEL_APP alone names the app for the
 * shim and the reconciler, but two accelds on one machine (a test cluster,
 * a second instance) may each run an app of that name, and a stop must not
 * reach the other's.
 */
#define CGROUP_APP_TAG_KEY "ACCEL_APP_ID"

/* The tag's value <instance>/<app> of app (cs NULL: "/<app>"); the caller
 * frees it. */
char *cgroup_app_tag(const struct cgroup_sys *cs, const char *app);

/*
 * Signal every process of app (leader pid, started at start): its cgroup
 * (SIGKILL: cgroup.kill), else, where no cgroup holds it, its group and
 * the processes tagged with cgroup_app_tag. No lock.
 */
void cgroup_app_signal_all(const struct cgroup_sys *cs, const char *app,
                           pid_t pid, uint64_t start, int sig);

#endif /* ACCEL_DAEMON_NODE_PROC_CGROUP_H */
