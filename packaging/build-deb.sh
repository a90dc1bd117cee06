#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the Debian package: configures BUILD_DIR for /usr with Debian's
# hardening flags (dpkg-buildflags: fortify, stack protector, relro, now),
# builds only what the package holds, and runs cpack -G DEB. Prints the
# path of the .deb on its last line.
# Usage: packaging/build-deb.sh [BUILD_DIR]   (default: build-deb)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath -m "${1:-build-deb}")
export DEB_BUILD_MAINT_OPTIONS=${DEB_BUILD_MAINT_OPTIONS:-hardening=+all}
cflags="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
ldflags=$(dpkg-buildflags --get LDFLAGS)
cmake -S . -B "$BUILD" -DCMAKE_INSTALL_PREFIX=/usr \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON \
    "-DCMAKE_C_FLAGS=$cflags" "-DCMAKE_EXE_LINKER_FLAGS=$ldflags" \
    "-DCMAKE_SHARED_LINKER_FLAGS=$ldflags" >/dev/null
cmake --build "$BUILD" -j"${ACCEL_JOBS:-2}" --target acceld accelctl accel-runc accel-ctxprobe accelshim \
    accel_man accel_changelog >/dev/null
rm -f "$BUILD"/accel_*.deb
(cd "$BUILD" && cpack -G DEB >/dev/null)
ls "$BUILD"/accel_*.deb
