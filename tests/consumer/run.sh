#!/bin/bash
# run.sh: installs baton from a build tree into a fresh prefix, builds examples/infer.c out of
# tree against it four ways (CMake find_package and pkg-config, each shared and static), checks
# what each binary needs at load time, and runs each on the installed rfc.json (CPU path).
#   bash tests/consumer/run.sh BUILD_DIR [sanitize]      (ctest runs it as the `package` test)
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
flags=()
[ "${2:-}" = sanitize ] && flags=(-fsanitize=address,undefined -fno-omit-frame-pointer)
work=$build/package-test
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
t0=$(date +%s)
step() { echo "package: $* ($(( $(date +%s) - t0 )) s)"; }

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
libdir=$(dirname "$(find "$prefix" -name baton.pc -path '*/pkgconfig/*')")
libdir=${libdir%/pkgconfig}
for f in include/baton/baton.h "${libdir#"$prefix"/}/libbaton.a" \
         "${libdir#"$prefix"/}/cmake/baton/baton-config.cmake" share/baton/plans/rfc.json \
         share/doc/baton/api.md share/doc/baton/examples/infer.c bin/baton; do
  [ -e "$prefix/$f" ] || { echo "FAIL: the install has no $f"; exit 1; }
done
ls "$libdir"/libbaton.so.* > /dev/null
plan=$prefix/share/baton/plans/rfc.json
example=$prefix/share/doc/baton/examples/infer.c
step "installed into $prefix"

# CMake: find_package(baton CONFIG REQUIRED), both targets.
cmake -S "$src/tests/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DBATON_EXAMPLE="$example" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_FLAGS="${flags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${flags[*]}" > "$work/cmake.log" ||
  { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/cmake" -j2 > "$work/cmake-build.log" 2>&1 ||
  { cat "$work/cmake-build.log"; exit 1; }
step "built with find_package(baton)"

# pkg-config: baton.pc (shared; --static lists what the archive needs) and baton-static.pc.
export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
cc=${CC:-cc}
# shellcheck disable=SC2046
$cc "${flags[@]}" -o "$work/infer_pc_shared" "$example" $(pkg-config --cflags --libs baton) \
    -Wl,-rpath,"$libdir"
# shellcheck disable=SC2046
$cc "${flags[@]}" -o "$work/infer_pc_static" "$example" $(pkg-config --cflags --libs baton-static)
priv=$(pkg-config --static --libs baton)
for lib in -ljansson -luv -lopenblas; do
  case " $priv " in *" $lib "*) ;; *) echo "FAIL: pkg-config --static --libs baton lacks $lib: $priv"; exit 1 ;; esac
done
step "built with pkg-config"

for exe in "$work/cmake/infer_cmake_shared" "$work/cmake/infer_cmake_static" \
           "$work/infer_pc_shared" "$work/infer_pc_static"; do
  name=$(basename "$exe")
  needed=$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  case "$name:$needed" in
    *shared:*libbaton.so.*) ;;
    *static:*libbaton.so*) echo "FAIL: $name (static) needs libbaton.so: $needed"; exit 1 ;;
    *static:*) ;;
    *) echo "FAIL: $name (shared) does not need libbaton.so: $needed"; exit 1 ;;
  esac
  case "$needed" in *libcudart*|*libcublas*) echo "FAIL: $name needs CUDA at load time: $needed"; exit 1 ;; esac
  out=$("$exe" "$plan" 2> "$work/$name.err") || { echo "FAIL: $name $plan"; cat "$work/$name.err"; exit 1; }
  echo "$out" | grep -qE "^[A-Za-z0-9_.-]+ \([a-z0-9]+\):" ||
    { echo "FAIL: $name printed no output:"; echo "$out"; exit 1; }
  step "$name ran rfc.json (needs: $needed)"
done
rm -rf "$work"
step "ok"
