/* SPDX-License-Identifier: MIT */
/*
 * test_nvml.c: nvml.c against the fake libnvidia-ml.so.1 that tests/fake
 * builds (ACCEL_FAKE_NVML_DIR comes from tests/fake/CMakeLists.txt). Each test
 * writes the fake's state file, points ACCEL_NVML_LIB at a fake and checks
 * what nvml_scan / nvml_processes report.
 */
#include "common/accel_setup.h"
#include "daemon/node/devices/nvml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#ifndef ACCEL_FAKE_NVML_DIR
#error "ACCEL_FAKE_NVML_DIR must name the fake NVML build directory"
#endif

#define GIB (1ULL << 30)

static char state_path[256];

/* Write the fake's state file (a fresh one per test) and select a fake. */
static void fake_state(const char *variant, const char *text)
{
    char lib[512];
    FILE *f;

    if (state_path[0] == '\0') {
        /* one file per test, in its own directory (harness_tmp) */
        snprintf(state_path, sizeof(state_path), "%s/fake-nvml",
                 harness_tmp());
        setenv("ACCEL_FAKE_NVML", state_path, 1);
    }
    f = fopen(state_path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
    snprintf(lib, sizeof(lib), "%s%s/libnvidia-ml.so.1", ACCEL_FAKE_NVML_DIR,
             variant);
    setenv("ACCEL_NVML_LIB", lib, 1);
}

static const char two_gpus[] =
    "driver 550.54.14\n"
    "cuda 12040\n"
    "gpu uuid=GPU-aaaa total=25769803776 used=1073741824 util=37 "
    "name=NVIDIA GeForce RTX 4090\n"
    "gpu uuid=GPU-bbbb total=17179869184 used=0 util=0 "
    "name=NVIDIA GeForce RTX 4060 Ti\n"
    "proc GPU-aaaa 4242 536870912 compute\n"
    "proc GPU-aaaa 4343 1048576 graphics\n"
    "proc GPU-aaaa 4242 536870912 graphics\n";

static struct nvml *open_ok(void)
{
    struct nvml *n = NULL;
    char *cause = NULL;
    enum accel_err err = nvml_open(&n, &cause);
    if (err != ACCEL_OK)
        FAIL_AT_("nvml_open: %s", cause ? cause : "?");
    ASSERT(n != NULL);
    return n;
}

TEST(nvml_scan_two_gpus)
{
    struct nvml_gpu *g = NULL;
    size_t count = 0;
    struct nvml *n;

    fake_state("", two_gpus);
    n = open_ok();
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 2);
    ASSERT_STR_EQ(g[0].uuid, "GPU-aaaa");
    ASSERT_EQ(g[0].index, 0);
    ASSERT_STR_EQ(g[0].name, "NVIDIA GeForce RTX 4090");
    ASSERT_U64_EQ(g[0].memory_total, 24 * GIB);
    ASSERT_U64_EQ(g[0].memory_used, GIB);
    ASSERT_EQ(g[0].utilization, 37);
    ASSERT_EQ(g[0].healthy, 1);
    ASSERT_STR_EQ(g[0].health_cause, "");
    ASSERT_STR_EQ(g[1].uuid, "GPU-bbbb");
    ASSERT_EQ(g[1].index, 1);
    ASSERT_U64_EQ(g[1].memory_total, 16 * GIB);
    free(g);
    nvml_close(n);
}

TEST(nvml_versions)
{
    char buf[32];
    struct nvml *n;

    fake_state("", two_gpus);
    n = open_ok();
    ASSERT_EQ(nvml_driver_version(n, buf, sizeof(buf), NULL), ACCEL_OK);
    ASSERT_STR_EQ(buf, "550.54.14");
    ASSERT_EQ(nvml_cuda_version(n, buf, sizeof(buf), NULL), ACCEL_OK);
    ASSERT_STR_EQ(buf, "12.4");
    nvml_close(n);
}

