/* SPDX-License-Identifier: MIT */
/*
 * unheld.h: the shim's reports of looked-up names it could not hold
 * (issue 35): a name, version and flags whose address the driver's
 * cuGetProcAddress handed out and the shim cannot tell apart goes by
 * unheld; the shim says so once in ACCEL_LOG and appends one line
 * "unheld <name> <version> <flags>" to the app's shim.events
 * (appsetup_events_path). The reconciler turns new lines into `shim.unheld`
 * events of the app (docs/observability.md).
 *
 * Driven like the meter: unheld_gather under d->lock, unheld_read without
 * it, unheld_apply under it. What has been read of each app's file is kept
 * in a book the reconciler's thread owns, keyed by app and leader pid (the
 * file starts empty at each start of the app).
 */
#ifndef ACCEL_DAEMON_NODE_ENFORCE_UNHELD_H
#define ACCEL_DAEMON_NODE_ENFORCE_UNHELD_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/state.h"

#define UNHELD_PER_PASS 16  /* lines turned into events per app and pass */
#define UNHELD_PER_RUN 64   /* events per run of an app, at most */

/* What has been read of one app's file. */
struct unheld_mark {
    char *app;          /* app name (owned) */
    int64_t pid;        /* leader of the run the file belongs to */
    uint64_t off;       /* bytes read */
    unsigned events;    /* events made in this run */
};

struct unheld_book {
    struct unheld_mark *m;
    size_t n;
};

/* One app's file in one pass. */
struct unheld_target {
    struct unheld_mark mark;        /* from the book; updated by read */
    char *node;                     /* this node's name (owned) */
    char *path;                     /* shim.events (owned) */
    char *lines[UNHELD_PER_PASS];   /* new complete lines (owned) */
    size_t nlines;
    bool cut;                       /* grown past its bound: cut back */
};

/* Under d->lock: a target per app running here with a shim. */
struct unheld_target *unheld_gather(struct accel_daemon *d,
                                    const struct unheld_book *b, size_t *n);
/* Without the lock: the new complete lines of each file (at most
 * UNHELD_PER_PASS, the rest next pass); a missing file reads as empty. */
void unheld_read(struct unheld_target *t, size_t n);
/* Under d->lock: the events, then the book becomes the targets' marks
 * (apps no longer running drop out). Frees t. */
void unheld_apply(struct accel_daemon *d, struct unheld_book *b,
                  struct unheld_target *t, size_t n);
void unheld_book_free(struct unheld_book *b);

#endif /* ACCEL_DAEMON_NODE_ENFORCE_UNHELD_H */
