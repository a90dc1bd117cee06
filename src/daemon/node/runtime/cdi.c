/* SPDX-License-Identifier: MIT */
/*
 * cdi.c: the GPUs and the shim as a container gets them (cdi.h, SPEC
 * 8.2.1): NVIDIA's CDI devices looked up in the machine's specs, an AMD or
 * Intel GPU's device nodes, the shim's mounts and its config's container
 * copy, and the CDI device of an external app for people's own containers.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/cdi.h"

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
#include <sys/xattr.h>
#include <unistd.h>

#include "common/util.h"
#include "common/yamljson.h"
#include "daemon/log.h"
#include "daemon/node/proc/cgroup.h"
#include "daemon/node/proc/identity.h"
#include "daemon/node/runtime/appsetup.h"
#include "daemon/node/runtime/engines.h"

#define CDI_FILE_MAX (4u << 20)

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

bool cdi_find(const char *kind, const char *name, json_t **edits)
{
    static const char *const dirs[] = { "/etc/cdi", "/var/run/cdi", NULL };
    static const char *const keys[] = { "env", "deviceNodes", "mounts", "hooks",
                                        NULL };
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
            util_strlcpy(p + 1, "accelctl",
                         sizeof self - (size_t)(p + 1 - self));
            if (access(self, X_OK) == 0)
                return xstrdup(self);
        }
    }
    return access("/usr/bin/accelctl", X_OK) == 0
               ? xstrdup("/usr/bin/accelctl") : NULL;
}

/* ---- an AMD or Intel GPU's device nodes ---- */

bool cdi_amd_type(enum accel_type t)
{
    return t == ACCEL_TYPE_AMD || t == ACCEL_TYPE_AMD_GPU;
}

bool cdi_intel_type(enum accel_type t)
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

void cdi_nodes_free(struct cdi_node *n, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(n[i].host);
        free(n[i].ctr);
    }
}

enum accel_err cdi_drm_nodes(const struct accel_daemon *d, uint32_t dev,
                             struct cdi_node out[2], size_t *out_n,
                             char **cause)
{
    const struct adm_device *x = &d->snap.devs[dev];
    const char *render = d->dinfo[dev].render;
    struct cdi_node n[2];
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
    if (cdi_amd_type(x->type)) {
        n[k].host = xasprintf("%s/kfd", dev_root(d));
        n[k].ctr = xstrdup(CDI_CTR_KFD);
        k++;
    }
    n[k].host = xasprintf("%s/dri/%s", dev_root(d), render);
    n[k].ctr = xasprintf(CDI_CTR_DRI "/%s", render);
    k++;
    for (size_t i = 0; i < k; i++) {
        rc = char_node(n[i].host, strcmp(n[i].ctr, CDI_CTR_KFD) == 0
                                      ? "AMD's compute interface (KFD)"
                                      : "its render node",
                       x->id, &n[i].gid, cause);
        if (rc != ACCEL_OK) {
            cdi_nodes_free(n, k);
            return rc;
        }
    }
    memcpy(out, n, k * sizeof n[0]);
    *out_n = k;
    return ACCEL_OK;
}

char *cdi_hip_visible(const struct accel_daemon *d, const struct app *a)
{
    char *s = xstrdup("");
    for (size_t i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        int idx = d->dinfo[a->rows[i].dev].index, below = 0;
        char *n;
        if (!d->ninfo[x->node].local || !cdi_amd_type(x->type))
            continue;
        for (size_t k = 0; k < a->nrows; k++) {
            const struct adm_device *y = &d->snap.devs[a->rows[k].dev];
            below += d->ninfo[y->node].local && cdi_amd_type(y->type) &&
                     d->dinfo[a->rows[k].dev].index < idx;
        }
        n = xasprintf("%s%s%d", s, s[0] ? "," : "", below);
        free(s);
        s = n;
    }
    return s;
}

