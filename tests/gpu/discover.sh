#!/bin/sh
# SPDX-License-Identifier: MIT
#
# discover.sh: what acceld discovers on this machine through the real NVML
# (SPEC 8.1) and, for AMD and Intel GPUs, the real amdgpu/i915/xe sysfs
# (docs/internals/discovery.md). It starts acceld with NO inventory in a temporary data
# directory, then prints `accelctl gpu status`, GET /api/compute-resources and
# GET /api/gpu/list, and stops acceld. Run it on a machine with an NVIDIA GPU
# and driver; on a machine without one it says so plainly (and exits 0, since
# saying so is the expected outcome there). Not run by CTest.
#
#   tests/gpu/discover.sh [BUILD_DIR]        (default: build)
#
# Exit status: 0 done, 1 acceld did not start or a request failed.
set -u

BUILD=${1:-${ACCEL_BUILD_DIR:-build}}
ACCELD=$BUILD/acceld
ACCELCTL=$BUILD/accelctl
for b in "$ACCELD" "$ACCELCTL"; do
    if [ ! -x "$b" ]; then
        echo "discover.sh: $b is not built (cmake --build $BUILD)" >&2
        exit 1
    fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/accel-discover.XXXXXX")
DATA=$TMP/data
PID=
cleanup() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# a free port: let acceld pick one and read it back
"$ACCELD" --data-dir "$DATA" --listen 127.0.0.1:0 >"$TMP/acceld.log" 2>&1 &
PID=$!
i=0
while [ ! -s "$DATA/acceld.port" ] || [ ! -s "$DATA/admin.token" ]; do
    i=$((i + 1))
    if [ "$i" -gt 200 ] || ! kill -0 "$PID" 2>/dev/null; then
        echo "discover.sh: acceld did not start:" >&2
        cat "$TMP/acceld.log" >&2
        exit 1
    fi
    sleep 0.05
done
PORT=$(cat "$DATA/acceld.port")
URL=http://127.0.0.1:$PORT
CTL="$ACCELCTL --server $URL --data-dir $DATA"
# the reconciler's first pass refreshes what the start-up scan found
sleep 1

echo "== machine: $(uname -nrm)"
if command -v nvidia-smi >/dev/null 2>&1; then
    echo "== nvidia-smi -L"
    nvidia-smi -L 2>&1
else
    echo "== nvidia-smi: not installed"
fi
echo
echo "== accelctl gpu status"
$CTL gpu status || exit 1
echo
echo "== GET /api/compute-resources"
$CTL -o json list || exit 1
echo
echo "== GET /api/gpu/list"
TOKEN=$(cat "$DATA/admin.token")
if command -v curl >/dev/null 2>&1; then
    curl -sS -H "Authorization: Bearer $TOKEN" "$URL/api/gpu/list" || exit 1
    echo
else
    python3 - "$URL" "$TOKEN" <<'EOF' || exit 1
import sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/api/gpu/list",
                             headers={"Authorization": "Bearer " + sys.argv[2]})
print(urllib.request.urlopen(req, timeout=10).read().decode())
EOF
fi
echo
if $CTL -o json gpu status | grep -q '"loaded": true'; then
    n=$($CTL -o json gpu status | grep -c '"mode": "nvidia"')
    echo "RESULT: NVML loaded; $n NVIDIA GPU(s) discovered on this node."
else
    echo "RESULT: NO NVIDIA GPU: NVML could not be used on this machine" \
         "(see Status above); acceld runs with the CPU fallback device."
fi
echo "== acceld log"
cat "$TMP/acceld.log"
