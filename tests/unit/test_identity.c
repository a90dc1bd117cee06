/* SPDX-License-Identifier: MIT */
/*
 * test_identity.c: the pure parts of who an app runs as (SPEC 3): the
 * --app-uid-range parser and its check against the machine's ranges, the
 * uid allocation (lowest free, skipping taken
 * and machine-used ids, a clear "full" answer), run.user resolution, and
 * the install-time manifest rules of manifest.c (reserved variables 400,
 * a member's run.user and outside-home run.workdir 403).
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/identity.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/rules/manifest.h"
#include "daemon/state.h"
#include "harness.h"

TEST(identity_range_parse)
{
    uint32_t lo = 0, hi = 0;
    char *cause = NULL;

    ASSERT_EQ(identity_parse_range("61184-65519", &lo, &hi, NULL), ACCEL_OK);
    ASSERT_EQ(lo, 61184);
    ASSERT_EQ(hi, 65519);
    ASSERT_EQ(identity_parse_range("5-5", &lo, &hi, NULL), ACCEL_OK);
    ASSERT_EQ(lo, 5);
    ASSERT_EQ(hi, 5);
    static const char *const bad[] = {"", "1", "-1-2", "0-5", "9-8", "1-",
                                      "1-2x", "a-b", "1-2147483647",
                                      "1 - 2", "1-+2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        lo = hi = 7;
        ASSERT_EQ(identity_parse_range(bad[i], &lo, &hi, &cause),
                  ACCEL_EINVAL);
        ASSERT(strstr(cause, "--app-uid-range") != NULL);
        ASSERT_EQ(lo, 7); /* untouched on failure */
        free(cause);
        cause = NULL;
    }
}

static bool odd_busy(uint32_t uid, void *ctx)
{
    (void)ctx;
    return uid % 2 == 1;
}

TEST(identity_pick_lowest_free)
{
    uint32_t taken[] = {100, 101, 103};
    uint32_t out = 0;

    ASSERT_EQ(identity_pick(100, 110, NULL, 0, NULL, NULL, &out), ACCEL_OK);
    ASSERT_EQ(out, 100);
    ASSERT_EQ(identity_pick(100, 110, taken, 3, NULL, NULL, &out), ACCEL_OK);
    ASSERT_EQ(out, 102);
    /* ids the machine uses are skipped */
    ASSERT_EQ(identity_pick(101, 110, NULL, 0, odd_busy, NULL, &out),
              ACCEL_OK);
    ASSERT_EQ(out, 102);
    /* full: a clear code, out untouched */
    out = 1;
    ASSERT_EQ(identity_pick(100, 101, taken, 3, NULL, NULL, &out),
              ACCEL_ECONFLICT);
    ASSERT_EQ(out, 1);
    ASSERT_EQ(identity_pick(103, 103, taken, 3, NULL, NULL, &out),
              ACCEL_ECONFLICT);
    /* the top of the 32-bit space does not wrap around */
    ASSERT_EQ(identity_pick(UINT32_MAX, UINT32_MAX, NULL, 0, NULL, NULL,
                            &out),
              ACCEL_OK);
    ASSERT_EQ(out, UINT32_MAX);
}

TEST(identity_resolve_run_user)
{
    uid_t uid = 1;
    gid_t gid = 1;
    char *home = NULL;

    ASSERT_EQ(identity_resolve_user("root", &uid, &gid, &home), ACCEL_OK);
    ASSERT_EQ(uid, 0);
    ASSERT_EQ(gid, 0);
    ASSERT(home != NULL);
    free(home);
    ASSERT_EQ(identity_resolve_user("0", &uid, &gid, NULL), ACCEL_OK);
    ASSERT_EQ(uid, 0);
    /* a uid without a passwd entry is its own group */
    ASSERT_EQ(identity_resolve_user("62999", &uid, &gid, &home), ACCEL_OK);
    ASSERT_EQ(uid, 62999);
    ASSERT_EQ(gid, 62999);
    ASSERT(home == NULL);
    ASSERT_EQ(identity_resolve_user("no-such-user-x", &uid, &gid, NULL),
              ACCEL_ENOTFOUND);
    ASSERT_EQ(identity_resolve_user("12x", &uid, &gid, NULL),
              ACCEL_ENOTFOUND);
}

