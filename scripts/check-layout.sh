#!/usr/bin/env bash
# Fails when a file of src/daemon includes a header of a part it must not
# reach, or when the files' includes close a loop (docs/internals/layout.md).
# The parts, lowest first; each may include its own headers and those of
# every part below it (plus include/accel and src/common), never one above:
#   rules    src/daemon/rules/    admission, placement, manifests: pure, no I/O
#   store    src/daemon/store/    the store interface and its two backends
#                                 (rules, store and state do not reach node/)
#   state    src/daemon/*.{c,h}   the shared in-memory state (state.h: struct
#                                 accel_daemon; lifecycle, log, paths)
#   node/    src/daemon/node/     what runs on every node, in wings:
#     ledger   node/ledger.{c,h}  the shim's quota ledgers, the file format
#                                 the shim shares (tests/shim builds it)
#     proc     node/proc/         processes and people: proc, identity,
#                                 cgroup, disk, peer
#     devices  node/devices/      discovery: discovery, nvml, drm, inventory,
#                                 hostinfo
#     limits   node/limits/       what holds an app to its memory: the VRAM
#                                 tiers (vram, dmem)
#     slice    node/slice/        time slicing: the brokers
#     runtime  node/runtime/      the runtime and its runners (runner.h),
#                                 the image pull, the logs
#     enforce  node/enforce/      what watches running apps: meter, unheld,
#                                 the reconciler
#     history  node/history/      the metric history and its sampler
#     cluster  node/cluster/      the cluster's node agent
#     node     node/broker.h      the old path of slice/broker.h, kept for
#                                 tests/shim only
#   api      src/daemon/api/      the HTTP API: auth, operations, views, metrics
#   wiring   src/daemon/daemon.{c,h}, main.c: builds one acceld from them all
# A file in a folder of src/daemon that is not a part fails too: name its
# part here first. A loop of files (a.c includes b.h, b.c includes a.h,
# through any number of files) fails as well: the arrows point down only.
# Usage: bash scripts/check-layout.sh
set -u
cd "$(dirname "$0")/.."
status=0

# the parts, lowest first: a part may include the parts before it
ORDER="rules store state ledger proc devices limits slice runtime enforce history cluster node api wiring"

part_of() { # path of a file under src/daemon -> its part, or "" if none
    case "$1" in
    src/daemon/rules/*) echo rules ;;
    src/daemon/store/*) echo store ;;
    src/daemon/node/proc/*) echo proc ;;
    src/daemon/node/devices/*) echo devices ;;
    src/daemon/node/limits/*) echo limits ;;
    src/daemon/node/slice/*) echo slice ;;
    src/daemon/node/runtime/*) echo runtime ;;
    src/daemon/node/enforce/*) echo enforce ;;
    src/daemon/node/history/*) echo history ;;
    src/daemon/node/cluster/*) echo cluster ;;
    src/daemon/node/*/*) echo "" ;;
    src/daemon/node/ledger.[ch]) echo ledger ;;
    src/daemon/node/broker.h) echo node ;;
    src/daemon/api/*) echo api ;;
    src/daemon/daemon.[ch] | src/daemon/main.c) echo wiring ;;
    src/daemon/*/*) echo "" ;;
    src/daemon/*) echo state ;;
    esac
}

may_include() { # part -> the parts whose headers it may include
    case "$1" in
    rules) echo "rules" ;;
    store) echo "store" ;;
    state) echo "state rules store" ;;
    *) echo "${ORDER%%" $1 "*} $1" ;;
    esac
}

edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
while IFS= read -r f; do
    part=$(part_of "$f")
    if [ -z "$part" ]; then
        echo "check-layout: $f is in no part (scripts/check-layout.sh)" >&2
        status=1
        continue
    fi
    allowed=" $(may_include "$part") "
    while IFS=: read -r line inc; do
        [ -n "$inc" ] || continue
        hdr=$(printf '%s' "$inc" | sed -E 's/.*"daemon\/([^"]*)".*/\1/')
        to=$(part_of "src/daemon/$hdr")
        # a file, its header and its private header (x_int.h) are one
        # node of the loop check
        from_mod=${f%.[ch]} to_mod=src/daemon/${hdr%.h}
        from_mod=${from_mod%_int} to_mod=${to_mod%_int}
        [ "$from_mod" = "$to_mod" ] || echo "$from_mod $to_mod" >>"$edges"
        case "$allowed" in
        *" $to "*) ;;
        *)
            echo "check-layout: $f:$line: $part includes $to (\"daemon/$hdr\")" >&2
            status=1
            ;;
        esac
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"daemon/' "$f")
done < <(find src/daemon -type f \( -name '*.c' -o -name '*.h' \) | sort)

# a loop of files: tsort names every file on it
if ! tsort "$edges" >/dev/null 2>"$edges.loop"; then
    echo "check-layout: these files' includes close a loop:" >&2
    grep -v 'input contains a loop' "$edges.loop" | sed 's/^tsort: /  /' >&2
    status=1
fi
rm -f "$edges.loop"

# rules are pure: no threads, files, processes or other libraries' I/O
if grep -En '#[[:space:]]*include[[:space:]]*<(unistd|fcntl|pthread|dirent|dlfcn|sqlite3|microhttpd|curl/[a-z]+|sys/[a-z]+)\.h>' \
        src/daemon/rules/*.c src/daemon/rules/*.h; then
    echo "check-layout: src/daemon/rules does no I/O" >&2
    status=1
fi
[ $status = 0 ] && echo "check-layout: clean"
exit $status
