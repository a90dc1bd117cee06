/* SPDX-License-Identifier: MIT */
/*
 * test_lentbook.c: the table of what apps lent and got through elastic
 * memory (lentbook.h): a lend updates both apps and hands back the totals
 * the event carries; a replay of those events rebuilds the same table,
 * in any order; the bounds (LENTBOOK_MAX apps, the least recently active
 * evicted; LENTBOOK_MAX_AGE_MS since an app's last lend or get). acceld's
 * replay at start runs in tests/integration/test_elastic.py.
 */
#include "common/accel_setup.h"
#include "daemon/node/enforce/lentbook.h"

#include <stdio.h>

#include "harness.h"

#define GiB (UINT64_C(1) << 30)
#define DAY (INT64_C(24) * 3600 * 1000)
#define T0 (INT64_C(1800000000000)) /* a wall time in ms */

TEST(lentbook_note_updates_both_apps)
{
    static struct lentbook b;
    const struct lent_record *r;
    json_t *out = NULL;

    lentbook_init(&b);
    lentbook_note(&b, "ollama", "comfyui", true, 20 * GiB, T0, NULL);
    lentbook_note(&b, "ollama", "vllm", true, 4 * GiB, T0 + 5, &out);
    r = lentbook_find(&b, "ollama");
    ASSERT(r != NULL);
    ASSERT_U64_EQ(r->lent.bytes, 24 * GiB);
    ASSERT_U64_EQ(r->lent.count, 2);
    ASSERT_U64_EQ(r->lent.last, 4 * GiB);
    ASSERT_EQ(r->lent.at, T0 + 5);
    ASSERT_STR_EQ(r->lent.peer, "vllm");
    ASSERT_U64_EQ(r->got.count, 0);
    r = lentbook_find(&b, "comfyui");
    ASSERT(r != NULL);
    ASSERT_U64_EQ(r->got.bytes, 20 * GiB);
    ASSERT_STR_EQ(r->got.peer, "ollama");
    ASSERT_U64_EQ((uint64_t)json_integer_value(json_object_get(
                      json_object_get(out, "giverLent"), "bytes")),
                  24 * GiB);
    ASSERT_EQ(json_integer_value(json_object_get(
                  json_object_get(out, "askerGot"), "count")),
              1);
    json_decref(out);
}

/* Three lends; their events replayed forwards and backwards give the
 * same book, with the totals of the latest. */
TEST(lentbook_replay_rebuilds_in_any_order)
{
    static struct lentbook b, c;
    json_t *ev[3];
    const char *giver[3] = {"a", "b", "a"}, *asker[3] = {"b", "a", "c"};
    uint64_t bytes[3] = {GiB, 2 * GiB, 3 * GiB};
    const struct lent_record *r;

    lentbook_init(&b);
    for (int i = 0; i < 3; i++)
        lentbook_note(&b, giver[i], asker[i], true, bytes[i], T0 + i,
                      &ev[i]);
    for (int order = 0; order < 2; order++) {
        lentbook_init(&c);
        for (int k = 0; k < 3; k++) {
            int i = order == 0 ? k : 2 - k;
            /* each event stamped a moment after its lend (state_event's
             * own clock): the lend's time is what comes back */
            lentbook_replay(&c, giver[i], asker[i], bytes[i], T0 + i + 1,
                            ev[i], T0 + 10);
        }
        ASSERT_EQ(c.n, 3);
        r = lentbook_find(&c, "a");
        ASSERT_U64_EQ(r->lent.bytes, 4 * GiB);
        ASSERT_U64_EQ(r->lent.count, 2);
        ASSERT_U64_EQ(r->lent.last, 3 * GiB);
        ASSERT_STR_EQ(r->lent.peer, "c");
        ASSERT_U64_EQ((uint64_t)r->lent.at, (uint64_t)(T0 + 2));
        ASSERT_U64_EQ((uint64_t)lentbook_find(&b, "a")->lent.at,
                      (uint64_t)(T0 + 2));
        ASSERT_U64_EQ(r->got.bytes, 2 * GiB);
        r = lentbook_find(&c, "b");
        ASSERT_U64_EQ(r->got.bytes, GiB);
        ASSERT_U64_EQ(r->lent.bytes, 2 * GiB);
        r = lentbook_find(&c, "c");
        ASSERT_U64_EQ(r->got.bytes, 3 * GiB);
    }
    /* only the last event kept (the others pruned from the store): the
     * totals are still whole */
    lentbook_init(&c);
    lentbook_replay(&c, "a", "c", 3 * GiB, T0 + 2, ev[2], T0 + 10);
    ASSERT_U64_EQ(lentbook_find(&c, "a")->lent.bytes, 4 * GiB);
    ASSERT_U64_EQ(lentbook_find(&c, "a")->lent.count, 2);
    /* an older acceld's event (no totals): its bytes, one count */
    lentbook_replay(&c, "a", "c", GiB, T0 + 3, NULL, T0 + 10);
    ASSERT_U64_EQ(lentbook_find(&c, "a")->lent.bytes, 5 * GiB);
    ASSERT_U64_EQ(lentbook_find(&c, "a")->lent.count, 3);
    /* one that freed nothing is no lend */
    lentbook_replay(&c, "x", "y", 0, T0 + 4, NULL, T0 + 10);
    ASSERT(lentbook_find(&c, "x") == NULL);
    for (int i = 0; i < 3; i++)
        json_decref(ev[i]);
}

