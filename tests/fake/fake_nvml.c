/* SPDX-License-Identifier: MIT */
/*
 * fake_nvml.c: a fake libnvidia-ml.so.1 for tests. It exports the NVML entry
 * points acceld uses and answers from a text file named by $ACCEL_FAKE_NVML,
 * re-read on every call, so a test can make a GPU appear, vanish, fill up or
 * turn unhealthy while acceld runs. It is not a model of a GPU: it says what
 * the file says. Built with -DFAKE_NVML_OLD it lacks the _v2/_v3 process
 * queries and the CUDA version (an old driver); with -DFAKE_NVML_BROKEN it
 * also lacks nvmlDeviceGetUUID (a library acceld must refuse). The old
 * driver also lacks the power and temperature queries.
 *
 * The file, one directive per line, '#' starts a comment:
 *   driver 550.54.14              nvmlSystemGetDriverVersion
 *   cuda 12040                    nvmlSystemGetCudaDriverVersion(_v2)
 *   init_err 9                    nvmlInit_v2 returns this code
 *   count_err 999                 nvmlDeviceGetCount_v2 returns this code
 *   gpu uuid=GPU-a total=N used=N util=N ecc=N err=N uuid_err=N
 *       power=MW limit=MW temp=C name=REST
 *       one device, in index order; err = code every query of it returns
 *       (except the UUID, which has uuid_err); ecc = uncorrected volatile
 *       ECC count; util (default 0), power and limit (milliwatts) and temp
 *       (degrees C) may be "ns": that query answers NOT_SUPPORTED, as it
 *       does for power, limit and temp when they are not given; total=ns
 *       makes the memory query NOT_SUPPORTED (a unified-memory GB10); name= must
 *       be last and takes the rest of the line
 *   proc GPU-a PID USED compute|graphics
 *   card GPU-a PATH               GPU-a's compute processes are those the
 *                                 shim tests' stand-in card (its record at
 *                                 PATH: FAKE_CUDA_SHM, tests/shim/fake_cuda.h)
 *                                 holds memory for, with what each holds:
 *                                 the driver's count of what a program
 *                                 really took, whatever the shim saw;
 *                                 "card GPU-a PATH memory": the device's
 *                                 used memory is the card's too (read at
 *                                 every call: elastic memory's tests)
 *   proc_err GPU-a N              the process queries of that device return N
 *   putil GPU-a PID SM            a per-process utilization sample (percent);
 *                                 none on a device: NOT_FOUND, as NVML says
 *   limits_log PATH               nvmlDeviceSetMemoryLimits_v1 appends
 *                                 "set <uuid> <nameSpace> <soft> <hard>" there
 *   limits_err N                  nvmlDevice{Set,Get}MemoryLimits_v1 return N
 *   limits_used N                 nvmlDeviceGetMemoryLimits_v1's currentUsed
 * A gpu may say pci=0000:03:00.0: nvmlDeviceGetPciInfo_v3 answers it as
 * NVML spells it ("00000000:03:00.0"); without it, NOT_SUPPORTED. The old
 * driver lacks the PCI and memory-limit calls (a driver before r615).
 * A missing or empty file means a driver with no devices.
 */
#include "common/accel_setup.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shim tests' stand-in card (its per-process figures), under other
 * names than this file's own fake_proc. */
#define fake_proc card_proc
#define fake_app card_app
#include "../shim/fake_cuda.h"
#undef fake_proc
#undef fake_app

#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_MAX_GPUS 16
#define FAKE_MAX_PROCS 256

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_GPU_IS_LOST 15

struct fake_gpu {
    char uuid[96];            /* "GPU-..." */
    char name[96];            /* model */
    unsigned long long total; /* bytes */
    unsigned long long used;  /* bytes */
    unsigned util;            /* percent */
    int util_ns;              /* utilization query NOT_SUPPORTED */
    int mem_ns;               /* memory query NOT_SUPPORTED (unified, GB10) */
    long long power;          /* milliwatts; -1 = NOT_SUPPORTED */
    long long limit;          /* milliwatts; -1 = NOT_SUPPORTED */
    long long temp;           /* degrees C; -1 = NOT_SUPPORTED */
    unsigned long long ecc;   /* uncorrected volatile ECC errors */
    int err;                  /* every query returns this when non-zero */
    int uuid_err;             /* nvmlDeviceGetUUID returns this */
    int proc_err;             /* process queries return this */
    char pci[32];             /* "0000:03:00.0", "" none */
};

