/* SPDX-License-Identifier: MIT */
/*
 * drm.c: the DRM sysfs scan and the fdinfo client walk (drm.h). Every file
 * is read whole into a small buffer and parsed here; a value that is not a
 * number is logged once per scan with its path and left unknown.
 */
#include "common/accel_setup.h"
#include "daemon/node/devices/drm.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"

#define SMALL_MAX 256      /* bytes of a one-value sysfs file */
#define FDINFO_MAX 8192    /* bytes of one fdinfo file */
#define PCI_IDS_LINE 512   /* longest pci.ids line kept */
#define MAX_CLIENTS 4096   /* clients kept in one walk */

/* PCI device ids of AMD APUs (integrated Radeon sharing system RAM): they
 * are the `amd` type; every other amdgpu device is a discrete `amd-gpu`.
 * amdgpu has no sysfs flag for "APU", so the id decides. */
static const unsigned amd_apu_ids[] = {
    0x1586, /* Strix Halo: Ryzen AI Max, Radeon 8050S / 8060S */
    0x150e, /* Strix Point: Radeon 880M / 890M */
    0x1114, /* Krackan Point */
    0x15bf, 0x15c8, /* Phoenix / Hawk Point: Radeon 780M */
    0x1681, /* Rembrandt: Radeon 680M */
    0x164e, /* Raphael / Granite Ridge iGPU */
    0x1638, 0x1636, 0x164c, /* Cezanne, Renoir, Lucienne */
    0x1506, /* Mendocino */
    0x163f, /* Van Gogh */
    0x15d8, 0x15dd, /* Picasso, Raven */
};

/* Intel discrete GPUs by PCI id (Arc: DG1, DG2/Alchemist, Battlemage):
 * [lo, hi] ranges. A card in them is intel-gpu even where the driver
 * offers no local-memory size in sysfs. */
static const unsigned intel_discrete_ids[][2] = {
    {0x4905, 0x4909}, /* DG1 */
    {0x5690, 0x56c1}, /* DG2: Arc A-series, Arc Pro */
    {0xe202, 0xe20d}, /* Battlemage: Arc B-series */
    {0xe210, 0xe216}, /* Battlemage: Arc Pro B */
};

/* ---- files ---- */

/* snprintf into a path buffer; false (and "") when it does not fit. */
__attribute__((format(printf, 3, 4)))
static bool fmt_path(char *out, size_t len, const char *f, ...)
{
    va_list ap;
    int n;
    va_start(ap, f);
    n = vsnprintf(out, len, f, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        out[0] = '\0';
        return false;
    }
    return true;
}
/* Strip trailing white space in place. */
static void rstrip(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
}

/* One unsigned number (decimal, or hex with 0x) from dir/name.
 * DRM_NA_ABSENT without the file; DRM_NA_MALFORMED (logged) when it holds
 * something else. */
static enum drm_na read_u64(const char *dir, const char *name, uint64_t *out)
{
    char path[PATH_MAX], buf[SMALL_MAX], *end = NULL;
    unsigned long long v;

    fmt_path(path, sizeof path, "%s/%s", dir, name);
    if (util_read_small(path, buf, sizeof buf) < 0)
        return DRM_NA_ABSENT;
    rstrip(buf);
    errno = 0;
    v = strtoull(buf, &end, 0);
    if (buf[0] == '\0' || buf[0] == '-' || errno != 0 || *end != '\0') {
        log_warn("%s holds \"%.40s\", not a number: the value is not "
                 "reported", path, buf);
        return DRM_NA_MALFORMED;
    }
    *out = v;
    return DRM_NA_NONE;
}

/* A byte figure, DRM_UNKNOWN when absent or malformed. */
static uint64_t read_bytes(const char *dir, const char *name)
{
    uint64_t v = 0;
    return read_u64(dir, name, &v) == DRM_NA_NONE ? v : DRM_UNKNOWN;
}

