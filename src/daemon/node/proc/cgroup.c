/* SPDX-License-Identifier: MIT */
/*
 * cgroup.c: detection of the cgroup hierarchies this machine offers, an app
 * cgroup per app under accel.slice/<instance>, its limits, containment
 * (populated, procs, signal, kill) and membership of a pid. Linux only: it
 * reads /proc/self/mountinfo, /proc/self/cgroup and /proc/<pid>/cgroup and
 * writes the cgroup file systems. See docs/internals/runtime.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/node/proc/proc.h"

#define CG_FILE_MAX 65536      /* bytes of a cgroup file read */
#define CG_LINE_MAX 4096       /* a mountinfo line */
#define CG_FREEZE_WAIT_MS 200  /* bound on waiting for FROZEN */

static const char *const v1_names[CGV1_COUNT] = {"memory", "cpu", "pids",
                                                 "freezer"};

/* Where a hierarchy is mounted and where we are in it. */
struct hier {
    char mount[PATH_MAX];      /* mount point, "" when not mounted */
    char root[PATH_MAX];       /* the mount's root inside the hierarchy */
    char own[PATH_MAX];        /* our cgroup path (/proc/self/cgroup) */
    bool own_known;            /* a /proc/self/cgroup line named it */
};

/* ---- small file helpers ---- */

static int write_at(const char *dir, const char *file, const char *s)
{
    char *path = xasprintf("%s/%s", dir, file);
    int rc = util_write_small(path, s);
    int err = errno;
    free(path);
    errno = err;
    return rc;
}

static bool exists_at(const char *dir, const char *file)
{
    char *path = xasprintf("%s/%s", dir, file);
    bool ok = access(path, F_OK) == 0;
    free(path);
    return ok;
}

/* mkdir that accepts an existing directory. */
static int make_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    return -1;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* "a/b" joined, without doubling the slash when a is "/". */
static char *join(const char *a, const char *b)
{
    size_t n = strlen(a);
    return xasprintf("%s%s%s", a, n && a[n - 1] == '/' ? "" : "/", b);
}

/* ---- detection ---- */

/* Is word one of the comma-separated items of list? */
static bool has_item(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, word, n) == 0)
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

/* Split a mountinfo line: root (4), mount point (5), fs type and super
 * options after " - ". false when malformed. */
static bool mount_fields(char *line, char **root, char **mnt, char **fstype,
                         char **opts)
{
    char *save = NULL, *tok, *dash = strstr(line, " - ");
    int field = 0;

    if (dash == NULL)
        return false;
    *dash = '\0';
    for (tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ",
                                                              &save)) {
        field++;
        if (field == 4)
            *root = tok;
        else if (field == 5)
            *mnt = tok;
    }
    save = NULL;
    *fstype = strtok_r(dash + 3, " ", &save);
    strtok_r(NULL, " ", &save); /* source */
    *opts = strtok_r(NULL, " \n", &save);
    return field >= 5 && *fstype && *opts;
}

static void set_mount(struct hier *h, const char *mnt, const char *root)
{
    if (h->mount[0])
        return; /* the first mount wins */
    util_strlcpy(h->mount, mnt, sizeof h->mount);
    util_strlcpy(h->root, root, sizeof h->root);
}

static void read_mounts(struct hier *v2, struct hier *v1)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[CG_LINE_MAX];

    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        char *root = NULL, *mnt = NULL, *fstype = NULL, *opts = NULL;
        if (!mount_fields(line, &root, &mnt, &fstype, &opts))
            continue;
        if (strcmp(fstype, "cgroup2") == 0)
            set_mount(v2, mnt, root);
        else if (strcmp(fstype, "cgroup") == 0)
            for (int i = 0; i < CGV1_COUNT; i++)
                if (has_item(opts, v1_names[i]))
                    set_mount(&v1[i], mnt, root);
    }
    fclose(f);
}

static void set_own(struct hier *h, const char *path)
{
    util_strlcpy(h->own, path, sizeof h->own);
    h->own_known = true;
}

static void read_own(struct hier *v2, struct hier *v1)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[CG_LINE_MAX];

    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        c2[1 + strcspn(c2 + 1, "\n")] = '\0';
        if (strncmp(line, "0:", 2) == 0 && c1[1] == '\0')
            set_own(v2, c2 + 1);
        for (int i = 0; i < CGV1_COUNT && c1[1]; i++)
            if (has_item(c1 + 1, v1_names[i]))
                set_own(&v1[i], c2 + 1);
    }
    fclose(f);
}

/* The directory of our cgroup in h: the mount point plus our path minus
 * the mount's root (a bind mount of a sub-tree). */