struct fake_proc {
    char uuid[96];            /* device */
    unsigned pid;             /* process id */
    unsigned long long used;  /* bytes */
    int graphics;             /* 1 graphics list, 0 compute list */
};

struct fake_putil {
    char uuid[96];            /* device */
    unsigned pid;             /* process id */
    unsigned sm;              /* percent */
};

#define FAKE_MAX_PUTIL 64

struct fake_state {
    char driver[80];          /* driver version string */
    int cuda;                 /* 12040 */
    int init_err;             /* nvmlInit_v2 result */
    int count_err;            /* nvmlDeviceGetCount_v2 result */
    int inited;               /* nvmlInit_v2 called and not shut down */
    struct fake_gpu gpus[FAKE_MAX_GPUS];
    unsigned ngpus;
    struct fake_proc procs[FAKE_MAX_PROCS];
    unsigned nprocs;
    struct fake_putil putil[FAKE_MAX_PUTIL];
    unsigned nputil;
    char limits_log[256];     /* where the memory limits set are logged */
    int limits_err;           /* the memory-limit calls return this */
    unsigned long long limits_used; /* currentUsed of every cgroup */
};

/* The fake is a library mimicking a process-global driver: one state. */
static struct fake_state st;
static pthread_mutex_t st_lock = PTHREAD_MUTEX_INITIALIZER;

static void parse_gpu_field(struct fake_gpu *g, const char *key,
                            const char *val)
{
    if (strcmp(key, "uuid") == 0)
        snprintf(g->uuid, sizeof(g->uuid), "%s", val);
    else if (strcmp(key, "total") == 0 && strcmp(val, "ns") == 0)
        g->mem_ns = 1;
    else if (strcmp(key, "total") == 0)
        g->total = strtoull(val, NULL, 10);
    else if (strcmp(key, "used") == 0)
        g->used = strtoull(val, NULL, 10);
    else if (strcmp(key, "util") == 0 && strcmp(val, "ns") == 0)
        g->util_ns = 1;
    else if (strcmp(key, "util") == 0)
        g->util = (unsigned)strtoul(val, NULL, 10);
    else if (strcmp(key, "power") == 0)
        g->power = strcmp(val, "ns") == 0 ? -1 : strtoll(val, NULL, 10);
    else if (strcmp(key, "limit") == 0)
        g->limit = strcmp(val, "ns") == 0 ? -1 : strtoll(val, NULL, 10);
    else if (strcmp(key, "temp") == 0)
        g->temp = strcmp(val, "ns") == 0 ? -1 : strtoll(val, NULL, 10);
    else if (strcmp(key, "ecc") == 0)
        g->ecc = strtoull(val, NULL, 10);
    else if (strcmp(key, "err") == 0)
        g->err = (int)strtol(val, NULL, 10);
    else if (strcmp(key, "uuid_err") == 0)
        g->uuid_err = (int)strtol(val, NULL, 10);
    else if (strcmp(key, "pci") == 0)
        snprintf(g->pci, sizeof(g->pci), "%s", val);
}

/* "gpu k=v k=v ... name=Rest Of Line" */
static void parse_gpu(char *p)
{
    struct fake_gpu *g;

    if (st.ngpus >= FAKE_MAX_GPUS)
        return;
    g = &st.gpus[st.ngpus++];
    memset(g, 0, sizeof(*g));
    g->power = g->limit = g->temp = -1;
    while (*p != '\0') {
        char *eq, *end;
        while (*p == ' ' || *p == '\t')
            p++;
        eq = strchr(p, '=');
        if (eq == NULL)
            break;
        *eq = '\0';
        if (strcmp(p, "name") == 0) {
            snprintf(g->name, sizeof(g->name), "%s", eq + 1);
            break;
        }
        end = eq + 1 + strcspn(eq + 1, " \t");
        if (*end != '\0')
            *end++ = '\0';
        parse_gpu_field(g, p, eq + 1);
        p = end;
    }
}

