/* SPDX-License-Identifier: MIT */
/*
 * test_dmem.c: dmem.c on fixture cgroup trees written here (this
 * machine's kernel has no dmem controller): dmem.capacity parsed and its
 * regions named by PCI address, a malformed one refused with the line,
 * dmem enabled down the app's path (only where not yet listed) and the
 * right line in the app's dmem.max, read back; "max" to lift it; a write
 * the kernel would refuse (no dmem.max, no cgroup.subtree_control, a file
 * that cannot be written) an error with its cause.
 */
#include "common/accel_setup.h"
#include "daemon/node/limits/dmem.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "harness.h"

#define GIB (1ULL << 30)
#define REGION "drm/0000:03:00.0/vram0"
#define APP "/accel.slice/0123456789ab/app1"

/* Write text to root/rel (made with its directories). */
static void put_file(const char *root, const char *rel, const char *text)
{
    char path[PATH_MAX];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *s = path + strlen(root) + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            ASSERT(mkdir(path, 0755) == 0 || errno == EEXIST);
            *s = '/';
        }
    f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* The bytes of root/rel, "" when absent. */
static const char *get_file(const char *root, const char *rel)
{
    static char buf[1024];
    char path[PATH_MAX];

    snprintf(path, sizeof path, "%s/%s", root, rel);
    if (util_read_small(path, buf, sizeof buf) < 0)
        buf[0] = '\0';
    return buf;
}

/* A cgroup root with the controller, acceld's slice and app1's files as
 * the kernel would show them once dmem is enabled above app1. */
static char *fixture(void)
{
    char *root = xasprintf("%s/cg", harness_tmp());

    ASSERT(mkdir(root, 0755) == 0);
    put_file(root, "dmem.capacity",
             REGION " 17179869184\nnvidia/0000:01:00.0/vidmem 25769803776\n");
    put_file(root, "cgroup.subtree_control", "cpu memory pids\n");
    put_file(root, "accel.slice/cgroup.subtree_control", "memory pids\n");
    put_file(root, "accel.slice/0123456789ab/cgroup.subtree_control", "");
    put_file(root, "accel.slice/0123456789ab/app1/cgroup.subtree_control", "");
    put_file(root, "accel.slice/0123456789ab/app1/dmem.max", "");
    return root;
}

TEST(dmem_capacity_regions_by_pci)
{
    struct dmem_region *r = NULL;
    size_t n = 0;
    char *cause = NULL;

    ASSERT_EQ(dmem_parse_capacity(
                  REGION " 17179869184\n"
                  "nvidia/0000:01:00.0/vidmem 25769803776\n"
                  "\n"
                  "ttm/system 1024\n",
                  &r, &n, &cause),
              ACCEL_OK);
    ASSERT_EQ(n, 3);
    ASSERT_STR_EQ(r[0].name, REGION);
    ASSERT_STR_EQ(r[0].pci, "0000:03:00.0");
    ASSERT_U64_EQ(r[0].capacity, 16 * GIB);
    ASSERT_STR_EQ(r[1].pci, "0000:01:00.0");
    ASSERT_U64_EQ(r[1].capacity, 24 * GIB);
    ASSERT_STR_EQ(r[2].pci, ""); /* a region of no PCI device */
    free(r);
    ASSERT_EQ(dmem_parse_capacity("", &r, &n, &cause), ACCEL_OK);
    ASSERT_EQ(n, 0);
}

/* A malformed dmem.capacity is an error naming the line, never a crash. */
TEST(dmem_capacity_malformed)
{
    static const char *const bad[] = {
        REGION "\n",                      /* no size */
        REGION " 12x\n",                  /* not a number */
        REGION " -1\n",                   /* negative */
        " 1024\n",                        /* no name */
        REGION " 99999999999999999999\n", /* past 64 bits */
    };
    struct dmem_region *r = (struct dmem_region *)&bad; /* must stay */
    size_t n = 7;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *text = xasprintf("ttm/system 1024\n%s", bad[i]), *cause = NULL;
        ASSERT_EQ(dmem_parse_capacity(text, &r, &n, &cause), ACCEL_EPARSE);
        ASSERT(cause != NULL && strstr(cause, "line 2") != NULL);
        ASSERT(r == (struct dmem_region *)&bad && n == 7);
        free(cause);
        free(text);
    }
}

TEST(dmem_capacity_absent)
{
    struct dmem_region *r = NULL;
    size_t n = 0;
    char *cause = NULL, *root = xasprintf("%s/none", harness_tmp());

    ASSERT_EQ(mkdir(root, 0755), 0);
    ASSERT_EQ(dmem_read_capacity(root, &r, &n, &cause), ACCEL_ENOTFOUND);
    ASSERT(cause != NULL && strstr(cause, "dmem.capacity") != NULL);
    free(cause);
    free(root);
}

TEST(dmem_pci_normalize_spellings)
{
    char out[DMEM_PCI_LEN];

    ASSERT(dmem_pci_normalize("00000000:3B:00.0", out)); /* NVML's */
    ASSERT_STR_EQ(out, "0000:3b:00.0");
    ASSERT(dmem_pci_normalize("0000:c3:00.1", out));
    ASSERT_STR_EQ(out, "0000:c3:00.1");
    ASSERT(!dmem_pci_normalize("vram0", out));
    ASSERT(!dmem_pci_normalize("0000:03:00", out));
    ASSERT(!dmem_pci_normalize("0000:03:00.0x", out));
    ASSERT(!dmem_pci_normalize(" 0000:03:00.0", out));
}

/* The quota: dmem enabled from the root down to app1's parent (not in
 * app1 itself), the region's line in app1's dmem.max; lifted with "max". */
