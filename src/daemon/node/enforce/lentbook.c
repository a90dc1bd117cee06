/* SPDX-License-Identifier: MIT */
/*
 * lentbook.c: the bounded table of what apps lent and got (lentbook.h).
 * Pure: no I/O, no lock, no clock; the bounds are LENTBOOK_MAX apps and
 * LENTBOOK_MAX_AGE_MS since an app's last lend or get.
 */
#include "common/accel_setup.h"
#include "daemon/node/enforce/lentbook.h"

#include <string.h>

#include "common/util.h"

void lentbook_init(struct lentbook *b)
{
    b->n = 0;
}

static int64_t last_active(const struct lent_record *r)
{
    return r->lent.at > r->got.at ? r->lent.at : r->got.at;
}

/* FNV-1a of a name: a replay at start looks up two names per kept event
 * (up to 20,000) among up to 256 records; a string compare each time
 * was most of acceld's start. */
static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static const struct lent_record *find_hashed(const struct lentbook *b,
                                             const char *app, uint32_t h)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->rec[i].hash == h && strcmp(b->rec[i].app, app) == 0)
            return &b->rec[i];
    return NULL;
}

const struct lent_record *lentbook_find(const struct lentbook *b,
                                        const char *app)
{
    return find_hashed(b, app, name_hash(app));
}

/* The record of app, made when missing: in a full book it takes the place
 * of the least recently active one other than keep (may be NULL). */
static struct lent_record *record_of(struct lentbook *b, const char *app,
                                     const struct lent_record *keep)
{
    uint32_t h = name_hash(app);
    struct lent_record *r = (struct lent_record *)find_hashed(b, app, h);
    size_t k = b->n;

    if (r != NULL)
        return r;
    if (b->n == LENTBOOK_MAX) {
        k = &b->rec[0] == keep ? 1 : 0;
        for (size_t i = k + 1; i < b->n; i++)
            if (&b->rec[i] != keep &&
                last_active(&b->rec[i]) < last_active(&b->rec[k]))
                k = i;
    } else {
        b->n++;
    }
    memset(&b->rec[k], 0, sizeof(b->rec[k]));
    util_strlcpy(b->rec[k].app, app, sizeof b->rec[k].app);
    b->rec[k].hash = name_hash(b->rec[k].app);
    return &b->rec[k];
}

/* One more lend (or get) of bytes with peer at at_ms; totals, when given
 * (a replay), are taken when larger. */
static void side_add(struct lent_side *s, const char *peer, uint64_t bytes,
                     int64_t at_ms, const json_t *totals)
{
    uint64_t tb, tc;

    if (totals != NULL) {
        tb = (uint64_t)json_integer_value(json_object_get(totals, "bytes"));
        tc = (uint64_t)json_integer_value(json_object_get(totals, "count"));
        s->bytes = tb > s->bytes ? tb : s->bytes;
        s->count = tc > s->count ? tc : s->count;
    } else {
        s->bytes += bytes;
        s->count++;
    }
    if (at_ms >= s->at) {
        s->at = at_ms;
        s->last = bytes;
        util_strlcpy(s->peer, peer, sizeof s->peer);
    }
}

static json_t *side_json(const struct lent_side *s)
{
    return json_pack("{s:I, s:I}", "bytes", (json_int_t)s->bytes, "count",
                     (json_int_t)s->count);
}

/* Both records of one lend, the giver's first: the asker's never evicts
 * the giver's. A side whose app is not to be credited (is_giver,
 * is_asker false: no app of that name was there then) is left out. */
static void note(struct lentbook *b, const char *giver, bool is_giver,
                 const char *asker, bool is_asker, uint64_t bytes,
                 int64_t at_ms, const json_t *data, json_t **out)
{
    struct lent_record *g = NULL, *a;
    const json_t *gl = json_object_get(data, "giverLent");
    const json_t *ag = json_object_get(data, "askerGot");

    if (out != NULL)
        *out = json_object();
    if (is_giver) {
        g = record_of(b, giver, NULL);
        side_add(&g->lent, asker, bytes, at_ms,
                 json_is_object(gl) ? gl : NULL);
        if (out != NULL)
            json_object_set_new(*out, "giverLent", side_json(&g->lent));
    }
    if (is_asker) {
        a = record_of(b, asker, g);
        side_add(&a->got, giver, bytes, at_ms,
                 json_is_object(ag) ? ag : NULL);
        if (out != NULL)
            json_object_set_new(*out, "askerGot", side_json(&a->got));
    }
    /* the lend's own time: the event that persists it is stamped a
     * moment later, and a replay must give back what was shown */
    if (out != NULL)
        json_object_set_new(*out, "lentAt", json_integer(at_ms));
}

void lentbook_note(struct lentbook *b, const char *giver, const char *asker,
                   bool asker_is_app, uint64_t bytes, int64_t now_ms,
                   json_t **out)
{
    lentbook_prune(b, now_ms);
    note(b, giver, true, asker, asker_is_app, bytes, now_ms, NULL, out);
}

void lentbook_replay_since(struct lentbook *b, const char *giver,
                           int64_t giver_since, const char *asker,
                           int64_t asker_since, uint64_t bytes, int64_t at_ms,
                           const json_t *data, int64_t now_ms)
{
    const json_t *at = json_object_get(data, "lentAt");

    if (json_is_integer(at)) /* the lend's own time, when it says it */
        at_ms = (int64_t)json_integer_value(at);
    if (bytes == 0 || at_ms < now_ms - LENTBOOK_MAX_AGE_MS ||
        (at_ms < giver_since && at_ms < asker_since))
        return;
    note(b, giver, at_ms >= giver_since, asker, at_ms >= asker_since, bytes,
         at_ms, data, NULL);
}

void lentbook_replay(struct lentbook *b, const char *giver, const char *asker,
                     uint64_t bytes, int64_t at_ms, const json_t *data,
                     int64_t now_ms)
{
    lentbook_replay_since(b, giver, INT64_MIN, asker, INT64_MIN, bytes,
                          at_ms, data, now_ms);
}

void lentbook_forget(struct lentbook *b, const char *app)
{
    const struct lent_record *r = lentbook_find(b, app);

    if (r == NULL)
        return;
    b->rec[r - b->rec] = b->rec[--b->n];
}

void lentbook_prune(struct lentbook *b, int64_t now_ms)
{
    size_t k = 0;

    for (size_t i = 0; i < b->n; i++)
        if (last_active(&b->rec[i]) >= now_ms - LENTBOOK_MAX_AGE_MS) {
            if (k != i)
                b->rec[k] = b->rec[i];
            k++;
        }
    b->n = k;
}