/* The last path component of the link dir/name into out ("" if none). */
static void link_base(const char *dir, const char *name, char *out,
                      size_t len)
{
    char path[PATH_MAX], target[PATH_MAX];
    ssize_t n;
    const char *slash;

    out[0] = '\0';
    fmt_path(path, sizeof path, "%s/%s", dir, name);
    n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return;
    target[n] = '\0';
    slash = strrchr(target, '/');
    util_strlcpy(out, slash ? slash + 1 : target, len);
}

/* ---- pci.ids ---- */

static FILE *open_pci_ids(void)
{
    static const char *const paths[] = {"/usr/share/misc/pci.ids",
                                        "/usr/share/hwdata/pci.ids"};
    const char *env = getenv("ACCEL_PCI_IDS");
    if (env != NULL && *env != '\0')
        return fopen(env, "r");
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        FILE *f = fopen(paths[i], "r");
        if (f)
            return f;
    }
    return NULL;
}

/* The name pci.ids gives vendor:device into out; false if not listed. */
static bool pci_ids_name(unsigned vendor, unsigned device, char *out,
                         size_t len)
{
    char line[PCI_IDS_LINE];
    bool in_vendor = false, found = false;
    FILE *f = open_pci_ids();
    if (f == NULL)
        return false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned id;
        int off = 0;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (line[0] != '\t') {
            if (in_vendor)
                break; /* past the vendor's block */
            in_vendor = sscanf(line, "%4x %n", &id, &off) == 1 && off > 0 &&
                        id == vendor;
        } else if (in_vendor && line[1] != '\t' &&
                   sscanf(line + 1, "%4x %n", &id, &off) == 1 && off > 0 &&
                   id == device) {
            rstrip(line);
            util_strlcpy(out, line + 1 + off, len);
            found = out[0] != '\0';
        }
    }
    fclose(f);
    return found;
}

static void product_name(const char *dev, struct drm_gpu *g)
{
    char path[PATH_MAX], buf[DRM_NAME_LEN];
    fmt_path(path, sizeof path, "%s/product_name", dev);
    if (util_read_small(path, buf, sizeof buf) > 0) {
        rstrip(buf);
        if (buf[0] != '\0') {
            util_strlcpy(g->name, buf, sizeof g->name);
            return;
        }
    }
    if (pci_ids_name(g->vendor, g->device, g->name, sizeof g->name))
        return;
    snprintf(g->name, sizeof g->name, "%s GPU %04x:%04x",
             g->vendor == DRM_VENDOR_AMD ? "AMD" : "Intel", g->vendor,
             g->device);
}

/* ---- readings ---- */

/* hwmon readings: the first device/hwmon/hwmon* directory. */
static void read_hwmon(const char *dev, struct drm_gpu *g)
{
    char dir[PATH_MAX], h[PATH_MAX];
    struct dirent *e;
    uint64_t v = 0;
    DIR *dp;

    g->power_na = g->limit_na = g->temp_na = DRM_NA_ABSENT;
    fmt_path(dir, sizeof dir, "%s/hwmon", dev);
    dp = opendir(dir);
    if (dp == NULL)
        return;
    h[0] = '\0';
    while ((e = readdir(dp)) != NULL)
        if (strncmp(e->d_name, "hwmon", 5) == 0 && h[0] == '\0')
            fmt_path(h, sizeof h, "%s/%s", dir, e->d_name);
    closedir(dp);
    if (h[0] == '\0')
        return;
    g->power_na = read_u64(h, "power1_average", &v);
    if (g->power_na == DRM_NA_ABSENT)
        g->power_na = read_u64(h, "power1_input", &v);
    if (g->power_na == DRM_NA_NONE)
        g->power_mw = (int64_t)(v / 1000); /* microwatts */
    g->limit_na = read_u64(h, "power1_cap", &v);
    if (g->limit_na == DRM_NA_ABSENT)
        g->limit_na = read_u64(h, "power1_max", &v);
    if (g->limit_na == DRM_NA_NONE)
        g->power_limit_mw = (int64_t)(v / 1000);
    g->temp_na = read_u64(h, "temp1_input", &v);
    if (g->temp_na == DRM_NA_NONE)
        g->temp = (int)(v / 1000); /* millidegrees */
}

