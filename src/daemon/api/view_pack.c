/* SPDX-License-Identifier: MIT */
/*
 * view_pack.c: the packed device texts (view_pack.h).
 *
 * A packed text is a sequence of segments, each:
 *
 *   varint L (7 bits a byte, low first) | L bytes as they are | one byte E
 *
 * where E < NRUNS names an entry of runs[] that follows the L bytes, and
 * E == PACK_END ends the text (the last segment only). Packing takes, at
 * each byte, the longest entry that starts there; a segment of 2 bytes
 * replaces a run of 3 or more, so a text never grows by more than its
 * last segment's varint and end byte.
 */
#include "common/accel_setup.h"
#include "daemon/api/view_pack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PACK_END 0xff

struct run {
    const char *s;
    size_t len;
};

#define R(x) {x, sizeof(x) - 1}
/* The key runs of a device's and a binding's compact JSON (view.c
 * device_json, binding_json, manifest_req_json). Append only: the order
 * is the code, though no packed text outlives the process. */
static const struct run runs[] = {
    R("{\"id\":\""),
    R("\",\"nodeName\":\""),
    R("\",\"index\":"),
    R(",\"mode\":\""),
    R("\",\"cardModel\":\""),
    R("\",\"memory\":"),
    R(",\"health\":\""),
    R("\",\"supportType\":\""),
    R("\",\"availableSupportTypes\":["),
    R("\"TimeSlice\",\"MemorySlice\",\"Exclusive\"],\"bindings\":["),
    R("],\"bindings\":["),
    R("],\"allocated\":"),
    R(",\"free\":"),
    R(",\"usedMemory\":"),
    R(",\"utilization\":"),
    R(",\"present\":true,\"enforcement\":{\"memory\":\""),
    R(",\"present\":"),
    R(",\"enforcement\":{\"memory\":\""),
    R("\",\"compute\":\""),
    R("\"},\"timeSlice\":"),
    R(",\"power\":"),
    R(",\"powerLimit\":"),
    R(",\"temperature\":"),
    R(",\"utilizationReason\":\""),
    R("\",\"powerReason\":\""),
    R("\",\"powerLimitReason\":\""),
    R("\",\"temperatureReason\":\""),
    R("not an NVML device"),
    R(",\"foreignUsage\":[]}"),
    R(",\"foreignUsage\":["),
    R("{\"appName\":\""),
    R("\",\"owner\":\""),
    R("\",\"deviceId\":\""),
    R(",\"spec\":{\"mode\":\""),
    R("\",\"requiredCpu\":"),
    R(",\"limitedCpu\":"),
    R(",\"requiredGpu\":"),
    R(",\"limitedGpu\":"),
    R(",\"requiredMemory\":"),
    R(",\"limitedMemory\":"),
    R(",\"requiredDisk\":"),
    R(",\"limitedDisk\":"),
    R(",\"supportMultiCards\":false,\"supportMultiNodes\":false}"),
    R(",\"supportMultiCards\":"),
    R(",\"supportMultiNodes\":"),
    R("\",\"hidden\":true"),
    R("null"),
    R("false"),
    R("nvidia"),
    R("MemorySlice"),
    R("TimeSlice"),
    R("Exclusive"),
};
#undef R
#define NRUNS (sizeof(runs) / sizeof(runs[0]))

_Static_assert(NRUNS < PACK_END, "a run's code is one byte below PACK_END");
#define LIT 16 /* literals up to this long are copied as one 16-byte block */

/* For each first byte, the runs that start with it, longest first. */
static unsigned char by_first[256][NRUNS];
static unsigned char nby_first[256];
/* Each run in a slot of its own, so that unpacking copies a whole slot
 * (one fixed-size copy, no call) where the output has room. */
#define SLOT 64
static char slots[NRUNS][SLOT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void index_runs(void)
{
    for (size_t i = 0; i < NRUNS; i++) {
        if (runs[i].len > SLOT)
            abort(); /* a run longer than a slot: make SLOT larger */
        memcpy(slots[i], runs[i].s, runs[i].len);
        unsigned char f = (unsigned char)runs[i].s[0];
        size_t k = nby_first[f]++;
        while (k > 0 && runs[by_first[f][k - 1]].len < runs[i].len) {
            by_first[f][k] = by_first[f][k - 1];
            k--;
        }
        by_first[f][k] = (unsigned char)i;
    }
}

/* The longest run at s[0..n), or -1. */
static int match(const char *s, size_t n)
{
    unsigned char f = (unsigned char)s[0];
    for (size_t k = 0; k < nby_first[f]; k++) {
        const struct run *r = &runs[by_first[f][k]];
        if (r->len <= n && memcmp(s, r->s, r->len) == 0)
            return by_first[f][k];
    }
    return -1;
}

static size_t put_segment(char *out, size_t o, const char *lit, size_t n,
                          int code)
{
    size_t v = n;
    do {
        unsigned char b = v & 0x7f;
        v >>= 7;
        out[o++] = (char)(b | (v ? 0x80 : 0));
    } while (v);
    memcpy(out + o, lit, n);
    o += n;
    out[o++] = (char)code;
    return o;
}

size_t view_pack_bound(size_t n)
{
    return n + 11; /* a varint of n (10 bytes at most) and the end byte */
}

size_t view_pack(const char *s, size_t n, char *out)
{
    size_t o = 0, lit = 0, i = 0;

    pthread_once(&once, index_runs);
    while (i < n) {
        int e = match(s + i, n - i);
        if (e < 0) {
            i++;
            continue;
        }
        o = put_segment(out, o, s + lit, i - lit, e);
        i += runs[e].len;
        lit = i;
    }
    return put_segment(out, o, s + lit, n - lit, PACK_END);
}

size_t view_unpack(const char *p, size_t n, char *out, size_t cap)
{
    size_t i = 0, o = 0;

    pthread_once(&once, index_runs);
    while (i < n) {
        size_t len = 0;
        unsigned shift = 0;
        unsigned char b, e;
        do {
            b = (unsigned char)p[i++];
            len |= (size_t)(b & 0x7f) << shift;
            shift += 7;
        } while (b & 0x80);
        /* the short stretches between runs are most: copy a fixed block
         * when both sides have room for it (the excess is overwritten
         * next, or lies past what the caller reads) */
        if (len <= LIT && i + LIT <= n && o + LIT <= cap)
            memcpy(out + o, p + i, LIT);
        else
            memcpy(out + o, p + i, len);
        i += len;
        o += len;
        e = (unsigned char)p[i++];
        if (e == PACK_END)
            continue;
        if (o + SLOT <= cap)
            memcpy(out + o, slots[e], SLOT);
        else
            memcpy(out + o, runs[e].s, runs[e].len);
        o += runs[e].len;
    }
    return o;
}
