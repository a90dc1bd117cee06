/* SPDX-License-Identifier: MIT */
/*
 * test_applog.c: applog.c: an app's output through its FIFO lands in its
 * log, rotated at the cap with a bounded number of old logs; the FIFO
 * cannot be seeked; a FIFO is adopted again by a new writer (an acceld
 * restart) and removed once the app is gone.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/applog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/util.h"
#include "harness.h"

#define CAP (64u << 10) /* the smallest cap applog takes */

static void msleep(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char *in_tmp(const char *name)
{
    return xasprintf("%s/%s", harness_tmp(), name);
}

static long size_of(const char *name)
{
    char *p = in_tmp(name);
    struct stat sb;
    long n = stat(p, &sb) == 0 ? (long)sb.st_size : -1;

    free(p);
    return n;
}

/* Does the log end with text (within 10 s)? */
static void wait_for_tail(const char *name, const char *text)
{
    char *p = in_tmp(name);
    size_t n = strlen(text);

    for (int t = 0; t < 1000; t++) {
        char buf[256] = "";
        int fd = open(p, O_RDONLY);
        off_t end = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
        if (end >= (off_t)n && pread(fd, buf, n, end - (off_t)n) ==
                                   (ssize_t)n && memcmp(buf, text, n) == 0) {
            close(fd);
            free(p);
            return;
        }
        if (fd >= 0)
            close(fd);
        msleep(10);
    }
    FAIL_AT_("%s never ended with \"%s\"", p, text);
}

static void write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        ASSERT(w > 0);
        buf += w;
        n -= (size_t)w;
    }
}

TEST(applog_rotates_at_the_cap_and_keeps_two)
{
    struct applog *l = NULL;
    char *cause = NULL, *buf = xmalloc(4096);
    int fd = -1;

    ASSERT_EQ(applog_start(harness_tmp(), CAP, &l), ACCEL_OK);
    ASSERT_EQ(applog_open(l, "app", &fd, &cause), ACCEL_OK);
    ASSERT(fd >= 0);
    ASSERT_EQ(lseek(fd, 1 << 30, SEEK_SET), -1); /* a pipe */
    ASSERT_EQ(errno, ESPIPE);
    memset(buf, 'x', 4096);
    for (int i = 0; i < 256; i++) /* 1 MiB: 16 caps */
        write_all(fd, buf, 4096);
    write_all(fd, "end\n", 4);
    wait_for_tail("app.log", "end\n");
    /* rotated before a write that would pass the cap: each file holds at
     * most the cap (reads come in whatever sizes the pipe gives) */
    ASSERT_LE(size_of("app.log"), CAP);
    ASSERT_LE(size_of("app.log.1"), CAP);
    ASSERT_GT(size_of("app.log.1"), 0);
    ASSERT_LE(size_of("app.log.2"), CAP);
    ASSERT_GT(size_of("app.log.2"), 0);
    ASSERT_EQ(size_of("app.log.3"), -1);
    close(fd);
    applog_close(l, "app");
    applog_stop(l);
    ASSERT_EQ(size_of("app.pipe"), -1); /* removed with the app */
    free(buf);
}

TEST(applog_adopts_a_fifo_again)
{
    struct applog *l = NULL;
    char *cause = NULL;
    int fd = -1;

    ASSERT_EQ(applog_start(harness_tmp(), 0, &l), ACCEL_OK);
    ASSERT(!applog_adopt(l, "app")); /* no FIFO: an older app */
    ASSERT_EQ(applog_open(l, "app", &fd, &cause), ACCEL_OK);
    write_all(fd, "before\n", 7);
    wait_for_tail("app.log", "before\n");
    applog_stop(l); /* acceld goes; the app keeps its descriptor */
    write_all(fd, "while down\n", 11); /* the pipe holds it: no SIGPIPE */
    ASSERT_EQ(applog_start(harness_tmp(), 0, &l), ACCEL_OK);
    ASSERT(applog_adopt(l, "app"));
    ASSERT(applog_adopt(l, "app")); /* once */
    write_all(fd, "after\n", 6);
    wait_for_tail("app.log", "before\nwhile down\nafter\n");
    close(fd);
    applog_close(l, "app");
    applog_stop(l);
    ASSERT_EQ(size_of("app.pipe"), -1);
}

TEST(applog_open_fails_with_the_log_named)
{
    struct applog *l = NULL;
    char *cause = NULL, *dir = in_tmp("not-a-dir");
    int fd = -1, f = open(dir, O_WRONLY | O_CREAT, 0644);

    ASSERT(f >= 0);
    close(f);
    ASSERT_EQ(applog_start(dir, 0, &l), ACCEL_OK);
    ASSERT_EQ(applog_open(l, "app", &fd, &cause), ACCEL_EIO);
    ASSERT(strstr(cause, "cannot open log file '") != NULL);
    ASSERT(strstr(cause, "not-a-dir/app.log' for 'app': Not a directory") !=
           NULL);
    ASSERT_EQ(fd, -1);
    free(cause);
    applog_stop(l);
    free(dir);
}

#define TESTS(XX)                                                              \
    XX(applog_rotates_at_the_cap_and_keeps_two)                                \
    XX(applog_adopts_a_fifo_again)                                             \
    XX(applog_open_fails_with_the_log_named)

TEST_MAIN(TESTS)