static char *own_dir(const struct hier *h)
{
    const char *rel = h->own;
    size_t rn = strlen(h->root);
    if (strcmp(h->root, "/") != 0 && strncmp(rel, h->root, rn) == 0 &&
        (rel[rn] == '/' || rel[rn] == '\0'))
        rel += rn;
    return xasprintf("%s%s", h->mount, strcmp(rel, "/") == 0 ? "" : rel);
}

/* Make <base>/accel.slice/<instance>; the path or NULL. */
static char *make_slice(const char *base, const char *instance)
{
    char *slice = join(base, "accel.slice");
    char *inst = join(slice, instance);
    int ok = make_dir(slice) == 0 && make_dir(inst) == 0;
    free(slice);
    if (!ok) {
        free(inst);
        return NULL;
    }
    return inst;
}

/* Enable controller c from base down to <instance>; true when the
 * instance's subtree has it. */
static bool v2_enable(const char *base, const char *inst, const char *c)
{
    char *slice = join(base, "accel.slice"), buf[512], *plus = xasprintf(
                                                           "+%s", c);
    bool ok;

    write_at(base, "cgroup.subtree_control", plus);
    write_at(slice, "cgroup.subtree_control", plus);
    write_at(inst, "cgroup.subtree_control", plus);
    ok = false;
    {
        char *path = join(inst, "cgroup.subtree_control");
        if (util_read_small(path, buf, sizeof buf) > 0) {
            for (char *s = buf; *s; s++)
                if (*s == ' ' || *s == '\n')
                    *s = ',';
            ok = has_item(buf, c);
        }
        free(path);
    }
    free(plus);
    free(slice);
    return ok;
}

static const char *const v2_ctl[3] = {"memory", "cpu", "pids"};

/* Set up the v2 side under base; returns the controllers enabled (bits of
 * v2_ctl) or -1 when accel.slice cannot be made there. */
static int v2_setup(const char *base, const char *instance, char **out_inst)
{
    char *inst = make_slice(base, instance), buf[512], *avail;
    int bits = 0;

    *out_inst = inst;
    if (inst == NULL)
        return -1;
    avail = join(base, "cgroup.controllers");
    if (util_read_small(avail, buf, sizeof buf) < 0)
        buf[0] = '\0';
    free(avail);
    for (char *s = buf; *s; s++)
        if (*s == ' ' || *s == '\n')
            *s = ',';
    for (int i = 0; i < 3; i++)
        if (has_item(buf, v2_ctl[i]) && v2_enable(base, inst, v2_ctl[i]))
            bits |= 1 << i;
    return bits;
}

static struct cgroup_cap *cap_of(struct cgroup_sys *cs, int i)
{
    return i == 0 ? &cs->memory : i == 1 ? &cs->cpu : &cs->pids;
}

/* ---- acceld's own leaf (v2) ---- */

static ssize_t parse_procs(const char *buf, pid_t **out);

/* 1 when dir's cgroup.procs lists pid alone, 0 when not, -1 unreadable. */
static int procs_only(const char *dir, pid_t pid)
{
    char *path = join(dir, "cgroup.procs"), *buf = xmalloc(CG_FILE_MAX);
    pid_t *v = NULL;
    ssize_t n = -1;
    int rc = -1;

    if (util_read_small(path, buf, CG_FILE_MAX) >= 0) {
        n = parse_procs(buf, &v);
        rc = n == 1 && v[0] == pid;
    }
    free(v);
    free(buf);
    free(path);
    return rc;
}

int cgroup_leaf_move(const char *dir, pid_t pid, char **cause)
{
    char *leaf, val[32];
    int only = procs_only(dir, pid), made;

    if (only < 0) {
        *cause = xasprintf("cannot read %s/cgroup.procs: %s", dir,
                           strerror(errno));
        return -1;
    }
    if (only == 0)
        return 0;
    leaf = join(dir, CGROUP_LEAF);
    made = mkdir(leaf, 0755) == 0;
    snprintf(val, sizeof val, "%d", (int)pid);
    if ((!made && errno != EEXIST) || write_at(leaf, "cgroup.procs", val) < 0) {
        *cause = xasprintf("cannot move process %d into %s: %s", (int)pid,
                           leaf, strerror(errno));
        if (made)
            rmdir(leaf);
        free(leaf);
        return -1;
    }
    free(leaf);
    return 1;
}

/* Is the last component of the cgroup path own our leaf's name? */
static bool in_leaf(const char *own)
{
    const char *slash = strrchr(own, '/');
    return slash != NULL && slash != own &&
           strcmp(slash + 1, CGROUP_LEAF) == 0;
}

