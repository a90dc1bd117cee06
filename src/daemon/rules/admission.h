/* SPDX-License-Identifier: MIT */
/*
 * admission.h: the pure admission and placement rules of SPEC 2 (targets,
 * free memory per mode, node pressure with the time-slicing VRAM term,
 * availability, automatic placement, selection validation, preflight).
 *
 * No I/O, no locks, no allocation except where a function says so. The
 * daemon keeps a struct adm_snapshot up to date incrementally (allocated /
 * nbound per device, used per node) under its own lock and calls these
 * functions on it. To validate a change to an app that already holds
 * allocations (legacy rebind), the caller first takes the app's own rows out
 * of the snapshot (adm_snapshot_release) and puts them back afterwards.
 *
 * Memory is in bytes, CPU in millicores.
 */
#ifndef ACCEL_DAEMON_RULES_ADMISSION_H
#define ACCEL_DAEMON_RULES_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"

#define ADM_PRESSURE_PERMILLE 900 /* 90 % scheduling threshold */
#define ADM_MAX_SELECTION 64      /* items in one selection */

struct strmap;
struct adm_index;

/* One resource dimension of a node. */
struct adm_res {
    uint64_t total; /* capacity */
    uint64_t used;  /* current use (measured or declared + running apps) */
};

struct adm_node {
    const char *name;     /* node name (owned by the caller) */
    struct adm_res mem;   /* bytes */
    struct adm_res cpu;   /* millicores */
    struct adm_res disk;  /* bytes */
    bool enabled;         /* accelerators take new placements (gpu enable) */
    uint32_t first_dev;   /* index of its first device in snapshot.devs */
    uint32_t ndev;        /* its devices are devs[first_dev .. +ndev) */
};

struct adm_device {
    const char *id;           /* device id (owned by the caller) */
    uint32_t node;            /* index into snapshot.nodes */
    enum accel_type type;     /* accelerator type */
    enum accel_support st;    /* current sharing mode */
    bool healthy;             /* health "yes" */
    bool present;             /* false: declared/seen before, gone now */
    uint64_t memory;          /* dedicated VRAM, or 75 % of RAM */
    uint64_t allocated;       /* Σ allocation.memory on the device */
    uint32_t nbound;          /* allocation rows on the device */
    uint32_t overcommit;      /* elastic memory (SPEC 4.4), MemorySlice only:
                                 the quotas may sum to memory × overcommit /
                                 ADM_OVERCOMMIT_ONE; 0 or ADM_OVERCOMMIT_ONE
                                 = off, at most ADM_OVERCOMMIT_MAX */
};

#define ADM_OVERCOMMIT_ONE 1000u /* overcommit in thousandths: 1.0 */
#define ADM_OVERCOMMIT_MAX 4000u /* 4.0, the most SPEC 4.4 allows */

/*
 * What a MemorySlice device's quotas may sum to: memory × overcommit
 * (saturating), or memory when overcommit is off (0, 1.0) or out of range.
 */
uint64_t adm_memslice_capacity(const struct adm_device *d);

/*
 * The largest quota a MemorySlice device can still grant: what its
 * capacity has left, and never more than the card (each quota stays a hard
 * ceiling of the card's memory, overcommit or not).
 */
uint64_t adm_memslice_free(const struct adm_device *d);

/*
 * The cluster as the rules see it. Devices of one node are contiguous.
 * node_index maps a node name to its index, dev_index a device id to its
 * index (both maintained by the caller, may be NULL for a linear search).
 */
struct adm_snapshot {
    struct adm_node *nodes;
    size_t nnodes;
    struct adm_device *devs;
    size_t ndevs;
    const struct strmap *node_index;
    const struct strmap *dev_index;
    struct adm_index *index; /* free capacity (adm_index_build), owned by
                                whoever built it; NULL: adm_place scans */
};

/* An app's requirement for one accelerator type (SPEC 2.1). */
struct adm_req {
    enum accel_type type;
    uint64_t req_gpu, lim_gpu;   /* GPU memory (types with VRAM only) */
    uint64_t req_mem, lim_mem;   /* RAM */
    uint64_t req_cpu, lim_cpu;   /* millicores */
    uint64_t req_disk, lim_disk; /* bytes */
    bool multi_cards;            /* nvidia only */
    bool multi_nodes;            /* nvidia only; implies multi_cards */
};

enum adm_level { ADM_LEVEL_LIMIT = 0, ADM_LEVEL_REQUIRED = 1, ADM_LEVEL_NONE = 2 };

/* One selected card; memory 0 = default (requiredGpu) in MemorySlice. */
struct adm_sel {
    const char *node;
    const char *device;
    uint64_t memory;
};

