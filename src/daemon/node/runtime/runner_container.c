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
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "common/yamljson.h"
#include "daemon/log.h"
#include "daemon/node/proc/homepath.h"
#include "daemon/node/runtime/cdi.h"
#include "daemon/node/runtime/diskwatch.h"
#include "daemon/node/runtime/image.h"
#include "daemon/node/runtime/podman.h"
#include "daemon/node/runtime/pull.h"
#include "daemon/node/runtime/runner_int.h"

#define CTR_ARGS_MAX 1024

static void container_name(const struct accel_daemon *d, const char *app,
                           char *buf, size_t len)
{
    snprintf(buf, len, "accel-%s-%s", d->cg->instance, app);
}

/* The app's published ports as run.ports has them ("ip:host:container" or
 * with "/proto"): the page links to them (issue 47 item 6). */
static json_t *ports_json(const struct app *a)
{
    json_t *ports = json_array();

    for (char **p = a->m.run.ctr.ports; p != NULL && *p != NULL; p++)
        json_array_append_new(ports, json_string(*p));
    return ports;
}

static json_t *container_json(const struct accel_daemon *d,
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
    container_name(d, a->name, name, sizeof name);
    o = json_pack("{s:s, s:s, s:s, s:s}", "image", a->m.run.ctr.image,
                  "pullPolicy", a->m.run.ctr.pull, "name", name, "state",
                  state);
    if (image_pin_field(d, a, "id") != NULL) {
        json_object_set_new(o, "imageId",
                            json_string(image_pin_field(d, a, "id")));
        json_object_set_new(o, "digest",
                            json_string(image_pin_field(d, a, "digest")));
    }
    if (a->pull != NULL)
        json_object_set_new(o, "pull", json_deep_copy(a->pull));
    if (a->m.run.ctr.ports != NULL && a->m.run.ctr.ports[0] != NULL)
        json_object_set_new(o, "ports", ports_json(a));
    return o;
}

/* ---- what the machine allows ---- */

static bool executable(const char *name)
{
    static const char *const dirs[] = {
        "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
        "/sbin",           "/bin",           NULL
    };
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
    static const char *const own[] = { "PATH=", "SHELL=",   "HOME=",
                                       "USER=", "LOGNAME=", NULL };
    for (const char *const *o = own; *o; o++)
        if (strncmp(e, *o, strlen(*o)) == 0)
            return true;
    return false;
}

