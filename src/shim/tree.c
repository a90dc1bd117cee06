/* SPDX-License-Identifier: MIT */
/*
 * tree.c: standalone use (no acceld, no ACCEL_APP) holds a program's whole
 * process tree to one quota, however its children are started: with the
 * environment inherited (fork, exec, a new session: torchrun's
 * start_new_session, a daemon's double fork), and with an environment of
 * the caller's own that keeps LD_PRELOAD and the limit but not our mark.
 *
 * The tree is named by its root: the topmost process of the chain of
 * parents that runs under the shim with a standalone limit. At load (a
 * constructor, before main and before any thread: setenv is safe there),
 * a process that did not inherit a name finds its root and sets
 * ACCEL_SHIM_TREE=<root pid>-<root start time>, so that everything it
 * starts inherits it, even through a runtime that snapshots the
 * environment at start (Python's os.environ). Finding the root reads
 * /proc/<pid>/environ and /proc/<pid>/stat up the chain of parents: an
 * ancestor whose environment (as it was exec'd) carries the name gives
 * it; one that was exec'd under the shim with a limit and no name is a
 * root itself (its own name came from this same rule). Only a process
 * without an inherited name pays the walk (the tree's root, and a child
 * whose environment was replaced); the others pay three getenv calls.
 *
 * Not covered: a child whose environment was replaced AND whose parent
 * chain was cut (a double fork that also clears the environment) starts
 * a tree of its own; so does a process that cannot read its ancestors'
 * environ (another user's, hidepid).
 */
#include "shim/shim.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TREE_ENV "ACCEL_SHIM_TREE"
#define TREE_DEPTH 64             /* ancestors looked at, at most */

/* Read /proc/<pid>/<what> into buf (NUL-terminated); bytes read, -1. */
static ssize_t proc_read(pid_t pid, const char *what, char *buf, size_t cap)
{
    char path[64], num[24];
    ssize_t n, got = 0;
    int fd;

    shim_concat(path, sizeof(path), "/proc/",
                shim_utoa((unsigned long)pid, num), "/", what, (char *)NULL);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while ((size_t)got < cap - 1 &&
           (n = read(fd, buf + got, cap - 1 - (size_t)got)) > 0)
        got += n;
    close(fd);
    buf[got] = '\0';
    return got;
}

/* The parent and start time of pid from its stat; 0, or -1. */
static int proc_stat(pid_t pid, pid_t *ppid, uint64_t *start)
{
    char buf[1024];
    const char *p;
    uint64_t v[2] = { 0, 0 };
    int field = 2;

    if (proc_read(pid, "stat", buf, sizeof(buf)) <= 0 ||
        (p = strrchr(buf, ')')) == NULL)
        return -1;
    for (; *p != '\0' && field < 22; p++) {
        if (*p != ' ')
            continue;
        field++;
        if (field == 4 || field == 22)
            for (const char *q = p + 1; *q >= '0' && *q <= '9'; q++)
                v[field == 22] = v[field == 22] * 10 + (uint64_t)(*q - '0');
    }
    if (field < 22 || v[1] == 0)
        return -1;
    *ppid = (pid_t)v[0];
    *start = v[1];
    return 0;
}

/* The value of name in a NUL-separated environment block, or NULL. */
static const char *env_in(const char *block, size_t n, const char *name)
{
    size_t l = strlen(name);

    for (size_t i = 0; i < n; i += strlen(block + i) + 1)
        if (strncmp(block + i, name, l) == 0 && block[i + l] == '=')
            return block + i + l + 1;
    return NULL;
}

/* Whether an environment makes a standalone root: the shim preloaded, a
 * standalone limit, no acceld config and no explicit app. */
static int env_root(const char *block, size_t n)
{
    const char *pre = env_in(block, n, "LD_PRELOAD");
    int limit = env_in(block, n, "ACCEL_MEMORY_LIMIT") != NULL ||
                env_in(block, n, "CUDA_DEVICE_MEMORY_LIMIT") != NULL;

    for (size_t i = 0; !limit && i < n; i += strlen(block + i) + 1)
        limit = strncmp(block + i, "CUDA_DEVICE_MEMORY_LIMIT_", 25) == 0;
    return pre != NULL && strstr(pre, "accelshim") != NULL && limit &&
           env_in(block, n, "ACCEL_CONFIG") == NULL &&
           env_in(block, n, "ACCEL_APP") == NULL;
}

static void tree_name(char *out, size_t cap, pid_t pid, uint64_t start)
{
    char a[24], b[24];

    shim_concat(out, cap, shim_utoa((unsigned long)pid, a), "-",
                shim_utoa((unsigned long)start, b), (char *)NULL);
}

/* This process's tree name into out: inherited from the nearest ancestor
 * that carries one, else the topmost root above us, else our own. */
static void tree_find(char *out, size_t cap)
{
    static char env[32768];
    pid_t pid = getpid(), up = 0;
    uint64_t start = 0;

    if (proc_stat(pid, &up, &start) != 0) {
        up = 0; /* no /proc: a tree of our own */
        start = 0;
    }
    tree_name(out, cap, pid, start);
    for (int depth = 0; depth < TREE_DEPTH && up > 1; depth++) {
        const char *v;
        ssize_t n;
        pid = up;
        if (proc_stat(pid, &up, &start) != 0)
            break;
        n = proc_read(pid, "environ", env, sizeof(env));
        if (n <= 0)
            continue; /* not ours to read: look further up */
        if ((v = env_in(env, (size_t)n, TREE_ENV)) != NULL) {
            shim_concat(out, cap, v, (char *)NULL);
            return;
        }
        if (env_root(env, (size_t)n))
            tree_name(out, cap, pid, start);
    }
}

__attribute__((constructor)) static void tree_mark(void)
{
    extern char **environ;
    char name[64];
    int limit = 0;

    if (getenv(TREE_ENV) != NULL || getenv("ACCEL_CONFIG") != NULL)
        return;
    if (getenv("ACCEL_APP") != NULL && getenv("ACCEL_APP")[0] != '\0')
        return;
    for (char **e = environ; e != NULL && *e != NULL && !limit; e++)
        limit = strncmp(*e, "ACCEL_MEMORY_LIMIT=", 19) == 0 ||
                strncmp(*e, "CUDA_DEVICE_MEMORY_LIMIT", 24) == 0;
    if (!limit)
        return;
    tree_find(name, sizeof(name));
    setenv(TREE_ENV, name, 0);
}