static bool is_amd_apu(unsigned device)
{
    for (size_t i = 0; i < sizeof amd_apu_ids / sizeof *amd_apu_ids; i++)
        if (amd_apu_ids[i] == device)
            return true;
    return false;
}

static uint64_t share_of(uint64_t ram)
{
    return ram / 4 * 3; /* SPEC 1: unified-memory types, 75 % of node RAM */
}

static void set_unhealthy(struct drm_gpu *g, const char *why)
{
    g->healthy = 0;
    util_strlcpy(g->health_cause, why, sizeof g->health_cause);
}

/* amdgpu: VRAM (the carve-out on an APU), GTT, busy percent. */
static void read_amd(const char *dev, uint64_t ram, struct drm_gpu *g)
{
    uint64_t v = 0, gtt;

    g->vram_total = read_bytes(dev, "mem_info_vram_total");
    g->vram_used = read_bytes(dev, "mem_info_vram_used");
    g->gtt_total = read_bytes(dev, "mem_info_gtt_total");
    g->gtt_used = read_bytes(dev, "mem_info_gtt_used");
    g->util_na = read_u64(dev, "gpu_busy_percent", &v);
    if (g->util_na == DRM_NA_NONE)
        g->util = v > 100 ? 100 : (int)v;
    g->type = is_amd_apu(g->device) ? ACCEL_TYPE_AMD : ACCEL_TYPE_AMD_GPU;
    if (g->vram_total == DRM_UNKNOWN) {
        set_unhealthy(g, "mem_info_vram_total is missing or malformed");
        snprintf(g->mem_source, sizeof g->mem_source,
                 "not reported: amdgpu mem_info_vram_total unreadable");
        return;
    }
    if (g->type == ACCEL_TYPE_AMD_GPU) {
        g->memory = g->vram_total;
        g->used = g->vram_used;
        snprintf(g->mem_source, sizeof g->mem_source,
                 "amdgpu sysfs mem_info_vram_total");
        if (g->used != DRM_UNKNOWN)
            snprintf(g->used_source, sizeof g->used_source,
                     "amdgpu sysfs mem_info_vram_used");
        return;
    }
    /* APU: the carve-out is the GPU's alone; the GTT is system RAM the OS
     * and the apps' CPU side need too, so it counts up to the share */
    gtt = g->gtt_total == DRM_UNKNOWN ? share_of(ram) : g->gtt_total;
    if (gtt > share_of(ram))
        gtt = share_of(ram);
    g->memory = g->vram_total + gtt;
    if (g->vram_used != DRM_UNKNOWN && g->gtt_used != DRM_UNKNOWN) {
        g->used = g->vram_used + g->gtt_used;
        snprintf(g->used_source, sizeof g->used_source,
                 "amdgpu sysfs mem_info_vram_used + mem_info_gtt_used");
    }
    snprintf(g->mem_source, sizeof g->mem_source,
             "amdgpu sysfs: mem_info_vram_total (carve-out) + %s, at most "
             "75%% of node RAM",
             g->gtt_total == DRM_UNKNOWN ? "GTT not reported, taken as the "
                                           "share"
                                         : "mem_info_gtt_total");
}

static bool is_intel_discrete(unsigned device)
{
    size_t n = sizeof intel_discrete_ids / sizeof *intel_discrete_ids;
    for (size_t i = 0; i < n; i++)
        if (device >= intel_discrete_ids[i][0] &&
            device <= intel_discrete_ids[i][1])
            return true;
    return false;
}

