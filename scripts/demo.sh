#!/usr/bin/env bash
# One command for a new user: install what is missing, build, run the main job
# (the local runner on the quickstart AntDTJob).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/antdt run examples/jobs/quickstart.yaml --report antdt-report "$@"
