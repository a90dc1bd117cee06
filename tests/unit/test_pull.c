/* SPDX-License-Identifier: MIT */
/*
 * test_pull.c: pull.c's reading of podman pull's progress (issue 47 item
 * 6): the lines podman 4.3 writes on a terminal (its bars, their escape
 * sequences already left out by podman.c) and off one, into layers and
 * bytes.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/pull.h"

#include <stdlib.h>
#include <string.h>

#include "harness.h"

static json_int_t figure(const json_t *o, const char *what, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(o, what), key));
}

/* The lines of a real pull of a 28.6 MiB one-layer archive on a
 * terminal (podman 4.3.1, captured with script(1)). */
TEST(pull_progress_follows_podmans_bars)
{
    struct pull_progress *p = calloc(1, sizeof(*p));
    json_t *o;

    ASSERT(p != NULL);
    ASSERT(!pull_progress_feed(p, "Getting image source signatures"));
    ASSERT(pull_progress_feed(p, "Copying blob c3df45be61ee [=============="
                                 "=========>--------------] 18.1MiB / "
                                 "28.6MiB"));
    o = pull_progress_json(p);
    ASSERT_EQ(figure(o, "layers", "done"), 0);
    ASSERT_EQ(figure(o, "layers", "total"), 1);
    ASSERT_EQ(figure(o, "bytes", "done"), 18979226); /* 18.1 MiB */
    ASSERT_EQ(figure(o, "bytes", "total"), 29989274); /* 28.6 MiB */
    json_decref(o);
    ASSERT(pull_progress_feed(p, "Copying blob c3df45be61ee [=============="
                                 "========================] 28.6MiB / "
                                 "28.6MiB"));
    ASSERT(pull_progress_feed(p, "Copying blob c3df45be61ee done  "));
    /* the config is not a layer */
    ASSERT(!pull_progress_feed(p, "Copying config 238d590f1f [======] "
                                  "409.0b / 409.0b"));
    ASSERT(!pull_progress_feed(p, "Writing manifest to image destination"));
    o = pull_progress_json(p);
    ASSERT_EQ(figure(o, "layers", "done"), 1);
    ASSERT_EQ(figure(o, "layers", "total"), 1);
    ASSERT_EQ(figure(o, "bytes", "done"), 29989274);
    ASSERT_EQ(figure(o, "bytes", "total"), 29989274);
    json_decref(o);
    free(p);
}

/* Layers side by side, one already here, sizes in every unit. */
TEST(pull_progress_sums_the_layers)
{
    struct pull_progress *p = calloc(1, sizeof(*p));
    json_t *o;

    ASSERT(p != NULL);
    ASSERT(pull_progress_feed(p, "Copying blob aaaaaaaaaaaa skipped: "
                                 "already exists  "));
    ASSERT(pull_progress_feed(p, "Copying blob bbbbbbbbbbbb [=>----] "
                                 "512.0KiB / 1.5GiB"));
    ASSERT(pull_progress_feed(p, "Copying blob cccccccccccc [======] "
                                 "409.0b / 409.0b"));
    ASSERT(pull_progress_feed(p, "Copying blob cccccccccccc done"));
    o = pull_progress_json(p);
    ASSERT_EQ(figure(o, "layers", "done"), 2);
    ASSERT_EQ(figure(o, "layers", "total"), 3);
    ASSERT_EQ(figure(o, "bytes", "done"), 524288 + 409);
    ASSERT_EQ(figure(o, "bytes", "total"), 1610612736 + 409);
    json_decref(o);
    /* a bar whose figures do not parse leaves the layer as it was */
    ASSERT(pull_progress_feed(p, "Copying blob bbbbbbbbbbbb [=>----] "
                                 "lots / more"));
    ASSERT(pull_progress_feed(p, "Copying blob bbbbbbbbbbbb [=>----] "
                                 "2.0MiB / 1.0MiB"));
    o = pull_progress_json(p);
    ASSERT_EQ(figure(o, "bytes", "done"), 524288 + 409);
    json_decref(o);
    free(p);
}

/* Off a terminal podman names each layer once, with no bytes. */
TEST(pull_progress_off_a_terminal_counts_layers)
{
    struct pull_progress *p = calloc(1, sizeof(*p));
    json_t *o;

    ASSERT(p != NULL);
    ASSERT(pull_progress_feed(p, "Copying blob sha256:d6ab36744f75ef5f42b2"
                                 "27c771870bddc29b16131af79eb76f3bd81f3857bb"
                                 "41"));
    ASSERT(pull_progress_feed(p, "Copying blob sha256:d6ab36744f75ef5f42b2"
                                 "27c771870bddc29b16131af79eb76f3bd81f3857bb"
                                 "41"));
    ASSERT(!pull_progress_feed(p, "Copying blob "));
    o = pull_progress_json(p);
    ASSERT_EQ(figure(o, "layers", "total"), 1);
    ASSERT_EQ(figure(o, "bytes", "total"), 0);
    json_decref(o);
    free(p);
}

/* More layers than are followed: counted up to PULL_BLOBS_MAX. */
TEST(pull_progress_is_bounded)
{
    struct pull_progress *p = calloc(1, sizeof(*p));
    char line[64];
    json_t *o;

    ASSERT(p != NULL);
    for (int i = 0; i < PULL_BLOBS_MAX + 10; i++) {
        snprintf(line, sizeof line, "Copying blob %012d done", i);
        ASSERT(pull_progress_feed(p, line));
    }
    o = pull_progress_json(p);
    ASSERT_EQ(figure(o, "layers", "total"), PULL_BLOBS_MAX);
    json_decref(o);
    free(p);
}

#define TESTS(XX)                                                              \
    XX(pull_progress_follows_podmans_bars)                                     \
    XX(pull_progress_sums_the_layers)                                          \
    XX(pull_progress_off_a_terminal_counts_layers)                             \
    XX(pull_progress_is_bounded)

TEST_MAIN(TESTS)
