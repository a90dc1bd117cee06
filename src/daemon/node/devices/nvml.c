/* SPDX-License-Identifier: MIT */
/*
 * nvml.c: NVML loaded with dlopen, symbols resolved once from one X-macro
 * list (STYLE 19), NVML return codes turned into accel errors and sentences
 * here and nowhere else. No NVIDIA header is used: the few types and constants
 * below are declared from the documented NVML ABI.
 */
#include "common/accel_setup.h"
#include "daemon/node/devices/nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* ---- The slice of the NVML ABI we use (nvml.h, CUDA 12) ---- */
typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0
#define NVML_TEMPERATURE_GPU 0
#define NVML_VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFULL

struct nvml_memory_abi {       /* nvmlMemory_t */
    unsigned long long total;  /* bytes */
    unsigned long long free;   /* bytes */
    unsigned long long used;   /* bytes */
};

struct nvml_utilization_abi { /* nvmlUtilization_t */
    unsigned int gpu;          /* percent */
    unsigned int memory;       /* percent */
};

struct nvml_putil_abi {         /* nvmlProcessUtilizationSample_t */
    unsigned int pid;
    unsigned long long ts;     /* CPU timestamp, microseconds */
    unsigned int sm, mem, enc, dec; /* percent */
};

struct nvml_proc_v1_abi {      /* nvmlProcessInfo_v1_t */
    unsigned int pid;
    unsigned long long used;
};

struct nvml_proc_v2_abi {      /* nvmlProcessInfo_t, used by _v2 and _v3 */
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance;
    unsigned int compute_instance;
};

typedef nvmlReturn_t (*nvml_procs_fn)(nvmlDevice_t, unsigned int *, void *);

struct nvml_pci_abi {          /* nvmlPciInfo_t (nvmlDeviceGetPciInfo_v3) */
    char bus_id_legacy[16];    /* NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE */
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];           /* "00000000:03:00.0" */
};

struct nvml_set_limits_abi {   /* nvmlSetMemoryLimits_v1_t */
    const char *name_space;    /* the cgroup's full path */
    unsigned long long soft;   /* bytes */
    unsigned long long hard;   /* bytes */
};

struct nvml_get_limits_abi {   /* nvmlGetMemoryLimits_v1_t */
    const char *name_space;    /* the cgroup's full path */
    unsigned long long soft, hard; /* bytes */
    unsigned long long used;   /* currentUsed, bytes */
};

#define NVML_DEVICE_MEMORY_LIMIT_MAX 0xFFFFFFFFFFFFFFFFULL /* no limit */

/*
 * XX(name, return, params, required). A required symbol missing makes
 * nvml_open fail; an optional one makes only the call that needs it fail.
 */
