#!/usr/bin/env bash
# Installs every Debian package accel needs to build, run and test, then builds it.
# Usage: bash scripts/setup.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev \
 libmicrohttpd-dev libjansson-dev nettle-dev libsqlite3-dev libyaml-dev libcurl4-openssl-dev \
 sqlite3 curl python3 procps prometheus \
 lintian scdoc systemd man-db dpkg-dev etcd-server etcd-client"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${ACCEL_CMAKE_FLAGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
