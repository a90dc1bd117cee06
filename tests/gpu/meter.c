/* SPDX-License-Identifier: MIT */
/*
 * meter.c: the device's memory as the driver counts it, read through NVML
 * (dlopen of libnvidia-ml.so.1) from OUTSIDE the app under test. It refuses
 * to run with libaccelshim.so loaded, so what it says is never the shim's
 * view. The NVML index is GPUCHECK_NVML_INDEX (default 0).
 *
 *   meter info           name, uuid, driver version, total, free, used
 *   meter once [PID]     "used U proc P" (P: what PID holds per the
 *                        driver's process list, -1 when not listed)
 *   meter watch [PID]    prints "base U" at once, samples every 5 ms until
 *                        SIGTERM/SIGINT (or PID or the caller is gone),
 *                        then prints
 *                        "peak U proc_peak P samples N"
 *   meter view           (allowed under the shim: the views an app sees;
 *                        "none" for a call this NVML lacks)
 *                        "v1_total T v1_free F", "v2_total T v2_free F",
 *                        "uuid_total T" (handle by UUID)
 * Exit status: 0, 1 on an NVML error, 2 on bad use, 3 under the shim.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nret;
typedef struct nvml_dev *ndev;
struct mem_v1 {
    unsigned long long total, free, used;
};
struct mem_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};
struct proc_v2 { /* nvmlProcessInfo_t of _v2/_v3 */
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};
struct proc_v1 {
    unsigned int pid;
    unsigned long long used;
};

static struct {
    nret (*init)(void);
    nret (*by_index)(unsigned, ndev *);
    nret (*by_uuid)(const char *, ndev *);
    nret (*mem)(ndev, struct mem_v1 *);
    nret (*mem2)(ndev, struct mem_v2 *);
    nret (*uuid)(ndev, char *, unsigned);
    nret (*name)(ndev, char *, unsigned);
    nret (*driver)(char *, unsigned);
    nret (*procs2)(ndev, unsigned *, struct proc_v2 *);
    nret (*procs1)(ndev, unsigned *, struct proc_v1 *);
} nv;

static volatile sig_atomic_t stop;

static void on_sig(int s)
{
    stop = s;
}

static int shim_loaded(void)
{
    char line[512];
    FILE *f = fopen("/proc/self/maps", "r");
    int found = 0;

    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, "libaccelshim") != NULL;
    fclose(f);
    return found;
}

static void *sym(void *lib, const char *a, const char *b)
{
    void *p = dlsym(lib, a);

    return p != NULL || b == NULL ? p : dlsym(lib, b);
}

static int load(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);

    if (lib == NULL) {
        printf("error no libnvidia-ml.so.1: %s\n", dlerror());
        return -1;
    }
    *(void **)&nv.init = sym(lib, "nvmlInit_v2", "nvmlInit");
    *(void **)&nv.by_index = sym(lib, "nvmlDeviceGetHandleByIndex_v2",
                                 "nvmlDeviceGetHandleByIndex");
    *(void **)&nv.by_uuid = sym(lib, "nvmlDeviceGetHandleByUUID", NULL);
    *(void **)&nv.mem = sym(lib, "nvmlDeviceGetMemoryInfo", NULL);
    *(void **)&nv.mem2 = sym(lib, "nvmlDeviceGetMemoryInfo_v2", NULL);
    *(void **)&nv.uuid = sym(lib, "nvmlDeviceGetUUID", NULL);
    *(void **)&nv.name = sym(lib, "nvmlDeviceGetName", NULL);
    *(void **)&nv.driver = sym(lib, "nvmlSystemGetDriverVersion", NULL);
    *(void **)&nv.procs2 = sym(lib, "nvmlDeviceGetComputeRunningProcesses_v3",
                               "nvmlDeviceGetComputeRunningProcesses_v2");
    *(void **)&nv.procs1 = sym(lib, "nvmlDeviceGetComputeRunningProcesses",
                               NULL);
    if (nv.init == NULL || nv.by_index == NULL || nv.mem == NULL) {
        printf("error libnvidia-ml.so.1 lacks nvmlInit/handle/memory\n");
        return -1;
    }
    if (nv.init() != 0) {
        printf("error nvmlInit failed\n");
        return -1;
    }
    return 0;
}

