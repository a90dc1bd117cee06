/* SPDX-License-Identifier: MIT */
/*
 * disk.h: the disk side of an app's limits (SPEC 8.2, limitedDisk) and of
 * acceld's own room. limitedDisk is enforced by the *watched* tier: the
 * supervisor measures the owner's home with disk_usage (a bounded walk) and
 * stops the app that is past its limit. The data directory keeps a reserve
 * (disk_check_reserve): below it, installs and resumes are refused before
 * SQLite would fail. See docs/internals/runtime.md.
 *
 * Thread-safety: no state; any thread.
 */
#ifndef ACCEL_DAEMON_NODE_PROC_DISK_H
#define ACCEL_DAEMON_NODE_PROC_DISK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"

#define DISK_WALK_MAX_ENTRIES 200000u   /* entries one walk may visit */
#define DISK_WALK_MAX_DEPTH 128u        /* directories deep */
#define DISK_RESERVE_DEFAULT (64ULL << 20) /* ACCEL_DISK_RESERVE unset */
#define DISK_RESERVE_ENV "ACCEL_DISK_RESERVE"

/*
 * The bytes the tree at path takes on disk (st_blocks x 512 of every entry,
 * path itself included), into *out_bytes. Links are not followed, no other
 * file system is entered, every directory is opened relative to its parent
 * with O_NOFOLLOW (a directory swapped for a link meanwhile is not
 * entered; one removed or swapped meanwhile is skipped). Returns
 * ACCEL_OK; ACCEL_ERANGE when the tree has more than max_entries entries,
 * is deeper than DISK_WALK_MAX_DEPTH, or holds a directory this process
 * cannot open (it cannot be measured at a bounded cost, or at all: what it
 * holds would go uncounted; *out_bytes is what was counted);
 * ACCEL_ENOTFOUND when path is missing. *out_entries (may be NULL) gets the
 * entries visited.
 */
enum accel_err disk_usage(const char *path, size_t max_entries,
                          uint64_t *out_bytes, size_t *out_entries);

/*
 * The bytes that files unlinked but still open take on the file system
 * dev (st_blocks x 512 of each, counted once however many descriptors
 * hold it), over the descriptors of every process whose /proc/<pid> is
 * uid's (and, with cgroup_mark not NULL, in a cgroup whose path holds
 * it: "/accel.slice/<instance>/", this acceld's apps, not another
 * instance's on the machine that hands out the same uids): a file deleted
 * and written through its descriptor is on the disk
 * as much as a linked one, and disk_usage's walk cannot see it. Each
 * descriptor is stat'ed through /proc/<pid>/fd/<n>, which reaches the file
 * itself. proc_root: "/proc" or a test's. ACCEL_OK with *out_bytes;
 * ACCEL_ERANGE when uid's processes hold more than max_fds descriptors
 * (*out_bytes is what was counted); ACCEL_EIO when proc_root cannot be
 * read.
 */
enum accel_err disk_unlinked_open(const char *proc_root, uint32_t uid,
                                  const char *cgroup_mark, dev_t dev,
                                  size_t max_fds, uint64_t *out_bytes);

/*
 * The data directory's room: NULL when the file system of dir has more
 * than the reserve free for acceld (f_bavail), else a sentence the caller
 * frees: "the file system of the data directory /d has 12.3 MiB free, below
 * the reserve of 64.0 MiB (ACCEL_DISK_RESERVE): …" (*out_status 507), or
 * one naming an ACCEL_DISK_RESERVE that is not a quantity (500).
 */
char *disk_check_reserve(const char *dir, int *out_status);

/*
 * The same check for need more bytes (an image's size, SPEC 8.2.1): NULL
 * when the file system of dir has more than the reserve and need free,
 * else a sentence naming what (e.g. "the image", its size), the space
 * free and the reserve (the caller frees), *out_status as above.
 */
char *disk_check_room(const char *dir, uint64_t need, const char *what,
                      int *out_status);

/* "12.3 MiB" into buf. */
void disk_format(uint64_t bytes, char *buf, size_t len);

#endif /* ACCEL_DAEMON_NODE_PROC_DISK_H */
