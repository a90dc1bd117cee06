/* SPDX-License-Identifier: MIT */
/*
 * lentbook.h: what each app lent (gave back for another) and got through
 * elastic memory (SPEC 4.4; docs/elastic.md, "What acceld remembers"),
 * a bounded table with no I/O, no lock and no clock of its own (the
 * caller passes the time): reclaim.c owns one under its mutex.
 *
 * Bounds: at most LENTBOOK_MAX apps; an app whose last lend or get is
 * older than LENTBOOK_MAX_AGE_MS is dropped at the next lentbook_prune;
 * a new app in a full table evicts the app whose last lend or get is the
 * oldest.
 *
 * Persistence is the caller's: each lend is a `memory.reclaim` event whose
 * data carries both apps' totals after it (lentbook_totals_json), and at
 * start acceld replays the kept events (lentbook_replay), oldest first.
 * The totals only grow, so a replay keeps the largest seen: events written
 * out of order by two asks at once still end on the right totals.
 */
#ifndef ACCEL_DAEMON_NODE_ENFORCE_LENTBOOK_H
#define ACCEL_DAEMON_NODE_ENFORCE_LENTBOOK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"

#define LENTBOOK_MAX 256                                  /* apps kept */
#define LENTBOOK_MAX_AGE_MS (INT64_C(30) * 24 * 3600 * 1000) /* 30 days */

/* One side of an app's record: what it lent, or what it got. */
struct lent_side {
    uint64_t bytes, count;          /* totals */
    int64_t at;                     /* wall ms of the last, 0 never */
    uint64_t last;                  /* bytes of the last */
    char peer[ACCEL_ID_MAX + 1];    /* the other app of the last */
};

/* What one app lent and got. */
struct lent_record {
    char app[ACCEL_ID_MAX + 1];     /* the app's name */
    uint32_t hash;                  /* of the name: compared first */
    struct lent_side lent;          /* it gave back for others */
    struct lent_side got;           /* others gave back for it */
};

struct lentbook {
    struct lent_record rec[LENTBOOK_MAX]; /* [0, n) in use */
    size_t n;
};

/* Empty the book (cannot fail). */
void lentbook_init(struct lentbook *b);

/* The record of app, or NULL. */
const struct lent_record *lentbook_find(const struct lentbook *b,
                                        const char *app);

/*
 * giver gave back bytes for asker at wall time now_ms: both records are
 * updated (made first, evicting the least recently active when full);
 * the asker's only when asker_is_app (a cut quota's "quota" is no app).
 * `out` (may be NULL) gets the totals after it, as the event's data
 * carries them: {"giverLent": {bytes, count}, "askerGot": {bytes, count}}
 * (the caller frees).
 */
void lentbook_note(struct lentbook *b, const char *giver, const char *asker,
                   bool asker_is_app, uint64_t bytes, int64_t now_ms,
                   json_t **out);

/*
 * Replay one kept `memory.reclaim` event: giver, asker, bytes, its time
 * and its data (the totals of lentbook_note, or NULL for an event of an
 * older acceld: then the bytes and one count are added). An event older
 * than LENTBOOK_MAX_AGE_MS before now_ms, or that freed nothing, is
 * skipped. Totals never go down.
 */
void lentbook_replay(struct lentbook *b, const char *giver, const char *asker,
                     uint64_t bytes, int64_t at_ms, const json_t *data,
                     int64_t now_ms);

/*
 * lentbook_replay, crediting each side only to the app of that name that
 * was there at the lend: the giver's side when the lend's time is at or
 * after giver_since (that app's creation; INT64_MAX: no such app now),
 * the asker's likewise. A name is reused (an app deleted, another
 * installed under its name, maybe by another member): what the old one
 * lent and got is not the new one's.
 */
void lentbook_replay_since(struct lentbook *b, const char *giver,
                           int64_t giver_since, const char *asker,
                           int64_t asker_since, uint64_t bytes, int64_t at_ms,
                           const json_t *data, int64_t now_ms);

/* Drop app's record (the app is gone: a later app of its name starts
 * at 0). */
void lentbook_forget(struct lentbook *b, const char *app);

/* Drop the records whose last lend and get are older than
 * LENTBOOK_MAX_AGE_MS before now_ms. */
void lentbook_prune(struct lentbook *b, int64_t now_ms);

#endif /* ACCEL_DAEMON_NODE_ENFORCE_LENTBOOK_H */
