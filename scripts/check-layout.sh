#!/usr/bin/env bash
# Fails when a file of src/daemon includes a header of a part it must not
# reach (docs/internals/layout.md). The parts, lowest first:
#   rules  src/daemon/rules/   admission, placement, manifests: pure, no I/O
#   store  src/daemon/store/   the store interface and its SQLite backend
#   state  src/daemon/*.{c,h}  the shared in-memory state (state.h: struct
#                              accel_daemon; lifecycle, log, paths)
#   node   src/daemon/node/    what runs on every node (NVML, processes,
#                              cgroups, brokers, ledgers, reconciler, history)
#   api    src/daemon/api/     the HTTP API: auth, operations, views, metrics
#   wiring src/daemon/daemon.{c,h}, main.c: builds one acceld from them all
# A part includes only its own headers and those of the parts listed for it
# below (plus include/accel and src/common). A file in a folder of
# src/daemon that is not a part fails too: name its part here first.
# Usage: bash scripts/check-layout.sh
set -u
cd "$(dirname "$0")/.."
status=0

part_of() { # path of a file under src/daemon -> its part, or "" if none
    case "$1" in
    src/daemon/rules/*) echo rules ;;
    src/daemon/store/*) echo store ;;
    src/daemon/node/*) echo node ;;
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
    node) echo "node state rules store" ;;
    api) echo "api node state rules store" ;;
    wiring) echo "wiring api node state rules store" ;;
    esac
}

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
        case "$allowed" in
        *" $to "*) ;;
        *)
            echo "check-layout: $f:$line: $part includes $to (\"daemon/$hdr\")" >&2
            status=1
            ;;
        esac
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"daemon/' "$f")
done < <(find src/daemon -type f \( -name '*.c' -o -name '*.h' \) | sort)

# rules are pure: no threads, files, processes or other libraries' I/O
if grep -En '#[[:space:]]*include[[:space:]]*<(unistd|fcntl|pthread|dirent|dlfcn|sqlite3|microhttpd|curl/[a-z]+|sys/[a-z]+)\.h>' \
        src/daemon/rules/*.c src/daemon/rules/*.h; then
    echo "check-layout: src/daemon/rules does no I/O" >&2
    status=1
fi
[ $status = 0 ] && echo "check-layout: clean"
exit $status
