/* SPDX-License-Identifier: MIT */
/*
 * history.c: the metric history's rings, their file, and the readers the
 * routes use. The layout and its costs are in docs/internals/history.md.
 *
 * The file (<data-dir>/history.bin), all integers little-endian as this
 * machine writes them (the magic tells a foreign byte order apart):
 *   "ACCELHS1", u32 version (1), u32 interval, u32 nsamples, u32 nseries,
 *   u32 nsamples times (unix s, oldest first), then per series: u8 kind,
 *   i32 index, six strings (u16 length + bytes: device, node, model,
 *   driver, app, owner), then per field nsamples values of the field's
 *   width (oldest first); and last a u64 FNV-1a of everything before it.
 */
#include "common/accel_setup.h"
#include "daemon/node/history/history.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/strmap.h"
#include "common/util.h"

#define HISTORY_MAGIC "ACCELHS1"
#define HISTORY_VERSION 2u /* 1: bindings without HF_B_UTIL (read too) */
#define HISTORY_MAX_SERIES 4096 /* series in a file, at most */
#define NFIELDS 5               /* the most fields of a kind */

/* How a field is stored: width in bytes, and units per stored step. */
struct field_fmt {
    uint8_t width;  /* 1, 2 or 4 bytes; all ones = null */
    double mul;     /* stored = round(value * mul) */
};

static const struct field_fmt dev_fmt[HF_DEV_COUNT] = {
    [HF_UTIL] = {1, 1.0},               /* percent */
    [HF_MEM_USED] = {4, 1.0 / 1024},    /* KiB: up to 4 TiB */
    [HF_MEM_TOTAL] = {4, 1.0 / 1024},   /* KiB */
    [HF_POWER] = {2, 10.0},             /* deciwatts: up to 6553.4 W */
    [HF_TEMP] = {1, 1.0},               /* degrees C */
};

static const struct field_fmt bind_fmt[HF_BIND_COUNT] = {
    [HF_B_USED] = {4, 1.0 / 1024},      /* KiB */
    [HF_B_ALLOC] = {4, 1.0 / 1024},     /* KiB */
    [HF_B_CORES] = {1, 1.0},            /* percent */
    [HF_B_UTIL] = {1, 1.0},             /* percent */
};

struct series {
    enum history_kind kind;  /* device or binding */
    char *key;               /* device id, or "app\x1f" "device" */
    char *str[6];            /* device, node, model, driver, app, owner */
    int index;               /* NVML index */
    uint8_t *data[NFIELDS];  /* [capacity * width] per field */
    int64_t last_seen;       /* time of its newest measured value */
    bool seen;               /* in the sample being recorded */
};

enum { S_DEVICE, S_NODE, S_MODEL, S_DRIVER, S_APP, S_OWNER };

struct history {
    pthread_mutex_t lock;    /* guards everything below */
    int interval;            /* seconds between samples */
    size_t cap;              /* slots */
    size_t head;             /* next slot written */
    size_t count;            /* samples held (<= cap) */
    uint32_t *ts;            /* [cap] unix seconds per slot */
    struct series **s;       /* series */
    size_t ns, cs;           /* count, capacity */
    struct strmap *index;    /* key -> position in s */
    size_t values;           /* bytes of all series' value arrays */
    size_t max_bytes;        /* values may not pass it (the setting) */
    struct history_missed *missed; /* the last sample's series not kept */
    size_t nmissed;
    char *path;              /* the file, or NULL */
};

/* ---- field encoding ---- */

static const struct field_fmt *fmt_of(enum history_kind k, int f)
{
    return k == HISTORY_DEVICE ? &dev_fmt[f] : &bind_fmt[f];
}

static int nfields(enum history_kind k)
{
    return k == HISTORY_DEVICE ? HF_DEV_COUNT : HF_BIND_COUNT;
}

static uint32_t null_of(uint8_t width)
{
    return width == 4 ? UINT32_MAX : (1u << (8 * width)) - 1u;
}

static uint32_t load_raw(const uint8_t *p, uint8_t width)
{
    uint32_t v = 0;
    memcpy(&v, p, width); /* little-endian machines only (the magic) */
    return v;
}

static void store_raw(uint8_t *p, uint8_t width, uint32_t v)
{
    memcpy(p, &v, width);
}

