/* SPDX-License-Identifier: MIT */
/*
 * accel_setup.h: included first by every .c that needs POSIX/GNU extensions.
 * We build with -std=c11 (no extensions), so declare the POSIX 2008 and GNU
 * surface we use (strdup, asprintf-free code, clock_gettime, pipe2, dl_iterate)
 * here, once, instead of sprinkling feature macros.
 */
#ifndef ACCEL_COMMON_ACCEL_SETUP_H
#define ACCEL_COMMON_ACCEL_SETUP_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#endif
