/* SPDX-License-Identifier: MIT */
/*
 * cmd_hook.c: accelctl cdi-hook [--record DIR] DIR..., the OCI
 * createContainer hook of the accel.dev/app CDI devices acceld writes
 * (docs/containers.md): the runtime gives it the container's state on
 * stdin; it moves the container's first process (its "pid") into each of
 * the app's cgroups DIR/cgroup.procs, so that everything the container
 * runs is the app's, and with --record writes RECORD/<container ID>
 * holding the container's engine (podman, docker), so that acceld stops
 * it through its engine and a restart policy sees a stop, not a crash.
 * With --instance ID (the install of the app: its name and when it was
 * installed) it keeps, in RECORD/../.joined/<container ID>, the install
 * the container first joined and refuses it when it joined another: a
 * container made for an app that was uninstalled never joins a later app
 * that got the name (another member's), whatever its restart policy.
 * With --stopped APP (the device of a stopped app) it refuses the
 * container, saying the app is stopped. It talks to no acceld. A failure
 * fails the container's creation: a container that asked for the app's
 * device never runs outside its cgroup.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/bpf.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#define STATE_MAX 65536 /* the OCI state is a few hundred bytes */
#define CGROUP2_MAGIC 0x63677270 /* statfs of a cgroup v2 directory */
#define DEVPROG_MAX 64 /* device programs on one cgroup, effective */

/* The engine that made the container, from its state: podman's own
 * annotation, else the one accel-runc set, else a bundle under containerd's
 * "moby" namespace (Docker 25 and later applying the CDI device itself),
 * else "unknown". */
static const char *engine_of(const json_t *state)
{
    const json_t *ann = json_object_get(state, "annotations");
    const char *m = json_string_value(json_object_get(ann,
                                                      "io.container.manager"));
    const char *e = json_string_value(json_object_get(ann,
                                                      "accel.dev/engine"));
    const char *b = json_string_value(json_object_get(state, "bundle"));

    if (m != NULL && strcmp(m, "libpod") == 0)
        return "podman";
    if (e != NULL && (strcmp(e, "docker") == 0 || strcmp(e, "podman") == 0))
        return e;
    if (b != NULL && strstr(b, "/moby/") != NULL)
        return "docker";
    return "unknown";
}

/* Is id (the container's, from its state) a file name to record? */
static bool id_ok(const char *id)
{
    return id != NULL && id[0] != '\0' && id[0] != '.' && id[0] != '-' &&
           strlen(id) < 256 &&
           strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789_.-") == strlen(id);
}

/*
 * Has the container (id) joined no other install than instance? The
 * first join is kept in <dir's parent>/.joined/<id> (made root's 0700,
 * never through a link). False after saying why: it joined another
 * install. A join that cannot be kept is a warning only, as a record is
 * (acceld's directory is root's: only root could make it fail).
 */
static bool same_install(const char *dir, const char *id, const char *instance)
{
    char top[4096], path[4096 + 256], was[512];
    const char *slash = strrchr(dir, '/');
    size_t len = strlen(instance);
    ssize_t n;
    int fd;

    if (slash == NULL || (size_t)(slash - dir) >= sizeof top - 16 ||
        len == 0 || len >= sizeof was) {
        fprintf(stderr, "accelctl cdi-hook: --record %s or --instance %s "
                        "is not one to keep the container's app in\n",
                dir, instance);
        return false;
    }
    snprintf(top, sizeof top, "%.*s/.joined", (int)(slash - dir), dir);
    if (mkdir(top, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "accelctl cdi-hook: cannot make %s: %s\n", top,
                strerror(errno));
        return true;
    }
    snprintf(path, sizeof path, "%s/%s", top, id);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              0600);
    if (fd >= 0) { /* its first join */
        n = write(fd, instance, len);
        if (close(fd) != 0 || n != (ssize_t)len) {
            fprintf(stderr, "accelctl cdi-hook: cannot write %s: %s\n", path,
                    strerror(errno));
            unlink(path);
        }
        return true;
    }
    if (errno != EEXIST ||
        (fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        fprintf(stderr, "accelctl cdi-hook: cannot keep the container's app "
                        "in %s: %s\n", path, strerror(errno));
        return true;
    }
    n = read(fd, was, sizeof was - 1);
    close(fd);
    was[n > 0 ? n : 0] = '\0';
    if (n == (ssize_t)len && memcmp(was, instance, len) == 0)
        return true;
    fprintf(stderr, "accelctl cdi-hook: container %.12s was made for an "
                    "earlier install of its app (%s), which is gone: the "
                    "app of that name now (%s) is another, and a container "
                    "joins only the app it was made for. Make a new "
                    "container for it (docker rm, then docker run; podman "
                    "likewise)\n", id, was, instance);
    return false;
}

