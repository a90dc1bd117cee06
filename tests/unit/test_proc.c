/* SPDX-License-Identifier: MIT */
/*
 * test_proc.c: proc.c with real processes (/bin/sh scripts): exit statuses,
 * synchronous launch failures, logs and rotation, identity by start time,
 * and stopping groups that ignore SIGTERM, fork, or escape with setsid.
 * Each test works in its own directory (harness_tmp) and cleans its
 * processes.
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/util.h"
#include "harness.h"

static char dir[512];

static const char *tmpdir(void)
{
    if (dir[0] == '\0') {
        snprintf(dir, sizeof(dir), "%s/proc", harness_tmp());
        ASSERT(mkdir(dir, 0755) == 0 || errno == EEXIST);
    }
    return dir;
}

static char *path_in(const char *name)
{
    return xasprintf("%s/%s", tmpdir(), name);
}

static void msleep(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Start `sh -c script`, logging to <dir>/app.log. */
static struct proc_handle start_sh(const char *script, char *const *env)
{
    char *argv[] = { "/bin/sh", "-c", (char *)script, NULL };
    char *log = path_in("app.log");
    struct proc_spec spec = { .name = "app", .argv = argv, .env = env,
                              .workdir = tmpdir(), .log_path = log,
                              .log_max_bytes = 0 };
    struct proc_handle h = { 0, 0 };
    char *cause = NULL;

    if (proc_start(&spec, &h, &cause) != ACCEL_OK)
        FAIL_AT_("proc_start: %s", cause ? cause : "?");
    ASSERT_GT(h.pid, 0);
    ASSERT_GT(h.start_time, 0);
    free(log);
    return h;
}

/* Poll proc_reap for up to ms; fails the test on timeout. */
static int reap_within(pid_t pid, unsigned ms)
{
    int status = 0;
    for (unsigned t = 0; t < ms; t += 10) {
        if (proc_reap(pid, &status) == ACCEL_OK)
            return status;
        msleep(10);
    }
    FAIL_AT_("pid %d did not exit within %u ms", (int)pid, ms);
    return -1;
}

/* Read a whole small file into a new string ("" when absent). */
static char *slurp(const char *path)
{
    char *buf = xcalloc(1, 65536);
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, 65535);
        buf[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    return buf;
}

/* Wait until the file holds `text` (the script reached a point). */
static void wait_for_text(const char *name, const char *text)
{
    char *path = path_in(name);
    for (int t = 0; t < 500; t++) {
        char *s = slurp(path);
        int found = strstr(s, text) != NULL;
        free(s);
        if (found) {
            free(path);
            return;
        }
        msleep(10);
    }
    FAIL_AT_("%s never contained \"%s\"", path, text);
}

static pid_t read_pid_file(const char *name)
{
    char *path, *s;
    long v;

    wait_for_text(name, "\n");
    path = path_in(name);
    s = slurp(path);
    v = strtol(s, NULL, 10);
    free(s);
    free(path);
    ASSERT_GT(v, 1);
    return (pid_t)v;
}

TEST(proc_exit_zero)
{
    struct proc_handle h = start_sh("exit 0", NULL);
    char buf[PROC_STATUS_LEN];
    int st = reap_within(h.pid, 5000);

    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    proc_exit_status(st, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "exited with status 0");
    ASSERT_EQ(proc_reap(h.pid, &st), ACCEL_ENOTFOUND); /* already reaped */
}

TEST(proc_exit_three)
{
    struct proc_handle h = start_sh("exit 3", NULL);
    char buf[PROC_STATUS_LEN];
    int st = reap_within(h.pid, 5000);

    proc_exit_status(st, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "exited with status 3");
}