#define NVML_SYMBOLS(XX)                                                       \
    XX(nvmlInit_v2, nvmlReturn_t, (void), 1)                                   \
    XX(nvmlShutdown, nvmlReturn_t, (void), 1)                                  \
    XX(nvmlErrorString, const char *, (nvmlReturn_t), 1)                       \
    XX(nvmlDeviceGetCount_v2, nvmlReturn_t, (unsigned int *), 1)               \
    XX(nvmlDeviceGetHandleByIndex_v2, nvmlReturn_t,                            \
       (unsigned int, nvmlDevice_t *), 1)                                      \
    XX(nvmlDeviceGetUUID, nvmlReturn_t, (nvmlDevice_t, char *, unsigned int),  \
       1)                                                                      \
    XX(nvmlDeviceGetName, nvmlReturn_t, (nvmlDevice_t, char *, unsigned int),  \
       1)                                                                      \
    XX(nvmlDeviceGetMemoryInfo, nvmlReturn_t,                                  \
       (nvmlDevice_t, struct nvml_memory_abi *), 1)                            \
    XX(nvmlDeviceGetUtilizationRates, nvmlReturn_t,                            \
       (nvmlDevice_t, struct nvml_utilization_abi *), 0)                       \
    XX(nvmlDeviceGetPowerUsage, nvmlReturn_t, (nvmlDevice_t, unsigned int *),  \
       0)                                                                      \
    XX(nvmlDeviceGetEnforcedPowerLimit, nvmlReturn_t,                          \
       (nvmlDevice_t, unsigned int *), 0)                                      \
    XX(nvmlDeviceGetPowerManagementLimit, nvmlReturn_t,                        \
       (nvmlDevice_t, unsigned int *), 0)                                      \
    XX(nvmlDeviceGetTemperature, nvmlReturn_t,                                 \
       (nvmlDevice_t, int, unsigned int *), 0)                                 \
    XX(nvmlDeviceGetProcessUtilization, nvmlReturn_t,                         \
       (nvmlDevice_t, struct nvml_putil_abi *, unsigned int *,                 \
        unsigned long long), 0)                                                \
    XX(nvmlDeviceGetTotalEccErrors, nvmlReturn_t,                              \
       (nvmlDevice_t, int, int, unsigned long long *), 0)                      \
    XX(nvmlDeviceGetHandleByUUID, nvmlReturn_t,                                \
       (const char *, nvmlDevice_t *), 0)                                      \
    XX(nvmlDeviceGetPciInfo_v3, nvmlReturn_t,                                  \
       (nvmlDevice_t, struct nvml_pci_abi *), 0)                               \
    XX(nvmlDeviceSetMemoryLimits_v1, nvmlReturn_t,                             \
       (nvmlDevice_t, struct nvml_set_limits_abi *), 0)                        \
    XX(nvmlDeviceGetMemoryLimits_v1, nvmlReturn_t,                             \
       (nvmlDevice_t, struct nvml_get_limits_abi *), 0)                        \
    XX(nvmlSystemGetDriverVersion, nvmlReturn_t, (char *, unsigned int), 0)    \
    XX(nvmlSystemGetCudaDriverVersion_v2, nvmlReturn_t, (int *), 0)            \
    XX(nvmlSystemGetCudaDriverVersion, nvmlReturn_t, (int *), 0)               \
    XX(nvmlDeviceGetComputeRunningProcesses_v3, nvmlReturn_t,                  \
       (nvmlDevice_t, unsigned int *, void *), 0)                              \
    XX(nvmlDeviceGetComputeRunningProcesses_v2, nvmlReturn_t,                  \
       (nvmlDevice_t, unsigned int *, void *), 0)                              \
    XX(nvmlDeviceGetComputeRunningProcesses, nvmlReturn_t,                     \
       (nvmlDevice_t, unsigned int *, void *), 0)                              \
    XX(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlReturn_t,                 \
       (nvmlDevice_t, unsigned int *, void *), 0)                              \
    XX(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlReturn_t,                 \
       (nvmlDevice_t, unsigned int *, void *), 0)                              \
    XX(nvmlDeviceGetGraphicsRunningProcesses, nvmlReturn_t,                    \
       (nvmlDevice_t, unsigned int *, void *), 0)

#define NVML_FIELD_(name, ret, params, req) ret(*name) params;

struct nvml {
    void *dl;                  /* dlopen handle */
    struct {
        NVML_SYMBOLS(NVML_FIELD_)
    } fn;                      /* resolved entry points; NULL when absent */
    nvml_procs_fn compute;     /* best compute-process query, or NULL */
    nvml_procs_fn graphics;    /* best graphics-process query, or NULL */
    size_t proc_size;          /* sizeof the struct those two fill */
};

#define NVML_DEFAULT_LIB "libnvidia-ml.so.1"
#define NVML_PROC_TRIES 4 /* INSUFFICIENT_SIZE retries as processes appear */

static void set_cause(char **cause, char *msg)
{
    if (cause != NULL)
        *cause = msg;
    else
        free(msg);
}

static const char *err_string(struct nvml *n, nvmlReturn_t rc)
{
    const char *s = n->fn.nvmlErrorString(rc);
    return s != NULL ? s : "unknown NVML error";
}

static char *call_failed(struct nvml *n, const char *call, nvmlReturn_t rc)
{
    return xasprintf("%s failed: %s", call, err_string(n, rc));
}

