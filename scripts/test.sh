#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is needed,
# builds, runs every test (unit, integration, shim, browser), then builds again
# with AddressSanitizer + UndefinedBehaviorSanitizer and runs the C and
# integration tests under them. Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
bash scripts/check-banned.sh
bash scripts/setup.sh build
bash scripts/setup-web.sh
ctest --test-dir build --output-on-failure -j"$JOBS"
# Sanitizers: the preload-library tests need the ASan runtime loaded first,
# so under ASan the shim suite is left to the plain build above (STYLE 24).
ACCEL_CMAKE_FLAGS="-DACCEL_ASAN=ON -DACCEL_UBSAN=ON -DCMAKE_BUILD_TYPE=Debug" \
    bash scripts/setup.sh build-san
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-san --output-on-failure -j"$JOBS" -R '^(unit|integration)\.'
# The parsers under libFuzzer (clang), for a bounded time.
CC=clang ACCEL_CMAKE_FLAGS="-DACCEL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug" \
    bash scripts/setup.sh build-fuzz
mkdir -p build-fuzz/corpus && cp tests/fuzz/corpus/* build-fuzz/corpus/
build-fuzz/tests/fuzz/fuzz_parsers -max_total_time=60 -max_len=4096 \
    -rss_limit_mb=2048 build-fuzz/corpus
echo "fuzz: 60 s of parser fuzzing found nothing"