char *cdi_missing_cause(const char *uuid)
{
    return xasprintf("no CDI spec in /etc/cdi or /var/run/cdi lists "
                     "nvidia.com/gpu=%s, the GPU the app is bound to: generate "
                     "one with NVIDIA's Container Toolkit, `nvidia-ctk cdi "
                     "generate --output=/etc/cdi/nvidia.yaml` "
                     "(docs/containers.md)",
                     uuid);
}

/* A new edits object of empty arrays env, deviceNodes, mounts, hooks. */
static json_t *edits_new(void)
{
    return json_pack("{s:[], s:[], s:[], s:[]}", "env", "deviceNodes",
                     "mounts", "hooks");
}

/*
 * The deviceNodes of an AMD or Intel GPU (cdi_drm_nodes) into *edits (made
 * when NULL), a node already there (AMD's kfd, for a second AMD GPU) not
 * twice. Only path and hostPath: the runtime takes the type and numbers
 * from the host node and, the spec giving no mode or owner, makes it
 * 0666 and root's in the container (runc), so whatever uid the container
 * runs as can open it. ACCEL_ENOTFOUND with *cause as cdi_drm_nodes.
 */
static enum accel_err cdi_drm(const struct accel_daemon *d, uint32_t dev,
                              json_t **edits, char **cause)
{
    struct cdi_node n[2];
    size_t k = 0;
    enum accel_err rc = cdi_drm_nodes(d, dev, n, &k, cause);

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
    cdi_nodes_free(n, k);
    return ACCEL_OK;
}