/* Resolve every symbol; returns the first missing required one, or NULL. */
static const char *resolve(struct nvml *n)
{
    const char *missing = NULL;
#define NVML_RESOLVE_(name, ret, params, req)                                  \
    *(void **)(&n->fn.name) = dlsym(n->dl, #name);                             \
    if (n->fn.name == NULL && (req) && missing == NULL)                        \
        missing = #name;
    NVML_SYMBOLS(NVML_RESOLVE_)
#undef NVML_RESOLVE_
    return missing;
}

/* Prefer the newest process queries; v1 fills a smaller struct. */
static void pick_process_queries(struct nvml *n)
{
    n->proc_size = sizeof(struct nvml_proc_v2_abi);
    n->compute = n->fn.nvmlDeviceGetComputeRunningProcesses_v3;
    if (n->compute == NULL)
        n->compute = n->fn.nvmlDeviceGetComputeRunningProcesses_v2;
    n->graphics = n->fn.nvmlDeviceGetGraphicsRunningProcesses_v3;
    if (n->graphics == NULL)
        n->graphics = n->fn.nvmlDeviceGetGraphicsRunningProcesses_v2;
    if (n->compute == NULL && n->graphics == NULL) {
        n->proc_size = sizeof(struct nvml_proc_v1_abi);
        n->compute = n->fn.nvmlDeviceGetComputeRunningProcesses;
        n->graphics = n->fn.nvmlDeviceGetGraphicsRunningProcesses;
    }
}

enum accel_err nvml_open(struct nvml **out, char **cause)
{
    const char *lib = getenv("ACCEL_NVML_LIB");
    struct nvml *n;
    const char *missing;
    nvmlReturn_t rc;

    if (lib == NULL || *lib == '\0')
        lib = NVML_DEFAULT_LIB;
    n = xcalloc(1, sizeof(*n));
    n->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (n->dl == NULL) {
        const char *why = dlerror();
        set_cause(cause, xasprintf("%s not found (no NVIDIA driver on this "
                                   "machine): %s", lib, why ? why : "?"));
        free(n);
        return ACCEL_ENOTFOUND;
    }
    missing = resolve(n);
    if (missing != NULL) {
        set_cause(cause, xasprintf("%s lacks %s (driver too old?)", lib,
                                   missing));
        dlclose(n->dl);
        free(n);
        return ACCEL_ENOTSUP;
    }
    rc = n->fn.nvmlInit_v2();
    if (rc != NVML_SUCCESS) {
        set_cause(cause, call_failed(n, "nvmlInit_v2", rc));
        dlclose(n->dl);
        free(n);
        return ACCEL_EIO;
    }
    pick_process_queries(n);
    *out = n;
    return ACCEL_OK;
}

void nvml_close(struct nvml *n)
{
    if (n == NULL)
        return;
    n->fn.nvmlShutdown();
    dlclose(n->dl);
    free(n);
}

enum accel_err nvml_driver_version(struct nvml *n, char *buf, size_t len,
                                   char **cause)
{
    nvmlReturn_t rc;

    if (len == 0)
        return ACCEL_EINVAL;
    buf[0] = '\0';
    if (n->fn.nvmlSystemGetDriverVersion == NULL) {
        set_cause(cause, xstrdup("NVML lacks nvmlSystemGetDriverVersion"));
        return ACCEL_ENOTSUP;
    }
    rc = n->fn.nvmlSystemGetDriverVersion(buf, (unsigned int)len);
    if (rc != NVML_SUCCESS) {
        buf[0] = '\0';
        set_cause(cause, call_failed(n, "nvmlSystemGetDriverVersion", rc));
        return ACCEL_EIO;
    }
    buf[len - 1] = '\0';
    return ACCEL_OK;
}

enum accel_err nvml_cuda_version(struct nvml *n, char *buf, size_t len,
                                 char **cause)
{
    int (*get)(int *) = n->fn.nvmlSystemGetCudaDriverVersion_v2;
    const char *call = "nvmlSystemGetCudaDriverVersion_v2";
    int v = 0;
    nvmlReturn_t rc;

    if (len == 0)
        return ACCEL_EINVAL;
    buf[0] = '\0';
    if (get == NULL) {
        get = n->fn.nvmlSystemGetCudaDriverVersion;
        call = "nvmlSystemGetCudaDriverVersion";
    }
    if (get == NULL) {
        set_cause(cause, xstrdup("NVML lacks nvmlSystemGetCudaDriverVersion"));
        return ACCEL_ENOTSUP;
    }
    rc = get(&v);
    if (rc != NVML_SUCCESS) {
        set_cause(cause, call_failed(n, call, rc));
        return ACCEL_EIO;
    }
    /* NVML encodes 12.4 as 12040. */
    snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
    return ACCEL_OK;
}

static void mark_unhealthy(struct nvml *n, struct nvml_gpu *g,
                           const char *call, nvmlReturn_t rc)
{
    if (!g->healthy)
        return; /* keep the first cause */
    g->healthy = 0;
    snprintf(g->health_cause, sizeof(g->health_cause), "%s failed: %s", call,
             err_string(n, rc));
}

/* Uncorrected volatile ECC errors since the driver loaded: the card is bad. */
static void check_ecc(struct nvml *n, nvmlDevice_t d, struct nvml_gpu *g)
{
    unsigned long long count = 0;
    nvmlReturn_t rc;

    if (n->fn.nvmlDeviceGetTotalEccErrors == NULL)
        return;
    rc = n->fn.nvmlDeviceGetTotalEccErrors(
        d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count);
    if (rc != NVML_SUCCESS || count == 0 || !g->healthy)
        return; /* not supported (consumer cards) or clean */
    g->healthy = 0;
    snprintf(g->health_cause, sizeof(g->health_cause),
             "%llu uncorrected ECC errors", count);
}

static enum nvml_na na_of(nvmlReturn_t rc)
{
    return rc == NVML_ERROR_NOT_SUPPORTED ? NVML_NA_UNSUPPORTED
                                          : NVML_NA_ERROR;
}

const char *nvml_na_reason(enum nvml_na na)
{
    switch (na) {
    case NVML_NA_NONE: return "";
    case NVML_NA_MISSING: return "not reported by NVML (the driver lacks the call)";
    case NVML_NA_UNSUPPORTED: return "not reported by NVML (not supported by this GPU)";
    case NVML_NA_ERROR: return "not reported by NVML (the query failed)";
    case NVML_NA_NOT_NVML: return "not an NVML device";
    case NVML_NA_NOT_SEEN: return "not measured (NVML has not reported this GPU)";
    case NVML_NA_SYSFS_ABSENT: return "not reported by the driver (no such sysfs file)";
    case NVML_NA_SYSFS_BAD: return "not reported (the driver's sysfs file is malformed; see the log)";
    }
    return "unknown";
}

static void query_utilization(struct nvml *n, nvmlDevice_t d,
                              struct nvml_gpu *g)
{
    struct nvml_utilization_abi u = { 0, 0 };
    nvmlReturn_t rc;

    g->utilization = -1;
    g->util_na = NVML_NA_MISSING;
    if (n->fn.nvmlDeviceGetUtilizationRates == NULL)
        return;
    rc = n->fn.nvmlDeviceGetUtilizationRates(d, &u);
    g->util_na = rc == NVML_SUCCESS ? NVML_NA_NONE : na_of(rc);
    if (rc == NVML_SUCCESS)
        g->utilization = u.gpu > 100 ? 100 : (int)u.gpu;
    else if (rc != NVML_ERROR_NOT_SUPPORTED)
        mark_unhealthy(n, g, "nvmlDeviceGetUtilizationRates", rc);
}

/* Power draw and limit (enforced, else the management limit), milliwatts.
 * A failure leaves the value unknown; it does not make the GPU unhealthy. */
static void query_power(struct nvml *n, nvmlDevice_t d, struct nvml_gpu *g)
{
    unsigned int mw = 0;
    nvmlReturn_t rc;

    g->power_mw = -1;
    g->power_na = NVML_NA_MISSING;
    if (n->fn.nvmlDeviceGetPowerUsage != NULL) {
        rc = n->fn.nvmlDeviceGetPowerUsage(d, &mw);
        g->power_na = rc == NVML_SUCCESS ? NVML_NA_NONE : na_of(rc);
        if (rc == NVML_SUCCESS)
            g->power_mw = mw;
    }
    g->power_limit_mw = -1;
    g->limit_na = NVML_NA_MISSING;
    rc = NVML_ERROR_NOT_SUPPORTED;
    if (n->fn.nvmlDeviceGetEnforcedPowerLimit != NULL)
        rc = n->fn.nvmlDeviceGetEnforcedPowerLimit(d, &mw);
    if (rc != NVML_SUCCESS && n->fn.nvmlDeviceGetPowerManagementLimit != NULL)
        rc = n->fn.nvmlDeviceGetPowerManagementLimit(d, &mw);
    if (n->fn.nvmlDeviceGetEnforcedPowerLimit == NULL &&
        n->fn.nvmlDeviceGetPowerManagementLimit == NULL)
        return;
    g->limit_na = rc == NVML_SUCCESS ? NVML_NA_NONE : na_of(rc);
    if (rc == NVML_SUCCESS)
        g->power_limit_mw = mw;
}

static void query_temperature(struct nvml *n, nvmlDevice_t d,
                              struct nvml_gpu *g)
{
    unsigned int c = 0;
    nvmlReturn_t rc;

    g->temperature = -1;
    g->temp_na = NVML_NA_MISSING;
    if (n->fn.nvmlDeviceGetTemperature == NULL)
        return;
    rc = n->fn.nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &c);
    g->temp_na = rc == NVML_SUCCESS ? NVML_NA_NONE : na_of(rc);
    if (rc == NVML_SUCCESS)
        g->temperature = (int)c;
}

