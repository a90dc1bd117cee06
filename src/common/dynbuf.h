/* SPDX-License-Identifier: MIT */
/*
 * dynbuf.h: a growing byte buffer with a hard cap set at init (STYLE 12,
 * curl's dynbuf): an add that would pass the cap adds nothing and marks
 * the buffer too big, instead of growing without end. For answers and
 * bodies read from the network (the CLI's HTTP answers). The bytes are
 * always NUL-terminated once one was added. Not thread-safe: one owner.
 */
#ifndef ACCEL_COMMON_DYNBUF_H
#define ACCEL_COMMON_DYNBUF_H

#include <stdbool.h>
#include <stddef.h>

struct dynbuf {
    char *p;     /* bytes, NUL-terminated; NULL until the first add */
    size_t len;  /* bytes held (the NUL not counted) */
    size_t cap;  /* bytes allocated */
    size_t max;  /* the cap: len never passes it */
    bool toobig; /* an add would have passed max: it added nothing */
};

/* An empty buffer of at most max bytes into b. Cannot fail. */
void dynbuf_init(struct dynbuf *b, size_t max);

/* Append data[0..n): true, or false (b->toobig set, nothing added) when
 * b would then hold more than its max. Out of memory aborts (xrealloc). */
bool dynbuf_add(struct dynbuf *b, const void *data, size_t n);

/* Free b's bytes; b is empty (with the same max) afterwards. */
void dynbuf_release(struct dynbuf *b);

#endif /* ACCEL_COMMON_DYNBUF_H */
