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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"

#define PODMAN_PATH                                                            \
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

char *const podman_env[] = {"PATH=" PODMAN_PATH, "HOME=/root", NULL};

/* In a forked child: stdout/stderr to fd (or /dev/null), exec podman. */
static void exec_podman(char *const *argv, int fd)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0)
        dup2(null, STDIN_FILENO);
    dup2(fd >= 0 ? fd : null, STDOUT_FILENO);
    dup2(fd >= 0 ? fd : null, STDERR_FILENO);
    execve("/usr/bin/podman", argv, podman_env);
    execvpe("podman", argv, podman_env);
    _exit(127);
}

static void lines_feed(struct podman_lines *l, const char *buf, size_t n,
                       bool end)
{
    for (size_t i = 0; i <= n; i++) {
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

int podman_lines(char *const *argv, char *out, size_t len, unsigned ms,
                 struct podman_lines *lines)
{
    int fds[2], status = 0;
    size_t got = 0;
    pid_t pid;
    uint64_t deadline = util_now_ns() + (uint64_t)ms * 1000000ULL;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0)
        exec_podman(argv, fds[1]);
    close(fds[1]);
    for (;;) {
        struct pollfd p = {fds[0], POLLIN, 0};
        char buf[1024];
        ssize_t n;
        int64_t left = (int64_t)(deadline - util_now_ns()) / 1000000;
        if (util_now_ns() >= deadline || poll(&p, 1, (int)left) <= 0) {
            kill(pid, SIGKILL);
            break;
        }
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
            exec_podman(argv, -1);
        _exit(0);
    }
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
}
