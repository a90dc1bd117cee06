/* SPDX-License-Identifier: MIT */
/*
 * runner_container.c: the runner of an OCI image (SPEC 8.2.1). acceld
 * runs `podman run` in the foreground as the app's leader (outside the
 * app's cgroup: --cgroups=no-conmon keeps podman's monitor out of it too),
 * and the container inside it (--cgroup-parent), as the owner's uid with
 * every capability dropped and no-new-privileges; the container's output
 * passes straight into the app's log pipe (--log-driver=passthrough). The
 * shim, a copy of its config with the container's paths, the ledgers and
 * the broker sockets are mounted at fixed paths under /run/accel and
 * /usr/lib/accel; the bound NVIDIA GPUs come in as the CDI devices of
 * NVIDIA's spec (nvidia.com/gpu=<UUID>), an AMD GPU as /dev/kfd and its
 * own render node, an Intel GPU as its render node. A stop is `podman
 * stop -t`, then runtime.c's cgroup.kill; once the app is gone the
 * container is removed and every child cgroup with it. See
 * docs/containers.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/runner.h"

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
#include "common/yamljson.h"
#include "daemon/log.h"
#include "daemon/node/runtime/runtime.h"

#define CTR_SHIM "/usr/lib/accel/libaccelshim.so" /* the shim, read-only */
#define CTR_CONFIG "/run/accel/shim.conf"         /* its config, read-only */
#define CTR_LEDGERS "/run/accel/ledgers"          /* the ledgers */
#define CTR_BROKER "/run/accel/broker"            /* broker sockets */
#define CTR_ARGS_MAX 1024
#define CTR_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define PODMAN_WAIT_MS 30000u /* a podman command that is not a stop */
#define PULL_WAIT_MS 3600000u /* a pull: an hour at most */
#define CDI_FILE_MAX (4u << 20)

/* ---- running podman ---- */

/* The environment podman runs with: a PATH with sbin (netavark needs
 * iptables), root's HOME, nothing else of acceld's. */
static char *const podman_env[] = {"PATH=" CTR_PATH, "HOME=/root", NULL};

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

/* Each line of podman's output (split at '\n' or '\r', at most
 * PODMAN_LINE_MAX bytes) to line(ctx, ...), the last one kept in last. */
#define PODMAN_LINE_MAX 1024u
struct podman_lines {
    void (*line)(void *ctx, const char *line);
    void *ctx;
    char cur[PODMAN_LINE_MAX];
    size_t n;
    char last[PODMAN_LINE_MAX];
};

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

/*
 * Run podman with argv and wait up to ms; its output (stdout and stderr,
 * at most len - 1 bytes, trailing newlines cut) into out when out is not
 * NULL, and line by line to lines when that is not NULL. Returns its exit
 * code, or -1 when it could not run or was killed at the deadline.
 */
static int podman_lines(char *const *argv, char *out, size_t len,
                        unsigned ms, struct podman_lines *lines)
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

static int podman(char *const *argv, char *out, size_t len, unsigned ms)
{
    return podman_lines(argv, out, len, ms, NULL);
}

/* Run podman with argv and do not wait for it (a stop the supervisor
 * drives: runtime.c kills the cgroup if it takes too long). The middle
 * child exits at once, so nothing is left for acceld to reap. */
static void podman_detached(char *const *argv)
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

/* ---- the image an app runs, pinned ---- */

#define INSPECT_MAX 65536u

/* The image's own LD_PRELOAD in its configured environment (a JSON array
 * of "KEY=value"), or NULL. */
static const char *image_preload(const json_t *env)
{
    const char *v = NULL;
    size_t i;
    json_t *e;

    json_array_foreach(env, i, e)
        if (json_is_string(e) &&
            strncmp(json_string_value(e), "LD_PRELOAD=", 11) == 0)
            v = json_string_value(e) + 11; /* the last one wins */
    return v != NULL && v[0] ? v : NULL;
}

enum accel_err runner_container_image_pin(const char *ref, json_t **pin,
                                          char **cause)
{
    char *exists[] = {"podman", "image", "exists", (char *)ref, NULL};
    char *inspect[] = {"podman", "image", "inspect", "--format",
                       "{{.Id}} {{.Digest}} {{json .Config.Env}}",
                       (char *)ref, NULL};
    char *out, *digest, *env_text, *save = NULL;
    json_t *env = NULL;
    int rc = podman(exists, NULL, 0, PODMAN_WAIT_MS);

    *pin = NULL;
    if (rc == 1)
        return ACCEL_ENOTFOUND;
    out = xmalloc(INSPECT_MAX);
    if (rc == 0)
        rc = podman(inspect, out, INSPECT_MAX, PODMAN_WAIT_MS);
    else
        out[0] = '\0';
    if (rc == 0) {
        char *id = strtok_r(out, " ", &save);
        digest = strtok_r(NULL, " ", &save);
        env_text = strtok_r(NULL, "", &save);
        if (env_text != NULL)
            env = json_loads(env_text, 0, NULL);
        if (id != NULL && digest != NULL && strlen(id) == 64) {
            const char *pre = image_preload(env);
            *pin = json_pack("{s:s, s:s, s:s}", "ref", ref, "id", id,
                             "digest", digest);
            if (pre != NULL)
                json_object_set_new(*pin, "preload", json_string(pre));
        }
        json_decref(env);
    }
    if (*pin != NULL) {
        free(out);
        return ACCEL_OK;
    }
    *cause = xasprintf("run.image: podman could not tell whether \"%s\" is "
                       "on this machine (podman image %s: %s); a container "
                       "app needs podman (docs/containers.md)",
                       ref, rc == 0 ? "inspect" : "exists",
                       rc < 0 ? "did not run" : out[0] ? out : "failed");
    free(out);
    return ACCEL_ESYS;
}

static bool says_any(const char *line, const char *const *words)
{
    for (; *words != NULL; words++)
        if (strstr(line, *words) != NULL)
            return true;
    return false;
}

/* A failed pull's sentence: podman's last line sorted into its cause
 * (SPEC 8.2.1), the line kept after it. */
static char *pull_cause(const char *ref, const char *last)
{
    static const char *const full[] = {"no space left on device",
                                       "disk quota exceeded", NULL};
    static const char *const net[] = {
        "connection refused", "no such host", "network is unreachable",
        "no route to host", "i/o timeout", "TLS handshake timeout",
        "connection reset", "server misbehaving",
        "Temporary failure in name resolution", NULL};
    static const char *const gone[] = {
        "manifest unknown", "name unknown", "not found",
        "no such file or directory", "repository does not exist",
        "requested access to the resource is denied", NULL};
    const char *why = NULL;

    if (last[0] == '\0')
        return xasprintf("pulling %s failed: podman did not run", ref);
    if (says_any(last, full))
        why = "the disk is full (no space left for the image)";
    else if (says_any(last, net))
        why = "the registry cannot be reached (no network, or the registry "
              "is down or refuses connections)";
    else if (says_any(last, gone))
        why = manifest_image_archive(ref)
                  ? "no such image (no such archive on this machine)"
                  : "no such image (the registry has no such name or tag, "
                    "or refuses it to an anonymous pull)";
    if (why == NULL)
        return xasprintf("pulling %s failed: %s", ref, last);
    return xasprintf("pulling %s failed: %s: %s", ref, why, last);
}

