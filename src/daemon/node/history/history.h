/* SPDX-License-Identifier: MIT */
/*
 * history.h: the bounded metric history of SPEC 5.5, kept by acceld itself.
 *
 * One ring of sample times shared by every series, and per series one
 * fixed-size array per field, written at the same slot: a write is a few
 * stores, memory is allocated once per series (capacity = retention /
 * interval slots), and the oldest sample is overwritten. Two kinds of
 * series: a device (utilization, memory used and total, power, temperature)
 * and a binding, one app on one device (memory used, memory allocated,
 * cores allocated, SM utilization of its processes); app and node aggregates are sums over them. Values are
 * stored as small integers (percent, KiB, deciwatts, degrees C) with an
 * all-ones pattern for "nothing measured" (null). The whole history is
 * written to one file with an atomic rename (history_save) and read back at
 * start, so it survives a restart; a corrupt file is set aside, not fatal
 * (docs/internals/history.md).
 *
 * It knows nothing of the daemon: the sampler (sampler.c) feeds it, the
 * routes (api_history.c) read it. Thread-safety: every function takes the
 * history's own lock, except the readers marked "caller holds the lock",
 * which run between history_lock() and history_unlock().
 */
#ifndef ACCEL_DAEMON_NODE_HISTORY_HISTORY_H
#define ACCEL_DAEMON_NODE_HISTORY_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"

struct history; /* opaque */

enum history_kind {
    HISTORY_DEVICE = 0, /* one GPU */
    HISTORY_BINDING = 1 /* one app on one GPU */
};

/* Fields of a device series. */
enum history_dev_field {
    HF_UTIL = 0,   /* utilization, percent */
    HF_MEM_USED,   /* bytes in use */
    HF_MEM_TOTAL,  /* bytes of memory */
    HF_POWER,      /* watts */
    HF_TEMP,       /* degrees C */
    HF_DEV_COUNT
};

/* Fields of a binding series. */
enum history_bind_field {
    HF_B_USED = 0, /* bytes the app uses on the device */
    HF_B_ALLOC,    /* bytes allocated to it (its quota, or the whole card) */
    HF_B_CORES,    /* percent of the card's cores allocated (100 or 0) */
    HF_B_UTIL,     /* percent of the card's SMs its processes used (NVML) */
    HF_BIND_COUNT
};

/* One device's measurement; a negative value = not measured (null). */
struct history_dev_sample {
    const char *id;       /* device id */
    const char *node;     /* node name */
    const char *model;    /* card model */
    const char *driver;   /* driver version, "" if unknown */
    int index;            /* NVML index, -1 if none */
    double util;          /* percent */
    double mem_used;      /* bytes */
    double mem_total;     /* bytes */
    double power;         /* watts */
    double temp;          /* degrees C */
};

/* One binding's measurement; negative = null. */
struct history_bind_sample {
    const char *app;      /* app name */
    const char *owner;    /* owner user or "shared" */
    const char *device;   /* device id */
    const char *node;     /* node of the device */
    double used;          /* bytes */
    double alloc;         /* bytes */
    double cores;         /* percent */
    double util;          /* percent of SM time (NVML per process) */
};

/* What a series is (pointers valid while the lock is held). */
struct history_meta {
    enum history_kind kind;
    const char *device;   /* device id (both kinds) */
    const char *node;     /* node name */
    const char *model;    /* device: model ("" for a binding) */
    const char *driver;   /* device: driver version ("" if unknown) */
    int index;            /* device: NVML index */
    const char *app;      /* binding: app name (NULL for a device) */
    const char *owner;    /* binding: owner (NULL for a device) */
};

/*
 * A history of retention_s seconds at one sample every interval_s seconds
 * (capacity retention_s / interval_s samples, at least 2), kept in memory
 * and, when path is not NULL, in that file: it is read now (a file written
 * with another interval or capacity is read too: its newest samples are
 * kept). A file that does not decode is renamed to <path>.corrupt and the
 * history starts empty; *warning then gets an allocated sentence (caller
 * frees; NULL otherwise).
 *   out  set to the new history (free with history_free). Never fails
 *        except on bad arguments: ACCEL_EINVAL (interval < 1, retention <
 *        interval).
 */
enum accel_err history_new(struct history **out, int interval_s,
                           int retention_s, const char *path, char **warning);

/* Free everything (does not save). NULL-safe. */
void history_free(struct history *h);

/* The sample interval in seconds. */
int history_interval(const struct history *h);

/* The capacity in samples. */
size_t history_capacity(const struct history *h);

/* The bound on the series' value arrays: HISTORY_DEFAULT_MAX_BYTES until
 * set (acceld --history-max-bytes). A lower bound drops no series already
 * kept: it refuses new ones. Takes the lock. */
#define HISTORY_DEFAULT_MAX_BYTES ((size_t)16 << 20)
void history_set_max_bytes(struct history *h, size_t bytes);

/* A series the last sample could not keep (the bound, or 4,096 series):
 * a device (key: its id) or a binding (key: app, 0x1f, device). */
struct history_missed {
    enum history_kind kind;
    char *key;
};

/*
 * Append one sample taken at unix time t (seconds): one slot of every
 * series. A series not in devs/binds gets null there; a new one is created
 * (its earlier slots null); a series whose newest measured value has left
 * the ring is dropped. A t not after the newest sample is ignored (clock
 * stepped back). The series' value arrays stay within the history's
 * byte bound (history_set_max_bytes; devices are recorded first): a
 * series that would go over is not recorded, the return value counts
 * those, and history_missed_at names them until the next sample.
 */
size_t history_record(struct history *h, int64_t t,
                      const struct history_dev_sample *devs, size_t ndevs,
                      const struct history_bind_sample *binds, size_t nbinds);

/*
 * Write the history to its file: <path>.tmp, fsync, rename, fsync of the
 * directory. ACCEL_OK (also when there is no path); ACCEL_EIO with *cause
 * (allocated) when a step fails; the old file is then left as it was.
 * Serialises under the lock, writes without it.
 */
enum accel_err history_save(struct history *h, char **cause);

/* Memory held by the history in bytes (rings and series). */
size_t history_bytes(struct history *h);

void history_lock(struct history *h);
void history_unlock(struct history *h);

/* ---- readers: caller holds the lock ---- */

/* The bound, and the series the last sample could not keep: i in
 * [0, history_nmissed), NULL past it. */
size_t history_max_bytes(const struct history *h);
size_t history_value_bytes(const struct history *h); /* against the bound */
size_t history_nmissed(const struct history *h);
const struct history_missed *history_missed_at(const struct history *h,
                                               size_t i);

/* Number of samples and of series now. */
size_t history_nsamples(const struct history *h);
size_t history_nseries(const struct history *h);

/* Time (unix s) of sample j, 0 = oldest. */
int64_t history_time(const struct history *h, size_t j);

/* The first sample at or after t (history_nsamples when none). */
size_t history_find(const struct history *h, int64_t t);

/* Series s: its identity. */
void history_meta(const struct history *h, size_t s, struct history_meta *out);

/*
 * Field f (enum history_dev_field or history_bind_field by kind) of series
 * s at sample j: the value in the units of the sample structs, or NAN
 * when nothing was measured.
 */
double history_value(const struct history *h, size_t s, int f, size_t j);

/*
 * The mean of the measured values of field f of series s over samples
 * [j0, j1), or NAN when none was measured there.
 */
double history_mean(const struct history *h, size_t s, int f, size_t j0,
                    size_t j1);

#endif /* ACCEL_DAEMON_NODE_HISTORY_HISTORY_H */