json_t *cdi_app_device(struct accel_daemon *d, const struct app *a,
                       const struct ledger_device *devs, size_t n,
                       char **out_config, char **cause)
{
    json_t *edits = NULL, *mounts, *env, *m, *out;
    char *vis = xstrdup("");
    size_t i;

    for (i = 0; i < a->nrows; i++) {
        const struct adm_device *x = &d->snap.devs[a->rows[i].dev];
        char *v;
        if (cdi_amd_type(x->type) || cdi_intel_type(x->type)) {
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
            *cause = cdi_missing_cause(x->id);
            json_decref(edits);
            free(vis);
            return NULL;
        }
        v = xasprintf("%s%s%s", vis, vis[0] ? "," : "", x->id);
        free(vis);
        vis = v;
    }
    mounts = cdi_shim_mounts(d, a->name, devs, n, out_config, cause);
    if (mounts == NULL) {
        json_decref(edits);
        free(vis);
        return NULL;
    }
    if (edits == NULL)
        edits = edits_new();
    env = json_object_get(edits, "env");
    json_array_append_new(env, json_string("LD_PRELOAD=" CDI_CTR_SHIM));
    json_array_append_new(env, json_string("ACCEL_CONFIG=" CDI_CTR_CONFIG));
    json_array_append_new(env, json_sprintf("ACCEL_APP=%s", a->name));
    json_array_append_new(env, json_sprintf("CUDA_VISIBLE_DEVICES=%s", vis));
    json_array_append_new(env, json_sprintf("NVIDIA_VISIBLE_DEVICES=%s", vis));
    free(vis);
    vis = cdi_hip_visible(d, a);
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
            char *rec = engines_record_dir(d, a->name), *top;
            top = xasprintf("%s/run/containers", d->cfg.data_dir);
            if (mkdir(top, 0700) != 0 && errno != EEXIST)
                log_warn("cannot make %s: %s", top, strerror(errno));
            free(top);
            /* where the hook writes the container's engine and ID, for a
             * stop through the engine (engines.c) */
            json_array_append_new(args, json_string("--record"));
            json_array_append_new(args, json_string(rec));
            free(rec);
            /* the install a container joins: a container made for an
             * app uninstalled never joins a later one of its name */
            json_array_append_new(args, json_string("--instance"));
            json_array_append_new(args, json_sprintf("%s@%lld", a->name,
                                                     (long long)a->created_ms));
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

json_t *cdi_shim_mounts(struct accel_daemon *d, const char *app,
                        const struct ledger_device *host, size_t n,
                        char **out_text, char **cause)
{
    struct ledger_device devs[ADM_MAX_SELECTION];
    char ctr[ADM_MAX_SELECTION][256], *cfg;
    json_t *m = json_array();
    enum accel_err rc;
    bool reclaim_mounted = false;

    for (size_t i = 0; i < n && i < ADM_MAX_SELECTION; i++) {
        const char *hp = host[i].path ? host[i].path : host[i].ts_socket;
        devs[i] = host[i];
        snprintf(ctr[i], sizeof ctr[i], "%s/%s",
                 host[i].path ? CDI_CTR_LEDGERS : CDI_CTR_BROKER,
                 hp ? strrchr(hp, '/') + 1 : "");
        if (host[i].path)
            devs[i].path = ctr[i];
        else if (host[i].ts_socket)
            devs[i].ts_socket = ctr[i];
        /* a broker's socket read-only: connect(2) needs no writable
         * mount, and a container's root cannot chmod or chown the host's
         * socket through a read-only one (a ledger must be read-write:
         * cdi_write holds it) */
        if (hp != NULL)
            json_array_append_new(m, json_pack("{s:s, s:s, s:b}", "hostPath",
                                               hp, "containerPath", ctr[i],
                                               "readOnly",
                                               host[i].path == NULL));
        /* elastic memory (SPEC 4.4): the socket, while acceld has one (a
         * mount of a path that is not there fails the container) */
        devs[i].reclaim = NULL;
        if (host[i].reclaim != NULL && access(host[i].reclaim, F_OK) == 0) {
            devs[i].reclaim = CDI_CTR_RECLAIM;
            if (!reclaim_mounted)
                json_array_append_new(
                    m, json_pack("{s:s, s:s, s:b}", "hostPath",
                                 host[i].reclaim, "containerPath",
                                 CDI_CTR_RECLAIM, "readOnly", 1));
            reclaim_mounted = true;
        }
        /* a time-sliced card's shared count: no file to mount, the
         * broker (its socket mounted above) hands the process a sealed
         * memfd; devs[i].card stays LEDGER_CARD_BROKER */
    }
    cfg = xasprintf("%s/run/apps/%s/" CDI_CTR_CONFIG_FILE, d->cfg.data_dir,
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
    /* the folder, not the file: a rewrite reaches the container (made
     * here when only the text was asked for: the mount needs it) */
    *strrchr(cfg, '/') = '\0';
    if (mkdir(cfg, 0755) != 0 && errno != EEXIST)
        log_warn("cannot make %s: %s", cfg, strerror(errno));
    json_array_append_new(m, json_pack("{s:s, s:s, s:b}", "hostPath", cfg,
                                       "containerPath", CDI_CTR_CONFIG_DIR,
                                       "readOnly", 1));
    json_array_append_new(m, json_pack("{s:s, s:s, s:b}", "hostPath",
                                       d->shim_path, "containerPath",
                                       CDI_CTR_SHIM, "readOnly", 1));
    free(cfg);
    return m;
}

/* ---- the spec of people's own containers (SPEC 8.2.1) ---- */

/* The last spec written (a rewrite only when it changes). One per process:
 * daemons sharing a process in a unit test would only rewrite more. */

bool cdi_app_here(struct accel_daemon *d, const struct app *a)
{
    if (manifest_runs(&a->m) || a->nrows == 0 || !appsetup_needs_shim(d, a))
        return false;
    for (size_t i = 0; i < a->nrows; i++)
        if (!appsetup_row_local(d, a, i))
            return false;
    return true;
}

/* text into a new file at path, root's and group gid's 0640 (group: else
 * acceld's, 0600), never through a link: 0, or -1 with errno. */
static int write_text(const char *path, const char *text, bool group,
                      gid_t gid)
{
    int fd;
    size_t len = strlen(text), done = 0;

    if (unlink(path) != 0 && errno != ENOENT)
        return -1;
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              0600);
    if (fd < 0)
        return -1;
    if (group && (fchown(fd, 0, gid) != 0 || fchmod(fd, 0640) != 0)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        done += (size_t)n;
    }
    return close(fd);
}

/* Where the spec goes: ACCEL_CDI_DIR, else /var/run/cdi on a machine that
 * uses CDI (it has /var/run/cdi or /etc/cdi), else nowhere. */
static const char *cdi_dir(void)
{
    const char *dir = getenv("ACCEL_CDI_DIR");
    if (dir != NULL && dir[0] == '/')
        return dir;
    if (access(CDI_DIR, F_OK) == 0 || access("/etc/cdi", F_OK) == 0)
        return CDI_DIR;
    return NULL;
}

/* An external app's files as the CDI refresh plans them (under d->lock)
 * and writes them (under d->files_lock alone): it owns all it needs. */
struct cdi_plan {
    char *app;
    struct appsetup_files f;
    char *key;       /* what the files' content follows: the config's text
                        and the container copy's */
    char *ctr_text;  /* the container's copy of the config, NULL = none */
    json_t *dev;     /* its CDI device, NULL = none */
    bool group;      /* its spec and config directory are root's and gid's
                        (acceld is root), else acceld's */
    gid_t gid;       /* the owner's group */
};

static void cdi_plan_free(struct cdi_plan *p)
{
    if (p == NULL)
        return;
    free(p->app);
    free(p->key);
    free(p->ctr_text);
    json_decref(p->dev);
    free(p);
}

/* The plan of a CDI app (lock held); NULL with *cause when its files
 * cannot be made. Its device is NULL (and *cause set) where NVIDIA's spec
 * lacks a bound GPU: the files are made all the same. */
static struct cdi_plan *cdi_plan_new(struct accel_daemon *d,
                                     const struct app *a, char **cause)
{
    struct cdi_plan *p = xcalloc(1, sizeof(*p));
    char *text = NULL;
    enum accel_err rc = appsetup_plan(d, a, &p->f);

    if (rc == ACCEL_OK)
        rc = ledger_config_text(a->name, p->f.devs, p->f.n, &text);
    if (rc != ACCEL_OK) {
        *cause = xasprintf("cannot prepare the memory quota of '%s': %s",
                           a->name, accel_strerror(rc));
        cdi_plan_free(p);
        return NULL;
    }
    p->app = xstrdup(a->name);
    p->group = d->uid_drop;
    p->gid = d->uid_drop ? (gid_t)identity_uid(d, a->owner) : 0;
    p->f.dir_group = p->group;
    p->f.dir_gid = p->gid;
    p->dev = cdi_app_device(d, a, p->f.devs, p->f.n, &p->ctr_text,
                            cause);
    p->key = xasprintf("%s--\n%s", text, p->ctr_text ? p->ctr_text : "");
    free(text);
    return p;
}

/* The identity of a file as written: a file replaced (a rename), removed
 * or, for a config, changed, no longer matches. */
struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;        /* configs only: 0 for the others, */
    int64_t mtime_ns;  /* which the app writes (ledgers, events) */
};

