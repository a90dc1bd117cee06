#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# shim_check.sh: libaccelshim.so against the REAL driver (opt-in, needs an
# NVIDIA GPU; not run by CTest). Builds small CUDA programs with nvcc
# (driver API and runtime API), runs them under the shim with a 4 GiB quota
# and checks: the reported total is 4 GiB, allocations within it work, the
# first beyond it fails with out-of-memory, two processes share one quota,
# and the launch overhead against native. With PyTorch importable, repeats
# the checks with torch. Prints "N passed, N failed"; exit 0 only if all
# passed.
#
# Usage: tests/gpu/shim_check.sh [path/to/libaccelshim.so]
#        SHIM_CHECK_COMPILE_ONLY=1 tests/gpu/shim_check.sh   (no GPU needed)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
shim=${1:-$root/build/src/shim/libaccelshim.so}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
work=$(mktemp -d /tmp/accel-shim-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }

cat > "$work/drv.c" <<'C'
/* Driver API: total/free under the quota, fill to the quota, one beyond. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    CUdevice dev; CUcontext ctx; size_t fr, tot; CUdeviceptr p[64];
    int n = 0; size_t chunk = 256u << 20;
    const char *mode = argc > 1 ? argv[1] : "info";
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx)) { printf("init failed\n"); return 2; }
    cuMemGetInfo(&fr, &tot);
    printf("total %zu free %zu\n", tot, fr);
    if (strcmp(mode, "fill") == 0 || strcmp(mode, "hold") == 0) {
        size_t want = argc > 2 ? strtoull(argv[2], 0, 0) : 0;
        while (n < 64 && (want == 0 || (size_t)n * chunk < want)) {
            CUresult rc = cuMemAlloc(&p[n], chunk);
            if (rc != CUDA_SUCCESS) { printf("refused at %zu rc %d\n", (size_t)n * chunk, rc); break; }
            n++;
        }
        printf("held %zu\n", (size_t)n * chunk);
        fflush(stdout);
        if (strcmp(mode, "hold") == 0) sleep(5);
    }
    return 0;
}
C
cat > "$work/rt.cu" <<'C'
// Runtime API (reaches the driver through cuGetProcAddress): quota view,
// fill, out-of-memory, and launch overhead.
#include <cstdio>
#include <cstring>
#include <chrono>
__global__ void k() {}
int main(int argc, char **argv)
{
    size_t fr, tot; void *p[64]; int n = 0;
    cudaMemGetInfo(&fr, &tot);
    printf("total %zu free %zu\n", tot, fr);
    if (argc > 1 && strcmp(argv[1], "fill") == 0) {
        while (n < 64) {
            cudaError_t e = cudaMalloc(&p[n], 256u << 20);
            if (e != cudaSuccess) { printf("refused at %zu %s\n", (size_t)n << 28, cudaGetErrorName(e)); break; }
            n++;
        }
        printf("held %zu\n", (size_t)n << 28);
    }
    if (argc > 1 && strcmp(argv[1], "launch") == 0) {
        k<<<1, 1>>>(); cudaDeviceSynchronize();
        const int N = 200000;
        auto t = std::chrono::steady_clock::now();
        for (int i = 0; i < N; i++) k<<<1, 1>>>();
        cudaDeviceSynchronize();
        double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count() / N;
        printf("launch_ns %.1f\n", ns);
    }
    return 0;
}
C

inc=$(dirname "$nvcc")/../include
check "nvcc builds the driver-API program" \
    "$nvcc" -o "$work/drv" "$work/drv.c" -I"$inc" -lcuda
check "nvcc builds the runtime-API program" \
    "$nvcc" -o "$work/rt" "$work/rt.cu"
if [ "${SHIM_CHECK_COMPILE_ONLY:-0}" = 1 ]; then
    echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; exit
fi
if ! [ -r "$shim" ]; then bad "shim library at $shim"; echo "$passed passed, $failed failed"; exit 1; fi

Q=$((4 << 30))
export ACCEL_APP=shim-check-$$ XDG_RUNTIME_DIR=$work
under() { LD_PRELOAD=$shim ACCEL_MEMORY_LIMIT=4Gi "$@"; }
total_of() { sed -n 's/^total \([0-9]*\).*/\1/p' | head -1; }
held_of() { sed -n 's/^held \([0-9]*\).*/\1/p' | head -1; }

out=$(under "$work/drv" info); echo "$out"
check "driver API: total is 4 GiB" [ "$(echo "$out" | total_of)" = "$Q" ]
out=$(under "$work/drv" fill); echo "$out"
check "driver API: 4 GiB fit, the next 256 MiB is refused with OOM (rc 2)" \
    bash -c "echo '$out' | grep -q 'refused at $Q rc 2'"
out=$(under "$work/rt" info); echo "$out"
check "runtime API: total is 4 GiB" [ "$(echo "$out" | total_of)" = "$Q" ]
out=$(under "$work/rt" fill); echo "$out"
check "runtime API: refused exactly at 4 GiB with cudaErrorMemoryAllocation" \
    bash -c "echo '$out' | grep -q 'refused at $Q cudaErrorMemoryAllocation'"
# two processes, one quota: the first holds 3 GiB, the second gets only 1 GiB
under "$work/drv" hold $((3 << 30)) > "$work/a.out" &
apid=$!; sleep 2
out=$(under "$work/drv" fill); echo "$out"
wait $apid
check "two processes share one quota (second gets 1 GiB)" \
    [ "$(echo "$out" | held_of)" = "$((1 << 30))" ]
nat=$("$work/rt" launch | sed -n 's/launch_ns //p')
shm=$(under "$work/rt" launch | sed -n 's/launch_ns //p')
echo "launch: native ${nat} ns, under the shim ${shm} ns"
check "launch measured" [ -n "$nat" ] && [ -n "$shm" ]

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    cat > "$work/t.py" <<'PY'
import sys, torch
free, total = torch.cuda.mem_get_info()
print("total", total)
xs = []
try:
    while True:
        xs.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError:
    print("oom after", len(xs) * (256 << 20))
PY
    out=$(under python3 "$work/t.py"); echo "$out"
    check "torch: total is 4 GiB" bash -c "echo '$out' | grep -q '^total $Q'"
    check "torch: OutOfMemoryError within 4 GiB" \
        bash -c "echo '$out' | grep -q '^oom after'"
else
    echo "skip torch (python3 -c 'import torch' with CUDA not available)"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
