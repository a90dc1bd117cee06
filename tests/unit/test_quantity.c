/* SPDX-License-Identifier: MIT */
/*
 * test_quantity.c: Kubernetes quantities (src/common/quantity.c): every
 * suffix, decimals, millicores, and the boundaries of each unit where a
 * product no longer fits (refused, never wrapped).
 */
#include "common/accel_setup.h"
#include "common/quantity.h"

#include <errno.h>

#include "harness.h"

/* parse(s) succeeds with want (bytes or millicores): two checks, reported
 * at the caller's line. */
#define PARSES_TO(parse, s, want)                                              \
    do {                                                                       \
        uint64_t v_ = 0;                                                       \
        ASSERT_EQ(parse(s, &v_), ACCEL_OK);                                    \
        ASSERT_U64_EQ(v_, want);                                               \
    } while (0)
#define BYTES_ARE(s, want) PARSES_TO(quantity_parse_bytes, s, want)
#define MILLICORES_ARE(s, want) PARSES_TO(quantity_parse_millicores, s, want)

TEST(quantity_binary_suffixes)
{
    BYTES_ARE("8Gi", 8ULL << 30);
    BYTES_ARE("512Mi", 512ULL << 20);
    BYTES_ARE("1.5Gi", 3ULL << 29);
    BYTES_ARE("46.89Gi", 50347754128ULL); /* ceil(46.89 * 2^30) */
}

TEST(quantity_decimal_and_plain)
{
    BYTES_ARE("1.5G", 1500000000ULL);
    BYTES_ARE("12345", 12345);
    BYTES_ARE("0", 0);
}

TEST(quantity_cpu)
{
    MILLICORES_ARE("2", 2000);
    MILLICORES_ARE("500m", 500);
    MILLICORES_ARE("1.5", 1500);
}

