#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# run-all.sh: the GPU check that can see an escape (issue 35, item 4).
# On a machine with an NVIDIA GPU, its driver, nvcc and (optionally)
# PyTorch, it runs libaccelshim.so standalone (ACCEL_MEMORY_LIMIT=4Gi)
# under real programs and judges it by the device's memory as the DRIVER
# counts it, read from outside the app (meter.c: NVML through dlopen, never
# under the preload), not by what the shim says. Prints one line a check,
# "N passed, N failed, N skipped", and writes the results table into
# docs/gpu-results.md. Each case and what it proves: docs/gpu-results.md.
#
# Usage: tests/gpu/run-all.sh [--compile-only] [--build DIR] [--results FILE]
#   --compile-only  no GPU needed (CTest runs it): shell syntax, Python,
#                   the C programs built against the shim's own declarations,
#                   the CUDA programs built when nvcc is present, and the
#                   programs that can run on tests/shim's stand-in driver
#                   run there, so that the judging logic here is exercised
#   --build DIR     the CMake build (default: build), for libaccelshim.so,
#                   tests/shim/ts_broker and the stand-in drivers
#   --results FILE  where the results go (default docs/gpu-results.md);
#                   never written in compile-only mode
# env: NVCC, CC, GPUCHECK_ARCH (sm_90), GPUCHECK_NVML_INDEX (0)
# Exit status 0 only if nothing failed.
#
# Safety on a lent GPU: every process runs under `timeout`; managed memory
# (what a time-sliced app's cudaMalloc becomes, and cudaMallocManaged) stays,
# all apps together, under half of what NVML reports free at the start.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
compile_only=0
build=$root/build
results=$root/docs/gpu-results.md
while [ $# -gt 0 ]; do
    case "$1" in
    --compile-only) compile_only=1 ;;
    --build) build=$2; shift ;;
    --results) results=$2; shift ;;
    *) echo "usage: $0 [--compile-only] [--build DIR] [--results FILE]" >&2; exit 2 ;;
    esac
    shift
done
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
# the shim runs standalone here: no setting of the caller's (a time-slice
# socket would turn cudaMalloc into managed memory) reaches the cases
for v in $(env | sed -n 's/^\(ACCEL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

MIB=$((1 << 20))
Q=$((4 << 30))            # the quota every case runs under
NEAR=$((256 * MIB))       # a refusal must come within this of the quota
TOL=$((16 * MIB))         # what a charge may fall short of the device's count
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-gpucheck.XXXXXX")
bin=$work/bin
mkdir -p "$bin" "$work/xdg"
bg_pids=""
cleanup() {
    for p in $bg_pids; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

passed=0 failed=0 skipped=0
rows=$work/rows.md
: > "$rows"
row() { printf '| %s | %s | %s |\n' "$1" "$2" "${3//|/\\|}" >> "$rows"; }
ok() { echo "ok   $1${2:+ ($2)}"; passed=$((passed + 1)); row "$1" pass "${2:-}"; }
bad() { echo "FAIL $1${2:+ ($2)}"; failed=$((failed + 1)); row "$1" "**FAIL**" "${2:-}"; }
skip() { echo "skip $1: skipped: $2"; skipped=$((skipped + 1)); row "$1" skipped "$2"; }
# verdict NAME FIGURES CMD...: pass when CMD succeeds
verdict() { local _n=$1 _f=$2; shift 2; if "$@"; then ok "$_n" "$_f"; else bad "$_n" "$_f"; fi; }
# verdict_if NAME FIGURES 'CONDITION': pass when the shell condition (a
# string, evaluated here, so it may use && and the caller's variables) holds
verdict_if() { if eval "$3" 2>/dev/null; then ok "$1" "$2"; else bad "$1" "$2"; fi; }
# num VALUE: VALUE when it is an integer, else 0 (for sums of figures)
num() { case "$1" in '' | *[!0-9-]*) echo 0 ;; *) echo "$1" ;; esac; }
mib() { case "${1:-}" in '' | *[!0-9-]*) echo "?" ;; *) awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }' ;; esac; }
# field KEY FILE: the word after KEY on the first line that has it
field() { sed -n "s/.*\\<$1 \\([^ ]*\\).*/\\1/p" "$2" | head -1; }
# T SECONDS CMD...: CMD (a program or one of the functions below, which
# then runs in a child bash; what they use is exported) with a time limit
T() {
    local s=$1; shift
    if declare -F "$1" > /dev/null; then
        timeout -k 5 "$s" bash -c "$(declare -f "$1"); \"\$@\"" _ "$@"
    else
        timeout -k 5 "$s" "$@"
    fi
}

