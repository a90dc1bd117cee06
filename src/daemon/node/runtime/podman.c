/* SPDX-License-Identifier: MIT */
/*
 * podman.c: podman run as a command (podman.h): forked with a fixed
 * environment, its output read line by line with a deadline.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/podman.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <limits.h>
#include <unistd.h>

#include "common/util.h"

#define PODMAN_PATH                                                            \
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

char *const podman_env[] = {"PATH=" PODMAN_PATH, "HOME=/root", NULL};

/* In a forked child: stdout/stderr to fd (or /dev/null), exec podman
 * with podman_env and TMPDIR=tmpdir when that is not NULL. */
static void exec_podman(char *const *argv, int fd, const char *tmpdir)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    char tmp[PATH_MAX + 8];
    char *const with_tmp[] = {podman_env[0], podman_env[1], tmp, NULL};
    char *const *env = podman_env;

    if (tmpdir != NULL) {
        snprintf(tmp, sizeof tmp, "TMPDIR=%s", tmpdir);
        env = with_tmp;
    }
    if (null >= 0)
        dup2(null, STDIN_FILENO);
    dup2(fd >= 0 ? fd : null, STDOUT_FILENO);
    dup2(fd >= 0 ? fd : null, STDERR_FILENO);
    execve("/usr/bin/podman", argv, env);
    execvpe("podman", argv, env);
    _exit(127);
}

/* The bytes pid has read so far (rchar of /proc/<pid>/io), 0 when
 * unreadable. */
static uint64_t read_bytes(pid_t pid)
{
    char path[64], buf[512], *r;

    snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
    if (util_read_small(path, buf, sizeof buf) <= 0 ||
        (r = strstr(buf, "rchar:")) == NULL)
        return 0;
    return strtoull(r + 6, NULL, 10);
}

/* A watched podman's look (every PODMAN_WATCH_STEP_MS): true when it is
 * to be killed (cancelled, or no line and less than PODMAN_WATCH_MIN_READ
 * bytes read for stall_ms: podman idle reads a byte every few hundred
 * milliseconds, a download reads far more). *seen is the bytes read at
 * the last progress, *at its time, got true when a line came since. */
static bool watch_ends(struct podman_watch *w, pid_t pid, bool got,
                       uint64_t *seen, uint64_t *at)
{
    uint64_t now = util_now_ns(), rd = read_bytes(pid);

    if (atomic_load(&w->cancel)) {
        w->cancelled = true;
        return true;
    }
    if (got || rd >= *seen + PODMAN_WATCH_MIN_READ) {
        *seen = rd;
        *at = now;
        return false;
    }
    if (w->stall_ms != 0 && now - *at >= (uint64_t)w->stall_ms * 1000000ULL) {
        w->stalled = true;
        return true;
    }
    return false;
}

/* Is buf[i] part of a terminal's escape sequence (ESC [ ... final, or
 * ESC and one byte)? Follows it through l->esc. */
static bool in_escape(struct podman_lines *l, unsigned char c)
{
    if (l->esc == 0 && c == 0x1b) {
        l->esc = 1;
        return true;
    }
    if (l->esc == 1) {
        l->esc = c == '[' ? 2 : 0;
        return true;
    }
    if (l->esc == 2) {
        if (c >= 0x40 && c <= 0x7e)
            l->esc = 0; /* its final byte */
        return true;
    }
    return false;
}

static void lines_feed(struct podman_lines *l, const char *buf, size_t n,
                       bool end)
{
    for (size_t i = 0; i <= n; i++) {
        if (i < n && in_escape(l, (unsigned char)buf[i]))
            continue;
        bool brk = i == n ? end : (buf[i] == '\n' || buf[i] == '\r');
        if (i < n && !brk) {
            if (l->n + 1 < sizeof l->cur)
                l->cur[l->n++] = buf[i];
            continue;
        }
        if (!brk || l->n == 0)
            continue;
        l->cur[l->n] = '\0';
        util_strlcpy(l->last, l->cur, sizeof l->last);
        if (l->line != NULL)
            l->line(l->ctx, l->cur);
        l->n = 0;
    }
}

/* A terminal for podman's output: fds[0] its master (read), fds[1] its
 * side (podman's stdout and stderr), PODMAN_PTY_COLS wide; -1 when none
 * can be had. */
static int pty_pair(int fds[2])
{
    struct winsize ws = { .ws_row = 50, .ws_col = PODMAN_PTY_COLS };
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), s = -1;
    char *name;

    if (m < 0)
        return -1;
    name = grantpt(m) == 0 && unlockpt(m) == 0 ? ptsname(m) : NULL;
    if (name != NULL)
        s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s < 0 || ioctl(s, TIOCSWINSZ, &ws) != 0) {
        if (s >= 0)
            close(s);
        close(m);
        return -1;
    }
    fds[0] = m;
    fds[1] = s;
    return 0;
}

int podman_lines(char *const *argv, char *out, size_t len, unsigned ms,
                 struct podman_lines *lines)
{
    int fds[2], status = 0;
    size_t got = 0;
    pid_t pid;
    uint64_t deadline = util_now_ns() + (uint64_t)ms * 1000000ULL;
    struct podman_watch *w = lines != NULL ? lines->watch : NULL;
    uint64_t seen = 0, at = util_now_ns();

    /* a pull's bars come on a terminal only; a pipe when none is had */
    if ((w == NULL || !w->pty || pty_pair(fds) != 0) &&
        pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        /* a watched podman (a pull) ends with the thread that waits for
         * it: acceld killed during a pull leaves no pull running */
        if (w != NULL)
            prctl(PR_SET_PDEATHSIG, SIGKILL);
        exec_podman(argv, fds[1], w != NULL ? w->tmpdir : NULL);
    }
    close(fds[1]);
    for (;;) {
        struct pollfd p = {fds[0], POLLIN, 0};
        char buf[1024];
        ssize_t n;
        int64_t left = (int64_t)(deadline - util_now_ns()) / 1000000;
        int ready = 0;
        if (w != NULL && left > (int64_t)PODMAN_WATCH_STEP_MS)
            left = PODMAN_WATCH_STEP_MS;
        if (util_now_ns() >= deadline ||
            (ready = poll(&p, 1, (int)left)) < 0 ||
            (ready == 0 && w == NULL) ||
            (w != NULL && watch_ends(w, pid, ready > 0, &seen, &at))) {
            kill(pid, SIGKILL);
            break;
        }
        if (ready == 0)
            continue;
        n = read(fds[0], buf, sizeof buf);
        if (n <= 0)
            break;
        if (lines != NULL)
            lines_feed(lines, buf, (size_t)n, false);
        if (out != NULL && got + 1 < len) {
            size_t take = (size_t)n < len - 1 - got ? (size_t)n : len - 1 - got;
            memcpy(out + got, buf, take);
            got += take;
        }
    }
    if (lines != NULL)
        lines_feed(lines, "", 0, true);
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (out != NULL) {
        while (got > 0 && out[got - 1] == '\n')
            got--;
        out[got] = '\0';
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int podman_call(char *const *argv, char *out, size_t len, unsigned ms)
{
    return podman_lines(argv, out, len, ms, NULL);
}

void podman_detached(char *const *argv)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (fork() == 0)
            exec_podman(argv, -1, NULL);
        _exit(0);
    }
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
}
