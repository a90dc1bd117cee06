/* SPDX-License-Identifier: MIT */
/*
 * diskwatch.h: limitedDisk's watched tier, measured for the supervisor
 * (diskwatch.c). d->lock not held by the caller of diskwatch_pass.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_DISKWATCH_H
#define ACCEL_DAEMON_NODE_RUNTIME_DISKWATCH_H

#include <stdint.h>

struct accel_daemon;
struct app;

/* a's limitedDisk in bytes, 0 = none. */
uint64_t diskwatch_limit(const struct app *a);

/* Measure the homes of the running (and stopping) apps with a limitedDisk
 * and call over(d, a, why) under d->lock for each app past its limit (or
 * whose home cannot be measured within the walk's bounds), why the
 * sentence it is stopped with. Returns the milliseconds the pass took. */
uint64_t diskwatch_pass(struct accel_daemon *d,
                        void (*over)(struct accel_daemon *d, struct app *a,
                                     const char *why));

#endif /* ACCEL_DAEMON_NODE_RUNTIME_DISKWATCH_H */
