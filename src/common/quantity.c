/* SPDX-License-Identifier: MIT */
/*
 * quantity.c: Kubernetes quantity parsing with exact integer arithmetic.
 * The mantissa is read as an integer plus a decimal fraction of at most 9
 * digits, so "1.5Gi" is exact and nothing goes through floating point.
 */
#include "common/quantity.h"

#include <stdio.h>
#include <string.h>

struct suffix {
    const char *s;
    uint64_t mul; /* multiplier for base units */
    uint64_t div; /* divisor (for "m") */
};

static const struct suffix byte_suffixes[] = {
    {"Ki", UINT64_C(1) << 10, 1}, {"Mi", UINT64_C(1) << 20, 1},
    {"Gi", UINT64_C(1) << 30, 1}, {"Ti", UINT64_C(1) << 40, 1},
    {"Pi", UINT64_C(1) << 50, 1}, {"Ei", UINT64_C(1) << 60, 1},
    {"k", 1000ULL, 1},            {"K", 1000ULL, 1},
    {"M", 1000000ULL, 1},         {"G", 1000000000ULL, 1},
    {"T", 1000000000000ULL, 1},   {"P", 1000000000000000ULL, 1},
    {"E", 1000000000000000000ULL, 1},
    {"m", 1, 1000},               {"", 1, 1},
};

/* Split "12.345Gi" into integer part, fraction (scaled to 1e9) and suffix. */
static enum accel_err split_number(const char *s, uint64_t *ip, uint64_t *frac,
                                   const char **rest)
{
    uint64_t i = 0, f = 0, scale = 100000000; /* first fraction digit = 1e8 */
    const char *p = s;
    bool digits = false;

    if (*p == '+')
        p++;
    while (*p >= '0' && *p <= '9') {
        if (i > (QUANTITY_MAX - 9) / 10)
            return ACCEL_ERANGE;
        i = i * 10 + (uint64_t)(*p - '0');
        p++;
        digits = true;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (scale > 0) {
                f += (uint64_t)(*p - '0') * scale;
                scale /= 10;
            } else if (*p != '0') {
                f += 1; /* beyond 1e-9: round up */
                scale = 0;
            }
            p++;
            digits = true;
        }
    }
    if (!digits)
        return ACCEL_EPARSE;
    *ip = i;
    *frac = f;
    *rest = p;
    return ACCEL_OK;
}

/* value = (ip + frac/1e9) * mul / div, rounded up, checked. */
static enum accel_err scale_value(uint64_t ip, uint64_t frac, uint64_t mul,
                                  uint64_t div, uint64_t *out)
{
    unsigned __int128 v = (unsigned __int128)ip * mul * 1000000000u +
                          (unsigned __int128)frac * mul;
    unsigned __int128 d = (unsigned __int128)div * 1000000000u;
    unsigned __int128 r = (v + d - 1) / d;
    if (r > QUANTITY_MAX)
        return ACCEL_ERANGE;
    *out = (uint64_t)r;
    return ACCEL_OK;
}

static enum accel_err parse_with(const char *s, uint64_t unit_mul,
                                 uint64_t unit_div, uint64_t *out)
{
    uint64_t ip, frac;
    const char *rest;
    enum accel_err rc;

    if (s == NULL || *s == '\0')
        return ACCEL_EPARSE;
    rc = split_number(s, &ip, &frac, &rest);
    if (rc != ACCEL_OK)
        return rc;
    for (size_t k = 0; k < sizeof(byte_suffixes) / sizeof(byte_suffixes[0]);
         k++) {
        const struct suffix *sx = &byte_suffixes[k];
        if (strcmp(rest, sx->s) != 0)
            continue;
        /* The multiplier may be huge (E); do it in 128 bits. */
        unsigned __int128 mul = (unsigned __int128)sx->mul * unit_mul;
        if (mul > UINT64_MAX)
            return ACCEL_ERANGE;
        return scale_value(ip, frac, (uint64_t)mul, sx->div * unit_div, out);
    }
    return ACCEL_EPARSE;
}

enum accel_err quantity_parse_bytes(const char *s, uint64_t *out)
{
    return parse_with(s, 1, 1, out);
}

enum accel_err quantity_parse_millicores(const char *s, uint64_t *out)
{
    return parse_with(s, 1000, 1, out);
}

void quantity_format_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
    static const int shifts[] = {60, 50, 40, 30, 20, 10};
    for (int i = 0; i < 6; i++) {
        uint64_t m = UINT64_C(1) << shifts[i];
        if (bytes >= m && bytes % m == 0) {
            snprintf(buf, len, "%llu%s", (unsigned long long)(bytes / m),
                     units[i]);
            return;
        }
    }
    snprintf(buf, len, "%llu", (unsigned long long)bytes);
}

void quantity_format_gib(uint64_t bytes, char *buf, size_t len)
{
    /* hundredths of a GiB, rounded half up, in integers */
    unsigned __int128 h = ((unsigned __int128)bytes * 100 + (1ULL << 29)) >> 30;
    unsigned long long hh = (unsigned long long)h;
    if (hh % 100 == 0)
        snprintf(buf, len, "%llu", hh / 100);
    else
        snprintf(buf, len, "%llu.%02llu", hh / 100, hh % 100);
}