/* Does the v2 cgroup dir offer one of the controllers we use? */
static bool offers_controllers(const char *dir)
{
    char *path = join(dir, "cgroup.controllers"), buf[512];
    bool any = false;

    if (util_read_small(path, buf, sizeof buf) > 0) {
        for (char *s = buf; *s; s++)
            if (*s == ' ' || *s == '\n')
                *s = ',';
        for (int i = 0; i < 3; i++)
            any = any || has_item(buf, v2_ctl[i]);
    }
    free(path);
    return any;
}

/* Move acceld into <base>/CGROUP_LEAF when that lets base's children have
 * controllers (see cgroup.h); note what was done in cs->v2_leaf_note. */
static void leave_for_leaf(struct cgroup_sys *cs, const char *base)
{
    char *cause = NULL;
    int rc;
    /* delegated: we may make cgroups, move processes, give controllers */
    char *procs = join(base, "cgroup.procs");
    char *sub = join(base, "cgroup.subtree_control");
    bool delegated = access(base, W_OK) == 0 && access(procs, W_OK) == 0 &&
                     access(sub, W_OK) == 0;

    free(procs);
    free(sub);
    if (!delegated || !offers_controllers(base))
        return;
    if (getenv("INVOCATION_ID") != NULL) {
        cs->v2_leaf_note = xasprintf(
            "acceld stays in %s: systemd started it there, not in its leaf "
            "%s (add DelegateSubgroup=%s, systemd 254 or later)", base,
            CGROUP_LEAF, CGROUP_LEAF);
        return;
    }
    rc = cgroup_leaf_move(base, getpid(), &cause);
    if (rc > 0)
        cs->v2_leaf_note = xasprintf("acceld moved itself into %s/%s so "
                                     "that %s can give controllers to "
                                     "accel.slice", base, CGROUP_LEAF, base);
    else if (rc < 0)
        cs->v2_leaf_note = cause;
    else
        cs->v2_leaf_note = xasprintf("acceld stays in %s: other processes "
                                     "share it", base);
}

/* The v2 hierarchy: under our own cgroup, or under the hierarchy's root
 * when controllers can be delegated only there (a populated non-root
 * cgroup cannot enable them for its children). */
static void detect_v2(struct cgroup_sys *cs, const struct hier *hin)
{
    char *base, *inst = NULL, *root_inst = NULL;
    int bits, root_bits = -1;
    bool at_root = false;
    struct hier hb = *hin, *h = &hb;

    if (!h->mount[0] || !h->own_known)
        return;
    if (in_leaf(h->own)) /* our leaf already: its parent is ours */
        *strrchr(h->own, '/') = '\0';
    base = own_dir(h);
    if (strcmp(h->own, "/") != 0 && !in_leaf(hin->own))
        leave_for_leaf(cs, base);
    bits = v2_setup(base, cs->instance, &inst);
    if (bits != 7 && strcmp(h->own, "/") != 0) {
        root_bits = v2_setup(h->mount, cs->instance, &root_inst);
        if (root_bits > (bits < 0 ? -1 : bits) && root_inst) {
            if (inst)
                rmdir(inst);
            free(inst);
            inst = root_inst;
            root_inst = NULL;
            bits = root_bits;
            at_root = true;
        } else if (root_inst) {
            rmdir(root_inst);
        }
    }
    free(root_inst);
    if (inst == NULL || !exists_at(inst, "cgroup.procs")) {
        free(inst);
        free(base);
        return;
    }
    cs->v2_dir = inst;
    cs->v2_rel = xasprintf("%s/accel.slice/%s",
                           at_root || strcmp(h->own, "/") == 0 ? "" : h->own,
                           cs->instance);
    cs->v2_kill = exists_at(inst, "cgroup.kill");
    cs->containment.tier = CGROUP_V2;
    for (int i = 0; i < 3; i++)
        if (bits > 0 && (bits & (1 << i)))
            cap_of(cs, i)->tier = CGROUP_V2;
    free(base);
}

static void detect_v1(struct cgroup_sys *cs, const struct hier *v1, int i)
{
    char *base;
    if (!v1[i].mount[0] || !v1[i].own_known)
        return;
    base = own_dir(&v1[i]);
    cs->v1_dir[i] = make_slice(base, cs->instance);
    if (cs->v1_dir[i])
        cs->v1_rel[i] = xasprintf("%s/accel.slice/%s",
                                  strcmp(v1[i].own, "/") == 0 ? ""
                                                              : v1[i].own,
                                  cs->instance);
    free(base);
}

static void set_none(struct cgroup_cap *c, const char *what)
{
    if (c->tier != CGROUP_NONE)
        return;
    snprintf(c->reason, sizeof c->reason,
             "no writable cgroup %s controller: neither delegated in cgroup "
             "v2 nor mounted as cgroup v1", what);
}

