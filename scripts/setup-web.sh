#!/usr/bin/env bash
# Installs what the web page and its browser tests need, then builds the page:
# Debian's chromium, nodejs and npm (only those missing), `npm ci` in web/ and
# `npm run build` (web/dist). Usage: bash scripts/setup-web.sh
set -euo pipefail
cd "$(dirname "$0")/.."
need=""
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || need="$need chromium"
command -v node >/dev/null 2>&1 || need="$need nodejs"
command -v npm >/dev/null 2>&1 || need="$need npm"
if [ -n "$need" ]; then
    . scripts/apt.sh
    # shellcheck disable=SC2086
    apt_install $need
fi
cd web
npm ci --no-audit --no-fund
npm run build
