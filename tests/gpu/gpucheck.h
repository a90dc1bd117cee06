/* SPDX-License-Identifier: MIT */
/*
 * gpucheck.h: what the programs of tests/gpu/run-all.sh share (C and CUDA
 * C++ alike; no CUDA header needed).
 *
 *  - gc_outside(): the device's memory as the driver counts it, read by a
 *    separate process (meter, run WITHOUT LD_PRELOAD) so that a program
 *    under the shim can say what it holds physically at a given step. The
 *    meter's path comes from GPUCHECK_METER.
 *  - gc_owner(): whose code an address belongs to (dladdr): "shim" for
 *    libaccelshim.so, "driver" for libcuda.so*, else the object's name.
 *  - gc_now_ns(): a monotonic clock.
 */
#ifndef ACCEL_GPUCHECK_H
#define ACCEL_GPUCHECK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define GC_MIB (1024ull * 1024ull)
#define GC_SKIP 77 /* exit status: the check cannot run here (says why) */

static inline unsigned long long gc_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull +
           (unsigned long long)ts.tv_nsec;
}

static inline void gc_sleep_ms(unsigned ms)
{
    struct timespec ts;

    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

/* argv[i] as a number, 0 when absent */
static inline unsigned long long gc_arg(int argc, char **argv, int i)
{
    return argc > i ? strtoull(argv[i], NULL, 10) : 0;
}

/* Device memory used (bytes) and, when the driver lists processes, what
 * this process holds (-1 when not listed), from `meter once PID`.
 * Returns 0, or -1 when the meter could not be run. */
static inline int gc_outside(long long *dev_used, long long *proc_used)
{
    const char *meter = getenv("GPUCHECK_METER");
    char pid[32], line[256], *argv[4];
    char **env;
    size_t n = 0, k = 0;
    int fd[2], st = 0, rc = -1;
    pid_t child;
    FILE *f;

    *dev_used = -1;
    *proc_used = -1;
    if (meter == NULL || pipe(fd) != 0)
        return -1;
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    argv[0] = (char *)meter;
    argv[1] = (char *)"once";
    argv[2] = pid;
    argv[3] = NULL;
    while (environ[n] != NULL)
        n++;
    env = (char **)calloc(n + 1, sizeof(*env));
    if (env == NULL) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    for (size_t i = 0; i < n; i++) /* the meter runs without the shim */
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            env[k++] = environ[i];
    {
        posix_spawn_file_actions_t fa;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
        posix_spawn_file_actions_addclose(&fa, fd[0]);
        posix_spawn_file_actions_addclose(&fa, fd[1]);
        if (posix_spawn(&child, meter, &fa, NULL, argv, env) != 0)
            child = -1;
        posix_spawn_file_actions_destroy(&fa);
    }
    free(env);
    close(fd[1]);
    f = fdopen(fd[0], "r");
    if (f == NULL) {
        close(fd[0]);
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "used %lld proc %lld", dev_used, proc_used) >= 1)
            rc = 0;
    fclose(f);
    if (child > 0)
        waitpid(child, &st, 0);
    return child > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? rc : -1;
}

/* "shim", "driver", "none" (NULL) or the object's file name. */
static inline const char *gc_owner(const void *p, const char **sym)
{
    Dl_info di;

    *sym = "-";
    if (p == NULL)
        return "none";
    if (dladdr(p, &di) == 0 || di.dli_fname == NULL)
        return "unknown";
    if (di.dli_sname != NULL && di.dli_saddr == p)
        *sym = di.dli_sname; /* the exported name at exactly that address */
    if (strstr(di.dli_fname, "libaccelshim") != NULL)
        return "shim";
    if (strstr(di.dli_fname, "libcuda.so") != NULL)
        return "driver";
    return di.dli_fname;
}

#endif /* ACCEL_GPUCHECK_H */