int runner_container_archive_stat(const char *ref, struct stat *st)
{
    const char *path = strchr(ref, ':');
    char *p, *colon;
    int err = ENOENT;

    if (!manifest_image_archive(ref) || path == NULL)
        return EINVAL;
    p = xstrdup(path + 1);
    colon = strrchr(p, ':');
    if (stat(p, st) == 0) {
        err = 0;
    } else {
        err = errno;
        if (colon != NULL) { /* oci-archive:/path:name */
            *colon = '\0';
            err = stat(p, st) == 0 ? 0 : err;
        }
    }
    free(p);
    return err;
}

enum accel_err runner_container_pull(const char *ref,
                                     void (*line)(void *ctx,
                                                  const char *line),
                                     void *ctx, json_t **pin, char **cause)
{
    char *argv[] = {"podman", "pull", (char *)ref, NULL};
    struct podman_lines *l;
    enum accel_err rc = ACCEL_ESYS;
    struct stat st;
    int err;

    *pin = NULL;
    /* an archive that is not there is said without podman, whose pull of
     * one leaves its temporary directory in /var/tmp (podman 4.3) */
    if (manifest_image_archive(ref) &&
        (err = runner_container_archive_stat(ref, &st)) != 0) {
        char *last = xasprintf("%s: %s (acceld looked before asking "
                               "podman)", strchr(ref, ':') + 1,
                               err == ENOENT ? "no such file or directory"
                                             : strerror(err));
        *cause = pull_cause(ref, last);
        free(last);
        return ACCEL_ENOTFOUND;
    }
    l = xcalloc(1, sizeof(*l));
    l->line = line;
    l->ctx = ctx;
    if (podman_lines(argv, NULL, 0, PULL_WAIT_MS, l) != 0) {
        *cause = pull_cause(ref, l->last);
    } else { /* its last line is the image's ID */
        rc = runner_container_image_pin(l->last, pin, cause);
        if (rc == ACCEL_OK)
            json_object_set_new(*pin, "ref", json_string(ref));
    }
    free(l);
    return rc;
}

static char *pin_path(const struct accel_daemon *d, const char *app)
{
    return xasprintf("%s/images/%s.json", d->cfg.data_dir, app);
}

