/* SPDX-License-Identifier: MIT */
/*
 * prompt.c: line-based terminal questions for accelctl (confirmations, a
 * numbered choice, a free answer). No terminal modes are changed.
 */
#include "common/accel_setup.h"
#include "cli/prompt.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    size_t lead = strspn(s, " \t");
    memmove(s, s + lead, n - lead + 1);
}

bool prompt_line(const char *question, char *buf, size_t len)
{
    fputs(question, stderr);
    fflush(stderr);
    if (fgets(buf, (int)len, stdin) == NULL) {
        fputc('\n', stderr);
        return false;
    }
    trim(buf);
    return true;
}

bool prompt_confirm(const char *question)
{
    char buf[16];
    char *q = xasprintf("%s [y/N]: ", question);
    bool ok = prompt_line(q, buf, sizeof(buf));
    free(q);
    return ok && (strcasecmp(buf, "y") == 0 || strcasecmp(buf, "yes") == 0);
}

int prompt_choose(const char *question, int n)
{
    char buf[32];
    for (int tries = 0; tries < 3; tries++) {
        if (!prompt_line(question, buf, sizeof(buf)))
            return -1;
        char *end = NULL;
        errno = 0;
        long v = strtol(buf, &end, 10);
        if (errno == 0 && end != buf && *end == '\0' && v >= 1 && v <= n)
            return (int)(v - 1);
        fprintf(stderr, "Please answer a number from 1 to %d.\n", n);
    }
    return -1;
}
