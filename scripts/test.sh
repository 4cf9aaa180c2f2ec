#!/usr/bin/env bash
# One command for the tests: install what is missing, build, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest -j2 --output-on-failure "$@"
