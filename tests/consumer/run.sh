#!/bin/bash
# run.sh: installs baton from a build tree into a fresh prefix, builds examples/infer.c out of
# tree against it (CMake find_package and pkg-config, each shared and static, and a plain
# Makefile), builds the example plugin against baton::headers, checks what each binary needs at
# load time and that no RUNPATH has an empty entry, and runs each on the installed rfc.json.
#   bash tests/consumer/run.sh BUILD_DIR [sanitize] [shared-only]
# (ctest runs it as the `package` test.) shared-only: the machine has no Jansson or OpenBLAS
# development files (scripts/ci-release.sh hides them): the shared library must still build and
# run from CMake, pkg-config and make, and baton::baton_static must be absent, not broken.
set -euo pipefail
build=$(cd "$1" && pwd)
shift
src=$(cd "$(dirname "$0")/../.." && pwd)
flags=()
shared_only=0
for a in "$@"; do
  case $a in
    sanitize) flags=(-fsanitize=address,undefined -fno-omit-frame-pointer) ;;
    shared-only) shared_only=1 ;;
    "") ;; # ctest passes an empty argument for an unset option
    *) echo "run.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
work=$build/package-test
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
t0=$(date +%s)
step() { echo "package: $* ($(( $(date +%s) - t0 )) s)"; }
# An empty RUNPATH entry ("dir:" or "::") makes the loader search the current directory.
check_runpath() {
  local rp
  rp=$(readelf -d "$1" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
  case ":$rp:" in
    ::) ;;
    *::*) echo "FAIL: $1 has an empty RUNPATH entry: [$rp]"; exit 1 ;;
  esac
}
check_runpath "$build/libbaton.so"

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
libdir=$(dirname "$(find "$prefix" -name baton.pc -path '*/pkgconfig/*')")
libdir=${libdir%/pkgconfig}
for f in include/baton/baton.h "${libdir#"$prefix"/}/libbaton.a" \
         "${libdir#"$prefix"/}/cmake/baton/baton-config.cmake" share/baton/plans/rfc.json \
         share/doc/baton/api.md share/doc/baton/examples/infer.c bin/baton; do
  [ -e "$prefix/$f" ] || { echo "FAIL: the install has no $f"; exit 1; }
done
ls "$libdir"/libbaton.so.* > /dev/null
check_runpath "$(ls "$libdir"/libbaton.so.*.*.*)"
check_runpath "$prefix/bin/baton"
plan=$prefix/share/baton/plans/rfc.json
example=$prefix/share/doc/baton/examples/infer.c
step "installed into $prefix"

# CMake: find_package(baton CONFIG REQUIRED), both targets.
static=ON
[ $shared_only = 1 ] && static=OFF
cmake -S "$src/tests/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DBATON_EXAMPLE="$example" -DCMAKE_BUILD_TYPE=Release -DBATON_CONSUMER_STATIC=$static \
      -DBATON_PLUGIN_EXAMPLE="$prefix/share/doc/baton/examples/plugin/scale_plugin.c" \
      -DCMAKE_C_FLAGS="${flags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${flags[*]}" > "$work/cmake.log" ||
  { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/cmake" -j2 > "$work/cmake-build.log" 2>&1 ||
  { cat "$work/cmake-build.log"; exit 1; }
if [ $shared_only = 1 ]; then
  grep -q "baton::baton_static needs the development files of" "$work/cmake.log" ||
    { echo "FAIL: find_package(baton) did not say why baton::baton_static is absent"; \
      cat "$work/cmake.log"; exit 1; }
fi
step "built with find_package(baton) (plugin against baton::headers)"

# pkg-config: baton.pc (shared; --static lists what the archive needs) and baton-static.pc.
export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
cc=${CC:-cc}
# shellcheck disable=SC2046
$cc "${flags[@]}" -o "$work/infer_pc_shared" "$example" $(pkg-config --cflags --libs baton) \
    -Wl,-rpath,"$libdir"
if [ $shared_only = 0 ]; then
  # shellcheck disable=SC2046
  $cc "${flags[@]}" -o "$work/infer_pc_static" "$example" $(pkg-config --cflags --libs baton-static)
  priv=$(pkg-config --static --libs baton)
  for lib in -ljansson -luv -lopenblas; do
    case " $priv " in *" $lib "*) ;; *) echo "FAIL: pkg-config --static --libs baton lacks $lib: $priv"; exit 1 ;; esac
  done
fi
step "built with pkg-config"
make -s -f "$src/tests/consumer/Makefile" BATON_EXAMPLE="$example" OUT="$work" \
  CFLAGS="${flags[*]}" LDFLAGS="${flags[*]}"
step "built with make"

exes=("$work/cmake/infer_cmake_shared" "$work/infer_pc_shared" "$work/infer_make_shared")
[ $shared_only = 0 ] && exes+=("$work/cmake/infer_cmake_static" "$work/infer_pc_static")

for exe in "${exes[@]}"; do
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