/* The PCI address, lower case "dddd:bb:dd.f" (the kernel's spelling, as
 * dmem.capacity names regions); "" when unknown. Not a health matter. */
static void query_pci(struct nvml *n, nvmlDevice_t d, struct nvml_gpu *g)
{
    struct nvml_pci_abi pci;
    unsigned dom, bus, dev, fn;

    memset(&pci, 0, sizeof pci);
    if (n->fn.nvmlDeviceGetPciInfo_v3 == NULL ||
        n->fn.nvmlDeviceGetPciInfo_v3(d, &pci) != NVML_SUCCESS)
        return;
    pci.bus_id[sizeof pci.bus_id - 1] = '\0';
    if (sscanf(pci.bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4)
        snprintf(g->pci, sizeof g->pci, "%04x:%02x:%02x.%x", dom & 0xffff,
                 bus & 0xff, dev & 0x1f, fn & 7);
}

/* Fill one entry; every failure marks the device unhealthy. */
static void query_device(struct nvml *n, unsigned i, struct nvml_gpu *g)
{
    struct nvml_memory_abi mem = { 0, 0, 0 };
    nvmlDevice_t d = NULL;
    nvmlReturn_t rc;

    memset(g, 0, sizeof(*g));
    g->index = i;
    g->healthy = 1;
    g->utilization = g->temperature = -1;
    g->power_mw = g->power_limit_mw = -1;
    g->util_na = g->power_na = g->limit_na = g->temp_na = NVML_NA_ERROR;
    rc = n->fn.nvmlDeviceGetHandleByIndex_v2(i, &d);
    if (rc != NVML_SUCCESS) {
        mark_unhealthy(n, g, "nvmlDeviceGetHandleByIndex_v2", rc);
        return;
    }
    rc = n->fn.nvmlDeviceGetUUID(d, g->uuid, sizeof(g->uuid));
    if (rc != NVML_SUCCESS) {
        g->uuid[0] = '\0';
        mark_unhealthy(n, g, "nvmlDeviceGetUUID", rc);
    }
    g->uuid[sizeof(g->uuid) - 1] = '\0';
    rc = n->fn.nvmlDeviceGetName(d, g->name, sizeof(g->name));
    if (rc != NVML_SUCCESS) {
        g->name[0] = '\0';
        mark_unhealthy(n, g, "nvmlDeviceGetName", rc);
    }
    g->name[sizeof(g->name) - 1] = '\0';
    rc = n->fn.nvmlDeviceGetMemoryInfo(d, &mem);
    if (rc == NVML_SUCCESS) {
        g->memory_total = mem.total;
        g->memory_used = mem.used;
    } else if (rc == NVML_ERROR_NOT_SUPPORTED) {
        g->memory_unified = 1; /* GB10 and other unified-memory parts */
    } else {
        mark_unhealthy(n, g, "nvmlDeviceGetMemoryInfo", rc);
    }
    query_pci(n, d, g);
    query_utilization(n, d, g);
    query_power(n, d, g);
    query_temperature(n, d, g);
    check_ecc(n, d, g);
}

enum accel_err nvml_scan(struct nvml *n, struct nvml_gpu **out, size_t *count,
                         char **cause)
{
    unsigned int c = 0;
    struct nvml_gpu *gpus = NULL;
    nvmlReturn_t rc = n->fn.nvmlDeviceGetCount_v2(&c);

    if (rc != NVML_SUCCESS) {
        set_cause(cause, call_failed(n, "nvmlDeviceGetCount_v2", rc));
        return ACCEL_EIO;
    }
    if (c > 0) {
        gpus = xcalloc(c, sizeof(*gpus));
        for (unsigned i = 0; i < c; i++)
            query_device(n, i, &gpus[i]);
    }
    *out = gpus;
    *count = c;
    return ACCEL_OK;
}

/* Find a device handle by UUID: NVML's lookup, or a scan by index. */
static enum accel_err find_device(struct nvml *n, const char *uuid,
                                  nvmlDevice_t *d, char **cause)
{
    char buf[NVML_UUID_LEN];
    unsigned int c = 0;
    nvmlReturn_t rc;

    if (n->fn.nvmlDeviceGetHandleByUUID != NULL &&
        n->fn.nvmlDeviceGetHandleByUUID(uuid, d) == NVML_SUCCESS)
        return ACCEL_OK;
    rc = n->fn.nvmlDeviceGetCount_v2(&c);
    if (rc != NVML_SUCCESS) {
        set_cause(cause, call_failed(n, "nvmlDeviceGetCount_v2", rc));
        return ACCEL_EIO;
    }
    for (unsigned i = 0; i < c; i++) {
        if (n->fn.nvmlDeviceGetHandleByIndex_v2(i, d) != NVML_SUCCESS)
            continue;
        if (n->fn.nvmlDeviceGetUUID(*d, buf, sizeof(buf)) != NVML_SUCCESS)
            continue;
        buf[sizeof(buf) - 1] = '\0';
        if (strcmp(buf, uuid) == 0)
            return ACCEL_OK;
    }
    set_cause(cause, xasprintf("no NVIDIA device %s", uuid));
    return ACCEL_ENOTFOUND;
}

/* Read one process list into a raw buffer; *raw is allocated by us. */
static nvmlReturn_t read_list(struct nvml *n, nvml_procs_fn fn, nvmlDevice_t d,
                              unsigned char **raw, unsigned int *cnt)
{
    unsigned int cap = 16;
    nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_SIZE;

    *raw = NULL;
    for (int t = 0; t < NVML_PROC_TRIES; t++) {
        free(*raw);
        *raw = xcalloc(cap, n->proc_size);
        *cnt = cap;
        rc = fn(d, cnt, *raw);
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE)
            break;
        cap = (*cnt > cap ? *cnt : cap) * 2; /* more may start meanwhile */
    }
    if (rc != NVML_SUCCESS) {
        free(*raw);
        *raw = NULL;
        *cnt = 0;
    } else if (*cnt > cap) {
        *cnt = cap; /* defensive: never trust a count past our buffer */
    }
    return rc;
}

