/* SPDX-License-Identifier: MIT */
/*
 * podman.h: podman run as a command, for the container runner and its
 * images (runner_container.c, image.c): forked with an environment of its
 * own (podman_env), its output read with a deadline, whole or line by
 * line. Not the container runner itself, nor what a container gets.
 * Any thread, no lock: each call blocks for its podman at most.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_PODMAN_H
#define ACCEL_DAEMON_NODE_RUNTIME_PODMAN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define PODMAN_WAIT_MS  30000u   /* a podman command that is not a stop */
#define PODMAN_PULL_MS  3600000u /* a pull: an hour at most */
#define PODMAN_LINE_MAX 1024u    /* a line of podman's output, at most */

/* The environment podman runs with: a PATH with sbin (netavark needs
 * iptables), root's HOME, nothing else of acceld's. NULL-terminated. */
extern char *const podman_env[];

#define PODMAN_WATCH_STEP_MS 100u /* how often a watched podman is looked at */
#define PODMAN_PTY_COLS 200u      /* a watched podman's terminal's width */
#define PODMAN_WATCH_MIN_READ 65536u /* bytes read that are progress */

/*
 * A long podman command another thread may end (a pull, issue 44): it is
 * killed (SIGKILL) within PODMAN_WATCH_STEP_MS of cancel being set, and
 * when for stall_ms it has written no line and read less than
 * PODMAN_WATCH_MIN_READ bytes (its /proc/<pid>/io rchar: what it reads
 * from a registry, an archive or its storage; idle, podman still reads a
 * byte every few hundred milliseconds). tmpdir (NULL: podman's own, /var/tmp) is its TMPDIR, where
 * podman keeps what it copies, so that the caller removes what a killed
 * podman left.
 */
struct podman_watch {
    unsigned stall_ms;   /* 0: no stall is looked for */
    const char *tmpdir;  /* its TMPDIR, or NULL */
    atomic_bool cancel;  /* set by another thread: podman is killed */
    bool pty;            /* its output through a terminal (PODMAN_PTY_COLS
                            wide): podman pull draws its bars then, each
                            layer's bytes, which it leaves out in a pipe */
    bool stalled;        /* out: killed for no progress in stall_ms */
    bool cancelled;      /* out: killed for cancel */
};

/* Each line of podman's output (split at '\n' or '\r', at most
 * PODMAN_LINE_MAX bytes, a terminal's escape sequences left out) to
 * line(ctx, ...), the last one kept in last. */
struct podman_lines {
    void (*line)(void *ctx, const char *line); /* NULL: none */
    void *ctx;                                 /* line's first argument */
    char cur[PODMAN_LINE_MAX];                 /* the line being read */
    size_t n;                                  /* its length so far */
    int esc;                                   /* 0, or in an escape
                                                  sequence: 1 after ESC,
                                                  2 in its CSI body */
    char last[PODMAN_LINE_MAX];                /* the last whole line */
    struct podman_watch *watch;                /* NULL: not watched */
};

/*
 * Run podman with argv and wait up to ms; its output (stdout and stderr,
 * at most len - 1 bytes, trailing newlines cut) into out when out is not
 * NULL, and line by line to lines when that is not NULL. Returns its exit
 * code, or -1 when it could not run or was killed at the deadline.
 */
int podman_lines(char *const *argv, char *out, size_t len, unsigned ms,
                 struct podman_lines *lines);

/* podman_lines without lines. */
int podman_call(char *const *argv, char *out, size_t len, unsigned ms);

/* Run podman with argv and do not wait for it (a stop the supervisor
 * drives: runtime.c kills the cgroup if it takes too long). The middle
 * child exits at once, so nothing is left for acceld to reap. */
void podman_detached(char *const *argv);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_PODMAN_H */
