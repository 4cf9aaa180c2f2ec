#!/usr/bin/env bash
# Lists every function longer than LIMIT lines (clang-tidy's readability-function-size;
# a lambda counts toward its enclosing function) in the non-test sources, longest
# first: "file:line: N lines: function". Exits 1 when there is one.
#   scripts/check-function-size.sh [BUILD_DIR [LIMIT]]    (default: build 120)
# BUILD_DIR must be built: clang-tidy needs its compile_commands.json and generated
# protos. One clang-tidy per file, its output printed at once, so that parallel
# runs do not interleave.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
limit=${2:-120}
config="{CheckOptions: [{key: readability-function-size.LineThreshold, value: $limit}]}"

long=$(git ls-files '*.cc' ':!:*_test.cc' ':!:tests/' ':!:testing/' ':!:common/testing/' |
  xargs -P"$(nproc)" -I{} sh -c 'out=$(clang-tidy "$@" 2>/dev/null); echo "$out"' _ \
    --quiet -p "$build" --checks='-*,readability-function-size' --config="$config" \
    --header-filter="^$PWD/" {} |
  awk -v root="$PWD/" '
    / warning: function .* exceeds recommended size/ {
      split($1, at, ":"); where = at[1] ":" at[2]; name = $4; next
    }
    / note: [0-9]+ lines including whitespace/ && where != "" {
      sub(root, "", where)
      if (where !~ /^build/) print $3 "\t" where ": " $3 " lines: " name
      where = ""
    }' |
  sort -u | sort -t$'\t' -k1,1nr | cut -f2)
[ -z "$long" ] || { echo "$long"; exit 1; }