/* Validation codes of SPEC 2.6, in check order. */
#define ADM_CODE_MAP(XX)                                                       \
    XX(VALID, "valid")                                                         \
    XX(EMPTY_SELECTION, "empty-selection")                                     \
    XX(TOO_MANY_SELECTIONS, "too-many-selections")                             \
    XX(NODE_NOT_FOUND, "node-not-found")                                       \
    XX(DEVICE_NOT_FOUND, "device-not-found")                                   \
    XX(DUPLICATE_SELECTION, "duplicate-selection")                             \
    XX(MULTI_CARD_NOT_SUPPORTED, "multi-card-not-supported")                   \
    XX(MULTI_NODE_NOT_SUPPORTED, "multi-node-not-supported")                   \
    XX(NON_NVIDIA_SINGLE, "non-nvidia-must-single-selection")                  \
    XX(DEVICE_UNHEALTHY, "device-unhealthy")                                   \
    XX(GPU_TYPE_MISMATCH, "gpu-type-mismatch")                                 \
    XX(EXCLUSIVE_ALREADY_BOUND, "exclusive-already-bound")                     \
    XX(MEMORY_REQUIRED, "memory-required")                                     \
    XX(MEMORY_BELOW_REQUIRED, "memory-below-required")                         \
    XX(TOTAL_VRAM_BELOW, "total-vram-below-requirement")                       \
    XX(DEVICE_VRAM_INSUFFICIENT, "device-vram-insufficient")                   \
    XX(AGGREGATE_VRAM_INSUFFICIENT, "aggregate-vram-insufficient")             \
    XX(DEVICE_MEMORY_INSUFFICIENT, "device-memory-insufficient")               \
    XX(NODE_PRESSURE, "node-pressure")

enum adm_code {
#define ADM_CODE_ENUM_(n, s) ADM_##n,
    ADM_CODE_MAP(ADM_CODE_ENUM_)
#undef ADM_CODE_ENUM_
    ADM_CODE_COUNT
};

/* "device-vram-insufficient" etc. */
const char *adm_code_name(enum adm_code c);

enum adm_dim_kind { ADM_DIM_CPU = 0, ADM_DIM_MEMORY = 1, ADM_DIM_DISK = 2 };

/* One dimension of the node-pressure check (SPEC 2.3). */
struct adm_dim {
    uint64_t capacity;  /* total */
    uint64_t used;      /* used now */
    uint64_t required;  /* what the app needs there (memory: + TimeSlice VRAM) */
    uint64_t available; /* max(0, capacity * 0.9 - used) */
    bool pressured;     /* used + required > capacity * 0.9 (or overflow) */
};

struct adm_pressure {
    uint32_t node;             /* index of the node */
    struct adm_dim dims[3];    /* by enum adm_dim_kind */
};

/* The outcome of a validation. */
struct adm_verdict {
    enum adm_code code;           /* ADM_VALID when it passes */
    char subject[2 * ACCEL_ID_MAX + 2]; /* "<n>", "<d>" or "<n>/<d>"; "" if none */
    struct adm_pressure pressure; /* set for ADM_NODE_PRESSURE */
};

/* "node-pressure:olares", or just "valid". Writes at most len bytes. */
void adm_verdict_format(const struct adm_verdict *v, char *buf, size_t len);
/* "Memory: Total 46.89 Gi, Used 7.41 Gi, Needed 36 Gi" for each pressured
 * dimension (memory first), "; "-separated. */
void adm_pressure_format(const struct adm_pressure *p, char *buf, size_t len);

/* An allocation row to write: device index and memory as stored. */
struct adm_row {
    uint32_t dev;    /* index into snapshot.devs */
    uint64_t memory; /* MemorySlice quota; 0 for whole-card Exclusive/TimeSlice */
};

/* The target at a level: GPU memory for types with VRAM, else RAM (2.1). */
uint64_t adm_target(const struct adm_req *r, enum adm_level level);

/* Free memory of a device by its mode (2.2). */
uint64_t adm_device_free(const struct adm_device *d);

/*
 * Node pressure of placing r on node n with extra_mem more memory needed
 * (Σ VRAM of the TimeSlice cards chosen there). Fills *out; returns true when
 * any dimension is pressured.
 */
bool adm_node_pressure(const struct adm_snapshot *s, uint32_t node,
                       const struct adm_req *r, uint64_t extra_mem,
                       struct adm_pressure *out);

/*
 * Validate a selection (2.6). Always fills *verdict. When valid, writes one
 * row per item (sorted by snapshot order: node index, then device index)
 * into rows[nsel] and returns true; otherwise rows is untouched and returns
 * false. More than ADM_MAX_SELECTION items give "too-many-selections" (not a
 * SPEC code: the HTTP layer should refuse such a body before). The exact
 * conditions and their order are in docs/internals/admission.md.
 */
