/* SPDX-License-Identifier: MIT */
/*
 * ledger.h: acceld's side of the memory-slicing ledgers (the layout and
 * protocol are in include/accel/ledger.h; the shim's side in src/shim/).
 *
 * For each Memory-slicing binding (app, device) acceld creates one ledger
 * file under its runtime directory holding the limit, writes the app's
 * read-only shim config (ACCEL_CONFIG) naming the ledgers, reads the app's
 * live usage from the ledgers and removes the files when the binding goes.
 * No state is kept between calls: every function works on paths, so acceld
 * can restart and find the files again. Not thread-safe per path unless
 * stated; the ledger contents themselves are safe against any number of
 * shim processes.
 *
 * acceld never maps a ledger: the app's processes can resize the file, and
 * a mapping would fault (SIGBUS) once they shrink it. Every function here
 * reads with pread into a buffer of its own and writes with pwrite, so a
 * file an app cut short reads as "not a ledger" (ACCEL_EPARSE). It does
 * not reclaim dead processes' slots either (that takes atomic updates of
 * the shared counters, which only a mapping gives): the shim does it when
 * a process attaches and when a charge is refused, and ledger_read reports
 * the usage as it will stand once that is done. ledger_read marks the
 * slots it finds dead (their `dead`, include/accel/ledger.h), so that a
 * process in a container, which cannot see a host process die, reclaims
 * them too.
 */
#ifndef ACCEL_DAEMON_NODE_LEDGER_H
#define ACCEL_DAEMON_NODE_LEDGER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"

/* What ledger_read reports. */
struct ledger_usage {
    uint64_t limit;     /* bytes, 0 = none */
    uint64_t used;      /* bytes charged by live processes (clamped >= 0) */
    uint64_t peak;      /* highest charge ever seen */
    unsigned processes; /* live processes attached */
    uint64_t untracked; /* what the outside meter charges on top of used */
    uint64_t active_ms; /* minor 4: the app's last allocation on the device,
                           CLOCK_MONOTONIC ms; 0 never (or an older shim);
                           the app's to write: for display, never trusted
                           (elastic memory's order is the device's) */
};

/* One device line of the shim config. */
struct ledger_device {
    int ordinal;        /* CUDA ordinal inside the app (after CUDA_VISIBLE_DEVICES) */
    uint64_t limit;     /* bytes */
    const char *path;   /* ledger file (from ledger_create) */
    const char *uuid;   /* device UUID, may be NULL */
    const char *ts_socket; /* time-slice broker socket, NULL = none; with
                            * path NULL the line is only "timeslice" */
    const char *card;   /* with ts_socket: the card's ledger, NULL none */
    const char *reclaim; /* with path: acceld's reclaim socket (SPEC 4.4,
                          * a "reclaim" line), NULL none */
};

/*
 * acceld's reclaim socket (SPEC 4.4: a shim asks there for memory the card
 * lacks): "<rundir>/reclaim.sock", or a /tmp path when that is too long
 * for a socket's address. ACCEL_OK or ACCEL_ETOOBIG.
 */
enum accel_err ledger_reclaim_socket_path(char *out, size_t cap,
                                         const char *rundir);

/*
 * Build the ledger path "<rundir>/ledgers/<app>-dev<ordinal>.ledger" into
 * out (cap bytes). Returns ACCEL_OK, ACCEL_EINVAL for an app name with '/'
 * or "..", ACCEL_ETOOBIG if it does not fit.
 */
enum accel_err ledger_path(char *out, size_t cap, const char *rundir,
                           const char *app, int ordinal);

/*
 * Create (or re-format, when the existing one is invalid or short) the ledger at
 * `path` (directories included, 0755) with `limit` bytes, the app name and
 * device UUID for display. An existing valid ledger keeps its slots and
 * usage and only gets the new limit (so a restart of acceld loses nothing).
 * The file is mode 0660, owned by `uid`:`gid` when they are not -1 (the
 * app's processes must write their slots; the limit they must obey is in the
 * read-only config, see ledger_write_config). Returns ACCEL_OK, ACCEL_ESYS.
 */
enum accel_err ledger_create(const char *path, const char *app, int ordinal,
                             const char *uuid, uint64_t limit, uid_t uid,
                             gid_t gid);

/*
 * A context's size, seeded (docs/internals/shim.md): the size a driver's
 * context takes on a device is the same for every app, so a new app's
 * ledger may start with the size other apps' processes measured there,
 * and its first process loads no NVML. Those sizes sit in ledgers the
 * apps can write, so one is a vote, not a fact: ledger_ctx_vote takes the
 * n votes and answers 1 with the median in *out when there are at least
 * LEDGER_CTX_VOTES and more than half of them lie within 1/16 of it (a
 * hostile minority can neither pull it to 0 nor push it up), else 0.
 */
#define LEDGER_CTX_VOTES 3
int ledger_ctx_vote(uint64_t *votes, size_t n, uint64_t *out);

/*
 * Seed the ledger at `path` (device `uuid`, made by ledger_create): the
 * ledgers beside it (the same directory) of the apps named in voters[nvoters]
 * (those the new app's owner trusts: its own and admins'; never another
 * member's, whose own ledger is theirs to write) on the same device each
 * give their measured ctx_cost as a vote (not a
 * seeded one: that would count one measure twice); when ledger_ctx_vote
 * agrees, the ledger's ctx_cost, if still 0 (never measured), becomes the
 * median marked measured and seeded. *seeded (may be NULL) gets the bytes
 * written, or UINT64_MAX when none. ACCEL_OK (seeded or not),
 * ACCEL_ENOTFOUND, ACCEL_EPARSE, ACCEL_ESYS (the ledger itself).
 */
