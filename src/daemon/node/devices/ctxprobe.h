/* SPDX-License-Identifier: MIT */
/*
 * ctxprobe.h: what a driver's context takes on each local NVIDIA device,
 * measured by acceld itself, once per device (docs/internals/shim.md, "A
 * context's size, measured by acceld"). A thread of its own runs
 * accel-ctxprobe (src/ctxprobe) as a child with the shim preloaded and a
 * ledger of its own: the shim measures the probe's context as it measures
 * an app's, and the size it writes into that ledger is kept here, by the
 * device's UUID, for appsetup_write to seed every new ledger of the device
 * with. Not the measure itself (the shim's, src/shim/ctx.c), nor the seed
 * (ledger.h).
 *
 * When: at start and whenever a local NVIDIA device in Memory slicing is
 * seen without a measure (a device that appears, or is switched to
 * Memory slicing), one device at a time, in the background; never while
 * the card's free memory, as NVML counts it just before (the thread's
 * own handle), is below CTXPROBE_MARGIN (the probe's context would take
 * memory running apps may need: tried again when the card has room). A
 * child that has not exited after CTXPROBE_TIMEOUT_MS is killed; a
 * failure (no NVML to read the card's free memory from, no libcuda, no
 * measure, a timeout) leaves no value, is said once in the log and is
 * not tried again until acceld restarts. Thread-safety: every function takes
 * the module's own lock after d->lock (never the other way round);
 * ctxprobe_bytes is called with d->lock held (d->ctxprobe is set and
 * cleared under it).
 */
#ifndef ACCEL_DAEMON_NODE_DEVICES_CTXPROBE_H
#define ACCEL_DAEMON_NODE_DEVICES_CTXPROBE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"
#include "daemon/state.h"

/* A card's free memory below which it is not probed (2 GiB: a context
 * takes 0.3-0.6 GiB on current cards, and the probe's is held for an
 * instant only). */
#define CTXPROBE_MARGIN (2ULL << 30)
/* How long the probe may run before it is killed (ms). */
#define CTXPROBE_TIMEOUT_MS 10000
/* The environment variable of acceld naming a directory put first in the
 * probe's library search path (LD_LIBRARY_PATH), where libcuda.so.1 and
 * libnvidia-ml.so.1 are looked for (tests: the stand-in driver's). */
#define CTXPROBE_LIBDIR_ENV "ACCEL_CTXPROBE_LIBDIR"

/*
 * Start the probe's thread (d->ctxprobe set) when acceld has a shim and
 * the accel-ctxprobe program (ACCEL_CTXPROBE, else beside the installed
 * acceld, else the build tree's); without either the apps' first
 * processes measure as before, and the log says why once. Call after the
 * HTTP server started: nothing waits for a probe. ACCEL_OK, or ACCEL_ESYS
 * (no thread).
 */
enum accel_err ctxprobe_start(struct accel_daemon *d);

/* Stop the thread (a probe in flight is killed and its files removed) and
 * free the module; d->ctxprobe becomes NULL. Accepts none started. */
void ctxprobe_stop(struct accel_daemon *d);

/* The context size measured on device `uuid` (d->lock held): 1 with the
 * bytes in *out (set only then), or 0 (none measured, or no probe). */
int ctxprobe_bytes(struct accel_daemon *d, const char *uuid, uint64_t *out);

/* Whether pid is the probe running now (d->lock held): acceld's own
 * process on the card for a moment, never foreign use (the reconciler). */
bool ctxprobe_is_probe(struct accel_daemon *d, pid_t pid);

#endif