static struct fake_gpu *gpu_by_uuid(const char *uuid)
{
    for (unsigned i = 0; i < st.ngpus; i++)
        if (strcmp(st.gpus[i].uuid, uuid) == 0)
            return &st.gpus[i];
    return NULL;
}

static void parse_proc(const char *p)
{
    struct fake_proc *q;
    char kind[16] = "";

    if (st.nprocs >= FAKE_MAX_PROCS)
        return;
    q = &st.procs[st.nprocs];
    memset(q, 0, sizeof(*q));
    if (sscanf(p, "%95s %u %llu %15s", q->uuid, &q->pid, &q->used, kind) < 3)
        return;
    q->graphics = strcmp(kind, "graphics") == 0;
    st.nprocs++;
}

/* "card GPU-a PATH": a compute process of GPU-a for every live process
 * the stand-in card at PATH holds memory for. */
static void parse_card(const char *p)
{
    struct fake_cuda_stats c;
    char uuid[96], path[400], what[16] = "";
    ssize_t n;
    int fd;

    if (sscanf(p, "%95s %399s %15s", uuid, path, what) < 2 ||
        (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    n = pread(fd, &c, sizeof(c), 0);
    close(fd);
    for (unsigned i = 0; n == (ssize_t)sizeof(c) &&
                         strcmp(what, "memory") == 0 && i < st.ngpus; i++) {
        /* the driver frees a process's memory when it exits: what dead
         * processes still hold in the record is not used */
        int64_t used = atomic_load(&c.used);
        for (int k = 0; k < FAKE_PROCS; k++) {
            int64_t pid = atomic_load(&c.procs[k].pid);
            if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
                used -= atomic_load(&c.procs[k].used);
        }
        if (strcmp(st.gpus[i].uuid, uuid) == 0)
            st.gpus[i].used = (unsigned long long)(used > 0 ? used : 0);
    }
    for (int i = 0; n == (ssize_t)sizeof(c) && i < FAKE_PROCS &&
                    st.nprocs < FAKE_MAX_PROCS; i++) {
        int64_t pid = atomic_load(&c.procs[i].pid);
        int64_t used = atomic_load(&c.procs[i].used);
        struct fake_proc *q = &st.procs[st.nprocs];
        if (pid <= 0 || used <= 0 || (kill((pid_t)pid, 0) != 0 &&
                                      errno == ESRCH))
            continue;
        memset(q, 0, sizeof(*q));
        snprintf(q->uuid, sizeof(q->uuid), "%s", uuid);
        q->pid = (unsigned)pid;
        q->used = (unsigned long long)used;
        st.nprocs++;
    }
}

static void parse_line(char *line)
{
    char uuid[96];
    int code;

    line[strcspn(line, "#\r\n")] = '\0';
    if (strncmp(line, "driver ", 7) == 0)
        snprintf(st.driver, sizeof(st.driver), "%.*s",
                 (int)sizeof(st.driver) - 1, line + 7);
    else if (strncmp(line, "cuda ", 5) == 0)
        st.cuda = (int)strtol(line + 5, NULL, 10);
    else if (strncmp(line, "init_err ", 9) == 0)
        st.init_err = (int)strtol(line + 9, NULL, 10);
    else if (strncmp(line, "count_err ", 10) == 0)
        st.count_err = (int)strtol(line + 10, NULL, 10);
    else if (strncmp(line, "gpu ", 4) == 0)
        parse_gpu(line + 4);
    else if (strncmp(line, "proc ", 5) == 0)
        parse_proc(line + 5);
    else if (strncmp(line, "card ", 5) == 0)
        parse_card(line + 5);
    else if (strncmp(line, "putil ", 6) == 0 && st.nputil < FAKE_MAX_PUTIL &&
             sscanf(line + 6, "%95s %u %u", st.putil[st.nputil].uuid,
                    &st.putil[st.nputil].pid, &st.putil[st.nputil].sm) == 3)
        st.nputil++;
    else if (strncmp(line, "limits_log ", 11) == 0)
        snprintf(st.limits_log, sizeof(st.limits_log), "%.*s",
                 (int)sizeof(st.limits_log) - 1, line + 11);
    else if (strncmp(line, "limits_err ", 11) == 0)
        st.limits_err = (int)strtol(line + 11, NULL, 10);
    else if (strncmp(line, "limits_used ", 12) == 0)
        st.limits_used = strtoull(line + 12, NULL, 10);
    else if (sscanf(line, "proc_err %95s %d", uuid, &code) == 2 &&
             gpu_by_uuid(uuid) != NULL)
        gpu_by_uuid(uuid)->proc_err = code;
}

/* Re-read the file (called with st_lock held). */
static void load(void)
{
    const char *path = getenv("ACCEL_FAKE_NVML");
    char line[512];
    FILE *f;
    int inited = st.inited;

    memset(&st, 0, sizeof(st));
    st.inited = inited;
    snprintf(st.driver, sizeof(st.driver), "%s", "550.54.14");
    st.cuda = 12040;
    if (path == NULL)
        return;
    f = fopen(path, "re");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL)
        parse_line(line);
    fclose(f);
}

/* Lock, reload, check init. Every entry point but init starts with this. */
static nvmlReturn_t enter(void)
{
    pthread_mutex_lock(&st_lock);
    load();
    if (!st.inited) {
        pthread_mutex_unlock(&st_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t rc)
{
    pthread_mutex_unlock(&st_lock);
    return rc;
}

/* A handle is index + 1; it goes stale (GPU lost) when the device vanishes. */
static struct fake_gpu *gpu_of(nvmlDevice_t d)
{
    uintptr_t i = (uintptr_t)d;
    if (i == 0 || i > st.ngpus)
        return NULL;
    return &st.gpus[i - 1];
}

FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    nvmlReturn_t rc;
    pthread_mutex_lock(&st_lock);
    load();
    rc = st.init_err;
    if (rc == NVML_SUCCESS)
        st.inited = 1;
    return leave(rc);
}

FAKE_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&st_lock);
    st.inited = 0;
    return leave(NVML_SUCCESS);
}