/* the entry of pid in a process list of type T read by fn */
#define FIND_PID(T, fn, d, pid)                                                \
    do {                                                                       \
        T p_[64];                                                              \
        unsigned n_ = 64;                                                      \
        if ((fn)((d), &n_, p_) == 0)                                           \
            for (unsigned i_ = 0; i_ < n_ && i_ < 64; i_++)                    \
                if ((long)p_[i_].pid == (pid))                                 \
                    return (long long)p_[i_].used;                             \
    } while (0)

/* What pid holds per the driver's process list; -1 when not listed. */
static long long proc_used(ndev d, long pid)
{
    if (pid <= 0)
        return -1;
    if (nv.procs2 != NULL)
        FIND_PID(struct proc_v2, nv.procs2, d, pid);
    else if (nv.procs1 != NULL)
        FIND_PID(struct proc_v1, nv.procs1, d, pid);
    return -1;
}

static int view(ndev d)
{
    struct mem_v1 m1;
    struct mem_v2 m2;
    char uuid[96];
    ndev u;

    if (nv.mem(d, &m1) != 0)
        return 1;
    printf("v1_total %llu v1_free %llu\n", m1.total, m1.free);
    memset(&m2, 0, sizeof(m2));
    m2.version = (unsigned)sizeof(m2) | (2u << 24);
    if (nv.mem2 == NULL)
        printf("v2_total none\n");
    else if (nv.mem2(d, &m2) == 0)
        printf("v2_total %llu v2_free %llu\n", m2.total, m2.free);
    if (nv.uuid == NULL || nv.by_uuid == NULL)
        printf("uuid_total none\n");
    else if (nv.uuid(d, uuid, sizeof(uuid)) == 0 &&
             nv.by_uuid(uuid, &u) == 0 && nv.mem(u, &m1) == 0)
        printf("uuid_total %llu uuid_free %llu\n", m1.total, m1.free);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const char *ix = getenv("GPUCHECK_NVML_INDEX");
    long pid = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    struct mem_v1 m;
    ndev d;

    if (strcmp(mode, "view") != 0 && shim_loaded()) {
        printf("error the meter must run without libaccelshim.so\n");
        return 3;
    }
    if (strcmp(mode, "info") && strcmp(mode, "once") &&
        strcmp(mode, "watch") && strcmp(mode, "view")) {
        fprintf(stderr, "usage: meter info|once [PID]|watch [PID]|view\n");
        return 2;
    }
    if (load() != 0 ||
        nv.by_index(ix ? (unsigned)strtoul(ix, NULL, 10) : 0, &d) != 0 ||
        nv.mem(d, &m) != 0) {
        printf("error no NVML device\n");
        return 1;
    }
    if (strcmp(mode, "view") == 0)
        return view(d);
    if (strcmp(mode, "info") == 0) {
        char name[96] = "?", uuid[96] = "?", drv[80] = "?";

        if (nv.name != NULL)
            nv.name(d, name, sizeof(name));
        if (nv.uuid != NULL)
            nv.uuid(d, uuid, sizeof(uuid));
        if (nv.driver != NULL)
            nv.driver(drv, sizeof(drv));
        printf("name %s\nuuid %s\ndriver %s\ntotal %llu\nfree %llu\n"
               "used %llu\nprocs %s\n", name, uuid, drv, m.total, m.free,
               m.used, nv.procs2 || nv.procs1 ? "yes" : "no");
        return 0;
    }
    if (strcmp(mode, "once") == 0) {
        printf("used %llu proc %lld\n", m.used, proc_used(d, pid));
        return 0;
    }
    {
        unsigned long long peak = m.used, n = 0;
        long long pp = -1, p;
        struct timespec ts = { 0, 5000000L };

        signal(SIGTERM, on_sig);
        signal(SIGINT, on_sig);
        printf("base %llu\n", m.used);
        fflush(stdout);
        pid_t parent = getppid();

        /* ends with its caller too, and after 10 minutes at most */
        while (!stop && (pid <= 0 || kill((pid_t)pid, 0) == 0) &&
               getppid() == parent && n < 120000) {
            if (nv.mem(d, &m) == 0 && m.used > peak)
                peak = m.used;
            p = proc_used(d, pid);
            if (p > pp)
                pp = p;
            n++;
            nanosleep(&ts, NULL);
        }
        printf("peak %llu proc_peak %lld samples %llu\n", peak, pp, n);
    }
    return 0;
}