TEST(proc_session_and_group)
{
    struct proc_handle h = start_sh("sleep 30", NULL);
    int st;

    ASSERT_EQ(getpgid(h.pid), h.pid);
    ASSERT_EQ(getsid(h.pid), h.pid);
    ASSERT_EQ(proc_reap(h.pid, &st), ACCEL_EBUSY);
    ASSERT(proc_group_alive(h.pid));
    ASSERT_EQ(proc_stop(&h, NULL, NULL, 2000, 2000, &st, NULL), ACCEL_OK);
    ASSERT(WIFSIGNALED(st));
    ASSERT_EQ(WTERMSIG(st), SIGTERM);
    ASSERT(!proc_group_alive(h.pid));
}

TEST(proc_identity)
{
    struct proc_handle h = start_sh("sleep 30", NULL);
    uint64_t mine = 0;

    ASSERT(proc_alive(h.pid, h.start_time));
    ASSERT(!proc_alive(h.pid, h.start_time + 1)); /* a reused pid */
    ASSERT_EQ(proc_start_time(getpid(), &mine), ACCEL_OK);
    ASSERT(proc_alive(getpid(), mine));
    kill(h.pid, SIGKILL);
    for (int t = 0; t < 500 && proc_alive(h.pid, h.start_time); t++)
        msleep(10); /* a zombie is not alive */
    ASSERT(!proc_alive(h.pid, h.start_time));
    reap_within(h.pid, 1000);
    ASSERT(!proc_alive(h.pid, h.start_time)); /* gone from /proc */
    ASSERT_EQ(proc_start_time(h.pid, &mine), ACCEL_ENOTFOUND);
}

TEST(proc_log_env_workdir_fds)
{
    char *env[] = { "ACCEL_TEST_FOO=bar", "HOME=/accel-home", NULL };
    char *log = path_in("app.log");
    char script[256];
    char *s;
    int leak = open("/dev/null", O_RDONLY); /* inherited unless closed */

    ASSERT_GE(leak, 3);
    snprintf(script, sizeof(script),
             "echo out=$ACCEL_TEST_FOO; echo err=$HOME >&2; pwd; cat; "
             "[ -e /proc/self/fd/%d ] && echo leaked; echo end",
             leak);
    reap_within(start_sh(script, env).pid, 5000);
    s = slurp(log);
    ASSERT(strstr(s, "out=bar\n") != NULL);
    ASSERT(strstr(s, "err=/accel-home\n") != NULL);
    ASSERT(strstr(s, tmpdir()) != NULL); /* pwd = workdir */
    ASSERT(strstr(s, "leaked") == NULL);
    ASSERT(strstr(s, "end\n") != NULL); /* cat read EOF from /dev/null */
    free(s);
    reap_within(start_sh("echo second", NULL).pid, 5000);
    s = slurp(log);
    ASSERT(strstr(s, "out=bar\n") != NULL); /* appended, not replaced */
    ASSERT(strstr(s, "second\n") != NULL);
    free(s);
    free(log);
    close(leak);
}

/* Start argv with spec fields; returns the code, *cause set on failure. */
static enum accel_err start_with(const struct proc_spec *spec,
                                 struct proc_handle *h, char **cause)
{
    *cause = NULL;
    return proc_start(spec, h, cause);
}

/* spec starts, its process exits within 5 s, and its log (spec's
 * log_path) then reads exactly want. */
static void ran_and_logged(const struct proc_spec *spec, const char *want)
{
    struct proc_handle h = { 0, 0 };
    char *cause = NULL, *s;

    ASSERT_EQ(start_with(spec, &h, &cause), ACCEL_OK);
    reap_within(h.pid, 5000);
    s = slurp(spec->log_path);
    ASSERT_STR_EQ(s, want);
    free(s);
}