/* xe: the VRAM of every tile (tileN/physical_vram_size_bytes). */
static uint64_t xe_vram(const char *dev)
{
    uint64_t sum = 0;
    for (int t = 0; t < 8; t++) {
        char tile[PATH_MAX];
        uint64_t v;
        fmt_path(tile, sizeof tile, "%s/tile%d", dev, t);
        v = read_bytes(tile, "physical_vram_size_bytes");
        if (v == DRM_UNKNOWN)
            break;
        sum += v;
    }
    return sum ? sum : DRM_UNKNOWN;
}

/* i915 / xe: local memory where the driver reports it; without it the GPU
 * is integrated and has the share of node RAM. */
static void read_intel(const char *card, const char *dev, uint64_t ram,
                       struct drm_gpu *g)
{
    uint64_t avail;

    g->util_na = DRM_NA_ABSENT; /* neither driver has a busy file */
    g->vram_total = strcmp(g->driver, "xe") == 0
                        ? xe_vram(dev)
                        : read_bytes(card, "lmem_total_bytes");
    if (g->vram_total == DRM_UNKNOWN && is_intel_discrete(g->device)) {
        g->type = ACCEL_TYPE_INTEL_GPU;
        snprintf(g->mem_source, sizeof g->mem_source,
                 "not reported: %s offers no local-memory size in sysfs "
                 "here", g->driver[0] ? g->driver : "the driver");
        return;
    }
    if (g->vram_total == DRM_UNKNOWN) {
        g->type = ACCEL_TYPE_INTEL;
        g->memory = share_of(ram);
        snprintf(g->mem_source, sizeof g->mem_source,
                 "75%% of node RAM (integrated: %s reports no local "
                 "memory)", g->driver[0] ? g->driver : "the driver");
        return;
    }
    g->type = ACCEL_TYPE_INTEL_GPU;
    g->memory = g->vram_total;
    avail = read_bytes(card, "lmem_avail_bytes");
    if (avail != DRM_UNKNOWN && avail <= g->vram_total) {
        g->used = g->vram_used = g->vram_total - avail;
        snprintf(g->used_source, sizeof g->used_source,
                 "i915 sysfs lmem_total_bytes - lmem_avail_bytes");
    }
    snprintf(g->mem_source, sizeof g->mem_source, "%s sysfs %s",
             g->driver, strcmp(g->driver, "xe") == 0
                            ? "tile*/physical_vram_size_bytes"
                            : "lmem_total_bytes");
}

/* The render node of a card: device/drm/renderD*. */
static void find_render(const char *dev, struct drm_gpu *g)
{
    char dir[PATH_MAX];
    struct dirent *e;
    DIR *dp;
    fmt_path(dir, sizeof dir, "%s/drm", dev);
    dp = opendir(dir);
    if (dp == NULL)
        return;
    while ((e = readdir(dp)) != NULL)
        if (strncmp(e->d_name, "renderD", 7) == 0 && g->render[0] == '\0')
            util_strlcpy(g->render, e->d_name, sizeof g->render);
    closedir(dp);
}

/* The PCI address: the device link's name, else PCI_SLOT_NAME in uevent. */
static void find_pci(const char *card, const char *dev, struct drm_gpu *g)
{
    char path[PATH_MAX], buf[1024], *p;
    link_base(card, "device", g->pci, sizeof g->pci);
    if (strchr(g->pci, ':') != NULL)
        return;
    g->pci[0] = '\0';
    fmt_path(path, sizeof path, "%s/uevent", dev);
    if (util_read_small(path, buf, sizeof buf) < 0)
        return;
    p = strstr(buf, "PCI_SLOT_NAME=");
    if (p == NULL)
        return;
    p += strlen("PCI_SLOT_NAME=");
    p[strcspn(p, "\n")] = '\0';
    util_strlcpy(g->pci, p, sizeof g->pci);
}