#define CDI_FILES (3 + ADM_MAX_SELECTION) /* files of an app's plan */

/* What the refresh last wrote for an app (d->written). */
struct cdi_written {
    char *app;
    char *key;                  /* its plan's key, NULL = write again */
    struct file_id ids[CDI_FILES]; /* its files' */
    size_t nids;
    /* the files its device mounts read-write (ledgers), held open for
     * writing, by path index: fd + 1, 0 = none (guard) */
    int held[CDI_FILES];
};

/* What the device mounts read-write of a file of a plan. */
enum cdi_shared { CDI_NOT_SHARED, CDI_SHARED_LEDGER };

/* The files of p: the config and the container's copy (their content
 * planned: content true), the events file and the ledgers; shared[i]:
 * whether the device mounts file i read-write (a ledger), and group[i]
 * its group as written. Caller frees paths[0..n). */
static size_t cdi_plan_paths(struct accel_daemon *d, const struct cdi_plan *p,
                             char **paths, bool *content,
                             enum cdi_shared *shared, gid_t *group)
{
    size_t n = 0;

    memset(shared, 0, CDI_FILES * sizeof(*shared));
    content[n] = true;
    paths[n++] = appsetup_config_path(d, p->app);
    if (p->ctr_text != NULL) {
        content[n] = true;
        paths[n++] = xasprintf("%s/run/apps/%s/" CDI_CTR_CONFIG_FILE,
                               d->cfg.data_dir, p->app);
    }
    content[n] = false;
    paths[n++] = appsetup_events_path(d, p->app);
    for (size_t i = 0; i < p->f.n; i++) {
        if (p->f.devs[i].path != NULL) { /* appsetup_write's group */
            content[n] = false;
            shared[n] = CDI_SHARED_LEDGER;
            group[n] = p->group ? p->gid : getegid();
            paths[n++] = xstrdup(p->f.devs[i].path);
        }
    }
    return n;
}