TEST(proc_runs_as_cred_without_new_privs)
{
    char *argv[] = { "/bin/sh", "-c",
                     "id -u; id -g; id -G; grep NoNewPrivs /proc/self/status; "
                     "echo end", NULL };
    char *log = path_in("cred.log");
    struct proc_cred cred = { 61990, 61991 };
    struct proc_spec spec = { .name = "app", .argv = argv, .workdir = "/",
                              .log_path = log, .cred = &cred };

    if (geteuid() != 0) {
        free(log);
        return; /* only root can change uids: covered by the next test */
    }
    ran_and_logged(&spec, "61990\n61991\n61991\nNoNewPrivs:\t1\nend\n");
    free(log);
}

TEST(proc_cred_failure_fails_launch)
{
    char *argv[] = { "/bin/sh", "-c", "echo ran", NULL };
    char *log = path_in("credfail.log");
    /* -1 means "unchanged" to setresuid: the check afterwards must see that
     * the uid is not the one asked for and refuse to exec */
    struct proc_cred cred = { (uid_t)-1, (gid_t)-1 };
    struct proc_spec spec = { .name = "app", .argv = argv, .log_path = log,
                              .cred = &cred };
    struct proc_handle h = { 0, 0 };
    char *cause = NULL, *s;

    ASSERT_EQ(start_with(&spec, &h, &cause), ACCEL_ESYS);
    ASSERT(cause != NULL);
    ASSERT(strstr(cause, "cannot run 'app' as uid 4294967295") != NULL);
    ASSERT_EQ(h.pid, 0);
    s = slurp(log);
    ASSERT(strstr(s, "ran") == NULL);
    free(s);
    free(cause);
    free(log);
}

static int drop_marked(const char *entry)
{
    return strncmp(entry, "ACCEL_TEST_DROP=", 16) != 0;
}

TEST(proc_env_last_wins_and_inherit_filter)
{
    char *argv[] = { "/bin/sh", "-c",
                     "echo a=$ACCEL_TEST_A drop=${ACCEL_TEST_DROP-unset} "
                     "keep=$ACCEL_TEST_KEEP", NULL };
    char *env[] = { "ACCEL_TEST_A=manifest", "ACCEL_TEST_KEEP=2",
                    "ACCEL_TEST_A=acceld", NULL };
    char *log = path_in("env.log");
    struct proc_spec spec = { .name = "app", .argv = argv, .env = env,
                              .log_path = log, .inherit = drop_marked };

    setenv("ACCEL_TEST_DROP", "inherited", 1);
    setenv("ACCEL_TEST_KEEP", "1", 1);
    ran_and_logged(&spec, "a=acceld drop=unset keep=2\n");
    free(log);
    unsetenv("ACCEL_TEST_DROP");
    unsetenv("ACCEL_TEST_KEEP");
}

/* proc_start refuses app's argv (run in workdir, logging to log_path; NULL
 * for none) with want and says exactly why; nothing was started. */
static void start_refused(char **argv, const char *workdir,
                          const char *log_path, enum accel_err want,
                          const char *why)
{
    struct proc_spec spec = { .name = "app", .argv = argv, .env = NULL,
                              .workdir = workdir, .log_path = log_path,
                              .log_max_bytes = 0 };
    struct proc_handle h = { 0, 0 };
    char *cause = NULL;

    ASSERT_EQ(proc_start(&spec, &h, &cause), want);
    ASSERT_STR_EQ(cause, why);
    ASSERT_EQ(h.pid, 0); /* untouched */
    free(cause);
}

TEST(proc_missing_binary)
{
    char *argv[] = { "accel-no-such-binary", "x", NULL };
    char *abs[] = { "/nonexistent/foo", NULL };

    start_refused(argv, NULL, NULL, ACCEL_ENOTFOUND,
                  "cannot run 'accel-no-such-binary': No such file or "
                  "directory");
    start_refused(abs, NULL, NULL, ACCEL_ENOTFOUND,
                  "cannot run '/nonexistent/foo': No such file or directory");
    ASSERT_EQ(proc_reap(-1, NULL), ACCEL_ENOTFOUND); /* failed child reaped */
}

