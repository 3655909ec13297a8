#!/usr/bin/env bash
# setup_torch.sh DIR: PyTorch for bench/cpu/peers.py on a CPU-only machine, in DIR (not the system's
# site-packages). PyPI's Linux wheel is the CUDA build and pulls some GB of CUDA wheels; its CPU ops
# need none of them. This installs the wheel alone (--no-deps, with the few pure-Python packages it
# imports, and numpy for baton_export) and, for the CUDA libraries it links at load time but never
# calls on the CPU, builds stubs that abort if called. Prints the environment to run peers.py and
# bench_llm.py with.
# Needs: pip, gcc, nm; the CUDA toolkit's lib64 where it exists (libcudart, libcublas, ... are
# taken from there; stubs are made only for what is missing).
set -euo pipefail
dir=${1:?usage: setup_torch.sh DIR}
mkdir -p "$dir/site" "$dir/stubs"
pip install --quiet --no-deps --target "$dir/site" torch
pip install --quiet --target "$dir/site" typing_extensions filelock sympy networkx jinja2 fsspec numpy
lib="$dir/site/torch/lib"
cuda=${CUDA_LIB:-/usr/local/cuda/lib64}
missing=$(cd "$lib" && LD_LIBRARY_PATH="$cuda:." ldd ./*.so 2>/dev/null | awk '/not found/ {print $1}' | sort -u)
undef=$(nm -D --undefined-only "$lib"/*.so | awk '{print $2}' | sed 's/@.*//' | sort -u)
for so in $missing; do
  case $so in
    libcufile*) pat='^(cuFile|cufile)' ;;
    libcusparseLt*) pat='^cusparseLt' ;;
    libnvshmem*) pat='^nvshmem' ;;
    libnccl*) pat='^p?nccl' ;;
    *) echo "setup_torch.sh: no stub recipe for $so" >&2; exit 1 ;;
  esac
  { echo '#include <stdlib.h>'; grep -E "$pat" <<<"$undef" | sed 's/.*/void &(void) { abort(); }/'; } > "$dir/stubs/$so.c"
  ver=$(readelf -V "$lib"/*.so 2>/dev/null | awk -v f="$so" '$0 ~ "File: "f {getline; print $3; exit}')
  if [ -n "$ver" ]; then
    echo "$ver { global: *; };" > "$dir/stubs/$so.map"
    gcc -shared -fPIC -o "$dir/stubs/$so" "$dir/stubs/$so.c" -Wl,-soname,"$so" -Wl,--version-script="$dir/stubs/$so.map"
  else
    gcc -shared -fPIC -o "$dir/stubs/$so" "$dir/stubs/$so.c" -Wl,-soname,"$so"
  fi
done
# A system NCCL older than the wheel's lacks symbols torch binds at load: stub it as well.
if ! LD_LIBRARY_PATH="$dir/stubs:$cuda" PYTHONPATH="$dir/site" python3 -c 'import torch' 2>/dev/null; then
  { echo '#include <stdlib.h>'; grep -E '^p?nccl' <<<"$undef" | sed 's/.*/void &(void) { abort(); }/'; } > "$dir/stubs/libnccl.so.2.c"
  gcc -shared -fPIC -o "$dir/stubs/libnccl.so.2" "$dir/stubs/libnccl.so.2.c" -Wl,-soname,libnccl.so.2
fi
LD_LIBRARY_PATH="$dir/stubs:$cuda" PYTHONPATH="$dir/site" python3 -c 'import torch; print("torch", torch.__version__)'
echo "export LD_LIBRARY_PATH=$dir/stubs:$cuda PYTHONPATH=$dir/site"