/* Read one card; false when it is not a device of ours. full: its name
 * and hwmon too (a scan), else only what its memory needs. */
static bool read_card(const char *root, const char *name, uint64_t ram,
                      struct drm_gpu *g, bool full)
{
    char card[PATH_MAX], dev[PATH_MAX];
    uint64_t vendor = 0, device = 0;

    fmt_path(card, sizeof card, "%s/class/drm/%s", root, name);
    fmt_path(dev, sizeof dev, "%s/device", card);
    if (read_u64(dev, "vendor", &vendor) != DRM_NA_NONE ||
        (vendor != DRM_VENDOR_AMD && vendor != DRM_VENDOR_INTEL))
        return false;
    memset(g, 0, sizeof *g);
    g->vendor = (unsigned)vendor;
    if (read_u64(dev, "device", &device) != DRM_NA_NONE)
        log_warn("%s: no PCI device id", dev);
    g->device = (unsigned)device;
    g->healthy = 1;
    g->util = g->temp = -1;
    g->power_mw = g->power_limit_mw = -1;
    g->used = DRM_UNKNOWN;
    g->vram_used = g->gtt_total = g->gtt_used = DRM_UNKNOWN;
    util_strlcpy(g->card, name, sizeof g->card);
    link_base(dev, "driver", g->driver, sizeof g->driver);
    if (g->driver[0] == '\0' && vendor == DRM_VENDOR_AMD)
        util_strlcpy(g->driver, "amdgpu", sizeof g->driver);
    find_pci(card, dev, g);
    find_render(dev, g);
    if (full)
        product_name(dev, g);
    if (vendor == DRM_VENDOR_AMD)
        read_amd(dev, ram, g);
    else
        read_intel(card, dev, ram, g);
    if (full)
        read_hwmon(dev, g);
    return true;
}

/* "card" followed by digits only (card0-DP-1 is a connector). */
static int card_number(const char *name)
{
    char *end = NULL;
    long v;
    if (strncmp(name, "card", 4) != 0 || !isdigit((unsigned char)name[4]))
        return -1;
    v = strtol(name + 4, &end, 10);
    return *end == '\0' && v < 4096 ? (int)v : -1;
}

enum accel_err drm_scan(const char *sysfs_root, uint64_t node_ram,
                        struct drm_gpu **out, size_t *count)
{
    char dir[PATH_MAX], name[32];
    struct drm_gpu *v = NULL;
    size_t n = 0;
    int max = -1;
    struct dirent *e;
    DIR *dp;

    fmt_path(dir, sizeof dir, "%s/class/drm", sysfs_root);
    dp = opendir(dir);
    if (dp != NULL) {
        while ((e = readdir(dp)) != NULL)
            if (card_number(e->d_name) > max)
                max = card_number(e->d_name);
        closedir(dp);
    }
    /* card order by number, the order the kernel registered them */
    for (int c = 0; c <= max; c++) {
        fmt_path(name, sizeof name, "card%d", c);
        v = xrealloc(v, (n + 1) * sizeof *v);
        if (read_card(sysfs_root, name, node_ram, &v[n], true))
            n++;
    }
    if (n == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    *count = n;
    return ACCEL_OK;
}

/* ---- fdinfo ---- */

bool drm_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        unsigned shift;
    } units[] = {{"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}};
    char *end = NULL;
    unsigned long long v;

    while (*s == ' ' || *s == '\t')
        s++;
    if (!isdigit((unsigned char)*s))
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    while (*end == ' ' || *end == '\t')
        end++;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        size_t ul = strlen(units[i].unit);
        if (strncmp(end, units[i].unit, ul) == 0 &&
            (end[ul] == '\0' || end[ul] == '\n' || end[ul] == ' ')) {
            if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
                return false;
            *out = (uint64_t)v << units[i].shift;
            return true;
        }
    }
    return false;
}

