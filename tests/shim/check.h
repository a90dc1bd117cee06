/* SPDX-License-Identifier: MIT */
/*
 * check.h: the shim snippet programs' CHECK. A failed condition is counted
 * in `failures` (which the program turns into its exit status) and said on
 * stderr with where and why, so that one run reports every failed check,
 * not only the first.
 */
#ifndef ACCEL_TESTS_SHIM_CHECK_H
#define ACCEL_TESTS_SHIM_CHECK_H

#include <stdio.h>

extern int failures; /* defined once per program */

#define CHECK(c, ...)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            failures++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #c);       \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)

#endif /* ACCEL_TESTS_SHIM_CHECK_H */
