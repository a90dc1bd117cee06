/* SPDX-License-Identifier: MIT */
/*
 * runner_int.h: the runners runner.c chooses from, private to the runtime
 * wing as store_int.h is to the store: each runner file defines its
 * table, runner.c alone names them. Nothing else includes this.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_RUNNER_INT_H
#define ACCEL_DAEMON_NODE_RUNTIME_RUNNER_INT_H

#include "daemon/node/runtime/runner.h"

extern const struct runner runner_process;   /* runner_process.c */
extern const struct runner runner_container; /* runner_container.c */

#endif /* ACCEL_DAEMON_NODE_RUNTIME_RUNNER_INT_H */
