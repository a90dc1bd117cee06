/* SPDX-License-Identifier: MIT */
/*
 * test_drm.c: drm.c over fixture trees that each test writes under its
 * temporary directory: a sysfs with an AMD Strix Halo APU, a discrete
 * Radeon, Intel Arc cards (i915 and xe) and an Intel iGPU, a proc tree
 * with fdinfo files, and malformed files. The fixtures copy the layout and
 * the formats the kernel documents; they prove the parsing and the rules,
 * not what a real driver prints.
 */
#include "common/accel_setup.h"
#include "daemon/node/devices/drm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define GIB (1ULL << 30)
#define MIB (1ULL << 20)

static char root[512]; /* the fixture's sysfs root */
static char proc[512]; /* the fixture's proc root */

/* mkdir -p */
static void mkdirs(const char *path)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            FAIL_AT_("mkdir %s: %s", p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        FAIL_AT_("mkdir %s: %s", p, strerror(errno));
}

/* Write text to <base>/<rel>, making its directories. */
static void put(const char *base, const char *rel, const char *text)
{
    char path[1024], dir[1024];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", base, rel);
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void link_at(const char *base, const char *rel, const char *target)
{
    char path[1024], dir[1024];
    snprintf(path, sizeof path, "%s/%s", base, rel);
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    ASSERT(symlink(target, path) == 0);
}

/* cardN: an Intel PCI device (its device id, "0x56a0") bound to driver
 * (i915, xe), as sysfs shows one. */
static void intel_card(int n, const char *device, const char *driver)
{
    char rel[64], text[64];

    snprintf(rel, sizeof rel, "class/drm/card%d/device/vendor", n);
    put(root, rel, "0x8086\n");
    snprintf(rel, sizeof rel, "class/drm/card%d/device/device", n);
    snprintf(text, sizeof text, "%s\n", device);
    put(root, rel, text);
    snprintf(rel, sizeof rel, "class/drm/card%d/device/driver", n);
    snprintf(text, sizeof text, "../../bus/pci/drivers/%s", driver);
    link_at(root, rel, text);
}

static void setup(void)
{
    snprintf(root, sizeof root, "%s/sys", harness_tmp());
    snprintf(proc, sizeof proc, "%s/proc", harness_tmp());
    mkdirs(root);
    mkdirs(proc);
    put(harness_tmp(), "pci.ids",
        "# fixture in the pci.ids format\n"
        "1002  Advanced Micro Devices, Inc. [AMD/ATI]\n"
        "\t1586  Strix Halo [Radeon Graphics / 8050S / 8060S]\n"
        "\t\t1002 0001  a subsystem line, never a device name\n"
        "\t744c  Navi 31 [Radeon RX 7900 XT/7900 XTX]\n"
        "10de  NVIDIA Corporation\n"
        "\t2684  AD102 [GeForce RTX 4090]\n"
        "8086  Intel Corporation\n"
        "\t56a0  DG2 [Arc A770]\n"
        "\te20b  Battlemage G21 [Arc B580]\n");
    {
        char ids[600];
        snprintf(ids, sizeof ids, "%s/pci.ids", harness_tmp());
        setenv("ACCEL_PCI_IDS", ids, 1);
    }
}

/* A Strix Halo APU as card<n> at PCI address pci: 96 GiB carve-out. */
static void strix_halo(int n, const char *pci, const char *gtt)
{
    char rel[256], dev[256], target[300];
    snprintf(dev, sizeof dev, "devices/pci0000:00/%s", pci);
    snprintf(rel, sizeof rel, "class/drm/card%d/device", n);
    snprintf(target, sizeof target, "../../../%s", dev);
    link_at(root, rel, target);
#define DEV(file, text)                                                        \
    do {                                                                       \
        char r_[300];                                                          \
        snprintf(r_, sizeof r_, "%s/%s", dev, file);                           \
        put(root, r_, text);                                                   \
    } while (0)
    DEV("vendor", "0x1002\n");
    DEV("device", "0x1586\n");
    DEV("mem_info_vram_total", "103079215104\n"); /* 96 GiB */
    DEV("mem_info_vram_used", "1073741824\n");
    DEV("mem_info_gtt_total", gtt);
    DEV("mem_info_gtt_used", "536870912\n");
    DEV("gpu_busy_percent", "42\n");
    DEV("hwmon/hwmon4/power1_average", "45000000\n");
    DEV("hwmon/hwmon4/power1_cap", "120000000\n");
    DEV("hwmon/hwmon4/temp1_input", "51000\n");
    DEV("drm/renderD128/dev", "226:128\n");
#undef DEV
    put(root, "class/drm/card0-eDP-1/status", "connected\n");
}

TEST(drm_strix_halo_apu)
{
    struct drm_gpu *g = NULL;
    size_t n = 9;

    setup();
    strix_halo(0, "0000:c3:00.0", "17179869184\n"); /* GTT 16 GiB */
    ASSERT_EQ(drm_scan(root, 32 * GIB, &g, &n), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(g[0].type, ACCEL_TYPE_AMD);
    ASSERT_STR_EQ(g[0].card, "card0");
    ASSERT_STR_EQ(g[0].pci, "0000:c3:00.0");
    ASSERT_STR_EQ(g[0].render, "renderD128");
    ASSERT_STR_EQ(g[0].name, "Strix Halo [Radeon Graphics / 8050S / 8060S]");
    /* carve-out + GTT; the GTT (16 GiB) is under 3/4 of 32 GiB */
    ASSERT_U64_EQ(g[0].memory, 96 * GIB + 16 * GIB);
    ASSERT_U64_EQ(g[0].used, GIB + 512 * MIB);
    ASSERT(strstr(g[0].mem_source, "carve-out") != NULL);
    ASSERT_EQ(g[0].util, 42);
    ASSERT_EQ(g[0].power_mw, 45000);
    ASSERT_EQ(g[0].power_limit_mw, 120000);
    ASSERT_EQ(g[0].temp, 51);
    ASSERT_EQ(g[0].healthy, 1);
    free(g);
}

TEST(drm_apu_gtt_capped_at_share)
{
    struct drm_gpu *g = NULL;
    size_t n = 0;

    setup();
    /* a 120 GiB GTT (amdgpu.gttsize) on a 128 GiB node: 96 GiB counts */
    strix_halo(0, "0000:c3:00.0", "128849018880\n");
    ASSERT_EQ(drm_scan(root, 128 * GIB, &g, &n), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_U64_EQ(g[0].memory, 96 * GIB + 96 * GIB);
    free(g);
}

static void radeon(int n)
{
    char base[64];
    snprintf(base, sizeof base, "class/drm/card%d/device", n);
#define R(file, text)                                                          \
    do {                                                                       \
        char r_[300];                                                          \
        snprintf(r_, sizeof r_, "%s/%s", base, file);                          \
        put(root, r_, text);                                                   \
    } while (0)
    R("vendor", "0x1002\n");
    R("device", "0x744c\n");
    R("uevent", "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:03:00.0\n");
    R("product_name", "AMD Radeon RX 7900 XTX\n");
    R("mem_info_vram_total", "25753026560\n");
    R("mem_info_vram_used", "2147483648\n");
    R("mem_info_gtt_total", "33554432000\n");
    R("gpu_busy_percent", "7\n");
    R("hwmon/hwmon1/power1_average", "61000000\n");
    R("hwmon/hwmon1/power1_cap", "327000000\n");
    R("hwmon/hwmon1/temp1_input", "44000\n");
#undef R
}

TEST(drm_discrete_radeon)
{
    struct drm_gpu *g = NULL;
    size_t n = 0;

    setup();
    radeon(1);
    put(root, "class/drm/card0/device/vendor", "0x10de\n"); /* NVIDIA: NVML's */
    ASSERT_EQ(drm_scan(root, 64 * GIB, &g, &n), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(g[0].type, ACCEL_TYPE_AMD_GPU);
    ASSERT_STR_EQ(g[0].card, "card1");
    ASSERT_STR_EQ(g[0].pci, "0000:03:00.0");
    ASSERT_STR_EQ(g[0].name, "AMD Radeon RX 7900 XTX"); /* product_name wins */
    ASSERT_U64_EQ(g[0].memory, 25753026560ULL);       /* VRAM only */
    ASSERT_U64_EQ(g[0].used, 2 * GIB);
    ASSERT_EQ(g[0].util, 7);
    ASSERT_EQ(g[0].power_mw, 61000);
    ASSERT_EQ(g[0].temp, 44);
    free(g);
}

TEST(drm_intel_arc_and_igpu)
{
    struct drm_gpu *g = NULL;
    size_t n = 0;

    setup();
    /* card0: Arc A770 on i915 with local memory */
    intel_card(0, "0x56a0", "i915");
    put(root, "class/drm/card0/lmem_total_bytes", "17179869184\n");
    put(root, "class/drm/card0/lmem_avail_bytes", "16106127360\n");
    put(root, "class/drm/card0/device/hwmon/hwmon2/power1_max", "190000000\n");
    /* card1: Arc B580 on xe, VRAM per tile */
    intel_card(1, "0xe20b", "xe");
    put(root, "class/drm/card1/device/tile0/physical_vram_size_bytes",
        "12884901888\n");
    /* card2: an integrated GPU (i915, no local memory) */
    intel_card(2, "0x7d55", "i915");
    ASSERT_EQ(drm_scan(root, 64 * GIB, &g, &n), ACCEL_OK);
    ASSERT_EQ(n, 3);
    ASSERT_EQ(g[0].type, ACCEL_TYPE_INTEL_GPU);
    ASSERT_STR_EQ(g[0].driver, "i915");
    ASSERT_STR_EQ(g[0].name, "DG2 [Arc A770]");
    ASSERT_U64_EQ(g[0].memory, 16 * GIB);
    ASSERT_U64_EQ(g[0].used, GIB);
    ASSERT_EQ(g[0].util, -1);
    ASSERT_EQ(g[0].util_na, DRM_NA_ABSENT);
    ASSERT_EQ(g[0].power_limit_mw, 190000);
    ASSERT_EQ(g[1].type, ACCEL_TYPE_INTEL_GPU);
    ASSERT_STR_EQ(g[1].driver, "xe");
    ASSERT_U64_EQ(g[1].memory, 12 * GIB);
    ASSERT_EQ(g[2].type, ACCEL_TYPE_INTEL);
    ASSERT_U64_EQ(g[2].memory, 48 * GIB); /* 3/4 of node RAM */
    ASSERT_STR_EQ(g[2].name, "Intel GPU 8086:7d55"); /* not in pci.ids */
    free(g);
}

TEST(drm_intel_arc_without_lmem_file)
{
    struct drm_gpu *g = NULL;
    size_t n = 0;

    setup();
    /* an Arc on a kernel whose i915 has no lmem_total_bytes: still a
     * discrete intel-gpu (its id says so), memory not reported */
    intel_card(0, "0x56a0", "i915");
    ASSERT_EQ(drm_scan(root, 64 * GIB, &g, &n), ACCEL_OK);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(g[0].type, ACCEL_TYPE_INTEL_GPU);
    ASSERT_U64_EQ(g[0].memory, 0);
    ASSERT(strstr(g[0].mem_source, "not reported") != NULL);
    free(g);
}

/* Redirect stderr (acceld's log) to a file; returns the saved fd. */
static int capture_log(const char *path)
{
    int saved = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ASSERT(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    return saved;
}

static char *restore_log(int saved, const char *path)
{
    static char buf[4096];
    FILE *f;
    size_t len;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    f = fopen(path, "r");
    ASSERT(f != NULL);
    len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

TEST(drm_malformed_files)
{
    struct drm_gpu *g = NULL;
    size_t n = 0;
    char logpath[600];
    const char *log;
    int saved;

    setup();
    radeon(0);
    put(root, "class/drm/card0/device/mem_info_vram_total", "lots\n");
    put(root, "class/drm/card0/device/gpu_busy_percent", "-3\n");
    put(root, "class/drm/card0/device/hwmon/hwmon1/temp1_input", "");
    put(root, "class/drm/card1/device/vendor", "banana\n");
    snprintf(logpath, sizeof logpath, "%s/log", harness_tmp());
    saved = capture_log(logpath);
    ASSERT_EQ(drm_scan(root, 64 * GIB, &g, &n), ACCEL_OK);
    log = restore_log(saved, logpath);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(g[0].healthy, 0);
    ASSERT_U64_EQ(g[0].memory, 0);
    ASSERT(strstr(g[0].health_cause, "mem_info_vram_total") != NULL);
    ASSERT_EQ(g[0].util, -1);
    ASSERT_EQ(g[0].util_na, DRM_NA_MALFORMED);
    ASSERT_EQ(g[0].temp, -1);
    ASSERT_EQ(g[0].temp_na, DRM_NA_MALFORMED);
    ASSERT_EQ(g[0].power_mw, 61000); /* the good files still count */
    ASSERT(strstr(log, "mem_info_vram_total holds \"lots\", not a number") !=
           NULL);
    ASSERT(strstr(log, "card1/device/vendor holds \"banana\"") != NULL);
    free(g);
}

TEST(drm_no_drm_directory)
{
    struct drm_gpu *g = (struct drm_gpu *)1;
    size_t n = 5;
    setup();
    ASSERT_EQ(drm_scan(root, GIB, &g, &n), ACCEL_OK);
    ASSERT_EQ(n, 0);
    ASSERT(g == NULL);
}

TEST(drm_parse_size_units)
{
    uint64_t v = 0;
    ASSERT(drm_parse_size(" 1024 KiB", &v));
    ASSERT_U64_EQ(v, 1024 * 1024);
    ASSERT(drm_parse_size("\t3 MiB\n", &v));
    ASSERT_U64_EQ(v, 3 * MIB);
    ASSERT(drm_parse_size("17", &v));
    ASSERT_U64_EQ(v, 17);
    ASSERT(!drm_parse_size("KiB", &v));
    ASSERT(!drm_parse_size("12 parsecs", &v));
    ASSERT(!drm_parse_size("-1", &v));
    ASSERT(!drm_parse_size("99999999999999999999 GiB", &v));
}

/* fd <fd> of pid onto /dev/dri/<node> with the fdinfo text. */
static void client(int pid, int fd, const char *node, const char *text)
{
    char rel[128], target[64];
    snprintf(rel, sizeof rel, "%d/fd/%d", pid, fd);
    snprintf(target, sizeof target, "/dev/dri/%s", node);
    link_at(proc, rel, target);
    snprintf(rel, sizeof rel, "%d/fdinfo/%d", pid, fd);
    put(proc, rel, text);
}

TEST(drm_fdinfo_clients)
{
    struct drm_gpu *g = NULL;
    struct drm_client *c = NULL;
    size_t n = 0, nc = 0;
    uint64_t apu = 0, radeon_b = 0;

    setup();
    strix_halo(0, "0000:c3:00.0", "17179869184\n");
    radeon(1);
    /* the APU: legacy drm-memory keys, one client on two fds (dup) */
    client(100, 5, "renderD128",
           "pos:\t0\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:c3:00.0\n"
           "drm-client-id:\t7\ndrm-memory-vram:\t1048576 KiB\n"
           "drm-memory-gtt:\t524288 KiB\ndrm-memory-cpu:\t0 KiB\n");
    client(100, 6, "renderD128",
           "drm-pdev:\t0000:c3:00.0\ndrm-client-id:\t7\n"
           "drm-memory-vram:\t1048576 KiB\ndrm-memory-gtt:\t524288 KiB\n");
    /* and in a child forked after it opened the device: the same client
     * (issue 45: the meter charged an app twice for it) */
    client(101, 5, "renderD128",
           "drm-pdev:\t0000:c3:00.0\ndrm-client-id:\t7\n"
           "drm-memory-vram:\t1048576 KiB\ndrm-memory-gtt:\t524288 KiB\n");
    /* the Radeon: newer drm-total keys; only VRAM counts on a dGPU */
    client(200, 3, "renderD129",
           "drm-pdev:\t0000:03:00.0\ndrm-client-id:\t9\n"
           "drm-total-vram:\t3 MiB\ndrm-total-gtt:\t5 MiB\n"
           "drm-memory-vram:\t1 MiB\n");
    /* junk: not a DRM fd, and a malformed value */
    link_at(proc, "200/fd/4", "/tmp/not-a-gpu");
    put(proc, "200/fdinfo/4", "drm-pdev:\t0000:03:00.0\ndrm-total-vram: 1 GiB\n");
    client(300, 3, "renderD129",
           "drm-pdev:\t0000:03:00.0\ndrm-total-vram:\tmany KiB\n");
    put(proc, "self/fd/.keep", "");
    ASSERT_EQ(drm_scan(root, 32 * GIB, &g, &n), ACCEL_OK);
    ASSERT_EQ(n, 2);
    g[0].used = g[1].used = DRM_UNKNOWN; /* as where sysfs has no _used */
    drm_clients(proc, g, n, &c, &nc);
    ASSERT_EQ(nc, 3); /* client 7 once (100 or 101), 200, 300 (0 bytes) */
    for (size_t i = 0; i < nc; i++) {
        if (c[i].pid == 100 || c[i].pid == 101)
            apu += c[i].bytes;
        if (c[i].pid == 200)
            radeon_b += c[i].bytes;
    }
    ASSERT_U64_EQ(apu, GIB + 512 * MIB); /* unified: VRAM + GTT */
    ASSERT_U64_EQ(radeon_b, 3 * MIB);    /* dedicated: VRAM */
    ASSERT_U64_EQ(g[0].used, GIB + 512 * MIB);
    ASSERT_U64_EQ(g[1].used, 3 * MIB);
    free(c);
    free(g);
}

TEST(drm_device_ids)
{
    char *a = drm_device_id("olares", ACCEL_TYPE_AMD, 0);
    char *b = drm_device_id("olares", ACCEL_TYPE_INTEL_GPU, 1);
    ASSERT_STR_EQ(a, "olares-amd-0");
    ASSERT_STR_EQ(b, "olares-intel-gpu-1");
    free(a);
    free(b);
}

#define TESTS(XX)                                                              \
    XX(drm_strix_halo_apu)                                                     \
    XX(drm_apu_gtt_capped_at_share)                                            \
    XX(drm_discrete_radeon)                                                    \
    XX(drm_intel_arc_and_igpu)                                                 \
    XX(drm_intel_arc_without_lmem_file)                                        \
    XX(drm_malformed_files)                                                    \
    XX(drm_no_drm_directory)                                                   \
    XX(drm_parse_size_units)                                                   \
    XX(drm_fdinfo_clients)                                                     \
    XX(drm_device_ids)

TEST_MAIN(TESTS)
