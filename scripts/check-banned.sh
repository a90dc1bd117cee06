#!/usr/bin/env bash
# Fails when C sources use a banned function (STYLE 25): unbounded string
# functions, atoi/atol, system, and in the shim also abort/exit/assert.
set -u
cd "$(dirname "$0")/.."
status=0
banned='\b(sprintf|vsprintf|strcpy|strcat|atoi|atol|atoll|gets|strtok|system)[[:space:]]*\('
if grep -rEn "$banned" --include='*.c' --include='*.h' src bench tests; then
    echo "check-banned: use snprintf, util_strlcpy, strtol/strtoull, strtok_r, fork+exec instead" >&2
    status=1
fi
if grep -rEn '\b(abort|exit|_exit|assert)[[:space:]]*\(' --include='*.c' --include='*.h' src/shim; then
    echo "check-banned: the shim never aborts or exits the host process" >&2
    status=1
fi
[ $status = 0 ] && echo "check-banned: clean"
exit $status