TEST(proc_not_executable)
{
    char *file = path_in("plain.txt");
    char *argv[] = { file, NULL };
    char *want;
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    ASSERT_GE(fd, 0);
    close(fd);
    want = xasprintf("cannot run '%s': Permission denied", file);
    start_refused(argv, NULL, NULL, ACCEL_EFORBIDDEN, want);
    free(want);
    free(file);
}

TEST(proc_bad_workdir)
{
    char *argv[] = { "/bin/true", NULL };

    start_refused(argv, "/nonexistent/dir", NULL, ACCEL_ENOTFOUND,
                  "cannot use workdir '/nonexistent/dir' for 'app': "
                  "No such file or directory");
    ASSERT_EQ(proc_reap(-1, NULL), ACCEL_ENOTFOUND);
}

TEST(proc_bad_log_dir)
{
    char *argv[] = { "/bin/true", NULL };

    start_refused(argv, NULL, "/nonexistent/logs/app.log", ACCEL_EIO,
                  "cannot open log file '/nonexistent/logs/app.log' "
                  "for 'app': No such file or directory");
}

TEST(proc_empty_argv)
{
    char *argv[] = { NULL };
    struct proc_spec spec = { .name = "app", .argv = argv, .env = NULL,
                              .workdir = NULL, .log_path = NULL,
                              .log_max_bytes = 0 };
    struct proc_handle h;
    char *cause = NULL;

    ASSERT_EQ(proc_start(&spec, &h, &cause), ACCEL_EINVAL);
    free(cause);
}

TEST(proc_log_rotates_at_start)
{
    char *argv[] = { "/bin/sh", "-c", "echo fresh", NULL };
    char *log = path_in("rot.log"), *old = path_in("rot.log.1");
    struct proc_spec spec = { .name = "app", .argv = argv, .env = NULL,
                              .workdir = NULL, .log_path = log,
                              .log_max_bytes = 100 };
    struct proc_handle h;
    FILE *f = fopen(log, "w");
    char *s;

    ASSERT(f != NULL);
    for (int i = 0; i < 20; i++)
        fputs("old line\n", f); /* 180 bytes > 100 */
    fclose(f);
    ASSERT_EQ(proc_start(&spec, &h, NULL), ACCEL_OK);
    reap_within(h.pid, 5000);
    s = slurp(log);
    ASSERT_STR_EQ(s, "fresh\n");
    free(s);
    s = slurp(old);
    ASSERT_EQ(strlen(s), 180);
    free(s);
    free(log);
    free(old);
}

/* A writer that seeked far ahead left a sparse log: the old log gets only
 * its last cap bytes, not the hole written out in full. */
TEST(proc_log_rotate_copies_the_tail_only)
{
    char *log = path_in("sparse.log"), *old = path_in("sparse.log.1");
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    struct stat sb;
    char *s;

    ASSERT(fd >= 0);
    ASSERT(pwrite(fd, "head\n", 5, 0) == 5);
    ASSERT(pwrite(fd, "tail\n", 5, 64 << 20) == 5); /* a 64 MiB hole */
    close(fd);
    ASSERT_EQ(proc_rotate_log(log, 4096), ACCEL_OK);
    ASSERT_EQ(stat(old, &sb), 0);
    ASSERT_EQ(sb.st_size, 4096);
    s = slurp(old);
    ASSERT(s[4096 - 5] == 't'); /* the last bytes are the tail */
    free(s);
    ASSERT_EQ(stat(log, &sb), 0);
    ASSERT_EQ(sb.st_size, 0);
    free(log);
    free(old);
}

