#!/usr/bin/env bash
# Installs every Debian package accel needs to build, run and test, then builds it.
# Usage: bash scripts/setup.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev \
 libmicrohttpd-dev libjansson-dev nettle-dev libsqlite3-dev libyaml-dev libcurl4-openssl-dev \
 sqlite3 curl python3 procps prometheus \
 lintian scdoc systemd man-db dpkg-dev etcd-server etcd-client \
 iproute2 util-linux podman runc catatonit slirp4netns libamdhip64-dev \
 docker.io docker-compose podman-compose"
. scripts/apt.sh
# shellcheck disable=SC2086
missing=$(dpkg_missing $PKGS)
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    # shellcheck disable=SC2086
    apt_install $missing
    # Debian's etcd-server starts a system etcd on localhost:2379 when it is
    # installed; the tests start members of their own, so one installed
    # here is stopped again (docs/cluster.md sets up a real one)
    if echo " $missing " | grep -q " etcd-server " && [ -d /run/systemd/system ]; then
        $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
        echo "setup: stopped and disabled the etcd service Debian's etcd-server started (accel's tests run their own members; docs/cluster.md sets up a cluster)"
    fi
    # likewise Debian's docker.io starts a system dockerd (with its bridge
    # and iptables chains): test_docker runs a dockerd of its own
    if echo " $missing " | grep -q " docker.io " && [ -d /run/systemd/system ]; then
        $SUDO systemctl disable --now docker.socket docker >/dev/null 2>&1 || true
        echo "setup: stopped and disabled the docker service Debian's docker.io started (test_docker runs its own dockerd; docs/containers.md registers accel-runc with a system one)"
    fi
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${ACCEL_CMAKE_FLAGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