void runner_container_pin_set(struct accel_daemon *d, struct app *a,
                              json_t *pin)
{
    char *dir = xasprintf("%s/images", d->cfg.data_dir);
    char *path = pin_path(d, a->name), *tmp = xasprintf("%s.tmp", path);

    json_decref(a->image_pin);
    a->image_pin = pin != NULL ? pin : json_object();
    if (pin != NULL) /* whether acceld may remove it with its last app */
        json_object_set_new(pin, "pull", json_string(a->m.run.ctr.pull));
    if (pin == NULL) {
        if (unlink(path) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", path, strerror(errno));
    } else if ((mkdir(dir, 0700) != 0 && errno != EEXIST) ||
               json_dump_file(pin, tmp, JSON_COMPACT) != 0 ||
               rename(tmp, path) != 0) {
        log_warn("app %s: cannot keep its image's ID in %s (%s): a start "
                 "after acceld's restart runs %s by its reference", a->name,
                 path, strerror(errno), a->m.run.ctr.image);
        unlink(tmp);
    }
    free(tmp);
    free(path);
    free(dir);
}

/* a's pin (lock held): read from its file the first time; {} when there
 * is none or it pins another reference than the manifest's. */
static const json_t *pin_of(const struct accel_daemon *d, struct app *a)
{
    if (a->image_pin == NULL) {
        char *path = pin_path(d, a->name);
        json_t *p = json_load_file(path, 0, NULL);
        const char *ref = json_string_value(json_object_get(p, "ref"));
        if (ref == NULL || a->m.run.ctr.image == NULL ||
            strcmp(ref, a->m.run.ctr.image) != 0 ||
            !json_is_string(json_object_get(p, "id"))) {
            json_decref(p);
            p = json_object();
        }
        a->image_pin = p;
        free(path);
    }
    return a->image_pin;
}

static const char *pin_str(const struct accel_daemon *d, struct app *a,
                           const char *key)
{
    return json_string_value(json_object_get(pin_of(d, a), key));
}

const char *runner_container_pinned_id(const struct accel_daemon *d,
                                       struct app *a)
{
    return pin_str(d, a, "id");
}

void runner_container_name(const struct accel_daemon *d, const char *app,
                           char *buf, size_t len)
{
    snprintf(buf, len, "accel-%s-%s", d->cg->instance, app);
}

json_t *runner_container_json(const struct accel_daemon *d,
                              const struct app *ca)
{
    char name[128];
    const char *state = "none"; /* removed whenever its processes are gone */
    struct app *a = (struct app *)ca; /* the pin is read once, then kept */
    json_t *o;

    if (a->m.run.ctr.image == NULL)
        return NULL;
    if (a->pid > 0)
        state = a->state == APP_STOPPING ? "stopping" : "running";
    runner_container_name(d, a->name, name, sizeof name);
    o = json_pack("{s:s, s:s, s:s, s:s}", "image", a->m.run.ctr.image,
                  "pullPolicy", a->m.run.ctr.pull, "name", name, "state",
                  state);
    if (pin_str(d, a, "id") != NULL) {
        json_object_set_new(o, "imageId", json_string(pin_str(d, a, "id")));
        json_object_set_new(o, "digest",
                            json_string(pin_str(d, a, "digest")));
    }
    if (a->pull != NULL)
        json_object_set_new(o, "pull", json_deep_copy(a->pull));
    return o;
}

/* ---- what the machine allows ---- */

static bool executable(const char *name)
{
    static const char *const dirs[] = {"/usr/local/sbin", "/usr/local/bin",
                                       "/usr/sbin", "/usr/bin", "/sbin",
                                       "/bin", NULL};
    for (const char *const *d = dirs; *d; d++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", *d, name);
        if (access(path, X_OK) == 0)
            return true;
    }
    return false;
}

/* The OCI runtime: crun refuses the hybrid of v1 controllers and an empty
 * v2 hierarchy, so with v1 controllers in use runc; else crun when there
 * is one. NULL with *cause when none fits. */
static const char *oci_runtime(const struct cgroup_sys *cg, char **cause)
{
    bool v1 = cg->memory.tier == CGROUP_V1 || cg->cpu.tier == CGROUP_V1 ||
              cg->pids.tier == CGROUP_V1 || cg->v2_dir == NULL ||
              cg->memory.tier == CGROUP_NONE;
    if (!v1 && executable("crun"))
        return "crun";
    if (executable("runc"))
        return "runc";
    *cause = xasprintf("no OCI runtime for podman: install runc (apt-get "
                       "install runc)%s",
                       v1 ? "; crun refuses this machine's cgroup v1 "
                            "controllers" : " or crun");
    return NULL;
}

/* "--ulimit=<name>=<limit>:<limit>" at acceld's own hard limit: podman's
 * defaults (nofile 1048576) exceed what a root without CAP_SYS_RESOURCE
 * may set, and runc then refuses to start the container. podman lowers
 * its monitor's nproc to the kernel's pid_max, so nproc is at most that
 * (cap, 0 = none). */
static char *ulimit_arg(const char *name, int res, uint64_t cap)
{
    struct rlimit rl;
    uint64_t v;
    if (getrlimit(res, &rl) != 0)
        return xasprintf("--ulimit=%s=-1:-1", name);
    v = rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_max;
    if (cap != 0 && cap < v)
        v = cap;
    if (v == UINT64_MAX)
        return xasprintf("--ulimit=%s=-1:-1", name);
    return xasprintf("--ulimit=%s=%llu:%llu", name, (unsigned long long)v,
                     (unsigned long long)v);
}

/* /proc/sys/kernel/pid_max, 0 when unreadable. */
static uint64_t pid_max(void)
{
    char buf[32];
    return util_read_small("/proc/sys/kernel/pid_max", buf, sizeof buf) > 0
               ? strtoull(buf, NULL, 10)
               : 0;
}

/*
 * The CDI specs parsed, by path and the file's identity (device, inode,
 * size, modification time): the CDI refresh asks for each bound GPU of each
 * external app every second, and NVIDIA's spec can be hundreds of KiB of
 * YAML. A file replaced (a rename: a new inode) or changed is parsed
 * again. Entries of removed files are dropped at the next lookup of their
 * directory. One lock: cdi_find runs on several threads.
 */
struct cdi_cached {
    char *path;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    json_t *spec;            /* NULL: the file does not parse */
    bool seen;               /* listed by the current scan */
    struct cdi_cached *next;
};

static pthread_mutex_t cdi_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cdi_cached *cdi_cache; /* guarded by cdi_mu */

/* The spec at path (st its stat), parsed or from the cache: a new
 * reference, or NULL when it cannot be read or parsed. cdi_mu held. */
static json_t *cdi_spec_at(const char *path, const struct stat *st)
{
    struct cdi_cached *c;
    char *buf, *err = NULL;
    ssize_t n;

    for (c = cdi_cache; c != NULL; c = c->next)
        if (strcmp(c->path, path) == 0)
            break;
    if (c != NULL && c->dev == st->st_dev && c->ino == st->st_ino &&
        c->size == st->st_size && c->mtime.tv_sec == st->st_mtim.tv_sec &&
        c->mtime.tv_nsec == st->st_mtim.tv_nsec) {
        c->seen = true;
        return json_incref(c->spec);
    }
    if (c == NULL) {
        c = xcalloc(1, sizeof(*c));
        c->path = xstrdup(path);
        c->next = cdi_cache;
        cdi_cache = c;
    }
    json_decref(c->spec);
    c->spec = NULL;
    c->dev = st->st_dev;
    c->ino = st->st_ino;
    c->size = st->st_size;
    c->mtime = st->st_mtim;
    c->seen = true;
    buf = xmalloc(CDI_FILE_MAX);
    n = util_read_small(path, buf, CDI_FILE_MAX);
    if (n <= 0 ||
        yamljson_parse_any(buf, (size_t)n, &c->spec, &err) != ACCEL_OK) {
        c->spec = NULL;
        c->size = -1; /* read again next time: it may have been mid-write */
    }
    free(err);
    free(buf);
    return json_incref(c->spec);
}

/* Drop the cached specs of dir that its scan did not list (cdi_mu held);
 * clear the marks of the others. */
static void cdi_cache_prune(const char *dir)
{
    size_t len = strlen(dir);
    struct cdi_cached **pp = &cdi_cache;

    while (*pp != NULL) {
        struct cdi_cached *c = *pp;
        bool here = strncmp(c->path, dir, len) == 0 && c->path[len] == '/';
        if (here && !c->seen) {
            *pp = c->next;
            json_decref(c->spec);
            free(c->path);
            free(c);
            continue;
        }
        if (here)
            c->seen = false;
        pp = &c->next;
    }
}

/*
 * The CDI spec in /etc/cdi or /var/run/cdi that lists kind=name: true, and
 * with edits not NULL, its device's containerEdits and the spec's own
 * appended to *edits (a new object of arrays env, deviceNodes, mounts,
 * hooks when *edits is NULL).
 */
static bool cdi_find(const char *kind, const char *name, json_t **edits)
{
    static const char *const dirs[] = {"/etc/cdi", "/var/run/cdi", NULL};
    static const char *const keys[] = {"env", "deviceNodes", "mounts",
                                       "hooks", NULL};
    bool found = false;

    pthread_mutex_lock(&cdi_mu);
    for (const char *const *dir = dirs; *dir && !found; dir++) {
        DIR *dp = opendir(*dir);
        struct dirent *e;
        bool whole = true; /* the scan listed every file of dir */
        while (dp != NULL && !found && (e = readdir(dp)) != NULL) {
            char path[512];
            json_t *spec = NULL, *dev, *hit = NULL;
            size_t i;
            struct stat st;
            const char *ext = strrchr(e->d_name, '.');
            if (ext == NULL || (strcmp(ext, ".json") && strcmp(ext, ".yaml") &&
                                strcmp(ext, ".yml")))
                continue;
            snprintf(path, sizeof path, "%s/%s", *dir, e->d_name);
            if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            spec = cdi_spec_at(path, &st);
            if (spec == NULL)
                continue;
            if (json_is_string(json_object_get(spec, "kind")) &&
                strcmp(json_string_value(json_object_get(spec, "kind")),
                       kind) == 0)
                json_array_foreach(json_object_get(spec, "devices"), i, dev) {
                    const char *nm = json_string_value(
                        json_object_get(dev, "name"));
                    if (nm != NULL && strcmp(nm, name) == 0)
                        hit = dev;
                }
            if (hit != NULL && edits != NULL) {
                const json_t *from[] = {json_object_get(hit, "containerEdits"),
                                        json_object_get(spec,
                                                        "containerEdits")};
                if (*edits == NULL)
                    *edits = json_object();
                for (const char *const *k = keys; *k; k++) {
                    json_t *to = json_object_get(*edits, *k);
                    if (to == NULL) {
                        to = json_array();
                        json_object_set_new(*edits, *k, to);
                    }
                    for (int f = 0; f < 2; f++)
                        if (json_is_array(json_object_get(from[f], *k)))
                            json_array_extend(to,
                                              json_object_get(from[f], *k));
                }
            }
            found = hit != NULL;
            whole = !found;
            json_decref(spec);
        }
        if (dp != NULL) {
            closedir(dp);
            if (whole)
                cdi_cache_prune(*dir);
        }
    }
    pthread_mutex_unlock(&cdi_mu);
    return found;
}

static json_t *ctr_mounts(struct accel_daemon *d, const char *app,
                          const struct ledger_device *host, size_t n,
                          char **out_text, char **cause);

/* accelctl beside acceld (a build tree, /usr/bin), else in /usr/bin;
 * NULL when there is none. */
static char *hook_path(void)
{
    char self[4096], *p;
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 16);
    if (n > 0) {
        self[n] = '\0';
        p = strrchr(self, '/');
        if (p != NULL) {
            util_strlcpy(p + 1, "accelctl", sizeof self - (size_t)(p + 1 - self));
            if (access(self, X_OK) == 0)
                return xstrdup(self);
        }
    }
    return access("/usr/bin/accelctl", X_OK) == 0
               ? xstrdup("/usr/bin/accelctl") : NULL;
}

/* ---- an AMD or Intel GPU's device nodes ---- */

