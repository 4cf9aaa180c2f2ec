# Sourced by scripts/build.sh and scripts/sanitize.sh: with ccache installed
# (scripts/install-deps.sh installs it), compiles go through it, its cache in
# ~/.cache/antdt/ccache, shared by every checkout on the machine: paths are
# taken relative to the checkout (CCACHE_BASEDIR) and the working directory
# is left out of the hash, so a fresh clone elsewhere (CI's) reuses what an
# earlier build compiled. Sets LAUNCHER to the CMake arguments (none without
# ccache, or with ANTDT_CCACHE=0).
LAUNCHER=()
if [ "${ANTDT_CCACHE:-1}" != "0" ] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/antdt/ccache}
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-10G}
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
