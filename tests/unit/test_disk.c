/* SPDX-License-Identifier: MIT */
/*
 * test_disk.c: disk.c: the bounded walk of a home (what it counts, what it
 * does not follow, where it stops) and the data directory's reserve.
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "harness.h"

static char *in_tmp(const char *name)
{
    return xasprintf("%s/%s", harness_tmp(), name);
}

static void write_file(const char *path, size_t n)
{
    char buf[4096];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    ASSERT(fd >= 0);
    memset(buf, 'x', sizeof buf);
    for (size_t done = 0; done < n; done += sizeof buf)
        ASSERT(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
    ASSERT(fsync(fd) == 0); /* blocks allocated now */
    close(fd);
}

TEST(disk_usage_counts_files_and_directories)
{
    char *home = in_tmp("home"), *sub = in_tmp("home/a"),
         *f = in_tmp("home/a/big");
    uint64_t bytes = 0;
    size_t entries = 0;

    ASSERT_EQ(mkdir(home, 0700), 0);
    ASSERT_EQ(mkdir(sub, 0700), 0);
    write_file(f, 1 << 20);
    ASSERT_EQ(disk_usage(home, 1000, &bytes, &entries), ACCEL_OK);
    ASSERT_GE(bytes, 1 << 20);
    ASSERT_LT(bytes, 2 << 20);
    ASSERT_EQ(entries, 3); /* home, a, big */
    free(home);
    free(sub);
    free(f);
}

TEST(disk_usage_does_not_follow_links)
{
    char *home = in_tmp("home"), *out = in_tmp("outside"),
         *big = in_tmp("outside/big"), *l1 = in_tmp("home/dir-link"),
         *l2 = in_tmp("home/file-link");
    uint64_t bytes = 0;

    ASSERT_EQ(mkdir(home, 0700), 0);
    ASSERT_EQ(mkdir(out, 0700), 0);
    write_file(big, 4 << 20);
    ASSERT_EQ(symlink(out, l1), 0);
    ASSERT_EQ(symlink(big, l2), 0);
    ASSERT_EQ(disk_usage(home, 1000, &bytes, NULL), ACCEL_OK);
    ASSERT_LT(bytes, 1 << 20); /* the 4 MiB outside are not counted */
    free(home);
    free(out);
    free(big);
    free(l1);
    free(l2);
}

TEST(disk_usage_is_bounded)
{
    char *home = in_tmp("home");
    char path[4096];
    uint64_t bytes = 0;
    size_t entries = 0;
    int n;

    ASSERT_EQ(mkdir(home, 0700), 0);
    for (int i = 0; i < 50; i++) {
        snprintf(path, sizeof path, "%s/f%d", home, i);
        write_file(path, 0);
    }
    ASSERT_EQ(disk_usage(home, 20, &bytes, &entries), ACCEL_ERANGE);
    ASSERT_EQ(entries, 21); /* it stopped past the bound */
    ASSERT_EQ(disk_usage(home, 100, &bytes, &entries), ACCEL_OK);
    ASSERT_EQ(entries, 51);
    /* deeper than DISK_WALK_MAX_DEPTH: not measured, said so */
    n = snprintf(path, sizeof path, "%s", home);
    for (unsigned d = 0; d <= DISK_WALK_MAX_DEPTH + 1; d++) {
        n += snprintf(path + n, sizeof path - (size_t)n, "/d");
        ASSERT_EQ(mkdir(path, 0700), 0);
    }
    ASSERT_EQ(disk_usage(home, 100000, &bytes, NULL), ACCEL_ERANGE);
    ASSERT_EQ(disk_usage("/nonexistent/home", 100, &bytes, NULL),
              ACCEL_ENOTFOUND);
    free(home);
}

/* A directory the measuring process cannot open would hide what it holds:
 * the tree counts as not measurable. Run as an unprivileged uid (root
 * reads everything). */
TEST(disk_usage_unreadable_directory_is_not_hidden)
{
    char *home = in_tmp("home"), *hid = in_tmp("home/hidden");
    uint64_t bytes = 0;
    int status = 0;
    pid_t pid;

    if (geteuid() != 0) {
        printf("skipped: needs root to become another uid\n");
        free(home);
        free(hid);
        return;
    }
    ASSERT_EQ(mkdir(home, 0755), 0);
    ASSERT_EQ(mkdir(hid, 0000), 0);
    pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(2);
        _exit(disk_usage(home, 1000, &bytes, NULL) == ACCEL_ERANGE ? 0 : 1);
    }
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
    free(home);
    free(hid);
}