#define CTR_KFD "/dev/kfd" /* AMD's compute interface (KFD) */
#define CTR_DRI "/dev/dri" /* the render nodes */

/* A device node a container gets: its path on the host, in the container,
 * and the host node's group. */
struct ctr_node {
    char *host;
    char *ctr;
    gid_t gid;
};

static bool amd_type(enum accel_type t)
{
    return t == ACCEL_TYPE_AMD || t == ACCEL_TYPE_AMD_GPU;
}

static bool intel_type(enum accel_type t)
{
    return t == ACCEL_TYPE_INTEL || t == ACCEL_TYPE_INTEL_GPU;
}

/* Where the host's device nodes are: /dev, or a test's (--dev-root). */
static const char *dev_root(const struct accel_daemon *d)
{
    return d->cfg.dev_root ? d->cfg.dev_root : "/dev";
}

/* Is name "renderD<digits>" (from sysfs: never a path)? */
static bool render_name(const char *name)
{
    if (strncmp(name, "renderD", 7) != 0 || name[7] == '\0')
        return false;
    return strspn(name + 7, "0123456789") == strlen(name + 7);
}

/* The host node at path (what: what it is, id: the device) as a character
 * device: ACCEL_OK with its group in *out_gid (set only on success), else
 * ACCEL_ENOTFOUND with *cause. */
static enum accel_err char_node(const char *path, const char *what,
                                const char *id, gid_t *out_gid, char **cause)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        *cause = xasprintf("cannot give %s to a container: %s, %s, cannot "
                           "be used: %s", id, path, what, strerror(errno));
        return ACCEL_ENOTFOUND;
    }
    if (!S_ISCHR(st.st_mode)) {
        *cause = xasprintf("cannot give %s to a container: %s, %s, is not "
                           "a character device", id, path, what);
        return ACCEL_ENOTFOUND;
    }
    *out_gid = st.st_gid;
    return ACCEL_OK;
}

static void nodes_free(struct ctr_node *n, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(n[i].host);
        free(n[i].ctr);
    }
}

/*
 * The device nodes of snapshot device dev, an AMD or Intel GPU: for AMD,
 * /dev/kfd (the compute interface every AMD GPU's work goes through) and
 * the GPU's own render node; for Intel its render node alone. Each at the
 * same path in the container: ROCm (libhsakmt) opens
 * /dev/dri/renderD<minor> of each GPU the kernel's KFD topology lists and
 * leaves out one it cannot open, and Intel's runtimes open the render
 * nodes they find, so the GPU this node is the only one the container can
 * use. Never another card's render node, never a /dev/dri/card* (the
 * display side). out[0..*out_n) allocated (nodes_free), set only on
 * success. ACCEL_ENOTFOUND with *cause naming the device and why when its
 * render node is unknown or a node is not on this machine.
 */
static enum accel_err drm_nodes(const struct accel_daemon *d, uint32_t dev,
                                struct ctr_node out[2], size_t *out_n,
                                char **cause)
{
    const struct adm_device *x = &d->snap.devs[dev];
    const char *render = d->dinfo[dev].render;
    struct ctr_node n[2];
    size_t k = 0;
    enum accel_err rc;

    if (render == NULL || !render_name(render)) {
        const char *pci = d->dinfo[dev].pci;
        char *why = !d->dinfo[dev].drm
                        ? xstrdup("acceld did not find it in the DRM sysfs: "
                                  "a device the inventory declares")
                        : xasprintf("the DRM sysfs lists no renderD* for its "
                                    "card%s%s", pci ? " at " : "",
                                    pci ? pci : "");
        *cause = xasprintf("cannot give %s to a container: its render node "
                           "is unknown (%s), and a container gets a GPU "
                           "through that node alone, not the other cards'",
                           x->id, why);
        free(why);
        return ACCEL_ENOTFOUND;
    }
    if (amd_type(x->type)) {
        n[k].host = xasprintf("%s/kfd", dev_root(d));
        n[k].ctr = xstrdup(CTR_KFD);
        k++;
    }
    n[k].host = xasprintf("%s/dri/%s", dev_root(d), render);
    n[k].ctr = xasprintf(CTR_DRI "/%s", render);
    k++;
    for (size_t i = 0; i < k; i++) {
        rc = char_node(n[i].host, strcmp(n[i].ctr, CTR_KFD) == 0
                                      ? "AMD's compute interface (KFD)"
                                      : "its render node",
                       x->id, &n[i].gid, cause);
        if (rc != ACCEL_OK) {
            nodes_free(n, k);
            return rc;
        }
    }
    memcpy(out, n, k * sizeof n[0]);
    *out_n = k;
    return ACCEL_OK;
}

/*
 * HIP_VISIBLE_DEVICES in the container, "" when the app has no AMD row
 * here. The host's (runtime.c) lists each local AMD row's index, its place
 * among the machine's AMD cards in card order. The container has the
 * render nodes of the app's own AMD GPUs alone, and ROCm numbers the GPUs
 * it can open in the kernel's order, so there the app's card of the
 * lowest index is device 0 (a single GPU: "0"): each row's entry is the
 * number of the app's AMD rows of a lower index. In row order, as on the
 * host, so a row's HIP ordinal is still the one its shim config gives it
 * (its place among the app's AMD rows, runtime.c).
 */
static char *ctr_hip_visible(const struct accel_daemon *d,
                             const struct app *a)
{
    char *s = xstrdup("");
    for (size_t i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        int idx = d->dinfo[a->rows[i].dev].index, below = 0;
        char *n;
        if (!d->ninfo[x->node].local || !amd_type(x->type))
            continue;
        for (size_t k = 0; k < a->nrows; k++) {
            const struct adm_device *y = &d->snap.devs[a->rows[k].dev];
            below += d->ninfo[y->node].local && amd_type(y->type) &&
                     d->dinfo[a->rows[k].dev].index < idx;
        }
        n = xasprintf("%s%s%d", s, s[0] ? "," : "", below);
        free(s);
        s = n;
    }
    return s;
}

/* How to make NVIDIA's spec, for a refusal. */
static char *no_cdi_cause(const char *uuid)
{
    return xasprintf("no CDI spec in /etc/cdi or /var/run/cdi lists "
                     "nvidia.com/gpu=%s, the GPU the app is bound to: generate "
                     "one with NVIDIA's Container Toolkit, `nvidia-ctk cdi "
                     "generate --output=/etc/cdi/nvidia.yaml` "
                     "(docs/containers.md)", uuid);
}

/* A new edits object of empty arrays env, deviceNodes, mounts, hooks. */
static json_t *edits_new(void)
{
    return json_pack("{s:[], s:[], s:[], s:[]}", "env", "deviceNodes",
                     "mounts", "hooks");
}

/*
 * The deviceNodes of an AMD or Intel GPU (drm_nodes) into *edits (made
 * when NULL), a node already there (AMD's kfd, for a second AMD GPU) not
 * twice. Only path and hostPath: the runtime takes the type and numbers
 * from the host node and, the spec giving no mode or owner, makes it
 * 0666 and root's in the container (runc), so whatever uid the container
 * runs as can open it. ACCEL_ENOTFOUND with *cause as drm_nodes.
 */
