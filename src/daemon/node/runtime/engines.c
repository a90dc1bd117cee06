/* SPDX-License-Identifier: MIT */
/*
 * engines.c: people's own containers stopped through their engine
 * (engines.h): the hook's records read, `podman stop` / `docker stop`
 * started in a detached process.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/engines.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"

#define ENGINE_PATH                                                            \
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

char *engines_record_dir(const struct accel_daemon *d, const char *app)
{
    return xasprintf("%s/run/containers/%s", d->cfg.data_dir, app);
}

/* argv run in a grandchild that nobody waits for (init reaps it): its
 * output to /dev/null. False when the fork failed. */
static bool spawn_detached(char *const *argv, char *const *envp,
                           const char *first)
{
    pid_t pid = fork();
    int status;

    if (pid < 0)
        return false;
    if (pid == 0) {
        if (fork() == 0) {
            int null = open("/dev/null", O_RDWR);
            if (null >= 0) {
                dup2(null, STDIN_FILENO);
                dup2(null, STDOUT_FILENO);
                dup2(null, STDERR_FILENO);
            }
            setsid();
            execve(first, argv, envp);
            execvpe(argv[0], argv, envp);
            _exit(127);
        }
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return true;
}

/* The engine's stop of container id (engine as the hook recorded it). */
static bool stop_one(const char *engine, const char *id, int timeout_s)
{
    char t[16], host[4096];
    const char *dh = getenv("DOCKER_HOST");
    char *argv[] = {(char *)engine, "stop", "-t", t, (char *)id, NULL};
    char *envp[] = {"PATH=" ENGINE_PATH, "HOME=/root", host, NULL};
    bool docker = strcmp(engine, "docker") == 0;

    if (!docker && strcmp(engine, "podman") != 0)
        return false;
    snprintf(t, sizeof t, "%d", timeout_s);
    if (docker && dh != NULL && dh[0] != '\0')
        snprintf(host, sizeof host, "DOCKER_HOST=%s", dh);
    else
        envp[2] = NULL;
    return spawn_detached(argv, envp, docker ? "/usr/bin/docker"
                                             : "/usr/bin/podman");
}

unsigned engines_stop(struct accel_daemon *d, const char *app, int timeout_s)
{
    char *dir = engines_record_dir(d, app);
    DIR *dp = opendir(dir);
    struct dirent *e;
    unsigned n = 0;

    while (dp != NULL && (e = readdir(dp)) != NULL) {
        char *path, engine[32];
        ssize_t len;
        if (e->d_name[0] == '.')
            continue;
        path = xasprintf("%s/%s", dir, e->d_name);
        len = util_read_small(path, engine, sizeof engine);
        free(path);
        if (len <= 0)
            continue;
        engine[strcspn(engine, "\n")] = '\0';
        if (stop_one(engine, e->d_name, timeout_s)) {
            log_info("app %s: stopping container %.12s through %s", app,
                     e->d_name, engine);
            n++;
        }
    }
    if (dp != NULL)
        closedir(dp);
    free(dir);
    return n;
}

void engines_forget(struct accel_daemon *d, const char *app)
{
    char *dir = engines_record_dir(d, app);
    DIR *dp = opendir(dir);
    struct dirent *e;

    while (dp != NULL && (e = readdir(dp)) != NULL)
        if (e->d_name[0] != '.')
            unlinkat(dirfd(dp), e->d_name, 0);
    if (dp != NULL)
        closedir(dp);
    if (rmdir(dir) != 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", dir, strerror(errno));
    free(dir);
}
