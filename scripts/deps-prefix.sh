#!/bin/bash
# deps-prefix.sh: for the GPU machine, which has no package registry. Unpacks the Debian packages
# in .deps/debs (downloaded here by scripts/fetch-deps.sh) into a prefix, writes a CMake initial
# cache for it, and prints the environment the build and the loader need. Use:
#   eval "$(bash scripts/deps-prefix.sh)"; cmake -C "$BATON_DEPS_PREFIX/deps.cmake" ...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
P=${BATON_DEPS_PREFIX:-/tmp/baton-deps}
L=$P/usr/lib/x86_64-linux-gnu
if [ ! -f "$P/.unpacked-2" ]; then
  mkdir -p "$P"
  for f in "$root"/.deps/debs/*.deb; do dpkg -x "$f" "$P"; done
  # The packages' .pc files say prefix=/usr: point them at the prefix, rather than setting
  # PKG_CONFIG_SYSROOT_DIR, which would also move the -I of every other .pc (baton's own, in the
  # package test) under the prefix.
  for pc in "$L"/pkgconfig/*.pc "$P"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i "s#=/usr#=$P/usr#" "$pc"
  done
  cat > "$P/deps.cmake" <<CM
set(CMAKE_PREFIX_PATH "$P/usr" CACHE PATH "")
set(CMAKE_EXE_LINKER_FLAGS "-Wl,-rpath-link,$L -Wl,-rpath-link,$L/openblas-pthread" CACHE STRING "")
set(CMAKE_SHARED_LINKER_FLAGS "-Wl,-rpath-link,$L -Wl,-rpath-link,$L/openblas-pthread" CACHE STRING "")
CM
  touch "$P/.unpacked-2"
fi
echo "export BATON_DEPS_PREFIX=$P"
echo "export PKG_CONFIG_PATH=$L/pkgconfig"
echo "export LD_LIBRARY_PATH=$L:$L/openblas-pthread\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