/* FNV-1a 64 of s as 12 hex digits. */
static void instance_name(const char *s, char *out)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    snprintf(out, CGROUP_INSTANCE_LEN + 1, "%012llx",
             (unsigned long long)(h & 0xffffffffffffULL));
}

void cgroup_instance_of(const char *data_dir,
                        char out[CGROUP_INSTANCE_LEN + 1])
{
    char *real = realpath(data_dir, NULL);

    instance_name(real ? real : data_dir, out);
    free(real);
}

void cgroup_detect(struct cgroup_sys *cs, const char *data_dir)
{
    struct hier v2, v1[CGV1_COUNT];
    char *real = realpath(data_dir, NULL);

    memset(cs, 0, sizeof(*cs));
    memset(&v2, 0, sizeof v2);
    memset(v1, 0, sizeof v1);
    instance_name(real ? real : data_dir, cs->instance);
    free(real);
    read_mounts(&v2, v1);
    read_own(&v2, v1);
    detect_v2(cs, &v2);
    for (int i = 0; i < 3; i++)
        if (cap_of(cs, i)->tier == CGROUP_NONE) {
            detect_v1(cs, v1, i);
            if (cs->v1_dir[i])
                cap_of(cs, i)->tier = CGROUP_V1;
        }
    if (cs->containment.tier == CGROUP_NONE) {
        detect_v1(cs, v1, CGV1_FREEZER);
        if (cs->v1_dir[CGV1_FREEZER] || cs->v1_dir[CGV1_PIDS])
            cs->containment.tier = CGROUP_V1;
    }
    if (cs->containment.tier == CGROUP_NONE)
        snprintf(cs->containment.reason, sizeof cs->containment.reason,
                 "no writable cgroup hierarchy (v2, or v1 freezer/pids): an "
                 "app is its process group and ACCEL_APP tag only");
    set_none(&cs->memory, "memory");
    set_none(&cs->cpu, "cpu");
    set_none(&cs->pids, "pids");
    /* the directories were made to learn what works; they exist only while
     * an app needs them (cgroup_app_prepare makes them again), so an acceld
     * killed with no app running leaves nothing behind */
    cgroup_instance_remove(cs);
}

void cgroup_disable(struct cgroup_sys *cs, const char *data_dir,
                    const char *why)
{
    char *real = realpath(data_dir, NULL);

    memset(cs, 0, sizeof(*cs));
    instance_name(real ? real : data_dir, cs->instance);
    free(real);
    snprintf(cs->containment.reason, sizeof cs->containment.reason,
             "%s: an app is its process group and ACCEL_APP tag only", why);
    snprintf(cs->memory.reason, sizeof cs->memory.reason, "%s", why);
    snprintf(cs->cpu.reason, sizeof cs->cpu.reason, "%s", why);
    snprintf(cs->pids.reason, sizeof cs->pids.reason, "%s", why);
}

void cgroup_release(struct cgroup_sys *cs)
{
    if (cs == NULL)
        return;
    free(cs->v2_dir);
    free(cs->v2_rel);
    free(cs->v2_leaf_note);
    for (int i = 0; i < CGV1_COUNT; i++) {
        free(cs->v1_dir[i]);
        free(cs->v1_rel[i]);
    }
    memset(cs, 0, sizeof(*cs));
}

const char *cgroup_tier_name(enum cgroup_tier t)
{
    return t == CGROUP_V2 ? "cgroup-v2" : t == CGROUP_V1 ? "cgroup-v1"
                                                          : "none";
}

/* ---- per app ---- */

/* The directory of app in the v1 hierarchy i, or NULL (caller frees). */
static char *v1_app(const struct cgroup_sys *cs, int i, const char *app)
{
    return cs->v1_dir[i] ? join(cs->v1_dir[i], app) : NULL;
}

/* The containment directory of app (v2, else freezer, else pids). */
static char *box_dir(const struct cgroup_sys *cs, const char *app)
{
    if (cs->v2_dir)
        return join(cs->v2_dir, app);
    if (cs->v1_dir[CGV1_FREEZER])
        return join(cs->v1_dir[CGV1_FREEZER], app);
    return v1_app(cs, CGV1_PIDS, app);
}

/* Every directory of app in use, at most 1 + CGV1_COUNT; returns count. */
static size_t app_dirs(const struct cgroup_sys *cs, const char *app,
                       char **out)
{
    size_t n = 0;
    if (cs->v2_dir)
        out[n++] = join(cs->v2_dir, app);
    for (int i = 0; i < CGV1_COUNT; i++)
        if (cs->v1_dir[i])
            out[n++] = join(cs->v1_dir[i], app);
    return n;
}

static void dirs_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
}

static void write_limit(const char *dir, const char *file, const char *val)
{
    if (dir)
        write_at(dir, file, val);
}