static uint32_t encode(const struct field_fmt *ff, double v)
{
    uint32_t nul = null_of(ff->width);
    double x;
    if (!(v >= 0)) /* negative or NaN: not measured */
        return nul;
    x = floor(v * ff->mul + 0.5);
    return x >= (double)nul ? nul - 1 : (uint32_t)x;
}

static double decode(const struct field_fmt *ff, uint32_t raw)
{
    return raw == null_of(ff->width) ? NAN : raw / ff->mul;
}

/* ---- series ---- */

static void series_free(struct series *x)
{
    if (x == NULL)
        return;
    free(x->key);
    for (int i = 0; i < 6; i++)
        free(x->str[i]);
    for (int f = 0; f < NFIELDS; f++)
        free(x->data[f]);
    free(x);
}

/* Bytes of the value arrays of one series of this kind. */
static size_t series_bytes(const struct history *h, enum history_kind kind)
{
    size_t b = 0;
    for (int f = 0; f < nfields(kind); f++)
        b += h->cap * fmt_of(kind, f)->width;
    return b;
}

static struct series *series_new(struct history *h, enum history_kind kind,
                                 const char *key)
{
    struct series *x = xcalloc(1, sizeof(*x));
    x->kind = kind;
    x->key = xstrdup(key);
    for (int i = 0; i < 6; i++)
        x->str[i] = xstrdup("");
    for (int f = 0; f < nfields(kind); f++) {
        x->data[f] = xmalloc(h->cap * fmt_of(kind, f)->width);
        memset(x->data[f], 0xff, h->cap * fmt_of(kind, f)->width);
    }
    h->values += series_bytes(h, kind);
    if (h->ns == h->cs) {
        h->cs = h->cs ? h->cs * 2 : 16;
        h->s = xrealloc(h->s, h->cs * sizeof(*h->s));
    }
    strmap_put(h->index, key, (uint32_t)h->ns);
    h->s[h->ns++] = x;
    return x;
}

static void set_str(struct series *x, int i, const char *v)
{
    if (v == NULL)
        v = "";
    if (strcmp(x->str[i], v) == 0)
        return;
    free(x->str[i]);
    x->str[i] = xstrdup(v);
}

static void missed_clear(struct history *h)
{
    for (size_t i = 0; i < h->nmissed; i++)
        free(h->missed[i].key);
    free(h->missed);
    h->missed = NULL;
    h->nmissed = 0;
}

/* The series for key, created when absent (NULL when at the cap: then it
 * is named among the sample's missed ones). */
static struct series *series_get(struct history *h, enum history_kind kind,
                                 const char *key, size_t *dropped)
{
    uint32_t i;
    if (strmap_get(h->index, key, &i))
        return h->s[i];
    if (h->ns >= HISTORY_MAX_SERIES ||
        (h->values + series_bytes(h, kind)) > h->max_bytes) {
        (*dropped)++;
        h->missed = xrealloc(h->missed, (h->nmissed + 1) * sizeof(*h->missed));
        h->missed[h->nmissed++] = (struct history_missed){kind, xstrdup(key)};
        return NULL;
    }
    return series_new(h, kind, key);
}

static void put(struct series *x, size_t slot, int f, double v, int64_t t)
{
    const struct field_fmt *ff = fmt_of(x->kind, f);
    uint32_t raw = encode(ff, v);
    store_raw(x->data[f] + slot * ff->width, ff->width, raw);
    if (raw != null_of(ff->width))
        x->last_seen = t;
}

/* Drop the series whose newest measured value is older than the ring. */
static void drop_stale(struct history *h, int64_t oldest)
{
    size_t k = 0;
    bool changed = false;
    for (size_t i = 0; i < h->ns; i++) {
        if (h->s[i]->last_seen < oldest) {
            h->values -= series_bytes(h, h->s[i]->kind);
            series_free(h->s[i]);
            changed = true;
            continue;
        }
        h->s[k++] = h->s[i];
    }
    h->ns = k;
    if (!changed)
        return;
    strmap_free(h->index);
    h->index = strmap_new();
    for (size_t i = 0; i < h->ns; i++)
        strmap_put(h->index, h->s[i]->key, (uint32_t)i);
}

/* ---- construction ---- */

