/* SPDX-License-Identifier: MIT */
/*
 * config.c: where the shim's limits come from.
 *
 * 1. ACCEL_CONFIG (set by acceld): a file, or a directory holding
 *    `shim.conf`, written by acceld and read-only to the app. Text, one
 *    directive per line, '#' comments, unknown directives ignored:
 *        accel-shim 1
 *        app <name>
 *        device <ordinal> <limit-bytes> <ledger-path> [<uuid>]
 *        timeslice <ordinal> <broker-socket-path>
 *    <ordinal> is the CUDA ordinal as the app sees it (after
 *    CUDA_VISIBLE_DEVICES); <uuid> lets NVML queries find the same device.
 * 2. Standalone, without acceld: ACCEL_MEMORY_LIMIT=4Gi (every device), or
 *    HAMi's CUDA_DEVICE_MEMORY_LIMIT (every device) and
 *    CUDA_DEVICE_MEMORY_LIMIT_<i> (device i, wins over the others). The
 *    ledger is a per-user file, $XDG_RUNTIME_DIR/accel (or /tmp/accel-<uid>)
 *    /shim-<key>-dev<i>.ledger, where <key> is ACCEL_APP if set, else the
 *    program's process tree (tree.c: ACCEL_SHIM_TREE, set at load), else
 *    the session id: the processes of one program share one quota.
 *
 * Quantities: a number with an optional unit; k, m, g, t (any case, with or
 * without a trailing "i" and/or "b") are powers of 1024, as HAMi reads them.
 */
#include "shim/shim.h"
#include "shim/reclaim.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONFIG_MAX 16384 /* bytes of ACCEL_CONFIG read */

static int unit_shift(const char *u, unsigned *out_shift)
{
    static const char units[] = "kmgtp";
    const char *p;

    if (*u == '\0' || ((*u == 'b' || *u == 'B') && u[1] == '\0')) {
        *out_shift = 0;
        return 0;
    }
    p = strchr(units, *u | 0x20);
    if (p == NULL || *u == '\0')
        return -1;
    u++;
    if (*u == 'i')
        u++;
    if (*u == 'b' || *u == 'B')
        u++;
    if (*u != '\0')
        return -1;
    *out_shift = 10u * (unsigned)(p - units + 1);
    return 0;
}

int config_parse_bytes(const char *s, uint64_t *out_bytes)
{
    uint64_t whole = 0, frac = 0, scale = 1;
    unsigned shift;

    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (whole > (UINT64_MAX - 9) / 10)
            return -1;
        whole = whole * 10 + (uint64_t)(*s - '0');
    }
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++)
            if (scale < 1000000000ULL) {
                frac = frac * 10 + (uint64_t)(*s - '0');
                scale *= 10;
            }
    if (unit_shift(s, &shift) != 0 || (shift && whole >> (64 - shift)))
        return -1;
    if (shift >= 30) /* frac < 2^30: keep (frac << k) inside 64 bits */
        frac = ((frac << 30) / scale) << (shift - 30);
    else
        frac = (frac << shift) / scale;
    *out_bytes = (whole << shift) + frac;
    return 0;
}

static void set_dev(int i, uint64_t limit, const char *path, const char *uuid)
{
    struct shim_dev *d = &shim_state.dev[i];

    d->limit = limit;
    shim_concat(d->path, sizeof(d->path), path ? path : "", (char *)NULL);
    shim_concat(d->uuid, sizeof(d->uuid), uuid ? uuid : "", (char *)NULL);
    if (limit != 0)
        shim_state.any_limit = 1;
}

/* Read up to CONFIG_MAX-1 bytes of `path` into buf; -1 on error. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    struct stat st;
    char full[512];
    ssize_t n, got = 0;
    int fd;

    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        shim_concat(full, sizeof(full), path, "/shim.conf", (char *)NULL);
        path = full;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while ((size_t)got < cap - 1) {
        n = read(fd, buf + got, cap - 1 - (size_t)got);
        if (n <= 0)
            break;
        got += n;
    }
    close(fd);
    buf[got] = '\0';
    return got;
}

/* Split line in place at blanks into at most max fields; their count. */
static int split_fields(char *line, char **f, int max)
{
    int n = 0;
    char *p = line;

    while (n < max) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (*p == '\0')
            break;
        f[n++] = p;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r')
            p++;
        if (*p != '\0')
            *p++ = '\0';
    }
    return n;
}

/* A device ordinal: decimal digits below SHIM_MAX_DEV, else -1. */
static int parse_ordinal(const char *s)
{
    int v = 0;

    if (*s == '\0')
        return -1;
    for (; *s >= '0' && *s <= '9' && v < SHIM_MAX_DEV; s++)
        v = v * 10 + (*s - '0');
    return *s == '\0' && v < SHIM_MAX_DEV ? v : -1;
}

