/* SPDX-License-Identifier: MIT */
/*
 * harness.h: the unit-test harness. A test file defines its tests with
 * TEST(name) and lists them once in TEST_LIST(XX); TEST_MAIN() then gives a
 * main that runs each test in a forked child (a crash fails one test), runs
 * one test by name (`./test_rules rules_worked_example`), and prints the
 * closing line "N passed, N failed".
 *
 * Each test gets its own temporary directory: the parent creates it under
 * $TMPDIR (or /tmp) before the fork, the child sees it as $TMPDIR (tests
 * put their files under harness_tmp()), and the parent removes it with all
 * it holds when the child has ended, whether the test passed, failed or
 * crashed. A test therefore leaves nothing behind.
 *
 * One executable per test file instead of one shared test_list.h: the files
 * are written in parallel and CMake finds them by glob, so no shared list has
 * to be edited for a new file.
 */
#ifndef ACCEL_TESTS_UNIT_HARNESS_H
#define ACCEL_TESTS_UNIT_HARNESS_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST(name) static void test_##name(void)

#define FAIL_AT_(...)                                                          \
    do {                                                                       \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                        \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        _exit(1);                                                              \
    } while (0)

#define ASSERT(c)                                                              \
    do {                                                                       \
        if (!(c))                                                              \
            FAIL_AT_("assertion failed: %s", #c);                              \
    } while (0)

#define ASSERT_INT_OP_(a, op, b)                                               \
    do {                                                                       \
        intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                       \
        if (!(a_ op b_))                                                       \
            FAIL_AT_("%s %s %s: %jd vs %jd", #a, #op, #b, a_, b_);            \
    } while (0)
#define ASSERT_EQ(a, b) ASSERT_INT_OP_(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_INT_OP_(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_INT_OP_(a, <, b)
#define ASSERT_LE(a, b) ASSERT_INT_OP_(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_INT_OP_(a, >, b)
#define ASSERT_GE(a, b) ASSERT_INT_OP_(a, >=, b)

#define ASSERT_U64_EQ(a, b)                                                    \
    do {                                                                       \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                       \
        if (a_ != b_)                                                          \
            FAIL_AT_("%s == %s: %" PRIu64 " vs %" PRIu64, #a, #b, a_, b_);    \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                                    \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                   \
            FAIL_AT_("%s == %s: \"%s\" vs \"%s\"", #a, #b,                     \
                     a_ ? a_ : "(null)", b_ ? b_ : "(null)");                  \
    } while (0)

/* This test's temporary directory (removed when the test ends). */
static inline const char *harness_tmp(void)
{
    const char *t = getenv("TMPDIR");
    return t && t[0] ? t : "/tmp";
}

/* Run argv (a cleanup tool) and wait for it; its status or -1. */
static int harness_spawn(char *const argv[])
{
    int status = 0;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0)
        ;
    return status;
}

/* Remove dir and everything under it, whatever modes a test left. */
static void harness_rm_tree(char *dir)
{
    char *chmod_argv[] = {"chmod", "-R", "u+rwx", dir, NULL};
    char *rm_argv[] = {"rm", "-rf", "--", dir, NULL};
    harness_spawn(chmod_argv);
    if (harness_spawn(rm_argv) != 0)
        fprintf(stderr, "harness: could not remove %s\n", dir);
}

struct harness_test {
    const char *name;
    void (*fn)(void);
};

#define TEST_ENTRY_(name) {#name, test_##name},

static int harness_run_one(const struct harness_test *t)
{
    pid_t pid;
    int status = 0;

    char tmp[4096];

    /* short: tests put Unix sockets (108 bytes at most) under it */
    snprintf(tmp, sizeof tmp, "%s/u-XXXXXX", harness_tmp());
    if (mkdtemp(tmp) == NULL) {
        perror("mkdtemp");
        return 0;
    }
    chmod(tmp, 0755); /* tests that drop to another uid reach it */
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        perror("fork");
        harness_rm_tree(tmp);
        return 0;
    }
    if (pid == 0) {
        setenv("TMPDIR", tmp, 1);
        t->fn();
        fflush(stdout);
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0)
        ;
    harness_rm_tree(tmp);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        printf("ok   %s\n", t->name);
        return 1;
    }
    if (WIFSIGNALED(status))
        printf("FAIL %s (signal %d)\n", t->name, WTERMSIG(status));
    else
        printf("FAIL %s (exit %d)\n", t->name, WEXITSTATUS(status));
    return 0;
}

static int harness_main(const struct harness_test *tests, size_t n, int argc,
                        char **argv)
{
    size_t passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1) {
            int wanted = 0;
            for (int a = 1; a < argc; a++)
                if (strcmp(argv[a], tests[i].name) == 0)
                    wanted = 1;
            if (!wanted)
                continue;
        }
        if (harness_run_one(&tests[i]))
            passed++;
        else
            failed++;
    }
    printf("%zu passed, %zu failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}

#define TEST_MAIN(LIST)                                                        \
    int main(int argc, char **argv)                                            \
    {                                                                          \
        static const struct harness_test tests_[] = {LIST(TEST_ENTRY_)};       \
        return harness_main(tests_, sizeof(tests_) / sizeof(tests_[0]), argc,  \
                            argv);                                             \
    }

#endif /* ACCEL_TESTS_UNIT_HARNESS_H */