TEST(disk_reserve)
{
    int status = 0;
    char *why;

    setenv(DISK_RESERVE_ENV, "0", 1);
    ASSERT(disk_check_reserve(harness_tmp(), &status) == NULL);
    setenv(DISK_RESERVE_ENV, "1Ei", 1);
    why = disk_check_reserve(harness_tmp(), &status);
    ASSERT(why != NULL);
    ASSERT_EQ(status, 507);
    ASSERT(strstr(why, harness_tmp()) != NULL);
    ASSERT(strstr(why, "the reserve of 1.0 EiB (ACCEL_DISK_RESERVE)") != NULL);
    free(why);
    setenv(DISK_RESERVE_ENV, "12 bananas", 1);
    why = disk_check_reserve(harness_tmp(), &status);
    ASSERT(why != NULL);
    ASSERT_EQ(status, 500);
    ASSERT(strstr(why, "ACCEL_DISK_RESERVE=\"12 bananas\" is not a quantity")
           != NULL);
    free(why);
}

/* An image's size on top of the reserve (a pull's check, SPEC 8.2.1). */
TEST(disk_room_for_an_image)
{
    int status = 0;
    char *why;

    setenv(DISK_RESERVE_ENV, "1Mi", 1);
    ASSERT(disk_check_room(harness_tmp(), 4096, "the image", &status) ==
           NULL);
    why = disk_check_room(harness_tmp(), (uint64_t)1 << 60, "the image",
                          &status);
    ASSERT(why != NULL);
    ASSERT_EQ(status, 507);
    ASSERT(strstr(why, "the image takes 1.0 EiB and the file system of the "
                       "data directory ") != NULL);
    ASSERT(strstr(why, "it would leave less than the reserve of 1.0 MiB "
                       "(ACCEL_DISK_RESERVE)") != NULL);
    free(why);
    unsetenv(DISK_RESERVE_ENV);
}

/* This process's cgroup path in the unified hierarchy ("0::<path>"), for a
 * mark that names it. */
static char *own_cgroup(void)
{
    char buf[4096], *line, *save = NULL;
    int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;

    ASSERT(n > 0);
    close(fd);
    buf[n] = '\0';
    for (line = strtok_r(buf, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save))
        if (strncmp(line, "0::", 3) == 0)
            return xstrdup(line + 3);
    return xstrdup(":"); /* every line has one */
}

/* A file this process unlinked and holds open counts for its uid; with a
 * cgroup mark, only where its cgroup path holds the mark (another acceld
 * instance's processes of the same uid do not count for this one). */
TEST(disk_unlinked_open_counts_by_uid_and_cgroup)
{
    char *f = in_tmp("hidden"), *mine = own_cgroup();
    struct stat sb;
    uint64_t bytes = 0;
    int fd;

    write_file(f, 1 << 20);
    fd = open(f, O_RDONLY | O_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT_EQ(unlink(f), 0);
    ASSERT_EQ(fstat(fd, &sb), 0);
    ASSERT_EQ(disk_unlinked_open("/proc", (uint32_t)getuid(), NULL,
                                 sb.st_dev, 100000, &bytes), ACCEL_OK);
    ASSERT_GE(bytes, 1 << 20);
    bytes = 1;
    ASSERT_EQ(disk_unlinked_open("/proc", (uint32_t)getuid(),
                                 "/accel.slice/no-such-instance/", sb.st_dev,
                                 100000, &bytes), ACCEL_OK);
    ASSERT_EQ(bytes, 0);
    ASSERT_EQ(disk_unlinked_open("/proc", (uint32_t)getuid(), mine,
                                 sb.st_dev, 100000, &bytes), ACCEL_OK);
    ASSERT_GE(bytes, 1 << 20);
    close(fd);
    free(mine);
    free(f);
}

#define TESTS(XX)                                                              \
    XX(disk_usage_counts_files_and_directories)                                \
    XX(disk_usage_does_not_follow_links)                                       \
    XX(disk_usage_is_bounded)                                                  \
    XX(disk_usage_unreadable_directory_is_not_hidden)                          \
    XX(disk_reserve)                                                           \
    XX(disk_room_for_an_image)                                                 \
    XX(disk_unlinked_open_counts_by_uid_and_cgroup)

TEST_MAIN(TESTS)
