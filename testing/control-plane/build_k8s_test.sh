#!/usr/bin/env bash
# scripts/build-k8s.sh on bad ground, without building anything: a module download
# that fails, a Go too old with no way to fetch a newer one, a half-built cache.
# Each ends at once with one message naming what failed and how to retry, and
# leaves no cache entry that the tests would take for built.
set -euo pipefail
SRC=${1:?source dir}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/build-k8s-test.XXXXXX")
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# A Go new enough to build (the first case): the PATH's, else the toolchain that
# build-k8s.sh fetched into the real cache (a fresh Debian 12's own go is 1.19).
REAL_CACHE=$(dirname "$(dirname "$("$SRC/scripts/build-k8s.sh" --bin-dir)")")
NEW_GO_DIR=""
if [[ "$(go env GOVERSION 2>/dev/null)" =~ ^go1\.(2[6-9]|[3-9][0-9]) ]]; then
  NEW_GO_DIR=$(dirname "$(command -v go)")
elif [[ -x "$REAL_CACHE/go1.26.8/bin/go" ]]; then
  NEW_GO_DIR="$REAL_CACHE/go1.26.8/bin"
fi
export ANTDT_K8S_CACHE="$WORK/cache" GOMODCACHE="$WORK/mod" GOPROXY=off
BIN_DIR=$("$SRC/scripts/build-k8s.sh" --bin-dir)
[[ "$BIN_DIR" == "$WORK/cache/"*/bin ]] || fail "--bin-dir printed $BIN_DIR"

echo "== a module download that fails"
if [[ -n "$NEW_GO_DIR" ]]; then
  if OUT=$(PATH="$NEW_GO_DIR:$PATH" timeout 120 "$SRC/scripts/build-k8s.sh" 2>&1); then
    fail "a build with GOPROXY=off passed: $OUT"
  fi
  echo "$OUT" | tail -3
  [[ "$OUT" == *"go mod download (kubernetes) failed"* ]] || fail "the failed step is not named: $OUT"
  [[ "$OUT" == *"module lookup disabled by GOPROXY=off"* ]] || fail "go's own reason is not shown: $OUT"
  [[ "$OUT" == *"retry with scripts/build-k8s.sh"* ]] || fail "no way to retry is given: $OUT"
  if "$SRC/scripts/build-k8s.sh" --check >/dev/null; then fail "--check says built after a failed build"; fi
else
  echo "(no Go >= 1.26 here, nor one fetched by scripts/build-k8s.sh: that case is not run)"
fi

echo "== a Go older than 1.26 and no module proxy to fetch a newer one from"
OLD_GO=$(ls -d /usr/lib/go-1.19/bin 2>/dev/null || true)
if [[ -n "$OLD_GO" ]]; then
  if OUT=$(PATH="$OLD_GO:$PATH" timeout 120 "$SRC/scripts/build-k8s.sh" 2>&1); then fail "passed with go1.19: $OUT"; fi
  echo "$OUT" | tail -3
  [[ "$OUT" == *"older than go1.26"* ]] || fail "the old Go is not named: $OUT"
  [[ "$OUT" == *"could not fetch golang.org/toolchain@"* ]] || fail "the toolchain fetch is not named: $OUT"
else
  echo "(no Debian go 1.19 here: that case is not run)"
fi

echo "== a half-built cache is not taken for built"
mkdir -p "$BIN_DIR"
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl helm; do
  printf '#!/bin/sh\nexit 1\n' >"$BIN_DIR/$b"; chmod +x "$BIN_DIR/$b"
done
if OUT=$("$SRC/scripts/build-k8s.sh" --check 2>&1); then fail "--check passed a cache without .complete"; fi
echo "$OUT"
[[ "$OUT" == *"not built: "*"/.complete"* ]] || fail "--check does not name what is missing: $OUT"
if OUT=$(ANTDT_K8S_BIN_DIR="$BIN_DIR" /usr/bin/python3 "$SRC/testing/control-plane/antdt_control_plane.py" bin-dir 2>&1); then
  fail "the harness took a half-built cache: $OUT"
else
  code=$?
fi
[[ $code == 77 && "$OUT" == *".complete"* ]] || fail "the harness said ($code): $OUT"
echo PASS
