/* SPDX-License-Identifier: MIT */
/*
 * test_view_pack.c: the packed device texts (src/daemon/api/view_pack.c):
 * a device's JSON with bindings round-trips and packs to under a third; text
 * with no known run, bytes 0x00-0xff, runs cut at the end, a run at the
 * very start and end, long literal stretches (multi-byte lengths) and the
 * empty text all round-trip, and nothing packs past view_pack_bound.
 */
#include "common/accel_setup.h"
#include "daemon/api/view_pack.h"

#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Unpack into exactly cap bytes (followed by a guard that must stay). */
static void unpack_into(const char *p, size_t plen, const char *s, size_t n,
                        size_t cap)
{
    char *u = malloc(cap + 32);
    ASSERT(u != NULL);
    memset(u, 0x5a, cap + 32);
    ASSERT_EQ(view_unpack(p, plen, u, cap), n);
    ASSERT(memcmp(u, s, n) == 0);
    for (size_t i = cap; i < cap + 32; i++)
        ASSERT_EQ(u[i], 0x5a);
    free(u);
}

/* Pack, check the bound, unpack into exactly the text's length and into
 * more room (the fast copies), compare; returns the packed length. The
 * packed text is copied to a block of its own size, so that reading past
 * it would show under a sanitizer or valgrind. */
static size_t round_trip(const char *s, size_t n)
{
    char *tmp = malloc(view_pack_bound(n)), *p;
    size_t plen;
    ASSERT(tmp != NULL);
    plen = view_pack(s, n, tmp);
    ASSERT_LE(plen, view_pack_bound(n));
    p = malloc(plen);
    ASSERT(p != NULL);
    memcpy(p, tmp, plen);
    free(tmp);
    unpack_into(p, plen, s, n, n);
    unpack_into(p, plen, s, n, n + 1);
    unpack_into(p, plen, s, n, n + 15);
    unpack_into(p, plen, s, n, n + 64);
    unpack_into(p, plen, s, n, n + 200);
    free(p);
    return plen;
}

static const char device[] =
    "{\"id\":\"GPU-0003-01\",\"nodeName\":\"n0003\",\"index\":-1,\"mode\":"
    "\"nvidia\",\"cardModel\":\"NVIDIA H100\",\"memory\":85899345920,"
    "\"health\":\"yes\",\"supportType\":\"MemorySlice\","
    "\"availableSupportTypes\":[\"TimeSlice\",\"MemorySlice\",\"Exclusive\"],"
    "\"bindings\":[{\"appName\":\"app-000123\",\"owner\":\"admin\",\"mode\":"
    "\"nvidia\",\"nodeName\":\"n0003\",\"deviceId\":\"GPU-0003-01\","
    "\"memory\":2147483648,\"spec\":{\"mode\":\"nvidia\",\"requiredCpu\":100,"
    "\"limitedCpu\":100,\"requiredGpu\":0,\"limitedGpu\":0,"
    "\"requiredMemory\":268435456,\"limitedMemory\":268435456,"
    "\"requiredDisk\":1073741824,\"limitedDisk\":1073741824,"
    "\"supportMultiCards\":false,\"supportMultiNodes\":false}},"
    "{\"appName\":\"\",\"owner\":\"\",\"mode\":\"nvidia\",\"nodeName\":"
    "\"n0003\",\"deviceId\":\"GPU-0003-01\",\"memory\":1,\"spec\":{\"mode\":"
    "\"nvidia\",\"requiredCpu\":1,\"limitedCpu\":2,\"requiredGpu\":3,"
    "\"limitedGpu\":4,\"requiredMemory\":5,\"limitedMemory\":6,"
    "\"requiredDisk\":7,\"limitedDisk\":8,\"supportMultiCards\":true,"
    "\"supportMultiNodes\":false},\"hidden\":true}],\"allocated\":"
    "2147483648,\"free\":83751862272,\"usedMemory\":0,\"utilization\":null,"
    "\"present\":true,\"enforcement\":{\"memory\":\"none\",\"compute\":"
    "\"none\"},\"timeSlice\":null,\"power\":null,\"powerLimit\":null,"
    "\"temperature\":null,\"utilizationReason\":\"not an NVML device\","
    "\"powerReason\":\"not an NVML device\",\"powerLimitReason\":\"not an "
    "NVML device\",\"temperatureReason\":\"not an NVML device\","
    "\"foreignUsage\":[]}";

TEST(view_pack_device_round_trips_at_a_third)
{
    size_t n = strlen(device);
    size_t plen = round_trip(device, n);
    ASSERT_LT(plen * 3, n); /* the point of it: under a third (0.28) */
}

TEST(view_pack_edges_round_trip)
{
    char bytes[256];
    static const char *const texts[] = {
        "",
        "x",
        "plain text without any of the runs",
        "null",                        /* one run, nothing else */
        "nullnullfalse",               /* runs back to back */
        "\",\"requiredMemor",          /* a run cut at the end */
        "{\"id\":\"",                  /* a run at start and end */
        "\"\",\",\"nodeName\":\"\"",   /* quotes around a run */
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(*texts); i++)
        round_trip(texts[i], strlen(texts[i]));
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (char)i;
    round_trip(bytes, sizeof bytes);
    round_trip(bytes + 1, 0);
}

TEST(view_pack_long_literals_round_trip)
{
    /* literal stretches of 127, 128, 16383, 16384 and 300,000 bytes: one,
     * two and three varint bytes */
    static const size_t lens[] = {127, 128, 16383, 16384, 300000};
    for (size_t i = 0; i < sizeof(lens) / sizeof(*lens); i++) {
        size_t n = lens[i] + sizeof(device) - 1;
        char *s = malloc(n);
        ASSERT(s != NULL);
        for (size_t k = 0; k < lens[i]; k++)
            s[k] = (char)('a' + k % 23);
        memcpy(s + lens[i], device, sizeof(device) - 1);
        round_trip(s, n);
        round_trip(s, lens[i]);
        free(s);
    }
}

TEST(view_pack_random_round_trips)
{
    /* random mixes of the device text's pieces and random bytes */
    unsigned seed = 12345;
    size_t dn = strlen(device);
    for (int t = 0; t < 2000; t++) {
        char s[512];
        size_t n = 0;
        while (n < sizeof s) {
            seed = seed * 1103515245u + 12345u;
            if (seed >> 31) {
                size_t at = (seed >> 8) % dn, k = (seed >> 4) % 24;
                if (at + k > dn)
                    k = dn - at;
                if (n + k > sizeof s)
                    k = sizeof s - n;
                memcpy(s + n, device + at, k);
                n += k;
            } else {
                s[n++] = (char)(seed >> 16);
            }
            if ((seed & 63) == 0)
                break;
        }
        round_trip(s, n);
    }
}

#define LIST(XX)                          \
    XX(view_pack_device_round_trips_at_a_third) \
    XX(view_pack_edges_round_trip)        \
    XX(view_pack_long_literals_round_trip) \
    XX(view_pack_random_round_trips)
TEST_MAIN(LIST)