bool adm_validate(const struct adm_snapshot *s, const struct adm_req *r,
                  const struct adm_sel *sel, size_t nsel,
                  struct adm_verdict *verdict, struct adm_row *rows);

enum adm_policy { ADM_POLICY_BINPACK = 0, ADM_POLICY_SPREAD = 1 };

/*
 * Automatic placement (2.5). Writes up to max selection items into out
 * (pointing into the snapshot's names) and their count into *nout. Returns
 * true when a placement was found. The result always passes adm_validate.
 */
bool adm_place(const struct adm_snapshot *s, const struct adm_req *r,
               enum adm_policy policy, struct adm_sel *out, size_t max,
               size_t *nout);

/* Apply rows (after a successful validation) to the snapshot: allocated,
 * nbound, and node usage for r (and the index, when there is one).
 * adm_snapshot_release undoes it. */
void adm_snapshot_apply(struct adm_snapshot *s, const struct adm_req *r,
                        const struct adm_row *rows, size_t n);
void adm_snapshot_release(struct adm_snapshot *s, const struct adm_req *r,
                          const struct adm_row *rows, size_t n);

/*
 * The free-capacity index (admission_int.h has its layout). With it,
 * adm_place reads a few candidates instead of every card; its answer is
 * the same card (or cards) the scan picks. Whoever writes a device's st,
 * healthy, present, memory, allocated, nbound or overcommit, or a node's enabled or
 * mem figures, other than through adm_snapshot_apply/release (which keep
 * it current), calls adm_index_update_node (or _dev) afterwards; adding
 * nodes or devices needs adm_index_build again.
 *
 * adm_index_build: (re)builds s->index for s as it is now, freeing the
 * old one. Allocates (O(devices)); ACCEL_ENOMEM leaves s->index NULL.
 * adm_index_free: frees s->index, sets it NULL (NULL: nothing to do).
 * adm_index_clone: to->index = a copy of from->index (NULL if none);
 * ACCEL_ENOMEM leaves to->index NULL.
 * adm_index_update_node / _dev: refresh what the index holds of one node
 * (its devices, its usage and enabled flag); O(its devices x log).
 * adm_index_check: true when the index equals a fresh build (or is NULL);
 * for tests: it allocates a scratch index.
 */
enum accel_err adm_index_build(struct adm_snapshot *s);
void adm_index_free(struct adm_snapshot *s);
enum accel_err adm_index_clone(const struct adm_snapshot *from,
                               struct adm_snapshot *to);
void adm_index_update_node(struct adm_snapshot *s, uint32_t node);
void adm_index_update_dev(struct adm_snapshot *s, uint32_t dev);
bool adm_index_check(const struct adm_snapshot *s);

/* Availability (2.4). */
enum adm_node_status {
    ADM_NODE_AVAILABLE = 0,
    ADM_NODE_NOT_AVAILABLE = 1,
    ADM_NODE_NOT_ENOUGH = 2,
};
const char *adm_node_status_name(enum adm_node_status s); /* "not_available" */

enum adm_scope { ADM_SCOPE_CARD = 0, ADM_SCOPE_SINGLE_NODE = 1, ADM_SCOPE_CROSS_NODE = 2 };
const char *adm_scope_name(enum adm_scope s); /* "single-node-cards" */

struct adm_dev_opt {
    uint32_t dev;             /* index into snapshot.devs */
    uint64_t available;       /* adm_device_free */
    enum adm_level fit_level; /* limit, required or none */
    bool operable;            /* may be selected now */
};

struct adm_node_opt {
    uint32_t node;                /* index into snapshot.nodes */
    enum adm_node_status status;  /* per 2.4 */
    uint32_t first_opt, nopt;     /* its devices in availability.devs */
};

struct adm_availability {
    bool schedulable;
    const char *reason;           /* static string or NULL when schedulable */
    enum adm_scope scope;
    struct adm_node_opt *nodes;   /* nodes having devices of the type */
    size_t nnodes;
    struct adm_dev_opt *devs;
    size_t ndevs;
};

/* Compute the availability of r. Allocates the arrays (release with
 * adm_availability_release). Returns ACCEL_OK or ACCEL_ENOMEM. */
enum accel_err adm_availability(const struct adm_snapshot *s,
                                const struct adm_req *r,
                                struct adm_availability *out);
void adm_availability_release(struct adm_availability *a);