/* The container's engine into dir/<its ID> (dir made, root's 0700). Only
 * a warning when it cannot be written: acceld then stops the container
 * with signals, as before. */
static void record(const char *dir, const json_t *state)
{
    const char *id = json_string_value(json_object_get(state, "id"));
    char path[4096];
    FILE *f;

    if (!id_ok(id)) {
        fprintf(stderr, "accelctl cdi-hook: the container's ID is not one "
                        "to record: acceld will stop it with signals\n");
        return;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "accelctl cdi-hook: cannot make %s: %s\n", dir,
                strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/%s", dir, id);
    f = fopen(path, "w");
    if (f == NULL || fprintf(f, "%s\n", engine_of(state)) < 0 ||
        fclose(f) != 0)
        fprintf(stderr, "accelctl cdi-hook: cannot write %s: %s\n", path,
                strerror(errno));
}

/* Is dir a directory of the cgroup v2 hierarchy? */
static bool is_v2(const char *dir)
{
    struct statfs f;
    return statfs(dir, &f) == 0 && f.f_type == CGROUP2_MAGIC;
}

/*
 * The cgroup v2 directory this process is in, under the mount that holds
 * appdir (out, cap): false when it cannot be told. The runtime (runc,
 * crun) runs a createContainer hook as a child of the container's first
 * process, in its cgroup and cgroup namespace: the hook joins the
 * namespace of the machine's first process (PID 1 of the /proc it sees,
 * the host's before pivot_root) so that the path is the whole one.
 */
static bool own_v2_dir(const char *appdir, char *out, size_t cap)
{
    char line[4096], best[4096] = "", rel[4096] = "";
    FILE *f;
    int ns = open("/proc/1/ns/cgroup", O_RDONLY | O_CLOEXEC);

    if (ns >= 0) {
        (void)setns(ns, CLONE_NEWCGROUP); /* else: already in it */
        close(ns);
    }
    if ((f = fopen("/proc/self/cgroup", "re")) == NULL)
        return false;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(rel, sizeof rel, "%s", line + 3);
        }
    fclose(f);
    if (rel[0] != '/' || (f = fopen("/proc/self/mountinfo", "re")) == NULL)
        return false;
    while (fgets(line, sizeof line, f) != NULL) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT ... - FSTYPE ... */
        char root[1024], mnt[1024], *dash = strstr(line, " - ");
        size_t ml;
        if (dash == NULL || strncmp(dash + 3, "cgroup2 ", 8) != 0 ||
            sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2 ||
            strcmp(root, "/") != 0)
            continue;
        ml = strlen(mnt);
        if (strncmp(appdir, mnt, ml) == 0 && appdir[ml] == '/' &&
            ml > strlen(best))
            snprintf(best, sizeof best, "%s", mnt);
    }
    fclose(f);
    if (best[0] == '\0' || strstr(rel, "/..") != NULL)
        return false;
    return snprintf(out, cap, "%s%s", best, strcmp(rel, "/") ? rel : "") <
           (int)cap;
}

/* The ids of the device programs in effect on cgroup dir (n of them, at
 * most DEVPROG_MAX): -1 when the kernel cannot say. */
static int device_progs(const char *dir, __u32 *ids)
{
    union bpf_attr a;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    long rc;

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.query.target_fd = (__u32)fd;
    a.query.attach_type = BPF_CGROUP_DEVICE;
    a.query.query_flags = BPF_F_QUERY_EFFECTIVE;
    a.query.prog_ids = (__u64)(uintptr_t)ids;
    a.query.prog_cnt = DEVPROG_MAX;
    rc = syscall(__NR_bpf, BPF_PROG_QUERY, &a, sizeof a);
    close(fd);
    return rc == 0 ? (int)a.query.prog_cnt : -1;
}

/* Program id attached to cgroup dir (alongside others): 0, or errno. */
static int attach_prog(const char *dir, __u32 id)
{
    union bpf_attr a;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), prog, e = 0;

    if (fd < 0)
        return errno;
    memset(&a, 0, sizeof a);
    a.prog_id = id;
    prog = (int)syscall(__NR_bpf, BPF_PROG_GET_FD_BY_ID, &a, sizeof a);
    if (prog < 0) {
        e = errno;
        close(fd);
        return e;
    }
    memset(&a, 0, sizeof a);
    a.target_fd = (__u32)fd;
    a.attach_bpf_fd = (__u32)prog;
    a.attach_type = BPF_CGROUP_DEVICE;
    a.attach_flags = BPF_F_ALLOW_MULTI;
    if (syscall(__NR_bpf, BPF_PROG_ATTACH, &a, sizeof a) != 0)
        e = errno;
    close(prog);
    close(fd);
    return e;
}