# ---------------------------------------------------------------- compile
echo "== compile"
for f in "$here"/*.sh; do
    shell=bash
    head -1 "$f" | grep -q '^#!/bin/sh' && shell=sh
    verdict "$shell -n $(basename "$f")" "" "$shell" -n "$f"
done
if command -v python3 >/dev/null 2>&1; then
    for f in "$here"/*.py; do
        verdict "py_compile $(basename "$f")" "" python3 -c \
            'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
            "$f" "$work/$(basename "$f")c"
    done
    out=$(python3 "$here/ts_overlap.py" --selftest 2>&1)
    verdict "ts_overlap.py judges overlapping turns as failures (self-test)" "$out" \
        [ "$out" = "selftest ok" ]
else
    skip "Python checks" "no python3"
fi

cc=${CC:-cc}
cflags="-std=c11 -O2 -Wall -Wextra -Werror -I$root/src -I$here"
for p in names meter probe drv; do
    if out=$("$cc" $cflags -o "$bin/$p" "$here/$p.c" -ldl 2>&1); then
        ok "$cc builds $p.c (against src/shim/cuda_types.h)"
    else
        bad "$cc builds $p.c" "$(echo "$out" | head -3 | tr '\n' ' ')"
    fi
done

nvcc=${NVCC:-$(command -v nvcc || true)}
if [ -z "$nvcc" ]; then
    for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
        [ -x "$c" ] && nvcc=$c && break
    done
fi
cuda_built=0
if [ -n "$nvcc" ] && [ -x "$nvcc" ]; then
    echo "nvcc: $nvcc"
    cudadir=$(cd "$(dirname "$nvcc")/.." && pwd)
    # the toolkit's cuBLAS, for the context-with-cuBLAS case (rt cublas)
    GPUCHECK_CUBLAS=$(ls "$cudadir"/lib64/libcublas.so.* "$cudadir"/targets/*/lib/libcublas.so.* 2>/dev/null | head -1)
    export GPUCHECK_CUBLAS
    arch=${GPUCHECK_ARCH:-sm_90}
    nv="$nvcc -O2 -arch=$arch -I$here"
    lcuda="-L$cudadir/lib64/stubs -L$cudadir/targets/x86_64-linux/lib/stubs -lcuda -ldl"
    # name|command; built side by side
    builds=(
        "rt|$nv -o $bin/rt $here/rt.cu $lcuda"
        "rt_ptds|$nv --default-stream per-thread -o $bin/rt_ptds $here/rt.cu $lcuda"
        "probe_rt|$nv -x cu -DPROBE_RUNTIME -o $bin/probe_rt $here/probe.c -ldl"
    )
    for b in "${builds[@]}"; do
        (eval "${b#*|}" > "$work/nvcc.${b%%|*}.log" 2>&1; echo $? > "$work/nvcc.${b%%|*}.rc") &
    done
    wait
    cuda_built=1
    for b in "${builds[@]}"; do
        n=${b%%|*}
        if [ "$(cat "$work/nvcc.$n.rc")" = 0 ]; then
            ok "nvcc builds $n"
        else
            cuda_built=0
            bad "nvcc builds $n" "$(head -3 "$work/nvcc.$n.log" | tr '\n' ' ')"
        fi
    done
else
    skip "nvcc builds rt.cu, rt.cu --default-stream per-thread, probe.c -DPROBE_RUNTIME" \
        "no nvcc (no CUDA toolkit on this machine; set NVCC=)"
fi

shim=$build/src/shim/libaccelshim.so
broker=$build/tests/shim/ts_broker
fake=$build/tests/shim/fakelib
meter=$bin/meter
run_id=$$
export GPUCHECK_METER=$meter XDG_RUNTIME_DIR=$work/xdg shim work run_id

# under APP CMD...: CMD under the shim, standalone, 4 GiB, its own ledger
under() {
    local app=$1; shift
    env LD_PRELOAD="$shim" ACCEL_MEMORY_LIMIT=4Gi ACCEL_APP="gc-$app-$run_id" \
        ACCEL_LOG="$work/$app.shimlog" "$@"
}
native() { env -u LD_PRELOAD "$@"; }