static enum accel_err cdi_drm(const struct accel_daemon *d, uint32_t dev,
                              json_t **edits, char **cause)
{
    struct ctr_node n[2];
    size_t k = 0;
    enum accel_err rc = drm_nodes(d, dev, n, &k, cause);

    if (rc != ACCEL_OK)
        return rc;
    if (*edits == NULL)
        *edits = edits_new();
    for (size_t i = 0; i < k; i++) {
        json_t *nodes = json_object_get(*edits, "deviceNodes"), *e;
        size_t j;
        bool have = false;
        json_array_foreach(nodes, j, e) {
            const char *p = json_string_value(json_object_get(e, "path"));
            have = have || (p != NULL && strcmp(p, n[i].ctr) == 0);
        }
        if (!have)
            json_array_append_new(nodes,
                                  json_pack("{s:s, s:s}", "path", n[i].ctr,
                                            "hostPath", n[i].host));
    }
    nodes_free(n, k);
    return ACCEL_OK;
}

json_t *runner_container_cdi_device(struct accel_daemon *d,
                                    const struct app *a,
                                    const struct ledger_device *devs,
                                    size_t n, char **out_config,
                                    char **cause)
{
    json_t *edits = NULL, *mounts, *env, *m, *out;
    char *vis = xstrdup("");
    size_t i;

    for (i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        char *v;
        if (amd_type(x->type) || intel_type(x->type)) {
            if (cdi_drm(d, a->rows[i].dev, &edits, cause) != ACCEL_OK) {
                json_decref(edits);
                free(vis);
                return NULL;
            }
            continue;
        }
        if (x->type != ACCEL_TYPE_NVIDIA)
            continue;
        if (!cdi_find("nvidia.com/gpu", x->id, &edits)) {
            *cause = no_cdi_cause(x->id);
            json_decref(edits);
            free(vis);
            return NULL;
        }
        v = xasprintf("%s%s%s", vis, vis[0] ? "," : "", x->id);
        free(vis);
        vis = v;
    }
    mounts = ctr_mounts(d, a->name, devs, n, out_config, cause);
    if (mounts == NULL) {
        json_decref(edits);
        free(vis);
        return NULL;
    }
    if (edits == NULL)
        edits = edits_new();
    env = json_object_get(edits, "env");
    json_array_append_new(env, json_string("LD_PRELOAD=" CTR_SHIM));
    json_array_append_new(env, json_string("ACCEL_CONFIG=" CTR_CONFIG));
    json_array_append_new(env, json_sprintf("ACCEL_APP=%s", a->name));
    json_array_append_new(env, json_sprintf("CUDA_VISIBLE_DEVICES=%s", vis));
    json_array_append_new(env, json_sprintf("NVIDIA_VISIBLE_DEVICES=%s", vis));
    free(vis);
    vis = ctr_hip_visible(d, a);
    if (vis[0])
        json_array_append_new(env,
                              json_sprintf("HIP_VISIBLE_DEVICES=%s", vis));
    json_array_foreach(mounts, i, m)
        json_array_append_new(
            json_object_get(edits, "mounts"),
            json_pack("{s:O, s:O, s:[s, s, s, s]}", "hostPath",
                      json_object_get(m, "hostPath"), "containerPath",
                      json_object_get(m, "containerPath"), "options",
                      json_is_true(json_object_get(m, "readOnly")) ? "ro"
                                                                   : "rw",
                      "nosuid", "nodev", "bind"));
    json_decref(mounts);
    { /* the hook that puts the container into the app's cgroups */
        char *dirs[1 + CGV1_COUNT], *hook = hook_path();
        size_t nd = cgroup_app_dirs(d->cg, a->name, dirs);
        if (hook != NULL && nd > 0) {
            json_t *args = json_pack("[s, s]", "accelctl", "cdi-hook");
            for (size_t k = 0; k < nd; k++)
                json_array_append_new(args, json_string(dirs[k]));
            json_array_append_new(
                json_object_get(edits, "hooks"),
                json_pack("{s:s, s:s, s:o}", "hookName", "createContainer",
                          "path", hook, "args", args));
        }
        for (size_t k = 0; k < nd; k++)
            free(dirs[k]);
        free(hook);
    }
    { /* no empty lists in what acceld writes */
        static const char *const keys[] = {"deviceNodes", "hooks", NULL};
        for (const char *const *k = keys; *k; k++)
            if (json_array_size(json_object_get(edits, *k)) == 0)
                json_object_del(edits, *k);
    }
    out = json_pack("{s:s, s:o}", "name", a->name, "containerEdits", edits);
    free(vis);
    return out;
}

/* ---- the podman run of an app ---- */

/* A growing argv (at most CTR_ARGS_MAX: the manifest's lists are
 * bounded far below it). */
struct args {
    char *v[CTR_ARGS_MAX + 1];
    size_t n;
};

static void add(struct args *a, char *s)
{
    if (a->n < CTR_ARGS_MAX)
        a->v[a->n++] = s;
    else
        free(s);
}

static void args_free(struct args *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    a->n = 0;
}

/* Is "KEY=..." one of the identity variables an image keeps its own of? */
static bool image_own(const char *e)
{
    static const char *const own[] = {"PATH=", "SHELL=", "HOME=", "USER=",
                                      "LOGNAME=", NULL};
    for (const char *const *o = own; *o; o++)
        if (strncmp(e, *o, strlen(*o)) == 0)
            return true;
    return false;
}

/* The app's variables with the container's paths: the shim first in
 * LD_PRELOAD, then run.preload, then the image's own (img, or NULL); its
 * config at CTR_CONFIG; HIP_VISIBLE_DEVICES the container's numbering
 * (hip, ctr_hip_visible). */
static void add_env(struct args *a, const struct runner_start *s,
                    const char *shim, const char *img, const char *hip)
{
    char **menv = s->a->m.run.env;

    for (char **e = s->env; e && *e; e++) {
        bool from_manifest = false;
        size_t kn = strcspn(*e, "=") + 1;
        for (char **m = menv; m && *m && !from_manifest; m++)
            from_manifest = strncmp(*m, *e, kn) == 0;
        if (image_own(*e) && !from_manifest)
            continue; /* the image's own PATH, HOME, ... */
        if (strncmp(*e, "ACCEL_CONFIG=", 13) == 0) {
            add(a, xstrdup("--env=ACCEL_CONFIG=" CTR_CONFIG));
        } else if (strncmp(*e, "HIP_VISIBLE_DEVICES=", 20) == 0) {
            add(a, xasprintf("--env=HIP_VISIBLE_DEVICES=%s", hip));
        } else if (strncmp(*e, "LD_PRELOAD=", 11) == 0) {
            char *v = xstrdup(shim ? CTR_SHIM : "");
            for (char **p = s->a->m.run.preload; p && *p; p++) {
                char *n = xasprintf("%s%s%s", v, v[0] ? ":" : "", *p);
                free(v);
                v = n;
            }
            if (img != NULL) {
                char *n = xasprintf("%s%s%s", v, v[0] ? ":" : "", img);
                free(v);
                v = n;
            }
            add(a, xasprintf("--env=LD_PRELOAD=%s", v));
            free(v);
        } else {
            add(a, xasprintf("--env=%s", *e));
        }
    }
}