/* path's identity into *id: false when it is not there. */
static bool file_id_of(const char *path, bool content, struct file_id *id)
{
    struct stat st;

    memset(id, 0, sizeof(*id));
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    if (content) {
        id->size = st.st_size;
        id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 +
                       st.st_mtim.tv_nsec;
    }
    return true;
}

static bool file_id_eq(const struct file_id *x, const struct file_id *y)
{
    return x->dev == y->dev && x->ino == y->ino && x->size == y->size &&
           x->mtime_ns == y->mtime_ns;
}

/* The entry of app in d->written, or NULL (files_lock held). */
static struct cdi_written *written_find(struct accel_daemon *d,
                                            const char *app, size_t hint)
{
    if (hint < d->nwritten && d->written[hint].app != NULL &&
        strcmp(d->written[hint].app, app) == 0)
        return &d->written[hint];
    for (size_t i = 0; i < d->nwritten; i++)
        if (d->written[i].app != NULL && strcmp(d->written[i].app, app) == 0)
            return &d->written[i];
    return NULL;
}

void cdi_forget(struct accel_daemon *d, const char *app)
{
    struct cdi_written *w = written_find(d, app, 0);
    if (w != NULL) {
        free(w->key);
        w->key = NULL;
    }
}

/* w's held files closed. */
static void written_unhold(struct cdi_written *w)
{
    for (size_t i = 0; i < CDI_FILES; i++)
        if (w->held[i] > 0) {
            close(w->held[i] - 1);
            w->held[i] = 0;
        }
}

static void written_free(struct accel_daemon *d)
{
    for (size_t i = 0; i < d->nwritten; i++) {
        free(d->written[i].app);
        free(d->written[i].key);
        written_unhold(&d->written[i]);
    }
    free(d->written);
    d->written = NULL;
    d->nwritten = 0;
}

/*
 * A file the device mounts read-write into people's containers (a
 * ledger; a card's ledger is a sealed memfd, no file) guarded against
 * the container's root, which
 * owns a file of root's and has Docker's and rootful podman's default
 * capabilities (CHOWN, FOWNER, FSETID, SETFCAP): through the mount it can
 * chmod, chown or set capabilities on the host's file, and a member who
 * writes the ledger (its group may) would then run it as a set-user-ID
 * root program (SPEC 8.2.1: a container gets no more than a member's
 * process). acceld holds the file open for writing for as long as it is
 * in the device, so execve(2) of it fails (ETXTBSY) by any path or link,
 * whatever its mode; and each refresh (a second) puts back its mode
 * (0660), owner (acceld's), group (gid, as written), no file capability
 * and no ACL, so that what a container changed is undone. held: w->held[i].
 */