static enum accel_err load_file(struct history *h, char **warning);

enum accel_err history_new(struct history **out, int interval_s,
                           int retention_s, const char *path, char **warning)
{
    struct history *h;
    if (warning)
        *warning = NULL;
    if (interval_s < 1 || retention_s < interval_s)
        return ACCEL_EINVAL;
    h = xcalloc(1, sizeof(*h));
    pthread_mutex_init(&h->lock, NULL);
    h->interval = interval_s;
    h->cap = (size_t)(retention_s / interval_s);
    if (h->cap < 2)
        h->cap = 2;
    h->ts = xcalloc(h->cap, sizeof(*h->ts));
    h->max_bytes = HISTORY_DEFAULT_MAX_BYTES;
    h->index = strmap_new();
    h->path = path ? xstrdup(path) : NULL;
    if (h->path)
        load_file(h, warning);
    *out = h;
    return ACCEL_OK;
}

void history_free(struct history *h)
{
    if (h == NULL)
        return;
    for (size_t i = 0; i < h->ns; i++)
        series_free(h->s[i]);
    free(h->s);
    strmap_free(h->index);
    missed_clear(h);
    free(h->ts);
    free(h->path);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

int history_interval(const struct history *h)
{
    return h->interval;
}

size_t history_capacity(const struct history *h)
{
    return h->cap;
}

void history_set_max_bytes(struct history *h, size_t bytes)
{
    pthread_mutex_lock(&h->lock);
    h->max_bytes = bytes;
    pthread_mutex_unlock(&h->lock);
}

size_t history_max_bytes(const struct history *h)
{
    return h->max_bytes;
}

size_t history_value_bytes(const struct history *h)
{
    return h->values;
}

size_t history_nmissed(const struct history *h)
{
    return h->nmissed;
}

const struct history_missed *history_missed_at(const struct history *h,
                                               size_t i)
{
    return i < h->nmissed ? &h->missed[i] : NULL;
}

/* ---- recording ---- */

static void record_dev(struct history *h, size_t slot, int64_t t,
                       const struct history_dev_sample *v, size_t *dropped)
{
    struct series *x = series_get(h, HISTORY_DEVICE, v->id, dropped);
    if (x == NULL)
        return;
    set_str(x, S_DEVICE, v->id);
    set_str(x, S_NODE, v->node);
    set_str(x, S_MODEL, v->model);
    if (v->driver && *v->driver)
        set_str(x, S_DRIVER, v->driver);
    x->index = v->index;
    put(x, slot, HF_UTIL, v->util, t);
    put(x, slot, HF_MEM_USED, v->mem_used, t);
    put(x, slot, HF_MEM_TOTAL, v->mem_total, t);
    put(x, slot, HF_POWER, v->power, t);
    put(x, slot, HF_TEMP, v->temp, t);
    x->seen = true;
}

static void record_bind(struct history *h, size_t slot, int64_t t,
                        const struct history_bind_sample *v, size_t *dropped)
{
    char *key = xasprintf("%s\x1f%s", v->app, v->device);
    struct series *x = series_get(h, HISTORY_BINDING, key, dropped);
    free(key);
    if (x == NULL)
        return;
    set_str(x, S_DEVICE, v->device);
    set_str(x, S_NODE, v->node);
    set_str(x, S_APP, v->app);
    set_str(x, S_OWNER, v->owner);
    x->index = -1;
    put(x, slot, HF_B_USED, v->used, t);
    put(x, slot, HF_B_ALLOC, v->alloc, t);
    put(x, slot, HF_B_CORES, v->cores, t);
    put(x, slot, HF_B_UTIL, v->util, t);
    x->seen = true;
}

/* Null in this slot for every series not recorded in it. */
static void null_unseen(struct history *h, size_t slot)
{
    for (size_t i = 0; i < h->ns; i++) {
        struct series *x = h->s[i];
        if (x->seen) {
            x->seen = false;
            continue;
        }
        for (int f = 0; f < nfields(x->kind); f++) {
            const struct field_fmt *ff = fmt_of(x->kind, f);
            store_raw(x->data[f] + slot * ff->width, ff->width,
                      null_of(ff->width));
        }
    }
}

size_t history_record(struct history *h, int64_t t,
                      const struct history_dev_sample *devs, size_t ndevs,
                      const struct history_bind_sample *binds, size_t nbinds)
{
    size_t dropped = 0, slot;

    pthread_mutex_lock(&h->lock);
    if (t <= 0 || t > UINT32_MAX ||
        (h->count > 0 && t <= history_time(h, h->count - 1))) {
        pthread_mutex_unlock(&h->lock);
        return 0;
    }
    slot = h->head;
    h->ts[slot] = (uint32_t)t;
    h->head = (h->head + 1) % h->cap;
    if (h->count < h->cap)
        h->count++;
    missed_clear(h);
    for (size_t i = 0; i < ndevs; i++)
        record_dev(h, slot, t, &devs[i], &dropped);
    for (size_t i = 0; i < nbinds; i++)
        record_bind(h, slot, t, &binds[i], &dropped);
    null_unseen(h, slot);
    drop_stale(h, history_time(h, 0));
    pthread_mutex_unlock(&h->lock);
    return dropped;
}

/* ---- readers ---- */

void history_lock(struct history *h)
{
    pthread_mutex_lock(&h->lock);
}

void history_unlock(struct history *h)
{
    pthread_mutex_unlock(&h->lock);
}

size_t history_nsamples(const struct history *h)
{
    return h->count;
}

size_t history_nseries(const struct history *h)
{
    return h->ns;
}

/* Ring slot of sample j (0 = oldest). */
static size_t slot_of(const struct history *h, size_t j)
{
    return (h->head + h->cap - h->count + j) % h->cap;
}

int64_t history_time(const struct history *h, size_t j)
{
    return h->ts[slot_of(h, j)];
}

size_t history_find(const struct history *h, int64_t t)
{
    size_t lo = 0, hi = h->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (history_time(h, mid) < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void history_meta(const struct history *h, size_t s, struct history_meta *out)
{
    const struct series *x = h->s[s];
    bool dev = x->kind == HISTORY_DEVICE;
    *out = (struct history_meta){
        .kind = x->kind,
        .device = x->str[S_DEVICE],
        .node = x->str[S_NODE],
        .model = x->str[S_MODEL],
        .driver = x->str[S_DRIVER],
        .index = x->index,
        .app = dev ? NULL : x->str[S_APP],
        .owner = dev ? NULL : x->str[S_OWNER],
    };
}

double history_value(const struct history *h, size_t s, int f, size_t j)
{
    const struct series *x = h->s[s];
    const struct field_fmt *ff;
    if (f < 0 || f >= nfields(x->kind) || j >= h->count)
        return NAN;
    ff = fmt_of(x->kind, f);
    return decode(ff, load_raw(x->data[f] + slot_of(h, j) * ff->width,
                               ff->width));
}

double history_mean(const struct history *h, size_t s, int f, size_t j0,
                    size_t j1)
{
    double sum = 0;
    size_t n = 0;
    for (size_t j = j0; j < j1 && j < h->count; j++) {
        double v = history_value(h, s, f, j);
        if (!isnan(v)) {
            sum += v;
            n++;
        }
    }
    return n ? sum / (double)n : NAN;
}

size_t history_bytes(struct history *h)
{
    size_t b = sizeof(*h) + h->cap * sizeof(*h->ts);
    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->ns; i++) {
        const struct series *x = h->s[i];
        b += sizeof(*x) + strlen(x->key) + 1;
        for (int f = 0; f < nfields(x->kind); f++)
            b += h->cap * fmt_of(x->kind, f)->width;
    }
    b += h->cs * sizeof(*h->s);
    pthread_mutex_unlock(&h->lock);
    return b;
}

/* ---- the file ---- */

struct wbuf {
    uint8_t *p;      /* bytes */
    size_t len, cap; /* used, allocated */
};

static void wb_put(struct wbuf *b, const void *v, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, v, n);
    b->len += n;
}

static void wb_u32(struct wbuf *b, uint32_t v)
{
    wb_put(b, &v, 4);
}

static void wb_str(struct wbuf *b, const char *s)
{
    size_t n = strlen(s);
    uint16_t l = (uint16_t)(n > 65535 ? 65535 : n);
    wb_put(b, &l, 2);
    wb_put(b, s, l);
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void serialize_series(const struct history *h, const struct series *x,
                             struct wbuf *b)
{
    uint8_t kind = (uint8_t)x->kind;
    int32_t idx = x->index;
    wb_put(b, &kind, 1);
    wb_put(b, &idx, 4);
    for (int i = 0; i < 6; i++)
        wb_str(b, x->str[i]);
    for (int f = 0; f < nfields(x->kind); f++) {
        uint8_t w = fmt_of(x->kind, f)->width;
        for (size_t j = 0; j < h->count; j++)
            wb_put(b, x->data[f] + slot_of(h, j) * w, w);
    }
}

/* The whole history as the file's bytes (caller holds the lock). */
static void serialize(const struct history *h, struct wbuf *b)
{
    uint64_t sum;
    wb_put(b, HISTORY_MAGIC, 8);
    wb_u32(b, HISTORY_VERSION);
    wb_u32(b, (uint32_t)h->interval);
    wb_u32(b, (uint32_t)h->count);
    wb_u32(b, (uint32_t)h->ns);
    for (size_t j = 0; j < h->count; j++)
        wb_u32(b, (uint32_t)history_time(h, j));
    for (size_t i = 0; i < h->ns; i++)
        serialize_series(h, h->s[i], b);
    sum = fnv1a(b->p, b->len);
    wb_put(b, &sum, 8);
}

static enum accel_err write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return ACCEL_EIO;
        p += w;
        n -= (size_t)w;
    }
    return ACCEL_OK;
}