/* The card ledger of time-sliced device `ordinal` (a "timeslice" line's
 * third field, or ACCEL_TS_LEDGER_<i>): non-evictable memory is charged
 * there too, so a device needs no limit of its own for it to count. */
static void card_config(int ordinal, const char *path)
{
    struct shim_dev *d;

    if (ordinal < 0 || ordinal >= SHIM_MAX_DEV ||
        (path[0] != '/' && strcmp(path, SHIM_CARD_BROKER) != 0))
        return;
    d = &shim_state.dev[ordinal];
    if (d->card_path[0] != '\0') /* the config file's line wins */
        return;
    if (shim_concat(d->card_path, sizeof(d->card_path), path,
                    (char *)NULL) != 0) {
        d->card_path[0] = '\0';
        shim_log("dev %d: card ledger path too long: ignored", ordinal);
        return;
    }
    shim_state.any_limit = 1;
}

/* One line of ACCEL_CONFIG, without sscanf (start-up cost; see
 * shim_concat). Fields longer than their slot make the line invalid
 * rather than being cut. */
static void config_line(char *line)
{
    char *f[5];
    int n = split_fields(line, f, 5), ord;
    uint64_t bytes;

    if (n >= 3 && strcmp(f[0], "timeslice") == 0) {
        timeslice_config(parse_ordinal(f[1]), f[2]);
        if (n >= 4)
            card_config(parse_ordinal(f[1]), f[3]);
        return;
    }
    if (n >= 3 && strcmp(f[0], "reclaim") == 0) {
        reclaim_config(parse_ordinal(f[1]), f[2]); /* SPEC 4.4 */
        return;
    }
    if (n < 4 || strcmp(f[0], "device") != 0)
        return; /* "accel-shim", "app", comments, future directives */
    ord = parse_ordinal(f[1]);
    if (ord < 0 || config_parse_bytes(f[2], &bytes) ||
        strlen(f[3]) >= sizeof(shim_state.dev[0].path) ||
        (n >= 5 && strlen(f[4]) >= sizeof(shim_state.dev[0].uuid))) {
        shim_log("ACCEL_CONFIG: bad device line ignored: %s %s", f[0], f[1]);
        return;
    }
    set_dev(ord, bytes, f[3], n >= 5 ? f[4] : "");
}

static int config_from_file(const char *path)
{
    static char buf[CONFIG_MAX]; /* init runs once: no stack bulk */
    char *line, *next;

    if (read_small(path, buf, sizeof(buf)) < 0) {
        shim_log("ACCEL_CONFIG %s unreadable: quota not enforced", path);
        return -1;
    }
    for (line = buf; line != NULL && *line != '\0'; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        config_line(line);
    }
    return 0;
}

uint64_t config_reread_limit(int ordinal)
{
    static char buf[CONFIG_MAX]; /* the caller serializes */
    char *line, *next;
    uint64_t found = 0;

    if (shim_state.config[0] == '\0' ||
        read_small(shim_state.config, buf, sizeof(buf)) < 0)
        return 0;
    for (line = buf; line != NULL && *line != '\0'; line = next) {
        char *f[5];
        uint64_t bytes;
        int n;
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        n = split_fields(line, f, 5);
        if (n >= 4 && strcmp(f[0], "device") == 0 &&
            parse_ordinal(f[1]) == ordinal &&
            config_parse_bytes(f[2], &bytes) == 0)
            found = bytes;
    }
    return found;
}

/* The directory for standalone ledgers, created 0700 if missing. */
static void standalone_dir(char *out, size_t cap)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    struct stat st;

    char num[24];

    if (x != NULL && x[0] == '/' && stat(x, &st) == 0 && S_ISDIR(st.st_mode))
        shim_concat(out, cap, x, "/accel", (char *)NULL);
    else
        shim_concat(out, cap, "/tmp/accel-",
                    shim_utoa((unsigned long)getuid(), num), (char *)NULL);
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
        return; /* the usual case: one system call */
    if (mkdir(out, 0700) != 0 && stat(out, &st) != 0)
        out[0] = '\0'; /* process-local ledgers then */
}

