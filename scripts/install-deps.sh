#!/usr/bin/env bash
# Installs the Debian 12 packages AntDT builds and tests with. Idempotent:
# does nothing when everything is already there. --ci adds what CI's checks
# use beyond the tests: clang-format and clang-tidy, and valgrind (callgrind's
# instruction counts, repeatable on a shared machine, for profiling benchmarks).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  ccache                                                     # scripts/ccache.sh: rebuilds from its cache
  libmimalloc-dev                                            # antdt links mimalloc (cli/CMakeLists.txt)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libsqlite3-dev zlib1g-dev libyaml-cpp-dev prometheus-cpp-dev libcpprest-dev
  nlohmann-json3-dev libboost-dev libssl-dev openssl libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-protobuf python3-kubernetes python3-yaml
  python3-venv python3-pip python3-setuptools python3-wheel  # pip install ./python, offline
  python3-torch                                              # antdt.torch, the PyTorch example
  prometheus
  chromium                                                   # report_browser_test, headless
  # Debian's Go (1.19): scripts/build-k8s.sh has it fetch Go 1.26.8 from the module
  # proxy, which then builds the real control plane and helm
  golang-go
  # the API-server emulator's /openapi/v2 protobuf (gnostic's OpenAPIv2.proto)
  golang-github-googleapis-gnostic-dev
)
if ! command -v node >/dev/null 2>&1; then PACKAGES+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(npm); fi
# A kubectl for the tests that drive the API-server emulator with the real
# client. Debian's is kubernetes-client (1.20); a kubectl already on the PATH
# (any version from 1.20 to 1.33) is used as it is.
if ! command -v kubectl >/dev/null 2>&1; then PACKAGES+=(kubernetes-client); fi
if [ "${1:-}" = "--ci" ]; then PACKAGES+=(clang-format clang-tidy valgrind); fi
# --image: what scripts/image.sh builds the container image with (not the tests).
if [ "${1:-}" = "--image" ]; then PACKAGES=(buildah podman debootstrap); fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The manifest validator's npm packages (kubernetes-models), pinned by its lockfile
# (test tooling only); installed again when the lockfile changes. Best effort: where
# the npm registry cannot be reached, helm_chart_test checks each kind with the
# Kubernetes Python client's models alone and says so.
if [ "${1:-}" = "--image" ]; then exit 0; fi
validate=testing/helm/validate
if ! cmp -s "$validate/package-lock.json" "$validate/node_modules/.antdt-installed-lock" 2>/dev/null; then
  echo "installing: npm packages of $validate"
  if (cd "$validate" && npm ci --no-audit --no-fund --loglevel=error --fetch-retries=1 --fetch-timeout=60000); then
    cp "$validate/package-lock.json" "$validate/node_modules/.antdt-installed-lock"
  else
    rm -rf "$validate/node_modules"
    echo "warning: npm ci failed in $validate: helm_chart_test runs without kubernetes-models" >&2
  fi
fi