static void guard_shared(const char *path, int *held, gid_t gid)
{
    int fd = *held - 1;
    struct stat st, at;

    if (fd >= 0 && (fstat(fd, &st) != 0 || lstat(path, &at) != 0 ||
                    st.st_dev != at.st_dev || st.st_ino != at.st_ino)) {
        close(fd); /* removed or replaced: hold the one there now */
        fd = -1;
    }
    if (fd < 0)
        fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    *held = fd + 1;
    if (fd < 0 || fstat(fd, &st) != 0)
        return; /* not there: made again by the next refresh */
    if (st.st_uid != geteuid() || st.st_gid != gid)
        if (fchown(fd, geteuid(), gid) != 0)
            log_warn("cannot give %s back to uid %u gid %u: %s", path,
                     (unsigned)geteuid(), (unsigned)gid, strerror(errno));
    if (fremovexattr(fd, "security.capability") != 0 && errno != ENODATA &&
        errno != ENOTSUP)
        log_warn("cannot remove the file capability of %s: %s", path,
                 strerror(errno));
    if (fremovexattr(fd, "system.posix_acl_access") != 0 &&
        errno != ENODATA && errno != ENOTSUP)
        log_warn("cannot remove the ACL of %s: %s", path, strerror(errno));
    if ((fstat(fd, &st) != 0 || (st.st_mode & 07777) != 0660) &&
        fchmod(fd, 0660) != 0)
        log_warn("cannot make %s 0660: %s", path, strerror(errno));
}

/*
 * p's files made as planned where they are not already so (files_lock
 * held, d->lock not): w is what was last written for the app, and becomes
 * what is now. Nothing is written when p's key is w's and every file is
 * the one written then; a ledger is made only where it is missing or its
 * limit changes (ledger_create keeps an existing ledger's slots). False
 * when the files could not be made (said in the log).
 */
static bool cdi_write(struct accel_daemon *d, struct cdi_plan *p,
                      struct cdi_written *w)
{
    static const struct identity_run who = { .drop = false };
    char *paths[CDI_FILES];
    bool content[CDI_FILES], same, whole = true;
    enum cdi_shared shared[CDI_FILES];
    gid_t group[CDI_FILES];
    struct file_id ids[CDI_FILES];
    size_t n = cdi_plan_paths(d, p, paths, content, shared, group);
    enum accel_err rc = ACCEL_OK;

    same = w->key != NULL && strcmp(w->key, p->key) == 0 && w->nids == n;
    for (size_t i = 0; i < n && same; i++)
        same = file_id_of(paths[i], content[i], &ids[i]) &&
               file_id_eq(&ids[i], &w->ids[i]);
    if (!same) {
        free(w->key);
        w->key = NULL;
        rc = appsetup_write(d, p->app, &who, &p->f);
        if (rc == ACCEL_OK && p->ctr_text != NULL)
            rc = ledger_write_text(paths[1], p->ctr_text);
        if (rc != ACCEL_OK)
            log_warn("app %s: cannot prepare the memory quota of '%s': %s",
                     p->app, p->app, accel_strerror(rc));
        for (size_t i = 0; i < n && rc == ACCEL_OK && whole; i++)
            if (!file_id_of(paths[i], content[i], &w->ids[i]))
                whole = false;
        if (rc == ACCEL_OK && whole) { /* else made again next time */
            w->key = p->key;
            p->key = NULL;
            w->nids = n;
        }
    }
    for (size_t i = 0; i < CDI_FILES; i++) /* guarded, or let go */
        if (i < n && shared[i] != CDI_NOT_SHARED && rc == ACCEL_OK)
            guard_shared(paths[i], &w->held[i], group[i]);
        else if (w->held[i] > 0) {
            close(w->held[i] - 1);
            w->held[i] = 0;
        }
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    return rc == ACCEL_OK;
}

/* d->written becomes the entries of plans[0..n), in that order, each one
 * kept from before where its app had one (files_lock held). */
static void written_follow(struct accel_daemon *d, struct cdi_plan **plans,
                           size_t n)
{
    struct cdi_written *v = xcalloc(n ? n : 1, sizeof(*v));

    for (size_t i = 0; i < n; i++) {
        struct cdi_written *w = written_find(d, plans[i]->app, i);
        if (w != NULL) {
            v[i] = *w;
            w->app = NULL; /* moved */
            w->key = NULL;
            memset(w->held, 0, sizeof w->held);
        } else {
            v[i].app = xstrdup(plans[i]->app);
        }
    }
    written_free(d);
    d->written = v;
    d->nwritten = n;
}

/* The spec file of an app's device: <dir>/accel-<instance>-<app>.json
 * (caller frees). */
