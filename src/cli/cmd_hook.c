/* SPDX-License-Identifier: MIT */
/*
 * cmd_hook.c: accelctl cdi-hook DIR..., the OCI createContainer hook of the
 * accel.dev/app CDI devices acceld writes (docs/containers.md): the
 * runtime gives it the container's state on stdin; it moves the
 * container's first process (its "pid") into each of the app's cgroups
 * DIR/cgroup.procs, so that everything the container runs is the app's.
 * It talks to no acceld. A failure fails the container's creation: a
 * container that asked for the app's device never runs outside its cgroup.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATE_MAX 65536 /* the OCI state is a few hundred bytes */

int cmd_hook_cdi(struct cli_ctx *ctx, const struct cli_args *args)
{
    char *buf = calloc(1, STATE_MAX);
    size_t got = 0;
    json_t *state;
    json_int_t pid;
    char val[32];

    (void)ctx;
    if (buf == NULL)
        return CLI_EXIT_REFUSED;
    while (got < STATE_MAX - 1) {
        ssize_t n = read(STDIN_FILENO, buf + got, STATE_MAX - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    state = json_loadb(buf, got, 0, NULL);
    free(buf);
    pid = json_integer_value(json_object_get(state, "pid"));
    json_decref(state);
    if (pid <= 0) {
        fprintf(stderr, "accelctl cdi-hook: no pid in the container's state "
                        "on stdin\n");
        return CLI_EXIT_REFUSED;
    }
    snprintf(val, sizeof val, "%lld", (long long)pid);
    for (int i = 0; i < args->npos; i++) {
        char path[4096];
        int fd;
        ssize_t n;
        snprintf(path, sizeof path, "%s/cgroup.procs", args->pos[i]);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        n = fd < 0 ? -1 : write(fd, val, strlen(val));
        if (fd >= 0)
            close(fd);
        if (n < 0) {
            fprintf(stderr, "accelctl cdi-hook: cannot move %s into %s: %s "
                            "(is the app still bound here?)\n",
                    val, path, strerror(errno));
            return CLI_EXIT_REFUSED;
        }
    }
    return CLI_EXIT_OK;
}