TEST(identity_app_uid_owner_run_user_unprivileged)
{
    static struct accel_daemon d; /* large: not on the stack */
    struct app a;
    uid_t uid = 1;
    gid_t gid = 1;

    memset(&d, 0, sizeof(d));
    memset(&a, 0, sizeof(a));
    d.uid_drop = true;
    identity_remember(&d, "bob", 61190);
    identity_remember(&d, "bob", 61999); /* a name keeps its first uid */
    ASSERT_EQ(identity_uid(&d, "bob"), 61190);
    ASSERT_EQ(identity_uid(&d, "carol"), 0);
    a.owner = "bob";
    ASSERT_EQ(identity_app_uid(&d, &a, &uid, &gid), ACCEL_OK);
    ASSERT_EQ(uid, 61190);
    ASSERT_EQ(gid, 61190);
    a.owner = "carol"; /* no uid allocated: none, never root */
    uid = 7;
    ASSERT_EQ(identity_app_uid(&d, &a, &uid, &gid), ACCEL_ENOTFOUND);
    ASSERT_EQ(uid, 7);
    a.m.run.user = "root";
    ASSERT_EQ(identity_app_uid(&d, &a, &uid, &gid), ACCEL_OK);
    ASSERT_EQ(uid, 0);
    a.m.run.user = "no-such-user-x";
    ASSERT_EQ(identity_app_uid(&d, &a, &uid, &gid), ACCEL_ENOTFOUND);
    /* acceld not root: every app runs as acceld itself */
    d.uid_drop = false;
    a.m.run.user = NULL;
    a.owner = "bob";
    ASSERT_EQ(identity_app_uid(&d, &a, &uid, &gid), ACCEL_OK);
    ASSERT_EQ(uid, geteuid());
    ASSERT_EQ(gid, getegid());
    free(d.ids[0].name);
    free(d.ids);
}

/* Parse a manifest with this run object (JSON text). */
static void parse_run(const char *run, struct manifest *m)
{
    char *text = xasprintf(
        "{\"metadata\": {\"name\": \"a\"}, \"spec\": {\"accelerator\": "
        "[{\"mode\": \"cpu\"}]}, \"run\": %s}", run);
    json_t *root = json_loads(text, 0, NULL);
    char *cause = NULL;

    ASSERT(root != NULL);
    if (manifest_parse(root, m, &cause) != ACCEL_OK)
        FAIL_AT_("manifest_parse: %s", cause);
    json_decref(root);
    free(text);
}

static void check(const char *run, bool admin, enum accel_err want,
                  const char *msg)
{
    struct manifest m;
    char *cause = NULL;

    parse_run(run, &m);
    ASSERT_EQ(manifest_check_install(&m, admin, "/d/home/bob", &cause), want);
    if (msg != NULL)
        ASSERT_STR_EQ(cause, msg);
    else if (want != ACCEL_OK)
        ASSERT(cause != NULL);
    free(cause);
    manifest_release(&m);
}

TEST(manifest_reserved_env_refused)
{
    static const char *const vars[] = {
        "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_PRELOAD",
        "ACCEL_CONFIG", "ACCEL_APP", "ACCEL_ANYTHING_NEW"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(*vars); i++) {
        char *run = xasprintf("{\"command\": [\"x\"], \"env\": {\"OK\": "
                              "\"1\", \"%s\": \"v\"}}", vars[i]);
        char *msg = xasprintf("run.env.%s is set by accel and cannot be set "
                              "in a manifest", vars[i]);
        check(run, false, ACCEL_EINVAL, msg);
        check(run, true, ACCEL_EINVAL, msg); /* admins too */
        free(run);
        free(msg);
    }
    ASSERT(manifest_env_reserved("ACCEL_X=1"));
    ASSERT(!manifest_env_reserved("ACCEL"));
    ASSERT(!manifest_env_reserved("LD_PRELOADX=1"));
    ASSERT(!manifest_env_reserved("CUDA_VISIBLE"));
    ASSERT(!manifest_env_reserved("PATH=/bin"));
    check("{\"command\": [\"x\"], \"env\": {\"LD_LIBRARY_PATH\": \"/x\"}}",
          false, ACCEL_OK, NULL);
}

