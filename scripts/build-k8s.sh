#!/usr/bin/env bash
# Builds the real Kubernetes control plane the end-to-end tests run against, from
# Go modules only (the module proxy; no download sites): etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kubectl, and helm. The versions are
# pinned by the wrapper modules under deps/go/ (go.mod and go.sum committed).
#
# The binaries go into a cache outside the work tree, one folder per version
# set, that every checkout on the machine shares:
#   ${ANTDT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/antdt/k8s}/<versions>-<hash>/bin
# A folder is used only once its build finished (.complete); a build that was
# interrupted is started again from the Go build cache, which keeps what it had.
#
#   scripts/build-k8s.sh              build what is missing (minutes when warm;
#                                     about 40 cold on 2 cores: see the README)
#   scripts/build-k8s.sh --bin-dir    print the folder the binaries are (or will be) in
#   scripts/build-k8s.sh --check      exit 0 if they are built, else say what is missing
#
# Go: the module files need Go >= 1.26. The go on the PATH is used when it is new
# enough; otherwise (Debian 12's golang-go is 1.19) the Go toolchain of
# GO_TOOLCHAIN_VERSION is fetched from the module proxy as the module
# golang.org/toolchain, by the old go itself, and builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
HELM_VERSION=v4.3.2
GO_MIN=1.26
GO_TOOLCHAIN_VERSION=1.26.8
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl helm)

CACHE=${ANTDT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/antdt/k8s}
# RECIPE: bump it when the way the binaries are built below changes.
RECIPE=1
hash=$( (echo "$RECIPE $K8S_VERSION $ETCD_VERSION $HELM_VERSION"; cat deps/go/*/go.mod deps/go/*/go.sum) |
  sha256sum | cut -c1-12)
DEST="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION-$hash"

missing() {
  local out=()
  [[ -f "$DEST/.complete" ]] || out+=("$DEST/.complete")
  for b in "${BINARIES[@]}"; do [[ -x "$DEST/bin/$b" ]] || out+=("$DEST/bin/$b"); done
  echo "${out[*]}"
}

case "${1:-}" in
  --bin-dir) echo "$DEST/bin"; exit 0 ;;
  --check)
    m=$(missing)
    if [[ -n "$m" ]]; then echo "not built: $m (run scripts/build-k8s.sh)"; exit 1; fi
    exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--bin-dir|--check]" >&2; exit 2 ;;
esac

if [[ -z "$(missing)" ]]; then
  echo "k8s binaries: $DEST/bin (cached)"
  exit 0
fi

fail() {
  echo "error: build-k8s: $*" >&2
  echo "error: build-k8s: nothing was installed into $DEST; retry with scripts/build-k8s.sh" >&2
  exit 1
}

# version_ge A B: Go version A (like 1.26.8) is at least B (like 1.26).
version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" == "$2" ]]; }

go_version() { "$1" env GOVERSION 2>/dev/null | sed 's/^go//'; }

# The Go that builds: the PATH's when new enough, else the toolchain module.
find_go() {
  local go v
  go=$(command -v go || true)
  if [[ -n "$go" ]]; then
    v=$(go_version "$go")
    if [[ -n "$v" ]] && version_ge "$v" "$GO_MIN"; then echo "$go"; return; fi
    echo "build-k8s: $go is go$v, older than go$GO_MIN: fetching go$GO_TOOLCHAIN_VERSION from the module proxy" >&2
  else
    fail "no go on the PATH (scripts/install-deps.sh installs Debian's golang-go, which then fetches go$GO_TOOLCHAIN_VERSION)"
  fi
  local arch mod dir tmp goroot="$CACHE/go$GO_TOOLCHAIN_VERSION"
  if [[ -x "$goroot/bin/go" && -f "$goroot/.complete" ]]; then echo "$goroot/bin/go"; return; fi
  arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
  mod="golang.org/toolchain@v0.0.1-go$GO_TOOLCHAIN_VERSION.linux-$arch"
  tmp=$(mktemp -d)
  # An old go (1.19) downloads modules only inside a module.
  (cd "$tmp" && "$go" mod init antdt.invalid/toolchain >/dev/null 2>&1 &&
     timeout 900 "$go" mod download -json "$mod" >"$tmp/download.json") ||
    fail "could not fetch $mod with $go from the module proxy ($("$go" env GOPROXY 2>/dev/null || true))"
  dir=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' "$tmp/download.json")
  rm -rf "$tmp"
  [[ -f "$dir/bin/go" ]] || fail "the toolchain module $mod has no bin/go under '$dir'"
  # The module cache drops the executable bits (the go command sets them again
  # when it switches toolchains itself): a copy of our own, made executable.
  rm -rf "$goroot.partial"
  mkdir -p "$CACHE"
  cp -r "$dir" "$goroot.partial"
  chmod -R u+w "$goroot.partial"
  chmod +x "$goroot.partial"/bin/* "$goroot.partial"/pkg/tool/*/*
  touch "$goroot.partial/.complete"
  rm -rf "$goroot"
  mv "$goroot.partial" "$goroot"
  echo "$goroot/bin/go"
}

GO=$(find_go)
echo "build-k8s: building with $GO (go$(go_version "$GO")) into $DEST"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-trimpath -mod=readonly"
PARTIAL="$DEST.partial"
rm -rf "$PARTIAL"
mkdir -p "$PARTIAL/bin"
LOG="$CACHE/build.log"
: >"$LOG"

# step LIMIT NAME COMMAND...: runs one build step with its output in the log,
# within LIMIT seconds (a module download that hangs ends with a message).
step() {
  local limit=$1 name=$2
  shift 2
  local start=$SECONDS
  echo "build-k8s: $name ..."
  if ! timeout "$limit" "$@" >>"$LOG" 2>&1; then
    tail -20 "$LOG" >&2
    fail "$name failed (full log: $LOG)"
  fi
  echo "build-k8s: $name done in $((SECONDS - start)) s"
}

for module in kubernetes etcd helm; do
  (cd "deps/go/$module" && step 1200 "go mod download ($module)" "$GO" mod download)
done

minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean"
done
(cd deps/go/kubernetes &&
  step 3600 "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $K8S_VERSION" \
    "$GO" build -tags selinux,notest,grpcnotrace -ldflags "$k8s_ldflags" -o "$PARTIAL/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
(cd deps/go/etcd &&
  step 1800 "etcd $ETCD_VERSION" "$GO" build \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
    -o "$PARTIAL/bin/etcd" go.etcd.io/etcd/server/v3)
(cd deps/go/helm &&
  step 1800 "helm $HELM_VERSION" "$GO" build \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    -o "$PARTIAL/bin/helm" helm.sh/helm/v4/cmd/helm)

"$PARTIAL/bin/kube-apiserver" --version >/dev/null || fail "the built kube-apiserver does not run"
touch "$PARTIAL/.complete"
rm -rf "$DEST"
mv "$PARTIAL" "$DEST"
echo "k8s binaries: $DEST/bin"
