#!/usr/bin/env bash
# Fails, naming each file, when a tracked C++ file is not clang-formatted (.clang-format).
# Fix with: clang-format -i FILE
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "check-format: clang-format is not installed (scripts/install-deps.sh --ci installs it)" >&2
  exit 1
fi
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