/*
 * The container's copy of the shim config (its own paths), written (with
 * out_text NULL) or its text put in *out_text (caller frees; nothing
 * written), and what the container mounts for the shim: [{hostPath,
 * containerPath, readOnly}] of the shim, that config, the ledgers and the
 * broker sockets. NULL with *cause when the config cannot be written or
 * made.
 */
static json_t *ctr_mounts(struct accel_daemon *d, const char *app,
                          const struct ledger_device *host, size_t n,
                          char **out_text, char **cause)
{
    struct ledger_device devs[ADM_MAX_SELECTION];
    char ctr[ADM_MAX_SELECTION][256], card[ADM_MAX_SELECTION][256], *cfg;
    json_t *m = json_array();
    enum accel_err rc;

    for (size_t i = 0; i < n && i < ADM_MAX_SELECTION; i++) {
        const char *hp = host[i].path ? host[i].path : host[i].ts_socket;
        devs[i] = host[i];
        snprintf(ctr[i], sizeof ctr[i], "%s/%s",
                 host[i].path ? CTR_LEDGERS : CTR_BROKER,
                 hp ? strrchr(hp, '/') + 1 : "");
        if (host[i].path)
            devs[i].path = ctr[i];
        else if (host[i].ts_socket)
            devs[i].ts_socket = ctr[i];
        if (hp != NULL)
            json_array_append_new(m, json_pack("{s:s, s:s, s:b}", "hostPath",
                                               hp, "containerPath", ctr[i],
                                               "readOnly", 0));
        if (host[i].card != NULL) { /* a time-sliced card's shared count */
            snprintf(card[i], sizeof card[i], "%s/card-%s", CTR_BROKER,
                     strrchr(host[i].card, '/') + 1);
            devs[i].card = card[i];
            json_array_append_new(m, json_pack("{s:s, s:s, s:b}", "hostPath",
                                               host[i].card, "containerPath",
                                               card[i], "readOnly", 0));
        }
    }
    cfg = xasprintf("%s/run/apps/%s/" RUNTIME_CTR_CONFIG, d->cfg.data_dir,
                    app);
    rc = out_text != NULL ? ledger_config_text(app, devs, n, out_text)
                          : ledger_write_config(cfg, app, devs, n);
    if (rc != ACCEL_OK) {
        *cause = xasprintf("cannot %s %s: %s", out_text ? "make" : "write",
                           cfg, accel_strerror(rc));
        free(cfg);
        json_decref(m);
        return NULL;
    }
    json_array_append_new(m, json_pack("{s:s, s:s, s:b}", "hostPath", cfg,
                                       "containerPath", CTR_CONFIG,
                                       "readOnly", 1));
    json_array_append_new(m, json_pack("{s:s, s:s, s:b}", "hostPath",
                                       d->shim_path, "containerPath",
                                       CTR_SHIM, "readOnly", 1));
    free(cfg);
    return m;
}

/* The shim's mounts as podman's --mount flags. */
static enum accel_err add_shim(struct accel_daemon *d, struct args *a,
                               const struct runner_start *s, char **cause)
{
    json_t *m = ctr_mounts(d, s->a->name, s->devs, s->ndevs, NULL, cause),
           *e;
    size_t i;

    if (m == NULL)
        return ACCEL_ESYS;
    json_array_foreach(m, i, e)
        add(a, xasprintf("--mount=type=bind,src=%s,dst=%s%s",
                         json_string_value(json_object_get(e, "hostPath")),
                         json_string_value(json_object_get(e,
                                                           "containerPath")),
                         json_is_true(json_object_get(e, "readOnly"))
                             ? ",ro" : ""));
    json_decref(m);
    return ACCEL_OK;
}

/*
 * The bound GPUs: NVIDIA's CDI device of each local row, refused with how
 * to make the spec where none lists it; for an AMD or Intel row its device
 * nodes (drm_nodes: AMD's /dev/kfd and the GPU's render node, Intel's
 * render node), each --device=<host node>:<path>, and the nodes' groups
 * (--group-add, the host node's own gid: usually render or video, the
 * nodes 0660) so the owner's uid can open them. Not group 0: root's group
 * is never given to a container, a node of it must be open to others.
 */
static enum accel_err add_devices(struct accel_daemon *d, struct args *a,
                                  const struct app *app,
                                  const struct identity_run *who,
                                  char **cause)
{
    gid_t groups[2 * ADM_MAX_SELECTION];
    size_t ng = 0;
    bool kfd = false;

    for (size_t i = 0; i < app->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[app->rows[i].dev];
        struct ctr_node n[2];
        size_t k = 0;
        enum accel_err rc;
        if (!d->ninfo[x->node].local)
            continue;
        if (x->type == ACCEL_TYPE_NVIDIA) {
            if (!cdi_find("nvidia.com/gpu", x->id, NULL)) {
                *cause = no_cdi_cause(x->id);
                return ACCEL_ENOTFOUND;
            }
            add(a, xasprintf("--device=nvidia.com/gpu=%s", x->id));
            continue;
        }
        if (!amd_type(x->type) && !intel_type(x->type)) {
            *cause = xasprintf("a container app can be bound to nvidia, "
                               "amd, amd-gpu, intel and intel-gpu devices "
                               "only for now (its row on %s is %s)", x->id,
                               accel_type_name(x->type));
            return ACCEL_EINVAL;
        }
        rc = drm_nodes(d, app->rows[i].dev, n, &k, cause);
        if (rc != ACCEL_OK)
            return rc;
        for (size_t j = 0; j < k; j++) {
            bool seen = false;
            if (strcmp(n[j].ctr, CTR_KFD) == 0) {
                if (kfd)
                    continue; /* one kfd for every AMD GPU */
                kfd = true;
            }
            add(a, xasprintf("--device=%s:%s", n[j].host, n[j].ctr));
            for (size_t g = 0; g < ng; g++)
                seen = seen || groups[g] == n[j].gid;
            if (!seen && n[j].gid != 0 && n[j].gid != who->gid &&
                ng < sizeof groups / sizeof groups[0])
                groups[ng++] = n[j].gid;
        }
        nodes_free(n, k);
    }
    for (size_t g = 0; g < ng; g++)
        add(a, xasprintf("--group-add=%u", (unsigned)groups[g]));
    return ACCEL_OK;
}

/* A volume's source: a relative one is below the owner's home, made
 * there (as the owner) when missing. */
static char *volume_source(const struct runner_start *s, const char *src)
{
    char *full;
    if (src[0] == '/')
        return xstrdup(src);
    full = xasprintf("%s/%s", s->who->home, src);
    if (mkdir(full, 0700) == 0 && s->who->drop &&
        chown(full, s->who->uid, s->who->gid) != 0)
        log_warn("cannot give %s to uid %u: %s", full, (unsigned)s->who->uid,
                 strerror(errno));
    return full;
}

