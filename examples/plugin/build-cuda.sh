#!/bin/bash
# build-cuda.sh: builds the example plugin with its CUDA kernel outside baton's build, by hand, as
# docs/plugins.md's recipe says: only baton's headers, nvcc for the .cu, the C compiler for the
# rest, the static CUDA runtime kept inside the plugin. CI runs it where nvcc is present.
#   bash examples/plugin/build-cuda.sh OUT_DIR [BATON_INCLUDE_DIR]
#   CUDA_HOME (default /usr/local/cuda), CUDA_ARCH (default sm_90), CC (default cc)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-cuda.sh OUT_DIR [BATON_INCLUDE_DIR]}
inc=${2:-$here/../../include}
cuda=${CUDA_HOME:-/usr/local/cuda}
arch=${CUDA_ARCH:-sm_90}
cc=${CC:-cc}
mkdir -p "$out"
# The kernel: position-independent, hidden (only the entry point and the version are exported).
"$cuda/bin/nvcc" -c -O3 -arch="$arch" -Xcompiler -fPIC,-fvisibility=hidden \
  -o "$out/scale_cuda.o" "$here/scale_cuda.cu"
# The registration: baton.h only; EXAMPLE_PLUGIN_CUDA adds the cuda implementation.
"$cc" -c -O2 -fPIC -fvisibility=hidden -DEXAMPLE_PLUGIN_CUDA=1 -I"$inc" \
  -o "$out/scale_plugin.o" "$here/scale_plugin.c"
# The link: the static CUDA runtime (the plugin needs no libcudart at load time, like libbaton),
# its symbols kept inside (--exclude-libs), and --no-undefined so that a call to baton that does
# not go through the table given to baton_plugin_init fails here and not at load.
"$cc" -shared -o "$out/libscale_cuda_plugin.so" "$out/scale_plugin.o" "$out/scale_cuda.o" \
  -L"$cuda/lib64" -lcudart_static -lrt -ldl -lpthread -lstdc++ \
  -Wl,--no-undefined -Wl,--exclude-libs,ALL
echo "$out/libscale_cuda_plugin.so"