TEST(nvml_processes_compute_and_graphics)
{
    struct nvml_proc *p = NULL;
    size_t count = 0;
    struct nvml *n;

    fake_state("", two_gpus);
    n = open_ok();
    ASSERT_EQ(nvml_processes(n, "GPU-aaaa", &p, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 2); /* 4242 is in both lists: reported once */
    ASSERT_EQ(p[0].pid, 4242);
    ASSERT_U64_EQ(p[0].used_memory, 512ULL << 20);
    ASSERT_EQ(p[0].graphics, 0);
    ASSERT_EQ(p[1].pid, 4343);
    ASSERT_EQ(p[1].graphics, 1);
    free(p);
    ASSERT_EQ(nvml_processes(n, "GPU-bbbb", &p, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 0);
    ASSERT(p == NULL);
    nvml_close(n);
}

TEST(nvml_processes_many_grow_buffer)
{
    char text[8192];
    size_t used;
    struct nvml_proc *p = NULL;
    size_t count = 0;
    struct nvml *n;

    used = (size_t)snprintf(text, sizeof(text),
                            "gpu uuid=GPU-aaaa total=100 used=0 name=X\n");
    for (int i = 0; i < 40; i++)
        used += (size_t)snprintf(text + used, sizeof(text) - used,
                                 "proc GPU-aaaa %d %d compute\n", 1000 + i, i);
    fake_state("", text);
    n = open_ok();
    ASSERT_EQ(nvml_processes(n, "GPU-aaaa", &p, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 40);
    ASSERT_EQ(p[39].pid, 1039);
    ASSERT_U64_EQ(p[39].used_memory, 39);
    free(p);
    nvml_close(n);
}

TEST(nvml_processes_unknown_uuid)
{
    struct nvml_proc *p = NULL;
    size_t count = 0;
    char *cause = NULL;
    struct nvml *n;

    fake_state("", two_gpus);
    n = open_ok();
    ASSERT_EQ(nvml_processes(n, "GPU-zzzz", &p, &count, &cause),
              ACCEL_ENOTFOUND);
    ASSERT_STR_EQ(cause, "no NVIDIA device GPU-zzzz");
    free(cause);
    nvml_close(n);
}

TEST(nvml_processes_error)
{
    struct nvml_proc *p = NULL;
    size_t count = 0;
    char *cause = NULL;
    struct nvml *n;

    fake_state("", "gpu uuid=GPU-aaaa total=1 name=X\nproc_err GPU-aaaa 999\n");
    n = open_ok();
    ASSERT_EQ(nvml_processes(n, "GPU-aaaa", &p, &count, &cause), ACCEL_EIO);
    ASSERT_STR_EQ(cause,
                  "nvmlDeviceGetComputeRunningProcesses failed: Unknown Error");
    free(cause);
    nvml_close(n);
}

/* The state file changes while the handle stays open: a GPU vanishes. */
TEST(nvml_device_vanishes)
{
    struct nvml_gpu *g = NULL;
    size_t count = 0;
    struct nvml_proc *p = NULL;
    char *cause = NULL;
    struct nvml *n;

    fake_state("", two_gpus);
    n = open_ok();
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 2);
    free(g);
    fake_state("", "gpu uuid=GPU-bbbb total=17179869184 name=RTX 4060 Ti\n");
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 1);
    ASSERT_STR_EQ(g[0].uuid, "GPU-bbbb");
    ASSERT_EQ(g[0].index, 0);
    free(g);
    ASSERT_EQ(nvml_processes(n, "GPU-aaaa", &p, &count, &cause),
              ACCEL_ENOTFOUND);
    free(cause);
    nvml_close(n);
}

TEST(nvml_device_unhealthy)
{
    struct nvml_gpu *g = NULL;
    size_t count = 0;
    struct nvml *n;

    fake_state("", two_gpus);
    n = open_ok();
    fake_state("", "gpu uuid=GPU-aaaa total=100 used=5 err=15 name=A\n"
                   "gpu uuid=GPU-bbbb total=100 ecc=3 name=B\n"
                   "gpu uuid=GPU-cccc total=100 uuid_err=15 name=C\n"
                   "gpu uuid=GPU-dddd total=100 name=D\n");
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 4);
    ASSERT_STR_EQ(g[0].uuid, "GPU-aaaa");
    ASSERT_EQ(g[0].healthy, 0);
    ASSERT_STR_EQ(g[0].health_cause, "nvmlDeviceGetName failed: GPU is lost");
    ASSERT_U64_EQ(g[0].memory_total, 0);
    ASSERT_EQ(g[1].healthy, 0);
    ASSERT_STR_EQ(g[1].health_cause, "3 uncorrected ECC errors");
    ASSERT_STR_EQ(g[2].uuid, "");
    ASSERT_EQ(g[2].healthy, 0);
    ASSERT_STR_EQ(g[2].health_cause, "nvmlDeviceGetUUID failed: GPU is lost");
    ASSERT_STR_EQ(g[2].name, "C");
    ASSERT_EQ(g[3].healthy, 1);
    free(g);
    nvml_close(n);
}

