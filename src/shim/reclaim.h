/* SPDX-License-Identifier: MIT */
/*
 * reclaim.h: the shim's side of elastic memory (SPEC 4.4). When an
 * allocation within the app's quota finds the card physically short (the
 * driver refuses it), the shim asks acceld for the bytes over its reclaim
 * socket (the config's "reclaim <ordinal> <socket>" line), waits for the
 * answer (acceld bounds the wait by the device's reclaimWaitMs) and, when
 * acceld says the card's free memory now covers the request, lets the
 * caller try the driver again. docs/elastic.md.
 */
#ifndef ACCEL_SHIM_RECLAIM_H
#define ACCEL_SHIM_RECLAIM_H

#include "shim/shim.h" /* first: its feature macros */

#include <stdint.h>

#include "accel/ledger.h"

/* How many times an allocation asks before it fails (another process may
 * take what was freed before the retry). */
#define RECLAIM_TRIES 3

/* The reclaim socket of device `ordinal` (a config line; path absolute). */
SHIM_HIDDEN void reclaim_config(int ordinal, const char *path);

/* Stamp ledger l with now (CLOCK_MONOTONIC ms, read from the coarse
 * clock: up to a tick behind): the app took memory on the device (acceld
 * asks the idlest apps first). Lock-free, no syscall (the vDSO clock). */
SHIM_HIDDEN void reclaim_stamp(struct accel_ledger *l);

/*
 * Ask acceld for `bytes` on device `ordinal`, after the driver refused an
 * allocation of them: 1 when acceld answers that the card's free memory
 * covers them now (try the driver again), 0 otherwise (no socket for the
 * device, no answer, or acceld could not free enough in time: the
 * allocation fails as on a full card). Blocks the calling thread for at
 * most the device's reclaimWaitMs (and RECLAIM_ANSWER_MS at the worst,
 * should acceld not answer). Never prints, never raises a signal.
 */
SHIM_HIDDEN int reclaim_ask(int ordinal, uint64_t bytes);

#endif /* ACCEL_SHIM_RECLAIM_H */
