/* SPDX-License-Identifier: MIT */
/*
 * nvml.h: NVIDIA device discovery through NVML, loaded at run time.
 *
 * acceld has no build-time dependency on NVIDIA: nvml_open() dlopen()s
 * libnvidia-ml.so.1 (or the file named by $ACCEL_NVML_LIB, which the tests
 * point at a fake), resolves the symbols it uses once, and calls nvmlInit_v2.
 * A missing library, a missing symbol or an NVML error is an error code plus
 * an allocated sentence, never a crash. This module only reports what the
 * driver says; it keeps no inventory and makes no placement decision.
 *
 * Thread-safety: NVML itself is thread-safe, and a struct nvml is immutable
 * after nvml_open() (the resolved symbol table), so nvml_scan(),
 * nvml_processes() and the version getters may be called from several threads
 * on one handle. nvml_close() must not race any other call on the handle.
 */
#ifndef ACCEL_DAEMON_NODE_DEVICES_NVML_H
#define ACCEL_DAEMON_NODE_DEVICES_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"

#define NVML_UUID_LEN 96  /* NVML_DEVICE_UUID_V2_BUFFER_SIZE is 96 */
#define NVML_NAME_LEN 96  /* NVML_DEVICE_NAME_V2_BUFFER_SIZE is 96 */
#define NVML_CAUSE_LEN 160 /* room for one "nvmlX failed: Y" sentence */
#define NVML_PCI_LEN 16    /* "0000:03:00.0" */

struct nvml; /* opaque: the loaded library and its resolved symbols */

/* Why a telemetry value (utilization, power, temperature) is unknown. */
enum nvml_na {
    NVML_NA_NONE = 0,    /* known */
    NVML_NA_MISSING,     /* the driver's library lacks the call */
    NVML_NA_UNSUPPORTED, /* NVML says this GPU does not support it */
    NVML_NA_ERROR,       /* the call failed */
    NVML_NA_NOT_NVML,    /* not an NVML device (inventory, other vendor) */
    NVML_NA_NOT_SEEN,    /* an NVML device not measured yet, or gone */
    NVML_NA_SYSFS_ABSENT, /* a DRM device whose driver offers no such file */
    NVML_NA_SYSFS_BAD    /* a DRM device whose sysfs file is malformed */
};

/*
 * The sentence for a reason, e.g. "not reported by NVML (not supported by
 * this GPU)"; "" for NVML_NA_NONE. Static storage.
 */
const char *nvml_na_reason(enum nvml_na na);

/* One device as NVML reports it at scan time. */
struct nvml_gpu {
    char uuid[NVML_UUID_LEN];  /* "GPU-..."; "" when even the UUID query failed */
    unsigned index;            /* NVML index (enumeration order) */
    char name[NVML_NAME_LEN];  /* model, e.g. "NVIDIA GeForce RTX 4090"; "" if unknown */
    uint64_t memory_total;     /* bytes of VRAM; 0 if unknown */
    uint64_t memory_used;      /* bytes in use, all processes */
    int memory_unified;        /* 1: the memory query answered NOT_SUPPORTED,
                                  as on unified-memory parts (GB10); the
                                  two figures above are then 0 */
    int utilization;           /* GPU busy %, 0..100; -1 when unknown */
    int64_t power_mw;          /* board power draw, milliwatts; -1 unknown */
    int64_t power_limit_mw;    /* enforced power limit, milliwatts; -1 unknown */
    int temperature;           /* GPU core temperature, degrees C; -1 unknown */
    enum nvml_na util_na;      /* why utilization is unknown */
    enum nvml_na power_na;     /* why power_mw is unknown */
    enum nvml_na limit_na;     /* why power_limit_mw is unknown */
    enum nvml_na temp_na;      /* why temperature is unknown */
    int healthy;               /* 1 healthy, 0 not (see health_cause) */
    char health_cause[NVML_CAUSE_LEN]; /* why unhealthy; "" when healthy */
    char pci[NVML_PCI_LEN];    /* PCI address "0000:03:00.0" (nvmlDeviceGet
                                  PciInfo_v3, lower case), "" unknown */
};

/* One process that holds a context on a device. */
struct nvml_proc {
    pid_t pid;          /* host pid as NVML reports it */
    uint64_t used_memory; /* bytes; 0 when NVML does not say (NVML_VALUE_NOT_AVAILABLE) */
    int graphics;       /* 1 from the graphics list, 0 from the compute list */
};

/* One process's share of a device's SMs (nvmlDeviceGetProcessUtilization). */
struct nvml_putil {
    pid_t pid;          /* host pid */
    unsigned sm;        /* percent of the device's SM time */
};

