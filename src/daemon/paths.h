/* SPDX-License-Identifier: MIT */
/*
 * paths.h: where acceld finds what was installed beside it (the web page,
 * the preload shim). An installed acceld looks relative to its own
 * executable (/proc/self/exe), so a package, `cmake --install --prefix X`
 * and a DESTDIR staging tree all work without rebuilding; a binary run from
 * the build tree finds nothing there and falls back to the build tree's own
 * paths, which the tests use.
 */
#ifndef ACCEL_DAEMON_PATHS_H
#define ACCEL_DAEMON_PATHS_H

/*
 * <dir of /proc/self/exe>/<rel> resolved (realpath) when it exists, else
 * fallback, as a malloc'd string; fallback itself (copied) when
 * neither does, so the caller's later error names the build-tree path.
 * rel may be NULL or "" (no install lookup).
 */
char *paths_find(const char *rel, const char *fallback);

#endif /* ACCEL_DAEMON_PATHS_H */