# watch_start / watch_stop: the device's used memory sampled every 5 ms by
# the meter (outside every app, without the preload) between the two;
# watch_stop sets W_BASE, W_PEAK and W_DELTA (peak - base).
# settle: waits (5 s at most) until the device is back to what it used when
# the run began (a process's memory leaves the count a moment after it ends)
settle() {
    local u
    [ -n "${used0:-}" ] || return 0
    for _ in $(seq 50); do
        u=$(env -u LD_PRELOAD "$meter" once | sed -n 's/^used \([0-9]*\).*/\1/p')
        [ -n "$u" ] && [ "$u" -le $((used0 + 64 * MIB)) ] && return 0
        sleep 0.1
    done
    echo "    (the device still uses $(mib "$u"), $(mib "$used0") at the start)"
}
watch_start() {
    settle
    env -u LD_PRELOAD "$meter" watch > "$work/watch.out" 2>&1 &
    W_PID=$!
    bg_pids="$bg_pids $W_PID"
    for _ in $(seq 200); do grep -q '^base ' "$work/watch.out" && return 0; sleep 0.02; done
    return 1
}
watch_stop() {
    kill -TERM "$W_PID" 2>/dev/null
    wait "$W_PID" 2>/dev/null
    W_BASE=$(field base "$work/watch.out")
    W_PEAK=$(field peak "$work/watch.out")
    W_DELTA=-1
    [ -n "$W_BASE" ] && [ -n "$W_PEAK" ] && W_DELTA=$((W_PEAK - W_BASE))
}
# measured NAME SECONDS CMD...: CMD with its output in $work/NAME.out, the
# device watched around it; sets RC and W_*
measured() {
    local name=$1 secs=$2; shift 2
    watch_start || echo "(the meter did not start: $(cat "$work/watch.out"))"
    T "$secs" "$@" > "$work/$name.out" 2>&1
    RC=$?
    watch_stop
    sed 's/^/    /' "$work/$name.out"
    echo "    device: base $(mib "$W_BASE"), peak $(mib "$W_PEAK"), peak - base $(mib "$W_DELTA")"
}
# judge_fill NAME HELD: the quota held as the device counts it: the peak
# (context included) stays within 4 GiB and the refusal came within 256 MiB
# of it
judge_fill() {
    local name=$1 held=$2 fig
    fig="held by the app $(mib "$held"); device peak - base $(mib "$W_DELTA"); quota 4096 MiB; rc $RC"
    verdict_if "$name" "$fig" '[ "$RC" = 0 ] && [ "$W_DELTA" -ge 0 ] &&
        [ "$W_DELTA" -le "$Q" ] && [ "$W_DELTA" -ge $((Q - NEAR)) ]'
}

