/* SPDX-License-Identifier: MIT */
/*
 * proc.h: starting, identifying, watching and stopping an app's processes
 * (SPEC 8.2). An app runs in its own session and process group, its output is
 * appended to a log file, and it is known by (pid, start time), an identity
 * that survives an acceld restart and cannot be fooled by pid reuse.
 *
 * This module knows nothing about apps, bindings, cgroups or the store: the
 * daemon builds the argv and environment, places the child in its cgroup
 * through the spec's place hook (the cgroup, not the group, is then the
 * app: runtime.c, cgroup.c), keeps the handles, and runs one supervisor
 * thread that every 100 ms calls proc_reap() for its own children (and,
 * on a machine without cgroups, proc_alive() / proc_app_alive() for the
 * others), plus proc_rotate_log() now and then.
 *
 * Thread-safety: every function is safe to call from any thread; none keeps
 * state. proc_start() forks a multithreaded process, so the child does only
 * async-signal-safe work between fork and exec (everything is prepared
 * before the fork). The daemon must not set SIGCHLD to SIG_IGN (children
 * would be reaped by the kernel and their exit status lost). proc_stop()
 * blocks for up to its timeouts; call it from a worker, not the supervisor.
 */
#ifndef ACCEL_DAEMON_NODE_PROC_PROC_H
#define ACCEL_DAEMON_NODE_PROC_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"

#define PROC_LOG_MAX_DEFAULT (10ULL << 20) /* rotate logs over 10 MiB */
#define PROC_STATUS_LEN 64                 /* proc_exit_status buffer */

/* Who the child becomes (SPEC 3): set before the chdir and the exec. */
struct proc_cred {
    uid_t uid;               /* real, effective and saved uid */
    gid_t gid;               /* real, effective and saved gid, and the only
                                supplementary group */
};

/* What to run. Nothing is kept after proc_start returns. */
struct proc_spec {
    const char *name;        /* app name, used in messages only */
    char *const *argv;       /* NULL-terminated; argv[0] searched in PATH */
    char *const *env;        /* NULL-terminated KEY=VALUE added to / replacing
                                the daemon's environment; a later entry
                                replaces an earlier one of the same key;
                                may be NULL */
    const char *workdir;     /* chdir here first (after the uid change);
                                NULL = the daemon's cwd */
    const char *log_path;    /* stdout+stderr appended here; NULL = /dev/null */
    bool has_out_fd;         /* stdout+stderr are out_fd instead (a pipe
                                the daemon reads: applog.h); log_path is
                                then only named in messages */
    int out_fd;              /* with has_out_fd; the caller keeps it */
    uint64_t log_max_bytes;  /* rotate when larger; 0 = PROC_LOG_MAX_DEFAULT */
    int (*inherit)(const char *entry); /* which "KEY=VALUE" of the daemon's
                                environment the child keeps (non-zero =
                                keep); NULL = all */
    const struct proc_cred *cred; /* NULL = stay the daemon's user */
    /* Called in the parent after fork() while the child waits on a pipe,
     * before it runs any of its own code (so before exec): e.g. move it
     * into its cgroup, so that nothing it forks can escape. Non-zero fails
     * the start (the child exits unexecuted) with *cause set. May be NULL. */
    int (*place)(pid_t pid, void *arg, char **cause);
    void *place_arg;         /* given to place */
};

/* A started (or adopted) app: persist both fields to find it again. */
struct proc_handle {
    pid_t pid;               /* the leader; also its pgid and session id */
    uint64_t start_time;     /* /proc/<pid>/stat field 22 (ticks since boot) */
};

/*
 * Start spec->argv in a new session (pid = pgid = sid), stdin from /dev/null,
 * after spec->place (if any) accepted the child,
 * stdout and stderr appended to spec->log_path (rotated first when over the
 * cap; opened by this process, so the child needs no access to the file),
 * every other descriptor closed, signals reset to default, and
 * PR_SET_NO_NEW_PRIVS set (no setuid binary or file capability can raise
 * the child's privileges). With spec->cred the child drops to that uid and
 * gid (setgroups to just the gid, then setresgid, then setresuid, then
 * checks) before the chdir: a failure of any step fails the launch with
 * ACCEL_ESYS, the child never runs as the daemon by accident.
 *   out    set only on success.
 *   cause  on failure, an allocated sentence the caller frees (may be NULL):
 *          "cannot run 'foo': No such file or directory",
 *          "cannot use workdir '/x' for 'app': No such file or directory",
 *          "cannot open log file '/l/app.log': Permission denied",
 *          "cannot run 'app' as uid 65536: Operation not permitted".
 * Failures are reported here, synchronously (the child reports a failed
 * chdir or exec through a close-on-exec pipe and is reaped): ACCEL_EINVAL
 * (empty argv), ACCEL_ENOTFOUND (binary or workdir missing), ACCEL_EFORBIDDEN
 * (permission), ACCEL_EIO (log file), ACCEL_ESYS (fork, pipe, exec other).
 */