static void raw_entry(const struct nvml *n, const unsigned char *raw,
                      unsigned i, unsigned *pid, unsigned long long *used)
{
    if (n->proc_size == sizeof(struct nvml_proc_v1_abi)) {
        const struct nvml_proc_v1_abi *p = (const void *)raw;
        *pid = p[i].pid;
        *used = p[i].used;
    } else {
        const struct nvml_proc_v2_abi *p = (const void *)raw;
        *pid = p[i].pid;
        *used = p[i].used;
    }
}

static int has_pid(const struct nvml_proc *v, size_t len, pid_t pid)
{
    for (size_t i = 0; i < len; i++)
        if (v[i].pid == pid)
            return 1;
    return 0;
}

/* Append a list's entries to *v (capacity grows as needed), no duplicates. */
static void append_list(const struct nvml *n, const unsigned char *raw,
                        unsigned cnt, int graphics, struct nvml_proc **v,
                        size_t *len)
{
    unsigned pid;
    unsigned long long used;

    *v = xrealloc(*v, (*len + cnt + 1) * sizeof(**v));
    for (unsigned i = 0; i < cnt; i++) {
        raw_entry(n, raw, i, &pid, &used);
        if (has_pid(*v, *len, (pid_t)pid))
            continue;
        (*v)[*len].pid = (pid_t)pid;
        (*v)[*len].used_memory = used == NVML_VALUE_NOT_AVAILABLE_ULL ? 0 : used;
        (*v)[*len].graphics = graphics;
        (*len)++;
    }
}

