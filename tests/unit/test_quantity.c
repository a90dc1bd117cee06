/* SPDX-License-Identifier: MIT */
#include "common/quantity.h"

#include "harness.h"

TEST(quantity_binary_suffixes)
{
    uint64_t v = 0;
    ASSERT_EQ(quantity_parse_bytes("8Gi", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 8ULL << 30);
    ASSERT_EQ(quantity_parse_bytes("512Mi", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 512ULL << 20);
    ASSERT_EQ(quantity_parse_bytes("1.5Gi", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 3ULL << 29);
    ASSERT_EQ(quantity_parse_bytes("46.89Gi", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 50347754128ULL); /* ceil(46.89 * 2^30) */
}

TEST(quantity_decimal_and_plain)
{
    uint64_t v = 0;
    ASSERT_EQ(quantity_parse_bytes("1.5G", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 1500000000ULL);
    ASSERT_EQ(quantity_parse_bytes("12345", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 12345);
    ASSERT_EQ(quantity_parse_bytes("0", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 0);
}

TEST(quantity_cpu)
{
    uint64_t v = 0;
    ASSERT_EQ(quantity_parse_millicores("2", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 2000);
    ASSERT_EQ(quantity_parse_millicores("500m", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 500);
    ASSERT_EQ(quantity_parse_millicores("1.5", &v), ACCEL_OK);
    ASSERT_U64_EQ(v, 1500);
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
    XX(quantity_format)
TEST_MAIN(LIST)