/* The key that groups processes into one standalone quota. */
static void standalone_key(char *out, size_t cap)
{
    const char *app = getenv("ACCEL_APP");
    size_t i;

    if (app == NULL || app[0] == '\0') {
        /* the program's process tree (tree.c), else the session */
        const char *tree = getenv("ACCEL_SHIM_TREE");
        char num[24];
        pid_t sid = getsid(0);
        if (tree != NULL && tree[0] != '\0') {
            shim_concat(out, cap, "tree", (char *)NULL);
            app = tree;
            out += 4;
            cap -= 4;
        } else {
            shim_concat(out, cap, "sid",
                        shim_utoa((unsigned long)(sid > 0 ? sid : 0), num),
                        (char *)NULL);
            return;
        }
    }
    for (i = 0; app[i] != '\0' && i + 1 < cap; i++) {
        char c = app[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
        out[i] = ok ? c : '_';
    }
    out[i] = '\0';
}

static uint64_t env_bytes(const char *name)
{
    const char *v = getenv(name);
    uint64_t b = 0;

    if (v != NULL && v[0] != '\0' && config_parse_bytes(v, &b) != 0) {
        shim_log("%s=%s not understood: ignored", name, v);
        b = 0;
    }
    return b;
}

/*
 * Standalone limits. Start-up cost matters here (every process of the app
 * runs this; docs/benchmarks.md, Shim): the environment is walked once for
 * the indexed names (no 16 getenv/snprintf pairs each), and the default
 * limit is not written into all SHIM_MAX_DEV device slots (6.5 KB of state,
 * two pages to fault in) but applied to a device when it is first used.
 */
extern char **environ;

/* The device index after `prefix` in an environment entry, value in *val;
 * -1 if the entry is not prefix<digits>=... with an index in range. */
static int env_indexed(const char *entry, const char *prefix, size_t plen,
                       const char **val)
{
    int i = 0;
    const char *p = entry + plen;

    if (strncmp(entry, prefix, plen) != 0 || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9' && i < SHIM_MAX_DEV; p++)
        i = i * 10 + (*p - '0');
    if (*p != '=' || i >= SHIM_MAX_DEV)
        return -1;
    *val = p + 1;
    return i;
}

static void config_from_env(void)
{
    static const char per[] = "CUDA_DEVICE_MEMORY_LIMIT_";
    char dir[200], key[64];
    uint64_t all = env_bytes("ACCEL_MEMORY_LIMIT"), lim;

    if (all == 0)
        all = env_bytes("CUDA_DEVICE_MEMORY_LIMIT");
    standalone_dir(dir, sizeof(dir));
    standalone_key(key, sizeof(key));
    if (dir[0] != '\0')
        shim_concat(shim_state.env_ledger, sizeof(shim_state.env_ledger), dir,
                    "/shim-", key, "-dev", (char *)NULL);
    shim_state.env_limit = all;
    if (all != 0)
        shim_state.any_limit = 1;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *v;
        int i = env_indexed(*e, per, sizeof(per) - 1, &v);
        if (i < 0 || v[0] == '\0')
            continue;
        if (config_parse_bytes(v, &lim) != 0) {
            shim_log("%s not understood: ignored", *e);
            continue;
        }
        if (lim != 0)
            set_dev(i, lim, NULL, NULL);
    }
}

void config_dev(struct shim_dev *d, int ordinal)
{
    if (!shim_state.standalone || (d->limit == 0 && shim_state.env_limit == 0))
        return;
    if (d->limit == 0)
        d->limit = shim_state.env_limit;
    if (shim_state.env_ledger[0] != '\0' && d->path[0] == '\0') {
        char num[24];
        shim_concat(d->path, sizeof(d->path), shim_state.env_ledger,
                    shim_utoa((unsigned long)ordinal, num), ".ledger",
                    (char *)NULL);
    }
}

/* ACCEL_TS_SOCKET_<i>: the broker socket of device i, ACCEL_TS_LEDGER_<i>
 * its card ledger (standalone use and tests; ACCEL_CONFIG's "timeslice"
 * lines win). */
static void config_ts_env(void)
{
    static const char pre[] = "ACCEL_TS_SOCKET_";
    static const char card[] = "ACCEL_TS_LEDGER_";
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *v;
        int i = env_indexed(*e, pre, sizeof(pre) - 1, &v);
        if (i >= 0 && i < SHIM_TS_MAX_DEV && v[0] == '/' &&
            shim_state.ts.dev[i].path[0] == '\0')
            timeslice_config(i, v);
        i = env_indexed(*e, card, sizeof(card) - 1, &v);
        if (i >= 0)
            card_config(i, v);
    }
}

void config_load(void)
{
    const char *cfg = getenv("ACCEL_CONFIG");

    if (cfg != NULL && cfg[0] != '\0') {
        if (config_from_file(cfg) == 0 &&
            shim_concat(shim_state.config, sizeof(shim_state.config), cfg,
                        (char *)NULL) != 0)
            shim_state.config[0] = '\0';
    }
    else {
        shim_state.standalone = 1;
        config_from_env();
    }
    config_ts_env();
    /* a device without a limit becomes NOLIMIT at its first use
     * (dev_attach), so the 16 slots are not all written here */
    shim_log("limits loaded (%s)", cfg ? "ACCEL_CONFIG" : "environment");
}