/*
 * Load NVML and initialize it.
 *   out    set to a new handle, only on success; free with nvml_close().
 *   cause  on failure, set to an allocated sentence the caller frees, e.g.
 *          "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)",
 *          "libnvidia-ml.so.1 lacks nvmlDeviceGetUUID",
 *          "nvmlInit_v2 failed: Driver Not Loaded". May be NULL.
 * Returns ACCEL_OK; ACCEL_ENOTFOUND (no library); ACCEL_ENOTSUP (a required
 * symbol is missing); ACCEL_EIO (nvmlInit_v2 failed).
 */
enum accel_err nvml_open(struct nvml **out, char **cause);

/* nvmlShutdown, dlclose and free. Accepts NULL. */
void nvml_close(struct nvml *n);

/*
 * Driver version string ("550.54.14") into buf (len bytes, terminated).
 * Returns ACCEL_OK, ACCEL_ENOTSUP (symbol absent) or ACCEL_EIO; on error buf
 * holds "" and *cause (if non-NULL) an allocated sentence.
 */
enum accel_err nvml_driver_version(struct nvml *n, char *buf, size_t len,
                                   char **cause);

/*
 * CUDA version the driver supports as "12.4" into buf. Same contract as
 * nvml_driver_version().
 */
enum accel_err nvml_cuda_version(struct nvml *n, char *buf, size_t len,
                                 char **cause);

/*
 * Enumerate the devices.
 *   out    set to a new array of *count entries (caller frees with free());
 *          set only on success, NULL when there are none.
 *   count  number of entries.
 *   cause  on failure, an allocated sentence (may be NULL).
 * A device whose queries fail is still listed, with healthy = 0 and the
 * failing call in health_cause; a device reporting uncorrected volatile ECC
 * errors is unhealthy too. Only a failure to count the devices is an error:
 * ACCEL_EIO.
 */
enum accel_err nvml_scan(struct nvml *n, struct nvml_gpu **out, size_t *count,
                         char **cause);

/*
 * The memory of the device with this UUID as the driver counts it now
 * (nvmlDeviceGetMemoryInfo): its total and what all processes hold.
 * ACCEL_OK; ACCEL_ENOTFOUND (no such UUID); ACCEL_ENOTSUP (a unified-memory
 * part); ACCEL_EIO, each with *cause.
 */
enum accel_err nvml_memory_now(struct nvml *n, const char *uuid,
                           uint64_t *total, uint64_t *used, char **cause);

/*
 * The processes running on the device with this UUID: compute then graphics
 * (a pid in both lists is reported once, from the compute list).
 *   out    new array (caller frees), NULL when none; set only on success.
 * Returns ACCEL_OK; ACCEL_ENOTFOUND (no such UUID); ACCEL_ENOTSUP (no process
 * query in this driver); ACCEL_EIO (NVML error), each with *cause.
 */
enum accel_err nvml_processes(struct nvml *n, const char *uuid,
                              struct nvml_proc **out, size_t *count,
                              char **cause);

/*
 * Per-process SM utilization of the device with this UUID, from the samples
 * NVML took after since_us (CPU time, microseconds since the epoch); the
 * newest sample of each pid.
 *   out    new array (caller frees), NULL when none; set only on success.
 * Returns ACCEL_OK (no sample: count 0); ACCEL_ENOTSUP (no such call in
 * this driver, or the GPU does not support it); ACCEL_ENOTFOUND (no such
 * UUID); ACCEL_EIO (NVML error), each with *cause.
 */
enum accel_err nvml_process_util(struct nvml *n, const char *uuid,
                                 uint64_t since_us, struct nvml_putil **out,
                                 size_t *count, char **cause);

/*
 * Per-cgroup memory limits (driver r615 on): does this driver's NVML export
 * nvmlDeviceSetMemoryLimits_v1? Looked up at load, never required.
 */
bool nvml_has_memory_limits(const struct nvml *n);

/*
 * Hold the cgroup whose directory is cgroup_dir (the full path, as NVML's
 * nameSpace wants it) to hard bytes of the device with this UUID (soft =
 * hard: the quota acceld admitted is the app's); hard 0 clears the limits
 * (soft 0, hard NVML_DEVICE_MEMORY_LIMIT_MAX). Root only, no MIG handle.
 * Returns ACCEL_OK; ACCEL_ENOTSUP (no such call in this driver);
 * ACCEL_ENOTFOUND (no such UUID); ACCEL_EIO (NVML refused), each with *cause.
 */
enum accel_err nvml_set_memory_limit(struct nvml *n, const char *uuid,
                                     const char *cgroup_dir, uint64_t hard,
                                     char **cause);

/*
 * The device memory the driver counts for that cgroup on the device
 * (nvmlDeviceGetMemoryLimits_v1's currentUsed), set only on success. Same
 * errors as nvml_set_memory_limit.
 */
enum accel_err nvml_cgroup_memory_used(struct nvml *n, const char *uuid,
                                       const char *cgroup_dir, uint64_t *out,
                                       char **cause);

#endif /* ACCEL_DAEMON_NODE_DEVICES_NVML_H */