TEST(quantity_rejects)
{
    uint64_t v = 77;
    ASSERT_EQ(quantity_parse_bytes("", &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes(NULL, &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes("-1", &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes("8Qi", &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes("Gi", &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes("8 Gi", &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes("1.2.3", &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes("99999999999999999999999", &v),
              ACCEL_ERANGE);
    ASSERT_EQ(quantity_parse_bytes("16Ei", &v), ACCEL_ERANGE);
    ASSERT_EQ(quantity_parse_bytes("4611686018427387905", &v), ACCEL_ERANGE);
    ASSERT_U64_EQ(v, 77); /* untouched on failure */
}

/* Every suffix at its boundary: floor(MAX / mul) is exact, one more is
 * ERANGE, and so is any huge mantissa (products past 128 bits once wrapped:
 * "576460752303423488Ei" was 0). Bytes and millicores. */
struct unit_case {
    const char *sfx;
    unsigned __int128 mul; /* base units per 1 of the suffix (bytes) */
};

static const struct unit_case units[] = {
    {"", 1},
    {"Ki", (unsigned __int128)1 << 10},
    {"Mi", (unsigned __int128)1 << 20},
    {"Gi", (unsigned __int128)1 << 30},
    {"Ti", (unsigned __int128)1 << 40},
    {"Pi", (unsigned __int128)1 << 50},
    {"Ei", (unsigned __int128)1 << 60},
    {"k", 1000ULL},
    {"K", 1000ULL},
    {"M", 1000000ULL},
    {"G", 1000000000ULL},
    {"T", 1000000000000ULL},
    {"P", 1000000000000000ULL},
    {"E", 1000000000000000000ULL},
};

static void check_boundary(const char *sfx, unsigned __int128 mul, bool cpu)
{
    char b[64];
    uint64_t v = 7;
    uint64_t n = (uint64_t)(QUANTITY_MAX / mul);
    enum accel_err (*parse)(const char *, uint64_t *) =
        cpu ? quantity_parse_millicores : quantity_parse_bytes;

    if (n > 0) {
        snprintf(b, sizeof b, "%" PRIu64 "%s", n, sfx);
        ASSERT_EQ(parse(b, &v), ACCEL_OK);
        ASSERT(v == (uint64_t)(n * mul));
    }
    snprintf(b, sizeof b, "%" PRIu64 "%s", n + 1, sfx);
    v = 7;
    if (parse(b, &v) != ACCEL_ERANGE)
        FAIL_AT_("%s (%s) accepted as %" PRIu64, b, cpu ? "cpu" : "bytes", v);
    ASSERT_U64_EQ(v, 7);
    /* mantissas whose product with the suffix passes 64 and 128 bits */
    static const char *const huge[] = {
        "576460752303423488", "4611686018427387903", "4611686018427387904",
        "1152921504606846976", "340282366920938463463374607431768211456",
        "18446744073709551616", "9223372036854775808"};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        unsigned long long m;
        errno = 0;
        m = strtoull(huge[i], NULL, 10);
        if (errno == 0 && (unsigned __int128)m * mul <= QUANTITY_MAX)
            continue; /* fits (plain bytes): covered above */
        snprintf(b, sizeof b, "%s%s", huge[i], sfx);
        v = 7;
        if (parse(b, &v) != ACCEL_ERANGE)
            FAIL_AT_("%s (%s) accepted as %" PRIu64, b,
                     cpu ? "cpu" : "bytes", v);
    }
}

TEST(quantity_unit_boundaries)
{
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        check_boundary(units[i].sfx, units[i].mul, false);
        check_boundary(units[i].sfx, units[i].mul * 1000, true);
    }
}

TEST(quantity_wrap_regressions)
{
    uint64_t v = 7;
    /* 2^59 * 2^60 * 1e9 wrapped 128 bits to exactly 0 */
    ASSERT_EQ(quantity_parse_bytes("576460752303423488Ei", &v), ACCEL_ERANGE);
    ASSERT_EQ(quantity_parse_millicores("576460752303423488Ei", &v),
              ACCEL_ERANGE);
    /* 1E cores = 1e21 millicores: the multiplier alone passes 64 bits */
    ASSERT_EQ(quantity_parse_millicores("1E", &v), ACCEL_ERANGE);
    MILLICORES_ARE("0E", 0);
    v = 7;
    ASSERT_EQ(quantity_parse_bytes("18446744073709551616", &v), ACCEL_ERANGE);
    ASSERT_EQ(quantity_parse_bytes("9223372036854775807Ki", &v),
              ACCEL_ERANGE);
    ASSERT_U64_EQ(v, 7);
    /* the mantissa itself may be QUANTITY_MAX exactly, not one more */
    BYTES_ARE("4611686018427387904", QUANTITY_MAX);
}

TEST(quantity_decimal_boundaries)
{
    uint64_t v = 0;
    /* QUANTITY_MAX is exactly 4Ei */
    BYTES_ARE("4Ei", QUANTITY_MAX);
    ASSERT_EQ(quantity_parse_bytes("3.999999999Ei", &v), ACCEL_OK);
    ASSERT(v < QUANTITY_MAX);
    ASSERT_EQ(quantity_parse_bytes("4.000000001Ei", &v), ACCEL_ERANGE);
    ASSERT_EQ(quantity_parse_bytes("4.0000000000000001Ei", &v), ACCEL_ERANGE);
    BYTES_ARE("4.000000000000Ei", QUANTITY_MAX);
    /* 4.611686018427387904E = QUANTITY_MAX bytes exactly */
    BYTES_ARE("4.611686018E", 4611686018000000000ULL);
    ASSERT_EQ(quantity_parse_bytes("4.611686019E", &v), ACCEL_ERANGE);
    /* millicores: 4611686018427387.904 cores */
    MILLICORES_ARE("4611686018427387.904", QUANTITY_MAX);
    ASSERT_EQ(quantity_parse_millicores("4611686018427387.905", &v),
              ACCEL_ERANGE);
    /* every fraction digit counts: exactly the limit, then one past */
    MILLICORES_ARE("4.611686018427387904P", QUANTITY_MAX);
    ASSERT_EQ(quantity_parse_millicores("4.6116860184273879041P", &v),
              ACCEL_ERANGE);
    BYTES_ARE("4.611686018427387904E", QUANTITY_MAX);
    ASSERT_EQ(quantity_parse_bytes("4.6116860184273879040000000001E", &v),
              ACCEL_ERANGE);
    MILLICORES_ARE("0.001E", 1000000000000000000ULL); /* 1e15 cores */
    ASSERT_EQ(quantity_parse_millicores("0.005E", &v), ACCEL_ERANGE);
    /* "m": thousandths, rounded up */
    BYTES_ARE("1m", 1);
    BYTES_ARE("4611686018427387904m", 4611686018427388ULL);
    ASSERT_EQ(quantity_parse_bytes("4611686018427387905m", &v), ACCEL_ERANGE);
    MILLICORES_ARE("4611686018427387904m", QUANTITY_MAX);
    ASSERT_EQ(quantity_parse_millicores("4611686018427387905m", &v),
              ACCEL_ERANGE);
    /* exponent forms are not supported: a parse error, never a value */
    ASSERT_EQ(quantity_parse_bytes("1e3", &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes("1E3", &v), ACCEL_EPARSE);
    ASSERT_EQ(quantity_parse_bytes("1e99", &v), ACCEL_EPARSE);
    /* leading zeros are digits of the same value, not an overflow */
    BYTES_ARE("0000000000000000000000000001Ki", 1024);
}

/*
 * The reference: ceil((ip + 0.digits) * mul / div) with a bignum of base
 * 1e9 limbs, least significant first: the number ip digits (an integer
 * scaled by 10^n), times mul (as its two factors), divided by div and by
 * 10 n times, any remainder rounding up. Slow and obvious.
 */
#define LIMBS 16
struct big {
    uint32_t l[LIMBS];
};

static void big_mul(struct big *b, uint64_t m)
{
    unsigned __int128 carry = 0;
    for (int i = 0; i < LIMBS; i++) {
        unsigned __int128 x = (unsigned __int128)b->l[i] * m + carry;
        b->l[i] = (uint32_t)(x % 1000000000u);
        carry = x / 1000000000u;
    }
}

static void big_add(struct big *b, uint64_t v)
{
    for (int i = 0; i < LIMBS && v > 0; i++) {
        uint64_t x = b->l[i] + v;
        b->l[i] = (uint32_t)(x % 1000000000u);
        v = x / 1000000000u;
    }
}

/* b /= d; the remainder */
static uint64_t big_div(struct big *b, uint64_t d)
{
    uint64_t rem = 0;
    for (int i = LIMBS - 1; i >= 0; i--) {
        uint64_t x = rem * 1000000000u + b->l[i];
        b->l[i] = (uint32_t)(x / d);
        rem = x % d;
    }
    return rem;
}

/* The reference value, or UINT64_MAX past QUANTITY_MAX. */
static uint64_t reference(uint64_t ip, const char *digits, uint64_t mul1,
                          uint64_t mul2, uint64_t div)
{
    struct big b;
    bool rem = false;
    size_t n = strlen(digits);
    memset(&b, 0, sizeof b);
    big_add(&b, ip);
    for (size_t k = 0; k < n; k++) {
        big_mul(&b, 10);
        big_add(&b, (uint64_t)(digits[k] - '0'));
    }
    big_mul(&b, mul1);
    big_mul(&b, mul2);
    rem = big_div(&b, div) != 0;
    for (size_t k = 0; k < n; k++)
        rem = big_div(&b, 10) != 0 || rem;
    if (rem)
        big_add(&b, 1);
    for (int i = 3; i < LIMBS; i++)
        if (b.l[i] != 0)
            return UINT64_MAX;
    {
        unsigned __int128 v = (unsigned __int128)b.l[2] * 1000000000u *
                                  1000000000u +
                              (unsigned __int128)b.l[1] * 1000000000u +
                              b.l[0];
        return v > QUANTITY_MAX ? UINT64_MAX : (uint64_t)v;
    }
}

/* The parser's answer for ip.digits<suffix> agrees with the reference
 * (bytes and millicores); the count of cases checked. */
struct suffix_case {
    const char *s;
    uint64_t mul, div;
};
static const struct suffix_case suffixes[] = {
    {"", 1, 1}, {"m", 1, 1000}, {"k", 1000, 1}, {"K", 1000, 1},
    {"M", 1000000, 1}, {"G", 1000000000, 1}, {"T", 1000000000000, 1},
    {"P", 1000000000000000, 1}, {"E", 1000000000000000000, 1},
    {"Ki", 1ULL << 10, 1}, {"Mi", 1ULL << 20, 1}, {"Gi", 1ULL << 30, 1},
    {"Ti", 1ULL << 40, 1}, {"Pi", 1ULL << 50, 1}, {"Ei", 1ULL << 60, 1}};

static void agrees(uint64_t ip, const char *digits,
                   const struct suffix_case *u)
{
    char s[128];
    uint64_t v = 0, want;
    enum accel_err rc;

    snprintf(s, sizeof s, "%llu.%s%s", (unsigned long long)ip, digits, u->s);
    want = reference(ip, digits, u->mul, 1, u->div);
    rc = quantity_parse_bytes(s, &v);
    if (want == UINT64_MAX)
        ASSERT_EQ(rc, ACCEL_ERANGE);
    else if (rc != ACCEL_OK || v != want)
        FAIL_AT_("%s: got %d %llu, want %llu", s, (int)rc,
                 (unsigned long long)v, (unsigned long long)want);
    want = reference(ip, digits, u->mul, 1000, u->div);
    rc = quantity_parse_millicores(s, &v);
    if (want == UINT64_MAX)
        ASSERT_EQ(rc, ACCEL_ERANGE);
    else if (rc != ACCEL_OK || v != want)
        FAIL_AT_("%s millicores: got %d %llu, want %llu", s, (int)rc,
                 (unsigned long long)v, (unsigned long long)want);
}

/* The case of issue 46: 25 decimals parsed a few bytes over (the tenth
 * and later digits rounded the mantissa up by 1e-9 before the suffix). */
TEST(quantity_many_decimals_exact)
{
    BYTES_ARE("1.0000000000000000000000001Gi", (1ULL << 30) + 1);
    BYTES_ARE("1.0000000000000000000000000Gi", 1ULL << 30);
    BYTES_ARE("0.0000000000000000000000001Ei", 1);
    BYTES_ARE("1.0000000001Ei", (1ULL << 60) + 115292151);
    BYTES_ARE("1.0000000001Ki", 1025);
    BYTES_ARE("0.5000000000000000000000000Mi", 1ULL << 19);
    BYTES_ARE("0.4999999999999999999999999Mi", 1ULL << 19);
    MILLICORES_ARE("0.0010000000000000000000001", 2);
    MILLICORES_ARE("0.0010000000000000000000000", 1);
}

/* Every suffix, every length of fraction up to 40 decimals, at the edges
 * where rounding turns: a last digit alone (10^-n), a run of nines, a
 * fraction that makes a whole number of bytes, and pseudo-random digits;
 * each against the reference. */
TEST(quantity_decimals_against_reference)
{
    static const uint64_t ips[] = {0, 1, 3, 1023, 4, 4611686018427387903ULL};
    char digits[48];
    uint64_t seed = 46;
    for (size_t u = 0; u < sizeof suffixes / sizeof suffixes[0]; u++)
        for (size_t i = 0; i < sizeof ips / sizeof ips[0]; i++)
            for (size_t n = 1; n <= 40; n++) {
                memset(digits, '0', n);
                digits[n] = '\0';
                for (char last = '0'; last <= '9'; last++) {
                    digits[n - 1] = last;
                    agrees(ips[i], digits, &suffixes[u]);
                }
                memset(digits, '9', n);
                agrees(ips[i], digits, &suffixes[u]);
                memset(digits, '0', n);
                digits[0] = '5'; /* .5, .05, ...: whole bytes of Ki up */
                agrees(ips[i], digits, &suffixes[u]);
                for (int r = 0; r < 8; r++) {
                    for (size_t k = 0; k < n; k++) {
                        seed = seed * 6364136223846793005ULL +
                               1442695040888963407ULL;
                        digits[k] = (char)('0' + (seed >> 33) % 10);
                    }
                    agrees(ips[i], digits, &suffixes[u]);
                }
            }
}

TEST(quantity_format)
{
    char b[32];
    quantity_format_bytes(8ULL << 30, b, sizeof b);
    ASSERT_STR_EQ(b, "8Gi");
    quantity_format_bytes(1536ULL << 20, b, sizeof b);
    ASSERT_STR_EQ(b, "1536Mi");
    quantity_format_bytes(1000, b, sizeof b);
    ASSERT_STR_EQ(b, "1000");
    quantity_format_gib(36ULL << 30, b, sizeof b);
    ASSERT_STR_EQ(b, "36");
    quantity_format_gib(50347754128ULL, b, sizeof b);
    ASSERT_STR_EQ(b, "46.89");
}

#define LIST(XX)                                                               \
    XX(quantity_binary_suffixes)                                               \
    XX(quantity_decimal_and_plain)                                             \
    XX(quantity_cpu)                                                           \
    XX(quantity_rejects)                                                       \
    XX(quantity_unit_boundaries)                                               \
    XX(quantity_wrap_regressions)                                              \
    XX(quantity_decimal_boundaries)                                            \
    XX(quantity_many_decimals_exact)                                           \
    XX(quantity_decimals_against_reference)                                    \
    XX(quantity_format)
TEST_MAIN(LIST)
