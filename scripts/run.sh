#!/usr/bin/env bash
# Installs what is needed, builds, and starts acceld on its embedded default:
# SQLite under ./accel-data, the devices NVML finds (or the CPU fallback), on
# 127.0.0.1:7390. Extra arguments go to acceld (e.g. --inventory FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh build
bash scripts/setup-web.sh || echo "warning: the web page could not be built; the API still works" >&2
exec build/acceld --data-dir ./accel-data "$@"