/* What one fdinfo file says. */
struct fdinfo {
    char pdev[32];       /* drm-pdev */
    uint64_t client;     /* drm-client-id */
    bool has_client;     /* it was there */
    uint64_t total_local, total_sys;   /* drm-total-<region> sums */
    uint64_t memory_local, memory_sys; /* drm-memory-<region> sums */
    bool has_total;      /* any drm-total-* key */
};

/* vram*, local*: device memory; gtt*, system*, cpu*: system RAM. */
static int region_kind(const char *r)
{
    if (strncmp(r, "vram", 4) == 0 || strncmp(r, "local", 5) == 0)
        return 1;
    if (strncmp(r, "gtt", 3) == 0 || strncmp(r, "system", 6) == 0 ||
        strncmp(r, "cpu", 3) == 0)
        return 2;
    return 0; /* stolen, shared, ...: not counted */
}

static void fdinfo_key(struct fdinfo *fi, const char *key, const char *val)
{
    uint64_t b = 0;
    int kind;
    while (*val == ' ' || *val == '\t')
        val++;
    if (strcmp(key, "drm-pdev") == 0) {
        util_strlcpy(fi->pdev, val, sizeof fi->pdev);
        fi->pdev[strcspn(fi->pdev, " \t\n")] = '\0';
    } else if (strcmp(key, "drm-client-id") == 0) {
        fi->has_client = drm_parse_size(val, &fi->client);
    } else if (strncmp(key, "drm-total-", 10) == 0) {
        kind = region_kind(key + 10);
        if (kind && drm_parse_size(val, &b)) {
            fi->has_total = true;
            *(kind == 1 ? &fi->total_local : &fi->total_sys) += b;
        }
    } else if (strncmp(key, "drm-memory-", 11) == 0) {
        kind = region_kind(key + 11);
        if (kind && drm_parse_size(val, &b))
            *(kind == 1 ? &fi->memory_local : &fi->memory_sys) += b;
    }
}

static bool parse_fdinfo(const char *path, struct fdinfo *fi)
{
    char *buf = xmalloc(FDINFO_MAX), *line, *next;
    memset(fi, 0, sizeof *fi);
    if (util_read_small(path, buf, FDINFO_MAX) < 0) {
        free(buf);
        return false;
    }
    for (line = buf; line && *line; line = next) {
        char *colon;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        colon = strchr(line, ':');
        if (colon == NULL)
            continue;
        *colon = '\0';
        fdinfo_key(fi, line, colon + 1);
    }
    free(buf);
    return true;
}

/* The device of g[0..n) this client is on, or -1. */
static int client_gpu(const struct fdinfo *fi, const char *node,
                      const struct drm_gpu *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (fi->pdev[0] && g[i].pci[0] && strcmp(fi->pdev, g[i].pci) == 0)
            return (int)i;
        if (!fi->pdev[0] && g[i].render[0] && strcmp(node, g[i].render) == 0)
            return (int)i;
    }
    return -1;
}

static uint64_t client_bytes(const struct fdinfo *fi, enum accel_type t)
{
    bool dedicated = accel_type_has_vram(t);
    if (fi->has_total)
        return fi->total_local + (dedicated ? 0 : fi->total_sys);
    return fi->memory_local + (dedicated ? 0 : fi->memory_sys);
}

/* A walk's clients, deduplicated by (device, client id): the kernel's id
 * names one open DRM file on its device, which several fds of a process
 * (dup) or several processes (fork, a descriptor passed over a socket)
 * may hold; its memory counts once, for the first process found. */
struct walk {
    struct drm_client *v;
    uint64_t *ids;       /* client id per entry, UINT64_MAX = none */
    size_t n;
};

