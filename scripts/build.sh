#!/usr/bin/env bash
# build.sh - installs what a fresh Debian/Ubuntu machine lacks, then
# configures and builds scree into ./build (or $SCREE_BUILD_DIR).
set -eu
cd "$(dirname "$0")/.."
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v cc >/dev/null || need+=(gcc)
command -v c++ >/dev/null || need+=(g++) # tests/emu is C++
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -f /usr/include/sqlite3.h ] || need+=(libsqlite3-dev)
[ -f /usr/include/check.h ] || need+=(check)
ls /usr/lib/*/libsubunit.a >/dev/null 2>&1 || need+=(libsubunit-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
build=${SCREE_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSCREE_WERROR=ON "$@" >/dev/null
cmake --build "$build"
