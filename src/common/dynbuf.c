/* SPDX-License-Identifier: MIT */
/* dynbuf.c: a growing byte buffer with a hard cap (dynbuf.h). */
#include "common/dynbuf.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define DYNBUF_FIRST 4096u /* the first allocation */

void dynbuf_init(struct dynbuf *b, size_t max)
{
    *b = (struct dynbuf){.max = max};
}

bool dynbuf_add(struct dynbuf *b, const void *data, size_t n)
{
    if (n > b->max - b->len) {
        b->toobig = true;
        return false;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : DYNBUF_FIRST;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

void dynbuf_release(struct dynbuf *b)
{
    free(b->p);
    dynbuf_init(b, b->max);
}
