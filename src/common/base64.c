/* SPDX-License-Identifier: MIT */
/*
 * base64.c: see base64.h. Both directions work on whole 3-byte/4-character
 * groups and treat the last group on its own, so the main loops carry no
 * branches for the padding. Decoding is strict (canonical input only): etcd
 * writes canonical base64, and anything else is a broken answer.
 */
#include "common/accel_setup.h"
#include "common/base64.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#define B64_BAD 0xff /* not a character of the alphabet */

/* value of each character, B64_BAD for the rest ('=' included) */
static uint8_t decode_char(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return (uint8_t)(c - 'A');
    if (c >= 'a' && c <= 'z')
        return (uint8_t)(c - 'a' + 26);
    if (c >= '0' && c <= '9')
        return (uint8_t)(c - '0' + 52);
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return B64_BAD;
}

size_t base64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

char *base64_encode(const void *src, size_t n)
{
    const unsigned char *s = src;
    char *out = xmalloc(base64_encoded_len(n) + 1);
    char *o = out;
    size_t i = 0;

    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = alphabet[v >> 18 & 63];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = alphabet[v >> 6 & 63];
        *o++ = alphabet[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        *o++ = alphabet[v >> 18 & 63];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = i + 1 < n ? alphabet[v >> 6 & 63] : '=';
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

/*
 * The last group of 4 characters: 1, 2 or 3 bytes into o; how many, or -1
 * when it is malformed. The bits a short group leaves unused must be zero,
 * so that every byte string has exactly one encoding.
 */
static int decode_last(const char *g, unsigned char *o)
{
    uint8_t a = decode_char((unsigned char)g[0]);
    uint8_t b = decode_char((unsigned char)g[1]);
    uint8_t c = decode_char((unsigned char)g[2]);
    uint8_t d = decode_char((unsigned char)g[3]);

    if (a == B64_BAD || b == B64_BAD)
        return -1;
    if (g[2] == '=' && g[3] == '=') {
        if (b & 15)
            return -1;
        o[0] = (unsigned char)(a << 2 | b >> 4);
        return 1;
    }
    if (c == B64_BAD)
        return -1;
    if (g[3] == '=') {
        if (c & 3)
            return -1;
        o[0] = (unsigned char)(a << 2 | b >> 4);
        o[1] = (unsigned char)(b << 4 | c >> 2);
        return 2;
    }
    if (d == B64_BAD)
        return -1;
    o[0] = (unsigned char)(a << 2 | b >> 4);
    o[1] = (unsigned char)(b << 4 | c >> 2);
    o[2] = (unsigned char)(c << 6 | d);
    return 3;
}

bool base64_decode(const char *src, size_t len, char **out, size_t *out_len)
{
    unsigned char *buf, *o;
    size_t i = 0;
    int last;

    if (len % 4 != 0)
        return false;
    buf = xmalloc(len / 4 * 3 + 1);
    o = buf;
    for (; len > 0 && i + 4 < len; i += 4) {
        uint8_t a = decode_char((unsigned char)src[i]);
        uint8_t b = decode_char((unsigned char)src[i + 1]);
        uint8_t c = decode_char((unsigned char)src[i + 2]);
        uint8_t d = decode_char((unsigned char)src[i + 3]);
        if (a == B64_BAD || b == B64_BAD || c == B64_BAD || d == B64_BAD)
            goto bad;
        *o++ = (unsigned char)(a << 2 | b >> 4);
        *o++ = (unsigned char)(b << 4 | c >> 2);
        *o++ = (unsigned char)(c << 6 | d);
    }
    if (len > 0) {
        last = decode_last(src + i, o);
        if (last < 0)
            goto bad;
        o += last;
    }
    *o = '\0';
    *out = (char *)buf;
    *out_len = (size_t)(o - buf);
    return true;
bad:
    free(buf);
    return false;
}