/* Install mode plan (2.5): can this type run on this cluster at all? */
enum adm_plan_status {
    ADM_PLAN_INSTALLABLE = 0,     /* "installable" */
    ADM_PLAN_NO_MATCHING_NODE = 1,/* "no-matching-node" */
    ADM_PLAN_INSUFFICIENT = 2,    /* "insufficient-resources" */
};
const char *adm_plan_status_name(enum adm_plan_status s);
/* Total capacity (not free) decides: a card (or sum of cards for multi)
 * large enough for the required target exists on a node of the type. */
enum adm_plan_status adm_plan(const struct adm_snapshot *s,
                              const struct adm_req *r);

/* Preflight (2.8): simulate installing demands in order on a copy. */
struct adm_preflight {
    bool installable;
    size_t failed;                /* index of the failed demand */
    const char *reason;           /* in check order: "cluster-capacity",
                                     "cluster-pressure", "owner-quota" (the
                                     hook refused), "unschedulable",
                                     "node-pressure" */
    bool has_pressure;
    struct adm_pressure pressure; /* for node-pressure */
    bool has_cluster;
    struct adm_dim cluster[3];    /* for cluster-capacity and -pressure, by
                                     enum adm_dim_kind */
};
enum accel_err adm_preflight(const struct adm_snapshot *s,
                             const struct adm_req *demands, size_t n,
                             enum adm_policy policy, struct adm_preflight *out);
/* The owner quota of 2.8, which the snapshot does not know. check is
 * called twice for demand i, in demand order: first before placement with
 * rows NULL and min_gpu the least GPU memory the demand can hold (its
 * required target, 0 for types without VRAM); then once its rows[0..n)
 * are placed and validated and before they are applied, with the rows
 * (an Exclusive or Time-slicing card holds all of its memory). false fails
 * demand i with reason "owner-quota". check keeps its own running totals
 * in ctx, and counts a demand only at the second call. */
struct adm_preflight_hook {
    bool (*check)(void *ctx, size_t i, const struct adm_row *rows, size_t n,
                  uint64_t min_gpu);
    void *ctx;
};

/*
 * The cluster as one pool (2.8): capacity and use of cpu, memory and disk
 * summed over every node, into tot[] by enum adm_dim_kind (saturating).
 */
void adm_cluster_totals(const struct adm_snapshot *s, struct adm_res tot[3]);
/*
 * The cluster checks of 2.8 for r's cpu, memory and disk against tot[]:
 * capacity (physical: used + required > capacity) or pressure (the 90 %
 * threshold of 2.3). Fills out[3]; true when any dimension fails.
 */
bool adm_cluster_capacity(const struct adm_res tot[3], const struct adm_req *r,
                          struct adm_dim out[3]);
bool adm_cluster_pressure(const struct adm_res tot[3], const struct adm_req *r,
                          struct adm_dim out[3]);
/* adm_preflight with hook (NULL: none). */
enum accel_err adm_preflight_hooked(const struct adm_snapshot *s,
                                    const struct adm_req *demands, size_t n,
                                    enum adm_policy policy,
                                    const struct adm_preflight_hook *hook,
                                    struct adm_preflight *out);

/*
 * A live quota change (SPEC 4.4): row k of an app's rows[n] (requirement
 * r) to `memory` bytes.
 *   ADM_QUOTA_FIXED    the card is not Memory-slicing: its quota is the
 *                      whole card (Exclusive) or fixed (TimeSlice, 2.2)
 *   ADM_QUOTA_SAME     memory is the row's quota already
 *   ADM_QUOTA_CUT      lower: no check (it only gives memory back)
 *   ADM_QUOTA_RAISE    higher, and the selection of the rows with row k's
 *                      quota replaced passes adm_validate (2.6) with the
 *                      app's own rows not counted against it
 *   ADM_QUOTA_REFUSED  higher, and it does not: *v says why
 * *v is always filled (valid but for a refusal); out[n] gets the new rows
 * except for FIXED and REFUSED. The rows must be applied to s
 * (adm_snapshot_apply) as the app's binding: they are taken out for the
 * check and put back, so s is as it was on return.
 */
enum adm_quota {
    ADM_QUOTA_FIXED = 0,
    ADM_QUOTA_SAME = 1,
    ADM_QUOTA_CUT = 2,
    ADM_QUOTA_RAISE = 3,
    ADM_QUOTA_REFUSED = 4,
};
enum adm_quota adm_quota_change(struct adm_snapshot *s,
                                const struct adm_req *r,
                                const struct adm_row *rows, size_t n,
                                size_t k, uint64_t memory,
                                struct adm_verdict *v, struct adm_row *out);

#endif /* ACCEL_DAEMON_RULES_ADMISSION_H */