TEST(dmem_set_max_enables_down_and_writes)
{
    char *root = fixture(), *cause = NULL;
    uint64_t v = 0;

    ASSERT_EQ(dmem_set_max(root, APP, REGION, 4 * GIB, &cause), ACCEL_OK);
    ASSERT_STR_EQ(get_file(root, "cgroup.subtree_control"), "+dmem");
    ASSERT_STR_EQ(get_file(root, "accel.slice/cgroup.subtree_control"),
                  "+dmem");
    ASSERT_STR_EQ(get_file(root, "accel.slice/0123456789ab/"
                                 "cgroup.subtree_control"), "+dmem");
    ASSERT_STR_EQ(get_file(root, "accel.slice/0123456789ab/app1/"
                                 "cgroup.subtree_control"), "");
    ASSERT_STR_EQ(get_file(root, "accel.slice/0123456789ab/app1/dmem.max"),
                  REGION " 4294967296");
    ASSERT_EQ(dmem_read(root, APP, "dmem.max", REGION, &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 4 * GIB);
    ASSERT_EQ(dmem_set_max(root, APP, REGION, 0, &cause), ACCEL_OK);
    ASSERT_STR_EQ(get_file(root, "accel.slice/0123456789ab/app1/dmem.max"),
                  REGION " max");
    ASSERT_EQ(dmem_read(root, APP, "dmem.max", REGION, &v), ACCEL_OK);
    ASSERT_U64_EQ(v, UINT64_MAX);
    free(root);
}

/* Where a level lists dmem already, it is not written again. */
TEST(dmem_set_max_keeps_enabled_levels)
{
    char *root = fixture(), *cause = NULL;

    put_file(root, "cgroup.subtree_control", "cpu dmem memory\n");
    put_file(root, "accel.slice/cgroup.subtree_control", "dmem\n");
    ASSERT_EQ(dmem_set_max(root, APP, REGION, GIB, &cause), ACCEL_OK);
    ASSERT_STR_EQ(get_file(root, "cgroup.subtree_control"),
                  "cpu dmem memory\n");
    ASSERT_STR_EQ(get_file(root, "accel.slice/cgroup.subtree_control"),
                  "dmem\n");
    ASSERT_STR_EQ(get_file(root, "accel.slice/0123456789ab/"
                                 "cgroup.subtree_control"), "+dmem");
    free(root);
}

/* What the kernel would refuse is an error with its cause. */
TEST(dmem_set_max_refusals)
{
    char *root = fixture(), *cause = NULL, path[PATH_MAX];

    /* no dmem.max in app1 once enabled (the kernel made none) */
    snprintf(path, sizeof path, "%s%s/dmem.max", root, APP);
    ASSERT_EQ(unlink(path), 0);
    ASSERT_EQ(dmem_set_max(root, APP, REGION, GIB, &cause), ACCEL_ESYS);
    ASSERT(cause != NULL && strstr(cause, "dmem.max") != NULL);
    free(cause);
    cause = NULL;
    /* a dmem.max that cannot be written */
    ASSERT_EQ(mkdir(path, 0755), 0);
    ASSERT_EQ(dmem_set_max(root, APP, REGION, GIB, &cause), ACCEL_ESYS);
    ASSERT(cause != NULL && strstr(cause, "refused") != NULL &&
           strstr(cause, REGION " 1073741824") != NULL);
    free(cause);
    cause = NULL;
    ASSERT_EQ(rmdir(path), 0);
    /* a level whose controllers cannot be given */
    put_file(root, "accel.slice/0123456789ab/app1/dmem.max", "");
    snprintf(path, sizeof path, "%s/accel.slice/cgroup.subtree_control",
             root);
    ASSERT_EQ(unlink(path), 0);
    ASSERT_EQ(dmem_set_max(root, APP, REGION, GIB, &cause), ACCEL_ESYS);
    ASSERT(cause != NULL && strstr(cause, "cannot enable dmem") != NULL);
    ASSERT_STR_EQ(get_file(root, "accel.slice/0123456789ab/app1/dmem.max"),
                  ""); /* nothing written below it */
    free(cause);
    free(root);
}

/* dmem.current: the app's usage as the kernel counts it. */
TEST(dmem_read_current)
{
    char *root = fixture();
    uint64_t v = 0;

    put_file(root, "accel.slice/0123456789ab/app1/dmem.current",
             "nvidia/0000:01:00.0/vidmem 0\n" REGION " 3221225472\n");
    ASSERT_EQ(dmem_read(root, APP, "dmem.current", REGION, &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 3 * GIB);
    ASSERT_EQ(dmem_read(root, APP, "dmem.current", "drm/0000:04:00.0/vram0",
                        &v), ACCEL_ENOTFOUND);
    ASSERT_EQ(dmem_read(root, APP, "dmem.low", REGION, &v), ACCEL_ENOTFOUND);
    put_file(root, "accel.slice/0123456789ab/app1/dmem.current",
             REGION " lots\n");
    ASSERT_EQ(dmem_read(root, APP, "dmem.current", REGION, &v), ACCEL_EPARSE);
    ASSERT_U64_EQ(v, 3 * GIB); /* untouched */
    free(root);
}

#define TESTS(XX)                                                              \
    XX(dmem_capacity_regions_by_pci)                                           \
    XX(dmem_capacity_malformed)                                                \
    XX(dmem_capacity_absent)                                                   \
    XX(dmem_pci_normalize_spellings)                                           \
    XX(dmem_set_max_enables_down_and_writes)                                   \
    XX(dmem_set_max_keeps_enabled_levels)                                      \
    XX(dmem_set_max_refusals)                                                  \
    XX(dmem_read_current)

TEST_MAIN(TESTS)