TEST(lentbook_bounded_by_count_least_active_evicted)
{
    static struct lentbook b;
    char name[32];

    lentbook_init(&b);
    /* app i lends to "sink" at T0 + i: 256 apps and the sink */
    for (int i = 0; i < LENTBOOK_MAX; i++) {
        snprintf(name, sizeof name, "app%d", i);
        lentbook_note(&b, name, "sink", true, GiB, T0 + i, NULL);
    }
    ASSERT_EQ(b.n, LENTBOOK_MAX);
    /* the sink (active at every lend) stays; app0 and app1, the least
     * recently active, made room for app256's record */
    ASSERT(lentbook_find(&b, "sink") != NULL);
    ASSERT_U64_EQ(lentbook_find(&b, "sink")->got.count, LENTBOOK_MAX);
    ASSERT(lentbook_find(&b, "app0") == NULL);
    ASSERT(lentbook_find(&b, "app1") != NULL);
    ASSERT(lentbook_find(&b, "app255") != NULL);
    lentbook_note(&b, "new", "sink", true, GiB, T0 + 1000, NULL);
    ASSERT_EQ(b.n, LENTBOOK_MAX);
    ASSERT(lentbook_find(&b, "app1") == NULL);
    ASSERT(lentbook_find(&b, "new") != NULL);
    ASSERT(lentbook_find(&b, "sink") != NULL);
}

TEST(lentbook_bounded_by_age)
{
    static struct lentbook b;
    int64_t now = T0 + 31 * DAY;

    lentbook_init(&b);
    lentbook_note(&b, "old", "older", true, GiB, T0, NULL);
    lentbook_note(&b, "edge", "x", true, GiB, now - LENTBOOK_MAX_AGE_MS, NULL);
    lentbook_note(&b, "recent", "x", true, GiB, now - DAY, NULL);
    ASSERT_EQ(b.n, 5);
    lentbook_prune(&b, now);
    ASSERT(lentbook_find(&b, "old") == NULL);
    ASSERT(lentbook_find(&b, "older") == NULL);
    ASSERT(lentbook_find(&b, "edge") != NULL); /* exactly 30 days: kept */
    ASSERT(lentbook_find(&b, "recent") != NULL);
    ASSERT(lentbook_find(&b, "x") != NULL);
    ASSERT_EQ(b.n, 3);
    /* a lend prunes first; a replay skips what is too old */
    lentbook_note(&b, "y", "z", true, GiB, now + 2 * DAY, NULL);
    ASSERT(lentbook_find(&b, "edge") == NULL);
    lentbook_replay(&b, "gone", "z", GiB, now - 31 * DAY, NULL, now);
    ASSERT(lentbook_find(&b, "gone") == NULL);
}

/* A name reused (an app deleted, another installed under its name,
 * maybe another member's): the new app starts at 0, live (forget) and
 * after a restart (a replay credits a side only from its app's
 * creation); a cut quota's "quota" is no app and gets no record. */
TEST(lentbook_a_reused_name_starts_at_zero)
{
    static struct lentbook b;

    lentbook_init(&b);
    lentbook_note(&b, "ollama", "comfyui", true, 20 * GiB, T0, NULL);
    lentbook_forget(&b, "ollama");
    ASSERT(lentbook_find(&b, "ollama") == NULL);
    ASSERT(lentbook_find(&b, "comfyui") != NULL);
    lentbook_note(&b, "ollama", "quota", false, GiB, T0 + 1, NULL);
    ASSERT(lentbook_find(&b, "quota") == NULL);
    ASSERT_U64_EQ(lentbook_find(&b, "ollama")->lent.bytes, GiB);

    /* the replay: "ollama" now was made at T0 + 10; "comfyui" at T0 */
    lentbook_init(&b);
    lentbook_replay_since(&b, "ollama", T0 + 10, "comfyui", T0, 20 * GiB,
                          T0 + 5, NULL, T0 + 100);
    ASSERT(lentbook_find(&b, "ollama") == NULL);
    ASSERT_U64_EQ(lentbook_find(&b, "comfyui")->got.bytes, 20 * GiB);
    lentbook_replay_since(&b, "ollama", T0 + 10, "comfyui", T0, 2 * GiB,
                          T0 + 20, NULL, T0 + 100);
    ASSERT_U64_EQ(lentbook_find(&b, "ollama")->lent.bytes, 2 * GiB);
    /* no app of that name now: nothing of it */
    lentbook_replay_since(&b, "gone", INT64_MAX, "alsogone", INT64_MAX, GiB,
                          T0 + 30, NULL, T0 + 100);
    ASSERT(lentbook_find(&b, "gone") == NULL);
    ASSERT(lentbook_find(&b, "alsogone") == NULL);
}

#define LIST(XX)                                                               \
    XX(lentbook_note_updates_both_apps)                                        \
    XX(lentbook_replay_rebuilds_in_any_order)                                  \
    XX(lentbook_bounded_by_count_least_active_evicted)                         \
    XX(lentbook_bounded_by_age)                                                \
    XX(lentbook_a_reused_name_starts_at_zero)
TEST_MAIN(LIST)
