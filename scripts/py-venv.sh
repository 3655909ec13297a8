#!/bin/bash
# py-venv.sh: makes (or checks) the Python environment of the PyTorch exporter: a venv with
# pinned torch, transformers, tokenizers, safetensors, numpy, pytest and unicodedata2 (the
# tokenizer's Unicode tables' check) from PyPI, and ./python (baton_export)
# installed into it. Prints the venv's path on the last line.
#
# PyPI's Linux torch wheels are the CUDA ones: `import torch` loads libcudart, cuDNN, NCCL and the
# rest even on a CPU-only machine, so the nvidia-* wheels they depend on are needed (about 5 GB
# installed, 2 min 15 s on the development machine; the CPU-only wheels' index is not reachable
# here). The venv is kept, so later calls only check the pins (about 20 s).
#
#   bash scripts/py-venv.sh        env: VENV (default .venv-py)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
VENV=${VENV:-$root/.venv-py}
PINS=(torch==2.15.0 transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 numpy==2.4.6
      pytest==9.2.0 unicodedata2==15.0.0)

if ! python3 -c "import ensurepip" 2>/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/python" -m pip freeze 2>/dev/null | grep -q "^torch==2\.15\.0\b"; then
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  echo "py-venv: installing ${PINS[*]} (a few minutes, once)" >&2
fi
"$VENV/bin/python" -m pip install -q "${PINS[@]}" >&2
"$VENV/bin/python" -m pip install -q --no-deps --force-reinstall ./python >&2
echo "$VENV"
