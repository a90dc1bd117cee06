/* SPDX-License-Identifier: MIT */
/*
 * paths.c: the installed-or-build-tree lookup of paths.h. The relative
 * paths come from CMake (ACCEL_WEB_REL, ACCEL_SHIM_REL: from the install
 * directory of acceld to the installed page and shim); the fallbacks are
 * the build tree's (ACCEL_WEB_DIR, ACCEL_SHIM_PATH). The installed path is
 * returned resolved (realpath), so logs name /usr/share/accel/web rather
 * than /usr/sbin/../share/accel/web. Nothing here is kept.
 */
#include "common/accel_setup.h"
#include "daemon/paths.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

char *paths_find(const char *rel, const char *fallback)
{
    char exe[PATH_MAX];
    char *slash, *cand, *real;
    ssize_t n;

    if (rel == NULL || rel[0] == '\0')
        return xstrdup(fallback);
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return xstrdup(fallback);
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash == NULL)
        return xstrdup(fallback);
    *slash = '\0';
    cand = xasprintf("%s/%s", exe, rel);
    real = realpath(cand, NULL);
    free(cand);
    if (real != NULL)
        return real;
    return xstrdup(fallback);
}
