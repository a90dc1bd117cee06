/* SPDX-License-Identifier: MIT */
/* log.c: one line per message, ISO time, level, text. */
#include "common/accel_setup.h"
#include "daemon/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static _Atomic int current_level = LOG_INFO;
static const char *const names[] = {"debug", "info", "warn", "error"};

int log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

void log_set_level(enum log_level l)
{
    atomic_store(&current_level, (int)l);
}

void log_msg(enum log_level l, const char *fmt, ...)
{
    char ts[32], line[1024];
    struct tm tm;
    time_t now;
    va_list ap;

    if ((int)l < atomic_load(&current_level))
        return;
    now = time(NULL);
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %-5s %s\n", ts, names[l], line);
}