TEST(nvml_count_error)
{
    struct nvml_gpu *g = (struct nvml_gpu *)1;
    size_t count = 77;
    char *cause = NULL;
    struct nvml *n;

    fake_state("", two_gpus);
    n = open_ok();
    fake_state("", "count_err 999\n");
    ASSERT_EQ(nvml_scan(n, &g, &count, &cause), ACCEL_EIO);
    ASSERT_STR_EQ(cause, "nvmlDeviceGetCount_v2 failed: Unknown Error");
    ASSERT_EQ(count, 77); /* untouched on failure */
    ASSERT(g == (struct nvml_gpu *)1);
    free(cause);
    nvml_close(n);
}

TEST(nvml_init_error)
{
    struct nvml *n = NULL;
    char *cause = NULL;

    fake_state("", "init_err 9\n");
    ASSERT_EQ(nvml_open(&n, &cause), ACCEL_EIO);
    ASSERT(n == NULL);
    ASSERT_STR_EQ(cause, "nvmlInit_v2 failed: Driver Not Loaded");
    free(cause);
}

TEST(nvml_missing_library)
{
    struct nvml *n = NULL;
    char *cause = NULL;

    setenv("ACCEL_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    ASSERT_EQ(nvml_open(&n, &cause), ACCEL_ENOTFOUND);
    ASSERT(n == NULL);
    ASSERT(cause != NULL);
    ASSERT(strstr(cause, "/nonexistent/libnvidia-ml.so.1 not found (no NVIDIA "
                         "driver on this machine)") == cause);
    free(cause);
}

TEST(nvml_missing_required_symbol)
{
    struct nvml *n = NULL;
    char *cause = NULL;

    fake_state("/broken", two_gpus);
    ASSERT_EQ(nvml_open(&n, &cause), ACCEL_ENOTSUP);
    ASSERT(n == NULL);
    ASSERT(cause != NULL);
    ASSERT(strstr(cause, "lacks nvmlDeviceGetUUID") != NULL);
    free(cause);
}

/* An old driver: v1 process structs, no CUDA version call. */
TEST(nvml_old_driver_fallbacks)
{
    struct nvml_proc *p = NULL;
    size_t count = 0;
    char buf[32];
    char *cause = NULL;
    struct nvml *n;

    fake_state("/old", two_gpus);
    n = open_ok();
    ASSERT_EQ(nvml_processes(n, "GPU-aaaa", &p, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 2);
    ASSERT_EQ(p[0].pid, 4242);
    ASSERT_U64_EQ(p[0].used_memory, 512ULL << 20);
    ASSERT_EQ(p[1].pid, 4343);
    ASSERT_U64_EQ(p[1].used_memory, 1ULL << 20);
    free(p);
    ASSERT_EQ(nvml_cuda_version(n, buf, sizeof(buf), &cause), ACCEL_ENOTSUP);
    ASSERT_STR_EQ(buf, "");
    ASSERT(cause != NULL);
    free(cause);
    nvml_close(n);
}

static const char telemetry_gpus[] =
    "gpu uuid=GPU-aaaa total=100 used=1 util=55 power=123456 limit=450000 "
    "temp=61 name=A\n"
    "gpu uuid=GPU-bbbb total=100 used=1 util=ns power=ns temp=ns name=B\n";

/* Utilization, power, limit and temperature; "not supported" is unknown
 * with its reason, and does not make the GPU unhealthy. */
TEST(nvml_telemetry)
{
    struct nvml_gpu *g = NULL;
    size_t count = 0;
    struct nvml *n;

    fake_state("", telemetry_gpus);
    n = open_ok();
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 2);
    ASSERT_EQ(g[0].utilization, 55);
    ASSERT_EQ(g[0].power_mw, 123456);
    ASSERT_EQ(g[0].power_limit_mw, 450000);
    ASSERT_EQ(g[0].temperature, 61);
    ASSERT_EQ(g[0].util_na, NVML_NA_NONE);
    ASSERT_EQ(g[0].temp_na, NVML_NA_NONE);
    ASSERT_EQ(g[1].utilization, -1);
    ASSERT_EQ(g[1].power_mw, -1);
    ASSERT_EQ(g[1].power_limit_mw, -1);
    ASSERT_EQ(g[1].temperature, -1);
    ASSERT_EQ(g[1].util_na, NVML_NA_UNSUPPORTED);
    ASSERT_EQ(g[1].power_na, NVML_NA_UNSUPPORTED);
    ASSERT_EQ(g[1].temp_na, NVML_NA_UNSUPPORTED);
    ASSERT_EQ(g[1].healthy, 1);
    ASSERT(strstr(nvml_na_reason(g[1].power_na), "not supported") != NULL);
    free(g);
    nvml_close(n);
}

/* A driver without the power and temperature calls: unknown, "lacks". */
TEST(nvml_telemetry_old_driver)
{
    struct nvml_gpu *g = NULL;
    size_t count = 0;
    struct nvml *n;

    fake_state("/old", telemetry_gpus);
    n = open_ok();
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(g[0].utilization, 55);
    ASSERT_EQ(g[0].power_mw, -1);
    ASSERT_EQ(g[0].power_limit_mw, -1);
    ASSERT_EQ(g[0].temperature, -1);
    ASSERT_EQ(g[0].power_na, NVML_NA_MISSING);
    ASSERT_EQ(g[0].limit_na, NVML_NA_MISSING);
    ASSERT_EQ(g[0].temp_na, NVML_NA_MISSING);
    ASSERT(strstr(nvml_na_reason(NVML_NA_MISSING), "lacks") != NULL);
    free(g);
    nvml_close(n);
}

/* Per-process SM utilization: the newest sample per pid; none = empty;
 * an old driver lacks the call. */
TEST(nvml_process_util)
{
    struct nvml_putil *u = NULL;
    size_t count = 9;
    struct nvml *n;

    fake_state("", "gpu uuid=GPU-aaaa total=1 name=A\n"
                   "gpu uuid=GPU-bbbb total=1 name=B\n"
                   "putil GPU-aaaa 4242 30\nputil GPU-aaaa 4343 10\n"
                   "putil GPU-aaaa 4242 55\n");
    n = open_ok();
    ASSERT_EQ(nvml_process_util(n, "GPU-aaaa", 0, &u, &count, NULL),
              ACCEL_OK);
    ASSERT_EQ(count, 2);
    ASSERT_EQ(u[0].pid, 4242);
    ASSERT_EQ(u[0].sm, 55);
    ASSERT_EQ(u[1].pid, 4343);
    ASSERT_EQ(u[1].sm, 10);
    free(u);
    ASSERT_EQ(nvml_process_util(n, "GPU-bbbb", 0, &u, &count, NULL),
              ACCEL_OK);
    ASSERT_EQ(count, 0);
    ASSERT(u == NULL);
    ASSERT_EQ(nvml_process_util(n, "GPU-cccc", 0, &u, &count, NULL),
              ACCEL_ENOTFOUND);
    nvml_close(n);
    fake_state("/old", "gpu uuid=GPU-aaaa total=1 name=A\n");
    n = open_ok();
    ASSERT_EQ(nvml_process_util(n, "GPU-aaaa", 0, &u, &count, NULL),
              ACCEL_ENOTSUP);
    nvml_close(n);
}

TEST(nvml_no_state_file_no_devices)
{
    struct nvml_gpu *g = NULL;
    size_t count = 9;
    struct nvml *n;

    fake_state("", "");
    setenv("ACCEL_FAKE_NVML", "/nonexistent/state", 1);
    n = open_ok();
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 0);
    ASSERT(g == NULL);
    nvml_close(n);
}