enum accel_err ledger_seed_ctx(const char *path, const char *uuid,
                               const char *const *voters, size_t nvoters,
                               uint64_t *seeded);

/*
 * Seed the ledger at `path` with acceld's own measure of a context on its
 * device (`bytes`, node/devices/ctxprobe.h): its ctx_cost, if still 0,
 * becomes bytes marked measured and seeded, with no vote (acceld's
 * measure is not the apps' to write). ACCEL_OK (seeded, or left as a
 * process of the app measured it), ACCEL_ENOTFOUND, ACCEL_EPARSE,
 * ACCEL_ESYS.
 */
enum accel_err ledger_seed_ctx_own(const char *path, uint64_t bytes);

/* The ctx_cost word of the ledger at `path` as it stands (the bytes with
 * ACCEL_LEDGER_CTX_MEASURED and _SEEDED), 0 when the file cannot be read
 * as a ledger. */
uint64_t ledger_ctx_read(const char *path);

/* Change the limit of an existing ledger live (shim processes cap at the
 * lower of this and their config value). ACCEL_OK, ACCEL_ENOTFOUND,
 * ACCEL_EPARSE (not a ledger), ACCEL_ESYS. */
enum accel_err ledger_set_limit(const char *path, uint64_t limit);

/*
 * Charge `bytes` of untracked memory (the outside meter's reading: what the
 * driver holds for the app beyond `used`) into the ledger at `path`, in
 * place of what was there; the shim counts used + untracked against the
 * limit. One aligned 8-byte pwrite, as for the limit. Returns ACCEL_OK,
 * ACCEL_ENOTFOUND, ACCEL_EPARSE (not a ledger), ACCEL_ESYS.
 */
enum accel_err ledger_set_untracked(const char *path, uint64_t bytes);

/*
 * Read the usage of the ledger at `path` into *out (set only on success):
 * `used` leaves out the charges of slots whose processes died, and is 0
 * when no process is attached, as if those slots had been reclaimed; the
 * file changes only in those slots' `dead` marks. Returns ACCEL_OK, ACCEL_ENOTFOUND, ACCEL_EPARSE (not
 * a ledger of this major version, or shorter than one), ACCEL_ESYS.
 */
enum accel_err ledger_read(const char *path, struct ledger_usage *out);

/* A card "path" in the shim config's timeslice line: no file; the
 * device's broker hands the sealed card memfd over its socket (the shim's
 * SHIM_CARD_BROKER). */
#define LEDGER_CARD_BROKER "@broker"

/* ledger_read of a ledger already open (a card memfd): ACCEL_OK,
 * ACCEL_EPARSE. */
enum accel_err ledger_read_fd(int fd, struct ledger_usage *out);

/*
 * The card ledger of a time-sliced device as acceld holds it: an anonymous
 * memfd of one ledger (limit `memory`, the card's), sealed against
 * shrinking, growing and any further seal (F_SEAL_SHRINK | F_SEAL_GROW |
 * F_SEAL_SEAL), which the broker hands to each admitted app's shim
 * (SCM_RIGHTS). An app can write it (it must, to reserve) but can neither
 * cut it short (a mapping of it never faults) nor seal it against the
 * others' writes. The fd (close-on-exec), or -1 (errno set).
 */
int ledger_card_memfd(const char *dev_id, uint64_t memory);
/* A new limit (the card's memory) in a card memfd, then its epoch bumped.
 * ACCEL_OK, ACCEL_EPARSE, ACCEL_ESYS. */
enum accel_err ledger_card_set_limit(int fd, uint64_t limit);
/*
 * After an acceld restart: the card memfd with inode (dev, ino), the one
 * the previous acceld made, found again through a process that still
 * holds it (/proc/<pid>/fd: the shim keeps its descriptor; or
 * /proc/<pid>/map_files, root only) and checked (sealed as above, a
 * valid ledger). A new fd of the same memfd, or -1 when no process holds
 * it any more (no app is left that counts there: a new one is as good).
 */
int ledger_card_adopt(uint64_t dev, uint64_t ino);

struct accel_ledger;
/* The figures ledger_read reports, from a copy of a ledger in memory. */
void ledger_usage_of(const struct accel_ledger *l, struct ledger_usage *out);

/* Remove the ledger file. ACCEL_OK (also when it did not exist), ACCEL_ESYS. */
enum accel_err ledger_remove(const char *path);

/*
 * Write the shim config file `path` (the value of ACCEL_CONFIG) for `app`
 * with n devices, atomically (temporary file + rename), mode 0444: the app
 * can read but not change it. Returns ACCEL_OK, ACCEL_EINVAL, ACCEL_ESYS.
 */
enum accel_err ledger_write_config(const char *path, const char *app,
                                   const struct ledger_device *devs, size_t n);

/* The text ledger_write_config writes, into *out_text (caller frees; set
 * only on success): nothing is read or written. ACCEL_OK, ACCEL_ENOMEM,
 * ACCEL_EINVAL (a name or path the format cannot carry, or more than a
 * config holds). */
enum accel_err ledger_config_text(const char *app,
                                  const struct ledger_device *devs, size_t n,
                                  char **out_text);

/* text (a config from ledger_config_text) into `path` as
 * ledger_write_config writes it. ACCEL_OK, ACCEL_EINVAL, ACCEL_ESYS. */
enum accel_err ledger_write_text(const char *path, const char *text);

#endif /* ACCEL_DAEMON_NODE_LEDGER_H */
