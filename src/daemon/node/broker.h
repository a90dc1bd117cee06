/* SPDX-License-Identifier: MIT */
/*
 * broker.h: the old path of slice/broker.h, kept while tests/shim (worked
 * on beside issue 43) still includes it; nothing under src/ includes it.
 * Delete it once tests/shim includes "daemon/node/slice/broker.h".
 */
#ifndef ACCEL_DAEMON_NODE_BROKER_H
#define ACCEL_DAEMON_NODE_BROKER_H

#include "daemon/node/slice/broker.h"

#endif