FAKE_EXPORT const char *nvmlErrorString(nvmlReturn_t rc)
{
    switch (rc) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 12: return "NVML Shared Library Not Found";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

/* Copy s into buf (len bytes) as NVML does, a buffer too short being
 * INSUFFICIENT_SIZE, and leave. */
static nvmlReturn_t leave_string(char *buf, unsigned len, const char *s)
{
    if (buf == NULL || len <= strlen(s))
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(buf, len, "%s", s);
    return leave(NVML_SUCCESS);
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    return leave_string(buf, len, st.driver);
}

#ifndef FAKE_NVML_OLD
static nvmlReturn_t cuda_version(int *v)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    *v = st.cuda;
    return leave(NVML_SUCCESS);
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    return cuda_version(v);
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    return cuda_version(v);
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (st.count_err != 0)
        return leave(st.count_err);
    *count = st.ngpus;
    return leave(NVML_SUCCESS);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i,
                                                       nvmlDevice_t *d)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (i >= st.ngpus)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *d = (nvmlDevice_t)(uintptr_t)(i + 1);
    return leave(NVML_SUCCESS);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid,
                                                   nvmlDevice_t *d)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < st.ngpus; i++) {
        if (strcmp(st.gpus[i].uuid, uuid) == 0) {
            *d = (nvmlDevice_t)(uintptr_t)(i + 1);
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

/* Lock, reload and resolve the handle (a lost GPU is an error). */
static nvmlReturn_t enter_dev(nvmlDevice_t d, struct fake_gpu **g)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    *g = gpu_of(d);
    if (*g == NULL)
        return leave(NVML_ERROR_GPU_IS_LOST);
    return NVML_SUCCESS;
}

/* enter_dev, then the device's error code (err=) if it has one. */
static nvmlReturn_t enter_gpu(nvmlDevice_t d, struct fake_gpu **g)
{
    nvmlReturn_t rc = enter_dev(d, g);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((*g)->err != 0)
        return leave((*g)->err);
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_BROKEN
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf,
                                           unsigned len)
{
    struct fake_gpu *g;
    nvmlReturn_t rc = enter_dev(d, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (g->uuid_err != 0)
        return leave(g->uuid_err);
    return leave_string(buf, len, g->uuid);
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf,
                                           unsigned len)
{
    struct fake_gpu *g;
    nvmlReturn_t rc = enter_gpu(d, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    return leave_string(buf, len, g->name);
}

struct fake_memory {
    unsigned long long total, free, used;
};

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d,
                                                 struct fake_memory *m)
{
    struct fake_gpu *g;
    nvmlReturn_t rc = enter_gpu(d, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (g->mem_ns)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    m->total = g->total;
    m->used = g->used;
    m->free = g->total > g->used ? g->total - g->used : 0;
    return leave(NVML_SUCCESS);
}

struct fake_util {
    unsigned gpu, memory;
};

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d,
                                                       struct fake_util *u)
{
    struct fake_gpu *g;
    nvmlReturn_t rc = enter_gpu(d, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (g->util_ns)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    u->gpu = g->util;
    u->memory = 0;
    return leave(NVML_SUCCESS);
}

#ifndef FAKE_NVML_OLD
struct fake_putil_sample {
    unsigned pid;
    unsigned long long ts;
    unsigned sm, mem, enc, dec;
};

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t d, struct fake_putil_sample *out, unsigned *count,
    unsigned long long since)
{
    struct fake_gpu *g;
    unsigned n = 0, k = 0;
    nvmlReturn_t rc = enter_gpu(d, &g);
    (void)since;
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < st.nputil; i++)
        n += strcmp(st.putil[i].uuid, g->uuid) == 0;
    if (n == 0)
        return leave(NVML_ERROR_NOT_FOUND);
    if (out == NULL || *count < n) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < st.nputil; i++)
        if (strcmp(st.putil[i].uuid, g->uuid) == 0)
            out[k++] = (struct fake_putil_sample){st.putil[i].pid, 1000 + i,
                                                  st.putil[i].sm, 0, 0, 0};
    *count = n;
    return leave(NVML_SUCCESS);
}