TEST(proc_log_rotates_while_running)
{
    char *log = path_in("app.log"), *old = path_in("app.log.1");
    char *fifo = path_in("go");
    int made = mkfifo(fifo, 0600);
    struct proc_handle h =
        start_sh("i=0; while [ $i -lt 50 ]; do echo line-$i; i=$((i+1)); "
                 "done; echo ready; read x < ./go; echo after-rotation",
                 NULL);
    char *s;
    int fd;

    ASSERT_EQ(made, 0);
    wait_for_text("app.log", "ready\n");
    ASSERT_EQ(proc_rotate_log(log, 1000000), ACCEL_OK); /* small: no-op */
    s = slurp(old);
    ASSERT_STR_EQ(s, "");
    free(s);
    ASSERT_EQ(proc_rotate_log(log, 100), ACCEL_OK);
    s = slurp(old);
    ASSERT(strstr(s, "line-49\nready\n") != NULL);
    free(s);
    fd = open(fifo, O_WRONLY);
    ASSERT(write(fd, "x\n", 2) == 2);
    close(fd);
    free(fifo);
    reap_within(h.pid, 5000);
    s = slurp(log);
    ASSERT_STR_EQ(s, "after-rotation\n"); /* O_APPEND: no hole, no old data */
    free(s);
    free(log);
    free(old);
}

TEST(proc_stop_ignores_sigterm)
{
    struct proc_handle h =
        start_sh("trap '' TERM; echo ready; while :; do sleep 1; done", NULL);
    char buf[PROC_STATUS_LEN];
    uint64_t t0;
    int st = 0;

    wait_for_text("app.log", "ready\n");
    t0 = util_now_ns();
    ASSERT_EQ(proc_stop(&h, NULL, NULL, 300, 3000, &st, NULL), ACCEL_OK);
    ASSERT_GE((util_now_ns() - t0) / 1000000, 300);
    proc_exit_status(st, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "killed by signal 9 (SIGKILL)");
    ASSERT(!proc_group_alive(h.pid));
}

TEST(proc_stop_background_child)
{
    struct proc_handle h =
        start_sh("sleep 60 & echo $! > child.pid; wait", NULL);
    pid_t child = read_pid_file("child.pid");
    uint64_t cstart = 0;
    int st = 0;

    ASSERT_EQ(proc_start_time(child, &cstart), ACCEL_OK);
    ASSERT_EQ(getpgid(child), h.pid);
    ASSERT_EQ(proc_stop(&h, NULL, NULL, 2000, 2000, &st, NULL), ACCEL_OK);
    ASSERT(!proc_alive(child, cstart));
    ASSERT(!proc_group_alive(h.pid));
}

/* A daemon that double-forks and setsid()s away is not in the group. */
TEST(proc_stop_escaped_by_env)
{
    char tag[96], value[48];
    char *env[] = { tag, NULL };
    struct proc_handle h;
    pid_t escaped, *found = NULL;
    uint64_t estart = 0;
    size_t n = 0;
    int seen = 0;

    snprintf(value, sizeof(value), "test-%d", (int)getpid());
    snprintf(tag, sizeof(tag), "ACCEL_APP=%s", value);
    h = start_sh("( setsid sleep 60 & echo $! > esc.pid ); sleep 60", env);
    escaped = read_pid_file("esc.pid");
    for (int t = 0; t < 200 && getsid(escaped) != escaped; t++)
        msleep(10); /* setsid(1) runs after the pid file is written */
    ASSERT_EQ(getsid(escaped), escaped);
    ASSERT_EQ(proc_start_time(escaped, &estart), ACCEL_OK);
    /* a process in the middle of an exec (the shell turning into its last
     * command) briefly has no readable environment: look again for up to
     * two seconds */
    for (int t = 0; t < 200 && seen != 2; t++) {
        if (t > 0)
            msleep(10);
        free(found);
        found = NULL;
        seen = 0;
        ASSERT_EQ(proc_find_by_env("ACCEL_APP", value, &found, &n), ACCEL_OK);
        for (size_t i = 0; i < n; i++)
            seen += found[i] == escaped || found[i] == h.pid;
    }
    ASSERT_EQ(seen, 2);
    free(found);
    /* Without the tag the group stop misses it ... */
    ASSERT_EQ(proc_stop(&h, NULL, NULL, 2000, 2000, NULL, NULL), ACCEL_OK);
    ASSERT(proc_alive(escaped, estart));
    /* ... with it, nothing is left. */
    ASSERT_EQ(proc_stop(&h, "ACCEL_APP", value, 2000, 2000, NULL, NULL),
              ACCEL_OK);
    ASSERT(!proc_alive(escaped, estart));
    ASSERT_EQ(proc_find_by_env("ACCEL_APP", value, &found, &n), ACCEL_OK);
    ASSERT_EQ(n, 0);
    ASSERT(found == NULL);
}