static void add_manifest(struct args *a, const struct runner_start *s)
{
    const struct manifest_container *c = &s->a->m.run.ctr;

    for (size_t i = 0; c->ports && c->ports[i]; i++)
        add(a, xasprintf("--publish=%s", c->ports[i]));
    for (size_t i = 0; i < c->nvolumes; i++) {
        char *src = volume_source(s, c->volumes[i].source);
        add(a, xasprintf("--mount=type=bind,src=%s,dst=%s%s", src,
                         c->volumes[i].target,
                         c->volumes[i].read_only ? ",ro" : ""));
        free(src);
    }
    if (c->shm_size)
        add(a, xasprintf("--shm-size=%llub", (unsigned long long)c->shm_size));
    if (c->privileged)
        add(a, xstrdup("--privileged"));
    if (c->network)
        add(a, xasprintf("--network=%s", c->network));
    if (c->host_pid)
        add(a, xstrdup("--pid=host"));
    for (size_t i = 0; c->cap_add && c->cap_add[i]; i++)
        add(a, xasprintf("--cap-add=%s", c->cap_add[i]));
    if (s->a->m.run.workdir)
        add(a, xasprintf("--workdir=%s", s->a->m.run.workdir));
    if (c->entrypoint) {
        json_t *ep = json_array();
        char *txt;
        for (char **p = c->entrypoint; *p; p++)
            json_array_append_new(ep, json_string(*p));
        txt = json_dumps(ep, JSON_COMPACT);
        add(a, xasprintf("--entrypoint=%s", txt));
        free(txt);
        json_decref(ep);
    }
}

/* The limits as podman's flags where v1 controllers hold them: the
 * container's v1 cgroups are made from the root of each hierarchy, not
 * under acceld's own v1 cgroup. */
static void add_limits(struct accel_daemon *d, struct args *a,
                       const struct cgroup_limits *lim)
{
    if (d->cg->memory.tier == CGROUP_V1 && lim->memory) {
        add(a, xasprintf("--memory=%llub", (unsigned long long)lim->memory));
        add(a, xasprintf("--memory-swap=%llub",
                         (unsigned long long)lim->memory));
    }
    if (d->cg->cpu.tier == CGROUP_V1 && lim->cpu_millis)
        add(a, xasprintf("--cpus=%llu.%03llu",
                         (unsigned long long)(lim->cpu_millis / 1000),
                         (unsigned long long)(lim->cpu_millis % 1000)));
    if (d->cg->pids.tier == CGROUP_V1)
        add(a, xasprintf("--pids-limit=%llu",
                         (unsigned long long)(lim->pids ? lim->pids
                                                        : CGROUP_PIDS_MAX_DEFAULT)));
}

static enum accel_err container_argv(struct accel_daemon *d, struct args *a,
                                     const struct runner_start *s,
                                     char **cause)
{
    struct app *app = s->a;
    const char *id = pin_str(d, app, "id");
    const char *rt = oci_runtime(d->cg, cause);
    char name[128], *parent = cgroup_app_rel(d->cg, app->name), *hip;
    enum accel_err rc = ACCEL_OK;

    if (rt == NULL || parent == NULL || d->cg->v2_dir == NULL) {
        if (rt != NULL)
            *cause = xasprintf("a container app needs the cgroup v2 "
                               "hierarchy (unified or hybrid) for its "
                               "containment, and this machine has none");
        free(parent);
        return ACCEL_EINVAL;
    }
    runner_container_name(d, app->name, name, sizeof name);
    add(a, xstrdup("podman"));
    add(a, xstrdup("run"));
    add(a, xasprintf("--name=%s", name));
    add(a, xstrdup("--replace"));
    add(a, xstrdup("--rm"));
    add(a, xasprintf("--label=accel.instance=%s", d->cg->instance));
    add(a, xasprintf("--label=accel.app=%s", app->name));
    add(a, xasprintf("--runtime=%s", rt));
    add(a, xstrdup("--cgroup-manager=cgroupfs"));
    add(a, xasprintf("--cgroup-parent=%s", parent));
    add(a, xstrdup("--cgroups=no-conmon"));
    add(a, xstrdup("--init"));
    add(a, xstrdup("--log-driver=passthrough"));
    /* a pinned image is run by its ID: it is here, and the one acceld
     * checked (or pulled) */
    add(a, xasprintf("--pull=%s", id != NULL ? "never" : app->m.run.ctr.pull));
    add(a, xasprintf("--user=%u:%u", (unsigned)s->who->uid,
                     (unsigned)s->who->gid));
    add(a, xstrdup("--cap-drop=all"));
    add(a, xstrdup("--security-opt=no-new-privileges"));
    add(a, xasprintf("--stop-timeout=%d", app->m.run.stop_timeout_s));
    add(a, ulimit_arg("nofile", RLIMIT_NOFILE, 0));
    add(a, ulimit_arg("nproc", RLIMIT_NPROC, pid_max()));
    add_limits(d, a, &s->lim);
    add_manifest(a, s);
    hip = ctr_hip_visible(d, app);
    add_env(a, s, s->cfg, pin_str(d, app, "preload"), hip);
    free(hip);
    if (s->cfg != NULL)
        rc = add_shim(d, a, s, cause);
    if (rc == ACCEL_OK)
        rc = add_devices(d, a, app, s->who, cause);
    add(a, xstrdup(id != NULL ? id : app->m.run.ctr.image));
    for (char **p = app->m.run.argv; p && *p; p++)
        add(a, xstrdup(*p));
    free(parent);
    return rc;
}

static enum accel_err container_start(struct accel_daemon *d,
                                      const struct runner_start *s,
                                      struct proc_handle *h, char **cause)
{
    struct args *a = xcalloc(1, sizeof(*a));
    enum accel_err rc = container_argv(d, a, s, cause);
    struct proc_spec spec = {
        .name = s->a->name,
        .env = podman_env,
        .inherit = proc_env_inherited,
        .log_path = s->log_path,
        .has_out_fd = s->out_fd >= 0,
        .out_fd = s->out_fd,
        .workdir = "/",
    };

    if (rc == ACCEL_OK) {
        spec.argv = a->v;
        rc = proc_start(&spec, h, cause);
    }
    args_free(a);
    free(a);
    return rc;
}

/*
 * The graceful step. A blocking stop runs podman stop -t: SIGTERM to the
 * container's init (which passes it on), SIGKILL after the timeout, the
 * exit recorded. The supervisor's does not wait: SIGTERM to every process
 * of the container (its init, catatonit, has a handler, so a signal from
 * the host reaches it and it passes it on), as to a host command's
 * processes: no podman process to start, which would hold the release
 * back by about 200 ms; runtime.c kills the cgroup after the timeout. Not
 * podman run's own signal proxy: it is not in place for a moment after the
 * container starts, and a SIGTERM then ends podman, not the container.
 * When no process of it is in the cgroup yet, podman stop, not waited for.
 */
static void container_term(struct accel_daemon *d, const char *app,
                           pid_t pid, uint64_t start, int timeout_s, bool wait)
{
    char name[128], t[32];
    char *argv[] = {"podman", "stop", "--ignore", "-t", t, name, NULL};

    (void)pid;
    (void)start;
    if (!wait && cgroup_app_signal_tree(d->cg, app, SIGTERM) > 0)
        return;
    runner_container_name(d, app, name, sizeof name);
    snprintf(t, sizeof t, "%d", timeout_s);
    if (wait)
        podman(argv, NULL, 0, (unsigned)timeout_s * 1000u + PODMAN_WAIT_MS);
    else
        podman_detached(argv);
}

/* The container removed, then every child cgroup in every hierarchy. A
 * podman run that acceld reaped after it exited by itself has removed its
 * container (--rm) before it exited; one that was killed, or that acceld
 * did not reap (started by an acceld before a restart), may not have. */