static char *spec_path(const struct accel_daemon *d, const char *dir,
                       const char *app)
{
    return xasprintf("%s/accel-%s-%s.json", dir, d->cg->instance, app);
}

/* Is path a file (not a link) holding text, of the mode and owners that
 * write_text gives it? */
static bool spec_current(const char *path, const char *text, bool group,
                         gid_t gid)
{
    size_t len = strlen(text);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    char *buf;
    bool ok;

    if (fd < 0)
        return false;
    ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
         (size_t)st.st_size == len &&
         (st.st_mode & 07777) == (group ? 0640u : 0600u) &&
         (!group || (st.st_uid == 0 && st.st_gid == gid));
    if (ok) {
        buf = xmalloc(len + 1);
        ok = read(fd, buf, len + 1) == (ssize_t)len &&
             memcmp(buf, text, len) == 0;
        free(buf);
    }
    close(fd);
    return ok;
}

/* p's device alone in its own spec file (files_lock held): root's and
 * the owner's group's, 0640 (the owner's podman reads it; no one else
 * learns the app or its paths), rewritten only when it differs, never
 * through a link (a new file renamed over whatever is there). */
static bool spec_write(struct accel_daemon *d, const char *dir,
                       const struct cdi_plan *p)
{
    /* the lowest version with what it uses: podman 4.3.1 reads up to 0.5.0 */
    json_t *spec = json_pack("{s:s, s:s, s:[O]}", "cdiVersion", "0.5.0",
                             "kind", "accel.dev/app", "devices", p->dev);
    char *text = json_dumps(spec, JSON_INDENT(1) | JSON_SORT_KEYS);
    char *path = spec_path(d, dir, p->app), *tmp = NULL;
    bool ok = true;

    json_decref(spec);
    if (!spec_current(path, text, p->group, p->gid)) {
        tmp = xasprintf("%s.tmp", path);
        appsetup_mkdirs(dir);
        if (write_text(tmp, text, p->group, p->gid) != 0 ||
            rename(tmp, path) != 0) {
            log_warn("cannot write %s: %s", path, strerror(errno));
            unlink(tmp);
            ok = false;
        }
    }
    free(tmp);
    free(path);
    free(text);
    return ok;
}

/* Every file of this instance in dir but the specs of kept[0..n) removed
 * (files_lock held): the spec of an app gone or no longer bound here, a
 * temporary file left, and the one spec file of every app that acceld
 * wrote before (accel-<instance>.json). */
static void spec_sweep(struct accel_daemon *d, const char *dir,
                       const char **kept, size_t n)
{
    char *prefix = xasprintf("accel-%s", d->cg->instance);
    size_t plen = strlen(prefix);
    DIR *dh = opendir(dir);
    struct dirent *e;

    while (dh != NULL && (e = readdir(dh)) != NULL) {
        const char *rest = e->d_name + plen;
        bool keep = false;
        if (strncmp(e->d_name, prefix, plen) != 0 ||
            (rest[0] != '-' && rest[0] != '.'))
            continue;
        for (size_t i = 0; i < n && !keep; i++) {
            size_t al = strlen(kept[i]);
            keep = rest[0] == '-' && strncmp(rest + 1, kept[i], al) == 0 &&
                   strcmp(rest + 1 + al, ".json") == 0;
        }
        if (!keep && unlinkat(dirfd(dh), e->d_name, 0) != 0 &&
            errno != ENOENT)
            log_warn("cannot remove %s/%s: %s", dir, e->d_name,
                     strerror(errno));
    }
    if (dh != NULL)
        closedir(dh);
    free(prefix);
}

/*
 * The device of a stopped external app (lock held): the app's name, and
 * the hook run with --stopped, which refuses a container with words that
 * say the app is stopped (issue 47 item 4; without it podman says only
 * that the name does not resolve, as for a mistyped one, and Docker's
 * accel-runc that no app of that name admits containers). NULL for any
 * other app, or where there is no accelctl to run as the hook.
 */
