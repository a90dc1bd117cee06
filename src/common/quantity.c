/* SPDX-License-Identifier: MIT */
/*
 * quantity.c: Kubernetes quantity parsing with exact integer arithmetic.
 * The mantissa is read as an integer plus its decimal fraction, all of its
 * digits, so "1.5Gi" is exact, a fraction of 25 decimals too (rounded up
 * to the byte), and nothing goes through floating point.
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

/* A mantissa: its integer part and the digits after the point, as many
 * as were written (none: n 0). */
struct mantissa {
    uint64_t ip;        /* the integer part (< 2^62 once split) */
    const char *frac;   /* the fraction's digits, not NUL-terminated */
    size_t n;           /* how many */
};

/* Split "12.345Gi" into its mantissa and suffix. */
static enum accel_err split_number(const char *s, struct mantissa *m,
                                   const char **rest)
{
    uint64_t i = 0;
    const char *p = s;
    bool digits = false;

    if (*p == '+')
        p++;
    while (*p >= '0' && *p <= '9') {
        uint64_t dg = (uint64_t)(*p - '0');
        if (i > (QUANTITY_MAX - dg) / 10)
            return ACCEL_ERANGE;
        i = i * 10 + dg;
        p++;
        digits = true;
    }
    m->frac = p;
    m->n = 0;
    if (*p == '.') {
        m->frac = ++p;
        while (*p >= '0' && *p <= '9') {
            p++;
            digits = true;
        }
        m->n = (size_t)(p - m->frac);
    }
    if (!digits)
        return ACCEL_EPARSE;
    m->ip = i;
    *rest = p;
    return ACCEL_OK;
}

/*
 * floor(0.d1d2...dn * mul) and whether that product has a fractional part
 * (*inexact), exactly, for any number of digits: Horner's rule from the
 * last digit, S = d_k * mul + S / 10, keeping S's integer part and a flag
 * for what the divisions by 10 dropped (floor((Q + f) / 10) = floor(Q /
 * 10) for an integer Q and 0 <= f < 1). S stays below 12 * mul < 2^75.
 */
static unsigned __int128 frac_times(const struct mantissa *m,
                                    unsigned __int128 mul, bool *inexact)
{
    unsigned __int128 q = 0;

    *inexact = false;
    for (size_t k = m->n; k > 0; k--) {
        *inexact = *inexact || q % 10 != 0;
        q = (unsigned __int128)(m->frac[k - 1] - '0') * mul + q / 10;
    }
    *inexact = *inexact || q % 10 != 0;
    return q / 10;
}

/*
 * value = ceil((ip + 0.d1...dn) * mul / div), exact for any number of
 * decimals, checked. ip * mul is refused as soon as it passes
 * QUANTITY_MAX * div (the value cannot be smaller than ip * mul / div):
 * ip < 2^63 and mul < 2^71 (E times the 1000 of millicores) can exceed 128
 * bits ("576460752303423488Ei" used to wrap to 0). With t = ip * mul +
 * floor(fraction * mul), the value is ceil(t / div) when the product is
 * exact, else floor(t / div) + 1 (div is an integer).
 */
static enum accel_err scale_value(const struct mantissa *m,
                                  unsigned __int128 mul, uint64_t div,
                                  uint64_t *out)
{
    unsigned __int128 whole, t, r;
    bool inexact;

    if (__builtin_mul_overflow((unsigned __int128)m->ip, mul, &whole) ||
        whole > (unsigned __int128)QUANTITY_MAX * div)
        return ACCEL_ERANGE;
    t = whole + frac_times(m, mul, &inexact); /* < 2^73 + 2^75 */
    r = t / div + (inexact || t % div != 0);
    if (r > QUANTITY_MAX)
        return ACCEL_ERANGE;
    *out = (uint64_t)r;
    return ACCEL_OK;
}

static enum accel_err parse_with(const char *s, uint64_t unit_mul,
                                 uint64_t unit_div, uint64_t *out)
{
    struct mantissa m;
    const char *rest;
    enum accel_err rc;

    if (s == NULL || *s == '\0')
        return ACCEL_EPARSE;
    rc = split_number(s, &m, &rest);
    if (rc != ACCEL_OK)
        return rc;
    for (size_t k = 0; k < sizeof(byte_suffixes) / sizeof(byte_suffixes[0]);
         k++) {
        const struct suffix *sx = &byte_suffixes[k];
        if (strcmp(rest, sx->s) != 0)
            continue;
        /* The multiplier may pass 64 bits (E millicores); 128 bits. */
        return scale_value(&m, (unsigned __int128)sx->mul * unit_mul,
                           sx->div * unit_div, out);
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