enum accel_err proc_start(const struct proc_spec *spec, struct proc_handle *out,
                          char **cause);

/*
 * 1 if a live (not zombie) process has this pid and start time, else 0: the
 * process exited or the pid was reused. Works for any process, own child or
 * adopted.
 */
int proc_alive(pid_t pid, uint64_t start_time);

/* 1 if any live (not zombie) process has process group pgid, else 0. */
int proc_group_alive(pid_t pgid);

/*
 * Start time of pid (field 22 of /proc/<pid>/stat) into *out_start, set only
 * on success. ACCEL_ENOTFOUND when there is no such process.
 */
enum accel_err proc_start_time(pid_t pid, uint64_t *out_start);

/*
 * Non-blocking waitpid() of one child of this process.
 *   status  set to the wait status when reaped.
 * Returns ACCEL_OK (reaped), ACCEL_EBUSY (still running) or ACCEL_ENOTFOUND
 * (not our child: adopted after a restart, or already reaped).
 */
enum accel_err proc_reap(pid_t pid, int *status);

/*
 * The processes whose environment holds exactly KEY=VALUE (read from
 * /proc/<pid>/environ; processes we may not read are skipped; this process
 * is never listed). Finds what an app started and then moved to another
 * session, e.g. ACCEL_APP=comfyui.
 *   out  new array (caller frees), NULL when none; always set on ACCEL_OK.
 * Returns ACCEL_OK or ACCEL_ESYS (/proc unreadable).
 */
enum accel_err proc_find_by_env(const char *key, const char *value,
                                pid_t **out, size_t *n);

/*
 * The same for many values in one /proc scan: every process whose
 * environment holds key=<prefix>..., with the rest of its value after
 * prefix (owned). out: new array for proc_tagged_free, NULL when none.
 */
struct proc_tagged {
    pid_t pid;
    char *rest;
};
enum accel_err proc_find_by_env_prefix(const char *key, const char *prefix,
                                       struct proc_tagged **out, size_t *n);
void proc_tagged_free(struct proc_tagged *v, size_t n);

/*
 * Stop an app: SIGTERM to its process group (and to the processes carrying
 * env_key=env_value when env_key is non-NULL), wait up to term_ms for all of
 * them to exit, then SIGKILL the survivors, and wait up to kill_ms more
 * until none is left. The leader is reaped if it is our child.
 *   out_status  leader's wait status if we reaped it, else -1 (may be NULL).
 *   cause       on ACCEL_EBUSY, an allocated sentence naming the survivors.
 * Returns ACCEL_OK when every process is gone (also when none was left),
 * ACCEL_EBUSY when some survived SIGKILL (e.g. stuck in the kernel).
 */
enum accel_err proc_stop(const struct proc_handle *h, const char *env_key,
                         const char *env_value, unsigned term_ms,
                         unsigned kill_ms, int *out_status, char **cause);

/*
 * The steps of proc_stop without its waits, for a caller that polls (the
 * daemon's supervisor when the machine has no cgroups): send sig to the
 * group, the leader and the processes tagged env_key=env_value; and 1 while
 * any of them is alive, else 0.
 */
void proc_signal_app(const struct proc_handle *h, const char *env_key,
                     const char *env_value, int sig);
int proc_app_alive(const struct proc_handle *h, const char *env_key,
                   const char *env_value);

/*
 * Rotate a log a process is writing to: when it is over max_bytes (0 =
 * PROC_LOG_MAX_DEFAULT), copy its last max_bytes to "<path>.1" (replacing
 * the previous; only the tail, so a writer that seeked far ahead cannot
 * make the copy write out a sparse file's holes) and truncate it; writers
 * that opened it with O_APPEND carry on at the new end. The daemon's own
 * apps write through a pipe instead (applog.h); this serves the apps an
 * older acceld started with the file as their stdout.
 * Returns ACCEL_OK (rotated or small enough or absent) or ACCEL_EIO.
 */
enum accel_err proc_rotate_log(const char *path, uint64_t max_bytes);

/*
 * A wait status as a sentence into buf: "exited with status 3",
 * "killed by signal 9 (Killed)", "exited with status 0".
 */
void proc_exit_status(int status, char *buf, size_t len);

/*
 * This boot's id (/proc/sys/kernel/random/boot_id) into buf (>= 37 bytes):
 * store it with the handles, since start times restart at each boot.
 * ACCEL_EIO when unreadable.
 */
enum accel_err proc_boot_id(char *buf, size_t len);

/* Which of acceld's own variables (an environ entry "KEY=value") an app
 * inherits: the locale's (LANG, LANGUAGE, LC_*), TZ and TERM; 1 or 0, as
 * proc_spec.inherit takes it. */
int proc_env_inherited(const char *entry);

#endif /* ACCEL_DAEMON_NODE_PROC_PROC_H */
