/* SPDX-License-Identifier: MIT */
/*
 * base.c: what every file of the shim uses to write: the log line
 * (shim_log, to the ACCEL_LOG target shim.c opened) and the formatting
 * helpers that avoid stdio on the start-up path (shim_concat, shim_utoa).
 * No state of its own; nothing here allocates, aborts or takes a lock.
 */
#include "shim/shim.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int shim_concat(char *dst, size_t cap, ...)
{
    va_list ap;
    const char *part;
    size_t n = 0;
    int rc = 0;

    if (cap == 0)
        return -1;
    va_start(ap, cap);
    while ((part = va_arg(ap, const char *)) != NULL) {
        size_t l = strlen(part);
        if (l > cap - 1 - n) {
            l = cap - 1 - n;
            rc = -1;
        }
        memcpy(dst + n, part, l);
        n += l;
    }
    va_end(ap);
    dst[n] = '\0';
    return rc;
}

char *shim_utoa(unsigned long v, char buf[24])
{
    char tmp[24];
    size_t n = 0, i = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        buf[i++] = tmp[--n];
    buf[i] = '\0';
    return buf;
}

void shim_log(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    int n, h;

    if (shim_state.log_fd <= 0)
        return;
    h = snprintf(buf, sizeof(buf), "accelshim[%d]: ", (int)shim_state.pid);
    if (h < 0 || (size_t)h >= sizeof(buf))
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + h, sizeof(buf) - (size_t)h - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    n += h;
    if ((size_t)n > sizeof(buf) - 2)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    while (write(shim_state.log_fd - 1, buf, (size_t)n) < 0 && errno == EINTR)
        ;
}