static void limits_v2(const struct cgroup_sys *cs, const char *app,
                      const struct cgroup_limits *lim)
{
    char *dir = join(cs->v2_dir, app), val[64];

    if (cs->memory.tier == CGROUP_V2) {
        snprintf(val, sizeof val, "%llu", (unsigned long long)lim->memory);
        write_limit(dir, "memory.max", lim->memory ? val : "max");
        write_limit(dir, "memory.swap.max", lim->memory ? "0" : "max");
        write_limit(dir, "memory.oom.group", "1");
    }
    if (cs->cpu.tier == CGROUP_V2) {
        snprintf(val, sizeof val, "%llu %d",
                 (unsigned long long)(lim->cpu_millis * 100), /* us */
                 CGROUP_CPU_PERIOD_US);
        write_limit(dir, "cpu.max",
                    lim->cpu_millis ? val : "max 100000");
    }
    if (cs->pids.tier == CGROUP_V2) {
        snprintf(val, sizeof val, "%llu", (unsigned long long)(
                     lim->pids ? lim->pids : CGROUP_PIDS_MAX_DEFAULT));
        write_limit(dir, "pids.max", val);
    }
    free(dir);
}

static void limits_v1(const struct cgroup_sys *cs, const char *app,
                      const struct cgroup_limits *lim)
{
    char *mem = cs->memory.tier == CGROUP_V1 ? v1_app(cs, CGV1_MEMORY, app)
                                             : NULL;
    char *cpu = cs->cpu.tier == CGROUP_V1 ? v1_app(cs, CGV1_CPU, app) : NULL;
    char *pids = cs->pids.tier == CGROUP_V1 ? v1_app(cs, CGV1_PIDS, app)
                                            : NULL;
    char val[64];

    snprintf(val, sizeof val, "%llu", (unsigned long long)lim->memory);
    /* memsw must stay >= the limit: lift it, set the limit, lower it */
    write_limit(mem, "memory.memsw.limit_in_bytes", "-1");
    write_limit(mem, "memory.limit_in_bytes", lim->memory ? val : "-1");
    if (lim->memory)
        write_limit(mem, "memory.memsw.limit_in_bytes", val);
    snprintf(val, sizeof val, "%d", CGROUP_CPU_PERIOD_US);
    write_limit(cpu, "cpu.cfs_period_us", val);
    snprintf(val, sizeof val, "%llu",
             (unsigned long long)(lim->cpu_millis * 100));
    write_limit(cpu, "cpu.cfs_quota_us", lim->cpu_millis ? val : "-1");
    snprintf(val, sizeof val, "%llu", (unsigned long long)(
                 lim->pids ? lim->pids : CGROUP_PIDS_MAX_DEFAULT));
    write_limit(pids, "pids.max", val);
    free(mem);
    free(cpu);
    free(pids);
}

/* mkdir dir's parent (accel.slice) and dir (<instance>); 0 or -1. */
static int make_instance_dir(const char *dir)
{
    char *parent = xstrdup(dir);
    int rc;

    *strrchr(parent, '/') = '\0';
    rc = make_dir(parent) == 0 && make_dir(dir) == 0 ? 0 : -1;
    free(parent);
    return rc;
}

/* Make accel.slice/<instance> again where it is used, and give the v2
 * controllers we enforce with to its subtree (acceld's own cgroup, or the
 * root, kept them since cgroup_detect). */
static void ensure_instance(const struct cgroup_sys *cs)
{
    if (cs->v2_dir && make_instance_dir(cs->v2_dir) == 0) {
        char *slice = xstrdup(cs->v2_dir);
        *strrchr(slice, '/') = '\0';
        for (int i = 0; i < 3; i++) {
            const struct cgroup_cap *c = i == 0 ? &cs->memory
                                         : i == 1 ? &cs->cpu : &cs->pids;
            char *plus = xasprintf("+%s", v2_ctl[i]);
            if (c->tier == CGROUP_V2) {
                write_at(slice, "cgroup.subtree_control", plus);
                write_at(cs->v2_dir, "cgroup.subtree_control", plus);
            }
            free(plus);
        }
        free(slice);
    }
    for (int i = 0; i < CGV1_COUNT; i++)
        if (cs->v1_dir[i])
            make_instance_dir(cs->v1_dir[i]);
}

/* Make every directory of app; a concurrent removal of an empty
 * accel.slice/<instance> (another app of ours, or another acceld's last
 * app) may take a parent away between two mkdirs: then again. */