static void container_finish(struct accel_daemon *d, const char *app,
                             int leader_status)
{
    char name[128], out[512];
    char *argv[] = {"podman", "rm", "--force", "--ignore", "--time=0", name,
                    NULL};

    runner_container_name(d, app, name, sizeof name);
    if (!(leader_status >= 0 && WIFEXITED(leader_status) &&
          WEXITSTATUS(leader_status) < 125) &&
        podman(argv, out, sizeof out, PODMAN_WAIT_MS) != 0)
        log_warn("app %s: podman rm %s: %s", app, name, out);
    cgroup_app_remove_tree(d->cg, app);
}

const struct runner runner_container = {
    .kind = "container",
    .start = container_start,
    .term = container_term,
    .leader_counts = true,
    .finish = container_finish,
};

/* The images of the container apps seen last (a NULL-terminated list of
 * references acceld pulls: pull missing or always). Only the supervisor
 * thread uses it. */
static char **images_seen;

static bool listed(char **list, const char *ref)
{
    for (char **p = list; p && *p; p++)
        if (strcmp(*p, ref) == 0)
            return true;
    return false;
}

/* The image of a pin whose app is gone, when acceld pulled for it (pull
 * missing or always) and no app uses its reference (all): removed while
 * the reference still names the pinned image (not one tagged since), by a
 * child not waited for (one a container of someone else's uses stays).
 * An archive's image, which acceld loaded, goes by its ID when no app is
 * pinned to that ID (ids; an image tagged more than once stays). The
 * pin's file goes in any case. */
static void pin_gone(const char *path, char **all, char **ids)
{
    json_t *pin = json_load_file(path, 0, NULL);
    const char *ref = json_string_value(json_object_get(pin, "ref"));
    const char *id = json_string_value(json_object_get(pin, "id"));
    const char *pull = json_string_value(json_object_get(pin, "pull"));
    bool archive = ref != NULL && manifest_image_archive(ref);

    if (archive && id != NULL && !listed(all, ref) && !listed(ids, id)) {
        char *rmi[] = {"podman", "rmi", "--ignore", (char *)id, NULL};
        log_info("removing image %.12s, loaded from %s: no app uses it any "
                 "more", id, ref);
        podman_detached(rmi);
    } else if (ref != NULL && id != NULL && pull != NULL &&
        strcmp(pull, "never") != 0 && !listed(all, ref) && !archive) {
        char *inspect[] = {"podman", "image", "inspect", "--format",
                           "{{.Id}}", (char *)ref, NULL};
        char *rmi[] = {"podman", "rmi", "--ignore", (char *)ref, NULL};
        pid_t pid;
        log_info("removing image %s (if it is still %.12s): no app uses it "
                 "any more", ref, id);
        pid = fork();
        if (pid == 0) { /* no malloc here: acceld has threads */
            if (fork() == 0) {
                char now[128];
                _exit(podman(inspect, now, sizeof now, PODMAN_WAIT_MS) == 0 &&
                              strcmp(now, id) == 0
                          ? podman(rmi, NULL, 0, PODMAN_WAIT_MS)
                          : 0);
            }
            _exit(0);
        }
        if (pid > 0)
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
    }
    json_decref(pin);
    if (unlink(path) != 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", path, strerror(errno));
}

/* The pins of apps that are gone (pin_gone). */
static void pins_gone(struct accel_daemon *d, char **all, char **ids)
{
    char *dir = xasprintf("%s/images", d->cfg.data_dir);
    DIR *dp = opendir(dir);
    struct dirent *e;

    while (dp != NULL && (e = readdir(dp)) != NULL) {
        char *dot = strrchr(e->d_name, '.'), *name, *path;
        bool gone;
        if (dot == NULL || strcmp(dot, ".json") != 0)
            continue;
        name = xasprintf("%.*s", (int)(dot - e->d_name), e->d_name);
        pthread_mutex_lock(&d->lock);
        gone = state_app_find(d, name) == NULL;
        pthread_mutex_unlock(&d->lock);
        path = xasprintf("%s/%s", dir, e->d_name);
        if (gone)
            pin_gone(path, all, ids);
        free(path);
        free(name);
    }
    if (dp != NULL)
        closedir(dp);
    free(dir);
}

void runner_container_images(struct accel_daemon *d)
{
    char **now, **all, **ids;
    size_t n = 0, na = 0, ni = 0;

    pthread_mutex_lock(&d->lock);
    now = xcalloc(d->napps + 1, sizeof(char *));
    all = xcalloc(d->napps + 1, sizeof(char *));
    ids = xcalloc(d->napps + 1, sizeof(char *));
    for (size_t i = 0; i < d->napps; i++) {
        struct app *a = d->apps[i];
        const struct manifest_container *c = &a->m.run.ctr;
        if (c->image == NULL)
            continue;
        if (!listed(all, c->image))
            all[na++] = xstrdup(c->image);
        if (pin_str(d, a, "id") != NULL && !listed(ids, pin_str(d, a, "id")))
            ids[ni++] = xstrdup(pin_str(d, a, "id"));
        /* a pinned image goes with its pin (pins_gone) */
        if (strcmp(c->pull, "never") != 0 && !listed(now, c->image) &&
            pin_str(d, a, "id") == NULL)
            now[n++] = xstrdup(c->image);
    }
    pthread_mutex_unlock(&d->lock);
    for (char **p = images_seen; p && *p; p++) {
        if (!listed(all, *p)) { /* its last app is gone: so is the image */
            char *argv[] = {"podman", "rmi", "--ignore", *p, NULL};
            log_info("removing image %s: no app uses it any more", *p);
            podman_detached(argv);
        }
        free(*p);
    }
    free(images_seen);
    images_seen = now;
    pins_gone(d, all, ids);
    for (char **p = all; *p; p++)
        free(*p);
    free(all);
    for (char **p = ids; *p; p++)
        free(*p);
    free(ids);
}

size_t runner_container_sweep(struct accel_daemon *d)
{
    char filter[64], *out = xmalloc(65536), *line, *save = NULL;
    char *argv[] = {"podman", "ps", "--all", "--filter", filter, "--format",
                    "{{.Names}} {{index .Labels \"accel.app\"}}", NULL};
    size_t removed = 0;
    bool any = false;

    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps && !any; i++)
        any = d->apps[i]->m.run.ctr.image != NULL;
    pthread_mutex_unlock(&d->lock);
    snprintf(filter, sizeof filter, "label=accel.instance=%s",
             d->cg->instance);
    if (!any || !executable("podman") ||
        podman(argv, out, 65536, PODMAN_WAIT_MS) != 0) {
        free(out);
        return 0;
    }
    for (line = strtok_r(out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *app = strchr(line, ' ');
        struct app *a;
        bool keep;
        if (app == NULL)
            continue;
        *app++ = '\0';
        pthread_mutex_lock(&d->lock);
        a = state_app_find(d, app);
        keep = a != NULL && a->pid > 0 && a->m.run.ctr.image != NULL &&
               !state_app_remote(d, a);
        pthread_mutex_unlock(&d->lock);
        if (keep)
            continue; /* adopted: the supervisor watches it again */
        container_finish(d, app, -1);
        log_info("removed container %s: acceld runs no app %s with it",
                 line, app);
        removed++;
    }
    free(out);
    return removed;
}
