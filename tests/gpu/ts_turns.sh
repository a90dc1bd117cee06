#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# ts_turns.sh: issue 49, item 5 -- time slicing on a real GPU: the handoff
# and a switch's paging measured, so that the stand-in driver's figures
# (tests/shim/fake_cuda.c: FAKE_CUDA_LINK_GBPS; the broker's
# BROKER_DEFAULT_LINK_BPS) can be corrected by them. About 90 s of device
# time; every process under `timeout`.
#
# Usage: tests/gpu/ts_turns.sh [--build DIR] [--compile-only]
#   --build DIR     the CMake build (default: build): libaccelshim.so and
#                   tests/shim/ts_broker
#   --compile-only  no GPU: bash syntax, ts_handoff.py's self-test, and
#                   ts_turns.cu built when nvcc is present
# env: NVCC, GPUCHECK_ARCH (sm_90)
#
# What it prints (one "figure" line each; docs/internals/timeslice.md says
# what to do with them):
#   - link: managed memory moved to the host and back by prefetch (GB/s):
#     the rate a switch pages at when the apps pass the card (never
#     oversubscribed here: oversubscribing managed memory can hang a GPU;
#     at most a quarter of the free memory is used)
#   - handoff: two apps (a busy one, 200 us kernels; a bursty one, 20 x
#     50 us, a synchronize, a host gap of 10 ms and of 1 ms) under the shim
#     and a ts_broker with the defaults: the broker's handoff p50/p99 and
#     the device's idle gap at each handoff (%globaltimer), the bursty
#     app's rate against its solo rate, the busy app's share of the card,
#     and the same two without the shim
# Exit status: 0 when every measurement ran, 1 when one failed, 77 when
# there is no GPU or no nvcc.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
compile_only=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift ;;
    --compile-only) compile_only=1 ;;
    *) echo "usage: $0 [--build DIR] [--compile-only]" >&2; exit 2 ;;
    esac
    shift
done
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
for v in $(env | sed -n 's/^\(ACCEL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-tsturns.XXXXXX")
bpid=""
cleanup() {
    [ -n "$bpid" ] && kill "$bpid" 2>/dev/null && wait "$bpid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
failed=0
fig() { echo "figure $*"; }

out=$(python3 "$here/ts_handoff.py" --selftest 2>&1)
[ "$out" = "selftest ok" ] || { echo "ts_handoff.py self-test: $out"; failed=1; }

nvcc=${NVCC:-$(command -v nvcc || true)}
if [ -z "$nvcc" ]; then
    for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
        [ -x "$c" ] && nvcc=$c && break
    done
fi
if [ -z "$nvcc" ] || ! [ -x "$nvcc" ]; then
    echo "skip: no nvcc (set NVCC=)"
    [ "$failed" = 0 ] && exit 77 || exit 1
fi
if ! timeout 120 "$nvcc" -O2 -arch="${GPUCHECK_ARCH:-sm_90}" -I"$here" \
        -o "$work/ts_turns" "$here/ts_turns.cu" > "$work/nvcc.log" 2>&1; then
    echo "nvcc: $(head -3 "$work/nvcc.log" | tr '\n' ' ')"
    exit 1
fi
echo "ok: nvcc builds ts_turns.cu"
[ "$compile_only" = 1 ] && exit "$failed"

shim=$build/src/shim/libaccelshim.so
broker=$build/tests/shim/ts_broker
for f in "$shim" "$broker"; do
    [ -e "$f" ] || { echo "missing $f (build first)"; exit 1; }
done
free_mib=$(timeout 20 nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
if [ -z "$free_mib" ]; then
    echo "skip: no GPU (nvidia-smi answers nothing)"
    exit 77
fi
fig "device $(timeout 20 nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader -i 0 | head -1)"
T() { timeout -k 5 "$@"; }

# 1. the link a switch pages over
mib=$((free_mib / 4)); [ "$mib" -gt 4096 ] && mib=4096
if T 60 "$work/ts_turns" migrate "$mib" > "$work/migrate.out" 2>&1; then
    fig "link: $mib MiB managed, prefetch $(cat "$work/migrate.out")"
else
    echo "migrate failed: $(head -2 "$work/migrate.out" | tr '\n' ' ')"; failed=1
fi

# 2. handoffs: the bursty app beside the busy one, with and without the shim
val() { sed -n "s/.*$1 \([^ ]*\).*/\1/p" "$2" | head -1; }
solo() { # GAP_US -> units of a solo bursty run of 3 s
    T 30 "$work/ts_turns" burst 3 "$1" "$work/solo.iv" > "$work/solo.out" 2>&1
    val units "$work/solo.out"
}
pair() { # GAP_US SHIM(0|1) -> files pair.{a,b}.{out,iv}, broker.out
    local gap=$1 use=$2 sock=$work/ts.sock pre=""
    if [ "$use" = 1 ]; then
        rm -f "$sock"
        T 60 "$broker" "$sock" 30 1000us > "$work/broker.out" 2>&1 &
        bpid=$!
        for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
        pre=$shim
    fi
    env LD_PRELOAD="$pre" ACCEL_TS_SOCKET_0="$sock" ACCEL_APP=busy \
        timeout -k 5 30 "$work/ts_turns" busy 3.5 "$work/pair.b.iv" > "$work/pair.b.out" 2>&1 &
    local b=$!
    sleep 0.2
    env LD_PRELOAD="$pre" ACCEL_TS_SOCKET_0="$sock" ACCEL_APP=bursty \
        timeout -k 5 30 "$work/ts_turns" burst 3 "$gap" "$work/pair.a.iv" > "$work/pair.a.out" 2>&1
    wait "$b"
    if [ -n "$bpid" ]; then
        kill "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null; bpid=""
    fi
}
for gap in 10000 1000; do
    s=$(solo "$gap")
    for use in 1 0; do
        pair "$gap" "$use"
        u=$(val units "$work/pair.a.out")
        if [ -z "$u" ] || [ -z "$s" ] || ! [ -s "$work/pair.a.iv" ] || ! [ -s "$work/pair.b.iv" ]; then
            echo "gap $gap us, shim $use: a run failed: $(head -1 "$work/pair.a.out") / $(head -1 "$work/pair.b.out")"
            failed=1
            continue
        fi
        j=$(python3 "$here/ts_handoff.py" "$work/pair.a.iv" "$work/pair.b.iv")
        fig "gap $((gap / 1000)) ms, $([ "$use" = 1 ] && echo "shim + broker (defaults)" || echo "no layer"):" \
            "bursty/solo $(awk -v a="$u" -v b="$s" 'BEGIN { if (b > 0) printf "%.2f", a / b }')," \
            "bursty p99 wait $(val p99_wait_us "$work/pair.a.out") us, device: $j" \
            "$([ "$use" = 1 ] && head -1 "$work/broker.out")"
    done
done
echo "ts_turns: $([ "$failed" = 0 ] && echo "all measured" || echo "some measurements failed")"
exit "$failed"