TEST(manifest_member_user_and_workdir)
{
    check("{\"command\": [\"x\"], \"user\": \"root\"}", false,
          ACCEL_EFORBIDDEN, "run.user: only an admin can choose the user an "
                            "app runs as (a member's app runs as its owner)");
    check("{\"command\": [\"x\"], \"user\": 0}", false, ACCEL_EFORBIDDEN,
          NULL);
    check("{\"command\": [\"x\"], \"user\": \"root\"}", true, ACCEL_OK, NULL);
    check("{\"command\": [\"x\"], \"user\": 0}", true, ACCEL_OK, NULL);
    static const char *const outside[] = {
        "/", "/d/home", "/d/home/bobby", "/d/home/bob/../alice",
        "/d/home/bob/./x", "/d/home/bob/..", "/srv"};
    for (size_t i = 0; i < sizeof(outside) / sizeof(*outside); i++) {
        char *run = xasprintf("{\"command\": [\"x\"], \"workdir\": \"%s\"}",
                              outside[i]);
        check(run, false, ACCEL_EFORBIDDEN,
              "run.workdir: a member's app may only work inside its "
              "owner's home /d/home/bob (outside it is admin-only)");
        check(run, true, ACCEL_OK, NULL);
        free(run);
    }
    check("{\"command\": [\"x\"], \"workdir\": \"/d/home/bob\"}", false,
          ACCEL_OK, NULL);
    check("{\"command\": [\"x\"], \"workdir\": \"/d/home/bob/app/..x\"}",
          false, ACCEL_OK, NULL);
    check("{\"command\": [\"x\"]}", false, ACCEL_OK, NULL);
}

TEST(manifest_run_user_and_preload_parse)
{
    struct manifest m;
    json_t *root;
    char *cause = NULL;
    static const char *const bad[] = {
        "\"user\": \"\"", "\"user\": \"-x\"", "\"user\": \"a b\"",
        "\"user\": -1", "\"user\": true", "\"preload\": \"/x.so\"",
        "\"preload\": [\"x.so\"]", "\"preload\": [\"/a:/b\"]",
        "\"preload\": [\"/a b\"]", "\"preload\": [1]"};

    parse_run("{\"command\": [\"x\"], \"user\": 65534, \"preload\": "
              "[\"/a.so\", \"/b.so\"]}", &m);
    ASSERT_STR_EQ(m.run.user, "65534");
    ASSERT_STR_EQ(m.run.preload[0], "/a.so");
    ASSERT_STR_EQ(m.run.preload[1], "/b.so");
    ASSERT(m.run.preload[2] == NULL);
    manifest_release(&m);
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char *text = xasprintf(
            "{\"metadata\": {\"name\": \"a\"}, \"spec\": {\"accelerator\": "
            "[{\"mode\": \"cpu\"}]}, \"run\": {\"command\": [\"x\"], %s}}",
            bad[i]);
        root = json_loads(text, 0, NULL);
        ASSERT(root != NULL);
        ASSERT_EQ(manifest_parse(root, &m, &cause), ACCEL_EINVAL);
        ASSERT(strncmp(cause, "run.user", 8) == 0 ||
               strncmp(cause, "run.preload", 11) == 0);
        free(cause);
        cause = NULL;
        json_decref(root);
        free(text);
    }
}

/* The default range collides with nothing; ranges that login.defs,
 * systemd, base-passwd or nobody own are refused, naming the option and
 * the owner; login.defs' own values count, and unmapped ids are refused. */
/* identity_range_check refuses lo-hi (login.defs text defs, uid_map and
 * gid_map as /proc shows them; NULL for none) with a cause naming names. */
static void range_refused(uint32_t lo, uint32_t hi, const char *defs,
                          const char *uid_map, const char *gid_map,
                          const char *names)
{
    char *cause = NULL;

    ASSERT_EQ(identity_range_check(lo, hi, defs, uid_map, gid_map, &cause),
              ACCEL_EINVAL);
    ASSERT(strstr(cause, names) != NULL);
    free(cause);
}

