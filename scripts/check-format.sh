#!/usr/bin/env bash
# Fails, naming each file, when a tracked C++ file is not clang-formatted (.clang-format).
# Fix with: clang-format -i FILE
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
