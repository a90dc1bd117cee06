/* SPDX-License-Identifier: MIT */
/* util.c: allocation that aborts on exhaustion, clocks, string copies. */
#include "common/accel_setup.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void oom(size_t n)
{
    fprintf(stderr, "accel: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

char *xvasprintf(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        oom(0);
    return s;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    s = xvasprintf(fmt, ap);
    va_end(ap);
    return s;
}

uint64_t util_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct timespec util_deadline(clockid_t clk, unsigned ms)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int64_t util_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void util_strlcpy(char *dst, const char *src, size_t len)
{
    size_t n;
    if (len == 0)
        return;
    n = strlen(src);
    if (n >= len)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int util_write_small(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC), err;
    ssize_t w;

    if (fd < 0)
        return -1;
    do {
        w = write(fd, s, strlen(s));
    } while (w < 0 && errno == EINTR);
    err = errno;
    close(fd);
    errno = err;
    return w < 0 ? -1 : 0;
}

ssize_t util_read_small(const char *path, char *buf, size_t len)
{
    size_t n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    while (n + 1 < len) {
        ssize_t k = read(fd, buf + n, len - 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

size_t util_ctrl_len(const char *s, size_t len, size_t i)
{
    unsigned char c = (unsigned char)s[i];

    if (c < 0x20 || c == 0x7f)
        return 1;
    if (c == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] >= 0x80 &&
        (unsigned char)s[i + 1] <= 0x9f)
        return 2;
    return 0;
}

ssize_t util_ctrl_find(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (util_ctrl_len(s, len, i) > 0)
            return (ssize_t)i;
    return -1;
}

static char *ctrl_escape(const char *s, size_t len, bool lines)
{
    char *out, *o;

    if (util_ctrl_find(s, len) < 0)
        return NULL;
    out = o = xmalloc(len * 6 + 1); /* at most 3 bytes out per byte in */
    for (size_t i = 0; i < len;) {
        size_t k = util_ctrl_len(s, len, i);
        if (k == 1 && lines && (s[i] == '\n' || s[i] == '\t'))
            *o++ = s[i];
        else if (k == 1)
            o += snprintf(o, 5, "\\x%02x", (unsigned char)s[i]);
        else if (k == 2)
            o += snprintf(o, 7, "\\u00%02x", (unsigned char)s[i + 1]);
        else
            *o++ = s[i];
        i += k > 0 ? k : 1;
    }
    *o = '\0';
    return out;
}

char *util_ctrl_escape(const char *s, size_t len)
{
    return ctrl_escape(s, len, false);
}

char *util_ctrl_escape_text(const char *s, size_t len)
{
    return ctrl_escape(s, len, true);
}
