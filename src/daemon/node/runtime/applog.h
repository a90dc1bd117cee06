/* SPDX-License-Identifier: MIT */
/*
 * applog.h: the apps' logs, written by acceld (SPEC 8.2 "rotated"). An
 * app's stdout and stderr are a FIFO, <logdir>/<app>.pipe (0600 root in the
 * 0700 log directory), not the log file: one thread of acceld reads every
 * app's FIFO and appends what it reads to <logdir>/<app>.log, rotating by
 * rename once the next write would take the file past the cap
 * (<app>.log.1, .2; the oldest is dropped). So an app's logs never exceed
 * (APPLOG_KEEP + 1) x cap bytes whatever the app does with its descriptor
 * (seek, clear O_APPEND, write as fast as it can): it only ever holds a
 * pipe. An app writes into the pipe until its buffer is full and then
 * waits for acceld; the child's descriptor is opened read-write, so while
 * acceld is down (restarted) its writes wait instead of failing with
 * SIGPIPE, and the next acceld opens the FIFO by its path again
 * (applog_adopt). A write acceld cannot make (a full disk) is dropped, never
 * waited for. See docs/internals/runtime.md.
 *
 * Thread-safety: every function may be called from any thread; the
 * registry has its own lock, never held while taking d->lock.
 */
#ifndef ACCEL_DAEMON_NODE_RUNTIME_APPLOG_H
#define ACCEL_DAEMON_NODE_RUNTIME_APPLOG_H

#include <stdbool.h>
#include <stdint.h>

#include "accel/accel.h"

#define APPLOG_CAP_DEFAULT (10ULL << 20) /* bytes per log file */
#define APPLOG_KEEP 2                    /* old logs kept: .1 and .2 */

struct applog;

/* Start the writer thread for the logs under logdir (which need not exist
 * yet). *out set only on success; ACCEL_ESYS when no thread can start. */
enum accel_err applog_start(const char *logdir, uint64_t cap,
                            struct applog **out);
/* Stop the thread (after a last read of every FIFO) and free everything.
 * The FIFOs stay for the next acceld (their apps keep running). */
void applog_stop(struct applog *l);

/*
 * Before app starts: make its FIFO (a leftover one is replaced), register
 * acceld's read end, and give the descriptor the app's stdout and stderr
 * get in *out_fd (read-write, close-on-exec; the caller closes it after
 * the start). On failure *cause gets "cannot open log file '…' for 'app':
 * …" (ACCEL_EIO) and nothing is left.
 */
enum accel_err applog_open(struct applog *l, const char *app, int *out_fd,
                           char **cause);

/* After an acceld restart: read the FIFO of a running app again. true when
 * the app's output goes through acceld (registered now or before), false
 * when it has no FIFO (an app started by an acceld before this one, which
 * writes its log file itself). */
bool applog_adopt(struct applog *l, const char *app);

/* The app is gone: read what is left in its FIFO, then close and remove
 * it. Returns at once; the writer thread does the rest. */
void applog_close(struct applog *l, const char *app);

/* The app is uninstalled: its logs go with it (<app>.log and the rotated
 * ones), once what is left in its FIFO is read if it has one, else now. */
void applog_remove(struct applog *l, const char *app);
/* The same without a writer (none started): removed now from logdir. */
void applog_remove_dir(const char *logdir, const char *app);

/*
 * The bytes the logs in logdir of apps[n] (one owner's apps) take; when
 * that is more than max (0: no bound), the oldest rotated logs are
 * removed, then the largest current ones emptied (the writer appends on),
 * until it is not. Returns the bytes left. Any thread; the writer may
 * write meanwhile (a log emptied at once takes the next write).
 */
uint64_t applog_bound(const char *logdir, const char *const *apps, size_t n,
                      uint64_t max);

#endif /* ACCEL_DAEMON_NODE_RUNTIME_APPLOG_H */