/* Query one list (compute or graphics) and append it. */
static enum accel_err collect(struct nvml *n, nvml_procs_fn fn,
                              nvmlDevice_t d, int graphics,
                              struct nvml_proc **v, size_t *len, char **cause)
{
    unsigned char *raw = NULL;
    unsigned int cnt = 0;
    nvmlReturn_t rc;

    if (fn == NULL)
        return ACCEL_OK;
    rc = read_list(n, fn, d, &raw, &cnt);
    if (rc == NVML_ERROR_NOT_SUPPORTED)
        return ACCEL_OK;
    if (rc != NVML_SUCCESS) {
        set_cause(cause, call_failed(n, graphics
                                            ? "nvmlDeviceGetGraphicsRunningProcesses"
                                            : "nvmlDeviceGetComputeRunningProcesses",
                                     rc));
        return ACCEL_EIO;
    }
    append_list(n, raw, cnt, graphics, v, len);
    free(raw);
    return ACCEL_OK;
}

enum accel_err nvml_memory_now(struct nvml *n, const char *uuid,
                           uint64_t *total, uint64_t *used, char **cause)
{
    struct nvml_memory_abi mem;
    nvmlDevice_t d = NULL;
    enum accel_err err = find_device(n, uuid, &d, cause);
    nvmlReturn_t rc;

    if (err != ACCEL_OK)
        return err;
    rc = n->fn.nvmlDeviceGetMemoryInfo(d, &mem);
    if (rc != NVML_SUCCESS) {
        set_cause(cause, call_failed(n, "nvmlDeviceGetMemoryInfo", rc));
        return rc == NVML_ERROR_NOT_SUPPORTED ? ACCEL_ENOTSUP : ACCEL_EIO;
    }
    *total = mem.total;
    *used = mem.used;
    return ACCEL_OK;
}

