#!/usr/bin/env bash
# Installs the Python SDK the way a user does -- pip install ./python into a
# venv made with --system-site-packages, no network -- and imports it, stubs
# included, from outside the tree with PYTHONPATH unset. Also checks that a
# build without the proto files fails naming where it looked.
#
# Usage: package_test.sh SOURCE_DIR [PYTHON]   (ctest's python_package_test)
#
# It installs from a copy of python/ and proto/, laid out as in the repository:
# pip builds in place, which would write python/build/ and python/*.egg-info/
# into the checkout and share them between concurrent runs.
set -euo pipefail

src=$(cd "$1" && pwd)
python=${2:-/usr/bin/python3}
unset PYTHONPATH PIP_INDEX_URL PIP_EXTRA_INDEX_URL
tmp=$(mktemp -d "${TMPDIR:-/tmp}/antdt-package-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

copy_python() {  # copy_python DEST: the SDK's sources, without build outputs
  mkdir -p "$1"
  tar -C "$src" --exclude=build --exclude='*.egg-info' --exclude=__pycache__ \
      --exclude=python/antdt/v1 -cf - python | tar -C "$1" -xf -
}

"$python" -m venv --system-site-packages "$tmp/venv"
pip_install() { "$tmp/venv/bin/pip" install --quiet --no-build-isolation --no-index "$@"; }

# python/ without ../proto: the build stops and says where it looked.
copy_python "$tmp/alone"
if pip_install "$tmp/alone/python" >"$tmp/alone.log" 2>&1; then
  fail "installed without proto files"
fi
grep -q "proto files not found at $tmp/alone/proto/antdt/v1" "$tmp/alone.log" ||
  { cat "$tmp/alone.log" >&2; fail "no 'proto files not found at ...' in pip's output"; }

# python/ next to proto/, as in the repository.
copy_python "$tmp/src"
cp -r "$src/proto" "$tmp/src/proto"
pip_install "$tmp/src/python"

cd "$tmp"
installed=$("$tmp/venv/bin/python" -c '
import os, antdt, antdt.v1.sharding_pb2, antdt.v1.agent_pb2_grpc
print(antdt.__version__, os.path.dirname(antdt.__file__))')
read -r version package <<<"$installed"
want=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$src/python/antdt/__init__.py")
[ -n "$want" ] || fail "no __version__ in $src/python/antdt/__init__.py"
[ "$version" = "$want" ] || fail "antdt.__version__ is '$version', want '$want'"
case "$package" in
  "$tmp/venv/"*) ;;
  *) fail "antdt imported from $package, not from the venv" ;;
esac
for stub in sharding monitor agent; do
  for suffix in _pb2 _pb2_grpc; do
    [ -f "$package/v1/$stub$suffix.py" ] || fail "antdt/v1/$stub$suffix.py not installed"
  done
done
# Every module of every subpackage.
(cd "$tmp/src/python/antdt" && find . -name '*.py' -not -path './v1/*') | while read -r module; do
  [ -f "$package/$module" ] || fail "antdt/${module#./} not installed"
done
echo "PASS: antdt $version installed in $package"