/*
 * Where in app's cgroup v2 directory appdir the container's first
 * process goes (out, cap): on cgroup v2 a runtime holds a container to
 * its devices (the engine's allow list, the app's GPU nodes) by BPF
 * programs on the container's own cgroup, which a move into the app's
 * would leave behind (its root, with CAP_MKNOD, could then make and open
 * any device of the host). When the hook's cgroup (the container's) has
 * device programs in effect, they are attached to a cgroup of its own
 * under the app's, appdir/ctr-<ID>, made afresh, and that is where it
 * goes; else appdir, as before. False after saying why (the container is
 * refused: it never runs without its device rules).
 */
static bool v2_target(const char *appdir, const char *id, long long pid,
                      char *out, size_t cap)
{
    char own[4096];
    __u32 ids[DEVPROG_MAX];
    int n;

    snprintf(out, cap, "%s", appdir);
    if (!own_v2_dir(appdir, own, sizeof own) ||
        (n = device_progs(own, ids)) <= 0)
        return true; /* no device programs to carry (cgroup v1's devices
                        controller stays with the container) */
    if (id_ok(id))
        snprintf(out, cap, "%s/ctr-%s", appdir, id);
    else
        snprintf(out, cap, "%s/ctr-pid%lld", appdir, pid);
    if (rmdir(out) != 0 && errno != ENOENT) { /* an earlier start's */
        fprintf(stderr, "accelctl cdi-hook: cannot remove %s: %s\n", out,
                strerror(errno));
        return false;
    }
    if (mkdir(out, 0755) != 0) {
        fprintf(stderr, "accelctl cdi-hook: cannot make %s: %s\n", out,
                strerror(errno));
        return false;
    }
    for (int i = 0; i < n && i < DEVPROG_MAX; i++) {
        int e = attach_prog(out, ids[i]);
        if (e != 0) {
            fprintf(stderr, "accelctl cdi-hook: cannot carry the "
                            "container's device rules (BPF program %u of "
                            "%s) to %s: %s\n", ids[i], own, out,
                    strerror(e));
            rmdir(out);
            return false;
        }
    }
    return true;
}

int cmd_hook_cdi(struct cli_ctx *ctx, const struct cli_args *args)
{
    char *buf;
    size_t got = 0;
    json_t *state;
    json_int_t pid;
    char val[32], id[256] = "";

    (void)ctx;
    if (args->stopped != NULL) {
        fprintf(stderr, "accelctl cdi-hook: app '%s' is stopped: a container "
                        "for it starts once it runs again (accelctl app "
                        "resume %s)\n", args->stopped, args->stopped);
        return CLI_EXIT_REFUSED;
    }
    if (args->npos == 0) {
        fprintf(stderr, "accelctl cdi-hook: no cgroup directory given\n");
        return CLI_EXIT_USAGE;
    }
    buf = calloc(1, STATE_MAX);
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
    if (json_string_value(json_object_get(state, "id")) != NULL)
        snprintf(id, sizeof id, "%s",
                 json_string_value(json_object_get(state, "id")));
    if (pid > 0 && args->record != NULL && args->instance != NULL) {
        if (id_ok(id) && !same_install(args->record, id, args->instance)) {
            json_decref(state);
            return CLI_EXIT_REFUSED;
        }
    }
    if (pid > 0 && args->record != NULL)
        record(args->record, state);
    json_decref(state);
    if (pid <= 0) {
        fprintf(stderr, "accelctl cdi-hook: no pid in the container's state "
                        "on stdin\n");
        return CLI_EXIT_REFUSED;
    }
    snprintf(val, sizeof val, "%lld", (long long)pid);
    for (int i = 0; i < args->npos; i++) {
        char path[4096 + 32], dir[4096];
        int fd;
        ssize_t n;
        snprintf(dir, sizeof dir, "%s", args->pos[i]);
        if (is_v2(dir) &&
            !v2_target(args->pos[i], id, (long long)pid, dir, sizeof dir))
            return CLI_EXIT_REFUSED;
        snprintf(path, sizeof path, "%s/cgroup.procs", dir);
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