enum accel_err nvml_processes(struct nvml *n, const char *uuid,
                              struct nvml_proc **out, size_t *count,
                              char **cause)
{
    struct nvml_proc *v = NULL;
    size_t len = 0;
    nvmlDevice_t d = NULL;
    enum accel_err err;

    if (n->compute == NULL && n->graphics == NULL) {
        set_cause(cause, xstrdup("NVML lacks the running-process queries"));
        return ACCEL_ENOTSUP;
    }
    err = find_device(n, uuid, &d, cause);
    if (err != ACCEL_OK)
        return err;
    err = collect(n, n->compute, d, 0, &v, &len, cause);
    if (err == ACCEL_OK)
        err = collect(n, n->graphics, d, 1, &v, &len, cause);
    if (err != ACCEL_OK) {
        free(v);
        return err;
    }
    if (len == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    *count = len;
    return ACCEL_OK;
}

/* Keep the newest sample of each pid; returns the new length. */
static size_t newest_per_pid(struct nvml_putil_abi *v, unsigned cnt,
                             struct nvml_putil *out)
{
    size_t len = 0;
    for (unsigned i = 0; i < cnt; i++) {
        size_t k = 0;
        while (k < len && out[k].pid != (pid_t)v[i].pid)
            k++;
        if (k == len) {
            out[len].pid = (pid_t)v[i].pid;
            out[len++].sm = v[i].sm > 100 ? 100 : v[i].sm;
            v[k].ts = v[i].ts; /* k < i: the kept sample's time */
        } else if (v[i].ts >= v[k].ts) {
            out[k].sm = v[i].sm > 100 ? 100 : v[i].sm;
            v[k].ts = v[i].ts;
        }
    }
    return len;
}

enum accel_err nvml_process_util(struct nvml *n, const char *uuid,
                                 uint64_t since_us, struct nvml_putil **out,
                                 size_t *count, char **cause)
{
    struct nvml_putil_abi *v = NULL;
    unsigned int cnt = 0;
    nvmlDevice_t d = NULL;
    nvmlReturn_t rc;
    enum accel_err err;

    if (n->fn.nvmlDeviceGetProcessUtilization == NULL) {
        set_cause(cause, xstrdup("NVML lacks nvmlDeviceGetProcessUtilization"));
        return ACCEL_ENOTSUP;
    }
    err = find_device(n, uuid, &d, cause);
    if (err != ACCEL_OK)
        return err;
    rc = n->fn.nvmlDeviceGetProcessUtilization(d, NULL, &cnt, since_us);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE && cnt > 0) {
        cnt += 8; /* more may come meanwhile */
        v = xcalloc(cnt, sizeof(*v));
        rc = n->fn.nvmlDeviceGetProcessUtilization(d, v, &cnt, since_us);
    }
    *out = NULL;
    *count = 0;
    if (rc == NVML_SUCCESS && cnt > 0 && v != NULL) {
        *out = xcalloc(cnt, sizeof(**out));
        *count = newest_per_pid(v, cnt, *out);
    } else if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_FOUND &&
               !(rc == NVML_ERROR_INSUFFICIENT_SIZE && cnt == 0)) {
        free(v);
        set_cause(cause, call_failed(n, "nvmlDeviceGetProcessUtilization", rc));
        return rc == NVML_ERROR_NOT_SUPPORTED ? ACCEL_ENOTSUP : ACCEL_EIO;
    }
    free(v);
    return ACCEL_OK;
}

