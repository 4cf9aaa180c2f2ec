#!/usr/bin/env bash
# Configures and builds into build/ (binaries in build/bin/).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache.sh
extra=("${LAUNCHER[@]}")
if [ "${CI:-}" = "true" ]; then extra+=(-DANTDT_WERROR=ON); fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" >/dev/null
cmake --build build -j"$(nproc)"