static struct cdi_plan *cdi_stopped_plan(struct accel_daemon *d,
                                         const struct app *a)
{
    struct cdi_plan *p;
    char *hook, *env;

    if (manifest_runs(&a->m) || a->nrows != 0 || a->state != APP_STOPPED)
        return NULL;
    hook = hook_path();
    if (hook == NULL)
        return NULL;
    p = xcalloc(1, sizeof(*p));
    p->app = xstrdup(a->name);
    p->group = d->uid_drop;
    p->gid = d->uid_drop ? (gid_t)identity_uid(d, a->owner) : 0;
    env = xasprintf("ACCEL_APP=%s", a->name);
    p->dev = json_pack("{s:s, s:{s:[s], s:[{s:s, s:s, s:[s, s, s, s]}]}}",
                       "name", a->name, "containerEdits", "env", env,
                       "hooks", "hookName", "createContainer", "path", hook,
                       "args", "accelctl", "cdi-hook", "--stopped", a->name);
    free(env);
    free(hook);
    return p;
}

void cdi_refresh(struct accel_daemon *d)
{
    const char *dir = cdi_dir();
    struct cdi_plan **plans, **stopped;
    const char **kept;
    size_t np = 0, ns = 0, nkept = 0;

    if (d->cg == NULL || d->shim_path == NULL || dir == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    plans = xcalloc(d->napps ? d->napps : 1, sizeof(*plans));
    stopped = xcalloc(d->napps ? d->napps : 1, sizeof(*stopped));
    for (size_t i = 0; i < d->napps; i++) {
        struct app *a = d->apps[i];
        struct cdi_plan *p;
        char *cause = NULL;
        if (!cdi_app_here(d, a)) {
            p = cdi_stopped_plan(d, a);
            if (p != NULL)
                stopped[ns++] = p;
            if (!manifest_runs(&a->m) &&
                cgroup_app_populated(d->cg, a->name) == 0)
                cgroup_app_remove_tree(d->cg, a->name); /* released */
            continue;
        }
        if (cgroup_app_populated(d->cg, a->name) < 0) { /* for the hook */
            struct cgroup_limits lim = appsetup_limits(a);
            if (cgroup_app_prepare(d->cg, a->name, &lim, &cause) !=
                ACCEL_OK) {
                log_warn("app %s: %s", a->name, cause);
                free(cause);
                cause = NULL;
            }
        }
        p = cdi_plan_new(d, a, &cause);
        if (p == NULL || p->dev == NULL)
            log_warn("app %s: no CDI device: %s", a->name, cause);
        free(cause);
        if (p != NULL)
            plans[np++] = p;
    }
    /* the files are written without d->lock: a release of one of these
     * apps (runtime_release_files, under d->lock) waits for files_lock,
     * so it removes what is written here, never the other way round */
    pthread_mutex_lock(&d->files_lock);
    pthread_mutex_unlock(&d->lock);
    written_follow(d, plans, np);
    kept = xcalloc(np + ns ? np + ns : 1, sizeof(*kept));
    for (size_t i = 0; i < np; i++) {
        if (cdi_write(d, plans[i], &d->written[i]) && plans[i]->dev != NULL &&
            spec_write(d, dir, plans[i]))
            kept[nkept++] = plans[i]->app;
    }
    for (size_t i = 0; i < ns; i++)
        if (spec_write(d, dir, stopped[i]))
            kept[nkept++] = stopped[i]->app;
    spec_sweep(d, dir, kept, nkept);
    free(kept);
    for (size_t i = 0; i < np; i++)
        cdi_plan_free(plans[i]);
    for (size_t i = 0; i < ns; i++)
        cdi_plan_free(stopped[i]);
    pthread_mutex_unlock(&d->files_lock);
    free(plans);
    free(stopped);
}

void cdi_remove(struct accel_daemon *d)
{
    const char *dir = cdi_dir();

    pthread_mutex_lock(&d->files_lock);
    written_free(d);
    if (d->cg != NULL && dir != NULL)
        spec_sweep(d, dir, NULL, 0);
    pthread_mutex_unlock(&d->files_lock);
}