/* ---- per-cgroup memory limits (driver r615 on) ---- */

bool nvml_has_memory_limits(const struct nvml *n)
{
    return n != NULL && n->fn.nvmlDeviceSetMemoryLimits_v1 != NULL;
}

/* The device for a memory-limit call: ACCEL_ENOTSUP when the driver lacks
 * the call, else find_device's answer. */
static enum accel_err limits_device(struct nvml *n, bool present,
                                    const char *call, const char *uuid,
                                    nvmlDevice_t *d, char **cause)
{
    if (!present) {
        set_cause(cause, xasprintf("this driver's NVML has no %s", call));
        return ACCEL_ENOTSUP;
    }
    return find_device(n, uuid, d, cause);
}

/* NVML's answer to a memory-limit call as an accel error. */
static enum accel_err limits_result(struct nvml *n, const char *call,
                                    nvmlReturn_t rc, char **cause)
{
    if (rc == NVML_SUCCESS)
        return ACCEL_OK;
    set_cause(cause, call_failed(n, call, rc));
    return ACCEL_EIO;
}

enum accel_err nvml_set_memory_limit(struct nvml *n, const char *uuid,
                                     const char *cgroup_dir, uint64_t hard,
                                     char **cause)
{
    struct nvml_set_limits_abi lim = {cgroup_dir, hard,
                                      hard ? hard
                                           : NVML_DEVICE_MEMORY_LIMIT_MAX};
    nvmlDevice_t d = NULL;
    enum accel_err err = limits_device(
        n, n->fn.nvmlDeviceSetMemoryLimits_v1 != NULL,
        "nvmlDeviceSetMemoryLimits_v1", uuid, &d, cause);

    if (err != ACCEL_OK)
        return err;
    return limits_result(n, "nvmlDeviceSetMemoryLimits_v1",
                         n->fn.nvmlDeviceSetMemoryLimits_v1(d, &lim), cause);
}

enum accel_err nvml_cgroup_memory_used(struct nvml *n, const char *uuid,
                                       const char *cgroup_dir, uint64_t *out,
                                       char **cause)
{
    struct nvml_get_limits_abi lim = {cgroup_dir, 0, 0, 0};
    nvmlDevice_t d = NULL;
    enum accel_err err = limits_device(
        n, n->fn.nvmlDeviceGetMemoryLimits_v1 != NULL,
        "nvmlDeviceGetMemoryLimits_v1", uuid, &d, cause);

    if (err == ACCEL_OK)
        err = limits_result(n, "nvmlDeviceGetMemoryLimits_v1",
                            n->fn.nvmlDeviceGetMemoryLimits_v1(d, &lim),
                            cause);
    if (err == ACCEL_OK)
        *out = lim.used;
    return err;
}