TEST(identity_range_check_collisions)
{
    static const char debian_defs[] =
        "# /etc/login.defs\n"
        "MAIL_DIR        /var/mail\n"
        "UID_MIN\t\t\t 1000\n"
        "UID_MAX\t\t\t60000\n"
        "#SYS_UID_MIN\t\t  100\n"
        "GID_MIN\t\t\t 1000\n"
        "GID_MAX\t\t\t60000\n"
        "SUB_UID_MIN\t\t   100000\n"
        "SUB_UID_MAX\t\t600100000\n";
    static const struct {
        uint32_t lo, hi;
        const char *names;   /* in the sentence */
    } bad[] = {
        {61184, 65519, "DynamicUser="},
        {65000, 70000, "DynamicUser="},
        {59990, 59999, "UID_MIN-UID_MAX of /etc/login.defs (regular users), "
                       "1000-60000"},
        {500, 600, "SYS_UID_MIN-SYS_UID_MAX"},
        {5, 10, "base-passwd"},
        {65534, 65534, "nobody"},
        {99990, 100010, "SUB_UID_MIN-SUB_UID_MAX"},
        {524288, 600000, "SUB_UID_MIN"},
        {60001, 60001, "systemd-homed"},
    };
    char *cause = NULL;

    ASSERT_EQ(identity_range_check(IDENTITY_UID_LO_DEFAULT,
                                   IDENTITY_UID_HI_DEFAULT, debian_defs,
                                   "0 0 4294967295\n", "0 0 4294967295\n",
                                   &cause), ACCEL_OK);
    ASSERT(cause == NULL);
    ASSERT_EQ(identity_range_check(IDENTITY_UID_LO_DEFAULT,
                                   IDENTITY_UID_HI_DEFAULT, NULL, NULL, NULL,
                                   NULL), ACCEL_OK); /* shadow's defaults */
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        ASSERT_EQ(identity_range_check(bad[i].lo, bad[i].hi, debian_defs,
                                       NULL, NULL, &cause), ACCEL_EINVAL);
        ASSERT(strncmp(cause, "--app-uid-range ", 16) == 0);
        ASSERT(strstr(cause, bad[i].names) != NULL);
        free(cause);
        cause = NULL;
    }
    /* login.defs' own values: regular users up to 70000 here */
    range_refused(65536, 99999, "UID_MIN 1000\nUID_MAX 0x11170\n", NULL, NULL,
                  "UID_MIN-UID_MAX of /etc/login.defs (regular users), "
                  "1000-70000");
    range_refused(65536, 99999, "GID_MAX 80000\n", NULL, NULL,
                  "GID_MIN-GID_MAX");
    /* a user namespace of 65536 ids (an unprivileged LXC container) */
    range_refused(65536, 99999, debian_defs,
                  "         0     100000      65536\n", NULL,
                  "uid 65536 is not mapped");
    range_refused(65536, 99999, debian_defs,
                  "0 100000 65536\n65536 300000 20000\n", "0 0 4294967295\n",
                  "uid 85536 is not mapped");
    range_refused(65536, 99999, debian_defs,
                  "0 100000 65536\n65536 300000 34464\n", "0 0 65536\n",
                  "gid 65536 is not mapped");
    ASSERT_EQ(identity_range_check(65536, 99999, debian_defs,
                                   "0 100000 65536\n65536 300000 34464\n",
                                   NULL, &cause), ACCEL_OK);
}

#define LIST(XX)                                                               \
    XX(identity_range_parse)                                                   \
    XX(identity_range_check_collisions)                                        \
    XX(identity_pick_lowest_free)                                              \
    XX(identity_resolve_run_user)                                              \
    XX(identity_app_uid_owner_run_user_unprivileged)                           \
    XX(manifest_reserved_env_refused)                                          \
    XX(manifest_member_user_and_workdir)                                       \
    XX(manifest_run_user_and_preload_parse)
TEST_MAIN(LIST)
