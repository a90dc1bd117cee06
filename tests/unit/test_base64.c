/* SPDX-License-Identifier: MIT */
/*
 * test_base64.c: the base64 codec (src/common/base64.c): RFC 4648's test
 * vectors both ways, bytes 0x00 and 0xff (keys with a NUL inside, etcd's
 * "all keys" range end), every length around a group boundary round-trips,
 * and non-canonical input is refused.
 */
#include "common/accel_setup.h"
#include "common/base64.h"

#include "harness.h"

static void check_pair(const char *plain, const char *enc)
{
    size_t n = 0;
    char *e = base64_encode(plain, strlen(plain));
    char *d = NULL;
    ASSERT_STR_EQ(e, enc);
    ASSERT(base64_decode(enc, strlen(enc), &d, &n));
    ASSERT_EQ(n, strlen(plain));
    ASSERT_STR_EQ(d, plain);
    free(e);
    free(d);
}

TEST(base64_rfc4648_vectors)
{
    check_pair("", "");
    check_pair("f", "Zg==");
    check_pair("fo", "Zm8=");
    check_pair("foo", "Zm9v");
    check_pair("foob", "Zm9vYg==");
    check_pair("fooba", "Zm9vYmE=");
    check_pair("foobar", "Zm9vYmFy");
}

TEST(base64_binary_round_trip)
{
    unsigned char buf[300];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 37 + (i >> 3));
    buf[0] = 0x00;
    buf[1] = 0xff;
    for (size_t n = 0; n <= sizeof buf; n++) {
        char *e = base64_encode(buf, n);
        char *d = NULL;
        size_t dn = 0;
        ASSERT_EQ(strlen(e), base64_encoded_len(n));
        ASSERT(base64_decode(e, strlen(e), &d, &dn));
        ASSERT_EQ(dn, n);
        ASSERT(memcmp(d, buf, n) == 0);
        ASSERT_EQ(d[n], '\0');
        free(e);
        free(d);
    }
}

TEST(base64_nul_and_ff)
{
    char *e = base64_encode("\0", 1);
    ASSERT_STR_EQ(e, "AA==");
    free(e);
    e = base64_encode("\xff\xff\xff", 3);
    ASSERT_STR_EQ(e, "////");
    free(e);
}

TEST(base64_rejects)
{
    static const char *const bad[] = {
        "Zg=",      /* length not a multiple of 4 */
        "Zg==Zg==", /* padding in the middle */
        "Z===",     /* one character is not a byte */
        "Zh==",     /* non-zero bits under the padding */
        "Zm9=",     /* same, one pad */
        "Zm9v\n",   /* whitespace */
        "Zm-v",     /* URL-safe alphabet */
        "=Zm9",     /* padding first */
        "Zm=v",     /* padding inside the last group */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *d = NULL;
        size_t n = 7;
        if (base64_decode(bad[i], strlen(bad[i]), &d, &n))
            FAIL_AT_("accepted \"%s\"", bad[i]);
        ASSERT(d == NULL);
        ASSERT_EQ(n, 7);
    }
}

#define LIST(XX)                 \
    XX(base64_rfc4648_vectors)   \
    XX(base64_binary_round_trip) \
    XX(base64_nul_and_ff)        \
    XX(base64_rejects)
TEST_MAIN(LIST)
