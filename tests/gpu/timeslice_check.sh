#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# timeslice_check.sh: time slicing against the REAL driver (opt-in, needs an
# NVIDIA GPU; not run by CTest). Two processes whose working sets together
# exceed the card's memory (each TS_FRACTION of it, default 0.6) both run
# to the end with correct results under time slicing, and their combined
# throughput is compared with each running alone.
#
#   - builds ts_work.cu with nvcc (runtime API: cudaMalloc, kernels)
#   - starts the time-slice broker of acceld on its own (ts_broker, built
#     with the shim tests; SOCKET QUANTUM_MS IDLE_MS) and runs the programs
#     under libaccelshim.so with ACCEL_TS_SOCKET_0 (standalone time slicing:
#     cudaMalloc becomes managed memory, so the waiting app's pages can
#     leave the card)
#   - alone, natively and under the shim; then two apps together under the
#     shim; then (for contrast, not a check) two together without it
#   - each run fills its buffer on the GPU, applies PASSES read-modify-write
#     passes (x = x * A + C over uint32) and checks every element on the GPU
#     against the closed form, so a lost or stale page shows as a mismatch
#
# Usage: tests/gpu/timeslice_check.sh [BUILD_DIR]       (default: build)
#   env: TS_FRACTION (0.6) TS_PASSES (60) TS_QUANTUM_MS (4000, acceld's
#        oversubscribed quantum) TS_IDLE_MS (100) NVCC
#        TS_CHECK_COMPILE_ONLY=1: only build the program (no GPU needed)
# Prints "N passed, N failed"; exit 0 only if all passed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
shim=$build/src/shim/libaccelshim.so
broker=$build/tests/shim/ts_broker
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
frac=${TS_FRACTION:-0.6}
passes=${TS_PASSES:-60}
quantum=${TS_QUANTUM_MS:-4000}
idle=${TS_IDLE_MS:-100}
work=$(mktemp -d /tmp/accel-ts-check.XXXXXX)
bpid=
cleanup() { [ -n "$bpid" ] && kill "$bpid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; exit; }

cat > "$work/ts_work.cu" <<'CU'
// ts_work info | run BYTES PASSES SEED
// info: "total <bytes> free <bytes>" of device 0 (exit 3 without a GPU).
// run:  cudaMalloc BYTES, fill x[i] = i * SEED + 1, PASSES times
//       x = x * A + C, then count on the GPU the elements that differ from
//       the closed form x = AK * x0 + CK; prints "ok ..." or "WRONG ...".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
static const uint32_t A = 1664525u, C = 1013904223u;
__global__ void fill(uint32_t *x, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = (uint32_t)i * seed + 1u;
}
__global__ void step(uint32_t *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = x[i] * A + C;
}
__global__ void verify(const uint32_t *x, size_t n, uint32_t seed,
                       uint32_t ak, uint32_t ck, unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        mine += x[i] != ak * ((uint32_t)i * seed + 1u) + ck;
    if (mine)
        atomicAdd(bad, mine);
}
static double now()
{
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}
#define TRY(call)                                                         \
    do {                                                                  \
        cudaError_t e_ = (call);                                          \
        if (e_ != cudaSuccess) {                                          \
            printf("error %s at %s\n", cudaGetErrorName(e_), #call);      \
            return 2;                                                     \
        }                                                                 \
    } while (0)
int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device\n");
        return 3;
    }
    if (argc > 1 && strcmp(argv[1], "info") == 0) {
        size_t fr = 0, tot = 0;
        TRY(cudaMemGetInfo(&fr, &tot));
        printf("total %zu free %zu\n", tot, fr);
        return 0;
    }
    if (argc < 5 || strcmp(argv[1], "run") != 0) {
        printf("usage: ts_work info | run BYTES PASSES SEED\n");
        return 2;
    }
    size_t bytes = strtoull(argv[2], 0, 10), n = bytes / 4;
    int passes = atoi(argv[3]);
    uint32_t seed = (uint32_t)strtoul(argv[4], 0, 10), ak = 1, ck = 0;
    unsigned long long *bad, nbad = 0;
    uint32_t *x;
    for (int p = 0; p < passes; p++) { // x -> A x + C, composed
        ck = ck * A + C;
        ak = ak * A;
    }
    int grid = 0;
    cudaDeviceGetAttribute(&grid, cudaDevAttrMultiProcessorCount, 0);
    grid *= 8;
    double t0 = now();
    TRY(cudaMalloc(&x, bytes));
    TRY(cudaMalloc(&bad, sizeof *bad));
    TRY(cudaMemset(bad, 0, sizeof *bad));
    fill<<<grid, 256>>>(x, n, seed);
    for (int p = 0; p < passes; p++)
        step<<<grid, 256>>>(x, n);
    TRY(cudaDeviceSynchronize());
    double t1 = now();
    verify<<<grid, 256>>>(x, n, seed, ak, ck, bad);
    TRY(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
    double gb = (double)bytes * 2 * (passes + 1) / 1e9;
    printf("%s bytes %zu passes %d seconds %.3f throughput_GBps %.1f "
           "mismatches %llu\n", nbad ? "WRONG" : "ok", bytes, passes,
           t1 - t0, gb / (t1 - t0), nbad);
    return nbad ? 1 : 0;
}
CU

check "nvcc builds ts_work.cu" "$nvcc" -O2 -o "$work/ts_work" "$work/ts_work.cu"
if [ "${TS_CHECK_COMPILE_ONLY:-0}" = 1 ]; then finish; fi
[ -x "$work/ts_work" ] || finish

info=$("$work/ts_work" info 2>&1)
if [ $? -ne 0 ]; then
    bad "an NVIDIA GPU is visible (ts_work info: ${info:-no output}); this check needs one"
    finish
fi
echo "$info"
for f in "$shim" "$broker"; do
    if ! [ -e "$f" ]; then
        bad "$f is built (cmake --build $build; ts_broker comes with the shim tests)"
        finish
    fi
done
total=$(echo "$info" | sed -n 's/^total \([0-9]*\).*/\1/p')
bytes=$(awk -v t="$total" -v f="$frac" 'BEGIN { printf "%d", int(t * f / 1048576) * 1048576 }')
echo "card: $total bytes; each process: $bytes bytes ($frac), together $((2 * bytes))"
check "the two working sets together exceed the card" [ $((2 * bytes)) -gt "$total" ]

tput_of() { sed -n 's/.*throughput_GBps \([0-9.]*\).*/\1/p' "$1" | head -1; }

# 1. alone, natively
"$work/ts_work" run "$bytes" "$passes" 7 > "$work/native.out" 2>&1
rc=$?; cat "$work/native.out"
check "alone, native: correct results" [ $rc = 0 ]

# 2. the broker, then alone under the shim (managed memory, turn held)
sock=$work/ts.sock
"$broker" "$sock" "$quantum" "$idle" > "$work/broker.out" 2>&1 &
bpid=$!
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
check "broker listening on $sock" [ -S "$sock" ]
under() { env LD_PRELOAD="$shim" ACCEL_TS_SOCKET_0="$sock" ACCEL_APP="$1" "${@:2}"; }
under ts-a "$work/ts_work" run "$bytes" "$passes" 7 > "$work/alone.out" 2>&1
rc=$?; cat "$work/alone.out"
check "alone, time-sliced: correct results" [ $rc = 0 ]

# 3. two apps together under time slicing
t0=$(date +%s.%N)
under ts-a "$work/ts_work" run "$bytes" "$passes" 7 > "$work/a.out" 2>&1 &
apid=$!
under ts-b "$work/ts_work" run "$bytes" "$passes" 11 > "$work/b.out" 2>&1 &
bpid2=$!
wait $apid; arc=$?
wait $bpid2; brc=$?
t1=$(date +%s.%N)
cat "$work/a.out" "$work/b.out"
check "together, time-sliced: app a finished with correct results" [ $arc = 0 ]
check "together, time-sliced: app b finished with correct results" [ $brc = 0 ]
kill "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null; bpid=
echo "broker: $(cat "$work/broker.out")"

wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
gb=$(awk -v x="$bytes" -v p="$passes" 'BEGIN { printf "%.3f", x * 2 * (p + 1) / 1e9 }')
awk -v gb="$gb" -v w="$wall" -v n="$(tput_of "$work/native.out")" \
    -v s="$(tput_of "$work/alone.out")" 'BEGIN {
    c = 2 * gb / w
    printf "throughput: alone native %.1f GB/s, alone time-sliced %.1f GB/s, ", n, s
    printf "two together time-sliced %.1f GB/s combined (%.3f s wall for both)\n", c, w
    if (n > 0) printf "combined / alone native = %.2f", c / n
    if (s > 0) printf ", combined / alone time-sliced = %.2f", c / s
    printf "\n" }'

# 4. contrast (not a check): both together without the shim
"$work/ts_work" run "$bytes" "$passes" 7 > "$work/na.out" 2>&1 &
apid=$!
"$work/ts_work" run "$bytes" "$passes" 11 > "$work/nb.out" 2>&1
wait $apid
echo "contrast, two together without time slicing: $(head -1 "$work/na.out") / $(head -1 "$work/nb.out")"
finish