static void add_client(struct walk *w, pid_t pid, size_t gpu,
                       const struct fdinfo *fi, uint64_t bytes)
{
    uint64_t id = fi->has_client ? fi->client : UINT64_MAX;
    for (size_t i = 0; id != UINT64_MAX && i < w->n; i++)
        if (w->v[i].gpu == gpu && w->ids[i] == id)
            return; /* the same client on another fd (dup, fork) */
    if (w->n >= MAX_CLIENTS)
        return;
    w->v = xrealloc(w->v, (w->n + 1) * sizeof *w->v);
    w->ids = xrealloc(w->ids, (w->n + 1) * sizeof *w->ids);
    w->v[w->n] = (struct drm_client){pid, gpu, bytes};
    w->ids[w->n++] = id;
}

/* Every DRM fd of one process. */
static void walk_pid(const char *proc, pid_t pid, struct drm_gpu *g,
                     size_t n, struct walk *w)
{
    char fddir[PATH_MAX], path[PATH_MAX], node[64];
    struct dirent *e;
    DIR *dp;

    fmt_path(fddir, sizeof fddir, "%s/%d/fd", proc, (int)pid);
    dp = opendir(fddir);
    if (dp == NULL)
        return; /* gone, or another user's */
    while ((e = readdir(dp)) != NULL) {
        char target[PATH_MAX];
        struct fdinfo fi;
        ssize_t len;
        int gpu;
        if (e->d_name[0] == '.')
            continue;
        fmt_path(path, sizeof path, "%s/%s", fddir, e->d_name);
        len = readlink(path, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (strncmp(target, "/dev/dri/", 9) != 0)
            continue;
        util_strlcpy(node, target + 9, sizeof node);
        fmt_path(path, sizeof path, "%s/%d/fdinfo/%s", proc, (int)pid,
                 e->d_name);
        if (!parse_fdinfo(path, &fi))
            continue;
        gpu = client_gpu(&fi, node, g, n);
        if (gpu >= 0)
            add_client(w, pid, (size_t)gpu, &fi,
                       client_bytes(&fi, g[gpu].type));
    }
    closedir(dp);
}

void drm_clients(const char *proc_root, struct drm_gpu *g, size_t n,
                 struct drm_client **out, size_t *count)
{
    struct walk w = {NULL, NULL, 0};
    struct dirent *e;
    DIR *dp = n ? opendir(proc_root) : NULL;
    uint64_t *sum;

    while (dp && (e = readdir(dp)) != NULL) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (pid > 0 && *end == '\0')
            walk_pid(proc_root, (pid_t)pid, g, n, &w);
    }
    if (dp)
        closedir(dp);
    sum = xcalloc(n + 1, sizeof *sum);
    for (size_t i = 0; i < w.n; i++)
        sum[w.v[i].gpu] += w.v[i].bytes;
    for (size_t i = 0; i < n; i++) {
        if (g[i].used != DRM_UNKNOWN)
            continue;
        g[i].used = sum[i];
        snprintf(g[i].used_source, sizeof g[i].used_source,
                 "fdinfo: the DRM clients acceld can read");
    }
    free(sum);
    free(w.ids);
    *out = w.v;
    *count = w.n;
}

enum accel_err drm_card_memory(const char *sysfs_root, const char *proc_root,
                               const char *card, uint64_t node_ram,
                               uint64_t *memory, uint64_t *used)
{
    struct drm_gpu g;

    if (card_number(card) < 0 ||
        !read_card(sysfs_root, card, node_ram, &g, false))
        return ACCEL_ENOTFOUND;
    if (g.used == DRM_UNKNOWN) { /* the driver's own count first */
        struct drm_client *c = NULL;
        size_t nc = 0;
        drm_clients(proc_root, &g, 1, &c, &nc);
        free(c);
    }
    if (g.memory == 0 || g.used == DRM_UNKNOWN)
        return ACCEL_EIO;
    *memory = g.memory;
    *used = g.used;
    return ACCEL_OK;
}

char *drm_device_id(const char *node, enum accel_type t, unsigned k)
{
    return xasprintf("%s-%s-%u", node, accel_type_name(t), k);
}