/* The app's variables with the container's paths: the shim first in
 * LD_PRELOAD, then run.preload, then the image's own (img, or NULL); its
 * config at CDI_CTR_CONFIG; HIP_VISIBLE_DEVICES the container's numbering
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
            add(a, xstrdup("--env=ACCEL_CONFIG=" CDI_CTR_CONFIG));
        } else if (strncmp(*e, "HIP_VISIBLE_DEVICES=", 20) == 0) {
            add(a, xasprintf("--env=HIP_VISIBLE_DEVICES=%s", hip));
        } else if (strncmp(*e, "LD_PRELOAD=", 11) == 0) {
            char *v = xstrdup(shim ? CDI_CTR_SHIM : "");
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

/* The shim's mounts as podman's --mount flags. */
static enum accel_err add_shim(struct accel_daemon *d, struct args *a,
                               const struct runner_start *s, char **cause)
{
    json_t *m = cdi_shim_mounts(d, s->a->name, s->devs, s->ndevs, NULL, cause),
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
 * nodes (cdi_drm_nodes: AMD's /dev/kfd and the GPU's render node, Intel's
 * render node), each --device=<host node>:<path>, and the nodes' groups
 * (--group-add, the host node's own gid: usually render or video, the
 * nodes 0660) so the owner's uid can open them. Not group 0: root's group
 * is never given to a container, a node of it must be open to others.
 */
static enum accel_err add_devices(struct accel_daemon *d, struct args *a,
                                  const struct app *app,
                                  const struct identity_run *who, char **cause)
{
    gid_t groups[2 * ADM_MAX_SELECTION];
    size_t ng = 0;
    bool kfd = false;

    for (size_t i = 0; i < app->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[app->rows[i].dev];
        struct cdi_node n[2];
        size_t k = 0;
        enum accel_err rc;
        if (!d->ninfo[x->node].local)
            continue;
        if (x->type == ACCEL_TYPE_NVIDIA) {
            if (!cdi_find("nvidia.com/gpu", x->id, NULL)) {
                *cause = cdi_missing_cause(x->id);
                return ACCEL_ENOTFOUND;
            }
            add(a, xasprintf("--device=nvidia.com/gpu=%s", x->id));
            continue;
        }
        if (!cdi_amd_type(x->type) && !cdi_intel_type(x->type)) {
            *cause = xasprintf("a container app can be bound to nvidia, "
                               "amd, amd-gpu, intel and intel-gpu devices "
                               "only for now (its row on %s is %s)", x->id,
                               accel_type_name(x->type));
            return ACCEL_EINVAL;
        }
        rc = cdi_drm_nodes(d, app->rows[i].dev, n, &k, cause);
        if (rc != ACCEL_OK)
            return rc;
        for (size_t j = 0; j < k; j++) {
            bool seen = false;
            if (strcmp(n[j].ctr, CDI_CTR_KFD) == 0) {
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
        cdi_nodes_free(n, k);
    }
    for (size_t g = 0; g < ng; g++)
        add(a, xasprintf("--group-add=%u", (unsigned)groups[g]));
    return ACCEL_OK;
}

/* A volume's source: one inside the owner's home (a relative one is
 * below it) resolved beneath the home without following a link, what is
 * missing made as the owner (homepath.c), at each start: a directory
 * replaced by a link since the install is refused too. An admin's source
 * outside every home is as given. *out_src (set only on success) is what
 * podman mounts. */
static enum accel_err volume_source(const struct runner_start *s, size_t i,
                                    char **out_src, char **cause)
{
    const char *src = s->a->m.run.ctr.volumes[i].source;
    struct homepath_owner o = { .home = s->who->home, .uid = s->who->uid,
                                .gid = s->who->gid, .drop = s->who->drop };
    char field[48];
    enum accel_err rc;

    if (src[0] == '/' && !manifest_inside_home(src, s->who->home)) {
        *out_src = xstrdup(src);
        return ACCEL_OK;
    }
    snprintf(field, sizeof field, "run.volumes[%zu].source", i);
    rc = homepath_resolve(&o, src, field, true, out_src, cause);
    if (rc == ACCEL_ENOTFOUND) {
        *cause = xasprintf("%s: %s could not be made as its owner", field,
                           src);
        rc = ACCEL_EFORBIDDEN;
    }
    return rc;
}

/* Is the owner of app an admin (lock held)? An owner acceld does not know
 * (a user removed meanwhile, or one of another node's store) is not. */
static bool owner_admin(struct accel_daemon *d, const struct app *app)
{
    const struct user_rec *u =
        app->owner != NULL ? state_user_find(d, app->owner) : NULL;
    return u != NULL && u->admin;
}

/*
 * What a member's container is held to beyond its manifest (SPEC 8.2.1,
 * issue 44): no more than a member's process.
 * - Disk: its root is read-only (--read-only, without podman's own tmpfs
 *   on /tmp, /var/tmp and /run: --read-only-tmpfs=false), and an image's
 *   VOLUME paths get no anonymous volume (--image-volume=ignore): every
 *   byte it writes lands in its owner's home, which the disk watch counts
 *   toward limitedDisk: its volumes, and /tmp and /var/tmp, both the
 *   home's CTR_TMP_DIR/<app> (made as the owner). /dev/shm is a tmpfs of
 *   shmSize (podman's 64 MiB by default), at most limitedMemory and
 *   limitedDisk: its pages are the app's memory, and the disk watch adds
 *   what it holds to the home's bytes (diskwatch.c).
 * - Network: a network namespace of its own, never a shared bridge:
 *   slirp4netns, which gives it the outside as a host process has it (not
 *   the host's loopback) and reaches it only through its published ports
 *   (on loopback, manifest_container_check); or none when the manifest
 *   says none (bridge and host are an admin's).
 */
#define CTR_TMP_DIR ".accel-tmp"
#define CTR_SHM_DEFAULT (64ULL << 20) /* podman's /dev/shm */

/* A member's /dev/shm: shmSize (podman's default without one), at most
 * limitedMemory (its pages are the app's memory) and limitedDisk (the
 * disk watch counts them too: past it, ENOSPC rather than a stop). */
static uint64_t member_shm(const struct runner_start *s)
{
    uint64_t shm = s->a->m.run.ctr.shm_size ? s->a->m.run.ctr.shm_size
                                            : CTR_SHM_DEFAULT;
    uint64_t disk = diskwatch_limit(s->a);

    if (s->lim.memory && shm > s->lim.memory)
        shm = s->lim.memory;
    return disk && shm > disk ? disk : shm;
}

/* Does a volume of c go at target (its text, a trailing '/' aside)? */
static bool volume_at(const struct manifest_container *c, const char *target)
{
    size_t n = strlen(target);

    for (size_t i = 0; i < c->nvolumes; i++) {
        const char *t = c->volumes[i].target;
        if (strncmp(t, target, n) == 0 &&
            t[n + strspn(t + n, "/")] == '\0')
            return true;
    }
    return false;
}

static enum accel_err add_member_rules(struct args *a,
                                       const struct runner_start *s,
                                       char **cause)
{
    const struct manifest_container *c = &s->a->m.run.ctr;
    struct homepath_owner o = { .home = s->who->home, .uid = s->who->uid,
                                .gid = s->who->gid, .drop = s->who->drop };
    char *rel = xasprintf("%s/%s", CTR_TMP_DIR, s->a->name), *tmp = NULL;
    enum accel_err rc;

    add(a, xstrdup("--read-only"));
    add(a, xstrdup("--read-only-tmpfs=false"));
    add(a, xstrdup("--image-volume=ignore"));
    rc = homepath_resolve(&o, rel, "the container's /tmp", true, &tmp, cause);
    free(rel);
    if (rc == ACCEL_ENOTFOUND) {
        *cause = xasprintf("the container's /tmp (%s/%s/%s in its owner's "
                           "home) could not be made as its owner",
                           s->who->home, CTR_TMP_DIR, s->a->name);
        rc = ACCEL_EFORBIDDEN;
    }
    if (rc != ACCEL_OK)
        return rc;
    /* not where a volume of the manifest goes (its own, in the home) */
    if (!volume_at(c, "/tmp"))
        add(a, xasprintf("--mount=type=bind,src=%s,dst=/tmp", tmp));
    if (!volume_at(c, "/var/tmp"))
        add(a, xasprintf("--mount=type=bind,src=%s,dst=/var/tmp", tmp));
    free(tmp);
    add(a, xasprintf("--shm-size=%llub", (unsigned long long)member_shm(s)));
    if (c->network != NULL && strcmp(c->network, "none") == 0) {
        add(a, xstrdup("--network=none"));
    } else if (!executable("slirp4netns")) {
        *cause = xasprintf("a member's container has a network of its own "
                           "through slirp4netns, which this machine lacks: "
                           "install it (apt-get install slirp4netns), or "
                           "give the app run.network: none");
        return ACCEL_EINVAL;
    } else {
        add(a, xstrdup("--network=slirp4netns:allow_host_loopback=false"));
    }
    return ACCEL_OK;
}

static enum accel_err add_manifest(struct args *a,
                                   const struct runner_start *s, bool member,
                                   char **cause)
{
    const struct manifest_container *c = &s->a->m.run.ctr;

    for (size_t i = 0; c->ports && c->ports[i]; i++)
        add(a, xasprintf("--publish=%s", c->ports[i]));
    for (size_t i = 0; i < c->nvolumes; i++) {
        char *src = NULL;
        enum accel_err rc = volume_source(s, i, &src, cause);
        if (rc != ACCEL_OK)
            return rc;
        add(a, xasprintf("--mount=type=bind,src=%s,dst=%s%s", src,
                         c->volumes[i].target,
                         c->volumes[i].read_only ? ",ro" : ""));
        free(src);
    }
    if (c->shm_size && !member) /* a member's: add_member_rules */
        add(a, xasprintf("--shm-size=%llub", (unsigned long long)c->shm_size));
    /* an admin's alone, at each start too (install refuses a member's) */
    if (c->privileged && !member)
        add(a, xstrdup("--privileged"));
    if (c->network && !member)
        add(a, xasprintf("--network=%s", c->network));
    if (c->host_pid && !member)
        add(a, xstrdup("--pid=host"));
    for (size_t i = 0; !member && c->cap_add && c->cap_add[i]; i++)
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
    return ACCEL_OK;
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
                                     const struct runner_start *s, char **cause)
{
    struct app *app = s->a;
    const char *id = image_pin_field(d, app, "id");
    const char *rt = oci_runtime(d->cg, cause);
    char name[128], *parent = cgroup_app_rel(d->cg, app->name), *hip;
    enum accel_err rc = ACCEL_OK;
    bool member;

    if (rt == NULL || parent == NULL || d->cg->v2_dir == NULL) {
        if (rt != NULL)
            *cause = xasprintf("a container app needs the cgroup v2 "
                               "hierarchy (unified or hybrid) for its "
                               "containment, and this machine has none");
        free(parent);
        return ACCEL_EINVAL;
    }
    container_name(d, app->name, name, sizeof name);
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
    member = !owner_admin(d, app);
    if (member)
        rc = add_member_rules(a, s, cause);
    if (rc == ACCEL_OK)
        rc = add_manifest(a, s, member, cause);
    hip = cdi_hip_visible(d, app);
    add_env(a, s, s->cfg, image_pin_field(d, app, "preload"), hip);
    free(hip);
    if (rc == ACCEL_OK && s->cfg != NULL)
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
static void container_term(struct accel_daemon *d, const char *app, pid_t pid,
                           uint64_t start, int timeout_s, bool wait)
{
    char name[128], t[32];
    char *argv[] = { "podman", "stop", "--ignore", "-t", t, name, NULL };

    (void)pid;
    (void)start;
    if (!wait && cgroup_app_signal_tree(d->cg, app, SIGTERM) > 0)
        return;
    container_name(d, app, name, sizeof name);
    snprintf(t, sizeof t, "%d", timeout_s);
    if (wait)
        podman_call(argv, NULL, 0,
                    (unsigned)timeout_s * 1000u + PODMAN_WAIT_MS);
    else
        podman_detached(argv);
}

/* The container removed, then every child cgroup in every hierarchy. A
 * podman run that acceld reaped after it exited by itself has removed its
 * container (--rm) before it exited; one that was killed, or that acceld
 * did not reap (started by an acceld before a restart), may not have. */
/* podman run's own failures (125: podman's error, 126: the command
 * cannot be run, 127: no such command) as opposed to the app's exit. */
static bool podman_failed(int leader_status)
{
    return leader_status >= 0 && WIFEXITED(leader_status) &&
           WEXITSTATUS(leader_status) >= 125 &&
           WEXITSTATUS(leader_status) <= 127;
}

/* The last line podman wrote to the app's log that says "Error" into why
 * (without a trailing newline), or "". podman has exited, so its output is
 * in the log pipe; the log writer drains it within milliseconds: wait for
 * it a little (at most PODMAN_ERROR_WAIT_MS). */
#define PODMAN_ERROR_WAIT_MS 500
static void podman_error_line(struct accel_daemon *d, const char *app,
                              char *why, size_t len)
{
    char *path = xasprintf("%s/logs/%s.log", d->cfg.data_dir, app);
    char buf[4096];

    why[0] = '\0';
    for (int waited = 0; why[0] == '\0' && waited <= PODMAN_ERROR_WAIT_MS;
         waited += 20) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t n = -1;
        if (fd >= 0) {
            off_t end = lseek(fd, 0, SEEK_END);
            off_t from = end > (off_t)sizeof buf - 1
                             ? end - (off_t)sizeof buf + 1
                             : 0;
            n = pread(fd, buf, sizeof buf - 1, from);
            close(fd);
        }
        if (n > 0) {
            char *line = NULL, *save = NULL;
            buf[n] = '\0';
            for (char *l = strtok_r(buf, "\n", &save); l;
                 l = strtok_r(NULL, "\n", &save))
                if (strstr(l, "Error") != NULL)
                    line = l;
            if (line != NULL) {
                util_strlcpy(why, line, len);
                break;
            }
        }
        nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
    }
    free(path);
}

static void container_finish(struct accel_daemon *d, const char *app,
                             int leader_status, char *why, size_t len)
{
    char name[128], out[512];
    char *argv[] = { "podman",   "rm", "--force", "--ignore",
                     "--time=0", name, NULL };

    if (why != NULL && len > 0) {
        why[0] = '\0';
        if (podman_failed(leader_status))
            podman_error_line(d, app, why, len);
    }
    container_name(d, app, name, sizeof name);
    if (!(leader_status >= 0 && WIFEXITED(leader_status) &&
          WEXITSTATUS(leader_status) < 125) &&
        podman_call(argv, out, sizeof out, PODMAN_WAIT_MS) != 0)
        log_warn("app %s: podman rm %s: %s", app, name, out);
    cgroup_app_remove_tree(d->cg, app);
}

static size_t container_sweep(struct accel_daemon *d)
{
    char filter[64], *out = xmalloc(65536), *line, *save = NULL;
    char *argv[] = { "podman",
                     "ps",
                     "--all",
                     "--filter",
                     filter,
                     "--format",
                     "{{.Names}} {{index .Labels \"accel.app\"}}",
                     NULL };
    size_t removed = 0;
    bool any = false;

    pull_sweep(d);
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->napps && !any; i++)
        any = d->apps[i]->m.run.ctr.image != NULL;
    pthread_mutex_unlock(&d->lock);
    snprintf(filter, sizeof filter, "label=accel.instance=%s",
             d->cg->instance);
    if (!any || !executable("podman") ||
        podman_call(argv, out, 65536, PODMAN_WAIT_MS) != 0) {
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
        container_finish(d, app, -1, NULL, 0);
        log_info("removed container %s: acceld runs no app %s with it",
                 line, app);
        removed++;
    }
    free(out);
    return removed;
}

/* vet: an image here is pinned (*out_found); with pull: never it must be
 * here; one acceld pulls (pull: always, an archive, or missing and not
 * here) is pulled by the first start (out_found NULL). */
static enum accel_err container_vet(const struct manifest *m, bool cluster,
                                    json_t **out_found, char **cause)
{
    json_t *pin = NULL;
    enum accel_err rc;

    *out_found = NULL;
    if (cluster || strcmp(m->run.ctr.pull, "always") == 0 ||
        manifest_image_archive(m->run.ctr.image))
        return ACCEL_OK;
    rc = image_pin(m->run.ctr.image, &pin, cause);
    if (rc == ACCEL_OK)
        *out_found = pin;
    if (rc != ACCEL_ENOTFOUND)
        return rc;
    if (strcmp(m->run.ctr.pull, "never") != 0)
        return ACCEL_OK;
    *cause = xasprintf("run.image: \"%s\" is not on this machine and "
                       "run.pull is never (pull it with podman pull, or set "
                       "pull: missing)", m->run.ctr.image);
    return ACCEL_EINVAL;
}

/* adopt: the pin vet found is a's before its first start (NULL: none, a
 * pin file left by an app of the same name goes). */
static void container_adopt(struct accel_daemon *d, struct app *a,
                            json_t *found)
{
    image_pin_set(d, a, found);
}

const struct runner runner_container = {
    .kind = "container",
    .start = container_start,
    .term = container_term,
    .leader_counts = true,
    .finish = container_finish,
    .vet = container_vet,
    .adopt = container_adopt,
    .look = pull_look,
    .prepare = pull_prepare,
    .cancel = pull_cancel,
    .sweep = container_sweep,
    .tick = image_sweep_unused,
    .json = container_json,
};
