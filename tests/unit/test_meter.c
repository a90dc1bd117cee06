/* SPDX-License-Identifier: MIT */
/*
 * test_meter.c: the outside meter's arithmetic (meter_compute: what is
 * charged as untracked, by how much an app is over its quota, whether that
 * is beyond the tolerance) and acceld's write of the charge into a ledger
 * (ledger_set_untracked), which the shim reads through
 * accel_ledger_untracked; the AMD driver figure from the DRM refresh's
 * clients (meter_driver_drm). The reconciler's use of them runs in
 * tests/integration/test_meter.py on the stand-in NVML and
 * test_meter_amd.py on the stand-in HIP's fdinfo.
 */
#include "common/accel_setup.h"
#include "daemon/node/enforce/meter.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "accel/ledger.h"
#include "common/util.h"
#include "daemon/node/devices/discovery.h"
#include "daemon/node/ledger.h"
#include "harness.h"

#define MiB (UINT64_C(1) << 20)

/* One pass: driver and charged figures, the last pass's excess. */
static struct meter_out pass(uint64_t driver, uint64_t charged,
                             uint64_t last_excess)
{
    struct meter_in in = {.driver = driver * MiB,
                          .charged = charged * MiB,
                          .last_excess = last_excess * MiB,
                          .limit = 1024 * MiB,
                          .tolerance = 64 * MiB};
    struct meter_out out;
    meter_compute(&in, &out);
    return out;
}

/* A video session's 310 MiB: charged from the second pass that sees it,
 * never on the first. */
TEST(meter_rise_is_charged_on_the_second_pass)
{
    struct meter_out o = pass(822, 512, 0);
    ASSERT_U64_EQ(o.excess, 310 * MiB);
    ASSERT_U64_EQ(o.untracked, 0);
    o = pass(822, 512, o.excess / MiB);
    ASSERT_U64_EQ(o.untracked, 310 * MiB);
    ASSERT_U64_EQ(o.over, 0);
    ASSERT(!o.beyond);
}

/* An allocation the driver counted while the ledger was read around it
 * (one pass's excess only) is never charged. */
TEST(meter_one_pass_blip_is_not_charged)
{
    struct meter_out o = pass(912, 512, 0);
    ASSERT_U64_EQ(o.untracked, 0);
    o = pass(512, 512, o.excess / MiB);
    ASSERT_U64_EQ(o.excess, 0);
    ASSERT_U64_EQ(o.untracked, 0);
}

/* A fall is charged at once: the app gets its room back. */
TEST(meter_fall_is_charged_at_once)
{
    struct meter_out o = pass(612, 512, 310);
    ASSERT_U64_EQ(o.untracked, 100 * MiB);
    o = pass(400, 512, 100); /* the shim charged more than the driver has */
    ASSERT_U64_EQ(o.excess, 0);
    ASSERT_U64_EQ(o.untracked, 0);
}

/* Over the quota: by how much, and beyond the tolerance or not. */
TEST(meter_over_quota_and_tolerance)
{
    struct meter_out o = pass(1210, 900, 310);
    ASSERT_U64_EQ(o.untracked, 310 * MiB);
    ASSERT_U64_EQ(o.over, 186 * MiB);
    ASSERT(o.beyond);
    o = pass(1048, 1000, 48); /* 24 MiB over, 64 tolerated */
    ASSERT_U64_EQ(o.over, 24 * MiB);
    ASSERT(!o.beyond);
    o = pass(1088, 1000, 88); /* 64 MiB over: not beyond 64 */
    ASSERT_U64_EQ(o.over, 64 * MiB);
    ASSERT(!o.beyond);
    o = pass(1089, 1000, 89);
    ASSERT(o.beyond);
}

/* acceld's charge reaches the shim's view of the ledger, and reads back. */
TEST(meter_charge_written_into_the_ledger)
{
    char *path = xasprintf("%s/app-0.ledger", harness_tmp());
    struct accel_ledger *l;
    struct ledger_usage u;
    int fd;

    ASSERT_EQ(ledger_create(path, "app", 0, "GPU-x", 1024 * MiB, (uid_t)-1,
                            (gid_t)-1),
              ACCEL_OK);
    fd = open(path, O_RDWR | O_CLOEXEC);
    ASSERT(fd >= 0);
    l = mmap(NULL, ACCEL_LEDGER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
             0);
    close(fd);
    ASSERT(l != MAP_FAILED);
    ASSERT_EQ(l->minor, ACCEL_LEDGER_MINOR);
    ASSERT_U64_EQ(accel_ledger_untracked(l), 0);
    ASSERT_EQ(ledger_set_untracked(path, 310 * MiB), ACCEL_OK);
    ASSERT_U64_EQ(accel_ledger_untracked(l), 310 * MiB);
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.untracked, 310 * MiB);
    ASSERT_EQ(ledger_set_untracked(path, 0), ACCEL_OK);
    ASSERT_U64_EQ(accel_ledger_untracked(l), 0);
    atomic_store(&l->untracked, -5); /* never read as a charge below 0 */
    ASSERT_U64_EQ(accel_ledger_untracked(l), 0);
    munmap(l, ACCEL_LEDGER_SIZE);
    unlink(path);
    ASSERT_EQ(ledger_set_untracked(path, 1), ACCEL_ENOTFOUND);
    free(path);
}

/* AMD (issue 45): the driver figure of a target is the sum of its app's
 * DRM clients on its device in the refresh; a device the refresh read is
 * seen even when the app holds nothing there, one it did not read is not
 * (nothing is charged), and other apps' and other devices' clients do not
 * count. */
TEST(meter_driver_from_drm_clients)
{
    struct drm_usage u[] = {
        {"n-amd-0", "", 64 * MiB},   /* the device was read; no app's */
        {"n-amd-0", "enc", 512 * MiB},
        {"n-amd-0", "other", 100 * MiB},
        {"n-amd-gpu-0", "enc", 7 * MiB},
        {"n-amd-gpu-0", "", 0},
    };
    struct meter_target t[3];

    memset(t, 0, sizeof t);
    t[0].app = "enc";
    util_strlcpy(t[0].uuid, "n-amd-0", sizeof t[0].uuid);
    t[1].app = "idle";
    util_strlcpy(t[1].uuid, "n-amd-gpu-0", sizeof t[1].uuid);
    t[2].app = "enc";
    util_strlcpy(t[2].uuid, "n-amd-1", sizeof t[2].uuid); /* not read */
    meter_driver_drm(t, 3, u, sizeof u / sizeof *u);
    ASSERT(t[0].seen);
    ASSERT_U64_EQ(t[0].in.driver, 512 * MiB);
    ASSERT(t[1].seen);
    ASSERT_U64_EQ(t[1].in.driver, 0);
    ASSERT(!t[2].seen);
    ASSERT_U64_EQ(t[2].in.driver, 0);
    /* no refresh (no DRM device read this pass): nothing seen */
    memset(t, 0, sizeof t);
    util_strlcpy(t[0].uuid, "n-amd-0", sizeof t[0].uuid);
    t[0].app = "enc";
    meter_driver_drm(t, 1, NULL, 0);
    ASSERT(!t[0].seen);
}

#define LIST(XX)                                                               \
    XX(meter_rise_is_charged_on_the_second_pass)                               \
    XX(meter_one_pass_blip_is_not_charged)                                     \
    XX(meter_fall_is_charged_at_once)                                          \
    XX(meter_over_quota_and_tolerance)                                         \
    XX(meter_charge_written_into_the_ledger)                                  \
    XX(meter_driver_from_drm_clients)
TEST_MAIN(LIST)
