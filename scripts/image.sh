#!/usr/bin/env bash
# Builds AntDT's image from the Dockerfile on a machine without Docker (buildah, vfs
# storage, chroot isolation: ../shared/reference/containers.md) and smoke-tests it.
#
#   scripts/image.sh [--tag TAG] [--no-torch] [--base IMAGE] [--keep] [--smoke-only]
#
#   --tag TAG      the image's name                         [localhost/antdt/antdt:dev]
#   --no-torch     build with WITH_TORCH=false (no PyTorch, about 1 GB smaller)
#   --base IMAGE   the base image; by default a Debian 12 minbase root made with
#                  debootstrap from this machine's apt mirror and imported as
#                  localhost/debian:bookworm (no registry is needed)
#   --keep         keep the build's intermediate layers and containers
#   --smoke-only   skip the build, smoke-test TAG as it is
#
# The smoke test, inside the image: it runs as uid 65532, not root; every binary answers
# --help; /usr/bin/python3 imports the SDK and its gRPC stubs (and antdt.torch with
# PyTorch); `antdt run` finishes the quickstart job with every record committed once.
# Writes the build's log to $ANTDT_IMAGE_LOG [/tmp/antdt-image.log].
set -euo pipefail
cd "$(dirname "$0")/.."

tag=localhost/antdt/antdt:dev
torch=true
base=
keep=false
smoke_only=false
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag=$2; shift 2 ;;
    --no-torch) torch=false; shift ;;
    --base) base=$2; shift 2 ;;
    --keep) keep=true; shift ;;
    --smoke-only) smoke_only=true; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "image.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
log=${ANTDT_IMAGE_LOG:-/tmp/antdt-image.log}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
scripts/install-deps.sh --image  # buildah, podman, debootstrap

bh() { buildah --storage-driver vfs "$@"; }

if [ -z "$base" ]; then
  base=localhost/debian:bookworm
  if ! bh inspect --type image "$base" >/dev/null 2>&1; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "base: debootstrap --variant=minbase bookworm from $mirror"
    $SUDO debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >>"$log" 2>&1
    $SUDO tar -C "$work/rootfs" -cf "$work/base.tar" .
    podman --storage-driver vfs import "$work/base.tar" "$base" >/dev/null
    $SUDO rm -rf "$work/rootfs" "$work/base.tar"
  fi
fi

if [ "$smoke_only" = false ]; then
  echo "building $tag from $base (WITH_TORCH=$torch); log: $log"
  start=$(date +%s)
  layers=(--layers)
  [ "$keep" = true ] || layers=(--layers=false --rm)
  bh bud --isolation chroot "${layers[@]}" --build-arg BASE="$base" --build-arg WITH_TORCH="$torch" \
    -t "$tag" -f Dockerfile . >>"$log" 2>&1 || { tail -40 "$log"; echo "image.sh: build failed" >&2; exit 1; }
  echo "built in $(( $(date +%s) - start )) s"
fi

# --- smoke test -------------------------------------------------------------------------
c=$(bh from "$tag")
cleanup() { bh rm "$c" >/dev/null 2>&1 || true; }
trap cleanup EXIT
run() { bh run --isolation chroot "$c" -- "$@"; }
fail() { echo "image.sh: smoke test failed: $*" >&2; exit 1; }

user=$(bh inspect --type image --format '{{.OCIv1.Config.User}}' "$tag")
[ "$user" = "65532:65532" ] || fail "the image's user is '$user', not 65532:65532"
uid=$(run id -u)
[ "$uid" = 65532 ] || fail "commands run as uid $uid, not 65532"
echo "ok: runs as uid $uid"
for b in antdt antdt-operator antdt-agent antdt-sharding-service antdt-ps antdt-trainer-worker; do
  run "$b" --help >/dev/null 2>&1 || fail "$b --help"
  echo "ok: $b --help"
done
run /usr/bin/python3 -c 'import antdt, antdt.v1.sharding_pb2_grpc, antdt.v1.agent_pb2_grpc' \
  || fail "python3 cannot import the SDK"
echo "ok: python3 imports antdt and its stubs"
if run /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  run /usr/bin/python3 -c 'import antdt.torch' || fail "python3 cannot import antdt.torch"
  echo "ok: python3 imports antdt.torch"
fi
out=$(run sh -c 'cd /tmp && antdt run /opt/antdt/examples/jobs/quickstart.yaml --work-dir /tmp/run --quiet 2>&1') \
  || { echo "$out" | tail -30; fail "antdt run quickstart"; }
echo "$out" | grep -q "exactly once" || { echo "$out" | tail -30; fail "antdt run did not report exactly once"; }
echo "ok: antdt run quickstart: $(echo "$out" | grep -m1 "exactly once")"
size=$(bh images --noheading --format '{{.Size}}' "$tag" 2>/dev/null || echo "?")
echo "image $tag: smoke test passed (${size})"