# probe_judge NAME NATIVE SHIM LOG: every lookup the driver answers
# natively gives the shim's address under the preload, or the shim said in
# its log (ACCEL_LOG) that the name went by unheld (a line naming it with
# "unheld", "not held", "escape", "unhooked" or "bypass")
probe_judge() {
    local name=$1 nat=$2 sh=$3 log=$4 n_nat n_sh esc held told=""
    n_nat=$(grep -c '^probe ' "$nat")
    n_sh=$(grep -c '^probe ' "$sh")
    # key: name version flags; native answered (rc 0, an address)
    awk '$1 == "probe" && $6 == 0 && $10 != "none" { print $2, $3, $4, $12 }' "$nat" | sort > "$work/p.nat"
    awk '$1 == "probe" { print $2, $3, $4, $10 }' "$sh" | sort > "$work/p.sh"
    join <(awk '{ print $1"/"$2"/"$3, $4 }' "$work/p.nat") \
         <(awk '{ print $1"/"$2"/"$3, $4 }' "$work/p.sh") > "$work/p.join"
    held=$(awk '$3 == "shim"' "$work/p.join" | wc -l)
    esc=$(awk '$3 != "shim" { printf "%s->%s(%s) ", $1, $3, $2 }' "$work/p.join")
    echo "    lookups: native $n_nat, under the shim $n_sh; answered natively $(wc -l < "$work/p.nat"), held $held"
    [ -n "$esc" ] && echo "    escaped (name/version/flags->owner(driver symbol)): $esc"
    for e in $esc; do
        e=${e%%/*}
        grep -Ei 'unheld|not held|escap|unhooked|bypass' "$log" 2>/dev/null | grep -qw "$e" &&
            told="$told $e"
    done
    [ -n "$told" ] && echo "    said unheld in ACCEL_LOG:$told"
    for e in $told; do esc=$(printf '%s\n' $esc | grep -v "^$e/" | tr '\n' ' '); done
    esc=${esc% }
    [ "$n_nat" -gt 0 ] || esc="nothing probed: $(grep -m1 -v '^probe ' "$nat")"
    local shown
    shown=
    [ -n "$esc" ] && shown=$(printf '%s\n' $esc | head -12 | tr '\n' ' ')
    [ "$(printf '%s\n' $esc | grep -c .)" -gt 12 ] && shown="$shown... ($(printf '%s\n' $esc | grep -c .) in all)"
    verdict_if "$name" "$(wc -l < "$work/p.nat") answered; held $held; said unheld:${told:- none}; escaped silently: ${shown:-none}" \
        '[ "$n_nat" -gt 0 ] && [ "$n_nat" = "$n_sh" ] && [ -z "$esc" ] &&
        [ "$(wc -l < "$work/p.join")" = "$(wc -l < "$work/p.nat")" ]'
}

names_list() {
    if ! T 20 "$bin/names" > "$work/names.txt"; then
        bad "the hooked names come from src/shim/symbols.h"; return 1
    fi
    local n
    n=$(awk '$1 == "CUDA" && $2 == 1' "$work/names.txt" | wc -l)
    verdict_if "the hooked names come from src/shim/symbols.h" "$n hooked CUDA names" \
        '[ "$n" -gt 0 ] && grep -q "^CUDA 1 cuMemAlloc_v2\$" "$work/names.txt"'
}

# ----------------------------------------------------- the stand-in driver
stand_in() {
    echo "== the stand-in driver (tests/shim's fake libcuda and NVML)"
    for f in "$shim" "$fake/libcuda.so.1" "$fake/libnvidia-ml.so.1"; do
        if ! [ -e "$f" ]; then
            skip "runs on the stand-in driver" "$f is not built (cmake --build $build)"
            return
        fi
    done
    [ -x "$bin/names" ] && [ -x "$meter" ] && [ -x "$bin/probe" ] && [ -x "$bin/drv" ] || {
        skip "runs on the stand-in driver" "the C programs did not build"; return; }
    if readelf -d "$shim" 2>/dev/null | grep -Eq 'NEEDED.*lib(a|t)san'; then
        skip "runs on the stand-in driver" "this shim is built with a sanitizer (its runtime must load first; the plain build runs these)"
        return
    fi
    export LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # the stand-in's contexts cost nothing here, so that the figures below
    # are the allocations' (its primary context is made current, as a real
    # driver needs: drv.c)
    export FAKE_CUDA_SHM=$work/fake.shm FAKE_CUDA_TOTAL=$((16 << 30)) FAKE_CUDA_CTX_BYTES=0
    names_list || return

    T 20 native "$meter" info > "$work/minfo.out" 2>&1
    verdict "meter reads the device through NVML (stand-in)" \
        "total $(mib "$(field total "$work/minfo.out")")" \
        [ "$(field total "$work/minfo.out")" = "$FAKE_CUDA_TOTAL" ]
    T 20 under meter "$meter" once > "$work/munder.out" 2>&1
    verdict "meter refuses to run under the shim (it never reads the shim's view)" \
        "exit $?" grep -q 'must run without libaccelshim' "$work/munder.out"

    T 60 native "$bin/probe" "$work/names.txt" > "$work/probe.nat" 2>&1
    T 60 under probe "$bin/probe" "$work/names.txt" > "$work/probe.shim" 2>&1
    probe_judge "cuGetProcAddress_v2 of every hooked name x version x flag is held (stand-in)" \
        "$work/probe.nat" "$work/probe.shim" "$work/probe.shimlog"

    measured fake-fill 60 under fake-fill "$bin/drv" fill 64 300
    judge_fill "driver API: filled to the quota, device peak within it (stand-in)" \
        "$(field held "$work/fake-fill.out")"
    rm -f "$FAKE_CUDA_SHM"

    watch_start
    T 60 under share "$bin/drv" fill 64 1500 3072 > "$work/share-a.out" 2>&1 &
    local a=$!
    sleep 0.5
    T 60 under share "$bin/drv" fill 64 300 > "$work/fake-share.out" 2>&1
    RC=$?
    wait "$a"
    watch_stop
    verdict_if "two processes of one app share one quota (stand-in)" \
        "second got $(mib "$(field held "$work/fake-share.out")"); device peak - base $(mib "$W_DELTA")" \
        '[ "$(field held "$work/fake-share.out")" = $((1 << 30)) ] && [ "$W_DELTA" -le "$Q" ]'
    rm -f "$FAKE_CUDA_SHM"

    T 60 under fake-vmm "$bin/drv" vmm 1024 64 100 > "$work/fake-vmm.out" 2>&1
    if [ $? = 77 ]; then
        skip "llama.cpp VMM pattern (stand-in)" "$(sed -n 's/^skipped: //p' "$work/fake-vmm.out")"
    else
        rm -f "$FAKE_CUDA_SHM"
        measured fake-vmm 60 under fake-vmm "$bin/drv" vmm 1024 64 300
        judge_fill "llama.cpp VMM pattern then cuMemAlloc to the quota (stand-in)" \
            "$(( $(num "$(field vmm "$work/fake-vmm.out")") + $(num "$(field held "$work/fake-vmm.out")") ))"
    fi
    rm -f "$FAKE_CUDA_SHM"

    local n s
    n=$(T 60 native "$bin/drv" allocfree 20000 | sed -n 's/allocfree_ns //p')
    s=$(T 60 under af "$bin/drv" allocfree 20000 | sed -n 's/allocfree_ns //p')
    verdict_if "overhead figures come out (stand-in, not judged here: bench/ does)" \
        "1 MiB alloc+free: native ${n:-?} ns, under the shim ${s:-?} ns" '[ -n "$n" ] && [ -n "$s" ]'
    unset LD_LIBRARY_PATH FAKE_CUDA_SHM FAKE_CUDA_TOTAL FAKE_CUDA_CTX_BYTES
}

# write_results: this run's table into $results below the marker (newest
# first), everything else in the file kept
write_results() {
    local when machine
    when=$(date -u '+%Y-%m-%d %H:%M UTC')
    machine="$(sed -n 's/^name //p' "$work/info.out" 2>/dev/null) ($(hostname)), driver $(field driver "$work/info.out" 2>/dev/null)"
    {
        echo "### $when: $machine"
        echo
        echo "nvcc: $( [ -n "$nvcc" ] && "$nvcc" --version | tail -1); torch: ${torch_version:-none};" \
             "device total $(mib "$(field total "$work/info.out" 2>/dev/null)"), free at the start $(mib "${free0:-}"); quota 4096 MiB;" \
             "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null)"
        echo
        echo "**$passed passed, $failed failed, $skipped skipped**"
        echo
        echo "| check | result | figures |"
        echo "| --- | --- | --- |"
        cat "$rows"
        echo
    } > "$work/run.md"
    local mark='<!-- run-all.sh writes each run below this line, newest first -->'
    if [ -f "$results" ] && grep -qF "$mark" "$results"; then
        awk -v m="$mark" -v f="$work/run.md" '
            { print } $0 == m { print ""; while ((getline l < f) > 0) print l }' \
            "$results" > "$work/results.new" && cat "$work/results.new" > "$results"
    else
        { echo; echo "## Runs"; echo; echo "$mark"; echo; cat "$work/run.md"; } >> "$results"
    fi
    echo "results written to $results"
}

# results_check: write_results on a copy of docs/gpu-results.md keeps what
# was there and puts the run right below the marker
results_check() {
    local copy=$work/results-copy.md mark
    mark='<!-- run-all.sh writes each run below this line, newest first -->'
    cp "$root/docs/gpu-results.md" "$copy" || return 1
    echo "an earlier run" >> "$copy"
    results=$copy write_results > /dev/null
    [ "$(grep -A2 -F "$mark" "$copy" | sed -n 3p | cut -c1-4)" = "### " ] &&
        grep -q '^an earlier run$' "$copy" &&
        [ "$(head -1 "$copy")" = "$(head -1 "$root/docs/gpu-results.md")" ]
}

if [ "$compile_only" = 1 ]; then
    stand_in
    verdict "the results go below docs/gpu-results.md's marker, the rest kept" "" results_check
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" = 0 ]
    exit
fi

# -------------------------------------------------------------- the GPU
echo "== the GPU"
finish() {
    echo "$passed passed, $failed failed, $skipped skipped"
    write_results
    [ "$failed" = 0 ]
    exit
}

T 30 native "$meter" info > "$work/info.out" 2>&1
if [ "$(field total "$work/info.out")" = "" ]; then
    bad "an NVIDIA GPU is visible through NVML" "$(head -1 "$work/info.out")"
    finish
fi
sed 's/^/    /' "$work/info.out"
free0=$(field free "$work/info.out")
used0=$(field used "$work/info.out")
uuid=$(field uuid "$work/info.out")
budget=$((free0 / 2)) # managed memory, all apps together, stays under it
echo "    managed-memory budget (half of free): $(mib "$budget")"
for f in "$shim" "$broker"; do
    [ -e "$f" ] || { bad "$f is built (cmake --build $build)"; finish; }
done
[ "$cuda_built" = 1 ] || { bad "the CUDA programs are built (see above)"; finish; }
names_list || finish
torch_version=$(T 120 native python3 -c 'import torch; assert torch.cuda.is_available(); print(torch.__version__)' 2>/dev/null)

# in_time NAME: whether there is time for a case (the whole check stays
# within 8 minutes; a case after 7 is skipped, saying so)
t_start=$(date +%s)
in_time() {
    [ $(($(date +%s) - t_start)) -lt 420 ] && return 0
    skip "$1" "no time left within the check's 8 minutes"
    return 1
}

# 1. the lookups: every hooked name x version x flag
case_1() {
    T 60 native "$bin/probe" "$work/names.txt" > "$work/probe.nat" 2>&1
    T 60 under probe "$bin/probe" "$work/names.txt" > "$work/probe.shim" 2>&1
    probe_judge "cuGetProcAddress_v2: every hooked name x version x flag gives the shim's address" \
        "$work/probe.nat" "$work/probe.shim" "$work/probe.shimlog"
    T 60 native "$bin/probe_rt" "$work/names.txt" > "$work/probert.nat" 2>&1
    T 60 under probert "$bin/probe_rt" "$work/names.txt" > "$work/probert.shim" 2>&1
    probe_judge "cudaGetDriverEntryPointByVersion: every hooked name x version x flag gives the shim's address" \
        "$work/probert.nat" "$work/probert.shim" "$work/probert.shimlog"
}

# 2. the bare context's cost, with and without cuBLAS, and whether it is charged
case_2() {
    for m in ctx cublas; do
        T 60 native "$bin/rt" "$m" 0 > "$work/$m.nat" 2>&1
        T 60 under "$m" "$bin/rt" "$m" 0 > "$work/$m.shim" 2>&1
        if grep -q '^skipped: ' "$work/$m.nat"; then
            skip "the context's cost ($m)" "$(sed -n 's/^skipped: //p' "$work/$m.nat")"
            continue
        fi
        p=$(field physical "$work/$m.shim"); c=$(field charged "$work/$m.shim")
        verdict_if "the context ($m) is charged at what the device takes" \
            "native: $(mib "$(field physical "$work/$m.nat")"); under the shim: device $(mib "$p"), charged $(mib "$c")" \
            '[ "$p" -ge 0 ] && [ "$c" -ge $((p - TOL)) ]'
    done
}

# 3. fills to the quota: driver API, runtime, per-thread default stream
case_3() {
    measured drv-fill 90 under drv-fill "$bin/drv" fill 64 500
    judge_fill "driver API cuMemAlloc filled to the quota" "$(field held "$work/drv-fill.out")"
    measured rt-fill 90 under rt-fill "$bin/rt" fill 64 500
    judge_fill "runtime cudaMalloc filled to the quota" "$(field held "$work/rt-fill.out")"
    verdict "a kernel still runs after the refusal" "$(field launch_after_fill "$work/rt-fill.out")" \
        [ "$(field launch_after_fill "$work/rt-fill.out")" = cudaSuccess ]
    measured ptds-fill 90 under ptds-fill "$bin/rt_ptds" fill 64 500
    judge_fill "built with --default-stream per-thread: filled to the quota" "$(field held "$work/ptds-fill.out")"
}

# 4. two processes of one app share the quota
case_4() {
    watch_start
    T 90 under share "$bin/drv" fill 64 2500 2048 > "$work/share-a.out" 2>&1 &
    a=$!
    for _ in $(seq 100); do grep -q '^held' "$work/share-a.out" && break; sleep 0.1; done
    T 90 under share "$bin/drv" fill 64 500 > "$work/share-b.out" 2>&1
    RC=$?
    wait "$a"
    watch_stop
    verdict_if "two processes of one app share one quota" \
        "first $(mib "$(field held "$work/share-a.out")"), second $(mib "$(field held "$work/share-b.out")"); device peak - base $(mib "$W_DELTA")" \
        '[ "$RC" = 0 ] && [ "$W_DELTA" -ge 0 ] && [ "$W_DELTA" -le "$Q" ] && [ "$W_DELTA" -ge $((Q - NEAR)) ]'
}

# 5. PyTorch three ways
case_5() {
    if [ -n "$torch_version" ]; then
        for conf in "default|" "expandable|expandable_segments:True" "async|backend:cudaMallocAsync"; do
            n=${conf%%|*}; c=${conf#*|}; slack=0
            [ "$n" = async ] && slack=3072 # 3 GiB made and freed: the pool keeps it
            measured "torch-$n" 180 env PYTORCH_CUDA_ALLOC_CONF="$c" \
                LD_PRELOAD="$shim" ACCEL_MEMORY_LIMIT=4Gi ACCEL_APP="gc-torch-$n-$run_id" \
                python3 "$here/torch_fill.py" fill 64 500 "$slack"
            h=$(field held "$work/torch-$n.out"); r=$(field raw "$work/torch-$n.out")
            judge_fill "PyTorch ${c:-default allocator}$([ "$slack" = 0 ] || echo ", $slack MiB made and freed first"): OutOfMemoryError at the quota" \
                "$(( $(num "$h") + $(num "$r") ))"
            [ "$(field oom "$work/torch-$n.out")" = 1 ] || bad "PyTorch $n: the fill ended in torch.cuda.OutOfMemoryError"
        done
    else
        skip "PyTorch filled to the quota three ways" "python3 -c 'import torch' with CUDA fails"
    fi
}

# 6. llama.cpp / Ollama's VMM pool, then cudaMalloc to the quota
case_6() {
    measured vmm 90 under vmm "$bin/rt" vmm 1024 64 500
    judge_fill "llama.cpp VMM pool (released while mapped), then cudaMalloc to the quota" \
        "$(( $(num "$(field vmm "$work/vmm.out")") + $(num "$(field held "$work/vmm.out")") ))"
}

# 7. each runtime allocation call's effect on the charge
case_7() {
    if [ "$budget" -ge $((512 * MIB)) ]; then
        T 120 under calls "$bin/rt" calls 256 > "$work/calls.out" 2>&1
        sed 's/^/    /' "$work/calls.out"
        while read -r _ name _ bytes _ cd _ pd _ fc _ fp; do
            fig="charge +$(mib "$cd"), device +$(mib "$pd"); after the free: charge $(mib "$fc"), device $(mib "$fp")"
            case "$name" in
            cudaMallocHost | "cudaHostAlloc(mapped)")
                verdict_if "$name (host memory) leaves the charge alone" "$fig" \
                    '[ "${cd#-}" -lt "$MIB" ]' ;;
            cudaMemPoolTrimTo)
                verdict_if "$name: the charge follows what the pool gives back" "$fig" \
                    '[ "$cd" -ge $((pd - TOL)) ] && [ "$cd" -le $((pd + TOL)) ]' ;;
            *)
                verdict_if "$name is charged at what the device holds, also after its free" "$fig" \
                    '[ "$cd" -ge $((pd - TOL)) ] && [ "$fc" -ge $((fp - TOL)) ] && [ "$pd" -gt 0 ]' ;;
            esac
        done < <(grep '^call ' "$work/calls.out")
        grep -q '^error' "$work/calls.out" && bad "each runtime allocation call ran" "$(grep '^error' "$work/calls.out")"
    else
        skip "each runtime allocation call" "under 1 GiB free on the device"
    fi
}

# 8. a captured graph with a 1 GiB memory node, 512 MiB under the quota
case_8() {
    measured graph 90 under graph "$bin/rt" graph 500
    verdict_if "a captured graph's memory node is charged or refused" \
        "instantiate $(field instantiate "$work/graph.out"), launch $(field launch "$work/graph.out"); device peak - base $(mib "$W_DELTA")" \
        '[ "$RC" = 0 ] && [ "$W_DELTA" -ge 0 ] && [ "$W_DELTA" -le "$Q" ]'
}

# 9. the views under CUDA_VISIBLE_DEVICES (index and UUID)
case_9() {
    for cvd in 0 "$uuid"; do
        export cvd
        v() { env CUDA_VISIBLE_DEVICES="$cvd" LD_PRELOAD="$shim" ACCEL_MEMORY_LIMIT=4Gi ACCEL_APP="gc-view-$run_id" "$@"; }
        physfree=$(T 30 native "$meter" info | sed -n 's/^free //p')
        if command -v nvidia-smi > /dev/null; then
            smi=$(T 30 v nvidia-smi --query-gpu=memory.total,memory.free --format=csv,noheader,nounits 2>&1 | head -1)
            st=${smi%%,*}; sf=${smi#*, }
            verdict "nvidia-smi under the shim (CUDA_VISIBLE_DEVICES=$cvd) shows 4096 MiB" "total ${st} MiB, free ${sf} MiB" \
                [ "${st// /}" = 4096 ]
        else
            skip "nvidia-smi under the shim (CUDA_VISIBLE_DEVICES=$cvd)" "no nvidia-smi on this machine"
        fi
        T 30 v "$meter" view > "$work/view.out" 2>&1
        for k in v1 v2 uuid; do
            t=$(field "${k}_total" "$work/view.out"); f=$(field "${k}_free" "$work/view.out")
            if [ "$t" = none ]; then
                skip "NVML $k view (CUDA_VISIBLE_DEVICES=$cvd)" "this NVML lacks the call"
                continue
            fi
            verdict_if "NVML $k view (CUDA_VISIBLE_DEVICES=$cvd): total is the quota, free is no more than the device has" \
                "total $(mib "$t"), free $(mib "$f"), device free $(mib "$physfree")" \
                '[ "$t" = "$Q" ] && [ "$f" -le "$physfree" ]'
        done
        T 30 v "$bin/rt" view > "$work/rtview.out" 2>&1
        verdict "cudaMemGetInfo (CUDA_VISIBLE_DEVICES=$cvd): total is the quota" \
            "total $(mib "$(field rt_total "$work/rtview.out")"), free $(mib "$(field rt_free "$work/rtview.out")")" \
            [ "$(field rt_total "$work/rtview.out")" = "$Q" ]
        if [ -n "$torch_version" ]; then
            T 120 v python3 "$here/torch_fill.py" view > "$work/tview.out" 2>&1
            verdict "torch total_memory (CUDA_VISIBLE_DEVICES=$cvd) is the quota" \
                "total_memory $(mib "$(field torch_total "$work/tview.out")"), mem_get_info free $(mib "$(field torch_free "$work/tview.out")")" \
                [ "$(field torch_total "$work/tview.out")" = "$Q" ]
        fi
    done
}

# 10. time slicing seen in the kernels' own clocks
case_10() {
    quantum=250
    if [ "$budget" -ge $((256 * MIB)) ]; then
        export sock=$work/ts.sock
        timeout -k 5 120 "$broker" "$sock" "$quantum" 100 > "$work/broker.out" 2>&1 &
        bpid=$!
        bg_pids="$bg_pids $bpid"
        for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
        tsu() { env LD_PRELOAD="$shim" ACCEL_TS_SOCKET_0="$sock" ACCEL_APP="$1" ACCEL_LOG="$work/$1.shimlog" "${@:2}"; }
        T 60 tsu ts-a "$bin/rt" ts 4 "$work/ts-a.iv" > "$work/ts-a.out" 2>&1 &
        a=$!
        T 60 tsu ts-b "$bin/rt" ts 4 "$work/ts-b.iv" > "$work/ts-b.out" 2>&1
        wait "$a"
        kill "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null
        sed 's/^/    /' "$work/ts-a.out" "$work/ts-b.out"
        if [ -s "$work/ts-a.iv" ] && [ -s "$work/ts-b.iv" ]; then
            python3 "$here/ts_overlap.py" "$quantum" "$work/ts-a.iv" "$work/ts-b.iv" > "$work/ts.judge" 2>&1
        else
            echo "the apps wrote no kernel times: $(head -1 "$work/ts-a.out") / $(head -1 "$work/ts-b.out")" > "$work/ts.judge"
        fi
        sed 's/^/    /' "$work/ts.judge"
        verdict "time slicing: the two apps' kernels never overlap outside handoffs (%globaltimer)" \
            "$(grep -v verdict "$work/ts.judge" | tr '\n' ' ')" grep -q '^verdict pass' "$work/ts.judge"
        # the contrast, a figure only: the same two without the shim
        T 60 native "$bin/rt" ts 4 "$work/na.iv" > /dev/null 2>&1 &
        a=$!
        T 60 native "$bin/rt" ts 4 "$work/nb.iv" > /dev/null 2>&1
        wait "$a"
        python3 "$here/ts_overlap.py" "$quantum" "$work/na.iv" "$work/nb.iv" > "$work/tsn.judge" 2>&1
        row "contrast, not a check: the same two apps without the shim" figure \
            "$(tr '\n' ' ' < "$work/tsn.judge")"
    else
        skip "time slicing" "under 512 MiB free on the device"
    fi
}

# 11. overhead against native, same run: medians of 3 alternating runs
case_11() {
    median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
    bench() { # NAME BAR_NS CMD...: "X_ns" figure of rt, native vs shim
        local name=$1 bar=$2 key=$3 i nat=() shm=(); shift 3
        for i in 1 2 3; do
            nat+=("$(T 120 native "$@" | sed -n "s/^$key //p")")
            shm+=("$(T 120 under bench "$@" | sed -n "s/^$key //p")")
        done
        local n s
        n=$(median3 "${nat[@]}"); s=$(median3 "${shm[@]}")
        verdict_if "$name: added at most $bar ns (SPEC 11)" \
            "native $n ns, under the shim $s ns, ratio $(awk -v a="$s" -v b="$n" 'BEGIN { if (b > 0) printf "%.3f", a / b }')" \
            '[ -n "$n" ] && [ -n "$s" ] && awk -v a="$s" -v b="$n" -v bar="$bar" "BEGIN { exit !(a - b <= bar) }"'
    }
    bench "kernel launch" 10 launch_ns "$bin/rt" launch 200000
    bench "1 MiB cudaMalloc+cudaFree" 300 allocfree_ns "$bin/rt" allocfree 20000
    if [ -n "$torch_version" ]; then
        z='import torch; torch.zeros(1, device="cuda")'
        tn=() ts=()
        for i in 1 2 3; do
            s0=$(date +%s%N); T 120 native python3 -c "$z"; s1=$(date +%s%N)
            T 120 under zeros python3 -c "$z"; s2=$(date +%s%N)
            tn+=($(( (s1 - s0) / 1000000 ))); ts+=($(( (s2 - s1) / 1000000 )))
        done
        n=$(median3 "${tn[@]}"); s=$(median3 "${ts[@]}")
        verdict "import torch; torch.zeros(1, device='cuda'): at most 1.10x native" \
            "native $n ms, under the shim $s ms, ratio $(awk -v a="$s" -v b="$n" 'BEGIN { printf "%.3f", a / b }')" \
            awk -v a="$s" -v b="$n" 'BEGIN { exit !(b > 0 && a / b <= 1.10) }'
    fi
}

# 12. acceld discovers the card through NVML
case_12() {
    if ! [ -x "$build/acceld" ]; then
        skip "acceld discovers the GPU through NVML (discover.sh)" "no $build/acceld"
    elif ldd "$build/acceld" | grep -q 'not found'; then
        skip "acceld discovers the GPU through NVML (discover.sh)" \
            "acceld lacks libraries here: $(ldd "$build/acceld" | sed -n 's/ *\(.*\) => not found/\1/p' | tr '\n' ' ')"
    else
        T 60 sh "$here/discover.sh" "$build" > "$work/discover.out" 2>&1
        verdict "acceld discovers the GPU through NVML (discover.sh)" \
            "$(grep '^RESULT' "$work/discover.out")" grep -q '^RESULT: NVML loaded' "$work/discover.out"
    fi
}

in_time "case 1: the lookups: every hooked name x version x flag" && case_1
in_time "case 2: the bare context's cost, with and without cuBLAS, and whether it is charged" && case_2
in_time "case 3: fills to the quota: driver API, runtime, per-thread default stream" && case_3
in_time "case 4: two processes of one app share the quota" && case_4
in_time "case 5: PyTorch three ways" && case_5
in_time "case 6: llama.cpp / Ollama's VMM pool, then cudaMalloc to the quota" && case_6
in_time "case 7: each runtime allocation call's effect on the charge" && case_7
in_time "case 8: a captured graph with a 1 GiB memory node, 512 MiB under the quota" && case_8
in_time "case 9: the views under CUDA_VISIBLE_DEVICES (index and UUID)" && case_9
in_time "case 10: time slicing seen in the kernels' own clocks" && case_10
in_time "case 11: overhead against native, same run: medians of 3 alternating runs" && case_11
in_time "case 12: acceld discovers the card through NVML" && case_12
finish
