/* SPDX-License-Identifier: MIT */
/*
 * livequota.h: a live quota change (SPEC 4.4) carried to this node: the
 * app's shim config, its ledger's limit (the shim rereads the config when
 * the ledger's epoch moves, include/accel/ledger.h) and the kernel's or
 * the driver's limit where one of those tiers holds the row.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_LIVEQUOTA_H
#define ACCEL_DAEMON_NODE_RUNTIME_LIVEQUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/state.h"

/*
 * a's row k has its new quota in memory (state_row_set_memory): write it
 * where this node holds the row (d->lock held). Nothing when the row is
 * not here or the app holds nothing for it (not started: its start
 * writes the rows' quotas). The config goes first, then the ledger's
 * limit and epoch, so a shim that sees the new epoch reads the new
 * config; then the kernel or driver tier (vram_app_apply). *out_held
 * (may be NULL) gets what the ledger counts against the quota (used +
 * untracked), 0 when there is no ledger. ACCEL_OK, or the first failure
 * (logged; the caller says so in its event).
 */
enum accel_err livequota_apply(struct accel_daemon *d, struct app *a,
                               size_t k, uint64_t *out_held);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_LIVEQUOTA_H */