static int make_app_dirs(const struct cgroup_sys *cs, char **dirs, size_t n,
                         size_t *failed)
{
    for (int round = 0; round < 5; round++) {
        size_t i = 0;
        ensure_instance(cs);
        while (i < n && make_dir(dirs[i]) == 0)
            i++;
        if (i == n)
            return 0;
        *failed = i;
        if (errno != ENOENT)
            break;
    }
    return -1;
}

enum accel_err cgroup_app_prepare(const struct cgroup_sys *cs, const char *app,
                                  const struct cgroup_limits *lim,
                                  char **cause)
{
    char *dirs[1 + CGV1_COUNT];
    size_t n, bad = 0;

    if (cs->containment.tier == CGROUP_NONE)
        return ACCEL_OK;
    if (cgroup_app_populated(cs, app) == 1) {
        char *box = box_dir(cs, app);
        *cause = xasprintf("cannot start '%s': its cgroup %s still holds "
                           "processes of a previous run", app, box);
        free(box);
        return ACCEL_EBUSY;
    }
    n = app_dirs(cs, app, dirs);
    if (make_app_dirs(cs, dirs, n, &bad) < 0) {
        *cause = xasprintf("cannot create the cgroup %s of '%s': %s",
                           dirs[bad], app, strerror(errno));
        dirs_free(dirs, n);
        return ACCEL_ESYS;
    }
    dirs_free(dirs, n);
    if (cs->v2_dir)
        limits_v2(cs, app, lim);
    limits_v1(cs, app, lim);
    return ACCEL_OK;
}

int cgroup_app_attach(const struct cgroup_sys *cs, const char *app, pid_t pid,
                      char **cause)
{
    char *dirs[1 + CGV1_COUNT], val[32];
    size_t n = app_dirs(cs, app, dirs);
    int rc = 0;

    snprintf(val, sizeof val, "%d", (int)pid);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (write_at(dirs[i], "cgroup.procs", val) < 0) {
            *cause = xasprintf("cannot place '%s' in its cgroup %s: %s", app,
                               dirs[i], strerror(errno));
            rc = -1;
        }
    }
    dirs_free(dirs, n);
    return rc;
}

static ssize_t parse_procs(const char *buf, pid_t **out)
{
    size_t n = 0;
    *out = NULL;
    for (const char *p = buf; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (v > 0) {
            *out = xrealloc(*out, (n + 1) * sizeof(**out));
            (*out)[n++] = (pid_t)v;
        }
        p = end;
        while (*p == '\n' || *p == ' ')
            p++;
    }
    return (ssize_t)n;
}

ssize_t cgroup_app_procs(const struct cgroup_sys *cs, const char *app,
                         pid_t **out)
{
    char *dir = box_dir(cs, app), *path, *buf;
    ssize_t n = -1;

    *out = NULL;
    if (dir == NULL)
        return -1;
    path = join(dir, "cgroup.procs");
    buf = xmalloc(CG_FILE_MAX);
    if (util_read_small(path, buf, CG_FILE_MAX) >= 0)
        n = parse_procs(buf, out);
    free(buf);
    free(path);
    free(dir);
    return n;
}

int cgroup_app_populated(const struct cgroup_sys *cs, const char *app)
{
    char buf[256], *path, *p;
    pid_t *v = NULL;
    ssize_t n;

    if (cs->v2_dir == NULL) {
        n = cgroup_app_procs(cs, app, &v);
        free(v);
        return n < 0 ? -1 : n > 0;
    }
    path = xasprintf("%s/%s/cgroup.events", cs->v2_dir, app);
    n = util_read_small(path, buf, sizeof buf);
    free(path);
    if (n < 0)
        return -1;
    p = strstr(buf, "populated ");
    return p != NULL && p[10] == '1';
}

size_t cgroup_app_signal(const struct cgroup_sys *cs, const char *app,
                         int sig)
{
    pid_t *v = NULL;
    ssize_t n = cgroup_app_procs(cs, app, &v);
    size_t sent = 0;

    for (ssize_t i = 0; i < n; i++)
        sent += kill(v[i], sig) == 0;
    free(v);
    return sent;
}

/* sig to every process of dir and of the cgroups below it. */
static size_t signal_tree(const char *dir, int sig, int depth)
{
    char *path = join(dir, "cgroup.procs"), *buf = xmalloc(CG_FILE_MAX);
    pid_t *v = NULL;
    ssize_t n = util_read_small(path, buf, CG_FILE_MAX) >= 0
                    ? parse_procs(buf, &v) : 0;
    DIR *dp = depth < 16 ? opendir(dir) : NULL;
    struct dirent *e;
    size_t sent = 0;

    for (ssize_t i = 0; i < n; i++)
        sent += kill(v[i], sig) == 0;
    free(v);
    free(buf);
    free(path);
    while (dp != NULL && (e = readdir(dp)) != NULL) {
        char *sub;
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        sub = join(dir, e->d_name);
        sent += signal_tree(sub, sig, depth + 1);
        free(sub);
    }
    if (dp != NULL)
        closedir(dp);
    return sent;
}

