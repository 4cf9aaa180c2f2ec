#!/usr/bin/env bash
# Runs tests under sanitizers:
#   scripts/sanitize.sh asan [ctest args]  AddressSanitizer + UndefinedBehaviorSanitizer
#                                          over the unit and integration tests (-LE e2e)
#   scripts/sanitize.sh tsan [ctest args]  ThreadSanitizer over the tests labelled tsan
# Builds into build-asan/ or build-tsan/ only the GoogleTest executables of those
# tests (targets tests-LABEL) and the binaries they launch (their add_dependencies);
# tests run by python or bash are skipped, and so are SPLIT ones (one ctest
# test per case: e2e only). The first finding fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
case "$kind" in
  asan) sanitize=address build=(tests-unit tests-integration) select=(-LE e2e) opt=-O0 ;;
  tsan) sanitize=thread build=(tests-tsan) select=(-L tsan) opt=-O1 ;;
  *) echo "usage: $0 asan|tsan [ctest args]" >&2; exit 2 ;;
esac
shift
dir=build-$kind
jobs=${JOBS:-$(nproc)}

# -g1 (line tables, no local variables): the reports keep their file:line
# stacks. ASan at -O0: its build is CI's longest step, and -O0 compiles in
# half the time of -O1 (backends/local's runner.cc under ASan+UBSan, beside
# another build: 20 s against 42 s; -O2 -g took 64 s) while the tests it runs
# stay well inside their timeouts. TSan at -O1: unoptimized, its tests run
# several times slower.
source scripts/ccache.sh
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt -g1 -DNDEBUG" \
  -DANTDT_SANITIZE=$sanitize "${LAUNCHER[@]}" >/dev/null
cmake --build "$dir" -j"$jobs" --target "${build[@]}"
# Of those, the tests whose name is a build target: the GoogleTest executables.
targets=$(cmake --build "$dir" --target help | sed -n 's/^\.\.\. //p' | sort)
tests=$(cd "$dir" && ctest -N "${select[@]}" | sed -n 's/^ *Test *#[0-9]*: //p' | sort)
selected=$(comm -12 <(echo "$targets") <(echo "$tests"))

# Reports go to stderr: a test's own to ctest, a launched binary's to its log in
# the test's directory, kept under $dir/test-tmp and searched afterwards.
export TMPDIR=$PWD/$dir/test-tmp ANTDT_KEEP_TEST_DIRS=1
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$PWD/scripts/ubsan.supp
# gRPC, protobuf and abseil from Debian are not instrumented: TSan would take
# their libc calls (epoll_wait, close on a socket) for races with our threads.
# ignore_noninstrumented_modules ignores the memory accesses of such calls; their
# pthread locking is still seen (abseil's Mutex is not: backends/kubernetes/runtime/CMakeLists.txt).
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/tsan.supp

status=0
(cd "$dir" && ctest -j"$jobs" --output-on-failure -R "^($(echo $selected | tr ' ' '|'))\$" "$@") ||
  status=$?
for log in $(grep -rlaE 'SUMMARY: [A-Za-z]+Sanitizer|runtime error:' "$TMPDIR" || true); do
  echo "=== $log" && cat "$log"
  status=1
done
exit $status
