#!/bin/bash
# ci-release.sh: the documented release build (-DBATON_TESTS=OFF: no tests, no benchmarks, no test
# hooks), built with -Werror and installed; its exports checked; then linked from outside the tree
# (CMake find_package, pkg-config, a plain Makefile, a plugin on baton::headers) with Jansson's and
# OpenBLAS's development files out of sight, as on a machine that has only their runtime packages:
# libbaton.so's users must not need them (tests/consumer/run.sh shared-only).
#   BUILD  build directory (default build-release); CPU-only unless BATON_CMAKE_ARGS says otherwise
# The development files are hidden in a private mount namespace (unshare, an overlay on /usr with
# their paths whited out), which needs root; elsewhere that step is skipped with a note.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD:-$root/build-release}
jobs=$(nproc 2>/dev/null || echo 2)

mkdir -p "$build"
log=$build/ci-release.log
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBATON_TESTS=OFF -DBATON_CUDA=OFF \
      -DBATON_WERROR=ON ${BATON_CMAKE_ARGS:-} > "$log" 2>&1 || { cat "$log"; exit 1; }
cmake --build "$build" -j"$jobs" >> "$log" 2>&1 || { tail -n 60 "$log"; exit 1; }
echo "release: built $build"

python3 scripts/check-exports.py "$build/libbaton.so" include/baton/*.h \
        --expect 'baton_(?!ffi_).*'
python3 scripts/check-exports.py "$build/libbaton.a" include/baton/*.h \
        --expect 'baton_(?!ffi_).*' --report-only > "$build/exports-static.log"
head -n 1 "$build/exports-static.log"
# No test hooks in what a release installs (scheduler/testing.c).
if nm -g --defined-only "$build/libbaton.a" | grep -qw runtime_gpu_only; then
  echo "FAIL: the release libbaton.a carries the test hooks (scheduler/testing.c)"
  exit 1
fi

# The development files to hide: what the -dev packages install, and the alternatives' links
# (update-alternatives makes them, so dpkg -L does not list them) that resolve into those files.
hide_list() {
  local pkgs
  pkgs=$(dpkg-query -W -f='${Package} ${Status}\n' 'libjansson-dev' 'libopenblas*-dev' \
           2>/dev/null | awk '$NF == "installed" {print $1}')
  [ -n "$pkgs" ] || return 0
  # shellcheck disable=SC2086
  dpkg -L $pkgs | while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] && echo "$f"
  done | sort -u > "$build/hide.txt"
  # follow each link hop by hop: the last hop may be a runtime file (libopenblas.so ->
  # /etc/alternatives/... -> openblas-pthread/libopenblas.so -> libopenblasp-r0.3.21.so)
  find /usr/lib /usr/include -type l 2>/dev/null | while read -r l; do
    t=$l
    for _ in 1 2 3 4 5; do
      [ -L "$t" ] || break
      n=$(readlink "$t")
      case $n in /*) t=$n ;; *) t=$(dirname "$t")/$n ;; esac
      if grep -qxF "$t" "$build/hide.txt"; then echo "$l"; break; fi
    done
  done
  cat "$build/hide.txt"
}

if [ "$(id -u)" -ne 0 ] || ! command -v unshare > /dev/null || ! command -v dpkg > /dev/null; then
  echo "release: not root, or no unshare/dpkg: the link without development files is skipped;"
  echo "  the consumer test runs with them present instead"
  bash tests/consumer/run.sh "$build"
  exit 0
fi
hide_list | sort -u | grep '^/usr/' > "$build/hide-all.txt" || true
echo "release: hiding $(wc -l < "$build/hide-all.txt") files of the Jansson and OpenBLAS" \
     "development packages"
unshare -m bash -s "$build" "$root" <<'INNER'
set -euo pipefail
build=$1
root=$2
mount --make-rprivate /
ov=$(mktemp -d)
mount -t tmpfs tmpfs "$ov"
mkdir -p "$ov/upper" "$ov/work"
while read -r f; do
  rel=${f#/usr/}
  mkdir -p "$ov/upper/$(dirname "$rel")"
  mknod "$ov/upper/$rel" c 0 0 # an overlay whiteout: the file is gone from the merged /usr
done < "$build/hide-all.txt"
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$ov/upper,workdir=$ov/work" /usr
for f in /usr/include/jansson.h /usr/lib/x86_64-linux-gnu/libjansson.so; do
  [ ! -e "$f" ] || { echo "FAIL: $f is still visible"; exit 1; }
done
if pkg-config --exists jansson; then echo "FAIL: jansson.pc is still visible"; exit 1; fi
bash "$root/tests/consumer/run.sh" "$build" shared-only
INNER
echo "release: ok"