size_t cgroup_app_signal_tree(const struct cgroup_sys *cs, const char *app,
                              int sig)
{
    char *dir = box_dir(cs, app);
    size_t sent = dir ? signal_tree(dir, sig, 0) : 0;
    free(dir);
    return sent;
}

/* v1: freeze so nothing forks past the kill, SIGKILL all, thaw. */
static void kill_frozen(const struct cgroup_sys *cs, const char *app)
{
    char *dir = join(cs->v1_dir[CGV1_FREEZER], app), *state, buf[64];
    uint64_t deadline = util_now_ns() + CG_FREEZE_WAIT_MS * 1000000ULL;

    state = join(dir, "freezer.state");
    if (util_write_small(state, "FROZEN") == 0)
        while (util_read_small(state, buf, sizeof buf) > 0 &&
               strncmp(buf, "FROZEN", 6) != 0 && util_now_ns() < deadline)
            sleep_ms(5);
    cgroup_app_signal(cs, app, SIGKILL);
    util_write_small(state, "THAWED");
    free(state);
    free(dir);
}

void cgroup_app_kill(const struct cgroup_sys *cs, const char *app)
{
    if (cs->v2_dir && cs->v2_kill) {
        char *dir = join(cs->v2_dir, app);
        int rc = write_at(dir, "cgroup.kill", "1");
        free(dir);
        if (rc == 0)
            return;
    }
    if (cs->v2_dir == NULL && cs->v1_dir[CGV1_FREEZER]) {
        kill_frozen(cs, app);
        return;
    }
    for (int round = 0; round < 3; round++)
        if (cgroup_app_signal(cs, app, SIGKILL) == 0)
            break;
}

/* The number after "key " in a "key value" file, 0 when absent. */
static uint64_t keyed_value(const char *path, const char *key)
{
    char buf[2048];
    size_t kn = strlen(key);

    if (util_read_small(path, buf, sizeof buf) <= 0)
        return 0;
    for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, key, kn) == 0 && p[kn] == ' ')
            return strtoull(p + kn + 1, NULL, 10);
    return 0;
}

uint64_t cgroup_app_oom_kills(const struct cgroup_sys *cs, const char *app)
{
    char *path = NULL;
    uint64_t v = 0;

    if (cs->memory.tier == CGROUP_V2)
        path = xasprintf("%s/%s/memory.events", cs->v2_dir, app);
    else if (cs->memory.tier == CGROUP_V1)
        path = xasprintf("%s/%s/memory.oom_control",
                         cs->v1_dir[CGV1_MEMORY], app);
    if (path)
        v = keyed_value(path, "oom_kill");
    free(path);
    return v;
}

/* rmdir dir, then its parent accel.slice (fails quietly while in use). */
static void remove_instance(const char *dir);

/* The instance and accel.slice above an app's directory, when empty. */
static void remove_instance_of(const char *app_dir)
{
    char *inst = xstrdup(app_dir);
    *strrchr(inst, '/') = '\0';
    remove_instance(inst);
    free(inst);
}

size_t cgroup_app_dirs(const struct cgroup_sys *cs, const char *app,
                       char **out)
{
    return app_dirs(cs, app, out);
}

char *cgroup_app_rel(const struct cgroup_sys *cs, const char *app)
{
    if (cs->v2_rel == NULL)
        return NULL;
    return join(cs->v2_rel, app);
}

/* rmdir dir's sub-directories depth-first, then dir (quietly: a cgroup
 * that still holds a process stays). */
static void rmdir_tree(const char *dir, int depth)
{
    DIR *dp = depth < 16 ? opendir(dir) : NULL;
    struct dirent *e;

    while (dp != NULL && (e = readdir(dp)) != NULL) {
        char *sub;
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        sub = join(dir, e->d_name);
        rmdir_tree(sub, depth + 1);
        free(sub);
    }
    if (dp != NULL)
        closedir(dp);
    rmdir(dir);
}

/* rel in every mounted hierarchy (those acceld does not use included:
 * a runtime such as runc makes the path in each), then the instance and
 * accel.slice above it when they are empty. */
static void remove_everywhere(const char *rel)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[CG_LINE_MAX];

    while (f != NULL && fgets(line, sizeof line, f)) {
        char *root = NULL, *mnt = NULL, *fstype = NULL, *opts = NULL, *dir;
        size_t rn;
        if (!mount_fields(line, &root, &mnt, &fstype, &opts) ||
            (strcmp(fstype, "cgroup2") != 0 && strcmp(fstype, "cgroup") != 0))
            continue;
        rn = strcmp(root, "/") == 0 ? 0 : strlen(root);
        if (strncmp(rel, root, rn) != 0 || (rn && rel[rn] != '/'))
            continue;
        dir = join(mnt, rel + rn + (rel[rn] == '/'));
        rmdir_tree(dir, 0);
        remove_instance_of(dir);
        free(dir);
    }
    if (f != NULL)
        fclose(f);
}