TEST(nvml_unified_memory_gb10)
{
    struct nvml_gpu *g = NULL;
    size_t count = 0;
    struct nvml *n;

    /* a GB10 answers NOT_SUPPORTED for memory: unified, not unhealthy */
    fake_state("", "driver 580.95.05\ncuda 13000\n"
                   "gpu uuid=GPU-gb10 total=ns util=12 name=NVIDIA GB10\n");
    n = open_ok();
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 1);
    ASSERT_EQ(g[0].memory_unified, 1);
    ASSERT_EQ(g[0].healthy, 1);
    ASSERT_U64_EQ(g[0].memory_total, 0);
    ASSERT_EQ(g[0].utilization, 12);
    free(g);
    nvml_close(n);
}

/* The fake's log of the limits set, "" when none (buf has len bytes). */
static void limits_log(char *buf, size_t len)
{
    char path[300];
    FILE *f;
    size_t n = 0;

    snprintf(path, sizeof path, "%s/limits.log", harness_tmp());
    f = fopen(path, "r");
    if (f != NULL) {
        n = fread(buf, 1, len - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
}

/*
 * Per-cgroup memory limits (driver r615): the PCI address read as the
 * kernel spells it, the limit set for a cgroup's full path (soft = hard =
 * the quota), cleared with soft 0 and hard NVML_DEVICE_MEMORY_LIMIT_MAX,
 * the driver's count for the cgroup read back, and a refusal an error
 * with NVML's sentence.
 */
TEST(nvml_memory_limits)
{
    char text[1024], log[1024];
    struct nvml_gpu *g = NULL;
    size_t count = 0;
    uint64_t used = 0;
    char *cause = NULL;
    struct nvml *n;

    snprintf(text, sizeof text,
             "gpu uuid=GPU-aaaa total=25769803776 pci=0000:3B:00.0 "
             "name=NVIDIA RTX 6000\n"
             "gpu uuid=GPU-bbbb total=25769803776 name=NVIDIA RTX 6000\n"
             "limits_log %s/limits.log\nlimits_used 123456\n",
             harness_tmp());
    fake_state("", text);
    n = open_ok();
    ASSERT(nvml_has_memory_limits(n));
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_EQ(count, 2);
    ASSERT_STR_EQ(g[0].pci, "0000:3b:00.0");
    ASSERT_STR_EQ(g[1].pci, ""); /* NOT_SUPPORTED: unknown, still healthy */
    ASSERT_EQ(g[1].healthy, 1);
    free(g);
    ASSERT_EQ(nvml_set_memory_limit(n, "GPU-aaaa", "/sys/fs/cgroup/a/app1",
                                    4 * GIB, &cause), ACCEL_OK);
    ASSERT_EQ(nvml_set_memory_limit(n, "GPU-aaaa", "/sys/fs/cgroup/a/app1", 0,
                                    &cause), ACCEL_OK);
    limits_log(log, sizeof log);
    ASSERT_STR_EQ(log, "set GPU-aaaa /sys/fs/cgroup/a/app1 4294967296 "
                       "4294967296\n"
                       "set GPU-aaaa /sys/fs/cgroup/a/app1 0 "
                       "18446744073709551615\n");
    ASSERT_EQ(nvml_cgroup_memory_used(n, "GPU-aaaa", "/sys/fs/cgroup/a/app1",
                                      &used, &cause), ACCEL_OK);
    ASSERT_U64_EQ(used, 123456);
    ASSERT_EQ(nvml_set_memory_limit(n, "GPU-none", "/x", GIB, &cause),
              ACCEL_ENOTFOUND);
    free(cause);
    cause = NULL;
    nvml_close(n);
    /* the driver refuses (not root: NO_PERMISSION, 4) */
    snprintf(text, sizeof text,
             "gpu uuid=GPU-aaaa total=25769803776 name=NVIDIA RTX 6000\n"
             "limits_err 4\n");
    fake_state("", text);
    n = open_ok();
    ASSERT_EQ(nvml_set_memory_limit(n, "GPU-aaaa", "/x", GIB, &cause),
              ACCEL_EIO);
    ASSERT(cause != NULL &&
           strstr(cause, "nvmlDeviceSetMemoryLimits_v1") != NULL &&
           strstr(cause, "Insufficient Permissions") != NULL);
    free(cause);
    nvml_close(n);
}

/* A driver before r615: no memory limits, said, never a call through NULL. */
TEST(nvml_memory_limits_old_driver)
{
    struct nvml_gpu *g = NULL;
    size_t count = 0;
    uint64_t used = 0;
    char *cause = NULL;
    struct nvml *n;

    fake_state("/old", "gpu uuid=GPU-aaaa total=1024 pci=0000:01:00.0 "
                       "name=Old\n");
    n = open_ok();
    ASSERT(!nvml_has_memory_limits(n));
    ASSERT_EQ(nvml_scan(n, &g, &count, NULL), ACCEL_OK);
    ASSERT_STR_EQ(g[0].pci, ""); /* no nvmlDeviceGetPciInfo_v3 */
    free(g);
    ASSERT_EQ(nvml_set_memory_limit(n, "GPU-aaaa", "/x", GIB, &cause),
              ACCEL_ENOTSUP);
    ASSERT(cause != NULL);
    free(cause);
    cause = NULL;
    ASSERT_EQ(nvml_cgroup_memory_used(n, "GPU-aaaa", "/x", &used, &cause),
              ACCEL_ENOTSUP);
    free(cause);
    nvml_close(n);
}

#define TESTS(XX)                                                              \
    XX(nvml_memory_limits)                                                     \
    XX(nvml_memory_limits_old_driver)                                          \
    XX(nvml_unified_memory_gb10)                                               \
    XX(nvml_scan_two_gpus)                                                     \
    XX(nvml_telemetry)                                                         \
    XX(nvml_telemetry_old_driver)                                              \
    XX(nvml_process_util)                                                      \
    XX(nvml_versions)                                                          \
    XX(nvml_processes_compute_and_graphics)                                    \
    XX(nvml_processes_many_grow_buffer)                                        \
    XX(nvml_processes_unknown_uuid)                                            \
    XX(nvml_processes_error)                                                   \
    XX(nvml_device_vanishes)                                                   \
    XX(nvml_device_unhealthy)                                                  \
    XX(nvml_count_error)                                                       \
    XX(nvml_init_error)                                                        \
    XX(nvml_missing_library)                                                   \
    XX(nvml_missing_required_symbol)                                           \
    XX(nvml_old_driver_fallbacks)                                              \
    XX(nvml_no_state_file_no_devices)

TEST_MAIN(TESTS)