/* One unsigned reading of a device: its error, NOT_SUPPORTED or v. */
static nvmlReturn_t reading(nvmlDevice_t d, size_t off, unsigned *out)
{
    struct fake_gpu *g;
    long long v;
    nvmlReturn_t rc = enter_gpu(d, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    memcpy(&v, (const char *)g + off, sizeof v);
    if (v < 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *out = (unsigned)v;
    return leave(NVML_SUCCESS);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw)
{
    return reading(d, offsetof(struct fake_gpu, power), mw);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d,
                                                         unsigned *mw)
{
    return reading(d, offsetof(struct fake_gpu, limit), mw);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d,
                                                           unsigned *mw)
{
    return reading(d, offsetof(struct fake_gpu, limit), mw);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor,
                                                  unsigned *c)
{
    if (sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return reading(d, offsetof(struct fake_gpu, temp), c);
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type,
                                                     int counter,
                                                     unsigned long long *n)
{
    struct fake_gpu *g;
    nvmlReturn_t rc = enter_gpu(d, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *n = (type == 1 && counter == 0) ? g->ecc : 0;
    return leave(NVML_SUCCESS);
}

struct fake_proc_v1 {
    unsigned pid;
    unsigned long long used;
};

struct fake_proc_v2 {
    unsigned pid;
    unsigned long long used;
    unsigned gi, ci;
};

static void put_proc(void *infos, int v2, unsigned k, const struct fake_proc *p)
{
    if (v2) {
        struct fake_proc_v2 *o = infos;
        o[k].pid = p->pid;
        o[k].used = p->used;
        o[k].gi = o[k].ci = 0xFFFFFFFFu;
    } else {
        struct fake_proc_v1 *o = infos;
        o[k].pid = p->pid;
        o[k].used = p->used;
    }
}

/* NVML's contract: *count in = capacity, out = entries (or needed). */
static nvmlReturn_t procs(nvmlDevice_t d, unsigned *count, void *infos,
                          int graphics, int v2)
{
    struct fake_gpu *g;
    unsigned n = 0, k = 0;
    nvmlReturn_t rc = enter_dev(d, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (g->err != 0 || g->proc_err != 0)
        return leave(g->err != 0 ? g->err : g->proc_err);
    for (unsigned i = 0; i < st.nprocs; i++)
        if (st.procs[i].graphics == graphics &&
            strcmp(st.procs[i].uuid, g->uuid) == 0)
            n++;
    if (n > *count || (n > 0 && infos == NULL)) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < st.nprocs; i++)
        if (st.procs[i].graphics == graphics &&
            strcmp(st.procs[i].uuid, g->uuid) == 0)
            put_proc(infos, v2, k++, &st.procs[i]);
    *count = n;
    return leave(NVML_SUCCESS);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t d, unsigned *count, void *infos)
{
    return procs(d, count, infos, 0, 0);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(
    nvmlDevice_t d, unsigned *count, void *infos)
{
    return procs(d, count, infos, 1, 0);
}

#ifndef FAKE_NVML_OLD
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned *count, void *infos)
{
    return procs(d, count, infos, 0, 1);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t d, unsigned *count, void *infos)
{
    return procs(d, count, infos, 0, 1);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t d, unsigned *count, void *infos)
{
    return procs(d, count, infos, 1, 1);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(
    nvmlDevice_t d, unsigned *count, void *infos)
{
    return procs(d, count, infos, 1, 1);
}
#endif

#ifndef FAKE_NVML_OLD
struct fake_pci {                 /* nvmlPciInfo_t */
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d,
                                                 struct fake_pci *p)
{
    struct fake_gpu *g;
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    nvmlReturn_t rc = enter_gpu(d, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (g->pci[0] == '\0' ||
        sscanf(g->pci, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    memset(p, 0, sizeof(*p));
    p->domain = dom;
    p->bus = bus;
    p->device = dev;
    snprintf(p->bus_id, sizeof(p->bus_id), "%08X:%02X:%02X.%X", dom, bus,
             dev, fn);
    snprintf(p->bus_id_legacy, sizeof(p->bus_id_legacy), "%04X:%02X:%02X.%X",
             dom, bus, dev, fn);
    return leave(NVML_SUCCESS);
}

struct fake_set_limits {          /* nvmlSetMemoryLimits_v1_t */
    const char *name_space;
    unsigned long long soft, hard;
};

struct fake_get_limits {          /* nvmlGetMemoryLimits_v1_t */
    const char *name_space;
    unsigned long long soft, hard, used;
};

/* Lock, reload, resolve the device of a memory-limit call: its error,
 * a NULL argument's, or limits_err. */
static nvmlReturn_t enter_limits(nvmlDevice_t d, const void *l,
                                 const char *name_space, struct fake_gpu **g)
{
    nvmlReturn_t rc = enter_gpu(d, g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (l == NULL || name_space == NULL)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (st.limits_err != 0)
        return leave(st.limits_err);
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(
    nvmlDevice_t d, struct fake_set_limits *l)
{
    struct fake_gpu *g;
    FILE *f;
    nvmlReturn_t rc = enter_limits(d, l, l ? l->name_space : NULL, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    f = st.limits_log[0] ? fopen(st.limits_log, "ae") : NULL;
    if (f != NULL) {
        fprintf(f, "set %s %s %llu %llu\n", g->uuid, l->name_space, l->soft,
                l->hard);
        fclose(f);
    }
    return leave(NVML_SUCCESS);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(
    nvmlDevice_t d, struct fake_get_limits *l)
{
    struct fake_gpu *g;
    nvmlReturn_t rc = enter_limits(d, l, l ? l->name_space : NULL, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    l->used = st.limits_used;
    return leave(NVML_SUCCESS);
}
#endif
