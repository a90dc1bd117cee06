/* SPDX-License-Identifier: MIT */
/*
 * test_dynbuf.c: the capped growing buffer (src/common/dynbuf.c): it grows
 * past its first allocation and keeps its bytes NUL-terminated, an add
 * that would pass the cap adds nothing and marks it too big, and an add
 * that fills it exactly to the cap is taken.
 */
#include "common/accel_setup.h"
#include "common/dynbuf.h"

#include "harness.h"

TEST(dynbuf_grows_and_terminates)
{
    struct dynbuf b;
    char chunk[1000];

    memset(chunk, 'x', sizeof chunk);
    dynbuf_init(&b, 1u << 20);
    ASSERT(b.p == NULL && b.len == 0);
    for (int i = 0; i < 10; i++)
        ASSERT(dynbuf_add(&b, chunk, sizeof chunk));
    ASSERT_EQ(b.len, 10000u);
    ASSERT(b.cap > b.len);
    ASSERT_EQ(strlen(b.p), 10000u);
    ASSERT(!b.toobig);
    dynbuf_release(&b);
    ASSERT(b.p == NULL && b.len == 0 && b.max == 1u << 20);
}

TEST(dynbuf_cap_refuses_and_adds_nothing)
{
    struct dynbuf b;

    dynbuf_init(&b, 8);
    ASSERT(dynbuf_add(&b, "abcde", 5));
    ASSERT(!dynbuf_add(&b, "fghi", 4)); /* 9 > 8 */
    ASSERT(b.toobig);
    ASSERT_EQ(b.len, 5u);
    ASSERT_STR_EQ(b.p, "abcde");
    ASSERT(dynbuf_add(&b, "fgh", 3)); /* exactly 8 */
    ASSERT_STR_EQ(b.p, "abcdefgh");
    dynbuf_release(&b);
}

#define LIST(XX)                         \
    XX(dynbuf_grows_and_terminates)      \
    XX(dynbuf_cap_refuses_and_adds_nothing)
TEST_MAIN(LIST)