void cgroup_app_remove_tree(const struct cgroup_sys *cs, const char *app)
{
    char *dirs[1 + CGV1_COUNT], *rel = cgroup_app_rel(cs, app);
    size_t n = app_dirs(cs, app, dirs);

    for (size_t i = 0; i < n; i++)
        rmdir_tree(dirs[i], 0);
    dirs_free(dirs, n);
    if (rel != NULL)
        remove_everywhere(rel);
    free(rel);
    cgroup_app_remove(cs, app);
}

void cgroup_app_remove(const struct cgroup_sys *cs, const char *app)
{
    char *dirs[1 + CGV1_COUNT];
    size_t n = app_dirs(cs, app, dirs);
    for (size_t i = 0; i < n; i++)
        rmdir(dirs[i]);
    dirs_free(dirs, n);
    cgroup_instance_remove(cs); /* when it was the last app's */
}

/* rmdir dir, then its parent accel.slice (fails quietly while in use). */
static void remove_instance(const char *dir)
{
    char *parent;
    if (dir == NULL || rmdir(dir) < 0)
        return;
    parent = xstrdup(dir);
    *strrchr(parent, '/') = '\0';
    rmdir(parent);
    free(parent);
}

void cgroup_instance_remove(const struct cgroup_sys *cs)
{
    remove_instance(cs->v2_dir);
    for (int i = 0; i < CGV1_COUNT; i++)
        remove_instance(cs->v1_dir[i]);
}

/* ---- membership ---- */

/* The path pid has in the containment hierarchy (into out). */
static bool pid_box_path(const struct cgroup_sys *cs, pid_t pid, char *out,
                         size_t len, const char **rel)
{
    char path[64], *buf = xmalloc(CG_LINE_MAX * 4);
    int hier = cs->v2_dir ? -1 : cs->v1_dir[CGV1_FREEZER] ? CGV1_FREEZER
                                                          : CGV1_PIDS;
    bool found = false;

    *rel = hier < 0 ? cs->v2_rel : cs->v1_rel[hier];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    if (*rel == NULL || util_read_small(path, buf, CG_LINE_MAX * 4) <= 0) {
        free(buf);
        return false;
    }
    for (char *line = buf, *next; line && *line && !found; line = next) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        if (hier < 0 ? (c1[1] == '\0' && strncmp(line, "0:", 2) == 0)
                     : has_item(c1 + 1, v1_names[hier])) {
            util_strlcpy(out, c2 + 1, len);
            found = true;
        }
    }
    free(buf);
    return found;
}

bool cgroup_pid_app(const struct cgroup_sys *cs, pid_t pid, char *out,
                    size_t len)
{
    char p[PATH_MAX];
    const char *rel, *rest;
    size_t rn;

    if (cs == NULL || pid <= 0 || cs->containment.tier == CGROUP_NONE ||
        !pid_box_path(cs, pid, p, sizeof p, &rel))
        return false;
    rn = strlen(rel);
    if (strncmp(p, rel, rn) != 0 || p[rn] != '/' || p[rn + 1] == '\0')
        return false;
    rest = p + rn + 1;
    if (strcspn(rest, "/") >= len)
        return false;
    memcpy(out, rest, strcspn(rest, "/"));
    out[strcspn(rest, "/")] = '\0';
    return true;
}

bool cgroup_pid_in_app(const struct cgroup_sys *cs, pid_t pid,
                       const char *app)
{
    char name[256];
    return cgroup_pid_app(cs, pid, name, sizeof name) &&
           strcmp(name, app) == 0;
}

char *cgroup_app_tag(const struct cgroup_sys *cs, const char *app)
{
    return xasprintf("%s/%s", cs ? cs->instance : "", app);
}

void cgroup_app_signal_all(const struct cgroup_sys *cs, const char *app,
                           pid_t pid, uint64_t start, int sig)
{
    struct proc_handle h = {.pid = pid, .start_time = start};
    if (cgroup_app_populated(cs, app) < 0) {
        char *tag = cgroup_app_tag(cs, app);
        proc_signal_app(&h, CGROUP_APP_TAG_KEY, tag, sig);
        free(tag);
    } else if (sig == SIGKILL)
        cgroup_app_kill(cs, app);
    else
        cgroup_app_signal(cs, app, sig);
}