static void sync_dir(const char *path)
{
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    int fd;
    if (slash == NULL) {
        free(dir);
        return;
    }
    *slash = '\0';
    fd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

static enum accel_err write_file(const char *path, const struct wbuf *b,
                                 char **cause)
{
    char *tmp = xasprintf("%s.tmp", path);
    enum accel_err err = ACCEL_EIO;
    const char *step = "open";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0)
        goto out;
    step = "write";
    if (write_all(fd, b->p, b->len) != ACCEL_OK)
        goto out;
    step = "fsync";
    if (fsync(fd) != 0)
        goto out;
    step = "close";
    if (close(fd) != 0) {
        fd = -1;
        goto out;
    }
    fd = -1;
    step = "rename";
    if (rename(tmp, path) != 0)
        goto out;
    sync_dir(path);
    err = ACCEL_OK;
out:
    if (err != ACCEL_OK && cause)
        *cause = xasprintf("cannot save the metric history to %s (%s: %s)",
                           path, step, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (err != ACCEL_OK)
        unlink(tmp);
    free(tmp);
    return err;
}

enum accel_err history_save(struct history *h, char **cause)
{
    struct wbuf b = {NULL, 0, 0};
    enum accel_err err;
    if (h->path == NULL)
        return ACCEL_OK;
    pthread_mutex_lock(&h->lock);
    serialize(h, &b);
    pthread_mutex_unlock(&h->lock);
    err = write_file(h->path, &b, cause);
    free(b.p);
    return err;
}

/* ---- reading the file back ---- */

struct rbuf {
    const uint8_t *p;   /* bytes */
    size_t len, off;    /* size, read position */
    bool bad;           /* ran past the end */
};

static const uint8_t *rb_take(struct rbuf *r, size_t n)
{
    const uint8_t *p;
    if (r->bad || n > r->len - r->off) {
        r->bad = true;
        return NULL;
    }
    p = r->p + r->off;
    r->off += n;
    return p;
}

static uint32_t rb_u32(struct rbuf *r)
{
    const uint8_t *p = rb_take(r, 4);
    uint32_t v = 0;
    if (p)
        memcpy(&v, p, 4);
    return v;
}

static char *rb_str(struct rbuf *r)
{
    const uint8_t *p = rb_take(r, 2);
    uint16_t l = 0;
    if (p)
        memcpy(&l, p, 2);
    p = rb_take(r, l);
    return p ? xasprintf("%.*s", (int)l, (const char *)p) : xstrdup("");
}

/* Fields of a kind in a file of this version (later ones stay null). */
static int file_fields(enum history_kind kind, uint32_t version)
{
    if (kind == HISTORY_BINDING && version == 1)
        return HF_B_CORES + 1;
    return nfields(kind);
}

/* The key of a series read back from its strings. */
static char *key_of(enum history_kind kind, char *const str[6])
{
    return kind == HISTORY_DEVICE ? xstrdup(str[S_DEVICE])
                                  : xasprintf("%s\x1f%s", str[S_APP],
                                              str[S_DEVICE]);
}

/*
 * One series of the file: n stored samples of which the newest `keep`
 * go to slots 0..keep-1 (the ring is rebuilt from slot 0).
 */
static bool read_series(struct history *h, struct rbuf *r, size_t n,
                        size_t keep, uint32_t version)
{
    const uint8_t *kp = rb_take(r, 1), *ip = rb_take(r, 4);
    char *str[6], *key;
    struct series *x;
    int32_t idx = 0;
    if (kp == NULL || ip == NULL || *kp > HISTORY_BINDING)
        return false;
    memcpy(&idx, ip, 4);
    for (int i = 0; i < 6; i++)
        str[i] = rb_str(r);
    key = key_of((enum history_kind)*kp, str);
    x = series_new(h, (enum history_kind)*kp, key);
    free(key);
    x->index = idx;
    for (int i = 0; i < 6; i++) {
        free(x->str[i]);
        x->str[i] = str[i];
    }
    for (int f = 0; f < file_fields(x->kind, version); f++) {
        uint8_t w = fmt_of(x->kind, f)->width;
        const uint8_t *p = rb_take(r, n * w);
        if (p == NULL)
            return false;
        memcpy(x->data[f], p + (n - keep) * w, keep * w);
        for (size_t j = 0; j < keep; j++)
            if (load_raw(x->data[f] + j * w, w) != null_of(w))
                x->last_seen = h->ts[j];
    }
    return true;
}

static bool decode_file(struct history *h, const uint8_t *p, size_t len)
{
    struct rbuf r = {p, len >= 8 ? len - 8 : 0, 0, len < 8};
    uint64_t sum = 0;
    uint32_t n, nser, version;
    size_t keep;
    const uint8_t *t;

    if (r.bad || len < 28 || memcmp(p, HISTORY_MAGIC, 8) != 0)
        return false;
    memcpy(&sum, p + len - 8, 8);
    if (sum != fnv1a(p, len - 8))
        return false;
    rb_take(&r, 8);
    version = rb_u32(&r);
    if (version < 1 || version > HISTORY_VERSION)
        return false;
    rb_u32(&r); /* the interval it was written with: times say it all */
    n = rb_u32(&r);
    nser = rb_u32(&r);
    t = rb_take(&r, (size_t)n * 4);
    if (t == NULL || nser > HISTORY_MAX_SERIES)
        return false;
    keep = n < h->cap ? n : h->cap;
    memcpy(h->ts, t + (size_t)(n - keep) * 4, keep * 4);
    h->count = keep;
    h->head = keep % h->cap;
    for (uint32_t i = 0; i < nser; i++)
        if (!read_series(h, &r, n, keep, version))
            return false;
    return r.off == r.len;
}

static uint8_t *read_whole(const char *path, size_t *len, bool *absent)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long n = -1;
    *absent = f == NULL && errno == ENOENT;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = xmalloc((size_t)n + 1);
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *len = (size_t)n;
    }
    fclose(f);
    return buf;
}

/* Forget whatever a failed decode left behind. */
static void reset(struct history *h)
{
    for (size_t i = 0; i < h->ns; i++)
        series_free(h->s[i]);
    h->ns = 0;
    h->values = 0;
    h->count = h->head = 0;
    strmap_free(h->index);
    h->index = strmap_new();
}

static enum accel_err load_file(struct history *h, char **warning)
{
    size_t len = 0;
    bool absent = false;
    uint8_t *buf = read_whole(h->path, &len, &absent);
    char *aside;

    if (buf != NULL && decode_file(h, buf, len)) {
        free(buf);
        return ACCEL_OK;
    }
    free(buf);
    reset(h);
    if (absent)
        return ACCEL_OK; /* first start */
    aside = xasprintf("%s.corrupt", h->path);
    rename(h->path, aside);
    if (warning)
        *warning = xasprintf("the metric history %s does not decode; it was "
                             "moved to %s and the history starts empty",
                             h->path, aside);
    free(aside);
    return ACCEL_EIO;
}