TEST(proc_find_by_env_exact)
{
    char tag[96], value[48];
    char *env[] = { tag, NULL };
    struct proc_handle h;
    pid_t *found = (pid_t *)1;
    size_t n = 9;

    snprintf(value, sizeof(value), "test-%d", (int)getpid());
    snprintf(tag, sizeof(tag), "ACCEL_APP=%s-longer", value);
    h = start_sh("sleep 60", env);
    /* A prefix of the value is another app. */
    ASSERT_EQ(proc_find_by_env("ACCEL_APP", value, &found, &n), ACCEL_OK);
    ASSERT_EQ(n, 0);
    ASSERT(found == NULL);
    ASSERT_EQ(proc_find_by_env("ACCEL_APP", tag + 10, &found, &n), ACCEL_OK);
    ASSERT_GE(n, 1); /* sh, and sleep if sh forked it */
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(getpgid(found[i]), h.pid);
    free(found);
    ASSERT_EQ(proc_stop(&h, NULL, NULL, 2000, 2000, NULL, NULL), ACCEL_OK);
}

TEST(proc_stop_already_gone)
{
    struct proc_handle h = start_sh("exit 5", NULL);
    int st = -1;

    for (int t = 0; t < 500 && proc_alive(h.pid, h.start_time); t++)
        msleep(10);
    ASSERT_EQ(proc_stop(&h, NULL, NULL, 100, 100, &st, NULL), ACCEL_OK);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 5);
}

TEST(proc_exit_status_sentences)
{
    char buf[PROC_STATUS_LEN];

    proc_exit_status(3 << 8, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "exited with status 3");
    proc_exit_status(SIGTERM, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "killed by signal 15 (SIGTERM)");
}

TEST(proc_boot_id_read)
{
    char buf[64];

    ASSERT_EQ(proc_boot_id(buf, sizeof(buf)), ACCEL_OK);
    ASSERT_EQ(strlen(buf), 36);
}

#define TESTS(XX)                                                              \
    XX(proc_exit_zero)                                                         \
    XX(proc_exit_three)                                                        \
    XX(proc_session_and_group)                                                 \
    XX(proc_identity)                                                          \
    XX(proc_log_env_workdir_fds)                                               \
    XX(proc_runs_as_cred_without_new_privs)                                    \
    XX(proc_cred_failure_fails_launch)                                         \
    XX(proc_env_last_wins_and_inherit_filter)                                  \
    XX(proc_missing_binary)                                                    \
    XX(proc_not_executable)                                                    \
    XX(proc_bad_workdir)                                                       \
    XX(proc_bad_log_dir)                                                       \
    XX(proc_empty_argv)                                                        \
    XX(proc_log_rotates_at_start)                                              \
    XX(proc_log_rotates_while_running)                                         \
    XX(proc_log_rotate_copies_the_tail_only)                                   \
    XX(proc_stop_ignores_sigterm)                                              \
    XX(proc_stop_background_child)                                             \
    XX(proc_stop_escaped_by_env)                                               \
    XX(proc_find_by_env_exact)                                                 \
    XX(proc_stop_already_gone)                                                 \
    XX(proc_exit_status_sentences)                                             \
    XX(proc_boot_id_read)

TEST_MAIN(TESTS)
